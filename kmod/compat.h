/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Kernel API drift between 5.15 and current kernels, in one place. Each
 * entry names the kernel that changed the API; the module's code uses the
 * newest spelling and this file supplies it on older kernels.
 */
#ifndef DJINN_COMPAT_H
#define DJINN_COMPAT_H

#include <linux/version.h>
#include <linux/hrtimer.h>
#include <linux/mm.h>
#include <net/genetlink.h>

/* 6.3: vm_flags became read-only behind vm_flags_set()/vm_flags_clear(). */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 3, 0)
static inline void djinn_vm_flags_set(struct vm_area_struct *vma,
				      unsigned long flags)
{
	vma->vm_flags |= flags;
}

static inline void djinn_vm_flags_clear(struct vm_area_struct *vma,
					unsigned long flags)
{
	vma->vm_flags &= ~flags;
}
#else
#define djinn_vm_flags_set vm_flags_set
#define djinn_vm_flags_clear vm_flags_clear
#endif

/* 6.13: hrtimer_setup() sets the callback with the timer (hrtimer_init()
 * went away in 6.15). */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 13, 0)
static inline void
djinn_hrtimer_setup(struct hrtimer *t,
		    enum hrtimer_restart (*fn)(struct hrtimer *),
		    clockid_t clock, enum hrtimer_mode mode)
{
	hrtimer_init(t, clock, mode);
	t->function = fn;
}
#else
#define djinn_hrtimer_setup hrtimer_setup
#endif

/* 6.1: genetlink checks the reserved header bytes of commands from
 * resv_start_op on; before, the field does not exist. */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 1, 0)
#define DJINN_GENL_RESV_START_OP(op) .resv_start_op = (op),
#else
#define DJINN_GENL_RESV_START_OP(op)
#endif

/* 6.7 (and stable backports, Debian's 6.1 among them): multicast groups
 * can demand a capability to join. Kernels without it let any user
 * listen to "events"; the documentation says so. */
#ifdef GENL_MCAST_CAP_NET_ADMIN
#define DJINN_MCGRP_FLAGS_INIT .flags = GENL_MCAST_CAP_NET_ADMIN,
#else
#define DJINN_MCGRP_FLAGS_INIT
#endif

/* 6.0: GENL_REQ_ATTR_CHECK() names a missing required attribute. */
#ifndef GENL_REQ_ATTR_CHECK
#define GENL_REQ_ATTR_CHECK(info, attr) (!(info)->attrs[(attr)])
#endif

/* 6.12: timer_container_of() replaced from_timer(); 6.16 renames
 * del_timer_sync(): the module uses hrtimers only, so neither matters.
 * 6.12: no_llseek is gone: the module calls nonseekable_open() instead. */

#endif /* DJINN_COMPAT_H */
