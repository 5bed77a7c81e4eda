// SPDX-License-Identifier: MIT
/*
 * GRAPH_SUBMIT: the graph is parsed, its inputs' shapes found and every
 * node's inferred (lib/graph.h), its outputs recorded for later graphs
 * to name, and its job queued; the graph service runs it (svc/graph.c)
 * and graph_done() answers.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "log.h"
#include "server.h"
#include "exec/executor.h"
#include "svc/svc.h"
#include "net/conn.h"
#include "model/store.h"
#include "net/msg.h"
#include "net/tls.h"
#include "session/tenant.h"

static void graph_done(struct exec_job *job, void *arg);

void handle_graph_submit(struct conn *c, const struct djinn_hdr *hdr,
			 struct session *s, void *req, uint64_t len)
{
	struct exec_job *job = calloc(1, sizeof(*job));
	char msg[DJINN_MAX_ERROR_MSG];
	struct djinn_tensor_desc *outs = NULL;
	bool *in_module = NULL;
	uint32_t nin, nout;
	int ret;

	if (!job) {
		conn_error(c, hdr, -ENOMEM, "out of memory");
		free(req);
		return;
	}
	job->payload = req; /* the row says: the handler keeps it */
	job->request_id = hdr->request_id;
	job->s = s;
	session_ref(s);
	ret = djinn_graph_parse(req, len, &job->view, msg, sizeof(msg));
	if (ret) {
		conn_error(c, hdr, ret, "%s", msg);
		goto out_free;
	}
	/* a tenant's modules stay after a reload turns its kernels off */
	for (uint32_t i = 0; i < job->view.g->nr_nodes; i++)
		if (job->view.nodes[i].op == DJINN_GOP_KERNEL &&
		    msg_kernels_allowed(c, hdr, s))
			goto out_free;
	if (msg_inflight_full(c, hdr, s))
		goto out_free;
	nin = job->view.g->nr_inputs;
	nout = job->view.g->nr_outputs;
	job->in_descs = calloc(nin ? nin : 1, sizeof(*job->in_descs));
	job->descs = calloc(job->view.g->nr_nodes, sizeof(*job->descs));
	outs = calloc(nout, sizeof(*outs));
	in_module = calloc(nin ? nin : 1, sizeof(*in_module));
	if (!job->in_descs || !job->descs || !outs || !in_module) {
		conn_error(c, hdr, -ENOMEM, "out of memory");
		goto out_free;
	}
	/* The inputs' shapes: tensors now, or results of earlier graphs,
	 * which are known from their submission. */
	for (uint32_t i = 0; i < nin; i++) {
		const struct djinn_ref *ref = &job->view.inputs[i];
		struct tensor t;

		ret = ref->kind == DJINN_REF_RESULT ?
			      session_result_desc(job->s, ref->id, ref->index,
						  &job->in_descs[i]) :
			      session_tensor_get(job->s, ref->id, &t);
		if (!ret && ref->kind == DJINN_REF_HANDLE) {
			job->in_descs[i] = t.desc;
			in_module[i] = t.module;
		}
		if (ret) {
			conn_error(c, hdr, -ENOENT, "input %u: no such %s", i,
				   ref->kind == DJINN_REF_RESULT ? "result" :
								   "tensor");
			goto out_free;
		}
	}
	ret = djinn_graph_infer_modules(&job->view, job->in_descs, in_module,
					job->descs, msg, sizeof(msg));
	if (ret) {
		conn_error(c, hdr, ret, "%s", msg);
		goto out_free;
	}
	for (uint32_t k = 0; k < nout; k++)
		outs[k] = job->descs[job->view.outputs[k]];
	ret = session_result_begin(job->s, hdr->request_id, nout, outs);
	if (ret) {
		conn_error(c, hdr, ret, "out of memory");
		goto out_free;
	}
	free(outs);
	free(in_module);
	job->lane = SCHED_COMPUTE;
	job->run = svc_graph_run;
	job->cancel = svc_graph_cancel;
	job->se = &job->s->se;
	job->conn = c;
	job->client = true;
	conn_get(c);
	job->t0 = msg_defer(c);
	job->done = graph_done;
	job->done_arg = c->srv;
	msg_inflight_add(job->s);
	sched_submit(job->s->dev->sched, job);
	return;

out_free:
	free(outs);
	free(in_module);
	svc_job_free(job);
}

static void graph_done(struct exec_job *job, void *arg)
{
	struct server *srv = arg;
	struct conn *c = job->conn;
	uint32_t nout = job->view.g->nr_outputs;
	struct djinn_hdr hdr = {
		.type = DJINN_MSG_GRAPH_SUBMIT,
		.request_id = job->request_id,
		.session_id = job->s->id,
	};

	metrics_observe(&srv->st, DJINN_MSG_GRAPH_SUBMIT, loop_now() - job->t0);
	/* a fault while it was queued or ran: its results are lost */
	if (!job->error)
		job->error = session_lost(job->s, job->msg, sizeof(job->msg));
	if (job->error) {
		srv->st.graphs_failed++;
		conn_error(c, &hdr, job->error, "%s", job->msg);
	} else {
		size_t len = sizeof(struct djinn_graph_resp) +
			     nout * sizeof(struct djinn_tensor_resp);
		struct djinn_graph_resp *r = calloc(1, len);
		struct djinn_tensor_resp *t = (void *)(r + 1);

		srv->st.graphs_run++;
		if (!r) {
			conn_error(c, &hdr, -ENOMEM, "out of memory");
		} else {
			r->nr_outputs = nout;
			r->peak_bytes = job->res.peak_bytes;
			r->run_ns = job->res.run_ns;
			for (uint32_t k = 0; k < nout; k++)
				msg_tensor_resp(
					&t[k], job->handles[k],
					&job->descs[job->view.outputs[k]], 0);
			conn_reply(c, &hdr, r, len, NULL, 0, NULL, NULL);
			free(r);
		}
	}
	msg_inflight_sub(job->s);
	if (srv->sessions.leases->ops->complete)
		srv->sessions.leases->ops->complete(srv->sessions.leases,
						    job->s, job->request_id,
						    DJINN_MSG_GRAPH_SUBMIT,
						    job->error);
	conn_put(c);
	svc_job_free(job);
}
