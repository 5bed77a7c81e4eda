// SPDX-License-Identifier: MIT
/*
 * The completion ring: the mapping's rules, records in order across
 * wrap-around, overflow counted and reported, the consumer's head, and
 * poll/epoll wake-ups on posts.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "kt.h"

static void test_mapping_rules(void **state)
{
	struct djinn_ioc_session_open o;
	int fd = kt_session("map", 0, 4, &o);
	int bare = kt_open_dev();
	void *p;

	/* writable, executable, wrong length, wrong offset */
	p = mmap(NULL, o.ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(p == MAP_FAILED && errno == EPERM);
	p = mmap(NULL, o.ring_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd,
		 0);
	assert_true(p == MAP_FAILED && errno == EPERM);
	p = mmap(NULL, o.ring_bytes, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0);
	assert_true(p == MAP_FAILED && errno == EPERM);
	p = mmap(NULL, o.ring_bytes + 4096, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(p == MAP_FAILED && errno == EINVAL);
	p = mmap(NULL, o.ring_bytes - 4096 ?: 4096, PROT_READ, MAP_SHARED, fd,
		 4096);
	assert_true(p == MAP_FAILED && errno == EINVAL);
	/* no session, no ring */
	p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, bare, 0);
	assert_true(p == MAP_FAILED && errno == ENODEV);

	/* read-only, and it cannot be made writable */
	p = mmap(NULL, o.ring_bytes, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(p != MAP_FAILED);
	assert_int_equal(mprotect(p, o.ring_bytes, PROT_READ | PROT_WRITE), -1);
	assert_int_equal(errno, EACCES);
	assert_int_equal(*(uint32_t *)((char *)p + o.ring.entries), 4);
	assert_int_equal(*(uint32_t *)((char *)p + o.ring.mask), 3);
	munmap(p, o.ring_bytes);
	close(fd);
	close(bare);
}

/* Consume everything up to tail: check user_data runs on from *next. */
static uint32_t consume(const struct kt_ring *r, uint32_t head, uint64_t *next)
{
	uint32_t tail = __atomic_load_n(r->tail, __ATOMIC_ACQUIRE);

	for (; head != tail; head++) {
		const struct djinn_cqe *c = &r->cqes[head & *r->mask];

		assert_int_equal(c->user_data, *next);
		assert_int_equal(c->res, (int32_t)*next);
		assert_int_equal(c->aux[0], ~*next);
		assert_int_equal(c->aux[1], 7);
		(*next)++;
	}
	return head;
}

static void test_wrap_around(void **state)
{
	struct djinn_ioc_session_open o;
	struct djinn_ioc_session_info i;
	struct kt_ring r;
	int d = kt_daemon();
	int fd = kt_session("wrap", 0, 4, &o);
	uint64_t ud = 1000, next = 1000;
	uint32_t head = 0, tail;
	int round, k;

	assert_int_equal(kt_ring_map(fd, &o, &r), 0);
	/* 3 records a round, 40 rounds: the indices wrap the 4 slots many
	 * times over */
	for (round = 0; round < 40; round++) {
		for (k = 0; k < 3; k++) {
			assert_int_equal(kt_post(d, o.session_id, ud++, &tail),
					 0);
			assert_int_equal(tail, (uint32_t)(ud - 1000));
		}
		head = consume(&r, head, &next);
		assert_int_equal(kt_heartbeat(fd, 0, true, head), 0);
		assert_int_equal(__atomic_load_n(r.head, __ATOMIC_ACQUIRE),
				 head);
	}
	assert_int_equal(next, 1120);
	assert_int_equal(*r.overflow, 0);
	assert_int_equal(kt_info(fd, 0, &i), 0);
	assert_int_equal(i.posts, 120);
	kt_ring_unmap(&r);
	close(fd);
	close(d);
}

static void test_overflow(void **state)
{
	struct djinn_ioc_session_open o;
	struct djinn_ioc_session_info i;
	struct kt_ring r;
	int d = kt_daemon();
	int fd = kt_session("full", 0, 4, &o);
	uint64_t next = 0;
	uint32_t head;
	int k;

	assert_int_equal(kt_ring_map(fd, &o, &r), 0);
	for (k = 0; k < 4; k++)
		assert_int_equal(kt_post(d, o.session_id, k, NULL), 0);
	assert_int_equal(kt_post(d, o.session_id, 4, NULL), -EOVERFLOW);
	assert_int_equal(kt_post(d, o.session_id, 5, NULL), -EOVERFLOW);
	assert_int_equal(*r.overflow, 2);
	assert_true(*r.flags & DJINN_RING_F_OVERFLOW);
	assert_int_equal(kt_info(fd, 0, &i), 0);
	assert_int_equal(i.overflow, 2);
	assert_int_equal(i.posts, 4);
	/* the four that fit are intact */
	head = consume(&r, 0, &next);
	assert_int_equal(head, 4);

	/* the head may not pass the tail or go back */
	assert_int_equal(kt_heartbeat(fd, 0, true, 5), -EINVAL);
	assert_int_equal(kt_heartbeat(fd, 0, true, 2), 0);
	assert_int_equal(kt_heartbeat(fd, 0, true, 1), -EINVAL);
	assert_int_equal(kt_heartbeat(fd, 0, true, 4), 0);
	/* room again */
	assert_int_equal(kt_post(d, o.session_id, 4, NULL), 0);
	head = consume(&r, head, &next);
	assert_int_equal(head, 5);
	/* posting to an ended session */
	assert_int_equal(kt_kill(d, o.session_id), 0);
	assert_int_equal(kt_post(d, o.session_id, 9, NULL), -ENOENT);
	kt_ring_unmap(&r);
	close(fd);
	close(d);
}

struct waiter {
	int fd;
	int epoll;
	int ret;
	short revents;
};

static void *poll_waiter(void *arg)
{
	struct waiter *w = arg;
	struct pollfd p = { .fd = w->fd, .events = POLLIN };

	w->ret = poll(&p, 1, 10000);
	w->revents = p.revents;
	return NULL;
}

static void *epoll_waiter(void *arg)
{
	struct waiter *w = arg;
	struct epoll_event ev;

	w->ret = epoll_wait(w->epoll, &ev, 1, 10000);
	w->revents = (short)ev.events;
	return NULL;
}

static void test_poll_wakeups(void **state)
{
	struct djinn_ioc_session_open o;
	struct epoll_event ev = { .events = EPOLLIN };
	struct waiter w = { 0 };
	struct pollfd p;
	pthread_t t;
	int d = kt_daemon();
	int fd = kt_session("poll", 0, 8, &o);
	int bare = kt_open_dev();

	/* nothing yet */
	p.fd = fd;
	p.events = POLLIN;
	assert_int_equal(poll(&p, 1, 0), 0);
	/* a file without a session has nothing to wait for */
	p.fd = bare;
	assert_int_equal(poll(&p, 1, 0), 1);
	assert_true(p.revents & POLLERR);

	/* poll(): woken by a post */
	w.fd = fd;
	assert_int_equal(pthread_create(&t, NULL, poll_waiter, &w), 0);
	usleep(100000);
	assert_int_equal(kt_post(d, o.session_id, 1, NULL), 0);
	pthread_join(t, NULL);
	assert_int_equal(w.ret, 1);
	assert_true(w.revents & POLLIN);
	assert_false(w.revents & POLLHUP);
	/* consumed: quiet again */
	assert_int_equal(kt_heartbeat(fd, 0, true, 1), 0);
	p.fd = fd;
	assert_int_equal(poll(&p, 1, 0), 0);

	/* epoll: the same */
	w.epoll = epoll_create1(0);
	assert_true(w.epoll >= 0);
	assert_int_equal(epoll_ctl(w.epoll, EPOLL_CTL_ADD, fd, &ev), 0);
	assert_int_equal(pthread_create(&t, NULL, epoll_waiter, &w), 0);
	usleep(100000);
	assert_int_equal(kt_post(d, o.session_id, 2, NULL), 0);
	pthread_join(t, NULL);
	assert_int_equal(w.ret, 1);
	assert_true(w.revents & EPOLLIN);
	assert_int_equal(kt_heartbeat(fd, 0, true, 2), 0);

	/* and by the end of the session */
	assert_int_equal(pthread_create(&t, NULL, epoll_waiter, &w), 0);
	usleep(100000);
	assert_int_equal(kt_kill(d, o.session_id), 0);
	pthread_join(t, NULL);
	assert_int_equal(w.ret, 1);
	assert_true(w.revents & EPOLLHUP);
	close(w.epoll);
	close(fd);
	close(bare);
	close(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mapping_rules),
		cmocka_unit_test(test_wrap_around),
		cmocka_unit_test(test_overflow),
		cmocka_unit_test(test_poll_wakeups),
	};

	return cmocka_run_group_tests_name("djinn.ko ring", tests, NULL, NULL);
}
