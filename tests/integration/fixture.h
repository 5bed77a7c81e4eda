/* SPDX-License-Identifier: MIT */
/*
 * The raw-protocol integration tests' fixture (test_framing,
 * test_sessions, test_tensors, test_text, test_graphs, test_leases,
 * test_admin, test_metrics, test_models): one real djinnd per test
 * (daemon.h), spoken to in raw frames, the malformed ones that libdjinn
 * never sends included, and calls that assert (cmocka).
 *
 * Every test starts its own djinnd (a 64 MiB CPU device unless it says
 * otherwise) and records the VMU's state; its teardown checks that the
 * daemon still serves a fresh HELLO, that no session is left and that
 * the VMU is back where it started (waiting for it, WAIT_MS at most:
 * memory may come back after the answer a test saw), then stops it with
 * SIGTERM and checks that it exits 0 with no sanitizer report in its
 * log.
 *
 * The daemon binary is $DJINND, else BUILD/djinnd/djinnd beside the test
 * binary's build tree. DJINN_TEST_FILTER=test_text runs the tests
 * matching a pattern; DJINN_TEST_VERBOSE=1 prints each daemon's log
 * when it stops.
 *
 * A helper NAME_at(line, ...) fails the test naming @line; the macro
 * NAME(...) passes __LINE__. Include after <cmocka.h>.
 */
#ifndef DJINN_TEST_FIXTURE_H
#define DJINN_TEST_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "array_size.h"
#include "clock.h"
#include "daemon.h"

#define DEV_MEM "64M"
#define DEV_BYTES (64 * MiB)

/*
 * For main(): SIGPIPE ignored, $DJINN_TEST_FILTER applied, then whether
 * a daemon can run here (djd_can_run()): 0 to run the tests, else the
 * exit status (77: skipped, said why).
 */
int fx_can_run(void);

/* ---------------------------------------------------------------------- */
/* Calls that assert */

/* A connection to @path, or fail. */
int xconnect_at(int line, const char *path);
#define xconnect(path) xconnect_at(__LINE__, path)

/* dj_call()'s result in words: "EOF", "ok" or the errno's. */
const char *ret_str(int ret);

/* @op must succeed; @want_len >= 0: its payload's length. */
void call_ok_at(int line, int fd, uint16_t op, uint64_t sid, const void *p,
		size_t len, struct dj_resp *r, long want_len);
#define call_ok(...) call_ok_at(__LINE__, __VA_ARGS__)

/* A call that must succeed with an empty response. */
#define call_void(...)                                     \
	do {                                               \
		struct dj_resp r_;                         \
		call_ok_at(__LINE__, __VA_ARGS__, &r_, 0); \
		dj_resp_free(&r_);                         \
	} while (0)

/* @r must be the error @err, its message holding @phrase (if any). */
void expect_error_at(int line, const struct dj_resp *r, int err,
		     const char *phrase);
#define expect_error(r, err, phrase) expect_error_at(__LINE__, r, err, phrase)

/* @op must fail with @err, its message holding @phrase. */
void call_err_at(int line, int fd, uint16_t op, uint64_t sid, const void *p,
		 size_t len, int err, const char *phrase);
#define call_err(...) call_err_at(__LINE__, __VA_ARGS__)

/* Send a hand-made header and @len bytes; the response must be the error
 * @err for the same request id and opcode. */
void raw_err_at(int line, int fd, const struct djinn_hdr *h, const void *p,
		size_t len, int err, const char *phrase);
#define raw_err(fd, h, p, len, err, phrase) \
	raw_err_at(__LINE__, fd, h, p, len, err, phrase)

/* The peer must close @fd within 5 s. */
void expect_eof_at(int line, int fd);
#define expect_eof(fd) expect_eof_at(__LINE__, fd)

/* A HELLO on @fd must work: the connection is usable. */
void hello_at(int line, int fd);
#define hello(fd) hello_at(__LINE__, fd)

/* ---------------------------------------------------------------------- */
/* The fixture: one daemon per test */

/*
 * struct fx - a test's daemon
 * @d:        the daemon
 * @hello:    its HELLO
 * @base:     ADMIN_VMU at the start
 * @adm:      an admin connection
 * @stopped:  the test stopped the daemon itself
 */
struct fx {
	struct djd d;
	struct djinn_hello_resp hello;
	struct djinn_admin_vmu base;
	int adm;
	bool stopped;
};

/* What differs between two VMU states that should be the same when
 * nothing leaked: a reason, or NULL. The stack's backing may stay
 * committed between graphs (seg[2]); nothing else may. */
const char *vmu_diff(const struct djinn_admin_vmu *a,
		     const struct djinn_admin_vmu *b, char *why, size_t len);

/* The daemon serves (a fresh HELLO on a new connection), holds
 * @nr_sessions sessions (unless negative), and its VMU matches @want
 * (unless NULL), within WAIT_MS: a connection's end is read, and a
 * session's memory freed with its last reference, after the answers the
 * test saw. Else fail, with the last reason. */
void check_health_at(int line, struct fx *fx, long nr_sessions,
		     const struct djinn_admin_vmu *want);
/* The daemon serves, holds @n sessions and the VMU is at its baseline. */
#define check_health(fx, n) check_health_at(__LINE__, fx, n, &(fx)->base)

/* The VMU is at its baseline but for the text segment (unreferenced text
 * may stay cached, reclaimable, which is no leak), within WAIT_MS as
 * check_health() waits. Else fail; then the baseline takes the text. */
void check_text_cached_at(int line, struct fx *fx);
#define check_text_cached(fx) check_text_cached_at(__LINE__, fx)

/*
 * cmocka set-up: a daemon with @mem of device memory, a default lease of
 * @lease_ms and the setting @set (NULL: none), its HELLO and VMU
 * recorded; the struct fx in *@state. 0, or -1 (said on stderr).
 */
int fx_start_set(void **state, const char *mem, unsigned int lease_ms,
		 const char *set);
int fx_start(void **state, const char *mem, unsigned int lease_ms);
/* The same with more arguments @extra (NULL-terminated). */
int fx_start_args(void **state, const char *mem, unsigned int lease_ms,
		  const char *const *extra);
/* The usual set-up: DEV_MEM, a lease of 10 s. */
int fx_setup(void **state);
/* The teardown described at the top. */
int fx_teardown(void **state);

/* ---------------------------------------------------------------------- */
/* Admin queries */

/* ADMIN_VMU and ADMIN_STATS now, or fail. */
struct djinn_admin_vmu vmu_now(struct fx *fx);
struct djinn_admin_stats stats_now(struct fx *fx);

/* djinnd's metrics exposition (GET /metrics), malloc'd, or fail. */
char *metrics_scrape(struct fx *fx);
/* Sample @series (a name and its labels, as printed) of exposition @m:
 * its value, or -1 when it is not there. */
int64_t metrics_value(const char *m, const char *series);

/* The sessions, malloc'd in *@list (may be NULL); returns the count. */
uint32_t sessions_now(struct fx *fx, struct djinn_admin_session **list);

/* The entry of session @id, or fail. */
struct djinn_admin_session session_entry(struct fx *fx, uint64_t id);

/* Wait (at most @ms) until the daemon holds @n sessions and the data
 * segment @data bytes; asserts it got there. Returns the ms it took. */
int64_t wait_for_at(int line, struct fx *fx, uint32_t n, uint64_t data, int ms);
#define wait_for(fx, n, data, ms) wait_for_at(__LINE__, fx, n, data, ms)

/* Wait (at most @ms) until session @sid is charged @bytes of data (its
 * destroyed regions may stay cached, uncharged, until it ends). */
void wait_charged_at(int line, struct fx *fx, uint64_t sid, uint64_t bytes,
		     int ms);
#define wait_charged(fx, sid, bytes, ms) \
	wait_charged_at(__LINE__, fx, sid, bytes, ms)

/* @bytes rounded up to the device's granule. */
uint64_t granules(const struct fx *fx, uint64_t bytes);

/* ---------------------------------------------------------------------- */
/* Sessions and tensors */

/* SESSION_OPEN for @tenant at @prio with a lease of @lease_ns (0: the
 * default); its id, its response in *@out (may be NULL). */
uint64_t open_at(int line, int fd, const char *tenant, uint32_t prio,
		 uint64_t lease_ns, struct djinn_session_resp *out);
#define open_session(fd, tenant) open_at(__LINE__, fd, tenant, 4, 0, NULL)

#define attach(fd, sid, token)                                             \
	do {                                                               \
		struct dj_resp r_;                                         \
		call_ok(fd, DJINN_MSG_SESSION_ATTACH, sid, token, 16, &r_, \
			sizeof(struct djinn_session_resp));                \
		dj_resp_free(&r_);                                         \
	} while (0)

#define close_session(fd, sid) \
	call_void(fd, DJINN_MSG_SESSION_CLOSE, sid, NULL, 0)

/* A desc of @dtype and @ndim @dims; DESC(dtype, dims...), F32(dims...). */
struct djinn_tensor_desc desc_make(uint8_t dtype, unsigned int ndim,
				   const uint64_t *dims);
#define NARGS(...) (sizeof((uint64_t[]){ __VA_ARGS__ }) / sizeof(uint64_t))
#define DESC(dtype, ...) \
	desc_make(dtype, NARGS(__VA_ARGS__), (uint64_t[]){ __VA_ARGS__ })
#define F32(...) DESC(DJINN_DTYPE_F32, __VA_ARGS__)

/* The bytes of a tensor of @d (0 for an unknown dtype). */
uint64_t desc_bytes(const struct djinn_tensor_desc *d);

/* A TENSOR_CREATE payload: the struct, then @len bytes of @data. */
uint8_t *create_payload(const struct djinn_tensor_desc *d, uint32_t seg,
			const uint8_t *fp, const void *data, size_t len,
			size_t *plen);

/* TENSOR_CREATE; the response in @r, not checked. */
void create_try_at(int line, int fd, uint64_t sid,
		   const struct djinn_tensor_desc *d, uint32_t seg,
		   const uint8_t *fp, const void *data, size_t len,
		   struct dj_resp *r);

/* TENSOR_CREATE that must succeed and echo @d: the handle. Its flags in
 * *@flags, else they must be 0. */
uint64_t create_at(int line, int fd, uint64_t sid,
		   const struct djinn_tensor_desc *d, uint32_t seg,
		   const uint8_t *fp, const void *data, size_t len,
		   uint32_t *flags);
/* A data tensor with its first @len bytes from @data. */
#define create_data(fd, sid, d, data, len) \
	create_at(__LINE__, fd, sid, d, DJINN_SEG_DATA, NULL, data, len, NULL)

/* TENSOR_READ of @len bytes at @off that must succeed, into @buf. */
void read_at(int line, int fd, uint64_t sid, uint64_t h, uint64_t off,
	     uint64_t len, void *buf);
#define tensor_read(fd, sid, h, off, len, buf) \
	read_at(__LINE__, fd, sid, h, off, len, buf)

/* A TENSOR_WRITE payload: the struct, then @len bytes of @data. */
uint8_t *write_payload(uint64_t h, uint64_t off, const void *data, uint64_t len,
		       size_t *plen);

/* TENSOR_WRITE that must succeed (@err 0) or fail with @err, its
 * message holding @phrase. */
void write_at(int line, int fd, uint64_t sid, uint64_t h, uint64_t off,
	      const void *data, uint64_t len, int err, const char *phrase);
#define tensor_write(fd, sid, h, off, data, len) \
	write_at(__LINE__, fd, sid, h, off, data, len, 0, NULL)

#define tensor_release(fd, sid, h) \
	call_void(fd, DJINN_MSG_TENSOR_RELEASE, sid, &(uint64_t){ h }, 8)

/* The SHA-256 of @len bytes of @data: a text fingerprint. */
void sha256(const void *data, size_t len, uint8_t fp[DJINN_FP_LEN]);

/* ---------------------------------------------------------------------- */
/* Graphs */

#define GB_MAX_IN 16
#define GB_MAX_NODES 32
#define GB_MAX_OUT 8

/* A graph being built: zero it, add inputs, then nodes and outputs. */
struct gb {
	uint32_t nin, nnodes, nout;
	struct djinn_ref in[GB_MAX_IN];
	struct djinn_node node[GB_MAX_NODES];
	uint32_t out[GB_MAX_OUT];
};

/* Inputs come first; each returns its value index. */
uint32_t gb_input(struct gb *g, uint64_t handle);
uint32_t gb_result(struct gb *g, uint64_t request_id, uint32_t index);

/* A node of @op on @n values; returns its value index. */
uint32_t gb_op(struct gb *g, uint16_t op, unsigned int n, ...);

/* The node that made value @v. */
struct djinn_node *gb_node(struct gb *g, uint32_t v);

/* Value @v is the graph's next output. */
void gb_output(struct gb *g, uint32_t v);

/* The GRAPH_SUBMIT payload of @g (malloc'd), its length in *@len. */
uint8_t *gb_payload(const struct gb *g, size_t *len);

/* Send @g as request @id, not waiting for the answer. */
void graph_send_at(int line, int fd, uint64_t sid, uint64_t id,
		   const struct gb *g);

/* An f32 tensor of shape @d with random values; the values in *@vals. */
uint64_t upload_rand(int fd, uint64_t sid, const struct djinn_tensor_desc *d,
		     uint64_t seed, float scale, float **vals);

/* ---------------------------------------------------------------------- */
/* Models and contexts */

/* MODEL_OPEN of @name, which must succeed: its answer. */
struct djinn_model_resp model_open_at(int line, int fd, uint64_t sid,
				      const char *name);
#define model_open(fd, sid, name) model_open_at(__LINE__, fd, sid, name)

/* The bytes of @fx's model @name's @file (malloc()ed). */
uint8_t *model_file_read(struct fx *fx, const char *name, const char *file,
			 size_t *len);

/* A text tensor (U8, one dim) of @len bytes at @data, by SHA-256 (in
 * @fp): looked up first (-ENOENT the first time), then created. */
uint64_t text_file_at(int line, int fd, uint64_t sid, const uint8_t *data,
		      size_t len, uint8_t *fp);
#define text_file(fd, sid, data, len, fp) \
	text_file_at(__LINE__, fd, sid, data, len, fp)

/* MODEL_OPEN_UPLOADED of config @cfg and one file @w (handles 0: by
 * fingerprint); 0 and the answer in @m, or the error (@phrase in its
 * message). */
int upload_open_at(int line, int fd, uint64_t sid,
		   const struct djinn_model_file *cfg,
		   const struct djinn_model_file *w, struct djinn_model_resp *m,
		   int err, const char *phrase);
#define upload_open(fd, sid, cfg, w, m, err, phrase) \
	upload_open_at(__LINE__, fd, sid, cfg, w, m, err, phrase)

/* CTX_NEW of @max tokens (0: the model's) on @model: the context. */
uint64_t ctx_new_at(int line, int fd, uint64_t sid, uint64_t model,
		    uint32_t max);
#define ctx_new(fd, sid, model, max) ctx_new_at(__LINE__, fd, sid, model, max)

/* A PREFILL (@in, @n) or DECODE (@n) with breakpoint @brk (0: none):
 * the answer, whatever its state, its tokens into @out. */
struct djinn_ctx_step_resp
brk_step_at(int line, int fd, uint64_t sid, uint16_t op, uint64_t ctx,
	    const int32_t *in, uint32_t n, uint32_t brk, uint32_t flags,
	    const struct djinn_sampling *sp, int32_t *out);
/* CTX_RESUME of @ctx, with hidden state tensor @hidden (0: as paused):
 * the answer, whatever its state, its tokens into @out. */
struct djinn_ctx_step_resp resume_at(int line, int fd, uint64_t sid,
				     uint64_t ctx, uint64_t hidden,
				     int32_t *out);
#define resume(fd, sid, ctx, hidden, out) \
	resume_at(__LINE__, fd, sid, ctx, hidden, out)

/* PREFILL @n tokens or DECODE @n (tokens into @out), which must end
 * done: the response. */
struct djinn_ctx_step_resp step_at(int line, int fd, uint64_t sid, uint16_t op,
				   uint64_t ctx, const int32_t *in, uint32_t n,
				   const struct djinn_sampling *sp,
				   uint32_t flags, int32_t *out);
#define prefill(fd, sid, ctx, in, n, flags)                                 \
	step_at(__LINE__, fd, sid, DJINN_MSG_CTX_PREFILL, ctx, in, n, NULL, \
		flags, NULL)
#define decode(fd, sid, ctx, n, sp, out)                                      \
	step_at(__LINE__, fd, sid, DJINN_MSG_CTX_DECODE, ctx, NULL, n, sp, 0, \
		out)

/* A tiny GPT-2 for djd_make_model(): 2 layers, 64 wide, 256 tokens. */
#define TINY_GPT2                                                 \
	"--arch gpt2 --layers 2 --embd 64 --heads 4 --vocab 256 " \
	"--ctx 64 --seed 3"

#endif /* DJINN_TEST_FIXTURE_H */
