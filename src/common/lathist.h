/*
 * Latency histograms in shared memory: log-linear buckets of nanoseconds.
 *
 * A value v < 8 has its own bucket; above, each power of two is cut into 8
 * equal sub-buckets, so a bucket is at most 1/8 of its lower bound wide and a
 * percentile read from it (the bucket's midpoint) is within 6.25% of the
 * truth. Values of 2^44 ns (4.9 hours) and more share the last bucket.
 *
 * Writers add with relaxed atomics and no lock: one subscriber writes its own
 * slot's histogram and the topic's, readers (rgapsd's stats) sum snapshots
 * that may be a few counts apart, which is all statistics need. The counts
 * are not journaled: a process killed while adding loses at most that one.
 */
#ifndef RGAPS_COMMON_LATHIST_H
#define RGAPS_COMMON_LATHIST_H

#include <stdint.h>

#define RGAPS_LAT_SUB_BITS 3
#define RGAPS_LAT_SUBS (1u << RGAPS_LAT_SUB_BITS)
#define RGAPS_LAT_MAX_BIT 44
#define RGAPS_LAT_BUCKETS ((RGAPS_LAT_MAX_BIT - RGAPS_LAT_SUB_BITS + 1) * RGAPS_LAT_SUBS)

struct rgaps_lathist {
	uint64_t count;
	uint64_t skewed; /* timestamps from the future (another host's clock): counted as 0 */
	uint64_t bucket[RGAPS_LAT_BUCKETS];
};

/* The bucket of v nanoseconds. */
static inline uint32_t rgaps_lat_bucket(uint64_t v)
{
	uint32_t msb, idx;

	if (v < RGAPS_LAT_SUBS)
		return (uint32_t)v;
	msb = 63u - (uint32_t)__builtin_clzll(v);
	if (msb >= RGAPS_LAT_MAX_BIT)
		return RGAPS_LAT_BUCKETS - 1;
	idx = (msb - RGAPS_LAT_SUB_BITS + 1) * RGAPS_LAT_SUBS +
	      (uint32_t)((v >> (msb - RGAPS_LAT_SUB_BITS)) & (RGAPS_LAT_SUBS - 1));
	return idx;
}

/* The smallest value in bucket b. */
static inline uint64_t rgaps_lat_bucket_low(uint32_t b)
{
	uint32_t row = b / RGAPS_LAT_SUBS, sub = b % RGAPS_LAT_SUBS;

	if (row == 0)
		return b;
	return (uint64_t)(RGAPS_LAT_SUBS + sub) << (row - 1);
}

/* Bucket b's width (1 for the exact ones). */
static inline uint64_t rgaps_lat_bucket_width(uint32_t b)
{
	uint32_t row = b / RGAPS_LAT_SUBS;

	return row == 0 ? 1 : (uint64_t)1 << (row - 1);
}

/* Add one value (relaxed atomics: see above). */
static inline void rgaps_lathist_add(struct rgaps_lathist *h, uint64_t v)
{
	__atomic_fetch_add(&h->bucket[rgaps_lat_bucket(v)], 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&h->count, 1, __ATOMIC_RELAXED);
}

/* Zero it (a slot taken by a new subscriber). */
static inline void rgaps_lathist_clear(struct rgaps_lathist *h)
{
	__atomic_store_n(&h->count, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&h->skewed, 0, __ATOMIC_RELAXED);
	for (uint32_t b = 0; b < RGAPS_LAT_BUCKETS; b++)
		__atomic_store_n(&h->bucket[b], 0, __ATOMIC_RELAXED);
}

/* dst += a snapshot of src. */
static inline void rgaps_lathist_sum(struct rgaps_lathist *dst, const struct rgaps_lathist *src)
{
	uint64_t n = 0;

	for (uint32_t b = 0; b < RGAPS_LAT_BUCKETS; b++) {
		uint64_t c = __atomic_load_n(&src->bucket[b], __ATOMIC_RELAXED);

		dst->bucket[b] += c;
		n += c; /* count from the buckets read, so percentiles stay consistent */
	}
	dst->count += n;
	dst->skewed += __atomic_load_n(&src->skewed, __ATOMIC_RELAXED);
}

/*
 * The value at quantile q (0 < q <= 1) of a snapshot (as rgaps_lathist_sum
 * leaves it): the midpoint of the bucket holding the ceil(q * count)-th
 * value, exact below 8 ns. 0 when empty.
 */
static inline uint64_t rgaps_lathist_quantile(const struct rgaps_lathist *h, double q)
{
	uint64_t rank, seen = 0;

	if (!h->count)
		return 0;
	rank = (uint64_t)(q * (double)h->count);
	if ((double)rank < q * (double)h->count)
		rank++;
	if (rank == 0)
		rank = 1;
	for (uint32_t b = 0; b < RGAPS_LAT_BUCKETS; b++) {
		seen += h->bucket[b];
		if (seen >= rank)
			return rgaps_lat_bucket_low(b) + rgaps_lat_bucket_width(b) / 2;
	}
	return rgaps_lat_bucket_low(RGAPS_LAT_BUCKETS - 1);
}

#endif
