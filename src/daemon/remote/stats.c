/*
 * The "peers" section of a `rgaps stats` reply (docs/PROTOCOL.md): sessions
 * and their data links, the transitions of the sender's and the receiver's
 * state machines, every ring and every forwarder. Reads the state; changes
 * nothing.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "../membership.h"
#include "internal.h"

static cJSON *transitions(const uint64_t *m, int n, const char *const *names)
{
	cJSON *o = cJSON_CreateObject();

	for (int a = 0; a < n; a++) {
		for (int b = 0; b < n; b++) {
			char k[48];

			if (!m[a * n + b])
				continue;
			if (a == b)
				snprintf(k, sizeof(k), "->%s", names[b]);
			else
				snprintf(k, sizeof(k), "%s->%s", names[a], names[b]);
			cJSON_AddNumberToObject(o, k, (double)m[a * n + b]);
		}
	}
	return o;
}

/*
 * peers.stages[]: per topic, its stages and how often each point ran and
 * refused, and the time its stages took there in all (ns: from a worker
 * taking the work to its result, an ASYNC stage's wait included).
 */
static void stages_stats(struct rgapsd_remote *rt, cJSON *peers, const char *topic_filter)
{
	cJSON *arr = cJSON_AddArrayToObject(peers, "stages");
	struct rt_stages *st;

	SLIST_FOREACH(st, &rt->stages, link) {
		cJSON *so, *names;

		if (topic_filter && strcmp(topic_filter, st->t->cfg.name) != 0)
			continue;
		so = cJSON_CreateObject();
		cJSON_AddStringToObject(so, "topic", st->t->cfg.name);
		names = cJSON_AddArrayToObject(so, "stages");
		for (uint32_t i = 0; i < st->n; i++)
			cJSON_AddItemToArray(names, cJSON_CreateString(st->s[i].sp->lp->name));
		for (int p = 0; p < RT_POINTS; p++) {
			cJSON *po;

			if (!rt_stages_at(st, 1u << p))
				continue;
			po = cJSON_AddObjectToObject(so, rt_stage_point_names[p]);
			cJSON_AddNumberToObject(po, "runs", (double)st->runs[p]);
			cJSON_AddNumberToObject(po, "failed", (double)st->fails[p]);
			cJSON_AddNumberToObject(po, "ns", (double)st->ns[p]);
		}
		cJSON_AddItemToArray(arr, so);
	}
}

/*
 * peers.sources[]: per topic and origin that this host receives, the peer it
 * comes from now (its parent in the tree), the tree, the children it passes
 * it on to, and what it passed on.
 */
static void sources_stats(struct rgapsd_remote *rt, cJSON *peers, const char *topic_filter)
{
	cJSON *arr = cJSON_AddArrayToObject(peers, "sources");
	struct rt_source *src;

	SLIST_FOREACH(src, &rt->sources, link) {
		char name[RT_RELAY_NAME_MAX];
		cJSON *so, *kids;
		struct rt_out *o;

		if (topic_filter && strcmp(topic_filter, src->topic) != 0)
			continue;
		so = cJSON_CreateObject();
		cJSON_AddStringToObject(so, "topic", src->topic);
		cJSON_AddStringToObject(so, "origin", src->origin);
		cJSON_AddStringToObject(so, "parent",
					src->in ? rgapsd_peer_name(src->in->p->peer) : "");
		cJSON_AddStringToObject(so, "relay",
					rt_relay_mode_name(&src->mode, name, sizeof(name)));
		kids = cJSON_AddArrayToObject(so, "children");
		SLIST_FOREACH(o, &src->outs, in_topic)
			cJSON_AddItemToArray(kids,
					     cJSON_CreateString(rgapsd_peer_name(o->p->peer)));
		/* the first message whose fate its subscribers have not been told yet */
		cJSON_AddNumberToObject(so, "told_next",
					src->in && src->in->have_told ? (double)src->in->told_next
								       : (double)src->next);
		cJSON_AddNumberToObject(so, "relayed", (double)src->relayed);
		cJSON_AddNumberToObject(so, "relayed_bytes", (double)src->relayed_bytes);
		cJSON_AddNumberToObject(so, "relay_drops", (double)src->relay_drops);
		cJSON_AddNumberToObject(so, "relay_restarts", (double)src->relay_aborts);
		cJSON_AddNumberToObject(so, "resent", (double)src->resent);
		cJSON_AddNumberToObject(so, "resend_kept_bytes", (double)src->window.used);
		cJSON_AddNumberToObject(so, "resend_evicted", (double)src->window.evicted);
		cJSON_AddNumberToObject(so, "resend_unkept", (double)src->window.unkept);
		cJSON_AddItemToArray(arr, so);
	}
}

/* A ring's entry in peers.rings[], with the fields both directions have. */
static cJSON *ring_new(cJSON *arr, const struct rgapsd_topic *t, const char *direction,
		       const struct rt_peer *p, int tr, uint32_t id, uint64_t records,
		       uint64_t bytes)
{
	cJSON *ro = cJSON_CreateObject();

	cJSON_AddStringToObject(ro, "topic", t->cfg.name);
	cJSON_AddStringToObject(ro, "direction", direction);
	cJSON_AddStringToObject(ro, "peer", rgapsd_peer_name(p->peer));
	cJSON_AddStringToObject(ro, "transport", p->rt->tr[tr].name);
	cJSON_AddNumberToObject(ro, "ring_id", id);
	cJSON_AddNumberToObject(ro, "records", (double)records);
	cJSON_AddNumberToObject(ro, "bytes", (double)bytes);
	cJSON_AddItemToArray(arr, ro);
	return ro;
}

/* Where the peer is known from, its id (the same on every host) and who connects. */
static void peer_identity(cJSON *po, const struct rgapsd_peer *peer)
{
	unsigned src = rgapsd_peer_sources(peer);
	char id[24];

	snprintf(id, sizeof(id), "%016llx", (unsigned long long)rgapsd_peer_id(peer));
	cJSON_AddStringToObject(po, "id", id);
	cJSON_AddStringToObject(po, "source",
				src == (RGAPSD_PEER_STATIC | RGAPSD_PEER_DISCOVERED) ? "both"
				: src == RGAPSD_PEER_DISCOVERED			   ? "discovered"
										   : "configured");
	cJSON_AddBoolToObject(po, "dials", rgapsd_peer_dials(peer));
}

void rgapsd_remote_stats(struct rgapsd *d, cJSON *reply, const char *topic_filter)
{
	struct rgapsd_remote *rt = d->remote;
	struct rgapsd_peers_stats ps;
	int by_name[RT_TR_MAX];
	cJSON *peers, *topics, *sm;

	if (!rt)
		return;
	/* Links are listed by transport name: a stable order for readers of the JSON. */
	for (int k = 0; k < rt->ntr; k++) {
		int i = k;

		while (i > 0 && strcmp(rt->tr[by_name[i - 1]].name, rt->tr[k].name) > 0) {
			by_name[i] = by_name[i - 1];
			i--;
		}
		by_name[i] = k;
	}
	rgapsd_peers_get_stats(rt->pm, &ps);
	peers = cJSON_AddObjectToObject(reply, "peers");
	/* Where the hosts come from: etcd, or the configured list only. */
	{
		cJSON *mo = cJSON_AddObjectToObject(peers, "membership");

		if (rt->ms) {
			rgapsd_membership_stats(rt->ms, mo);
		} else {
			cJSON_AddStringToObject(mo, "source", "static");
			cJSON_AddNumberToObject(mo, "hosts", rgapsd_peers_count(rt->pm));
		}
	}
	cJSON_AddStringToObject(peers, "listen", d->cfg.listen);
	cJSON_AddNumberToObject(peers, "accepted", (double)ps.accepted);
	cJSON_AddNumberToObject(peers, "auth_failures", (double)ps.auth_failures);
	cJSON_AddNumberToObject(peers, "unknown_peers", (double)ps.unknown_peers);
	cJSON_AddNumberToObject(peers, "protocol_errors", (double)ps.protocol_errors);
	cJSON_AddNumberToObject(peers, "duplicates_closed", (double)ps.duplicates_closed);
	cJSON_AddNumberToObject(peers, "pending_refused", (double)ps.pending_refused);
	cJSON_AddNumberToObject(peers, "pending_refused_source", (double)ps.pending_refused_source);
	cJSON_AddNumberToObject(peers, "pending_evicted", (double)ps.pending_evicted);
	cJSON_AddNumberToObject(peers, "hello_timeouts", (double)ps.hello_timeouts);
	cJSON_AddNumberToObject(peers, "stall_excused", (double)ps.stall_excused);
	cJSON_AddNumberToObject(peers, "unknown_link_tokens", (double)rt->unknown_tokens);
	{ /* what the data ports hold of connections that have not presented a token */
		cJSON *dp = cJSON_AddObjectToObject(peers, "data_ports");

		for (int k = 0; k < rt->ntr; k++) {
			const struct rt_transport *tr = &rt->tr[by_name[k]];
			const struct rgapsd_admission_stats *as = &tr->pending.st;
			cJSON *o;

			if (!tr->usable)
				continue;
			o = cJSON_AddObjectToObject(dp, tr->name);
			cJSON_AddNumberToObject(o, "pending", as->pending);
			cJSON_AddNumberToObject(o, "pending_refused", (double)as->refused);
			cJSON_AddNumberToObject(o, "pending_refused_source",
						(double)as->refused_source);
			cJSON_AddNumberToObject(o, "pending_evicted", (double)as->evicted);
			cJSON_AddNumberToObject(o, "dropped", (double)as->dropped);
		}
	}
	cJSON *arr = cJSON_AddArrayToObject(peers, "sessions");
	for (struct rt_peer *p = SLIST_FIRST(&rt->peers); p; p = SLIST_NEXT(p, link)) {
		struct rgapsd_peer_stats st;
		cJSON *po = cJSON_CreateObject(), *links;

		rgapsd_peer_get_stats(p->peer, &st);
		cJSON_AddStringToObject(po, "name", rgapsd_peer_name(p->peer));
		cJSON_AddBoolToObject(po, "up", st.up);
		peer_identity(po, p->peer);
		cJSON_AddNumberToObject(po, "sessions", (double)st.sessions);
		cJSON_AddNumberToObject(po, "reconnects", (double)st.reconnects);
		cJSON_AddNumberToObject(po, "rtt_ms", st.rtt_ms);
		cJSON_AddNumberToObject(po, "hostile", (double)p->hostile);
		cJSON_AddNumberToObject(po, "link_downs", (double)p->link_downs);
		cJSON_AddNumberToObject(po, "setup_refusals", (double)p->setup_refusals);
		cJSON_AddNumberToObject(po, "setups_deferred", (double)p->setups_deferred);
		cJSON_AddNumberToObject(po, "duplicates", (double)p->duplicates);
		cJSON_AddNumberToObject(po, "tree_refusals", (double)p->tree_refusals);
		cJSON_AddNumberToObject(po, "rings_left", (double)p->leaves);
		cJSON *subs = cJSON_AddArrayToObject(po, "subscribes");
		for (uint32_t i = 0; p->subs_fresh && i < p->nsubs; i++)
			cJSON_AddItemToArray(subs, cJSON_CreateString(p->subs[i]));
		links = cJSON_AddObjectToObject(po, "links");
		for (int k = 0; k < rt->ntr; k++) {
			static const char *const ls[] = { "none", "offered", "connecting", "up" };
			struct rgaps_link_stats lst;
			int i = by_name[k];
			cJSON *lo = cJSON_AddObjectToObject(links, rt->tr[i].name);

			cJSON_AddStringToObject(lo, "state", ls[p->links[i].state]);
			if (p->links[i].state != LINK_UP)
				continue;
			rt->tr[i].lp->ops.transport.link_stats(rt->tr[i].ctx, p->links[i].link,
							       &lst);
			cJSON_AddNumberToObject(lo, "records_sent", (double)lst.records_sent);
			cJSON_AddNumberToObject(lo, "bytes_sent", (double)lst.bytes_sent);
			cJSON_AddNumberToObject(lo, "records_landed", (double)lst.records_landed);
			cJSON_AddNumberToObject(lo, "bytes_landed", (double)lst.bytes_landed);
			cJSON_AddNumberToObject(lo, "send_credit_stalls",
						(double)lst.send_credit_stalls);
			cJSON_AddNumberToObject(lo, "cq_events", (double)lst.cq_events);
			cJSON_AddNumberToObject(lo, "cq_polls_busy", (double)lst.cq_polls_busy);
			cJSON_AddNumberToObject(lo, "cq_overflows", (double)lst.cq_overflows);
			cJSON_AddNumberToObject(lo, "records_late", (double)lst.records_late);
			/* sends that left the source without a copy, and those copied anyway */
			cJSON_AddNumberToObject(lo, "zc_sends", (double)lst.zc_sends);
			cJSON_AddNumberToObject(lo, "zc_copied", (double)lst.zc_copied);
		}
		cJSON_AddItemToArray(arr, po);
	}
	{ /* the loop's polling while GPU copies are in flight (copy_spin_us) */
		cJSON *cs = cJSON_AddObjectToObject(peers, "copy_spin");

		cJSON_AddNumberToObject(cs, "us", (double)(rt->copy_spin_ns / 1000));
		cJSON_AddNumberToObject(cs, "in_flight",
					(double)__atomic_load_n(&rt->copies_in_flight,
								__ATOMIC_RELAXED));
		cJSON_AddNumberToObject(cs, "rounds", (double)rt->copy_spin_rounds);
		cJSON_AddNumberToObject(cs, "timeouts", (double)rt->copy_spin_timeouts);
	}
	sm = cJSON_AddObjectToObject(peers, "state_machine");
	cJSON_AddItemToObject(
		sm, "sender",
		transitions(&rt->out_trans[0][0], OUT_NUM_STATES, rt_out_state_names));
	cJSON_AddItemToObject(
		sm, "sender_chunks",
		transitions(&rt->chunk_trans[0][0], CHUNK_NUM_STATES, rt_chunk_state_names));
	cJSON_AddItemToObject(sm, "receiver",
			      transitions(&rt->in_trans[0][0], IN_NUM_STATES, rt_in_state_names));

	topics = cJSON_AddArrayToObject(peers, "rings");
	for (struct rt_peer *p = SLIST_FIRST(&rt->peers); p; p = SLIST_NEXT(p, link)) {
		for (uint32_t i = 0; i < RT_RINGS; i++) {
			struct rt_out *o = p->out[i];
			struct rt_in *in = p->in[i];
			cJSON *ro;

			if (o && (!topic_filter || strcmp(topic_filter, o->tt->t->cfg.name) == 0)) {
				ro = ring_new(topics, o->tt->t, "out", p, o->tr, o->id, o->records,
					      o->bytes);
				cJSON_AddBoolToObject(ro, "ready", o->state == OUT_RING_READY);
				cJSON_AddNumberToObject(ro, "ring_stalls", (double)o->ring_stalls);
				cJSON_AddNumberToObject(ro, "credit_stalls",
							(double)o->credit_stalls);
				cJSON_AddNumberToObject(ro, "dropped_messages",
							(double)o->dropped_msgs);
				cJSON_AddNumberToObject(ro, "loss_notices",
							(double)o->loss_notices);
				cJSON_AddNumberToObject(ro, "resent", (double)o->resent);
				cJSON_AddNumberToObject(ro, "ring_used",
							(double)rt_ring_sender_used(&o->ring));
			}
			if (in &&
			    (!topic_filter || strcmp(topic_filter, in->topic->cfg.name) == 0)) {
				ro = ring_new(topics, in->topic, "in", p, in->tr, in->id,
					      in->records, in->bytes);
				cJSON_AddNumberToObject(ro, "messages", (double)in->messages);
				cJSON_AddNumberToObject(ro, "upstream_gaps",
							(double)in->upstream_gaps);
				cJSON_AddNumberToObject(ro, "refused", (double)in->refused);
				cJSON_AddNumberToObject(ro, "blocked_retries",
							(double)in->blocked_retries);
				cJSON_AddNumberToObject(ro, "stage_drops", (double)in->stage_drops);
				cJSON_AddNumberToObject(ro, "loss_notices",
							(double)in->loss_notices);
				cJSON_AddNumberToObject(ro, "gap_reports", (double)in->gap_reports);
				cJSON_AddNumberToObject(ro, "duplicates", (double)in->duplicates);
				/* chunks received straight into their pool block (no copy) */
				cJSON_AddNumberToObject(ro, "direct_records",
							(double)in->direct_records);
				cJSON_AddNumberToObject(ro, "direct_bytes",
							(double)in->direct_bytes);
				cJSON_AddNumberToObject(
					ro, "ring_used",
					(double)rt_ring_receiver_used(&in->ring));
			}
		}
	}
	cJSON *fw = cJSON_AddArrayToObject(peers, "forwarders");
	for (struct rt_topic *tt = SLIST_FIRST(&rt->topics); tt; tt = SLIST_NEXT(tt, link)) {
		cJSON *fo;

		if (topic_filter && strcmp(topic_filter, tt->t->cfg.name) != 0)
			continue;
		fo = cJSON_CreateObject();
		cJSON_AddStringToObject(fo, "topic", tt->t->cfg.name);
		cJSON_AddNumberToObject(fo, "forwarded", (double)tt->forwarded);
		cJSON_AddNumberToObject(fo, "skipped_remote_origin", (double)tt->skipped_remote);
		cJSON_AddNumberToObject(fo, "no_interested_peer", (double)tt->unsent_no_peer);
		cJSON_AddNumberToObject(fo, "too_large_for_ring", (double)tt->too_large);
		cJSON_AddNumberToObject(fo, "stage_drops", (double)tt->stage_drops);
		cJSON_AddBoolToObject(fo, "staged", tt->staged);
		cJSON_AddNumberToObject(fo, "staged_chunks", (double)tt->staged_chunks);
		cJSON_AddNumberToObject(fo, "staged_bytes", (double)tt->staged_bytes);
		{
			uint64_t kept = 0;
			struct rt_kept *k;

			TAILQ_FOREACH(k, &tt->window.kept, link)
				kept++;
			cJSON_AddNumberToObject(fo, "resend_kept", (double)kept);
		}
		cJSON_AddNumberToObject(fo, "resend_kept_bytes", (double)tt->window.used);
		cJSON_AddNumberToObject(fo, "resend_evicted", (double)tt->window.evicted);
		cJSON_AddNumberToObject(fo, "resend_unkept", (double)tt->window.unkept);
		cJSON_AddNumberToObject(fo, "resent", (double)tt->resent);
		cJSON_AddNumberToObject(fo, "sent_from_copy", (double)tt->from_copy);
		cJSON_AddNumberToObject(fo, "pool_pinned", tt->pool_msgs);
		if (tt->mode_set) {
			char name[RT_RELAY_NAME_MAX];

			cJSON_AddStringToObject(fo, "relay",
						rt_relay_mode_name(&tt->mode, name, sizeof(name)));
			cJSON_AddStringToObject(fo, "relay_why", tt->mode_why);
		}
		cJSON_AddItemToArray(fw, fo);
	}
	sources_stats(rt, peers, topic_filter);
	stages_stats(rt, peers, topic_filter);
}
