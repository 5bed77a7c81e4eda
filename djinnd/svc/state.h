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

#include <stddef.h>
#include <stdint.h>

#include <djinn/state.h>

struct device;
struct session_table;

struct state_out {
	uint8_t *rec;
	size_t len, cap;
	int data_fd;
	uint8_t *data; /* mapped: data_size bytes */
	uint64_t data_size, data_len;
	struct djinn_state_hdr hdr; /* the counts, as entries are added */
	int err;
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
/* The record, sealed, in *@rec_fd and its data in *@data_fd: 0, or the
 * first error (nothing kept). */
int state_out_end(struct state_out *o, int *rec_fd, int *data_fd);
void state_out_abort(struct state_out *o);

struct state_in {
	const uint8_t *rec;
	size_t size;
	const uint8_t *data;
	uint64_t data_size; /* the record's word; data_mapped: the file's */
	uint64_t data_mapped;
	const struct djinn_state_hdr *hdr;
	size_t pos;
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

uint64_t svc_state_data_size(struct session_table *t);
int svc_state_save(struct state_out *o, struct session_table *t);
/* The record's sessions, on @devs (their device index); 0, or the first
 * error with @msg saying which session and why, and nothing restored
 * (the sessions restored before it are ended again). */
int svc_state_restore(struct state_in *in, struct session_table *t,
		      struct device *devs, unsigned int nr_dev, char *msg,
		      size_t msglen);

#endif /* DJINN_SVC_STATE_H */
