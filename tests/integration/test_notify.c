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
 * It also plays systemd's file descriptor store (FDSTORE=1 with FDNAME,
 * and LISTEN_FDS/LISTEN_FDNAMES back at the next start): djinnd keeps
 * its listening sockets there, and a djinnd started with them takes them
 * instead of binding, so that a client that connects while it is down
 * is answered by the next one (test_fd_store).
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

#include <djinn/proto.h>

static char djinnd[PATH_MAX + 32];
static char dir[] = "/tmp/test_notify.XXXXXX";
static char conf[128], logpath[128], nsock[128];
static char dsock[128], asock[128];
/* --handover's path for the djinnds start() runs, or NULL; whether
 * their log goes on after the last one's */
static const char *handover;
static bool log_append;

/* The fd store this test keeps: FDSTORE=1 messages' fds by FDNAME. */
#define STORE_MAX 16
static struct stored {
	char name[256];
	int fd;
} store[STORE_MAX];
static unsigned int nr_store, nr_removed;

static void store_put(const char *name, int fd)
{
	for (unsigned int i = 0; i < nr_store; i++)
		if (!strcmp(store[i].name, name)) {
			close(store[i].fd); /* the same socket again */
			store[i].fd = fd;
			return;
		}
	assert_true(nr_store < STORE_MAX);
	snprintf(store[nr_store].name, sizeof(store[0].name), "%s", name);
	store[nr_store++].fd = fd;
}

static void store_remove(const char *name)
{
	for (unsigned int i = 0; i < nr_store; i++)
		if (!strcmp(store[i].name, name)) {
			close(store[i].fd);
			store[i] = store[--nr_store];
			nr_removed++;
			return;
		}
}

static int store_fd(const char *name)
{
	for (unsigned int i = 0; i < nr_store; i++)
		if (!strcmp(store[i].name, name))
			return store[i].fd;
	return -1;
}

/* How many fds the store holds whose names begin with @prefix. */
static unsigned int store_named(const char *prefix)
{
	unsigned int n = 0;

	for (unsigned int i = 0; i < nr_store; i++)
		n += !strncmp(store[i].name, prefix, strlen(prefix));
	return n;
}

static void store_clear(void)
{
	for (unsigned int i = 0; i < nr_store; i++)
		close(store[i].fd);
	nr_store = nr_removed = 0;
}

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
 * after the test's own; stdout and stderr to the log. With @pass, the
 * store's fds go along, as systemd passes them (LISTEN_FDS). */
static pid_t start_with(char *const env[], const char *extra, bool pass)
{
	pid_t parent = getpid(), pid;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		int fd = open(logpath,
			      O_WRONLY | O_CREAT | O_APPEND |
				      (log_append ? 0 : O_TRUNC),
			      0600);
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
		if (pass && nr_store) {
			char names[STORE_MAX * 257] = "", v[32];

			/* fds 3 .. 3 + n - 1, in the store's order (each
			 * dup'd above the range first, so none is lost) */
			for (unsigned int i = 0; i < nr_store; i++)
				store[i].fd = fcntl(store[i].fd,
						    F_DUPFD_CLOEXEC,
						    3 + STORE_MAX);
			for (unsigned int i = 0; i < nr_store; i++) {
				dup2(store[i].fd, 3 + (int)i);
				if (i)
					strcat(names, ":");
				strcat(names, store[i].name);
			}
			snprintf(v, sizeof(v), "%u", nr_store);
			setenv("LISTEN_FDS", v, 1);
			snprintf(v, sizeof(v), "%d", (int)getpid());
			setenv("LISTEN_PID", v, 1);
			setenv("LISTEN_FDNAMES", names, 1);
		}
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
		      extra ? extra : "--foreground",
		      handover ? "--handover" : NULL, handover, (char *)NULL);
		fprintf(stderr, "exec %s: %s\n", djinnd, strerror(errno));
		_exit(127);
	}
	return pid;
}

static pid_t start(char *const env[], const char *extra)
{
	return start_with(env, extra, false);
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

/* A line's value: "NAME" for FDNAME= in "FDSTORE=1\nFDNAME=NAME". */
static bool line_value(const char *msg, const char *key, char *out, size_t len)
{
	size_t n = strlen(key);

	for (const char *p = msg; p; p = strchr(p, '\n'), p = p ? p + 1 : p)
		if (!strncmp(p, key, n)) {
			size_t v = strcspn(p + n, "\n");

			if (v >= len)
				return false;
			memcpy(out, p + n, v);
			out[v] = 0;
			return true;
		}
	return false;
}

/* The next message other than WATCHDOG=1 (counted in *@pings) and the
 * fd store's (kept in store[]) within @ms, from @pid; NULL on timeout. */
static const char *next_msg(int fd, pid_t pid, int ms, unsigned int *pings)
{
	static char buf[4096];
	uint64_t end = now_usec() + (uint64_t)ms * 1000;

	for (;;) {
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(sizeof(struct ucred)) +
			       CMSG_SPACE(sizeof(int))];
		} cm;
		char name[256];
		int passed = -1;
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
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
		assert_true(n >= 0);
		buf[n] = 0;
		c = CMSG_FIRSTHDR(&mh);
		assert_non_null(c);
		assert_int_equal(c->cmsg_type, SCM_CREDENTIALS);
		/* NotifyAccess=main: only djinnd itself speaks. */
		assert_int_equal(((struct ucred *)CMSG_DATA(c))->pid, pid);
		c = CMSG_NXTHDR(&mh, c);
		if (c && c->cmsg_type == SCM_RIGHTS)
			memcpy(&passed, CMSG_DATA(c), sizeof(passed));
		if (has_line(buf, "FDSTORE=1")) {
			/* a listener or the state record keeps across
			 * restarts: FDPOLL=0; a connection is dropped if its
			 * peer hangs up */
			assert_true(passed >= 0);
			assert_true(
				line_value(buf, "FDNAME=", name, sizeof(name)));
			assert_int_equal(has_line(buf, "FDPOLL=0"),
					 strncmp(name, "conn-", 5) != 0);
			store_put(name, passed);
			continue;
		}
		assert_int_equal(passed, -1);
		if (has_line(buf, "FDSTOREREMOVE=1")) {
			assert_true(
				line_value(buf, "FDNAME=", name, sizeof(name)));
			store_remove(name);
			continue;
		}
		if (!strcmp(buf, "WATCHDOG=1")) {
			if (pings)
				(*pings)++;
			continue;
		}
		return buf;
	}
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
	store_clear(); /* its sockets: no one listens after this */
}

/* Up within 20 s: its client socket accepts. */
static void wait_up(void)
{
	for (int i = 0; i < 2000 && !can_connect(dsock); i++)
		usleep(10000);
	assert_true(can_connect(dsock));
}

/* A connection to @path with a HELLO sent (its answer not read). */
static int hello_sent(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct djinn_hdr h = { .magic = DJINN_MAGIC,
			       .version = DJINN_PROTO_VERSION,
			       .type = DJINN_MSG_HELLO,
			       .request_id = 77 };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	strcpy(sa.sun_path, path);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(write(fd, &h, sizeof(h)), sizeof(h));
	return fd;
}

/* Its HELLO's answer arrives within 20 s. */
static void hello_answered(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct djinn_hdr h;

	assert_int_equal(poll(&p, 1, 20000), 1);
	assert_int_equal(read(fd, &h, sizeof(h)), sizeof(h));
	assert_int_equal(h.magic, DJINN_MAGIC);
	assert_int_equal(h.type, DJINN_MSG_HELLO);
	assert_int_equal(h.request_id, 77);
	assert_int_equal(h.flags & DJINN_F_ERROR, 0);
	close(fd);
}

/*
 * The fd store: djinnd keeps its listening sockets there, named by kind
 * and address. Killed, its sockets live on in the store: a client
 * connects and sends HELLO meanwhile, and the next djinnd, started with
 * them (LISTEN_FDS), takes them without binding and answers it. A
 * stored fd no listener names any more is dropped (FDSTOREREMOVE=1).
 * Stopped cleanly, djinnd leaves a stored unix socket's path in place
 * for the next one.
 */
static void test_fd_store(void **state)
{
	char ns[160], *env[] = { ns, NULL }, client[256], admin[256], *log;
	const char *stale = "client-tcp%3A127.0.0.1%3A9";
	int fd = notify_socket(), waiting, spare[2];
	pid_t pid;

	snprintf(ns, sizeof(ns), "NOTIFY_SOCKET=%s", nsock);
	snprintf(client, sizeof(client), "client-unix%%3A%s", dsock);
	snprintf(admin, sizeof(admin), "admin-unix%%3A%s", asock);
	base_conf("");
	store_clear();
	pid = start(env, NULL);
	expect(fd, pid, "READY=1", NULL, NULL);
	/* the listeners, and the crash journal with the pool and the
	 * logits arena it names */
	assert_int_equal(store_named("client-") + store_named("admin-"), 2);
	assert_true(store_fd(client) >= 0);
	assert_true(store_fd(admin) >= 0);
	assert_int_equal(store_named("journal-"), 1);
	assert_int_equal(store_named("logits-"), 1);
	assert_true(store_fd("pool-0") >= 0);

	/* killed: the stored socket still takes a client */
	kill(pid, SIGKILL);
	assert_int_equal(wait_exit(pid), 128 + SIGKILL);
	waiting = hello_sent(dsock);

	/* one more fd that no listener names */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, spare), 0);
	close(spare[1]);
	store_put(stale, spare[0]);
	pid = start_with(env, NULL, true);
	expect(fd, pid, "READY=1", NULL, NULL);
	hello_answered(waiting);
	/* the stale one, and the journal and logits arena of the one
	 * killed once this one's are in */
	assert_int_equal(nr_removed, 3);
	assert_int_equal(store_fd(stale), -1);
	assert_int_equal(store_named("client-") + store_named("admin-"), 2);
	assert_int_equal(store_named("journal-"), 1);
	assert_int_equal(store_named("logits-"), 1);
	log = read_log();
	assert_non_null(strstr(log, ", passed at start"));
	assert_non_null(strstr(log, "is not configured: dropped"));
	free(log);
	assert_true(can_connect(asock));

	/* stopped cleanly: the path stays, and the store's socket behind
	 * it takes the next client; the state goes into the store too
	 * (test_restart.c restores sessions from it) */
	kill(pid, SIGTERM);
	expect(fd, pid, "STOPPING=1", NULL, NULL);
	expect(fd, pid, "STATUS=state kept in the fd store; exiting", NULL,
	       NULL);
	assert_int_equal(wait_exit(pid), 0);
	assert_true(store_fd("state") >= 0);
	assert_true(store_fd("state-data") >= 0);
	waiting = hello_sent(dsock);
	pid = start_with(env, NULL, true);
	expect(fd, pid, "READY=1", NULL, NULL);
	hello_answered(waiting);
	/* taken: the store forgets it */
	assert_int_equal(store_fd("state"), -1);
	assert_int_equal(store_fd("state-data"), -1);
	kill(pid, SIGTERM);
	expect(fd, pid, "STOPPING=1", NULL, NULL);
	expect(fd, pid, "STATUS=state kept in the fd store; exiting", NULL,
	       NULL);
	assert_int_equal(wait_exit(pid), 0);

	/* without a store nothing is kept: a clean stop removes the path */
	store_clear();
	pid = start(NULL, NULL);
	wait_up();
	kill(pid, SIGTERM);
	assert_int_equal(wait_exit(pid), 0);
	assert_int_equal(access(dsock, F_OK), -1);
	close(fd);
}

/* How many times @needle is in @hay. */
static unsigned int count_of(const char *hay, const char *needle)
{
	unsigned int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

/*
 * --handover, without a service manager: each djinnd serves the path
 * (its owner's alone, 0600). A peer that only looks (it takes the
 * sockets and goes) leaves it serving. One started with the same path
 * takes the running one's listening sockets over it; once it serves it
 * tells the old one to drain, which exits 0, and it answers on the same
 * sockets, never closed between. The last one, stopped with no
 * successor, removes its paths.
 */
static void test_handover(void **state)
{
	char hpath[160], want[96], *log, buf[300];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	pid_t a, b;
	int probe;

	snprintf(hpath, sizeof(hpath), "%s/handover", dir);
	base_conf("");
	handover = hpath;
	log_append = false;
	a = start(NULL, NULL);
	wait_up();
	/* the handover socket opens after the others */
	for (int i = 0; i < 2000 && stat(hpath, &st); i++)
		usleep(10000);
	assert_int_equal(stat(hpath, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0600);
	hello_answered(hello_sent(dsock));

	/* a peer that only looks: sent the sockets, it goes; the running
	 * djinnd serves on */
	strcpy(sa.sun_path, hpath);
	probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(probe, (struct sockaddr *)&sa, sizeof(sa)), 0);
	for (;;) {
		struct pollfd p = { .fd = probe, .events = POLLIN };
		ssize_t n;

		assert_int_equal(poll(&p, 1, 20000), 1);
		n = recv(probe, buf, sizeof(buf) - 1, 0);
		assert_true(n > 0);
		buf[n] = 0;
		if (!strcmp(buf, "end"))
			break;
	}
	close(probe);
	hello_answered(hello_sent(dsock));
	assert_int_equal(waitpid(a, NULL, WNOHANG), 0);

	log_append = true;
	for (int round = 0; round < 2; round++) {
		b = start(NULL, NULL);
		if (wait_exit(a)) {
			log = read_log();
			fprintf(stderr,
				"djinnd %d did not drain; the log:\n%s\n",
				(int)a, log);
			free(log);
			fail();
		}
		hello_answered(hello_sent(dsock));
		assert_true(can_connect(asock));
		log = read_log();
		/* it handed its state over (net/restart.h) and exited */
		snprintf(want, sizeof(want), "serving; pid %d told", (int)a);
		assert_non_null(strstr(log, want));
		assert_int_equal(count_of(log, "(handover), passed at start"),
				 round + 1);
		free(log);
		a = b;
	}
	kill(a, SIGTERM);
	assert_int_equal(wait_exit(a), 0);
	assert_int_equal(access(dsock, F_OK), -1);
	assert_int_equal(access(hpath, F_OK), -1);
	handover = NULL;
	log_append = false;
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
		cmocka_unit_test(test_fd_store),
		cmocka_unit_test(test_handover),
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
