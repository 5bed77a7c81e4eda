// SPDX-License-Identifier: MIT
/*
 * The state record a restart hands over (djinnd/svc/state.h): written
 * and read back entry for entry, and refused whole, with the reason,
 * when it is of another version or does not hold together.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "svc/state.h"
#include "vmu/vmu.h"

/* A record of one session with two tensors and one connection. */
static void write_one(int *rec, int *data, uint64_t *data_off)
{
	struct state_out o;
	struct djinn_state_session *s;
	struct djinn_state_tensor *t;
	struct djinn_state_conn *c;
	struct djinn_state_result *res;
	struct djinn_state_pause *z;
	struct djinn_state_upload *u;
	uint64_t at;
	uint8_t *p;

	assert_int_equal(state_out_begin(&o, 2 * 4096), 0);
	s = state_out_ent(&o, DJINN_STATE_SESSION, sizeof(*s) + 3 * 4);
	assert_non_null(s);
	s->id = 7;
	strcpy(s->tenant, "alice");
	strcpy(s->label, "job");
	s->lease_ns = s->lease_left_ns = 1000000000;
	s->nr_slots = 3;
	((uint32_t *)(s + 1))[0] = 1;
	((uint32_t *)(s + 1))[1] = 5;
	((uint32_t *)(s + 1))[2] = 2;
	for (uint32_t k = 0; k < 2; k++) {
		t = state_out_ent(&o, DJINN_STATE_TENSOR, sizeof(*t));
		assert_non_null(t);
		t->slot = k * 2;
		t->kind = DJINN_STATE_DATA;
		t->bytes = 100 + k;
		t->desc.dtype = DJINN_DTYPE_U8;
		t->desc.ndim = 1;
		t->desc.dims[0] = t->bytes;
		p = state_out_data(&o, t->bytes, &at);
		assert_non_null(p);
		t->data_off = at;
		memset(p, 'a' + (int)k, t->bytes);
		data_off[k] = t->data_off;
	}
	/* past the size it was begun with */
	assert_null(state_out_data(&o, 4096, &(uint64_t){ 0 }));
	o.err = 0;
	/* a paused decode of 3 tokens, 1 done: its tokens follow */
	z = state_out_ent(&o, DJINN_STATE_PAUSE, sizeof(*z) + 3 * 4);
	assert_non_null(z);
	z->decode = 1;
	z->want = 3;
	z->done = 1;
	/* a graph's record: one output, its desc and handle */
	res = state_out_ent(&o, DJINN_STATE_RESULT,
			    sizeof(*res) + sizeof(struct djinn_tensor_desc) +
				    8);
	assert_non_null(res);
	res->request_id = 99;
	res->nr = 1;
	res->done = 1;
	c = state_out_ent(&o, DJINN_STATE_CONN, sizeof(*c) + 8 + 5);
	assert_non_null(c);
	c->index = 0;
	c->nr_sessions = 1;
	c->backlog = 5;
	memcpy(c + 1, &(uint64_t){ 7 }, 8);
	memcpy((uint8_t *)(c + 1) + 8, "hello", 5);
	/* an uploaded model, its weights in place, its config.json after */
	u = state_out_ent(&o, DJINN_STATE_UPLOAD, sizeof(*u) + 2);
	assert_non_null(u);
	strcpy(u->owner, "alice");
	u->config_len = 2;
	u->bytes = 4096;
	u->data_off = DJINN_STATE_IN_POOL;
	memcpy(u + 1, "{}", 2);
	assert_int_equal(state_out_end(&o, rec, data), 0);
}

static void test_round_trip(void **state)
{
	struct state_in in;
	const void *p;
	uint32_t type, len, n = 0;
	uint64_t off[2];
	char msg[256];
	int rec, data;

	(void)state;
	write_one(&rec, &data, off);
	assert_int_equal(state_in_open(&in, rec, data, msg, sizeof(msg)), 0);
	assert_int_equal(in.hdr->version, DJINN_STATE_VERSION);
	assert_int_equal(in.hdr->nr_sessions, 1);
	assert_int_equal(in.hdr->nr_tensors, 2);
	assert_int_equal(in.hdr->nr_conns, 1);
	assert_int_equal(in.hdr->pid, getpid());
	while ((p = state_in_next(&in, &type, &len))) {
		if (type == DJINN_STATE_SESSION) {
			const struct djinn_state_session *s = p;

			assert_int_equal(s->id, 7);
			assert_string_equal(s->tenant, "alice");
			assert_int_equal(((const uint32_t *)(s + 1))[1], 5);
		} else if (type == DJINN_STATE_TENSOR) {
			const struct djinn_state_tensor *t = p;

			assert_int_equal(t->data_off, off[t->slot / 2]);
			for (uint64_t i = 0; i < t->bytes; i++)
				assert_int_equal(in.data[t->data_off + i],
						 'a' + t->slot / 2);
		} else if (type == DJINN_STATE_PAUSE) {
			assert_int_equal(
				((const struct djinn_state_pause *)p)->want, 3);
		} else if (type == DJINN_STATE_RESULT) {
			assert_int_equal(((const struct djinn_state_result *)p)
						 ->request_id,
					 99);
		} else if (type == DJINN_STATE_UPLOAD) {
			const struct djinn_state_upload *u = p;

			assert_string_equal(u->owner, "alice");
			assert_memory_equal(u + 1, "{}", 2);
		} else {
			const struct djinn_state_conn *c = p;

			assert_int_equal(type, DJINN_STATE_CONN);
			assert_memory_equal((const uint8_t *)(c + 1) + 8,
					    "hello", 5);
		}
		n++;
	}
	assert_int_equal(n, 7);
	/* sealed: the next djinnd reads what was written */
	assert_int_equal(ftruncate(rec, 16), -1);
	state_in_close(&in);
	close(rec);
	close(data);
}

/* A copy of the record @rec, changed by @edit, in a memfd of its own,
 * sealed as djinnd seals one (unless @edit is NULL: then unsealed). */
static int edited(int rec, void (*edit)(uint8_t *p, size_t *len))
{
	uint8_t buf[4096];
	ssize_t n = pread(rec, buf, sizeof(buf), 0);
	size_t len;
	int fd = memfd_create("edited", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	assert_true(n > 0 && fd >= 0);
	len = (size_t)n;
	if (edit)
		edit(buf, &len);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	if (edit)
		assert_int_equal(fcntl(fd, F_ADD_SEALS,
				       F_SEAL_SHRINK | F_SEAL_GROW |
					       F_SEAL_WRITE),
				 0);
	return fd;
}

static void newer(uint8_t *p, size_t *len)
{
	((struct djinn_state_hdr *)p)->version = DJINN_STATE_VERSION + 1;
}

static void older(uint8_t *p, size_t *len)
{
	((struct djinn_state_hdr *)p)->version = DJINN_STATE_VERSION_MIN - 1;
}

static void version_1(uint8_t *p, size_t *len)
{
	((struct djinn_state_hdr *)p)->version = 1;
}

static void bad_magic(uint8_t *p, size_t *len)
{
	p[0] ^= 1;
}

static void truncated(uint8_t *p, size_t *len)
{
	*len -= 8;
}

/* The first entry (the session's) claims more than the record holds. */
static void long_entry(uint8_t *p, size_t *len)
{
	struct djinn_state_ent *e =
		(void *)(p + sizeof(struct djinn_state_hdr));

	e->len = 1u << 20;
}

/* The payload of the first entry of @type in record @p (there is one). */
static void *ent_of(uint8_t *p, uint32_t type)
{
	uint8_t *q = p + sizeof(struct djinn_state_hdr);

	for (;;) {
		struct djinn_state_ent *e = (void *)q;

		if (e->type == type)
			return e + 1;
		q += sizeof(*e) + ((e->len + 7) & ~7u);
	}
}

/* The first tensor's bytes lie past the data. */
static void data_past(uint8_t *p, size_t *len)
{
	((struct djinn_state_tensor *)ent_of(p, DJINN_STATE_TENSOR))->data_off =
		1ull << 40;
}

/* A paused decode with all its tokens done: not paused, refused. */
static void pause_done(uint8_t *p, size_t *len)
{
	((struct djinn_state_pause *)ent_of(p, DJINN_STATE_PAUSE))->done = 3;
}

/* A graph's record of one still running: never written, refused. */
static void result_running(uint8_t *p, size_t *len)
{
	((struct djinn_state_result *)ent_of(p, DJINN_STATE_RESULT))->done = 0;
}

/* A tensor whose shape does not fill its bytes. */
static void shape_short(uint8_t *p, size_t *len)
{
	((struct djinn_state_tensor *)ent_of(p, DJINN_STATE_TENSOR))
		->desc.dims[0]--;
}

/* A connection whose sessions and backlog do not add up to its length. */
static void conn_short(uint8_t *p, size_t *len)
{
	((struct djinn_state_conn *)ent_of(p, DJINN_STATE_CONN))->backlog = 6;
}

/* A lost tensor names no bytes: with some, refused; with none, taken
 * whatever its size (its bytes are not in the record). */
static void lost_data(uint8_t *p, size_t *len)
{
	struct djinn_state_tensor *t = ent_of(p, DJINN_STATE_TENSOR);

	t->lost = 1;
	t->data_off = 4096;
}

static void lost_none(uint8_t *p, size_t *len)
{
	struct djinn_state_tensor *t = ent_of(p, DJINN_STATE_TENSOR);

	t->lost = 1;
	t->data_off = 0;
	t->bytes = t->desc.dims[0] = 1ull << 20;
}

/* An upload whose config.json runs past its entry. */
static void upload_config(uint8_t *p, size_t *len)
{
	((struct djinn_state_upload *)ent_of(p, DJINN_STATE_UPLOAD))
		->config_len = 3;
}

/* An upload whose weights, copied, lie past the data (two pages). */
static void upload_past(uint8_t *p, size_t *len)
{
	((struct djinn_state_upload *)ent_of(p, DJINN_STATE_UPLOAD))->data_off =
		8192;
}

static void unknown_type(uint8_t *p, size_t *len)
{
	((struct djinn_state_ent *)(p + sizeof(struct djinn_state_hdr)))->type =
		99;
}

static void test_refused(void **state)
{
	static const struct {
		void (*edit)(uint8_t *p, size_t *len);
		int err;
		const char *phrase;
	} cases[] = {
		{ newer, -EPROTONOSUPPORT,
		  "state record version 7: this djinnd reads versions 1 to "
		  "6" },
		{ older, -EPROTONOSUPPORT,
		  "state record version 0: this djinnd reads versions 1 to "
		  "6" },
		{ bad_magic, -EBADMSG, "not a djinnd state record" },
		{ truncated, -EBADMSG, "its header says" },
		{ long_entry, -EBADMSG, "entry 0 runs past the record" },
		{ data_past, -EBADMSG,
		  "type 2 does not hold together (entry 1)" },
		{ shape_short, -EBADMSG,
		  "type 2 does not hold together (entry 1)" },
		{ pause_done, -EBADMSG,
		  "type 6 does not hold together (entry 3)" },
		{ result_running, -EBADMSG,
		  "type 5 does not hold together (entry 4)" },
		{ conn_short, -EBADMSG,
		  "type 3 does not hold together (entry 5)" },
		{ lost_data, -EBADMSG,
		  "type 2 does not hold together (entry 1)" },
		{ upload_config, -EBADMSG,
		  "type 10 does not hold together (entry 6)" },
		{ upload_past, -EBADMSG,
		  "type 10 does not hold together (entry 6)" },
		{ unknown_type, -EBADMSG, "unknown type 99 (entry 0)" },
	};
	uint64_t off[2];
	int rec, data;

	(void)state;
	write_one(&rec, &data, off);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct state_in in;
		char msg[256] = "";
		int fd = edited(rec, cases[i].edit);

		assert_int_equal(state_in_open(&in, fd, data, msg, sizeof(msg)),
				 cases[i].err);
		if (!strstr(msg, cases[i].phrase))
			fail_msg("case %zu: \"%s\" lacks \"%s\"", i, msg,
				 cases[i].phrase);
		close(fd);
	}
	/* a lost tensor of any size */
	{
		struct state_in in;
		char msg[256] = "";
		int fd = edited(rec, lost_none);

		assert_int_equal(state_in_open(&in, fd, data, msg, sizeof(msg)),
				 0);
		state_in_close(&in);
		close(fd);
	}
	/* a record of version 1 (no pools: its entries are this one's) */
	{
		struct state_in in;
		char msg[256] = "";
		int fd = edited(rec, version_1);

		assert_int_equal(state_in_open(&in, fd, data, msg, sizeof(msg)),
				 0);
		assert_int_equal(in.hdr->version, 1);
		state_in_close(&in);
		close(fd);
	}
	/* unsealed: what was checked could change under the restore */
	{
		struct state_in in;
		char msg[256] = "";
		int fd = edited(rec, NULL);

		assert_int_equal(state_in_open(&in, fd, data, msg, sizeof(msg)),
				 -EPERM);
		assert_non_null(strstr(msg, "not sealed"));
		close(fd);
	}
	close(rec);
	close(data);
}

/* The record @rec changed by @edit is refused -EBADMSG with @phrase in
 * its message (case @i). */
static void expect_refused(int rec, int data,
			   void (*edit)(uint8_t *p, size_t *len),
			   const char *phrase, size_t i)
{
	struct state_in in;
	char msg[256] = "";
	int fd = edited(rec, edit);

	assert_int_equal(state_in_open(&in, fd, data, msg, sizeof(msg)),
			 -EBADMSG);
	if (!strstr(msg, phrase))
		fail_msg("case %zu: \"%s\" lacks \"%s\"", i, msg, phrase);
	close(fd);
}

/*
 * A record whose data is in place in a device's pool: a POOL entry
 * (granule 4 KiB, 64 KiB, two pieces in use), a session, and a data
 * tensor of 10000 bytes whose pieces (12 KiB) a PIECES entry names, and
 * a text index entry in the same pieces.
 */
static void write_pooled(int *rec, int *data)
{
	static const struct vmu_piece used[2] = { { 0, 8192 },
						  { 16384, 4096 } };
	struct state_out o;
	struct djinn_state_pool *pool;
	struct djinn_state_session *s;
	struct djinn_state_tensor *t;
	struct djinn_state_text *x;
	uint64_t off;

	assert_int_equal(state_out_begin(&o, 0), 0);
	pool = state_out_ent(&o, DJINN_STATE_POOL,
			     sizeof(*pool) + sizeof(used));
	assert_non_null(pool);
	pool->device = 0;
	pool->nr = 2;
	pool->granularity = 4096;
	pool->size = 65536;
	memcpy(pool + 1, used, sizeof(used));
	s = state_out_ent(&o, DJINN_STATE_SESSION, sizeof(*s) + 4);
	assert_non_null(s);
	s->id = 1;
	s->nr_slots = 1;
	assert_int_equal(state_out_pieces(&o, 0, used, 2, &off), 0);
	assert_int_equal(off, DJINN_STATE_IN_POOL | 0);
	t = state_out_ent(&o, DJINN_STATE_TENSOR, sizeof(*t));
	assert_non_null(t);
	t->kind = DJINN_STATE_DATA;
	t->bytes = 10000;
	t->desc.dtype = DJINN_DTYPE_U8;
	t->desc.ndim = 1;
	t->desc.dims[0] = t->bytes;
	t->data_off = off;
	x = state_out_ent(&o, DJINN_STATE_TEXT_ENTRY, sizeof(*x));
	assert_non_null(x);
	x->size = 100;
	x->data_off = off;
	assert_int_equal(state_out_end(&o, rec, data), 0);
}

static void piece_past(uint8_t *p, size_t *len)
{
	struct djinn_state_pieces *e = ent_of(p, DJINN_STATE_PIECES);

	((struct djinn_state_piece *)(e + 1))[1].off = 65536;
}

static void piece_odd(uint8_t *p, size_t *len)
{
	struct djinn_state_pieces *e = ent_of(p, DJINN_STATE_PIECES);

	((struct djinn_state_piece *)(e + 1))[0].len = 100;
}

static void pieces_no_pool(uint8_t *p, size_t *len)
{
	((struct djinn_state_pieces *)ent_of(p, DJINN_STATE_PIECES))->device =
		3;
}

static void pool_granule(uint8_t *p, size_t *len)
{
	((struct djinn_state_pool *)ent_of(p, DJINN_STATE_POOL))->granularity =
		3000;
}

static void pieces_index(uint8_t *p, size_t *len)
{
	((struct djinn_state_tensor *)ent_of(p, DJINN_STATE_TENSOR))->data_off =
		DJINN_STATE_IN_POOL | 1;
}

static void pieces_short(uint8_t *p, size_t *len)
{
	struct djinn_state_tensor *t = ent_of(p, DJINN_STATE_TENSOR);

	t->bytes = t->desc.dims[0] = 12289;
}

/* A text index entry is in place, or not in the record. */
static void text_copied(uint8_t *p, size_t *len)
{
	((struct djinn_state_text *)ent_of(p, DJINN_STATE_TEXT_ENTRY))
		->data_off = 0;
}

/* The record again, with a second POOL entry for device 0 at its end. */
static void two_pools(uint8_t *p, size_t *len)
{
	struct djinn_state_hdr *h = (void *)p;
	struct djinn_state_ent *e = (void *)(p + *len);
	struct djinn_state_pool *pool = (void *)(e + 1);

	memset(e, 0, sizeof(*e) + sizeof(*pool));
	e->type = DJINN_STATE_POOL;
	e->len = sizeof(*pool);
	pool->granularity = 4096;
	pool->size = 4096;
	*len += sizeof(*e) + sizeof(*pool);
	h->size = *len;
}

static void test_pool(void **state)
{
	static const struct {
		void (*edit)(uint8_t *p, size_t *len);
		const char *phrase;
	} cases[] = {
		{ piece_past, "type 8 does not hold together (entry 2)" },
		{ piece_odd, "type 8 does not hold together (entry 2)" },
		{ pieces_no_pool, "type 8 does not hold together (entry 2)" },
		{ pool_granule, "type 7 does not hold together (entry 0)" },
		{ pieces_index, "type 2 does not hold together (entry 3)" },
		{ pieces_short, "type 2 does not hold together (entry 3)" },
		{ text_copied, "type 9 does not hold together (entry 4)" },
		{ two_pools, "device 0 has two pools" },
	};
	const struct djinn_state_tensor *t = NULL;
	struct state_in in;
	struct vmu_fill f;
	const void *p;
	uint32_t type, len;
	char msg[256] = "";
	int rec, data;

	(void)state;
	write_pooled(&rec, &data);
	assert_int_equal(state_in_open(&in, rec, data, msg, sizeof(msg)), 0);
	assert_int_equal(in.nr_pools, 1);
	assert_int_equal(in.nr_pieces, 1);
	assert_non_null(state_in_pool(&in, 0));
	assert_null(state_in_pool(&in, 1));
	assert_int_equal(state_in_pool(&in, 0)->nr, 2);
	while ((p = state_in_next(&in, &type, &len)))
		if (type == DJINN_STATE_TENSOR)
			t = p;
	assert_non_null(t);
	assert_int_equal(state_in_fill(&in, t->data_off, 0, &f), 0);
	assert_null(f.bytes);
	assert_int_equal(f.nr_pieces, 2);
	assert_int_equal(f.pieces[1].off, 16384);
	/* pieces of device 0's pool do not fill device 1's regions */
	assert_int_equal(state_in_fill(&in, t->data_off, 1, &f), -EBADMSG);
	state_in_close(&in);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_refused(rec, data, cases[i].edit, cases[i].phrase, i);
	close(rec);
	close(data);
}

/*
 * A swapped-out tensor whose host copy lies in device 0's swap arena:
 * a POOL entry for the pool and one for the arena (DJINN_STATE_SWAP_ARENA),
 * the arena's piece, and the tensor naming it IN_POOL | SWAPPED; a data
 * tensor in the pool beside it.
 */
static void write_arena(int *rec, int *data, bool pieces_first)
{
	static const struct vmu_piece used = { 0, 8192 };
	struct djinn_state_pool *pool;
	struct djinn_state_session *s;
	struct djinn_state_tensor *t;
	struct state_out o;
	uint64_t arena_off, pool_off;

	assert_int_equal(state_out_begin(&o, 0), 0);
	if (pieces_first) /* a PIECES entry before the POOL it names */
		assert_int_equal(state_out_pieces(&o, 0, &used, 1, &pool_off),
				 0);
	for (int k = 0; k < 2; k++) {
		pool = state_out_ent(&o, DJINN_STATE_POOL,
				     sizeof(*pool) + sizeof(used));
		assert_non_null(pool);
		pool->device = k ? DJINN_STATE_SWAP_ARENA : 0;
		pool->nr = 1;
		/* the pool's broken when its pieces come first */
		pool->granularity = pieces_first && !k ? 0 : 4096;
		pool->size = 65536;
		memcpy(pool + 1, &used, sizeof(used));
	}
	s = state_out_ent(&o, DJINN_STATE_SESSION, sizeof(*s) + 2 * 4);
	assert_non_null(s);
	s->id = 1;
	s->nr_slots = 2;
	if (!pieces_first)
		assert_int_equal(state_out_pieces(&o, 0, &used, 1, &pool_off),
				 0);
	assert_int_equal(state_out_pieces(&o, DJINN_STATE_SWAP_ARENA, &used, 1,
					  &arena_off),
			 0);
	for (int k = 0; k < 2; k++) {
		t = state_out_ent(&o, DJINN_STATE_TENSOR, sizeof(*t));
		assert_non_null(t);
		t->slot = (uint32_t)k;
		t->kind = DJINN_STATE_DATA;
		t->bytes = 5000;
		t->desc.dtype = DJINN_DTYPE_U8;
		t->desc.ndim = 1;
		t->desc.dims[0] = t->bytes;
		t->data_off = k ? arena_off | DJINN_STATE_SWAPPED : pool_off;
	}
	assert_int_equal(state_out_end(&o, rec, data), 0);
}

/* The Nth tensor entry (from 0) of record @p. */
static struct djinn_state_tensor *tensor_n(uint8_t *p, int n)
{
	uint8_t *q = p + sizeof(struct djinn_state_hdr);

	for (;;) {
		struct djinn_state_ent *e = (void *)q;

		if (e->type == DJINN_STATE_TENSOR && !n--)
			return (void *)(e + 1);
		q += sizeof(*e) + ((e->len + 7) & ~7u);
	}
}

/* The arena's piece named without SWAPPED: refused */
static void arena_unswapped(uint8_t *p, size_t *len)
{
	tensor_n(p, 1)->data_off &= ~DJINN_STATE_SWAPPED;
}

/* The pool's piece named as a swapped region's: refused */
static void pool_swapped(uint8_t *p, size_t *len)
{
	tensor_n(p, 0)->data_off |= DJINN_STATE_SWAPPED;
}

static void test_arena(void **state)
{
	static const struct {
		void (*edit)(uint8_t *p, size_t *len);
		const char *phrase;
	} cases[] = {
		{ arena_unswapped, "type 2 does not hold together (entry 6)" },
		{ pool_swapped, "type 2 does not hold together (entry 5)" },
	};
	struct state_in in;
	struct vmu_fill f;
	char msg[256] = "";
	int rec, data;

	(void)state;
	write_arena(&rec, &data, false);
	assert_int_equal(state_in_open(&in, rec, data, msg, sizeof(msg)), 0);
	assert_non_null(state_in_pool(&in, DJINN_STATE_SWAP_ARENA));
	assert_int_equal(state_in_fill(&in,
				       tensor_n((uint8_t *)in.rec, 1)->data_off,
				       0, &f),
			 0);
	assert_true(f.swapped);
	assert_int_equal(f.nr_pieces, 1);
	/* another device's arena is not this one's */
	assert_int_equal(state_in_fill(&in,
				       tensor_n((uint8_t *)in.rec, 1)->data_off,
				       1, &f),
			 -EBADMSG);
	state_in_close(&in);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_refused(rec, data, cases[i].edit, cases[i].phrase, i);
	close(rec);
	close(data);
	/* pieces before a pool whose granule is 0: the pool is checked
	 * first, and refused (no division by it) */
	write_arena(&rec, &data, true);
	assert_int_equal(state_in_open(&in, rec, data, msg, sizeof(msg)),
			 -EBADMSG);
	assert_non_null(strstr(msg, "type 7 does not hold together (entry 1)"));
	close(rec);
	close(data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_pool),
		cmocka_unit_test(test_arena),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
