/*
 * Unit tests of the offset-based TLSF allocator (src/common/tlsf.c). The pool is
 * never touched, only offsets, so pools of a TiB cost nothing. Besides the
 * directed cases, a seeded random stress keeps its own record of live ranges
 * and checks it against the allocator, so a bug that rgaps__tlsf_check() shares
 * with the allocator (both reading the same wrong state) is still caught.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tlsf.h"
#include "util.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define TiB (1ull << 40)
#define SENTINEL 0xdeadbeefu

static struct rgaps_tlsf *tlsf_new(uint64_t pool, uint32_t nblocks, uint32_t align)
{
	struct rgaps_tlsf *t = calloc(1, rgaps__tlsf_state_size(nblocks));

	assert_non_null(t);
	assert_int_equal(rgaps__tlsf_init(t, pool, nblocks, align), 0);
	return t;
}

static void assert_tlsf_ok(const struct rgaps_tlsf *t)
{
	char why[256] = "";
	int rc = rgaps__tlsf_check(t, why, sizeof(why));

	if (rc != 0)
		fail_msg("rgaps__tlsf_check: %d: %s", rc, why);
}

static struct rgaps_tlsf_stats stats_of(const struct rgaps_tlsf *t)
{
	struct rgaps_tlsf_stats st;

	rgaps__tlsf_get_stats(t, &st);
	return st;
}

/* The one free block covering the whole pool, and every other descriptor spare. */
static void assert_pristine(const struct rgaps_tlsf *t)
{
	struct rgaps_tlsf_stats st = stats_of(t);

	assert_tlsf_ok(t);
	assert_int_equal(st.used_bytes, 0);
	assert_int_equal(st.used_blocks, 0);
	assert_int_equal(st.free_bytes, t->pool_size);
	assert_int_equal(st.free_blocks, 1);
	assert_int_equal(st.largest_free, t->pool_size);
	assert_int_equal(st.spare_descriptors, t->nblocks - 1);
	assert_true(st.fragmentation == 0.0);
}

static uint32_t alloc_ok(struct rgaps_tlsf *t, uint64_t size)
{
	uint32_t id = SENTINEL;

	assert_int_equal(rgaps__tlsf_alloc(t, size, &id), 0);
	assert_true(rgaps__tlsf_is_used(t, id));
	return id;
}

static void alloc_fails(struct rgaps_tlsf *t, uint64_t size, int err)
{
	size_t sz = rgaps__tlsf_state_size(t->nblocks);
	struct rgaps_tlsf *before = malloc(sz);
	uint32_t id = SENTINEL;

	assert_non_null(before);
	memcpy(before, t, sz);
	assert_int_equal(rgaps__tlsf_alloc(t, size, &id), err);
	assert_int_equal(id, SENTINEL);
	/* A failed call must leave the shared state byte for byte as it was. */
	assert_memory_equal(before, t, sz);
	free(before);
}

static void test_state_size(void **state)
{
	size_t s2 = rgaps__tlsf_state_size(2), s3 = rgaps__tlsf_state_size(3);

	assert_true(s2 >= sizeof(struct rgaps_tlsf) + 2 * sizeof(struct rgaps_tlsf_block));
	assert_int_equal(s3 - s2, sizeof(struct rgaps_tlsf_block));
	assert_int_equal(rgaps__tlsf_state_size(1000) - rgaps__tlsf_state_size(0),
			 1000 * sizeof(struct rgaps_tlsf_block));
}

static void test_init_errors(void **state)
{
	struct rgaps_tlsf *t = calloc(1, rgaps__tlsf_state_size(16));

	assert_non_null(t);
	assert_int_equal(rgaps__tlsf_init(NULL, MiB, 16, 64), -EINVAL);
	assert_int_equal(rgaps__tlsf_init(t, MiB, 16, 0), -EINVAL);
	assert_int_equal(rgaps__tlsf_init(t, MiB, 16, 4), -EINVAL);  /* pow2 but < 8 */
	assert_int_equal(rgaps__tlsf_init(t, MiB, 16, 24), -EINVAL); /* not pow2 */
	assert_int_equal(rgaps__tlsf_init(t, MiB, 16, 65), -EINVAL);
	assert_int_equal(rgaps__tlsf_init(t, MiB, 16, UINT32_MAX), -EINVAL);
	assert_int_equal(rgaps__tlsf_init(t, MiB, 0, 64), -EINVAL);
	assert_int_equal(rgaps__tlsf_init(t, MiB, 1, 64), -EINVAL);
	assert_int_equal(rgaps__tlsf_init(t, 0, 16, 64), -EINVAL);
	assert_int_equal(rgaps__tlsf_init(t, 63, 16, 64), -EINVAL); /* pool smaller than align */
	/* Too many units for the class table (2^44 units). */
	assert_int_equal(rgaps__tlsf_init(t, 1ull << 47, 16, 8), -EINVAL);
	assert_int_equal(rgaps__tlsf_init(t, UINT64_MAX, 16, 8), -EINVAL);

	/* The smallest legal pool: one unit, two descriptors. */
	assert_int_equal(rgaps__tlsf_init(t, 64, 2, 64), 0);
	assert_pristine(t);
	free(t);
}

static void test_init_rounds_pool_down(void **state)
{
	struct rgaps_tlsf *t = tlsf_new(MiB + 255, 8, 256);

	assert_int_equal(t->pool_size, MiB);
	assert_int_equal(t->align_shift, 8);
	assert_pristine(t);
	free(t);
}

static void test_alloc_free_basic(void **state)
{
	struct rgaps_tlsf *t = tlsf_new(MiB, 16, 64);
	uint32_t a, b, c;
	struct rgaps_tlsf_stats st;

	a = alloc_ok(t, 1000);
	b = alloc_ok(t, 4096);
	c = alloc_ok(t, 64);
	assert_true(a != b && b != c && a != c);
	assert_int_equal(rgaps__tlsf_size(t, a), 1024);
	assert_int_equal(rgaps__tlsf_size(t, b), 4096);
	assert_int_equal(rgaps__tlsf_size(t, c), 64);
	/* From one free block, allocations are carved bottom-up. */
	assert_int_equal(rgaps__tlsf_offset(t, a), 0);
	assert_int_equal(rgaps__tlsf_offset(t, b), 1024);
	assert_int_equal(rgaps__tlsf_offset(t, c), 1024 + 4096);
	assert_tlsf_ok(t);

	st = stats_of(t);
	assert_int_equal(st.used_bytes, 1024 + 4096 + 64);
	assert_int_equal(st.used_blocks, 3);
	assert_int_equal(st.free_blocks, 1);
	assert_int_equal(st.free_bytes, MiB - st.used_bytes);
	assert_int_equal(st.spare_descriptors, 16 - 4);

	rgaps__tlsf_free(t, b);
	assert_false(rgaps__tlsf_is_used(t, b));
	assert_tlsf_ok(t);
	st = stats_of(t);
	assert_int_equal(st.used_blocks, 2);
	assert_int_equal(st.free_blocks, 2);

	/* The hole left by b is reused by a request that fits its class. */
	b = alloc_ok(t, 4096);
	assert_int_equal(rgaps__tlsf_offset(t, b), 1024);

	rgaps__tlsf_free(t, a);
	rgaps__tlsf_free(t, c);
	rgaps__tlsf_free(t, b);
	assert_pristine(t);
	free(t);
}

static void test_alignment_rounding(void **state)
{
	static const uint32_t aligns[] = { 8, 64, 256, 4096, 1u << 20, 1u << 31 };

	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(aligns); i++) {
		uint64_t al = aligns[i];
		uint64_t sizes[] = { 1, al - 1, al, al + 1, 3 * al - 1, 7 * al };
		struct rgaps_tlsf *t = tlsf_new(64 * al, 16, (uint32_t)al);
		uint64_t end = 0;

		for (size_t j = 0; j < RGAPS_ARRAY_SIZE(sizes); j++) {
			uint32_t id = alloc_ok(t, sizes[j]);
			uint64_t off = rgaps__tlsf_offset(t, id), sz = rgaps__tlsf_size(t, id);

			assert_int_equal(sz, RGAPS_ALIGN_UP(sizes[j], al));
			assert_int_equal(off % al, 0);
			assert_int_equal(off, end);
			end += sz;
		}
		assert_int_equal(stats_of(t).used_bytes, end);
		assert_tlsf_ok(t);
		free(t);
	}
}

static void test_alloc_bad_args(void **state)
{
	struct rgaps_tlsf *t = tlsf_new(MiB, 16, 64);
	uint32_t id = SENTINEL;

	alloc_fails(t, 0, -EINVAL);
	assert_int_equal(rgaps__tlsf_alloc(t, 64, NULL), -EINVAL);
	assert_int_equal(rgaps__tlsf_alloc(NULL, 64, &id), -EINVAL);
	assert_int_equal(id, SENTINEL);
	assert_pristine(t);
	free(t);
}

static void test_exact_fit_without_descriptor(void **state)
{
	/* Two descriptors: the first split takes the only spare. */
	struct rgaps_tlsf *t = tlsf_new(1024, 2, 64);
	uint32_t a, b;

	a = alloc_ok(t, 256);
	assert_int_equal(stats_of(t).spare_descriptors, 0);
	alloc_fails(t, 256, -ENOSPC);
	b = alloc_ok(t, 768);
	assert_int_equal(rgaps__tlsf_offset(t, b), 256);
	assert_int_equal(rgaps__tlsf_size(t, b), 768);
	assert_int_equal(stats_of(t).used_bytes, 1024);
	assert_int_equal(stats_of(t).free_blocks, 0);
	alloc_fails(t, 64, -ENOMEM);
	assert_tlsf_ok(t);

	/* A size that rounds up to the free block is an exact fit too. */
	rgaps__tlsf_free(t, b);
	b = alloc_ok(t, 720);
	assert_int_equal(rgaps__tlsf_size(t, b), 768);

	rgaps__tlsf_free(t, a);
	rgaps__tlsf_free(t, b);
	assert_pristine(t);
	free(t);
}

static void test_enospc_when_descriptors_run_out(void **state)
{
	struct rgaps_tlsf *t = tlsf_new(64 * KiB, 4, 64);
	uint32_t id[3], again;

	for (int i = 0; i < 3; i++)
		id[i] = alloc_ok(t, 64);
	assert_int_equal(stats_of(t).spare_descriptors, 0);
	alloc_fails(t, 64, -ENOSPC);
	alloc_fails(t, 4096, -ENOSPC);
	/* Too big for any block: -ENOMEM takes precedence over the missing descriptor. */
	alloc_fails(t, 64 * KiB, -ENOMEM);

	/* Freeing a block between two used ones merges nothing, so no spare comes back... */
	rgaps__tlsf_free(t, id[1]);
	assert_int_equal(stats_of(t).spare_descriptors, 0);
	alloc_fails(t, 4096, -ENOSPC);
	/* ...but its exact size needs no split. */
	again = alloc_ok(t, 64);
	assert_int_equal(again, id[1]);
	assert_int_equal(rgaps__tlsf_offset(t, again), 64);

	/* Freeing the top block merges it with the tail and returns a descriptor. */
	rgaps__tlsf_free(t, id[2]);
	assert_int_equal(stats_of(t).spare_descriptors, 1);
	id[2] = alloc_ok(t, 128);
	assert_int_equal(rgaps__tlsf_offset(t, id[2]), 128);
	assert_tlsf_ok(t);
	free(t);
}

static void test_enomem(void **state)
{
	struct rgaps_tlsf *t = tlsf_new(4096, 16, 64);
	uint32_t a, b;

	alloc_fails(t, 4097, -ENOMEM);
	alloc_fails(t, UINT64_MAX, -ENOMEM);
	alloc_fails(t, UINT64_MAX - 62, -ENOMEM); /* would wrap when rounded up */
	a = alloc_ok(t, 2048);
	alloc_fails(t, 2049, -ENOMEM);
	b = alloc_ok(t, 2048);
	alloc_fails(t, 1, -ENOMEM);
	rgaps__tlsf_free(t, a);
	alloc_fails(t, 2049, -ENOMEM);
	rgaps__tlsf_free(t, b);
	assert_pristine(t);
	free(t);
}

static void test_full_pool_alloc(void **state)
{
	/*
	 * 1000 units is not a class boundary: good-fit rounding alone would look
	 * one class above the only block and miss it.
	 */
	static const uint64_t pools[] = { 64, 64 * 31, 64 * 32, 64 * 1000, 64 * 1024, 64 * 1025,
					  TiB - 64 };

	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(pools); i++) {
		struct rgaps_tlsf *t = tlsf_new(pools[i], 4, 64);
		uint32_t id;

		id = alloc_ok(t, pools[i]);
		assert_int_equal(rgaps__tlsf_offset(t, id), 0);
		assert_int_equal(rgaps__tlsf_size(t, id), pools[i]);
		assert_int_equal(stats_of(t).used_bytes, pools[i]);
		assert_int_equal(stats_of(t).free_bytes, 0);
		assert_int_equal(stats_of(t).free_blocks, 0);
		assert_true(stats_of(t).fragmentation == 0.0);
		assert_int_equal(stats_of(t).spare_descriptors, 3);
		assert_tlsf_ok(t);
		alloc_fails(t, 1, -ENOMEM);
		rgaps__tlsf_free(t, id);
		assert_pristine(t);

		/* The last bytes after other allocations are reachable too. */
		if (pools[i] >= 64 * 4) {
			uint32_t a = alloc_ok(t, 64), b;

			b = alloc_ok(t, pools[i] - 64);
			assert_int_equal(rgaps__tlsf_offset(t, b), 64);
			rgaps__tlsf_free(t, a);
			rgaps__tlsf_free(t, b);
			assert_pristine(t);
		}
		free(t);
	}
}

static void test_coalesce_middle_then_neighbours(void **state)
{
	struct rgaps_tlsf *t = tlsf_new(3 * 4096, 8, 64);
	struct rgaps_tlsf_stats st;
	uint32_t a = alloc_ok(t, 4096), b = alloc_ok(t, 4096), c = alloc_ok(t, 4096);

	assert_int_equal(stats_of(t).free_blocks, 0);
	rgaps__tlsf_free(t, b);
	st = stats_of(t);
	assert_int_equal(st.free_blocks, 1);
	assert_int_equal(st.largest_free, 4096);
	assert_tlsf_ok(t);

	rgaps__tlsf_free(t, a); /* merges upward with b */
	st = stats_of(t);
	assert_int_equal(st.free_blocks, 1);
	assert_int_equal(st.largest_free, 2 * 4096);
	assert_tlsf_ok(t);

	rgaps__tlsf_free(t, c); /* merges downward with a+b */
	st = stats_of(t);
	assert_int_equal(st.free_blocks, 1);
	assert_int_equal(st.largest_free, st.pool_size);
	assert_pristine(t);
	free(t);
}

/* Number of maximal runs of set entries. */
static int runs(const int *freed, int n)
{
	int r = 0;

	for (int i = 0; i < n; i++)
		if (freed[i] && (i == 0 || !freed[i - 1]))
			r++;
	return r;
}

static void test_coalesce_every_order(void **state)
{
	enum { N = 5 };
	int perm[N], c[N] = { 0 }, i = 0, tried = 0;

	for (int k = 0; k < N; k++)
		perm[k] = k;
	/* Heap's algorithm: every order of freeing N physically adjacent blocks. */
	for (;;) {
		struct rgaps_tlsf *t = tlsf_new(N * 256, N + 1, 64);
		uint32_t id[N];
		int freed[N] = { 0 };

		for (int k = 0; k < N; k++)
			id[k] = alloc_ok(t, 256);
		for (int k = 0; k < N; k++) {
			freed[perm[k]] = 1;
			rgaps__tlsf_free(t, id[perm[k]]);
			assert_tlsf_ok(t);
			assert_int_equal(stats_of(t).free_blocks, runs(freed, N));
			assert_int_equal(stats_of(t).used_blocks, N - 1 - k);
		}
		assert_pristine(t);
		free(t);
		tried++;

		while (i < N && c[i] >= i) {
			c[i] = 0;
			i++;
		}
		if (i >= N)
			break;
		int j = (i % 2) ? c[i] : 0, tmp = perm[j];

		perm[j] = perm[i];
		perm[i] = tmp;
		c[i]++;
		i = 0;
	}
	assert_int_equal(tried, 120);
}

static void test_fragmentation_stat(void **state)
{
	struct rgaps_tlsf *t = tlsf_new(16 * 1024, 32, 64);
	struct rgaps_tlsf_stats st;
	uint32_t id[16];

	for (int i = 0; i < 16; i++)
		id[i] = alloc_ok(t, 1024);
	st = stats_of(t);
	assert_int_equal(st.free_bytes, 0);
	assert_true(st.fragmentation == 0.0);

	for (int i = 0; i < 16; i += 2)
		rgaps__tlsf_free(t, id[i]);
	assert_tlsf_ok(t);
	st = stats_of(t);
	assert_int_equal(st.free_blocks, 8);
	assert_int_equal(st.free_bytes, 8 * 1024);
	assert_int_equal(st.largest_free, 1024);
	assert_true(st.largest_free < st.free_bytes);
	assert_true(st.fragmentation > 0.0);
	assert_true(st.fragmentation > 0.875 - 1e-9 && st.fragmentation < 0.875 + 1e-9);
	/* Eight free KiB, yet no room for two contiguous KiB. */
	alloc_fails(t, 2048, -ENOMEM);

	for (int i = 1; i < 16; i += 2)
		rgaps__tlsf_free(t, id[i]);
	assert_pristine(t);
	free(t);
}

static void test_good_fit_and_fallback(void **state)
{
	/* align 8, so sizes below are in 8-byte units: A=65, B=1, C=200, D=the rest. */
	struct rgaps_tlsf *t = tlsf_new(8 * 1000, 8, 8);
	uint32_t a = alloc_ok(t, 8 * 65), b = alloc_ok(t, 8), c = alloc_ok(t, 8 * 200);
	uint32_t d = alloc_ok(t, 8 * (1000 - 266)), x, y, z;
	uint64_t c_off = rgaps__tlsf_offset(t, c);

	rgaps__tlsf_free(t, a);
	rgaps__tlsf_free(t, c);
	assert_int_equal(stats_of(t).free_blocks, 2);

	/*
	 * 65 units share a class with 64 and 65, so the search starts one class
	 * up and takes the 200-unit block rather than walking the 65-unit list.
	 */
	x = alloc_ok(t, 8 * 65);
	assert_int_equal(rgaps__tlsf_offset(t, x), c_off);
	y = alloc_ok(t, 8 * 135); /* exact fit of C's remainder */
	assert_int_equal(rgaps__tlsf_offset(t, y), c_off + 8 * 65);

	/* Nothing in a higher class is left: the fallback finds A in the request's class. */
	z = alloc_ok(t, 8 * 65);
	assert_int_equal(rgaps__tlsf_offset(t, z), 0);
	assert_int_equal(stats_of(t).free_bytes, 0);
	alloc_fails(t, 1, -ENOMEM);

	rgaps__tlsf_free(t, b);
	rgaps__tlsf_free(t, d);
	rgaps__tlsf_free(t, x);
	rgaps__tlsf_free(t, y);
	rgaps__tlsf_free(t, z);
	assert_pristine(t);
	free(t);
}

static void test_is_used_any_id(void **state)
{
	struct rgaps_tlsf *t = tlsf_new(MiB, 8, 64);
	uint32_t a = alloc_ok(t, 100), b = alloc_ok(t, 100);
	static const uint32_t junk[] = { 8, 9, 1000, UINT32_MAX - 1, RGAPS_TLSF_NIL };
	int used = 0;

	rgaps__tlsf_free(t, a);
	assert_false(rgaps__tlsf_is_used(t, a)); /* FREE: b keeps it from merging */
	assert_true(rgaps__tlsf_is_used(t, b));
	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(junk); i++)
		assert_false(rgaps__tlsf_is_used(t, junk[i]));
	for (uint32_t id = 0; id < t->nblocks; id++)
		used += rgaps__tlsf_is_used(t, id);
	assert_int_equal(used, 1);
	assert_false(rgaps__tlsf_is_used(NULL, 0));
	free(t);
}

static void test_large_pool(void **state)
{
	struct rgaps_tlsf *t = tlsf_new(TiB + 255, 64, 256);
	uint32_t a, b, c;

	assert_int_equal(t->pool_size, TiB);
	a = alloc_ok(t, 1);
	assert_int_equal(rgaps__tlsf_size(t, a), 256);
	b = alloc_ok(t, 512 * GiB);
	assert_int_equal(rgaps__tlsf_offset(t, b), 256);
	alloc_fails(t, 512 * GiB, -ENOMEM);
	c = alloc_ok(t, 512 * GiB - 256);
	assert_int_equal(rgaps__tlsf_offset(t, c), 512 * GiB + 256);
	assert_int_equal(stats_of(t).used_bytes, TiB);
	assert_tlsf_ok(t);

	rgaps__tlsf_free(t, b);
	assert_int_equal(stats_of(t).largest_free, 512 * GiB);
	rgaps__tlsf_free(t, a);
	rgaps__tlsf_free(t, c);
	assert_pristine(t);

	a = alloc_ok(t, TiB);
	alloc_fails(t, 256, -ENOMEM);
	rgaps__tlsf_free(t, a);
	alloc_fails(t, TiB + 1, -ENOMEM);
	assert_pristine(t);
	free(t);
}

static void test_largest_supported_pool(void **state)
{
	/* 2^44 - 1 units of 8 bytes is the top of the class table. */
	uint64_t max8 = ((1ull << 44) - 1) * 8;
	struct rgaps_tlsf *t = tlsf_new(max8, 8, 8);
	uint32_t a, b;

	a = alloc_ok(t, max8 / 2 + 1);
	b = alloc_ok(t, max8 - rgaps__tlsf_size(t, a));
	rgaps__tlsf_free(t, a);
	rgaps__tlsf_free(t, b);
	a = alloc_ok(t, max8);
	rgaps__tlsf_free(t, a);
	assert_pristine(t);
	assert_int_equal(rgaps__tlsf_init(t, max8 + 8, 8, 8), -EINVAL);

	/* With 2 GiB alignment the whole 64-bit range fits. */
	assert_int_equal(rgaps__tlsf_init(t, UINT64_MAX, 8, 1u << 31), 0);
	assert_int_equal(t->pool_size, UINT64_MAX & ~((1ull << 31) - 1));
	alloc_fails(t, UINT64_MAX, -ENOMEM);
	a = alloc_ok(t, t->pool_size);
	rgaps__tlsf_free(t, a);
	a = alloc_ok(t, 1);
	b = alloc_ok(t, t->pool_size - (1ull << 31));
	assert_int_equal(stats_of(t).free_bytes, 0);
	rgaps__tlsf_free(t, b);
	rgaps__tlsf_free(t, a);
	assert_pristine(t);
	free(t);
}

/* Expect the check to fail on a corrupted copy, naming `word` in its reason. */
static void expect_corrupt(const struct rgaps_tlsf *bad, const char *word)
{
	char why[256] = "";

	assert_int_equal(rgaps__tlsf_check(bad, why, sizeof(why)), -EUCLEAN);
	if (!strstr(why, word))
		fail_msg("reason \"%s\" does not mention \"%s\"", why, word);
	/* A NULL or tiny reason buffer is fine too. */
	assert_int_equal(rgaps__tlsf_check(bad, NULL, 0), -EUCLEAN);
	assert_int_equal(rgaps__tlsf_check(bad, why, 4), -EUCLEAN);
	assert_true(strlen(why) < 4);
}

static void test_check_detects_corruption(void **state)
{
	const uint32_t n = 16;
	size_t sz = rgaps__tlsf_state_size(n);
	struct rgaps_tlsf *t = tlsf_new(64 * KiB, n, 64), *bad = malloc(sz);
	uint32_t a = alloc_ok(t, 1024), b = alloc_ok(t, 2048), c = alloc_ok(t, 4096), tail;
	char why[64] = "untouched";

	/* Layout: [a used][b used][c used][tail free]. */
	assert_non_null(bad);
	tail = t->blocks[c].next_phys;
	assert_true(tail < n);
	assert_int_equal(rgaps__tlsf_check(t, why, sizeof(why)), 0);
	assert_string_equal(why, "untouched"); /* the reason is written only on failure */
	assert_int_equal(rgaps__tlsf_check(NULL, why, sizeof(why)), -EUCLEAN);

#define CORRUPT(stmt, word)            \
	do {                           \
		memcpy(bad, t, sz);    \
		stmt;                  \
		expect_corrupt(bad, word); \
	} while (0)

	CORRUPT(bad->magic ^= 1, "magic");
	CORRUPT(bad->used_bytes += 64, "used_bytes");
	CORRUPT(bad->used_blocks++, "used_blocks");
	CORRUPT(bad->free_blocks++, "free_blocks");
	CORRUPT(bad->blocks[b].state = 7, "state");
	CORRUPT(bad->blocks[b].off += 64, "offset");
	CORRUPT((bad->blocks[b].size -= 64, bad->used_bytes -= 64), "offset");
	CORRUPT(bad->blocks[tail].size += 64, "past the pool end");
	CORRUPT(bad->blocks[b].prev_phys = c, "prev_phys");
	CORRUPT(bad->blocks[tail].next_phys = a, "cycle");
	CORRUPT(bad->blocks[a].next_phys = n + 5, "out-of-range");
	CORRUPT(bad->sl_bitmap[0] |= 1u << 3, "bitmap");
	CORRUPT(bad->fl_bitmap |= 1u << 7, "first-level");
	CORRUPT(bad->fl_bitmap_hi |= 1ull << 40, "beyond");
	CORRUPT(bad->spare_head = a, "spare");
	CORRUPT(bad->blocks[bad->spare_head].next_free = bad->spare_head, "spare list");
	CORRUPT(bad->blocks[tail].prev_free = a, "prev_free");
	/* b turned FREE behind the allocator's back: first counters, then placement. */
	CORRUPT((bad->blocks[b].state = RGAPS_TLSF_FREE, bad->used_blocks--,
		 bad->free_blocks++, bad->used_bytes -= 2048),
		"free lists hold");
	/* c turned FREE and listed as head of its class: adjacent to the free tail. */
	CORRUPT(({
			unsigned int fl = 2, sl = 0; /* 64 units: first of class 2 */

			bad->blocks[c].state = RGAPS_TLSF_FREE;
			bad->blocks[c].prev_free = RGAPS_TLSF_NIL;
			bad->blocks[c].next_free = RGAPS_TLSF_NIL;
			bad->heads[fl][sl] = c;
			bad->sl_bitmap[fl] |= 1u << sl;
			bad->fl_bitmap |= 1u << fl;
			bad->used_blocks--;
			bad->free_blocks++;
			bad->used_bytes -= 4096;
		}),
		"not merged");
#undef CORRUPT

	free(bad);
	free(t);
}

static void test_free_unused_aborts(void **state)
{
	static const int kinds[] = { 0, 1, 2, 3 };

	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(kinds); i++) {
		struct rgaps_tlsf *t = tlsf_new(MiB, 8, 64);
		uint32_t a = alloc_ok(t, 64);
		int status;
		pid_t pid;

		fflush(NULL);
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			int fd = open("/dev/null", O_WRONLY);

			if (fd >= 0)
				dup2(fd, STDERR_FILENO);
			if (kinds[i] == 0) { /* double free */
				rgaps__tlsf_free(t, a);
				rgaps__tlsf_free(t, a);
			} else if (kinds[i] == 1) { /* the free tail */
				rgaps__tlsf_free(t, t->blocks[a].next_phys);
			} else if (kinds[i] == 2) { /* a spare descriptor */
				rgaps__tlsf_free(t, 7);
			} else { /* out of range */
				rgaps__tlsf_free(t, RGAPS_TLSF_NIL);
			}
			_exit(0);
		}
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFSIGNALED(status));
		assert_int_equal(WTERMSIG(status), SIGABRT);
		assert_tlsf_ok(t);
		free(t);
	}
}

/* xorshift64*: the same sequence on every libc, so a failing seed replays anywhere. */
static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

/* Uniform in [1, max], or log-uniform half the time so small blocks are common. */
static uint64_t rng_size(uint64_t *s, uint64_t max)
{
	uint64_t r = rng_next(s);

	if (r & 1)
		return 1 + rng_next(s) % max;
	uint64_t cap = 1ull << (rng_next(s) % (64 - __builtin_clzll(max)));

	return 1 + rng_next(s) % RGAPS_MIN(cap, max);
}

/*
 * Smallest block size that the good-fit search is sure to find: the request
 * rounded up to its class boundary. If a free block this big exists, alloc must
 * not return -ENOMEM.
 */
static uint64_t goodfit_bound(uint64_t size, unsigned int shift)
{
	uint64_t units = (size + (1ull << shift) - 1) >> shift, step;

	if (units < RGAPS_TLSF_SL_COUNT)
		return units << shift;
	step = 1ull << (63 - __builtin_clzll(units) - RGAPS_TLSF_SL_LOG2);
	return RGAPS_ALIGN_UP(units, step) << shift;
}

struct live {
	uint32_t id;
	uint64_t off, size;
};

static int live_cmp(const void *x, const void *y)
{
	const struct live *a = x, *b = y;

	return (a->off > b->off) - (a->off < b->off);
}

static uint64_t largest_free_by_scan(const struct rgaps_tlsf *t)
{
	uint64_t m = 0;

	for (uint32_t id = 0; id < t->nblocks; id++)
		if (t->blocks[id].state == RGAPS_TLSF_FREE)
			m = RGAPS_MAX(m, t->blocks[id].size);
	return m;
}

/* Stats against the test's own record of the live blocks. */
static void assert_stats_match(const struct rgaps_tlsf *t, const struct live *lv, size_t n)
{
	struct rgaps_tlsf_stats st = stats_of(t);
	uint64_t sum = 0;

	for (size_t i = 0; i < n; i++)
		sum += lv[i].size;
	assert_int_equal(st.pool_size, t->pool_size);
	assert_int_equal(st.used_bytes, sum);
	assert_int_equal(st.used_bytes + st.free_bytes, st.pool_size);
	assert_int_equal(st.used_blocks, n);
	assert_int_equal(st.used_blocks + st.free_blocks + st.spare_descriptors, t->nblocks);
	assert_int_equal(st.largest_free, largest_free_by_scan(t));
	assert_true(st.largest_free <= st.free_bytes);
	assert_true(st.free_blocks <= st.used_blocks + 1); /* free blocks never touch */
	assert_true((st.free_blocks == 0) == (st.free_bytes == 0));
	assert_true(st.fragmentation >= 0.0 && st.fragmentation < 1.0);
	if (st.free_blocks == 1)
		assert_true(st.fragmentation == 0.0);
}

/* Sort a copy of the live set by offset; no two may overlap, all inside the pool. */
static void assert_live_disjoint(const struct rgaps_tlsf *t, const struct live *lv, size_t n)
{
	struct live *s = malloc((n + 1) * sizeof(*s));

	assert_non_null(s);
	memcpy(s, lv, n * sizeof(*s));
	qsort(s, n, sizeof(*s), live_cmp);
	for (size_t i = 0; i < n; i++) {
		assert_true(s[i].size > 0 && s[i].size <= t->pool_size - s[i].off);
		if (i)
			assert_true(s[i - 1].off + s[i - 1].size <= s[i].off);
		assert_int_equal(rgaps__tlsf_offset(t, s[i].id), s[i].off);
		assert_int_equal(rgaps__tlsf_size(t, s[i].id), s[i].size);
	}
	free(s);
}

struct stress_cfg {
	uint64_t pool;
	uint32_t nblocks, align;
	uint64_t seed;
	unsigned int ops, check_every;
};

static void run_stress(const struct stress_cfg *cfg)
{
	struct rgaps_tlsf *t = tlsf_new(cfg->pool, cfg->nblocks, cfg->align);
	struct live *lv = calloc(cfg->nblocks, sizeof(*lv));
	uint8_t *is_live = calloc(cfg->nblocks, 1);
	uint64_t s = cfg->seed, pool = t->pool_size, maxsz = RGAPS_MAX(pool / 8, 1);
	unsigned int shift = t->align_shift, n_ok = 0, n_nomem = 0, n_nospc = 0, n_free = 0;
	size_t n = 0;

	assert_non_null(lv);
	assert_non_null(is_live);
	for (unsigned int op = 1; op <= cfg->ops; op++) {
		/* Lean towards alloc so the pool stays under pressure and both errors occur. */
		if (n == 0 || rng_next(&s) % 100 < 55) {
			uint64_t req = rng_size(&s, maxsz), sz, off;
			uint32_t id = SENTINEL;
			int rc = rgaps__tlsf_alloc(t, req, &id);

			if (rc == -ENOMEM) {
				assert_int_equal(id, SENTINEL);
				assert_true(largest_free_by_scan(t) < goodfit_bound(req, shift));
				n_nomem++;
				continue;
			}
			if (rc == -ENOSPC) {
				assert_int_equal(id, SENTINEL);
				assert_int_equal(stats_of(t).spare_descriptors, 0);
				n_nospc++;
				continue;
			}
			assert_int_equal(rc, 0);
			assert_true(id < cfg->nblocks);
			assert_false(is_live[id]);
			off = rgaps__tlsf_offset(t, id);
			sz = rgaps__tlsf_size(t, id);
			assert_int_equal(sz, RGAPS_ALIGN_UP(req, (uint64_t)cfg->align));
			assert_int_equal(off & (cfg->align - 1), 0);
			assert_true(off < pool && sz <= pool - off);
			for (size_t i = 0; i < n; i++)
				assert_true(off + sz <= lv[i].off || lv[i].off + lv[i].size <= off);
			lv[n++] = (struct live){ .id = id, .off = off, .size = sz };
			is_live[id] = 1;
			n_ok++;
		} else {
			size_t i = rng_next(&s) % n;

			rgaps__tlsf_free(t, lv[i].id);
			assert_false(rgaps__tlsf_is_used(t, lv[i].id));
			is_live[lv[i].id] = 0;
			lv[i] = lv[--n];
			n_free++;
		}
		if (op % cfg->check_every == 0) {
			assert_tlsf_ok(t);
			assert_stats_match(t, lv, n);
			assert_live_disjoint(t, lv, n);
		}
	}
	assert_tlsf_ok(t);
	assert_stats_match(t, lv, n);
	assert_live_disjoint(t, lv, n);
	/* Each outcome must actually have been exercised, or the run proves little. */
	assert_true(n_ok > cfg->ops / 4);
	assert_true(n_free > cfg->ops / 4);
	assert_true(n_nomem > 0);
	print_message("seed %#llx: %u allocs, %u frees, %u ENOMEM, %u ENOSPC, %zu live\n",
		      (unsigned long long)cfg->seed, n_ok, n_free, n_nomem, n_nospc, n);

	while (n) {
		size_t i = rng_next(&s) % n;

		rgaps__tlsf_free(t, lv[i].id);
		lv[i] = lv[--n];
		if (n % 16 == 0)
			assert_tlsf_ok(t);
	}
	assert_pristine(t);
	free(is_live);
	free(lv);
	free(t);
}

static void test_stress_random(void **state)
{
	static const struct stress_cfg cfgs[] = {
		{ 64 * MiB, 1024, 64, 0x9e3779b97f4a7c15ull, 200000, 1000 },
		{ 64 * MiB, 1024, 64, 0x0123456789abcdefull, 200000, 1000 },
		{ TiB, 4096, 256, 0xfeedfacecafebeefull, 200000, 1000 },
		/* Few descriptors and an odd pool: -ENOSPC happens often. */
		{ 10 * MiB + 13, 48, 8, 0x5eed5eed5eed5eedull, 200000, 500 },
	};

	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(cfgs); i++)
		run_stress(&cfgs[i]);
}

static void test_stats_consistency(void **state)
{
	struct rgaps_tlsf *t = tlsf_new(4 * MiB + 4096, 256, 512);
	struct live lv[256] = { { 0 } };
	uint64_t s = 42;
	size_t n = 0;

	assert_stats_match(t, lv, 0);
	for (int op = 0; op < 20000; op++) {
		if (n == 0 || (n < RGAPS_ARRAY_SIZE(lv) && rng_next(&s) % 2)) {
			uint32_t id;

			if (rgaps__tlsf_alloc(t, rng_size(&s, t->pool_size / 8), &id) == 0)
				lv[n++] = (struct live){ .id = id,
							 .off = rgaps__tlsf_offset(t, id),
							 .size = rgaps__tlsf_size(t, id) };
		} else {
			size_t i = rng_next(&s) % n;

			rgaps__tlsf_free(t, lv[i].id);
			lv[i] = lv[--n];
		}
		/* Every operation, not every N: stats are O(1)-ish and must never drift. */
		assert_stats_match(t, lv, n);
	}
	assert_tlsf_ok(t);
	free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_state_size),
		cmocka_unit_test(test_init_errors),
		cmocka_unit_test(test_init_rounds_pool_down),
		cmocka_unit_test(test_alloc_free_basic),
		cmocka_unit_test(test_alignment_rounding),
		cmocka_unit_test(test_alloc_bad_args),
		cmocka_unit_test(test_exact_fit_without_descriptor),
		cmocka_unit_test(test_enospc_when_descriptors_run_out),
		cmocka_unit_test(test_enomem),
		cmocka_unit_test(test_full_pool_alloc),
		cmocka_unit_test(test_coalesce_middle_then_neighbours),
		cmocka_unit_test(test_coalesce_every_order),
		cmocka_unit_test(test_fragmentation_stat),
		cmocka_unit_test(test_good_fit_and_fallback),
		cmocka_unit_test(test_is_used_any_id),
		cmocka_unit_test(test_large_pool),
		cmocka_unit_test(test_largest_supported_pool),
		cmocka_unit_test(test_check_detects_corruption),
		cmocka_unit_test(test_free_unused_aborts),
		cmocka_unit_test(test_stress_random),
		cmocka_unit_test(test_stats_consistency),
	};

	return cmocka_run_group_tests_name("tlsf", tests, NULL, NULL);
}
