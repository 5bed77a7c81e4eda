// SPDX-License-Identifier: MIT
/*
 * Loopback TCP peers' owners, off the I/O thread. See ident.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "list.h"
#include "log.h"
#include "server.h"
#include "net/conn.h"
#include "net/ident.h"
#include "session/tenant.h"

/* One connection's lookup: asked on the I/O thread, answered there. */
struct ident_req {
	struct list_head node;
	struct conn *c;
	int fd;
	int ret;
	uid_t uid;
};

/*
 * struct ident_worker - the lookup thread
 * @lock, @cond: @in, @done, @hold, @stop
 * @in:   asked, not looked up yet, oldest first
 * @done: answered, for the I/O thread
 */
struct ident_worker {
	struct server *srv;
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct list_head in, done;
	bool hold, stop;
	struct loop_notify notify;
	bool notify_ok;
};

static void *ident_main(void *arg)
{
	struct ident_worker *w = arg;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct ident_req *r;

		while (!w->stop && (w->hold || list_empty(&w->in)))
			pthread_cond_wait(&w->cond, &w->lock);
		if (w->stop)
			break;
		r = list_first_entry(&w->in, struct ident_req, node);
		list_del_init(&r->node);
		pthread_mutex_unlock(&w->lock);
		/* the connection holds its socket open until it is told */
		r->ret = tenant_tcp_peer_uid(r->fd, &r->uid);
		pthread_mutex_lock(&w->lock);
		list_add_tail(&r->node, &w->done);
		loop_notify_post(&w->notify);
	}
	/* stopping: what was not looked up goes back failed */
	while (!list_empty(&w->in)) {
		struct ident_req *r =
			list_first_entry(&w->in, struct ident_req, node);

		r->ret = -ECANCELED;
		list_move_tail(&r->node, &w->done);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

/* Answered lookups, on the I/O thread. */
static void ident_reap(struct ident_worker *w)
{
	struct list_head done;

	INIT_LIST_HEAD(&done);
	pthread_mutex_lock(&w->lock);
	list_splice_tail(&w->done, &done);
	INIT_LIST_HEAD(&w->done);
	pthread_mutex_unlock(&w->lock);
	while (!list_empty(&done)) {
		struct ident_req *r =
			list_first_entry(&done, struct ident_req, node);

		list_del_init(&r->node);
		conn_ident_done(r->c, r->ret, r->uid);
		free(r);
	}
}

static void ident_notified(struct loop_notify *n)
{
	ident_reap(container_of(n, struct ident_worker, notify));
}

int ident_start(struct server *srv)
{
	struct ident_worker *w = calloc(1, sizeof(*w));
	int ret;

	if (!w)
		return -ENOMEM;
	w->srv = srv;
	INIT_LIST_HEAD(&w->in);
	INIT_LIST_HEAD(&w->done);
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	srv->ident = w;
	ret = loop_notify_init(&srv->loop, &w->notify, "ident", ident_notified);
	if (ret)
		return ret;
	w->notify_ok = true;
	ret = -pthread_create(&w->thread, NULL, ident_main, w);
	if (ret)
		return ret;
	w->started = true;
	loop_notify_start(&w->notify);
	return 0;
}

void ident_stop(struct server *srv)
{
	struct ident_worker *w = srv->ident;

	if (!w)
		return;
	if (w->started) {
		pthread_mutex_lock(&w->lock);
		w->stop = true;
		pthread_cond_signal(&w->cond);
		pthread_mutex_unlock(&w->lock);
		pthread_join(w->thread, NULL);
		ident_reap(w); /* each goes back to its connection */
	}
	if (w->notify_ok)
		loop_notify_fini(&w->notify);
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
	free(w);
	srv->ident = NULL;
}

void ident_lookup(struct conn *c)
{
	struct ident_worker *w = c->srv->ident;
	struct ident_req *r = calloc(1, sizeof(*r));

	conn_get(c);
	if (!r || !w || !w->started) {
		free(r);
		conn_ident_done(c, -ENOMEM, 0);
		return;
	}
	r->c = c;
	r->fd = c->fd;
	pthread_mutex_lock(&w->lock);
	list_add_tail(&r->node, &w->in);
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

void ident_hold(struct server *srv, bool hold)
{
	struct ident_worker *w = srv->ident;

	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->hold = hold;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}
