// SPDX-License-Identifier: MIT
/*
 * The module's limits, each refused with its own errno and nobody else
 * touched: local sessions per uid (max_sessions_per_uid, -EUSERS), the
 * slots only the daemon's proxies take (reserved_proxy_sessions,
 * -EDQUOT), and rings charged to the opener's memory cgroup (memory.current
 * grows by the ring, and a ring over memory.max is -ENOMEM).
 *
 * The parameters are changed through /sys/module/djinn/parameters and put
 * back; the load/unload loop after this test starts from the defaults
 * again in any case.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kt.h"

#define PARAMS "/sys/module/djinn/parameters/"
#define CG_ROOT "/sys/fs/cgroup"
#define CG_TEST CG_ROOT "/djinn-limits"
#define UID_A KT_NOBODY
#define UID_B (KT_NOBODY - 1)
#define HOLD_MAX 16

/* ---------------------------------------------------------------------- */
/* helpers */

/* A number from a sysfs or cgroup file; ULLONG_MAX if it cannot be read.
 * No cmocka here: children call it too. */
static unsigned long long read_num(const char *path)
{
	char buf[64] = "";
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

	if (fd >= 0)
		close(fd);
	return n > 0 ? strtoull(buf, NULL, 10) : ULLONG_MAX;
}

/* Write @s to @path: 0 or -errno. No cmocka. */
static int put_str(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t len = (ssize_t)strlen(s);
	int ret = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, s, len) != len)
		ret = -errno;
	close(fd);
	return ret;
}

static void write_file(const char *path, const char *s)
{
	int ret = put_str(path, s);

	if (ret)
		fail_msg("write %s to %s: %s", s, path, strerror(-ret));
}

static unsigned long long read_ull(const char *path)
{
	unsigned long long v = read_num(path);

	if (v == ULLONG_MAX)
		fail_msg("read %s: %s", path, strerror(errno));
	return v;
}

static unsigned long param_get(const char *name)
{
	char path[128];

	snprintf(path, sizeof(path), PARAMS "%s", name);
	return read_ull(path);
}

static void param_set(const char *name, unsigned long v)
{
	char path[128], s[32];

	snprintf(path, sizeof(path), PARAMS "%s", name);
	snprintf(s, sizeof(s), "%lu", v);
	write_file(path, s);
	assert_int_equal(param_get(name), v);
}

/* SESSION_OPEN on a fresh file: the file (kept only with a session), or
 * -errno. No cmocka here: children call it too. */
static int try_open(uint32_t entries, uint32_t *ring_bytes)
{
	struct djinn_ioc_session_open o = { .size = sizeof(o),
					    .ring_entries = entries };
	int fd = open(DJINN_DEVICE, O_RDWR | O_CLOEXEC);
	int ret;

	if (fd < 0)
		return -errno;
	strcpy(o.tenant, "limits");
	ret = kt_ioctl(fd, DJINN_IOC_SESSION_OPEN, &o);
	if (ret) {
		close(fd);
		return ret;
	}
	if (ring_bytes)
		*ring_bytes = o.ring_bytes;
	return fd;
}

/*
 * A process of @uid (no capabilities) that tries to open @n sessions,
 * reports each result (0 or -errno) and holds what it opened until
 * holder_stop() kills it.
 */
struct holder {
	pid_t pid;
	int n;
	int res[HOLD_MAX];
};

static void holder_start(struct holder *h, uid_t uid, int n)
{
	int p[2];

	assert_true(n <= HOLD_MAX);
	assert_int_equal(pipe(p), 0);
	h->n = n;
	h->pid = fork();
	assert_true(h->pid >= 0);
	if (h->pid == 0) {
		close(p[0]);
		if (setgroups(0, NULL) || setresgid(uid, uid, uid) ||
		    setresuid(uid, uid, uid))
			_exit(100);
		for (int i = 0; i < n; i++) {
			int r = try_open(0, NULL);

			r = r < 0 ? r : 0;
			if (write(p[1], &r, sizeof(r)) != sizeof(r))
				_exit(101);
		}
		close(p[1]);
		for (;;)
			pause();
	}
	close(p[1]);
	for (int i = 0; i < n; i++)
		if (read(p[0], &h->res[i], sizeof(int)) != sizeof(int))
			fail_msg("holder of uid %u died after %d opens", uid,
				 i);
	close(p[0]);
}

/* Its files close as it dies, before waitpid() returns. */
static void holder_stop(struct holder *h)
{
	int status;

	kill(h->pid, SIGKILL);
	assert_int_equal(waitpid(h->pid, &status, 0), h->pid);
}

/* The holder's results: @ok opens succeeded, then the rest failed with
 * @err. */
static void holder_expect(const struct holder *h, int ok, int err,
			  const char *what)
{
	for (int i = 0; i < h->n; i++) {
		int want = i < ok ? 0 : err;

		if (h->res[i] != want)
			fail_msg("%s: open %d of %d: got %d (%s), want %d",
				 what, i + 1, h->n, h->res[i],
				 strerror(-h->res[i]), want);
	}
}

/* ---------------------------------------------------------------------- */
/* max_sessions_per_uid */

static void test_per_uid(void **state)
{
	unsigned long saved = param_get("max_sessions_per_uid");
	struct holder a, b;
	int root[6];

	assert_int_equal(saved, 64); /* the documented default */
	param_set("max_sessions_per_uid", 4);

	/* A is refused past 4, precisely */
	holder_start(&a, UID_A, 6);
	holder_expect(&a, 4, -EUSERS, "uid A at its limit");
	/* while A is at its limit, B opens its own 4, and is refused too */
	holder_start(&b, UID_B, 5);
	holder_expect(&b, 4, -EUSERS, "uid B beside A");
	/* root is exempt (CAP_SYS_RESOURCE, CAP_SYS_ADMIN) */
	for (int i = 0; i < 6; i++)
		root[i] = kt_session("root", 0, 0, NULL);

	/* A's sessions count until its files close, then come back */
	holder_stop(&a);
	holder_start(&a, UID_A, 5);
	holder_expect(&a, 4, -EUSERS, "uid A again");
	holder_stop(&a);
	holder_stop(&b);

	/* 0: no limit per uid */
	param_set("max_sessions_per_uid", 0);
	holder_start(&a, UID_A, HOLD_MAX);
	holder_expect(&a, HOLD_MAX, 0, "no limit");
	holder_stop(&a);

	for (int i = 0; i < 6; i++)
		close(root[i]);
	param_set("max_sessions_per_uid", saved);
}

/* ---------------------------------------------------------------------- */
/* reserved_proxy_sessions */

static int proxy_open(int d, uint64_t *id)
{
	struct djinn_ioc_proxy_open po = { .size = sizeof(po) };
	int ret;

	strcpy(po.tenant, "remote");
	ret = kt_ioctl(d, DJINN_IOC_PROXY_OPEN, &po);
	if (!ret && id)
		*id = po.session_id;
	return ret;
}

static void test_reserved(void **state)
{
	unsigned long saved_max = param_get("max_sessions");
	unsigned long saved_res = param_get("reserved_proxy_sessions");
	struct djinn_ioc_proxy_close pc = { .size = sizeof(pc) };
	uint64_t ids[3];
	struct holder a, b;
	int d, fd[2];

	assert_int_equal(saved_res, 1024); /* the documented default */
	/* 8 slots, 3 of them the daemon's: local users take 5 at most */
	param_set("max_sessions", 8);
	param_set("reserved_proxy_sessions", 3);
	holder_start(&a, UID_A, 3);
	holder_expect(&a, 3, 0, "uid A");
	holder_start(&b, UID_B, 3);
	holder_expect(&b, 2, -EDQUOT, "uid B in the last local slots");
	/* root too: the reserve is the daemon's, not root's */
	assert_int_equal(try_open(0, NULL), -EDQUOT);

	/* the daemon still opens its 3, and then the table is full */
	d = kt_daemon();
	for (int i = 0; i < 3; i++)
		assert_int_equal(proxy_open(d, &ids[i]), 0);
	assert_int_equal(proxy_open(d, NULL), -EDQUOT);
	/* a proxy closed gives its slot back to the daemon, not to users */
	pc.session_id = ids[0];
	assert_int_equal(kt_ioctl(d, DJINN_IOC_PROXY_CLOSE, &pc), 0);
	assert_int_equal(try_open(0, NULL), -EDQUOT);
	assert_int_equal(proxy_open(d, &ids[0]), 0);

	/* local sessions closed give theirs back to local users, up to 5 */
	holder_stop(&b);
	fd[0] = try_open(0, NULL);
	assert_true(fd[0] >= 0);
	fd[1] = try_open(0, NULL);
	assert_true(fd[1] >= 0);
	assert_int_equal(try_open(0, NULL), -EDQUOT);
	assert_int_equal(proxy_open(d, NULL), -EDQUOT); /* 5 + 3: full */

	close(fd[0]);
	close(fd[1]);
	close(d);
	holder_stop(&a);
	param_set("reserved_proxy_sessions", saved_res);
	param_set("max_sessions", saved_max);
}

/* ---------------------------------------------------------------------- */
/* rings in the memory cgroup */

/* What the child in CG_TEST saw. */
struct memcg_report {
	int step; /* 0, or the step that failed */
	int err;
	uint32_t ring_bytes;
	unsigned long long before, opened, closed;
	int first[4]; /* four 1 MiB rings */
	int limited[4]; /* the same under memory.max = now + 2.5 MiB */
	int after; /* the refused file again, memory.max back to max */
};

#define RING_ENTRIES DJINN_RING_ENTRIES_MAX /* 1 MiB of records */
#define MiB (1024ull * 1024)

/* In the child: no cmocka. Reports in *r and on @out; waits on @go
 * (the parent opens a ring of its own meanwhile). */
static int memcg_child(int out, int go, struct memcg_report *r)
{
	char pid[32], max[32];
	int fds[4], refused = -1;
	char c;

	snprintf(pid, sizeof(pid), "%d", getpid());
	r->step = 1;
	r->err = -put_str(CG_TEST "/cgroup.procs", pid);
	if (r->err)
		goto fail;
	r->step = 2;
	r->before = read_num(CG_TEST "/memory.current");
	for (int i = 0; i < 4; i++) {
		fds[i] = try_open(RING_ENTRIES, &r->ring_bytes);
		r->first[i] = fds[i] < 0 ? fds[i] : 0;
	}
	r->opened = read_num(CG_TEST "/memory.current");
	for (int i = 0; i < 4; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	r->closed = read_num(CG_TEST "/memory.current");
	if (r->before == ULLONG_MAX || r->opened == ULLONG_MAX ||
	    r->closed == ULLONG_MAX) {
		r->err = EIO;
		goto fail;
	}

	r->step = 3;
	snprintf(max, sizeof(max), "%llu",
		 read_num(CG_TEST "/memory.current") + 5 * MiB / 2);
	r->err = -put_str(CG_TEST "/memory.max", max);
	if (r->err)
		goto fail;
	for (int i = 0; i < 4; i++) {
		struct djinn_ioc_session_open o = {
			.size = sizeof(o),
			.ring_entries = RING_ENTRIES,
		};

		fds[i] = open(DJINN_DEVICE, O_RDWR | O_CLOEXEC);
		strcpy(o.tenant, "limits");
		r->limited[i] = kt_ioctl(fds[i], DJINN_IOC_SESSION_OPEN, &o);
		if (r->limited[i] && refused < 0)
			refused = fds[i];
	}
	r->step = 4;
	if (write(out, r, sizeof(*r)) != sizeof(*r) || read(go, &c, 1) != 1) {
		r->err = EPIPE;
		goto fail;
	}

	/* the limit lifted, the refused file opens its session */
	r->step = 5;
	{
		struct djinn_ioc_session_open o = {
			.size = sizeof(o),
			.ring_entries = RING_ENTRIES,
		};

		r->err = -put_str(CG_TEST "/memory.max", "max");
		if (r->err)
			goto fail;
		strcpy(o.tenant, "limits");
		r->after = refused < 0 ? -ENOENT :
					 kt_ioctl(refused,
						  DJINN_IOC_SESSION_OPEN, &o);
	}
	r->step = 0;
	return write(out, r, sizeof(*r)) == sizeof(*r) ? 0 : 1;
fail:
	return write(out, r, sizeof(*r)) == sizeof(*r) ? 1 : 2;
}

static void cg_prepare(void)
{
	char ctl[256] = "";
	int fd;

	if (access(CG_ROOT "/cgroup.controllers", R_OK) &&
	    mount("cgroup2", CG_ROOT, "cgroup2", 0, NULL))
		fail_msg("mount cgroup2 on %s: %s", CG_ROOT, strerror(errno));
	fd = open(CG_ROOT "/cgroup.controllers", O_RDONLY);
	assert_true(fd >= 0);
	assert_true(read(fd, ctl, sizeof(ctl) - 1) > 0);
	close(fd);
	if (!strstr(ctl, "memory"))
		fail_msg("the guest kernel has no memory controller: %s", ctl);
	write_file(CG_ROOT "/cgroup.subtree_control", "+memory");
	if (rmdir(CG_TEST) && errno != ENOENT)
		fail_msg("rmdir %s: %s", CG_TEST, strerror(errno));
	assert_int_equal(mkdir(CG_TEST, 0755), 0);
}

static void test_memcg(void **state)
{
	struct memcg_report r = { 0 };
	unsigned long long ring4, grew, freed;
	int out[2], go[2], status, fd;
	uint32_t bytes;
	pid_t pid;

	cg_prepare();
	assert_int_equal(pipe(out), 0);
	assert_int_equal(pipe(go), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(out[0]);
		close(go[1]);
		_exit(memcg_child(out[1], go[0], &r));
	}
	close(out[1]);
	close(go[0]);
	if (read(out[0], &r, sizeof(r)) != sizeof(r) || r.step != 4)
		fail_msg("child failed at step %d: %s", r.step,
			 strerror(r.err));

	/* each ring charged to the child's cgroup while open, not after */
	ring4 = 4ull * r.ring_bytes;
	for (int i = 0; i < 4; i++)
		assert_int_equal(r.first[i], 0);
	assert_true(r.ring_bytes > MiB);
	grew = r.opened - r.before;
	freed = r.opened - r.closed;
	print_message("memory.current: +%llu KiB for four rings of %u KiB, "
		      "-%llu KiB when closed\n",
		      grew / 1024, r.ring_bytes / 1024, freed / 1024);
	/* the cgroup's per-CPU charge batches: 64 pages either way */
	assert_true(grew >= ring4 - MiB / 2 && grew <= ring4 + MiB);
	assert_true(freed >= ring4 - MiB / 2);

	/* 2.5 MiB more allowed: two rings fit, the third is -ENOMEM */
	assert_int_equal(r.limited[0], 0);
	assert_int_equal(r.limited[1], 0);
	assert_int_equal(r.limited[2], -ENOMEM);
	assert_int_equal(r.limited[3], -ENOMEM);

	/* another cgroup is not affected */
	fd = try_open(RING_ENTRIES, &bytes);
	assert_true(fd >= 0);
	assert_int_equal(bytes, r.ring_bytes);
	close(fd);

	assert_int_equal(write(go[1], "g", 1), 1);
	if (read(out[0], &r, sizeof(r)) != sizeof(r) || r.step != 0)
		fail_msg("child failed at step %d: %s", r.step,
			 strerror(r.err));
	/* the refused SESSION_OPEN left nothing behind on its file */
	assert_int_equal(r.after, 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	close(out[0]);
	close(go[1]);
	assert_int_equal(rmdir(CG_TEST), 0);
}

/* After a failed test too: the next one starts from the defaults. */
static int params_reset(void **state)
{
	return put_str(PARAMS "max_sessions", "65536") ||
	       put_str(PARAMS "reserved_proxy_sessions", "1024") ||
	       put_str(PARAMS "max_sessions_per_uid", "64");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_per_uid, params_reset),
		cmocka_unit_test_teardown(test_reserved, params_reset),
		cmocka_unit_test(test_memcg),
	};

	return cmocka_run_group_tests_name("djinn.ko limits", tests, NULL,
					   NULL);
}
