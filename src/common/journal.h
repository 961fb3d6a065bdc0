/*
 * Undo journal for critical sections over shared memory.
 *
 * A topic's lock is a robust process-shared mutex: if its holder is killed,
 * the next locker gets EOWNERDEAD. Robustness of the lock alone is not enough,
 * because the dead process may have stopped half-way through an update of the
 * queue or the allocator. So every store to shared state made under the lock
 * goes through rgaps_j32()/rgaps_j64(), which first appends {offset, old
 * value} to a journal inside the same segment and only then stores. Unlock
 * clears the journal (the commit point); a locker that finds EOWNERDEAD rolls
 * the journal back, newest first, and the state is exactly as it was before
 * the dead process's critical section. Offsets, not pointers, are recorded,
 * because each process maps the segment at its own address.
 *
 * A thread enters journaled mode with rgaps__journal_begin() (the topic lock
 * does it); outside that mode the helpers are plain stores, so the allocator's
 * unit tests run without a journal.
 */
#ifndef RGAPS_COMMON_JOURNAL_H
#define RGAPS_COMMON_JOURNAL_H

#include <stdint.h>

#include "util.h"

#define RGAPS_JOURNAL_MAX 1024

struct rgaps_journal_entry {
	uint64_t off; /* from the segment base */
	uint64_t old;
	uint32_t width; /* 4 or 8 */
	uint32_t pad;
};

struct rgaps_journal {
	volatile uint32_t count;
	uint32_t high_water; /* most entries one section ever used (for tuning) */
	uint64_t rollbacks;  /* sections rolled back after a holder died */
	struct rgaps_journal_entry e[RGAPS_JOURNAL_MAX];
};

struct rgaps__journal_ctx {
	struct rgaps_journal *j;
	uint8_t *base;
};

extern __thread struct rgaps__journal_ctx rgaps__jctx;

static inline void rgaps__journal_begin(struct rgaps_journal *j, void *base)
{
	rgaps__jctx.j = j;
	rgaps__jctx.base = base;
}

/* Commit point: everything stored since begin (or the last checkpoint) stays. */
static inline void rgaps__journal_checkpoint(void)
{
	struct rgaps_journal *j = rgaps__jctx.j;

	if (j) {
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
		if (j->count > j->high_water)
			j->high_water = j->count;
		j->count = 0;
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
	}
}

static inline void rgaps__journal_end(void)
{
	rgaps__journal_checkpoint();
	rgaps__jctx.j = NULL;
	rgaps__jctx.base = NULL;
}

static inline void rgaps__journal_log(void *p, uint64_t old, uint32_t width)
{
	struct rgaps_journal *j = rgaps__jctx.j;
	struct rgaps_journal_entry *e;

	rgaps_require(j->count < RGAPS_JOURNAL_MAX);
	e = &j->e[j->count];
	e->off = (uint64_t)((uint8_t *)p - rgaps__jctx.base);
	e->old = old;
	e->width = width;
	/* The entry must be complete before it counts, and count before the store. */
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	j->count = j->count + 1;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

/*
 * The stores are relaxed atomics: a few fields (a subscriber's next_seq, the
 * slot states) are also read without the lock by lock-free readiness checks,
 * and a plain store there would be a data race (ThreadSanitizer says so). On
 * x86-64 and arm64 they compile to the same single store as before.
 */
static inline void rgaps_j64(uint64_t *p, uint64_t v)
{
	if (rgaps__jctx.j)
		rgaps__journal_log(p, *p, 8);
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
}

static inline void rgaps_j32(uint32_t *p, uint32_t v)
{
	if (rgaps__jctx.j)
		rgaps__journal_log(p, *p, 4);
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
}

/* Undo an interrupted section (newest entry first). Returns entries undone. */
uint32_t rgaps__journal_rollback(struct rgaps_journal *j, void *base);

#endif
