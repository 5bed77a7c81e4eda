// SPDX-License-Identifier: MIT
/*
 * Device faults against a real djinnd (Documentation/cuda.rst, "Faults"):
 * a fault is injected through the admin socket (djinnd --fault-injection,
 * ADMIN_FAULT_INJECT), then
 *
 * - every session made before it fails its next request with -EIO and a
 *   message naming the device and the fault, through libdjinn too
 *   (djinn_last_error()); heartbeats and closing still work;
 * - a session made after it works, and a text upload of bytes a lost
 *   session holds is a new entry (not deduplicated against the stale
 *   one, which reads as zeros on the device), and the stale entries go
 *   when their last holder closes;
 * - a model opened after it is loaded again and generates the tokens it
 *   generated before; the model list shows the fresh entry only;
 * - without --fault-injection the admin opcode is refused -EPERM;
 * - the daemon serves throughout and stops cleanly;
 * - a fault that kills the device (DJINN_FAULT_DEAD, as after
 *   CUDA_ERROR_CONTAINED) is answered, then djinnd says at err level why
 *   it exits, closes every connection (its clients get -EIO or a closed
 *   connection, promptly) and exits with status 74 for systemd to
 *   restart it; unknown flag bits are -EINVAL and change nothing.
 *
 * On the CPU backend the fault is simulated (memory zeroed, the fault
 * counted). tests/gpu/test_cuda_fault builds this file with FAULT_BACKEND
 * "cuda", where a kernel really faults (an illegal address) and the
 * backend resets the context. Where the driver keeps the error sticky
 * after the reset (CUDA documents that the process must then be
 * restarted; so it was on an H200 with driver 580), the answer says the
 * device is dead and test_fault and test_fault_twice check the dead path
 * of test_fault_dead instead of recovery, saying so. It skips (77),
 * saying why, only where there is no GPU: no NVIDIA driver
 * (libcuda.so.1), or a driver that finds no device. On a host with one,
 * djinnd failing to start, or crashing, fails the test.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <djinn/djinn.h>

#include "libdjinn_fx.h"
#include "../unit/testutil.h"

#ifndef FAULT_BACKEND
#define FAULT_BACKEND "cpu"
#endif

#define NTOK 8
#define NFLOAT 4096
/* djinnd(8), EXIT STATUS: a device died (DJINND_EXIT_DEVICE_DEAD) */
#define EXIT_DEVICE_DEAD 74

static const int32_t prompt[4] = { 1, 2, 3, 4 };

struct fx {
	struct djd d;
	struct djinn_conn *conn;
	bool exited; /* djinnd exited after its device died */
};

/* Why djinnd did not start (its last line), for the GPU build's main(). */
static char start_why[300];

static int start(void **state, bool injection)
{
	const char *on[] = { "--backend", FAULT_BACKEND, "--fault-injection",
			     NULL };
	const char *off[] = { "--backend", FAULT_BACKEND, NULL };
	struct fx *fx = calloc(1, sizeof(*fx));
	int ret;

	if (!fx)
		return -1;
	ret = djd_start_conn(&fx->d, "256M", 10000, injection ? on : off,
			     "tiny-gpt2", TINY_GPT2, &fx->conn);
	if (ret == -ECHILD)
		snprintf(start_why, sizeof(start_why), "%s",
			 djd_start_error()[0] ? djd_start_error() :
						"it did not start");
	if (ret) {
		free(fx);
		return -1;
	}
	*state = fx;
	return 0;
}

static int fx_setup(void **state)
{
	return start(state, true);
}

static int fx_setup_off(void **state)
{
	return start(state, false);
}

static int fx_teardown(void **state)
{
	struct fx *fx = *state;
	int ret = 0;

	if (fx->exited)
		djd_kill_conn(&fx->d, fx->conn);
	else
		ret = djd_stop_conn(&fx->d, fx->conn, 10000);
	free(fx);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Helpers */

/*
 * Whether this host has no GPU, asked of the driver directly rather than
 * of djinnd (which is under test): true, with why in @why, when there is
 * no libcuda.so.1, or cuInit() says CUDA_ERROR_NO_DEVICE, or the driver
 * counts no device. A driver that is there but fails otherwise is no
 * reason to skip: djinnd must then start, or say why it cannot, and the
 * test fails.
 */
static bool no_gpu(char *why, size_t len)
{
	enum { CUDA_ERROR_NO_DEVICE = 100 };
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	int (*init)(unsigned int), (*count)(int *);
	int r, n = 0;

	if (!lib) {
		snprintf(why, len, "no NVIDIA driver: %s", dlerror());
		return true;
	}
	*(void **)&init = dlsym(lib, "cuInit");
	*(void **)&count = dlsym(lib, "cuDeviceGetCount");
	if (!init || !count) {
		dlclose(lib);
		return false; /* a driver, broken: djinnd says how */
	}
	r = init(0);
	if (r == CUDA_ERROR_NO_DEVICE || (!r && !count(&n) && !n)) {
		snprintf(why, len,
			 "the NVIDIA driver sees no device (cuInit "
			 "%d, %d devices)",
			 r, n);
		dlclose(lib);
		return true;
	}
	dlclose(lib);
	return false;
}

static void admin(struct fx *fx, uint16_t op, struct dj_resp *r)
{
	djd_admin(&fx->d, op, NULL, 0, r);
}

/* Whether a line of the daemon's log holds @a and, after it, @b. */
static bool log_has(struct fx *fx, const char *a, const char *b)
{
	char line[2048];
	bool found = false;
	FILE *f = fopen(fx->d.log, "r");

	assert_non_null(f);
	while (!found && fgets(line, sizeof(line), f)) {
		const char *at = strstr(line, a);

		found = at && strstr(at + strlen(a), b);
	}
	fclose(f);
	return found;
}

static struct djinn_admin_vmu vmu_stats(struct fx *fx)
{
	struct djinn_admin_vmu v;
	struct dj_resp r;

	admin(fx, DJINN_MSG_ADMIN_VMU, &r);
	assert_int_equal(r.error, 0);
	assert_int_equal(r.len, sizeof(v));
	memcpy(&v, r.data, sizeof(v));
	dj_resp_free(&r);
	return v;
}

/* Holders of model @name in the admin list, -1 when it is not listed;
 * *@entries: how many entries of that name are listed. */
static int holders(struct fx *fx, const char *name, int *entries)
{
	const struct djinn_admin_model *e;
	struct dj_resp r;
	uint32_t count;
	int n = -1;

	admin(fx, DJINN_MSG_ADMIN_MODELS, &r);
	assert_int_equal(r.error, 0);
	memcpy(&count, r.data, sizeof(count));
	e = (const void *)(r.data + 8);
	*entries = 0;
	for (uint32_t i = 0; i < count; i++) {
		if (!strcmp(e[i].name, name)) {
			n = (int)e[i].holders;
			(*entries)++;
		}
	}
	dj_resp_free(&r);
	return n;
}

static struct djinn_session *open_session(struct fx *fx)
{
	struct djinn_session *s;

	assert_int_equal(djinn_session_open(fx->conn, NULL, &s), 0);
	return s;
}

static struct djinn_tensor *upload(struct djinn_session *s, const float *v,
				   enum djinn_segment seg, uint32_t *flags)
{
	struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_F32,
				       .ndim = 1,
				       .dims = { NFLOAT } };
	struct djinn_tensor_info ti;
	struct djinn_tensor *t;

	assert_int_equal(djinn_tensor_upload(s, &d, v, seg, &t), 0);
	assert_int_equal(djinn_tensor_info(t, &ti), 0);
	if (flags)
		*flags = ti.flags;
	return t;
}

/* @ret is -EIO, and libdjinn's message says the fault lost the state. */
static void assert_lost(int ret, const char *what)
{
	const char *msg = djinn_last_error();

	if (ret != -EIO)
		fail_msg("%s after the fault: %d (%s), want -EIO", what, ret,
			 msg);
	/* "session 3: device state lost in a fault: cpu fault 1 (...)" */
	if (!strstr(msg, "device state lost in a fault: " FAULT_BACKEND) ||
	    !strstr(msg, " fault 1 ("))
		fail_msg("%s after the fault: message '%s'", what, msg);
}

/*
 * After a fault that killed the device: @t's session's next request fails
 * at once (lost in the fault, or its connection closed under it), the
 * idle connection @raw is closed, djinnd says at err level why (@why:
 * what follows "is dead after" on that line) and exits with status 74.
 */
static void assert_died(struct fx *fx, struct djinn_tensor *t, int raw,
			const char *why)
{
	uint8_t got[16];
	int64_t t0 = dj_now_ms();
	int ret, status;

	ret = djinn_tensor_download(t, 0, sizeof(got), got);
	if (ret != -EIO && ret != -ECONNRESET && ret != -EPIPE)
		fail_msg("a request after the device died: %d (%s)", ret,
			 djinn_last_error());
	assert_true(dj_now_ms() - t0 < DJ_TIMEOUT_MS);
	assert_int_equal(dj_wait_eof(raw, DJ_TIMEOUT_MS), 1);
	close(raw);

	ret = djd_wait_exit(&fx->d, 3 * DJ_TIMEOUT_MS, &status);
	if (ret)
		fail_msg("djinnd did not exit after its device died: %s",
			 strerror(-ret));
	fx->exited = true;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != EXIT_DEVICE_DEAD) {
		djd_log_tail(&fx->d, 4096);
		fail_msg("djinnd ended with wait status %#x, want exit %d",
			 status, EXIT_DEVICE_DEAD);
	}
	/* "12:00:00.000 djinnd err: device cpu is dead after an injected
	 * fatal fault (...): exiting so that systemd restarts djinnd" */
	if (!log_has(fx, "djinnd err: device " FAULT_BACKEND, why) ||
	    !log_has(fx, " is dead after ",
		     ": exiting so that systemd restarts djinnd")) {
		djd_log_tail(&fx->d, 4096);
		fail_msg("no err line saying why djinnd exited");
	}
	assert_false(djd_log_has_report(&fx->d));
	if (getenv("DJINN_TEST_VERBOSE"))
		djd_log_tail(&fx->d, 16384);
}

/* Whether the fault @f answered killed the device (a GPU whose driver
 * keeps the error sticky after the reset): then @t's session, the idle
 * connection @raw and djinnd's exit are checked as test_fault_dead
 * checks them, and the caller checks no recovery. */
static bool died(struct fx *fx, const struct djinn_admin_fault *f,
		 struct djinn_tensor *t, int raw)
{
	if (!strstr(f->what, "the device is dead"))
		return false;
	if (!strcmp(FAULT_BACKEND, "cpu"))
		fail_msg("a simulated fault killed the device: %s", f->what);
	printf("# the device did not survive the fault (the driver keeps "
	       "the error after the context reset): the dead path is "
	       "checked, recovery is not\n");
	assert_died(fx, t, raw, " is dead after ");
	return true;
}

/* ---------------------------------------------------------------------- */

static void test_fault(void **state)
{
	struct fx *fx = *state;
	struct djinn_session *s1 = open_session(fx), *s2 = open_session(fx);
	struct djinn_session *s3;
	struct djinn_tensor *a, *b, *t1, *t3, *d3;
	struct djinn_model *m1, *m3;
	struct djinn_ctx *c1;
	struct djinn_admin_fault f;
	struct djinn_admin_vmu v0, v1, v2;
	int32_t before[NTOK], after[NTOK], tok[NTOK];
	float *x = malloc(NFLOAT * sizeof(float));
	float *y = malloc(NFLOAT * sizeof(float));
	float *got = malloc(NFLOAT * sizeof(float));
	struct dj_resp r;
	uint32_t flags;
	int n, raw;

	assert_non_null(x);
	assert_non_null(y);
	assert_non_null(got);
	for (int i = 0; i < NFLOAT; i++) {
		x[i] = (float)i + 0.5f;
		y[i] = -(float)i;
	}

	/* Before: two sessions hold tensors; s1 a model and a context. */
	a = upload(s1, x, DJINN_SEG_DATA, NULL);
	t1 = upload(s1, y, DJINN_SEG_TEXT, &flags);
	assert_int_equal(flags & DJINN_TENSOR_DEDUP, 0);
	b = upload(s2, y, DJINN_SEG_DATA, NULL);
	assert_int_equal(djinn_model_open(s1, "tiny-gpt2", &m1), 0);
	greedy_tokens(m1, prompt, 4, NTOK, before);
	assert_int_equal(djinn_ctx_new(m1, 0, &c1), 0);
	assert_int_equal(djinn_ctx_prefill(c1, prompt, 4, NULL, NULL), 0);
	assert_int_equal(djinn_tensor_download(a, 0, NFLOAT * 4, got), 0);
	assert_memory_equal(got, x, NFLOAT * 4);
	v0 = vmu_stats(fx);
	/* the text upload and the weights */
	assert_int_equal(v0.seg[0].entries, 2);

	/* The fault. */
	raw = dj_connect(fx->d.sock);
	assert_true(raw >= 0);
	admin(fx, DJINN_MSG_ADMIN_FAULT_INJECT, &r);
	if (r.error)
		fail_msg("fault injection: %s (%d)", r.msg, r.error);
	assert_int_equal(r.len, sizeof(f));
	memcpy(&f, r.data, sizeof(f));
	dj_resp_free(&r);
	f.what[sizeof(f.what) - 1] = 0;
	assert_int_equal(f.faults, 1);
	assert_true(!strncmp(f.device, FAULT_BACKEND, strlen(FAULT_BACKEND)));
	assert_true(f.what[0]);
	printf("# injected: %s: fault %llu: %s\n", f.device,
	       (unsigned long long)f.faults, f.what);
	if (died(fx, &f, a, raw))
		goto out;
	close(raw);

	/* Every old session's requests fail, with the reason. */
	assert_lost(djinn_tensor_download(a, 0, 16, got), "s1 read");
	assert_lost(djinn_tensor_download(b, 0, 16, got), "s2 read");
	assert_lost(djinn_tensor_download(t1, 0, 16, got), "s1 text read");
	assert_lost(djinn_tensor_write(a, 0, 16, x), "s1 write");
	assert_lost(djinn_ctx_decode(c1, 2, NULL, tok, NULL, NULL),
		    "s1 decode");
	{
		struct djinn_tensor *t;
		struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_F32,
					       .ndim = 1,
					       .dims = { 4 } };

		assert_lost(djinn_tensor_upload(s2, &d, x, DJINN_SEG_DATA, &t),
			    "s2 upload");
	}
	assert_lost(djinn_model_open(s2, "tiny-gpt2", &m3), "s2 model open");
	/* ...but a heartbeat still renews them. */
	assert_int_equal(djinn_session_heartbeat(s1), 0);
	assert_int_equal(djinn_session_heartbeat(s2), 0);

	/* A session made after the fault works. */
	s3 = open_session(fx);
	d3 = upload(s3, x, DJINN_SEG_DATA, NULL);
	assert_int_equal(djinn_tensor_download(d3, 0, NFLOAT * 4, got), 0);
	assert_memory_equal(got, x, NFLOAT * 4);
	/* The same text bytes make a new entry, with the bytes. */
	t3 = upload(s3, y, DJINN_SEG_TEXT, &flags);
	assert_int_equal(flags & DJINN_TENSOR_DEDUP, 0);
	assert_int_equal(djinn_tensor_download(t3, 0, NFLOAT * 4, got), 0);
	assert_memory_equal(got, y, NFLOAT * 4);
	/* The model loads again and says what it said before. */
	assert_int_equal(djinn_model_open(s3, "tiny-gpt2", &m3), 0);
	greedy_tokens(m3, prompt, 4, NTOK, after);
	assert_memory_equal(before, after, sizeof(before));
	/* listed once: the fresh entry, held by s3 alone */
	assert_int_equal(holders(fx, "tiny-gpt2", &n), 1);
	assert_int_equal(n, 1);
	/* fresh text and weights beside the stale ones s1 holds */
	v1 = vmu_stats(fx);
	assert_int_equal(v1.seg[0].entries, 4);

	/* Closing the lost sessions works and frees the stale entries. */
	assert_int_equal(djinn_session_close(s1), 0);
	assert_int_equal(djinn_session_close(s2), 0);
	/* (with each session's last reference, which a reply still being
	 * sent or a job may hold after the close is answered) */
	if (!wait_until((v2 = vmu_stats(fx)).seg[0].entries == 2, WAIT_MS))
		fail_msg("%llu text entries after the lost sessions closed, "
			 "want 2",
			 (unsigned long long)v2.seg[0].entries);
	assert_true(v2.seg[0].used < v1.seg[0].used);

	/* s3 goes on. */
	greedy_tokens(m3, prompt, 4, NTOK, tok);
	assert_memory_equal(before, tok, sizeof(before));
	assert_int_equal(djinn_model_close(m3), 0);
	assert_int_equal(djinn_session_close(s3), 0);
out:
	free(x);
	free(y);
	free(got);
}

/* Two faults: a session made between them is lost by the second. */
static void test_fault_twice(void **state)
{
	struct fx *fx = *state;
	struct djinn_session *s;
	struct djinn_tensor *t;
	float x[NFLOAT] = { 1 }, got[4];
	struct djinn_admin_fault f;
	struct dj_resp r;
	int raw = dj_connect(fx->d.sock);

	assert_true(raw >= 0);
	s = open_session(fx);
	t = upload(s, x, DJINN_SEG_DATA, NULL);
	admin(fx, DJINN_MSG_ADMIN_FAULT_INJECT, &r);
	assert_int_equal(r.error, 0);
	memcpy(&f, r.data, sizeof(f));
	dj_resp_free(&r);
	f.what[sizeof(f.what) - 1] = 0;
	if (died(fx, &f, t, raw))
		return;
	close(raw);
	assert_int_equal(djinn_session_close(s), 0);
	s = open_session(fx);
	t = upload(s, x, DJINN_SEG_DATA, NULL);
	assert_int_equal(djinn_tensor_download(t, 0, 16, got), 0);
	admin(fx, DJINN_MSG_ADMIN_FAULT_INJECT, &r);
	assert_int_equal(r.error, 0);
	memcpy(&f, r.data, sizeof(f));
	dj_resp_free(&r);
	assert_int_equal(f.faults, 2);
	assert_int_equal(djinn_tensor_download(t, 0, 16, got), -EIO);
	assert_non_null(strstr(djinn_last_error(), "fault 2"));
	assert_int_equal(djinn_session_close(s), 0);
}

/* Off by default: refused, and nothing changes. */
static void test_fault_injection_off(void **state)
{
	struct fx *fx = *state;
	struct djinn_session *s = open_session(fx);
	float x[NFLOAT] = { 3 }, got[NFLOAT];
	struct djinn_tensor *t = upload(s, x, DJINN_SEG_DATA, NULL);
	struct djinn_admin_fault_req q = { .flags = DJINN_FAULT_DEAD };
	struct dj_resp r;

	admin(fx, DJINN_MSG_ADMIN_FAULT_INJECT, &r);
	assert_int_equal(r.error, -EPERM);
	assert_non_null(strstr(r.msg, "--fault-injection"));
	dj_resp_free(&r);
	/* nor can it kill the device */
	djd_admin(&fx->d, DJINN_MSG_ADMIN_FAULT_INJECT, &q, sizeof(q), &r);
	assert_int_equal(r.error, -EPERM);
	dj_resp_free(&r);
	assert_int_equal(djinn_tensor_download(t, 0, sizeof(got), got), 0);
	assert_memory_equal(got, x, sizeof(got));
	assert_int_equal(djinn_session_close(s), 0);
}

/*
 * A fault that kills the device (DJINN_FAULT_DEAD: what
 * CUDA_ERROR_CONTAINED or a failed recovery does on a GPU): the answer
 * comes, then djinnd logs why at err, closes every connection and exits
 * with status 74; a client of a session gets -EIO or a closed
 * connection, and does not hang.
 */
static void test_fault_dead(void **state)
{
	struct fx *fx = *state;
	struct djinn_session *s = open_session(fx);
	struct djinn_admin_fault_req q = { .device = 0 };
	float x[NFLOAT] = { 7 }, got[4];
	struct djinn_tensor *t = upload(s, x, DJINN_SEG_DATA, NULL);
	struct djinn_admin_fault f;
	struct dj_resp r;
	int raw;

	/* Unknown flag bits are refused and change nothing, and so is an
	 * identity hold beside a fault. */
	q.flags = 1u << 3;
	djd_admin(&fx->d, DJINN_MSG_ADMIN_FAULT_INJECT, &q, sizeof(q), &r);
	assert_int_equal(r.error, -EINVAL);
	dj_resp_free(&r);
	q.flags = DJINN_FAULT_DEAD | DJINN_FAULT_IDENT_HOLD;
	djd_admin(&fx->d, DJINN_MSG_ADMIN_FAULT_INJECT, &q, sizeof(q), &r);
	assert_int_equal(r.error, -EINVAL);
	assert_non_null(strstr(r.msg, "an identity hold or go is alone"));
	dj_resp_free(&r);
	q.flags = DJINN_FAULT_DEAD | (1u << 31);
	djd_admin(&fx->d, DJINN_MSG_ADMIN_FAULT_INJECT, &q, sizeof(q), &r);
	assert_int_equal(r.error, -EINVAL);
	dj_resp_free(&r);
	assert_int_equal(djinn_tensor_download(t, 0, sizeof(got), got), 0);
	assert_memory_equal(got, x, sizeof(got));

	/* An idle raw connection, which must be closed. */
	raw = dj_connect(fx->d.sock);
	assert_true(raw >= 0);

	q.flags = DJINN_FAULT_DEAD;
	djd_admin(&fx->d, DJINN_MSG_ADMIN_FAULT_INJECT, &q, sizeof(q), &r);
	if (r.error)
		fail_msg("fatal fault: %s (%d)", r.msg, r.error);
	assert_int_equal(r.len, sizeof(f));
	memcpy(&f, r.data, sizeof(f));
	dj_resp_free(&r);
	f.what[sizeof(f.what) - 1] = 0;
	assert_int_equal(f.faults, 1);
	assert_non_null(strstr(f.what, "the device is dead"));
	printf("# injected: %s: %s\n", f.device, f.what);

	/* On a GPU the injected fault is a real one, which may kill the
	 * device itself (the driver keeps it sticky): the err line then
	 * names it rather than DJINN_FAULT_DEAD. */
	assert_died(fx, t, raw,
		    strcmp(FAULT_BACKEND, "cpu") ?
			    " is dead after " :
			    " is dead after an injected fatal fault (");
	/* the connection is gone: so is every call on it */
	assert_int_not_equal(djinn_session_heartbeat(s), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_fault, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_fault_twice, fx_setup,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_fault_injection_off,
						fx_setup_off, fx_teardown),
		cmocka_unit_test_setup_teardown(test_fault_dead, fx_setup,
						fx_teardown),
	};
	int ret;

	if (strcmp(FAULT_BACKEND, "cpu")) {
		char why[300];
		void *st;

		/* a GPU test: it skips where there is no GPU, and only
		 * there; on a GPU djinnd must start */
		if (no_gpu(why, sizeof(why))) {
			printf("SKIP: no GPU: %s\n", why);
			return 77;
		}
		if (start(&st, true)) {
			printf("FAIL: djinnd --backend %s does not start on "
			       "this host with a GPU (its log above says "
			       "why): %s\n",
			       FAULT_BACKEND,
			       start_why[0] ? start_why : "set-up failed");
			return 1;
		}
		fx_teardown(&st);
	}
	ret = cmocka_run_group_tests(tests, NULL, NULL);
	return ret ? 1 : 0;
}
