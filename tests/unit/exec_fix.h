/* SPDX-License-Identifier: MIT */
/*
 * The executor tests' fixture (test_exec, test_exec_kernel): the CPU
 * backend with a VMU, a stack and a session. Include after <cmocka.h>,
 * "testutil.h" and "graph/run.h".
 */
#ifndef DJINN_TEST_EXEC_FIX_H
#define DJINN_TEST_EXEC_FIX_H

#include <stdint.h>
#include <stdlib.h>

struct exec_fix {
	struct backend *b;
	struct vmu *v;
	struct vmu_stack *st;
	struct vmu_session *s;
};

/* cmocka set-up: @capacity of CPU device memory (two threads), a stack
 * of as much and a session; the struct exec_fix in *@state. */
static inline int exec_fix_setup(void **state, uint64_t capacity)
{
	struct exec_fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(cpu_backend_create(capacity, 2, &f->b), 0);
	assert_int_equal(vmu_create(f->b->provider, NULL, &f->v), 0);
	assert_int_equal(vmu_stack_create(f->v, capacity, &f->st), 0);
	assert_int_equal(vmu_session_create(f->v, "test", &f->s), 0);
	*state = f;
	return 0;
}

static inline int exec_fix_teardown(void **state)
{
	struct exec_fix *f = *state;

	vmu_session_destroy(f->s);
	vmu_stack_destroy(f->st);
	vmu_destroy(f->v);
	f->b->ops->destroy(f->b);
	free(f);
	return 0;
}

#endif /* DJINN_TEST_EXEC_FIX_H */
