// SPDX-License-Identifier: MIT
/*
 * The table of keys, and setting one from a string: each type's checks
 * and the message a bad value gets. The strings a configuration keeps,
 * and its first error. See internal.h.
 */
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "array_size.h"
#include "clock.h"
#include "internal.h"
#include "log.h"
#include "names.h"

#define SRV(f) offsetof(struct djinnd_config, srv.f)
#define TOP(f) offsetof(struct djinnd_config, f)

/* A key of the file; @...: .min, .max, .reload */
#define KEY(sec, nm, ty, offset, ...)                                  \
	{                                                              \
		.section = sec, .name = nm, .type = ty, .off = offset, \
		__VA_ARGS__                                            \
	}

const struct key cfg_keys[] = {
	KEY("server", "listen", T_LISTEN, SRV(listen)),
	KEY("server", "admin_socket", T_SOCKET, SRV(admin_socket)),
	KEY("server", "admin_group", T_GROUP, SRV(admin_group)),
	KEY("server", "token_auth", T_UNIX, SRV(token_auth)),
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
	KEY("server", "addr_prefix_v4", T_UINT, SRV(addr_prefix_v4), .min = 8,
	    .max = 32),
	KEY("server", "addr_prefix_v6", T_UINT, SRV(addr_prefix_v6), .min = 16,
	    .max = 128),
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
	KEY("device", "max_batch", T_UINT, SRV(sched.max_batch), .min = 1,
	    .max = EXEC_PASS_MAX, .reload = CONFIG_RELOAD_SCHED),
	KEY("device", "pass_tokens", T_UINT, SRV(sched.pass_tokens), .min = 1,
	    .max = 1u << 20, .reload = CONFIG_RELOAD_SCHED),
	KEY("memory", "budget", T_SIZE, SRV(cpu_mem), .min = 1ull << 20,
	    .max = 1ull << 50),
	KEY("memory", "gpu_budget", T_SIZE, SRV(gpu_mem), .min = 0,
	    .max = 1ull << 50),
	KEY("memory", "swap", T_SIZE, SRV(swap), .min = 0, .max = 1ull << 50),
	KEY("memory", "upload_max", T_SIZE, SRV(upload_max), .min = 0,
	    .max = 1ull << 50),
	/* at least the two buffers a read in parts takes (exec/stage.h) */
	KEY("memory", "read_staging", T_SIZE, SRV(read_staging),
	    .min = 8ull << 20, .max = 1ull << 40),
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
	KEY("tls", "max_records", T_UINT, SRV(tls_max_records), .min = 1,
	    .max = 1u << 24),
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

const size_t cfg_nr_keys = ARRAY_SIZE(cfg_keys);
_Static_assert(ARRAY_SIZE(cfg_keys) <= CONFIG_MAX_KEYS,
	       "CONFIG_MAX_KEYS too small");

const char cfg_cmdline[] = "command line";

/* ---------------------------------------------------------------------- */
/* Strings and errors */

const char *cfg_keep(struct djinnd_config *c, const char *s)
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
		snprintf(buf, len, "%s",
			 c->cur_file ? c->cur_file : cfg_cmdline);
}

/* The first error wins: "FILE:LINE: message". */
int cfg_fail(struct djinnd_config *c, const char *fmt, ...)
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

const struct key *cfg_key_find(const char *section, const char *name)
{
	for (size_t i = 0; i < NR_KEYS; i++)
		if (!strcmp(cfg_keys[i].section, section) &&
		    !strcmp(cfg_keys[i].name, name))
			return &cfg_keys[i];
	return NULL;
}

bool cfg_section_known(const char *section)
{
	for (size_t i = 0; i < NR_KEYS; i++)
		if (!strcmp(cfg_keys[i].section, section))
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

int cfg_parse_uint(const char *s, uint64_t *out)
{
	char *end;

	return parse_lead(s, out, &end) || *end ? -EINVAL : 0;
}

static int check_unix_path(struct djinnd_config *c, const struct key *k,
			   const char *path)
{
	if (!*path)
		return cfg_fail(c, "%s.%s: empty socket path", k->section,
				k->name);
	if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return cfg_fail(c,
				"%s.%s: socket path longer than %zu bytes: %s",
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

	if (!port || cfg_parse_uint(port + 1, &p) || p < 1 || p > 65535)
		return cfg_fail(
			c, "%s.%s: '%s': want %.3s:HOST:PORT, PORT 1-65535",
			k->section, k->name, v, v);
	if (*spec == '[' && (port == spec || port[-1] != ']'))
		return cfg_fail(c, "%s.%s: '%s': unclosed '[' in the host",
				k->section, k->name, v);
	if (*spec != '[' && memchr(spec, ':', (size_t)(port - spec)))
		return cfg_fail(c, "%s.%s: '%s': write an IPv6 host as [ADDR]",
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
	return cfg_fail(c,
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
		return cfg_fail(c, "%s.%s: '%s' is not a group name",
				k->section, k->name, v);
	if (!getgrnam(v))
		return cfg_fail(c, "%s.%s: no group '%s' on this system",
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
			return cfg_fail(c,
					"server.listen: at most %d addresses",
					SERVER_MAX_LISTEN);
		for (unsigned int i = 0; i < c->srv.nr_listen; i++)
			if (!strcmp(c->srv.listen[i], v))
				return cfg_fail(c, "server.listen: %s twice",
						v);
		if (!(v = cfg_keep(c, v)))
			return cfg_fail(c, "out of memory");
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
		ret = *v == '/' ?
			      0 :
			      cfg_fail(c, "%s.%s: '%s' is not an absolute path",
				       k->section, k->name, v);
		break;
	case T_BACKEND: /* auto: cuda if there is a GPU, else cpu */
		if (!strcmp(v, "cpu") || !strcmp(v, "auto"))
			ret = 0;
		else if (!strcmp(v, "cuda"))
			ret = cuda_backend_create ?
				      0 :
				      cfg_fail(
					      c,
					      "%s.%s: cuda is not built into this "
					      "djinnd (cpu is)",
					      k->section, k->name);
		else
			ret = cfg_fail(
				c, "%s.%s: '%s': want cpu or cuda (or auto)",
				k->section, k->name, v);
		break;
	case T_DEVICES:
		if (parse_devices(v, &n))
			return cfg_fail(c,
					"%s.%s: '%s': want all, or device "
					"numbers 0-63 separated by commas",
					k->section, k->name, v);
		*(uint64_t *)p = n;
		return 0;
	case T_UINT:
	case T_PCT:
		if (cfg_parse_uint(v, &n) || n < k->min || n > k->max)
			return cfg_fail(
				c,
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
		(size ? cfg_fmt_size : cfg_fmt_duration)(k->min, lo,
							 sizeof(lo));
		(size ? cfg_fmt_size : cfg_fmt_duration)(k->max, hi,
							 sizeof(hi));
		return cfg_fail(c, "%s.%s: '%s': want a %s from %s to %s%s",
				k->section, k->name, v, size ? "size" : "time",
				lo, hi,
				size ? ", such as 512M or 16G" :
				       " with its unit: ms, s, m or h");
	}
	case T_POLICY:
	case T_LEVEL: {
		bool policy = k->type == T_POLICY;

		ret = policy ? sched_policy_parse(v) : log_parse_level(v);
		if (ret < 0)
			return cfg_fail(c, "%s.%s: '%s': want %s", k->section,
					k->name, v,
					policy ?
						"semantic, lru or static" :
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
			return cfg_fail(c,
					"%s.%s: '%s': want auto, kmod or user",
					k->section, k->name, v);
		ret = 0;
		break;
	case T_PLAIN_TCP:
		if (strcmp(v, "loopback") && strcmp(v, "any"))
			return cfg_fail(c, "%s.%s: '%s': want loopback or any",
					k->section, k->name, v);
		ret = 0;
		break;
	case T_TLS_ID:
		if (strcmp(v, "cn") && strcmp(v, "san-dns") &&
		    strcmp(v, "san-email") && strcmp(v, "san-uri"))
			return cfg_fail(
				c,
				"%s.%s: '%s': want cn, san-dns, san-email "
				"or san-uri",
				k->section, k->name, v);
		ret = 0;
		break;
	case T_KTLS:
		if (strcmp(v, "auto") && strcmp(v, "off"))
			return cfg_fail(c, "%s.%s: '%s': want auto or off",
					k->section, k->name, v);
		ret = 0;
		break;
	case T_UNIX:
		if (!*v) {
			ret = 0;
			break;
		}
		if (strncmp(v, "unix:", 5) || v[5] != '/')
			return cfg_fail(c,
					"%s.%s: '%s': want unix:PATH, an "
					"absolute path",
					k->section, k->name, v);
		ret = check_unix_path(c, k, v + 5);
		break;
	case T_TCP:
		if (!*v) {
			ret = 0;
			break;
		}
		if (strncmp(v, "tcp:", 4))
			return cfg_fail(c, "%s.%s: '%s': want tcp:HOST:PORT",
					k->section, k->name, v);
		ret = check_tcp(c, k, v);
		break;
	default:
		return cfg_fail(c, "%s.%s: bad key type", k->section, k->name);
	}
	if (ret)
		return ret;
	/* The string types: empty means unset. */
	if (!*v) {
		*(const char **)p = NULL;
		return 0;
	}
	if (!(v = cfg_keep(c, v)))
		return cfg_fail(c, "out of memory");
	*(const char **)p = v;
	return 0;
}

/*
 * A flag's relative path @v taken against c->flag_dir (the directory
 * djinnd started in), into @buf: "models" is DIR/models, "unix:run/d.sock"
 * unix:DIR/run/d.sock. @v itself when it is not a path, is empty or
 * absolute, names an abstract socket, or there is no c->flag_dir; and for
 * a socket whose absolute path would not fit in sun_path (djinnd never
 * changes its directory, so the relative path names the same file).
 */
static const char *flag_path(const struct djinnd_config *c, const struct key *k,
			     const char *v, char *buf, size_t len)
{
	const char *pfx = "", *rel = v, *dir = c->flag_dir;
	size_t dlen = dir ? strlen(dir) : 0;
	int n;

	if (!dir || !*dir)
		return v;
	if (k->type == T_LISTEN) {
		if (strncmp(v, "unix:", 5))
			return v;
		pfx = "unix:";
		rel = v + 5;
	} else if (k->type != T_SOCKET && k->type != T_DIR &&
		   k->type != T_FILE) {
		return v;
	}
	if (!*rel || *rel == '/' || *rel == '@')
		return v;
	/* "./x", ".//x", "././x": x */
	while (rel[0] == '.' && rel[1] == '/') {
		rel++;
		while (*rel == '/')
			rel++;
	}
	if (!strcmp(rel, "."))
		rel = "";
	n = snprintf(buf, len, "%s%s%s%s", pfx, dir,
		     *rel && dir[dlen - 1] != '/' ? "/" : "", rel);
	if (n < 0 || (size_t)n >= len)
		return v;
	if ((k->type == T_LISTEN || k->type == T_SOCKET) &&
	    strlen(buf + strlen(pfx)) >=
		    sizeof(((struct sockaddr_un *)0)->sun_path))
		return v;
	return buf;
}

int cfg_set_from(struct djinnd_config *c, const struct key *k,
		 const char *value, int from)
{
	struct config_origin *o = &c->origin[k - cfg_keys];
	char path[8192];
	int ret;

	if (from == FROM_FILE && k->type != T_LISTEN && o->line &&
	    o->file == c->cur_file)
		return cfg_fail(c, "%s.%s: already set on line %u", k->section,
				k->name, o->line);
	if (from == FROM_FLAG)
		value = flag_path(c, k, value, path, sizeof(path));
	ret = key_set(c, k, value, from);
	if (ret)
		return ret;
	o->file = c->cur_file;
	o->line = c->cur_line;
	return 0;
}
