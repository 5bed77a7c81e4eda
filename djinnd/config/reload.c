// SPDX-License-Identifier: MIT
/*
 * SIGHUP: what differs between the running configuration and the one
 * just read, logged a line each, and taking what may change at run time.
 * See internal.h.
 */
#include <string.h>

#include "internal.h"
#include "log.h"

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
		    x->nr_delegates != y->nr_delegates ||
		    x->client_kernels != y->client_kernels ||
		    memcmp(x->uids, y->uids, x->nr_uids * sizeof(x->uids[0])) ||
		    memcmp(x->gids, y->gids, x->nr_gids * sizeof(x->gids[0])) ||
		    memcmp(x->delegates, y->delegates,
			   x->nr_delegates * sizeof(x->delegates[0])))
			return false;
		for (size_t k = 0; k < NR_TQUOTA_KEYS; k++)
			if (cfg_tquota_get(x, &cfg_tenant_quota_keys[k]) !=
			    cfg_tquota_get(y, &cfg_tenant_quota_keys[k]))
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
	cfg_fmt_size(b->bytes, v, sizeof(v));
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

	budget_fmt(now, cfg_budget_index(now, model), a, sizeof(a));
	budget_fmt(next, cfg_budget_index(next, model), b, sizeof(b));
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
		if (cfg_budget_index(now, next->budgets[i].model) < 0)
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
		const struct key *k = &cfg_keys[i];

		cfg_key_fmt(now, k, a, sizeof(a));
		cfg_key_fmt(next, k, b, sizeof(b));
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
	if (now->srv.nr_batches != next->srv.nr_batches ||
	    memcmp(now->srv.batches, next->srv.batches,
		   next->srv.nr_batches * sizeof(next->srv.batches[0]))) {
		log_notice("reload: %u model%s with a max_batch",
			   next->srv.nr_batches,
			   next->srv.nr_batches == 1 ? "" : "s");
		mask |= CONFIG_RELOAD_SCHED;
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
			now->srv.tmaps[i].delegates_file = NULL;
		}
	}
	if (mask & CONFIG_RELOAD_SCHED) {
		memcpy(now->srv.batches, next->srv.batches,
		       sizeof(now->srv.batches));
		now->srv.nr_batches = next->srv.nr_batches;
		memcpy(now->srv.shares, next->srv.shares,
		       sizeof(now->srv.shares));
		now->srv.nr_shares = next->srv.nr_shares;
		for (unsigned int i = 0; i < next->srv.nr_shares; i++) {
			const char *file = next->share_origin[i].file;

			if (file && file != cfg_cmdline)
				file = now->path && !strcmp(now->path, file) ?
					       now->path :
					       cfg_keep(now, file);
			now->share_origin[i].file = file;
			now->share_origin[i].line = next->share_origin[i].line;
		}
	}
	for (size_t i = 0; i < NR_KEYS; i++) {
		const struct key *k = &cfg_keys[i];
		const struct config_origin *o = &next->origin[i];
		const char *file = o->file;
		size_t size = k->type == T_DURATION ? sizeof(uint64_t) :
						      sizeof(int);

		if (!(k->reload & mask))
			continue;
		_Static_assert(sizeof(unsigned int) == sizeof(int), "");
		memcpy((char *)now + k->off, (const char *)next + k->off, size);
		/* @next goes away: point at a string of @now's. */
		if (file && file != cfg_cmdline)
			file = now->path && !strcmp(now->path, file) ?
				       now->path :
				       cfg_keep(now, file);
		now->origin[i].file = file;
		now->origin[i].line = o->line;
	}
}
