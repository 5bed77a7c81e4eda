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
 * Loading model @name on each of the @nr_dev devices @devs that serves
 * models, each through a session of tenant "admin" of its own on the
 * memory executor (request @hdr), so the model stays loaded and held by
 * no one.
 *
 * svc_model_load_check(): whether it may start: 0, or -ENOENT (no
 * device serves models) or, with @set, -EBUSY for a placement under
 * @budget and @slots that would move layers sessions use, saying so in
 * @msg. svc_load_new(): a load's state for @nr_dev devices, or NULL.
 * svc_model_load(): the loads, into @l; with @set each device's budget
 * for the model becomes @budget and @slots first, and goes back to what
 * it was if a load fails. @finish(l) is called on the I/O thread once
 * every load is back (l->error, l->msg: the first failure), before @l is
 * freed; it may be called before this returns.
 */
int svc_model_load_check(struct device *devs, unsigned int nr_dev,
			 const char name[DJINN_MODEL_NAME_MAX], bool set,
			 uint64_t budget, unsigned int slots, char *msg,
			 size_t msglen);
struct svc_load *svc_load_new(unsigned int nr_dev);
void svc_model_load(struct svc_load *l, struct session_table *t,
		    struct device *devs, unsigned int nr_dev,
		    const struct djinn_hdr *hdr,
		    const char name[DJINN_MODEL_NAME_MAX], bool set,
		    uint64_t budget, unsigned int slots,
		    void (*finish)(struct svc_load *l), void *arg);

#endif /* DJINN_SVC_ADMIN_H */
