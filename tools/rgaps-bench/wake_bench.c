/*
 * wake-bench: what waking N sleeping processes costs when they sleep in
 * FUTEX_WAIT on one word against futex_waitv on two words (what an rgaps
 * subscriber of one publisher does: the publisher's doorbell and the topic
 * header's dir_gen), through the futex helpers rgaps itself uses (tool.h hands
 * them on). Nothing else of rgaps is involved. Paced like rgaps-bench's
 * latency mode: the parent bumps a word and issues one FUTEX_WAKE(INT_MAX),
 * then waits until every sleeper has acknowledged. The two kinds alternate,
 * pair after pair, so that drift of a shared machine hits them alike.
 * Used for docs/BENCHMARKS.md ("Local path at 4 KiB").
 *
 * usage: wake-bench [SLEEPERS [ROUNDS [PAIRS]]]   (default 8 5000 4)
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tool.h"

#define MAX_SLEEPERS 64
#define WAIT_NS (10ll * 1000 * 1000 * 1000) /* no progress for this long: give up */

struct shared {
	uint32_t bell __attribute__((aligned(64)));  /* bumped once per round */
	uint32_t other __attribute__((aligned(64))); /* never changes: waitv's second word */
	uint32_t acks __attribute__((aligned(64)));
	uint32_t failed;
	uint64_t ts;   /* CLOCK_REALTIME of the bump */
	int64_t lat[]; /* [sleeper][round] */
};

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

static void sleeper(struct shared *sh, int n, int idx, int rounds, int waitv)
{
	uint32_t seen = 0;

	for (int k = 0; k < rounds; k++) {
		uint64_t deadline = tool_now_ns(CLOCK_MONOTONIC) + WAIT_NS;

		while (__atomic_load_n(&sh->bell, __ATOMIC_ACQUIRE) == seen) {
			if (tool_now_ns(CLOCK_MONOTONIC) >= deadline) {
				__atomic_store_n(&sh->failed, 1, __ATOMIC_SEQ_CST);
				tool_futex_wake_all(&sh->acks);
				_exit(1);
			}
			if (waitv) {
				uint32_t *words[2] = { &sh->bell, &sh->other };
				const uint32_t vals[2] = { seen, 0 };

				tool_futex_wait_any(words, vals, 2, 100ll * 1000 * 1000);
			} else {
				tool_futex_wait(&sh->bell, seen, 100ll * 1000 * 1000);
			}
		}
		sh->lat[(int64_t)idx * rounds + k] =
			(int64_t)(tool_now_ns(CLOCK_REALTIME) - __atomic_load_n(&sh->ts, __ATOMIC_ACQUIRE));
		seen = __atomic_load_n(&sh->bell, __ATOMIC_ACQUIRE);
		/* The last sleeper to acknowledge wakes the parent (as rgaps-bench's do). */
		if (__atomic_add_fetch(&sh->acks, 1, __ATOMIC_SEQ_CST) == (uint32_t)n * (uint32_t)(k + 1))
			tool_futex_wake_all(&sh->acks);
	}
}

/* One measurement: n sleepers, rounds paced wake-ups; prints one line. */
static int measure(int n, int rounds, int waitv)
{
	size_t len = sizeof(struct shared) + sizeof(int64_t) * (size_t)n * (size_t)rounds;
	struct shared *sh = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pids[MAX_SLEEPERS] = { 0 };
	struct rusage ru;
	uint64_t wake_ns = 0, cpu0;
	int r = 0;

	if (sh == MAP_FAILED) {
		perror("wake-bench: mmap");
		return -1;
	}
	getrusage(RUSAGE_CHILDREN, &ru);
	cpu0 = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000u +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
	for (int i = 0; i < n; i++) {
		pids[i] = fork();
		if (pids[i] < 0) {
			perror("wake-bench: fork");
			r = -1;
			goto out;
		}
		if (pids[i] == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			sleeper(sh, n, i, rounds, waitv);
			_exit(0);
		}
	}
	usleep(100000); /* let them reach their first sleep */
	for (int k = 0; k < rounds && !r; k++) {
		uint64_t t0, deadline = tool_now_ns(CLOCK_MONOTONIC) + WAIT_NS;
		uint32_t a;

		__atomic_store_n(&sh->ts, tool_now_ns(CLOCK_REALTIME), __ATOMIC_RELEASE);
		__atomic_store_n(&sh->bell, (uint32_t)k + 1, __ATOMIC_SEQ_CST);
		t0 = tool_now_ns(CLOCK_MONOTONIC);
		tool_futex_wake_all(&sh->bell);
		wake_ns += tool_now_ns(CLOCK_MONOTONIC) - t0;
		while ((a = __atomic_load_n(&sh->acks, __ATOMIC_ACQUIRE)) < (uint32_t)n * (uint32_t)(k + 1)) {
			if (__atomic_load_n(&sh->failed, __ATOMIC_ACQUIRE) ||
			    tool_now_ns(CLOCK_MONOTONIC) >= deadline) {
				fprintf(stderr, "wake-bench: no progress in round %d\n", k);
				r = -1;
				break;
			}
			tool_futex_wait(&sh->acks, a, 100ll * 1000 * 1000);
		}
	}
out:
	for (int i = 0; i < n; i++) {
		int st;

		if (pids[i] <= 0)
			continue;
		if (r)
			kill(pids[i], SIGKILL);
		if (waitpid(pids[i], &st, 0) == pids[i] && (!WIFEXITED(st) || WEXITSTATUS(st)))
			r = -1;
	}
	if (!r) {
		size_t m = (size_t)n * (size_t)rounds;
		uint64_t cpu1;

		getrusage(RUSAGE_CHILDREN, &ru);
		cpu1 = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000u +
		       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
		qsort(sh->lat, m, sizeof(int64_t), cmp_i64);
		printf("%-17s sleepers %2d  wake p50 %7.1f us  p99 %8.1f us  waker's FUTEX_WAKE "
		       "%6.1f us  sleepers' CPU %6.1f us per round\n",
		       waitv ? "futex_waitv(2)" : "FUTEX_WAIT(1)", n, (double)sh->lat[m / 2] / 1e3,
		       (double)sh->lat[m * 99 / 100] / 1e3, (double)wake_ns / 1e3 / rounds,
		       (double)(cpu1 - cpu0) / rounds);
	}
	munmap(sh, len);
	return r;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 8, rounds = argc > 2 ? atoi(argv[2]) : 5000;
	int pairs = argc > 3 ? atoi(argv[3]) : 4;

	if (n < 1 || n > MAX_SLEEPERS || rounds < 100 || rounds > 1000000 || pairs < 1 ||
	    pairs > 100) {
		fprintf(stderr, "usage: wake-bench [SLEEPERS 1..%d [ROUNDS 100..1000000 "
				"[PAIRS 1..100]]]\n", MAX_SLEEPERS);
		return 2;
	}
	for (int p = 0; p < pairs; p++)
		if (measure(n, rounds, 0) || measure(n, rounds, 1))
			return 1;
	return 0;
}
