/*
 * Replicators (docs/GPU.md, "replicate"): a topic that serves subscribers on a
 * GPU g other than its pools' device keeps, for g, a stream of rgapsd's own
 * whose pool lives on g, and one thread that copies every message of the
 * topic's own streams into it once - never once per subscriber. Subscribers
 * on g read only that stream (members.c: `serve`), in place on their GPU.
 *
 * A replicator is two members of the topic, both rgapsd's own: a subscriber
 * of the topic's own streams (so their publishers wait for it under "block",
 * as for any reader) and a publisher of the replica stream (whose readers are
 * the subscribers on g). Its thread follows the membership through the sync
 * callbacks, under the topic's lock and with a reference on every member it
 * maps, like the remote path's forwarder (remote/local.c), so the loop frees
 * no region it still reads. A message keeps its origin (stream, seq), its
 * attribute block, its flags and its gap; one the replica cannot take in time
 * (block_timeout_ms, a full replica under "block") is lost there, counted, and
 * reported to g's subscribers as a gap with the next one.
 *
 * The copy runs on g's stream GPU to GPU when g can read the pools' device
 * (its pools opened to g), else through a pinned host buffer in 64 MiB steps.
 * Messages published in stream order are copied once their fence completed
 * (waited for on this thread, never the loop).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../common/futex.h"
#include "../common/log.h"
#include "daemon.h"

#define WAIT_SLICE_NS (200ll * 1000 * 1000)
#define RETRY_SLICE_MS 20		   /* room in the replica: asked again this often */
#define BOUNCE_MAX (64ull << 20)	   /* host buffer for GPUs without peer access */

struct rgapsd_replicator {
	struct rgapsd_topic *t;
	int32_t gpu;
	/* its subscriber of the topic's own streams */
	struct rgapsd_member *sub_m;
	struct rgaps_sub *sub;
	struct rgapsd_member **streams; /* [max_publishers]: referenced while read */
	struct rgapsd_member **leaving; /* cleared while held */
	uint32_t nleaving;
	struct rgaps_fence_cache *fences;
	/* its publisher: the replica stream on gpu */
	struct rgapsd_member *pub_m;
	struct rgaps_pub *pub;
	struct rgapsd_member **subs; /* [max_subscribers]: referenced while watched */
	/* the copy */
	bool peer;	   /* gpu reads the pools' device: copies go GPU to GPU */
	uint8_t *bounce;   /* else through here (pinned when the backend can) */
	uint64_t bounce_len;
	bool bounce_pinned;
	uint64_t pending_gap; /* lost here, told with the next replicated message */
	uint32_t dir_seen;    /* the topic's dir_gen at the last idle membership look */
	/* the thread */
	pthread_t thread;
	bool started;
	uint32_t stop; /* atomic */
	uint32_t wake; /* futex word: bumped to end its sleep */
	/* statistics (atomics: the loop reads them) */
	uint64_t copies, bytes, lost;
	bool warned;
};

/* ---------------------------------------------------------------- membership (its thread) */

static void leaving_sweep(struct rgapsd_replicator *r)
{
	uint32_t keep = 0;

	for (uint32_t i = 0; i < r->nleaving; i++) {
		if (rgaps_sub_stream_held(r->sub, r->leaving[i]->gen))
			r->leaving[keep++] = r->leaving[i];
		else
			rgapsd__member_put(r->leaving[i]);
	}
	r->nleaving = keep;
}

/* The topic's own streams: read them, and open their pools to our GPU for the copy. */
static int sub_sync(void *arg)
{
	struct rgapsd_replicator *r = arg;
	struct rgapsd_topic *t = r->t;

	pthread_mutex_lock(&t->lock);
	for (uint32_t k = 0; k < t->lim.max_publishers; k++) {
		struct rgapsd_member *m = t->pubs[k], *cur = r->streams[k];

		if (m && m->serve != RGAPSD_SERVE_ORIGINAL)
			m = NULL;
		if (cur && cur != m) {
			r->streams[k] = NULL;
			if (rgaps_sub_clear_stream(r->sub, k)) {
				rgapsd__member_put(cur);
			} else {
				struct rgapsd_member **n = realloc(r->leaving, (r->nleaving + 1) *
									     sizeof(*n));

				if (n) {
					r->leaving = n;
					r->leaving[r->nleaving++] = cur;
				} else {
					rgapsd__member_put(cur); /* we never hold it past the copy */
				}
			}
			cur = NULL;
		}
		if (!m)
			continue;
		if (!cur) {
			rgapsd__member_get(m);
			r->streams[k] = m;
			if (r->peer &&
			    t->mem->ops.memory.pool_grant(t->mem->ctx, &m->pool, r->gpu,
							  RGAPS_MEM_GRANT_READ) != 0) {
				rgaps_warn("topic '%s': the pool of stream %llu cannot be opened to GPU "
					   "%d: replicas of it go through host memory", t->cfg.name,
					   (unsigned long long)m->gen, (int)r->gpu);
				r->peer = false;
			}
		}
		rgaps_sub_set_stream(r->sub, k, m->gen, m->map, m->pool.base,
				     m->state == RGAPSD_MEMBER_DRAINING ? m->limit : UINT64_MAX);
	}
	pthread_mutex_unlock(&t->lock);
	return 0;
}

/* The subscribers on our GPU: the replica waits for them. */
static int pub_sync(void *arg)
{
	struct rgapsd_replicator *r = arg;
	struct rgapsd_topic *t = r->t;

	pthread_mutex_lock(&t->lock);
	for (uint32_t j = 0; j < t->lim.max_subscribers; j++) {
		struct rgapsd_member *m = t->subs[j], *cur = r->subs[j];

		if (m && m->serve != r->gpu)
			m = NULL;
		if (cur == m)
			continue;
		if (cur) {
			rgaps_pub_clear_sub(r->pub, j);
			rgapsd__member_put(cur);
			r->subs[j] = NULL;
		}
		if (m) {
			rgapsd__member_get(m);
			r->subs[j] = m;
			rgaps_pub_set_sub(r->pub, j, m->gen, m->map);
		}
	}
	pthread_mutex_unlock(&t->lock);
	return 0;
}

/* ---------------------------------------------------------------- fences */

struct fence_watch {
	const struct rgapsd_member *src;
	const uint32_t *stop;
};

static bool src_active(const struct rgapsd_member *src)
{
	bool active;

	/* Under the lock the loop writes it with. */
	pthread_mutex_lock(&src->t->lock);
	active = src->state == RGAPSD_MEMBER_ACTIVE;
	pthread_mutex_unlock(&src->t->lock);
	return active;
}

/* Stop waiting: rgapsd stops, or the publisher left (its fences may not be touched then). */
static bool fence_give_up(void *arg)
{
	struct fence_watch *w = arg;

	if (w->stop && __atomic_load_n(w->stop, __ATOMIC_ACQUIRE))
		return true;
	return !src_active(w->src);
}

int rgapsd__msg_fence_wait(struct rgapsd_topic *t, struct rgaps_fence_cache **fc_p,
			   const struct rgaps_sub_msg *m, const struct rgapsd_member *src,
			   const uint32_t *stop)
{
	struct fence_watch w = { src, stop };
	const struct rgaps_pub_region *r = src->map;
	char why[160] = "";
	void *f;
	int e = 0;

	switch (rgaps_fence_verdict(r, src_active(src))) {
	case RGAPS_FENCE_DONE:
		return 0;
	case RGAPS_FENCE_LOST:
		rgaps_warn("topic '%s': stream %llu message %llu: its publisher left before its copy "
			   "completed: lost", t->cfg.name, (unsigned long long)m->stream,
			   (unsigned long long)m->seq);
		return -ECANCELED;
	case RGAPS_FENCE_USE:
		break;
	}
	if (!*fc_p)
		e = rgaps_fence_cache_create(&t->lim, &t->mem->ops.memory, t->mem->ctx, fc_p);
	if (!e)
		e = rgaps_fence_cache_get(*fc_p, m->slot, m->stream, r, m->fence, &f, why,
					  sizeof(why));
	if (e) {
		rgaps_warn("topic '%s': stream %llu message %llu: %s: not copied (lost)",
			   t->cfg.name, (unsigned long long)m->stream, (unsigned long long)m->seq,
			   why[0] ? why : strerror(-e));
		return e;
	}
	e = rgaps_fence_wait_host(&t->mem->ops.memory, t->mem->ctx, f, UINT64_MAX, fence_give_up,
				  &w);
	if (e == -ECANCELED && !(stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE))) {
		if (rgaps_fence_verdict(r, false) == RGAPS_FENCE_DONE)
			return 0;
		rgaps_warn("topic '%s': stream %llu message %llu: its publisher left before its copy "
			   "completed: lost", t->cfg.name, (unsigned long long)m->stream,
			   (unsigned long long)m->seq);
	}
	return e;
}

/* ---------------------------------------------------------------- the thread */

static bool stopping(struct rgapsd_replicator *r)
{
	return __atomic_load_n(&r->stop, __ATOMIC_ACQUIRE);
}

static bool stop_asked(void *arg)
{
	return stopping(arg);
}

/* Sleep until an original stream rings, the membership moves, or stop (our wake word). */
static void wait_messages(struct rgapsd_replicator *r)
{
	struct futex_waitv own;

	rgaps_waitv_set(&own, &r->wake, __atomic_load_n(&r->wake, __ATOMIC_SEQ_CST));
	own.flags |= FUTEX_PRIVATE_FLAG;
	/* No lock: the sync callbacks that change the mappings run on this thread. */
	rgaps_sub_sleep(r->sub, NULL, &own, 1, stop_asked, r, WAIT_SLICE_NS);
}

/* The host buffer of copies without peer access (made at start, or when a pool refused). */
static int bounce_get(struct rgapsd_replicator *r)
{
	struct rgapsd_topic *t = r->t;

	if (r->bounce)
		return 0;
	r->bounce_len = RGAPS_MIN(BOUNCE_MAX, t->lim.max_message_size);
	r->bounce = mmap(NULL, r->bounce_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			 -1, 0);
	if (r->bounce == MAP_FAILED) {
		r->bounce = NULL;
		return -ENOMEM;
	}
	r->bounce_pinned = t->mem->ops.memory.host_register(t->mem->ctx, r->bounce,
							    r->bounce_len) == 0;
	return 0;
}

/* Copy size bytes from an original pool into our replica's block. */
static int copy_message(struct rgapsd_replicator *r, uint8_t *dst, const uint8_t *src,
			uint64_t size)
{
	const struct rgaps_memory_ops *ops = &r->t->mem->ops.memory;
	void *ctx = r->t->mem->ctx;
	int e;

	if (r->peer)
		return ops->copy(ctx, dst, src, size, RGAPS_COPY_TO_POOL);
	e = bounce_get(r);
	if (e)
		return e;
	for (uint64_t off = 0; off < size; off += r->bounce_len) {
		uint64_t n = RGAPS_MIN(r->bounce_len, size - off);

		e = ops->copy(ctx, r->bounce, src + off, n, RGAPS_COPY_FROM_POOL);
		if (!e)
			e = ops->copy(ctx, dst + off, r->bounce, n, RGAPS_COPY_TO_POOL);
		if (e)
			return e;
	}
	return 0;
}

/*
 * Tell g's subscribers of losses now, with a gap-only message (no later message
 * may come to carry them); kept for later when the replica's queue is full.
 */
static void flush_gap(struct rgapsd_replicator *r)
{
	if (r->pending_gap &&
	    rgaps_pub_gap(r->pub, (uint32_t)RGAPS_MIN(r->pending_gap, UINT32_MAX),
			  rgaps_now_ns(CLOCK_REALTIME)) == 0)
		r->pending_gap = 0;
}

/* The message is lost for GPU g (no room in time, a failed copy, a copy that never ended). */
static void lose(struct rgapsd_replicator *r, const struct rgaps_sub_msg *m, const char *why)
{
	__atomic_fetch_add(&r->lost, 1, __ATOMIC_RELAXED);
	r->pending_gap += 1 + m->gap;
	flush_gap(r);
	if (!r->warned)
		rgaps_warn("topic '%s': the replica on GPU %d lost message %llu of stream %llu (%s); "
			   "its subscribers see a gap (warned once)", r->t->cfg.name, (int)r->gpu,
			   (unsigned long long)m->seq, (unsigned long long)m->stream, why);
	r->warned = true;
}

/* Replicate one taken message; the caller releases it. */
static void replicate(struct rgapsd_replicator *r, const struct rgaps_sub_msg *m)
{
	const struct rgaps_topic_limits *lim = &r->t->lim;
	uint64_t deadline = rgaps_now_ns(CLOCK_MONOTONIC) +
			    (uint64_t)lim->block_timeout_ms * 1000000ull;
	struct rgaps_pub_commit c = {
		.ts_ns = m->ts_ns,
		.attrs = m->attrs,
		.attr_len = m->attr_len,
		.flags = m->flags & RGAPS_ENTRY_REMOTE,
		.origin_stream = m->origin_stream,
		.origin_seq = m->origin_seq,
	};
	uint32_t tok;
	uint64_t off;
	int e;

	if (m->token == UINT32_MAX) { /* gap-only: pass the news on */
		r->pending_gap += m->gap;
		if (rgaps_pub_gap(r->pub, (uint32_t)RGAPS_MIN(r->pending_gap, UINT32_MAX),
				  m->ts_ns) == 0)
			r->pending_gap = 0;
		return;
	}
	if ((m->flags & RGAPS_ENTRY_FENCE) &&
	    rgapsd__msg_fence_wait(r->t, &r->fences, m, r->streams[m->slot], &r->stop)) {
		if (!stopping(r))
			lose(r, m, "its copy never completed");
		return;
	}
	/* Room in the replica: in slices, so that a stop is seen (the loop joins us). */
	for (;;) {
		e = rgaps_pub_loan(r->pub, m->size, 0, &tok, &off);
		if (e != -EAGAIN || stopping(r) || rgaps_now_ns(CLOCK_MONOTONIC) >= deadline)
			break;
		e = rgaps_pub_loan(r->pub, m->size, RETRY_SLICE_MS, &tok, &off);
		if (e != -ETIMEDOUT)
			break;
	}
	if (e) {
		if (!stopping(r))
			lose(r, m, e == -EAGAIN || e == -ETIMEDOUT ? "no room in time" : strerror(-e));
		return;
	}
	e = copy_message(r, (uint8_t *)r->pub_m->pool.base + off, m->data, m->size);
	if (e) {
		rgaps_pub_cancel(r->pub, tok);
		lose(r, m, "the copy failed");
		return;
	}
	c.gap = (uint32_t)RGAPS_MIN(m->gap + r->pending_gap, UINT32_MAX);
	for (;;) {
		e = rgaps_pub_commit(r->pub, tok, m->size, &c, 0, true, NULL);
		if (e != -EAGAIN || stopping(r) || rgaps_now_ns(CLOCK_MONOTONIC) >= deadline)
			break;
		usleep(RETRY_SLICE_MS * 1000 / 4);
	}
	if (e) {
		if (e == -EAGAIN)
			rgaps_pub_cancel(r->pub, tok);
		if (!stopping(r))
			lose(r, m, "no queue entry in time");
		return;
	}
	r->pending_gap = 0;
	__atomic_fetch_add(&r->copies, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&r->bytes, m->size, __ATOMIC_RELAXED);
}

static void *replicator_main(void *arg)
{
	struct rgapsd_replicator *r = arg;
	char name[16];

	snprintf(name, sizeof(name), "rep%d-%.9s", (int)r->gpu, r->t->cfg.name);
	pthread_setname_np(pthread_self(), name);
	while (!stopping(r)) {
		struct rgaps_sub_msg m;
		int e = rgaps_sub_take(r->sub, 0, 0, &m);

		if (e == -EAGAIN) {
			uint32_t dir = __atomic_load_n(&r->t->hdr->dir_gen, __ATOMIC_ACQUIRE);

			flush_gap(r);
			if (dir != r->dir_seen) {
				/* Members came or went while nothing was published: a departed
				 * reader's holds stop pinning the replica's blocks now, not at
				 * the next message. */
				r->dir_seen = dir;
				pub_sync(r);
				rgaps_pub_reclaim(r->pub);
			}
			wait_messages(r);
			continue;
		}
		if (e) {
			if (e != -ENOTCONN)
				rgaps_error("topic '%s': the replicator of GPU %d cannot take: %s",
					    r->t->cfg.name, (int)r->gpu, strerror(-e));
			break; /* -ENOTCONN: the topic closes */
		}
		replicate(r, &m);
		if (m.token != UINT32_MAX)
			rgaps_sub_release(r->sub, m.token);
		if (r->nleaving)
			leaving_sweep(r);
		rgaps_pub_reclaim(r->pub);
	}
	return NULL;
}

/* ---------------------------------------------------------------- start, stop (the loop) */

static void replicator_free(struct rgapsd_replicator *r)
{
	struct rgapsd_topic *t = r->t;

	rgaps_sub_destroy(r->sub);
	rgaps_pub_destroy(r->pub);
	rgaps_fence_cache_destroy(r->fences);
	for (uint32_t k = 0; r->streams && k < t->lim.max_publishers; k++)
		if (r->streams[k])
			rgapsd__member_put(r->streams[k]);
	for (uint32_t i = 0; i < r->nleaving; i++)
		rgapsd__member_put(r->leaving[i]);
	for (uint32_t j = 0; r->subs && j < t->lim.max_subscribers; j++)
		if (r->subs[j])
			rgapsd__member_put(r->subs[j]);
	/* The replica drains like a departed publisher's stream: g's subscribers read it out. */
	if (r->pub_m)
		rgapsd__member_leave(r->pub_m);
	if (r->sub_m)
		rgapsd__member_leave(r->sub_m);
	if (r->bounce) {
		if (r->bounce_pinned)
			t->mem->ops.memory.host_unregister(t->mem->ctx, r->bounce);
		munmap(r->bounce, r->bounce_len);
	}
	free(r->leaving);
	free(r->streams);
	free(r->subs);
	free(r);
}

int rgapsd__replicator_start(struct rgapsd_topic *t, int32_t gpu, struct rgapsd_replicator **r_p,
			     char *err, size_t errlen)
{
	struct rgapsd_member_spec sub_spec = {
		.kind = RGAPSD_MEMBER_SUB, .pid = getpid(), .own = true, .gpu = -1,
		.pool_dev = -1, .serve = RGAPSD_SERVE_ORIGINAL,
	};
	struct rgapsd_member_spec pub_spec = {
		.kind = RGAPSD_MEMBER_PUB, .pid = getpid(), .own = true, .gpu = -1,
		.pool_dev = gpu, .serve = gpu,
	};
	struct rgaps_topic_cbs scbs = { .sync = sub_sync }, pcbs = { .sync = pub_sync };
	struct rgapsd_replicator *r = calloc(1, sizeof(*r));
	uint8_t k_gd, k_dg;
	char why[256];
	int e;

	if (!r) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	r->t = t;
	r->gpu = gpu;
	scbs.arg = pcbs.arg = r;
	k_gd = t->topo->link[gpu][t->cfg.device].kind;
	k_dg = t->topo->link[t->cfg.device][gpu].kind;
	r->peer = k_gd == RGAPS_MEM_LINK_NVLINK || k_gd == RGAPS_MEM_LINK_PCIE;
	r->streams = calloc(t->lim.max_publishers, sizeof(*r->streams));
	r->subs = calloc(t->lim.max_subscribers, sizeof(*r->subs));
	if (!r->streams || !r->subs) {
		snprintf(err, errlen, "out of memory");
		e = -ENOMEM;
		goto err;
	}
	if (!r->peer && bounce_get(r)) {
		snprintf(err, errlen, "no host memory for a %llu-byte copy buffer",
			 (unsigned long long)RGAPS_MIN(BOUNCE_MAX, t->lim.max_message_size));
		e = -ENOMEM;
		goto err;
	}
	/* The replica stream first: its pool on our GPU is what can fail (GPU memory). */
	e = rgapsd__member_create_spec(t, &pub_spec, &r->pub_m, why, sizeof(why));
	if (e) {
		snprintf(err, errlen, "cannot make the replica on GPU %d: %s", (int)gpu, why);
		goto err;
	}
	e = rgaps_pub_create(t->hdr, &t->lim, r->pub_m->map, r->pub_m->pool.base, &pcbs, &r->pub);
	if (e) {
		snprintf(err, errlen, "cannot publish the replica on GPU %d: %s", (int)gpu,
			 strerror(-e));
		goto err;
	}
	e = rgapsd__member_create_spec(t, &sub_spec, &r->sub_m, why, sizeof(why));
	if (e) {
		snprintf(err, errlen, "the replicator of GPU %d cannot subscribe: %s", (int)gpu,
			 why);
		goto err;
	}
	e = rgaps_sub_create(t->hdr, &t->lim, r->sub_m->map, &scbs, &r->sub);
	if (e) {
		snprintf(err, errlen, "the replicator of GPU %d cannot subscribe: %s", (int)gpu,
			 strerror(-e));
		goto err;
	}
	e = -pthread_create(&r->thread, NULL, replicator_main, r);
	if (e) {
		snprintf(err, errlen, "cannot start the replicator of GPU %d: %s", (int)gpu,
			 strerror(-e));
		goto err;
	}
	r->started = true;
	rgaps_info("topic '%s': replicator for GPU %d started: replica stream %llu, copies %s",
		   t->cfg.name, (int)gpu, (unsigned long long)r->pub_m->gen,
		   r->peer ? (k_dg == RGAPS_MEM_LINK_NVLINK || k_gd == RGAPS_MEM_LINK_NVLINK ?
				      "GPU to GPU over NVLink" :
				      "GPU to GPU over PCIe") :
			     r->bounce_pinned ? "through pinned host memory" :
						"through (unpinned) host memory");
	*r_p = r;
	return 0;
err:
	rgaps_warn("topic '%s': %s", t->cfg.name, err);
	replicator_free(r);
	return e == -ENOMEM ? -ENOMEM : -ENODEV;
}

void rgapsd__replicator_stop(struct rgapsd_replicator *r)
{
	if (r->started) {
		__atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
		__atomic_fetch_add(&r->wake, 1, __ATOMIC_SEQ_CST);
		rgaps_futex_wake_all(&r->wake);
		pthread_join(r->thread, NULL);
	}
	rgaps_info("topic '%s': replicator for GPU %d stopped after %llu copies (%llu bytes), "
		   "%llu lost", r->t->cfg.name, (int)r->gpu, (unsigned long long)r->copies,
		   (unsigned long long)r->bytes, (unsigned long long)r->lost);
	replicator_free(r);
}

void rgapsd__replicator_stats(const struct rgapsd_replicator *r,
			      struct rgapsd_replicator_stats *st)
{
	st->copies = __atomic_load_n(&r->copies, __ATOMIC_RELAXED);
	st->bytes = __atomic_load_n(&r->bytes, __ATOMIC_RELAXED);
	st->lost = __atomic_load_n(&r->lost, __ATOMIC_RELAXED);
	st->stream = r->pub_m ? r->pub_m->gen : 0;
	st->how = r->peer ? "peer" : "host";
}
