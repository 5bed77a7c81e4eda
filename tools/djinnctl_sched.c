// SPDX-License-Identifier: MIT
/*
 * djinnctl sched: the scheduler's state, each device's queues and
 * swaps and each session's share (ADMIN_SCHED).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <djinn/proto.h>

#include "array_size.h"
#include "clock.h"
#include "djinnctl.h"
#include "json_print.h"

static const char *const policy_names[] = {
	[DJINN_SCHED_SEMANTIC] = "semantic",
	[DJINN_SCHED_LRU] = "lru",
	[DJINN_SCHED_STATIC] = "static",
};

/* struct djinn_admin_sched_session.flags, bit by bit */
static const char *const sched_flag_names[] = {
	"swapped_by_signal", /* DJINN_SCHED_SWAPPED_BY_SIGNAL */
	"overran", /* DJINN_SCHED_OVERRAN */
	"prefetching", /* DJINN_SCHED_PREFETCHING */
};
#define NR_SCHED_FLAGS (ARRAY_SIZE(sched_flag_names))
static_assert(DJINN_SCHED_SWAPPED_BY_SIGNAL == 1u << 0 &&
		      DJINN_SCHED_OVERRAN == 1u << 1 &&
		      DJINN_SCHED_PREFETCHING == 1u << 2,
	      "sched_flag_names follows the bits");

/* An ADMIN_SCHED answer: @buf (malloc()ed) holds both counts, then the
 * devices and the sessions that @devs and @sess point to. */
struct sched_answer {
	void *buf;
	const struct djinn_admin_sched_dev *devs;
	const struct djinn_admin_sched_session *sess;
	uint32_t nr_devs;
	uint32_t nr_sess;
};

/* ADMIN_SCHED, its length checked exactly against its counts, its
 * fields as far as djinnctl relies on them; or exit status 1. */
static int get_sched(struct ctl *ctl, struct sched_answer *a)
{
	const size_t dsz = sizeof(*a->devs), ssz = sizeof(*a->sess);
	uint32_t head[2];
	uint64_t len, want;
	uint8_t *p;
	void *buf;
	int ret;

	ret = admin_call(ctl, DJINN_MSG_ADMIN_SCHED, NULL, 0, sizeof(head),
			 MAX_ANSWER, &buf, &len);
	if (ret)
		return ret;
	memcpy(head, buf, sizeof(head));
	/* Two __u32 counts of structs under 256 bytes: no overflow. */
	want = sizeof(head) + (uint64_t)head[0] * dsz + (uint64_t)head[1] * ssz;
	if (!head[0] || head[0] > MAX_DEVICES) {
		ret = fail(ctl, EPROTO, "a sched answer for %u devices",
			   head[0]);
		goto out_free;
	}
	if (len != want) {
		ret = fail(ctl, EPROTO,
			   "a sched answer of %" PRIu64 " bytes for %u devices "
			   "and %u sessions, expected %" PRIu64,
			   len, head[0], head[1], want);
		goto out_free;
	}
	p = (uint8_t *)buf + sizeof(head);
	a->buf = buf;
	a->devs = (const void *)p;
	a->sess = (const void *)(p + head[0] * dsz);
	a->nr_devs = head[0];
	a->nr_sess = head[1];
	for (uint32_t i = 0; i < a->nr_devs; i++) {
		if (a->devs[i].__reserved) {
			ret = fail(ctl, EPROTO,
				   "reserved field set in the answer");
			goto out_free;
		}
	}
	for (uint32_t i = 0; i < a->nr_sess; i++) {
		if (a->sess[i].device >= a->nr_devs) {
			ret = fail(ctl, EPROTO,
				   "session %" PRIu64 " on device %u of %u",
				   (uint64_t)a->sess[i].id, a->sess[i].device,
				   a->nr_devs);
			goto out_free;
		}
	}
	return 0;

out_free:
	free(buf);
	return ret;
}

/* A short duration for a table column: "850ns", "12.5us", "350ms",
 * "1.20s"; a minute or more as human_duration(); 0 as "-". */
static const char *short_ns(char *buf, uint64_t ns)
{
	static const char *const units[] = { "ns", "us", "ms", "s" };
	double v = (double)ns;
	int u = 0, prec;

	if (!ns)
		return "-";
	if (ns >= 60 * NSEC_PER_SEC)
		return human_duration(buf, ns);
	while (v >= 999.5 && u < 3) { /* 999.7us is 1.00ms */
		v /= 1000;
		u++;
	}
	/* three significant digits, but whole nanoseconds */
	prec = !u ? 0 : v < 10 ? 2 : v < 100 ? 1 : 0;
	snprintf(buf, HUMAN_LEN, "%.*f%s", prec, v, units[u]);
	return buf;
}

/* Bytes per second as "812.4 MB/s" (decimal megabytes); 0 as "-". */
static const char *mb_per_s(char *buf, uint64_t bps)
{
	if (!bps)
		return "-";
	snprintf(buf, HUMAN_LEN, "%.1f MB/s", (double)bps / 1e6);
	return buf;
}

static void print_sched_dev(const struct djinn_admin_sched_dev *d,
			    uint32_t index)
{
	char str[HUMAN_LEN], label[24];
	uint64_t tries = d->prefetch_hits + d->prefetch_misses;

	open_json_object(NULL);
	snprintf(label, sizeof(label), "device %u:", index);
	print_text("%-14s ", label);
	print_string(PRINT_ANY, "device", "%s\n",
		     wire_str(str, sizeof(str), d->device, sizeof(d->device)));
	print_string(PRINT_ANY, "policy", "policy:        %s\n",
		     enum_name(str, sizeof(str), policy_names,
			       ARRAY_SIZE(policy_names), d->policy));
	print_u64(PRINT_ANY, "busy", "busy:          %" PRIu64 " sessions\n",
		  d->busy);
	open_json_object("queued");
	print_u64(PRINT_ANY, "compute", "queued:        %" PRIu64 " compute",
		  d->queued[0]);
	print_u64(PRINT_ANY, "mem", ", %" PRIu64 " mem\n", d->queued[1]);
	close_json_object();
	open_json_object("running");
	print_u64(PRINT_ANY, "compute", "running:       %" PRIu64 " compute",
		  d->running[0]);
	print_u64(PRINT_ANY, "mem", ", %" PRIu64 " mem\n", d->running[1]);
	close_json_object();
	print_u64(PRINT_ANY, "admit_waiting", "admit waiting: %" PRIu64 "\n",
		  d->admit_waiting);
	/* Bytes per second in JSON, MB/s in text. */
	print_u64(PRINT_JSON, "swap_out_bps", NULL, d->swap_out_bps);
	print_string(PRINT_FP, NULL, "swap rate:     %s out",
		     mb_per_s(str, d->swap_out_bps));
	print_u64(PRINT_JSON, "swap_in_bps", NULL, d->swap_in_bps);
	print_string(PRINT_FP, NULL, ", %s in\n",
		     mb_per_s(str, d->swap_in_bps));
	print_u64(PRINT_ANY, "swaps_signal",
		  "swaps:         %" PRIu64 " by signal", d->swaps_signal);
	print_u64(PRINT_ANY, "swaps_pressure", ", %" PRIu64 " by pressure\n",
		  d->swaps_pressure);
	print_size(PRINT_ANY, "swap_bytes_out", "swapped:       %s out",
		   d->swap_bytes_out);
	print_size(PRINT_ANY, "swap_bytes_in", ", %s in\n", d->swap_bytes_in);
	print_u64(PRINT_ANY, "prefetches", "prefetches:    %" PRIu64 " started",
		  d->prefetches);
	print_u64(PRINT_ANY, "prefetch_hits", ", %" PRIu64 " hit",
		  d->prefetch_hits);
	print_u64(PRINT_ANY, "prefetch_misses", ", %" PRIu64 " missed",
		  d->prefetch_misses);
	if (tries)
		print_text(", %.1f%% hit rate\n",
			   100.0 * (double)d->prefetch_hits / (double)tries);
	else
		print_text(", hit rate -\n");
	print_u64(PRINT_ANY, "admit_waits", "admission:     %" PRIu64 " waited",
		  d->admit_waits);
	print_u64(PRINT_ANY, "admit_timeouts", ", %" PRIu64 " timed out\n",
		  d->admit_timeouts);
	print_u64(PRINT_ANY, "passes", "passes:        %" PRIu64, d->passes);
	print_u64(PRINT_ANY, "pass_jobs", ", %" PRIu64 " steps", d->pass_jobs);
	print_u64(PRINT_ANY, "pass_rows", ", %" PRIu64 " rows", d->pass_rows);
	if (d->passes)
		print_text(", %.1f steps a pass\n",
			   (double)d->pass_jobs / (double)d->passes);
	else
		print_text(", steps a pass -\n");
	open_json_array("pass_hist");
	for (unsigned int i = 0; i < ARRAY_SIZE(d->pass_hist); i++)
		print_u64(PRINT_JSON, NULL, NULL, d->pass_hist[i]);
	close_json_array();
	print_text("pass steps:   ");
	for (unsigned int i = 0; i < ARRAY_SIZE(d->pass_hist); i++)
		print_text(" %s%u:%llu",
			   i + 1 < ARRAY_SIZE(d->pass_hist) ? "<=" : ">",
			   i + 1 < ARRAY_SIZE(d->pass_hist) ? 1u << i :
							      1u << (i - 1),
			   (unsigned long long)d->pass_hist[i]);
	print_text("\n");
	print_u64(PRINT_ANY, "joins", "joined:        %" PRIu64 " steps",
		  d->joins);
	print_u64(PRINT_JSON, "join_ns", NULL, d->join_ns);
	print_u64(PRINT_JSON, "join_p99_ns", NULL, d->join_p99_ns);
	if (d->joins)
		print_text(", waited %.3f ms mean, p99 under %.3f ms\n",
			   (double)d->join_ns / (double)d->joins / 1e6,
			   (double)d->join_p99_ns / 1e6);
	else
		print_text("\n");
	close_json_object();
}

/* "swapped_by_signal,overran"; bits djinnctl does not know as "0x8";
 * "-" for none. */
static const char *sched_flags(char *buf, size_t size, uint32_t flags)
{
	const size_t nr = NR_SCHED_FLAGS;
	size_t n = 0;

	buf[0] = 0;
	for (size_t i = 0; i < nr; i++)
		if (flags & 1u << i)
			n += (size_t)snprintf(buf + n, size - n, "%s%s",
					      n ? "," : "",
					      sched_flag_names[i]);
	flags &= ~((1u << nr) - 1);
	if (flags)
		snprintf(buf + n, size - n, "%s%#x", n ? "," : "", flags);
	return buf[0] ? buf : "-";
}

static void print_sched_session(const struct djinn_admin_sched_session *e,
				int id_width, int tenant_width)
{
	const size_t nr = NR_SCHED_FLAGS;
	char fmt[32], str[DJINN_TENANT_LEN], buf[HUMAN_LEN];
	char flags[128];

	open_json_object(NULL);
	snprintf(fmt, sizeof(fmt), "%%-%d" PRIu64, id_width);
	print_u64(PRINT_ANY, "id", fmt, e->id);
	snprintf(fmt, sizeof(fmt), " %%-%ds", tenant_width);
	print_string(PRINT_ANY, "tenant", fmt,
		     wire_str(str, sizeof(str), e->tenant, sizeof(e->tenant)));
	print_u64(PRINT_ANY, "device", " %3" PRIu64, e->device);
	print_u64(PRINT_ANY, "priority", " %4" PRIu64, e->priority);
	print_string(PRINT_ANY, "phase", " %-8s",
		     enum_name(str, sizeof(str), phase_names,
			       ARRAY_SIZE(phase_names), e->phase));
	/* The flags are the table's last column, a list in JSON. */
	open_json_array("flags");
	for (size_t i = 0; i < nr; i++)
		if (e->flags & 1u << i)
			print_string(PRINT_JSON, NULL, NULL,
				     sched_flag_names[i]);
	if (e->flags >> nr) {
		snprintf(buf, sizeof(buf), "%#x", e->flags >> nr << nr);
		print_string(PRINT_JSON, NULL, NULL, buf);
	}
	close_json_array();
	print_u64(PRINT_JSON, "phase_left_ns", NULL, e->phase_left_ns);
	print_string(PRINT_FP, NULL, " %6s", short_ns(buf, e->phase_left_ns));
	print_size(PRINT_ANY, "resident", " %8s", e->resident);
	print_size(PRINT_ANY, "swapped", " %8s", e->swapped);
	print_u64(PRINT_ANY, "queued", " %6" PRIu64, e->queued);
	print_u64(PRINT_ANY, "inflight", " %8" PRIu64, e->inflight);
	print_u64(PRINT_ANY, "weight", " %6" PRIu64, e->weight);
	print_u64(PRINT_ANY, "ahead_max", " %5" PRIu64, e->ahead_max);
	print_s64(PRINT_JSON, "deficit_ns", NULL, e->deficit_ns);
	print_u64(PRINT_JSON, "cost_ns", NULL, e->cost_ns);
	print_u64(PRINT_JSON, "jobs", NULL, e->jobs);
	print_u64(PRINT_JSON, "wait_p99_ns", NULL, e->wait_p99_ns);
	print_string(PRINT_FP, NULL, " %8s", short_ns(buf, e->wait_p99_ns));
	print_string(PRINT_FP, NULL, " %s\n",
		     sched_flags(flags, sizeof(flags), e->flags));
	close_json_object();
}

/* A block per device, a blank line, a table of the sessions; in JSON
 * {"devices": [...], "sessions": [...]}. */
int do_sched(struct ctl *ctl, char **args)
{
	int id_width = 2, tenant_width = 6;
	struct sched_answer a = { 0 };
	int ret;

	ret = get_sched(ctl, &a);
	if (ret)
		return ret;
	/* ID, TENANT and LABEL are as wide as their widest value. */
	for (uint32_t i = 0; i < a.nr_sess; i++) {
		char str[DJINN_TENANT_LEN];
		int n = snprintf(str, sizeof(str), "%" PRIu64,
				 (uint64_t)a.sess[i].id);

		if (n > id_width)
			id_width = n;
		n = (int)strlen(wire_str(str, sizeof(str), a.sess[i].tenant,
					 sizeof(a.sess[i].tenant)));
		if (n > tenant_width)
			tenant_width = n;
	}

	open_json_object(NULL);
	open_json_array("devices");
	for (uint32_t i = 0; i < a.nr_devs; i++) {
		print_sched_dev(&a.devs[i], i);
		print_text("\n");
	}
	close_json_array();
	print_text(
		"%-*s %-*s %3s %4s %-8s %6s %8s %8s %6s %8s %6s %5s %8s %s\n",
		id_width, "ID", tenant_width, "TENANT", "DEV", "PRIO", "PHASE",
		"LEFT", "RESIDENT", "SWAPPED", "QUEUED", "INFLIGHT", "WEIGHT",
		"AHEAD", "P99 WAIT", "FLAGS");
	open_json_array("sessions");
	for (uint32_t i = 0; i < a.nr_sess; i++)
		print_sched_session(&a.sess[i], id_width, tenant_width);
	close_json_array();
	close_json_object();
	free(a.buf);
	return 0;
}
