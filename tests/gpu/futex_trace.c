/*
 * futex-trace.so: where the microseconds of a wake-up go, on machines without
 * perf or strace (the lent GPU hosts). LD_PRELOAD it into a benchmark and
 * every futex(2) and futex_waitv(2) call that a process makes through libc's
 * syscall() - which is how rgaps' futex helpers (src/common/futex.h) reach the
 * kernel - is timed with CLOCK_MONOTONIC, the clock the benchmarks stamp
 * their messages with. At exit each process writes one line per call to
 * $FUTEX_TRACE_DIR/futex.PID:
 *
 *   enter_ns exit_ns op uaddr value result
 *
 * op: wait, wake, waitv (uaddr and value are then those of the first word),
 * or the raw futex op number. result: the return value, or -errno. Calls
 * beyond the first 1 << 18 of a process are counted, not kept. Nothing is
 * written when FUTEX_TRACE_DIR is unset. Processes that leave through _exit()
 * (forked benchmark children) write theirs there. tests/gpu/fanout_trace.py
 * lines these up with gpu-bench's per-message times (GPU_BENCH_RAW).
 * A measuring tool: not installed, not part of rgaps.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449
#endif
#define MAX_CALLS (1u << 18)

struct call {
	uint64_t enter_ns, exit_ns;
	uint64_t uaddr;
	uint32_t op, value;
	int64_t result;
};

static struct call calls[MAX_CALLS]; /* in .bss: pages only as they are used */
static uint32_t ncalls, dropped;
static long (*real_syscall)(long, ...);

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Visible: the build hides symbols by default, and this one must interpose libc's. */
__attribute__((visibility("default"))) long syscall(long nr, ...)
{
	long a[6], r;
	uint64_t t0;
	va_list ap;
	int err;

	va_start(ap, nr);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (!real_syscall)
		real_syscall = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
	if (nr != SYS_futex && nr != SYS_futex_waitv)
		return real_syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	t0 = now_ns();
	r = real_syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	err = errno;
	{
		uint32_t i = __atomic_fetch_add(&ncalls, 1, __ATOMIC_RELAXED);

		if (i >= MAX_CALLS) {
			__atomic_fetch_add(&dropped, 1, __ATOMIC_RELAXED);
		} else if (nr == SYS_futex) {
			calls[i] = (struct call){ t0,
						  now_ns(),
						  (uint64_t)a[0],
						  (uint32_t)a[1] & FUTEX_CMD_MASK,
						  (uint32_t)a[2],
						  r < 0 ? -err : r };
		} else {
			const struct futex_waitv *w = (const struct futex_waitv *)a[0];

			calls[i] = (struct call){ t0,
						  now_ns(),
						  w ? w[0].uaddr : 0,
						  UINT32_MAX,
						  w ? (uint32_t)w[0].val : 0,
						  r < 0 ? -err : r };
		}
	}
	errno = err;
	return r;
}

static void dump(void)
{
	const char *dir = getenv("FUTEX_TRACE_DIR");
	uint32_t n = ncalls < MAX_CALLS ? ncalls : MAX_CALLS;
	char path[4096];
	FILE *f;

	if (!dir || !n)
		return;
	snprintf(path, sizeof(path), "%s/futex.%d", dir, (int)getpid());
	f = fopen(path, "w");
	if (!f)
		return;
	for (uint32_t i = 0; i < n; i++) {
		const struct call *c = &calls[i];
		const char *op = c->op == FUTEX_WAIT   ? "wait"
				 : c->op == FUTEX_WAKE ? "wake"
				 : c->op == UINT32_MAX ? "waitv"
						       : NULL;

		if (op)
			fprintf(f, "%" PRIu64 " %" PRIu64 " %s %" PRIx64 " %u %" PRId64 "\n",
				c->enter_ns, c->exit_ns, op, c->uaddr, c->value, c->result);
		else
			fprintf(f, "%" PRIu64 " %" PRIu64 " op%u %" PRIx64 " %u %" PRId64 "\n",
				c->enter_ns, c->exit_ns, c->op, c->uaddr, c->value, c->result);
	}
	if (dropped)
		fprintf(f, "# %u calls not kept\n", dropped);
	fclose(f);
}

__attribute__((destructor)) static void at_exit(void)
{
	dump();
}

__attribute__((visibility("default"), noreturn)) void _exit(int status)
{
	dump();
	ncalls = 0; /* a destructor that still runs writes nothing twice */
	syscall(SYS_exit_group, status);
	__builtin_unreachable();
}
