/*
 * Rollback of the shared-memory undo journal (see journal.h for why it exists).
 */
#include "journal.h"

__thread struct rgaps__journal_ctx rgaps__jctx;

uint32_t rgaps__journal_rollback(struct rgaps_journal *j, void *base)
{
	uint32_t n = j->count;

	rgaps_require(n <= RGAPS_JOURNAL_MAX);
	for (uint32_t i = n; i-- > 0;) {
		struct rgaps_journal_entry *e = &j->e[i];
		uint8_t *p = (uint8_t *)base + e->off;

		if (e->width == 8)
			*(volatile uint64_t *)p = e->old;
		else
			*(volatile uint32_t *)p = (uint32_t)e->old;
	}
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	j->count = 0;
	if (n)
		j->rollbacks++;
	return n;
}
