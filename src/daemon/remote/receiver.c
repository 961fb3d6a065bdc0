/*
 * The receiver half of the remote path (DESIGN.md sections 1 and 4): one in
 * ring per (topic, sending peer). Each landed record is checked, copied off
 * the loop into a block of the local pool (allocated on a message's first
 * chunk), its ring space is given back (Head, watermark), and the last chunk
 * publishes the message to the local subscribers. Also the receiver's side of
 * the topic initialisation sequence (topic_setup -> topic_ready / refused).
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
	"landed", "allocated", "copying", "copied", "published", "released", "dropped",
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

	r->copy_status = mem->ops.memory.copy(mem->ctx,
					      r->loan_dst + r->h.chunk_off,
					      in->mem + r->slot.off + RGAPS_RECORD_HDR, r->h.chunk_len,
					      RGAPS_COPY_TO_POOL);
}

static void copy_done(struct rgapsd_msg *m)
{
	struct rt_rec *r = RGAPS_CONTAINER_OF(m, struct rt_rec, job.done);
	struct rt_in *in = r->in;

	in->jobs--;
	in_set(in->p->rt, r, IN_COPIED);
	if (in->dead) {
		if (!in->jobs)
			rt_in_free(in);
		return;
	}
	if (r->copy_status) {
		/* Our own memory failed us: the message cannot be trusted; restart the session. */
		rgaps_error("topic '%s': copy into the pool failed: %s; dropping the session with %s",
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
		rt_local_pub_cancel(&in->pub, in->asm_token);
		in->asm_open = false;
	}
}

/*
 * The receiver's driver: walk the records in landing order. Allocation and
 * copies may run ahead (chunk k copies while k+1 lands and k+2 is on the
 * wire); publication and ring release happen strictly in order at the head.
 */
static void in_drive(struct rt_in *in)
{
	struct rgapsd_remote *rt = in->p->rt;
	struct rt_transport *tr = &rt->tr[in->tr];
	struct rt_link *l = &in->p->links[in->tr];
	bool released = false, progress;
	uint64_t head;

again:
	progress = false;
	in->blocked = false;
	for (struct rt_rec *r = in->drive_from; r; r = r->next) {
		enum rt_in_state prev;
		bool stop = false;

		do {
			prev = r->state;
			switch (r->state) {
			case IN_LANDED:
				if (r->h.flags & RGAPS_RECORD_FIRST) {
					uint8_t *dst;
					uint32_t tok;
					int e;

					drop_assembly(in); /* defensive: checked at landing */
					e = rt_local_pub_loan(&in->pub, r->h.msg_size, &tok, &dst);
					if (e == -EAGAIN || e == -ENOBUFS) {
						/* Pool full under "block", or every loan of our slot
						 * is still being assembled: keep the ring full too;
						 * the sender stalls, its publishers feel it. */
						in->blocked = true;
						in->blocked_retries++;
						stop = true;
						break;
					}
					if (e) {
						rgaps_warn("topic '%s': message of %llu bytes from %s "
							   "refused: %s",
							   in->topic->cfg.name,
							   (unsigned long long)r->h.msg_size,
							   rgapsd_peer_name(in->p->peer), strerror(-e));
						in->refused++;
						in->topic->refused_msgs++;
						in->pending_gap += 1 + r->gap; /* nothing lost silently */
						in_set(rt, r, IN_DROPPED);
						break;
					}
					in->asm_open = true;
					in->asm_token = tok;
					in->asm_dst = dst;
				}
				if (!in->asm_open) {
					in_set(rt, r, IN_DROPPED); /* rest of a refused message */
					break;
				}
				r->loan_token = in->asm_token;
				r->loan_dst = in->asm_dst;
				if (r->h.flags & RGAPS_RECORD_LAST)
					in->asm_open = false; /* the record now owns the loan */
				in_set(rt, r, IN_ALLOCATED);
				break;
			case IN_ALLOCATED:
				in_set(rt, r, IN_COPYING);
				in->jobs++;
				r->job.run = copy_run;
				r->job.done.fn = copy_done;
				rt_copy_start(rt, in->topic->mem, &r->job, &r->copy_status,
					   r->loan_dst + r->h.chunk_off,
					   in->mem + r->slot.off + RGAPS_RECORD_HDR, r->h.chunk_len,
					   RGAPS_COPY_TO_POOL);
				break;
			case IN_COPYING: /* async: copy_done moves it on */
			case IN_COPIED:
			case IN_PUBLISHED:
			case IN_RELEASED:
			case IN_DROPPED:
			case IN_NUM_STATES:
				break;
			}
		} while (r->state != prev && !stop);
		if (stop)
			break;
		in->drive_from = r->next; /* r is with the worker, or dropped */
	}

	/* In order at the head: publish last chunks, give ring space back. */
	while (in->q_head) {
		struct rt_rec *r = in->q_head;

		if (r->state == IN_COPIED && (r->h.flags & RGAPS_RECORD_LAST)) {
			int e = rt_local_pub_commit(&in->pub, r->loan_token, r->h.msg_size, r->h.ts_ns,
						    r->gap + in->pending_gap, r->h.origin_stream,
						    r->h.origin_seq);

			if (e == -EAGAIN) {
				in->blocked = true; /* queue full under "block": retry */
				in->blocked_retries++;
				break;
			}
			if (e) {
				rgaps_warn("topic '%s': publish failed: %s", in->topic->cfg.name,
					   strerror(-e));
				in_set(rt, r, IN_DROPPED);
			} else {
				in->messages++;
				in->have_pub_seq = true;
				in->pub_seq = r->h.msg_seq;
				in->topic->landed_msgs++;
				in->topic->landed_bytes += r->h.msg_size;
				in->pending_gap = 0;
				in_set(rt, r, IN_PUBLISHED);
			}
		}
		if (r->state != IN_COPIED && r->state != IN_PUBLISHED && r->state != IN_DROPPED)
			break;
		rgaps_ring_receiver_consume(&in->ring, &r->slot);
		in_set(rt, r, IN_RELEASED);
		released = true;
		progress = true;
		in->q_head = r->next;
		if (!in->q_head)
			in->q_tail = NULL;
		free(r);
	}
	/* A publish returned loans: records that waited for one may go on now. */
	if (in->blocked && progress)
		goto again;
	if (released && l->link && rgaps_ring_receiver_should_report(&in->ring, &head)) {
		if (tr->lp->ops.transport.post_head(tr->ctx, l->link, in->id, head) == 0) {
			rgaps_ring_receiver_reported(&in->ring, head);
			tr->lp->ops.transport.flush(tr->ctx, l->link);
		}
	}
	if (in->blocked)
		arm_retry(rt);
}

static struct rt_seen *seen_of(struct rt_peer *p, const char *topic, bool create)
{
	struct rt_seen *n;

	for (uint32_t i = 0; i < p->nseen; i++)
		if (strcmp(p->seen[i].topic, topic) == 0)
			return &p->seen[i];
	if (!create)
		return NULL;
	n = realloc(p->seen, (p->nseen + 1) * sizeof(*n));
	if (!n)
		return NULL;
	p->seen = n;
	n = &p->seen[p->nseen++];
	snprintf(n->topic, sizeof(n->topic), "%s", topic);
	n->last_seq = 0;
	return n;
}

void rt_in_free(struct rt_in *in)
{
	struct rgapsd_remote *rt = in->p->rt;
	struct rt_rec *r;

	if (in->have_pub_seq && !in->dead) {
		struct rt_seen *sn = seen_of(in->p, in->topic->cfg.name, true);

		if (sn)
			sn->last_seq = in->pub_seq;
	}

	in->dead = true;
	if (in->p->in[in->id] == in)
		in->p->in[in->id] = NULL;
	if (in->jobs)
		return; /* copy_done finishes the job */
	while ((r = in->q_head)) {
		in->q_head = r->next;
		/* Copied chunks of an unfinished message own its loan: give it back once. */
		if ((r->h.flags & RGAPS_RECORD_LAST) &&
		    (r->state == IN_ALLOCATED || r->state == IN_COPIED))
			rt_local_pub_cancel(&in->pub, r->loan_token);
		in_set(rt, r, IN_DROPPED);
		free(r);
	}
	drop_assembly(in);
	rt_local_pub_close(&in->pub);
	if (in->pinned)
		in->topic->mem->ops.memory.host_unregister(in->topic->mem->ctx, in->mem);
	if (in->mem)
		munmap(in->mem, in->size);
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

void rt_on_record_landed(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t off,
			     uint64_t len)
{
	struct rt_transport *tr = arg;
	struct rgapsd_remote *rt = tr->rt;
	struct rt_peer *p = rt_peer_of_link(rt, tr->idx, link);
	struct rgaps_ring_slot slot;
	struct rgaps_record_hdr h;
	struct rt_in *in;
	struct rt_rec *r;
	uint64_t need;
	int e;

	if (!p)
		return;
	in = ring_id < RT_RINGS ? p->in[ring_id] : NULL;
	if (!in || in->tr != tr->idx) {
		rt_hostile(p, "record for ring %u, which was never set up", ring_id);
		return;
	}
	if (off != UINT64_MAX) {
		e = rgaps_ring_receiver_verify(&in->ring, off, len);
		if (e) {
			rt_hostile(p, "ring %u: record of %llu bytes at %llu, expected elsewhere", ring_id,
				(unsigned long long)len, (unsigned long long)off);
			return;
		}
	}
	e = rgaps_ring_receiver_land(&in->ring, len, &slot);
	if (e) {
		rt_hostile(p, "ring %u: a %llu-byte record cannot be where the sender put it (%s)",
			ring_id, (unsigned long long)len, strerror(-e));
		return;
	}
	if (len < RGAPS_RECORD_HDR) {
		rt_hostile(p, "ring %u: record of %llu bytes has no header", ring_id,
			(unsigned long long)len);
		return;
	}
	memcpy(&h, in->mem + slot.off, sizeof(h));
	need = RGAPS_RECORD_HDR + (uint64_t)h.chunk_len;
	if (h.magic != RGAPS_RECORD_MAGIC || h.ring_id != ring_id) {
		rt_hostile(p, "ring %u: bad record header", ring_id);
		return;
	}
	if (h.record_seq != (uint32_t)in->next_record_seq) {
		rt_hostile(p, "ring %u: record %llu arrived, %llu expected", ring_id,
			(unsigned long long)h.record_seq,
			(unsigned long long)in->next_record_seq);
		return;
	}
	if (need > len || RGAPS_ALIGN_UP(need, 64) != RGAPS_ALIGN_UP(len, 64)) {
		rt_hostile(p, "ring %u: chunk of %u bytes in a %llu-byte record", ring_id,
			h.chunk_len, (unsigned long long)len);
		return;
	}
	if (h.msg_size == 0 || h.chunk_len == 0 || h.chunk_off > h.msg_size ||
	    h.chunk_len > h.msg_size - h.chunk_off) {
		rt_hostile(p, "ring %u: chunk [%llu, +%u) outside a %llu-byte message", ring_id,
			(unsigned long long)h.chunk_off, h.chunk_len,
			(unsigned long long)h.msg_size);
		return;
	}
	if (h.msg_size > in->topic->cfg.max_message_size) {
		rt_hostile(p, "ring %u: message of %llu bytes over topic '%s' maximum %llu",
			ring_id, (unsigned long long)h.msg_size, in->topic->cfg.name,
			(unsigned long long)in->topic->cfg.max_message_size);
		return;
	}
	if (h.flags & RGAPS_RECORD_FIRST) {
		if (in->land_in_msg || h.chunk_off != 0) {
			rt_hostile(p, "ring %u: a message starts before the last one ended",
				ring_id);
			return;
		}
	} else if (!in->land_in_msg || h.msg_seq != in->land_msg_seq ||
		   h.msg_size != in->land_msg_size || h.chunk_off != in->land_next_off) {
		rt_hostile(p, "ring %u: chunk out of order", ring_id);
		return;
	}
	if ((h.flags & RGAPS_RECORD_LAST) != 0 && h.chunk_off + h.chunk_len != h.msg_size) {
		rt_hostile(p, "ring %u: last chunk ends before the message", ring_id);
		return;
	}
	if (!(h.flags & RGAPS_RECORD_LAST) && h.chunk_off + h.chunk_len == h.msg_size) {
		rt_hostile(p, "ring %u: message complete without a last chunk", ring_id);
		return;
	}

	r = calloc(1, sizeof(*r));
	if (!r) {
		rt_hostile(p, "out of memory");
		return;
	}
	r->in = in;
	r->slot = slot;
	r->h = h;
	r->state = IN_LANDED;
	r->loan_token = UINT32_MAX;
	rt->in_trans[IN_LANDED][IN_LANDED]++;
	if (h.flags & RGAPS_RECORD_FIRST) {
		if (in->have_last_seq && h.msg_seq > in->last_msg_seq + 1) {
			r->gap = (uint32_t)RGAPS_MIN(h.msg_seq - in->last_msg_seq - 1, UINT32_MAX);
			in->upstream_gaps += r->gap;
			in->topic->landed_gaps += r->gap; /* outlives the ring, for stats */
		} else if (in->have_last_seq && h.msg_seq <= in->last_msg_seq) {
			/* The sender's topic started over (its daemon restarted): no gap to count. */
			rgaps_info("topic '%s': %s restarted its sequence at %llu", in->topic->cfg.name,
				   rgapsd_peer_name(p->peer), (unsigned long long)h.msg_seq);
		}
		in->have_last_seq = true;
		in->last_msg_seq = h.msg_seq;
	}
	in->next_record_seq++;
	in->land_in_msg = !(h.flags & RGAPS_RECORD_LAST);
	in->land_msg_seq = h.msg_seq;
	in->land_msg_size = h.msg_size;
	in->land_next_off = h.chunk_off + h.chunk_len;
	in->records++;
	in->bytes += h.chunk_len;
	if (in->q_tail)
		in->q_tail->next = r;
	else
		in->q_head = r;
	in->q_tail = r;
	if (!in->drive_from)
		in->drive_from = r;
	in_drive(in);
}

void rt_on_retry(uv_timer_t *t)
{
	struct rgapsd_remote *rt = t->data;

	rt->retry_armed = false;
	for (struct rt_peer *p = rt->peers; p; p = p->next)
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


void rt_run_deferred(struct rt_peer *p, int tr_idx)
{
	cJSON *list = p->deferred[tr_idx], *m;

	p->deferred[tr_idx] = NULL;
	cJSON_ArrayForEach(m, list)
	{
		if (p->links[tr_idx].state != LINK_UP)
			break; /* the peer went away meanwhile: its sender forgot these rings */
		rt_on_topic_setup(p, m);
	}
	cJSON_Delete(list);
}

static void refuse_setup(struct rt_peer *p, double ring_id, const char *fmt, ...)
	RGAPS_PRINTF(3, 4);

static void refuse_setup(struct rt_peer *p, double ring_id, const char *fmt, ...)
{
	char why[512];
	va_list ap;
	cJSON *r = rt_msg_new("topic_refused");

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	rgaps_warn("peer %s: topic set-up refused: %s", rgapsd_peer_name(p->peer), why);
	cJSON_AddNumberToObject(r, "ring_id", ring_id);
	cJSON_AddStringToObject(r, "reason", why);
	rt_peer_send(p, r);
}

/* Receiver side of the topic initialisation sequence (DESIGN.md section 7). */
void rt_on_topic_setup(struct rt_peer *p, const cJSON *m)
{
	struct rgapsd_remote *rt = p->rt;
	const char *name = rt_jstr(m, "topic");
	int i = rt_tr_index(rt_jstr(m, "transport"));
	uint8_t peer_desc[RGAPS_RING_DESC_MAX], desc[RGAPS_RING_DESC_MAX];
	char hex[2 * RGAPS_RING_DESC_MAX + 1], err[512];
	size_t pdlen = 0, dlen = sizeof(desc);
	struct rt_transport *tr;
	struct rgapsd_topic *t;
	struct rt_in *in;
	double id;
	cJSON *r;
	int e;

	if (!name || !rgaps_topic_name_valid(name) || i < 0 || !rt_jnum(m, "ring_id", &id) || id < 0 ||
	    id >= RT_RINGS || id != (uint32_t)id ||
	    (id < RT_RINGS / 2) == p->initiator /* the sender's half is the other one */ ||
	    rt_unhex(rt_jstr(m, "head_desc"), peer_desc, sizeof(peer_desc), &pdlen)) {
		rt_hostile(p, "bad topic_setup");
		return;
	}
	tr = &rt->tr[i];
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
	 * waits for the link it names (run_deferred), and is dropped with it.
	 */
	if (p->links[i].state == LINK_OFFERED) {
		cJSON *copy;

		if (!p->deferred[i])
			p->deferred[i] = cJSON_CreateArray();
		if (!p->deferred[i] || cJSON_GetArraySize(p->deferred[i]) >= RT_DEFERRED_MAX ||
		    !(copy = cJSON_Duplicate(m, true))) {
			refuse_setup(p, id, "too many set-ups wait for the %s data link",
				     rt_tr_names[i]);
			return;
		}
		cJSON_AddItemToArray(p->deferred[i], copy);
		p->setups_deferred++;
		rgaps_debug("peer %s: topic '%s' set-up waits for the %s data link",
			    rgapsd_peer_name(p->peer), name, rt_tr_names[i]);
		return;
	}
	if (p->links[i].state != LINK_UP && p->links[i].state != LINK_CONNECTING) {
		refuse_setup(p, id, "no %s data link", rt_tr_names[i]);
		return;
	}
	if (p->in[(uint32_t)id])
		rt_in_teardown(p->in[(uint32_t)id]); /* the sender re-uses an id it gave up */
	/* First arrival: the topic is created here if nobody used it yet. */
	e = rgapsd__topic_get(rt->d, name, &t, err, sizeof(err));
	if (e) {
		refuse_setup(p, id, "topic '%s': %s", name, err);
		return;
	}
	in = calloc(1, sizeof(*in));
	if (!in) {
		refuse_setup(p, id, "out of memory");
		return;
	}
	in->p = p;
	in->topic = t;
	in->id = (uint32_t)id;
	in->tr = i;
	in->size = t->cfg.ring_size;
	e = rgaps_ring_geom_init(in->size, in->size / 2 - RGAPS_RING_ALIGN, RGAPS_RING_ALIGN,
				 &in->geom);
	if (!e)
		e = rgaps_ring_receiver_init(&in->ring, &in->geom, t->cfg.watermark);
	if (e) {
		free(in);
		refuse_setup(p, id, "topic '%s': ring of %llu bytes refused", name,
			     (unsigned long long)t->cfg.ring_size);
		return;
	}
	in->mem = mmap(NULL, in->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (in->mem == MAP_FAILED) {
		in->mem = NULL;
		free(in);
		refuse_setup(p, id, "cannot allocate a %llu-byte ring",
			     (unsigned long long)t->cfg.ring_size);
		return;
	}
	if (t->lim.mem_kind != RGAPS_MEM_HOST) {
		/* DP3 copies ring -> GPU pool: a pinned ring next to the GPU runs at full speed. */
		rt_place_near_device(t, in->mem, in->size, "receive ring");
		in->pinned = t->mem->ops.memory.host_register(t->mem->ctx, in->mem, in->size) == 0;
		if (!in->pinned)
			rgaps_warn("topic '%s': receive ring not pinned: H2D copies run slower", name);
	}
	e = rt_local_pub_open(t, &in->pub);
	if (e) {
		munmap(in->mem, in->size);
		free(in);
		refuse_setup(p, id, "topic '%s': no publisher slot", name);
		return;
	}
	e = tr->lp->ops.transport.receiver_ring_attach(tr->ctx, p->links[i].link, in->id, in->mem,
						       in->size, peer_desc, pdlen, desc, &dlen);
	if (e) {
		rt_in_free(in);
		refuse_setup(p, id, "%s cannot attach the ring: %s", rt_tr_names[i],
			     strerror(-e));
		return;
	}
	p->in[in->id] = in;
	{
		struct rt_seen *sn = seen_of(p, name, false);

		if (sn) { /* a ring for this topic existed before: continue its sequence */
			in->have_last_seq = true;
			in->last_msg_seq = sn->last_seq;
		}
	}
	rt_hex(desc, dlen, hex);
	r = rt_msg_new("topic_ready");
	cJSON_AddNumberToObject(r, "ring_id", in->id);
	cJSON_AddStringToObject(r, "ring_desc", hex);
	cJSON_AddNumberToObject(r, "ring_size", (double)in->size);
	rt_peer_send(p, r);
	rgaps_info("topic '%s': ring %u from %s ready (%s, %llu bytes)", name, in->id,
		   rgapsd_peer_name(p->peer), rt_tr_names[i], (unsigned long long)in->size);
}

void rt_on_topic_teardown(struct rt_peer *p, const cJSON *m)
{
	double id;

	if (!rt_jnum(m, "ring_id", &id) || id < 0 || id >= RT_RINGS) {
		rt_hostile(p, "bad topic_teardown");
		return;
	}
	for (int i = 0; i < TR_NUM; i++) { /* given up before its data link came */
		cJSON *it = p->deferred[i] ? p->deferred[i]->child : NULL, *next;
		double did;

		for (; it; it = next) {
			next = it->next;
			if (rt_jnum(it, "ring_id", &did) && did == id)
				cJSON_Delete(cJSON_DetachItemViaPointer(p->deferred[i], it));
		}
	}
	if (p->in[(uint32_t)id]) {
		struct rt_in *in = p->in[(uint32_t)id];
		struct rt_seen *sn = seen_of(p, in->topic->cfg.name, false);

		/* The sender stopped on purpose (nobody here subscribes any more): what it
		 * publishes from now on is lost to no one, so a later ring counts no gap. */
		in->have_pub_seq = false;
		if (sn)
			*sn = p->seen[--p->nseen]; /* forget the topic's sequence */
		rt_in_teardown(in);
	}
}

