/* SPDX-License-Identifier: MIT */
/*
 * The model store: models by name from a model directory, their weights
 * in the VMU's text segment.
 *
 * A model is a folder DIR/NAME in Hugging Face layout: config.json and
 * one or more *.safetensors (see safetensors.h for sharding). NAME is 1
 * to MODEL_NAME_MAX - 1 bytes of [A-Za-z0-9._-], not starting with '.':
 * no path ever leaves DIR.
 *
 * Loading reads config.json, maps the safetensors, checks every weight
 * the architecture needs (model_config.h), and puts them into the text
 * segment as one entry, laid out as model_layout says. The entry is named
 * by its SHA-256, so two names whose weights are the same share one copy:
 * the blob is hashed from the mapping first and, when the text segment
 * has it already, nothing is copied. Otherwise it is streamed in (copied and
 * hashed once more against that fingerprint). The mappings are closed
 * once the weights are in; the store keeps the config, the layout's
 * offsets and the fingerprint.
 *
 * Holders: model_open() gives a session a struct model_hold, which holds
 * a text reference of that session on the weights (so the VMU charges
 * and protects them) and counts as one holder of the model. The session
 * layer must model_close() every hold of a session before
 * vmu_session_destroy(). A model with no holders stays listed, and its
 * weights stay cached in the text segment until model_store_evict(), or
 * until the VMU reclaims unheld text under pressure: the next open then
 * loads the files again.
 *
 * Thread safety: one mutex, never held across a load. model_open() lists
 * the name as loading, drops the lock, reads the files and fills the
 * text segment on the calling thread (an executor's, never the I/O
 * thread), then takes the lock again to publish the model. Another
 * model_open() of a name being loaded waits for that load (and loads
 * itself if it failed); opens of other names, model_close(),
 * model_store_list() and model_store_evict() never wait for a load, so
 * the I/O thread may call them.
 * Errors: 0 or a negative errno with a message naming the model and the
 * fault.
 */
#ifndef DJINN_MODEL_STORE_H
#define DJINN_MODEL_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "list.h"
#include "model/model_config.h"
#include "model/stream.h"
#include "vmu/vmu.h"

#define MODEL_NAME_MAX 64

struct model_store;

/*
 * struct model - a loaded model (the store's; read-only to holders)
 * @name:   its name
 * @cfg:    its configuration
 * @layout: its weights' offsets and shapes in the text entry (the
 *          tensors' ->t pointers are NULL once loaded)
 * @fp:     the text entry's fingerprint
 * @resident: layers 0 .. resident - 1 are in the text entry with the
 *          embeddings and the head; n_layer for a model wholly on the
 *          device. The others are streamed (@stream).
 * @ring:   a streamed model's ring bytes (granule-rounded), else 0
 * @budget: the device bytes it was placed under (0: it fit)
 * @stream: a streamed model's streamed part (stream.h), else NULL
 * @plans:  its steps' graphs as planned, kept for the steps like them
 *          (struct fwd_plans, forward.h); NULL without memory for it
 */
struct fwd_plans;

struct model {
	char name[MODEL_NAME_MAX];
	struct model_config cfg;
	struct model_layout layout;
	uint8_t fp[VMU_FP_LEN];
	uint32_t resident;
	uint64_t ring, budget;
	struct model_stream *stream;
	struct fwd_plans *plans;
};

/*
 * struct model_hold - one session's hold on a model
 * @m:    the model
 * @s:    the session
 * @text: the weights (vmu_text_addr() + a slot's off is its address)
 */
struct model_hold {
	const struct model *m;
	struct vmu_session *s;
	struct vmu_text *text;
	/* private */
	struct model_store *ms;
	struct list_head node; /* in its model's holds */
};

/* A store over VMU @v for models under @dir (copied). */
int model_store_create(struct vmu *v, const char *dir,
		       struct model_store **out);
/* Every hold must have been closed (the weights stay in the VMU's cache,
 * unheld, for it to free). */
void model_store_destroy(struct model_store *ms);

/* 0 if @name is a valid model name, else -EINVAL with a reason. */
int model_name_check(const char *name, char *msg, size_t msglen);

/*
 * Hold model @name for session @s, loading it if it must: -EINVAL (bad
 * name, config or checkpoint), -ENOENT (no such model), -ENOMEM (the
 * weights do not fit), other errnos from the files. On failure nothing
 * changes: no text entry or reference is left behind.
 */
int model_open(struct model_store *ms, struct vmu_session *s, const char *name,
	       struct model_hold **out, char *msg, size_t msglen);
void model_close(struct model_hold *h);

/*
 * struct model_upload - a model a client sent as files
 * @src:       its sources' fingerprint (the caller's: djinnd hashes the
 *             SHA-256s of config.json and of each file, in order, the
 *             index first, then the request's flags when not 0); the
 *             model is listed as "upload-" and @src's first 8 bytes in
 *             hex, a namespace of its own (a directory model of that
 *             name is another model)
 * @config, @config_len: config.json's bytes; NULL to open it by @src
 *             alone (-ENOENT unless it is loaded)
 * @index, @index_len: model.safetensors.index.json's bytes, or NULL for
 *             none; with it @files are the shards its weight_map names,
 *             in strcmp() order of their names, and are checked against
 *             it as a directory's (st_set_parse())
 * @nr_files, @files, @lens: the safetensors files' bytes, parsed as
 *             strictly as a directory's (each file on its own, the
 *             index's checks, then no tensor name twice), valid during
 *             the call
 */
struct model_upload {
	uint8_t src[VMU_FP_LEN];
	const struct model_kept *kept; /* model_open_kept()'s */
	const void *config;
	size_t config_len;
	const void *index;
	size_t index_len;
	size_t nr_files;
	const void *const *files;
	const size_t *lens;
};

/* Hold an uploaded model for @s, loading it from @up's bytes if it is
 * not loaded: as model_open() otherwise (the weights deduplicated by
 * their fingerprint with every other model's). */
int model_open_uploaded(struct model_store *ms, struct vmu_session *s,
			const struct model_upload *up, struct model_hold **out,
			char *msg, size_t msglen);
/*
 * struct model_kept - what a restart keeps of an uploaded model
 * (svc/state.c): its weights stay in the text segment, or @blob holds
 * them; the rest is made again from this
 * @src, @owner: its sources' fingerprint, and its tenant
 * @fp:     its weights' fingerprint, the name of their text entry
 * @config, @config_len: its config.json
 * @dtype, @prefixed: what model_layout_remake() needs
 * @bytes:  its weights' bytes
 * @blob:   NULL: the text entry @fp of @owner's scope holds its weights;
 *          else their @bytes bytes, put there (a device whose memory the
 *          record cannot point into)
 */
struct model_kept {
	uint8_t src[VMU_FP_LEN];
	uint8_t fp[VMU_FP_LEN];
	char owner[DJINN_TENANT_LEN];
	const void *config;
	size_t config_len;
	unsigned int dtype;
	bool prefixed;
	uint64_t bytes;
	const void *blob;
};

/* Whether @h's model is an upload (MODEL_OPEN_UPLOADED). */
bool model_is_upload(const struct model_hold *h);
/* What a restart keeps of @h's model, valid while @h is held: 0, or
 * -ENOENT (not an upload: it is opened again by name), or -EBUSY with
 * why (a streamed upload, whose streamed layers are not kept). */
int model_upload_keep(const struct model_hold *h, struct model_kept *out,
		      char *msg, size_t msglen);
/* Hold the uploaded model @k describes for @s, a session of its tenant
 * (-EACCES else): the one loaded, or one made again from @k without its
 * files. -EBADMSG when @k does not hold together (its configuration lays
 * out other bytes, its weights hash to another name); else as
 * model_open(). */
int model_open_kept(struct model_store *ms, struct vmu_session *s,
		    const struct model_kept *k, struct model_hold **out,
		    char *msg, size_t msglen);
/* The name an upload of sources @src is listed under. */
void model_upload_name(const uint8_t src[VMU_FP_LEN],
		       char name[MODEL_NAME_MAX]);

/*
 * Budgets (issue 15): the device bytes model @name may take, its text
 * entry and a ring together, from its next load on (one loaded already
 * keeps its placement until it is evicted or reclaimed). 0: none, the
 * default: a model that fits the device's room (free memory and unheld
 * text) goes there whole, and one that does not is streamed under a
 * budget of three quarters of that room, the rest left for KV caches.
 *
 * A model over its budget keeps its embeddings and head and as many
 * layers as fit beside a ring of @slots of its largest layer (0: 2, a
 * layer computing while the next one copies; 1: no overlap, each layer
 * copied, then computed on); the rest are streamed. A budget below the
 * embeddings and head and one layer refuses the load with -ENOMEM (or
 * -E2BIG past the device) naming both. -EINVAL for a bad name or more
 * than DJINN_RING_SLOTS_MAX slots, -ENOMEM.
 */
int model_store_set_budget(struct model_store *ms, const char *name,
			   uint64_t bytes, unsigned int slots, char *msg,
			   size_t msglen);

/*
 * Steps: every step that reads a model's weights runs between
 * model_step_enter() and model_step_leave(), so that model_relieve() moves
 * them only while no step runs. enter waits while they move; -EIO, why
 * in @msg, when a move failed and the model lost its weights (its holders
 * close it; the next open loads it again).
 */
int model_step_enter(const struct model_hold *h, char *msg, size_t msglen);
void model_step_leave(const struct model_hold *h);

/*
 * Memory pressure (Documentation/streaming.rst, "Under memory pressure"):
 * make room for @need bytes of device memory by streaming more layers of
 * @h's model, when it was placed under no budget of its own (a budget is
 * an administrator's placement, kept), no other model shares its weights
 * and no other tenant's session holds it (it would slow their steps): the fewest more layers whose text bytes, less a ring of two
 * of its largest layers for a model that had none, free @need. It waits
 * (2 s at most) for the model's steps to finish and holds new ones back
 * while the weights move: the resident part is copied to host memory,
 * dropped, and put back smaller, the layers it gave up joining the
 * streamed ones. 0, or -ENOMEM (it cannot free that much), -EPERM (a
 * budget of its own, an upload, another tenant's holder), -EBUSY (its steps did not finish, or
 * it is being loaded), -EIO (the move failed: see model_step_enter()),
 * with the reason in @msg.
 */
int model_relieve(struct model_hold *h, uint64_t need, char *msg,
		  size_t msglen);

/* The budget set for @name: *@bytes 0 for none. */
void model_store_get_budget(struct model_store *ms, const char *name,
			    uint64_t *bytes, unsigned int *slots);

/*
 * Whether @name may be placed under budget @bytes and @slots now: 0 when
 * it is not loaded, is loaded under them, or no session holds it; -EBUSY
 * saying how it is placed when sessions hold it (or it is being loaded)
 * under another, which a new placement would move under them.
 */
int model_store_budget_check(struct model_store *ms, const char *name,
			     uint64_t bytes, unsigned int slots, char *msg,
			     size_t msglen);

/* Evict @name if no session holds it and it was placed under another
 * budget than the one now set for it, so that its next open places it
 * anew; whether it did. */
bool model_store_drop_stale(struct model_store *ms, const char *name);

/* The device address of weight slot @k of layer @layer (-1: global); a
 * resident layer's. */
uint64_t model_weight_addr(const struct model_hold *h, int layer,
			   unsigned int k);

/*
 * struct model_info - one line of model_store_list()
 * @bytes:   of the text entry (the resident part)
 * @weights: of every weight, streamed ones too
 * @layers, @resident: layers in all, and on the device
 * @ring, @budget: as struct model's
 * @passes, @jobs: a streamed model's passes and the steps they ran
 */
struct model_info {
	char name[MODEL_NAME_MAX];
	enum model_arch arch;
	unsigned int dtype; /* enum djinn_dtype of the weights */
	uint64_t bytes;
	uint64_t weights;
	uint32_t layers, resident;
	uint64_t ring, budget;
	uint64_t passes, jobs;
	unsigned int holders;
	bool uploaded; /* a tenant's upload, not a served model */
	uint8_t fp[VMU_FP_LEN];
};

/* How many times a model was loaded (its weights read in): served ones
 * and uploads, since the store was made. */
uint64_t model_store_loads(struct model_store *ms);

/* A malloc'd array of every loaded model, sorted by name, in *@out and
 * their number in *@nr (*@out NULL when none). Models being loaded are
 * not listed yet. */
int model_store_list(struct model_store *ms, struct model_info **out,
		     size_t *nr);

/* Whether a loaded served model (not an upload) whose weights have the
 * fingerprint @fp is one @ok says yes to, by name. */
bool model_store_served_fp(struct model_store *ms, const uint8_t *fp,
			   bool (*ok)(void *arg, const char *name), void *arg);

/* Forget model @name and drop its weights from the text segment unless
 * another name or session still uses them: -ENOENT, or -EBUSY while it
 * has holders or is being loaded. */
int model_store_evict(struct model_store *ms, const char *name, char *msg,
		      size_t msglen);

#endif /* DJINN_MODEL_STORE_H */
