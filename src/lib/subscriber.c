/*
 * librgaps subscriber: take/release over the publishers' streams (topic.h), the
 * RGAPS pull() shorthand, message details, and a pollable fd for event loops.
 *
 * Stream order (docs/SHM-LAYOUT.md): a message published with a fence is
 * complete once that fence is. take() waits for it on this thread, so its
 * callers never see an unfinished copy; take_async() makes the caller's
 * stream wait for it on the GPU instead. release_async() records a fence of
 * our own and keeps the hold until it completes (checked at every call, and
 * by the fd thread, which wakes the fd when one does).
 *
 * The pollable fd is an eventfd fed by one helper thread per handle (created
 * on the first rgaps_subscriber_fd() call) that sleeps on the same futex words
 * as a blocking take - every stream's doorbell and the topic's directory word -
 * plus a private word bumped when the handle's membership changes, so each
 * publisher still wakes every subscriber with one FUTEX_WAKE, whatever mix of
 * blocking and fd-driven subscribers there is.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "../common/futex.h"
#include "../common/log.h"
#include "../common/util.h"
#include "client.h"
#include "members.h"

#define FD_THREAD_SLICE_NS (200ll * 1000 * 1000)
#define FD_THREAD_PARKED_MIN_NS (50ll * 1000) /* the shortest look while messages are parked */
#define RELEASE_SLICE_MS 1 /* takes wait in slices this long while releases are pending */

/* What msg_info() tells of a held message (and of the last gap-only message). */
struct held_info {
	uint64_t seq, stream, origin_stream, origin_seq;
	const void *attrs;
	uint32_t attr_len;
	/* A fenced message taken with take_async: rgaps_msg_wait() waits on its fence again. */
	bool pending_fence;
	uint32_t slot, fence;
};

struct rgaps_subscriber {
	struct rgaps__attach a;
	uint32_t spin_us;
	rgaps_msg_t pulled; /* the message pull() returned last */
	int have_pulled;
	struct held_info *held; /* [max_holds] */
	struct held_info gap_info;
	/* release_async: a fence of our own per hold, and whether its release waits for it */
	void **rel_fence;    /* [max_holds], made on first use (atomic: the fd thread reads) */
	uint32_t *releasing; /* [max_holds], atomic */
	uint32_t npending;   /* atomic */
	bool warned_fence;
	/* the take under way: take_async (its stream waits for fences on the GPU), or take */
	bool take_async;
	void *take_stream;
	/* pollable fd */
	int efd;
	pthread_t thread;
	int thread_started;
	uint32_t rearm; /* futex word: bumped when take() drained the eventfd */
	uint32_t stop;
	uint32_t signaled;
};

static int fence_done(void *attach, const struct rgaps_sub_msg *m);

RGAPS_EXPORT rgaps_subscriber_t *rgaps_subscriber_init_ex(const char *topic,
							 const rgaps_attach_opts_t *opts)
{
	rgaps_subscriber_t *sub = calloc(1, sizeof(*sub));
	const char *spin = getenv("RGAPS_SPIN_US");
	int r;

	if (!sub) {
		errno = ENOMEM;
		return NULL;
	}
	sub->efd = -1;
	sub->spin_us = spin ? (uint32_t)strtoul(spin, NULL, 10) : 20;
	r = rgaps__attach_open(topic, RGAPS__ROLE_SUB, opts, fence_done, &sub->a);
	if (!r) {
		sub->held = calloc(sub->a.lim.max_holds, sizeof(*sub->held));
		sub->rel_fence = calloc(sub->a.lim.max_holds, sizeof(*sub->rel_fence));
		sub->releasing = calloc(sub->a.lim.max_holds, sizeof(*sub->releasing));
		if (!sub->held || !sub->rel_fence || !sub->releasing) {
			free(sub->held);
			free(sub->rel_fence);
			free(sub->releasing);
			rgaps__attach_close(&sub->a);
			r = -ENOMEM;
		}
	}
	if (r) {
		free(sub);
		errno = -r;
		return NULL;
	}
	return sub;
}

RGAPS_EXPORT rgaps_subscriber_t *rgaps_subscriber_init(const char *topic)
{
	return rgaps_subscriber_init_ex(topic, NULL);
}

static const struct rgaps_memory_ops *mops(const rgaps_subscriber_t *sub)
{
	return &sub->a.mem->ops.memory;
}

/* Releases whose fence completed become real releases (this thread owns the handle). */
static void complete_releases(rgaps_subscriber_t *sub)
{
	bool any = false;

	if (!__atomic_load_n(&sub->npending, __ATOMIC_ACQUIRE))
		return;
	for (uint32_t k = 0; k < sub->a.lim.max_holds; k++) {
		int e;

		if (!__atomic_load_n(&sub->releasing[k], __ATOMIC_ACQUIRE))
			continue;
		e = mops(sub)->fence_query(sub->a.mem->ctx, sub->rel_fence[k]);
		if (e == -EAGAIN)
			continue;
		/* Done, or failed (the plugin logged it: the context is gone, nothing reads). */
		__atomic_store_n(&sub->releasing[k], 0, __ATOMIC_RELEASE);
		__atomic_fetch_sub(&sub->npending, 1, __ATOMIC_ACQ_REL);
		rgaps__sub_release(sub->a.sub, k);
		any = true;
	}
	if (any && sub->a.nretired) {
		pthread_mutex_lock(&sub->a.lock);
		rgaps__sweep_retired(&sub->a);
		pthread_mutex_unlock(&sub->a.lock);
	}
}

RGAPS_EXPORT void rgaps_subscriber_destroy(rgaps_subscriber_t *sub)
{
	if (!sub)
		return;
	if (sub->thread_started) {
		__atomic_store_n(&sub->stop, 1, __ATOMIC_SEQ_CST);
		__atomic_fetch_add(&sub->rearm, 1, __ATOMIC_SEQ_CST);
		rgaps_futex_wake_all(&sub->rearm);
		pthread_join(sub->thread, NULL);
	}
	if (sub->efd >= 0)
		close(sub->efd);
	/*
	 * Holds die with our region when the connection closes, and the publisher may
	 * then reuse the blocks: the streams that still read them must be done first.
	 */
	for (uint32_t k = 0; sub->rel_fence && k < sub->a.lim.max_holds; k++) {
		if (!sub->rel_fence[k])
			continue;
		if (sub->releasing[k] &&
		    rgaps__fence_wait_host(mops(sub), sub->a.mem->ctx, sub->rel_fence[k],
					  rgaps_now_ns(CLOCK_MONOTONIC) + 30000000000ull, NULL,
					  NULL) == -ETIMEDOUT)
			rgaps_warn("topic '%.64s': a stream still read a message 30 s after its "
				   "release_async; detaching anyway",
				   ((const struct rgaps_topic_hdr *)sub->a.hdr)->name);
		mops(sub)->fence_destroy(sub->a.mem->ctx, sub->rel_fence[k]);
	}
	rgaps__attach_close(&sub->a);
	free(sub->rel_fence);
	free(sub->releasing);
	free(sub->held);
	free(sub);
}

/* ---------------------------------------------------------------- fences of messages */

struct fence_watch {
	rgaps_subscriber_t *sub;
	uint32_t slot;
	uint64_t gen;
	bool daemon_gone;
};

/*
 * While waiting for a publisher's fence on the host: stop if rgapsd is gone,
 * or once the publisher has left (its stream drains): from then on its fences
 * may not be touched, and its region says whether its copies all completed.
 */
static bool fence_give_up(void *arg)
{
	struct fence_watch *w = arg;
	struct rgaps__attach *a = &w->sub->a;
	const struct rgaps_topic_hdr *h = a->hdr;

	if (!rgaps__alive(a) || __atomic_load_n(&h->closed, __ATOMIC_ACQUIRE)) {
		w->daemon_gone = true;
		return true;
	}
	/* The membership may have moved while we wait here: learn whether the stream drains. */
	if (rgaps__sync(a))
		return false;
	return !rgaps__sub_stream_live(a->sub, w->slot, w->gen);
}

static void fence_lost(rgaps_subscriber_t *sub, const struct rgaps_sub_msg *m, const char *why)
{
	rgaps_warn("topic '%.64s': stream %llu message %llu: %s; reported lost",
		   ((const struct rgaps_topic_hdr *)sub->a.hdr)->name,
		   (unsigned long long)m->stream, (unsigned long long)m->seq, why);
}

/*
 * The fence of fenced message m, opened once per (stream, slot): 0 and *f_p;
 * 1 when its copy is known complete (its publisher retired its fences); or a
 * negative errno when it never will be (its fence is spoiled, or its
 * publisher crashed before the copy completed), said in the log.
 */
static int fence_of(rgaps_subscriber_t *sub, const struct rgaps_sub_msg *m, void **f_p)
{
	const struct rgaps_pub_region *r = rgaps__stream_region(&sub->a, m->slot, m->stream);
	char why[160] = "stream not mapped";
	int e;

	if (!r) {
		fence_lost(sub, m, why);
		return -ENODATA;
	}
	switch (rgaps__fence_verdict(r, rgaps__sub_stream_live(sub->a.sub, m->slot, m->stream))) {
	case RGAPS_FENCE_DONE:
		return 1;
	case RGAPS_FENCE_LOST:
		fence_lost(sub, m, "its publisher left before its copy completed");
		return -ECANCELED;
	case RGAPS_FENCE_USE:
		break;
	}
	e = sub->a.fcache ? 0 : rgaps__fence_cache_create(&sub->a.lim, mops(sub), sub->a.mem->ctx,
							 &sub->a.fcache);
	if (!e)
		e = rgaps__fence_cache_get(sub->a.fcache, m->slot, m->stream, r, m->fence, f_p, why,
					  sizeof(why));
	if (e) {
		if (!sub->warned_fence)
			fence_lost(sub, m, why);
		sub->warned_fence = true;
	}
	return e;
}

/*
 * topic.h's fence_done hook, asked by the core's take: is the copy into held
 * message m complete? take() reads a message only then; take_async() makes
 * the caller's stream wait for it on the GPU instead. It never waits: a copy
 * still under way parks the message in the core, which asks again while the
 * other streams flow.
 */
static int fence_done(void *attach, const struct rgaps_sub_msg *m)
{
	rgaps_subscriber_t *sub = RGAPS_CONTAINER_OF(attach, rgaps_subscriber_t, a);
	void *f;
	int e = fence_of(sub, m, &f);

	if (e)
		return e > 0 ? 0 : e;
	e = mops(sub)->fence_query(sub->a.mem->ctx, f);
	if (e != -EAGAIN || !sub->take_async)
		return e; /* complete, failed (the plugin logged it), or parked */
	if (mops(sub)->fence_wait(sub->a.mem->ctx, f, sub->take_stream) == 0)
		return 0;
	return -EAGAIN; /* the wait could not be queued: on the host, then */
}

/* rgaps_msg_wait(): make a message taken with take_async complete on stream (or here). */
static int msg_fence_wait(rgaps_subscriber_t *sub, const struct rgaps_sub_msg *m, void *stream)
{
	struct fence_watch w = { sub, m->slot, m->stream, false };
	void *f;
	int e = fence_of(sub, m, &f);

	if (e)
		return e > 0 ? 0 : e;
	e = mops(sub)->fence_query(sub->a.mem->ctx, f);
	if (e != -EAGAIN)
		return e;
	if (mops(sub)->fence_wait(sub->a.mem->ctx, f, stream) == 0)
		return 0;
	e = rgaps__fence_wait_host(mops(sub), sub->a.mem->ctx, f, UINT64_MAX, fence_give_up, &w);
	if (e == -ECANCELED && w.daemon_gone)
		return -ENOTCONN;
	if (e == -ECANCELED) { /* the publisher left meanwhile: its region tells */
		const struct rgaps_pub_region *r =
			rgaps__stream_region(&sub->a, m->slot, m->stream);

		if (r && rgaps__fence_verdict(r, false) == RGAPS_FENCE_DONE)
			return 0;
		fence_lost(sub, m, "its publisher left before its copy completed");
	}
	return e;
}

/* One take from the streams, waiting at most t ms; clears the pollable fd when drained. */
static int take_once(rgaps_subscriber_t *sub, int t, uint32_t spin, struct rgaps_sub_msg *m)
{
	int r = rgaps__sub_take(sub->a.sub, t, spin, m);

	if (r == -EAGAIN && sub->thread_started &&
	    __atomic_load_n(&sub->signaled, __ATOMIC_SEQ_CST)) {
		uint64_t v;

		/* Drained: clear the fd, then let the thread look again. */
		(void)!read(sub->efd, &v, sizeof(v));
		__atomic_store_n(&sub->signaled, 0, __ATOMIC_SEQ_CST);
		__atomic_fetch_add(&sub->rearm, 1, __ATOMIC_SEQ_CST);
		rgaps_futex_wake_all(&sub->rearm);
	}
	return r;
}

/*
 * Wait on this thread until a pending release's fence completes (deadline 0:
 * do not wait). 0, or -EAGAIN / -ETIMEDOUT when none did in time.
 */
static int wait_release(rgaps_subscriber_t *sub, uint64_t deadline)
{
	for (uint32_t k = 0; k < sub->a.lim.max_holds; k++) {
		int e;

		if (!__atomic_load_n(&sub->releasing[k], __ATOMIC_ACQUIRE))
			continue;
		if (!deadline)
			break;
		e = rgaps__fence_wait_host(mops(sub), sub->a.mem->ctx, sub->rel_fence[k], deadline,
					  NULL, NULL);
		if (e == -ETIMEDOUT)
			return e;
		complete_releases(sub);
		return 0;
	}
	complete_releases(sub);
	return deadline ? 0 : -EAGAIN;
}

static int take(rgaps_subscriber_t *sub, rgaps_msg_t *msg_p, int timeout_ms, bool async,
		void *stream)
{
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX :
					     rgaps_now_ns(CLOCK_MONOTONIC) +
						     (uint64_t)timeout_ms * 1000000ull;
	struct rgaps_sub_msg m;
	struct held_info *hi;
	uint32_t spin = sub->spin_us;
	int r;

	if (!sub || !msg_p)
		return -EINVAL;
	for (;;) {
		int t = timeout_ms;

		complete_releases(sub);
		if (timeout_ms != 0 && __atomic_load_n(&sub->npending, __ATOMIC_ACQUIRE)) {
			/* A release finishing on the GPU may be what a publisher waits for. */
			uint64_t now = rgaps_now_ns(CLOCK_MONOTONIC);

			if (now >= deadline)
				return -ETIMEDOUT;
			t = (int)RGAPS_MIN((deadline - now) / 1000000 + 1, (uint64_t)RELEASE_SLICE_MS);
		} else if (timeout_ms > 0) {
			uint64_t now = rgaps_now_ns(CLOCK_MONOTONIC);

			if (now >= deadline)
				return -ETIMEDOUT;
			t = (int)((deadline - now + 999999) / 1000000);
		}
		sub->take_async = async;
		sub->take_stream = stream;
		r = take_once(sub, t, spin, &m);
		spin = 0;
		if (r == -ETIMEDOUT && t != timeout_ms)
			continue; /* a slice ended: look at the releases, then again */
		if (r == -ENOBUFS && __atomic_load_n(&sub->npending, __ATOMIC_ACQUIRE)) {
			/* Every hold is taken, some by releases the GPU has not finished yet. */
			r = wait_release(sub, timeout_ms == 0 ? 0 : deadline);
			if (r)
				return r;
			continue;
		}
		if (r)
			return r;
		break;
	}
	if (m.token == UINT32_MAX) {
		hi = &sub->gap_info;
	} else {
		hi = &sub->held[m.token];
		rgaps__sub_record_latency(sub->a.sub, m.ts_ns, rgaps_now_ns(CLOCK_REALTIME));
	}
	*hi = (struct held_info){
		.seq = m.seq,
		.stream = m.stream,
		.origin_stream = m.origin_stream,
		.origin_seq = m.origin_seq,
		.attrs = m.attrs,
		.attr_len = m.attr_len,
		.pending_fence = async && (m.flags & RGAPS_ENTRY_FENCE) && m.token != UINT32_MAX,
		.slot = m.slot,
		.fence = m.fence,
	};
	msg_p->data = (void *)m.data;
	msg_p->size = m.size;
	msg_p->seq = m.seq;
	msg_p->ts_ns = m.ts_ns;
	msg_p->gap = m.gap;
	msg_p->token = m.token;
	msg_p->flags = ((m.flags & RGAPS_ENTRY_REMOTE) ? RGAPS_MSG_REMOTE : 0) |
		       ((m.flags & RGAPS_ENTRY_GAP_ONLY) ? RGAPS_MSG_GAP : 0);
	return 0;
}

RGAPS_EXPORT int rgaps_subscriber_take(rgaps_subscriber_t *sub, rgaps_msg_t *msg_p, int timeout_ms)
{
	return take(sub, msg_p, timeout_ms, false, NULL);
}

RGAPS_EXPORT int rgaps_subscriber_take_async(rgaps_subscriber_t *sub, rgaps_msg_t *msg_p,
					     int timeout_ms, void *stream)
{
	return take(sub, msg_p, timeout_ms, true, stream);
}

/* A message this handle holds (not a gap-only one): its token is checked. */
static bool holds(const rgaps_subscriber_t *sub, const rgaps_msg_t *msg)
{
	return msg->token < sub->a.lim.max_holds && sub->held[msg->token].seq == msg->seq &&
	       !__atomic_load_n(&sub->releasing[msg->token], __ATOMIC_ACQUIRE);
}

RGAPS_EXPORT int rgaps_msg_wait(rgaps_subscriber_t *sub, const rgaps_msg_t *msg, void *stream)
{
	const struct held_info *hi;
	struct rgaps_sub_msg m = { 0 };

	if (!sub || !msg)
		return -EINVAL;
	if (msg->token == UINT32_MAX && (msg->flags & RGAPS_MSG_GAP))
		return 0; /* no bytes to wait for */
	if (!holds(sub, msg))
		return -EINVAL;
	hi = &sub->held[msg->token];
	if (!hi->pending_fence)
		return 0; /* complete when take() returned */
	m.seq = hi->seq;
	m.stream = hi->stream;
	m.slot = hi->slot;
	m.fence = hi->fence;
	m.token = msg->token;
	m.flags = RGAPS_ENTRY_FENCE;
	return msg_fence_wait(sub, &m, stream ? stream : (void *)(uintptr_t)1);
}

RGAPS_EXPORT int rgaps_subscriber_release_async(rgaps_subscriber_t *sub, rgaps_msg_t *msg,
						void *stream)
{
	uint32_t k;
	void *f;
	int r;

	if (!sub || !msg)
		return -EINVAL;
	if (msg->token == UINT32_MAX && (msg->flags & RGAPS_MSG_GAP))
		return 0;
	if (!holds(sub, msg))
		return -EINVAL;
	k = msg->token;
	f = sub->rel_fence[k];
	if (!f) {
		r = mops(sub)->fence_create(sub->a.mem->ctx, sub->a.my_device, 0, &f, NULL, NULL);
		if (r)
			f = NULL;
		else
			__atomic_store_n(&sub->rel_fence[k], f, __ATOMIC_RELEASE);
	}
	if (f && mops(sub)->fence_record(sub->a.mem->ctx, f, stream) == 0) {
		__atomic_fetch_add(&sub->npending, 1, __ATOMIC_ACQ_REL);
		__atomic_store_n(&sub->releasing[k], 1, __ATOMIC_RELEASE);
		complete_releases(sub); /* host memory: done already */
		return 0;
	}
	/* No fence: wait for the stream here, then release. */
	r = mops(sub)->stream_sync(sub->a.mem->ctx, stream);
	if (r && r != -ENOTSUP)
		return r;
	return rgaps_subscriber_release(sub, msg);
}

RGAPS_EXPORT int rgaps_subscriber_release(rgaps_subscriber_t *sub, rgaps_msg_t *msg)
{
	int r;

	if (!sub || !msg)
		return -EINVAL;
	if (msg->token == UINT32_MAX && (msg->flags & RGAPS_MSG_GAP))
		return 0; /* a gap-only message holds nothing */
	if (!holds(sub, msg))
		return -EINVAL;
	r = rgaps__sub_release(sub->a.sub, msg->token);
	complete_releases(sub);
	if (!r && sub->a.nretired) {
		pthread_mutex_lock(&sub->a.lock);
		rgaps__sweep_retired(&sub->a);
		pthread_mutex_unlock(&sub->a.lock);
	}
	return r;
}

RGAPS_EXPORT int rgaps_msg_info(rgaps_subscriber_t *sub, const rgaps_msg_t *msg,
				rgaps_msg_info_t *info)
{
	const struct held_info *hi;
	rgaps_msg_info_t out = { 0 };

	if (!sub || !msg || !info || info->struct_size < sizeof(info->struct_size))
		return -EINVAL;
	if (msg->token == UINT32_MAX && (msg->flags & RGAPS_MSG_GAP))
		hi = &sub->gap_info;
	else if (msg->token < sub->a.lim.max_holds)
		hi = &sub->held[msg->token];
	else
		return -EINVAL;
	if (hi->seq != msg->seq || hi->stream == 0)
		return -EINVAL;
	out.struct_size = RGAPS_MIN(info->struct_size, sizeof(out));
	out.stream = hi->stream;
	out.origin_stream = hi->origin_stream;
	out.origin_seq = hi->origin_seq;
	out.attrs = hi->attr_len ? hi->attrs : NULL;
	out.attr_len = hi->attr_len;
	memcpy(info, &out, out.struct_size);
	return 0;
}

RGAPS_EXPORT int rgaps_subscriber_stop(rgaps_subscriber_t *sub)
{
	if (!sub)
		return -EINVAL;
	rgaps__sub_stop(sub->a.sub);
	return 0;
}

RGAPS_EXPORT void *rgaps_subscriber_pull(rgaps_subscriber_t *sub)
{
	int r;

	if (!sub) {
		errno = EINVAL;
		return NULL;
	}
	if (sub->have_pulled) {
		rgaps_subscriber_release(sub, &sub->pulled);
		sub->have_pulled = 0;
	}
	do { /* pull() has no way to say "lost": gap-only messages are skipped */
		r = rgaps_subscriber_take(sub, &sub->pulled, -1);
	} while (!r && (sub->pulled.flags & RGAPS_MSG_GAP));
	if (r) {
		errno = -r;
		return NULL;
	}
	sub->have_pulled = 1;
	return sub->pulled.data;
}

/* The fd thread: has a pending release's fence completed? (It only looks; take() releases.) */
static bool release_done(rgaps_subscriber_t *sub)
{
	for (uint32_t k = 0; k < sub->a.lim.max_holds; k++) {
		void *f;

		if (!__atomic_load_n(&sub->releasing[k], __ATOMIC_ACQUIRE))
			continue;
		f = __atomic_load_n(&sub->rel_fence[k], __ATOMIC_ACQUIRE);
		if (f && mops(sub)->fence_query(sub->a.mem->ctx, f) != -EAGAIN)
			return true;
	}
	return false;
}

/* Wake the fd for: rgapsd gone, or a release_async whose stream has passed it. */
static bool fd_ready_too(void *arg)
{
	rgaps_subscriber_t *sub = arg;

	return !rgaps__alive(&sub->a) ||
	       (__atomic_load_n(&sub->npending, __ATOMIC_ACQUIRE) && release_done(sub));
}

/*
 * Sleep until a publisher rings, the membership changes (the topic's word, or
 * ours after a sync) or take() drains the fd; then look again.
 */
static void *fd_thread(void *arg)
{
	rgaps_subscriber_t *sub = arg;

	while (!__atomic_load_n(&sub->stop, __ATOMIC_SEQ_CST)) {
		uint32_t rearm = __atomic_load_n(&sub->rearm, __ATOMIC_SEQ_CST);
		struct futex_waitv own[2];
		int64_t slice, parked;
		bool pending;

		if (__atomic_load_n(&sub->signaled, __ATOMIC_SEQ_CST)) {
			/* Readable already: sleep until take() drains it. */
			rgaps_futex_wait(&sub->rearm, rearm, FD_THREAD_SLICE_NS);
			continue;
		}
		rgaps_waitv_set(&own[0], &sub->rearm, rearm);
		rgaps_waitv_set(&own[1], &sub->a.view_gen,
				__atomic_load_n(&sub->a.view_gen, __ATOMIC_SEQ_CST));
		own[0].flags |= FUTEX_PRIVATE_FLAG;
		own[1].flags |= FUTEX_PRIVATE_FLAG;
		/* A release finishing on the GPU rings no futex: look again soon. */
		pending = __atomic_load_n(&sub->npending, __ATOMIC_ACQUIRE) != 0;
		slice = pending ? RELEASE_SLICE_MS * 1000000ll : FD_THREAD_SLICE_NS;
		/* Nor does the end of a copy a parked message waits for: take() looks. */
		parked = rgaps__sub_fence_slice(sub->a.sub);
		if (parked != INT64_MAX)
			slice = RGAPS_MIN(slice, RGAPS_MAX(parked, FD_THREAD_PARKED_MIN_NS));
		if (rgaps__sub_sleep(sub->a.sub, &sub->a.lock, own, 2, fd_ready_too, sub, slice) ==
			    1 ||
		    parked != INT64_MAX) {
			uint64_t one = 1;

			__atomic_store_n(&sub->signaled, 1, __ATOMIC_SEQ_CST);
			(void)!write(sub->efd, &one, sizeof(one));
		}
	}
	return NULL;
}

RGAPS_EXPORT int rgaps_subscriber_fd(rgaps_subscriber_t *sub)
{
	int r;

	if (!sub)
		return -EINVAL;
	if (sub->thread_started)
		return sub->efd;
	sub->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (sub->efd < 0)
		return -errno;
	r = pthread_create(&sub->thread, NULL, fd_thread, sub);
	if (r) {
		close(sub->efd);
		sub->efd = -1;
		return -r;
	}
	sub->thread_started = 1;
	return sub->efd;
}

RGAPS_EXPORT int rgaps_subscriber_info(rgaps_subscriber_t *sub, rgaps_topic_info_t *info)
{
	if (!sub)
		return -EINVAL;
	return rgaps__attach_info(&sub->a, info);
}
