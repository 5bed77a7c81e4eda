/* SPDX-License-Identifier: MIT */
/*
 * The set-up of the integration tests that speak to djinnd through
 * libdjinn (test_devices, test_fault, test_sched, test_libdjinn_models):
 * a real djinnd (daemon.h) with a model written for it, a libdjinn
 * connection to it, and a request on its admin socket. The raw-protocol
 * tests have fixture.h instead. Include after <cmocka.h>.
 *
 * The connections made here do not reconnect (reconnect_ms -1): these
 * tests watch djinnd die (a dead device, a kill) and check that calls
 * fail at once; test_reconnect checks the other side.
 */
#ifndef DJINN_TEST_LIBDJINN_FX_H
#define DJINN_TEST_LIBDJINN_FX_H

#include <stddef.h>
#include <stdint.h>

#include <djinn/djinn.h>

#include "daemon.h"

/* The tests' model: a GPT-2 of two layers, 64 wide, a vocabulary of 256. */
#define TINY_GPT2                                                 \
	"--arch gpt2 --layers 2 --embd 64 --heads 4 --vocab 256 " \
	"--ctx 64 --seed 3"

/*
 * Start @d (djd_start_args() with @cpu_mem, @lease_ms and @extra), write
 * model @name with the options @model (no model when @name is NULL) and
 * connect to it through libdjinn: the connection in *@conn. 0; -ECHILD
 * when djinnd did not start (said on stderr; djd_start_error() says
 * why); -EIO when a later step failed (the daemon killed).
 */
int djd_start_conn(struct djd *d, const char *cpu_mem, unsigned int lease_ms,
		   const char *const *extra, const char *name,
		   const char *model, struct djinn_conn **conn);

/* Disconnect @conn and stop @d as djd_stop() does (its result). */
int djd_stop_conn(struct djd *d, struct djinn_conn *conn, int timeout_ms);
/* Disconnect @conn and kill @d: after a test that ended the daemon. */
void djd_kill_conn(struct djd *d, struct djinn_conn *conn);

/* One request with @len bytes of @payload on a new connection to @d's
 * admin socket; it must be answered (cmocka), the answer in @r, which
 * the caller frees. */
void djd_admin(const struct djd *d, uint16_t op, const void *payload,
	       size_t len, struct dj_resp *r);

/* Another libdjinn connection to @d's socket; it must connect (cmocka). */
struct djinn_conn *djd_connect_lib(const struct djd *d);

/* Request @op of session @sid with @len bytes of @p in raw frames on
 * @fd; it must be answered without an error (cmocka). The caller frees
 * the answer. */
struct dj_resp djd_raw_ok(int fd, uint16_t op, uint64_t sid, const void *p,
			  size_t len);

/* In raw frames on @fd: HELLO, a session labelled @label of @priority,
 * model @model opened and a context of it made; each must succeed
 * (cmocka). The context's handle, the session's id in *@sid. */
uint64_t djd_raw_ctx(int fd, const char *label, uint32_t priority,
		     const char *model, uint64_t *sid);

/* Greedy tokens of @m: a fresh context prefilled with @np tokens of
 * @prompt, then @n decoded into @out; every step must succeed (cmocka). */
void greedy_tokens(struct djinn_model *m, const int32_t *prompt, uint32_t np,
		   uint32_t n, int32_t *out);

#endif /* DJINN_TEST_LIBDJINN_FX_H */
