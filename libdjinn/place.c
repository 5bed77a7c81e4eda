// SPDX-License-Identifier: MIT
/*
 * Choosing a djinnd among several (djinn_connect_opts(3): "dns:NAME:PORT"
 * and "srv:NAME"), and STATUS, which each is asked.
 *
 * The name is resolved through the system's resolver: getaddrinfo() for
 * dns: (every A and AAAA record), res_nquery() for srv: (the SRV records,
 * then each target's addresses). Every address is connected to at once,
 * a thread each, and asked STATUS; after $DJINN_PROBE_MS (default 3000)
 * or once all have answered, the best is kept (place_better()) and the
 * rest closed. A probe that has not finished by then closes its own
 * connection when it does: the probes share a refcounted struct place.
 */
#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <resolv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "internal.h"

#define PLACE_MAX 64 /* addresses asked at most */
#define PROBE_MS_DEFAULT 3000

/* ---------------------------------------------------------------------- */
/* STATUS */

const char *djinn_conn_addr(const struct djinn_conn *conn)
{
	return conn ? conn->dial : NULL;
}

/* STATUS until @deadline_ns (CLOCK_MONOTONIC; UINT64_MAX: none). */
static int status_until(struct djinn_conn *conn, struct djinn_status_info **out,
			uint64_t deadline_ns)
{
	const size_t max =
		sizeof(struct djinn_status) +
		DJINN_STATUS_MODELS_MAX * sizeof(struct djinn_status_model);
	const struct djinn_status_model *m;
	struct djinn_status_info *info;
	struct djinn_status st;
	uint64_t got = 0;
	void *buf;
	int ret;

	if (!conn || !out)
		return -EINVAL;
	buf = malloc(max);
	if (!buf)
		return -ENOMEM;
	if (deadline_ns == UINT64_MAX) {
		ret = __djinn_call_sync_upto(conn, DJINN_MSG_STATUS, 0, NULL, 0,
					     buf, max, true, &got);
	} else {
		struct dj_call c;

		__djinn_call_init(&c, DJINN_MSG_STATUS, 0, buf, max);
		c.resp_upto = true;
		ret = __djinn_call_until(conn, &c, NULL, 0, deadline_ns);
		got = c.resp_got;
		if (ret)
			__djinn_set_last_error("STATUS: %s",
					       c.msg[0] ? c.msg :
							  strerror(-ret));
		__djinn_call_destroy(&c);
	}
	if (ret)
		goto out_free;
	memcpy(&st, buf, got < sizeof(st) ? got : sizeof(st));
	/* a newer server's struct is longer, by whole u64s */
	if (got < sizeof(st) || st.size < sizeof(st) || st.size % 8 ||
	    st.size > got || st.nr_models > DJINN_STATUS_MODELS_MAX ||
	    got != st.size + (uint64_t)st.nr_models * sizeof(*m)) {
		__djinn_set_last_error("STATUS: an answer of %llu bytes that "
				       "does not hold together",
				       (unsigned long long)got);
		ret = -EPROTO;
		goto out_free;
	}
	info = calloc(1,
		      sizeof(*info) + st.nr_models * sizeof(info->models[0]));
	if (!info) {
		ret = -ENOMEM;
		goto out_free;
	}
	info->ready = st.flags & DJINN_STATUS_READY;
	info->serves_models = st.flags & DJINN_STATUS_MODELS;
	info->capacity = st.capacity;
	info->free = st.free;
	info->tenant_free = st.tenant_free;
	info->pressure = st.pressure;
	info->nr_dev = st.nr_dev;
	info->sessions = st.sessions;
	info->max_sessions = st.max_sessions;
	info->queued = st.queued;
	info->nr_models = st.nr_models;
	info->pressure_room = st.pressure_room;
	info->data_bytes = st.data_bytes;
	/* after the struct as the server sends it (a newer one's is longer) */
	m = (const void *)((const char *)buf + st.size);
	for (uint32_t i = 0; i < st.nr_models; i++) {
		memcpy(info->models[i].name, m[i].name,
		       sizeof(info->models[i].name));
		info->models[i].name[sizeof(info->models[i].name) - 1] = 0;
		info->models[i].bytes = m[i].bytes;
		info->models[i].holders = m[i].holders;
		info->models[i].streamed = m[i].flags & DJINN_STATUS_STREAMED;
	}
	*out = info;
out_free:
	free(buf);
	return ret;
}

int djinn_status(struct djinn_conn *conn, struct djinn_status_info **out)
{
	if (!conn || !out)
		return -EINVAL;
	return status_until(conn, out, UINT64_MAX);
}

/* ---------------------------------------------------------------------- */
/* Resolving */

struct endpoint {
	char dial[DJINN_ADDR_NAME_MAX];
	char tls_name[256];
	unsigned int prio; /* SRV priority: lower first; 0 for dns: */
	/* the probe's, under place.lock once it is done */
	bool done;
	int err;
	struct djinn_conn *conn;
	struct djinn_status_info *st;
	char why[DJINN_MAX_ERROR_MSG];
};

struct place {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned int refs, pending;
	bool abandoned; /* the caller has chosen: late probes clean up */
	uint64_t deadline; /* CLOCK_MONOTONIC: every probe's end */
	struct djinn_connect_opts o;
	char *strs[5]; /* @o's strings, the probes' own copies */
	unsigned int nr;
	struct endpoint ep[PLACE_MAX];
};

/* "tcp:10.0.0.7:7411" or "tcp:[fd00::7]:7411" for @sa, into @ep. */
static int endpoint_add(struct place *p, const struct sockaddr *sa,
			const char *port, bool tls, const char *name,
			unsigned int prio)
{
	char host[INET6_ADDRSTRLEN];
	const void *in =
		sa->sa_family == AF_INET6 ?
			(const void *)&((const struct sockaddr_in6 *)sa)
				->sin6_addr :
			(const void *)&((const struct sockaddr_in *)sa)
				->sin_addr;
	struct endpoint *e;

	if ((sa->sa_family != AF_INET && sa->sa_family != AF_INET6) ||
	    !inet_ntop(sa->sa_family, in, host, sizeof(host)))
		return 0;
	if (p->nr == PLACE_MAX)
		return -E2BIG;
	e = &p->ep[p->nr];
	memset(e, 0, sizeof(*e));
	snprintf(e->dial, sizeof(e->dial),
		 sa->sa_family == AF_INET6 ? "%s:[%s]:%s" : "%s:%s:%s",
		 tls ? "tls" : "tcp", host, port);
	for (unsigned int i = 0; i < p->nr; i++)
		if (!strcmp(p->ep[i].dial, e->dial))
			return 0; /* the same address twice */
	snprintf(e->tls_name, sizeof(e->tls_name), "%s", name);
	e->prio = prio;
	p->nr++;
	return 0;
}

/* Every address of @name for TCP port @port: 0, or -EHOSTUNREACH with
 * the resolver's word in @why. */
static int resolve_host(struct place *p, const char *name, const char *port,
			bool tls, unsigned int prio, char *why, size_t len)
{
	const struct addrinfo hints = {
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_STREAM,
		.ai_flags = AI_NUMERICSERV,
	};
	struct addrinfo *res, *ai;
	int ret;

	ret = getaddrinfo(name, port, &hints, &res);
	if (ret) {
		snprintf(why, len, "%s: %s", name, gai_strerror(ret));
		return ret == EAI_MEMORY ? -ENOMEM : -EHOSTUNREACH;
	}
	for (ai = res, ret = 0; ai && !ret; ai = ai->ai_next)
		ret = endpoint_add(p, ai->ai_addr, port, tls, name, prio);
	freeaddrinfo(res);
	if (ret == -E2BIG)
		dj_info("%s: over %d addresses: the first %d are asked", name,
			PLACE_MAX, PLACE_MAX);
	return 0;
}

static uint16_t get16(const unsigned char *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

/*
 * The SRV records of @name (RFC 2782), each target's addresses added
 * with its priority: 0, or -EHOSTUNREACH with why in @why. The answer is
 * read here, field by field and bounded, rather than with libresolv's
 * ns_parserr(), which is not in libc.
 */
static int resolve_srv(struct place *p, const char *name, bool tls, char *why,
		       size_t len)
{
	unsigned char ans[8192];
	const unsigned char *q, *end;
	struct __res_state rs;
	unsigned int qd, an, added = 0;
	int n;

	memset(&rs, 0, sizeof(rs));
	if (res_ninit(&rs)) {
		snprintf(why, len, "srv:%s: the resolver did not start", name);
		return -EHOSTUNREACH;
	}
	n = res_nquery(&rs, name, ns_c_in, ns_t_srv, ans, sizeof(ans));
	res_nclose(&rs);
	if (n < HFIXEDSZ) {
		snprintf(why, len, "srv:%s: %s", name,
			 n < 0 ? hstrerror(h_errno) : "a short answer");
		return -EHOSTUNREACH;
	}
	if (n > (int)sizeof(ans))
		n = sizeof(ans); /* truncated: what came */
	end = ans + n;
	qd = get16(ans + 4);
	an = get16(ans + 6);
	q = ans + HFIXEDSZ;
	for (unsigned int i = 0; i < qd; i++) {
		int k = dn_skipname(q, end);

		if (k < 0 || q + k + QFIXEDSZ > end)
			goto bad;
		q += k + QFIXEDSZ;
	}
	for (unsigned int i = 0; i < an; i++) {
		char target[NS_MAXDNAME], port[8];
		unsigned int type, rdlen, prio;
		int k = dn_skipname(q, end);

		if (k < 0 || q + k + RRFIXEDSZ > end)
			goto bad;
		q += k;
		type = get16(q);
		rdlen = get16(q + 8);
		q += RRFIXEDSZ;
		if (q + rdlen > end)
			goto bad;
		if (type != ns_t_srv) { /* a CNAME on the way */
			q += rdlen;
			continue;
		}
		if (rdlen < 7 ||
		    dn_expand(ans, end, q + 6, target, sizeof(target)) < 0)
			goto bad;
		prio = get16(q);
		snprintf(port, sizeof(port), "%u", get16(q + 4));
		q += rdlen;
		/* "." (no service there) and port 0 name nothing */
		if (!target[0] || !strcmp(target, ".") || !strcmp(port, "0"))
			continue;
		if (!resolve_host(p, target, port, tls, prio, why, len))
			added++;
	}
	if (added)
		return 0;
	if (!why[0])
		snprintf(why, len, "srv:%s: no SRV record names a host", name);
	return -EHOSTUNREACH;
bad:
	snprintf(why, len, "srv:%s: an answer that does not parse", name);
	return -EHOSTUNREACH;
}

/* @addr's endpoints into @p: 0, or -errno with why in @why. */
static int resolve(struct place *p, const char *addr, bool tls, char *why,
		   size_t len)
{
	char host[NS_MAXDNAME];
	const char *colon;
	size_t n;

	if (!strncmp(addr, "srv:", 4)) {
		if (!addr[4] || strlen(addr + 4) >= sizeof(host))
			return -EINVAL;
		return resolve_srv(p, addr + 4, tls, why, len);
	}
	/* dns:NAME:PORT */
	colon = strrchr(addr + 4, ':');
	if (!colon || colon == addr + 4 || !colon[1])
		return -EINVAL;
	n = (size_t)(colon - (addr + 4));
	if (n >= sizeof(host) ||
	    strspn(colon + 1, "0123456789") != strlen(colon + 1) ||
	    strlen(colon + 1) > 5 || atoi(colon + 1) < 1 ||
	    atoi(colon + 1) > 65535)
		return -EINVAL;
	memcpy(host, addr + 4, n);
	host[n] = 0;
	return resolve_host(p, host, colon + 1, tls, 0, why, len);
}

/* ---------------------------------------------------------------------- */
/* Probing */

static void place_put(struct place *p)
{
	bool last;

	pthread_mutex_lock(&p->lock);
	last = !--p->refs;
	pthread_mutex_unlock(&p->lock);
	if (!last)
		return;
	for (unsigned int i = 0; i < p->nr; i++) {
		djinn_disconnect(p->ep[i].conn);
		free(p->ep[i].st);
	}
	for (unsigned int i = 0; i < 5; i++) {
		if (p->strs[i]) /* a token among them */
			explicit_bzero(p->strs[i], strlen(p->strs[i]));
		free(p->strs[i]);
	}
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

struct probe {
	struct place *p;
	struct endpoint *e;
};

static void *probe_main(void *arg)
{
	struct probe *pr = arg;
	struct place *p = pr->p;
	struct endpoint *e = pr->e;
	struct djinn_status_info *st = NULL;
	struct djinn_conn *conn = NULL;
	char why[DJINN_MAX_ERROR_MSG] = "";
	int ret;

	free(pr);
	/* every step bounded: a host that accepts and never answers holds
	 * this thread and its connection no longer than the probe */
	ret = __djinn_connect_at(e->dial, e->tls_name, &p->o, p->deadline,
				 &conn);
	if (!ret)
		ret = status_until(conn, &st, p->deadline);
	if (ret)
		snprintf(why, sizeof(why), "%s", djinn_last_error());
	pthread_mutex_lock(&p->lock);
	if (ret || p->abandoned) {
		/* not wanted: closed here, outside the lock */
		pthread_mutex_unlock(&p->lock);
		djinn_disconnect(conn);
		free(st);
		conn = NULL;
		st = NULL;
		pthread_mutex_lock(&p->lock);
	}
	e->conn = conn;
	e->st = st;
	e->err = ret;
	snprintf(e->why, sizeof(e->why), "%s", why);
	e->done = true;
	p->pending--;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	place_put(p);
	return NULL;
}

/* Whether @e has the model @model loaded. */
static bool has_model(const struct endpoint *e, const char *model)
{
	if (!model)
		return false;
	for (unsigned int i = 0; i < e->st->nr_models; i++)
		if (!strcmp(e->st->models[i].name, model))
			return true;
	return false;
}

/*
 * Whether a session that takes @need bytes leaves @e below its pressure
 * warning threshold, with room for it in its tenant's share.
 */
static bool calm_for(const struct endpoint *e, uint64_t need)
{
	return !e->st->pressure && e->st->pressure_room > need &&
	       e->st->tenant_free > need;
}

/* Whether @e takes another session of this tenant at all. */
static bool has_room(const struct endpoint *e)
{
	return e->st->tenant_free &&
	       (!e->st->max_sessions || e->st->sessions < e->st->max_sessions);
}

/*
 * Whether @a is a better place than @b for a session of @model that takes
 * @need bytes, both ready: one with room for it at all; then the lower
 * SRV priority; then left below memory pressure by it (when some host
 * would be: @calm); then with the model loaded; then more memory free for
 * this tenant; then fewer requests queued; then fewer sessions.
 */
static bool place_better(const struct endpoint *a, const struct endpoint *b,
			 const char *model, uint64_t need, bool calm)
{
	bool ma, mb;

	if (has_room(a) != has_room(b))
		return has_room(a);
	if (a->prio != b->prio)
		return a->prio < b->prio;
	if (calm && calm_for(a, need) != calm_for(b, need))
		return calm_for(a, need);
	ma = has_model(a, model) && a->st->tenant_free;
	mb = has_model(b, model) && b->st->tenant_free;
	if (ma != mb)
		return ma;
	if (a->st->tenant_free != b->st->tenant_free)
		return a->st->tenant_free > b->st->tenant_free;
	if (a->st->queued != b->st->queued)
		return a->st->queued < b->st->queued;
	return a->st->sessions < b->st->sessions;
}

static uint64_t probe_ms(void)
{
	const char *e = getenv("DJINN_PROBE_MS");
	long v = e && *e ? strtol(e, NULL, 10) : 0;

	return v > 0 && v <= 600000 ? (uint64_t)v : PROBE_MS_DEFAULT;
}

static int place_start(struct place *p, const struct djinn_connect_opts *o)
{
	const char *src[5] = { DJ_OPT(o, tls_ca), DJ_OPT(o, tls_cert),
			       DJ_OPT(o, tls_key), DJ_OPT(o, token),
			       DJ_OPT(o, model) };

	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->refs = 1;
	if (o)
		memcpy(&p->o, o,
		       o->size < sizeof(p->o) ? o->size : sizeof(p->o));
	p->o.size = sizeof(p->o);
	for (int i = 0; i < 5; i++)
		if (src[i] && !(p->strs[i] = strdup(src[i])))
			return -ENOMEM;
	p->o.tls_ca = p->strs[0];
	p->o.tls_cert = p->strs[1];
	p->o.tls_key = p->strs[2];
	p->o.token = p->strs[3];
	p->o.model = p->strs[4];
	return 0;
}

int __djinn_place(const char *addr, const struct djinn_connect_opts *o,
		  struct djinn_conn **out)
{
	char why[DJINN_MAX_ERROR_MSG] = "", all[DJINN_MAX_ERROR_MSG] = "";
	const char *model, *env;
	struct djinn_conn *rest[PLACE_MAX];
	struct endpoint *best = NULL;
	unsigned int nr_rest = 0;
	struct timespec until;
	uint64_t need = 0;
	bool tls, calm = false;
	struct place *p;
	uint64_t ms;
	int ret;

	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	ret = place_start(p, o);
	if (ret)
		goto out_put;
	model = p->o.model;
	if (!model && (env = getenv("DJINN_MODEL")) && *env)
		model = env;
	tls = p->o.tls_ca || p->o.tls_cert || p->o.tls_key ||
	      (getenv("DJINN_TLS_CA") && *getenv("DJINN_TLS_CA")) ||
	      (getenv("DJINN_TLS_CERT") && *getenv("DJINN_TLS_CERT"));
	ret = resolve(p, addr, tls, why, sizeof(why));
	if (ret == -EINVAL) {
		__djinn_set_last_error("address \"%s\": want dns:NAME:PORT or "
				       "srv:NAME",
				       addr);
		goto out_put;
	}
	if (!ret && !p->nr) {
		snprintf(why, sizeof(why), "%s: no address", addr);
		ret = -EHOSTUNREACH;
	}
	if (ret) {
		__djinn_set_last_error("%s", why);
		dj_err("%s", why);
		goto out_put;
	}
	/* every address at once, each probe over by the deadline */
	ms = probe_ms();
	p->deadline = __djinn_now_ns() + ms * 1000000ull;
	for (unsigned int i = 0; i < p->nr; i++) {
		struct probe *pr = malloc(sizeof(*pr));
		pthread_attr_t attr;
		pthread_t t;

		if (!pr) {
			p->ep[i].done = true;
			p->ep[i].err = -ENOMEM;
			continue;
		}
		pr->p = p;
		pr->e = &p->ep[i];
		pthread_mutex_lock(&p->lock);
		p->refs++;
		p->pending++;
		pthread_mutex_unlock(&p->lock);
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		ret = pthread_create(&t, &attr, probe_main, pr);
		pthread_attr_destroy(&attr);
		if (ret) {
			free(pr);
			pthread_mutex_lock(&p->lock);
			p->refs--;
			p->pending--;
			p->ep[i].done = true;
			p->ep[i].err = -ret;
			pthread_mutex_unlock(&p->lock);
		}
	}
	/* they end by themselves at the deadline: a little more for that */
	ms += 250;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += (time_t)(ms / 1000);
	until.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&p->lock);
	while (p->pending &&
	       pthread_cond_timedwait(&p->cond, &p->lock, &until) != ETIMEDOUT)
		;
	p->abandoned = true;
	/* A session's need, as the hosts see theirs on average (0 before
	 * any has one): a host it would push past its pressure threshold
	 * is passed over where another would stay below it. */
	for (unsigned int i = 0; i < p->nr; i++) {
		const struct endpoint *e = &p->ep[i];

		if (e->done && !e->err && e->st->sessions &&
		    e->st->data_bytes / e->st->sessions > need)
			need = e->st->data_bytes / e->st->sessions;
	}
	for (unsigned int i = 0; i < p->nr; i++) {
		const struct endpoint *e = &p->ep[i];

		if (e->done && !e->err && e->st->ready && calm_for(e, need))
			calm = true;
	}
	for (unsigned int i = 0; i < p->nr; i++) {
		struct endpoint *e = &p->ep[i];
		size_t n = strlen(all);

		if (!e->done || e->err || !e->st->ready) {
			/* libdjinn's messages name the address already */
			bool named = e->done && e->err &&
				     !strncmp(e->why, e->dial, strlen(e->dial));

			if (n < sizeof(all) - 1)
				snprintf(all + n, sizeof(all) - n, "%s%s%s%s",
					 n ? "; " : "", named ? "" : e->dial,
					 named ? "" : ": ",
					 !e->done ? "no answer in time" :
					 e->err	  ? e->why :
						    "not ready");
			continue;
		}
		if (!best || place_better(e, best, model, need, calm))
			best = e;
	}
	if (best) {
		*out = best->conn;
		best->conn = NULL; /* the caller's */
		dj_dbg("%s: %s chosen (%s%s free, %u queued)", addr, best->dial,
		       has_model(best, model) ? "model loaded, " : "", "memory",
		       best->st->queued);
		ret = 0;
	} else {
		__djinn_set_last_error("%s: no djinnd answered: %s", addr, all);
		dj_err("%s: no djinnd answered: %s", addr, all);
		ret = -EHOSTUNREACH;
	}
	/* the others' connections close now, not when a late probe ends */
	for (unsigned int i = 0; i < p->nr; i++) {
		rest[nr_rest] = p->ep[i].conn;
		p->ep[i].conn = NULL;
		nr_rest += !!rest[nr_rest];
	}
	pthread_mutex_unlock(&p->lock);
	for (unsigned int i = 0; i < nr_rest; i++)
		djinn_disconnect(rest[i]);
out_put:
	place_put(p);
	return ret;
}
