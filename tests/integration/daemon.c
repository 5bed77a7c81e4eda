// SPDX-License-Identifier: MIT
/*
 * Start, talk to and stop a real djinnd; see daemon.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/io_uring.h>

#include "array_size.h"
#include "daemon.h"
#include "fdstore_standin.h"

int64_t dj_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)(mono_ns() / NSEC_PER_MSEC);
}

static void sleep_ms(int ms)
{
	struct timespec ts = ns_to_timespec((uint64_t)ms * NSEC_PER_MSEC);

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

uint64_t dj_next_id(void)
{
	static uint64_t next = 1000;

	return __atomic_add_fetch(&next, 1, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------------- */
/* The daemon */

const char *djd_binary(void)
{
	static char path[PATH_MAX];
	const char *env = getenv("DJINND");
	char self[PATH_MAX];
	ssize_t n;

	if (env && *env)
		return env;
	if (path[0])
		return path;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return "build/djinnd/djinnd";
	self[n] = 0;
	/* BUILD/tests/integration/test_NAME -> BUILD/djinnd/djinnd */
	snprintf(path, sizeof(path), "%s/../../djinnd/djinnd", dirname(self));
	return path;
}

int djd_make_model(const struct djd *d, const char *name, const char *args)
{
	char self[PATH_MAX], script[PATH_MAX + 32], cmd[2 * PATH_MAX + 256];
	const char *env = getenv("DJINN_MKMODEL");
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	int ret;

	if (n <= 0)
		return -ENOENT;
	self[n] = 0;
	/* $DJINN_MKMODEL (scripts/gpu-kit.sh, whose tests run outside a
	 * build tree), else BUILD/tests/integration/test_NAME -> the
	 * checkout's scripts/ */
	if (env && *env)
		snprintf(script, sizeof(script), "%s", env);
	else
		snprintf(script, sizeof(script),
			 "%s/../../../scripts/mkmodel.py", dirname(self));
	snprintf(cmd, sizeof(cmd), "python3 %s %s %s/models/%s", script, args,
		 d->dir, name);
	ret = system(cmd);
	return ret == 0 ? 0 : -EIO;
}

static char start_error[256];
/* After djd_start() failed because the daemon exited: its err line about
 * io_uring ("io_uring: Function not implemented"), else "". */
static char start_uring[128];

const char *djd_start_error(void)
{
	return start_error;
}

/*
 * Whether this kernel lets this process have no io_uring at all: not
 * built in, or turned off (kernel.io_uring_disabled), or refused by a
 * seccomp filter. io_uring_setup(2) then fails with ENOSYS or EPERM,
 * which is returned; 0 when it works or fails otherwise.
 */
static int io_uring_off(void)
{
	struct io_uring_params p;
	long fd;

	memset(&p, 0, sizeof(p));
	fd = syscall(__NR_io_uring_setup, 1, &p);
	if (fd >= 0) {
		close((int)fd);
		return 0;
	}
	return errno == ENOSYS || errno == EPERM ? errno : 0;
}

int djd_can_run(const char *cpu_mem)
{
	char want[64];
	struct djd d;
	int off, ret;

	if (access(djd_binary(), X_OK)) {
		printf("djinnd not found at %s (set DJINND): skipped\n",
		       djd_binary());
		return 77;
	}
	ret = djd_start(&d, cpu_mem, 10000);
	if (!ret)
		return djd_stop(&d, 10000) ? 1 : 0;
	/* A skip only where io_uring is off here and djinnd stopped for
	 * that (server_init()'s "io_uring: <errno>" line, the very errno):
	 * any other failure at start, one about io_uring too, fails. */
	off = ret == -ECHILD ? io_uring_off() : 0;
	snprintf(want, sizeof(want), "io_uring: %s", off ? strerror(off) : "");
	if (off && !strcmp(start_uring, want)) {
		printf("djinnd cannot run here: io_uring_setup() fails with "
		       "%s (%s): skipped\n",
		       off == ENOSYS ? "ENOSYS" : "EPERM", strerror(off));
		return 77;
	}
	printf("djinnd does not start: %s\n",
	       start_error[0] ? start_error : strerror(-ret));
	return 1;
}

/* The last line of the log into start_error, its err line about io_uring
 * into start_uring. */
static void keep_last_line(const struct djd *d)
{
	static const char uring[] = " err: io_uring: ";
	char line[sizeof(start_error)];
	FILE *f = fopen(d->log, "r");

	start_uring[0] = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		const char *u = strstr(line, uring);

		if (line[0] && line[0] != '\n')
			memcpy(start_error, line, sizeof(line));
		if (u && !start_uring[0]) {
			snprintf(start_uring, sizeof(start_uring), "%s",
				 u + strlen(" err: "));
			start_uring[strcspn(start_uring, "\n")] = 0;
		}
	}
	fclose(f);
	start_error[strcspn(start_error, "\n")] = 0;
}

static int rm_one(const char *path, const struct stat *st, int type,
		  struct FTW *ftw)
{
	remove(path); /* what cannot go stays */
	return 0;
}

static void rm_dir(struct djd *d)
{
	char p[sizeof(d->dir) + 16];

	if (!d->dir[0])
		return;
	snprintf(p, sizeof(p), "%s/models", d->dir);
	nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	unlink(d->sock);
	unlink(d->admin);
	unlink(d->log);
	snprintf(p, sizeof(p), "%s/djinnd.log", d->dir);
	unlink(p);
	rmdir(d->dir);
	d->dir[0] = 0;
}

static bool can_connect(const char *path)
{
	int fd = dj_connect(path);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

int dj_connect_tcp(unsigned int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int ret = -errno;

		close(fd);
		return ret;
	}
	return fd;
}

/* A port the kernel finds free now, once: closed again, it may hand out
 * the same one next (a daemon's TLS and metrics ports were seen to
 * collide), so the ports given lately are not given again. */
static unsigned int free_port_once(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	unsigned int port = 0;

	if (fd < 0)
		return 0;
	if (!bind(fd, (struct sockaddr *)&sa, sizeof(sa)) &&
	    !getsockname(fd, (struct sockaddr *)&sa, &len))
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

unsigned int dj_free_port(void)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static unsigned int given[64], next;

	pthread_mutex_lock(&lock);
	for (int tries = 0; tries < 1000; tries++) {
		unsigned int port = free_port_once();
		bool seen = false;

		for (unsigned int i = 0; i < 64 && port && !seen; i++)
			seen = given[i] == port;
		if (seen)
			continue;
		given[next++ % 64] = port;
		pthread_mutex_unlock(&lock);
		return port;
	}
	pthread_mutex_unlock(&lock);
	return 0;
}

static bool can_connect_tcp(unsigned int port)
{
	int fd = dj_connect_tcp(port);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

int djd_start(struct djd *d, const char *cpu_mem, unsigned int lease_ms)
{
	return djd_start_set(d, cpu_mem, lease_ms, NULL);
}

int djd_start_set(struct djd *d, const char *cpu_mem, unsigned int lease_ms,
		  const char *set)
{
	const char *extra[] = { "--set", set, NULL };

	return djd_start_args(d, cpu_mem, lease_ms, set ? extra : NULL);
}

/* Fork and exec djinnd as @d says, its output to d->log (appended to
 * with @append): its pid, or -errno. */
static pid_t spawn(struct djd *d, const char *bin, bool append)
{
	char listen[sizeof(d->sock) + 8], lease[24], metrics[32];
	char models[sizeof(d->dir) + 8];
	const char *const *extra = d->extra;
	const char *cpu_mem = d->cpu_mem;
	pid_t parent = getpid(), pid;

	snprintf(listen, sizeof(listen), "unix:%s", d->sock);
	snprintf(lease, sizeof(lease), "%u", d->lease_ms);
	snprintf(models, sizeof(models), "%s/models", d->dir);
	snprintf(metrics, sizeof(metrics), "tcp:127.0.0.1:%u", d->metrics_port);

	fflush(NULL);
	if (d->store)
		djd_store_lock(d->store);
	pid = fork();
	if (pid > 0 && d->store)
		djd_store_unlock(d->store);
	if (pid < 0)
		return -errno;
	if (!pid) {
		int fd =
			open(d->log,
			     O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC),
			     0600);
		int nul = open("/dev/null", O_RDONLY);

		/* Die with the test, whatever kills it. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		if (fd < 0 || nul < 0)
			_exit(127);
		dup2(nul, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		if (d->store)
			djd_store_pass(d->store);
		const char *argv[40] = {
			bin,
			"--foreground",
			"--listen",
			listen,
			"--admin-socket",
			d->admin,
			"--cpu-mem",
			cpu_mem,
			"--lease-ms",
			lease,
			"--metrics",
			metrics,
			"--model-dir",
			models,
			"--threads",
			"2",
			"--log-level",
			getenv("DJINN_TEST_VERBOSE") ? "debug" : "info",
		};
		/* $DJINND_EXTRA: flags for every djinnd a test starts,
		 * split at spaces (tests/integration/test_device_only.sh) */
		char *more = getenv("DJINND_EXTRA") ?
				     strdup(getenv("DJINND_EXTRA")) :
				     NULL;
		size_t n = 0;

		while (argv[n])
			n++;
		for (; extra && *extra && n < 39; extra++)
			argv[n++] = *extra;
		for (char *f = more ? strtok(more, " ") : NULL; f && n < 39;
		     f = strtok(NULL, " "))
			argv[n++] = f;
		execv(bin, (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	return pid;
}

int djd_start_args(struct djd *d, const char *cpu_mem, unsigned int lease_ms,
		   const char *const *extra)
{
	return djd_start_store(d, cpu_mem, lease_ms, extra, NULL);
}

int djd_start_store(struct djd *d, const char *cpu_mem, unsigned int lease_ms,
		    const char *const *extra, struct djd_store *st)
{
	const char *bin = djd_binary();
	int64_t deadline;

	memset(d, 0, sizeof(*d));
	d->store = st;
	d->pid = -1;
	start_error[0] = 0;
	start_uring[0] = 0;
	if (access(bin, X_OK)) {
		fprintf(stderr, "djinnd binary %s: %s (set DJINND)\n", bin,
			strerror(errno));
		return -ENOENT;
	}
	strcpy(d->dir, "/tmp/djinn-it.XXXXXX");
	if (!mkdtemp(d->dir)) {
		d->dir[0] = 0;
		return -errno;
	}
	snprintf(d->sock, sizeof(d->sock), "%s/djinnd.sock", d->dir);
	snprintf(d->admin, sizeof(d->admin), "%s/admin.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/stderr.log", d->dir);
	snprintf(d->cpu_mem, sizeof(d->cpu_mem), "%s", cpu_mem);
	d->lease_ms = lease_ms;
	d->extra = extra;
	d->metrics_port = dj_free_port();
	if (!d->metrics_port) {
		rm_dir(d);
		return -EADDRNOTAVAIL;
	}
	d->pid = spawn(d, bin, false);
	if (d->pid < 0) {
		int ret = d->pid;

		d->pid = -1;
		rm_dir(d);
		return ret;
	}

	deadline = dj_now_ms() + 20000;
	while (dj_now_ms() < deadline) {
		int status;

		if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
			fprintf(stderr, "djinnd exited at start (status %#x)\n",
				status);
			d->pid = -1;
			keep_last_line(d);
			djd_log_tail(d, 4096);
			rm_dir(d);
			return -ECHILD;
		}
		if (can_connect(d->sock) && can_connect(d->admin) &&
		    can_connect_tcp(d->metrics_port))
			return 0;
		sleep_ms(5);
	}
	fprintf(stderr, "djinnd: sockets not accepting after 20 s\n");
	djd_log_tail(d, 4096);
	djd_kill(d);
	return -ETIMEDOUT;
}

int djd_restart(struct djd *d, int timeout_ms)
{
	int64_t deadline = dj_now_ms() + timeout_ms;
	pid_t next = spawn(d, djd_binary(), true), old = d->pid;
	int status;

	if (next < 0)
		return next;
	/* the successor takes over; the predecessor exits by itself */
	while (dj_now_ms() < deadline) {
		if (waitpid(next, &status, WNOHANG) == next) {
			fprintf(stderr, "the successor exited (status %#x)\n",
				status);
			djd_log_tail(d, 4096);
			return -ECHILD;
		}
		if (waitpid(old, &status, WNOHANG) == old) {
			d->pid = next;
			if (WIFEXITED(status) && !WEXITSTATUS(status))
				return 0;
			fprintf(stderr, "the predecessor ended with %#x\n",
				status);
			djd_log_tail(d, 4096);
			return -EIO;
		}
		sleep_ms(5);
	}
	fprintf(stderr, "no restart within %d ms\n", timeout_ms);
	djd_log_tail(d, 4096);
	kill(next, SIGKILL);
	waitpid(next, &status, 0);
	return -ETIMEDOUT;
}

pid_t djd_spawn_next(struct djd *d)
{
	return spawn(d, djd_binary(), true);
}

/* The sanitizer report's SUMMARY line in the log (else its first line
 * that shows a report) into @out: whether there is one. */
static bool report_line(const struct djd *d, char *out, size_t len)
{
	static const char *const bad[] = {
		"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
		"runtime error",	   "WARNING: ThreadSanitizer",
		"Segmentation fault",
	};
	bool found = false;
	char line[4096];
	FILE *f = fopen(d->log, "r");

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		bool summary = !strncmp(line, "SUMMARY: ", 9);

		for (size_t i = 0; !summary && !found && i < ARRAY_SIZE(bad);
		     i++)
			summary = strstr(line, bad[i]) != NULL;
		if (summary) {
			size_t n = strcspn(line, "\n");

			n = n < len ? n : len - 1;
			memcpy(out, line, n);
			out[n] = 0;
			found = true;
		}
	}
	fclose(f);
	return found;
}

bool djd_log_has(const struct djd *d, const char *what)
{
	FILE *f = fopen(d->log, "r");
	char line[512];
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	fclose(f);
	return found;
}

bool djd_log_has_report(const struct djd *d)
{
	char line[256];

	return report_line(d, line, sizeof(line));
}

void djd_log_tail(const struct djd *d, long bytes)
{
	char buf[1024];
	FILE *f = fopen(d->log, "r");
	size_t n;

	if (!f)
		return;
	if (fseek(f, 0, SEEK_END) == 0 && ftell(f) > bytes)
		fseek(f, -bytes, SEEK_END);
	else
		fseek(f, 0, SEEK_SET);
	fprintf(stderr, "---- djinnd log (%s), last %ld bytes ----\n", d->log,
		bytes);
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		fwrite(buf, 1, n, stderr);
	fprintf(stderr, "---- end of djinnd log ----\n");
	fclose(f);
}

/* Wait for the daemon until @deadline: 0 with @status, or -ETIMEDOUT. */
static int reap(struct djd *d, int64_t deadline, int *status)
{
	do {
		pid_t r = waitpid(d->pid, status, WNOHANG);

		if (r == d->pid) {
			d->pid = -1;
			return 0;
		}
		if (r < 0 && errno != EINTR) {
			d->pid = -1;
			return -errno;
		}
		sleep_ms(2);
	} while (dj_now_ms() < deadline);
	return -ETIMEDOUT;
}

int djd_stop(struct djd *d, int timeout_ms)
{
	int status = 0, ret;

	if (d->pid <= 0) {
		rm_dir(d);
		return -ECHILD;
	}
	kill(d->pid, SIGTERM);
	ret = reap(d, dj_now_ms() + timeout_ms, &status);
	if (ret == -ETIMEDOUT) {
		fprintf(stderr, "djinnd: still running %d ms after SIGTERM\n",
			timeout_ms);
		djd_log_tail(d, 4096);
		djd_kill(d);
		return ret;
	}
	if (ret) {
		fprintf(stderr, "djinnd: waitpid: %s\n", strerror(-ret));
	} else if (WIFSIGNALED(status)) {
		snprintf(d->end, sizeof(d->end), "killed by signal %d",
			 WTERMSIG(status));
		ret = -EIO;
	} else {
		snprintf(d->end, sizeof(d->end), "exit status %d",
			 WEXITSTATUS(status));
		ret = WEXITSTATUS(status) ? -EIO : 0;
	}
	if (!ret || ret == -EIO) {
		char line[sizeof(d->end)];

		if (report_line(d, line, sizeof(line))) {
			snprintf(d->end, sizeof(d->end), "%s", line);
			ret = -EIO;
		}
	}
	if (ret)
		fprintf(stderr, "djinnd: %s\n", d->end);
	if (ret || getenv("DJINN_TEST_VERBOSE"))
		djd_log_tail(d, 16384);
	rm_dir(d);
	return ret;
}

int djd_wait_exit(struct djd *d, int timeout_ms, int *status)
{
	if (d->pid <= 0)
		return -ECHILD;
	return reap(d, dj_now_ms() + timeout_ms, status);
}

void djd_kill(struct djd *d)
{
	int status;

	if (d->pid > 0) {
		kill(d->pid, SIGKILL);
		if (reap(d, dj_now_ms() + 10000, &status))
			fprintf(stderr, "djinnd %d: not reaped\n", (int)d->pid);
		d->pid = -1;
	}
	rm_dir(d);
}

/* ---------------------------------------------------------------------- */
/* Sockets */

const char *djd_djinnctl(void)
{
	static char path[PATH_MAX];
	const char *env = getenv("DJINNCTL");
	char self[PATH_MAX];
	ssize_t n;

	if (env && *env)
		return env;
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return "build/tools/djinnctl";
	self[n] = 0;
	snprintf(path, sizeof(path), "%s/../../tools/djinnctl", dirname(self));
	return path;
}

int dj_connect_as(const char *path, uid_t uid, gid_t gid, const gid_t *groups,
		  size_t n)
{
	char cbuf[CMSG_SPACE(sizeof(int))] = { 0 };
	char one = 0;
	struct iovec iov = { &one, 1 };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	int sv[2], fd = -1, status;
	pid_t pid;

	if (geteuid())
		return -EPERM;
	if (strncmp(path, "tcp:", 4)) {
		char dir[PATH_MAX];

		snprintf(dir, sizeof(dir), "%s", path);
		if (chmod(dirname(dir), 0711))
			return -errno;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return -errno;
	pid = fork();
	if (pid < 0) {
		close(sv[0]);
		close(sv[1]);
		return -errno;
	}
	if (!pid) {
		close(sv[0]);
		if (setgroups(n, groups) || setresgid(gid, gid, gid) ||
		    setresuid(uid, uid, uid))
			_exit(1);
		fd = strncmp(path, "tcp:", 4) ?
			     dj_connect(path) :
			     dj_connect_tcp((unsigned int)atoi(path + 4));
		if (fd < 0)
			_exit(-fd > 255 ? 255 : -fd);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
		_exit(sendmsg(sv[1], &mh, 0) == 1 ? 0 : 3);
	}
	close(sv[1]);
	if (recvmsg(sv[0], &mh, MSG_CMSG_CLOEXEC) == 1 &&
	    (cm = CMSG_FIRSTHDR(&mh)) && cm->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	close(sv[0]);
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status)) {
		if (fd >= 0)
			close(fd);
		return WIFEXITED(status) && WEXITSTATUS(status) > 3 ?
			       -WEXITSTATUS(status) :
			       -EPERM;
	}
	return fd >= 0 ? fd : -EIO;
}

int dj_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, ret;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* A unix connect does not block unless the backlog is full. */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		socklen_t sl = sizeof(ret);

		ret = -errno;
		if (ret != -EAGAIN && ret != -EINPROGRESS)
			goto fail;
		if (poll(&p, 1, DJ_TIMEOUT_MS) != 1) {
			ret = -ETIMEDOUT;
			goto fail;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &ret, &sl) || ret) {
			ret = ret ? -ret : -errno;
			goto fail;
		}
	}
	return fd;
fail:
	close(fd);
	return ret;
}

/* Wait until @fd is ready for @events or @deadline passes. */
static int wait_fd(int fd, short events, int64_t deadline)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = events };
		int64_t left = deadline - dj_now_ms();
		int r;

		if (left <= 0)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)left);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

int dj_write(int fd, const void *buf, size_t len, int timeout_ms)
{
	const uint8_t *p = buf;
	int64_t deadline = dj_now_ms() + timeout_ms;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		int ret;

		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			return -errno;
		ret = wait_fd(fd, POLLOUT, deadline);
		if (ret)
			return ret;
	}
	return 0;
}

long dj_read(int fd, void *buf, size_t len, int timeout_ms)
{
	uint8_t *p = buf;
	size_t got = 0;
	int64_t deadline = dj_now_ms() + timeout_ms;

	while (got < len) {
		ssize_t n = recv(fd, p + got, len - got, MSG_DONTWAIT);
		int ret;

		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		if (!n)
			return got ? -EPIPE : 0;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		ret = wait_fd(fd, POLLIN, deadline);
		if (ret)
			return ret;
	}
	return (long)got;
}

int dj_wait_eof(int fd, int timeout_ms)
{
	int64_t deadline = dj_now_ms() + timeout_ms;
	uint8_t buf[4096];

	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		int ret;

		if (!n)
			return 1;
		if (n > 0)
			continue;
		if (errno == ECONNRESET)
			return 1;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		ret = wait_fd(fd, POLLIN, deadline);
		if (ret == -ETIMEDOUT)
			return 0;
		if (ret)
			return ret;
	}
}

char *dj_read_all(int fd, int timeout_ms)
{
	struct timeval tv = { .tv_sec = timeout_ms / 1000,
			      .tv_usec = (timeout_ms % 1000) * 1000 };
	size_t cap = 1 << 16, got = 0;
	char *buf = malloc(cap + 1), *more;
	ssize_t n;

	if (!buf)
		return NULL;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while ((n = recv(fd, buf + got, cap - got, 0)) > 0) {
		got += (size_t)n;
		if (got == cap) {
			cap *= 2;
			more = realloc(buf, cap + 1);
			if (!more) {
				free(buf);
				return NULL;
			}
			buf = more;
		}
	}
	buf[got] = 0;
	return buf;
}

/* ---------------------------------------------------------------------- */
/* Frames */

struct djinn_hdr dj_hdr(uint16_t op, uint64_t request_id, uint64_t session_id,
			uint64_t payload_len)
{
	return (struct djinn_hdr){
		.magic = DJINN_MAGIC,
		.version = DJINN_PROTO_VERSION,
		.type = op,
		.request_id = request_id,
		.session_id = session_id,
		.payload_len = payload_len,
	};
}

int dj_send_raw(int fd, const struct djinn_hdr *h, const void *payload,
		size_t len)
{
	int ret = dj_write(fd, h, sizeof(*h), DJ_TIMEOUT_MS);

	if (!ret && len)
		ret = dj_write(fd, payload, len, DJ_TIMEOUT_MS);
	return ret;
}

int dj_send(int fd, uint16_t op, uint64_t request_id, uint64_t session_id,
	    const void *payload, size_t len)
{
	struct djinn_hdr h = dj_hdr(op, request_id, session_id, len);

	return dj_send_raw(fd, &h, payload, len);
}

void dj_resp_free(struct dj_resp *r)
{
	free(r->data);
	r->data = NULL;
	r->len = 0;
}

int dj_recv(int fd, struct dj_resp *r, int timeout_ms)
{
	int64_t deadline = dj_now_ms() + timeout_ms;
	long n;

	memset(r, 0, sizeof(*r));
	n = dj_read(fd, &r->hdr, sizeof(r->hdr), timeout_ms);
	if (n <= 0)
		return (int)n;
	if (r->hdr.magic != DJINN_MAGIC ||
	    r->hdr.version != DJINN_PROTO_VERSION ||
	    !(r->hdr.flags & DJINN_F_RESPONSE) ||
	    (r->hdr.flags & ~DJINN_F_ALL) || r->hdr.__reserved ||
	    r->hdr.payload_len > (1ull << 32)) {
		fprintf(stderr,
			"bad response header: magic %#x version %u flags %#x "
			"reserved %u payload %llu\n",
			r->hdr.magic, r->hdr.version, r->hdr.flags,
			r->hdr.__reserved,
			(unsigned long long)r->hdr.payload_len);
		return -EBADMSG;
	}
	r->len = r->hdr.payload_len;
	if (r->len) {
		int64_t left = deadline - dj_now_ms();

		r->data = malloc(r->len);
		if (!r->data)
			return -ENOMEM;
		n = dj_read(fd, r->data, r->len, left > 0 ? (int)left : 1);
		if (n <= 0) {
			dj_resp_free(r);
			return n ? (int)n : -EPIPE;
		}
	}
	if (r->hdr.flags & DJINN_F_ERROR) {
		struct djinn_error e;

		if (r->len < sizeof(e))
			goto bad_error;
		memcpy(&e, r->data, sizeof(e));
		if (e.len > DJINN_MAX_ERROR_MSG ||
		    e.len != r->len - sizeof(e) || e.error >= 0)
			goto bad_error;
		r->error = e.error;
		memcpy(r->msg, r->data + sizeof(e), e.len);
		r->msg[e.len] = 0;
	}
	return 1;
bad_error:
	fprintf(stderr, "malformed error payload of %llu bytes\n",
		(unsigned long long)r->len);
	dj_resp_free(r);
	return -EBADMSG;
}

int dj_call(int fd, uint16_t op, uint64_t session_id, const void *payload,
	    size_t len, struct dj_resp *r)
{
	uint64_t id = dj_next_id();
	int ret = dj_send(fd, op, id, session_id, payload, len);

	if (ret)
		return ret;
	ret = dj_recv(fd, r, DJ_TIMEOUT_MS);
	if (ret <= 0)
		return ret;
	if (r->hdr.request_id != id || r->hdr.type != op) {
		fprintf(stderr,
			"response to request %llu op %u came as request %llu "
			"op %u\n",
			(unsigned long long)id, op,
			(unsigned long long)r->hdr.request_id, r->hdr.type);
		dj_resp_free(r);
		return -EBADMSG;
	}
	return 1;
}
