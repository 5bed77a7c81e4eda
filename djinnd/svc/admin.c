// SPDX-License-Identifier: MIT
/*
 * The administrator's operations that take more than one step: loading
 * a model on every device (ADMIN_MODEL_LOAD, djinnctl model load), as
 * svc/admin.h says.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device.h"
#include "model/store.h"
#include "svc/admin.h"
#include "svc/model.h"
#include "svc/svc.h"

/* The last job back: the budget as it was if one failed, and the
 * caller's answer. */
static void load_finish(struct svc_load *l)
{
	for (unsigned int d = 0; l->error && l->set && d < l->nr_dev; d++)
		if (l->devs[d].models) {
			/* no copy placed under the new budget (a device that
			 * loaded it while another failed) is left */
			model_store_set_budget(l->devs[d].models, l->name,
					       l->was[d].bytes, l->was[d].slots,
					       NULL, 0);
			model_store_drop_stale(l->devs[d].models, l->name);
		}
	l->finish(l);
	free(l);
}

static void load_done(struct exec_job *job, void *arg)
{
	struct svc_load *l = arg;
	struct mjob *mj = job->ctx;
	struct session *s = job->s;
	int ret = job->error;

	if (!ret && s->dead)
		ret = -ECANCELED;
	if (mj->hold)
		model_close(mj->hold); /* loaded: it stays, unheld */
	if (ret && !l->error) {
		char why[DJINN_MAX_ERROR_MSG - 32];

		snprintf(why, sizeof(why), "%.*s", (int)sizeof(why) - 1,
			 job->msg[0] ? job->msg : strerror(-ret));
		l->error = ret;
		if (l->nr_dev > 1)
			snprintf(l->msg, sizeof(l->msg), "%s: %s", s->dev->name,
				 why);
		else
			snprintf(l->msg, sizeof(l->msg), "%s", why);
	}
	session_end(l->t, s, SESSION_CLOSED);
	mjob_free(mj);
	job->ctx = NULL;
	svc_job_free(job);
	if (!--l->pending)
		load_finish(l);
}

/* Device @dev's load: a session of its own there, for the memory
 * executor's queue and the text's charge while it loads, and its job. */
static int load_on(struct svc_load *l, struct device *dev,
		   const struct djinn_hdr *hdr)
{
	struct exec_job *job;
	struct session *s;
	struct mjob *mj;
	char why[DJINN_MAX_ERROR_MSG - 32];
	int ret;

	ret = session_create(l->t, dev, "admin", "model-load", 0,
			     l->t->lim.lease_max_ns, 0, getpid(), &s);
	if (!ret) {
		ret = session_publish(l->t, s);
		if (ret)
			session_put(s);
	}
	if (ret) {
		snprintf(why, sizeof(why), "no session to load through: %s",
			 strerror(-ret));
		goto out;
	}
	mj = calloc(1, sizeof(*mj));
	if (!mj) {
		ret = -ENOMEM;
		snprintf(why, sizeof(why), "no session to load through: %s",
			 strerror(-ret));
		goto out_end;
	}
	memcpy(mj->name, l->name, sizeof(mj->name));
	ret = svc_model_job(l->t, s, hdr, mj, SCHED_MEM, mjob_open, &job, why,
			    sizeof(why));
	if (ret)
		goto out_end;
	job->done = load_done;
	job->done_arg = l;
	l->pending++;
	svc_submit(job);
	return 0;

out_end:
	session_end(l->t, s, SESSION_CLOSED);
out:
	if (!l->error) {
		l->error = ret;
		snprintf(l->msg, sizeof(l->msg), "%s: %s", dev->name, why);
	}
	return ret;
}

int svc_model_load_check(struct device *devs, unsigned int nr_dev,
			 const char name[DJINN_MODEL_NAME_MAX], bool set,
			 uint64_t budget, unsigned int slots, char *msg,
			 size_t msglen)
{
	if (!devs[0].models) {
		snprintf(msg, msglen, "this djinnd serves no models");
		return -ENOENT;
	}
	/* A new placement must not move layers that sessions use: check
	 * every device before any changes. */
	for (unsigned int d = 0; set && d < nr_dev; d++)
		if (devs[d].models &&
		    model_store_budget_check(devs[d].models, name, budget,
					     slots, msg, msglen))
			return -EBUSY;
	return 0;
}

struct svc_load *svc_load_new(unsigned int nr_dev)
{
	struct svc_load *l;

	return calloc(1, sizeof(*l) + nr_dev * sizeof(l->was[0]));
}

void svc_model_load(struct svc_load *l, struct session_table *t,
		    struct device *devs, unsigned int nr_dev,
		    const struct djinn_hdr *hdr,
		    const char name[DJINN_MODEL_NAME_MAX], bool set,
		    uint64_t budget, unsigned int slots,
		    void (*finish)(struct svc_load *l), void *arg)
{
	l->t = t;
	l->devs = devs;
	l->nr_dev = nr_dev;
	l->finish = finish;
	l->arg = arg;
	l->set = set;
	memcpy(l->name, name, sizeof(l->name));
	l->pending = 1; /* ours, until every job is queued */
	for (unsigned int d = 0; d < nr_dev; d++) {
		struct device *dev = &devs[d];

		if (!dev->models)
			continue;
		if (set) {
			model_store_get_budget(dev->models, name,
					       &l->was[d].bytes,
					       &l->was[d].slots);
			model_store_set_budget(dev->models, name, budget, slots,
					       NULL, 0);
			model_store_drop_stale(dev->models, name);
		}
		load_on(l, dev, hdr);
	}
	if (!--l->pending)
		load_finish(l);
}
