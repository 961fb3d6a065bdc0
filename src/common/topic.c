/*
 * Operations on a topic's shared metadata segment (see topic.h for the model:
 * queue, reference counts, slots, wake-ups). Shared by rgapsd, which formats
 * segments and opens/closes slots, and librgaps, which loans, commits, takes
 * and releases on the hot path without talking to the daemon.
 *
 * Discipline: every store to shared state under the lock goes through
 * rgaps_j32()/rgaps_j64() (journal.h), so a process killed anywhere inside a
 * critical section leaves a state the next locker can roll back. Loops that
 * make several self-contained changes (retiring many entries) checkpoint the
 * journal between them. Wake-ups happen after unlock.
 */
#include "topic.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "futex.h"
#include "log.h"

#define WAIT_SLICE_NS (200ull * 1000 * 1000) /* re-check daemon liveness this often */

/* ---------------------------------------------------------------- layout */

struct layout {
	uint64_t off_queue, off_subs, off_pubs, off_refs, off_tlsf, off_lat, sub_stride, pub_stride;
	uint64_t size;
	uint32_t nblocks;
};

static uint32_t blocks_for(const struct rgaps_topic_config *tc)
{
	/*
	 * Descriptors: every live block is queued, held or loaned, and each free
	 * range sits between live ones, so twice the live bound plus one suffices.
	 */
	uint64_t live = (uint64_t)tc->queue_depth + (uint64_t)tc->max_subscribers * tc->max_holds +
			(uint64_t)tc->max_publishers * tc->max_loans;

	return (uint32_t)RGAPS_MIN(2 * live + 2, (uint64_t)UINT32_MAX - 1);
}

static void compute_layout(const struct rgaps_topic_config *tc, struct layout *l)
{
	uint64_t off = RGAPS_ALIGN_UP(sizeof(struct rgaps_topic_hdr), RGAPS_CACHELINE);

	l->nblocks = blocks_for(tc);
	l->off_queue = off;
	off += RGAPS_ALIGN_UP((uint64_t)tc->queue_depth * sizeof(struct rgaps_topic_entry),
			      RGAPS_CACHELINE);
	l->sub_stride = RGAPS_ALIGN_UP(sizeof(struct rgaps_topic_sub) +
					       (uint64_t)tc->max_holds * sizeof(struct rgaps_topic_hold),
				       RGAPS_CACHELINE);
	l->off_subs = off;
	off += l->sub_stride * tc->max_subscribers;
	l->pub_stride = RGAPS_ALIGN_UP(sizeof(struct rgaps_topic_pub) +
					       (uint64_t)tc->max_loans * sizeof(uint32_t),
				       RGAPS_CACHELINE);
	l->off_pubs = off;
	off += l->pub_stride * tc->max_publishers;
	l->off_refs = off;
	off += RGAPS_ALIGN_UP((uint64_t)l->nblocks * sizeof(uint32_t), RGAPS_CACHELINE);
	l->off_tlsf = off;
	off += RGAPS_ALIGN_UP(rgaps_tlsf_state_size(l->nblocks), RGAPS_CACHELINE);
	l->off_lat = off;
	off += RGAPS_ALIGN_UP((uint64_t)tc->max_subscribers * sizeof(struct rgaps_lathist),
			      RGAPS_CACHELINE);
	l->size = RGAPS_ALIGN_UP(off, 4096);
}

size_t rgaps_topic_segment_size(const struct rgaps_topic_config *tc)
{
	struct layout l;

	compute_layout(tc, &l);
	return l.size;
}

static inline struct rgaps_topic_entry *entry_at(const struct rgaps_topic *t, uint64_t seq)
{
	struct rgaps_topic_entry *q = (void *)((uint8_t *)t->hdr + t->hdr->off_queue);

	return &q[seq & (t->hdr->queue_depth - 1)];
}

struct rgaps_topic_sub *rgaps_topic_sub_at(const struct rgaps_topic *t, uint32_t slot)
{
	return (void *)((uint8_t *)t->hdr + t->hdr->off_subs + (uint64_t)slot * t->hdr->sub_stride);
}

struct rgaps_lathist *rgaps_topic_sub_latency(const struct rgaps_topic *t, uint32_t slot)
{
	return (struct rgaps_lathist *)((uint8_t *)t->hdr + t->hdr->off_lat) + slot;
}

void rgaps_topic_record_latency(struct rgaps_topic *t, uint32_t slot, uint64_t ts_ns,
				uint64_t now_ns)
{
	struct rgaps_lathist *mine;

	if (slot >= t->hdr->max_subscribers)
		return;
	mine = rgaps_topic_sub_latency(t, slot);
	if (ts_ns > now_ns) { /* stamped by a host whose clock runs ahead */
		__atomic_fetch_add(&mine->skewed, 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&t->hdr->latency.skewed, 1, __ATOMIC_RELAXED);
		now_ns = ts_ns;
	}
	rgaps_lathist_add(mine, now_ns - ts_ns);
	rgaps_lathist_add(&t->hdr->latency, now_ns - ts_ns);
}

struct rgaps_topic_pub *rgaps_topic_pub_at(const struct rgaps_topic *t, uint32_t slot)
{
	return (void *)((uint8_t *)t->hdr + t->hdr->off_pubs + (uint64_t)slot * t->hdr->pub_stride);
}

static inline uint32_t *refs_of(const struct rgaps_topic *t)
{
	return (uint32_t *)((uint8_t *)t->hdr + t->hdr->off_refs);
}

static inline struct rgaps_tlsf *tlsf_of(const struct rgaps_topic *t)
{
	return (struct rgaps_tlsf *)((uint8_t *)t->hdr + t->hdr->off_tlsf);
}

int rgaps_topic_format(void *mem, size_t size, const struct rgaps_topic_config *tc,
		       uint32_t mem_kind)
{
	struct rgaps_topic_hdr *h = mem;
	struct rgaps_topic t = { .hdr = h, .size = size };
	pthread_mutexattr_t ma;
	struct layout l;
	int r;

	compute_layout(tc, &l);
	if (size < l.size || !rgaps_is_pow2(tc->queue_depth))
		return -EINVAL;
	memset(h, 0, sizeof(*h));
	h->layout_version = RGAPS_TOPIC_LAYOUT_VERSION;
	h->hdr_size = sizeof(*h);
	h->segment_size = size;
	snprintf(h->name, sizeof(h->name), "%s", tc->name);
	h->pool_size = tc->pool_size;
	h->max_message_size = tc->max_message_size;
	h->queue_depth = tc->queue_depth;
	h->history = tc->history;
	h->max_subscribers = tc->max_subscribers;
	h->max_publishers = tc->max_publishers;
	h->max_holds = tc->max_holds;
	h->max_loans = tc->max_loans;
	h->block_timeout_ms = tc->block_timeout_ms;
	h->overflow = tc->overflow;
	h->nblocks = l.nblocks;
	h->mem_kind = mem_kind;
	h->device = tc->device;
	h->off_queue = l.off_queue;
	h->off_subs = l.off_subs;
	h->off_pubs = l.off_pubs;
	h->off_refs = l.off_refs;
	h->off_tlsf = l.off_tlsf;
	h->off_lat = l.off_lat;
	h->sub_stride = l.sub_stride;
	h->pub_stride = l.pub_stride;

	for (uint32_t i = 0; i < tc->queue_depth; i++)
		entry_at(&t, i)->block = RGAPS_TLSF_NIL;
	for (uint32_t i = 0; i < tc->max_subscribers; i++) {
		struct rgaps_topic_sub *s = rgaps_topic_sub_at(&t, i);

		for (uint32_t k = 0; k < tc->max_holds; k++)
			s->holds[k].block = RGAPS_TLSF_NIL;
	}
	for (uint32_t i = 0; i < tc->max_publishers; i++) {
		struct rgaps_topic_pub *p = rgaps_topic_pub_at(&t, i);

		for (uint32_t k = 0; k < tc->max_loans; k++)
			p->loans[k] = RGAPS_TLSF_NIL;
	}
	r = rgaps_tlsf_init(tlsf_of(&t), tc->pool_size, l.nblocks, RGAPS_POOL_ALIGN);
	if (r)
		return r;

	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
	r = pthread_mutex_init(&h->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	if (r)
		return -r;
	__atomic_store_n(&h->magic, RGAPS_TOPIC_MAGIC, __ATOMIC_RELEASE);
	return 0;
}

int rgaps_topic_validate(const void *mem, size_t size)
{
	const struct rgaps_topic_hdr *h = mem;
	struct rgaps_topic_config tc = { 0 };
	struct layout l;

	if (size < sizeof(*h) || h->magic != RGAPS_TOPIC_MAGIC ||
	    h->layout_version != RGAPS_TOPIC_LAYOUT_VERSION || h->hdr_size != sizeof(*h) ||
	    h->segment_size != size || !rgaps_is_pow2(h->queue_depth))
		return -EPROTO;
	tc.queue_depth = h->queue_depth;
	tc.max_subscribers = h->max_subscribers;
	tc.max_publishers = h->max_publishers;
	tc.max_holds = h->max_holds;
	tc.max_loans = h->max_loans;
	compute_layout(&tc, &l);
	if (l.size > size || l.off_tlsf != h->off_tlsf || l.off_lat != h->off_lat ||
	    l.nblocks != h->nblocks)
		return -EPROTO;
	return 0;
}

/* ---------------------------------------------------------------- locking */

/*
 * Critical sections are a few hundred nanoseconds, but when a publish wakes N
 * subscribers they all want the lock at once, and a contended robust mutex
 * hands over through a futex sleep and wake per waiter. A short bounded
 * trylock spin takes it over in the time the holder needs instead; only a
 * holder that stays longer (descheduled) sends us to sleep.
 */
#define LOCK_SPIN_TRIES 256

static int topic_lock(struct rgaps_topic *t)
{
	struct rgaps_topic_hdr *h = t->hdr;
	int r = EBUSY;

	for (int i = 0; i < LOCK_SPIN_TRIES && r == EBUSY; i++) {
		r = pthread_mutex_trylock(&h->lock);
		if (r == EBUSY)
			__builtin_ia32_pause();
	}
	if (r == EBUSY)
		r = pthread_mutex_lock(&h->lock);

	if (r == EOWNERDEAD) {
		uint32_t n = rgaps__journal_rollback(&h->journal, h);

		rgaps_warn("topic '%s': lock holder died; rolled back %u journaled stores", h->name,
			   n);
		pthread_mutex_consistent(&h->lock);
	} else if (r) {
		return -r;
	}
	rgaps__journal_begin(&h->journal, h);
	return 0;
}

static void topic_unlock(struct rgaps_topic *t)
{
	rgaps__journal_end();
	pthread_mutex_unlock(&t->hdr->lock);
}

/* ---------------------------------------------------------------- blocks and retirement */

/* Drop one reference; frees the block at zero. Returns true if freed. */
static bool block_put(struct rgaps_topic *t, uint32_t block)
{
	uint32_t *refs = refs_of(t);

	rgaps_require(rgaps_tlsf_is_used(tlsf_of(t), block) && refs[block] > 0);
	rgaps_j32(&refs[block], refs[block] - 1);
	if (refs[block])
		return false;
	rgaps_tlsf_free(tlsf_of(t), block);
	return true;
}

static void retire_tail(struct rgaps_topic *t)
{
	struct rgaps_topic_hdr *h = t->hdr;
	struct rgaps_topic_entry *e = entry_at(t, h->tail_seq);

	block_put(t, e->block);
	rgaps_j32(&e->block, RGAPS_TLSF_NIL);
	rgaps_j64(&h->tail_seq, h->tail_seq + 1);
	rgaps_j64(&h->c.retired, h->c.retired + 1);
}

/* Retire every leading entry no subscriber still needs. Returns how many. */
static uint32_t retire_eligible(struct rgaps_topic *t)
{
	struct rgaps_topic_hdr *h = t->hdr;
	uint32_t n = 0;

	while (h->tail_seq < h->head_seq && entry_at(t, h->tail_seq)->pending == 0 &&
	       h->head_seq - h->tail_seq > h->history) {
		retire_tail(t);
		rgaps__journal_checkpoint();
		n++;
	}
	return n;
}

/* drop_oldest: force the oldest entry out, skipping lagging subscribers past it. */
static void force_retire(struct rgaps_topic *t)
{
	struct rgaps_topic_hdr *h = t->hdr;
	struct rgaps_topic_entry *e = entry_at(t, h->tail_seq);

	if (e->pending) {
		for (uint32_t i = 0; i < h->max_subscribers; i++) {
			struct rgaps_topic_sub *s = rgaps_topic_sub_at(t, i);

			if (s->state != RGAPS_SLOT_ACTIVE || s->next_seq > e->seq)
				continue;
			rgaps_j64(&s->next_seq, e->seq + 1);
			rgaps_j64(&s->drops, s->drops + 1);
			rgaps_j64(&s->pending_gap, s->pending_gap + 1);
			rgaps_j64(&h->c.drops_total, h->c.drops_total + 1);
		}
		rgaps_j32(&e->pending, 0);
		rgaps_j64(&h->c.dropped, h->c.dropped + 1);
	}
	retire_tail(t);
	rgaps__journal_checkpoint();
}

static void wake_space(struct rgaps_topic *t)
{
	struct rgaps_topic_hdr *h = t->hdr;

	__atomic_fetch_add(&h->space_seq, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&h->space_waiters, __ATOMIC_SEQ_CST))
		rgaps_futex_wake_all(&h->space_seq);
}

static void wake_subscribers(struct rgaps_topic *t)
{
	struct rgaps_topic_hdr *h = t->hdr;

	__atomic_fetch_add(&h->wake_seq, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&h->waiters, __ATOMIC_SEQ_CST))
		rgaps_futex_wake_all(&h->wake_seq);
}

static uint64_t deadline_of(int timeout_ms)
{
	if (timeout_ms < 0)
		return UINT64_MAX;
	return rgaps_now_ns(CLOCK_MONOTONIC) + (uint64_t)timeout_ms * 1000000ull;
}

/*
 * Sleep until *word moves from seen, the deadline passes (-ETIMEDOUT), the
 * topic closes or the daemon is gone (-ENOTCONN). The waiter count is raised
 * before the futex re-checks the word, and wakers bump the word before reading
 * the count (both sequentially consistent), so no wake-up is lost.
 */
static int wait_word(struct rgaps_topic *t, uint32_t *word, uint32_t *waiters, uint32_t *flag,
		     uint32_t seen, uint64_t deadline, rgaps_topic_alive_fn alive, void *arg)
{
	for (;;) {
		uint64_t now = rgaps_now_ns(CLOCK_MONOTONIC);
		int64_t slice = WAIT_SLICE_NS;
		int r;

		if (now >= deadline)
			return -ETIMEDOUT;
		if (deadline - now < (uint64_t)slice)
			slice = (int64_t)(deadline - now);
		__atomic_fetch_add(waiters, 1, __ATOMIC_SEQ_CST);
		__atomic_store_n(flag, 1, __ATOMIC_RELAXED);
		r = rgaps_futex_wait(word, seen, slice);
		__atomic_store_n(flag, 0, __ATOMIC_RELAXED);
		__atomic_fetch_sub(waiters, 1, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(word, __ATOMIC_SEQ_CST) != seen)
			return 0;
		if (__atomic_load_n(&t->hdr->closed, __ATOMIC_RELAXED))
			return -ENOTCONN;
		if (r == -ETIMEDOUT && alive && !alive(arg))
			return -ENOTCONN;
		if (r == -EINTR)
			return -EINTR; /* let the caller look at its signal flags */
	}
}

/* ---------------------------------------------------------------- slots (daemon) */

int rgaps_topic_sub_open(struct rgaps_topic *t, uint64_t conn_id, pid_t pid, uint32_t *slot_p)
{
	struct rgaps_topic_hdr *h = t->hdr;
	int r = topic_lock(t);

	if (r)
		return r;
	for (uint32_t i = 0; i < h->max_subscribers; i++) {
		struct rgaps_topic_sub *s = rgaps_topic_sub_at(t, i);
		uint64_t back, start;

		if (s->state != RGAPS_SLOT_FREE)
			continue;
		/* Live delivery, plus the retained history window for late joiners. */
		back = RGAPS_MIN((uint64_t)h->history, h->head_seq - h->tail_seq);
		start = h->head_seq - back;
		for (uint64_t q = start; q < h->head_seq; q++) {
			struct rgaps_topic_entry *e = entry_at(t, q);

			rgaps_j32(&e->pending, e->pending + 1);
		}
		rgaps_j32((uint32_t *)&s->pid, (uint32_t)pid);
		rgaps_j64(&s->conn_id, conn_id);
		rgaps_j64(&s->next_seq, start);
		rgaps_j64(&s->taken, 0);
		rgaps_j64(&s->drops, 0);
		rgaps_j64(&s->pending_gap, 0);
		rgaps_j32(&s->nholds, 0);
		rgaps_j32(&s->state, RGAPS_SLOT_ACTIVE);
		rgaps_j32(&h->nsubs, h->nsubs + 1);
		/* Statistics, not state: not journaled (lathist.h). */
		rgaps_lathist_clear(rgaps_topic_sub_latency(t, i));
		topic_unlock(t);
		*slot_p = i;
		return 0;
	}
	topic_unlock(t);
	return -ENOSPC;
}

void rgaps_topic_sub_close(struct rgaps_topic *t, uint32_t slot)
{
	struct rgaps_topic_hdr *h = t->hdr;
	struct rgaps_topic_sub *s = rgaps_topic_sub_at(t, slot);
	bool freed = false;

	if (topic_lock(t))
		return;
	if (s->state != RGAPS_SLOT_ACTIVE) {
		topic_unlock(t);
		return;
	}
	for (uint32_t k = 0; k < h->max_holds; k++) {
		if (s->holds[k].block == RGAPS_TLSF_NIL)
			continue;
		freed |= block_put(t, s->holds[k].block);
		rgaps_j32(&s->holds[k].block, RGAPS_TLSF_NIL);
		rgaps_j32(&s->nholds, s->nholds - 1);
		rgaps_j64(&h->c.reclaimed_holds, h->c.reclaimed_holds + 1);
		rgaps__journal_checkpoint();
	}
	for (uint64_t q = s->next_seq; q < h->head_seq; q++) {
		struct rgaps_topic_entry *e = entry_at(t, q);

		rgaps_j32(&e->pending, e->pending - 1);
	}
	rgaps_j64(&s->next_seq, h->head_seq);
	rgaps_j32(&s->state, RGAPS_SLOT_FREE);
	rgaps_j32(&h->nsubs, h->nsubs - 1);
	rgaps__journal_checkpoint();
	freed |= retire_eligible(t) > 0;
	if (__atomic_exchange_n(&s->waiting, 0, __ATOMIC_SEQ_CST))
		__atomic_fetch_sub(&h->waiters, 1, __ATOMIC_SEQ_CST);
	topic_unlock(t);
	if (freed)
		wake_space(t);
}

int rgaps_topic_pub_open(struct rgaps_topic *t, uint64_t conn_id, pid_t pid, uint32_t *slot_p)
{
	struct rgaps_topic_hdr *h = t->hdr;
	int r = topic_lock(t);

	if (r)
		return r;
	for (uint32_t i = 0; i < h->max_publishers; i++) {
		struct rgaps_topic_pub *p = rgaps_topic_pub_at(t, i);

		if (p->state != RGAPS_SLOT_FREE)
			continue;
		rgaps_j32((uint32_t *)&p->pid, (uint32_t)pid);
		rgaps_j64(&p->conn_id, conn_id);
		rgaps_j64(&p->published, 0);
		rgaps_j32(&p->nloans, 0);
		rgaps_j32(&p->state, RGAPS_SLOT_ACTIVE);
		rgaps_j32(&h->npubs, h->npubs + 1);
		topic_unlock(t);
		*slot_p = i;
		return 0;
	}
	topic_unlock(t);
	return -ENOSPC;
}

void rgaps_topic_pub_close(struct rgaps_topic *t, uint32_t slot)
{
	struct rgaps_topic_hdr *h = t->hdr;
	struct rgaps_topic_pub *p = rgaps_topic_pub_at(t, slot);
	bool freed = false;

	if (topic_lock(t))
		return;
	if (p->state != RGAPS_SLOT_ACTIVE) {
		topic_unlock(t);
		return;
	}
	for (uint32_t k = 0; k < h->max_loans; k++) {
		if (p->loans[k] == RGAPS_TLSF_NIL)
			continue;
		freed |= block_put(t, p->loans[k]);
		rgaps_j32(&p->loans[k], RGAPS_TLSF_NIL);
		rgaps_j32(&p->nloans, p->nloans - 1);
		rgaps_j64(&h->c.reclaimed_loans, h->c.reclaimed_loans + 1);
		rgaps__journal_checkpoint();
	}
	rgaps_j32(&p->state, RGAPS_SLOT_FREE);
	rgaps_j32(&h->npubs, h->npubs - 1);
	if (__atomic_exchange_n(&p->waiting, 0, __ATOMIC_SEQ_CST))
		__atomic_fetch_sub(&h->space_waiters, 1, __ATOMIC_SEQ_CST);
	topic_unlock(t);
	if (freed)
		wake_space(t);
}

void rgaps_topic_close(struct rgaps_topic *t)
{
	__atomic_store_n(&t->hdr->closed, 1, __ATOMIC_SEQ_CST);
	wake_subscribers(t);
	wake_space(t);
}

/* ---------------------------------------------------------------- publisher */

int rgaps_topic_loan(struct rgaps_topic *t, uint32_t pub_slot, uint64_t size, int timeout_ms,
		     rgaps_topic_alive_fn alive, void *alive_arg, uint32_t *token_p,
		     uint64_t *off_p)
{
	struct rgaps_topic_hdr *h = t->hdr;
	struct rgaps_topic_pub *p;
	uint64_t deadline = deadline_of(timeout_ms);
	int r;

	if (size == 0)
		return -EINVAL;
	if (size > h->max_message_size)
		return -EMSGSIZE;
	if (pub_slot >= h->max_publishers)
		return -EINVAL;
	p = rgaps_topic_pub_at(t, pub_slot);
	for (;;) {
		uint32_t block, seen;

		r = topic_lock(t);
		if (r)
			return r;
		if (p->state != RGAPS_SLOT_ACTIVE || h->closed) {
			topic_unlock(t);
			return -ENOTCONN;
		}
		if (p->nloans >= h->max_loans) {
			topic_unlock(t);
			return -ENOBUFS;
		}
		if (rgaps_tlsf_alloc(tlsf_of(t), size, &block) == 0) {
			uint32_t k = 0;

			while (p->loans[k] != RGAPS_TLSF_NIL)
				k++;
			rgaps_j32(&refs_of(t)[block], 1);
			rgaps_j32(&p->loans[k], block);
			rgaps_j32(&p->nloans, p->nloans + 1);
			rgaps_j64(&h->c.loans, h->c.loans + 1);
			*off_p = rgaps_tlsf_offset(tlsf_of(t), block);
			topic_unlock(t);
			*token_p = k;
			return 0;
		}
		if (h->overflow == RGAPS_OVERFLOW_DROP_OLDEST && h->tail_seq < h->head_seq) {
			force_retire(t);
			topic_unlock(t);
			continue;
		}
		if (timeout_ms == 0) {
			topic_unlock(t);
			return -EAGAIN;
		}
		seen = __atomic_load_n(&h->space_seq, __ATOMIC_SEQ_CST);
		rgaps_j64(&h->c.full_waits, h->c.full_waits + 1);
		topic_unlock(t);
		r = wait_word(t, &h->space_seq, &h->space_waiters, &p->waiting, seen, deadline,
			      alive, alive_arg);
		if (r == -ETIMEDOUT) {
			__atomic_fetch_add(&h->c.timeouts, 1, __ATOMIC_RELAXED);
			return r;
		}
		if (r)
			return r;
	}
}

/* Give a loan's block back; caller holds the lock. */
static bool drop_loan(struct rgaps_topic *t, struct rgaps_topic_pub *p, uint32_t token)
{
	bool freed = block_put(t, p->loans[token]);

	rgaps_j32(&p->loans[token], RGAPS_TLSF_NIL);
	rgaps_j32(&p->nloans, p->nloans - 1);
	return freed;
}

static int commit(struct rgaps_topic *t, uint32_t pub_slot, uint32_t token, uint64_t size,
		  uint64_t ts_ns, uint32_t flags, uint32_t gap, int timeout_ms,
		  rgaps_topic_alive_fn alive, void *alive_arg, uint64_t *seq_p)
{
	struct rgaps_topic_hdr *h = t->hdr;
	struct rgaps_topic_pub *p;
	struct rgaps_topic_entry *e;
	uint64_t deadline = deadline_of(timeout_ms), seq;
	uint32_t block, retired;
	bool freed;
	int r;

	if (pub_slot >= h->max_publishers || token >= h->max_loans)
		return -EINVAL;
	p = rgaps_topic_pub_at(t, pub_slot);
	for (;;) {
		uint32_t seen;

		r = topic_lock(t);
		if (r)
			return r;
		if (p->state != RGAPS_SLOT_ACTIVE || h->closed) {
			topic_unlock(t);
			return -ENOTCONN;
		}
		block = p->loans[token];
		if (block == RGAPS_TLSF_NIL) {
			topic_unlock(t);
			return -EINVAL;
		}
		if (size == 0 || size > rgaps_tlsf_size(tlsf_of(t), block)) {
			freed = drop_loan(t, p, token);
			topic_unlock(t);
			if (freed)
				wake_space(t);
			return -EINVAL;
		}
		if (h->head_seq - h->tail_seq < h->queue_depth)
			break;
		if (h->overflow == RGAPS_OVERFLOW_DROP_OLDEST) {
			force_retire(t);
			topic_unlock(t);
			continue;
		}
		if (timeout_ms == 0 && (flags & RGAPS_ENTRY_REMOTE)) {
			/* rgapsd cannot wait on its loop: it keeps the loan and retries. */
			topic_unlock(t);
			return -EAGAIN;
		}
		if (timeout_ms == 0) {
			r = -EAGAIN;
			goto out_drop;
		}
		seen = __atomic_load_n(&h->space_seq, __ATOMIC_SEQ_CST);
		rgaps_j64(&h->c.full_waits, h->c.full_waits + 1);
		topic_unlock(t);
		r = wait_word(t, &h->space_seq, &h->space_waiters, &p->waiting, seen, deadline,
			      alive, alive_arg);
		if (r == 0)
			continue;
		if (r == -ETIMEDOUT)
			__atomic_fetch_add(&h->c.timeouts, 1, __ATOMIC_RELAXED);
		if (topic_lock(t))
			return r;
		if (p->state != RGAPS_SLOT_ACTIVE || p->loans[token] == RGAPS_TLSF_NIL) {
			topic_unlock(t);
			return r;
		}
		goto out_drop;
	}

	seq = h->head_seq;
	e = entry_at(t, seq);
	rgaps_j64(&e->seq, seq);
	rgaps_j64(&e->off, rgaps_tlsf_offset(tlsf_of(t), block));
	rgaps_j64(&e->size, size);
	rgaps_j64(&e->ts_ns, ts_ns);
	rgaps_j32(&e->block, block);
	rgaps_j32(&e->pending, h->nsubs);
	rgaps_j32(&e->flags, flags);
	rgaps_j32(&e->gap, gap);
	/* The loan's reference becomes the queue's. */
	rgaps_j32(&p->loans[token], RGAPS_TLSF_NIL);
	rgaps_j32(&p->nloans, p->nloans - 1);
	rgaps_j64(&h->head_seq, seq + 1);
	rgaps_j64(&p->published, p->published + 1);
	rgaps_j64(&h->c.published, h->c.published + 1);
	rgaps_j64(&h->c.published_bytes, h->c.published_bytes + size);
	if (h->nsubs == 0)
		rgaps_j64(&h->c.unrouted, h->c.unrouted + 1);
	rgaps__journal_checkpoint();
	retired = retire_eligible(t);
	topic_unlock(t);
	wake_subscribers(t);
	if (retired)
		wake_space(t);
	if (seq_p)
		*seq_p = seq;
	return 0;

out_drop:
	freed = drop_loan(t, p, token);
	topic_unlock(t);
	if (freed)
		wake_space(t);
	return r;
}

int rgaps_topic_commit(struct rgaps_topic *t, uint32_t pub_slot, uint32_t token, uint64_t size,
		       uint64_t ts_ns, int timeout_ms, rgaps_topic_alive_fn alive, void *alive_arg,
		       uint64_t *seq_p)
{
	return commit(t, pub_slot, token, size, ts_ns, 0, 0, timeout_ms, alive, alive_arg, seq_p);
}

int rgaps_topic_commit_remote(struct rgaps_topic *t, uint32_t pub_slot, uint32_t token,
			      uint64_t size, uint64_t ts_ns, uint32_t gap, uint64_t *seq_p)
{
	return commit(t, pub_slot, token, size, ts_ns, RGAPS_ENTRY_REMOTE, gap, 0, NULL, NULL,
		      seq_p);
}

int rgaps_topic_cancel(struct rgaps_topic *t, uint32_t pub_slot, uint32_t token)
{
	struct rgaps_topic_hdr *h = t->hdr;
	struct rgaps_topic_pub *p;
	bool freed;
	int r;

	if (pub_slot >= h->max_publishers || token >= h->max_loans)
		return -EINVAL;
	p = rgaps_topic_pub_at(t, pub_slot);
	r = topic_lock(t);
	if (r)
		return r;
	if (p->state != RGAPS_SLOT_ACTIVE || p->loans[token] == RGAPS_TLSF_NIL) {
		topic_unlock(t);
		return -EINVAL;
	}
	freed = drop_loan(t, p, token);
	rgaps_j64(&h->c.cancelled, h->c.cancelled + 1);
	topic_unlock(t);
	if (freed)
		wake_space(t);
	return 0;
}

/* ---------------------------------------------------------------- subscriber */

bool rgaps_topic_sub_ready(const struct rgaps_topic *t, uint32_t sub_slot)
{
	const struct rgaps_topic_sub *s = rgaps_topic_sub_at(t, sub_slot);

	return __atomic_load_n(&s->next_seq, __ATOMIC_ACQUIRE) <
		       __atomic_load_n(&t->hdr->head_seq, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&t->hdr->closed, __ATOMIC_RELAXED);
}

static void spin_for(const uint32_t *word, uint32_t seen, uint32_t spin_us)
{
	uint64_t end = rgaps_now_ns(CLOCK_MONOTONIC) + (uint64_t)spin_us * 1000;

	do {
		for (int i = 0; i < 64; i++) {
			if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != seen)
				return;
			__builtin_ia32_pause();
		}
	} while (rgaps_now_ns(CLOCK_MONOTONIC) < end);
}

static long online_cpus(void)
{
	static long n;

	if (!n)
		n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? n : 1;
}

int rgaps_topic_take(struct rgaps_topic *t, uint32_t sub_slot, int timeout_ms, uint32_t spin_us,
		     rgaps_topic_alive_fn alive, void *alive_arg, struct rgaps_topic_msg *msg_p)
{
	struct rgaps_topic_hdr *h = t->hdr;
	struct rgaps_topic_sub *s;
	uint64_t deadline = deadline_of(timeout_ms);
	/*
	 * Spinning only pays while every subscriber can have a CPU: with more
	 * subscribers than CPUs the spinners delay the publisher and each other
	 * (docs/BENCHMARKS.md: 4 KiB p50 58-85 us spinning vs 22-30 us sleeping,
	 * 8 subscribers on 2 CPUs), so they go straight to the futex.
	 */
	bool spun = spin_us == 0 || __atomic_load_n(&h->nsubs, __ATOMIC_RELAXED) >= online_cpus();
	int r;

	if (sub_slot >= h->max_subscribers)
		return -EINVAL;
	s = rgaps_topic_sub_at(t, sub_slot);
	for (;;) {
		uint32_t seen;

		r = topic_lock(t);
		if (r)
			return r;
		if (s->state != RGAPS_SLOT_ACTIVE || h->closed) {
			topic_unlock(t);
			return -ENOTCONN;
		}
		if (s->next_seq < h->head_seq) {
			struct rgaps_topic_entry *e = entry_at(t, s->next_seq);
			uint32_t k = 0, retired;

			if (s->nholds >= h->max_holds) {
				topic_unlock(t);
				return -ENOBUFS;
			}
			rgaps_require(e->seq == s->next_seq && e->pending > 0);
			while (s->holds[k].block != RGAPS_TLSF_NIL)
				k++;
			msg_p->seq = e->seq;
			msg_p->off = e->off;
			msg_p->size = e->size;
			msg_p->ts_ns = e->ts_ns;
			msg_p->gap = s->pending_gap + e->gap;
			msg_p->token = k;
			msg_p->flags = e->flags;
			rgaps_j64(&s->holds[k].seq, e->seq);
			rgaps_j32(&s->holds[k].block, e->block);
			rgaps_j32(&s->nholds, s->nholds + 1);
			rgaps_j32(&refs_of(t)[e->block], refs_of(t)[e->block] + 1);
			rgaps_j32(&e->pending, e->pending - 1);
			if (s->pending_gap)
				rgaps_j64(&s->pending_gap, 0);
			rgaps_j64(&s->next_seq, s->next_seq + 1);
			rgaps__journal_checkpoint();
			retired = retire_eligible(t);
			topic_unlock(t);
			/*
			 * The take counters are statistics: added after the unlock, so that N
			 * subscribers woken together spend less time in turn under the lock
			 * (and two journal entries less each). A process killed right here
			 * loses one count, never a message or a reference.
			 */
			__atomic_fetch_add(&s->taken, 1, __ATOMIC_RELAXED);
			__atomic_fetch_add(&h->c.taken, 1, __ATOMIC_RELAXED);
			if (retired)
				wake_space(t);
			return 0;
		}
		if (timeout_ms == 0) {
			topic_unlock(t);
			return -EAGAIN;
		}
		seen = __atomic_load_n(&h->wake_seq, __ATOMIC_SEQ_CST);
		topic_unlock(t);
		if (!spun) {
			/* A short spin catches back-to-back messages without a sleep. */
			spun = true;
			spin_for(&h->wake_seq, seen, spin_us);
			if (__atomic_load_n(&h->wake_seq, __ATOMIC_ACQUIRE) != seen)
				continue;
		}
		r = wait_word(t, &h->wake_seq, &h->waiters, &s->waiting, seen, deadline, alive,
			      alive_arg);
		if (r)
			return r;
	}
}

int rgaps_topic_release(struct rgaps_topic *t, uint32_t sub_slot, uint32_t token)
{
	struct rgaps_topic_hdr *h = t->hdr;
	struct rgaps_topic_sub *s;
	bool freed;
	int r;

	if (sub_slot >= h->max_subscribers || token >= h->max_holds)
		return -EINVAL;
	s = rgaps_topic_sub_at(t, sub_slot);
	r = topic_lock(t);
	if (r)
		return r;
	if (s->state != RGAPS_SLOT_ACTIVE || s->holds[token].block == RGAPS_TLSF_NIL) {
		topic_unlock(t);
		return -EINVAL;
	}
	freed = block_put(t, s->holds[token].block);
	rgaps_j32(&s->holds[token].block, RGAPS_TLSF_NIL);
	rgaps_j32(&s->nholds, s->nholds - 1);
	rgaps_j64(&h->c.released, h->c.released + 1);
	topic_unlock(t);
	if (freed)
		wake_space(t);
	return 0;
}

/* ---------------------------------------------------------------- stats and checks */

int rgaps_topic_get_stats(struct rgaps_topic *t, struct rgaps_topic_stats *st)
{
	struct rgaps_topic_hdr *h = t->hdr;
	int r = topic_lock(t);

	if (r)
		return r;
	{
		/* Word by word with relaxed loads: taken and timeouts are added outside the lock. */
		const uint64_t *src = (const uint64_t *)&h->c;
		uint64_t *dst = (uint64_t *)&st->c;

		_Static_assert(sizeof(h->c) % sizeof(uint64_t) == 0, "counters are uint64_t");
		for (size_t i = 0; i < sizeof(h->c) / sizeof(uint64_t); i++)
			dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
	}
	rgaps_tlsf_get_stats(tlsf_of(t), &st->pool);
	st->head_seq = h->head_seq;
	st->tail_seq = h->tail_seq;
	st->nsubs = h->nsubs;
	st->npubs = h->npubs;
	st->queue_used = (uint32_t)(h->head_seq - h->tail_seq);
	st->journal_high_water = h->journal.high_water;
	st->journal_rollbacks = h->journal.rollbacks;
	topic_unlock(t);
	return 0;
}

#define FAIL(...)                                         \
	do {                                              \
		if (why)                                  \
			snprintf(why, whylen, __VA_ARGS__); \
		r = -EUCLEAN;                             \
		goto out;                                 \
	} while (0)

int rgaps_topic_check(struct rgaps_topic *t, char *why, size_t whylen)
{
	struct rgaps_topic_hdr *h = t->hdr;
	struct rgaps_tlsf *tl = tlsf_of(t);
	uint32_t *want = calloc(h->nblocks, sizeof(*want));
	uint32_t nsubs = 0, npubs = 0;
	int r = 0;

	if (!want)
		return -ENOMEM;
	r = topic_lock(t);
	if (r) {
		free(want);
		return r;
	}
	if (h->head_seq - h->tail_seq > h->queue_depth)
		FAIL("queue holds %llu entries, depth %u",
		     (unsigned long long)(h->head_seq - h->tail_seq), h->queue_depth);
	for (uint64_t q = h->tail_seq; q < h->head_seq; q++) {
		struct rgaps_topic_entry *e = entry_at(t, q);
		uint32_t pending = 0;

		if (e->seq != q || !rgaps_tlsf_is_used(tl, e->block))
			FAIL("entry %llu: bad seq or block", (unsigned long long)q);
		want[e->block]++;
		for (uint32_t i = 0; i < h->max_subscribers; i++) {
			struct rgaps_topic_sub *s = rgaps_topic_sub_at(t, i);

			if (s->state == RGAPS_SLOT_ACTIVE && s->next_seq <= q)
				pending++;
		}
		if (pending != e->pending)
			FAIL("entry %llu: pending %u, counted %u", (unsigned long long)q, e->pending,
			     pending);
	}
	for (uint32_t i = 0; i < h->max_subscribers; i++) {
		struct rgaps_topic_sub *s = rgaps_topic_sub_at(t, i);
		uint32_t n = 0;

		if (s->state != RGAPS_SLOT_ACTIVE)
			continue;
		nsubs++;
		if (s->next_seq < h->tail_seq || s->next_seq > h->head_seq)
			FAIL("subscriber %u: cursor %llu outside [%llu, %llu]", i,
			     (unsigned long long)s->next_seq, (unsigned long long)h->tail_seq,
			     (unsigned long long)h->head_seq);
		for (uint32_t k = 0; k < h->max_holds; k++) {
			if (s->holds[k].block == RGAPS_TLSF_NIL)
				continue;
			if (!rgaps_tlsf_is_used(tl, s->holds[k].block))
				FAIL("subscriber %u hold %u: block not in use", i, k);
			want[s->holds[k].block]++;
			n++;
		}
		if (n != s->nholds)
			FAIL("subscriber %u: nholds %u, counted %u", i, s->nholds, n);
	}
	for (uint32_t i = 0; i < h->max_publishers; i++) {
		struct rgaps_topic_pub *p = rgaps_topic_pub_at(t, i);
		uint32_t n = 0;

		if (p->state != RGAPS_SLOT_ACTIVE)
			continue;
		npubs++;
		for (uint32_t k = 0; k < h->max_loans; k++) {
			if (p->loans[k] == RGAPS_TLSF_NIL)
				continue;
			if (!rgaps_tlsf_is_used(tl, p->loans[k]))
				FAIL("publisher %u loan %u: block not in use", i, k);
			want[p->loans[k]]++;
			n++;
		}
		if (n != p->nloans)
			FAIL("publisher %u: nloans %u, counted %u", i, p->nloans, n);
	}
	if (nsubs != h->nsubs || npubs != h->npubs)
		FAIL("slot counts: subs %u/%u pubs %u/%u", nsubs, h->nsubs, npubs, h->npubs);
	for (uint32_t b = 0; b < h->nblocks; b++) {
		uint32_t have = rgaps_tlsf_is_used(tl, b) ? refs_of(t)[b] : 0;

		if (rgaps_tlsf_is_used(tl, b) && want[b] == 0)
			FAIL("block %u is allocated but nothing references it (leak)", b);
		if (have != want[b])
			FAIL("block %u: refs %u, counted %u", b, have, want[b]);
	}
	r = rgaps_tlsf_check(tl, why, whylen);
out:
	topic_unlock(t);
	free(want);
	return r;
}
