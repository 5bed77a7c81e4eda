// SPDX-License-Identifier: GPL-2.0
/*
 * The "djinn" generic netlink family: get and dump sessions, kill one,
 * and the "events" multicast group. Described in
 * Documentation/netlink/specs/djinn.yaml; after net/handshake/netlink.c.
 */
#include <linux/capability.h>
#include <linux/cred.h>
#include <net/genetlink.h>
#include <net/net_namespace.h>

#include "djinn_priv.h"

static const struct nla_policy djinn_session_policy[DJINN_A_SESSION_MAX + 1] = {
	[DJINN_A_SESSION_ID] = { .type = NLA_U64 },
};

static const struct genl_multicast_group djinn_mcgrps[] = {
	{ .name = DJINN_MCGRP_EVENTS, DJINN_MCGRP_FLAGS_INIT },
};
#define DJINN_MCGRP_EVENTS_IDX 0

static struct genl_family djinn_nl_family;

/* One session's attributes. Takes s->lock for a consistent snapshot;
 * allocates nothing. */
static int djinn_nl_fill(struct sk_buff *skb, struct djinn_session *s,
			 u32 portid, u32 seq, int flags, u8 cmd)
{
	void *hdr;
	int ret = 0;

	hdr = genlmsg_put(skb, portid, seq, &djinn_nl_family, flags, cmd);
	if (!hdr)
		return -EMSGSIZE;

	spin_lock(&s->lock);
	if (nla_put_u64_64bit(skb, DJINN_A_SESSION_ID, s->id,
			      DJINN_A_SESSION_PAD) ||
	    nla_put_string(skb, DJINN_A_SESSION_TENANT, s->tenant) ||
	    nla_put_u32(skb, DJINN_A_SESSION_PRIORITY, s->priority) ||
	    nla_put_u32(skb, DJINN_A_SESSION_KIND, s->kind) ||
	    nla_put_u32(skb, DJINN_A_SESSION_STATE, s->state) ||
	    nla_put_u32(skb, DJINN_A_SESSION_UID,
			from_kuid_munged(&init_user_ns, s->uid)) ||
	    nla_put_u32(skb, DJINN_A_SESSION_PID, pid_nr(s->pid)) ||
	    nla_put_u64_64bit(skb, DJINN_A_SESSION_LEASE_NS, s->lease_ns,
			      DJINN_A_SESSION_PAD) ||
	    nla_put_u64_64bit(skb, DJINN_A_SESSION_DEADLINE_NS,
			      ktime_to_ns(s->deadline), DJINN_A_SESSION_PAD) ||
	    nla_put_u32(skb, DJINN_A_SESSION_PHASE, s->phase) ||
	    nla_put_u64_64bit(skb, DJINN_A_SESSION_EXPECTED_NS, s->expected_ns,
			      DJINN_A_SESSION_PAD) ||
	    nla_put_u64_64bit(skb, DJINN_A_SESSION_HEARTBEATS, s->heartbeats,
			      DJINN_A_SESSION_PAD) ||
	    nla_put_u64_64bit(skb, DJINN_A_SESSION_SIGNALS, s->signals,
			      DJINN_A_SESSION_PAD) ||
	    nla_put_u64_64bit(skb, DJINN_A_SESSION_POSTS, s->posts,
			      DJINN_A_SESSION_PAD) ||
	    nla_put_u64_64bit(skb, DJINN_A_SESSION_OVERFLOW, s->overflow,
			      DJINN_A_SESSION_PAD) ||
	    nla_put_u64_64bit(skb, DJINN_A_SESSION_TIME_NS, ktime_get_ns(),
			      DJINN_A_SESSION_PAD))
		ret = -EMSGSIZE;
	spin_unlock(&s->lock);
	if (ret) {
		genlmsg_cancel(skb, hdr);
		return ret;
	}
	genlmsg_end(skb, hdr);
	return 0;
}

/* What djinn_nl_fill() puts, at most. */
static size_t djinn_nl_size(void)
{
	return nla_total_size_64bit(sizeof(u64)) * 9 + /* id .. time-ns */
	       nla_total_size(DJINN_TENANT_LEN) + /* tenant */
	       nla_total_size(sizeof(u32)) * 6; /* priority .. phase */
}

/* An event to the "events" group, built only when someone listens. */
void djinn_nl_event(struct djinn_session *s, u8 cmd)
{
	struct sk_buff *skb;

	if (!genl_has_listeners(&djinn_nl_family, &init_net,
				DJINN_MCGRP_EVENTS_IDX))
		return;
	skb = genlmsg_new(djinn_nl_size(), GFP_KERNEL);
	if (!skb)
		return;
	if (djinn_nl_fill(skb, s, 0, 0, 0, cmd)) {
		nlmsg_free(skb);
		return;
	}
	genlmsg_multicast(&djinn_nl_family, skb, 0, DJINN_MCGRP_EVENTS_IDX,
			  GFP_KERNEL);
}

static struct djinn_session *djinn_nl_session(struct genl_info *info)
{
	struct djinn_session *s;

	if (GENL_REQ_ATTR_CHECK(info, DJINN_A_SESSION_ID))
		return ERR_PTR(-EINVAL);
	s = djinn_session_get(nla_get_u64(info->attrs[DJINN_A_SESSION_ID]));
	if (!s) {
		NL_SET_ERR_MSG_ATTR(info->extack,
				    info->attrs[DJINN_A_SESSION_ID],
				    "no live session with this id");
		return ERR_PTR(-ENOENT);
	}
	return s;
}

static int djinn_nl_get_doit(struct sk_buff *skb, struct genl_info *info)
{
	struct djinn_session *s;
	struct sk_buff *msg;
	int ret;

	s = djinn_nl_session(info);
	if (IS_ERR(s))
		return PTR_ERR(s);
	msg = genlmsg_new(djinn_nl_size(), GFP_KERNEL);
	if (!msg) {
		ret = -ENOMEM;
		goto out_put;
	}
	ret = djinn_nl_fill(msg, s, info->snd_portid, info->snd_seq, 0,
			    DJINN_CMD_GET);
	if (ret) {
		nlmsg_free(msg);
		goto out_put;
	}
	ret = genlmsg_reply(msg, info);
out_put:
	djinn_session_put(s);
	return ret;
}

struct djinn_dump_arg {
	struct sk_buff *skb;
	struct netlink_callback *cb;
};

static int djinn_nl_dump_one(struct djinn_session *s, void *arg)
{
	struct djinn_dump_arg *d = arg;

	return djinn_nl_fill(d->skb, s, NETLINK_CB(d->cb->skb).portid,
			     d->cb->nlh->nlmsg_seq, NLM_F_MULTI, DJINN_CMD_GET);
}

static int djinn_nl_get_dumpit(struct sk_buff *skb, struct netlink_callback *cb)
{
	struct djinn_dump_arg d = { .skb = skb, .cb = cb };
	unsigned long pos = cb->args[0];
	int ret;

	ret = djinn_sessions_walk(&pos, djinn_nl_dump_one, &d);
	cb->args[0] = pos;
	/* A full skb ends this part of the dump; the next starts at pos. */
	if (ret == -EMSGSIZE && skb->len)
		return skb->len;
	if (ret)
		return ret;
	return skb->len;
}

static int djinn_nl_kill_doit(struct sk_buff *skb, struct genl_info *info)
{
	struct djinn_session *s;
	bool ended;

	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	s = djinn_nl_session(info);
	if (IS_ERR(s))
		return PTR_ERR(s);
	ended = djinn_session_end(s, DJINN_STATE_KILLED);
	djinn_session_put(s);
	return ended ? 0 : -ENOENT;
}

static const struct genl_small_ops djinn_nl_ops[] = {
	{
		.cmd = DJINN_CMD_GET,
		.flags = GENL_ADMIN_PERM,
		.doit = djinn_nl_get_doit,
		.dumpit = djinn_nl_get_dumpit,
	},
	{
		.cmd = DJINN_CMD_KILL,
		.flags = GENL_ADMIN_PERM,
		.doit = djinn_nl_kill_doit,
	},
};

static struct genl_family djinn_nl_family __ro_after_init = {
	.name = DJINN_FAMILY_NAME,
	.version = DJINN_FAMILY_VERSION,
	.maxattr = DJINN_A_SESSION_MAX,
	.policy = djinn_session_policy,
	.module = THIS_MODULE,
	.small_ops = djinn_nl_ops,
	.n_small_ops = ARRAY_SIZE(djinn_nl_ops),
	DJINN_GENL_RESV_START_OP(DJINN_CMD_KILL + 1).mcgrps = djinn_mcgrps,
	.n_mcgrps = ARRAY_SIZE(djinn_mcgrps),
};

int djinn_nl_init(void)
{
	return genl_register_family(&djinn_nl_family);
}

void djinn_nl_exit(void)
{
	genl_unregister_family(&djinn_nl_family);
}
