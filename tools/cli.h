/* SPDX-License-Identifier: MIT */
/*
 * What the command-line tools (djinn, djinnctl) share: their usage
 * errors, errno names for their one-line failure messages and strict
 * number parsing for their arguments.
 */
#ifndef DJINN_TOOLS_CLI_H
#define DJINN_TOOLS_CLI_H

#include <stdint.h>
#include <stdio.h>

/* Each tool defines these two: its name, which starts its messages, and
 * its usage text, printed to @f. */
extern const char tool_name[];
void usage(FILE *f);

/* "TOOL: MESSAGE" and the usage on stderr; returns the exit status 2. */
int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "ENOENT" for 2 or -2; "errno 200" for what the table lacks (in a static
 * buffer, overwritten by the next such call). */
const char *errno_name(int err);

/* A decimal in [0, @max], digits only: 0 or -EINVAL. */
int parse_u64(const char *s, uint64_t max, uint64_t *v);

#endif /* DJINN_TOOLS_CLI_H */
