// SPDX-License-Identifier: MIT
/*
 * The configuration file and the command line, through one table.
 *
 * Every setting is a row of keys[]: its section and name, its type, where
 * it lives in struct djinnd_config, and whether SIGHUP may change it. A
 * file line "name = value" under "[section]" and a flag (main.c maps each
 * to "section.name") both end in key_set(), so both are checked the same
 * way and a bad value is refused with the same message. inih does the
 * parsing; a counting reader gives each handler call its line number and
 * refuses lines inih would otherwise split.
 */
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pwd.h>
#include <ini.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "array_size.h"
#include "clock.h"
#include "config.h"
#include "log.h"
#include "names.h"

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
};

struct key {
	const char *section, *name;
	enum key_type type;
	size_t off;
	uint64_t min, max; /* T_UINT, T_SIZE, T_DURATION */
	unsigned int reload; /* CONFIG_RELOAD_*: SIGHUP applies it */
};

#define SRV(f) offsetof(struct djinnd_config, srv.f)
#define TOP(f) offsetof(struct djinnd_config, f)

/* A key of the file; @...: .min, .max, .reload */
#define KEY(sec, nm, ty, offset, ...)                                  \
	{                                                              \
		.section = sec, .name = nm, .type = ty, .off = offset, \
		__VA_ARGS__                                            \
	}

static const struct key keys[] = {
	KEY("server", "listen", T_LISTEN, SRV(listen)),
	KEY("server", "admin_socket", T_SOCKET, SRV(admin_socket)),
	KEY("server", "admin_group", T_GROUP, SRV(admin_group)),
	KEY("server", "max_sessions", T_UINT, SRV(max_sessions), .min = 1,
	    .max = 1u << 24),
	KEY("server", "max_sessions_per_uid", T_UINT, SRV(max_sessions_per_uid),
	    .min = 1, .max = 1u << 24),
	KEY("server", "max_connections", T_UINT, SRV(max_conns), .min = 16,
	    .max = 1u << 20),
	KEY("server", "max_connections_per_uid", T_UINT, SRV(max_conns_per_uid),
	    .min = 1, .max = 1u << 20),
	KEY("server", "max_connections_per_addr", T_UINT,
	    SRV(max_conns_per_addr), .min = 1, .max = 1u << 20),
	KEY("server", "frame_timeout", T_DURATION, SRV(frame_timeout_ns),
	    .min = NSEC_PER_MSEC, .max = 3600 * NSEC_PER_SEC),
	KEY("server", "idle_timeout", T_DURATION, SRV(idle_timeout_ns),
	    .min = NSEC_PER_MSEC, .max = 24 * 3600 * NSEC_PER_SEC),
	KEY("server", "model_dir", T_DIR, SRV(model_dir)),
	KEY("device", "backend", T_BACKEND, SRV(backend)),
	KEY("device", "devices", T_DEVICES, SRV(devices)),
	KEY("device", "threads", T_UINT, SRV(threads), .max = 1024),
	KEY("device", "compute_threads", T_UINT, SRV(compute_threads),
	    .max = DEVICE_COMPUTE_THREADS_MAX),
	KEY("memory", "budget", T_SIZE, SRV(cpu_mem), .min = 1ull << 20,
	    .max = 1ull << 50),
	KEY("memory", "gpu_budget", T_SIZE, SRV(gpu_mem), .min = 0,
	    .max = 1ull << 50),
	KEY("memory", "swap", T_SIZE, SRV(swap), .min = 0, .max = 1ull << 50),
	KEY("memory", "upload_max", T_SIZE, SRV(upload_max), .min = 0,
	    .max = 1ull << 50),
	KEY("memory", "pressure_warning", T_PCT, SRV(warn_pct), .min = 1,
	    .max = 100, .reload = CONFIG_RELOAD_PRESSURE),
	KEY("memory", "pressure_critical", T_PCT, SRV(crit_pct), .min = 1,
	    .max = 100, .reload = CONFIG_RELOAD_PRESSURE),
	KEY("lease", "default", T_DURATION, SRV(lease_default_ns),
	    .min = NSEC_PER_MSEC, .max = 24 * 3600 * NSEC_PER_SEC,
	    .reload = CONFIG_RELOAD_LEASE),
	KEY("lease", "min", T_DURATION, SRV(lease_min_ns), .min = NSEC_PER_MSEC,
	    .max = 24 * 3600 * NSEC_PER_SEC, .reload = CONFIG_RELOAD_LEASE),
	KEY("lease", "max", T_DURATION, SRV(lease_max_ns), .min = NSEC_PER_MSEC,
	    .max = 24 * 3600 * NSEC_PER_SEC, .reload = CONFIG_RELOAD_LEASE),
	KEY("lease", "provider", T_LEASES, SRV(leases)),
	KEY("server", "plain_tcp", T_PLAIN_TCP, SRV(plain_tcp)),
	KEY("tls", "certificate", T_FILE, SRV(tls_cert)),
	KEY("tls", "key", T_FILE, SRV(tls_key)),
	KEY("tls", "client_ca", T_FILE, SRV(tls_client_ca)),
	KEY("tls", "tokens", T_FILE, SRV(tls_tokens)),
	KEY("tls", "tenant_from", T_TLS_ID, SRV(tls_tenant_from)),
	KEY("tls", "ktls", T_KTLS, SRV(tls_ktls)),
	KEY("log", "level", T_LEVEL, TOP(log_level),
	    .reload = CONFIG_RELOAD_LOG),
	KEY("log", "file", T_FILE, TOP(log_file)),
	KEY("metrics", "listen", T_TCP, SRV(metrics)),
	KEY("sched", "policy", T_POLICY, SRV(sched.policy)),
	KEY("sched", "quantum", T_DURATION, SRV(sched.quantum_ns),
	    .min = NSEC_PER_MSEC, .max = NSEC_PER_SEC,
	    .reload = CONFIG_RELOAD_SCHED),
	KEY("sched", "admit_wait", T_DURATION, SRV(sched.admit_wait_ns),
	    .min = 0, .max = 60 * NSEC_PER_SEC, .reload = CONFIG_RELOAD_SCHED),
	KEY("sched", "max_io_wait", T_DURATION, SRV(sched.max_io_wait_ns),
	    .min = NSEC_PER_MSEC, .max = 24 * 3600 * NSEC_PER_SEC,
	    .reload = CONFIG_RELOAD_SCHED),
	KEY("sched", "swap_margin", T_UINT, SRV(sched.swap_margin_pct),
	    .min = 100, .max = 10000, .reload = CONFIG_RELOAD_SCHED),
};

#define NR_KEYS (ARRAY_SIZE(keys))
_Static_assert(NR_KEYS <= CONFIG_MAX_KEYS, "CONFIG_MAX_KEYS too small");

static const char cmdline[] = "command line";

enum { FROM_DEFAULT, FROM_FILE, FROM_FLAG };

/* ---------------------------------------------------------------------- */
/* Strings and errors */

static const char *keep(struct djinnd_config *c, const char *s)
{
	char *dup;

	if (c->nr_strs == c->cap_strs) {
		unsigned int cap = c->cap_strs ? 2 * c->cap_strs : 16;
		char **n = realloc(c->strs, cap * sizeof(*n));

		if (!n)
			return NULL;
		c->strs = n;
		c->cap_strs = cap;
	}
	dup = strdup(s);
	if (dup)
		c->strs[c->nr_strs++] = dup;
	return dup;
}

static void where(const struct djinnd_config *c, char *buf, size_t len)
{
	if (c->cur_line)
		snprintf(buf, len, "%s:%u", c->cur_file, c->cur_line);
	else
		snprintf(buf, len, "%s", c->cur_file ? c->cur_file : cmdline);
}

/* The first error wins: "FILE:LINE: message". */
static int __attribute__((format(printf, 2, 3)))
fail(struct djinnd_config *c, const char *fmt, ...)
{
	char at[300];
	size_t n;
	va_list ap;

	if (c->err[0])
		return -EINVAL;
	where(c, at, sizeof(at));
	n = (size_t)snprintf(c->err, sizeof(c->err), "%s: ", at);
	if (n >= sizeof(c->err))
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(c->err + n, sizeof(c->err) - n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static void fmt_duration(uint64_t ns, char *buf, size_t len);
static void fmt_size(uint64_t b, char *buf, size_t len);

static const struct key *key_find(const char *section, const char *name)
{
	for (size_t i = 0; i < NR_KEYS; i++)
		if (!strcmp(keys[i].section, section) &&
		    !strcmp(keys[i].name, name))
			return &keys[i];
	return NULL;
}

static bool section_known(const char *section)
{
	for (size_t i = 0; i < NR_KEYS; i++)
		if (!strcmp(keys[i].section, section))
			return true;
	return false;
}

/* ---------------------------------------------------------------------- */
/* Values */

/* The decimal that starts @s (a digit, not a sign or a space), *@end
 * past it: 0 or -EINVAL. */
static int parse_lead(const char *s, uint64_t *v, char **end)
{
	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	*v = strtoull(s, end, 10);
	return errno ? -EINVAL : 0;
}

int config_parse_duration(const char *s, uint64_t *out)
{
	static const struct {
		const char *unit;
		uint64_t ns;
	} units[] = { { "ms", NSEC_PER_MSEC },
		      { "s", NSEC_PER_SEC },
		      { "m", 60 * NSEC_PER_SEC },
		      { "h", 3600 * NSEC_PER_SEC } };
	uint64_t v;
	char *end;

	if (parse_lead(s, &v, &end))
		return -EINVAL;
	for (size_t i = 0; i < ARRAY_SIZE(units); i++) {
		if (strcmp(end, units[i].unit))
			continue;
		if (v > UINT64_MAX / units[i].ns)
			return -EINVAL;
		*out = v * units[i].ns;
		return 0;
	}
	return -EINVAL;
}

static int parse_uint(const char *s, uint64_t *out)
{
	char *end;

	return parse_lead(s, out, &end) || *end ? -EINVAL : 0;
}

static int check_unix_path(struct djinnd_config *c, const struct key *k,
			   const char *path)
{
	if (!*path)
		return fail(c, "%s.%s: empty socket path", k->section, k->name);
	if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return fail(c, "%s.%s: socket path longer than %zu bytes: %s",
			    k->section, k->name,
			    sizeof(((struct sockaddr_un *)0)->sun_path) - 1,
			    path);
	return 0;
}

/* "tcp:HOST:PORT" (or "tls:"), HOST possibly empty or "[v6]", PORT
 * 1..65535. */
static int check_tcp(struct djinnd_config *c, const struct key *k,
		     const char *v)
{
	const char *spec = v + 4, *port = strrchr(spec, ':');
	uint64_t p;

	if (!port || parse_uint(port + 1, &p) || p < 1 || p > 65535)
		return fail(c, "%s.%s: '%s': want %.3s:HOST:PORT, PORT 1-65535",
			    k->section, k->name, v, v);
	if (*spec == '[' && (port == spec || port[-1] != ']'))
		return fail(c, "%s.%s: '%s': unclosed '[' in the host",
			    k->section, k->name, v);
	if (*spec != '[' && memchr(spec, ':', (size_t)(port - spec)))
		return fail(c, "%s.%s: '%s': write an IPv6 host as [ADDR]",
			    k->section, k->name, v);
	return 0;
}

static int check_listen(struct djinnd_config *c, const struct key *k,
			const char *v)
{
	if (!strncmp(v, "unix:", 5))
		return check_unix_path(c, k, v + 5);
	if (!strncmp(v, "tcp:", 4) || !strncmp(v, "tls:", 4))
		return check_tcp(c, k, v);
	return fail(c,
		    "%s.%s: '%s': want unix:PATH, tcp:HOST:PORT or "
		    "tls:HOST:PORT",
		    k->section, k->name, v);
}

static int check_group(struct djinnd_config *c, const struct key *k,
		       const char *v)
{
	if (!*v || strlen(v) > 32 ||
	    strspn(v, "abcdefghijklmnopqrstuvwxyz"
		      "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
		      "0123456789_-.") != strlen(v))
		return fail(c, "%s.%s: '%s' is not a group name", k->section,
			    k->name, v);
	if (!getgrnam(v))
		return fail(c, "%s.%s: no group '%s' on this system",
			    k->section, k->name, v);
	return 0;
}

/* "all", or indices 0-63 separated by commas. */
static int parse_devices(const char *v, uint64_t *mask)
{
	const char *p = v;

	*mask = 0;
	if (!strcmp(v, "all"))
		return 0;
	for (;;) {
		char *end;
		unsigned long i;

		if (!isdigit((unsigned char)*p))
			return -EINVAL;
		i = strtoul(p, &end, 10);
		if (i > 63 || (*mask & (1ull << i)))
			return -EINVAL;
		*mask |= 1ull << i;
		if (!*end)
			return 0;
		if (*end != ',')
			return -EINVAL;
		p = end + 1;
	}
}

static int key_set(struct djinnd_config *c, const struct key *k, const char *v,
		   int from)
{
	void *p = (char *)c + k->off;
	uint64_t n;
	int ret;

	switch (k->type) {
	case T_LISTEN:
		ret = check_listen(c, k, v);
		if (ret)
			return ret;
		/* The file's list replaces the default, the command
		 * line's replaces the file's. */
		if ((unsigned int)from > c->listen_from) {
			c->srv.nr_listen = 0;
			c->listen_from = (unsigned int)from;
		}
		if (c->srv.nr_listen == SERVER_MAX_LISTEN)
			return fail(c, "server.listen: at most %d addresses",
				    SERVER_MAX_LISTEN);
		for (unsigned int i = 0; i < c->srv.nr_listen; i++)
			if (!strcmp(c->srv.listen[i], v))
				return fail(c, "server.listen: %s twice", v);
		if (!(v = keep(c, v)))
			return fail(c, "out of memory");
		c->listen_line[c->srv.nr_listen] = c->cur_line;
		c->srv.listen[c->srv.nr_listen++] = v;
		return 0;
	case T_SOCKET:
		ret = check_unix_path(c, k, v);
		break;
	case T_GROUP: /* empty: "djinn" if that group exists */
		ret = *v ? check_group(c, k, v) : 0;
		break;
	case T_DIR:
		ret = *v == '/' ? 0 :
				  fail(c, "%s.%s: '%s' is not an absolute path",
				       k->section, k->name, v);
		break;
	case T_BACKEND: /* auto: cuda if there is a GPU, else cpu */
		if (!strcmp(v, "cpu") || !strcmp(v, "auto"))
			ret = 0;
		else if (!strcmp(v, "cuda"))
			ret = cuda_backend_create ?
				      0 :
				      fail(c,
					   "%s.%s: cuda is not built into this "
					   "djinnd (cpu is)",
					   k->section, k->name);
		else
			ret = fail(c, "%s.%s: '%s': want cpu or cuda (or auto)",
				   k->section, k->name, v);
		break;
	case T_DEVICES:
		if (parse_devices(v, &n))
			return fail(c,
				    "%s.%s: '%s': want all, or device "
				    "numbers 0-63 separated by commas",
				    k->section, k->name, v);
		*(uint64_t *)p = n;
		return 0;
	case T_UINT:
	case T_PCT:
		if (parse_uint(v, &n) || n < k->min || n > k->max)
			return fail(c,
				    "%s.%s: '%s': want a number from %llu to "
				    "%llu%s",
				    k->section, k->name, v,
				    (unsigned long long)k->min,
				    (unsigned long long)k->max,
				    k->type == T_PCT ? " (percent)" : "");
		*(unsigned int *)p = (unsigned int)n;
		return 0;
	case T_SIZE:
	case T_DURATION: {
		bool size = k->type == T_SIZE;
		char lo[32], hi[32];

		ret = size ? parse_size(v, &n) : config_parse_duration(v, &n);
		if (!ret && n >= k->min && n <= k->max) {
			*(uint64_t *)p = n;
			return 0;
		}
		(size ? fmt_size : fmt_duration)(k->min, lo, sizeof(lo));
		(size ? fmt_size : fmt_duration)(k->max, hi, sizeof(hi));
		return fail(c, "%s.%s: '%s': want a %s from %s to %s%s",
			    k->section, k->name, v, size ? "size" : "time", lo,
			    hi,
			    size ? ", such as 512M or 16G" :
				   " with its unit: ms, s, m or h");
	}
	case T_POLICY:
	case T_LEVEL: {
		bool policy = k->type == T_POLICY;

		ret = policy ? sched_policy_parse(v) : log_parse_level(v);
		if (ret < 0)
			return fail(c, "%s.%s: '%s': want %s", k->section,
				    k->name, v,
				    policy ? "semantic, lru or static" :
					     "err, warning, notice, info or "
					     "debug");
		if (policy)
			*(unsigned int *)p = (unsigned int)ret;
		else
			*(int *)p = ret;
		return 0;
	}
	case T_FILE:
		ret = 0;
		break;
	case T_LEASES:
		if (strcmp(v, "auto") && strcmp(v, "kmod") && strcmp(v, "user"))
			return fail(c, "%s.%s: '%s': want auto, kmod or user",
				    k->section, k->name, v);
		ret = 0;
		break;
	case T_PLAIN_TCP:
		if (strcmp(v, "loopback") && strcmp(v, "any"))
			return fail(c, "%s.%s: '%s': want loopback or any",
				    k->section, k->name, v);
		ret = 0;
		break;
	case T_TLS_ID:
		if (strcmp(v, "cn") && strcmp(v, "san-dns") &&
		    strcmp(v, "san-email") && strcmp(v, "san-uri"))
			return fail(c,
				    "%s.%s: '%s': want cn, san-dns, san-email "
				    "or san-uri",
				    k->section, k->name, v);
		ret = 0;
		break;
	case T_KTLS:
		if (strcmp(v, "auto") && strcmp(v, "off"))
			return fail(c, "%s.%s: '%s': want auto or off",
				    k->section, k->name, v);
		ret = 0;
		break;
	case T_TCP:
		if (!*v) {
			ret = 0;
			break;
		}
		if (strncmp(v, "tcp:", 4))
			return fail(c, "%s.%s: '%s': want tcp:HOST:PORT",
				    k->section, k->name, v);
		ret = check_tcp(c, k, v);
		break;
	default:
		return fail(c, "%s.%s: bad key type", k->section, k->name);
	}
	if (ret)
		return ret;
	/* The string types: empty means unset. */
	if (!*v) {
		*(const char **)p = NULL;
		return 0;
	}
	if (!(v = keep(c, v)))
		return fail(c, "out of memory");
	*(const char **)p = v;
	return 0;
}

/* One id of a uids or gids list: a number, or a user's or group's name
 * (looked up now). */
static int parse_id(const char *s, bool group, uint32_t *out)
{
	char buf[4096];
	uint64_t v;

	if (!parse_uint(s, &v))
		return v < UINT32_MAX ? (*out = (uint32_t)v, 0) : -ERANGE;
	if (group) {
		struct group g, *gp = NULL;

		if (getgrnam_r(s, &g, buf, sizeof(buf), &gp) || !gp)
			return -ENOENT;
		*out = gp->gr_gid;
	} else {
		struct passwd p, *pp = NULL;

		if (getpwnam_r(s, &p, buf, sizeof(buf), &pp) || !pp)
			return -ENOENT;
		*out = pp->pw_uid;
	}
	return 0;
}

/* The index of @model's entry of @s's budgets, or -1. */
static int budget_index(const struct server_config *s, const char *model)
{
	for (unsigned int i = 0; i < s->nr_budgets; i++)
		if (!strcmp(s->budgets[i].model, model))
			return (int)i;
	return -1;
}

/* [model.NAME] budget = SIZE (0: none) or ring_slots = 1 .. 8
 * (struct model_budget). An entry left with neither goes. */
static int model_budget_set(struct djinnd_config *c, const char *model,
			    const char *name, const char *value)
{
	struct server_config *s = &c->srv;
	bool ring = !strcmp(name, "ring_slots");
	struct model_budget *b;
	uint64_t v;
	int i;

	if (ring &&
	    (parse_uint(value, &v) || v < 1 || v > SERVER_RING_SLOTS_MAX))
		return fail(c,
			    "model.%s.ring_slots: '%s': want a number from 1 "
			    "to %d (the layers its ring holds, 2 unless set)",
			    model, value, SERVER_RING_SLOTS_MAX);
	if (!ring &&
	    (parse_size(value, &v) || (v && v < 1ull << 20) || v > 1ull << 50))
		return fail(c,
			    "model.%s.budget: '%s': want 0 (none) or a size "
			    "from 1M to 1024T, such as 6G",
			    model, value);
	i = budget_index(s, model);
	if (i < 0) {
		if (!v)
			return 0;
		if (s->nr_budgets == SERVER_TENANT_MAPS_MAX)
			return fail(c,
				    "model.%s.%s: at most %d models with a "
				    "budget or ring_slots",
				    model, name, SERVER_TENANT_MAPS_MAX);
		i = (int)s->nr_budgets++;
		memset(&s->budgets[i], 0, sizeof(s->budgets[i]));
		snprintf(s->budgets[i].model, sizeof(s->budgets[i].model), "%s",
			 model);
	}
	b = &s->budgets[i];
	if (ring ? (b->slots_file == c->cur_file && b->slots_line &&
		    c->cur_line) :
		   (b->bytes_file == c->cur_file && b->bytes_line &&
		    c->cur_line))
		return fail(c, "model.%s.%s: already set on line %u", model,
			    name, ring ? b->slots_line : b->bytes_line);
	if (ring) {
		b->slots = (unsigned int)v;
		b->slots_file = c->cur_file;
		b->slots_line = c->cur_line;
	} else {
		b->bytes = v;
		b->bytes_file = c->cur_file;
		b->bytes_line = c->cur_line;
	}
	if (!b->bytes && !b->slots)
		*b = s->budgets[--s->nr_budgets];
	return 0;
}

/*
 * A [model.NAME] section's keys: readable = yes|no, whether the weights
 * of served model NAME are open to every client (Documentation/
 * security.rst, "Text"); budget and ring_slots, the device bytes it may
 * take and its ring's layers when over them (model_budget_set()).
 */
static int model_set(struct djinnd_config *c, const char *model,
		     const char *name, const char *value)
{
	struct server_config *s = &c->srv;
	unsigned int i;
	bool on;

	if (!model_name_ok(model))
		return fail(c,
			    "[model.%s]: a model name is 1 to 63 of "
			    "[A-Za-z0-9._-], not starting with '.'",
			    model);
	if (!strcmp(name, "budget") || !strcmp(name, "ring_slots"))
		return model_budget_set(c, model, name, value);
	if (strcmp(name, "readable"))
		return fail(c,
			    "unknown key '%s' in [model.%s] (want readable, "
			    "budget or ring_slots)",
			    name, model);
	on = !strcmp(value, "yes");
	if (!on && strcmp(value, "no"))
		return fail(c, "model.%s.readable: '%s': want yes or no", model,
			    value);
	for (i = 0; i < s->nr_readable; i++)
		if (!strcmp(s->readable[i], model))
			break;
	if (on && i == s->nr_readable) {
		if (i == SERVER_TENANT_MAPS_MAX)
			return fail(c, "model.%s.readable: at most %d models",
				    model, SERVER_TENANT_MAPS_MAX);
		snprintf(s->readable[s->nr_readable++], DJINN_MODEL_NAME_MAX,
			 "%s", model);
	} else if (!on && i < s->nr_readable) {
		memcpy(s->readable[i], s->readable[--s->nr_readable],
		       DJINN_MODEL_NAME_MAX);
		memset(s->readable[s->nr_readable], 0, DJINN_MODEL_NAME_MAX);
	}
	return 0;
}

/* [tenant.NAME]'s quotas, one row each: parsed, printed and compared by
 * this table. 0 is none, so a set quota is at least 1. */
static const struct tenant_quota_key {
	const char *name;
	enum key_type type; /* T_SIZE, T_DURATION or T_UINT */
	size_t off; /* in struct tenant_map: uint64_t, or unsigned int */
} tenant_quota_keys[] = {
	{ "memory", T_SIZE, offsetof(struct tenant_map, memory) },
	{ "swap", T_SIZE, offsetof(struct tenant_map, swap) },
	{ "guaranteed", T_SIZE, offsetof(struct tenant_map, guaranteed) },
	{ "lease_max", T_DURATION, offsetof(struct tenant_map, lease_max_ns) },
	{ "sessions", T_UINT, offsetof(struct tenant_map, sessions) },
	{ "connections", T_UINT, offsetof(struct tenant_map, conns) },
	{ "inflight", T_UINT, offsetof(struct tenant_map, inflight) },
};

/* Quota @q of @m, widened. */
static uint64_t tquota_get(const struct tenant_map *m,
			   const struct tenant_quota_key *q)
{
	const char *p = (const char *)m + q->off;

	return q->type == T_UINT ? *(const unsigned int *)p :
				   *(const uint64_t *)p;
}

/* @tenant's entry of tenants' maps, made if there is none: NULL when
 * there is no room (said in c->err). */
static struct tenant_map *tmap_get(struct djinnd_config *c, const char *tenant,
				   const char *key)
{
	struct server_config *s = &c->srv;
	struct tenant_map *m;

	for (unsigned int i = 0; i < s->nr_tmaps; i++)
		if (!strcmp(s->tmaps[i].tenant, tenant))
			return &s->tmaps[i];
	if (s->nr_tmaps == SERVER_TENANT_MAPS_MAX) {
		fail(c,
		     "tenant.%s.%s: at most %d tenants with uids, gids or "
		     "client_kernels",
		     tenant, key, SERVER_TENANT_MAPS_MAX);
		return NULL;
	}
	m = &s->tmaps[s->nr_tmaps++];
	memset(m, 0, sizeof(*m));
	snprintf(m->tenant, sizeof(m->tenant), "%s", tenant);
	return m;
}

/* tenant.NAME.uids or .gids = LIST: numbers or names, by commas. */
static int tenant_ids_set(struct djinnd_config *c, const char *tenant,
			  bool group, const char *value)
{
	const char *what = group ? "gids" : "uids";
	struct tenant_map *m = NULL;
	unsigned int nr = 0;
	uint32_t ids[TENANT_IDS_MAX];
	char list[1024], *rest = list, *tok;

	if (strlen(value) >= sizeof(list))
		return fail(c, "tenant.%s.%s: a list of at most %zu bytes",
			    tenant, what, sizeof(list) - 1);
	snprintf(list, sizeof(list), "%s", value);
	while ((tok = strsep(&rest, ","))) {
		char *e;

		while (*tok == ' ' || *tok == '\t')
			tok++;
		e = tok + strlen(tok);
		while (e > tok && (e[-1] == ' ' || e[-1] == '\t'))
			*--e = 0;
		if (nr == TENANT_IDS_MAX)
			return fail(c, "tenant.%s.%s: at most %d ids", tenant,
				    what, TENANT_IDS_MAX);
		if (!*tok || parse_id(tok, group, &ids[nr]))
			return fail(c,
				    "tenant.%s.%s: '%s': want %s numbers or "
				    "names, by commas",
				    tenant, what, *tok ? tok : value,
				    group ? "group" : "user");
		nr++;
	}
	if (!nr)
		return fail(c, "tenant.%s.%s: an empty list", tenant, what);
	m = tmap_get(c, tenant, what);
	if (!m)
		return -EINVAL;
	if (group ? (m->gids_file == c->cur_file && m->gids_line &&
		     c->cur_line) :
		    (m->uids_file == c->cur_file && m->uids_line &&
		     c->cur_line))
		return fail(c, "tenant.%s.%s: already set on line %u", tenant,
			    what, group ? m->gids_line : m->uids_line);
	if (group) {
		memcpy(m->gids, ids, nr * sizeof(ids[0]));
		m->nr_gids = nr;
		m->gids_file = c->cur_file;
		m->gids_line = c->cur_line;
	} else {
		memcpy(m->uids, ids, nr * sizeof(ids[0]));
		m->nr_uids = nr;
		m->uids_file = c->cur_file;
		m->uids_line = c->cur_line;
	}
	return 0;
}

/* A [tenant.NAME] section's keys: share = 1 .. SCHED_SHARE_MAX, the
 * tenant's weight in the scheduler's fair queueing; uids and gids, who
 * the tenant is (struct tenant_map). */
static int tenant_set(struct djinnd_config *c, const char *tenant,
		      const char *name, const char *value)
{
	struct server_config *s = &c->srv;
	size_t n = strlen(tenant);
	unsigned int i;
	uint64_t v;

	if (!n || n >= DJINN_TENANT_LEN)
		return fail(c, "[tenant.%s]: a tenant name has 1 to %d bytes",
			    tenant, DJINN_TENANT_LEN - 1);
	if (!tenant_name_ok(tenant))
		return fail(c,
			    "[tenant.%s]: a tenant name is printable bytes "
			    "without spaces",
			    tenant);
	if (!strcmp(name, "uids") || !strcmp(name, "gids"))
		return tenant_ids_set(c, tenant, name[0] == 'g', value);
	for (i = 0; i < ARRAY_SIZE(tenant_quota_keys); i++) {
		const struct tenant_quota_key *q = &tenant_quota_keys[i];
		struct tenant_map *m;
		char *p;
		int ret;

		if (strcmp(name, q->name))
			continue;
		ret = q->type == T_SIZE	    ? parse_size(value, &v) :
		      q->type == T_DURATION ? config_parse_duration(value, &v) :
					      parse_uint(value, &v);
		if (ret || !v ||
		    v > (q->type == T_SIZE     ? 1ull << 50 :
			 q->type == T_DURATION ? 24 * 3600 * NSEC_PER_SEC :
						 1u << 20))
			return fail(c, "tenant.%s.%s: '%s': want %s", tenant,
				    name, value,
				    q->type == T_SIZE ?
					    "a size from 1 byte to 1024T, "
					    "such as 8G" :
				    q->type == T_DURATION ?
					    "a time from 1ms to 24h with its "
					    "unit" :
					    "a number from 1 to 1048576");
		m = tmap_get(c, tenant, name);
		if (!m)
			return -EINVAL;
		p = (char *)m + q->off;
		if (q->type == T_UINT)
			*(unsigned int *)p = (unsigned int)v;
		else
			*(uint64_t *)p = v;
		return 0;
	}
	if (!strcmp(name, "client_kernels")) {
		struct tenant_map *m;
		bool on = !strcmp(value, "yes");

		if (!on && strcmp(value, "no"))
			return fail(c,
				    "tenant.%s.client_kernels: '%s': want yes "
				    "or no",
				    tenant, value);
		m = tmap_get(c, tenant, name);
		if (!m)
			return -EINVAL;
		m->client_kernels = on;
		return 0;
	}
	if (strcmp(name, "share"))
		return fail(c,
			    "unknown key '%s' in [tenant.%s] (want share, "
			    "uids, gids, client_kernels, memory, swap, "
			    "guaranteed, sessions, connections, inflight or "
			    "lease_max)",
			    name, tenant);
	if (parse_uint(value, &v) || v < 1 || v > SCHED_SHARE_MAX)
		return fail(c,
			    "tenant.%s.share: '%s': want a number from 1 to %d",
			    tenant, value, SCHED_SHARE_MAX);
	for (i = 0; i < s->nr_shares; i++)
		if (!strcmp(s->shares[i].tenant, tenant))
			break;
	if (i == s->nr_shares) {
		if (i == SCHED_TENANTS_MAX)
			return fail(c, "tenant.%s.share: at most %d tenants",
				    tenant, SCHED_TENANTS_MAX);
		s->nr_shares++;
	} else if (c->share_origin[i].file == c->cur_file &&
		   c->share_origin[i].line && c->cur_line) {
		return fail(c, "tenant.%s.share: already set on line %u",
			    tenant, c->share_origin[i].line);
	}
	snprintf(s->shares[i].tenant, sizeof(s->shares[i].tenant), "%s",
		 tenant);
	s->shares[i].share = (unsigned int)v;
	c->share_origin[i].file = c->cur_file;
	c->share_origin[i].line = c->cur_line;
	return 0;
}

static int set_from(struct djinnd_config *c, const struct key *k,
		    const char *value, int from)
{
	struct config_origin *o = &c->origin[k - keys];
	int ret;

	if (from == FROM_FILE && k->type != T_LISTEN && o->line &&
	    o->file == c->cur_file)
		return fail(c, "%s.%s: already set on line %u", k->section,
			    k->name, o->line);
	ret = key_set(c, k, value, from);
	if (ret)
		return ret;
	o->file = c->cur_file;
	o->line = c->cur_line;
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Defaults */

/* Sockets: /run/djinn/ for root (the system service), else
 * $XDG_RUNTIME_DIR/djinn/, else ./run/ (a checkout). */
static const char *run_dir(char *buf, size_t len)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");

	if (geteuid() == 0)
		return "/run/djinn";
	if (xdg && *xdg) {
		snprintf(buf, len, "%s/djinn", xdg);
		return buf;
	}
	return "run";
}

void config_init(struct djinnd_config *c)
{
	char dir[4096], path[4200];

	memset(c, 0, sizeof(*c));
	c->srv = (struct server_config){
		.backend = "cpu",
		.cpu_mem = 2ull << 30,
		.lease_default_ns = 10 * NSEC_PER_SEC,
		.lease_min_ns = 10 * NSEC_PER_MSEC,
		.lease_max_ns = 3600 * NSEC_PER_SEC,
		.max_sessions = 65536,
		.max_sessions_per_uid = 4096,
		.max_conns = 4096,
		.max_conns_per_uid = 1024,
		.max_conns_per_addr = 1024,
		.frame_timeout_ns = 5 * NSEC_PER_SEC,
		.idle_timeout_ns = 60 * NSEC_PER_SEC,
		.warn_pct = 80,
		.crit_pct = 95,
		.model_dir = "/var/lib/djinn/models",
		.leases = "auto",
		.plain_tcp = "loopback",
		.tls_tenant_from = "cn",
		.tls_ktls = "auto",
		.sched = {
			.policy = DJINN_SCHED_SEMANTIC,
			.quantum_ns = SCHED_QUANTUM_DEFAULT,
			.admit_wait_ns = SCHED_ADMIT_WAIT_DEFAULT,
			.max_io_wait_ns = SCHED_MAX_IO_WAIT_DEFAULT,
			.swap_margin_pct = SCHED_SWAP_MARGIN_DEFAULT,
		},
	};
	c->log_level = LOG_INFO;
	run_dir(dir, sizeof(dir));
	snprintf(path, sizeof(path), "unix:%s/djinnd.sock", run_dir(dir, 4096));
	c->srv.listen[0] = keep(c, path);
	c->srv.nr_listen = c->srv.listen[0] ? 1 : 0;
	snprintf(path, sizeof(path), "%s/admin.sock", run_dir(dir, 4096));
	c->srv.admin_socket = keep(c, path);
}

void config_free(struct djinnd_config *c)
{
	for (unsigned int i = 0; i < c->nr_strs; i++)
		free(c->strs[i]);
	free(c->strs);
	c->strs = NULL;
	c->nr_strs = c->cap_strs = 0;
}

/* ---------------------------------------------------------------------- */
/* The file */

struct reader {
	FILE *f;
	struct djinnd_config *c;
	bool too_long;
};

/* fgets for inih, counting lines. inih would cut a line longer than its
 * buffer in two and read the rest as another line: refuse it instead. */
static char *read_line(char *str, int num, void *stream)
{
	struct reader *r = stream;
	char *s = fgets(str, num, r->f);

	if (!s)
		return NULL;
	r->c->cur_line++;
	if (!strchr(s, '\n') && !feof(r->f)) {
		r->too_long = true;
		return NULL;
	}
	return s;
}

static int on_line(void *user, const char *section, const char *name,
		   const char *value)
{
	struct djinnd_config *c = user;
	const struct key *k;

	if (c->err[0])
		return 1; /* report the first error only */
	if (!*section) {
		fail(c, "'%s' before any [section]", name);
		return 0;
	}
	if (!strncmp(section, "tenant.", 7))
		return tenant_set(c, section + 7, name, value) ? 0 : 1;
	if (!strncmp(section, "model.", 6))
		return model_set(c, section + 6, name, value) ? 0 : 1;
	k = key_find(section, name);
	if (!k) {
		if (section_known(section))
			fail(c, "unknown key '%s' in [%s]", name, section);
		else
			fail(c, "unknown section [%s]", section);
		return 0;
	}
	return set_from(c, k, value, FROM_FILE) ? 0 : 1;
}

int config_load(struct djinnd_config *c, const char *path)
{
	struct reader r = { .c = c };
	struct stat sb;
	int ret;

	c->err[0] = 0;
	r.f = fopen(path, "re");
	if (!r.f) {
		ret = -errno;
		snprintf(c->err, sizeof(c->err), "%s: %s", path,
			 strerror(-ret));
		return ret;
	}
	if (fstat(fileno(r.f), &sb) || S_ISDIR(sb.st_mode)) {
		fclose(r.f);
		snprintf(c->err, sizeof(c->err), "%s: %s", path,
			 strerror(EISDIR));
		return -EISDIR;
	}
	c->path = keep(c, path);
	if (!c->path) {
		fclose(r.f);
		return -ENOMEM;
	}
	c->cur_file = c->path;
	c->cur_line = 0;
	ret = ini_parse_stream(read_line, &r, on_line, c);
	if (r.too_long) {
		c->err[0] = 0;
		fail(c, "line longer than %d characters", INI_MAX_LINE - 2);
	} else if (ferror(r.f)) {
		snprintf(c->err, sizeof(c->err), "%s: read error", path);
	} else if (ret > 0 && !c->err[0]) {
		/* inih's own refusal: neither "[section]" nor "key = value" */
		c->cur_line = (unsigned int)ret;
		fail(c, "syntax error: want [section] or key = value");
	} else if (ret < 0 && !c->err[0]) {
		snprintf(c->err, sizeof(c->err), "%s: out of memory", path);
	}
	fclose(r.f);
	c->cur_file = cmdline;
	c->cur_line = 0;
	return c->err[0] ? -EINVAL : 0;
}

int config_set(struct djinnd_config *c, const char *key, const char *value)
{
	const char *dot = strchr(key, '.');
	char section[64];
	const struct key *k = NULL;

	c->err[0] = 0;
	c->cur_file = cmdline;
	c->cur_line = 0;
	/* tenant.NAME.share: NAME may not hold a dot, the key none */
	if (!strncmp(key, "tenant.", 7) && strrchr(key, '.') > key + 7) {
		const char *last = strrchr(key, '.');
		char tenant[DJINN_TENANT_LEN + 1];
		size_t n = (size_t)(last - key - 7);

		if (n >= sizeof(tenant))
			n = sizeof(tenant) - 1;
		memcpy(tenant, key + 7, n);
		tenant[n] = 0;
		return tenant_set(c, tenant, last + 1, value);
	}
	/* model.NAME.readable: NAME may hold dots, the key none */
	if (!strncmp(key, "model.", 6) && strrchr(key, '.') > key + 6) {
		const char *last = strrchr(key, '.');
		char model[DJINN_MODEL_NAME_MAX + 1];
		size_t n = (size_t)(last - key - 6);

		if (n >= sizeof(model))
			n = sizeof(model) - 1;
		memcpy(model, key + 6, n);
		model[n] = 0;
		return model_set(c, model, last + 1, value);
	}
	if (dot && (size_t)(dot - key) < sizeof(section)) {
		memcpy(section, key, (size_t)(dot - key));
		section[dot - key] = 0;
		k = key_find(section, dot + 1);
	}
	if (!k)
		return fail(c,
			    "unknown key '%s' (want SECTION.KEY, "
			    "see djinnd.conf(5))",
			    key);
	return set_from(c, k, value, FROM_FLAG);
}

/* ---------------------------------------------------------------------- */
/* Across keys */

static int fail_at(struct djinnd_config *c, const struct key *k)
{
	const struct config_origin *o = &c->origin[k - keys];

	c->cur_file = o->file ? o->file : "default";
	c->cur_line = o->line;
	return 0;
}

/* The later of two keys, to blame. */
static const struct key *later(const struct djinnd_config *c,
			       const struct key *a, const struct key *b)
{
	const struct config_origin *oa = &c->origin[a - keys];
	const struct config_origin *ob = &c->origin[b - keys];

	if (oa->file == cmdline || (oa->file && !ob->file))
		return a;
	if (ob->file == cmdline || (ob->file && !oa->file))
		return b;
	return oa->line > ob->line ? a : b;
}

/* Whether "tcp:HOST:PORT" binds only loopback addresses (an empty HOST
 * is 127.0.0.1). */
static bool tcp_loopback(const char *spec)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai, *a;
	char host[256];
	const char *colon = strrchr(spec + 4, ':');
	size_t n = colon ? (size_t)(colon - spec - 4) : 0;
	bool lo = true;

	if (n >= sizeof(host))
		return false;
	memcpy(host, spec + 4, n);
	host[n] = 0;
	if (!*host)
		return true;
	if (host[0] == '[' && n > 2 && host[n - 1] == ']') {
		memmove(host, host + 1, n - 2);
		host[n - 2] = 0;
	}
	if (getaddrinfo(host, NULL, &hints, &ai))
		return false;
	for (a = ai; a; a = a->ai_next) {
		if (a->ai_family == AF_INET)
			lo &= (ntohl(((struct sockaddr_in *)a->ai_addr)
					     ->sin_addr.s_addr) >>
			       24) == 127;
		else if (a->ai_family == AF_INET6)
			lo &= IN6_IS_ADDR_LOOPBACK(
				&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr);
		else
			lo = false;
	}
	freeaddrinfo(ai);
	return lo;
}

/* An error about @m's uids (@group: gids) is reported where they were
 * set. True, for the condition it stands in. */
static bool tmap_at(struct djinnd_config *c, const struct tenant_map *m,
		    bool group)
{
	c->cur_file = group ? m->gids_file : m->uids_file;
	c->cur_line = group ? m->gids_line : m->uids_line;
	if (!c->cur_file)
		c->cur_file = cmdline;
	return true;
}

int config_validate(struct djinnd_config *c)
{
	struct server_config *s = &c->srv;
	const struct key *k;

	c->err[0] = 0;
	if (s->warn_pct >= s->crit_pct) {
		k = later(c, key_find("memory", "pressure_warning"),
			  key_find("memory", "pressure_critical"));
		fail_at(c, k);
		return fail(c,
			    "%s.%s: pressure_warning (%u%%) must be below "
			    "pressure_critical (%u%%)",
			    k->section, k->name, s->warn_pct, s->crit_pct);
	}
	if (s->lease_min_ns > s->lease_default_ns ||
	    s->lease_default_ns > s->lease_max_ns) {
		k = later(c,
			  later(c, key_find("lease", "min"),
				key_find("lease", "default")),
			  key_find("lease", "max"));
		fail_at(c, k);
		return fail(
			c,
			"%s.%s: want min <= default <= max "
			"(%llu ms, %llu ms, %llu ms)",
			k->section, k->name,
			(unsigned long long)(s->lease_min_ns / NSEC_PER_MSEC),
			(unsigned long long)(s->lease_default_ns /
					     NSEC_PER_MSEC),
			(unsigned long long)(s->lease_max_ns / NSEC_PER_MSEC));
	}
	/* Plain TCP authenticates nobody: anyone who reaches the address
	 * opens sessions. Loopback only, unless the administrator says. */
	for (unsigned int i = 0;
	     s->plain_tcp && strcmp(s->plain_tcp, "any") && i < s->nr_listen;
	     i++) {
		if (strncmp(s->listen[i], "tcp:", 4) ||
		    tcp_loopback(s->listen[i]))
			continue;
		k = key_find("server", "listen");
		fail_at(c, k);
		return fail(c,
			    "server.listen: %s is not loopback, and plain TCP "
			    "authenticates no one: listen with TLS "
			    "(tls:HOST:PORT and [tls]), or on 127.0.0.1 or "
			    "[::1], or set server.plain_tcp = any to let "
			    "anyone who reaches it open sessions",
			    s->listen[i]);
	}
	/* A TLS listener needs the server's certificate and key, and a way
	 * to know its clients. */
	for (unsigned int i = 0; i < s->nr_listen; i++) {
		const char *miss = NULL;

		if (strncmp(s->listen[i], "tls:", 4))
			continue;
		if (!s->tls_cert || !*s->tls_cert)
			miss = "tls.certificate (the server's certificate "
			       "chain, PEM)";
		else if (!s->tls_key || !*s->tls_key)
			miss = "tls.key (its private key, PEM)";
		else if ((!s->tls_client_ca || !*s->tls_client_ca) &&
			 (!s->tls_tokens || !*s->tls_tokens))
			miss = "tls.client_ca (the CA of client certificates) "
			       "or tls.tokens (bearer tokens)";
		if (!miss)
			break;
		k = key_find("server", "listen");
		fail_at(c, k);
		return fail(c, "server.listen: %s needs %s", s->listen[i],
			    miss);
	}
	/* One tenant a uid (a gid): who a client is must not depend on the
	 * order of the sections. */
	for (unsigned int i = 0; i < s->nr_tmaps; i++)
		for (unsigned int j = 0; j < i; j++) {
			const struct tenant_map *a = &s->tmaps[j];
			const struct tenant_map *b = &s->tmaps[i];

			for (unsigned int x = 0; x < b->nr_uids; x++)
				for (unsigned int y = 0; y < a->nr_uids; y++)
					if (b->uids[x] == a->uids[y] &&
					    tmap_at(c, b, false))
						return fail(c,
							    "tenant.%s.uids: "
							    "uid %u is tenant "
							    "%s's already",
							    b->tenant,
							    b->uids[x],
							    a->tenant);
			for (unsigned int x = 0; x < b->nr_gids; x++)
				for (unsigned int y = 0; y < a->nr_gids; y++)
					if (b->gids[x] == a->gids[y] &&
					    tmap_at(c, b, true))
						return fail(c,
							    "tenant.%s.gids: "
							    "gid %u is tenant "
							    "%s's already",
							    b->tenant,
							    b->gids[x],
							    a->tenant);
		}
	if (s->compute_threads > 1 && s->backend &&
	    !strcmp(s->backend, "cpu")) {
		k = key_find("device", "compute_threads");
		fail_at(c, k);
		return fail(c,
			    "device.compute_threads: '%u': the cpu backend "
			    "runs one graph at a time (device.threads is its "
			    "parallelism)",
			    s->compute_threads);
	}
	for (unsigned int i = 0; i < s->nr_listen; i++) {
		if (strncmp(s->listen[i], "unix:", 5) ||
		    strcmp(s->listen[i] + 5, s->admin_socket))
			continue;
		k = key_find("server", "admin_socket");
		fail_at(c, later(c, k, key_find("server", "listen")));
		return fail(c,
			    "server.admin_socket: %s is also a listen "
			    "address",
			    s->admin_socket);
	}
	/* The ring is a model's over its budget: without one, ring_slots
	 * would say nothing. */
	for (unsigned int i = 0; i < s->nr_budgets; i++) {
		const struct model_budget *b = &s->budgets[i];

		if (b->bytes)
			continue;
		c->cur_file = b->slots_file ? b->slots_file : cmdline;
		c->cur_line = b->slots_line;
		return fail(c,
			    "model.%s.ring_slots: %u without a budget: set "
			    "model.%s.budget too (the ring streams the layers "
			    "past it)",
			    b->model, b->slots, b->model);
	}
	c->cur_file = cmdline;
	c->cur_line = 0;
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Printing and reloading */

static void fmt_duration(uint64_t ns, char *buf, size_t len)
{
	if (!ns)
		snprintf(buf, len, "0s");
	else if (ns % (3600 * NSEC_PER_SEC) == 0)
		snprintf(buf, len, "%lluh",
			 (unsigned long long)(ns / 3600 / NSEC_PER_SEC));
	else if (ns % (60 * NSEC_PER_SEC) == 0)
		snprintf(buf, len, "%llum",
			 (unsigned long long)(ns / 60 / NSEC_PER_SEC));
	else if (ns % NSEC_PER_SEC == 0)
		snprintf(buf, len, "%llus",
			 (unsigned long long)(ns / NSEC_PER_SEC));
	else
		snprintf(buf, len, "%llums",
			 (unsigned long long)(ns / NSEC_PER_MSEC));
}

static void fmt_size(uint64_t b, char *buf, size_t len)
{
	static const char units[] = "KMGT";
	int u = -1;

	while (u < 3 && b && b % 1024 == 0) {
		b /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%llu", (unsigned long long)b);
	else
		snprintf(buf, len, "%llu%c", (unsigned long long)b, units[u]);
}

/* One key's value as the file would spell it ("a, b" for a list). */
static void key_fmt(const struct djinnd_config *c, const struct key *k,
		    char *buf, size_t len)
{
	const void *p = (const char *)c + k->off;
	const char *s;
	uint64_t m;
	size_t n = 0;

	buf[0] = 0;
	switch (k->type) {
	case T_LISTEN:
		for (unsigned int i = 0; i < c->srv.nr_listen && n < len; i++)
			n += (size_t)snprintf(buf + n, len - n, "%s%s",
					      i ? ", " : "", c->srv.listen[i]);
		break;
	case T_DEVICES:
		m = *(const uint64_t *)p;
		if (!m)
			snprintf(buf, len, "all");
		for (int i = 0; i < 64 && m && n < len; i++)
			if (m & (1ull << i))
				n += (size_t)snprintf(buf + n, len - n, "%s%d",
						      n ? "," : "", i);
		break;
	case T_UINT:
	case T_PCT:
		snprintf(buf, len, "%u", *(const unsigned int *)p);
		break;
	case T_SIZE:
		fmt_size(*(const uint64_t *)p, buf, len);
		break;
	case T_DURATION:
		fmt_duration(*(const uint64_t *)p, buf, len);
		break;
	case T_LEVEL:
		snprintf(buf, len, "%s", log_level_name(*(const int *)p));
		break;
	case T_POLICY:
		snprintf(buf, len, "%s",
			 sched_policy_name(*(const unsigned int *)p));
		break;
	default:
		s = *(const char *const *)p;
		snprintf(buf, len, "%s", s ? s : "");
		break;
	}
}

static void origin_fmt(const struct djinnd_config *c, size_t i, char *buf,
		       size_t len)
{
	const struct config_origin *o = &c->origin[i];

	if (!o->file)
		snprintf(buf, len, "default");
	else if (!o->line)
		snprintf(buf, len, "%s", o->file);
	else
		snprintf(buf, len, "%s:%u", o->file, o->line);
}

/* @b's keys, for config_print(). */
static void print_budget(const struct model_budget *b, FILE *f)
{
	char v[32];

	fmt_size(b->bytes, v, sizeof(v));
	fprintf(f,
		"budget = %s\t; SIGHUP reloads it, for the model's next "
		"load\n",
		v);
	if (b->slots)
		fprintf(f,
			"ring_slots = %u\t; SIGHUP reloads it, for the "
			"model's next load\n",
			b->slots);
}

/* [model.NAME] sections, for config_print(): the readable models with
 * their budgets, then the others with a budget. */
static void print_models(const struct djinnd_config *c, FILE *f)
{
	const struct server_config *s = &c->srv;
	int k;

	for (unsigned int i = 0; i < s->nr_readable; i++) {
		fprintf(f,
			"\n[model.%s]\nreadable = yes\t; SIGHUP reloads it\n",
			s->readable[i]);
		k = budget_index(s, s->readable[i]);
		if (k >= 0)
			print_budget(&s->budgets[k], f);
	}
	for (unsigned int i = 0; i < s->nr_budgets; i++) {
		unsigned int j;

		for (j = 0; j < s->nr_readable; j++)
			if (!strcmp(s->readable[j], s->budgets[i].model))
				break;
		if (j < s->nr_readable)
			continue;
		fprintf(f, "\n[model.%s]\n", s->budgets[i].model);
		print_budget(&s->budgets[i], f);
	}
}

void config_print(const struct djinnd_config *c, FILE *f)
{
	const char *section = NULL;
	char val[2048], from[300];

	fprintf(f, "; djinnd: effective configuration (%s)\n",
		c->path ? c->path : "no file");
	for (size_t i = 0; i < NR_KEYS; i++) {
		const struct key *k = &keys[i];

		if (!section || strcmp(section, k->section)) {
			section = k->section;
			fprintf(f, "%s[%s]\n", i ? "\n" : "", section);
		}
		origin_fmt(c, i, from, sizeof(from));
		if (k->type == T_LISTEN) {
			for (unsigned int j = 0; j < c->srv.nr_listen; j++) {
				if (c->listen_line[j])
					snprintf(from, sizeof(from), "%s:%u",
						 c->origin[i].file,
						 c->listen_line[j]);
				fprintf(f, "%s = %s\t; %s\n", k->name,
					c->srv.listen[j], from);
			}
			continue;
		}
		key_fmt(c, k, val, sizeof(val));
		fprintf(f, "%s =%s%s\t; %s%s\n", k->name, *val ? " " : "", val,
			from, k->reload ? ", SIGHUP reloads it" : "");
	}
	for (unsigned int i = 0; i < c->srv.nr_shares; i++) {
		const struct config_origin *o = &c->share_origin[i];

		if (o->line)
			snprintf(from, sizeof(from), "%s:%u", o->file, o->line);
		else
			snprintf(from, sizeof(from), "%s", o->file);
		fprintf(f,
			"\n[tenant.%s]\nshare = %u\t; %s, SIGHUP reloads it\n",
			c->srv.shares[i].tenant, c->srv.shares[i].share, from);
	}
	print_models(c, f);
	for (unsigned int i = 0; i < c->srv.nr_tmaps; i++) {
		const struct tenant_map *m = &c->srv.tmaps[i];

		fprintf(f, "\n[tenant.%s]\n", m->tenant);
		for (unsigned int g = 0; g < 2; g++) {
			unsigned int n = g ? m->nr_gids : m->nr_uids;

			if (!n)
				continue;
			fprintf(f, "%s = ", g ? "gids" : "uids");
			for (unsigned int k = 0; k < n; k++)
				fprintf(f, "%s%u", k ? "," : "",
					g ? (unsigned int)m->gids[k] :
					    (unsigned int)m->uids[k]);
			fprintf(f, "\t; SIGHUP reloads it\n");
		}
		if (m->client_kernels)
			fprintf(f,
				"client_kernels = yes\t; SIGHUP reloads it\n");
		for (size_t k = 0; k < ARRAY_SIZE(tenant_quota_keys); k++) {
			const struct tenant_quota_key *q =
				&tenant_quota_keys[k];
			uint64_t v = tquota_get(m, q);
			char qv[32];

			if (!v)
				continue;
			if (q->type == T_SIZE)
				fmt_size(v, qv, sizeof(qv));
			else if (q->type == T_DURATION)
				fmt_duration(v, qv, sizeof(qv));
			else
				snprintf(qv, sizeof(qv), "%llu",
					 (unsigned long long)v);
			fprintf(f, "%s = %s\t; SIGHUP reloads it\n", q->name,
				qv);
		}
	}
}

/* Whether two configurations map the same ids to the same tenants. */
static bool tmaps_equal(const struct server_config *a,
			const struct server_config *b)
{
	if (a->nr_tmaps != b->nr_tmaps)
		return false;
	for (unsigned int i = 0; i < a->nr_tmaps; i++) {
		const struct tenant_map *x = &a->tmaps[i], *y = &b->tmaps[i];

		if (strcmp(x->tenant, y->tenant) || x->nr_uids != y->nr_uids ||
		    x->nr_gids != y->nr_gids ||
		    x->client_kernels != y->client_kernels ||
		    memcmp(x->uids, y->uids, x->nr_uids * sizeof(x->uids[0])) ||
		    memcmp(x->gids, y->gids, x->nr_gids * sizeof(x->gids[0])))
			return false;
		for (size_t k = 0; k < ARRAY_SIZE(tenant_quota_keys); k++)
			if (tquota_get(x, &tenant_quota_keys[k]) !=
			    tquota_get(y, &tenant_quota_keys[k]))
				return false;
	}
	return true;
}

/* Whether two configurations give the tenants the same shares. */
static bool shares_equal(const struct server_config *a,
			 const struct server_config *b)
{
	if (a->nr_shares != b->nr_shares)
		return false;
	for (unsigned int i = 0; i < a->nr_shares; i++) {
		unsigned int j;

		for (j = 0; j < b->nr_shares; j++)
			if (!strcmp(a->shares[i].tenant, b->shares[j].tenant))
				break;
		if (j == b->nr_shares ||
		    a->shares[i].share != b->shares[j].share)
			return false;
	}
	return true;
}

/* Budget @i of @s (-1: none) as a reload's log line says it: "none",
 * "6M", or "6M, ring_slots 1". */
static void budget_fmt(const struct server_config *s, int i, char *buf,
		       size_t len)
{
	const struct model_budget *b;
	char v[32];

	if (i < 0 || !s->budgets[i].bytes) {
		snprintf(buf, len, "none");
		return;
	}
	b = &s->budgets[i];
	fmt_size(b->bytes, v, sizeof(v));
	if (b->slots)
		snprintf(buf, len, "%s, ring_slots %u", v, b->slots);
	else
		snprintf(buf, len, "%s", v);
}

/* Whether @model's budget differs between @now and @next: logged. */
static bool budget_differs(const struct server_config *now,
			   const struct server_config *next, const char *model)
{
	char a[64], b[64];

	budget_fmt(now, budget_index(now, model), a, sizeof(a));
	budget_fmt(next, budget_index(next, model), b, sizeof(b));
	if (!strcmp(a, b))
		return false;
	log_notice("reload: model.%s: budget %s -> %s, from its next load",
		   model, a, b);
	return true;
}

/* Whether any [model.NAME] budget differs between @now and @next; each
 * one that does is logged. */
static bool budgets_differ(const struct server_config *now,
			   const struct server_config *next)
{
	bool differ = false;

	for (unsigned int i = 0; i < now->nr_budgets; i++)
		differ |= budget_differs(now, next, now->budgets[i].model);
	for (unsigned int i = 0; i < next->nr_budgets; i++)
		if (budget_index(now, next->budgets[i].model) < 0)
			differ |= budget_differs(now, next,
						 next->budgets[i].model);
	return differ;
}

unsigned int config_diff(const struct djinnd_config *now,
			 const struct djinnd_config *next,
			 unsigned int *nr_restart)
{
	char a[2048], b[2048];
	unsigned int mask = 0;

	*nr_restart = 0;
	for (size_t i = 0; i < NR_KEYS; i++) {
		const struct key *k = &keys[i];

		key_fmt(now, k, a, sizeof(a));
		key_fmt(next, k, b, sizeof(b));
		if (!strcmp(a, b))
			continue;
		if (k->reload) {
			log_notice("reload: %s.%s: %s -> %s", k->section,
				   k->name, a, b);
			mask |= k->reload;
		} else {
			log_warn("reload: %s.%s: %s -> %s needs a restart; "
				 "still %s",
				 k->section, k->name, a, b, a);
			(*nr_restart)++;
		}
	}
	if (!shares_equal(&now->srv, &next->srv)) {
		log_notice("reload: tenant shares: %u tenant%s named",
			   next->srv.nr_shares,
			   next->srv.nr_shares == 1 ? "" : "s");
		mask |= CONFIG_RELOAD_SCHED;
	}
	if (now->srv.nr_readable != next->srv.nr_readable ||
	    memcmp(now->srv.readable, next->srv.readable,
		   next->srv.nr_readable * sizeof(next->srv.readable[0]))) {
		log_notice("reload: %u served model%s with readable weights",
			   next->srv.nr_readable,
			   next->srv.nr_readable == 1 ? "" : "s");
		mask |= CONFIG_RELOAD_MODELS;
	}
	if (budgets_differ(&now->srv, &next->srv))
		mask |= CONFIG_RELOAD_MODELS;
	if (!tmaps_equal(&now->srv, &next->srv)) {
		log_notice("reload: tenants' uids and gids: %u tenant%s "
			   "list them; connections from now on",
			   next->srv.nr_tmaps,
			   next->srv.nr_tmaps == 1 ? "" : "s");
		mask |= CONFIG_RELOAD_TENANTS;
	}
	return mask;
}

void config_apply(struct djinnd_config *now, const struct djinnd_config *next,
		  unsigned int mask)
{
	if (mask & CONFIG_RELOAD_MODELS) {
		memcpy(now->srv.readable, next->srv.readable,
		       sizeof(now->srv.readable));
		now->srv.nr_readable = next->srv.nr_readable;
		memcpy(now->srv.budgets, next->srv.budgets,
		       next->srv.nr_budgets * sizeof(next->srv.budgets[0]));
		now->srv.nr_budgets = next->srv.nr_budgets;
		/* where they were set: only parsing needs it, and @next's
		 * strings go */
		for (unsigned int i = 0; i < now->srv.nr_budgets; i++) {
			now->srv.budgets[i].bytes_file = NULL;
			now->srv.budgets[i].slots_file = NULL;
		}
	}
	if (mask & CONFIG_RELOAD_TENANTS) {
		memcpy(now->srv.tmaps, next->srv.tmaps,
		       next->srv.nr_tmaps * sizeof(next->srv.tmaps[0]));
		now->srv.nr_tmaps = next->srv.nr_tmaps;
		/* where they were set: only parsing needs it, and @next's
		 * strings go */
		for (unsigned int i = 0; i < now->srv.nr_tmaps; i++) {
			now->srv.tmaps[i].uids_file = NULL;
			now->srv.tmaps[i].gids_file = NULL;
		}
	}
	if (mask & CONFIG_RELOAD_SCHED) {
		memcpy(now->srv.shares, next->srv.shares,
		       sizeof(now->srv.shares));
		now->srv.nr_shares = next->srv.nr_shares;
		for (unsigned int i = 0; i < next->srv.nr_shares; i++) {
			const char *file = next->share_origin[i].file;

			if (file && file != cmdline)
				file = now->path && !strcmp(now->path, file) ?
					       now->path :
					       keep(now, file);
			now->share_origin[i].file = file;
			now->share_origin[i].line = next->share_origin[i].line;
		}
	}
	for (size_t i = 0; i < NR_KEYS; i++) {
		const struct key *k = &keys[i];
		const struct config_origin *o = &next->origin[i];
		const char *file = o->file;
		size_t size = k->type == T_DURATION ? sizeof(uint64_t) :
						      sizeof(int);

		if (!(k->reload & mask))
			continue;
		_Static_assert(sizeof(unsigned int) == sizeof(int), "");
		memcpy((char *)now + k->off, (const char *)next + k->off, size);
		/* @next goes away: point at a string of @now's. */
		if (file && file != cmdline)
			file = now->path && !strcmp(now->path, file) ?
				       now->path :
				       keep(now, file);
		now->origin[i].file = file;
		now->origin[i].line = o->line;
	}
}
