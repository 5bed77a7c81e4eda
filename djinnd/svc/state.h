/* SPDX-License-Identifier: MIT */
/*
 * The state record a djinnd hands the next at a planned restart
 * (include/djinn/state.h is its format): writing it, reading it back,
 * and the sessions and tensors in it.
 *
 * Writing: state_out_begin() with the bytes of data it will hold (the
 * record itself grows as entries are added), state_out_ent() for each
 * entry, state_out_data() for room in "state-data", state_out_end() for
 * the two memfds. Reading: state_in_open() maps them and checks the
 * whole record (version, sizes, every entry's length and data range)
 * before anything is restored; state_in_next() walks the entries.
 *
 * Sessions: svc_state_data_size() is what the sessions' tensors need in
 * state-data; svc_state_save() writes each session and its tensors (the
 * caller has stopped every request: nothing runs, nothing is held);
 * svc_state_restore() makes them again in a djinnd that has none yet,
 * each tensor at its handle with its bytes. I/O thread.
 */
#ifndef DJINN_SVC_STATE_H
#define DJINN_SVC_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <djinn/state.h>

struct device;
struct session_table;
struct vmu_fill;
struct vmu_piece;

struct state_out {
	uint8_t *rec;
	size_t len, cap;
	int data_fd;
	uint8_t *data; /* mapped: data_size bytes */
	uint64_t data_size, data_len;
	struct djinn_state_hdr hdr; /* the counts, as entries are added */
	uint32_t nr_pieces; /* PIECES entries so far */
	int err;
	/* a crash journal's record (net/journal.h): written while requests
	 * run, it copies nothing (no state-data), and what it cannot point
	 * at in place is written lost, as lost to a crash */
	bool journal;
};

/* 0, or a negative errno (nothing to abort then). */
int state_out_begin(struct state_out *o, uint64_t data_size);
/* Room for an entry of @type with @len payload bytes, zeroed; NULL when
 * out of memory (state_out_end() then fails). */
void *state_out_ent(struct state_out *o, uint32_t type, uint32_t len);
/* Room for @len bytes of data, at *@off in state-data; NULL past the
 * size given to state_out_begin(). */
void *state_out_data(struct state_out *o, uint64_t len, uint64_t *off);
/* Write @len bytes of host memory @src into state-data (write(2): no
 * page of it mapped here), at *@off: 0, or the error (kept). */
int state_out_write(struct state_out *o, const void *src, uint64_t len,
		    uint64_t *off);
/* A PIECES entry: bytes in place in device @device's pool, the @nr
 * pieces @p; *@off is what names them (DJINN_STATE_IN_POOL | its number).
 * 0, or the error (kept). */
int state_out_pieces(struct state_out *o, uint32_t device,
		     const struct vmu_piece *p, unsigned int nr, uint64_t *off);
/* The record, sealed, in *@rec_fd and its data in *@data_fd: 0, or the
 * first error (nothing kept). */
int state_out_end(struct state_out *o, int *rec_fd, int *data_fd);
void state_out_abort(struct state_out *o);
/* A crash journal's record (net/journal.h): no state-data, @journal set;
 * state_out_record() finishes its header and says where it is (the
 * state_out's until state_out_abort()). 0, or a negative errno. */
int state_out_begin_journal(struct state_out *o);
int state_out_record(struct state_out *o, const uint8_t **rec, size_t *len);

struct state_in {
	const uint8_t *rec;
	size_t size;
	const uint8_t *data;
	uint64_t data_size; /* the record's word; data_mapped: the file's */
	uint64_t data_mapped;
	const struct djinn_state_hdr *hdr;
	size_t pos;
	/* the POOL and PIECES entries, in the record's order */
	const struct djinn_state_pool **pools;
	const struct djinn_state_pieces **pieces;
	uint32_t nr_pools, nr_pieces;
};

/* Map and check the record: 0, or -EPROTONOSUPPORT (a version this
 * djinnd does not read, named in @msg), -EBADMSG (it does not parse:
 * @msg says where), -EPERM (a memfd not sealed against writes and
 * shrinking: what was checked could change under the restore), or
 * another negative errno. The fds stay the caller's. */
int state_in_open(struct state_in *in, int rec_fd, int data_fd, char *msg,
		  size_t msglen);
/* The next entry's payload and its @type and @len, or NULL at the end;
 * state_in_rewind() starts over. */
const void *state_in_next(struct state_in *in, uint32_t *type, uint32_t *len);
void state_in_rewind(struct state_in *in);
void state_in_close(struct state_in *in);
/* The bytes the PIECES entries name: what is taken over in place. */
uint64_t state_in_in_place(const struct state_in *in);
/* Device @device's POOL entry, or NULL: its pieces follow it. */
const struct djinn_state_pool *state_in_pool(const struct state_in *in,
					     uint32_t device);
/* What the bytes at record offset @off (checked by state_in_open())
 * for device @device fill a region with (vmu.h): state-data's, or
 * pieces of the device's pool. -EBADMSG for another device's pool. */
int state_in_fill(const struct state_in *in, uint64_t off, uint32_t device,
		  struct vmu_fill *f);

/* Whether @dev's data regions are written as pieces of its pool, which
 * the next djinnd maps in place (its fd "pool-INDEX" goes with the
 * record): a device whose memory is a file, and whose bytes djinnd may
 * reach (not --cpu-device-only's, which stand for a GPU's). */
bool svc_state_in_pool(const struct device *dev);
uint64_t svc_state_data_size(struct session_table *t);
/* With a POOL entry for each of @devs whose memory is a file: their
 * sessions' data regions are written as where they lie in it. */
int svc_state_save(struct state_out *o, struct session_table *t,
		   struct device *devs, unsigned int nr_dev);
/* The record's sessions, on @devs (their device index); 0, or the first
 * error with @msg saying which session and why, and nothing restored
 * (the sessions restored before it are ended again). */
int svc_state_restore(struct state_in *in, struct session_table *t,
		      struct device *devs, unsigned int nr_dev, char *msg,
		      size_t msglen);

#endif /* DJINN_SVC_STATE_H */
