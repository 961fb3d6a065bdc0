/*
 * Peer sessions as the remote path sees them (../peers/peers.c runs the sockets,
 * the handshake and the keepalives): what happens when a peer comes up or
 * goes down, the dispatch of its control messages (docs/PROTOCOL.md section
 * 4) to the rooms that handle them, and the periodic tick (link offers,
 * set-ups asked again, publishers waiting too long).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "internal.h"

void rt_send_subs(struct rt_peer *p)
{
	struct rt_wire_msg m = { .type = RT_MSG_SUBS };
	uint32_t n = 0;

	for (struct rgapsd_topic *t = p->rt->d->topics; t; t = t->next)
		n += t->local_subs > 0;
	m.subs = calloc(n + 1, sizeof(*m.subs));
	m.joined = calloc(n + 1, sizeof(*m.joined));
	if (!m.subs || !m.joined) {
		rt_wire_free(&m);
		rgapsd_peer_disconnect(p->peer, "out of memory for our subscriptions");
		return;
	}
	for (struct rgapsd_topic *t = p->rt->d->topics; t; t = t->next) {
		if (!t->local_subs)
			continue;
		/* since when: where this host goes in the topic's relay trees (relay.c) */
		m.joined[m.nsubs] = rt_relay_joined(p->rt, t->cfg.name);
		snprintf(m.subs[m.nsubs++], sizeof(m.subs[0]), "%s", t->cfg.name);
	}
	rt_peer_send(p, &m);
	rt_wire_free(&m);
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * When this host heard of each of the peer's subscriptions: kept for those it
 * said in this session already, now for the others (NULL: out of memory, and
 * every one counts as heard of just now).
 */
static uint64_t *learned_of(const struct rt_peer *p, const struct rt_wire_msg *m)
{
	uint64_t now = rgaps_now_ns(CLOCK_MONOTONIC);
	uint64_t *learned = calloc(m->nsubs + 1, sizeof(*learned));
	const char **old = NULL;
	uint32_t n = p->subs_fresh && p->learned_ns ? p->nsubs : 0;

	if (!learned)
		return NULL;
	if (n && !(old = calloc(n, sizeof(*old))))
		n = 0;
	for (uint32_t j = 0; j < n; j++)
		old[j] = p->subs[j]; /* its name first: the index follows from the address */
	/* qsort's base must not be NULL, even for no element */
	if (n)
		qsort(old, n, sizeof(*old), name_cmp);
	for (uint32_t i = 0; i < m->nsubs; i++) {
		const char *name = m->subs[i];
		const char **hit = n ? bsearch(&name, old, n, sizeof(*old), name_cmp) : NULL;

		learned[i] = hit ? p->learned_ns[(*hit - p->subs[0]) / sizeof(p->subs[0])] : now;
	}
	free(old);
	return learned;
}

/* The peer's topics with subscribers, and since when (the lists are taken from m). */
static void on_subs(struct rt_peer *p, struct rt_wire_msg *m)
{
	uint64_t *learned = learned_of(p, m);

	free(p->subs);
	free(p->joined);
	free(p->learned_ns);
	p->subs = m->subs;
	p->joined = m->joined;
	p->learned_ns = learned;
	p->nsubs = m->nsubs;
	p->subs_fresh = true;
	m->subs = NULL;
	m->joined = NULL;
	m->nsubs = 0;
	rt_reconcile_all(p->rt);
}

static void on_peer_up(void *ctx, struct rgapsd_peer *peer, bool initiator)
{
	struct rgapsd_remote *rt = ctx;
	struct rt_peer *p = rt_peer_of(rt, peer);

	if (!p)
		return;
	p->initiator = initiator;
	p->subs_fresh = false; /* what it said before stands until it says anew */
	rgaps_info("peer %s up (%s)", rgapsd_peer_name(peer),
		   initiator ? "we connected" : "it connected");
	rt_send_subs(p);
	rt_offer_links(p);
}

static void on_peer_down(void *ctx, struct rgapsd_peer *peer, const char *why)
{
	struct rgapsd_remote *rt = ctx;
	struct rt_peer *p = rgapsd_peer_get_data(peer);

	rgaps_warn("peer %s down: %s", rgapsd_peer_name(peer), why);
	if (!p)
		return;
	/*
	 * The data links close first (QPs to error, drain, destroy; tcp joins its threads,
	 * which may be reading a record's header slot or pool block just now), then the
	 * rings over them go, with their memory: marked lost first, no ring is detached
	 * from a closed link.
	 */
	for (int i = 0; i < rt->ntr; i++) {
		struct rgaps_link *link = p->links[i].link;
		bool had = p->links[i].state == LINK_UP || p->links[i].state == LINK_CONNECTING;

		p->links[i].state = LINK_NONE;
		p->links[i].link = NULL;
		if (had && link)
			rt->tr[i].lp->ops.transport.close(rt->tr[i].ctx, link);
		rt_link_lost(p, i);
	}
	/* Its subscriptions stay known: it keeps its place in the relay trees while down. */
	p->subs_fresh = false;
	rt_reconcile_all(rt);
}

static void on_peer_gone(void *ctx, struct rgapsd_peer *peer)
{
	struct rgapsd_remote *rt = ctx;
	struct rt_peer *p = rgapsd_peer_get_data(peer);

	if (!p)
		return;
	rgapsd_peer_set_data(peer, NULL);
	rt_peer_forget(p);
	rt_reconcile_all(rt); /* its place in the relay trees is gone: they close up */
}

static void on_peer_msg(void *ctx, struct rgapsd_peer *peer, const char *json, size_t len)
{
	struct rgapsd_remote *rt = ctx;
	struct rt_peer *p = rt_peer_of(rt, peer);
	struct rt_wire_msg m;
	char why[256];
	int e;

	if (!p)
		return;
	e = rt_wire_decode(json, len, &m, why, sizeof(why));
	if (e == -ENOMEM) {
		rgapsd_peer_disconnect(peer, "out of memory for a control message");
		return;
	}
	if (e) {
		rt_hostile(p, "%s", why);
		return;
	}
	switch (m.type) {
	case RT_MSG_SUBS:
		on_subs(p, &m);
		break;
	case RT_MSG_LINK_OFFER:
		rt_on_link_offer(p, &m);
		break;
	case RT_MSG_LINK_ACCEPT:
		rt_on_link_accept(p, &m);
		break;
	case RT_MSG_LINK_REFUSE:
		rt_on_link_refuse(p, &m);
		break;
	case RT_MSG_TOPIC_SETUP:
		rt_relay_on_setup(p, &m);
		break;
	case RT_MSG_TOPIC_READY:
		rt_on_topic_ready(p, &m);
		break;
	case RT_MSG_TOPIC_REFUSED:
		rt_on_topic_refused(p, &m);
		break;
	case RT_MSG_TOPIC_TEARDOWN:
		rt_relay_on_teardown(p, &m);
		break;
	case RT_MSG_TOPIC_LEAVE:
		rt_on_topic_leave(p, &m);
		break;
	case RT_MSG_UNKNOWN:
	case RT_MSG_NUM_TYPES:
		rgaps_warn("peer %s: unknown control message '%s' ignored", rgapsd_peer_name(peer),
			   m.type_name);
		break;
	}
	rt_wire_free(&m);
}

const struct rgapsd_peers_ops rt_peer_ops = {
	.peer_up = on_peer_up,
	.peer_down = on_peer_down,
	.peer_msg = on_peer_msg,
	.peer_gone = on_peer_gone,
};

void rt_on_tick(uv_timer_t *t)
{
	struct rgapsd_remote *rt = t->data;
	uint64_t now = rgaps_now_ns(CLOCK_MONOTONIC);
	bool resetup = false;

	for (struct rt_peer *p = SLIST_FIRST(&rt->peers); p; p = SLIST_NEXT(p, link)) {
		rt_offer_links(p);
		if (p->resetup_at_ns && now >= p->resetup_at_ns) {
			p->resetup_at_ns = 0;
			resetup = true;
		}
	}
	if (resetup)
		rt_reconcile_all(rt); /* creates again the rings that were refused */
	for (struct rt_topic *tt = SLIST_FIRST(&rt->topics); tt; tt = SLIST_NEXT(tt, link))
		rt_waiters_check(tt, false);
}
