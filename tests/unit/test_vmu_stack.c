// SPDX-License-Identifier: MIT
/*
 * Unit tests for the VMU's stack segment (djinnd/vmu/stack.c) over the host
 * provider: bump allocation, alignment, misuse, growth drawn on a
 * reservation. The fixture is in test_vmu.h.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test_vmu.h"

/* ---------------------------------------------------------------------- */
/* 11. Stack */

static void test_stack_basic(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g, peak = 3 * g + 512;
	struct vmu_stats st0, st;
	uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;

	st0 = get_stats(f->v);
	assert_int_equal(vmu_stack_create(f->v, 16 * g, &f->stack), 0);
	st = get_stats(f->v);
	assert_int_equal(st.seg[VMU_SEG_STACK].entries, 1);
	assert_int_equal(st.seg[VMU_SEG_STACK].used, 0);
	assert_int_equal(vmu_stack_need(f->stack, peak), vmu_round(f->v, peak));

	assert_int_equal(vmu_stack_begin(f->stack, peak, NULL), 0);
	assert_int_equal(get_stats(f->v).seg[VMU_SEG_STACK].used, 4 * g);
	assert_int_equal(vmu_stack_used(f->stack), 0);
	assert_int_equal(vmu_stack_alloc(f->stack, g, 0, &a0), 0);
	assert_int_equal(a0 % 256, 0);
	assert_int_equal(vmu_stack_used(f->stack), g);
	assert_int_equal(vmu_stack_alloc(f->stack, 2 * g, 0, &a1), 0);
	assert_true(a1 >= a0 + g);
	assert_int_equal(vmu_stack_used(f->stack), 3 * g);
	assert_int_equal(vmu_stack_alloc(f->stack, 512, 0, &a2), 0);
	assert_int_equal(vmu_stack_used(f->stack), peak);
	assert_int_equal(vmu_stack_alloc(f->stack, 1, 0, &a3), -ENOSPC);
	assert_int_equal(vmu_stack_used(f->stack), peak);
	/* the memory is there */
	memset((void *)(uintptr_t)a0, 0x11, g);
	memset((void *)(uintptr_t)a1, 0x22, 2 * g);
	memset((void *)(uintptr_t)a2, 0x33, 512);
	assert_int_equal(dev_ptr(a0)[g - 1], 0x11);

	assert_int_equal(vmu_stack_end(f->stack), peak);
	assert_int_equal(vmu_stack_used(f->stack), 0);
	st = get_stats(f->v);
	assert_int_equal(st.stack_last_peak, peak);
	assert_int_equal(st.seg[VMU_SEG_STACK].allocs,
			 st0.seg[VMU_SEG_STACK].allocs + 3);
	assert_int_equal(st.seg[VMU_SEG_STACK].frees,
			 st0.seg[VMU_SEG_STACK].frees + 1);

	/* the backing stays for the next request */
	assert_int_equal(st.seg[VMU_SEG_STACK].used, 4 * g);
	assert_int_equal(vmu_stack_need(f->stack, peak), 0);
	assert_int_equal(vmu_stack_need(f->stack, 4 * g), 0);
	assert_int_equal(vmu_stack_need(f->stack, peak + 2 * g), 2 * g);

	/* a new request starts from the bottom again */
	assert_int_equal(vmu_stack_begin(f->stack, g, NULL), 0);
	assert_int_equal(vmu_stack_alloc(f->stack, g, 0, &a3), 0);
	assert_int_equal(a3, a0);
	assert_int_equal(vmu_stack_end(f->stack), g);
	assert_int_equal(get_stats(f->v).stack_last_peak, g);

	/* a bigger request maps more */
	assert_int_equal(vmu_stack_begin(f->stack, peak + 2 * g, NULL), 0);
	assert_int_equal(get_stats(f->v).seg[VMU_SEG_STACK].used, 6 * g);
	assert_int_equal(vmu_stack_end(f->stack), 0);

	/* beyond max_size: errno not documented */
	assert_true(vmu_stack_begin(f->stack, 16 * g + 1, NULL) < 0);
	check_invariants(f->v);

	vmu_stack_destroy(f->stack);
	f->stack = NULL;
	st = get_stats(f->v);
	assert_int_equal(st.seg[VMU_SEG_STACK].entries, 0);
	assert_int_equal(st.seg[VMU_SEG_STACK].used, 0);
}

static void test_stack_align(void **state)
{
	struct fix *f = *state;
	uint64_t base = 0, a = 0, used;

	assert_int_equal(vmu_stack_create(f->v, 8 * f->g, &f->stack), 0);
	assert_int_equal(vmu_stack_begin(f->stack, 4 * f->g, NULL), 0);

	assert_int_equal(vmu_stack_alloc(f->stack, 1, 0, &base), 0);
	assert_int_equal(base % 256, 0);
	assert_int_equal(vmu_stack_alloc(f->stack, 1, 4096, &a), 0);
	assert_int_equal(a % 4096, 0);
	assert_true(a > base);
	assert_int_equal(vmu_stack_alloc(f->stack, 1, 0, &a), 0);
	assert_int_equal(a % 256, 0);
	assert_int_equal(vmu_stack_used(f->stack), a + 1 - base);

	used = vmu_stack_used(f->stack);
	assert_int_equal(vmu_stack_alloc(f->stack, 100, 3, &a), -EINVAL);
	assert_int_equal(vmu_stack_alloc(f->stack, 100, 96, &a), -EINVAL);
	assert_int_equal(vmu_stack_alloc(f->stack, 100, 4097, &a), -EINVAL);
	assert_int_equal(vmu_stack_used(f->stack), used);

	assert_int_equal(vmu_stack_alloc(f->stack, 1, 1, &a), 0);
	assert_int_equal(a, base + used);
	assert_int_equal(vmu_stack_alloc(f->stack, 1, f->g, &a), 0);
	assert_int_equal(a % f->g, 0);
	vmu_stack_end(f->stack);
}

static void test_stack_misuse(void **state)
{
	struct fix *f = *state;
	uint64_t a = 0;

	assert_int_equal(vmu_stack_create(f->v, 8 * f->g, &f->stack), 0);
	/* no request running: errno not documented */
	assert_true(vmu_stack_alloc(f->stack, 1, 0, &a) < 0);
	assert_int_equal(vmu_stack_used(f->stack), 0);
	assert_int_equal(vmu_stack_begin(f->stack, f->g, NULL), 0);
	assert_int_equal(vmu_stack_end(f->stack), 0);
	assert_true(vmu_stack_alloc(f->stack, 1, 0, &a) < 0);
	assert_int_equal(vmu_stack_used(f->stack), 0);
}

static void test_stack_resv(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct vmu_resv r = { 0 };
	uint64_t need;

	assert_int_equal(vmu_stack_create(f->v, 16 * g, &f->stack), 0);
	need = vmu_stack_need(f->stack, 5 * g);
	assert_int_equal(need, 5 * g);
	assert_int_equal(vmu_admit(f->v, need, &r, NULL, 0), 0);
	assert_int_equal(vmu_stack_begin(f->stack, 5 * g, &r), 0);
	assert_int_equal(r.bytes, 0);
	assert_int_equal(get_stats(f->v).reserved, 0);
	assert_int_equal(get_stats(f->v).seg[VMU_SEG_STACK].used, 5 * g);
	vmu_stack_end(f->stack);
	vmu_resv_release(&r);
	assert_int_equal(vmu_stack_need(f->stack, 5 * g), 0);
	check_invariants(f->v);
}

/* Pressure counts a stack's backing while a request runs on it, not
 * while it waits idle for the next one (admission trims it for nothing):
 * a stack per compute thread does not read as a full device. */
static void test_stack_pressure(void **state)
{
	struct fix *f = *state;
	const uint64_t g = f->g;
	struct vmu_stats st;

	assert_int_equal(vmu_stack_create(f->v, 64 * g, &f->stack), 0);
	assert_int_equal(get_stats(f->v).pressure, VMU_PRESSURE_NORMAL);
	/* 56 of 64 granules: 87.5 %, past the warning's 80 % */
	assert_int_equal(vmu_stack_begin(f->stack, 56 * g, NULL), 0);
	assert_int_equal(get_stats(f->v).pressure, VMU_PRESSURE_WARNING);
	assert_int_equal(vmu_stack_end(f->stack), 0);
	st = get_stats(f->v);
	assert_int_equal(st.seg[VMU_SEG_STACK].used, 56 * g);
	assert_int_equal(st.committed, 56 * g);
	assert_int_equal(st.pressure, VMU_PRESSURE_NORMAL);
	/* claimed again: it counts again */
	assert_int_equal(vmu_stack_begin(f->stack, 62 * g, NULL), 0);
	assert_int_equal(get_stats(f->v).pressure, VMU_PRESSURE_CRITICAL);
	vmu_stack_end(f->stack);
	assert_int_equal(get_stats(f->v).pressure, VMU_PRESSURE_NORMAL);
	check_invariants(f->v);
}

/* ---------------------------------------------------------------------- */

int main(void)
{
	const struct CMUnitTest tests[] = {
		/* 11 */
		T(test_stack_basic, setup_64m),
		T(test_stack_align, setup_64m),
		T(test_stack_misuse, setup_64m),
		T(test_stack_resv, setup_4m),
		T(test_stack_pressure, setup_4m),
	};

	/* a deadlock fails the run instead of hanging it */
	alarm(600);
	return cmocka_run_group_tests_name("vmu_stack", tests, NULL, NULL);
}
