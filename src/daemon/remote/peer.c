/*
 * One peer daemon as the remote path sees it (struct rt_peer, attached to the
 * session object of ../peers/peers.c): finding it, sending it a control message,
 * and dropping it when it breaks the protocol. Every room above uses these.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "internal.h"

struct rt_peer *rt_peer_of(struct rgapsd_remote *rt, struct rgapsd_peer *peer)
{
	struct rt_peer *p = rgapsd_peer_get_data(peer);

	if (p)
		return p;
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->rt = rt;
	p->peer = peer;
	for (int i = 0; i < rt->ntr; i++)
		STAILQ_INIT(&p->deferred[i]);
	SLIST_INSERT_HEAD(&rt->peers, p, link);
	rgapsd_peer_set_data(peer, p);
	return p;
}

void rt_peer_forget(struct rt_peer *p)
{
	struct rgapsd_remote *rt = p->rt;

	/* peer_down came first: its links, the rings over them and the set-ups that waited
	 * for them are gone. */
	for (uint32_t i = 0; i < RT_RINGS; i++)
		rgaps_require(!p->out[i] && !p->in[i]);
	for (int i = 0; i < rt->ntr; i++)
		rgaps_require(STAILQ_EMPTY(&p->deferred[i]));
	SLIST_REMOVE(&rt->peers, p, rt_peer, link);
	free(p->subs);
	free(p->joined);
	free(p->learned_ns);
	p->subs = NULL;
	p->joined = NULL;
	p->learned_ns = NULL;
	p->nsubs = 0;
	p->peer = NULL;
	p->gone = true;
	if (!p->lingering)
		free(p);
}

void rt_peer_unlinger(struct rt_peer *p)
{
	rgaps_require(p->lingering > 0);
	if (--p->lingering == 0 && p->gone)
		free(p);
}

struct rt_peer *rt_peer_of_link(struct rgapsd_remote *rt, int tr, struct rgaps_link *link)
{
	for (struct rt_peer *p = SLIST_FIRST(&rt->peers); p; p = SLIST_NEXT(p, link))
		if (p->links[tr].link == link && p->links[tr].state != LINK_NONE)
			return p;
	return NULL;
}

uint64_t rt_peer_learned_ns(const struct rt_peer *p, const char *topic)
{
	for (uint32_t i = 0; i < p->nsubs; i++)
		if (strcmp(p->subs[i], topic) == 0)
			return p->learned_ns ? p->learned_ns[i] : UINT64_MAX;
	return UINT64_MAX;
}

bool rt_peer_subscribes(const struct rt_peer *p, const char *topic)
{
	if (!p->subs_fresh)
		return false; /* what it said in a session that ended */
	for (uint32_t i = 0; i < p->nsubs; i++)
		if (strcmp(p->subs[i], topic) == 0)
			return true;
	return false;
}

void rt_peer_send(struct rt_peer *p, const struct rt_wire_msg *m)
{
	char *text = rt_wire_encode(m);
	int e = text ? rgapsd_peer_send(p->peer, text, strlen(text)) : -ENOMEM;

	if (e)
		rgaps_warn("peer %s: %s message dropped: %s", rgapsd_peer_name(p->peer),
			   rt_wire_type_name(m->type), strerror(-e));
	free(text);
}

void rt_hostile(struct rt_peer *p, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	p->hostile++;
	rgaps_warn("peer %s: %s: disconnecting", rgapsd_peer_name(p->peer), why);
	rgapsd_peer_disconnect(p->peer, why);
}

int rt_tr_index(const struct rgapsd_remote *rt, const char *name)
{
	for (int i = 0; name && i < rt->ntr; i++)
		if (strcmp(name, rt->tr[i].name) == 0)
			return i;
	return -1;
}

int rt_pick_transport(const struct rt_peer *p, const struct rgaps_topic_config *tc)
{
	const struct rgapsd_remote *rt = p->rt;
	int want = rt_tr_index(rt, tc->transport);

	if (want >= 0)
		return p->links[want].state == LINK_UP ? want : -1;
	for (int i = 0; i < rt->ntr; i++) /* by priority, highest first */
		if (rt->tr[i].priority && p->links[i].state == LINK_UP)
			return i;
	return -1;
}
