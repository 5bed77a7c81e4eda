/* SPDX-License-Identifier: MIT */
/*
 * The parser's answers only the tests and the fuzz harness ask for
 * (safetensors.h is the parser): included by safetensors.c, which
 * defines them, and by those.
 */
#ifndef DJINN_MODEL_SAFETENSORS_TEST_H
#define DJINN_MODEL_SAFETENSORS_TEST_H

#include <stddef.h>

#include "model/safetensors.h"

/* Bytes of one element of @t; 0 out of range */
size_t st_dtype_size(enum st_dtype t);
/* The metadata value for @key, or NULL. */
const char *st_meta(const struct st_file *f, const char *key);

#endif /* DJINN_MODEL_SAFETENSORS_TEST_H */
