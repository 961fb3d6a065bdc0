/*
 * Pure arithmetic of the DP2 receive ring (docs/ARCHITECTURE.md section 4, drawn in
 * docs/RING.md): where a record goes, when the sender must stop (the "Exceed"
 * check against its Delayed Head), how the receiver follows the same placement
 * from record lengths alone, and when it writes Head back (the watermark). No
 * memory is touched and nothing is allocated: the verbs and TCP transports keep
 * one struct rgaps_ring_sender or rgaps_ring_receiver per (topic, peer) and do
 * the I/O themselves. Cursors are monotonic 64-bit byte counts that never wrap;
 * a ring offset is cursor % size. Every value that comes from a peer (a record
 * length, a claimed offset, a Head written back) is checked and refused with a
 * negative errno; rgaps_require() fires only on the caller's own bugs.
 *
 * Not thread-safe: each struct belongs to the thread that drives its transport.
 */
#ifndef RGAPS_COMMON_RING_H
#define RGAPS_COMMON_RING_H

#include <stdbool.h>
#include <stdint.h>

/* Default record alignment: a cache line, so every record starts aligned. */
#define RGAPS_RING_ALIGN 64u
/* Largest ring accepted: keeps every sum of a cursor and a few sizes below 2^64. */
#define RGAPS_RING_SIZE_MAX (1ull << 56)
/*
 * No cursor may pass this. 2^63 bytes is ~2.9 years of 100 GB/s on one ring;
 * a transport that meets -EOVERFLOW re-creates the ring (reconnects).
 */
#define RGAPS_RING_CURSOR_LIMIT (1ull << 63)

/* Shape of a ring, identical on both sides (agreed in the connection handshake). */
struct rgaps_ring_geom {
	uint64_t size;	     /* ring bytes, a multiple of align */
	uint64_t max_record; /* largest record length accepted */
	uint64_t max_stride; /* max_record rounded up to align; 2 * max_stride <= size */
	uint32_t align;	     /* record start alignment, a power of two */
};

/*
 * Where one record lies. The record owns the cursor range [start - pad, end):
 * the padding skipped at the end of the ring, its bytes, and the slack up to
 * the next aligned cursor. All of it is freed when the record is consumed.
 */
struct rgaps_ring_slot {
	uint64_t off;	/* ring offset of the first byte: start % size; off + len <= size */
	uint64_t len;	/* record bytes, as asked */
	uint64_t start; /* cursor of the first byte */
	uint64_t end;	/* cursor after the record and its slack: the next Tail */
	uint64_t pad;	/* bytes skipped before start to avoid crossing the end (0: none) */
};

/* Sender side: its Tail and its conservative copy of the receiver's Head. */
struct rgaps_ring_sender {
	struct rgaps_ring_geom geom;
	uint64_t tail;	/* next write cursor */
	uint64_t dhead; /* Delayed Head: last Head the receiver wrote back; <= true Head */
	uint64_t records;   /* records reserved */
	uint64_t pad_bytes; /* bytes lost to padding at wraps */
	uint64_t stalls;    /* reserve() calls refused with -EAGAIN */
};

/* Receiver side: its view of Tail, its Head, and the last Head it reported. */
struct rgaps_ring_receiver {
	struct rgaps_ring_geom geom;
	uint64_t tail;	       /* end of the last landed record */
	uint64_t head;	       /* every byte before it is consumed */
	uint64_t reported;     /* last Head handed to the sender */
	uint64_t report_bytes; /* consumed bytes since `reported` that call for a report */
	uint64_t records;      /* records landed */
	uint64_t pad_bytes;    /* bytes lost to padding at wraps */
	uint64_t reports;      /* Heads reported */
};

/**
 * Check and fill a ring geometry. Values may come from a peer's handshake, so
 * nothing is asserted.
 *
 * @param size        ring bytes: a multiple of align, at most RGAPS_RING_SIZE_MAX
 * @param max_record  largest record, > 0, with 2 * ALIGN_UP(max_record, align) <= size
 * @param align       record alignment, a power of two (RGAPS_RING_ALIGN usually)
 * @param geom_p      filled on success only
 * @return 0, or -EINVAL for any value outside the bounds above
 */
int rt_ring_geom_init(uint64_t size, uint64_t max_record, uint32_t align,
			 struct rgaps_ring_geom *geom_p);

/**
 * The placement rule both sides apply: a record of len bytes written when the
 * cursor is at `cursor` starts there, or at the next multiple of size if it
 * would cross the end of the ring. Pure; used by reserve() and land().
 *
 * @param cursor  an aligned cursor (a Tail)
 * @return 0; -EINVAL if len is 0 or > max_record; -EOVERFLOW if the record would
 *         end past RGAPS_RING_CURSOR_LIMIT
 */
int rt_ring_place(const struct rgaps_ring_geom *g, uint64_t cursor, uint64_t len,
		     struct rgaps_ring_slot *slot_p);

/** Start a sender at cursor 0 with an empty ring. g must come from rt_ring_geom_init(). */
void rt_ring_sender_init(struct rgaps_ring_sender *s, const struct rgaps_ring_geom *g);

/**
 * Reserve the next record and advance Tail past it (and its padding). Uses
 * local state only: the Exceed check is slot.end - Delayed Head <= size.
 *
 * @return 0 with *slot_p filled; -EINVAL if len is 0 or > max_record; -EAGAIN if
 *         the record does not fit until a newer Head arrives (nothing changes);
 *         -EOVERFLOW at the cursor limit
 */
int rt_ring_sender_reserve(struct rgaps_ring_sender *s, uint64_t len,
			      struct rgaps_ring_slot *slot_p);

/**
 * Take a Head written back by the receiver as the new Delayed Head. The value
 * comes from the peer: it must not go backward, pass Tail, or be unaligned.
 * Repeating the current value is accepted (the sender polls one word).
 *
 * @return 0, or -EINVAL for a hostile or corrupt value (nothing changes)
 */
int rt_ring_sender_update_dhead(struct rgaps_ring_sender *s, uint64_t head);

/** Bytes in flight as far as the sender knows: Tail - Delayed Head (padding included). */
uint64_t rt_ring_sender_used(const struct rgaps_ring_sender *s);
/** size - used: reserve() succeeds iff the record's footprint (padding included) <= this. */
uint64_t rt_ring_sender_free(const struct rgaps_ring_sender *s);

/**
 * Start a receiver at cursor 0 with an empty ring.
 *
 * @param watermark  fraction of the ring consumed between two Head reports, in
 *                   [0, 1]; 0 reports after every record. The byte threshold is
 *                   capped so that a blocked sender always gets a report (see
 *                   docs/RING.md, "Watermark"), so 1.0 means "as late as is safe".
 * @return 0, or -EINVAL for a watermark outside [0, 1] or NaN
 */
int rt_ring_receiver_init(struct rgaps_ring_receiver *r, const struct rgaps_ring_geom *g,
			     double watermark);

/**
 * Where the next record of len bytes must be, without landing it.
 *
 * @return 0 with *slot_p filled; -EINVAL if len is 0 or > max_record; -EPROTO if
 *         the record would overwrite unconsumed bytes (the peer ignored the
 *         Exceed check); -EOVERFLOW at the cursor limit
 */
int rt_ring_receiver_expect(const struct rgaps_ring_receiver *r, uint64_t len,
			       struct rgaps_ring_slot *slot_p);

/**
 * Check an offset a peer claims for the next record against the placement rule.
 *
 * @return 0 if (off, len) is exactly where the next record goes; the errors of
 *         expect(); -EPROTO for any other offset
 */
int rt_ring_receiver_verify(const struct rgaps_ring_receiver *r, uint64_t off, uint64_t len);

/**
 * A record of len bytes arrived (in order): find it and advance the receiver's
 * Tail past it. Errors as expect(); on error nothing changes and the peer
 * should be disconnected.
 */
int rt_ring_receiver_land(struct rgaps_ring_receiver *r, uint64_t len,
			     struct rgaps_ring_slot *slot_p);

/**
 * Release every landed record up to and including `last` (one or a batch, in
 * order): Head moves to last->end. `last` must be a slot returned by land()
 * and not yet consumed; anything else is a caller bug (rgaps_require).
 */
void rt_ring_receiver_consume(struct rgaps_ring_receiver *r, const struct rgaps_ring_slot *last);

/**
 * Whether Head should be written back now: something was consumed since the
 * last report and at least the watermark's bytes. On true, *head_p is the value
 * to write; call reported() once the write is posted.
 */
bool rt_ring_receiver_should_report(const struct rgaps_ring_receiver *r, uint64_t *head_p);

/** The write of `head` (a value should_report() gave) is posted. */
void rt_ring_receiver_reported(struct rgaps_ring_receiver *r, uint64_t head);

/** Landed, unconsumed bytes: Tail - Head (padding included). */
uint64_t rt_ring_receiver_used(const struct rgaps_ring_receiver *r);
/** size - used. */
uint64_t rt_ring_receiver_free(const struct rgaps_ring_receiver *r);

/**
 * Invariants of one side alone (what a debug build can see on one host).
 *
 * @return 0, or -EUCLEAN with *reason_p set to a static sentence
 */
int rt_ring_sender_check(const struct rgaps_ring_sender *s, const char **reason_p);
int rt_ring_receiver_check(const struct rgaps_ring_receiver *r, const char **reason_p);

/**
 * Invariants of a sender and its receiver together (tests, loopback): each side
 * alone, the same geometry, and the three rules of docs/ARCHITECTURE.md section 4: Tail
 * never passes Delayed Head + size, Head never passes Tail, Delayed Head never
 * leads Head (nor the last reported Head).
 *
 * @return 0, or -EUCLEAN with *reason_p set to a static sentence
 */
int rt_ring_check(const struct rgaps_ring_sender *s, const struct rgaps_ring_receiver *r,
		     const char **reason_p);

#endif
