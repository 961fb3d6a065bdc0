/*
 * The receiver half of the remote path (docs/ARCHITECTURE.md sections 1 and 4): one in
 * ring per (topic, sending peer). Each landed record is checked, copied off
 * the loop into a block of the local pool (allocated on a message's first
 * chunk), its ring space is given back (Head, watermark), and the last chunk
 * publishes the message to the local subscribers. Where the transport tells a
 * record's header before its bytes (record_header: tcp), the record is checked
 * then, and a large chunk of a host pool's message lands straight in the
 * message's block instead of the ring: nothing to copy. Also the receiver's
 * side of the topic initialisation sequence (topic_setup -> topic_ready / refused).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../../common/log.h"
#include "internal.h"

const char *const rt_in_state_names[IN_NUM_STATES] = {
	"receiving", "landed",	 "checking", "checked",	 "allocated", "copying",
	"copied",    "finishing", "finished", "published", "released",	"dropped",
};

static void in_drive(struct rt_in *in);
static void arm_retry(struct rgapsd_remote *rt);

static void in_set(struct rgapsd_remote *rt, struct rt_rec *r, enum rt_in_state s)
{
	rt->in_trans[r->state][s]++;
	r->state = s;
}

static void copy_run(struct rgapsd_job *job)
{
	struct rt_rec *r = RGAPS_CONTAINER_OF(job, struct rt_rec, job);
	struct rt_in *in = r->in;
	struct rgaps_loaded_plugin *mem = in->topic->mem;

	r->copy_status = mem->ops.memory.copy(mem->ctx, r->loan_dst + r->h.chunk_off,
					      in->mem + r->slot.off + RGAPS_RECORD_HDR,
					      r->h.chunk_len, RGAPS_COPY_TO_POOL);
}

static void copy_done(struct rgapsd_msg *m)
{
	struct rt_rec *r = RGAPS_CONTAINER_OF(m, struct rt_rec, job.done);
	struct rt_in *in = r->in;

	in->jobs--;
	in_set(in->p->rt, r, IN_COPIED);
	if (in->dead) {
		if (!in->jobs && !in->held)
			rt_in_free(in);
		return;
	}
	if (r->copy_status) {
		/* Our own memory failed us: the message cannot be trusted; restart the session. */
		rgaps_error(
			"topic '%s': copy into the pool failed: %s; dropping the session with %s",
			in->topic->cfg.name, strerror(-r->copy_status),
			rgapsd_peer_name(in->p->peer));
		rgapsd_peer_disconnect(in->p->peer, "local copy into the pool failed");
		return;
	}
	in_drive(in);
}

static void drop_assembly(struct rt_in *in)
{
	if (in->asm_open) {
		rt_local_pub_cancel(in->pub, in->asm_token);
		in->asm_open = false;
	}
}

/* A message landing, for its stages: its state, and its loan if a stage refuses it. */
static struct rt_imsg *imsg_new(struct rt_in *in)
{
	struct rt_imsg *im = calloc(1, sizeof(*im));

	if (im && !(im->state = calloc(1, in->stages->msg_state_size + 1))) {
		free(im);
		im = NULL;
	}
	return im;
}

static void imsg_put(struct rt_in *in, struct rt_imsg *im)
{
	if (!im || --im->refs)
		return;
	if (im->loan_open) /* every record of it is released: no copy writes there any more */
		rt_local_pub_cancel(in->pub, im->loan_token);
	free(im->state);
	free(im);
}

static void unloaned_done(struct rt_in *in, struct rt_rec *r);

static void rec_free(struct rt_in *in, struct rt_rec *r)
{
	unloaned_done(in, r);
	imsg_put(in, r->im);
	free(r->work);
	free(r);
}

/*
 * A stage refused r's message (gap: lost upstream before it): drop it; its
 * loss is told once r reaches the head.
 */
static void msg_refused(struct rt_in *in, struct rt_rec *r, uint32_t gap, const char *why)
{
	rgaps_warn("topic '%s': message %llu from %s dropped: %s", in->topic->cfg.name,
		   (unsigned long long)r->h.msg_seq, rgapsd_peer_name(in->p->peer), why);
	r->im->failed = true;
	in->stage_drops++;
	in->topic->refused_msgs++;
	r->lost = 1 + (uint64_t)gap; /* nothing lost silently */
	in_set(in->p->rt, r, IN_DROPPED);
}

/*
 * A stage refused r's message on landing (a gap, counted as a stage drop).
 * Records are checked in order before they are allocated, so a loan in
 * assembly is this message's: given back once its last record is released.
 */
static void msg_failed(struct rt_in *in, struct rt_rec *r, const char *why)
{
	uint32_t gap = (r->h.flags & RGAPS_RECORD_FIRST) ? r->gap : in->asm_gap;

	if (in->asm_open && !(r->h.flags & RGAPS_RECORD_FIRST)) {
		r->im->loan_open = true;
		r->im->loan_token = in->asm_token;
		in->asm_open = false;
	}
	msg_refused(in, r, gap, why);
}

/*
 * Messages up to seq were lost (lost of them not yet told, 0 for a loss
 * notice about nothing new): subscribers hear it by the end of this drive.
 */
static void loss_note(struct rt_in *in, uint64_t lost, uint64_t seq)
{
	in->pending_gap += lost;
	in->pending_next = RGAPS_MAX(in->pending_next, seq + 1);
	if (!in->pending_gap) /* never back: a notice may name what was delivered */
		in->told_next = RGAPS_MAX(in->told_next, seq + 1);
}

/*
 * Tell local subscribers now what was lost and not yet told (a gap-only
 * message): no later message may ever come to carry it. false: the queue is
 * full (under "block"), to be tried again.
 */
static bool loss_flush(struct rt_in *in)
{
	uint32_t n = (uint32_t)RGAPS_MIN(in->pending_gap, UINT32_MAX);
	int e;

	if (!n || !in->pub->open)
		return true;
	e = rt_local_pub_gap(in->pub, n, rgaps_now_ns(CLOCK_REALTIME));
	if (e == -EAGAIN)
		return false;
	if (e) { /* the next published message carries it */
		rgaps_warn("topic '%s': cannot report %u messages lost from %s: %s",
			   in->topic->cfg.name, n, rgapsd_peer_name(in->p->peer), strerror(-e));
		return true;
	}
	in->gap_reports++;
	in->pending_gap -= n;
	if (!in->pending_gap)
		in->told_next = in->pending_next;
	return true;
}

/* r's stages are done (on the loop). */
static void rec_swork_done(struct rt_swork *sw)
{
	struct rt_rec *r = sw->arg;
	struct rt_in *in = r->in;

	in->jobs--;
	if (in->dead) {
		if (!in->jobs && !in->held)
			rt_in_free(in);
		return;
	}
	if (r->state == IN_CHECKING && sw->result == RGAPS_STAGE_CONTINUE) {
		in_set(in->p->rt, r, IN_CHECKED);
	} else if (r->state == IN_FINISHING && sw->result == RGAPS_STAGE_CONTINUE) {
		in_set(in->p->rt, r, IN_FINISHED);
	} else if (r->state == IN_CHECKING) {
		msg_failed(in, r, sw->why);
	} else { /* IN_FINISHING: r owns its loan; one in assembly is a later message's */
		rt_local_pub_cancel(in->pub, r->loan_token);
		msg_refused(in, r, r->gap, sw->why);
	}
	in_drive(in);
}

/* Run the topic's stages at point on r: its chunk in the ring, or its whole message in the pool. */
static bool rec_swork_start(struct rt_in *in, struct rt_rec *r, uint32_t point)
{
	struct rt_swork *sw = r->work ? r->work : calloc(1, sizeof(*sw));

	if (!sw)
		return false;
	memset(sw, 0, sizeof(*sw));
	r->work = sw;
	sw->st = in->stages;
	sw->w.point = point;
	sw->w.msg_seq = r->h.msg_seq;
	sw->w.msg_size = r->h.msg_size;
	if (point == RGAPS_STAGE_AFTER_LANDING) {
		sw->w.mem_kind = RGAPS_MEM_HOST;
		sw->w.chunk_off = r->h.chunk_off;
		sw->w.data = in->mem + r->slot.off + RGAPS_RECORD_HDR;
		sw->w.len = r->h.chunk_len;
		if (r->h.flags & RGAPS_RECORD_TAG) /* behind the chunk (rt_record_check saw room) */
			memcpy(sw->tag, in->mem + r->slot.off + RGAPS_RECORD_HDR + r->h.chunk_len,
			       RGAPS_RECORD_TAG_LEN);
	} else {
		sw->w.mem_kind = in->topic->lim.mem_kind;
		sw->w.data = r->loan_dst;
		sw->w.len = r->h.msg_size;
	}
	sw->msg_state = r->im->state;
	sw->done = rec_swork_done;
	sw->arg = r;
	in->jobs++;
	rt_swork_start(in->p->rt, sw);
	return true;
}

/* A first chunk counted in in->unloaned has its block now (or never will). */
static void unloaned_done(struct rt_in *in, struct rt_rec *r)
{
	if (r->unloaned) {
		r->unloaned = false;
		in->unloaned--;
	}
}

/* ---------------------------------------------------------------- the driver, one state at a time */

/*
 * A message's first chunk: loan its block in the local pool, where its chunks
 * are assembled. 0; -EAGAIN: no room yet (the record waits); another negative
 * errno: the message is refused (r dropped, its loss counted).
 */
static int asm_begin(struct rt_in *in, struct rt_rec *r)
{
	uint8_t *dst;
	uint32_t tok;
	int e;

	drop_assembly(in); /* defensive: checked at landing */
	if (r->preloaned) { /* loaned when its header came */
		tok = r->loan_token;
		dst = r->loan_dst;
		r->preloaned = false;
		e = 0;
	} else {
		e = rt_local_pub_loan(in->pub, r->h.msg_size, &tok, &dst);
	}
	if (e == -EAGAIN || e == -ENOBUFS) {
		/* Pool full under "block", or every loan of our slot is still being
		 * assembled: keep the ring full too; the sender stalls, its publishers
		 * feel it. */
		in->blocked = true;
		in->blocked_retries++;
		return -EAGAIN;
	}
	if (e) {
		rgaps_warn("topic '%s': message of %llu bytes from %s refused: %s",
			   in->topic->cfg.name, (unsigned long long)r->h.msg_size,
			   rgapsd_peer_name(in->p->peer), strerror(-e));
		in->refused++;
		in->topic->refused_msgs++;
		r->lost = 1 + (uint64_t)r->gap; /* nothing lost silently */
		unloaned_done(in, r);
		in_set(in->p->rt, r, IN_DROPPED);
		return e;
	}
	unloaned_done(in, r);
	in->asm_open = true;
	in->asm_token = tok;
	in->asm_dst = dst;
	in->asm_gap = r->gap;
	return 0;
}

/*
 * Each state's step of record r returns true when r waits (the walk stops
 * there, what waits moves it on) and false when it moved r on, or r is
 * dropped.
 */

/* Checked (or nothing to check): the record gets its place in its message's block. */
static bool rec_checked(struct rt_in *in, struct rt_rec *r)
{
	struct rgapsd_remote *rt = in->p->rt;

	if (r->h.flags & RGAPS_RECORD_FIRST) {
		int e = asm_begin(in, r);

		if (e)
			return e == -EAGAIN;
	}
	if (!in->asm_open) {
		in_set(rt, r, IN_DROPPED); /* rest of a refused message */
		return false;
	}
	r->loan_token = in->asm_token;
	r->loan_dst = in->asm_dst;
	if (r->h.flags & RGAPS_RECORD_LAST) {
		in->asm_open = false; /* the record now owns the loan */
		r->gap = in->asm_gap; /* and reports what was lost before it */
	}
	in_set(rt, r, IN_ALLOCATED);
	return false;
}

/* Landed: dropped, handed to the after-landing stages, or on to its block. */
static bool rec_landed(struct rt_in *in, struct rt_rec *r)
{
	struct rgapsd_remote *rt = in->p->rt;

	if (r->dup || (r->h.flags & RGAPS_RECORD_LOSS)) {
		in_set(rt, r, IN_DROPPED); /* told at the head */
		return false;
	}
	if (r->im && r->im->failed) {
		in_set(rt, r, IN_DROPPED); /* rest of a refused message */
		return false;
	}
	if (rt_stages_at(in->stages, RGAPS_STAGE_AFTER_LANDING)) {
		in_set(rt, r, IN_CHECKING);
		return false;
	}
	return rec_checked(in, r);
}

/* The after-landing stages: started here, one record at a time, in order. */
static bool rec_checking(struct rt_in *in, struct rt_rec *r)
{
	if (r->im->failed) {
		in_set(in->p->rt, r, IN_DROPPED); /* rest of a refused message */
		return false;
	}
	if (!r->work && !rec_swork_start(in, r, RGAPS_STAGE_AFTER_LANDING)) {
		msg_failed(in, r, "out of memory for its stages");
		return false;
	}
	return true; /* rec_swork_done goes on */
}

/* Allocated: the worker copies the chunk from the ring into its block (a redirected
 * chunk is there already). */
static bool rec_allocated(struct rt_in *in, struct rt_rec *r)
{
	struct rgapsd_remote *rt = in->p->rt;

	if (r->redirected) { /* its bytes are in the block already */
		in->direct_records++;
		in->direct_bytes += r->h.chunk_len;
		in_set(rt, r, IN_COPIED);
		return false;
	}
	in_set(rt, r, IN_COPYING);
	in->jobs++;
	r->job.run = copy_run;
	r->job.done.fn = copy_done;
	rt_copy_start(rt, in->topic->mem, &r->job, &r->copy_status, r->loan_dst + r->h.chunk_off,
		      in->mem + r->slot.off + RGAPS_RECORD_HDR, r->h.chunk_len, RGAPS_COPY_TO_POOL);
	return false;
}

static bool rec_step(struct rt_in *in, struct rt_rec *r)
{
	switch (r->state) {
	case IN_RECEIVING:
		return true; /* its bytes first: record_landed moves it on */
	case IN_LANDED:
		return rec_landed(in, r);
	case IN_CHECKING:
		return rec_checking(in, r);
	case IN_CHECKED:
		return rec_checked(in, r);
	case IN_ALLOCATED:
		return rec_allocated(in, r);
	case IN_COPYING: /* async: copy_done moves it on */
	case IN_COPIED:	 /* the head's from here on (in_head) */
	case IN_FINISHING:
	case IN_FINISHED:
	case IN_PUBLISHED:
	case IN_RELEASED:
	case IN_DROPPED:
	case IN_NUM_STATES:
		break;
	}
	return false;
}

/*
 * Walk the records in landing order from drive_from, each as far as it goes:
 * allocation and copies run ahead of the head (chunk k copies while k+1
 * lands and k+2 is on the wire). A record that waits stops the walk.
 */
static void in_walk(struct rt_in *in)
{
	for (struct rt_rec *r = in->drive_from; r; r = STAILQ_NEXT(r, link)) {
		enum rt_in_state prev;
		bool waits;

		do {
			prev = r->state;
			waits = rec_step(in, r);
		} while (r->state != prev && !waits);
		if (waits)
			return;
		in->drive_from = STAILQ_NEXT(r, link); /* r is with the worker, or dropped */
	}
}

/*
 * Publish the message whose last chunk r is. 0; -EAGAIN: its queue is full
 * under "block" (retried); a failure is counted and r dropped.
 */
static int msg_publish(struct rt_in *in, struct rt_rec *r)
{
	int e = rt_local_pub_commit(in->pub, r->loan_token, r->h.msg_size, r->h.ts_ns,
				    (uint32_t)RGAPS_MIN(r->gap + in->pending_gap, UINT32_MAX),
				    r->h.origin_stream, r->h.origin_seq);

	if (e == -EAGAIN) {
		in->blocked = true;
		in->blocked_retries++;
		return e;
	}
	if (e) {
		rgaps_warn("topic '%s': publish failed: %s", in->topic->cfg.name, strerror(-e));
		r->lost = 1 + (uint64_t)r->gap;
		in_set(in->p->rt, r, IN_DROPPED);
		return e;
	}
	in->messages++;
	in->told_next = r->h.msg_seq + 1;
	in->topic->landed_msgs++;
	in->topic->landed_bytes += r->h.msg_size;
	in->pending_gap = 0;
	in_set(in->p->rt, r, IN_PUBLISHED);
	return 0;
}

/*
 * The last chunk of a message at the head: its before-publish stages, then
 * its publication. true: it waits (the stages run, or no room to publish).
 */
static bool head_finish(struct rt_in *in, struct rt_rec *r)
{
	struct rgapsd_remote *rt = in->p->rt;

	if (r->state == IN_COPIED && rt_stages_at(in->stages, RGAPS_STAGE_BEFORE_PUBLISH)) {
		in_set(rt, r, IN_FINISHING);
		if (!rec_swork_start(in, r, RGAPS_STAGE_BEFORE_PUBLISH)) {
			in_set(rt, r, IN_COPIED);
			in->blocked = true; /* out of memory: try again later */
		}
		return true; /* rec_swork_done goes on */
	}
	if (r->state == IN_COPIED || r->state == IN_FINISHED)
		return msg_publish(in, r) == -EAGAIN;
	return false;
}

/* The head record is done with: its ring space goes back, a loss it tells is noted. */
static void head_release(struct rt_in *in, struct rt_rec *r)
{
	if (r->state == IN_DROPPED && (r->lost || (r->h.flags & RGAPS_RECORD_LOSS)))
		loss_note(in, r->lost, r->h.msg_seq);
	rt_ring_receiver_consume(&in->ring, &r->slot);
	in_set(in->p->rt, r, IN_RELEASED);
	STAILQ_REMOVE_HEAD(&in->recs, link);
	rec_free(in, r);
}

/*
 * Strictly in order at the head: publish last chunks, give ring space back
 * (the head of a message keeps the ring in order). The records released.
 */
static uint32_t in_head(struct rt_in *in)
{
	uint32_t released = 0;
	struct rt_rec *r;

	while ((r = STAILQ_FIRST(&in->recs))) {
		if ((r->h.flags & RGAPS_RECORD_LAST) && head_finish(in, r))
			break;
		if (r->state != IN_COPIED && r->state != IN_PUBLISHED && r->state != IN_DROPPED)
			break; /* not done yet */
		if (r->holds)
			break; /* a relay still sends from it to its children (relay.c) */
		head_release(in, r);
		released++;
	}
	return released;
}

/* Tell the sender of the space given back, when the watermark says so. */
static void head_report(struct rt_in *in)
{
	struct rt_transport *tr = &in->p->rt->tr[in->tr];
	struct rt_link *l = &in->p->links[in->tr];
	uint64_t head;

	if (!l->link || !rt_ring_receiver_should_report(&in->ring, &head))
		return;
	if (tr->lp->ops.transport.post_head(tr->ctx, l->link, in->id, head) == 0) {
		rt_ring_receiver_reported(&in->ring, head);
		tr->lp->ops.transport.flush(tr->ctx, l->link);
	}
}

/*
 * The receiver's driver, called whenever something a record waits for
 * happened: walk the records, then the head. When a publish returned loans
 * while some record waited for one, once more (each round releases records,
 * so the rounds end).
 */
static void in_drive(struct rt_in *in)
{
	bool released = false, progress;

	do {
		in->blocked = false;
		in_walk(in);
		progress = in_head(in) > 0;
		released |= progress;
		/* A loss with no message behind it to carry the news: told now. */
		if (!loss_flush(in)) {
			in->blocked = true;
			in->blocked_retries++;
		}
	} while (in->blocked && progress);
	if (released)
		head_report(in);
	if (in->blocked)
		arm_retry(in->p->rt);
}

/*
 * The ring goes: messages that began to land and were not published never
 * will be from this ring. A sender that keeps a resend window sends them
 * again on the next ring (from told_next, topic_ready's next), and in a relay
 * tree the next ring may come from another host, which keeps one: they are
 * owed (src->owed), and reported when the next ring does not bring them (a
 * jump of its sequence) or its sender turns out to have restarted. A star's
 * sender without a window does not: subscribers hear of them now, with what
 * was still to be told. What never landed, the next ring's sender tells.
 */
static void in_losses_at_end(struct rt_in *in, struct rt_source *src)
{
	bool cut = in->have_next && in->next_msg_seq > in->told_next;

	if (cut && !in->sender_resends && src->mode.kind == RGAPS_RELAY_STAR) {
		in->pending_gap = RGAPS_MAX(in->pending_gap, in->next_msg_seq - in->told_next);
		in->pending_next = in->next_msg_seq;
	}
	if (in->pending_gap) {
		uint64_t n = in->pending_gap;

		loss_flush(in);
		if (!in->pending_gap)
			rgaps_warn("topic '%s': ring %u from %s gone: %llu messages lost",
				   in->topic->cfg.name, in->id, rgapsd_peer_name(in->p->peer),
				   (unsigned long long)n);
	}
	if (in->have_next && in->next_msg_seq > in->told_next)
		src->owed = in->next_msg_seq - in->told_next;
}

/*
 * The ring goes (once): where its source's next ring goes on. true: it was its
 * source's ring, whose end relay.c must hear of.
 */
static bool in_ended(struct rt_in *in)
{
	struct rt_source *src = in->src;

	if (in->have_told) { /* a later ring of the source goes on from here */
		src->owed = 0;
		in_losses_at_end(in, src);
		src->seen = true;
		src->next = in->told_next;
		src->epoch = in->epoch;
	}
	if (src->in != in)
		return false; /* never its source's ring (a set-up that failed) */
	src->in = NULL;
	return true;
}

void rt_in_free(struct rt_in *in)
{
	struct rgapsd_remote *rt = in->p->rt;
	bool was_source = !in->dead && in->src && in_ended(in);
	struct rt_rec *r;

	in->dead = true;
	if (in->p->in[in->id] == in)
		in->p->in[in->id] = NULL;
	/* Dead first: what its end makes relay.c give back must not drive it again, nor
	 * free it under our feet (ending). */
	if (was_source && rt->relay_ring_end) {
		in->ending = true;
		rt->relay_ring_end(in);
		in->ending = false;
	}
	if (in->jobs || in->held) {
		/* copy_done, rec_swork_done or rt_rec_put finishes the job; the peer may be
		 * forgotten meanwhile, not freed */
		if (!in->lingering)
			in->p->lingering++;
		in->lingering = true;
		return;
	}
	while ((r = STAILQ_FIRST(&in->recs))) {
		STAILQ_REMOVE_HEAD(&in->recs, link);
		/* The last record of an unpublished message owns its loan: give it back once;
		 * so does a first one whose loan came with its header, until the driver
		 * takes it over. */
		if (((r->h.flags & RGAPS_RECORD_LAST) &&
		     (r->state == IN_ALLOCATED || r->state == IN_COPIED ||
		      r->state == IN_FINISHED)) ||
		    r->preloaned)
			rt_local_pub_cancel(in->pub, r->loan_token);
		in_set(rt, r, IN_DROPPED);
		rec_free(in, r);
	}
	imsg_put(in, in->landing_im);
	in->landing_im = NULL;
	if (in->pub)
		drop_assembly(in);
	if (in->src)
		rt_source_check(in->src); /* its landing stream stays for the next ring, or goes */
	for (int i = 0; i < rt->ntr; i++)
		if (in->send_mr[i])
			rt->tr[i].lp->ops.transport.dereg_local(rt->tr[i].ctx, in->send_mr[i]);
	if (in->pinned)
		in->topic->mem->ops.memory.host_unregister(in->topic->mem->ctx, in->mem);
	if (in->mem) /* the reaper: a ring may be as large as 64 GiB */
		rgapsd_worker_unmap(&rt->d->reaper, in->mem, in->size);
	if (in->lingering)
		rt_peer_unlinger(in->p);
	free(in);
}

void rt_in_teardown(struct rt_in *in)
{
	struct rgapsd_remote *rt = in->p->rt;
	struct rt_link *l = &in->p->links[in->tr];

	if (l->link) /* up, or (receiver rings only) still connecting: see do_topic_setup */
		rt->tr[in->tr].lp->ops.transport.ring_detach(rt->tr[in->tr].ctx, l->link, in->id);
	rt_in_free(in);
}

/* The in ring of ring_id over transport tr's link, or NULL (the peer was told it is hostile). */
static struct rt_in *in_of(struct rt_transport *tr, struct rgaps_link *link, uint32_t ring_id)
{
	struct rt_peer *p = rt_peer_of_link(tr->rt, tr->idx, link);
	struct rt_in *in;

	if (!p)
		return NULL;
	in = ring_id < RT_RINGS ? p->in[ring_id] : NULL;
	if (!in || in->tr != tr->idx) {
		rt_hostile(p, "record for ring %u, which was never set up", ring_id);
		return NULL;
	}
	return in;
}

/*
 * A record arrives in ring order (its header in the ring): place it, check
 * its header against the ring's state, note what it says of losses and
 * duplicates, and queue it for the driver in state. NULL: the peer broke the
 * protocol (it was told so).
 */
static struct rt_rec *rec_arrive(struct rt_in *in, uint32_t ring_id, uint64_t off, uint64_t len,
				 enum rt_in_state state)
{
	struct rt_peer *p = in->p;
	struct rgapsd_remote *rt = p->rt;
	struct rgaps_ring_slot slot;
	struct rgaps_record_hdr h;
	struct rt_rec *r;
	char why[256];
	int e;

	if (off != UINT64_MAX) {
		e = rt_ring_receiver_verify(&in->ring, off, len);
		if (e) {
			rt_hostile(p, "ring %u: record of %llu bytes at %llu, expected elsewhere",
				   ring_id, (unsigned long long)len, (unsigned long long)off);
			return NULL;
		}
	}
	e = rt_ring_receiver_land(&in->ring, len, &slot);
	if (e) {
		rt_hostile(p, "ring %u: a %llu-byte record cannot be where the sender put it (%s)",
			   ring_id, (unsigned long long)len, strerror(-e));
		return NULL;
	}
	if (rt_record_check(in->mem + slot.off, len, ring_id, in->topic->cfg.max_message_size,
			    &in->landing, &h, why, sizeof(why))) {
		rt_hostile(p, "%s", why);
		return NULL;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		rt_hostile(p, "out of memory");
		return NULL;
	}
	r->in = in;
	r->slot = slot;
	r->h = h;
	r->state = state;
	r->loan_token = UINT32_MAX;
	r->claimed_off = off;
	r->len = len;
	rt->in_trans[state][state]++;
	if (!(h.flags & RGAPS_RECORD_FIRST)) {
		r->dup = in->landing_dup; /* the rest of a duplicate */
	} else if (in->epoch && in->have_next && h.msg_seq < in->next_msg_seq) {
		/* The same instance of the sender's topic: sent again, and delivered already
		 * (a loss notice about what is known already is not counted). */
		r->dup = in->landing_dup = !(h.flags & RGAPS_RECORD_LOSS);
		in->duplicates += r->dup;
		p->duplicates += r->dup;
	} else {
		/* A loss notice counts the message it names as lost, a message does not. */
		uint64_t upto = h.msg_seq + ((h.flags & RGAPS_RECORD_LOSS) ? 1 : 0);

		in->landing_dup = false;
		if (!in->have_told) { /* nothing owed from before this ring's first record */
			in->have_told = true;
			in->told_next = h.msg_seq;
		}
		if (in->have_next && upto > in->next_msg_seq) {
			uint64_t n = upto - in->next_msg_seq;

			if (h.flags & RGAPS_RECORD_LOSS) {
				r->lost = n;
				in->loss_notices++;
				rgaps_info("topic '%s': %s reports %llu messages lost (up to %llu)",
					   in->topic->cfg.name, rgapsd_peer_name(p->peer),
					   (unsigned long long)n, (unsigned long long)h.msg_seq);
			} else {
				r->gap = (uint32_t)RGAPS_MIN(n, UINT32_MAX);
			}
			in->upstream_gaps += n;
			in->topic->landed_gaps += n; /* outlives the ring, for stats */
		} else if (in->have_next && h.msg_seq < in->next_msg_seq &&
			   upto < in->next_msg_seq) {
			/* The sender's topic started over (its daemon restarted): no gap to count. */
			rgaps_info("topic '%s': %s restarted its sequence at %llu",
				   in->topic->cfg.name, rgapsd_peer_name(p->peer),
				   (unsigned long long)h.msg_seq);
			in->told_next = in->pending_next = h.msg_seq;
		}
		in->have_next = true;
		in->next_msg_seq = h.msg_seq + 1;
	}
	if (!(h.flags & RGAPS_RECORD_LOSS) && !r->dup &&
	    rt_stages_at(in->stages, RGAPS_STAGE_AFTER_LANDING | RGAPS_STAGE_BEFORE_PUBLISH)) {
		if (h.flags & RGAPS_RECORD_FIRST) {
			imsg_put(in, in->landing_im);
			in->landing_im = imsg_new(in);
			if (!in->landing_im) {
				free(r);
				rt_hostile(p, "out of memory");
				return NULL;
			}
			in->landing_im->refs = 1; /* while it lands */
		}
		r->im = in->landing_im;
		r->im->refs++;
		if (h.flags & RGAPS_RECORD_LAST) {
			imsg_put(in, in->landing_im);
			in->landing_im = NULL;
		}
	}
	rt_record_advance(&in->landing, &h);
	in->records++;
	in->bytes += h.chunk_len;
	STAILQ_INSERT_TAIL(&in->recs, r, link);
	if (!in->drive_from)
		in->drive_from = r;
	return r;
}

/*
 * Where record r's chunk may land instead of the ring: its message's block in
 * a host pool, loaned at the message's first header. A first chunk takes the
 * loan now only if every message before it has its block already (none waits
 * for pool room), so an early loan never holds room an earlier message needs
 * to be published first. Only for topics without stages (their checks and
 * tags read the ring), messages the relay does not pass on or keep from the
 * ring, whole chunks (len == header + chunk), and never for a duplicate or a
 * loss notice. NULL: into the ring.
 */
static uint8_t *direct_dst(struct rt_in *in, struct rt_rec *r, bool can_redirect)
{
	bool first = r->h.flags & RGAPS_RECORD_FIRST;
	bool data = !r->dup && !(r->h.flags & RGAPS_RECORD_LOSS);
	struct rgapsd_remote *rt = in->p->rt;

	if (first) {
		in->hdr_direct = false;
		if (data && can_redirect && in->topic->lim.mem_kind == RGAPS_MEM_HOST &&
		    in->stages->n == 0 && !in->unloaned &&
		    !(rt->relay_reads_ring && rt->relay_reads_ring(in)) &&
		    rt_local_pub_loan(in->pub, r->h.msg_size, &in->hdr_token, &in->hdr_dst) == 0) {
			in->hdr_direct = true;
			r->preloaned = true;
			r->loan_token = in->hdr_token;
			r->loan_dst = in->hdr_dst;
		} else if (data) {
			r->unloaned = true; /* the driver loans its block */
			in->unloaned++;
		}
	}
	r->in_block = in->hdr_direct && data;
	if (!in->hdr_direct || !data || !can_redirect ||
	    r->len != RGAPS_RECORD_HDR + (uint64_t)r->h.chunk_len)
		return NULL; /* a small chunk of a direct message is copied there as usual */
	r->redirected = true;
	/* rt_record_check: chunk_off + chunk_len <= msg_size, the loan's size */
	return in->hdr_dst + r->h.chunk_off;
}

void *rt_on_record_header(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t off,
			  uint64_t len, bool can_redirect)
{
	struct rt_transport *tr = arg;
	struct rt_in *in = in_of(tr, link, ring_id);
	struct rt_rec *r;

	if (!in)
		return NULL;
	in->headers = true;
	r = rec_arrive(in, ring_id, off, len, IN_RECEIVING);
	if (!r)
		return NULL;
	STAILQ_INSERT_TAIL(&in->arriving, r, alink);
	return direct_dst(in, r, can_redirect);
}

/* r is whole (in the ring, or in its block): the relay and the driver may take it. */
static void rec_whole(struct rt_in *in, struct rt_rec *r)
{
	struct rgapsd_remote *rt = in->p->rt;

	if (rt->relay_landed)
		rt->relay_landed(in, r); /* passed on as it lands, before it is copied here */
	in_drive(in);
}

void rt_on_record_landed(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t off,
			 uint64_t len)
{
	struct rt_transport *tr = arg;
	struct rt_in *in = in_of(tr, link, ring_id);
	struct rt_rec *r;

	if (!in)
		return;
	if (!in->headers) { /* verbs: the record is checked now */
		r = rec_arrive(in, ring_id, off, len, IN_LANDED);
		if (r)
			rec_whole(in, r);
		return;
	}
	r = STAILQ_FIRST(&in->arriving);
	if (!r || r->claimed_off != off || r->len != len) {
		rt_hostile(in->p,
			   "ring %u: the transport landed a record of %llu bytes at %llu, "
			   "not the one whose header it told",
			   ring_id, (unsigned long long)len, (unsigned long long)off);
		return;
	}
	STAILQ_REMOVE_HEAD(&in->arriving, alink);
	in_set(in->p->rt, r, IN_LANDED);
	rec_whole(in, r);
}

void rt_on_retry(uv_timer_t *t)
{
	struct rgapsd_remote *rt = t->data;

	rt->retry_armed = false;
	for (struct rt_peer *p = SLIST_FIRST(&rt->peers); p; p = SLIST_NEXT(p, link))
		for (uint32_t i = 0; i < RT_RINGS; i++)
			if (p->in[i] && p->in[i]->blocked)
				in_drive(p->in[i]);
}

static void arm_retry(struct rgapsd_remote *rt)
{
	if (rt->retry_armed)
		return;
	rt->retry_armed = true;
	uv_timer_start(&rt->retry, rt_on_retry, RT_RETRY_MS, 0);
}

void rt_deferred_drop(struct rt_peer *p, int tr)
{
	struct rt_deferred *x;

	while ((x = STAILQ_FIRST(&p->deferred[tr]))) {
		STAILQ_REMOVE_HEAD(&p->deferred[tr], link);
		free(x);
	}
	p->ndeferred[tr] = 0;
}

void rt_run_deferred(struct rt_peer *p, int tr)
{
	struct rt_deferred *x;

	while ((x = STAILQ_FIRST(&p->deferred[tr]))) {
		STAILQ_REMOVE_HEAD(&p->deferred[tr], link);
		p->ndeferred[tr]--;
		/* The peer may go away meanwhile: its sender forgot these rings then. */
		if (p->links[tr].state == LINK_UP)
			rt_on_topic_setup(p, &x->m);
		free(x);
	}
}

void rt_setup_refuse(struct rt_peer *p, uint32_t ring_id, bool by_tree, const char *fmt, ...)
{
	struct rt_wire_msg r = { .type = RT_MSG_TOPIC_REFUSED,
				 .ring_id = ring_id,
				 .by_tree = by_tree };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r.reason, sizeof(r.reason), fmt, ap);
	va_end(ap);
	/* The tree's refusals are expected while views of it differ: no warning. */
	if (by_tree)
		rgaps_info("peer %s: topic set-up refused: %s", rgapsd_peer_name(p->peer),
			   r.reason);
	else
		rgaps_warn("peer %s: topic set-up refused: %s", rgapsd_peer_name(p->peer),
			   r.reason);
	rt_peer_send(p, &r);
}

/* A set-up that arrived before the data link it names: held until it comes up. */
static void defer_setup(struct rt_peer *p, int tr, const struct rt_wire_msg *m)
{
	struct rt_deferred *x = NULL;

	if (p->ndeferred[tr] >= RT_DEFERRED_MAX || !(x = malloc(sizeof(*x)))) {
		rt_setup_refuse(p, m->ring_id, false, "too many set-ups wait for the %s data link",
				p->rt->tr[tr].name);
		return;
	}
	x->m = *m;
	x->m.subs = NULL; /* a set-up has no list; never share one */
	STAILQ_INSERT_TAIL(&p->deferred[tr], x, link);
	p->ndeferred[tr]++;
	p->setups_deferred++;
	rgaps_debug("peer %s: topic '%s' set-up waits for the %s data link",
		    rgapsd_peer_name(p->peer), m->topic, p->rt->tr[tr].name);
}

/* A new in ring: its memory, its publisher slot, attached to the transport. */
static struct rt_in *in_create(struct rt_peer *p, struct rgapsd_topic *t, struct rt_source *src,
			       int tr_idx, const struct rt_wire_msg *m, uint8_t *desc, size_t *dlen)
{
	struct rt_transport *tr = &p->rt->tr[tr_idx];
	struct rt_in *in = calloc(1, sizeof(*in));
	char err[256];
	int e;

	if (!in) {
		rt_setup_refuse(p, m->ring_id, false, "out of memory");
		return NULL;
	}
	in->p = p;
	in->topic = t;
	in->id = m->ring_id;
	in->tr = tr_idx;
	in->size = t->cfg.ring_size;
	STAILQ_INIT(&in->recs);
	STAILQ_INIT(&in->arriving);
	in->stages = rt_stages_of(p->rt, t, err, sizeof(err));
	if (!in->stages) {
		free(in);
		rt_setup_refuse(p, m->ring_id, false, "topic '%s': %s", m->topic, err);
		return NULL;
	}
	e = rt_ring_geom_init(in->size, in->size / 2 - RGAPS_RING_ALIGN, RGAPS_RING_ALIGN,
				 &in->geom);
	if (!e)
		e = rt_ring_receiver_init(&in->ring, &in->geom, t->cfg.watermark);
	if (e) {
		free(in);
		rt_setup_refuse(p, m->ring_id, false, "topic '%s': ring of %llu bytes refused",
				m->topic, (unsigned long long)t->cfg.ring_size);
		return NULL;
	}
	in->mem = mmap(NULL, in->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (in->mem == MAP_FAILED) {
		in->mem = NULL;
		free(in);
		rt_setup_refuse(p, m->ring_id, false, "cannot allocate a %llu-byte ring",
				(unsigned long long)t->cfg.ring_size);
		return NULL;
	}
	if (t->lim.mem_kind != RGAPS_MEM_HOST) {
		/* DP3 copies ring -> GPU pool: a pinned ring next to the GPU runs at full speed. */
		rt_place_near_device(t, in->mem, in->size, "receive ring");
		in->pinned = t->mem->ops.memory.host_register(t->mem->ctx, in->mem, in->size) == 0;
		if (!in->pinned)
			rgaps_warn("topic '%s': receive ring not pinned: H2D copies run slower",
				   m->topic);
	}
	in->src = src;
	in->pub = &src->pub;
	e = rt_source_open(src, t);
	if (e) {
		rt_in_free(in);
		rt_setup_refuse(p, m->ring_id, false, "topic '%s': no publisher slot", m->topic);
		return NULL;
	}
	e = tr->lp->ops.transport.receiver_ring_attach(tr->ctx, p->links[tr_idx].link, in->id,
						       in->mem, in->size, m->desc, m->desc_len,
						       desc, dlen);
	if (e) {
		rt_in_free(in);
		rt_setup_refuse(p, m->ring_id, false, "%s cannot attach the ring: %s", tr->name,
				strerror(-e));
		return NULL;
	}
	return in;
}

/* Both hosts must run the same stages on a topic: the tags and checks must match. */
static bool same_stages(const struct rgapsd_topic *t, const struct rt_wire_msg *m)
{
	if (t->cfg.nstages != m->nstages)
		return false;
	for (uint32_t i = 0; i < m->nstages; i++)
		if (strcmp(t->cfg.stages[i], m->stages[i]) != 0)
			return false;
	return true;
}

static const char *stage_list(char *buf, size_t len, const char (*names)[RGAPS_CFG_NAME_MAX],
			      uint32_t n)
{
	size_t off = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; i < n && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "", names[i]);
	return buf;
}

/* Receiver side of the topic initialisation sequence (docs/ARCHITECTURE.md section 7). */
void rt_on_topic_setup(struct rt_peer *p, const struct rt_wire_msg *m)
{
	struct rt_wire_msg r = { .type = RT_MSG_TOPIC_READY, .ring_id = m->ring_id };
	int i = rt_tr_index(p->rt, m->transport);
	const char *origin = m->origin[0] ? m->origin : rgapsd_peer_name(p->peer);
	struct rt_source *src;
	struct rgapsd_topic *t;
	struct rt_in *in;
	char err[512];
	int e;

	if ((m->ring_id < RT_RINGS / 2) == p->initiator) { /* the sender's half is the other one */
		rt_hostile(p, "topic_setup for ring %u, in this host's half of the ring ids",
			   m->ring_id);
		return;
	}
	if (i < 0) {
		rt_setup_refuse(p, m->ring_id, false, "no transport '%s' on this host",
				m->transport);
		return;
	}
	/*
	 * The listener end of a data link is up at link_accepted, which for verbs comes at
	 * the connect request, before the connector's link_connected: a sender that
	 * accepted the link may ask before this end (the connector) has heard that it is
	 * up. The link exists and accepts rings and Head writes (they wait for it), so a
	 * connecting link is enough; a refusal here would leave the topic unsent.
	 *
	 * The other way round, a sender that connected sends its set-up on the control
	 * session as soon as its connect completes; this end may read that before it
	 * accepts the data link (two sockets, no order between them). The set-up then
	 * waits for the link it names (rt_run_deferred), and is dropped with it.
	 */
	if (p->links[i].state == LINK_OFFERED) {
		defer_setup(p, i, m);
		return;
	}
	if (p->links[i].state != LINK_UP && p->links[i].state != LINK_CONNECTING) {
		rt_setup_refuse(p, m->ring_id, false, "no %s data link", p->rt->tr[i].name);
		return;
	}
	if (p->in[m->ring_id])
		rt_in_teardown(p->in[m->ring_id]); /* the sender re-uses an id it gave up */
	/* First arrival: the topic is created here if nobody used it yet. */
	e = rgapsd_topic_get(p->rt->d, m->topic, &t, err, sizeof(err));
	if (e) {
		rt_setup_refuse(p, m->ring_id, false, "topic '%s': %s", m->topic, err);
		return;
	}
	if (!same_stages(t, m)) {
		char mine[RGAPS_CFG_MAX_STAGES * RGAPS_CFG_NAME_MAX], theirs[sizeof(mine)];

		rt_setup_refuse(p, m->ring_id, false,
				"topic '%s': the sender runs the stages [%s], this host [%s]",
				m->topic, stage_list(theirs, sizeof(theirs), m->stages, m->nstages),
				stage_list(mine, sizeof(mine), t->cfg.stages, t->cfg.nstages));
		return;
	}
	src = rt_source_of(p->rt, m->topic, origin, true);
	if (!src) {
		rt_setup_refuse(p, m->ring_id, false, "out of memory");
		return;
	}
	/* One ring per source: the one it came on so far goes (its sender stops). */
	if (src->in)
		rt_in_leave(src->in, "another host sends this topic here now");
	r.desc_len = sizeof(r.desc);
	in = in_create(p, t, src, i, m, r.desc, &r.desc_len);
	if (!in)
		return;
	p->in[in->id] = in;
	src->in = in;
	in->epoch = m->epoch;
	in->sender_resends = m->resend > 0;
	if (src->seen && src->epoch == m->epoch) { /* the same topic of the origin: go on */
		in->have_next = in->have_told = true;
		in->next_msg_seq = in->told_next = src->next;
		/* What it has not delivered, it sends again from there (resend_window). */
		r.has_next = src->next <= RT_SEQ_MAX;
		r.next = src->next;
	} else {
		if (src->seen && src->owed) {
			/* Its daemon restarted: what it was to send again is gone. */
			in->pending_gap = src->owed;
			if (loss_flush(in))
				rgaps_warn("topic '%s': %s restarted: %llu messages lost", m->topic,
					   origin, (unsigned long long)src->owed);
			in->pending_gap = 0;
		}
		/* A first ring (or a restarted sender): every message from `from` on is ours,
		 * those it has already, it sends again (a tree's late ring: first_from). */
		in->have_next = in->have_told = m->has_from;
		in->next_msg_seq = in->told_next = in->pending_next = m->from;
		r.has_next = m->has_from && m->from <= RT_SEQ_MAX;
		r.next = m->from;
	}
	r.ring_size = in->size;
	rt_peer_send(p, &r);
	rgaps_info("topic '%s': ring %u from %s ready (%s, %llu bytes)", m->topic, in->id,
		   rgapsd_peer_name(p->peer), p->rt->tr[i].name, (unsigned long long)in->size);
}

void rt_on_topic_teardown(struct rt_peer *p, const struct rt_wire_msg *m)
{
	struct rt_in *in = p->in[m->ring_id];

	for (int i = 0; i < p->rt->ntr; i++) { /* given up before its data link came */
		struct rt_deferred *x, *next;

		for (x = STAILQ_FIRST(&p->deferred[i]); x; x = next) {
			next = STAILQ_NEXT(x, link);
			if (x->m.ring_id == m->ring_id) {
				STAILQ_REMOVE(&p->deferred[i], x, rt_deferred, link);
				p->ndeferred[i]--;
				free(x);
			}
		}
	}
	if (!in)
		return;
	if (!m->moved && in->src) {
		/* The sender stopped on purpose (nobody here subscribes any more): what it
		 * publishes from now on is lost to no one, so a later ring counts no gap. */
		in->have_told = false;
		in->src->seen = false; /* forget the source's sequence */
		in->src->owed = 0;
	}
	/* Moved: another host of the tree sends the topic here now and goes on from
	 * where this ring stopped (the ring's end keeps the sequence, as for a flap). */
	rt_in_teardown(in);
}

void rt_in_leave(struct rt_in *in, const char *why)
{
	struct rt_wire_msg m = { .type = RT_MSG_TOPIC_LEAVE, .ring_id = in->id };

	snprintf(m.reason, sizeof(m.reason), "%s", why);
	rgaps_info("topic '%s': ring %u from %s left: %s", in->topic->cfg.name, in->id,
		   rgapsd_peer_name(in->p->peer), why);
	rt_peer_send(in->p, &m);
	rt_in_teardown(in);
}

void rt_rec_hold(struct rt_rec *r)
{
	if (!r->holds++)
		r->in->held++;
}

void rt_rec_put(struct rt_rec *r)
{
	struct rt_in *in = r->in;

	rgaps_require(r->holds > 0);
	if (--r->holds)
		return;
	in->held--;
	if (!in->dead)
		in_drive(in); /* the head may be given back now */
	else if (!in->held && !in->jobs && !in->ending)
		rt_in_free(in);
}

void *rt_in_send_mr(struct rt_in *in, int tr)
{
	struct rt_transport *t = &in->p->rt->tr[tr];
	int e;

	if (in->send_mr[tr])
		return in->send_mr[tr];
	e = t->lp->ops.transport.reg_local(t->ctx, in->mem, in->size, &in->send_mr[tr]);
	if (e) {
		rgaps_error("topic '%s': %s cannot register the ring from %s to pass it on: %s",
			    in->topic->cfg.name, t->name, rgapsd_peer_name(in->p->peer),
			    strerror(-e));
		in->send_mr[tr] = NULL;
	}
	return in->send_mr[tr];
}
