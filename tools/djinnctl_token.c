// SPDX-License-Identifier: MIT
/*
 * djinnctl token list|mint|revoke: bearer tokens djinnd mints for a
 * tenant (Documentation/security.rst, "Bearer tokens"), for clients of
 * server.token_auth's socket (a device plugin hands them to pods) and of
 * tls: listeners.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <djinn/proto.h>

#include "cli.h"
#include "djinnctl.h"
#include "json_print.h"

/* CLOCK_REALTIME ns as "2026-12-07 10:41:00 UTC", or "never" for 0. */
static const char *when(char *buf, size_t len, uint64_t ns)
{
	time_t t = (time_t)(ns / 1000000000ull);
	struct tm tm;

	if (!ns || !gmtime_r(&t, &tm) ||
	    !strftime(buf, len, "%Y-%m-%d %H:%M:%S UTC", &tm))
		snprintf(buf, len, "%s", ns ? "?" : "never");
	return buf;
}

int do_token_mint(struct ctl *ctl, char **args)
{
	struct djinn_admin_token_mint req = { .ttl_ns = ctl->ttl_ns };
	struct djinn_admin_token_minted r;
	char text[DJINN_MINTED_TOKEN_LEN + 1], buf[40];
	uint64_t len;
	void *ans;
	int ret;

	snprintf(req.tenant, sizeof(req.tenant), "%s", args[0]);
	ret = admin_call(ctl, DJINN_MSG_ADMIN_TOKEN_MINT, &req, sizeof(req),
			 sizeof(r), sizeof(r), &ans, &len);
	if (ret)
		return ret;
	memcpy(&r, ans, sizeof(r));
	memset(ans, 0, sizeof(r));
	free(ans);
	for (size_t i = 0; i < sizeof(r.token); i++)
		if (!strchr("0123456789abcdef", r.token[i]) || !r.token[i]) {
			memset(&r, 0, sizeof(r));
			return fail(ctl, EPROTO, "a token that is not hex");
		}
	memcpy(text, r.token, sizeof(r.token));
	text[sizeof(r.token)] = 0;
	open_json_object(NULL);
	print_u64(PRINT_JSON, "id", NULL, r.id);
	print_string(PRINT_JSON, "tenant", NULL, args[0]);
	print_string(PRINT_ANY, "token", "%s\n", text);
	print_u64(PRINT_JSON, "expires_ns", NULL, r.expires_ns);
	close_json_object();
	/* the token on stdout alone; what it is to stderr */
	if (!is_json_context())
		fprintf(stderr, "token %llu for tenant %s, valid until %s\n",
			(unsigned long long)r.id, args[0],
			when(buf, sizeof(buf), r.expires_ns));
	memset(&r, 0, sizeof(r));
	memset(text, 0, sizeof(text));
	return 0;
}

int do_token_revoke(struct ctl *ctl, char **args)
{
	struct djinn_admin_token_revoke req;
	uint64_t len, id;
	void *ans;
	int ret;

	if (parse_u64(args[0], UINT64_MAX, &id) || !id) {
		fprintf(stderr, "djinnctl: token revoke: bad token id '%s'\n",
			args[0]);
		return 2;
	}
	req.id = id;
	ret = admin_call(ctl, DJINN_MSG_ADMIN_TOKEN_REVOKE, &req, sizeof(req),
			 0, 0, &ans, &len);
	free(ans);
	return ret;
}

int do_token_list(struct ctl *ctl, char **args)
{
	struct djinn_admin_token *e;
	char name[DJINN_TENANT_LEN], a[40], b[40];
	uint32_t nr;
	int ret;

	ret = admin_list(ctl, DJINN_MSG_ADMIN_TOKENS, sizeof(*e), "token",
			 (void **)&e, &nr);
	if (ret)
		return ret;
	open_json_array(NULL);
	if (!is_json_context() && nr)
		printf("%6s  %-24s %-24s %s\n", "ID", "TENANT", "MINTED",
		       "EXPIRES");
	for (uint32_t i = 0; i < nr; i++) {
		wire_str(name, sizeof(name), e[i].tenant, sizeof(e[i].tenant));
		open_json_object(NULL);
		print_u64(PRINT_ANY, "id", "%6" PRIu64 "  ", e[i].id);
		print_string(PRINT_ANY, "tenant", "%-24s ", name);
		print_u64(PRINT_JSON, "created_ns", NULL, e[i].created_ns);
		print_u64(PRINT_JSON, "expires_ns", NULL, e[i].expires_ns);
		print_string(PRINT_FP, NULL, "%-24s ",
			     when(a, sizeof(a), e[i].created_ns));
		print_string(PRINT_FP, NULL, "%s\n",
			     when(b, sizeof(b), e[i].expires_ns));
		close_json_object();
	}
	close_json_array();
	free(e);
	return 0;
}
