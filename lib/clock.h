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

/* uint64_t, as mono_ns() is: PRIu64 prints what they make. */
#define NSEC_PER_SEC UINT64_C(1000000000)
#define NSEC_PER_MSEC UINT64_C(1000000)
#define NSEC_PER_USEC UINT64_C(1000)

static inline uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

/* @ns (a time of mono_ns(), or a duration) as a struct timespec, for
 * nanosleep(), pthread_cond_timedwait() and their kind. */
static inline struct timespec ns_to_timespec(uint64_t ns)
{
	return (struct timespec){ .tv_sec = (time_t)(ns / NSEC_PER_SEC),
				  .tv_nsec = (long)(ns % NSEC_PER_SEC) };
}

#endif /* DJINN_CLOCK_H */
