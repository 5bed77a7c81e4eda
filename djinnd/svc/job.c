// SPDX-License-Identifier: MIT
#include <stdlib.h>

#include "device.h"
#include "svc/svc.h"

void svc_job_free(struct exec_job *job)
{
	if (job->s)
		session_put(job->s);
	free(job->payload);
	free(job->in_descs);
	free(job->descs);
	free(job);
}

void svc_submit(struct exec_job *job)
{
	if (job->counted)
		session_inflight_add(job->s);
	sched_submit(job->s->dev->sched, job);
}
