/*
 * Receive-ring arithmetic shared by the verbs and TCP transports (see ring.h;
 * the picture, the rules and the proofs are in docs/RING.md). Everything here
 * is integer arithmetic on monotonic cursors: both sides run the same
 * rt_ring_place() on the same (cursor, len) sequence, so they agree on every
 * offset without ever sending one. Values from a peer are refused with an
 * errno; in debug builds (no NDEBUG) every state change re-checks the side's
 * own invariants, which inputs cannot break unless this file is wrong.
 */
#include "ring.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../common/util.h"

#ifndef NDEBUG
static void ring_debug_fail(const char *side, const char *why)
{
	fprintf(stderr, "rgaps: ring %s invariant broken: %s\n", side, why);
	abort();
}

#define RING_DEBUG_CHECK(fn, side, obj)                      \
	do {                                                 \
		const char *why_;                            \
		if (RGAPS_UNLIKELY(fn((obj), &why_) != 0)) \
			ring_debug_fail((side), why_);      \
	} while (0)
#else
#define RING_DEBUG_CHECK(fn, side, obj) ((void)0)
#endif

static bool geom_valid(const struct rgaps_ring_geom *g)
{
	return g->align && rgaps_is_pow2(g->align) && g->size && g->size <= RGAPS_RING_SIZE_MAX &&
	       g->size % g->align == 0 && g->max_record && g->max_record <= g->size &&
	       g->max_stride == RGAPS_ALIGN_UP(g->max_record, (uint64_t)g->align) &&
	       g->max_stride <= g->size / 2;
}

int rt_ring_geom_init(uint64_t size, uint64_t max_record, uint32_t align,
			 struct rgaps_ring_geom *geom_p)
{
	struct rgaps_ring_geom g;

	/* Bound everything before rounding so that no sum below can overflow. */
	if (!rgaps_is_pow2(align) || size == 0 || size > RGAPS_RING_SIZE_MAX || max_record == 0 ||
	    max_record > size)
		return -EINVAL;
	g.size = size;
	g.max_record = max_record;
	g.max_stride = RGAPS_ALIGN_UP(max_record, (uint64_t)align);
	g.align = align;
	/*
	 * size % align: a record that fits before the end then also fits with
	 * its slack, and a wrap lands on an aligned offset (0). 2 * max_stride:
	 * an empty ring takes any record, padding included, so the sender can
	 * never be stuck on a record that is too big for this ring.
	 */
	if (!geom_valid(&g))
		return -EINVAL;
	*geom_p = g;
	return 0;
}

int rt_ring_place(const struct rgaps_ring_geom *g, uint64_t cursor, uint64_t len,
		     struct rgaps_ring_slot *slot_p)
{
	uint64_t stride, off, pad, start, end;

	rgaps_require(cursor % g->align == 0);
	if (len == 0 || len > g->max_record)
		return -EINVAL;
	if (cursor > RGAPS_RING_CURSOR_LIMIT)
		return -EOVERFLOW;
	stride = RGAPS_ALIGN_UP(len, (uint64_t)g->align);
	off = cursor % g->size;
	/* A record never crosses the end: the transport writes it in one piece. */
	pad = off + stride > g->size ? g->size - off : 0;
	start = cursor + pad;
	end = start + stride;
	if (end > RGAPS_RING_CURSOR_LIMIT)
		return -EOVERFLOW;
	*slot_p = (struct rgaps_ring_slot){
		.off = start % g->size,
		.len = len,
		.start = start,
		.end = end,
		.pad = pad,
	};
	return 0;
}

void rt_ring_sender_init(struct rgaps_ring_sender *s, const struct rgaps_ring_geom *g)
{
	rgaps_require(geom_valid(g));
	*s = (struct rgaps_ring_sender){ .geom = *g };
}

int rt_ring_sender_reserve(struct rgaps_ring_sender *s, uint64_t len,
			      struct rgaps_ring_slot *slot_p)
{
	struct rgaps_ring_slot slot;
	int err;

	err = rt_ring_place(&s->geom, s->tail, len, &slot);
	if (err)
		return err;
	/*
	 * The Exceed check. In offsets it has two cases: linear (the bytes in
	 * flight [DHead, Tail) do not cross the end: free space is the end of the
	 * ring plus its start) and wrapped (they do: free space is the one gap
	 * from Tail to DHead). With cursors that never wrap both are "the new
	 * Tail may be at most one ring ahead of Delayed Head", padding included.
	 * Delayed Head <= Head, so this never overwrites unconsumed bytes.
	 */
	if (slot.end - s->dhead > s->geom.size) {
		s->stalls++;
		return -EAGAIN;
	}
	s->tail = slot.end;
	s->records++;
	s->pad_bytes += slot.pad;
	RING_DEBUG_CHECK(rt_ring_sender_check, "sender", s);
	*slot_p = slot;
	return 0;
}

int rt_ring_sender_update_dhead(struct rgaps_ring_sender *s, uint64_t head)
{
	/*
	 * Head only moves forward, never past what was written, and always to a
	 * record end, which is aligned. Anything else is a hostile or corrupt
	 * word: taking it could let the sender overwrite unconsumed bytes.
	 */
	if (head < s->dhead || head > s->tail || head % s->geom.align)
		return -EINVAL;
	s->dhead = head;
	RING_DEBUG_CHECK(rt_ring_sender_check, "sender", s);
	return 0;
}

uint64_t rt_ring_sender_used(const struct rgaps_ring_sender *s)
{
	return s->tail - s->dhead;
}

uint64_t rt_ring_sender_free(const struct rgaps_ring_sender *s)
{
	return s->geom.size - (s->tail - s->dhead);
}

/*
 * Largest report threshold that cannot deadlock. A blocked sender holds
 * Tail + F - DHead > size for the footprint F of its next record, and
 * F <= 2 * max_stride - align (padding is shorter than the record it
 * precedes), all multiples of align. So once every landed record is consumed
 * and the last report has arrived, Head - reported = Tail - DHead >= this cap,
 * and a threshold at most the cap fires. See docs/RING.md, "Watermark".
 */
static uint64_t report_cap(const struct rgaps_ring_geom *g)
{
	return g->size - 2 * g->max_stride + 2 * (uint64_t)g->align;
}

int rt_ring_receiver_init(struct rgaps_ring_receiver *r, const struct rgaps_ring_geom *g,
			     double watermark)
{
	double want;
	uint64_t bytes;

	rgaps_require(geom_valid(g));
	/* Written so that NaN fails too. */
	if (!(watermark >= 0.0 && watermark <= 1.0))
		return -EINVAL;
	/* ceil() by hand: this file needs no libm. */
	want = watermark * (double)g->size;
	if (want >= (double)g->size) {
		bytes = g->size;
	} else {
		bytes = (uint64_t)want;
		bytes += (double)bytes < want;
	}
	*r = (struct rgaps_ring_receiver){
		.geom = *g,
		.report_bytes = RGAPS_MIN(bytes, report_cap(g)),
	};
	return 0;
}

int rt_ring_receiver_expect(const struct rgaps_ring_receiver *r, uint64_t len,
			       struct rgaps_ring_slot *slot_p)
{
	struct rgaps_ring_slot slot;
	int err;

	err = rt_ring_place(&r->geom, r->tail, len, &slot);
	if (err)
		return err;
	/*
	 * An honest sender stays within DHead + size, and DHead <= Head. A record
	 * beyond Head + size has overwritten bytes not yet consumed.
	 */
	if (slot.end - r->head > r->geom.size)
		return -EPROTO;
	*slot_p = slot;
	return 0;
}

int rt_ring_receiver_verify(const struct rgaps_ring_receiver *r, uint64_t off, uint64_t len)
{
	struct rgaps_ring_slot slot;
	int err;

	err = rt_ring_receiver_expect(r, len, &slot);
	if (err)
		return err;
	/* Compare only: no arithmetic on the peer's offset, so no overflow games. */
	return off == slot.off ? 0 : -EPROTO;
}

int rt_ring_receiver_land(struct rgaps_ring_receiver *r, uint64_t len,
			     struct rgaps_ring_slot *slot_p)
{
	struct rgaps_ring_slot slot;
	int err;

	err = rt_ring_receiver_expect(r, len, &slot);
	if (err)
		return err;
	r->tail = slot.end;
	r->records++;
	r->pad_bytes += slot.pad;
	RING_DEBUG_CHECK(rt_ring_receiver_check, "receiver", r);
	*slot_p = slot;
	return 0;
}

void rt_ring_receiver_consume(struct rgaps_ring_receiver *r, const struct rgaps_ring_slot *last)
{
	/* `last` is a landed, unconsumed slot: the caller's own bookkeeping. */
	rgaps_require(last->end > r->head && last->end <= r->tail);
	rgaps_require(last->start >= r->head + last->pad && last->end % r->geom.align == 0);
	r->head = last->end;
	RING_DEBUG_CHECK(rt_ring_receiver_check, "receiver", r);
}

bool rt_ring_receiver_should_report(const struct rgaps_ring_receiver *r, uint64_t *head_p)
{
	uint64_t done = r->head - r->reported;

	if (done == 0 || done < r->report_bytes)
		return false;
	*head_p = r->head;
	return true;
}

void rt_ring_receiver_reported(struct rgaps_ring_receiver *r, uint64_t head)
{
	rgaps_require(head >= r->reported && head <= r->head);
	r->reported = head;
	r->reports++;
	RING_DEBUG_CHECK(rt_ring_receiver_check, "receiver", r);
}

uint64_t rt_ring_receiver_used(const struct rgaps_ring_receiver *r)
{
	return r->tail - r->head;
}

uint64_t rt_ring_receiver_free(const struct rgaps_ring_receiver *r)
{
	return r->geom.size - (r->tail - r->head);
}

#define RING_FAIL(why)              \
	do {                        \
		*reason_p = (why);  \
		return -EUCLEAN;    \
	} while (0)

int rt_ring_sender_check(const struct rgaps_ring_sender *s, const char **reason_p)
{
	if (!geom_valid(&s->geom))
		RING_FAIL("sender geometry is invalid");
	if (s->tail % s->geom.align || s->dhead % s->geom.align)
		RING_FAIL("sender cursor is not aligned");
	if (s->tail > RGAPS_RING_CURSOR_LIMIT)
		RING_FAIL("sender Tail is past the cursor limit");
	if (s->dhead > s->tail)
		RING_FAIL("Delayed Head is ahead of Tail");
	if (s->tail - s->dhead > s->geom.size)
		RING_FAIL("Tail passed Delayed Head + size (overwrite)");
	return 0;
}

int rt_ring_receiver_check(const struct rgaps_ring_receiver *r, const char **reason_p)
{
	if (!geom_valid(&r->geom))
		RING_FAIL("receiver geometry is invalid");
	if (r->tail % r->geom.align || r->head % r->geom.align || r->reported % r->geom.align)
		RING_FAIL("receiver cursor is not aligned");
	if (r->tail > RGAPS_RING_CURSOR_LIMIT)
		RING_FAIL("receiver Tail is past the cursor limit");
	if (r->head > r->tail)
		RING_FAIL("Head passed Tail");
	if (r->tail - r->head > r->geom.size)
		RING_FAIL("receiver holds more than size unconsumed bytes (overwrite)");
	if (r->reported > r->head)
		RING_FAIL("reported Head is ahead of Head");
	if (r->report_bytes > report_cap(&r->geom))
		RING_FAIL("watermark threshold above the deadlock-free cap");
	return 0;
}

int rt_ring_check(const struct rgaps_ring_sender *s, const struct rgaps_ring_receiver *r,
		     const char **reason_p)
{
	int err;

	err = rt_ring_sender_check(s, reason_p);
	if (err)
		return err;
	err = rt_ring_receiver_check(r, reason_p);
	if (err)
		return err;
	if (s->geom.size != r->geom.size || s->geom.max_record != r->geom.max_record ||
	    s->geom.align != r->geom.align)
		RING_FAIL("sender and receiver geometries differ");
	if (r->tail > s->tail)
		RING_FAIL("receiver landed past the sender's Tail");
	if (r->head > s->tail)
		RING_FAIL("Head passed Tail");
	if (s->dhead > r->head)
		RING_FAIL("Delayed Head leads Head");
	if (s->dhead > r->reported)
		RING_FAIL("Delayed Head leads the last reported Head");
	if (s->tail - s->dhead > s->geom.size)
		RING_FAIL("Tail passed Delayed Head + size (overwrite)");
	return 0;
}
