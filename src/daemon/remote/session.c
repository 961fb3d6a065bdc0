/*
 * Peer sessions as the remote path sees them (../peers.c runs the sockets,
 * the handshake and the keepalives): what happens when a peer comes up or
 * goes down, the dispatch of its control messages (docs/PROTOCOL.md section
 * 4) to the rooms that handle them, and the periodic tick (link offers,
 * set-ups asked again, publishers waiting too long).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "internal.h"

void rt_send_subs(struct rt_peer *p)
{
	struct rgapsd_remote *rt = p->rt;
	cJSON *m = rt_msg_new("subs"), *arr = cJSON_AddArrayToObject(m, "topics");

	for (struct rgapsd_topic *t = rt->d->topics; t; t = t->next)
		if (t->local_subs)
			cJSON_AddItemToArray(arr, cJSON_CreateString(t->cfg.name));
	rt_peer_send(p, m);
}

static void on_subs(struct rt_peer *p, const cJSON *m)
{
	struct rgapsd_remote *rt = p->rt;
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(m, "topics"), *it;
	uint32_t n = 0;

	if (!cJSON_IsArray(arr)) {
		rt_hostile(p, "bad subs message");
		return;
	}
	free(p->subs);
	p->subs = calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof(*p->subs));
	p->nsubs = 0;
	cJSON_ArrayForEach(it, arr)
	{
		if (!cJSON_IsString(it) || !rgaps_topic_name_valid(it->valuestring)) {
			rt_hostile(p, "bad topic name in subs");
			return;
		}
		snprintf(p->subs[n++], sizeof(p->subs[0]), "%s", it->valuestring);
	}
	p->nsubs = n;
	rt_reconcile_all(rt);
}

static void on_peer_up(void *ctx, struct rgapsd_peer *peer, bool initiator)
{
	struct rgapsd_remote *rt = ctx;
	struct rt_peer *p = rt_peer_of(rt, peer);

	if (!p)
		return;
	p->initiator = initiator;
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
	/* Tear down in reverse: rings, then the data links (QPs to error, drain, destroy). */
	for (int i = 0; i < TR_NUM; i++) {
		struct rgaps_link *link = p->links[i].link;
		bool had = p->links[i].state == LINK_UP || p->links[i].state == LINK_CONNECTING;

		rt_link_lost(p, i);
		if (had && link)
			rt->tr[i].lp->ops.transport.close(rt->tr[i].ctx, link);
	}
	free(p->subs);
	p->subs = NULL;
	p->nsubs = 0;
	rt_reconcile_all(rt);
}

static void on_peer_msg(void *ctx, struct rgapsd_peer *peer, const char *json, size_t len)
{
	struct rgapsd_remote *rt = ctx;
	struct rt_peer *p = rt_peer_of(rt, peer);
	cJSON *m = rgaps_json_nul_escape(json, len) < 0 ? cJSON_ParseWithLength(json, len) : NULL;
	const char *type = m ? rt_jstr(m, "type") : NULL;

	if (!p) {
		cJSON_Delete(m);
		return;
	}
	if (!type) {
		cJSON_Delete(m);
		rt_hostile(p, "control message without a type");
		return;
	}
	if (strcmp(type, "subs") == 0)
		on_subs(p, m);
	else if (strcmp(type, "link_offer") == 0)
		rt_on_link_offer(p, m);
	else if (strcmp(type, "link_accept") == 0)
		rt_on_link_accept(p, m);
	else if (strcmp(type, "link_refuse") == 0)
		rt_on_link_refuse(p, m);
	else if (strcmp(type, "topic_setup") == 0)
		rt_on_topic_setup(p, m);
	else if (strcmp(type, "topic_ready") == 0)
		rt_on_topic_ready(p, m);
	else if (strcmp(type, "topic_refused") == 0)
		rt_on_topic_refused(p, m);
	else if (strcmp(type, "topic_teardown") == 0)
		rt_on_topic_teardown(p, m);
	else
		rgaps_warn("peer %s: unknown control message '%.32s' ignored",
			   rgapsd_peer_name(peer), type);
	cJSON_Delete(m);
}

const struct rgapsd_peers_ops rt_peer_ops = {
	.peer_up = on_peer_up,
	.peer_down = on_peer_down,
	.peer_msg = on_peer_msg,
};

void rt_on_tick(uv_timer_t *t)
{
	struct rgapsd_remote *rt = t->data;
	uint64_t now = rgaps_now_ns(CLOCK_MONOTONIC);
	bool resetup = false;

	for (struct rt_peer *p = rt->peers; p; p = p->next) {
		rt_offer_links(p);
		if (p->resetup_at_ns && now >= p->resetup_at_ns) {
			p->resetup_at_ns = 0;
			resetup = true;
		}
	}
	if (resetup)
		rt_reconcile_all(rt); /* creates again the rings that were refused */
	for (struct rt_topic *tt = rt->topics; tt; tt = tt->next)
		rt_waiters_check(tt, false);
}
