// SPDX-License-Identifier: MIT
/*
 * The admin socket's messages (root or the djinn group): the sessions,
 * memory, schedulers, counters and models of every device, killing a
 * session, evicting a model, and for tests a device fault. Their rows
 * are in msg.c's table, which serves them on the admin socket only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "server.h"
#include "svc/devices.h"
#include "model/runtime.h"
#include "net/conn.h"
#include "net/ident.h"
#include "net/msg.h"
#include "net/tokens.h"
#include "session/tenant.h"

/* ---------------------------------------------------------------------- */
/* Sessions */

void handle_admin_sessions(struct conn *c, const struct djinn_hdr *hdr,
			   struct session *unused, void *req, uint64_t len)
{
	struct server *srv = c->srv;
	uint64_t n = srv->sessions.nr, i = 0;
	size_t rlen = 8 + n * sizeof(struct djinn_admin_session);
	uint8_t *buf = calloc(1, rlen);
	struct djinn_admin_session *e = (void *)(buf + 8);
	struct session *s;

	if (!buf) {
		conn_error(c, hdr, -ENOMEM, "out of memory");
		return;
	}
	list_for_each_entry(s, &srv->sessions.list, node) {
		struct vmu_usage u;

		vmu_session_usage(s->vs, &u);
		e[i] = (struct djinn_admin_session){
			.id = s->id,
			.priority = s->priority,
			.phase = s->se.w.phase,
			.lease_ns = s->lease_ns,
			.deadline_ns = s->deadline_ns,
			.data_bytes = u.data_bytes,
			.resident = u.resident,
			.swapped = u.swapped,
			.text_refs = u.text_refs,
			.tensors = s->nr_tensors,
			.requests = s->requests,
			.uid = (uint32_t)s->uid,
			.pid = (int32_t)s->pid,
			.device = s->dev->index,
			.ctx_waiting = s->se.ctx_waiting,
		};
		memcpy(e[i].tenant, s->tenant, sizeof(e[i].tenant));
		memcpy(e[i].label, s->label, sizeof(e[i].label));
		i++;
	}
	memcpy(buf, &(uint32_t){ (uint32_t)i }, sizeof(uint32_t));
	conn_reply(c, hdr, buf, 8 + i * sizeof(*e), NULL, 0, NULL, NULL);
	free(buf);
}

/* ADMIN_TENANTS' entries by name. */
static int admin_tenant_cmp(const void *a, const void *b)
{
	const struct djinn_admin_tenant *x = a, *y = b;

	return strcmp(x->name, y->name);
}

/* @name's entry of @e[0 .. *@n), added if it is not there. */
static struct djinn_admin_tenant *
tenant_entry(struct djinn_admin_tenant *e, unsigned int *n, const char *name)
{
	for (unsigned int i = 0; i < *n; i++)
		if (!strcmp(e[i].name, name))
			return &e[i];
	memset(&e[*n], 0, sizeof(e[*n]));
	snprintf(e[*n].name, sizeof(e[*n].name), "%s", name);
	return &e[(*n)++];
}

/* ADMIN_TENANTS: who holds what, against its quotas. */
void handle_admin_tenants(struct conn *c, const struct djinn_hdr *hdr,
			  struct session *unused, void *req, uint64_t len)
{
	struct server *srv = c->srv;
	const struct server_config *cfg = &srv->cfg;
	struct djinn_admin_tenant *e;
	struct tenant_state *t;
	unsigned int n = 0, cap = cfg->nr_tmaps;
	uint8_t *buf;

	list_for_each_entry(t, &srv->sessions.tenants, node)
		cap++;
	buf = calloc(1, 8 + (cap ? cap : 1) * sizeof(*e));
	if (!buf) {
		conn_error(c, hdr, -ENOMEM, "out of memory");
		return;
	}
	e = (struct djinn_admin_tenant *)(buf + 8);
	list_for_each_entry(t, &srv->sessions.tenants, node) {
		struct djinn_admin_tenant *x = tenant_entry(e, &n, t->name);

		x->conns = t->conns;
		x->sessions = t->sessions;
		x->inflight = t->inflight;
	}
	for (unsigned int i = 0; i < cfg->nr_tmaps; i++) {
		const struct tenant_map *m = &cfg->tmaps[i];
		struct djinn_admin_tenant *x = tenant_entry(e, &n, m->tenant);

		x->flags |=
			DJINN_TENANT_CONFIGURED |
			(m->client_kernels ? DJINN_TENANT_CLIENT_KERNELS : 0);
		x->q_memory = m->memory;
		x->q_swap = m->swap;
		x->q_guaranteed = m->guaranteed;
		x->q_lease_max_ns = m->lease_max_ns;
		x->q_sessions = m->sessions;
		x->q_conns = m->conns;
		x->q_inflight = m->inflight;
	}
	for (unsigned int i = 0; i < n; i++)
		for (unsigned int d = 0; d < srv->nr_dev; d++) {
			struct vmu_usage u;

			if (vmu_tenant_usage(srv->dev[d].vmu, e[i].name, &u))
				continue;
			e[i].data_bytes += u.data_bytes;
			e[i].swapped += u.swapped;
			e[i].text_refs += u.text_refs;
			e[i].text_bytes += u.text_bytes;
		}
	if (n)
		qsort(e, n, sizeof(*e), admin_tenant_cmp);
	memcpy(buf, &(uint32_t){ n }, sizeof(uint32_t));
	conn_reply(c, hdr, buf, 8 + n * sizeof(*e), NULL, 0, NULL, NULL);
	free(buf);
}

void handle_admin_kill(struct conn *c, const struct djinn_hdr *hdr,
		       struct session *unused, void *req, uint64_t len)
{
	const struct djinn_admin_kill *k = req;
	struct session *s = session_get(&c->srv->sessions, k->session_id);

	if (!s) {
		conn_error(c, hdr, -ENOENT, "no session %llu",
			   (unsigned long long)k->session_id);
		return;
	}
	session_end(&c->srv->sessions, s, SESSION_KILLED);
	session_put(s);
	conn_reply(c, hdr, NULL, 0, NULL, 0, NULL, NULL);
}

/* ---------------------------------------------------------------------- */
/* Devices */

/* One device's entry of ADMIN_VMU's answer. */
static void admin_vmu_fill(struct device *d, struct djinn_admin_vmu *out)
{
	struct djinn_admin_vmu r = { 0 };
	struct vmu_stats st;

	vmu_get_stats(d->vmu, &st);
	snprintf(r.device, sizeof(r.device), "%s", d->name);
	r.capacity = st.capacity;
	r.granularity = st.granularity;
	r.committed = st.committed;
	r.reserved = st.reserved;
	r.free = st.free;
	r.pressure = st.pressure;
	for (int i = 0; i < VMU_NR_SEGS; i++)
		r.seg[i] = (struct djinn_admin_seg){ st.seg[i].used,
						     st.seg[i].peak,
						     st.seg[i].entries };
	r.text_cached = st.text_cached;
	r.text_evictions = st.text_evictions;
	r.swap_outs = st.swap_outs;
	r.swap_ins = st.swap_ins;
	r.swapped_out_bytes = st.swapped_out_bytes;
	r.swapped_in_bytes = st.swapped_in_bytes;
	r.swapped_now = st.swapped_now;
	r.admits = st.admits;
	r.admit_refusals = st.admit_refusals;
	r.quota_refusals = st.quota_refusals;
	*out = r;
}

void handle_admin_vmu(struct conn *c, const struct djinn_hdr *hdr,
		      struct session *unused, void *req, uint64_t len)
{
	unsigned int n = c->srv->nr_dev;
	struct djinn_admin_vmu *rs = calloc(n, sizeof(*rs));

	if (!rs) {
		conn_error(c, hdr, -ENOMEM, "out of memory");
		return;
	}
	for (unsigned int i = 0; i < n; i++)
		admin_vmu_fill(&c->srv->dev[i], &rs[i]);
	conn_reply(c, hdr, rs, n * sizeof(*rs), NULL, 0, NULL, NULL);
	free(rs);
}

/* ADMIN_SCHED: every device's scheduler, then every session. */
void handle_admin_sched(struct conn *c, const struct djinn_hdr *hdr,
			struct session *unused, void *req, uint64_t len)
{
	struct server *srv = c->srv;
	unsigned int nd = srv->nr_dev;
	uint64_t ns = srv->sessions.nr, i = 0;
	size_t rlen = 8 + nd * sizeof(struct djinn_admin_sched_dev) +
		      ns * sizeof(struct djinn_admin_sched_session);
	uint8_t *buf = calloc(1, rlen);
	struct djinn_admin_sched_dev *d = (void *)(buf + 8);
	struct djinn_admin_sched_session *e = (void *)(d + nd);
	struct session *s;

	if (!buf) {
		conn_error(c, hdr, -ENOMEM, "out of memory");
		return;
	}
	for (unsigned int k = 0; k < nd; k++) {
		struct device *dv = &srv->dev[k];
		struct sched_stats st;
		struct vmu_stats vs;

		sched_get_stats(dv->sched, &st);
		vmu_get_stats(dv->vmu, &vs);
		snprintf(d[k].device, sizeof(d[k].device), "%s", dv->name);
		d[k].policy = sched_policy(dv->sched);
		d[k].busy = sched_busy(dv->sched);
		for (unsigned int l = 0; l < SCHED_LANES; l++)
			sched_depth(dv->sched, l, &d[k].queued[l],
				    &d[k].running[l]);
		d[k].admit_waiting = (uint32_t)vs.admit_waiting;
		d[k].swap_out_bps = st.swap_out_bps;
		d[k].swap_in_bps = st.swap_in_bps;
		d[k].swaps_signal = st.swaps_signal;
		d[k].swaps_pressure = vs.swap_outs > st.swaps_signal ?
					      vs.swap_outs - st.swaps_signal :
					      0;
		d[k].swap_bytes_out = vs.swapped_out_bytes;
		d[k].swap_bytes_in = vs.swapped_in_bytes;
		d[k].prefetches = st.prefetches;
		d[k].prefetch_hits = st.prefetch_hits;
		d[k].prefetch_misses = st.prefetch_misses;
		d[k].admit_waits = vs.admit_waits;
		d[k].admit_timeouts = vs.admit_timeouts;
		d[k].passes = st.passes;
		d[k].pass_jobs = st.pass_jobs;
		d[k].pass_rows = st.pass_rows;
		for (unsigned int b = 0; b < SCHED_PASS_HIST; b++)
			d[k].pass_hist[b] = st.pass_hist[b];
		d[k].joins = st.joins;
		d[k].join_ns = st.join_sum_ns;
		d[k].join_p99_ns = sched_hist_p99_64(st.join_hist);
	}
	list_for_each_entry(s, &srv->sessions.list, node) {
		struct vmu_usage u;

		if (i == ns)
			break;
		vmu_session_usage(s->vs, &u);
		e[i] = (struct djinn_admin_sched_session){
			.id = s->id,
			.device = s->dev->index,
			.priority = s->priority,
			.resident = u.resident,
			.swapped = u.swapped,
		};
		memcpy(e[i].tenant, s->tenant, sizeof(e[i].tenant));
		sched_entity_info(s->dev->sched, &s->se, &e[i++]);
	}
	memcpy(buf, &(uint32_t){ nd }, sizeof(uint32_t));
	memcpy(buf + 4, &(uint32_t){ (uint32_t)i }, sizeof(uint32_t));
	conn_reply(c, hdr, buf,
		   8 + nd * sizeof(*d) +
			   i * sizeof(struct djinn_admin_sched_session),
		   NULL, 0, NULL, NULL);
	free(buf);
}

void handle_admin_stats(struct conn *c, const struct djinn_hdr *hdr,
			struct session *unused, void *req, uint64_t len)
{
	const struct server_stats *st = &c->srv->st;
	struct djinn_admin_stats r = {
		.uptime_ns = loop_now() - c->srv->started_ns,
		.conns = c->srv->nr_conns,
		.conns_accepted = st->conns_accepted,
		.sessions = c->srv->sessions.nr,
		.sessions_opened = c->srv->sessions.opened,
		.sessions_closed = c->srv->sessions.ended[SESSION_CLOSED],
		.sessions_expired = c->srv->sessions.ended[SESSION_EXPIRED],
		.sessions_killed = c->srv->sessions.ended[SESSION_KILLED],
		.requests = st->requests,
		.errors = st->errors,
		.bytes_in = st->bytes_in,
		.bytes_out = st->bytes_out,
		.graphs_run = st->graphs_run,
		.graphs_failed = st->graphs_failed,
		.text_lookups = st->text_lookups,
		.text_misses = st->text_misses,
	};

	for (unsigned int i = 0; i < c->srv->nr_dev; i++) {
		unsigned int q, run;

		sched_depth(c->srv->dev[i].sched, SCHED_COMPUTE, &q, &run);
		r.queue_depth += q + run;
	}
	conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
}

/* For tests (djinnd --fault-injection): fault the device; with
 * DJINN_FAULT_DEAD it dies, and djinnd exits once the answer is out. */
void handle_admin_fault_inject(struct conn *c, const struct djinn_hdr *hdr,
			       struct session *unused, void *req, uint64_t len)
{
	const struct djinn_admin_fault_req *q = req;
	struct djinn_admin_fault r = { 0 };
	struct device *d;
	int ret;

	const uint32_t known = DJINN_FAULT_DEAD | DJINN_FAULT_IDENT_HOLD |
			       DJINN_FAULT_IDENT_GO;
	uint32_t ident = q->flags &
			 (DJINN_FAULT_IDENT_HOLD | DJINN_FAULT_IDENT_GO);

	if (q->flags & ~known) {
		conn_error(c, hdr, -EINVAL, "unknown flags %#x",
			   q->flags & ~known);
		return;
	}
	if (ident && q->flags != ident) {
		conn_error(c, hdr, -EINVAL,
			   "flags %#x: an identity hold or go is alone",
			   q->flags);
		return;
	}
	if (q->device >= c->srv->nr_dev) {
		conn_error(c, hdr, -ENODEV,
			   "no device %u: this djinnd has %u device%s",
			   q->device, c->srv->nr_dev,
			   c->srv->nr_dev == 1 ? "" : "s");
		return;
	}
	if (!c->srv->cfg.fault_injection) {
		conn_error(c, hdr, -EPERM,
			   "fault injection is off: start djinnd with "
			   "--fault-injection (for tests only)");
		return;
	}
	d = &c->srv->dev[q->device];
	if (ident) {
		ident_hold(c->srv, ident == DJINN_FAULT_IDENT_HOLD);
		snprintf(r.what, sizeof(r.what), "loopback identities %s",
			 ident == DJINN_FAULT_IDENT_HOLD ? "held" : "go on");
		r.faults =
			__atomic_load_n(&d->backend->faults, __ATOMIC_ACQUIRE);
		snprintf(r.device, sizeof(r.device), "%s", d->name);
		conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
		return;
	}
	ret = svc_fault_inject(d, q->flags, r.what, sizeof(r.what));
	if (ret) {
		conn_error(c, hdr, ret, "%s", r.what);
		return;
	}
	r.faults = __atomic_load_n(&d->backend->faults, __ATOMIC_ACQUIRE);
	snprintf(r.device, sizeof(r.device), "%s", d->name);
	conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
}

/* ---------------------------------------------------------------------- */
/* Models */

/* ADMIN_MODELS' entries sort by name, then device. */
/* An answer that lists entries (ADMIN_MODELS, ADMIN_TOKENS): a __u32
 * count, a zero __u32, then @n entries of @esz bytes at @e, a malloc'd
 * array sent from where it is and freed once sent (NULL for none). */
static void reply_entries(struct conn *c, const struct djinn_hdr *hdr, void *e,
			  uint32_t n, size_t esz)
{
	const uint32_t head[2] = { n, 0 };

	conn_reply(c, hdr, head, sizeof(head), e, (uint64_t)n * esz, free, e);
}

static int admin_model_cmp(const void *a, const void *b)
{
	const struct djinn_admin_model *x = a, *y = b;
	int d = strcmp(x->name, y->name);

	if (d)
		return d;
	return x->device < y->device ? -1 : x->device > y->device;
}

void msg_admin_models_reply(struct conn *c, const struct djinn_hdr *hdr,
			    const char *name)
{
	struct server *srv = c->srv;
	struct djinn_admin_model *e = NULL;
	size_t n = 0;
	int ret = 0;

	/* Each device's store: a model opened on two is loaded on both. */
	for (unsigned int d = 0; d < srv->nr_dev && !ret; d++) {
		struct model_info *list = NULL;
		struct djinn_admin_model *ne;
		size_t k = 0;

		if (!srv->dev[d].models)
			continue;
		ret = model_store_list(srv->dev[d].models, &list, &k);
		if (ret || !k) {
			free(list);
			continue;
		}
		ne = realloc(e, (n + k) * sizeof(*e));
		if (!ne) {
			free(list);
			ret = -ENOMEM;
			break;
		}
		e = ne;
		for (size_t i = 0; i < k; i++) {
			struct djinn_admin_model *m = &e[n];

			if (name && strcmp(list[i].name, name))
				continue;
			memset(m, 0, sizeof(*m));
			memcpy(m->name, list[i].name, sizeof(m->name));
			m->arch = list[i].arch; /* enum djinn_arch */
			m->dtype = list[i].dtype;
			m->bytes = list[i].bytes;
			m->holders = list[i].holders;
			m->device = d;
			memcpy(m->fp, list[i].fp, sizeof(m->fp));
			m->weights = list[i].weights;
			m->layers = list[i].layers;
			m->resident = list[i].resident;
			m->ring = list[i].ring;
			m->budget = list[i].budget;
			m->passes = list[i].passes;
			m->jobs = list[i].jobs;
			n++;
		}
		free(list);
	}
	if (ret) {
		free(e);
		conn_error(c, hdr, ret, "cannot list models");
		return;
	}
	if (n)
		qsort(e, n, sizeof(*e), admin_model_cmp);
	reply_entries(c, hdr, e, (uint32_t)n, sizeof(*e));
}

void handle_admin_models(struct conn *c, const struct djinn_hdr *hdr,
			 struct session *unused, void *req, uint64_t len)
{
	msg_admin_models_reply(c, hdr, NULL);
}

void handle_admin_model_evict(struct conn *c, const struct djinn_hdr *hdr,
			      struct session *unused, void *req, uint64_t len)
{
	const struct djinn_admin_model_evict *r = req;
	char msg[DJINN_MAX_ERROR_MSG];
	unsigned int evicted = 0;
	int ret;

	if (!msg_model_name_ok(c, hdr, r->name))
		return;
	if (!c->srv->dev[0].models) {
		conn_error(c, hdr, -ENOENT, "this djinnd serves no models");
		return;
	}
	/* From every device that has it unheld. -ENOENT where none has
	 * it; the first refusal (-EBUSY: held) where none let it go. */
	ret = -ENOENT;
	msg[0] = 0;
	for (unsigned int d = 0; d < c->srv->nr_dev; d++) {
		char why[DJINN_MAX_ERROR_MSG - 32];
		int r1 = model_store_evict(c->srv->dev[d].models, r->name, why,
					   sizeof(why));

		if (!r1)
			evicted++;
		else if (r1 == -ENOENT && !msg[0])
			snprintf(msg, sizeof(msg), "%s", why);
		else if (r1 != -ENOENT && ret == -ENOENT) {
			ret = r1;
			if (c->srv->nr_dev > 1)
				snprintf(msg, sizeof(msg), "%s (device %u)",
					 why, d);
			else
				snprintf(msg, sizeof(msg), "%s", why);
		}
	}
	if (evicted)
		ret = 0;
	if (ret)
		conn_error(c, hdr, ret, "%s", msg);
	else
		conn_reply(c, hdr, NULL, 0, NULL, 0, NULL, NULL);
}

/* ---------------------------------------------------------------------- */
/* Restarts */

void handle_admin_restart(struct conn *c, const struct djinn_hdr *hdr,
			  struct session *unused, void *req, uint64_t len)
{
	struct djinn_admin_restart r = { 0 };
	char msg[DJINN_MAX_ERROR_MSG];
	pid_t pid;
	int ret;

	ret = c->srv->hooks.restart ?
		      c->srv->hooks.restart(c->srv, &pid, msg, sizeof(msg)) :
		      (snprintf(msg, sizeof(msg), "restarts are not served"),
		       -EOPNOTSUPP);
	if (ret) {
		conn_error(c, hdr, ret, "%s", msg);
		return;
	}
	r.pid = (uint32_t)pid;
	conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
}

/* ---------------------------------------------------------------------- */
/* Tokens and health */

void handle_admin_token_mint(struct conn *c, const struct djinn_hdr *hdr,
			     struct session *unused, void *req, uint64_t len)
{
	const struct djinn_admin_token_mint *m = req;
	struct djinn_admin_token_minted r;
	char msg[DJINN_MAX_ERROR_MSG];
	int ret;

	if (!memchr(m->tenant, 0, sizeof(m->tenant))) {
		conn_error(c, hdr, -EINVAL, "tenant not NUL-terminated");
		return;
	}
	if (c->srv->restart) {
		/* the successor has read the file already */
		conn_error(c, hdr, -EBUSY,
			   "a restart is handing djinnd over: mint after it");
		return;
	}
	ret = tokens_mint(c->srv, m->tenant, m->ttl_ns, &r, msg, sizeof(msg));
	if (ret) {
		conn_error(c, hdr, ret, "%s", msg);
		return;
	}
	conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
	OPENSSL_cleanse(&r, sizeof(r));
}

void handle_admin_token_revoke(struct conn *c, const struct djinn_hdr *hdr,
			       struct session *unused, void *req, uint64_t len)
{
	const struct djinn_admin_token_revoke *r = req;
	int ret;

	if (c->srv->restart) {
		conn_error(c, hdr, -EBUSY,
			   "a restart is handing djinnd over: revoke after it");
		return;
	}
	ret = tokens_revoke(c->srv, r->id);

	if (ret == -ENOENT)
		conn_error(c, hdr, ret, "no minted token %llu",
			   (unsigned long long)r->id);
	else if (ret)
		conn_error(c, hdr, ret,
			   "token %llu is refused from now on, but the file of "
			   "minted tokens could not be written (%s): a djinnd "
			   "started after this one would take it",
			   (unsigned long long)r->id, strerror(-ret));
	else
		conn_reply(c, hdr, NULL, 0, NULL, 0, NULL, NULL);
}

void handle_admin_tokens(struct conn *c, const struct djinn_hdr *hdr,
			 struct session *unused, void *req, uint64_t len)
{
	struct djinn_admin_token *e;
	int n = tokens_list(c->srv, &e);

	if (n < 0)
		conn_error(c, hdr, n, "out of memory");
	else
		reply_entries(c, hdr, e, (uint32_t)n, sizeof(*e));
}

bool msg_ready(struct server *srv, char *why, size_t len)
{
	if (srv->exit_status) {
		snprintf(why, len, "%s", srv->dead_msg);
		return false;
	}
	for (unsigned int i = 0; i < srv->nr_dev; i++) {
		const char *dead = __atomic_load_n(&srv->dev[i].backend->dead,
						   __ATOMIC_ACQUIRE);

		if (dead) {
			snprintf(why, len, "device %s is dead: %s",
				 srv->dev[i].name, dead);
			return false;
		}
	}
	if (srv->draining) {
		snprintf(why, len, "draining: djinnd is stopping");
		return false;
	}
	if (srv->restart) {
		snprintf(why, len, "restarting: handing its state over");
		return false;
	}
	if (srv->restore) {
		snprintf(why, len, "restoring a predecessor's state");
		return false;
	}
	if (why && len)
		why[0] = 0;
	return true;
}

void handle_admin_health(struct conn *c, const struct djinn_hdr *hdr,
			 struct session *unused, void *req, uint64_t len)
{
	struct djinn_admin_health r = {
		.nr_dev = c->srv->nr_dev,
		.sessions = (uint32_t)c->srv->sessions.nr,
		.max_sessions = c->srv->cfg.max_sessions,
	};

	r.ready = msg_ready(c->srv, r.reason, sizeof(r.reason));
	conn_reply(c, hdr, &r, sizeof(r), NULL, 0, NULL, NULL);
}
