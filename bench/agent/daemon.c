// SPDX-License-Identifier: MIT
/*
 * agent-bench's children (bench/agent/agent.h): the model writer, djinnd
 * on sockets in a temporary directory, and djinnctl, whose JSON gives
 * the daemon's counters.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <djinn/djinn.h>
#include <jansson.h>

#include "../bench.h"
#include "../djinnd.h"
#include "agent.h"

void ensure_model(void)
{
	char path[PATH_MAX];

	ensure_mkmodel(model_dir, model.name, opt.mkmodel, model.mkmodel);
	if (!realpath(model_dir, path) || strlen(path) >= sizeof(model_dir))
		fail("%s: %s", model_dir, strerror(errno));
	strcpy(model_dir, path);
}

void daemon_start(const char *policy, uint64_t mem)
{
	char memarg[32], lease[16], threads[16], swap[48], pin[128];
	const char *argv[48];
	unsigned int a = 0;

	snprintf(memarg, sizeof(memarg), "%" PRIu64, mem);
	snprintf(lease, sizeof(lease), "%u", opt.lease_ms);
	snprintf(threads, sizeof(threads), "%u", opt.threads);
	argv[a++] = "--backend";
	argv[a++] = opt.backend;
	/* the budget bounds the device: a CPU's whole memory, a GPU's
	 * memory for sessions */
	argv[a++] = strcmp(opt.backend, "cuda") ? "--cpu-mem" : "--gpu-mem";
	argv[a++] = memarg;
	argv[a++] = "--model-dir";
	argv[a++] = model_dir;
	argv[a++] = "--lease-ms";
	argv[a++] = lease;
	argv[a++] = "--log-level";
	argv[a++] = "notice";
	snprintf(swap, sizeof(swap), "memory.swap=%" PRIu64, opt.swap);
	argv[a++] = "--set";
	argv[a++] = swap;
	/* the weights stay where they are: a budget of the whole device
	 * keeps static partitioning from streaming layers to make room
	 * (Documentation/streaming.rst, "Under memory pressure") */
	snprintf(pin, sizeof(pin), "model.%s.budget=%" PRIu64, model.name, mem);
	argv[a++] = "--set";
	argv[a++] = pin;
	if (opt.threads) {
		argv[a++] = "--threads";
		argv[a++] = threads;
	}
	if (policy) {
		argv[a++] = "--sched-policy";
		argv[a++] = policy;
	}
	for (unsigned int i = 0; i < opt.nr_sets; i++) {
		argv[a++] = "--set";
		argv[a++] = opt.sets[i];
	}
	argv[a] = NULL;
	bdj_start(argv, !strcmp(opt.backend, "cuda"));
}

bool daemon_stop(void)
{
	bool ok = bdj_stop();

	if (!ok)
		info("djinnd did not stop cleanly");
	return ok;
}

void daemon_counters(struct result *r)
{
	json_t *v = bdj_ctl_json("vmu"), *s = bdj_ctl_json("sched"), *d;

	r->swap_outs = r->swap_ins = r->swap_bytes_out = NAN;
	r->swap_bytes_in = r->admit_refusals = NAN;
	if (json_is_array(v)) /* several devices: the first */
		d = json_array_get(v, 0);
	else
		d = v;
	if (d) {
		r->swap_outs = bdj_num(d, "swap_outs");
		r->swap_ins = bdj_num(d, "swap_ins");
		r->swap_bytes_out = bdj_num(d, "swapped_out_bytes");
		r->swap_bytes_in = bdj_num(d, "swapped_in_bytes");
		r->admit_refusals = bdj_num(d, "admit_refusals");
	}
	r->swaps_signal = r->swaps_pressure = r->prefetches = NAN;
	r->prefetch_hits = r->prefetch_misses = r->admit_waits = NAN;
	r->admit_timeouts = NAN;
	d = json_array_get(json_object_get(s, "devices"), 0);
	if (d) {
		r->sched = true;
		r->swaps_signal = bdj_num(d, "swaps_signal");
		r->swaps_pressure = bdj_num(d, "swaps_pressure");
		r->prefetches = bdj_num(d, "prefetches");
		r->prefetch_hits = bdj_num(d, "prefetch_hits");
		r->prefetch_misses = bdj_num(d, "prefetch_misses");
		r->admit_waits = bdj_num(d, "admit_waits");
		r->admit_timeouts = bdj_num(d, "admit_timeouts");
		/* the scheduler's own byte counts, both causes */
		if (isfinite(bdj_num(d, "swap_bytes_out")))
			r->swap_bytes_out = bdj_num(d, "swap_bytes_out");
		if (isfinite(bdj_num(d, "swap_bytes_in")))
			r->swap_bytes_in = bdj_num(d, "swap_bytes_in");
	}
	json_decref(v);
	json_decref(s);
}

void find_binaries(void)
{
	bdj_find(opt.djinnd, opt.djinnctl);
}

void need_sched_policy(void)
{
	if (!bdj_has_flag("--sched-policy"))
		fail("%s has no --sched-policy", bench_djinnd.bin);
}

void make_tmpdir(void)
{
	bdj_tmpdir("agent-bench");
}
