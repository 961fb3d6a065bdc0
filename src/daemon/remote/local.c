/*
 * The remote path's view of the local topic: the forwarder's subscriber (every
 * message published on this host, taken to be sent to peers) and the landing
 * publisher of each in ring (messages from peers, published here). This is the
 * only file of src/daemon/remote/ that calls the topic API of
 * src/common/topic.h, so a change of that API is made here alone.
 *
 * Both are rgapsd's own members of the topic (own.h, which the replicator
 * builds on too): the forwarder reads every publisher's stream through the
 * members' read-only mappings, and the landing publisher watches every
 * subscriber's region the same way. What this file adds is the remote path's
 * own: the forwarder's lock (its thread takes, the loop releases), its
 * bounded wait, and messages marked as landed from a peer.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/log.h"
#include "internal.h"

#define WAIT_SLICE_NS (200ll * 1000 * 1000)

/* ---------------------------------------------------------------- the forwarder's subscriber */

int rt_local_sub_open(struct rgapsd_topic *t, struct rt_local_sub *s)
{
	char err[256];
	int r;

	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	r = rgapsd_own_sub_open(t, NULL, NULL, &s->own, err, sizeof(err));
	if (r) {
		rgaps_error("topic '%s': the forwarder cannot subscribe: %s", t->cfg.name, err);
		pthread_mutex_destroy(&s->lock);
		return r;
	}
	pthread_mutex_lock(&s->lock);
	rgapsd_own_sub_follow(&s->own);
	pthread_mutex_unlock(&s->lock);
	s->open = true;
	return 0;
}

int rt_local_sub_take(struct rt_local_sub *s, int timeout_ms, struct rt_local_msg *m_p)
{
	uint64_t deadline = rgaps_now_ns(CLOCK_MONOTONIC) + (uint64_t)timeout_ms * 1000000ull;

	for (;;) {
		struct rgaps_sub_msg msg;
		int64_t slice;
		uint64_t now;
		int r;

		pthread_mutex_lock(&s->lock);
		r = rgaps__sub_take(s->own.sub, 0, 0, &msg);
		if (!r) {
			*m_p = (struct rt_local_msg){
				.seq = msg.seq,
				.size = msg.size,
				.ts_ns = msg.ts_ns,
				.gap = msg.gap,
				.origin_stream = msg.origin_stream,
				.origin_seq = msg.origin_seq,
				.data = msg.data,
				.src = msg.token == UINT32_MAX
					       ? NULL
					       : rgapsd_own_sub_stream(&s->own, msg.slot,
								       msg.stream),
				.remote_origin = (msg.flags & RGAPS_ENTRY_REMOTE) != 0,
				.token = msg.token,
			};
		}
		pthread_mutex_unlock(&s->lock);
		if (r != -EAGAIN)
			return r;
		now = rgaps_now_ns(CLOCK_MONOTONIC);
		if (now >= deadline)
			return -ETIMEDOUT;
		/* Outside the lock, so the loop's releases never wait behind our sleep; no
		 * longer than messages parked for their fences allow (they ring nothing). */
		slice = RGAPS_MIN(rgaps__sub_fence_slice(s->own.sub), WAIT_SLICE_NS);
		if (slice == 0) {
			sched_yield();
			continue;
		}
		r = rgaps__sub_sleep(s->own.sub, &s->lock, NULL, 0, NULL, NULL,
				    (int64_t)RGAPS_MIN(deadline - now, (uint64_t)slice));
		if (r < 0)
			return r;
	}
}

void rt_local_sub_release(struct rt_local_sub *s, const struct rt_local_msg *m)
{
	if (!s->open || m->token == UINT32_MAX)
		return;
	pthread_mutex_lock(&s->lock);
	rgapsd_own_sub_release(&s->own, m->token);
	pthread_mutex_unlock(&s->lock);
}

void rt_local_sub_close(struct rt_local_sub *s)
{
	if (!s->open)
		return;
	rgapsd_own_sub_close(&s->own);
	pthread_mutex_destroy(&s->lock);
	memset(s, 0, sizeof(*s));
}

/* ---------------------------------------------------------------- the landing publisher */

int rt_local_pub_open(struct rgapsd_topic *t, struct rt_local_pub *p)
{
	char err[256];
	int r;

	memset(p, 0, sizeof(*p));
	/* On the loop, which writes the member table: its sync reads it unlocked. */
	r = rgapsd_own_pub_open(t, RGAPSD_SERVE_ORIGINAL, false, &p->own, err, sizeof(err));
	if (r) {
		rgaps_warn("topic '%s': cannot publish what peers send: %s", t->cfg.name, err);
		return r;
	}
	rgapsd_own_pub_follow(&p->own);
	p->open = true;
	return 0;
}

int rt_local_pub_loan(struct rt_local_pub *p, uint64_t size, uint32_t *token_p, uint8_t **dst_p)
{
	uint64_t off;
	uint32_t tok;
	int r = rgaps__pub_loan(p->own.pub, size, 0, &tok, &off);

	if (r)
		return r;
	*token_p = tok;
	*dst_p = rgapsd_own_pub_block(&p->own, off);
	return 0;
}

int rt_local_pub_commit(struct rt_local_pub *p, uint32_t token, uint64_t size, uint64_t ts_ns,
			uint32_t gap, uint64_t origin_stream, uint64_t origin_seq)
{
	struct rgaps_pub_commit c = {
		.ts_ns = ts_ns,
		.flags = RGAPS_ENTRY_REMOTE,
		.gap = gap,
		.origin_stream = origin_stream,
		.origin_seq = origin_seq,
	};

	/* The loop never waits: a full queue under "block" keeps the loan, to retry. */
	return rgaps__pub_commit(p->own.pub, token, size, &c, 0, true, NULL);
}

void rt_local_pub_cancel(struct rt_local_pub *p, uint32_t token)
{
	rgaps__pub_cancel(p->own.pub, token);
}

int rt_local_pub_gap(struct rt_local_pub *p, uint32_t gap, uint64_t ts_ns)
{
	return rgaps__pub_gap_flags(p->own.pub, gap, ts_ns, RGAPS_ENTRY_REMOTE);
}

void rt_local_pub_reclaim(struct rt_local_pub *p)
{
	if (p->open)
		rgaps__pub_reclaim(p->own.pub);
}

void rt_local_pub_close(struct rt_local_pub *p)
{
	if (!p->open)
		return;
	/* Its stream drains like a departed client's: subscribers read what landed. */
	rgapsd_own_pub_close(&p->own);
	memset(p, 0, sizeof(*p));
}
