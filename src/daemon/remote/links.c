/*
 * Data links (one per peer and transport): the session initiator offers a
 * token for each usable transport (link_offer), the other end accepts
 * (link_accept) and connects to the offerer's data port presenting it; the
 * listener matches the token to the peer (docs/PROTOCOL.md section 4). A lost
 * link takes the rings over it along; the sender then picks another transport
 * if one is up.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "../../common/log.h"
#include "internal.h"

void rt_link_lost(struct rt_peer *p, int tr_idx)
{
	struct rt_link *l = &p->links[tr_idx];

	/* Rings over this link go first (the transport already dropped the link). */
	l->state = LINK_NONE;
	l->link = NULL;
	rt_deferred_drop(p, tr_idx); /* their sender drops its rings over this link too */
	for (uint32_t i = 0; i < RT_RINGS; i++) {
		if (p->out[i] && p->out[i]->tr == tr_idx)
			rt_out_free(p->out[i], false, false);
		if (p->in[i] && p->in[i]->tr == tr_idx)
			rt_in_free(p->in[i]);
	}
}

void rt_on_link_down(void *arg, struct rgaps_link *link, int err, const char *why)
{
	struct rt_transport *tr = arg;
	struct rt_peer *p = rt_peer_of_link(tr->rt, tr->idx, link);

	if (!p)
		return;
	p->link_downs++;
	rgaps_warn("peer %s: %s data link down: %s", rgapsd_peer_name(p->peer), tr->name, why);
	rt_link_lost(p, tr->idx);
	rt_reconcile_all(tr->rt); /* another transport may still carry the topics */
}

void rt_on_link_accepted(void *arg, struct rgaps_link *link,
			 const uint8_t token[RGAPS_LINK_TOKEN_LEN])
{
	struct rt_transport *tr = arg;

	for (struct rt_peer *p = SLIST_FIRST(&tr->rt->peers); p; p = SLIST_NEXT(p, link)) {
		struct rt_link *l = &p->links[tr->idx];

		if (l->state == LINK_OFFERED &&
		    sodium_memcmp(l->token, token, RGAPS_LINK_TOKEN_LEN) == 0) {
			l->link = link;
			l->state = LINK_UP;
			rgaps_info("peer %s: %s data link up (accepted)", rgapsd_peer_name(p->peer),
				   tr->name);
			rt_run_deferred(p, tr->idx);
			rt_reconcile_all(tr->rt);
			return;
		}
	}
	tr->rt->unknown_tokens++;
	rgaps_log_limited(&tr->token_rl, RGAPS_LOG_WARN,
			  "%s: data link with an unknown token refused (a stranger's, or a peer's "
			  "from before a restart)",
			  tr->name);
	tr->lp->ops.transport.close(tr->ctx, link);
}

void rt_on_link_connected(void *arg, struct rgaps_link *link, int status)
{
	struct rt_transport *tr = arg;
	struct rt_peer *p = rt_peer_of_link(tr->rt, tr->idx, link);

	if (!p)
		return;
	if (status) {
		rgaps_warn("peer %s: %s data link failed: %s (retrying)", rgapsd_peer_name(p->peer),
			   tr->name, strerror(-status));
		rt_link_lost(p, tr->idx); /* and the rings attached while it was connecting */
		return;
	}
	p->links[tr->idx].state = LINK_UP;
	rgaps_info("peer %s: %s data link up (connected)", rgapsd_peer_name(p->peer), tr->name);
	rt_reconcile_all(tr->rt);
}

void rt_offer_links(struct rt_peer *p)
{
	struct rgapsd_remote *rt = p->rt;

	if (!p->initiator || !rgapsd_peer_is_up(p->peer))
		return;
	for (int i = 0; i < rt->ntr; i++) {
		struct rt_wire_msg m = { .type = RT_MSG_LINK_OFFER };
		struct rt_link *l = &p->links[i];

		if (!rt->tr[i].usable || l->state != LINK_NONE)
			continue;
		randombytes_buf(l->token, sizeof(l->token));
		l->state = LINK_OFFERED; /* until the peer accepts: then we connect */
		snprintf(m.transport, sizeof(m.transport), "%s", rt->tr[i].name);
		memcpy(m.token, l->token, sizeof(m.token));
		rt_peer_send(p, &m);
	}
}

void rt_on_link_offer(struct rt_peer *p, const struct rt_wire_msg *m)
{
	struct rgapsd_remote *rt = p->rt;
	int i = rt_tr_index(rt, m->transport);
	struct rt_wire_msg r = { .type = RT_MSG_LINK_REFUSE };

	snprintf(r.transport, sizeof(r.transport), "%s", m->transport);
	if (i >= 0 && rt->tr[i].usable) {
		r.type = RT_MSG_LINK_ACCEPT;
		if (p->links[i].state != LINK_NONE)
			rt_link_lost(
				p,
				i); /* a new offer replaces the old link and what waited for it */
		memcpy(p->links[i].token, m->token, sizeof(p->links[i].token));
		p->links[i].state = LINK_OFFERED;
		p->links[i].link = NULL;
	}
	rt_peer_send(p, &r); /* a transport this host lacks is refused, not hostile */
}

void rt_on_link_accept(struct rt_peer *p, const struct rt_wire_msg *m)
{
	struct rgapsd_remote *rt = p->rt;
	int i = rt_tr_index(rt, m->transport);
	char host[256];
	uint16_t port;
	struct rgaps_link *link = NULL;
	int e;

	if (i < 0 || p->links[i].state != LINK_OFFERED) {
		rt_hostile(p, "link_accept for %s, which we did not offer", m->transport);
		return;
	}
	if (rgapsd_hostport_parse(rgapsd_peer_name(p->peer), host, sizeof(host), &port, NULL, 0) !=
	    0)
		return;
	e = rt->tr[i].lp->ops.transport.connect(rt->tr[i].ctx, host,
						(uint16_t)(port + rt->tr[i].port_offset),
						p->links[i].token, &link);
	if (e) {
		rgaps_warn("peer %s: %s connect failed: %s", rgapsd_peer_name(p->peer),
			   rt->tr[i].name, strerror(-e));
		p->links[i].state = LINK_NONE;
		return;
	}
	p->links[i].link = link;
	p->links[i].state = LINK_CONNECTING;
}

void rt_on_link_refuse(struct rt_peer *p, const struct rt_wire_msg *m)
{
	int i = rt_tr_index(p->rt, m->transport);

	if (i >= 0 && p->links[i].state == LINK_OFFERED)
		p->links[i].state = LINK_NONE;
}
