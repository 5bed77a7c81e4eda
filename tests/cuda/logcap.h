/* SPDX-License-Identifier: MIT */
/*
 * The log of the CUDA backend's host-only tests: every line the code
 * under test logs through djinnd's dj_log(), kept as "<level>text\n" in
 * logbuf (clear it with logbuf[0] = 0), and logged() to look for one.
 * Include once per test program: it defines dj_log().
 */
#ifndef DJINN_TESTS_CUDA_LOGCAP_H
#define DJINN_TESTS_CUDA_LOGCAP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

static char logbuf[32768];

void dj_log(int level, const char *fmt, ...)
{
	size_t used = strlen(logbuf);
	va_list ap;
	int n;

	n = snprintf(logbuf + used, sizeof(logbuf) - used, "<%d>", level);
	if (n < 0 || (size_t)n >= sizeof(logbuf) - used)
		return;
	used += (size_t)n;
	va_start(ap, fmt);
	vsnprintf(logbuf + used, sizeof(logbuf) - used, fmt, ap);
	va_end(ap);
	used = strlen(logbuf);
	if (used + 1 < sizeof(logbuf))
		strcat(logbuf, "\n");
}

/* Whether a line logged at @level holds @a and then @b (@b NULL: @a). */
static inline bool logged(int level, const char *a, const char *b)
{
	char tag[8];
	const char *p = logbuf;

	snprintf(tag, sizeof(tag), "<%d>", level);
	while ((p = strstr(p, tag))) {
		const char *end = strchr(p, '\n');
		const char *at = strstr(p, a);

		if (at && (!end || at < end) &&
		    (!b || ((at = strstr(at, b)) && (!end || at < end))))
			return true;
		p += strlen(tag);
	}
	return false;
}

#endif /* DJINN_TESTS_CUDA_LOGCAP_H */
