// SPDX-License-Identifier: MIT
#include <stdlib.h>

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
