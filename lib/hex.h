/* SPDX-License-Identifier: MIT */
/*
 * A hex digit's value (tls.tokens' hashes, the kernel TLS key log):
 * digits and letters of either case only, -1 for anything else (no sign,
 * no "0x", which sscanf's %x would take).
 */
#ifndef DJINN_HEX_H
#define DJINN_HEX_H

static inline int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

#endif /* DJINN_HEX_H */
