// SPDX-License-Identifier: MIT
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <djinn/proto.h>

#include "names.h"

bool model_name_ok(const char *s)
{
	size_t n = strnlen(s, DJINN_MODEL_NAME_MAX);

	if (!n || n == DJINN_MODEL_NAME_MAX || s[0] == '.')
		return false;
	return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
			 "0123456789._-") == n;
}

bool tenant_name_ok(const char *s)
{
	size_t n = strnlen(s, DJINN_TENANT_LEN);

	if (!n || n == DJINN_TENANT_LEN)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] <= ' ' || s[i] > '~')
			return false;
	return true;
}

bool tenant_name_implicit(const char *s)
{
	return !strncmp(s, "uid:", 4) || !strncmp(s, "tcp:", 4) ||
	       !strcmp(s, "unknown");
}

int parse_size(const char *s, uint64_t *out)
{
	static const char units[] = "kmgt";
	const char *u;
	int shift = 0;
	uint64_t v;
	char *end;

	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	if (*end && (u = strchr(units, tolower((unsigned char)*end)))) {
		shift = 10 * (int)(u - units + 1);
		end++;
		if (*end == 'i' && end[1] == 'B')
			end += 2;
	}
	if (*end == 'B')
		end++;
	if (*end || (v << shift) >> shift != v)
		return -EINVAL;
	*out = v << shift;
	return 0;
}
