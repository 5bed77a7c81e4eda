// SPDX-License-Identifier: MIT
/*
 * Peers by address block. See addrkey.h.
 */
#include <netinet/in.h>
#include <string.h>

#include "addrkey.h"

/* Clear @a's bits from @keep of its 128 on. */
static void mask(uint8_t a[16], unsigned int keep)
{
	for (unsigned int i = 0; i < 16; i++) {
		unsigned int bit = i * 8;

		if (keep >= bit + 8)
			continue;
		a[i] &= keep <= bit ? 0 : (uint8_t)(0xff << (bit + 8 - keep));
	}
}

bool addr_key(const struct sockaddr_storage *ss, unsigned int v4,
	      unsigned int v6, uint8_t out[16])
{
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;

		memset(out, 0, 10);
		memset(out + 10, 0xff, 2);
		memcpy(out + 12, &in->sin_addr, 4);
		mask(out, 96 + (v4 > 32 ? 32 : v4));
		return true;
	}
	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 =
			(const struct sockaddr_in6 *)ss;

		memcpy(out, &in6->sin6_addr, 16);
		/* an IPv4 peer on an IPv6 socket: its IPv4 prefix */
		if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
			mask(out, 96 + (v4 > 32 ? 32 : v4));
		else
			mask(out, v6 > 128 ? 128 : v6);
		return true;
	}
	return false;
}
