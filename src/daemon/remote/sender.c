/*
 * The sender half of the remote path (docs/ARCHITECTURE.md sections 1 and 4): for each
 * topic with a local publisher, one out ring per interested peer; each message
 * the forwarder takes is cut into chunks, and every chunk becomes one record
 * written into the peer's receive ring (one transfer per interested host).
 * Also the sender's side of the topic initialisation sequence (topic_setup ->
 * topic_ready / topic_refused, docs/ARCHITECTURE.md section 7) and the publishers that
 * wait for it at attach.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "../../common/log.h"
#include "internal.h"

const char *const rt_out_state_names[OUT_NUM_STATES] = {
	"taken", "queued", "sent", "released", "dropped",
};

const char *const rt_chunk_state_names[CHUNK_NUM_STATES] = {
	"queued", "staging", "staged", "processing", "reserved", "posted", "sent", "dropped",
};

static void out_finish(struct rt_out *o);
static void on_forwarded(struct rt_topic *tt, const struct rt_local_msg *msg);
static void d2h_ready(struct rt_d2h *st);

static void out_set(struct rgapsd_remote *rt, struct rt_omsg *m, enum rt_out_state s)
{
	rt->out_trans[m->state][s]++;
	m->state = s;
}

struct rt_topic *rt_topic_of(struct rgapsd_remote *rt, struct rgapsd_topic *t, bool create)
{
	struct rt_topic *tt;

	SLIST_FOREACH(tt, &rt->topics, link)
		if (tt->t == t)
			return tt;
	if (!create)
		return NULL;
	tt = calloc(1, sizeof(*tt));
	if (!tt)
		return NULL;
	tt->rt = rt;
	tt->t = t;
	SLIST_INIT(&tt->outs);
	SLIST_INIT(&tt->waiters);
	STAILQ_INIT(&tt->d2h_q);
	rt_window_init(&tt->window, rt);
	/* Names this instance of the topic to receivers: another one restarts the sequence. */
	tt->epoch = 1 + (((uint64_t)randombytes_random() << 32 | randombytes_random()) % RT_SEQ_MAX);
	tt->fwd_deliver = on_forwarded;
	tt->d2h_ready = d2h_ready;
	SLIST_INSERT_HEAD(&rt->topics, tt, link);
	return tt;
}

/*
 * Live messages may leave chunks posted from the pool with slow transports
 * (a link that stalls, or died and nobody noticed yet) for at most half the
 * forwarder's holds; the chunks of the next ones wait for their copy in the
 * resend window and go from there, so that the forwarder always has holds to
 * take new messages with (decision 123).
 */
static uint32_t pool_cap(const struct rt_topic *tt)
{
	return tt->t->lim.max_holds > 2 ? tt->t->lim.max_holds / 2 : 1;
}

/*
 * Give m's block back to the topic as soon as nothing will read it any more:
 * its copy in the window is made (every chunk not yet posted goes from there),
 * no transport reads a chunk posted from the pool, and no before-send stage
 * reads the pool.
 */
static void omsg_unpin(struct rt_omsg *m)
{
	if (!m->held || !m->copy || !rt_kept_whole(m->copy) || m->pool_reads || m->works)
		return;
	m->held = false;
	rt_forwarder_release(m->tt, &m->msg);
}

static void omsg_put(struct rgapsd_remote *rt, struct rt_omsg *m)
{
	rgaps_require(m->refs > 0);
	if (--m->refs)
		return;
	if (m->state == OUT_QUEUED)
		out_set(rt, m, m->dropped ? OUT_DROPPED : OUT_SENT);
	if (m->kept)
		m->kept->busy--; /* its copy may be overwritten again */
	if (m->copy)
		m->copy->busy--;
	if (m->relayed) /* its chunks held their records each */
		m->tt->nrelayed--;
	if (m->held)
		rt_forwarder_release(m->tt, &m->msg);
	out_set(rt, m, OUT_RELEASED);
	free(m->works);
	free(m->msg_state);
	free(m);
}

static void chunk_set(struct rgapsd_remote *rt, struct rt_chunk *c, enum rt_chunk_state s)
{
	rt->chunk_trans[c->state][s]++;
	c->state = s;
}

/* A chunk reached SENT or DROPPED (off every queue): drop what it holds. */
static void chunk_end(struct rgapsd_remote *rt, struct rt_chunk *c, enum rt_chunk_state s)
{
	chunk_set(rt, c, s);
	if (!c->m) { /* a loss notice holds nothing */
		free(c);
		return;
	}
	if (s == CHUNK_DROPPED)
		c->m->dropped = true;
	if (c->from_pool) { /* no transport reads the pool for it any more */
		if (!--c->m->pool_reads)
			c->m->tt->pool_msgs--;
		omsg_unpin(c->m);
	}
	if (c->rec)
		rt_rec_put(c->rec); /* a relay's: the record's ring space may be given back */
	if (c->d2h) {
		struct rt_omsg *m = rt_d2h_put(c->d2h);

		if (m)
			omsg_put(rt, m);
	}
	omsg_put(rt, c->m);
	free(c);
}

/*
 * The newest message sequence number of what o carries: assigned by this
 * host's forwarder (its own messages), or heard of by a relay (landed, or
 * told lost, on the ring its source arrives on). false: none yet.
 */
static bool out_last_seq(const struct rt_out *o, uint64_t *seq_p)
{
	bool have = o->src ? o->src->have_seq : o->tt->have_seq;

	*seq_p = o->src ? o->src->last_seq : o->tt->last_seq;
	return have;
}

/*
 * Whether o owes its peer a loss notice: everything queued on it is posted,
 * yet a newer message than the last o carried was assigned or heard of (one
 * dropped for this peer, missed by the forwarder, lost upstream of a relay,
 * or sent while o did not exist).
 */
static bool loss_due(const struct rt_out *o)
{
	uint64_t last;

	return STAILQ_EMPTY(&o->queue) && !o->carrying && out_last_seq(o, &last) &&
	       (!o->told || last > o->told_seq);
}

/* Queue a loss notice on o (docs/PROTOCOL.md section 3): a header-only record. */
static bool loss_queue(struct rt_out *o)
{
	struct rt_chunk *c = calloc(1, sizeof(*c));

	if (!c)
		return false; /* asked again at the next drive */
	c->o = o;
	out_last_seq(o, &c->loss_seq);
	c->flags = RGAPS_RECORD_FIRST | RGAPS_RECORD_LAST | RGAPS_RECORD_LOSS;
	c->state = CHUNK_QUEUED;
	o->p->rt->chunk_trans[CHUNK_QUEUED][CHUNK_QUEUED]++;
	STAILQ_INSERT_TAIL(&o->queue, c, link);
	return true;
}

/* A chunk's D2H copy into its staging slot finished (device pools). */
static void d2h_ready(struct rt_d2h *st)
{
	struct rt_topic *tt = st->tt;
	struct rt_omsg *m;

	if (st->status) {
		/* Ring space may be reserved for it already: restart the sessions, never
		 * send garbage (the chunk stays STAGING until its ring goes). */
		rgaps_error("topic '%s': staging copy failed: %s; restarting its peer sessions",
			    tt->t->cfg.name, strerror(-st->status));
		for (struct rt_out *o = SLIST_FIRST(&tt->outs); o; o = SLIST_NEXT(o, in_topic))
			rgapsd_peer_disconnect(o->p->peer, "local staging copy failed");
	} else {
		for (struct rt_out *o = SLIST_FIRST(&tt->outs); o; o = SLIST_NEXT(o, in_topic))
			rt_out_drive(o);
	}
	m = rt_d2h_put(st); /* the copy's reference */
	if (m)
		omsg_put(tt->rt, m);
}

/*
 * The transport registration of a host pool that records are sent from: each
 * publisher has its own pool, registered on first use and dropped with it
 * (the member_gone hook, remote.c). NULL when the transport refuses (logged).
 */
static void *pool_mr(struct rt_out *o, struct rgapsd_member *src)
{
	struct rt_transport *tr = &o->p->rt->tr[o->tr];
	int r;

	if (src->pool_mr[o->tr])
		return src->pool_mr[o->tr];
	r = tr->lp->ops.transport.reg_local(tr->ctx, src->pool.base, src->pool.size,
					    &src->pool_mr[o->tr]);
	if (r) {
		rgaps_error("topic '%s': %s cannot register the pool of stream %llu: %s",
			    o->tt->t->cfg.name, tr->name, (unsigned long long)src->gen,
			    strerror(-r));
		src->pool_mr[o->tr] = NULL;
	}
	return src->pool_mr[o->tr];
}

_Static_assert(RGAPS_STAGE_TAG_MAX == RGAPS_RECORD_TAG_LEN, "a stage tag fills a record's tag");

/* The stage tag each record of o carries behind its chunk: RGAPS_RECORD_TAG_LEN or 0 bytes. */
static uint32_t record_tag_len(const struct rt_out *o)
{
	return o->tt->stages && o->tt->stages->tag_len ? RGAPS_RECORD_TAG_LEN : 0;
}

/* The tag chunk c carries: a relayed chunk the one it landed with (the origin's stages'). */
static uint32_t chunk_tag_len(const struct rt_out *o, const struct rt_chunk *c)
{
	if (!c->m)
		return 0; /* a loss notice */
	if (c->rec)
		return c->rec->h.flags & RGAPS_RECORD_TAG ? RGAPS_RECORD_TAG_LEN : 0;
	return record_tag_len(o);
}

/* STAGED -> RESERVED: ring space (the Exceed check) and a header slot. -EAGAIN: no room now. */
static int chunk_reserve(struct rt_out *o, struct rt_chunk *c)
{
	struct rgaps_record_hdr *h;
	uint32_t tag = chunk_tag_len(o, c);
	int r;

	if (o->hdr_used == RT_HDR_SLOTS)
		return -EAGAIN; /* resumes on the next record_sent */
	r = rt_ring_sender_reserve(&o->ring, RGAPS_RECORD_HDR + c->len + tag, &c->slot);
	if (r == -EAGAIN) {
		o->ring_stalls++; /* resumes on the next head_update */
		return r;
	}
	if (r) {
		rgaps_error("topic '%s' ring %u to %s: cannot place a %llu-byte record: %s",
			    o->tt->t->cfg.name, o->id, rgapsd_peer_name(o->p->peer),
			    (unsigned long long)c->len, strerror(-r));
		return r;
	}
	c->hdr_slot = (o->hdr_head + o->hdr_used) % RT_HDR_SLOTS;
	h = (struct rgaps_record_hdr *)(o->hdrs + (size_t)c->hdr_slot * RT_HDR_SLOT);
	memset(h, 0, sizeof(*h));
	h->magic = RGAPS_RECORD_MAGIC;
	h->flags = c->flags;
	h->ring_id = o->id;
	h->record_seq = (uint32_t)o->record_seq++;
	o->hdr_used++;
	if (!c->m) { /* a loss notice: no message, no chunk */
		h->msg_seq = c->loss_seq;
		h->ts_ns = rgaps_now_ns(CLOCK_REALTIME);
		return 0;
	}
	h->msg_seq = c->m->msg.fwd_seq;
	h->msg_size = c->m->msg.size;
	h->chunk_off = c->off;
	h->chunk_len = (uint32_t)c->len;
	h->ts_ns = c->m->msg.ts_ns;
	h->origin_stream = (uint32_t)c->m->msg.origin_stream;
	h->origin_seq = c->m->msg.origin_seq;
	if (tag) { /* what the before-send stages carry to the receiver, behind the chunk */
		h->flags |= RGAPS_RECORD_TAG;
		if (c->rec) /* relayed: the tag it landed with, behind its chunk in the ring */
			memcpy((uint8_t *)h + RGAPS_RECORD_HDR,
			       c->rec->in->mem + c->rec->slot.off + RGAPS_RECORD_HDR + c->len,
			       RGAPS_RECORD_TAG_LEN);
		else if (c->m->works)
			memcpy((uint8_t *)h + RGAPS_RECORD_HDR, c->m->works[c->index].tag,
			       RGAPS_RECORD_TAG_LEN);
		else
			memset((uint8_t *)h + RGAPS_RECORD_HDR, 0, RGAPS_RECORD_TAG_LEN);
	}
	return 0;
}

/* RESERVED -> POSTED: hand header and bytes to the transport. -EAGAIN: no send credits. */
static int chunk_post(struct rt_out *o, struct rt_chunk *c)
{
	struct rgapsd_remote *rt = o->p->rt;
	struct rt_transport *tr = &rt->tr[o->tr];
	uint8_t *slot = o->hdrs + (size_t)c->hdr_slot * RT_HDR_SLOT;
	struct rgaps_sg sg[3];
	uint32_t nsg = 2;
	int r;

	sg[0] = (struct rgaps_sg){ .mr = o->hdrs_mr, .addr = slot, .len = RGAPS_RECORD_HDR };
	if (!c->m) /* a loss notice: the header alone */
		nsg = 1;
	else if (c->rec) /* relayed: straight from the ring it landed in (cut-through) */
		sg[1] = (struct rgaps_sg){ .mr = rt_in_send_mr(c->rec->in, o->tr),
					   .addr = c->rec->in->mem + c->rec->slot.off +
						   RGAPS_RECORD_HDR,
					   .len = c->len };
	else if (c->m->kept) /* sent again, from the resend window */
		sg[1] = (struct rgaps_sg){ .mr = rt_window_mr(c->m->kept->win, o->tr),
					   .addr = (void *)(c->m->msg.data + c->off),
					   .len = c->len };
	else if (c->d2h)
		sg[1] = (struct rgaps_sg){ .mr = o->tt->stg_mr[o->tr],
					   .addr = o->tt->stg + c->d2h->slot * o->tt->stg_slot,
					   .len = c->len };
	else if (c->m->copy && rt_kept_whole(c->m->copy)) /* its copy is made: the pool may go */
		sg[1] = (struct rgaps_sg){ .mr = rt_window_mr(c->m->copy->win, o->tr),
					   .addr = c->m->copy->win->mem + c->m->copy->off + c->off,
					   .len = c->len };
	else
		sg[1] = (struct rgaps_sg){ .mr = pool_mr(o, c->m->msg.src),
					   .addr = (void *)(c->m->msg.data + c->off),
					   .len = c->len };
	if (nsg > 1 && !sg[1].mr)
		return -EINVAL; /* logged by pool_mr: the session restarts */
	if (((struct rgaps_record_hdr *)slot)->flags & RGAPS_RECORD_TAG)
		sg[nsg++] = (struct rgaps_sg){ .mr = o->hdrs_mr,
					       .addr = slot + RGAPS_RECORD_HDR,
					       .len = RGAPS_RECORD_TAG_LEN };
	r = tr->lp->ops.transport.post_record(tr->ctx, o->p->links[o->tr].link, o->id, c->slot.off,
					      sg, nsg, (uint64_t)(uintptr_t)c);
	if (r == 0 && c->m && !c->m->kept && !c->d2h && !c->rec) {
		if (c->m->copy && rt_kept_whole(c->m->copy)) {
			o->tt->from_copy++;
		} else {
			c->from_pool = true;
			if (!c->m->pool_reads++)
				o->tt->pool_msgs++;
		}
	}
	if (r == -EAGAIN)
		o->credit_stalls++; /* resumes on the next record_sent */
	else if (r && r != -ENOTCONN)
		/* The transport refused what we asked: our state is wrong, start over. */
		rgaps_error("topic '%s' ring %u to %s: the transport refused a record: %s; "
			    "restarting the session",
			    o->tt->t->cfg.name, o->id, rgapsd_peer_name(o->p->peer), strerror(-r));
	return r;
}

/* Chunk k's before-send stages are done (on the loop): its chunks on every ring go on. */
static void swork_sent_done(struct rt_swork *sw)
{
	struct rt_omsg *m = sw->arg, *sm = NULL; /* the chunks may be gone: the work held m */
	struct rt_topic *tt = m->tt;

	if (sw->result != RGAPS_STAGE_CONTINUE)
		rgaps_warn("topic '%s': message %llu not sent: %s", tt->t->cfg.name,
			   (unsigned long long)m->msg.seq, sw->why);
	for (struct rt_out *o = SLIST_FIRST(&tt->outs); o; o = SLIST_NEXT(o, in_topic))
		rt_out_drive(o);
	if (sw->arg2)
		sm = rt_d2h_put(sw->arg2);
	if (sm)
		omsg_put(tt->rt, sm);
	omsg_put(tt->rt, m); /* the work's own references */
}

/*
 * Start chunk c's before-send stages if they may run now: the chunks of a
 * message pass one at a time (their message state is shared), so chunk k
 * waits until k - 1's are done. The work holds the message and the staging
 * slot it reads until it is done, whatever becomes of the rings.
 */
static void swork_sent_start(struct rt_out *o, struct rt_chunk *c)
{
	struct rt_omsg *m = c->m;
	struct rt_swork *sw = &m->works[c->index];

	if (sw->phase != SWORK_IDLE || (c->index > 0 && m->works[c->index - 1].phase != SWORK_DONE))
		return;
	sw->st = o->tt->stages;
	sw->w.point = RGAPS_STAGE_BEFORE_SEND;
	sw->w.mem_kind = RGAPS_MEM_HOST; /* the host pool, or the chunk's staging slot */
	sw->w.msg_seq = m->msg.seq;
	sw->w.msg_size = m->msg.size;
	sw->w.chunk_off = c->off;
	sw->w.data = c->d2h ? o->tt->stg + c->d2h->slot * o->tt->stg_slot : m->msg.data + c->off;
	sw->w.len = c->len;
	sw->msg_state = m->msg_state;
	sw->done = swork_sent_done;
	sw->arg = m;
	sw->arg2 = c->d2h;
	m->refs++;
	if (c->d2h)
		c->d2h->refs++;
	rt_swork_start(o->p->rt, sw);
}

/*
 * The head chunk's stages refused its message. Nothing of it left yet: drop it
 * from this ring (counted, the receiver sees the gap). Part of it sent: this
 * ring cannot finish the message; restart the session, as for a failed copy.
 */
static void chunk_stage_failed(struct rt_out *o, struct rt_chunk *c)
{
	struct rgapsd_remote *rt = o->p->rt;
	struct rt_omsg *m = c->m;

	if (c->index > 0) {
		rgaps_error("topic '%s': a stage refused message %llu after part of it was sent "
			    "to %s; restarting the session",
			    o->tt->t->cfg.name, (unsigned long long)m->msg.seq,
			    rgapsd_peer_name(o->p->peer));
		rgapsd_peer_disconnect(o->p->peer, "a before-send stage failed in mid-message");
		return;
	}
	while ((c = STAILQ_FIRST(&o->queue)) && c->m == m) {
		STAILQ_REMOVE_HEAD(&o->queue, link);
		chunk_end(rt, c, CHUNK_DROPPED);
	}
	o->dropped_msgs++;
	o->tt->stage_drops++;
}

/* Reserve ring space for the head chunk c: RESERVED, or *stop, or dropped (NULL back). */
static struct rt_chunk *chunk_to_reserved(struct rt_out *o, struct rt_chunk *c, bool *stop)
{
	struct rgapsd_remote *rt = o->p->rt;
	int r = chunk_reserve(o, c);

	if (r == 0) {
		chunk_set(rt, c, CHUNK_RESERVED);
		return c;
	}
	if (r == -EAGAIN) {
		*stop = true;
		return c;
	}
	STAILQ_REMOVE_HEAD(&o->queue, link);
	o->dropped_msgs++;
	chunk_end(rt, c, CHUNK_DROPPED);
	return NULL;
}

/*
 * Whether c's bytes come from a copy: its D2H staging copy (device pools), or
 * the copy into the resend window of a message sent again, still being made.
 */
static bool chunk_copy_due(const struct rt_chunk *c)
{
	return c->d2h || (c->m && c->m->kept && !rt_kept_has(c->m->kept, c->off, c->len));
}

/*
 * Whether c, ready to post, waits for its message's copy in the window to be
 * made rather than pin the pool: as many live messages as pool_cap() have
 * chunks posted from the pool already (on_kept drives it on).
 */
static bool chunk_waits_for_copy(const struct rt_chunk *c)
{
	const struct rt_omsg *m = c->m;

	return m && !m->kept && !c->d2h && m->copy && !rt_kept_whole(m->copy) && !m->pool_reads &&
	       m->tt->pool_msgs >= pool_cap(m->tt);
}

/*
 * The sender's driver: move the chunks of one ring along their states, in
 * queue order (ring space is taken in order, so a chunk that cannot move holds
 * the ones behind it). Called whenever something a chunk waits for happened:
 * a new message, a staging copy done, a Head update, a record_sent.
 */
void rt_out_drive(struct rt_out *o)
{
	struct rgapsd_remote *rt = o->p->rt;
	struct rt_link *l = &o->p->links[o->tr];
	bool posted = false, stop = false;
	struct rt_chunk *c;

	if (o->state != OUT_RING_READY || l->state != LINK_UP)
		return;
again:
	if (loss_due(o))
		loss_queue(o);
	while (!stop && (c = STAILQ_FIRST(&o->queue))) {
		enum rt_chunk_state prev;
		int r;

		do {
			prev = c->state;
			switch (c->state) {
			case CHUNK_QUEUED:
				chunk_set(rt, c, chunk_copy_due(c) ? CHUNK_STAGING : CHUNK_STAGED);
				break;
			case CHUNK_STAGING:
				if (c->d2h ? c->d2h->ready && !c->d2h->status :
					     rt_kept_has(c->m->kept, c->off, c->len))
					chunk_set(rt, c, CHUNK_STAGED);
				else
					stop = true; /* resumes in d2h_ready or on_kept */
				break;
			case CHUNK_STAGED:
				if (c->m && c->m->works) /* before-send stages first */
					chunk_set(rt, c, CHUNK_PROCESSING);
				else
					c = chunk_to_reserved(o, c, &stop);
				break;
			case CHUNK_PROCESSING: {
				struct rt_swork *sw = &c->m->works[c->index];

				swork_sent_start(o, c);
				if (sw->phase != SWORK_DONE) {
					stop = true; /* resumes in swork_sent_done */
				} else if (sw->result != RGAPS_STAGE_CONTINUE) {
					chunk_stage_failed(o, c);
					c = NULL;
					stop = o->state !=
					       OUT_RING_READY; /* the session is going down */
				} else {
					c = chunk_to_reserved(o, c, &stop);
				}
				break;
			}
			case CHUNK_RESERVED:
				if (chunk_waits_for_copy(c)) {
					stop = true; /* resumes in on_kept */
					break;
				}
				r = chunk_post(o, c);
				if (r == 0) {
					STAILQ_REMOVE_HEAD(&o->queue, link);
					STAILQ_INSERT_TAIL(&o->inflight, c, link);
					chunk_set(rt, c, CHUNK_POSTED);
					o->records++;
					o->bytes += c->len;
					posted = true;
					if (c->flags & RGAPS_RECORD_LAST) { /* all of it is on its way */
						o->told = true;
						o->told_seq = c->m ? c->m->msg.fwd_seq : c->loss_seq;
						o->loss_notices += !c->m;
					}
				} else {
					stop = true; /* -ENOTCONN: link_down follows */
					if (r != -EAGAIN && r != -ENOTCONN)
						rgapsd_peer_disconnect(
							o->p->peer, "transport refused a record");
				}
				break;
			case CHUNK_POSTED:  /* in o->inflight: record_sent moves it on */
			case CHUNK_SENT:    /* final */
			case CHUNK_DROPPED: /* final */
			case CHUNK_NUM_STATES:
				break;
			}
		} while (c && !stop && c->state != prev && c->state != CHUNK_POSTED);
	}
	/* A message dropped from the queue just now leaves a loss to tell. */
	if (!stop && o->state == OUT_RING_READY && loss_due(o))
		goto again;
	if (posted)
		rt->tr[o->tr].lp->ops.transport.flush(rt->tr[o->tr].ctx, l->link);
}

/*
 * Retire an out ring. Records already posted may still be read by the NIC from
 * the pool: while the link is up, the ring waits in CLOSING until their
 * completions came back, and only then is detached and its holds released.
 * When the link is gone, the transport has completed or failed every record.
 */
void rt_out_free(struct rt_out *o, bool tell_peer, bool moved)
{
	struct rgapsd_remote *rt = o->p->rt;
	struct rt_chunk *c;

	if (o->state == OUT_RING_CLOSING) {
		/* Retired already, waiting for its records in flight (still in p->out, no
		 * longer in its list): once the link is gone nothing will come back for them. */
		if (o->p->links[o->tr].state != LINK_UP)
			out_finish(o);
		return;
	}
	if (o->src)
		SLIST_REMOVE(&o->src->outs, o, rt_out, in_topic);
	else
		SLIST_REMOVE(&o->tt->outs, o, rt_out, in_topic);
	if (o->carrying) {
		rt_omsg_put(o->carrying);
		o->carrying = NULL;
	}
	while ((c = STAILQ_FIRST(&o->queue))) {
		STAILQ_REMOVE_HEAD(&o->queue, link);
		chunk_end(rt, c, CHUNK_DROPPED);
	}
	o->tell_peer = tell_peer;
	o->tell_moved = moved;
	o->state = OUT_RING_CLOSING;
	rt_waiters_check(o->tt, false);
	if (!STAILQ_EMPTY(&o->inflight) && o->p->links[o->tr].state == LINK_UP)
		return; /* rt_on_record_sent finishes it */
	out_finish(o);
}

static void out_finish(struct rt_out *o)
{
	struct rgapsd_remote *rt = o->p->rt;
	struct rt_transport *tr = &rt->tr[o->tr];
	struct rt_chunk *c;
	bool tell_peer = o->tell_peer;
	bool moved = o->tell_moved;

	o->p->out[o->id] = NULL;
	while ((c = STAILQ_FIRST(&o->inflight))) {
		STAILQ_REMOVE_HEAD(&o->inflight, link);
		chunk_end(rt, c, CHUNK_DROPPED);
	}
	if (o->p->links[o->tr].state == LINK_UP) {
		tr->lp->ops.transport.ring_detach(tr->ctx, o->p->links[o->tr].link, o->id);
		if (tell_peer) {
			struct rt_wire_msg m = { .type = RT_MSG_TOPIC_TEARDOWN,
						 .ring_id = o->id,
						 .moved = moved };

			rt_peer_send(o->p, &m);
		}
	}
	if (o->hdrs_mr)
		tr->lp->ops.transport.dereg_local(tr->ctx, o->hdrs_mr);
	o->tt->nrings--;
	free(o->hdrs);
	free(o);
}

/*
 * A free ring id towards p. Each direction of a link owns half of the ring ids
 * (the session initiator sends on 0..63, the other side on 64..127), so a ring
 * id names one ring on a link whichever end speaks of it; ids go round-robin
 * so a torn-down id is not reused while a late Head update for it may still be
 * on the wire. RT_RINGS: none left.
 */
static uint32_t ring_id_pick(struct rt_peer *p)
{
	uint32_t base = p->initiator ? 0 : RT_RINGS / 2;

	for (uint32_t k = 0; k < RT_RINGS / 2; k++) {
		uint32_t id = base + (p->next_ring + k) % (RT_RINGS / 2);

		if (!p->out[id]) {
			p->next_ring = (id - base + 1) % (RT_RINGS / 2);
			return id;
		}
	}
	return RT_RINGS;
}

/* What sending this host's own messages of tt over tr needs first: staging, stages, forwarder. */
static int origin_prepare(struct rt_topic *tt, int tr_idx)
{
	struct rgapsd_remote *rt = tt->rt;
	int r;

	if (tt->t->lim.mem_kind != RGAPS_MEM_HOST) {
		r = rt_staging_setup(tt, tr_idx);
		if (r) {
			rgaps_error("topic '%s': %s cannot use a staging buffer: %s",
				    tt->t->cfg.name, rt->tr[tr_idx].name, strerror(-r));
			return r;
		}
	}
	if (!tt->stages) {
		char err[256];

		tt->stages = rt_stages_of(rt, tt->t, err, sizeof(err));
		if (!tt->stages) {
			rgaps_error("topic '%s': not sent to peers: %s", tt->t->cfg.name, err);
			return -EINVAL;
		}
	}
	return rt_forwarder_start(tt);
}

/*
 * Where a peer's first ring of the topic starts (topic_setup's from): with the
 * oldest message of the resend window w that began to be kept here after this
 * host heard that the peer subscribes, else with live, the first one still to
 * come. A ring that a tree set up late (a relay's, after its first messages
 * passed; the origin's, when the tree became a star) so brings the peer what
 * it subscribed for; a peer that had a ring of the source before asks from
 * where it stands instead (topic_ready's next).
 */
static uint64_t first_from(const struct rt_out *o, const struct rt_window *w, uint64_t live)
{
	uint64_t since = rt_peer_learned_ns(o->p, o->tt->t->cfg.name);
	const struct rt_kept *k;

	TAILQ_FOREACH(k, &w->kept, link) {
		if (k->seq >= live)
			break;
		if (!k->dropped && k->kept_ns >= since)
			return k->seq;
	}
	return live;
}

/* The topic_setup of ring o (docs/PROTOCOL.md section 4): whose messages, from where on. */
static void setup_fill(const struct rt_out *o, struct rt_wire_msg *m)
{
	struct rt_topic *tt = o->tt;
	const struct rt_source *src = o->src;

	snprintf(m->topic, sizeof(m->topic), "%s", tt->t->cfg.name);
	m->ring_id = o->id;
	snprintf(m->transport, sizeof(m->transport), "%s", o->p->rt->tr[o->tr].name);
	m->nstages = tt->t->cfg.nstages;
	memcpy(m->stages, tt->t->cfg.stages, sizeof(m->stages));
	rt_relay_mode_name(&o->mode, m->relay, sizeof(m->relay));
	if (src) { /* a relay passes on what its origin sent, as it was cut */
		snprintf(m->origin, sizeof(m->origin), "%s", src->origin);
		m->chunk_size = src->chunk_size;
		m->epoch = src->in ? src->in->epoch : src->epoch; /* the origin's topic's */
		if (src->have_seq) {
			m->from = first_from(o, &src->window, o->live_from);
			m->has_from = true;
		} else if (src->in && src->in->have_told) { /* nothing landed: where its ring starts */
			m->from = src->in->told_next;
			m->has_from = true;
		}
		m->has_from = m->has_from && m->from <= RT_SEQ_MAX;
		if (tt->t->lim.mem_kind == RGAPS_MEM_HOST && !src->window.failed)
			m->resend = tt->t->cfg.resend_window;
		return;
	}
	snprintf(m->origin, sizeof(m->origin), "%s", o->p->rt->d->cfg.listen);
	m->chunk_size = tt->t->cfg.chunk_size;
	m->epoch = tt->epoch;
	/* What the forwarder takes from now on is meant for this peer: owed, sent or told lost;
	 * a first ring starts earlier, with what was kept since the peer subscribed. */
	m->from = first_from(o, &tt->window, tt->have_seq ? tt->last_seq + 1 : 0);
	m->has_from = m->from <= RT_SEQ_MAX;
	if (tt->t->lim.mem_kind == RGAPS_MEM_HOST && !tt->window.failed)
		m->resend = tt->t->cfg.resend_window;
}

void rt_out_create(struct rt_peer *p, struct rt_topic *tt, int tr_idx, struct rt_source *src,
		   const struct rt_relay_mode *mode)
{
	struct rgapsd_remote *rt = p->rt;
	struct rt_transport *tr = &rt->tr[tr_idx];
	struct rt_link *l = &p->links[tr_idx];
	struct rt_wire_msg m = { .type = RT_MSG_TOPIC_SETUP };
	uint32_t id = ring_id_pick(p);
	char name[RT_RELAY_NAME_MAX];
	struct rt_out *o;
	int r;

	if (id == RT_RINGS) {
		rgaps_error(
			"peer %s: all %d rings of this direction in use; topic '%s' not sent there",
			rgapsd_peer_name(p->peer), RT_RINGS / 2, tt->t->cfg.name);
		return;
	}
	if (!src && origin_prepare(tt, tr_idx))
		return;
	o = calloc(1, sizeof(*o));
	if (!o)
		return;
	o->p = p;
	o->tt = tt;
	o->src = src;
	o->mode = *mode;
	o->id = id;
	o->tr = tr_idx;
	o->state = OUT_RING_PREPARING;
	STAILQ_INIT(&o->queue);
	STAILQ_INIT(&o->inflight);
	/* A relay's ring starts with the next message to land: none begins in its middle. */
	o->live_from = src && src->have_seq ? src->last_seq + 1 : 0;
	o->hdrs = aligned_alloc(4096, (size_t)RT_HDR_SLOTS * RT_HDR_SLOT);
	if (!o->hdrs ||
	    tr->lp->ops.transport.reg_local(tr->ctx, o->hdrs, (uint64_t)RT_HDR_SLOTS * RT_HDR_SLOT,
					    &o->hdrs_mr) != 0) {
		rgaps_error("topic '%s': cannot set up header buffers", tt->t->cfg.name);
		free(o->hdrs);
		free(o);
		return;
	}
	m.desc_len = sizeof(m.desc);
	r = tr->lp->ops.transport.sender_ring_prepare(tr->ctx, l->link, id, m.desc, &m.desc_len);
	if (r) {
		rgaps_error("topic '%s': %s ring prepare failed: %s", tt->t->cfg.name,
			    rt->tr[tr_idx].name, strerror(-r));
		tr->lp->ops.transport.dereg_local(tr->ctx, o->hdrs_mr);
		free(o->hdrs);
		free(o);
		return;
	}
	p->out[id] = o;
	tt->nrings++;
	if (src)
		SLIST_INSERT_HEAD(&src->outs, o, in_topic);
	else
		SLIST_INSERT_HEAD(&tt->outs, o, in_topic);
	setup_fill(o, &m);
	rt_peer_send(p, &m);
	rgaps_info("topic '%s': setting up ring %u to %s over %s (%s%s%s)", tt->t->cfg.name, id,
		   rgapsd_peer_name(p->peer), rt->tr[tr_idx].name,
		   rt_relay_mode_name(mode, name, sizeof(name)), src ? ", passing on from " : "",
		   src ? src->origin : "");
}

/* One D2H staging copy per chunk of m, shared by every ring that sends the chunk. */
static struct rt_d2h **d2h_new(struct rt_topic *tt, struct rt_omsg *m, uint64_t chunk,
			       uint64_t *n_p)
{
	uint64_t n = (m->msg.size + chunk - 1) / chunk;
	struct rt_d2h **st = calloc(n, sizeof(*st));

	for (uint64_t k = 0; st && k < n; k++) {
		st[k] = calloc(1, sizeof(**st));
		if (!st[k]) {
			while (k--)
				free(st[k]);
			free(st);
			return NULL;
		}
		st[k]->tt = tt;
		st[k]->m = m;
		st[k]->off = k * chunk;
		st[k]->len = RGAPS_MIN(chunk, m->msg.size - k * chunk);
		st[k]->slot = UINT32_MAX;
	}
	*n_p = n;
	return st;
}

/*
 * Cut m into chunks queued on ring o (QUEUED), all of them or none: a message
 * cut short would break the receiver's landing order. false: out of memory.
 */
static bool msg_queue_on(struct rt_out *o, struct rt_omsg *m, uint64_t chunk, struct rt_d2h **d2h)
{
	struct rgapsd_remote *rt = o->p->rt;
	struct rt_chunk_q q = STAILQ_HEAD_INITIALIZER(q);
	struct rt_chunk *c;

	for (uint64_t off = 0, k = 0; off < m->msg.size; off += chunk, k++) {
		c = calloc(1, sizeof(*c));
		if (!c) {
			while ((c = STAILQ_FIRST(&q))) {
				STAILQ_REMOVE_HEAD(&q, link);
				free(c);
			}
			return false;
		}
		c->d2h = d2h ? d2h[k] : NULL;
		c->index = (uint32_t)k;
		c->m = m;
		c->o = o;
		c->off = off;
		c->len = RGAPS_MIN(chunk, m->msg.size - off);
		c->flags = (off == 0 ? RGAPS_RECORD_FIRST : 0) |
			   (off + c->len == m->msg.size ? RGAPS_RECORD_LAST : 0);
		c->state = CHUNK_QUEUED;
		STAILQ_INSERT_TAIL(&q, c, link);
	}
	STAILQ_FOREACH(c, &q, link) {
		rt->chunk_trans[CHUNK_QUEUED][CHUNK_QUEUED]++;
		m->refs++;
		if (c->d2h)
			c->d2h->refs++;
	}
	STAILQ_CONCAT(&o->queue, &q);
	if (!o->queued_any) {
		o->queued_any = true;
		o->first_seq = m->msg.fwd_seq;
	}
	return true;
}

/* A message on its way: one reference (its caller's), and its before-send stages' state. */
static struct rt_omsg *omsg_new(struct rt_topic *tt, const struct rt_local_msg *msg,
				uint64_t chunk)
{
	struct rt_omsg *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->tt = tt;
	m->msg = *msg;
	m->refs = 1;
	m->held = true; /* a live message: the forwarder's hold (resend_queue's: none) */
	m->state = OUT_TAKEN;
	tt->rt->out_trans[OUT_TAKEN][OUT_TAKEN]++;
	if (tt->stages && rt_stages_at(tt->stages, RGAPS_STAGE_BEFORE_SEND) && msg->size) {
		m->nchunks = (uint32_t)((msg->size + chunk - 1) / chunk);
		m->works = calloc(m->nchunks, sizeof(*m->works));
		m->msg_state = calloc(1, tt->stages->msg_state_size + 1);
		if (!m->works || !m->msg_state)
			m->dropped = true; /* the caller drops it */
	}
	return m;
}

/*
 * A new ring to a peer that had one before, a relay's ring to a child that
 * comes to it from another parent, or a first ring that starts before what it
 * carries live (first_from): send again, from the resend window, the
 * kept messages from the first it has not received (the receiver's next, in
 * topic_ready) up to the first that the ring carries as it goes (queued on it
 * since, or, for a relay's, landing from now on). A relay's may still be
 * landing: its chunks wait until their bytes are kept. Those that fell out of
 * the window show as a jump of the sequence, or in a loss notice.
 */
static void resend_queue(struct rt_out *o, const struct rt_wire_msg *ready)
{
	struct rt_topic *tt = o->tt;
	struct rgapsd_remote *rt = tt->rt;
	struct rt_window *w = o->src ? &o->src->window : &tt->window;
	uint64_t chunk = o->src		     ? o->src->chunk_size :
			 tt->t->cfg.chunking ? tt->t->cfg.chunk_size :
					       UINT64_MAX;
	uint64_t upto = o->queued_any ? o->first_seq : o->src ? o->live_from : UINT64_MAX;
	struct rt_chunk_q later = STAILQ_HEAD_INITIALIZER(later);
	uint64_t resent = 0;
	struct rt_kept *k;

	if (!ready->has_next || TAILQ_EMPTY(&w->kept))
		return;
	STAILQ_CONCAT(&later, &o->queue); /* what was queued meanwhile goes after */
	TAILQ_FOREACH(k, &w->kept, link) {
		struct rt_local_msg msg = { .seq = k->seq,
					    .size = k->size,
					    .ts_ns = k->ts_ns,
					    .origin_stream = k->origin_stream,
					    .origin_seq = k->origin_seq,
					    .data = w->mem + k->off,
					    .fwd_seq = k->seq,
					    .token = UINT32_MAX };
		uint64_t c = RGAPS_MIN(chunk, k->size);
		struct rt_omsg *m;

		if (k->seq < ready->next || k->dropped)
			continue;
		if (k->seq >= upto)
			break;
		if (RGAPS_RECORD_HDR + c + record_tag_len(o) > o->geom.max_record)
			continue; /* whole-message mode, over half the ring: a loss */
		m = omsg_new(tt, &msg, c);
		if (!m)
			break;
		m->held = false;
		m->kept = k;
		k->busy++;
		if (m->dropped || !msg_queue_on(o, m, c, NULL)) {
			m->dropped = true;
			omsg_put(rt, m);
			break;
		}
		out_set(rt, m, OUT_QUEUED);
		omsg_put(rt, m); /* its chunks hold it now */
		resent++;
	}
	STAILQ_CONCAT(&o->queue, &later);
	o->resent += resent;
	if (o->src)
		o->src->resent += resent;
	else
		tt->resent += resent;
	if (resent)
		rgaps_info("topic '%s': %llu messages sent again to %s, from %llu on",
			   tt->t->cfg.name, (unsigned long long)resent,
			   rgapsd_peer_name(o->p->peer), (unsigned long long)ready->next);
}

/*
 * The copy of m into the resend window is made (on the loop): chunks sent
 * again from it, and m's own chunks not yet posted, may go from it, and m's
 * hold goes as soon as no transport reads the pool for it.
 */
static void on_kept(void *arg)
{
	struct rt_omsg *m = arg;
	struct rt_topic *tt = m->tt;

	omsg_unpin(m);
	for (struct rt_out *o = SLIST_FIRST(&tt->outs); o; o = SLIST_NEXT(o, in_topic))
		rt_out_drive(o);
	omsg_put(tt->rt, m);
}

/*
 * A relay's ring became ready: the receiver has every message below its next
 * (it came from another parent before); those need not be sent again, nor
 * told lost.
 */
static void relay_ready(struct rt_out *o, const struct rt_wire_msg *ready)
{
	if (!ready->has_next || !ready->next)
		return;
	o->skip_below = ready->next;
	if (!o->told || o->told_seq < ready->next - 1) {
		o->told = true;
		o->told_seq = ready->next - 1;
	}
}

struct rt_omsg *rt_omsg_relayed(struct rt_topic *tt, const struct rgaps_record_hdr *h)
{
	struct rt_local_msg msg = { .seq = h->msg_seq,
				    .size = h->msg_size,
				    .ts_ns = h->ts_ns,
				    .origin_stream = h->origin_stream,
				    .origin_seq = h->origin_seq,
				    .fwd_seq = h->msg_seq,
				    .remote_origin = true,
				    .token = UINT32_MAX };
	struct rt_omsg *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->tt = tt;
	m->msg = msg;
	m->refs = 1;
	m->relayed = true; /* no stages before sending: the origin's ran, their tags pass on */
	tt->nrelayed++;
	m->state = OUT_TAKEN;
	tt->rt->out_trans[OUT_TAKEN][OUT_TAKEN]++;
	out_set(tt->rt, m, OUT_QUEUED);
	return m;
}

void rt_omsg_put(struct rt_omsg *m)
{
	omsg_put(m->tt->rt, m);
}

bool rt_out_queue_record(struct rt_out *o, struct rt_omsg *m, struct rt_rec *r)
{
	struct rt_chunk *c = calloc(1, sizeof(*c));

	if (!c)
		return false;
	c->m = m;
	c->o = o;
	c->rec = r;
	c->off = r->h.chunk_off;
	c->len = r->h.chunk_len;
	c->flags = r->h.flags & (RGAPS_RECORD_FIRST | RGAPS_RECORD_LAST);
	c->state = CHUNK_QUEUED;
	o->p->rt->chunk_trans[CHUNK_QUEUED][CHUNK_QUEUED]++;
	m->refs++;
	rt_rec_hold(r);
	STAILQ_INSERT_TAIL(&o->queue, c, link);
	if (!o->queued_any) {
		o->queued_any = true;
		o->first_seq = m->msg.fwd_seq;
	}
	return true;
}

/* A locally published message reached the loop from the forwarder thread. */
static void on_forwarded(struct rt_topic *tt, const struct rt_local_msg *msg)
{
	struct rgapsd_remote *rt = tt->rt;
	uint64_t chunk = tt->t->cfg.chunking ? tt->t->cfg.chunk_size : msg->size;
	struct rt_d2h **d2h = NULL;
	uint64_t nd2h = 0;
	uint32_t rings = 0;
	struct rt_omsg *m;

	if (msg->src) {
		/* A moving mean of the sizes ("auto" decides on it): the last 16 or so weigh. */
		tt->size_mean = tt->size_mean ? tt->size_mean - tt->size_mean / 16 + msg->size / 16 :
						msg->size;
		if (tt->mode_size && rt->relay_size_moved &&
		    (tt->size_mean > 4 * tt->mode_size || 4 * tt->size_mean < tt->mode_size))
			rt->relay_size_moved(tt); /* before this message: it goes on the new rings */
	}
	/* Every peer owes a word about messages up to this one (sent, or a loss notice). */
	tt->have_seq = true;
	tt->last_seq = msg->fwd_seq;
	if (!msg->src) { /* the forwarder missed messages: the peers hear it at once */
		for (struct rt_out *o = SLIST_FIRST(&tt->outs); o; o = SLIST_NEXT(o, in_topic))
			rt_out_drive(o);
		return;
	}
	m = omsg_new(tt, msg, chunk);
	if (!m) {
		rt_forwarder_release(tt, msg);
		return;
	}
	m->copy = rt_window_keep(&tt->window, tt->t, msg, on_kept, m);
	if (m->copy) {
		m->refs++;	 /* the copy reads the message in its pool: held until on_kept */
		m->copy->busy++; /* m's chunks may go from it: not overwritten while m lives */
	}
	tt->forwarded++;
	if (m->dropped) {
		rgaps_warn("topic '%s': out of memory for its stages: message %llu not sent",
			   tt->t->cfg.name, (unsigned long long)msg->seq);
		tt->stage_drops++;
		out_set(rt, m, OUT_DROPPED);
		omsg_put(rt, m);
		return;
	}
	if (tt->staged && !SLIST_EMPTY(&tt->outs)) {
		d2h = d2h_new(tt, m, chunk, &nd2h);
		if (!d2h)
			m->dropped = true;
	}
	for (struct rt_out *o = SLIST_FIRST(&tt->outs); o; o = SLIST_NEXT(o, in_topic)) {
		if (RGAPS_RECORD_HDR + RGAPS_MIN(chunk, m->msg.size) + record_tag_len(o) >
			    o->geom.max_record &&
		    o->state == OUT_RING_READY) {
			/* Whole-message mode with a message over half the ring. */
			tt->too_large++;
			o->dropped_msgs++;
			m->dropped = true;
			continue;
		}
		rings++;
		if ((tt->staged && !d2h) || !msg_queue_on(o, m, chunk, d2h)) {
			rgaps_warn("topic '%s': out of memory: message %llu not sent to %s",
				   tt->t->cfg.name, (unsigned long long)m->msg.seq,
				   rgapsd_peer_name(o->p->peer));
			o->dropped_msgs++;
			m->dropped = true;
		}
	}
	if (!rings)
		tt->unsent_no_peer++;
	for (uint64_t k = 0; k < nd2h; k++) {
		if (!d2h[k]->refs) { /* no ring took it */
			free(d2h[k]);
			continue;
		}
		m->refs++; /* dropped by the stage's last put */
		rt_d2h_queue(d2h[k]);
	}
	free(d2h);
	rt_d2h_pump(tt);
	out_set(rt, m, OUT_QUEUED);
	for (struct rt_out *o = SLIST_FIRST(&tt->outs); o; o = SLIST_NEXT(o, in_topic))
		rt_out_drive(o);
	omsg_put(rt, m);
}

void rt_on_record_sent(void *arg, struct rgaps_link *link, uint64_t cookie, int status)
{
	struct rt_transport *tr = arg;
	struct rt_chunk *c = (struct rt_chunk *)(uintptr_t)cookie;
	struct rt_out *o = c->o;

	/* Completions come in posting order per ring. */
	rgaps_require(STAILQ_FIRST(&o->inflight) == c);
	STAILQ_REMOVE_HEAD(&o->inflight, link);
	o->hdr_head = (o->hdr_head + 1) % RT_HDR_SLOTS;
	o->hdr_used--;
	chunk_end(tr->rt, c, status ? CHUNK_DROPPED : CHUNK_SENT);
	if (o->state == OUT_RING_CLOSING) {
		if (STAILQ_EMPTY(&o->inflight))
			out_finish(o);
		return;
	}
	rt_out_drive(o);
}

void rt_on_head_update(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t head)
{
	struct rt_transport *tr = arg;
	struct rt_peer *p = rt_peer_of_link(tr->rt, tr->idx, link);
	struct rt_out *o;

	if (!p)
		return;
	o = ring_id < RT_RINGS ? p->out[ring_id] : NULL;
	if (o && o->state == OUT_RING_CLOSING)
		return; /* late, harmless */
	if (!o || o->state != OUT_RING_READY) {
		rt_hostile(p, "Head update for ring %u, which is not ours", ring_id);
		return;
	}
	if (rt_ring_sender_update_dhead(&o->ring, head) != 0) {
		rt_hostile(p, "ring %u: Head %llu goes backwards or past Tail", ring_id,
			   (unsigned long long)head);
		return;
	}
	rt_out_drive(o);
}

void rt_on_topic_ready(struct rt_peer *p, const struct rt_wire_msg *m)
{
	struct rgapsd_remote *rt = p->rt;
	struct rt_out *o = p->out[m->ring_id];
	struct rt_transport *tr;
	int e;

	if (!o || o->state != OUT_RING_PREPARING)
		return; /* torn down meanwhile */
	tr = &rt->tr[o->tr];
	e = rt_ring_geom_init(m->ring_size, m->ring_size / 2 - RGAPS_RING_ALIGN,
				 RGAPS_RING_ALIGN, &o->geom);
	if (!e)
		e = tr->lp->ops.transport.sender_ring_connect(tr->ctx, p->links[o->tr].link, o->id,
							      m->desc, m->desc_len);
	if (e) {
		rgaps_error("topic '%s': ring %u to %s unusable: %s", o->tt->t->cfg.name, o->id,
			    rgapsd_peer_name(p->peer), strerror(-e));
		rt_out_free(o, true, false);
		return;
	}
	rt_ring_sender_init(&o->ring, &o->geom);
	o->state = OUT_RING_READY;
	if (o->src)
		relay_ready(o, m);
	resend_queue(o, m);
	p->resetup_ms = 0; /* the peer answers again: the next refusal starts the back-off anew */
	rgaps_info("topic '%s': ring %u to %s ready", o->tt->t->cfg.name, o->id,
		   rgapsd_peer_name(p->peer));
	rt_waiters_check(o->tt, false);
	rt_out_drive(o);
}

void rt_on_topic_refused(struct rt_peer *p, const struct rt_wire_msg *m)
{
	struct rt_out *o = p->out[m->ring_id];
	uint64_t now = rgaps_now_ns(CLOCK_MONOTONIC);

	if (!o)
		return;
	p->setup_refusals++;
	if (m->by_tree) {
		/* Our views of the tree differ for a moment (a host came or went, one of us has
		 * not heard yet): no back-off, ask again once they may agree. */
		p->tree_refusals++;
		p->tree_hold_ns = p->resetup_at_ns = now + RT_TREE_RETRY_MS * 1000000ull;
		rgaps_info("topic '%s': %s refused the set-up: %s (asking again in %d ms)",
			   o->tt->t->cfg.name, rgapsd_peer_name(p->peer), m->reason,
			   RT_TREE_RETRY_MS);
		rt_out_free(o, false, false);
		return;
	}
	p->resetup_ms =
		p->resetup_ms ? RGAPS_MIN(2 * p->resetup_ms, RT_RESETUP_MAX_MS) : RT_RESETUP_MIN_MS;
	p->resetup_at_ns = now + p->resetup_ms * 1000000ull;
	rgaps_warn("topic '%s': %s refused the set-up: %s (asking again in %u ms)",
		   o->tt->t->cfg.name, rgapsd_peer_name(p->peer), m->reason, p->resetup_ms);
	rt_out_free(o, false, false);
}

void rt_on_topic_leave(struct rt_peer *p, const struct rt_wire_msg *m)
{
	struct rt_out *o = p->out[m->ring_id];

	if (!o || o->state == OUT_RING_CLOSING)
		return; /* given up here too meanwhile */
	rgaps_info("topic '%s': %s left ring %u: %s", o->tt->t->cfg.name, rgapsd_peer_name(p->peer),
		   o->id, m->reason);
	p->leaves++;
	/* Its end of the ring is gone: nothing to tell it; asked again only as the tree says. */
	p->tree_hold_ns = p->resetup_at_ns =
		rgaps_now_ns(CLOCK_MONOTONIC) + RT_TREE_RETRY_MS * 1000000ull;
	rt_out_free(o, false, true);
}

void rt_sender_topic_gone(struct rt_topic *tt)
{
	struct rgapsd_remote *rt = tt->rt;

	rt_forwarder_stop(tt);
	while (!SLIST_EMPTY(&tt->outs))
		rt_out_free(SLIST_FIRST(&tt->outs), false, false);
	rt_waiters_check(tt, true);
	rt_staging_free(tt);
	rgaps_require(rt_window_idle(&tt->window)); /* its rings and the keeper are done */
	rt_window_free(&tt->window);
	SLIST_REMOVE(&rt->topics, tt, rt_topic, link);
	rt_local_sub_close(&tt->fwd);
	free(tt);
}
