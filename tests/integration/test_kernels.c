// SPDX-License-Identifier: MIT
/*
 * Client kernels over the wire on a djinnd without them: the CPU backend.
 *
 * A module upload (TENSOR_CREATE with DJINN_TENSOR_MODULE) is refused
 * with -EOPNOTSUPP and a message naming the backend, before any byte is
 * stored: the text segment, the session's tensors and the connection
 * are as they were, and the session goes on serving. Malformed module
 * uploads are -EINVAL whatever the backend. A KERNEL node whose module
 * is not one (a plain text or data tensor) is refused -EINVAL, in raw
 * frames and through libdjinn, which refuses it locally with the
 * daemon's words. tests/gpu/test_cuda_wire runs modules on a GPU.
 *
 * Client kernels are off unless the tenant is allowed them ([tenant.NAME]
 * client_kernels): this test's own tenant is; another's (uid 65534,
 * connected by a child as that uid) is refused -EPERM, naming the key,
 * for an upload and for a graph with a KERNEL node, before anything else
 * is looked at. Without root that one skips.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <djinn/djinn.h>

#include "daemon.h"
#include "fixture.h"

#define NO_KERNELS "client kernels need a CUDA device; this djinnd runs on cpu"

/* The fixture's daemon and admin socket, and a session on its own
 * connection. */
struct kfx {
	struct fx fx;
	int fd;
	uint64_t sid;
};

static void *xmalloc(size_t n)
{
	void *p = malloc(n);

	if (!p)
		fail_msg("out of memory");
	return p;
}

/* TENSOR_CREATE's payload: the struct, then @len bytes of @data. */
static void *create_req(const struct djinn_tensor_create *cr, const void *data,
			size_t len, size_t *plen)
{
	uint8_t *p = xmalloc(sizeof(*cr) + len);

	memcpy(p, cr, sizeof(*cr));
	memcpy(p + sizeof(*cr), data, len);
	*plen = sizeof(*cr) + len;
	return p;
}

/* A text tensor of @len bytes of @data, module or not (@flags). */
static struct djinn_tensor_create text_create(const void *data, size_t len,
					      uint32_t flags)
{
	struct djinn_tensor_create cr = {
		.desc = { .dtype = DJINN_DTYPE_U8, .ndim = 1, .dims = { len } },
		.segment = DJINN_SEG_TEXT,
		.flags = flags,
	};

	sha256(data, len, cr.fp);
	return cr;
}

static uint64_t create_ok(struct kfx *fx, const struct djinn_tensor_create *cr,
			  const void *data, size_t len)
{
	struct djinn_tensor_resp tr;
	struct dj_resp r;
	size_t plen;
	void *p = create_req(cr, data, len, &plen);

	call_ok(fx->fd, DJINN_MSG_TENSOR_CREATE, fx->sid, p, plen, &r,
		sizeof(tr));
	memcpy(&tr, r.data, sizeof(tr));
	dj_resp_free(&r);
	free(p);
	return tr.handle;
}

static void create_err(struct kfx *fx, const struct djinn_tensor_create *cr,
		       const void *data, size_t len, int err,
		       const char *phrase)
{
	size_t plen;
	void *p = create_req(cr, data, len, &plen);

	call_err(fx->fd, DJINN_MSG_TENSOR_CREATE, fx->sid, p, plen, err,
		 phrase);
	free(p);
}

/* The session's tensor count, from the admin socket. */
static uint64_t tensors_now(struct kfx *fx)
{
	return session_entry(&fx->fx, fx->sid).tensors;
}

static int kfx_setup(void **state)
{
	struct djinn_session_open so = { .tenant = "kernels", .priority = 4 };
	struct djinn_session_resp sr;
	struct kfx *fx = calloc(1, sizeof(*fx));
	struct dj_resp r;

	char allow[64];

	/* this process's tenant may run client kernels; no one else */
	snprintf(allow, sizeof(allow), "tenant.uid:%u.client_kernels=yes",
		 (unsigned int)getuid());
	if (!fx || djd_start_set(&fx->fx.d, "64M", 10000, allow))
		return -1;
	fx->fd = dj_connect(fx->fx.d.sock);
	fx->fx.adm = dj_connect(fx->fx.d.admin);
	if (fx->fd < 0 || fx->fx.adm < 0)
		return -1;
	if (dj_call(fx->fd, DJINN_MSG_SESSION_OPEN, 0, &so, sizeof(so), &r) !=
		    1 ||
	    r.error || r.len != sizeof(sr))
		return -1;
	memcpy(&sr, r.data, sizeof(sr));
	dj_resp_free(&r);
	fx->sid = sr.session_id;
	*state = fx;
	return 0;
}

static int kfx_teardown(void **state)
{
	struct kfx *fx = *state;
	int ret;

	close(fx->fd);
	close(fx->fx.adm);
	ret = djd_stop(&fx->fx.d, 10000);
	free(fx);
	return ret;
}

/* Bytes that would be a module's (the CPU backend never reads them). */
static uint8_t *module_bytes(size_t len)
{
	uint8_t *m = xmalloc(len);

	for (size_t i = 0; i < len; i++)
		m[i] = (uint8_t)(i * 131 + 7);
	return m;
}

static void test_module_refused(void **state)
{
	struct kfx *fx = *state;
	/* the daemon skips up to 1 MiB of a refused frame's payload */
	const size_t big = 900 << 10, small = 4000;
	uint8_t *m = module_bytes(big), got[64];
	struct djinn_admin_vmu before, after;
	struct djinn_tensor_create cr;
	struct djinn_tensor_io io = { .len = sizeof(got) };
	uint64_t t0 = tensors_now(fx);

	before = vmu_now(&fx->fx);
	/* a module, small and larger: refused before a byte is stored, and
	 * the rest of the frame is skipped: the connection stays in step */
	cr = text_create(m, small, DJINN_TENSOR_MODULE);
	create_err(fx, &cr, m, small, -EOPNOTSUPP, NO_KERNELS);
	cr = text_create(m, big, DJINN_TENSOR_MODULE);
	create_err(fx, &cr, m, big, -EOPNOTSUPP, NO_KERNELS);
	after = vmu_now(&fx->fx);
	assert_int_equal(after.seg[0].used, before.seg[0].used);
	assert_int_equal(after.seg[0].entries, before.seg[0].entries);
	assert_int_equal(after.text_cached, before.text_cached);
	assert_int_equal(tensors_now(fx), t0);

	/* the session still serves, on the same connection: the same bytes
	 * as plain text are stored and read back */
	cr = text_create(m, small, 0);
	io.handle = create_ok(fx, &cr, m, small);
	{
		struct dj_resp r;

		call_ok(fx->fd, DJINN_MSG_TENSOR_READ, fx->sid, &io, sizeof(io),
			&r, sizeof(got));
		assert_memory_equal(r.data, m, sizeof(got));
		dj_resp_free(&r);
	}
	assert_int_equal(tensors_now(fx), t0 + 1);
	after = vmu_now(&fx->fx);
	assert_int_equal(after.seg[0].entries, before.seg[0].entries + 1);
	free(m);
}

static void test_module_malformed(void **state)
{
	struct kfx *fx = *state;
	uint8_t *m = module_bytes(256);
	struct djinn_tensor_create cr;
	uint64_t t0 = tensors_now(fx);

	/* a module is text, u8, one dim, whatever the backend */
	cr = text_create(m, 256, DJINN_TENSOR_MODULE);
	cr.segment = DJINN_SEG_DATA;
	memset(cr.fp, 0, sizeof(cr.fp));
	create_err(
		fx, &cr, m, 256, -EINVAL,
		"(DJINN_TENSOR_MODULE) is text, u8, one dim: not data, u8, 1 dims");
	cr = text_create(m, 256, DJINN_TENSOR_MODULE);
	cr.desc.dtype = DJINN_DTYPE_F32;
	cr.desc.dims[0] = 64;
	create_err(
		fx, &cr, m, 256, -EINVAL,
		"(DJINN_TENSOR_MODULE) is text, u8, one dim: not text, f32, 1 dims");
	cr = text_create(m, 256, DJINN_TENSOR_MODULE);
	cr.desc.ndim = 2;
	cr.desc.dims[0] = 16;
	cr.desc.dims[1] = 16;
	create_err(
		fx, &cr, m, 256, -EINVAL,
		"(DJINN_TENSOR_MODULE) is text, u8, one dim: not text, u8, 2 dims");
	/* a flag no one knows */
	cr = text_create(m, 256, DJINN_TENSOR_MODULE | (1u << 1));
	create_err(fx, &cr, m, 256, -EINVAL, "unknown flags");
	cr = text_create(m, 256, 1u << 31);
	create_err(fx, &cr, m, 256, -EINVAL, "unknown flags");
	assert_int_equal(tensors_now(fx), t0);
	free(m);
}

/* GRAPH_SUBMIT of one KERNEL node on inputs @h[2] (module, argument). */
static void kernel_graph_err_is(struct kfx *fx, const uint64_t h[2], int err,
				const char *phrase)
{
	struct {
		struct djinn_graph g;
		struct djinn_ref in[2];
		struct djinn_node n;
		uint32_t out[2];
	} p = {
		.g = { .nr_inputs = 2, .nr_nodes = 1, .nr_outputs = 1 },
		.in = { { .id = h[0] }, { .id = h[1] } },
		.n = { .op = DJINN_GOP_KERNEL,
		       .nr_inputs = 2,
		       .inputs = { 0, 1 } },
	};

	p.n.params.kernel = (struct djinn_p_kernel){
		.grid = { 1, 1, 1 },
		.block = { 64, 1, 1 },
		.out_like = 1,
		.name_hash = 0x1234,
	};
	call_err(fx->fd, DJINN_MSG_GRAPH_SUBMIT, fx->sid, &p, sizeof(p), err,
		 phrase);
}

static void kernel_graph_err(struct kfx *fx, const uint64_t h[2],
			     const char *phrase)
{
	kernel_graph_err_is(fx, h, -EINVAL, phrase);
}

static void test_kernel_not_module(void **state)
{
	struct kfx *fx = *state;
	uint8_t *m = module_bytes(512);
	float x[16] = { 1, 2, 3 };
	struct djinn_tensor_create cr, dc = {
		.desc = { .dtype = DJINN_DTYPE_F32, .ndim = 1, .dims = { 16 } },
	};
	uint64_t text, data, h[2];

	cr = text_create(m, 512, 0);
	text = create_ok(fx, &cr, m, 512);
	data = create_ok(fx, &dc, x, sizeof(x));

	/* a plain text tensor, a data tensor: neither is a module */
	h[0] = text;
	h[1] = data;
	kernel_graph_err(fx, h,
			 "node 0 (kernel): input 0 is not a module (a graph "
			 "input uploaded with DJINN_TENSOR_MODULE)");
	h[0] = data;
	kernel_graph_err(fx, h, "node 0 (kernel): input 0 is not a module");

	/* and nothing ran: the session serves a graph as before */
	{
		struct {
			struct djinn_graph g;
			struct djinn_ref in[1];
			struct djinn_node n;
			uint32_t out[2];
		} p = {
			.g = { .nr_inputs = 1, .nr_nodes = 1, .nr_outputs = 1 },
			.in = { { .id = data } },
			.n = { .op = DJINN_GOP_RELU, .nr_inputs = 1 },
		};
		struct djinn_graph_resp gr;
		struct dj_resp r;

		call_ok(fx->fd, DJINN_MSG_GRAPH_SUBMIT, fx->sid, &p, sizeof(p),
			&r, sizeof(gr) + sizeof(struct djinn_tensor_resp));
		memcpy(&gr, r.data, sizeof(gr));
		assert_int_equal(gr.nr_outputs, 1);
		dj_resp_free(&r);
	}
	free(m);
}

/* The same through libdjinn: the upload's errno and words, and a KERNEL
 * node on a tensor that is no module refused before it is sent. */
static void test_libdjinn(void **state)
{
	struct kfx *fx = *state;
	static const struct djinn_kernel_launch launch = {
		.grid = { 1, 1, 1 },
		.block = { 32, 1, 1 },
	};
	struct djinn_tensor_desc d = { .dtype = DJINN_DTYPE_F32,
				       .ndim = 1,
				       .dims = { 8 } };
	char addr[sizeof(fx->fx.d.sock) + 8];
	struct djinn_graph_builder *g;
	struct djinn_session *s;
	struct djinn_conn *conn;
	struct djinn_tensor *mod = NULL, *x;
	struct djinn_request *req = NULL;
	uint8_t *m = module_bytes(1000);
	float v[8] = { 0 };
	int xv, tv, args[1];

	snprintf(addr, sizeof(addr), "unix:%s", fx->fx.d.sock);
	assert_int_equal(djinn_connect(addr, &conn), 0);
	assert_int_equal(djinn_session_open(conn, NULL, &s), 0);

	assert_int_equal(djinn_module_upload(s, m, 1000, &mod), -EOPNOTSUPP);
	assert_null(mod);
	assert_non_null(strstr(djinn_last_error(), NO_KERNELS));
	assert_int_equal(djinn_module_upload(s, m, 0, &mod), -EINVAL);
	assert_int_equal(djinn_module_upload(s, NULL, 10, &mod), -EINVAL);

	/* the session serves on: a tensor, and a plain text tensor made a
	 * KERNEL node's module is refused when the graph is submitted */
	assert_int_equal(djinn_tensor_upload(s, &d, v, DJINN_SEG_DATA, &x), 0);
	{
		struct djinn_tensor_desc td = { .dtype = DJINN_DTYPE_U8,
						.ndim = 1,
						.dims = { 1000 } };
		struct djinn_tensor *t;

		assert_int_equal(
			djinn_tensor_upload(s, &td, m, DJINN_SEG_TEXT, &t), 0);
		assert_int_equal(djinn_graph_new(s, &g), 0);
		tv = djinn_graph_input(g, t);
		xv = djinn_graph_input(g, x);
		args[0] = xv;
		assert_true(djinn_op_kernel(g, tv, "add_one_to", args, 1,
					    &launch) >= 0);
		assert_int_equal(djinn_graph_output(g, 2), 0);
		assert_int_equal(djinn_submit(g, &req), -EINVAL);
		assert_non_null(strstr(djinn_graph_error(g),
				       "node 0 (kernel): input 0 is not a "
				       "module"));
		/* bad calls are refused at once */
		assert_int_equal(djinn_op_kernel(g, tv, "", args, 1, &launch),
				 -EINVAL);
		assert_int_equal(djinn_op_kernel(g, tv, "k", args, 0, &launch),
				 -EINVAL);
		assert_int_equal(djinn_op_kernel(g, tv, "k", args, 4, &launch),
				 -EINVAL);
		{
			struct djinn_kernel_launch l = launch;

			l.out_like = 1;
			assert_int_equal(djinn_op_kernel(g, tv, "k", args, 1,
							 &l),
					 -EINVAL);
			assert_non_null(strstr(djinn_graph_error(g),
					       "out_like 1 of 1 arguments"));
		}
		assert_int_equal(djinn_op_kernel(g, -E2BIG, "k", args, 1,
						 &launch),
				 -E2BIG);
		djinn_graph_free(g);
		assert_int_equal(djinn_tensor_release(t), 0);
	}
	assert_int_equal(djinn_tensor_download(x, 0, sizeof(v), v), 0);
	assert_int_equal(djinn_tensor_release(x), 0);
	assert_int_equal(djinn_session_close(s), 0);
	djinn_disconnect(conn);
	free(m);
}

/* Another tenant: refused before the backend or the bytes are looked
 * at, and the session serves on. */
static void test_kernels_not_allowed(void **state)
{
	struct kfx *fx = *state, other = *fx;
	uint8_t *m = module_bytes(512);
	const char *why = "client kernels are off for tenant uid:65534 "
			  "([tenant.uid:65534] client_kernels = yes in "
			  "djinnd.conf)";
	struct djinn_tensor_create cr = text_create(m, 512, 0);
	struct djinn_admin_vmu before = vmu_now(&fx->fx);
	uint64_t h[2];

	other.fd = dj_connect_as(fx->fx.d.sock, 65534, 65534, NULL, 0);
	if (other.fd == -EPERM)
		skip();
	assert_true(other.fd >= 0);
	hello_at(__LINE__, other.fd);
	other.sid = open_session(other.fd, "kernels");
	cr.flags = DJINN_TENSOR_MODULE;
	create_err(&other, &cr, m, 512, -EPERM, why);
	assert_int_equal(vmu_now(&fx->fx).seg[0].used, before.seg[0].used);
	/* a KERNEL node, whatever its inputs are */
	cr.flags = 0;
	h[0] = h[1] = create_ok(&other, &cr, m, 512);
	kernel_graph_err_is(&other, h, -EPERM, why);
	tensor_release(other.fd, other.sid, h[0]);
	close_session(other.fd, other.sid);
	close(other.fd);
	/* this tenant's: the backend's answer, as before */
	cr.flags = DJINN_TENSOR_MODULE;
	create_err(fx, &cr, m, 512, -EOPNOTSUPP, NO_KERNELS);
	free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_module_refused, kfx_setup,
						kfx_teardown),
		cmocka_unit_test_setup_teardown(test_module_malformed,
						kfx_setup, kfx_teardown),
		cmocka_unit_test_setup_teardown(test_kernel_not_module,
						kfx_setup, kfx_teardown),
		cmocka_unit_test_setup_teardown(test_libdjinn, kfx_setup,
						kfx_teardown),
		cmocka_unit_test_setup_teardown(test_kernels_not_allowed,
						kfx_setup, kfx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
