// SPDX-License-Identifier: MIT
/*
 * The VMU's text segment: shared read-only entries named by the SHA-256
 * of their bytes, the index that finds them, each session's references,
 * and uploads in progress.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "vmu/vmu_private.h"

/* ---------------------------------------------------------------------- */
/* Text segment */

void vmu_fingerprint(const void *buf, size_t len, uint8_t fp[VMU_FP_LEN])
{
	EVP_Digest(buf, len, fp, NULL, EVP_sha256(), NULL);
}

static uint64_t fp_hash(const struct vmu *v, const uint8_t *fp)
{
	uint64_t h;

	memcpy(&h, fp, sizeof(h));
	return h & (v->hash_size - 1);
}

/*
 * After a device fault, every entry made before it holds zeros: take
 * them out of the index (a new insert of the same bytes makes a new
 * entry), free the unheld ones now and the held ones when their last
 * holder lets go. Once per fault, on the first lookup after it. Lock
 * held.
 */
void vmu_text_expire_locked(struct vmu *v)
{
	uint64_t now = vmu_faults(v), n = 0;

	if (now == v->text_epoch)
		return;
	v->text_epoch = now;
	for (uint64_t i = 0; i < v->hash_size; i++) {
		struct vmu_text **p = &v->hash[i];

		while (*p) {
			struct vmu_text *t = *p;

			if (t->epoch == now) {
				p = &t->hnext;
				continue;
			}
			*p = t->hnext;
			t->hnext = NULL;
			t->stale = true;
			v->nr_text--;
			n++;
			if (!t->holders)
				vmu_text_free_locked(v, t);
		}
	}
	v->st.text_lost += n;
}

/* The entry of scope @owner ("" : shared) with fingerprint @fp. */
static struct vmu_text *text_find(struct vmu *v, const uint8_t *fp,
				  const char *owner)
{
	struct vmu_text *t;

	vmu_text_expire_locked(v);
	t = v->hash[fp_hash(v, fp)];

	while (t && (memcmp(t->fp, fp, VMU_FP_LEN) || strcmp(t->owner, owner)))
		t = t->hnext;
	return t;
}

bool vmu_text_trim_tenant_locked(struct vmu *v, struct vmu_tenant *t,
				 uint64_t bytes)
{
	struct vmu_text *e, *n;

	list_for_each_entry_safe(e, n, &v->text_lru, lru) {
		if (!vmu_over_tenant_quota(t, bytes))
			break;
		if (e->owner_t != t)
			continue;
		/* the caller's session keeps @t */
		vmu_text_free_locked(v, e);
		v->st.text_evictions++;
	}
	return !vmu_over_tenant_quota(t, bytes);
}

const char *vmu_session_tenant(const struct vmu_session *s)
{
	return s->tenant->name;
}

/* The scope @s looks in and inserts into. */
static const char *scope(const struct vmu_session *s, bool shared)
{
	return shared ? "" : s->tenant->name;
}

static void text_hash_add(struct vmu *v, struct vmu_text *t)
{
	struct vmu_text **slot;

	if (v->nr_text >= v->hash_size) {
		uint64_t old = v->hash_size, n = old * 2;
		struct vmu_text **nh = calloc(n, sizeof(*nh));

		if (nh) {
			struct vmu_text **oh = v->hash;

			v->hash = nh;
			v->hash_size = n;
			for (uint64_t i = 0; i < old; i++) {
				while (oh[i]) {
					struct vmu_text *e = oh[i];

					oh[i] = e->hnext;
					slot = &v->hash[fp_hash(v, e->fp)];
					e->hnext = *slot;
					*slot = e;
				}
			}
			free(oh);
		}
	}
	slot = &v->hash[fp_hash(v, t->fp)];
	t->hnext = *slot;
	*slot = t;
	v->nr_text++;
	v->st.seg[VMU_SEG_TEXT].entries++;
}

static void text_hash_del(struct vmu *v, struct vmu_text *t)
{
	struct vmu_text **p = &v->hash[fp_hash(v, t->fp)];

	while (*p != t)
		p = &(*p)->hnext;
	*p = t->hnext;
	v->nr_text--;
	v->st.seg[VMU_SEG_TEXT].entries--;
}

/* Put @t (its mapping, size and epoch set) into the index, unheld: its
 * name @fp, its scope @owner ("" shared) and, for a tenant's, that
 * tenant @owner_t, charged with its bytes. Lock held. */
static void text_publish_locked(struct vmu *v, struct vmu_text *t,
				const uint8_t *fp, const char *owner,
				struct vmu_tenant *owner_t)
{
	memcpy(t->fp, fp, VMU_FP_LEN);
	snprintf(t->owner, sizeof(t->owner), "%s", owner);
	if (owner_t) {
		/* its tenant's, counted against its quota */
		t->owner_t = owner_t;
		owner_t->texts++;
		owner_t->use.text_bytes += t->m.mapped;
	}
	/* Published unheld; text_hold() takes it off the LRU. */
	list_add_tail(&t->lru, &v->text_lru);
	v->st.text_cached += t->m.mapped;
	text_hash_add(v, t);
}

/* Free an unheld entry. Lock held throughout: unmapping one range is
 * quick, and eviction must not race with a lookup that revives it. */
void vmu_text_free_locked(struct vmu *v, struct vmu_text *t)
{
	uint64_t bytes = t->m.mapped;

	if (t->stale) /* out of the index already */
		v->st.seg[VMU_SEG_TEXT].entries--;
	else
		text_hash_del(v, t);
	list_del_init(&t->lru);
	v->st.text_cached -= bytes;
	if (t->owner_t) {
		t->owner_t->use.text_bytes -= bytes;
		t->owner_t->texts--;
		vmu_tenant_put_locked(t->owner_t);
	}
	vmu_mapping_release(v, &t->m);
	vmu_seg_add(v, VMU_SEG_TEXT, -(int64_t)bytes);
	v->st.seg[VMU_SEG_TEXT].frees++;
	vmu_uncharge(v, bytes);
	free(t);
}

/* A session may hold hundreds of entries (a model's tensors): its
 * references are hashed by entry address. */
static uint32_t ref_bucket(uint32_t size, const struct vmu_text *t)
{
	return (uint32_t)(((uintptr_t)t >> 6) * 0x9e3779b97f4a7c15ull >> 40) &
	       (size - 1);
}

static struct vmu_text_ref *ref_find(struct vmu_session *s,
				     const struct vmu_text *t)
{
	struct vmu_text_ref *ref;

	if (!s->ref_hash_size)
		return NULL;
	ref = s->ref_hash[ref_bucket(s->ref_hash_size, t)];
	while (ref && ref->t != t)
		ref = ref->hnext;
	return ref;
}

static int ref_insert(struct vmu_session *s, struct vmu_text_ref *ref)
{
	struct vmu_text_ref **slot;

	if (s->nr_refs >= s->ref_hash_size) {
		uint32_t n = s->ref_hash_size ? s->ref_hash_size * 2 : 16;
		struct vmu_text_ref **h = calloc(n, sizeof(*h)), *e;

		if (!h)
			return -ENOMEM;
		list_for_each_entry(e, &s->refs, node) {
			slot = &h[ref_bucket(n, e->t)];
			e->hnext = *slot;
			*slot = e;
		}
		free(s->ref_hash);
		s->ref_hash = h;
		s->ref_hash_size = n;
	}
	slot = &s->ref_hash[ref_bucket(s->ref_hash_size, ref->t)];
	ref->hnext = *slot;
	*slot = ref;
	list_add_tail(&ref->node, &s->refs);
	s->nr_refs++;
	return 0;
}

static void ref_remove(struct vmu_session *s, struct vmu_text_ref *ref)
{
	struct vmu_text_ref **p =
		&s->ref_hash[ref_bucket(s->ref_hash_size, ref->t)];

	while (*p != ref)
		p = &(*p)->hnext;
	*p = ref->hnext;
	list_del_init(&ref->node);
	s->nr_refs--;
	free(ref);
}

/* Take a reference for @s on @t. Lock held. */
static int text_hold(struct vmu_session *s, struct vmu_text *t)
{
	struct vmu *v = s->vmu;
	struct vmu_text_ref *ref = ref_find(s, t);

	if (!ref) {
		ref = calloc(1, sizeof(*ref));
		if (!ref)
			return -ENOMEM;
		ref->t = t;
		if (ref_insert(s, ref)) {
			free(ref);
			return -ENOMEM;
		}
	}
	ref->count++;
	if (!t->holders++) {
		list_del_init(&t->lru);
		v->st.text_cached -= t->m.mapped;
	}
	s->use.text_refs++;
	s->tenant->use.text_refs++;
	v->st.seg[VMU_SEG_TEXT].allocs++;
	return 0;
}

/* Drop @count references of @ref. Lock held. */
void vmu_text_unhold(struct vmu_session *s, struct vmu_text_ref *ref,
		     unsigned long count)
{
	struct vmu *v = s->vmu;
	struct vmu_text *t = ref->t;

	ref->count -= count;
	t->holders -= count;
	s->use.text_refs -= count;
	s->tenant->use.text_refs -= count;
	if (!ref->count)
		ref_remove(s, ref);
	if (!t->holders) {
		list_add_tail(&t->lru, &v->text_lru);
		v->st.text_cached += t->m.mapped;
		if (t->stale) /* lost in a fault: nobody can find it */
			vmu_text_free_locked(v, t);
	}
}

static int lookup(struct vmu_session *s, const uint8_t fp[VMU_FP_LEN],
		  bool shared, struct vmu_text **out)
{
	struct vmu *v = s->vmu;
	struct vmu_text *t;
	int ret = -ENOENT;

	vmu_lock(v);
	t = text_find(v, fp, scope(s, shared));
	if (t) {
		ret = text_hold(s, t);
		if (!ret) {
			v->st.text_hits++;
			*out = t;
		}
	} else {
		v->st.text_misses++;
	}
	vmu_unlock(v);
	return ret;
}

int vmu_text_lookup(struct vmu_session *s, const uint8_t fp[VMU_FP_LEN],
		    struct vmu_text **out)
{
	return lookup(s, fp, false, out);
}

int vmu_text_lookup_shared(struct vmu_session *s, const uint8_t fp[VMU_FP_LEN],
			   struct vmu_text **out)
{
	return lookup(s, fp, true, out);
}

int vmu_text_put(struct vmu_session *s, struct vmu_text *t)
{
	struct vmu_text_ref *ref;
	int ret = -ENOENT;

	vmu_lock(s->vmu);
	ref = t ? ref_find(s, t) : NULL;
	if (ref) {
		vmu_text_unhold(s, ref, 1);
		ret = 0;
	}
	vmu_unlock(s->vmu);
	return ret;
}

int vmu_text_evict(struct vmu *v, const uint8_t fp[VMU_FP_LEN],
		   const char *owner)
{
	struct vmu_text *t;
	int ret = -ENOENT;

	vmu_lock(v);
	t = text_find(v, fp, owner ? owner : "");
	if (t && t->holders) {
		ret = -EBUSY;
	} else if (t) {
		vmu_text_free_locked(v, t);
		v->st.text_evictions++;
		ret = 0;
	}
	vmu_unlock(v);
	return ret;
}

uint64_t vmu_text_addr(const struct vmu_text *t)
{
	return t->m.addr;
}

uint64_t vmu_text_size(const struct vmu_text *t)
{
	return t->size;
}

const uint8_t *vmu_text_fp(const struct vmu_text *t)
{
	return t->fp;
}

bool vmu_text_shared(const struct vmu_text *t)
{
	return !t->owner[0];
}

/*
 * Back @m with @bytes (granule-rounded) of the text segment: reserved,
 * charged (vmu_charge() may reclaim), mapped and counted. 0, or an errno
 * with nothing held. The granule's tail past an entry's size is not
 * zeroed: every read of an entry is bounded by its size, and zeroing
 * would cost a whole granule for a small entry.
 */
static int text_map(struct vmu *v, struct vmu_mapping *m, uint64_t bytes,
		    const struct vmu_piece *pcs, unsigned int nr)
{
	uint64_t from_resv;
	int ret;

	ret = vmu_mapping_reserve(v, m, bytes);
	if (ret)
		return ret;
	vmu_lock(v);
	ret = vmu_charge(v, bytes, NULL, &from_resv);
	vmu_unlock(v);
	if (!ret) {
		ret = nr ? vmu_mapping_adopt(v, m, bytes, pcs, nr) :
			   vmu_mapping_grow(v, m, bytes);
		vmu_lock(v);
		if (ret)
			vmu_uncharge(v, bytes);
		else
			vmu_seg_add(v, VMU_SEG_TEXT, (int64_t)bytes);
		vmu_unlock(v);
	}
	if (ret)
		vmu_mapping_release(v, m);
	return ret;
}

/* Give text_map()'s memory back. Lock held. */
static void text_unmap_locked(struct vmu *v, struct vmu_mapping *m)
{
	uint64_t bytes = m->mapped;

	vmu_mapping_release(v, m);
	vmu_seg_add(v, VMU_SEG_TEXT, -(int64_t)bytes);
	vmu_uncharge(v, bytes);
}

/* Give back what an upload holds of its tenant's quota. Lock held. */
static void upload_unhold(struct vmu_text_upload *u)
{
	u->s->tenant->uploading -= u->held;
	u->held = 0;
}

/* Free an upload's memory. Lock held; the upload is off every list. */
void vmu_upload_free_locked(struct vmu *v, struct vmu_text_upload *u)
{
	upload_unhold(u);
	text_unmap_locked(v, &u->m);
	EVP_MD_CTX_free(u->md);
	free(u);
}

static int upload_start(struct vmu_session *s, uint64_t size, bool hash,
			bool shared, struct vmu_text_upload **out)
{
	struct vmu *v = s->vmu;
	uint64_t bytes = vmu_round(v, size);
	struct vmu_text_upload *u;
	int ret;

	if (!size || size > UINT64_MAX - v->gran)
		return -EINVAL;
	if (bytes > v->prov->capacity)
		return -E2BIG;
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->shared = shared;
	u->s = s;
	/* A tenant's text counts against its quota with its data (served
	 * weights, in the shared scope, against no one's), from the
	 * upload's start: held until it is committed or dropped. */
	if (!shared) {
		bool over;

		vmu_lock(v);
		over = !vmu_text_trim_tenant_locked(v, s->tenant, bytes);
		if (over) {
			v->st.quota_refusals++;
		} else {
			u->held = bytes;
			s->tenant->uploading += bytes;
		}
		vmu_unlock(v);
		if (over) {
			free(u);
			return -EDQUOT;
		}
	}
	if (hash) {
		u->md = EVP_MD_CTX_new();
		if (!u->md || !EVP_DigestInit_ex(u->md, EVP_sha256(), NULL)) {
			ret = -ENOMEM;
			goto out_free;
		}
	}
	ret = text_map(v, &u->m, bytes, NULL, 0);
	if (ret)
		goto out_free;
	vmu_lock(v);
	u->size = size;
	u->epoch = vmu_faults(v);
	list_add_tail(&u->node, &s->uploads);
	vmu_unlock(v);
	*out = u;
	return 0;

out_free:
	vmu_lock(v);
	upload_unhold(u);
	vmu_unlock(v);
	EVP_MD_CTX_free(u->md);
	free(u);
	return ret;
}

int vmu_text_begin(struct vmu_session *s, uint64_t size,
		   struct vmu_text_upload **out)
{
	return upload_start(s, size, true, false, out);
}

int vmu_text_begin_shared(struct vmu_session *s, uint64_t size,
			  struct vmu_text_upload **out)
{
	return upload_start(s, size, true, true, out);
}

int vmu_text_write(struct vmu_text_upload *u, const void *src, uint64_t len)
{
	struct vmu_provider *p = u->s->vmu->prov;
	int ret;

	if (len > u->size - u->written)
		return -ERANGE;
	ret = p->ops->copy_htod(p, u->m.addr + u->written, src, len);
	if (ret)
		return ret;
	if (u->md && !EVP_DigestUpdate(u->md, src, len))
		return -EIO;
	u->written += len;
	return 0;
}

void vmu_text_abort(struct vmu_text_upload *u)
{
	struct vmu *v = u->s->vmu;

	vmu_lock(v);
	list_del_init(&u->node);
	vmu_upload_free_locked(v, u);
	vmu_unlock(v);
}

int vmu_text_commit(struct vmu_text_upload *u, const uint8_t *expect,
		    struct vmu_text **out, bool *created)
{
	struct vmu_session *s = u->s;
	struct vmu *v = s->vmu;
	uint8_t fp[VMU_FP_LEN];
	struct vmu_text *t;
	int ret;

	if (u->written != u->size) {
		ret = -EINVAL; /* short upload */
		goto out_abort;
	}
	if (!u->md) {
		memcpy(fp, expect, VMU_FP_LEN); /* hashed by vmu_text_insert */
	} else if (!EVP_DigestFinal_ex(u->md, fp, NULL)) {
		ret = -EIO;
		goto out_abort;
	} else if (expect && memcmp(fp, expect, VMU_FP_LEN)) {
		ret = -EBADMSG;
		goto out_abort;
	}
	ret = v->prov->ops->set_access(v->prov, u->m.addr, u->m.vsize,
				       VMU_ACCESS_READ);
	if (ret)
		goto out_abort;

	vmu_lock(v);
	if (u->epoch != vmu_faults(v)) {
		/* its first bytes went to memory a fault has lost since */
		list_del_init(&u->node);
		vmu_upload_free_locked(v, u);
		vmu_unlock(v);
		return -EIO;
	}
	list_del_init(&u->node);
	t = text_find(v, fp, scope(s, u->shared));
	/* the reservation becomes the entry's bytes, unless the quota was
	 * lowered meanwhile (a reload): checked again */
	upload_unhold(u);
	if (!t && !u->shared && vmu_over_tenant_quota(s->tenant, u->m.mapped)) {
		v->st.quota_refusals++;
		vmu_upload_free_locked(v, u);
		vmu_unlock(v);
		return -EDQUOT;
	}
	if (t) {
		/* Someone inserted the same bytes meanwhile: use theirs. */
		vmu_upload_free_locked(v, u);
		*created = false;
	} else {
		t = calloc(1, sizeof(*t));
		if (!t) {
			vmu_upload_free_locked(v, u);
			vmu_unlock(v);
			return -ENOMEM;
		}
		t->m = u->m;
		t->size = u->size;
		t->epoch = u->epoch;
		text_publish_locked(v, t, fp, scope(s, u->shared),
				    u->shared ? NULL : s->tenant);
		EVP_MD_CTX_free(u->md);
		free(u);
		*created = true;
	}
	ret = text_hold(s, t);
	if (!ret)
		*out = t;
	vmu_unlock(v);
	return ret;

out_abort:
	vmu_text_abort(u);
	return ret;
}

int vmu_text_insert(struct vmu_session *s, const void *src, uint64_t size,
		    struct vmu_text **out, bool *created)
{
	struct vmu_text_upload *u;
	uint8_t fp[VMU_FP_LEN];
	int ret;

	if (!size)
		return -EINVAL;
	/* Hash first: a hit costs no device memory and no copy. */
	vmu_fingerprint(src, size, fp);
	ret = vmu_text_lookup(s, fp, out);
	if (ret != -ENOENT) {
		if (!ret)
			*created = false;
		return ret;
	}
	ret = upload_start(s, size, false, false, &u);
	if (ret)
		return ret;
	ret = vmu_text_write(u, src, size);
	if (ret) {
		vmu_text_abort(u);
		return ret;
	}
	return vmu_text_commit(u, fp, out, created);
}

/* ---------------------------------------------------------------------- */
/* A restart's text */

int vmu_text_pieces(struct vmu *v, const struct vmu_text *t,
		    struct vmu_piece **out, unsigned int *nr)
{
	return vmu_mapping_pieces(v, &t->m, t->m.mapped, out, nr);
}

int vmu_text_each(struct vmu *v,
		  int (*fn)(void *arg, const struct vmu_text_desc *d),
		  void *arg)
{
	int ret = 0;

	if (!v->prov->ops->pieces)
		return -EOPNOTSUPP;
	vmu_lock(v);
	vmu_text_expire_locked(v); /* a fault's zeros are not kept */
	for (uint64_t i = 0; i < v->hash_size && !ret; i++) {
		for (struct vmu_text *t = v->hash[i]; t && !ret; t = t->hnext) {
			struct vmu_text_desc d = { .fp = t->fp,
						   .owner = t->owner,
						   .size = t->size };
			struct vmu_piece *p;

			ret = vmu_mapping_pieces(v, &t->m, t->m.mapped, &p,
						 &d.nr_pieces);
			if (ret)
				break;
			d.pieces = p;
			ret = fn(arg, &d);
			free(p);
		}
	}
	vmu_unlock(v);
	return ret;
}

int vmu_text_adopt(struct vmu *v, const struct vmu_text_desc *d)
{
	struct vmu_tenant *owner = NULL;
	struct vmu_text *t;
	int ret;

	if (!d->size || !d->nr_pieces || strlen(d->owner) >= VMU_NAME_MAX)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	ret = text_map(v, &t->m, vmu_round(v, d->size), d->pieces,
		       d->nr_pieces);
	if (ret) {
		free(t);
		return ret;
	}
	ret = v->prov->ops->set_access(v->prov, t->m.addr, t->m.vsize,
				       VMU_ACCESS_READ);
	vmu_lock(v);
	if (!ret && text_find(v, d->fp, d->owner))
		ret = -EEXIST;
	if (!ret && d->owner[0])
		ret = vmu_tenant_get_locked(v, d->owner, &owner);
	if (ret) {
		text_unmap_locked(v, &t->m);
		vmu_unlock(v);
		free(t);
		return ret;
	}
	t->size = d->size;
	t->epoch = vmu_faults(v);
	text_publish_locked(v, t, d->fp, d->owner, owner);
	vmu_unlock(v);
	return 0;
}

/* ---------------------------------------------------------------------- */
/* Areas */

struct vmu_text_area {
	struct vmu_mapping m;
};

int vmu_text_area_alloc(struct vmu *v, uint64_t size,
			struct vmu_text_area **out, char *msg, size_t msglen)
{
	uint64_t bytes = vmu_round(v, size);
	struct vmu_text_area *a;
	struct vmu_stats st;
	int ret;

	if (!size || size > UINT64_MAX - v->gran)
		return -EINVAL;
	if (bytes > v->prov->capacity) {
		snprintf(msg, msglen,
			 "need %llu bytes, the device has %llu in all",
			 (unsigned long long)bytes,
			 (unsigned long long)v->prov->capacity);
		return -E2BIG;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	ret = text_map(v, &a->m, bytes, NULL, 0);
	if (ret) {
		vmu_get_stats(v, &st);
		snprintf(msg, msglen, "need %llu bytes, %llu free: %s",
			 (unsigned long long)bytes, (unsigned long long)st.free,
			 strerror(-ret));
		free(a);
		return ret;
	}
	*out = a;
	return 0;
}

void vmu_text_area_free(struct vmu *v, struct vmu_text_area *a)
{
	if (!a)
		return;
	vmu_lock(v);
	text_unmap_locked(v, &a->m);
	vmu_unlock(v);
	free(a);
}

uint64_t vmu_text_area_addr(const struct vmu_text_area *a)
{
	return a->m.addr;
}
