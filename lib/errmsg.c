// SPDX-License-Identifier: MIT
#include <stdio.h>

#include "errmsg.h"

int verrmsg(char *msg, size_t msglen, int err, const char *fmt, va_list ap)
{
	if (msg && msglen)
		vsnprintf(msg, msglen, fmt, ap);
	return err;
}

int errmsg(char *msg, size_t msglen, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	verrmsg(msg, msglen, err, fmt, ap);
	va_end(ap);
	return err;
}
