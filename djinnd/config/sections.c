// SPDX-License-Identifier: MIT
/*
 * The sections with a name: [tenant.NAME] (share, who the tenant is,
 * client kernels, quotas) and [model.NAME] (readable weights, budget,
 * ring slots). See internal.h.
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "array_size.h"
#include "clock.h"
#include "internal.h"
#include "names.h"

const struct tenant_quota_key cfg_tenant_quota_keys[] = {
	{ "memory", T_SIZE, offsetof(struct tenant_map, memory) },
	{ "swap", T_SIZE, offsetof(struct tenant_map, swap) },
	{ "guaranteed", T_SIZE, offsetof(struct tenant_map, guaranteed) },
	{ "lease_max", T_DURATION, offsetof(struct tenant_map, lease_max_ns) },
	{ "sessions", T_UINT, offsetof(struct tenant_map, sessions) },
	{ "connections", T_UINT, offsetof(struct tenant_map, conns) },
	{ "inflight", T_UINT, offsetof(struct tenant_map, inflight) },
};
const size_t cfg_nr_tenant_quota_keys = ARRAY_SIZE(cfg_tenant_quota_keys);

/* One id of a uids or gids list: a number, or a user's or group's name
 * (looked up now). */
static int parse_id(const char *s, bool group, uint32_t *out)
{
	char buf[4096];
	uint64_t v;

	if (!cfg_parse_uint(s, &v))
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
int cfg_budget_index(const struct server_config *s, const char *model)
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
	    (cfg_parse_uint(value, &v) || v < 1 || v > SERVER_RING_SLOTS_MAX))
		return cfg_fail(
			c,
			"model.%s.ring_slots: '%s': want a number from 1 "
			"to %d (the layers its ring holds, 2 unless set)",
			model, value, SERVER_RING_SLOTS_MAX);
	if (!ring &&
	    (parse_size(value, &v) || (v && v < 1ull << 20) || v > 1ull << 50))
		return cfg_fail(
			c,
			"model.%s.budget: '%s': want 0 (none) or a size "
			"from 1M to 1024T, such as 6G",
			model, value);
	i = cfg_budget_index(s, model);
	if (i < 0) {
		if (!v)
			return 0;
		if (s->nr_budgets == SERVER_TENANT_MAPS_MAX)
			return cfg_fail(c,
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
		return cfg_fail(c, "model.%s.%s: already set on line %u", model,
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

/* [model.NAME] max_batch = 1 .. EXEC_PASS_MAX: the most contexts of the
 * model in one pass (sched.h), below [device] max_batch. */
static int model_batch_set(struct djinnd_config *c, const char *model,
			   const char *value)
{
	struct server_config *s = &c->srv;
	unsigned int i;
	uint64_t v;

	if (cfg_parse_uint(value, &v) || v < 1 || v > EXEC_PASS_MAX)
		return cfg_fail(c,
				"model.%s.max_batch: '%s': want a number from "
				"1 to %d (its contexts in one pass)",
				model, value, EXEC_PASS_MAX);
	for (i = 0; i < s->nr_batches; i++)
		if (!strcmp(s->batches[i].model, model))
			break;
	if (i == s->nr_batches) {
		if (i == SCHED_BATCHES_MAX)
			return cfg_fail(c,
					"model.%s.max_batch: at most %d models",
					model, SCHED_BATCHES_MAX);
		memset(&s->batches[i], 0, sizeof(s->batches[i]));
		snprintf(s->batches[i].model, sizeof(s->batches[i].model), "%s",
			 model);
		s->nr_batches++;
	}
	s->batches[i].max = (unsigned int)v;
	return 0;
}

/*
 * A [model.NAME] section's keys: readable = yes|no, whether the weights
 * of served model NAME are open to every client (Documentation/
 * security.rst, "Text"); budget and ring_slots, the device bytes it may
 * take and its ring's layers when over them (model_budget_set()).
 */
int cfg_model_set(struct djinnd_config *c, const char *model, const char *name,
		  const char *value)
{
	struct server_config *s = &c->srv;
	unsigned int i;
	bool on;

	if (!model_name_ok(model))
		return cfg_fail(c,
				"[model.%s]: a model name is 1 to 63 of "
				"[A-Za-z0-9._-], not starting with '.'",
				model);
	if (!strcmp(name, "budget") || !strcmp(name, "ring_slots"))
		return model_budget_set(c, model, name, value);
	if (!strcmp(name, "max_batch"))
		return model_batch_set(c, model, value);
	if (strcmp(name, "readable"))
		return cfg_fail(
			c,
			"unknown key '%s' in [model.%s] (want readable, "
			"budget, ring_slots or max_batch)",
			name, model);
	on = !strcmp(value, "yes");
	if (!on && strcmp(value, "no"))
		return cfg_fail(c, "model.%s.readable: '%s': want yes or no",
				model, value);
	for (i = 0; i < s->nr_readable; i++)
		if (!strcmp(s->readable[i], model))
			break;
	if (on && i == s->nr_readable) {
		if (i == SERVER_TENANT_MAPS_MAX)
			return cfg_fail(c,
					"model.%s.readable: at most %d models",
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

/* Quota @q of @m, widened. */
uint64_t cfg_tquota_get(const struct tenant_map *m,
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
		cfg_fail(c,
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

/* tenant.NAME.uids, .gids or .delegates = LIST: numbers or names, by
 * commas (@what: the key; gids are groups, the others users). */
static int tenant_ids_set(struct djinnd_config *c, const char *tenant,
			  const char *what, const char *value)
{
	bool group = !strcmp(what, "gids");
	struct tenant_map *m = NULL;
	unsigned int nr = 0, *nr_to, *line;
	uint32_t ids[TENANT_IDS_MAX];
	char list[1024], *rest = list, *tok;
	const char **file;
	void *to;

	if (strlen(value) >= sizeof(list))
		return cfg_fail(c, "tenant.%s.%s: a list of at most %zu bytes",
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
			return cfg_fail(c, "tenant.%s.%s: at most %d ids",
					tenant, what, TENANT_IDS_MAX);
		if (!*tok || parse_id(tok, group, &ids[nr]))
			return cfg_fail(
				c,
				"tenant.%s.%s: '%s': want %s numbers or "
				"names, by commas",
				tenant, what, *tok ? tok : value,
				group ? "group" : "user");
		nr++;
	}
	if (!nr)
		return cfg_fail(c, "tenant.%s.%s: an empty list", tenant, what);
	m = tmap_get(c, tenant, what);
	if (!m)
		return -EINVAL;
	if (group) {
		to = m->gids, nr_to = &m->nr_gids;
		file = &m->gids_file, line = &m->gids_line;
	} else if (!strcmp(what, "uids")) {
		to = m->uids, nr_to = &m->nr_uids;
		file = &m->uids_file, line = &m->uids_line;
	} else {
		to = m->delegates, nr_to = &m->nr_delegates;
		file = &m->delegates_file, line = &m->delegates_line;
	}
	if (*file == c->cur_file && *line && c->cur_line)
		return cfg_fail(c, "tenant.%s.%s: already set on line %u",
				tenant, what, *line);
	memcpy(to, ids, nr * sizeof(ids[0]));
	*nr_to = nr;
	*file = c->cur_file;
	*line = c->cur_line;
	return 0;
}

/* A [tenant.NAME] section's keys: share = 1 .. SCHED_SHARE_MAX, the
 * tenant's weight in the scheduler's fair queueing; uids and gids, who
 * the tenant is (struct tenant_map). */
int cfg_tenant_set(struct djinnd_config *c, const char *tenant,
		   const char *name, const char *value)
{
	struct server_config *s = &c->srv;
	size_t n = strlen(tenant);
	unsigned int i;
	uint64_t v;

	if (!n || n >= DJINN_TENANT_LEN)
		return cfg_fail(c,
				"[tenant.%s]: a tenant name has 1 to %d bytes",
				tenant, DJINN_TENANT_LEN - 1);
	if (!tenant_name_ok(tenant))
		return cfg_fail(c,
				"[tenant.%s]: a tenant name is printable bytes "
				"without spaces",
				tenant);
	if (!strcmp(name, "uids") || !strcmp(name, "gids") ||
	    !strcmp(name, "delegates"))
		return tenant_ids_set(c, tenant, name, value);
	for (i = 0; i < NR_TQUOTA_KEYS; i++) {
		const struct tenant_quota_key *q = &cfg_tenant_quota_keys[i];
		struct tenant_map *m;
		char *p;
		int ret;

		if (strcmp(name, q->name))
			continue;
		ret = q->type == T_SIZE	    ? parse_size(value, &v) :
		      q->type == T_DURATION ? config_parse_duration(value, &v) :
					      cfg_parse_uint(value, &v);
		if (ret || !v ||
		    v > (q->type == T_SIZE     ? 1ull << 50 :
			 q->type == T_DURATION ? 24 * 3600 * NSEC_PER_SEC :
						 1u << 20))
			return cfg_fail(
				c, "tenant.%s.%s: '%s': want %s", tenant, name,
				value,
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
			return cfg_fail(
				c,
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
		return cfg_fail(
			c,
			"unknown key '%s' in [tenant.%s] (want share, "
			"uids, gids, client_kernels, memory, swap, "
			"guaranteed, sessions, connections, inflight or "
			"lease_max)",
			name, tenant);
	if (cfg_parse_uint(value, &v) || v < 1 || v > SCHED_SHARE_MAX)
		return cfg_fail(
			c, "tenant.%s.share: '%s': want a number from 1 to %d",
			tenant, value, SCHED_SHARE_MAX);
	for (i = 0; i < s->nr_shares; i++)
		if (!strcmp(s->shares[i].tenant, tenant))
			break;
	if (i == s->nr_shares) {
		if (i == SCHED_TENANTS_MAX)
			return cfg_fail(c,
					"tenant.%s.share: at most %d tenants",
					tenant, SCHED_TENANTS_MAX);
		s->nr_shares++;
	} else if (c->share_origin[i].file == c->cur_file &&
		   c->share_origin[i].line && c->cur_line) {
		return cfg_fail(c, "tenant.%s.share: already set on line %u",
				tenant, c->share_origin[i].line);
	}
	snprintf(s->shares[i].tenant, sizeof(s->shares[i].tenant), "%s",
		 tenant);
	s->shares[i].share = (unsigned int)v;
	c->share_origin[i].file = c->cur_file;
	c->share_origin[i].line = c->cur_line;
	return 0;
}
