// SPDX-License-Identifier: MIT
/*
 * A GRAPH_SUBMIT's job, on a graph executor's thread (svc/svc.h): its
 * inputs resolved, held and made resident, the graph run by the graph
 * runner (graph/run.h), its outputs made the session's tensors and its
 * result record finished, so that later graphs may name them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "graph.h"
#include "svc/svc.h"

int svc_graph_new(struct session_table *t, struct session *s,
		  uint64_t request_id, void *payload, uint64_t len,
		  struct exec_job **out, char *msg, size_t msglen)
{
	struct exec_job *job = calloc(1, sizeof(*job));
	struct djinn_tensor_desc *outs = NULL;
	bool *in_module = NULL;
	uint32_t nin, nout;
	int ret;

	if (!job) {
		free(payload);
		snprintf(msg, msglen, "out of memory");
		return -ENOMEM;
	}
	job->payload = payload;
	job->request_id = request_id;
	job->s = s;
	job->se = &s->se;
	session_ref(s);
	ret = djinn_graph_parse(payload, len, &job->view, msg, msglen);
	if (ret)
		goto out_free;
	/* a tenant's modules stay after a reload turns its kernels off */
	for (uint32_t i = 0; i < job->view.g->nr_nodes; i++) {
		if (job->view.nodes[i].op != DJINN_GOP_KERNEL)
			continue;
		ret = session_kernels_check(t, s, msg, msglen);
		if (ret)
			goto out_free;
	}
	ret = session_inflight_check(t, s, msg, msglen);
	if (ret)
		goto out_free;
	nin = job->view.g->nr_inputs;
	nout = job->view.g->nr_outputs;
	job->in_descs = calloc(nin ? nin : 1, sizeof(*job->in_descs));
	job->descs = calloc(job->view.g->nr_nodes, sizeof(*job->descs));
	outs = calloc(nout, sizeof(*outs));
	in_module = calloc(nin ? nin : 1, sizeof(*in_module));
	if (!job->in_descs || !job->descs || !outs || !in_module) {
		ret = -ENOMEM;
		snprintf(msg, msglen, "out of memory");
		goto out_free;
	}
	/* The inputs' shapes: tensors now, or results of earlier graphs,
	 * which are known from their submission. */
	for (uint32_t i = 0; i < nin; i++) {
		const struct djinn_ref *ref = &job->view.inputs[i];
		struct tensor tn;

		ret = ref->kind == DJINN_REF_RESULT ?
			      session_result_desc(s, ref->id, ref->index,
						  &job->in_descs[i]) :
			      session_tensor_get(s, ref->id, &tn);
		if (!ret && ref->kind == DJINN_REF_HANDLE) {
			job->in_descs[i] = tn.desc;
			in_module[i] = tn.module;
		}
		if (ret == -EIO && ref->kind == DJINN_REF_HANDLE) {
			char why[DJINN_MAX_ERROR_MSG];

			session_tensor_why(s, ref->id, ret, why, sizeof(why));
			snprintf(msg, msglen, "input %u: %s", i, why);
			goto out_free;
		}
		if (ret) {
			ret = -ENOENT;
			snprintf(msg, msglen, "input %u: no such %s", i,
				 ref->kind == DJINN_REF_RESULT ? "result" :
								 "tensor");
			goto out_free;
		}
	}
	ret = djinn_graph_infer_modules(&job->view, job->in_descs, in_module,
					job->descs, msg, msglen);
	if (ret)
		goto out_free;
	for (uint32_t k = 0; k < nout; k++)
		outs[k] = job->descs[job->view.outputs[k]];
	ret = session_result_begin(s, request_id, nout, outs);
	if (ret) {
		snprintf(msg, msglen, "out of memory");
		goto out_free;
	}
	free(outs);
	free(in_module);
	job->lane = SCHED_COMPUTE;
	job->counted = true;
	job->run = svc_graph_run;
	job->cancel = svc_graph_cancel;
	*out = job;
	return 0;

out_free:
	free(outs);
	free(in_module);
	svc_job_free(job);
	return ret;
}

void svc_graph_cancel(struct exec_job *job)
{
	session_result_finish(job->s, job->request_id, NULL, -ECANCELED);
}

/* A graph input, resolved, held and made resident; @held[0] gets its
 * slot + 1, @pinned its region, for release(); @fp a client module's
 * fingerprint (valid while it is held), else NULL. */
static int resolve(struct session *s, const struct djinn_ref *ref,
		   const struct djinn_tensor_desc *want, struct dj_tensor *t,
		   const uint8_t **fp, uint64_t *pinned, uint32_t *held,
		   char *msg, size_t msglen)
{
	uint64_t handle = ref->id;
	struct vmu_region_info info;
	struct tensor tn;
	uint32_t slot;
	int ret;

	*pinned = 0;
	*held = 0;
	*fp = NULL;
	if (ref->kind == DJINN_REF_RESULT) {
		ret = session_result_handle(s, ref->id, ref->index, &handle);
		if (ret) {
			snprintf(msg, msglen,
				 "result %u of request %llu: error %d",
				 ref->index, (unsigned long long)ref->id, ret);
			return ret == -EAGAIN ? -EIO : ret;
		}
	}
	ret = session_tensor_hold(s, handle, &tn, &slot);
	if (ret) {
		session_tensor_why(s, handle, ret, msg, msglen);
		return ret;
	}
	*held = slot + 1;
	if (memcmp(&tn.desc, want, sizeof(tn.desc))) {
		snprintf(msg, msglen, "tensor %#llx changed shape",
			 (unsigned long long)handle);
		return -EINVAL;
	}
	t->desc = tn.desc;
	if (tn.text) {
		t->addr = vmu_text_addr(tn.text);
		*fp = tn.module ? vmu_text_fp(tn.text) : NULL;
		return 0;
	}
	ret = vmu_region_pin(s->vs, tn.region, NULL, &info);
	if (ret) {
		snprintf(msg, msglen, "tensor %#llx: cannot make resident",
			 (unsigned long long)handle);
		return ret;
	}
	t->addr = info.addr;
	*pinned = tn.region;
	return 0;
}

void svc_graph_run(struct exec_job *job, const struct exec_env *env)
{
	const struct djinn_graph_view *view = &job->view;
	uint32_t nin = view->g->nr_inputs, nout = view->g->nr_outputs, i;
	struct dj_tensor *in = calloc(nin ? nin : 1, sizeof(*in));
	uint64_t *pinned = calloc(nin ? nin : 1, sizeof(*pinned));
	uint32_t *held = calloc(nin ? nin : 1, sizeof(*held));
	const uint8_t **fps = calloc(nin ? nin : 1, sizeof(*fps));
	struct session *s = job->s;
	int ret = 0;

	if (svc_job_gone(job))
		goto out;
	if (!in || !pinned || !held || !fps) {
		ret = -ENOMEM;
		goto out;
	}
	for (i = 0; i < nin && !ret; i++) {
		char why[160];

		ret = resolve(s, &view->inputs[i], &job->in_descs[i], &in[i],
			      &fps[i], &pinned[i], &held[i], why, sizeof(why));
		if (ret)
			snprintf(job->msg, sizeof(job->msg), "input %u: %s", i,
				 why);
	}
	if (!ret)
		ret = graph_run_kernels(env->v, env->st, env->b, s->vs, view,
					in, fps, job->descs, &job->res,
					job->msg, sizeof(job->msg));
	for (uint32_t k = 0; k < i; k++) {
		if (pinned[k])
			vmu_region_unpin(s->vs, pinned[k]);
		if (held[k])
			session_tensor_unhold(s, held[k] - 1);
	}
	/* Outputs become the session's tensors. */
	for (uint32_t k = 0; !ret && k < nout; k++) {
		struct tensor t = {
			.desc = job->descs[view->outputs[k]],
			.region = job->res.regions[k],
		};

		djinn_desc_check(&t.desc, NULL, &t.bytes);
		ret = session_tensor_add(s, &t, &job->handles[k]);
		if (ret) {
			/* Undo: the earlier outputs' handles, the rest's
			 * regions. */
			for (uint32_t j = 0; j < k; j++)
				session_tensor_release(s, job->handles[j]);
			for (uint32_t j = k; j < nout; j++)
				vmu_region_destroy(s->vs, job->res.regions[j]);
			snprintf(job->msg, sizeof(job->msg),
				 "out of memory for handles");
		}
	}
out:
	if (job->error == -ECANCELED) {
		svc_graph_cancel(job);
		ret = -ECANCELED;
	} else {
		session_result_finish(s, job->request_id, job->handles, ret);
		job->error = ret;
	}
	free(in);
	free(pinned);
	free(held);
	free(fps);
}
