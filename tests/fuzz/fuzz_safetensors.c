// SPDX-License-Identifier: MIT
/*
 * libFuzzer harness: the input is a safetensors file. st_parse() either
 * refuses it with a message naming the file, or accepts it, and then
 * every tensor must lie inside the input, have the bytes its dtype and
 * shape imply, and the tensors must tile the data exactly.
 *
 * The same bytes go to the config.json parser, which must refuse them
 * naming the file or accept a config whose heads divide its widths,
 * whose contexts fit its sliding window and whose RoPE frequencies are
 * finite and positive.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/safetensors_test.h"

const char fuzz_name[] = "safetensors";
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void config(const uint8_t *data, size_t size)
{
	char msg[ST_MSG_LEN] = "";
	struct model_config c;

	if (model_config_parse_json((const char *)data, size, "fuzz", &c, msg,
				    sizeof(msg))) {
		if (strncmp(msg, "fuzz", 4))
			abort();
		return;
	}
	if (!c.n_head || !c.n_kv_head || c.n_head % c.n_kv_head ||
	    !c.head_dim || !c.n_layer || !c.vocab || !c.n_inner || !c.n_ctx ||
	    !(c.eps > 0) || (c.window && c.n_ctx > c.window))
		abort();
	if (c.arch == MODEL_GPT2) {
		if (c.head_dim * c.n_head != c.n_embd || c.n_ctx != c.n_pos)
			abort();
		return;
	}
	/* the llama family: RoPE's pairs, finite positive frequencies */
	if (c.head_dim % 2 || c.head_dim > MODEL_MAX_HEAD_DIM ||
	    !(c.rope.attn_factor > 0) || !(c.rope.theta > 0))
		abort();
	for (unsigned int i = 0; i < c.head_dim / 2; i++)
		if (!(c.rope.inv_freq[i] > 0) || !isfinite(c.rope.inv_freq[i]))
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char msg[ST_MSG_LEN] = "";
	struct st_file *f;
	uint64_t sum = 0;

	config(data, size);
	if (st_parse(data, size, "fuzz", &f, msg, sizeof(msg))) {
		if (strncmp(msg, "fuzz", 4)) /* every refusal names the file */
			abort();
		return 0;
	}
	for (size_t i = 0; i < f->nr_tensors; i++) {
		const struct st_tensor *t = &f->tensors[i];

		if (t->data < data || t->data + t->size > data + size ||
		    t->size != t->nelem * st_dtype_size(t->dtype) ||
		    st_find(f, t->name) != t)
			abort();
		sum += t->size;
	}
	if (sum != f->data_len)
		abort();
	st_close(f);
	return 0;
}
