/*
 * The gpusum checksum (plugins/stage-gpusum, docs/GPU.md "The gpusum stage"):
 * a message of n bytes read as little-endian 32-bit words w_0 .. w_{m-1}
 * (m = ceil(n / 4), the last word's missing bytes taken as zero) sums to
 *
 *     S = sum over i of w_i * (i + 1)   (mod 2^64)
 *
 * with i the word's index in the whole message. Written per byte: byte b at
 * offset j of the message adds b * 2^(8 (j mod 4)) * (floor(j / 4) + 1), so
 * the sums of any cut of a message into pieces (at any byte offset) add up to
 * the sum of the whole, and the same bytes at another offset sum differently.
 * A change confined to one 32-bit word of a message under 16 GiB always
 * changes S (the difference, d * (i + 1) with 0 < |d| < 2^32 and
 * i + 1 <= 2^32, is never a multiple of 2^64); two swapped pieces change it
 * unless their plain sums are equal mod 2^64 / (their distance). It is a
 * check against corruption and misplacement, not against an adversary.
 */
#ifndef RGAPS_GPUSUM_H
#define RGAPS_GPUSUM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUSUM_HIDDEN __attribute__((visibility("hidden")))

/** The part of S that the n bytes at p contribute, p being at byte offset off of its message. */
GPUSUM_HIDDEN uint64_t gpusum_cpu(const void *p, uint64_t n, uint64_t off);

/*
 * The same over device memory, computed by a kernel on the GPU that holds it
 * (gpusum_cuda.cu). 0 and *sum_p, or -1 with why filled in (the CUDA call
 * and its error string). Thread-safe; each call waits for its own result.
 */
GPUSUM_HIDDEN int gpusum_device(const void *p, uint64_t n, uint64_t off, uint64_t *sum_p,
				int *device_p, char *why, size_t whylen);

/** Frees the streams and buffers gpusum_device created (no call may be running). */
GPUSUM_HIDDEN void gpusum_device_fini(void);

#ifdef __cplusplus
}
#endif

#endif
