/*
 * Publishers whose attach waits for the topic's set-up with every interested
 * peer (docs/ARCHITECTURE.md section 7): answered when no out ring of the
 * topic is still being prepared, or after RT_SETUP_TIMEOUT_MS whatever
 * happens, so the first message a publisher sends already reaches every host
 * that subscribed.
 */
#include <errno.h>
#include <stdlib.h>

#include "../../common/log.h"
#include "internal.h"

int rt_waiter_add(struct rt_topic *tt, void (*done)(void *arg, int status), void *arg)
{
	struct rt_waiter *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	w->done = done;
	w->arg = arg;
	w->deadline = rgaps_now_ns(CLOCK_MONOTONIC) + RT_SETUP_TIMEOUT_MS * 1000000ull;
	SLIST_INSERT_HEAD(&tt->waiters, w, link);
	return 0;
}

void rt_waiters_check(struct rt_topic *tt, bool force)
{
	uint64_t now = rgaps_now_ns(CLOCK_MONOTONIC);
	struct rt_waiter *w, *next;
	bool preparing = false;

	for (struct rt_out *o = SLIST_FIRST(&tt->outs); o; o = SLIST_NEXT(o, in_topic))
		if (o->state == OUT_RING_PREPARING)
			preparing = true;
	for (w = SLIST_FIRST(&tt->waiters); w; w = next) {
		next = SLIST_NEXT(w, link);
		if (preparing && !force && now < w->deadline)
			continue;
		if (preparing)
			rgaps_warn(
				"topic '%s': set-up with every interested peer not finished in %d ms; "
				"the publisher attaches anyway",
				tt->t->cfg.name, RT_SETUP_TIMEOUT_MS);
		SLIST_REMOVE(&tt->waiters, w, rt_waiter, link);
		w->done(w->arg, 0);
		free(w);
	}
}

void rt_waiters_cancel(struct rgapsd_remote *rt, void *arg)
{
	for (struct rt_topic *tt = SLIST_FIRST(&rt->topics); tt; tt = SLIST_NEXT(tt, link)) {
		struct rt_waiter *w, *next;

		for (w = SLIST_FIRST(&tt->waiters); w; w = next) {
			next = SLIST_NEXT(w, link);
			if (w->arg == arg) {
				SLIST_REMOVE(&tt->waiters, w, rt_waiter, link);
				free(w);
			}
		}
	}
}
