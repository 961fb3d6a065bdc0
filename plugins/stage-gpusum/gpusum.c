/*
 * The gpusum checksum on the CPU (gpusum.h has its definition): the sender's
 * per-chunk sums and the receiver's check of host-memory topics. Shared with
 * the unit test (tests/unit/test_stage_gpusum.c).
 */
#include <endian.h>
#include <string.h>

#include "gpusum.h"

uint64_t gpusum_cpu(const void *p, uint64_t n, uint64_t off)
{
	const uint8_t *b = p;
	uint64_t s = 0, k;

	/* Bytes up to the next word boundary of the message. */
	for (; n && (off & 3); b++, n--, off++)
		s += ((uint64_t)*b << (8 * (off & 3))) * ((off >> 2) + 1);
	/* Whole words, four at a time: sum_j w_j (k + j + 1) = (k + 1) sum_j w_j + w_1 + 2 w_2 + 3 w_3. */
	k = off >> 2;
	for (; n >= 16; b += 16, n -= 16, k += 4) {
		uint32_t w[4];

		memcpy(w, b, 16);
		w[0] = le32toh(w[0]), w[1] = le32toh(w[1]), w[2] = le32toh(w[2]), w[3] = le32toh(w[3]);
		s += ((uint64_t)w[0] + w[1] + w[2] + w[3]) * (k + 1) + w[1] + 2 * (uint64_t)w[2] +
		     3 * (uint64_t)w[3];
	}
	for (; n >= 4; b += 4, n -= 4, k++) {
		uint32_t w;

		memcpy(&w, b, 4);
		s += (uint64_t)le32toh(w) * (k + 1);
	}
	/* The message's (or this piece's) last bytes: a part of word k. */
	for (uint64_t j = 0; j < n; j++)
		s += ((uint64_t)b[j] << (8 * j)) * (k + 1);
	return s;
}
