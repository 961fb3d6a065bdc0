/*
 * The relay trees (docs/ARCHITECTURE.md section 1, "Relays"): to which peers
 * this host sends each topic, and passing on what it receives.
 *
 * A topic's messages from one origin travel a tree rooted at the origin, laid
 * out by the origin's "relay" mode over the hosts that subscribe
 * (topology.h). Every host derives the tree from its own view: the peers that
 * say they subscribe (subs, with when they joined), up or down. The origin
 * sends its messages to its children (sender.c: the forwarder's messages); a
 * relay passes each record of a source on to its own children as it lands
 * (cut-through: from its receive ring, while the record is also copied into
 * the pool here), and gives the ring space back only once every child's copy
 * has left, so back-pressure goes up the tree hop by hop. A receiver takes a
 * ring only from its parent in its own view (else topic_refused with "tree",
 * asked again soon): views differ only while news of a host travels, and one
 * ring per source at a time (receiver.c) keeps every message once and in order.
 * A host that is down keeps its place; the hosts below it attach to the
 * nearest live host above, which sends on from where each stopped.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "internal.h"

/* ---------------------------------------------------------------- this host's subscriptions */

static const char *self_name(const struct rgapsd_remote *rt)
{
	return rt->d->cfg.listen;
}

uint64_t rt_relay_joined(const struct rgapsd_remote *rt, const char *topic)
{
	for (uint32_t i = 0; i < rt->njoined; i++)
		if (strcmp(rt->joined[i].topic, topic) == 0)
			return rt->joined[i].ms;
	return 0;
}

void rt_relay_subscribed(struct rgapsd_remote *rt, struct rgapsd_topic *t)
{
	struct rt_source *src;
	uint32_t i;

	for (i = 0; i < rt->njoined; i++)
		if (strcmp(rt->joined[i].topic, t->cfg.name) == 0)
			break;
	if (t->local_subs && i == rt->njoined) {
		struct rt_joined *n = realloc(rt->joined, (rt->njoined + 1) * sizeof(*n));

		if (n) { /* else it says 0 and keeps out of its trees (no memory, no relaying) */
			rt->joined = n;
			snprintf(n[i].topic, sizeof(n[i].topic), "%s", t->cfg.name);
			/* Never 0 ("did not say"), and later than any host that came before. */
			n[i].ms = RGAPS_MAX(rgaps_now_ns(CLOCK_REALTIME) / 1000000, 1);
			rt->njoined++;
		}
	} else if (!t->local_subs && i < rt->njoined) {
		rt->joined[i] = rt->joined[--rt->njoined];
	}
	SLIST_FOREACH(src, &rt->sources, link)
		if (src->t == t)
			rt_source_check(src);
}

/* ---------------------------------------------------------------- the tree as this host sees it */

struct tree {
	struct rt_relay_mode mode;
	uint32_t n;		/* hosts after the origin */
	struct rt_tree_host *h; /* [n + 1]: h[0] is the origin, then tree order */
	bool *live;		/* [n + 1] */
	uint32_t self;		/* this host's index, RT_TREE_NONE when it is not in the tree */
};

static struct rt_peer *peer_named(struct rgapsd_remote *rt, const char *name)
{
	struct rt_peer *p;

	SLIST_FOREACH(p, &rt->peers, link)
		if (strcmp(rgapsd_peer_name(p->peer), name) == 0)
			return p;
	return NULL;
}

/* When peer p said it joined topic, if it says it subscribes (down: as it said last). */
static bool peer_joined(const struct rt_peer *p, const char *topic, uint64_t *joined_p)
{
	for (uint32_t i = 0; i < p->nsubs; i++) {
		if (strcmp(p->subs[i], topic) == 0) {
			*joined_p = p->joined ? p->joined[i] : 0;
			return true;
		}
	}
	return false;
}

/* A host is up in the tree when its session is, and it said what it subscribes to in it. */
static bool peer_live(const struct rt_peer *p)
{
	return rgapsd_peer_is_up(p->peer) && p->subs_fresh;
}

static void tree_free(struct tree *tr)
{
	free(tr->h);
	free(tr->live);
	tr->h = NULL;
	tr->live = NULL;
}

/*
 * The tree of topic's messages from origin as this host sees it now: the
 * hosts that subscribe (a host that is down keeps its place), in tree order.
 * -ENOMEM, or 0.
 */
static int tree_build(struct rgapsd_remote *rt, const char *topic, const char *origin,
		      const struct rt_relay_mode *mode, struct tree *tr)
{
	const char *self = self_name(rt);
	uint64_t joined, mine = rt_relay_joined(rt, topic);
	struct rt_peer *p, *op;
	uint32_t n = 0, cap = 1;

	memset(tr, 0, sizeof(*tr));
	if (mode)
		tr->mode = *mode;
	SLIST_FOREACH(p, &rt->peers, link)
		cap++;
	tr->h = calloc(cap + 1, sizeof(*tr->h));
	tr->live = calloc(cap + 1, sizeof(*tr->live));
	if (!tr->h || !tr->live) {
		tree_free(tr);
		return -ENOMEM;
	}
	if (mine && strcmp(self, origin) != 0)
		tr->h[1 + n++] =
			(struct rt_tree_host){ .name = self, .joined = mine, .live = true };
	SLIST_FOREACH(p, &rt->peers, link) {
		const char *name = rgapsd_peer_name(p->peer);

		if (strcmp(name, origin) == 0 || !peer_joined(p, topic, &joined))
			continue;
		tr->h[1 + n++] = (struct rt_tree_host){
			.name = name, .joined = joined, .live = peer_live(p), .arg = p
		};
	}
	rt_tree_sort(tr->h + 1, n);
	op = peer_named(rt, origin);
	tr->h[0] = (struct rt_tree_host){
		.name = origin,
		.live = strcmp(origin, self) == 0 || (op && rgapsd_peer_is_up(op->peer)),
		.arg = op,
	};
	tr->n = n;
	tr->self = strcmp(origin, self) == 0 ? 0 : RT_TREE_NONE;
	for (uint32_t i = 0; i <= n; i++) {
		tr->live[i] = tr->h[i].live;
		if (i && strcmp(tr->h[i].name, self) == 0)
			tr->self = i;
	}
	return 0;
}

/* The index of peer p in the tree, RT_TREE_NONE when it is not in it. */
static uint32_t tree_index(const struct tree *tr, const struct rt_peer *p)
{
	for (uint32_t i = 1; i <= tr->n; i++)
		if (tr->h[i].arg == p)
			return i;
	return RT_TREE_NONE;
}

/* Is peer p, up, a child of this host in the tree (its nearest live ancestor is this host)? */
static bool tree_child(const struct tree *tr, const struct rt_peer *p)
{
	uint32_t i = tree_index(tr, p);

	return tr->self != RT_TREE_NONE && i != RT_TREE_NONE && tr->live[i] &&
	       rt_tree_parent(&tr->mode, tr->live, tr->n, i) == tr->self;
}

/* ---------------------------------------------------------------- who gets a ring */

/* Recently refused by p's tree or left by it: the views may not agree yet. */
static bool tree_held_off(const struct rt_peer *p)
{
	return p->tree_hold_ns && rgaps_now_ns(CLOCK_MONOTONIC) < p->tree_hold_ns;
}

/*
 * Make rings (tt->outs, or src->outs for a relay) match the children of this
 * host in tree tr: a ring to a host that is no longer a child goes (moved, if
 * it is still in the tree: another host sends to it now), one set up in
 * another mode goes, and every child without one gets one (create: only when
 * there is something to send).
 */
static void rings_match(struct rgapsd_remote *rt, struct rt_topic *tt, struct rt_source *src,
			const struct tree *tr, bool create)
{
	for (struct rt_peer *p = SLIST_FIRST(&rt->peers); p; p = SLIST_NEXT(p, link)) {
		struct rt_out *have = NULL, *o;
		bool up = rgapsd_peer_is_up(p->peer), want = up && tree_child(tr, p);
		int tr_idx;

		for (o = src ? SLIST_FIRST(&src->outs) : SLIST_FIRST(&tt->outs); o;
		     o = SLIST_NEXT(o, in_topic))
			if (o->p == p)
				have = o;
		if (have && (!want || !rt_relay_mode_equal(&have->mode, &tr->mode))) {
			rt_out_free(have, up, up && tree_index(tr, p) != RT_TREE_NONE);
			have = NULL;
		}
		if (have || !want || !create || tree_held_off(p))
			continue;
		tr_idx = rt_pick_transport(p, &tt->t->cfg);
		if (tr_idx >= 0)
			rt_out_create(p, tt, tr_idx, src, &tr->mode);
	}
}

/*
 * The mode of this host's own tree of topic tt: the configured one, or what
 * "auto" predicts fastest for n hosts and the messages' size (their recent
 * mean; before any, max_message_size). "auto" decides again only when the
 * number of hosts changes or the size moves fourfold: each change of mode
 * moves every host of the tree (from where it stopped, nothing lost).
 */
static void origin_mode(struct rt_topic *tt, uint32_t n)
{
	const struct rgaps_topic_config *cfg = &tt->t->cfg;
	uint64_t size = tt->size_mean ? tt->size_mean : cfg->max_message_size;
	uint64_t chunk = cfg->chunking ? cfg->chunk_size : size;
	struct rt_relay_mode m;
	char was[RT_RELAY_NAME_MAX], now[RT_RELAY_NAME_MAX];

	if (rt_relay_mode_parse(cfg->relay, &m) == 0) {
		if (!tt->mode_set)
			snprintf(tt->mode_why, sizeof(tt->mode_why), "configured");
	} else {
		if (tt->mode_set && tt->mode_hosts == n && size <= 4 * tt->mode_size &&
		    4 * size >= tt->mode_size)
			return;
		rt_relay_auto(n, size, chunk, &m, tt->mode_why, sizeof(tt->mode_why));
		tt->mode_hosts = n;
		tt->mode_size = size;
	}
	if (tt->mode_set && rt_relay_mode_equal(&m, &tt->mode))
		return;
	rgaps_info("topic '%s': relay %s%s%s (%s)", cfg->name,
		   rt_relay_mode_name(&m, now, sizeof(now)), tt->mode_set ? ", was " : "",
		   tt->mode_set ? rt_relay_mode_name(&tt->mode, was, sizeof(was)) : "",
		   tt->mode_why);
	tt->mode = m;
	tt->mode_set = true;
}

/* This host's own messages of t: rings to its children in its tree. */
static void origin_reconcile(struct rgapsd_remote *rt, struct rgapsd_topic *t);

/*
 * "auto" chose tt's tree for messages of another size (before any message:
 * max_message_size): it chooses again before the next message goes, which
 * then goes on the new tree's rings (each host goes on from where it stood).
 */
static void on_size_moved(struct rt_topic *tt)
{
	origin_reconcile(tt->rt, tt->t);
}

static void origin_reconcile(struct rgapsd_remote *rt, struct rgapsd_topic *t)
{
	struct rt_topic *tt;
	struct tree tr;

	if (!t->publishers_seen)
		return;
	tt = rt_topic_of(rt, t, true);
	if (!tt || tree_build(rt, t->cfg.name, self_name(rt), NULL, &tr))
		return;
	origin_mode(tt, tr.n);
	tr.mode = tt->mode;
	rings_match(rt, tt, NULL, &tr, true);
	tree_free(&tr);
	rt_waiters_check(tt, false);
}

/*
 * A source this host receives: rings to its children in the origin's tree.
 * Between two parents (no ring) its rings stay, and none is made: they get
 * what comes from the next parent.
 */
static void source_reconcile(struct rgapsd_remote *rt, struct rt_source *src)
{
	struct rt_topic *tt;
	struct tree tr;

	if (!src->t ||
	    (SLIST_EMPTY(&src->outs) && (!src->in || src->mode.kind == RGAPS_RELAY_STAR)))
		return;
	tt = rt_topic_of(rt, src->t, true);
	if (!tt || tree_build(rt, src->topic, src->origin, &src->mode, &tr))
		return;
	rings_match(rt, tt, src, &tr, src->in != NULL);
	tree_free(&tr);
	rt_source_check(src);
}

void rt_reconcile_topic(struct rgapsd_remote *rt, struct rgapsd_topic *t)
{
	struct rt_source *src;

	origin_reconcile(rt, t);
	SLIST_FOREACH(src, &rt->sources, link)
		if (src->t == t)
			source_reconcile(rt, src);
}

void rt_reconcile_all(struct rgapsd_remote *rt)
{
	for (struct rgapsd_topic *t = rt->d->topics; t; t = t->next)
		rt_reconcile_topic(rt, t);
}

/* ---------------------------------------------------------------- set-ups */

/*
 * Whether p may send this host the topic from origin in mode: it is this
 * host's parent in the tree as this host sees it. A host that is not in the
 * tree (no subscriber here, as far as it knows) takes it from anyone.
 */
static bool parent_ok(struct rgapsd_remote *rt, struct rt_peer *p, const struct rt_wire_msg *m,
		      const char *origin, const struct rt_relay_mode *mode, char *why, size_t len)
{
	const char *name = rgapsd_peer_name(p->peer);
	struct tree tr;
	uint32_t par;
	bool ok;

	if (mode->kind == RGAPS_RELAY_STAR) {
		if (strcmp(name, origin) == 0)
			return true;
		snprintf(why, len, "topic '%s' from %s is a star: only %s sends it", m->topic,
			 origin, origin);
		return false;
	}
	if (tree_build(rt, m->topic, origin, mode, &tr)) {
		snprintf(why, len, "out of memory for the tree of topic '%s'", m->topic);
		return false;
	}
	par = tr.self == RT_TREE_NONE ? RT_TREE_NONE : rt_tree_parent(mode, tr.live, tr.n, tr.self);
	ok = tr.self == RT_TREE_NONE || (par != RT_TREE_NONE && strcmp(tr.h[par].name, name) == 0);
	if (!ok && par == RT_TREE_NONE)
		snprintf(why, len, "topic '%s' from %s: no host above this one is up", m->topic,
			 origin);
	else if (!ok)
		snprintf(why, len, "topic '%s' from %s: %s is this host's parent in its %s, not %s",
			 m->topic, origin, tr.h[par].name, m->relay, name);
	tree_free(&tr);
	return ok;
}

void rt_relay_on_setup(struct rt_peer *p, const struct rt_wire_msg *m)
{
	struct rgapsd_remote *rt = p->rt;
	const char *origin = m->origin[0] ? m->origin : rgapsd_peer_name(p->peer);
	struct rt_relay_mode mode = { RGAPS_RELAY_STAR, 0 };
	struct rt_source *src;
	char why[RT_REASON_MAX];

	if (m->relay[0] && rt_relay_mode_parse(m->relay, &mode) != 0) {
		rt_hostile(p, "topic_setup with relay '%s'", m->relay); /* wire.c checked it */
		return;
	}
	if (strcmp(origin, self_name(rt)) == 0) {
		rt_setup_refuse(p, m->ring_id, true, "topic '%s': this host is its origin",
				m->topic);
		return;
	}
	if (!parent_ok(rt, p, m, origin, &mode, why, sizeof(why))) {
		rt_setup_refuse(p, m->ring_id, true, "%s", why);
		return;
	}
	rt_on_topic_setup(p, m);
	src = rt_source_of(rt, m->topic, origin, false);
	if (!src || !src->in || src->in->p != p || src->in->id != m->ring_id)
		return; /* refused, or waiting for its data link */
	src->mode = mode;
	src->chunk_size = m->chunk_size ? m->chunk_size : src->t->cfg.chunk_size;
	rt_reconcile_topic(rt, src->t);
}

void rt_relay_on_teardown(struct rt_peer *p, const struct rt_wire_msg *m)
{
	struct rgapsd_topic *t = p->in[m->ring_id] ? p->in[m->ring_id]->topic : NULL;

	rt_on_topic_teardown(p, m);
	if (t)
		rt_reconcile_topic(p->rt, t);
}

/* ---------------------------------------------------------------- passing records on */

static void note_seq(struct rt_source *src, uint64_t seq)
{
	if (!src->have_seq || seq > src->last_seq) {
		src->have_seq = true;
		src->last_seq = seq;
	}
}

static void drive_all(struct rt_source *src)
{
	struct rt_out *o;

	SLIST_FOREACH(o, &src->outs, in_topic)
		rt_out_drive(o);
}

/*
 * Ring o carries a message that begins to land now (seq): it may start there,
 * its child lacks it, and it did not carry it already (this host's next parent
 * sends again what this host had passed on but not yet published itself).
 */
static bool ring_takes(const struct rt_out *o, uint64_t seq)
{
	return seq >= o->live_from && seq >= o->skip_below && seq >= o->carried_next;
}

/*
 * Under drop_oldest a child that cannot keep up loses messages rather than
 * hold back its parent's other children: a message is not started on a ring
 * that still has records of an earlier one to post (its loss notice follows).
 * Under block the ring takes it, and the records it waits for stay in the
 * ring here, which holds back the parent: back-pressure, hop by hop.
 */
static bool ring_behind(const struct rt_out *o)
{
	return o->tt->t->cfg.overflow == RGAPS_OVERFLOW_DROP_OLDEST && o->state == OUT_RING_READY &&
	       !STAILQ_EMPTY(&o->queue);
}

/* The first record r of a message landed on src's ring: the rings that take it start it. */
static void relay_begin(struct rt_source *src, struct rt_rec *r)
{
	struct rt_omsg *m = NULL;
	struct rt_out *o;

	SLIST_FOREACH(o, &src->outs, in_topic) {
		if (!ring_takes(o, r->h.msg_seq))
			continue;
		if (ring_behind(o)) {
			o->dropped_msgs++;
			src->relay_drops++;
			continue;
		}
		if (!m) {
			m = rt_omsg_relayed(rt_topic_of(src->rt, src->t, true), &r->h);
			if (!m) { /* its rings see the jump, and tell it lost */
				src->relay_drops++;
				return;
			}
			src->relaying = m; /* the landing's reference */
			src->relayed++;
			src->relayed_bytes += r->h.msg_size;
		}
		o->carrying = m;
		o->carried_next = r->h.msg_seq + 1;
		m->refs++;
	}
}

/* A record's copy into the source's resend window is made: rings waiting for it go on. */
static void kept_record(void *arg)
{
	struct rt_rec *r = arg;
	struct rt_source *src = r->in->src;

	rt_rec_put(r);
	drive_all(src);
}

/*
 * Keep record r of the message now landing in the source's window, so that a
 * child that comes to this host later gets it again (a relay's window: in a
 * tree any host may become a parent). Copied off the loop; the record stays
 * in the ring until then.
 */
static void keep_record(struct rt_source *src, struct rt_in *in, struct rt_rec *r)
{
	if (r->h.flags & RGAPS_RECORD_FIRST) {
		if (src->keeping) /* defensive: the ring's order makes it impossible */
			rt_window_drop(src->keeping);
		src->keeping = src->mode.kind == RGAPS_RELAY_STAR ?
				       NULL :
				       rt_window_open(&src->window, src->t, &r->h);
	}
	if (!src->keeping)
		return;
	rt_rec_hold(r);
	if (!rt_window_fill(src->keeping, r->h.chunk_off,
			    in->mem + r->slot.off + RGAPS_RECORD_HDR, r->h.chunk_len, kept_record,
			    r)) {
		rt_rec_put(r);
		rt_window_drop(src->keeping);
		src->keeping = NULL;
		return;
	}
	if (r->h.flags & RGAPS_RECORD_LAST)
		src->keeping = NULL; /* whole once its copies are made */
}

/*
 * Would a message that starts landing on in now be read from the ring: passed
 * on to a child, or kept in the source's window? If not, the receiver may land
 * its chunks straight in its pool block, and the ring holds only their headers.
 */
static bool reads_ring(struct rt_in *in)
{
	const struct rt_source *src = in->src;

	return src && src->in == in &&
	       (src->mode.kind != RGAPS_RELAY_STAR || !SLIST_EMPTY(&src->outs));
}

/*
 * A record landed on the ring of in's source (receiver.c, before it is copied
 * here): pass it on to every ring that carries its message, now, and keep it
 * in the window. A loss notice passes on as the rings' own (sender.c tells
 * each child what it lacks once its queue is empty).
 */
static void on_landed(struct rt_in *in, struct rt_rec *r)
{
	struct rt_source *src = in->src;
	struct rt_out *o, *next;
	struct rt_omsg *m;

	if (!src || src->in != in || r->dup)
		return;
	if (r->h.flags & RGAPS_RECORD_LOSS) {
		note_seq(src, r->h.msg_seq);
		drive_all(src);
		return;
	}
	if (r->in_block) {
		/* In its pool block, not the ring: at its first header the tree had no use
		 * for the ring's bytes (reads_ring). A ring made since sees the jump and
		 * tells its child the message lost. */
		if (r->h.flags & RGAPS_RECORD_FIRST)
			note_seq(src, r->h.msg_seq);
		drive_all(src);
		return;
	}
	if (r->h.flags & RGAPS_RECORD_FIRST) {
		note_seq(src, r->h.msg_seq);
		if (!SLIST_EMPTY(&src->outs))
			relay_begin(src, r);
	}
	keep_record(src, in, r);
	m = src->relaying;
	if (!m)
		return;
	for (o = SLIST_FIRST(&src->outs); o; o = next) {
		next = SLIST_NEXT(o, in_topic);
		if (o->carrying != m)
			continue;
		if (!rt_out_queue_record(o, m, r)) {
			/* A message cut short would break the child's order: it starts over. */
			rgaps_warn("topic '%s': out of memory passing message %llu on to %s",
				   src->topic, (unsigned long long)r->h.msg_seq,
				   rgapsd_peer_name(o->p->peer));
			src->relay_aborts++;
			rt_out_free(o, rgapsd_peer_is_up(o->p->peer), true);
			continue;
		}
		if (r->h.flags & RGAPS_RECORD_LAST) {
			o->carrying = NULL;
			rt_omsg_put(m);
		}
	}
	if (r->h.flags & RGAPS_RECORD_LAST) {
		src->relaying = NULL;
		rt_omsg_put(m);
	}
	drive_all(src);
}

/* Does ring o carry message m, or wait to send again the kept copy k (not whole yet)? */
static bool ring_needs(const struct rt_out *o, const struct rt_omsg *m, const struct rt_kept *k)
{
	const struct rt_chunk *c;

	if (m && o->carrying == m)
		return true;
	STAILQ_FOREACH(c, &o->queue, link)
		if (k && c->m && c->m->kept == k)
			return true;
	return false;
}

/*
 * The ring of in's source went (its parent failed, moved or left) in the
 * middle of a message: no later record finishes it here, so the rings that
 * carry it, or were to send its copy again, cannot finish it either. They go
 * (moved) and are made again, starting with that message, which the next
 * parent sends again.
 */
static void on_ring_end(struct rt_in *in)
{
	struct rt_source *src = in->src;
	struct rt_omsg *m = src->relaying;
	struct rt_kept *k = src->keeping;
	struct rt_out *o, *next;
	uint64_t seq;

	if (!m && !k)
		return;
	seq = m ? m->msg.fwd_seq : k->seq;
	for (o = SLIST_FIRST(&src->outs); o; o = next) {
		next = SLIST_NEXT(o, in_topic);
		if (!ring_needs(o, m, k))
			continue;
		src->relay_aborts++;
		rgaps_info("topic '%s': the ring from %s ended in message %llu: ring %u to %s "
			   "starts over",
			   src->topic, rgapsd_peer_name(in->p->peer), (unsigned long long)seq, o->id,
			   rgapsd_peer_name(o->p->peer));
		rt_out_free(o, rgapsd_peer_is_up(o->p->peer), true);
	}
	if (k) {
		rt_window_drop(k);
		src->keeping = NULL;
	}
	if (m) {
		src->relaying = NULL;
		rt_omsg_put(m);
	}
	/* It lands again from the next parent: rings made meanwhile take it. */
	if (src->have_seq && src->last_seq == seq) {
		src->have_seq = seq > 0;
		src->last_seq = seq - (seq > 0);
	}
}

/* ---------------------------------------------------------------- life */

void rt_relay_init(struct rgapsd_remote *rt)
{
	rt->relay_landed = on_landed;
	rt->relay_reads_ring = reads_ring;
	rt->relay_ring_end = on_ring_end;
	rt->relay_size_moved = on_size_moved;
}

void rt_relay_topic_gone(struct rgapsd_remote *rt, struct rgapsd_topic *t)
{
	struct rt_source *src;

	SLIST_FOREACH(src, &rt->sources, link) {
		if (src->t != t)
			continue;
		while (!SLIST_EMPTY(&src->outs))
			rt_out_free(SLIST_FIRST(&src->outs), false, false);
	}
}

void rt_relay_free(struct rgapsd_remote *rt)
{
	free(rt->joined);
	rt->joined = NULL;
	rt->njoined = 0;
}
