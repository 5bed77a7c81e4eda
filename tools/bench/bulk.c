// SPDX-License-Identifier: MIT
/*
 * djinn-bench bulk: upload and download GB/s of a 256 MiB f32 tensor,
 * median of 5 after one warm-up, beside a raw blast of the same 256 MiB
 * from one thread of this process to another over the same transport,
 * median of 5.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <djinn/djinn.h>

#include "common.h"

#define BLAST_RECV (64 * KiB)

struct blast {
	int fd;
	const void *buf;
	size_t len;
	int err;
};

static void *blast_thread(void *arg)
{
	struct blast *b = arg;

	b->err = send_all(b->fd, b->buf, b->len);
	return NULL;
}

/* Upload and download @len bytes of @src through @conn, once to warm up,
 * then BULK_REPS times each, GB/s into @up and @down; what comes back
 * (into @dst) must be @src, or the run fails naming @name. */
void bulk_through(struct djinn_conn *conn, const char *name, const void *src,
		  void *dst, size_t len, double *up, double *down)
{
	const struct djinn_tensor_desc desc = {
		.dtype = DJINN_DTYPE_U8,
		.ndim = 1,
		.dims = { len },
	};
	struct djinn_tensor *t = NULL;
	struct djinn_session *s;

	check(djinn_session_open(conn, NULL, &s), "djinn_session_open");
	for (int rep = -1; rep < BULK_REPS; rep++) {
		uint64_t t0 = mono_ns();

		check(djinn_tensor_upload(s, &desc, src, DJINN_SEG_DATA, &t),
		      "djinn_tensor_upload");
		if (rep >= 0)
			up[rep] = (double)len / (double)(mono_ns() - t0);
		if (rep < BULK_REPS - 1)
			check(djinn_tensor_release(t), "djinn_tensor_release");
	}
	for (int rep = -1; rep < BULK_REPS; rep++) {
		uint64_t t0 = mono_ns();

		check(djinn_tensor_download(t, 0, len, dst),
		      "djinn_tensor_download");
		if (rep >= 0)
			down[rep] = (double)len / (double)(mono_ns() - t0);
		if (rep == -1 && memcmp(src, dst, len))
			fail("bulk over %s: the tensor came back wrong", name);
	}
	check(djinn_tensor_release(t), "djinn_tensor_release");
	check(djinn_session_close(s), "djinn_session_close");
}

/*
 * GB/s of @len bytes from @src to @dst between two threads, through a
 * connection of @xp's transport, median of BULK_REPS after a warm-up. The
 * sender writes all of it with one send() loop; the receiver reads 64 KiB
 * a call, as djinnd does through its receive buffers, which on TCP
 * loopback is about half again as fast as one read of all of it (a long
 * read holds the socket lock and stalls the sender).
 */
static double raw_blast(const struct xport *xp, const void *src, void *dst,
			size_t len)
{
	double gbps[BULK_REPS];
	struct raw_ep ep;
	int cfd, afd;

	raw_listen(&ep, xp->is_unix, "blast.sock");
	cfd = raw_dial(&ep);
	afd = accept4(ep.lfd, NULL, NULL, SOCK_CLOEXEC);
	if (afd < 0)
		fail("accept: %s", strerror(errno));
	if (!xp->is_unix)
		set_nodelay(afd);
	for (int rep = -1; rep < BULK_REPS; rep++) {
		struct blast b = { .fd = cfd, .buf = src, .len = len };
		pthread_t t;
		uint64_t t0 = mono_ns();
		int ret = pthread_create(&t, NULL, blast_thread, &b);

		if (ret)
			fail("pthread_create: %s", strerror(ret));
		ret = recv_all(afd, dst, len, BLAST_RECV);
		pthread_join(t, NULL);
		if (ret || b.err)
			fail("raw blast over %s: %s", xp->name,
			     strerror(-(ret ? ret : b.err)));
		if (rep >= 0)
			gbps[rep] = (double)len / (double)(mono_ns() - t0);
	}
	close(cfd);
	close(afd);
	raw_close(&ep);
	if (memcmp(src, dst, len))
		fail("raw blast over %s: bytes came back wrong", xp->name);
	return median(gbps, BULK_REPS);
}

void bulk_fill(uint8_t *src, size_t len)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;

	for (size_t i = 0; i < len; i += sizeof(x)) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(src + i, &x, sizeof(x));
	}
}

void bench_bulk(void)
{
	const size_t len = opt.bulk_bytes;
	uint8_t *src = xmalloc_huge(len), *dst = xmalloc_huge(len);

	bulk_fill(src, len);
	memset(dst, 0, len);

	for (unsigned int k = 0; k < nr_xports; k++) {
		const struct xport *xp = &xports[k];
		double up[BULK_REPS], down[BULK_REPS], raw;
		struct djinn_conn *conn;
		char m[48];

		raw = raw_blast(xp, src, dst, len);
		memset(dst, 0, len);

		check(djinn_connect(xp->addr, &conn), "djinn_connect");
		bulk_through(conn, xp->name, src, dst, len, up, down);
		djinn_disconnect(conn);
		info("bulk %s: raw %.2f GB/s, upload %.2f, download %.2f",
		     xp->name, raw, median(up, BULK_REPS),
		     median(down, BULK_REPS));

		for (int d = 0; d < 2; d++) {
			snprintf(m, sizeof(m), "%s_%s_gbps",
				 d ? "download" : "upload", xp->name);
			fig_emit(&(struct fig){
				.bench = "djinn_bulk",
				.metric = m,
				.value = median(d ? down : up, BULK_REPS),
				.unit = "GB/s",
				.baseline = raw,
				.baseline_name = "raw_blast",
				.target = ">=",
				.want = 0.9,
				.samples = BULK_REPS });
		}
	}
	free(src);
	free(dst);
}
