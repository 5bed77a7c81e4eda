/* SPDX-License-Identifier: MIT */
/*
 * A djinnd for a benchmark (agent-bench, model-bench --sessions): the
 * binaries beside the benchmark's, a daemon on sockets in a temporary
 * directory, started and stopped, and djinnctl's JSON of its counters.
 * One per program: a signal or the exit kills the daemon and removes the
 * directory.
 */
#ifndef DJINN_BENCH_DJINND_H
#define DJINN_BENCH_DJINND_H

#include <stdbool.h>
#include <sys/types.h>

#include <jansson.h>

/*
 * struct bench_djinnd - the daemon
 * @bin, @ctl: djinnd's and djinnctl's paths
 * @addr:      "unix:DIR/sock", for clients
 * @admin, @log: its admin socket and its log
 * @pid:       while it runs, else -1
 */
struct bench_djinnd {
	const char *bin, *ctl;
	char dir[64], addr[128], admin[128], log[128];
	volatile pid_t pid;
};

extern struct bench_djinnd bench_djinnd;

/* The binaries: @djinnd and @djinnctl if given, else $DJINND and
 * $DJINNCTL, else beside the benchmark (BUILD/bench/ -> BUILD/). */
void bdj_find(const char *djinnd, const char *djinnctl);
/* The temporary directory /tmp/@prefix.XXXXXX and the sockets' paths. */
void bdj_tmpdir(const char *prefix);
/* Start djinnd --foreground with the sockets, the log and @args (NULL
 * ended); wait until it answers (60 s at most). With @cuda a daemon that
 * exits at start is a skip: say so and exit 77. */
void bdj_start(const char *const *args, bool cuda);
/* SIGTERM, and wait 20 s for it: whether it exited cleanly. */
bool bdj_stop(void);
/* Whether `djinnd --help` mentions @flag. */
bool bdj_has_flag(const char *flag);
/* `djinnctl -j --socket ADMIN @object` parsed; NULL if it failed. */
json_t *bdj_ctl_json(const char *object);
/* @key of @o as a number, NAN when it is none. */
double bdj_num(json_t *o, const char *key);

#endif /* DJINN_BENCH_DJINND_H */
