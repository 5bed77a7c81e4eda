/* SPDX-License-Identifier: MIT */
/*
 * Peers by address block: what server.max_connections_per_addr counts a
 * remote TCP peer by. One host of IPv6 holds a /64 (SLAAC, privacy
 * addresses), so counting exact addresses would let it spread over
 * 2^64 of them; an IPv4 host holds one address. The prefix lengths are
 * settings (server.addr_prefix_v4, server.addr_prefix_v6).
 */
#ifndef DJINN_ADDRKEY_H
#define DJINN_ADDRKEY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

/* @ss's block as 16 bytes, an IPv4 address mapped into IPv6 (::ffff:a.b.c.d,
 * so that a v4 peer is one whichever socket family it came in on), the
 * bits past the prefix (@v4 of IPv4's 32, @v6 of IPv6's 128) cleared.
 * False for another family. */
bool addr_key(const struct sockaddr_storage *ss, unsigned int v4,
	      unsigned int v6, uint8_t out[16]);

#endif /* DJINN_ADDRKEY_H */
