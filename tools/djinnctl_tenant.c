// SPDX-License-Identifier: MIT
/*
 * djinnctl tenant list|show: each tenant's use of its quotas.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <djinn/proto.h>

#include "djinnctl.h"
#include "json_print.h"

/* "n" or "n/quota" in a table cell (@size: bytes, as print_size does). */
static const char *used_of(char *buf, size_t len, uint64_t used, uint64_t quota,
			   bool size)
{
	char u[32], q[32];

	if (size) {
		human_size(u, used);
		human_size(q, quota);
	} else {
		snprintf(u, sizeof(u), "%" PRIu64, used);
		snprintf(q, sizeof(q), "%" PRIu64, quota);
	}
	snprintf(buf, len, quota ? "%s/%s" : "%s", u, q);
	return buf;
}

/* A quota in JSON: its value, or null when there is none. */
static void print_quota(const char *key, uint64_t q)
{
	if (q)
		print_u64(PRINT_JSON, key, NULL, q);
	else
		print_null(PRINT_JSON, key, NULL, NULL);
}

static void print_tenant(const struct djinn_admin_tenant *e, int wname,
			 bool table)
{
	char name[DJINN_TENANT_LEN], cell[80], fmt[48];
	const char *kernels = e->flags & DJINN_TENANT_CLIENT_KERNELS ? "yes" :
								       "no";

	wire_str(name, sizeof(name), e->name, sizeof(e->name));
	open_json_object(NULL);
	if (table) {
		snprintf(fmt, sizeof(fmt), "%%-%ds", wname);
		print_string(PRINT_ANY, "name", fmt, name);
		print_string(PRINT_FP, NULL, " %11s",
			     used_of(cell, sizeof(cell), e->conns, e->q_conns,
				     false));
		print_string(PRINT_FP, NULL, " %11s",
			     used_of(cell, sizeof(cell), e->sessions,
				     e->q_sessions, false));
		print_string(PRINT_FP, NULL, " %11s",
			     used_of(cell, sizeof(cell), e->inflight,
				     e->q_inflight, false));
		print_string(PRINT_FP, NULL, " %15s",
			     used_of(cell, sizeof(cell),
				     e->data_bytes + e->text_bytes, e->q_memory,
				     true));
		print_string(PRINT_FP, NULL, " %15s",
			     used_of(cell, sizeof(cell), e->swapped, e->q_swap,
				     true));
		print_string(PRINT_FP, NULL, " %7s\n", kernels);
	} else {
		print_string(PRINT_ANY, "name", "name:           %s\n", name);
		print_string(PRINT_FP, NULL, "connections:    %s\n",
			     used_of(cell, sizeof(cell), e->conns, e->q_conns,
				     false));
		print_string(PRINT_FP, NULL, "sessions:       %s\n",
			     used_of(cell, sizeof(cell), e->sessions,
				     e->q_sessions, false));
		print_string(PRINT_FP, NULL, "inflight:       %s\n",
			     used_of(cell, sizeof(cell), e->inflight,
				     e->q_inflight, false));
		print_string(PRINT_FP, NULL, "memory:         %s",
			     used_of(cell, sizeof(cell),
				     e->data_bytes + e->text_bytes, e->q_memory,
				     true));
		print_text(" (data %s", human_size(cell, e->data_bytes));
		print_text(", text %s)", human_size(cell, e->text_bytes));
		print_text("%s\n", e->q_memory ? " (quota a device)" : "");
		print_string(PRINT_FP, NULL, "swapped:        %s",
			     used_of(cell, sizeof(cell), e->swapped, e->q_swap,
				     true));
		print_text("%s\n", e->q_swap ? " (quota a device)" : "");
		print_u64(PRINT_FP, NULL, "text refs:      %" PRIu64 "\n",
			  e->text_refs);
		if (e->q_guaranteed)
			print_size(PRINT_FP, NULL,
				   "guaranteed:     %s a device\n",
				   e->q_guaranteed);
		if (e->q_lease_max_ns)
			print_duration(PRINT_FP, NULL, "lease max:      %s\n",
				       e->q_lease_max_ns);
		print_string(PRINT_FP, NULL, "client kernels: %s\n", kernels);
		print_string(PRINT_FP, NULL, "configured:     %s\n",
			     e->flags & DJINN_TENANT_CONFIGURED ? "yes" : "no");
	}
	print_u64(PRINT_JSON, "connections", NULL, e->conns);
	print_u64(PRINT_JSON, "sessions", NULL, e->sessions);
	print_u64(PRINT_JSON, "inflight", NULL, e->inflight);
	print_u64(PRINT_JSON, "data_bytes", NULL, e->data_bytes);
	print_u64(PRINT_JSON, "swapped", NULL, e->swapped);
	print_u64(PRINT_JSON, "text_refs", NULL, e->text_refs);
	print_u64(PRINT_JSON, "text_bytes", NULL, e->text_bytes);
	print_string(PRINT_JSON, "client_kernels", NULL, kernels);
	print_string(PRINT_JSON, "configured", NULL,
		     e->flags & DJINN_TENANT_CONFIGURED ? "yes" : "no");
	open_json_object("quota");
	print_quota("memory", e->q_memory);
	print_quota("swap", e->q_swap);
	print_quota("guaranteed", e->q_guaranteed);
	print_quota("connections", e->q_conns);
	print_quota("sessions", e->q_sessions);
	print_quota("inflight", e->q_inflight);
	print_quota("lease_max_ns", e->q_lease_max_ns);
	close_json_object();
	close_json_object();
}

static int get_tenants(struct ctl *ctl, struct djinn_admin_tenant **es,
		       uint32_t *nr)
{
	return admin_list(ctl, DJINN_MSG_ADMIN_TENANTS, sizeof(**es), "tenant",
			  (void **)es, nr);
}

int do_tenant_list(struct ctl *ctl, char **args)
{
	struct djinn_admin_tenant *es;
	int wname = 6; /* "TENANT" */
	uint32_t nr;
	int ret = get_tenants(ctl, &es, &nr);

	if (ret)
		return ret;
	for (uint32_t i = 0; i < nr; i++) {
		char name[DJINN_TENANT_LEN];
		int n = (int)strlen(wire_str(name, sizeof(name), es[i].name,
					     sizeof(es[i].name)));

		if (n > wname)
			wname = n;
	}
	print_text("%-*s %11s %11s %11s %15s %15s %7s\n", wname, "TENANT",
		   "CONNS", "SESSIONS", "INFLIGHT", "MEMORY", "SWAPPED",
		   "KERNELS");
	open_json_array(NULL);
	for (uint32_t i = 0; i < nr; i++)
		print_tenant(&es[i], wname, true);
	close_json_array();
	free(es);
	return 0;
}

int do_tenant_show(struct ctl *ctl, char **args)
{
	struct djinn_admin_tenant *es;
	uint32_t nr;
	int ret = get_tenants(ctl, &es, &nr);

	if (ret)
		return ret;
	ret = -1;
	for (uint32_t i = 0; i < nr && ret; i++) {
		char name[DJINN_TENANT_LEN];

		if (strcmp(wire_str(name, sizeof(name), es[i].name,
				    sizeof(es[i].name)),
			   args[0]))
			continue;
		print_tenant(&es[i], 0, false);
		ret = 0;
	}
	free(es);
	if (ret)
		return fail(ctl, ENOENT,
			    "no tenant %s (none holds anything, and "
			    "djinnd.conf names none)",
			    args[0]);
	return 0;
}
