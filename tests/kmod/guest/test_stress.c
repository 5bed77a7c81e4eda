// SPDX-License-Identifier: MIT
/*
 * Many threads at once: openers opening, signalling, heart-beating,
 * mapping and closing sessions (some with leases short enough to expire
 * under them), the daemon posting to whatever is live, an admin killing
 * and dumping, and a listener counting events. Every call must answer 0
 * or an errno that the race explains, and every opened session must end
 * exactly once.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "kt.h"

#define OPENERS 6
#define ITERS 500

static uint64_t last_id; /* atomic */
static int stop; /* atomic */
static int bad; /* atomic: unexplained answers */
static uint64_t first_id;

static void unexplained(const char *what, int err)
{
	__atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
	print_error("%s: unexplained %d (%s)\n", what, err, strerror(-err));
}

static uint32_t rnd(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

static void *opener(void *arg)
{
	uint32_t seed = (uint32_t)(uintptr_t)arg * 2654435761u + 1;
	int i, ret;

	for (i = 0; i < ITERS; i++) {
		struct djinn_ioc_session_open o;
		uint64_t lease =
			rnd(&seed) % 4 ? 0 : (1 + rnd(&seed) % 5) * 1000000ull;
		int fd = kt_session("stress", lease, 4, &o);
		void *map = NULL;

		__atomic_store_n(&last_id, o.session_id, __ATOMIC_RELAXED);
		if (rnd(&seed) % 2) {
			map = mmap(NULL, o.ring_bytes, PROT_READ, MAP_SHARED,
				   fd, 0);
			if (map == MAP_FAILED)
				unexplained("mmap", -errno);
		}
		for (int k = 0; k < 3; k++) {
			ret = kt_signal(fd, 0, DJINN_SIGNAL_COMPUTE + k % 2, k);
			if (ret && ret != -ETIMEDOUT && ret != -ECANCELED)
				unexplained("signal", ret);
			ret = kt_heartbeat(fd, 0, false, 0);
			if (ret && ret != -ETIMEDOUT && ret != -ECANCELED)
				unexplained("heartbeat", ret);
		}
		if (map && map != MAP_FAILED)
			munmap(map, o.ring_bytes);
		close(fd);
	}
	return NULL;
}

static void *poster(void *arg)
{
	int d = kt_daemon();
	uint32_t seed = 7;

	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		uint64_t id = __atomic_load_n(&last_id, __ATOMIC_RELAXED);
		int ret;

		id -= rnd(&seed) % OPENERS;
		ret = kt_post(d, id, id, NULL);
		if (ret && ret != -ENOENT && ret != -EOVERFLOW)
			unexplained("post", ret);
	}
	close(d);
	return NULL;
}

static void *admin(void *arg)
{
	static struct kt_nl_msg all[256];
	int err, fd = kt_open_dev();
	struct kt_nl *nl = kt_nl_open(false, &err);
	uint32_t seed = 11;
	int n = 0;

	if (!nl) {
		unexplained("netlink", err);
		return NULL;
	}
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		uint64_t id = __atomic_load_n(&last_id, __ATOMIC_RELAXED);
		int ret;

		id -= rnd(&seed) % OPENERS;
		ret = rnd(&seed) % 2 ? kt_kill(fd, id) : kt_nl_kill(nl, id);
		if (ret && ret != -ENOENT)
			unexplained("kill", ret);
		if (++n % 16 == 0) {
			ret = kt_nl_dump(nl, all, 256);
			if (ret < 0)
				unexplained("dump", ret);
		}
		usleep(200);
	}
	kt_nl_close(nl);
	close(fd);
	return NULL;
}

struct tally {
	struct kt_nl *nl;
	long opened, ended;
	bool lost;
};

static void *listener(void *arg)
{
	struct tally *t = arg;
	struct kt_nl_msg m;

	for (;;) {
		int ret = kt_nl_event(t->nl, 300, &m);

		if (ret == -ETIMEDOUT) {
			if (__atomic_load_n(&stop, __ATOMIC_RELAXED))
				break;
			continue;
		}
		if (ret) {
			t->lost = true; /* ENOBUFS: events were dropped */
			continue;
		}
		if (m.id < first_id)
			continue;
		if (m.cmd == DJINN_CMD_OPENED_NTF)
			t->opened++;
		else if (m.cmd != DJINN_CMD_SIGNAL_NTF)
			t->ended++;
	}
	return NULL;
}

static void test_stress(void **state)
{
	pthread_t op[OPENERS], post, adm, lis;
	struct djinn_ioc_session_open o;
	struct tally t = { 0 };
	uint64_t t0 = kt_now_ns();
	int err, k, fd;

	fd = kt_session("first", 0, 0, &o);
	first_id = o.session_id;
	last_id = first_id;
	close(fd);
	t.nl = kt_nl_open(true, &err);
	assert_non_null(t.nl);
	assert_int_equal(kt_nl_rcvbuf(t.nl, 64 << 20), 0);

	assert_int_equal(pthread_create(&lis, NULL, listener, &t), 0);
	assert_int_equal(pthread_create(&post, NULL, poster, NULL), 0);
	assert_int_equal(pthread_create(&adm, NULL, admin, NULL), 0);
	for (k = 0; k < OPENERS; k++)
		assert_int_equal(pthread_create(&op[k], NULL, opener,
						(void *)(uintptr_t)(k + 1)),
				 0);
	for (k = 0; k < OPENERS; k++)
		pthread_join(op[k], NULL);
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	pthread_join(post, NULL);
	pthread_join(adm, NULL);
	pthread_join(lis, NULL);
	kt_nl_close(t.nl);

	print_message(
		"%d sessions in %.2f s; events: %ld opened, %ld ended%s\n",
		OPENERS * ITERS, (double)(kt_now_ns() - t0) / 1e9, t.opened,
		t.ended, t.lost ? " (some dropped)" : "");
	assert_int_equal(bad, 0);
	/* The listener's buffer holds every event of the run: none may be
	 * lost, and each session opened ended exactly once ("first" ended
	 * before the listener joined). */
	assert_false(t.lost);
	assert_int_equal(t.opened, OPENERS * ITERS);
	assert_int_equal(t.ended, t.opened);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stress),
	};

	return cmocka_run_group_tests_name("djinn.ko stress", tests, NULL,
					   NULL);
}
