/*
 * The harness of rgaps-bench and iox-bench: the subscriber processes of a
 * round, every wait on them bounded, and the statistics of what they measured.
 *
 * The area a benchmark shares with its children starts with a struct
 * harness_sync. Children count themselves ready and count their releases
 * there, and a child that fails says why there before it exits; the parent
 * waits on those words with futexes in slices, reaping its children between
 * slices, so that a child that dies without a word ends the wait too. One
 * round's children at a time. Messages start with the program's name.
 */
#ifndef RGAPS_TOOLS_HARNESS_H
#define RGAPS_TOOLS_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define HARNESS_MAX_KIDS 64
#define HARNESS_WAIT_MS 10000		       /* bound on every wait for the children */
#define HARNESS_SLICE_NS (100ll * 1000 * 1000) /* the parent re-checks its children this often */

/* The harness's part of the shared area (its first member). Futex words on their own lines. */
struct harness_sync {
	uint32_t ready __attribute__((aligned(64)));	/* children attached */
	uint32_t released __attribute__((aligned(64))); /* latency mode: releases so far */
	uint32_t failed __attribute__((aligned(64)));	/* a child failed; err[] says why */
	uint32_t done
		[HARNESS_MAX_KIDS]; /* child i measured everything: a hang after is no failure */
	char err[HARNESS_MAX_KIDS][160];
};

/* One round's children, as the parent sees them. */
struct harness_kids {
	struct harness_sync *sync;
	void (*killed)(pid_t pid);   /* NULL, or what to clean after a child is killed */
	pid_t pid[HARNESS_MAX_KIDS]; /* 0: reaped */
	int status[HARNESS_MAX_KIDS];
	int n;
	unsigned exit_hangs; /* children killed after they were done (counted, not failed) */
};

/* A child's work; it returns to exit 0, or ends with harness_child_fail(). */
typedef void (*harness_child_fn)(int idx, void *arg);

/*
 * Fork n children running fn(idx, arg); each dies with the parent. With ncpus > 0 child i
 * runs on cpus[i % ncpus], with ncpus 0 on the CPUs of harness_save_cpus(). k->sync and
 * k->killed are taken from k as they are; the rest of k is reset. 0 or a negative errno.
 */
int harness_spawn(struct harness_kids *k, int n, const int *cpus, int ncpus, harness_child_fn fn,
		  void *arg);
/* SIGKILL and reap every child still there. */
void harness_kill(struct harness_kids *k);
/* Wait for every child to exit (at most HARNESS_WAIT_MS). 0, or -ETIMEDOUT, -EIO (one failed). */
int harness_wait_exit(struct harness_kids *k);
/*
 * Wait until *word (in k->sync) reaches target: 0, or -EIO (a child failed or died),
 * -EINTR (tool_interrupted), -ETIMEDOUT (no progress for HARNESS_WAIT_MS; what names it).
 */
int harness_wait_count(struct harness_kids *k, uint32_t *word, uint32_t target, const char *what);
/* In a child: say why it fails, wake the parent and exit 1. */
__attribute__((format(printf, 3, 4), noreturn)) void
harness_child_fail(struct harness_sync *s, int idx, const char *fmt, ...);
/* From a signal handler (a watchdog): SIGKILL the round's children. Async-signal-safe. */
void harness_signal_kill(void);

/* Remember the CPUs this process may run on: children with no CPU of their own get them. */
void harness_save_cpus(void);
/* Pin the calling process to cpu (>= 0), or give it the saved CPUs (-1). 0 or a negative errno. */
int harness_pin(int cpu);

/* qsort() order of int64_t. */
int harness_cmp_i64(const void *a, const void *b);
/* Nearest-rank percentile p (0..1) of n sorted values (0 if none). */
double harness_pct(const int64_t *v, size_t n, double p);
/* Copy a file to stderr under a "---- path ----" line (the log of a process the benchmark ran). */
void harness_print_file(const char *path);
/* The first line of /proc/loadavg, or "unknown". */
void harness_loadavg(char *buf, size_t len);

#endif
