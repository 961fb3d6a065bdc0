/*
 * The publisher's side of a topic (topic.h): its own stream and its own pool.
 *
 * The publisher is the only writer of its region and the only user of its
 * allocator, which lives in private memory; its books (which block each entry
 * names, the loans, the retired blocks still held by someone) are private
 * too. What it reads from subscribers' regions - their cursors in this stream,
 * their holds, whether they sleep - is bounded before use and can only change
 * when this publisher frees its own blocks.
 *
 * Reclaim is a hazard-pointer protocol. An entry is retired (tail moves past
 * it) once every watched subscriber's cursor has passed it and it is out of the
 * history window, or by force under drop_oldest. Its block is freed once no
 * subscriber's hold names it. A subscriber taking a message stores its hold,
 * then reads tail; the publisher stores tail, then reads the holds (all
 * sequentially consistent): either the subscriber sees the message retired and
 * backs off, or the publisher sees the hold and keeps the block.
 *
 * Stream order: a message committed with a fence (the copy into its block was
 * queued on a GPU stream and may still run) keeps its block until the fence
 * has completed, even once nobody holds it, so that a later copy into the same
 * memory on another stream cannot be overtaken by it. Then the fence slot goes
 * back to the caller (cbs.fence_free), which may record it again.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "futex.h"
#include "log.h"
#include "topic.h"

#define ALIVE_EVERY_NS (200ull * 1000 * 1000) /* ask the caller whether rgapsd is alive */
#define WAIT_SLICE_NS (200ll * 1000 * 1000)
#define POLL_SLICE_NS (2ll * 1000 * 1000) /* without futex_waitv (Linux < 5.16) */
#define FENCE_SLICE_NS (200ll * 1000) /* waits while blocks wait only for their fences */
#define BATCH_SLICE_NS (1000ll * 1000) /* waits for a batch of queue entries (queue_room) */

struct sub_ref {
	uint64_t gen; /* 0: slot not watched */
	const struct rgaps_sub_region *r;
	const struct rgaps_sub_cursor *cursor; /* its cursor in this stream */
	const struct rgaps_sub_hold *holds;
	bool overreached; /* its holds broke rgaps__holds_fit(): counted and logged once */
};

struct retired {
	uint64_t seq;
	struct rgaps_extent ext; /* the message's, as its readers see it (rgaps__holds_fit) */
	uint32_t block;
	uint32_t fence; /* slot + 1; 0: none */
};

struct rgaps_pub {
	const struct rgaps_topic_hdr *hdr;
	struct rgaps_topic_limits lim;
	struct rgaps_topic_cbs cbs;
	struct rgaps_pub_region *r;
	struct rgaps_topic_entry *entries;
	uint8_t *attrs;
	uint8_t *pool;
	uint64_t gen;
	uint32_t slot;
	uint64_t head, tail; /* the true values; the region has copies for readers */
	uint32_t accounted;  /* messages the stream accounted for so far, mod 2^32 (topic.h) */
	uint32_t mask;
	uint32_t *blk;	     /* [queue_depth]: the block of each kept entry */
	uint32_t *blk_fence; /* [queue_depth]: its fence slot + 1, 0 for none */
	uint64_t *blk_len;   /* [queue_depth]: its message's size */
	uint32_t nfences;    /* fence slots of the region */
	uint32_t fence_kept; /* retired blocks nobody holds, kept for their fences */
	struct rgaps_tlsf *tlsf;
	uint32_t *loans;     /* [max_loans]: block ids, RGAPS_TLSF_NIL when free */
	uint32_t nloans;
	struct retired *retired; /* retired entries whose block someone may still hold */
	uint32_t nretired, retired_cap;
	struct sub_ref *subs;	 /* [max_subscribers] */
	uint32_t nsubs;
	uint64_t *held;		 /* scratch: seqs held, max_subscribers * max_holds */
	uint32_t *held_slot;	 /* scratch: the hold slot each was read from */
	struct rgaps_extent *ext; /* scratch: [max_holds] */
	uint32_t dir_seen;
	bool reclaim_due; /* the membership changed: the holds of a subscriber gone pin nothing */
	bool announced;	  /* copying is set in our region (rgaps__pub_announce) */
	uint64_t next_alive_ns;
	struct futex_waitv wv[RGAPS_WAITV_MAX];
};

/*
 * Add to one of the region's counters. The publisher is their only writer, so a
 * load and a relaxed store suffice; but the store must be atomic, since rgapsd
 * reads them with atomic loads while the publisher runs, in another thread of
 * its own when the publisher is its replicator (a plain write beside those
 * loads is a data race, which ThreadSanitizer reported).
 */
static inline void count(uint64_t *counter, uint64_t n)
{
	__atomic_store_n(counter, *counter + n, __ATOMIC_RELAXED);
}

static uint32_t tlsf_blocks(const struct rgaps_topic_limits *l)
{
	/*
	 * Live blocks: kept entries, retired blocks still held (at most one per
	 * hold of any subscriber), loans; each free range sits between live ones.
	 */
	uint64_t live = (uint64_t)l->queue_depth + (uint64_t)l->max_subscribers * l->max_holds +
			l->max_loans;

	return (uint32_t)(2 * live + 2);
}

int rgaps__pub_create(const struct rgaps_topic_hdr *hdr, const struct rgaps_topic_limits *lim,
		     struct rgaps_pub_region *mine, uint8_t *pool,
		     const struct rgaps_topic_cbs *cbs, struct rgaps_pub **pub_p)
{
	struct rgaps_pub *p = calloc(1, sizeof(*p));
	uint32_t nblocks = tlsf_blocks(lim);
	int r = -ENOMEM;

	if (!p)
		return -ENOMEM;
	if (mine->slot >= lim->max_publishers || mine->gen == 0) {
		free(p);
		return -EPROTO;
	}
	p->slot = mine->slot;
	p->hdr = hdr;
	p->lim = *lim;
	p->cbs = *cbs;
	p->r = mine;
	p->entries = rgaps__pub_entries(lim, mine);
	p->attrs = rgaps__pub_attrs(lim, mine);
	p->pool = pool;
	p->gen = mine->gen;
	p->mask = lim->queue_depth - 1;
	/* A region handed over by rgapsd starts empty; never trust more than that. */
	p->head = p->tail = 0;
	p->nfences = rgaps__topic_nfences(lim);
	/* Retired blocks: held ones (at most one per hold), and those kept for a fence. */
	p->retired_cap = lim->queue_depth + lim->max_subscribers * lim->max_holds + p->nfences;
	p->blk = malloc(lim->queue_depth * sizeof(*p->blk));
	p->blk_fence = calloc(lim->queue_depth, sizeof(*p->blk_fence));
	p->blk_len = calloc(lim->queue_depth, sizeof(*p->blk_len));
	p->loans = malloc(lim->max_loans * sizeof(*p->loans));
	p->retired = malloc(p->retired_cap * sizeof(*p->retired));
	p->subs = calloc(lim->max_subscribers, sizeof(*p->subs));
	p->held = malloc((size_t)lim->max_subscribers * lim->max_holds * sizeof(*p->held));
	p->held_slot =
		malloc((size_t)lim->max_subscribers * lim->max_holds * sizeof(*p->held_slot));
	p->ext = malloc(lim->max_holds * sizeof(*p->ext));
	p->tlsf = malloc(rgaps__tlsf_state_size(nblocks));
	if (!p->blk || !p->blk_fence || !p->blk_len || !p->loans || !p->retired || !p->subs ||
	    !p->held || !p->held_slot || !p->ext || !p->tlsf)
		goto err;
	r = rgaps__tlsf_init(p->tlsf, lim->pool_size, nblocks, RGAPS_POOL_ALIGN);
	if (r)
		goto err;
	for (uint32_t i = 0; i < lim->queue_depth; i++)
		p->blk[i] = RGAPS_TLSF_NIL;
	for (uint32_t i = 0; i < lim->max_loans; i++)
		p->loans[i] = RGAPS_TLSF_NIL;
	/* One sync before the first operation: members may have come since the membership
	 * this handle was created with was read. */
	p->dir_seen = __atomic_load_n(&hdr->dir_gen, __ATOMIC_ACQUIRE) - 1;
	*pub_p = p;
	return 0;
err:
	rgaps__pub_destroy(p);
	return r;
}

void rgaps__pub_destroy(struct rgaps_pub *p)
{
	if (!p)
		return;
	free(p->tlsf);
	free(p->ext);
	free(p->held_slot);
	free(p->held);
	free(p->subs);
	free(p->retired);
	free(p->loans);
	free(p->blk_len);
	free(p->blk_fence);
	free(p->blk);
	free(p);
}

int rgaps__pub_set_sub(struct rgaps_pub *p, uint32_t slot, uint64_t gen,
		      const struct rgaps_sub_region *r)
{
	struct sub_ref *s;

	if (slot >= p->lim.max_subscribers || gen == 0 || !r)
		return -EINVAL;
	s = &p->subs[slot];
	if (!s->gen)
		p->nsubs++;
	if (s->gen != gen)
		s->overreached = false;
	p->reclaim_due = true;
	s->gen = gen;
	s->r = r;
	s->cursor = &rgaps__sub_cursors(&p->lim, r)[p->slot];
	s->holds = rgaps__sub_holds(&p->lim, r);
	return 0;
}

void rgaps__pub_clear_sub(struct rgaps_pub *p, uint32_t slot)
{
	if (slot >= p->lim.max_subscribers || !p->subs[slot].gen)
		return;
	memset(&p->subs[slot], 0, sizeof(p->subs[slot]));
	p->nsubs--;
	p->reclaim_due = true;
}

/* ---------------------------------------------------------------- reclaim */

/* Where subscriber s stands in this stream (tail if it has not started reading it). */
static uint64_t position(const struct rgaps_pub *p, const struct sub_ref *s)
{
	uint64_t next;

	if (__atomic_load_n(&s->r->stopped, __ATOMIC_ACQUIRE))
		return p->head; /* it takes nothing more (rgaps__sub_stop): only its holds count */
	if (__atomic_load_n(&s->cursor->gen, __ATOMIC_ACQUIRE) != p->gen)
		return p->tail;
	next = __atomic_load_n(&s->cursor->next, __ATOMIC_SEQ_CST);
	return next < p->tail ? p->tail : next > p->head ? p->head : next;
}

static void retire_to(struct rgaps_pub *p, uint64_t upto)
{
	for (uint64_t q = p->tail; q < upto; q++) {
		uint32_t i = (uint32_t)(q & p->mask);

		count(&p->r->c.retired, 1);
		if (p->blk[i] == RGAPS_TLSF_NIL)
			continue; /* a gap-only entry names no block */
		rgaps_require(p->nretired < p->retired_cap);
		p->retired[p->nretired].seq = q;
		p->retired[p->nretired].ext =
			(struct rgaps_extent){ rgaps__tlsf_offset(p->tlsf, p->blk[i]),
					       RGAPS_ALIGN_UP(p->blk_len[i], RGAPS_POOL_ALIGN) };
		p->retired[p->nretired].block = p->blk[i];
		p->retired[p->nretired].fence = p->blk_fence[i];
		p->nretired++;
		p->blk[i] = RGAPS_TLSF_NIL;
		p->blk_fence[i] = 0;
	}
	p->tail = upto;
	/* Before the holds are read (free_unheld): the other half of the take protocol. */
	__atomic_store_n(&p->r->tail, upto, __ATOMIC_SEQ_CST);
}

static bool seq_held(const uint64_t *held, uint32_t n, uint64_t seq)
{
	for (uint32_t i = 0; i < n; i++)
		if (held[i] == seq)
			return true;
	return false;
}

static void publish_pool_stats(struct rgaps_pub *p)
{
	struct rgaps_tlsf_stats st;

	rgaps__tlsf_get_stats(p->tlsf, &st);
	__atomic_store_n(&p->r->c.pool_used_bytes, st.used_bytes, __ATOMIC_RELAXED);
	__atomic_store_n(&p->r->c.pool_used_blocks, st.used_blocks, __ATOMIC_RELAXED);
	__atomic_store_n(&p->r->c.pool_largest_free, st.largest_free, __ATOMIC_RELAXED);
	__atomic_store_n(&p->r->c.nloans, p->nloans, __ATOMIC_RELAXED);
}

/* A retired block's fence still runs: the copy into the block may not be done. */
static bool fence_pending(const struct rgaps_pub *p, uint32_t fence)
{
	return fence && p->cbs.fence_pending && p->cbs.fence_pending(p->cbs.arg, fence - 1);
}

/* Whether the retired messages among seqs[n] (one subscriber's holds) fit rgaps__holds_fit(). */
static bool held_fit(struct rgaps_pub *p, const uint64_t *seqs, uint32_t n)
{
	uint32_t m = 0;

	for (uint32_t j = 0; j < n; j++)
		for (uint32_t r = 0; r < p->nretired; r++)
			if (p->retired[r].seq == seqs[j]) {
				p->ext[m++] = p->retired[r].ext;
				break;
			}
	return rgaps__holds_fit(&p->lim, p->ext, m);
}

/*
 * The holds held[first, end) of subscriber s, read from its hold slots
 * held_slot[], keep blocks out of use beyond what rgaps__holds_fit() allows:
 * look again. Slots that show the same hold twice held it all along in
 * between (a subscriber never holds one message twice), so those form a set
 * it held all at once, at the end of the first look: an honest subscriber's
 * fits. One that does not is a liar's: true, and its holds are ignored. Holds
 * that moved between the looks were a moment's mix of releases and takes.
 */
static bool overreaches(struct rgaps_pub *p, struct sub_ref *s, uint32_t first, uint32_t end)
{
	uint32_t n = first;

	if (end - first < 2 || p->lim.overflow != RGAPS_OVERFLOW_DROP_OLDEST ||
	    held_fit(p, p->held + first, end - first))
		return false;
	for (uint32_t j = first; j < end; j++) {
		const struct rgaps_sub_hold *h = &s->holds[p->held_slot[j]];

		if (__atomic_load_n(&h->gen, __ATOMIC_SEQ_CST) == p->gen &&
		    __atomic_load_n(&h->seq, __ATOMIC_ACQUIRE) == p->held[j])
			p->held[n++] = p->held[j];
	}
	if (held_fit(p, p->held + first, n - first))
		return false;
	if (!s->overreached) {
		s->overreached = true;
		count(&p->r->c.holds_ignored, 1);
		rgaps_warn(
			"topic '%.64s': subscriber slot %ld (attachment %llu) holds %u messages "
			"of publisher stream %llu that leave no room for a message of %llu bytes "
			"in its pool; drop_oldest ignores its holds",
			p->hdr->name, (long)(s - p->subs), (unsigned long long)s->gen, n - first,
			(unsigned long long)p->gen, (unsigned long long)p->lim.max_message_size);
	}
	return true;
}

/* Free every retired block that no hold names (and whose fence completed). Returns how many. */
static uint32_t free_unheld(struct rgaps_pub *p)
{
	uint32_t nheld = 0, freed = 0, keep = 0;

	if (!p->nretired) {
		p->fence_kept = 0;
		return 0;
	}
	for (uint32_t i = 0; i < p->lim.max_subscribers; i++) {
		struct sub_ref *s = &p->subs[i];
		uint32_t first = nheld;

		if (!s->gen || !__atomic_load_n(&s->r->nholds, __ATOMIC_SEQ_CST))
			continue;
		for (uint32_t k = 0; k < p->lim.max_holds; k++) {
			if (__atomic_load_n(&s->holds[k].gen, __ATOMIC_SEQ_CST) != p->gen)
				continue;
			p->held_slot[nheld] = k;
			p->held[nheld++] = __atomic_load_n(&s->holds[k].seq, __ATOMIC_ACQUIRE);
		}
		if (overreaches(p, s, first, nheld))
			nheld = first;
	}
	p->fence_kept = 0;
	for (uint32_t i = 0; i < p->nretired; i++) {
		if (seq_held(p->held, nheld, p->retired[i].seq)) {
			p->retired[keep++] = p->retired[i];
			continue;
		}
		if (fence_pending(p, p->retired[i].fence)) {
			p->fence_kept++;
			p->retired[keep++] = p->retired[i];
			continue;
		}
		rgaps__tlsf_free(p->tlsf, p->retired[i].block);
		if (p->retired[i].fence && p->cbs.fence_free)
			p->cbs.fence_free(p->cbs.arg, p->retired[i].fence - 1);
		freed++;
	}
	p->nretired = keep;
	if (freed)
		publish_pool_stats(p);
	return freed;
}

uint32_t rgaps__pub_reclaim(struct rgaps_pub *p)
{
	uint64_t upto = p->head - RGAPS_MIN((uint64_t)p->lim.history, p->head - p->tail);

	p->reclaim_due = false;
	for (uint32_t i = 0; i < p->lim.max_subscribers && upto > p->tail; i++) {
		if (p->subs[i].gen) {
			uint64_t pos = position(p, &p->subs[i]);

			upto = RGAPS_MIN(upto, pos);
		}
	}
	if (upto > p->tail)
		retire_to(p, upto);
	return free_unheld(p);
}

/*
 * Reclaim after a publish only where it costs nothing or is owed: with no
 * subscriber (nothing to read: a message nobody will take goes at once), and
 * after a membership change (what a subscriber that went away held is free
 * at our next operation). Otherwise queue_room() and the loan do it, when
 * the queue or the pool is full.
 */
static void reclaim_if_due(struct rgaps_pub *p)
{
	if (p->reclaim_due || !p->nsubs)
		rgaps__pub_reclaim(p);
}

/* drop_oldest: force the oldest entry out, whoever has not read it yet. */
static void force_retire_oldest(struct rgaps_pub *p)
{
	bool lagging = false;

	for (uint32_t i = 0; i < p->lim.max_subscribers && !lagging; i++)
		lagging = p->subs[i].gen && position(p, &p->subs[i]) <= p->tail;
	if (lagging)
		count(&p->r->c.dropped, 1);
	retire_to(p, p->tail + 1);
	free_unheld(p);
}

/* ---------------------------------------------------------------- membership, liveness, waits */

static int check_world(struct rgaps_pub *p)
{
	uint32_t seen = __atomic_load_n(&p->hdr->dir_gen, __ATOMIC_ACQUIRE);
	uint64_t now;
	int r;

	if (__atomic_load_n(&p->hdr->closed, __ATOMIC_ACQUIRE))
		return -ENOTCONN;
	if (seen != p->dir_seen && p->cbs.sync) {
		r = p->cbs.sync(p->cbs.arg);
		if (r)
			return r;
		p->dir_seen = seen;
	}
	if (!p->cbs.alive)
		return 0;
	now = rgaps_now_ns(CLOCK_MONOTONIC);
	if (now >= p->next_alive_ns) {
		p->next_alive_ns = now + ALIVE_EVERY_NS;
		if (!p->cbs.alive(p->cbs.arg))
			return -ENOTCONN;
	}
	return 0;
}

static uint64_t deadline_of(int timeout_ms)
{
	if (timeout_ms < 0)
		return UINT64_MAX;
	return rgaps_now_ns(CLOCK_MONOTONIC) + (uint64_t)timeout_ms * 1000000ull;
}

typedef bool (*room_fn)(struct rgaps_pub *p, void *arg);

#define WAIT_ANYONE UINT32_MAX /* space_waiting: any subscriber's progress may help */

/* Whether subscriber i holds a message this publisher has retired (whose block it waits for). */
static bool holds_retired(const struct rgaps_pub *p, uint32_t i)
{
	const struct sub_ref *s = &p->subs[i];

	if (!p->nretired || !__atomic_load_n(&s->r->nholds, __ATOMIC_SEQ_CST))
		return false;
	for (uint32_t k = 0; k < p->lim.max_holds; k++) {
		uint64_t seq;

		if (__atomic_load_n(&s->holds[k].gen, __ATOMIC_SEQ_CST) != p->gen)
			continue;
		seq = __atomic_load_n(&s->holds[k].seq, __ATOMIC_ACQUIRE);
		for (uint32_t r = 0; r < p->nretired; r++)
			if (p->retired[r].seq == seq)
				return true;
	}
	return false;
}

/* Whether subscriber i stands in the way: short of target, or (want_block) holding a retired
 * block. */
static bool blocks(const struct rgaps_pub *p, uint32_t i, uint64_t target, bool want_block)
{
	return p->subs[i].gen &&
	       (position(p, &p->subs[i]) < target || (want_block && holds_retired(p, i)));
}

/* The subscriber furthest behind target, else (want_block) one holding a retired block, else
 * max_subscribers: nobody stands in the way. */
static uint32_t slowest_blocker(const struct rgaps_pub *p, uint64_t target, bool want_block)
{
	uint32_t who = p->lim.max_subscribers;
	uint64_t least = target;

	for (uint32_t i = 0; i < p->lim.max_subscribers; i++) {
		uint64_t pos;

		if (!p->subs[i].gen)
			continue;
		pos = position(p, &p->subs[i]);
		if (pos < least) {
			least = pos;
			who = i;
		}
	}
	for (uint32_t i = 0; i < p->lim.max_subscribers && who == p->lim.max_subscribers; i++)
		if (want_block && blocks(p, i, target, true))
			who = i;
	return who;
}

/*
 * Sleep until a subscriber that stands in the way reaches target (its take
 * brings its cursor there) or releases a retired message, the membership
 * changes or the topic closes, then let the caller look again. 0 (look
 * again), 1 (the slice passed with no wake), -ETIMEDOUT (deadline), -EINTR.
 *
 * The wait is the gating of the LMAX Disruptor, with the sleep of a blocking
 * wait strategy: room appears only when the slowest subscriber moves, so we
 * wait for that one only, and tell it so (space_waiting = its slot + 1, and
 * space_target): the others do not wake us, and it wakes us once, when it has
 * taken up to target (a batch of entries, chosen by the caller), not at
 * every step. The flag is raised before the word is read and room looked at
 * again, and a subscriber stores its cursor before it reads the flag, so no
 * wake is lost; if the one we chose moved meanwhile we choose again, and
 * after a few rounds wait for anyone (futex_waitv over every subscriber).
 */
static int wait_progress(struct rgaps_pub *p, room_fn room, void *arg, bool want_block,
			 uint64_t target, int64_t slice, uint64_t deadline)
{
	uint64_t now = rgaps_now_ns(CLOCK_MONOTONIC);
	uint32_t n = 0, dir, who = WAIT_ANYONE;
	int r = 0;

	if (now >= deadline)
		return -ETIMEDOUT;
	if (p->fence_kept)
		slice = RGAPS_MIN(slice, FENCE_SLICE_NS); /* no subscriber wakes us for a copy */
	if (deadline - now < (uint64_t)slice)
		slice = (int64_t)(deadline - now);
	__atomic_store_n(&p->r->space_target, target, __ATOMIC_SEQ_CST);
	for (int round = 0; round < 4 && who == WAIT_ANYONE; round++) {
		uint32_t i = slowest_blocker(p, target, want_block);

		if (i == p->lim.max_subscribers)
			break;
		__atomic_store_n(&p->r->space_waiting, i + 1, __ATOMIC_SEQ_CST);
		rgaps_waitv_set(&p->wv[0], &p->subs[i].r->progress,
				__atomic_load_n(&p->subs[i].r->progress, __ATOMIC_SEQ_CST));
		if (room(p, arg))
			goto out;
		if (blocks(p, i, target, want_block))
			who = i; /* still in the way after we raised the flag: wait for it */
	}
	if (who == WAIT_ANYONE) {
		__atomic_store_n(&p->r->space_waiting, WAIT_ANYONE, __ATOMIC_SEQ_CST);
		for (uint32_t i = 0; i < p->lim.max_subscribers && n < RGAPS_WAITV_MAX - 1; i++)
			if (p->subs[i].gen)
				rgaps_waitv_set(&p->wv[n++], &p->subs[i].r->progress,
						__atomic_load_n(&p->subs[i].r->progress,
								__ATOMIC_SEQ_CST));
	} else {
		n = 1;
	}
	dir = __atomic_load_n(&p->hdr->dir_gen, __ATOMIC_SEQ_CST);
	rgaps_waitv_set(&p->wv[n++], &p->hdr->dir_gen, dir);
	if ((who == WAIT_ANYONE && room(p, arg)) || dir != p->dir_seen)
		goto out;
	if (n == 2) {
		/* One word (rgapsd wakes it on any membership change or close). */
		r = rgaps_futex_wait((const uint32_t *)(uintptr_t)p->wv[0].uaddr,
				     (uint32_t)p->wv[0].val, slice);
	} else {
		r = rgaps_futex_waitv(p->wv, n, slice);
		if (r == -ENOSYS)
			r = rgaps_futex_wait(&p->hdr->dir_gen, dir, RGAPS_MIN(slice, POLL_SLICE_NS));
	}
out:
	__atomic_store_n(&p->r->space_waiting, 0, __ATOMIC_RELAXED);
	return r == -EINTR ? -EINTR : r == -ETIMEDOUT ? 1 : 0;
}

/*
 * One wait of the overflow policy "block": -EAGAIN when the caller may not
 * wait, -ETIMEDOUT at the deadline (both counted), -EINTR; else 0 to look
 * again, with *sliced set when the slice passed without a wake.
 */
static int block_once(struct rgaps_pub *p, room_fn room, void *arg, bool want_block,
		      uint64_t target, int64_t slice, int timeout_ms, uint64_t deadline,
		      bool *waited, bool *sliced)
{
	int r;

	if (timeout_ms == 0)
		return -EAGAIN;
	if (!*waited) {
		count(&p->r->c.full_waits, 1);
		*waited = true;
	}
	r = wait_progress(p, room, arg, want_block, target, slice, deadline);
	if (r == -ETIMEDOUT)
		count(&p->r->c.timeouts, 1);
	*sliced = r == 1;
	return r == 1 ? 0 : r;
}

/* ---------------------------------------------------------------- loans */

static bool can_alloc(struct rgaps_pub *p, void *arg)
{
	uint32_t block;
	uint64_t size = *(uint64_t *)arg;

	rgaps__pub_reclaim(p);
	if (rgaps__tlsf_alloc(p->tlsf, size, &block))
		return false;
	rgaps__tlsf_free(p->tlsf, block); /* the caller allocates again, for real */
	return true;
}

int rgaps__pub_loan(struct rgaps_pub *p, uint64_t size, int timeout_ms, uint32_t *token_p,
		   uint64_t *off_p)
{
	uint64_t deadline = deadline_of(timeout_ms);
	bool waited = false, sliced;
	int r;

	if (size == 0)
		return -EINVAL;
	if (size > p->lim.max_message_size)
		return -EMSGSIZE;
	if (p->nloans >= p->lim.max_loans)
		return -ENOBUFS;
	for (;;) {
		uint32_t block, k;

		r = check_world(p);
		if (r)
			return r;
		/* Blocks of retired messages go back to the pool here, when it looks full, and
		 * when the queue is (queue_room): once per batch, not at every publish. */
		r = rgaps__tlsf_alloc(p->tlsf, size, &block);
		if (r) {
			rgaps__pub_reclaim(p);
			r = rgaps__tlsf_alloc(p->tlsf, size, &block);
		}
		if (r == 0) {
			for (k = 0; p->loans[k] != RGAPS_TLSF_NIL; k++)
				;
			p->loans[k] = block;
			p->nloans++;
			count(&p->r->c.loans, 1);
			publish_pool_stats(p);
			*token_p = k;
			*off_p = rgaps__tlsf_offset(p->tlsf, block);
			return 0;
		}
		if (p->lim.overflow == RGAPS_OVERFLOW_DROP_OLDEST && p->tail < p->head) {
			force_retire_oldest(p);
			continue;
		}
		r = block_once(p, can_alloc, &size, true, p->tail + 1, WAIT_SLICE_NS, timeout_ms,
			       deadline, &waited, &sliced);
		if (r)
			return r;
	}
}

uint64_t rgaps__pub_loan_size(const struct rgaps_pub *p, uint32_t token)
{
	if (token >= p->lim.max_loans || p->loans[token] == RGAPS_TLSF_NIL)
		return 0;
	return rgaps__tlsf_size(p->tlsf, p->loans[token]);
}

/* The announced message is published or withdrawn: its subscribers may sleep again. */
static void announce_end(struct rgaps_pub *p)
{
	if (!p->announced)
		return;
	p->announced = false;
	__atomic_store_n(&p->r->copying, 0, __ATOMIC_RELEASE);
}

void rgaps__pub_announce(struct rgaps_pub *p)
{
	bool sleepers = false;

	if (!rgaps__topic_spin_pays(p->hdr))
		return;
	p->announced = true;
	/* A hint, not a wake-up protocol: a subscriber that raises its sleeping flag just
	 * after our look misses this early wake, and the commit wakes it as usual. */
	__atomic_store_n(&p->r->copying, 1, __ATOMIC_SEQ_CST);
	for (uint32_t k = 0; k < p->lim.max_subscribers && !sleepers; k++)
		sleepers = p->subs[k].gen &&
			   __atomic_load_n(&p->subs[k].r->sleeping, __ATOMIC_SEQ_CST);
	if (sleepers)
		rgaps_futex_wake_all(&p->r->doorbell);
}

static void drop_loan(struct rgaps_pub *p, uint32_t token)
{
	announce_end(p);
	rgaps__tlsf_free(p->tlsf, p->loans[token]);
	p->loans[token] = RGAPS_TLSF_NIL;
	p->nloans--;
	publish_pool_stats(p);
}

int rgaps__pub_cancel(struct rgaps_pub *p, uint32_t token)
{
	if (token >= p->lim.max_loans || p->loans[token] == RGAPS_TLSF_NIL)
		return -EINVAL;
	drop_loan(p, token);
	count(&p->r->c.cancelled, 1);
	return 0;
}

/* ---------------------------------------------------------------- publishing */

/*
 * Room for one more entry. Like the Disruptor's producer, which reads its
 * consumers' sequences only when it would wrap past the lowest it saw last,
 * the publisher looks at its subscribers' cursors (reclaim) only when its
 * queue is full: then it retires in one pass everything every subscriber
 * has passed, instead of reading N subscribers' lines at every publish.
 */
static bool queue_has_room(struct rgaps_pub *p, void *arg)
{
	if (p->head - p->tail < p->lim.queue_depth)
		return true;
	rgaps__pub_reclaim(p);
	return p->head - p->tail < p->lim.queue_depth;
}

/*
 * Wait for a free queue entry per the overflow policy. Under "block" the
 * publisher sleeps until the slowest subscriber has freed a quarter of the
 * queue, not one entry: one wake per batch. A subscriber that stops inside
 * a batch (its application stops taking) delays us by one short slice at
 * most; after that we wait for one entry.
 */
static int queue_room(struct rgaps_pub *p, int timeout_ms)
{
	uint64_t deadline = deadline_of(timeout_ms);
	uint64_t batch = RGAPS_MAX(p->lim.queue_depth / 4, 1u);
	bool waited = false, sliced = false;
	int r;

	for (;;) {
		if (queue_has_room(p, NULL))
			return 0;
		if (p->lim.overflow == RGAPS_OVERFLOW_DROP_OLDEST) {
			force_retire_oldest(p);
			continue;
		}
		if (sliced)
			batch = 1;
		r = block_once(p, queue_has_room, NULL, false, RGAPS_MIN(p->tail + batch, p->head),
			       batch > 1 ? BATCH_SLICE_NS : WAIT_SLICE_NS, timeout_ms, deadline,
			       &waited, &sliced);
		if (r)
			return r;
		r = check_world(p);
		if (r)
			return r;
	}
}

/* Write entry seq and make it visible: the seqlock bracket of topic.h, then head. */
static void publish_entry(struct rgaps_pub *p, uint32_t block, uint64_t size,
			  const struct rgaps_pub_commit *c)
{
	uint64_t seq = p->head;
	uint32_t i = (uint32_t)(seq & p->mask);
	struct rgaps_topic_entry *e = &p->entries[i];
	bool wake;

	/* Release stores throughout: a reader that sees ~0 (or the new seq) also sees the tail
	 * that retired the old entry, and no field store moves before the ~0 (a seqlock writer,
	 * written so that ThreadSanitizer understands it). */
	__atomic_store_n(&e->seq, UINT64_MAX, __ATOMIC_RELEASE);
	__atomic_store_n(&e->off, block == RGAPS_TLSF_NIL ? 0 : rgaps__tlsf_offset(p->tlsf, block),
			 __ATOMIC_RELEASE);
	__atomic_store_n(&e->size, size, __ATOMIC_RELEASE);
	__atomic_store_n(&e->ts_ns, c->ts_ns, __ATOMIC_RELEASE);
	__atomic_store_n(&e->origin_stream, c->origin_stream ? c->origin_stream : p->gen,
			 __ATOMIC_RELEASE);
	__atomic_store_n(&e->origin_seq, c->origin_stream ? c->origin_seq : seq, __ATOMIC_RELEASE);
	p->accounted += c->gap + (size ? 1 : 0); /* mod 2^32: readers take differences */
	__atomic_store_n(&e->gap, c->gap, __ATOMIC_RELEASE);
	__atomic_store_n(&e->accounted, p->accounted, __ATOMIC_RELEASE);
	__atomic_store_n(&e->flags, (uint16_t)(c->flags | (c->has_fence ? RGAPS_ENTRY_FENCE : 0)),
			 __ATOMIC_RELEASE);
	__atomic_store_n(&e->attr_len, (uint16_t)c->attr_len, __ATOMIC_RELEASE);
	__atomic_store_n(&e->fence, c->has_fence ? c->fence : 0, __ATOMIC_RELEASE);
	if (c->attr_len)
		rgaps__attrs_store(p->attrs + (uint64_t)i * RGAPS_ATTR_MAX, c->attrs, c->attr_len);
	__atomic_store_n(&e->seq, seq, __ATOMIC_RELEASE);
	p->blk[i] = block;
	p->blk_fence[i] = c->has_fence ? c->fence + 1 : 0;
	p->blk_len[i] = size;

	p->head = seq + 1;
	__atomic_store_n(&p->r->accounted, p->accounted, __ATOMIC_RELEASE);
	__atomic_store_n(&p->r->head, p->head, __ATOMIC_SEQ_CST);
	announce_end(p);
	__atomic_fetch_add(&p->r->doorbell, 1, __ATOMIC_SEQ_CST);
	/* One FUTEX_WAKE for every subscriber asleep on the doorbell, if any is. A
	 * subscriber that attached since our last look may sleep unseen: wake then too. */
	wake = __atomic_load_n(&p->hdr->dir_gen, __ATOMIC_SEQ_CST) != p->dir_seen;
	for (uint32_t k = 0; k < p->lim.max_subscribers && !wake; k++)
		wake = p->subs[k].gen && __atomic_load_n(&p->subs[k].r->sleeping, __ATOMIC_SEQ_CST);
	if (wake)
		rgaps_futex_wake_all(&p->r->doorbell);
	count(&p->r->c.published, 1);
	count(&p->r->c.published_bytes, size);
	if (c->has_fence)
		count(&p->r->c.fenced, 1);
	if (!p->nsubs)
		count(&p->r->c.unrouted, 1);
}

int rgaps__pub_commit(struct rgaps_pub *p, uint32_t token, uint64_t size,
		     const struct rgaps_pub_commit *c, int timeout_ms, bool keep_on_again,
		     uint64_t *seq_p)
{
	uint32_t block;
	uint64_t seq;
	int r;

	if (token >= p->lim.max_loans || p->loans[token] == RGAPS_TLSF_NIL)
		return -EINVAL;
	block = p->loans[token];
	if (size == 0 || size > rgaps__tlsf_size(p->tlsf, block) || c->attr_len > RGAPS_ATTR_MAX ||
	    (c->attr_len && !c->attrs) || (c->flags & (RGAPS_ENTRY_GAP_ONLY | RGAPS_ENTRY_FENCE)) ||
	    (c->has_fence && c->fence >= p->nfences)) {
		drop_loan(p, token);
		return -EINVAL;
	}
	r = check_world(p);
	if (!r)
		r = queue_room(p, timeout_ms);
	if (r == -EAGAIN && keep_on_again)
		return r;
	if (r) {
		drop_loan(p, token);
		return r;
	}
	seq = p->head;
	p->loans[token] = RGAPS_TLSF_NIL; /* the loan's block becomes the entry's */
	p->nloans--;
	publish_entry(p, block, size, c);
	reclaim_if_due(p);
	publish_pool_stats(p);
	if (seq_p)
		*seq_p = seq;
	return 0;
}

int rgaps__pub_gap(struct rgaps_pub *p, uint32_t gap, uint64_t ts_ns)
{
	return rgaps__pub_gap_flags(p, gap, ts_ns, 0);
}

int rgaps__pub_gap_flags(struct rgaps_pub *p, uint32_t gap, uint64_t ts_ns, uint32_t flags)
{
	struct rgaps_pub_commit c = { .ts_ns = ts_ns,
				      .flags = RGAPS_ENTRY_GAP_ONLY | flags,
				      .gap = gap };
	int r;

	if (gap == 0 || (flags & ~RGAPS_ENTRY_REMOTE))
		return -EINVAL;
	r = check_world(p);
	if (!r)
		r = queue_room(p, 0);
	if (r)
		return r;
	publish_entry(p, RGAPS_TLSF_NIL, 0, &c);
	reclaim_if_due(p);
	return 0;
}

/* ---------------------------------------------------------------- state and checks */

void rgaps__pub_get_state(const struct rgaps_pub *p, struct rgaps_pub_state *st)
{
	st->head = p->head;
	st->tail = p->tail;
	st->nsubs = p->nsubs;
	st->nloans = p->nloans;
	st->nretired = p->nretired;
	rgaps__tlsf_get_stats(p->tlsf, &st->pool);
}

#define FAIL(...)                                         \
	do {                                              \
		if (why)                                  \
			snprintf(why, whylen, __VA_ARGS__); \
		r = -EUCLEAN;                             \
		goto out;                                 \
	} while (0)

int rgaps__pub_check(struct rgaps_pub *p, char *why, size_t whylen)
{
	uint32_t nblocks = p->tlsf->nblocks;
	uint8_t *seen = calloc(nblocks, 1);
	uint32_t nloans = 0;
	int r = 0;

	if (!seen)
		return -ENOMEM;
	if (p->tail > p->head || p->head - p->tail > p->lim.queue_depth)
		FAIL("stream [%llu, %llu) over depth %u", (unsigned long long)p->tail,
		     (unsigned long long)p->head, p->lim.queue_depth);
	if (__atomic_load_n(&p->r->head, __ATOMIC_RELAXED) != p->head ||
	    __atomic_load_n(&p->r->tail, __ATOMIC_RELAXED) != p->tail)
		FAIL("region head/tail differ from the publisher's own");
#define MARK(b, what, ...)                                                         \
	do {                                                                       \
		if ((b) != RGAPS_TLSF_NIL) {                                       \
			if (!rgaps__tlsf_is_used(p->tlsf, (b)))                     \
				FAIL(what ": block %u not in use", __VA_ARGS__, (b)); \
			if (seen[(b)]++)                                           \
				FAIL(what ": block %u named twice", __VA_ARGS__, (b)); \
		}                                                                  \
	} while (0)
	for (uint64_t q = p->tail; q < p->head; q++) {
		uint32_t b = p->blk[q & p->mask];
		const struct rgaps_topic_entry *e = &p->entries[q & p->mask];

		if (e->seq != q)
			FAIL("entry %llu holds seq %llu", (unsigned long long)q,
			     (unsigned long long)e->seq);
		if (b == RGAPS_TLSF_NIL && !(e->flags & RGAPS_ENTRY_GAP_ONLY))
			FAIL("entry %llu has no block", (unsigned long long)q);
		MARK(b, "entry %llu", (unsigned long long)q);
	}
	for (uint32_t i = 0; i < p->nretired; i++)
		MARK(p->retired[i].block, "retired seq %llu", (unsigned long long)p->retired[i].seq);
	for (uint32_t k = 0; k < p->lim.max_loans; k++) {
		if (p->loans[k] != RGAPS_TLSF_NIL)
			nloans++;
		MARK(p->loans[k], "loan %u", k);
	}
#undef MARK
	if (nloans != p->nloans)
		FAIL("nloans %u, counted %u", p->nloans, nloans);
	for (uint32_t b = 0; b < nblocks; b++)
		if (rgaps__tlsf_is_used(p->tlsf, b) && !seen[b])
			FAIL("block %u is allocated but nothing names it (leak)", b);
	r = rgaps__tlsf_check(p->tlsf, why, whylen);
out:
	free(seen);
	return r;
}
