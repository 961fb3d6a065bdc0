/*
 * gpu-stage-check: the gpusum stage's kernel (plugins/stage-gpusum) against
 * its CPU sum, through the plugin as rgapsd loads it, on device memory:
 *  - every path of the kernel: sizes from 1 byte to 64 MiB + 7, at device
 *    addresses 0, 1, 4, 8 and 12 bytes past a 256-byte boundary, as pieces at
 *    message offsets 0, 1, 4 and 4097 (the sender's point), equal to
 *    gpusum_cpu over the same bytes;
 *  - a whole message checked before publish: passes with the right sum and
 *    is refused, naming the GPU, with one byte flipped in device memory;
 *  - the time of the check per message of 64 MiB and 1 GiB (median of 9),
 *    printed as "RESULT gpusum size=... ms=... GBps=..." (1 GiB also
 *    compared with the CPU once).
 * --small: pieces of at most 1 MiB + 7 only, each in an allocation that
 * ends with it, no messages (for compute-sanitizer memcheck, which then sees
 * a read past a piece and slows every access down).
 * Exit 0, 1 on a mismatch or error, 77 (with the reason) without a GPU.
 * Usage: gpu-stage-check PLUGIN_DIR [--small]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "../../plugins/stage-gpusum/gpusum.h"
#include "plugin_loader.h"

static struct rgaps_loaded_plugin *lp;
static int failures, small;

#define CK(call)                                                                                 \
	do {                                                                                     \
		cudaError_t e_ = (call);                                                         \
		if (e_ != cudaSuccess) {                                                         \
			fprintf(stderr, "FAIL: %s: %s\n", #call, cudaGetErrorString(e_));        \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)

static int run(uint32_t point, const uint8_t *dev, uint64_t off, uint64_t len, uint8_t *tag,
	       void *ms, char *why)
{
	struct rgaps_stage_work w = {
		.point = point, .mem_kind = RGAPS_MEM_CUDA, .topic = "check", .msg_seq = 3,
		.msg_size = off + len, .chunk_off = off, .data = dev, .len = len, .tag = tag,
		.msg_state = ms, .why = why, .whylen = 300,
	};

	why[0] = '\0';
	return lp->ops.stage.process(lp->ctx, &w);
}

static uint64_t get64(const uint8_t *t)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v |= (uint64_t)t[i] << (8 * i);
	return v;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 17, x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

/* The pieces: every kernel path against the CPU. */
static void pieces(uint8_t *dev, uint8_t *host)
{
	static const uint64_t sizes[] = { 1, 3, 4, 15, 16, 17, 31, 255, 4101, 65536, 1048583,
					  64 * 1048576 + 7 };
	static const uint64_t addrs[] = { 0, 1, 4, 8, 12 }, offs[] = { 0, 1, 4, 4097 };
	char why[300];
	int n = 0;

	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		if (small && sizes[s] > 2 * 1048576)
			continue;
		fill(host, sizes[s] + 256, (uint32_t)s);
		for (size_t a = 0; a < sizeof(addrs) / sizeof(addrs[0]); a++) {
			uint8_t *d = dev + 256 + addrs[a];

			/* --small: each piece ends where its allocation does, for memcheck */
			if (small) {
				CK(cudaMalloc((void **)&d, addrs[a] + sizes[s]));
				d += addrs[a];
			}
			CK(cudaMemcpy(d, host, sizes[s], cudaMemcpyHostToDevice));
			for (size_t o = 0; o < sizeof(offs) / sizeof(offs[0]); o++) {
				uint8_t tag[8];
				uint64_t want = gpusum_cpu(host, sizes[s], offs[o]);

				if (run(RGAPS_STAGE_BEFORE_SEND, d, offs[o], sizes[s], tag, NULL, why) !=
				    RGAPS_STAGE_CONTINUE) {
					printf("FAIL: %llu bytes at +%llu, offset %llu: refused: %s\n",
					       (unsigned long long)sizes[s], (unsigned long long)addrs[a],
					       (unsigned long long)offs[o], why);
					failures++;
				} else if (get64(tag) != want) {
					printf("FAIL: %llu bytes at +%llu, offset %llu: GPU 0x%016llx, "
					       "CPU 0x%016llx\n",
					       (unsigned long long)sizes[s], (unsigned long long)addrs[a],
					       (unsigned long long)offs[o], (unsigned long long)get64(tag),
					       (unsigned long long)want);
					failures++;
				}
				n++;
			}
			if (small)
				CK(cudaFree(d - addrs[a]));
		}
	}
	printf("%s: %d pieces (1 B .. %s, 5 alignments, 4 message offsets): the GPU sum equals "
	       "the CPU's%s\n", failures ? "FAIL" : "ok", n, small ? "1 MiB + 7" : "64 MiB + 7",
	       failures ? " NOT always" : "");
}

/* A whole message of n bytes: checked, refused with a flipped byte, timed. */
static void message(uint8_t *dev, uint8_t *host, uint64_t n, const char *label)
{
	struct {
		uint64_t sum, bytes;
	} ms;
	double t[9], t0;
	char why[300];
	uint8_t b;
	int r;

	fill(host, n, 99);
	CK(cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice));
	ms.sum = gpusum_cpu(host, n, 0);
	ms.bytes = n;
	for (int i = 0; i < 9; i++) {
		t0 = now_ms();
		r = run(RGAPS_STAGE_BEFORE_PUBLISH, dev, 0, n, NULL, &ms, why);
		t[i] = now_ms() - t0;
		if (r != RGAPS_STAGE_CONTINUE) {
			printf("FAIL: %s message refused: %s\n", label, why);
			failures++;
			return;
		}
	}
	qsort(t, 9, sizeof(t[0]), cmp_double);
	printf("RESULT gpusum size=%s ms=%.3f GBps=%.1f min_ms=%.3f max_ms=%.3f\n", label, t[4],
	       n / t[4] / 1e6, t[0], t[8]);
	CK(cudaMemcpy(&b, dev + n / 3, 1, cudaMemcpyDeviceToHost));
	b ^= 0x10;
	CK(cudaMemcpy(dev + n / 3, &b, 1, cudaMemcpyHostToDevice));
	r = run(RGAPS_STAGE_BEFORE_PUBLISH, dev, 0, n, NULL, &ms, why);
	if (r != RGAPS_STAGE_FAIL || !strstr(why, "summed on GPU ")) {
		printf("FAIL: %s message with a flipped byte: result %d, why '%s'\n", label, r, why);
		failures++;
		return;
	}
	printf("ok: %s message checked on the GPU; with one byte flipped refused: %s\n", label, why);
}

int main(int argc, char **argv)
{
	uint64_t big = 1ull << 30;
	uint8_t *dev, *host;
	char err[512];
	int ndev = 0;
	cudaError_t e;

	small = argc == 3 && strcmp(argv[2], "--small") == 0;
	if (argc != 2 && !small) {
		fprintf(stderr, "usage: gpu-stage-check PLUGIN_DIR [--small]\n");
		return 2;
	}
	if (small)
		big = 4ull << 20;
	e = cudaGetDeviceCount(&ndev);
	if (e != cudaSuccess || ndev == 0) {
		printf("SKIP: no usable GPU: %s\n",
		       e != cudaSuccess ? cudaGetErrorString(e) : "no device");
		return 77;
	}
	if (rgaps__plugin_load(argv[1], RGAPS_PLUGIN_STAGE, "gpusum", &lp, err, sizeof(err)) ||
	    lp->ops.stage.init(NULL, &lp->ctx)) {
		printf("FAIL: the gpusum plugin: %s\n", err);
		return 1;
	}
	CK(cudaSetDevice(0));
	CK(cudaMalloc((void **)&dev, big + 512));
	host = malloc(big + 512);
	if (!host) {
		printf("FAIL: out of host memory\n");
		return 1;
	}
	pieces(dev, host);
	if (!small) {
		message(dev, host, 64ull << 20, "64MiB");
		message(dev, host, big, "1GiB");
	}
	lp->ops.stage.fini(lp->ctx);
	rgaps__plugin_unload(lp);
	CK(cudaFree(dev));
	free(host);
	return failures ? 1 : 0;
}
