/*
 * The benchmarks' harness (harness.h): children, bounded waits, percentiles.
 */
#include "harness.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tool.h"

/* The round's children for harness_signal_kill() (a plain array: async-signal-safe). */
static volatile pid_t live[HARNESS_MAX_KIDS];

static cpu_set_t start_cpus;
static bool start_cpus_saved;

static uint64_t mono_ns(void)
{
	return tool_now_ns(CLOCK_MONOTONIC);
}

void harness_save_cpus(void)
{
	start_cpus_saved = sched_getaffinity(0, sizeof(start_cpus), &start_cpus) == 0;
}

int harness_pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0) {
		if (!start_cpus_saved)
			return 0;
		return sched_setaffinity(0, sizeof(start_cpus), &start_cpus) ? -errno : 0;
	}
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set)) {
		int r = -errno;

		fprintf(stderr, "%s: cannot pin to CPU %d: %s\n", program_invocation_short_name,
			cpu, strerror(errno));
		return r;
	}
	return 0;
}

void harness_child_fail(struct harness_sync *s, int idx, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->err[idx], sizeof(s->err[idx]), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: subscriber %d: %s\n", program_invocation_short_name, idx, s->err[idx]);
	__atomic_store_n(&s->failed, 1, __ATOMIC_SEQ_CST);
	tool_futex_wake_all(&s->failed);
	tool_futex_wake_all(&s->ready);
	tool_futex_wake_all(&s->released);
	_exit(1);
}

void harness_signal_kill(void)
{
	for (int i = 0; i < HARNESS_MAX_KIDS; i++)
		if (live[i] > 0)
			kill(live[i], SIGKILL);
}

/* Child i is gone (reaped): forget its pid. */
static void forget(struct harness_kids *k, int i)
{
	k->pid[i] = 0;
	live[i] = 0;
}

/* SIGKILL child i and reap it. */
static void kill_one(struct harness_kids *k, int i)
{
	pid_t pid = k->pid[i];

	kill(pid, SIGKILL);
	waitpid(pid, &k->status[i], 0);
	forget(k, i);
	if (k->killed)
		k->killed(pid);
}

void harness_kill(struct harness_kids *k)
{
	for (int i = 0; i < k->n; i++)
		if (k->pid[i] > 0)
			kill_one(k, i);
}

/* Reap the children that have exited; true if one of them failed. */
static bool reap(struct harness_kids *k)
{
	bool bad = false;

	for (int i = 0; i < k->n; i++) {
		if (k->pid[i] > 0 && waitpid(k->pid[i], &k->status[i], WNOHANG) == k->pid[i])
			forget(k, i);
		if (k->pid[i] == 0 && k->status[i] != 0)
			bad = true;
	}
	return bad;
}

static void report(const struct harness_kids *k, int i)
{
	int st = k->status[i];

	if (k->sync->err[i][0])
		return; /* it said why itself */
	if (WIFSIGNALED(st))
		fprintf(stderr, "%s: subscriber %d killed by signal %d (%s)\n",
			program_invocation_short_name, i, WTERMSIG(st), strsignal(WTERMSIG(st)));
	else if (WIFEXITED(st) && WEXITSTATUS(st))
		fprintf(stderr, "%s: subscriber %d exited with status %d\n",
			program_invocation_short_name, i, WEXITSTATUS(st));
}

/* true if every child still there has said it is done. */
static bool all_done(const struct harness_kids *k)
{
	for (int i = 0; i < k->n; i++)
		if (k->pid[i] > 0 && !__atomic_load_n(&k->sync->done[i], __ATOMIC_ACQUIRE))
			return false;
	return true;
}

int harness_wait_exit(struct harness_kids *k)
{
	uint64_t deadline = mono_ns() + HARNESS_WAIT_MS * 1000000ull;
	int r = 0;

	for (;;) {
		bool left = false;

		reap(k);
		for (int i = 0; i < k->n; i++)
			left |= k->pid[i] > 0;
		if (!left)
			break;
		if (mono_ns() >= deadline && !tool_interrupted && all_done(k)) {
			for (int i = 0; i < k->n; i++) {
				if (k->pid[i] <= 0)
					continue;
				fprintf(stderr,
					"%s: subscriber %d hung on its way out after its last "
					"message: killed\n",
					program_invocation_short_name, i);
				k->exit_hangs++;
				kill_one(k, i);
				k->status[i] = 0;
			}
			break;
		}
		if (mono_ns() >= deadline || tool_interrupted) {
			fprintf(stderr, "%s: subscribers did not exit within %d s%s\n",
				program_invocation_short_name, HARNESS_WAIT_MS / 1000,
				tool_interrupted ? " (interrupted)" : "");
			harness_kill(k);
			r = -ETIMEDOUT;
			break;
		}
		usleep(1000);
	}
	for (int i = 0; i < k->n; i++) {
		if (k->status[i]) {
			report(k, i);
			r = r ? r : -EIO;
		}
	}
	return r;
}

int harness_wait_count(struct harness_kids *k, uint32_t *word, uint32_t target, const char *what)
{
	uint64_t deadline = mono_ns() + HARNESS_WAIT_MS * 1000000ull;

	for (;;) {
		uint32_t v = __atomic_load_n(word, __ATOMIC_ACQUIRE);
		uint64_t now;
		int r;

		if (v >= target)
			return 0;
		if (__atomic_load_n(&k->sync->failed, __ATOMIC_ACQUIRE))
			return -EIO;
		if (tool_interrupted) {
			fprintf(stderr, "%s: interrupted\n", program_invocation_short_name);
			return -EINTR;
		}
		now = mono_ns();
		if (now >= deadline) {
			fprintf(stderr, "%s: no progress for %d s waiting for %s (%u of %u)\n",
				program_invocation_short_name, HARNESS_WAIT_MS / 1000, what, v,
				target);
			return -ETIMEDOUT;
		}
		r = tool_futex_wait(word, v, TOOL_MIN(HARNESS_SLICE_NS, (int64_t)(deadline - now)));
		if (r == -ETIMEDOUT && reap(k)) {
			for (int i = 0; i < k->n; i++)
				if (k->pid[i] == 0 && k->status[i])
					report(k, i);
			return -EIO;
		}
	}
}

int harness_spawn(struct harness_kids *k, int n, const int *cpus, int ncpus, harness_child_fn fn,
		  void *arg)
{
	pid_t parent = getpid();

	if (n < 0 || n > HARNESS_MAX_KIDS)
		return -EINVAL;
	memset(k->pid, 0, sizeof(k->pid));
	memset(k->status, 0, sizeof(k->status));
	k->n = 0;
	k->exit_hangs = 0;
	fflush(stdout);
	fflush(stderr);
	for (int i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid < 0) {
			int r = -errno;

			fprintf(stderr, "%s: fork: %s\n", program_invocation_short_name,
				strerror(errno));
			harness_kill(k);
			return r;
		}
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() != parent)
				_exit(1);
			signal(SIGINT, SIG_DFL);
			signal(SIGTERM, SIG_DFL);
			signal(SIGALRM, SIG_DFL);
			if (harness_pin(ncpus > 0 ? cpus[i % ncpus] : -1))
				_exit(1);
			fn(i, arg);
			_exit(0);
		}
		k->pid[i] = live[i] = pid;
		k->n = i + 1;
	}
	return 0;
}

int harness_cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

double harness_pct(const int64_t *v, size_t n, double p)
{
	size_t k;

	if (!n)
		return 0;
	k = (size_t)(p * (double)n + 0.999999);
	k = k ? k - 1 : 0;
	return (double)v[k < n ? k : n - 1];
}

void harness_loadavg(char *buf, size_t len)
{
	FILE *f = fopen("/proc/loadavg", "r");

	snprintf(buf, len, "unknown");
	if (f && fgets(buf, (int)len, f))
		buf[strcspn(buf, "\n")] = 0;
	if (f)
		fclose(f);
}

void harness_print_file(const char *path)
{
	char line[512];
	FILE *f = fopen(path, "r");

	if (!f)
		return;
	fprintf(stderr, "---- %s ----\n", path);
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fclose(f);
}
