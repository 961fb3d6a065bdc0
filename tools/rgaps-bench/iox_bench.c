/*
 * iox-bench: what rgaps-bench's latency and throughput modes measure, done with
 * iceoryx 2.0.3 through its C binding, for the side-by-side run of
 * tools/rgaps-bench/compare_local.sh (docs/BENCHMARKS.md, the local path at 4 KiB).
 *
 * One publisher (this process) and N subscriber processes per round. A
 * subscriber never polls: it tries iox_sub_take_chunk() and, when that finds
 * nothing, sleeps on an iceoryx WaitSet (subscriber state HAS_DATA) until the
 * publisher's notification. Latency is the subscriber's CLOCK_REALTIME when the
 * take returned minus the publisher's CLOCK_REALTIME at the start of the
 * publish (before iox_pub_loan_chunk() and the copy of the payload into the
 * chunk: what msg.ts_ns of an rgaps push is). Latency mode is paced (message k+1
 * only after every subscriber released k); throughput mode publishes back to
 * back with ConsumerTooSlowPolicy WAIT_FOR_CONSUMER and QueueFullPolicy
 * BLOCK_PRODUCER, so nothing is lost (iceoryx's publisher yields in a loop
 * while a queue is full; that is its design, kept as it is). The harness
 * around it (pacing word, rounds, warm-up, statistics) is rgaps-bench's.
 *
 * Subscribers are this program again (fork + exec), because an iceoryx
 * runtime is a per-process singleton that a forked child must not inherit.
 * With --spawn-roudi it starts its own iox-roudi with a private config (one
 * mempool sized for the message) and stops it at the end; iceoryx 2.0 allows
 * one RouDi per machine, so it refuses to run beside another one.
 *
 * The harness (children, bounded waits, percentiles) is rgaps-bench's own,
 * harness.c, so that both measure the same way.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <iceoryx_binding_c/log.h>
#include <iceoryx_binding_c/publisher.h>
#include <iceoryx_binding_c/runtime.h>
#include <iceoryx_binding_c/subscriber.h>
#include <iceoryx_binding_c/wait_set.h>

#include "harness.h"
#include "tool.h"

#define MAX_SUBS HARNESS_MAX_KIDS
#define MAX_LIST 16
#define WAIT_MS HARNESS_WAIT_MS /* bound on every wait, as in rgaps-bench */
#define SLICE_NS HARNESS_SLICE_NS
#define ROUND_ALARM_S 120	  /* a round that takes longer is killed with everything */
#define ROUDI_SOCKET "/tmp/roudi" /* where iceoryx 2.0's RouDi listens */
#define NS_PER_S 1000000000.0
#define HDR_BYTES 24 /* payload header: counter, size, publish timestamp */

enum mode { MODE_LATENCY, MODE_THROUGHPUT };

static const char SERVICE[] = "rgaps-compare", INSTANCE[] = "local";

/* Parent and subscribers share this (a memfd the child maps after exec). */
struct shared {
	struct harness_sync sync;
	/* the round, set by the parent before the children start */
	uint64_t size, n, warm;
	int32_t nsubs, mode;
	char event[32];
	uint64_t t_first[MAX_SUBS]; /* publish timestamp of the first measured message */
	uint64_t t_last[MAX_SUBS];  /* CLOCK_REALTIME when the last take returned */
	int64_t lat[]; /* [sub][message], ns */
};

struct run {
	int nsubs;
	enum mode mode;
	uint64_t iters, warm, done;
	int64_t *lat, *pub;
	double sub_s[MAX_SUBS];
	double p50, p99, p999, min, max, mean, last_p50, pub_p50, msgs_s;
};

struct opts {
	uint64_t size;
	int subs[MAX_LIST], nsubs, rounds;
	uint64_t iters_lat, iters_tp;
	bool latency, throughput, spawn;
	const char *json, *roudi;
};

/*
 * Subscribers that had taken every message and left their subscriber but did
 * not exit within WAIT_MS, killed: iceoryx 2.0's exit handshake with RouDi
 * (PREPARE_APP_TERMINATION) was seen to hang at a load average of 20 ("unknown
 * application", a reply that belonged to another request). Counted and
 * reported; the round's numbers are complete.
 */
static unsigned exit_hangs;
/* What the SIGALRM watchdog kills besides the round's children (async-signal-safe). */
static volatile pid_t roudi_pid;
static volatile pid_t pub_pid; /* in the parent: the publisher process, told to stop too */
static char roudi_dir[64], roudi_cfg[128], roudi_log[128];

static uint64_t mono_ns(void)
{
	return tool_now_ns(CLOCK_MONOTONIC);
}

static uint64_t real_ns(void)
{
	return tool_now_ns(CLOCK_REALTIME);
}

static void on_signal(int sig)
{
	tool_interrupted = 1;
	if (pub_pid > 0)
		kill(pub_pid, SIGTERM);
}

static void on_alarm(int sig)
{
	static const char msg[] = "iox-bench: a round took too long: killing everything\n";

	harness_signal_kill();
	if (roudi_pid > 0)
		kill(roudi_pid, SIGKILL);
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(1);
	_exit(1);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: iox-bench [options]\n"
		"  --size BYTES        message size (default 4096)\n"
		"  --subs LIST         subscriber process counts (default 1,8)\n"
		"  --iters N           latency messages per configuration (default 10000)\n"
		"  --tp-iters N        throughput messages per configuration (default 100000)\n"
		"  --rounds R          configurations round-robin, R rounds (default 8)\n"
		"  --mode M            latency, throughput or both (default both)\n"
		"  --spawn-roudi       start a private iox-roudi, stop it after (else one must run)\n"
		"  --roudi PATH        the iox-roudi to start (default: iox-roudi from PATH)\n"
		"  --json FILE         write the results as JSON (rgaps-bench's field names)\n"
		"  -h, --help          this text\n");
}

static int parse_u64(const char *opt, const char *arg, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(arg, &end, 10);
	if (errno || *end || end == arg || v < lo || v > hi) {
		fprintf(stderr, "iox-bench: %s: bad value '%s' (%" PRIu64 "..%" PRIu64 ")\n", opt,
			arg, lo, hi);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option lopts[] = {
		{ "size", required_argument, NULL, 's' },
		{ "subs", required_argument, NULL, 'n' },
		{ "iters", required_argument, NULL, 'i' },
		{ "tp-iters", required_argument, NULL, 't' },
		{ "rounds", required_argument, NULL, 'R' },
		{ "mode", required_argument, NULL, 'm' },
		{ "spawn-roudi", no_argument, NULL, 'D' },
		{ "roudi", required_argument, NULL, 'r' },
		{ "json", required_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	uint64_t v;
	int c;

	memset(o, 0, sizeof(*o));
	o->size = 4096;
	o->subs[0] = 1;
	o->subs[1] = 8;
	o->nsubs = 2;
	o->rounds = 8;
	o->iters_lat = 10000;
	o->iters_tp = 100000;
	o->latency = o->throughput = true;
	o->roudi = "iox-roudi";
	while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
		switch (c) {
		case 's':
			if (parse_u64("--size", optarg, HDR_BYTES, 1u << 20, &o->size))
				return 2;
			break;
		case 'n': {
			char *dup = strdup(optarg), *save = NULL, *tok;

			o->nsubs = 0;
			for (tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
				if (o->nsubs == MAX_LIST ||
				    parse_u64("--subs", tok, 1, MAX_SUBS, &v)) {
					free(dup);
					return 2;
				}
				o->subs[o->nsubs++] = (int)v;
			}
			free(dup);
			if (!o->nsubs)
				return 2;
			break;
		}
		case 'i':
			if (parse_u64("--iters", optarg, 1, 10000000, &o->iters_lat))
				return 2;
			break;
		case 't':
			if (parse_u64("--tp-iters", optarg, 1, 10000000, &o->iters_tp))
				return 2;
			break;
		case 'R':
			if (parse_u64("--rounds", optarg, 1, 100, &v))
				return 2;
			o->rounds = (int)v;
			break;
		case 'm':
			o->latency = !strcmp(optarg, "latency") || !strcmp(optarg, "both");
			o->throughput = !strcmp(optarg, "throughput") || !strcmp(optarg, "both");
			if (!o->latency && !o->throughput) {
				fprintf(stderr, "iox-bench: --mode: latency, throughput or both\n");
				return 2;
			}
			break;
		case 'D':
			o->spawn = true;
			break;
		case 'r':
			o->roudi = optarg;
			break;
		case 'j':
			o->json = optarg;
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
		fprintf(stderr, "iox-bench: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	return 0;
}

/* ---------------------------------------------------------------- subscriber process */

static int child_main(const char *idx_s, const char *fd_s)
{
	iox_sub_storage_t sub_storage;
	iox_ws_storage_t ws_storage;
	iox_notification_info_t info[1];
	iox_sub_options_t so;
	struct shared *sh;
	struct stat st;
	iox_sub_t sub;
	iox_ws_t ws;
	char name[64];
	uint64_t total, deadline;
	int idx = atoi(idx_s), fd = atoi(fd_s);

	if (idx < 0 || idx >= MAX_SUBS || fd < 3 || fstat(fd, &st) || st.st_size < (off_t)sizeof(*sh))
		return 1;
	sh = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (sh == MAP_FAILED)
		return 1;
	close(fd);
	total = sh->warm + sh->n;
	if ((off_t)(sizeof(*sh) + (uint64_t)sh->nsubs * sh->n * sizeof(int64_t)) > st.st_size)
		harness_child_fail(&sh->sync, idx, "shared area too small for the round");

	snprintf(name, sizeof(name), "iox-bench-sub-%d", (int)getpid());
	iox_runtime_init(name);
	iox_sub_options_init(&so);
	so.queueCapacity = 256; /* MAX_SUBSCRIBER_QUEUE_CAPACITY of the Debian build */
	so.historyRequest = 0;
	so.nodeName = "iox-bench";
	so.queueFullPolicy = QueueFullPolicy_BLOCK_PRODUCER;
	sub = iox_sub_init(&sub_storage, SERVICE, INSTANCE, sh->event, &so);
	deadline = mono_ns() + WAIT_MS * 1000000ull;
	while (iox_sub_get_subscription_state(sub) != SubscribeState_SUBSCRIBED) {
		if (mono_ns() >= deadline)
			harness_child_fail(&sh->sync, idx, "not subscribed within %d s (state %d)", WAIT_MS / 1000,
				   (int)iox_sub_get_subscription_state(sub));
		usleep(1000);
	}
	ws = iox_ws_init(&ws_storage);
	if (iox_ws_attach_subscriber_state(ws, sub, SubscriberState_HAS_DATA, 1, NULL) !=
	    WaitSetResult_SUCCESS)
		harness_child_fail(&sh->sync, idx, "cannot attach the subscriber to a WaitSet");
	__atomic_add_fetch(&sh->sync.ready, 1, __ATOMIC_SEQ_CST);
	tool_futex_wake_all(&sh->sync.ready);

	for (uint64_t k = 0; k < total; k++) {
		enum iox_ChunkReceiveResult r;
		const void *p;
		uint64_t hdr[3], now;

		deadline = mono_ns() + WAIT_MS * 1000000ull;
		while ((r = iox_sub_take_chunk(sub, &p)) != ChunkReceiveResult_SUCCESS) {
			struct timespec slice = { .tv_sec = 0, .tv_nsec = SLICE_NS };
			uint64_t missed = 0;

			if (r != ChunkReceiveResult_NO_CHUNK_AVAILABLE)
				harness_child_fail(&sh->sync, idx, "take of message %" PRIu64 ": result %d", k,
					   (int)r);
			if (mono_ns() >= deadline)
				harness_child_fail(&sh->sync, idx, "no message %" PRIu64 " of %" PRIu64 " within %d s",
					   k, total, WAIT_MS / 1000);
			iox_ws_timed_wait(ws, slice, info, 1, &missed);
		}
		now = real_ns();
		memcpy(hdr, p, sizeof(hdr));
		if (hdr[0] != k || hdr[1] != sh->size)
			harness_child_fail(&sh->sync, idx, "message %" PRIu64 ": header says counter %" PRIu64
					    " size %" PRIu64, k, hdr[0], hdr[1]);
		if (iox_sub_has_lost_chunks(sub))
			harness_child_fail(&sh->sync, idx, "lost messages before message %" PRIu64, k);
		if (k >= sh->warm)
			sh->lat[(uint64_t)idx * sh->n + (k - sh->warm)] = (int64_t)(now - hdr[2]);
		if (k == sh->warm)
			sh->t_first[idx] = hdr[2];
		if (k == total - 1)
			sh->t_last[idx] = now;
		iox_sub_release_chunk(sub, p);
		if (sh->mode == MODE_LATENCY &&
		    __atomic_add_fetch(&sh->sync.released, 1, __ATOMIC_SEQ_CST) ==
			    (uint32_t)((uint64_t)sh->nsubs * (k + 1)))
			tool_futex_wake_all(&sh->sync.released);
	}
	iox_ws_detach_subscriber_state(ws, sub, SubscriberState_HAS_DATA);
	iox_ws_deinit(ws);
	iox_sub_deinit(sub);
	__atomic_store_n(&sh->sync.done[idx], 1, __ATOMIC_RELEASE);
	iox_runtime_shutdown();
	return 0;
}

/* ---------------------------------------------------------------- children, from the parent */

/* The socket and lock file an iceoryx 2.0 runtime named NAME leaves in /tmp when killed. */
static void runtime_files_remove(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/tmp/iox-bench-sub-%d", (int)pid);
	unlink(path);
	snprintf(path, sizeof(path), "/tmp/iox-bench-sub-%d.lock", (int)pid);
	unlink(path);
}

/* A subscriber process: this program again, exec'd, as subscriber idx of the round in the memfd. */
static void kid_exec(int idx, void *arg)
{
	int memfd = *(const int *)arg;
	char idx_s[16], fd_s[16];

	/* Nothing of the parent's iceoryx runtime may reach the child. */
	for (int f = 3; f < 1024; f++)
		if (f != memfd)
			close(f);
	snprintf(idx_s, sizeof(idx_s), "%d", idx);
	snprintf(fd_s, sizeof(fd_s), "%d", memfd);
	execl("/proc/self/exe", "iox-bench", "--child", idx_s, fd_s, (char *)NULL);
	_exit(127);
}

/* ---------------------------------------------------------------- RouDi */

static pid_t other_roudi(void)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	pid_t found = 0;

	while (d && !found && (de = readdir(d))) {
		char path[300], comm[64] = "";
		FILE *f;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/comm", de->d_name);
		f = fopen(path, "r");
		if (f && fgets(comm, sizeof(comm), f) && !strcmp(comm, "iox-roudi\n"))
			found = (pid_t)atoi(de->d_name);
		if (f)
			fclose(f);
	}
	if (d)
		closedir(d);
	return found;
}

/*
 * What a RouDi that did not shut down cleanly leaves: its shared memory
 * (management, and the payload segment named after the user), its socket and
 * lock files, and the publisher's runtime files. RouDi 2.0 aborts in its
 * shutdown when a registered client is already gone (killed subscribers of an
 * interrupted run). Only called for our own RouDi, which held the lock: no
 * other RouDi can own these.
 */
static void roudi_leftovers_remove(void)
{
	static const char *const files[] = {
		"/dev/shm/iceoryx_mgmt", ROUDI_SOCKET,		"/tmp/roudi.lock",
		"/tmp/iox-unique-roudi.lock", "/tmp/iox-bench-pub", "/tmp/iox-bench-pub.lock",
	};
	struct passwd *pw = getpwuid(geteuid());
	char path[300];

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		unlink(files[i]);
	if (pw && pw->pw_name[0] && !strchr(pw->pw_name, '/')) {
		snprintf(path, sizeof(path), "/dev/shm/%s", pw->pw_name);
		unlink(path);
	}
}

static void roudi_stop(bool show_log)
{
	if (roudi_pid > 0) {
		uint64_t deadline = mono_ns() + 10 * 1000000000ull;
		pid_t pid = roudi_pid;
		int st = 0;

		kill(pid, SIGTERM);
		while (waitpid(pid, &st, WNOHANG) == 0) {
			if (mono_ns() >= deadline) {
				fprintf(stderr, "iox-bench: iox-roudi ignored SIGTERM for 10 s: "
						"killed\n");
				kill(pid, SIGKILL);
				waitpid(pid, &st, 0);
				break;
			}
			usleep(10000);
		}
		roudi_pid = 0;
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			fprintf(stderr, "iox-bench: iox-roudi did not shut down cleanly (%s %d): "
					"removing what it left\n",
				WIFSIGNALED(st) ? "signal" : "status",
				WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
			roudi_leftovers_remove();
		}
	}
	if (show_log)
		harness_print_file(roudi_log);
	if (roudi_dir[0]) {
		unlink(roudi_cfg);
		unlink(roudi_log);
		rmdir(roudi_dir);
		roudi_dir[0] = 0;
	}
}

/* A private RouDi: one mempool that fits the message and enough chunks for full queues. */
static int roudi_start(const struct opts *o)
{
	uint64_t chunk = (o->size + 256 + 255) / 256 * 256;
	pid_t other = other_roudi();
	FILE *f;
	pid_t pid;

	if (other) {
		fprintf(stderr, "iox-bench: an iox-roudi runs already (pid %d); iceoryx 2.0 has one "
				"per machine: stop it, or run without --spawn-roudi to use it\n",
			(int)other);
		return -EBUSY;
	}
	snprintf(roudi_dir, sizeof(roudi_dir), "/tmp/iox-bench.XXXXXX");
	if (!mkdtemp(roudi_dir)) {
		fprintf(stderr, "iox-bench: mkdtemp: %s\n", strerror(errno));
		roudi_dir[0] = 0;
		return -errno;
	}
	snprintf(roudi_cfg, sizeof(roudi_cfg), "%s/roudi.toml", roudi_dir);
	snprintf(roudi_log, sizeof(roudi_log), "%s/roudi.log", roudi_dir);
	f = fopen(roudi_cfg, "w");
	if (!f) {
		fprintf(stderr, "iox-bench: %s: %s\n", roudi_cfg, strerror(errno));
		return -errno;
	}
	fprintf(f, "[general]\nversion = 1\n\n[[segment]]\n\n[[segment.mempool]]\nsize = %" PRIu64
		   "\ncount = 1024\n", chunk);
	fclose(f);
	unlink(ROUDI_SOCKET); /* no RouDi runs: a socket left there is stale */
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int fd = open(roudi_log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

		prctl(PR_SET_PDEATHSIG, SIGTERM);
		/* Its own process group: a Ctrl-C reaches the benchmark, which then stops
		 * RouDi after its clients have left, not RouDi first. */
		setpgid(0, 0);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		/*
		 * Monitoring off: a process of this benchmark either exits cleanly or
		 * fails the run, so RouDi's keepalive checks would only add traffic.
		 * Kill delay 2 s: a RouDi stopped after a failure does not wait 45 s
		 * for leftover processes.
		 */
		execlp(o->roudi, o->roudi, "-c", roudi_cfg, "-l", "warning", "-m", "off", "-k", "2",
		       (char *)NULL);
		fprintf(stderr, "exec %s: %s\n", o->roudi, strerror(errno));
		_exit(127);
	}
	roudi_pid = pid;
	for (int i = 0; i < 1000; i++) {
		struct stat st;
		int status;

		if (waitpid(pid, &status, WNOHANG) == pid) {
			roudi_pid = 0;
			fprintf(stderr, "iox-bench: iox-roudi exited at start\n");
			harness_print_file(roudi_log);
			return -ECHILD;
		}
		if (stat(ROUDI_SOCKET, &st) == 0)
			return 0;
		usleep(10000);
	}
	fprintf(stderr, "iox-bench: iox-roudi made no %s within 10 s\n", ROUDI_SOCKET);
	return -ETIMEDOUT;
}

/* ---------------------------------------------------------------- the publisher */

/* Until the subscribers of the last round are gone from the publisher (5 s). */
static int pub_idle(iox_pub_t pub)
{
	for (int i = 0; iox_pub_has_subscribers(pub); i++) {
		if (i == 500) {
			fprintf(stderr, "iox-bench: subscribers of the last round still connected "
					"after 5 s\n");
			return -EBUSY;
		}
		usleep(10000);
	}
	return 0;
}

/* Loan, copy src (header {k, size} filled before), stamp, publish. */
static int publish(iox_pub_t pub, uint8_t *src, uint64_t size, uint64_t k, int64_t *ns_p)
{
	uint64_t hdr[2] = { k, size }, t0, ts;
	void *chunk;
	enum iox_AllocationResult a;

	memcpy(src, hdr, sizeof(hdr));
	t0 = mono_ns();
	ts = real_ns();
	a = iox_pub_loan_chunk(pub, &chunk, (uint32_t)size);
	if (a != AllocationResult_SUCCESS) {
		fprintf(stderr, "iox-bench: loan of message %" PRIu64 ": result %d\n", k, (int)a);
		return -ENOMEM;
	}
	memcpy(chunk, src, size);
	memcpy((uint8_t *)chunk + 16, &ts, sizeof(ts));
	iox_pub_publish_chunk(pub, chunk);
	*ns_p = (int64_t)(mono_ns() - t0);
	return 0;
}

static int run_round(struct run *c, iox_pub_t pub, const char *event, uint64_t size,
		     uint8_t *src, uint64_t n)
{
	size_t len = sizeof(struct shared) + (size_t)c->nsubs * n * sizeof(int64_t);
	uint64_t total = c->warm + n;
	int64_t *pub_ns = calloc(n, sizeof(*pub_ns));
	int memfd = memfd_create("iox-bench", 0);
	struct shared *sh = MAP_FAILED;
	struct harness_kids k = { .killed = runtime_files_remove };
	int r = -ENOMEM;

	if (!pub_ns || memfd < 0 || ftruncate(memfd, (off_t)len))
		goto out;
	sh = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (sh == MAP_FAILED)
		goto out;
	sh->size = size;
	sh->n = n;
	sh->warm = c->warm;
	sh->nsubs = c->nsubs;
	sh->mode = c->mode;
	snprintf(sh->event, sizeof(sh->event), "%s", event);
	r = pub_idle(pub);
	if (r)
		goto out;
	alarm(ROUND_ALARM_S);
	k.sync = &sh->sync;
	r = harness_spawn(&k, c->nsubs, NULL, 0, kid_exec, &memfd);
	if (!r)
		r = harness_wait_count(&k, &sh->sync.ready, (uint32_t)c->nsubs,
				       "subscribers to attach");
	for (uint64_t i = 0; i < total && !r; i++) {
		int64_t ns = 0;

		r = publish(pub, src, size, i, &ns);
		if (i >= c->warm)
			pub_ns[i - c->warm] = ns;
		if (r)
			break;
		if (c->mode == MODE_LATENCY)
			r = harness_wait_count(&k, &sh->sync.released,
					       (uint32_t)((uint64_t)c->nsubs * (i + 1)),
					       "every subscriber to release the last message");
		else if (__atomic_load_n(&sh->sync.failed, __ATOMIC_ACQUIRE) || tool_interrupted)
			r = -EIO;
	}
	if (!r)
		r = harness_wait_exit(&k);
	exit_hangs += k.exit_hangs;
	if (r) {
		harness_kill(&k);
		goto out;
	}
	for (int s = 0; s < c->nsubs; s++) {
		memcpy(&c->lat[(uint64_t)s * c->iters + c->done], &sh->lat[(uint64_t)s * n],
		       n * sizeof(int64_t));
		c->sub_s[s] += (double)(sh->t_last[s] - sh->t_first[s]) / NS_PER_S;
	}
	memcpy(&c->pub[c->done], pub_ns, n * sizeof(int64_t));
	c->done += n;
out:
	alarm(0);
	if (sh != MAP_FAILED)
		munmap(sh, len);
	if (memfd >= 0)
		close(memfd);
	free(pub_ns);
	return r;
}

static int stats_fill(struct run *c)
{
	uint64_t n = (uint64_t)c->nsubs * c->iters;
	int64_t *last = calloc(c->iters, sizeof(*last));
	double sum = 0;

	if (!last)
		return -ENOMEM;
	for (int s = 0; s < c->nsubs; s++)
		for (uint64_t i = 0; i < c->iters; i++)
			if (c->lat[(uint64_t)s * c->iters + i] > last[i])
				last[i] = c->lat[(uint64_t)s * c->iters + i];
	for (uint64_t i = 0; i < n; i++)
		sum += (double)c->lat[i];
	qsort(c->lat, n, sizeof(*c->lat), harness_cmp_i64);
	qsort(last, c->iters, sizeof(*last), harness_cmp_i64);
	qsort(c->pub, c->iters, sizeof(*c->pub), harness_cmp_i64);
	c->p50 = harness_pct(c->lat, n, 0.5);
	c->p99 = harness_pct(c->lat, n, 0.99);
	c->p999 = harness_pct(c->lat, n, 0.999);
	c->min = (double)c->lat[0];
	c->max = (double)c->lat[n - 1];
	c->mean = sum / (double)n;
	c->last_p50 = harness_pct(last, c->iters, 0.5);
	c->pub_p50 = harness_pct(c->pub, c->iters, 0.5);
	c->msgs_s = 0;
	for (int s = 0; c->mode == MODE_THROUGHPUT && s < c->nsubs; s++) {
		double rate = c->sub_s[s] > 0 ? (double)c->iters / c->sub_s[s] : 0;

		if (s == 0 || rate < c->msgs_s)
			c->msgs_s = rate;
	}
	free(last);
	return 0;
}

static int json_write(const struct opts *o, const struct run *runs, int nruns, const char *date,
		      const char *cmd, const char *load0, const char *load1)
{
	cJSON *root = cJSON_CreateObject(), *arr;
	struct utsname u;
	char kernel[256] = "unknown", *text;
	FILE *f;
	int r = 0;

	if (uname(&u) == 0)
		snprintf(kernel, sizeof(kernel), "%s %s %s", u.sysname, u.release, u.machine);
	cJSON_AddStringToObject(root, "implementation", "iceoryx C binding, WaitSet (notification only)");
	cJSON_AddNumberToObject(cJSON_AddObjectToObject(root, "machine"), "nproc",
				(double)sysconf(_SC_NPROCESSORS_ONLN));
	cJSON_AddStringToObject(cJSON_GetObjectItem(root, "machine"), "kernel", kernel);
	cJSON_AddStringToObject(root, "date", date);
	cJSON_AddStringToObject(root, "command", cmd);
	cJSON_AddNumberToObject(root, "rounds", o->rounds);
	cJSON_AddNumberToObject(root, "exit_hangs", exit_hangs);
	cJSON_AddStringToObject(root, "loadavg_start", load0);
	cJSON_AddStringToObject(root, "loadavg_end", load1);
	arr = cJSON_AddArrayToObject(root, "runs");
	for (int i = 0; i < nruns; i++) {
		const struct run *c = &runs[i];
		cJSON *e = cJSON_CreateObject();

		cJSON_AddNumberToObject(e, "size", (double)o->size);
		cJSON_AddNumberToObject(e, "subscribers", c->nsubs);
		cJSON_AddStringToObject(e, "mode",
					c->mode == MODE_LATENCY ? "latency" : "throughput");
		cJSON_AddStringToObject(e, "api", "iceoryx");
		cJSON_AddStringToObject(e, "spin_us", "0");
		cJSON_AddNumberToObject(e, "iters", (double)c->iters);
		cJSON_AddNumberToObject(e, "warmup", (double)c->warm);
		cJSON_AddNumberToObject(e, "pub_p50_ns", c->pub_p50);
		if (c->mode == MODE_LATENCY) {
			cJSON_AddNumberToObject(e, "p50_ns", c->p50);
			cJSON_AddNumberToObject(e, "p99_ns", c->p99);
			cJSON_AddNumberToObject(e, "p999_ns", c->p999);
			cJSON_AddNumberToObject(e, "min_ns", c->min);
			cJSON_AddNumberToObject(e, "max_ns", c->max);
			cJSON_AddNumberToObject(e, "mean_ns", c->mean);
			cJSON_AddNumberToObject(e, "last_p50_ns", c->last_p50);
		} else {
			cJSON_AddNumberToObject(e, "msgs_per_s_per_sub", c->msgs_s);
		}
		cJSON_AddItemToArray(arr, e);
	}
	text = cJSON_Print(root);
	f = text ? fopen(o->json, "w") : NULL;
	if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0)
		r = -EIO;
	if (f && fclose(f))
		r = -EIO;
	if (r)
		fprintf(stderr, "iox-bench: cannot write %s\n", o->json);
	free(text);
	cJSON_Delete(root);
	return r;
}

static void print_tables(const struct opts *o, const struct run *runs, int nruns,
			 const char *date, const char *cmd, const char *load0, const char *load1)
{
	printf("\niox-bench: iceoryx C binding, %" PRIu64 "-byte messages, subscribers sleep "
	       "on a WaitSet\n%s; command: %s\nload average at start: %s, at end: %s\n",
	       o->size, date, cmd, load0, load1);
	printf("%4s %10s %7s %9s %9s %9s %9s %9s %9s %9s %12s\n", "subs", "mode", "iters", "p50",
	       "p99", "p99.9", "min", "max", "last-p50", "pub-p50", "msg/s/sub");
	for (int i = 0; i < nruns; i++) {
		const struct run *c = &runs[i];

		if (c->mode == MODE_LATENCY)
			printf("%4d %10s %7" PRIu64 " %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %12s\n",
			       c->nsubs, "latency", c->iters, c->p50 / 1e3, c->p99 / 1e3,
			       c->p999 / 1e3, c->min / 1e3, c->max / 1e3, c->last_p50 / 1e3,
			       c->pub_p50 / 1e3, "");
		else
			printf("%4d %10s %7" PRIu64 " %9s %9s %9s %9s %9s %9s %9.1f %12.0f\n", c->nsubs,
			       "throughput", c->iters, "", "", "", "", "", "", c->pub_p50 / 1e3,
			       c->msgs_s);
	}
	printf("latency in us, publish start -> take returns, paced, over all subscribers' "
	       "samples; msg/s/sub: the slowest subscriber\n");
	if (exit_hangs)
		printf("%u subscriber(s) hung in iceoryx's exit after their last message and "
		       "were killed\n", exit_hangs);
}

static int plan_add(struct run *runs, int *nruns, const struct opts *o, int nsubs, enum mode m)
{
	struct run *c = &runs[(*nruns)++];
	uint64_t per_round;

	memset(c, 0, sizeof(*c));
	c->nsubs = nsubs;
	c->mode = m;
	c->iters = m == MODE_LATENCY ? o->iters_lat : o->iters_tp;
	if (c->iters < (uint64_t)o->rounds)
		c->iters = (uint64_t)o->rounds;
	per_round = c->iters / (uint64_t)o->rounds;
	c->warm = per_round / 10 < 2 ? 2 : per_round / 10 > 200 ? 200 : per_round / 10;
	c->lat = calloc((size_t)nsubs * c->iters, sizeof(*c->lat));
	c->pub = calloc(c->iters, sizeof(*c->pub));
	return c->lat && c->pub ? 0 : -ENOMEM;
}

/*
 * The publisher and everything it measures, in a process of its own: it
 * leaves iceoryx by exit(), whose destructors deregister it from RouDi, so
 * that the RouDi started by the parent stops at once (a RouDi asked to stop
 * while a registered process lives sends it SIGTERM and waits up to 45 s).
 */
static int publisher_main(const struct opts *o, int argc, char **argv)
{
	static struct run runs[2 * MAX_LIST];
	char date[64], cmd[1024] = "", load0[64], load1[64] = "", event[32];
	iox_pub_storage_t pub_storage;
	iox_pub_options_t po;
	iox_pub_t pub;
	uint8_t *src = malloc(o->size);
	time_t now = time(NULL);
	size_t off = 0;
	int nruns = 0, r = 0;

	strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
	for (int i = 0; i < argc && off < sizeof(cmd) - 1; i++)
		off += (size_t)snprintf(cmd + off, sizeof(cmd) - off, "%s%s", i ? " " : "", argv[i]);
	harness_loadavg(load0, sizeof(load0));
	for (int i = 0; i < o->nsubs && !r; i++) {
		if (o->latency)
			r = plan_add(runs, &nruns, o, o->subs[i], MODE_LATENCY);
		if (o->throughput && !r)
			r = plan_add(runs, &nruns, o, o->subs[i], MODE_THROUGHPUT);
	}
	if (r || !src) {
		fprintf(stderr, "iox-bench: out of memory for the samples\n");
		r = -ENOMEM;
		goto out;
	}
	memset(src, 0xa5, o->size);

	iox_set_loglevel(Iceoryx_LogLevel_Warn);
	iox_runtime_init("iox-bench-pub");
	iox_pub_options_init(&po);
	po.historyCapacity = 0;
	po.nodeName = "iox-bench";
	po.subscriberTooSlowPolicy = ConsumerTooSlowPolicy_WAIT_FOR_CONSUMER;
	snprintf(event, sizeof(event), "bytes-%" PRIu64, o->size);
	pub = iox_pub_init(&pub_storage, SERVICE, INSTANCE, event, &po);
	/* Touch every chunk of the mempool once (nobody subscribes yet: each is freed at once). */
	for (uint64_t i = 0; i < 2048 && !r; i++) {
		int64_t ns;

		r = publish(pub, src, o->size, i, &ns);
	}
	for (int round = 0; round < o->rounds && !r; round++) {
		for (int j = 0; j < nruns && !r; j++) {
			struct run *c = &runs[(j + round) % nruns];
			uint64_t n = c->iters / (uint64_t)o->rounds +
				     ((uint64_t)round < c->iters % (uint64_t)o->rounds);

			fprintf(stderr, "round %d/%d: %" PRIu64 " B x %d, %s: %" PRIu64 " + %" PRIu64
					" warm-up messages\n", round + 1, o->rounds, o->size, c->nsubs,
				c->mode == MODE_LATENCY ? "latency" : "throughput", n, c->warm);
			r = run_round(c, pub, event, o->size, src, n);
		}
	}
	for (int i = 0; i < nruns && !r; i++)
		r = stats_fill(&runs[i]);
	if (!r) {
		harness_loadavg(load1, sizeof(load1));
		print_tables(o, runs, nruns, date, cmd, load0, load1);
		if (o->json)
			r = json_write(o, runs, nruns, date, cmd, load0, load1);
	}
	iox_pub_deinit(pub);
out:
	for (int i = 0; i < nruns; i++) {
		free(runs[i].lat);
		free(runs[i].pub);
	}
	free(src);
	if (tool_interrupted)
		return 130;
	return r ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_signal }, al = { .sa_handler = on_alarm };
	struct opts o;
	pid_t pid;
	int r, st = 0;

	if (argc == 4 && !strcmp(argv[1], "--child")) {
		iox_set_loglevel(Iceoryx_LogLevel_Warn);
		return child_main(argv[2], argv[3]);
	}
	r = parse_opts(argc, argv, &o);
	if (r)
		return r;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGALRM, &al, NULL);
	if (o.spawn) {
		r = roudi_start(&o);
		if (r)
			goto out;
	} else if (!other_roudi()) {
		fprintf(stderr, "iox-bench: no iox-roudi runs: start one or use --spawn-roudi\n");
		r = -ENOENT;
		goto out;
	}
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		r = -errno;
		fprintf(stderr, "iox-bench: fork: %s\n", strerror(errno));
		goto out;
	}
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		exit(publisher_main(&o, argc, argv));
	}
	pub_pid = pid;
	if (tool_interrupted) /* a signal that came before pub_pid was set */
		kill(pid, SIGTERM);
	/* The publisher bounds its own waits (and a round's time, with SIGALRM). */
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	r = WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
out:
	roudi_stop(r && !tool_interrupted);
	if (tool_interrupted)
		return 130;
	return r ? 1 : 0;
}
