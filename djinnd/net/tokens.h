/* SPDX-License-Identifier: MIT */
/*
 * Bearer tokens (Documentation/security.rst, "Bearer tokens"): a
 * connection of a tls: listener without a certificate, or of
 * server.token_auth's unix socket, names its tenant by a token sent in
 * AUTH. A token is either a line of tls.tokens (its SHA-256, read at
 * start and on every SIGHUP) or one djinnd minted for the administrator
 * (ADMIN_TOKEN_MINT: 32 random bytes, given once as 64 hex digits; only
 * their hash is kept, in memory and, for the next djinnd, in the file
 * "minted-tokens" beside the admin socket). Lookups compare every entry
 * in constant time. The I/O thread's alone.
 */
#ifndef DJINN_TOKENS_H
#define DJINN_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <djinn/proto.h>

struct server;

#define TOKENS_MINTED_MAX 65536u
/* A minted token's id: random, 1 to 2^48 - 1 (exact in JSON numbers) */
#define TOKENS_ID_MASK ((1ull << 48) - 1)
#define TOKENS_TTL_MAX_NS (365ull * 24 * 3600 * 1000000000ull)

/* tls.tokens and the minted tokens a djinnd before this one kept: 0, or
 * -errno with @why (a bad line of tls.tokens; a minted file that does
 * not read is logged and dropped: its tokens must be minted again). */
int tokens_init(struct server *srv, char *why, size_t len);
void tokens_free(struct server *srv);
/* Read tls.tokens again (SIGHUP): 0, or -errno with every token of the
 * file revoked (an err line says why) until a reload reads it. Minted
 * tokens stay. */
int tokens_reload(struct server *srv);
/* Whether any token could name a tenant now. */
bool tokens_any(const struct server *srv);

/* The tenant token @token[@len] names, into @tenant (the name and
 * zeros): 0, or -EACCES (none, or a minted one past its time). */
int tokens_tenant(struct server *srv, const uint8_t *token, size_t len,
		  char tenant[DJINN_TENANT_LEN]);

/* A new token for @tenant, valid for @ttl_ns (0: until revoked), into
 * @out (its id, end and text): 0, or -EINVAL (a name djinnd gives
 * itself, a ttl over a year), -EDQUOT (TOKENS_MINTED_MAX), -errno of
 * keeping its hash; @msg says why. */
int tokens_mint(struct server *srv, const char *tenant, uint64_t ttl_ns,
		struct djinn_admin_token_minted *out, char *msg, size_t msglen);
/* Forget minted token @id: 0, -ENOENT, or the -errno of writing the
 * file (it is refused here all the same, but the next djinnd would take
 * it). Connections it named stay. */
int tokens_revoke(struct server *srv, uint64_t id);
/* The minted tokens in a malloc'd array in *@out (never their text): how
 * many (0 with *@out NULL for none), or -ENOMEM. */
int tokens_list(struct server *srv, struct djinn_admin_token **out);

#endif /* DJINN_TOKENS_H */
