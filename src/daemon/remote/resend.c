/*
 * The resend window of a topic (its resend_window key, docs/PROTOCOL.md
 * section 4): a copy of the newest messages published on this host, in
 * rgapsd's own memory, so that a peer whose data link or session flapped gets
 * what it missed once a new ring is up (sender.c sends them again, from
 * here, those at or after the receiver's "next"). A copy, not a hold on the
 * publisher's pool: the forwarder's few holds keep flowing and no peer pins
 * the pool; once a live message's copy is made, its chunks not yet posted go
 * from the copy too, so that a slow or dead link pins the pool for a few
 * messages at most (sender.c, pool_cap). The window is one buffer of
 * resend_window bytes per topic, shared by every peer, filled in order and
 * overwritten oldest first; a copy being made, or read by a message being
 * sent (again), is never overwritten (the newest message then goes unkept,
 * and a flap that needs it reports it lost). The copies are made on
 * the keep worker, never on the loop: a message may be as large as
 * max_message_size, and a bulk copy on the loop would hold up every timer,
 * keepalive and client behind it (docs/DECISIONS.md 120). Host-memory topics
 * only: a device topic's messages would need a copy off the GPU.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "internal.h"

#define RS_ALIGN 64u

/* Where a copy of size bytes goes, overwriting the oldest copies as needed; UINT64_MAX: nowhere. */
static uint64_t place(struct rt_topic *tt, uint64_t size)
{
	for (;;) {
		struct rt_kept *old = TAILQ_FIRST(&tt->kept), *new = TAILQ_LAST(&tt->kept, rt_keptq);
		uint64_t tail;

		if (!old)
			return 0;
		tail = RGAPS_ALIGN_UP(new->off + new->size, RS_ALIGN);
		if (old->off < tail) { /* in use: [old, tail) */
			if (tt->rs_size - tail >= size)
				return tail;
			if (old->off >= size)
				return 0; /* wraps */
		} else if (old->off - tail >= size) { /* in use: [old, end) and [0, tail) */
			return tail;
		}
		if (old->busy)
			return UINT64_MAX;
		TAILQ_REMOVE(&tt->kept, old, link);
		tt->rs_used -= old->size;
		tt->resend_evicted++;
		free(old);
	}
}

/* On the keep worker: the message's bytes into the window. */
static void keep_run(struct rgapsd_job *job)
{
	struct rt_kept *k = RGAPS_CONTAINER_OF(job, struct rt_kept, job);

	memcpy(k->tt->rs_mem + k->off, k->src, k->size);
}

/* Back on the loop: the copy is made; it may be sent again, and overwritten once sent. */
static void keep_done(struct rgapsd_msg *m)
{
	struct rt_kept *k = RGAPS_CONTAINER_OF(m, struct rt_kept, job.done);

	k->filled = true;
	k->src = NULL;
	k->busy--;
	k->done(k->done_arg);
}

struct rt_kept *rt_resend_keep(struct rt_topic *tt, const struct rt_local_msg *msg,
			       void (*done)(void *arg), void *arg)
{
	uint64_t win = tt->t->cfg.resend_window, off;
	struct rt_kept *k;

	if (!win || tt->rs_failed || tt->t->lim.mem_kind != RGAPS_MEM_HOST)
		return NULL;
	if (!tt->rs_mem) {
		tt->rs_size = RGAPS_ALIGN_UP(win, 4096);
		tt->rs_mem = aligned_alloc(4096, tt->rs_size);
		if (!tt->rs_mem) {
			rgaps_warn("topic '%s': no memory for its resend window of %llu bytes: a link "
				   "flap loses messages (reported)",
				   tt->t->cfg.name, (unsigned long long)tt->rs_size);
			tt->rs_failed = true;
			return NULL;
		}
	}
	off = msg->size <= tt->rs_size ? place(tt, msg->size) : UINT64_MAX;
	k = off != UINT64_MAX ? malloc(sizeof(*k)) : NULL;
	if (!k) {
		tt->resend_unkept++;
		return NULL;
	}
	*k = (struct rt_kept){ .tt = tt,
			       .src = msg->data,
			       .seq = msg->fwd_seq,
			       .size = msg->size,
			       .ts_ns = msg->ts_ns,
			       .origin_stream = msg->origin_stream,
			       .origin_seq = msg->origin_seq,
			       .off = off,
			       .busy = 1, /* until keep_done */
			       .done = done,
			       .done_arg = arg };
	k->job.run = keep_run;
	k->job.done.fn = keep_done;
	TAILQ_INSERT_TAIL(&tt->kept, k, link);
	tt->rs_used += msg->size;
	rgapsd_worker_submit(&tt->rt->keeper, &k->job);
	return k;
}

void *rt_resend_mr(struct rt_topic *tt, int tr)
{
	struct rt_transport *t = &tt->rt->tr[tr];
	int r;

	if (tt->rs_mr[tr])
		return tt->rs_mr[tr];
	r = t->lp->ops.transport.reg_local(t->ctx, tt->rs_mem, tt->rs_size, &tt->rs_mr[tr]);
	if (r) {
		rgaps_error("topic '%s': %s cannot register the resend window: %s",
			    tt->t->cfg.name, t->name, strerror(-r));
		tt->rs_mr[tr] = NULL;
	}
	return tt->rs_mr[tr];
}

void rt_resend_free(struct rt_topic *tt)
{
	struct rgapsd_remote *rt = tt->rt;
	struct rt_kept *k;

	while ((k = TAILQ_FIRST(&tt->kept))) {
		/* The keeper was stopped and its completions ran (rgapsd_remote_stop). */
		rgaps_require(k->filled);
		TAILQ_REMOVE(&tt->kept, k, link);
		free(k);
	}
	for (int i = 0; i < rt->ntr; i++) {
		if (tt->rs_mr[i])
			rt->tr[i].lp->ops.transport.dereg_local(rt->tr[i].ctx, tt->rs_mr[i]);
		tt->rs_mr[i] = NULL;
	}
	free(tt->rs_mem);
	tt->rs_mem = NULL;
	tt->rs_used = 0;
}
