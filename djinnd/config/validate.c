// SPDX-License-Identifier: MIT
/*
 * Checks across keys: each error names the line of the later key, or
 * where the list it is about was set. See internal.h.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "clock.h"
#include "internal.h"

static int fail_at(struct djinnd_config *c, const struct key *k)
{
	const struct config_origin *o = &c->origin[k - cfg_keys];

	c->cur_file = o->file ? o->file : "default";
	c->cur_line = o->line;
	return 0;
}

/* The later of two keys, to blame. */
static const struct key *later(const struct djinnd_config *c,
			       const struct key *a, const struct key *b)
{
	const struct config_origin *oa = &c->origin[a - cfg_keys];
	const struct config_origin *ob = &c->origin[b - cfg_keys];

	if (oa->file == cfg_cmdline || (oa->file && !ob->file))
		return a;
	if (ob->file == cfg_cmdline || (ob->file && !oa->file))
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
		c->cur_file = cfg_cmdline;
	return true;
}

int config_validate(struct djinnd_config *c)
{
	struct server_config *s = &c->srv;
	const struct key *k;

	c->err[0] = 0;
	if (s->warn_pct >= s->crit_pct) {
		k = later(c, cfg_key_find("memory", "pressure_warning"),
			  cfg_key_find("memory", "pressure_critical"));
		fail_at(c, k);
		return cfg_fail(c,
				"%s.%s: pressure_warning (%u%%) must be below "
				"pressure_critical (%u%%)",
				k->section, k->name, s->warn_pct, s->crit_pct);
	}
	if (s->lease_min_ns > s->lease_default_ns ||
	    s->lease_default_ns > s->lease_max_ns) {
		k = later(c,
			  later(c, cfg_key_find("lease", "min"),
				cfg_key_find("lease", "default")),
			  cfg_key_find("lease", "max"));
		fail_at(c, k);
		return cfg_fail(
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
		k = cfg_key_find("server", "listen");
		fail_at(c, k);
		return cfg_fail(
			c,
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
		k = cfg_key_find("server", "listen");
		fail_at(c, k);
		return cfg_fail(c, "server.listen: %s needs %s", s->listen[i],
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
						return cfg_fail(
							c,
							"tenant.%s.uids: "
							"uid %u is tenant "
							"%s's already",
							b->tenant, b->uids[x],
							a->tenant);
			for (unsigned int x = 0; x < b->nr_gids; x++)
				for (unsigned int y = 0; y < a->nr_gids; y++)
					if (b->gids[x] == a->gids[y] &&
					    tmap_at(c, b, true))
						return cfg_fail(
							c,
							"tenant.%s.gids: "
							"gid %u is tenant "
							"%s's already",
							b->tenant, b->gids[x],
							a->tenant);
		}
	if (s->compute_threads > 1 && s->backend &&
	    !strcmp(s->backend, "cpu")) {
		k = cfg_key_find("device", "compute_threads");
		fail_at(c, k);
		return cfg_fail(
			c,
			"device.compute_threads: '%u': the cpu backend "
			"runs one graph at a time (device.threads is its "
			"parallelism)",
			s->compute_threads);
	}
	if (s->token_auth) {
		unsigned int i = 0;

		while (i < s->nr_listen && strcmp(s->listen[i], s->token_auth))
			i++;
		if (i == s->nr_listen) {
			k = cfg_key_find("server", "token_auth");
			fail_at(c,
				later(c, k, cfg_key_find("server", "listen")));
			return cfg_fail(c,
					"server.token_auth: %s is not a listen "
					"address",
					s->token_auth);
		}
	}
	for (unsigned int i = 0; i < s->nr_listen; i++) {
		if (strncmp(s->listen[i], "unix:", 5) ||
		    strcmp(s->listen[i] + 5, s->admin_socket))
			continue;
		k = cfg_key_find("server", "admin_socket");
		fail_at(c, later(c, k, cfg_key_find("server", "listen")));
		return cfg_fail(c,
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
		c->cur_file = b->slots_file ? b->slots_file : cfg_cmdline;
		c->cur_line = b->slots_line;
		return cfg_fail(
			c,
			"model.%s.ring_slots: %u without a budget: set "
			"model.%s.budget too (the ring streams the layers "
			"past it)",
			b->model, b->slots, b->model);
	}
	c->cur_file = cfg_cmdline;
	c->cur_line = 0;
	return 0;
}
