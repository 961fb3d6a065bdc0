/*
 * The replicator of a topic (docs/GPU.md, "replicate" and "Chained
 * replication"): for every GPU g other than the pools' that subscribers read
 * a replica on, rgapsd keeps a stream of its own whose pool lives on g, and
 * one thread copies every message of the topic's own streams into those
 * replicas once each - never once per subscriber - along a chain of GPUs
 * (gpu_chain.c: 0 -> 1 -> 2 -> 3, piece by piece, each link carrying each
 * byte once), committing each replica as soon as it is whole. Subscribers on
 * g read only g's replica stream (members.c: `serve`), in place.
 *
 * Members: the replicator is a subscriber of the topic's own streams (so their
 * publishers wait for it under "block", as for any reader), and each replica
 * is a publisher of its own stream (whose readers are the subscribers on its
 * GPU): rgapsd's own members (own.c), as the remote path's forwarder's, which
 * its thread alone calls. The copying itself is gpu_chain.c's.
 *
 * Replicas come and go with the loop's decisions (topics.c): the loop makes a
 * replica's member and asks the thread to feed it (JOINING), or to stop
 * (LEAVING); the thread takes such changes between two messages, after it
 * took the next one, so a subscriber misses nothing published after its
 * attach; the loop ends a replica once the thread has let go of it (LEFT),
 * and the replicator once no replica is left. A GPU without subscribers is
 * no relay: the chain is formed over the GPUs that hold replicas.
 *
 * A message keeps its origin (stream, seq), its attribute block, its flags and
 * its gap. A replica that cannot take it in time (block_timeout_ms, a full
 * replica under "block") loses it, counted and reported to that GPU's
 * subscribers as a gap with the next one; the chain closes over that GPU for
 * this message. Messages published in stream order are copied once their
 * fence completed: until then they wait in the subscriber's parking
 * (topic.h, fence_done) while the other streams flow; one whose copy never
 * completes is lost there.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/futex.h"
#include "../common/log.h"
#include "daemon.h"
#include "gpu_chain.h"
#include "own.h"

#define WAIT_SLICE_NS (200ll * 1000 * 1000)
#define RETRY_SLICE_MS 20 /* room in a full replica: asked again this often */

enum replica_state {
	REPLICA_JOINING, /* made by the loop; the thread has not fed it yet */
	REPLICA_ACTIVE,	 /* in the chain */
	REPLICA_LEAVING, /* the loop asked it out; the thread still may feed it */
	REPLICA_LEFT,	 /* the thread let go of it: the loop ends it */
};

/* One GPU's replica: rgapsd's publisher of a stream whose pool lives on that GPU. */
struct replica {
	struct rgapsd_replicator *r;
	int32_t gpu;
	enum replica_state state;  /* under r->lock */
	struct rgapsd_own_pub own; /* serve: gpu */
	uint64_t granted;	   /* GPUs its pool is opened to */
	uint64_t pending_gap;	   /* lost here, told with the next replicated message */
	/* the message in hand */
	uint32_t tok;
	uint64_t off;
	bool loaned;
	bool settled; /* committed, or counted lost */
	bool warned;
	/* statistics (atomics: the loop reads them) */
	uint64_t copies, bytes, lost;
	int32_t fed_from; /* the GPU its bytes come from */
	uint32_t via_host;
};

struct rgapsd_replicator {
	struct rgapsd_topic *t;
	pthread_mutex_t lock;			     /* the replicas' states, changes */
	struct replica *reps[RGAPS_MEM_MAX_DEVICES]; /* by GPU: the loop sets, under lock */
	uint32_t changes;			     /* bumped on every state change */
	struct rgapsd_own_sub own;		     /* its subscriber of the topic's own streams */
	uint64_t *granted; /* [max_publishers]: GPUs each stream's pool is opened to */
	bool new_streams;  /* streams came whose pools the chain has not opened yet */
	/* the thread's chain */
	uint32_t changes_seen;
	struct replica *chain[RGAPS_MEM_MAX_DEVICES]; /* by hop */
	struct rgapsd_chain_hop hops[RGAPS_MEM_MAX_DEVICES];
	uint32_t nhops;
	struct rgaps_mem_link link[RGAPS_MEM_MAX_DEVICES]
				  [RGAPS_MEM_MAX_DEVICES]; /* less refusals */
	struct rgapsd_chain copier;
	uint32_t dir_seen; /* the topic's dir_gen at the last idle membership look */
	/* the thread */
	pthread_t thread;
	bool started;
	uint32_t stop; /* atomic */
	uint32_t wake; /* futex word: bumped to end its sleep */
};

static bool stopping(struct rgapsd_replicator *r)
{
	return __atomic_load_n(&r->stop, __ATOMIC_ACQUIRE);
}

static void wake_thread(struct rgapsd_replicator *r)
{
	__atomic_fetch_add(&r->wake, 1, __ATOMIC_SEQ_CST);
	rgaps_futex_wake_all(&r->wake);
}

/* ---------------------------------------------------------------- membership (its thread) */

/* The own subscriber's moved hook: a stream came into slot k, or left it. */
static void stream_moved(void *arg, uint32_t k, bool came)
{
	struct rgapsd_replicator *r = arg;

	if (came)
		r->new_streams = true; /* its pool is opened to the chain's GPUs later */
	else
		r->granted[k] = 0;
}

/* ---------------------------------------------------------------- the chain (its thread) */

/* gpu cannot read src_gpu's memory after all: the order goes around that link. */
static void link_refused(struct rgapsd_replicator *r, int32_t gpu, int32_t src_gpu,
			 const char *what)
{
	rgaps_warn("topic '%s': %s cannot be opened to GPU %d: its replica is fed from GPU %d "
		   "through host memory, or from another GPU",
		   r->t->cfg.name, what, (int)gpu, (int)src_gpu);
	r->link[gpu][src_gpu].kind = RGAPS_MEM_LINK_NONE;
}

/*
 * Open to each hop's GPU the memory it pulls from: the topic's own pools for
 * hops fed from the message, the previous replica's pool for the others.
 * false when a pool refused (the link is then marked none: order again).
 */
static bool grant_hops(struct rgapsd_replicator *r, const struct rgapsd_chain_hop *hops,
		       struct replica *const *reps, uint32_t n)
{
	const struct rgaps_memory_ops *ops = &r->t->mem->ops.memory;
	void *ctx = r->t->mem->ctx;
	int32_t d = r->t->cfg.device;

	for (uint32_t i = 0; i < n; i++) {
		uint64_t bit = 1ull << hops[i].gpu;

		if (hops[i].via_host)
			continue;
		if (hops[i].from >= 0) {
			struct replica *src = reps[hops[i].from];

			if (src->granted & bit)
				continue;
			if (ops->pool_grant(ctx, &src->own.self->pool, hops[i].gpu,
					    RGAPS_MEM_GRANT_READ)) {
				link_refused(r, hops[i].gpu, src->gpu, "a replica's pool");
				return false;
			}
			src->granted |= bit;
			continue;
		}
		for (uint32_t k = 0; k < r->t->lim.max_publishers; k++) {
			struct rgapsd_member *m = r->own.streams[k];

			if (!m || (r->granted[k] & bit))
				continue;
			if (ops->pool_grant(ctx, &m->pool, hops[i].gpu, RGAPS_MEM_GRANT_READ)) {
				link_refused(r, hops[i].gpu, d, "the topic's pools");
				return false;
			}
			r->granted[k] |= bit;
		}
	}
	return true;
}

/* The order of these replicas, with every pool it needs opened. */
static void plan(struct rgapsd_replicator *r, struct replica *const *set, uint32_t n,
		 struct rgapsd_chain_hop *hops, struct replica **reps)
{
	struct replica *in[RGAPS_MEM_MAX_DEVICES]; /* set may be reps itself */
	int32_t gpus[RGAPS_MEM_MAX_DEVICES];

	memcpy(in, set, n * sizeof(*in));
	for (uint32_t i = 0; i < n; i++)
		gpus[i] = in[i]->gpu;
	/* Each round that fails marks one link none: at most n * n rounds. */
	for (;;) {
		rgapsd_chain_order(r->link, r->t->cfg.device, gpus, n, hops);
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t k = 0; k < n; k++)
				if (in[k]->gpu == hops[i].gpu)
					reps[i] = in[k];
		if (grant_hops(r, hops, reps, n))
			return;
	}
}

/* What the loop changed since the last look: replicas to feed, replicas to let go. */
static void apply_changes(struct rgapsd_replicator *r)
{
	bool streams_moved = r->new_streams;
	struct replica *in[RGAPS_MEM_MAX_DEVICES];
	uint32_t n = 0, ndev = r->t->topo->ndevices;
	bool changed;
	char line[256];

	pthread_mutex_lock(&r->lock);
	changed = r->changes != r->changes_seen;
	r->changes_seen = r->changes;
	for (uint32_t g = 0; changed && g < ndev; g++) {
		struct replica *rep = r->reps[g];

		if (!rep)
			continue;
		if (rep->state == REPLICA_JOINING)
			rep->state = REPLICA_ACTIVE;
		else if (rep->state == REPLICA_LEAVING)
			rep->state = REPLICA_LEFT;
		if (rep->state == REPLICA_ACTIVE)
			in[n++] = rep;
	}
	pthread_mutex_unlock(&r->lock);
	r->new_streams = false;
	if (!changed) {
		if (streams_moved) /* new pools to open to the hops fed from them */
			plan(r, r->chain, r->nhops, r->hops, r->chain);
		return;
	}
	r->nhops = n;
	plan(r, in, n, r->hops, r->chain);
	for (uint32_t i = 0; i < n; i++) {
		const struct rgapsd_chain_hop *h = &r->hops[i];

		__atomic_store_n(&r->chain[i]->fed_from,
				 h->from < 0 ? r->t->cfg.device : r->hops[h->from].gpu,
				 __ATOMIC_RELAXED);
		__atomic_store_n(&r->chain[i]->via_host, h->via_host, __ATOMIC_RELAXED);
	}
	rgapsd_chain_describe(r->t->cfg.device, r->hops, n, line, sizeof(line));
	rgaps_info("topic '%s': replicas fed %s%s", r->t->cfg.name, n ? "along " : "",
		   n ? line : "nowhere (no replica left)");
}

/* ---------------------------------------------------------------- one message (its thread) */

static bool stop_asked(void *arg)
{
	return stopping(arg);
}

/* Sleep until an original stream rings, the membership moves, or stop (our wake word). */
static void wait_messages(struct rgapsd_replicator *r)
{
	struct futex_waitv own;
	int64_t slice;

	rgaps_waitv_set(&own, &r->wake, __atomic_load_n(&r->wake, __ATOMIC_SEQ_CST));
	own.flags |= FUTEX_PRIVATE_FLAG;
	/* No lock: the sync callbacks that change the mappings run on this thread. A message
	 * waiting for its fence rings nothing: then look again as rgaps__sub_fence_slice() says. */
	slice = RGAPS_MIN(rgaps__sub_fence_slice(r->own.sub), WAIT_SLICE_NS);
	if (slice == 0)
		sched_yield();
	else
		rgaps__sub_sleep(r->own.sub, NULL, &own, 1, stop_asked, r, slice);
}

/*
 * Tell a GPU's subscribers of losses now, with a gap-only message (no later
 * message may come to carry them); kept for later when its queue is full.
 */
static void flush_gap(struct replica *rep)
{
	if (rep->pending_gap &&
	    rgaps__pub_gap(rep->own.pub, (uint32_t)RGAPS_MIN(rep->pending_gap, UINT32_MAX),
			  rgaps_now_ns(CLOCK_REALTIME)) == 0)
		rep->pending_gap = 0;
}

/*
 * The message is lost for this GPU (no room in time, a failed copy, a copy
 * that never ended). A loan it holds is the caller's to cancel: during the
 * chain's copy, later hops may still read the block.
 */
static void lose(struct replica *rep, const struct rgaps_sub_msg *m, const char *why)
{
	rep->settled = true;
	__atomic_fetch_add(&rep->lost, 1, __ATOMIC_RELAXED);
	rep->pending_gap += 1 + m->gap;
	flush_gap(rep);
	if (!rep->warned)
		rgaps_warn(
			"topic '%s': the replica on GPU %d lost message %llu of stream %llu (%s); "
			"its subscribers see a gap (warned once)",
			rep->r->t->cfg.name, (int)rep->gpu, (unsigned long long)m->seq,
			(unsigned long long)m->stream, why);
	rep->warned = true;
}

static uint64_t now_ns(void)
{
	return rgaps_now_ns(CLOCK_MONOTONIC);
}

/*
 * A block in every replica of the chain: first without waiting, then, for the
 * full ones, in slices until the deadline (a stop is seen between slices).
 * Those without one lose the message.
 */
static void loan_all(struct rgapsd_replicator *r, const struct rgaps_sub_msg *m, uint64_t deadline)
{
	uint32_t missing = 0;
	int e = 0;

	for (uint32_t i = 0; i < r->nhops; i++) {
		struct replica *rep = r->chain[i];

		rep->loaned = rgaps__pub_loan(rep->own.pub, m->size, 0, &rep->tok, &rep->off) == 0;
		missing += !rep->loaned;
	}
	while (missing && !stopping(r) && now_ns() < deadline) {
		for (uint32_t i = 0; i < r->nhops && missing; i++) {
			struct replica *rep = r->chain[i];

			if (rep->loaned)
				continue;
			e = rgaps__pub_loan(rep->own.pub, m->size, RETRY_SLICE_MS, &rep->tok,
					   &rep->off);
			if (e == 0) {
				rep->loaned = true;
				missing--;
			} else if (e != -ETIMEDOUT && e != -EAGAIN) {
				lose(rep, m, strerror(-e));
				missing--;
			}
		}
	}
	for (uint32_t i = 0; i < r->nhops; i++)
		if (!r->chain[i]->loaned && !r->chain[i]->settled && !stopping(r))
			lose(r->chain[i], m, "no room in time");
}

struct msg_ctx {
	struct rgapsd_replicator *r;
	const struct rgaps_sub_msg *m;
	struct replica **reps; /* by hop of this message's chain */
	uint64_t deadline;
};

/* A replica is whole: publish it at once (its subscribers need not wait for the chain). */
static void on_whole(void *arg, uint32_t hop)
{
	struct msg_ctx *mc = arg;
	struct replica *rep = mc->reps[hop];
	const struct rgaps_sub_msg *m = mc->m;
	struct rgaps_pub_commit c = {
		.ts_ns = m->ts_ns,
		.attrs = m->attrs,
		.attr_len = m->attr_len,
		.flags = m->flags & RGAPS_ENTRY_REMOTE,
		.origin_stream = m->origin_stream,
		.origin_seq = m->origin_seq,
		.gap = (uint32_t)RGAPS_MIN(m->gap + rep->pending_gap, UINT32_MAX),
	};
	int e;

	/*
	 * Committed, the block is its subscribers' to read, and its owner - this
	 * thread - frees or reuses it only at a later loan or reclaim of this
	 * replica, after the chain's copies out of it (to later hops) are done.
	 */
	for (;;) {
		e = rgaps__pub_commit(rep->own.pub, rep->tok, m->size, &c, 0, true, NULL);
		if (e != -EAGAIN || stopping(mc->r) || now_ns() >= mc->deadline)
			break;
		usleep(RETRY_SLICE_MS * 1000 / 4);
	}
	if (e) {
		if (e != -EAGAIN)
			rep->loaned = false; /* commit dropped the loan */
		if (!stopping(mc->r))
			lose(rep, m, "no queue entry in time");
		return;
	}
	rep->loaned = false;
	rep->settled = true;
	rep->pending_gap = 0;
	__atomic_fetch_add(&rep->copies, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&rep->bytes, m->size, __ATOMIC_RELAXED);
}

/* Replicate one taken message into every replica of the chain; the caller releases it. */
static void replicate(struct rgapsd_replicator *r, const struct rgaps_sub_msg *m)
{
	struct rgapsd_chain_hop hops[RGAPS_MEM_MAX_DEVICES];
	struct replica *got[RGAPS_MEM_MAX_DEVICES], *reps[RGAPS_MEM_MAX_DEVICES];
	struct msg_ctx mc = { r, m, reps,
			      now_ns() + (uint64_t)r->t->lim.block_timeout_ms * 1000000ull };
	uint32_t n = 0;
	int e;

	if (!r->nhops)
		return;
	for (uint32_t i = 0; i < r->nhops; i++)
		r->chain[i]->settled = false;
	if (m->token == UINT32_MAX) { /* gap-only: pass the news on */
		for (uint32_t i = 0; i < r->nhops; i++) {
			r->chain[i]->pending_gap += m->gap;
			flush_gap(r->chain[i]);
		}
		return;
	}
	loan_all(r, m, mc.deadline);
	if (stopping(r)) {
		for (uint32_t i = 0; i < r->nhops; i++) {
			if (r->chain[i]->loaned)
				rgaps__pub_cancel(r->chain[i]->own.pub, r->chain[i]->tok);
			r->chain[i]->loaned = false;
		}
		return;
	}
	for (uint32_t i = 0; i < r->nhops; i++)
		if (r->chain[i]->loaned)
			got[n++] = r->chain[i];
	if (n == r->nhops) {
		memcpy(reps, r->chain, n * sizeof(*reps));
		memcpy(hops, r->hops, n * sizeof(*hops));
	} else { /* the chain closes over the GPUs without room, for this message */
		plan(r, got, n, hops, reps);
	}
	for (uint32_t i = 0; i < n; i++)
		hops[i].dst = rgapsd_own_pub_block(&reps[i]->own, reps[i]->off);
	e = rgapsd_chain_copy(&r->copier, m->data, m->size, hops, n, on_whole, &mc);
	for (uint32_t i = 0; i < n; i++) {
		if (!reps[i]->settled)
			lose(reps[i], m, e ? strerror(-e) : "the copy failed");
		if (reps[i]->loaned) /* lost with its block loaned: the chain is done with it */
			rgaps__pub_cancel(reps[i]->own.pub, reps[i]->tok);
		reps[i]->loaned = false;
	}
}

static void reclaim_all(struct rgapsd_replicator *r, bool resync)
{
	for (uint32_t i = 0; i < r->nhops; i++) {
		if (resync)
			rgapsd_own_pub_follow(&r->chain[i]->own);
		flush_gap(r->chain[i]);
		rgaps__pub_reclaim(r->chain[i]->own.pub);
	}
}

static void *replicator_main(void *arg)
{
	struct rgapsd_replicator *r = arg;
	char name[16];

	snprintf(name, sizeof(name), "rep-%.11s", r->t->cfg.name);
	pthread_setname_np(pthread_self(), name);
	while (!stopping(r)) {
		struct rgaps_sub_msg m;
		uint32_t dir = __atomic_load_n(&r->t->hdr->dir_gen, __ATOMIC_ACQUIRE);
		int e = rgaps__sub_take(r->own.sub, 0, 0, &m);

		if (e == -EAGAIN) {
			apply_changes(r);
			if (dir != r->dir_seen) {
				/* Members came or went while nothing was published: a departed
				 * reader's holds stop pinning a replica's blocks now, not at
				 * the next message. */
				r->dir_seen = dir;
				reclaim_all(r, true);
			} else {
				reclaim_all(r, false);
			}
			wait_messages(r);
			continue;
		}
		if (e) {
			if (e != -ENOTCONN)
				rgaps_error("topic '%s': the replicator cannot take: %s",
					    r->t->cfg.name, strerror(-e));
			break; /* -ENOTCONN: the topic closes */
		}
		/* After the take: a replica made before this message was published is fed it. */
		apply_changes(r);
		replicate(r, &m);
		rgapsd_own_sub_release(&r->own, m.token);
		reclaim_all(r, false);
	}
	return NULL;
}

/* ---------------------------------------------------------------- the loop's side */

/* Make GPU gpu's replica: its stream's member (its pool on gpu) and our publisher of it. */
static int replica_create(struct rgapsd_replicator *r, int32_t gpu, struct replica **rep_p,
			  char *err, size_t errlen)
{
	struct replica *rep = calloc(1, sizeof(*rep));
	char why[256];
	int e;

	if (!rep) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	rep->r = r;
	rep->gpu = gpu;
	rep->fed_from = -1;
	rep->granted = 1ull << gpu;
	/* Its sync runs on the replicator's thread: under the topic's lock. */
	e = rgapsd_own_pub_open(r->t, gpu, true, &rep->own, why, sizeof(why));
	if (e) {
		snprintf(err, errlen, "cannot make the replica on GPU %d: %s", (int)gpu, why);
		free(rep);
		return e;
	}
	*rep_p = rep;
	return 0;
}

/* End a replica the thread no longer feeds: its stream drains like a departed publisher's. */
static void replica_end(struct replica *rep)
{
	struct rgapsd_topic *t = rep->r->t;
	struct rgapsd_gpu *gp = &t->gpus[rep->gpu];

	gp->copies += rep->copies;
	gp->bytes += rep->bytes;
	gp->lost += rep->lost;
	rgaps_info("topic '%s': replicator for GPU %d stopped after %llu copies (%llu bytes), "
		   "%llu lost",
		   t->cfg.name, (int)rep->gpu, (unsigned long long)rep->copies,
		   (unsigned long long)rep->bytes, (unsigned long long)rep->lost);
	rgapsd_own_pub_close(&rep->own);
	free(rep);
}

static void replicator_free(struct rgapsd_replicator *r)
{
	rgapsd_own_sub_close(&r->own);
	for (uint32_t g = 0; g < RGAPS_MEM_MAX_DEVICES; g++)
		if (r->reps[g])
			replica_end(r->reps[g]);
	rgapsd_chain_fini(&r->copier);
	pthread_mutex_destroy(&r->lock);
	free(r->granted);
	free(r);
}

static int replicator_create(struct rgapsd_topic *t, struct rgapsd_replicator **r_p, char *err,
			     size_t errlen)
{
	struct rgapsd_replicator *r = calloc(1, sizeof(*r));
	char why[256];
	int e;

	if (!r) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	r->t = t;
	pthread_mutex_init(&r->lock, NULL);
	memcpy(r->link, t->topo->link, sizeof(r->link));
	rgapsd_chain_init(&r->copier, &t->mem->ops.memory, t->mem->ctx, t->cfg.gpu_piece,
			   t->lim.max_message_size);
	r->granted = calloc(t->lim.max_publishers, sizeof(*r->granted));
	if (!r->granted) {
		snprintf(err, errlen, "out of memory");
		e = -ENOMEM;
		goto err;
	}
	e = rgapsd_own_sub_open(t, stream_moved, r, &r->own, why, sizeof(why));
	if (e) {
		snprintf(err, errlen, "the replicator cannot subscribe: %s", why);
		goto err;
	}
	e = -pthread_create(&r->thread, NULL, replicator_main, r);
	if (e) {
		snprintf(err, errlen, "cannot start the replicator: %s", strerror(-e));
		goto err;
	}
	r->started = true;
	*r_p = r;
	return 0;
err:
	replicator_free(r);
	return e;
}

static void replicator_stop(struct rgapsd_replicator *r)
{
	if (r->started) {
		__atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
		wake_thread(r);
		pthread_join(r->thread, NULL);
	}
	replicator_free(r);
}

int rgapsd_replica_start(struct rgapsd_topic *t, int32_t gpu, char *err, size_t errlen)
{
	struct rgapsd_replicator *r = t->replicator;
	struct replica *rep;
	int e;

	if (!r) {
		e = replicator_create(t, &r, err, errlen);
		if (e)
			goto err;
		t->replicator = r;
	}
	pthread_mutex_lock(&r->lock);
	rep = r->reps[gpu];
	if (rep && rep->state == REPLICA_LEAVING) {
		rep->state = REPLICA_ACTIVE; /* still fed: it stays */
		r->changes++;
	}
	if (rep && rep->state != REPLICA_LEFT) {
		pthread_mutex_unlock(&r->lock);
		return 0;
	}
	r->reps[gpu] = NULL;
	pthread_mutex_unlock(&r->lock);
	if (rep) /* let go of by the thread a moment ago: a new one */
		replica_end(rep);
	e = replica_create(r, gpu, &rep, err, errlen);
	if (e)
		goto err;
	pthread_mutex_lock(&r->lock);
	r->reps[gpu] = rep;
	rep->state = REPLICA_JOINING;
	r->changes++;
	pthread_mutex_unlock(&r->lock);
	wake_thread(r);
	rgaps_info("topic '%s': replicator for GPU %d started: replica stream %llu", t->cfg.name,
		   (int)gpu, (unsigned long long)rep->own.self->gen);
	return 0;
err:
	rgaps_warn("topic '%s': %s", t->cfg.name, err);
	return e == -ENOMEM ? -ENOMEM : -ENODEV;
}

void rgapsd_replica_stop(struct rgapsd_topic *t, int32_t gpu)
{
	struct rgapsd_replicator *r = t->replicator;
	struct replica *rep;

	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	rep = r->reps[gpu];
	if (rep && rep->state == REPLICA_JOINING)
		rep->state = REPLICA_LEFT; /* never fed */
	else if (rep && rep->state == REPLICA_ACTIVE)
		rep->state = REPLICA_LEAVING;
	r->changes++;
	pthread_mutex_unlock(&r->lock);
	wake_thread(r);
}

bool rgapsd_replica_on(const struct rgapsd_topic *t, int32_t gpu)
{
	struct rgapsd_replicator *r = t->replicator;
	bool on;

	if (!r)
		return false;
	pthread_mutex_lock(&r->lock);
	on = r->reps[gpu] &&
	     (r->reps[gpu]->state == REPLICA_JOINING || r->reps[gpu]->state == REPLICA_ACTIVE);
	pthread_mutex_unlock(&r->lock);
	return on;
}

void rgapsd_replicator_sweep(struct rgapsd_topic *t)
{
	struct rgapsd_replicator *r = t->replicator;
	struct replica *gone[RGAPS_MEM_MAX_DEVICES];
	uint32_t n = 0, left = 0;

	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	for (uint32_t g = 0; g < RGAPS_MEM_MAX_DEVICES; g++) {
		if (r->reps[g] && r->reps[g]->state == REPLICA_LEFT) {
			gone[n++] = r->reps[g];
			r->reps[g] = NULL;
		}
		left += r->reps[g] != NULL;
	}
	pthread_mutex_unlock(&r->lock);
	for (uint32_t i = 0; i < n; i++)
		replica_end(gone[i]);
	if (!left) { /* no replica to feed: stop reading the topic (publishers wait for readers) */
		t->replicator = NULL;
		replicator_stop(r);
	}
}

void rgapsd_replicator_destroy(struct rgapsd_topic *t)
{
	if (t->replicator)
		replicator_stop(t->replicator);
	t->replicator = NULL;
}

bool rgapsd_replica_stats_get(const struct rgapsd_topic *t, int32_t gpu,
			   struct rgapsd_replica_stats *st)
{
	struct rgapsd_replicator *r = t->replicator;
	struct replica *rep;

	if (!r)
		return false;
	pthread_mutex_lock(&r->lock);
	rep = r->reps[gpu];
	if (rep) {
		st->copies = __atomic_load_n(&rep->copies, __ATOMIC_RELAXED);
		st->bytes = __atomic_load_n(&rep->bytes, __ATOMIC_RELAXED);
		st->lost = __atomic_load_n(&rep->lost, __ATOMIC_RELAXED);
		st->stream = rep->own.self->gen;
		st->fed_from = __atomic_load_n(&rep->fed_from, __ATOMIC_RELAXED);
		st->how = __atomic_load_n(&rep->via_host, __ATOMIC_RELAXED) ? "host" : "peer";
	}
	pthread_mutex_unlock(&r->lock);
	return rep != NULL;
}
