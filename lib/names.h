/* SPDX-License-Identifier: MIT */
/*
 * Names djinnd takes from clients and its configuration, checked one way
 * by djinnd, its configuration and djinnctl; and sizes, read one way by
 * djinnd.conf and djinnctl.
 */
#ifndef DJINN_NAMES_H
#define DJINN_NAMES_H

#include <stdbool.h>
#include <stdint.h>

/* A tenant's name or a session's label: 1 to DJINN_TENANT_LEN - 1
 * printable bytes without spaces, NUL-terminated within
 * DJINN_TENANT_LEN. */
bool tenant_name_ok(const char *s);
/* Whether @s is a name djinnd gives tenants itself: "uid:N" (a local
 * user), "tcp:ADDR" (a TCP peer by its address), "unknown". A
 * certificate or a bearer token may not name one. */
bool tenant_name_implicit(const char *s);

/* A served model's name: 1 to DJINN_MODEL_NAME_MAX - 1 of [A-Za-z0-9._-],
 * not starting with '.' (djinnd's model_name_check() says which rule a
 * name breaks). */
bool model_name_ok(const char *s);

/* "512M", "2G", "3MiB", "1TB", "65536" (bytes; K, M, G, T are powers
 * of 1024): 0 and the size in *@out, or -EINVAL. */
int parse_size(const char *s, uint64_t *out);

#endif /* DJINN_NAMES_H */
