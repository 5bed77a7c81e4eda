// SPDX-License-Identifier: MIT
/*
 * vmu-bench: the VMU's figures from TARGETS.md (design notes), each beside a
 * reference measured in the same run on the same machine.
 *
 *   alloc  allocations+frees per second per segment, beside malloc and
 *          beside a first-fit allocator over one arena (the usual
 *          caching-allocator design), same sizes, same pattern
 *   trace  an LLM-serving trace (GPT-2 124M shapes, f16 KV caches):
 *          reserved-minus-live bytes in the VMU and in the first-fit arena
 *   swap   swap-out and restore GB/s of a 256 MiB data region, beside
 *          memcpy of the same bytes
 *
 * Output is one JSON object per line (STYLE.md, Benchmarks); --report
 * prints the same figures as text, and by default only the trace, for
 * `make run`. Every random choice comes from xorshift64* seeded by --seed,
 * so a seed names a run.
 *
 * Usage: vmu-bench [--report] [--only alloc|trace|swap] [--seed N]
 * Exit status: 0 success, 1 a VMU call failed or bytes came back wrong,
 * 2 usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/sha.h>

#include "bench.h"
#include "vmu/vmu.h"

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

#define ALIGN_UP(x, a) (((x) + (a)-1) & ~((uint64_t)(a)-1))

static struct {
	bool report;
	uint64_t seed;
} opt = { .seed = 42 };

/* ------------------------------------------------------------------------ */
/* Helpers: time, random numbers, statistics, errors */

/* Keep @p alive: the compiler may not drop a malloc/free pair around it. */
static inline void sink(const void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

/* @x mixed: the first number of the stream seeded with it */
static uint64_t mix(uint64_t x)
{
	return splitmix64(&x);
}

struct rng {
	uint64_t s;
};

/* One stream per benchmark, so --only does not change what another sees. */
static void rng_init(struct rng *r, uint64_t stream)
{
	r->s = mix(opt.seed ^ mix(stream));
	if (!r->s)
		r->s = 0x2545f4914f6cdd1dull;
}

/* xorshift64* (Vigna, "An experimental exploration of Marsaglia's
 * xorshift generators, scrambled") */
static uint64_t rng_next(struct rng *r)
{
	r->s ^= r->s >> 12;
	r->s ^= r->s << 25;
	r->s ^= r->s >> 27;
	return r->s * 0x2545f4914f6cdd1dull;
}

/* Uniform in [lo, hi]. */
static uint64_t rng_range(struct rng *r, uint64_t lo, uint64_t hi)
{
	return lo + rng_next(r) % (hi - lo + 1);
}

/* Uniform in [0, 1). */
static double rng_unit(struct rng *r)
{
	return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* Every VMU call is checked; a benchmark that ignores errors measures
 * nothing. */
static void check(int ret, const char *what)
{
	if (ret < 0)
		fail("%s: %s (%d)", what, strerror(-ret), ret);
}

static void *xmalloc(size_t size)
{
	void *p = malloc(size);

	if (!p)
		fail("out of host memory (%zu bytes)", size);
	return p;
}

static const char *fmt_bytes(char *buf, size_t len, double x)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned int i = 0;

	while (fabs(x) >= 1024 && i < ARRAY_SIZE(unit) - 1) {
		x /= 1024;
		i++;
	}
	snprintf(buf, len, i ? "%.2f %s" : "%.0f %s", x, unit[i]);
	return buf;
}

/* ------------------------------------------------------------------------ */
/* Output: one printing path for JSON lines and for --report text */

/* --report: @f as a line of text. */
static void report(const struct fig *f)
{
	char val[32], base[32], ratio[32];
	bool has_base = isfinite(f->baseline);

	fig_fmt_num(val, sizeof(val), f->value);
	fig_fmt_num(base, sizeof(base), f->baseline);
	snprintf(ratio, sizeof(ratio), "null");
	/* Bytes read better in binary units, ratios in 3 digits. */
	if (!strcmp(f->unit, "bytes")) {
		fmt_bytes(val, sizeof(val), f->value);
		fmt_bytes(base, sizeof(base), f->baseline);
	}
	if (has_base && f->baseline != 0)
		snprintf(ratio, sizeof(ratio), "%.3g", f->value / f->baseline);
	printf("  %-36s %14s %-8s", f->metric, val,
	       strcmp(f->unit, "bytes") ? f->unit : "");
	if (has_base)
		printf(" %s %s, ratio %s", f->baseline_name, base, ratio);
	if (f->target_text)
		printf("  [target %s]", f->target_text);
	putchar('\n');
}

/* @f as a JSON line (lib/figure.h) with the run's seed, or as text. Its
 * target, from TARGETS.md, is said, not checked. */
static void emit(const struct fig *f)
{
	if (opt.report) {
		report(f);
		return;
	}
	fig_put(f);
	fig_u64("seed", opt.seed);
	fig_end();
}

/* ------------------------------------------------------------------------ */
/* First fit over one arena: the usual caching-allocator design
 *
 * Every block, free or used, sits on one list in address order; free
 * neighbours are merged on free, so no two free blocks touch. Allocation
 * takes the first free block that is large enough and splits off the
 * rest. Sizes round up to 256 bytes. Realloc grows in place when the next
 * block is free and large enough, otherwise allocates anew, copies and
 * frees the old block (a relocation).
 *
 * Block descriptors come from a fixed pool, so the allocator itself never
 * calls malloc. Blocks are handed out as descriptors and freed by
 * descriptor; ff_ptr() gives the pointer into the arena. A real allocator
 * would also map a pointer back to its block (a hash table in PyTorch's);
 * leaving that out only makes this reference faster.
 */

#define FF_ALIGN 256

struct ff_block {
	uint64_t off;
	uint64_t size; /* bytes spanned, a multiple of FF_ALIGN */
	uint64_t req; /* bytes asked for, while used */
	struct ff_block *prev;
	struct ff_block *next;
	bool used;
};

struct ff_arena {
	char *base; /* NULL: offsets only */
	uint64_t size;
	struct ff_block *head;
	struct ff_block *tail;
	struct ff_block *nodes;
	struct ff_block *spare;
	uint64_t live; /* requested bytes of used blocks */
	uint64_t relocs;
	uint64_t fails;
};

static struct ff_block *ff_node_get(struct ff_arena *a)
{
	struct ff_block *b = a->spare;

	if (b)
		a->spare = b->next;
	return b;
}

static void ff_node_put(struct ff_arena *a, struct ff_block *b)
{
	b->next = a->spare;
	a->spare = b;
}

static void ff_init(struct ff_arena *a, uint64_t size, bool backed,
		    unsigned int max_blocks)
{
	struct ff_block *b;
	unsigned int i;

	memset(a, 0, sizeof(*a));
	a->size = size & ~(uint64_t)(FF_ALIGN - 1);
	/* Backed arenas are never touched: pointers only. */
	if (backed)
		a->base = xmalloc(a->size);
	a->nodes = calloc(max_blocks, sizeof(*a->nodes));
	if (!a->nodes)
		fail("out of host memory (first-fit nodes)");
	for (i = 0; i < max_blocks; i++)
		ff_node_put(a, &a->nodes[i]);
	b = ff_node_get(a);
	b->off = 0;
	b->size = a->size;
	b->prev = b->next = NULL;
	a->head = a->tail = b;
}

static void ff_fini(struct ff_arena *a)
{
	free(a->nodes);
	free(a->base);
	memset(a, 0, sizeof(*a));
}

static uint64_t ff_round(uint64_t req)
{
	return req ? ALIGN_UP(req, FF_ALIGN) : FF_ALIGN;
}

static void *ff_ptr(const struct ff_arena *a, const struct ff_block *b)
{
	return a->base ? a->base + b->off : NULL;
}

/* Cut @b down to @keep bytes; the rest becomes a free block after it. */
static int ff_split(struct ff_arena *a, struct ff_block *b, uint64_t keep)
{
	struct ff_block *n;

	if (b->size == keep)
		return 0;
	n = ff_node_get(a);
	if (!n)
		return -ENOMEM;
	n->off = b->off + keep;
	n->size = b->size - keep;
	n->req = 0;
	n->used = false;
	n->prev = b;
	n->next = b->next;
	if (b->next)
		b->next->prev = n;
	else
		a->tail = n;
	b->next = n;
	b->size = keep;
	return 0;
}

static void ff_unlink(struct ff_arena *a, struct ff_block *b)
{
	if (b->prev)
		b->prev->next = b->next;
	else
		a->head = b->next;
	if (b->next)
		b->next->prev = b->prev;
	else
		a->tail = b->prev;
	ff_node_put(a, b);
}

/* Merge free block @b with free neighbours. */
static void ff_coalesce(struct ff_arena *a, struct ff_block *b)
{
	struct ff_block *n = b->next, *p = b->prev;

	if (n && !n->used) {
		b->size += n->size;
		ff_unlink(a, n);
	}
	if (p && !p->used) {
		p->size += b->size;
		ff_unlink(a, b);
	}
}

static void ff_set_req(struct ff_arena *a, struct ff_block *b, uint64_t req)
{
	a->live = a->live - b->req + req;
	b->req = req;
}

/* NULL when no free block is large enough (counted in a->fails). */
static struct ff_block *ff_alloc(struct ff_arena *a, uint64_t req)
{
	uint64_t size = ff_round(req);
	struct ff_block *b;

	for (b = a->head; b; b = b->next) {
		if (b->used || b->size < size)
			continue;
		if (ff_split(a, b, size))
			break;
		b->used = true;
		b->req = 0;
		ff_set_req(a, b, req);
		return b;
	}
	a->fails++;
	return NULL;
}

static void ff_free(struct ff_arena *a, struct ff_block *b)
{
	ff_set_req(a, b, 0);
	b->used = false;
	ff_coalesce(a, b);
}

/* The block now holding the bytes, or NULL (and @b untouched). */
static struct ff_block *ff_realloc(struct ff_arena *a, struct ff_block *b,
				   uint64_t req)
{
	uint64_t size = ff_round(req);
	struct ff_block *n = b->next, *nb;

	if (size <= b->size) {
		if (size < b->size && !ff_split(a, b, size))
			ff_coalesce(a, b->next);
		ff_set_req(a, b, req);
		return b;
	}
	if (n && !n->used && b->size + n->size >= size) {
		uint64_t grow = size - b->size;

		b->size = size;
		n->off += grow;
		n->size -= grow;
		if (!n->size)
			ff_unlink(a, n);
		ff_set_req(a, b, req);
		return b;
	}
	nb = ff_alloc(a, req);
	if (!nb)
		return NULL;
	if (a->base)
		memcpy(a->base + nb->off, a->base + b->off, b->req);
	ff_free(a, b);
	a->relocs++;
	return nb;
}

/* The arena's invariants: blocks tile it in order, no two free blocks
 * touch, and the used blocks hold exactly the live bytes. */
static void ff_check(const struct ff_arena *a)
{
	const struct ff_block *b, *prev = NULL;
	uint64_t off = 0, live = 0;

	for (b = a->head; b; prev = b, b = b->next) {
		if (b->prev != prev || b->off != off || !b->size ||
		    b->size % FF_ALIGN || (prev && !prev->used && !b->used) ||
		    (b->used && ff_round(b->req) > b->size))
			fail("first fit: bad block at offset %" PRIu64, b->off);
		off += b->size;
		live += b->used ? b->req : 0;
	}
	if (off != a->size || prev != a->tail || live != a->live)
		fail("first fit: blocks cover %" PRIu64 " of %" PRIu64
		     " bytes, live %" PRIu64 " (counted %" PRIu64 ")",
		     off, a->size, live, a->live);
}

/* End of the highest used block: what the arena must hold now. */
static uint64_t ff_top(const struct ff_arena *a)
{
	const struct ff_block *b = a->tail;

	if (b && !b->used)
		b = b->prev;
	return b ? b->off + b->size : 0;
}

/* ------------------------------------------------------------------------ */
/* Benchmark 1: allocation throughput per segment
 *
 * One pattern for every allocator: allocate a batch of 64 objects, then
 * free the 64; AB_SEQ batches make a pass (the stack sizes cycle through
 * one pre-drawn sequence of AB_SEQ * 64 sizes, the same for all three).
 * Each allocator is calibrated to about AB_REP_NS per repetition; the
 * repetitions of the allocators under comparison are interleaved so they
 * share the machine's noise, and the median is reported. An operation is
 * one allocation or one free.
 */

#define AB_BATCH 64
#define AB_SEQ 16
#define AB_REPS 7
#define AB_REP_NS (40 * NSEC_PER_MSEC)
#define AB_TEXT_SIZE (4 * KiB)
#define AB_STACK_MAX (AB_BATCH * MiB)
#define AB_OPS_PER_PASS (2 * AB_BATCH * AB_SEQ)

struct ab_ctx {
	struct vmu *v;
	uint64_t gran;
	struct vmu_stack *stk;
	struct vmu_session *s;
	struct ff_arena ff;
	uint64_t sizes[AB_SEQ][AB_BATCH];
	uint64_t peaks[AB_SEQ];
	uint64_t fixed; /* object size for the fixed-size patterns */
	void *ptrs[AB_BATCH];
	struct ff_block *blk[AB_BATCH];
	uint64_t handles[AB_BATCH];
	struct vmu_text *texts[AB_BATCH];
	uint8_t fps[AB_BATCH][VMU_FP_LEN];
	unsigned char *content; /* AB_TEXT_SIZE bytes */
	uint64_t serial; /* makes each inserted text fresh */
};

typedef void (*ab_pass_fn)(struct ab_ctx *c);

static void ab_stack_vmu(struct ab_ctx *c)
{
	unsigned int b, i;
	uint64_t addr;

	for (b = 0; b < AB_SEQ; b++) {
		check(vmu_stack_begin(c->stk, c->peaks[b], NULL),
		      "vmu_stack_begin");
		for (i = 0; i < AB_BATCH; i++)
			check(vmu_stack_alloc(c->stk, c->sizes[b][i], 0, &addr),
			      "vmu_stack_alloc");
		vmu_stack_end(c->stk);
	}
}

static void ab_stack_malloc(struct ab_ctx *c)
{
	unsigned int b, i;

	for (b = 0; b < AB_SEQ; b++) {
		for (i = 0; i < AB_BATCH; i++) {
			c->ptrs[i] = malloc(c->sizes[b][i]);
			sink(c->ptrs[i]);
		}
		for (i = 0; i < AB_BATCH; i++)
			free(c->ptrs[i]);
	}
}

static void ab_stack_ff(struct ab_ctx *c)
{
	unsigned int b, i;

	for (b = 0; b < AB_SEQ; b++) {
		for (i = 0; i < AB_BATCH; i++) {
			c->blk[i] = ff_alloc(&c->ff, c->sizes[b][i]);
			if (!c->blk[i])
				fail("first-fit arena exhausted");
			sink(ff_ptr(&c->ff, c->blk[i]));
		}
		for (i = 0; i < AB_BATCH; i++)
			ff_free(&c->ff, c->blk[i]);
	}
}

static void ab_fixed_malloc(struct ab_ctx *c)
{
	unsigned int b, i;

	for (b = 0; b < AB_SEQ; b++) {
		for (i = 0; i < AB_BATCH; i++) {
			c->ptrs[i] = malloc(c->fixed);
			sink(c->ptrs[i]);
		}
		for (i = 0; i < AB_BATCH; i++)
			free(c->ptrs[i]);
	}
}

static void ab_fixed_ff(struct ab_ctx *c)
{
	unsigned int b, i;

	for (b = 0; b < AB_SEQ; b++) {
		for (i = 0; i < AB_BATCH; i++) {
			c->blk[i] = ff_alloc(&c->ff, c->fixed);
			if (!c->blk[i])
				fail("first-fit arena exhausted");
			sink(ff_ptr(&c->ff, c->blk[i]));
		}
		for (i = 0; i < AB_BATCH; i++)
			ff_free(&c->ff, c->blk[i]);
	}
}

/* A region reserving 4 granules and mapping 1: create + resize is one
 * allocation, destroy one free. */
static void ab_data_vmu(struct ab_ctx *c)
{
	unsigned int b, i;

	for (b = 0; b < AB_SEQ; b++) {
		for (i = 0; i < AB_BATCH; i++) {
			check(vmu_region_create(c->s, 4 * c->gran,
						&c->handles[i]),
			      "vmu_region_create");
			check(vmu_region_resize(c->s, c->handles[i], c->gran,
						NULL),
			      "vmu_region_resize");
		}
		for (i = 0; i < AB_BATCH; i++)
			check(vmu_region_destroy(c->s, c->handles[i]),
			      "vmu_region_destroy");
	}
}

/* The text hot path: a lookup that hits, then its put. */
static void ab_text_vmu(struct ab_ctx *c)
{
	unsigned int b, i;

	for (b = 0; b < AB_SEQ; b++) {
		for (i = 0; i < AB_BATCH; i++)
			check(vmu_text_lookup(c->s, c->fps[i], &c->texts[i]),
			      "vmu_text_lookup (expected a hit)");
		for (i = 0; i < AB_BATCH; i++)
			check(vmu_text_put(c->s, c->texts[i]), "vmu_text_put");
	}
}

static void ab_fresh_content(struct ab_ctx *c)
{
	c->serial++;
	memcpy(c->content, &c->serial, sizeof(c->serial));
}

/* The text miss path: insert of bytes never seen (SHA-256 and copy), then
 * put and evict. */
static void ab_insert_vmu(struct ab_ctx *c)
{
	unsigned int b, i;
	bool created;

	for (b = 0; b < AB_SEQ; b++) {
		for (i = 0; i < AB_BATCH; i++) {
			ab_fresh_content(c);
			check(vmu_text_insert(c->s, c->content, AB_TEXT_SIZE,
					      &c->texts[i], &created),
			      "vmu_text_insert");
			if (!created)
				fail("vmu_text_insert: fresh content found an existing entry");
			memcpy(c->fps[i], vmu_text_fp(c->texts[i]), VMU_FP_LEN);
		}
		for (i = 0; i < AB_BATCH; i++) {
			check(vmu_text_put(c->s, c->texts[i]), "vmu_text_put");
			check(vmu_text_evict(c->v, c->fps[i], "bench"),
			      "vmu_text_evict");
		}
	}
}

/* The least an insert by content can do: allocate, copy, hash. */
static void ab_insert_sha(struct ab_ctx *c)
{
	unsigned int b, i;

	for (b = 0; b < AB_SEQ; b++) {
		for (i = 0; i < AB_BATCH; i++) {
			ab_fresh_content(c);
			c->ptrs[i] = xmalloc(AB_TEXT_SIZE);
			memcpy(c->ptrs[i], c->content, AB_TEXT_SIZE);
			SHA256(c->content, AB_TEXT_SIZE, c->fps[i]);
			sink(c->ptrs[i]);
		}
		for (i = 0; i < AB_BATCH; i++)
			free(c->ptrs[i]);
	}
}

struct ab_run {
	ab_pass_fn fn;
	unsigned int passes;
	double rate[AB_REPS];
	double median;
};

static uint64_t ab_time(struct ab_ctx *c, ab_pass_fn fn, unsigned int passes)
{
	uint64_t t0 = mono_ns();

	while (passes--)
		fn(c);
	return mono_ns() - t0;
}

static void ab_measure(struct ab_ctx *c, struct ab_run *runs, unsigned int n)
{
	unsigned int i, rep;
	uint64_t t;

	for (i = 0; i < n; i++) {
		ab_time(c, runs[i].fn, 1); /* warm up: caches, page tables */
		t = ab_time(c, runs[i].fn, 1);
		runs[i].passes = (unsigned int)(AB_REP_NS / (t ? t : 1)) + 1;
		if (runs[i].passes > 100000)
			runs[i].passes = 100000;
	}
	for (rep = 0; rep < AB_REPS; rep++) {
		for (i = 0; i < n; i++) {
			t = ab_time(c, runs[i].fn, runs[i].passes);
			runs[i].rate[rep] = (double)runs[i].passes *
					    AB_OPS_PER_PASS * 1e9 /
					    (double)(t ? t : 1);
		}
	}
	for (i = 0; i < n; i++)
		runs[i].median = round(median(runs[i].rate, AB_REPS));
}

static void ab_emit(const char *metric, double value, double base,
		    const char *base_name, const char *target)
{
	struct fig f = {
		.bench = "vmu_alloc",
		.metric = metric,
		.value = value,
		.unit = "ops/s",
		.baseline = base,
		.baseline_name = base_name,
		.target_text = target,
		.samples = AB_REPS,
	};

	emit(&f);
}

/* Measure @vmu beside malloc and first fit and print both lines. */
static void ab_compare(struct ab_ctx *c, const char *seg, ab_pass_fn vmu,
		       ab_pass_fn mall, ab_pass_fn ff, const char *malloc_name,
		       const char *target)
{
	struct ab_run runs[] = { { .fn = vmu }, { .fn = mall }, { .fn = ff } };
	char metric[64], metric_ff[80];

	ab_measure(c, runs, ARRAY_SIZE(runs));
	ff_check(&c->ff);
	if (c->ff.head != c->ff.tail)
		fail("first fit: arena not empty after the %s pattern", seg);
	snprintf(metric, sizeof(metric), "%s_ops_per_s", seg);
	snprintf(metric_ff, sizeof(metric_ff), "%s_ops_per_s_vs_firstfit", seg);
	ab_emit(metric, runs[0].median, runs[1].median, malloc_name, target);
	ab_emit(metric_ff, runs[0].median, runs[2].median, "firstfit", NULL);
}

static void bench_alloc(void)
{
	struct vmu_provider *p;
	struct ab_ctx *c;
	struct rng rng;
	unsigned int b, i;
	char name[64];
	bool created;

	c = calloc(1, sizeof(*c));
	if (!c)
		fail("out of host memory");
	check(vmu_host_provider_create(1 * GiB, 0, &p),
	      "vmu_host_provider_create");
	check(vmu_create(p, NULL, &c->v), "vmu_create");
	c->gran = vmu_granularity(c->v);
	/* Room for 64 of the largest objects of every pattern. */
	ff_init(&c->ff, 256 * MiB, true, 4 * AB_BATCH);
	c->content = xmalloc(AB_TEXT_SIZE);
	rng_init(&rng, 1);
	for (i = 0; i < AB_TEXT_SIZE; i++)
		c->content[i] = (unsigned char)rng_next(&rng);

	if (opt.report)
		printf("vmu_alloc: batches of %u allocations then %u frees, median of %u\n",
		       AB_BATCH, AB_BATCH, AB_REPS);

	/* stack: 4 KiB .. 1 MiB in multiples of 256 */
	for (b = 0; b < AB_SEQ; b++) {
		c->peaks[b] = 0;
		for (i = 0; i < AB_BATCH; i++) {
			c->sizes[b][i] = 256 * rng_range(&rng, 16, 4096);
			c->peaks[b] += c->sizes[b][i];
		}
	}
	check(vmu_stack_create(c->v, AB_STACK_MAX, &c->stk),
	      "vmu_stack_create");
	ab_compare(c, "stack", ab_stack_vmu, ab_stack_malloc, ab_stack_ff,
		   "malloc", "ratio >= 20");
	vmu_stack_destroy(c->stk);

	/* data: regions of one granule, reserving four */
	check(vmu_session_create(c->v, "bench", &c->s), "vmu_session_create");
	c->fixed = c->gran;
	snprintf(name, sizeof(name), "malloc(%" PRIu64 ")", c->fixed);
	ab_compare(c, "data", ab_data_vmu, ab_fixed_malloc, ab_fixed_ff, name,
		   "ratio >= 1");
	vmu_session_destroy(c->s);

	/* text: 64 resident entries of 4 KiB, looked up and put */
	check(vmu_session_create(c->v, "bench", &c->s), "vmu_session_create");
	for (i = 0; i < AB_BATCH; i++) {
		ab_fresh_content(c);
		check(vmu_text_insert(c->s, c->content, AB_TEXT_SIZE,
				      &c->texts[i], &created),
		      "vmu_text_insert");
		memcpy(c->fps[i], vmu_text_fp(c->texts[i]), VMU_FP_LEN);
		check(vmu_text_put(c->s, c->texts[i]), "vmu_text_put");
	}
	c->fixed = AB_TEXT_SIZE;
	ab_compare(c, "text", ab_text_vmu, ab_fixed_malloc, ab_fixed_ff,
		   "malloc(4096)", "ratio >= 1");

	/* text, miss path: insert fresh content, evict it */
	{
		struct ab_run runs[] = { { .fn = ab_insert_vmu },
					 { .fn = ab_fixed_malloc },
					 { .fn = ab_insert_sha } };

		ab_measure(c, runs, ARRAY_SIZE(runs));
		ab_emit("text_insert_ops_per_s", runs[0].median, runs[1].median,
			"malloc(4096)", NULL);
		ab_emit("text_insert_ops_per_s_vs_sha256_copy", runs[0].median,
			runs[2].median, "malloc(4096)+memcpy+SHA256", NULL);
	}
	vmu_session_destroy(c->s);

	vmu_destroy(c->v);
	p->ops->free(p);
	ff_fini(&c->ff);
	free(c->content);
	free(c);
}

/* ------------------------------------------------------------------------ */
/* Benchmark 2: an LLM-serving trace
 *
 * GPT-2 124M in f16: a token's K and V over 12 layers of 768 channels is
 * 2 * 12 * 768 * 2 = 36864 bytes. Sessions arrive at random (at most
 * TR_MAX_SESS at once); each reserves a KV region for 2048 tokens,
 * prefills a prompt of 32..512 tokens, then decodes one token per step
 * until a random end (at most 1024 tokens) and is destroyed.
 *
 * A prefill is one request and each step's decode of all active sessions
 * is one batched request; a request's activations are stack allocations
 * (vmu_stack_begin .. vmu_stack_end). Inside a request the first
 * activations are allocated before the KV caches grow and the rest after,
 * as a forward pass does: attention appends K and V midway.
 *
 * The same trace runs through a first-fit arena of the same capacity: KV
 * caches by ff_realloc, activations by ff_alloc, freed when the request
 * ends. Waste (reserved minus live bytes) is sampled once per step at the
 * decode request's peak, when every activation of the step is live:
 *
 *   VMU data:   sum over live regions of mapped - size (vmu_region_info)
 *   VMU stack:  vmu_stack_used() minus the bytes the request allocated
 *               (also checked in every prefill request)
 *   first fit:  end of the highest used block minus live bytes
 *
 * and, for a whole-VMU view, committed physical bytes minus live bytes.
 */

#define TR_CAPACITY (2 * GiB)
#define TR_STEPS 3000
#define TR_MAX_SESS 24
#define TR_ARRIVE_P 0.1 /* chance of an arrival per step */
#define TR_C 768 /* channels */
#define TR_NH 12 /* heads */
#define TR_L 12 /* layers */
#define TR_V 50257 /* vocabulary */
#define TR_PER_TOKEN ((uint64_t)2 * TR_L * TR_C * 2) /* K and V, f16 */
#define TR_MAX_TOKENS 2048
#define TR_MAX_END 1024
#define TR_MAX_ACTS 8
#define TR_ACTS_BEFORE_KV 2
#define TR_STACK_MAX (64 * MiB)
#define TR_TENANTS 4

struct tr_sess {
	struct vmu_session *s;
	uint64_t h;
	struct ff_block *kv;
	unsigned int len; /* tokens in the cache */
	unsigned int end; /* tokens at which it finishes */
};

struct tr_wstat {
	uint64_t peak;
	double sum;
	uint64_t n;
};

struct tr_req {
	uint64_t sizes[TR_MAX_ACTS];
	struct ff_block *blk[TR_MAX_ACTS];
	unsigned int n; /* activations */
	unsigned int done; /* allocated so far */
	uint64_t peak; /* sum of sizes */
	uint64_t live; /* sum allocated so far */
};

struct trace {
	struct vmu *v;
	struct vmu_stack *stk;
	struct ff_arena ff;
	struct rng rng;
	uint64_t gran;
	struct tr_sess sess[TR_MAX_SESS];
	unsigned int nr_sess;
	/* what happened */
	uint64_t sessions, max_concurrent, tokens, requests;
	uint64_t vmu_live_peak, ff_live_peak; /* at the samples */
	uint64_t region_waste_max; /* bytes, one region */
	struct tr_wstat data, stack, total, committed, ffw, stack_req;
	struct vmu_stats stats; /* at the last step */
};

static void tr_wadd(struct tr_wstat *w, uint64_t x)
{
	if (x > w->peak)
		w->peak = x;
	w->sum += (double)x;
	w->n++;
}

/* Mean in whole bytes. */
static double tr_wmean(const struct tr_wstat *w)
{
	return w->n ? round(w->sum / (double)w->n) : 0;
}

/*
 * Activations of one forward pass over @t tokens attending to @l, with
 * logits for @tlog tokens; each a multiple of 256 bytes.
 */
static void tr_req_init(struct tr_req *q, uint64_t t, uint64_t l, uint64_t tlog)
{
	uint64_t *sz = q->sizes;
	unsigned int i;

	memset(q, 0, sizeof(*q));
	sz[q->n++] = t * TR_C * 2; /* x (T, C) */
	sz[q->n++] = t * 3 * TR_C * 2; /* qkv (T, 3C) */
	sz[q->n++] = TR_NH * t * l * 2; /* att (NH, T, L) */
	sz[q->n++] = t * TR_C * 2; /* atty (T, C) */
	sz[q->n++] = t * 4 * TR_C * 2; /* fch (T, 4C) */
	sz[q->n++] = t * 4 * TR_C * 2; /* fch_gelu (T, 4C) */
	sz[q->n++] = t * TR_C * 2; /* residual (T, C) */
	sz[q->n++] = tlog * TR_V * 4; /* logits (T, V), f32 */
	for (i = 0; i < q->n; i++) {
		sz[i] = ALIGN_UP(sz[i], 256);
		q->peak += sz[i];
	}
}

static void tr_req_begin(struct trace *tr, struct tr_req *q)
{
	check(vmu_stack_begin(tr->stk, q->peak, NULL), "vmu_stack_begin");
	tr->requests++;
}

/* Allocate activations up to index @upto in both allocators. */
static void tr_req_alloc(struct trace *tr, struct tr_req *q, unsigned int upto)
{
	uint64_t addr;

	for (; q->done < upto; q->done++) {
		check(vmu_stack_alloc(tr->stk, q->sizes[q->done], 0, &addr),
		      "vmu_stack_alloc");
		q->live += q->sizes[q->done];
		q->blk[q->done] = ff_alloc(&tr->ff, q->sizes[q->done]);
	}
}

static void tr_req_end(struct trace *tr, struct tr_req *q)
{
	unsigned int i;

	tr_wadd(&tr->stack_req, vmu_stack_used(tr->stk) - q->live);
	vmu_stack_end(tr->stk);
	for (i = 0; i < q->done; i++)
		if (q->blk[i])
			ff_free(&tr->ff, q->blk[i]);
}

static void tr_kv_grow(struct trace *tr, struct tr_sess *x)
{
	uint64_t bytes = x->len * TR_PER_TOKEN;
	struct ff_block *nb;

	check(vmu_region_resize(x->s, x->h, bytes, NULL), "vmu_region_resize");
	if (!x->kv) {
		x->kv = ff_alloc(&tr->ff, bytes);
		return;
	}
	nb = ff_realloc(&tr->ff, x->kv, bytes);
	if (nb)
		x->kv = nb;
	else
		tr->ff.fails++; /* ff_realloc's own alloc counted too */
}

static void tr_arrive(struct trace *tr)
{
	struct tr_sess *x = &tr->sess[tr->nr_sess++];
	unsigned int prompt;
	struct tr_req q;
	char tenant[16];

	memset(x, 0, sizeof(*x));
	prompt = (unsigned int)rng_range(&tr->rng, 32, 512);
	x->end = (unsigned int)rng_range(&tr->rng, prompt + 1, TR_MAX_END);
	x->len = prompt;
	snprintf(tenant, sizeof(tenant), "tenant%u",
		 (unsigned int)(tr->sessions % TR_TENANTS));
	check(vmu_session_create(tr->v, tenant, &x->s), "vmu_session_create");
	check(vmu_region_create(x->s, TR_MAX_TOKENS * TR_PER_TOKEN, &x->h),
	      "vmu_region_create");
	tr->sessions++;
	if (tr->nr_sess > tr->max_concurrent)
		tr->max_concurrent = tr->nr_sess;

	/* prefill: T = L = prompt, logits for the last token only */
	tr_req_init(&q, prompt, prompt, 1);
	tr_req_begin(tr, &q);
	tr_req_alloc(tr, &q, TR_ACTS_BEFORE_KV);
	tr_kv_grow(tr, x);
	tr_req_alloc(tr, &q, q.n);
	tr_req_end(tr, &q);
}

/* Waste with every activation of the step live. */
static void tr_sample(struct trace *tr, const struct tr_req *q)
{
	struct vmu_region_info info;
	uint64_t data = 0, live = 0, stack, committed;
	unsigned int i;

	for (i = 0; i < tr->nr_sess; i++) {
		struct tr_sess *x = &tr->sess[i];
		uint64_t w;

		check(vmu_region_info(x->s, x->h, &info), "vmu_region_info");
		if (info.size != x->len * TR_PER_TOKEN)
			fail("vmu_region_info: size %" PRIu64
			     " after resizing to %" PRIu64,
			     info.size, x->len * TR_PER_TOKEN);
		if (info.mapped < info.size)
			fail("vmu_region_info: mapped %" PRIu64
			     " < size %" PRIu64,
			     info.mapped, info.size);
		w = info.mapped - info.size;
		if (w > tr->region_waste_max)
			tr->region_waste_max = w;
		data += w;
		live += info.size;
	}
	stack = q ? vmu_stack_used(tr->stk) - q->live : 0;
	live += q ? q->live : 0;
	if (live > tr->vmu_live_peak)
		tr->vmu_live_peak = live;
	if (tr->ff.live > tr->ff_live_peak)
		tr->ff_live_peak = tr->ff.live;
	ff_check(&tr->ff);
	/* Both replay one trace: equal live bytes unless first fit failed. */
	if (!tr->ff.fails && tr->ff.live != live)
		fail("trace: live bytes differ: VMU %" PRIu64
		     ", first fit %" PRIu64,
		     live, tr->ff.live);
	vmu_get_stats(tr->v, &tr->stats);
	committed = tr->stats.committed > live ? tr->stats.committed - live : 0;
	tr_wadd(&tr->data, data);
	tr_wadd(&tr->stack, stack);
	tr_wadd(&tr->total, data + stack);
	tr_wadd(&tr->committed, committed);
	tr_wadd(&tr->ffw, ff_top(&tr->ff) - tr->ff.live);
}

static void tr_step(struct trace *tr)
{
	struct tr_req q;
	uint64_t maxlen = 0;
	unsigned int i;

	if (tr->nr_sess < TR_MAX_SESS && rng_unit(&tr->rng) < TR_ARRIVE_P)
		tr_arrive(tr);
	if (!tr->nr_sess) {
		tr_sample(tr, NULL);
		return;
	}

	/* one batched decode: T = sessions, L = longest context */
	for (i = 0; i < tr->nr_sess; i++)
		if (tr->sess[i].len + 1 > maxlen)
			maxlen = tr->sess[i].len + 1;
	tr_req_init(&q, tr->nr_sess, maxlen, tr->nr_sess);
	tr_req_begin(tr, &q);
	tr_req_alloc(tr, &q, TR_ACTS_BEFORE_KV);
	for (i = 0; i < tr->nr_sess; i++) {
		tr->sess[i].len++;
		tr_kv_grow(tr, &tr->sess[i]);
		tr->tokens++;
	}
	tr_req_alloc(tr, &q, q.n);
	tr_sample(tr, &q);
	tr_req_end(tr, &q);

	for (i = 0; i < tr->nr_sess;) {
		struct tr_sess *x = &tr->sess[i];

		if (x->len < x->end) {
			i++;
			continue;
		}
		vmu_session_destroy(x->s);
		if (x->kv)
			ff_free(&tr->ff, x->kv);
		*x = tr->sess[--tr->nr_sess];
	}
}

static void tr_emit(const char *metric, double value, double base,
		    const char *target)
{
	struct fig f = {
		.bench = "vmu_trace",
		.metric = metric,
		.value = value,
		.unit = "bytes",
		.baseline = base,
		.baseline_name = "firstfit",
		.target_text = target,
	};

	emit(&f);
}

static void tr_emit_count(const char *metric, double value, const char *unit,
			  const char *target)
{
	struct fig f = {
		.bench = "vmu_trace",
		.metric = metric,
		.value = value,
		.unit = unit,
		.baseline = NAN,
		.target_text = target,
	};

	emit(&f);
}

static void tr_report_stats(const struct vmu_stats *s)
{
	char b1[32], b2[32], b3[32], b4[32], b5[32];
	unsigned int i;

	printf("  VMU at the last step: capacity %s, granule %s, committed %s, reserved %s, free %s, pressure %s\n",
	       fmt_bytes(b1, sizeof(b1), (double)s->capacity),
	       fmt_bytes(b2, sizeof(b2), (double)s->granularity),
	       fmt_bytes(b3, sizeof(b3), (double)s->committed),
	       fmt_bytes(b4, sizeof(b4), (double)s->reserved),
	       fmt_bytes(b5, sizeof(b5), (double)s->free),
	       vmu_pressure_name(s->pressure));
	for (i = 0; i < VMU_NR_SEGS; i++)
		printf("    %-6s used %10s  peak %10s  entries %4" PRIu64
		       "  allocs %8" PRIu64 "  frees %8" PRIu64 "\n",
		       vmu_seg_name((enum vmu_seg)i),
		       fmt_bytes(b1, sizeof(b1), (double)s->seg[i].used),
		       fmt_bytes(b2, sizeof(b2), (double)s->seg[i].peak),
		       s->seg[i].entries, s->seg[i].allocs, s->seg[i].frees);
	printf("    stack_last_peak %s, data_cached %s, swap_outs %" PRIu64
	       ", admits %" PRIu64 ", refusals %" PRIu64 "\n",
	       fmt_bytes(b1, sizeof(b1), (double)s->stack_last_peak),
	       fmt_bytes(b2, sizeof(b2), (double)s->data_cached), s->swap_outs,
	       s->admits, s->admit_refusals);
}

static void bench_trace(void)
{
	struct vmu_provider *p;
	struct vmu_stats after;
	struct trace *tr;
	uint64_t t0, t1;
	unsigned int i;
	char b1[32], b2[32];

	tr = calloc(1, sizeof(*tr));
	if (!tr)
		fail("out of host memory");
	rng_init(&tr->rng, 2);
	check(vmu_host_provider_create(TR_CAPACITY, 0, &p),
	      "vmu_host_provider_create");
	check(vmu_create(p, NULL, &tr->v), "vmu_create");
	tr->gran = vmu_granularity(tr->v);
	check(vmu_stack_create(tr->v, TR_STACK_MAX, &tr->stk),
	      "vmu_stack_create");
	ff_init(&tr->ff, TR_CAPACITY, false, 4096);

	t0 = mono_ns();
	for (i = 0; i < TR_STEPS; i++)
		tr_step(tr);
	t1 = mono_ns();

	if (opt.report) {
		printf("vmu_trace: seed %" PRIu64
		       ", %u steps in %.2f s, %" PRIu64
		       " sessions (at most %" PRIu64 " at once), %" PRIu64
		       " tokens decoded, %" PRIu64 " requests\n",
		       opt.seed, TR_STEPS, (double)(t1 - t0) / 1e9,
		       tr->sessions, tr->max_concurrent, tr->tokens,
		       tr->requests);
		printf("  capacity %s, granule %s, KV %" PRIu64
		       " bytes/token (GPT-2 124M, f16), region max %u tokens\n",
		       fmt_bytes(b1, sizeof(b1), (double)TR_CAPACITY),
		       fmt_bytes(b2, sizeof(b2), (double)tr->gran),
		       TR_PER_TOKEN, TR_MAX_TOKENS);
		printf("  waste = reserved - live, sampled at each step's decode peak; ratio = VMU / first fit\n");
	}
	tr_emit("data_waste_peak_bytes", (double)tr->data.peak,
		(double)tr->ffw.peak, "<= 1 granule per region");
	tr_emit("data_waste_mean_bytes", tr_wmean(&tr->data),
		tr_wmean(&tr->ffw), "<= 1 granule per region");
	tr_emit("stack_waste_peak_bytes", (double)tr->stack_req.peak,
		(double)tr->ffw.peak, "0");
	tr_emit("stack_waste_mean_bytes", tr_wmean(&tr->stack_req),
		tr_wmean(&tr->ffw), "0");
	tr_emit("waste_peak_bytes", (double)tr->total.peak,
		(double)tr->ffw.peak, NULL);
	tr_emit("waste_mean_bytes", tr_wmean(&tr->total), tr_wmean(&tr->ffw),
		NULL);
	tr_emit("committed_minus_live_peak_bytes", (double)tr->committed.peak,
		(double)tr->ffw.peak, NULL);
	tr_emit("committed_minus_live_mean_bytes", tr_wmean(&tr->committed),
		tr_wmean(&tr->ffw), NULL);
	tr_emit("live_peak_bytes", (double)tr->vmu_live_peak,
		(double)tr->ff_live_peak, NULL);
	tr_emit_count("data_waste_max_per_region_granules",
		      (double)tr->region_waste_max / (double)tr->gran,
		      "granules", "<= 1");
	tr_emit_count("firstfit_relocations", (double)tr->ff.relocs, "count",
		      NULL);
	tr_emit_count("firstfit_failures", (double)tr->ff.fails, "count", NULL);
	if (opt.report)
		tr_report_stats(&tr->stats);

	for (i = 0; i < tr->nr_sess; i++)
		vmu_session_destroy(tr->sess[i].s);
	vmu_stack_destroy(tr->stk);
	vmu_get_stats(tr->v, &after);
	if (after.committed || after.seg[VMU_SEG_DATA].entries)
		fprintf(stderr,
			"vmu-bench: warning: after teardown %" PRIu64
			" bytes still committed, %" PRIu64 " regions\n",
			after.committed, after.seg[VMU_SEG_DATA].entries);
	vmu_destroy(tr->v);
	p->ops->free(p);
	ff_fini(&tr->ff);
	free(tr);
}

/* ------------------------------------------------------------------------ */
/* Benchmark 3: swap out and restore a data region
 *
 * A 256 MiB region filled with a pattern goes out to host memory and
 * back SW_ROUNDS times. The swap cache (512 MiB) keeps the host buffer
 * after each restore, so the first round pays for faulting it in and the
 * rest do not: round 1 is reported apart as "cold", the medians are over
 * the warm rounds. Each round is interleaved with the reference, a memcpy
 * of 256 MiB between two buffers faulted in beforehand. Bytes are checked
 * by sample after every restore and in full at the end.
 */

#define SW_CAPACITY (1 * GiB)
#define SW_SIZE (256 * MiB)
#define SW_ROUNDS 7
#define SW_CHUNK (4 * MiB)
#define SW_SAMPLES 64
#define SW_SAMPLE_LEN (4 * KiB)

static uint64_t sw_word(uint64_t off)
{
	return mix(off ^ opt.seed);
}

static void sw_fill(uint64_t *buf, uint64_t off, uint64_t len)
{
	uint64_t i;

	for (i = 0; i < len / 8; i++)
		buf[i] = sw_word(off + 8 * i);
}

/* Read [off, off + len) back and compare; fails the run on a mismatch. */
static void sw_verify(struct vmu_session *s, uint64_t h, uint64_t *buf,
		      uint64_t off, uint64_t len, unsigned int round_nr)
{
	uint64_t i;

	check(vmu_region_read(s, h, off, buf, len), "vmu_region_read");
	for (i = 0; i < len / 8; i++)
		if (buf[i] != sw_word(off + 8 * i))
			fail("swap round %u: byte %" PRIu64
			     " differs after restore (read %016" PRIx64
			     ", wrote %016" PRIx64 ")",
			     round_nr, off + 8 * i, buf[i],
			     sw_word(off + 8 * i));
}

static double gbps(uint64_t bytes, uint64_t ns)
{
	return (double)bytes / (double)(ns ? ns : 1);
}

static void sw_emit(const char *metric, double value, double base,
		    const char *target, unsigned int samples)
{
	struct fig f = {
		.bench = "vmu_swap",
		.metric = metric,
		.value = value,
		.unit = "GB/s",
		.baseline = base,
		.baseline_name = "memcpy",
		.target_text = target,
		.samples = samples,
	};

	emit(&f);
}

static void bench_swap(void)
{
	double t_out[SW_ROUNDS], t_in[SW_ROUNDS], t_cpy[SW_ROUNDS];
	struct vmu_config cfg = { .swap_cache = 512 * MiB };
	struct vmu_region_info info;
	struct vmu_session *s;
	struct vmu_provider *p;
	struct vmu_stats stats;
	char *src, *dst;
	uint64_t *buf, h, addr, off, t0, t1, t2;
	struct vmu *v;
	struct rng rng;
	unsigned int r, i;

	rng_init(&rng, 3);
	check(vmu_host_provider_create(SW_CAPACITY, 0, &p),
	      "vmu_host_provider_create");
	check(vmu_create(p, &cfg, &v), "vmu_create");
	check(vmu_session_create(v, "swap", &s), "vmu_session_create");
	check(vmu_region_create(s, SW_SIZE, &h), "vmu_region_create");
	check(vmu_region_resize(s, h, SW_SIZE, NULL), "vmu_region_resize");
	check(vmu_region_info(s, h, &info), "vmu_region_info");
	addr = info.addr;

	buf = xmalloc(SW_CHUNK);
	for (off = 0; off < SW_SIZE; off += SW_CHUNK) {
		sw_fill(buf, off, SW_CHUNK);
		check(vmu_region_write(s, h, off, buf, SW_CHUNK),
		      "vmu_region_write");
	}

	src = xmalloc(SW_SIZE);
	dst = xmalloc(SW_SIZE);
	memset(src, 0x5a, SW_SIZE);
	memset(dst, 0xa5, SW_SIZE);

	for (r = 0; r < SW_ROUNDS; r++) {
		t0 = mono_ns();
		memcpy(dst, src, SW_SIZE);
		sink(dst);
		t_cpy[r] = gbps(SW_SIZE, mono_ns() - t0);

		t0 = mono_ns();
		check(vmu_region_swap_out(s, h), "vmu_region_swap_out");
		t1 = mono_ns();
		check(vmu_region_info(s, h, &info), "vmu_region_info");
		if (info.state != VMU_REGION_SWAPPED)
			fail("swap round %u: state %d after swap-out", r + 1,
			     (int)info.state);
		t2 = mono_ns();
		check(vmu_region_swap_in(s, h, NULL), "vmu_region_swap_in");
		t_out[r] = gbps(SW_SIZE, t1 - t0);
		t_in[r] = gbps(SW_SIZE, mono_ns() - t2);

		check(vmu_region_info(s, h, &info), "vmu_region_info");
		if (info.state != VMU_REGION_RESIDENT || info.addr != addr ||
		    info.size != SW_SIZE)
			fail("swap round %u: after restore state %d, addr %#" PRIx64
			     " (was %#" PRIx64 "), size %" PRIu64,
			     r + 1, (int)info.state, info.addr, addr,
			     info.size);
		sw_verify(s, h, buf, 0, SW_SAMPLE_LEN, r + 1);
		sw_verify(s, h, buf, SW_SIZE - SW_SAMPLE_LEN, SW_SAMPLE_LEN,
			  r + 1);
		for (i = 0; i < SW_SAMPLES; i++) {
			off = rng_range(&rng, 0, SW_SIZE / SW_SAMPLE_LEN - 1) *
			      SW_SAMPLE_LEN;
			sw_verify(s, h, buf, off, SW_SAMPLE_LEN, r + 1);
		}
	}
	for (off = 0; off < SW_SIZE; off += SW_CHUNK)
		sw_verify(s, h, buf, off, SW_CHUNK, SW_ROUNDS);

	vmu_get_stats(v, &stats);
	if (opt.report) {
		printf("vmu_swap: %" PRIu64
		       " MiB region, %u rounds, swap cache %" PRIu64
		       " MiB; bytes verified after every round\n",
		       SW_SIZE / MiB, SW_ROUNDS, 512 * MiB / MiB);
		printf("  swap_outs %" PRIu64 ", swap_ins %" PRIu64
		       ", swapped_now %" PRIu64 " bytes\n",
		       stats.swap_outs, stats.swap_ins, stats.swapped_now);
	}
	{
		double cpy = median(t_cpy, SW_ROUNDS);

		sw_emit("swap_out_gbps", median(t_out + 1, SW_ROUNDS - 1), cpy,
			"ratio >= 0.8", SW_ROUNDS - 1);
		sw_emit("swap_in_gbps", median(t_in + 1, SW_ROUNDS - 1), cpy,
			"ratio >= 0.8", SW_ROUNDS - 1);
		sw_emit("swap_out_cold_gbps", t_out[0], cpy, NULL, 0);
		sw_emit("swap_in_cold_gbps", t_in[0], cpy, NULL, 0);
	}
	if (stats.swap_outs != SW_ROUNDS || stats.swap_ins != SW_ROUNDS)
		fprintf(stderr,
			"vmu-bench: warning: stats count %" PRIu64
			" swap-outs and %" PRIu64 " swap-ins for %u rounds\n",
			stats.swap_outs, stats.swap_ins, SW_ROUNDS);

	free(src);
	free(dst);
	free(buf);
	vmu_session_destroy(s);
	vmu_destroy(v);
	p->ops->free(p);
}

/* ------------------------------------------------------------------------ */

static const struct {
	const char *name;
	void (*run)(void);
} benches[] = {
	{ "alloc", bench_alloc },
	{ "trace", bench_trace },
	{ "swap", bench_swap },
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: vmu-bench [--report] [--only alloc|trace|swap] [--seed N]\n"
		"  --report   human-readable figures; runs the trace unless --only says\n"
		"  --only     run one benchmark\n"
		"  --seed     seed for every random choice (default 42)\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "report", no_argument, NULL, 'r' },
		{ "only", required_argument, NULL, 'o' },
		{ "seed", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *only = NULL;
	unsigned int i;
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "ro:s:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'r':
			opt.report = true;
			break;
		case 'o':
			only = optarg;
			break;
		case 's':
			errno = 0;
			opt.seed = strtoull(optarg, &end, 0);
			if (errno || !*optarg || *end) {
				fprintf(stderr, "vmu-bench: bad seed '%s'\n",
					optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	if (!only && opt.report)
		only = "trace";
	if (only) {
		for (i = 0; i < ARRAY_SIZE(benches); i++)
			if (!strcmp(only, benches[i].name))
				break;
		if (i == ARRAY_SIZE(benches)) {
			fprintf(stderr, "vmu-bench: no benchmark '%s'\n", only);
			usage(stderr);
			return 2;
		}
		benches[i].run();
		return 0;
	}
	for (i = 0; i < ARRAY_SIZE(benches); i++)
		benches[i].run();
	return 0;
}
