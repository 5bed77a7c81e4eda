// SPDX-License-Identifier: GPL-2.0
/*
 * djinn.ko: the /dev/djinn misc device.
 *
 * One table of ioctls indexed by command number, each entry with the
 * struct's size (for copy_struct_from_user()), its first version's size,
 * the flags it knows and who may call it; one path copies every struct in
 * and checks what all commands share. After drivers/iommu/iommufd/main.c.
 */
#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/poll.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/vmalloc.h>
#include <crypto/algapi.h>

#include "djinn_priv.h"

static DEFINE_MUTEX(djinn_daemon_lock);
static struct djinn_file *djinn_daemon;

/* Every struct that crosses the boundary, at the size it has. */
static_assert(sizeof(struct djinn_ring_offsets) == 32);
static_assert(sizeof(struct djinn_cqe) == 32);
static_assert(sizeof(struct djinn_ioc_session_open) == 160);
static_assert(sizeof(struct djinn_ioc_heartbeat) == 32);
static_assert(sizeof(struct djinn_ioc_signal) == 32);
static_assert(sizeof(struct djinn_ioc_session_info) == 184);
static_assert(sizeof(struct djinn_ioc_daemon_attach) == 8);
static_assert(sizeof(struct djinn_ioc_proxy_open) == 120);
static_assert(sizeof(struct djinn_ioc_proxy_close) == 16);
static_assert(sizeof(struct djinn_ioc_post) == 56);
static_assert(sizeof(struct djinn_ioc_kill) == 16);

struct djinn_ucmd {
	struct djinn_file *df;
	void __user *ubuffer;
	u32 user_size;
	void *cmd;
};

/* Copy the answer back: as much of it as the caller's struct holds. */
static int djinn_ucmd_respond(struct djinn_ucmd *uc, size_t size)
{
	if (copy_to_user(uc->ubuffer, uc->cmd,
			 min_t(size_t, uc->user_size, size)))
		return -EFAULT;
	return 0;
}

static bool djinn_is_admin(struct djinn_file *df)
{
	return READ_ONCE(df->daemon) || capable(CAP_SYS_ADMIN);
}

/* This file's session, or NULL. Set once under df->lock. */
static struct djinn_session *djinn_file_session(struct djinn_file *df)
{
	return smp_load_acquire(&df->session);
}

/*
 * The session a command names: 0 is this file's own (even ended); any
 * other id must be live in the table and owned by this file (a proxy of
 * the daemon's) unless @admin_ok and the caller is an admin. Returns a
 * reference.
 */
static struct djinn_session *djinn_resolve(struct djinn_file *df, u64 id,
					   bool admin_ok, int *err)
{
	struct djinn_session *s;

	if (!id) {
		s = djinn_file_session(df);
		if (!s) {
			*err = -ENODEV;
			return NULL;
		}
		kref_get(&s->ref);
		return s;
	}
	s = djinn_session_get(id);
	if (s && s->owner != df && !(admin_ok && djinn_is_admin(df))) {
		djinn_session_put(s);
		s = NULL;
	}
	if (!s)
		*err = -ENOENT;
	return s;
}

static int djinn_open_args(struct djinn_open_args *a, const char *tenant,
			   u32 priority, u64 lease_ns, u32 ring_entries)
{
	if (djinn_tenant_valid(tenant) || priority > DJINN_PRIORITY_MAX ||
	    ring_entries > DJINN_RING_ENTRIES_MAX)
		return -EINVAL;
	a->tenant = tenant;
	a->priority = priority;
	a->lease_ns = lease_ns;
	a->ring_entries = ring_entries;
	return 0;
}

static int djinn_ioc_session_open(struct djinn_ucmd *uc)
{
	struct djinn_ioc_session_open *cmd = uc->cmd;
	struct djinn_file *df = uc->df;
	struct djinn_open_args a = {};
	struct djinn_session *s;
	int ret;

	ret = djinn_open_args(&a, cmd->tenant, cmd->priority, cmd->lease_ns,
			      cmd->ring_entries);
	if (ret)
		return ret;

	mutex_lock(&df->lock);
	if (df->session || df->daemon) {
		ret = -EBUSY;
		goto out_unlock;
	}
	s = djinn_session_create(df, &a);
	if (IS_ERR(s)) {
		ret = PTR_ERR(s);
		goto out_unlock;
	}
	ret = djinn_session_reserve(s);
	if (ret)
		goto out_put;

	cmd->ring_entries = s->ring_entries;
	cmd->lease_ns = s->lease_ns;
	cmd->session_id = s->id;
	memcpy(cmd->token, s->token, sizeof(cmd->token));
	/* The deadline the lease will have: publish starts it a moment
	 * later, so this is at most that early. */
	cmd->deadline_ns = ktime_get_ns() + s->lease_ns;
	cmd->ring_bytes = s->ring_bytes;
	cmd->features = DJINN_FEAT_RING | DJINN_FEAT_RING_HEAD;
	djinn_session_fill_ring_offsets(&cmd->ring);
	ret = djinn_ucmd_respond(uc, sizeof(*cmd));
	if (ret)
		goto out_unreserve;

	djinn_session_publish(s);
	smp_store_release(&df->session, s); /* the owner's reference */
	mutex_unlock(&df->lock);
	return 0;

out_unreserve:
	djinn_session_unreserve(s);
	goto out_unlock;
out_put:
	s->state = DJINN_STATE_CLOSED;
	djinn_session_put(s);
out_unlock:
	mutex_unlock(&df->lock);
	return ret;
}

static int djinn_ioc_heartbeat(struct djinn_ucmd *uc)
{
	struct djinn_ioc_heartbeat *cmd = uc->cmd;
	bool set_head = cmd->flags & DJINN_HEARTBEAT_F_HEAD;
	struct djinn_session *s;
	int ret;

	if (cmd->__reserved || (!set_head && cmd->ring_head))
		return -EINVAL;
	s = djinn_resolve(uc->df, cmd->session_id, false, &ret);
	if (!s)
		return ret;
	ret = djinn_session_renew(s, set_head, cmd->ring_head,
				  &cmd->deadline_ns);
	djinn_session_put(s);
	if (ret)
		return ret;
	return djinn_ucmd_respond(uc, sizeof(*cmd));
}

static int djinn_ioc_signal(struct djinn_ucmd *uc)
{
	struct djinn_ioc_signal *cmd = uc->cmd;
	struct djinn_session *s;
	int ret;

	if (cmd->__reserved)
		return -EINVAL;
	switch (cmd->phase) {
	case DJINN_SIGNAL_IO_WAIT:
		/* the daemon's rule: a wait says how long, and a length
		 * (not a negative one converted) */
		if (!cmd->expected_ns || cmd->expected_ns > S64_MAX)
			return -EINVAL;
		break;
	case DJINN_SIGNAL_COMPUTE:
	case DJINN_SIGNAL_IDLE:
		break;
	default:
		return -EINVAL;
	}
	s = djinn_resolve(uc->df, cmd->session_id, false, &ret);
	if (!s)
		return ret;
	ret = djinn_session_signal(s, cmd->phase, cmd->expected_ns);
	djinn_session_put(s);
	return ret;
}

/* One of the daemon's proxies, live or ended, with a reference. */
static struct djinn_session *djinn_find_proxy(struct djinn_file *df, u64 id)
{
	struct djinn_session *s;

	mutex_lock(&df->lock);
	list_for_each_entry(s, &df->proxies, proxy_node) {
		if (s->id == id) {
			kref_get(&s->ref);
			mutex_unlock(&df->lock);
			return s;
		}
	}
	mutex_unlock(&df->lock);
	return NULL;
}

static int djinn_ioc_session_info(struct djinn_ucmd *uc)
{
	struct djinn_ioc_session_info *cmd = uc->cmd;
	bool verify = cmd->flags & DJINN_INFO_F_VERIFY;
	struct djinn_session *s = NULL;
	int ret;

	if (cmd->__reserved ||
	    (!verify && memchr_inv(cmd->token, 0, sizeof(cmd->token))))
		return -EINVAL;
	if (cmd->session_id && READ_ONCE(uc->df->daemon))
		s = djinn_find_proxy(uc->df, cmd->session_id);
	if (!s)
		s = djinn_resolve(uc->df, cmd->session_id, true, &ret);
	if (!s)
		return ret;
	if (verify && crypto_memneq(cmd->token, s->token, sizeof(s->token))) {
		ret = -EACCES;
		goto out_put;
	}

	spin_lock(&s->lock);
	cmd->state = s->state;
	cmd->kind = s->kind;
	memcpy(cmd->tenant, s->tenant, sizeof(cmd->tenant));
	cmd->priority = s->priority;
	cmd->phase = s->phase;
	cmd->lease_ns = s->lease_ns;
	cmd->deadline_ns = ktime_to_ns(s->deadline);
	cmd->expected_ns = s->expected_ns;
	cmd->heartbeats = s->heartbeats;
	cmd->signals = s->signals;
	cmd->posts = s->posts;
	cmd->overflow = s->overflow;
	cmd->ring_entries = s->ring_entries;
	spin_unlock(&s->lock);
	cmd->uid = from_kuid_munged(current_user_ns(), s->uid);
	cmd->pid = pid_vnr(s->pid);
	ret = djinn_ucmd_respond(uc, sizeof(*cmd));
out_put:
	djinn_session_put(s);
	return ret;
}

static int djinn_ioc_daemon_attach(struct djinn_ucmd *uc)
{
	struct djinn_file *df = uc->df;
	int ret = 0;

	if (!capable(CAP_SYS_ADMIN))
		return -EPERM;
	mutex_lock(&df->lock);
	mutex_lock(&djinn_daemon_lock);
	if (df->session || djinn_daemon) {
		ret = -EBUSY;
	} else {
		djinn_daemon = df;
		WRITE_ONCE(df->daemon, true);
	}
	mutex_unlock(&djinn_daemon_lock);
	mutex_unlock(&df->lock);
	return ret;
}

static int djinn_ioc_proxy_open(struct djinn_ucmd *uc)
{
	struct djinn_ioc_proxy_open *cmd = uc->cmd;
	struct djinn_file *df = uc->df;
	struct djinn_open_args a = {};
	struct djinn_session *s;
	int ret;

	if (cmd->__reserved)
		return -EINVAL;
	ret = djinn_open_args(&a, cmd->tenant, cmd->priority, cmd->lease_ns, 0);
	if (ret)
		return ret;
	a.kind = DJINN_SESSION_PROXY;

	s = djinn_session_create(df, &a);
	if (IS_ERR(s))
		return PTR_ERR(s);
	ret = djinn_session_reserve(s);
	if (ret)
		goto out_put;
	cmd->lease_ns = s->lease_ns;
	cmd->session_id = s->id;
	memcpy(cmd->token, s->token, sizeof(cmd->token));
	cmd->deadline_ns = ktime_get_ns() + s->lease_ns;
	ret = djinn_ucmd_respond(uc, sizeof(*cmd));
	if (ret) {
		djinn_session_unreserve(s);
		return ret;
	}
	/* In the table before on the list: PROXY_CLOSE from another thread
	 * must not find a session that the table does not hold yet. */
	djinn_session_publish(s);
	mutex_lock(&df->lock);
	list_add_tail(&s->proxy_node, &df->proxies); /* owner's reference */
	mutex_unlock(&df->lock);
	return 0;

out_put:
	s->state = DJINN_STATE_CLOSED;
	djinn_session_put(s);
	return ret;
}

static int djinn_ioc_proxy_close(struct djinn_ucmd *uc)
{
	struct djinn_ioc_proxy_close *cmd = uc->cmd;
	struct djinn_file *df = uc->df;
	struct djinn_session *s, *found = NULL;

	mutex_lock(&df->lock);
	list_for_each_entry(s, &df->proxies, proxy_node) {
		if (s->id == cmd->session_id) {
			list_del_init(&s->proxy_node);
			found = s;
			break;
		}
	}
	mutex_unlock(&df->lock);
	if (!found)
		return -ENOENT;
	djinn_session_release_owner(found);
	return 0;
}

static int djinn_ioc_post(struct djinn_ucmd *uc)
{
	struct djinn_ioc_post *cmd = uc->cmd;
	struct djinn_session *s;
	int ret;

	if (cmd->__reserved)
		return -EINVAL;
	s = djinn_session_get(cmd->session_id);
	if (!s)
		return -ENOENT;
	ret = djinn_session_post(s, &cmd->cqe, &cmd->tail);
	djinn_session_put(s);
	if (ret)
		return ret;
	return djinn_ucmd_respond(uc, sizeof(*cmd));
}

static int djinn_ioc_kill(struct djinn_ucmd *uc)
{
	struct djinn_ioc_kill *cmd = uc->cmd;
	struct djinn_session *s;
	bool ended;

	s = djinn_session_get(cmd->session_id);
	if (!s)
		return -ENOENT;
	ended = djinn_session_end(s, DJINN_STATE_KILLED);
	djinn_session_put(s);
	return ended ? 0 : -ENOENT;
}

union djinn_ucmd_buffer {
	struct djinn_ioc_session_open open;
	struct djinn_ioc_heartbeat heartbeat;
	struct djinn_ioc_signal signal;
	struct djinn_ioc_session_info info;
	struct djinn_ioc_daemon_attach attach;
	struct djinn_ioc_proxy_open proxy_open;
	struct djinn_ioc_proxy_close proxy_close;
	struct djinn_ioc_post post;
	struct djinn_ioc_kill kill;
};

enum djinn_perm {
	DJINN_ANY = 0, /* any opener */
	DJINN_ADMIN, /* the daemon's file or CAP_SYS_ADMIN */
	DJINN_DAEMON, /* the daemon's file */
};

struct djinn_ioctl_op {
	unsigned int size;
	unsigned int min_size;
	unsigned int ioctl_num;
	u32 flags;
	enum djinn_perm perm;
	int (*execute)(struct djinn_ucmd *uc);
};

/*
 * djinn_ioctl() reads every struct's size as the u32 at offset 0 and its
 * flags as the u32 at offset 4: each row checks that its struct has them
 * there, and that its minimum size takes both in.
 */
#define DJINN_IOCTL_OP(_ioctl, _fn, _struct, _last, _flags, _perm)          \
	[_IOC_NR(_ioctl) - DJINN_IOC_BASE] = {                              \
		.size = sizeof(_struct) +                                   \
			BUILD_BUG_ON_ZERO(sizeof(union djinn_ucmd_buffer) < \
					  sizeof(_struct)) +                \
			BUILD_BUG_ON_ZERO(offsetof(_struct, size) != 0) +   \
			BUILD_BUG_ON_ZERO(sizeof_field(_struct, size) !=    \
					  sizeof(u32)) +                    \
			BUILD_BUG_ON_ZERO(offsetof(_struct, flags) != 4) +  \
			BUILD_BUG_ON_ZERO(sizeof_field(_struct, flags) !=   \
					  sizeof(u32)),                     \
		.min_size = offsetofend(_struct, _last) +                   \
			    BUILD_BUG_ON_ZERO(offsetofend(_struct, _last) < \
					      offsetofend(_struct, flags)), \
		.ioctl_num = _ioctl,                                        \
		.flags = _flags,                                            \
		.perm = _perm,                                              \
		.execute = _fn,                                             \
	}

static const struct djinn_ioctl_op djinn_ioctl_ops[] = {
	DJINN_IOCTL_OP(DJINN_IOC_SESSION_OPEN, djinn_ioc_session_open,
		       struct djinn_ioc_session_open, ring, 0, DJINN_ANY),
	DJINN_IOCTL_OP(DJINN_IOC_HEARTBEAT, djinn_ioc_heartbeat,
		       struct djinn_ioc_heartbeat, deadline_ns,
		       DJINN_HEARTBEAT_F_HEAD, DJINN_ANY),
	DJINN_IOCTL_OP(DJINN_IOC_SIGNAL, djinn_ioc_signal,
		       struct djinn_ioc_signal, expected_ns, 0, DJINN_ANY),
	DJINN_IOCTL_OP(DJINN_IOC_SESSION_INFO, djinn_ioc_session_info,
		       struct djinn_ioc_session_info, __reserved,
		       DJINN_INFO_F_VERIFY, DJINN_ANY),
	DJINN_IOCTL_OP(DJINN_IOC_DAEMON_ATTACH, djinn_ioc_daemon_attach,
		       struct djinn_ioc_daemon_attach, flags, 0, DJINN_ANY),
	DJINN_IOCTL_OP(DJINN_IOC_PROXY_OPEN, djinn_ioc_proxy_open,
		       struct djinn_ioc_proxy_open, deadline_ns, 0,
		       DJINN_DAEMON),
	DJINN_IOCTL_OP(DJINN_IOC_PROXY_CLOSE, djinn_ioc_proxy_close,
		       struct djinn_ioc_proxy_close, session_id, 0,
		       DJINN_DAEMON),
	DJINN_IOCTL_OP(DJINN_IOC_POST, djinn_ioc_post, struct djinn_ioc_post,
		       __reserved, 0, DJINN_DAEMON),
	DJINN_IOCTL_OP(DJINN_IOC_KILL, djinn_ioc_kill, struct djinn_ioc_kill,
		       session_id, 0, DJINN_ADMIN),
};

static long djinn_ioctl(struct file *filp, unsigned int cmd, unsigned long arg)
{
	struct djinn_file *df = filp->private_data;
	const struct djinn_ioctl_op *op;
	union djinn_ucmd_buffer buf;
	struct djinn_ucmd uc = {
		.df = df,
		.ubuffer = (void __user *)arg,
		.cmd = &buf,
	};
	unsigned int nr = _IOC_NR(cmd);
	u32 flags;
	int ret;

	if (nr < DJINN_IOC_BASE ||
	    nr - DJINN_IOC_BASE >= ARRAY_SIZE(djinn_ioctl_ops))
		return -ENOTTY;
	op = &djinn_ioctl_ops[nr - DJINN_IOC_BASE];
	if (op->ioctl_num != cmd)
		return -ENOTTY;

	if (get_user(uc.user_size, (u32 __user *)uc.ubuffer))
		return -EFAULT;
	if (uc.user_size < op->min_size)
		return -EINVAL;
	/* copy_struct_from_user() reads every byte past ours for zeros: a
	 * page is more than any version of a command will ever take */
	if (uc.user_size > PAGE_SIZE)
		return -E2BIG;
	ret = copy_struct_from_user(&buf, op->size, uc.ubuffer, uc.user_size);
	if (ret)
		return ret;
	memcpy(&flags, (u8 *)&buf + sizeof(u32), sizeof(flags));
	if (flags & ~op->flags)
		return -EINVAL;

	switch (op->perm) {
	case DJINN_DAEMON:
		if (!READ_ONCE(df->daemon))
			return -EPERM;
		break;
	case DJINN_ADMIN:
		if (!djinn_is_admin(df))
			return -EPERM;
		break;
	case DJINN_ANY:
		break;
	}
	return op->execute(&uc);
}

static int djinn_fops_open(struct inode *inode, struct file *filp)
{
	struct djinn_file *df;

	df = kzalloc(sizeof(*df), GFP_KERNEL_ACCOUNT);
	if (!df)
		return -ENOMEM;
	mutex_init(&df->lock);
	INIT_LIST_HEAD(&df->proxies);
	filp->private_data = df;
	return nonseekable_open(inode, filp);
}

static int djinn_fops_release(struct inode *inode, struct file *filp)
{
	struct djinn_file *df = filp->private_data;
	struct djinn_session *s, *n;

	if (df->session)
		djinn_session_release_owner(df->session);
	list_for_each_entry_safe(s, n, &df->proxies, proxy_node) {
		list_del_init(&s->proxy_node);
		djinn_session_release_owner(s);
	}
	if (df->daemon) {
		mutex_lock(&djinn_daemon_lock);
		djinn_daemon = NULL;
		mutex_unlock(&djinn_daemon_lock);
	}
	mutex_destroy(&df->lock);
	kfree(df);
	return 0;
}

static __poll_t djinn_fops_poll(struct file *filp, poll_table *wait)
{
	struct djinn_session *s = djinn_file_session(filp->private_data);
	__poll_t mask = 0;

	if (!s)
		return EPOLLERR;
	poll_wait(filp, &s->wait, wait);
	spin_lock(&s->lock);
	if (s->ring_tail != s->ring_head)
		mask |= EPOLLIN | EPOLLRDNORM;
	if (s->state != DJINN_STATE_LIVE)
		mask |= EPOLLHUP;
	spin_unlock(&s->lock);
	return mask;
}

/*
 * The ring, read-only, at DJINN_MMAP_RING with its exact length. The ring
 * comes from __vmalloc() (charged to a memory cgroup, session.c), whose
 * area lacks the VM_USERMAP that remap_vmalloc_range() asks for: this is
 * what remap_vmalloc_range() does past that check, each page inserted
 * with vm_insert_page() (as kernel/kcov.c maps its buffer) and the same
 * flags. A failure part-way is undone by mmap(), which unmaps the vma.
 */
static int djinn_fops_mmap(struct file *filp, struct vm_area_struct *vma)
{
	struct djinn_session *s = djinn_file_session(filp->private_data);
	unsigned long off;
	int ret;

	if (!s)
		return -ENODEV;
	if (vma->vm_pgoff != DJINN_MMAP_RING >> PAGE_SHIFT ||
	    vma->vm_end - vma->vm_start != s->ring_bytes)
		return -EINVAL;
	if (vma->vm_flags & (VM_WRITE | VM_EXEC))
		return -EPERM;
	djinn_vm_flags_clear(vma, VM_MAYWRITE | VM_MAYEXEC);
	djinn_vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	for (off = 0; off < s->ring_bytes; off += PAGE_SIZE) {
		ret = vm_insert_page(vma, vma->vm_start + off,
				     vmalloc_to_page(s->ring + off));
		if (ret)
			return ret;
	}
	return 0;
}

static const struct file_operations djinn_fops = {
	.owner = THIS_MODULE,
	.open = djinn_fops_open,
	.release = djinn_fops_release,
	.unlocked_ioctl = djinn_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.poll = djinn_fops_poll,
	.mmap = djinn_fops_mmap,
};

static struct miscdevice djinn_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "djinn",
	.fops = &djinn_fops,
	.mode = 0666,
};

static int __init djinn_init(void)
{
	int ret;

	ret = djinn_nl_init();
	if (ret)
		return ret;
	ret = misc_register(&djinn_misc);
	if (ret)
		goto out_nl;
	return 0;

out_nl:
	djinn_nl_exit();
	return ret;
}

static void __exit djinn_exit(void)
{
	misc_deregister(&djinn_misc);
	djinn_nl_exit();
	djinn_sessions_exit();
}

module_init(djinn_init);
module_exit(djinn_exit);
MODULE_DESCRIPTION("Djinn session leases, phase signals and completion rings");
MODULE_AUTHOR("The Djinn authors");
MODULE_LICENSE("GPL");
MODULE_VERSION("0.1.0");
