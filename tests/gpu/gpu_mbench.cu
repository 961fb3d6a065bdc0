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
 * Scheme replica-loan: as replica, but the publisher's message is a loan it
 * commits (its kernels wrote the pool in place: no copy into the pool), the
 * time from before the commit: what NCCL's broadcast, whose source buffer is
 * filled already, is measured against. --schemes picks schemes (default
 * peer,replica,copy).
 *
 * --relay: the cuda plugin's copy_relay alone (what rgapsd's replicator runs,
 * without daemon or subscribers): a message in a VMM pool on GPU 0 copied to
 * pools on GPUs 1..G-1 along a chain (0 -> 1 -> ... -> G-1) in pieces, per
 * piece size (--pieces) and lanes (--lanes), and as a star (every GPU from GPU
 * 0 at once, what rgapsd did before chains); the time of the call, which
 * returns when every replica is whole; the first and last 64 KiB of every
 * replica are compared with the source.
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
 *              [--sizes 4MiB,64MiB,1GiB] [--reps 20,10,5] [--schemes peer,replica,copy]
 *   gpu-mbench --relay [--gpus 2,4] [--sizes 64MiB,1GiB] [--reps 10,5] [--pieces 1MiB,4MiB]
 *              [--lanes 1,2]       (loads $RGAPS_PLUGIN_DIR/memory-cuda.so)
 *   gpu-mbench --stream-order --topic T [--sizes 4MiB,64MiB] [--reps 50,30] [--work-us W]
 * Needs a running rgapsd (tests/gpu/gpu_mbench.sh sets it up).
 */
#include <dlfcn.h>
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
#include "rgaps/plugin.h"
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

/* One message: pushed from dbuf, or a loan committed as it is (written in place). */
static void publish_one(rgaps_publisher_t *pub, uint64_t size, const uint8_t *dbuf, bool loan,
			uint64_t *t0_p)
{
	rgaps_loan_t l;
	int r;

	if (!loan) {
		*t0_p = gpu_now_ns();
		r = rgaps_publisher_push(pub, size, dbuf);
		if (r)
			die("push", rgaps_strerror(r));
		return;
	}
	r = rgaps_publisher_loan(pub, size, -1, &l);
	if (r)
		die("loan", rgaps_strerror(r));
	CK(cudaMemcpy(l.data, dbuf, size, cudaMemcpyDefault)); /* the producer's writes */
	*t0_p = gpu_now_ns();
	r = rgaps_publisher_commit(pub, &l, size);
	if (r)
		die("commit", rgaps_strerror(r));
}

static void fanout(const char *tpeer, const char *trep, const std::vector<uint64_t> &gpus,
		   int per_gpu, const std::vector<uint64_t> &sizes,
		   const std::vector<uint64_t> &reps, const std::string &want)
{
	static const struct {
		const char *name;
		enum child_mode mode;
		bool replica, loan;
	} schemes[] = { { "peer", CH_READ, false, false },
			{ "replica", CH_READ, true, false },
			{ "copy", CH_COPY, false, false },
			{ "replica-loan", CH_READ, true, true } };
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

			if (("," + want + ",").find(std::string(",") + sc.name + ",") ==
			    std::string::npos)
				continue;
			if (g == 1 && sc.replica && !sc.loan)
				continue; /* one GPU: nothing to replicate */
			for (int k = 0; k < per_gpu; k++)
				for (uint64_t d = 0; d < g; d++)
					devs.push_back((int)d);
			std::vector<child> kids = spawn(sc.mode, sc.replica ? trep : tpeer, devs, max);
			rgaps_publisher_t *pub = sc.replica ? prep : ppeer;

			for (size_t zi = 0; zi < sizes.size(); zi++) {
				std::vector<double> dl, rd, first;

				for (uint64_t rep = 0; rep < reps[zi] + 1 && !stop; rep++) {
					uint64_t t0, last_take = 0, last_ready = 0;
					uint64_t first_take = UINT64_MAX;

					publish_one(pub, sizes[zi], dbuf, sc.loan, &t0);
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
				       g == 1 && sc.mode == CH_READ
					       ? (sc.loan ? "one-gpu-loan" : "one-gpu")
					       : sc.name,
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

/* ---------------------------------------------------------------- --relay */

static void relay_whole(void *arg, uint32_t)
{
	(*(uint32_t *)arg)++;
}

/* A plugin context with these relay tunables (the plugin reads them at init). */
static void *relay_ctx(const struct rgaps_memory_ops *ops, unsigned lanes)
{
	struct rgaps_plugin_env env = {};
	char v[16];
	void *ctx;

	snprintf(v, sizeof(v), "%u", lanes);
	setenv("RGAPS_CUDA_RELAY_LANES", v, 1);
	setenv("RGAPS_CUDA_RELAY_PIECES", "4096", 1); /* the piece is the one asked for */
	env.struct_size = sizeof(env);
	env.role = RGAPS_ROLE_DAEMON;
	env.log = bench_plugin_log;
	if (ops->init(&env, &ctx))
		die("relay", "plugin init failed");
	return ctx;
}

/*
 * Every byte of every replica (the source holds the pattern for counter n),
 * checked by a kernel on GPU 0, which may read every pool.
 */
static bool relay_check(const std::vector<struct rgaps_mem_region> &pool, uint32_t g, uint64_t n)
{
	static verify_result *d_res, *h_res;

	CK(cudaSetDevice(0));
	if (!d_res) {
		CK(cudaMalloc(&d_res, sizeof(*d_res)));
		CK(cudaMallocHost(&h_res, sizeof(*h_res)));
	}
	for (uint32_t i = 1; i < g; i++) {
		pattern_verify(pool[i].base, n, d_res, h_res, 0);
		if (h_res->bad || h_res->counter != n) {
			fprintf(stderr,
				"relay: replica on GPU %u: %llu bad words, the first at byte "
				"%llu\n",
				i, h_res->bad, h_res->first_bad);
			return false;
		}
	}
	return true;
}

/* Clear the replicas, so that a copy that missed bytes cannot pass on an earlier one's. */
static void relay_clear(const std::vector<struct rgaps_mem_region> &pool, uint32_t g, uint64_t n)
{
	for (uint32_t i = 1; i < g; i++) {
		CK(cudaSetDevice((int)i));
		CK(cudaMemset(pool[i].base, 0, n));
		CK(cudaDeviceSynchronize());
	}
	CK(cudaSetDevice(0));
}

static void relay_bench(const std::vector<uint64_t> &gpus, const std::vector<uint64_t> &sizes,
			const std::vector<uint64_t> &reps, const std::vector<uint64_t> &pieces,
			const std::vector<uint64_t> &lanes)
{
	const char *dir = getenv("RGAPS_PLUGIN_DIR");
	std::string path = std::string(dir ? dir : ".") + "/memory-cuda.so";
	void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
	const struct rgaps_plugin *pl;
	const struct rgaps_memory_ops *ops;
	uint64_t max = *std::max_element(sizes.begin(), sizes.end());
	std::vector<struct rgaps_mem_region> pool;
	void *base;
	int ngpu = 0;
	char sb[32], pb[32];

	if (!h || !(pl = (const struct rgaps_plugin *)dlsym(h, RGAPS_PLUGIN_SYMBOL)))
		die("relay: cannot load the cuda plugin", dlerror());
	ops = (const struct rgaps_memory_ops *)pl->ops;
	CK(cudaGetDeviceCount(&ngpu));
	base = relay_ctx(ops, 1);
	pool.resize(ngpu);
	for (int d = 0; d < ngpu; d++) {
		char name[64];

		snprintf(name, sizeof(name), "rgaps-mbench-relay-%d-%d", (int)getpid(), d);
		if (ops->pool_create(base, name, max, d, &pool[d]))
			die("relay", "pool_create failed");
	}
	/* Every pool readable by every GPU, as rgapsd opens a replica to the next in its chain. */
	for (int d = 0; d < ngpu; d++)
		for (int x = 0; x < ngpu; x++)
			if (x != d && ops->pool_grant(base, &pool[d], x, RGAPS_MEM_GRANT_READ))
				die("relay", "pool_grant failed");
	printf("\n== relay: the cuda plugin's copy_relay from a pool on GPU 0 to pools on GPUs 1..G-1 "
	       "(median ms of the call; GB/s = message bytes / time) ==\n");
	for (uint64_t ln : lanes) {
		void *ctx = relay_ctx(ops, (unsigned)ln);

		for (uint64_t g : gpus) {
			if ((int)g > ngpu || g < 2)
				continue;
			for (size_t zi = 0; zi < sizes.size(); zi++) {
				uint64_t n = sizes[zi];
				std::vector<uint64_t> shapes = pieces;

				shapes.push_back(0); /* 0: the star */
				for (uint64_t piece : shapes) {
					std::vector<struct rgaps_relay_hop> hops(g - 1);
					std::vector<double> t;
					bool star = piece == 0;

					if (star && ln != lanes[0])
						continue; /* a star has one piece per copy: lanes alike */
					CK(cudaSetDevice(0));
					pattern_fill(pool[0].base, n, n, 0);
					CK(cudaDeviceSynchronize());
					relay_clear(pool, (uint32_t)g, n);
					for (uint32_t i = 0; i + 1 < g; i++)
						hops[i] = { pool[i + 1].base, (int32_t)i + 1,
							    star ? -1 : (int32_t)i - 1 };
					for (uint64_t rep = 0; rep < reps[zi] + 1; rep++) {
						uint32_t whole = 0;
						uint64_t t0 = gpu_now_ns();

						if (ops->copy_relay(ctx, pool[0].base, n,
								    hops.data(), g - 1,
								    star ? n : piece, relay_whole,
								    &whole) ||
						    whole != g - 1)
							die("relay", "copy_relay failed");
						if (rep)
							t.push_back((gpu_now_ns() - t0) / 1e6);
					}
					if (!relay_check(pool, (uint32_t)g, n))
						die("relay", "a replica differs from the source");
					printf("RESULT relay G=%llu size=%s shape=%s piece=%s lanes=%llu "
					       "ms=%.3f min_ms=%.3f GBps=%.1f msgs=%zu\n",
					       (unsigned long long)g,
					       bench_size_str(n, sb, sizeof(sb)),
					       star ? "star" : "chain",
					       star ? "whole"
						    : bench_size_str(piece, pb, sizeof(pb)),
					       (unsigned long long)(star ? 1 : ln), bench_median(t),
					       *std::min_element(t.begin(), t.end()),
					       n / (bench_median(t) * 1e6), t.size());
					fflush(stdout);
				}
			}
		}
		ops->fini(ctx);
	}
	for (int d = 0; d < ngpu; d++)
		ops->pool_release(base, &pool[d]);
	ops->fini(base);
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
		{ "relay", no_argument, NULL, 'R' },
		{ "pieces", required_argument, NULL, 'P' },
		{ "lanes", required_argument, NULL, 'L' },
		{ "schemes", required_argument, NULL, 'X' },
		{ NULL, 0, NULL, 0 },
	};
	const char *topic = NULL, *tpeer = NULL, *trep = NULL;
	std::vector<uint64_t> gpus = { 1, 2, 4 }, sizes, reps, pieces = { 4ull << 20 },
			      lanes = { 1 };
	std::string schemes = "peer,replica,copy";
	bool do_fanout = false, do_stream = false, do_relay = false;
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
			bench_list_arg("gpu-mbench", "gpus", optarg, false, &gpus);
			break;
		case 'k':
			per_gpu = atoi(optarg);
			break;
		case 's':
			bench_list_arg("gpu-mbench", "sizes", optarg, true, &sizes);
			break;
		case 'n':
			bench_list_arg("gpu-mbench", "reps", optarg, false, &reps);
			break;
		case 'R':
			do_relay = true;
			break;
		case 'P':
			bench_list_arg("gpu-mbench", "pieces", optarg, true, &pieces);
			break;
		case 'L':
			bench_list_arg("gpu-mbench", "lanes", optarg, false, &lanes);
			break;
		case 'X':
			schemes = optarg;
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
	if (do_fanout + do_stream + do_relay != 1 || (do_fanout && (!tpeer || !trep)) ||
	    (do_stream && !topic) || per_gpu < 1 || per_gpu > 16)
		die("usage", "--fanout --topic-peer T --topic-rep T | --stream-order --topic T | "
			     "--relay");
	gpu_require("gpu-mbench");
	if (sizes.empty())
		sizes = do_fanout  ? std::vector<uint64_t>{ 4ull << 20, 64ull << 20, 1ull << 30 }
			: do_relay ? std::vector<uint64_t>{ 64ull << 20, 1ull << 30 }
				   : std::vector<uint64_t>{ 4ull << 20, 64ull << 20 };
	if (reps.empty())
		reps = do_fanout  ? std::vector<uint64_t>{ 20, 10, 5 }
		       : do_relay ? std::vector<uint64_t>{ 10, 5 }
				  : std::vector<uint64_t>{ 50, 30 };
	while (reps.size() < sizes.size())
		reps.push_back(reps.back());
	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, on_signal);
	print_header();
	CK(cudaSetDevice(0));
	if (do_relay)
		relay_bench(gpus, sizes, reps, pieces, lanes);
	else if (do_fanout)
		fanout(tpeer, trep, gpus, per_gpu, sizes, reps, schemes);
	else
		stream_order(topic, sizes, reps, work_us);
	return 0;
}
