// SPDX-License-Identifier: MIT
/*
 * The user-space lease provider: deadlines kept here, checked from the
 * I/O thread's timer at the earliest deadline (so expiry is noticed
 * within a millisecond of it, not at some polling period).
 */
#include <errno.h>
#include <stdlib.h>

#include "session/lease.h"
#include "session/session.h"

struct user_lease {
	struct lease_provider base;
	struct list_head sessions;
};

static struct user_lease *to_user(struct lease_provider *lp)
{
	return (struct user_lease *)lp;
}

static int user_open(struct lease_provider *lp, struct session *s, uint64_t now)
{
	/* a predecessor's kernel lease: djinnd's own from now on */
	s->lease_kid = 0;
	s->lease_bound = s->lease_adopt = false;
	s->deadline_ns = now + s->lease_ns;
	list_add_tail(&s->lease_node, &to_user(lp)->sessions);
	return 0;
}

static void user_renew(struct lease_provider *lp, struct session *s,
		       uint64_t now)
{
	s->deadline_ns = now + s->lease_ns;
}

static void user_close(struct lease_provider *lp, struct session *s)
{
	list_del_init(&s->lease_node);
}

static uint64_t user_poll(struct lease_provider *lp, uint64_t now,
			  void (*expired)(struct session *s, void *arg),
			  void *arg)
{
	uint64_t next = NSEC_PER_SEC; /* look again in a second at most */
	struct session *s, *n;

	list_for_each_entry_safe(s, n, &to_user(lp)->sessions, lease_node) {
		if (s->deadline_ns <= now)
			expired(s, arg); /* takes it off this list */
		else if (s->deadline_ns - now < next)
			next = s->deadline_ns - now;
	}
	return next;
}

static void user_destroy(struct lease_provider *lp)
{
	free(lp);
}

static const struct lease_ops user_ops = {
	.name = "user",
	.open = user_open,
	.renew = user_renew,
	.close = user_close,
	.poll = user_poll,
	.destroy = user_destroy,
};

int user_lease_create(struct lease_provider **out)
{
	struct user_lease *u = calloc(1, sizeof(*u));

	if (!u)
		return -ENOMEM;
	u->base.ops = &user_ops;
	INIT_LIST_HEAD(&u->sessions);
	*out = &u->base;
	return 0;
}
