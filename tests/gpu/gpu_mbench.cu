/*
 * gpu-mbench: the benchmarks of several GPUs (docs/BENCHMARKS.md, "Several GPUs and
 * stream order"), each with its baseline in the same run.
 *
 * --fanout: a publisher on GPU 0 pushes a message from its device buffer; K
 * subscriber processes on each of G GPUs (G from --gpus, e.g. 1,2,4, as many
 * as there are) take it. Per message, the time from before the push until
 *   delivered  the last subscriber holds a device pointer its GPU can read
 *              (take() returned), and
 *   ready      the last subscriber has read every byte once on its GPU (a
 *              reading kernel, then a stream sync) - "read" schemes - or has
 *              its own copy in its GPU's memory ("copy" scheme).
 * Schemes: peer (topic with gpu_fanout peer: every GPU reads the pool on GPU
 * 0 in place), replica (gpu_fanout replicate: rgapsd copies once per GPU),
 * copy (the per-subscriber-copy baseline: peer topic, each subscriber copies
 * the message into its own buffer on its GPU). G = 1 is the one-GPU reference
 * (all schemes alike there). NCCL broadcast to the same GPUs is measured by
 * tests/gpu/nccl_bcast.py in the same script run.
 *
 * --stream-order: one publisher and one subscriber on GPU 0. The producer's
 * kernel writes the payload and then a kernel stamps %globaltimer into the
 * message; the subscriber's first kernel reads %globaltimer and the stamp:
 * the GPU time from the producer kernel's end to the subscriber kernel's
 * start. async: push_async on the producer's stream and take_async on the
 * subscriber's (nothing waits on the host); loan: the producer's kernels
 * write a loaned pool block in place and commit_async publishes it (no copy;
 * the subscriber as for async); sync: the producer synchronises its stream,
 * push(), the subscriber take()s and then launches.
 * --work-us W (default 0): the producer's stream first runs a kernel that
 * busies the GPU for W us, as a pipeline's real kernels would. Stream order
 * pays where that work outlasts the host's round trip (notify, wake, take,
 * launch): the subscriber's kernel is then queued before the producer's work
 * ends. With W = 0 both schemes are bound by that round trip.
 *
 *   gpu-mbench --fanout --topic-peer T --topic-rep T [--gpus 1,2,4] [--subs-per-gpu K]
 *              [--sizes 4MiB,64MiB,1GiB] [--reps 20,10,5]
 *   gpu-mbench --stream-order --topic T [--sizes 4MiB,64MiB] [--reps 50,30] [--work-us W]
 * Needs a running rgapsd (tests/gpu/gpu_mbench.sh sets it up).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gpu_bench_util.cuh"
#include "gpu_test.cuh"
#include "rgaps/rgaps.h"

extern char **environ;

#define REC_FD 3
#define READY_SEQ ~0ull
#define REC_TIMEOUT_MS 120000

struct rec {
	uint64_t seq;
	uint64_t t_take, t_ready; /* CLOCK_MONOTONIC ns */
	int64_t value;		  /* stream order: subscriber kernel start - producer stamp (ns) */
	int64_t status;
};

enum child_mode { CH_READ, CH_COPY, CH_SO_SYNC, CH_SO_ASYNC };

static volatile sig_atomic_t stop;

static void on_signal(int)
{
	stop = 1;
}

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "gpu-mbench: %s: %s\n", what, detail);
	exit(1);
}

/* Read every byte once: 16-byte loads, folded so the compiler keeps them. */
__global__ static void touch_kernel(const uint4 *p, uint64_t n16, unsigned long long *sink)
{
	uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x;
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	unsigned x = 0;

	for (uint64_t k = i; k < n16; k += stride) {
		uint4 v = p[k];

		x ^= v.x ^ v.y ^ v.z ^ v.w;
	}
	if (x == 0x9e3779b9u) /* practically never: keeps the loads */
		atomicAdd(sink, 1ull);
}

__device__ static uint64_t globaltimer(void)
{
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* The producer's own work: keep one SM busy for us microseconds. */
__global__ static void busy_kernel(uint64_t us)
{
	uint64_t end = globaltimer() + us * 1000;

	while (globaltimer() < end)
		;
}

/* The producer's last kernel: the time its work ended, into the message's first word. */
__global__ static void stamp_kernel(uint64_t *msg)
{
	*msg = globaltimer();
}

/* The subscriber's first kernel: when it started, against the stamp. */
__global__ static void since_kernel(const uint64_t *msg, int64_t *out)
{
	uint64_t now = globaltimer();

	*out = (int64_t)(now - *msg);
}

static bool write_rec(const rec &r)
{
	return write(REC_FD, &r, sizeof(r)) == (ssize_t)sizeof(r);
}

/* ---------------------------------------------------------------- subscriber processes */

static int child_main(enum child_mode mode, const char *topic, int device, uint64_t max_size)
{
	rgaps_attach_opts_t ao = {};
	rgaps_subscriber_t *sub;
	struct sigaction sa;
	unsigned long long *sink;
	int64_t *since_d, *since_h;
	void *own = NULL;
	cudaStream_t s;
	rec r = { READY_SEQ, 0, 0, 0, 0 };
	int sms = 0;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	CK(cudaSetDevice(device));
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
	CK(cudaMalloc(&sink, sizeof(*sink)));
	CK(cudaMalloc(&since_d, sizeof(*since_d)));
	CK(cudaMallocHost(&since_h, sizeof(*since_h)));
	if (mode == CH_COPY)
		CK(cudaMalloc(&own, max_size));
	ao.struct_size = sizeof(ao);
	ao.device = device;
	sub = rgaps_subscriber_init_ex(topic, &ao);
	if (!sub)
		die("child: cannot attach", strerror(errno));
	if (!write_rec(r))
		return 1;
	while (!stop) {
		rgaps_msg_t m;
		int e = mode == CH_SO_ASYNC ? rgaps_subscriber_take_async(sub, &m, 1000, s) :
					      rgaps_subscriber_take(sub, &m, 1000);

		if (e == -ETIMEDOUT || e == -EINTR || e == -EAGAIN)
			continue;
		r.seq = m.seq;
		r.status = e;
		r.t_take = gpu_now_ns();
		if (e == 0 && !(m.flags & RGAPS_MSG_GAP)) {
			switch (mode) {
			case CH_READ:
				touch_kernel<<<2 * sms, 512, 0, s>>>((const uint4 *)m.data, m.size / 16,
								     sink);
				CK_LAUNCH();
				break;
			case CH_COPY:
				CK(cudaMemcpyAsync(own, m.data, m.size, cudaMemcpyDefault, s));
				break;
			case CH_SO_SYNC:
			case CH_SO_ASYNC:
				since_kernel<<<1, 1, 0, s>>>((const uint64_t *)m.data, since_d);
				CK_LAUNCH();
				CK(cudaMemcpyAsync(since_h, since_d, sizeof(*since_h),
						   cudaMemcpyDeviceToHost, s));
				break;
			}
			if (mode == CH_SO_ASYNC)
				rgaps_subscriber_release_async(sub, &m, s);
			CK(cudaStreamSynchronize(s));
			r.t_ready = gpu_now_ns();
			r.value = *since_h;
			if (mode != CH_SO_ASYNC)
				rgaps_subscriber_release(sub, &m);
		}
		if (!write_rec(r) || e)
			break;
	}
	rgaps_subscriber_destroy(sub);
	return 0;
}

/* ---------------------------------------------------------------- the publisher side */

typedef bench_child child;

static bool read_rec(const child &c, rec *r)
{
	return bench_read_full(c.fd, r, sizeof(*r), REC_TIMEOUT_MS) && r->status == 0;
}

static std::vector<child> spawn(enum child_mode mode, const char *topic, const std::vector<int> &devs,
				uint64_t max_size)
{
	std::vector<child> kids;
	char modes[8], maxs[32];

	snprintf(modes, sizeof(modes), "%d", (int)mode);
	snprintf(maxs, sizeof(maxs), "%llu", (unsigned long long)max_size);
	for (int dev : devs) {
		char devs_s[16];
		char *argv[] = { (char *)"gpu-mbench", (char *)"--child", modes, (char *)topic,
				 devs_s, maxs, NULL };
		child c;

		snprintf(devs_s, sizeof(devs_s), "%d", dev);
		if (!bench_spawn_self(argv, REC_FD, &c))
			die("posix_spawn", strerror(errno));
		kids.push_back(c);
	}
	for (const child &c : kids) {
		rec r;

		if (!read_rec(c, &r) || r.seq != READY_SEQ)
			die("a subscriber", "did not start (see its output above)");
	}
	return kids;
}

static void reap(std::vector<child> &kids)
{
	bench_reap(kids);
}

static rgaps_publisher_t *attach_pub(const char *topic, uint64_t max_size)
{
	rgaps_attach_opts_t ao = {};
	rgaps_topic_info_t info = {};
	rgaps_publisher_t *pub;

	ao.struct_size = sizeof(ao);
	ao.device = 0;
	info.struct_size = sizeof(info);
	pub = rgaps_publisher_init_ex(topic, &ao);
	if (!pub)
		die("cannot attach the publisher", strerror(errno));
	rgaps_publisher_info(pub, &info);
	if (info.memory != RGAPS_MEMORY_CUDA || info.max_message_size < max_size)
		die(topic, "must be on memory cuda with max_message_size >= the largest size");
	return pub;
}

static void print_header(void)
{
	int n = 0;

	bench_print_machine("gpu-mbench");
	cudaGetDeviceCount(&n);
	printf("gpu-mbench: %d GPUs\n", n);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			int can = 0, rank = -1, atom = 0;

			if (i == j)
				continue;
			cudaDeviceCanAccessPeer(&can, i, j);
			cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, i, j);
			cudaDeviceGetP2PAttribute(&atom, cudaDevP2PAttrNativeAtomicSupported, i, j);
			printf("gpu-mbench: GPU %d -> %d: peer access %s, performance rank %d, native "
			       "atomics %s\n", i, j, can ? "yes" : "no", rank, atom ? "yes" : "no");
		}
	cudaGetLastError();
	fflush(stdout);
}

/* ---------------------------------------------------------------- --fanout */

static void fanout(const char *tpeer, const char *trep, const std::vector<uint64_t> &gpus,
		   int per_gpu, const std::vector<uint64_t> &sizes, const std::vector<uint64_t> &reps)
{
	static const struct {
		const char *name;
		enum child_mode mode;
		bool replica;
	} schemes[] = { { "peer", CH_READ, false }, { "replica", CH_READ, true },
			{ "copy", CH_COPY, false } };
	uint64_t max = *std::max_element(sizes.begin(), sizes.end());
	rgaps_publisher_t *ppeer = attach_pub(tpeer, max), *prep = attach_pub(trep, max);
	uint8_t *dbuf;
	char sb[32];
	int ngpu = 0;

	CK(cudaGetDeviceCount(&ngpu));
	CK(cudaMalloc(&dbuf, max));
	pattern_fill(dbuf, max, 42, 0);
	CK(cudaDeviceSynchronize());
	printf("\n== multi-GPU fan-out: publisher on GPU 0 (push), %d subscriber processes per "
	       "GPU; median ms over reps ==\n"
	       "delivered: push start -> the last subscriber holds a pointer its GPU can read; "
	       "ready: -> the last has read every byte on its GPU (copy: has its own copy)\n",
	       per_gpu);
	for (uint64_t g : gpus) {
		if ((int)g > ngpu) {
			printf("  G=%llu: not run, %d GPUs visible\n", (unsigned long long)g, ngpu);
			continue;
		}
		for (const auto &sc : schemes) {
			std::vector<int> devs;

			if (g == 1 && sc.replica)
				continue; /* one GPU: nothing to replicate */
			for (int k = 0; k < per_gpu; k++)
				for (uint64_t d = 0; d < g; d++)
					devs.push_back((int)d);
			std::vector<child> kids = spawn(sc.mode, sc.replica ? trep : tpeer, devs, max);
			rgaps_publisher_t *pub = sc.replica ? prep : ppeer;

			for (size_t zi = 0; zi < sizes.size(); zi++) {
				std::vector<double> dl, rd, first;

				for (uint64_t rep = 0; rep < reps[zi] + 1 && !stop; rep++) {
					uint64_t t0 = gpu_now_ns(), last_take = 0, last_ready = 0;
					uint64_t first_take = UINT64_MAX;
					int r = rgaps_publisher_push(pub, sizes[zi], dbuf);

					if (r)
						die("push", rgaps_strerror(r));
					for (const child &c : kids) {
						rec rr;

						if (!read_rec(c, &rr))
							die("a subscriber", "failed or sent nothing");
						last_take = std::max(last_take, rr.t_take);
						first_take = std::min(first_take, rr.t_take);
						last_ready = std::max(last_ready, rr.t_ready);
					}
					if (rep == 0)
						continue;
					dl.push_back((last_take - t0) / 1e6);
					first.push_back((first_take - t0) / 1e6);
					rd.push_back((last_ready - t0) / 1e6);
				}
				printf("RESULT fanout scheme=%s G=%llu N=%zu size=%s delivered_ms=%.3f "
				       "first_ms=%.3f ready_ms=%.3f msgs=%zu\n",
				       g == 1 && sc.mode == CH_READ ? "one-gpu" : sc.name,
				       (unsigned long long)g, kids.size(),
				       bench_size_str(sizes[zi], sb, sizeof(sb)), bench_median(dl),
				       bench_median(first), bench_median(rd), dl.size());
				fflush(stdout);
			}
			reap(kids);
		}
	}
	rgaps_publisher_destroy(ppeer);
	rgaps_publisher_destroy(prep);
	CK(cudaFree(dbuf));
}

/* ---------------------------------------------------------------- --stream-order */

static void stream_order(const char *topic, const std::vector<uint64_t> &sizes,
			 const std::vector<uint64_t> &reps, uint64_t work_us)
{
	uint64_t max = *std::max_element(sizes.begin(), sizes.end());
	rgaps_publisher_t *pub = attach_pub(topic, max);
	std::vector<int> dev0 = { 0 };
	cudaStream_t s;
	uint8_t *dbuf;
	char sb[32];

	CK(cudaSetDevice(0));
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaMalloc(&dbuf, max));
	printf("\n== stream order: producer kernel end -> subscriber kernel start (GPU "
	       "%%globaltimer, median us over reps) ==\n");
	/* 0: sync + push; 1: push_async; 2: a loan written in place, commit_async (no copy). */
	static const char *const scheme[3] = { "push+sync", "push_async", "loan+commit_async" };
	for (size_t zi = 0; zi < sizes.size(); zi++) {
		double med[3] = { 0, 0, 0 };

		for (int mode = 0; mode < 3; mode++) {
			std::vector<child> kids =
				spawn(mode ? CH_SO_ASYNC : CH_SO_SYNC, topic, dev0, max);
			std::vector<double> v, call;

			for (uint64_t rep = 0; rep < reps[zi] + 1 && !stop; rep++) {
				rgaps_loan_t loan;
				uint8_t *dst = dbuf;
				uint64_t t0;
				rec rr;
				int r;

				if (mode == 2) { /* the producer writes the pool block itself */
					r = rgaps_publisher_loan(pub, sizes[zi], -1, &loan);
					if (r)
						die("loan", rgaps_strerror(r));
					dst = (uint8_t *)loan.data;
				}
				if (work_us) {
					busy_kernel<<<1, 1, 0, s>>>(work_us);
					CK_LAUNCH();
				}
				pattern_fill(dst, sizes[zi], rep, s);
				stamp_kernel<<<1, 1, 0, s>>>((uint64_t *)dst);
				CK_LAUNCH();
				t0 = gpu_now_ns();
				if (mode == 2) {
					r = rgaps_publisher_commit_async(pub, &loan, sizes[zi], s);
				} else if (mode == 1) {
					r = rgaps_publisher_push_async(pub, sizes[zi], dbuf, s);
				} else {
					CK(cudaStreamSynchronize(s));
					r = rgaps_publisher_push(pub, sizes[zi], dbuf);
				}
				if (r)
					die(mode == 2 ? "commit_async" : "push", rgaps_strerror(r));
				if (rep)
					call.push_back((gpu_now_ns() - t0) / 1e3);
				if (!read_rec(kids[0], &rr))
					die("the subscriber", "failed or sent nothing");
				if (rep)
					v.push_back(rr.value / 1e3);
			}
			CK(cudaStreamSynchronize(s));
			med[mode] = bench_median(v);
			printf("RESULT stream scheme=%s size=%s work_us=%llu gpu_us=%.1f "
			       "publish_call_us=%.1f msgs=%zu\n",
			       scheme[mode], bench_size_str(sizes[zi], sb, sizeof(sb)),
			       (unsigned long long)work_us, med[mode], bench_median(call), v.size());
			fflush(stdout);
			reap(kids);
		}
		printf("RESULT stream ratio size=%s work_us=%llu async_over_sync=%.3f "
		       "loan_over_sync=%.3f (target <= 0.5)\n",
		       bench_size_str(sizes[zi], sb, sizeof(sb)), (unsigned long long)work_us,
		       med[0] > 0 ? med[1] / med[0] : 0, med[0] > 0 ? med[2] / med[0] : 0);
	}
	rgaps_publisher_destroy(pub);
	CK(cudaFree(dbuf));
	CK(cudaStreamDestroy(s));
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "fanout", no_argument, NULL, 'F' },
		{ "stream-order", no_argument, NULL, 'S' },
		{ "topic", required_argument, NULL, 't' },
		{ "topic-peer", required_argument, NULL, 'p' },
		{ "topic-rep", required_argument, NULL, 'r' },
		{ "gpus", required_argument, NULL, 'g' },
		{ "subs-per-gpu", required_argument, NULL, 'k' },
		{ "sizes", required_argument, NULL, 's' },
		{ "reps", required_argument, NULL, 'n' },
		{ "work-us", required_argument, NULL, 'w' },
		{ NULL, 0, NULL, 0 },
	};
	const char *topic = NULL, *tpeer = NULL, *trep = NULL;
	std::vector<uint64_t> gpus = { 1, 2, 4 }, sizes, reps;
	std::string bad;
	bool do_fanout = false, do_stream = false;
	int per_gpu = 2, o;
	uint64_t work_us = 0;

	if (argc == 6 && strcmp(argv[1], "--child") == 0) {
		gpu_require("gpu-mbench child");
		return child_main((enum child_mode)atoi(argv[2]), argv[3], atoi(argv[4]),
				  strtoull(argv[5], NULL, 10));
	}
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'F':
			do_fanout = true;
			break;
		case 'S':
			do_stream = true;
			break;
		case 't':
			topic = optarg;
			break;
		case 'p':
			tpeer = optarg;
			break;
		case 'r':
			trep = optarg;
			break;
		case 'g':
			if (!bench_parse_list(optarg, false, &gpus, &bad))
				die("bad --gpus item", bad.c_str());
			break;
		case 'k':
			per_gpu = atoi(optarg);
			break;
		case 's':
			if (!bench_parse_list(optarg, true, &sizes, &bad))
				die("bad --sizes item", bad.c_str());
			break;
		case 'n':
			if (!bench_parse_list(optarg, false, &reps, &bad))
				die("bad --reps item", bad.c_str());
			break;
		case 'w':
			work_us = strtoull(optarg, NULL, 10);
			if (work_us > 100000)
				die("bad --work-us", "at most 100000");
			break;
		default:
			fprintf(stderr, "usage: see the comment at the top of gpu_mbench.cu\n");
			return 2;
		}
	}
	if (do_fanout == do_stream || (do_fanout && (!tpeer || !trep)) || (do_stream && !topic) ||
	    per_gpu < 1 || per_gpu > 16)
		die("usage", "--fanout --topic-peer T --topic-rep T | --stream-order --topic T");
	gpu_require("gpu-mbench");
	if (sizes.empty())
		sizes = do_fanout ? std::vector<uint64_t>{ 4ull << 20, 64ull << 20, 1ull << 30 } :
				    std::vector<uint64_t>{ 4ull << 20, 64ull << 20 };
	if (reps.empty())
		reps = do_fanout ? std::vector<uint64_t>{ 20, 10, 5 } : std::vector<uint64_t>{ 50, 30 };
	while (reps.size() < sizes.size())
		reps.push_back(reps.back());
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, on_signal);
	print_header();
	CK(cudaSetDevice(0));
	if (do_fanout)
		fanout(tpeer, trep, gpus, per_gpu, sizes, reps);
	else
		stream_order(topic, sizes, reps, work_us);
	return 0;
}
