/*
 * The subscriber's side of a topic (topic.h): lock-free take and release over
 * the publishers' streams, which this process maps read-only.
 *
 * A subscriber writes only its own region: one cursor per stream, its holds,
 * its progress and sleeping words. Every entry it reads from a publisher's
 * region is checked (rgaps__entry_read): a stream that shows an impossible
 * value is poisoned here - skipped from then on, counted, logged once - and
 * its bytes are never returned. A message is taken by the hazard-pointer
 * protocol of topic_pub.c: store the hold, then check that the stream's tail
 * has not passed the message; only then may the block be read.
 *
 * Streams are taken from round robin, each in its own order; a stream's
 * sequence numbers have no holes except the messages this subscriber missed,
 * which it reports as `gap` with the next message of that stream (or, when a
 * stream goes away with messages untaken, as a gap-only message).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fence.h"
#include "futex.h"
#include "log.h"
#include "topic.h"

#define ALIVE_EVERY_NS (200ull * 1000 * 1000)
#define WAIT_SLICE_NS (200ll * 1000 * 1000)
#define POLL_SLICE_NS (2ll * 1000 * 1000)
#define PARKED_SLICE_MIN_NS (50ll * 1000)	 /* the first sleeps while a copy runs long, */
#define PARKED_SLICE_MAX_NS (50ll * 1000 * 1000) /* growing with its wait (1/8) to this */
#define COPY_SPIN_NS (200ull * 1000) /* at most, for an announced message (spin_for_copy) */

struct stream {
	uint64_t gen; /* 0: no stream in this slot */
	const struct rgaps_pub_region *r;
	const uint8_t *pool;
	uint64_t limit;	      /* UINT64_MAX, or the final head of a departed publisher */
	uint64_t pending_gap; /* lost, to report with the next message of this stream */
	uint32_t last_acc;    /* `accounted` of the last entry taken (or 0 before the stream's
				 first, when we read it from its start), if have_acc */
	uint32_t nheld;	      /* messages of this stream we hold */
	bool have_acc;
	bool poisoned;
	bool parked; /* its message taken last waits for its fence: passed over meanwhile */
};

struct hold {
	bool used;
	uint32_t slot;
	uint64_t gen, seq;
	uint64_t off, size; /* where it lies in its stream's pool (rgaps__holds_fit) */
	const struct rgaps_pub_region *r; /* to wake its publisher on release */
	uint32_t attr_len;
	uint8_t attrs[RGAPS_ATTR_MAX];
};

/* A held message whose copy was not complete when it was taken (cbs.fence_done). */
struct parked {
	bool used;
	uint64_t since_ns;
	struct rgaps_sub_msg m;
};

struct rgaps_sub {
	const struct rgaps_topic_hdr *hdr;
	struct rgaps_topic_limits lim;
	struct rgaps_topic_cbs cbs;
	struct rgaps_sub_region *r;
	uint32_t slot; /* ours, as rgapsd wrote it when it made the region */
	struct rgaps_sub_cursor *cursors;
	struct rgaps_sub_hold *holds;
	struct stream *streams; /* [max_publishers] */
	uint32_t nstreams;
	struct hold *hp; /* [max_holds], private shadow of the holds */
	struct rgaps_extent *ext; /* [max_holds + 1], scratch of room_for() */
	struct parked *parked;	  /* [max_holds], by hold: messages waiting for their fences */
	uint32_t nparked; /* atomic (rgaps__sub_fence_slice() is asked from other threads) */
	uint64_t parked_last_ns;  /* atomic: when the youngest of them was parked */
	uint32_t nholds;
	uint32_t rr;	 /* next stream to look at first */
	uint32_t dir_seen;
	uint64_t next_alive_ns;
	uint64_t lost;	      /* untaken messages of streams that went away: one gap-only message */
	uint64_t lost_stream; /* the last such stream */
	struct futex_waitv wv[RGAPS_WAITV_MAX];
};

int rgaps__sub_create(const struct rgaps_topic_hdr *hdr, const struct rgaps_topic_limits *lim,
		     struct rgaps_sub_region *mine, const struct rgaps_topic_cbs *cbs,
		     struct rgaps_sub **sub_p)
{
	struct rgaps_sub *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->hdr = hdr;
	s->lim = *lim;
	s->cbs = *cbs;
	s->r = mine;
	s->slot = mine->slot;
	s->cursors = rgaps__sub_cursors(lim, mine);
	s->holds = rgaps__sub_holds(lim, mine);
	s->streams = calloc(lim->max_publishers, sizeof(*s->streams));
	s->hp = calloc(lim->max_holds, sizeof(*s->hp));
	s->ext = calloc(lim->max_holds + 1, sizeof(*s->ext));
	s->parked = calloc(lim->max_holds, sizeof(*s->parked));
	if (!s->streams || !s->hp || !s->ext || !s->parked) {
		rgaps__sub_destroy(s);
		return -ENOMEM;
	}
	/* One sync before the first operation: members may have come since the membership
	 * this handle was created with was read. */
	s->dir_seen = __atomic_load_n(&hdr->dir_gen, __ATOMIC_ACQUIRE) - 1;
	*sub_p = s;
	return 0;
}

void rgaps__sub_destroy(struct rgaps_sub *s)
{
	if (!s)
		return;
	free(s->parked);
	free(s->ext);
	free(s->hp);
	free(s->streams);
	free(s);
}

struct rgaps_sub_region *rgaps__sub_region(const struct rgaps_sub *s)
{
	return s->r;
}

int rgaps__sub_set_stream(struct rgaps_sub *s, uint32_t slot, uint64_t gen,
			 const struct rgaps_pub_region *r, const uint8_t *pool, uint64_t limit)
{
	struct stream *st;

	if (slot >= s->lim.max_publishers || gen == 0 || !r)
		return -EINVAL;
	st = &s->streams[slot];
	if (st->gen && st->gen != gen)
		return -EBUSY; /* clear the old stream first */
	if (!st->gen) {
		s->nstreams++;
		memset(st, 0, sizeof(*st));
	}
	st->gen = gen;
	st->r = r;
	st->pool = pool;
	st->limit = limit;
	return 0;
}

bool rgaps__sub_stream_held(const struct rgaps_sub *s, uint64_t gen)
{
	for (uint32_t k = 0; k < s->lim.max_holds; k++)
		if (s->hp[k].used && s->hp[k].gen == gen)
			return true;
	return false;
}

bool rgaps__sub_stream_live(const struct rgaps_sub *s, uint32_t slot, uint64_t gen)
{
	return slot < s->lim.max_publishers && s->streams[slot].gen == gen &&
	       s->streams[slot].limit == UINT64_MAX;
}

/*
 * A taken message of stream (slot, gen), which carried gap messages lost
 * before it, is lost here after all: its stream's next message reports both
 * (a gap-only message, if the stream is gone). Only the message itself is a
 * new drop: its gap was counted when it was found.
 */
static void lost_after_take(struct rgaps_sub *s, uint32_t slot, uint64_t gen, uint64_t gap)
{
	__atomic_fetch_add(&s->r->c.drops, 1, __ATOMIC_RELAXED);
	if (slot < s->lim.max_publishers && s->streams[slot].gen == gen) {
		s->streams[slot].pending_gap += 1 + gap;
	} else { /* the stream is gone: a gap-only message tells */
		__atomic_fetch_add(&s->lost, 1 + gap, __ATOMIC_RELAXED);
		s->lost_stream = gen;
	}
}

/* The cursor of stream slot, set up for its gen (a stream this subscriber starts reading). */
static struct rgaps_sub_cursor *cursor_of(struct rgaps_sub *s, uint32_t slot, uint64_t gen)
{
	struct rgaps_sub_cursor *c = &s->cursors[slot];

	if (__atomic_load_n(&c->gen, __ATOMIC_RELAXED) != gen)
		/* A stream that began after this subscriber attached: from its first message. */
		rgaps__sub_region_set_cursor(s->r, &s->lim, slot, gen, 0, 0);
	return c;
}

/* The messages that entries [next, head) of a departing stream stood for. */
static uint64_t untaken_of(const struct stream *st, const struct rgaps_topic_limits *lim,
			   uint64_t next, uint64_t head)
{
	if (head <= next)
		return 0;
	if (st->have_acc) /* the entries and what they carried: the region has the count */
		return (uint32_t)(__atomic_load_n(&st->r->accounted, __ATOMIC_ACQUIRE) -
				  st->last_acc);
	return RGAPS_MIN(head - next, (uint64_t)lim->queue_depth);
}

bool rgaps__sub_clear_stream(struct rgaps_sub *s, uint32_t slot)
{
	struct stream *st;
	uint64_t gen;
	bool held;

	if (slot >= s->lim.max_publishers || !s->streams[slot].gen)
		return true;
	st = &s->streams[slot];
	gen = st->gen;
	if (!__atomic_load_n(&st->poisoned, __ATOMIC_RELAXED)) {
		struct rgaps_sub_cursor *c = cursor_of(s, slot, gen);
		uint64_t head = __atomic_load_n(&st->r->head, __ATOMIC_ACQUIRE);
		uint64_t next = __atomic_load_n(&c->next, __ATOMIC_RELAXED);
		uint64_t untaken;

		head = RGAPS_MIN(head, st->limit);
		untaken = untaken_of(st, &s->lim, next, head) + st->pending_gap;
		if (untaken) {
			__atomic_fetch_add(&s->lost, untaken, __ATOMIC_RELAXED);
			s->lost_stream = gen;
			__atomic_fetch_add(&s->r->c.drops, untaken, __ATOMIC_RELAXED);
		}
	}
	held = rgaps__sub_stream_held(s, gen);
	memset(st, 0, sizeof(*st));
	s->nstreams--;
	return !held;
}

/* ---------------------------------------------------------------- liveness and membership */

static int check_world(struct rgaps_sub *s)
{
	uint32_t seen = __atomic_load_n(&s->hdr->dir_gen, __ATOMIC_ACQUIRE);
	uint64_t now;
	int r;

	if (__atomic_load_n(&s->hdr->closed, __ATOMIC_ACQUIRE))
		return -ENOTCONN;
	if (seen != __atomic_load_n(&s->dir_seen, __ATOMIC_RELAXED) && s->cbs.sync) {
		r = s->cbs.sync(s->cbs.arg);
		if (r)
			return r;
		__atomic_store_n(&s->dir_seen, seen, __ATOMIC_RELAXED);
	}
	if (!s->cbs.alive)
		return 0;
	now = rgaps_now_ns(CLOCK_MONOTONIC);
	if (now >= s->next_alive_ns) {
		s->next_alive_ns = now + ALIVE_EVERY_NS;
		if (!s->cbs.alive(s->cbs.arg))
			return -ENOTCONN;
	}
	return 0;
}

static void poison(struct rgaps_sub *s, struct stream *st, uint32_t slot, const char *why)
{
	__atomic_store_n(&st->poisoned, true, __ATOMIC_RELAXED);
	__atomic_fetch_add(&s->r->c.errors, 1, __ATOMIC_RELAXED);
	rgaps_warn("topic '%.64s': publisher slot %u (stream %llu) wrote %s; its messages are "
		   "skipped from now on",
		   s->hdr->name, slot, (unsigned long long)st->gen, why);
}

/* ---------------------------------------------------------------- take */

enum try_result {
	TRY_NONE,  /* nothing to take in this stream now */
	TRY_GOT,   /* a message (or a gap) */
	TRY_AGAIN, /* lapped: look at the stream again */
	TRY_FULL,  /* its next message would pin more of its pool than we may (rgaps__holds_fit) */
};

/*
 * This subscriber moved past message seq of the stream in r (took it: past =
 * true) or released its hold on it. Wake the publisher if it sleeps for
 * room (topic_pub.c wait_progress), waits for us, and this is what it waits
 * for: the take that brings our cursor to its space_target (it waits for a
 * batch of entries, so that subscribers in lockstep do not wake it once per
 * message; takes move a cursor one by one, so exactly one take of ours
 * does), or the release of a message it retired (a block it may free).
 * Anything else would cost it a context switch, or us a system call, for
 * nothing. Our cursor or hold is stored before we read its flag, and it
 * raised the flag before it read our progress word and then our cursor and
 * holds (all sequentially consistent): either it saw what we did, or we see
 * the flag, bump the word it sleeps on and wake it. No wake is lost, and the
 * word changes only when a publisher asked.
 */
static void progressed(struct rgaps_sub *s, const struct rgaps_pub_region *r, uint64_t seq,
		       bool past)
{
	uint32_t waiting;

	if (!r)
		return;
	/* 0: nobody waits; a slot + 1: the publisher waits for that subscriber only. */
	waiting = __atomic_load_n(&r->space_waiting, __ATOMIC_SEQ_CST);
	if (!waiting || (waiting != UINT32_MAX && waiting != s->slot + 1))
		return;
	if (past ? seq + 1 != __atomic_load_n(&r->space_target, __ATOMIC_SEQ_CST) :
		   seq >= __atomic_load_n(&r->tail, __ATOMIC_SEQ_CST))
		return;
	__atomic_fetch_add(&s->r->progress, 1, __ATOMIC_SEQ_CST);
	rgaps_futex_wake_all(&s->r->progress);
}

/*
 * What was lost just before entry e, which we take now. Once we know where we
 * stand in the stream's running count (have_acc), that is the difference of
 * the counts less e itself: it includes every entry we were lapped past and
 * what they carried (a gap-only entry counts its gap, not itself). Before
 * that, e's own gap. A count that disagrees with e's gap is its publisher's
 * lie about its own stream: e's gap stands.
 */
static uint64_t lost_before(struct stream *st, const struct rgaps_topic_entry *e)
{
	uint32_t n = e->gap;

	if (st->have_acc) {
		uint32_t d = e->accounted - st->last_acc - (e->size ? 1u : 0u);

		if (d >= e->gap)
			n = d;
	}
	st->last_acc = e->accounted;
	st->have_acc = true;
	return n;
}

/*
 * The subscriber was lapped in stream st: move to its tail, counting what it missed
 * (where it knows the stream's count, the next entry taken tells it: lost_before()).
 *
 * An honest stream's tail passed entry next before the entry changed, and is never
 * ahead of its head. The head is read again here, after the tail: the one our caller
 * read may be long stale (a subscriber descheduled between the two reads while its
 * publisher ran on, as on any loaded machine), and a tail past a stale head is no lie.
 */
static enum try_result lapped(struct rgaps_sub *s, struct stream *st, uint32_t slot,
			      struct rgaps_sub_cursor *c, uint64_t next)
{
	uint64_t tail = __atomic_load_n(&st->r->tail, __ATOMIC_SEQ_CST);
	uint64_t head = RGAPS_MIN(__atomic_load_n(&st->r->head, __ATOMIC_SEQ_CST), st->limit);

	if (tail <= next || tail > head) {
		/* The entry changed, yet the stream claims it is still kept: a spoiled stream. */
		char why[128];

		snprintf(why, sizeof(why), "entry %llu changed while its tail is %llu (head %llu)",
			 (unsigned long long)next, (unsigned long long)tail,
			 (unsigned long long)head);
		poison(s, st, slot, why);
		return TRY_NONE;
	}
	if (!(__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & RGAPS_CURSOR_FRESH)) {
		if (!st->have_acc)
			st->pending_gap += tail - next;
		__atomic_fetch_add(&s->r->c.drops, tail - next, __ATOMIC_RELAXED);
	}
	/* Moving to the tail gives the publisher nothing: no wake. */
	__atomic_store_n(&c->next, tail, __ATOMIC_SEQ_CST);
	return TRY_AGAIN;
}

/* Whether we may hold entry e of stream st besides what we hold of it already. */
static bool room_for(struct rgaps_sub *s, const struct stream *st,
		     const struct rgaps_topic_entry *e)
{
	uint32_t n = 0;

	if (!st->nheld || s->lim.overflow != RGAPS_OVERFLOW_DROP_OLDEST)
		return true;
	for (uint32_t k = 0; k < s->lim.max_holds; k++)
		if (s->hp[k].used && s->hp[k].gen == st->gen)
			s->ext[n++] = (struct rgaps_extent){
				s->hp[k].off, RGAPS_ALIGN_UP(s->hp[k].size, RGAPS_POOL_ALIGN)
			};
	s->ext[n++] = (struct rgaps_extent){ e->off, RGAPS_ALIGN_UP(e->size, RGAPS_POOL_ALIGN) };
	return rgaps__holds_fit(&s->lim, s->ext, n);
}

static int free_hold(const struct rgaps_sub *s)
{
	for (uint32_t k = 0; k < s->lim.max_holds; k++)
		if (!s->hp[k].used)
			return (int)k;
	return -1;
}

static enum try_result try_stream(struct rgaps_sub *s, uint32_t slot, struct rgaps_sub_msg *m,
				  int *err_p)
{
	struct stream *st = &s->streams[slot];
	struct rgaps_sub_cursor *c;
	struct rgaps_topic_entry e;
	uint64_t next, head, tail;
	char why[160];
	int k, r;

	if (!st->gen || __atomic_load_n(&st->poisoned, __ATOMIC_RELAXED) || st->parked)
		return TRY_NONE;
	c = cursor_of(s, slot, st->gen);
	next = __atomic_load_n(&c->next, __ATOMIC_RELAXED);
	if (!st->have_acc && next == 0 &&
	    !(__atomic_load_n(&c->flags, __ATOMIC_RELAXED) & RGAPS_CURSOR_FRESH)) {
		/* A stream that began after we attached: we count it from its start. */
		st->have_acc = true;
		st->last_acc = 0;
	}
	head = RGAPS_MIN(__atomic_load_n(&st->r->head, __ATOMIC_SEQ_CST), st->limit);
	if (next >= head)
		return TRY_NONE; /* nothing new (a head that went back only hides its own stream) */
	r = rgaps__entry_read(&s->lim, st->r, next, &e, why, sizeof(why));
	if (r == -EBADMSG) {
		poison(s, st, slot, why);
		return TRY_NONE;
	}
	if (r == -EAGAIN)
		return lapped(s, st, slot, c, next);

	m->seq = next;
	m->fence = e.fence;
	m->ts_ns = e.ts_ns;
	m->stream = st->gen;
	m->origin_stream = e.origin_stream;
	m->origin_seq = e.origin_seq;
	m->flags = e.flags;
	m->slot = slot;
	if (e.flags & RGAPS_ENTRY_GAP_ONLY) {
		/* Nothing to hold: report the loss and move on. */
		m->off = 0;
		m->data = NULL;
		m->size = 0;
		m->gap = st->pending_gap + lost_before(st, &e);
		m->token = UINT32_MAX;
		m->attr_len = 0;
		m->attrs = NULL;
		st->pending_gap = 0;
		__atomic_store_n(&c->next, next + 1, __ATOMIC_SEQ_CST);
		__atomic_fetch_and(&c->flags, ~RGAPS_CURSOR_FRESH, __ATOMIC_RELAXED);
		progressed(s, st->r, next, true);
		return TRY_GOT;
	}
	k = free_hold(s);
	if (k < 0) {
		*err_p = -ENOBUFS;
		return TRY_NONE;
	}
	if (!room_for(s, st, &e))
		return TRY_FULL;
	/* The hazard pointer: the hold is visible before we look at the tail. */
	__atomic_store_n(&s->holds[k].seq, next, __ATOMIC_RELAXED);
	__atomic_store_n(&s->holds[k].gen, st->gen, __ATOMIC_SEQ_CST);
	__atomic_store_n(&s->r->nholds, s->nholds + 1, __ATOMIC_SEQ_CST);
	tail = __atomic_load_n(&st->r->tail, __ATOMIC_SEQ_CST);
	if (tail > next)
		goto retired;
	/* The entry may be rewritten once retired, even while its block is held: copy the
	 * attribute block, then check the entry is still this one. */
	if (e.attr_len)
		rgaps__attrs_load(s->hp[k].attrs,
				 rgaps__pub_attrs(&s->lim, st->r) +
					 (next & (s->lim.queue_depth - 1)) * (uint64_t)RGAPS_ATTR_MAX,
				 e.attr_len);
	if (__atomic_load_n(
		    &rgaps__pub_entries(&s->lim, st->r)[next & (s->lim.queue_depth - 1)].seq,
		    __ATOMIC_ACQUIRE) != next)
		goto retired;

	s->hp[k].used = true;
	s->hp[k].slot = slot;
	s->hp[k].gen = st->gen;
	s->hp[k].seq = next;
	s->hp[k].off = e.off;
	s->hp[k].size = e.size;
	s->hp[k].r = st->r;
	s->hp[k].attr_len = e.attr_len;
	s->nholds++;
	st->nheld++;
	__atomic_store_n(&c->next, next + 1, __ATOMIC_SEQ_CST);
	__atomic_fetch_and(&c->flags, ~RGAPS_CURSOR_FRESH, __ATOMIC_RELAXED);
	__atomic_fetch_add(&s->r->c.taken, 1, __ATOMIC_RELAXED);
	progressed(s, st->r, next, true);

	m->off = e.off;
	m->data = st->pool + e.off;
	m->size = e.size;
	m->gap = st->pending_gap + lost_before(st, &e);
	m->token = (uint32_t)k;
	m->attr_len = e.attr_len;
	m->attrs = e.attr_len ? s->hp[k].attrs : NULL;
	st->pending_gap = 0;
	return TRY_GOT;

retired:
	__atomic_store_n(&s->holds[k].gen, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&s->r->nholds, s->nholds, __ATOMIC_RELAXED);
	return lapped(s, st, slot, c, next);
}

/* One pass over every stream, round robin. -ENOBUFS when only our holds stand in the way. */
static enum try_result try_all(struct rgaps_sub *s, struct rgaps_sub_msg *m, int *err_p)
{
	uint32_t n = s->lim.max_publishers;
	bool full = false;

	if (__atomic_load_n(&s->lost, __ATOMIC_RELAXED)) {
		memset(m, 0, sizeof(*m));
		m->gap = __atomic_exchange_n(&s->lost, 0, __ATOMIC_RELAXED);
		m->stream = m->origin_stream = s->lost_stream;
		m->flags = RGAPS_ENTRY_GAP_ONLY;
		m->token = UINT32_MAX;
		return TRY_GOT;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t slot = (s->rr + i) % n;
		enum try_result t;

		int laps = 0;

		/* Bounded: a stream that keeps lapping us (or lies that it does) gets its turn
		 * again on the next pass, after the others. */
		do
			t = try_stream(s, slot, m, err_p);
		while (t == TRY_AGAIN && ++laps < 8);
		if (t == TRY_GOT) {
			s->rr = (slot + 1) % n;
			return TRY_GOT;
		}
		if (*err_p)
			return TRY_NONE;
		full |= t == TRY_FULL; /* the other streams may still give */
	}
	if (full)
		*err_p = -ENOBUFS;
	return TRY_NONE;
}

/* ---------------------------------------------------------------- messages waiting for fences */

/*
 * A fenced message is read only once the copy into its block is complete
 * (cbs.fence_done). One taken before that is parked: held, and its stream
 * passed over (its later messages wait behind it, in order) while the other
 * streams flow, so a publisher whose copies never end holds back only its own
 * stream. A parked message leaves when its copy completes (it is returned),
 * or is reported lost when it never will or lim.fence_timeout_ms passes. At
 * most half of our holds wait so (at least one): beyond, the one waiting
 * longest is given up, and the holds the caller may use stay its own.
 */
static void unpark(struct rgaps_sub *s, uint32_t token)
{
	struct parked *pk = &s->parked[token];
	struct stream *st = &s->streams[pk->m.slot];

	if (st->gen == pk->m.stream)
		st->parked = false;
	pk->used = false;
	__atomic_store_n(&s->nparked, s->nparked - 1, __ATOMIC_RELAXED);
}

/* Parked message m will never be complete here: release it, reported lost with its gap. */
static void lose_fenced(struct rgaps_sub *s, const struct rgaps_sub_msg *m)
{
	rgaps__sub_release(s, m->token);
	lost_after_take(s, m->slot, m->stream, m->gap);
}

static void give_up_parked(struct rgaps_sub *s, uint32_t token, const char *why)
{
	struct rgaps_sub_msg m = s->parked[token].m;

	rgaps_warn("topic '%.64s': stream %llu message %llu: %s; reported lost", s->hdr->name,
		   (unsigned long long)m.stream, (unsigned long long)m.seq, why);
	unpark(s, token);
	lose_fenced(s, &m);
}

static void park(struct rgaps_sub *s, const struct rgaps_sub_msg *m)
{
	uint32_t max = RGAPS_MAX(s->lim.max_holds / 2, 1u);
	uint64_t now = rgaps_now_ns(CLOCK_MONOTONIC);

	if (s->nparked >= max) {
		uint32_t oldest = UINT32_MAX;

		for (uint32_t k = 0; k < s->lim.max_holds; k++)
			if (s->parked[k].used &&
			    (oldest == UINT32_MAX ||
			     s->parked[k].since_ns < s->parked[oldest].since_ns))
				oldest = k;
		give_up_parked(s, oldest, "too many messages wait for their copies to complete");
	}
	s->parked[m->token] = (struct parked){ .used = true, .since_ns = now, .m = *m };
	s->streams[m->slot].parked = true;
	__atomic_store_n(&s->parked_last_ns, now, __ATOMIC_RELAXED);
	__atomic_store_n(&s->nparked, s->nparked + 1, __ATOMIC_RELAXED);
}

/* Taken message m: TRY_GOT when it may be read now, else TRY_NONE (parked, or lost). */
static enum try_result settle(struct rgaps_sub *s, const struct rgaps_sub_msg *m)
{
	int e;

	if (!(m->flags & RGAPS_ENTRY_FENCE) || m->token == UINT32_MAX || !s->cbs.fence_done)
		return TRY_GOT;
	e = s->cbs.fence_done(s->cbs.arg, m);
	if (e == 0)
		return TRY_GOT;
	if (e == -EAGAIN)
		park(s, m);
	else
		lose_fenced(s, m);
	return TRY_NONE;
}

/* A parked message whose copy has completed, into m (TRY_GOT); the hopeless ones go. */
static enum try_result take_parked(struct rgaps_sub *s, struct rgaps_sub_msg *m)
{
	uint64_t timeout_ns = (uint64_t)s->lim.fence_timeout_ms * 1000000ull, now = 0;

	for (uint32_t k = 0; k < s->lim.max_holds && s->nparked; k++) {
		struct parked *pk = &s->parked[k];
		int e;

		if (!pk->used)
			continue;
		e = s->cbs.fence_done(s->cbs.arg, &pk->m);
		if (e == -EAGAIN) {
			char why[96];

			if (!timeout_ns)
				continue;
			if (!now)
				now = rgaps_now_ns(CLOCK_MONOTONIC);
			if (now - pk->since_ns < timeout_ns)
				continue;
			snprintf(why, sizeof(why),
				 "its copy did not complete within %u ms "
				 "(fence_timeout_ms)",
				 s->lim.fence_timeout_ms);
			give_up_parked(s, k, why);
			continue;
		}
		*m = pk->m;
		unpark(s, k);
		if (e == 0)
			return TRY_GOT;
		lose_fenced(s, m);
	}
	return TRY_NONE;
}

int64_t rgaps__sub_fence_slice(const struct rgaps_sub *s)
{
	uint64_t age;

	if (!__atomic_load_n(&s->nparked, __ATOMIC_RELAXED))
		return INT64_MAX;
	age = rgaps_now_ns(CLOCK_MONOTONIC) - __atomic_load_n(&s->parked_last_ns, __ATOMIC_RELAXED);
	if (age < RGAPS_FENCE_YIELD_NS) /* as rgaps__fence_wait_host() waits for a copy */
		return 0;
	return RGAPS_MAX(RGAPS_MIN((int64_t)(age / 8), PARKED_SLICE_MAX_NS), PARKED_SLICE_MIN_NS);
}

static bool any_ready(struct rgaps_sub *s)
{
	if (__atomic_load_n(&s->lost, __ATOMIC_RELAXED))
		return true;
	for (uint32_t i = 0; i < s->lim.max_publishers; i++) {
		const struct stream *st = &s->streams[i];
		uint64_t head;

		if (!st->gen || __atomic_load_n(&st->poisoned, __ATOMIC_RELAXED) || st->parked)
			continue;
		head = RGAPS_MIN(__atomic_load_n(&st->r->head, __ATOMIC_SEQ_CST), st->limit);
		if (__atomic_load_n(&s->cursors[i].gen, __ATOMIC_RELAXED) != st->gen ?
			    head > 0 :
			    head > __atomic_load_n(&s->cursors[i].next, __ATOMIC_RELAXED))
			return true;
	}
	return false;
}

bool rgaps__sub_ready(struct rgaps_sub *s)
{
	return __atomic_load_n(&s->hdr->closed, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&s->hdr->dir_gen, __ATOMIC_ACQUIRE) !=
		       __atomic_load_n(&s->dir_seen, __ATOMIC_RELAXED) ||
	       any_ready(s);
}

void rgaps__sub_sleeping(struct rgaps_sub *s, int delta)
{
	__atomic_fetch_add(&s->r->sleeping, (uint32_t)delta, __ATOMIC_SEQ_CST);
}

uint32_t rgaps__sub_wait_words(struct rgaps_sub *s, struct futex_waitv *w, uint32_t max)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->lim.max_publishers && n + 1 < max; i++) {
		const struct stream *st = &s->streams[i];

		if (st->gen && !__atomic_load_n(&st->poisoned, __ATOMIC_RELAXED) && !st->parked)
			rgaps_waitv_set(&w[n++], &st->r->doorbell,
					__atomic_load_n(&st->r->doorbell, __ATOMIC_SEQ_CST));
	}
	rgaps_waitv_set(&w[n++], &s->hdr->dir_gen, __atomic_load_n(&s->dir_seen, __ATOMIC_RELAXED));
	return n;
}

void rgaps__sub_record_latency(struct rgaps_sub *s, uint64_t ts_ns, uint64_t now_ns)
{
	struct rgaps_lathist *h = &s->r->latency;

	if (ts_ns > now_ns) { /* stamped by a host whose clock runs ahead */
		__atomic_fetch_add(&h->skewed, 1, __ATOMIC_RELAXED);
		now_ns = ts_ns;
	}
	rgaps_lathist_add(h, now_ns - ts_ns);
}

int rgaps__sub_sleep(struct rgaps_sub *s, pthread_mutex_t *lock, const struct futex_waitv *extra,
		    uint32_t nextra, bool (*ready_too)(void *arg), void *arg, int64_t slice_ns)
{
	struct futex_waitv wv[RGAPS_WAITV_MAX];
	bool ready;
	uint32_t n;
	int r = 0;

	/*
	 * The sleeping count is raised before the doorbells are read and the streams
	 * looked at again, and publishers store head and ring before they read it, so a
	 * publish is either seen here or wakes us. The words are read under the
	 * caller's lock: a sync may unmap a stream; one unmapped while we sleep only
	 * ends the sleep early.
	 */
	rgaps__sub_sleeping(s, 1);
	if (lock)
		pthread_mutex_lock(lock);
	n = rgaps__sub_wait_words(s, wv, RGAPS_WAITV_MAX - RGAPS_MIN(nextra, RGAPS_WAITV_MAX - 2));
	for (uint32_t i = 0; i < nextra && n < RGAPS_WAITV_MAX; i++)
		wv[n++] = extra[i];
	ready = rgaps__sub_ready(s) || (ready_too && ready_too(arg));
	if (lock)
		pthread_mutex_unlock(lock);
	if (!ready) {
		/*
		 * One stream and nothing else (the usual case): FUTEX_WAIT on its doorbell,
		 * which wakes faster than futex_waitv. A membership change or a close then
		 * reaches us through rgapsd, which wakes every doorbell after it bumps dir_gen
		 * (members.c); only a change that falls between our look at dir_gen above and
		 * the wait below waits out the slice.
		 */
		r = n == 2 && !nextra ? -ENOSYS : rgaps_futex_waitv(wv, n, slice_ns);
		if (r == -ENOSYS) /* one word, or Linux < 5.16: the first word, short polls */
			r = rgaps_futex_wait((const uint32_t *)(uintptr_t)wv[0].uaddr,
					     (uint32_t)wv[0].val,
					     n == 2 && !nextra ? slice_ns :
								 RGAPS_MIN(slice_ns, POLL_SLICE_NS));
	}
	rgaps__sub_sleeping(s, -1);
	if (ready)
		return 1;
	return r == -EINTR ? -EINTR : 0;
}

/*
 * Sleep once, at most until the deadline (-ETIMEDOUT once passed), and no
 * longer than parked messages allow (rgaps__sub_fence_slice(): a yield only).
 */
static int sleep_once(struct rgaps_sub *s, uint64_t deadline)
{
	uint64_t now = rgaps_now_ns(CLOCK_MONOTONIC);
	int64_t slice = RGAPS_MIN(rgaps__sub_fence_slice(s), WAIT_SLICE_NS);
	int r;

	if (now >= deadline)
		return -ETIMEDOUT;
	if (slice == 0) {
		sched_yield();
		return 0;
	}
	r = rgaps__sub_sleep(s, NULL, NULL, 0, NULL, NULL,
			    (int64_t)RGAPS_MIN(deadline - now, (uint64_t)slice));
	return r < 0 ? r : 0;
}

static void spin_for(struct rgaps_sub *s, uint32_t spin_us)
{
	uint64_t end = rgaps_now_ns(CLOCK_MONOTONIC) + (uint64_t)spin_us * 1000;

	do {
		for (int i = 0; i < 64; i++) {
			if (rgaps__sub_ready(s))
				return;
			__builtin_ia32_pause();
		}
	} while (rgaps_now_ns(CLOCK_MONOTONIC) < end);
}

/* Whether a publisher announced a message whose copy runs (rgaps__pub_announce). */
static bool copy_coming(const struct rgaps_sub *s)
{
	for (uint32_t i = 0; i < s->lim.max_publishers; i++) {
		const struct stream *st = &s->streams[i];

		if (st->gen && !__atomic_load_n(&st->poisoned, __ATOMIC_RELAXED) &&
		    __atomic_load_n(&st->r->copying, __ATOMIC_ACQUIRE))
			return true;
	}
	return false;
}

/*
 * A publisher woke us because its message's copy runs: spin until the message
 * (or anything else) is there, the publisher withdraws, or COPY_SPIN_NS has
 * passed, whatever the publisher's region says (it cannot keep us spinning).
 */
static void spin_for_copy(struct rgaps_sub *s)
{
	uint64_t end = rgaps_now_ns(CLOCK_MONOTONIC) + COPY_SPIN_NS;

	do {
		for (int i = 0; i < 64; i++) {
			if (rgaps__sub_ready(s) || !copy_coming(s))
				return;
			__builtin_ia32_pause();
		}
	} while (rgaps_now_ns(CLOCK_MONOTONIC) < end);
}

int rgaps__sub_take(struct rgaps_sub *s, int timeout_ms, uint32_t spin_us,
		   struct rgaps_sub_msg *msg_p)
{
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX :
					     rgaps_now_ns(CLOCK_MONOTONIC) +
						     (uint64_t)timeout_ms * 1000000ull;
	/* With more subscribers than CPUs they go straight to the futex. */
	bool may_spin = spin_us != 0 && rgaps__topic_spin_pays(s->hdr);
	bool spun = !may_spin, copy_spun = false;
	int r;

	if (__atomic_load_n(&s->r->stopped, __ATOMIC_RELAXED))
		return -ESHUTDOWN;

	for (;;) {
		int err = 0;

		r = check_world(s);
		if (r)
			return r;
		if (s->nparked && take_parked(s, msg_p) == TRY_GOT)
			return 0;
		if (try_all(s, msg_p, &err) == TRY_GOT) {
			if (settle(s, msg_p) == TRY_GOT)
				return 0;
			continue; /* parked or lost: the other streams now */
		}
		if (err && !(err == -ENOBUFS && s->nparked))
			return err; /* (holds that wait for fences come back by themselves) */
		if (timeout_ms == 0)
			return -EAGAIN;
		if (!spun) {
			/* A short spin catches back-to-back messages without a sleep. */
			spun = true;
			spin_for(s, spin_us);
			continue;
		}
		if (may_spin && !copy_spun && copy_coming(s)) {
			/* Woken while a message's copy runs (once a sleep): it comes soon. */
			copy_spun = true;
			spin_for_copy(s);
			continue;
		}
		r = sleep_once(s, deadline);
		if (r)
			return r;
		copy_spun = false;
	}
}

int rgaps__sub_release(struct rgaps_sub *s, uint32_t token)
{
	struct hold *h;

	if (token >= s->lim.max_holds || !s->hp[token].used)
		return -EINVAL;
	h = &s->hp[token];
	__atomic_store_n(&s->holds[token].gen, 0, __ATOMIC_SEQ_CST);
	h->used = false;
	s->nholds--;
	if (s->streams[h->slot].gen == h->gen)
		s->streams[h->slot].nheld--;
	__atomic_store_n(&s->r->nholds, s->nholds, __ATOMIC_RELAXED);
	__atomic_fetch_add(&s->r->c.released, 1, __ATOMIC_RELAXED);
	/* Its publisher may be gone (the stream cleared): then nobody waits for room. */
	progressed(s, s->streams[h->slot].gen == h->gen ? h->r : NULL, h->seq, false);
	return 0;
}

void rgaps__sub_stop(struct rgaps_sub *s)
{
	__atomic_store_n(&s->r->stopped, 1, __ATOMIC_SEQ_CST);
	/* Publishers asleep for room wait on our progress word: they look again now. */
	__atomic_fetch_add(&s->r->progress, 1, __ATOMIC_SEQ_CST);
	rgaps_futex_wake_all(&s->r->progress);
}

void rgaps__sub_get_state(const struct rgaps_sub *s, struct rgaps_sub_state *st)
{
	st->nstreams = s->nstreams;
	st->nholds = s->nholds;
	st->drops = __atomic_load_n(&s->r->c.drops, __ATOMIC_RELAXED);
	st->taken = __atomic_load_n(&s->r->c.taken, __ATOMIC_RELAXED);
}
