// SPDX-License-Identifier: MIT
/*
 * djinnctl vmu, stats and debug fault: each device's memory, the
 * daemon's counters, a fault injected into the device.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <djinn/proto.h>

#include "array_size.h"
#include "djinnctl.h"
#include "json_print.h"

static const char *const pressure_names[] = { "normal", "warning", "critical" };

static const char *const seg_names[] = { "text", "data", "stack" };

/* ---------------------------------------------------------------------- */
/* vmu */

/* ADMIN_VMU: one struct per device, in index order. *@vs (malloc()ed,
 * the caller frees) and *@nr; or exit status 1. */
static int get_vmu(struct ctl *ctl, struct djinn_admin_vmu **vs, uint32_t *nr)
{
	const size_t sz = sizeof(**vs);
	uint64_t len;
	void *buf;
	int ret;

	ret = admin_call(ctl, DJINN_MSG_ADMIN_VMU, NULL, 0, sz,
			 sz * MAX_DEVICES, &buf, &len);
	if (ret)
		return ret;
	if (len % sz) {
		free(buf);
		return fail(ctl, EPROTO,
			    "a vmu answer of %" PRIu64 " bytes, not a multiple "
			    "of %zu",
			    len, sz);
	}
	*vs = buf;
	*nr = (uint32_t)(len / sz);
	for (uint32_t i = 0; i < *nr; i++) {
		if ((*vs)[i].__reserved) {
			free(buf);
			return fail(ctl, EPROTO,
				    "reserved field set in the answer");
		}
	}
	return 0;
}

static void print_vmu(const struct djinn_admin_vmu *v, uint32_t index,
		      bool several)
{
	char str[24];

	open_json_object(NULL);
	if (several) {
		print_u64(PRINT_ANY, "index", "index:       %" PRIu64 "\n",
			  index);
	}
	print_string(PRINT_ANY, "device", "device:      %s\n",
		     wire_str(str, sizeof(str), v->device, sizeof(v->device)));
	print_size(PRINT_ANY, "capacity", "capacity:    %s", v->capacity);
	print_size(PRINT_ANY, "granularity", " (granule %s)\n", v->granularity);
	print_size(PRINT_ANY, "committed", "committed:   %s\n", v->committed);
	print_size(PRINT_ANY, "reserved", "reserved:    %s\n", v->reserved);
	print_size(PRINT_ANY, "free", "free:        %s\n", v->free);
	print_string(PRINT_ANY, "pressure", "pressure:    %s\n",
		     enum_name(str, sizeof(str), pressure_names,
			       ARRAY_SIZE(pressure_names), v->pressure));

	print_text("%-12s %8s %8s %8s\n", "segment", "used", "peak", "entries");
	open_json_object("segments");
	for (int i = 0; i < 3; i++) {
		open_json_object(seg_names[i]);
		print_string(PRINT_FP, NULL, "%-12s", seg_names[i]);
		print_size(PRINT_ANY, "used", " %8s", v->seg[i].used);
		print_size(PRINT_ANY, "peak", " %8s", v->seg[i].peak);
		print_u64(PRINT_ANY, "entries", " %8" PRIu64 "\n",
			  v->seg[i].entries);
		close_json_object();
	}
	close_json_object();

	print_size(PRINT_ANY, "text_cached", "text cache:  %s cached",
		   v->text_cached);
	print_u64(PRINT_ANY, "text_evictions", ", %" PRIu64 " evictions\n",
		  v->text_evictions);
	print_u64(PRINT_ANY, "swap_outs", "swap:        %" PRIu64 " out",
		  v->swap_outs);
	print_size(PRINT_ANY, "swapped_out_bytes", " (%s)",
		   v->swapped_out_bytes);
	print_u64(PRINT_ANY, "swap_ins", ", %" PRIu64 " in", v->swap_ins);
	print_size(PRINT_ANY, "swapped_in_bytes", " (%s)", v->swapped_in_bytes);
	print_size(PRINT_ANY, "swapped_now", ", %s swapped now\n",
		   v->swapped_now);
	print_u64(PRINT_ANY, "admits", "admission:   %" PRIu64 " admitted",
		  v->admits);
	print_u64(PRINT_ANY, "admit_refusals", ", %" PRIu64 " refused",
		  v->admit_refusals);
	print_u64(PRINT_ANY, "quota_refusals", ", %" PRIu64 " over quota\n",
		  v->quota_refusals);
	close_json_object();
}

/* One device: its block (a JSON object), as always; several: a block
 * each, with its index, a blank line between (a JSON array). */
int do_vmu(struct ctl *ctl, char **args)
{
	struct djinn_admin_vmu *vs;
	uint32_t nr;
	int ret;

	ret = get_vmu(ctl, &vs, &nr);
	if (ret)
		return ret;
	if (nr == 1) {
		print_vmu(&vs[0], 0, false);
	} else {
		open_json_array(NULL);
		for (uint32_t i = 0; i < nr; i++) {
			if (i)
				print_text("\n");
			print_vmu(&vs[i], i, true);
		}
		close_json_array();
	}
	free(vs);
	return 0;
}

/* ---------------------------------------------------------------------- */
/* stats */

int do_stats(struct ctl *ctl, char **args)
{
	struct djinn_admin_stats s;
	uint64_t len;
	void *buf;
	int ret;

	struct djinn_admin_vmu *vs;
	uint32_t nr;

	ret = admin_call(ctl, DJINN_MSG_ADMIN_STATS, NULL, 0, sizeof(s),
			 sizeof(s), &buf, &len);
	if (ret)
		return ret;
	memcpy(&s, buf, sizeof(s));
	free(buf);
	ret = get_vmu(ctl, &vs, &nr);
	if (ret)
		return ret;

	open_json_object(NULL);
	print_duration(PRINT_ANY, "uptime_ns", "uptime:      %s\n",
		       s.uptime_ns);
	print_u64(PRINT_ANY, "conns", "connections: %" PRIu64 " open", s.conns);
	print_u64(PRINT_ANY, "conns_accepted", ", %" PRIu64 " accepted\n",
		  s.conns_accepted);
	print_u64(PRINT_ANY, "sessions", "sessions:    %" PRIu64 " live",
		  s.sessions);
	print_u64(PRINT_ANY, "sessions_opened", ", %" PRIu64 " opened",
		  s.sessions_opened);
	print_u64(PRINT_ANY, "sessions_closed", ", %" PRIu64 " closed",
		  s.sessions_closed);
	print_u64(PRINT_ANY, "sessions_expired", ", %" PRIu64 " expired",
		  s.sessions_expired);
	print_u64(PRINT_ANY, "sessions_killed", ", %" PRIu64 " killed\n",
		  s.sessions_killed);
	print_u64(PRINT_ANY, "requests", "requests:    %" PRIu64, s.requests);
	print_u64(PRINT_ANY, "errors", ", %" PRIu64 " errors\n", s.errors);
	print_u64(PRINT_ANY, "text_lookups", "text:        %" PRIu64 " lookups",
		  s.text_lookups);
	print_u64(PRINT_ANY, "text_misses", ", %" PRIu64 " misses\n",
		  s.text_misses);
	print_size(PRINT_ANY, "bytes_in", "bytes:       %s in", s.bytes_in);
	print_size(PRINT_ANY, "bytes_out", ", %s out\n", s.bytes_out);
	print_u64(PRINT_ANY, "graphs_run", "graphs:      %" PRIu64 " run",
		  s.graphs_run);
	print_u64(PRINT_ANY, "graphs_failed", ", %" PRIu64 " failed\n",
		  s.graphs_failed);
	print_u64(PRINT_ANY, "queue_depth", "queue depth: %" PRIu64 "\n",
		  s.queue_depth);
	/* Each device's memory: total, free, and each segment's use. */
	open_json_array("devices");
	for (uint32_t i = 0; i < nr; i++) {
		char str[24], label[24];

		open_json_object(NULL);
		snprintf(label, sizeof(label), "device %u:", i);
		print_text("%-12s ", label);
		print_u64(PRINT_JSON, "index", NULL, i);
		print_string(PRINT_ANY, "device", "%s",
			     wire_str(str, sizeof(str), vs[i].device,
				      sizeof(vs[i].device)));
		print_size(PRINT_ANY, "capacity", ", %s", vs[i].capacity);
		print_size(PRINT_ANY, "free", ", %s free", vs[i].free);
		open_json_object("segments");
		for (int k = 0; k < 3; k++) {
			char fmt[32];

			open_json_object(seg_names[k]);
			snprintf(fmt, sizeof(fmt), "%s %s %%s", k ? "," : ";",
				 seg_names[k]);
			print_size(PRINT_ANY, "used", fmt, vs[i].seg[k].used);
			close_json_object();
		}
		close_json_object();
		print_text("\n");
		close_json_object();
	}
	close_json_array();
	close_json_object();
	free(vs);
	return 0;
}

/* ---------------------------------------------------------------------- */
/* debug */

/* fault: make the device fault (djinnd --fault-injection only) */
int do_debug_fault(struct ctl *ctl, char **args)
{
	struct djinn_admin_fault f;
	uint64_t len;
	void *buf;
	int ret;

	ret = admin_call(ctl, DJINN_MSG_ADMIN_FAULT_INJECT, NULL, 0, sizeof(f),
			 sizeof(f), &buf, &len);
	if (ret)
		return ret;
	memcpy(&f, buf, sizeof(f));
	free(buf);
	f.device[sizeof(f.device) - 1] = 0;
	f.what[sizeof(f.what) - 1] = 0;

	open_json_object(NULL);
	print_string(PRINT_ANY, "device", "%s: ", f.device);
	print_u64(PRINT_ANY, "faults",
		  "fault %" PRIu64 " injected: ", f.faults);
	print_string(PRINT_ANY, "fault", "%s\n", f.what);
	close_json_object();
	return 0;
}

int do_restart(struct ctl *ctl, char **args)
{
	struct djinn_admin_restart r;
	uint64_t len;
	void *buf;
	int ret;

	ret = admin_call(ctl, DJINN_MSG_ADMIN_RESTART, NULL, 0, sizeof(r),
			 sizeof(r), &buf, &len);
	if (ret)
		return ret;
	memcpy(&r, buf, sizeof(r));
	free(buf);
	open_json_object(NULL);
	print_u64(PRINT_ANY, "pid", "restarting: pid %" PRIu64 " takes over\n",
		  r.pid);
	close_json_object();
	return 0;
}

/* djinnctl health: ADMIN_HEALTH and each device's memory, for a probe or
 * a device plugin; exit 0 when djinnd takes new work, 1 when it does not
 * (or cannot be asked: admin_call() has said why). */
int do_health(struct ctl *ctl, char **args)
{
	struct djinn_admin_health h;
	struct djinn_admin_vmu *vs;
	char reason[sizeof(h.reason)], str[16];
	uint64_t len;
	uint32_t nr;
	void *buf;
	int ret;

	ret = admin_call(ctl, DJINN_MSG_ADMIN_HEALTH, NULL, 0, sizeof(h),
			 sizeof(h), &buf, &len);
	if (ret)
		return ret;
	memcpy(&h, buf, sizeof(h));
	free(buf);
	ret = get_vmu(ctl, &vs, &nr);
	if (ret)
		return ret;
	wire_str(reason, sizeof(reason), h.reason, sizeof(h.reason));
	open_json_object(NULL);
	print_bool(PRINT_ANY, "ready", "ready:        %s", h.ready);
	print_string(PRINT_ANY, "reason", h.ready ? "\n" : " (%s)\n", reason);
	print_u64(PRINT_ANY, "sessions", "sessions:     %" PRIu64, h.sessions);
	print_u64(PRINT_ANY, "max_sessions", " of %" PRIu64 "\n",
		  h.max_sessions);
	open_json_array("devices");
	for (uint32_t i = 0; i < nr; i++) {
		char name[sizeof(vs[i].device)];

		wire_str(name, sizeof(name), vs[i].device,
			 sizeof(vs[i].device));
		open_json_object(NULL);
		print_string(PRINT_ANY, "name", "%-13s ", name);
		print_size(PRINT_ANY, "capacity", "%s", vs[i].capacity);
		print_size(PRINT_ANY, "free", ", %s free", vs[i].free);
		print_string(PRINT_ANY, "pressure", ", pressure %s\n",
			     enum_name(str, sizeof(str), pressure_names,
				       ARRAY_SIZE(pressure_names),
				       vs[i].pressure));
		close_json_object();
	}
	close_json_array();
	close_json_object();
	free(vs);
	return h.ready ? 0 : 1;
}
