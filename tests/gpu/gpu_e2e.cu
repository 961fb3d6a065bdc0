/*
 * gpu-e2e: the remote-path GPU numbers of rgaps in one run, with the physical
 * limits of the same machine measured alongside (docs/BENCHMARKS.md (GPU sections)).
 *
 *  1. Physical limits: cudaMemcpy D2H and H2D, pinned and pageable.
 *  2. DP1, the sender daemon's staging copy: the cuda plugin's copy_async
 *     (cudaMemcpyAsync + an event that the plugin's waiter thread polls, exactly
 *     what rgapsd runs) from a VMM pool made by the plugin into an
 *     mmap'ed, plugin-pinned buffer (what staging_setup makes), whole and in
 *     4 MiB chunks, against raw pinned cudaMemcpy D2H of the same bytes.
 *  3. End to end, publisher GPU -> rgapsd A -> tcp -> rgapsd B -> N
 *     subscriber processes on B holding a device pointer into B's GPU pool:
 *       pipelined  topic with chunking on (4 MiB chunks: D2H, wire and H2D of
 *                  successive chunks overlap);
 *       whole      topic with chunking off: the whole message D2H, then on the
 *                  wire, then H2D (the RGAPS thesis order);
 *       baseline   no rgaps: pageable cudaMemcpy D2H into a host buffer, a
 *                  plain TCP socket on loopback into a pageable shared-memory
 *                  buffer on "B", then every subscriber its own pageable
 *                  cudaMemcpy H2D into its own GPU buffer.
 *     rgaps latency = the last subscriber's take() time minus msg.ts_ns (set
 *     by rgaps_publisher_push() before its copy; CLOCK_REALTIME, one machine);
 *     baseline latency = before the D2H -> the last subscriber's H2D done.
 *     One message at a time: the next once every subscriber reported.
 *
 * Subscribers are this program re-executed with --child.
 *   gpu-e2e --sub-socket B.sock --topic-on T --topic-off T [--sizes L] [--subs L]
 *           [--reps L] [--schemes pipelined,whole,baseline] [--no-dp1]
 *   gpu-e2e --dp1-only [--sizes L] [--reps L] [--copy-spin-us N]
 *           (physical limits and DP1 alone; N: as rgapsd's copy_spin_us, 2000)
 * The publisher attaches through $RGAPS_SOCKET (daemon A); the cuda plugin
 * for DP1 is found in $RGAPS_PLUGIN_DIR. tests/gpu/gpu_e2e.sh sets it all up.
 */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <string>
#include <vector>

#include "gpu_bench_util.cuh"
#include "gpu_test.cuh"
#include "rgaps/plugin.h"
#include "rgaps/rgaps.h"

extern char **environ;

#define MAX_SUBS 16
#define REC_FD 3  /* child -> parent records */
#define CMD_FD 4  /* parent -> baseline child: sizes to copy */
#define SHM_FD 5  /* baseline: the receive buffer on "B" */
#define READY ~0ull
#define CHUNK ((uint64_t)4 << 20)
#define PING_BASE 4096u	       /* ping k: PING_BASE + 64 k bytes */
#define SYNC_SIZE (4096u + 8u) /* the last ping: not a multiple of 64 */
#define REC_TIMEOUT_MS 60000

enum { CH_RGAPS = 0, CH_BASELINE = 1 };
enum { S_PIPE, S_WHOLE, S_BASE, NSCHEMES };
static const char *const scheme_names[NSCHEMES] = { "pipelined", "whole", "baseline" };

struct rec {
	uint64_t seq, size;
	uint64_t t_mono, t_rt, ts_ns;
	int64_t status;
};

static volatile sig_atomic_t stop;

static void on_signal(int)
{
	stop = 1;
}

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "gpu-e2e: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
	exit(1);
}

static uint64_t now_rt(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bool write_all(int fd, const void *p, size_t n)
{
	const char *c = (const char *)p;

	while (n) {
		ssize_t w = write(fd, c, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		c += w;
		n -= (size_t)w;
	}
	return true;
}

static bool read_all(int fd, void *p, size_t n)
{
	char *c = (char *)p;

	while (n) {
		ssize_t r = read(fd, c, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		c += r;
		n -= (size_t)r;
	}
	return true;
}

/* ---------------------------------------------------------------- children */

static int child_rgaps(const char *topic)
{
	rgaps_subscriber_t *sub = rgaps_subscriber_init(topic);
	rec r = { READY, 0, 0, 0, 0, 0 };

	if (!sub)
		die("child: cannot attach", strerror(errno));
	if (!write_all(REC_FD, &r, sizeof(r)))
		return 1;
	while (!stop) {
		rgaps_msg_t m;
		int e = rgaps_subscriber_take(sub, &m, 1000);

		if (e == -ETIMEDOUT || e == -EINTR || e == -EAGAIN)
			continue;
		r.t_rt = now_rt();
		r.t_mono = gpu_now_ns();
		r.status = e;
		if (e == 0) {
			r.seq = m.seq;
			r.size = m.size;
			r.ts_ns = m.ts_ns;
			rgaps_subscriber_release(sub, &m);
		}
		if (!write_all(REC_FD, &r, sizeof(r)) || e)
			break;
	}
	rgaps_subscriber_destroy(sub);
	return 0;
}

static int child_baseline(uint64_t max_size)
{
	rec r = { READY, 0, 0, 0, 0, 0 };
	void *own, *shm;
	uint64_t n;

	CK(cudaMalloc(&own, max_size));
	CK(cudaMemset(own, 0, max_size));
	CK(cudaDeviceSynchronize());
	shm = mmap(NULL, max_size, PROT_READ, MAP_SHARED, SHM_FD, 0);
	if (shm == MAP_FAILED)
		die("child: mmap of the receive buffer", strerror(errno));
	if (!write_all(REC_FD, &r, sizeof(r)))
		return 1;
	while (!stop && read_all(CMD_FD, &n, sizeof(n))) {
		CK(cudaMemcpy(own, shm, n, cudaMemcpyHostToDevice)); /* pageable */
		CK(cudaDeviceSynchronize());
		r.t_mono = gpu_now_ns();
		r.t_rt = now_rt();
		r.seq++;
		r.size = n;
		r.status = 0;
		if (!write_all(REC_FD, &r, sizeof(r)))
			break;
	}
	munmap(shm, max_size);
	cudaFree(own);
	return 0;
}

/* ---------------------------------------------------------------- parent side */

struct child {
	pid_t pid;
	int rec_fd; /* read end of its records */
	int cmd_fd; /* write end of its commands (baseline), else -1 */
};

/* One record from c within timeout_ms; false on timeout or exit. */
static bool read_rec(const child &c, rec *r, int timeout_ms)
{
	size_t got = 0;

	while (got < sizeof(*r)) {
		struct pollfd p = { c.rec_fd, POLLIN, 0 };
		ssize_t n;

		if (poll(&p, 1, timeout_ms) <= 0)
			return false;
		n = read(c.rec_fd, (char *)r + got, sizeof(*r) - got);
		if (n <= 0)
			return false;
		got += (size_t)n;
	}
	return r->status == 0;
}

static char **env_with_socket(const char *sock)
{
	static std::vector<std::string> strs;
	static std::vector<char *> ptrs;

	strs.clear();
	ptrs.clear();
	for (char **e = environ; *e; e++)
		if (strncmp(*e, "RGAPS_SOCKET=", 13) != 0)
			strs.push_back(*e);
	if (sock)
		strs.push_back(std::string("RGAPS_SOCKET=") + sock);
	for (std::string &s : strs)
		ptrs.push_back(&s[0]);
	ptrs.push_back(NULL);
	return ptrs.data();
}

static void reap(std::vector<child> &kids)
{
	for (const child &c : kids) {
		if (c.cmd_fd >= 0)
			close(c.cmd_fd);
		kill(c.pid, SIGTERM);
	}
	for (const child &c : kids) {
		bench_wait_or_kill(c.pid);
		close(c.rec_fd);
	}
	kids.clear();
}

/* fd moved to 16 or above (close-on-exec), so that the child's dup2 to 3..5 never collide. */
static int high_fd(int fd)
{
	int h = fcntl(fd, F_DUPFD_CLOEXEC, 16);

	if (h < 0)
		die("fcntl", strerror(errno));
	close(fd);
	return h;
}

static bool spawn(std::vector<child> &kids, int n, int mode, const char *topic,
		  uint64_t max_size, const char *sub_socket, int shm_fd)
{
	char modes[8], maxs[32];

	snprintf(modes, sizeof(modes), "%d", mode);
	snprintf(maxs, sizeof(maxs), "%llu", (unsigned long long)max_size);
	for (int i = 0; i < n; i++) {
		posix_spawn_file_actions_t fa;
		char *argv[] = { (char *)"gpu-e2e", (char *)"--child", modes, (char *)topic, maxs,
				 NULL };
		int rp[2], cp[2] = { -1, -1 };
		child c;

		if (pipe2(rp, O_CLOEXEC) || (mode == CH_BASELINE && pipe2(cp, O_CLOEXEC)))
			die("pipe2", strerror(errno));
		rp[1] = high_fd(rp[1]);
		if (cp[0] >= 0)
			cp[0] = high_fd(cp[0]);
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_adddup2(&fa, rp[1], REC_FD);
		if (mode == CH_BASELINE) {
			posix_spawn_file_actions_adddup2(&fa, cp[0], CMD_FD);
			posix_spawn_file_actions_adddup2(&fa, shm_fd, SHM_FD);
		}
		if (posix_spawn(&c.pid, "/proc/self/exe", &fa, NULL, argv,
				env_with_socket(mode == CH_RGAPS ? sub_socket : NULL)))
			die("posix_spawn", strerror(errno));
		posix_spawn_file_actions_destroy(&fa);
		close(rp[1]);
		if (cp[0] >= 0)
			close(cp[0]);
		c.rec_fd = rp[0];
		c.cmd_fd = cp[1];
		kids.push_back(c);
	}
	for (const child &c : kids) {
		rec r;

		if (!read_rec(c, &r, REC_TIMEOUT_MS) || r.seq != READY)
			return false;
	}
	return true;
}

/*
 * Until every subscriber on B receives: the ring from A to B is set up only
 * once A has heard of B's subscribers. Pings (PING_BASE + 64 k bytes) every
 * 200 ms until each child got one, then one SYNC_SIZE message; every record
 * up to it is discarded, so the queues are empty when measuring starts.
 */
static bool sync_children(rgaps_publisher_t *pub, const void *dbuf, std::vector<child> &kids)
{
	std::vector<bool> got(kids.size(), false), synced(kids.size(), false);
	size_t ngot = 0, nsync = 0;
	uint64_t deadline = gpu_now_ns() + 30000000000ull;

	for (uint32_t k = 0; ngot < kids.size(); k++) {
		if (gpu_now_ns() > deadline)
			return false;
		if (rgaps_publisher_push(pub, PING_BASE + 64 * (k % 64), dbuf))
			return false;
		for (uint64_t until = gpu_now_ns() + 200000000ull; gpu_now_ns() < until;) {
			for (size_t i = 0; i < kids.size(); i++) {
				struct pollfd p = { kids[i].rec_fd, POLLIN, 0 };
				rec r;

				if (poll(&p, 1, 0) <= 0)
					continue;
				if (!read_rec(kids[i], &r, 1000))
					return false;
				if (!got[i]) {
					got[i] = true;
					ngot++;
				}
			}
			usleep(1000);
		}
	}
	if (rgaps_publisher_push(pub, SYNC_SIZE, dbuf))
		return false;
	while (nsync < kids.size()) {
		for (size_t i = 0; i < kids.size(); i++) {
			rec r;

			if (synced[i])
				continue;
			if (!read_rec(kids[i], &r, 10000))
				return false;
			if (r.size == SYNC_SIZE) {
				synced[i] = true;
				nsync++;
			}
		}
	}
	return true;
}

/* ---------------------------------------------------------------- baseline transport */

struct bl_rx {
	int lfd, sfd;
	uint8_t *shm;
	std::vector<child> *kids;
	int tpipe[2]; /* receiver -> main: t_recv per message */
};

/* "rgapsd B" of the baseline: receive each message into the shared buffer, tell every
 * subscriber. */
static void *bl_receiver(void *arg)
{
	bl_rx *rx = (bl_rx *)arg;
	uint64_t n;
	int one = 1;

	rx->sfd = accept(rx->lfd, NULL, NULL);
	if (rx->sfd < 0)
		return NULL;
	setsockopt(rx->sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	while (read_all(rx->sfd, &n, sizeof(n)) && n) {
		uint64_t t;

		if (!read_all(rx->sfd, rx->shm, n))
			break;
		t = gpu_now_ns();
		for (const child &c : *rx->kids)
			if (!write_all(c.cmd_fd, &n, sizeof(n)))
				break;
		if (!write_all(rx->tpipe[1], &t, sizeof(t)))
			break;
	}
	close(rx->sfd);
	return NULL;
}

/* ---------------------------------------------------------------- DP1 via the plugin */

struct dp1_sig {
	int efd;
	int status;
};

/* rgapsd's copy_spin_us (--copy-spin-us): how its loop waits for a copy's end. */
static uint64_t dp1_spin_ns = 2000000;

/*
 * Wait for completions on the eventfd (non-blocking) as rgapsd's loop waits for
 * its mailbox: polling it without sleeping until dp1_spin_ns after the last copy
 * started or ended (since_ns), then sleeping in poll(). Returns how many.
 */
static uint64_t dp1_wait(int efd, uint64_t since_ns)
{
	uint64_t got;

	for (;;) {
		ssize_t r = read(efd, &got, sizeof(got));

		if (r == sizeof(got))
			return got;
		if (r >= 0 || errno != EAGAIN)
			die("DP1", "eventfd read");
		if (gpu_now_ns() - since_ns > dp1_spin_ns) {
			struct pollfd p = { efd, POLLIN, 0 };

			if (poll(&p, 1, -1) < 0 && errno != EINTR)
				die("DP1", "poll");
		}
	}
}

static void dp1_done(void *arg, int status)
{
	dp1_sig *s = (dp1_sig *)arg;
	uint64_t one = 1;

	if (status)
		s->status = status;
	if (write(s->efd, &one, sizeof(one)) != sizeof(one))
		s->status = -EIO;
}

/*
 * A prototype of another completion scheme, measured beside the plugin's (not
 * used by rgapsd): copies queued back to back on a stream with an event after
 * each, and one thread that waits for the events in order and signals the
 * eventfd. The stream never waits for host code, unlike a stream host
 * function, which holds every later copy of its stream until it has run.
 */
struct evq {
	pthread_mutex_t m;
	pthread_cond_t c;
	std::deque<cudaEvent_t> q;
	bool stop;
	int efd;
};

static void *evq_main(void *arg)
{
	evq *e = (evq *)arg;
	uint64_t one = 1;

	CK(cudaSetDevice(0));
	for (;;) {
		cudaEvent_t ev;

		pthread_mutex_lock(&e->m);
		while (e->q.empty() && !e->stop)
			pthread_cond_wait(&e->c, &e->m);
		if (e->q.empty()) {
			pthread_mutex_unlock(&e->m);
			return NULL;
		}
		ev = e->q.front();
		e->q.pop_front();
		pthread_mutex_unlock(&e->m);
		CK(cudaEventSynchronize(ev));
		if (write(e->efd, &one, sizeof(one)) != sizeof(one))
			return NULL;
	}
}

/* k copies of len (the last shorter) with an event each; wait for k signals; ms. */
static double evq_run(evq *e, cudaStream_t s, std::vector<cudaEvent_t> &evs, uint8_t *dst,
		      const uint8_t *src, uint64_t n, uint64_t chunk)
{
	uint64_t k_n = (n + chunk - 1) / chunk, want = k_n, got, t0 = gpu_now_ns();

	for (uint64_t k = 0; k < k_n; k++) {
		uint64_t off = k * chunk;

		CK(cudaMemcpyAsync(dst + off, src + off, std::min(chunk, n - off),
				   cudaMemcpyDeviceToHost, s));
		CK(cudaEventRecord(evs[k], s));
		pthread_mutex_lock(&e->m);
		e->q.push_back(evs[k]);
		pthread_cond_signal(&e->c);
		pthread_mutex_unlock(&e->m);
	}
	while (want) {
		if (read(e->efd, &got, sizeof(got)) != sizeof(got))
			die("DP1", "eventfd read");
		want -= std::min(want, got);
	}
	return (gpu_now_ns() - t0) / 1e6;
}

/*
 * Second prototype, keeping the stream host function of the design: the copy
 * stream records an event after each copy; a second stream waits for that
 * event and runs the host function. Completions stay in order (one callback
 * stream), and the copy stream never waits for host code.
 */
static void CUDART_CB hf2_fn(void *arg)
{
	dp1_done(arg, 0);
}

static double hf2_run(cudaStream_t cs, cudaStream_t cbs, std::vector<cudaEvent_t> &evs,
		      dp1_sig *sig, uint8_t *dst, const uint8_t *src, uint64_t n, uint64_t chunk)
{
	uint64_t k_n = (n + chunk - 1) / chunk, want = k_n, got, t0 = gpu_now_ns();

	for (uint64_t k = 0; k < k_n; k++) {
		uint64_t off = k * chunk;

		CK(cudaMemcpyAsync(dst + off, src + off, std::min(chunk, n - off),
				   cudaMemcpyDeviceToHost, cs));
		CK(cudaEventRecord(evs[k], cs));
		CK(cudaStreamWaitEvent(cbs, evs[k], 0));
		CK(cudaLaunchHostFunc(cbs, hf2_fn, sig));
	}
	for (uint64_t since = t0; want; since = gpu_now_ns()) {
		got = dp1_wait(sig->efd, since);
		want -= std::min(want, got);
	}
	return (gpu_now_ns() - t0) / 1e6;
}

/*
 * The plugin's staging of n bytes, in copies of step bytes queued back to back
 * (what stage_pump does), until every completion reached the eventfd, read as
 * rgapsd's loop reads its mailbox (dp1_wait): ms.
 */
static double plugin_stage(const struct rgaps_memory_ops *ops, void *ctx, dp1_sig *sig,
			   uint8_t *dst, const uint8_t *src, uint64_t n, uint64_t step)
{
	uint64_t want = 0, got, t0 = gpu_now_ns();

	for (uint64_t off = 0; off < n; off += step, want++)
		if (ops->copy_async(ctx, dst + off, (uint8_t *)src + off, std::min(step, n - off),
				    RGAPS_COPY_FROM_POOL, dp1_done, sig))
			die("DP1", "copy_async refused");
	for (uint64_t since = t0; want; since = gpu_now_ns()) {
		got = dp1_wait(sig->efd, since);
		want -= std::min(want, got);
	}
	return (gpu_now_ns() - t0) / 1e6;
}

static void dp1_bench(const std::vector<uint64_t> &sizes, const std::vector<uint64_t> &reps)
{
	const char *dir = getenv("RGAPS_PLUGIN_DIR");
	std::string path = std::string(dir ? dir : ".") + "/memory-cuda.so";
	void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
	const struct rgaps_plugin *pl;
	const struct rgaps_memory_ops *ops;
	struct rgaps_plugin_env env = {};
	struct rgaps_mem_region region = {};
	uint64_t max = *std::max_element(sizes.begin(), sizes.end());
	dp1_sig sig = { -1, 0 };
	cudaStream_t s;
	uint8_t *stg;
	void *ctx;
	char sb[32];

	printf("\n== DP1: rgapsd's staging copy (plugin copy_async, as staging_setup/stage_pump "
	       "run it) vs raw pinned cudaMemcpy D2H (median ms, GB/s) ==\n");
	if (!h || !(pl = (const struct rgaps_plugin *)dlsym(h, RGAPS_PLUGIN_SYMBOL))) {
		printf("  not measured: cannot load %s (%s)\n", path.c_str(), dlerror());
		return;
	}
	ops = (const struct rgaps_memory_ops *)pl->ops;
	env.struct_size = sizeof(env);
	env.role = RGAPS_ROLE_DAEMON;
	env.log = bench_plugin_log;
	if (ops->init(&env, &ctx) ||
	    ops->pool_create(ctx, "rgaps-e2e-dp1-pool", max, 0, &region)) {
		printf("  not measured: plugin init / pool_create failed\n");
		return;
	}
	stg = (uint8_t *)mmap(NULL, max, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (stg == MAP_FAILED || ops->host_register(ctx, stg, max))
		die("DP1 staging buffer", "mmap or host_register failed");
	sig.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	pattern_fill(region.base, max, 7, s);
	CK(cudaStreamSynchronize(s));

	/* The prototype: spinning and blocking-sync events, one completion thread each. */
	evq eq[2];
	pthread_t eth[2];
	std::vector<cudaEvent_t> evs[2];
	cudaStream_t cbs;
	uint64_t max_chunks = (max + CHUNK - 1) / CHUNK;

	for (int m = 0; m < 2; m++) {
		pthread_mutex_init(&eq[m].m, NULL);
		pthread_cond_init(&eq[m].c, NULL);
		eq[m].stop = false;
		eq[m].efd = eventfd(0, EFD_CLOEXEC);
		evs[m].resize(max_chunks);
		for (cudaEvent_t &ev : evs[m])
			CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming |
							       (m ? cudaEventBlockingSync : 0)));
		if (pthread_create(&eth[m], NULL, evq_main, &eq[m]))
			die("DP1", "pthread_create");
	}
	CK(cudaStreamCreateWithFlags(&cbs, cudaStreamNonBlocking));
	printf("rates: median ms and GB/s per message; ratios: raw cudaMemcpy time / this time.\n"
	       "plugin = cuda_copy_async (cudaMemcpyAsync + event, the plugin's waiter polls then "
	       "sleeps), what rgapsd runs, its end read as rgapsd's loop reads it (polling "
	       "for copy_spin_us = %llu us, then sleeping);\nevent-spin / event-block = prototype (copy + cudaEventRecord, one "
	       "thread waiting in order; spinning / blocking-sync events), not in rgapsd;\n"
	       "hostfn-2nd = prototype: the same host function, launched on a second stream "
	       "after an event of the copy stream, not in rgapsd.\n",
	       (unsigned long long)(dp1_spin_ns / 1000));
	printf("%-7s %21s %21s %21s %21s %21s %21s %21s %21s %21s | %6s %6s %6s %6s %6s %6s "
	       "%6s\n",
	       "size", "raw cudaMemcpy", "raw async 4MiB x k", "plugin whole", "plugin 4MiB x k",
	       "event-spin whole", "event-spin 4MiB x k", "event-block 4MiB x k",
	       "hostfn-2nd whole", "hostfn-2nd 4MiB x k", "pl-w", "pl-4M", "es-w", "es-4M",
	       "eb-4M", "h2-w", "h2-4M");
	for (size_t i = 0; i < sizes.size(); i++) {
		uint64_t n = sizes[i];
		uint64_t nchunks = (n + CHUNK - 1) / CHUNK;
		std::vector<double> t[9];

		for (uint64_t rep = 0; rep < reps[i] + 1; rep++) {
			uint64_t t0;

			t0 = gpu_now_ns();
			CK(cudaMemcpy(stg, region.base, n, cudaMemcpyDeviceToHost));
			if (rep)
				t[0].push_back((gpu_now_ns() - t0) / 1e6);

			t0 = gpu_now_ns();
			for (uint64_t k = 0; k < nchunks; k++) {
				uint64_t off = k * CHUNK;

				CK(cudaMemcpyAsync(stg + off, (uint8_t *)region.base + off,
						   std::min(CHUNK, n - off), cudaMemcpyDeviceToHost,
						   s));
			}
			CK(cudaStreamSynchronize(s));
			if (rep)
				t[1].push_back((gpu_now_ns() - t0) / 1e6);

			for (int mode = 0; mode < 2; mode++) {
				double ms = plugin_stage(ops, ctx, &sig, stg, (uint8_t *)region.base, n,
							 mode ? CHUNK : n);

				if (rep)
					t[2 + mode].push_back(ms);
			}
			{
				double a = evq_run(&eq[0], s, evs[0], stg, (uint8_t *)region.base, n, n);
				double b = evq_run(&eq[0], s, evs[0], stg, (uint8_t *)region.base, n,
						   CHUNK);
				double c = evq_run(&eq[1], s, evs[1], stg, (uint8_t *)region.base, n,
						   CHUNK);

				double d = hf2_run(s, cbs, evs[0], &sig, stg, (uint8_t *)region.base,
						   n, n);
				double e = hf2_run(s, cbs, evs[0], &sig, stg, (uint8_t *)region.base,
						   n, CHUNK);

				if (rep) {
					t[4].push_back(a);
					t[5].push_back(b);
					t[6].push_back(c);
					t[7].push_back(d);
					t[8].push_back(e);
				}
			}
		}
		if (sig.status)
			die("DP1", "a copy reported an error");
		printf("%-7s", bench_size_str(n, sb, sizeof(sb)));
		for (int k = 0; k < 9; k++)
			printf(" %8.3f ms %5.1f GB/s", bench_median(t[k]), n / (bench_median(t[k]) * 1e6));
		printf(" |");
		for (int k : { 2, 3, 4, 5, 6, 7, 8 })
			printf(" %6.3f", bench_median(t[0]) / bench_median(t[k]));
		printf("\n");
		fflush(stdout);
	}
	/*
	 * The plugin's copy tunables (docs/GPU.md, "Copies and streams"), each in its own
	 * plugin context: copy streams per device, and copies split over them. One
	 * RESULT line per point: the ratio raw cudaMemcpy D2H time / staging time,
	 * measured back to back in the same repetition (target >= 0.95).
	 */
	{
		static const struct {
			const char *name, *streams, *split;
		} var[] = {
			{ "1stream", "1", "0" },
			{ "2streams", "2", "0" },
			{ "2streams-split", "2", "4194304" },
			{ "4streams", "4", "0" },
		};
		static const uint64_t chunks[] = { 0, CHUNK, 2 * CHUNK, 4 * CHUNK };

		printf("\n== DP1 variants of the plugin's copies (RESULT lines: median ms; ratio = raw "
		       "cudaMemcpy / staging) ==\n");
		for (const auto &v : var) {
			void *vctx = NULL;

			setenv("RGAPS_CUDA_COPY_STREAMS", v.streams, 1);
			setenv("RGAPS_CUDA_SPLIT_MIN", v.split, 1);
			if (ops->init(&env, &vctx)) {
				printf("  variant %s: plugin init failed\n", v.name);
				continue;
			}
			for (size_t i = 0; i < sizes.size(); i++) {
				uint64_t n = sizes[i];

				for (uint64_t ch : chunks) {
					std::vector<double> raw, pl;
					uint64_t step = ch ? ch : n;

					if (ch && ch >= n && ch != CHUNK)
						continue; /* one chunk: the same as whole */
					for (uint64_t rep = 0; rep < reps[i] + 1; rep++) {
						uint64_t t0 = gpu_now_ns();
						double ms;

						CK(cudaMemcpy(stg, region.base, n, cudaMemcpyDeviceToHost));
						if (rep)
							raw.push_back((gpu_now_ns() - t0) / 1e6);
						ms = plugin_stage(ops, vctx, &sig, stg,
								  (uint8_t *)region.base, n, step);
						if (rep)
							pl.push_back(ms);
					}
					printf("RESULT dp1 variant=%s mode=%s size=%s raw_ms=%.4f ms=%.4f "
					       "ratio=%.4f\n", v.name,
					       ch ? (ch == CHUNK ? "chunks4MiB" : ch == 2 * CHUNK ? "chunks8MiB" :
											     "chunks16MiB") :
						    "whole",
					       bench_size_str(n, sb, sizeof(sb)), bench_median(raw),
					       bench_median(pl), bench_median(raw) / bench_median(pl));
					fflush(stdout);
				}
			}
			ops->fini(vctx);
		}
		unsetenv("RGAPS_CUDA_COPY_STREAMS");
		unsetenv("RGAPS_CUDA_SPLIT_MIN");
		if (sig.status)
			die("DP1", "a copy of a variant reported an error");
	}

	/* Verify the staged bytes once: what D2H put there is the pattern. */
	{
		uint64_t counter;

		if (gpu_ref_pattern_check(stg, max, &counter) != -1 || counter != 7)
			printf("  WARNING: staged bytes do not match the pool\n");
		else
			printf("  staged bytes checked against the pattern: ok\n");
	}
	for (int m = 0; m < 2; m++) {
		pthread_mutex_lock(&eq[m].m);
		eq[m].stop = true;
		pthread_cond_signal(&eq[m].c);
		pthread_mutex_unlock(&eq[m].m);
		pthread_join(eth[m], NULL);
		for (cudaEvent_t ev : evs[m])
			CK(cudaEventDestroy(ev));
		close(eq[m].efd);
	}
	CK(cudaStreamDestroy(cbs));
	ops->host_unregister(ctx, stg);
	munmap(stg, max);
	ops->pool_release(ctx, &region);
	ops->fini(ctx);
	CK(cudaStreamDestroy(s));
	close(sig.efd);
}

/* ---------------------------------------------------------------- main */

static void read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");

	if (!f)
		return;
	if (fgets(buf, (int)len, f))
		buf[strcspn(buf, "\n")] = 0;
	fclose(f);
}

static void print_header(void)
{
	struct bench_machine m;

	bench_machine_get(&m);
	{
		/* PCIe link as the kernel reports it (sysfs wants the bus id in lower case). */
		char bus[32] = "", path[128], speed[64] = "?", width[16] = "?";

		if (cudaDeviceGetPCIBusId(bus, sizeof(bus), 0) == cudaSuccess) {
			for (char *c = bus; *c; c++)
				*c = (char)tolower((unsigned char)*c);
			snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/current_link_speed", bus);
			read_line(path, speed, sizeof(speed));
			snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/current_link_width", bus);
			read_line(path, width, sizeof(width));
		}
		printf("gpu-e2e: %s (sm_%d%d, %d SMs, %.1f GiB), PCI %s link %s x%s, driver %s "
		       "(CUDA %d.%d), runtime %d.%d\n",
		       m.p.name, m.p.major, m.p.minor, m.p.multiProcessorCount,
		       m.p.totalGlobalMem / (double)(1ull << 30), bus, speed, width, m.drv, m.dv / 1000,
		       m.dv % 1000 / 10, m.rv / 1000, m.rv % 1000 / 10);
	}
	printf("gpu-e2e: %s, host %s, %ld CPUs\n", m.date, m.host, sysconf(_SC_NPROCESSORS_ONLN));
}

struct cell {
	std::vector<double> lat, first, mono, push;	  /* rgaps: ts-based, first sub, t0-based, call */
	std::vector<double> d2h, wire, h2d;		  /* baseline stages */
	bool broken = false;
};

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "sub-socket", required_argument, NULL, 'b' },
		{ "topic-on", required_argument, NULL, 'p' },
		{ "topic-off", required_argument, NULL, 'w' },
		{ "sizes", required_argument, NULL, 's' },
		{ "subs", required_argument, NULL, 'n' },
		{ "reps", required_argument, NULL, 'r' },
		{ "schemes", required_argument, NULL, 'S' },
		{ "no-dp1", no_argument, NULL, 'D' },
		{ "dp1-only", no_argument, NULL, 'O' },
		{ "copy-spin-us", required_argument, NULL, 'C' },
		{ NULL, 0, NULL, 0 },
	};
	const char *sub_socket = NULL, *topics[2] = { NULL, NULL }, *only = NULL;
	std::vector<uint64_t> sizes = { 4ull << 20, 64ull << 20, 1ull << 30 };
	std::vector<uint64_t> subs = { 1, 2, 4, 8 }, reps = { 30, 20, 6 };
	bool dp1 = true, dp1_only = false;
	uint64_t max_size;
	uint8_t *dbuf, *pinned, *pageable;
	char sb[32];
	int o;

	if (argc == 5 && strcmp(argv[1], "--child") == 0) {
		struct sigaction sa;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_signal;
		sigaction(SIGTERM, &sa, NULL);
		gpu_require("gpu-e2e child");
		CK(cudaSetDevice(0));
		CK(cudaFree(0));
		if (atoi(argv[2]) == CH_BASELINE)
			return child_baseline(strtoull(argv[4], NULL, 10));
		return child_rgaps(argv[3]);
	}
	std::string bad; /* a --sizes, --subs or --reps item that is neither */

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'b':
			sub_socket = optarg;
			break;
		case 'p':
			topics[S_PIPE] = optarg;
			break;
		case 'w':
			topics[S_WHOLE] = optarg;
			break;
		case 's':
			if (!bench_parse_list(optarg, true, &sizes, &bad))
				die("bad list item", bad.c_str());
			break;
		case 'n':
			if (!bench_parse_list(optarg, false, &subs, &bad))
				die("bad list item", bad.c_str());
			break;
		case 'r':
			if (!bench_parse_list(optarg, false, &reps, &bad))
				die("bad list item", bad.c_str());
			break;
		case 'S':
			only = optarg;
			break;
		case 'D':
			dp1 = false;
			break;
		case 'O':
			dp1_only = true;
			break;
		case 'C':
			dp1_spin_ns = strtoull(optarg, NULL, 10) * 1000ull;
			break;
		default:
			fprintf(stderr, "usage: gpu-e2e --sub-socket B.sock --topic-on T --topic-off T "
					"[--sizes L] [--subs L] [--reps L] [--schemes L] [--no-dp1]\n"
					"       gpu-e2e --dp1-only [--sizes L] [--reps L] "
					"[--copy-spin-us N]\n");
			return 2;
		}
	}
	if (!dp1_only && (!sub_socket || !topics[S_PIPE] || !topics[S_WHOLE]))
		die("--sub-socket, --topic-on and --topic-off are required", NULL);
	while (reps.size() < sizes.size())
		reps.push_back(reps.back());
	for (uint64_t n : subs)
		if (n > MAX_SUBS)
			die("at most 16 subscribers", NULL);
	gpu_require("gpu-e2e");
	max_size = *std::max_element(sizes.begin(), sizes.end());
	signal(SIGPIPE, SIG_IGN);

	print_header();
	CK(cudaSetDevice(0));
	CK(cudaMalloc(&dbuf, max_size));
	pattern_fill(dbuf, max_size, 42, 0);
	CK(cudaDeviceSynchronize());
	CK(cudaMallocHost(&pinned, max_size));
	pageable = (uint8_t *)malloc(max_size);
	if (!pageable)
		die("out of host memory", NULL);
	memset(pageable, 1, max_size);

	/* 1. physical limits */
	printf("\n== physical limits: cudaMemcpy, median (ms, GB/s) ==\n");
	printf("%-7s %22s %22s %22s %22s\n", "size", "D2H pinned", "D2H pageable", "H2D pinned",
	       "H2D pageable");
	std::vector<double> h2d_pinned(sizes.size()), d2h_pinned(sizes.size());
	for (size_t i = 0; i < sizes.size(); i++) {
		uint64_t n = sizes[i];
		int r = (int)reps[i];
		double t[4] = {
			bench_time_copy(pinned, dbuf, n, r), bench_time_copy(pageable, dbuf, n, r),
			bench_time_copy(dbuf, pinned, n, r), bench_time_copy(dbuf, pageable, n, r),
		};

		d2h_pinned[i] = t[0];
		h2d_pinned[i] = t[2];
		printf("%-7s", bench_size_str(n, sb, sizeof(sb)));
		for (int k = 0; k < 4; k++)
			printf(" %9.3f ms %6.1f GB/s", t[k], n / (t[k] * 1e6));
		printf("\n");
	}
	fflush(stdout);

	/* 2. DP1 */
	if (dp1 || dp1_only)
		dp1_bench(sizes, reps);
	if (dp1_only)
		return 0;

	/* 3. end to end */
	rgaps_publisher_t *pubs[2];
	for (int k = 0; k < 2; k++) {
		rgaps_topic_info_t info = {};

		info.struct_size = sizeof(info);
		pubs[k] = rgaps_publisher_init(topics[k]);
		if (!pubs[k])
			die("cannot attach a publisher to daemon A", strerror(errno));
		rgaps_publisher_info(pubs[k], &info);
		if (info.memory != RGAPS_MEMORY_CUDA || info.max_message_size < max_size)
			die("topics must be on memory cuda with max_message_size >= the largest size",
			    topics[k]);
	}
	/* The baseline's socket and receive buffer. */
	int shm_fd = memfd_create("gpu-e2e-baseline", MFD_CLOEXEC);
	uint8_t *shm;
	bl_rx rx = {};
	struct sockaddr_in sa = {};
	socklen_t salen = sizeof(sa);

	if (shm_fd < 0 || ftruncate(shm_fd, (off_t)max_size))
		die("memfd", strerror(errno));
	shm_fd = high_fd(shm_fd);
	shm = (uint8_t *)mmap(NULL, max_size, PROT_READ | PROT_WRITE, MAP_SHARED, shm_fd, 0);
	if (shm == MAP_FAILED)
		die("mmap", strerror(errno));
	memset(shm, 0, max_size);

	std::vector<std::vector<std::vector<cell>>> res(
		NSCHEMES, std::vector<std::vector<cell>>(subs.size(), std::vector<cell>(sizes.size())));
	std::vector<bool> ran(NSCHEMES, false);

	printf("\n== end-to-end runs (one line per scheme, N, size; ms) ==\n");
	fflush(stdout);
	for (int si = 0; si < NSCHEMES; si++) {
		if (only && !strstr((std::string(",") + only + ",").c_str(),
				    (std::string(",") + scheme_names[si] + ",").c_str()))
			continue;
		ran[si] = true;
		for (size_t ni = 0; ni < subs.size(); ni++) {
			std::vector<child> kids;
			pthread_t thr;
			int sfd = -1;
			bool ok;

			if (si == S_BASE) {
				int one = 1;

				rx.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
				sa.sin_family = AF_INET;
				sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
				sa.sin_port = 0;
				if (rx.lfd < 0 || bind(rx.lfd, (struct sockaddr *)&sa, sizeof(sa)) ||
				    listen(rx.lfd, 1) ||
				    getsockname(rx.lfd, (struct sockaddr *)&sa, &salen))
					die("baseline socket", strerror(errno));
				ok = spawn(kids, (int)subs[ni], CH_BASELINE, "-", max_size, NULL, shm_fd);
				rx.shm = shm;
				rx.kids = &kids;
				if (pipe2(rx.tpipe, O_CLOEXEC) ||
				    pthread_create(&thr, NULL, bl_receiver, &rx))
					die("baseline receiver", strerror(errno));
				sfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
				if (sfd < 0 || connect(sfd, (struct sockaddr *)&sa, sizeof(sa)))
					die("baseline connect", strerror(errno));
				setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			} else {
				ok = spawn(kids, (int)subs[ni], CH_RGAPS, topics[si], max_size,
					   sub_socket, -1) &&
				     sync_children(pubs[si], dbuf, kids);
			}
			if (!ok)
				printf("  %-9s N=%-2llu: subscribers did not start or never received a "
				       "message: skipped\n",
				       scheme_names[si], (unsigned long long)subs[ni]);
			for (size_t zi = 0; ok && zi < sizes.size(); zi++) {
				uint64_t n = sizes[zi];
				cell &c = res[si][ni][zi];

				for (uint64_t rep = 0; rep < reps[zi] + 1 && ok; rep++) {
					uint64_t t0 = gpu_now_ns(), t1 = 0, t_recv = 0, last = 0,
						 last_rt = 0, first_rt = UINT64_MAX, ts = 0;

					if (si == S_BASE) {
						CK(cudaMemcpy(pageable, dbuf, n, cudaMemcpyDeviceToHost));
						t1 = gpu_now_ns();
						if (!write_all(sfd, &n, sizeof(n)) ||
						    !write_all(sfd, pageable, n) ||
						    !read_all(rx.tpipe[0], &t_recv, sizeof(t_recv)))
							die("baseline transfer", strerror(errno));
					} else {
						int e = rgaps_publisher_push(pubs[si], n, dbuf);

						t1 = gpu_now_ns();
						if (e) {
							printf("  %s: push failed: %s\n", scheme_names[si],
							       rgaps_strerror(e));
							ok = false;
							break;
						}
					}
					for (const child &k : kids) {
						rec r;

						if (!read_rec(k, &r, REC_TIMEOUT_MS) || r.size != n) {
							printf("  %-9s N=%-2llu %s: a subscriber reported "
							       "nothing (or the wrong message) in %d s: "
							       "stopped\n",
							       scheme_names[si],
							       (unsigned long long)subs[ni],
							       bench_size_str(n, sb, sizeof(sb)),
							       REC_TIMEOUT_MS / 1000);
							ok = false;
							c.broken = true;
							break;
						}
						last = std::max(last, r.t_mono);
						last_rt = std::max(last_rt, r.t_rt);
						first_rt = std::min(first_rt, r.t_rt);
						ts = r.ts_ns;
					}
					if (!ok || rep == 0)
						continue; /* warm-up */
					if (si == S_BASE) {
						c.lat.push_back((last - t0) / 1e6);
						c.d2h.push_back((t1 - t0) / 1e6);
						c.wire.push_back((t_recv - t1) / 1e6);
						c.h2d.push_back((last - t_recv) / 1e6);
					} else {
						c.lat.push_back((last_rt - ts) / 1e6);
						c.first.push_back((first_rt - ts) / 1e6);
						c.mono.push_back((last - t0) / 1e6);
						c.push.push_back((t1 - t0) / 1e6);
					}
				}
				if (si == S_BASE)
					printf("  %-9s N=%-2llu %-6s p50 %9.3f  (D2H %8.3f  wire %8.3f  "
					       "H2D all %8.3f)  %zu msgs\n",
					       scheme_names[si], (unsigned long long)subs[ni],
					       bench_size_str(n, sb, sizeof(sb)), bench_median(c.lat), bench_median(c.d2h),
					       bench_median(c.wire), bench_median(c.h2d), c.lat.size());
				else
					printf("  %-9s N=%-2llu %-6s p50 %9.3f  (first %8.3f, t0-based "
					       "%8.3f, push call %7.3f)  %zu msgs\n",
					       scheme_names[si], (unsigned long long)subs[ni],
					       bench_size_str(n, sb, sizeof(sb)), bench_median(c.lat), bench_median(c.first),
					       bench_median(c.mono), bench_median(c.push), c.lat.size());
				fflush(stdout);
			}
			if (si == S_BASE) {
				uint64_t zero = 0;

				write_all(sfd, &zero, sizeof(zero));
				close(sfd);
				pthread_join(thr, NULL);
				close(rx.lfd);
				close(rx.tpipe[0]);
				close(rx.tpipe[1]);
			}
			reap(kids);
		}
	}

	/* 4. the tables */
	printf("\n== end to end: publisher GPU buffer -> N subscribers on B hold it on the GPU, "
	       "p50 ms ==\n");
	printf("pipelined/whole: rgaps over tcp, chunking on (4 MiB) / off; latency = last "
	       "subscriber's take() - msg.ts_ns.\nbaseline: pageable D2H, loopback TCP socket, "
	       "per-subscriber pageable H2D; latency = before D2H -> last H2D done.\n");
	printf("%-6s %3s %10s %10s %10s %10s %10s %10s %10s\n", "size", "N", "pipelined", "whole",
	       "baseline", "whole/pipe", "base/pipe", "base/whole", "pipe N/N1");
	for (size_t zi = 0; zi < sizes.size(); zi++) {
		for (size_t ni = 0; ni < subs.size(); ni++) {
			double p = bench_median(res[S_PIPE][ni][zi].lat);
			double w = bench_median(res[S_WHOLE][ni][zi].lat);
			double b = bench_median(res[S_BASE][ni][zi].lat);
			double p1 = bench_median(res[S_PIPE][0][zi].lat);

			printf("%-6s %3llu %10.3f %10.3f %10.3f", bench_size_str(sizes[zi], sb, sizeof(sb)),
			       (unsigned long long)subs[ni], p, w, b);
			printf(" %10.2f %10.2f %10.2f %10.3f\n", p > 0 ? w / p : 0, p > 0 ? b / p : 0,
			       w > 0 ? b / w : 0, p1 > 0 ? p / p1 : 0);
		}
	}
	printf("\n== where the time goes, N = 1 (ms, medians) ==\n");
	printf("rgaps stages measured in isolation in this run: push = rgaps_publisher_push() "
	       "call (D2D into A's pool);\nD2H/H2D pinned = raw cudaMemcpy above; wire = the "
	       "baseline's loopback TCP transfer of the same bytes.\n");
	printf("%-6s %8s %10s %10s %10s %10s %12s %10s %10s\n", "size", "push", "D2H pin",
	       "wire(tcp)", "H2D pin", "sum", "whole meas", "pipe meas", "max stage");
	for (size_t zi = 0; zi < sizes.size(); zi++) {
		double push = bench_median(res[S_WHOLE][0][zi].push);
		double wire = bench_median(res[S_BASE][0][zi].wire);
		double sum = push + d2h_pinned[zi] + wire + h2d_pinned[zi];
		double mx = std::max(std::max(d2h_pinned[zi], wire), h2d_pinned[zi]);

		printf("%-6s %8.3f %10.3f %10.3f %10.3f %10.3f %12.3f %10.3f %10.3f\n",
		       bench_size_str(sizes[zi], sb, sizeof(sb)), push, d2h_pinned[zi], wire,
		       h2d_pinned[zi], sum, bench_median(res[S_WHOLE][0][zi].lat),
		       bench_median(res[S_PIPE][0][zi].lat), mx);
	}
	printf("\nbaseline stages (ms, medians): D2H pageable / wire / all N H2D pageable\n");
	for (size_t zi = 0; zi < sizes.size(); zi++)
		for (size_t ni = 0; ni < subs.size(); ni++) {
			const cell &c = res[S_BASE][ni][zi];

			if (c.lat.empty())
				continue;
			printf("  %-6s N=%-2llu %9.3f %9.3f %9.3f  (wire %.2f GB/s)\n",
			       bench_size_str(sizes[zi], sb, sizeof(sb)), (unsigned long long)subs[ni],
			       bench_median(c.d2h), bench_median(c.wire), bench_median(c.h2d),
			       sizes[zi] / (bench_median(c.wire) * 1e6));
		}
	printf("\nspread (min / p50 / max ms):\n");
	for (int si = 0; si < NSCHEMES; si++)
		for (size_t zi = 0; zi < sizes.size(); zi++)
			for (size_t ni = 0; ni < subs.size(); ni++) {
				std::vector<double> v = res[si][ni][zi].lat;

				if (v.empty())
					continue;
				std::sort(v.begin(), v.end());
				printf("  %-9s %-6s N=%-2llu %9.3f %9.3f %9.3f  (%zu msgs)%s\n",
				       scheme_names[si], bench_size_str(sizes[zi], sb, sizeof(sb)),
				       (unsigned long long)subs[ni], v.front(), bench_median(v), v.back(),
				       v.size(), res[si][ni][zi].broken ? " BROKEN" : "");
			}
	for (int k = 0; k < 2; k++)
		rgaps_publisher_destroy(pubs[k]);
	munmap(shm, max_size);
	close(shm_fd);
	CK(cudaFreeHost(pinned));
	free(pageable);
	CK(cudaFree(dbuf));
	for (int si = 0; si < NSCHEMES; si++)
		for (size_t ni = 0; ni < subs.size(); ni++)
			for (size_t zi = 0; zi < sizes.size(); zi++)
				if (ran[si] && res[si][ni][zi].broken)
					return 1;
	return 0;
}
