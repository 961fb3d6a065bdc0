/*
 * Shared (not PRIVATE) futex wait/wake on a 32-bit word in shared memory: one
 * FUTEX_WAKE wakes every subscriber process sleeping on a topic, whatever
 * their number (DESIGN.md section 1, DP3 "cost does not grow with N").
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

/* Sleep while *word == expected, at most timeout_ns (< 0: forever). 0, -EAGAIN, -ETIMEDOUT, -EINTR. */
static inline int rgaps_futex_wait(uint32_t *word, uint32_t expected, int64_t timeout_ns)
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

static inline int rgaps_futex_wake_all(uint32_t *word)
{
	long r = syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);

	return r < 0 ? -errno : (int)r;
}

static inline uint64_t rgaps_now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
