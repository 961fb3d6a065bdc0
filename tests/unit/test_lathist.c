/*
 * Latency histogram (src/common/lathist.h): every value falls in the bucket
 * whose bounds hold it, buckets tile the range without gaps or overlaps, a
 * bucket is at most 1/8 of its lower bound wide, and quantiles of known
 * distributions come out within that resolution.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lathist.h"

static void test_buckets_tile_the_range(void **state)
{
	uint64_t next = 0;

	(void)state;
	for (uint32_t b = 0; b < RGAPS_LAT_BUCKETS; b++) {
		uint64_t lo = rgaps_lat_bucket_low(b), w = rgaps_lat_bucket_width(b);

		assert_int_equal(lo, next); /* no gap, no overlap */
		assert_int_equal(rgaps_lat_bucket(lo), b);
		if (b + 1 < RGAPS_LAT_BUCKETS)
			assert_int_equal(rgaps_lat_bucket(lo + w - 1), b);
		if (lo >= RGAPS_LAT_SUBS)
			assert_true(w * RGAPS_LAT_SUBS <= lo); /* at most 1/8 of the value */
		next = lo + w;
	}
	/* Everything past the last bound shares the last bucket. */
	assert_int_equal(rgaps_lat_bucket(UINT64_MAX), RGAPS_LAT_BUCKETS - 1);
	assert_int_equal(rgaps_lat_bucket((uint64_t)1 << 50), RGAPS_LAT_BUCKETS - 1);
}

static void test_random_values_land_in_bounds(void **state)
{
	uint64_t x = 88172645463325252ull;

	(void)state;
	for (int i = 0; i < 1000000; i++) {
		uint64_t v, lo;
		uint32_t b;

		x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
		v = x >> (x % 64);			 /* all magnitudes */
		b = rgaps_lat_bucket(v);
		lo = rgaps_lat_bucket_low(b);
		assert_true(b < RGAPS_LAT_BUCKETS);
		assert_true(v >= lo);
		if (b + 1 < RGAPS_LAT_BUCKETS)
			assert_true(v < lo + rgaps_lat_bucket_width(b));
	}
}

static void test_quantiles(void **state)
{
	struct rgaps_lathist *h = calloc(1, sizeof(*h)), snap;

	(void)state;
	assert_non_null(h);
	assert_int_equal(rgaps_lathist_quantile(h, 0.5), 0); /* empty */
	/* 1..100000 ns, once each: p50 = 50000, p99 = 99000, p999 = 99900, max = 100000. */
	for (uint64_t v = 1; v <= 100000; v++)
		rgaps_lathist_add(h, v);
	memset(&snap, 0, sizeof(snap));
	rgaps_lathist_sum(&snap, h);
	assert_int_equal(snap.count, 100000);
	{
		static const struct {
			double q;
			double want;
		} cases[] = { { 0.5, 50000 }, { 0.99, 99000 }, { 0.999, 99900 }, { 1.0, 100000 },
			      { 0.00001, 1 } };

		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			double got = (double)rgaps_lathist_quantile(&snap, cases[i].q);

			if (got < cases[i].want * (1 - 1.0 / 16) - 1 ||
			    got > cases[i].want * (1 + 1.0 / 16) + 1)
				fail_msg("q %g: %g, want %g within 1/16", cases[i].q, got,
					 cases[i].want);
		}
	}
	/* Small values are exact. */
	rgaps_lathist_clear(h);
	for (int i = 0; i < 10; i++)
		rgaps_lathist_add(h, 3);
	rgaps_lathist_add(h, 7);
	memset(&snap, 0, sizeof(snap));
	rgaps_lathist_sum(&snap, h);
	assert_int_equal(rgaps_lathist_quantile(&snap, 0.5), 3);
	assert_int_equal(rgaps_lathist_quantile(&snap, 1.0), 7);
	/* Sums add. */
	rgaps_lathist_sum(&snap, h);
	assert_int_equal(snap.count, 22);
	free(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buckets_tile_the_range),
		cmocka_unit_test(test_random_values_land_in_bounds),
		cmocka_unit_test(test_quantiles),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
