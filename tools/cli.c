// SPDX-License-Identifier: MIT
/* What the command-line tools share (cli.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "array_size.h"
#include "cli.h"

int usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", tool_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	usage(stderr);
	return 2;
}

#define E(x) [x] = #x
static const char *const errno_names[] = {
	E(EPERM),	 E(ENOENT),	     E(ESRCH),	    E(EINTR),
	E(EIO),		 E(ENXIO),	     E(E2BIG),	    E(EBADF),
	E(EAGAIN),	 E(ENOMEM),	     E(EACCES),	    E(EFAULT),
	E(EBUSY),	 E(EEXIST),	     E(ENODEV),	    E(ENOTDIR),
	E(EISDIR),	 E(EINVAL),	     E(ENFILE),	    E(EMFILE),
	E(ENOTTY),	 E(ENOSPC),	     E(EPIPE),	    E(ERANGE),
	E(ENAMETOOLONG), E(ENOSYS),	     E(ELOOP),	    E(EPROTO),
	E(EBADMSG),	 E(EOVERFLOW),	     E(ENOTSOCK),   E(EMSGSIZE),
	E(EPROTOTYPE),	 E(EPROTONOSUPPORT), E(EOPNOTSUPP), E(EADDRINUSE),
	E(ENETDOWN),	 E(ECONNABORTED),    E(ECONNRESET), E(ENOBUFS),
	E(ENOTCONN),	 E(ESHUTDOWN),	     E(ETIMEDOUT),  E(ECONNREFUSED),
	E(EDQUOT),	 E(ECANCELED),
};
#undef E

const char *errno_name(int err)
{
	static char buf[24];

	if (err < 0)
		err = -err;
	if ((size_t)err < ARRAY_SIZE(errno_names) && errno_names[err])
		return errno_names[err];
	snprintf(buf, sizeof(buf), "errno %d", err);
	return buf;
}

int parse_u64(const char *s, uint64_t max, uint64_t *v)
{
	char *end;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return errno || *end || *v > max ? -EINVAL : 0;
}
