/*
 * librgaps subscriber: take/release over the publishers' streams (topic.h), the
 * RGAPS pull() shorthand, message details, and a pollable fd for event loops.
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
#include "../common/util.h"
#include "client.h"

#define FD_THREAD_SLICE_NS (200ll * 1000 * 1000)

/* What msg_info() tells of a held message (and of the last gap-only message). */
struct held_info {
	uint64_t seq, stream, origin_stream, origin_seq;
	const void *attrs;
	uint32_t attr_len;
};

struct rgaps_subscriber {
	struct rgaps__attach a;
	uint32_t spin_us;
	rgaps_msg_t pulled; /* the message pull() returned last */
	int have_pulled;
	struct held_info *held; /* [max_holds] */
	struct held_info gap_info;
	/* pollable fd */
	int efd;
	pthread_t thread;
	int thread_started;
	uint32_t rearm; /* futex word: bumped when take() drained the eventfd */
	uint32_t stop;
	uint32_t signaled;
};

RGAPS_EXPORT rgaps_subscriber_t *rgaps_subscriber_init(const char *topic)
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
	r = rgaps__attach_open(topic, RGAPS__ROLE_SUB, &sub->a);
	if (!r) {
		sub->held = calloc(sub->a.lim.max_holds, sizeof(*sub->held));
		if (!sub->held) {
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
	/* Holds die with our region: rgapsd discards it when the connection closes. */
	rgaps__attach_close(&sub->a);
	free(sub->held);
	free(sub);
}

RGAPS_EXPORT int rgaps_subscriber_take(rgaps_subscriber_t *sub, rgaps_msg_t *msg_p, int timeout_ms)
{
	struct rgaps_sub_msg m;
	struct held_info *hi;
	int r;

	if (!sub || !msg_p)
		return -EINVAL;
	r = rgaps_sub_take(sub->a.sub, timeout_ms, sub->spin_us, &m);
	if (r == -EAGAIN && sub->thread_started &&
	    __atomic_load_n(&sub->signaled, __ATOMIC_SEQ_CST)) {
		uint64_t v;

		/* Drained: clear the fd, then let the thread look again. */
		(void)!read(sub->efd, &v, sizeof(v));
		__atomic_store_n(&sub->signaled, 0, __ATOMIC_SEQ_CST);
		__atomic_fetch_add(&sub->rearm, 1, __ATOMIC_SEQ_CST);
		rgaps_futex_wake_all(&sub->rearm);
	}
	if (r)
		return r;
	if (m.token == UINT32_MAX) {
		hi = &sub->gap_info;
	} else {
		hi = &sub->held[m.token];
		rgaps_sub_record_latency(sub->a.sub, m.ts_ns, rgaps_now_ns(CLOCK_REALTIME));
	}
	*hi = (struct held_info){
		.seq = m.seq,
		.stream = m.stream,
		.origin_stream = m.origin_stream,
		.origin_seq = m.origin_seq,
		.attrs = m.attrs,
		.attr_len = m.attr_len,
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

RGAPS_EXPORT int rgaps_subscriber_release(rgaps_subscriber_t *sub, rgaps_msg_t *msg)
{
	int r;

	if (!sub || !msg)
		return -EINVAL;
	if (msg->token == UINT32_MAX && (msg->flags & RGAPS_MSG_GAP))
		return 0; /* a gap-only message holds nothing */
	if (msg->token >= sub->a.lim.max_holds || sub->held[msg->token].seq != msg->seq)
		return -EINVAL;
	r = rgaps_sub_release(sub->a.sub, msg->token);
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

static bool daemon_gone(void *arg)
{
	return !rgaps__alive(arg);
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
		if (rgaps_sub_sleep(sub->a.sub, &sub->a.lock, own, 2, daemon_gone, &sub->a,
				    FD_THREAD_SLICE_NS) == 1) {
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
