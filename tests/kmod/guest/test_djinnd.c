// SPDX-License-Identifier: MIT
/*
 * djinnd on djinn.ko (--leases kmod), in the guest: local clients bind
 * their /dev/djinn sessions, die and are freed at once, get completions
 * in their rings; TCP-style clients get proxy sessions that expire when
 * their heartbeats stop; djinnctl lists, kills and monitors through the
 * netlink family.
 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "djd.h"
#include "kt.h"
#include "fdstore_standin.h"
#include "../../unit/testutil.h"

#define LEASE_MS 60000 /* djinnd's default: far longer than any wait */

static pid_t djinnd;

/* djinnd on the module, with @extra options (NULL-terminated) */
static int start_kmod(const char *const *extra)
{
	djinnd = djd_start_with("kmod", LEASE_MS, "debug", extra);
	if (djinnd < 0) {
		fprintf(stderr, "djinnd --leases kmod%s: %s\n",
			extra ? " (and more)" : "", strerror((int)-djinnd));
		return -1;
	}
	return 0;
}

static int setup(void **state)
{
	return start_kmod(NULL);
}

static int teardown(void **state)
{
	int ret = djd_stop(djinnd);

	if (ret)
		fprintf(stderr, "djinnd did not exit cleanly\n");
	return ret;
}

/* Wait up to @ms for session @id to leave djinnd: the ns it took, or 0
 * if it is still there. */
static uint64_t wait_gone(uint64_t id, unsigned int ms)
{
	uint64_t t0 = djd_now_ns(), end = t0 + ms * 1000000ull;

	while (djd_now_ns() < end) {
		if (djd_session(id, NULL) == -ENOENT)
			return djd_now_ns() - t0 ?: 1;
		usleep(2000);
	}
	return 0;
}

static void test_hello_says_kmod(void **state)
{
	struct djinn_hello_resp h;
	int fd = djd_connect(DJD_SOCK);

	assert_true(fd >= 0);
	assert_int_equal(djd_call(fd, DJINN_MSG_HELLO, 0, NULL, 0, &h,
				  sizeof(h), NULL),
			 0);
	assert_true(h.features & DJINN_FEAT_KMOD);
	close(fd);
}

static void test_bind(void **state)
{
	struct djinn_session_bind b = { 0 };
	struct djinn_admin_session e;
	struct djinn_session_resp r;
	struct djd_client c;
	int fd;

	assert_int_equal(djd_client_bind(&c, "bound", 0), 0);
	assert_int_equal(djd_session(c.id, &e), 0);
	/* djinnd's tenant is who bound it (root here); the name the client
	 * gave the module is its label */
	assert_string_equal(e.tenant, "uid:0");
	assert_string_equal(e.label, "bound");
	assert_int_equal(e.priority, 3);
	assert_int_equal(e.pid, getpid());

	fd = djd_connect(DJD_SOCK);
	assert_true(fd >= 0);
	/* the same kernel session twice */
	b.kernel_id = c.kid;
	memcpy(b.token, c.token, sizeof(b.token));
	assert_int_equal(djd_call(fd, DJINN_MSG_SESSION_BIND, 0, &b, sizeof(b),
				  &r, sizeof(r), NULL),
			 -EBUSY);
	/* a wrong token */
	b.token[3] ^= 1;
	assert_int_equal(djd_call(fd, DJINN_MSG_SESSION_BIND, 0, &b, sizeof(b),
				  &r, sizeof(r), NULL),
			 -EPERM);
	/* no such session, and a short payload */
	b.kernel_id = 0xfffffff0ull;
	assert_int_equal(djd_call(fd, DJINN_MSG_SESSION_BIND, 0, &b, sizeof(b),
				  &r, sizeof(r), NULL),
			 -ENOENT);
	assert_int_equal(djd_call(fd, DJINN_MSG_SESSION_BIND, 0, &b,
				  sizeof(b) - 1, &r, sizeof(r), NULL),
			 -EINVAL);
	close(fd);
	assert_int_equal(djd_session(c.id, NULL), 0);

	/* closing the file ends the djinnd session: no lease to wait for */
	djd_client_close(&c);
	assert_true(wait_gone(c.id, 5000) > 0);
}

/* A client holding 16 MiB dies by SIGKILL: djinnd frees it at once. */
static void test_client_death(void **state)
{
	struct djinn_admin_stats st0, st1;
	struct djinn_admin_vmu v0, v1;
	struct djinn_admin_session e;
	uint64_t ids[2], took;
	int pfd[2], status;
	pid_t pid;

	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		struct djd_client c;

		close(pfd[0]);
		if (djd_client_bind(&c, "doomed", 0) ||
		    djd_tensor(c.sock, c.id, 16 * MiB))
			_exit(1);
		ids[0] = c.id;
		ids[1] = c.kid;
		if (write(pfd[1], ids, sizeof(ids)) != sizeof(ids))
			_exit(1);
		for (;;)
			pause();
	}
	close(pfd[1]);
	assert_int_equal(read(pfd[0], ids, sizeof(ids)), sizeof(ids));
	close(pfd[0]);
	assert_int_equal(djd_session(ids[0], &e), 0);
	assert_true(e.data_bytes >= 16 * MiB);
	assert_int_equal(djd_stats(&st0), 0);
	assert_int_equal(djd_vmu(&v0), 0);

	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	took = wait_gone(ids[0], 10000);
	assert_true(took > 0);
	print_message("freed %llu ms after SIGKILL (lease %d ms)\n",
		      (unsigned long long)(took / 1000000), LEASE_MS);
	assert_int_equal(djd_stats(&st1), 0);
	assert_int_equal(st1.sessions_closed, st0.sessions_closed + 1);
	assert_int_equal(st1.sessions_expired, st0.sessions_expired);
	/* and the device memory is back (the data segment, ADMIN_VMU),
	 * with the session's last reference: maybe after it left the
	 * table */
	if (!wait_until(!djd_vmu(&v1) &&
				v1.seg[1].used + 16 * MiB <= v0.seg[1].used,
			WAIT_MS))
		fail_msg("data segment %llu bytes, %llu before the death",
			 (unsigned long long)v1.seg[1].used,
			 (unsigned long long)v0.seg[1].used);
}

/* A process with many bound sessions dies: every one is ended. */
static void test_many_die(void **state)
{
	enum { N = 48 };
	struct djinn_admin_stats st0, st1;
	uint64_t ids[N];
	int pfd[2], status;
	pid_t pid;

	assert_int_equal(djd_stats(&st0), 0);
	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		static struct djd_client c[N];

		close(pfd[0]);
		for (int i = 0; i < N; i++) {
			if (djd_client_bind(&c[i], "crowd", 0) ||
			    djd_tensor(c[i].sock, c[i].id, 1 * MiB))
				_exit(1);
			ids[i] = c[i].id;
		}
		if (write(pfd[1], ids, sizeof(ids)) != sizeof(ids))
			_exit(1);
		for (;;)
			pause();
	}
	close(pfd[1]);
	assert_int_equal(read(pfd[0], ids, sizeof(ids)), sizeof(ids));
	close(pfd[0]);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	for (int i = 0; i < N; i++)
		assert_true(wait_gone(ids[i], 10000) > 0);
	assert_int_equal(djd_stats(&st1), 0);
	assert_int_equal(st1.sessions_closed, st0.sessions_closed + N);
}

/* A graph's completion lands in the ring before its answer is read. */
/* A graph of the bound session of @c (RELU of a new tensor), through
 * @req: its completion comes in @c's ring (checked, and its slot given
 * back), and its answer on the socket. */
struct ring_graph {
	struct djinn_graph g;
	struct djinn_ref in;
	struct djinn_node n;
	uint32_t out[2];
};

static void ring_posts(struct djd_client *c, struct ring_graph *req)
{
	struct djinn_tensor_create tc = {
		.desc = { .dtype = DJINN_DTYPE_F32, .ndim = 1, .dims = { 4 } },
		.segment = DJINN_SEG_DATA,
	};
	struct djinn_ioc_heartbeat hb = { .size = sizeof(hb),
					  .flags = DJINN_HEARTBEAT_F_HEAD };
	struct djinn_tensor_resp tr;
	struct djinn_graph_resp gr;
	const struct djinn_cqe *cqe;
	struct pollfd p;
	uint32_t head, tail;
	uint64_t rid;

	assert_int_equal(djd_call(c->sock, DJINN_MSG_TENSOR_CREATE, c->id, &tc,
				  sizeof(tc), &tr, sizeof(tr), NULL),
			 0);
	*req = (struct ring_graph){ 0 };
	req->g.nr_inputs = 1;
	req->g.nr_nodes = 1;
	req->g.nr_outputs = 1;
	req->in.id = tr.handle;
	req->n.op = DJINN_GOP_RELU;
	req->n.nr_inputs = 1;
	assert_int_equal(djd_call_send(c->sock, DJINN_MSG_GRAPH_SUBMIT, c->id,
				       req, sizeof(*req)),
			 0);
	rid = djd_last_request;

	/* wait on the session file, not the socket */
	p = (struct pollfd){ .fd = c->dev, .events = POLLIN };
	assert_int_equal(poll(&p, 1, 10000), 1);
	assert_true(p.revents & POLLIN);
	head = *(const uint32_t *)((const char *)c->ring + c->off.head);
	tail = __atomic_load_n(
		(const uint32_t *)((const char *)c->ring + c->off.tail),
		__ATOMIC_ACQUIRE);
	assert_int_equal(tail - head, 1);
	cqe = (const struct djinn_cqe *)((const char *)c->ring + c->off.cqes) +
	      (head & *(const uint32_t *)((const char *)c->ring + c->off.mask));
	assert_int_equal(cqe->user_data, rid);
	assert_int_equal(cqe->res, 0);
	assert_int_equal(cqe->flags, DJINN_MSG_GRAPH_SUBMIT);
	assert_int_equal(cqe->aux[0], c->id);
	/* the answer itself still comes on the socket */
	assert_int_equal(djd_call_recv(c->sock, &gr, sizeof(gr), NULL), 0);
	assert_int_equal(gr.nr_outputs, 1);

	/* give the slot back: nothing more to read */
	hb.ring_head = tail;
	assert_int_equal(ioctl(c->dev, DJINN_IOC_HEARTBEAT, &hb), 0);
	p.revents = 0;
	assert_int_equal(poll(&p, 1, 0), 0);
}

static void test_ring_completion(void **state)
{
	struct ring_graph req;
	struct djinn_graph_resp gr;
	struct pollfd p;
	struct djd_client c;

	assert_int_equal(djd_client_bind(&c, "ringed", 0), 0);
	ring_posts(&c, &req);

	/* a failing graph posts its errno: an input that is no tensor */
	req.in.id ^= 0x5a5a;
	assert_int_equal(djd_call(c.sock, DJINN_MSG_GRAPH_SUBMIT, c.id, &req,
				  sizeof(req), &gr, sizeof(gr), NULL),
			 -ENOENT);
	/* refused before it ran: answered on the socket only */
	p = (struct pollfd){ .fd = c.dev, .events = POLLIN };
	assert_int_equal(poll(&p, 1, 0), 0);
	djd_client_close(&c);
	assert_true(wait_gone(c.id, 5000) > 0);
}

/* Sessions opened over the socket get proxies with their own leases. */
static void test_proxy_expiry(void **state)
{
	struct djinn_session_open o = { .lease_ns = 400 * 1000000ull };
	struct djinn_admin_stats st0, st1;
	struct djinn_session_resp r;
	struct kt_nl_msg all[64], before[64];
	struct kt_nl *nl;
	uint64_t kid = 0, took;
	int fd, n, n0, err;

	nl = kt_nl_open(false, &err);
	assert_non_null(nl);
	fd = djd_connect(DJD_SOCK);
	assert_true(fd >= 0);
	snprintf(o.tenant, sizeof(o.tenant), "remote");
	n0 = kt_nl_dump(nl, before, 64);
	assert_true(n0 >= 0);
	assert_int_equal(djd_stats(&st0), 0);
	assert_int_equal(djd_call(fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o),
				  &r, sizeof(r), NULL),
			 0);
	/* the new proxy: its tenant is djinnd's, who opened it (root) */
	n = kt_nl_dump(nl, all, 64);
	for (int i = 0; i < n; i++) {
		bool old = false;

		for (int j = 0; j < n0; j++)
			old |= before[j].id == all[i].id;
		if (!old && (all[i].kind & DJINN_SESSION_PROXY) &&
		    !strcmp(all[i].tenant, "uid:0"))
			kid = all[i].id;
	}
	assert_true(kid != 0);

	/* heartbeats keep it: 1.2 s, three leases */
	for (int i = 0; i < 12; i++) {
		usleep(100000);
		assert_int_equal(djd_call(fd, DJINN_MSG_HEARTBEAT, r.session_id,
					  NULL, 0, NULL, 0, NULL),
				 0);
	}
	assert_int_equal(djd_session(r.session_id, NULL), 0);

	/* then they stop */
	took = wait_gone(r.session_id, 10000);
	assert_true(took > 0);
	assert_int_equal(djd_stats(&st1), 0);
	assert_int_equal(st1.sessions_expired, st0.sessions_expired + 1);
	/* and djinnd released the proxy */
	assert_int_equal(kt_nl_get(nl, kid, &all[0]), -ENOENT);
	close(fd);
	kt_nl_close(nl);
}

/* A session on @fd with a lease of @lease_ms, a proxy in the kernel: its
 * answer in *@r, and the proxy's kernel id (from the sessions the module
 * lists before and after); *@n the kernel sessions listed then. */
static uint64_t open_proxy(struct kt_nl *nl, int fd, unsigned int lease_ms,
			   struct djinn_session_resp *r, int *n)
{
	struct djinn_session_open o = { .lease_ns = lease_ms * 1000000ull };
	struct kt_nl_msg all[64], before[64];
	uint64_t kid = 0;
	int n0;

	snprintf(o.tenant, sizeof(o.tenant), "remote");
	n0 = kt_nl_dump(nl, before, 64);
	assert_true(n0 >= 0);
	assert_int_equal(djd_call(fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o),
				  r, sizeof(*r), NULL),
			 0);
	*n = kt_nl_dump(nl, all, 64);
	assert_int_equal(*n, n0 + 1);
	for (int i = 0; i < *n; i++) {
		bool seen = false;

		for (int j = 0; j < n0; j++)
			seen |= before[j].id == all[i].id;
		if (!seen && (all[i].kind & DJINN_SESSION_PROXY))
			kid = all[i].id;
	}
	assert_true(kid != 0);
	return kid;
}

/* Close proxy session @sid (kernel @kid) on @fd, and the connection and
 * @nl: djinnd releases the proxy in the kernel at once. */
static void close_proxy(struct kt_nl *nl, int fd, uint64_t sid, uint64_t kid)
{
	struct kt_nl_msg m;

	assert_int_equal(djd_call(fd, DJINN_MSG_SESSION_CLOSE, sid, NULL, 0,
				  NULL, 0, NULL),
			 0);
	assert_int_equal(kt_nl_get(nl, kid, &m), -ENOENT);
	close(fd);
	kt_nl_close(nl);
}

static const char *const handover_args[] = { "--handover", "/tmp/djd/handover",
					     NULL };

/* The group's djinnd gives way to one serving --handover (one daemon
 * may attach), and comes back after. */
static int setup_handover(void **state)
{
	return teardown(state) ? -1 : start_kmod(handover_args);
}

static int teardown_handover(void **state)
{
	return teardown(state) || setup(state) ? -1 : 0;
}

/*
 * A restart (--handover) under kernel leases keeps them: /dev/djinn's
 * file goes to the successor with the sessions. A bound client's session
 * and a proxy session live on with the same kernel sessions (no proxy
 * opened again, none left behind); the successor renews the proxy's
 * lease through the file, the proxy still runs out when the heartbeats
 * stop and is released, and the bound session still ends at once when
 * its client dies.
 */
static void test_handover(void **state)
{
	struct ring_graph rg;
	struct kt_nl_msg before[64], m;
	struct djinn_session_resp r;
	struct djd_client c;
	struct kt_nl *nl;
	uint64_t kid = 0, beats;
	int fd, n, err, status = -1;
	pid_t old = djinnd, next;

	nl = kt_nl_open(false, &err);
	assert_non_null(nl);
	assert_int_equal(djd_client_bind(&c, "kept", 0), 0);
	assert_int_equal(djd_tensor(c.sock, c.id, MiB), 0);
	fd = djd_connect(DJD_SOCK);
	assert_true(fd >= 0);
	kid = open_proxy(nl, fd, 4000, &r, &n);

	next = djd_start_next("kmod", LEASE_MS, "debug", handover_args);
	assert_true(next > 0);
	for (int i = 0; i < 6000 && waitpid(old, &status, WNOHANG) != old; i++)
		usleep(10000);
	assert_true(WIFEXITED(status) && !WEXITSTATUS(status));
	djinnd = next;

	/* the same sessions on the same kernel sessions, none more */
	assert_int_equal(djd_session(c.id, NULL), 0);
	assert_int_equal(djd_session(r.session_id, NULL), 0);
	assert_int_equal(kt_nl_get(nl, kid, &m), 0);
	assert_int_equal(m.state, DJINN_STATE_LIVE);
	assert_int_equal(kt_nl_get(nl, c.kid, &m), 0);
	assert_int_equal(m.state, DJINN_STATE_LIVE);
	assert_int_equal(kt_nl_dump(nl, before, 64), n);
	/* both go on over their connections; the bound one is bound still:
	 * its completions come in its ring */
	assert_int_equal(djd_tensor(c.sock, c.id, 4096), 0);
	ring_posts(&c, &rg);
	assert_int_equal(kt_nl_get(nl, kid, &m), 0);
	beats = m.heartbeats;
	for (int i = 0; i < 8; i++) {
		usleep(400000);
		assert_int_equal(djd_call(fd, DJINN_MSG_HEARTBEAT, r.session_id,
					  NULL, 0, NULL, 0, NULL),
				 0);
	}
	assert_int_equal(kt_nl_get(nl, kid, &m), 0);
	if (m.heartbeats <= beats)
		fail_msg("the proxy's lease was not renewed after the "
			 "restart (%llu heartbeats, %llu before)",
			 (unsigned long long)m.heartbeats,
			 (unsigned long long)beats);
	/* the heartbeats stop: it runs out, and the proxy is released */
	assert_true(wait_gone(r.session_id, 20000) > 0);
	assert_int_equal(kt_nl_get(nl, kid, &m), -ENOENT);
	/* a bound client's death still ends its session at once */
	djd_client_close(&c);
	assert_true(wait_gone(c.id, 5000) > 0);
	close(fd);
	kt_nl_close(nl);
}

static const char *const tenant_args[] = { "--handover", "/tmp/djd/handover",
					   "--set", "tenant.t.uids=0", NULL };

static int setup_tenant(void **state)
{
	return teardown(state) ? -1 : start_kmod(tenant_args);
}

/*
 * A successor whose restore fails (its tenant's memory quota is smaller
 * than the tenant's data) has taken the proxy over before it fails: it
 * lets go of it without ending it, and the running djinnd serves on with
 * the session and its kernel session.
 */
static void test_handover_failed(void **state)
{
	static const char *const small[] = { "--handover", "/tmp/djd/handover",
					     "--set",	   "tenant.t.uids=0",
					     "--set",	   "tenant.t.memory=1M",
					     NULL };
	struct kt_nl_msg m;
	struct djinn_session_resp r;
	struct kt_nl *nl;
	uint64_t kid = 0;
	int fd, n, err, status = -1;
	pid_t next;

	nl = kt_nl_open(false, &err);
	assert_non_null(nl);
	fd = djd_connect(DJD_SOCK);
	assert_true(fd >= 0);
	kid = open_proxy(nl, fd, 4000, &r, &n);
	assert_int_equal(djd_tensor(fd, r.session_id, 16 * MiB), 0);

	next = djd_start_next("kmod", LEASE_MS, "debug", small);
	assert_true(next > 0);
	assert_int_equal(waitpid(next, &status, 0), next);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status));
	/* the old one serves on: the session, its kernel session */
	assert_int_equal(djd_call(fd, DJINN_MSG_HEARTBEAT, r.session_id, NULL,
				  0, NULL, 0, NULL),
			 0);
	/* an event the kernel sent would be read by now */
	usleep(500000);
	assert_int_equal(djd_session(r.session_id, NULL), 0);
	assert_int_equal(kt_nl_get(nl, kid, &m), 0);
	assert_int_equal(m.state, DJINN_STATE_LIVE);
	close_proxy(nl, fd, r.session_id, kid);
}

static void store_lock(void *st)
{
	djd_store_lock(st);
}

static void store_pass(void *st)
{
	djd_store_pass(st);
}

static void store_unlock(void *st)
{
	djd_store_unlock(st);
}

/* The fixture's djinnd stopped and another started under the stand-in
 * store @st, which the fork hooks @h pass it: a netlink socket to watch
 * the kernel sessions with. */
static struct kt_nl *store_start(void **state, struct djd_store *st,
				 const struct djd_fork_hooks *h)
{
	struct kt_nl *nl;
	int err;

	assert_non_null(st);
	nl = kt_nl_open(false, &err);
	assert_non_null(nl);
	assert_int_equal(teardown(state), 0);
	djd_set_fork_hooks(h);
	djinnd = djd_start("kmod", LEASE_MS, "debug");
	assert_true(djinnd > 0);
	return nl;
}

/*
 * The same through systemd's fd store (a stand-in, as the integration
 * tests play it): on SIGTERM djinnd keeps the record, its connections
 * and /dev/djinn's file ("kmod") in the store and exits 0; the djinnd
 * started next with them takes the kernel sessions over, and keeps the
 * file in the store, for its crash journal (djinnd/net/journal.h).
 */
static void test_store_restart(void **state)
{
	struct djd_store *st = djd_store_open();
	struct djd_fork_hooks h = { store_lock, store_pass, store_unlock, st };
	struct kt_nl_msg all[64], m;
	struct djinn_session_resp r;
	struct djd_client c;
	struct kt_nl *nl;
	uint64_t kid = 0;
	int fd, n, status = -1;
	char journal[48];

	nl = store_start(state, st, &h);
	assert_int_equal(djd_client_bind(&c, "stored", 0), 0);
	fd = djd_connect(DJD_SOCK);
	assert_true(fd >= 0);
	kid = open_proxy(nl, fd, 4000, &r, &n);

	assert_int_equal(kill(djinnd, SIGTERM), 0);
	assert_int_equal(waitpid(djinnd, &status, 0), djinnd);
	assert_true(WIFEXITED(status) && !WEXITSTATUS(status));
	assert_true(djd_store_has(st, "kmod"));
	assert_true(djd_store_has(st, "state"));
	/* nobody serves: the kernel sessions live on the stored file */
	assert_int_equal(kt_nl_get(nl, kid, &m), 0);
	assert_int_equal(m.state, DJINN_STATE_LIVE);
	djinnd = djd_start_next("kmod", LEASE_MS, "debug", NULL);
	assert_true(djinnd > 0);
	snprintf(journal, sizeof(journal), "journal-%d-*", (int)djinnd);
	assert_true(djd_store_wait(st, journal, true, 30000));
	assert_true(djd_store_wait(st, "state", false, 30000));
	assert_true(djd_store_has(st, "kmod"));
	assert_int_equal(djd_session(c.id, NULL), 0);
	assert_int_equal(djd_session(r.session_id, NULL), 0);
	assert_int_equal(kt_nl_get(nl, kid, &m), 0);
	assert_int_equal(m.state, DJINN_STATE_LIVE);
	assert_int_equal(kt_nl_dump(nl, all, 64), n);
	assert_int_equal(djd_call(fd, DJINN_MSG_HEARTBEAT, r.session_id, NULL,
				  0, NULL, 0, NULL),
			 0);
	assert_int_equal(djd_tensor(c.sock, c.id, 4096), 0);
	/* a bound client's death ends its session at once */
	djd_client_close(&c);
	assert_true(wait_gone(c.id, 5000) > 0);
	/* closed: the proxy goes from the kernel */
	close_proxy(nl, fd, r.session_id, kid);
	/* a stop under a store keeps the state there again: the store's
	 * end closes it all, /dev/djinn's file with it */
	assert_int_equal(djd_stop(djinnd), 0);
	djd_set_fork_hooks(NULL);
	djd_store_close(st);
	assert_int_equal(setup(state), 0);
}

/*
 * A crash under the store: djinnd's crash journal keeps its sessions and
 * /dev/djinn's file there from the start, so a SIGKILL ends neither the
 * kernel session of a bound client nor a proxy; the djinnd started next
 * restores them from the journal and takes each kernel session over (no
 * more, no fewer), the proxy's client attaches again over a new
 * connection and renews it, and a bound client's death still ends its
 * session at once.
 */
static void test_store_crash(void **state)
{
	struct djd_store *st = djd_store_open();
	struct djd_fork_hooks h = { store_lock, store_pass, store_unlock, st };
	struct djinn_session_attach at;
	struct djinn_session_resp r;
	struct kt_nl_msg all[64], m;
	struct djd_client c;
	struct kt_nl *nl;
	char journal[48], old[48];
	uint64_t kid = 0;
	int fd, n, status = -1;

	nl = store_start(state, st, &h);
	snprintf(old, sizeof(old), "journal-%d-*", (int)djinnd);
	assert_true(djd_store_wait(st, old, true, 30000));
	assert_true(djd_store_has(st, "kmod"));
	assert_int_equal(djd_client_bind(&c, "crashed", 0), 0);
	fd = djd_connect(DJD_SOCK);
	assert_true(fd >= 0);
	kid = open_proxy(nl, fd, 4000, &r, &n);

	assert_int_equal(kill(djinnd, SIGKILL), 0);
	assert_int_equal(waitpid(djinnd, &status, 0), djinnd);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	/* nobody serves: the kernel sessions live on the stored file */
	assert_int_equal(kt_nl_get(nl, kid, &m), 0);
	assert_int_equal(m.state, DJINN_STATE_LIVE);
	djinnd = djd_start_next("kmod", LEASE_MS, "debug", NULL);
	assert_true(djinnd > 0);
	snprintf(journal, sizeof(journal), "journal-%d-*", (int)djinnd);
	assert_true(djd_store_wait(st, journal, true, 30000));
	assert_true(djd_store_wait(st, old, false, 30000));
	assert_true(djd_store_has(st, "kmod"));
	assert_int_equal(djd_session(c.id, NULL), 0);
	assert_int_equal(djd_session(r.session_id, NULL), 0);
	assert_int_equal(kt_nl_get(nl, kid, &m), 0);
	assert_int_equal(m.state, DJINN_STATE_LIVE);
	assert_int_equal(kt_nl_dump(nl, all, 64), n);
	/* the proxy's connection died with djinnd: its client attaches
	 * again by token and renews it */
	close(fd);
	fd = djd_connect(DJD_SOCK);
	assert_true(fd >= 0);
	memcpy(at.token, r.token, sizeof(at.token));
	assert_int_equal(djd_call(fd, DJINN_MSG_SESSION_ATTACH, r.session_id,
				  &at, sizeof(at), NULL, 0, NULL),
			 0);
	assert_int_equal(djd_call(fd, DJINN_MSG_HEARTBEAT, r.session_id, NULL,
				  0, NULL, 0, NULL),
			 0);
	assert_int_equal(djd_tensor(fd, r.session_id, 4096), 0);
	/* a bound client's death ends its session at once */
	djd_client_close(&c);
	assert_true(wait_gone(c.id, 5000) > 0);
	close_proxy(nl, fd, r.session_id, kid);
	assert_int_equal(djd_stop(djinnd), 0);
	djd_set_fork_hooks(NULL);
	djd_store_close(st);
	assert_int_equal(setup(state), 0);
}

/* Killed by the administrator, either way. */
static void test_kill(void **state)
{
	struct djinn_ioc_session_info i = { .size = sizeof(i) };
	struct djinn_admin_stats st0, st1;
	struct djinn_admin_kill k;
	struct djd_client a, b;
	char cmd[128];
	int fd;

	assert_int_equal(djd_stats(&st0), 0);
	/* djinnctl session kill: netlink, a kernel id */
	assert_int_equal(djd_client_bind(&a, "victim", 0), 0);
	snprintf(cmd, sizeof(cmd), "djinnctl session kill %llu",
		 (unsigned long long)a.kid);
	assert_int_equal(system(cmd), 0);
	assert_true(wait_gone(a.id, 5000) > 0);

	/* the admin socket: djinnd kills the kernel session too */
	assert_int_equal(djd_client_bind(&b, "victim2", 0), 0);
	fd = djd_connect(DJD_ADMIN);
	assert_true(fd >= 0);
	k.session_id = b.id;
	assert_int_equal(djd_call(fd, DJINN_MSG_ADMIN_KILL, 0, &k, sizeof(k),
				  NULL, 0, NULL),
			 0);
	close(fd);
	assert_int_equal(ioctl(b.dev, DJINN_IOC_SESSION_INFO, &i), 0);
	assert_int_equal(i.state, DJINN_STATE_KILLED);
	assert_true(*(const uint32_t *)((const char *)b.ring + b.off.flags) &
		    DJINN_RING_F_KILLED);
	assert_int_equal(djd_stats(&st1), 0);
	assert_int_equal(st1.sessions_killed, st0.sessions_killed + 2);
	djd_client_close(&a);
	djd_client_close(&b);
}

/* djinnctl session list through netlink; monitor prints the events. */
static void test_djinnctl_monitor(void **state)
{
	struct djd_client c;
	char buf[8192], want[64], cmd[128];
	size_t got = 0;
	int pfd[2], efd[2];
	pid_t pid;
	FILE *f;

	assert_int_equal(pipe(pfd), 0);
	assert_int_equal(pipe(efd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		dup2(pfd[1], 1);
		dup2(efd[1], 2);
		close(pfd[0]);
		close(efd[0]);
		execlp("djinnctl", "djinnctl", "monitor", (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	close(efd[1]);
	/* its "monitoring" line: it has joined the group */
	assert_true(read(efd[0], buf, sizeof(buf)) > 0);

	assert_int_equal(djd_client_bind(&c, "watched", 0), 0);
	/* the list shows it */
	snprintf(cmd, sizeof(cmd), "djinnctl -j session list");
	f = popen(cmd, "r");
	assert_non_null(f);
	got = fread(buf, 1, sizeof(buf) - 1, f);
	buf[got] = 0;
	assert_int_equal(pclose(f), 0);
	snprintf(want, sizeof(want), "\"id\":%llu,\"tenant\":\"watched\"",
		 (unsigned long long)c.kid);
	if (!strstr(buf, want))
		fail_msg("session list -j: no %s in %s", want, buf);
	djd_client_close(&c);
	assert_true(wait_gone(c.id, 5000) > 0);

	/* opened, then closed, as JSON lines */
	got = 0;
	snprintf(want, sizeof(want), "{\"event\":\"closed\",\"id\":%llu,",
		 (unsigned long long)c.kid);
	for (int i = 0; i < 100 && !strstr(buf, want); i++) {
		struct pollfd p = { .fd = pfd[0], .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 100) != 1)
			continue;
		n = read(pfd[0], buf + got, sizeof(buf) - 1 - got);
		assert_true(n > 0);
		got += (size_t)n;
		buf[got] = 0;
	}
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	if (!strstr(buf, want))
		fail_msg("monitor: no %s in %s", want, buf);
	snprintf(want, sizeof(want), "{\"event\":\"opened\",\"id\":%llu,",
		 (unsigned long long)c.kid);
	assert_non_null(strstr(buf, want));
	assert_non_null(strstr(buf, "\"tenant\":\"watched\""));
	close(pfd[0]);
	close(efd[0]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hello_says_kmod),
		cmocka_unit_test(test_bind),
		cmocka_unit_test(test_client_death),
		cmocka_unit_test(test_many_die),
		cmocka_unit_test(test_ring_completion),
		cmocka_unit_test(test_proxy_expiry),
		cmocka_unit_test(test_kill),
		cmocka_unit_test(test_djinnctl_monitor),
		cmocka_unit_test_setup_teardown(test_handover, setup_handover,
						teardown_handover),
		cmocka_unit_test(test_store_restart),
		cmocka_unit_test(test_store_crash),
		cmocka_unit_test_setup_teardown(
			test_handover_failed, setup_tenant, teardown_handover),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
