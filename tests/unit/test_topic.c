/*
 * Unit tests of the shared topic segment (src/common/topic.c): queue and
 * reference counting, overflow policies, history, slot reclaim, and crash
 * safety: child processes killed with SIGKILL at random points inside and
 * outside critical sections must leave a consistent topic whose pool drains
 * back to empty once their slots are reclaimed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "futex.h"
#include "journal.h"
#include "log.h"
#include "topic.h"

struct fixture {
	struct rgaps_topic t;
	struct rgaps_topic_config tc;
	void *pool;
};

static struct fixture *make(uint64_t pool, uint32_t depth, uint32_t history, uint32_t overflow)
{
	struct fixture *f = calloc(1, sizeof(*f));
	size_t size;
	void *mem;

	rgaps_topic_config_defaults(&f->tc);
	snprintf(f->tc.name, sizeof(f->tc.name), "unit");
	f->tc.pool_size = pool;
	f->tc.max_message_size = pool;
	f->tc.queue_depth = depth;
	f->tc.history = history;
	f->tc.overflow = overflow;
	f->tc.max_subscribers = 8;
	f->tc.max_publishers = 4;
	f->tc.max_holds = 4;
	f->tc.max_loans = 2;
	f->tc.block_timeout_ms = 50;
	size = rgaps_topic_segment_size(&f->tc);
	mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(mem != MAP_FAILED);
	f->pool = mmap(NULL, pool, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(f->pool != MAP_FAILED);
	assert_int_equal(rgaps_topic_format(mem, size, &f->tc, 0), 0);
	assert_int_equal(rgaps_topic_validate(mem, size), 0);
	f->t.hdr = mem;
	f->t.size = size;
	f->t.pool = f->pool;
	return f;
}

static void destroy(struct fixture *f)
{
	munmap(f->t.hdr, f->t.size);
	munmap(f->pool, f->tc.pool_size);
	free(f);
}

static void check(struct fixture *f)
{
	char why[256] = "";

	if (rgaps_topic_check(&f->t, why, sizeof(why)) != 0)
		fail_msg("topic check: %s", why);
}

static uint64_t used(struct fixture *f)
{
	struct rgaps_topic_stats st;

	assert_int_equal(rgaps_topic_get_stats(&f->t, &st), 0);
	return st.pool.used_bytes;
}

static int publish(struct fixture *f, uint32_t pub, uint64_t size, int timeout)
{
	uint32_t tok;
	uint64_t off;
	int r = rgaps_topic_loan(&f->t, pub, size, timeout, NULL, NULL, &tok, &off);

	if (r)
		return r;
	memset((uint8_t *)f->pool + off, (int)(size & 0xff), size);
	return rgaps_topic_commit(&f->t, pub, tok, size, 1, timeout, NULL, NULL, NULL);
}

static void test_validate_rejects(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);

	assert_int_equal(rgaps_topic_validate(f->t.hdr, f->t.size - 4096), -EPROTO);
	f->t.hdr->magic ^= 1;
	assert_int_equal(rgaps_topic_validate(f->t.hdr, f->t.size), -EPROTO);
	f->t.hdr->magic ^= 1;
	f->t.hdr->layout_version++;
	assert_int_equal(rgaps_topic_validate(f->t.hdr, f->t.size), -EPROTO);
	f->t.hdr->layout_version--;
	destroy(f);
}

static void test_fanout_and_refcounts(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	struct rgaps_topic_msg m[3];
	uint32_t pub, s[3];

	assert_int_equal(rgaps_topic_pub_open(&f->t, 1, 100, &pub), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(rgaps_topic_sub_open(&f->t, 2 + i, 200 + i, &s[i]), 0);
	assert_int_equal(publish(f, pub, 1000, 0), 0);
	check(f);
	/* One block, shared: every subscriber sees the same offset. */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(rgaps_topic_take(&f->t, s[i], 0, 0, NULL, NULL, &m[i]), 0);
		assert_int_equal(m[i].seq, 0);
		assert_int_equal(m[i].size, 1000);
		assert_int_equal(m[i].off, m[0].off);
		struct rgaps_topic_msg none;

		assert_int_equal(rgaps_topic_take(&f->t, s[i], 0, 0, NULL, NULL, &none), -EAGAIN);
	}
	check(f);
	/* All consumed: retired from the queue, but held: the block stays. */
	assert_int_equal(f->t.hdr->tail_seq, 1);
	assert_true(used(f) >= 1000);
	assert_int_equal(rgaps_topic_release(&f->t, s[0], m[0].token), 0);
	assert_int_equal(rgaps_topic_release(&f->t, s[1], m[1].token), 0);
	assert_true(used(f) >= 1000);
	assert_int_equal(rgaps_topic_release(&f->t, s[2], m[2].token), 0);
	assert_int_equal(used(f), 0);
	/* Double release is refused, not fatal. */
	assert_int_equal(rgaps_topic_release(&f->t, s[2], m[2].token), -EINVAL);
	check(f);
	destroy(f);
}

static void test_no_subscribers_retires_at_once(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	uint32_t pub;

	assert_int_equal(rgaps_topic_pub_open(&f->t, 1, 1, &pub), 0);
	for (int i = 0; i < 20; i++)
		assert_int_equal(publish(f, pub, 4096, 0), 0);
	assert_int_equal(used(f), 0);
	assert_int_equal(f->t.hdr->c.unrouted, 20);
	check(f);
	destroy(f);
}

static void test_block_policy_times_out(void **state)
{
	struct fixture *f = make(1 << 20, 4, 0, RGAPS_OVERFLOW_BLOCK);
	struct rgaps_topic_msg m;
	uint32_t pub, s;
	uint64_t t0;

	assert_int_equal(rgaps_topic_pub_open(&f->t, 1, 1, &pub), 0);
	assert_int_equal(rgaps_topic_sub_open(&f->t, 2, 2, &s), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(publish(f, pub, 100, 0), 0);
	/* Queue full of unconsumed messages: no wait -> EAGAIN, bounded wait -> ETIMEDOUT. */
	assert_int_equal(publish(f, pub, 100, 0), -EAGAIN);
	t0 = rgaps_now_ns(CLOCK_MONOTONIC);
	assert_int_equal(publish(f, pub, 100, 30), -ETIMEDOUT);
	assert_true(rgaps_now_ns(CLOCK_MONOTONIC) - t0 >= 25ull * 1000 * 1000);
	check(f);
	/* Consuming one makes room. */
	assert_int_equal(rgaps_topic_take(&f->t, s, 0, 0, NULL, NULL, &m), 0);
	assert_int_equal(rgaps_topic_release(&f->t, s, m.token), 0);
	assert_int_equal(publish(f, pub, 100, 0), 0);
	/* Pool exhaustion also blocks: a message as large as the pool cannot fit now. */
	assert_int_equal(publish(f, pub, 1 << 20, 0), -EAGAIN);
	assert_int_equal(publish(f, pub, (1 << 20) + 1, 0), -EMSGSIZE);
	check(f);
	destroy(f);
}

static void test_drop_oldest_counts_drops(void **state)
{
	struct fixture *f = make(1 << 20, 4, 0, RGAPS_OVERFLOW_DROP_OLDEST);
	struct rgaps_topic_msg m;
	uint32_t pub, slow, fast;

	assert_int_equal(rgaps_topic_pub_open(&f->t, 1, 1, &pub), 0);
	assert_int_equal(rgaps_topic_sub_open(&f->t, 2, 2, &slow), 0);
	assert_int_equal(rgaps_topic_sub_open(&f->t, 3, 3, &fast), 0);
	for (int i = 0; i < 10; i++) {
		assert_int_equal(publish(f, pub, 100, 0), 0);
		assert_int_equal(rgaps_topic_take(&f->t, fast, 0, 0, NULL, NULL, &m), 0);
		assert_int_equal(m.seq, (uint64_t)i);
		assert_int_equal(m.gap, 0);
		assert_int_equal(rgaps_topic_release(&f->t, fast, m.token), 0);
		check(f);
	}
	/* The slow one never took: it lost the 6 oldest and sees the gap on its next take. */
	assert_int_equal(rgaps_topic_sub_at(&f->t, slow)->drops, 6);
	assert_int_equal(rgaps_topic_take(&f->t, slow, 0, 0, NULL, NULL, &m), 0);
	assert_int_equal(m.seq, 6);
	assert_int_equal(m.gap, 6);
	assert_int_equal(f->t.hdr->c.dropped, 6);
	/* A held message survives being forced out of the queue. */
	for (int i = 0; i < 8; i++)
		assert_int_equal(publish(f, pub, 100, 0), 0);
	assert_true(used(f) >= 100 * 5);
	check(f);
	destroy(f);
}

static void test_history_for_late_joiner(void **state)
{
	struct fixture *f = make(1 << 20, 8, 3, RGAPS_OVERFLOW_BLOCK);
	struct rgaps_topic_msg m;
	uint32_t pub, s;

	assert_int_equal(rgaps_topic_pub_open(&f->t, 1, 1, &pub), 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(publish(f, pub, 256, 0), 0);
	/* The last 3 stay for late joiners even with nobody subscribed. */
	assert_int_equal(used(f), 3 * 256);
	assert_int_equal(rgaps_topic_sub_open(&f->t, 2, 2, &s), 0);
	for (uint64_t want = 7; want < 10; want++) {
		assert_int_equal(rgaps_topic_take(&f->t, s, 0, 0, NULL, NULL, &m), 0);
		assert_int_equal(m.seq, want);
		assert_int_equal(rgaps_topic_release(&f->t, s, m.token), 0);
	}
	assert_int_equal(rgaps_topic_take(&f->t, s, 0, 0, NULL, NULL, &m), -EAGAIN);
	check(f);
	destroy(f);
}

static void test_hold_limit_and_reclaim(void **state)
{
	struct fixture *f = make(1 << 20, 16, 0, RGAPS_OVERFLOW_BLOCK);
	struct rgaps_topic_msg m;
	uint32_t pub, s, tok;
	uint64_t off;

	assert_int_equal(rgaps_topic_pub_open(&f->t, 1, 1, &pub), 0);
	assert_int_equal(rgaps_topic_sub_open(&f->t, 2, 2, &s), 0);
	for (int i = 0; i < 6; i++)
		assert_int_equal(publish(f, pub, 512, 0), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(rgaps_topic_take(&f->t, s, 0, 0, NULL, NULL, &m), 0);
	assert_int_equal(rgaps_topic_take(&f->t, s, 0, 0, NULL, NULL, &m), -ENOBUFS);
	/* A publisher with two open loans hits its loan limit. */
	assert_int_equal(rgaps_topic_loan(&f->t, pub, 64, 0, NULL, NULL, &tok, &off), 0);
	assert_int_equal(rgaps_topic_loan(&f->t, pub, 64, 0, NULL, NULL, &tok, &off), 0);
	assert_int_equal(rgaps_topic_loan(&f->t, pub, 64, 0, NULL, NULL, &tok, &off), -ENOBUFS);
	check(f);
	/* Closing both slots (what rgapsd does for a dead client) frees everything. */
	rgaps_topic_sub_close(&f->t, s);
	rgaps_topic_pub_close(&f->t, pub);
	check(f);
	assert_int_equal(used(f), 0);
	assert_int_equal(f->t.hdr->c.reclaimed_holds, 4);
	assert_int_equal(f->t.hdr->c.reclaimed_loans, 2);
	destroy(f);
}

static void test_slots_run_out(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	uint32_t slot;

	for (int i = 0; i < 8; i++)
		assert_int_equal(rgaps_topic_sub_open(&f->t, (uint64_t)i, i, &slot), 0);
	assert_int_equal(rgaps_topic_sub_open(&f->t, 99, 99, &slot), -ENOSPC);
	rgaps_topic_sub_close(&f->t, 3);
	assert_int_equal(rgaps_topic_sub_open(&f->t, 99, 99, &slot), 0);
	assert_int_equal(slot, 3);
	check(f);
	destroy(f);
}

static void test_journal_rollback(void **state)
{
	struct {
		struct rgaps_journal j;
		uint64_t a;
		uint32_t b;
	} *seg = calloc(1, sizeof(*seg));

	seg->a = 5;
	seg->b = 7;
	rgaps__journal_begin(&seg->j, seg);
	rgaps_j64(&seg->a, 6);
	rgaps_j32(&seg->b, 8);
	rgaps_j64(&seg->a, 9);
	/* "Killed" here: the next holder rolls back, newest first. */
	rgaps__jctx.j = NULL;
	assert_int_equal(rgaps__journal_rollback(&seg->j, seg), 3);
	assert_int_equal(seg->a, 5);
	assert_int_equal(seg->b, 7);
	assert_int_equal(seg->j.count, 0);
	/* A committed section is not undone. */
	rgaps__journal_begin(&seg->j, seg);
	rgaps_j64(&seg->a, 11);
	rgaps__journal_end();
	assert_int_equal(rgaps__journal_rollback(&seg->j, seg), 0);
	assert_int_equal(seg->a, 11);
	free(seg);
}

static void test_blocked_subscriber_wakes(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	struct rgaps_topic_msg m;
	uint32_t pub, s;
	pid_t child;
	int status;

	assert_int_equal(rgaps_topic_pub_open(&f->t, 1, 1, &pub), 0);
	assert_int_equal(rgaps_topic_sub_open(&f->t, 2, 2, &s), 0);
	child = fork();
	if (child == 0) {
		usleep(50 * 1000);
		_exit(publish(f, pub, 128, 1000) == 0 ? 0 : 1);
	}
	/* No spin: this must be the futex wake-up. */
	assert_int_equal(rgaps_topic_take(&f->t, s, 2000, 0, NULL, NULL, &m), 0);
	assert_int_equal(m.size, 128);
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_int_equal(WEXITSTATUS(status), 0);
	destroy(f);
}

/*
 * Kill children at random moments while they loan, commit, take and release
 * as fast as they can (so many kills land inside critical sections, some while
 * holding the lock). After each round the survivor side reclaims the dead
 * slots, as rgapsd does, and the topic must check clean; at the end the pool
 * must be empty.
 */
static void test_sigkill_anywhere(void **state)
{
	struct fixture *f = make(4 << 20, 16, 0, RGAPS_OVERFLOW_DROP_OLDEST);
	uint64_t rollbacks_seen = 0;

	srand(4242);
	for (int round = 0; round < 200; round++) {
		uint32_t pub, sub;
		pid_t kids[2];

		assert_int_equal(rgaps_topic_pub_open(&f->t, 10, 10, &pub), 0);
		assert_int_equal(rgaps_topic_sub_open(&f->t, 11, 11, &sub), 0);
		kids[0] = fork();
		if (kids[0] == 0) {
			for (uint64_t i = 0;; i++) {
				uint32_t tok;
				uint64_t off;

				if (rgaps_topic_loan(&f->t, pub, 1 + (i * 7919) % 65536, 10, NULL,
						     NULL, &tok, &off) == 0)
					rgaps_topic_commit(&f->t, pub, tok, 1, i, 10, NULL, NULL,
							   NULL);
			}
		}
		kids[1] = fork();
		if (kids[1] == 0) {
			for (;;) {
				struct rgaps_topic_msg m;

				if (rgaps_topic_take(&f->t, sub, 10, 0, NULL, NULL, &m) == 0)
					rgaps_topic_release(&f->t, sub, m.token);
			}
		}
		usleep(200 + (useconds_t)(rand() % 3000));
		kill(kids[0], SIGKILL);
		usleep((useconds_t)(rand() % 300));
		kill(kids[1], SIGKILL);
		waitpid(kids[0], NULL, 0);
		waitpid(kids[1], NULL, 0);
		rgaps_topic_pub_close(&f->t, pub);
		rgaps_topic_sub_close(&f->t, sub);
		check(f);
		assert_int_equal(used(f), 0);
		rollbacks_seen = f->t.hdr->journal.rollbacks;
	}
	assert_true(f->t.hdr->c.published > 0);
	print_message("  %llu publishes, %llu lock-holder deaths rolled back\n",
		      (unsigned long long)f->t.hdr->c.published,
		      (unsigned long long)rollbacks_seen);
	destroy(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_validate_rejects),
		cmocka_unit_test(test_fanout_and_refcounts),
		cmocka_unit_test(test_no_subscribers_retires_at_once),
		cmocka_unit_test(test_block_policy_times_out),
		cmocka_unit_test(test_drop_oldest_counts_drops),
		cmocka_unit_test(test_history_for_late_joiner),
		cmocka_unit_test(test_hold_limit_and_reclaim),
		cmocka_unit_test(test_slots_run_out),
		cmocka_unit_test(test_journal_rollback),
		cmocka_unit_test(test_blocked_subscriber_wakes),
		cmocka_unit_test(test_sigkill_anywhere),
	};

	rgaps__log_level = RGAPS_LOG_ERROR;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
