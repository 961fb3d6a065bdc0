/*
 * The layout of a topic's shared memory (topic.h, docs/SHM-LAYOUT.md): sizes,
 * formatting by rgapsd, the checks clients make of what they map, the checked
 * read of another process's queue entry, and rgapsd's clamped snapshots of
 * regions it does not own. The hot paths are topic_pub.c and topic_sub.c.
 */
#include "topic.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "futex.h"
#include "log.h"
#include "plugin_loader.h" /* enum rgaps_mem_kind */

/* ---------------------------------------------------------------- layout */

static uint64_t pub_entries_off(void)
{
	return RGAPS_ALIGN_UP(sizeof(struct rgaps_pub_region), (uint64_t)RGAPS_CACHELINE);
}

static uint64_t pub_attrs_off(uint32_t depth)
{
	return pub_entries_off() + (uint64_t)depth * sizeof(struct rgaps_topic_entry);
}

static uint64_t sub_cursors_off(void)
{
	return RGAPS_ALIGN_UP(sizeof(struct rgaps_sub_region), (uint64_t)RGAPS_CACHELINE);
}

static uint64_t sub_holds_off(uint32_t max_publishers)
{
	return RGAPS_ALIGN_UP(sub_cursors_off() +
				      (uint64_t)max_publishers * sizeof(struct rgaps_sub_cursor),
			      (uint64_t)RGAPS_CACHELINE);
}

/*
 * Fence slots: a fence guards its block until both the copy into it is done and
 * the block is free again, so a stream may have one per kept entry (depth) and
 * more for retired blocks still held or still copying; twice the depth, and at
 * most 1024 (a publisher that finds none free waits for its copy instead).
 */
static uint32_t nfences_of(uint32_t depth)
{
	return depth > 512 ? 1024 : 2 * depth;
}

static uint64_t pub_fences_off(uint32_t depth)
{
	return RGAPS_ALIGN_UP(pub_attrs_off(depth) + (uint64_t)depth * RGAPS_ATTR_MAX,
			      (uint64_t)RGAPS_CACHELINE);
}

/* Each fence slot's state word, after the handles (a line of their own: they change). */
static uint64_t pub_fence_states_off(uint32_t depth)
{
	return RGAPS_ALIGN_UP(pub_fences_off(depth) + (uint64_t)nfences_of(depth) * RGAPS_FENCE_BYTES,
			      (uint64_t)RGAPS_CACHELINE);
}

static uint64_t pub_region_size(uint32_t depth)
{
	return RGAPS_ALIGN_UP(pub_fence_states_off(depth) +
				      (uint64_t)nfences_of(depth) * sizeof(uint64_t),
			      4096ull);
}

uint32_t rgaps__topic_nfences(const struct rgaps_topic_limits *lim)
{
	return nfences_of(lim->queue_depth);
}

uint64_t rgaps__topic_hold_room(const struct rgaps_topic_limits *lim)
{
	return rgaps__tlsf_fit_size(lim->max_message_size, RGAPS_POOL_ALIGN);
}

bool rgaps__holds_fit(const struct rgaps_topic_limits *lim, struct rgaps_extent *x, uint32_t n)
{
	uint64_t pool = lim->pool_size & ~(uint64_t)(RGAPS_POOL_ALIGN - 1);
	uint64_t room = rgaps__topic_hold_room(lim), at = 0;

	if (lim->overflow != RGAPS_OVERFLOW_DROP_OLDEST || n < 2)
		return true;
	for (uint32_t i = 1; i < n; i++) { /* by offset; n is at most max_holds + 1 */
		struct rgaps_extent e = x[i];
		uint32_t j = i;

		for (; j > 0 && x[j - 1].off > e.off; j--)
			x[j] = x[j - 1];
		x[j] = e;
	}
	for (uint32_t i = 0; i < n; i++) { /* at: the end of what is held so far */
		uint64_t off = RGAPS_MIN(x[i].off, pool);
		uint64_t end = off + RGAPS_MIN(x[i].len, pool - off);

		if (off > at && off - at >= room)
			return true;
		if (end > at)
			at = end;
	}
	return pool - at >= room;
}

bool rgaps__topic_spin_pays(const struct rgaps_topic_hdr *hdr)
{
	static long cpus;

	if (!__atomic_load_n(&cpus, __ATOMIC_RELAXED)) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);

		__atomic_store_n(&cpus, n > 0 ? n : 1, __ATOMIC_RELAXED);
	}
	return __atomic_load_n(&hdr->nsubs, __ATOMIC_RELAXED) <
	       (uint32_t)__atomic_load_n(&cpus, __ATOMIC_RELAXED);
}

static uint64_t sub_region_size(uint32_t max_publishers, uint32_t max_holds)
{
	return RGAPS_ALIGN_UP(sub_holds_off(max_publishers) +
				      (uint64_t)max_holds * sizeof(struct rgaps_sub_hold),
			      4096ull);
}

int rgaps__topic_limits_check(const struct rgaps_topic_limits *l)
{
	/* The configuration table's bounds (config.c), which rgapsd enforced. */
	if (!rgaps_is_pow2(l->queue_depth) || l->queue_depth < 2 || l->queue_depth > 65536 ||
	    l->history >= l->queue_depth || l->max_subscribers < 1 || l->max_subscribers > 1024 ||
	    l->max_publishers < 1 || l->max_publishers > 256 || l->max_holds < 1 ||
	    l->max_holds > 256 || l->max_loans < 1 || l->max_loans > 256 ||
	    l->pool_size < RGAPS_POOL_ALIGN || l->max_message_size == 0 ||
	    l->max_message_size > l->pool_size || l->overflow > RGAPS_OVERFLOW_DROP_OLDEST ||
	    l->fence_timeout_ms > 3600000)
		return -EINVAL;
	if (l->pub_region_size != pub_region_size(l->queue_depth) ||
	    l->sub_region_size != sub_region_size(l->max_publishers, l->max_holds))
		return -EINVAL;
	return 0;
}

int rgaps__topic_limits_from_config(const struct rgaps_topic_config *tc, uint32_t mem_kind,
				   int32_t device, struct rgaps_topic_limits *lim_p)
{
	struct rgaps_topic_limits l = {
		.pool_size = tc->pool_size,
		.max_message_size = tc->max_message_size,
		.pub_region_size = pub_region_size(tc->queue_depth),
		.sub_region_size = sub_region_size(tc->max_publishers, tc->max_holds),
		.queue_depth = tc->queue_depth,
		.history = tc->history,
		.max_subscribers = tc->max_subscribers,
		.max_publishers = tc->max_publishers,
		.max_holds = tc->max_holds,
		.max_loans = tc->max_loans,
		.block_timeout_ms = tc->block_timeout_ms,
		.fence_timeout_ms = tc->fence_timeout_ms,
		.overflow = tc->overflow,
		.mem_kind = mem_kind,
		.device = device,
	};

	if (rgaps__topic_limits_check(&l))
		return -EINVAL;
	*lim_p = l;
	return 0;
}

size_t rgaps__topic_hdr_size(void)
{
	return RGAPS_ALIGN_UP(sizeof(struct rgaps_topic_hdr), 4096ul);
}

struct rgaps_topic_entry *rgaps__pub_entries(const struct rgaps_topic_limits *lim,
					     const struct rgaps_pub_region *r)
{
	return (struct rgaps_topic_entry *)((uint8_t *)r + pub_entries_off());
}

uint8_t *rgaps__pub_attrs(const struct rgaps_topic_limits *lim, const struct rgaps_pub_region *r)
{
	return (uint8_t *)r + pub_attrs_off(lim->queue_depth);
}

uint8_t *rgaps__pub_fence_handle(const struct rgaps_topic_limits *lim,
				const struct rgaps_pub_region *r, uint32_t k)
{
	return (uint8_t *)r + pub_fences_off(lim->queue_depth) + (uint64_t)k * RGAPS_FENCE_BYTES;
}

uint64_t *rgaps__pub_fence_state(const struct rgaps_topic_limits *lim,
				const struct rgaps_pub_region *r, uint32_t k)
{
	return (uint64_t *)((uint8_t *)r + pub_fence_states_off(lim->queue_depth)) + k;
}

struct rgaps_sub_cursor *rgaps__sub_cursors(const struct rgaps_topic_limits *lim,
					   const struct rgaps_sub_region *r)
{
	return (struct rgaps_sub_cursor *)((uint8_t *)r + sub_cursors_off());
}

struct rgaps_sub_hold *rgaps__sub_holds(const struct rgaps_topic_limits *lim,
				       const struct rgaps_sub_region *r)
{
	return (struct rgaps_sub_hold *)((uint8_t *)r + sub_holds_off(lim->max_publishers));
}

/* ---------------------------------------------------------------- formatting (rgapsd) */

int rgaps__topic_hdr_format(void *mem, size_t size, const char *name,
			   const struct rgaps_topic_limits *lim)
{
	struct rgaps_topic_hdr *h = mem;

	if (size < sizeof(*h) || rgaps__topic_limits_check(lim))
		return -EINVAL;
	memset(h, 0, sizeof(*h));
	h->layout_version = RGAPS_TOPIC_LAYOUT_VERSION;
	h->hdr_size = sizeof(*h);
	h->segment_size = size;
	snprintf(h->name, sizeof(h->name), "%s", name);
	h->lim = *lim;
	__atomic_store_n(&h->magic, RGAPS_TOPIC_MAGIC, __ATOMIC_RELEASE);
	return 0;
}

void rgaps__pub_region_format(void *mem, const struct rgaps_topic_limits *lim, uint32_t slot,
			     uint64_t gen)
{
	struct rgaps_pub_region *r = mem;
	struct rgaps_topic_entry *e = rgaps__pub_entries(lim, r);

	memset(r, 0, lim->pub_region_size);
	r->version = RGAPS_TOPIC_LAYOUT_VERSION;
	r->slot = slot;
	r->gen = gen;
	r->size = lim->pub_region_size;
	/* No entry holds seq 0 until it is published: ~0 never matches a cursor. */
	for (uint32_t i = 0; i < lim->queue_depth; i++)
		e[i].seq = UINT64_MAX;
	__atomic_store_n(&r->magic, RGAPS_PUB_MAGIC, __ATOMIC_RELEASE);
}

void rgaps__sub_region_format(void *mem, const struct rgaps_topic_limits *lim, uint32_t slot,
			     uint64_t gen)
{
	struct rgaps_sub_region *r = mem;

	memset(r, 0, lim->sub_region_size);
	r->version = RGAPS_TOPIC_LAYOUT_VERSION;
	r->slot = slot;
	r->gen = gen;
	r->size = lim->sub_region_size;
	__atomic_store_n(&r->magic, RGAPS_SUB_MAGIC, __ATOMIC_RELEASE);
}

void rgaps__sub_region_set_cursor(struct rgaps_sub_region *r, const struct rgaps_topic_limits *lim,
				 uint32_t pub_slot, uint64_t gen, uint64_t next, uint32_t flags)
{
	struct rgaps_sub_cursor *c = &rgaps__sub_cursors(lim, r)[pub_slot];

	rgaps_require(pub_slot < lim->max_publishers);
	/* next and flags first: a reader that sees gen sees them too (topic_pub.c). */
	__atomic_store_n(&c->next, next, __ATOMIC_RELAXED);
	__atomic_store_n(&c->flags, flags, __ATOMIC_RELAXED);
	__atomic_store_n(&c->gen, gen, __ATOMIC_RELEASE);
}

/* ---------------------------------------------------------------- checks (clients) */

int rgaps__topic_hdr_validate(const void *mem, size_t size, struct rgaps_topic_limits *lim_p)
{
	const struct rgaps_topic_hdr *h = mem;
	struct rgaps_topic_limits l;

	if (size < sizeof(*h) || __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != RGAPS_TOPIC_MAGIC ||
	    h->layout_version != RGAPS_TOPIC_LAYOUT_VERSION || h->hdr_size != sizeof(*h) ||
	    h->segment_size != size)
		return -EPROTO;
	memcpy(&l, &h->lim, sizeof(l));
	if (rgaps__topic_limits_check(&l))
		return -EPROTO;
	*lim_p = l;
	return 0;
}

int rgaps__pub_region_validate(const void *mem, size_t size, const struct rgaps_topic_limits *lim)
{
	const struct rgaps_pub_region *r = mem;

	if (size != lim->pub_region_size ||
	    __atomic_load_n(&r->magic, __ATOMIC_ACQUIRE) != RGAPS_PUB_MAGIC)
		return -EPROTO;
	return 0;
}

int rgaps__sub_region_validate(const void *mem, size_t size, const struct rgaps_topic_limits *lim)
{
	const struct rgaps_sub_region *r = mem;

	if (size != lim->sub_region_size ||
	    __atomic_load_n(&r->magic, __ATOMIC_ACQUIRE) != RGAPS_SUB_MAGIC)
		return -EPROTO;
	return 0;
}

void rgaps__topic_dir_changed(struct rgaps_topic_hdr *h)
{
	__atomic_fetch_add(&h->dir_gen, 1, __ATOMIC_SEQ_CST);
	rgaps_futex_wake_all(&h->dir_gen);
}

void rgaps__topic_close(struct rgaps_topic_hdr *h)
{
	__atomic_store_n(&h->closed, 1, __ATOMIC_SEQ_CST);
	rgaps__topic_dir_changed(h);
}

/* ---------------------------------------------------------------- reading another's entry */

int rgaps__entry_read(const struct rgaps_topic_limits *lim, const struct rgaps_pub_region *r,
		     uint64_t seq, struct rgaps_topic_entry *e_p, char *why, size_t whylen)
{
	const struct rgaps_topic_entry *e =
		&rgaps__pub_entries(lim, r)[seq & (lim->queue_depth - 1)];
	struct rgaps_topic_entry c;
	uint64_t again;

	/* Seqlock read: the publisher brackets a rewrite with seq (topic.h). */
	/* Every load is an acquire, so none moves after the second look at seq (this is the
	 * fence of a seqlock reader, written so that ThreadSanitizer understands it). */
	c.seq = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
	if (c.seq != seq)
		return -EAGAIN;
	c.off = __atomic_load_n(&e->off, __ATOMIC_ACQUIRE);
	c.size = __atomic_load_n(&e->size, __ATOMIC_ACQUIRE);
	c.ts_ns = __atomic_load_n(&e->ts_ns, __ATOMIC_ACQUIRE);
	c.origin_stream = __atomic_load_n(&e->origin_stream, __ATOMIC_ACQUIRE);
	c.origin_seq = __atomic_load_n(&e->origin_seq, __ATOMIC_ACQUIRE);
	c.gap = __atomic_load_n(&e->gap, __ATOMIC_ACQUIRE);
	c.accounted = __atomic_load_n(&e->accounted, __ATOMIC_ACQUIRE);
	c.flags = __atomic_load_n(&e->flags, __ATOMIC_ACQUIRE);
	c.attr_len = __atomic_load_n(&e->attr_len, __ATOMIC_ACQUIRE);
	c.fence = __atomic_load_n(&e->fence, __ATOMIC_ACQUIRE);
	again = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
	if (again != seq)
		return -EAGAIN;

#define BAD(...)                                           \
	do {                                               \
		if (why)                                   \
			snprintf(why, whylen, __VA_ARGS__); \
		return -EBADMSG;                           \
	} while (0)
	if (c.flags & ~(RGAPS_ENTRY_REMOTE | RGAPS_ENTRY_GAP_ONLY | RGAPS_ENTRY_FENCE))
		BAD("entry %llu: unknown flags 0x%x", (unsigned long long)seq, c.flags);
	if ((c.flags & RGAPS_ENTRY_FENCE) &&
	    ((c.flags & RGAPS_ENTRY_GAP_ONLY) || c.fence >= nfences_of(lim->queue_depth)))
		BAD("entry %llu: fence slot %u (%u slots)%s", (unsigned long long)seq, c.fence,
		    nfences_of(lim->queue_depth),
		    (c.flags & RGAPS_ENTRY_GAP_ONLY) ? " on a gap-only entry" : "");
	if (!(c.flags & RGAPS_ENTRY_FENCE))
		c.fence = 0;
	if (c.attr_len > RGAPS_ATTR_MAX)
		BAD("entry %llu: attribute block of %u bytes (at most %u)", (unsigned long long)seq,
		    c.attr_len, RGAPS_ATTR_MAX);
	if (c.flags & RGAPS_ENTRY_GAP_ONLY) {
		if (c.size != 0 || c.gap == 0)
			BAD("entry %llu: gap-only entry with size %llu, gap %u",
			    (unsigned long long)seq, (unsigned long long)c.size, c.gap);
	} else {
		if (c.size == 0 || c.size > lim->max_message_size)
			BAD("entry %llu: size %llu (max_message_size %llu)", (unsigned long long)seq,
			    (unsigned long long)c.size, (unsigned long long)lim->max_message_size);
		if (c.off > lim->pool_size - c.size || (c.off & (RGAPS_POOL_ALIGN - 1)))
			BAD("entry %llu: offset %llu + size %llu outside the %llu-byte pool",
			    (unsigned long long)seq, (unsigned long long)c.off,
			    (unsigned long long)c.size, (unsigned long long)lim->pool_size);
	}
#undef BAD
	*e_p = c;
	return 0;
}

void rgaps__attrs_store(uint8_t *dst, const void *src, uint32_t len)
{
	uint64_t w[RGAPS_ATTR_MAX / 8] = { 0 };

	memcpy(w, src, len);
	for (uint32_t i = 0; i < (len + 7) / 8; i++)
		__atomic_store_n((uint64_t *)dst + i, w[i], __ATOMIC_RELEASE);
}

void rgaps__attrs_load(void *dst, const uint8_t *src, uint32_t len)
{
	uint64_t w[RGAPS_ATTR_MAX / 8];

	for (uint32_t i = 0; i < (len + 7) / 8; i++)
		w[i] = __atomic_load_n((const uint64_t *)src + i, __ATOMIC_ACQUIRE);
	memcpy(dst, w, len);
}

/* ---------------------------------------------------------------- rgapsd's snapshots */

void rgaps__pub_snapshot(const struct rgaps_topic_limits *lim, const struct rgaps_pub_region *r,
			struct rgaps_pub_snapshot *s)
{
	const uint64_t *src = (const uint64_t *)&r->c;
	uint64_t *dst = (uint64_t *)&s->c;
	/*
	 * Head, tail, head again: the publisher runs on meanwhile, so the only lies
	 * are a tail ahead of the later head or more than a queue behind the earlier
	 * one (an honest tail lies in [head1 - depth, head2]).
	 */
	uint64_t head1 = __atomic_load_n(&r->head, __ATOMIC_SEQ_CST);
	uint64_t tail = __atomic_load_n(&r->tail, __ATOMIC_SEQ_CST);
	uint64_t head = __atomic_load_n(&r->head, __ATOMIC_SEQ_CST);

	_Static_assert(sizeof(r->c) % sizeof(uint64_t) == 0, "counters are uint64_t");
	for (size_t i = 0; i < sizeof(r->c) / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
	s->bad = head1 > head || tail > head || (head1 > tail && head1 - tail > lim->queue_depth);
	if (s->bad)
		tail = head;
	else if (head - tail > lim->queue_depth) /* it published on while we read */
		tail = head - lim->queue_depth;
	s->head = head;
	s->tail = tail;
	if (s->c.pool_used_bytes > lim->pool_size)
		s->c.pool_used_bytes = lim->pool_size;
	if (s->c.pool_largest_free > lim->pool_size)
		s->c.pool_largest_free = lim->pool_size;
	if (s->c.nloans > lim->max_loans)
		s->c.nloans = lim->max_loans;
}

void rgaps__sub_snapshot(const struct rgaps_topic_limits *lim, const struct rgaps_sub_region *r,
			struct rgaps_sub_snapshot *s)
{
	s->c.taken = __atomic_load_n(&r->c.taken, __ATOMIC_RELAXED);
	s->c.released = __atomic_load_n(&r->c.released, __ATOMIC_RELAXED);
	s->c.drops = __atomic_load_n(&r->c.drops, __ATOMIC_RELAXED);
	s->c.errors = __atomic_load_n(&r->c.errors, __ATOMIC_RELAXED);
	s->nholds = RGAPS_MIN(__atomic_load_n(&r->nholds, __ATOMIC_RELAXED), lim->max_holds);
	s->stopped = __atomic_load_n(&r->stopped, __ATOMIC_RELAXED);
	memset(&s->latency, 0, sizeof(s->latency));
	rgaps_lathist_sum(&s->latency, &r->latency);
}

uint64_t rgaps__sub_position(const struct rgaps_topic_limits *lim, const struct rgaps_sub_region *r,
			    uint32_t slot, uint64_t gen, uint64_t tail, uint64_t head)
{
	const struct rgaps_sub_cursor *c;
	uint64_t next;

	if (slot >= lim->max_publishers)
		return tail;
	if (__atomic_load_n(&r->stopped, __ATOMIC_ACQUIRE))
		return head; /* it reads nothing more: nothing to wait for */
	c = &rgaps__sub_cursors(lim, r)[slot];
	if (__atomic_load_n(&c->gen, __ATOMIC_ACQUIRE) != gen)
		return tail;
	next = __atomic_load_n(&c->next, __ATOMIC_SEQ_CST);
	return next < tail ? tail : next > head ? head : next;
}

bool rgaps__sub_holds_stream(const struct rgaps_topic_limits *lim, const struct rgaps_sub_region *r,
			    uint64_t gen)
{
	const struct rgaps_sub_hold *h = rgaps__sub_holds(lim, r);

	for (uint32_t k = 0; k < lim->max_holds; k++)
		if (__atomic_load_n(&h[k].gen, __ATOMIC_SEQ_CST) == gen)
			return true;
	return false;
}
