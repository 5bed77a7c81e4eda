// SPDX-License-Identifier: MIT
/*
 * The metrics endpoint: GET /metrics in the Prometheus text exposition
 * format (version 0.0.4), GET /healthz (liveness: 200 while the loop
 * turns) and GET /readyz (readiness: 200, or 503 with the reason while
 * djinnd drains, restarts or has a dead device: msg_ready()), over
 * HTTP/1.1 on the I/O thread's ring, off unless --metrics
 * (metrics.listen) names an address.
 *
 * One request per connection: read the request head (at most 8 KiB, in
 * at most 5 s: a linked timeout on the receive), answer with
 * "Connection: close", close. A malformed request is answered 400, an
 * unknown path 404, a method other than GET or HEAD 405; none of them
 * touches anything but its own connection. At most 64 are open at once;
 * more are closed as accepted.
 */
#include <errno.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "array_size.h"
#include "log.h"
#include "server.h"
#include "session/tenant.h"
#include "exec/executor.h"
#include "model/store.h"
#include "net/metrics.h"
#include "net/msg.h"

#define HTTP_HEAD_MAX 8192
#define HTTP_TIMEOUT_S 5
#define HTTP_MAX_CONNS 64

enum { TAG_RECV = 1, TAG_SEND = 2, TAG_TIMEOUT = 3 };

struct http_conn {
	struct io_src src;
	struct server *srv;
	struct list_head node;
	int fd;
	unsigned int pending; /* operations on the ring naming it */
	bool closing;
	char head[HTTP_HEAD_MAX];
	size_t got;
	char *out;
	size_t out_len, out_sent;
	struct __kernel_timespec ts;
};

/* ---------------------------------------------------------------------- */
/* Counters */

/* Bucket bounds in ns: 10 us .. 10 s. */
static const uint64_t lat_le_ns[METRICS_LAT_BUCKETS] = {
	10000,	   25000,     50000,	  100000,	  250000,
	500000,	   1000000,   2500000,	  5000000,	  10000000,
	100000000, 500000000, 1000000000, 10000000000ull,
};

struct msg_stats *metrics_msg(struct server_stats *st, uint16_t type)
{
	/* Every message type without a name counts as op="unknown",
	 * once; a named one djinnd refuses (GOAWAY) under its name. */
	if (type >= METRICS_MSGS || !msg_known(type))
		type = 0;
	return &st->msgs[type];
}

void metrics_observe(struct server_stats *st, uint16_t type, uint64_t ns)
{
	struct msg_stats *o = metrics_msg(st, type);
	unsigned int b = 0;

	while (b < METRICS_LAT_BUCKETS && ns > lat_le_ns[b])
		b++;
	o->lat[b]++;
	o->lat_sum_ns += ns;
	o->lat_count++;
}

/* ---------------------------------------------------------------------- */
/* The exposition */

struct sbuf {
	char *p;
	size_t len, cap;
	bool oom;
};

static __attribute__((format(printf, 2, 3))) void
sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		if (b->oom)
			return;
		va_start(ap, fmt);
		n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n >= 0 && (size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		{
			size_t cap = b->cap * 2 + (size_t)(n > 0 ? n : 0);
			char *p = realloc(b->p, cap);

			if (!p) {
				b->oom = true;
				return;
			}
			b->p = p;
			b->cap = cap;
		}
	}
}

static void family(struct sbuf *b, const char *name, const char *type,
		   const char *help)
{
	sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void one(struct sbuf *b, const char *name, const char *type,
		const char *help, uint64_t v)
{
	family(b, name, type, help);
	sb_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

static const char *phase_name(uint32_t phase)
{
	static const char *const names[] = {
		[DJINN_PHASE_UNKNOWN] = "unknown",
		[DJINN_PHASE_PREFILL] = "prefill",
		[DJINN_PHASE_DECODE] = "decode",
		[DJINN_PHASE_VISION] = "vision",
		[DJINN_PHASE_TRAINING] = "training",
		[DJINN_PHASE_IO_WAIT] = "io_wait",
		[DJINN_PHASE_COMPUTE] = "compute",
		[DJINN_PHASE_IDLE] = "idle",
	};

	return phase < ARRAY_SIZE(names) && names[phase] ? names[phase] :
							   "unknown";
}

#define NR_PHASES (DJINN_PHASE_IDLE + 1)

static void render_sessions(struct sbuf *b, struct server *srv)
{
	static const char *const reasons[] = {
		[SESSION_CLOSED] = "closed",
		[SESSION_EXPIRED] = "expired",
		[SESSION_KILLED] = "killed",
		[SESSION_SHUTDOWN] = "shutdown",
	};
	const struct session_table *st = &srv->sessions;
	uint64_t by_phase[NR_PHASES] = { 0 };
	struct session *s;

	list_for_each_entry(s, &srv->sessions.list, node)
		by_phase[s->se.w.phase < NR_PHASES ? s->se.w.phase : 0]++;
	family(b, "djinn_sessions", "gauge",
	       "Sessions open now, by the phase they last signalled.");
	for (uint32_t p = 0; p < NR_PHASES; p++)
		if (p == DJINN_PHASE_UNKNOWN ||
		    strcmp(phase_name(p), "unknown"))
			sb_printf(b, "djinn_sessions{phase=\"%s\"} %llu\n",
				  phase_name(p),
				  (unsigned long long)by_phase[p]);
	one(b, "djinn_sessions_opened_total", "counter", "Sessions opened.",
	    st->opened);
	family(b, "djinn_sessions_ended_total", "counter",
	       "Sessions ended, by how they ended.");
	for (int why = SESSION_CLOSED; why <= SESSION_SHUTDOWN; why++)
		sb_printf(b, "djinn_sessions_ended_total{reason=\"%s\"} %llu\n",
			  reasons[why], (unsigned long long)st->ended[why]);
	one(b, "djinn_lease_expiries_total", "counter",
	    "Sessions ended because their lease ran out.",
	    st->ended[SESSION_EXPIRED]);
	one(b, "djinn_session_kills_total", "counter",
	    "Sessions ended by an administrator.", st->ended[SESSION_KILLED]);
}

/* The server's counters that are a family of one sample each, in the
 * order they are printed after the connections open now. */
#define STAT(f) offsetof(struct server_stats, f)
static const struct counter {
	const char *name;
	size_t off; /* of a uint64_t in struct server_stats */
	const char *help;
} counters[] = {
	{ "djinn_connections_accepted_total", STAT(conns_accepted),
	  "Client connections accepted." },
	{ "djinn_connections_stalled_total", STAT(conns_stalled),
	  "Connections closed because their peer took no replies for a "
	  "lease period." },
	{ "djinn_connections_refused_total", STAT(conns_refused),
	  "Connections refused for being over "
	  "server.max_connections_per_uid or "
	  "server.max_connections_per_addr." },
	{ "djinn_connections_timed_out_total", STAT(conns_timed_out),
	  "Connections closed for a frame not finished within "
	  "server.frame_timeout." },
	{ "djinn_connections_idle_total", STAT(conns_idle),
	  "Connections closed for idling without a session for "
	  "server.idle_timeout." },
	{ "djinn_connections_throttled_total", STAT(conns_throttled),
	  "Times a connection stopped being read because its "
	  "TENSOR_READs in flight reached 64 or 64 MiB." },
	{ "djinn_tls_handshakes_total", STAT(tls_handshakes),
	  "TLS handshakes completed on tls: listeners." },
	{ "djinn_tls_kernel_total", STAT(tls_kernel),
	  "TLS connections whose records the kernel took (kernel TLS)." },
	{ "djinn_tls_failed_total", STAT(tls_failed),
	  "TLS handshakes that failed or timed out (a certificate refused, "
	  "a peer that is not TLS)." },
	{ "djinn_auth_refused_total", STAT(auth_refused),
	  "AUTH requests refused (a bearer token that names no tenant)." },
	{ "djinn_text_lookups_total", STAT(text_lookups),
	  "TEXT_LOOKUP requests (uploads and model opens asking for "
	  "text by fingerprint)." },
	{ "djinn_text_lookup_misses_total", STAT(text_misses),
	  "TEXT_LOOKUPs that found no such text (-ENOENT; not counted "
	  "in djinn_request_errors_total)." },
	{ "djinn_graphs_run_total", STAT(graphs_run),
	  "Graphs run to the end." },
	{ "djinn_graphs_failed_total", STAT(graphs_failed),
	  "Graphs that failed or were cancelled." },
};
#undef STAT

static void render_requests(struct sbuf *b, struct server *srv)
{
	const struct server_stats *st = &srv->st;

	family(b, "djinn_requests_total", "counter",
	       "Requests received, by opcode.");
	for (uint16_t type = 0; type < METRICS_MSGS; type++)
		if (st->msgs[type].requests)
			sb_printf(b, "djinn_requests_total{op=\"%s\"} %llu\n",
				  msg_label(type),
				  (unsigned long long)st->msgs[type].requests);
	family(b, "djinn_request_errors_total", "counter",
	       "Requests answered with an error, by opcode.");
	for (uint16_t type = 0; type < METRICS_MSGS; type++)
		if (st->msgs[type].requests || st->msgs[type].errors)
			sb_printf(
				b,
				"djinn_request_errors_total{op=\"%s\"} %llu\n",
				msg_label(type),
				(unsigned long long)st->msgs[type].errors);
	family(b, "djinn_request_duration_seconds", "histogram",
	       "From a request's header to its answer being queued, by "
	       "opcode.");
	for (uint16_t type = 0; type < METRICS_MSGS; type++) {
		const struct msg_stats *o = &st->msgs[type];
		uint64_t cum = 0;

		if (!o->lat_count)
			continue;
		for (unsigned int i = 0; i < METRICS_LAT_BUCKETS; i++) {
			cum += o->lat[i];
			sb_printf(
				b,
				"djinn_request_duration_seconds_bucket{op=\"%s\","
				"le=\"%g\"} %llu\n",
				msg_label(type), (double)lat_le_ns[i] / 1e9,
				(unsigned long long)cum);
		}
		sb_printf(b,
			  "djinn_request_duration_seconds_bucket{op=\"%s\","
			  "le=\"+Inf\"} %llu\n",
			  msg_label(type), (unsigned long long)o->lat_count);
		sb_printf(
			b,
			"djinn_request_duration_seconds_sum{op=\"%s\"} %.9f\n",
			msg_label(type), (double)o->lat_sum_ns / 1e9);
		sb_printf(b,
			  "djinn_request_duration_seconds_count{op=\"%s\"} "
			  "%llu\n",
			  msg_label(type), (unsigned long long)o->lat_count);
	}
	one(b, "djinn_received_bytes_total", "counter",
	    "Bytes received from clients.", st->bytes_in);
	one(b, "djinn_sent_bytes_total", "counter",
	    "Bytes queued to clients, frame headers included.", st->bytes_out);
	one(b, "djinn_connections", "gauge", "Client connections open now.",
	    srv->nr_conns);
	for (size_t i = 0; i < ARRAY_SIZE(counters); i++)
		one(b, counters[i].name, "counter", counters[i].help,
		    *(const uint64_t *)((const char *)st + counters[i].off));
}

/* One sample of a device's family: its name, the device, and one more
 * label (NULL for none). */
static void dev_sample(struct sbuf *b, const char *name, const char *dev,
		       const char *label, const char *value, uint64_t v)
{
	if (label)
		sb_printf(b, "%s{device=\"%s\",%s=\"%s\"} %llu\n", name, dev,
			  label, value, (unsigned long long)v);
	else
		sb_printf(b, "%s{device=\"%s\"} %llu\n", name, dev,
			  (unsigned long long)v);
}

/* Every device's memory and executors: each family once, a sample per
 * device. */
static void render_vmu(struct sbuf *b, struct server *srv)
{
	unsigned int nd = srv->nr_dev;
	struct vmu_stats *vs = calloc(nd, sizeof(*vs));
	const char *families[][3] = {
		{ "djinn_vmu_capacity_bytes", "gauge",
		  "Device memory the VMU manages." },
		{ "djinn_vmu_free_bytes", "gauge",
		  "Device memory neither held nor reserved." },
		{ "djinn_vmu_text_entries", "gauge",
		  "Text entries (deduplicated weights) held or cached." },
		{ "djinn_vmu_text_evictions_total", "counter",
		  "Unreferenced text entries evicted under pressure." },
		{ "djinn_vmu_swapped_now_bytes", "gauge",
		  "Host memory holding swapped-out regions now." },
		{ "djinn_vmu_admission_refusals_total", "counter",
		  "Allocations refused: the memory could not be found." },
		{ "djinn_vmu_quota_refusals_total", "counter",
		  "Allocations refused by a session's or tenant's quota." },
		{ "djinn_vmu_pressure", "gauge",
		  "Memory pressure: 0 normal, 1 warning, 2 critical." },
	};

	if (!vs) {
		b->oom = true;
		return;
	}
	for (unsigned int d = 0; d < nd; d++)
		vmu_get_stats(srv->dev[d].vmu, &vs[d]);
	for (size_t i = 0; i < ARRAY_SIZE(families); i++) {
		family(b, families[i][0], families[i][1], families[i][2]);
		for (unsigned int d = 0; d < nd; d++) {
			const struct vmu_stats *v = &vs[d];
			const uint64_t value[] = {
				v->capacity,
				v->free,
				v->seg[VMU_SEG_TEXT].entries,
				v->text_evictions,
				v->swapped_now,
				v->admit_refusals,
				v->quota_refusals,
				v->pressure,
			};

			dev_sample(b, families[i][0], srv->dev[d].name, NULL,
				   NULL, value[i]);
		}
	}
	family(b, "djinn_model_loads_total", "counter",
	       "Models loaded (weights read in), served ones and uploads.");
	for (unsigned int d = 0; d < nd; d++)
		dev_sample(b, "djinn_model_loads_total", srv->dev[d].name, NULL,
			   NULL,
			   srv->dev[d].models ?
				   model_store_loads(srv->dev[d].models) :
				   0);
	family(b, "djinn_vmu_bytes", "gauge",
	       "Device memory held now, by segment.");
	for (unsigned int d = 0; d < nd; d++)
		for (int seg = 0; seg < VMU_NR_SEGS; seg++)
			dev_sample(b, "djinn_vmu_bytes", srv->dev[d].name,
				   "segment", vmu_seg_name(seg),
				   vs[d].seg[seg].used);
	family(b, "djinn_vmu_swaps_total", "counter",
	       "Data regions swapped to host memory (out) and back (in).");
	for (unsigned int d = 0; d < nd; d++) {
		dev_sample(b, "djinn_vmu_swaps_total", srv->dev[d].name,
			   "direction", "out", vs[d].swap_outs);
		dev_sample(b, "djinn_vmu_swaps_total", srv->dev[d].name,
			   "direction", "in", vs[d].swap_ins);
	}
	family(b, "djinn_vmu_swapped_bytes_total", "counter",
	       "Bytes swapped out and in.");
	for (unsigned int d = 0; d < nd; d++) {
		dev_sample(b, "djinn_vmu_swapped_bytes_total", srv->dev[d].name,
			   "direction", "out", vs[d].swapped_out_bytes);
		dev_sample(b, "djinn_vmu_swapped_bytes_total", srv->dev[d].name,
			   "direction", "in", vs[d].swapped_in_bytes);
	}
	family(b, "djinn_executor_queue_depth", "gauge",
	       "Jobs queued or running, by executor.");
	for (unsigned int d = 0; d < nd; d++) {
		static const char *const lane[] = { "graph", "mem" };

		for (unsigned int l = 0; l < SCHED_LANES; l++) {
			unsigned int q, r;

			sched_depth(srv->dev[d].sched, l, &q, &r);
			dev_sample(b, "djinn_executor_queue_depth",
				   srv->dev[d].name, "executor", lane[l],
				   q + r);
		}
	}
	free(vs);
}

/* A histogram's series for @labels: @n buckets whose i-th (i < n - 1)
 * holds what is under 2^i @unit (the last, everything above), then
 * +Inf, the sum and the count. */
static void histogram(struct sbuf *b, const char *name, const char *labels,
		      const uint64_t *bk, unsigned int n, double unit,
		      uint64_t count, double sum)
{
	uint64_t cum = 0;

	for (unsigned int i = 0; i + 1 < n; i++) {
		cum += bk[i];
		sb_printf(b, "%s_bucket{%s,le=\"%g\"} %llu\n", name, labels,
			  (double)(1ull << i) * unit, (unsigned long long)cum);
	}
	sb_printf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels,
		  (unsigned long long)count);
	sb_printf(b, "%s_sum{%s} %.9g\n", name, labels, sum);
	sb_printf(b, "%s_count{%s} %llu\n", name, labels,
		  (unsigned long long)count);
}

/* The scheduler: swaps by cause, prefetches, queue waits by priority. */
static void render_sched(struct sbuf *b, struct server *srv)
{
	unsigned int nd = srv->nr_dev;
	struct sched_stats *ss = calloc(nd, sizeof(*ss));
	struct vmu_stats *vs = calloc(nd, sizeof(*vs));

	if (!ss || !vs) {
		b->oom = true;
		goto out;
	}
	for (unsigned int d = 0; d < nd; d++) {
		sched_get_stats(srv->dev[d].sched, &ss[d]);
		vmu_get_stats(srv->dev[d].vmu, &vs[d]);
	}
	family(b, "djinn_sched_swaps_total", "counter",
	       "Data regions swapped out, by cause: an IO_WAIT signal (the "
	       "semantic policy, ahead of need) or pressure (reclaim, when an "
	       "admission or an allocation needed the memory).");
	for (unsigned int d = 0; d < nd; d++) {
		uint64_t sig = ss[d].swaps_signal;

		dev_sample(b, "djinn_sched_swaps_total", srv->dev[d].name,
			   "cause", "signal", sig);
		dev_sample(b, "djinn_sched_swaps_total", srv->dev[d].name,
			   "cause", "pressure",
			   vs[d].swap_outs > sig ? vs[d].swap_outs - sig : 0);
	}
	family(b, "djinn_sched_prefetches_total", "counter",
	       "Waiting sessions swapped during an IO_WAIT, by whether they "
	       "were resident again at their next request (hit) or not "
	       "(miss).");
	for (unsigned int d = 0; d < nd; d++) {
		dev_sample(b, "djinn_sched_prefetches_total", srv->dev[d].name,
			   "result", "hit", ss[d].prefetch_hits);
		dev_sample(b, "djinn_sched_prefetches_total", srv->dev[d].name,
			   "result", "miss", ss[d].prefetch_misses);
	}
	family(b, "djinn_sched_admit_waits_total", "counter",
	       "Admissions that waited for memory coming free, and those "
	       "refused when sched.admit_wait ran out.");
	for (unsigned int d = 0; d < nd; d++) {
		dev_sample(b, "djinn_sched_admit_waits_total", srv->dev[d].name,
			   "result", "waited", vs[d].admit_waits);
		dev_sample(b, "djinn_sched_admit_waits_total", srv->dev[d].name,
			   "result", "timeout", vs[d].admit_timeouts);
	}
	family(b, "djinn_sched_passes_total", "counter",
	       "Model passes run: the ready steps of many contexts of one "
	       "model as one forward.");
	for (unsigned int d = 0; d < nd; d++)
		sb_printf(b, "djinn_sched_passes_total{device=\"%s\"} %llu\n",
			  srv->dev[d].name, (unsigned long long)ss[d].passes);
	family(b, "djinn_sched_pass_steps", "histogram",
	       "Steps (contexts) per model pass.");
	for (unsigned int d = 0; d < nd; d++) {
		char labels[64];

		snprintf(labels, sizeof(labels), "device=\"%s\"",
			 srv->dev[d].name);
		histogram(b, "djinn_sched_pass_steps", labels, ss[d].pass_hist,
			  SCHED_PASS_HIST, 1, ss[d].passes,
			  (double)ss[d].pass_jobs);
	}
	family(b, "djinn_sched_pass_join_wait_seconds", "histogram",
	       "From a model step being queued to the pass it joined, for "
	       "steps that joined a pass another step led.");
	for (unsigned int d = 0; d < nd; d++) {
		char labels[64];

		snprintf(labels, sizeof(labels), "device=\"%s\"",
			 srv->dev[d].name);
		histogram(b, "djinn_sched_pass_join_wait_seconds", labels,
			  ss[d].join_hist, SCHED_HIST, 1e-6, ss[d].joins,
			  (double)ss[d].join_sum_ns / 1e9);
	}
	family(b, "djinn_sched_queue_wait_seconds", "histogram",
	       "From a graph or model step being queued to its start, by "
	       "session priority.");
	for (unsigned int d = 0; d < nd; d++) {
		for (unsigned int p = 0; p < 8; p++) {
			char labels[96];

			if (!ss[d].waits[p])
				continue;
			snprintf(labels, sizeof(labels),
				 "device=\"%s\",priority=\"%u\"",
				 srv->dev[d].name, p);
			histogram(b, "djinn_sched_queue_wait_seconds", labels,
				  ss[d].wait_hist[p], SCHED_HIST, 1e-6,
				  ss[d].waits[p],
				  (double)ss[d].wait_sum_ns[p] / 1e9);
		}
	}
out:
	free(ss);
	free(vs);
}

/* A label value as the exposition format wants it: \ and " escaped
 * (tenant names are printable, without newlines). */
static const char *label_value(char *buf, size_t len, const char *v)
{
	size_t n = 0;

	for (; *v && n + 2 < len; v++) {
		if (*v == '\\' || *v == '"')
			buf[n++] = '\\';
		buf[n++] = *v;
	}
	buf[n] = 0;
	return buf;
}

/* Per tenant holding anything now: what it holds (its quotas are in
 * djinnctl tenant). */
static void render_tenants(struct sbuf *b, struct server *srv)
{
	static const struct {
		const char *name, *help;
		size_t off;
	} counts[] = {
		{ "djinn_tenant_connections", "Client connections open now.",
		  offsetof(struct tenant_state, conns) },
		{ "djinn_tenant_sessions", "Sessions open now.",
		  offsetof(struct tenant_state, sessions) },
		{ "djinn_tenant_inflight",
		  "Graphs and model steps queued or running now.",
		  offsetof(struct tenant_state, inflight) },
		{ "djinn_tenant_reads_waiting",
		  "TENSOR_READs of a GPU waiting for its staging "
		  "(memory.read_staging).",
		  offsetof(struct tenant_state, reads_waiting) },
	};
	struct tenant_state *t;
	char lv[2 * DJINN_TENANT_LEN];

	for (size_t i = 0; i < ARRAY_SIZE(counts); i++) {
		family(b, counts[i].name, "gauge", counts[i].help);
		list_for_each_entry(t, &srv->sessions.tenants, node)
			sb_printf(b, "%s{tenant=\"%s\"} %u\n", counts[i].name,
				  label_value(lv, sizeof(lv), t->name),
				  *(const unsigned int *)((const char *)t +
							  counts[i].off));
	}
	family(b, "djinn_tenant_read_staging_bytes", "gauge",
	       "Pinned host memory its TENSOR_READs of a GPU hold, against "
	       "memory.read_staging.");
	list_for_each_entry(t, &srv->sessions.tenants, node)
		sb_printf(b,
			  "djinn_tenant_read_staging_bytes{tenant=\"%s\"} "
			  "%llu\n",
			  label_value(lv, sizeof(lv), t->name),
			  (unsigned long long)t->read_staged);
	family(b, "djinn_tenant_data_bytes", "gauge",
	       "Data its sessions hold on the device, resident or swapped "
	       "(granule-rounded), against [tenant.NAME] memory.");
	list_for_each_entry(t, &srv->sessions.tenants, node)
		for (unsigned int d = 0; d < srv->nr_dev; d++) {
			struct vmu_usage u;

			if (vmu_tenant_usage(srv->dev[d].vmu, t->name, &u))
				continue;
			sb_printf(b,
				  "djinn_tenant_data_bytes{device=\"%s\","
				  "tenant=\"%s\"} %llu\n",
				  srv->dev[d].name,
				  label_value(lv, sizeof(lv), t->name),
				  (unsigned long long)u.data_bytes);
		}
}

long metrics_render(struct server *srv, char **out)
{
	struct sbuf b = { .cap = 16384 };

	b.p = malloc(b.cap);
	if (!b.p)
		return -ENOMEM;
	one(&b, "djinn_uptime_seconds", "gauge",
	    "Seconds since djinnd started.",
	    (loop_now() - srv->started_ns) / NSEC_PER_SEC);
	render_sessions(&b, srv);
	render_requests(&b, srv);
	render_vmu(&b, srv);
	render_sched(&b, srv);
	render_tenants(&b, srv);
	if (b.oom) {
		free(b.p);
		return -ENOMEM;
	}
	*out = b.p;
	return (long)b.len;
}

/* ---------------------------------------------------------------------- */
/* HTTP */

static void http_put(struct http_conn *h)
{
	if (--h->pending)
		return;
	list_del_init(&h->node);
	close(h->fd);
	free(h->out);
	h->srv->nr_http--;
	free(h);
}

static void http_close(struct http_conn *h)
{
	if (h->closing)
		return;
	h->closing = true;
	shutdown(h->fd, SHUT_RDWR); /* ends what is in flight */
	http_put(h); /* the connection's own reference */
}

/* Without an SQE (loop_sqe() logged why) the scrape fails: closed, as on
 * running out of memory. Every caller holds a reference or returns at
 * once, so closing frees nothing under it. */
static void http_send(struct http_conn *h)
{
	struct io_uring_sqe *sqe = loop_sqe(&h->srv->loop, &h->src, TAG_SEND);

	if (!sqe) {
		http_close(h);
		return;
	}
	io_uring_prep_send(sqe, h->fd, h->out + h->out_sent,
			   h->out_len - h->out_sent, MSG_NOSIGNAL);
	h->pending++;
}

static void http_respond(struct http_conn *h, int code, const char *reason,
			 const char *type, const char *body, long len,
			 bool head_only, const char *extra)
{
	struct sbuf b = { .cap = 256 + (size_t)len };

	b.p = malloc(b.cap);
	if (!b.p) {
		http_close(h);
		return;
	}
	sb_printf(&b,
		  "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
		  "Content-Length: %ld\r\n%sConnection: close\r\n\r\n",
		  code, reason, type, len, extra ? extra : "");
	if (!head_only && len) {
		if (b.len + (size_t)len > b.cap) {
			char *p = realloc(b.p, b.len + (size_t)len);

			if (!p)
				b.oom = true;
			else
				b.p = p;
		}
		if (!b.oom) {
			memcpy(b.p + b.len, body, (size_t)len);
			b.len += (size_t)len;
		}
	}
	if (b.oom) {
		free(b.p);
		http_close(h);
		return;
	}
	h->out = b.p;
	h->out_len = b.len;
	http_send(h);
}

static void http_error(struct http_conn *h, int code, const char *reason,
		       const char *extra)
{
	char body[64];
	int n = snprintf(body, sizeof(body), "%d %s\n", code, reason);

	h->srv->st.metrics_bad++;
	http_respond(h, code, reason, "text/plain; charset=utf-8", body, n,
		     false, extra);
}

/* A whole request head is in h->head: answer it. */
static void http_request(struct http_conn *h)
{
	char *line_end = strstr(h->head, "\r\n"), *sp1, *sp2, *q;
	const char *method, *path, *version;
	bool head_only;

	*line_end = 0;
	sp1 = strchr(h->head, ' ');
	sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	if (!sp1 || !sp2 || strchr(sp2 + 1, ' ')) {
		http_error(h, 400, "Bad Request", NULL);
		return;
	}
	*sp1 = *sp2 = 0;
	method = h->head;
	path = sp1 + 1;
	version = sp2 + 1;
	if (strcmp(version, "HTTP/1.1") && strcmp(version, "HTTP/1.0")) {
		http_error(h, 400, "Bad Request", NULL);
		return;
	}
	q = strchr(sp1 + 1, '?'); /* a query string is ignored */
	if (q)
		*q = 0;
	if (strcmp(path, "/metrics") && strcmp(path, "/healthz") &&
	    strcmp(path, "/readyz")) {
		http_error(h, 404, "Not Found", NULL);
		return;
	}
	head_only = !strcmp(method, "HEAD");
	if (strcmp(method, "GET") && !head_only) {
		http_error(h, 405, "Method Not Allowed",
			   "Allow: GET, HEAD\r\n");
		return;
	}
	h->srv->st.metrics_scrapes++;
	if (!strcmp(path, "/healthz")) {
		http_respond(h, 200, "OK", "text/plain; charset=utf-8", "ok\n",
			     3, head_only, NULL);
	} else if (!strcmp(path, "/readyz")) {
		char why[256], body[264];
		bool ready = msg_ready(h->srv, why, sizeof(why));
		int n = snprintf(body, sizeof(body), "%s\n",
				 ready ? "ready" : why);

		http_respond(h, ready ? 200 : 503,
			     ready ? "OK" : "Service Unavailable",
			     "text/plain; charset=utf-8", body,
			     n < (int)sizeof(body) ? n : (int)sizeof(body) - 1,
			     head_only, NULL);
	} else {
		char *text;
		long len = metrics_render(h->srv, &text);

		if (len < 0) {
			http_error(h, 500, "Internal Server Error", NULL);
			return;
		}
		http_respond(h, 200, "OK", "text/plain; version=0.0.4", text,
			     len, head_only, NULL);
		free(text);
	}
}

static void http_recv(struct http_conn *h)
{
	struct io_uring_sqe *recv, *timeout;

	/* The pair goes in one submission, or the link breaks between. */
	if (io_uring_sq_space_left(&h->srv->loop.ring) < 2)
		io_uring_submit(&h->srv->loop.ring);
	recv = loop_sqe(&h->srv->loop, &h->src, TAG_RECV);
	if (!recv)
		goto fail;
	/* Leave room for the NUL the parser puts after the head. */
	io_uring_prep_recv(recv, h->fd, h->head + h->got,
			   sizeof(h->head) - 1 - h->got, 0);
	recv->flags |= IOSQE_IO_LINK;
	timeout = loop_sqe(&h->srv->loop, &h->src, TAG_TIMEOUT);
	if (!timeout) {
		/* Still unsubmitted: a no-op for nobody, linked to nothing
		 * (prep clears the link flag). */
		io_uring_prep_nop(recv);
		io_uring_sqe_set_data64(recv, 0);
		goto fail;
	}
	io_uring_prep_link_timeout(timeout, &h->ts, IORING_TIMEOUT_ABS);
	h->pending += 2;
	return;

fail:
	http_close(h); /* as http_send() */
}

static void http_received(struct http_conn *h, int res)
{
	if (res <= 0 || h->closing) {
		/* EOF, an error, or the timeout: nothing to answer. */
		http_close(h);
		return;
	}
	h->got += (size_t)res;
	h->head[h->got] = 0;
	if (memchr(h->head, 0, h->got)) {
		http_error(h, 400, "Bad Request", NULL);
		return;
	}
	if (strstr(h->head, "\r\n\r\n")) {
		http_request(h);
		return;
	}
	if (h->got == sizeof(h->head) - 1) {
		http_error(h, 400, "Bad Request", NULL); /* head too long */
		return;
	}
	http_recv(h);
}

static void http_complete(struct io_src *src, struct io_uring_cqe *cqe,
			  unsigned int tag)
{
	struct http_conn *h = container_of(src, struct http_conn, src);

	switch (tag) {
	case TAG_RECV:
		http_received(h, cqe->res);
		break;
	case TAG_SEND:
		if (cqe->res > 0 && !h->closing) {
			h->out_sent += (size_t)cqe->res;
			if (h->out_sent < h->out_len) {
				http_send(h);
				break;
			}
		}
		http_close(h); /* answered, or the peer is gone */
		break;
	case TAG_TIMEOUT:
		break;
	}
	http_put(h);
}

void metrics_accept(struct server *srv, int fd)
{
	struct http_conn *h;
	uint64_t end;

	if (srv->nr_http >= HTTP_MAX_CONNS || srv->draining ||
	    !(h = calloc(1, sizeof(*h)))) {
		close(fd);
		return;
	}
	h->src.complete = http_complete;
	h->srv = srv;
	h->fd = fd;
	h->pending = 1; /* the connection's own */
	/* One deadline for the whole head, not one per receive. */
	end = loop_now() + HTTP_TIMEOUT_S * NSEC_PER_SEC;
	h->ts.tv_sec = (long long)(end / NSEC_PER_SEC);
	h->ts.tv_nsec = (long long)(end % NSEC_PER_SEC);
	list_add_tail(&h->node, &srv->http);
	srv->nr_http++;
	http_recv(h);
}

void metrics_close_all(struct server *srv)
{
	struct http_conn *h, *n;

	list_for_each_entry_safe(h, n, &srv->http, node)
		http_close(h);
}
