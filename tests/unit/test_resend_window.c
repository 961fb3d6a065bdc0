/*
 * The resend windows (src/daemon/remote/resend.c): where place() puts each
 * copy in a full window, that a copy still being made or being sent again is
 * never overwritten, and a relay's copy made record by record: how much of it
 * may be sent again as its records are copied, and one dropped before it was
 * whole. The copies run on a real keep worker; its completions come back
 * through a real mailbox on a libuv loop, as in rgapsd.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../src/daemon/remote/internal.h"

#define MSG 1024 /* four fill the 4 KiB window, each at a 64-byte boundary */

struct fixture {
	uv_loop_t loop;
	struct rgapsd_remote rt;
	struct rgapsd_topic t;
	struct rt_topic tt;
	uint32_t kept;		/* copies made (the keeper's callbacks) */
	uint8_t src[16][MSG];	/* the messages, in their "pool" */
	pthread_mutex_t gate;	/* held: the keep worker waits before its next copy */
	struct rgapsd_job hold; /* the job that waits on the gate */
};

static void on_kept(void *arg)
{
	((struct fixture *)arg)->kept++;
}

static void hold_run(struct rgapsd_job *job)
{
	struct fixture *f = RGAPS_CONTAINER_OF(job, struct fixture, hold);

	pthread_mutex_lock(&f->gate);
	pthread_mutex_unlock(&f->gate);
}

static void hold_done(struct rgapsd_msg *m)
{
	(void)m;
}

static struct fixture *make(uint64_t window)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(uv_loop_init(&f->loop), 0);
	assert_int_equal(rgapsd_mailbox_init(&f->loop, &f->rt.mb), 0);
	assert_int_equal(rgapsd_worker_start(&f->rt.keeper, &f->rt.mb, "keep", 1), 0);
	pthread_mutex_init(&f->gate, NULL);
	snprintf(f->t.cfg.name, sizeof(f->t.cfg.name), "kept");
	f->t.cfg.resend_window = window;
	f->t.lim.mem_kind = RGAPS_MEM_HOST;
	f->tt.rt = &f->rt;
	f->tt.t = &f->t;
	rt_window_init(&f->tt.window, &f->rt);
	for (int i = 0; i < 16; i++)
		memset(f->src[i], 0xa0 + i, MSG);
	return f;
}

static void destroy(struct fixture *f)
{
	rgapsd_worker_stop(&f->rt.keeper);
	rgapsd_mailbox_close(&f->rt.mb);
	rt_window_free(&f->tt.window);
	assert_int_equal(uv_run(&f->loop, UV_RUN_DEFAULT), 0);
	assert_int_equal(uv_loop_close(&f->loop), 0);
	pthread_mutex_destroy(&f->gate);
	free(f);
}

/* Hold the keep worker: copies asked from now on wait until release_worker(). */
static void hold_worker(struct fixture *f)
{
	pthread_mutex_lock(&f->gate);
	f->hold.run = hold_run;
	f->hold.done.fn = hold_done;
	rgapsd_worker_submit(&f->rt.keeper, &f->hold);
}

static void release_worker(struct fixture *f)
{
	pthread_mutex_unlock(&f->gate);
}

/* Run the loop until n copies in all were made (bounded: 10 s). */
static void wait_kept(struct fixture *f, uint32_t n)
{
	uint64_t end = rgaps_now_ns(CLOCK_MONOTONIC) + 10000000000ull;

	while (f->kept < n) {
		assert_true(rgaps_now_ns(CLOCK_MONOTONIC) < end);
		uv_run(&f->loop, UV_RUN_ONCE);
	}
}

/* Keep message seq (its bytes: src[seq], all 0xa0 + seq). */
static bool keep(struct fixture *f, uint64_t seq)
{
	struct rt_local_msg m = { .fwd_seq = seq, .seq = seq, .size = MSG, .data = f->src[seq] };

	return rt_window_keep(&f->tt.window, &f->t, &m, on_kept, f) != NULL;
}

static struct rt_kept *kept_of(struct fixture *f, uint64_t seq)
{
	struct rt_kept *k;

	TAILQ_FOREACH(k, &f->tt.window.kept, link)
		if (k->seq == seq)
			return k;
	return NULL;
}

/* Copy seq is in the window, made, at off, with its own bytes. */
static void check_copy(struct fixture *f, uint64_t seq, uint64_t off)
{
	struct rt_kept *k = kept_of(f, seq);

	assert_non_null(k);
	assert_true(rt_kept_whole(k));
	assert_int_equal(k->off, off);
	assert_memory_equal(f->tt.window.mem + k->off, f->src[seq], MSG);
}

static uint32_t nkept(struct fixture *f)
{
	struct rt_kept *k;
	uint32_t n = 0;

	TAILQ_FOREACH(k, &f->tt.window.kept, link)
		n++;
	return n;
}

/* Four copies fill the window; the fifth overwrites the oldest, and so on round it. */
static void test_full_window_overwrites_oldest(void **state)
{
	struct fixture *f = make(4 * MSG);

	for (uint64_t seq = 0; seq < 4; seq++)
		assert_true(keep(f, seq));
	wait_kept(f, 4);
	for (uint64_t seq = 0; seq < 4; seq++)
		check_copy(f, seq, seq * MSG);
	for (uint64_t seq = 4; seq < 10; seq++) {
		assert_true(keep(f, seq));
		wait_kept(f, (uint32_t)seq + 1);
		assert_null(kept_of(f, seq - 4));
		check_copy(f, seq, (seq % 4) * MSG);
	}
	assert_int_equal(nkept(f), 4);
	assert_int_equal(f->tt.window.evicted, 6);
	assert_int_equal(f->tt.window.unkept, 0);
	/* Larger than the whole window: never kept. */
	{
		struct rt_local_msg m = { .fwd_seq = 10, .size = 8 * MSG, .data = f->src[0] };

		assert_null(rt_window_keep(&f->tt.window, &f->t, &m, on_kept, f));
		assert_int_equal(f->tt.window.unkept, 1);
	}
	destroy(f);
}

/*
 * A full window whose oldest copy is being sent again (a resend in flight
 * holds it busy, as sender.c's resend_queue does): the newest message goes
 * unkept, and the busy copy keeps its place and its bytes. Once it is sent,
 * the next message overwrites it.
 */
static void test_busy_copy_is_not_overwritten(void **state)
{
	struct fixture *f = make(4 * MSG);
	struct rt_kept *k;

	for (uint64_t seq = 0; seq < 4; seq++)
		assert_true(keep(f, seq));
	wait_kept(f, 4);
	k = kept_of(f, 0);
	k->busy++; /* being sent again */
	assert_false(keep(f, 4));
	assert_int_equal(f->tt.window.unkept, 1);
	assert_int_equal(f->tt.window.evicted, 0);
	assert_int_equal(nkept(f), 4);
	for (uint64_t seq = 0; seq < 4; seq++)
		check_copy(f, seq, seq * MSG);
	kept_of(f, 0)->busy--; /* sent */
	assert_true(keep(f, 5));
	wait_kept(f, 5);
	assert_null(kept_of(f, 0));
	check_copy(f, 5, 0);
	assert_int_equal(f->tt.window.evicted, 1);
	destroy(f);
}

/*
 * The same while the oldest copy is still being made on the keep worker: it
 * is busy until its copy is done, so a full window leaves the newest message
 * unkept rather than hand the worker's place to another copy.
 */
static void test_copy_being_made_is_not_overwritten(void **state)
{
	struct fixture *f = make(4 * MSG);

	hold_worker(f);
	for (uint64_t seq = 0; seq < 4; seq++)
		assert_true(keep(f, seq));
	for (uint64_t seq = 0; seq < 4; seq++)
		assert_false(rt_kept_whole(kept_of(f, seq)));
	assert_false(keep(f, 4));
	assert_int_equal(f->tt.window.unkept, 1);
	assert_int_equal(f->tt.window.evicted, 0);
	release_worker(f);
	wait_kept(f, 4);
	for (uint64_t seq = 0; seq < 4; seq++)
		check_copy(f, seq, seq * MSG);
	assert_null(kept_of(f, 4));
	destroy(f);
}

static void on_filled(void *arg)
{
	((struct fixture *)arg)->kept++; /* here: records copied */
}

/*
 * A relay keeps a message record by record as it lands (rt_window_open, then
 * rt_window_fill per record): each of its first bytes may be sent again as
 * soon as its copy is made (rt_kept_has), the whole once the last is; while
 * it is made it is busy and never overwritten.
 */
static void test_relay_copy_record_by_record(void **state)
{
	struct fixture *f = make(4 * MSG);
	struct rgaps_record_hdr h = { .msg_seq = 7, .msg_size = MSG, .origin_seq = 70 };
	struct rt_kept *k;

	hold_worker(f);
	k = rt_window_open(&f->tt.window, &f->t, &h);
	assert_non_null(k);
	for (uint64_t off = 0; off < MSG; off += MSG / 4)
		assert_true(rt_window_fill(k, off, f->src[7] + off, MSG / 4, on_filled, f));
	assert_false(rt_kept_has(k, 0, 1)); /* nothing copied yet */
	for (uint64_t seq = 0; seq < 3; seq++)
		assert_true(keep(f, seq)); /* the window full: 7 and three more */
	assert_false(keep(f, 3));	   /* 7 is being made: not overwritten */
	release_worker(f);
	wait_kept(f, 4 + 3);
	assert_true(rt_kept_has(k, 0, MSG / 4));
	assert_true(rt_kept_has(k, MSG / 2, MSG / 2));
	assert_true(rt_kept_whole(k));
	assert_int_equal(k->origin_seq, 70);
	assert_memory_equal(f->tt.window.mem + k->off, f->src[7], MSG);
	assert_true(keep(f, 4)); /* whole and not sent: it may go now */
	wait_kept(f, 8);
	assert_null(kept_of(f, 7));
	destroy(f);
}

/*
 * A relay's message whose ring ended before it was whole is dropped: never
 * sent again (rt_kept_has says no), and freed once the copies still running
 * into it are done, not before.
 */
static void test_relay_copy_dropped(void **state)
{
	struct fixture *f = make(4 * MSG);
	struct rgaps_record_hdr h = { .msg_seq = 9, .msg_size = MSG };
	struct rt_kept *k;

	hold_worker(f);
	k = rt_window_open(&f->tt.window, &f->t, &h);
	assert_non_null(k);
	assert_true(rt_window_fill(k, 0, f->src[9], MSG / 2, on_filled, f));
	rt_window_drop(k);
	assert_non_null(kept_of(f, 9)); /* its copy still runs into it */
	assert_false(rt_kept_has(k, 0, 1));
	release_worker(f);
	wait_kept(f, 1);
	assert_null(kept_of(f, 9));
	assert_int_equal(f->tt.window.used, 0);
	destroy(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full_window_overwrites_oldest),
		cmocka_unit_test(test_busy_copy_is_not_overwritten),
		cmocka_unit_test(test_copy_being_made_is_not_overwritten),
		cmocka_unit_test(test_relay_copy_record_by_record),
		cmocka_unit_test(test_relay_copy_dropped),
	};

	rgaps__log_level = RGAPS_LOG_ERROR;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
