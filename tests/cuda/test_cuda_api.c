// SPDX-License-Identifier: MIT
/*
 * cuda_api.c without a GPU: the driver-version check, the sticky and
 * fatal errors, and the choice of cuBLAS.
 *
 * The cuBLAS choice runs cublas_pick(), the function djinnd's
 * cublas_api_load() runs, over stand-in libraries (cublas_stub.c, built
 * by mk/cuda.mk beside this binary as cublas-*.so): each case copies
 * some of them into a temporary directory under cuBLAS's sonames and
 * gives the directory to cublas_pick() where djinnd gives NULL (the
 * dynamic linker's search). This file defines dj_log(), so what
 * cuda_api.c logs comes here instead of djinnd's log, for the tests to
 * read.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
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
#include <dlfcn.h>

#include "array_size.h"
#include "backend/cuda/cuda_api.h"
#include "logcap.h"

/* ------------------------------------------------------------------
 * Stand-ins, copied into a temporary directory
 */
static char stubdir[PATH_MAX];

struct tree {
	char dir[PATH_MAX];
};

static void tree_make(struct tree *t)
{
	snprintf(t->dir, sizeof(t->dir), "/tmp/djinn-cublas-XXXXXX");
	assert_non_null(mkdtemp(t->dir));
	logbuf[0] = '\0';
}

/* A copy (its own inode, so its own dlopen() handle) of @stub as @name */
static void tree_add(struct tree *t, const char *stub, const char *name)
{
	char from[PATH_MAX + 32], to[PATH_MAX + 32], buf[65536];
	int in, out;
	ssize_t n;

	snprintf(from, sizeof(from), "%s/cublas-%s.so", stubdir, stub);
	snprintf(to, sizeof(to), "%s/%s", t->dir, name);
	in = open(from, O_RDONLY);
	if (in < 0)
		fail_msg("%s: %s (mk/cuda.mk builds it)", from,
			 strerror(errno));
	out = open(to, O_WRONLY | O_CREAT | O_EXCL, 0755);
	assert_true(out >= 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		assert_int_equal(write(out, buf, (size_t)n), n);
	assert_int_equal(n, 0);
	close(in);
	close(out);
}

static int rm_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	return remove(path);
}

static void tree_remove(struct tree *t)
{
	assert_int_equal(nftw(t->dir, rm_one, 8, FTW_DEPTH | FTW_PHYS), 0);
}

/* cublas_pick() over @dirs with the sonames for @driver, as djinnd does */
static int pick(const char *const *dirs, size_t nr_dirs, int driver,
		struct cublas_api *b, char *msg, size_t msglen)
{
	char names[16][CUBLAS_SONAME_LEN];
	size_t n = cublas_sonames(driver, names, ARRAY_SIZE(names));

	return cublas_pick(dirs, nr_dirs,
			   (const char(*)[CUBLAS_SONAME_LEN])names, n, b, msg,
			   msglen);
}

/* The stand-in's own counters, in the library @b kept open. */
static int counter(const struct cublas_api *b, const char *name)
{
	int *p = dlsym(b->lib, name);

	assert_non_null(p);
	return *p;
}

static bool ends_with(const char *s, const char *tail)
{
	size_t a = strlen(s), b = strlen(tail);

	return a >= b && !strcmp(s + a - b, tail);
}

/* ------------------------------------------------------------------
 * Versions
 */
static void test_version_check(void **state)
{
	char msg[512];

	/* the same, or a newer driver: runs, nothing to say */
	assert_int_equal(cu_version_check(13000, 13000, msg, sizeof(msg)), 0);
	assert_string_equal(msg, "");
	assert_int_equal(cu_version_check(13020, 13000, msg, sizeof(msg)), 0);
	assert_int_equal(cu_version_check(14000, 13000, msg, sizeof(msg)), 0);
	assert_int_equal(cu_version_check(12080, 12040, msg, sizeof(msg)), 0);

	/* an older major: refused, with both versions */
	assert_int_equal(cu_version_check(12080, 13000, msg, sizeof(msg)),
			 -ENOSYS);
	assert_non_null(strstr(msg, "CUDA 12.8,"));
	assert_non_null(strstr(msg, "CUDA 13.0 djinnd's kernels"));
	assert_int_equal(cu_version_check(11040, 12000, msg, sizeof(msg)),
			 -ENOSYS);
	assert_non_null(strstr(msg, "11.4"));
	assert_non_null(strstr(msg, "12.0"));

	/* an older minor: runs the SASS only, said with both versions */
	assert_int_equal(cu_version_check(13000, 13010, msg, sizeof(msg)), 1);
	assert_non_null(strstr(msg, "CUDA 13.0,"));
	assert_non_null(strstr(msg, "CUDA 13.1"));
	assert_non_null(strstr(msg, "PTX"));

	/* a driver that does not say: refused */
	assert_int_equal(cu_version_check(0, 13000, msg, sizeof(msg)), -ENOSYS);
	assert_non_null(strstr(msg, "13.0"));
	assert_int_equal(cu_version_check(-1, 13000, msg, sizeof(msg)),
			 -ENOSYS);

	/* a short buffer is cut, not overrun */
	memset(msg, 'x', sizeof(msg));
	assert_int_equal(cu_version_check(12080, 13000, msg, 8), -ENOSYS);
	assert_int_equal(strlen(msg), 7);
}

/* ------------------------------------------------------------------
 * Sticky and fatal errors
 */
static void test_sticky_fatal(void **state)
{
	/* the GPU's fault, not the context's: sticky and fatal */
	static const CUresult fatal[] = {
		(CUresult)226, /* CUDA_ERROR_CONTAINED */
		(CUresult)220, /* CUDA_ERROR_NVLINK_UNCORRECTABLE */
		(CUresult)721, /* CUDA_ERROR_TENSOR_MEMORY_LEAK */
		CUDA_ERROR_ECC_UNCORRECTABLE,
	};
	/* sticky, a context reset clears them */
	static const CUresult sticky[] = {
		CUDA_ERROR_ILLEGAL_ADDRESS,
		CUDA_ERROR_LAUNCH_FAILED,
		CUDA_ERROR_LAUNCH_TIMEOUT,
		CUDA_ERROR_ILLEGAL_INSTRUCTION,
		CUDA_ERROR_MISALIGNED_ADDRESS,
		CUDA_ERROR_INVALID_ADDRESS_SPACE,
		CUDA_ERROR_INVALID_PC,
		CUDA_ERROR_HARDWARE_STACK_ERROR,
		CUDA_ERROR_ASSERT,
		CUDA_ERROR_CONTEXT_IS_DESTROYED,
		CUDA_ERROR_UNKNOWN,
		(CUresult)911, /* CUDA_ERROR_EXTERNAL_DEVICE */
	};
	/* neither: the call failed, the context is fine */
	static const CUresult plain[] = {
		CUDA_SUCCESS,
		CUDA_ERROR_INVALID_VALUE,
		CUDA_ERROR_OUT_OF_MEMORY,
		CUDA_ERROR_NOT_READY,
		CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
		CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
		CUDA_ERROR_INVALID_PTX,
		CUDA_ERROR_NOT_FOUND,
		CUDA_ERROR_NO_DEVICE,
	};
	size_t nr_fatal = 0;

	for (size_t i = 0; i < ARRAY_SIZE(fatal); i++) {
		assert_true(cu_error_is_fatal(fatal[i]));
		assert_true(cu_error_is_sticky(fatal[i]));
	}
	for (size_t i = 0; i < ARRAY_SIZE(sticky); i++) {
		assert_true(cu_error_is_sticky(sticky[i]));
		assert_false(cu_error_is_fatal(sticky[i]));
	}
	for (size_t i = 0; i < ARRAY_SIZE(plain); i++) {
		assert_false(cu_error_is_sticky(plain[i]));
		assert_false(cu_error_is_fatal(plain[i]));
	}
	/* over every value: fatal only those four, and each also sticky */
	for (int r = 0; r < 1100; r++) {
		if (!cu_error_is_fatal((CUresult)r))
			continue;
		assert_true(cu_error_is_sticky((CUresult)r));
		nr_fatal++;
	}
	assert_int_equal(nr_fatal, ARRAY_SIZE(fatal));
#if CUDA_VERSION >= 13000
	assert_true(cu_error_is_fatal(CUDA_ERROR_CONTAINED));
	assert_true(cu_error_is_fatal(CUDA_ERROR_NVLINK_UNCORRECTABLE));
	assert_true(cu_error_is_fatal(CUDA_ERROR_TENSOR_MEMORY_LEAK));
	assert_true(cu_error_is_sticky(CUDA_ERROR_EXTERNAL_DEVICE));
#endif
}

/* ------------------------------------------------------------------
 * cuBLAS sonames, best first
 */
static void test_sonames(void **state)
{
	char n[16][CUBLAS_SONAME_LEN];
	size_t k;

	/* a CUDA 13 driver: its own major first, then older ones */
	k = cublas_sonames(13000, n, ARRAY_SIZE(n));
	assert_int_equal(k, 4);
	assert_string_equal(n[0], "libcublas.so.13");
	assert_string_equal(n[1], "libcublas.so.12");
	assert_string_equal(n[2], "libcublas.so.11");
	assert_string_equal(n[3], "libcublas.so");

	/* a CUDA 12 driver: never .13, which needs a newer driver */
	k = cublas_sonames(12080, n, ARRAY_SIZE(n));
	assert_int_equal(k, 3);
	assert_string_equal(n[0], "libcublas.so.12");
	assert_string_equal(n[1], "libcublas.so.11");
	assert_string_equal(n[2], "libcublas.so");

	/* a driver newer than any cuBLAS here: tried first all the same */
	k = cublas_sonames(14010, n, ARRAY_SIZE(n));
	assert_int_equal(k, 5);
	assert_string_equal(n[0], "libcublas.so.14");
	assert_string_equal(n[1], "libcublas.so.13");

	/* unknown: the CUDA djinnd was built with */
	k = cublas_sonames(0, n, ARRAY_SIZE(n));
	assert_true(k >= 2);
	{
		char want[CUBLAS_SONAME_LEN];

		snprintf(want, sizeof(want), "libcublas.so.%d",
			 CUDA_VERSION / 1000);
		assert_string_equal(n[0], want);
	}

	/* room for two */
	k = cublas_sonames(13000, n, 2);
	assert_int_equal(k, 2);
	assert_string_equal(n[1], "libcublas.so.12");
}

/* ------------------------------------------------------------------
 * cuBLAS chosen: a handle made and destroyed
 */

/* .13 is there but cannot make a handle: skipped, named; .12 taken */
static void test_pick_falls_through(void **state)
{
	struct cublas_api b;
	struct tree t;
	char msg[1024], skipped[PATH_MAX + 32];
	const char *dirs[1];

	tree_make(&t);
	tree_add(&t, "fail", "libcublas.so.13");
	tree_add(&t, "ok", "libcublas.so.12");
	dirs[0] = t.dir;
	assert_int_equal(pick(dirs, 1, 13000, &b, msg, sizeof(msg)), 0);
	assert_string_equal(b.version, "libcublas.so.12");
	assert_true(ends_with(b.path, "/libcublas.so.12"));
	assert_non_null(strstr(b.path, t.dir));
	assert_int_equal(b.release, 130100);
	assert_non_null(b.Create);
	assert_non_null(b.GemmStridedBatchedEx);
	/* one handle made and destroyed, no more */
	assert_int_equal(counter(&b, "stub_creates"), 1);
	assert_int_equal(counter(&b, "stub_destroys"), 1);

	snprintf(skipped, sizeof(skipped), "%s/libcublas.so.13", t.dir);
	assert_true(logged(LOG_WARNING, skipped, "CUBLAS_STATUS_ALLOC_FAILED"));
	assert_true(logged(LOG_NOTICE, "libcublas.so.12", "13.1.0"));
	assert_false(logged(LOG_ERR, "cuBLAS", NULL));
	dlclose(b.lib);
	tree_remove(&t);
}

/* Both work: the driver's major decides, whatever the directory order */
static void test_pick_driver_major(void **state)
{
	struct cublas_api b;
	struct tree t12, t13;
	char msg[1024];
	const char *dirs[2];

	tree_make(&t12);
	tree_make(&t13);
	tree_add(&t12, "ok", "libcublas.so.12");
	tree_add(&t13, "ok", "libcublas.so.13");
	dirs[0] = t12.dir;
	dirs[1] = t13.dir;

	assert_int_equal(pick(dirs, 2, 13000, &b, msg, sizeof(msg)), 0);
	assert_string_equal(b.version, "libcublas.so.13");
	assert_non_null(strstr(b.path, t13.dir));
	dlclose(b.lib);

	assert_int_equal(pick(dirs, 2, 12080, &b, msg, sizeof(msg)), 0);
	assert_string_equal(b.version, "libcublas.so.12");
	assert_non_null(strstr(b.path, t12.dir));
	dlclose(b.lib);

	/* .13 alone on a CUDA 12 driver: never tried, so none */
	assert_int_equal(pick(&dirs[1], 1, 12080, &b, msg, sizeof(msg)),
			 -ENOENT);
	assert_null(b.lib);
	tree_remove(&t12);
	tree_remove(&t13);
}

/* Every way of not working, and then none works: loud, and said */
static void test_pick_none_works(void **state)
{
	struct cublas_api b;
	struct tree t;
	char msg[1024];
	const char *dirs[1];

	tree_make(&t);
	tree_add(&t, "fail", "libcublas.so.13"); /* no handle */
	tree_add(&t, "nogemm", "libcublas.so.12"); /* an entry point short */
	tree_add(&t, "needs", "libcublas.so.11"); /* a library it needs */
	dirs[0] = t.dir;
	assert_int_equal(pick(dirs, 1, 13000, &b, msg, sizeof(msg)), -ENOENT);
	assert_null(b.lib);
	assert_non_null(strstr(msg, "libcublas.so.13: cublasCreate_v2: "
				    "CUBLAS_STATUS_ALLOC_FAILED (3)"));
	assert_non_null(strstr(
		msg, "libcublas.so.12: it lacks cublasGemmStridedBatchedEx"));
	assert_non_null(strstr(msg, "libdjinn-missing.so.1"));
	assert_true(logged(LOG_WARNING, "libcublas.so.13", "trying"));
	assert_true(logged(LOG_WARNING, "libcublas.so.12", "lacks"));
	assert_true(logged(LOG_WARNING, "libcublas.so.11",
			   "libdjinn-missing.so.1"));
	assert_true(logged(LOG_ERR, "no cuBLAS works", "fallback"));
	tree_remove(&t);
}

/* libcublas.so a link to libcublas.so.13: that file is tried once */
static void test_pick_same_file_once(void **state)
{
	struct cublas_api b;
	struct tree t;
	char msg[1024], link[PATH_MAX + 32];
	const char *dirs[1];

	tree_make(&t);
	tree_add(&t, "fail", "libcublas.so.13");
	snprintf(link, sizeof(link), "%s/libcublas.so", t.dir);
	assert_int_equal(symlink("libcublas.so.13", link), 0);
	dirs[0] = t.dir;
	assert_int_equal(pick(dirs, 1, 13000, &b, msg, sizeof(msg)), -ENOENT);
	assert_true(logged(LOG_WARNING, "libcublas.so.13", "trying"));
	assert_false(logged(LOG_WARNING, "libcublas.so ", NULL));
	assert_true(logged(LOG_DEBUG, "libcublas.so:", "tried already"));
	assert_null(strstr(msg, "libcublas.so:"));
	tree_remove(&t);
}

/* Nothing there at all: quietly tried, loudly given up */
static void test_pick_nothing_found(void **state)
{
	struct cublas_api b;
	struct tree t;
	char msg[1024];
	const char *dirs[1];

	tree_make(&t);
	dirs[0] = t.dir;
	assert_int_equal(pick(dirs, 1, 13000, &b, msg, sizeof(msg)), -ENOENT);
	assert_non_null(strstr(msg, "none of libcublas.so.13 .. libcublas.so "
				    "found"));
	assert_false(logged(LOG_WARNING, "cuBLAS", NULL));
	assert_true(logged(LOG_ERR, "no cuBLAS works", "fallback"));
	tree_remove(&t);
}

static int find_stubs(void **state)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n <= 0)
		return -1;
	self[n] = '\0';
	snprintf(stubdir, sizeof(stubdir), "%s", dirname(self));
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_version_check),
		cmocka_unit_test(test_sticky_fatal),
		cmocka_unit_test(test_sonames),
		cmocka_unit_test(test_pick_falls_through),
		cmocka_unit_test(test_pick_driver_major),
		cmocka_unit_test(test_pick_none_works),
		cmocka_unit_test(test_pick_same_file_once),
		cmocka_unit_test(test_pick_nothing_found),
	};

	return cmocka_run_group_tests(tests, find_stubs, NULL);
}
