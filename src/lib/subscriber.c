/*
 * librgaps subscriber: take/release on the shared queue, the RGAPS pull()
 * shorthand, and a pollable fd for event loops.
 *
 * The pollable fd is an eventfd fed by one helper thread per handle (created
 * on the first rgaps_subscriber_fd() call) that sleeps on the topic's futex
 * like any other waiter: the publisher still wakes every subscriber with one
 * FUTEX_WAKE, whatever mix of blocking and fd-driven subscribers there is.
 */
#include <errno.h>
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

struct rgaps_subscriber {
	struct rgaps__attach a;
	uint32_t spin_us;
	rgaps_msg_t pulled; /* the message pull() returned last */
	int have_pulled;
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
	/* Holds are released by rgapsd when the connection closes. */
	rgaps__attach_close(&sub->a);
	free(sub);
}

RGAPS_EXPORT int rgaps_subscriber_take(rgaps_subscriber_t *sub, rgaps_msg_t *msg_p, int timeout_ms)
{
	struct rgaps_topic_msg m;
	int r;

	if (!sub || !msg_p)
		return -EINVAL;
	r = rgaps_topic_take(&sub->a.topic, sub->a.slot, timeout_ms, sub->spin_us, rgaps__alive,
			     &sub->a, &m);
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
	rgaps_topic_record_latency(&sub->a.topic, sub->a.slot, m.ts_ns,
				   rgaps_now_ns(CLOCK_REALTIME));
	msg_p->data = sub->a.topic.pool + m.off;
	msg_p->size = m.size;
	msg_p->seq = m.seq;
	msg_p->ts_ns = m.ts_ns;
	msg_p->gap = m.gap;
	msg_p->token = m.token;
	msg_p->reserved = 0;
	return 0;
}

RGAPS_EXPORT int rgaps_subscriber_release(rgaps_subscriber_t *sub, rgaps_msg_t *msg)
{
	if (!sub || !msg)
		return -EINVAL;
	return rgaps_topic_release(&sub->a.topic, sub->a.slot, msg->token);
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
	r = rgaps_subscriber_take(sub, &sub->pulled, -1);
	if (r) {
		errno = -r;
		return NULL;
	}
	sub->have_pulled = 1;
	return sub->pulled.data;
}

static void *fd_thread(void *arg)
{
	rgaps_subscriber_t *sub = arg;
	struct rgaps_topic_hdr *h = sub->a.topic.hdr;

	while (!__atomic_load_n(&sub->stop, __ATOMIC_SEQ_CST)) {
		uint32_t rearm = __atomic_load_n(&sub->rearm, __ATOMIC_SEQ_CST);
		uint32_t seen = __atomic_load_n(&h->wake_seq, __ATOMIC_SEQ_CST);

		if (__atomic_load_n(&sub->signaled, __ATOMIC_SEQ_CST)) {
			/* Readable already: sleep until take() drains it. */
			rgaps_futex_wait(&sub->rearm, rearm, FD_THREAD_SLICE_NS);
			continue;
		}
		if (rgaps_topic_sub_ready(&sub->a.topic, sub->a.slot) || !rgaps__alive(&sub->a)) {
			uint64_t one = 1;

			__atomic_store_n(&sub->signaled, 1, __ATOMIC_SEQ_CST);
			(void)!write(sub->efd, &one, sizeof(one));
			continue;
		}
		__atomic_fetch_add(&h->waiters, 1, __ATOMIC_SEQ_CST);
		if (!rgaps_topic_sub_ready(&sub->a.topic, sub->a.slot))
			rgaps_futex_wait(&h->wake_seq, seen, FD_THREAD_SLICE_NS);
		__atomic_fetch_sub(&h->waiters, 1, __ATOMIC_SEQ_CST);
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
