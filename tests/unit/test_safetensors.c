// SPDX-License-Identifier: MIT
/*
 * The safetensors reader: good files parse into the right tensors, and
 * every kind of corrupt or hostile file is refused with the right errno
 * and a message naming the file, the tensor and the fault. Model
 * directories: one file, all *.safetensors, and sharded with an index;
 * the same index checks over shards in memory, as an upload sends them.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "array_size.h"
#include "model/safetensors.h"
#include "model/safetensors_test.h"
#include "testutil.h"

/* A file image: length, @json, then @data_len pattern bytes. */
static uint8_t *image(const char *json, size_t data_len, size_t *len)
{
	size_t h = strlen(json);
	uint8_t *buf = xmalloc(8 + h + data_len);

	for (int k = 0; k < 8; k++)
		buf[k] = (uint8_t)((uint64_t)h >> (8 * k));
	memcpy(buf + 8, json, h);
	pattern(buf + 8 + h, 1, 0, data_len);
	*len = 8 + h + data_len;
	return buf;
}

static struct st_file *parse_ok(const char *json, size_t data_len,
				uint8_t **keep)
{
	char msg[ST_MSG_LEN] = "";
	struct st_file *f = NULL;
	size_t len;
	int ret;

	*keep = image(json, data_len, &len);
	ret = st_parse(*keep, len, "good.safetensors", &f, msg, sizeof(msg));
	if (ret)
		fail_msg("refused: %s", msg);
	return f;
}

/* @json with @data_len bytes is refused with @err and a message holding
 * the file name and every one of the NULL-terminated @words. */
static void refused_(const char *json, size_t data_len, int err, ...)
{
	char msg[ST_MSG_LEN] = "";
	struct st_file *f = (void *)0x1;
	const char *w;
	uint8_t *buf;
	size_t len;
	va_list ap;
	int ret;

	buf = image(json, data_len, &len);
	ret = st_parse(buf, len, "bad.safetensors", &f, msg, sizeof(msg));
	if (ret != err)
		fail_msg("%s: got %d (%s), want %d", json, ret, msg, err);
	assert_ptr_equal(f, (void *)0x1); /* untouched */
	assert_non_null(strstr(msg, "bad.safetensors"));
	va_start(ap, err);
	while ((w = va_arg(ap, const char *)))
		if (!strstr(msg, w))
			fail_msg("message '%s' lacks '%s'", msg, w);
	va_end(ap);
	free(buf);
}
#define refused(json, n, err, ...) refused_(json, n, err, __VA_ARGS__, NULL)

#define T(name, dt, shape, b, e)                                         \
	"\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_" \
	"offsets\":[" #b "," #e "]}"

static void test_good(void **state)
{
	const struct st_tensor *a, *b, *s;
	struct st_file *f;
	uint8_t *buf;

	f = parse_ok("{\"__metadata__\":{\"format\":\"pt\",\"a\":\"b\"}," T(
			     "wte", "F32", "[2,3]", 8,
			     32) "," T("bias", "BF16", "[4]", 0,
				       8) "," T("s", "I64", "[]", 32, 40) "}  ",
		     40, &buf);
	assert_int_equal(f->nr_tensors, 3);
	assert_int_equal(f->data_len, 40);
	/* sorted by name */
	assert_string_equal(f->tensors[0].name, "bias");
	assert_string_equal(f->tensors[1].name, "s");
	assert_string_equal(f->tensors[2].name, "wte");
	a = st_find(f, "wte");
	b = st_find(f, "bias");
	s = st_find(f, "s");
	assert_non_null(a);
	assert_null(st_find(f, "nope"));
	assert_int_equal(a->dtype, ST_F32);
	assert_int_equal(a->ndim, 2);
	assert_int_equal(a->shape[0], 2);
	assert_int_equal(a->shape[1], 3);
	assert_int_equal(a->nelem, 6);
	assert_int_equal(a->offset, 8);
	assert_int_equal(a->size, 24);
	assert_int_equal(st_dtype_djinn(a->dtype), DJINN_DTYPE_F32);
	assert_int_equal(st_dtype_djinn(b->dtype), DJINN_DTYPE_BF16);
	assert_int_equal(s->ndim, 0);
	assert_int_equal(s->nelem, 1);
	/* data points at the bytes, after the header */
	assert_ptr_equal(b->data, buf + 8 + (buf[0] | buf[1] << 8));
	assert_ptr_equal(a->data, b->data + 8);
	assert_ptr_equal(a->file, f);
	assert_string_equal(st_meta(f, "format"), "pt");
	assert_string_equal(st_meta(f, "a"), "b");
	assert_null(st_meta(f, "zz"));
	st_close(f);
	free(buf);

	/* empty: no tensors, no data; zero-size tensors anywhere */
	f = parse_ok("{}", 0, &buf);
	assert_int_equal(f->nr_tensors, 0);
	assert_null(st_find(f, "x"));
	st_close(f);
	free(buf);
	f = parse_ok("{" T("z", "F16", "[0,5]", 4,
			   4) "," T("y", "U8", "[4]", 0,
				    4) "," T("x", "F64", "[3,0]", 0, 0) "}",
		     4, &buf);
	assert_int_equal(f->nr_tensors, 3);
	assert_int_equal(st_find(f, "z")->size, 0);
	st_close(f);
	free(buf);
}

static void test_header_refused(void **state)
{
	char msg[ST_MSG_LEN];
	uint8_t buf[64] = { 0 };
	struct st_file *f;

	/* too short for the length */
	assert_int_equal(st_parse(buf, 7, "short.st", &f, msg, sizeof(msg)),
			 -EINVAL);
	assert_non_null(strstr(msg, "short.st"));
	/* huge header length */
	memset(buf, 0, sizeof(buf));
	memset(buf, 0xff, 8);
	assert_int_equal(st_parse(buf, 64, "huge.st", &f, msg, sizeof(msg)),
			 -E2BIG);
	assert_non_null(strstr(msg, "over the limit"));
	buf[7] = 0;
	buf[0] = 0;
	buf[1] = 0;
	buf[2] = 0x40;
	buf[3] = buf[4] = buf[5] = buf[6] = 0; /* 4 MiB */
	assert_int_equal(st_parse(buf, 64, "trunc.st", &f, msg, sizeof(msg)),
			 -EINVAL);
	assert_non_null(strstr(msg, "past the end"));

	refused("", 0, -EINVAL, "start with");
	refused("[1,2]", 0, -EINVAL, "start with");
	refused(" {}", 0, -EINVAL, "start with");
	refused("{\"a\":", 0, -EINVAL, "JSON");
	refused("{}x", 0, -EINVAL, "not a space");
	refused("{}\n", 0, -EINVAL, "not a space");
	refused("{} }", 0, -EINVAL, "not a space");
	refused("{\"a\":1,\"a\":1}", 0, -EINVAL, "JSON", "duplicate");
	refused("{\"a\":\"\\u0000\"}", 0, -EINVAL, "JSON");
	refused("{\"a\xff\":{}}", 0, -EINVAL, "JSON");
	refused("{" T("a", "F32", "[1]", 0, 4) "}", 8, -EINVAL,
		"4 bytes of data after the last tensor");
	refused("{}", 1, -EINVAL, "1 bytes of data after");
}

static void test_entry_refused(void **state)
{
	refused("{\"w\":1}", 0, -EINVAL, "'w'", "not an object");
	refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, -EINVAL, "'w'",
		"missing data_offsets");
	refused("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, -EINVAL,
		"'w'", "missing dtype");
	refused("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4,
		-EINVAL, "'w'", "missing shape");
	refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,"
		"4],\"extra\":1}}",
		4, -EINVAL, "'w'", "unknown field 'extra'");
	refused("{" T("w", "F33", "[1]", 0, 4) "}", 4, -EINVAL, "'w'",
		"unknown dtype 'F33'");
	refused("{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
		-EINVAL, "'w'", "dtype is not a string");
	refused("{" T("w", "F32", "1", 0, 4) "}", 4, -EINVAL, "'w'",
		"shape is not an array");
	refused("{" T("w", "F32", "[-1]", 0, 4) "}", 4, -EINVAL, "'w'",
		"shape[0]");
	refused("{" T("w", "F32", "[1.0]", 0, 4) "}", 4, -EINVAL, "'w'",
		"shape[0]");
	refused("{" T("w", "F32", "[1,\"2\"]", 0, 4) "}", 4, -EINVAL, "'w'",
		"shape[1]");
	refused("{" T("w", "F32", "[1,1,1,1,1,1,1,1,1]", 0, 4) "}", 4, -E2BIG,
		"'w'", "9 dims");
	/* shapes whose element or byte count overflows */
	refused("{" T("w", "U8", "[4294967296,4294967296]", 0, 4) "}", 4,
		-E2BIG, "'w'", "overflows");
	refused("{" T("w", "F32", "[4611686018427387904]", 0, 4) "}", 4, -E2BIG,
		"'w'", "overflow");
	refused("{" T("w", "F32", "[9223372036854775808]", 0, 4) "}", 4,
		-EINVAL, "JSON");
	/* offsets */
	refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}",
		4, -EINVAL, "'w'", "two non-negative");
	refused("{" T("w", "F32", "[1]", -4, 0) "}", 4, -EINVAL, "'w'",
		"two non-negative");
	refused("{" T("w", "F32", "[1]", 4, 0) "}", 4, -EINVAL, "'w'",
		"end before begin");
	refused("{" T("w", "F32", "[1]", 0, 8) "}", 4, -EINVAL, "'w'",
		"past the data");
	refused("{" T("w", "F32", "[1]", 18446744073709551612, 0) "}", 4,
		-EINVAL, "JSON");
	/* dtype and shape against the byte size */
	refused("{" T("w", "F16", "[2,2]", 0, 16) "}", 16, -EINVAL, "'w'",
		"16 bytes for F16 of 4 elements (8 bytes)");
	refused("{" T("w", "F32", "[3]", 0, 8) "}", 8, -EINVAL, "'w'",
		"8 bytes for F32");
	/* overlap, hole */
	refused("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 4,
						     12) "}",
		12, -EINVAL, "'b'", "overlap tensor 'a'");
	refused("{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[2]", 0,
						     8) "}",
		8, -EINVAL, "overlap");
	refused("{" T("a", "F32", "[1]", 0, 4) "," T("b", "F32", "[1]", 8,
						     12) "}",
		12, -EINVAL, "'b'", "hole of 4 bytes");
	refused("{" T("a", "F32", "[1]", 4, 8) "}", 8, -EINVAL, "'a'", "hole");
	/* names and metadata */
	refused("{" T("", "F32", "[1]", 0, 4) "}", 4, -EINVAL, "name of 0");
	refused("{\"__metadata__\":[]}", 0, -EINVAL, "__metadata__");
	refused("{\"__metadata__\":{\"k\":1}}", 0, -EINVAL, "__metadata__",
		"'k'", "not a string");
	/* a control character in a name is not printed as is */
	refused("{" T("a\\nb", "F32", "[1]", 0, 4) "}", 0, -EINVAL, "'a?b'");
}

static void test_long_name(void **state)
{
	char *json = xmalloc(ST_MAX_NAME + 200),
	     *name = xmalloc(ST_MAX_NAME + 2);

	memset(name, 'n', ST_MAX_NAME + 1);
	name[ST_MAX_NAME + 1] = 0;
	snprintf(json, ST_MAX_NAME + 200,
		 "{\"%s\":{\"dtype\":\"U8\",\"shape\":[1],"
		 "\"data_offsets\":[0,1]}}",
		 name);
	refused(json, 1, -EINVAL, "name of 513 bytes");
	free(json);
	free(name);
}

/* ---------------------------------------------------------------------- */
/* Files and directories */

static char dir[64];

static void write_file(const char *name, const char *json, size_t data_len)
{
	char path[256];
	uint8_t *buf;
	size_t len;
	FILE *fp;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fp = fopen(path, "wb");
	assert_non_null(fp);
	if (json) {
		buf = image(json, data_len, &len);
		assert_int_equal(fwrite(buf, 1, len, fp), len);
		free(buf);
	}
	fclose(fp);
}

static int setup_dir(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/djinn-st-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown_dir(void **state)
{
	return rm_tree(dir);
}

static void clear_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -f %s/*", dir);
	assert_int_equal(system(cmd), 0);
}

static void test_open(void **state)
{
	char msg[ST_MSG_LEN], path[256];
	struct st_file *f;

	clear_dir();
	write_file("a.safetensors", "{" T("w", "F32", "[2]", 0, 8) "}", 8);
	snprintf(path, sizeof(path), "%s/a.safetensors", dir);
	assert_int_equal(st_open(path, &f, msg, sizeof(msg)), 0);
	assert_int_equal(st_find(f, "w")->size, 8);
	assert_string_equal(f->path, path);
	st_close(f);

	write_file("empty.safetensors", NULL, 0);
	snprintf(path, sizeof(path), "%s/empty.safetensors", dir);
	assert_int_equal(st_open(path, &f, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "empty.safetensors"));
	snprintf(path, sizeof(path), "%s/none.safetensors", dir);
	assert_int_equal(st_open(path, &f, msg, sizeof(msg)), -ENOENT);
	assert_non_null(strstr(msg, "none.safetensors"));
	assert_int_equal(st_open(dir, &f, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "not a regular file"));
}

static void test_set_plain(void **state)
{
	char msg[ST_MSG_LEN];
	struct st_set *set;

	clear_dir();
	assert_int_equal(st_set_open(dir, &set, msg, sizeof(msg)), -ENOENT);
	assert_non_null(strstr(msg, "no *.safetensors"));

	write_file("model.safetensors", "{" T("w", "F32", "[2]", 0, 8) "}", 8);
	write_file("extra.safetensors", "{" T("v", "F16", "[2]", 0, 4) "}", 4);
	write_file("notes.txt", "{}", 0);
	assert_int_equal(st_set_open(dir, &set, msg, sizeof(msg)), 0);
	assert_int_equal(set->nr_files, 2);
	assert_int_equal(set->nr_tensors, 2);
	assert_string_equal(set->tensors[0]->name, "v");
	assert_int_equal(st_set_find(set, "w")->dtype, ST_F32);
	assert_null(st_set_find(set, "x"));
	st_set_close(set);

	/* the same name in two files */
	write_file("dup.safetensors", "{" T("w", "F32", "[2]", 0, 8) "}", 8);
	assert_int_equal(st_set_open(dir, &set, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "tensor 'w' is also in"));

	/* a bad file refuses the set, naming the file */
	write_file("dup.safetensors", "{" T("q", "F32", "[2]", 0, 9) "}", 9);
	assert_int_equal(st_set_open(dir, &set, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "dup.safetensors: tensor 'q'"));
}

static void test_set_sharded(void **state)
{
	char msg[ST_MSG_LEN];
	struct st_set *set;

	clear_dir();
	write_file("model-00001-of-00002.safetensors",
		   "{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[1]", 8,
							12) "}",
		   12);
	write_file("model-00002-of-00002.safetensors",
		   "{" T("c", "BF16", "[3]", 0, 6) "}", 6);
	write_file("stray.safetensors", "{" T("a", "F32", "[2]", 0, 8) "}", 8);
	write_text_file(dir, "model.safetensors.index.json",
			"{\"metadata\":{\"total_size\":18},\"weight_map\":{"
			"\"a\":\"model-00001-of-00002.safetensors\","
			"\"b\":\"model-00001-of-00002.safetensors\","
			"\"c\":\"model-00002-of-00002.safetensors\"}}");
	/* the index decides: the stray file is not read */
	assert_int_equal(st_set_open(dir, &set, msg, sizeof(msg)), 0);
	assert_int_equal(set->nr_files, 2);
	assert_int_equal(set->nr_tensors, 3);
	assert_int_equal(st_set_find(set, "c")->dtype, ST_BF16);
	assert_ptr_equal(st_set_find(set, "c")->file, set->files[1]);
	st_set_close(set);

	/* a tensor the map puts in the wrong shard */
	write_text_file(dir, "model.safetensors.index.json",
			"{\"weight_map\":{"
			"\"a\":\"model-00001-of-00002.safetensors\","
			"\"b\":\"model-00002-of-00002.safetensors\","
			"\"c\":\"model-00002-of-00002.safetensors\"}}");
	assert_int_equal(st_set_open(dir, &set, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "model.safetensors.index.json: tensor 'b': "
				    "not in shard "
				    "model-00002-of-00002.safetensors"));
	/* a tensor the map does not list */
	write_text_file(dir, "model.safetensors.index.json",
			"{\"weight_map\":{"
			"\"a\":\"model-00001-of-00002.safetensors\","
			"\"c\":\"model-00002-of-00002.safetensors\"}}");
	assert_int_equal(st_set_open(dir, &set, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "tensor 'b': in shard "
				    "model-00001-of-00002.safetensors, not in "
				    "the weight_map"));
	/* path traversal and other bad shard names */
	write_text_file(dir, "model.safetensors.index.json",
			"{\"weight_map\":{\"a\":\"../x.safetensors\"}}");
	assert_int_equal(st_set_open(dir, &set, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "tensor 'a': shard '../x.safetensors' is "
				    "not a plain *.safetensors file name"));
	write_text_file(dir, "model.safetensors.index.json",
			"{\"weight_map\":{\"a\":\"model.bin\"}}");
	assert_int_equal(st_set_open(dir, &set, msg, sizeof(msg)), -EINVAL);
	write_text_file(dir, "model.safetensors.index.json",
			"{\"weight_map\":{\"a\":\"gone.safetensors\"}}");
	assert_int_equal(st_set_open(dir, &set, msg, sizeof(msg)), -ENOENT);
	assert_non_null(strstr(msg, "gone.safetensors"));
	/* a bad index */
	write_text_file(dir, "model.safetensors.index.json",
			"{\"weight_map\":{}");
	assert_int_equal(st_set_open(dir, &set, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "index.json"));
	write_text_file(dir, "model.safetensors.index.json",
			"{\"metadata\":{}}");
	assert_int_equal(st_set_open(dir, &set, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "weight_map"));
	write_text_file(dir, "model.safetensors.index.json",
			"{\"weight_map\":{},\"other\":1}");
	assert_int_equal(st_set_open(dir, &set, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "unknown field 'other'"));
	write_text_file(
		dir, "model.safetensors.index.json",
		"{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors"
		"\",\"a\":\"model-00001-of-00002.safetensors\"}}");
	assert_int_equal(st_set_open(dir, &set, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "duplicate"));
}

/*
 * Sharded in memory, as an upload sends it: the index's bytes and the
 * shards in strcmp() order of their names, checked with the directory's
 * code. Each case is refused with -EINVAL and a message naming the index
 * or shard and the tensor, and *out untouched.
 */
#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"
#define INDEX_OF(a, b, c)                                              \
	"{\"metadata\":{\"total_size\":18},\"weight_map\":{\"a\":\"" a \
	"\",\"b\":\"" b "\",\"c\":\"" c "\"}}"

#define SHARD_AB \
	"{" T("a", "F32", "[2]", 0, 8) "," T("b", "F32", "[1]", 8, 12) "}"
#define SHARD_BC \
	"{" T("b", "F32", "[1]", 0, 4) "," T("c", "BF16", "[3]", 4, 10) "}"

struct shards {
	uint8_t *buf[3];
	size_t len[3];
	size_t n;
};

static void shards_free(struct shards *sh)
{
	for (size_t i = 0; i < ARRAY_SIZE(sh->buf); i++)
		free(sh->buf[i]);
}

/* @index over @sh with name "up": 0 and the set, or the errno with
 * every one of the NULL-terminated @words in the message. */
static struct st_set *parse_index_(int line, const char *index,
				   const struct shards *sh, int err, ...)
{
	char msg[ST_MSG_LEN] = "";
	struct st_set *set = (void *)0x1;
	const char *w;
	va_list ap;
	int ret;

	ret = st_set_parse("up", index, strlen(index),
			   (const void *const *)sh->buf, sh->len, sh->n, &set,
			   msg, sizeof(msg));
	if (ret != err)
		fail_msg("line %d: got %d (%s), want %d", line, ret, msg, err);
	if (err) {
		assert_ptr_equal(set, (void *)0x1);
		assert_true(!strncmp(msg, "up: ", 4));
	}
	va_start(ap, err);
	while ((w = va_arg(ap, const char *)))
		if (!strstr(msg, w))
			fail_msg("line %d: message '%s' lacks '%s'", line, msg,
				 w);
	va_end(ap);
	return err ? NULL : set;
}
#define parse_index(index, sh, err, ...) \
	parse_index_(__LINE__, index, sh, err, ##__VA_ARGS__, NULL)

static void test_set_parse_index(void **state)
{
	struct shards sh = { .n = 2 };
	struct st_set *set;

	/* shard 1 holds a and b, shard 2 holds c */
	sh.buf[0] = image(SHARD_AB, 12, &sh.len[0]);
	sh.buf[1] = image("{" T("c", "BF16", "[3]", 0, 6) "}", 6, &sh.len[1]);

	/* good: files[i] is the i-th shard name in strcmp() order */
	set = parse_index(INDEX_OF(SHARD1, SHARD1, SHARD2), &sh, 0);
	assert_int_equal(set->nr_files, 2);
	assert_int_equal(set->nr_tensors, 3);
	assert_string_equal(set->files[0]->path, "up: " SHARD1);
	assert_string_equal(set->files[1]->path, "up: " SHARD2);
	assert_ptr_equal(st_set_find(set, "c")->file, set->files[1]);
	assert_int_equal(st_set_find(set, "b")->size, 4);
	st_set_close(set);
	/* without an index the same files are "file I" */
	{
		char msg[ST_MSG_LEN];

		assert_int_equal(
			st_set_parse("up", NULL, 0, (const void *const *)sh.buf,
				     sh.len, 2, &set, msg, sizeof(msg)),
			0);
		assert_string_equal(set->files[0]->path, "up: file 0");
		st_set_close(set);
	}

	/* a tensor missing from the shard the map gives it */
	parse_index(INDEX_OF(SHARD1, SHARD2, SHARD2), &sh, -EINVAL,
		    "up: model.safetensors.index.json: tensor 'b': not in "
		    "shard " SHARD2);
	/* a tensor the map does not give its shard: b in shard 1 and 2 */
	{
		struct shards both = { .n = 2 };

		both.buf[0] = sh.buf[0];
		both.len[0] = sh.len[0];
		both.buf[1] = image(SHARD_BC, 10, &both.len[1]);
		parse_index(INDEX_OF(SHARD1, SHARD2, SHARD2), &both, -EINVAL,
			    "index.json: tensor 'b': in shard " SHARD1
			    ", the weight_map puts it in " SHARD2);
		free(both.buf[1]);
	}
	/* a tensor the map does not list at all */
	parse_index("{\"weight_map\":{\"a\":\"" SHARD1 "\",\"c\":\"" SHARD2
		    "\"}}",
		    &sh, -EINVAL,
		    "index.json: tensor 'b': in shard " SHARD1
		    ", not in the weight_map");
	/* a shard sent that the index does not name, or one too few */
	sh.buf[2] = image("{" T("d", "F32", "[1]", 0, 4) "}", 4, &sh.len[2]);
	sh.n = 3;
	parse_index(INDEX_OF(SHARD1, SHARD1, SHARD2), &sh, -EINVAL,
		    "index.json: weight_map names 2 shards, 3 sent");
	sh.n = 2;
	parse_index(INDEX_OF(SHARD1, SHARD1, SHARD1), &sh, -EINVAL,
		    "weight_map names 1 shards, 2 sent");
	/* shard names that are not plain file names */
	parse_index(INDEX_OF(SHARD1, SHARD1, "../x.safetensors"), &sh, -EINVAL,
		    "tensor 'c': shard '../x.safetensors' is not a plain "
		    "*.safetensors file name");
	parse_index(INDEX_OF(SHARD1, SHARD1, "sub/x.safetensors"), &sh, -EINVAL,
		    "tensor 'c': shard 'sub/x.safetensors' is not");
	parse_index(INDEX_OF(SHARD1, SHARD1, ".hidden.safetensors"), &sh,
		    -EINVAL, "shard '.hidden.safetensors' is not");
	parse_index(INDEX_OF(SHARD1, SHARD1, "model.bin"), &sh, -EINVAL,
		    "shard 'model.bin' is not");
	parse_index("{\"weight_map\":{\"a\":1}}", &sh, -EINVAL,
		    "tensor 'a': shard is not a string");
	/* the index itself */
	parse_index("{\"weight_map\":{},\"other\":1}", &sh, -EINVAL,
		    "index.json: unknown field 'other'");
	parse_index("{\"metadata\":{}}", &sh, -EINVAL,
		    "index.json: no \"weight_map\" object");
	parse_index("{\"weight_map\":{}}", &sh, -EINVAL,
		    "\"weight_map\" names no tensor");
	parse_index("{\"weight_map\":{\"a\":\"" SHARD1 "\",\"a\":\"" SHARD1
		    "\"}}",
		    &sh, -EINVAL, "index.json", "duplicate");
	parse_index("{\"weight_map\":{}} x", &sh, -EINVAL, "index.json");
	/* a bad shard is named by its name */
	sh.len[1] -= 1;
	parse_index(INDEX_OF(SHARD1, SHARD1, SHARD2), &sh, -EINVAL,
		    "up: " SHARD2 ": tensor 'c'");
	shards_free(&sh);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good),
		cmocka_unit_test(test_header_refused),
		cmocka_unit_test(test_entry_refused),
		cmocka_unit_test(test_long_name),
		cmocka_unit_test(test_open),
		cmocka_unit_test(test_set_plain),
		cmocka_unit_test(test_set_sharded),
		cmocka_unit_test(test_set_parse_index),
	};

	return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
