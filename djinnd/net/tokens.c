// SPDX-License-Identifier: MIT
/*
 * Bearer tokens: who a connection without a certificate is, on a tls:
 * listener or on server.token_auth's unix socket. See tokens.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "hex.h"
#include "log.h"
#include "names.h"
#include "server.h"
#include "net/tokens.h"

struct token {
	char tenant[DJINN_TENANT_LEN];
	uint8_t hash[32];
	/* a minted one's: its number, when it was made and when it ends
	 * (CLOCK_REALTIME ns; 0: never) */
	uint64_t id, created_ns, expires_ns;
};

struct token_table {
	struct token *file; /* tls.tokens' */
	unsigned int nr_file;
	struct token *minted; /* ADMIN_TOKEN_MINT's */
	unsigned int nr_minted, cap_minted;
	char path[PATH_MAX]; /* where the minted ones' hashes are kept */
};

/* ---------------------------------------------------------------------- */
/* tls.tokens: "TENANT SHA256-HEX" lines */

/* Exactly 64 hex digits, then the end of the word. */
static int hex32(const char *s, uint8_t out[32])
{
	for (int i = 0; i < 32; i++) {
		int hi = hex_digit(s[2 * i]),
		    lo = hi < 0 ? -1 : hex_digit(s[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -EINVAL;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return s[64] && s[64] != '\n' && s[64] != ' ' && s[64] != '\t' ?
		       -EINVAL :
		       0;
}

static int tokens_read(const char *path, struct token **out, unsigned int *nr,
		       char *why, size_t len)
{
	struct token *t = NULL;
	unsigned int n = 0, cap = 0, line = 0;
	char buf[512];
	FILE *f = fopen(path, "re");

	if (!f) {
		int ret = -errno;

		snprintf(why, len, "tls.tokens: %s: %s", path, strerror(-ret));
		return ret;
	}
	while (fgets(buf, sizeof(buf), f)) {
		char name[DJINN_TENANT_LEN + 1], hex[80];
		size_t bl = strlen(buf);
		int k;

		line++;
		/* a line longer than the buffer would be read as two */
		if (bl == sizeof(buf) - 1 && buf[bl - 1] != '\n' && !feof(f)) {
			snprintf(why, len,
				 "tls.tokens: %s:%u: a line over %zu bytes",
				 path, line, sizeof(buf) - 2);
			goto fail;
		}
		if (sscanf(buf, " %n", &k) >= 0 &&
		    (buf[k] == '#' || buf[k] == '\n' || !buf[k]))
			continue;
		if (sscanf(buf, "%64s %79s", name, hex) == 2 &&
		    tenant_name_implicit(name)) {
			snprintf(why, len,
				 "tls.tokens: %s:%u: '%s' is a name djinnd "
				 "gives itself (uid:N, tcp:ADDR, unknown), not "
				 "a token's",
				 path, line, name);
			goto fail;
		}
		if (sscanf(buf, "%64s %79s", name, hex) != 2 ||
		    strlen(name) >= DJINN_TENANT_LEN || !tenant_name_ok(name) ||
		    strlen(hex) != 64) {
			snprintf(why, len,
				 "tls.tokens: %s:%u: want TENANT SHA256 (a "
				 "tenant name and 64 hex digits)",
				 path, line);
			goto fail;
		}
		if (n == cap) {
			struct token *m;

			cap = cap ? cap * 2 : 16;
			m = realloc(t, cap * sizeof(*t));
			if (!m) {
				snprintf(why, len, "tls.tokens: out of memory");
				goto fail;
			}
			t = m;
			/* a name is answered whole (AUTH): no heap after it */
			memset(t + n, 0, (cap - n) * sizeof(*t));
		}
		if (hex32(hex, t[n].hash)) {
			snprintf(why, len,
				 "tls.tokens: %s:%u: '%s' is not 64 hex digits",
				 path, line, hex);
			goto fail;
		}
		for (unsigned int i = 0; i < n; i++) {
			if (memcmp(t[i].hash, t[n].hash, 32))
				continue;
			snprintf(why, len,
				 "tls.tokens: %s:%u: the same hash as line "
				 "of tenant %s",
				 path, line, t[i].tenant);
			goto fail;
		}
		memcpy(t[n].tenant, name, strlen(name) + 1); /* fits: above */
		n++;
	}
	fclose(f);
	*out = t;
	*nr = n;
	return 0;
fail:
	fclose(f);
	if (t)
		OPENSSL_cleanse(t, cap * sizeof(*t));
	free(t);
	return -EINVAL;
}

static void cleanse_free(struct token *t, unsigned int n)
{
	if (t)
		OPENSSL_cleanse(t, n * sizeof(*t));
	free(t);
}

int tokens_reload(struct server *srv)
{
	struct token_table *tt = srv->tokens;
	const char *path = srv->cfg.tls_tokens;
	struct token *t;
	unsigned int n;
	char why[256];
	int ret;

	if (!tt || !path || !*path)
		return 0;
	ret = tokens_read(path, &t, &n, why, sizeof(why));
	if (ret) {
		/* fail closed: a file removed or broken to revoke a token
		 * revokes them all, until it reads again */
		cleanse_free(tt->file, tt->nr_file);
		tt->file = NULL;
		tt->nr_file = 0;
		log_err("%s: every bearer token is revoked until the file "
			"reads (minted ones stay)",
			why);
		return ret;
	}
	cleanse_free(tt->file, tt->nr_file);
	tt->file = t;
	tt->nr_file = n;
	log_info("tls.tokens: %u tokens from %s", n, path);
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Minted tokens: ADMIN_TOKEN_MINT, kept as "ID TENANT SHA256-HEX
 * CREATED EXPIRES" lines beside the admin socket */

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bool expired(const struct token *t, uint64_t now)
{
	return t->expires_ns && t->expires_ns <= now;
}

/* Append @t to the minted tokens, growing their array (moved, the old
 * one cleansed): 0, -EDQUOT past TOKENS_MINTED_MAX, or -ENOMEM. */
static int minted_add(struct token_table *tt, const struct token *t)
{
	if (tt->nr_minted >= TOKENS_MINTED_MAX)
		return -EDQUOT;
	if (tt->nr_minted == tt->cap_minted) {
		unsigned int cap = tt->cap_minted ? tt->cap_minted * 2 : 16;
		struct token *m = calloc(cap, sizeof(*m));

		if (!m)
			return -ENOMEM;
		if (tt->nr_minted)
			memcpy(m, tt->minted, tt->nr_minted * sizeof(*m));
		cleanse_free(tt->minted, tt->cap_minted);
		tt->minted = m;
		tt->cap_minted = cap;
	}
	tt->minted[tt->nr_minted++] = *t;
	return 0;
}

/* Drop the minted tokens whose time is over. */
static void minted_expire(struct token_table *tt, uint64_t now)
{
	unsigned int k = 0;

	for (unsigned int i = 0; i < tt->nr_minted; i++) {
		if (expired(&tt->minted[i], now)) {
			log_info("token %llu of tenant %s expired",
				 (unsigned long long)tt->minted[i].id,
				 tt->minted[i].tenant);
			continue;
		}
		tt->minted[k++] = tt->minted[i];
	}
	if (k < tt->nr_minted)
		OPENSSL_cleanse(tt->minted + k,
				(tt->nr_minted - k) * sizeof(*tt->minted));
	tt->nr_minted = k;
}

/* The minted tokens' hashes to their file, whole, through a rename: 0,
 * or -errno (logged). */
static int minted_save(struct token_table *tt)
{
	char tmp[PATH_MAX + 8];
	FILE *f;
	int fd, ret = 0;

	if (!tt->path[0])
		return 0;
	if (snprintf(tmp, sizeof(tmp), "%s.new", tt->path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	/* a file of its own, never one left there (by whoever could) */
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
		  0600);
	if (fd < 0) {
		ret = -errno;
		log_err("minted tokens: %s: %s", tmp, strerror(-ret));
		return ret;
	}
	f = fdopen(fd, "w");
	if (!f) {
		ret = -errno;
		close(fd);
		goto out_unlink;
	}
	fprintf(f, "# djinnd's minted tokens: ID TENANT SHA256 CREATED "
		   "EXPIRES (ns)\n");
	for (unsigned int i = 0; i < tt->nr_minted; i++) {
		const struct token *t = &tt->minted[i];

		fprintf(f, "%llu %s ", (unsigned long long)t->id, t->tenant);
		for (int b = 0; b < 32; b++)
			fprintf(f, "%02x", t->hash[b]);
		fprintf(f, " %llu %llu\n", (unsigned long long)t->created_ns,
			(unsigned long long)t->expires_ns);
	}
	if (fflush(f) || fsync(fileno(f)))
		ret = -errno;
	if (fclose(f) && !ret)
		ret = -errno;
	if (!ret && rename(tmp, tt->path))
		ret = -errno;
	if (!ret)
		return 0;
out_unlink:
	log_err("minted tokens: %s: %s", tt->path, strerror(-ret));
	unlink(tmp);
	return ret;
}

/* The file minted_save() wrote, by a djinnd before this one. A line that
 * does not read drops the file's tokens: each must be minted again. */
static void minted_load(struct token_table *tt)
{
	int fd = open(tt->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	uint64_t now = realtime_ns();
	unsigned int line = 0;
	struct stat st;
	char buf[256];
	FILE *f;

	if (fd < 0) {
		if (errno != ENOENT)
			log_err("minted tokens: %s: %s", tt->path,
				strerror(errno));
		return;
	}
	/* it holds authenticators: djinnd's own file, or none */
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 0022)) {
		log_err("minted tokens: %s is not a regular file of djinnd's "
			"user that only it may write: not read (every minted "
			"token must be minted again)",
			tt->path);
		close(fd);
		return;
	}
	f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return;
	}
	while (fgets(buf, sizeof(buf), f)) {
		char name[DJINN_TENANT_LEN + 1], hex[80];
		unsigned long long id, created, expires;
		struct token t = { 0 };

		line++;
		if (buf[0] == '#')
			continue;
		if (sscanf(buf, "%llu %64s %79s %llu %llu", &id, name, hex,
			   &created, &expires) != 5 ||
		    !id || strlen(name) >= DJINN_TENANT_LEN ||
		    !tenant_name_ok(name) || tenant_name_implicit(name) ||
		    strlen(hex) != 64 || hex32(hex, t.hash)) {
			log_err("minted tokens: %s:%u: does not read: every "
				"minted token is revoked",
				tt->path, line);
			OPENSSL_cleanse(tt->minted,
					tt->nr_minted * sizeof(*tt->minted));
			tt->nr_minted = 0;
			break;
		}
		memcpy(t.tenant, name, strlen(name) + 1);
		t.id = id;
		t.created_ns = created;
		t.expires_ns = expires;
		if (expired(&t, now))
			continue;
		if (minted_add(tt, &t)) {
			log_err("minted tokens: %s:%u: %s: the rest are not "
				"read",
				tt->path, line,
				tt->nr_minted < TOKENS_MINTED_MAX ?
					"out of memory" :
					"past the most djinnd keeps");
			break;
		}
	}
	fclose(f);
	OPENSSL_cleanse(buf, sizeof(buf));
	if (tt->nr_minted)
		log_info("minted tokens: %u from %s", tt->nr_minted, tt->path);
}

int tokens_init(struct server *srv, char *why, size_t len)
{
	const char *admin = srv->cfg.admin_socket;
	struct token_table *tt = calloc(1, sizeof(*tt));
	const char *slash;
	int ret;

	if (!tt) {
		snprintf(why, len, "tokens: out of memory");
		return -ENOMEM;
	}
	srv->tokens = tt;
	if (srv->cfg.tls_tokens && *srv->cfg.tls_tokens) {
		ret = tokens_read(srv->cfg.tls_tokens, &tt->file, &tt->nr_file,
				  why, len);
		if (ret)
			return ret;
		log_info("tls.tokens: %u tokens from %s", tt->nr_file,
			 srv->cfg.tls_tokens);
	}
	/* minted ones live beside the admin socket, which mints them */
	slash = admin && admin[0] == '/' ? strrchr(admin, '/') : NULL;
	if (slash &&
	    snprintf(tt->path, sizeof(tt->path), "%.*s/minted-tokens",
		     (int)(slash - admin), admin) < (int)sizeof(tt->path))
		minted_load(tt);
	else
		tt->path[0] = 0;
	return 0;
}

void tokens_free(struct server *srv)
{
	struct token_table *tt = srv->tokens;

	if (!tt)
		return;
	cleanse_free(tt->file, tt->nr_file);
	cleanse_free(tt->minted, tt->cap_minted);
	free(tt);
	srv->tokens = NULL;
}

bool tokens_any(const struct server *srv)
{
	const struct token_table *tt = srv->tokens;

	return tt && (tt->nr_file || tt->nr_minted);
}

int tokens_tenant(struct server *srv, const uint8_t *token, size_t len,
		  char tenant[DJINN_TENANT_LEN])
{
	struct token_table *tt = srv->tokens;
	const struct token *found = NULL;
	uint64_t now = realtime_ns();
	uint8_t h[32];

	if (!tt || (!tt->nr_file && !tt->nr_minted))
		return -EACCES;
	if (!EVP_Digest(token, len, h, NULL, EVP_sha256(), NULL))
		return -EACCES;
	/* Every entry is compared, in constant time each. */
	for (unsigned int i = 0; i < tt->nr_file; i++)
		if (!CRYPTO_memcmp(h, tt->file[i].hash, sizeof(h)))
			found = &tt->file[i];
	for (unsigned int i = 0; i < tt->nr_minted; i++)
		if (!CRYPTO_memcmp(h, tt->minted[i].hash, sizeof(h)) &&
		    !expired(&tt->minted[i], now))
			found = &tt->minted[i];
	OPENSSL_cleanse(h, sizeof(h));
	if (!found)
		return -EACCES;
	/* the name and zeros: never what follows it in memory */
	memset(tenant, 0, DJINN_TENANT_LEN);
	memcpy(tenant, found->tenant,
	       strnlen(found->tenant, DJINN_TENANT_LEN - 1));
	return 0;
}

int tokens_mint(struct server *srv, const char *tenant, uint64_t ttl_ns,
		struct djinn_admin_token_minted *out, char *msg, size_t msglen)
{
	struct token_table *tt = srv->tokens;
	uint8_t raw[DJINN_MINTED_TOKEN_LEN / 2];
	uint64_t now = realtime_ns(), id = 0;
	struct token t = { 0 };
	unsigned int tries = 0;
	int ret;

	if (!tt) {
		snprintf(msg, msglen, "tokens: not set up");
		return -EINVAL;
	}
	if (!tenant_name_ok(tenant) || tenant_name_implicit(tenant)) {
		snprintf(msg, msglen,
			 "tenant '%s': a token names a tenant of printable "
			 "bytes without spaces, not one djinnd names itself "
			 "(uid:N, tcp:ADDR, unknown)",
			 tenant);
		return -EINVAL;
	}
	if (ttl_ns > TOKENS_TTL_MAX_NS) {
		snprintf(msg, msglen, "ttl: at most 365 days");
		return -EINVAL;
	}
	minted_expire(tt, now);
	if (tt->nr_minted >= TOKENS_MINTED_MAX) {
		snprintf(msg, msglen,
			 "%u minted tokens already: revoke some first",
			 tt->nr_minted);
		return -EDQUOT;
	}
	/* a random id, never one a token had before a restart or a
	 * reboot, so that revoking a stale id hits no one's new token */
	do {
		if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id))
			id = 0;
		id &= TOKENS_ID_MASK;
		for (unsigned int i = 0; id && i < tt->nr_minted; i++)
			if (tt->minted[i].id == id)
				id = 0;
	} while (!id && ++tries < 8);
	if (!id || getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
		snprintf(msg, msglen, "getrandom failed");
		return -EIO;
	}
	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < sizeof(raw); i++) {
		static const char x[] = "0123456789abcdef";

		out->token[2 * i] = x[raw[i] >> 4];
		out->token[2 * i + 1] = x[raw[i] & 15];
	}
	OPENSSL_cleanse(raw, sizeof(raw));
	/* clients send the hex text: its hash is what AUTH compares */
	if (!EVP_Digest(out->token, sizeof(out->token), t.hash, NULL,
			EVP_sha256(), NULL)) {
		OPENSSL_cleanse(out, sizeof(*out));
		snprintf(msg, msglen, "SHA-256 failed");
		return -EIO;
	}
	memcpy(t.tenant, tenant, strlen(tenant) + 1);
	t.id = id;
	t.created_ns = now;
	t.expires_ns = ttl_ns ? now + ttl_ns : 0;
	if (minted_add(tt, &t)) {
		OPENSSL_cleanse(&t, sizeof(t));
		OPENSSL_cleanse(out, sizeof(*out));
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	ret = minted_save(tt);
	if (ret) {
		/* a token the next djinnd would not know is not given */
		tt->nr_minted--;
		OPENSSL_cleanse(&tt->minted[tt->nr_minted], sizeof(t));
		OPENSSL_cleanse(out, sizeof(*out));
		snprintf(msg, msglen, "cannot keep the token in %s: %s",
			 tt->path, strerror(-ret));
		return ret;
	}
	out->id = t.id;
	out->expires_ns = t.expires_ns;
	log_info("token %llu minted for tenant %s%s", (unsigned long long)t.id,
		 tenant, ttl_ns ? " (with a ttl)" : "");
	return 0;
}

int tokens_revoke(struct server *srv, uint64_t id)
{
	struct token_table *tt = srv->tokens;
	unsigned int i;

	if (!tt)
		return -ENOENT;
	for (i = 0; i < tt->nr_minted && tt->minted[i].id != id; i++)
		;
	if (i == tt->nr_minted)
		return -ENOENT;
	log_info("token %llu of tenant %s revoked", (unsigned long long)id,
		 tt->minted[i].tenant);
	tt->minted[i] = tt->minted[--tt->nr_minted];
	OPENSSL_cleanse(&tt->minted[tt->nr_minted], sizeof(*tt->minted));
	/* refused from now on; the caller hears if the next djinnd would
	 * still take it */
	return minted_save(tt);
}

int tokens_list(struct server *srv, struct djinn_admin_token **out)
{
	struct token_table *tt = srv->tokens;
	struct djinn_admin_token *e;

	*out = NULL;
	if (!tt)
		return 0;
	minted_expire(tt, realtime_ns());
	if (!tt->nr_minted)
		return 0;
	e = calloc(tt->nr_minted, sizeof(*e));
	if (!e)
		return -ENOMEM;
	for (unsigned int i = 0; i < tt->nr_minted; i++) {
		e[i].id = tt->minted[i].id;
		e[i].created_ns = tt->minted[i].created_ns;
		e[i].expires_ns = tt->minted[i].expires_ns;
		memcpy(e[i].tenant, tt->minted[i].tenant, sizeof(e[i].tenant));
	}
	*out = e;
	return (int)tt->nr_minted;
}
