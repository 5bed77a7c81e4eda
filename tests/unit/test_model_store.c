// SPDX-License-Identifier: MIT
/*
 * The model store on a real VMU over the host provider: models load by
 * name into the text segment once, two names with the same weights share
 * one entry, holders are counted per session, list and evict behave,
 * names cannot leave the model directory, and a bad or oversized model
 * is refused leaving the VMU as it was; a load never holds the store's
 * lock, so list, evict, close and other opens go on while it runs, and a
 * second open of the same name waits for it. Runs from the repository root
 * (it calls scripts/mkmodel.py).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "model/store.h"
#include "model/store_test.h"
#include "vmu/vmu_test.h"
#include "testutil.h"

static char dir[64];

struct fix {
	struct vmu_provider *p;
	struct vmu *v;
	struct vmu_session *s1, *s2;
	struct model_store *ms;
};

static void fix_init(struct fix *f, uint64_t capacity)
{
	assert_int_equal(vmu_host_provider_create(capacity, 0, &f->p), 0);
	assert_int_equal(vmu_create(f->p, NULL, &f->v), 0);
	assert_int_equal(vmu_session_create(f->v, "t1", &f->s1), 0);
	assert_int_equal(vmu_session_create(f->v, "t2", &f->s2), 0);
	assert_int_equal(model_store_create(f->v, dir, &f->ms), 0);
}

static void fix_fini(struct fix *f)
{
	model_store_destroy(f->ms);
	vmu_session_destroy(f->s1);
	vmu_session_destroy(f->s2);
	vmu_destroy(f->v);
	f->p->ops->free(f->p);
}

static uint64_t text_entries(struct vmu *v)
{
	struct vmu_stats st;

	vmu_get_stats(v, &st);
	return st.seg[VMU_SEG_TEXT].entries;
}

static uint64_t text_used(struct vmu *v)
{
	struct vmu_stats st;

	vmu_get_stats(v, &st);
	return st.seg[VMU_SEG_TEXT].used;
}

static struct model_hold *open_ok(struct fix *f, struct vmu_session *s,
				  const char *name)
{
	char msg[ST_MSG_LEN] = "";
	struct model_hold *h = NULL;

	if (model_open(f->ms, s, name, &h, msg, sizeof(msg)))
		fail_msg("model %s: %s", name, msg);
	return h;
}

/* The weights in the text segment are the file's bytes. */
static void check_weights(struct model_hold *h, const char *name,
			  const char *tensor, int layer, unsigned int k)
{
	char path[256], msg[ST_MSG_LEN];
	const struct st_tensor *t;
	struct st_set *set;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	assert_int_equal(st_set_open(path, &set, msg, sizeof(msg)), 0);
	t = st_set_find(set, tensor);
	assert_non_null(t);
	assert_int_equal(memcmp(dev_ptr(model_weight_addr(h, layer, k)),
				t->data, t->size),
			 0);
	st_set_close(set);
}

static void test_share_list_evict(void **state)
{
	struct model_hold *a, *b, *c, *a2;
	struct model_info *info;
	char msg[ST_MSG_LEN];
	struct fix f;
	uint64_t used;
	size_t nr;

	fix_init(&f, 64 * MiB);
	a = open_ok(&f, f.s1, "a");
	assert_int_equal(a->m->cfg.arch, MODEL_GPT2);
	assert_int_equal(text_entries(f.v), 1);
	used = text_used(f.v);
	assert_int_equal(used, vmu_round(f.v, a->m->layout.bytes));
	check_weights(a, "a", "h.1.mlp.c_fc.weight", 1, GPT2_FC_W);
	check_weights(a, "a", "wte.weight", -1, GPT2_WTE);
	/* the tied head is the embedding */
	assert_int_equal(model_weight_addr(a, -1, GPT2_LM_HEAD),
			 model_weight_addr(a, -1, GPT2_WTE));

	/* the same weights under another name, another session: shared */
	b = open_ok(&f, f.s2, "b");
	assert_int_equal(text_entries(f.v), 1);
	assert_int_equal(text_used(f.v), used);
	assert_int_equal(vmu_text_addr(b->text), vmu_text_addr(a->text));
	/* other weights: an entry of their own */
	c = open_ok(&f, f.s1, "c");
	assert_int_equal(c->m->cfg.arch, MODEL_LLAMA);
	assert_int_equal(text_entries(f.v), 2);
	check_weights(c, "c", "model.layers.0.self_attn.k_proj.weight", 0,
		      LLAMA_K);
	/* a second hold of the same session */
	a2 = open_ok(&f, f.s1, "a");
	assert_ptr_equal(a2->m, a->m);

	assert_int_equal(model_store_list(f.ms, &info, &nr), 0);
	assert_int_equal(nr, 3);
	assert_string_equal(info[0].name, "a");
	assert_string_equal(info[1].name, "b");
	assert_string_equal(info[2].name, "c");
	assert_int_equal(info[0].holders, 2);
	assert_int_equal(info[1].holders, 1);
	assert_int_equal(info[2].arch, MODEL_LLAMA);
	assert_int_equal(info[2].dtype, DJINN_DTYPE_BF16);
	assert_int_equal(info[0].bytes, a->m->layout.bytes);
	assert_memory_equal(info[0].fp, info[1].fp, VMU_FP_LEN);
	assert_memory_not_equal(info[0].fp, info[2].fp, VMU_FP_LEN);
	free(info);

	/* evict: held, unknown, then unheld */
	assert_int_equal(model_store_evict(f.ms, "a", msg, sizeof(msg)),
			 -EBUSY);
	assert_non_null(strstr(msg, "model a has 2 holders"));
	assert_int_equal(model_store_evict(f.ms, "zz", msg, sizeof(msg)),
			 -ENOENT);
	assert_int_equal(model_store_evict(f.ms, "../a", msg, sizeof(msg)),
			 -EINVAL);
	model_close(a);
	model_close(a2);
	assert_int_equal(model_store_evict(f.ms, "a", msg, sizeof(msg)), 0);
	/* b still holds the weights */
	assert_int_equal(text_entries(f.v), 2);
	assert_int_equal(model_store_list(f.ms, &info, &nr), 0);
	assert_int_equal(nr, 2);
	assert_string_equal(info[0].name, "b");
	free(info);
	/* open a again: found in the text segment, not loaded twice */
	a = open_ok(&f, f.s1, "a");
	assert_int_equal(text_entries(f.v), 2);
	assert_int_equal(vmu_text_addr(b->text), vmu_text_addr(a->text));
	model_close(a);
	model_close(b);
	/* evicting a leaves the weights to b's name, cached; then b */
	assert_int_equal(model_store_evict(f.ms, "a", msg, sizeof(msg)), 0);
	assert_int_equal(text_entries(f.v), 2);
	assert_int_equal(model_store_evict(f.ms, "b", msg, sizeof(msg)), 0);
	assert_int_equal(text_entries(f.v), 1);
	assert_int_equal(text_used(f.v), vmu_round(f.v, c->m->layout.bytes));

	/* c reclaimed by the VMU while unheld: the next open reloads */
	model_close(c);
	assert_int_equal(vmu_reclaim(f.v, 63 * MiB) >= 62 * MiB, 1);
	assert_int_equal(text_entries(f.v), 0);
	c = open_ok(&f, f.s2, "c");
	assert_int_equal(text_entries(f.v), 1);
	check_weights(c, "c", "model.norm.weight", -1, LLAMA_NORM);
	model_close(c);
	fix_fini(&f);
}

static void refused(struct fix *f, const char *name, int err, const char *words)
{
	struct model_hold *h = (void *)0x1;
	uint64_t entries = text_entries(f->v), used = text_used(f->v);
	struct vmu_usage u;
	char msg[ST_MSG_LEN] = "";

	if (model_open(f->ms, f->s1, name, &h, msg, sizeof(msg)) != err)
		fail_msg("model %s: not %d: %s", name, err, msg);
	if (!strstr(msg, words))
		fail_msg("message '%s' lacks '%s'", msg, words);
	assert_ptr_equal(h, (void *)0x1);
	assert_int_equal(text_entries(f->v), entries);
	assert_int_equal(text_used(f->v), used);
	vmu_session_usage(f->s1, &u);
	assert_int_equal(u.text_refs, 0);
}

static void test_refused(void **state)
{
	struct model_info *info;
	char name[80];
	uint64_t region;
	struct fix f;
	size_t nr;

	fix_init(&f, 64 * MiB);
	refused(&f, "../a", -EINVAL, "starts with");
	refused(&f, "x/../a", -EINVAL, "is not one of");
	refused(&f, "a/b", -EINVAL, "is not one of");
	refused(&f, ".a", -EINVAL, "starts with '.'");
	refused(&f, "..", -EINVAL, "starts with '.'");
	refused(&f, "", -EINVAL, "model name of 0 bytes");
	memset(name, 'x', sizeof(name));
	name[sizeof(name) - 1] = 0;
	refused(&f, name, -EINVAL, "too many");
	refused(&f, "a b", -EINVAL, "0x20");
	refused(&f, "nothere", -ENOENT, "model nothere: no directory");
	refused(&f, "bad", -EINVAL, "bad/model.safetensors: tensor");
	refused(&f, "nocfg", -ENOENT, "nocfg/config.json");
	assert_int_equal(model_store_list(f.ms, &info, &nr), 0);
	assert_int_equal(nr, 0);
	assert_null(info);
	fix_fini(&f);

	/* weights over the capacity, or over what is free: nothing left */
	fix_init(&f, 4 * MiB);
	refused(&f, "big", -E2BIG, "model big: no room for 10341120 bytes");
	fix_fini(&f);
	fix_init(&f, 12 * MiB);
	assert_int_equal(vmu_region_create(f.s2, 4 * MiB, &region), 0);
	assert_int_equal(vmu_region_resize(f.s2, region, 4 * MiB, NULL), 0);
	assert_int_equal(vmu_region_pin(f.s2, region, NULL, NULL), 0);
	refused(&f, "big", -ENOMEM, "model big: no room for");
	assert_int_equal(vmu_region_unpin(f.s2, region), 0);
	fix_fini(&f);
}

/* ---------------------------------------------------------------------- */
/* Uploads */

static void *slurp(const char *name, const char *file, size_t *len)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%s/%s", dir, name, file);
	return read_file(path, len);
}

/*
 * A model sent as bytes: listed as upload-HEX, its weights its tenant's
 * own text (not the served model's with the same files: tenants share
 * only what the administrator serves); opened again by its sources'
 * fingerprint alone by its tenant, and by no other; its name never
 * reaches the directory's namespace nor the other way round; corrupt
 * bytes refused as strictly as a file, leaving nothing.
 */
static void test_upload(void **state)
{
	struct model_upload up = { .nr_files = 1 };
	struct model_hold *a, *u, *u2, *h = (void *)0x1;
	struct vmu_session *s3;
	size_t clen, wlen, blen;
	void *cfg = slurp("a", "config.json", &clen);
	void *w = slurp("a", "model.safetensors", &wlen), *bad;
	const void *files[1];
	struct model_info *info;
	char msg[ST_MSG_LEN], name[MODEL_NAME_MAX];
	uint64_t used;
	struct fix f;
	size_t nr;

	fix_init(&f, 64 * MiB);
	a = open_ok(&f, f.s1, "a");
	used = text_used(f.v);
	memset(up.src, 0x5a, sizeof(up.src));
	up.src[0] = 0x01;
	files[0] = w;
	up.config = cfg;
	up.config_len = clen;
	up.files = files;
	up.lens = &wlen;
	if (model_open_uploaded(f.ms, f.s2, &up, &u, msg, sizeof(msg)))
		fail_msg("%s", msg);
	model_upload_name(up.src, name);
	assert_string_equal(name, "upload-015a5a5a5a5a5a5a");
	assert_string_equal(u->m->name, name);
	/* the same weights as a, in an entry of t2's own */
	assert_int_equal(text_used(f.v),
			 used + vmu_round(f.v, vmu_text_size(a->text)));
	assert_true(vmu_text_addr(u->text) != vmu_text_addr(a->text));
	assert_memory_equal(u->m->fp, a->m->fp, VMU_FP_LEN);
	/* by fingerprint alone: not from another tenant's session... */
	up.config = NULL;
	up.files = NULL;
	assert_int_equal(model_open_uploaded(f.ms, f.s1, &up, &h, msg,
					     sizeof(msg)),
			 -ENOENT);
	assert_non_null(strstr(msg, "not uploaded: send its files"));
	/* ...but from another session of t2's */
	assert_int_equal(vmu_session_create(f.v, "t2", &s3), 0);
	if (model_open_uploaded(f.ms, s3, &up, &u2, msg, sizeof(msg)))
		fail_msg("%s", msg);
	assert_ptr_equal(u2->m, u->m);
	assert_int_equal(model_store_list(f.ms, &info, &nr), 0);
	assert_int_equal(nr, 2);
	assert_string_equal(info[1].name, name);
	assert_int_equal(info[1].holders, 2);
	free(info);
	/* the directory has no such model; unknown sources are -ENOENT */
	assert_int_equal(model_open(f.ms, f.s1, name, &h, msg, sizeof(msg)),
			 -ENOENT);
	up.src[0] = 0x02;
	assert_int_equal(model_open_uploaded(f.ms, f.s1, &up, &h, msg,
					     sizeof(msg)),
			 -ENOENT);
	assert_non_null(strstr(msg, "not uploaded: send its files"));
	/* corrupt bytes: the same checks as a file, naming the upload */
	up.config = cfg;
	up.files = files;
	blen = wlen - 1;
	up.lens = &blen;
	bad = w;
	files[0] = bad;
	assert_int_equal(model_open_uploaded(f.ms, f.s1, &up, &h, msg,
					     sizeof(msg)),
			 -EINVAL);
	assert_non_null(strstr(msg, "upload-025a5a5a5a5a5a5a: file 0: tensor"));
	assert_non_null(strstr(msg, "past the data"));
	up.lens = &wlen;
	up.config_len = 3;
	assert_int_equal(model_open_uploaded(f.ms, f.s1, &up, &h, msg,
					     sizeof(msg)),
			 -EINVAL);
	assert_non_null(strstr(msg, "upload-025a5a5a5a5a5a5a: config.json"));
	assert_ptr_equal(h, (void *)0x1);
	assert_int_equal(model_store_list(f.ms, &info, &nr), 0);
	assert_int_equal(nr, 2);
	free(info);
	/* evict by its name once unheld */
	model_close(u);
	model_close(u2);
	vmu_session_destroy(s3);
	assert_int_equal(model_store_evict(f.ms, name, msg, sizeof(msg)), 0);
	model_close(a);
	fix_fini(&f);
	free(cfg);
	free(w);
}

/* ---------------------------------------------------------------------- */
/* Loads run outside the store's lock */

/*
 * A gate in the store's hook: a load of @block stops in it until the
 * test opens it. If the test does not get there within 30 s (because a
 * store call it made waited for that load), the gate gives up, records
 * it, and the test fails instead of hanging.
 */
struct gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	const char *block;
	unsigned int loads, blocked_loads, waiting;
	bool open, gave_up;
};

static void gate_hook(void *arg, enum model_hook ev, const char *name)
{
	struct gate *g = arg;
	struct timespec until;

	pthread_mutex_lock(&g->mu);
	if (ev == MODEL_HOOK_WAITING) {
		g->waiting++;
	} else {
		g->loads++;
		if (!strcmp(name, g->block)) {
			g->blocked_loads++;
			pthread_cond_broadcast(&g->cv);
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_sec += 30;
			while (!g->open && !g->gave_up)
				if (pthread_cond_timedwait(&g->cv, &g->mu,
							   &until) == ETIMEDOUT)
					g->gave_up = true;
		}
	}
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

/* Wait until *@what reaches @n (bounded: a failure, not a hang). */
static void gate_wait(struct gate *g, unsigned int *what, unsigned int n)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 30;
	pthread_mutex_lock(&g->mu);
	while (*what < n)
		if (pthread_cond_timedwait(&g->cv, &g->mu, &until) == ETIMEDOUT)
			break;
	assert_true(*what >= n);
	pthread_mutex_unlock(&g->mu);
}

struct opener {
	pthread_t th;
	struct fix *f;
	struct vmu_session *s;
	const char *name;
	struct model_hold *h;
	int ret;
	char msg[ST_MSG_LEN];
};

static void *open_thread(void *arg)
{
	struct opener *o = arg;

	o->ret = model_open(o->f->ms, o->s, o->name, &o->h, o->msg,
			    sizeof(o->msg));
	return NULL;
}

static void opener_start(struct opener *o, struct fix *f, struct vmu_session *s,
			 const char *name)
{
	memset(o, 0, sizeof(*o));
	o->f = f;
	o->s = s;
	o->name = name;
	assert_int_equal(pthread_create(&o->th, NULL, open_thread, o), 0);
}

static void test_load_unlocked(void **state)
{
	struct gate g = { .mu = PTHREAD_MUTEX_INITIALIZER,
			  .cv = PTHREAD_COND_INITIALIZER,
			  .block = "big" };
	struct opener A, B;
	struct model_hold *a, *c;
	struct model_info *info;
	char msg[ST_MSG_LEN];
	struct fix f;
	size_t nr;

	fix_init(&f, 64 * MiB);
	a = open_ok(&f, f.s1, "a");
	model_store_set_hook(f.ms, gate_hook, &g);

	/* A loads "big" (10 MB) and stops inside the load */
	opener_start(&A, &f, f.s1, "big");
	gate_wait(&g, &g.blocked_loads, 1);
	/* meanwhile: list (big is not listed yet), evict (refused while
	 * loading), close, evict, and another name's whole load */
	assert_int_equal(model_store_list(f.ms, &info, &nr), 0);
	assert_int_equal(nr, 1);
	assert_string_equal(info[0].name, "a");
	free(info);
	assert_int_equal(model_store_evict(f.ms, "big", msg, sizeof(msg)),
			 -EBUSY);
	assert_non_null(strstr(msg, "model big is being loaded"));
	model_close(a);
	assert_int_equal(model_store_evict(f.ms, "a", msg, sizeof(msg)), 0);
	c = open_ok(&f, f.s2, "c");
	/* B opens "big" too: it waits for A's load, not a load of its own */
	opener_start(&B, &f, f.s2, "big");
	gate_wait(&g, &g.waiting, 1);
	pthread_mutex_lock(&g.mu);
	assert_false(g.gave_up); /* none of the above waited for A */
	g.open = true;
	pthread_cond_broadcast(&g.cv);
	pthread_mutex_unlock(&g.mu);
	assert_int_equal(pthread_join(A.th, NULL), 0);
	assert_int_equal(pthread_join(B.th, NULL), 0);
	if (A.ret || B.ret)
		fail_msg("A: %d %s; B: %d %s", A.ret, A.msg, B.ret, B.msg);
	assert_int_equal(g.blocked_loads, 1);
	assert_int_equal(g.loads, 2); /* big once, c once */
	assert_ptr_equal(A.h->m, B.h->m);
	assert_int_equal(vmu_text_addr(A.h->text), vmu_text_addr(B.h->text));
	assert_int_equal(text_entries(f.v), 2);
	assert_int_equal(model_store_list(f.ms, &info, &nr), 0);
	assert_int_equal(nr, 2);
	assert_string_equal(info[0].name, "big");
	assert_int_equal(info[0].holders, 2);
	free(info);
	model_close(A.h);
	model_close(B.h);
	model_close(c);

	/* a load that fails with an open waiting: it tries itself, and
	 * fails the same way; nothing is left listed */
	pthread_mutex_lock(&g.mu);
	g.block = "bad";
	g.open = false;
	g.blocked_loads = g.waiting = 0;
	pthread_mutex_unlock(&g.mu);
	opener_start(&A, &f, f.s1, "bad");
	gate_wait(&g, &g.blocked_loads, 1);
	opener_start(&B, &f, f.s2, "bad");
	gate_wait(&g, &g.waiting, 1);
	pthread_mutex_lock(&g.mu);
	g.open = true;
	pthread_cond_broadcast(&g.cv);
	pthread_mutex_unlock(&g.mu);
	assert_int_equal(pthread_join(A.th, NULL), 0);
	assert_int_equal(pthread_join(B.th, NULL), 0);
	assert_int_equal(A.ret, -EINVAL);
	assert_int_equal(B.ret, -EINVAL);
	assert_non_null(strstr(B.msg, "bad/model.safetensors"));
	assert_int_equal(g.blocked_loads, 2);
	assert_false(g.gave_up);
	assert_int_equal(model_store_list(f.ms, &info, &nr), 0);
	assert_int_equal(nr, 2); /* big and c, unheld */
	free(info);
	model_store_set_hook(f.ms, NULL, NULL);
	fix_fini(&f);
}

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/djinn-ms-XXXXXX");
	if (model_tmpdir(dir))
		return -1;
	run_cmd("python3 scripts/mkmodel.py --seed 5 %s/a", dir);
	run_cmd("cp -r %s/a %s/b", dir, dir);
	run_cmd("python3 scripts/mkmodel.py --arch llama --dtype bf16 --kv-heads 2 "
		"--shards 2 %s/c",
		dir);
	run_cmd("python3 scripts/mkmodel.py --layers 1 %s/bad", dir);
	run_cmd("truncate -s -1 %s/bad/model.safetensors", dir);
	run_cmd("python3 scripts/mkmodel.py --layers 1 %s/nocfg", dir);
	run_cmd("rm %s/nocfg/config.json", dir);
	run_cmd("python3 scripts/mkmodel.py --layers 1 --vocab 4096 --embd 320 "
		"--heads 4 %s/big",
		dir);
	return 0;
}

static int teardown(void **state)
{
	return rm_tree(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_share_list_evict),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_load_unlocked),
		cmocka_unit_test(test_upload),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
