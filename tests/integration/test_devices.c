// SPDX-License-Identifier: MIT
/*
 * Several devices in one djinnd (Documentation/djinnd.rst, "Devices"),
 * against a real djinnd with two CPU devices (--backend cpu --device 0
 * --device 1, 64 MiB each):
 *
 * - placement: a session goes to the device with the most free memory,
 *   ties to the one with the fewest sessions, then the lowest index;
 *   the admin session list says where each one is;
 * - a session may ask for a device (djinn_session_open_on(),
 *   $DJINN_DEVICE): it lands there; one the daemon does not have is
 *   -ENODEV, with a message naming how many there are;
 * - tensors and graphs of sessions on either device read back intact;
 * - text is deduplicated per device: the same bytes are stored once on
 *   each device that holds them;
 * - filling device 0 does not touch device 1: its admission, its swap,
 *   its sessions' data;
 * - a model opened on both devices is loaded once on each, and both
 *   generate the same tokens;
 * - a fault of device 1 loses its sessions only;
 * - djinnctl vmu, stats, session list and model list show both devices,
 *   and the metrics have a sample per device;
 * - the daemon stops cleanly.
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <djinn/djinn.h>

#include "libdjinn_fx.h"

#define MiB (1ull << 20)
#define DEV_BYTES (64 * MiB)
#define NTOK 8

static const int32_t prompt[4] = { 1, 2, 3, 4 };

struct fx {
	struct djd d;
	struct djinn_conn *conn;
};

static int fx_setup(void **state)
{
	const char *args[] = { "--device",	    "0", "--device", "1",
			       "--fault-injection", NULL };
	struct fx *fx = calloc(1, sizeof(*fx));

	if (!fx)
		return -1;
	unsetenv("DJINN_DEVICE");
	if (djd_start_conn(&fx->d, "64M", 10000, args, "tiny-gpt2", TINY_GPT2,
			   &fx->conn)) {
		free(fx);
		return -1;
	}
	*state = fx;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *fx = *state;
	int ret = djd_stop_conn(&fx->d, fx->conn, 10000);

	free(fx);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Helpers */

/* Device @i's ADMIN_VMU entry; the answer must hold two. */
static struct djinn_admin_vmu vmu(struct fx *fx, unsigned int i)
{
	struct djinn_admin_vmu v[2];
	struct dj_resp r;

	djd_admin(&fx->d, DJINN_MSG_ADMIN_VMU, NULL, 0, &r);
	assert_int_equal(r.error, 0);
	assert_int_equal(r.len, sizeof(v));
	memcpy(v, r.data, sizeof(v));
	dj_resp_free(&r);
	return v[i];
}

static uint64_t session_id(struct djinn_session *s)
{
	struct djinn_session_info info;

	assert_int_equal(djinn_session_info(s, &info), 0);
	return info.id;
}

/* The device the admin list says session @s is on. */
static unsigned int device_of(struct fx *fx, struct djinn_session *s)
{
	const struct djinn_admin_session *e;
	uint64_t id = session_id(s);
	struct dj_resp r;
	uint32_t count;
	int dev = -1;

	djd_admin(&fx->d, DJINN_MSG_ADMIN_SESSIONS, NULL, 0, &r);
	assert_int_equal(r.error, 0);
	memcpy(&count, r.data, sizeof(count));
	assert_int_equal(r.len, 8 + count * sizeof(*e));
	e = (const void *)(r.data + 8);
	for (uint32_t i = 0; i < count; i++) {
		assert_int_equal(e[i].ctx_waiting, 0);
		if (e[i].id == id)
			dev = (int)e[i].device;
	}
	dj_resp_free(&r);
	if (dev < 0)
		fail_msg("session %llu is not listed", (unsigned long long)id);
	return (unsigned int)dev;
}

static struct djinn_session *open_auto(struct fx *fx)
{
	struct djinn_session *s;

	assert_int_equal(djinn_session_open(fx->conn, NULL, &s), 0);
	return s;
}

static struct djinn_session *open_on(struct fx *fx, int dev)
{
	struct djinn_session *s;

	assert_int_equal(djinn_session_open_on(fx->conn, NULL, dev, &s), 0);
	assert_int_equal(device_of(fx, s), dev);
	return s;
}

/* @n floats from @seed, uploaded to @seg of @s. */
static struct djinn_tensor *upload(struct djinn_session *s, uint32_t n,
				   float seed, enum djinn_segment seg,
				   uint32_t *flags)
{
	struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_F32,
				       .ndim = 1,
				       .dims = { n } };
	struct djinn_tensor_info ti;
	struct djinn_tensor *t;
	float *v = malloc(n * sizeof(float));
	int ret;

	assert_non_null(v);
	for (uint32_t i = 0; i < n; i++)
		v[i] = seed + (float)i;
	ret = djinn_tensor_upload(s, &d, v, seg, &t);
	free(v);
	if (ret)
		return NULL;
	assert_int_equal(djinn_tensor_info(t, &ti), 0);
	if (flags)
		*flags = ti.flags;
	return t;
}

/* @n zeros in @s's data segment (no bytes sent), or NULL. */
static struct djinn_tensor *zeros(struct djinn_session *s, uint32_t n)
{
	struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_F32,
				       .ndim = 1,
				       .dims = { n } };
	struct djinn_tensor *t;

	return djinn_tensor_upload(s, &d, NULL, DJINN_SEG_DATA, &t) ? NULL : t;
}

/* @t holds the floats upload() put there. */
static void check(struct djinn_tensor *t, uint32_t n, float seed)
{
	float *v = malloc(n * sizeof(float));

	assert_non_null(v);
	assert_int_equal(djinn_tensor_download(t, 0, n * sizeof(float), v), 0);
	for (uint32_t i = 0; i < n; i++)
		if (v[i] != seed + (float)i)
			fail_msg("element %u: %g, want %g", i, (double)v[i],
				 (double)(seed + (float)i));
	free(v);
}

/* ---------------------------------------------------------------------- */

/* Both devices are listed, each with its own memory. */
static void test_two_devices(void **state)
{
	struct fx *fx = *state;
	struct djinn_admin_vmu v0 = vmu(fx, 0), v1 = vmu(fx, 1);

	assert_string_equal(v0.device, "cpu:0");
	assert_string_equal(v1.device, "cpu:1");
	assert_int_equal(v0.capacity, DEV_BYTES);
	assert_int_equal(v1.capacity, DEV_BYTES);
	assert_int_equal(v0.free, v1.free);
	assert_true(v0.free > DEV_BYTES / 2);
}

/* The most free memory wins; then the fewest sessions; then index 0. */
static void test_placement(void **state)
{
	struct fx *fx = *state;
	struct djinn_session *a, *b, *c, *d, *e;
	struct djinn_tensor *ta, *tc;

	a = open_auto(fx); /* a tie: the lowest index */
	assert_int_equal(device_of(fx, a), 0);
	b = open_auto(fx); /* free ties: the fewest sessions */
	assert_int_equal(device_of(fx, b), 1);
	ta = upload(a, 4 * MiB, 1.0f, DJINN_SEG_DATA, NULL); /* 16 MiB */
	assert_non_null(ta);
	assert_true(vmu(fx, 0).free < vmu(fx, 1).free);
	c = open_auto(fx); /* device 1 has more free */
	assert_int_equal(device_of(fx, c), 1);
	d = open_auto(fx); /* still: more free beats fewer sessions */
	assert_int_equal(device_of(fx, d), 1);
	tc = upload(c, 8 * MiB, 2.0f, DJINN_SEG_DATA, NULL); /* 32 MiB */
	assert_non_null(tc);
	assert_true(vmu(fx, 0).free > vmu(fx, 1).free);
	e = open_auto(fx);
	assert_int_equal(device_of(fx, e), 0);
	check(ta, 4 * MiB, 1.0f);
	check(tc, 8 * MiB, 2.0f);
	assert_int_equal(djinn_session_close(a), 0);
	assert_int_equal(djinn_session_close(b), 0);
	assert_int_equal(djinn_session_close(c), 0);
	assert_int_equal(djinn_session_close(d), 0);
	assert_int_equal(djinn_session_close(e), 0);
}

/* Asking for a device: there, or -ENODEV naming the devices. */
static void test_request(void **state)
{
	struct fx *fx = *state;
	struct djinn_session *s1, *s0, *s;
	struct djinn_session_open o = { .tenant = "raw", .priority = 4 };
	struct dj_resp r;
	int fd;

	s1 = open_on(fx, 1);
	/* a second one there, though device 0 is emptier */
	s = open_on(fx, 1);
	assert_int_equal(djinn_session_close(s), 0);
	s0 = open_on(fx, 0);

	assert_int_equal(djinn_session_open_on(fx->conn, NULL, 2, &s), -ENODEV);
	assert_string_equal(djinn_last_error(),
			    "no device 2: this djinnd has 2 devices (0 to 1)");
	assert_int_equal(djinn_session_open_on(fx->conn, NULL, -2, &s),
			 -EINVAL);

	/* $DJINN_DEVICE */
	setenv("DJINN_DEVICE", "1", 1);
	s = open_auto(fx);
	assert_int_equal(device_of(fx, s), 1);
	assert_int_equal(djinn_session_close(s), 0);
	setenv("DJINN_DEVICE", "7", 1);
	assert_int_equal(djinn_session_open(fx->conn, NULL, &s), -ENODEV);
	setenv("DJINN_DEVICE", "one", 1);
	assert_int_equal(djinn_session_open(fx->conn, NULL, &s), -EINVAL);
	unsetenv("DJINN_DEVICE");

	/* On the wire: device N + 1; past the end, nothing is opened. */
	fd = dj_connect(fx->d.sock);
	assert_true(fd >= 0);
	o.device = 3;
	assert_int_equal(
		dj_call(fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), &r), 1);
	assert_int_equal(r.error, -ENODEV);
	assert_string_equal(r.msg,
			    "no device 2: this djinnd has 2 devices (0 to 1)");
	dj_resp_free(&r);
	o.device = 0xffffffffu;
	assert_int_equal(
		dj_call(fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), &r), 1);
	assert_int_equal(r.error, -ENODEV);
	dj_resp_free(&r);
	close(fd);
	djd_admin(&fx->d, DJINN_MSG_ADMIN_STATS, NULL, 0, &r);
	assert_int_equal(r.error, 0);
	assert_int_equal(((struct djinn_admin_stats *)r.data)->sessions, 2);
	dj_resp_free(&r);

	assert_int_equal(djinn_session_close(s0), 0);
	assert_int_equal(djinn_session_close(s1), 0);
}

/* Tensors and graphs on either device read back intact. */
static void test_tensors(void **state)
{
	struct fx *fx = *state;
	struct djinn_session *s[2] = { open_on(fx, 0), open_on(fx, 1) };
	struct djinn_tensor *t[2], *u[2];
	struct djinn_admin_vmu before[2];

	for (int i = 0; i < 2; i++)
		before[i] = vmu(fx, i);
	/* 1 MiB twice on device 0: device 1 does not change */
	t[0] = upload(s[0], 256 * 1024, 10.0f, DJINN_SEG_DATA, NULL);
	u[0] = upload(s[0], 256 * 1024, 1000.0f, DJINN_SEG_DATA, NULL);
	assert_int_equal(vmu(fx, 0).seg[1].entries,
			 before[0].seg[1].entries + 2);
	assert_true(vmu(fx, 0).seg[1].used >= before[0].seg[1].used + 2 * MiB);
	assert_int_equal(vmu(fx, 1).seg[1].entries, before[1].seg[1].entries);
	assert_int_equal(vmu(fx, 1).seg[1].used, before[1].seg[1].used);
	before[0] = vmu(fx, 0);
	/* 3 MiB twice on device 1: device 0 does not change */
	t[1] = upload(s[1], 768 * 1024, 20.0f, DJINN_SEG_DATA, NULL);
	u[1] = upload(s[1], 768 * 1024, 2000.0f, DJINN_SEG_DATA, NULL);
	assert_int_equal(vmu(fx, 1).seg[1].entries,
			 before[1].seg[1].entries + 2);
	assert_true(vmu(fx, 1).seg[1].used >= before[1].seg[1].used + 6 * MiB);
	assert_int_equal(vmu(fx, 0).seg[1].entries, before[0].seg[1].entries);
	assert_int_equal(vmu(fx, 0).seg[1].used, before[0].seg[1].used);
	check(t[0], 256 * 1024, 10.0f);
	check(t[1], 768 * 1024, 20.0f);

	/* t + u on each device, by each device's graph executor */
	for (int i = 0; i < 2; i++) {
		uint32_t n = i ? 768 * 1024 : 256 * 1024;
		float base = i ? 2020.0f : 1010.0f;
		struct djinn_graph_builder *g;
		struct djinn_request *req;
		float *v = malloc(n * sizeof(float));

		assert_non_null(v);
		assert_int_equal(djinn_graph_new(s[i], &g), 0);
		assert_int_equal(
			djinn_graph_output(
				g, djinn_op_add(g, djinn_graph_input(g, t[i]),
						djinn_graph_input(g, u[i]))),
			0);
		assert_int_equal(djinn_submit(g, &req), 0);
		assert_int_equal(djinn_wait(req, DJINN_WAIT_FOREVER), 0);
		assert_int_equal(
			djinn_result_read(djinn_request_results(req, 0), 0,
					  n * sizeof(float), v),
			0);
		for (uint32_t k = 0; k < n; k++)
			if (v[k] != base + 2.0f * (float)k)
				fail_msg("device %d: element %u: %g", i, k,
					 (double)v[k]);
		free(v);
		djinn_request_free(req);
		djinn_graph_free(g);
	}
	/* still intact after the other device's work */
	check(t[0], 256 * 1024, 10.0f);
	check(u[1], 768 * 1024, 2000.0f);
	assert_int_equal(djinn_session_close(s[0]), 0);
	assert_int_equal(djinn_session_close(s[1]), 0);
	assert_int_equal(vmu(fx, 0).seg[1].used, 0);
	assert_int_equal(vmu(fx, 1).seg[1].used, 0);
}

/* Text is deduplicated per device. */
static void test_text_per_device(void **state)
{
	struct fx *fx = *state;
	struct djinn_session *a0 = open_on(fx, 0), *b0 = open_on(fx, 0);
	struct djinn_session *a1 = open_on(fx, 1), *b1 = open_on(fx, 1);
	struct djinn_tensor *t;
	uint32_t flags;
	uint64_t e0 = vmu(fx, 0).seg[0].entries, e1 = vmu(fx, 1).seg[0].entries;

	t = upload(a0, 65536, 7.0f, DJINN_SEG_TEXT, &flags);
	assert_int_equal(flags & DJINN_TENSOR_DEDUP, 0);
	t = upload(b0, 65536, 7.0f, DJINN_SEG_TEXT, &flags);
	assert_int_equal(flags & DJINN_TENSOR_DEDUP, DJINN_TENSOR_DEDUP);
	/* device 1 has no copy yet: stored again there, once */
	t = upload(a1, 65536, 7.0f, DJINN_SEG_TEXT, &flags);
	assert_int_equal(flags & DJINN_TENSOR_DEDUP, 0);
	check(t, 65536, 7.0f);
	t = upload(b1, 65536, 7.0f, DJINN_SEG_TEXT, &flags);
	assert_int_equal(flags & DJINN_TENSOR_DEDUP, DJINN_TENSOR_DEDUP);
	check(t, 65536, 7.0f);
	assert_int_equal(vmu(fx, 0).seg[0].entries, e0 + 1);
	assert_int_equal(vmu(fx, 1).seg[0].entries, e1 + 1);
	assert_int_equal(djinn_session_close(a0), 0);
	assert_int_equal(djinn_session_close(b0), 0);
	assert_int_equal(djinn_session_close(a1), 0);
	assert_int_equal(djinn_session_close(b1), 0);
}

/* Filling device 0 leaves device 1 alone. */
static void test_pressure(void **state)
{
	struct fx *fx = *state;
	struct djinn_session *s0 = open_on(fx, 0), *s1 = open_on(fx, 1);
	struct djinn_tensor *keep, *big, *first, *last = NULL, *t;
	struct djinn_admin_vmu v0, v1;
	unsigned int n = 0;

	keep = upload(s1, 2 * MiB, 3.0f, DJINN_SEG_DATA, NULL); /* 8 MiB */
	assert_non_null(keep);
	first = upload(s0, 256 * 1024, 9.0f, DJINN_SEG_DATA, NULL);
	assert_non_null(first);
	/* 8 MiB at a time until device 0 refuses: it has 64 MiB, and as
	 * much again for swap (zeros: a refused upload's bytes would
	 * close the connection) */
	while (n < 40 && (t = zeros(s0, 2 * MiB))) {
		last = t;
		n++;
	}
	assert_non_null(strstr(djinn_last_error(), "cannot allocate"));
	assert_true(n >= 6 && n < 40);
	v0 = vmu(fx, 0);
	v1 = vmu(fx, 1);
	printf("# device 0 full after %u tensors of 8 MiB: free %llu, "
	       "%llu refused, %llu swapped out\n",
	       n, (unsigned long long)v0.free,
	       (unsigned long long)v0.admit_refusals,
	       (unsigned long long)v0.swap_outs);
	/* swapped out, or refused: full either way */
	assert_true(v0.swap_outs > 0 || v0.admit_refusals > 0);
	assert_true(v0.free < 8 * MiB);
	assert_int_equal(v1.admit_refusals, 0);
	assert_int_equal(v1.swap_outs, 0);
	assert_int_equal(v1.pressure, 0);
	assert_int_equal(v1.seg[1].used, 8 * MiB);
	/* device 1 still has its memory: 40 MiB more fits, and reads */
	big = upload(s1, 10 * MiB, 4.0f, DJINN_SEG_DATA, NULL);
	if (!big)
		fail_msg("device 1: 40 MiB: %s", djinn_last_error());
	check(big, 10 * MiB, 4.0f);
	check(keep, 2 * MiB, 3.0f);
	v1 = vmu(fx, 1);
	assert_int_equal(v1.admit_refusals, 0);
	assert_int_equal(v1.swap_outs, 0);
	/* a new session goes where the memory is */
	{
		struct djinn_session *s = open_auto(fx);

		assert_int_equal(device_of(fx, s), 1);
		assert_int_equal(djinn_session_close(s), 0);
	}
	/* device 0's data is all there, swapped out or not: with room
	 * to swap it back in */
	assert_int_equal(djinn_tensor_release(last), 0);
	check(first, 256 * 1024, 9.0f);
	assert_int_equal(djinn_session_close(s0), 0);
	assert_int_equal(vmu(fx, 0).seg[1].used, 0);
	assert_int_equal(djinn_session_close(s1), 0);
}

/* Holders and entries of model @name on @dev in the admin list. */
static int model_holders(struct fx *fx, const char *name, unsigned int dev,
			 int *entries)
{
	const struct djinn_admin_model *e;
	struct dj_resp r;
	uint32_t count;
	int n = -1;

	djd_admin(&fx->d, DJINN_MSG_ADMIN_MODELS, NULL, 0, &r);
	assert_int_equal(r.error, 0);
	memcpy(&count, r.data, sizeof(count));
	e = (const void *)(r.data + 8);
	*entries = 0;
	for (uint32_t i = 0; i < count; i++) {
		if (i)
			assert_true(strcmp(e[i - 1].name, e[i].name) < 0 ||
				    (!strcmp(e[i - 1].name, e[i].name) &&
				     e[i - 1].device < e[i].device));
		if (!strcmp(e[i].name, name) && e[i].device == dev) {
			n = (int)e[i].holders;
			(*entries)++;
		}
	}
	dj_resp_free(&r);
	return n;
}

/* A model is loaded once per device that opens it. */
static void test_models(void **state)
{
	struct fx *fx = *state;
	struct djinn_session *a0 = open_on(fx, 0), *b0 = open_on(fx, 0);
	struct djinn_session *a1 = open_on(fx, 1);
	struct djinn_model *ma0, *mb0, *ma1;
	int32_t t0[NTOK], t1[NTOK];
	uint64_t w0, w1;
	int n;

	assert_int_equal(djinn_model_open(a0, "tiny-gpt2", &ma0), 0);
	assert_int_equal(model_holders(fx, "tiny-gpt2", 0, &n), 1);
	assert_int_equal(n, 1);
	assert_int_equal(model_holders(fx, "tiny-gpt2", 1, &n), -1);
	w0 = vmu(fx, 0).seg[0].used;
	assert_true(w0 > 0);
	assert_int_equal(vmu(fx, 1).seg[0].used, 0);

	/* the second session on device 0 shares the load */
	assert_int_equal(djinn_model_open(b0, "tiny-gpt2", &mb0), 0);
	assert_int_equal(model_holders(fx, "tiny-gpt2", 0, &n), 2);
	assert_int_equal(n, 1);
	assert_int_equal(vmu(fx, 0).seg[0].used, w0);

	/* device 1 loads its own */
	assert_int_equal(djinn_model_open(a1, "tiny-gpt2", &ma1), 0);
	assert_int_equal(model_holders(fx, "tiny-gpt2", 1, &n), 1);
	assert_int_equal(n, 1);
	w1 = vmu(fx, 1).seg[0].used;
	assert_int_equal(w1, w0);
	assert_int_equal(vmu(fx, 0).seg[0].used, w0);

	greedy_tokens(ma0, prompt, 4, NTOK, t0);
	greedy_tokens(ma1, prompt, 4, NTOK, t1);
	assert_memory_equal(t0, t1, sizeof(t0));
	greedy_tokens(mb0, prompt, 4, NTOK, t1);
	assert_memory_equal(t0, t1, sizeof(t0));

	/* evicting needs no holders anywhere it is evicted */
	assert_int_equal(djinn_model_close(ma1), 0);
	{
		struct djinn_admin_model_evict e = { "tiny-gpt2" };
		struct dj_resp r;

		djd_admin(&fx->d, DJINN_MSG_ADMIN_MODEL_EVICT, &e, sizeof(e),
			  &r);
		assert_int_equal(r.error, 0); /* from device 1 */
		dj_resp_free(&r);
		assert_int_equal(model_holders(fx, "tiny-gpt2", 1, &n), -1);
		assert_int_equal(model_holders(fx, "tiny-gpt2", 0, &n), 2);
		djd_admin(&fx->d, DJINN_MSG_ADMIN_MODEL_EVICT, &e, sizeof(e),
			  &r);
		assert_int_equal(r.error, -EBUSY); /* held on device 0 */
		assert_non_null(strstr(r.msg, "(device 0)"));
		dj_resp_free(&r);
	}
	assert_int_equal(djinn_model_close(ma0), 0);
	assert_int_equal(djinn_model_close(mb0), 0);
	assert_int_equal(djinn_session_close(a0), 0);
	assert_int_equal(djinn_session_close(b0), 0);
	assert_int_equal(djinn_session_close(a1), 0);
}

/* A fault of device 1 loses device 1's sessions, not device 0's. */
static void test_fault_one_device(void **state)
{
	struct fx *fx = *state;
	struct djinn_session *s0 = open_on(fx, 0), *s1 = open_on(fx, 1);
	struct djinn_tensor *t0, *t1;
	struct djinn_admin_fault_req q = { .device = 1 };
	struct djinn_admin_fault f;
	struct dj_resp r;
	float x[4];

	t0 = upload(s0, 4096, 5.0f, DJINN_SEG_DATA, NULL);
	t1 = upload(s1, 4096, 6.0f, DJINN_SEG_DATA, NULL);
	q.device = 2;
	djd_admin(&fx->d, DJINN_MSG_ADMIN_FAULT_INJECT, &q, sizeof(q), &r);
	assert_int_equal(r.error, -ENODEV);
	dj_resp_free(&r);
	q.device = 1;
	djd_admin(&fx->d, DJINN_MSG_ADMIN_FAULT_INJECT, &q, sizeof(q), &r);
	assert_int_equal(r.error, 0);
	assert_int_equal(r.len, sizeof(f));
	memcpy(&f, r.data, sizeof(f));
	dj_resp_free(&r);
	assert_string_equal(f.device, "cpu:1");
	assert_int_equal(f.faults, 1);

	assert_int_equal(djinn_tensor_download(t1, 0, sizeof(x), x), -EIO);
	assert_non_null(strstr(djinn_last_error(),
			       "device state lost in a fault: cpu:1 fault 1"));
	check(t0, 4096, 5.0f);
	assert_int_equal(djinn_session_close(s1), 0);
	s1 = open_on(fx, 1);
	t1 = upload(s1, 4096, 8.0f, DJINN_SEG_DATA, NULL);
	check(t1, 4096, 8.0f);
	assert_int_equal(djinn_session_close(s0), 0);
	assert_int_equal(djinn_session_close(s1), 0);
}

/* ---------------------------------------------------------------------- */
/* djinnctl */

/* Run djinnctl @args on the daemon's admin socket: its stdout, which
 * the caller frees; it must exit 0. */
static char *ctl(struct fx *fx, const char *args)
{
	char cmd[PATH_MAX + 256];
	size_t cap = 65536, len = 0, n;
	char *out = malloc(cap);
	FILE *p;

	assert_non_null(out);
	snprintf(cmd, sizeof(cmd), "'%s' -s '%s' %s", djd_djinnctl(),
		 fx->d.admin, args);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (len < cap - 1 && (n = fread(out + len, 1, cap - 1 - len, p)))
		len += n;
	out[len] = 0;
	if (pclose(p))
		fail_msg("%s: failed:\n%s", cmd, out);
	return out;
}

static void test_djinnctl(void **state)
{
	struct fx *fx = *state;
	struct djinn_session *s0 = open_on(fx, 0), *s1 = open_on(fx, 1);
	struct djinn_tensor *t = upload(s1, MiB, 1.0f, DJINN_SEG_DATA, NULL);
	struct djinn_model *m;
	char *out, line[128];

	assert_non_null(t);
	assert_int_equal(djinn_model_open(s1, "tiny-gpt2", &m), 0);

	out = ctl(fx, "vmu");
	assert_non_null(strstr(out, "index:       0\ndevice:      cpu:0\n"));
	assert_non_null(strstr(out, "index:       1\ndevice:      cpu:1\n"));
	assert_non_null(strstr(out, "capacity:    64Mi"));
	assert_non_null(strstr(out, "\ndata              4Mi"));
	free(out);
	out = ctl(fx, "-j vmu");
	assert_true(out[0] == '[');
	assert_non_null(strstr(out, "\"device\":\"cpu:1\""));
	free(out);

	out = ctl(fx, "stats");
	assert_non_null(strstr(out, "\ndevice 0:    cpu:0, 64Mi, "));
	assert_non_null(strstr(out, "\ndevice 1:    cpu:1, 64Mi, "));
	assert_non_null(strstr(out, "; text 0B, data 0B, stack 0B\n"));
	assert_non_null(strstr(out, ", data 4Mi, stack "));
	free(out);
	out = ctl(fx, "-j stats");
	assert_non_null(strstr(out, "\"devices\":[{\"index\":0,"
				    "\"device\":\"cpu:0\""));
	free(out);

	/* the DEV column: the last */
	out = ctl(fx, "session list");
	assert_non_null(strstr(out, " PID DEV\n"));
	snprintf(line, sizeof(line), "\n%llu ",
		 (unsigned long long)session_id(s1));
	assert_non_null(strstr(out, line));
	assert_non_null(strstr(strstr(out, line) + 1, "   1\n"));
	free(out);
	out = ctl(fx, "-j session list");
	assert_non_null(strstr(out, "\"device\":1}"));
	assert_non_null(strstr(out, "\"device\":0}"));
	free(out);

	out = ctl(fx, "model list");
	assert_non_null(strstr(out, "HOLDERS DEV  FINGERPRINT\n"));
	assert_non_null(strstr(out, "       1   1  "));
	free(out);

	assert_int_equal(djinn_model_close(m), 0);
	assert_int_equal(djinn_session_close(s0), 0);
	assert_int_equal(djinn_session_close(s1), 0);
}

/* The metrics: a sample per device, each with its own figures. */
static void test_metrics(void **state)
{
	struct fx *fx = *state;
	struct djinn_session *s1 = open_on(fx, 1);
	struct djinn_tensor *t = zeros(s1, MiB); /* 4 MiB on device 1 */
	const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
	size_t cap = 1 << 20, len = 0;
	char *buf = malloc(cap);
	long n;
	int fd;

	assert_non_null(t);
	assert_non_null(buf);
	fd = dj_connect_tcp(fx->d.metrics_port);
	assert_true(fd >= 0);
	assert_int_equal(dj_write(fd, req, sizeof(req) - 1, DJ_TIMEOUT_MS), 0);
	while (len < cap - 1 &&
	       (n = dj_read(fd, buf + len, 1, DJ_TIMEOUT_MS)) == 1)
		len++;
	buf[len] = 0;
	close(fd);
	assert_non_null(strstr(buf, " 200 "));
	assert_non_null(strstr(
		buf, "djinn_vmu_capacity_bytes{device=\"cpu:0\"} 67108864\n"
		     "djinn_vmu_capacity_bytes{device=\"cpu:1\"} 67108864\n"));
	assert_non_null(strstr(buf, "djinn_vmu_bytes{device=\"cpu:0\","
				    "segment=\"data\"} 0\n"));
	assert_non_null(strstr(buf, "djinn_vmu_bytes{device=\"cpu:1\","
				    "segment=\"data\"} 4194304\n"));
	assert_non_null(strstr(buf, "djinn_executor_queue_depth{device="
				    "\"cpu:1\",executor=\"mem\"} 0\n"));
	free(buf);
	assert_int_equal(djinn_session_close(s1), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_two_devices, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_placement, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_request, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_tensors, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_text_per_device, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_pressure, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_models, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_fault_one_device, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_djinnctl, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_metrics, fx_setup,
						fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
