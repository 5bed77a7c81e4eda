/* SPDX-License-Identifier: MIT */
/*
 * djinnd's log: one line per event on stderr (or a file), with syslog
 * priority prefixes ("<3>") when journald reads it, so levels survive.
 */
#ifndef DJINN_LOG_H
#define DJINN_LOG_H

#include <stdbool.h>
#include <syslog.h>

/* @level: LOG_ERR .. LOG_DEBUG; @path: a file to append to, NULL for
 * stderr. Prefixes are used when $JOURNAL_STREAM names stderr's device
 * and inode (systemd connected it to the journal). */
int log_init(int level, const char *path);
/* Reopen the log file (SIGHUP, after logrotate). */
int log_reopen(void);
void log_set_level(int level);
/* "err", "warning", "notice", "info", "debug": the level, or -1. */
int log_parse_level(const char *name);
const char *log_level_name(int level);
bool log_enabled(int level);

void dj_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define log_err(...) dj_log(LOG_ERR, __VA_ARGS__)
#define log_warn(...) dj_log(LOG_WARNING, __VA_ARGS__)
#define log_notice(...) dj_log(LOG_NOTICE, __VA_ARGS__)
#define log_info(...) dj_log(LOG_INFO, __VA_ARGS__)
#define log_debug(...) dj_log(LOG_DEBUG, __VA_ARGS__)

#endif /* DJINN_LOG_H */
