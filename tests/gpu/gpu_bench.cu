/*
 * gpu-bench: the local-path GPU numbers of rgaps in one run, with the
 * physical limits of the same card measured alongside (docs/BENCHMARKS.md (GPU sections)).
 *
 *  1. Physical limits: cudaMemcpy D2H and H2D with pinned and with pageable
 *     host memory, and D2D, at each size.
 *  2. Fan-out: time from the publisher starting to publish a message that
 *     sits in its GPU buffer to N subscriber processes (1, 2, 4, 8) each
 *     holding a device pointer to it, for each scheme:
 *       rgaps        rgaps_publisher_push() of the device buffer into the
 *                    topic's GPU pool (one D2D copy), futex wake-up, take();
 *       rgaps-spin   the same with subscribers spinning (RGAPS_SPIN_US) before
 *                    they sleep: what the wake-up costs;
 *       rgaps-loan   zero copies: the message was written in place into a loan
 *                    of the GPU pool; the clock starts at the commit, so this is
 *                    the notification alone;
 *       pool+copy    rgaps, then every subscriber cudaMemcpy's the message
 *                    (D2D) into its own buffer: a per-subscriber copy on the GPU;
 *       shm-pageable the Iceoryx-style baseline ("Pageable-Iceoryx" in the
 *                    RGAPS thesis): the publisher copies D2H into a pageable
 *                    shared-memory pool (rgaps' host backend) and each
 *                    subscriber copies H2D into its own GPU buffer;
 *       shm-pinned   the same with the shared memory pinned (cudaHostRegister)
 *                    in every process: the best a copying design can do.
 *     For the shm schemes, "landed" times start once the message is in host
 *     memory (the DP3 comparison: a message received from the network lands
 *     in host memory) and "full" times start before the publisher's D2H.
 *
 * Subscribers are this program re-executed with --child; each writes one
 * record per message (CLOCK_MONOTONIC, one clock for the whole host) into a
 * pipe. Messages are sent one at a time: the next only once every subscriber
 * has reported the last, so each number is the latency of a lone message.
 *
 *   gpu-bench --gpu-topic T --host-topic T [--sizes 4MiB,64MiB,1GiB]
 *             [--subs 1,2,4,8] [--reps 30,20,8] [--schemes a,b,...]
 * Needs a running rgapsd with T (gpu) on memory "cuda" and T (host) on
 * memory "host", each with max_message_size >= the largest size
 * (tests/gpu/gpu_bench.sh sets that up).
 *
 * GPU_BENCH_RAW=FILE writes every timed message to FILE, one line each:
 *   scheme N size rep t0_ns publish_returned_ns pid:take_returned_ns...
 * (CLOCK_MONOTONIC), which tests/gpu/fanout_trace.py lines up with
 * the futex calls that tests/gpu/futex_trace.c recorded.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gpu_bench_util.cuh"
#include "gpu_test.cuh"
#include "rgaps/rgaps.h"

extern char **environ;

#define MAX_SUBS 32
#define CHILD_FD 3
#define READY_SEQ ~0ull

struct rec {
	uint64_t seq;
	uint64_t t_ns;
	int64_t status;
};

enum child_mode { CH_GPU, CH_GPU_COPY, CH_H2D, CH_H2D_PINNED };

struct scheme {
	const char *name;
	enum child_mode mode;
	bool host_topic;
	bool pinned;
	const char *spin_us; /* RGAPS_SPIN_US for the subscribers, NULL: default */
	bool loan;	     /* publish a loan filled in place: the clock starts at commit */
};

static const scheme schemes[] = {
	{ "rgaps", CH_GPU, false, false, NULL, false },
	{ "rgaps-spin", CH_GPU, false, false, "20000", false },
	{ "pool+copy", CH_GPU_COPY, false, false, NULL, false },
	{ "shm-pageable", CH_H2D, true, false, NULL, false },
	{ "shm-pinned", CH_H2D_PINNED, true, true, NULL, false },
	{ "rgaps-loan", CH_GPU, false, false, NULL, true },
};
#define NSCHEMES (sizeof(schemes) / sizeof(schemes[0]))

static volatile sig_atomic_t stop;

static void on_signal(int)
{
	stop = 1;
}

static void die(const char *fmt, const char *a)
{
	fprintf(stderr, "gpu-bench: ");
	fprintf(stderr, fmt, a);
	fprintf(stderr, "\n");
	exit(1);
}

/*
 * The host pool of a host-memory topic as mapped here: rgaps hands out only
 * message pointers, so find the mapping of its object in /proc/self/maps (each
 * publisher's pool is a memfd rgapsd labels rgaps-INSTANCE-TOPIC-pub-pool).
 */
static int find_pool_mapping(const char *topic, void **base_p, size_t *len_p)
{
	std::string mid = std::string("-") + topic + "-pub-pool";
	char line[1024];
	FILE *f = fopen("/proc/self/maps", "r");
	int found = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char *path = strchr(line, '/');
		size_t n;

		if (!path || sscanf(line, "%lx-%lx", &lo, &hi) != 2)
			continue;
		n = strcspn(path, " \n"); /* the label, without " (deleted)" */
		path[n] = 0;
		if (strncmp(path, "/memfd:rgaps-", 13) != 0 || n < mid.size() ||
		    strcmp(path + n - mid.size(), mid.c_str()) != 0)
			continue;
		*base_p = (void *)lo;
		*len_p = hi - lo;
		found = 0;
		break;
	}
	fclose(f);
	return found;
}

/* ---------------------------------------------------------------- subscriber side */

static int child_main(enum child_mode mode, const char *topic, uint64_t max_size)
{
	rgaps_subscriber_t *sub;
	struct sigaction sa;
	void *own = NULL, *pool = NULL;
	size_t pool_len = 0;
	rec r = { READY_SEQ, 0, 0 };

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	CK(cudaSetDevice(0));
	CK(cudaFree(0));
	if (mode != CH_GPU) {
		CK(cudaMalloc(&own, max_size));
		CK(cudaMemset(own, 0, max_size));
	}
	sub = rgaps_subscriber_init(topic);
	if (!sub)
		die("child: cannot attach to '%s'", topic);
	if (mode == CH_H2D_PINNED) {
		if (find_pool_mapping(topic, &pool, &pool_len))
			die("child: no shared-memory pool mapping for '%s'", topic);
		/* Subscribers map publishers' pools read-only (docs/SHM-LAYOUT.md). */
		CK(cudaHostRegister(pool, pool_len,
				    cudaHostRegisterPortable | cudaHostRegisterReadOnly));
	}
	if (write(CHILD_FD, &r, sizeof(r)) != (ssize_t)sizeof(r))
		return 1;
	while (!stop) {
		rgaps_msg_t m;
		int e = rgaps_subscriber_take(sub, &m, 1000);

		if (e == -ETIMEDOUT || e == -EINTR || e == -EAGAIN)
			continue;
		r.seq = m.seq;
		r.status = e;
		if (e == 0) {
			if (mode == CH_GPU_COPY || mode == CH_H2D || mode == CH_H2D_PINNED) {
				CK(cudaMemcpy(own, m.data, m.size, cudaMemcpyDefault));
				CK(cudaDeviceSynchronize());
			}
			r.t_ns = gpu_now_ns();
			rgaps_subscriber_release(sub, &m);
		} else {
			r.t_ns = gpu_now_ns();
		}
		if (write(CHILD_FD, &r, sizeof(r)) != (ssize_t)sizeof(r) || e)
			break;
	}
	if (pool)
		cudaHostUnregister(pool);
	rgaps_subscriber_destroy(sub);
	if (own)
		cudaFree(own);
	return 0;
}

/* ---------------------------------------------------------------- publisher side */

typedef bench_child child;

static void read_rec(const child &c, rec *r)
{
	if (!bench_read_full(c.fd, r, sizeof(*r), 120000))
		die("%s", "a subscriber sent nothing for 120 s, or exited");
	if (r->status)
		die("subscriber take failed: %s", rgaps_strerror((int)r->status));
}

static std::vector<child> spawn_children(const char *self, const scheme &sc, const char *topic,
					 uint64_t max_size, int n)
{
	std::vector<child> kids;
	char mode[8], maxs[32];

	snprintf(mode, sizeof(mode), "%d", (int)sc.mode);
	snprintf(maxs, sizeof(maxs), "%llu", (unsigned long long)max_size);
	if (sc.spin_us)
		setenv("RGAPS_SPIN_US", sc.spin_us, 1);
	else
		unsetenv("RGAPS_SPIN_US");
	for (int i = 0; i < n; i++) {
		char *argv[] = { (char *)self, (char *)"--child", mode, (char *)topic, maxs, NULL };
		child c;

		if (!bench_spawn_self(argv, CHILD_FD, &c))
			die("%s", "cannot start a subscriber process");
		kids.push_back(c);
	}
	unsetenv("RGAPS_SPIN_US");
	for (const child &c : kids) {
		rec r;

		read_rec(c, &r);
		if (r.seq != READY_SEQ)
			die("%s", "a subscriber did not start cleanly");
	}
	return kids;
}

static void reap_children(std::vector<child> &kids)
{
	bench_reap(kids);
}

struct cell {
	std::vector<double> lat_ms;    /* start of publish -> last subscriber done */
	std::vector<double> first_ms;  /* start of publish -> first subscriber done */
	std::vector<double> landed_ms; /* message in host memory -> last subscriber done */
	std::vector<double> pub_ms;    /* the publish call alone */
};

static void print_header(void)
{
	bench_print_machine("gpu-bench");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "gpu-topic", required_argument, NULL, 'g' },
		{ "host-topic", required_argument, NULL, 'h' },
		{ "sizes", required_argument, NULL, 's' },
		{ "subs", required_argument, NULL, 'n' },
		{ "reps", required_argument, NULL, 'r' },
		{ "schemes", required_argument, NULL, 'S' },
		{ NULL, 0, NULL, 0 },
	};
	const char *gtopic = NULL, *htopic = NULL, *only = NULL;
	std::vector<uint64_t> sizes = { 4ull << 20, 64ull << 20, 1ull << 30 };
	std::vector<uint64_t> subs = { 1, 2, 4, 8 }, reps = { 30, 20, 8 };
	uint64_t max_size;
	uint8_t *dbuf, *pinned, *pageable;
	rgaps_publisher_t *gpub, *hpub;
	rgaps_topic_info_t info = {};
	void *hpool;
	size_t hpool_len;
	char sb[32];
	int o;

	if (argc == 5 && strcmp(argv[1], "--child") == 0) {
		gpu_require("gpu-bench child");
		return child_main((enum child_mode)atoi(argv[2]), argv[3],
				  strtoull(argv[4], NULL, 10));
	}
	std::string bad; /* a --sizes, --subs or --reps item that is neither */

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'g':
			gtopic = optarg;
			break;
		case 'h':
			htopic = optarg;
			break;
		case 's':
			if (!bench_parse_list(optarg, true, &sizes, &bad))
				die("bad list item '%s'", bad.c_str());
			break;
		case 'n':
			if (!bench_parse_list(optarg, false, &subs, &bad))
				die("bad list item '%s'", bad.c_str());
			break;
		case 'r':
			if (!bench_parse_list(optarg, false, &reps, &bad))
				die("bad list item '%s'", bad.c_str());
			break;
		case 'S':
			only = optarg;
			break;
		default:
			fprintf(stderr, "usage: gpu-bench --gpu-topic T --host-topic T [--sizes L] "
					"[--subs L] [--reps L] [--schemes L]\n");
			return 2;
		}
	}
	if (!gtopic || !htopic)
		die("%s", "--gpu-topic and --host-topic are required");
	while (reps.size() < sizes.size())
		reps.push_back(reps.back());
	for (uint64_t n : subs)
		if (n > MAX_SUBS)
			die("%s", "at most 32 subscribers");
	gpu_require("gpu-bench");
	info.struct_size = sizeof(info);
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
		die("%s", "out of host memory");
	memset(pageable, 1, max_size); /* fault it in: time copies, not page faults */

	/* 1. physical limits */
	printf("\n== physical limits: cudaMemcpy, median of reps (ms, GB/s) ==\n");
	printf("%-7s %19s %19s %19s %19s %19s\n", "size", "D2H pinned", "D2H pageable",
	       "H2D pinned", "H2D pageable", "D2D (read+write)");
	{
		uint8_t *dbuf2;

		CK(cudaMalloc(&dbuf2, max_size));
		for (size_t i = 0; i < sizes.size(); i++) {
			uint64_t n = sizes[i];
			int r = (int)reps[i];
			double t[5] = {
				bench_time_copy(pinned, dbuf, n, r), bench_time_copy(pageable, dbuf, n, r),
				bench_time_copy(dbuf, pinned, n, r), bench_time_copy(dbuf, pageable, n, r),
				bench_time_copy(dbuf2, dbuf, n, r),
			};

			printf("%-7s", bench_size_str(n, sb, sizeof(sb)));
			for (int k = 0; k < 5; k++)
				printf(" %8.3f ms %5.1f GB/s", t[k],
				       n * (k == 4 ? 2.0 : 1.0) / (t[k] * 1e6));
			printf("\n");
		}
		CK(cudaFree(dbuf2));
	}
	fflush(stdout);

	/* 2. fan-out */
	gpub = rgaps_publisher_init(gtopic);
	hpub = rgaps_publisher_init(htopic);
	if (!gpub || !hpub)
		die("cannot attach the publishers: %s", strerror(errno));
	rgaps_publisher_info(gpub, &info);
	if (info.memory != RGAPS_MEMORY_CUDA || info.max_message_size < max_size)
		die("topic '%s' must be on memory cuda with max_message_size >= the largest size",
		    gtopic);
	rgaps_publisher_info(hpub, &info);
	if (info.memory != RGAPS_MEMORY_HOST || info.max_message_size < max_size)
		die("topic '%s' must be on memory host with max_message_size >= the largest size",
		    htopic);
	if (find_pool_mapping(htopic, &hpool, &hpool_len))
		die("no shared-memory pool mapping for '%s'", htopic);

	/* results[scheme][n index][size index] */
	std::vector<std::vector<std::vector<cell>>> res(
		NSCHEMES,
		std::vector<std::vector<cell>>(subs.size(), std::vector<cell>(sizes.size())));
	std::vector<bool> ran(NSCHEMES, false);

	FILE *raw = getenv("GPU_BENCH_RAW") ? fopen(getenv("GPU_BENCH_RAW"), "w") : NULL;

	printf("\n== fan-out runs (each line: one scheme, N subscribers, one size) ==\n");
	for (size_t si = 0; si < NSCHEMES; si++) {
		const scheme &sc = schemes[si];

		if (only && !strstr((std::string(",") + only + ",").c_str(),
				    (std::string(",") + sc.name + ",").c_str()))
			continue;
		ran[si] = true;
		if (sc.pinned)
			CK(cudaHostRegister(hpool, hpool_len, cudaHostRegisterPortable));
		for (size_t ni = 0; ni < subs.size(); ni++) {
			const char *topic = sc.host_topic ? htopic : gtopic;
			std::vector<child> kids =
				spawn_children(argv[0], sc, topic, max_size, (int)subs[ni]);

			for (size_t zi = 0; zi < sizes.size(); zi++) {
				uint64_t n = sizes[zi];

				for (uint64_t rep = 0; rep < reps[zi] + 1; rep++) {
					uint64_t t0 = gpu_now_ns(), t_landed, t_pub, last = 0;
					uint64_t first = UINT64_MAX;
					int r;

					if (sc.loan) {
						rgaps_loan_t l;

						r = rgaps_publisher_loan(gpub, n, -1, &l);
						if (r == 0) {
							/* the producer writes in place: untimed */
							CK(cudaMemcpy(l.data, dbuf, n,
								      cudaMemcpyDeviceToDevice));
							t0 = gpu_now_ns();
							r = rgaps_publisher_commit(gpub, &l, n);
						}
						t_landed = t0;
					} else if (!sc.host_topic) {
						r = rgaps_publisher_push(gpub, n, dbuf);
						t_landed = t0;
					} else {
						rgaps_loan_t l;

						r = rgaps_publisher_loan(hpub, n, -1, &l);
						if (r == 0) {
							CK(cudaMemcpy(l.data, dbuf, n,
								      cudaMemcpyDeviceToHost));
							t_landed = gpu_now_ns();
							r = rgaps_publisher_commit(hpub, &l, n);
						}
					}
					t_pub = gpu_now_ns();
					if (r)
						die("publish failed: %s", rgaps_strerror(r));
					if (raw)
						fprintf(raw, "%s %zu %llu %llu %llu %llu", sc.name,
							kids.size(), (unsigned long long)n,
							(unsigned long long)rep,
							(unsigned long long)t0,
							(unsigned long long)t_pub);
					for (const child &c : kids) {
						rec rr;

						read_rec(c, &rr);
						last = std::max(last, rr.t_ns);
						first = std::min(first, rr.t_ns);
						if (raw)
							fprintf(raw, " %d:%llu", (int)c.pid,
								(unsigned long long)rr.t_ns);
					}
					if (raw)
						fprintf(raw, "\n");
					if (rep == 0)
						continue; /* warm-up */
					res[si][ni][zi].lat_ms.push_back((last - t0) / 1e6);
					res[si][ni][zi].first_ms.push_back((first - t0) / 1e6);
					res[si][ni][zi].landed_ms.push_back((last - t_landed) /
									    1e6);
					res[si][ni][zi].pub_ms.push_back((t_pub - t0) / 1e6);
				}
			}
			reap_children(kids);
			/* As it comes, so that a run cut short still leaves numbers. */
			for (size_t zi = 0; zi < sizes.size(); zi++) {
				const cell &c = res[si][ni][zi];

				printf("  %-12s N=%-2llu %-7s median %9.3f ms (first %9.3f)  "
				       "landed %9.3f ms  publish call %9.3f ms  (%zu msgs)\n",
				       sc.name, (unsigned long long)subs[ni],
				       bench_size_str(sizes[zi], sb, sizeof(sb)), bench_median(c.lat_ms),
				       bench_median(c.first_ms), bench_median(c.landed_ms), bench_median(c.pub_ms),
				       c.lat_ms.size());
			}
			fflush(stdout);
		}
		if (sc.pinned)
			CK(cudaHostUnregister(hpool));
	}

	printf("\n== fan-out: message published -> every subscriber holds it on the GPU "
	       "(median ms over reps) ==\n");
	printf("rgaps: push of a device buffer into the GPU pool (D2D) + wake-up; shm-*: "
	       "publisher D2H into shm, each subscriber H2D into its own GPU buffer;\n"
	       "'landed' starts once the message is in host memory (the DP3 baseline), "
	       "'full' before the publisher's D2H.\n");
	printf("%-7s %3s %9s %9s %9s %9s %9s %12s %12s %12s %12s %8s %9s %9s\n", "size", "N",
	       "rgaps", "push", "rg-spin", "rg-loan", "pool+cp", "pageable-ld", "pageable-fl",
	       "pinned-ld", "pinned-fl", "N/N1", "x-pg-ld", "x-pg-fl");
	for (size_t zi = 0; zi < sizes.size(); zi++) {
		for (size_t ni = 0; ni < subs.size(); ni++) {
			double rg = bench_median(res[0][ni][zi].lat_ms);
			double rg1 = bench_median(res[0][0][zi].lat_ms);
			double pgl = bench_median(res[3][ni][zi].landed_ms);
			double pgf = bench_median(res[3][ni][zi].lat_ms);

			printf("%-7s %3llu %9.3f %9.3f %9.3f %9.3f %9.3f %12.3f %12.3f %12.3f "
			       "%12.3f",
			       bench_size_str(sizes[zi], sb, sizeof(sb)), (unsigned long long)subs[ni],
			       rg, bench_median(res[0][ni][zi].pub_ms), bench_median(res[1][ni][zi].lat_ms),
			       bench_median(res[5][ni][zi].lat_ms), bench_median(res[2][ni][zi].lat_ms), pgl,
			       pgf,
			       bench_median(res[4][ni][zi].landed_ms), bench_median(res[4][ni][zi].lat_ms));
			if (ran[0] && rg > 0 && rg1 > 0)
				printf(" %8.3f", rg / rg1);
			else
				printf(" %8s", "-");
			if (ran[0] && ran[3] && rg > 0)
				printf(" %9.1f %9.1f\n", pgl / rg, pgf / rg);
			else
				printf(" %9s %9s\n", "-", "-");
		}
	}
	printf("(push: the rgaps_publisher_push() call alone; N/N1: rgaps latency with N "
	       "subscribers over with 1;\n x-pg-ld / x-pg-fl: shm-pageable landed / full over "
	       "rgaps.)\n");
	printf("\nspread of the rgaps column (min / median / max ms):\n");
	for (size_t zi = 0; zi < sizes.size(); zi++)
		for (size_t ni = 0; ni < subs.size(); ni++) {
			std::vector<double> v = res[0][ni][zi].lat_ms;

			if (v.empty())
				continue;
			std::sort(v.begin(), v.end());
			printf("  %-7s N=%-2llu %9.3f %9.3f %9.3f  (%zu msgs)\n",
			       bench_size_str(sizes[zi], sb, sizeof(sb)), (unsigned long long)subs[ni],
			       v.front(), bench_median(v), v.back(), v.size());
		}
	if (raw)
		fclose(raw);
	rgaps_publisher_destroy(gpub);
	rgaps_publisher_destroy(hpub);
	CK(cudaFreeHost(pinned));
	free(pageable);
	CK(cudaFree(dbuf));
	return 0;
}
