// SPDX-License-Identifier: MIT
/*
 * GRAPH_SUBMIT: the graph service checks the graph and makes its job
 * (svc_graph_new(), svc/graph.c), which is queued here and answered by
 * graph_done() when it is back.
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
	char msg[DJINN_MAX_ERROR_MSG];
	struct exec_job *job;
	int ret;

	/* the row says: the handler keeps the payload (the job does) */
	ret = svc_graph_new(&c->srv->sessions, s, hdr->request_id, req, len,
			    &job, msg, sizeof(msg));
	if (ret) {
		conn_error(c, hdr, ret, "%s", msg);
		return;
	}
	msg_queue(c, job, graph_done);
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
	if (job->counted)
		session_inflight_sub(job->s);
	if (srv->sessions.leases->ops->complete)
		srv->sessions.leases->ops->complete(srv->sessions.leases,
						    job->s, job->request_id,
						    DJINN_MSG_GRAPH_SUBMIT,
						    job->error);
	conn_put(c);
	svc_job_free(job);
}
