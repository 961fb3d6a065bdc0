/*
 * The gpusum checksum on the GPU (gpusum.h has its definition): the
 * receiver's check of a whole message in a device pool, where reading it
 * back to the host would cost a copy of the message.
 *
 * One kernel reads the message with 16-byte loads in a grid-stride loop (four
 * loads in flight per thread), each thread sums its words weighted by their
 * index, a block reduces its threads' sums through warp shuffles and adds one
 * 64-bit value into the result with atomicAdd (addition mod 2^64 commutes:
 * the result does not depend on the order). The few bytes before the first
 * 16-byte boundary and after the last one, or a whole message whose address
 * and offset disagree on word alignment, go through a byte kernel. Each call
 * takes a slot (a non-blocking stream and an 8-byte result buffer on the
 * message's GPU) from a small pool, so that the stage workers' calls run at
 * once on their own streams; slots are made on first use and freed at fini.
 * Every CUDA call is checked; an error is returned with the call's name and
 * CUDA's string, and cleared where CUDA lets it be.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "gpusum.h"

#define THREADS 256
#define BLOCKS_PER_SM 8
#define UNROLL 4

typedef unsigned long long u64;

/* sum_j w_j (k + j + 1) over the four words of x, the first of them word k of the message. */
__device__ __forceinline__ u64 vec_sum(uint4 x, u64 k)
{
	return ((u64)x.x + x.y + x.z + x.w) * (k + 1) + x.y + 2 * (u64)x.z + 3 * (u64)x.w;
}

/* The block's threads' sums, added once into *out (thread 0). */
__device__ __forceinline__ void block_add(u64 acc, u64 *out)
{
	__shared__ u64 warp_sums[THREADS / 32];
	unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

	for (int d = 16; d > 0; d >>= 1)
		acc += __shfl_down_sync(0xffffffffu, acc, d);
	if (lane == 0)
		warp_sums[warp] = acc;
	__syncthreads();
	if (warp == 0) {
		acc = lane < blockDim.x / 32 ? warp_sums[lane] : 0;
		for (int d = 16; d > 0; d >>= 1)
			acc += __shfl_down_sync(0xffffffffu, acc, d);
		if (lane == 0 && acc)
			atomicAdd(out, acc);
	}
}

/* nvec 16-byte vectors at v (16-byte aligned), v[0] starting with word k0 of the message. */
__global__ void __launch_bounds__(THREADS) sum_vectors(const uint4 *__restrict__ v, u64 nvec,
						       u64 k0, u64 *out)
{
	u64 stride = (u64)gridDim.x * blockDim.x, i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
	u64 acc = 0;

	for (; i + (UNROLL - 1) * stride < nvec; i += UNROLL * stride) {
		uint4 x[UNROLL];

#pragma unroll
		for (int u = 0; u < UNROLL; u++)
			x[u] = __ldg(&v[i + u * stride]);
#pragma unroll
		for (int u = 0; u < UNROLL; u++)
			acc += vec_sum(x[u], k0 + 4 * (i + u * stride));
	}
	for (; i < nvec; i += stride)
		acc += vec_sum(__ldg(&v[i]), k0 + 4 * i);
	block_add(acc, out);
}

/* n bytes at p, p[0] being byte off of the message. */
__global__ void __launch_bounds__(THREADS) sum_bytes(const unsigned char *__restrict__ p, u64 n,
						     u64 off, u64 *out)
{
	u64 stride = (u64)gridDim.x * blockDim.x, i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
	u64 acc = 0;

	for (; i < n; i += stride) {
		u64 j = off + i;

		acc += ((u64)p[i] << (8 * (j & 3))) * ((j >> 2) + 1);
	}
	block_add(acc, out);
}

struct slot {
	int device, sms;
	bool busy;
	cudaStream_t stream;
	u64 *d_sum;
	struct slot *next;
};

static pthread_mutex_t slots_mu = PTHREAD_MUTEX_INITIALIZER;
static struct slot *slots;

#define CK(call)                                                                                 \
	do {                                                                                     \
		cudaError_t e_ = (call);                                                         \
		if (e_ != cudaSuccess) {                                                         \
			snprintf(why, whylen, "gpusum: %s: %s", #call, cudaGetErrorString(e_));  \
			(void)cudaGetLastError(); /* clear it where it is not sticky */          \
			goto out;                                                                \
		}                                                                                \
	} while (0)

/* A free slot on device (the caller's current device), made if none is free. */
static struct slot *slot_take(int device, char *why, size_t whylen)
{
	struct slot *s;

	pthread_mutex_lock(&slots_mu);
	for (s = slots; s; s = s->next)
		if (!s->busy && s->device == device)
			break;
	if (s)
		s->busy = true;
	pthread_mutex_unlock(&slots_mu);
	if (s)
		return s;

	s = (struct slot *)calloc(1, sizeof(*s));
	if (!s) {
		snprintf(why, whylen, "gpusum: out of memory");
		return NULL;
	}
	s->device = device;
	s->busy = true;
	CK(cudaDeviceGetAttribute(&s->sms, cudaDevAttrMultiProcessorCount, device));
	CK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
	CK(cudaMalloc((void **)&s->d_sum, sizeof(u64)));
	pthread_mutex_lock(&slots_mu);
	s->next = slots;
	slots = s;
	pthread_mutex_unlock(&slots_mu);
	return s;
out:
	if (s->stream)
		cudaStreamDestroy(s->stream);
	free(s);
	return NULL;
}

static void slot_give(struct slot *s)
{
	pthread_mutex_lock(&slots_mu);
	s->busy = false;
	pthread_mutex_unlock(&slots_mu);
}

/* Queue the sum of n bytes at p (byte off of the message) on s: a 1-block byte kernel or a grid. */
static cudaError_t launch_bytes(struct slot *s, const unsigned char *p, u64 n, u64 off)
{
	u64 blocks = (n + THREADS - 1) / THREADS, max = (u64)s->sms * BLOCKS_PER_SM;

	if (!n)
		return cudaSuccess;
	sum_bytes<<<(unsigned)(blocks < max ? blocks : max), THREADS, 0, s->stream>>>(p, n, off,
										s->d_sum);
	return cudaGetLastError();
}

extern "C" int gpusum_device(const void *p, uint64_t n, uint64_t off, uint64_t *sum_p,
			     int *device_p, char *why, size_t whylen)
{
	const unsigned char *b = (const unsigned char *)p;
	struct cudaPointerAttributes attr;
	struct slot *s = NULL;
	int prev = -1, rc = -1;
	u64 head, nvec, sum = 0;

	*device_p = -1;
	if (!n) {
		*sum_p = 0;
		return 0;
	}
	CK(cudaPointerGetAttributes(&attr, p));
	if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
		snprintf(why, whylen, "gpusum: %p is not device memory (CUDA memory type %d)", p,
			 (int)attr.type);
		goto out;
	}
	*device_p = attr.device;
	CK(cudaGetDevice(&prev));
	CK(cudaSetDevice(attr.device));
	s = slot_take(attr.device, why, whylen);
	if (!s)
		goto out;
	CK(cudaMemsetAsync(s->d_sum, 0, sizeof(u64), s->stream));
	/* Vectors only where a 16-byte boundary of memory is a word boundary of the message. */
	head = (16 - ((uintptr_t)b & 15)) & 15;
	if (head > n || ((off + head) & 3)) {
		CK(launch_bytes(s, b, n, off));
	} else {
		nvec = (n - head) / 16;
		CK(launch_bytes(s, b, head, off));
		if (nvec) {
			u64 blocks = (nvec + THREADS - 1) / THREADS;
			u64 max = (u64)s->sms * BLOCKS_PER_SM;

			sum_vectors<<<(unsigned)(blocks < max ? blocks : max), THREADS, 0, s->stream>>>(
				(const uint4 *)(b + head), nvec, (off + head) / 4, s->d_sum);
			CK(cudaGetLastError());
		}
		CK(launch_bytes(s, b + head + 16 * nvec, n - head - 16 * nvec,
				off + head + 16 * nvec));
	}
	CK(cudaMemcpyAsync(&sum, s->d_sum, sizeof(u64), cudaMemcpyDeviceToHost, s->stream));
	CK(cudaStreamSynchronize(s->stream));
	*sum_p = sum;
	rc = 0;
out:
	if (s) {
		if (rc) /* nothing of this call may still run when the slot is reused */
			(void)cudaStreamSynchronize(s->stream);
		slot_give(s);
	}
	if (prev >= 0 && prev != *device_p)
		(void)cudaSetDevice(prev);
	return rc;
}

extern "C" void gpusum_device_fini(void)
{
	struct slot *s;

	pthread_mutex_lock(&slots_mu);
	while ((s = slots)) {
		slots = s->next;
		if (cudaSetDevice(s->device) == cudaSuccess) {
			cudaStreamDestroy(s->stream);
			cudaFree(s->d_sum);
		}
		free(s);
	}
	pthread_mutex_unlock(&slots_mu);
}
