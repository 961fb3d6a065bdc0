/*
 * The forwarder of a topic (one thread per topic with an interested peer): a
 * subscriber of the local topic like any other, so back-pressure and drop
 * policies apply to the remote path too. It takes each message published on
 * this host and hands it to the loop (tt->fwd_deliver, through the mailbox);
 * the loop releases the hold once every record left the pool. Messages that
 * came from a peer are not forwarded again.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/futex.h"
#include "../../common/log.h"
#include "internal.h"

struct rt_fwd_msg {
	struct rgapsd_msg m;
	struct rt_topic *tt;
	struct rt_local_msg msg;
};

static void on_forwarded(struct rgapsd_msg *mm)
{
	struct rt_fwd_msg *f = RGAPS_CONTAINER_OF(mm, struct rt_fwd_msg, m);

	f->tt->fwd_deliver(f->tt, &f->msg);
	free(f);
}

static void *forwarder_main(void *arg)
{
	struct rt_topic *tt = arg;
	struct rgapsd_remote *rt = tt->rt;
	char name[16];

	snprintf(name, sizeof(name), "fwd-%.11s", tt->t->cfg.name);
	pthread_setname_np(pthread_self(), name);
	while (!__atomic_load_n(&tt->fwd_stop, __ATOMIC_ACQUIRE)) {
		uint32_t released = __atomic_load_n(&tt->fwd_released, __ATOMIC_SEQ_CST);
		struct rt_local_msg msg;
		struct rt_fwd_msg *f;
		int r = rt_local_sub_take(&tt->fwd, 200, &msg);

		if (r == -ETIMEDOUT || r == -EAGAIN || r == -EINTR)
			continue;
		if (r == -ENOBUFS) {
			/* Every hold is in flight to peers: sleep until the loop releases one
			 * (read before the take, so a release in between is not missed). */
			rgaps_futex_wait(&tt->fwd_released, released, 200ll * 1000 * 1000);
			continue;
		}
		if (r)
			break;
		if (!msg.src && msg.remote_origin)
			continue; /* lost on the way here from a peer: that peer's to report */
		if (!msg.src) {
			/* Lost before we could take them (a gap-only message): the loop tells
			 * every peer at once (a loss notice), not with a next message. */
			f = calloc(1, sizeof(*f));
			tt->fwd_seq += msg.gap;
			if (!f)
				continue; /* then the next message's jump of fwd_seq tells it */
			msg.fwd_seq = tt->fwd_seq - 1;
			f->m.fn = on_forwarded;
			f->tt = tt;
			f->msg = msg;
			rgapsd_mailbox_post(&rt->mb, &f->m);
			continue;
		}
		if (msg.remote_origin) {
			rt_local_sub_release(&tt->fwd, &msg);
			__atomic_fetch_add(&tt->skipped_remote, 1, __ATOMIC_RELAXED);
			continue;
		}
		f = calloc(1, sizeof(*f));
		if (!f) {
			rt_local_sub_release(&tt->fwd, &msg);
			continue;
		}
		tt->fwd_seq += msg.gap;
		msg.fwd_seq = tt->fwd_seq++;
		f->m.fn = on_forwarded;
		f->tt = tt;
		f->msg = msg;
		rgapsd_mailbox_post(&rt->mb, &f->m);
	}
	return NULL;
}

int rt_forwarder_start(struct rt_topic *tt)
{
	int r;

	if (tt->fwd_started)
		return 0;
	r = rt_local_sub_open(tt->t, &tt->fwd);
	if (r) {
		rgaps_error("topic '%s': no subscriber slot for the forwarder: %s", tt->t->cfg.name,
			    strerror(-r));
		return r;
	}
	r = pthread_create(&tt->fwd_thread, NULL, forwarder_main, tt);
	if (r) {
		rt_local_sub_close(&tt->fwd);
		return -r;
	}
	tt->fwd_started = true;
	return 0;
}

void rt_forwarder_release(struct rt_topic *tt, const struct rt_local_msg *m)
{
	rt_local_sub_release(&tt->fwd, m);
	/* A forwarder with every hold in flight sleeps on this word. */
	__atomic_fetch_add(&tt->fwd_released, 1, __ATOMIC_SEQ_CST);
	rgaps_futex_wake_all(&tt->fwd_released);
}

void rt_forwarder_stop(struct rt_topic *tt)
{
	if (tt->fwd_started) {
		__atomic_store_n(&tt->fwd_stop, 1, __ATOMIC_RELEASE);
		__atomic_fetch_add(&tt->fwd_released, 1, __ATOMIC_SEQ_CST);
		rgaps_futex_wake_all(&tt->fwd_released);
		pthread_join(tt->fwd_thread, NULL);
		tt->fwd_started = false;
	}
}
