// SPDX-License-Identifier: MIT
/*
 * djinnctl session list|show|kill, and monitor: djinnd's sessions
 * through the admin socket, or djinn.ko's through its netlink family
 * (djinnctl_nl.c) when it is loaded.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <djinn/proto.h>

#include "array_size.h"
#include "cli.h"
#include "clock.h"
#include "djinnctl.h"
#include "djinnctl_nl.h"
#include "json_print.h"

/* With djinn.ko loaded, sessions are listed and killed through its
 * netlink family (kernel session ids); without it, or without
 * CAP_NET_ADMIN, through djinnd's admin socket. -1: fall back. */
static int knl_result(const struct ctl *ctl, int ret, const char *msg)
{
	if (ret == -ENOENT || ret == -EPERM)
		return -1;
	return ret ? fail(ctl, -ret, "%s", msg) : 0;
}

/* ---------------------------------------------------------------------- */
/* session */

/*
 * The fields of a session, in table order. JSON has them all; the table
 * the ones with a @title, `session show` the ones with a @label.
 */
enum field_kind {
	FK_U64, /* __u64 at @off */
	FK_U32, /* __u32 at @off */
	FK_SIZE, /* __u64 of bytes at @off */
	FK_NS, /* __u64 of nanoseconds at @off */
	FK_TENANT,
	FK_PHASE,
	FK_LEASE_LEFT, /* deadline_ns less now, in ms */
	FK_UID, /* null over TCP */
	FK_PID, /* null over TCP */
};

struct field {
	const char *key;
	const char *title;
	const char *label;
	int width; /* in the table; negative aligns left */
	enum field_kind kind;
	size_t off;
};

#define SF(m) offsetof(struct djinn_admin_session, m)
static const struct field session_fields[] = {
	{ "id", "ID", "id", -2, FK_U64, SF(id) },
	{ "tenant", "TENANT", "tenant", -6, FK_TENANT, SF(tenant) },
	{ "label", "LABEL", "label", -6, FK_TENANT, SF(label) },
	{ "priority", "PRIO", "priority", 4, FK_U32, SF(priority) },
	{ "phase", "PHASE", "phase", -8, FK_PHASE, 0 },
	{ "lease_ns", NULL, "lease", 0, FK_NS, SF(lease_ns) },
	{ "deadline_ns", NULL, NULL, 0, FK_U64, SF(deadline_ns) },
	{ "lease_left_ms", "LEASE", "lease left", 8, FK_LEASE_LEFT, 0 },
	{ "data_bytes", "DATA", "data", 8, FK_SIZE, SF(data_bytes) },
	{ "resident", "RESIDENT", "resident", 8, FK_SIZE, SF(resident) },
	{ "swapped", "SWAPPED", "swapped", 8, FK_SIZE, SF(swapped) },
	{ "text_refs", "TEXT", "text refs", 5, FK_U64, SF(text_refs) },
	{ "tensors", "TENSORS", "tensors", 7, FK_U64, SF(tensors) },
	{ "requests", "REQS", "requests", 8, FK_U64, SF(requests) },
	{ "ctx_waiting", "CWAIT", "ctx waiting", 5, FK_U32, SF(ctx_waiting) },
	{ "uid", "UID", "uid", 6, FK_UID, 0 },
	{ "pid", "PID", "pid", 7, FK_PID, 0 },
	{ "device", "DEV", "device", 3, FK_U32, SF(device) },
};
#undef SF
#define NR_FIELDS (ARRAY_SIZE(session_fields))

/*
 * The text format of a field: "%-6s" in a table (after a space but for
 * the first column), "label:     %s\n" for `session show`, NULL when the
 * field is not shown. @conv is the conversion (PRIu64 or "s"); @unit
 * follows the value.
 */
static const char *field_fmt(char *buf, size_t size, const struct field *f,
			     int width, bool table, const char *conv,
			     const char *unit)
{
	int w = abs(width) - (int)strlen(unit);

	if (table && f->title)
		snprintf(buf, size, "%s%%%s%d%s%s",
			 f == session_fields ? "" : " ", width < 0 ? "-" : "",
			 w > 0 ? w : 1, conv, unit);
	else if (!table && f->label)
		snprintf(buf, size, "%s:%*s%%%s%s\n", f->label,
			 (int)(12 - strlen(f->label)), "", conv, unit);
	else
		return NULL;
	return buf;
}

static void print_session(const struct djinn_admin_session *e, uint64_t now,
			  const int *widths, bool table)
{
	char fmt[64], str[DJINN_TENANT_LEN];

	open_json_object(NULL);
	for (size_t i = 0; i < NR_FIELDS; i++) {
		const struct field *f = &session_fields[i];
		const uint8_t *p = (const uint8_t *)e + f->off;
		const char *s = NULL; /* a string, else the number @v */
		bool null = false;
		uint32_t v32;
		uint64_t v = 0;

		switch (f->kind) {
		case FK_U64:
		case FK_SIZE:
		case FK_NS:
			memcpy(&v, p, sizeof(v));
			break;
		case FK_U32:
			memcpy(&v32, p, sizeof(v32));
			v = v32;
			break;
		case FK_TENANT:
			s = wire_str(str, sizeof(str), (const char *)p,
				     DJINN_TENANT_LEN);
			break;
		case FK_PHASE:
			s = enum_name(str, sizeof(str), phase_names,
				      ARRAY_SIZE(phase_names), e->phase);
			break;
		case FK_LEASE_LEFT:
			if (e->deadline_ns > now)
				v = (e->deadline_ns - now) / NSEC_PER_MSEC;
			break;
		case FK_UID:
			null = e->uid == UINT32_MAX;
			v = e->uid;
			break;
		case FK_PID:
			null = e->pid <= 0;
			v = null ? 0 : (uint64_t)e->pid;
			break;
		}

		if (null)
			print_null(PRINT_ANY, f->key,
				   field_fmt(fmt, sizeof(fmt), f, widths[i],
					     table, "s", ""),
				   "-");
		else if (s)
			print_string(PRINT_ANY, f->key,
				     field_fmt(fmt, sizeof(fmt), f, widths[i],
					       table, "s", ""),
				     s);
		else if (f->kind == FK_SIZE)
			print_size(PRINT_ANY, f->key,
				   field_fmt(fmt, sizeof(fmt), f, widths[i],
					     table, "s", ""),
				   v);
		else if (f->kind == FK_NS)
			print_duration(PRINT_ANY, f->key,
				       field_fmt(fmt, sizeof(fmt), f, widths[i],
						 table, "s", ""),
				       v);
		else
			print_u64(PRINT_ANY, f->key,
				  field_fmt(fmt, sizeof(fmt), f, widths[i],
					    table, PRIu64,
					    f->kind == FK_LEASE_LEFT ? "ms" :
								       ""),
				  v);
	}
	if (table)
		print_nl();
	close_json_object();
}

static int get_sessions(struct ctl *ctl, struct djinn_admin_session **es,
			uint32_t *nr)
{
	return admin_list(ctl, DJINN_MSG_ADMIN_SESSIONS, sizeof(**es),
			  "session", (void **)es, nr);
}

int do_session_list(struct ctl *ctl, char **args)
{
	int widths[NR_FIELDS];
	struct djinn_admin_session *es;
	uint64_t now;
	uint32_t nr;
	char fmt[64], msg[256];
	int ret;

	if (!ctl->admin) {
		ret = knl_result(ctl, knl_session_list(msg, sizeof(msg)), msg);
		if (ret != -1)
			return ret;
	}
	ret = get_sessions(ctl, &es, &nr);
	if (ret)
		return ret;
	now = mono_ns();
	/* ID, TENANT and LABEL are as wide as their widest value. */
	for (size_t i = 0; i < NR_FIELDS; i++)
		widths[i] = session_fields[i].width;
	for (uint32_t i = 0; i < nr; i++) {
		char id[24], str[DJINN_TENANT_LEN];
		int n = snprintf(id, sizeof(id), "%" PRIu64,
				 (uint64_t)es[i].id);

		if (n > -widths[0])
			widths[0] = -n;
		n = (int)strlen(wire_str(str, sizeof(str), es[i].tenant,
					 sizeof(es[i].tenant)));
		if (n > -widths[1])
			widths[1] = -n;
		n = (int)strlen(wire_str(str, sizeof(str), es[i].label,
					 sizeof(es[i].label)));
		if (n > -widths[2])
			widths[2] = -n;
	}
	for (size_t i = 0; i < NR_FIELDS; i++)
		if (field_fmt(fmt, sizeof(fmt), &session_fields[i], widths[i],
			      true, "s", ""))
			print_string(PRINT_FP, NULL, fmt,
				     session_fields[i].title);
	print_nl();
	open_json_array(NULL);
	for (uint32_t i = 0; i < nr; i++)
		print_session(&es[i], now, widths, true);
	close_json_array();
	free(es);
	return 0;
}

int do_session_show(struct ctl *ctl, char **args)
{
	int widths[NR_FIELDS] = { 0 };
	struct djinn_admin_session *es;
	uint64_t id;
	uint32_t nr;
	int ret;

	parse_u64(args[0], UINT64_MAX, &id); /* checked by main() */
	ret = get_sessions(ctl, &es, &nr);
	if (ret)
		return ret;
	ret = -1;
	for (uint32_t i = 0; i < nr && ret; i++) {
		if (es[i].id == id) {
			print_session(&es[i], mono_ns(), widths, false);
			ret = 0;
		}
	}
	free(es);
	if (ret)
		return fail(ctl, ENOENT, "no session %" PRIu64, id);
	return 0;
}

int do_session_kill(struct ctl *ctl, char **args)
{
	struct djinn_admin_kill k;
	uint64_t id, len;
	void *buf;

	char msg[256];
	int ret;

	parse_u64(args[0], UINT64_MAX, &id); /* checked by main() */
	if (!ctl->admin) {
		ret = knl_result(ctl, knl_session_kill(id, msg, sizeof(msg)),
				 msg);
		if (ret != -1)
			return ret;
	}
	k.session_id = id;
	return admin_call(ctl, DJINN_MSG_ADMIN_KILL, &k, sizeof(k), 0, 0, &buf,
			  &len);
}

/* monitor: djinn.ko's events, one JSON object a line */
int do_monitor(struct ctl *ctl, char **args)
{
	char msg[256];
	int ret = knl_monitor(0, msg, sizeof(msg));

	return ret ? fail(ctl, -ret, "%s", msg) : 0;
}
