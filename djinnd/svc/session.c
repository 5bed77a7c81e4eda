// SPDX-License-Identifier: MIT
/*
 * The session service (svc/svc.h): a new session placed, made and
 * published, and its signals.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "device.h"
#include "svc/devices.h"
#include "svc/model.h"
#include "svc/svc.h"

/* A session refused by a limit: which one, in @msg. */
static void quota_msg(struct session_table *t, const char *tenant, uid_t uid,
		      bool tcp, char *msg, size_t msglen)
{
	if (t->nr >= t->lim.max_sessions)
		snprintf(msg, msglen,
			 "%llu sessions open, the server's limit "
			 "(server.max_sessions)",
			 (unsigned long long)t->nr);
	else if (session_tenant_full(t, tenant))
		snprintf(msg, msglen,
			 "%u sessions open for tenant %s, its quota "
			 "(tenant.%s.sessions)",
			 session_tenant_sessions(t, tenant), tenant, tenant);
	else if (tcp)
		snprintf(msg, msglen,
			 "%u sessions open for tenant %s over TCP, the limit "
			 "(server.max_sessions_per_uid, per tenant for TCP and "
			 "TLS peers)",
			 session_peer_sessions(t, tenant, uid), tenant);
	else
		snprintf(msg, msglen,
			 "%u sessions open for uid %d, the limit "
			 "(server.max_sessions_per_uid)",
			 session_uid_sessions(t, uid), (int)uid);
}

int svc_session_open(struct session_table *t, struct device *devs,
		     unsigned int nr_dev, const struct svc_peer *peer,
		     uint32_t device, const char *label, uint32_t priority,
		     uint64_t lease_ns, uint64_t kid, struct session **out,
		     char *msg, size_t msglen)
{
	uid_t uid = peer->tcp ? (uid_t)-1 : peer->uid;
	struct device *d;
	struct session *s;
	int ret;

	msg[0] = 0;
	d = svc_place(devs, nr_dev, device, msg, msglen);
	if (!d)
		return -ENODEV;
	ret = session_create(t, d, peer->tenant, label, priority, lease_ns, uid,
			     peer->tcp ? 0 : peer->pid, &s);
	if (!ret) {
		s->lease_kid = kid;
		ret = session_publish(t, s);
		if (ret)
			session_put(s);
	}
	if (ret == -EDQUOT)
		quota_msg(t, peer->tenant, uid, peer->tcp, msg, msglen);
	if (ret)
		return ret;
	*out = s;
	return 0;
}

int svc_session_signal(struct session *s, uint32_t phase, uint64_t expected_ns,
		       uint64_t ctx, char *msg, size_t msglen)
{
	int ret;

	if (phase > DJINN_PHASE_IDLE) {
		snprintf(msg, msglen, "unknown phase");
		return -EINVAL;
	}
	ret = sched_signal_check(s->dev->sched, phase, &expected_ns, msg,
				 msglen);
	if (ret)
		return ret;
	if (ctx)
		return svc_ctx_signal(s, ctx, phase, expected_ns, msg, msglen);
	sched_signal(s->dev->sched, &s->se.w, phase, expected_ns);
	return 0;
}
