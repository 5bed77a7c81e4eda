/* SPDX-License-Identifier: MIT */
/*
 * Inside djinnd's configuration (djinnd/config/): what its files share.
 * The interface is ../config.h.
 *
 * The configuration file and the command line go through one table.
 * Every setting is a row of cfg_keys[] (keys.c): its section and name,
 * its type, where it lives in struct djinnd_config, and whether SIGHUP
 * may change it. A file line "name = value" under "[section]" (load.c)
 * and a flag (main.c maps each to "section.name") both end in
 * cfg_set_from(), so both are checked the same way and a bad value is
 * refused with the same message. The sections with a name, [tenant.NAME]
 * and [model.NAME], have their own keys (sections.c). validate.c checks
 * across keys, print.c prints the settings (--check-config) and
 * reload.c says what SIGHUP changes.
 *
 *   keys.c      the table, values and their checks, strings and errors
 *   sections.c  [tenant.NAME] and [model.NAME]
 *   load.c      the defaults, the file (inih), config_set()
 *   validate.c  checks across keys
 *   print.c     values as the file spells them, config_print()
 *   reload.c    config_diff() and config_apply()
 */
#ifndef DJINN_CONFIG_INTERNAL_H
#define DJINN_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

enum key_type {
	T_LISTEN, /* repeatable "unix:PATH" | "tcp:HOST:PORT" | "tls:HOST:PORT" */
	T_SOCKET, /* a unix socket's path */
	T_GROUP, /* a group name that must exist when set */
	T_UINT,
	T_DIR, /* an absolute path */
	T_BACKEND,
	T_DEVICES, /* "all" or "0,1,3" */
	T_SIZE,
	T_PCT,
	T_DURATION,
	T_LEVEL,
	T_FILE, /* a path, or empty for none */
	T_TCP, /* "tcp:HOST:PORT", or empty for off */
	T_LEASES, /* "auto", "kmod" or "user" */
	T_POLICY, /* "semantic", "lru" or "static" */
	T_PLAIN_TCP, /* "loopback" or "any" */
	T_TLS_ID, /* "cn", "san-dns", "san-email" or "san-uri" */
	T_KTLS, /* "auto" or "off" */
	T_UNIX, /* "unix:PATH", or empty for none */
};

struct key {
	const char *section, *name;
	enum key_type type;
	size_t off;
	uint64_t min, max; /* T_UINT, T_SIZE, T_DURATION */
	unsigned int reload; /* CONFIG_RELOAD_*: SIGHUP applies it */
};

/* The table of keys (keys.c), and its length. */
extern const struct key cfg_keys[];
extern const size_t cfg_nr_keys;
#define NR_KEYS cfg_nr_keys

/* Where a flag's setting came from: compared by address. */
extern const char cfg_cmdline[];

/* Where a setting comes from: a later one replaces the listen list. */
enum { FROM_DEFAULT, FROM_FILE, FROM_FLAG };

/* [tenant.NAME]'s quotas, one row each: parsed, printed and compared by
 * this table (sections.c). 0 is none, so a set quota is at least 1. */
struct tenant_quota_key {
	const char *name;
	enum key_type type; /* T_SIZE, T_DURATION or T_UINT */
	size_t off; /* in struct tenant_map: uint64_t, or unsigned int */
};
extern const struct tenant_quota_key cfg_tenant_quota_keys[];
extern const size_t cfg_nr_tenant_quota_keys;
#define NR_TQUOTA_KEYS cfg_nr_tenant_quota_keys

/* keys.c */

/* A copy of @s that lives as long as @c (config_free()), or NULL. */
const char *cfg_keep(struct djinnd_config *c, const char *s);

/* The first error wins: c->err = "FILE:LINE: message". -EINVAL. */
int __attribute__((format(printf, 2, 3)))
cfg_fail(struct djinnd_config *c, const char *fmt, ...);

/* The row of "section.name", or NULL. */
const struct key *cfg_key_find(const char *section, const char *name);

/* Whether the table has keys in @section. */
bool cfg_section_known(const char *section);

/* A decimal, all of @s: 0 or -EINVAL. */
int cfg_parse_uint(const char *s, uint64_t *out);

/* Set @k to @v, from @from (FROM_FILE at c->cur_file:c->cur_line, or
 * FROM_FLAG), recording where: 0 or -EINVAL with c->err set. */
int cfg_set_from(struct djinnd_config *c, const struct key *k,
		 const char *value, int from);

/* sections.c */

/* A [tenant.NAME] key and a [model.NAME] key: 0 or -EINVAL. */
int cfg_tenant_set(struct djinnd_config *c, const char *tenant,
		   const char *name, const char *value);
int cfg_model_set(struct djinnd_config *c, const char *model, const char *name,
		  const char *value);

/* The index of @model's entry of @s's budgets, or -1. */
int cfg_budget_index(const struct server_config *s, const char *model);

/* Quota @q of @m, widened. */
uint64_t cfg_tquota_get(const struct tenant_map *m,
			const struct tenant_quota_key *q);

/* print.c */

/* "10s", "5m", "250ms"; "512M", "2G", "4097". */
void cfg_fmt_duration(uint64_t ns, char *buf, size_t len);
void cfg_fmt_size(uint64_t b, char *buf, size_t len);

/* One key's value as the file would spell it ("a, b" for a list). */
void cfg_key_fmt(const struct djinnd_config *c, const struct key *k, char *buf,
		 size_t len);

#endif /* DJINN_CONFIG_INTERNAL_H */
