/*
 * Offset-based TLSF (two-level segregated fit) allocator for a topic's pool.
 *
 * The pool itself may be GPU memory that the CPU cannot touch, so every block
 * header lives out of band, in this state structure, in the private memory of
 * the pool's owner. The state holds no pointers, only offsets and descriptor
 * indices.
 *
 * A block is named by its descriptor index ("block id"), stable from alloc to
 * free; callers keep per-block data (reference counts) in arrays indexed by it.
 * Allocation and free are O(1); free coalesces with both physical neighbours.
 *
 * Not thread-safe: the caller serialises every call (a publisher handle is used
 * from one thread at a time).
 */
#ifndef RGAPS_COMMON_TLSF_H
#define RGAPS_COMMON_TLSF_H

#include <stdint.h>
#include <stddef.h>

#define RGAPS_TLSF_NIL UINT32_MAX
#define RGAPS_TLSF_FL_COUNT 40 /* first-level classes: sizes up to 2^(FL_COUNT + align_shift) */
#define RGAPS_TLSF_SL_LOG2 5
#define RGAPS_TLSF_SL_COUNT (1u << RGAPS_TLSF_SL_LOG2)

enum rgaps_tlsf_block_state {
	RGAPS_TLSF_SPARE = 0, /* descriptor unused, on the spare list */
	RGAPS_TLSF_FREE = 1,  /* describes a free range of the pool */
	RGAPS_TLSF_USED = 2,  /* describes an allocated range */
};

struct rgaps_tlsf_block {
	uint64_t off;	    /* byte offset in the pool */
	uint64_t size;	    /* bytes, a multiple of the alignment */
	uint32_t prev_phys; /* descriptor of the block just below, or NIL */
	uint32_t next_phys; /* descriptor of the block just above, or NIL */
	uint32_t prev_free; /* free-list links (FREE) / spare-list link (SPARE, next_free) */
	uint32_t next_free;
	uint32_t state; /* enum rgaps_tlsf_block_state */
	uint32_t pad;
};

struct rgaps_tlsf {
	uint64_t magic;
	uint64_t pool_size;   /* bytes managed, rounded down to the alignment */
	uint32_t align_shift; /* log2 of the alignment (and minimum block size) */
	uint32_t nblocks;     /* descriptor capacity */
	uint32_t spare_head;  /* first SPARE descriptor, or NIL */
	uint32_t fl_bitmap;   /* bit f set: some list in class f is non-empty (f < 32) */
	uint64_t fl_bitmap_hi; /* classes >= 32 */
	uint32_t sl_bitmap[RGAPS_TLSF_FL_COUNT];
	uint32_t heads[RGAPS_TLSF_FL_COUNT][RGAPS_TLSF_SL_COUNT];
	uint64_t used_bytes;
	uint64_t used_blocks;
	uint64_t free_blocks;
	struct rgaps_tlsf_block blocks[]; /* nblocks descriptors */
};

struct rgaps_tlsf_stats {
	uint64_t pool_size;
	uint64_t used_bytes;
	uint64_t free_bytes;
	uint64_t largest_free; /* largest single free block */
	uint64_t used_blocks;
	uint64_t free_blocks;
	uint32_t spare_descriptors;
	double fragmentation; /* 1 - largest_free / free_bytes; 0 when nothing is free */
};

/* Bytes the state needs for nblocks descriptors. */
size_t rgaps__tlsf_state_size(uint32_t nblocks);

/*
 * Initialise the state in caller memory of at least rgaps__tlsf_state_size(nblocks)
 * bytes: one free block covering [0, pool_size rounded down to align).
 * align is a power of two >= 8. nblocks >= 2.
 * Returns 0, or -EINVAL for a bad argument (pool smaller than align, align not pow2).
 */
int rgaps__tlsf_init(struct rgaps_tlsf *t, uint64_t pool_size, uint32_t nblocks, uint32_t align);

/*
 * Allocate size bytes (rounded up to the alignment; size 0 is -EINVAL).
 * Good fit: the block found is the first of a class whose every member fits.
 * Returns 0 and writes the block id, or -ENOMEM when no free block fits,
 * or -ENOSPC when a split needs a descriptor and none is spare (the caller
 * treats both as "pool full"). On failure *block_p is not written.
 */
int rgaps__tlsf_alloc(struct rgaps_tlsf *t, uint64_t size, uint32_t *block_p);

/* Free a USED block; merges with free physical neighbours. */
void rgaps__tlsf_free(struct rgaps_tlsf *t, uint32_t block);

/*
 * The smallest free block in which an allocation of size bytes always
 * succeeds (good fit rounds the request up to its class boundary): a pool
 * that keeps a free stretch this long can always take one more message of
 * that size (rgaps__topic_hold_room()).
 */
uint64_t rgaps__tlsf_fit_size(uint64_t size, uint32_t align);

/* Offset / rounded size of a USED block. */
uint64_t rgaps__tlsf_offset(const struct rgaps_tlsf *t, uint32_t block);
uint64_t rgaps__tlsf_size(const struct rgaps_tlsf *t, uint32_t block);
/* 1 if block is a valid id of a USED block, else 0. */
int rgaps__tlsf_is_used(const struct rgaps_tlsf *t, uint32_t block);

void rgaps__tlsf_get_stats(const struct rgaps_tlsf *t, struct rgaps_tlsf_stats *st);

/*
 * Walk the whole structure and check every invariant (physical chain covers the
 * pool exactly, no two adjacent free blocks, every free block in exactly the
 * list of its class, bitmaps match lists, counters match). Returns 0, or
 * -EUCLEAN and writes a reason into why (if non-NULL).
 */
int rgaps__tlsf_check(const struct rgaps_tlsf *t, char *why, size_t whylen);

#endif
