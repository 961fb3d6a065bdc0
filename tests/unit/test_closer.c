/*
 * Unit tests of the closer (src/daemon/closer.c): a file whose last close
 * waits - a TCP socket lingering with bytes stuck behind a zero window - is
 * handed over without waiting and closed at once, abortively (its peer is
 * reset, long before the linger would end); many files are all closed; stop
 * ends the thread.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <time.h>

#include "closer.h"
#include "futex.h"
#include "stuck_tcp.h"

#define LINGER_S 60

static uint64_t ms_since(uint64_t t0)
{
	return (rgaps_now_ns(CLOCK_MONOTONIC) - t0) / 1000000;
}

static void wait_closed(struct rgapsd_closer *c, uint64_t n)
{
	struct rgapsd_closer_stats st;

	for (int i = 0; i < 1000; i++) {
		rgapsd_closer_stats(c, &st);
		if (st.closed >= n && !st.pending)
			return;
		usleep(10 * 1000);
	}
	fail_msg("the closer closed %llu of %llu in 10 s", (unsigned long long)st.closed,
		 (unsigned long long)n);
}

static void *close_plainly(void *arg)
{
	close(*(int *)arg);
	return NULL;
}

/* The helper is honest: a plain close of its socket waits for the linger. */
static void test_stuck_socket_lingers(void **state)
{
	struct stuck_tcp st;
	pthread_t t;
	uint64_t t0;

	assert_int_equal(stuck_tcp_make(&st, 2), 0);
	t0 = rgaps_now_ns(CLOCK_MONOTONIC);
	assert_int_equal(pthread_create(&t, NULL, close_plainly, &st.sender), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_true(ms_since(t0) >= 1500);
	stuck_tcp_close_fd(&st.receiver);
}

static void test_stuck_socket_closes_at_once(void **state)
{
	struct rgapsd_closer *c;
	struct rgapsd_closer_stats cs;
	struct stuck_tcp st;
	uint64_t t0;

	assert_int_equal(stuck_tcp_make(&st, LINGER_S), 0);
	assert_int_equal(rgapsd_closer_start(&c), 0);
	t0 = rgaps_now_ns(CLOCK_MONOTONIC);
	rgapsd_closer_close(c, st.sender);
	assert_true(ms_since(t0) < 10000); /* handed over, not waited for (the linger: 60 s) */
	assert_true(stuck_tcp_reset_within(&st, 10000));
	wait_closed(c, 1);
	rgapsd_closer_stats(c, &cs);
	assert_int_equal(cs.slow, 0);
	rgapsd_closer_stop(c);
	stuck_tcp_close_fd(&st.receiver);
}

static void test_many_files(void **state)
{
	struct rgapsd_closer *c;
	int p[200][2];

	assert_int_equal(rgapsd_closer_start(&c), 0);
	for (int i = 0; i < 200; i++) {
		assert_int_equal(pipe2(p[i], O_CLOEXEC), 0);
		rgapsd_closer_close(c, p[i][1]);
	}
	wait_closed(c, 200);
	for (int i = 0; i < 200; i++) {
		char ch;

		assert_int_equal(read(p[i][0], &ch, 1), 0); /* the write end is gone: EOF */
		close(p[i][0]);
	}
	rgapsd_closer_stop(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stuck_socket_lingers),
		cmocka_unit_test(test_stuck_socket_closes_at_once),
		cmocka_unit_test(test_many_files),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
