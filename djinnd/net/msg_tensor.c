// SPDX-License-Identifier: MIT
/*
 * The tensor messages: TENSOR_CREATE and TENSOR_WRITE, whose data streams
 * to the device as it arrives, TENSOR_READ, TENSOR_RELEASE and
 * TEXT_LOOKUP. Memory for a transfer is prepared on the memory executor
 * (svc/mem.c) and comes back through mem_done().
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "log.h"
#include "server.h"
#include "exec/executor.h"
#include "exec/stage.h"
#include "svc/svc.h"
#include "net/conn.h"
#include "model/store.h"
#include "net/msg.h"
#include "net/tls.h"
#include "session/tenant.h"

/* Check a desc from the wire: 0 and its byte count, or the error sent. */
static int check_desc(struct conn *c, const struct djinn_hdr *hdr,
		      const struct djinn_tensor_desc *d, uint64_t *bytes)
{
	uint64_t elems;
	int ret = djinn_desc_check(d, &elems, bytes);

	if (ret) {
		conn_error(c, hdr, ret, "bad tensor: %s",
			   ret == -E2BIG ? "too large" :
					   "bad dtype, ndim or dims");
		return ret;
	}
	if (!*bytes) {
		conn_error(c, hdr, -EINVAL, "empty tensor");
		return -EINVAL;
	}
	return 0;
}

/* What waits on an EXEC_MEM job: carries on once it is back. */
struct mem_waiter {
	void (*done)(struct conn *c, struct exec_job *job,
		     struct mem_waiter *w);
};

/* A streaming request in progress (TENSOR_CREATE or TENSOR_WRITE). */
struct stream {
	struct mem_waiter w;
	struct session *s;
	struct tensor t;
	bool create;
	bool pinned; /* st->t.region is pinned for the data */
	struct exec_job *job; /* preparing the memory (EXEC_MEM) */
	uint32_t held; /* WRITE: the held slot + 1 */
	uint64_t offset; /* WRITE: where in the tensor */
	uint32_t flags;
	uint8_t fp[DJINN_FP_LEN];
};

static void stream_free(struct conn *c, struct stream *st, bool failed)
{
	/* A job in flight finds its stream gone and undoes its own work. */
	if (st->job)
		st->job->ctx = NULL;
	if (st->pinned)
		vmu_region_unpin(st->s->vs, st->t.region);
	if (failed && st->create) {
		if (c->sink.upload)
			vmu_text_abort(c->sink.upload);
		else if (st->t.region)
			vmu_region_destroy(st->s->vs, st->t.region);
	}
	if (st->held)
		session_tensor_unhold(st->s, st->held - 1);
	session_put(st->s);
	free(st);
	c->stream = NULL;
	c->sink.upload = NULL;
}

/* The answer comes later, from a job: it is timed there. Returns when
 * the request arrived. */
uint64_t msg_defer(struct conn *c)
{
	c->req_open = false;
	return c->req_t0;
}

/* Refuse an allocation of @s, saying what the device has, or what its
 * tenant holds of its quota. */
static void alloc_error(struct conn *c, const struct djinn_hdr *hdr,
			struct session *s, int err, uint64_t bytes)
{
	char msg[DJINN_MAX_ERROR_MSG];

	err = svc_alloc_error(s, err, bytes, msg, sizeof(msg));
	conn_error(c, hdr, err, "%s", msg);
}

static void mem_done(struct exec_job *job, void *arg);

/* Memory for a transfer is prepared on the memory executor: mapping and
 * zeroing a large tensor or swapping one in takes milliseconds to
 * seconds, which the I/O thread spends serving everyone else. @ctx is
 * the stream or read that waits; mem_done() carries on. */
static int mem_submit(struct conn *c, const struct djinn_hdr *hdr,
		      struct session *s, const struct exec_mem *m, void *ctx,
		      struct exec_job **out)
{
	struct exec_job *job = svc_mem_job(s, hdr->request_id, m);

	if (!job) {
		conn_error(c, hdr, -ENOMEM, "out of memory");
		return -ENOMEM;
	}
	job->conn = c;
	job->client = true;
	conn_get(c);
	job->ctx = ctx;
	job->done = mem_done;
	job->done_arg = c->srv;
	*out = job;
	svc_submit(job);
	return 0;
}

/* A client module's upload (DJINN_TENSOR_MODULE): a u8 vector of text,
 * to a backend that runs client kernels, for a tenant allowed them. */
static int module_check(struct conn *c, const struct djinn_hdr *hdr,
			struct session *s, const struct djinn_tensor_create *r)
{
	char msg[DJINN_MAX_ERROR_MSG];
	int ret = svc_module_check(&c->srv->sessions, s, r, msg, sizeof(msg));

	if (ret)
		conn_error(c, hdr, ret, "%s", msg);
	return ret;
}

/* The module's bytes have arrived: the backend loads them once, here, so
 * that one that does not load is refused now and not at its first run.
 * On failure the text reference is dropped and a new entry evicted. */
static int module_load(struct conn *c, const struct djinn_hdr *hdr,
		       struct stream *st, bool created)
{
	char msg[DJINN_MAX_ERROR_MSG];
	int ret = svc_module_load(st->s, st->t.text, st->fp, created, msg,
				  sizeof(msg));

	if (ret)
		conn_error(c, hdr, ret, "%s", msg);
	return ret;
}

static int stream_create(struct conn *c, const struct djinn_hdr *hdr,
			 const struct djinn_tensor_create *r, struct stream *st)
{
	uint64_t bytes, data = hdr->payload_len - sizeof(*r);
	int ret;

	ret = check_desc(c, hdr, &r->desc, &bytes);
	if (ret)
		return ret;
	if (r->segment > DJINN_SEG_TEXT ||
	    r->flags & ~DJINN_TENSOR_CREATE_ALL) {
		conn_error(c, hdr, -EINVAL, "%s",
			   r->segment > DJINN_SEG_TEXT ? "unknown segment" :
							 "unknown flags");
		return -EINVAL;
	}
	if (r->flags & DJINN_TENSOR_MODULE) {
		ret = module_check(c, hdr, st->s, r);
		if (ret)
			return ret;
		st->t.module = true;
	}
	if (data > bytes || (r->segment == DJINN_SEG_TEXT && data != bytes)) {
		conn_error(c, hdr, -EINVAL,
			   "%llu bytes of data for a tensor of %llu%s",
			   (unsigned long long)data, (unsigned long long)bytes,
			   r->segment == DJINN_SEG_TEXT ?
				   " (text comes whole)" :
				   "");
		return -EINVAL;
	}
	st->create = true;
	st->t.desc = r->desc;
	st->t.bytes = bytes;
	if (r->segment == DJINN_SEG_TEXT) {
		memcpy(st->fp, r->fp, sizeof(st->fp));
		ret = vmu_text_begin(st->s->vs, bytes, &c->sink.upload);
	} else if (!msg_all_zero(r->fp, sizeof(r->fp))) {
		conn_error(c, hdr, -EINVAL, "fingerprint set for data");
		return -EINVAL;
	} else {
		struct exec_mem m = {
			.create = true,
			.bytes = bytes,
			.zero_from = data,
		};

		ret = mem_submit(c, hdr, st->s, &m, st, &st->job);
		return ret ? ret : 1;
	}
	if (ret)
		alloc_error(c, hdr, st->s, ret, bytes);
	return ret;
}

static int stream_write(struct conn *c, const struct djinn_hdr *hdr,
			const struct djinn_tensor_io *io, struct stream *st)
{
	struct vmu_region_info info;
	uint32_t slot;
	int ret;

	if (io->len != hdr->payload_len - sizeof(*io)) {
		conn_error(
			c, hdr, -EINVAL, "len %llu, but %llu bytes follow",
			(unsigned long long)io->len,
			(unsigned long long)(hdr->payload_len - sizeof(*io)));
		return -EINVAL;
	}
	ret = session_tensor_hold(st->s, io->handle, &st->t, &slot);
	if (ret) {
		char why[DJINN_MAX_ERROR_MSG];

		session_tensor_why(st->s, io->handle, ret, why, sizeof(why));
		conn_error(c, hdr, ret, "%s", why);
		return ret;
	}
	st->held = slot + 1;
	if (st->t.text) {
		conn_error(c, hdr, -EPERM, "text tensors are read-only");
		return -EPERM;
	}
	if (io->offset > st->t.bytes || io->len > st->t.bytes - io->offset) {
		conn_error(c, hdr, -EINVAL,
			   "range [%llu, +%llu) outside a tensor of %llu bytes",
			   (unsigned long long)io->offset,
			   (unsigned long long)io->len,
			   (unsigned long long)st->t.bytes);
		return -EINVAL;
	}
	st->offset = io->offset;
	/* Resident: pin it here (cheap); swapped out: bring it back on
	 * the memory executor. */
	ret = vmu_region_info(st->s->vs, st->t.region, &info);
	if (!ret && info.state != VMU_REGION_RESIDENT) {
		struct exec_mem m = { .region = st->t.region };

		ret = mem_submit(c, hdr, st->s, &m, st, &st->job);
		return ret ? ret : 1;
	}
	if (!ret)
		ret = vmu_region_pin(st->s->vs, st->t.region, NULL, &info);
	if (ret) {
		conn_error(c, hdr, ret, "cannot make the tensor resident");
		return ret;
	}
	st->pinned = true;
	c->sink.addr = info.addr + io->offset;
	c->sink.prov = st->s->dev->backend->provider;
	return 0;
}

/* The stream's memory is ready (or not): take its data, or refuse it. */
static void stream_mem_done(struct conn *c, struct exec_job *job,
			    struct mem_waiter *w)
{
	struct stream *st = container_of(w, struct stream, w);

	st->job = NULL;
	if (job->error) {
		if (st->create)
			alloc_error(c, &c->hdr, job->s, job->error,
				    job->mem.bytes);
		else
			conn_error(c, &c->hdr, job->error,
				   "cannot make the tensor resident");
		stream_free(c, st, true);
		conn_stream_ready(c, job->error);
		return;
	}
	st->t.region = job->mem.region;
	st->pinned = true;
	c->sink.addr = job->mem.addr + st->offset;
	c->sink.prov = job->s->dev->backend->provider;
	conn_stream_ready(c, 0);
}

int msg_stream_begin(struct conn *c, const struct djinn_hdr *hdr,
		     const uint8_t *body)
{
	struct stream *st = calloc(1, sizeof(*st));
	int ret;

	if (!st) {
		conn_error(c, hdr, -ENOMEM, "out of memory");
		return -ENOMEM;
	}
	st->s = msg_row_session(c, hdr);
	if (!st->s) {
		free(st);
		return -ENOENT;
	}
	c->stream = st;
	st->w.done = stream_mem_done;
	if (hdr->type == DJINN_MSG_TENSOR_CREATE)
		ret = stream_create(c, hdr, (const void *)body, st);
	else
		ret = stream_write(c, hdr, (const void *)body, st);
	if (ret < 0)
		stream_free(c, st, true);
	return ret;
}

void msg_stream_end(struct conn *c, const struct djinn_hdr *hdr)
{
	struct stream *st = c->stream;
	struct djinn_tensor_resp r;
	uint64_t handle;
	bool created = true;
	char msg[DJINN_MAX_ERROR_MSG];
	int ret = c->sink.error;

	if (ret) {
		conn_error(c, hdr, ret, "writing to the device failed");
		stream_free(c, st, true);
		return;
	}
	/* a fault while the bytes came: they went to lost memory */
	ret = session_lost(st->s, msg, sizeof(msg));
	if (ret) {
		conn_error(c, hdr, ret, "%s", msg);
		stream_free(c, st, true);
		return;
	}
	if (!st->create) {
		stream_free(c, st, false);
		conn_reply(c, hdr, NULL, 0, NULL, 0, NULL, NULL);
		return;
	}
	if (c->sink.upload) {
		struct vmu_text_upload *u = c->sink.upload;

		c->sink.upload = NULL; /* commit frees it, either way */
		ret = vmu_text_commit(u, st->fp, &st->t.text, &created);
		if (ret) {
			conn_error(
				c, hdr, ret, "%s",
				ret == -EBADMSG ?
					"bytes do not match the fingerprint" :
					"cannot store the text");
			stream_free(c, st, false);
			return;
		}
		if (st->t.module && module_load(c, hdr, st, created)) {
			stream_free(c, st, false);
			return;
		}
	} else {
		vmu_region_unpin(st->s->vs, st->t.region);
		st->pinned = false;
	}
	ret = session_tensor_add(st->s, &st->t, &handle);
	if (ret) {
		if (st->t.text)
			vmu_text_put(st->s->vs, st->t.text);
		else
			vmu_region_destroy(st->s->vs, st->t.region);
		conn_error(c, hdr, ret, "out of memory for handles");
	} else {
		msg_tensor_resp(&r, handle, &st->t.desc,
				created ? 0 : DJINN_TENSOR_DEDUP);
		conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
	}
	stream_free(c, st, false);
}

/* Bytes of a streaming request arrive: the client is alive, so its
 * lease is renewed (it cannot send a HEARTBEAT mid-frame). */
void msg_stream_progress(struct conn *c)
{
	struct stream *st = c->stream;

	if (st)
		c->srv->sessions.leases->ops->renew(c->srv->sessions.leases,
						    st->s, loop_now());
}

void msg_stream_abort(struct conn *c)
{
	stream_free(c, c->stream, true);
}

/* Session @s ended: the upload @c has in progress for it stops now (its
 * memory goes with the session), the rest of its bytes are skipped, and
 * it is answered -ECANCELED. */
void msg_stream_session_ended(struct conn *c, struct session *s)
{
	struct stream *st = c->stream;

	if (!st || st->s != s)
		return;
	conn_error(c, &c->hdr, -ECANCELED, "session %llu ended: %s",
		   (unsigned long long)s->id, session_reason_name(s->reason));
	stream_free(c, st, true);
	free(c->body);
	c->body = NULL;
	c->body_len = c->body_got = 0;
	c->ps = c->left ? P_DISCARD : P_HDR;
	c->hdr_got = 0;
}

/*
 * A read in flight: its tensor stays held, and resident, until sent.
 *
 * On a device whose memory the I/O thread cannot touch (a GPU), the
 * memory executor copies the range to staging buffers (exec/stage.h): a
 * range of up to STAGE_MAX into one buffer of its size, a larger one in
 * parts of STAGE_MAX through two buffers, the next part copied into one
 * while the other is sent (conn_reply_parts()); at most one copy of a
 * read is in flight, so its parts come back in order.
 *
 * The buffers are charged to the read's connection and to its session's
 * tenant before the first copy. A read that would take its connection
 * past CONN_STAGE_MAX, or its tenant past memory.read_staging, waits on
 * its connection (c->read_wait, in order) until the connection's or the
 * tenant's earlier reads are sent. A connection whose first waiting read
 * waits for its tenant alone waits its turn on the tenant (read_conns):
 * the tenant's staging goes to its connections in turn, a read at a
 * time, so a connection that leaves its replies unread holds at most
 * CONN_STAGE_MAX of it, and another tenant's reads never wait for it.
 *
 * A connection that holds no staging starts its first read at once,
 * though: through one buffer of STAGE_MAX (copy, send, copy) if its
 * tenant's staging is full. So each connection's replies keep coming
 * whatever order its client reads its connections in (a client that
 * reads one connection to the end before the next would otherwise wait
 * for ever on replies it has not read), and a tenant holds at most
 * memory.read_staging plus STAGE_MAX a connection.
 */
struct read_ctx {
	struct mem_waiter w; /* swapping in, or staging */
	struct list_head node; /* on its connection's read_wait */
	struct conn *c; /* counts it in flight (conn_read_begin) */
	struct djinn_hdr hdr;
	uint64_t t0;
	uint64_t offset, len;
	struct session *s;
	uint32_t slot;
	uint64_t region;
	struct exec_job *job; /* its first job, until submitted */
	uint64_t charged; /* staging bytes charged */
	struct exec_mem staged; /* a one-buffer read's bytes, on the host */
	/* a read in parts */
	struct out_msg *msg; /* its reply, until done */
	bool done; /* the reply is sent or dropped */
	uint64_t addr; /* the tensor's device address */
	uint64_t copied; /* bytes of the range given to copies */
	unsigned int jobs; /* copies in flight: at most one */
	void *spare; /* a buffer sent, for the next copy after that one */
};

static void read_drop(struct read_ctx *rc);

/* Give a staging buffer of a read in parts back to the pool. */
static void read_unstage(struct read_ctx *rc, void *buf)
{
	struct exec_mem m = { .staged = buf, .staged_size = STAGE_MAX };

	executor_unstage(rc->s->dev->mem, &m);
}

/* An EXEC_MEM job of @rc's for @m, or NULL when out of memory. */
static struct exec_job *read_job(struct read_ctx *rc, const struct exec_mem *m)
{
	struct exec_job *job = svc_mem_job(rc->s, rc->hdr.request_id, m);

	if (!job)
		return NULL;
	job->conn = rc->c;
	job->client = true;
	conn_get(rc->c);
	job->ctx = &rc->w;
	job->done = mem_done;
	job->done_arg = rc->c->srv;
	return job;
}

static void read_submit(struct read_ctx *rc, struct exec_job *job)
{
	rc->jobs++;
	svc_submit(job);
}

/* Charge @rc's staging and run its first job. */
static void read_go(struct read_ctx *rc)
{
	struct exec_job *job = rc->job;

	rc->job = NULL;
	rc->c->read_staged += rc->charged;
	rc->s->ts->read_staged += rc->charged;
	read_submit(rc, job);
}

static bool fits_conn(const struct read_ctx *rc)
{
	return rc->c->read_staged + rc->charged <= CONN_STAGE_MAX;
}

static bool fits_tenant(const struct read_ctx *rc)
{
	const struct tenant_state *ts = rc->s->ts;

	return ts->read_staged + rc->charged <= rc->c->srv->cfg.read_staging;
}

/* A read that starts with its tenant's staging full: in one buffer. */
static void read_single(struct read_ctx *rc)
{
	if (!fits_tenant(rc) || !list_empty(&rc->s->ts->read_conns))
		rc->charged =
			stage_size(rc->len < STAGE_MAX ? rc->len : STAGE_MAX);
}

/* @c holds no staging: its first waiting read starts now. */
static void conn_reads_kick(struct conn *c)
{
	struct read_ctx *rc;

	if (c->read_staged || list_empty(&c->read_wait))
		return;
	rc = list_first_entry(&c->read_wait, struct read_ctx, node);
	if (c->read_ts) {
		list_del_init(&c->read_node);
		c->read_ts = NULL;
	}
	list_del_init(&rc->node);
	rc->s->ts->reads_waiting--;
	read_single(rc);
	read_go(rc);
}

/* @c's first waiting read fits its connection's staging: it waits for
 * its tenant's, in turn with the tenant's other connections. */
static void conn_reads_ready(struct conn *c)
{
	struct read_ctx *rc;

	if (c->read_ts || list_empty(&c->read_wait))
		return;
	rc = list_first_entry(&c->read_wait, struct read_ctx, node);
	if (!fits_conn(rc))
		return;
	c->read_ts = rc->s->ts;
	list_add_tail(&c->read_node, &c->read_ts->read_conns);
}

/* Its first job now, or it waits (struct read_ctx). */
static void read_start(struct read_ctx *rc)
{
	struct tenant_state *ts = rc->s->ts;
	struct conn *c = rc->c;

	if (c->tx_dead) {
		read_drop(rc);
		return;
	}
	if (rc->charged && list_empty(&c->read_wait) && !c->read_staged)
		read_single(rc); /* it starts, whatever its tenant holds */
	else if (rc->charged &&
		 (!list_empty(&c->read_wait) || !fits_conn(rc) ||
		  !list_empty(&ts->read_conns) || !fits_tenant(rc))) {
		list_add_tail(&rc->node, &c->read_wait);
		ts->reads_waiting++;
		conn_reads_ready(c);
		return;
	}
	read_go(rc);
}

/* @ts's staging came back (or more of its reads wait): its connections
 * start their first waiting reads in turn while they fit. */
static void reads_wake(struct tenant_state *ts)
{
	while (!list_empty(&ts->read_conns)) {
		struct conn *c = list_first_entry(&ts->read_conns, struct conn,
						  read_node);
		struct read_ctx *rc =
			list_first_entry(&c->read_wait, struct read_ctx, node);

		if (!fits_tenant(rc))
			break;
		list_del_init(&c->read_node);
		c->read_ts = NULL;
		list_del_init(&rc->node);
		ts->reads_waiting--;
		read_go(rc);
		/* its next read, if it fits, after the others' */
		conn_reads_ready(c);
	}
	tenant_state_drop(ts);
}

/* Its reply is done and nothing of it is in flight: let go of it all. */
static void read_end(struct read_ctx *rc)
{
	struct tenant_state *ts = rc->s->ts;
	struct conn *c = rc->c;
	uint64_t charged = rc->charged, len = rc->len;

	if (rc->region)
		vmu_region_unpin(rc->s->vs, rc->region);
	/* The reply is sent: another read may have the buffer now. */
	executor_unstage(rc->s->dev->mem, &rc->staged);
	session_tensor_unhold(rc->s, rc->slot);
	session_put(rc->s);
	free(rc);
	if (charged) {
		c->read_staged -= charged;
		ts->read_staged -= charged;
		conn_reads_kick(c);
		conn_reads_ready(c);
		if (c->read_ts && c->read_ts != ts)
			reads_wake(c->read_ts);
		reads_wake(ts);
	}
	/* The connection outlives its replies and the jobs that hold it. */
	conn_read_end(c, len);
}

/* Its reply's done callback (or its failure's, no reply sent). */
static void read_done(void *arg)
{
	struct read_ctx *rc = arg;

	rc->done = true;
	rc->msg = NULL;
	if (!rc->jobs && !rc->spare)
		read_end(rc);
}

/* A read not started whose connection can send no more: it ends, with
 * its first job never run. */
static void read_drop(struct read_ctx *rc)
{
	struct exec_job *job = rc->job;
	struct conn *c = rc->c;

	rc->job = NULL;
	rc->charged = 0;
	job->s->mem_waits--;
	svc_job_free(job);
	read_done(rc);
	conn_put(c); /* the job's */
}

void msg_reads_abort(struct conn *c)
{
	if (c->read_ts) {
		list_del_init(&c->read_node);
		c->read_ts = NULL;
	}
	while (!list_empty(&c->read_wait)) {
		struct read_ctx *rc =
			list_first_entry(&c->read_wait, struct read_ctx, node);
		struct tenant_state *ts = rc->s->ts;

		list_del_init(&rc->node);
		ts->reads_waiting--;
		read_drop(rc);
		/* the tenant's next connection may fit now */
		reads_wake(ts);
	}
}

/* The next part of a read in parts into @buf (NULL: a new buffer), once
 * the copy in flight is back; or @buf back to the pool when no more is
 * wanted. */
static void read_more(struct read_ctx *rc, void *buf)
{
	struct exec_mem m = { .addr = rc->addr, .going = true };
	struct exec_job *job;

	if (rc->done || rc->c->tx_dead || rc->copied == rc->len) {
		if (buf)
			read_unstage(rc, buf);
		if (rc->done && !rc->jobs && !rc->spare)
			read_end(rc);
		return;
	}
	if (rc->jobs) {
		rc->spare = buf;
		return;
	}
	m.stage_off = rc->offset + rc->copied;
	m.stage_len = rc->len - rc->copied < STAGE_MAX ? rc->len - rc->copied :
							 STAGE_MAX;
	m.staged = buf;
	m.staged_size = STAGE_MAX; /* given, or the size to take */
	job = read_job(rc, &m);
	if (!job && !buf)
		return; /* no second buffer: it goes on with one */
	if (!job) {
		/* Its header promised the bytes: it cannot end in an error
		 * frame, only with the connection. */
		log_err("conn %d: out of memory reading a tensor: closing",
			rc->c->fd);
		conn_close(rc->c, true);
		read_unstage(rc, buf);
		return;
	}
	rc->copied += m.stage_len;
	read_submit(rc, job);
}

/* conn_reply_parts()'s part_done: a part is sent (or dropped). */
static void read_part_sent(void *arg, const void *p, bool sent)
{
	struct read_ctx *rc = arg;

	if (!sent) {
		read_unstage(rc, (void *)p);
		return;
	}
	read_more(rc, (void *)p);
}

/* The first part is staged: its reply starts, and the next part is
 * copied meanwhile. */
static void read_parts_start(struct conn *c, struct read_ctx *rc,
			     struct exec_job *job)
{
	struct out_msg *m;

	rc->region = job->mem.region;
	rc->addr = job->mem.addr;
	m = conn_reply_parts(c, &rc->hdr, rc->len, job->mem.staged,
			     job->mem.stage_len, read_part_sent, read_done, rc);
	if (!m)
		return; /* dropped: the callbacks have let go of @rc */
	rc->msg = m;
	if (rc->charged > STAGE_MAX)
		read_more(rc, NULL); /* the second buffer */
}

/* A later part is staged: hand it to the reply, unless it is gone. */
static void read_part_copied(struct conn *c, struct read_ctx *rc,
			     struct exec_job *job)
{
	void *spare = rc->spare;
	struct exec_job *again;

	rc->spare = NULL;
	if (job->error && !job->mem.staged && !rc->done && !c->tx_dead) {
		/* no second buffer to be had: it goes on with one */
		rc->copied -= job->mem.stage_len;
		goto next;
	}
	if (job->error == -ECANCELED && !rc->done && !c->tx_dead &&
	    (again = read_job(rc, &job->mem))) {
		/* taken off the queue as its session ended: the part is
		 * copied all the same (exec_mem.going) */
		read_submit(rc, again);
		rc->spare = spare;
		return;
	}
	if (job->error && !rc->done && !c->tx_dead) {
		log_err("conn %d: reading a tensor: part at %llu: %s "
			"(%d): closing",
			c->fd, (unsigned long long)job->mem.stage_off,
			job->msg[0] ? job->msg : "copy failed", job->error);
		conn_close(c, true);
	}
	if (job->error || rc->done || c->tx_dead) {
		if (job->mem.staged)
			read_unstage(rc, job->mem.staged);
	} else {
		conn_part(c, rc->msg, job->mem.staged, job->mem.stage_len);
	}
next:
	if (spare)
		read_more(rc, spare);
	else if (rc->done && !rc->jobs)
		read_end(rc);
}

/* The tensor is resident (swapped in), or its bytes staged: send them. */
static void read_mem_done(struct conn *c, struct exec_job *job,
			  struct mem_waiter *w)
{
	struct read_ctx *rc = container_of(w, struct read_ctx, w);
	const void *src;

	rc->jobs--;
	if (rc->msg || rc->done) {
		read_part_copied(c, rc, job);
		return;
	}
	metrics_observe(&c->srv->st, DJINN_MSG_TENSOR_READ,
			loop_now() - rc->t0);
	if (job->error) {
		const char *why =
			job->mem.stage_len ?
				"cannot copy the tensor from the device" :
				"cannot make the tensor resident";

		/* "session ended", or what the job says */
		conn_error(c, &rc->hdr, job->error, "%s",
			   job->msg[0] ? job->msg : why);
		read_done(rc);
		return;
	}
	if (job->mem.stage_len && job->mem.stage_len < rc->len) {
		read_parts_start(c, rc, job);
		return;
	}
	rc->region = job->mem.region;
	rc->staged = job->mem;
	src = rc->staged.staged ?
		      rc->staged.staged :
		      (const void *)(uintptr_t)(job->mem.addr + rc->offset);
	conn_reply(c, &rc->hdr, NULL, 0, src, rc->len, read_done, rc);
}

void handle_tensor_read(struct conn *c, const struct djinn_hdr *hdr,
			struct session *s, void *req, uint64_t len)
{
	const struct djinn_tensor_io *io = req;
	struct vmu_region_info info = { 0 };
	struct vmu_provider *p;
	struct read_ctx *rc;
	struct tensor t;
	uint64_t addr;
	int ret;

	rc = calloc(1, sizeof(*rc));
	if (!rc) {
		conn_error(c, hdr, -ENOMEM, "out of memory");
		return;
	}
	ret = session_tensor_hold(s, io->handle, &t, &rc->slot);
	if (ret) {
		char why[DJINN_MAX_ERROR_MSG];

		session_tensor_why(s, io->handle, ret, why, sizeof(why));
		conn_error(c, hdr, ret, "%s", why);
		free(rc);
		return;
	}
	rc->s = s; /* read_done() lets go of it */
	session_ref(s);
	rc->c = c;
	rc->len = io->len;
	conn_read_begin(c, rc->len);
	if (io->offset > t.bytes || io->len > t.bytes - io->offset) {
		conn_error(c, hdr, -EINVAL,
			   "range [%llu, +%llu) outside a tensor of %llu bytes",
			   (unsigned long long)io->offset,
			   (unsigned long long)io->len,
			   (unsigned long long)t.bytes);
		read_done(rc);
		return;
	}
	p = rc->s->dev->backend->provider;
	if (!t.text) {
		ret = vmu_region_info(rc->s->vs, t.region, &info);
		if (ret) {
			conn_error(c, hdr, ret,
				   "cannot make the tensor resident");
			read_done(rc);
			return;
		}
	}
	/*
	 * On a GPU (provider device_only) the I/O thread cannot read device
	 * memory: the memory executor copies the range to pinned host
	 * memory, and the reply is sent from there (struct read_ctx: in
	 * parts above STAGE_MAX). A swapped-out tensor
	 * goes there too, to be swapped in. Else the bytes go as they are:
	 * on the CPU backend a device address is a host pointer.
	 */
	if ((p->device_only && io->len) ||
	    (!t.text && info.state != VMU_REGION_RESIDENT)) {
		struct exec_mem m = { .region = t.text ? 0 : t.region };

		if (t.text)
			m.addr = vmu_text_addr(t.text);
		if (p->device_only && io->len) {
			/* one buffer of its size, or two of STAGE_MAX */
			bool parts = io->len > STAGE_MAX;

			m.stage_off = io->offset;
			m.stage_len = parts ? STAGE_MAX : io->len;
			rc->copied = m.stage_len;
			rc->charged = parts ? 2 * STAGE_MAX :
					      stage_size(io->len);
		}
		rc->w.done = read_mem_done;
		rc->hdr = *hdr;
		rc->t0 = msg_defer(c);
		rc->offset = io->offset;
		rc->job = read_job(rc, &m);
		if (!rc->job) {
			rc->charged = 0;
			conn_error(c, hdr, -ENOMEM, "out of memory");
			read_done(rc);
			return;
		}
		read_start(rc);
		return;
	}
	if (t.text) {
		addr = vmu_text_addr(t.text);
	} else {
		ret = vmu_region_pin(rc->s->vs, t.region, NULL, &info);
		if (ret) {
			conn_error(c, hdr, ret,
				   "cannot make the tensor resident");
			read_done(rc);
			return;
		}
		rc->region = t.region;
		addr = info.addr;
	}
	conn_reply(c, hdr, NULL, 0,
		   p->device_only ?
			   NULL :
			   (const void *)(uintptr_t)(addr + io->offset),
		   io->len, read_done, rc);
}

void handle_tensor_release(struct conn *c, const struct djinn_hdr *hdr,
			   struct session *s, void *req, uint64_t len)
{
	const struct djinn_tensor_release *r = req;

	if (session_tensor_release(s, r->handle))
		conn_error(c, hdr, -ENOENT, "no tensor with handle %#llx",
			   (unsigned long long)r->handle);
	else
		conn_reply(c, hdr, NULL, 0, NULL, 0, NULL, NULL);
}

/* model.NAME.readable: an open-weight served model. */
static bool readable_model(void *arg, const char *name)
{
	const struct server_config *cfg = arg;

	for (unsigned int i = 0; i < cfg->nr_readable; i++)
		if (!strcmp(cfg->readable[i], name))
			return true;
	return false;
}

void handle_text_lookup(struct conn *c, const struct djinn_hdr *hdr,
			struct session *s, void *req, uint64_t len)
{
	const struct djinn_text_lookup *l = req;
	struct djinn_tensor_resp r;
	struct tensor t = { 0 };
	uint64_t handle;

	if (check_desc(c, hdr, &l->desc, &t.bytes))
		return;
	t.desc = l->desc;
	c->srv->st.text_lookups++;
	if (vmu_text_lookup(s->vs, l->fp, &t.text) &&
	    (!model_store_served_fp(s->dev->models, l->fp, readable_model,
				    &c->srv->cfg) ||
	     vmu_text_lookup_shared(s->vs, l->fp, &t.text))) {
		c->srv->st.text_misses++;
		conn_miss(c, hdr, -ENOENT, "no text with that fingerprint");
	} else if (vmu_text_size(t.text) != t.bytes) {
		conn_error(c, hdr, -EINVAL,
			   "text of %llu bytes viewed as %llu bytes",
			   (unsigned long long)vmu_text_size(t.text),
			   (unsigned long long)t.bytes);
		vmu_text_put(s->vs, t.text);
	} else if (session_tensor_add(s, &t, &handle)) {
		conn_error(c, hdr, -ENOMEM, "out of memory for handles");
		vmu_text_put(s->vs, t.text);
	} else {
		msg_tensor_resp(&r, handle, &t.desc, DJINN_TENSOR_DEDUP);
		conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
	}
}

static void mem_done(struct exec_job *job, void *arg)
{
	struct server *srv = arg;
	struct mem_waiter *w = job->ctx;
	struct conn *c = job->conn;

	job->s->mem_waits--;
	/* The client waited on the daemon: it was not idle. */
	if (!job->s->dead)
		srv->sessions.leases->ops->renew(srv->sessions.leases, job->s,
						 loop_now());
	if (w) {
		w->done(c, job, w);
	} else {
		/* Whoever waited is gone (the session ended, or the
		 * connection closed): undo. */
		if (!job->error && job->mem.region)
			vmu_region_unpin(job->s->vs, job->mem.region);
		executor_unstage(job->s->dev->mem, &job->mem);
		if (!job->error && job->mem.create)
			vmu_region_destroy(job->s->vs, job->mem.region);
		conn_resume(c);
	}
	conn_put(c);
	svc_job_free(job);
}
