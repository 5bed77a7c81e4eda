/* SPDX-License-Identifier: MIT */
/*
 * The devices' services.
 */
#ifndef DJINN_SVC_DEVICES_H
#define DJINN_SVC_DEVICES_H

#include <stddef.h>
#include <stdint.h>

#include <djinn/proto.h>

struct device;

/*
 * What STATUS says of the @nr_dev devices @devs to tenant @tenant: their
 * memory, pressure, queue and session data added into @st (its other
 * fields, and the READY flag, are the caller's; DJINN_STATUS_MODELS is
 * set when a device serves models), and the served models loaded, once
 * each by name and never an upload, in a malloc'd array in *@models (the
 * caller frees it; NULL for none) of *@nr entries, at most
 * DJINN_STATUS_MODELS_MAX. 0, or -ENOMEM.
 */
int svc_status(struct device *devs, unsigned int nr_dev, const char *tenant,
	       struct djinn_status *st, struct djinn_status_model **models,
	       size_t *nr);

/* Jobs queued and running on the @nr_dev devices @devs, in all. */
unsigned int svc_jobs(struct device *devs, unsigned int nr_dev);

/*
 * The device for a new session, of the @nr_dev devices @devs: @want 0
 * chooses (the one with the most free memory; ties: the fewest sessions,
 * then the lowest index), else device @want - 1. NULL for a @want past
 * the devices, with the reason in @msg (-ENODEV).
 */
struct device *svc_place(struct device *devs, unsigned int nr_dev,
			 uint32_t want, char *msg, size_t msglen);

/*
 * svc_fault_inject() (ADMIN_FAULT_INJECT,
 * with --fault-injection only) faults device @d: for real where the
 * backend can (CUDA: a kernel that stores to address 0, recovered as any
 * fault is), else simulated by the VMU (vmu_fault_simulate(): the
 * memory zeroed and the fault counted). Either way backend.faults moves
 * on, and every session and text entry of @d made before it is lost;
 * the other devices are not touched. With DJINN_FAULT_DEAD in @flags,
 * the device is then dead (backend.dead), as after an error no context
 * reset clears, and djinnd exits with DJINND_EXIT_DEVICE_DEAD once the
 * answer is out. 0 with the fault in @msg, or a negative errno with the
 * reason. Runs on the I/O thread, which waits for a GPU's recovery (a
 * context reset).
 *
 * A dead device, whoever found it, is seen by the I/O loop before its
 * next wait (and within a second in any case): it logs "device cuda:0
 * is dead after CUDA_ERROR_...: exiting so that systemd restarts
 * djinnd" at err, stops reading requests, lets the answers of work
 * under way go out (on the dead device it fails -EIO), ends every
 * session, closes every connection, and server_run() returns with
 * @exit_status set.
 */
int svc_fault_inject(struct device *d, uint32_t flags, char *msg,
		     size_t msglen);

#endif /* DJINN_SVC_DEVICES_H */
