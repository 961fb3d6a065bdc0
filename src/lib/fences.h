/*
 * librgaps internals: a publisher's fence slots (fences.c).
 */
#ifndef RGAPS_LIB_FENCES_H
#define RGAPS_LIB_FENCES_H

#include <stdbool.h>
#include <stdint.h>

#include "client.h"

/* topic.h's fence callbacks: the publisher frees a block only once its fence completed. */
bool rgaps__fences_pending(void *attach, uint32_t k);
void rgaps__fences_free(void *attach, uint32_t k);
/*
 * A publisher going away: every copy it queued must end before its pool is
 * unmapped and before its fences go. Then it says so in its region
 * (fences_retired: every fenced message is complete, readers stop using the
 * fences), and destroys them a moment later, so that a reader that looked
 * just before is done with them (a CUDA IPC event may not be used once its
 * exporter destroyed it).
 */
void rgaps__fences_fini(struct rgaps__attach *a);
/*
 * A publisher's fence slot to record (created on first use, its handle written
 * into our region): 0, -ENOSPC when every slot guards a block, or the plugin's
 * error. _put gives back a slot that was not committed; _of is its fence.
 */
int rgaps__fence_get(struct rgaps__attach *a, uint32_t *k_p);
void rgaps__fence_put(struct rgaps__attach *a, uint32_t k);
void *rgaps__fence_of(struct rgaps__attach *a, uint32_t k);

#endif
