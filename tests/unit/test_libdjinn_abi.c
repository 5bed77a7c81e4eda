// SPDX-License-Identifier: MIT
/*
 * libdjinn.so's ABI: every public function is exported at version
 * DJINN_0.1, or at the version that added it, and nothing else is, in particular not the lib/ code it
 * builds in (djinn_graph_parse() and friends share the prefix) nor its
 * internal __djinn_* functions; a function whose struct grew has its
 * newer version as the default and keeps the older one. Loads the
 * library that sits two levels above this binary ($(BUILD)/libdjinn.so.0)
 * with dlopen().
 */
#include <dlfcn.h>
#include <limits.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "array_size.h"

/* Every function of include/djinn/djinn.h. */
static const char *const public[] = {
	"djinn_set_log",
	"djinn_connect",
	"djinn_disconnect",
	"djinn_conn_server_info",
	"djinn_conn_ping",
	"djinn_conn_stats",
	"djinn_session_open",
	"djinn_session_attach",
	"djinn_session_close",
	"djinn_session_info",
	"djinn_session_heartbeat",
	"djinn_signal",
	"djinn_tensor_upload",
	"djinn_tensor_download",
	"djinn_tensor_write",
	"djinn_tensor_release",
	"djinn_tensor_desc",
	"djinn_tensor_info",
	"djinn_graph_new",
	"djinn_graph_free",
	"djinn_graph_input",
	"djinn_graph_input_result",
	"djinn_graph_annotate",
	"djinn_graph_node",
	"djinn_graph_output",
	"djinn_graph_error",
	"djinn_op_matmul",
	"djinn_op_add",
	"djinn_op_sub",
	"djinn_op_mul",
	"djinn_op_div",
	"djinn_op_scale",
	"djinn_op_gelu",
	"djinn_op_relu",
	"djinn_op_silu",
	"djinn_op_softmax",
	"djinn_op_layernorm",
	"djinn_op_rmsnorm",
	"djinn_op_embedding",
	"djinn_op_reshape",
	"djinn_op_permute",
	"djinn_op_slice",
	"djinn_op_concat",
	"djinn_op_attention",
	"djinn_op_argmax",
	"djinn_submit",
	"djinn_wait",
	"djinn_poll",
	"djinn_request_error",
	"djinn_request_results",
	"djinn_request_info",
	"djinn_request_free",
	"djinn_result_desc",
	"djinn_result_read",
	"djinn_result_map",
	"djinn_result_unmap",
	"djinn_result_release",
};

/* lib/graph.h, lib/rundir.h and libdjinn/internal.h: built in, not
 * exported. */
static const char *const hidden[] = {
	"djinn_graph_parse",
	"djinn_graph_infer",
	"djinn_desc_check",
	"djinn_dtype_size",
	"djinn_dtype_name",
	"djinn_op_name",
	"__djinn_log",
	"__djinn_call_send",
	"__djinn_addr_parse",
	"__djinn_addr_name",
	"djinnd_run_dir",
	"djinnd_socket_default",
	"djinnd_socket_find",
	"__djinn_graph_encode",
	"__djinn_conn_start",
	"__djinn_sha256",
	"__djinn_model_info_v0_1",
};

/*
 * Functions with a newer version: the default, and the older one kept
 * for programs built before (libdjinn.map).
 */
static const struct {
	const char *name, *version, *older;
} grown[] = {
	/* struct djinn_model_info grew: streamed models */
	{ "djinn_model_info", "DJINN_0.2", "DJINN_0.1" },
};

/* Functions added after DJINN_0.1, at the version that added them. */
static const struct {
	const char *name, *version;
} added[] = {
	{ "djinn_ctx_truncate", "DJINN_0.3" },
	{ "djinn_ctx_signal", "DJINN_0.3" },
	{ "djinn_session_open_as", "DJINN_0.3" },
	{ "djinn_status", "DJINN_0.4" },
	{ "djinn_conn_addr", "DJINN_0.4" },
	{ "djinn_op_sample", "DJINN_0.5" },
};

static void *lib;

static int load(void **state)
{
	char exe[PATH_MAX], path[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n <= 0)
		return -1;
	exe[n] = '\0';
	/* $(BUILD)/tests/unit/test_libdjinn_abi -> $(BUILD)/libdjinn.so.0 */
	snprintf(path, sizeof(path), "%s/../../libdjinn.so.0", dirname(exe));
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
		return -1;
	}
	return 0;
}

static int unload(void **state)
{
	return lib ? dlclose(lib) : 0;
}

static void test_exported(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(public); i++) {
		if (!dlsym(lib, public[i]))
			fail_msg("%s: not exported", public[i]);
		if (!dlvsym(lib, public[i], "DJINN_0.1"))
			fail_msg("%s: not at version DJINN_0.1", public[i]);
	}
}

static void test_hidden(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(hidden); i++)
		if (dlsym(lib, hidden[i]))
			fail_msg("%s: exported", hidden[i]);
}

static void test_added(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(added); i++) {
		void *now = dlvsym(lib, added[i].name, added[i].version);

		if (!now)
			fail_msg("%s: not at version %s", added[i].name,
				 added[i].version);
		if (dlvsym(lib, added[i].name, "DJINN_0.1"))
			fail_msg("%s: at DJINN_0.1 too", added[i].name);
		if (dlsym(lib, added[i].name) != now)
			fail_msg("%s: %s is not the default", added[i].name,
				 added[i].version);
	}
}

static void test_grown(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(grown); i++) {
		void *now = dlvsym(lib, grown[i].name, grown[i].version);
		void *old = dlvsym(lib, grown[i].name, grown[i].older);

		if (!now)
			fail_msg("%s: not at version %s", grown[i].name,
				 grown[i].version);
		if (!old || old == now)
			fail_msg("%s: no version %s of its own", grown[i].name,
				 grown[i].older);
		if (dlsym(lib, grown[i].name) != now)
			fail_msg("%s: %s is not the default", grown[i].name,
				 grown[i].version);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exported),
		cmocka_unit_test(test_hidden),
		cmocka_unit_test(test_added),
		cmocka_unit_test(test_grown),
	};

	return cmocka_run_group_tests(tests, load, unload);
}
