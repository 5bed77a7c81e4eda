/* SPDX-License-Identifier: MIT */
/*
 * The crash journal: djinnd's state kept in the fd store at all times,
 * so that a crash (SIGKILL, a segfault) costs its clients a reconnection,
 * not their sessions (include/djinn/state.h, "crash journal", is the
 * file's format; Documentation/admin-guide.rst, "Upgrades and restarts").
 *
 * Under a service manager's fd store (and without --no-crash-journal),
 * journal_start() makes the journal, a memfd, once the restore is over,
 * and stores it ("journal-PID-TIME") with what its records point into: each
 * CPU device's pool and swap arena ("pool-N", "swap-N", which then stay
 * in the store), the contexts' logits arena ("logits-PID-TIME",
 * journal_prepare(), made before the restore) and /dev/djinn's file
 * ("kmod"). From then on:
 *
 *   - A reply to a request that changes what the record holds
 *     (journal_gates(): sessions opened and closed, tensors made, written
 *     and released, graphs run, models and contexts opened and closed,
 *     and every step on a context) waits, in its connection's queue, for
 *     the next record: net/send.c sends it once srv->jdone has reached
 *     its @need. So whatever a client was told is done is in the
 *     journal before it is told.
 *   - Before the I/O loop sleeps, journal_commit() writes a record of
 *     the whole state when one is owed (a gated reply, a session ended,
 *     memory freed that waits for a record: vmu_journal_begin(), whose
 *     free wakes the loop), into the journal's slot not in force, then
 *     makes it the one in force, and sends the replies that waited for
 *     it. A journal whose records fail MAX_FAILS times in a row is given
 *     up: marked as holding none, and forgotten by the store.
 *
 * What a record keeps: every session (id, token, tenant, lease, handle
 * keys and generations), its tensors at their handles, in place in the
 * pool (or the swap arena) where their bytes lie, its models (opened
 * again by name, or made again from an upload's entry), its contexts as
 * their last requests left them (model/runtime.h, "The crash journal":
 * the cache rows in place in the pool, the last logits in place in the
 * logits arena; a step paused at a breakpoint is not kept, and a RESUME
 * is told so), and the graphs' outputs it remembers. Not kept: a GPU's
 * memory (its objects come back lost, and answer -EIO until freed). The
 * memory a record names is never handed out again before a newer record
 * is in force (vmu.h, "The crash journal"; the logits arena likewise): a
 * crash never restores bytes that memory took since. A request in
 * flight at the crash may have run in part, or whole: its client never
 * saw its answer, and libdjinn makes it fail with -ECONNABORTED (or
 * sends it again: reads, writes, releases), as for any connection lost.
 *
 * The next djinnd finds the journal passed at start, copies its record in
 * force into memfds of its own (journal_record(), the logits it names
 * copied out of the arena), and restores it as a planned restart's
 * (net/restart.h), with no connection: clients reconnect and attach their
 * sessions by token. Once its own journal is stored, the store forgets
 * its predecessor's, and its logits arena. I/O thread.
 */
#ifndef DJINN_NET_JOURNAL_H
#define DJINN_NET_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct server;

/* The prefix of a journal's name in the store, and of its logits
 * arena's (journal_logits_name()). */
#define JOURNAL_FD_PREFIX "journal-"
#define JOURNAL_LOGITS_PREFIX "logits-"

/* Before the restore: the contexts' logits arena (model/runtime.h, "The
 * crash journal"), if djinnd runs under an fd store and the journal is
 * not turned off, so that the contexts restored keep their logits there
 * too: 0, or a negative errno (logged; a crash then loses the contexts). */
int journal_prepare(struct server *srv);
/* Start the journal, if djinnd runs under an fd store and the journal
 * is not turned off: 0, or a negative errno (logged; djinnd serves on,
 * a crash losing its sessions as before). @forget: predecessors'
 * journals (NULL-terminated, or NULL), which the store forgets once this
 * one's is in. */
int journal_start(struct server *srv, char **forget);
/* Before the loop sleeps: a record, if one is owed. */
void journal_commit(struct server *srv);
/* A change no reply acknowledges (a session ended by its lease, an
 * admin): the next record has it. */
void journal_dirty(struct server *srv);
/* Whether the reply to a request of @type waits for the next record. */
bool journal_gates(uint32_t type);
/* The record in force in journal @jfd, as a planned restart's two
 * memfds (sealed), the logits its contexts name copied from the journal's
 * logits arena @lfd (-1: none passed) into state-data: 0; -ENOENT when
 * it holds none yet; else a negative errno with why in @msg. */
int journal_record(int jfd, int lfd, int *rec_fd, int *data_fd, char *msg,
		   size_t msglen);
/* The name of journal @journal's logits arena in the store. */
void journal_logits_name(char *out, size_t len, const char *journal);
/* djinnd stops, its sessions ended: the journal holds no record any
 * more, the store forgets it, and replies go out as they are. */
void journal_stop(struct server *srv);
/* djinnd has handed its state over (a planned restart) and exits: its
 * journal holds no record any more and the store forgets it (the
 * successor's record is newer); with @pools, the pools and /dev/djinn's
 * file too (a --handover successor, which did not take them from the
 * store, puts them there again). */
void journal_handed_over(struct server *srv, bool pools);

#endif /* DJINN_NET_JOURNAL_H */
