// SPDX-License-Identifier: MIT
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "rundir.h"

const char *djinnd_run_dir(char *buf, size_t len)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");

	if (geteuid() == 0)
		return DJINND_SYSTEM_RUN_DIR;
	if (xdg && *xdg) {
		snprintf(buf, len, "%s/djinn", xdg);
		return buf;
	}
	return "run";
}

void djinnd_socket_default(const char *name, char *buf, size_t len)
{
	char dir[4096];

	snprintf(buf, len, "%s/%s", djinnd_run_dir(dir, sizeof(dir)), name);
}

void djinnd_socket_find(const char *name, char *buf, size_t len)
{
	char sys[256];

	djinnd_socket_default(name, buf, len);
	if (geteuid() == 0 || access(buf, F_OK) == 0)
		return;
	snprintf(sys, sizeof(sys), DJINND_SYSTEM_RUN_DIR "/%s", name);
	if (access(sys, F_OK) == 0)
		snprintf(buf, len, "%s", sys);
}
