/* SPDX-License-Identifier: MIT */
/*
 * What djinnctl's files share: the state of one command (struct ctl), the
 * admin request that every command makes (tools/djinnctl_call.c), and the
 * commands themselves, an object's to a file (djinnctl_session.c,
 * djinnctl_device.c, djinnctl_sched.c, djinnctl_model.c,
 * djinnctl_tenant.c), which tools/djinnctl.c's table dispatches to.
 */
#ifndef DJINNCTL_H
#define DJINNCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <djinn/proto.h>

#define IO_TIMEOUT_MS 5000 /* for the whole exchange */
#define LOAD_TIMEOUT_MS 600000 /* model load: reading the weights */
#define MAX_ANSWER (64ull << 20) /* over 400000 sessions */
#define MAX_DEVICES 64 /* in an ADMIN_VMU answer */

struct ctl {
	const char *socket;
	const char *object; /* full names, for messages */
	const char *command;
	int fd;
	uint64_t deadline; /* CLOCK_MONOTONIC ns */
	uint64_t timeout_ms; /* for the whole exchange */
	bool admin; /* -A: the admin socket even when djinn.ko is loaded */
	/* model load --budget SIZE --ring-slots N */
	bool budget_set;
	uint64_t budget;
	unsigned int slots;
	/* token mint --ttl DURATION */
	bool ttl_set;
	uint64_t ttl_ns;
};

/* ---------------------------------------------------------------------- */
/* Messages, the admin socket, names (tools/djinnctl_call.c) */

/* One line naming what failed; returns the exit status 1. */
int fail(const struct ctl *ctl, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Copy a string from the wire, at most @size - 1 bytes, with anything
 * that is not printable ASCII replaced: the daemon checks tenant names,
 * but a terminal should not have to trust it. */
char *wire_str(char *dst, size_t size, const char *src, size_t len);

/* -s, else $DJINN_ADMIN_SOCKET, else where djinnd puts it by default. */
const char *default_socket(void);

/*
 * One request: connect, send @op with @req_len bytes of @req, read the
 * answer and check it. An answer that is not an error must be @min to
 * @max bytes. Returns 0 with the payload in *ans (malloc'ed, the caller
 * frees it; NULL when empty) and its length in *len, or the exit status
 * 1 once it has said what failed.
 */
int admin_call(struct ctl *ctl, uint16_t op, const void *req, uint32_t req_len,
	       uint64_t min, uint64_t max, void **ans, uint64_t *len);

/*
 * An answer that lists entries (ADMIN_SESSIONS, ADMIN_MODELS): a __u32
 * count, a zero __u32, then the entries of @esz bytes. *@es gets the
 * entries (malloc()ed, the caller frees), *@nr their number.
 */
int admin_list_req(struct ctl *ctl, uint16_t op, const void *req,
		   uint32_t req_len, size_t esz, const char *what, void **es,
		   uint32_t *nr);
/* The same for a request without a payload. */
int admin_list(struct ctl *ctl, uint16_t op, size_t esz, const char *what,
	       void **es, uint32_t *nr);

/* struct djinn_admin_session's and _sched_session's phase, by value */
extern const char *const phase_names[DJINN_PHASE_IDLE + 1];

/* @names[v], or the number for a value the table lacks. */
const char *enum_name(char *buf, size_t size, const char *const *names,
		      size_t n, uint32_t v);

/* ---------------------------------------------------------------------- */
/* The commands: 0, or the exit status after a line on stderr */

/* tools/djinnctl_session.c: through djinn.ko's netlink family when it is
 * loaded (but with -A), else the admin socket */
int do_session_list(struct ctl *ctl, char **args);
int do_session_show(struct ctl *ctl, char **args);
int do_session_kill(struct ctl *ctl, char **args);
int do_monitor(struct ctl *ctl, char **args);
/* tools/djinnctl_device.c */
int do_vmu(struct ctl *ctl, char **args);
int do_stats(struct ctl *ctl, char **args);
int do_debug_fault(struct ctl *ctl, char **args);
int do_restart(struct ctl *ctl, char **args);
/* tools/djinnctl_sched.c */
int do_sched(struct ctl *ctl, char **args);
/* tools/djinnctl_model.c */
int do_model_list(struct ctl *ctl, char **args);
int do_model_load(struct ctl *ctl, char **args);
int do_model_evict(struct ctl *ctl, char **args);
/* tools/djinnctl_tenant.c */
int do_tenant_list(struct ctl *ctl, char **args);
int do_tenant_show(struct ctl *ctl, char **args);
/* tools/djinnctl_token.c */
int do_token_mint(struct ctl *ctl, char **args);
int do_token_revoke(struct ctl *ctl, char **args);
int do_token_list(struct ctl *ctl, char **args);
/* tools/djinnctl_device.c: exit 0 when ready, 1 when not (or djinnd
 * cannot be asked) */
int do_health(struct ctl *ctl, char **args);

#endif /* DJINNCTL_H */
