/* SPDX-License-Identifier: MIT */
/*
 * The one monotonic clock of every user-space part (djinnd, libdjinn,
 * the tools): nanoseconds of CLOCK_MONOTONIC, which the kernel module's
 * and djinnd's deadlines, leases and timers are all measured in.
 */
#ifndef DJINN_CLOCK_H
#define DJINN_CLOCK_H

#include <stdint.h>
#include <time.h>

#define NSEC_PER_SEC 1000000000ull
#define NSEC_PER_MSEC 1000000ull
#define NSEC_PER_USEC 1000ull

static inline uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

#endif /* DJINN_CLOCK_H */
