// SPDX-License-Identifier: MIT
/*
 * The crash journal (net/journal.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <djinn/state.h>

#include "log.h"
#include "server.h"
#include "net/conn.h"
#include "net/fdstore.h"
#include "net/journal.h"
#include "net/restart.h"
#include "model/runtime.h"
#include "svc/devices.h"
#include "svc/state.h"

/* Slots start on a page, past the header's. */
#define SLOT_ALIGN 4096u
/* Commits that fail in a row before the journal is given up. */
#define MAX_FAILS 3

struct journal {
	int fd;
	uint64_t size; /* the file's */
	struct djinn_journal_hdr hdr; /* as written */
	uint64_t cap[2]; /* each slot's room */
	unsigned int fails;
	char name[48]; /* in the store */
	char lname[48]; /* the logits arena's, or "" */
	/* figures, for the log at exit */
	uint64_t commits, ns, bytes;
};

bool journal_gates(uint32_t type)
{
	switch (type) {
	case DJINN_MSG_SESSION_OPEN:
	case DJINN_MSG_SESSION_CLOSE:
	case DJINN_MSG_SESSION_BIND:
	case DJINN_MSG_TENSOR_CREATE:
	case DJINN_MSG_TENSOR_WRITE:
	case DJINN_MSG_TENSOR_RELEASE:
	case DJINN_MSG_TEXT_LOOKUP:
	case DJINN_MSG_GRAPH_SUBMIT:
	case DJINN_MSG_MODEL_OPEN:
	case DJINN_MSG_MODEL_OPEN_UPLOADED:
	case DJINN_MSG_MODEL_CLOSE:
	case DJINN_MSG_CTX_NEW:
	case DJINN_MSG_CTX_FREE:
	case DJINN_MSG_CTX_FORK:
	case DJINN_MSG_CTX_PREFILL:
	case DJINN_MSG_CTX_DECODE:
	case DJINN_MSG_CTX_RESUME:
	case DJINN_MSG_CTX_RESET:
	case DJINN_MSG_CTX_TRUNCATE:
	case DJINN_MSG_ADMIN_KILL:
	case DJINN_MSG_ADMIN_MODEL_EVICT:
	case DJINN_MSG_ADMIN_MODEL_LOAD:
		return true;
	default:
		return false;
	}
}

static int pwrite_all(int fd, const void *p, uint64_t len, uint64_t off)
{
	for (uint64_t done = 0; done < len;) {
		ssize_t n = pwrite(fd, (const uint8_t *)p + done,
				   (size_t)(len - done), (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		done += (uint64_t)n;
	}
	return 0;
}

static uint64_t up(uint64_t n)
{
	return (n + SLOT_ALIGN - 1) & ~(uint64_t)(SLOT_ALIGN - 1);
}

/* The journal's header says no record is in force (@commit 0): a
 * djinnd that finds it restores nothing. */
static void invalidate(struct journal *j)
{
	j->hdr.commit = 0;
	pwrite_all(j->fd, &j->hdr.commit, sizeof(j->hdr.commit),
		   offsetof(struct djinn_journal_hdr, commit));
}

/*
 * @len bytes of record into the slot not in force, then that slot in
 * force: the slot's place first (not read until @commit names it), then
 * @commit in one aligned write. A slot too small moves to the file's end
 * with room to grow. Nothing of @j changes until all is written: a
 * failure, or a crash at any point, leaves the record in force whole.
 */
static int write_slot(struct journal *j, const uint8_t *rec, uint64_t len)
{
	unsigned int s = j->hdr.commit ? (unsigned int)(j->hdr.commit & 1) ^ 1 :
					 0;
	uint64_t off = j->hdr.slot[s].off, cap = j->cap[s], size = j->size;
	uint64_t seq = (j->hdr.commit >> 1) + 1, commit = seq << 1 | s;
	typeof(j->hdr.slot[0]) slot;
	int ret;

	if (!off || cap < len) {
		/* past both slots: the one in force is not touched */
		off = up(size);
		cap = up(len + len / 2);
		if (ftruncate(j->fd, (off_t)(off + cap)))
			return -errno;
		size = off + cap;
	}
	ret = pwrite_all(j->fd, rec, len, off);
	if (ret)
		return ret;
	slot.seq = seq;
	slot.off = off;
	slot.len = len;
	ret = pwrite_all(j->fd, &slot, sizeof(slot),
			 offsetof(struct djinn_journal_hdr, slot) +
				 s * sizeof(slot));
	if (!ret)
		ret = pwrite_all(j->fd, &commit, sizeof(commit),
				 offsetof(struct djinn_journal_hdr, commit));
	/* the file grew either way: a slot moved stays past the other */
	j->size = size;
	if (ret)
		return ret;
	j->hdr.slot[s] = slot;
	j->cap[s] = cap;
	j->hdr.commit = commit;
	return 0;
}

/* The replies that waited for a record go out. */
static void kick(struct server *srv)
{
	struct conn *c, *n;

	list_for_each_entry_safe(c, n, &srv->conns, node)
		if (!list_empty(&c->outq) && !c->sending)
			conn_send_next(c);
}

/*
 * No journal any more: its record is out of date from now on, so none is
 * in force (a crash then starts afresh rather than from it, even before
 * the store has taken in that it should forget it), the store forgets
 * it, the memory that waited for a record is freed and frees wait no
 * more, and the replies that waited go out.
 */
static void end(struct server *srv)
{
	struct journal *j = srv->journal;

	invalidate(j);
	fdstore_forget(j->name);
	if (j->lname[0])
		fdstore_forget(j->lname);
	srv->journal = NULL;
	srv->jdone = UINT64_MAX;
	for (unsigned int i = 0; i < srv->nr_dev; i++)
		vmu_journal_off(srv->dev[i].vmu);
	model_journal_off();
	close(j->fd);
	free(j);
	kick(srv);
}

static void give_up(struct server *srv, const char *why)
{
	log_err("crash journal: %s: given up; a crash now loses the sessions",
		why);
	end(srv);
}

/* A record of the whole state in force: 0, or a negative errno. */
static int commit(struct server *srv)
{
	struct journal *j = srv->journal;
	uint64_t t0 = loop_now(), seq = (j->hdr.commit >> 1) + 1;
	struct state_out o;
	const uint8_t *rec;
	size_t len;
	int ret;

	/* what is freed from here waits for the record after this one */
	for (unsigned int i = 0; i < srv->nr_dev; i++)
		vmu_journal_begin(srv->dev[i].vmu);
	model_journal_begin(seq);
	ret = state_out_begin_journal(&o);
	if (ret)
		return ret;
	ret = svc_state_save(&o, &srv->sessions, srv->dev, srv->nr_dev);
	if (!ret)
		ret = state_out_record(&o, &rec, &len);
	if (!ret)
		ret = write_slot(j, rec, len);
	state_out_abort(&o);
	if (ret)
		return ret;
	srv->jdirty = false;
	srv->jdone++;
	j->commits++;
	j->bytes += len;
	j->ns += loop_now() - t0;
	/* what the record before this one named and this one does not */
	for (unsigned int i = 0; i < srv->nr_dev; i++)
		vmu_journal_done(srv->dev[i].vmu);
	model_journal_done(seq);
	return 0;
}

static bool owed(struct server *srv)
{
	if (srv->jdirty)
		return true;
	for (unsigned int i = 0; i < srv->nr_dev; i++)
		if (vmu_journal_waiting(srv->dev[i].vmu))
			return true;
	return false;
}

void journal_commit(struct server *srv)
{
	struct journal *j = srv->journal;
	int ret;

	if (!j || !owed(srv))
		return;
	ret = commit(srv);
	if (ret) {
		char why[96];

		snprintf(why, sizeof(why), "a record could not be written: %s",
			 strerror(-ret));
		if (++j->fails >= MAX_FAILS)
			give_up(srv, why);
		else
			log_warn("crash journal: %s; trying again", why);
		return;
	}
	j->fails = 0;
	kick(srv);
}

void journal_dirty(struct server *srv)
{
	if (srv->journal)
		srv->jdirty = true;
}

/* A free waits for a record (any thread, locks held): the loop wakes. */
static void wake(void *arg)
{
	loop_notify_post(arg);
}

static void woken(struct loop_notify *n)
{
	(void)n; /* the loop's before_sleep commits */
}

/* Each of @forget (NULL-terminated), a predecessor's journal: the store
 * lets go of it. */
static void forget_all(char **forget)
{
	for (; forget && *forget; forget++)
		fdstore_forget(*forget);
}

int journal_prepare(struct server *srv)
{
	int fd;

	if (!fdstore_present() || srv->cfg.no_crash_journal)
		return 0;
	fd = model_journal_arena();
	if (fd < 0)
		log_err("crash journal: no logits arena: %s; a crash loses "
			"the contexts",
			strerror(-fd));
	return fd < 0 ? fd : 0;
}

int journal_start(struct server *srv, char **forget)
{
	struct journal *j;
	struct timespec ts;
	int ret, lfd;

	if (!fdstore_present() || srv->cfg.no_crash_journal) {
		/* a predecessor's record is out of date from now on */
		forget_all(forget);
		return 0;
	}
	if (!srv->jwake_on) {
		ret = loop_notify_init(&srv->loop, &srv->jwake, "journal",
				       woken);
		if (ret) {
			forget_all(forget);
			return ret;
		}
		loop_notify_start(&srv->jwake);
		srv->jwake_on = true;
	}
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->fd = memfd_create("djinn-journal", MFD_CLOEXEC);
	if (j->fd < 0) {
		ret = -errno;
		free(j);
		return ret;
	}
	j->hdr.magic = DJINN_JOURNAL_MAGIC;
	j->hdr.hdr_size = sizeof(j->hdr);
	j->size = SLOT_ALIGN;
	ret = ftruncate(j->fd, (off_t)j->size) ? -errno : 0;
	if (!ret)
		ret = pwrite_all(j->fd, &j->hdr, sizeof(j->hdr), 0);
	if (ret)
		goto fail;
	/* its own name: a pid may come again (PrivatePIDs=, a pid
	 * namespace), and the store forgets every fd of a name at once */
	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(j->name, sizeof(j->name), JOURNAL_FD_PREFIX "%d-%llx",
		 (int)getpid(),
		 (unsigned long long)ts.tv_sec * 1000000000ull +
			 (unsigned long long)ts.tv_nsec);
	lfd = model_journal_arena();
	if (lfd >= 0)
		journal_logits_name(j->lname, sizeof(j->lname), j->name);
	srv->journal = j;
	srv->jdone = 0;
	/* a GPU's memory is named in no record: its frees need not wait */
	for (unsigned int i = 0; i < srv->nr_dev; i++)
		if (svc_state_in_pool(&srv->dev[i]))
			vmu_journal_on(srv->dev[i].vmu, wake, &srv->jwake);
	/* the first record, before anything is stored: a store that
	 * finds the journal finds a record in it */
	ret = commit(srv);
	if (ret)
		goto undo;
	/* what the records point into, then the journal */
	if (!restart_keep_files(srv) ||
	    (j->lname[0] && !fdstore_keep(j->lname, lfd, false)) ||
	    !fdstore_keep(j->name, j->fd, false))
		ret = -EIO;
	if (ret)
		goto undo;
	forget_all(forget);
	log_notice("crash journal: %s in the fd store; a crash keeps the "
		   "sessions and their tensors",
		   j->name);
	return 0;
undo:
	log_err("crash journal: cannot start: %s; a crash loses the sessions",
		strerror(-ret));
	end(srv);
	forget_all(forget);
	return ret;
fail:
	log_err("crash journal: cannot start: %s; a crash loses the sessions",
		strerror(-ret));
	forget_all(forget);
	close(j->fd);
	free(j);
	return ret;
}

void journal_stop(struct server *srv)
{
	struct journal *j = srv->journal;

	if (!j)
		return;
	if (j->commits)
		log_info("crash journal: %llu records, %llu KiB, %llu us "
			 "each on average",
			 (unsigned long long)j->commits,
			 (unsigned long long)(j->bytes >> 10),
			 (unsigned long long)(j->ns / j->commits / 1000));
	/* djinnd stops, its sessions ended: nothing of them comes back */
	end(srv);
}

void journal_handed_over(struct server *srv, bool pools)
{
	if (!srv->journal)
		return;
	invalidate(srv->journal);
	fdstore_forget(srv->journal->name);
	if (srv->journal->lname[0])
		fdstore_forget(srv->journal->lname);
	if (pools)
		restart_forget_files(srv);
}

void journal_logits_name(char *out, size_t len, const char *journal)
{
	snprintf(out, len, JOURNAL_LOGITS_PREFIX "%s",
		 journal + strlen(JOURNAL_FD_PREFIX));
}

/* ---------------------------------------------------------------------- */
/* The next djinnd's side */

/* A sealed memfd of @len bytes of @p. */
/* Memfd @fd sealed as the restore wants it (svc/state.h): 0, or a
 * negative errno. */
static int seal(int fd)
{
	return fcntl(fd, F_ADD_SEALS,
		     F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) ?
		       -errno :
		       0;
}

static int sealed(const char *name, const void *p, uint64_t len)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int ret;

	if (fd < 0)
		return -errno;
	ret = len ? pwrite_all(fd, p, len, 0) : 0;
	if (!ret)
		ret = seal(fd);
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

/* The largest logits a context's entry may name: 16 M floats. */
#define LOGITS_MAX (64ull << 20)

/*
 * The logits record @rec (@len bytes, a copy of its own) names in the
 * logits arena @lfd (or -1), copied into the new memfd *@data_fd, each
 * context's @logits_off made its offset there. A context whose logits
 * cannot be had (no arena passed, outside it, unreadable) is made lost
 * in the copy, as lost to the crash, rather than the whole record
 * refused. 0, or a negative errno with why in @msg.
 */
static int logits_out(uint8_t *rec, uint64_t len, int lfd, int *data_fd,
		      char *msg, size_t msglen)
{
	struct djinn_state_hdr *h = (void *)rec;
	uint64_t data = 0, asize = 0;
	unsigned int lost = 0;
	struct stat st;
	void *buf = NULL;
	int fd, ret = 0;

	*data_fd = -1;
	fd = memfd_create("djinn-state-data", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (lfd >= 0 && !fstat(lfd, &st))
		asize = (uint64_t)st.st_size;
	for (uint64_t pos = sizeof(*h); h->version >= 6 && pos + 8 <= len;) {
		struct djinn_state_ent *e = (void *)(rec + pos);
		struct djinn_state_obj *o = (void *)(e + 1);
		void *b;

		if (e->len > len - pos - sizeof(*e))
			break; /* the restore refuses the record */
		pos += sizeof(*e) + ((e->len + 7ull) & ~7ull);
		if (e->type != DJINN_STATE_OBJ || e->len < sizeof(*o) ||
		    o->kind != DJINN_STATE_CTX || o->lost || !o->have_logits)
			continue;
		b = o->logits_bytes && o->logits_bytes <= LOGITS_MAX &&
				    o->logits_off <= asize &&
				    o->logits_bytes <= asize - o->logits_off ?
			    realloc(buf, o->logits_bytes) :
			    NULL;
		if (b)
			buf = b;
		if (!b ||
		    pread(lfd, buf, o->logits_bytes, (off_t)o->logits_off) !=
			    (ssize_t)o->logits_bytes) {
			o->lost = DJINN_STATE_LOST_CRASH;
			o->have_logits = 0;
			lost++;
			continue;
		}
		ret = pwrite_all(fd, buf, o->logits_bytes, data);
		if (ret) {
			snprintf(msg, msglen, "copying its logits: %s",
				 strerror(-ret));
			break;
		}
		o->logits_off = data;
		data += up(o->logits_bytes);
	}
	free(buf);
	if (lost)
		log_warn("restart: %u contexts of the crash journal come back "
			 "lost: their logits are not in its logits arena%s",
			 lost, lfd < 0 ? ", which was not passed" : "");
	h->data_size = data;
	if (!ret) {
		ret = ftruncate(fd, (off_t)data) ? -errno : seal(fd);
		if (ret)
			snprintf(msg, msglen, "copying its logits: %s",
				 strerror(-ret));
	}
	if (ret) {
		close(fd);
		return ret;
	}
	*data_fd = fd;
	return 0;
}

int journal_record(int jfd, int lfd, int *rec_fd, int *data_fd, char *msg,
		   size_t msglen)
{
	struct djinn_journal_hdr h;
	struct stat st;
	unsigned int s;
	uint8_t *rec;
	uint64_t off, len;
	ssize_t n;
	int ret;

	if (fstat(jfd, &st) || (uint64_t)st.st_size < sizeof(h) ||
	    (n = pread(jfd, &h, sizeof(h), 0)) != (ssize_t)sizeof(h) ||
	    h.magic != DJINN_JOURNAL_MAGIC || h.hdr_size != sizeof(h)) {
		snprintf(msg, msglen, "not a djinnd crash journal");
		return -EBADMSG;
	}
	if (!h.commit) {
		snprintf(msg, msglen, "the journal holds no record yet");
		return -ENOENT;
	}
	s = (unsigned int)(h.commit & 1);
	off = h.slot[s].off;
	len = h.slot[s].len;
	if (h.slot[s].seq != h.commit >> 1 || off < sizeof(h) ||
	    off > (uint64_t)st.st_size || len > (uint64_t)st.st_size - off ||
	    len < sizeof(struct djinn_state_hdr)) {
		snprintf(msg, msglen,
			 "its record in force (%llu, slot %u) lies outside "
			 "the journal",
			 (unsigned long long)(h.commit >> 1), s);
		return -EBADMSG;
	}
	rec = malloc(len);
	if (!rec)
		return -ENOMEM;
	for (uint64_t done = 0; done < len; done += (uint64_t)n) {
		n = pread(jfd, rec + done, (size_t)(len - done),
			  (off_t)(off + done));
		if (n <= 0) {
			free(rec);
			snprintf(msg, msglen, "reading it: %s",
				 n ? strerror(errno) : "short");
			return n ? -errno : -EIO;
		}
	}
	/* its contexts' logits first: their offsets change */
	ret = logits_out(rec, len, lfd, data_fd, msg, msglen);
	if (ret) {
		free(rec);
		return ret;
	}
	ret = sealed("djinn-state", rec, len);
	free(rec);
	if (ret < 0) {
		close(*data_fd);
		snprintf(msg, msglen, "copying it: %s", strerror(-ret));
		return ret;
	}
	*rec_fd = ret;
	return 0;
}
