/*
 * Fences of other processes as a reader keeps them (fence.h). Slots are opened
 * lazily: a stream that never publishes stream-ordered costs nothing, and one
 * that does costs one open per fence slot it uses, not one per message.
 */
#include "fence.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "futex.h"

struct fence_stream {
	uint64_t gen;
	void **open;	 /* [nfences], NULL until used */
	uint8_t *borrowed; /* [nfences]: open[k] is this process's own fence, not ours to destroy */
};

/* ---------------------------------------------------------------- this process's own fences */

struct local_fence {
	struct local_fence *next;
	uint8_t handle[RGAPS_FENCE_BYTES];
	void *fence;
};

static pthread_mutex_t local_lock = PTHREAD_MUTEX_INITIALIZER;
static struct local_fence *local_fences;

static bool handle_empty(const uint8_t *h)
{
	for (uint32_t i = 0; i < RGAPS_FENCE_BYTES; i++)
		if (h[i])
			return false;
	return true;
}

void rgaps_fence_local_add(const uint8_t handle[RGAPS_FENCE_BYTES], void *fence)
{
	struct local_fence *l;

	if (handle_empty(handle) || !(l = calloc(1, sizeof(*l))))
		return; /* nothing to match it by, or no memory: readers here open it (and may fail) */
	memcpy(l->handle, handle, RGAPS_FENCE_BYTES);
	l->fence = fence;
	pthread_mutex_lock(&local_lock);
	l->next = local_fences;
	local_fences = l;
	pthread_mutex_unlock(&local_lock);
}

void rgaps_fence_local_remove(void *fence)
{
	pthread_mutex_lock(&local_lock);
	for (struct local_fence **lp = &local_fences; *lp; lp = &(*lp)->next) {
		if ((*lp)->fence == fence) {
			struct local_fence *l = *lp;

			*lp = l->next;
			free(l);
			break;
		}
	}
	pthread_mutex_unlock(&local_lock);
}

static void *local_find(const uint8_t *handle)
{
	void *f = NULL;

	if (handle_empty(handle))
		return NULL;
	pthread_mutex_lock(&local_lock);
	for (struct local_fence *l = local_fences; l && !f; l = l->next)
		if (memcmp(l->handle, handle, RGAPS_FENCE_BYTES) == 0)
			f = l->fence;
	pthread_mutex_unlock(&local_lock);
	return f;
}

struct rgaps_fence_cache {
	const struct rgaps_memory_ops *ops;
	void *ctx;
	struct rgaps_topic_limits lim;
	uint32_t nfences;
	struct fence_stream *streams; /* [max_publishers] */
};

int rgaps_fence_cache_create(const struct rgaps_topic_limits *lim,
			     const struct rgaps_memory_ops *ops, void *ctx,
			     struct rgaps_fence_cache **fc_p)
{
	struct rgaps_fence_cache *fc = calloc(1, sizeof(*fc));

	if (!fc)
		return -ENOMEM;
	fc->ops = ops;
	fc->ctx = ctx;
	fc->lim = *lim;
	fc->nfences = rgaps_topic_nfences(lim);
	fc->streams = calloc(lim->max_publishers, sizeof(*fc->streams));
	if (!fc->streams) {
		free(fc);
		return -ENOMEM;
	}
	*fc_p = fc;
	return 0;
}

void rgaps_fence_cache_forget(struct rgaps_fence_cache *fc, uint32_t slot)
{
	struct fence_stream *fs;

	if (!fc || slot >= fc->lim.max_publishers)
		return;
	fs = &fc->streams[slot];
	if (fs->open) {
		for (uint32_t k = 0; k < fc->nfences; k++)
			if (fs->open[k] && !fs->borrowed[k])
				fc->ops->fence_destroy(fc->ctx, fs->open[k]);
		free(fs->open);
		free(fs->borrowed);
	}
	fs->open = NULL;
	fs->borrowed = NULL;
	fs->gen = 0;
}

void rgaps_fence_cache_destroy(struct rgaps_fence_cache *fc)
{
	if (!fc)
		return;
	for (uint32_t i = 0; i < fc->lim.max_publishers; i++)
		rgaps_fence_cache_forget(fc, i);
	free(fc->streams);
	free(fc);
}

int rgaps_fence_cache_get(struct rgaps_fence_cache *fc, uint32_t slot, uint64_t gen,
			  const struct rgaps_pub_region *r, uint32_t k, void **fence_p, char *why,
			  size_t whylen)
{
	uint8_t handle[RGAPS_FENCE_BYTES];
	struct fence_stream *fs;
	uint32_t published;
	int e;

	if (slot >= fc->lim.max_publishers || k >= fc->nfences) {
		snprintf(why, whylen, "fence slot %u of %u", k, fc->nfences);
		return -EBADMSG;
	}
	fs = &fc->streams[slot];
	if (fs->gen != gen)
		rgaps_fence_cache_forget(fc, slot);
	if (fs->open && fs->open[k]) {
		*fence_p = fs->open[k];
		return 0;
	}
	/* The handle is written before nfences grows past it (release): read it after. */
	published = __atomic_load_n(&r->nfences, __ATOMIC_ACQUIRE);
	if (k >= published || published > fc->nfences) {
		snprintf(why, whylen, "fence slot %u named while %u are published", k, published);
		return -EBADMSG;
	}
	if (!fs->open) {
		fs->open = calloc(fc->nfences, sizeof(*fs->open));
		fs->borrowed = calloc(fc->nfences, 1);
		if (!fs->open || !fs->borrowed) {
			free(fs->open);
			free(fs->borrowed);
			fs->open = NULL;
			fs->borrowed = NULL;
			return -ENOMEM;
		}
		fs->gen = gen;
	}
	memcpy(handle, rgaps_pub_fence_handle(&fc->lim, r, k), sizeof(handle));
	fs->open[k] = local_find(handle);
	if (fs->open[k]) { /* a publisher of this very process */
		fs->borrowed[k] = 1;
		*fence_p = fs->open[k];
		return 0;
	}
	e = fc->ops->fence_open(fc->ctx, handle, &fs->open[k]);
	if (e) {
		fs->open[k] = NULL;
		snprintf(why, whylen, "fence slot %u cannot be opened: %s", k, strerror(-e));
		return e;
	}
	*fence_p = fs->open[k];
	return 0;
}

enum rgaps_fence_verdict rgaps_fence_verdict(const struct rgaps_pub_region *r, bool live)
{
	if (__atomic_load_n(&r->fences_retired, __ATOMIC_ACQUIRE))
		return RGAPS_FENCE_DONE;
	return live ? RGAPS_FENCE_USE : RGAPS_FENCE_LOST;
}

int rgaps_fence_wait_host(const struct rgaps_memory_ops *ops, void *ctx, void *fence,
			  uint64_t deadline_ns, bool (*give_up)(void *arg), void *arg)
{
	uint64_t start = rgaps_now_ns(CLOCK_MONOTONIC), next_ask = start + 100000000ull;
	uint64_t pause_ns = 10000;

	for (;;) {
		int e = ops->fence_query(ctx, fence);
		uint64_t now;

		if (e != -EAGAIN)
			return e;
		now = rgaps_now_ns(CLOCK_MONOTONIC);
		if (now >= deadline_ns)
			return -ETIMEDOUT;
		if (give_up && now >= next_ask) {
			next_ask = now + 100000000ull;
			if (give_up(arg))
				return -ECANCELED;
		}
		if (now - start < 20000) { /* a copy about to end: catch it at once */
#if defined(__x86_64__) || defined(__i386__)
			__builtin_ia32_pause();
#endif
			continue;
		}
		{
			struct timespec ts = { 0, (long)pause_ns };

			nanosleep(&ts, NULL);
		}
		if (pause_ns < 1000000)
			pause_ns *= 2;
	}
}
