// SPDX-License-Identifier: MIT
/*
 * Set-up, the lease timer, signals, and shutdown.
 *
 * SIGTERM (and SIGINT) drain: stop accepting, let queued and running
 * graphs finish and their answers go out, then end every session (the
 * one teardown, reason "daemon shutdown") and stop; the stopping hook
 * tells the service manager. SIGHUP reopens the log file, then calls
 * the reload hook (main.c reads djinnd.conf again).
 *
 * A device that dies (backend.dead) ends this process too: djinnd
 * hands its state over as for a restart (into systemd's fd store, or to
 * a successor it starts when it serves --handover), what the sessions on
 * the dead device had in device memory kept as lost objects, and exits
 * with DJINND_EXIT_DEVICE_DEAD for
 * systemd to start it again; with neither, it drains the same way as
 * for SIGTERM. The one error a daemon exits on (devices_watch()).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "log.h"
#include "daemon.h"
#include "server.h"
#include "svc/devices.h"
#include "exec/executor.h"
#include "model/store.h"
#include "net/conn.h"
#include "net/fdstore.h"
#include "net/journal.h"
#include "net/ident.h"
#include "net/restart.h"
#include "net/tls.h"
#include "net/tokens.h"

/* Signals arrive through a pipe: the handler writes the signal number,
 * the I/O loop reads it. A handler works whichever thread the kernel
 * picks, and some threads (OpenBLAS's, made by a library constructor
 * before main) exist before djinnd could block anything. */
struct sigsrc {
	struct io_src src;
	struct server *srv;
	int rfd, wfd;
	uint8_t signo;
	struct loop_timer drain;
	struct loop_timer rearm; /* the read, when loop_sqe() failed */
};

static struct sigsrc sigs = { .rfd = -1, .wfd = -1 };

static void on_signal(int signo)
{
	int saved = errno;
	uint8_t b = (uint8_t)signo;

	if (write(sigs.wfd, &b, 1) < 0) {
		/* The pipe is full: signals are already pending. */
	}
	errno = saved;
}

unsigned int server_depth(struct server *srv)
{
	return svc_jobs(srv->dev, srv->nr_dev);
}

#define DRAIN_MAX_NS (10 * NSEC_PER_SEC) /* then stop all the same */

static uint64_t drain_deadline;

/* Draining: no new requests are read; once no job is queued or running
 * (or after DRAIN_MAX_NS), end everything. */
static uint64_t drain_tick(struct loop_timer *t, uint64_t now)
{
	struct server *srv = sigs.srv;

	/* Graphs and model steps, and memory jobs (a model loading) */
	unsigned int busy = server_depth(srv);

	if (busy && now < drain_deadline)
		return 5 * NSEC_PER_MSEC;
	if (busy)
		log_warn("drain: %u jobs still queued after %llu s: stopping",
			 busy,
			 (unsigned long long)(DRAIN_MAX_NS / NSEC_PER_SEC));
	while (!list_empty(&srv->sessions.list))
		session_end(&srv->sessions,
			    list_first_entry(&srv->sessions.list,
					     struct session, node),
			    SESSION_SHUTDOWN);
	conns_close_all(srv, false);
	srv->loop.stop = true;
	return 0;
}

/* Stop accepting and reading requests (answers still go out); the
 * drain timer ends the rest. */
static void drain_begin(struct server *srv)
{
	srv->draining = true;
	if (srv->hooks.stopping)
		srv->hooks.stopping(srv);
	listeners_close(srv);
	conns_close_all(srv, false);
	drain_deadline = loop_now() + DRAIN_MAX_NS;
	loop_timer_add(&srv->loop, &sigs.drain, loop_now());
}

/*
 * The state outlives a dead device's process: into systemd's fd store
 * (djinnd exits DJINND_EXIT_DEVICE_DEAD after, and systemd starts it
 * again with the state), or to a successor started from djinnd's own
 * binary (--handover), which gets a fresh device. The sessions on the
 * dead device are kept: what they had swapped out whole, each object
 * that was in device memory lost (svc/state.c: its every use but its
 * release answers -EIO, naming it). Whether one of them began.
 */
static bool dead_restart(struct server *srv)
{
	char why[DJINN_MAX_ERROR_MSG];
	pid_t pid;

	if (restart_to_store(srv)) {
		if (srv->hooks.stopping)
			srv->hooks.stopping(srv);
		return true;
	}
	if (!srv->hooks.restart ||
	    srv->hooks.restart(srv, &pid, why, sizeof(why))) {
		log_notice("%s: the state is not handed over: %s",
			   srv->dead_msg,
			   srv->hooks.restart ? why : "no restart served");
		return false;
	}
	srv->dead_deadline = loop_now() + RESTART_READY_S * NSEC_PER_SEC;
	return true;
}

/*
 * A dead device (backend.dead: CUDA_ERROR_CONTAINED and its kind, or a
 * recovery that failed) is not used again in this process: cuda.h says
 * of such errors that "the process must be terminated and relaunched".
 * djinnd says so, hands its state over where it can (dead_restart())
 * and else drains, and exits with DJINND_EXIT_DEVICE_DEAD, which
 * systemd's Restart=on-failure restarts. Work on the dead device fails
 * -EIO meanwhile (the backend refuses it); on the other devices it
 * finishes. Called before each wait of the I/O loop, which wakes for
 * the job that failed when the device died, and every second from a
 * timer for any other thread that found it, and for a successor that
 * does not come.
 */
static void devices_watch(struct server *srv)
{
	if (srv->exit_status) {
		if (srv->dead_deadline && !srv->restart && !srv->draining &&
		    loop_now() > srv->dead_deadline) {
			log_err("%s: no successor came for the state in %d s: "
				"draining",
				srv->dead_msg, RESTART_READY_S);
			srv->dead_deadline = 0;
			drain_begin(srv);
		}
		return;
	}
	for (unsigned int i = 0; i < srv->nr_dev; i++) {
		struct device *d = &srv->dev[i];
		const char *why =
			__atomic_load_n(&d->backend->dead, __ATOMIC_ACQUIRE);

		if (!why)
			continue;
		snprintf(srv->dead_msg, sizeof(srv->dead_msg),
			 "device %s is dead after %s", d->name, why);
		log_err("%s: exiting so that systemd restarts djinnd",
			srv->dead_msg);
		srv->exit_status = DJINND_EXIT_DEVICE_DEAD;
		/* a restart under way takes it as it is */
		if (!srv->draining && !srv->restart && !dead_restart(srv))
			drain_begin(srv);
		return;
	}
}

static void before_sleep(struct loop *l)
{
	struct server *srv = container_of(l, struct server, loop);

	conns_close_failed(srv);
	devices_watch(srv);
	journal_commit(srv);
}

static uint64_t dead_watch_tick(struct loop_timer *t, uint64_t now)
{
	struct server *srv = container_of(t, struct server, dead_watch);

	devices_watch(srv);
	return srv->exit_status && !srv->dead_deadline ? 0 : NSEC_PER_SEC;
}

static void sig_arm(void)
{
	struct io_uring_sqe *sqe = loop_sqe(&sigs.srv->loop, &sigs.src, 0);

	if (!sqe) {
		loop_retry(&sigs.srv->loop, &sigs.rearm);
		return;
	}
	io_uring_prep_read(sqe, sigs.rfd, &sigs.signo, 1, 0);
}

static uint64_t sig_rearm(struct loop_timer *t, uint64_t now)
{
	sig_arm();
	return 0;
}

static void sig_complete(struct io_src *src, struct io_uring_cqe *cqe,
			 unsigned int tag)
{
	struct server *srv = sigs.srv;

	if (cqe->res == 1) {
		switch (sigs.signo) {
		case SIGHUP:
			log_notice("SIGHUP: reopening the log");
			log_reopen();
			if (srv->hooks.reload)
				srv->hooks.reload(srv);
			break;
		case SIGUSR2: {
			char why[DJINN_MAX_ERROR_MSG];
			pid_t pid;
			int ret = srv->hooks.restart ?
					  srv->hooks.restart(srv, &pid, why,
							     sizeof(why)) :
					  -EOPNOTSUPP;

			if (ret)
				log_err("SIGUSR2: no restart: %s",
					ret == -EOPNOTSUPP &&
							!srv->hooks.restart ?
						"not served" :
						why);
			break;
		}
		case SIGTERM:
		case SIGINT:
			if (srv->restart) {
				srv->term_pending = true;
				break;
			}
			if (srv->draining)
				break;
			if (sigs.signo == SIGTERM && restart_to_store(srv)) {
				if (srv->hooks.stopping)
					srv->hooks.stopping(srv);
				break;
			}
			log_notice("%s: draining %u queued jobs, then exiting",
				   strsignal(sigs.signo), server_depth(srv));
			drain_begin(srv);
			break;
		}
	}
	if (cqe->res != -ECANCELED)
		sig_arm();
}

/* Install the handlers; before any thread of djinnd's own is made. */
int server_block_signals(void)
{
	struct sigaction sa = { .sa_handler = on_signal,
				.sa_flags = SA_RESTART };
	int fds[2];

	if (pipe2(fds, O_CLOEXEC | O_NONBLOCK))
		return -errno;
	sigs.rfd = fds[0];
	sigs.wfd = fds[1];
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGTERM, &sa, NULL) || sigaction(SIGINT, &sa, NULL) ||
	    sigaction(SIGHUP, &sa, NULL) || sigaction(SIGUSR2, &sa, NULL))
		return -errno;
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

static int signals_init(struct server *srv)
{
	sigs.srv = srv;
	srv->hooks.drain = drain_begin;
	sigs.src.complete = sig_complete;
	sigs.drain.fn = drain_tick;
	INIT_LIST_HEAD(&sigs.drain.node);
	sigs.rearm.fn = sig_rearm;
	INIT_LIST_HEAD(&sigs.rearm.node);
	sig_arm();
	return 0;
}

/*
 * device.backend: cpu, cuda, or auto: cuda when this djinnd has the CUDA
 * backend and the driver loads and sees the devices asked for, else the
 * cpu; the log says which and why. The devices: device.devices (--device
 * N, repeatable), or all the GPUs the driver sees for "all" (the
 * default). On the CPU, "all" is one device, and each index named makes
 * a CPU device of its own (its own --cpu-mem of memory, its executors
 * and kernel threads; they share the cores): for tests and for
 * partitioning memory. When auto falls back to the CPU, the indices
 * named GPUs: one CPU device. *@nr: the devices, their backends in @out.
 */
/* CPU device @k: over the pool its predecessor passed for it, if any
 * (a restart's: its data is adopted in place), else a pool of its own. */
static int cpu_open(struct server *srv, unsigned int k, struct backend **out)
{
	const struct server_config *cfg = &srv->cfg;
	const struct vmu_piece *keep;
	struct vmu_provider *prov;
	uint64_t gran;
	unsigned int nr;
	int fd = restart_pool(srv, k, &gran, &keep, &nr), ret;

	if (fd < 0)
		return cpu_backend_create(cfg->cpu_mem, cfg->threads, out);
	ret = vmu_host_provider_open(fd, cfg->cpu_mem, gran, keep, nr, &prov);
	if (ret) {
		log_err("restart: cpu:%u: the pool passed does not open: %s", k,
			strerror(-ret));
		/* a --handover predecessor serves on; from a store, djinnd
		 * starts afresh */
		if (fdstore_handed_state())
			return ret;
		restart_abandon(srv, true);
		return cpu_backend_create(cfg->cpu_mem, cfg->threads, out);
	}
	if (prov->capacity > cfg->cpu_mem)
		log_notice("cpu:%u: the pool passed is %llu MiB, more than "
			   "--cpu-mem: it keeps its size",
			   k, (unsigned long long)(prov->capacity >> 20));
	return cpu_backend_with(prov, cfg->threads, out);
}

static int backends_open(struct server *srv, struct backend **out,
			 unsigned int *ordinals, unsigned int *nr, bool *cpu)
{
	const struct server_config *cfg = &srv->cfg;
	bool want_cuda = !strcmp(cfg->backend, "cuda");
	bool is_auto = !strcmp(cfg->backend, "auto");
	unsigned int n = 0, k = 0;
	uint64_t mask;
	char msg[512], why[600];
	int ret = -ENODEV;

	*nr = 0;
	*cpu = false;
	if (!want_cuda && !is_auto)
		goto cpu;
	if (!cuda_backend_create || !cuda_devices) {
		snprintf(why, sizeof(why),
			 "this djinnd was built without the CUDA backend "
			 "(no nvcc)");
		goto no_cuda;
	}
	ret = cuda_devices(&n, msg, sizeof(msg));
	if (ret) {
		snprintf(why, sizeof(why), "%s", msg);
		goto no_cuda;
	}
	for (unsigned int i = 0; i < 64; i++) {
		if (cfg->devices ? !(cfg->devices & (1ull << i)) : i >= n)
			continue;
		if (i >= n) {
			ret = -ENODEV;
			snprintf(why, sizeof(why),
				 "no CUDA device %u: the driver sees %u", i, n);
			goto undo;
		}
		ret = cuda_backend_create(i, cfg->gpu_mem, &out[k], msg,
					  sizeof(msg));
		if (ret) {
			snprintf(why, sizeof(why), "cuda:%u: %s", i, msg);
			goto undo;
		}
		ordinals[k++] = i;
		log_notice("backend %s: cuda:%u, %s%s", cfg->backend, i, msg,
			   is_auto ? " (a CUDA device is present)" : "");
	}
	if (!k) {
		ret = -ENODEV;
		snprintf(why, sizeof(why), "the driver sees no CUDA device");
		goto no_cuda;
	}
	*nr = k;
	return 0;

undo:
	for (; k; k--)
		out[k - 1]->ops->destroy(out[k - 1]);
no_cuda:
	if (want_cuda) {
		log_err("backend cuda: %s", why);
		return ret ? ret : -ENODEV;
	}
	log_notice("backend auto: %s: using the cpu", why);
cpu:
	/* auto's fallback: the devices named were GPUs; one CPU device */
	mask = is_auto ? 0 : cfg->devices;
	*cpu = true;
	for (unsigned int i = 0; i < 64; i++) {
		if (mask ? !(mask & (1ull << i)) : i > 0)
			continue;
		ret = cpu_open(srv, k, &out[k]);
		if (ret) {
			log_err("cpu backend with %llu bytes: %s",
				(unsigned long long)cfg->cpu_mem,
				strerror(-ret));
			while (k--)
				out[k]->ops->destroy(out[k]);
			return ret;
		}
		/* --cpu-device-only: djinnd may not touch its bytes */
		out[k]->provider->device_only = cfg->cpu_device_only;
		ordinals[k++] = i;
	}
	if (cfg->cpu_device_only)
		log_warn("cpu devices are device-only (--cpu-device-only): "
			 "their memory is reached through copies; for tests");
	*nr = k;
	return 0;
}

void server_session_limits(struct server *srv)
{
	const struct server_config *cfg = &srv->cfg;

	srv->sessions.lim = (struct session_limits){
		.max_sessions = cfg->max_sessions,
		.max_sessions_per_uid = cfg->max_sessions_per_uid,
		.lease_default_ns = cfg->lease_default_ns,
		.lease_min_ns = cfg->lease_min_ns,
		.lease_max_ns = cfg->lease_max_ns,
		.maps = cfg->tmaps,
		.nr_maps = cfg->nr_tmaps,
	};
}

void server_tenant_quotas(struct server *srv, bool on)
{
	for (unsigned int i = 0; i < srv->nr_dev; i++) {
		struct device *d = &srv->dev[i];
		uint64_t sum = 0;

		if (!d->vmu)
			continue;
		for (unsigned int k = 0; on && k < srv->cfg.nr_tmaps; k++)
			sum += srv->cfg.tmaps[k].guaranteed;
		if (sum > d->backend->provider->capacity)
			log_warn("%s: the tenants' guaranteed shares (%llu "
				 "bytes) pass the device's %llu: not all can "
				 "hold",
				 d->name, (unsigned long long)sum,
				 (unsigned long long)
					 d->backend->provider->capacity);
		for (unsigned int k = 0; k < srv->cfg.nr_tmaps; k++) {
			const struct tenant_map *m = &srv->cfg.tmaps[k];
			int ret;

			ret = !m->memory ?
				      0 :
				      vmu_tenant_set_quota(d->vmu, m->tenant,
							   on ? m->memory : 0);
			if (!ret && m->swap)
				ret = vmu_tenant_set_swap_quota(
					d->vmu, m->tenant, on ? m->swap : 0);
			if (!ret && m->guaranteed)
				ret = vmu_tenant_set_guarantee(
					d->vmu, m->tenant,
					on ? m->guaranteed : 0);
			if (ret)
				log_err("%s: tenant %s's quotas: %s", d->name,
					m->tenant, strerror(-ret));
		}
	}
}

/* @model's of the @n budgets @b, or NULL. */
static const struct model_budget *budget_find(const struct model_budget *b,
					      unsigned int n, const char *model)
{
	for (unsigned int i = 0; i < n; i++)
		if (!strcmp(b[i].model, model))
			return &b[i];
	return NULL;
}

/* @model's budget on @d's model store (@bytes 0: none). It only fails
 * for a name the configuration refuses, or out of memory. */
static void budget_set(struct device *d, const char *model, uint64_t bytes,
		       unsigned int slots)
{
	char msg[256] = "";
	int ret = model_store_set_budget(d->models, model, bytes, slots, msg,
					 sizeof(msg));

	if (ret)
		log_err("%s: model %s's budget: %s", d->name, model,
			*msg ? msg : strerror(-ret));
}

void server_model_budgets(struct server *srv, const struct model_budget *old,
			  unsigned int nr_old)
{
	const struct server_config *cfg = &srv->cfg;

	for (unsigned int i = 0; i < srv->nr_dev; i++) {
		struct device *d = &srv->dev[i];

		if (!d->models)
			continue;
		for (unsigned int k = 0; k < cfg->nr_budgets; k++)
			budget_set(d, cfg->budgets[k].model,
				   cfg->budgets[k].bytes,
				   cfg->budgets[k].slots);
		for (unsigned int k = 0; k < nr_old; k++)
			if (!budget_find(cfg->budgets, cfg->nr_budgets,
					 old[k].model))
				budget_set(d, old[k].model, 0, 0);
	}
}

/* The host memory device @d's swapped-out regions go to, @size of it: a
 * file a restart hands over with the pool (its predecessor's, if one was
 * passed), where the provider has one (the CPU's). */
static int swap_arena(struct server *srv, struct device *d, uint64_t size)
{
	struct vmu_provider *prov = d->backend->provider;
	const struct vmu_piece *keep = NULL;
	unsigned int nr = 0;
	int fd, ret;

	if (!prov->ops->swap_arena)
		return 0;
	fd = restart_swap(srv, d->index, &keep, &nr);
	ret = prov->ops->swap_arena(prov, size, fd, keep, nr);
	if (ret && fd >= 0) {
		log_err("restart: %s: the swap arena passed does not open: %s",
			d->name, strerror(-ret));
		/* a --handover predecessor serves on; from a store, djinnd
		 * starts afresh */
		if (fdstore_handed_state())
			return ret;
		restart_abandon(srv, true);
		ret = prov->ops->swap_arena(prov, size, -1, NULL, 0);
	}
	if (ret) {
		log_warn("%s: no swap arena (%s): swapped-out data is copied "
			 "at a restart",
			 d->name, strerror(-ret));
	} else if (fd >= 0) {
		uint64_t kept = 0;

		for (unsigned int i = 0; i < nr; i++)
			kept += keep[i].len;
		log_notice("restart: swap arena taken over: %llu MiB of "
			   "swapped-out data in place",
			   (unsigned long long)(kept >> 20));
	}
	return 0;
}

/* A device's VMU, executors and model store, over its backend. */
static int device_init(struct server *srv, struct device *d)
{
	const struct server_config *cfg = &srv->cfg;
	/* Swapped-out regions may hold memory.swap bytes of host memory,
	 * by default as much as the device has. */
	struct vmu_config vcfg = { .swap_limit = cfg->cpu_mem,
				   .warn_pct = cfg->warn_pct,
				   .crit_pct = cfg->crit_pct };
	struct exec_source src;
	int ret;

	/* on a GPU: as much as the device has for sessions */
	if (strcmp(d->backend->name, "cpu"))
		vcfg.swap_limit = d->backend->provider->capacity;
	if (cfg->swap)
		vcfg.swap_limit = cfg->swap;
	/* text made before a fault is lost with it (vmu.h) */
	vcfg.faults = &d->backend->faults;
	/* room for the swap limit and the buffers the VMU keeps for reuse
	 * (a quarter of the device by default): only address space until
	 * touched */
	ret = swap_arena(srv, d,
			 vcfg.swap_limit + d->backend->provider->capacity / 4);
	if (ret)
		return ret;
	ret = vmu_create(d->backend->provider, &vcfg, &d->vmu);
	if (ret)
		return ret;
	log_info("device %s: %llu MiB, granule %llu KiB (device %u)", d->name,
		 (unsigned long long)(d->backend->provider->capacity >> 20),
		 (unsigned long long)(d->backend->provider->granularity >> 10),
		 d->index);
	{
		struct sched_config sc = server_sched_config(cfg);

		ret = sched_create(&srv->loop, d, &sc, &session_sched_ops,
				   &d->sched);
		if (ret)
			return ret;
	}
	d->compute_threads = cfg->compute_threads ? cfg->compute_threads :
						    d->backend->def_compute;
	if (d->compute_threads > d->backend->max_compute) {
		log_err("device.compute_threads %u: device %s runs at most %u "
			"graph%s at once",
			d->compute_threads, d->name, d->backend->max_compute,
			d->backend->max_compute == 1 ? "" : "s");
		return -EINVAL;
	}
	src = sched_source(d->sched, SCHED_COMPUTE);
	ret = executor_start(&srv->loop, d, EXEC_GRAPH, d->compute_threads,
			     &src, &d->exec);
	if (ret)
		return ret;
	src = sched_source(d->sched, SCHED_MEM);
	ret = executor_start(&srv->loop, d, EXEC_MEM, 0, &src, &d->mem);
	if (ret)
		return ret;
	if (cfg->model_dir) {
		ret = model_store_create(d->vmu, cfg->model_dir, &d->models);
		if (ret)
			return ret;
	}
	return 0;
}

static int devices_open(struct server *srv)
{
	struct backend *b[DEVICE_MAX];
	unsigned int ord[DEVICE_MAX], n;
	bool cpu;
	int ret;

	ret = backends_open(srv, b, ord, &n, &cpu);
	if (ret)
		return ret;
	srv->dev = calloc(n, sizeof(*srv->dev));
	if (!srv->dev) {
		while (n--)
			b[n]->ops->destroy(b[n]);
		return -ENOMEM;
	}
	/* Each is the server's from here: server_exit() undoes them. */
	srv->nr_dev = n;
	for (unsigned int i = 0; i < n; i++) {
		struct device *d = &srv->dev[i];

		d->index = i;
		d->ordinal = ord[i];
		d->backend = b[i];
		/* One CPU device keeps the name it always had. */
		if (cpu && (n > 1 || ord[i]))
			snprintf(d->name, sizeof(d->name), "cpu:%u", ord[i]);
		else
			snprintf(d->name, sizeof(d->name), "%s", b[i]->name);
	}
	if (cpu && n > 1)
		log_notice("backend %s: %u cpu devices of %llu MiB each, "
			   "sharing the cores",
			   srv->cfg.backend, n,
			   (unsigned long long)(srv->cfg.cpu_mem >> 20));
	for (unsigned int i = 0; i < n; i++) {
		ret = device_init(srv, &srv->dev[i]);
		if (ret)
			return ret;
	}
	server_tenant_quotas(srv, true);
	server_model_budgets(srv, NULL, 0);
	if (!srv->cfg.model_dir)
		return 0;
	log_info("models: from %s", srv->cfg.model_dir);
	for (unsigned int i = 0; i < srv->cfg.nr_budgets; i++) {
		const struct model_budget *bg = &srv->cfg.budgets[i];

		log_info("model %s: at most %llu bytes on each device, a "
			 "ring of %u layers when over it",
			 bg->model, (unsigned long long)bg->bytes,
			 bg->slots ? bg->slots : 2);
	}
	return 0;
}

int server_init(struct server *srv, const struct server_config *cfg)
{
	bool cuda;
	int ret, kfd;

	memset(srv, 0, sizeof(*srv));
	srv->cfg = *cfg;
	INIT_LIST_HEAD(&srv->listeners);
	INIT_LIST_HEAD(&srv->conns);
	INIT_LIST_HEAD(&srv->closing);
	INIT_LIST_HEAD(&srv->http);
	srv->started_ns = loop_now();
	ret = loop_init(&srv->loop, 4096);
	if (ret) {
		log_err("io_uring: %s", strerror(-ret));
		return ret;
	}
	session_table_init(&srv->sessions, &srv->loop);
	server_session_limits(srv);
	/* what was passed at start: a predecessor's state is read before
	 * a CPU device opens, as its memory is the predecessor's pool
	 * (restart.h); GPUs open first, outside the clients' pause (the
	 * predecessor holds them once asked, in fdstore_init()) */
	cuda = !strcmp(cfg->backend, "cuda");
	ret = cuda ? devices_open(srv) : 0;
	if (ret)
		return ret;
	ret = fdstore_init(cfg->handover);
	if (ret < 0)
		return ret; /* a handover that failed: not in its place */
	/* the leases after: a predecessor's /dev/djinn is passed with its
	 * sessions, whose kernel sessions live on it; the store keeps it
	 * with the record until the restore (a start that fails before
	 * leaves both for the next). Without a record to restore (a crash
	 * journal's that holds none, say) the file is not taken over: the
	 * proxies on it end with it. */
	kfd = fdstore_take(RESTART_KMOD_FD);
	ret = restart_record_open(srv);
	if (kfd >= 0 && !srv->restore) {
		fdstore_drop(RESTART_KMOD_FD, kfd);
		kfd = -1;
	}
	if (!ret)
		ret = lease_provider_open(&srv->sessions, cfg->leases, kfd,
					  &srv->sessions.leases);
	else if (kfd >= 0)
		close(kfd);
	if (!ret && !cuda)
		ret = devices_open(srv);
	if (ret)
		return ret;
	if (cfg->fault_injection)
		log_warn("fault injection is on (--fault-injection): any "
			 "admin may fault the device; for tests only");
	ret = signals_init(srv);
	if (ret)
		return ret;
	{
		char why[512];

		ret = tls_server_init(srv, why, sizeof(why));
		if (!ret)
			ret = tokens_init(srv, why, sizeof(why));
		if (ret) {
			log_err("%s", why);
			return ret;
		}
	}
	ret = ident_start(srv);
	if (ret)
		return ret;
	/* the contexts restored keep their logits where a journal finds
	 * them (a journal without is logged, and loses its contexts) */
	journal_prepare(srv);
	ret = listeners_open(srv);
	if (ret)
		return ret;
	/* once restored: a crash from here keeps the sessions (a journal
	 * that cannot start is logged, and djinnd serves without) */
	journal_start(srv, srv->journal_prev);
	for (char **p = srv->journal_prev; p && *p; p++)
		free(*p);
	free(srv->journal_prev);
	srv->journal_prev = NULL;
	session_table_start(&srv->sessions);
	srv->loop.before_sleep = before_sleep;
	srv->dead_watch.fn = dead_watch_tick;
	loop_timer_add(&srv->loop, &srv->dead_watch, loop_now() + NSEC_PER_SEC);
	return 0;
}

struct sched_config server_sched_config(const struct server_config *cfg)
{
	struct sched_config sc = cfg->sched;

	sc.shares = cfg->shares;
	sc.nr_shares = cfg->nr_shares;
	sc.batches = cfg->batches;
	sc.nr_batches = cfg->nr_batches;
	return sc;
}

int server_run(struct server *srv)
{
	return loop_run(&srv->loop);
}

void server_exit(struct server *srv)
{
	journal_stop(srv);
	restart_abandon(srv, false);
	if (srv->nr_dev && srv->dev[0].exec)
		while (!list_empty(&srv->sessions.list))
			session_end(&srv->sessions,
				    list_first_entry(&srv->sessions.list,
						     struct session, node),
				    SESSION_SHUTDOWN);
	/* Each answers its last jobs. */
	for (unsigned int i = 0; i < srv->nr_dev; i++) {
		if (srv->dev[i].exec)
			executor_stop(srv->dev[i].exec);
		if (srv->dev[i].mem)
			executor_stop(srv->dev[i].mem);
	}
	conns_close_all(srv, true);
	/* Let the sockets' last completions come back (each frees what it
	 * held), for at most a second; then tear down. */
	for (uint64_t end = loop_now() + NSEC_PER_SEC;
	     (srv->nr_conns || srv->nr_http) && loop_now() < end;)
		loop_once(&srv->loop, 10 * NSEC_PER_MSEC);
	if (srv->sessions.leases)
		srv->sessions.leases->ops->destroy(srv->sessions.leases);
	listeners_close(srv);
	loop_exit(&srv->loop);
	/* Only now can nothing on the ring name them any more. */
	listeners_free(srv);
	tls_server_free(srv);
	tokens_free(srv);
	ident_stop(srv);
	for (unsigned int i = 0; i < srv->nr_dev; i++) {
		struct device *d = &srv->dev[i];

		if (d->exec)
			executor_free(d->exec);
		if (d->mem)
			executor_free(d->mem);
		sched_destroy(d->sched);
		/* Every session's holds are closed by now. */
		if (d->models)
			model_store_destroy(d->models);
		if (d->vmu)
			vmu_destroy(d->vmu);
		if (d->backend)
			d->backend->ops->destroy(d->backend);
	}
	free(srv->dev);
	session_table_fini(&srv->sessions);
	if (sigs.rfd >= 0) {
		close(sigs.rfd);
		close(sigs.wfd);
	}
	log_info("stopped");
}
