// SPDX-License-Identifier: MIT
/*
 * Submitted graphs and their result stubs.
 *
 * A request is freed when nobody needs it: not the user (until
 * djinn_request_free()), not a graph builder holding one of its results
 * as an input, and not the reader (until its answer comes). Results
 * that were never released are then released on the daemon by the
 * keeper, since the last reference may drop in the reader, which must
 * never block on the send lock.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static bool pending(const struct djinn_request *req)
{
	return req->sent && !req->call.done;
}

/* Under conn->lock. */
static void request_destroy(struct djinn_request *req)
{
	struct djinn_conn *conn = req->conn;
	bool ran = req->sent && !req->call.err;

	for (unsigned int k = 0; k < req->nr_results; k++) {
		struct djinn_result *r = &req->results[k];

		if (r->map)
			__djinn_unmap_locked(conn, r);
		if (ran && req->s && !r->released)
			__djinn_release_later(conn, req->session_id, r->handle);
	}
	list_del_init(&req->node);
	__djinn_call_destroy(&req->call);
	free(req->resp);
	free(req);
}

void __djinn_request_put(struct djinn_request *req)
{
	if (--req->refs)
		return;
	if (!pending(req))
		request_destroy(req);
	/* else graph_complete() frees it */
}

/* The reader, under conn->lock: the answer, or the connection died. */
static int graph_complete(struct djinn_conn *conn, struct dj_call *c)
{
	struct djinn_request *req = container_of(c, struct djinn_request, call);
	const struct djinn_graph_resp *gr = req->resp;
	const struct djinn_tensor_resp *tr = (const void *)(gr + 1);
	int ret = 0;

	if (!c->err && (gr->nr_outputs != req->nr_results || gr->__reserved)) {
		snprintf(c->msg, sizeof(c->msg),
			 "GRAPH_SUBMIT answer with %u results of %u",
			 gr->nr_outputs, req->nr_results);
		ret = -EPROTO;
	}
	for (unsigned int k = 0; !c->err && !ret && k < req->nr_results; k++) {
		if (!__djinn_tensor_resp_check(&tr[k], &req->results[k].desc))
			continue;
		snprintf(c->msg, sizeof(c->msg),
			 "GRAPH_SUBMIT answer: result %u is %s with %u dims, "
			 "inferred %s with %u",
			 k, djinn_dtype_name(tr[k].desc.dtype), tr[k].desc.ndim,
			 djinn_dtype_name(req->results[k].desc.dtype),
			 req->results[k].desc.ndim);
		ret = -EPROTO;
	}
	if (ret) {
		c->err = ret;
		__djinn_set_dead(conn, -EPROTO, c->msg);
	} else if (!c->err) {
		req->info = *gr;
		for (unsigned int k = 0; k < req->nr_results; k++) {
			req->results[k].handle = tr[k].handle;
			/* released while pending: now it can be */
			if (req->results[k].released && req->s)
				__djinn_release_later(conn, req->session_id,
						      tr[k].handle);
		}
	}
	if (!req->refs)
		request_destroy(req);
	return ret;
}

int __djinn_request_prepare(struct djinn_graph_builder *g,
			    struct djinn_request **out, void **payload,
			    uint64_t *len)
{
	struct djinn_tensor_desc descs[DJINN_MAX_GRAPH_OUTPUTS];
	struct djinn_session *s = g->s;
	struct djinn_conn *conn = s->conn;
	struct djinn_request *req;
	unsigned int no;
	int ret;

	ret = __djinn_graph_encode(g, payload, len, descs);
	if (ret) {
		dj_dbg("submit: %s", g->msg);
		return ret;
	}
	no = g->nr_outputs;
	req = calloc(1, sizeof(*req) + no * sizeof(req->results[0]));
	if (!req)
		goto out_free;
	req->resp = malloc(sizeof(struct djinn_graph_resp) +
			   no * sizeof(struct djinn_tensor_resp));
	if (!req->resp)
		goto out_free;
	__djinn_call_init(&req->call, DJINN_MSG_GRAPH_SUBMIT, s->id, req->resp,
			  sizeof(struct djinn_graph_resp) +
				  no * sizeof(struct djinn_tensor_resp));
	req->call.id = atomic_fetch_add(&conn->next_id, 1);
	req->call.complete = graph_complete;
	req->conn = conn;
	req->s = s;
	req->session_id = s->id;
	req->refs = 1;
	req->nr_results = no;
	for (unsigned int k = 0; k < no; k++) {
		struct djinn_result *r = &req->results[k];

		r->req = req;
		r->index = k;
		r->desc = descs[k];
		djinn_desc_check(&r->desc, NULL, &r->bytes);
	}
	pthread_mutex_lock(&conn->lock);
	list_add_tail(&req->node, &s->requests);
	pthread_mutex_unlock(&conn->lock);
	*out = req;
	return 0;

out_free:
	if (req)
		free(req->resp);
	free(req);
	free(*payload);
	return -ENOMEM;
}

int __djinn_request_stub(struct djinn_session *s,
			 const struct djinn_tensor_desc *desc, uint64_t handle,
			 struct djinn_request **out)
{
	struct djinn_conn *conn = s->conn;
	struct djinn_request *req;
	struct djinn_result *r;

	req = calloc(1, sizeof(*req) + sizeof(req->results[0]));
	if (!req)
		return -ENOMEM;
	/* never sent: done, with no error, from the start */
	__djinn_call_init(&req->call, DJINN_MSG_GRAPH_SUBMIT, s->id, NULL, 0);
	req->call.done = true;
	req->sent = true;
	req->conn = conn;
	req->s = s;
	req->session_id = s->id;
	req->refs = 1;
	req->nr_results = 1;
	r = &req->results[0];
	r->req = req;
	r->desc = *desc;
	r->handle = handle;
	djinn_desc_check(&r->desc, NULL, &r->bytes);
	pthread_mutex_lock(&conn->lock);
	list_add_tail(&req->node, &s->requests);
	pthread_mutex_unlock(&conn->lock);
	*out = req;
	return 0;
}

int djinn_submit(struct djinn_graph_builder *g, struct djinn_request **out)
{
	struct djinn_request *req;
	struct djinn_conn *conn;
	struct iovec iov;
	void *payload;
	uint64_t len;
	int ret;

	if (!g || !out)
		return -EINVAL;
	conn = g->s->conn;
	ret = __djinn_request_prepare(g, &req, &payload, &len);
	if (ret)
		return ret;
	pthread_mutex_lock(&conn->lock);
	req->sent = true;
	pthread_mutex_unlock(&conn->lock);

	iov = (struct iovec){ payload, len };
	ret = __djinn_call_send(conn, &req->call, &iov, 1);
	free(payload);
	if (ret) {
		/* never registered, or failed and completed: not pending */
		pthread_mutex_lock(&conn->lock);
		request_destroy(req);
		pthread_mutex_unlock(&conn->lock);
		return ret;
	}
	*out = req;
	return 0;
}

int djinn_wait(struct djinn_request *req, uint64_t timeout_ns)
{
	uint64_t deadline = UINT64_MAX, now;
	struct dj_kdev *kd;
	int ret;

	if (!req || !req->sent)
		return -EINVAL;
	if (timeout_ns != DJINN_WAIT_FOREVER) {
		now = __djinn_now_ns();
		if (!__builtin_add_overflow(now, timeout_ns, &deadline) &&
		    deadline == UINT64_MAX)
			deadline--;
	}
	/* a session on /dev/djinn: the ring tells first (kdev.c) */
	pthread_mutex_lock(&req->conn->lock);
	kd = req->s && !req->call.done ? req->s->kdev : NULL;
	pthread_mutex_unlock(&req->conn->lock);
	if (kd)
		__djinn_kdev_wait(kd, req->conn, &req->call, deadline);
	ret = __djinn_call_wait(req->conn, &req->call, deadline);
	return ret ? ret : req->call.err;
}

int djinn_poll(struct djinn_request *req)
{
	int ret;

	if (!req || !req->sent)
		return -EINVAL;
	pthread_mutex_lock(&req->conn->lock);
	ret = req->call.done ? req->call.err : -EAGAIN;
	pthread_mutex_unlock(&req->conn->lock);
	return ret;
}

const char *djinn_request_error(const struct djinn_request *req)
{
	const char *msg = "";

	if (!req)
		return msg;
	pthread_mutex_lock(&req->conn->lock);
	if (req->call.done)
		msg = req->call.msg;
	pthread_mutex_unlock(&req->conn->lock);
	return msg;
}

struct djinn_result *djinn_request_results(struct djinn_request *req,
					   unsigned int idx)
{
	if (!req || idx >= req->nr_results)
		return NULL;
	return &req->results[idx];
}

int djinn_request_info(const struct djinn_request *req,
		       struct djinn_request_info *info)
{
	if (!req || !info)
		return -EINVAL;
	pthread_mutex_lock(&req->conn->lock);
	info->id = req->call.id;
	info->nr_results = req->nr_results;
	info->peak_bytes = req->info.peak_bytes;
	info->run_ns = req->info.run_ns;
	pthread_mutex_unlock(&req->conn->lock);
	return 0;
}

void djinn_request_free(struct djinn_request *req)
{
	struct djinn_conn *conn;

	if (!req)
		return;
	conn = req->conn;
	pthread_mutex_lock(&conn->lock);
	if (!req->freed) {
		req->freed = true;
		for (unsigned int k = 0; k < req->nr_results; k++)
			if (req->results[k].map)
				__djinn_unmap_locked(conn, &req->results[k]);
		__djinn_request_put(req); /* may free it */
	}
	pthread_mutex_unlock(&conn->lock);
}

/* ---------------------------------------------------------------------- */
/* Results */

const struct djinn_tensor_desc *djinn_result_desc(const struct djinn_result *r)
{
	return r ? &r->desc : NULL;
}

int __djinn_result_ready(struct djinn_result *r, uint64_t *handle)
{
	struct djinn_request *req = r->req;
	int ret;

	if (!req->sent)
		return -EINVAL;
	__djinn_call_wait(req->conn, &req->call, UINT64_MAX);
	pthread_mutex_lock(&req->conn->lock);
	ret = req->call.err;
	if (!ret && (r->released || !req->s))
		ret = -ENOENT;
	*handle = r->handle;
	pthread_mutex_unlock(&req->conn->lock);
	return ret;
}

int djinn_result_read(struct djinn_result *r, uint64_t offset, uint64_t len,
		      void *buf)
{
	uint64_t handle;
	int ret;

	if (!r || (!buf && len) || offset > r->bytes || len > r->bytes - offset)
		return -EINVAL;
	ret = __djinn_result_ready(r, &handle);
	if (ret)
		return ret;
	return __djinn_read(r->req->conn, r->req->session_id, handle, offset,
			    len, buf);
}

int djinn_result_release(struct djinn_result *r)
{
	struct djinn_request *req;
	struct djinn_tensor_release p;
	struct iovec iov = { &p, sizeof(p) };
	bool now;

	if (!r)
		return -EINVAL;
	req = r->req;
	pthread_mutex_lock(&req->conn->lock);
	if (r->released || !req->s) {
		pthread_mutex_unlock(&req->conn->lock);
		return -ENOENT;
	}
	r->released = true;
	if (r->map)
		__djinn_unmap_locked(req->conn, r);
	/* pending: graph_complete() releases it; failed: nothing to */
	now = req->sent && req->call.done && !req->call.err;
	p.handle = r->handle;
	pthread_mutex_unlock(&req->conn->lock);
	if (!now)
		return 0;
	return __djinn_call_sync(req->conn, DJINN_MSG_TENSOR_RELEASE,
				 req->session_id, &iov, 1, NULL, 0);
}
