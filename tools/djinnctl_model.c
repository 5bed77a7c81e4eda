// SPDX-License-Identifier: MIT
/*
 * djinnctl model list|load|evict: the models djinnd holds.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <djinn/proto.h>

#include "array_size.h"
#include "djinnctl.h"
#include "json_print.h"

static const char *const arch_names[] = {
	[DJINN_ARCH_GPT2] = "gpt2",	  [DJINN_ARCH_LLAMA] = "llama",
	[DJINN_ARCH_QWEN2] = "qwen2",	  [DJINN_ARCH_QWEN3] = "qwen3",
	[DJINN_ARCH_MISTRAL] = "mistral",
};

static const char *const dtype_names[] = {
	[DJINN_DTYPE_F32] = "f32",   [DJINN_DTYPE_F16] = "f16",
	[DJINN_DTYPE_BF16] = "bf16", [DJINN_DTYPE_I32] = "i32",
	[DJINN_DTYPE_I64] = "i64",   [DJINN_DTYPE_U8] = "u8",
};

/* [A-Za-z0-9._-], 1 to 63 bytes, as djinnd names models. */

/* ADMIN_MODELS' entries, as a table or JSON; frees @es. */
static void print_models(struct djinn_admin_model *es, uint32_t nr)
{
	int wname = 4; /* "NAME" */

	for (uint32_t i = 0; i < nr; i++) {
		char name[DJINN_MODEL_NAME_MAX];
		int n = (int)strlen(wire_str(name, sizeof(name), es[i].name,
					     sizeof(es[i].name)));

		if (n > wname)
			wname = n;
	}
	print_text("%-*s %-5s %-5s %8s %7s %8s %7s %3s  %s\n", wname, "NAME",
		   "ARCH", "DTYPE", "SIZE", "LAYERS", "RING", "HOLDERS", "DEV",
		   "FINGERPRINT");
	open_json_array(NULL);
	for (uint32_t i = 0; i < nr; i++) {
		char name[DJINN_MODEL_NAME_MAX], fmt[32], str[24];
		char fp[2 * DJINN_FP_LEN + 1];

		for (int k = 0; k < DJINN_FP_LEN; k++)
			snprintf(fp + 2 * k, 3, "%02x", es[i].fp[k]);
		open_json_object(NULL);
		snprintf(fmt, sizeof(fmt), "%%-%ds", wname);
		print_string(PRINT_ANY, "name", fmt,
			     wire_str(name, sizeof(name), es[i].name,
				      sizeof(es[i].name)));
		print_string(PRINT_ANY, "arch", " %-5s",
			     enum_name(str, sizeof(str), arch_names,
				       ARRAY_SIZE(arch_names), es[i].arch));
		print_string(PRINT_ANY, "dtype", " %-5s",
			     enum_name(str, sizeof(str), dtype_names,
				       ARRAY_SIZE(dtype_names), es[i].dtype));
		print_size(PRINT_ANY, "bytes", " %8s", es[i].bytes);
		/* resident layers of all, and a streamed model's ring
		 * ("-": none, every layer is on the device) */
		snprintf(str, sizeof(str), "%u/%u", es[i].resident,
			 es[i].layers);
		print_string(PRINT_FP, NULL, " %7s", str);
		if (es[i].ring)
			print_size(PRINT_FP, NULL, " %8s", es[i].ring);
		else
			print_string(PRINT_FP, NULL, " %8s", "-");
		print_u64(PRINT_ANY, "holders", " %7" PRIu64, es[i].holders);
		print_u64(PRINT_ANY, "device", " %3" PRIu64, es[i].device);
		/* the table shows the first 12 digits, as git does */
		print_string(PRINT_JSON, "fingerprint", NULL, fp);
		fp[12] = 0;
		print_string(PRINT_FP, NULL, "  %s\n", fp);
		print_u64(PRINT_JSON, "weights", NULL, es[i].weights);
		print_u64(PRINT_JSON, "layers", NULL, es[i].layers);
		print_u64(PRINT_JSON, "resident", NULL, es[i].resident);
		print_u64(PRINT_JSON, "ring", NULL, es[i].ring);
		if (es[i].budget) /* null: placed under none */
			print_u64(PRINT_JSON, "budget", NULL, es[i].budget);
		else
			print_null(PRINT_JSON, "budget", NULL, NULL);
		print_u64(PRINT_JSON, "passes", NULL, es[i].passes);
		print_u64(PRINT_JSON, "jobs", NULL, es[i].jobs);
		close_json_object();
	}
	close_json_array();
	free(es);
}

int do_model_list(struct ctl *ctl, char **args)
{
	struct djinn_admin_model *es;
	uint32_t nr;
	int ret;

	ret = admin_list(ctl, DJINN_MSG_ADMIN_MODELS, sizeof(*es), "model",
			 (void **)&es, &nr);
	if (!ret)
		print_models(es, nr);
	return ret;
}

/* load: on every device, under --budget if given; then its lines of
 * model list */
int do_model_load(struct ctl *ctl, char **args)
{
	struct djinn_admin_model_load r = { .budget = ctl->budget,
					    .slots = ctl->slots };
	struct djinn_admin_model *es;
	uint32_t nr;
	int ret;

	memcpy(r.name, args[0], strlen(args[0])); /* checked by main() */
	if (ctl->budget_set)
		r.flags = DJINN_LOAD_BUDGET;
	ctl->timeout_ms = LOAD_TIMEOUT_MS;
	ret = admin_list_req(ctl, DJINN_MSG_ADMIN_MODEL_LOAD, &r, sizeof(r),
			     sizeof(*es), "model", (void **)&es, &nr);
	if (!ret)
		print_models(es, nr);
	return ret;
}

int do_model_evict(struct ctl *ctl, char **args)
{
	struct djinn_admin_model_evict e = { { 0 } };
	uint64_t len;
	void *buf;

	/* checked by main() */
	memcpy(e.name, args[0], strlen(args[0]));
	return admin_call(ctl, DJINN_MSG_ADMIN_MODEL_EVICT, &e, sizeof(e), 0, 0,
			  &buf, &len);
}
