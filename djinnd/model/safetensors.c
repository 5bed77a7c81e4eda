// SPDX-License-Identifier: MIT
/*
 * The strict safetensors reader. See safetensors.h.
 *
 * The JSON is parsed by jansson with duplicate keys refused; each entry is
 * then checked field by field, the shapes against the byte sizes, and the
 * offsets, sorted, must tile the data exactly.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "errmsg.h"
#include "model/safetensors.h"
#include "model/safetensors_test.h"

static const struct {
	const char *name;
	size_t size;
	unsigned int djinn;
} dtypes[ST_NR_DTYPES] = {
	[ST_BOOL] = { "BOOL", 1, 0 },
	[ST_U8] = { "U8", 1, DJINN_DTYPE_U8 },
	[ST_I8] = { "I8", 1, 0 },
	[ST_F8_E5M2] = { "F8_E5M2", 1, 0 },
	[ST_F8_E4M3] = { "F8_E4M3", 1, 0 },
	[ST_I16] = { "I16", 2, 0 },
	[ST_U16] = { "U16", 2, 0 },
	[ST_F16] = { "F16", 2, DJINN_DTYPE_F16 },
	[ST_BF16] = { "BF16", 2, DJINN_DTYPE_BF16 },
	[ST_I32] = { "I32", 4, DJINN_DTYPE_I32 },
	[ST_U32] = { "U32", 4, 0 },
	[ST_F32] = { "F32", 4, DJINN_DTYPE_F32 },
	[ST_F64] = { "F64", 8, 0 },
	[ST_I64] = { "I64", 8, DJINN_DTYPE_I64 },
	[ST_U64] = { "U64", 8, 0 },
};

const char *st_dtype_name(enum st_dtype t)
{
	return (unsigned int)t < ST_NR_DTYPES ? dtypes[t].name : "?";
}

size_t st_dtype_size(enum st_dtype t)
{
	return (unsigned int)t < ST_NR_DTYPES ? dtypes[t].size : 0;
}

unsigned int st_dtype_djinn(enum st_dtype t)
{
	return (unsigned int)t < ST_NR_DTYPES ? dtypes[t].djinn : 0;
}

/* A name fit to print: at most 64 bytes, non-printable bytes as '?'. */
static const char *clean(char buf[72], const char *s)
{
	size_t i;

	for (i = 0; s[i] && i < 64; i++)
		buf[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
	if (s[i])
		buf[i++] = '.', buf[i++] = '.', buf[i++] = '.';
	buf[i] = 0;
	return buf;
}

/* ---------------------------------------------------------------------- */
/* One file */

void st_close(struct st_file *f)
{
	if (!f)
		return;
	for (size_t i = 0; i < f->nr_tensors; i++)
		free((char *)f->tensors[i].name);
	for (size_t i = 0; i < f->nr_meta; i++) {
		free(f->meta_keys[i]);
		free(f->meta_values[i]);
	}
	free(f->tensors);
	free(f->meta_keys);
	free(f->meta_values);
	if (f->map)
		munmap(f->map, f->map_len);
	free(f->path);
	free(f);
}

static int cmp_tensor_name(const void *a, const void *b)
{
	return strcmp(((const struct st_tensor *)a)->name,
		      ((const struct st_tensor *)b)->name);
}

static int cmp_tensor_offset(const void *a, const void *b)
{
	const struct st_tensor *x = *(const struct st_tensor *const *)a;
	const struct st_tensor *y = *(const struct st_tensor *const *)b;

	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	if (x->size != y->size)
		return x->size < y->size ? -1 : 1;
	return 0;
}

/* A non-negative JSON integer into @v; false if it is anything else. */
static bool get_u64(const json_t *j, uint64_t *v)
{
	if (!json_is_integer(j) || json_integer_value(j) < 0)
		return false;
	*v = (uint64_t)json_integer_value(j);
	return true;
}

/* Check one header entry and fill @t (its name already set). */
static int parse_entry(struct st_file *f, json_t *e, struct st_tensor *t,
		       char *msg, size_t msglen)
{
	json_t *dt = NULL, *shape = NULL, *offs = NULL, *v;
	uint64_t begin, end, n = 1, bytes;
	const char *key, *s;
	char nb[72];
	size_t i;

#define BAD(err, fmt, ...)                                         \
	errmsg(msg, msglen, err, "%s: tensor '%s': " fmt, f->path, \
	       clean(nb, t->name), ##__VA_ARGS__)
	if (!json_is_object(e))
		return BAD(-EINVAL, "entry is not an object");
	json_object_foreach(e, key, v)
	{
		if (!strcmp(key, "dtype"))
			dt = v;
		else if (!strcmp(key, "shape"))
			shape = v;
		else if (!strcmp(key, "data_offsets"))
			offs = v;
		else
			return BAD(-EINVAL, "unknown field '%s'",
				   clean((char[72]){ 0 }, key));
	}
	if (!dt || !shape || !offs)
		return BAD(-EINVAL, "missing %s",
			   !dt	  ? "dtype" :
			   !shape ? "shape" :
				    "data_offsets");

	if (!json_is_string(dt))
		return BAD(-EINVAL, "dtype is not a string");
	s = json_string_value(dt);
	for (i = 0; i < ST_NR_DTYPES; i++)
		if (!strcmp(s, dtypes[i].name))
			break;
	if (i == ST_NR_DTYPES)
		return BAD(-EINVAL, "unknown dtype '%s'",
			   clean((char[72]){ 0 }, s));
	t->dtype = (enum st_dtype)i;

	if (!json_is_array(shape))
		return BAD(-EINVAL, "shape is not an array");
	if (json_array_size(shape) > DJINN_MAX_DIMS)
		return BAD(-E2BIG, "%zu dims, at most %d",
			   json_array_size(shape), DJINN_MAX_DIMS);
	t->ndim = (unsigned int)json_array_size(shape);
	for (i = 0; i < t->ndim; i++) {
		if (!get_u64(json_array_get(shape, i), &t->shape[i]))
			return BAD(-EINVAL,
				   "shape[%zu] is not a non-negative integer",
				   i);
		if (__builtin_mul_overflow(n, t->shape[i], &n))
			return BAD(-E2BIG, "shape overflows 64 bits");
	}
	t->nelem = n;
	if (__builtin_mul_overflow(n, dtypes[t->dtype].size, &bytes))
		return BAD(-E2BIG, "%s bytes overflow 64 bits",
			   dtypes[t->dtype].name);

	if (!json_is_array(offs) || json_array_size(offs) != 2 ||
	    !get_u64(json_array_get(offs, 0), &begin) ||
	    !get_u64(json_array_get(offs, 1), &end))
		return BAD(-EINVAL,
			   "data_offsets is not two non-negative integers");
	if (end < begin)
		return BAD(-EINVAL,
			   "data_offsets [%llu, %llu) end before begin",
			   (unsigned long long)begin, (unsigned long long)end);
	if (end > f->data_len)
		return BAD(
			-EINVAL,
			"data_offsets [%llu, %llu) past the data's %llu bytes",
			(unsigned long long)begin, (unsigned long long)end,
			(unsigned long long)f->data_len);
	if (end - begin != bytes)
		return BAD(-EINVAL,
			   "%llu bytes for %s of %llu elements (%llu bytes)",
			   (unsigned long long)(end - begin),
			   dtypes[t->dtype].name, (unsigned long long)n,
			   (unsigned long long)bytes);
#undef BAD
	t->offset = begin;
	t->size = bytes;
	return 0;
}

static int parse_metadata(struct st_file *f, json_t *m, char *msg,
			  size_t msglen)
{
	size_t n = json_is_object(m) ? json_object_size(m) : 0, i = 0;
	const char *key;
	json_t *v;

	if (!json_is_object(m))
		return errmsg(msg, msglen, -EINVAL,
			      "%s: __metadata__ is not an object", f->path);
	f->meta_keys = calloc(n ? n : 1, sizeof(char *));
	f->meta_values = calloc(n ? n : 1, sizeof(char *));
	if (!f->meta_keys || !f->meta_values)
		return -ENOMEM;
	/* jansson keeps insertion order; sort keys for st_meta()'s search */
	json_object_foreach(m, key, v)
	{
		char kb[72];

		if (!json_is_string(v))
			return errmsg(msg, msglen, -EINVAL,
				      "%s: __metadata__ '%s' is not a string",
				      f->path, clean(kb, key));
		f->meta_keys[i] = strdup(key);
		f->meta_values[i] = strdup(json_string_value(v));
		f->nr_meta = ++i;
		if (!f->meta_keys[i - 1] || !f->meta_values[i - 1])
			return -ENOMEM;
	}
	for (i = 1; i < n; i++) /* insertion sort: metadata is small */
		for (size_t j = i;
		     j && strcmp(f->meta_keys[j - 1], f->meta_keys[j]) > 0;
		     j--) {
			char *tk = f->meta_keys[j], *tv = f->meta_values[j];

			f->meta_keys[j] = f->meta_keys[j - 1];
			f->meta_values[j] = f->meta_values[j - 1];
			f->meta_keys[j - 1] = tk;
			f->meta_values[j - 1] = tv;
		}
	return 0;
}

/* The offsets, sorted, must tile [0, data_len) with no gap or overlap. */
static int check_tiling(struct st_file *f, char *msg, size_t msglen)
{
	const struct st_tensor **by = NULL;
	uint64_t at = 0;
	char a[72], b[72];
	int ret = 0;

	if (f->nr_tensors) {
		by = malloc(f->nr_tensors * sizeof(*by));
		if (!by)
			return -ENOMEM;
	}
	for (size_t i = 0; i < f->nr_tensors; i++)
		by[i] = &f->tensors[i];
	if (f->nr_tensors)
		qsort(by, f->nr_tensors, sizeof(*by), cmp_tensor_offset);
	for (size_t i = 0; i < f->nr_tensors && !ret; i++) {
		const struct st_tensor *t = by[i];

		if (t->offset > at)
			ret = errmsg(
				msg, msglen, -EINVAL,
				"%s: tensor '%s': hole of %llu bytes before "
				"its data_offsets [%llu, %llu)",
				f->path, clean(a, t->name),
				(unsigned long long)(t->offset - at),
				(unsigned long long)t->offset,
				(unsigned long long)(t->offset + t->size));
		else if (t->offset < at)
			ret = errmsg(
				msg, msglen, -EINVAL,
				"%s: tensor '%s': data_offsets [%llu, %llu) "
				"overlap tensor '%s'",
				f->path, clean(a, t->name),
				(unsigned long long)t->offset,
				(unsigned long long)(t->offset + t->size),
				clean(b, by[i - 1]->name));
		at = t->offset + t->size;
	}
	if (!ret && at != f->data_len)
		ret = errmsg(msg, msglen, -EINVAL,
			     "%s: %llu bytes of data after the last tensor",
			     f->path, (unsigned long long)(f->data_len - at));
	free(by);
	return ret;
}

static int parse_header(struct st_file *f, const uint8_t *buf, size_t len,
			char *msg, size_t msglen)
{
	uint64_t hlen = 0;
	json_error_t jerr;
	json_t *root, *v;
	const char *key;
	size_t n, i = 0;
	int ret;

	if (len < 8)
		return errmsg(msg, msglen, -EINVAL,
			      "%s: %zu bytes: too short for a header length",
			      f->path, len);
	for (int k = 7; k >= 0; k--)
		hlen = hlen << 8 | buf[k];
	if (hlen > ST_MAX_HEADER)
		return errmsg(msg, msglen, -E2BIG,
			      "%s: header length %llu over the limit of %llu",
			      f->path, (unsigned long long)hlen, ST_MAX_HEADER);
	if (hlen > len - 8)
		return errmsg(msg, msglen, -EINVAL,
			      "%s: header length %llu past the end of the file "
			      "(%zu bytes)",
			      f->path, (unsigned long long)hlen, len);
	if (hlen < 2 || buf[8] != '{')
		return errmsg(msg, msglen, -EINVAL,
			      "%s: header does not start with '{'", f->path);
	f->data_len = len - 8 - hlen;

	root = json_loadb((const char *)buf + 8, hlen,
			  JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK,
			  &jerr);
	if (!root)
		return errmsg(msg, msglen, -EINVAL,
			      "%s: header JSON at byte %d: %s", f->path,
			      jerr.position, jerr.text);
	/* only space padding after the object, as the format allows */
	for (size_t p = (size_t)jerr.position; p < hlen; p++)
		if (buf[8 + p] != ' ') {
			ret = errmsg(
				msg, msglen, -EINVAL,
				"%s: header byte %zu after the JSON object "
				"is not a space",
				f->path, p);
			goto out;
		}
	if (!json_is_object(root)) {
		ret = errmsg(msg, msglen, -EINVAL,
			     "%s: header is not a JSON object", f->path);
		goto out;
	}
	n = json_object_size(root);
	f->tensors = calloc(n ? n : 1, sizeof(*f->tensors));
	if (!f->tensors) {
		ret = -ENOMEM;
		goto out;
	}
	json_object_foreach(root, key, v)
	{
		struct st_tensor *t;
		char nb[72];

		if (!strcmp(key, "__metadata__")) {
			ret = parse_metadata(f, v, msg, msglen);
			if (ret)
				goto out;
			continue;
		}
		if (!key[0] || strlen(key) > ST_MAX_NAME) {
			ret = errmsg(
				msg, msglen, -EINVAL,
				"%s: tensor '%s': name of %zu bytes, not 1 "
				"to %d",
				f->path, clean(nb, key), strlen(key),
				ST_MAX_NAME);
			goto out;
		}
		t = &f->tensors[i];
		t->name = strdup(key);
		if (!t->name) {
			ret = -ENOMEM;
			goto out;
		}
		f->nr_tensors = ++i;
		t->file = f;
		ret = parse_entry(f, v, t, msg, msglen);
		if (ret)
			goto out;
		t->data = buf + 8 + hlen + t->offset;
	}
	ret = check_tiling(f, msg, msglen);
	if (ret)
		goto out;
	if (f->nr_tensors)
		qsort(f->tensors, f->nr_tensors, sizeof(*f->tensors),
		      cmp_tensor_name);
	/* qsort moved the tensors: nothing points at them yet but ->file */
out:
	json_decref(root);
	return ret;
}

int st_parse(const void *buf, size_t len, const char *path,
	     struct st_file **out, char *msg, size_t msglen)
{
	struct st_file *f = calloc(1, sizeof(*f));
	int ret;

	if (!f)
		return -ENOMEM;
	f->path = strdup(path);
	if (!f->path) {
		free(f);
		return -ENOMEM;
	}
	ret = parse_header(f, buf, len, msg, msglen);
	if (ret) {
		if (ret == -ENOMEM)
			errmsg(msg, msglen, ret, "%s: out of memory", path);
		st_close(f);
		return ret;
	}
	*out = f;
	return 0;
}

int st_open(const char *path, struct st_file **out, char *msg, size_t msglen)
{
	struct stat st;
	void *map;
	int fd, ret;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errmsg(msg, msglen, -errno, "%s: %s", path,
			      strerror(errno));
	if (fstat(fd, &st)) {
		ret = errmsg(msg, msglen, -errno, "%s: %s", path,
			     strerror(errno));
		goto out_close;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = errmsg(msg, msglen, -EINVAL, "%s: not a regular file",
			     path);
		goto out_close;
	}
	if (st.st_size < 8) {
		ret = errmsg(msg, msglen, -EINVAL,
			     "%s: %lld bytes: too short for a header length",
			     path, (long long)st.st_size);
		goto out_close;
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED) {
		ret = errmsg(msg, msglen, -errno, "%s: mmap: %s", path,
			     strerror(errno));
		goto out_close;
	}
	ret = st_parse(map, (size_t)st.st_size, path, out, msg, msglen);
	if (ret) {
		munmap(map, (size_t)st.st_size);
		goto out_close;
	}
	(*out)->map = map;
	(*out)->map_len = (size_t)st.st_size;
out_close:
	close(fd);
	return ret;
}

const struct st_tensor *st_find(const struct st_file *f, const char *name)
{
	struct st_tensor key = { .name = name };

	if (!f->nr_tensors)
		return NULL;
	return bsearch(&key, f->tensors, f->nr_tensors, sizeof(key),
		       cmp_tensor_name);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

const char *st_meta(const struct st_file *f, const char *key)
{
	char **k;

	if (!f->nr_meta)
		return NULL;
	k = bsearch(&key, f->meta_keys, f->nr_meta, sizeof(char *), cmp_str);
	return k ? f->meta_values[k - f->meta_keys] : NULL;
}

/* ---------------------------------------------------------------------- */
/* A model directory */

void st_set_close(struct st_set *set)
{
	if (!set)
		return;
	for (size_t i = 0; i < set->nr_files; i++)
		st_close(set->files[i]);
	free(set->files);
	free(set->tensors);
	free(set);
}

static int cmp_tensor_ptr_name(const void *a, const void *b)
{
	return strcmp((*(const struct st_tensor *const *)a)->name,
		      (*(const struct st_tensor *const *)b)->name);
}

const struct st_tensor *st_set_find(const struct st_set *set, const char *name)
{
	struct st_tensor key = { .name = name };
	const struct st_tensor *kp = &key, **r;

	if (!set->nr_tensors)
		return NULL;
	r = bsearch(&kp, set->tensors, set->nr_tensors, sizeof(kp),
		    cmp_tensor_ptr_name);
	return r ? *r : NULL;
}

/* A shard's file name: plain, not hidden, ending in .safetensors. */
static bool shard_name_ok(const char *s)
{
	size_t n = strlen(s), suf = strlen(".safetensors");

	return n > suf && n < 256 && s[0] != '.' && !strchr(s, '/') &&
	       !strcmp(s + n - suf, ".safetensors");
}

static int add_file(struct st_set *set, const char *dir, const char *name,
		    char *msg, size_t msglen)
{
	char path[4096];
	struct st_file *f;
	int ret;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >=
	    sizeof(path))
		return errmsg(msg, msglen, -ENAMETOOLONG,
			      "%s/%s: path too long", dir, name);
	ret = st_open(path, &f, msg, msglen);
	if (ret)
		return ret;
	set->files[set->nr_files++] = f;
	return 0;
}

/* Every tensor of every file, sorted; a name twice is refused. */
static int gather(struct st_set *set, char *msg, size_t msglen)
{
	size_t n = 0, k = 0;
	char nb[72];

	for (size_t i = 0; i < set->nr_files; i++)
		n += set->files[i]->nr_tensors;
	set->tensors = calloc(n ? n : 1, sizeof(*set->tensors));
	if (!set->tensors)
		return -ENOMEM;
	for (size_t i = 0; i < set->nr_files; i++)
		for (size_t j = 0; j < set->files[i]->nr_tensors; j++)
			set->tensors[k++] = &set->files[i]->tensors[j];
	set->nr_tensors = n;
	if (n)
		qsort(set->tensors, n, sizeof(*set->tensors),
		      cmp_tensor_ptr_name);
	for (size_t i = 1; i < n; i++)
		if (!strcmp(set->tensors[i]->name, set->tensors[i - 1]->name))
			return errmsg(msg, msglen, -EINVAL,
				      "%s: tensor '%s' is also in %s",
				      set->tensors[i]->file->path,
				      clean(nb, set->tensors[i]->name),
				      set->tensors[i - 1]->file->path);
	return 0;
}

/*
 * struct index - model.safetensors.index.json, as index_parse() found it
 * @path:  its name in messages
 * @root:  the JSON (its own reference)
 * @map:   its "weight_map": tensor name to shard name
 * @names: the distinct shard names, sorted by strcmp(), @nr_names of them:
 *         the set's files[i] is shard names[i]
 */
struct index {
	const char *path;
	json_t *root;
	json_t *map;
	const char **names;
	size_t nr_names;
};

static void index_free(struct index *ix)
{
	free(ix->names);
	json_decref(ix->root);
}

/*
 * Check the index's shape into @ix: an object of "metadata" and a
 * non-empty "weight_map" of tensor names to plain *.safetensors names.
 * @root is its JSON (@ix takes it), or NULL with @jerr saying why not.
 * index_free() @ix whatever this returns.
 */
static int index_parse(struct index *ix, const char *path, json_t *root,
		       const json_error_t *jerr, char *msg, size_t msglen)
{
	const char *key;
	size_t n = 0, k = 0;
	char nb[72], sb[72];
	json_t *v;

	*ix = (struct index){ .path = path, .root = root };
	if (!root)
		return errmsg(msg, msglen, -EINVAL, "%s: line %d: %s", path,
			      jerr->line, jerr->text);
	if (json_is_object(root)) {
		json_object_foreach(root, key, v)
		{
			if (!strcmp(key, "weight_map"))
				ix->map = v;
			else if (strcmp(key, "metadata"))
				return errmsg(msg, msglen, -EINVAL,
					      "%s: unknown field '%s'", path,
					      clean(nb, key));
		}
	}
	if (!json_is_object(ix->map))
		return errmsg(msg, msglen, -EINVAL,
			      "%s: no \"weight_map\" object", path);
	if (!json_object_size(ix->map))
		return errmsg(msg, msglen, -EINVAL,
			      "%s: \"weight_map\" names no tensor", path);
	ix->names = calloc(json_object_size(ix->map), sizeof(*ix->names));
	if (!ix->names)
		return -ENOMEM;
	json_object_foreach(ix->map, key, v)
	{
		const char *s = json_string_value(v);

		if (!s)
			return errmsg(msg, msglen, -EINVAL,
				      "%s: tensor '%s': shard is not a string",
				      path, clean(nb, key));
		if (!shard_name_ok(s))
			return errmsg(msg, msglen, -EINVAL,
				      "%s: tensor '%s': shard '%s' is not a "
				      "plain *.safetensors file name",
				      path, clean(nb, key), clean(sb, s));
		ix->names[n++] = s;
	}
	qsort(ix->names, n, sizeof(*ix->names), cmp_str);
	for (size_t i = 0; i < n; i++)
		if (!k || strcmp(ix->names[k - 1], ix->names[i]))
			ix->names[k++] = ix->names[i];
	if (k > ST_MAX_SHARDS)
		return errmsg(msg, msglen, -E2BIG, "%s: %zu shards, over %d",
			      path, k, ST_MAX_SHARDS);
	ix->nr_names = k;
	return 0;
}

/* Shard @name's number in @ix (it is one of its names). */
static size_t index_shard(const struct index *ix, const char *name)
{
	const char **p = bsearch(&name, ix->names, ix->nr_names,
				 sizeof(*ix->names), cmp_str);

	return (size_t)(p - ix->names);
}

/* Each file of @set, shard @ix->names[i] in files[i], holds exactly the
 * tensors the weight_map gives it. */
static int index_check(const struct index *ix, const struct st_set *set,
		       char *msg, size_t msglen)
{
	char nb[72], sb[72], ob[72];
	const char *key;
	json_t *v;

	json_object_foreach(ix->map, key, v)
	{
		size_t i = index_shard(ix, json_string_value(v));

		if (!st_find(set->files[i], key))
			return errmsg(msg, msglen, -EINVAL,
				      "%s: tensor '%s': not in shard %s",
				      ix->path, clean(nb, key),
				      clean(sb, ix->names[i]));
	}
	for (size_t i = 0; i < set->nr_files; i++)
		for (size_t j = 0; j < set->files[i]->nr_tensors; j++) {
			const struct st_tensor *t = &set->files[i]->tensors[j];
			json_t *e = json_object_get(ix->map, t->name);
			const char *s = json_string_value(e);

			if (!s)
				return errmsg(msg, msglen, -EINVAL,
					      "%s: tensor '%s': in shard %s, "
					      "not in the weight_map",
					      ix->path, clean(nb, t->name),
					      clean(sb, ix->names[i]));
			if (strcmp(s, ix->names[i]))
				return errmsg(msg, msglen, -EINVAL,
					      "%s: tensor '%s': in shard %s, "
					      "the weight_map puts it in %s",
					      ix->path, clean(nb, t->name),
					      clean(sb, ix->names[i]),
					      clean(ob, s));
		}
	return 0;
}

static int open_index(struct st_set *set, const char *dir, const char *path,
		      char *msg, size_t msglen)
{
	json_error_t jerr;
	struct index ix;
	json_t *root;
	int ret;

	root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	ret = index_parse(&ix, path, root, &jerr, msg, msglen);
	if (!ret) {
		set->files = calloc(ix.nr_names, sizeof(*set->files));
		if (!set->files)
			ret = -ENOMEM;
	}
	for (size_t i = 0; i < ix.nr_names && !ret; i++)
		ret = add_file(set, dir, ix.names[i], msg, msglen);
	if (!ret)
		ret = index_check(&ix, set, msg, msglen);
	index_free(&ix);
	return ret;
}

static int sel_safetensors(const struct dirent *d)
{
	return shard_name_ok(d->d_name);
}

static int open_all(struct st_set *set, const char *dir, char *msg,
		    size_t msglen)
{
	struct dirent **ents;
	int n, ret = 0;

	n = scandir(dir, &ents, sel_safetensors, alphasort);
	if (n < 0)
		return errmsg(msg, msglen, -errno, "%s: %s", dir,
			      strerror(errno));
	if (!n)
		ret = errmsg(msg, msglen, -ENOENT, "%s: no *.safetensors file",
			     dir);
	else if (n > ST_MAX_SHARDS)
		ret = errmsg(msg, msglen, -E2BIG, "%s: over %d *.safetensors",
			     dir, ST_MAX_SHARDS);
	else if (!(set->files = calloc((size_t)n, sizeof(*set->files))))
		ret = -ENOMEM;
	for (int i = 0; i < n; i++) {
		if (!ret)
			ret = add_file(set, dir, ents[i]->d_name, msg, msglen);
		free(ents[i]);
	}
	free(ents);
	return ret;
}

int st_set_open(const char *dir, struct st_set **out, char *msg, size_t msglen)
{
	struct st_set *set = calloc(1, sizeof(*set));
	char index[4096];
	struct stat st;
	int ret;

	if (!set)
		return -ENOMEM;
	if ((size_t)snprintf(index, sizeof(index),
			     "%s/model.safetensors.index.json",
			     dir) >= sizeof(index)) {
		ret = errmsg(msg, msglen, -ENAMETOOLONG, "%s: path too long",
			     dir);
		goto out_free;
	}
	if (!stat(index, &st))
		ret = open_index(set, dir, index, msg, msglen);
	else
		ret = open_all(set, dir, msg, msglen);
	if (!ret)
		ret = gather(set, msg, msglen);
	if (ret)
		goto out_free;
	*out = set;
	return 0;

out_free:
	if (ret == -ENOMEM)
		errmsg(msg, msglen, ret, "%s: out of memory", dir);
	st_set_close(set);
	return ret;
}

int st_set_parse(const char *name, const void *index, size_t index_len,
		 const void *const *bufs, const size_t *lens, size_t n,
		 struct st_set **out, char *msg, size_t msglen)
{
	char ipath[128], path[384]; /* a shard name is under 256 bytes */
	struct index ix = { 0 };
	struct st_set *set;
	json_error_t jerr;
	int ret = 0;

	if (!n || n > ST_MAX_SHARDS)
		return errmsg(msg, msglen, n ? -E2BIG : -EINVAL,
			      "%s: %zu safetensors files: 1 to %d allowed",
			      name, n, ST_MAX_SHARDS);
	set = calloc(1, sizeof(*set));
	if (!set)
		return -ENOMEM;
	set->files = calloc(n, sizeof(*set->files));
	if (!set->files)
		ret = -ENOMEM;
	if (!ret && index) {
		snprintf(ipath, sizeof(ipath),
			 "%s: model.safetensors.index.json", name);
		ret = index_parse(&ix, ipath,
				  json_loadb(index, index_len,
					     JSON_REJECT_DUPLICATES, &jerr),
				  &jerr, msg, msglen);
		if (!ret && ix.nr_names != n)
			ret = errmsg(msg, msglen, -EINVAL,
				     "%s: weight_map names %zu shards, %zu "
				     "sent",
				     ipath, ix.nr_names, n);
	}
	for (size_t i = 0; i < n && !ret; i++) {
		if (index)
			snprintf(path, sizeof(path), "%s: %s", name,
				 ix.names[i]);
		else
			snprintf(path, sizeof(path), "%s: file %zu", name, i);
		ret = st_parse(bufs[i], lens[i], path, &set->files[i], msg,
			       msglen);
		if (!ret)
			set->nr_files++;
	}
	if (!ret && index)
		ret = index_check(&ix, set, msg, msglen);
	if (!ret)
		ret = gather(set, msg, msglen);
	index_free(&ix);
	if (ret) {
		if (ret == -ENOMEM)
			errmsg(msg, msglen, ret, "%s: out of memory", name);
		st_set_close(set);
		return ret;
	}
	*out = set;
	return 0;
}
