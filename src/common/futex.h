/*
 * Shared (not PRIVATE) futex wait/wake on 32-bit words in shared memory.
 *
 * Each word has one writer (the process that owns the region it lives in);
 * others only wait on it or wake its waiters, which works on a read-only
 * mapping. A waiter that needs several writers' words (a subscriber of several
 * publishers, a publisher waiting for any of its subscribers to progress) sleeps
 * on all of them at once with futex_waitv (Linux 5.16). One FUTEX_WAKE by a
 * publisher wakes every subscriber asleep on its doorbell, whatever their number
 * (docs/ARCHITECTURE.md section 1, the local path: its cost does not grow with N).
 */
#ifndef RGAPS_COMMON_FUTEX_H
#define RGAPS_COMMON_FUTEX_H

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif

static inline uint64_t rgaps_now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sleep while *word == expected, at most timeout_ns (< 0: forever). 0, -EAGAIN, -ETIMEDOUT, -EINTR. */
static inline int rgaps_futex_wait(const uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
	struct timespec ts, *tp = NULL;

	if (timeout_ns >= 0) {
		ts.tv_sec = timeout_ns / 1000000000;
		ts.tv_nsec = timeout_ns % 1000000000;
		tp = &ts;
	}
	if (syscall(SYS_futex, word, FUTEX_WAIT, expected, tp, NULL, 0) == 0)
		return 0;
	return -errno;
}

static inline int rgaps_futex_wake_all(const uint32_t *word)
{
	long r = syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);

	return r < 0 ? -errno : (int)r;
}

/* Fill one element of a futex_waitv array: a shared 32-bit word and the value seen. */
static inline void rgaps_waitv_set(struct futex_waitv *w, const uint32_t *word, uint32_t seen)
{
	w->val = seen;
	w->uaddr = (uint64_t)(uintptr_t)word;
	w->flags = FUTEX_32;
	w->__reserved = 0;
}

/*
 * Sleep until one of the n words differs from its value or is woken, at most
 * timeout_ns. Returns the index woken (>= 0), -EAGAIN (a word had moved
 * already), -ETIMEDOUT, -EINTR, or -ENOSYS on kernels before 5.16 (the caller
 * then falls back to rgaps_futex_wait on one word with short slices).
 */
static inline int rgaps_futex_waitv(struct futex_waitv *w, uint32_t n, int64_t timeout_ns)
{
	struct timespec ts;
	uint64_t until = rgaps_now_ns(CLOCK_MONOTONIC) + (uint64_t)timeout_ns;
	long r;

	ts.tv_sec = (time_t)(until / 1000000000ull);
	ts.tv_nsec = (long)(until % 1000000000ull);
	r = syscall(SYS_futex_waitv, w, n, 0, &ts, CLOCK_MONOTONIC);
	return r < 0 ? -errno : (int)r;
}

#endif
