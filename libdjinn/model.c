// SPDX-License-Identifier: MIT
/*
 * Models and contexts: the client side of DOC: models in proto.h.
 *
 * A model and a context are a handle on the daemon and what its answers
 * said, linked into their session (s->models, s->ctxs) so that closing
 * the session or the connection frees them. Their fields are guarded by
 * conn->lock, like every object list.
 *
 * A step's logits and hidden state are tensors the daemon made in the
 * session: each is wrapped as a request that already ran with one result
 * (__djinn_request_stub()), so that djinn_result_read(), _map() and
 * _release() and djinn_graph_input_result() work on it as on any result
 * and move only what they are asked. The context keeps its steps' stubs
 * until it is reset or freed, when they go (releasing the tensors that
 * the caller did not release first): a stub's pointer never dangles
 * while its context lives.
 *
 * A decode answer is variable: the step response, then the tokens so far
 * (all of them when it is done, fewer when it paused at a breakpoint),
 * padded to 8 bytes. Its call takes an answer of up to the whole decode's
 * size and checks it against its own nr_tokens.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "internal.h"

struct djinn_model {
	struct djinn_session *s;
	struct list_head node;
	uint64_t handle;
	struct djinn_model_info info;
	unsigned int nr_ctxs;
};

/*
 * struct djinn_ctx - a context
 * @len, @max_tokens: as the daemon last said
 * @busy:     a step of it is in flight
 * @paused:   its last step paused at a breakpoint; the fields below say
 *            what that step was
 * @type:       CTX_PREFILL or CTX_DECODE
 * @want:     a decode's tokens; 0 for a prefill
 * @tokens_out: where a decode's tokens go
 * @step_tokens: T of the hidden state (a prefill's tokens, 1 for decode)
 * @break_layer: its breakpoint, 0 for none (a decode pauses there for
 *            every token)
 * @logits_wanted: the step asked for the logits
 * @stubs:    every step's stubs (requests), @nr_stubs of @cap_stubs
 */
struct djinn_ctx {
	struct djinn_model *m;
	struct list_head node;
	uint64_t handle;
	uint32_t len, max_tokens;
	bool busy;
	bool paused;
	uint16_t type;
	uint32_t want;
	int32_t *tokens_out;
	uint32_t step_tokens;
	unsigned int break_layer;
	bool logits_wanted;
	struct djinn_request **stubs;
	unsigned int nr_stubs, cap_stubs;
};

static int refuse(int err, const char *fmt, ...) __printf(2, 3);
static int refuse(int err, const char *fmt, ...)
{
	char buf[DJINN_MAX_ERROR_MSG];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	__djinn_set_last_error("%s", buf);
	dj_dbg("%s", buf);
	return err;
}

static struct djinn_conn *conn_of(const struct djinn_ctx *c)
{
	return c->m->s->conn;
}

/* Send @type and wait for an answer of up to @max bytes into @buf (a
 * variable answer, or one that grew: a step's, MODEL_OPEN's). */
static int call_upto(struct djinn_conn *conn, uint16_t type, uint64_t sid,
		     const struct iovec *iov, int iovcnt, void *buf,
		     uint64_t max, uint64_t *got)
{
	return __djinn_call_sync_upto(conn, type, sid, iov, iovcnt, buf, max,
				      true, got);
}

/* ---------------------------------------------------------------------- */
/* Models */

static int name_check(const char *name)
{
	size_t n;

	if (!name)
		return refuse(-EINVAL, "no model name");
	n = strlen(name);
	if (!n || n >= DJINN_MODEL_NAME_MAX)
		return refuse(-EINVAL, "model name of %zu bytes, not 1 to %d",
			      n, DJINN_MODEL_NAME_MAX - 1);
	for (size_t i = 0; i < n; i++) {
		char ch = name[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
		      ch == '-'))
			return refuse(-EINVAL,
				      "model name: byte %zu is not one of "
				      "[A-Za-z0-9._-]",
				      i);
	}
	return 0;
}

/* MODEL_OPEN's answer before streamed models: up to its fingerprint. */
#define MODEL_RESP_V0 (offsetof(struct djinn_model_resp, fp) + DJINN_FP_LEN)

/* The session's model from MODEL_OPEN's (or MODEL_OPEN_UPLOADED's)
 * answer @r, @got bytes of it (an older daemon's ends at the fingerprint:
 * every layer on the device), named @name. */
static int model_new(struct djinn_session *s, const char *name,
		     struct djinn_model_resp *r, uint64_t got,
		     struct djinn_model **out)
{
	struct djinn_model *m;

	if (got == MODEL_RESP_V0) {
		r->weights = r->bytes;
		r->ring = 0;
		r->resident = r->n_layer;
	}
	if ((got != MODEL_RESP_V0 && got != sizeof(*r)) || !r->model ||
	    r->arch < DJINN_ARCH_GPT2 || r->arch > DJINN_ARCH_MISTRAL ||
	    !djinn_dtype_size(r->dtype) || !r->vocab || !r->n_layer ||
	    !r->hidden || !r->n_head || !r->n_kv_head || !r->max_tokens ||
	    r->resident > r->n_layer ||
	    (r->resident < r->n_layer) != (r->ring != 0) ||
	    r->weights < r->bytes || r->__reserved) {
		__djinn_conn_fail(s->conn, -EPROTO,
				  "MODEL_OPEN answer of %llu bytes: handle "
				  "%#llx, arch %u, dtype %u, vocab %u, %u of "
				  "%u layers resident, ring %llu",
				  (unsigned long long)got,
				  (unsigned long long)r->model, r->arch,
				  r->dtype, r->vocab, r->resident, r->n_layer,
				  (unsigned long long)r->ring);
		return -EPROTO;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		/* the daemon holds it for the session, which frees it */
		return -ENOMEM;
	}
	m->s = s;
	m->handle = r->model;
	memcpy(m->info.name, name, strlen(name));
	m->info.arch = r->arch;
	m->info.dtype = r->dtype;
	m->info.vocab = r->vocab;
	m->info.n_layer = r->n_layer;
	m->info.hidden = r->hidden;
	m->info.n_head = r->n_head;
	m->info.n_kv_head = r->n_kv_head;
	m->info.max_tokens = r->max_tokens;
	m->info.bytes = r->bytes;
	memcpy(m->info.fp, r->fp, sizeof(m->info.fp));
	m->info.weights = r->weights;
	m->info.ring = r->ring;
	m->info.resident = r->resident;
	pthread_mutex_lock(&s->conn->lock);
	list_add_tail(&m->node, &s->models);
	pthread_mutex_unlock(&s->conn->lock);
	dj_dbg("model %s: %u layers (%u resident), vocab %u, %llu bytes", name,
	       r->n_layer, r->resident, r->vocab, (unsigned long long)r->bytes);
	*out = m;
	return 0;
}

int djinn_model_open(struct djinn_session *s, const char *name,
		     struct djinn_model **out)
{
	struct djinn_model_open req = { { 0 } };
	struct djinn_model_resp r = { 0 };
	struct iovec iov = { &req, sizeof(req) };
	uint64_t got = 0;
	int ret;

	if (!s || !out)
		return refuse(-EINVAL, "model open: NULL argument");
	ret = name_check(name);
	if (ret)
		return ret;
	memcpy(req.name, name, strlen(name));
	ret = call_upto(s->conn, DJINN_MSG_MODEL_OPEN, s->id, &iov, 1, &r,
			sizeof(r), &got);
	if (ret)
		return ret;
	return model_new(s, name, &r, got, out);
}

/* ---------------------------------------------------------------------- */
/* Uploaded models */

/* One file of an upload, mapped. */
struct up_file {
	char path[PATH_MAX];
	const uint8_t *p;
	size_t len;
	struct djinn_tensor *t;
};

static int up_map(struct up_file *f, size_t max)
{
	struct stat st;
	void *p;
	int fd = open(f->path, O_RDONLY | O_CLOEXEC), ret;

	if (fd < 0)
		return refuse(-errno, "%s: %s", f->path, strerror(errno));
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || !st.st_size ||
	    (uint64_t)st.st_size > max) {
		ret = refuse(-EINVAL,
			     "%s: not a regular file of 1 to %zu bytes",
			     f->path, max);
		close(fd);
		return ret;
	}
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	ret = p == MAP_FAILED ?
		      refuse(-errno, "%s: mmap: %s", f->path, strerror(errno)) :
		      0;
	close(fd);
	if (!ret) {
		f->p = p;
		f->len = (size_t)st.st_size;
	}
	return ret;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* @dir's *.safetensors, sorted, into @f[1..]; their number. */
static int up_list(const char *dir, struct up_file *f, unsigned int max)
{
	char *names[DJINN_MODEL_MAX_FILES];
	unsigned int n = 0;
	struct dirent *e;
	DIR *d = opendir(dir);
	int ret = 0;

	if (!d)
		return refuse(-errno, "%s: %s", dir, strerror(errno));
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);

		if (l <= 12 || strcmp(e->d_name + l - 12, ".safetensors"))
			continue;
		if (n == max) {
			ret = refuse(-E2BIG,
				     "%s: more than %u safetensors "
				     "files",
				     dir, max);
			break;
		}
		names[n] = strdup(e->d_name);
		if (!names[n]) {
			ret = -ENOMEM;
			break;
		}
		n++;
	}
	closedir(d);
	if (!ret && !n)
		ret = refuse(-ENOENT, "%s: no *.safetensors", dir);
	qsort(names, n, sizeof(names[0]), cmp_str);
	for (unsigned int i = 0; i < n; i++) {
		if (!ret && snprintf(f[i].path, sizeof(f[i].path), "%s/%s", dir,
				     names[i]) >= (int)sizeof(f[i].path))
			ret = refuse(-ENAMETOOLONG, "%s: path too long", dir);
		free(names[i]);
	}
	return ret ? ret : (int)n;
}

/*
 * model.safetensors.index.json, read just far enough to pick the shards:
 * the "weight_map" object's distinct string values. Everything else about
 * the index (its fields, each shard holding what the map gives it) is the
 * daemon's to check, with the code that checks its own model directory.
 */
#define UP_INDEX "model.safetensors.index.json"

static const char *printable(char *s)
{
	for (char *p = s; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
			*p = '?';
	return s;
}

/* A shard's file name, as the daemon takes it: plain, not hidden, ending
 * in .safetensors. */
static bool shard_name_ok(const char *s, size_t n)
{
	size_t suf = strlen(".safetensors");

	return n > suf && n < 256 && n == strlen(s) && s[0] != '.' &&
	       !strchr(s, '/') && !strcmp(s + n - suf, ".safetensors");
}

/* The distinct shard names of the index mapped at @f, into @names (at
 * most @max, strdup()ed, sorted by strcmp()); their number. */
static int up_index_names(const struct up_file *f, char **names,
			  unsigned int max)
{
	json_t *root, *map, *v;
	json_error_t jerr;
	unsigned int n = 0, i;
	const char *key;
	char t[72], sh[256];
	int ret = 0;

	root = json_loadb((const char *)f->p, f->len, JSON_REJECT_DUPLICATES,
			  &jerr);
	if (!root)
		return refuse(-EINVAL, "%s: line %d: %s", f->path, jerr.line,
			      jerr.text);
	map = json_object_get(root, "weight_map");
	if (!json_is_object(map)) {
		ret = refuse(-EINVAL, "%s: no \"weight_map\" object", f->path);
		goto out;
	}
	if (!json_object_size(map)) {
		ret = refuse(-EINVAL, "%s: \"weight_map\" names no tensor",
			     f->path);
		goto out;
	}
	json_object_foreach(map, key, v)
	{
		const char *shard = json_string_value(v);

		snprintf(t, sizeof(t), "%s", key);
		if (!shard) {
			ret = refuse(-EINVAL,
				     "%s: tensor '%s': shard is not a string",
				     f->path, printable(t));
			goto out;
		}
		if (!shard_name_ok(shard, json_string_length(v))) {
			snprintf(sh, sizeof(sh), "%s", shard);
			ret = refuse(-EINVAL,
				     "%s: tensor '%s': shard '%s' is not a "
				     "plain *.safetensors file name",
				     f->path, printable(t), printable(sh));
			goto out;
		}
		for (i = 0; i < n && strcmp(names[i], shard); i++)
			;
		if (i < n)
			continue;
		if (n == max) {
			ret = refuse(-E2BIG, "%s: more than %u shards", f->path,
				     max);
			goto out;
		}
		names[n] = strdup(shard);
		if (!names[n]) {
			ret = -ENOMEM;
			goto out;
		}
		n++;
	}
	qsort(names, n, sizeof(names[0]), cmp_str);
out:
	json_decref(root);
	if (ret) {
		while (n)
			free(names[--n]);
		return ret;
	}
	return (int)n;
}

/* @dir's index, mapped into @f[0], and the shards it names into
 * @f[1..], in strcmp() order of their names; the number of files. */
static int up_index(const char *dir, struct up_file *f, unsigned int max)
{
	char *names[DJINN_MODEL_MAX_FILES];
	struct stat st;
	int ret, n;

	ret = up_map(&f[0], DJINN_MODEL_CONFIG_MAX);
	if (ret)
		return ret;
	n = up_index_names(&f[0], names, max - 1);
	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		struct up_file *sf = &f[1 + i];

		if (!ret && snprintf(sf->path, sizeof(sf->path), "%s/%s", dir,
				     names[i]) >= (int)sizeof(sf->path))
			ret = refuse(-ENAMETOOLONG, "%s: path too long", dir);
		if (!ret && stat(sf->path, &st))
			ret = refuse(-errno, "%s: shard '%s': %s", f[0].path,
				     printable(names[i]), strerror(errno));
		free(names[i]);
	}
	return ret ? ret : 1 + n;
}

int djinn_model_upload(struct djinn_session *s, const char *dir,
		       struct djinn_model **out)
{
	const size_t max = (size_t)1 << 40;
	struct up_file *f = calloc(DJINN_MODEL_MAX_FILES + 1, sizeof(*f));
	struct djinn_model_upload *req = NULL;
	struct djinn_model_file *mf;
	struct djinn_model_resp r = { 0 };
	uint64_t got = 0;
	uint8_t all[(DJINN_MODEL_MAX_FILES + 1) * DJINN_FP_LEN + 4], fp[32];
	char name[DJINN_MODEL_NAME_MAX];
	unsigned int nr = 0;
	uint32_t flags = 0;
	size_t len, nall;
	struct stat st;
	int ret;

	if (!s || !dir || !out) {
		free(f);
		return refuse(-EINVAL, "model upload: NULL argument");
	}
	if (!f)
		return -ENOMEM;
	if (snprintf(f[0].path, sizeof(f[0].path), "%s/config.json", dir) >=
		    (int)sizeof(f[0].path) ||
	    snprintf(f[1].path, sizeof(f[1].path), "%s/" UP_INDEX, dir) >=
		    (int)sizeof(f[1].path)) {
		ret = refuse(-ENAMETOOLONG, "%s: path too long", dir);
		goto out;
	}
	/* With an index, it and exactly the shards it names. */
	if (!stat(f[1].path, &st)) {
		flags = DJINN_MODEL_UPLOAD_INDEX;
		ret = up_index(dir, f + 1, DJINN_MODEL_MAX_FILES);
	} else {
		ret = up_list(dir, f + 1, DJINN_MODEL_MAX_FILES);
	}
	if (ret < 0)
		goto out;
	nr = (unsigned int)ret;
	len = sizeof(*req) + nr * sizeof(*mf);
	req = calloc(1, len);
	if (!req) {
		ret = -ENOMEM;
		goto out;
	}
	req->nr_files = nr;
	req->flags = flags;
	/* Fingerprints first: a daemon that has the model needs no more. */
	for (unsigned int i = 0; i <= nr; i++) {
		mf = i ? &req->files[i - 1] : &req->config;
		ret = 0;
		if (!f[i].p) /* the index is mapped already */
			ret = up_map(&f[i], i ? max : DJINN_MODEL_CONFIG_MAX);
		if (!ret)
			ret = __djinn_sha256(f[i].p, f[i].len, mf->fp);
		if (ret)
			goto out;
		memcpy(all + i * DJINN_FP_LEN, mf->fp, DJINN_FP_LEN);
	}
	/* then the flags, when there are any (little-endian) */
	nall = (nr + 1) * DJINN_FP_LEN;
	for (int i = 0; flags && i < 4; i++)
		all[nall++] = (uint8_t)(flags >> (8 * i));
	ret = __djinn_sha256(all, nall, fp);
	if (ret)
		goto out;
	snprintf(name, sizeof(name), "upload-");
	for (int i = 0; i < 8; i++)
		snprintf(name + 7 + 2 * i, 3, "%02x", fp[i]);
	{
		struct iovec iov = { req, len };

		ret = call_upto(s->conn, DJINN_MSG_MODEL_OPEN_UPLOADED, s->id,
				&iov, 1, &r, sizeof(r), &got);
	}
	if (ret == -ENOENT) {
		/* Upload what the daemon lacks (text: each by fingerprint
		 * first), then ask again with every handle. */
		ret = 0;
		for (unsigned int i = 0; i <= nr && !ret; i++) {
			struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_U8,
						       .ndim = 1,
						       .dims = { f[i].len } };
			struct djinn_tensor_info ti;

			mf = i ? &req->files[i - 1] : &req->config;
			ret = djinn_tensor_upload(s, &d, f[i].p, DJINN_SEG_TEXT,
						  &f[i].t);
			if (!ret)
				ret = djinn_tensor_info(f[i].t, &ti);
			if (!ret)
				mf->handle = ti.handle;
		}
		if (!ret) {
			struct iovec iov = { req, len };

			ret = call_upto(s->conn, DJINN_MSG_MODEL_OPEN_UPLOADED,
					s->id, &iov, 1, &r, sizeof(r), &got);
		}
	}
	if (!ret)
		ret = model_new(s, name, &r, got, out);
out:
	/* every entry: a failed index or listing may have mapped some */
	for (unsigned int i = 0; i <= DJINN_MODEL_MAX_FILES; i++) {
		if (f[i].t)
			djinn_tensor_release(f[i].t);
		if (f[i].p)
			munmap((void *)f[i].p, f[i].len);
	}
	free(req);
	free(f);
	return ret;
}

int djinn_model_info(const struct djinn_model *m, struct djinn_model_info *info)
{
	if (!m || !info)
		return -EINVAL;
	*info = m->info; /* fixed once open */
	return 0;
}

/*
 * djinn_model_info@DJINN_0.1, for programs built before struct
 * djinn_model_info grew (streamed models): theirs ends at @fp, and
 * nothing past it is theirs to write.
 */
int __djinn_model_info_v0_1(const struct djinn_model *m, void *info)
{
	if (!m || !info)
		return -EINVAL;
	memcpy(info, &m->info, DJINN_MODEL_INFO_V0_1);
	return 0;
}
__asm__(".symver __djinn_model_info_v0_1, djinn_model_info@DJINN_0.1");
static_assert(DJINN_MODEL_INFO_V0_1 == 136, "djinn_model_info of DJINN_0.1");

int djinn_model_close(struct djinn_model *m)
{
	struct djinn_conn *conn;
	struct iovec iov;
	int ret;

	if (!m)
		return -EINVAL;
	conn = m->s->conn;
	pthread_mutex_lock(&conn->lock);
	if (m->nr_ctxs) {
		unsigned int n = m->nr_ctxs;

		pthread_mutex_unlock(&conn->lock);
		return refuse(-EBUSY, "model %s has %u contexts", m->info.name,
			      n);
	}
	list_del_init(&m->node);
	pthread_mutex_unlock(&conn->lock);
	iov = (struct iovec){ &m->handle, sizeof(m->handle) };
	ret = __djinn_call_sync(conn, DJINN_MSG_MODEL_CLOSE, m->s->id, &iov, 1,
				NULL, 0);
	if (ret == -EBUSY) {
		/* contexts made on it another way: it stays */
		pthread_mutex_lock(&conn->lock);
		list_add_tail(&m->node, &m->s->models);
		pthread_mutex_unlock(&conn->lock);
		return ret;
	}
	free(m);
	return ret;
}

/* ---------------------------------------------------------------------- */
/* Contexts */

/* Take @c's stubs; under conn->lock. The caller frees them with
 * drop_stubs() outside it. */
static struct djinn_request **take_stubs(struct djinn_ctx *c, unsigned int *n)
{
	struct djinn_request **stubs = c->stubs;

	*n = c->nr_stubs;
	c->stubs = NULL;
	c->nr_stubs = c->cap_stubs = 0;
	return stubs;
}

static void drop_stubs(struct djinn_request **stubs, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		djinn_request_free(stubs[i]); /* releases it on the daemon */
	free(stubs);
}

/* Keep stub @req (may be NULL) in @c; under conn->lock. */
static int keep_stub(struct djinn_ctx *c, struct djinn_request *req)
{
	if (!req)
		return 0;
	if (c->nr_stubs == c->cap_stubs) {
		unsigned int cap = c->cap_stubs ? 2 * c->cap_stubs : 8;
		struct djinn_request **p = realloc(c->stubs, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		c->stubs = p;
		c->cap_stubs = cap;
	}
	c->stubs[c->nr_stubs++] = req;
	return 0;
}

static int ctx_make(struct djinn_model *m, const struct djinn_ctx_resp *r,
		    uint32_t want_len, struct djinn_ctx **out)
{
	struct djinn_conn *conn = m->s->conn;
	struct djinn_ctx *c;

	if (!r->ctx || r->len != want_len || !r->max_tokens ||
	    r->len > r->max_tokens) {
		__djinn_conn_fail(conn, -EPROTO,
				  "context answer: handle %#llx, %u of %u "
				  "tokens, expected %u",
				  (unsigned long long)r->ctx, r->len,
				  r->max_tokens, want_len);
		return -EPROTO;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM; /* the daemon's goes with the session */
	c->m = m;
	c->handle = r->ctx;
	c->len = r->len;
	c->max_tokens = r->max_tokens;
	pthread_mutex_lock(&conn->lock);
	list_add_tail(&c->node, &m->s->ctxs);
	m->nr_ctxs++;
	pthread_mutex_unlock(&conn->lock);
	*out = c;
	return 0;
}

int djinn_ctx_new(struct djinn_model *m, uint32_t max_tokens,
		  struct djinn_ctx **out)
{
	struct djinn_ctx_new req = { 0 };
	struct djinn_ctx_resp r;
	struct iovec iov = { &req, sizeof(req) };
	int ret;

	if (!m || !out)
		return refuse(-EINVAL, "context new: NULL argument");
	/* a length over the model's is djinnd's to refuse: its message
	 * says why (the positions, or a sliding window) */
	req.model = m->handle;
	req.max_tokens = max_tokens;
	ret = __djinn_call_sync(m->s->conn, DJINN_MSG_CTX_NEW, m->s->id, &iov,
				1, &r, sizeof(r));
	if (ret)
		return ret;
	return ctx_make(m, &r, 0, out);
}

/*
 * Mark @c busy for an operation that needs it idle, paused or not as
 * @want_paused says, and room for @n more tokens: 0, -EBUSY or -ENOSPC
 * (checked here, so that a step that cannot fit changes nothing: the
 * daemon would run a decode up to the end of the room). Under conn->lock.
 */
static int ctx_claim_room(struct djinn_ctx *c, bool want_paused, uint32_t n,
			  const char *what)
{
	if (c->busy)
		return refuse(-EBUSY, "%s: a step of the context is in flight",
			      what);
	if (want_paused && !c->paused)
		return refuse(-EBUSY, "%s: the context is not paused", what);
	if (!want_paused && c->paused)
		return refuse(-EBUSY,
			      "%s: the context is paused at a breakpoint "
			      "(resume, reset or free it)",
			      what);
	if (n > c->max_tokens - c->len)
		return refuse(-ENOSPC,
			      "%s: %u tokens more do not fit a context of %u "
			      "holding %u",
			      what, n, c->max_tokens, c->len);
	c->busy = true;
	return 0;
}

static int ctx_claim(struct djinn_ctx *c, bool want_paused, const char *what)
{
	return ctx_claim_room(c, want_paused, 0, what);
}

int djinn_ctx_fork(struct djinn_ctx *c, struct djinn_ctx **out)
{
	struct djinn_conn *conn;
	struct djinn_ctx_resp r;
	struct iovec iov;
	uint32_t len;
	int ret;

	if (!c || !out)
		return refuse(-EINVAL, "context fork: NULL argument");
	conn = conn_of(c);
	pthread_mutex_lock(&conn->lock);
	ret = ctx_claim(c, false, "context fork");
	len = c->len;
	pthread_mutex_unlock(&conn->lock);
	if (ret)
		return ret;
	iov = (struct iovec){ &c->handle, sizeof(c->handle) };
	ret = __djinn_call_sync(conn, DJINN_MSG_CTX_FORK, c->m->s->id, &iov, 1,
				&r, sizeof(r));
	if (!ret)
		ret = ctx_make(c->m, &r, len, out);
	pthread_mutex_lock(&conn->lock);
	c->busy = false;
	pthread_mutex_unlock(&conn->lock);
	return ret;
}

/* CTX_RESET (@len 0) or CTX_TRUNCATE: keep @c's first @len tokens. */
static int ctx_cut(struct djinn_ctx *c, uint32_t len, const char *what)
{
	struct djinn_ctx_truncate t = { .len = len };
	struct djinn_request **stubs = NULL;
	unsigned int nr = 0;
	struct djinn_conn *conn;
	struct iovec iov;
	int ret;

	if (!c)
		return -EINVAL;
	conn = conn_of(c);
	pthread_mutex_lock(&conn->lock);
	if (c->busy) {
		pthread_mutex_unlock(&conn->lock);
		return refuse(-EBUSY, "context %s: a step of it is in flight",
			      what);
	}
	c->busy = true;
	pthread_mutex_unlock(&conn->lock);
	t.ctx = c->handle;
	iov = len ? (struct iovec){ &t, sizeof(t) } :
		    (struct iovec){ &c->handle, sizeof(c->handle) };
	ret = __djinn_call_sync(
		conn, len ? DJINN_MSG_CTX_TRUNCATE : DJINN_MSG_CTX_RESET,
		c->m->s->id, &iov, 1, NULL, 0);
	pthread_mutex_lock(&conn->lock);
	c->busy = false;
	if (!ret) {
		c->len = len;
		c->paused = false;
		stubs = take_stubs(c, &nr);
	}
	pthread_mutex_unlock(&conn->lock);
	drop_stubs(stubs, nr);
	return ret;
}

int djinn_ctx_signal(struct djinn_ctx *c, unsigned int phase,
		     uint64_t expected_ns)
{
	struct djinn_signal p = { .phase = phase, .expected_ns = expected_ns };
	struct iovec iov = { &p, sizeof(p) };

	if (!c || phase > DJINN_PHASE_IDLE)
		return -EINVAL;
	if (phase == DJINN_PHASE_IO_WAIT &&
	    (!expected_ns || expected_ns > INT64_MAX))
		return refuse(-EINVAL,
			      "IO_WAIT of %llu ns: a context's wait "
			      "needs an estimate in (0, INT64_MAX]",
			      (unsigned long long)expected_ns);
	p.ctx = c->handle;
	return __djinn_call_sync(conn_of(c), DJINN_MSG_SIGNAL, c->m->s->id,
				 &iov, 1, NULL, 0);
}

int djinn_ctx_reset(struct djinn_ctx *c)
{
	return ctx_cut(c, 0, "reset");
}

int djinn_ctx_truncate(struct djinn_ctx *c, uint32_t len)
{
	return ctx_cut(c, len, "truncate");
}

int djinn_ctx_free(struct djinn_ctx *c)
{
	struct djinn_request **stubs;
	struct djinn_conn *conn;
	struct iovec iov;
	unsigned int nr;
	int ret;

	if (!c)
		return 0;
	conn = conn_of(c);
	iov = (struct iovec){ &c->handle, sizeof(c->handle) };
	ret = __djinn_call_sync(conn, DJINN_MSG_CTX_FREE, c->m->s->id, &iov, 1,
				NULL, 0);
	pthread_mutex_lock(&conn->lock);
	stubs = take_stubs(c, &nr);
	list_del_init(&c->node);
	c->m->nr_ctxs--;
	pthread_mutex_unlock(&conn->lock);
	drop_stubs(stubs, nr);
	free(c);
	return ret;
}

int djinn_ctx_len(const struct djinn_ctx *c)
{
	struct djinn_conn *conn;
	uint32_t len;

	if (!c)
		return -EINVAL;
	conn = conn_of(c);
	pthread_mutex_lock(&conn->lock);
	len = c->len;
	pthread_mutex_unlock(&conn->lock);
	return len > INT32_MAX ? INT32_MAX : (int)len;
}

/* ---------------------------------------------------------------------- */
/* Steps */

static uint64_t answer_len(uint32_t nr_tokens)
{
	return sizeof(struct djinn_ctx_step_resp) +
	       (((uint64_t)nr_tokens * sizeof(int32_t) + 7) & ~7ull);
}

/* The answer @r (@got bytes) breaks the protocol? Why, or NULL. */
static const char *answer_bad(const struct djinn_ctx *c,
			      const struct djinn_ctx_step_resp *r, uint64_t got,
			      unsigned int break_layer)
{
	const struct djinn_model_info *mi = &c->m->info;
	const int32_t *tok = (const void *)(r + 1);

	if (got < sizeof(*r) || got != answer_len(r->nr_tokens))
		return "length";
	if (r->state != DJINN_CTX_DONE && r->state != DJINN_CTX_PAUSED)
		return "state";
	if (r->nr_tokens > c->want ||
	    (r->state == DJINN_CTX_DONE && r->nr_tokens != c->want))
		return "nr_tokens";
	if (r->len > c->max_tokens)
		return "len";
	if (r->state == DJINN_CTX_DONE &&
	    (r->hidden || !r->logits != !c->logits_wanted))
		return "handles";
	if (r->state == DJINN_CTX_PAUSED &&
	    (!r->hidden || r->logits || !break_layer ||
	     r->layer != break_layer - 1))
		return "breakpoint";
	for (uint32_t i = 0; i < r->nr_tokens; i++)
		if (tok[i] < 0 || (uint32_t)tok[i] >= mi->vocab)
			return "token";
	return NULL;
}

/* Release tensor @handle of @s now: what no stub could be made for. */
static void release_now(struct djinn_session *s, uint64_t handle)
{
	struct djinn_tensor_release p = { handle };
	struct iovec iov = { &p, sizeof(p) };

	__djinn_call_sync(s->conn, DJINN_MSG_TENSOR_RELEASE, s->id, &iov, 1,
			  NULL, 0);
}

/* Unclaim @c after a step that did not happen as asked. */
static int step_failed(struct djinn_ctx *c, bool paused, int err)
{
	struct djinn_conn *conn = conn_of(c);

	pthread_mutex_lock(&conn->lock);
	c->paused = paused;
	c->busy = false;
	pthread_mutex_unlock(&conn->lock);
	return err;
}

/*
 * Run a step of @c (claimed, with its c->type, want, tokens_out, ...) whose
 * frame is @iov[@iovcnt] and take in its answer: @c's state, its stubs,
 * the tokens, *@out. Returns a decode's tokens so far, 0 for a prefill,
 * or the error; unclaims @c.
 */
static int step_run(struct djinn_ctx *c, uint16_t type, const struct iovec *iov,
		    int iovcnt, struct djinn_step *out)
{
	struct djinn_conn *conn = conn_of(c);
	struct djinn_session *s = c->m->s;
	struct djinn_request *nl = NULL, *nh = NULL;
	struct djinn_request *nl_lost = NULL, *nh_lost = NULL;
	const struct djinn_ctx_step_resp *r;
	bool resume = type == DJINN_MSG_CTX_RESUME;
	uint64_t got = 0, max = answer_len(c->want);
	const char *bad;
	void *buf;
	int ret = 0;

	buf = calloc(1, max);
	if (!buf)
		return step_failed(c, resume, -ENOMEM);
	ret = call_upto(conn, type, s->id, iov, iovcnt, buf, max, &got);
	if (ret) {
		free(buf);
		/* A bad replacement leaves it paused; anything else ends the
		 * step: the daemon abandoned it, or never began it. */
		return step_failed(
			c, resume && (ret == -EINVAL || ret == -ENOENT), ret);
	}
	r = buf;
	bad = answer_bad(c, r, got, c->break_layer);
	if (bad) {
		__djinn_conn_fail(conn, -EPROTO,
				  "%s answer (%s): state %u, %u tokens in "
				  "%llu bytes, len %u, layer %u",
				  __djinn_msg_str(type), bad, r->state,
				  got >= sizeof(*r) ? r->nr_tokens : 0,
				  (unsigned long long)got, r->len, r->layer);
		free(buf);
		return step_failed(c, false, -EPROTO);
	}
	if (r->logits) {
		struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_F32,
					       .ndim = 2,
					       .dims = { 1,
							 c->m->info.vocab } };

		ret = __djinn_request_stub(s, &d, r->logits, &nl);
		if (ret)
			release_now(s, r->logits);
	}
	if (r->hidden) {
		struct djinn_tensor_desc d = {
			.dtype = (uint8_t)c->m->info.dtype,
			.ndim = 2,
			.dims = { c->step_tokens, c->m->info.hidden }
		};
		int err = __djinn_request_stub(s, &d, r->hidden, &nh);

		if (err)
			release_now(s, r->hidden);
		ret = ret ? ret : err;
	}
	if (r->nr_tokens)
		memcpy(c->tokens_out, r + 1, r->nr_tokens * sizeof(int32_t));
	if (out) {
		memset(out, 0, sizeof(*out));
		out->state = r->state;
		out->nr_tokens = r->nr_tokens;
		out->len = r->len;
		out->layer = r->state == DJINN_CTX_PAUSED ? r->layer : 0;
		out->run_ns = r->run_ns;
		out->logits = nl ? djinn_request_results(nl, 0) : NULL;
		out->hidden = nh ? djinn_request_results(nh, 0) : NULL;
	}
	pthread_mutex_lock(&conn->lock);
	c->len = r->len;
	c->paused = r->state == DJINN_CTX_PAUSED;
	if (keep_stub(c, nl)) {
		/* freed, its tensor released: the caller never sees it */
		ret = ret ? ret : -ENOMEM;
		nl_lost = nl;
	}
	if (keep_stub(c, nh)) {
		ret = ret ? ret : -ENOMEM;
		nh_lost = nh;
	}
	c->busy = false;
	pthread_mutex_unlock(&conn->lock);
	djinn_request_free(nl_lost);
	djinn_request_free(nh_lost);
	if (out && (nl_lost || nh_lost)) {
		out->logits = NULL;
		out->hidden = NULL;
	}
	if (!ret)
		ret = (int)r->nr_tokens; /* 0 for a prefill */
	free(buf);
	return ret;
}

static int opts_check(const struct djinn_ctx *c,
		      const struct djinn_step_opts *opts,
		      const struct djinn_step *out, const char *what)
{
	if (!opts || !opts->break_layer)
		return 0;
	if (opts->break_layer > c->m->info.n_layer)
		return refuse(-EINVAL,
			      "%s: a breakpoint after layer %u of %u layers",
			      what, opts->break_layer - 1, c->m->info.n_layer);
	if (!out)
		return refuse(-EINVAL,
			      "%s: a breakpoint needs a struct "
			      "djinn_step to say it paused",
			      what);
	return 0;
}

/*
 * What a prefill and a decode of @n tokens do alike once their arguments
 * are checked: @opts checked, room claimed, @c set up for the step of
 * @type (a decode's tokens go to @tokens_out, one a step; a prefill takes
 * all @n in one) and @st's common fields filled. 0 or -errno.
 */
static int ctx_step_begin(struct djinn_ctx *c, uint16_t type, uint32_t n,
			  int32_t *tokens_out,
			  const struct djinn_step_opts *opts,
			  struct djinn_step *out, struct djinn_ctx_step *st)
{
	bool decode = type == DJINN_MSG_CTX_DECODE;
	const char *what = decode ? "decode" : "prefill";
	struct djinn_conn *conn;
	int ret;

	ret = opts_check(c, opts, out, what);
	if (ret)
		return ret;
	conn = conn_of(c);
	pthread_mutex_lock(&conn->lock);
	ret = ctx_claim_room(c, false, n, what);
	if (!ret) {
		c->type = type;
		c->want = decode ? n : 0;
		c->tokens_out = tokens_out;
		c->step_tokens = decode ? 1 : n;
		c->break_layer = opts ? opts->break_layer : 0;
		c->logits_wanted = opts && opts->logits;
	}
	pthread_mutex_unlock(&conn->lock);
	if (ret)
		return ret;
	st->ctx = c->handle;
	st->nr_tokens = n;
	st->flags = opts && opts->logits ? DJINN_STEP_LOGITS : 0;
	st->break_layer = opts ? opts->break_layer : 0;
	return 0;
}

int djinn_ctx_prefill(struct djinn_ctx *c, const int32_t *tokens, uint32_t n,
		      const struct djinn_step_opts *opts,
		      struct djinn_step *out)
{
	struct djinn_ctx_step st = { 0 };
	struct iovec iov[2];
	int ret;

	if (!c || (!tokens && n))
		return refuse(-EINVAL, "prefill: NULL argument");
	if (!n)
		return refuse(-EINVAL, "prefill: no tokens");
	if (n > DJINN_MAX_STEP_TOKENS)
		return refuse(-E2BIG, "prefill: %u tokens, limit %u", n,
			      DJINN_MAX_STEP_TOKENS);
	for (uint32_t i = 0; i < n; i++)
		if (tokens[i] < 0 || (uint32_t)tokens[i] >= c->m->info.vocab)
			return refuse(-EINVAL,
				      "token %d at %u is outside the "
				      "vocabulary of %u",
				      tokens[i], i, c->m->info.vocab);
	ret = ctx_step_begin(c, DJINN_MSG_CTX_PREFILL, n, NULL, opts, out, &st);
	if (ret)
		return ret;
	iov[0] = (struct iovec){ &st, sizeof(st) };
	iov[1] = (struct iovec){ (void *)tokens, n * sizeof(int32_t) };
	return step_run(c, DJINN_MSG_CTX_PREFILL, iov, 2, out);
}

int djinn_ctx_decode(struct djinn_ctx *c, uint32_t n,
		     const struct djinn_sampling *sp, int32_t *tokens_out,
		     const struct djinn_step_opts *opts, struct djinn_step *out)
{
	struct djinn_ctx_step st = { 0 };
	struct iovec iov;
	int ret;

	if (!c || !tokens_out)
		return refuse(-EINVAL, "decode: NULL argument");
	if (!n)
		return refuse(-EINVAL, "decode: no tokens asked for");
	if (n > DJINN_MAX_STEP_TOKENS)
		return refuse(-E2BIG, "decode: %u tokens, limit %u", n,
			      DJINN_MAX_STEP_TOKENS);
	if (sp && (!(sp->temperature >= 0.0f) || isinf(sp->temperature) ||
		   !(sp->top_p >= 0.0f && sp->top_p <= 1.0f) || sp->__reserved))
		return refuse(-EINVAL,
			      "decode: sampling with temperature %g and top_p "
			      "%g: want a temperature >= 0 and top_p in [0, 1]",
			      (double)sp->temperature, (double)sp->top_p);
	ret = ctx_step_begin(c, DJINN_MSG_CTX_DECODE, n, tokens_out, opts, out,
			     &st);
	if (ret)
		return ret;
	if (sp) {
		st.sampling.temperature = sp->temperature;
		st.sampling.top_k = sp->top_k;
		st.sampling.top_p = sp->top_p;
		st.sampling.seed = sp->seed;
	}
	iov = (struct iovec){ &st, sizeof(st) };
	return step_run(c, DJINN_MSG_CTX_DECODE, &iov, 1, out);
}

int djinn_ctx_resume(struct djinn_ctx *c, struct djinn_tensor *replacement,
		     struct djinn_step *out)
{
	struct djinn_ctx_resume req = { 0 };
	struct iovec iov = { &req, sizeof(req) };
	struct djinn_conn *conn;
	int ret;

	if (!c)
		return refuse(-EINVAL, "resume: NULL argument");
	if (replacement && replacement->s != c->m->s)
		return refuse(-EINVAL,
			      "resume: the replacement is another session's");
	conn = conn_of(c);
	pthread_mutex_lock(&conn->lock);
	ret = ctx_claim(c, true, "resume");
	pthread_mutex_unlock(&conn->lock);
	if (ret)
		return ret;
	req.ctx = c->handle;
	req.hidden = replacement ? replacement->info.handle : 0;
	return step_run(c, DJINN_MSG_CTX_RESUME, &iov, 1, out);
}

/* ---------------------------------------------------------------------- */

void __djinn_models_teardown(struct djinn_session *s)
{
	/* the stubs' requests went with the session's requests */
	while (!list_empty(&s->ctxs)) {
		struct djinn_ctx *c =
			list_first_entry(&s->ctxs, struct djinn_ctx, node);

		list_del_init(&c->node);
		free(c->stubs);
		free(c);
	}
	while (!list_empty(&s->models)) {
		struct djinn_model *m =
			list_first_entry(&s->models, struct djinn_model, node);

		list_del_init(&m->node);
		free(m);
	}
}
