// SPDX-License-Identifier: MIT
/*
 * djinnd under a service manager: this test plays systemd. It binds its
 * own NOTIFY_SOCKET (an AF_UNIX datagram socket, as systemd's is), starts
 * a real djinnd with it and WATCHDOG_USEC, and checks the notify protocol
 * (sd_notify(3)): READY=1 once the sockets accept, WATCHDOG=1 while it
 * runs, RELOADING=1 with MONOTONIC_USEC on SIGHUP and READY=1 after the
 * configuration was read again (changes applied and logged, a broken file
 * refused), STOPPING=1 on SIGTERM and exit 0. Each message must come from
 * djinnd's own pid (NotifyAccess=main). It also checks the journal's
 * "<N>" priority prefixes, used only while $JOURNAL_STREAM names stderr,
 * and that a bad configuration stops djinnd before READY=1.
 *
 * The daemon is $DJINND, else BUILD/djinnd/djinnd beside this binary.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static char djinnd[PATH_MAX + 32];
static char dir[] = "/tmp/test_notify.XXXXXX";
static char conf[128], logpath[128], nsock[128];
static char dsock[128], asock[128];

static uint64_t now_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

/* The whole log, NUL-terminated (caller frees). */
static char *read_log(void)
{
	FILE *f = fopen(logpath, "r");
	char *buf = calloc(1, 1 << 20);
	size_t n;

	assert_non_null(f);
	assert_non_null(buf);
	n = fread(buf, 1, (1 << 20) - 1, f);
	buf[n] = 0;
	fclose(f);
	return buf;
}

/* The service manager's end: a datagram socket that learns who sent. */
static int notify_socket(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0), one = 1;

	assert_true(fd >= 0);
	strcpy(sa.sun_path, nsock);
	unlink(nsock);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(
		setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)), 0);
	return fd;
}

/* Start djinnd with @env (NULL-terminated "K=V" list) and @extra args
 * after the test's own; stdout and stderr to the log. */
static pid_t start(char *const env[], const char *extra)
{
	pid_t parent = getpid(), pid;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int nul = open("/dev/null", O_RDONLY);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent || fd < 0 || nul < 0)
			_exit(127);
		dup2(nul, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		unsetenv("NOTIFY_SOCKET");
		unsetenv("WATCHDOG_USEC");
		unsetenv("WATCHDOG_PID");
		unsetenv("JOURNAL_STREAM");
		unsetenv("INVOCATION_ID");
		for (unsigned int i = 0; env && env[i]; i++)
			putenv(env[i]);
		/* A journal stream named after the log file itself. */
		if (getenv("JOURNAL_STREAM") &&
		    !strcmp(getenv("JOURNAL_STREAM"), "stderr")) {
			struct stat st;
			char js[64];

			fstat(2, &st);
			snprintf(js, sizeof(js), "%llu:%llu",
				 (unsigned long long)st.st_dev,
				 (unsigned long long)st.st_ino);
			setenv("JOURNAL_STREAM", js, 1);
		}
		execl(djinnd, djinnd, "--config", conf, "--threads", "1",
		      extra ? extra : "--foreground", (char *)NULL);
		fprintf(stderr, "exec %s: %s\n", djinnd, strerror(errno));
		_exit(127);
	}
	return pid;
}

/* The next message other than WATCHDOG=1 (counted in *@pings) within
 * @ms, from @pid; NULL on timeout. */
static const char *next_msg(int fd, pid_t pid, int ms, unsigned int *pings)
{
	static char buf[4096];
	uint64_t end = now_usec() + (uint64_t)ms * 1000;

	for (;;) {
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(sizeof(struct ucred))];
		} cm;
		struct iovec iov = { buf, sizeof(buf) - 1 };
		struct msghdr mh = { .msg_iov = &iov,
				     .msg_iovlen = 1,
				     .msg_control = &cm,
				     .msg_controllen = sizeof(cm) };
		struct pollfd p = { .fd = fd, .events = POLLIN };
		uint64_t now = now_usec();
		struct cmsghdr *c;
		ssize_t n;

		if (now >= end)
			return NULL;
		if (poll(&p, 1, (int)((end - now) / 1000) + 1) <= 0)
			continue;
		n = recvmsg(fd, &mh, 0);
		assert_true(n >= 0);
		buf[n] = 0;
		c = CMSG_FIRSTHDR(&mh);
		assert_non_null(c);
		assert_int_equal(c->cmsg_type, SCM_CREDENTIALS);
		/* NotifyAccess=main: only djinnd itself speaks. */
		assert_int_equal(((struct ucred *)CMSG_DATA(c))->pid, pid);
		if (!strcmp(buf, "WATCHDOG=1")) {
			if (pings)
				(*pings)++;
			continue;
		}
		return buf;
	}
}

/* A line of a message: "READY=1" in "READY=1\nSTATUS=...". */
static bool has_line(const char *msg, const char *line)
{
	size_t n = strlen(line);

	for (const char *p = msg; p; p = strchr(p, '\n'), p = p ? p + 1 : p)
		if (!strncmp(p, line, n) && (p[n] == '\n' || !p[n]))
			return true;
	return false;
}

static void expect(int fd, pid_t pid, const char *line, unsigned int *pings,
		   const char **msg)
{
	const char *m = next_msg(fd, pid, 20000, pings);

	if (!m) {
		char *log = read_log();

		print_error("no %s within 20 s; djinnd's log:\n%s\n", line,
			    log);
		free(log);
		fail();
	}
	if (!has_line(m, line)) {
		print_error("want %s, got '%s'\n", line, m);
		fail();
	}
	if (msg)
		*msg = m;
}

static int wait_exit(pid_t pid)
{
	int status;

	for (int i = 0; i < 2000; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid)
			return WIFEXITED(status) ? WEXITSTATUS(status) :
						   128 + WTERMSIG(status);
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	return -1;
}

static bool can_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok;

	strcpy(sa.sun_path, path);
	ok = !connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	return ok;
}

static void base_conf(const char *more)
{
	char text[2048];

	snprintf(text, sizeof(text),
		 "[server]\nlisten = unix:%s\nadmin_socket = %s\n"
		 "[memory]\nbudget = 64M\n%s",
		 dsock, asock, more);
	write_file(conf, text);
}

static void test_notify_protocol(void **state)
{
	char ns[160], mainpid[32], *log;
	char wd[] = "WATCHDOG_USEC=200000", *env[] = { ns, wd, NULL };
	unsigned int pings = 0;
	unsigned long long mono;
	uint64_t before, after;
	const char *m, *p;
	int fd = notify_socket();
	pid_t pid;

	snprintf(ns, sizeof(ns), "NOTIFY_SOCKET=%s", nsock);
	base_conf("");
	pid = start(env, NULL);

	/* READY=1 once the sockets accept, with the main pid. */
	expect(fd, pid, "READY=1", &pings, &m);
	snprintf(mainpid, sizeof(mainpid), "MAINPID=%d", (int)pid);
	assert_true(has_line(m, mainpid));
	assert_true(can_connect(dsock));
	assert_true(can_connect(asock));

	/* The watchdog: pings keep coming, at half of WATCHDOG_USEC. */
	for (uint64_t end = now_usec() + 20000000; pings < 3;) {
		assert_null(next_msg(fd, pid, 100, &pings));
		assert_true(now_usec() < end);
	}

	/* SIGHUP with a changed file: RELOADING=1 stamped with the
	 * monotonic clock, what changed in the log, then READY=1. */
	base_conf("pressure_warning = 50\n[log]\nlevel = debug\n"
		  "[lease]\ndefault = 3s\n");
	before = now_usec();
	kill(pid, SIGHUP);
	expect(fd, pid, "RELOADING=1", &pings, &m);
	after = now_usec();
	p = strstr(m, "MONOTONIC_USEC=");
	assert_non_null(p);
	mono = strtoull(p + 15, NULL, 10);
	assert_true(mono >= before && mono <= after);
	expect(fd, pid, "READY=1", &pings, NULL);
	log = read_log();
	assert_non_null(
		strstr(log, "reload: memory.pressure_warning: 80 -> 50"));
	assert_non_null(strstr(log, "reload: log.level: info -> debug"));
	assert_non_null(strstr(log, "reload: lease.default: 10s -> 3s"));
	assert_non_null(strstr(log, "reload: applied; 0 settings need a "
				    "restart"));
	free(log);

	/* A setting that needs a restart is named and left alone. */
	write_file(conf, "[server]\nlisten = unix:/tmp/elsewhere.sock\n");
	kill(pid, SIGHUP);
	expect(fd, pid, "RELOADING=1", &pings, NULL);
	expect(fd, pid, "READY=1", &pings, NULL);
	log = read_log();
	assert_non_null(strstr(log, "reload: server.listen: unix:"));
	assert_non_null(strstr(log, "needs a restart; still unix:"));
	free(log);
	assert_true(can_connect(dsock));

	/* A broken file: refused, the daemon runs on. */
	base_conf("[memory]\npressure_warning = lots\n");
	kill(pid, SIGHUP);
	expect(fd, pid, "RELOADING=1", &pings, NULL);
	expect(fd, pid, "READY=1", &pings, &m);
	assert_non_null(strstr(m, "\nSTATUS=reload failed: "));
	log = read_log();
	assert_non_null(strstr(log, "pressure_warning: 'lots'"));
	assert_non_null(strstr(log, "keeping the running configuration"));
	free(log);
	assert_true(can_connect(dsock));

	/* SIGTERM: STOPPING=1, then a clean exit. */
	kill(pid, SIGTERM);
	expect(fd, pid, "STOPPING=1", &pings, NULL);
	assert_int_equal(wait_exit(pid), 0);
	close(fd);
}

/* Levels reach journald as "<N>" only while stderr is the stream that
 * $JOURNAL_STREAM names. */
static void test_journal_prefix(void **state)
{
	char js[] = "JOURNAL_STREAM=stderr", other[] = "JOURNAL_STREAM=1:1";
	char *env[] = { js, NULL }, *env2[] = { other, NULL };
	char *log;
	pid_t pid;

	base_conf("");
	pid = start(env, NULL);
	for (int i = 0; i < 2000 && !can_connect(asock); i++)
		usleep(10000);
	kill(pid, SIGTERM);
	assert_int_equal(wait_exit(pid), 0);
	log = read_log();
	assert_true(!strncmp(log, "<6>djinnd 0.1 starting", 22));
	assert_non_null(strstr(log, "\n<5>Terminated: draining"));
	free(log);

	pid = start(env2, NULL);
	for (int i = 0; i < 2000 && !can_connect(asock); i++)
		usleep(10000);
	kill(pid, SIGTERM);
	assert_int_equal(wait_exit(pid), 0);
	log = read_log();
	assert_non_null(strstr(log, " djinnd info: djinnd 0.1 starting"));
	assert_null(strstr(log, "<6>"));
	free(log);
}

/* A configuration djinnd refuses: exit 2 naming the line, no READY=1. */
static void test_bad_config(void **state)
{
	char ns[160], *log;
	char *env[] = { ns, NULL };
	int fd = notify_socket();
	pid_t pid;

	snprintf(ns, sizeof(ns), "NOTIFY_SOCKET=%s", nsock);
	base_conf("[lease]\ndefault = 5\n");
	pid = start(env, NULL);
	assert_int_equal(wait_exit(pid), 2);
	assert_null(next_msg(fd, pid, 0, NULL));
	log = read_log();
	assert_non_null(strstr(log, "djinnd.conf:7: lease.default: '5'"));
	free(log);
	assert_false(can_connect(dsock));
	close(fd);
}

static int setup(void **state)
{
	if (!mkdtemp(dir))
		return -1;
	snprintf(conf, sizeof(conf), "%s/djinnd.conf", dir);
	snprintf(logpath, sizeof(logpath), "%s/djinnd.log", dir);
	snprintf(nsock, sizeof(nsock), "%s/notify", dir);
	snprintf(dsock, sizeof(dsock), "%s/d.sock", dir);
	snprintf(asock, sizeof(asock), "%s/admin.sock", dir);
	return 0;
}

static int teardown(void **state)
{
	const char *files[] = { conf, logpath, nsock, dsock, asock };

	for (unsigned int i = 0; i < 5; i++)
		unlink(files[i]);
	return rmdir(dir);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_notify_protocol),
		cmocka_unit_test(test_journal_prefix),
		cmocka_unit_test(test_bad_config),
	};
	const char *env = getenv("DJINND");
	char self[PATH_MAX];
	ssize_t n;

	if (env && *env) {
		snprintf(djinnd, sizeof(djinnd), "%s", env);
	} else {
		/* BUILD/tests/integration/test_notify -> BUILD/djinnd/djinnd */
		n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (n < 0)
			return 1;
		self[n] = 0;
		for (int i = 0; i < 3; i++)
			*strrchr(self, '/') = 0;
		snprintf(djinnd, sizeof(djinnd), "%s/djinnd/djinnd", self);
	}
	if (access(djinnd, X_OK)) {
		printf("test_notify: skipped: no djinnd at %s (set DJINND)\n",
		       djinnd);
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
