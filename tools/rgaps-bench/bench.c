/*
 * rgaps-bench: measures the local path (publisher and subscribers on one host)
 * through the public API (include/rgaps/rgaps.h); its own processes meet on
 * futexes of the tools' library (tools/lib/tool.h), and harness.c (shared
 * with iox-bench) keeps them and every wait on them bounded. The parent publishes;
 * N forked subscriber processes take and release. Latency is the subscriber's
 * CLOCK_REALTIME when rgaps_subscriber_take() returns minus msg.ts_ns (taken
 * when a push starts, so it includes the one copy into the pool; at commit for
 * loan/commit). Latency mode is paced: message k+1 is pushed only after every
 * subscriber released message k, so nothing queues; throughput mode pushes back
 * to back. Each size's configurations run round-robin in several rounds, so
 * that a machine whose speed drifts (shared memory bandwidth, neighbours on
 * the CPUs) skews them alike. The same run measures the machine's own limits:
 * one memcpy of each size, a push to a topic nobody listens to (the library's
 * cost over that memcpy), and a futex wake-up across processes. How to run it
 * and what it measured: docs/BENCHMARKS.md. Payloads are touched only with the
 * host memory backend; with a cuda topic the source of a push is a loan held in
 * the pool (device memory) and subscribers check sequence numbers only.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "pattern.h"
#include "rgaps/rgaps.h"
#include "tool.h"

#define MAX_SUBS HARNESS_MAX_KIDS
#define MAX_LIST 16
#define WAIT_MS HARNESS_WAIT_MS /* bound on every wait: take, push, a subscriber's ack */
#define SLICE_NS HARNESS_SLICE_NS
#define SPIN_LIB (-1)		/* leave RGAPS_SPIN_US as inherited (library default) */
#define LIB_SPIN_DEFAULT_US 20	/* what librgaps spins when RGAPS_SPIN_US is unset */
#define NS_PER_S 1000000000.0
#define GIB (1024.0 * 1024.0 * 1024.0)

static uint64_t mono_ns(void)
{
	return tool_now_ns(CLOCK_MONOTONIC);
}

static uint64_t real_ns(void)
{
	return tool_now_ns(CLOCK_REALTIME);
}

/* ---------------------------------------------------------------- options */

enum mode { MODE_LATENCY, MODE_THROUGHPUT };
enum api { API_PUSH, API_LOAN };

struct opts {
	uint64_t sizes[MAX_LIST];
	int nsizes;
	int subs[MAX_LIST];
	int nsubs;
	int spins[MAX_LIST];
	int nspins; /* 0: the default plan (library default, plus 0 for small messages) */
	uint64_t iters; /* 0: adaptive */
	int rounds;	/* each configuration's messages are spread over this many rounds */
	bool latency, throughput;
	bool api_push, api_loan, api_given;
	bool verify;
	const char *socket;
	bool spawn;
	const char *memory; /* --spawn-daemon: the topics' "memory" key, NULL: the default */
	const char *json;
	int pub_cpu;	    /* -1: not pinned */
	int sub_cpus[MAX_LIST];
	int nsub_cpus;	    /* 0: not pinned; else subscriber i runs on sub_cpus[i % n] */
};

/* One measured configuration and what came out of it. */
struct run {
	uint64_t size;
	int nsubs;
	enum mode mode;
	enum api api;
	int spin; /* SPIN_LIB or microseconds */
	uint64_t iters; /* measured messages, over all rounds */

	/* Samples, gathered round after round. */
	int64_t *lat;	       /* [subscriber][message], ns */
	int64_t *push;	       /* [message], ns */
	uint64_t done;	       /* messages measured so far */
	uint64_t warm;	       /* warm-up messages of each round */
	double sub_s[MAX_SUBS]; /* throughput: seconds each subscriber took, summed */

	/* latency, ns, pooled over every subscriber and message */
	double p50, p99, p999, min, max, mean;
	double last_p50, last_p99; /* per message, the slowest subscriber */
	double fan_p50;		   /* per message, slowest take minus the push's duration */
	double push_p50, push_p99, push_min; /* publisher: time in push (or loan + commit) */
	/* throughput: the slowest subscriber, first push start to last take */
	double msgs_s, gib_s, gib_s_total;
};

/* Samples of one kind of copy, gathered round after round. */
struct samples {
	int64_t *v;
	size_t n, cap;
	double p50, min;
};

struct raw_copy {
	uint64_t size;
	struct samples priv;  /* memcpy, private destination, back to back */
	struct samples shm;   /* memcpy into shared memory (as the pool is), back to back */
	struct samples alone; /* push to the topic with no subscriber ... */
	struct samples il;    /* ... alternating with a memcpy into shared memory */
};

struct raw_wake {
	int nsubs;
	double p50, p99, max;
};

struct bench {
	struct opts o;
	struct run runs[256];
	int nruns;
	struct raw_copy copies[MAX_LIST];
	struct raw_wake wakes[MAX_LIST];
	char spin_env[32]; /* RGAPS_SPIN_US as inherited, "" when unset */
	const char *memory; /* the topics' memory backend, "host" or "cuda" */
	char machine_cpu[128], machine_kernel[128];
	long nproc;
	uint64_t ram;
	char date[64];
	char load_start[64], load_end[64]; /* /proc/loadavg; at start: others' load alone */
	char cmdline[1024];
	/* spawned daemon */
	pid_t daemon_pid;
	char dir[64], sock[128], instance[32], log[128], config[128];
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rgaps-bench [options]\n"
		"  --sizes LIST        message sizes (default 4KiB,4MiB,64MiB)\n"
		"  --subs LIST         subscriber process counts (default 1,2,4,8)\n"
		"  --iters N           measured messages per configuration (default: adaptive,\n"
		"                      8 GiB / size within [50, 10000]; throughput up to 100000)\n"
		"  --rounds R          run the configurations of a size round-robin, R rounds,\n"
		"                      each with 1/R of the messages, so that drift hits all\n"
		"                      alike (default 8)\n"
		"  --mode M            latency, throughput or both (default both)\n"
		"  --api A             push, loan or both (default: push, plus loan in latency\n"
		"                      mode for sizes up to 64KiB)\n"
		"  --spin-us LIST      RGAPS_SPIN_US for the subscribers, a latency row per value\n"
		"                      (default: the library's, plus 0 for sizes up to 64KiB)\n"
		"  --verify            fill and check the whole payload (slow: not for timing)\n"
		"  --socket PATH       use the rgapsd at PATH (default $RGAPS_SOCKET)\n"
		"  --spawn-daemon      start a private rgapsd from the build tree, stop it after\n"
		"  --memory M          with --spawn-daemon: topics' memory, host, cuda or auto\n"
		"                      (default: the daemon's default, auto)\n"
		"  --pub-cpu N         pin the publisher (and the raw tests' waker) to CPU N\n"
		"  --sub-cpus LIST     pin subscriber i to CPU LIST[i %% length] (default: the\n"
		"                      scheduler places everything)\n"
		"  --json FILE         write every result as JSON\n"
		"  -h, --help          this text\n");
}

static int parse_sizes(const char *arg, struct opts *o)
{
	char *dup = strdup(arg), *save = NULL, *tok;
	int r = 0;

	if (!dup)
		return -ENOMEM;
	o->nsizes = 0;
	for (tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		uint64_t v;

		if (o->nsizes == MAX_LIST || tool_parse_size(tok, &v) || v < RGAPS_PATTERN_HDR) {
			fprintf(stderr, "rgaps-bench: --sizes: bad size '%s' (at least %u bytes, "
					"at most %d sizes)\n", tok, RGAPS_PATTERN_HDR, MAX_LIST);
			r = -EINVAL;
			break;
		}
		o->sizes[o->nsizes++] = v;
	}
	free(dup);
	return r ? r : o->nsizes ? 0 : -EINVAL;
}

static int parse_ints(const char *opt, const char *arg, int lo, int hi, int *out, int *n_p)
{
	char *dup = strdup(arg), *save = NULL, *tok, *end;
	int n = 0;

	if (!dup)
		return -ENOMEM;
	for (tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		long v = strtol(tok, &end, 10);

		if (*end || end == tok || v < lo || v > hi || n == MAX_LIST) {
			fprintf(stderr, "rgaps-bench: %s: bad value '%s' (%d..%d, at most %d)\n",
				opt, tok, lo, hi, MAX_LIST);
			free(dup);
			return -EINVAL;
		}
		out[n++] = (int)v;
	}
	free(dup);
	if (!n)
		return -EINVAL;
	*n_p = n;
	return 0;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lopts[] = {
		{ "sizes", required_argument, NULL, 's' },
		{ "subs", required_argument, NULL, 'n' },
		{ "iters", required_argument, NULL, 'i' },
		{ "rounds", required_argument, NULL, 'R' },
		{ "mode", required_argument, NULL, 'm' },
		{ "api", required_argument, NULL, 'a' },
		{ "spin-us", required_argument, NULL, 'S' },
		{ "verify", no_argument, NULL, 'v' },
		{ "socket", required_argument, NULL, 'k' },
		{ "spawn-daemon", no_argument, NULL, 'D' },
		{ "memory", required_argument, NULL, 'M' },
		{ "pub-cpu", required_argument, NULL, 'P' },
		{ "sub-cpus", required_argument, NULL, 'C' },
		{ "json", required_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int c, n, cpus[MAX_LIST];
	char *end;

	memset(o, 0, sizeof(*o));
	o->pub_cpu = -1;
	o->sizes[0] = 4096;
	o->sizes[1] = 4ull << 20;
	o->sizes[2] = 64ull << 20;
	o->nsizes = 3;
	o->subs[0] = 1;
	o->subs[1] = 2;
	o->subs[2] = 4;
	o->subs[3] = 8;
	o->nsubs = 4;
	o->latency = o->throughput = true;
	o->api_push = true;
	o->rounds = 8;
	while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (parse_sizes(optarg, o))
				return 2;
			break;
		case 'n':
			if (parse_ints("--subs", optarg, 1, MAX_SUBS, o->subs, &o->nsubs))
				return 2;
			break;
		case 'i':
			o->iters = strtoull(optarg, &end, 10);
			if (*end || !o->iters || o->iters > 10000000) {
				fprintf(stderr, "rgaps-bench: --iters: bad count '%s'\n", optarg);
				return 2;
			}
			break;
		case 'R':
			o->rounds = (int)strtol(optarg, &end, 10);
			if (*end || o->rounds < 1 || o->rounds > 100) {
				fprintf(stderr, "rgaps-bench: --rounds: 1..100\n");
				return 2;
			}
			break;
		case 'm':
			o->latency = !strcmp(optarg, "latency") || !strcmp(optarg, "both");
			o->throughput = !strcmp(optarg, "throughput") || !strcmp(optarg, "both");
			if (!o->latency && !o->throughput) {
				fprintf(stderr,
					"rgaps-bench: --mode: latency, throughput or both\n");
				return 2;
			}
			break;
		case 'a':
			o->api_push = !strcmp(optarg, "push") || !strcmp(optarg, "both");
			o->api_loan = !strcmp(optarg, "loan") || !strcmp(optarg, "both");
			o->api_given = true;
			if (!o->api_push && !o->api_loan) {
				fprintf(stderr, "rgaps-bench: --api: push, loan or both\n");
				return 2;
			}
			break;
		case 'S':
			if (parse_ints("--spin-us", optarg, 0, 1000000, o->spins, &o->nspins))
				return 2;
			break;
		case 'v':
			o->verify = true;
			break;
		case 'k':
			o->socket = optarg;
			break;
		case 'D':
			o->spawn = true;
			break;
		case 'M':
			if (strcmp(optarg, "host") && strcmp(optarg, "cuda") &&
			    strcmp(optarg, "auto")) {
				fprintf(stderr, "rgaps-bench: --memory: host, cuda or auto\n");
				return 2;
			}
			o->memory = optarg;
			break;
		case 'j':
			o->json = optarg;
			break;
		case 'P':
			if (parse_ints("--pub-cpu", optarg, 0, CPU_SETSIZE - 1, cpus, &n) ||
			    n != 1) {
				fprintf(stderr, "rgaps-bench: --pub-cpu: one CPU number\n");
				return 2;
			}
			o->pub_cpu = cpus[0];
			break;
		case 'C':
			if (parse_ints("--sub-cpus", optarg, 0, CPU_SETSIZE - 1, o->sub_cpus,
				       &o->nsub_cpus))
				return 2;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "rgaps-bench: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (o->memory && !o->spawn) {
		fprintf(stderr, "rgaps-bench: --memory needs --spawn-daemon (else the daemon's "
				"configuration decides)\n");
		return 2;
	}
	if (o->socket && o->spawn) {
		fprintf(stderr, "rgaps-bench: --socket and --spawn-daemon exclude each other\n");
		return 2;
	}
	return 0;
}

/* ---------------------------------------------------------------- statistics */

/* 8 GiB of payload per configuration, within [50, 10000] (throughput: 100000). */
static uint64_t adaptive_iters(const struct opts *o, uint64_t size, enum mode mode)
{
	uint64_t n = (8ull << 30) / size, cap = mode == MODE_LATENCY ? 10000 : 100000;

	if (o->iters)
		return o->iters;
	return n < 50 ? 50 : n > cap ? cap : n;
}

/* Warm-up messages of one round (excluded from the results). */
static uint64_t warmup_of(uint64_t iters)
{
	uint64_t w = iters / 10;

	return w < 2 ? 2 : w > 200 ? 200 : w;
}

/* ---------------------------------------------------------------- children */

/*
 * What the parent and its children share (an anonymous MAP_SHARED mapping made
 * before fork): the harness's words, then the raw wake test's round word.
 */
struct shared {
	struct harness_sync sync;
	uint32_t round __attribute__((aligned(64))); /* raw wake test: the round number */
	uint64_t round_ts;
	uint64_t t_first[MAX_SUBS]; /* ts_ns of the first measured message */
	uint64_t t_last[MAX_SUBS];  /* CLOCK_REALTIME when the last take returned */
	int64_t lat[]; /* [sub][message], ns */
};

static struct shared *shared_map(size_t nlat, size_t *len_p)
{
	size_t len = sizeof(struct shared) + nlat * sizeof(int64_t);
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		fprintf(stderr, "rgaps-bench: mmap of %zu shared bytes: %s\n", len,
			strerror(errno));
		return NULL;
	}
	*len_p = len;
	return p;
}

/* Private buffer, pre-faulted, not inherited by children (no copy-on-write). */
static void *buf_alloc(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		fprintf(stderr, "rgaps-bench: cannot allocate %zu bytes: %s\n", size,
			strerror(errno));
		return NULL;
	}
	madvise(p, size, MADV_DONTFORK);
	memset(p, 0xa5, size);
	return p;
}

/* ---------------------------------------------------------------- raw limits */

static void barrier_ptr(void *p)
{
	__asm__ volatile("" : : "r"(p) : "memory");
}

/* Shared memory like a host pool (tmpfs, 4 KiB pages), pre-faulted, not inherited. */
static void *shm_alloc(size_t size)
{
	int fd = memfd_create("rgaps-bench-raw", MFD_CLOEXEC);
	void *p = MAP_FAILED;

	if (fd >= 0 && ftruncate(fd, (off_t)size) == 0)
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "rgaps-bench: cannot map %zu bytes of shared memory: %s\n", size,
			strerror(errno));
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	close(fd);
	madvise(p, size, MADV_DONTFORK);
	memset(p, 0xa5, size);
	return p;
}

static int samples_add(struct samples *sp, int64_t v)
{
	if (sp->n == sp->cap) {
		size_t cap = sp->cap ? 2 * sp->cap : 1024;
		int64_t *nv = realloc(sp->v, cap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		sp->v = nv;
		sp->cap = cap;
	}
	sp->v[sp->n++] = v;
	return 0;
}

static void samples_done(struct samples *sp)
{
	if (!sp->n)
		return;
	qsort(sp->v, sp->n, sizeof(*sp->v), harness_cmp_i64);
	sp->p50 = harness_pct(sp->v, sp->n, 0.5);
	sp->min = (double)sp->v[0];
}

/* Copies in one round of one size: 1 GiB over all rounds, within [8, 1000] a round. */
static uint64_t copies_per_round(uint64_t size, int rounds)
{
	uint64_t n = (1ull << 30) / size / (uint64_t)rounds;

	return n < 8 ? 8 : n > 1000 ? 1000 : n;
}

/* Time one memcpy of size bytes from src to dst (both warm), n times. */
static int time_copies(uint8_t *dst, const uint8_t *src, uint64_t size, uint64_t n,
		       struct samples *sp)
{
	uint64_t batch = size >= (256u << 10) ? 1 : (256u << 10) / size;

	for (uint64_t w = 0; w < 3; w++)
		memcpy(dst, src, size);
	for (uint64_t s = 0; s < n; s++) {
		uint64_t t0 = mono_ns();

		for (uint64_t b = 0; b < batch; b++) {
			memcpy(dst, src, size);
			barrier_ptr(dst);
		}
		if (samples_add(sp, (int64_t)((mono_ns() - t0) / batch)))
			return -ENOMEM;
	}
	return 0;
}

/*
 * The copy a push makes, alone: from a private buffer into a private buffer,
 * and into shared memory (what a host pool is); the destination is the same
 * every time, as the pool block of a paced push is.
 */
static int raw_copy_measure(uint64_t size, uint64_t n, const uint8_t *src, uint8_t *dst,
			    uint8_t *shm, struct raw_copy *rc)
{
	int r;

	rc->size = size;
	r = time_copies(dst, src, size, n, &rc->priv);
	if (!r)
		r = time_copies(shm, src, size, n, &rc->shm);
	return r;
}

struct wake_arg {
	struct shared *sh;
	int nsubs;
	uint64_t rounds;
};

/* Raw wake child: sleep on the round word, note how late it wakes, ack. */
static void wake_child(int idx, void *arg)
{
	const struct wake_arg *wa = arg;
	struct shared *sh = wa->sh;
	uint32_t seen = 0;

	__atomic_add_fetch(&sh->sync.ready, 1, __ATOMIC_SEQ_CST);
	tool_futex_wake_all(&sh->sync.ready);
	for (uint64_t k = 0; k < wa->rounds; k++) {
		uint64_t deadline = mono_ns() + WAIT_MS * 1000000ull, now;

		while (__atomic_load_n(&sh->round, __ATOMIC_ACQUIRE) == seen) {
			if (mono_ns() >= deadline)
				harness_child_fail(&sh->sync, idx, "raw wake test: no wake-up in %d s",
					   WAIT_MS / 1000);
			tool_futex_wait(&sh->round, seen, SLICE_NS);
		}
		now = real_ns();
		seen = __atomic_load_n(&sh->round, __ATOMIC_ACQUIRE);
		sh->lat[(uint64_t)idx * wa->rounds + k] =
			(int64_t)(now - __atomic_load_n(&sh->round_ts, __ATOMIC_ACQUIRE));
		if (__atomic_add_fetch(&sh->sync.released, 1, __ATOMIC_SEQ_CST) ==
		    (uint32_t)wa->nsubs * (k + 1))
			tool_futex_wake_all(&sh->sync.released);
	}
}

/*
 * The floor under a paced latency with RGAPS_SPIN_US=0: the parent bumps a
 * shared word and does one FUTEX_WAKE; n sleeping processes note how long
 * that took to reach them, paced exactly like the latency mode.
 */
static int raw_wake_measure(int nsubs, const int *cpus, int ncpus, struct raw_wake *rw)
{
	struct wake_arg wa = { .nsubs = nsubs, .rounds = 2000 };
	uint64_t warm = 100, n = (uint64_t)nsubs * wa.rounds, m = 0;
	struct harness_kids k = { 0 };
	struct shared *sh;
	size_t len;
	int64_t *v;
	int r;

	sh = shared_map(n, &len);
	if (!sh)
		return -ENOMEM;
	wa.sh = sh;
	k.sync = &sh->sync;
	r = harness_spawn(&k, nsubs, cpus, ncpus, wake_child, &wa);
	if (r)
		goto out_unmap;
	r = harness_wait_count(&k, &sh->sync.ready, (uint32_t)nsubs, "raw wake children to start");
	for (uint64_t i = 0; !r && i < wa.rounds; i++) {
		__atomic_store_n(&sh->round_ts, real_ns(), __ATOMIC_RELEASE);
		__atomic_store_n(&sh->round, (uint32_t)(i + 1), __ATOMIC_RELEASE);
		tool_futex_wake_all(&sh->round);
		r = harness_wait_count(&k, &sh->sync.released, (uint32_t)((uint64_t)nsubs * (i + 1)),
				       "raw wake acknowledgements");
	}
	if (r) {
		harness_kill(&k);
		goto out_unmap;
	}
	r = harness_wait_exit(&k);
	if (r)
		goto out_unmap;
	v = calloc(n, sizeof(*v));
	if (!v) {
		r = -ENOMEM;
		goto out_unmap;
	}
	for (int s = 0; s < nsubs; s++)
		for (uint64_t i = warm; i < wa.rounds; i++)
			v[m++] = sh->lat[(uint64_t)s * wa.rounds + i];
	qsort(v, m, sizeof(*v), harness_cmp_i64);
	rw->nsubs = nsubs;
	rw->p50 = harness_pct(v, m, 0.5);
	rw->p99 = harness_pct(v, m, 0.99);
	rw->max = (double)v[m - 1];
	free(v);
out_unmap:
	munmap(sh, len);
	return r;
}

/* ---------------------------------------------------------------- the daemon */

static int query_json(const char *req, cJSON **reply_p)
{
	char *reply = NULL;
	int r = rgaps_query(req, &reply);

	if (r) {
		free(reply);
		return r;
	}
	*reply_p = cJSON_Parse(reply);
	free(reply);
	return *reply_p ? 0 : -EPROTO;
}

/* Subscribers attached to topic per the daemon (0 if the topic does not exist). */
static int topic_subscribers(const char *topic)
{
	cJSON *reply, *t;
	int n = 0, r;

	r = query_json("{\"type\":\"topics\"}", &reply);
	if (r)
		return r;
	cJSON_ArrayForEach(t, cJSON_GetObjectItem(reply, "topics"))
	{
		cJSON *name = cJSON_GetObjectItem(t, "name");
		cJSON *subs = cJSON_GetObjectItem(t, "subscribers");

		if (cJSON_IsString(name) && !strcmp(name->valuestring, topic) &&
		    cJSON_IsNumber(subs))
			n = subs->valueint;
	}
	cJSON_Delete(reply);
	return n;
}

static void daemon_stop(struct bench *b)
{
	if (b->daemon_pid > 0) {
		uint64_t deadline = mono_ns() + 5000000000ull;
		int st;

		kill(b->daemon_pid, SIGTERM);
		while (waitpid(b->daemon_pid, &st, WNOHANG) == 0) {
			if (mono_ns() >= deadline) {
				fprintf(stderr,
					"rgaps-bench: rgapsd ignored SIGTERM for 5 s: killed\n");
				kill(b->daemon_pid, SIGKILL);
				waitpid(b->daemon_pid, &st, 0);
				break;
			}
			usleep(10000);
		}
		b->daemon_pid = 0;
	}
	if (b->dir[0]) {
		unlink(b->config);
		unlink(b->log);
		unlink(b->sock);
		rmdir(b->dir);
		b->dir[0] = 0;
	}
}

/*
 * Start rgapsd from the build tree (tools/rgaps-bench -> src/daemon/rgapsd)
 * on a private socket and instance, with topic defaults sized so that a few of
 * the largest messages fit in a pool.
 */
static int daemon_spawn(struct bench *b)
{
	char exe[PATH_MAX], rgapsd[PATH_MAX + 32], maxs[32], pools[32];
	uint64_t maxsize = 64ull << 20, pool;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	FILE *f;
	pid_t pid;

	if (n <= 0) {
		fprintf(stderr, "rgaps-bench: /proc/self/exe: %s\n", strerror(errno));
		return -errno;
	}
	exe[n] = 0;
	snprintf(rgapsd, sizeof(rgapsd), "%s/../src/daemon/rgapsd", dirname(exe));
	if (access(rgapsd, X_OK)) {
		fprintf(stderr, "rgaps-bench: --spawn-daemon: no rgapsd at %s (%s); run from the "
				"build tree or use --socket\n", rgapsd, strerror(errno));
		return -ENOENT;
	}
	snprintf(b->dir, sizeof(b->dir), "/tmp/rgaps-bench.XXXXXX");
	if (!mkdtemp(b->dir)) {
		fprintf(stderr, "rgaps-bench: mkdtemp: %s\n", strerror(errno));
		b->dir[0] = 0;
		return -errno;
	}
	snprintf(b->sock, sizeof(b->sock), "%s/rgapsd.sock", b->dir);
	snprintf(b->log, sizeof(b->log), "%s/rgapsd.log", b->dir);
	snprintf(b->config, sizeof(b->config), "%s/rgapsd.json", b->dir);
	snprintf(b->instance, sizeof(b->instance), "bench%d", (int)getpid());
	for (int i = 0; i < b->o.nsizes; i++)
		maxsize = TOOL_MAX(maxsize, b->o.sizes[i]);
	pool = TOOL_MAX(256ull << 20, 4 * maxsize);
	tool_format_size(maxsize, maxs, sizeof(maxs));
	tool_format_size(pool, pools, sizeof(pools));
	f = fopen(b->config, "w");
	if (!f) {
		fprintf(stderr, "rgaps-bench: %s: %s\n", b->config, strerror(errno));
		return -errno;
	}
	fprintf(f, "{ \"defaults\": { \"pool_size\": \"%s\", \"max_message_size\": \"%s\"", pools,
		maxs);
	if (b->o.memory)
		fprintf(f, ", \"memory\": \"%s\"", b->o.memory);
	fprintf(f, " } }\n");
	fclose(f);

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "rgaps-bench: fork: %s\n", strerror(errno));
		return -errno;
	}
	if (pid == 0) {
		int fd = open(b->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(rgapsd, rgapsd, "--config", b->config, "--socket", b->sock, "--instance",
		      b->instance, "--log-level", "warn", (char *)NULL);
		fprintf(stderr, "exec %s: %s\n", rgapsd, strerror(errno));
		_exit(127);
	}
	b->daemon_pid = pid;
	setenv("RGAPS_SOCKET", b->sock, 1);
	for (int i = 0; i < 500; i++) {
		cJSON *reply;
		int st;

		if (waitpid(pid, &st, WNOHANG) == pid) {
			b->daemon_pid = 0;
			fprintf(stderr, "rgaps-bench: rgapsd exited at start\n");
			harness_print_file(b->log);
			return -ECHILD;
		}
		if (query_json("{\"type\":\"topics\"}", &reply) == 0) {
			cJSON_Delete(reply);
			return 0;
		}
		usleep(10000);
	}
	fprintf(stderr, "rgaps-bench: rgapsd did not answer on %s within 5 s\n", b->sock);
	harness_print_file(b->log);
	return -ETIMEDOUT;
}

/* ---------------------------------------------------------------- one configuration */

struct sub_arg {
	struct shared *sh;
	const struct run *run;
	const char *topic;
	uint64_t n, warm; /* this round: measured and warm-up messages */
	bool verify;
};

static void sub_child(int idx, void *arg)
{
	const struct sub_arg *sa = arg;
	struct shared *sh = sa->sh;
	const struct run *c = sa->run;
	uint64_t total = sa->warm + sa->n, base = 0;
	rgaps_topic_info_t info = { .struct_size = sizeof(info) };
	rgaps_subscriber_t *sub;
	bool host;
	int r;

	if (c->spin != SPIN_LIB) {
		char v[16];

		snprintf(v, sizeof(v), "%d", c->spin);
		setenv("RGAPS_SPIN_US", v, 1);
	}
	sub = rgaps_subscriber_init(sa->topic);
	if (!sub)
		harness_child_fail(&sh->sync, idx, "cannot attach to '%s': %s", sa->topic, rgaps_strerror(errno));
	r = rgaps_subscriber_info(sub, &info);
	if (r)
		harness_child_fail(&sh->sync, idx, "topic info: %s", rgaps_strerror(r));
	host = info.memory == RGAPS_MEMORY_HOST;
	__atomic_add_fetch(&sh->sync.ready, 1, __ATOMIC_SEQ_CST);
	tool_futex_wake_all(&sh->sync.ready);

	for (uint64_t k = 0; k < total; k++) {
		rgaps_msg_t m;
		uint64_t now;

		r = rgaps_subscriber_take(sub, &m, WAIT_MS);
		now = real_ns();
		if (r)
			harness_child_fail(&sh->sync, idx, "take of message %" PRIu64 " of %" PRIu64 ": %s", k,
				   total, rgaps_strerror(r));
		if (k == 0)
			base = m.seq;
		if (m.seq != base + k || m.gap || m.size != c->size)
			harness_child_fail(&sh->sync, idx, "message %" PRIu64 ": seq %" PRIu64 " (want %" PRIu64
					    "), gap %" PRIu64 ", %zu bytes (want %" PRIu64 ")",
				   k, m.seq, base + k, m.gap, m.size, c->size);
		if (host) {
			uint64_t hdr[2];

			memcpy(hdr, m.data, sizeof(hdr));
			if (hdr[0] != k || hdr[1] != c->size)
				harness_child_fail(&sh->sync, idx, "message %" PRIu64 ": payload header says "
						    "counter %" PRIu64 " size %" PRIu64, k, hdr[0],
					   hdr[1]);
			if (sa->verify) {
				uint64_t ctr;
				int64_t off = rgaps_pattern_check(m.data, m.size, &ctr);

				if (off >= 0)
					harness_child_fail(&sh->sync, idx, "message %" PRIu64 ": payload differs "
							    "at byte %" PRId64, k, off);
			}
		}
		if (k >= sa->warm)
			sh->lat[(uint64_t)idx * sa->n + (k - sa->warm)] = (int64_t)(now - m.ts_ns);
		if (k == sa->warm)
			sh->t_first[idx] = m.ts_ns;
		if (k == total - 1)
			sh->t_last[idx] = now;
		r = rgaps_subscriber_release(sub, &m);
		if (r)
			harness_child_fail(&sh->sync, idx, "release of message %" PRIu64 ": %s", k,
				   rgaps_strerror(r));
		if (c->mode == MODE_LATENCY &&
		    __atomic_add_fetch(&sh->sync.released, 1, __ATOMIC_SEQ_CST) ==
			    (uint32_t)((uint64_t)c->nsubs * (k + 1)))
			tool_futex_wake_all(&sh->sync.released);
	}
	rgaps_subscriber_destroy(sub);
}

/*
 * Touch the whole pool once per topic (loan the largest blocks it gives,
 * write them, give them back) so no page fault of the pool lands inside a
 * measurement.
 */
static void pool_prefault(rgaps_publisher_t *pub, const rgaps_topic_info_t *info)
{
	rgaps_loan_t loans[64];
	int n = 0;

	if (info->memory != RGAPS_MEMORY_HOST)
		return;
	while (n < 64 && rgaps_publisher_loan(pub, info->max_message_size, 0, &loans[n]) == 0) {
		memset(loans[n].data, 0, loans[n].size);
		n++;
	}
	while (n--)
		rgaps_publisher_cancel(pub, &loans[n]);
}

/* Keep this round's samples in the run's arrays. */
static void round_collect(struct run *c, const struct shared *sh, const int64_t *push_ns,
			  uint64_t n)
{
	for (int s = 0; s < c->nsubs; s++) {
		memcpy(&c->lat[(uint64_t)s * c->iters + c->done], &sh->lat[(uint64_t)s * n],
		       n * sizeof(int64_t));
		c->sub_s[s] += (double)(sh->t_last[s] - sh->t_first[s]) / NS_PER_S;
	}
	memcpy(&c->push[c->done], push_ns, n * sizeof(int64_t));
	c->done += n;
}

static int stats_fill(struct run *c)
{
	uint64_t n = (uint64_t)c->nsubs * c->iters;
	int64_t *last = calloc(c->iters, sizeof(*last)), *fan = calloc(c->iters, sizeof(*fan));
	double sum = 0;

	if (!last || !fan) {
		free(last);
		free(fan);
		return -ENOMEM;
	}
	for (int s = 0; s < c->nsubs; s++)
		for (uint64_t i = 0; i < c->iters; i++)
			last[i] = TOOL_MAX(last[i], c->lat[(uint64_t)s * c->iters + i]);
	/* Paired per message, so that how fast the copy went this time cancels out. */
	for (uint64_t i = 0; i < c->iters; i++)
		fan[i] = last[i] - c->push[i];
	qsort(fan, c->iters, sizeof(*fan), harness_cmp_i64);
	c->fan_p50 = harness_pct(fan, c->iters, 0.5);
	for (uint64_t i = 0; i < n; i++)
		sum += (double)c->lat[i];
	qsort(c->lat, n, sizeof(*c->lat), harness_cmp_i64);
	qsort(last, c->iters, sizeof(*last), harness_cmp_i64);
	qsort(c->push, c->iters, sizeof(*c->push), harness_cmp_i64);
	c->p50 = harness_pct(c->lat, n, 0.5);
	c->p99 = harness_pct(c->lat, n, 0.99);
	c->p999 = harness_pct(c->lat, n, 0.999);
	c->min = (double)c->lat[0];
	c->max = (double)c->lat[n - 1];
	c->mean = sum / (double)n;
	c->last_p50 = harness_pct(last, c->iters, 0.5);
	c->last_p99 = harness_pct(last, c->iters, 0.99);
	c->push_p50 = harness_pct(c->push, c->iters, 0.5);
	c->push_p99 = harness_pct(c->push, c->iters, 0.99);
	c->push_min = (double)c->push[0];
	if (c->mode == MODE_THROUGHPUT) {
		c->msgs_s = 0;
		c->gib_s_total = 0;
		for (int s = 0; s < c->nsubs; s++) {
			double rate = c->sub_s[s] > 0 ? (double)c->iters / c->sub_s[s] : 0;

			if (s == 0 || rate < c->msgs_s)
				c->msgs_s = rate;
			c->gib_s_total += rate * (double)c->size / GIB;
		}
		c->gib_s = c->msgs_s * (double)c->size / GIB;
	}
	free(last);
	free(fan);
	return 0;
}

/* The payload of message k: header {counter, size}, or the whole pattern with --verify. */
static void payload_fill(uint8_t *buf, uint64_t size, uint64_t k, bool verify)
{
	uint64_t hdr[2] = { k, size };

	if (verify)
		rgaps_pattern_fill(buf, size, k);
	else
		memcpy(buf, hdr, sizeof(hdr));
}

/*
 * Publish message k; *ns_p gets the time spent in the API. The source of a
 * push is filled before the clock starts; a loan can only be filled in
 * between (host memory only: a device pointer is not the CPU's to write).
 */
static int publish(rgaps_publisher_t *pub, const struct run *c, bool host, bool verify,
		   uint8_t *src, uint64_t k, int64_t *ns_p)
{
	rgaps_loan_t loan;
	uint64_t t0;
	int r;

	if (c->api == API_PUSH) {
		if (host)
			payload_fill(src, c->size, k, verify);
		t0 = mono_ns();
		r = rgaps_publisher_push_timeout(pub, c->size, src, WAIT_MS);
		*ns_p = (int64_t)(mono_ns() - t0);
		return r;
	}
	t0 = mono_ns();
	r = rgaps_publisher_loan(pub, c->size, WAIT_MS, &loan);
	if (r)
		return r;
	if (host)
		payload_fill(loan.data, c->size, k, verify);
	r = rgaps_publisher_commit(pub, &loan, c->size);
	*ns_p = (int64_t)(mono_ns() - t0);
	return r;
}

static void topic_of(uint64_t size, char *buf, size_t len)
{
	char sz[32];

	/* One topic per size: each pool stays in shared memory until rgapsd exits. */
	tool_format_size(size, sz, sizeof(sz));
	snprintf(buf, len, "bench-%d-%s", (int)getpid(), sz);
}

/* Wait until the subscribers of the last round have left the topic (5 s). */
static int topic_idle(const char *topic)
{
	int n;

	for (int i = 0; (n = topic_subscribers(topic)) != 0; i++) {
		if (n < 0 || i == 500) {
			fprintf(stderr, "rgaps-bench: topic %s: %s\n", topic,
				n < 0 ? rgaps_strerror(n)
				      : "subscribers of the last round still attached after 5 s");
			return n < 0 ? n : -EBUSY;
		}
		usleep(10000);
	}
	return 0;
}

/* Attach the publisher of a size's topic, check the size fits, pre-fault the pool once. */
static int pub_open(struct bench *b, uint64_t size, rgaps_publisher_t **pub_p,
		    rgaps_topic_info_t *info)
{
	rgaps_publisher_t *pub;
	char topic[64];
	int r;

	topic_of(size, topic, sizeof(topic));
	pub = rgaps_publisher_init(topic);
	if (!pub) {
		r = -errno;
		fprintf(stderr, "rgaps-bench: cannot attach a publisher to '%s': %s\n", topic,
			rgaps_strerror(r));
		return r;
	}
	info->struct_size = sizeof(*info);
	r = rgaps_publisher_info(pub, info);
	if (r) {
		fprintf(stderr, "rgaps-bench: topic info of '%s': %s\n", topic, rgaps_strerror(r));
		goto err;
	}
	if (size > info->max_message_size) {
		fprintf(stderr, "rgaps-bench: %" PRIu64 "-byte messages do not fit topic '%s' "
				"(max_message_size %zu bytes): raise it in the daemon's defaults "
				"or use --spawn-daemon\n", size, topic, info->max_message_size);
		r = -EMSGSIZE;
		goto err;
	}
	b->memory = info->memory == RGAPS_MEMORY_HOST ? "host" : "cuda";
	pool_prefault(pub, info);
	*pub_p = pub;
	return 0;
err:
	rgaps_publisher_destroy(pub);
	return r;
}

/*
 * The library's own cost over one copy: push to the size's topic with no
 * subscriber attached (nothing to wake), each push followed by one memcpy of
 * the same size into shared memory, so that both see the same caches.
 */
static int raw_push_measure(rgaps_publisher_t *pub, uint64_t size, uint64_t n, uint8_t *src,
			    uint8_t *shm, struct raw_copy *rc)
{
	char topic[64];
	int r;

	topic_of(size, topic, sizeof(topic));
	r = topic_idle(topic);
	for (uint64_t i = 0; i < n + 3 && !r; i++) {
		uint64_t t0 = mono_ns(), t1;

		r = rgaps_publisher_push_timeout(pub, size, src, WAIT_MS);
		t1 = mono_ns();
		memcpy(shm, src, size);
		barrier_ptr(shm);
		if (r)
			fprintf(stderr, "rgaps-bench: push with no subscriber to '%s': %s\n", topic,
				rgaps_strerror(r));
		else if (i >= 3 && (samples_add(&rc->alone, (int64_t)(t1 - t0)) ||
				    samples_add(&rc->il, (int64_t)(mono_ns() - t1))))
			r = -ENOMEM;
	}
	return r;
}

/*
 * One round of one configuration: fork the subscribers, publish warm + n
 * messages through the size's publisher (attached once, so its page tables
 * of the pool are warm).
 */
static int run_round(struct bench *b, struct run *c, rgaps_publisher_t *pub, bool host,
		     uint8_t *hostbuf, uint64_t n)
{
	struct sub_arg sa = { .run = c, .n = n, .warm = c->warm, .verify = b->o.verify };
	uint64_t total = c->warm + n;
	rgaps_loan_t src_loan = { 0 };
	bool have_src_loan = false;
	int64_t *push_ns;
	struct harness_kids k = { 0 };
	struct shared *sh;
	char topic[64];
	uint8_t *src;
	size_t len;
	int r;

	topic_of(c->size, topic, sizeof(topic));
	sa.topic = topic;
	r = topic_idle(topic);
	if (r)
		return r;
	push_ns = calloc(n, sizeof(*push_ns));
	sh = push_ns ? shared_map((size_t)c->nsubs * n, &len) : NULL;
	if (!sh) {
		free(push_ns);
		return -ENOMEM;
	}
	sa.sh = sh;
	k.sync = &sh->sync;
	r = harness_spawn(&k, c->nsubs, b->o.sub_cpus, b->o.nsub_cpus, sub_child, &sa);
	if (r)
		goto out_unmap;
	r = harness_wait_count(&k, &sh->sync.ready, (uint32_t)c->nsubs, "subscribers to attach");
	if (r)
		goto out_kill;
	src = hostbuf;
	if (!host && c->api == API_PUSH) {
		/* A push copies from device memory: use a block of the pool as the source. */
		r = rgaps_publisher_loan(pub, c->size, WAIT_MS, &src_loan);
		if (r) {
			fprintf(stderr, "rgaps-bench: loan for the device source buffer: %s\n",
				rgaps_strerror(r));
			goto out_kill;
		}
		have_src_loan = true;
		src = src_loan.data;
	}

	for (uint64_t i = 0; i < total; i++) {
		int64_t ns = 0;

		r = publish(pub, c, host, b->o.verify, src, i, &ns);
		if (i >= c->warm)
			push_ns[i - c->warm] = ns;
		if (r) {
			fprintf(stderr, "rgaps-bench: publish of message %" PRIu64 " (%" PRIu64
					" bytes) to '%s': %s\n",
				i, c->size, topic, rgaps_strerror(r));
			goto out_loan;
		}
		if (c->mode == MODE_LATENCY) {
			r = harness_wait_count(&k, &sh->sync.released,
					       (uint32_t)((uint64_t)c->nsubs * (i + 1)),
					       "every subscriber to release the last message");
			if (r)
				goto out_loan;
		} else if (__atomic_load_n(&sh->sync.failed, __ATOMIC_ACQUIRE) || tool_interrupted) {
			r = -EIO;
			goto out_loan;
		}
	}
	r = harness_wait_exit(&k);
	if (r == 0)
		round_collect(c, sh, push_ns, n);
out_loan:
	if (have_src_loan)
		rgaps_publisher_cancel(pub, &src_loan);
out_kill:
	if (r)
		harness_kill(&k);
out_unmap:
	munmap(sh, len);
	free(push_ns);
	return r;
}

/* ---------------------------------------------------------------- the plan */

static bool small(uint64_t size)
{
	return size <= (64u << 10);
}

static int plan_add(struct bench *b, uint64_t size, int nsubs, enum mode mode, enum api api,
		    int spin)
{
	struct run *c;

	if (b->nruns == (int)TOOL_ARRAY_SIZE(b->runs)) {
		fprintf(stderr, "rgaps-bench: too many configurations (at most %d)\n",
			(int)TOOL_ARRAY_SIZE(b->runs));
		return -E2BIG;
	}
	c = &b->runs[b->nruns++];
	memset(c, 0, sizeof(*c));
	c->size = size;
	c->nsubs = nsubs;
	c->mode = mode;
	c->api = api;
	c->spin = spin;
	c->iters = adaptive_iters(&b->o, size, mode);
	if (c->iters < (uint64_t)b->o.rounds)
		c->iters = (uint64_t)b->o.rounds;
	c->warm = warmup_of(c->iters / (uint64_t)b->o.rounds);
	c->lat = calloc((size_t)nsubs * c->iters, sizeof(*c->lat));
	c->push = calloc(c->iters, sizeof(*c->push));
	if (!c->lat || !c->push) {
		fprintf(stderr, "rgaps-bench: out of memory for the samples\n");
		return -ENOMEM;
	}
	return 0;
}

/*
 * Per size and subscriber count: latency rows (each spin value, each API),
 * then a throughput row. By default the small sizes also get a row with
 * RGAPS_SPIN_US=0 (pure futex wake-up) and one with loan/commit.
 */
static int plan(struct bench *b)
{
	const struct opts *o = &b->o;
	int r = 0;

	for (int si = 0; si < o->nsizes; si++) {
		uint64_t size = o->sizes[si];

		for (int ni = 0; ni < o->nsubs; ni++) {
			int n = o->subs[ni];
			int spins[MAX_LIST + 1], nspins = 0;
			bool push = o->api_push, loan = o->api_loan;

			if (o->nspins) {
				memcpy(spins, o->spins, sizeof(int) * (size_t)o->nspins);
				nspins = o->nspins;
			} else {
				spins[nspins++] = SPIN_LIB;
				if (small(size))
					spins[nspins++] = 0;
			}
			if (o->latency) {
				for (int s = 0; s < nspins && !r && push; s++)
					r = plan_add(b, size, n, MODE_LATENCY, API_PUSH, spins[s]);
				if (!o->api_given && small(size) && !r)
					r = plan_add(b, size, n, MODE_LATENCY, API_LOAN, spins[0]);
				for (int s = 0; s < nspins && !r && loan; s++)
					r = plan_add(b, size, n, MODE_LATENCY, API_LOAN, spins[s]);
			}
			if (o->throughput && push && !r)
				r = plan_add(b, size, n, MODE_THROUGHPUT, API_PUSH, spins[0]);
			if (o->throughput && loan && !r)
				r = plan_add(b, size, n, MODE_THROUGHPUT, API_LOAN, spins[0]);
			if (r)
				return r;
		}
	}
	return 0;
}

/* ---------------------------------------------------------------- output */

static void spin_label(const struct bench *b, int spin, char *buf, size_t len)
{
	if (spin != SPIN_LIB)
		snprintf(buf, len, "%d", spin);
	else if (b->spin_env[0])
		snprintf(buf, len, "%s", b->spin_env);
	else
		snprintf(buf, len, "%d*", LIB_SPIN_DEFAULT_US);
}

static const char *api_name(enum api a)
{
	return a == API_PUSH ? "push" : "loan";
}

static void machine_info(struct bench *b, int argc, char **argv)
{
	struct utsname u;
	struct sysinfo si;
	char line[512];
	time_t now = time(NULL);
	const char *env = getenv("RGAPS_SPIN_US");
	FILE *f;
	size_t off = 0;

	b->nproc = sysconf(_SC_NPROCESSORS_ONLN);
	snprintf(b->machine_cpu, sizeof(b->machine_cpu), "unknown");
	f = fopen("/proc/cpuinfo", "r");
	while (f && fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');

		if (!strncmp(line, "model name", 10) && colon) {
			colon += 2;
			colon[strcspn(colon, "\n")] = 0;
			snprintf(b->machine_cpu, sizeof(b->machine_cpu), "%s", colon);
			break;
		}
	}
	if (f)
		fclose(f);
	if (uname(&u) == 0)
		snprintf(b->machine_kernel, sizeof(b->machine_kernel), "%s %s %s", u.sysname,
			 u.release, u.machine);
	if (sysinfo(&si) == 0)
		b->ram = (uint64_t)si.totalram * si.mem_unit;
	strftime(b->date, sizeof(b->date), "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
	for (int i = 0; i < argc && off < sizeof(b->cmdline) - 1; i++)
		off += (size_t)snprintf(b->cmdline + off, sizeof(b->cmdline) - off, "%s%s",
					i ? " " : "", argv[i]);
	snprintf(b->spin_env, sizeof(b->spin_env), "%s", env ? env : "");
	harness_loadavg(b->load_start, sizeof(b->load_start));
}

static double us(double ns)
{
	return ns / 1000.0;
}

static double gib_s(uint64_t size, double ns)
{
	return ns > 0 ? (double)size / GIB / (ns / NS_PER_S) : 0;
}

static const struct run *find_run(const struct bench *b, uint64_t size, int nsubs, enum mode m,
				  enum api a, int spin)
{
	for (int i = 0; i < b->nruns; i++) {
		const struct run *c = &b->runs[i];

		if (c->size == size && c->nsubs == nsubs && c->mode == m && c->api == a &&
		    c->spin == spin)
			return c;
	}
	return NULL;
}

static void print_tables(const struct bench *b)
{
	char sz[32], sp[16];
	bool any;

	printf("\nrgaps-bench: local path, %s memory backend\n", b->memory);
	printf("machine: %ld CPUs, %s, %s, %.1f GiB RAM; %s\n", b->nproc, b->machine_cpu,
	       b->machine_kernel, (double)b->ram / GIB, b->date);
	printf("command: %s\n", b->cmdline);
	printf("load average (/proc/loadavg) at start: %s, at end: %s\n", b->load_start,
	       b->load_end);
	printf("each configuration ran in %d rounds, round-robin with the others of its size\n",
	       b->o.rounds);

	any = false;
	for (int i = 0; i < b->nruns; i++)
		any |= b->runs[i].mode == MODE_LATENCY;
	if (any) {
		printf("\nLatency, publish -> take returns (us), paced: one message in flight; "
		       "percentiles over all subscribers' samples\n");
		printf("%-7s %4s %4s %4s %6s %9s %9s %9s %9s %9s %9s %9s %8s\n", "size", "subs",
		       "api", "spin", "iters", "p50", "p99", "p99.9", "min", "max", "last-p50",
		       "pub-p50", "fan-p50");
		for (int i = 0; i < b->nruns; i++) {
			const struct run *c = &b->runs[i];

			if (c->mode != MODE_LATENCY)
				continue;
			tool_format_size(c->size, sz, sizeof(sz));
			spin_label(b, c->spin, sp, sizeof(sp));
			printf("%-7s %4d %4s %4s %6" PRIu64 " %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f "
			       "%9.1f %8.1f\n", sz, c->nsubs, api_name(c->api), sp, c->iters,
			       us(c->p50), us(c->p99), us(c->p999), us(c->min), us(c->max),
			       us(c->last_p50), us(c->push_p50), us(c->fan_p50));
		}
		printf("spin: RGAPS_SPIN_US of the subscribers (* library default). last-p50: "
		       "median over messages of the slowest\nsubscriber's latency. pub-p50: time "
		       "the publisher spends in push (or loan + commit). fan-p50: median over\n"
		       "messages of (slowest subscriber's latency - that message's pub time): "
		       "delivery beyond the copy.\n");
	}
	any = false;
	for (int i = 0; i < b->nruns; i++)
		any |= b->runs[i].mode == MODE_THROUGHPUT;
	if (any) {
		printf("\nThroughput, back-to-back publishing; per subscriber = the slowest one, "
		       "first push start to last take\n");
		printf("%-7s %4s %4s %6s %12s %12s %12s %9s\n", "size", "subs", "api", "iters",
		       "msg/s/sub", "GiB/s/sub", "GiB/s total", "pub-p50");
		for (int i = 0; i < b->nruns; i++) {
			const struct run *c = &b->runs[i];

			if (c->mode != MODE_THROUGHPUT)
				continue;
			tool_format_size(c->size, sz, sizeof(sz));
			printf("%-7s %4d %4s %6" PRIu64 " %12.0f %12.3f %12.3f %9.1f\n", sz,
			       c->nsubs, api_name(c->api), c->iters, c->msgs_s, c->gib_s,
			       c->gib_s_total, us(c->push_p50));
		}
	}

	printf("\nRaw limits of this machine: one memcpy, back to back (us), into private "
	       "memory and into shared memory (as the pool)\n");
	printf("%-7s %10s %10s %8s %10s %10s %8s\n", "size", "priv p50", "priv min", "GiB/s",
	       "shm p50", "shm min", "GiB/s");
	for (int i = 0; i < b->o.nsizes; i++) {
		const struct raw_copy *rc = &b->copies[i];

		tool_format_size(rc->size, sz, sizeof(sz));
		printf("%-7s %10.2f %10.2f %8.2f %10.2f %10.2f %8.2f\n", sz, us(rc->priv.p50),
		       us(rc->priv.min), gib_s(rc->size, rc->priv.p50), us(rc->shm.p50),
		       us(rc->shm.min), gib_s(rc->size, rc->shm.p50));
	}
	printf("%-22s %9s %9s %9s\n", "futex wake, N sleepers", "p50 us", "p99 us", "max us");
	for (int i = 0; i < b->o.nsubs; i++) {
		const struct raw_wake *w = &b->wakes[i];

		printf("%-22d %9.1f %9.1f %9.1f\n", w->nsubs, us(w->p50), us(w->p99), us(w->max));
	}

	printf("\nOurs / one memcpy (us, p50). alone: push with no subscriber, each followed "
	       "by a memcpy (copy') of\nthe same size into shared memory; pub and lat: paced push "
	       "to 1 subscriber; copy: memcpy into shm, back to back\n");
	printf("%-7s %10s %10s %8s %10s %10s %8s %8s\n", "size", "alone", "copy'", "ratio",
	       "pub", "lat", "copy", "lat/copy");
	for (int i = 0; i < b->o.nsizes; i++) {
		const struct raw_copy *rc = &b->copies[i];
		const struct run *c = find_run(b, rc->size, 1, MODE_LATENCY, API_PUSH,
					       b->o.nspins ? b->o.spins[0] : SPIN_LIB);

		if (!rc->il.n || rc->il.p50 <= 0 || rc->shm.p50 <= 0)
			continue;
		tool_format_size(rc->size, sz, sizeof(sz));
		printf("%-7s %10.2f %10.2f %8.2f", sz, us(rc->alone.p50), us(rc->il.p50),
		       rc->alone.p50 / rc->il.p50);
		if (c)
			printf(" %10.2f %10.2f %8.2f %8.2f", us(c->push_p50), us(c->p50),
			       us(rc->shm.p50), c->p50 / rc->shm.p50);
		printf("\n");
	}
}

static cJSON *json_build(const struct bench *b)
{
	cJSON *root = cJSON_CreateObject(), *m, *arr;
	char sp[16];

	m = cJSON_AddObjectToObject(root, "machine");
	cJSON_AddNumberToObject(m, "nproc", (double)b->nproc);
	cJSON_AddStringToObject(m, "cpu", b->machine_cpu);
	cJSON_AddStringToObject(m, "kernel", b->machine_kernel);
	cJSON_AddNumberToObject(m, "ram_bytes", (double)b->ram);
	cJSON_AddStringToObject(root, "date", b->date);
	cJSON_AddStringToObject(root, "command", b->cmdline);
	cJSON_AddNumberToObject(root, "rounds", b->o.rounds);
	cJSON_AddStringToObject(root, "loadavg_start", b->load_start);
	cJSON_AddStringToObject(root, "loadavg_end", b->load_end);
	cJSON_AddStringToObject(root, "memory", b->memory);
	cJSON_AddNumberToObject(root, "lib_spin_default_us", LIB_SPIN_DEFAULT_US);
	arr = cJSON_AddArrayToObject(root, "runs");
	for (int i = 0; i < b->nruns; i++) {
		const struct run *c = &b->runs[i];
		cJSON *o = cJSON_CreateObject();

		cJSON_AddNumberToObject(o, "size", (double)c->size);
		cJSON_AddNumberToObject(o, "subscribers", c->nsubs);
		cJSON_AddStringToObject(o, "mode",
					c->mode == MODE_LATENCY ? "latency" : "throughput");
		cJSON_AddStringToObject(o, "api", api_name(c->api));
		spin_label(b, c->spin, sp, sizeof(sp));
		cJSON_AddStringToObject(o, "spin_us", sp);
		cJSON_AddNumberToObject(o, "iters", (double)c->iters);
		cJSON_AddNumberToObject(o, "warmup", (double)c->warm);
		cJSON_AddNumberToObject(o, "pub_p50_ns", c->push_p50);
		cJSON_AddNumberToObject(o, "pub_p99_ns", c->push_p99);
		cJSON_AddNumberToObject(o, "pub_min_ns", c->push_min);
		if (c->mode == MODE_LATENCY) {
			cJSON_AddNumberToObject(o, "p50_ns", c->p50);
			cJSON_AddNumberToObject(o, "p99_ns", c->p99);
			cJSON_AddNumberToObject(o, "p999_ns", c->p999);
			cJSON_AddNumberToObject(o, "min_ns", c->min);
			cJSON_AddNumberToObject(o, "max_ns", c->max);
			cJSON_AddNumberToObject(o, "mean_ns", c->mean);
			cJSON_AddNumberToObject(o, "last_p50_ns", c->last_p50);
			cJSON_AddNumberToObject(o, "last_p99_ns", c->last_p99);
		cJSON_AddNumberToObject(o, "fanout_p50_ns", c->fan_p50);
		} else {
			cJSON_AddNumberToObject(o, "msgs_per_s_per_sub", c->msgs_s);
			cJSON_AddNumberToObject(o, "gib_per_s_per_sub", c->gib_s);
			cJSON_AddNumberToObject(o, "gib_per_s_total", c->gib_s_total);
		}
		cJSON_AddItemToArray(arr, o);
	}
	arr = cJSON_AddArrayToObject(root, "raw_memcpy");
	for (int i = 0; i < b->o.nsizes; i++) {
		cJSON *o = cJSON_CreateObject();

		cJSON_AddNumberToObject(o, "size", (double)b->copies[i].size);
		cJSON_AddNumberToObject(o, "private_p50_ns", b->copies[i].priv.p50);
		cJSON_AddNumberToObject(o, "private_min_ns", b->copies[i].priv.min);
		cJSON_AddNumberToObject(o, "shm_p50_ns", b->copies[i].shm.p50);
		cJSON_AddNumberToObject(o, "shm_min_ns", b->copies[i].shm.min);
		cJSON_AddNumberToObject(o, "push_no_subscriber_p50_ns", b->copies[i].alone.p50);
		cJSON_AddNumberToObject(o, "push_no_subscriber_min_ns", b->copies[i].alone.min);
		cJSON_AddNumberToObject(o, "memcpy_after_push_p50_ns", b->copies[i].il.p50);
		cJSON_AddNumberToObject(o, "memcpy_after_push_min_ns", b->copies[i].il.min);
		cJSON_AddItemToArray(arr, o);
	}
	arr = cJSON_AddArrayToObject(root, "raw_futex_wake");
	for (int i = 0; i < b->o.nsubs; i++) {
		cJSON *o = cJSON_CreateObject();

		cJSON_AddNumberToObject(o, "sleepers", b->wakes[i].nsubs);
		cJSON_AddNumberToObject(o, "p50_ns", b->wakes[i].p50);
		cJSON_AddNumberToObject(o, "p99_ns", b->wakes[i].p99);
		cJSON_AddNumberToObject(o, "max_ns", b->wakes[i].max);
		cJSON_AddItemToArray(arr, o);
	}
	return root;
}

static int json_write(const struct bench *b)
{
	cJSON *root = json_build(b);
	char *text = cJSON_Print(root);
	FILE *f = text ? fopen(b->o.json, "w") : NULL;
	int r = 0;

	if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0) {
		fprintf(stderr, "rgaps-bench: cannot write %s: %s\n", b->o.json, strerror(errno));
		r = -EIO;
	}
	if (f && fclose(f) && !r) {
		fprintf(stderr, "rgaps-bench: cannot write %s: %s\n", b->o.json, strerror(errno));
		r = -EIO;
	}
	free(text);
	cJSON_Delete(root);
	return r;
}

/* ---------------------------------------------------------------- main */

static void progress(const struct bench *b, const struct run *c, int round, uint64_t n)
{
	char sz[32], sp[16];

	tool_format_size(c->size, sz, sizeof(sz));
	spin_label(b, c->spin, sp, sizeof(sp));
	fprintf(stderr, "round %d/%d: %s x %d, %s, %s, spin %s: %" PRIu64 " + %" PRIu64
			" warm-up messages\n", round + 1, b->o.rounds, sz, c->nsubs,
		c->mode == MODE_LATENCY ? "latency" : "throughput", api_name(c->api), sp, n,
		c->warm);
}

/*
 * Per size: R rounds; each measures the raw copy, the push with no
 * subscriber, then 1/R of every configuration of that size in turn, starting
 * one configuration further each round, so that none always runs right after
 * the raw tests (a position effect we saw). Buffers are faulted in once and
 * live for the whole size.
 */
static int run_size(struct bench *b, int si)
{
	uint64_t size = b->o.sizes[si], ncopy = copies_per_round(size, b->o.rounds);
	struct raw_copy *rc = &b->copies[si];
	uint8_t *buf = buf_alloc(size), *dst = buf ? buf_alloc(size) : NULL;
	uint8_t *shm = dst ? shm_alloc(size) : NULL;
	rgaps_publisher_t *pub = NULL;
	rgaps_topic_info_t info;
	int idx[TOOL_ARRAY_SIZE(b->runs)], m = 0;
	bool host;
	int r = -ENOMEM;

	if (!shm)
		goto out;
	for (int i = 0; i < b->nruns; i++)
		if (b->runs[i].size == size)
			idx[m++] = i;
	r = pub_open(b, size, &pub, &info);
	if (r)
		goto out;
	host = info.memory == RGAPS_MEMORY_HOST;
	for (int round = 0; round < b->o.rounds; round++) {
		fprintf(stderr, "round %d/%d: raw memcpy and push with no subscriber, %" PRIu64
				" bytes\n", round + 1, b->o.rounds, size);
		r = raw_copy_measure(size, ncopy, buf, dst, shm, rc);
		/* a host buffer is no source for a cuda pool */
		if (!r && host)
			r = raw_push_measure(pub, size, ncopy, buf, shm, rc);
		for (int j = 0; j < m && !r; j++) {
			struct run *c = &b->runs[idx[(j + round) % m]];
			uint64_t n = c->iters / (uint64_t)b->o.rounds +
				     ((uint64_t)round < c->iters % (uint64_t)b->o.rounds);

			if (!n)
				continue;
			progress(b, c, round, n);
			r = run_round(b, c, pub, host, buf, n);
		}
		if (r)
			goto out;
	}
	samples_done(&rc->priv);
	samples_done(&rc->shm);
	samples_done(&rc->alone);
	samples_done(&rc->il);
	for (int i = 0; i < b->nruns && !r; i++)
		if (b->runs[i].size == size)
			r = stats_fill(&b->runs[i]);
out:
	rgaps_publisher_destroy(pub);
	if (buf)
		munmap(buf, size);
	if (dst)
		munmap(dst, size);
	if (shm)
		munmap(shm, size);
	return r;
}

static int run_all(struct bench *b)
{
	int r;

	for (int i = 0; i < b->o.nsubs; i++) {
		fprintf(stderr, "raw futex wake-up of %d processes\n", b->o.subs[i]);
		r = raw_wake_measure(b->o.subs[i], b->o.sub_cpus, b->o.nsub_cpus, &b->wakes[i]);
		if (r)
			return r;
	}
	for (int si = 0; si < b->o.nsizes; si++) {
		r = run_size(b, si);
		if (r)
			return r;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static struct bench b;
	int r;

	r = parse_opts(argc, argv, &b.o);
	if (r)
		return r;
	b.memory = "unknown";
	tool_catch_signals(); /* waits end at SIGINT, SIGTERM, SIGHUP */
	machine_info(&b, argc, argv);
	if (b.o.socket)
		setenv("RGAPS_SOCKET", b.o.socket, 1);
	r = plan(&b);
	if (r)
		return 1;
	harness_save_cpus();
	if (b.o.spawn) {
		r = daemon_spawn(&b);
		if (r)
			goto out;
	}
	if (b.o.pub_cpu >= 0) {
		r = harness_pin(b.o.pub_cpu);
		if (r)
			goto out;
	}
	if (!b.o.spawn) {
		cJSON *reply;

		r = query_json("{\"type\":\"topics\"}", &reply);
		if (r) {
			const char *sock = getenv("RGAPS_SOCKET");

			fprintf(stderr, "rgaps-bench: cannot reach rgapsd at %s: %s (start one, or "
					"use --spawn-daemon)\n",
				sock && *sock ? sock : tool_default_socket(), rgaps_strerror(r));
			goto out;
		}
		cJSON_Delete(reply);
	}
	r = run_all(&b);
	if (r)
		goto out;
	harness_loadavg(b.load_end, sizeof(b.load_end));
	print_tables(&b);
	if (b.o.json)
		r = json_write(&b);
out:
	if (r && !tool_interrupted && b.daemon_pid > 0)
		harness_print_file(b.log);
	daemon_stop(&b);
	for (int i = 0; i < b.nruns; i++) {
		free(b.runs[i].lat);
		free(b.runs[i].push);
	}
	for (int i = 0; i < b.o.nsizes; i++) {
		free(b.copies[i].priv.v);
		free(b.copies[i].shm.v);
		free(b.copies[i].alone.v);
		free(b.copies[i].il.v);
	}
	if (tool_interrupted)
		return 130;
	return r ? 1 : 0;
}
