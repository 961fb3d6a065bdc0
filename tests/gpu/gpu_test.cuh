/*
 * Shared by the GPU test programs: error checks, the skip rule (exit 77 with
 * the reason when no GPU is usable), and the kernels that write and check the
 * rgaps payload pattern (tools/lib/pattern.h) in device memory, so that a
 * subscriber verifies every byte of a message in place, where rgaps put it.
 * The kernels' words are checked against the C reference (gpu_util.c) by
 * `gpu-pub --selftest`.
 */
#ifndef RGAPS_TESTS_GPU_TEST_CUH
#define RGAPS_TESTS_GPU_TEST_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu_util.h"

#define GPU_SKIP 77
#define PATTERN_HDR 16u

#define CK(call)                                                                         \
	do {                                                                             \
		cudaError_t e_ = (call);                                                 \
		if (e_ != cudaSuccess) {                                                 \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,    \
				cudaGetErrorString(e_));                                 \
			exit(1);                                                         \
		}                                                                        \
	} while (0)

/* After a launch: the launch error now, the execution error at the next sync. */
#define CK_LAUNCH() CK(cudaGetLastError())

/*
 * Exit 77 (meson: skipped) with the reason when there is no GPU: no NVIDIA
 * driver, or a driver that sees no device. Any other CUDA error (a driver older
 * than the runtime, a failed initialisation...) is a broken machine or build,
 * not a missing GPU: exit 1, so that it fails the test instead of hiding in a skip.
 */
static inline void gpu_require(const char *prog)
{
	int n = 0, drv = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	cudaDriverGetVersion(&drv);
	if (drv == 0) {
		printf("SKIP %s: no NVIDIA driver on this machine\n", prog);
		exit(GPU_SKIP);
	}
	if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
		printf("SKIP %s: no GPU (the NVIDIA driver %d.%d sees no CUDA device)\n", prog,
		       drv / 1000, drv % 1000 / 10);
		exit(GPU_SKIP);
	}
	if (e != cudaSuccess) {
		fprintf(stderr, "FAIL %s: CUDA cannot count the devices: %s (%s); driver %d.%d\n",
			prog, cudaGetErrorName(e), cudaGetErrorString(e), drv / 1000,
			drv % 1000 / 10);
		exit(1);
	}
}

/* rgaps_pattern_word(), for host and device. */
__host__ __device__ static inline uint64_t pattern_word(uint64_t counter, uint64_t k)
{
	uint64_t z = counter * 0x9e3779b97f4a7c15ull + (k + 1) * 0xbf58476d1ce4e5b9ull;

	z ^= z >> 31;
	z *= 0x94d049bb133111ebull;
	return z ^ (z >> 29);
}

/* Grid for a pass over n 8-byte words: enough blocks to fill the GPU, no more. */
static inline unsigned pattern_blocks(uint64_t nwords)
{
	uint64_t b = (nwords + 255) / 256;

	return (unsigned)(b == 0 ? 1 : b > 4096 ? 4096 : b);
}

/* Write the pattern for counter into p[0, size): size >= 16, p 8-byte aligned. */
__global__ static void pattern_fill_kernel(uint8_t *p, uint64_t size, uint64_t counter)
{
	uint64_t nwords = (size - PATTERN_HDR) / 8, tail = (size - PATTERN_HDR) % 8;
	uint64_t *w = (uint64_t *)(p + PATTERN_HDR);
	uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;

	if (i == 0) {
		((uint64_t *)p)[0] = counter;
		((uint64_t *)p)[1] = size;
		if (tail) {
			uint64_t v = pattern_word(counter, nwords);

			for (uint64_t b = 0; b < tail; b++)
				p[PATTERN_HDR + nwords * 8 + b] = (uint8_t)(v >> (8 * b));
		}
	}
	for (uint64_t k = i; k < nwords; k += stride)
		w[k] = pattern_word(counter, k);
}

struct verify_result {
	unsigned long long bad;	      /* mismatched words (header, body and tail) */
	unsigned long long first_bad; /* byte offset of the first one, ~0 if none */
	unsigned long long counter;   /* the header's counter */
	unsigned long long hdr_size;  /* the header's size */
};

/* Check p[0, size) against the pattern for the counter in its own header. */
__global__ static void pattern_verify_kernel(const uint8_t *p, uint64_t size,
					     verify_result *r)
{
	uint64_t counter = ((const uint64_t *)p)[0];
	uint64_t nwords = (size - PATTERN_HDR) / 8, tail = (size - PATTERN_HDR) % 8;
	const uint64_t *w = (const uint64_t *)(p + PATTERN_HDR);
	uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	unsigned long long bad = 0;
	bool body_seen = false; /* this thread's first bad body word is reported (its lowest) */

	if (i == 0) {
		uint64_t hs = ((const uint64_t *)p)[1];

		r->counter = counter;
		r->hdr_size = hs;
		if (hs != size) {
			bad++;
			atomicMin(&r->first_bad, 8ull);
		}
		if (tail) {
			uint64_t v = pattern_word(counter, nwords);

			for (uint64_t b = 0; b < tail; b++) {
				if (p[PATTERN_HDR + nwords * 8 + b] != (uint8_t)(v >> (8 * b))) {
					bad++;
					atomicMin(&r->first_bad,
						  (unsigned long long)(PATTERN_HDR + nwords * 8));
					break;
				}
			}
		}
	}
	for (uint64_t k = i; k < nwords; k += stride) {
		if (w[k] != pattern_word(counter, k)) {
			/* (not "!bad": thread 0 may have counted a bad header or tail already) */
			if (!body_seen)
				atomicMin(&r->first_bad, (unsigned long long)(PATTERN_HDR + k * 8));
			body_seen = true;
			bad++;
		}
	}
	if (bad)
		atomicAdd(&r->bad, bad);
}

/*
 * Queue a verification of a device buffer on stream s; the verdict is in
 * *h_res (pinned host memory) once s has passed it. The initial value goes
 * through a kernel, not a copy from pageable memory, so nothing here makes
 * the host wait.
 */
__global__ static void verify_reset_kernel(verify_result *r)
{
	r->bad = 0;
	r->first_bad = ~0ull;
	r->counter = 0;
	r->hdr_size = 0;
}

static inline void pattern_verify_launch(const void *dptr, uint64_t size, verify_result *d_res,
					 verify_result *h_res, cudaStream_t s)
{
	uint64_t nwords = (size - PATTERN_HDR) / 8;

	verify_reset_kernel<<<1, 1, 0, s>>>(d_res);
	CK_LAUNCH();
	pattern_verify_kernel<<<pattern_blocks(nwords), 256, 0, s>>>((const uint8_t *)dptr, size,
								    d_res);
	CK_LAUNCH();
	CK(cudaMemcpyAsync(h_res, d_res, sizeof(*h_res), cudaMemcpyDeviceToHost, s));
}

/* Launch a verification of a device buffer on stream s and wait for the result. */
static inline void pattern_verify(const void *dptr, uint64_t size, verify_result *d_res,
				  verify_result *h_res, cudaStream_t s)
{
	pattern_verify_launch(dptr, size, d_res, h_res, s);
	CK(cudaStreamSynchronize(s));
}

static inline void pattern_fill(void *dptr, uint64_t size, uint64_t counter, cudaStream_t s)
{
	pattern_fill_kernel<<<pattern_blocks((size - PATTERN_HDR) / 8), 256, 0, s>>>(
		(uint8_t *)dptr, size, counter);
	CK_LAUNCH();
}

#endif
