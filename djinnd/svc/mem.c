// SPDX-License-Identifier: MIT
/*
 * A transfer's memory, on a memory executor's thread (svc/svc.h): a
 * new region mapped and zeroed past what the client sends, or an
 * existing one swapped back in, left pinned for the transfer the I/O
 * thread runs next; for a read of a device whose memory the I/O thread
 * cannot touch, the range copied to a staging buffer (exec/stage.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "svc/svc.h"

/* Copy @m's staged range of the bytes at @addr to its staging buffer:
 * the one it brings (a read in parts, its next part), else one from the
 * pool, of @m->staged_size bytes if it says. A buffer it brings stays in
 * @m on failure, its owner's to give back. */
static int stage(const struct exec_env *env, struct exec_mem *m, uint64_t addr)
{
	struct vmu_provider *prov = env->b->provider;
	bool got = !m->staged;
	int ret;

	if (got) {
		ret = stage_get(env->stage,
				m->staged_size ? m->staged_size : m->stage_len,
				&m->staged, &m->staged_size);
		if (ret) {
			m->staged = NULL;
			return ret;
		}
	} else if (m->stage_len > m->staged_size) {
		return -EINVAL;
	}
	ret = prov->ops->copy_dtoh(prov, m->staged, addr + m->stage_off,
				   m->stage_len);
	if (ret && got) {
		stage_put(env->stage, m->staged, m->staged_size);
		m->staged = NULL;
		m->staged_size = 0;
	}
	return ret;
}

/* Map (and zero) or swap in a region, leaving it pinned for the
 * transfer the I/O thread runs next; or stage a read's bytes. */
void svc_mem_run(struct exec_job *job, const struct exec_env *env)
{
	struct vmu_provider *prov = env->b->provider;
	struct vmu_session *vs = job->s->vs;
	struct exec_mem *m = &job->mem;
	struct vmu_region_info info = { 0 };
	int ret;

	if (!m->going && svc_job_gone(job))
		return;
	if (!m->create) {
		info.addr = m->addr;
		if (m->region) {
			ret = vmu_region_pin(vs, m->region, NULL, &info);
			if (ret)
				goto out;
		}
		ret = m->stage_len ? stage(env, m, info.addr) : 0;
		if (ret && m->region)
			vmu_region_unpin(vs, m->region);
		goto out;
	}
	ret = vmu_region_create(vs, m->bytes, &m->region);
	if (ret) {
		m->region = 0;
		goto out;
	}
	/* Pinned before it grows: a region grown but not yet pinned would
	 * be resident, idle and on the LRU, and another session's
	 * allocation could swap it out before its first byte arrived. */
	ret = vmu_region_pin(vs, m->region, NULL, &info);
	if (ret)
		goto out_destroy;
	ret = vmu_region_resize(vs, m->region, m->bytes, NULL);
	if (ret)
		goto out_unpin;
	/* What the client does not send reads as zero: a region taken back
	 * from the session's cache still holds its earlier bytes. */
	if (m->zero_from < m->bytes) {
		ret = prov->ops->memset(prov, info.addr + m->zero_from, 0,
					m->bytes - m->zero_from);
		if (ret)
			goto out_unpin;
	}
	goto out;

out_unpin:
	vmu_region_unpin(vs, m->region);
out_destroy:
	vmu_region_destroy(vs, m->region);
	m->region = 0;
out:
	m->addr = info.addr;
	job->error = ret;
}
