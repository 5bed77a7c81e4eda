/* SPDX-License-Identifier: MIT */
/*
 * One printing path for text and JSON, after iproute2's lib/json_print.c.
 *
 * A tool prints every value once, giving both its JSON key and its text
 * format; new_json_obj() decided at start which of the two is used. In
 * text mode print_*() is printf(fmt, value) and the object and array calls
 * do nothing; in JSON mode the format is ignored and the value goes to a
 * small JSON writer (compact, or indented with @pretty). A value printed
 * with PRINT_FP appears in text only (a table header, a unit), with
 * PRINT_JSON in JSON only (a raw field the text leaves out).
 *
 * Sizes and durations are numbers in JSON (bytes, nanoseconds) and human
 * strings in text ("1.5Mi", "3m07s"): the text format then takes a %s.
 *
 * Everything goes to stdout. Not thread-safe: one printer per process.
 */
#ifndef DJINN_JSON_PRINT_H
#define DJINN_JSON_PRINT_H

#include <stdbool.h>
#include <stdint.h>

enum output_type {
	PRINT_FP = 1, /* text only */
	PRINT_JSON = 2, /* JSON only */
	PRINT_ANY = PRINT_FP | PRINT_JSON,
};

/* Choose the mode; @pretty indents the JSON. */
void new_json_obj(bool json, bool pretty);
/* Flush stdout: 0, or -errno when the output could not be written. */
int delete_json_obj(void);
bool is_json_context(void);

/* Containers (JSON only). @key is NULL at the top level and in arrays. */
void open_json_object(const char *key);
void close_json_object(void);
void open_json_array(const char *key);
void close_json_array(void);

/* @key is NULL in arrays; @fmt NULL prints nothing in text mode. */
void print_string(enum output_type t, const char *key, const char *fmt,
		  const char *value);
void print_u64(enum output_type t, const char *key, const char *fmt,
	       uint64_t value);
void print_s64(enum output_type t, const char *key, const char *fmt,
	       int64_t value);
/* JSON null; the text format gets @text (a "-", say). */
void print_null(enum output_type t, const char *key, const char *fmt,
		const char *text);
/* true/false in JSON, "yes"/"no" through @fmt's %s in text */
void print_bool(enum output_type t, const char *key, const char *fmt, bool v);
/* Bytes: a number in JSON, "512B", "1.5Mi", "64Mi" in text. */
void print_size(enum output_type t, const char *key, const char *fmt,
		uint64_t bytes);
/* Nanoseconds: a number in JSON, "12.345s", "3m07s", "2d04h05m" in text. */
void print_duration(enum output_type t, const char *key, const char *fmt,
		    uint64_t ns);
/* Text only: a newline, or anything printf can say. */
void print_nl(void);
void print_text(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The text forms, for callers that align columns themselves; @buf holds
 * at least HUMAN_LEN bytes. */
#define HUMAN_LEN 24
const char *human_size(char *buf, uint64_t bytes);
const char *human_duration(char *buf, uint64_t ns);

#endif /* DJINN_JSON_PRINT_H */
