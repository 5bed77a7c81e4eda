// SPDX-License-Identifier: MIT
/*
 * The tensor service (svc/svc.h): what an allocation's refusal says, the
 * memory jobs of a transfer, and client modules (DJINN_TENSOR_MODULE).
 * The bytes themselves stream between the socket and the device in
 * net/msg_tensor.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "backend/backend.h"
#include "svc/svc.h"

int svc_alloc_error(struct session *s, int err, uint64_t bytes, char *msg,
		    size_t msglen)
{
	struct vmu *vmu = s->dev->vmu;
	char why[VMU_MSG_LEN];
	struct vmu_usage u;

	if (err == -EDQUOT && !vmu_tenant_usage(vmu, s->tenant, &u) &&
	    u.quota) {
		snprintf(msg, msglen,
			 "cannot allocate %llu bytes: tenant %s holds %llu "
			 "bytes of data and %llu of text on %s, its quota %llu "
			 "(tenant.%s.memory)",
			 (unsigned long long)bytes, s->tenant,
			 (unsigned long long)u.data_bytes,
			 (unsigned long long)u.text_bytes, s->dev->name,
			 (unsigned long long)u.quota, s->tenant);
		return err;
	}
	/* Bigger than the device (the VMU's -E2BIG) is refused like any
	 * allocation that cannot fit. */
	if (err == -E2BIG)
		err = -ENOMEM;
	vmu_admit_check(vmu, vmu_round(vmu, bytes), why, sizeof(why));
	snprintf(msg, msglen, "cannot allocate %llu bytes: %.*s",
		 (unsigned long long)bytes,
		 (int)(msglen > 64 ? msglen - 64 : 0), why);
	return err;
}

struct exec_job *svc_mem_job(struct session *s, uint64_t request_id,
			     const struct exec_mem *m)
{
	struct exec_job *job = calloc(1, sizeof(*job));

	if (!job)
		return NULL;
	job->lane = SCHED_MEM;
	job->run = svc_mem_run;
	job->mem = *m;
	job->request_id = request_id;
	job->s = s;
	job->se = &s->se;
	session_ref(s);
	s->mem_waits++;
	return job;
}

int svc_module_check(struct session_table *t, struct session *s,
		     const struct djinn_tensor_create *r, char *msg,
		     size_t msglen)
{
	struct backend *b = s->dev->backend;
	int ret;

	if (r->segment != DJINN_SEG_TEXT || r->desc.dtype != DJINN_DTYPE_U8 ||
	    r->desc.ndim != 1) {
		snprintf(msg, msglen,
			 "flags: a module (DJINN_TENSOR_MODULE) is text, u8, "
			 "one dim: not %s, %s, %u dims",
			 r->segment == DJINN_SEG_TEXT ? "text" : "data",
			 djinn_dtype_name(r->desc.dtype), r->desc.ndim);
		return -EINVAL;
	}
	ret = session_kernels_check(t, s, msg, msglen);
	if (ret)
		return ret;
	if (!b->ops->module_load || !b->ops->run_kernel) {
		snprintf(msg, msglen, BACKEND_NO_KERNELS, b->name);
		return -EOPNOTSUPP;
	}
	return 0;
}

int svc_module_load(struct session *s, struct vmu_text *text,
		    const uint8_t fp[DJINN_FP_LEN], bool created, char *msg,
		    size_t msglen)
{
	struct backend *b = s->dev->backend;
	struct vmu_provider *p = b->provider;
	uint64_t len = vmu_text_size(text);
	void *image = malloc(len);
	int ret;

	if (!image) {
		ret = -ENOMEM;
		snprintf(msg, msglen, "out of memory");
	} else {
		ret = p->ops->copy_dtoh(p, image, vmu_text_addr(text), len);
		if (ret)
			snprintf(msg, msglen,
				 "cannot read the module back: error %d", ret);
	}
	if (!ret)
		ret = b->ops->module_load(b, fp, image, len, msg, msglen);
	free(image);
	if (!ret)
		return 0;
	vmu_text_put(s->vs, text);
	if (created)
		vmu_text_evict(s->dev->vmu, fp, vmu_session_tenant(s->vs));
	return ret;
}
