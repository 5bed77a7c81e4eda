// SPDX-License-Identifier: MIT
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
