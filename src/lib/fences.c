/*
 * librgaps: a publisher's fence slots (stream order, docs/SHM-LAYOUT.md), made
 * on first use with their handles written into the publisher's region, and
 * ended, when it detaches, only once every copy they guard is complete.
 */
#include "fences.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/futex.h"
#include "../common/log.h"

bool rgaps__fences_pending(void *arg, uint32_t k)
{
	struct rgaps__attach *a = arg;
	int e;

	if (k >= a->fences.made || !a->fences.f[k])
		return false;
	e = a->mem->ops.memory.fence_query(a->mem->ctx, a->fences.f[k]);
	/* An error is the context's end (logged by the plugin): no copy runs any more. */
	return e == -EAGAIN;
}

void rgaps__fences_free(void *arg, uint32_t k)
{
	struct rgaps__attach *a = arg;

	if (k < a->fences.made && a->fences.nfree < a->fences.n) {
		a->fences.free[a->fences.nfree++] = k;
		a->fences.in_use--;
	}
}

void rgaps__fences_fini(struct rgaps__attach *a)
{
	struct rgaps__fences *fs = &a->fences;
	bool timed_out = false;

	for (uint32_t k = 0; k < fs->made; k++) {
		if (!fs->f[k])
			continue;
		if (rgaps__fence_wait_host(&a->mem->ops.memory, a->mem->ctx, fs->f[k],
					   rgaps_now_ns(CLOCK_MONOTONIC) + 30000000000ull, NULL,
					   NULL) == -ETIMEDOUT)
			timed_out = true;
	}
	if (timed_out)
		rgaps_warn("topic '%.64s': a stream-ordered copy was still running after 30 s; "
			   "detaching anyway",
			   ((const struct rgaps_topic_hdr *)a->hdr)->name);
	if (fs->made && a->region && !timed_out) {
		struct timespec grace = { 0, 50 * 1000 * 1000 };

		__atomic_store_n(&((struct rgaps_pub_region *)a->region)->fences_retired, 1,
				 __ATOMIC_SEQ_CST);
		nanosleep(&grace, NULL);
	}
	for (uint32_t k = 0; k < fs->made; k++) {
		if (!fs->f[k])
			continue;
		rgaps__fence_local_remove(fs->f[k]);
		a->mem->ops.memory.fence_destroy(a->mem->ctx, fs->f[k]);
	}
	free(fs->f);
	free(fs->free);
	memset(fs, 0, sizeof(*fs));
}

int rgaps__fence_get(struct rgaps__attach *a, uint32_t *k_p)
{
	struct rgaps__fences *fs = &a->fences;
	struct rgaps_pub_region *r = a->region;
	uint32_t k;
	int e;

	if (!fs->f) {
		fs->n = rgaps__topic_nfences(&a->lim);
		fs->f = calloc(fs->n, sizeof(*fs->f));
		fs->free = calloc(fs->n, sizeof(*fs->free));
		if (!fs->f || !fs->free) {
			free(fs->f);
			free(fs->free);
			fs->f = NULL;
			fs->free = NULL;
			return -ENOMEM;
		}
	}
	if (fs->nfree) {
		*k_p = fs->free[--fs->nfree];
		fs->in_use++;
		return 0;
	}
	if (fs->made == fs->n)
		return -ENOSPC; /* every slot guards a block: the caller waits for its copy */
	k = fs->made;
	e = a->mem->ops.memory.fence_create(a->mem->ctx, a->my_device, RGAPS_FENCE_IPC, &fs->f[k],
					    rgaps__pub_fence_handle(&a->lim, r, k),
					    rgaps__pub_fence_state(&a->lim, r, k));
	if (e) {
		fs->f[k] = NULL;
		return e;
	}
	rgaps__fence_local_add(rgaps__pub_fence_handle(&a->lim, r, k), fs->f[k]);
	/* The handle first, then the count that makes readers trust it (fence.h). */
	fs->made = k + 1;
	__atomic_store_n(&r->nfences, fs->made, __ATOMIC_RELEASE);
	fs->in_use++;
	*k_p = k;
	return 0;
}

void rgaps__fence_put(struct rgaps__attach *a, uint32_t k)
{
	rgaps__fences_free(a, k);
}

void *rgaps__fence_of(struct rgaps__attach *a, uint32_t k)
{
	return k < a->fences.made ? a->fences.f[k] : NULL;
}
