/*
 * The remote path's view of the local topic: the forwarder's subscriber (every
 * message published on this host, taken to be sent to peers) and the landing
 * publisher of each in ring (messages from peers, published here). This is the
 * only file of src/daemon/remote/ that calls the topic API of
 * src/common/topic.h, so a change of that API is made here alone.
 *
 * Both are members of the topic like a client's (members.c), owned by rgapsd:
 * the forwarder reads every publisher's stream through the members' read-only
 * mappings, and the landing publisher watches every subscriber's region the
 * same way. Their sync callbacks follow the topic's member table directly,
 * taking a reference on each member they map, so the loop frees no region
 * while one of them still reads it.
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

static int leaving_push(struct rt_local_sub *s, struct rgapsd_member *m)
{
	struct rgapsd_member **n = realloc(s->leaving, (s->nleaving + 1) * sizeof(*n));

	if (!n)
		return -ENOMEM;
	s->leaving = n;
	s->leaving[s->nleaving++] = m;
	return 0;
}

static void leaving_sweep(struct rt_local_sub *s)
{
	uint32_t keep = 0;

	for (uint32_t i = 0; i < s->nleaving; i++) {
		if (rgaps_sub_stream_held(s->sub, s->leaving[i]->gen))
			s->leaving[keep++] = s->leaving[i];
		else
			rgapsd__member_put(s->leaving[i]);
	}
	s->nleaving = keep;
}

/* Sync callback (forwarder thread, s->lock held): follow the topic's publishers. */
static int sub_sync(void *arg)
{
	struct rt_local_sub *s = arg;
	struct rgapsd_topic *t = s->t;

	pthread_mutex_lock(&t->lock);
	for (uint32_t k = 0; k < t->lim.max_publishers; k++) {
		struct rgapsd_member *m = t->pubs[k], *cur = s->streams[k];

		if (m && !rgapsd__member_reads(s->self, m))
			m = NULL; /* a replica for another GPU (replicator.c): never forwarded */
		if (cur && cur != m) {
			s->streams[k] = NULL;
			if (rgaps_sub_clear_stream(s->sub, k) || leaving_push(s, cur))
				rgapsd__member_put(cur);
			cur = NULL;
		}
		if (!m)
			continue;
		if (!cur) {
			rgapsd__member_get(m);
			s->streams[k] = m;
		}
		rgaps_sub_set_stream(s->sub, k, m->gen, m->map, m->pool.base,
				     m->state == RGAPSD_MEMBER_DRAINING ? m->limit : UINT64_MAX);
	}
	pthread_mutex_unlock(&t->lock);
	return 0;
}

/*
 * topic.h's fence_done hook of the forwarder's subscriber (the forwarder
 * thread, in its takes, s->lock held): a message published in stream order is
 * sent only once its copy is done; until then it waits parked while the other
 * streams flow, and one whose copy never completes is reported lost.
 */
static int fence_done(void *arg, const struct rgaps_sub_msg *m)
{
	struct rt_local_sub *s = arg;

	return rgapsd__msg_fence_done(s->t, &s->fences, m, s->streams, s->leaving, s->nleaving);
}

int rt_local_sub_open(struct rgapsd_topic *t, struct rt_local_sub *s)
{
	struct rgaps_topic_cbs cbs = { .sync = sub_sync, .fence_done = fence_done, .arg = s };
	char err[256];
	int r;

	memset(s, 0, sizeof(*s));
	s->t = t;
	pthread_mutex_init(&s->lock, NULL);
	s->streams = calloc(t->lim.max_publishers, sizeof(*s->streams));
	if (!s->streams)
		return -ENOMEM;
	r = rgapsd__member_create(t, RGAPSD_MEMBER_SUB, 0, getpid(), true, &s->self, err,
				  sizeof(err));
	if (r) {
		rgaps_error("topic '%s': the forwarder cannot subscribe: %s", t->cfg.name, err);
		goto err;
	}
	r = rgaps_sub_create(t->hdr, &t->lim, s->self->map, &cbs, &s->sub);
	if (r)
		goto err_member;
	pthread_mutex_lock(&s->lock);
	sub_sync(s);
	pthread_mutex_unlock(&s->lock);
	s->open = true;
	return 0;

err_member:
	rgapsd__member_leave(s->self);
err:
	free(s->streams);
	s->streams = NULL;
	return r;
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
		r = rgaps_sub_take(s->sub, 0, 0, &msg);
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
					       : rgapsd__member_of_stream(s->streams, msg.slot,
									  s->leaving, s->nleaving,
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
		slice = RGAPS_MIN(rgaps_sub_fence_slice(s->sub), WAIT_SLICE_NS);
		if (slice == 0) {
			sched_yield();
			continue;
		}
		r = rgaps_sub_sleep(s->sub, &s->lock, NULL, 0, NULL, NULL,
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
	rgaps_sub_release(s->sub, m->token);
	if (s->nleaving)
		leaving_sweep(s);
	pthread_mutex_unlock(&s->lock);
}

void rt_local_sub_close(struct rt_local_sub *s)
{
	if (!s->open)
		return;
	rgaps_sub_destroy(s->sub);
	rgaps_fence_cache_destroy(s->fences);
	for (uint32_t k = 0; k < s->t->lim.max_publishers; k++)
		if (s->streams[k])
			rgapsd__member_put(s->streams[k]);
	for (uint32_t i = 0; i < s->nleaving; i++)
		rgapsd__member_put(s->leaving[i]);
	free(s->leaving);
	free(s->streams);
	rgapsd__member_leave(s->self);
	pthread_mutex_destroy(&s->lock);
	memset(s, 0, sizeof(*s));
}

/* ---------------------------------------------------------------- the landing publisher */

/* Sync callback (loop thread): follow the topic's subscribers. */
static int pub_sync(void *arg)
{
	struct rt_local_pub *p = arg;
	struct rgapsd_topic *t = p->t;

	for (uint32_t j = 0; j < t->lim.max_subscribers; j++) {
		struct rgapsd_member *m = t->subs[j], *cur = p->subs[j];

		if (m && !rgapsd__member_reads(m, p->self))
			m = NULL; /* it reads a replica (replicator.c), not what lands here */
		if (cur == m)
			continue;
		if (cur) {
			rgaps_pub_clear_sub(p->pub, j);
			rgapsd__member_put(cur);
			p->subs[j] = NULL;
		}
		if (m) {
			rgapsd__member_get(m);
			p->subs[j] = m;
			rgaps_pub_set_sub(p->pub, j, m->gen, m->map);
		}
	}
	return 0;
}

int rt_local_pub_open(struct rgapsd_topic *t, struct rt_local_pub *p)
{
	struct rgaps_topic_cbs cbs = { .sync = pub_sync, .arg = p };
	char err[256];
	int r;

	memset(p, 0, sizeof(*p));
	p->t = t;
	p->subs = calloc(t->lim.max_subscribers, sizeof(*p->subs));
	if (!p->subs)
		return -ENOMEM;
	r = rgapsd__member_create(t, RGAPSD_MEMBER_PUB, 0, getpid(), true, &p->self, err,
				  sizeof(err));
	if (r) {
		rgaps_warn("topic '%s': cannot publish what peers send: %s", t->cfg.name, err);
		goto err;
	}
	r = rgaps_pub_create(t->hdr, &t->lim, p->self->map, p->self->pool.base, &cbs, &p->pub);
	if (r)
		goto err_member;
	pub_sync(p);
	p->open = true;
	return 0;

err_member:
	rgapsd__member_leave(p->self);
err:
	free(p->subs);
	p->subs = NULL;
	return r;
}

int rt_local_pub_loan(struct rt_local_pub *p, uint64_t size, uint32_t *token_p, uint8_t **dst_p)
{
	uint64_t off;
	uint32_t tok;
	int r = rgaps_pub_loan(p->pub, size, 0, &tok, &off);

	if (r)
		return r;
	*token_p = tok;
	*dst_p = (uint8_t *)p->self->pool.base + off;
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
	return rgaps_pub_commit(p->pub, token, size, &c, 0, true, NULL);
}

void rt_local_pub_cancel(struct rt_local_pub *p, uint32_t token)
{
	rgaps_pub_cancel(p->pub, token);
}

int rt_local_pub_gap(struct rt_local_pub *p, uint32_t gap, uint64_t ts_ns)
{
	return rgaps_pub_gap_flags(p->pub, gap, ts_ns, RGAPS_ENTRY_REMOTE);
}

void rt_local_pub_reclaim(struct rt_local_pub *p)
{
	if (p->open)
		rgaps_pub_reclaim(p->pub);
}

void rt_local_pub_close(struct rt_local_pub *p)
{
	if (!p->open)
		return;
	rgaps_pub_destroy(p->pub);
	for (uint32_t j = 0; j < p->t->lim.max_subscribers; j++)
		if (p->subs[j])
			rgapsd__member_put(p->subs[j]);
	free(p->subs);
	/* Its stream drains like a departed client's: subscribers read what landed. */
	rgapsd__member_leave(p->self);
	memset(p, 0, sizeof(*p));
}
