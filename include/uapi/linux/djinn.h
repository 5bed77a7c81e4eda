/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR MIT) */
/*
 * djinn.ko: session leases, phase signals and completion rings on
 * /dev/djinn, and the "djinn" generic netlink family.
 *
 * DOC: General ioctl format
 *
 * Every ioctl on /dev/djinn is DJINN_IOC_<NAME>, _IO(DJINN_TYPE, nr) with
 * nr from DJINN_IOC_BASE (DJINN_CMD_* name the generic netlink commands,
 * as the kernel's ynl-gen-c names them): the size is not in the
 * command number but in the struct, which always starts with
 *
 *	__u32 size;	the caller's sizeof(struct), set by the caller
 *	__u32 flags;	DJINN_*_F_* bits of that command
 *
 * A struct only ever grows at its end; a field added later is zero in an
 * older caller's view. The kernel reads @size bytes (copy_struct_from_user)
 * and, for commands that answer, writes back min(@size, its own size).
 * The errno contract, the same for every command:
 *
 *   -ENOTTY	unknown command number (an older module)
 *   -EFAULT	the struct is not readable or writable at the pointer
 *   -EINVAL	@size smaller than the command's first version, an unknown
 *		@flags bit, a non-zero __reserved field, or a bad value (each
 *		struct's kernel-doc says which values are good)
 *   -E2BIG	@size larger than the kernel's struct with non-zero bytes
 *		past its end: a newer caller asks for something this module
 *		does not know
 *   -EPERM	a daemon or admin command without CAP_SYS_ADMIN, or a daemon
 *		command on a file that is not the attached daemon's
 *
 * and, for the commands that name them:
 *
 *   -EBUSY	SESSION_OPEN on a file that has a session or is the
 *		daemon's; DAEMON_ATTACH while a daemon is attached or on a
 *		file with a session
 *   -ENOENT	no live session with that id (ended sessions leave the
 *		table at once)
 *   -ENODEV	a command about this file's session on a file without one
 *   -ETIMEDOUT	HEARTBEAT or SIGNAL on a session whose lease ran out
 *   -ECANCELED	HEARTBEAT or SIGNAL on a session that was killed
 *   -EACCES	SESSION_INFO with DJINN_INFO_F_VERIFY and a wrong token
 *   -EOVERFLOW	POST to a full ring: the record is dropped and counted
 *   -EOPNOTSUPP	POST to a proxy session (proxy sessions have no ring)
 *   -EDQUOT	the session table is full for the caller (module parameters):
 *		SESSION_OPEN when local sessions hold all but the
 *		reserved_proxy_sessions slots of max_sessions, which only
 *		the daemon's proxies take; either open when sessions of both
 *		kinds hold all max_sessions
 *   -EUSERS	SESSION_OPEN by a uid that holds max_sessions_per_uid local
 *		sessions already (without CAP_SYS_RESOURCE or
 *		CAP_SYS_ADMIN); other uids are not affected
 *   -ENOMEM	SESSION_OPEN: the ring (charged to the caller's memory
 *		cgroup) does not fit under that cgroup's limit, or memory
 *		ran out
 *
 * A session counts against these limits from SESSION_OPEN (or PROXY_OPEN)
 * until its file closes (for a proxy: until PROXY_CLOSE or the daemon's
 * file closes), ended or not. A failed command changes nothing.
 *
 * DOC: Sessions
 *
 * Any user may open /dev/djinn and open one session on that file with
 * DJINN_IOC_SESSION_OPEN, up to max_sessions_per_uid sessions per uid, and
 * never in the last reserved_proxy_sessions slots of the table, which
 * only the daemon's proxy sessions take. The session belongs to the open
 * file: when its last reference goes (close(), exit, a crash, SIGKILL; a
 * mapping of the ring holds the file too) the session ends at once with
 * the event "closed". It also ends when its lease runs out without a
 * HEARTBEAT ("expired") or when an administrator or the daemon kills it
 * ("killed"). An ended session leaves the table (its id is -ENOENT to
 * everyone else); its own file still answers SESSION_INFO and still maps
 * the ring, whose flags say why it ended, and poll() reports EPOLLHUP.
 *
 * One process at a time (djinnd) attaches as the daemon with
 * DJINN_IOC_DAEMON_ATTACH. Its file then opens proxy sessions for remote
 * clients (DJINN_IOC_PROXY_OPEN: their own leases, no ring, ended with the
 * daemon's file or by DJINN_IOC_PROXY_CLOSE, which also releases an ended
 * proxy) and posts completion records to local sessions' rings
 * (DJINN_IOC_POST). A session id is below 2^32 and is not given out
 * again before the ids wrap around; tokens are 128 random bits.
 *
 * DOC: Completion ring
 *
 * mmap() of a session file at offset DJINN_MMAP_RING, with exactly the
 * length SESSION_OPEN reported in @ring_bytes, maps its completion ring
 * read-only (a writable or executable mapping is -EPERM, and cannot be
 * made writable later). The daemon produces with DJINN_IOC_POST; the
 * client consumes: it reads @tail with an acquire load, reads the entries
 * from its own head up to @tail at index (head & mask), and gives the slots
 * back by passing its new head in DJINN_IOC_HEARTBEAT (flag
 * DJINN_HEARTBEAT_F_HEAD), which the kernel publishes in the ring's @head
 * with a release store. A POST to a ring holding @entries unconsumed
 * records fails with -EOVERFLOW and counts one more in @overflow, so the
 * client knows how many completions it must recover another way.
 * poll()/epoll on the session file reports EPOLLIN while records are
 * unconsumed and EPOLLHUP once the session ended. The offsets of every
 * field come from SESSION_OPEN, as io_uring's do, so the layout can grow.
 *
 * DOC: Generic netlink
 *
 * The family "djinn" (Documentation/netlink/specs/djinn.yaml) has
 * DJINN_CMD_GET (one session by DJINN_A_SESSION_ID, or a dump of all),
 * DJINN_CMD_KILL and the multicast group "events", on which the module
 * sends DJINN_CMD_OPENED_NTF, CLOSED_NTF, EXPIRED_NTF, KILLED_NTF and
 * SIGNAL_NTF carrying the session's attributes. Events are built only when
 * someone listens. Every command and the group need CAP_NET_ADMIN; KILL
 * also needs CAP_SYS_ADMIN, as the ioctl does.
 */
#ifndef _UAPI_LINUX_DJINN_H
#define _UAPI_LINUX_DJINN_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define DJINN_DEVICE "/dev/djinn"
/* ioctl type 0xDB, numbers from 0x80: the one registered user of 0xDB
 * (drivers/char/mwave, numbers 0x00-0x0F) stays clear. The ioctls are
 * DJINN_IOC_*; DJINN_CMD_* are the generic netlink commands below. */
#define DJINN_TYPE 0xDB
#define DJINN_IOC_BASE 0x80

#define DJINN_TENANT_LEN 64 /* with its NUL: 1 to 63 printable bytes */
#define DJINN_TOKEN_LEN 16
#define DJINN_PRIORITY_MAX 7
#define DJINN_RING_ENTRIES_DEFAULT 256
#define DJINN_RING_ENTRIES_MAX 32768

/* mmap offsets of a session file */
#define DJINN_MMAP_RING 0ULL

/* Capabilities reported by SESSION_OPEN in @features. */
#define DJINN_FEAT_RING (1U << 0) /* the session has a completion ring */
#define DJINN_FEAT_RING_HEAD (1U << 1) /* HEARTBEAT gives back ring slots */

/* ioctl numbers (_IOC_NR of each DJINN_IOC_*) */
enum {
	__DJINN_IOC_SESSION_OPEN = DJINN_IOC_BASE,
	__DJINN_IOC_HEARTBEAT,
	__DJINN_IOC_SIGNAL,
	__DJINN_IOC_SESSION_INFO,
	__DJINN_IOC_DAEMON_ATTACH,
	__DJINN_IOC_PROXY_OPEN,
	__DJINN_IOC_PROXY_CLOSE,
	__DJINN_IOC_POST,
	__DJINN_IOC_KILL,
};

/**
 * struct djinn_ring_offsets - where the ring's fields lie in its mapping
 * @head:        __u32 consumer index, written by the kernel from HEARTBEAT
 * @tail:        __u32 producer index, written by the kernel on POST
 * @mask:        __u32 entries - 1
 * @entries:     __u32 number of entries, a power of two
 * @flags:       __u32 DJINN_RING_F_* bits
 * @overflow:    __u32 records dropped because the ring was full
 * @cqes:        struct djinn_cqe[entries]
 * @__reserved:  zero
 */
struct djinn_ring_offsets {
	__u32 head;
	__u32 tail;
	__u32 mask;
	__u32 entries;
	__u32 flags;
	__u32 overflow;
	__u32 cqes;
	__u32 __reserved;
};

/* ring flags */
#define DJINN_RING_F_EXPIRED (1U << 0) /* the lease ran out */
#define DJINN_RING_F_KILLED (1U << 1) /* killed by the daemon or an admin */
#define DJINN_RING_F_OVERFLOW (1U << 2) /* @overflow is non-zero */

/**
 * struct djinn_cqe - one completion record
 * @user_data: chosen by the daemon (djinnd: the request_id it answers)
 * @res:       result, a negative errno or a non-negative value
 * @flags:     chosen by the daemon
 * @aux:       two more words of the daemon's choosing
 */
struct djinn_cqe {
	__aligned_u64 user_data;
	__s32 res;
	__u32 flags;
	__aligned_u64 aux[2];
};

/**
 * struct djinn_ioc_session_open - DJINN_IOC_SESSION_OPEN
 * @size:         sizeof(struct djinn_ioc_session_open)
 * @flags:        none defined: 0
 * @tenant:       NUL-terminated, 1 to 63 printable ASCII bytes; the
 *                bytes after the NUL must be zero
 * @priority:     0 (lowest) to DJINN_PRIORITY_MAX
 * @ring_entries: in: ring size, 0 for DJINN_RING_ENTRIES_DEFAULT, else
 *                rounded up to a power of two, at most
 *                DJINN_RING_ENTRIES_MAX; out: the size chosen
 * @lease_ns:     in: lease period, 0 for the module's default
 *                (parameter lease_ms); out: the period chosen, clamped to
 *                [1 ms, 1 hour]
 * @session_id:   out: the session's id, never 0
 * @token:        out: 128 random bits the daemon can check the session
 *                against (SESSION_INFO with DJINN_INFO_F_VERIFY)
 * @deadline_ns:  out: CLOCK_MONOTONIC time the lease runs out
 * @ring_bytes:   out: length to mmap at DJINN_MMAP_RING
 * @features:     out: DJINN_FEAT_* bits
 * @ring:         out: offsets of the ring's fields in the mapping
 *
 * The ring (@ring_bytes, up to 1 MiB and a page) and the session are
 * kernel memory charged to the caller's memory cgroup until the file
 * closes. Refused with -EUSERS when the caller's uid is at
 * max_sessions_per_uid, -EDQUOT when the table is full for local
 * sessions, -ENOMEM when the ring does not fit in the memory cgroup.
 */
struct djinn_ioc_session_open {
	__u32 size;
	__u32 flags;
	char tenant[DJINN_TENANT_LEN];
	__u32 priority;
	__u32 ring_entries;
	__aligned_u64 lease_ns;
	__aligned_u64 session_id;
	__u8 token[DJINN_TOKEN_LEN];
	__aligned_u64 deadline_ns;
	__u32 ring_bytes;
	__u32 features;
	struct djinn_ring_offsets ring;
};
#define DJINN_IOC_SESSION_OPEN _IO(DJINN_TYPE, __DJINN_IOC_SESSION_OPEN)

/**
 * struct djinn_ioc_heartbeat - DJINN_IOC_HEARTBEAT: renew a lease
 * @size:        sizeof(struct djinn_ioc_heartbeat)
 * @flags:       DJINN_HEARTBEAT_F_HEAD: also give back ring slots
 * @session_id:  0 for this file's session; the daemon names a proxy
 * @ring_head:   with DJINN_HEARTBEAT_F_HEAD, the consumer's new head: at
 *               most the ring's tail and not behind its head (-EINVAL)
 * @__reserved:  zero
 * @deadline_ns: out: the new CLOCK_MONOTONIC deadline
 */
struct djinn_ioc_heartbeat {
	__u32 size;
	__u32 flags;
	__aligned_u64 session_id;
	__u32 ring_head;
	__u32 __reserved;
	__aligned_u64 deadline_ns;
};
#define DJINN_HEARTBEAT_F_HEAD (1U << 0)
#define DJINN_IOC_HEARTBEAT _IO(DJINN_TYPE, __DJINN_IOC_HEARTBEAT)

/* Phases of DJINN_IOC_SIGNAL: the values of enum djinn_phase in
 * include/djinn/proto.h (DJINN_PHASE_IO_WAIT, _COMPUTE, _IDLE). */
enum djinn_signal_phase {
	DJINN_SIGNAL_IO_WAIT = 5,
	DJINN_SIGNAL_COMPUTE = 6,
	DJINN_SIGNAL_IDLE = 7,
};

/**
 * struct djinn_ioc_signal - DJINN_IOC_SIGNAL: what the session does next
 * @size:        sizeof(struct djinn_ioc_signal)
 * @flags:       none defined: 0
 * @session_id:  0 for this file's session; the daemon names a proxy
 * @phase:       enum djinn_signal_phase
 * @__reserved:  zero
 * @expected_ns: how long the phase is expected to last, 0 for unknown;
 *               for IO_WAIT 1 to S64_MAX (else -EINVAL)
 *
 * Sends a SIGNAL_NTF event. Does not renew the lease.
 */
struct djinn_ioc_signal {
	__u32 size;
	__u32 flags;
	__aligned_u64 session_id;
	__u32 phase;
	__u32 __reserved;
	__aligned_u64 expected_ns;
};
#define DJINN_IOC_SIGNAL _IO(DJINN_TYPE, __DJINN_IOC_SIGNAL)

/* Session states (SESSION_INFO, netlink DJINN_A_SESSION_STATE). */
enum djinn_state {
	DJINN_STATE_LIVE = 1,
	DJINN_STATE_CLOSED = 2,
	DJINN_STATE_EXPIRED = 3,
	DJINN_STATE_KILLED = 4,
};

/* Session kinds. */
#define DJINN_SESSION_PROXY (1U << 0) /* held by the daemon */

/**
 * struct djinn_ioc_session_info - DJINN_IOC_SESSION_INFO
 * @size:         sizeof(struct djinn_ioc_session_info)
 * @flags:        DJINN_INFO_F_VERIFY: fail with -EACCES unless @token is
 *                the session's
 * @session_id:   in: 0 for this file's session; another session's id
 *                needs CAP_SYS_ADMIN
 * @token:        in: with DJINN_INFO_F_VERIFY, the token to check
 * @state:        out: enum djinn_state
 * @kind:         out: DJINN_SESSION_* bits
 * @tenant:       out: as opened
 * @priority:     out: as opened
 * @phase:        out: the last SIGNAL's phase, 0 before any
 * @uid:          out: the opener's uid, in the caller's user namespace
 * @pid:          out: the opener's thread-group id, in the caller's pid
 *                namespace (0 if not visible there)
 * @lease_ns:     out: the lease period
 * @deadline_ns:  out: CLOCK_MONOTONIC time the lease runs (or ran) out
 * @expected_ns:  out: the last SIGNAL's expected duration
 * @heartbeats:   out: HEARTBEATs received
 * @signals:      out: SIGNALs received
 * @posts:        out: records posted to its ring
 * @overflow:     out: records dropped because its ring was full
 * @ring_entries: out: its ring's size, 0 for a proxy
 * @__reserved:   zero
 */
struct djinn_ioc_session_info {
	__u32 size;
	__u32 flags;
	__aligned_u64 session_id;
	__u8 token[DJINN_TOKEN_LEN];
	__u32 state;
	__u32 kind;
	char tenant[DJINN_TENANT_LEN];
	__u32 priority;
	__u32 phase;
	__u32 uid;
	__u32 pid;
	__aligned_u64 lease_ns;
	__aligned_u64 deadline_ns;
	__aligned_u64 expected_ns;
	__aligned_u64 heartbeats;
	__aligned_u64 signals;
	__aligned_u64 posts;
	__aligned_u64 overflow;
	__u32 ring_entries;
	__u32 __reserved;
};
#define DJINN_INFO_F_VERIFY (1U << 0)
#define DJINN_IOC_SESSION_INFO _IO(DJINN_TYPE, __DJINN_IOC_SESSION_INFO)

/**
 * struct djinn_ioc_daemon_attach - DJINN_IOC_DAEMON_ATTACH
 * @size:  sizeof(struct djinn_ioc_daemon_attach)
 * @flags: none defined: 0
 *
 * Makes this file the daemon's (CAP_SYS_ADMIN; -EBUSY while another file
 * is attached). The daemon detaches by closing the file, which ends its
 * proxy sessions.
 */
struct djinn_ioc_daemon_attach {
	__u32 size;
	__u32 flags;
};
#define DJINN_IOC_DAEMON_ATTACH _IO(DJINN_TYPE, __DJINN_IOC_DAEMON_ATTACH)

/**
 * struct djinn_ioc_proxy_open - DJINN_IOC_PROXY_OPEN (daemon only)
 * @size:        sizeof(struct djinn_ioc_proxy_open)
 * @flags:       none defined: 0
 * @tenant:      as for SESSION_OPEN
 * @priority:    as for SESSION_OPEN
 * @__reserved:  zero
 * @lease_ns:    in/out, as for SESSION_OPEN
 * @session_id:  out
 * @token:       out
 * @deadline_ns: out
 */
struct djinn_ioc_proxy_open {
	__u32 size;
	__u32 flags;
	char tenant[DJINN_TENANT_LEN];
	__u32 priority;
	__u32 __reserved;
	__aligned_u64 lease_ns;
	__aligned_u64 session_id;
	__u8 token[DJINN_TOKEN_LEN];
	__aligned_u64 deadline_ns;
};
#define DJINN_IOC_PROXY_OPEN _IO(DJINN_TYPE, __DJINN_IOC_PROXY_OPEN)

/**
 * struct djinn_ioc_proxy_close - DJINN_IOC_PROXY_CLOSE (daemon only)
 * @size:       sizeof(struct djinn_ioc_proxy_close)
 * @flags:      none defined: 0
 * @session_id: one of this daemon's proxy sessions, live or ended; a live
 *              one ends as "closed"; either way it is released
 */
struct djinn_ioc_proxy_close {
	__u32 size;
	__u32 flags;
	__aligned_u64 session_id;
};
#define DJINN_IOC_PROXY_CLOSE _IO(DJINN_TYPE, __DJINN_IOC_PROXY_CLOSE)

/**
 * struct djinn_ioc_post - DJINN_IOC_POST (daemon only)
 * @size:       sizeof(struct djinn_ioc_post)
 * @flags:      none defined: 0
 * @session_id: a live local session
 * @cqe:        the record to append to its ring
 * @tail:       out: the ring's tail after the post
 * @__reserved: zero
 */
struct djinn_ioc_post {
	__u32 size;
	__u32 flags;
	__aligned_u64 session_id;
	struct djinn_cqe cqe;
	__u32 tail;
	__u32 __reserved;
};
#define DJINN_IOC_POST _IO(DJINN_TYPE, __DJINN_IOC_POST)

/**
 * struct djinn_ioc_kill - DJINN_IOC_KILL (CAP_SYS_ADMIN)
 * @size:       sizeof(struct djinn_ioc_kill)
 * @flags:      none defined: 0
 * @session_id: a live session, local or proxy
 */
struct djinn_ioc_kill {
	__u32 size;
	__u32 flags;
	__aligned_u64 session_id;
};
#define DJINN_IOC_KILL _IO(DJINN_TYPE, __DJINN_IOC_KILL)

/* ---------------------------------------------------------------------- */
/* Generic netlink: Documentation/netlink/specs/djinn.yaml */

#define DJINN_FAMILY_NAME "djinn"
#define DJINN_FAMILY_VERSION 1
#define DJINN_MCGRP_EVENTS "events"

enum {
	DJINN_A_SESSION_UNSPEC,
	DJINN_A_SESSION_PAD,
	DJINN_A_SESSION_ID, /* u64 */
	DJINN_A_SESSION_TENANT, /* string */
	DJINN_A_SESSION_PRIORITY, /* u32 */
	DJINN_A_SESSION_KIND, /* u32: DJINN_SESSION_* */
	DJINN_A_SESSION_STATE, /* u32: enum djinn_state */
	DJINN_A_SESSION_UID, /* u32, in the initial user namespace */
	DJINN_A_SESSION_PID, /* u32, in the initial pid namespace */
	DJINN_A_SESSION_LEASE_NS, /* u64 */
	DJINN_A_SESSION_DEADLINE_NS, /* u64 */
	DJINN_A_SESSION_PHASE, /* u32: enum djinn_signal_phase */
	DJINN_A_SESSION_EXPECTED_NS, /* u64 */
	DJINN_A_SESSION_HEARTBEATS, /* u64 */
	DJINN_A_SESSION_SIGNALS, /* u64 */
	DJINN_A_SESSION_POSTS, /* u64 */
	DJINN_A_SESSION_OVERFLOW, /* u64 */
	DJINN_A_SESSION_TIME_NS, /* u64: CLOCK_MONOTONIC when sent */

	__DJINN_A_SESSION_MAX,
	DJINN_A_SESSION_MAX = (__DJINN_A_SESSION_MAX - 1)
};

enum {
	DJINN_CMD_UNSPEC,
	DJINN_CMD_GET,
	DJINN_CMD_KILL,
	DJINN_CMD_OPENED_NTF,
	DJINN_CMD_CLOSED_NTF,
	DJINN_CMD_EXPIRED_NTF,
	DJINN_CMD_KILLED_NTF,
	DJINN_CMD_SIGNAL_NTF,

	__DJINN_CMD_MAX,
	DJINN_CMD_MAX = (__DJINN_CMD_MAX - 1)
};

#endif /* _UAPI_LINUX_DJINN_H */
