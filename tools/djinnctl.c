// SPDX-License-Identifier: MIT
/*
 * djinnctl: the administrator's tool for djinnd.
 *
 *   djinnctl [-j|--json] [-p|--pretty] [-s PATH] OBJECT [COMMAND [ARGS]]
 *
 * OBJECT and COMMAND come from a static table and may be abbreviated to
 * any unique prefix; an object's first command is its default. Each
 * command is one admin request (include/djinn/proto.h, "Admin socket")
 * on its own connection to the admin socket; the answer is checked
 * field by field before anything is printed, and printed once through
 * json_print.h, as text or as JSON.
 *
 * Exit status: 0 success; 1 failure, after one line on stderr
 * "djinnctl: OBJECT COMMAND: MESSAGE (ERRNO)"; 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <djinn/proto.h>

#include "array_size.h"
#include "cli.h"
#include "djinnctl.h"
#include "json_print.h"
#include "names.h"

#define DJINNCTL_VERSION "0.1"

/* ---------------------------------------------------------------------- */
/* Dispatch */

struct cmd {
	const char *name;
	const char *args; /* for usage */
	int nr_args; /* exactly */
	int (*fn)(struct ctl *ctl, char **args);
	const char *help;
};

struct object {
	const char *name;
	const struct cmd *cmds; /* the first is the default */
	int nr_cmds;
};

static const struct cmd session_cmds[] = {
	{ "list", "", 0, do_session_list, "the live sessions, one a line" },
	{ "show", "ID", 1, do_session_show, "one session, field by field" },
	{ "kill", "ID", 1, do_session_kill,
	  "end a session as if its lease had run out" },
};

static const struct cmd vmu_cmds[] = {
	{ "show", "", 0, do_vmu, "device memory, segments, swap, admission" },
};

static const struct cmd stats_cmds[] = {
	{ "show", "", 0, do_stats, "the daemon's counters" },
};

static const struct cmd sched_cmds[] = {
	{ "show", "", 0, do_sched,
	  "the scheduler: queues, swaps, each session's share" },
};

static const struct cmd model_cmds[] = {
	{ "list", "", 0, do_model_list,
	  "the loaded models, their size and holders" },
	{ "load", "NAME", 1, do_model_load,
	  "load a model now (--budget SIZE [--ring-slots N]: under that "
	  "budget)" },
	{ "evict", "NAME", 1, do_model_evict, "drop a model no session holds" },
};

static const struct cmd tenant_cmds[] = {
	{ "list", "", 0, do_tenant_list,
	  "each tenant's connections, sessions, jobs and data, of its quotas" },
	{ "show", "TENANT", 1, do_tenant_show, "one tenant, field by field" },
};

static const struct cmd debug_cmds[] = {
	{ "fault", "", 0, do_debug_fault,
	  "fault the device (djinnd --fault-injection; for tests)" },
};

static const struct cmd restart_cmds[] = {
	{ "now", "", 0, do_restart,
	  "start djinnd again from its binary, keeping its sessions and "
	  "connections (djinnd --handover)" },
};

static const struct cmd token_cmds[] = {
	{ "list", "", 0, do_token_list,
	  "the minted tokens: id, tenant, when made and when they end" },
	{ "mint", "TENANT", 1, do_token_mint,
	  "a bearer token naming TENANT, printed once (--ttl)" },
	{ "revoke", "TOKEN-ID", 1, do_token_revoke,
	  "refuse a minted token from now on" },
};

static const struct cmd health_cmds[] = {
	{ "show", "", 0, do_health,
	  "whether djinnd takes new work: exit 0 ready, 1 not" },
};

static const struct cmd monitor_cmds[] = {
	{ "events", "", 0, do_monitor,
	  "djinn.ko's session events, one JSON object a line" },
};

#define CMDS(c) c, (int)(ARRAY_SIZE(c))
static const struct object objects[] = {
	{ "session", CMDS(session_cmds) }, { "vmu", CMDS(vmu_cmds) },
	{ "stats", CMDS(stats_cmds) },	   { "sched", CMDS(sched_cmds) },
	{ "model", CMDS(model_cmds) },	   { "monitor", CMDS(monitor_cmds) },
	{ "tenant", CMDS(tenant_cmds) },   { "debug", CMDS(debug_cmds) },
	{ "restart", CMDS(restart_cmds) }, { "token", CMDS(token_cmds) },
	{ "health", CMDS(health_cmds) },
};
#undef CMDS
#define NR_OBJECTS ((int)(ARRAY_SIZE(objects)))

const char tool_name[] = "djinnctl";

void usage(FILE *f)
{
	fprintf(f, "usage: djinnctl [OPTIONS] OBJECT [COMMAND [ARGS]]\n\n");
	for (int i = 0; i < NR_OBJECTS; i++) {
		const struct object *o = &objects[i];

		for (int j = 0; j < o->nr_cmds; j++) {
			char words[64];

			snprintf(words, sizeof(words),
				 o->nr_cmds == 1 ? "%s [%s]%s%s" : "%s %s%s%s",
				 o->name, o->cmds[j].name,
				 *o->cmds[j].args ? " " : "", o->cmds[j].args);
			fprintf(f, "  %-20s %s\n", words, o->cmds[j].help);
		}
	}
	fprintf(f,
		"\nAny unique prefix names an object or a command; without a\n"
		"command, an object's first one runs.\n\n"
		"  -s, --socket PATH  djinnd's admin socket (default:\n"
		"                     $DJINN_ADMIN_SOCKET, else /run/djinn/admin.sock\n"
		"                     for root, $XDG_RUNTIME_DIR/djinn/admin.sock,\n"
		"                     else ./run/admin.sock; when that one is\n"
		"                     missing, /run/djinn/admin.sock)\n"
		"  -A, --admin        session list|kill through the admin socket\n"
		"                     even when djinn.ko is loaded (its netlink\n"
		"                     family names kernel session ids)\n"
		"  -j, --json         print JSON\n"
		"  -p, --pretty       print indented JSON (implies -j)\n"
		"  --budget SIZE      model load: the device bytes its weights\n"
		"                     may take (\"40G\"; 0: none)\n"
		"  --ring-slots N     model load: layers its ring holds, 1 to %d\n"
		"                     (default 2), with --budget\n"
		"  --ttl TIME         token mint: how long the token is valid\n"
		"                     (\"30m\", \"12h\", \"7d\"; default: until\n"
		"                     revoked)\n"
		"  -h, --help         print this and exit\n"
		"  -V, --version      print the version and exit\n\n"
		"Exit status: 0 success, 1 failure, 2 usage.\n",
		DJINN_RING_SLOTS_MAX);
}

/* "90s", "30m", "12h", "7d": 1 s to 365 d, into ns. */
static int parse_ttl(const char *s, uint64_t *ns)
{
	static const struct {
		char unit;
		uint64_t ns;
	} units[] = { { 's', 1000000000ull },
		      { 'm', 60000000000ull },
		      { 'h', 3600000000000ull },
		      { 'd', 86400000000000ull } };
	char num[24];
	size_t n = strlen(s);
	uint64_t v;

	if (n < 2 || n >= sizeof(num))
		return -EINVAL;
	memcpy(num, s, n - 1);
	num[n - 1] = 0;
	if (parse_u64(num, 365ull * 86400, &v) || !v)
		return -EINVAL;
	for (size_t i = 0; i < ARRAY_SIZE(units); i++) {
		if (s[n - 1] != units[i].unit)
			continue;
		if (v > 365ull * 86400000000000ull / units[i].ns)
			return -EINVAL;
		*ns = v * units[i].ns;
		return 0;
	}
	return -EINVAL;
}

/* 2 when @word is @name, 1 when a prefix of it, else 0. */
static int match(const char *word, const char *name)
{
	size_t n = strlen(word);

	if (!n || strncmp(word, name, n))
		return 0;
	return name[n] ? 1 : 2;
}

/*
 * Index of the entry of @table (@nr entries of @size bytes, each starting
 * with its name: a struct object or a struct cmd) that @word names, in
 * full or by a unique prefix; -1 none, -2 ambiguous.
 */
static int find_name(const char *word, const void *table, size_t size, int nr)
{
	int found = -1, nr_found = 0;

	for (int i = 0; i < nr; i++) {
		const void *e = (const char *)table + (size_t)i * size;
		int m = match(word, *(const char *const *)e);

		if (m == 2)
			return i;
		if (m == 1) {
			found = i;
			nr_found++;
		}
	}
	return nr_found > 1 ? -2 : found;
}

static_assert(offsetof(struct object, name) == 0 &&
		      offsetof(struct cmd, name) == 0,
	      "find_name() reads an entry's name at its start");

/* "session, stats": the objects @word is a prefix of. */
static const char *candidates(const char *word)
{
	static char buf[256];
	size_t n = 0;

	buf[0] = 0;
	for (int i = 0; i < NR_OBJECTS; i++)
		if (match(word, objects[i].name) && n < sizeof(buf))
			n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s",
					      n ? ", " : "", objects[i].name);
	return buf;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "admin", no_argument, NULL, 'A' },
		{ "json", no_argument, NULL, 'j' },
		{ "pretty", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ "budget", required_argument, NULL, 'B' },
		{ "ring-slots", required_argument, NULL, 'R' },
		{ "ttl", required_argument, NULL, 'T' },
		{ 0 },
	};
	struct ctl ctl = { .fd = -1 };
	bool json = false, pretty = false;
	const struct object *o;
	const struct cmd *cmd;
	int c, i, nr_args, ret;
	char **args;

	while ((c = getopt_long(argc, argv, "s:AjphV", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			ctl.socket = optarg;
			break;
		case 'A':
			ctl.admin = true;
			break;
		case 'B':
			if (parse_size(optarg, &ctl.budget))
				return usage_error("--budget: bad size '%s' "
						   "(\"512M\", \"40G\")",
						   optarg);
			ctl.budget_set = true;
			break;
		case 'R': {
			uint64_t v;

			if (parse_u64(optarg, DJINN_RING_SLOTS_MAX, &v) || !v)
				return usage_error("--ring-slots: '%s': want 1 "
						   "to %d",
						   optarg,
						   DJINN_RING_SLOTS_MAX);
			ctl.slots = (unsigned int)v;
			break;
		}
		case 'T':
			if (parse_ttl(optarg, &ctl.ttl_ns))
				return usage_error(
					"--ttl: bad time '%s' (\"90s\", "
					"\"30m\", \"12h\", \"7d\"; at "
					"most 365d)",
					optarg);
			ctl.ttl_set = true;
			break;
		case 'p':
			pretty = true;
			/* fall through */
		case 'j':
			json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("djinnctl %s (protocol %d)\n", DJINNCTL_VERSION,
			       DJINN_PROTO_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind == argc)
		return usage_error("no object given");
	if (!strcmp(argv[optind], "help")) {
		usage(stdout);
		return 0;
	}
	i = find_name(argv[optind], objects, sizeof(objects[0]), NR_OBJECTS);
	if (i == -2)
		return usage_error("ambiguous object '%s': %s", argv[optind],
				   candidates(argv[optind]));
	if (i < 0)
		return usage_error("unknown object '%s'", argv[optind]);
	o = &objects[i];
	optind++;
	if (optind < argc && !strcmp(argv[optind], "help")) {
		usage(stdout);
		return 0;
	}
	if (optind == argc) {
		cmd = &o->cmds[0];
	} else {
		i = find_name(argv[optind], o->cmds, sizeof(o->cmds[0]),
			      o->nr_cmds);
		if (i < 0)
			return usage_error("%s command '%s' for %s",
					   i == -2 ? "ambiguous" : "unknown",
					   argv[optind], o->name);
		cmd = &o->cmds[i];
		optind++;
	}
	args = argv + optind;
	nr_args = argc - optind;
	if (nr_args > cmd->nr_args)
		return usage_error("%s %s: unexpected argument '%s'", o->name,
				   cmd->name, args[cmd->nr_args]);
	if (nr_args < cmd->nr_args)
		return usage_error("%s %s: missing %s", o->name, cmd->name,
				   cmd->args);
	for (i = 0; i < nr_args; i++) {
		uint64_t id;

		if (!strcmp(cmd->args, "ID") &&
		    parse_u64(args[i], UINT64_MAX, &id))
			return usage_error("%s %s: bad session id '%s'",
					   o->name, cmd->name, args[i]);
		if (!strcmp(cmd->args, "TENANT") && !tenant_name_ok(args[i]))
			return usage_error("%s %s: bad tenant name '%s' (1 to "
					   "63 printable bytes, no spaces)",
					   o->name, cmd->name, args[i]);
		if (!strcmp(cmd->args, "NAME") && !model_name_ok(args[i]))
			return usage_error("%s %s: bad model name '%s' (1 to "
					   "%d of [A-Za-z0-9._-])",
					   o->name, cmd->name, args[i],
					   DJINN_MODEL_NAME_MAX - 1);
	}

	if (ctl.ttl_set && cmd->fn != do_token_mint)
		return usage_error("--ttl is token mint's");
	if ((ctl.budget_set || ctl.slots) && cmd->fn != do_model_load)
		return usage_error(
			"--budget and --ring-slots are model load's");
	if (ctl.slots && !ctl.budget)
		return usage_error("--ring-slots without a --budget: the ring "
				   "is a model's over its budget");
	ctl.object = o->name;
	ctl.command = cmd->name;
	if (!ctl.socket)
		ctl.socket = default_socket();
	new_json_obj(json, pretty);
	ret = cmd->fn(&ctl, args);
	c = delete_json_obj();
	if (c && !ret)
		ret = fail(&ctl, -c, "cannot write the output: %s",
			   strerror(-c));
	return ret;
}
