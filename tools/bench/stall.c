// SPDX-License-Identifier: MIT
/*
 * djinn-bench stall: no-op round-trip latency (p99 and worst) on one
 * connection while another uploads a 1 GiB tensor, beside the same
 * latency with nothing else going on. The upload's memory is mapped and
 * zeroed on djinnd's memory executor, not its I/O thread, so the pings
 * wait for the bytes in between, never for the allocation (no target: it
 * shows head-of-line blocking across clients).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <djinn/djinn.h>

#include "common.h"

#define STALL_BYTES (1024 * MiB)
#define STALL_IDLE_PINGS 2000

struct stall_upload {
	struct djinn_session *s;
	const void *src;
	int err;
	atomic_bool done;
};

static void *stall_upload_thread(void *arg)
{
	const struct djinn_tensor_desc desc = {
		.dtype = DJINN_DTYPE_U8,
		.ndim = 2,
		.dims = { 1024, (int32_t)(STALL_BYTES / 1024) },
	};
	struct stall_upload *u = arg;
	struct djinn_tensor *t;

	u->err = djinn_tensor_upload(u->s, &desc, u->src, DJINN_SEG_DATA, &t);
	if (!u->err)
		u->err = djinn_tensor_release(t);
	atomic_store(&u->done, true);
	return NULL;
}

/* Round trips on @conn into @hist until @stop is set (or @n are done). */
static uint64_t stall_pings(struct djinn_conn *conn, uint64_t *hist,
			    uint64_t *worst, atomic_bool *stop, uint64_t n)
{
	uint64_t ops = 0;

	while (stop ? !atomic_load(stop) : ops < n) {
		uint64_t t0 = mono_ns(), d;

		check(djinn_conn_ping(conn), "djinn_conn_ping");
		d = mono_ns() - t0;
		hist[hist_index(d)]++;
		if (d > *worst)
			*worst = d;
		ops++;
	}
	return ops;
}

void bench_stall(void)
{
	const struct xport *xp = &xports[0];
	uint64_t *idle = xcalloc(HIST_BUCKETS, sizeof(*idle));
	uint64_t *busy = xcalloc(HIST_BUCKETS, sizeof(*busy));
	uint64_t idle_worst = 0, busy_worst = 0, idle_n, busy_n;
	uint8_t *src = xmalloc_huge(STALL_BYTES);
	struct stall_upload u = { .src = src };
	struct djinn_conn *up, *pc;
	double ip99, bp99;
	pthread_t t;
	int ret;

	memset(src, 0x5a, STALL_BYTES);
	check(djinn_connect(xp->addr, &up), "djinn_connect");
	check(djinn_connect(xp->addr, &pc), "djinn_connect");
	check(djinn_session_open(up, NULL, &u.s), "djinn_session_open");
	idle_n = stall_pings(pc, idle, &idle_worst, NULL, STALL_IDLE_PINGS);
	ret = pthread_create(&t, NULL, stall_upload_thread, &u);
	if (ret)
		fail("pthread_create: %s", strerror(ret));
	busy_n = stall_pings(pc, busy, &busy_worst, &u.done, 0);
	pthread_join(t, NULL);
	check(u.err, "djinn_tensor_upload");
	check(djinn_session_close(u.s), "djinn_session_close");
	djinn_disconnect(up);
	djinn_disconnect(pc);
	ip99 = hist_quantile(idle, idle_n, 0.99) / 1000;
	bp99 = hist_quantile(busy, busy_n, 0.99) / 1000;
	info("stall %s: idle p99 %.1f us worst %.1f us; during a 1 GiB "
	     "upload p99 %.1f us worst %.1f us (%" PRIu64 " pings)",
	     xp->name, ip99, (double)idle_worst / 1000, bp99,
	     (double)busy_worst / 1000, busy_n);
	fig_emit(&(struct fig){ .bench = "djinn_stall",
				.metric = "ping_p99_during_upload_us",
				.value = bp99,
				.unit = "us",
				.baseline = ip99,
				.baseline_name = "ping_p99_idle",
				.samples = busy_n });
	fig_emit(&(struct fig){ .bench = "djinn_stall",
				.metric = "ping_worst_during_upload_us",
				.value = (double)busy_worst / 1000,
				.unit = "us",
				.baseline = (double)idle_worst / 1000,
				.baseline_name = "ping_worst_idle",
				.samples = busy_n });
	free(idle);
	free(busy);
	free(src);
}
