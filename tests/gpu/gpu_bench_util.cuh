/*
 * Helpers shared by the two benchmark programs, gpu-bench (local path) and
 * gpu-e2e (remote path): the median of samples, lists of sizes or counts from
 * the command line, size labels, one timed cudaMemcpy, and the driver version
 * for the tables' header line.
 */
#ifndef RGAPS_TESTS_GPU_BENCH_UTIL_CUH
#define RGAPS_TESTS_GPU_BENCH_UTIL_CUH

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gpu_test.cuh"

static inline double bench_median(std::vector<double> v)
{
	if (v.empty())
		return 0;
	std::sort(v.begin(), v.end());
	return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

/*
 * "4MiB,64MiB,1GiB" (sizes) or "1,2,4,8" (positive counts) into *v. false,
 * with the offending item in *bad, when an item is neither.
 */
static inline bool bench_parse_list(const char *s, bool sizes, std::vector<uint64_t> *v,
				    std::string *bad)
{
	std::string str(s);
	size_t pos = 0;

	v->clear();
	for (;;) {
		size_t comma = str.find(',', pos);
		std::string item = str.substr(pos, comma == std::string::npos ? std::string::npos :
										 comma - pos);
		uint64_t x;

		if (sizes ? gpu_parse_size(item.c_str(), &x) != 0 :
			    (x = strtoull(item.c_str(), NULL, 10)) == 0) {
			*bad = item;
			return false;
		}
		v->push_back(x);
		if (comma == std::string::npos)
			return true;
		pos = comma + 1;
	}
}

/* The log of a memory plugin a benchmark loads itself: errors and warnings, to stderr. */
static inline void bench_plugin_log(int level, const char *fmt, ...)
{
	va_list ap;

	if (level > 1)
		return;
	va_start(ap, fmt);
	fprintf(stderr, "cuda plugin: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* A list option's value into *v, or exit(2) naming the option and the bad item. */
static inline void bench_list_arg(const char *prog, const char *opt, const char *arg, bool sizes,
				  std::vector<uint64_t> *v)
{
	std::string bad;

	if (!bench_parse_list(arg, sizes, v, &bad)) {
		fprintf(stderr, "%s: bad --%s item: %s\n", prog, opt, bad.c_str());
		exit(2);
	}
}

/* "1GiB", "64MiB" or "4096B": the largest unit that divides b. */
static inline const char *bench_size_str(uint64_t b, char *buf, size_t len)
{
	if (b >= (1ull << 30) && b % (1ull << 30) == 0)
		snprintf(buf, len, "%lluGiB", (unsigned long long)(b >> 30));
	else if (b >= (1ull << 20) && b % (1ull << 20) == 0)
		snprintf(buf, len, "%lluMiB", (unsigned long long)(b >> 20));
	else
		snprintf(buf, len, "%lluB", (unsigned long long)b);
	return buf;
}

/* Median ms of reps cudaMemcpy + device sync of n bytes, after one warm-up copy. */
static inline double bench_time_copy(void *dst, const void *src, uint64_t n, int reps)
{
	std::vector<double> t;

	for (int i = 0; i < reps + 1; i++) {
		uint64_t t0 = gpu_now_ns();

		CK(cudaMemcpy(dst, src, n, cudaMemcpyDefault));
		CK(cudaDeviceSynchronize());
		if (i) /* the first is the warm-up */
			t.push_back((gpu_now_ns() - t0) / 1e6);
	}
	return bench_median(t);
}

/* Wait up to 5 s for a child told to stop (SIGTERM), then SIGKILL it; reaped either way. */
static inline void bench_wait_or_kill(pid_t pid)
{
	int st;

	for (int i = 0; i < 100 && waitpid(pid, &st, WNOHANG) == 0; i++)
		usleep(50000);
	if (waitpid(pid, &st, WNOHANG) == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
}

/* The kernel driver's version ("580.159.04") from /proc/driver/nvidia/version, else "?". */
static inline void bench_driver_version(char *drv, size_t len)
{
	FILE *f = fopen("/proc/driver/nvidia/version", "r");
	char line[256];

	snprintf(drv, len, "?");
	if (!f)
		return;
	if (fgets(line, sizeof(line), f)) {
		/* "NVRM version: NVIDIA UNIX ... Module [for x86_64]  580.x.y ..." */
		for (char *tok = strtok(line, " \t"); tok; tok = strtok(NULL, " \t")) {
			unsigned a, b;

			if (sscanf(tok, "%u.%u", &a, &b) == 2 && strchr(tok, '.')) {
				snprintf(drv, len, "%s", tok);
				break;
			}
		}
	}
	fclose(f);
}

/*
 * Subscriber processes of the benchmarks: this program again (/proc/self/exe)
 * with argv, its records written to fd rec_fd, read here from .fd.
 */
struct bench_child {
	pid_t pid;
	int fd; /* read end of its record pipe */
};

static inline bool bench_spawn_self(char *const argv[], int rec_fd, bench_child *c_p)
{
	extern char **environ;
	posix_spawn_file_actions_t fa;
	int pfd[2];
	bool ok;

	if (pipe2(pfd, O_CLOEXEC))
		return false;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], rec_fd);
	ok = posix_spawn(&c_p->pid, "/proc/self/exe", &fa, NULL, argv, environ) == 0;
	posix_spawn_file_actions_destroy(&fa);
	close(pfd[1]);
	if (!ok)
		close(pfd[0]);
	c_p->fd = pfd[0];
	return ok;
}

/* Read exactly n bytes of a child's records, waiting at most timeout_ms for each part. */
static inline bool bench_read_full(int fd, void *p, size_t n, int timeout_ms)
{
	size_t got = 0;

	while (got < n) {
		struct pollfd pf = { fd, POLLIN, 0 };
		ssize_t k;

		if (poll(&pf, 1, timeout_ms) <= 0)
			return false;
		k = read(fd, (char *)p + got, n - got);
		if (k <= 0)
			return false;
		got += (size_t)k;
	}
	return true;
}

/* Stop every child (SIGTERM, then SIGKILL after 5 s), reap it, close its pipe. */
static inline void bench_reap(std::vector<bench_child> &kids)
{
	for (const bench_child &c : kids)
		kill(c.pid, SIGTERM);
	for (const bench_child &c : kids) {
		bench_wait_or_kill(c.pid);
		close(c.fd);
	}
	kids.clear();
}

/* What a table's header line says about the machine and the run. */
struct bench_machine {
	cudaDeviceProp p;	     /* device 0 */
	char drv[128];		     /* kernel driver version */
	int dv, rv;		     /* CUDA driver and runtime API versions */
	char date[64], host[64]; /* UTC, hostname */
};

static inline void bench_machine_get(struct bench_machine *m)
{
	time_t now = time(NULL);

	memset(m, 0, sizeof(*m));
	CK(cudaGetDeviceProperties(&m->p, 0));
	cudaDriverGetVersion(&m->dv);
	cudaRuntimeGetVersion(&m->rv);
	bench_driver_version(m->drv, sizeof(m->drv));
	strftime(m->date, sizeof(m->date), "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
	snprintf(m->host, sizeof(m->host), "?");
	gethostname(m->host, sizeof(m->host) - 1);
}

/* The two header lines of a benchmark's output: the card and the run. */
static inline void bench_print_machine(const char *prog)
{
	struct bench_machine m;

	bench_machine_get(&m);
	printf("%s: %s (sm_%d%d, %d SMs, %.1f GiB), driver %s (CUDA %d.%d), runtime %d.%d\n", prog,
	       m.p.name, m.p.major, m.p.minor, m.p.multiProcessorCount,
	       m.p.totalGlobalMem / (double)(1ull << 30), m.drv, m.dv / 1000, m.dv % 1000 / 10,
	       m.rv / 1000, m.rv % 1000 / 10);
	printf("%s: %s, host %s, %ld CPUs\n", prog, m.date, m.host, sysconf(_SC_NPROCESSORS_ONLN));
}

#endif
