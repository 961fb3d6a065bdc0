/*
 * Offset-based TLSF allocator behind each publisher's payload pool. The pool may
 * be device memory, so block headers are out of band: one descriptor per block
 * in the state, linked by index, never by pointer. The state is private to the
 * pool's owner (the publisher, topic_pub.c): nobody else allocates from it.
 * Sizes are kept in bytes but classified in units of the alignment, so the same
 * class table serves a 1 MiB host pool with 8-byte alignment and a 1 TiB device
 * pool with 256-byte alignment.
 */
#include "tlsf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

#define TLSF_MAGIC 0x544c534652475031ull /* "TLSFRGP1" read big-endian; bump on layout change */
#define NIL RGAPS_TLSF_NIL
#define FL_COUNT RGAPS_TLSF_FL_COUNT
#define SL_LOG2 RGAPS_TLSF_SL_LOG2
#define SL_COUNT RGAPS_TLSF_SL_COUNT

/*
 * Units below SL_COUNT get one class each (first level 0, linear); above, the
 * first level is log2(units) - SL_LOG2 + 1, so a pool must stay below
 * 2^(FL_COUNT + SL_LOG2 - 1) units for its largest block to have a class.
 */
#define TLSF_MAX_UNITS_LOG2 (FL_COUNT + SL_LOG2 - 1)

/*
 * When the good-fit class search finds nothing, the request's own class may
 * still hold a block big enough: a request for the whole pool, when the pool
 * is one free block whose size is not a class boundary, is only ever found
 * there. Looking at a few of its members keeps alloc O(1) while making the last
 * free bytes of a nearly full pool reachable.
 */
#define TLSF_FALLBACK_SCAN 8

_Static_assert(FL_COUNT > 32 && FL_COUNT < 32 + 64, "first level is fl_bitmap + fl_bitmap_hi");
_Static_assert(SL_COUNT <= 32, "second-level bitmap is 32 bits");
_Static_assert(TLSF_MAX_UNITS_LOG2 < 64, "unit counts must fit a uint64_t");

static inline unsigned int fls64(uint64_t x)
{
	return 63u - (unsigned int)__builtin_clzll(x);
}

/* Class of a block of `units` alignment units (units >= 1). */
static void mapping(uint64_t units, unsigned int *fl_p, unsigned int *sl_p)
{
	unsigned int l;

	if (units < SL_COUNT) {
		*fl_p = 0;
		*sl_p = (unsigned int)units;
		return;
	}
	l = fls64(units);
	*fl_p = l - SL_LOG2 + 1;
	*sl_p = (unsigned int)(units >> (l - SL_LOG2)) & (SL_COUNT - 1);
}

/*
 * Round units up to the next class boundary, so that every member of the class
 * it maps to is big enough: the head of any list found from there fits without
 * walking the list (good fit).
 */
static uint64_t mapping_round_up(uint64_t units)
{
	if (units < SL_COUNT)
		return units;
	return units + (1ull << (fls64(units) - SL_LOG2)) - 1;
}

static inline struct rgaps_tlsf_block *blk(struct rgaps_tlsf *t, uint32_t id)
{
	return &t->blocks[id];
}

static void fl_set(struct rgaps_tlsf *t, unsigned int fl)
{
	if (fl < 32)
		t->fl_bitmap = t->fl_bitmap | (1u << fl);
	else
		t->fl_bitmap_hi = t->fl_bitmap_hi | (1ull << (fl - 32));
}

static void fl_clear(struct rgaps_tlsf *t, unsigned int fl)
{
	if (fl < 32)
		t->fl_bitmap = t->fl_bitmap & (~(1u << fl));
	else
		t->fl_bitmap_hi = t->fl_bitmap_hi & (~(1ull << (fl - 32)));
}

static int fl_isset(const struct rgaps_tlsf *t, unsigned int fl)
{
	if (fl < 32)
		return !!(t->fl_bitmap & (1u << fl));
	return !!(t->fl_bitmap_hi & (1ull << (fl - 32)));
}

/* Lowest non-empty first-level class >= fl, or -1. */
static int fl_find_from(const struct rgaps_tlsf *t, unsigned int fl)
{
	uint64_t hi;

	if (fl >= FL_COUNT)
		return -1;
	if (fl < 32) {
		uint32_t lo = t->fl_bitmap & (~0u << fl);

		if (lo)
			return __builtin_ctz(lo);
		hi = t->fl_bitmap_hi;
	} else {
		hi = t->fl_bitmap_hi & (~0ull << (fl - 32));
	}
	return hi ? 32 + __builtin_ctzll(hi) : -1;
}

/* Highest non-empty first-level class, or -1. */
static int fl_find_last(const struct rgaps_tlsf *t)
{
	if (t->fl_bitmap_hi)
		return 32 + (int)fls64(t->fl_bitmap_hi);
	if (t->fl_bitmap)
		return (int)fls64(t->fl_bitmap);
	return -1;
}

static void free_list_insert(struct rgaps_tlsf *t, uint32_t id)
{
	struct rgaps_tlsf_block *b = blk(t, id);
	unsigned int fl, sl;
	uint32_t head;

	mapping(b->size >> t->align_shift, &fl, &sl);
	head = t->heads[fl][sl];
	b->state = RGAPS_TLSF_FREE;
	b->prev_free = NIL;
	b->next_free = head;
	if (head != NIL)
		blk(t, head)->prev_free = id;
	t->heads[fl][sl] = id;
	t->sl_bitmap[fl] = t->sl_bitmap[fl] | (1u << sl);
	fl_set(t, fl);
	t->free_blocks = t->free_blocks + 1;
}

/* Takes a FREE block off its list; the caller sets its new state. */
static void free_list_remove(struct rgaps_tlsf *t, uint32_t id)
{
	struct rgaps_tlsf_block *b = blk(t, id);
	unsigned int fl, sl;

	mapping(b->size >> t->align_shift, &fl, &sl);
	if (b->prev_free != NIL)
		blk(t, b->prev_free)->next_free = b->next_free;
	else
		t->heads[fl][sl] = b->next_free;
	if (b->next_free != NIL)
		blk(t, b->next_free)->prev_free = b->prev_free;
	if (t->heads[fl][sl] == NIL) {
		t->sl_bitmap[fl] = t->sl_bitmap[fl] & (~(1u << sl));
		if (!t->sl_bitmap[fl])
			fl_clear(t, fl);
	}
	b->prev_free = NIL;
	b->next_free = NIL;
	t->free_blocks = t->free_blocks - 1;
}

static uint32_t spare_take(struct rgaps_tlsf *t)
{
	uint32_t id = t->spare_head;

	rgaps_require(id != NIL && blk(t, id)->state == RGAPS_TLSF_SPARE);
	t->spare_head = blk(t, id)->next_free;
	return id;
}

static void spare_put(struct rgaps_tlsf *t, uint32_t id)
{
	struct rgaps_tlsf_block *b = blk(t, id);

	b->off = 0;
	b->size = 0;
	b->state = RGAPS_TLSF_SPARE;
	b->prev_phys = NIL;
	b->next_phys = NIL;
	b->prev_free = NIL;
	b->next_free = t->spare_head;
	t->spare_head = id;
}

/* Absorb the physical successor `next` (FREE, already off its list) into `id`. */
static void absorb_next(struct rgaps_tlsf *t, uint32_t id, uint32_t next)
{
	struct rgaps_tlsf_block *b = blk(t, id), *n = blk(t, next);

	b->size = b->size + (n->size);
	b->next_phys = n->next_phys;
	if (b->next_phys != NIL)
		blk(t, b->next_phys)->prev_phys = id;
	spare_put(t, next);
}

size_t rgaps__tlsf_state_size(uint32_t nblocks)
{
	return sizeof(struct rgaps_tlsf) + (size_t)nblocks * sizeof(struct rgaps_tlsf_block);
}

int rgaps__tlsf_init(struct rgaps_tlsf *t, uint64_t pool_size, uint32_t nblocks, uint32_t align)
{
	unsigned int shift;
	uint64_t units;

	if (!t || nblocks < 2 || align < 8 || !rgaps_is_pow2(align))
		return -EINVAL;
	shift = (unsigned int)__builtin_ctz(align);
	units = pool_size >> shift;
	if (units == 0 || units >> TLSF_MAX_UNITS_LOG2)
		return -EINVAL;

	memset(t, 0, sizeof(*t));
	t->magic = TLSF_MAGIC;
	t->pool_size = units << shift;
	t->align_shift = shift;
	t->nblocks = nblocks;
	for (unsigned int fl = 0; fl < FL_COUNT; fl++)
		for (unsigned int sl = 0; sl < SL_COUNT; sl++)
			t->heads[fl][sl] = NIL;

	/* Spares are pushed from the top so that low ids are handed out first. */
	t->spare_head = NIL;
	for (uint32_t id = nblocks - 1; id >= 1; id--)
		spare_put(t, id);

	memset(blk(t, 0), 0, sizeof(struct rgaps_tlsf_block));
	blk(t, 0)->off = 0;
	blk(t, 0)->size = t->pool_size;
	blk(t, 0)->prev_phys = NIL;
	blk(t, 0)->next_phys = NIL;
	free_list_insert(t, 0);
	return 0;
}

/* Head of the first non-empty list at class (fl, sl) or above, or NIL. */
static uint32_t find_from_class(const struct rgaps_tlsf *t, unsigned int fl, unsigned int sl)
{
	uint32_t sl_map;
	int f;

	if (fl >= FL_COUNT)
		return NIL;
	sl_map = t->sl_bitmap[fl] & (~0u << sl);
	if (!sl_map) {
		f = fl_find_from(t, fl + 1);
		if (f < 0)
			return NIL;
		fl = (unsigned int)f;
		sl_map = t->sl_bitmap[fl];
	}
	return t->heads[fl][__builtin_ctz(sl_map)];
}

static uint32_t find_block(const struct rgaps_tlsf *t, uint64_t size)
{
	uint64_t units = size >> t->align_shift;
	unsigned int fl, sl, n;
	uint32_t id;

	mapping(mapping_round_up(units), &fl, &sl);
	id = find_from_class(t, fl, sl);
	if (id != NIL)
		return id;

	mapping(units, &fl, &sl);
	id = t->heads[fl][sl];
	for (n = 0; id != NIL && n < TLSF_FALLBACK_SCAN; n++) {
		if (t->blocks[id].size >= size)
			return id;
		id = t->blocks[id].next_free;
	}
	return NIL;
}

int rgaps__tlsf_alloc(struct rgaps_tlsf *t, uint64_t size, uint32_t *block_p)
{
	struct rgaps_tlsf_block *b, *r;
	uint32_t id, rest;

	if (!t || !block_p || size == 0)
		return -EINVAL;
	rgaps_require(t->magic == TLSF_MAGIC);
	/* Checked before rounding, which therefore cannot overflow. */
	if (size > t->pool_size)
		return -ENOMEM;
	size = RGAPS_ALIGN_UP(size, 1ull << t->align_shift);

	id = find_block(t, size);
	if (id == NIL)
		return -ENOMEM;
	b = blk(t, id);
	/* Refuse before touching anything, so a failed call leaves the state as it was. */
	if (b->size > size && t->spare_head == NIL)
		return -ENOSPC;

	free_list_remove(t, id);
	if (b->size > size) {
		rest = spare_take(t);
		r = blk(t, rest);
		r->off = b->off + size;
		r->size = b->size - size;
		r->prev_phys = id;
		r->next_phys = b->next_phys;
		if (r->next_phys != NIL)
			blk(t, r->next_phys)->prev_phys = rest;
		b->next_phys = rest;
		b->size = size;
		free_list_insert(t, rest);
	}
	b->state = RGAPS_TLSF_USED;
	t->used_bytes = t->used_bytes + (b->size);
	t->used_blocks = t->used_blocks + 1;
	*block_p = id;
	return 0;
}

void rgaps__tlsf_free(struct rgaps_tlsf *t, uint32_t block)
{
	struct rgaps_tlsf_block *b;
	uint32_t prev, next;

	rgaps_require(t && t->magic == TLSF_MAGIC);
	rgaps_require(rgaps__tlsf_is_used(t, block));
	b = blk(t, block);
	t->used_bytes = t->used_bytes - (b->size);
	t->used_blocks = t->used_blocks - 1;

	prev = b->prev_phys;
	if (prev != NIL && blk(t, prev)->state == RGAPS_TLSF_FREE) {
		/* The lower neighbour survives: its id and offset stay, block becomes spare. */
		free_list_remove(t, prev);
		absorb_next(t, prev, block);
		block = prev;
		b = blk(t, block);
	}
	next = b->next_phys;
	if (next != NIL && blk(t, next)->state == RGAPS_TLSF_FREE) {
		free_list_remove(t, next);
		absorb_next(t, block, next);
	}
	free_list_insert(t, block);
}

uint64_t rgaps__tlsf_fit_size(uint64_t size, uint32_t align)
{
	unsigned int shift = (unsigned int)__builtin_ctz(align);
	uint64_t units = RGAPS_ALIGN_UP(size ? size : 1, (uint64_t)align) >> shift;
	uint64_t r = mapping_round_up(units);

	/* The lower bound of the class find_block() starts its search at. */
	if (r >= SL_COUNT)
		r = r >> (fls64(r) - SL_LOG2) << (fls64(r) - SL_LOG2);
	return r << shift;
}

int rgaps__tlsf_is_used(const struct rgaps_tlsf *t, uint32_t block)
{
	return t && block < t->nblocks && t->blocks[block].state == RGAPS_TLSF_USED;
}

uint64_t rgaps__tlsf_offset(const struct rgaps_tlsf *t, uint32_t block)
{
	rgaps_require(rgaps__tlsf_is_used(t, block));
	return t->blocks[block].off;
}

uint64_t rgaps__tlsf_size(const struct rgaps_tlsf *t, uint32_t block)
{
	rgaps_require(rgaps__tlsf_is_used(t, block));
	return t->blocks[block].size;
}

void rgaps__tlsf_get_stats(const struct rgaps_tlsf *t, struct rgaps_tlsf_stats *st)
{
	int fl;

	memset(st, 0, sizeof(*st));
	st->pool_size = t->pool_size;
	st->used_bytes = t->used_bytes;
	st->free_bytes = t->pool_size - t->used_bytes;
	st->used_blocks = t->used_blocks;
	st->free_blocks = t->free_blocks;
	/* Every descriptor is SPARE, FREE or USED, so spares need no counter of their own. */
	st->spare_descriptors = (uint32_t)(t->nblocks - t->used_blocks - t->free_blocks);

	/* The largest free block is in the highest non-empty list; only that list is walked. */
	fl = fl_find_last(t);
	if (fl >= 0) {
		unsigned int sl = fls64(t->sl_bitmap[fl]);

		for (uint32_t id = t->heads[fl][sl]; id != NIL; id = t->blocks[id].next_free)
			st->largest_free = RGAPS_MAX(st->largest_free, t->blocks[id].size);
	}
	if (st->free_bytes)
		st->fragmentation = 1.0 - (double)st->largest_free / (double)st->free_bytes;
}

RGAPS_PRINTF(3, 4)
static int check_fail(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	if (why && whylen) {
		va_start(ap, fmt);
		vsnprintf(why, whylen, fmt, ap);
		va_end(ap);
	}
	return -EUCLEAN;
}

#define FAIL(...) return check_fail(why, whylen, __VA_ARGS__)

/*
 * Every walk is bounded by nblocks and every index is range-checked before it
 * is followed, because the state may have been scribbled on by a crashed
 * process: the check must report that, never loop or read out of bounds.
 */
static int check_header(const struct rgaps_tlsf *t, char *why, size_t whylen)
{
	if (t->magic != TLSF_MAGIC)
		FAIL("bad magic %#llx", (unsigned long long)t->magic);
	if (t->align_shift < 3 || t->align_shift > 31)
		FAIL("align_shift %u out of range [3, 31]", t->align_shift);
	if (t->nblocks < 2)
		FAIL("nblocks %u < 2", t->nblocks);
	if (t->pool_size == 0 || t->pool_size & ((1ull << t->align_shift) - 1))
		FAIL("pool_size %llu is zero or not a multiple of %llu",
		     (unsigned long long)t->pool_size, 1ull << t->align_shift);
	if ((t->pool_size >> t->align_shift) >> TLSF_MAX_UNITS_LOG2)
		FAIL("pool_size %llu too large for the class table",
		     (unsigned long long)t->pool_size);
	if (t->used_blocks + t->free_blocks > t->nblocks)
		FAIL("used_blocks %llu + free_blocks %llu exceed nblocks %u",
		     (unsigned long long)t->used_blocks, (unsigned long long)t->free_blocks,
		     t->nblocks);
	if (t->used_bytes > t->pool_size)
		FAIL("used_bytes %llu exceed pool_size %llu", (unsigned long long)t->used_bytes,
		     (unsigned long long)t->pool_size);
	return 0;
}

static int check_phys(const struct rgaps_tlsf *t, char *why, size_t whylen)
{
	uint64_t align_mask = (1ull << t->align_shift) - 1;
	uint64_t live = 0, used = 0, used_bytes = 0, free = 0, off = 0;
	uint32_t first = NIL, id, prev, steps;

	for (id = 0; id < t->nblocks; id++) {
		const struct rgaps_tlsf_block *b = &t->blocks[id];

		switch (b->state) {
		case RGAPS_TLSF_SPARE:
			continue;
		case RGAPS_TLSF_FREE:
			free++;
			break;
		case RGAPS_TLSF_USED:
			used++;
			used_bytes += b->size;
			break;
		default:
			FAIL("block %u has unknown state %u", id, b->state);
		}
		live++;
		if (b->prev_phys == NIL) {
			if (first != NIL)
				FAIL("blocks %u and %u both claim to be first", first, id);
			first = id;
		}
	}
	if (used != t->used_blocks)
		FAIL("%llu USED descriptors but used_blocks is %llu", (unsigned long long)used,
		     (unsigned long long)t->used_blocks);
	if (free != t->free_blocks)
		FAIL("%llu FREE descriptors but free_blocks is %llu", (unsigned long long)free,
		     (unsigned long long)t->free_blocks);
	if (used_bytes != t->used_bytes)
		FAIL("USED blocks hold %llu bytes but used_bytes is %llu",
		     (unsigned long long)used_bytes, (unsigned long long)t->used_bytes);
	if (first == NIL)
		FAIL("no block starts the physical chain");

	prev = NIL;
	steps = 0;
	for (id = first; id != NIL; prev = id, id = t->blocks[id].next_phys) {
		const struct rgaps_tlsf_block *b;

		if (id >= t->nblocks)
			FAIL("block %u links to out-of-range next_phys %u", prev, id);
		if (++steps > live)
			FAIL("physical chain longer than the %llu live blocks (cycle?)",
			     (unsigned long long)live);
		b = &t->blocks[id];
		if (b->state != RGAPS_TLSF_FREE && b->state != RGAPS_TLSF_USED)
			FAIL("block %u in the physical chain is not FREE or USED", id);
		if (b->prev_phys != prev)
			FAIL("block %u has prev_phys %u, expected %u", id, b->prev_phys, prev);
		if (b->off != off)
			FAIL("block %u at offset %llu, expected %llu", id,
			     (unsigned long long)b->off, (unsigned long long)off);
		if (b->size == 0 || b->size & align_mask)
			FAIL("block %u size %llu is zero or unaligned", id,
			     (unsigned long long)b->size);
		if (b->size > t->pool_size - off)
			FAIL("block %u [%llu, +%llu) runs past the pool end %llu", id,
			     (unsigned long long)off, (unsigned long long)b->size,
			     (unsigned long long)t->pool_size);
		if (prev != NIL && b->state == RGAPS_TLSF_FREE &&
		    t->blocks[prev].state == RGAPS_TLSF_FREE)
			FAIL("adjacent free blocks %u and %u were not merged", prev, id);
		off += b->size;
	}
	if (off != t->pool_size)
		FAIL("physical chain covers %llu bytes of %llu", (unsigned long long)off,
		     (unsigned long long)t->pool_size);
	if (steps != live)
		FAIL("physical chain holds %u of %llu live blocks", steps,
		     (unsigned long long)live);
	return 0;
}

/* One class list: links, states and sizes; counts its members into *listed. */
static int check_list(const struct rgaps_tlsf *t, unsigned int fl, unsigned int sl,
		      uint64_t *listed, char *why, size_t whylen)
{
	uint32_t id = t->heads[fl][sl], prev = NIL;
	int bit = !!(t->sl_bitmap[fl] & (1u << sl));

	if (bit != (id != NIL))
		FAIL("class (%u, %u): bitmap bit %d but head %u", fl, sl, bit, id);
	for (; id != NIL; prev = id, id = t->blocks[id].next_free) {
		const struct rgaps_tlsf_block *b;
		unsigned int bfl, bsl;

		if (id >= t->nblocks)
			FAIL("class (%u, %u): out-of-range id %u after %u", fl, sl, id, prev);
		if (++*listed > t->free_blocks)
			FAIL("free lists hold more than free_blocks %llu (cycle?)",
			     (unsigned long long)t->free_blocks);
		b = &t->blocks[id];
		if (b->state != RGAPS_TLSF_FREE)
			FAIL("class (%u, %u): block %u is listed but in state %u", fl, sl, id,
			     b->state);
		if (b->prev_free != prev)
			FAIL("class (%u, %u): block %u has prev_free %u, expected %u", fl, sl, id,
			     b->prev_free, prev);
		mapping(b->size >> t->align_shift, &bfl, &bsl);
		if (bfl != fl || bsl != sl)
			FAIL("block %u of size %llu is listed in class (%u, %u), not (%u, %u)", id,
			     (unsigned long long)b->size, fl, sl, bfl, bsl);
	}
	return 0;
}

static int check_free_lists(const struct rgaps_tlsf *t, char *why, size_t whylen)
{
	uint64_t listed = 0;
	int rc;

	if (t->fl_bitmap_hi >> (FL_COUNT - 32))
		FAIL("fl_bitmap_hi %#llx has bits beyond class %u",
		     (unsigned long long)t->fl_bitmap_hi, FL_COUNT - 1);
	for (unsigned int fl = 0; fl < FL_COUNT; fl++) {
		if (fl_isset(t, fl) != !!t->sl_bitmap[fl])
			FAIL("first-level bit %u is %d but sl_bitmap is %#x", fl, fl_isset(t, fl),
			     t->sl_bitmap[fl]);
		for (unsigned int sl = 0; sl < SL_COUNT; sl++) {
			rc = check_list(t, fl, sl, &listed, why, whylen);
			if (rc)
				return rc;
		}
	}
	if (listed != t->free_blocks)
		FAIL("free lists hold %llu blocks but free_blocks is %llu",
		     (unsigned long long)listed, (unsigned long long)t->free_blocks);
	return 0;
}

static int check_spares(const struct rgaps_tlsf *t, char *why, size_t whylen)
{
	uint64_t expect = t->nblocks - t->used_blocks - t->free_blocks, n = 0;
	uint32_t prev = NIL;

	for (uint32_t id = t->spare_head; id != NIL; prev = id, id = t->blocks[id].next_free) {
		if (id >= t->nblocks)
			FAIL("spare list: out-of-range id %u after %u", id, prev);
		if (++n > expect)
			FAIL("spare list longer than the %llu spare descriptors (cycle?)",
			     (unsigned long long)expect);
		if (t->blocks[id].state != RGAPS_TLSF_SPARE)
			FAIL("spare list: block %u is in state %u", id, t->blocks[id].state);
	}
	if (n != expect)
		FAIL("spare list holds %llu of %llu spare descriptors", (unsigned long long)n,
		     (unsigned long long)expect);
	return 0;
}

int rgaps__tlsf_check(const struct rgaps_tlsf *t, char *why, size_t whylen)
{
	int rc;

	if (!t)
		FAIL("state is NULL");
	/* Order matters: later walks rely on the header and counters checked first. */
	rc = check_header(t, why, whylen);
	if (!rc)
		rc = check_phys(t, why, whylen);
	if (!rc)
		rc = check_free_lists(t, why, whylen);
	if (!rc)
		rc = check_spares(t, why, whylen);
	return rc;
}
