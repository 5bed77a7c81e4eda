// SPDX-License-Identifier: MIT
/*
 * djinn_lbench: djinnd's two lease providers side by side, in the guest
 * (make bench-kmod). JSON lines on stdout, as djinn_kbench's: the value
 * with --leases kmod, the baseline with --leases user, in the same boot:
 *
 *  - signal latency: from the client's clock read before its signal (the
 *    SIGNAL ioctl with --leases kmod; a SIGNAL frame over the unix socket
 *    with --leases user) to djinnd's receipt (its event handler, or
 *    op_signal), p50/p99 over N signals; djinnd logs each receipt at
 *    debug level with its CLOCK_MONOTONIC time and the signal's
 *    expected_ns, which carries the sample's number;
 *  - death to free: from SIGKILL of a client holding 16 MiB to the moment
 *    its session is gone from djinnd's admin socket (polled every
 *    millisecond); with kmod the module tells at once, with user leases
 *    djinnd waits for the lease (1 s here).
 *
 * Under TCG the numbers only compare the two providers with each other.
 * A run that could not measure prints an "error" line and exits 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/djinn.h>

#include "djd.h"

#define NSIG_SAMPLES 300
#define NDEATHS 5
#define USER_LEASE_MS 1000
#define MiB (1ull << 20)

static uint64_t t0[NSIG_SAMPLES + 1], lat[NSIG_SAMPLES];

/* One provider's figures, in us and ms; 0: not measured. */
struct figures {
	double sig_p50_us, sig_p99_us, death_p50_ms;
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The receipts in djinnd's log: lat[] for each sample found; count. */
static int receipts(void)
{
	FILE *f = fopen(DJD_LOG, "r");
	char line[1024];
	int n = 0;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long seq, at;
		unsigned int phase;
		char *p = strstr(line, ": phase "),
		     *r = strstr(line, "received ");

		if (!p || !r ||
		    sscanf(p, ": phase %u for %llu ns", &phase, &seq) != 2 ||
		    sscanf(r, "received %llu", &at) != 1 || !seq ||
		    seq > NSIG_SAMPLES || at < t0[seq])
			continue;
		lat[n++] = at - t0[seq];
	}
	fclose(f);
	return n;
}

static void latency(const char *leases, int n, struct figures *f)
{
	if (n <= 0) {
		printf("{\"bench\": \"djinnd_signal\", \"leases\": \"%s\", "
		       "\"error\": \"no receipts in djinnd's log\"}\n",
		       leases);
		return;
	}
	qsort(lat, (size_t)n, sizeof(lat[0]), cmp_u64);
	f->sig_p50_us = (double)lat[n / 2] / 1e3;
	f->sig_p99_us = (double)lat[n * 99 / 100] / 1e3;
}

static int signal_kmod(void)
{
	struct djinn_ioc_signal sg = { .size = sizeof(sg),
				       .phase = DJINN_SIGNAL_COMPUTE };
	struct djd_client c;
	int ret = djd_client_bind(&c, "bench", 0);

	if (ret)
		return ret;
	for (int i = 1; i <= NSIG_SAMPLES; i++) {
		sg.expected_ns = (uint64_t)i;
		t0[i] = djd_now_ns();
		if (ioctl(c.dev, DJINN_IOC_SIGNAL, &sg)) {
			ret = -errno;
			break;
		}
		usleep(2000); /* one at a time through djinnd */
	}
	djd_client_close(&c);
	return ret;
}

static int signal_user(void)
{
	struct djinn_session_open o = { .lease_ns = 0 };
	struct djinn_session_resp r;
	struct djinn_signal sg = { .phase = DJINN_PHASE_COMPUTE };
	int fd = djd_connect(DJD_SOCK), ret;

	if (fd < 0)
		return fd;
	snprintf(o.tenant, sizeof(o.tenant), "bench");
	ret = djd_call(fd, DJINN_MSG_SESSION_OPEN, 0, &o, sizeof(o), &r,
		       sizeof(r), NULL);
	for (int i = 1; !ret && i <= NSIG_SAMPLES; i++) {
		sg.expected_ns = (uint64_t)i;
		t0[i] = djd_now_ns();
		ret = djd_call(fd, DJINN_MSG_SIGNAL, r.session_id, &sg,
			       sizeof(sg), NULL, 0, NULL);
		usleep(2000);
	}
	close(fd);
	return ret;
}

/* A client with 16 MiB, SIGKILLed: ns until djinnd no longer has it. */
static int64_t death(bool kmod)
{
	uint64_t id, t;
	int pfd[2], status;
	pid_t pid;

	if (pipe(pfd))
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (!pid) {
		struct djd_client c;

		close(pfd[0]);
		if (kmod) {
			if (djd_client_bind(&c, "dying", 0) ||
			    djd_tensor(c.sock, c.id, 16 * MiB))
				_exit(1);
			id = c.id;
		} else {
			struct djinn_session_open o = { 0 };
			struct djinn_session_resp r;
			int fd = djd_connect(DJD_SOCK);

			snprintf(o.tenant, sizeof(o.tenant), "dying");
			if (fd < 0 ||
			    djd_call(fd, DJINN_MSG_SESSION_OPEN, 0, &o,
				     sizeof(o), &r, sizeof(r), NULL) ||
			    djd_tensor(fd, r.session_id, 16 * MiB))
				_exit(1);
			id = r.session_id;
		}
		if (write(pfd[1], &id, sizeof(id)) != sizeof(id))
			_exit(1);
		for (;;)
			pause();
	}
	close(pfd[1]);
	if (read(pfd[0], &id, sizeof(id)) != sizeof(id)) {
		close(pfd[0]);
		waitpid(pid, NULL, 0);
		return -EIO;
	}
	close(pfd[0]);
	t = djd_now_ns();
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	while (djd_session(id, NULL) == 0) {
		if (djd_now_ns() - t > 30000000000ull)
			return -ETIMEDOUT;
		usleep(1000);
	}
	return (int64_t)(djd_now_ns() - t);
}

static void deaths(const char *leases, struct figures *f)
{
	uint64_t d[NDEATHS];
	int n = 0;

	for (int i = 0; i < NDEATHS; i++) {
		int64_t ns = death(!strcmp(leases, "kmod"));

		if (ns > 0)
			d[n++] = (uint64_t)ns;
	}
	if (!n) {
		printf("{\"bench\": \"djinnd_death_to_free\", \"leases\": "
		       "\"%s\", \"error\": \"no client died cleanly\"}\n",
		       leases);
		return;
	}
	qsort(d, (size_t)n, sizeof(d[0]), cmp_u64);
	f->death_p50_ms = (double)d[n / 2] / 1e6;
}

static int run(const char *leases, struct figures *f)
{
	pid_t pid = djd_start(leases, USER_LEASE_MS, "debug");
	int ret;

	if (pid < 0) {
		fprintf(stderr, "djinn_lbench: djinnd --leases %s: %s\n",
			leases, strerror((int)-pid));
		return 1;
	}
	memset(t0, 0, sizeof(t0));
	ret = strcmp(leases, "kmod") ? signal_user() : signal_kmod();
	if (ret)
		fprintf(stderr, "djinn_lbench: %s signals: %s\n", leases,
			strerror(-ret));
	deaths(leases, f);
	/* stopping flushes the log */
	if (djd_stop(pid))
		ret = ret ? ret : -EIO;
	latency(leases, receipts(), f);
	return ret || !f->sig_p50_us || !f->death_p50_ms ? 1 : 0;
}

static void line(const char *bench, const char *metric, double value,
		 const char *unit, double baseline)
{
	printf("{\"bench\": \"%s\", \"metric\": \"%s\", \"value\": %.1f, "
	       "\"unit\": \"%s\", \"baseline\": %.1f, \"ratio\": %.2f}\n",
	       bench, metric, value, unit, baseline,
	       baseline ? value / baseline : 0);
}

int main(void)
{
	struct figures k = { 0 }, u = { 0 };
	int rc = run("kmod", &k);

	rc |= run("user", &u);
	line("djinnd_signal", "p50", k.sig_p50_us, "us", u.sig_p50_us);
	line("djinnd_signal", "p99", k.sig_p99_us, "us", u.sig_p99_us);
	line("djinnd_death_to_free", "p50", k.death_p50_ms, "ms",
	     u.death_p50_ms);
	return rc;
}
