/* SPDX-License-Identifier: MIT */
/*
 * struct device: one device djinnd drives, and the parts that are its
 * alone. Every floor passes devices around, so this header names each
 * part by a pointer to a struct it only declares: a floor reaches a
 * part through that part's own header, which the layering check
 * (scripts/check-layers.py) lets it include only if the part is below.
 * server.c makes the devices (server_init()) and places sessions on
 * them (svc_place()).
 */
#ifndef DJINN_DEVICE_H
#define DJINN_DEVICE_H

struct backend;
struct vmu;
struct sched;
struct executor;
struct model_store;

/* devices at most, and device.compute_threads at most */
#define DEVICE_MAX 64
#define DEVICE_COMPUTE_THREADS_MAX 16

/*
 * struct device - one device djinnd drives, and what is its alone
 * @index:    its place in server.dev[]: what a client names (plus one)
 *            in djinn_session_open.device, and what the admin answers
 *            show
 * @ordinal:  the --device N it was made for (the GPU's ordinal, or the
 *            number of a CPU device)
 * @name:     "cpu" (the one CPU device), "cpu:1", "cuda:0"
 * @backend, @vmu, @sched, @exec, @mem, @models: its backend, memory
 *            manager, scheduler, graph and memory executors, and model
 *            store (NULL: no model directory). Sessions are placed on
 *            one device (svc_place()) and use only its parts.
 * @nr_sessions: sessions open on it
 * @fault_why: the last simulated fault (a CPU device's)
 * @dead_why: backend.dead's string when svc_fault_inject() killed
 *            the device (DJINN_FAULT_DEAD)
 * @compute_threads: the graph executor's threads (device.compute_threads)
 */
struct device {
	unsigned int index, ordinal;
	char name[16];
	struct backend *backend;
	struct vmu *vmu;
	struct sched *sched;
	struct executor *exec;
	struct executor *mem;
	struct model_store *models;
	unsigned int nr_sessions;
	unsigned int compute_threads;
	char fault_why[256];
	char dead_why[96];
};

#endif /* DJINN_DEVICE_H */
