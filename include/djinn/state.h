/* SPDX-License-Identifier: MIT */
/*
 * The state record: what one djinnd hands the next at a planned restart
 * (Documentation/admin-guide.rst, "Upgrades and restarts"), so that its
 * sessions, their tensors and its client connections live on.
 *
 * DOC: state record
 *
 * Two memfds travel with the listening sockets (through systemd's fd
 * store, or --handover's socket): "state", the record, and "state-data",
 * the bytes it points into. The record is a struct djinn_state_hdr, then
 * entries, each a struct djinn_state_ent and its payload, padded to 8
 * bytes. Integers are in the host's order (both processes run on the
 * same machine).
 *
 *   SESSION  struct djinn_state_session, then the generation of each of
 *            its tensor handle slots (u32 each, nr_slots of them), then
 *            of each of its model and context handle slots (nr_obj_slots)
 *   TENSOR   struct djinn_state_tensor: one of the session before it
 *   OBJ      struct djinn_state_obj: a model or context of the session
 *            before it, its models before its contexts
 *   PAUSE    struct djinn_state_pause, then its decode's tokens (__s32
 *            each, @want of them): the paused step of the context (OBJ)
 *            right before it
 *   RESULT   struct djinn_state_result: a graph's outputs the session
 *            before it remembers (DJINN_REF_RESULT), after its tensors
 *            and objects
 *   CONN     struct djinn_state_conn, then its attached sessions (u64
 *            each), then the bytes it had received and not yet parsed;
 *            its socket is the fd named "conn-INDEX"
 *   POOL     struct djinn_state_pool, then struct djinn_state_piece
 *            each: a device whose memory is a file (the CPU backend's
 *            pool, a memfd: the fd named "pool-DEVICE"), and the pieces
 *            of it in use, which the next djinnd keeps until its restore
 *            is over (version 2); with DJINN_STATE_SWAP_ARENA in its
 *            device, the device's swap arena ("swap-DEVICE", where the
 *            host copies of its swapped-out regions lie; version 4)
 *   PIECES   struct djinn_state_pieces, then struct djinn_state_piece
 *            each: where bytes lie in a device's pool, in their order
 *            (version 2), or, with DJINN_STATE_SWAP_ARENA, the one piece
 *            of its swap arena a swapped-out region's host copy is
 *   TEXT_ENTRY struct djinn_state_text: an entry of a device's text
 *            index (weights, uploaded text), in place in its pool,
 *            before the sessions that hold it (version 2)
 *   UPLOAD   struct djinn_state_upload, then its config.json: an
 *            uploaded model (MODEL_OPEN_UPLOADED), once per device and
 *            tenant, before the first OBJ that holds it (version 4)
 *
 * Bytes are in "state-data" at an offset (@data_off, @cache_off, ...),
 * or, when the offset has DJINN_STATE_IN_POOL set, in place in their
 * device's pool: the offset's other bits number the PIECES entry (from 0,
 * in the record's order) that says where, and the next djinnd maps those
 * pieces where the bytes belong instead of copying them. A text tensor's
 * in place is its TEXT_ENTRY's, found again by its fingerprint. A
 * state-data offset with DJINN_STATE_SWAPPED set (the rest is the
 * offset) holds the bytes of a region that was swapped out to host
 * memory: it stays swapped out (version 2).
 *
 * A djinnd reads the versions it knows and refuses any other with the
 * version named (an older djinnd does not guess at a newer record); the
 * entries of a version are fixed. A record that does not parse is
 * refused whole: nothing of it is restored.
 */
#ifndef DJINN_STATE_H
#define DJINN_STATE_H

#include <linux/types.h>

#include <djinn/proto.h>

#define DJINN_STATE_MAGIC 0x3154534e4e494a44ULL /* "DJINNST1" */
/* 3: djinn_state_conn.token (an older djinnd would name such a connection
 * by its uid: it refuses the record instead); 4: UPLOAD, and the kernel
 * sessions (djinn_state_session.kid), lost objects rather than lost
 * sessions; 5: objects lost to a crash (DJINN_STATE_LOST_CRASH), the
 * crash journal's records; 6: contexts in the crash journal's records,
 * their logits in its logits arena, DJINN_STATE_OBJ_PAUSED */
#define DJINN_STATE_VERSION 6
/* the oldest version a djinnd of this one reads (1: no POOL, no PIECES;
 * 2: no connection of a token socket) */
#define DJINN_STATE_VERSION_MIN 1
#define DJINN_STATE_IN_POOL (1ULL << 63)
#define DJINN_STATE_SWAPPED (1ULL << 62)
/* A POOL or PIECES entry's device with this bit: the device's swap arena
 * (the fd named "swap-DEVICE"), where swapped-out regions' host copies
 * lie; an offset with both DJINN_STATE_IN_POOL and DJINN_STATE_SWAPPED
 * names one piece of it (version 4) */
#define DJINN_STATE_SWAP_ARENA (1U << 31)

/* Why an object came back lost (djinn_state_tensor.lost,
 * djinn_state_obj.lost): its bytes were in the memory of a device a fault
 * lost, or djinnd crashed and its journal does not keep them (a
 * context's cache, a GPU's memory: version 5) */
#define DJINN_STATE_LOST_DEVICE 1
#define DJINN_STATE_LOST_CRASH 2

/*
 * DOC: crash journal
 *
 * A djinnd under a service manager's fd store keeps a record of its
 * state there at all times, so that a crash (SIGKILL, a segfault) does
 * not lose its sessions: the memfd "journal-PID-TIME" (the djinnd that
 * writes it, and when it began, in hex), stored at start beside its devices' pools and swap arenas
 * ("pool-N", "swap-N") and /dev/djinn's file ("kmod"). It begins with a
 * struct djinn_journal_hdr; its two slots each hold one record, written
 * whole into the slot not in use, after which @commit names it: a crash
 * in the middle of a write leaves the record before it. The records are
 * state records as above, with no CONN entry and nothing in
 * "state-data" (each one's @data_size is 0): what they keep lies in place
 * in the pools and swap arenas, and what cannot (a GPU's memory, a
 * region swapped out to anonymous memory) is written lost,
 * DJINN_STATE_LOST_CRASH. A context's last logits lie in the logits
 * arena stored beside the journal, "logits-PID-TIME" (the journal's
 * name's suffix): its entry's @logits_off is an offset in that file, not
 * in state-data; a context's entry is the context as its last request
 * left it, and a step paused at a breakpoint is not named
 * (DJINN_STATE_OBJ_PAUSED). The next djinnd copies the committed record
 * into a memfd of its own, with the logits it names copied into
 * state-data and the offsets made state-data's, and restores it as it
 * does a planned restart's.
 */
#define DJINN_JOURNAL_MAGIC 0x314e524a4e4e494aULL /* "JINNJRN1" */

/**
 * struct djinn_journal_hdr - the journal's first bytes
 * @magic:  DJINN_JOURNAL_MAGIC
 * @hdr_size: sizeof(struct djinn_journal_hdr)
 * @commit: the record in force: its sequence number times two, plus its
 *          slot (0 or 1); 0: none yet. Written last, in one store.
 * @slot:   each slot's record: its sequence number, and where it lies in
 *          the file (@off, @len bytes)
 */
struct djinn_journal_hdr {
	__u64 magic;
	__u32 hdr_size;
	__u32 __reserved;
	__u64 commit;
	struct {
		__u64 seq;
		__u64 off;
		__u64 len;
	} slot[2];
};

/**
 * struct djinn_state_hdr - the record's first bytes
 * @magic:       DJINN_STATE_MAGIC
 * @version:     DJINN_STATE_VERSION of the djinnd that wrote it
 * @hdr_size:    sizeof(struct djinn_state_hdr) in that version
 * @size:        the record's bytes, this header included
 * @data_size:   the bytes of "state-data"
 * @written_ns:  CLOCK_MONOTONIC when it was written: leases get the time
 *               from then to the restore back
 * @next_session: the last session id given out
 * @nr_sessions, @nr_tensors, @nr_conns, @nr_objs: its entries of each
 *               kind
 * @pid:         the djinnd that wrote it
 */
struct djinn_state_hdr {
	__u64 magic;
	__u32 version;
	__u32 hdr_size;
	__u64 size;
	__u64 data_size;
	__u64 written_ns;
	__u64 next_session;
	__u32 nr_sessions;
	__u32 nr_tensors;
	__u32 nr_conns;
	__u32 pid;
	__u32 nr_objs;
	__u32 __reserved;
};

enum djinn_state_type {
	DJINN_STATE_SESSION = 1,
	DJINN_STATE_TENSOR = 2,
	DJINN_STATE_CONN = 3,
	DJINN_STATE_OBJ = 4,
	DJINN_STATE_RESULT = 5,
	DJINN_STATE_PAUSE = 6,
	DJINN_STATE_POOL = 7,
	DJINN_STATE_PIECES = 8,
	DJINN_STATE_TEXT_ENTRY = 9,
	DJINN_STATE_UPLOAD = 10,
};

/* An entry: @len payload bytes follow (then padding to 8). */
struct djinn_state_ent {
	__u32 type;
	__u32 len;
};

/**
 * struct djinn_state_session - a session (session/session.h)
 * @lease_left_ns: what was left of its lease when the record was written
 * @tensor_key, @obj_key: its handles' keys, so every handle stays valid
 * @device:      its device's index
 * @lost:        a device fault had lost its state: it stays lost (a
 *               djinnd of version 4 writes 0: each object lost is
 *               marked so, and the rest, swapped out to host memory,
 *               is kept)
 * @nr_slots:    tensor handle slots, each one's generation after this
 * @nr_obj_slots: model and context handle slots, each one's generation
 *               after the tensors'
 * @results_next: the slot of its ring of result records the next graph
 *               takes
 * @kid:         kernel leases: its kernel session on /dev/djinn (0:
 *               none), which the next djinnd takes over on the file
 *               passed with the record, "kmod" (version 4)
 * @kbound:      that kernel session is its client's own (SESSION_BIND),
 *               else a proxy on djinnd's file
 */
struct djinn_state_session {
	__u64 id;
	__u8 token[DJINN_TOKEN_LEN];
	char tenant[DJINN_TENANT_LEN];
	char label[DJINN_TENANT_LEN];
	__u32 priority;
	__u32 uid;
	__u32 pid;
	__u32 device;
	__u64 lease_ns;
	__u64 lease_left_ns;
	__u64 requests;
	__u64 tensor_key;
	__u64 obj_key;
	__u32 nr_slots;
	__u32 nr_obj_slots;
	__u8 lost;
	__u8 kbound;
	__u8 __reserved[2];
	__u32 results_next;
	__u32 kid;
};

enum djinn_state_tensor_kind {
	DJINN_STATE_DATA = 1, /* a data region's bytes */
	DJINN_STATE_TEXT = 2, /* a text entry's (fp names it) */
	DJINN_STATE_MODULE = 3, /* text uploaded as a client module */
};

/**
 * struct djinn_state_tensor - a tensor handle and its bytes
 * @slot:  its handle's slot in its session's table (the generation is
 *         the session's entry's)
 * @kind:  enum djinn_state_tensor_kind
 * @shared: a text entry of the shared scope (a model's weights), else
 *         of its session's tenant
 * @bytes: its size; its bytes are state-data's [@data_off, + @bytes)
 * @max_size: a data region's reserved size
 * @fp:    a text entry's SHA-256
 * @lost:  its bytes were in the memory of a device a fault had lost
 *         (no bytes follow): it comes back as a handle every use of which
 *         but releasing answers -EIO (version 4); the value says why:
 *         DJINN_STATE_LOST_DEVICE, or DJINN_STATE_LOST_CRASH (version 5)
 */
struct djinn_state_tensor {
	__u32 slot;
	__u8 kind;
	__u8 shared;
	__u8 lost;
	__u8 __reserved;
	struct djinn_tensor_desc desc;
	__u64 bytes;
	__u64 max_size;
	__u64 data_off;
	__u8 fp[32];
};

enum djinn_state_obj_kind {
	DJINN_STATE_MODEL = 1,
	DJINN_STATE_CTX = 2,
};

/* djinn_state_obj.flags: an uploaded model (its UPLOAD entry makes it
 * again; a served one is opened by name); of a session whose device
 * memory was gone (lossy: a served model that cannot be opened again, and
 * the contexts on it, come back lost rather than failing the restore) */
#define DJINN_STATE_OBJ_UPLOAD (1u << 0)
#define DJINN_STATE_OBJ_LOSSY (1u << 1)
/* with DJINN_STATE_OBJ_LOSSY: lost to a crash, not a device's fault
 * (version 5) */
#define DJINN_STATE_OBJ_CRASH (1u << 2)
/* a context one of whose steps was paused at a breakpoint when a crash
 * journal's record was written: the context is as it was before that
 * step, which is lost (a RESUME is told so) (version 6) */
#define DJINN_STATE_OBJ_PAUSED (1u << 3)

/**
 * struct djinn_state_obj - a model or context handle of a session
 * @slot:   its handle's slot in the session's object table
 * @kind:   enum djinn_state_obj_kind
 * @model:  a model's name, as opened (loaded again from the model
 *          directory); @fp its weights' fingerprint, which they must
 *          have again
 * @model_slot: a context's model's slot
 * @max_tokens, @len: a context's size and its tokens
 * @have_logits: it has run a step: its last logits (vocab floats) are
 *          state-data's [@logits_off, + @logits_bytes)
 * @cache_off, @cache_bytes: its KV cache's bytes in state-data
 * @lost:   what it held was in the memory of a device a fault had lost
 *          (an uploaded model's weights, a context's cache): it comes
 *          back as a handle every use of which but closing answers -EIO
 *          (version 4); why, as a tensor's
 * @flags:  DJINN_STATE_OBJ_* (version 4)
 */
struct djinn_state_obj {
	__u32 slot;
	__u8 kind;
	__u8 have_logits;
	__u8 lost;
	__u8 __reserved;
	char model[DJINN_MODEL_NAME_MAX];
	__u8 fp[32];
	__u32 model_slot;
	__u32 max_tokens;
	__u32 len;
	__u32 flags;
	__u64 cache_off;
	__u64 cache_bytes;
	__u64 logits_off;
	__u64 logits_bytes;
};

/**
 * struct djinn_state_pause - a context's step paused at a breakpoint
 * @slot:   the context's slot
 * @layer, @T, @all: paused after layer @layer, @T tokens, every token's
 *          logits wanted
 * @decode: a decode of @want tokens, @done through every layer, paused
 *          at layer @brk - 1 on the next, with sampling @sp and random
 *          state @rng
 * @flags:  the step's request flags (DJINN_STEP_*)
 * @desc:   the hidden state's shape; its bytes are state-data's
 *          [@hidden_off, + @hidden_bytes), and the keys and values of
 *          the layers before the break [@kv_off, + @kv_bytes)
 */
struct djinn_state_pause {
	__u32 slot;
	__u32 layer;
	__u32 T;
	__u32 want;
	__u32 done;
	__u32 brk;
	__u32 flags;
	__u8 all;
	__u8 decode;
	__u8 __reserved[2];
	__u64 rng;
	struct djinn_sampling sp;
	struct djinn_tensor_desc desc;
	__u64 hidden_off;
	__u64 hidden_bytes;
	__u64 kv_off;
	__u64 kv_bytes;
};

/**
 * struct djinn_state_result - a graph's outputs, remembered
 * @request_id: the GRAPH_SUBMIT's
 * @index:  its slot in the session's ring of records
 * @nr:     its outputs: their descs (struct djinn_tensor_desc each),
 *          then their handles (__u64 each), follow
 * @error:  the graph failed so (references to it fail the same way)
 * @done:   it ran (a record of one in flight is never written)
 */
struct djinn_state_result {
	__u64 request_id;
	__u32 index;
	__u32 nr;
	__s32 error;
	__u8 done;
	__u8 __reserved[3];
};

/**
 * struct djinn_state_conn - a client connection, between two frames
 * @index:   its socket's fd is named "conn-@index"
 * @admin, @tcp, @tcp_uid: what kind (net/conn.h)
 * @token:   1: a connection of server.token_auth's socket, whose @tenant
 *           an AUTH token named (empty: none yet); 0 in records before
 *           version 3
 * @pid, @uid, @gid: its peer's credentials as it was accepted
 * @peer:    a TCP peer's address
 * @tenant:  whom it was identified as
 * @nr_sessions: the sessions attached to it, u64 each after this
 * @backlog: bytes received and not yet parsed, after the sessions
 */
struct djinn_state_conn {
	__u32 index;
	__u8 admin;
	__u8 tcp;
	__u8 tcp_uid;
	__u8 token;
	__u32 pid;
	__u32 uid;
	__u32 gid;
	__u32 nr_sessions;
	__u64 backlog;
	__u8 peer[128];
	char tenant[DJINN_TENANT_LEN];
};

/* @len bytes at @off of a device's pool */
struct djinn_state_piece {
	__u64 off;
	__u64 len;
};

/**
 * struct djinn_state_pool - a device's memory that is a file
 * @device: the device's index; the file is the fd named "pool-@device",
 *          or with DJINN_STATE_SWAP_ARENA set, its swap arena's,
 *          "swap-@device"
 * @nr:     pieces of it in use when the record was written, after this
 * @granularity: its granule: every piece's offset and length are
 *          multiples of it
 * @size:   its bytes
 */
struct djinn_state_pool {
	__u32 device;
	__u32 nr;
	__u64 granularity;
	__u64 size;
};

/**
 * struct djinn_state_pieces - where one object's bytes lie in a pool
 * @device: the pool's device
 * @nr:     pieces, after this: the object's bytes in their order,
 *          rounded up to the pool's granule
 */
struct djinn_state_pieces {
	__u32 device;
	__u32 nr;
};

/**
 * struct djinn_state_text - an entry of a device's text index
 * @device: the device's index
 * @fp:     its name, the SHA-256 of its bytes
 * @owner:  its scope: the tenant whose it is, "" for the shared scope
 * @size:   its bytes; they lie in place at @data_off (DJINN_STATE_IN_POOL)
 */
struct djinn_state_text {
	__u32 device;
	__u32 __reserved;
	__u8 fp[32];
	char owner[DJINN_TENANT_LEN];
	__u64 size;
	__u64 data_off;
};

/**
 * struct djinn_state_upload - an uploaded model, made again from this and
 * its weights rather than from files (the OBJ entries that hold it name
 * it "upload-" and @src's first 8 bytes in hex)
 * @device: its device's index
 * @config_len: config.json's bytes, right after this
 * @src:    its sources' fingerprint
 * @fp:     its weights' fingerprint
 * @owner:  its tenant, whose text its weights are
 * @dtype:  its weights' enum djinn_dtype
 * @prefixed: a GPT-2 whose weights were named "transformer.*"
 * @bytes:  its weights' bytes, as its configuration lays them out
 * @data_off: with DJINN_STATE_IN_POOL, its weights are @owner's text
 *          entry @fp (its TEXT_ENTRY); else state-data's [@data_off,
 *          + @bytes), put into that text entry again
 */
struct djinn_state_upload {
	__u32 device;
	__u32 config_len;
	__u8 src[32];
	__u8 fp[32];
	char owner[DJINN_TENANT_LEN];
	__u32 dtype;
	__u8 prefixed;
	__u8 __reserved[3];
	__u64 bytes;
	__u64 data_off;
};

#endif /* DJINN_STATE_H */
