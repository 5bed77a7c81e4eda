// SPDX-License-Identifier: MIT
/*
 * Who a client is, against a real djinnd (Documentation/security.rst,
 * "Identity"): a unix-socket client's tenant comes from SO_PEERCRED and
 * SO_PEERGROUPS through [tenant.NAME] uids and gids, else "uid:N"; the
 * string it sends at SESSION_OPEN is a label and changes nothing of who
 * it is. Clients of other uids are connected by a child that changes its
 * ids first (dj_connect_as()), so the test needs root; without it, it
 * skips (77).
 *
 * - without a mapping: root is "uid:0", nobody "uid:65534", and nobody
 *   sending "uid:0" (or a tenant name from the configuration) as its
 *   label is still "uid:65534";
 * - with one: by uid first, then the primary gid, then the first tenant
 *   in the file's order listing a supplementary group, else "uid:N";
 *   names of users and groups are accepted;
 * - SIGHUP applies a new mapping to connections made after it; one
 *   already open keeps its tenant;
 * - a uid (a gid) listed by two tenants, an unknown user, an empty list
 *   stop djinnd from starting, naming the key;
 * - text is the uploader's tenant's: another tenant's TEXT_LOOKUP of it
 *   answers exactly as for bytes nobody uploaded (code and message), its
 *   upload of the same bytes is not deduplicated (so not confirmed) and
 *   reads back its own bytes; the same tenant's next session finds it;
 * - a served model's weights are shared, and no tenant finds them by the
 *   fingerprint MODEL_OPEN gives it, so none can read them, unless the
 *   configuration says the model's weights are open (model.NAME.readable);
 * - a delegation: a user listed in [tenant.NAME] delegates opens
 *   sessions of that tenant (SESSION_OPEN with DJINN_SESSION_DELEGATED),
 *   and attaches them from another connection; a user not listed, or a
 *   tenant that does not list it, is -EPERM naming both, and an unknown
 *   flag -EINVAL;
 * - over loopback TCP the tenant is the peer socket's owner (sock_diag),
 *   mapped as a unix client's uid; a TCP listener beyond loopback is
 *   refused at start unless server.plain_tcp = any;
 * - a tenant at a quota ([tenant.NAME] sessions, connections, memory,
 *   inflight, lease_max) gets -EDQUOT naming the numbers and the key, or
 *   its lease clamped; a victim tenant alongside is served as before,
 *   and djinnctl tenant list shows both against their quotas. The
 *   inflight quota counts the tenant's graphs over all its sessions:
 *   a graph sent while another session's long matmul runs is refused.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <linux/sockios.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fixture.h"
#include "../unit/testutil.h"

#define NOBODY 65534

/* A connection as @uid, @gid (and @groups), past HELLO. */
static int connect_at(const char *path, uid_t uid, gid_t gid,
		      const gid_t *groups, size_t n)
{
	int fd = dj_connect_as(path, uid, gid, groups, n);

	if (fd < 0)
		fail_msg("connect as uid %u gid %u: %s", (unsigned int)uid,
			 (unsigned int)gid, strerror(-fd));
	hello_at(__LINE__, fd);
	return fd;
}

/* The same on the daemon's unix socket. */
static int connect_as(struct fx *fx, uid_t uid, gid_t gid, const gid_t *groups,
		      size_t n)
{
	return connect_at(fx->d.sock, uid, gid, groups, n);
}

/* Session @sid's tenant, and that its label is @label. */
static const char *tenant_of(struct fx *fx, uint64_t sid, const char *label)
{
	static char t[DJINN_TENANT_LEN];
	struct djinn_admin_session e = session_entry(fx, sid);

	assert_string_equal(e.label, label);
	memcpy(t, e.tenant, sizeof(t));
	t[sizeof(t) - 1] = 0;
	return t;
}

/* A session of a client as @uid/@gid/@groups labelled @label: its
 * tenant. The connection goes with the session. */
static const char *tenant_at(struct fx *fx, const char *path, uid_t uid,
			     gid_t gid, const gid_t *groups, size_t n,
			     const char *label)
{
	int fd = connect_at(path, uid, gid, groups, n);
	uint64_t sid = open_session(fd, label);
	const char *t = tenant_of(fx, sid, label);

	close_session(fd, sid);
	close(fd);
	return t;
}

static const char *tenant_as(struct fx *fx, uid_t uid, gid_t gid,
			     const gid_t *groups, size_t n, const char *label)
{
	return tenant_at(fx, fx->d.sock, uid, gid, groups, n, label);
}

static int setup_plain(void **state)
{
	return fx_setup(state);
}

static void test_default(void **state)
{
	struct fx *fx = *state;
	int fd = xconnect(fx->d.sock);
	char me[DJINN_TENANT_LEN];
	uint64_t sid;

	snprintf(me, sizeof(me), "uid:%u", (unsigned int)getuid());
	sid = open_session(fd, "anything");
	assert_string_equal(tenant_of(fx, sid, "anything"), me);
	close_session(fd, sid);
	close(fd);

	assert_string_equal(tenant_as(fx, NOBODY, NOBODY, NULL, 0, "mine"),
			    "uid:65534");
	/* spoofing through the label: still who it is */
	assert_string_equal(tenant_as(fx, NOBODY, NOBODY, NULL, 0, "uid:0"),
			    "uid:65534");
	assert_string_equal(tenant_as(fx, NOBODY, NOBODY, NULL, 0, me),
			    "uid:65534");
}

static int setup_mapped(void **state)
{
	static const char *const extra[] = {
		"--set", "tenant.team.uids=65533,nobody",
		"--set", "tenant.team.gids=4242",
		"--set", "tenant.ops.gids=4343, 4344",
		NULL
	};

	return fx_start_args(state, DEV_MEM, 10000, extra);
}

static void test_mapped(void **state)
{
	struct fx *fx = *state;
	const gid_t ops[] = { 4343 }, both[] = { 4344, 4242 };

	/* by uid, by number and by name */
	assert_string_equal(tenant_as(fx, 65533, 65533, NULL, 0, "a"), "team");
	assert_string_equal(tenant_as(fx, NOBODY, NOBODY, NULL, 0, "ops"),
			    "team");
	/* by the primary gid */
	assert_string_equal(tenant_as(fx, 65532, 4242, NULL, 0, "b"), "team");
	/* by a supplementary group */
	assert_string_equal(tenant_as(fx, 65531, 65531, ops, 1, "c"), "ops");
	/* the primary group first, then the first tenant in the file's
	 * order listing a supplementary one (team is set before ops) */
	assert_string_equal(tenant_as(fx, 65530, 4242, ops, 1, "d"), "team");
	assert_string_equal(tenant_as(fx, 65529, 65529, both, 2, "e"), "team");
	assert_string_equal(tenant_as(fx, 65529, 4343, both, 2, "g"), "ops");
	/* the uid before any group */
	assert_string_equal(tenant_as(fx, 65533, 4343, NULL, 0, "f"), "team");
	/* nobody's: "uid:N", whatever the label says */
	assert_string_equal(tenant_as(fx, 65528, 65528, NULL, 0, "team"),
			    "uid:65528");
}

static int setup_delegated(void **state)
{
	static const char *const extra[] = { "--set",
					     "tenant.research.delegates=65533",
					     "--set", "tenant.other.uids=65530",
					     NULL };

	return fx_start_args(state, DEV_MEM, 10000, extra);
}

/* SESSION_OPEN for tenant @tenant with @flags on @fd. */
static struct djinn_session_open delegated(const char *tenant, uint32_t flags)
{
	struct djinn_session_open o = { .priority = 4, .flags = flags };

	snprintf(o.tenant, sizeof(o.tenant), "%s", tenant);
	return o;
}

static void test_delegated(void **state)
{
	struct fx *fx = *state;
	struct djinn_session_open o =
		delegated("research", DJINN_SESSION_DELEGATED);
	int front = connect_as(fx, 65533, 65533, NULL, 0);
	int other = connect_as(fx, 65532, 65532, NULL, 0);
	struct djinn_session_resp s, s2;
	struct dj_resp r;
	uint8_t token[DJINN_TOKEN_LEN];
	int again;

	/* the delegate: the session is the tenant's */
	call_ok(front, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), &r, sizeof(s));
	memcpy(&s, r.data, sizeof(s));
	dj_resp_free(&r);
	assert_string_equal(tenant_of(fx, s.session_id, "research"),
			    "research");
	/* another connection of the delegate attaches it */
	memcpy(token, s.token, sizeof(token));
	again = connect_as(fx, 65533, 65533, NULL, 0);
	call_ok(again, DJINN_MSG_SESSION_ATTACH, s.session_id, token,
		sizeof(token), &r, -1);
	dj_resp_free(&r);
	/* anyone else: not even with the token */
	call_err(other, DJINN_MSG_SESSION_ATTACH, s.session_id, token,
		 sizeof(token), -EPERM, "no session");
	call_err(other, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), -EPERM,
		 "uid 65532 may not open sessions of tenant research");
	/* a tenant that does not list the delegate */
	o = delegated("other", DJINN_SESSION_DELEGATED);
	call_err(front, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), -EPERM,
		 "[tenant.other] delegates");
	o = delegated("research", 0x80);
	call_err(front, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), -EINVAL,
		 "unknown flags 0x80");
	/* without the flag, the name is a label, as ever */
	o = delegated("research", 0);
	call_ok(other, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), &r, sizeof(s));
	memcpy(&s2, r.data, sizeof(s2));
	dj_resp_free(&r);
	assert_string_equal(tenant_of(fx, s2.session_id, "research"),
			    "uid:65532");
	close_session(other, s2.session_id);
	close_session(again, s.session_id);
	close(again);
	close(other);
	close(front);
}

/* TEXT_LOOKUP of @fp viewed as @d by @sid on @fd: the error and its
 * message, into @msg. */
static int lookup(int fd, uint64_t sid, const struct djinn_tensor_desc *d,
		  const uint8_t *fp, char *msg, size_t msglen)
{
	struct djinn_text_lookup l = { .desc = *d };
	struct dj_resp r;
	int err;

	memcpy(l.fp, fp, sizeof(l.fp));
	assert_int_equal(
		dj_call(fd, DJINN_MSG_TEXT_LOOKUP, sid, &l, sizeof(l), &r), 1);
	err = r.error;
	snprintf(msg, msglen, "%.*s", (int)msglen - 1, err ? r.msg : "");
	dj_resp_free(&r);
	return err;
}

static void test_text(void **state)
{
	struct fx *fx = *state;
	const struct djinn_tensor_desc d = F32(4096);
	const uint64_t bytes = desc_bytes(&d);
	uint8_t *data = pattern_buf(23, bytes), *got = xmalloc(bytes);
	uint8_t fp[DJINN_FP_LEN], none[DJINN_FP_LEN];
	char theirs[256], nobodys[256];
	int fa = xconnect(fx->d.sock), fb, fa2;
	uint64_t sa = open_session(fa, "owner"), sb, sa2, t, tb;
	uint32_t flags;

	sha256(data, bytes, fp);
	sha256("never uploaded", 14, none);
	t = create_at(__LINE__, fa, sa, &d, DJINN_SEG_TEXT, fp, data, bytes,
		      &flags);
	assert_int_equal(flags & DJINN_TENSOR_DEDUP, 0);

	/* nobody (another tenant) cannot find it, and cannot tell it from
	 * bytes nobody uploaded */
	fb = connect_as(fx, NOBODY, NOBODY, NULL, 0);
	sb = open_session(fb, "owner"); /* the same label: no matter */
	assert_int_equal(lookup(fb, sb, &d, fp, theirs, sizeof(theirs)),
			 -ENOENT);
	assert_int_equal(lookup(fb, sb, &d, none, nobodys, sizeof(nobodys)),
			 -ENOENT);
	assert_string_equal(theirs, nobodys);
	/* its own upload of the same bytes: its own entry, no dedup */
	tb = create_at(__LINE__, fb, sb, &d, DJINN_SEG_TEXT, fp, data, bytes,
		       &flags);
	assert_int_equal(flags & DJINN_TENSOR_DEDUP, 0);
	tensor_read(fb, sb, tb, 0, bytes, got);
	assert_memory_equal(got, data, bytes);

	/* the owner's next session finds its own */
	fa2 = xconnect(fx->d.sock);
	sa2 = open_session(fa2, "again");
	assert_int_equal(lookup(fa2, sa2, &d, fp, theirs, sizeof(theirs)), 0);
	tensor_read(fa, sa, t, 0, bytes, got);
	assert_memory_equal(got, data, bytes);

	/* a served model's weights: opened by both, found by neither */
	{
		struct djinn_model_open o = { .name = "tiny" };
		struct djinn_model_resp m;
		struct djinn_tensor_desc w;
		struct dj_resp r;

		assert_int_equal(djd_make_model(&fx->d, "tiny",
						"--arch gpt2 --layers 1 "
						"--embd 32 --heads 2 "
						"--vocab 64 --ctx 32 "
						"--seed 5"),
				 0);
		call_ok(fb, DJINN_MSG_MODEL_OPEN, sb, &o, sizeof(o), &r,
			sizeof(m));
		memcpy(&m, r.data, sizeof(m));
		dj_resp_free(&r);
		w = DESC(DJINN_DTYPE_U8, m.bytes);
		assert_int_equal(lookup(fb, sb, &w, m.fp, theirs,
					sizeof(theirs)),
				 -ENOENT);
		assert_string_equal(theirs, nobodys);
		call_ok(fa, DJINN_MSG_MODEL_OPEN, sa, &o, sizeof(o), &r,
			sizeof(m));
		dj_resp_free(&r);
		assert_int_equal(lookup(fa, sa, &w, m.fp, theirs,
					sizeof(theirs)),
				 -ENOENT);
	}

	close_session(fa2, sa2);
	close_session(fb, sb);
	close_session(fa, sa);
	close(fa2);
	close(fb);
	close(fa);
	free(data);
	free(got);
	check_text_cached(fx);
}

static unsigned int tcp_port;

/* djinnd with --set @set and a TCP listener on a free loopback port
 * (tcp_port). */
static int start_tcp(void **state, const char *set)
{
	static char listen[40];
	const char *extra[] = { "--set", set, "--listen", listen, NULL };

	tcp_port = dj_free_port();
	if (!tcp_port)
		return -1;
	snprintf(listen, sizeof(listen), "tcp:127.0.0.1:%u", tcp_port);
	return fx_start_args(state, DEV_MEM, 10000, extra);
}

static int setup_tcp(void **state)
{
	return start_tcp(state, "tenant.team.uids=65533");
}

static void test_tcp(void **state)
{
	struct fx *fx = *state;
	char port[24];

	snprintf(port, sizeof(port), "tcp:%u", tcp_port);
	/* root's socket: root's tenant */
	assert_string_equal(tenant_at(fx, port, 0, 0, NULL, 0, "over-tcp"),
			    "uid:0");
	/* sockets of other uids: theirs, mapped like a unix client's */
	assert_string_equal(tenant_at(fx, port, NOBODY, NOBODY, NULL, 0,
				      "uid:0"),
			    "uid:65534");
	assert_string_equal(tenant_at(fx, port, 65533, 65533, NULL, 0, "t"),
			    "team");
}

/* Plain TCP beyond loopback: refused at start unless server.plain_tcp
 * says any. */
static void test_tcp_listen(void **state)
{
	char listen[40];
	const char *plain[] = { "--listen", listen, NULL };
	const char *any[] = { "--listen", listen, "--set",
			      "server.plain_tcp=any", NULL };
	struct djd d;

	(void)state;
	snprintf(listen, sizeof(listen), "tcp:0.0.0.0:%u", dj_free_port());
	if (!djd_start_args(&d, DEV_MEM, 10000, plain)) {
		djd_kill(&d);
		fail_msg("djinnd listened on %s with plain_tcp = loopback",
			 listen);
	}
	if (!strstr(djd_start_error(),
		    "is not loopback, and plain TCP authenticates no one") ||
	    !strstr(djd_start_error(), "server.plain_tcp = any"))
		fail_msg("djinnd said \"%s\"", djd_start_error());
	assert_int_equal(djd_start_args(&d, DEV_MEM, 10000, any), 0);
	assert_int_equal(djd_stop(&d, 10000), 0);
}

/*
 * A loopback TCP peer that sends its frames and closes its socket before
 * djinnd identifies it leaves a socket no process holds (no inode),
 * whose uid sock_diag may report as 0 (TIME_WAIT): its SESSION_OPEN could
 * run as root's tenant. Such a peer is refused now, whatever uid the
 * kernel reports for it (the old code opened this one's session). djinnd
 * is stopped (SIGSTOP) while uid 65534 connects, sends HELLO and
 * SESSION_OPEN and closes, so that it is always so.
 */
static void test_tcp_closed_peer(void **state)
{
	struct fx *fx = *state;
	struct djinn_session_open o = { .tenant = "ghost", .priority = 4 };
	struct djinn_admin_stats st0 = stats_now(fx);
	struct djinn_admin_session *l;
	char port[24];
	uint32_t n;
	int fd;

	snprintf(port, sizeof(port), "tcp:%u", tcp_port);
	assert_int_equal(kill(fx->d.pid, SIGSTOP), 0);
	fd = dj_connect_as(port, NOBODY, NOBODY, NULL, 0);
	if (fd < 0) {
		kill(fx->d.pid, SIGCONT);
		fail_msg("connect as uid 65534: %s", strerror(-fd));
	}
	assert_int_equal(dj_send(fd, DJINN_MSG_HELLO, 1, 0, NULL, 0), 0);
	assert_int_equal(
		dj_send(fd, DJINN_MSG_SESSION_OPEN, 2, 0, &o, sizeof(o)), 0);
	close(fd);
	assert_int_equal(kill(fx->d.pid, SIGCONT), 0);
	/* djinnd accepts it and closes it */
	for (int i = 0; i < 500; i++) {
		struct djinn_admin_stats st = stats_now(fx);

		if (st.conns_accepted > st0.conns_accepted &&
		    st.conns <= st0.conns)
			break;
		usleep(10000);
	}
	n = sessions_now(fx, &l);
	for (uint32_t i = 0; i < n; i++)
		if (!strcmp(l[i].label, "ghost"))
			fail_msg("a closed peer's session opened as tenant %s",
				 l[i].tenant);
	free(l);
	wait_log(fx->d.log, "its socket is closed): closed");
}

/* A TCP listener, and ADMIN_FAULT_INJECT for the identity hold. */
static int setup_tcp_hold(void **state)
{
	static char listen[40];
	const char *extra[] = { "--fault-injection", "--listen", listen, NULL };

	tcp_port = dj_free_port();
	if (!tcp_port)
		return -1;
	snprintf(listen, sizeof(listen), "tcp:127.0.0.1:%u", tcp_port);
	return fx_start_args(state, DEV_MEM, 10000, extra);
}

/* Loopback identity lookups wait (@flags DJINN_FAULT_IDENT_HOLD) or go
 * on (DJINN_FAULT_IDENT_GO). */
static void ident_flags(struct fx *fx, uint32_t flags)
{
	struct djinn_admin_fault_req q = { .flags = flags };
	struct dj_resp r;

	call_ok(fx->adm, DJINN_MSG_ADMIN_FAULT_INJECT, 0, &q, sizeof(q), &r,
		sizeof(struct djinn_admin_fault));
	dj_resp_free(&r);
}

/*
 * A loopback TCP peer's owner is looked up off the I/O thread, and its
 * frames wait unread until it is known: with the lookups held, a TCP
 * client of uid 65534 is accepted but its HELLO is not answered, while a
 * unix client is served meanwhile; once they go on, the HELLO is
 * answered and its session is its owner's tenant's.
 */
static void test_tcp_ident_async(void **state)
{
	struct fx *fx = *state;
	struct djinn_admin_stats st0 = stats_now(fx);
	struct dj_resp r;
	char port[24];
	uint64_t sid;
	int ft, fu;

	ident_flags(fx, DJINN_FAULT_IDENT_HOLD);
	snprintf(port, sizeof(port), "tcp:%u", tcp_port);
	ft = dj_connect_as(port, NOBODY, NOBODY, NULL, 0);
	assert_true(ft >= 0);
	assert_int_equal(dj_send(ft, DJINN_MSG_HELLO, 1, 0, NULL, 0), 0);
	for (int i = 0; i < 500; i++) {
		if (stats_now(fx).conns_accepted > st0.conns_accepted)
			break;
		usleep(10000);
	}
	assert_true(stats_now(fx).conns_accepted > st0.conns_accepted);
	/* the I/O thread goes on: a unix client is served */
	fu = connect_as(fx, 0, 0, NULL, 0);
	close_session(fu, open_session(fu, "meanwhile"));
	/* and the TCP peer's HELLO is still unread */
	assert_int_equal(dj_recv(ft, &r, 0), -ETIMEDOUT);
	ident_flags(fx, DJINN_FAULT_IDENT_GO);
	assert_int_equal(dj_recv(ft, &r, DJ_TIMEOUT_MS), 1);
	assert_int_equal(r.error, 0);
	dj_resp_free(&r);
	sid = open_session(ft, "late");
	assert_string_equal(tenant_of(fx, sid, "late"), "uid:65534");
	close_session(ft, sid);
	close(ft);
	close(fu);
}

static int setup_tcp_cap(void **state)
{
	return start_tcp(state, "server.max_sessions_per_uid=2");
}

/*
 * server.max_sessions_per_uid over TCP counts per tenant: root's two
 * sessions over TCP reach it for root's tenant, and uid 65534's tenant,
 * also over TCP, still opens its own (all TCP peers counted as one uid
 * before, so one network tenant took the limit from every other).
 */
static void test_tcp_cap(void **state)
{
	struct fx *fx = *state;
	char port[24];
	int fr, fn;
	uint64_t r1, r2, n1;

	snprintf(port, sizeof(port), "tcp:%u", tcp_port);
	fr = connect_at(port, 0, 0, NULL, 0);
	r1 = open_session(fr, "r1");
	r2 = open_session(fr, "r2");
	{
		struct djinn_session_open o = { .tenant = "r3", .priority = 4 };

		call_err(fr, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), -EDQUOT,
			 "2 sessions open for tenant uid:0 over TCP");
	}
	fn = connect_at(port, NOBODY, NOBODY, NULL, 0);
	n1 = open_session(fn, "n1");
	assert_string_equal(tenant_of(fx, n1, "n1"), "uid:65534");
	close_session(fn, n1);
	close_session(fr, r1);
	close_session(fr, r2);
	close(fn);
	close(fr);
}

static int setup_quotas(void **state)
{
	static const char *const extra[] = {
		"--set", "tenant.uid:65534.sessions=2",
		"--set", "tenant.uid:65534.connections=3",
		"--set", "tenant.uid:65534.memory=4M",
		"--set", "tenant.uid:65534.lease_max=2s",
		NULL
	};

	return fx_start_args(state, DEV_MEM, 10000, extra);
}

/* djinnctl -j tenant list: its output (the caller frees). */
static char *tenant_list_json(struct fx *fx)
{
	char cmd[512], *out = xmalloc(65536);
	size_t n;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "'%s' -s '%s' -j tenant list",
		 djd_djinnctl(), fx->d.admin);
	p = popen(cmd, "r");
	assert_non_null(p);
	n = fread(out, 1, 65535, p);
	out[n] = 0;
	assert_int_equal(pclose(p), 0);
	return out;
}

static void test_quotas(void **state)
{
	struct fx *fx = *state;
	const struct djinn_tensor_desc mib3 = F32(3 << 18), mib2 = F32(1 << 19),
				       mib8 = F32(1 << 21);
	struct djinn_session_resp sr;
	struct dj_resp r;
	int fa = connect_as(fx, NOBODY, NOBODY, NULL, 0), fb, fc, fd, fv;
	uint64_t s1, s2, v[3];
	char *json;

	/* sessions: two, then -EDQUOT with the numbers; its lease clamped */
	s1 = open_at(__LINE__, fa, "one", 4, 60 * NSEC_PER_SEC, &sr);
	assert_int_equal(sr.lease_ns, 2 * NSEC_PER_SEC);
	s2 = open_session(fa, "two");
	{
		struct djinn_session_open o = { .tenant = "three",
						.priority = 4 };

		call_err(fa, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), -EDQUOT,
			 "2 sessions open for tenant uid:65534, its quota "
			 "(tenant.uid:65534.sessions)");
	}
	/* the victim (root, no quotas) opens three and more memory */
	fv = xconnect(fx->d.sock);
	for (int i = 0; i < 3; i++)
		v[i] = open_session(fv, "victim");
	create_data(fv, v[0], &mib8, NULL, 0);

	/* memory: 3 MiB fit in 4 (taking 4: two granules of 2), 2 more do
	 * not */
	create_data(fa, s1, &mib3, NULL, 0);
	create_try_at(__LINE__, fa, s2, &mib2, DJINN_SEG_DATA, NULL, NULL, 0,
		      &r);
	expect_error(&r, -EDQUOT,
		     "cannot allocate 2097152 bytes: tenant uid:65534 holds "
		     "4194304 bytes of data and 0 of text on cpu, its quota "
		     "4194304 "
		     "(tenant.uid:65534.memory)");
	dj_resp_free(&r);

	/* connections: three (fa is one), then refused -EDQUOT */
	fb = connect_as(fx, NOBODY, NOBODY, NULL, 0);
	fc = connect_as(fx, NOBODY, NOBODY, NULL, 0);
	fd = dj_connect_as(fx->d.sock, NOBODY, NOBODY, NULL, 0);
	assert_true(fd >= 0);
	assert_int_equal(dj_recv(fd, &r, 5000), 1);
	expect_error(&r, -EDQUOT,
		     "3 connections of tenant uid:65534 open, its quota "
		     "(tenant.uid:65534.connections)");
	dj_resp_free(&r);
	close(fd);

	/* the victim is served as before */
	create_data(fv, v[1], &mib3, NULL, 0);
	json = tenant_list_json(fx);
	if (!strstr(json, "{\"name\":\"uid:65534\",\"connections\":3,"
			  "\"sessions\":2,") ||
	    !strstr(json,
		    "\"quota\":{\"memory\":4194304,\"swap\":null,\"guaranteed\":null,"
		    "\"connections\":3,\"sessions\":2,\"inflight\":null,"
		    "\"lease_max_ns\":2000000000}") ||
	    !strstr(json, "{\"name\":\"uid:0\",\"connections\":"))
		fail_msg("tenant list: %s", json);
	free(json);

	close(fb);
	close(fc);
	close_session(fa, s1);
	close_session(fa, s2);
	close(fa);
	for (int i = 0; i < 3; i++)
		close_session(fv, v[i]);
	close(fv);
}

/*
 * Two uploads of text side by side, 3 MiB each for a tenant whose quota
 * is 4 MiB (a granule of 2 MiB: 4 MiB each): while the first is still
 * sending its bytes, the second is refused -EDQUOT at once (uploads in
 * progress count against the quota), and the first completes; before,
 * both completed and the tenant held twice its quota.
 */
static void test_text_race(void **state)
{
	struct fx *fx = *state;
	const struct djinn_tensor_desc d = F32(3 << 18);
	const uint64_t bytes = desc_bytes(&d);
	uint8_t *a = pattern_buf(31, bytes), *b = pattern_buf(32, bytes);
	uint8_t fpa[DJINN_FP_LEN];
	struct djinn_tensor_create c = { .desc = d, .segment = DJINN_SEG_TEXT };
	int fa = connect_as(fx, NOBODY, NOBODY, NULL, 0);
	int fb = connect_as(fx, NOBODY, NOBODY, NULL, 0);
	uint64_t sa = open_session(fa, "a"), sb = open_session(fb, "b");
	struct djinn_hdr h =
		dj_hdr(DJINN_MSG_TENSOR_CREATE, 5, sa, sizeof(c) + bytes);
	struct dj_resp r;
	int queued = 1;

	sha256(a, bytes, fpa);
	memcpy(c.fp, fpa, sizeof(c.fp));
	/* a's request and its first MiB, then a wait until djinnd has read
	 * them: its upload has begun */
	assert_int_equal(dj_send_raw(fa, &h, &c, sizeof(c)), 0);
	assert_int_equal(dj_write(fa, a, 1 << 20, 5000), 0);
	for (int i = 0; i < 500 && queued; i++) {
		assert_int_equal(ioctl(fa, SIOCOUTQ, &queued), 0);
		if (queued)
			usleep(10000);
	}
	assert_int_equal(queued, 0);
	/* b's upload: refused at its start while a's is under way (its
	 * bytes, past what djinnd skips, are not read: the connection
	 * closes after the answer) */
	{
		struct djinn_tensor_create cb = c;
		struct djinn_hdr hb = dj_hdr(DJINN_MSG_TENSOR_CREATE, 6, sb,
					     sizeof(cb) + bytes);

		sha256(b, bytes, cb.fp);
		assert_int_equal(dj_send_raw(fb, &hb, &cb, sizeof(cb)), 0);
		assert_int_equal(dj_recv(fb, &r, 10000), 1);
		assert_int_equal(r.hdr.request_id, 6);
		expect_error(&r, -EDQUOT, NULL);
		dj_resp_free(&r);
	}
	/* a's rest: it completes */
	assert_int_equal(dj_write(fa, a + (1 << 20), bytes - (1 << 20), 5000),
			 0);
	assert_int_equal(dj_recv(fa, &r, 10000), 1);
	assert_int_equal(r.hdr.request_id, 5);
	if (r.error)
		fail_msg("a's upload: %d: %s", r.error, r.msg);
	dj_resp_free(&r);
	close_session(fa, sa);
	close(fa);
	close(fb);
	free(a);
	free(b);
	check_text_cached(fx); /* a's entry, cached unheld */
}

static int setup_inflight(void **state)
{
	static const char *const extra[] = { "--set",
					     "tenant.uid:65534.inflight=1",
					     NULL };

	return fx_start_args(state, DEV_MEM, 10000, extra);
}

/* A 1024-square matmul of @a and @b (long enough to be in flight while
 * the next frame is read), sent as request @id of @sid. */
static void send_matmul(int fd, uint64_t sid, uint64_t id, uint64_t a,
			uint64_t b)
{
	struct gb g = { 0 };
	uint32_t x = gb_input(&g, a), w = gb_input(&g, b);

	gb_output(&g, gb_op(&g, DJINN_GOP_MATMUL, 2, x, w));
	graph_send_at(__LINE__, fd, sid, id, &g);
}

static void test_inflight(void **state)
{
	struct fx *fx = *state;
	const struct djinn_tensor_desc sq = F32(1024, 1024);
	int fa = connect_as(fx, NOBODY, NOBODY, NULL, 0);
	int fv = xconnect(fx->d.sock);
	uint64_t s1 = open_session(fa, "one"), s2 = open_session(fa, "two");
	uint64_t v = open_session(fv, "victim"), a, a2, b, va, vb;
	struct dj_resp r;
	bool err_seen = false, ok_seen = false;

	a = upload_rand(fa, s1, &sq, 1, 1.0f, NULL);
	b = upload_rand(fa, s1, &sq, 2, 1.0f, NULL);
	va = upload_rand(fv, v, &sq, 3, 1.0f, NULL);
	vb = upload_rand(fv, v, &sq, 4, 1.0f, NULL);

	a2 = upload_rand(fa, s2, &sq, 5, 1.0f, NULL);
	/* s1's matmul runs; s2's, sent behind it, is the tenant's second */
	send_matmul(fa, s1, 1, a, b);
	send_matmul(fa, s2, 2, a2, a2);
	/* an uploaded model's load counts too: refused at once (it was not
	 * counted, and each may copy memory.upload_max into host memory) */
	{
		struct djinn_model_upload u = { .nr_files = 1,
						.config = { .handle = 7 } };
		struct djinn_model_file f = { .handle = 8 };
		uint8_t up[sizeof(u) + sizeof(f)];

		memcpy(up, &u, sizeof(u));
		memcpy(up + sizeof(u), &f, sizeof(f));
		assert_int_equal(dj_send(fa, DJINN_MSG_MODEL_OPEN_UPLOADED, 5,
					 s2, &up, sizeof(up)),
				 0);
	}
	/* the victim's are not counted with them */
	send_matmul(fv, v, 3, va, vb);
	send_matmul(fv, v, 4, vb, va);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(dj_recv(fa, &r, 30000), 1);
		if (r.hdr.request_id == 5) {
			expect_error(&r, -EDQUOT,
				     "1 graphs, model steps and model uploads "
				     "in flight for tenant uid:65534");
		} else if (r.hdr.request_id == 2) {
			expect_error(
				&r, -EDQUOT,
				"1 graphs, model steps and model uploads "
				"in flight for tenant uid:65534, its quota "
				"(tenant.uid:65534.inflight)");
			err_seen = true;
		} else {
			assert_int_equal(r.hdr.request_id, 1);
			assert_int_equal(r.error, 0);
			ok_seen = true;
		}
		dj_resp_free(&r);
	}
	assert_true(err_seen && ok_seen);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(dj_recv(fv, &r, 30000), 1);
		assert_int_equal(r.error, 0);
		dj_resp_free(&r);
	}
	close_session(fa, s1);
	close_session(fa, s2);
	close_session(fv, v);
	close(fa);
	close(fv);
}

static int setup_readable(void **state)
{
	static const char *const extra[] = { "--set",
					     "model.open-weights.readable=yes",
					     NULL };

	return fx_start_args(state, DEV_MEM, 10000, extra);
}

/* MODEL_OPEN @name on @fd, @sid: the answer. */
static struct djinn_model_resp model_open_raw(int fd, uint64_t sid,
					      const char *name)
{
	struct djinn_model_open o = { { 0 } };
	struct djinn_model_resp m;
	struct dj_resp r;

	snprintf(o.name, sizeof(o.name), "%s", name);
	call_ok(fd, DJINN_MSG_MODEL_OPEN, sid, &o, sizeof(o), &r, sizeof(m));
	memcpy(&m, r.data, sizeof(m));
	dj_resp_free(&r);
	return m;
}

/* An open-weight served model's weights are found by any tenant's
 * lookup of their fingerprint, and read; another served model's are
 * not, answering as for bytes nobody uploaded. */
static void test_readable(void **state)
{
	struct fx *fx = *state;
	int fa = connect_as(fx, NOBODY, NOBODY, NULL, 0);
	uint64_t sa = open_session(fa, "reader");
	struct djinn_model_resp mo, mc;
	struct djinn_tensor_desc d;
	struct djinn_text_lookup l;
	struct djinn_tensor_resp tr;
	char theirs[256], none[256];
	uint8_t fp_none[DJINN_FP_LEN], got[64];
	struct dj_resp r;

	assert_int_equal(
		djd_make_model(&fx->d, "open-weights",
			       "--arch gpt2 --layers 1 --embd 32 "
			       "--heads 2 --vocab 64 --ctx 32 --seed 6"),
		0);
	assert_int_equal(
		djd_make_model(&fx->d, "closed",
			       "--arch gpt2 --layers 1 --embd 32 "
			       "--heads 2 --vocab 64 --ctx 32 --seed 7"),
		0);
	mo = model_open_raw(fa, sa, "open-weights");
	mc = model_open_raw(fa, sa, "closed");
	sha256("none", 4, fp_none);
	d = DESC(DJINN_DTYPE_U8, mc.bytes);
	assert_int_equal(lookup(fa, sa, &d, mc.fp, theirs, sizeof(theirs)),
			 -ENOENT);
	assert_int_equal(lookup(fa, sa, &d, fp_none, none, sizeof(none)),
			 -ENOENT);
	assert_string_equal(theirs, none);
	/* the open one: found and read */
	l.desc = DESC(DJINN_DTYPE_U8, mo.bytes);
	memcpy(l.fp, mo.fp, sizeof(l.fp));
	call_ok(fa, DJINN_MSG_TEXT_LOOKUP, sa, &l, sizeof(l), &r, sizeof(tr));
	memcpy(&tr, r.data, sizeof(tr));
	dj_resp_free(&r);
	tensor_read(fa, sa, tr.handle, 0, sizeof(got), got);
	close_session(fa, sa);
	close(fa);
	check_text_cached(fx);
}

/* The mapping from a file; SIGHUP changes it for new connections only. */
static void test_reload(void **state)
{
	struct fx *fx;
	char dir[] = "/tmp/djinn-tenants.XXXXXX", path[64];
	const char *extra[] = { "--config", path, NULL };
	uint64_t old_sid;
	int old_fd;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/djinnd.conf", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("[tenant.red]\nuids = 65531\n", f);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(fx_start_args((void **)&fx, DEV_MEM, 10000, extra), 0);
	old_fd = connect_as(fx, 65531, 65531, NULL, 0);
	old_sid = open_session(old_fd, "kept");
	assert_string_equal(tenant_of(fx, old_sid, "kept"), "red");

	f = fopen(path, "w");
	assert_non_null(f);
	fputs("[tenant.blue]\nuids = 65531\n", f);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(kill(fx->d.pid, SIGHUP), 0);
	for (int i = 0; i < 200; i++) {
		if (!strcmp(tenant_as(fx, 65531, 65531, NULL, 0, "new"),
			    "blue"))
			break;
		usleep(20 * 1000);
	}
	assert_string_equal(tenant_as(fx, 65531, 65531, NULL, 0, "new"),
			    "blue");
	/* the open connection is who it was */
	{
		uint64_t sid = open_session(old_fd, "again");

		assert_string_equal(tenant_of(fx, sid, "again"), "red");
		close_session(old_fd, sid);
	}
	close_session(old_fd, old_sid);
	close(old_fd);
	fx_teardown((void **)&fx);
	unlink(path);
	rmdir(dir);
}

/* Refused at start, naming the key. */
static void test_bad(void **state)
{
	static const struct {
		const char *a, *b, *want;
	} cases[] = {
		{ "tenant.a.uids=65533", "tenant.b.uids=1,65533",
		  "tenant.b.uids: uid 65533 is tenant a's already" },
		{ "tenant.a.gids=7", "tenant.b.gids=7",
		  "tenant.b.gids: gid 7 is tenant a's already" },
		{ "tenant.a.uids=no-such-user-djinn", NULL,
		  "tenant.a.uids: 'no-such-user-djinn': want user numbers or "
		  "names" },
		{ "tenant.a.gids=1,,2", NULL,
		  "tenant.a.gids: '1,,2': want group numbers or names" },
		{ "tenant.a.uids=", NULL, "tenant.a.uids: " },
		{ "tenant.a.colour=red", NULL,
		  "unknown key 'colour' in [tenant.a] (want share, uids, gids, "
		  "client_kernels, memory, swap, guaranteed, sessions, "
		  "connections, inflight or lease_max)" },
		{ "model.x.readable=maybe", NULL,
		  "model.x.readable: 'maybe': want yes or no" },
		{ "model.x.open=yes", NULL,
		  "unknown key 'open' in [model.x] (want readable, budget, "
		  "ring_slots or max_batch)" },
		{ "tenant.a.sessions=0", NULL,
		  "tenant.a.sessions: '0': want a number from 1 to 1048576" },
		{ "tenant.a.memory=lots", NULL,
		  "tenant.a.memory: 'lots': want a size" },
		{ "tenant.a.client_kernels=maybe", NULL,
		  "tenant.a.client_kernels: 'maybe': want yes or no" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *extra[] = { "--set", cases[i].a, "--set",
					cases[i].b, NULL };
		struct djd d;

		if (!cases[i].b)
			extra[2] = NULL;
		if (!djd_start_args(&d, DEV_MEM, 10000, extra)) {
			djd_kill(&d);
			fail_msg("djinnd started with %s %s", cases[i].a,
				 cases[i].b ? cases[i].b : "");
		}
		if (!strstr(djd_start_error(), cases[i].want))
			fail_msg("%s: djinnd said \"%s\"; want \"%s\"",
				 cases[i].a, djd_start_error(), cases[i].want);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_default, setup_plain,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_mapped, setup_mapped,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_delegated, setup_delegated,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_text, setup_plain,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_tcp, setup_tcp,
						fx_teardown),
		cmocka_unit_test(test_tcp_listen),
		cmocka_unit_test_setup_teardown(test_tcp_closed_peer, setup_tcp,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_tcp_cap, setup_tcp_cap,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_tcp_ident_async,
						setup_tcp_hold, fx_teardown),
		cmocka_unit_test_setup_teardown(test_quotas, setup_quotas,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_text_race, setup_quotas,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_inflight, setup_inflight,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_readable, setup_readable,
						fx_teardown),
		cmocka_unit_test(test_reload),
		cmocka_unit_test(test_bad),
	};
	int ret = fx_can_run();

	if (ret)
		return ret;
	if (geteuid()) {
		printf("SKIP: test_tenants connects as other uids: run it as "
		       "root\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
