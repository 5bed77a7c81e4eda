/* SPDX-License-Identifier: MIT */
/*
 * djinnd's configuration: defaults, then /etc/djinn/djinnd.conf (INI,
 * parsed by inih), then the command line. All three fill one struct
 * through one table of keys (config/keys.c), so a flag and a file key are
 * checked by the same code and --check-config prints where each
 * setting came from. See djinnd.conf(5).
 */
#ifndef DJINN_CONFIG_H
#define DJINN_CONFIG_H

#include <stdbool.h>
#include <stdio.h>

#include "server.h"

#ifndef DJINND_SYSCONFDIR
#define DJINND_SYSCONFDIR "/etc"
#endif
/* Read when --config is not given and the file exists. */
#define DJINND_CONFIG_PATH DJINND_SYSCONFDIR "/djinn/djinnd.conf"

#define CONFIG_MAX_KEYS 64
#define CONFIG_ERR_LEN 512

/* Where a setting came from: line 0 with a NULL file is the default,
 * line 0 with file "command line" is a flag. */
struct config_origin {
	const char *file;
	unsigned int line;
};

/*
 * struct djinnd_config - everything djinnd is told at start
 * @srv:        what the server runs with (server.h)
 * @log_level:  LOG_ERR .. LOG_DEBUG
 * @log_file:   append the log there; NULL: stderr
 * @path:       the file read, or NULL
 * @flag_dir:   the directory a flag's relative path is taken against
 *              (main.c: the one djinnd started in); NULL: as given
 * @origin:     per key of the table in config/keys.c
 * @err:        the first error: "FILE:LINE: key: what is wrong"
 */
struct djinnd_config {
	struct server_config srv;
	int log_level;
	const char *log_file;
	const char *path;
	const char *flag_dir;
	struct config_origin origin[CONFIG_MAX_KEYS];
	struct config_origin share_origin[SCHED_TENANTS_MAX];
	char err[CONFIG_ERR_LEN];
	/* private: strings the struct points at, freed by config_free() */
	char **strs;
	unsigned int nr_strs, cap_strs;
	const char *cur_file;
	unsigned int cur_line;
	unsigned int listen_from; /* where the listen list came from */
	unsigned int listen_line[SERVER_MAX_LISTEN];
};

/* The defaults (djinnd.conf(5)). */
void config_init(struct djinnd_config *c);
void config_free(struct djinnd_config *c);

/* Read @path over what @c holds: 0, or -errno with c->err naming the
 * file and line (-ENOENT when it does not exist, -EINVAL for a bad
 * line, key or value). */
int config_load(struct djinnd_config *c, const char *path);

/* Set "section.key" to @value as the command line does (a later
 * "server.listen" from the command line replaces the file's list; a
 * relative path is taken against c->flag_dir when it is set):
 * 0 or -EINVAL with c->err set. */
int config_set(struct djinnd_config *c, const char *key, const char *value);

/* Checks across keys (warning below critical, lease min <= default <=
 * max, ...): 0 or -EINVAL with c->err naming the line of the later key. */
int config_validate(struct djinnd_config *c);

/* The effective settings as a configuration file, each with where it
 * came from in a comment. */
void config_print(const struct djinnd_config *c, FILE *f);

/*
 * SIGHUP: @now is the running configuration, @next the one just read.
 * Writes one log line per difference, saying whether it applies now or
 * needs a restart, and returns a mask of what may change at run time:
 */
enum {
	CONFIG_RELOAD_LOG = 1 << 0, /* log.level */
	CONFIG_RELOAD_PRESSURE = 1 << 1, /* memory.pressure_* */
	CONFIG_RELOAD_LEASE = 1 << 2, /* lease.* */
	CONFIG_RELOAD_SCHED = 1 << 3, /* sched.* but policy, tenant.*.share */
	CONFIG_RELOAD_TENANTS = 1 << 4, /* tenant.*.uids, tenant.*.gids */
	CONFIG_RELOAD_MODELS = 1 << 5, /* every key of [model.*] */
};
unsigned int config_diff(const struct djinnd_config *now,
			 const struct djinnd_config *next,
			 unsigned int *nr_restart);

/* Take the settings of @next that @mask (from config_diff) names. */
void config_apply(struct djinnd_config *now, const struct djinnd_config *next,
		  unsigned int mask);

/* "500ms", "10s", "5m", "1h": 0 and nanoseconds, or -EINVAL. */
int config_parse_duration(const char *s, uint64_t *out);

#endif /* DJINN_CONFIG_H */
