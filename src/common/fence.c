/*
 * Fences of other processes as a reader keeps them (fence.h). Slots are opened
 * lazily: a stream that never publishes stream-ordered costs nothing, and one
 * that does costs one open per fence slot it uses, not one per message - and
 * one per process, whatever number of readers it has (the table below).
 */
#include "fence.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "futex.h"

struct fence_stream {
	uint64_t gen;
	void **open;   /* [nfences], NULL until used */
	uint8_t *own;  /* [nfences]: open[k] is this process's own fence (borrowed, never ours
			  to destroy); else one we opened (the table counts its readers) */
};

/*
 * The process's fences by handle: its own publishers' (own: borrowed, never
 * destroyed here), and the other processes' it opened, shared by every reader
 * of the process (rgapsd's forwarder and replicators, several subscriber
 * handles of one application) with a count, because CUDA opens an IPC event
 * handle in a process once, and never in the process that made it.
 */
struct shared_fence {
	struct shared_fence *next;
	uint8_t handle[RGAPS_FENCE_BYTES];
	void *fence;
	uint32_t refs; /* readers' caches that use it (opened ones) */
	bool own;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shared_fence *table;

static bool handle_empty(const uint8_t *h)
{
	for (uint32_t i = 0; i < RGAPS_FENCE_BYTES; i++)
		if (h[i])
			return false;
	return true;
}

/* Called with table_lock held. */
static struct shared_fence *table_find(const uint8_t *handle)
{
	for (struct shared_fence *l = table; l; l = l->next)
		if (memcmp(l->handle, handle, RGAPS_FENCE_BYTES) == 0)
			return l;
	return NULL;
}

void rgaps__fence_local_add(const uint8_t handle[RGAPS_FENCE_BYTES], void *fence)
{
	struct shared_fence *l;

	if (handle_empty(handle) || !(l = calloc(1, sizeof(*l))))
		return; /* nothing to match it by, or no memory: readers here open it (and may fail) */
	memcpy(l->handle, handle, RGAPS_FENCE_BYTES);
	l->fence = fence;
	l->own = true;
	pthread_mutex_lock(&table_lock);
	l->next = table;
	table = l;
	pthread_mutex_unlock(&table_lock);
}

void rgaps__fence_local_remove(void *fence)
{
	pthread_mutex_lock(&table_lock);
	for (struct shared_fence **lp = &table; *lp; lp = &(*lp)->next) {
		if ((*lp)->own && (*lp)->fence == fence) {
			struct shared_fence *l = *lp;

			*lp = l->next;
			free(l);
			break;
		}
	}
	pthread_mutex_unlock(&table_lock);
}

/* A reader is done with a fence it opened: the last one destroys it. */
static void table_put(const struct rgaps_memory_ops *ops, void *ctx, void *fence)
{
	void *destroy = fence; /* not in the table (a handle-less fence): only ours */

	pthread_mutex_lock(&table_lock);
	for (struct shared_fence **lp = &table; *lp; lp = &(*lp)->next) {
		struct shared_fence *l = *lp;

		if (l->fence != fence || l->own)
			continue;
		destroy = NULL;
		if (--l->refs == 0) {
			*lp = l->next;
			destroy = l->fence;
			free(l);
		}
		break;
	}
	pthread_mutex_unlock(&table_lock);
	if (destroy)
		ops->fence_destroy(ctx, destroy);
}

/*
 * The fence of handle: this process's own (*own_p true), or opened once per
 * process and counted. 0 or the backend's error. A handle of zeros names no
 * object (a backend whose fences live in their state word): each reader opens
 * its own, on the state word of the stream it reads.
 */
static int table_get(const struct rgaps_memory_ops *ops, void *ctx, const uint8_t *handle,
		     const uint64_t *state, void **fence_p, bool *own_p)
{
	struct shared_fence *l;
	void *f = NULL;
	int e;

	*own_p = false;
	pthread_mutex_lock(&table_lock);
	l = handle_empty(handle) ? NULL : table_find(handle);
	if (l) {
		if (!l->own)
			l->refs++;
		*own_p = l->own;
		*fence_p = l->fence;
		pthread_mutex_unlock(&table_lock);
		return 0;
	}
	pthread_mutex_unlock(&table_lock);
	e = ops->fence_open(ctx, handle, state, &f);
	if (e)
		return e;
	if (handle_empty(handle)) { /* a backend whose fences carry no handle: not shared */
		*fence_p = f;
		return 0;
	}
	l = calloc(1, sizeof(*l));
	if (!l) {
		ops->fence_destroy(ctx, f);
		return -ENOMEM;
	}
	memcpy(l->handle, handle, RGAPS_FENCE_BYTES);
	l->fence = f;
	l->refs = 1;
	pthread_mutex_lock(&table_lock);
	{
		struct shared_fence *other = table_find(handle);

		if (other) { /* another reader opened it meanwhile: use that one */
			if (!other->own)
				other->refs++;
			*own_p = other->own;
			*fence_p = other->fence;
			pthread_mutex_unlock(&table_lock);
			ops->fence_destroy(ctx, f);
			free(l);
			return 0;
		}
	}
	l->next = table;
	table = l;
	pthread_mutex_unlock(&table_lock);
	*fence_p = f;
	return 0;
}

struct rgaps_fence_cache {
	const struct rgaps_memory_ops *ops;
	void *ctx;
	struct rgaps_topic_limits lim;
	uint32_t nfences;
	struct fence_stream *streams; /* [max_publishers] */
};

int rgaps__fence_cache_create(const struct rgaps_topic_limits *lim,
			     const struct rgaps_memory_ops *ops, void *ctx,
			     struct rgaps_fence_cache **fc_p)
{
	struct rgaps_fence_cache *fc = calloc(1, sizeof(*fc));

	if (!fc)
		return -ENOMEM;
	fc->ops = ops;
	fc->ctx = ctx;
	fc->lim = *lim;
	fc->nfences = rgaps__topic_nfences(lim);
	fc->streams = calloc(lim->max_publishers, sizeof(*fc->streams));
	if (!fc->streams) {
		free(fc);
		return -ENOMEM;
	}
	*fc_p = fc;
	return 0;
}

void rgaps__fence_cache_forget(struct rgaps_fence_cache *fc, uint32_t slot)
{
	struct fence_stream *fs;

	if (!fc || slot >= fc->lim.max_publishers)
		return;
	fs = &fc->streams[slot];
	if (fs->open) {
		for (uint32_t k = 0; k < fc->nfences; k++)
			if (fs->open[k] && !fs->own[k])
				table_put(fc->ops, fc->ctx, fs->open[k]);
		free(fs->open);
		free(fs->own);
	}
	fs->open = NULL;
	fs->own = NULL;
	fs->gen = 0;
}

void rgaps__fence_cache_destroy(struct rgaps_fence_cache *fc)
{
	if (!fc)
		return;
	for (uint32_t i = 0; i < fc->lim.max_publishers; i++)
		rgaps__fence_cache_forget(fc, i);
	free(fc->streams);
	free(fc);
}

int rgaps__fence_cache_get(struct rgaps_fence_cache *fc, uint32_t slot, uint64_t gen,
			  const struct rgaps_pub_region *r, uint32_t k, void **fence_p, char *why,
			  size_t whylen)
{
	uint8_t handle[RGAPS_FENCE_BYTES];
	struct fence_stream *fs;
	uint32_t published;
	bool own;
	int e;

	if (slot >= fc->lim.max_publishers || k >= fc->nfences) {
		snprintf(why, whylen, "fence slot %u of %u", k, fc->nfences);
		return -EBADMSG;
	}
	fs = &fc->streams[slot];
	if (fs->gen != gen)
		rgaps__fence_cache_forget(fc, slot);
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
		fs->own = calloc(fc->nfences, 1);
		if (!fs->open || !fs->own) {
			free(fs->open);
			free(fs->own);
			fs->open = NULL;
			fs->own = NULL;
			return -ENOMEM;
		}
		fs->gen = gen;
	}
	memcpy(handle, rgaps__pub_fence_handle(&fc->lim, r, k), sizeof(handle));
	e = table_get(fc->ops, fc->ctx, handle, rgaps__pub_fence_state(&fc->lim, r, k),
		      &fs->open[k], &own);
	fs->own[k] = own;
	if (e) {
		fs->open[k] = NULL;
		snprintf(why, whylen, "fence slot %u cannot be opened: %s", k, strerror(-e));
		return e;
	}
	*fence_p = fs->open[k];
	return 0;
}

enum rgaps_fence_verdict rgaps__fence_verdict(const struct rgaps_pub_region *r, bool live)
{
	if (__atomic_load_n(&r->fences_retired, __ATOMIC_ACQUIRE))
		return RGAPS_FENCE_DONE;
	return live ? RGAPS_FENCE_USE : RGAPS_FENCE_LOST;
}

int rgaps__fence_wait_host(const struct rgaps_memory_ops *ops, void *ctx, void *fence,
			  uint64_t deadline_ns, bool (*give_up)(void *arg), void *arg)
{
	uint64_t start = rgaps_now_ns(CLOCK_MONOTONIC), next_ask = start + 100000000ull;
	uint64_t pause_ns = 50000;

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
		if (now - start < RGAPS_FENCE_SPIN_NS) { /* a copy about to end: catch it at once */
#if defined(__x86_64__) || defined(__i386__)
			__builtin_ia32_pause();
#endif
			continue;
		}
		if (now - start < RGAPS_FENCE_YIELD_NS) { /* a copy under way: its end, not 50 us later */
			sched_yield();
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
