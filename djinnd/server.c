// SPDX-License-Identifier: MIT
/*
 * Set-up, the lease timer, signals, and shutdown.
 *
 * SIGTERM (and SIGINT) drain: stop accepting, let queued and running
 * graphs finish and their answers go out, then end every session (the
 * one teardown, reason "daemon shutdown") and stop; the stopping hook
 * tells the service manager. SIGHUP reopens the log file, then calls
 * the reload hook (main.c reads djinnd.conf again).
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
#include "server.h"
#include "exec/executor.h"
#include "model/store.h"
#include "net/conn.h"

uint64_t server_started_ns;

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

static void lease_expired(struct session *s, void *arg)
{
	struct server *srv = arg;

	/* Waiting on the memory executor, its connection is paused: the
	 * HEARTBEATs the client sends meanwhile cannot be read yet. */
	if (s->mem_waits) {
		srv->leases->ops->renew(srv->leases, s, loop_now());
		return;
	}
	session_end(arg, s, SESSION_EXPIRED);
}

static uint64_t lease_tick(struct loop_timer *t, uint64_t now)
{
	struct server *srv = container_of(t, struct server, lease_timer);
	uint64_t next =
		srv->leases->ops->poll(srv->leases, now, lease_expired, srv);

	return next ? next : 1000000;
}

#define DRAIN_MAX_NS 10000000000ull /* then stop all the same */

static uint64_t drain_deadline;

/* Draining: no new requests are read; once no job is queued or running
 * (or after DRAIN_MAX_NS), end everything. */
static uint64_t drain_tick(struct loop_timer *t, uint64_t now)
{
	struct server *srv = sigs.srv;

	/* Graphs and model steps, and memory jobs (a model loading) */
	unsigned int busy =
		executor_depth(srv->exec) + executor_depth(srv->mem);

	if (busy && now < drain_deadline)
		return 5000000;
	if (busy)
		log_warn("drain: %u jobs still queued after %llu s: stopping",
			 busy,
			 (unsigned long long)(DRAIN_MAX_NS / 1000000000ull));
	while (!list_empty(&srv->sessions))
		session_end(srv,
			    list_first_entry(&srv->sessions, struct session,
					     node),
			    SESSION_SHUTDOWN);
	conns_close_all(srv, false);
	srv->loop.stop = true;
	return 0;
}

static void sig_arm(void)
{
	struct io_uring_sqe *sqe = loop_sqe(&sigs.srv->loop, &sigs.src, 0);

	if (sqe)
		io_uring_prep_read(sqe, sigs.rfd, &sigs.signo, 1, 0);
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
		case SIGTERM:
		case SIGINT:
			if (srv->draining)
				break;
			log_notice(
				"%s: draining %u queued graphs, then exiting",
				strsignal(sigs.signo),
				executor_depth(srv->exec));
			srv->draining = true;
			if (srv->hooks.stopping)
				srv->hooks.stopping(srv);
			listeners_close(srv);
			/* Read no more requests; answers still go out. */
			conns_close_all(srv, false);
			drain_deadline = loop_now() + DRAIN_MAX_NS;
			loop_timer_add(&srv->loop, &sigs.drain, loop_now());
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
	    sigaction(SIGHUP, &sa, NULL))
		return -errno;
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

static int signals_init(struct server *srv)
{
	sigs.srv = srv;
	sigs.src.complete = sig_complete;
	sigs.drain.fn = drain_tick;
	INIT_LIST_HEAD(&sigs.drain.node);
	sig_arm();
	return 0;
}

/*
 * device.backend: cpu, cuda, or auto: cuda when this djinnd has the CUDA
 * backend, the driver loads and sees the device asked for (the lowest of
 * device.devices, 0 for all), else the cpu; the log says which and why.
 * One djinnd drives one device for now.
 */
static int backend_open(struct server *srv, const struct server_config *cfg)
{
	bool want_cuda = !strcmp(cfg->backend, "cuda");
	bool is_auto = !strcmp(cfg->backend, "auto");
	unsigned int dev = cfg->devices ?
				   (unsigned int)__builtin_ctzll(cfg->devices) :
				   0,
		     n = 0;
	char msg[512], why[600];
	int ret = -ENODEV;

	if (!want_cuda && !is_auto)
		goto cpu;
	if (!cuda_backend_create || !cuda_devices) {
		snprintf(why, sizeof(why),
			 "this djinnd was built without the CUDA backend "
			 "(no nvcc)");
	} else if ((ret = cuda_devices(&n, msg, sizeof(msg)))) {
		snprintf(why, sizeof(why), "%s", msg);
	} else if (dev >= n) {
		ret = -ENODEV;
		snprintf(why, sizeof(why),
			 "no CUDA device %u: the driver sees %u", dev, n);
	} else {
		ret = cuda_backend_create(dev, 0, &srv->backend, msg,
					  sizeof(msg));
		if (!ret) {
			log_notice("backend %s: cuda:%u, %s%s", cfg->backend,
				   dev, msg,
				   is_auto ? " (a CUDA device is present)" :
					     "");
			if (cfg->devices & (cfg->devices - 1))
				log_warn("device.devices names %d GPUs: this "
					 "djinnd drives one, cuda:%u",
					 __builtin_popcountll(cfg->devices),
					 dev);
			return 0;
		}
		snprintf(why, sizeof(why), "cuda:%u: %s", dev, msg);
	}
	if (want_cuda) {
		log_err("backend cuda: %s", why);
		return ret ? ret : -ENODEV;
	}
	log_notice("backend auto: %s: using the cpu", why);
cpu:
	ret = cpu_backend_create(cfg->cpu_mem, cfg->threads, &srv->backend);
	if (ret)
		log_err("cpu backend with %llu bytes: %s",
			(unsigned long long)cfg->cpu_mem, strerror(-ret));
	return ret;
}

int server_init(struct server *srv, const struct server_config *cfg)
{
	/* Swapped-out regions may hold as much host memory as the device
	 * has, no more. */
	struct vmu_config vcfg = { .swap_limit = cfg->cpu_mem,
				   .warn_pct = cfg->warn_pct,
				   .crit_pct = cfg->crit_pct };
	int ret;

	memset(srv, 0, sizeof(*srv));
	srv->cfg = *cfg;
	INIT_LIST_HEAD(&srv->sessions);
	INIT_LIST_HEAD(&srv->listeners);
	INIT_LIST_HEAD(&srv->conns);
	INIT_LIST_HEAD(&srv->closing);
	INIT_LIST_HEAD(&srv->http);
	server_started_ns = loop_now();
	ret = loop_init(&srv->loop, 4096);
	if (ret) {
		log_err("io_uring: %s", strerror(-ret));
		return ret;
	}
	ret = backend_open(srv, cfg);
	if (ret)
		return ret;
	/* on a GPU: as much as the device has for sessions */
	if (strcmp(srv->backend->name, "cpu"))
		vcfg.swap_limit = srv->backend->provider->capacity;
	/* text made before a fault is lost with it (vmu.h) */
	vcfg.faults = &srv->backend->faults;
	ret = vmu_create(srv->backend->provider, &vcfg, &srv->vmu);
	if (ret)
		return ret;
	log_info("device %s: %llu MiB, granule %llu KiB", srv->backend->name,
		 (unsigned long long)(srv->backend->provider->capacity >> 20),
		 (unsigned long long)(srv->backend->provider->granularity >>
				      10));
	ret = lease_provider_open(srv, cfg->leases, &srv->leases);
	if (ret)
		return ret;
	ret = executor_start(srv, EXEC_GRAPH, &srv->exec);
	if (ret)
		return ret;
	ret = executor_start(srv, EXEC_MEM, &srv->mem);
	if (ret)
		return ret;
	if (cfg->model_dir) {
		ret = model_store_create(srv->vmu, cfg->model_dir,
					 &srv->models);
		if (ret)
			return ret;
		log_info("models: from %s", cfg->model_dir);
	}
	if (cfg->fault_injection)
		log_warn("fault injection is on (--fault-injection): any "
			 "admin may fault the device; for tests only");
	ret = signals_init(srv);
	if (ret)
		return ret;
	ret = listeners_open(srv);
	if (ret)
		return ret;
	srv->lease_timer.fn = lease_tick;
	loop_timer_add(&srv->loop, &srv->lease_timer, loop_now() + 1000000);
	return 0;
}

int server_fault_inject(struct server *srv, char *msg, size_t msglen)
{
	struct backend *b = srv->backend;
	uint64_t before = __atomic_load_n(&b->faults, __ATOMIC_ACQUIRE);
	int ret;

	if (b->ops->inject_fault) {
		ret = b->ops->inject_fault(b, msg, msglen);
	} else {
		snprintf(srv->fault_why, sizeof(srv->fault_why),
			 "%s: injected fault, simulated: device memory "
			 "zeroed",
			 b->name);
		ret = vmu_fault_simulate(srv->vmu);
		snprintf(msg, msglen, "%s", srv->fault_why);
		if (ret)
			snprintf(msg, msglen, "%s: zeroing the memory: %s",
				 b->name, strerror(-ret));
	}
	if (__atomic_load_n(&b->faults, __ATOMIC_ACQUIRE) == before && !ret) {
		snprintf(msg, msglen, "%s: the fault was not counted", b->name);
		ret = -EIO;
	}
	if (__atomic_load_n(&b->faults, __ATOMIC_ACQUIRE) != before)
		log_warn("%s: fault %llu injected (ADMIN_FAULT_INJECT): %s",
			 b->name,
			 (unsigned long long)__atomic_load_n(&b->faults,
							     __ATOMIC_ACQUIRE),
			 msg);
	return ret;
}

void server_fault_info(struct server *srv, char *msg, size_t msglen)
{
	struct backend *b = srv->backend;

	if (b->ops->fault_info)
		b->ops->fault_info(b, msg, msglen);
	else
		snprintf(msg, msglen, "%s", srv->fault_why);
}

int server_run(struct server *srv)
{
	return loop_run(&srv->loop);
}

void server_exit(struct server *srv)
{
	if (srv->exec) {
		while (!list_empty(&srv->sessions))
			session_end(srv,
				    list_first_entry(&srv->sessions,
						     struct session, node),
				    SESSION_SHUTDOWN);
		executor_stop(srv->exec); /* answers the last jobs */
	}
	if (srv->mem)
		executor_stop(srv->mem);
	conns_close_all(srv, true);
	/* Let the sockets' last completions come back (each frees what it
	 * held), for at most a second; then tear down. */
	for (uint64_t end = loop_now() + 1000000000ull;
	     (srv->nr_conns || srv->nr_http) && loop_now() < end;)
		loop_once(&srv->loop, 10000000);
	if (srv->leases)
		srv->leases->ops->destroy(srv->leases);
	listeners_close(srv);
	loop_exit(&srv->loop);
	/* Only now can nothing on the ring name them any more. */
	listeners_free(srv);
	if (srv->exec)
		executor_free(srv->exec);
	if (srv->mem)
		executor_free(srv->mem);
	/* Every session's holds are closed by now. */
	if (srv->models)
		model_store_destroy(srv->models);
	if (srv->vmu)
		vmu_destroy(srv->vmu);
	if (srv->backend)
		srv->backend->ops->destroy(srv->backend);
	free(srv->stab);
	free(srv->uids);
	if (sigs.rfd >= 0) {
		close(sigs.rfd);
		close(sigs.wfd);
	}
	log_info("stopped");
}
