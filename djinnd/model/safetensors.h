/* SPDX-License-Identifier: MIT */
/*
 * A strict safetensors reader.
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes
 * of JSON (an object mapping tensor names to {"dtype", "shape",
 * "data_offsets": [begin, end]}, and an optional "__metadata__" object of
 * strings), then the tensors' bytes; offsets count from the end of the
 * header.
 *
 * Everything is checked before a file is accepted: the header length
 * (at most ST_MAX_HEADER and inside the file), the JSON (one object, no
 * duplicate keys, trailing spaces only), every entry's fields and their
 * types (unknown fields are refused), the dtype, the shape (at most
 * DJINN_MAX_DIMS dims, no overflow), the byte size against dtype and
 * shape, and the offsets: inside the data, not overlapping, and together
 * covering it with no hole. A bad file is refused with -EINVAL (-E2BIG
 * for sizes over the limits) and a one-line message naming the file, the
 * tensor and what is wrong; nothing is left allocated.
 *
 * Files are memory-mapped once, read-only; tensors point into the
 * mapping, which lives until st_close(). Bytes are never copied here.
 *
 * Functions return 0 or a negative errno and never set errno.
 */
#ifndef DJINN_MODEL_SAFETENSORS_H
#define DJINN_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include <djinn/proto.h>

#define ST_MAX_HEADER (100ull << 20) /* as the reference implementation */
#define ST_MAX_NAME 512 /* bytes of a tensor name */
#define ST_MAX_SHARDS 1024
#define ST_MSG_LEN 256 /* room for any message */

/* The dtypes of the format; st_dtype_djinn() maps those Djinn has. */
enum st_dtype {
	ST_BOOL,
	ST_U8,
	ST_I8,
	ST_F8_E5M2,
	ST_F8_E4M3,
	ST_I16,
	ST_U16,
	ST_F16,
	ST_BF16,
	ST_I32,
	ST_U32,
	ST_F32,
	ST_F64,
	ST_I64,
	ST_U64,
	ST_NR_DTYPES,
};

/* "F32", ...; "?" out of range */
const char *st_dtype_name(enum st_dtype t);
/* enum djinn_dtype, or 0 when Djinn has no such dtype */
unsigned int st_dtype_djinn(enum st_dtype t);

/*
 * struct st_tensor - one tensor of a file
 * @name:   NUL-terminated, 1 to ST_MAX_NAME bytes
 * @dtype:  enum st_dtype
 * @ndim, @shape: dims, outermost first (0 dims: a scalar)
 * @nelem:  elements (the product of @shape)
 * @offset: first byte, from the start of the file's data
 * @size:   bytes
 * @data:   the bytes, in the mapping (not aligned)
 * @file:   the file it is in
 */
struct st_tensor {
	const char *name;
	enum st_dtype dtype;
	unsigned int ndim;
	uint64_t shape[DJINN_MAX_DIMS];
	uint64_t nelem;
	uint64_t offset;
	uint64_t size;
	const uint8_t *data;
	const struct st_file *file;
};

/*
 * struct st_file - one parsed file
 * @path:       as given (for messages)
 * @nr_tensors: tensors, sorted by name in @tensors
 * @nr_meta:    "__metadata__" entries, as key/value pairs in @meta_keys,
 *              @meta_values (sorted by key)
 * @data_len:   bytes after the header
 */
struct st_file {
	char *path;
	size_t nr_tensors;
	struct st_tensor *tensors;
	size_t nr_meta;
	char **meta_keys;
	char **meta_values;
	uint64_t data_len;
	/* private */
	void *map;
	size_t map_len;
	char *strings;
};

/* Map and parse the file at @path. */
int st_open(const char *path, struct st_file **out, char *msg, size_t msglen);
/* Parse @len bytes at @buf, which must stay valid and unchanged until
 * st_close() (the fuzz harness and tests use it); @path names it in
 * messages. */
int st_parse(const void *buf, size_t len, const char *path,
	     struct st_file **out, char *msg, size_t msglen);
void st_close(struct st_file *f);
/* The tensor named @name, or NULL. */
const struct st_tensor *st_find(const struct st_file *f, const char *name);

/*
 * struct st_set - the safetensors of one model directory
 * @nr_files, @files: the files
 * @nr_tensors, @tensors: every tensor of every file, sorted by name
 *
 * With "model.safetensors.index.json" (an object of "metadata" and
 * "weight_map", no other field) the files are the shards its non-empty
 * "weight_map" names, in strcmp() order of their names: every shard
 * exists, is a plain file name ending in ".safetensors", and holds
 * exactly the tensors the map gives it. Without an index, the files are
 * every "*.safetensors" in the directory. Either way a tensor name
 * appears once across the files. st_set_open() and st_set_parse() check
 * an index with the same code.
 */
struct st_set {
	size_t nr_files;
	struct st_file **files;
	size_t nr_tensors;
	const struct st_tensor **tensors;
};

int st_set_open(const char *dir, struct st_set **out, char *msg, size_t msglen);
/*
 * A set of @n files already in memory (@bufs, @lens: valid and unchanged
 * until st_set_close()), parsed as strictly. Without @index, @name and
 * "file I" name them in messages. With @index (@index_len bytes of
 * model.safetensors.index.json, needed only during the call) they are
 * the shards its weight_map names, in strcmp() order of their names,
 * checked as st_set_open() checks a directory's, and named in messages
 * by @name and the shard's name.
 */
int st_set_parse(const char *name, const void *index, size_t index_len,
		 const void *const *bufs, const size_t *lens, size_t n,
		 struct st_set **out, char *msg, size_t msglen);
void st_set_close(struct st_set *set);
const struct st_tensor *st_set_find(const struct st_set *set, const char *name);

#endif /* DJINN_MODEL_SAFETENSORS_H */
