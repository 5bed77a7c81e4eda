// SPDX-License-Identifier: MIT
/*
 * Values as the file spells them, and the effective settings with where
 * each came from (djinnd --check-config). See internal.h.
 */
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "internal.h"
#include "log.h"

void cfg_fmt_duration(uint64_t ns, char *buf, size_t len)
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

void cfg_fmt_size(uint64_t b, char *buf, size_t len)
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
void cfg_key_fmt(const struct djinnd_config *c, const struct key *k, char *buf,
		 size_t len)
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
		cfg_fmt_size(*(const uint64_t *)p, buf, len);
		break;
	case T_DURATION:
		cfg_fmt_duration(*(const uint64_t *)p, buf, len);
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

	cfg_fmt_size(b->bytes, v, sizeof(v));
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
		k = cfg_budget_index(s, s->readable[i]);
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
	/* max_batch in sections of their own: a section may be named
	 * twice */
	for (unsigned int i = 0; i < s->nr_batches; i++)
		fprintf(f,
			"\n[model.%s]\nmax_batch = %u\t; SIGHUP reloads it\n",
			s->batches[i].model, s->batches[i].max);
}

void config_print(const struct djinnd_config *c, FILE *f)
{
	const char *section = NULL;
	char val[2048], from[300];

	fprintf(f, "; djinnd: effective configuration (%s)\n",
		c->path ? c->path : "no file");
	for (size_t i = 0; i < NR_KEYS; i++) {
		const struct key *k = &cfg_keys[i];

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
		cfg_key_fmt(c, k, val, sizeof(val));
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
		for (unsigned int g = 0; g < 3; g++) {
			static const char *const what[] = { "uids", "gids",
							    "delegates" };
			const uint32_t *ids = g == 0 ? (uint32_t *)m->uids :
					      g == 1 ? (uint32_t *)m->gids :
						       (uint32_t *)m->delegates;
			unsigned int n = g == 0 ? m->nr_uids :
					 g == 1 ? m->nr_gids :
						  m->nr_delegates;

			if (!n)
				continue;
			fprintf(f, "%s = ", what[g]);
			for (unsigned int k = 0; k < n; k++)
				fprintf(f, "%s%u", k ? "," : "",
					(unsigned int)ids[k]);
			fprintf(f, "\t; SIGHUP reloads it\n");
		}
		if (m->client_kernels)
			fprintf(f,
				"client_kernels = yes\t; SIGHUP reloads it\n");
		for (size_t k = 0; k < NR_TQUOTA_KEYS; k++) {
			const struct tenant_quota_key *q =
				&cfg_tenant_quota_keys[k];
			uint64_t v = cfg_tquota_get(m, q);
			char qv[32];

			if (!v)
				continue;
			if (q->type == T_SIZE)
				cfg_fmt_size(v, qv, sizeof(qv));
			else if (q->type == T_DURATION)
				cfg_fmt_duration(v, qv, sizeof(qv));
			else
				snprintf(qv, sizeof(qv), "%llu",
					 (unsigned long long)v);
			fprintf(f, "%s = %s\t; SIGHUP reloads it\n", q->name,
				qv);
		}
	}
}
