/* SPDX-License-Identifier: MIT */
/*
 * The one way an error comes back with a message: a negative errno
 * returned, and why written into the caller's buffer (which may be NULL).
 */
#ifndef DJINN_ERRMSG_H
#define DJINN_ERRMSG_H

#include <stdarg.h>
#include <stddef.h>

/* Format @fmt into @msg (when @msg and @msglen) and return @err. */
int errmsg(char *msg, size_t msglen, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
int verrmsg(char *msg, size_t msglen, int err, const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));

#endif /* DJINN_ERRMSG_H */
