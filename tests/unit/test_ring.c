/*
 * Tests of the receive-ring arithmetic (src/daemon/remote/ring.c, docs/RING.md). Unit
 * cases pin each rule at its edges: first write, exact fit to the end, wrap
 * with padding, the Exceed check in its linear and wrapped cases, a full ring,
 * hostile Heads and offsets, the watermark's report points. A property test
 * then runs a sender, a reordering-free network with random delay, a receiver
 * and the delayed Head write-back over many ring shapes with fixed seeds,
 * checks the invariants after every step, and keeps real bytes in a simulated
 * ring so that any overwrite of unconsumed data shows up as a corrupt record.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "remote/ring.h"
#include "util.h"

/* The common shape of the unit cases: 16 cache lines, records up to 4 of them. */
#define SZ 1024u
#define MAXREC 256u
#define AL 64u

static void geom(struct rgaps_ring_geom *g, uint64_t size, uint64_t max, uint32_t align)
{
	assert_int_equal(rt_ring_geom_init(size, max, align, g), 0);
}

static void check_pair(const struct rgaps_ring_sender *s, const struct rgaps_ring_receiver *r)
{
	const char *why = NULL;

	if (rt_ring_check(s, r, &why) != 0)
		fail_msg("ring invariant: %s", why);
}

/* A sender at an arbitrary legal state, for cases that are tedious to reach by steps. */
static void sender_at(struct rgaps_ring_sender *s, uint64_t tail, uint64_t dhead)
{
	const char *why = NULL;

	s->tail = tail;
	s->dhead = dhead;
	if (rt_ring_sender_check(s, &why) != 0)
		fail_msg("bad test state: %s", why);
}

/* Field by field: struct copies need not copy padding bytes. */
static bool sender_eq(const struct rgaps_ring_sender *a, const struct rgaps_ring_sender *b)
{
	return a->tail == b->tail && a->dhead == b->dhead && a->records == b->records &&
	       a->pad_bytes == b->pad_bytes && a->stalls == b->stalls;
}

static bool receiver_eq(const struct rgaps_ring_receiver *a, const struct rgaps_ring_receiver *b)
{
	return a->tail == b->tail && a->head == b->head && a->reported == b->reported &&
	       a->report_bytes == b->report_bytes && a->records == b->records &&
	       a->pad_bytes == b->pad_bytes && a->reports == b->reports;
}

static void expect_slot(const struct rgaps_ring_slot *sl, uint64_t off, uint64_t len,
			uint64_t start, uint64_t end, uint64_t pad)
{
	assert_int_equal(sl->off, off);
	assert_int_equal(sl->len, len);
	assert_int_equal(sl->start, start);
	assert_int_equal(sl->end, end);
	assert_int_equal(sl->pad, pad);
}

static void test_geom_init(void **state)
{
	struct rgaps_ring_geom g, keep;

	geom(&g, SZ, MAXREC, AL);
	assert_int_equal(g.max_stride, 256);
	geom(&g, 3, 1, 1);		/* tiny, odd */
	geom(&g, 192, 64, 64);		/* three cache lines */
	geom(&g, 1024, 512, 64);	/* max record exactly half */
	geom(&g, 1000, 496, 8);		/* not a power of two */
	geom(&g, RGAPS_RING_SIZE_MAX, 1ull << 40, 4096);

	memset(&keep, 0xa5, sizeof(keep));
	g = keep;
	assert_int_equal(rt_ring_geom_init(0, 1, 1, &g), -EINVAL);
	assert_int_equal(rt_ring_geom_init(SZ, MAXREC, 0, &g), -EINVAL);
	assert_int_equal(rt_ring_geom_init(SZ, MAXREC, 48, &g), -EINVAL); /* align not pow2 */
	assert_int_equal(rt_ring_geom_init(1000, 256, 64, &g), -EINVAL); /* size % align */
	assert_int_equal(rt_ring_geom_init(SZ, 0, AL, &g), -EINVAL);
	assert_int_equal(rt_ring_geom_init(SZ, 513, AL, &g), -EINVAL); /* 2 * 576 > 1024 */
	assert_int_equal(rt_ring_geom_init(SZ, SZ + 1, AL, &g), -EINVAL);
	assert_int_equal(rt_ring_geom_init(3, 2, 1, &g), -EINVAL);
	assert_int_equal(rt_ring_geom_init(2 * RGAPS_RING_SIZE_MAX, 64, 64, &g), -EINVAL);
	assert_int_equal(rt_ring_geom_init(UINT64_MAX, UINT64_MAX, 1u << 31, &g), -EINVAL);
	/* Output written only on success. */
	assert_memory_equal(&g, &keep, sizeof(g));
}

static void test_place(void **state)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_slot sl;

	geom(&g, 320, 128, 64); /* five lines, not a power of two */
	assert_int_equal(rt_ring_place(&g, 0, 1, &sl), 0);
	expect_slot(&sl, 0, 1, 0, 64, 0);
	assert_int_equal(rt_ring_place(&g, 192, 128, &sl), 0);
	expect_slot(&sl, 192, 128, 192, 320, 0);
	assert_int_equal(rt_ring_place(&g, 256, 65, &sl), 0); /* 128 > 64 left: wrap */
	expect_slot(&sl, 0, 65, 320, 448, 64);
	assert_int_equal(rt_ring_place(&g, 320 * 7 + 256, 64, &sl), 0);
	expect_slot(&sl, 256, 64, 320 * 7 + 256, 320 * 8, 0);
	assert_int_equal(rt_ring_place(&g, 0, 0, &sl), -EINVAL);
	assert_int_equal(rt_ring_place(&g, 0, 129, &sl), -EINVAL);
	assert_int_equal(rt_ring_place(&g, RGAPS_RING_CURSOR_LIMIT - 64, 64, &sl), 0);
	assert_int_equal(rt_ring_place(&g, RGAPS_RING_CURSOR_LIMIT - 64, 65, &sl), -EOVERFLOW);
}

static void test_first_write(void **state)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_sender s;
	struct rgaps_ring_receiver r;
	struct rgaps_ring_slot sl, rl;

	geom(&g, SZ, MAXREC, AL);
	rt_ring_sender_init(&s, &g);
	assert_int_equal(rt_ring_receiver_init(&r, &g, 0.0), 0);
	assert_int_equal(rt_ring_sender_used(&s), 0);
	assert_int_equal(rt_ring_sender_free(&s), SZ);

	assert_int_equal(rt_ring_sender_reserve(&s, 100, &sl), 0);
	expect_slot(&sl, 0, 100, 0, 128, 0);
	assert_int_equal(s.tail, 128);
	assert_int_equal(rt_ring_sender_used(&s), 128);
	assert_int_equal(rt_ring_sender_free(&s), SZ - 128);

	assert_int_equal(rt_ring_receiver_verify(&r, 0, 100), 0);
	assert_int_equal(rt_ring_receiver_land(&r, 100, &rl), 0);
	assert_memory_equal(&sl, &rl, sizeof(sl));
	assert_int_equal(rt_ring_receiver_used(&r), 128);
	check_pair(&s, &r);

	/* The second record starts at the next aligned offset. */
	assert_int_equal(rt_ring_sender_reserve(&s, 1, &sl), 0);
	expect_slot(&sl, 128, 1, 128, 192, 0);
}

static void test_exact_fit_to_end(void **state)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_sender s;
	struct rgaps_ring_receiver r;
	struct rgaps_ring_slot sl, rl, first;
	uint64_t h;

	geom(&g, SZ, MAXREC, AL);
	rt_ring_sender_init(&s, &g);
	assert_int_equal(rt_ring_receiver_init(&r, &g, 0.0), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(rt_ring_sender_reserve(&s, 256, &sl), 0);
		assert_int_equal(rt_ring_receiver_land(&r, 256, &rl), 0);
		if (i == 0)
			first = rl;
	}
	/* 256 left, record of 256 (and of 193..256, same stride): no padding. */
	assert_int_equal(rt_ring_sender_reserve(&s, 250, &sl), 0);
	expect_slot(&sl, 768, 250, 768, 1024, 0);
	assert_int_equal(rt_ring_receiver_verify(&r, 768, 250), 0);
	assert_int_equal(rt_ring_receiver_land(&r, 250, &rl), 0);
	assert_memory_equal(&sl, &rl, sizeof(sl));
	assert_int_equal(rt_ring_sender_free(&s), 0);
	assert_int_equal(s.pad_bytes, 0);
	check_pair(&s, &r);

	/* Free the first record; the next one starts at offset 0 with no padding. */
	rt_ring_receiver_consume(&r, &first);
	assert_true(rt_ring_receiver_should_report(&r, &h));
	assert_int_equal(h, 256);
	rt_ring_receiver_reported(&r, h);
	assert_int_equal(rt_ring_sender_update_dhead(&s, h), 0);
	assert_int_equal(rt_ring_sender_reserve(&s, 256, &sl), 0);
	expect_slot(&sl, 0, 256, 1024, 1280, 0);
	assert_int_equal(rt_ring_receiver_land(&r, 256, &rl), 0);
	assert_memory_equal(&sl, &rl, sizeof(sl));
	check_pair(&s, &r);
}

static void test_wrap_with_padding(void **state)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_sender s;
	struct rgaps_ring_receiver r;
	struct rgaps_ring_slot sl[5], rl[5];
	const uint64_t lens[5] = { 128, 256, 256, 256, 200 };
	uint64_t h;

	geom(&g, SZ, MAXREC, AL);
	rt_ring_sender_init(&s, &g);
	assert_int_equal(rt_ring_receiver_init(&r, &g, 0.0), 0);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(rt_ring_sender_reserve(&s, lens[i], &sl[i]), 0);
		assert_int_equal(rt_ring_receiver_land(&r, lens[i], &rl[i]), 0);
	}
	assert_int_equal(s.tail, 896);
	/* 200 (stride 256) does not fit in the last 128: it needs 128 + 256, more than is free. */
	assert_int_equal(rt_ring_sender_reserve(&s, 200, &sl[4]), -EAGAIN);
	assert_int_equal(s.tail, 896);
	assert_int_equal(s.stalls, 1);

	rt_ring_receiver_consume(&r, &rl[0]);
	rt_ring_receiver_consume(&r, &rl[1]);
	assert_true(rt_ring_receiver_should_report(&r, &h));
	assert_int_equal(h, 384);
	rt_ring_receiver_reported(&r, h);
	assert_int_equal(rt_ring_sender_update_dhead(&s, h), 0);

	assert_int_equal(rt_ring_sender_reserve(&s, 200, &sl[4]), 0);
	expect_slot(&sl[4], 0, 200, 1024, 1280, 128);
	assert_int_equal(s.pad_bytes, 128);
	assert_int_equal(rt_ring_sender_used(&s), 1280 - 384);
	/* The receiver computes the same placement from the length alone. */
	assert_int_equal(rt_ring_receiver_verify(&r, 896, 200), -EPROTO);
	assert_int_equal(rt_ring_receiver_verify(&r, 0, 200), 0);
	assert_int_equal(rt_ring_receiver_land(&r, 200, &rl[4]), 0);
	assert_memory_equal(&sl[4], &rl[4], sizeof(sl[4]));
	assert_int_equal(r.pad_bytes, 128);
	check_pair(&s, &r);

	/* Padding is freed with the record that follows it. */
	rt_ring_receiver_consume(&r, &rl[3]);
	assert_int_equal(r.head, 896);
	assert_int_equal(rt_ring_receiver_used(&r), 128 + 256);
	rt_ring_receiver_consume(&r, &rl[4]);
	assert_int_equal(r.head, 1280);
	assert_int_equal(rt_ring_receiver_used(&r), 0);
	assert_int_equal(rt_ring_receiver_free(&r), SZ);
	check_pair(&s, &r);
}

/* Linear: the used bytes [dhead, tail) do not cross the end; free is [tail, end) + [0, dhead). */
static void test_exceed_linear(void **state)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_sender s;
	struct rgaps_ring_slot sl;

	geom(&g, SZ, MAXREC, AL);
	rt_ring_sender_init(&s, &g);

	/* Used [128, 896): 128 free at the end, 128 at the start. */
	sender_at(&s, 896, 128);
	assert_int_equal(rt_ring_sender_reserve(&s, 192, &sl), -EAGAIN); /* pad 128 + 192 */
	assert_int_equal(rt_ring_sender_reserve(&s, 256, &sl), -EAGAIN);
	assert_int_equal(s.tail, 896);
	assert_int_equal(s.stalls, 2);
	assert_int_equal(rt_ring_sender_reserve(&s, 128, &sl), 0); /* fits the end exactly */
	expect_slot(&sl, 896, 128, 896, 1024, 0);
	/* Then the start, up to Delayed Head. */
	assert_int_equal(rt_ring_sender_reserve(&s, 128, &sl), 0);
	expect_slot(&sl, 0, 128, 1024, 1152, 0);
	assert_int_equal(rt_ring_sender_free(&s), 0);
	assert_int_equal(rt_ring_sender_reserve(&s, 1, &sl), -EAGAIN);

	/* Wrap with padding, at the boundary: pad 128 + 256 = the 384 free exactly. */
	sender_at(&s, 896, 256);
	assert_int_equal(rt_ring_sender_reserve(&s, 256, &sl), 0);
	expect_slot(&sl, 0, 256, 1024, 1280, 128);
	assert_int_equal(rt_ring_sender_free(&s), 0);
	/* One line less free: refused. */
	sender_at(&s, 896, 192);
	assert_int_equal(rt_ring_sender_reserve(&s, 256, &sl), -EAGAIN);
	assert_int_equal(rt_ring_sender_reserve(&s, 193, &sl), -EAGAIN);
	assert_int_equal(rt_ring_sender_reserve(&s, 192, &sl), 0); /* pad 128 + 192 = 320 free */
	expect_slot(&sl, 0, 192, 1024, 1216, 128);

	/* Same shapes one lap later: only the difference of the cursors matters. */
	sender_at(&s, 5 * SZ + 896, 5 * SZ + 256);
	assert_int_equal(rt_ring_sender_reserve(&s, 256, &sl), 0);
	expect_slot(&sl, 0, 256, 6 * SZ, 6 * SZ + 256, 128);
	sender_at(&s, 5 * SZ + 896, 5 * SZ + 192);
	assert_int_equal(rt_ring_sender_reserve(&s, 256, &sl), -EAGAIN);
}

/* Wrapped: the used bytes cross the end; free space is the one gap [tail, dhead). */
static void test_exceed_wrapped(void **state)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_sender s;
	struct rgaps_ring_slot sl;

	geom(&g, SZ, MAXREC, AL);
	rt_ring_sender_init(&s, &g);

	/* Tail at offset 512 one lap ahead, Delayed Head at offset 768: 256 free. */
	sender_at(&s, SZ + 512, 768);
	assert_int_equal(rt_ring_sender_free(&s), 256);
	assert_int_equal(rt_ring_sender_reserve(&s, 256, &sl), 0);
	expect_slot(&sl, 512, 256, SZ + 512, SZ + 768, 0);
	assert_int_equal(rt_ring_sender_free(&s), 0);
	assert_int_equal(rt_ring_sender_reserve(&s, 1, &sl), -EAGAIN);

	/* 192 free: a 256 record is refused, a 192 one fits exactly. */
	sender_at(&s, SZ + 512, 704);
	assert_int_equal(rt_ring_sender_reserve(&s, 256, &sl), -EAGAIN);
	assert_int_equal(rt_ring_sender_reserve(&s, 193, &sl), -EAGAIN);
	assert_int_equal(rt_ring_sender_reserve(&s, 192, &sl), 0);
	expect_slot(&sl, 512, 192, SZ + 512, SZ + 704, 0);

	/* 64 free at [896, 960): 64 fits, 65 (stride 128) would run into Delayed Head. */
	sender_at(&s, SZ + 896, 960);
	assert_int_equal(rt_ring_sender_reserve(&s, 65, &sl), -EAGAIN);
	assert_int_equal(rt_ring_sender_reserve(&s, 64, &sl), 0);

	/*
	 * Padding cannot jump over Delayed Head: Tail at 832, Delayed Head at 960
	 * (128 free in the gap); a 256 record would pad to the end and start at 0,
	 * i.e. over [960, 1024) and [0, 256) that are not free.
	 */
	sender_at(&s, SZ + 832, 960);
	assert_int_equal(rt_ring_sender_reserve(&s, 256, &sl), -EAGAIN);
	assert_int_equal(rt_ring_sender_reserve(&s, 128, &sl), 0);
	expect_slot(&sl, 832, 128, SZ + 832, SZ + 960, 0);
	assert_int_equal(s.tail, SZ + 960);
}

static void test_full_ring(void **state)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_sender s;
	struct rgaps_ring_receiver r;
	struct rgaps_ring_slot sl, rl[16];
	uint64_t h;
	int n = 0;

	geom(&g, SZ, MAXREC, AL);
	rt_ring_sender_init(&s, &g);
	assert_int_equal(rt_ring_receiver_init(&r, &g, 0.0), 0);
	while (rt_ring_sender_reserve(&s, 64, &sl) == 0) {
		assert_true(n < 16);
		assert_int_equal(rt_ring_receiver_land(&r, 64, &rl[n]), 0);
		assert_int_equal(rl[n].off, sl.off);
		n++;
		check_pair(&s, &r);
	}
	assert_int_equal(n, 16);
	assert_int_equal(rt_ring_sender_used(&s), SZ);
	assert_int_equal(rt_ring_sender_free(&s), 0);
	assert_int_equal(rt_ring_receiver_free(&r), 0);
	assert_int_equal(rt_ring_sender_reserve(&s, 1, &sl), -EAGAIN);
	/* A peer that writes anyway is caught by the receiver. */
	assert_int_equal(rt_ring_receiver_verify(&r, 0, 1), -EPROTO);
	assert_int_equal(rt_ring_receiver_land(&r, 1, &sl), -EPROTO);
	assert_int_equal(r.tail, SZ);

	rt_ring_receiver_consume(&r, &rl[0]);
	assert_true(rt_ring_receiver_should_report(&r, &h));
	rt_ring_receiver_reported(&r, h);
	/* Until the Head arrives the sender still sees a full ring. */
	assert_int_equal(rt_ring_sender_reserve(&s, 1, &sl), -EAGAIN);
	assert_int_equal(rt_ring_sender_update_dhead(&s, h), 0);
	assert_int_equal(rt_ring_sender_reserve(&s, 64, &sl), 0);
	expect_slot(&sl, 0, 64, SZ, SZ + 64, 0);
	assert_int_equal(rt_ring_sender_reserve(&s, 1, &sl), -EAGAIN);
	assert_int_equal(rt_ring_receiver_land(&r, 64, &rl[0]), 0);
	check_pair(&s, &r);
}

static void test_dhead_updates(void **state)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_sender s;
	struct rgaps_ring_slot sl;

	geom(&g, SZ, MAXREC, AL);
	rt_ring_sender_init(&s, &g);
	assert_int_equal(rt_ring_sender_update_dhead(&s, 0), 0); /* nothing yet, repeated */
	assert_int_equal(rt_ring_sender_update_dhead(&s, 64), -EINVAL); /* past Tail 0 */
	for (int i = 0; i < 4; i++)
		assert_int_equal(rt_ring_sender_reserve(&s, 128, &sl), 0);
	assert_int_equal(s.tail, 512);

	assert_int_equal(rt_ring_sender_update_dhead(&s, 128), 0);
	assert_int_equal(rt_ring_sender_update_dhead(&s, 128), 0); /* same word polled again */
	assert_int_equal(rt_ring_sender_update_dhead(&s, 64), -EINVAL);  /* backward */
	assert_int_equal(rt_ring_sender_update_dhead(&s, 0), -EINVAL);   /* backward */
	assert_int_equal(rt_ring_sender_update_dhead(&s, 576), -EINVAL); /* past Tail */
	assert_int_equal(rt_ring_sender_update_dhead(&s, 130), -EINVAL); /* not a record end */
	assert_int_equal(rt_ring_sender_update_dhead(&s, UINT64_MAX), -EINVAL);
	assert_int_equal(rt_ring_sender_update_dhead(&s, RGAPS_RING_CURSOR_LIMIT), -EINVAL);
	assert_int_equal(s.dhead, 128);
	assert_int_equal(rt_ring_sender_update_dhead(&s, 512), 0); /* = Tail: all consumed */
	assert_int_equal(rt_ring_sender_used(&s), 0);
	assert_int_equal(rt_ring_sender_update_dhead(&s, 448), -EINVAL);
	assert_int_equal(s.dhead, 512);
}

/* Consume records one by one and list the Heads reported. */
static int report_points(double wm, uint64_t len, int nrec, uint64_t *heads, int max)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_sender s;
	struct rgaps_ring_receiver r;
	struct rgaps_ring_slot sl, rl;
	uint64_t h;
	int n = 0;

	geom(&g, SZ, MAXREC, AL);
	rt_ring_sender_init(&s, &g);
	assert_int_equal(rt_ring_receiver_init(&r, &g, wm), 0);
	assert_false(rt_ring_receiver_should_report(&r, &h));
	for (int i = 0; i < nrec; i++) {
		/* The sender only blocks if the cap is wrong: Heads arrive at once here. */
		assert_int_equal(rt_ring_sender_reserve(&s, len, &sl), 0);
		assert_int_equal(rt_ring_receiver_land(&r, len, &rl), 0);
		/* Landing is not consuming. */
		assert_false(rt_ring_receiver_should_report(&r, &h));
		rt_ring_receiver_consume(&r, &rl);
		if (rt_ring_receiver_should_report(&r, &h)) {
			assert_int_equal(h, r.head);
			assert_true(n < max);
			heads[n++] = h;
			rt_ring_receiver_reported(&r, h);
			assert_false(rt_ring_receiver_should_report(&r, &h));
			assert_int_equal(rt_ring_sender_update_dhead(&s, h), 0);
		}
		check_pair(&s, &r);
	}
	return n;
}

static void test_watermark_0(void **state)
{
	uint64_t heads[32];
	int n = report_points(0.0, 100, 10, heads, 32);

	assert_int_equal(n, 10);
	for (int i = 0; i < n; i++)
		assert_int_equal(heads[i], 128u * (i + 1));
}

static void test_watermark_quarter(void **state)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_receiver r;
	uint64_t heads[32];
	int n;

	geom(&g, SZ, MAXREC, AL);
	assert_int_equal(rt_ring_receiver_init(&r, &g, 0.25), 0);
	assert_int_equal(r.report_bytes, 256);

	n = report_points(0.25, 64, 20, heads, 32); /* every 4th record */
	assert_int_equal(n, 5);
	for (int i = 0; i < n; i++)
		assert_int_equal(heads[i], 256u * (i + 1));

	/* 192-byte strides: the first Head at or past 256 bytes, then 384 more each time. */
	n = report_points(0.25, 129, 8, heads, 32);
	assert_int_equal(n, 4);
	assert_int_equal(heads[0], 384);
	assert_int_equal(heads[1], 768);
	/* 5th record: 64 of padding at 960 and 192 at 1024: Head 1216 (+448). */
	assert_int_equal(heads[2], 1216);
	assert_int_equal(heads[3], 1600);
}

static void test_watermark_one(void **state)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_sender s;
	struct rgaps_ring_receiver r;
	struct rgaps_ring_slot sl, rl[2];
	uint64_t heads[32];
	uint64_t h;
	int n;

	/* Capped at size - 2 * max_stride + 2 * align = 1024 - 512 + 128. */
	geom(&g, SZ, MAXREC, AL);
	assert_int_equal(rt_ring_receiver_init(&r, &g, 1.0), 0);
	assert_int_equal(r.report_bytes, 640);
	n = report_points(1.0, 64, 25, heads, 32);
	assert_int_equal(n, 2);
	assert_int_equal(heads[0], 640);
	assert_int_equal(heads[1], 1280);

	/*
	 * Why the cap: 256-byte ring, records up to 128. 64 + 128 are written, the
	 * next 128 needs 64 of padding + 128 = 192 but only 64 is free. The
	 * receiver consumes both: 192 bytes. With a threshold of the whole ring
	 * (256) it would never report, and the sender would wait forever.
	 */
	geom(&g, 256, 128, 64);
	rt_ring_sender_init(&s, &g);
	assert_int_equal(rt_ring_receiver_init(&r, &g, 1.0), 0);
	assert_int_equal(r.report_bytes, 128);
	assert_int_equal(rt_ring_sender_reserve(&s, 64, &sl), 0);
	assert_int_equal(rt_ring_receiver_land(&r, 64, &rl[0]), 0);
	assert_int_equal(rt_ring_sender_reserve(&s, 128, &sl), 0);
	assert_int_equal(rt_ring_receiver_land(&r, 128, &rl[1]), 0);
	assert_int_equal(rt_ring_sender_reserve(&s, 128, &sl), -EAGAIN);
	rt_ring_receiver_consume(&r, &rl[1]); /* both at once */
	assert_int_equal(r.head, 192);
	assert_true(r.head - r.reported < g.size); /* the uncapped threshold would not fire */
	assert_true(rt_ring_receiver_should_report(&r, &h));
	rt_ring_receiver_reported(&r, h);
	assert_int_equal(rt_ring_sender_update_dhead(&s, h), 0);
	assert_int_equal(rt_ring_sender_reserve(&s, 128, &sl), 0);
	expect_slot(&sl, 0, 128, 256, 384, 64);
	check_pair(&s, &r);
}

static void test_watermark_invalid(void **state)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_receiver r;

	geom(&g, SZ, MAXREC, AL);
	assert_int_equal(rt_ring_receiver_init(&r, &g, -0.01), -EINVAL);
	assert_int_equal(rt_ring_receiver_init(&r, &g, 1.01), -EINVAL);
	assert_int_equal(rt_ring_receiver_init(&r, &g, NAN), -EINVAL);
	assert_int_equal(rt_ring_receiver_init(&r, &g, INFINITY), -EINVAL);
	assert_int_equal(rt_ring_receiver_init(&r, &g, 0.001), 0);
	assert_int_equal(r.report_bytes, 2); /* ceil(1.024) */
}

static void test_hostile_offsets(void **state)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_receiver r, before;
	struct rgaps_ring_slot rl[4], sl;
	const uint64_t lens[4] = { 128, 256, 256, 256 };

	geom(&g, SZ, MAXREC, AL);
	assert_int_equal(rt_ring_receiver_init(&r, &g, 0.0), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(rt_ring_receiver_land(&r, lens[i], &rl[i]), 0);
	assert_int_equal(r.tail, 896);

	assert_int_equal(rt_ring_receiver_verify(&r, 896, 128), 0);
	assert_int_equal(rt_ring_receiver_verify(&r, 896, 1), 0);
	assert_int_equal(rt_ring_receiver_verify(&r, 0, 128), -EPROTO);   /* not the next */
	assert_int_equal(rt_ring_receiver_verify(&r, 128, 128), -EPROTO); /* unconsumed */
	assert_int_equal(rt_ring_receiver_verify(&r, 960, 64), -EPROTO);  /* skips a line */
	assert_int_equal(rt_ring_receiver_verify(&r, 900, 64), -EPROTO);  /* unaligned */
	/* A cursor, not an offset. */
	assert_int_equal(rt_ring_receiver_verify(&r, 896 + SZ, 128), -EPROTO);
	assert_int_equal(rt_ring_receiver_verify(&r, SZ, 64), -EPROTO);
	assert_int_equal(rt_ring_receiver_verify(&r, UINT64_MAX, 128), -EPROTO);
	assert_int_equal(rt_ring_receiver_verify(&r, UINT64_MAX - 127, 128), -EPROTO);
	assert_int_equal(rt_ring_receiver_verify(&r, 896, 0), -EINVAL);
	assert_int_equal(rt_ring_receiver_verify(&r, 896, MAXREC + 1), -EINVAL);
	assert_int_equal(rt_ring_receiver_verify(&r, 896, UINT64_MAX), -EINVAL);
	/* Crossing the end is never where a record goes. */
	assert_int_equal(rt_ring_receiver_verify(&r, 896, 200), -EPROTO);
	/* Where it would go (offset 0 after padding) is not free: Head is still 0. */
	assert_int_equal(rt_ring_receiver_verify(&r, 0, 200), -EPROTO);

	before = r;
	assert_int_equal(rt_ring_receiver_land(&r, 200, &sl), -EPROTO);
	assert_int_equal(rt_ring_receiver_land(&r, 0, &sl), -EINVAL);
	assert_int_equal(rt_ring_receiver_land(&r, MAXREC + 1, &sl), -EINVAL);
	assert_true(receiver_eq(&r, &before)); /* refused input changes nothing */

	rt_ring_receiver_consume(&r, &rl[1]);
	assert_int_equal(r.head, 384);
	assert_int_equal(rt_ring_receiver_verify(&r, 0, 200), 0);
	assert_int_equal(rt_ring_receiver_land(&r, 200, &sl), 0);
	expect_slot(&sl, 0, 200, 1024, 1280, 128);
}

static void test_input_validation(void **state)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_sender s, before;
	struct rgaps_ring_slot sl;

	geom(&g, SZ, MAXREC, AL);
	rt_ring_sender_init(&s, &g);
	before = s;
	memset(&sl, 0x5a, sizeof(sl));
	assert_int_equal(rt_ring_sender_reserve(&s, 0, &sl), -EINVAL);
	assert_int_equal(rt_ring_sender_reserve(&s, MAXREC + 1, &sl), -EINVAL);
	assert_int_equal(rt_ring_sender_reserve(&s, UINT64_MAX, &sl), -EINVAL);
	assert_true(sender_eq(&s, &before));
	assert_int_equal(sl.off, 0x5a5a5a5a5a5a5a5aull); /* not written on failure */
	assert_int_equal(rt_ring_sender_reserve(&s, MAXREC, &sl), 0);
}

static void test_consume_batch(void **state)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_receiver r;
	struct rgaps_ring_slot rl[6];
	uint64_t h;

	geom(&g, SZ, MAXREC, AL);
	assert_int_equal(rt_ring_receiver_init(&r, &g, 0.25), 0);
	for (int i = 0; i < 6; i++)
		assert_int_equal(rt_ring_receiver_land(&r, 100, &rl[i]), 0);
	rt_ring_receiver_consume(&r, &rl[2]); /* three records at once */
	assert_int_equal(r.head, 384);
	assert_int_equal(rt_ring_receiver_used(&r), 384);
	assert_true(rt_ring_receiver_should_report(&r, &h));
	assert_int_equal(h, 384);
	rt_ring_receiver_reported(&r, h);
	rt_ring_receiver_consume(&r, &rl[3]);
	assert_false(rt_ring_receiver_should_report(&r, &h));
	rt_ring_receiver_consume(&r, &rl[5]);
	assert_int_equal(r.head, r.tail);
	assert_true(rt_ring_receiver_should_report(&r, &h));
	assert_int_equal(h, 768);
	/* A report may also be partial (e.g. posted before the last consume). */
	rt_ring_receiver_reported(&r, 640);
	assert_true(rt_ring_receiver_should_report(&r, &h) == false); /* 128 < 256 */
	assert_int_equal(r.reports, 2);
}

static void test_cursor_limit(void **state)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_sender s;
	struct rgaps_ring_receiver r;
	struct rgaps_ring_slot sl;

	geom(&g, SZ, MAXREC, AL);
	rt_ring_sender_init(&s, &g);
	sender_at(&s, RGAPS_RING_CURSOR_LIMIT - 128, RGAPS_RING_CURSOR_LIMIT - 128);
	assert_int_equal(rt_ring_sender_reserve(&s, 64, &sl), 0);
	assert_int_equal(sl.end, RGAPS_RING_CURSOR_LIMIT - 64);
	assert_int_equal(rt_ring_sender_reserve(&s, 65, &sl), -EOVERFLOW);
	assert_int_equal(rt_ring_sender_reserve(&s, 64, &sl), 0);
	assert_int_equal(rt_ring_sender_reserve(&s, 1, &sl), -EOVERFLOW);
	assert_int_equal(s.tail, RGAPS_RING_CURSOR_LIMIT);

	assert_int_equal(rt_ring_receiver_init(&r, &g, 0.0), 0);
	r.tail = r.head = r.reported = RGAPS_RING_CURSOR_LIMIT - 64;
	assert_int_equal(rt_ring_receiver_land(&r, 64, &sl), 0);
	assert_int_equal(rt_ring_receiver_land(&r, 64, &sl), -EOVERFLOW);
}

static void test_check_detects(void **state)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_sender s, bs;
	struct rgaps_ring_receiver r, br;
	struct rgaps_ring_slot sl, rl[4];
	const char *why;
	uint64_t h;

	geom(&g, SZ, MAXREC, AL);
	rt_ring_sender_init(&s, &g);
	assert_int_equal(rt_ring_receiver_init(&r, &g, 0.0), 0);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(rt_ring_sender_reserve(&s, 64, &sl), 0);
		assert_int_equal(rt_ring_receiver_land(&r, 64, &rl[i]), 0);
	}
	rt_ring_receiver_consume(&r, &rl[1]);
	assert_true(rt_ring_receiver_should_report(&r, &h));
	rt_ring_receiver_reported(&r, h);
	assert_int_equal(rt_ring_sender_update_dhead(&s, h), 0);
	why = NULL;
	assert_int_equal(rt_ring_check(&s, &r, &why), 0);
	assert_null(why); /* written only on failure */

#define EXPECT_BROKEN(what)                                                     \
	do {                                                                    \
		why = NULL;                                                     \
		assert_int_equal(rt_ring_check(&bs, &br, &why), -EUCLEAN);   \
		assert_non_null(why);                                           \
		assert_string_equal(why, (what));                               \
		bs = s;                                                         \
		br = r;                                                         \
	} while (0)

	bs = s;
	br = r;
	bs.dhead = 192;
	EXPECT_BROKEN("Delayed Head leads Head");
	br.reported = 64;
	EXPECT_BROKEN("Delayed Head leads the last reported Head");
	bs.tail = bs.dhead + SZ + 64;
	EXPECT_BROKEN("Tail passed Delayed Head + size (overwrite)");
	bs.dhead = 320;
	EXPECT_BROKEN("Delayed Head is ahead of Tail");
	br.head = br.tail + 64;
	EXPECT_BROKEN("Head passed Tail");
	br.tail = bs.tail + 64;
	br.head = br.tail;
	br.reported = br.tail;
	EXPECT_BROKEN("receiver landed past the sender's Tail");
	br.tail += SZ + 64;
	EXPECT_BROKEN("receiver holds more than size unconsumed bytes (overwrite)");
	br.geom.align = 32;
	br.geom.max_stride = 256;
	EXPECT_BROKEN("sender and receiver geometries differ");
	bs.tail += 1;
	EXPECT_BROKEN("sender cursor is not aligned");
	br.geom.size = 1000;
	EXPECT_BROKEN("receiver geometry is invalid");
	br.report_bytes = SZ;
	EXPECT_BROKEN("watermark threshold above the deadlock-free cap");
#undef EXPECT_BROKEN
}

/* Run fn in a child and expect it to abort (a caller bug hitting rgaps_require). */
static void expect_abort(void (*fn)(void))
{
	int status;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (!freopen("/dev/null", "w", stderr))
			_exit(2);
		fn();
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGABRT);
}

static void bug_consume_nothing(void)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_receiver r;
	struct rgaps_ring_slot sl;

	rt_ring_geom_init(SZ, MAXREC, AL, &g);
	rt_ring_receiver_init(&r, &g, 0.0);
	rt_ring_place(&g, 0, 64, &sl);
	rt_ring_receiver_consume(&r, &sl);
}

static void bug_consume_twice(void)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_receiver r;
	struct rgaps_ring_slot sl;

	rt_ring_geom_init(SZ, MAXREC, AL, &g);
	rt_ring_receiver_init(&r, &g, 0.0);
	rt_ring_receiver_land(&r, 64, &sl);
	rt_ring_receiver_consume(&r, &sl);
	rt_ring_receiver_consume(&r, &sl);
}

static void bug_report_ahead(void)
{
	struct rgaps_ring_geom g;
	struct rgaps_ring_receiver r;
	struct rgaps_ring_slot sl;

	rt_ring_geom_init(SZ, MAXREC, AL, &g);
	rt_ring_receiver_init(&r, &g, 0.0);
	rt_ring_receiver_land(&r, 64, &sl);
	rt_ring_receiver_reported(&r, 64); /* landed, not consumed */
}

static void bug_bad_geom(void)
{
	struct rgaps_ring_geom g = { .size = 100, .max_record = 80, .max_stride = 80, .align = 1 };
	struct rgaps_ring_sender s;

	rt_ring_sender_init(&s, &g);
}

static void test_caller_bugs_abort(void **state)
{
	expect_abort(bug_consume_nothing);
	expect_abort(bug_consume_twice);
	expect_abort(bug_report_ahead);
	expect_abort(bug_bad_geom);
}

/*
 * Property test. One FIFO holds the records not yet consumed, in order, with
 * three monotonic indices: [cons, land) have landed and wait to be consumed,
 * [land, sent) are still in the network. A second FIFO holds Head reports on
 * their way back. Both directions keep order (RC QPs and TCP do) but each
 * message takes a random time.
 */
struct prop_rec {
	struct rgaps_ring_slot slot;
	uint32_t seq;
	uint64_t due; /* step at which it may land */
};

struct prop_head {
	uint64_t head;
	uint64_t due;
};

struct prop_cfg {
	uint64_t size;
	uint64_t max;
	uint32_t align;
	double wm;
	uint64_t seed;
};

struct prop_stats {
	uint64_t records, wraps, exact_end, stall_linear, stall_wrapped, reports, bytes, full;
};

struct prop {
	struct prop_cfg cfg;
	struct rgaps_ring_geom g;
	struct rgaps_ring_sender s;
	struct rgaps_ring_receiver r;
	uint8_t *bytes; /* the simulated ring memory */
	uint8_t *ramp;	/* ramp[i] = i mod 256, size + 256 long: every pattern is a slice */
	struct prop_rec *recs;
	uint64_t nrec_cap, cons, land, sent; /* monotonic indices into recs (mod cap) */
	struct prop_head *heads;
	uint64_t nhead_cap, hfirst, hlast;
	uint64_t rng, now, last_due, last_hdue;
	struct prop_stats st;
};

static uint64_t prop_rand(struct prop *p)
{
	/* splitmix64: tiny, full period, good enough to drive a simulation. */
	uint64_t z = (p->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t prop_below(struct prop *p, uint64_t n)
{
	return prop_rand(p) % n;
}

/*
 * Byte i of a record's footprint is (base + i) mod 256 with a per-record base:
 * a slice of the ramp, so writing and checking are memcpy and memcmp. Another
 * record over the same bytes has another base with odds 255/256, and a bug
 * repeats far more often than that.
 */
static const uint8_t *prop_pattern(const struct prop *p, uint32_t seq)
{
	return p->ramp + (seq * 0x9e3779b1u >> 24);
}

#define PROP_FAIL(p, ...)                                                                   \
	fail_msg("ring %" PRIu64 "/%" PRIu64 "/%u wm %.2f seed %" PRIu64 " step %" PRIu64       \
		 " (tail %" PRIu64 " dhead %" PRIu64 " rtail %" PRIu64 " head %" PRIu64 "): %s", \
		 (p)->cfg.size, (p)->cfg.max, (p)->cfg.align, (p)->cfg.wm, (p)->cfg.seed,       \
		 (p)->now, (p)->s.tail, (p)->s.dhead, (p)->r.tail, (p)->r.head,                  \
		 prop_msg(__VA_ARGS__))

static const char *prop_msg(const char *fmt, ...)
{
	static char buf[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return buf;
}

static uint64_t prop_delay(struct prop *p)
{
	uint64_t x = prop_below(p, 100);

	if (x < 60)
		return 0;
	if (x < 99)
		return prop_below(p, 8);
	return prop_below(p, 300); /* now and then a long stall, holding up all behind it */
}

static uint64_t prop_pick_len(struct prop *p)
{
	uint64_t max = p->g.max_record, to_end = p->g.size - p->s.tail % p->g.size;
	uint64_t x = prop_below(p, 100);

	if (x < 10 && to_end <= max) /* exact fit: same stride as to_end */
		return to_end - prop_below(p, RGAPS_MIN(to_end, (uint64_t)p->g.align));
	if (x < 16 && to_end < max)
		return to_end + 1; /* just too long: forces a wrap */
	if (x < 26)
		return max;
	if (x < 46)
		return 1 + prop_below(p, p->g.align);
	return 1 + prop_below(p, max);
}

static void prop_check(struct prop *p)
{
	const char *why;

	if (rt_ring_check(&p->s, &p->r, &why) != 0)
		PROP_FAIL(p, "invariant: %s", why);
}

static void prop_send(struct prop *p)
{
	struct rgaps_ring_sender before = p->s;
	struct rgaps_ring_slot sl;
	struct prop_rec *rec;
	uint64_t len, c, first, n, o, seg;
	int err;

	if (prop_below(p, 50) == 0) {
		/* Bad lengths are refused and change nothing. */
		len = prop_below(p, 2) ? 0 : p->g.max_record + 1 + prop_below(p, 1000);
		if (rt_ring_sender_reserve(&p->s, len, &sl) != -EINVAL)
			PROP_FAIL(p, "len %" PRIu64 " not refused", len);
		if (!sender_eq(&before, &p->s))
			PROP_FAIL(p, "refused len changed the sender");
		return;
	}
	len = prop_pick_len(p);
	err = rt_ring_sender_reserve(&p->s, len, &sl);
	if (err == -EAGAIN) {
		/* Linear: the bytes in flight [dhead, tail) do not cross the end. */
		if (p->s.tail <= (p->s.dhead / p->g.size + 1) * p->g.size)
			p->st.stall_linear++;
		else
			p->st.stall_wrapped++;
		if (p->s.tail - p->s.dhead == p->g.size)
			p->st.full++;
		/* Anything left that would ever free space? If not, the ring is deadlocked. */
		if (p->land == p->sent && p->cons == p->land && p->hfirst == p->hlast &&
		    !rt_ring_receiver_should_report(&p->r, &c))
			PROP_FAIL(p, "deadlock: sender blocked on len %" PRIu64 ", nothing pending",
				  len);
		return;
	}
	if (err)
		PROP_FAIL(p, "reserve(%" PRIu64 ") = %d", len, err);
	if (sl.len != len || sl.off + len > p->g.size || sl.off % p->g.align ||
	    sl.start % p->g.size != sl.off || sl.start != before.tail + sl.pad ||
	    sl.end != p->s.tail || sl.pad >= p->g.size)
		PROP_FAIL(p, "bad slot off %" PRIu64 " len %" PRIu64, sl.off, len);
	if (sl.pad)
		p->st.wraps++;
	else if (sl.end % p->g.size == 0)
		p->st.exact_end++;
	if (p->sent - p->cons >= p->nrec_cap)
		PROP_FAIL(p, "more records in flight than a ring can hold");

	/*
	 * The sender writes the whole footprint at once (the earliest a transport
	 * could): padding, record, slack. Only the padding can run to the end of
	 * the ring, so the footprint is at most two pieces.
	 */
	first = sl.start - sl.pad;
	n = sl.end - first;
	o = first % p->g.size;
	seg = RGAPS_MIN(n, p->g.size - o);
	memcpy(p->bytes + o, prop_pattern(p, (uint32_t)p->st.records), seg);
	memcpy(p->bytes, prop_pattern(p, (uint32_t)p->st.records) + seg, n - seg);
	rec = &p->recs[p->sent % p->nrec_cap];
	rec->slot = sl;
	rec->seq = (uint32_t)p->st.records;
	/* In order on the wire: never due before the previous record. */
	p->last_due = RGAPS_MAX(p->last_due, p->now + prop_delay(p));
	rec->due = p->last_due;
	p->sent++;
	p->st.records++;
	p->st.bytes += len;
}

static void prop_deliver(struct prop *p)
{
	struct prop_rec *rec;
	struct rgaps_ring_slot rl;
	int err;

	while (p->land < p->sent) {
		rec = &p->recs[p->land % p->nrec_cap];
		if (rec->due > p->now)
			return;
		/* A transport that carries the offset checks it; a wrong one is refused. */
		err = rt_ring_receiver_verify(&p->r, rec->slot.off, rec->slot.len);
		if (err)
			PROP_FAIL(p, "verify(%" PRIu64 ", %" PRIu64 ") = %d", rec->slot.off,
				  rec->slot.len, err);
		if (rt_ring_receiver_verify(&p->r, (rec->slot.off + p->g.align) % p->g.size,
					       rec->slot.len) != -EPROTO)
			PROP_FAIL(p, "wrong offset accepted");
		err = rt_ring_receiver_land(&p->r, rec->slot.len, &rl);
		if (err)
			PROP_FAIL(p, "land(%" PRIu64 ") = %d", rec->slot.len, err);
		if (memcmp(&rl, &rec->slot, sizeof(rl)))
			PROP_FAIL(p, "receiver placed record %u at %" PRIu64 ", sender at %" PRIu64,
				  rec->seq, rl.off, rec->slot.off);
		p->land++;
		if (prop_below(p, 2))
			return;
	}
}

/* Newest record in flight whose footprint covers ring offset o: who overwrote it. */
static int64_t prop_who_wrote(const struct prop *p, uint64_t o)
{
	for (uint64_t k = p->sent; k-- > p->cons;) {
		const struct prop_rec *rec = &p->recs[k % p->nrec_cap];

		for (uint64_t c = rec->slot.start - rec->slot.pad; c < rec->slot.end; c++)
			if (c % p->g.size == o)
				return rec->seq;
	}
	return -1;
}

static void prop_verify_bytes(struct prop *p, const struct prop_rec *rec)
{
	uint64_t first = rec->slot.start - rec->slot.pad;
	uint64_t n = rec->slot.end - first, o = first % p->g.size;
	uint64_t seg = RGAPS_MIN(n, p->g.size - o);
	const uint8_t *want = prop_pattern(p, rec->seq);

	if (memcmp(p->bytes + o, want, seg) == 0 && memcmp(p->bytes, want + seg, n - seg) == 0)
		return;
	for (uint64_t i = 0; i < n; i++, o = (o + 1) % p->g.size)
		if (p->bytes[o] != want[i])
			PROP_FAIL(p, "record %u corrupt at offset %" PRIu64
				  " (last written by %" PRId64 ")",
				  rec->seq, o, prop_who_wrote(p, o));
}

static void prop_consume(struct prop *p)
{
	uint64_t n, avail = p->land - p->cons;
	const struct prop_rec *last = NULL;

	if (!avail)
		return;
	n = 1 + (prop_below(p, 4) ? 0 : prop_below(p, avail));
	for (uint64_t i = 0; i < n; i++) {
		last = &p->recs[(p->cons + i) % p->nrec_cap];
		prop_verify_bytes(p, last);
	}
	rt_ring_receiver_consume(&p->r, &last->slot);
	p->cons += n;
	if (p->r.head != last->slot.end)
		PROP_FAIL(p, "Head not at the end of the last consumed record");
}

static void prop_report(struct prop *p)
{
	struct prop_head *hm;
	uint64_t h;

	if (!rt_ring_receiver_should_report(&p->r, &h))
		return;
	if (h != p->r.head || h == p->r.reported || h - p->r.reported < p->r.report_bytes)
		PROP_FAIL(p, "should_report gave %" PRIu64, h);
	if (p->hlast - p->hfirst >= p->nhead_cap)
		PROP_FAIL(p, "more Head reports in flight than a ring can cause");
	hm = &p->heads[p->hlast % p->nhead_cap];
	hm->head = h;
	p->last_hdue = RGAPS_MAX(p->last_hdue, p->now + prop_delay(p));
	hm->due = p->last_hdue;
	p->hlast++;
	rt_ring_receiver_reported(&p->r, h);
	p->st.reports++;
}

static void prop_head_arrives(struct prop *p)
{
	struct prop_head *hm;
	uint64_t old;

	if (p->hfirst == p->hlast)
		return;
	hm = &p->heads[p->hfirst % p->nhead_cap];
	if (hm->due > p->now)
		return;
	if (rt_ring_sender_update_dhead(&p->s, hm->head) != 0)
		PROP_FAIL(p, "honest Head %" PRIu64 " refused", hm->head);
	p->hfirst++;
	if (prop_below(p, 8) == 0) {
		/* Hostile or stale words: refused, nothing changes. */
		old = p->s.dhead;
		if (rt_ring_sender_update_dhead(&p->s, p->s.dhead) != 0)
			PROP_FAIL(p, "repeated Head refused");
		if (old >= p->g.align &&
		    rt_ring_sender_update_dhead(&p->s, old - p->g.align) != -EINVAL)
			PROP_FAIL(p, "backward Head accepted");
		if (rt_ring_sender_update_dhead(&p->s, p->s.tail + p->g.align) != -EINVAL)
			PROP_FAIL(p, "Head past Tail accepted");
		if (p->s.dhead != old)
			PROP_FAIL(p, "refused Head changed Delayed Head");
	}
}

static uint64_t prop_ops(void)
{
	const char *e = getenv("RGAPS_RING_PROP_OPS");

	return e ? strtoull(e, NULL, 0) : 1000000;
}

static void prop_run(const struct prop_cfg *cfg, uint64_t ops, struct prop_stats *st_p)
{
	struct prop *p = calloc(1, sizeof(*p));
	/* Modes: who is faster for a while, so the ring both fills up and drains. */
	static const unsigned weights[3][4] = {
		{ 40, 25, 25, 10 }, /* balanced */
		{ 60, 25, 5, 10 },  /* slow consumer: the ring fills, the sender stalls */
		{ 10, 30, 50, 10 }, /* slow producer: the ring drains */
	};
	unsigned mode = 0;

	assert_non_null(p);
	p->cfg = *cfg;
	p->rng = cfg->seed;
	geom(&p->g, cfg->size, cfg->max, cfg->align);
	rt_ring_sender_init(&p->s, &p->g);
	assert_int_equal(rt_ring_receiver_init(&p->r, &p->g, cfg->wm), 0);
	p->nrec_cap = p->nhead_cap = cfg->size / cfg->align + 1;
	p->bytes = calloc(cfg->size, 1);
	p->ramp = malloc(cfg->size + 256);
	p->recs = calloc(p->nrec_cap, sizeof(*p->recs));
	p->heads = calloc(p->nhead_cap, sizeof(*p->heads));
	assert_true(p->bytes && p->ramp && p->recs && p->heads);
	for (uint64_t i = 0; i < cfg->size + 256; i++)
		p->ramp[i] = (uint8_t)i;

	for (p->now = 0; p->now < ops; p->now++) {
		uint64_t x;

		if (p->now % 2000 == 0)
			mode = (unsigned)prop_below(p, 3);
		x = prop_below(p, 100);
		if (x < weights[mode][0])
			prop_send(p);
		else if ((x -= weights[mode][0]) < weights[mode][1])
			prop_deliver(p);
		else if ((x -= weights[mode][1]) < weights[mode][2])
			prop_consume(p);
		else
			prop_report(p);
		/* Heads are polled by the sender all the time. */
		prop_head_arrives(p);
		prop_check(p);
	}

	/* Drain: everything sent lands and is consumed intact, and all agree at the end. */
	for (p->now = ops; p->land < p->sent || p->cons < p->land || p->hfirst < p->hlast;
	     p->now++) {
		prop_deliver(p);
		prop_consume(p);
		prop_report(p);
		prop_head_arrives(p);
		prop_check(p);
	}
	if (p->s.tail != p->r.tail || p->r.head != p->r.tail)
		PROP_FAIL(p, "not drained");
	*st_p = p->st;
	free(p->heads);
	free(p->recs);
	free(p->ramp);
	free(p->bytes);
	free(p);
}

static void test_property(void **state)
{
	/* size, max record, align: tiny, odd, non-power-of-two, exactly-half, larger. */
	static const struct {
		uint64_t size, max;
		uint32_t align;
	} shapes[] = {
		{ 3, 1, 1 },	   { 5, 2, 1 },	      { 12, 5, 2 },
		{ 192, 64, 64 },   { 320, 128, 64 },  { 1000, 496, 8 },
		{ 4096, 2048, 64 }, { 6000, 1500, 16 }, { 16384, 3000, 64 },
	};
	static const double wms[] = { 0.0, 0.25, 0.5, 1.0 };
	uint64_t ops = prop_ops();

	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(shapes); i++) {
		struct prop_stats sum = { 0 };

		for (size_t w = 0; w < RGAPS_ARRAY_SIZE(wms); w++) {
			struct prop_cfg cfg = {
				.size = shapes[i].size,
				.max = shapes[i].max,
				.align = shapes[i].align,
				.wm = wms[w],
				.seed = 0x5eed0000u + i * 16 + w,
			};
			struct prop_stats st;

			prop_run(&cfg, ops / RGAPS_ARRAY_SIZE(wms), &st);
			assert_true(st.records > 1000);
			assert_true(st.reports > 0);
			assert_true(st.full > 0);
			sum.records += st.records;
			sum.wraps += st.wraps;
			sum.exact_end += st.exact_end;
			sum.stall_linear += st.stall_linear;
			sum.stall_wrapped += st.stall_wrapped;
			sum.full += st.full;
			sum.reports += st.reports;
			sum.bytes += st.bytes;
		}
		/*
		 * Every rule was exercised, not just the easy path. Per shape, not
		 * per run: with 3 bytes and wm 1.0 Heads are multiples of 3, so a
		 * full ring is always linear there.
		 */
		assert_true(sum.stall_linear > 0);
		assert_true(sum.stall_wrapped > 0);
		assert_true(sum.exact_end > 0);
		if (RGAPS_ALIGN_UP(shapes[i].max, (uint64_t)shapes[i].align) > shapes[i].align)
			assert_true(sum.wraps > 0);
		print_message("ring %5" PRIu64 "/%4" PRIu64 "/%2u: %6" PRIu64 " records %9" PRIu64
			      " bytes %5" PRIu64 " wraps %5" PRIu64 " exact-ends, stalls %6" PRIu64
			      " linear %6" PRIu64 " wrapped (%6" PRIu64 " full), %5" PRIu64
			      " reports\n",
			      shapes[i].size, shapes[i].max, shapes[i].align, sum.records,
			      sum.bytes, sum.wraps, sum.exact_end, sum.stall_linear,
			      sum.stall_wrapped, sum.full, sum.reports);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_geom_init),
		cmocka_unit_test(test_place),
		cmocka_unit_test(test_first_write),
		cmocka_unit_test(test_exact_fit_to_end),
		cmocka_unit_test(test_wrap_with_padding),
		cmocka_unit_test(test_exceed_linear),
		cmocka_unit_test(test_exceed_wrapped),
		cmocka_unit_test(test_full_ring),
		cmocka_unit_test(test_dhead_updates),
		cmocka_unit_test(test_watermark_0),
		cmocka_unit_test(test_watermark_quarter),
		cmocka_unit_test(test_watermark_one),
		cmocka_unit_test(test_watermark_invalid),
		cmocka_unit_test(test_hostile_offsets),
		cmocka_unit_test(test_input_validation),
		cmocka_unit_test(test_consume_batch),
		cmocka_unit_test(test_cursor_limit),
		cmocka_unit_test(test_check_detects),
		cmocka_unit_test(test_caller_bugs_abort),
		cmocka_unit_test(test_property),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
