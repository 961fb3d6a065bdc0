/*
 * Resend windows (the topic's resend_window key, docs/PROTOCOL.md section 4):
 * copies of the newest messages of a stream, in rgapsd's own memory, so that a
 * peer that lost some gets them once a new ring is up (sender.c sends them
 * again, from here, those at or after the receiver's "next"). Two kinds of
 * stream have one: this host's own messages of a topic (struct rt_topic: a
 * peer whose link or session flapped), and every source a host receives in a
 * relay tree (struct rt_source: a child that comes to it from a parent that
 * failed, or back from one that stood in).
 *
 * A copy, not a hold on the pool: the forwarder's few holds keep flowing and
 * no peer pins the pool; once a live message's copy is made, its chunks not
 * yet posted go from the copy too, so that a slow or dead link pins the pool
 * for a few messages at most (sender.c, pool_cap). A window is one buffer of
 * resend_window bytes, shared by every peer, filled in order and overwritten
 * oldest first; a copy being made, or read by a message being sent (again),
 * is never overwritten (the newest message then goes unkept, and a flap that
 * needs it reports it lost). The copies are made on
 * the keep worker, never on the loop (a message may be as large as
 * max_message_size: docs/DECISIONS.md 120): this host's own messages whole
 * from the pool, a relayed one record by record from the receive ring as they
 * land, so that it may be sent again from its first records on while its last
 * ones still land. Host-memory topics only: a device topic's messages would
 * need a copy off the GPU.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "internal.h"

#define RS_ALIGN 64u

/* One copy into a window, on the keep worker. */
struct rt_fill {
	struct rgapsd_job job;
	struct rt_kept *k;
	const uint8_t *src;
	uint64_t off, len;	 /* where in its message */
	void (*done)(void *arg); /* the caller's, on the loop once the copy is made */
	void *arg;
};

static void kept_free(struct rt_window *w, struct rt_kept *k)
{
	TAILQ_REMOVE(&w->kept, k, link);
	w->used -= k->size;
	free(k);
}

/* Where a copy of size bytes goes, overwriting the oldest copies as needed; UINT64_MAX: nowhere. */
static uint64_t place(struct rt_window *w, uint64_t size)
{
	for (;;) {
		struct rt_kept *old = TAILQ_FIRST(&w->kept), *new = TAILQ_LAST(&w->kept, rt_keptq);
		uint64_t tail;

		if (!old)
			return 0;
		tail = RGAPS_ALIGN_UP(new->off + new->size, RS_ALIGN);
		if (old->off < tail) { /* in use: [old, tail) */
			if (w->size - tail >= size)
				return tail;
			if (old->off >= size)
				return 0; /* wraps */
		} else if (old->off - tail >= size) { /* in use: [old, end) and [0, tail) */
			return tail;
		}
		if (old->busy || old->fills)
			return UINT64_MAX;
		kept_free(w, old);
		w->evicted++;
	}
}

/*
 * A new entry for a message of size bytes of topic t (its window made on
 * first use), busy until its copies are all made (or it is dropped). NULL:
 * nothing kept (no window, no memory, no room: counted).
 */
static struct rt_kept *kept_new(struct rt_window *w, const struct rgapsd_topic *t, uint64_t seq,
				uint64_t size)
{
	uint64_t win = t->cfg.resend_window, off;
	struct rt_kept *k;

	if (!win || w->failed || t->lim.mem_kind != RGAPS_MEM_HOST)
		return NULL;
	if (!w->mem) {
		w->size = RGAPS_ALIGN_UP(win, 4096);
		w->mem = aligned_alloc(4096, w->size);
		if (!w->mem) {
			rgaps_warn("topic '%s': no memory for a resend window of %llu bytes: a link "
				   "flap or a relay's failure loses messages (reported)",
				   t->cfg.name, (unsigned long long)w->size);
			w->failed = true;
			return NULL;
		}
	}
	off = size <= w->size ? place(w, size) : UINT64_MAX;
	k = off != UINT64_MAX ? calloc(1, sizeof(*k)) : NULL;
	if (!k) {
		w->unkept++;
		return NULL;
	}
	k->win = w;
	k->seq = seq;
	k->size = size;
	k->off = off;
	k->kept_ns = rgaps_now_ns(CLOCK_MONOTONIC);
	k->busy = 1; /* being made */
	k->making = true;
	TAILQ_INSERT_TAIL(&w->kept, k, link);
	w->used += size;
	return k;
}

/* On the keep worker: the bytes into the window. */
static void fill_run(struct rgapsd_job *job)
{
	struct rt_fill *f = RGAPS_CONTAINER_OF(job, struct rt_fill, job);

	memcpy(f->k->win->mem + f->k->off + f->off, f->src, f->len);
}

/* Back on the loop: the copy is made, chunks of the entry up to its end may be sent. */
static void fill_done(struct rgapsd_msg *m)
{
	struct rt_fill *f = RGAPS_CONTAINER_OF(m, struct rt_fill, job.done);
	struct rt_kept *k = f->k;
	struct rt_window *w = k->win;

	k->fills--;
	k->have = RGAPS_MAX(k->have, f->off + f->len); /* one worker: in order */
	if (k->making && k->have == k->size) {
		k->making = false;
		k->busy--; /* whole: it may be overwritten once nobody sends it */
	}
	if (k->dropped && !k->fills)
		kept_free(w, k);
	if (f->done)
		f->done(f->arg);
	free(f);
	if (w->closing && rt_window_idle(w))
		rt_window_free(w);
}

/* Copy len bytes from src into k at off, on the keep worker. false: out of memory. */
static bool fill_start(struct rt_kept *k, uint64_t off, const uint8_t *src, uint64_t len,
		       void (*done)(void *arg), void *arg)
{
	struct rt_fill *f = malloc(sizeof(*f));

	if (!f)
		return false;
	*f = (struct rt_fill){ .k = k, .src = src, .off = off, .len = len, .done = done, .arg = arg };
	f->job.run = fill_run;
	f->job.done.fn = fill_done;
	k->fills++;
	rgapsd_worker_submit(&k->win->rt->keeper, &f->job);
	return true;
}

struct rt_kept *rt_window_keep(struct rt_window *w, const struct rgapsd_topic *t,
			       const struct rt_local_msg *msg, void (*done)(void *arg), void *arg)
{
	struct rt_kept *k = kept_new(w, t, msg->fwd_seq, msg->size);

	if (!k)
		return NULL;
	k->ts_ns = msg->ts_ns;
	k->origin_stream = msg->origin_stream;
	k->origin_seq = msg->origin_seq;
	if (!fill_start(k, 0, msg->data, msg->size, done, arg)) {
		rt_window_drop(k);
		w->unkept++;
		return NULL;
	}
	return k;
}

struct rt_kept *rt_window_open(struct rt_window *w, const struct rgapsd_topic *t,
			       const struct rgaps_record_hdr *h)
{
	struct rt_kept *k = kept_new(w, t, h->msg_seq, h->msg_size);

	if (k) {
		k->ts_ns = h->ts_ns;
		k->origin_stream = h->origin_stream;
		k->origin_seq = h->origin_seq;
	}
	return k;
}

bool rt_window_fill(struct rt_kept *k, uint64_t off, const uint8_t *src, uint64_t len,
		    void (*done)(void *arg), void *arg)
{
	return fill_start(k, off, src, len, done, arg);
}

void rt_window_drop(struct rt_kept *k)
{
	if (k->dropped)
		return;
	k->dropped = true;
	if (k->making) {
		k->making = false;
		k->busy--;
	}
	if (!k->fills)
		kept_free(k->win, k);
}

bool rt_kept_has(const struct rt_kept *k, uint64_t off, uint64_t len)
{
	return !k->dropped && k->have >= off + len;
}

bool rt_kept_whole(const struct rt_kept *k)
{
	return rt_kept_has(k, 0, k->size);
}

void *rt_window_mr(struct rt_window *w, int tr)
{
	struct rt_transport *t = &w->rt->tr[tr];
	int r;

	if (w->mr[tr])
		return w->mr[tr];
	r = t->lp->ops.transport.reg_local(t->ctx, w->mem, w->size, &w->mr[tr]);
	if (r) {
		rgaps_error("%s cannot register a resend window: %s", t->name, strerror(-r));
		w->mr[tr] = NULL;
	}
	return w->mr[tr];
}

void rt_window_init(struct rt_window *w, struct rgapsd_remote *rt)
{
	memset(w, 0, sizeof(*w));
	w->rt = rt;
	TAILQ_INIT(&w->kept);
}

bool rt_window_idle(const struct rt_window *w)
{
	const struct rt_kept *k;

	TAILQ_FOREACH(k, &w->kept, link)
		if (k->fills || (k->busy && !k->making))
			return false;
	return true;
}

void rt_window_free(struct rt_window *w)
{
	struct rgapsd_remote *rt = w->rt;
	struct rt_kept *k;

	if (!rt_window_idle(w)) { /* copies run or are sent: freed once they are done */
		w->closing = true;
		return;
	}
	while ((k = TAILQ_FIRST(&w->kept)))
		kept_free(w, k);
	for (int i = 0; i < rt->ntr; i++) {
		if (w->mr[i])
			rt->tr[i].lp->ops.transport.dereg_local(rt->tr[i].ctx, w->mr[i]);
		w->mr[i] = NULL;
	}
	free(w->mem);
	w->mem = NULL;
	w->size = w->used = 0;
	w->closing = false;
}
