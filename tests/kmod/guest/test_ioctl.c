// SPDX-License-Identifier: MIT
/*
 * Every /dev/djinn ioctl: the extensible-struct contract (the iommufd
 * selftests' cmd_length pattern), what each command does and refuses,
 * and who may call it.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <grp.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kt.h"

/* ---------------------------------------------------------------------- */
/* The size conformance pattern, for every command */

struct conf_ctx {
	int dev; /* a fresh open */
	int sess; /* a file with a session */
	struct djinn_ioc_session_open so;
	int daemon; /* -1 for DAEMON_ATTACH's own entry */
	uint64_t proxy;
};

struct conf_cmd {
	const char *name;
	unsigned long ioctl;
	size_t size;
	long reserved; /* offset of a __u32 __reserved, or -1 */
	bool no_daemon;
	/* fill @buf (zeroed) with a valid command; returns the fd to use */
	int (*fill)(struct conf_ctx *c, void *buf);
};

static int fill_open(struct conf_ctx *c, void *buf)
{
	struct djinn_ioc_session_open *o = buf;

	strcpy(o->tenant, "conf");
	o->priority = 2;
	return c->dev;
}

static int fill_heartbeat(struct conf_ctx *c, void *buf)
{
	return c->sess;
}

static int fill_signal(struct conf_ctx *c, void *buf)
{
	struct djinn_ioc_signal *s = buf;

	s->phase = DJINN_SIGNAL_COMPUTE;
	s->expected_ns = 1000;
	return c->sess;
}

static int fill_info(struct conf_ctx *c, void *buf)
{
	return c->sess;
}

static int fill_attach(struct conf_ctx *c, void *buf)
{
	return c->dev;
}

static int fill_proxy_open(struct conf_ctx *c, void *buf)
{
	struct djinn_ioc_proxy_open *o = buf;

	strcpy(o->tenant, "remote");
	return c->daemon;
}

static int fill_proxy_close(struct conf_ctx *c, void *buf)
{
	struct djinn_ioc_proxy_close *p = buf;

	p->session_id = c->proxy;
	return c->daemon;
}

static int fill_post(struct conf_ctx *c, void *buf)
{
	struct djinn_ioc_post *p = buf;

	p->session_id = c->so.session_id;
	p->cqe.user_data = 42;
	return c->daemon;
}

static int fill_kill(struct conf_ctx *c, void *buf)
{
	struct djinn_ioc_kill *k = buf;

	k->session_id = c->so.session_id;
	return c->daemon;
}

#define CONF(n, s, r, nd, f)                                                  \
	{                                                                     \
		.name = #n, .ioctl = DJINN_IOC_##n, .size = sizeof(struct s), \
		.reserved = r, .no_daemon = nd, .fill = f                     \
	}

static const struct conf_cmd conf_cmds[] = {
	CONF(SESSION_OPEN, djinn_ioc_session_open, -1, false, fill_open),
	CONF(HEARTBEAT, djinn_ioc_heartbeat,
	     offsetof(struct djinn_ioc_heartbeat, __reserved), false,
	     fill_heartbeat),
	CONF(SIGNAL, djinn_ioc_signal,
	     offsetof(struct djinn_ioc_signal, __reserved), false, fill_signal),
	CONF(SESSION_INFO, djinn_ioc_session_info,
	     offsetof(struct djinn_ioc_session_info, __reserved), false,
	     fill_info),
	CONF(DAEMON_ATTACH, djinn_ioc_daemon_attach, -1, true, fill_attach),
	CONF(PROXY_OPEN, djinn_ioc_proxy_open,
	     offsetof(struct djinn_ioc_proxy_open, __reserved), false,
	     fill_proxy_open),
	CONF(PROXY_CLOSE, djinn_ioc_proxy_close, -1, false, fill_proxy_close),
	CONF(POST, djinn_ioc_post, offsetof(struct djinn_ioc_post, __reserved),
	     false, fill_post),
	CONF(KILL, djinn_ioc_kill, -1, false, fill_kill),
};

static void conf_setup(struct conf_ctx *c, bool no_daemon)
{
	struct djinn_ioc_proxy_open po = { .size = sizeof(po) };

	c->dev = kt_open_dev();
	c->sess = kt_session("conf", 0, 8, &c->so);
	c->daemon = -1;
	c->proxy = 0;
	if (no_daemon)
		return;
	c->daemon = kt_daemon();
	strcpy(po.tenant, "remote");
	assert_int_equal(kt_ioctl(c->daemon, DJINN_IOC_PROXY_OPEN, &po), 0);
	c->proxy = po.session_id;
}

static void conf_teardown(struct conf_ctx *c)
{
	close(c->dev);
	close(c->sess);
	if (c->daemon >= 0)
		close(c->daemon);
}

enum variant {
	V_EXACT,
	V_LONGER_ZERO,
	V_SHORT,
	V_LONGER_NONZERO,
	V_FLAGS,
	V_RESERVED,
	V_ZERO_SIZE,
	V_BAD_POINTER,
	V_PAGE_ZERO,
	V_MAX,
};

static const char *const variant_names[] = {
	"exact size",	    "size+8, zeros", "size-1",
	"size+8, non-zero", "unknown flag",  "reserved set",
	"size 0",	    "bad pointer",   "over a page, zeros",
};

/* The session of the context is untouched by a refused command. */
static void conf_check_unchanged(struct conf_ctx *c)
{
	struct djinn_ioc_session_info i;
	struct djinn_ioc_session_open o = { .size = sizeof(o) };

	assert_int_equal(kt_info(c->sess, 0, &i), 0);
	assert_int_equal(i.state, DJINN_STATE_LIVE);
	assert_int_equal(i.heartbeats, 0);
	assert_int_equal(i.signals, 0);
	assert_int_equal(i.posts, 0);
	/* and the fresh file can still open its session */
	strcpy(o.tenant, "after");
	assert_int_equal(kt_ioctl(c->dev, DJINN_IOC_SESSION_OPEN, &o), 0);
}

/*
 * Every command against every size variant. A size past a page is refused
 * even when every byte past the struct is zero: the module reads no more
 * than a page of a caller's struct, so a size of 4 GiB over zeros cannot
 * keep it scanning.
 */
static void test_size_conformance(void **state)
{
	static unsigned char buf[8192];
	size_t i;
	int v;

	for (i = 0; i < sizeof(conf_cmds) / sizeof(conf_cmds[0]); i++) {
		const struct conf_cmd *cc = &conf_cmds[i];

		for (v = 0; v < V_MAX; v++) {
			struct conf_ctx c;
			int fd, want, got;
			uint32_t size = cc->size, flags = 0;

			if (v == V_RESERVED && cc->reserved < 0)
				continue;
			conf_setup(&c, cc->no_daemon);
			memset(buf, 0, sizeof(buf));
			fd = cc->fill(&c, buf);
			want = 0;
			switch (v) {
			case V_LONGER_ZERO:
				size += 8;
				break;
			case V_SHORT:
				size -= 1;
				want = -EINVAL;
				break;
			case V_LONGER_NONZERO:
				size += 8;
				buf[cc->size + 5] = 1;
				want = -E2BIG;
				break;
			case V_FLAGS:
				flags = 1u << 31;
				want = -EINVAL;
				break;
			case V_RESERVED:
				buf[cc->reserved] = 1;
				want = -EINVAL;
				break;
			case V_ZERO_SIZE:
				size = 0;
				want = -EINVAL;
				break;
			case V_PAGE_ZERO:
				size = (uint32_t)sysconf(_SC_PAGESIZE) + 8;
				want = -E2BIG;
				break;
			}
			memcpy(buf, &size, 4);
			memcpy(buf + 4, &flags, 4);
			if (v == V_BAD_POINTER) {
				want = -EFAULT;
				got = kt_ioctl(fd, cc->ioctl, (void *)8);
			} else {
				got = kt_ioctl(fd, cc->ioctl, buf);
			}
			if (got != want)
				fail_msg("%s, %s: got %d (%s), want %d",
					 cc->name, variant_names[v], got,
					 strerror(-got), want);
			if (want)
				conf_check_unchanged(&c);
			conf_teardown(&c);
		}
	}
}

static void test_unknown_commands(void **state)
{
	int fd = kt_open_dev();
	uint32_t buf[64] = { sizeof(buf) };

	assert_int_equal(kt_ioctl(fd, _IO(DJINN_TYPE, DJINN_IOC_BASE + 9), buf),
			 -ENOTTY);
	assert_int_equal(kt_ioctl(fd, _IO(DJINN_TYPE, DJINN_IOC_BASE - 1), buf),
			 -ENOTTY);
	assert_int_equal(kt_ioctl(fd, _IO(DJINN_TYPE + 1, DJINN_IOC_BASE), buf),
			 -ENOTTY);
	/* the right number with a size encoded is another command */
	assert_int_equal(
		kt_ioctl(fd, _IOW(DJINN_TYPE, DJINN_IOC_BASE, uint32_t), buf),
		-ENOTTY);
	close(fd);
}

/* ---------------------------------------------------------------------- */
/* SESSION_OPEN */

static int open_with(const char *tenant, size_t tlen, uint32_t prio,
		     uint64_t lease, uint32_t entries,
		     struct djinn_ioc_session_open *o)
{
	int fd = kt_open_dev();
	int ret;

	memset(o, 0, sizeof(*o));
	o->size = sizeof(*o);
	memcpy(o->tenant, tenant, tlen);
	o->priority = prio;
	o->lease_ns = lease;
	o->ring_entries = entries;
	ret = kt_ioctl(fd, DJINN_IOC_SESSION_OPEN, o);
	close(fd);
	return ret;
}

static void test_session_open(void **state)
{
	struct djinn_ioc_session_open o, o2;
	uint64_t before = kt_now_ns();
	char t64[DJINN_TENANT_LEN];
	int fd;

	fd = kt_session("alpha", 0, 0, &o);
	assert_int_not_equal(o.session_id, 0);
	assert_true(memcmp(o.token, (uint8_t[16]){ 0 }, 16) != 0);
	assert_int_equal(o.lease_ns, 10000000000ull); /* lease_ms default */
	assert_true(o.deadline_ns >= before + o.lease_ns);
	assert_true(o.deadline_ns <= kt_now_ns() + o.lease_ns);
	assert_int_equal(o.ring_entries, DJINN_RING_ENTRIES_DEFAULT);
	assert_int_equal(o.ring_bytes % 4096, 0);
	assert_true(o.ring_bytes >=
		    o.ring.cqes + 256 * sizeof(struct djinn_cqe));
	assert_int_equal(o.features, DJINN_FEAT_RING | DJINN_FEAT_RING_HEAD);
	assert_int_equal(o.ring.__reserved, 0);

	/* one session per file */
	o2 = o;
	assert_int_equal(kt_ioctl(fd, DJINN_IOC_SESSION_OPEN, &o2), -EBUSY);
	close(fd);

	/* ids are not reused; tokens differ */
	fd = kt_session("alpha", 0, 0, &o2);
	assert_true(o2.session_id > o.session_id);
	assert_true(memcmp(o.token, o2.token, 16) != 0);
	close(fd);

	/* clamps and rounding, reported back */
	assert_int_equal(open_with("a", 1, 0, 1, 5, &o), 0);
	assert_int_equal(o.lease_ns, 1000000);
	assert_int_equal(o.ring_entries, 8);
	assert_int_equal(open_with("a", 1, 7, 36000ull * 1000000000, 1, &o), 0);
	assert_int_equal(o.lease_ns, 3600ull * 1000000000);
	assert_int_equal(o.ring_entries, 1);
	assert_int_equal(open_with("a", 1, 0, 0, DJINN_RING_ENTRIES_MAX, &o),
			 0);

	/* refused values */
	assert_int_equal(open_with("a", 1, 0, 0, DJINN_RING_ENTRIES_MAX + 1,
				   &o),
			 -EINVAL);
	assert_int_equal(open_with("a", 1, 8, 0, 0, &o), -EINVAL);
	assert_int_equal(open_with("", 0, 0, 0, 0, &o), -EINVAL);
	assert_int_equal(open_with("\x01x", 2, 0, 0, 0, &o), -EINVAL);
	assert_int_equal(open_with("ab\0c", 4, 0, 0, 0, &o), -EINVAL);
	memset(t64, 'x', sizeof(t64));
	assert_int_equal(open_with(t64, sizeof(t64), 0, 0, 0, &o), -EINVAL);
	assert_int_equal(open_with(t64, sizeof(t64) - 1, 0, 0, 0, &o), 0);
}

/* ---------------------------------------------------------------------- */
/* HEARTBEAT, SIGNAL, SESSION_INFO */

static void test_heartbeat(void **state)
{
	struct djinn_ioc_session_open o;
	struct djinn_ioc_heartbeat h = { .size = sizeof(h) };
	struct djinn_ioc_session_info i;
	int fd = kt_session("hb", 0, 0, &o);
	int other = kt_session("other", 0, 0, NULL);
	int bare = kt_open_dev();

	usleep(2000);
	assert_int_equal(kt_ioctl(fd, DJINN_IOC_HEARTBEAT, &h), 0);
	assert_true(h.deadline_ns > o.deadline_ns);
	assert_int_equal(kt_info(fd, 0, &i), 0);
	assert_int_equal(i.heartbeats, 1);
	assert_int_equal(i.deadline_ns, h.deadline_ns);
	/* by id, its own */
	assert_int_equal(kt_heartbeat(fd, o.session_id, false, 0), 0);
	/* ring_head without its flag */
	assert_int_equal(kt_heartbeat(fd, 0, false, 1), -EINVAL);
	/* no session on the file; somebody else's */
	assert_int_equal(kt_heartbeat(bare, 0, false, 0), -ENODEV);
	assert_int_equal(kt_heartbeat(other, o.session_id, false, 0), -ENOENT);
	assert_int_equal(kt_info(fd, 0, &i), 0);
	assert_int_equal(i.heartbeats, 2);
	close(fd);
	close(other);
	close(bare);
}

static void test_signal(void **state)
{
	struct djinn_ioc_session_info i;
	int fd = kt_session("sig", 0, 0, NULL);
	uint32_t bad[] = { 0, 1, 4, 8, 0xffffffff };
	size_t k;

	for (k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
		assert_int_equal(kt_signal(fd, 0, bad[k], 0), -EINVAL);
	/* a wait without a length, or with a negative one converted */
	assert_int_equal(kt_signal(fd, 0, DJINN_SIGNAL_IO_WAIT, 0), -EINVAL);
	assert_int_equal(kt_signal(fd, 0, DJINN_SIGNAL_IO_WAIT, UINT64_MAX),
			 -EINVAL);
	assert_int_equal(kt_info(fd, 0, &i), 0);
	assert_int_equal(i.signals, 0);
	assert_int_equal(kt_signal(fd, 0, DJINN_SIGNAL_IO_WAIT, 5000000), 0);
	assert_int_equal(kt_info(fd, 0, &i), 0);
	assert_int_equal(i.phase, DJINN_SIGNAL_IO_WAIT);
	assert_int_equal(i.expected_ns, 5000000);
	assert_int_equal(i.signals, 1);
	assert_int_equal(i.heartbeats, 0); /* a signal is not a heartbeat */
	assert_int_equal(kt_signal(fd, 0, DJINN_SIGNAL_IDLE, 0), 0);
	assert_int_equal(kt_signal(fd, 0, DJINN_SIGNAL_COMPUTE, 7), 0);
	assert_int_equal(kt_info(fd, 0, &i), 0);
	assert_int_equal(i.phase, DJINN_SIGNAL_COMPUTE);
	assert_int_equal(i.signals, 3);
	close(fd);
}

static void test_session_info(void **state)
{
	struct djinn_ioc_session_open o;
	struct djinn_ioc_session_info i;
	int fd = kt_session("info-tenant", 0, 16, &o);
	int root = kt_open_dev();

	assert_int_equal(kt_info(fd, 0, &i), 0);
	assert_int_equal(i.state, DJINN_STATE_LIVE);
	assert_int_equal(i.kind, 0);
	assert_string_equal(i.tenant, "info-tenant");
	assert_int_equal(i.priority, 4);
	assert_int_equal(i.uid, 0);
	assert_int_equal(i.pid, getpid());
	assert_int_equal(i.lease_ns, o.lease_ns);
	assert_int_equal(i.ring_entries, 16);

	/* another file: an admin may ask by id, and verify the token */
	assert_int_equal(kt_info(root, o.session_id, &i), 0);
	assert_string_equal(i.tenant, "info-tenant");
	memset(&i, 0, sizeof(i));
	i.size = sizeof(i);
	i.flags = DJINN_INFO_F_VERIFY;
	i.session_id = o.session_id;
	memcpy(i.token, o.token, 16);
	assert_int_equal(kt_ioctl(root, DJINN_IOC_SESSION_INFO, &i), 0);
	i.token[15] ^= 1;
	assert_int_equal(kt_ioctl(root, DJINN_IOC_SESSION_INFO, &i), -EACCES);
	/* a token without the flag is a stray input */
	i.flags = 0;
	assert_int_equal(kt_ioctl(root, DJINN_IOC_SESSION_INFO, &i), -EINVAL);

	assert_int_equal(kt_info(root, 0, &i), -ENODEV);
	assert_int_equal(kt_info(root, 0xffffffffull, &i), -ENOENT);
	assert_int_equal(kt_info(root, 1ull << 40, &i), -ENOENT);
	close(fd);
	/* gone from the table at once */
	assert_int_equal(kt_info(root, o.session_id, &i), -ENOENT);
	close(root);
}

/* ---------------------------------------------------------------------- */
/* daemon commands */

static void test_daemon_attach(void **state)
{
	struct djinn_ioc_daemon_attach a = { .size = sizeof(a) };
	struct djinn_ioc_session_open o = { .size = sizeof(o) };
	int d = kt_daemon();
	int d2 = kt_open_dev();
	int s = kt_session("s", 0, 0, NULL);

	assert_int_equal(kt_ioctl(d2, DJINN_IOC_DAEMON_ATTACH, &a), -EBUSY);
	assert_int_equal(kt_ioctl(d, DJINN_IOC_DAEMON_ATTACH, &a), -EBUSY);
	assert_int_equal(kt_ioctl(s, DJINN_IOC_DAEMON_ATTACH, &a), -EBUSY);
	strcpy(o.tenant, "d");
	assert_int_equal(kt_ioctl(d, DJINN_IOC_SESSION_OPEN, &o), -EBUSY);
	close(d);
	/* the daemon's file closed: another may attach */
	assert_int_equal(kt_ioctl(d2, DJINN_IOC_DAEMON_ATTACH, &a), 0);
	close(d2);
	close(s);
}

static void test_proxy(void **state)
{
	struct djinn_ioc_proxy_open po = { .size = sizeof(po) };
	struct djinn_ioc_proxy_close pc = { .size = sizeof(pc) };
	struct djinn_ioc_session_info i;
	int d = kt_daemon();
	int plain = kt_session("plain", 0, 0, NULL);
	int root = kt_open_dev();
	uint64_t id, id2;

	strcpy(po.tenant, "tcp-client");
	po.priority = 6;
	po.lease_ns = 5000000000ull;
	assert_int_equal(kt_ioctl(d, DJINN_IOC_PROXY_OPEN, &po), 0);
	id = po.session_id;
	assert_int_not_equal(id, 0);
	assert_int_equal(po.lease_ns, 5000000000ull);
	assert_int_equal(kt_info(d, id, &i), 0);
	assert_int_equal(i.kind, DJINN_SESSION_PROXY);
	assert_int_equal(i.ring_entries, 0);
	assert_int_equal(i.priority, 6);
	assert_string_equal(i.tenant, "tcp-client");

	/* the daemon renews and signals its proxies by id; nobody else does */
	assert_int_equal(kt_heartbeat(d, id, false, 0), 0);
	assert_int_equal(kt_signal(d, id, DJINN_SIGNAL_IO_WAIT, 9), 0);
	assert_int_equal(kt_heartbeat(plain, id, false, 0), -ENOENT);
	assert_int_equal(kt_signal(root, id, DJINN_SIGNAL_IO_WAIT, 9), -ENOENT);
	assert_int_equal(kt_heartbeat(d, 0, false, 0), -ENODEV);
	/* proxies have no ring */
	assert_int_equal(kt_post(d, id, 1, NULL), -EOPNOTSUPP);
	assert_int_equal(kt_heartbeat(d, id, true, 0), -EINVAL);

	/* close: gone, and a second close finds nothing */
	pc.session_id = id;
	assert_int_equal(kt_ioctl(d, DJINN_IOC_PROXY_CLOSE, &pc), 0);
	assert_int_equal(kt_info(root, id, &i), -ENOENT);
	assert_int_equal(kt_ioctl(d, DJINN_IOC_PROXY_CLOSE, &pc), -ENOENT);

	/* a killed proxy stays the daemon's until it closes it */
	assert_int_equal(kt_ioctl(d, DJINN_IOC_PROXY_OPEN, &po), 0);
	id2 = po.session_id;
	assert_int_equal(kt_kill(root, id2), 0);
	assert_int_equal(kt_info(d, id2, &i), 0);
	assert_int_equal(i.state, DJINN_STATE_KILLED);
	assert_int_equal(kt_heartbeat(d, id2, false, 0), -ENOENT);
	pc.session_id = id2;
	assert_int_equal(kt_ioctl(d, DJINN_IOC_PROXY_CLOSE, &pc), 0);

	/* the daemon's file closing ends the rest */
	assert_int_equal(kt_ioctl(d, DJINN_IOC_PROXY_OPEN, &po), 0);
	id = po.session_id;
	assert_int_equal(kt_info(root, id, &i), 0);
	close(d);
	assert_int_equal(kt_info(root, id, &i), -ENOENT);
	close(plain);
	close(root);
}

static void test_daemon_only(void **state)
{
	struct djinn_ioc_proxy_open po = { .size = sizeof(po) };
	struct djinn_ioc_proxy_close pc = { .size = sizeof(pc),
					    .session_id = 1 };
	struct djinn_ioc_session_open o;
	int root = kt_open_dev();
	int s = kt_session("s", 0, 0, &o);

	/* root, but not the daemon's file */
	strcpy(po.tenant, "x");
	assert_int_equal(kt_ioctl(root, DJINN_IOC_PROXY_OPEN, &po), -EPERM);
	assert_int_equal(kt_ioctl(root, DJINN_IOC_PROXY_CLOSE, &pc), -EPERM);
	assert_int_equal(kt_post(root, o.session_id, 1, NULL), -EPERM);
	assert_int_equal(kt_post(s, o.session_id, 1, NULL), -EPERM);
	close(root);
	close(s);
}

static void test_kill(void **state)
{
	struct djinn_ioc_session_open o;
	struct djinn_ioc_session_info i;
	int s = kt_session("victim", 0, 0, &o);
	int admin = kt_open_dev();

	assert_int_equal(kt_kill(admin, o.session_id), 0);
	assert_int_equal(kt_kill(admin, o.session_id), -ENOENT);
	assert_int_equal(kt_heartbeat(s, 0, false, 0), -ECANCELED);
	assert_int_equal(kt_signal(s, 0, DJINN_SIGNAL_IDLE, 0), -ECANCELED);
	assert_int_equal(kt_info(s, 0, &i), 0);
	assert_int_equal(i.state, DJINN_STATE_KILLED);
	assert_int_equal(kt_info(admin, o.session_id, &i), -ENOENT);
	assert_int_equal(kt_kill(admin, 0), -ENOENT);
	close(s);
	close(admin);
}

/* ---------------------------------------------------------------------- */
/* as nobody */

static uint64_t root_session;

static int nobody_checks(void *arg)
{
	struct djinn_ioc_daemon_attach a = { .size = sizeof(a) };
	struct djinn_ioc_session_open o = { .size = sizeof(o) };
	struct djinn_ioc_session_info i;
	struct djinn_ioc_proxy_open po = { .size = sizeof(po) };
	int fd, bare, step = 1;

	/* any user opens a session */
	fd = open(DJINN_DEVICE, O_RDWR);
	if (fd < 0)
		return step;
	step++;
	strcpy(o.tenant, "nobody");
	if (kt_ioctl(fd, DJINN_IOC_SESSION_OPEN, &o))
		return step;
	step++;
	if (kt_info(fd, 0, &i) || i.uid != KT_NOBODY)
		return step;
	step++;
	if (kt_heartbeat(fd, 0, false, 0) ||
	    kt_signal(fd, 0, DJINN_SIGNAL_IO_WAIT, 1))
		return step;
	step++;
	/* and nothing of the daemon's or an admin's */
	bare = open(DJINN_DEVICE, O_RDWR);
	if (kt_ioctl(bare, DJINN_IOC_DAEMON_ATTACH, &a) != -EPERM)
		return step;
	step++;
	if (kt_kill(fd, root_session) != -EPERM ||
	    kt_kill(fd, o.session_id) != -EPERM)
		return step;
	step++;
	strcpy(po.tenant, "x");
	if (kt_ioctl(bare, DJINN_IOC_PROXY_OPEN, &po) != -EPERM ||
	    kt_post(bare, o.session_id, 1, NULL) != -EPERM)
		return step;
	step++;
	/* nor does it see or touch root's session */
	if (kt_info(fd, root_session, &i) != -ENOENT ||
	    kt_heartbeat(fd, root_session, false, 0) != -ENOENT ||
	    kt_signal(fd, root_session, DJINN_SIGNAL_IDLE, 0) != -ENOENT)
		return step;
	return 0;
}

static void test_unprivileged(void **state)
{
	struct djinn_ioc_session_open o;
	struct djinn_ioc_session_info i;
	int fd = kt_session("root", 0, 0, &o);
	int ret;

	root_session = o.session_id;
	ret = kt_as_nobody(nobody_checks, NULL);
	if (ret)
		fail_msg("as nobody: check %d failed", ret);
	/* root's session untouched */
	assert_int_equal(kt_info(fd, 0, &i), 0);
	assert_int_equal(i.state, DJINN_STATE_LIVE);
	assert_int_equal(i.heartbeats, 0);
	close(fd);
}

/*
 * A session records its opener's effective uid, the one SO_PEERCRED
 * reports of the same process on djinnd's socket (SESSION_BIND compares
 * the two): a process whose real uid is nobody's and effective uid
 * another's (a set-uid program) opens a session of the effective one.
 */
#define KT_EUID 23456

static int euid_open(void *arg)
{
	struct djinn_ioc_session_open o = { .size = sizeof(o) };
	struct djinn_ioc_session_info i;
	int fd;

	(void)arg;
	if (setresuid(KT_NOBODY, KT_EUID, KT_EUID) || geteuid() != KT_EUID ||
	    getuid() != KT_NOBODY)
		return 1;
	fd = open(DJINN_DEVICE, O_RDWR);
	if (fd < 0)
		return 2;
	strcpy(o.tenant, "setuid");
	if (kt_ioctl(fd, DJINN_IOC_SESSION_OPEN, &o))
		return 3;
	if (kt_info(fd, 0, &i))
		return 4;
	return i.uid == KT_EUID ? 0 : 5;
}

static void test_effective_uid(void **state)
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0)
		_exit(setgroups(0, NULL) ? 100 : euid_open(NULL));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status))
		fail_msg("real uid %u, effective %u: check %d failed (5: the "
			 "session's uid is not the effective one)",
			 KT_NOBODY, KT_EUID, WEXITSTATUS(status));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_size_conformance),
		cmocka_unit_test(test_unknown_commands),
		cmocka_unit_test(test_session_open),
		cmocka_unit_test(test_heartbeat),
		cmocka_unit_test(test_signal),
		cmocka_unit_test(test_session_info),
		cmocka_unit_test(test_daemon_attach),
		cmocka_unit_test(test_proxy),
		cmocka_unit_test(test_daemon_only),
		cmocka_unit_test(test_kill),
		cmocka_unit_test(test_unprivileged),
		cmocka_unit_test(test_effective_uid),
	};

	return cmocka_run_group_tests_name("djinn.ko ioctls", tests, NULL,
					   NULL);
}
