/* SPDX-License-Identifier: MIT */
/*
 * ARRAY_SIZE() for every user-space part (djinnd, libdjinn, the tools,
 * tests and benchmarks), as the kernel's <linux/array_size.h> has it:
 * the number of elements of an array, and a build error, not a wrong
 * count, when handed a pointer (an array parameter, say). GNU C, which
 * gcc and clang both speak.
 */
#ifndef DJINN_ARRAY_SIZE_H
#define DJINN_ARRAY_SIZE_H

/* 0, or a build error when @e is true */
#define BUILD_BUG_ON_ZERO(e) ((int)(sizeof(struct { int : (-!!(e)); })))
#define __same_type(a, b) __builtin_types_compatible_p(typeof(a), typeof(b))
#define __must_be_array(a) BUILD_BUG_ON_ZERO(__same_type((a), &(a)[0]))

#define ARRAY_SIZE(arr) (sizeof(arr) / sizeof((arr)[0]) + __must_be_array(arr))

#endif /* DJINN_ARRAY_SIZE_H */
