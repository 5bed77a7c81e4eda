/* SPDX-License-Identifier: MIT */
/*
 * What the model runtime's tests share (test_model_forward,
 * test_model_arch): reading a checkpoint's tensors as doubles for the
 * references, and the fixture, the CPU backend with a VMU, a stack, a
 * session and a model store, with calls that fail the test with the
 * runtime's message. Include after <cmocka.h>, "model/runtime.h" and
 * "testutil.h".
 */
#ifndef DJINN_TEST_MODEL_H
#define DJINN_TEST_MODEL_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------- */
/* Checkpoint values, for the references */

static inline double bf16_val(const uint8_t *p)
{
	uint32_t x = (uint32_t)(p[0] | p[1] << 8) << 16;
	float f;

	memcpy(&f, &x, 4);
	return f;
}

static inline double f16_val(const uint8_t *p)
{
	unsigned int h = p[0] | p[1] << 8;
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);

	return h & 0x8000 ? -v : v;
}

/* The tensor of @set named by @fmt and @ap, or fail. */
static inline const struct st_tensor *ref_tensor_v(const struct st_set *set,
						   const char *fmt, va_list ap)
{
	const struct st_tensor *t;
	char name[128];

	vsnprintf(name, sizeof(name), fmt, ap);
	t = st_set_find(set, name);
	if (!t)
		fail_msg("reference: no tensor %s", name);
	return t;
}

/* @t's values as doubles (xmalloc'd); f32, bf16 or f16, else fail. */
static inline double *ref_values(const struct st_tensor *t)
{
	double *w;

	if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16)
		fail_msg("reference: %s: dtype %d", t->name, t->dtype);
	w = xmalloc(t->nelem * sizeof(double));
	for (uint64_t i = 0; i < t->nelem; i++) {
		float f;

		if (t->dtype == ST_F32) {
			memcpy(&f, t->data + 4 * i, 4);
			w[i] = f;
		} else if (t->dtype == ST_BF16) {
			w[i] = bf16_val(t->data + 2 * i);
		} else {
			w[i] = f16_val(t->data + 2 * i);
		}
	}
	return w;
}

/* ---------------------------------------------------------------------- */
/* Fixture: the CPU backend, a VMU, a stack, a session and a store */

/*
 * struct model_fix - a test's runtime
 * @arg: the test's initial state (cmocka's), or NULL
 */
struct model_fix {
	const void *arg;
	struct backend *b;
	struct model_env env;
	struct vmu_session *s;
	struct model_store *ms;
};

/* cmocka set-up on backend @b (the fixture's from here on): a VMU, a
 * 64 MiB stack, a session and a store on @dir; the struct model_fix in
 * *@state (its @arg what *@state held). */
static inline int model_fix_setup_on(void **state, const char *dir,
				     struct backend *b)
{
	struct model_fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->arg = *state;
	f->b = b;
	assert_int_equal(vmu_create(f->b->provider, NULL, &f->env.v), 0);
	assert_int_equal(vmu_stack_create(f->env.v, 64 * MiB, &f->env.st), 0);
	assert_int_equal(vmu_session_create(f->env.v, "test", &f->s), 0);
	assert_int_equal(model_store_create(f->env.v, dir, &f->ms), 0);
	f->env.b = f->b;
	*state = f;
	return 0;
}

/* The same on 256 MiB of CPU device memory (two threads). */
static inline int model_fix_setup(void **state, const char *dir)
{
	struct backend *b;

	assert_int_equal(cpu_backend_create(256 * MiB, 2, &b), 0);
	return model_fix_setup_on(state, dir, b);
}

static inline int model_fix_teardown(void **state)
{
	struct model_fix *f = *state;

	model_store_destroy(f->ms);
	vmu_session_destroy(f->s);
	vmu_stack_destroy(f->env.st);
	vmu_destroy(f->env.v);
	f->b->ops->destroy(f->b);
	free(f);
	return 0;
}

/* A context of @h for @max tokens, or fail. */
static inline struct model_ctx *ctx(struct model_hold *h, uint32_t max)
{
	struct model_ctx *c;
	char msg[ST_MSG_LEN];

	if (model_ctx_new(h, max, &c, msg, sizeof(msg)))
		fail_msg("model_ctx_new(%u): %s", max, msg);
	return c;
}

/* Prefill @n tokens @ids into @c; the last one's logits into @logits
 * (when not NULL). Or fail. */
static inline void prefill(struct model_fix *f, struct model_ctx *c,
			   const int32_t *ids, uint32_t n, float *logits)
{
	char msg[ST_MSG_LEN];

	if (model_ctx_prefill(c, &f->env, ids, n, logits, msg, sizeof(msg)))
		fail_msg("prefill: %s", msg);
}

#endif /* DJINN_TEST_MODEL_H */
