// SPDX-License-Identifier: MIT
/*
 * The model store. See store.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/evp.h>

#include "clock.h"
#include "errmsg.h"
#include "list.h"
#include "model/forward.h"
#include "model/store.h"
#include "model/store_test.h"

/*
 * A listed model. While @loading, only @m.name is set: the loader fills
 * the rest outside the lock, and other opens of the name wait on the
 * store's condition. A load that fails unlists the entry; @waiters
 * counts the opens still looking at it, and the last one frees it.
 *
 * @epoch is the device's fault count when its load began. After a
 * fault its weights are zeros: the entry is unlisted (@gone) so that
 * the next open loads the files again into a new one, and freed when
 * its last holder (a session the fault has failed) and waiter go.
 */
struct store_model {
	struct list_head node;
	struct model m;
	unsigned int holders;
	bool loading;
	bool failed;
	bool gone;
	unsigned int waiters;
	uint64_t epoch;
	bool uploaded; /* named upload-HEX, by @src */
	uint8_t src[VMU_FP_LEN];
	/* an upload's tenant: its weights are that tenant's text, so
	 * another tenant sending the same files gets an entry of its own */
	char owner[DJINN_TENANT_LEN];
	/* an upload's config.json, which a restart keeps */
	void *config;
	size_t config_len;
	/* the budget it was loaded under (placed_bytes 0: none) */
	uint64_t placed_bytes;
	unsigned int placed_slots;
	struct list_head holds; /* struct model_hold, the store's lock */
	/* steps (model_step_enter()) and moves (model_relieve()) */
	pthread_mutex_t gate;
	pthread_cond_t gate_cv;
	unsigned int steps;
	bool moving, lost;
	uint64_t relieved; /* moves under pressure */
};

/* A budget set for a name (model_store_set_budget()). */
struct budget {
	struct list_head node;
	char name[MODEL_NAME_MAX];
	uint64_t bytes;
	unsigned int slots;
};

struct model_store {
	struct vmu *v;
	char *dir;
	struct list_head budgets;
	pthread_mutex_t lock; /* never held across a load */
	pthread_cond_t loaded; /* a load ended, well or not */
	struct list_head models;
	void (*hook)(void *arg, enum model_hook ev, const char *name);
	void *hook_arg;
	uint64_t loads; /* models loaded, served or uploaded: under @lock */
};

int model_store_create(struct vmu *v, const char *dir, struct model_store **out)
{
	struct model_store *ms = calloc(1, sizeof(*ms));

	if (!ms)
		return -ENOMEM;
	ms->dir = strdup(dir);
	if (!ms->dir) {
		free(ms);
		return -ENOMEM;
	}
	ms->v = v;
	pthread_mutex_init(&ms->lock, NULL);
	pthread_cond_init(&ms->loaded, NULL);
	INIT_LIST_HEAD(&ms->models);
	INIT_LIST_HEAD(&ms->budgets);
	*out = ms;
	return 0;
}

/* An entry whose load failed: nothing was loaded into it. */
static void failed_free(struct store_model *sm)
{
	fwd_plans_free(sm->m.plans);
	free(sm);
}

static void model_free(struct store_model *sm)
{
	list_del_init(&sm->node);
	model_stream_destroy(sm->m.stream);
	model_layout_free(&sm->m.layout);
	fwd_plans_free(sm->m.plans);
	free(sm->config);
	free(sm);
}

void model_store_destroy(struct model_store *ms)
{
	struct store_model *sm, *n;
	struct budget *b, *nb;

	if (!ms)
		return;
	list_for_each_entry_safe(sm, n, &ms->models, node)
		model_free(sm);
	list_for_each_entry_safe(b, nb, &ms->budgets, node) {
		list_del_init(&b->node);
		free(b);
	}
	pthread_cond_destroy(&ms->loaded);
	pthread_mutex_destroy(&ms->lock);
	free(ms->dir);
	free(ms);
}

int model_name_check(const char *name, char *msg, size_t msglen)
{
	size_t n = strnlen(name, MODEL_NAME_MAX);

	if (!n || n == MODEL_NAME_MAX)
		return errmsg(msg, msglen, -EINVAL,
			      "model name of %s bytes: 1 to %d allowed",
			      n ? "too many" : "0", MODEL_NAME_MAX - 1);
	if (name[0] == '.')
		return errmsg(msg, msglen, -EINVAL,
			      "model name '%.*s' starts with '.'", (int)n,
			      name);
	for (size_t i = 0; i < n; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == '-'))
			return errmsg(
				msg, msglen, -EINVAL,
				"model name: byte %zu (0x%02x) is not one "
				"of [A-Za-z0-9._-]",
				i, (unsigned char)c);
	}
	return 0;
}

/* Unlist every model loaded before the device's last fault (their
 * weights are lost); free those nobody uses. Lock held. */
static void expire_locked(struct model_store *ms)
{
	uint64_t now = vmu_faults(ms->v);
	struct store_model *sm, *n;

	list_for_each_entry_safe(sm, n, &ms->models, node) {
		if (sm->loading || sm->epoch == now)
			continue;
		sm->gone = true;
		if (!sm->holders && !sm->waiters)
			model_free(sm);
		else
			list_del_init(&sm->node);
	}
}

/* A directory model, or an uploaded one: two namespaces, so an upload
 * can never stand in for a directory model of the same name. */
/* The served model @name (@owner NULL), or the upload @name of tenant
 * @owner. */
static struct store_model *find(struct model_store *ms, const char *name,
				const char *owner)
{
	struct store_model *sm;

	list_for_each_entry(sm, &ms->models, node)
		if (sm->uploaded == !!owner && !strcmp(sm->m.name, name) &&
		    (!owner || !strcmp(sm->owner, owner)))
			return sm;
	return NULL;
}

/* Any model of that name, for evict: the served one, else an upload. */
static struct store_model *find_any(struct model_store *ms, const char *name)
{
	struct store_model *sm;

	list_for_each_entry(sm, &ms->models, node)
		if (!sm->uploaded && !strcmp(sm->m.name, name))
			return sm;
	list_for_each_entry(sm, &ms->models, node)
		if (!strcmp(sm->m.name, name))
			return sm;
	return NULL;
}

/* ---------------------------------------------------------------------- */
/* Loading */

static int hash_fn(void *arg, const void *buf, uint64_t len)
{
	return EVP_DigestUpdate(arg, buf, len) ? 0 : -EIO;
}

static int upload_fn(void *arg, const void *buf, uint64_t len)
{
	return vmu_text_write(arg, buf, len);
}

/* The SHA-256 of the blob's first @bytes, read from the mappings. */
static int fingerprint(const struct model_layout *L, uint64_t bytes,
		       uint8_t fp[VMU_FP_LEN])
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	int ret = -ENOMEM;

	if (!md)
		return ret;
	ret = -EIO;
	if (EVP_DigestInit_ex(md, EVP_sha256(), NULL)) {
		ret = model_layout_emit_range(L, 0, bytes, hash_fn, md);
		if (!ret && !EVP_DigestFinal_ex(md, fp, NULL))
			ret = -EIO;
	}
	EVP_MD_CTX_free(md);
	return ret;
}

/*
 * How much of @m stays on the device: every layer when its weights fit
 * @budget bytes (0: the device's room), else the embeddings, the head and
 * as many layers as fit beside a ring of @slots of its largest layer
 * (model_store_set_budget()). Sets @m's resident, ring and budget.
 */
static int plan(struct model_store *ms, struct model *m, uint64_t budget,
		unsigned int slots, char *msg, size_t msglen)
{
	const struct model_layout *L = &m->layout;
	uint32_t n = m->cfg.n_layer, R;
	struct vmu *v = ms->v;
	uint64_t big, ring = 0, head, least;
	const char *whose = "its budget";

	m->resident = n;
	m->ring = m->budget = 0;
	if (!budget) {
		struct vmu_stats st;
		uint64_t room;

		vmu_get_stats(v, &st);
		room = st.free + st.text_cached;
		if (vmu_round(v, L->bytes) <= room)
			return 0;
		/* the rest for KV caches and activations */
		budget = room / 4 * 3;
		whose = "three quarters of the device's room";
	} else if (vmu_round(v, L->bytes) <= budget) {
		m->budget = budget;
		return 0;
	}
	big = model_layer_max(L, n);
	head = vmu_round(v, model_layer_start(L, n, 0));
	least = head + vmu_round(v, big);
	if (!slots)
		slots = 2;
	for (; slots; slots--) {
		ring = vmu_round(v, slots * big);
		if (head + ring <= budget)
			break;
	}
	if (!slots)
		return errmsg(
			msg, msglen,
			least > vmu_provider(v)->capacity ? -E2BIG : -ENOMEM,
			"model %s: no room for %llu bytes of weights: "
			"streamed, it needs %llu at least (embeddings and "
			"head %llu, its largest layer %llu), and %s is "
			"%llu",
			m->name, (unsigned long long)L->bytes,
			(unsigned long long)least, (unsigned long long)head,
			(unsigned long long)big, whose,
			(unsigned long long)budget);
	for (R = n - 1; R > 0; R--)
		if (vmu_round(v, model_layer_start(L, n, R)) + ring <= budget)
			break;
	m->resident = R;
	m->ring = ring;
	m->budget = budget;
	return 0;
}

/*
 * Hash the weights @set holds as @m's layout says, and put them into the
 * text segment for @s (or find them there): all of them, or for a
 * streamed model the resident part, the rest copied out for streaming.
 * On failure @m's layout is freed. The set stays the caller's.
 */
static int place(struct model_store *ms, struct vmu_session *s,
		 const char *name, bool shared, uint64_t budget,
		 unsigned int slots, struct model *m, struct vmu_text **text,
		 char *msg, size_t msglen)
{
	struct vmu_text_upload *up;
	uint64_t bytes;
	bool created;
	int ret;

	ret = plan(ms, m, budget, slots, msg, msglen);
	if (ret)
		goto out_layout;
	bytes = model_layer_start(&m->layout, m->cfg.n_layer, m->resident);
	ret = fingerprint(&m->layout, bytes, m->fp);
	if (ret) {
		errmsg(msg, msglen, ret, "model %s: cannot hash its weights",
		       name);
		goto out_layout;
	}
	/* the same weights under another name: share them. A served
	 * model's are in the shared scope, an upload's its tenant's. */
	ret = shared ? vmu_text_lookup_shared(s, m->fp, text) :
		       vmu_text_lookup(s, m->fp, text);
	if (ret == -ENOENT) {
		ret = shared ? vmu_text_begin_shared(s, bytes, &up) :
			       vmu_text_begin(s, bytes, &up);
		if (ret) {
			errmsg(msg, msglen, ret,
			       "model %s: no room for %llu bytes of weights: %s",
			       name, (unsigned long long)bytes, strerror(-ret));
			goto out_layout;
		}
		ret = model_layout_emit_range(&m->layout, 0, bytes, upload_fn,
					      up);
		if (ret) {
			vmu_text_abort(up);
			errmsg(msg, msglen, ret, "model %s: upload: %s", name,
			       strerror(-ret));
			goto out_layout;
		}
		/* -EBADMSG if the files changed while we read them */
		ret = vmu_text_commit(up, m->fp, text, &created);
		if (ret) {
			errmsg(msg, msglen, ret,
			       "model %s: weights changed "
			       "while loading",
			       name);
			goto out_layout;
		}
	} else if (ret) {
		errmsg(msg, msglen, ret, "model %s: %s", name, strerror(-ret));
		goto out_layout;
	}
	if (m->resident < m->cfg.n_layer) {
		char why[ST_MSG_LEN];

		ret = model_stream_create(ms->v, &m->layout, &m->cfg,
					  m->resident, m->ring, NULL,
					  &m->stream, why, sizeof(why));
		if (ret) {
			errmsg(msg, msglen, ret, "model %s: streamed: %s", name,
			       why);
			vmu_text_put(s, *text);
			goto out_layout;
		}
	}
	for (size_t i = 0; i < m->layout.nr; i++)
		m->layout.w[i].t = NULL; /* the files go now */
	return 0;

out_layout:
	model_layout_free(&m->layout);
	return ret;
}

/* Load @name into @m (its name set) for @s, its weights referenced by
 * @s. Runs without the store's lock. On failure @m's layout is freed. */
static int load(struct model_store *ms, struct vmu_session *s, const char *name,
		const struct budget *b, struct model *m, struct vmu_text **text,
		char *msg, size_t msglen)
{
	char path[4096], sub[MODEL_NAME_MAX + 16];
	struct st_set *set;
	struct stat st;
	int ret;

	if (ms->hook)
		ms->hook(ms->hook_arg, MODEL_HOOK_LOADING, name);
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", ms->dir, name) >=
	    sizeof(path))
		return errmsg(msg, msglen, -ENAMETOOLONG,
			      "model %s: path too long", name);
	if (stat(path, &st) || !S_ISDIR(st.st_mode))
		return errmsg(msg, msglen, -ENOENT, "model %s: no directory %s",
			      name, path);
	snprintf(sub, sizeof(sub), "%s/config.json", name);
	snprintf(path, sizeof(path), "%s/%s", ms->dir, sub);
	ret = model_config_parse(path, &m->cfg, msg, msglen);
	if (ret)
		return ret;
	snprintf(path, sizeof(path), "%s/%s", ms->dir, name);
	ret = st_set_open(path, &set, msg, msglen);
	if (ret)
		return ret;
	ret = model_layout_build(&m->cfg, set, &m->layout, msg, msglen);
	if (!ret)
		ret = place(ms, s, name, true, b->bytes, b->slots, m, text, msg,
			    msglen);
	st_set_close(set);
	return ret;
}

/* The same from the bytes of an upload. */
static int load_upload(struct model_store *ms, struct vmu_session *s,
		       const char *name, const struct model_upload *up,
		       const struct budget *b, struct model *m,
		       struct vmu_text **text, char *msg, size_t msglen)
{
	char path[MODEL_NAME_MAX + 16];
	struct st_set *set;
	int ret;

	if (ms->hook)
		ms->hook(ms->hook_arg, MODEL_HOOK_LOADING, name);
	snprintf(path, sizeof(path), "%s: config.json", name);
	ret = model_config_parse_json(up->config, up->config_len, path, &m->cfg,
				      msg, msglen);
	if (ret)
		return ret;
	ret = st_set_parse(name, up->index, up->index_len, up->files, up->lens,
			   up->nr_files, &set, msg, msglen);
	if (ret)
		return ret;
	ret = model_layout_build(&m->cfg, set, &m->layout, msg, msglen);
	if (!ret)
		ret = place(ms, s, name, false, b->bytes, b->slots, m, text,
			    msg, msglen);
	st_set_close(set);
	return ret;
}

/* The same from what a restart kept of an upload: its weights are in the
 * text segment (or @k's blob), its layout follows from its configuration. */
static int load_kept(struct vmu_session *s, const char *name,
		     const struct model_kept *k, struct model *m,
		     struct vmu_text **text, char *msg, size_t msglen)
{
	char path[MODEL_NAME_MAX + 16];
	bool created;
	int ret;

	snprintf(path, sizeof(path), "%s: config.json", name);
	ret = model_config_parse_json(k->config, k->config_len, path, &m->cfg,
				      msg, msglen);
	if (ret)
		return ret == -EINVAL ? -EBADMSG : ret;
	ret = model_layout_remake(&m->cfg, k->dtype, k->prefixed, &m->layout);
	if (ret)
		return errmsg(msg, msglen, ret == -EINVAL ? -EBADMSG : ret,
			      "model %s: its weights cannot be laid out "
			      "again as %s",
			      name,
			      ret == -EINVAL ? "recorded" : strerror(-ret));
	if (m->layout.bytes != k->bytes) {
		ret = errmsg(msg, msglen, -EBADMSG,
			     "model %s: its configuration lays out %llu bytes "
			     "of weights, the record %llu",
			     name, (unsigned long long)m->layout.bytes,
			     (unsigned long long)k->bytes);
		goto out_layout;
	}
	ret = vmu_text_lookup(s, k->fp, text);
	if (ret == -ENOENT && k->blob)
		ret = vmu_text_insert(s, k->blob, k->bytes, text, &created);
	if (ret) {
		errmsg(msg, msglen, ret, "model %s: its weights: %s", name,
		       ret == -ENOENT ? "not in the text segment" :
					strerror(-ret));
		goto out_layout;
	}
	if (vmu_text_size(*text) != k->bytes ||
	    memcmp(vmu_text_fp(*text), k->fp, VMU_FP_LEN)) {
		vmu_text_put(s, *text);
		ret = errmsg(msg, msglen, -EBADMSG,
			     "model %s: its weights are not the bytes it was "
			     "made of",
			     name);
		goto out_layout;
	}
	memcpy(m->fp, k->fp, VMU_FP_LEN);
	m->resident = m->cfg.n_layer;
	m->ring = m->budget = 0;
	return 0;

out_layout:
	model_layout_free(&m->layout);
	return ret;
}

/* The budget of served model @name (NULL: an upload's, none). Lock
 * held. */
static struct budget budget_of(struct model_store *ms, const char *name)
{
	struct budget none = { .bytes = 0 }, *b;

	if (name)
		list_for_each_entry(b, &ms->budgets, node)
			if (!strcmp(b->name, name))
				return *b;
	return none;
}

int model_store_set_budget(struct model_store *ms, const char *name,
			   uint64_t bytes, unsigned int slots, char *msg,
			   size_t msglen)
{
	struct budget *b, *n;
	int ret = model_name_check(name, msg, msglen);

	if (ret)
		return ret;
	if (slots > DJINN_RING_SLOTS_MAX)
		return errmsg(msg, msglen, -EINVAL,
			      "model %s: a ring of %u slots: at most %u", name,
			      slots, DJINN_RING_SLOTS_MAX);
	pthread_mutex_lock(&ms->lock);
	list_for_each_entry_safe(b, n, &ms->budgets, node)
		if (!strcmp(b->name, name)) {
			list_del_init(&b->node);
			free(b);
		}
	if (bytes) {
		b = calloc(1, sizeof(*b));
		if (!b) {
			ret = -ENOMEM;
		} else {
			snprintf(b->name, sizeof(b->name), "%s", name);
			b->bytes = bytes;
			b->slots = slots;
			list_add_tail(&b->node, &ms->budgets);
		}
	}
	pthread_mutex_unlock(&ms->lock);
	return ret;
}

void model_store_get_budget(struct model_store *ms, const char *name,
			    uint64_t *bytes, unsigned int *slots)
{
	struct budget b;

	pthread_mutex_lock(&ms->lock);
	b = budget_of(ms, name);
	pthread_mutex_unlock(&ms->lock);
	*bytes = b.bytes;
	*slots = b.slots;
}

/* Whether @sm was placed under another budget than @bytes and @slots
 * (a ring of 0 slots is one of 2). */
static bool placed_otherwise(const struct store_model *sm, uint64_t bytes,
			     unsigned int slots)
{
	unsigned int a = sm->placed_slots ? sm->placed_slots : 2;
	unsigned int b = slots ? slots : 2;

	return sm->placed_bytes != bytes || (bytes && a != b);
}

int model_store_budget_check(struct model_store *ms, const char *name,
			     uint64_t bytes, unsigned int slots, char *msg,
			     size_t msglen)
{
	struct store_model *sm;
	int ret = 0;

	pthread_mutex_lock(&ms->lock);
	sm = find(ms, name, NULL);
	if (sm && sm->loading) /* its placement is not known yet */
		ret = errmsg(msg, msglen, -EBUSY,
			     "model %s is being loaded: try again once it is",
			     name);
	else if (sm && sm->holders && placed_otherwise(sm, bytes, slots)) {
		char how[96] = "no budget";

		if (sm->placed_bytes)
			snprintf(how, sizeof(how),
				 "a budget of %llu bytes and a ring of %u "
				 "slots",
				 (unsigned long long)sm->placed_bytes,
				 sm->placed_slots ? sm->placed_slots : 2);
		ret = errmsg(msg, msglen, -EBUSY,
			     "model %s is held by %u session%s, placed under "
			     "%s (%u of %u layers on the device): a new "
			     "placement would move layers in use; close its "
			     "sessions and evict it, or set the budget in "
			     "djinnd.conf for its next load",
			     name, sm->holders, sm->holders == 1 ? "" : "s",
			     how, sm->m.resident, sm->m.cfg.n_layer);
	}
	pthread_mutex_unlock(&ms->lock);
	return ret;
}

bool model_store_drop_stale(struct model_store *ms, const char *name)
{
	struct store_model *sm;
	struct budget b;
	bool stale;

	pthread_mutex_lock(&ms->lock);
	sm = find(ms, name, NULL);
	b = budget_of(ms, name);
	stale = sm && !sm->loading && !sm->waiters && !sm->holders &&
		placed_otherwise(sm, b.bytes, b.slots);
	pthread_mutex_unlock(&ms->lock);
	return stale && !model_store_evict(ms, name, NULL, 0);
}

/* An upload's config.json, kept for a restart (model_upload_keep());
 * on failure the load is undone. */
static int keep_config(struct store_model *sm, const struct model_upload *up,
		       struct vmu_session *s, struct vmu_text *text, char *msg,
		       size_t msglen)
{
	const void *src = up->kept ? up->kept->config : up->config;
	size_t len = up->kept ? up->kept->config_len : up->config_len;
	void *c = malloc(len ? len : 1);

	if (!c) {
		vmu_text_put(s, text);
		model_stream_destroy(sm->m.stream);
		sm->m.stream = NULL;
		model_layout_free(&sm->m.layout);
		return errmsg(msg, msglen, -ENOMEM, "model %s: out of memory",
			      sm->m.name);
	}
	memcpy(c, src, len);
	free(sm->config);
	sm->config = c;
	sm->config_len = len;
	return 0;
}

/*
 * The store's lock is held on entry and exit, and dropped for the load
 * itself: list, evict and close never wait for one. A name being loaded
 * is listed as loading; a second open of it waits for the first.
 */
static int open_entry(struct model_store *ms, struct vmu_session *s,
		      const char *name, const struct model_upload *up,
		      struct model_hold **out, char *msg, size_t msglen)
{
	struct model_hold *h;
	struct store_model *sm;
	struct budget budget;
	struct vmu_text *text;
	int ret;

	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	pthread_mutex_lock(&ms->lock);
again:
	expire_locked(ms);
	sm = find(ms, name, up ? vmu_session_tenant(s) : NULL);
	if (sm && sm->loading) {
		sm->waiters++;
		if (ms->hook)
			ms->hook(ms->hook_arg, MODEL_HOOK_WAITING, name);
		while (sm->loading)
			pthread_cond_wait(&ms->loaded, &ms->lock);
		sm->waiters--;
		if (sm->failed) {
			/* try again ourselves: the fault may have been the
			 * other session's (its quota), or fixed since */
			if (!sm->waiters)
				failed_free(sm);
			goto again;
		}
		if (sm->gone) {
			/* a device fault since its load began */
			if (!sm->waiters && !sm->holders)
				model_free(sm);
			goto again;
		}
	}
	if (sm) {
		ret = sm->uploaded ? vmu_text_lookup(s, sm->m.fp, &text) :
				     vmu_text_lookup_shared(s, sm->m.fp, &text);
		if (!ret)
			goto hold;
		if (ret != -ENOENT || sm->holders) {
			errmsg(msg, msglen, ret, "model %s: %s", name,
			       strerror(-ret));
			goto out_unlock;
		}
		if (up && !up->config && !up->kept) {
			ret = errmsg(msg, msglen, -ENOENT,
				     "model %s: its weights were reclaimed: "
				     "send its files",
				     name);
			goto out_unlock;
		}
		/* reclaimed meanwhile: load it afresh in the same entry */
		free(sm->config);
		sm->config = NULL;
		sm->config_len = 0;
		model_stream_destroy(sm->m.stream);
		sm->m.stream = NULL;
		model_layout_free(&sm->m.layout);
		memset(&sm->m.cfg, 0, sizeof(sm->m.cfg));
		memset(sm->m.fp, 0, sizeof(sm->m.fp));
	} else if (up && !up->config && !up->kept) {
		ret = errmsg(msg, msglen, -ENOENT,
			     "model %s: not uploaded: send its files", name);
		goto out_unlock;
	} else {
		sm = calloc(1, sizeof(*sm));
		if (!sm) {
			ret = -ENOMEM;
			goto out_unlock;
		}
		/* without it steps plan each time: nothing else differs */
		sm->m.plans = fwd_plans_new();
		INIT_LIST_HEAD(&sm->holds);
		pthread_mutex_init(&sm->gate, NULL);
		{
			pthread_condattr_t ca;

			/* gate_close()'s deadline is mono_ns()'s */
			pthread_condattr_init(&ca);
			pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
			pthread_cond_init(&sm->gate_cv, &ca);
			pthread_condattr_destroy(&ca);
		}
		snprintf(sm->m.name, sizeof(sm->m.name), "%s", name);
		if (up) {
			sm->uploaded = true;
			memcpy(sm->src, up->src, VMU_FP_LEN);
			snprintf(sm->owner, sizeof(sm->owner), "%s",
				 vmu_session_tenant(s));
		}
		list_add_tail(&sm->node, &ms->models);
	}
	sm->loading = true;
	sm->epoch = vmu_faults(ms->v);
	budget = budget_of(ms, up ? NULL : name);
	pthread_mutex_unlock(&ms->lock);
	if (up && up->kept)
		ret = load_kept(s, name, up->kept, &sm->m, &text, msg, msglen);
	else if (up)
		ret = load_upload(ms, s, name, up, &budget, &sm->m, &text, msg,
				  msglen);
	else
		ret = load(ms, s, name, &budget, &sm->m, &text, msg, msglen);
	if (!ret && up)
		ret = keep_config(sm, up, s, text, msg, msglen);
	pthread_mutex_lock(&ms->lock);
	sm->loading = false;
	pthread_cond_broadcast(&ms->loaded);
	if (ret) {
		sm->failed = true;
		list_del_init(&sm->node);
		if (!sm->waiters)
			failed_free(sm);
		goto out_unlock;
	}
	sm->placed_bytes = budget.bytes;
	sm->placed_slots = budget.slots;
	ms->loads += !(up && up->kept); /* a restart's is no load */
hold:
	sm->holders++;
	list_add_tail(&h->node, &sm->holds);
	h->m = &sm->m;
	h->s = s;
	h->text = text;
	h->ms = ms;
	*out = h;
	h = NULL;
out_unlock:
	pthread_mutex_unlock(&ms->lock);
	free(h);
	return ret;
}

int model_open(struct model_store *ms, struct vmu_session *s, const char *name,
	       struct model_hold **out, char *msg, size_t msglen)
{
	int ret = model_name_check(name, msg, msglen);

	return ret ? ret : open_entry(ms, s, name, NULL, out, msg, msglen);
}

void model_upload_name(const uint8_t src[VMU_FP_LEN], char name[MODEL_NAME_MAX])
{
	static const char hex[] = "0123456789abcdef";
	char *p = name + sprintf(name, "upload-");

	for (int i = 0; i < 8; i++) {
		*p++ = hex[src[i] >> 4];
		*p++ = hex[src[i] & 15];
	}
	*p = 0;
}

int model_open_uploaded(struct model_store *ms, struct vmu_session *s,
			const struct model_upload *up, struct model_hold **out,
			char *msg, size_t msglen)
{
	char name[MODEL_NAME_MAX];

	model_upload_name(up->src, name);
	return open_entry(ms, s, name, up, out, msg, msglen);
}

int model_open_kept(struct model_store *ms, struct vmu_session *s,
		    const struct model_kept *k, struct model_hold **out,
		    char *msg, size_t msglen)
{
	struct model_upload up = { .kept = k };
	char name[MODEL_NAME_MAX];

	model_upload_name(k->src, name);
	if (strcmp(k->owner, vmu_session_tenant(s)))
		return errmsg(msg, msglen, -EACCES,
			      "model %s: tenant %s's, not %s's", name, k->owner,
			      vmu_session_tenant(s));
	memcpy(up.src, k->src, VMU_FP_LEN);
	return open_entry(ms, s, name, &up, out, msg, msglen);
}

void model_close(struct model_hold *h)
{
	struct store_model *sm;

	if (!h)
		return;
	sm = container_of(h->m, struct store_model, m);
	pthread_mutex_lock(&h->ms->lock);
	vmu_text_put(h->s, h->text); /* none after a failed move */
	list_del_init(&h->node);
	sm->holders--;
	if (sm->gone && !sm->holders && !sm->waiters)
		model_free(sm); /* lost in a fault, unlisted already */
	pthread_mutex_unlock(&h->ms->lock);
	free(h);
}

void model_store_set_hook(struct model_store *ms,
			  void (*fn)(void *arg, enum model_hook ev,
				     const char *name),
			  void *arg)
{
	pthread_mutex_lock(&ms->lock);
	ms->hook = fn;
	ms->hook_arg = arg;
	pthread_mutex_unlock(&ms->lock);
}

/* ---------------------------------------------------------------------- */
/* Memory pressure: moving a held model's weights */

static struct store_model *sm_of(const struct model_hold *h)
{
	return container_of(h->m, struct store_model, m);
}

bool model_is_upload(const struct model_hold *h)
{
	return sm_of(h)->uploaded;
}

int model_upload_keep(const struct model_hold *h, struct model_kept *out,
		      char *msg, size_t msglen)
{
	const struct store_model *sm = sm_of(h);

	if (!sm->uploaded)
		return -ENOENT;
	if (sm->m.stream)
		return errmsg(msg, msglen, -EBUSY,
			      "the uploaded model %s is streamed: a restart "
			      "does not keep its streamed layers",
			      sm->m.name);
	memset(out, 0, sizeof(*out));
	memcpy(out->src, sm->src, VMU_FP_LEN);
	memcpy(out->fp, sm->m.fp, VMU_FP_LEN);
	snprintf(out->owner, sizeof(out->owner), "%s", sm->owner);
	out->config = sm->config;
	out->config_len = sm->config_len;
	out->dtype = sm->m.layout.dtype;
	out->prefixed = model_layout_prefixed(&sm->m.cfg, &sm->m.layout);
	out->bytes = sm->m.layout.bytes;
	return 0;
}

int model_step_enter(const struct model_hold *h, char *msg, size_t msglen)
{
	struct store_model *sm = sm_of(h);
	int ret = 0;

	pthread_mutex_lock(&sm->gate);
	while (sm->moving)
		pthread_cond_wait(&sm->gate_cv, &sm->gate);
	if (sm->lost)
		ret = errmsg(msg, msglen, -EIO,
			     "model %s lost its weights while they moved "
			     "under memory pressure: close it and open it "
			     "again",
			     sm->m.name);
	else
		sm->steps++;
	pthread_mutex_unlock(&sm->gate);
	return ret;
}

void model_step_leave(const struct model_hold *h)
{
	struct store_model *sm = sm_of(h);

	pthread_mutex_lock(&sm->gate);
	if (!--sm->steps)
		pthread_cond_broadcast(&sm->gate_cv);
	pthread_mutex_unlock(&sm->gate);
}

/* Hold new steps back and wait for the running ones, 2 s at most:
 * 0, or -EBUSY (then nothing is held back). */
static int gate_close(struct store_model *sm)
{
	struct timespec dl;
	int ret = 0;

	dl = ns_to_timespec(mono_ns() + 2 * NSEC_PER_SEC);
	pthread_mutex_lock(&sm->gate);
	if (sm->moving) {
		ret = -EBUSY; /* another move */
	} else {
		sm->moving = true;
		while (sm->steps && !ret)
			if (pthread_cond_timedwait(&sm->gate_cv, &sm->gate,
						   &dl) == ETIMEDOUT &&
			    sm->steps)
				ret = -EBUSY;
		if (ret) {
			sm->moving = false;
			pthread_cond_broadcast(&sm->gate_cv);
		}
	}
	pthread_mutex_unlock(&sm->gate);
	return ret;
}

static void gate_open(struct store_model *sm, bool lost)
{
	pthread_mutex_lock(&sm->gate);
	sm->moving = false;
	sm->lost |= lost;
	pthread_cond_broadcast(&sm->gate_cv);
	pthread_mutex_unlock(&sm->gate);
}

/*
 * The plan of a move: the most layers @m may keep (*@R, fewer than now)
 * with a ring of *@ring bytes such that its text bytes and ring free
 * @need. Store lock held. 0 or -ENOMEM.
 */
static int relieve_plan(struct model_store *ms, const struct model *m,
			uint64_t need, uint32_t *R, uint64_t *ring, char *msg,
			size_t msglen)
{
	const struct model_layout *L = &m->layout;
	uint32_t n = m->cfg.n_layer;
	struct vmu *v = ms->v;
	uint64_t now, then = 0;

	*ring = m->ring ? m->ring : vmu_round(v, 2 * model_layer_max(L, n));
	need = vmu_round(v, need);
	now = vmu_round(v, model_layer_start(L, n, m->resident)) + m->ring;
	for (uint32_t r = m->resident; r-- > 0;) {
		then = vmu_round(v, model_layer_start(L, n, r)) + *ring;
		if (then + need <= now) {
			*R = r;
			return 0;
		}
	}
	return errmsg(msg, msglen, -ENOMEM,
		      "model %s: streaming %s its layers would free %llu "
		      "bytes of the %llu needed",
		      m->name, m->resident ? "all" : "more of",
		      (unsigned long long)(now > then ? now - then : 0),
		      (unsigned long long)need);
}

/* Store lock held: why @sm may not move for @h's tenant, or 0. */
static int relieve_refused(const struct store_model *sm,
			   const struct model_hold *h, char *msg, size_t msglen)
{
	const struct model_hold *x;

	if (sm->gone || sm->lost)
		return errmsg(msg, msglen, -EIO,
			      "model %s lost its weights: close it and open "
			      "it again",
			      sm->m.name);
	if (sm->uploaded || sm->placed_bytes)
		return errmsg(msg, msglen, -EPERM,
			      "model %s keeps its placement: %s", sm->m.name,
			      sm->uploaded ? "an upload" :
					     "it has a budget of its own");
	list_for_each_entry(x, &sm->holds, node)
		if (strcmp(vmu_session_tenant(x->s), vmu_session_tenant(h->s)))
			return errmsg(msg, msglen, -EPERM,
				      "model %s is held by other tenants too: "
				      "streaming it would slow their steps",
				      sm->m.name);
	return 0;
}

/*
 * Put @m's first @R layers (of the blob @all, host memory) in a text
 * entry for @h's session and stream the rest through a ring of @ring
 * bytes: 0, else -errno with nothing placed.
 */
static int place_host(struct model_store *ms, struct model *m,
		      const struct model_hold *h, const uint8_t *all,
		      uint32_t R, uint64_t ring, struct vmu_text **text,
		      struct model_stream **st, char *why, size_t whylen)
{
	const struct model_layout *L = &m->layout;
	uint64_t pre = model_layer_start(L, m->cfg.n_layer, R);
	struct vmu_text_upload *up;
	bool created;
	int ret;

	*st = NULL;
	ret = vmu_text_begin_shared(h->s, pre, &up);
	if (!ret) {
		ret = vmu_text_write(up, all, pre);
		if (ret)
			vmu_text_abort(up);
		else
			ret = vmu_text_commit(up, NULL, text, &created);
	}
	if (ret)
		return errmsg(why, whylen, ret, "no room for %llu bytes: %s",
			      (unsigned long long)pre, strerror(-ret));
	if (R < m->cfg.n_layer) {
		ret = model_stream_create(ms->v, L, &m->cfg, R, ring, all + pre,
					  st, why, whylen);
		if (ret)
			vmu_text_put(h->s, *text);
	}
	return ret;
}

int model_relieve(struct model_hold *h, uint64_t need, char *msg, size_t msglen)
{
	struct model_store *ms = h->ms;
	struct store_model *sm = sm_of(h), *o;
	struct model *m = &sm->m;
	struct vmu_provider *p = vmu_provider(ms->v);
	const struct model_layout *L = &m->layout;
	uint32_t n = m->cfg.n_layer, R0 = m->resident, R = 0;
	uint64_t ring = 0, ring0 = m->ring, old_b, addr;
	struct model_stream *st = NULL;
	struct vmu_text *text = NULL;
	struct model_hold *x;
	uint8_t *all = NULL;
	char why[ST_MSG_LEN] = "";
	bool lost = false;
	int ret;

	pthread_mutex_lock(&ms->lock);
	ret = relieve_refused(sm, h, msg, msglen);
	pthread_mutex_unlock(&ms->lock);
	if (ret)
		return ret;
	if (gate_close(sm))
		return errmsg(msg, msglen, -EBUSY,
			      "model %s: its steps did not finish within 2 s, "
			      "or it is moving already",
			      m->name);
	/* No step runs: the placement is ours to change, if it still may
	 * be (checked again: holders and names came meanwhile). Opens wait
	 * from here on. */
	pthread_mutex_lock(&ms->lock);
	R0 = m->resident;
	ring0 = m->ring;
	ret = sm->loading ? errmsg(msg, msglen, -EBUSY,
				   "model %s is being loaded", m->name) :
			    relieve_refused(sm, h, msg, msglen);
	list_for_each_entry(o, &ms->models, node)
		if (!ret && o != sm &&
		    (o->loading || !memcmp(o->m.fp, m->fp, VMU_FP_LEN)))
			ret = errmsg(msg, msglen, o->loading ? -EBUSY : -EPERM,
				     "model %s: %s %s: moving its weights "
				     "now could free nothing",
				     m->name,
				     o->loading ? "another model is loading," :
						  "shares its weights with",
				     o->m.name);
	if (!ret)
		ret = relieve_plan(ms, m, need, &R, &ring, msg, msglen);
	if (!ret)
		sm->loading = true; /* opens wait, evict and list pass */
	pthread_mutex_unlock(&ms->lock);
	if (ret) {
		gate_open(sm, false);
		return ret;
	}
	old_b = model_layer_start(L, n, R0);
	addr = vmu_text_addr(h->text);

	/* 1. every weight to host memory: the resident part from the
	 * device, the streamed layers from the old stream */
	all = malloc(L->bytes);
	ret = all ? p->ops->copy_dtoh(p, all, addr, old_b) : -ENOMEM;
	if (ret) {
		errmsg(msg, msglen, ret, "model %s: copying %llu bytes out: %s",
		       m->name, (unsigned long long)old_b, strerror(-ret));
		pthread_mutex_lock(&ms->lock);
		goto out;
	}
	if (m->stream)
		memcpy(all + old_b, model_stream_host(m->stream),
		       L->bytes - old_b);

	/* 2. the old placement goes: every holder's reference, the entry,
	 * the ring. A reference that is not a holder's (a session that
	 * looked the bytes up itself) keeps the entry: then nothing would
	 * be freed, and the holders take theirs back. */
	pthread_mutex_lock(&ms->lock);
	list_for_each_entry(x, &sm->holds, node) {
		vmu_text_put(x->s, x->text);
		x->text = NULL;
	}
	if (vmu_text_evict(ms->v, m->fp, NULL) == -EBUSY) {
		list_for_each_entry(x, &sm->holds, node)
			lost |= vmu_text_lookup_shared(x->s, m->fp, &x->text) !=
				0;
		ret = errmsg(msg, msglen, lost ? -EIO : -EBUSY,
			     "model %s: its weights are held outside its "
			     "holders: moving them would free nothing",
			     m->name);
		if (lost) {
			sm->gone = true;
			list_del_init(&sm->node);
		}
		goto out;
	}
	pthread_mutex_unlock(&ms->lock);
	model_stream_destroy(m->stream);
	m->stream = NULL;

	/* 3. the new one, for @h's session (the caller keeps it alive);
	 * failing that (another took the room meanwhile), the old one */
	ret = place_host(ms, m, h, all, R, ring, &text, &st, why, sizeof(why));
	if (ret) {
		errmsg(msg, msglen, ret,
		       "model %s: placing it again with %u of %u layers "
		       "resident: %s",
		       m->name, R, n, why);
		R = R0;
		ring = ring0;
		lost = place_host(ms, m, h, all, R, ring, &text, &st, why,
				  sizeof(why));
	}
	pthread_mutex_lock(&ms->lock);
	if (!lost) {
		memcpy(m->fp, vmu_text_fp(text), VMU_FP_LEN);
		if (R != R0) {
			m->budget =
				vmu_round(ms->v, model_layer_start(L, n, R)) +
				ring;
			sm->relieved++;
		}
		m->resident = R;
		m->ring = R < n ? ring : 0;
		m->stream = st;
		/* every holder's reference: @h's is made */
		list_for_each_entry(x, &sm->holds, node)
			if (x == h)
				x->text = text;
			else if (vmu_text_lookup_shared(x->s, m->fp, &x->text))
				lost = true;
	}
	if (lost) {
		/* unlisted; freed once its holders have closed it, and the
		 * next open loads it again */
		sm->gone = true;
		list_del_init(&sm->node);
		ret = errmsg(msg, msglen, -EIO,
			     "model %s: lost its weights moving them: %s",
			     m->name, why);
	}
out:
	sm->loading = false;
	pthread_cond_broadcast(&ms->loaded);
	pthread_mutex_unlock(&ms->lock);
	gate_open(sm, lost);
	free(all);
	return ret;
}

uint64_t model_weight_addr(const struct model_hold *h, int layer,
			   unsigned int k)
{
	return vmu_text_addr(h->text) +
	       model_slot(&h->m->layout, layer, k)->off;
}

/* ---------------------------------------------------------------------- */
/* Listing and eviction */

static int cmp_info(const void *a, const void *b)
{
	return strcmp(((const struct model_info *)a)->name,
		      ((const struct model_info *)b)->name);
}

uint64_t model_store_loads(struct model_store *ms)
{
	uint64_t n;

	pthread_mutex_lock(&ms->lock);
	n = ms->loads;
	pthread_mutex_unlock(&ms->lock);
	return n;
}

int model_store_list(struct model_store *ms, struct model_info **out,
		     size_t *nr)
{
	struct model_info *info = NULL;
	struct store_model *sm;
	size_t n = 0, i = 0;

	pthread_mutex_lock(&ms->lock);
	expire_locked(ms);
	list_for_each_entry(sm, &ms->models, node)
		n += !sm->loading;
	if (n && !(info = calloc(n, sizeof(*info)))) {
		pthread_mutex_unlock(&ms->lock);
		return -ENOMEM;
	}
	list_for_each_entry(sm, &ms->models, node) {
		struct model_info *x;

		if (sm->loading)
			continue;
		x = &info[i++];
		memcpy(x->name, sm->m.name, sizeof(x->name));
		x->arch = sm->m.cfg.arch;
		x->dtype = sm->m.layout.dtype;
		x->weights = sm->m.layout.bytes;
		x->layers = sm->m.cfg.n_layer;
		x->resident = sm->m.resident;
		x->bytes = model_layer_start(&sm->m.layout, x->layers,
					     x->resident);
		x->ring = sm->m.ring;
		x->budget = sm->m.budget;
		if (sm->m.stream) {
			struct model_stream_stats ss;

			model_stream_stats(sm->m.stream, &ss);
			x->passes = ss.passes;
			x->jobs = ss.jobs;
		}
		x->holders = sm->holders;
		x->uploaded = sm->uploaded;
		memcpy(x->fp, sm->m.fp, VMU_FP_LEN);
	}
	pthread_mutex_unlock(&ms->lock);
	if (n)
		qsort(info, n, sizeof(*info), cmp_info);
	*out = info;
	*nr = n;
	return 0;
}

bool model_store_served_fp(struct model_store *ms, const uint8_t *fp,
			   bool (*ok)(void *arg, const char *name), void *arg)
{
	struct store_model *sm;
	bool yes = false;

	pthread_mutex_lock(&ms->lock);
	list_for_each_entry(sm, &ms->models, node)
		if (!sm->loading && !sm->uploaded && !sm->gone &&
		    !memcmp(sm->m.fp, fp, VMU_FP_LEN) && ok(arg, sm->m.name)) {
			yes = true;
			break;
		}
	pthread_mutex_unlock(&ms->lock);
	return yes;
}

int model_store_evict(struct model_store *ms, const char *name, char *msg,
		      size_t msglen)
{
	struct store_model *sm, *o;
	char owner[DJINN_TENANT_LEN];
	uint8_t fp[VMU_FP_LEN];
	bool shared = false, uploaded;
	int ret;

	ret = model_name_check(name, msg, msglen);
	if (ret)
		return ret;
	pthread_mutex_lock(&ms->lock);
	expire_locked(ms);
	sm = find_any(ms, name);
	if (!sm) {
		ret = errmsg(msg, msglen, -ENOENT, "model %s is not loaded",
			     name);
		goto out;
	}
	if (sm->loading || sm->waiters) {
		ret = errmsg(msg, msglen, -EBUSY, "model %s is being loaded",
			     name);
		goto out;
	}
	if (sm->holders) {
		ret = errmsg(msg, msglen, -EBUSY, "model %s has %u holders",
			     name, sm->holders);
		goto out;
	}
	memcpy(fp, sm->m.fp, VMU_FP_LEN);
	uploaded = sm->uploaded;
	snprintf(owner, sizeof(owner), "%s", sm->owner);
	model_free(sm);
	/* in the same scope: served models share theirs, a tenant's
	 * uploads theirs */
	list_for_each_entry(o, &ms->models, node)
		shared |= !o->loading && !memcmp(o->m.fp, fp, VMU_FP_LEN) &&
			  o->uploaded == uploaded &&
			  (!uploaded || !strcmp(o->owner, owner));
	/* another name keeps them cached; a session's own reference
	 * (-EBUSY) or an earlier reclaim (-ENOENT) leaves them to the VMU */
	if (!shared)
		vmu_text_evict(ms->v, fp, uploaded ? owner : NULL);
out:
	pthread_mutex_unlock(&ms->lock);
	return ret;
}
