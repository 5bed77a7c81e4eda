// SPDX-License-Identifier: MIT
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "clock.h"
#include "log.h"

static const char *const names[] = {
	[LOG_EMERG] = "emerg",	   [LOG_ALERT] = "alert",
	[LOG_CRIT] = "crit",	   [LOG_ERR] = "err",
	[LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
	[LOG_INFO] = "info",	   [LOG_DEBUG] = "debug",
};

static struct {
	int level;
	bool journal; /* stderr goes to journald: prefix "<N>" */
	const char *path;
	FILE *file;
	pthread_mutex_t lock;
} lg = { .level = LOG_INFO, .lock = PTHREAD_MUTEX_INITIALIZER };

int log_parse_level(const char *name)
{
	for (int i = LOG_ERR; i <= LOG_DEBUG; i++)
		if (!strcmp(name, names[i]))
			return i;
	if (!strcmp(name, "error"))
		return LOG_ERR;
	if (!strcmp(name, "warn"))
		return LOG_WARNING;
	return -1;
}

const char *log_level_name(int level)
{
	return level >= LOG_EMERG && level <= LOG_DEBUG ? names[level] : "?";
}

void log_set_level(int level)
{
	lg.level = level;
}

bool log_enabled(int level)
{
	return level <= lg.level;
}

int log_reopen(void)
{
	FILE *f;

	if (!lg.path)
		return 0;
	f = fopen(lg.path, "ae");
	if (!f)
		return -errno;
	setvbuf(f, NULL, _IOLBF, 0);
	pthread_mutex_lock(&lg.lock);
	if (lg.file)
		fclose(lg.file);
	lg.file = f;
	pthread_mutex_unlock(&lg.lock);
	return 0;
}

/* systemd sets $JOURNAL_STREAM to "DEV:INO" of the stream it connected
 * stderr to; a child whose stderr was redirected inherits the variable,
 * so it counts only while stderr is still that stream. */
static bool stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	int n = 0;

	if (!js || sscanf(js, "%llu:%llu%n", &dev, &ino, &n) != 2 || js[n])
		return false;
	if (fstat(2, &st))
		return false;
	return (unsigned long long)st.st_dev == dev &&
	       (unsigned long long)st.st_ino == ino;
}

int log_init(int level, const char *path)
{
	lg.level = level;
	lg.path = path;
	lg.journal = !path && stderr_is_journal();
	return log_reopen();
}

void dj_log(int level, const char *fmt, ...)
{
	FILE *out = lg.file ? lg.file : stderr;
	char line[1024];
	va_list ap;

	if (!log_enabled(level))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&lg.lock);
	if (lg.journal) {
		fprintf(out, "<%d>%s\n", level, line);
	} else {
		struct timespec ts;
		struct tm tm;

		clock_gettime(CLOCK_REALTIME, &ts);
		localtime_r(&ts.tv_sec, &tm);
		fprintf(out, "%02d:%02d:%02d.%03ld djinnd %s: %s\n", tm.tm_hour,
			tm.tm_min, tm.tm_sec,
			(long)(ts.tv_nsec / NSEC_PER_MSEC),
			log_level_name(level), line);
	}
	pthread_mutex_unlock(&lg.lock);
}
