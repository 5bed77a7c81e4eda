// SPDX-License-Identifier: MIT
/*
 * lib/addrkey.c: a remote peer's address block for
 * server.max_connections_per_addr. Two addresses of one IPv6 /64 are one
 * block (a host spreading its connections over its addresses counts
 * once), two /64s are two; IPv4 addresses are one each by default, a
 * prefix groups them; an IPv4 peer is the same block on an IPv4 or an
 * IPv6 socket.
 */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "addrkey.h"

static struct sockaddr_storage v4(const char *a)
{
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in *in = (struct sockaddr_in *)&ss;

	in->sin_family = AF_INET;
	assert_int_equal(inet_pton(AF_INET, a, &in->sin_addr), 1);
	return ss;
}

static struct sockaddr_storage v6(const char *a)
{
	struct sockaddr_storage ss = { 0 };
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;

	in6->sin6_family = AF_INET6;
	assert_int_equal(inet_pton(AF_INET6, a, &in6->sin6_addr), 1);
	return ss;
}

static bool same(struct sockaddr_storage a, struct sockaddr_storage b,
		 unsigned int p4, unsigned int p6)
{
	uint8_t x[16], y[16];

	assert_true(addr_key(&a, p4, p6, x));
	assert_true(addr_key(&b, p4, p6, y));
	return !memcmp(x, y, sizeof(x));
}

static void test_blocks(void **state)
{
	/* one /64: one host, whatever its interface ids */
	assert_true(same(v6("2001:db8:1:2::1"), v6("2001:db8:1:2:ffff::9"), 32,
			 64));
	assert_false(
		same(v6("2001:db8:1:2::1"), v6("2001:db8:1:3::1"), 32, 64));
	/* a /48 setting groups the /64s of a site */
	assert_true(same(v6("2001:db8:1:2::1"), v6("2001:db8:1:3::1"), 32, 48));
	/* /128: exact addresses, as before */
	assert_false(same(v6("2001:db8::1"), v6("2001:db8::2"), 32, 128));
	/* a prefix that ends inside a byte */
	assert_true(same(v6("2001:db8:1:2::"), v6("2001:db8:1:3::"), 32, 63));
	assert_false(same(v6("2001:db8:1:2::"), v6("2001:db8:1:3::"), 32, 64));
	/* IPv4: an address a block, unless the prefix groups them */
	assert_false(same(v4("192.0.2.1"), v4("192.0.2.2"), 32, 64));
	assert_true(same(v4("192.0.2.1"), v4("192.0.2.200"), 24, 64));
	assert_false(same(v4("192.0.2.1"), v4("192.0.3.1"), 24, 64));
	/* an IPv4 peer on an IPv6 socket is the same peer */
	assert_true(same(v4("192.0.2.7"), v6("::ffff:192.0.2.7"), 32, 64));
	assert_true(same(v4("192.0.2.7"), v6("::ffff:192.0.2.9"), 24, 64));
	/* and not an IPv6 host's /64 that happens to hold its bytes */
	assert_false(same(v4("192.0.2.7"), v6("::c000:207"), 32, 64));
}

static void test_other_family(void **state)
{
	struct sockaddr_storage ss = { .ss_family = AF_UNIX };
	uint8_t k[16];

	assert_false(addr_key(&ss, 32, 64, k));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_blocks),
		cmocka_unit_test(test_other_family),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
