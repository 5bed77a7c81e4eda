/* SPDX-License-Identifier: MIT */
/*
 * The administrator's services that span the devices.
 */
#ifndef DJINN_SVC_ADMIN_H
#define DJINN_SVC_ADMIN_H

#include <stdbool.h>
#include <stdint.h>

#include <djinn/proto.h>

#include "session/session.h"

struct device;

/*
 * struct svc_load - one ADMIN_MODEL_LOAD in progress: a job per device
 * @error, @msg: the first failure (0: loaded everywhere)
 * @arg:         the caller's, for its @finish
 * The rest is the service's: the budget each device had (@was), set
 * back if a load fails.
 */
struct svc_load {
	int error;
	char msg[DJINN_MAX_ERROR_MSG];
	void *arg;
	void (*finish)(struct svc_load *l);
	struct session_table *t;
	struct device *devs;
	unsigned int nr_dev, pending;
	bool set;
	char name[DJINN_MODEL_NAME_MAX];
	struct {
		uint64_t bytes;
		unsigned int slots;
	} was[]; /* one per device */
};

/*
 * Load model @name on each of the @nr_dev devices @devs that serves
 * models, each through a session of tenant "admin" of its own on the
 * memory executor (request @hdr), so the model stays loaded and held by
 * no one. With @set, each device's budget for it becomes @budget and
 * @slots first, and goes back to what it was if a load fails; a
 * placement that would move layers sessions use is refused at once
 * (-EBUSY). @finish(l) is called on the I/O thread once every load is
 * back (l->error, l->msg: the first failure), before @l is freed; it
 * may be called before this returns. 0, or a negative errno with why in
 * @msg and nothing done (-ENOENT: no device serves models).
 */
int svc_model_load(struct session_table *t, struct device *devs,
		   unsigned int nr_dev, const struct djinn_hdr *hdr,
		   const char name[DJINN_MODEL_NAME_MAX], bool set,
		   uint64_t budget, unsigned int slots,
		   void (*finish)(struct svc_load *l), void *arg, char *msg,
		   size_t msglen);

#endif /* DJINN_SVC_ADMIN_H */
