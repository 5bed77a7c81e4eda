// SPDX-License-Identifier: MIT
/*
 * The state record (svc/state.h): the memfds, the checks, and the
 * sessions and tensors a restart keeps.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "device.h"
#include "graph.h"
#include "log.h"
#include "session/session.h"
#include "model/runtime.h"
#include "svc/model.h"
#include "svc/state.h"
#include "vmu/vmu.h"

#define ALIGN8(x) (((x) + 7) & ~(uint64_t)7)

/* a record's pieces are the provider's, as they are */
_Static_assert(sizeof(struct djinn_state_piece) == sizeof(struct vmu_piece) &&
		       offsetof(struct djinn_state_piece, len) ==
			       offsetof(struct vmu_piece, len),
	       "struct djinn_state_piece is struct vmu_piece");
/* Data in state-data starts on a page: copies into it run at speed. */
#define DATA_ALIGN 4096u

/* @n rounded up to DATA_ALIGN: where the next data goes, or what it
 * takes. */
static uint64_t pages(uint64_t n)
{
	return (n + DATA_ALIGN - 1) & ~(uint64_t)(DATA_ALIGN - 1);
}

/* ---------------------------------------------------------------------- */
/* Writing */

_Static_assert(LOST_DEVICE == DJINN_STATE_LOST_DEVICE &&
		       LOST_CRASH == DJINN_STATE_LOST_CRASH,
	       "enum lost_why is the record's");

int state_out_begin_journal(struct state_out *o)
{
	memset(o, 0, sizeof(*o));
	o->data_fd = -1;
	o->journal = true;
	o->len = sizeof(struct djinn_state_hdr);
	o->cap = 64 << 10;
	o->rec = calloc(1, o->cap);
	return o->rec ? 0 : -ENOMEM;
}

/* The header, now that every entry is in. */
static void hdr_finish(struct state_out *o)
{
	struct djinn_state_hdr *h = (struct djinn_state_hdr *)o->rec;
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	*h = o->hdr;
	h->magic = DJINN_STATE_MAGIC;
	h->version = DJINN_STATE_VERSION;
	h->hdr_size = sizeof(*h);
	h->size = o->len;
	h->data_size = o->data_size;
	h->written_ns =
		(uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	h->pid = (uint32_t)getpid();
}

int state_out_record(struct state_out *o, const uint8_t **rec, size_t *len)
{
	if (o->err)
		return o->err;
	hdr_finish(o);
	*rec = o->rec;
	*len = o->len;
	return 0;
}

int state_out_begin(struct state_out *o, uint64_t data_size)
{
	memset(o, 0, sizeof(*o));
	o->data_fd = memfd_create("djinn-state-data",
				  MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (o->data_fd < 0)
		return -errno;
	o->data_size = data_size;
	if (data_size &&
	    (ftruncate(o->data_fd, (off_t)data_size) ||
	     (o->data = mmap(NULL, data_size, PROT_READ | PROT_WRITE,
			     MAP_SHARED, o->data_fd, 0)) == MAP_FAILED)) {
		int ret = -errno;

		close(o->data_fd);
		o->data = NULL;
		return ret;
	}
	o->len = sizeof(struct djinn_state_hdr);
	o->cap = 64 << 10;
	o->rec = calloc(1, o->cap);
	if (!o->rec) {
		state_out_abort(o);
		return -ENOMEM;
	}
	return 0;
}

void *state_out_ent(struct state_out *o, uint32_t type, uint32_t len)
{
	uint64_t need = o->len + sizeof(struct djinn_state_ent) + ALIGN8(len);
	struct djinn_state_ent *e;

	if (o->err)
		return NULL;
	if (need > o->cap) {
		size_t cap = o->cap;
		uint8_t *r;

		while (cap < need)
			cap *= 2;
		r = realloc(o->rec, cap);
		if (!r) {
			o->err = -ENOMEM;
			return NULL;
		}
		memset(r + o->cap, 0, cap - o->cap);
		o->rec = r;
		o->cap = cap;
	}
	e = (struct djinn_state_ent *)(o->rec + o->len);
	e->type = type;
	e->len = len;
	o->len = need;
	o->hdr.nr_sessions += type == DJINN_STATE_SESSION;
	o->hdr.nr_tensors += type == DJINN_STATE_TENSOR;
	o->hdr.nr_conns += type == DJINN_STATE_CONN;
	o->hdr.nr_objs += type == DJINN_STATE_OBJ;
	return e + 1;
}

void *state_out_data(struct state_out *o, uint64_t len, uint64_t *off)
{
	uint64_t at = pages(o->data_len);

	if (at > o->data_size || len > o->data_size - at) {
		o->err = o->err ? o->err : -EOVERFLOW;
		return NULL;
	}
	o->data_len = at + len;
	*off = at;
	return o->data + at;
}

int state_out_write(struct state_out *o, const void *src, uint64_t len,
		    uint64_t *off)
{
	uint64_t at = pages(o->data_len);

	if (o->err)
		return o->err;
	if (at > o->data_size || len > o->data_size - at) {
		o->err = -EOVERFLOW;
		return o->err;
	}
	for (uint64_t done = 0; done < len;) {
		size_t n = len - done < (1u << 30) ? (size_t)(len - done) :
						     (1u << 30);
		ssize_t w = pwrite(o->data_fd, (const uint8_t *)src + done, n,
				   (off_t)(at + done));

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			o->err = w < 0 ? -errno : -EIO;
			return o->err;
		}
		done += (uint64_t)w;
	}
	o->data_len = at + len;
	*off = at;
	return 0;
}

int state_out_pieces(struct state_out *o, uint32_t device,
		     const struct vmu_piece *p, unsigned int nr, uint64_t *off)
{
	struct djinn_state_pieces *e;
	uint64_t len = sizeof(*e) + (uint64_t)nr * sizeof(struct vmu_piece);

	if (o->err)
		return o->err;
	if (len > UINT32_MAX)
		return o->err = -E2BIG;
	e = state_out_ent(o, DJINN_STATE_PIECES, (uint32_t)len);
	if (!e)
		return o->err = -ENOMEM;
	e->device = device;
	e->nr = nr;
	memcpy(e + 1, p, (size_t)nr * sizeof(*p));
	*off = DJINN_STATE_IN_POOL | o->nr_pieces++;
	return 0;
}

int state_out_end(struct state_out *o, int *rec_fd, int *data_fd)
{
	int fd, ret = o->err;

	if (ret)
		goto fail;
	hdr_finish(o);
	fd = memfd_create("djinn-state", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		ret = -errno;
		goto fail;
	}
	for (size_t done = 0; done < o->len;) {
		ssize_t n = write(fd, o->rec + done, o->len - done);

		if (n < 0) {
			ret = -errno;
			close(fd);
			goto fail;
		}
		done += (size_t)n;
	}
	/* what the next djinnd maps cannot change under it */
	fcntl(fd, F_ADD_SEALS,
	      F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
	if (o->data)
		munmap(o->data, o->data_size);
	o->data = NULL;
	fcntl(o->data_fd, F_ADD_SEALS,
	      F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
	*rec_fd = fd;
	*data_fd = o->data_fd;
	o->data_fd = -1;
	free(o->rec);
	o->rec = NULL;
	return 0;
fail:
	state_out_abort(o);
	return ret;
}

void state_out_abort(struct state_out *o)
{
	if (o->data)
		munmap(o->data, o->data_size);
	if (o->data_fd >= 0)
		close(o->data_fd);
	free(o->rec);
	memset(o, 0, sizeof(*o));
	o->data_fd = -1;
}

/* ---------------------------------------------------------------------- */
/* Reading */

/* The seals a record's memfds must have: nothing checked may change. */
#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE)

/* @fd mapped read-only, its size in *@size: NULL with *@err and why in
 * @msg (about @what) if it cannot be, or is not sealed. */
static const void *map_fd(int fd, const char *what, uint64_t *size, int *err,
			  char *msg, size_t msglen)
{
	int seals = fcntl(fd, F_GET_SEALS);
	struct stat st;
	void *p;

	if (seals < 0 || (seals & SEALS) != SEALS) {
		*err = -EPERM;
		snprintf(msg, msglen, "%s: its memfd is not sealed", what);
		return NULL;
	}
	if (fstat(fd, &st)) {
		*err = -errno;
		snprintf(msg, msglen, "%s: %s", what, strerror(errno));
		return NULL;
	}
	*size = (uint64_t)st.st_size;
	if (!st.st_size)
		return "";
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		*err = -errno;
		snprintf(msg, msglen, "%s: %s", what, strerror(errno));
		return NULL;
	}
	return p;
}

/* The bytes PIECES entry @e names. */
static uint64_t pieces_bytes(const struct djinn_state_pieces *e)
{
	const struct djinn_state_piece *pc = (const void *)(e + 1);
	uint64_t n = 0;

	for (uint32_t i = 0; i < e->nr; i++)
		n += pc[i].len;
	return n;
}

/* Whether @bytes at record offset @off are there: in state-data, or in
 * the pieces it names; the flags not in @allow (DJINN_STATE_IN_POOL,
 * DJINN_STATE_SWAPPED) refused. */
static bool data_ok(const struct state_in *in, uint64_t off, uint64_t bytes,
		    uint64_t allow)
{
	if (off & ~allow & (DJINN_STATE_IN_POOL | DJINN_STATE_SWAPPED))
		return false;
	if (off & DJINN_STATE_IN_POOL) {
		uint64_t i = off & ~(DJINN_STATE_IN_POOL | DJINN_STATE_SWAPPED);
		bool arena;

		if (i >= in->nr_pieces || pieces_bytes(in->pieces[i]) < bytes)
			return false;
		/* a piece of a swap arena holds one swapped region, whole
		 * in one piece; a pool's, anything else */
		arena = in->pieces[i]->device & DJINN_STATE_SWAP_ARENA;
		return arena == !!(off & DJINN_STATE_SWAPPED) &&
		       (!arena || in->pieces[i]->nr == 1);
	}
	off &= ~DJINN_STATE_SWAPPED;
	return off <= in->data_size && bytes <= in->data_size - off;
}

/* What a region's bytes may be: in place, or swapped out */
#define REGION (DJINN_STATE_IN_POOL | DJINN_STATE_SWAPPED)

/* Whether the @nr pieces at @pc lie on @pool's granules, inside it. */
static bool pieces_ok(const struct djinn_state_pool *pool,
		      const struct djinn_state_piece *pc, uint32_t nr)
{
	for (uint32_t i = 0; i < nr; i++)
		if (!pc[i].len || pc[i].off % pool->granularity ||
		    pc[i].len % pool->granularity || pc[i].off > pool->size ||
		    pc[i].len > pool->size - pc[i].off)
			return false;
	return true;
}

/* A POOL or PIECES entry: whether it holds together (pieces after the
 * pools: all of them are known by then). */
static bool pool_ent_ok(const struct state_in *in, uint32_t type, const void *p,
			uint32_t len)
{
	const struct djinn_state_pool *pool = p;
	const struct djinn_state_pieces *pcs = p;

	if (type == DJINN_STATE_POOL)
		return len >= sizeof(*pool) &&
		       (len - sizeof(*pool)) /
				       sizeof(struct djinn_state_piece) ==
			       pool->nr &&
		       (len - sizeof(*pool)) %
				       sizeof(struct djinn_state_piece) ==
			       0 &&
		       pool->granularity &&
		       !(pool->granularity & (pool->granularity - 1)) &&
		       pool->size % pool->granularity == 0 &&
		       pieces_ok(pool, (const void *)(pool + 1), pool->nr);
	pool = len >= sizeof(*pcs) ? state_in_pool(in, pcs->device) : NULL;
	return pool &&
	       (len - sizeof(*pcs)) / sizeof(struct djinn_state_piece) ==
		       pcs->nr &&
	       (len - sizeof(*pcs)) % sizeof(struct djinn_state_piece) == 0 &&
	       pcs->nr && pieces_ok(pool, (const void *)(pcs + 1), pcs->nr);
}

/* Whether entry @e (of @len payload bytes at @p) holds together. */
static bool ent_ok(const struct state_in *in, uint32_t type, const void *p,
		   uint32_t len, char *msg, size_t msglen)
{
	const struct djinn_state_session *s = p;
	const struct djinn_state_tensor *t = p;
	const struct djinn_state_conn *c = p;

	switch (type) {
	case DJINN_STATE_SESSION:
		if (len >= sizeof(*s) &&
		    (len - sizeof(*s)) / 4 ==
			    (uint64_t)s->nr_slots + s->nr_obj_slots &&
		    (len - sizeof(*s)) % 4 == 0)
			return true;
		break;
	case DJINN_STATE_PAUSE: {
		const struct djinn_state_pause *z = p;

		if (len >= sizeof(*z) && (len - sizeof(*z)) % 4 == 0 &&
		    (len - sizeof(*z)) / 4 == z->want &&
		    data_ok(in, z->hidden_off, z->hidden_bytes, REGION) &&
		    data_ok(in, z->kv_off, z->kv_bytes, REGION) &&
		    (!z->decode || z->done < z->want))
			return true;
		break;
	}
	case DJINN_STATE_RESULT: {
		const struct djinn_state_result *r = p;

		if (len >= sizeof(*r) && r->done &&
		    (len - sizeof(*r)) %
				    (sizeof(struct djinn_tensor_desc) + 8) ==
			    0 &&
		    (len - sizeof(*r)) /
				    (sizeof(struct djinn_tensor_desc) + 8) ==
			    r->nr)
			return true;
		break;
	}
	case DJINN_STATE_OBJ: {
		const struct djinn_state_obj *o = p;

		if (len == sizeof(*o) && o->lost <= DJINN_STATE_LOST_CRASH &&
		    (o->kind == DJINN_STATE_MODEL ||
		     o->kind == DJINN_STATE_CTX) &&
		    memchr(o->model, 0, sizeof(o->model)) &&
		    data_ok(in, o->cache_off, o->cache_bytes, REGION) &&
		    data_ok(in, o->logits_off, o->logits_bytes, 0))
			return true;
		break;
	}
	case DJINN_STATE_TENSOR: {
		uint64_t elems, bytes;

		/* a shape its bytes fill, as the wire checks it: a graph
		 * reads what the shape says */
		if (len == sizeof(*t) && t->lost <= DJINN_STATE_LOST_CRASH &&
		    (t->lost ? !t->data_off :
			       data_ok(in, t->data_off, t->bytes,
				       t->kind == DJINN_STATE_DATA ?
					       REGION :
					       DJINN_STATE_IN_POOL)) &&
		    t->kind >= DJINN_STATE_DATA &&
		    t->kind <= DJINN_STATE_MODULE &&
		    !djinn_desc_check(&t->desc, &elems, &bytes) &&
		    bytes == t->bytes)
			return true;
		break;
	}
	case DJINN_STATE_CONN:
		if (len >= sizeof(*c) && c->backlog <= len &&
		    (uint64_t)c->nr_sessions * 8 + c->backlog ==
			    len - sizeof(*c))
			return true;
		break;
	case DJINN_STATE_POOL:
	case DJINN_STATE_PIECES:
		if (pool_ent_ok(in, type, p, len))
			return true;
		break;
	case DJINN_STATE_TEXT_ENTRY: {
		const struct djinn_state_text *x = p;

		if (len == sizeof(*x) && (x->data_off & DJINN_STATE_IN_POOL) &&
		    data_ok(in, x->data_off, x->size, DJINN_STATE_IN_POOL) &&
		    x->size && memchr(x->owner, 0, sizeof(x->owner)))
			return true;
		break;
	}
	case DJINN_STATE_UPLOAD: {
		const struct djinn_state_upload *u = p;

		if (len >= sizeof(*u) && len - sizeof(*u) == u->config_len &&
		    u->config_len && u->bytes &&
		    memchr(u->owner, 0, sizeof(u->owner)) &&
		    (u->data_off == DJINN_STATE_IN_POOL ||
		     data_ok(in, u->data_off, u->bytes, 0)))
			return true;
		break;
	}
	default:
		snprintf(msg, msglen, "entry of unknown type %u", type);
		return false;
	}
	snprintf(msg, msglen, "entry of type %u does not hold together", type);
	return false;
}

int state_in_open(struct state_in *in, int rec_fd, int data_fd, char *msg,
		  size_t msglen)
{
	const struct djinn_state_hdr *h;
	uint64_t size = 0, data_size = 0, n = 0;
	int err = 0;
	uint32_t type, len;

	memset(in, 0, sizeof(*in));
	in->rec = map_fd(rec_fd, "the record", &size, &err, msg, msglen);
	if (!in->rec)
		return err;
	in->size = size;
	h = (const void *)in->rec;
	if (size < 16 || h->magic != DJINN_STATE_MAGIC) {
		snprintf(msg, msglen, "not a djinnd state record");
		err = -EBADMSG;
		goto fail;
	}
	if (h->version < DJINN_STATE_VERSION_MIN ||
	    h->version > DJINN_STATE_VERSION) {
		snprintf(msg, msglen,
			 "state record version %u: this djinnd reads versions "
			 "%u to %u",
			 h->version, DJINN_STATE_VERSION_MIN,
			 DJINN_STATE_VERSION);
		err = -EPROTONOSUPPORT;
		goto fail;
	}
	if (size < sizeof(*h) || h->hdr_size != sizeof(*h) || h->size != size) {
		snprintf(msg, msglen,
			 "record of %llu bytes, its header says "
			 "%llu",
			 (unsigned long long)size,
			 (unsigned long long)(size >= sizeof(*h) ? h->size :
								   0));
		err = -EBADMSG;
		goto fail;
	}
	in->hdr = h;
	in->data = map_fd(data_fd, "its data", &data_size, &err, msg, msglen);
	if (!in->data)
		goto fail;
	in->data_mapped = data_size;
	if (data_size < h->data_size) {
		snprintf(msg, msglen,
			 "data of %llu bytes, the record says "
			 "%llu",
			 (unsigned long long)data_size,
			 (unsigned long long)h->data_size);
		err = -EBADMSG;
		goto fail;
	}
	in->data_size = h->data_size;
	in->pos = sizeof(*h);
	/* every entry's length first, and the pools and pieces found */
	for (; in->pos < in->size; n++) {
		const struct djinn_state_ent *e =
			(const void *)(in->rec + in->pos);

		if (in->size - in->pos < sizeof(*e) ||
		    ALIGN8((uint64_t)e->len) >
			    in->size - in->pos - sizeof(*e)) {
			snprintf(msg, msglen, "entry %llu runs past the record",
				 (unsigned long long)n);
			err = -EBADMSG;
			goto fail;
		}
		state_in_next(in, &type, &len);
		in->nr_pools += type == DJINN_STATE_POOL;
		in->nr_pieces += type == DJINN_STATE_PIECES;
	}
	in->pools = calloc(in->nr_pools + 1, sizeof(*in->pools));
	in->pieces = calloc(in->nr_pieces + 1, sizeof(*in->pieces));
	if (!in->pools || !in->pieces) {
		snprintf(msg, msglen, "out of memory");
		err = -ENOMEM;
		goto fail;
	}
	in->nr_pools = in->nr_pieces = 0;
	state_in_rewind(in);
	for (const void *p; (p = state_in_next(in, &type, &len));) {
		if (type == DJINN_STATE_POOL && len >= sizeof(**in->pools) &&
		    state_in_pool(
			    in, ((const struct djinn_state_pool *)p)->device)) {
			uint32_t dev =
				((const struct djinn_state_pool *)p)->device;

			snprintf(msg, msglen, "device %u has two %s",
				 dev & ~DJINN_STATE_SWAP_ARENA,
				 dev & DJINN_STATE_SWAP_ARENA ? "swap arenas" :
								"pools");
			err = -EBADMSG;
			goto fail;
		}
		if (type == DJINN_STATE_POOL && len >= sizeof(**in->pools))
			in->pools[in->nr_pools++] = p;
		if (type == DJINN_STATE_PIECES && len >= sizeof(**in->pieces))
			in->pieces[in->nr_pieces++] = p;
	}
	/* every entry checked before any is used: the pools first, then
	 * the pieces (which the pools bound), then the rest (which the
	 * pieces bound), each against what is checked already */
	for (int round = 0; round < 3; round++) {
		state_in_rewind(in);
		n = 0;
		for (const void *p; (p = state_in_next(in, &type, &len)); n++) {
			if ((round == 0) != (type == DJINN_STATE_POOL) ||
			    (round == 1) != (type == DJINN_STATE_PIECES))
				continue;
			if (!ent_ok(in, type, p, len, msg, msglen)) {
				size_t l = strlen(msg);

				snprintf(msg + l, msglen - l, " (entry %llu)",
					 (unsigned long long)n);
				err = -EBADMSG;
				goto fail;
			}
		}
	}
	state_in_rewind(in);
	return 0;
fail:
	state_in_close(in);
	return err;
}

const void *state_in_next(struct state_in *in, uint32_t *type, uint32_t *len)
{
	const struct djinn_state_ent *e;

	if (in->pos >= in->size)
		return NULL;
	e = (const void *)(in->rec + in->pos);
	*type = e->type;
	*len = e->len;
	in->pos += sizeof(*e) + ALIGN8((uint64_t)e->len);
	return e + 1;
}

void state_in_rewind(struct state_in *in)
{
	in->pos = sizeof(struct djinn_state_hdr);
}

const struct djinn_state_pool *state_in_pool(const struct state_in *in,
					     uint32_t device)
{
	for (uint32_t i = 0; i < in->nr_pools; i++)
		if (in->pools[i]->device == device)
			return in->pools[i];
	return NULL;
}

uint64_t state_in_in_place(const struct state_in *in)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < in->nr_pieces; i++)
		n += pieces_bytes(in->pieces[i]);
	return n;
}

int state_in_fill(const struct state_in *in, uint64_t off, uint32_t device,
		  struct vmu_fill *f)
{
	const struct djinn_state_pieces *e;

	*f = (struct vmu_fill){ 0 };
	if (!(off & DJINN_STATE_IN_POOL)) {
		f->swapped = off & DJINN_STATE_SWAPPED;
		f->bytes = in->data + (off & ~DJINN_STATE_SWAPPED);
		return 0;
	}
	/* state_in_open() checked the number and the bytes, and that a
	 * swapped region's is one piece of a swap arena */
	f->swapped = off & DJINN_STATE_SWAPPED;
	e = in->pieces[off & ~(DJINN_STATE_IN_POOL | DJINN_STATE_SWAPPED)];
	if (e->device != (device | (f->swapped ? DJINN_STATE_SWAP_ARENA : 0)))
		return -EBADMSG;
	f->pieces = (const struct vmu_piece *)(e + 1);
	f->nr_pieces = e->nr;
	return 0;
}

void state_in_close(struct state_in *in)
{
	free(in->pools);
	free(in->pieces);
	if (in->rec && in->size)
		munmap((void *)in->rec, in->size);
	if (in->data && in->data_mapped)
		munmap((void *)in->data, in->data_mapped);
	memset(in, 0, sizeof(*in));
}

/* ---------------------------------------------------------------------- */
/* Sessions and tensors */

bool svc_state_in_pool(const struct device *dev)
{
	const struct vmu_provider *prov = vmu_provider(dev->vmu);

	return prov->ops->file && !prov->device_only;
}

struct size_ctx {
	uint64_t n;
	struct session *s;
	bool pool;
};

/* Whether @s's region @region's bytes are copied into state-data: not
 * in place in a pool, or swapped out (region_out()). */
static bool copied(const struct size_ctx *x, uint64_t region)
{
	struct vmu_provider *prov = vmu_provider(x->s->dev->vmu);
	struct vmu_region_info info;
	struct vmu_piece *pcs, pc;
	const void *host = NULL;
	unsigned int nr;
	int ret;

	if (!x->pool)
		return true;
	if (vmu_region_info(x->s->vs, region, &info) ||
	    info.state != VMU_REGION_SWAPPED)
		return false;
	/* swapped out: copied unless it lies in the swap arena */
	ret = vmu_region_pieces(x->s->vs, region, 0, &pcs, &nr, &host, NULL);
	if (!ret)
		free(pcs);
	return ret != -ENODATA || !prov->ops->swap_piece ||
	       prov->ops->swap_piece(prov, host, 1, &pc);
}

static int add_size(void *arg, uint32_t slot, const struct tensor *t)
{
	struct size_ctx *x = arg;

	(void)slot;
	if (t->lost)
		return 0;
	if (t->text ? !x->pool : copied(x, t->region))
		x->n += pages(t->bytes);
	return 0;
}

uint64_t svc_state_data_size(struct session_table *t)
{
	struct session *s;
	struct size_ctx x = { 0 };

	list_for_each_entry(s, &t->list, node) {
		struct sobj_slot *o;

		x.pool = svc_state_in_pool(s->dev);
		x.s = s;
		session_tensor_each(s, add_size, &x);
		slots_for_each(&s->objs, o) {
			struct mobj *m = o->p;
			struct model_ctx_pause pz;
			struct model_kept k;

			if (m->lost)
				continue;
			if (o->kind == SOBJ_MODEL && !x.pool &&
			    !model_upload_keep(m->h, &k, NULL, 0))
				x.n += pages(k.bytes); /* save_upload() */
			if (o->kind != SOBJ_CTX)
				continue;
			x.n += pages(model_ctx_model(m->mc)->cfg.vocab *
				     sizeof(float));
			if (copied(&x, model_ctx_cache(m->mc)))
				x.n += pages(model_ctx_len(m->mc) *
					     model_ctx_token_bytes(m->mc));
			if (model_ctx_pause_get(m->mc, &pz))
				x.n += (copied(&x, pz.hidden) ?
						pages(pz.hidden_bytes) :
						0) +
				       (copied(&x, pz.kv) ? pages(pz.kv_bytes) :
							    0);
		}
	}
	return x.n;
}

struct save_ctx {
	struct state_out *o;
	struct session *s;
	int err;
	char why[128];
};

/*
 * Whether @s's device memory is gone: a fault lost it, or its device is
 * dead (whose memory is not read). What was swapped out to host memory is
 * kept, whole; every other object is saved as lost (its entry's @lost),
 * and comes back as a handle that answers -EIO naming it.
 */
static bool gone(const struct session *s)
{
	char why[8];

	return session_lost(s, why, sizeof(why)) != 0 ||
	       __atomic_load_n(&s->dev->backend->dead, __ATOMIC_ACQUIRE);
}

/* gone(), or, in a crash journal's record (@o->journal), a device whose
 * memory is not a pool the record can point into (a GPU's, which a crash
 * does not keep): each object in device memory is written lost. */
static bool lossy(const struct state_out *o, const struct session *s)
{
	return gone(s) || (o->journal && !svc_state_in_pool(s->dev));
}

/* Why what lossy() loses is lost, as the record says it. */
static uint8_t lost_why(const struct state_out *o, const struct session *s)
{
	return gone(s) ? DJINN_STATE_LOST_DEVICE : DJINN_STATE_LOST_CRASH;
}

/* Whether region @region's first @bytes outlive @s's device memory:
 * none, or swapped out to host memory. */
static bool region_kept(struct session *s, uint64_t region, uint64_t bytes)
{
	struct vmu_region_info info;

	return !bytes || (!vmu_region_info(s->vs, region, &info) &&
			  info.state == VMU_REGION_SWAPPED);
}

/* A swapped-out region's @bytes, whose host copy is at @host: where it
 * lies in the swap arena (it stays there), else written into state-data
 * as it is. */
static int swapped_out(struct state_out *o, struct session *s, const void *host,
		       uint64_t bytes, uint64_t *off)
{
	struct vmu_provider *prov = vmu_provider(s->dev->vmu);
	struct vmu_piece pc;
	int ret;

	if (svc_state_in_pool(s->dev) && prov->ops->swap_piece &&
	    !prov->ops->swap_piece(prov, host, bytes, &pc))
		ret = state_out_pieces(
			o, s->dev->index | DJINN_STATE_SWAP_ARENA, &pc, 1, off);
	else if (o->journal)
		return -ENODATA; /* a journal's record copies nothing */
	else
		ret = state_out_write(o, host, bytes, off);
	*off |= DJINN_STATE_SWAPPED;
	return ret;
}

/* region_out() of a lossy() session: a region swapped out is written
 * from its host copy, and stays swapped out; one that was in device
 * memory is -ENODATA (its bytes are not read). */
static int region_host(struct state_out *o, struct session *s, uint64_t region,
		       uint64_t bytes, uint64_t *off)
{
	const void *host = NULL;
	struct vmu_piece *pcs;
	unsigned int nr;
	int ret;

	*off = 0;
	if (!bytes)
		return 0;
	ret = vmu_region_pieces(s->vs, region, bytes, &pcs, &nr, &host, NULL);
	if (ret == -ENODATA && host)
		return swapped_out(o, s, host, bytes, off);
	if (!ret)
		free(pcs);
	return -ENODATA;
}

/*
 * Where @bytes of @s's region @region lie, @s's device being a pool
 * (svc_state_in_pool()): in it, or, swapped out, in its swap arena (its
 * host copy stays where it is, else is written as it is: a journal's
 * record copies nothing, -ENODATA), at *@off; its max size in
 * *@max_size (or NULL). A region being swapped in (only while requests
 * run: a journal's record) is named by its host copy; vmu_region_pieces()
 * says why.
 */
static int pool_region(struct state_out *o, struct session *s, uint64_t region,
		       uint64_t bytes, uint64_t *max_size, uint64_t *off)
{
	const void *host = NULL;
	struct vmu_piece *pcs;
	unsigned int nr;
	uint64_t max;
	int ret =
		vmu_region_pieces(s->vs, region, bytes, &pcs, &nr, &host, &max);

	*off = 0;
	if (max_size)
		*max_size = max;
	if (ret == -ENODATA)
		return !bytes ? 0 :
		       host   ? swapped_out(o, s, host, bytes, off) :
				-ENODATA;
	if (ret)
		return ret;
	ret = bytes ? state_out_pieces(o, s->dev->index, pcs, nr, off) : 0;
	free(pcs);
	return ret;
}

/*
 * @bytes of @s's region @region, at *@off. A device whose memory is a
 * file (svc_state_in_pool()) writes where they lie in it: nothing is copied. Else
 * into state-data: host memory (the CPU backend's) is written from where
 * it is by write(2), so no page of the record is faulted in; a device's
 * comes through the provider's copies into the record's mapping.
 */
static int region_out(struct state_out *o, struct session *s, uint64_t region,
		      uint64_t bytes, uint64_t *off)
{
	struct vmu_provider *prov = vmu_provider(s->dev->vmu);
	struct vmu_region_info info;
	void *dst;
	int ret;

	if (lossy(o, s))
		return region_host(o, s, region, bytes, off);
	if (svc_state_in_pool(s->dev) && bytes)
		return pool_region(o, s, region, bytes, NULL, off);
	if (prov->device_only) {
		dst = state_out_data(o, bytes, off);
		if (!dst)
			return o->err;
		return bytes ? vmu_region_read(s->vs, region, 0, dst, bytes) :
			       0;
	}
	ret = vmu_region_pin(s->vs, region, NULL, &info);
	if (ret)
		return ret;
	ret = state_out_write(o, (const void *)(uintptr_t)info.addr, bytes,
			      off);
	vmu_region_unpin(s->vs, region);
	return ret;
}

/* The data_off of the TEXT_ENTRY written for fingerprint @fp of scope
 * @owner on device @device, or 0 (none). */
static uint64_t text_off(const struct state_out *o, uint32_t device,
			 const uint8_t *fp, const char *owner)
{
	for (size_t pos = sizeof(struct djinn_state_hdr); pos < o->len;) {
		const struct djinn_state_ent *e = (const void *)(o->rec + pos);
		const struct djinn_state_text *x = (const void *)(e + 1);

		pos += sizeof(*e) + ALIGN8((uint64_t)e->len);
		if (e->type == DJINN_STATE_SESSION)
			break; /* the text entries come before any session */
		if (e->type == DJINN_STATE_TEXT_ENTRY && x->device == device &&
		    !memcmp(x->fp, fp, sizeof(x->fp)) &&
		    !strcmp(x->owner, owner))
			return x->data_off;
	}
	return 0;
}

/*
 * Where an entry's bytes go, its PIECES entries (region_out()) are
 * written before it: a new entry may move the record, so each entry is
 * made whole on the stack and added last.
 */
static int save_tensor(void *arg, uint32_t slot, const struct tensor *t)
{
	struct save_ctx *x = arg;
	struct djinn_state_tensor e = { 0 }, *p;
	struct vmu_provider *prov = vmu_provider(x->s->dev->vmu);
	struct vmu_piece *pcs;
	unsigned int nr;
	uint64_t off = 0;
	void *dst;
	int ret;

	e.slot = slot;
	e.desc = t->desc;
	e.bytes = t->bytes;
	e.kind = t->module ? DJINN_STATE_MODULE :
		 t->text   ? DJINN_STATE_TEXT :
			     DJINN_STATE_DATA;
	if (t->lost || (t->text && lossy(x->o, x->s))) {
		/* text is device memory: lost with it */
		e.lost = t->lost ? t->lost : lost_why(x->o, x->s);
		ret = 0;
	} else if (t->text && svc_state_in_pool(x->s->dev)) {
		memcpy(e.fp, vmu_text_fp(t->text), sizeof(e.fp));
		e.shared = vmu_text_shared(t->text);
		/* its TEXT_ENTRY is in place: found by its fingerprint;
		 * the entry's pieces are its (a stale entry, out of the
		 * index, has none written: its own are) */
		off = text_off(x->o, x->s->dev->index, e.fp,
			       e.shared ? "" : x->s->tenant);
		ret = 0;
		if (!off) {
			ret = vmu_text_pieces(x->s->dev->vmu, t->text, &pcs,
					      &nr);
			if (!ret) {
				ret = state_out_pieces(x->o, x->s->dev->index,
						       pcs, nr, &off);
				free(pcs);
			}
		}
	} else if (t->text) {
		memcpy(e.fp, vmu_text_fp(t->text), sizeof(e.fp));
		e.shared = vmu_text_shared(t->text);
		if (prov->device_only) {
			dst = state_out_data(x->o, t->bytes, &off);
			ret = !dst ? x->o->err :
			      !t->bytes ?
				     0 :
				     prov->ops->copy_dtoh(
					     prov, dst, vmu_text_addr(t->text),
					     t->bytes);
		} else {
			ret = state_out_write(
				x->o,
				(const void *)(uintptr_t)vmu_text_addr(t->text),
				t->bytes, &off);
		}
	} else {
		struct vmu_region_info info = { 0 };
		uint64_t max = 0;

		/* a pool's: where it lies, and its max size, at once */
		if (svc_state_in_pool(x->s->dev) && !lossy(x->o, x->s)) {
			ret = pool_region(x->o, x->s, t->region, t->bytes, &max,
					  &off);
		} else {
			ret = vmu_region_info(x->s->vs, t->region, &info);
			max = info.max_size;
			if (!ret)
				ret = region_out(x->o, x->s, t->region,
						 t->bytes, &off);
		}
		e.max_size = max;
		/* lossy(): it was in device memory; or, in a journal's
		 * record, its host copy is outside the swap arena */
		if (ret == -ENODATA) {
			e.lost = lost_why(x->o, x->s);
			off = 0;
			ret = 0;
		}
	}
	if (ret && x->o->journal && !x->o->err) {
		/* a journal's record fails for no one object: it is lost
		 * to a crash, the rest kept */
		log_debug("state: session %llu: the tensor in slot %u is not "
			  "kept for a crash: %s",
			  (unsigned long long)x->s->id, slot, strerror(-ret));
		e.lost = DJINN_STATE_LOST_CRASH;
		off = 0;
		ret = 0;
	}
	e.data_off = off;
	if (!ret) {
		p = state_out_ent(x->o, DJINN_STATE_TENSOR, sizeof(*p));
		if (p)
			*p = e;
		else
			ret = -ENOMEM;
	}
	if (ret)
		snprintf(x->why, sizeof(x->why), "tensor in slot %u: %s", slot,
			 strerror(-ret));
	return ret;
}

/* The slot of object @p in @s's table. */
static uint32_t obj_slot_of(struct session *s, const void *p)
{
	struct sobj_slot *o;

	slots_for_each(&s->objs, o)
		if (o->p == p)
			return slots_index(&s->objs, o);
	return UINT32_MAX;
}

/* A context's paused step, if it has one: its entry after the
 * context's, the hidden state and keys and values into state-data. */
static int save_pause(struct state_out *out, struct session *s, uint32_t slot,
		      struct mobj *m)
{
	struct model_ctx_pause pz;
	struct djinn_state_pause *z;
	uint64_t hidden_off = 0, kv_off = 0;
	int ret;

	if (!model_ctx_pause_get(m->mc, &pz))
		return 0;
	ret = region_out(out, s, pz.hidden, pz.hidden_bytes, &hidden_off);
	if (!ret)
		ret = region_out(out, s, pz.kv, pz.kv_bytes, &kv_off);
	if (ret) {
		log_err("state: session %llu: the paused step of the context "
			"in slot %u: %s",
			(unsigned long long)s->id, slot, strerror(-ret));
		return ret;
	}
	z = state_out_ent(out, DJINN_STATE_PAUSE,
			  (uint32_t)(sizeof(*z) + (uint64_t)pz.want * 4));
	if (!z)
		return -ENOMEM;
	z->slot = slot;
	z->layer = pz.layer;
	z->T = pz.T;
	z->want = pz.want;
	z->done = pz.done;
	z->brk = pz.brk;
	z->flags = m->pause_flags;
	z->all = pz.all;
	z->decode = pz.decode;
	z->rng = pz.rng;
	z->sp.temperature = pz.sp.temperature;
	z->sp.top_k = pz.sp.top_k;
	z->sp.top_p = pz.sp.top_p;
	z->sp.seed = pz.sp.seed;
	z->desc = pz.desc;
	if (pz.decode)
		memcpy(z + 1, pz.tokens, (pz.done + 1) * sizeof(int32_t));
	z->hidden_bytes = pz.hidden_bytes;
	z->hidden_off = hidden_off;
	z->kv_bytes = pz.kv_bytes;
	z->kv_off = kv_off;
	return 0;
}

/* A context's entry in a crash journal's record: the context as its last
 * request left it (steps run meanwhile), its cache rows in place, its
 * logits where they lie in the logits arena (model_ctx_journal()). */
static int journal_ctx(struct state_out *out, struct session *s,
		       struct djinn_state_obj *e, struct mobj *m)
{
	struct model_ctx_saved sv;
	uint64_t off = 0;
	int ret;

	ret = model_ctx_journal(m->mc, &sv);
	if (ret)
		return ret;
	e->len = sv.len;
	e->cache_bytes = sv.len * model_ctx_token_bytes(m->mc);
	/* (an empty one names nothing: its region is not touched) */
	ret = e->cache_bytes ? region_out(out, s, model_ctx_cache(m->mc),
					  e->cache_bytes, &off) :
			       0;
	e->cache_off = off;
	if (ret)
		return ret;
	if (sv.have_logits) {
		e->have_logits = 1;
		e->logits_bytes =
			model_ctx_model(m->mc)->cfg.vocab * sizeof(float);
		e->logits_off = sv.logits_off;
	}
	if (sv.paused || __atomic_load_n(&m->pause_lost, __ATOMIC_RELAXED))
		e->flags |= DJINN_STATE_OBJ_PAUSED;
	return 0;
}

/* One context's entry (on the caller's stack): its cache and last
 * logits. */
static int save_ctx(struct state_out *out, struct session *s,
		    struct djinn_state_obj *e, struct mobj *m)
{
	const struct model *md = model_ctx_model(m->mc);
	uint64_t off = 0;
	void *dst;
	int ret;

	e->kind = DJINN_STATE_CTX;
	e->model_slot = obj_slot_of(s, m->model);
	e->max_tokens = m->max_tokens;
	if (out->journal)
		return journal_ctx(out, s, e, m);
	if (m->pause_lost) /* (nothing runs: a planned restart) */
		e->flags |= DJINN_STATE_OBJ_PAUSED;
	e->len = model_ctx_len(m->mc);
	e->cache_bytes = e->len * model_ctx_token_bytes(m->mc);
	ret = region_out(out, s, model_ctx_cache(m->mc), e->cache_bytes, &off);
	e->cache_off = off;
	if (ret) {
		log_err("state: session %llu: the context in slot %u: its "
			"cache: %s",
			(unsigned long long)s->id, e->slot, strerror(-ret));
		return ret;
	}
	if (model_ctx_logits(m->mc)) {
		e->have_logits = 1;
		e->logits_bytes = md->cfg.vocab * sizeof(float);
		dst = state_out_data(out, e->logits_bytes, &off);
		if (!dst)
			return out->err;
		e->logits_off = off;
		memcpy(dst, model_ctx_logits(m->mc), e->logits_bytes);
	}
	return 0;
}

/* The graphs' outputs @s remembers (s->lock held). */
static int save_results(struct state_out *out, struct session *s)
{
	int ret = 0;

	for (uint32_t i = 0; i <= SESSION_RESULTS && !ret; i++) {
		const struct result_rec *rec = &s->results[i];
		struct djinn_state_result *e;
		uint64_t len;

		if (!rec->descs)
			continue;
		if (!rec->done)
			continue; /* a graph that never ran to its end */
		len = sizeof(*e) +
		      (uint64_t)rec->nr * (sizeof(*rec->descs) + 8);
		e = state_out_ent(out, DJINN_STATE_RESULT, (uint32_t)len);
		if (!e) {
			ret = -ENOMEM;
			break;
		}
		e->request_id = rec->request_id;
		e->index = i;
		e->nr = rec->nr;
		e->error = rec->error;
		e->done = 1;
		memcpy(e + 1, rec->descs, rec->nr * sizeof(*rec->descs));
		memcpy((uint8_t *)(e + 1) + rec->nr * sizeof(*rec->descs),
		       rec->handles, rec->nr * 8);
	}
	return ret;
}

/* @s's models, then its contexts. */
/* Whether an UPLOAD entry for upload @src of tenant @owner on device
 * @device is in the record already. */
static bool upload_saved(const struct state_out *o, uint32_t device,
			 const uint8_t *src, const char *owner)
{
	for (size_t pos = sizeof(struct djinn_state_hdr); pos < o->len;) {
		const struct djinn_state_ent *e = (const void *)(o->rec + pos);
		const struct djinn_state_upload *u = (const void *)(e + 1);

		pos += sizeof(*e) + ALIGN8((uint64_t)e->len);
		if (e->type == DJINN_STATE_UPLOAD && u->device == device &&
		    !memcmp(u->src, src, sizeof(u->src)) &&
		    !strcmp(u->owner, owner))
			return true;
	}
	return false;
}

/*
 * The UPLOAD entry of the model @h holds, if it is an upload and has none
 * yet: its config.json, and where its weights are (its text entry in
 * place, else copied into state-data).
 */
static int save_upload(struct state_out *o, struct session *s,
		       const struct model_hold *h)
{
	struct vmu_provider *prov = vmu_provider(s->dev->vmu);
	struct djinn_state_upload e = { 0 }, *p;
	uint32_t dev = s->dev->index;
	struct model_kept k;
	uint64_t off = 0;
	char why[160];
	int ret = model_upload_keep(h, &k, why, sizeof(why));

	if (ret == -ENOENT)
		return 0;
	if (ret) {
		log_err("state: session %llu: %s", (unsigned long long)s->id,
			why);
		return ret;
	}
	if (upload_saved(o, dev, k.src, k.owner))
		return 0;
	if (k.config_len > UINT32_MAX - sizeof(e))
		return -E2BIG;
	e.device = dev;
	e.config_len = (uint32_t)k.config_len;
	memcpy(e.src, k.src, sizeof(e.src));
	memcpy(e.fp, k.fp, sizeof(e.fp));
	snprintf(e.owner, sizeof(e.owner), "%s", k.owner);
	e.dtype = k.dtype;
	e.prefixed = k.prefixed;
	e.bytes = k.bytes;
	if (svc_state_in_pool(s->dev)) {
		/* vmu_text_each() wrote every entry of the index */
		if (!text_off(o, dev, k.fp, k.owner)) {
			log_err("state: session %llu: the weights of an "
				"uploaded model are out of the text index",
				(unsigned long long)s->id);
			return -EBUSY;
		}
		e.data_off = DJINN_STATE_IN_POOL;
	} else if (prov->device_only) {
		void *dst = state_out_data(o, k.bytes, &off);

		ret = !dst ? o->err :
			     prov->ops->copy_dtoh(prov, dst,
						  vmu_text_addr(h->text),
						  k.bytes);
		e.data_off = off;
	} else {
		ret = state_out_write(
			o, (const void *)(uintptr_t)vmu_text_addr(h->text),
			k.bytes, &off);
		e.data_off = off;
	}
	if (ret)
		return ret;
	p = state_out_ent(o, DJINN_STATE_UPLOAD,
			  (uint32_t)(sizeof(e) + k.config_len));
	if (!p)
		return -ENOMEM;
	*p = e;
	memcpy(p + 1, k.config, k.config_len);
	return 0;
}

/* Whether object @m of a session whose device memory is gone (@gone,
 * lossy()) is lost: an uploaded model (its weights were on the device;
 * a served one is opened again by name), a context whose cache, or
 * paused step, was not swapped out, or whose model is lost. (In a crash
 * journal's record (@journal) a paused step is not named at all.) */
static bool obj_lost(struct session *s, const struct mobj *m, bool gone,
		     bool journal)
{
	struct model_ctx_pause pz;

	if (m->lost)
		return true;
	if (!gone)
		return false;
	if (m->kind == SOBJ_MODEL)
		return model_is_upload(m->h);
	if (obj_lost(s, m->model, gone, journal) ||
	    !region_kept(s, model_ctx_cache(m->mc),
			 (uint64_t)model_ctx_len(m->mc) *
				 model_ctx_token_bytes(m->mc)))
		return true;
	return !journal && model_ctx_pause_get(m->mc, &pz) &&
	       (!region_kept(s, pz.hidden, pz.hidden_bytes) ||
		!region_kept(s, pz.kv, pz.kv_bytes));
}

/* An entry for object slot @slot of @kind that comes back lost (@lost,
 * enum lost_why). */
static int lost_obj(struct state_out *out, uint32_t slot, int kind,
		    uint8_t lost)
{
	struct djinn_state_obj *p =
		state_out_ent(out, DJINN_STATE_OBJ, sizeof(*p));

	if (!p)
		return -ENOMEM;
	*p = (struct djinn_state_obj){
		.slot = slot,
		.kind = kind == SOBJ_MODEL ? DJINN_STATE_MODEL :
					     DJINN_STATE_CTX,
		.lost = lost,
	};
	return 0;
}

static int save_objs(struct state_out *out, struct session *s)
{
	bool gone = lossy(out, s);
	uint8_t why = lost_why(out, s);

	for (int kind = SOBJ_MODEL; kind <= SOBJ_CTX; kind++) {
		struct sobj_slot *o;

		slots_for_each(&s->objs, o) {
			struct mobj *m = o->p;
			uint32_t slot = slots_index(&s->objs, o);
			struct djinn_state_obj e, *p;
			const struct model *md;
			int ret;

			if (o->kind != kind)
				continue;
			if (obj_lost(s, m, gone, out->journal)) {
				ret = lost_obj(out, slot, kind,
					       m->lost ? m->lost : why);
				if (ret)
					return ret;
				continue;
			}
			md = kind == SOBJ_MODEL ? m->h->m :
						  model_ctx_model(m->mc);
			e = (struct djinn_state_obj){ 0 };
			e.slot = slot;
			e.kind = DJINN_STATE_MODEL;
			e.flags = (gone ? DJINN_STATE_OBJ_LOSSY : 0) |
				  (gone && why == DJINN_STATE_LOST_CRASH ?
					   DJINN_STATE_OBJ_CRASH :
					   0) |
				  (kind == SOBJ_MODEL && model_is_upload(m->h) ?
					   DJINN_STATE_OBJ_UPLOAD :
					   0);
			snprintf(e.model, sizeof(e.model), "%s", md->name);
			memcpy(e.fp, md->fp, sizeof(e.fp));
			/* an upload's entry before the first that holds
			 * it; a context's cache and logits */
			ret = kind == SOBJ_MODEL ? save_upload(out, s, m->h) :
						   save_ctx(out, s, &e, m);
			if (ret && out->journal && !out->err) {
				/* (a streamed upload, a cache swapped out
				 * to anonymous memory): lost to a crash,
				 * not the whole record */
				ret = lost_obj(out, slot, kind,
					       DJINN_STATE_LOST_CRASH);
				if (ret)
					return ret;
				continue;
			}
			if (ret)
				return ret;
			p = state_out_ent(out, DJINN_STATE_OBJ, sizeof(*p));
			if (!p)
				return -ENOMEM;
			*p = e;
			/* its paused step's entry after it (a journal's
			 * record names the context as it was before) */
			ret = kind == SOBJ_CTX && !out->journal ?
				      save_pause(out, s, e.slot, m) :
				      0;
			if (ret)
				return ret;
		}
	}
	return 0;
}

/* A POOL entry for device @device (with DJINN_STATE_SWAP_ARENA: its swap
 * arena) of @size bytes: the pieces in use now (@used: the provider's
 * used() or swap_used()). Allocations made meanwhile (a journal's record
 * is written while requests run) are taken again; frees wait for the
 * next record (vmu_journal_begin()), so what the record names is in. */
static int save_used(struct state_out *o, struct vmu_provider *prov,
		     uint32_t device, uint64_t size,
		     unsigned int (*used)(struct vmu_provider *p,
					  struct vmu_piece *out,
					  unsigned int max))
{
	struct djinn_state_pool *e;
	struct vmu_piece *pcs = NULL;
	unsigned int nr = 64, got; /* one scan, mostly: each commit's */
	uint64_t len;

	for (int tries = 0;; tries++) {
		struct vmu_piece *p = realloc(pcs, nr * sizeof(*pcs));

		if (!p) {
			free(pcs);
			return -ENOMEM;
		}
		pcs = p;
		got = used(prov, pcs, nr);
		if (got <= nr)
			break;
		nr = got + 16;
		if (tries == 16) {
			free(pcs);
			return -EAGAIN;
		}
	}
	len = sizeof(*e) + (uint64_t)got * sizeof(struct vmu_piece);
	e = len > UINT32_MAX ?
		    NULL :
		    state_out_ent(o, DJINN_STATE_POOL, (uint32_t)len);
	if (e) {
		e->device = device;
		e->granularity = prov->granularity;
		e->size = size;
		e->nr = got;
		memcpy(e + 1, pcs, (size_t)got * sizeof(*pcs));
	}
	free(pcs);
	return e ? 0 : len > UINT32_MAX ? -E2BIG : -ENOMEM;
}

/* A POOL entry for @dev: its memory in use, which the next djinnd keeps
 * until its restore is over; then its swap arena's, if it has one (the
 * host copies of its swapped-out regions, which stay where they are). */
static int save_pool(struct state_out *o, struct device *dev)
{
	struct vmu_provider *prov = vmu_provider(dev->vmu);
	uint64_t size;
	int ret =
		save_used(o, prov, dev->index, prov->capacity, prov->ops->used);

	if (ret || !prov->ops->swap_file ||
	    prov->ops->swap_file(prov, &size) < 0)
		return ret;
	return save_used(o, prov, dev->index | DJINN_STATE_SWAP_ARENA, size,
			 prov->ops->swap_used);
}

struct text_save {
	struct state_out *o;
	uint32_t device;
};

/* One entry of a device's text index: its pieces, then its entry. */
static int save_text(void *arg, const struct vmu_text_desc *d)
{
	struct text_save *x = arg;
	struct djinn_state_text *e;
	uint64_t off;
	int ret = state_out_pieces(x->o, x->device, d->pieces, d->nr_pieces,
				   &off);

	if (ret)
		return ret;
	e = state_out_ent(x->o, DJINN_STATE_TEXT_ENTRY, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->device = x->device;
	memcpy(e->fp, d->fp, sizeof(e->fp));
	snprintf(e->owner, sizeof(e->owner), "%s", d->owner);
	e->size = d->size;
	e->data_off = off;
	return 0;
}

static int save_session(struct state_out *o, struct session_table *t,
			struct session *s);

int svc_state_save(struct state_out *o, struct session_table *t,
		   struct device *devs, unsigned int nr_dev)
{
	struct session *s;

	/* each pool, then its text index: the sessions' text is there (a
	 * journal's pools last: what is in use once all is written) */
	for (unsigned int i = 0; i < nr_dev; i++) {
		struct text_save x = { .o = o, .device = devs[i].index };
		int ret = 0;

		if (svc_state_in_pool(&devs[i]) && !o->journal)
			ret = save_pool(o, &devs[i]);
		if (!ret && svc_state_in_pool(&devs[i]))
			ret = vmu_text_each(devs[i].vmu, save_text, &x);
		if (ret)
			return ret;
	}
	list_for_each_entry(s, &t->list, node) {
		int ret;

		/* a journal's record is written while executors add a
		 * session's graphs' outputs: its tensors and results as
		 * one moment's */
		pthread_mutex_lock(&s->lock);
		ret = save_session(o, t, s);
		pthread_mutex_unlock(&s->lock);
		if (ret)
			return ret;
	}
	for (unsigned int i = 0; o->journal && i < nr_dev; i++) {
		int ret = svc_state_in_pool(&devs[i]) ? save_pool(o, &devs[i]) :
							0;

		if (ret)
			return ret;
	}
	o->hdr.next_session = t->next_id;
	return 0;
}

/* One session's entries (s->lock held). */
static int save_session(struct state_out *o, struct session_table *t,
			struct session *s)
{
	struct save_ctx x = { .o = o, .s = s };
	struct djinn_state_session *e;
	uint32_t *gens;
	uint32_t n = s->tensors.nr;
	int ret;

	e = state_out_ent(
		o, DJINN_STATE_SESSION,
		(uint32_t)(sizeof(*e) + ((uint64_t)n + s->objs.nr) * 4));
	if (!e)
		return -ENOMEM;
	e->id = s->id;
	memcpy(e->token, s->token, sizeof(e->token));
	strcpy(e->tenant, s->tenant);
	strcpy(e->label, s->label);
	e->priority = s->priority;
	e->uid = (uint32_t)s->uid;
	e->pid = (uint32_t)s->pid;
	e->device = s->dev->index;
	e->lease_ns = s->lease_ns;
	/* a journal's record is not written at each heartbeat: what was
	 * left when it was is no measure; a crash gives each lease whole
	 * again, so that a client has its lease's time to come back */
	e->lease_left_ns = o->journal ? s->lease_ns : session_lease_left(t, s);
	e->requests = s->requests;
	e->tensor_key = s->tensors.key;
	e->obj_key = s->objs.key;
	e->nr_slots = n;
	/* lost in a fault, or on a device that is dead: its objects
		 * are, but what was swapped out (lossy()) */
	e->lost = 0;
	e->nr_obj_slots = s->objs.nr;
	e->results_next = s->results_next;
	/* kernel session ids are 32-bit (djinn.ko's xarray) */
	e->kid = (uint32_t)s->lease_kid;
	e->kbound = s->lease_bound;
	gens = (uint32_t *)(e + 1);
	for (uint32_t i = 0; i < n; i++)
		gens[i] = ((struct slot *)slots_at(&s->tensors, i))->gen;
	for (uint32_t i = 0; i < s->objs.nr; i++)
		gens[n + i] = ((struct slot *)slots_at(&s->objs, i))->gen;
	ret = session_tensor_each_locked(s, save_tensor, &x);
	if (ret) {
		log_err("state: session %llu: %s", (unsigned long long)s->id,
			x.why[0] ? x.why : strerror(-ret));
		return ret;
	}
	ret = save_objs(o, s);
	if (!ret)
		ret = save_results(o, s);
	return ret;
}

/* One tensor of @s back, at its slot with its bytes. */
static int restore_tensor(struct state_in *in, struct session *s,
			  const struct djinn_state_tensor *e, char *why,
			  size_t whylen)
{
	const uint8_t *src = NULL;
	struct tensor t = { .desc = e->desc, .bytes = e->bytes };
	struct vmu_fill f;
	int ret;

	why[0] = 0;
	if (e->lost) {
		t.lost = e->lost;
		ret = 0;
	} else if (e->kind != DJINN_STATE_DATA &&
		   (e->data_off & DJINN_STATE_IN_POOL)) {
		/* its entry came back in place (restore_text()) */
		ret = e->shared ?
			      vmu_text_lookup_shared(s->vs, e->fp, &t.text) :
			      vmu_text_lookup(s->vs, e->fp, &t.text);
		if (ret == -ENOENT) {
			snprintf(why, whylen,
				 "its text entry is not in the "
				 "record");
			return -EBADMSG;
		}
		if (!ret && vmu_text_size(t.text) != e->bytes) {
			snprintf(why, whylen,
				 "%llu bytes, its text entry's %llu",
				 (unsigned long long)e->bytes,
				 (unsigned long long)vmu_text_size(t.text));
			vmu_text_put(s->vs, t.text);
			return -EBADMSG;
		}
		t.module = e->kind == DJINN_STATE_MODULE;
	} else if (e->kind != DJINN_STATE_DATA) {
		struct vmu_text_upload *u;
		bool created;

		src = in->data + e->data_off;

		/* its bytes hash to its name again, or the record is bad */
		if (e->shared) {
			ret = vmu_text_begin_shared(s->vs, e->bytes, &u);
			if (!ret)
				ret = vmu_text_write(u, src, e->bytes);
			if (!ret)
				ret = vmu_text_commit(u, NULL, &t.text,
						      &created);
			else
				vmu_text_abort(u);
		} else {
			ret = vmu_text_insert(s->vs, src, e->bytes, &t.text,
					      &created);
		}
		if (!ret && memcmp(vmu_text_fp(t.text), e->fp, 32)) {
			vmu_text_put(s->vs, t.text);
			snprintf(why, whylen,
				 "text bytes do not match their "
				 "fingerprint");
			return -EBADMSG;
		}
		t.module = e->kind == DJINN_STATE_MODULE;
	} else {
		ret = state_in_fill(in, e->data_off, s->dev->index, &f);
		if (ret) {
			snprintf(why, whylen,
				 "its bytes are in another "
				 "device's pool");
			return ret;
		}
		ret = vmu_region_create(
			s->vs, e->max_size > e->bytes ? e->max_size : e->bytes,
			&t.region);
		if (!ret) {
			ret = vmu_region_fill(s->vs, t.region, e->bytes, &f);
			if (ret)
				vmu_region_destroy(s->vs, t.region);
		}
	}
	if (ret)
		return ret;
	ret = session_tensor_restore(s, e->slot, &t);
	if (ret) {
		snprintf(why, whylen, "slot %u is not a live handle", e->slot);
		if (t.text)
			vmu_text_put(s->vs, t.text);
		else if (!t.lost)
			vmu_region_destroy(s->vs, t.region);
	}
	return ret;
}

/* A text index entry back in place, on its device. */
static int restore_text(struct state_in *in, const struct djinn_state_text *e,
			struct device *devs, unsigned int nr_dev, char *msg,
			size_t msglen)
{
	struct vmu_text_desc d = { .fp = e->fp,
				   .owner = e->owner,
				   .size = e->size };
	struct vmu_fill f;
	int ret = e->device < nr_dev ?
			  state_in_fill(in, e->data_off, e->device, &f) :
			  -EBADMSG;

	if (!ret) {
		d.pieces = f.pieces;
		d.nr_pieces = f.nr_pieces;
		ret = vmu_text_adopt(devs[e->device].vmu, &d);
	}
	if (ret)
		snprintf(msg, msglen, "a text entry of %llu bytes%s%s: %s",
			 (unsigned long long)e->size,
			 e->owner[0] ? " of tenant " : "", e->owner,
			 strerror(-ret));
	return ret;
}

/* Which tensor and object slots the entries after a session's fill:
 * @nr and @nr_obj of them, in one array (the objects' after). */
static int live_slots(struct state_in *in, uint32_t nr, uint32_t nr_obj,
		      bool **out)
{
	size_t pos = in->pos;
	const void *p;
	uint32_t type, len;
	bool *live = calloc((size_t)nr + nr_obj + 1, sizeof(*live));
	int ret = 0;

	if (!live)
		return -ENOMEM;
	/* up to the next session's entry, or a connection's */
	while (!ret && (p = state_in_next(in, &type, &len)) &&
	       type != DJINN_STATE_SESSION && type != DJINN_STATE_CONN) {
		bool tensor = type == DJINN_STATE_TENSOR;

		if (!tensor && type != DJINN_STATE_OBJ)
			continue;
		uint32_t slot =
			tensor ? ((const struct djinn_state_tensor *)p)->slot :
				 ((const struct djinn_state_obj *)p)->slot;
		uint32_t max = tensor ? nr : nr_obj;
		bool *l = tensor ? live : live + nr;

		if (slot >= max || l[slot])
			ret = -EBADMSG;
		else
			l[slot] = true;
	}
	in->pos = pos;
	if (ret) {
		free(live);
		return ret;
	}
	*out = live;
	return 0;
}

/* What the record keeps of upload @name of @s's tenant on its device, in
 * *@k: false if it has no UPLOAD entry for it. */
static bool upload_of(const struct state_in *in, const struct session *s,
		      const char *name, struct model_kept *k)
{
	struct state_in c = *in;
	const struct djinn_state_upload *u;
	uint32_t type, len;

	state_in_rewind(&c);
	while ((u = state_in_next(&c, &type, &len))) {
		char n[MODEL_NAME_MAX];

		if (type != DJINN_STATE_UPLOAD || u->device != s->dev->index ||
		    strcmp(u->owner, s->tenant))
			continue;
		model_upload_name(u->src, n);
		if (strcmp(n, name))
			continue;
		memset(k, 0, sizeof(*k));
		memcpy(k->src, u->src, sizeof(k->src));
		memcpy(k->fp, u->fp, sizeof(k->fp));
		snprintf(k->owner, sizeof(k->owner), "%s", u->owner);
		k->config = u + 1;
		k->config_len = u->config_len;
		k->dtype = u->dtype;
		k->prefixed = u->prefixed;
		k->bytes = u->bytes;
		k->blob = u->data_off == DJINN_STATE_IN_POOL ?
				  NULL :
				  in->data + u->data_off;
		return true;
	}
	return false;
}

/* A restore that failed: the uploads it made again and the text entries
 * it put into the index go again (their sessions have ended). */
static void undo_restore(struct state_in *in, struct device *devs,
			 unsigned int nr_dev)
{
	const void *p;
	uint32_t type, len;

	state_in_rewind(in);
	while ((p = state_in_next(in, &type, &len))) {
		const struct djinn_state_upload *u = p;
		const struct djinn_state_text *e = p;
		char n[MODEL_NAME_MAX];

		if (type == DJINN_STATE_TEXT_ENTRY && e->device < nr_dev) {
			vmu_text_evict(devs[e->device].vmu, e->fp,
				       e->owner[0] ? e->owner : NULL);
		} else if (type == DJINN_STATE_UPLOAD && u->device < nr_dev) {
			model_upload_name(u->src, n);
			model_store_evict(devs[u->device].models, n, NULL, 0);
		}
	}
}

static int restore_obj(struct state_in *in, struct session *s,
		       const struct djinn_state_obj *e, char *why,
		       size_t whylen)
{
	const float *logits =
		e->have_logits ? (const float *)(in->data + e->logits_off) :
				 NULL;
	struct vmu_fill cache;
	uint8_t lost = e->flags & DJINN_STATE_OBJ_CRASH ? LOST_CRASH :
							  LOST_DEVICE;

	if (e->lost)
		return svc_obj_restore_lost(
			s, e->slot,
			e->kind == DJINN_STATE_MODEL ? SOBJ_MODEL : SOBJ_CTX,
			e->lost, why, whylen);
	if (e->kind == DJINN_STATE_MODEL) {
		struct model_kept k;
		bool up = e->flags & DJINN_STATE_OBJ_UPLOAD;
		int ret;

		if (up && !upload_of(in, s, e->model, &k)) {
			snprintf(why, whylen, "no entry for it in the record");
			return -EBADMSG;
		}
		ret = svc_model_restore(s, e->slot, e->model, e->fp,
					up ? &k : NULL, why, whylen);
		if (!ret || !(e->flags & DJINN_STATE_OBJ_LOSSY))
			return ret;
		/* its session's device memory was gone: one that cannot be
		 * opened again is lost with it, not the whole restore */
		log_warn("state: session %llu: model %s in slot %u comes back "
			 "lost: %s",
			 (unsigned long long)s->id, e->model, e->slot, why);
		return svc_obj_restore_lost(s, e->slot, SOBJ_MODEL, lost, why,
					    whylen);
	}
	if ((e->flags & DJINN_STATE_OBJ_LOSSY) &&
	    svc_obj_is_lost(s, e->model_slot, SOBJ_MODEL))
		return svc_obj_restore_lost(s, e->slot, SOBJ_CTX, lost, why,
					    whylen);
	if (state_in_fill(in, e->cache_off, s->dev->index, &cache)) {
		snprintf(why, whylen, "its cache is in another device's pool");
		return -EBADMSG;
	}
	return svc_ctx_restore(s, e->slot, e->model_slot, e->max_tokens, e->len,
			       &cache, e->cache_bytes, logits, e->logits_bytes,
			       e->flags & DJINN_STATE_OBJ_PAUSED, why, whylen);
}

/* One entry after session @s's: its tensors and objects. */
static int restore_one(struct state_in *in, struct session *s, uint32_t type,
		       const void *p, unsigned int *nr_t, unsigned int *nr_o,
		       char *msg, size_t msglen)
{
	const struct djinn_state_obj *ob = p;
	const struct djinn_state_tensor *te = p;
	char why[160] = "";
	int ret;

	if (!s) {
		snprintf(msg, msglen, "a %s before any session",
			 type == DJINN_STATE_OBJ    ? "model or context" :
			 type == DJINN_STATE_RESULT ? "result record" :
			 type == DJINN_STATE_PAUSE  ? "paused step" :
						      "tensor");
		return -EBADMSG;
	}
	if (type == DJINN_STATE_PAUSE) {
		const struct djinn_state_pause *z = p;
		struct model_ctx_pause pz = {
			.layer = z->layer,
			.T = z->T,
			.want = z->want,
			.done = z->done,
			.brk = z->brk,
			.all = z->all,
			.decode = z->decode,
			.desc = z->desc,
			.sp = { z->sp.temperature, z->sp.top_k, z->sp.top_p,
				z->sp.seed },
			.rng = z->rng,
			.hidden_bytes = z->hidden_bytes,
			.kv_bytes = z->kv_bytes,
			.tokens = (const int32_t *)(z + 1),
		};

		struct vmu_fill hidden, kv;

		ret = state_in_fill(in, z->hidden_off, s->dev->index, &hidden);
		if (!ret)
			ret = state_in_fill(in, z->kv_off, s->dev->index, &kv);
		if (ret)
			snprintf(why, sizeof(why),
				 "its bytes are in another device's pool");
		else
			ret = svc_ctx_pause_restore(s, z->slot, &pz, &hidden,
						    &kv, z->flags, why,
						    sizeof(why));
		if (ret)
			snprintf(msg, msglen,
				 "session %llu: the paused step of the context "
				 "in slot %u: %s",
				 (unsigned long long)s->id, z->slot,
				 why[0] ? why : strerror(-ret));
		return ret;
	}
	if (type == DJINN_STATE_RESULT) {
		const struct djinn_state_result *re = p;
		const struct djinn_tensor_desc *d = (const void *)(re + 1);

		ret = session_result_restore(s, re->index, re->request_id,
					     re->nr, re->error, d,
					     (const uint64_t *)(d + re->nr));
		if (ret)
			snprintf(msg, msglen,
				 "session %llu: result record of request "
				 "%llu: %s",
				 (unsigned long long)s->id,
				 (unsigned long long)re->request_id,
				 strerror(-ret));
		return ret;
	}
	if (type == DJINN_STATE_TENSOR) {
		ret = restore_tensor(in, s, te, why, sizeof(why));
		if (ret)
			snprintf(msg, msglen,
				 "session %llu: tensor in slot %u: %s",
				 (unsigned long long)s->id, te->slot,
				 why[0] ? why : strerror(-ret));
		*nr_t += !ret;
		return ret;
	}
	ret = restore_obj(in, s, ob, why, sizeof(why));
	if (ret)
		snprintf(msg, msglen, "session %llu: %s in slot %u (%s): %s",
			 (unsigned long long)s->id,
			 ob->kind == DJINN_STATE_MODEL ? "model" : "context",
			 ob->slot, ob->model, why[0] ? why : strerror(-ret));
	*nr_o += !ret;
	return ret;
}

int svc_state_restore(struct state_in *in, struct session_table *t,
		      struct device *devs, unsigned int nr_dev, char *msg,
		      size_t msglen)
{
	uint64_t *ids = calloc(in->hdr->nr_sessions + 1, sizeof(*ids));
	uint64_t next_id = t->next_id;
	struct session *s = NULL;
	const void *p;
	uint32_t type, len;
	unsigned int nr_s = 0, nr_t = 0, nr_o = 0;
	int ret = 0;

	if (!ids) {
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	state_in_rewind(in);
	while (!ret && (p = state_in_next(in, &type, &len))) {
		const struct djinn_state_session *e = p;
		bool *live = NULL;

		if (type == DJINN_STATE_TENSOR || type == DJINN_STATE_OBJ ||
		    type == DJINN_STATE_RESULT || type == DJINN_STATE_PAUSE) {
			ret = restore_one(in, s, type, p, &nr_t, &nr_o, msg,
					  msglen);
			continue;
		}
		/* where the entries after it find their bytes */
		if (type == DJINN_STATE_POOL || type == DJINN_STATE_PIECES ||
		    type == DJINN_STATE_UPLOAD)
			continue;
		if (type == DJINN_STATE_TEXT_ENTRY) {
			ret = restore_text(in, p, devs, nr_dev, msg, msglen);
			continue;
		}
		s = NULL;
		if (type != DJINN_STATE_SESSION)
			continue;
		if (e->device >= nr_dev || nr_s >= in->hdr->nr_sessions) {
			snprintf(
				msg, msglen,
				"session %llu: on device %u of %u, entry %u of "
				"%u",
				(unsigned long long)e->id, e->device, nr_dev,
				nr_s + 1, in->hdr->nr_sessions);
			ret = -EBADMSG;
			break;
		}
		ret = live_slots(in, e->nr_slots, e->nr_obj_slots, &live);
		if (!ret)
			ret = session_restore(t, &devs[e->device], e,
					      (const uint32_t *)(e + 1), live,
					      live + e->nr_slots, &s);
		free(live);
		if (ret) {
			snprintf(msg, msglen, "session %llu: %s",
				 (unsigned long long)e->id, strerror(-ret));
			s = NULL;
			break;
		}
		ids[nr_s++] = s->id;
	}
	if (ret) {
		/* all or nothing: the sessions restored so far go again */
		for (unsigned int i = 0; i < nr_s; i++) {
			s = session_get(t, ids[i]);
			if (!s)
				continue;
			s->lease_disown = true;
			session_end(t, s, SESSION_SHUTDOWN);
			session_put(s);
		}
		t->next_id = next_id;
		free(ids);
		undo_restore(in, devs, nr_dev);
		return ret;
	}
	free(ids);
	if (in->hdr->next_session > t->next_id)
		t->next_id = in->hdr->next_session;
	log_notice("state: %u sessions, %u tensors and %u models and "
		   "contexts restored",
		   nr_s, nr_t, nr_o);
	return 0;
}
