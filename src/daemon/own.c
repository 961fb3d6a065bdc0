/*
 * rgapsd's own members of a topic (own.h): a subscriber and a publisher of
 * the daemon's own, following the topic's member table as a client's follow
 * what rgapsd tells them. Written once for the remote path and the
 * replicator, which differ only in the serve they read or publish for, and in
 * the thread they run on.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/log.h"
#include "daemon.h"
#include "own.h"

/* ---------------------------------------------------------------- the subscriber */

/* A stream its slot has lost, of which a message may still be held. */
static int leaving_push(struct rgapsd_own_sub *s, struct rgapsd_member *m)
{
	struct rgapsd_member **n = realloc(s->leaving, (s->nleaving + 1) * sizeof(*n));

	if (!n)
		return -ENOMEM;
	s->leaving = n;
	s->leaving[s->nleaving++] = m;
	return 0;
}

static void leaving_sweep(struct rgapsd_own_sub *s)
{
	uint32_t keep = 0;

	for (uint32_t i = 0; i < s->nleaving; i++) {
		if (rgaps__sub_stream_held(s->sub, s->leaving[i]->gen))
			s->leaving[keep++] = s->leaving[i];
		else
			rgapsd_member_put(s->leaving[i]);
	}
	s->nleaving = keep;
}

/* A stream left slot k: drop it now, or once nothing of it is held. */
static void stream_forget(struct rgapsd_own_sub *s, uint32_t k)
{
	struct rgapsd_member *cur = s->streams[k];

	s->streams[k] = NULL;
	if (s->moved)
		s->moved(s->moved_arg, k, false);
	/* Nothing of it held, or no memory to list it: let go of it now. */
	if (rgaps__sub_clear_stream(s->sub, k) || leaving_push(s, cur))
		rgapsd_member_put(cur);
}

/* Sync callback (the subscriber's thread): follow the topic's publishers. */
static int sub_sync(void *arg)
{
	struct rgapsd_own_sub *s = arg;
	struct rgapsd_topic *t = s->t;

	pthread_mutex_lock(&t->lock);
	for (uint32_t k = 0; k < t->lim.max_publishers; k++) {
		struct rgapsd_member *m = t->pubs[k];

		if (m && !rgapsd_member_reads(s->self, m))
			m = NULL; /* a replica for a GPU (replicator.c): another serve's */
		if (s->streams[k] && s->streams[k] != m)
			stream_forget(s, k);
		if (!m)
			continue;
		if (!s->streams[k]) {
			rgapsd_member_get(m);
			s->streams[k] = m;
			if (s->moved)
				s->moved(s->moved_arg, k, true);
		}
		rgaps__sub_set_stream(s->sub, k, m->gen, m->map, m->pool.base,
				     m->state == RGAPSD_MEMBER_DRAINING ? m->limit : UINT64_MAX);
	}
	pthread_mutex_unlock(&t->lock);
	return 0;
}

struct rgapsd_member *rgapsd_own_sub_stream(const struct rgapsd_own_sub *s, uint32_t slot,
					    uint64_t gen)
{
	if (slot >= s->t->lim.max_publishers)
		return NULL;
	if (s->streams[slot] && s->streams[slot]->gen == gen)
		return s->streams[slot];
	for (uint32_t i = 0; i < s->nleaving; i++)
		if (s->leaving[i]->gen == gen)
			return s->leaving[i];
	return NULL;
}

/* Is src still attached? (Under the lock the loop writes it with.) */
static bool src_active(const struct rgapsd_member *src)
{
	bool active;

	pthread_mutex_lock(&src->t->lock);
	active = src->state == RGAPSD_MEMBER_ACTIVE;
	pthread_mutex_unlock(&src->t->lock);
	return active;
}

/*
 * topic.h's fence_done hook (the subscriber's thread, in its takes): a message
 * published in stream order (RGAPS_ENTRY_FENCE) is handed on only once the
 * copy into its block is complete; until then it waits parked while the other
 * streams flow. Never waits. 0; -EAGAIN: not yet; -ECANCELED: its publisher
 * left before the copy completed (a crashed publisher's: lost); another
 * negative errno when the fence cannot be used (logged).
 */
static int fence_done(void *arg, const struct rgaps_sub_msg *m)
{
	struct rgapsd_own_sub *s = arg;
	struct rgapsd_topic *t = s->t;
	const struct rgapsd_member *src = rgapsd_own_sub_stream(s, m->slot, m->stream);
	const struct rgaps_pub_region *r;
	char why[160] = "";
	void *f;
	int e = 0;

	if (!src) /* never: a held message keeps its stream referenced */
		return -ENODATA;
	r = src->map;

	switch (rgaps__fence_verdict(r, src_active(src))) {
	case RGAPS_FENCE_DONE:
		return 0;
	case RGAPS_FENCE_LOST:
		rgaps_warn(
			"topic '%s': stream %llu message %llu: its publisher left before its copy "
			"completed: lost",
			t->cfg.name, (unsigned long long)m->stream, (unsigned long long)m->seq);
		return -ECANCELED;
	case RGAPS_FENCE_USE:
		break;
	}
	if (!s->fences)
		e = rgaps__fence_cache_create(&t->lim, &t->mem->ops.memory, t->mem->ctx,
					      &s->fences);
	if (!e)
		e = rgaps__fence_cache_get(s->fences, m->slot, m->stream, r, m->fence, &f, why,
					  sizeof(why));
	if (e) {
		rgaps_warn("topic '%s': stream %llu message %llu: %s: not copied (lost)",
			   t->cfg.name, (unsigned long long)m->stream, (unsigned long long)m->seq,
			   why[0] ? why : strerror(-e));
		return e;
	}
	return t->mem->ops.memory.fence_query(t->mem->ctx, f);
}

int rgapsd_own_sub_open(struct rgapsd_topic *t, rgapsd_own_moved_fn moved, void *moved_arg,
			struct rgapsd_own_sub *s, char *err, size_t errlen)
{
	struct rgaps_topic_cbs cbs = { .sync = sub_sync, .fence_done = fence_done, .arg = s };
	struct rgapsd_member_spec spec = {
		.kind = RGAPSD_MEMBER_SUB,
		.pid = getpid(),
		.own = true,
		.gpu = -1,
		.pool_dev = -1,
		.serve = RGAPSD_SERVE_ORIGINAL,
	};
	int e;

	memset(s, 0, sizeof(*s));
	s->t = t; /* the callbacks' */
	s->moved = moved;
	s->moved_arg = moved_arg;
	s->streams = calloc(t->lim.max_publishers, sizeof(*s->streams));
	if (!s->streams) {
		snprintf(err, errlen, "out of memory");
		memset(s, 0, sizeof(*s));
		return -ENOMEM;
	}
	e = rgapsd_member_create_spec(t, &spec, &s->self, err, errlen);
	if (e)
		goto err_streams;
	e = rgaps__sub_create(t->hdr, &t->lim, s->self->map, &cbs, &s->sub);
	if (e) {
		snprintf(err, errlen, "cannot read the topic: %s", strerror(-e));
		goto err_member;
	}
	return 0;

err_member:
	rgapsd_member_leave(s->self);
err_streams:
	free(s->streams);
	memset(s, 0, sizeof(*s));
	return e;
}

void rgapsd_own_sub_follow(struct rgapsd_own_sub *s)
{
	sub_sync(s);
}

void rgapsd_own_sub_release(struct rgapsd_own_sub *s, uint32_t token)
{
	if (token != UINT32_MAX)
		rgaps__sub_release(s->sub, token);
	if (s->nleaving)
		leaving_sweep(s);
}

void rgapsd_own_sub_close(struct rgapsd_own_sub *s)
{
	if (!s->t)
		return;
	rgaps__sub_destroy(s->sub);
	rgaps__fence_cache_destroy(s->fences);
	for (uint32_t k = 0; k < s->t->lim.max_publishers; k++)
		if (s->streams[k])
			rgapsd_member_put(s->streams[k]);
	for (uint32_t i = 0; i < s->nleaving; i++)
		rgapsd_member_put(s->leaving[i]);
	free(s->leaving);
	free(s->streams);
	rgapsd_member_leave(s->self);
	memset(s, 0, sizeof(*s));
}

/* ---------------------------------------------------------------- the publisher */

/* Sync callback: follow the topic's subscribers of the stream's serve. */
static int pub_sync(void *arg)
{
	struct rgapsd_own_pub *p = arg;
	struct rgapsd_topic *t = p->t;

	if (p->off_loop)
		pthread_mutex_lock(&t->lock);
	for (uint32_t j = 0; j < t->lim.max_subscribers; j++) {
		struct rgapsd_member *m = t->subs[j], *cur = p->subs[j];

		if (m && !rgapsd_member_reads(m, p->self))
			m = NULL; /* it reads another serve's streams */
		if (cur == m)
			continue;
		if (cur) {
			rgaps__pub_clear_sub(p->pub, j);
			rgapsd_member_put(cur);
			p->subs[j] = NULL;
		}
		if (m) {
			rgapsd_member_get(m);
			p->subs[j] = m;
			rgaps__pub_set_sub(p->pub, j, m->gen, m->map);
		}
	}
	if (p->off_loop)
		pthread_mutex_unlock(&t->lock);
	return 0;
}

int rgapsd_own_pub_open(struct rgapsd_topic *t, int32_t serve, bool off_loop,
			struct rgapsd_own_pub *p, char *err, size_t errlen)
{
	struct rgaps_topic_cbs cbs = { .sync = pub_sync, .arg = p };
	struct rgapsd_member_spec spec = {
		.kind = RGAPSD_MEMBER_PUB,
		.pid = getpid(),
		.own = true,
		.gpu = -1,
		.pool_dev = serve == RGAPSD_SERVE_ORIGINAL ? -1 : serve,
		.serve = serve,
	};
	int e;

	memset(p, 0, sizeof(*p));
	p->t = t; /* the callback's */
	p->off_loop = off_loop;
	p->subs = calloc(t->lim.max_subscribers, sizeof(*p->subs));
	if (!p->subs) {
		snprintf(err, errlen, "out of memory");
		memset(p, 0, sizeof(*p));
		return -ENOMEM;
	}
	e = rgapsd_member_create_spec(t, &spec, &p->self, err, errlen);
	if (e)
		goto err_subs;
	e = rgaps__pub_create(t->hdr, &t->lim, p->self->map, p->self->pool.base, &cbs, &p->pub);
	if (e) {
		snprintf(err, errlen, "cannot publish on the topic: %s", strerror(-e));
		goto err_member;
	}
	return 0;

err_member:
	rgapsd_member_leave(p->self);
err_subs:
	free(p->subs);
	memset(p, 0, sizeof(*p));
	return e;
}

void rgapsd_own_pub_follow(struct rgapsd_own_pub *p)
{
	pub_sync(p);
}

uint8_t *rgapsd_own_pub_block(const struct rgapsd_own_pub *p, uint64_t off)
{
	return (uint8_t *)p->self->pool.base + off;
}

void rgapsd_own_pub_close(struct rgapsd_own_pub *p)
{
	if (!p->t)
		return;
	rgaps__pub_destroy(p->pub);
	for (uint32_t j = 0; j < p->t->lim.max_subscribers; j++)
		if (p->subs[j])
			rgapsd_member_put(p->subs[j]);
	free(p->subs);
	rgapsd_member_leave(p->self);
	memset(p, 0, sizeof(*p));
}
