// SPDX-License-Identifier: MIT
/*
 * Tensors: uploads (text deduplicated by SHA-256), byte-range reads and
 * writes, release.
 *
 * Frames are limited to the daemon's max_payload (from HELLO): a data
 * upload, a write or a read larger than that goes in several frames.
 * A text upload is one TENSOR_CREATE, since the daemon hashes it whole.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "internal.h"

int __djinn_sha256(const void *data, size_t len, uint8_t fp[DJINN_FP_LEN])
{
	unsigned int n = 0;

	if (!EVP_Digest(data, len, fp, &n, EVP_sha256(), NULL) ||
	    n != DJINN_FP_LEN)
		return -EIO;
	return 0;
}

int __djinn_tensor_resp_check(const struct djinn_tensor_resp *r,
			      const struct djinn_tensor_desc *desc)
{
	if (r->__reserved || r->flags & ~DJINN_TENSOR_DEDUP ||
	    memcmp(&r->desc, desc, sizeof(*desc)))
		return -EPROTO;
	return 0;
}

struct djinn_tensor *__djinn_tensor_new(struct djinn_session *s,
					const struct djinn_tensor_desc *desc,
					enum djinn_segment seg, uint64_t handle)
{
	struct djinn_tensor *t = calloc(1, sizeof(*t));
	uint64_t bytes = 0;

	if (!t)
		return NULL;
	djinn_desc_check(desc, NULL, &bytes);
	t->s = s;
	t->desc = *desc;
	t->info.handle = handle;
	t->info.bytes = bytes;
	t->info.segment = seg;
	pthread_mutex_lock(&s->conn->lock);
	list_add_tail(&t->node, &s->tensors);
	pthread_mutex_unlock(&s->conn->lock);
	return t;
}

/* Bytes of payload a frame may carry after a struct of @hdr bytes. */
static uint64_t frame_room(struct djinn_conn *conn, size_t hdr)
{
	uint64_t max = conn->server.max_payload;

	return (max ? max : DJINN_MAX_PAYLOAD) - hdr;
}

static bool range_bad(uint64_t offset, uint64_t len, uint64_t bytes)
{
	return offset > bytes || len > bytes - offset;
}

/* The answer @r to a create or lookup of @desc: well-formed or -EPROTO. */
static int tensor_resp(struct djinn_conn *conn, uint16_t type,
		       const struct djinn_tensor_resp *r,
		       const struct djinn_tensor_desc *desc)
{
	if (!__djinn_tensor_resp_check(r, desc))
		return 0;
	__djinn_conn_fail(conn, -EPROTO,
			  "%s answer: flags %#x, reserved %#x, or a desc "
			  "other than the one asked for",
			  __djinn_msg_str(type), r->flags, r->__reserved);
	return -EPROTO;
}

static int send_release(struct djinn_conn *conn, uint64_t session_id,
			uint64_t handle)
{
	struct djinn_tensor_release p = { .handle = handle };
	struct iovec iov = { &p, sizeof(p) };

	return __djinn_call_sync(conn, DJINN_MSG_TENSOR_RELEASE, session_id,
				 &iov, 1, NULL, 0);
}

static int write_range(struct djinn_conn *conn, uint64_t session_id,
		       uint64_t handle, uint64_t offset, uint64_t len,
		       const void *buf)
{
	uint64_t room = frame_room(conn, sizeof(struct djinn_tensor_io));

	for (uint64_t done = 0; done < len;) {
		uint64_t n = min_t(uint64_t, len - done, room);
		struct djinn_tensor_io io = { handle, offset + done, n };
		struct iovec iov[2] = {
			{ &io, sizeof(io) },
			{ (uint8_t *)buf + done, n },
		};
		int ret = __djinn_call_sync(conn, DJINN_MSG_TENSOR_WRITE,
					    session_id, iov, 2, NULL, 0);

		if (ret)
			return ret;
		done += n;
	}
	return 0;
}

int __djinn_read(struct djinn_conn *conn, uint64_t session_id, uint64_t handle,
		 uint64_t offset, uint64_t len, void *buf)
{
	uint64_t room = frame_room(conn, 0);

	for (uint64_t done = 0; done < len;) {
		uint64_t n = min_t(uint64_t, len - done, room);
		struct djinn_tensor_io io = { handle, offset + done, n };
		struct iovec iov = { &io, sizeof(io) };
		int ret = __djinn_call_sync(conn, DJINN_MSG_TENSOR_READ,
					    session_id, &iov, 1,
					    (uint8_t *)buf + done, n);

		if (ret)
			return ret;
		done += n;
	}
	return 0;
}

/* Text: the fingerprint first, the bytes only if the daemon lacks them. */
static int upload_text(struct djinn_session *s,
		       const struct djinn_tensor_desc *desc, const void *data,
		       uint64_t bytes, struct djinn_tensor_info *info)
{
	struct djinn_text_lookup lk = { .desc = *desc };
	struct djinn_tensor_create cr = { .desc = *desc,
					  .segment = DJINN_SEG_TEXT };
	struct djinn_tensor_resp r;
	struct iovec iov[2];
	uint16_t type = DJINN_MSG_TEXT_LOOKUP;
	int ret;

	ret = __djinn_sha256(data, bytes, info->fp);
	if (ret)
		return ret;
	memcpy(lk.fp, info->fp, sizeof(lk.fp));
	iov[0] = (struct iovec){ &lk, sizeof(lk) };
	ret = __djinn_call_sync(s->conn, type, s->id, iov, 1, &r, sizeof(r));
	if (ret == -ENOENT) {
		if (bytes > frame_room(s->conn, sizeof(cr)))
			return -EMSGSIZE;
		type = DJINN_MSG_TENSOR_CREATE;
		memcpy(cr.fp, info->fp, sizeof(cr.fp));
		iov[0] = (struct iovec){ &cr, sizeof(cr) };
		iov[1] = (struct iovec){ (void *)data, bytes };
		ret = __djinn_call_sync(s->conn, type, s->id, iov, 2, &r,
					sizeof(r));
	}
	if (!ret)
		ret = tensor_resp(s->conn, type, &r, desc);
	if (ret)
		return ret;
	info->handle = r.handle;
	info->flags = r.flags;
	return 0;
}

/* Data: as many bytes as fit with the create, then writes. */
static int upload_data(struct djinn_session *s,
		       const struct djinn_tensor_desc *desc, const void *data,
		       uint64_t bytes, struct djinn_tensor_info *info)
{
	struct djinn_tensor_create cr = { .desc = *desc,
					  .segment = DJINN_SEG_DATA };
	uint64_t first = 0;
	struct djinn_tensor_resp r;
	struct iovec iov[2];
	int ret;

	if (data)
		first = min_t(uint64_t, bytes, frame_room(s->conn, sizeof(cr)));
	iov[0] = (struct iovec){ &cr, sizeof(cr) };
	iov[1] = (struct iovec){ (void *)data, first };
	ret = __djinn_call_sync(s->conn, DJINN_MSG_TENSOR_CREATE, s->id, iov, 2,
				&r, sizeof(r));
	if (!ret)
		ret = tensor_resp(s->conn, DJINN_MSG_TENSOR_CREATE, &r, desc);
	if (ret)
		return ret;
	info->handle = r.handle;
	info->flags = r.flags;
	if (first == bytes || !data)
		return 0;

	ret = write_range(s->conn, s->id, r.handle, first, bytes - first,
			  (const uint8_t *)data + first);
	if (ret)
		send_release(s->conn, s->id, r.handle);
	return ret;
}

int djinn_tensor_upload(struct djinn_session *s,
			const struct djinn_tensor_desc *desc, const void *data,
			enum djinn_segment seg, struct djinn_tensor **out)
{
	struct djinn_tensor_info info = { .segment = seg };
	struct djinn_tensor *t;
	uint64_t bytes;
	int ret;

	if (!s || !desc || !out)
		return -EINVAL;
	ret = djinn_desc_check(desc, NULL, &bytes);
	if (ret)
		return ret;
	if (seg == DJINN_SEG_TEXT) {
		if (!data && bytes)
			return -EINVAL;
		ret = upload_text(s, desc, data, bytes, &info);
	} else if (seg == DJINN_SEG_DATA) {
		ret = upload_data(s, desc, data, bytes, &info);
	} else {
		return -EINVAL;
	}
	if (ret)
		return ret;

	t = __djinn_tensor_new(s, desc, seg, info.handle);
	if (!t) {
		send_release(s->conn, s->id, info.handle);
		return -ENOMEM;
	}
	t->info = info;
	t->info.bytes = bytes;
	*out = t;
	return 0;
}

int djinn_tensor_download(struct djinn_tensor *t, uint64_t offset, uint64_t len,
			  void *buf)
{
	if (!t || (!buf && len) || range_bad(offset, len, t->info.bytes))
		return -EINVAL;
	return __djinn_read(t->s->conn, t->s->id, t->info.handle, offset, len,
			    buf);
}

int djinn_tensor_write(struct djinn_tensor *t, uint64_t offset, uint64_t len,
		       const void *buf)
{
	if (!t || (!buf && len) || range_bad(offset, len, t->info.bytes))
		return -EINVAL;
	return write_range(t->s->conn, t->s->id, t->info.handle, offset, len,
			   buf);
}

int djinn_tensor_release(struct djinn_tensor *t)
{
	struct djinn_conn *conn;
	int ret;

	if (!t)
		return 0;
	conn = t->s->conn;
	ret = send_release(conn, t->s->id, t->info.handle);
	pthread_mutex_lock(&conn->lock);
	list_del_init(&t->node);
	pthread_mutex_unlock(&conn->lock);
	free(t);
	return ret;
}

int djinn_module_upload(struct djinn_session *s, const void *image, size_t len,
			struct djinn_tensor **out)
{
	struct djinn_tensor_create cr = {
		.desc = { .dtype = DJINN_DTYPE_U8, .ndim = 1, .dims = { len } },
		.segment = DJINN_SEG_TEXT,
		.flags = DJINN_TENSOR_MODULE,
	};
	struct djinn_tensor_info info = { .segment = DJINN_SEG_TEXT };
	struct djinn_tensor_resp r;
	struct djinn_tensor *t;
	struct iovec iov[2];
	int ret;

	if (!s || !image || !len || !out)
		return -EINVAL;
	if (len > frame_room(s->conn, sizeof(cr)))
		return -EMSGSIZE;
	ret = __djinn_sha256(image, len, info.fp);
	if (ret)
		return ret;
	memcpy(cr.fp, info.fp, sizeof(cr.fp));
	iov[0] = (struct iovec){ &cr, sizeof(cr) };
	iov[1] = (struct iovec){ (void *)image, len };
	ret = __djinn_call_sync(s->conn, DJINN_MSG_TENSOR_CREATE, s->id, iov, 2,
				&r, sizeof(r));
	if (!ret)
		ret = tensor_resp(s->conn, DJINN_MSG_TENSOR_CREATE, &r,
				  &cr.desc);
	if (ret)
		return ret;
	t = __djinn_tensor_new(s, &cr.desc, DJINN_SEG_TEXT, r.handle);
	if (!t) {
		send_release(s->conn, s->id, r.handle);
		return -ENOMEM;
	}
	info.handle = r.handle;
	info.flags = r.flags;
	info.bytes = len;
	t->info = info;
	t->module = true;
	*out = t;
	return 0;
}

const struct djinn_tensor_desc *djinn_tensor_desc(const struct djinn_tensor *t)
{
	return t ? &t->desc : NULL;
}

int djinn_tensor_info(const struct djinn_tensor *t,
		      struct djinn_tensor_info *info)
{
	if (!t || !info)
		return -EINVAL;
	*info = t->info;
	return 0;
}
