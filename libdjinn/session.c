// SPDX-License-Identifier: MIT
/*
 * Sessions: open, attach, close, heartbeats on request, phase signals.
 * The keeper (wire.c) renews every session's lease on its own.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char *default_tenant(void)
{
	const char *user = getenv("USER");

	if (user && *user && strlen(user) < DJINN_TENANT_LEN)
		return user;
	return "default";
}

int __djinn_session_new(struct djinn_conn *conn,
			const struct djinn_session_resp *r, uint64_t want_id,
			const char *tenant, struct djinn_session **out)
{
	struct djinn_session *s;
	int ret;

	if (!r->session_id || !r->lease_ns ||
	    (want_id && r->session_id != want_id)) {
		__djinn_conn_fail(conn, -EPROTO,
				  "session answer: id %llu, lease %llu ns",
				  (unsigned long long)r->session_id,
				  (unsigned long long)r->lease_ns);
		return -EPROTO;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->conn = conn;
	s->id = r->session_id;
	memcpy(s->token, r->token, sizeof(s->token));
	s->lease_ns = r->lease_ns;
	s->deadline_ns = r->deadline_ns;
	if (tenant)
		snprintf(s->tenant, sizeof(s->tenant), "%s", tenant);
	s->last_ns = __djinn_now_ns();
	INIT_LIST_HEAD(&s->tensors);
	INIT_LIST_HEAD(&s->graphs);
	INIT_LIST_HEAD(&s->requests);
	INIT_LIST_HEAD(&s->models);
	INIT_LIST_HEAD(&s->ctxs);

	ret = __djinn_keeper_start(conn);
	if (ret) {
		/* the daemon has it; without renewals its lease ends it */
		free(s);
		return ret;
	}
	pthread_mutex_lock(&conn->lock);
	list_add_tail(&s->node, &conn->sessions);
	pthread_cond_broadcast(&conn->keeper_cond);
	pthread_mutex_unlock(&conn->lock);
	dj_dbg("session %llu: lease %llu ns", (unsigned long long)s->id,
	       (unsigned long long)s->lease_ns);
	*out = s;
	return 0;
}

/* $DJINN_DEVICE: a device index (decimal), or -1 when unset. -2 when
 * it is set to something else. */
static int env_device(void)
{
	const char *v = getenv("DJINN_DEVICE");
	char *end;
	unsigned long n;

	if (!v || !*v)
		return -1;
	errno = 0;
	n = strtoul(v, &end, 10);
	if (errno || *end || *v < '0' || *v > '9' || n > 0xfffffffe)
		return -2;
	return n > INT32_MAX ? -2 : (int)n;
}

int djinn_session_open(struct djinn_conn *conn,
		       const struct djinn_session_opts *opts,
		       struct djinn_session **out)
{
	int device = env_device();

	if (device == -2)
		return -EINVAL;
	return djinn_session_open_on(conn, opts, device, out);
}

/* SESSION_OPEN with @opts on @device; of tenant @as when not NULL (a
 * delegation, never on /dev/djinn). */
static int session_open(struct djinn_conn *conn,
			const struct djinn_session_opts *opts, int device,
			const char *as, struct djinn_session **out)
{
	struct djinn_session_open req = { .priority = DJINN_PRIORITY_DEFAULT };
	struct djinn_session_resp r;
	const char *tenant = default_tenant();
	struct dj_kdev *kd;
	struct iovec iov = { &req, sizeof(req) };
	size_t n;
	int ret;

	if (!conn || !out || device < -1)
		return -EINVAL;
	req.device = device < 0 ? 0 : (uint32_t)device + 1;
	if (opts) {
		if (opts->tenant)
			tenant = opts->tenant;
		req.priority = opts->priority;
		req.lease_ns = opts->lease_ns;
	}
	if (as) {
		tenant = as;
		req.flags = DJINN_SESSION_DELEGATED;
	}
	n = strlen(tenant);
	if (!n || n >= DJINN_TENANT_LEN || req.priority > 7)
		return -EINVAL;
	memcpy(req.tenant, tenant, n);

	/* on /dev/djinn when djinnd follows it (kdev.c), else here; a
	 * kernel session names no device: djinnd places it */
	if (device < 0 && !as &&
	    !__djinn_kdev_open(conn, tenant, req.priority, req.lease_ns, &kd,
			       &r)) {
		ret = __djinn_session_new(conn, &r, 0, tenant, out);
		if (ret) {
			__djinn_kdev_close(kd);
			return ret;
		}
		pthread_mutex_lock(&conn->lock);
		(*out)->kdev = kd;
		pthread_mutex_unlock(&conn->lock);
		return 0;
	}

	ret = __djinn_call_sync(conn, DJINN_MSG_SESSION_OPEN, 0, &iov, 1, &r,
				sizeof(r));
	if (ret)
		return ret;
	return __djinn_session_new(conn, &r, 0, tenant, out);
}

int djinn_session_open_on(struct djinn_conn *conn,
			  const struct djinn_session_opts *opts, int device,
			  struct djinn_session **out)
{
	return session_open(conn, opts, device, NULL, out);
}

int djinn_session_open_as(struct djinn_conn *conn, const char *tenant,
			  const struct djinn_session_opts *opts,
			  struct djinn_session **out)
{
	int device = env_device();

	if (!tenant || device == -2)
		return -EINVAL;
	return session_open(conn, opts, device, tenant, out);
}

int djinn_session_attach(struct djinn_conn *conn, uint64_t id,
			 const uint8_t *token, struct djinn_session **out)
{
	struct djinn_session_attach req;
	struct djinn_session_resp r;
	struct iovec iov = { &req, sizeof(req) };
	int ret;

	if (!conn || !id || !token || !out)
		return -EINVAL;
	memcpy(req.token, token, sizeof(req.token));
	ret = __djinn_call_sync(conn, DJINN_MSG_SESSION_ATTACH, id, &iov, 1, &r,
				sizeof(r));
	if (ret)
		return ret;
	memcpy(r.token, token, sizeof(r.token)); /* ATTACH answers with zeros */
	return __djinn_session_new(conn, &r, id, NULL, out);
}

void __djinn_session_teardown(struct djinn_session *s)
{
	struct djinn_conn *conn = s->conn;

	pthread_mutex_lock(&conn->lock);
	while (!list_empty(&s->graphs)) {
		struct djinn_graph_builder *g = list_first_entry(
			&s->graphs, struct djinn_graph_builder, node);

		list_del_init(&g->node);
		__djinn_graph_destroy(g);
	}
	/*
	 * The daemon dropped the results with the session: nothing is to be
	 * released. A pending request lives on until its answer comes.
	 */
	while (!list_empty(&s->requests)) {
		struct djinn_request *req = list_first_entry(
			&s->requests, struct djinn_request, node);

		list_del_init(&req->node);
		req->s = NULL;
		for (unsigned int k = 0; k < req->nr_results; k++) {
			if (req->results[k].map)
				__djinn_unmap_locked(conn, &req->results[k]);
			req->results[k].released = true;
		}
		if (!req->freed) {
			req->freed = true;
			__djinn_request_put(req);
		}
	}
	__djinn_models_teardown(s);
	while (!list_empty(&s->tensors)) {
		struct djinn_tensor *t = list_first_entry(
			&s->tensors, struct djinn_tensor, node);

		list_del_init(&t->node);
		free(t);
	}
	pthread_mutex_unlock(&conn->lock);
	__djinn_kdev_close(s->kdev); /* the kernel session ends with it */
	s->kdev = NULL;
}

int djinn_session_close(struct djinn_session *s)
{
	struct djinn_conn *conn;
	int ret;

	if (!s)
		return -EINVAL;
	conn = s->conn;
	/* no more heartbeats: one out already finds no session */
	pthread_mutex_lock(&conn->lock);
	list_del_init(&s->node);
	pthread_mutex_unlock(&conn->lock);

	ret = __djinn_call_sync(conn, DJINN_MSG_SESSION_CLOSE, s->id, NULL, 0,
				NULL, 0);
	__djinn_session_teardown(s);
	free(s);
	return ret;
}

int djinn_session_info(struct djinn_session *s, struct djinn_session_info *info)
{
	if (!s || !info)
		return -EINVAL;
	pthread_mutex_lock(&s->conn->lock);
	info->id = s->id & ~DJ_SESSION_LOST;
	memcpy(info->token, s->token, sizeof(info->token));
	info->lease_ns = s->lease_ns;
	info->deadline_ns = s->deadline_ns;
	memcpy(info->tenant, s->tenant, sizeof(info->tenant));
	pthread_mutex_unlock(&s->conn->lock);
	return 0;
}

int djinn_session_heartbeat(struct djinn_session *s)
{
	struct djinn_session_resp r;
	int ret;

	if (!s)
		return -EINVAL;
	if (s->kdev) { /* the kernel keeps the lease: no round trip */
		uint64_t deadline;

		ret = __djinn_kdev_heartbeat(s->kdev, &deadline);
		if (ret)
			return ret;
		pthread_mutex_lock(&s->conn->lock);
		s->deadline_ns = deadline;
		s->last_ns = __djinn_now_ns();
		pthread_mutex_unlock(&s->conn->lock);
		return 0;
	}
	ret = __djinn_call_sync(s->conn, DJINN_MSG_HEARTBEAT, s->id, NULL, 0,
				&r, sizeof(r));
	if (ret)
		return ret;
	if (r.session_id != s->id || !r.lease_ns) {
		__djinn_conn_fail(s->conn, -EPROTO,
				  "HEARTBEAT answer for session %llu, lease "
				  "%llu ns",
				  (unsigned long long)r.session_id,
				  (unsigned long long)r.lease_ns);
		return -EPROTO;
	}
	pthread_mutex_lock(&s->conn->lock);
	s->lease_ns = r.lease_ns;
	s->deadline_ns = r.deadline_ns;
	pthread_cond_broadcast(&s->conn->keeper_cond);
	pthread_mutex_unlock(&s->conn->lock);
	return 0;
}

int djinn_signal(struct djinn_session *s, unsigned int phase,
		 uint64_t expected_ns)
{
	struct djinn_signal p = { .phase = phase, .expected_ns = expected_ns };
	struct iovec iov = { &p, sizeof(p) };

	if (!s || phase > DJINN_PHASE_IDLE)
		return -EINVAL;
	return __djinn_call_sync(s->conn, DJINN_MSG_SIGNAL, s->id, &iov, 1,
				 NULL, 0);
}

int djinn_tool_call_begin(struct djinn_session *s, uint64_t expected_ns)
{
	/* 0 would be "unknown", which the daemon refuses for IO_WAIT; past
	 * INT64_MAX it is a negative duration converted. */
	if (!expected_ns || expected_ns > INT64_MAX)
		return -EINVAL;
	return djinn_signal(s, DJINN_PHASE_IO_WAIT, expected_ns);
}

int djinn_tool_call_end(struct djinn_session *s)
{
	return djinn_signal(s, DJINN_PHASE_COMPUTE, 0);
}
