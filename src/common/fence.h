/*
 * Fences of other processes, as a reader of a topic sees them (stream order,
 * docs/SHM-LAYOUT.md). A publisher that commits a message before the copy
 * into its block is done (rgaps_publisher_push_async) names one of its fence
 * slots in the entry; the slot's handle is in its region. A reader opens each
 * (stream, slot) once, through the memory plugin, and keeps it: a publisher
 * writes each handle once and records the same fence again for later
 * messages. Used by librgaps' subscribers and by rgapsd's forwarder and
 * replicators.
 */
#ifndef RGAPS_COMMON_FENCE_H
#define RGAPS_COMMON_FENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "rgaps/plugin.h"
#include "topic.h"

struct rgaps_fence_cache;

int rgaps__fence_cache_create(const struct rgaps_topic_limits *lim,
			     const struct rgaps_memory_ops *ops, void *ctx,
			     struct rgaps_fence_cache **fc_p);
void rgaps__fence_cache_destroy(struct rgaps_fence_cache *fc);

/*
 * The fence of slot k of stream (slot, gen), read through its region r, opened
 * on first use. -EBADMSG when the region does not publish slot k (a spoiled
 * stream: why says so); another negative errno when the backend cannot open it.
 */
int rgaps__fence_cache_get(struct rgaps_fence_cache *fc, uint32_t slot, uint64_t gen,
			  const struct rgaps_pub_region *r, uint32_t k, void **fence_p, char *why,
			  size_t whylen);
/*
 * Fences this process made and shared (its publishers'). CUDA refuses to open
 * an IPC handle in the process that made it, so a reader in the same process
 * borrows the fence itself: add when made, remove before it is destroyed.
 * All-zero handles (a backend with nothing to share) are never matched.
 */
void rgaps__fence_local_add(const uint8_t handle[RGAPS_FENCE_BYTES], void *fence);
void rgaps__fence_local_remove(void *fence);

/* Stream slot went away: close what was opened of it (waits queued on them stay valid). */
void rgaps__fence_cache_forget(struct rgaps_fence_cache *fc, uint32_t slot);

/*
 * What a reader does with a fenced message of stream r (live: its publisher is
 * still attached). Publishers that detach cleanly wait for their copies and
 * set fences_retired before they destroy their fences; a crashed one leaves
 * fences whose copies never end, and which no one may touch (the driver freed
 * them). RGAPS_FENCE_USE: wait for the fence; _DONE: complete, do not touch
 * it; _LOST: its copy never completed (a crashed publisher).
 */
enum rgaps_fence_verdict { RGAPS_FENCE_USE, RGAPS_FENCE_DONE, RGAPS_FENCE_LOST };
enum rgaps_fence_verdict rgaps__fence_verdict(const struct rgaps_pub_region *r, bool live);

/*
 * Wait on this thread until fence completes: a spin, then yields, up to
 * RGAPS_FENCE_YIELD_NS (the copies rgaps waits for take 10 us to 1 ms: a
 * sleep would oversleep them by the timer slack, 50 us or more), then sleeps
 * that grow to 1 ms. 0; -ETIMEDOUT at deadline_ns (CLOCK_MONOTONIC; UINT64_MAX:
 * none); -ECANCELED when give_up(arg) says so (asked every 100 ms or so); or
 * the fence's error.
 */
#define RGAPS_FENCE_SPIN_NS 20000ull	 /* pause instructions, then */
#define RGAPS_FENCE_YIELD_NS 2000000ull /* sched_yield(), then sleeps */

int rgaps__fence_wait_host(const struct rgaps_memory_ops *ops, void *ctx, void *fence,
			  uint64_t deadline_ns, bool (*give_up)(void *arg), void *arg);

#endif
