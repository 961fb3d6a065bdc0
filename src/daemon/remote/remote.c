/*
 * The remote path of rgapsd (../remote.h has the picture; internal.h the map
 * of this folder): start and stop, and the hooks through which the rest of
 * the daemon tells it about local subscribers, publishers and topics.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "../../common/log.h"
#include "../membership.h"
#include "internal.h"
#include "rgaps_build_config.h"

/* ================================================================ the membership */

/*
 * What this daemon says of itself under the prefix (docs/PROTOCOL.md section 6): its
 * name, its data ports, the GPUs of the memory plugins loaded so far, the topics it
 * has subscribers for. 0 or -ENOMEM (r freed).
 */
static int self_record(struct rgapsd_remote *rt, struct rgapsd_host_record *r)
{
	struct rgapsd *d = rt->d;
	uint16_t port = 0;
	uint32_t n = 0;

	memset(r, 0, sizeof(*r));
	snprintf(r->name, sizeof(r->name), "%s", d->cfg.listen);
	snprintf(r->version, sizeof(r->version), "%s", RGAPS_VERSION);
	if (gethostname(r->hostname, sizeof(r->hostname) - 1) != 0)
		r->hostname[0] = '\0';
	r->pid = (uint32_t)getpid();
	rgapsd_hostport_parse(d->cfg.listen, NULL, 0, &port, NULL, 0);
	for (int i = 0; i < rt->ntr && r->ntransports < MS_TRANSPORTS_MAX; i++) {
		struct rgapsd_host_transport *t = &r->transports[r->ntransports];

		if (!rt->tr[i].usable)
			continue;
		snprintf(t->name, sizeof(t->name), "%s", rt->tr[i].name);
		t->port = (uint16_t)(port + rt->tr[i].port_offset);
		r->ntransports++;
	}
	for (uint32_t i = 0; i < d->nmem_plugins; i++) {
		struct rgaps_mem_topology topo = { .struct_size = sizeof(topo) };
		struct rgaps_loaded_plugin *lp = d->mem_plugins[i];

		if (lp->ops.memory.topology(lp->ctx, &topo) != 0)
			continue;
		for (uint32_t g = 0; g < topo.ndevices && g < RGAPS_MEM_MAX_DEVICES &&
				     r->ngpus < MS_GPUS_MAX; g++)
			if (topo.pci[g][0])
				snprintf(r->gpus[r->ngpus++], sizeof(r->gpus[0]), "%.15s",
					 topo.pci[g]);
	}
	for (struct rgapsd_topic *t = d->topics; t; t = t->next)
		n += t->local_subs > 0;
	n = RGAPS_MIN(n, (uint32_t)MS_TOPICS_MAX);
	r->topics = calloc(n + 1, sizeof(*r->topics));
	if (!r->topics)
		return -ENOMEM;
	for (struct rgapsd_topic *t = d->topics; t && r->ntopics < n; t = t->next)
		if (t->local_subs)
			snprintf(r->topics[r->ntopics++], sizeof(r->topics[0]), "%s", t->cfg.name);
	return 0;
}

static int membership_start(struct rgapsd_remote *rt)
{
	struct rgapsd_host_record self;
	int e;

	if (!rt->d->cfg.discovery.nendpoints)
		return 0;
	e = self_record(rt, &self);
	if (!e)
		e = rgapsd_membership_start(rt->d->loop, &rt->d->cfg.discovery, rt->pm, &self,
					    &rt->ms);
	rgapsd_host_record_free(&self);
	return e;
}

static void membership_update(struct rgapsd_remote *rt)
{
	struct rgapsd_host_record self;

	if (!rt->ms || self_record(rt, &self) != 0)
		return;
	rgapsd_membership_update(rt->ms, &self);
	rgapsd_host_record_free(&self);
}

/* ================================================================ daemon hooks */

void rgapsd_remote_subscribers_changed(struct rgapsd *d, struct rgapsd_topic *t)
{
	struct rgapsd_remote *rt = d->remote;

	if (!rt)
		return;
	rt_relay_subscribed(rt, t);
	for (struct rt_peer *p = SLIST_FIRST(&rt->peers); p; p = SLIST_NEXT(p, link))
		if (rgapsd_peer_is_up(p->peer))
			rt_send_subs(p);
	membership_update(rt);
	rt_reconcile_topic(rt, t); /* this host came into, or left, the topic's relay trees */
}

bool rgapsd_remote_publisher_attach(struct rgapsd *d, struct rgapsd_topic *t,
				    void (*done)(void *arg, int status), void *arg)
{
	struct rgapsd_remote *rt = d->remote;
	struct rt_topic *tt;
	bool preparing = false;

	t->publishers_seen = true;
	if (!rt)
		return false;
	rt_reconcile_topic(rt, t);
	tt = rt_topic_of(rt, t, false);
	for (struct rt_out *o = tt ? SLIST_FIRST(&tt->outs) : NULL; o; o = SLIST_NEXT(o, in_topic))
		if (o->state == OUT_RING_PREPARING)
			preparing = true;
	if (!preparing)
		return false;
	return rt_waiter_add(tt, done, arg) == 0;
}

void rgapsd_remote_cancel_attach(struct rgapsd *d, void *arg)
{
	if (d->remote)
		rt_waiters_cancel(d->remote, arg);
}

/*
 * The sender's state of t: held while it sends this host's messages, or
 * passes on another's; a relay's that does neither any more goes now (its
 * topic may then be removed without a word to the remote path).
 */
static bool topic_sent(struct rgapsd_remote *rt, struct rgapsd_topic *t)
{
	struct rt_topic *tt = rt_topic_of(rt, t, false);

	if (!tt)
		return false;
	if (t->publishers_seen || tt->nrings || tt->nrelayed || !SLIST_EMPTY(&tt->waiters))
		return true;
	rt_sender_topic_gone(tt);
	return false;
}

/*
 * The topic_held hook: does the remote path hold topic t - its sender side
 * (forwarder, rings to peers, messages it passes on), a source or a ring
 * landing into it, its stages, or a peer's interest in it?
 */
static bool topic_held(void *ctx, struct rgapsd_topic *t)
{
	struct rgapsd *d = ctx;
	struct rgapsd_remote *rt = d->remote;
	struct rt_stages *st;

	if (!rt)
		return false;
	if (rt_sources_hold(rt, t) || topic_sent(rt, t))
		return true;
	for (struct rt_peer *p = SLIST_FIRST(&rt->peers); p; p = SLIST_NEXT(p, link)) {
		for (uint32_t i = 0; i < RT_RINGS; i++)
			if (p->in[i] && p->in[i]->topic == t)
				return true;
		if (rt_peer_subscribes(p, t->cfg.name))
			return true;
	}
	SLIST_FOREACH(st, &rt->stages, link)
		if (st->t == t)
			return true;
	return false;
}

void rgapsd_remote_topic_gone(struct rgapsd *d, struct rgapsd_topic *t)
{
	struct rgapsd_remote *rt = d->remote;
	struct rt_topic *tt;

	if (!rt)
		return;
	for (struct rt_peer *p = SLIST_FIRST(&rt->peers); p; p = SLIST_NEXT(p, link))
		for (uint32_t i = 0; i < RT_RINGS; i++)
			if (p->in[i] && p->in[i]->topic == t)
				rt_in_teardown(p->in[i]);
	rt_relay_topic_gone(rt, t);
	tt = rt_topic_of(rt, t, false);
	if (tt)
		rt_sender_topic_gone(tt);
	rt_sources_topic_gone(rt, t);
	rt_stages_topic_gone(rt, t);
}

/* Drop m's pool registrations (the sender's pool_mr) with every transport. */
static void member_dereg(struct rgapsd_remote *rt, struct rgapsd_member *m)
{
	for (int i = 0; i < RT_TR_MAX; i++) {
		if (!m->pool_mr[i])
			continue;
		if (rt && rt->tr[i].lp && rt->tr[i].ctx)
			rt->tr[i].lp->ops.transport.dereg_local(rt->tr[i].ctx, m->pool_mr[i]);
		m->pool_mr[i] = NULL;
	}
}

/* The member_gone hook: a publisher's pool is about to be released. */
static void member_gone(void *ctx, struct rgapsd_member *m)
{
	struct rgapsd *d = ctx;

	member_dereg(d->remote ? d->remote : d->remote_dead, m);
}

static const struct rgapsd_topic_hooks topic_hooks = {
	.member_gone = member_gone,
	.topic_held = topic_held,
};

/* Before the transports go: every pool they registered, of members that outlive them. */
static void dereg_all_pools(struct rgapsd *d, struct rgapsd_remote *rt)
{
	for (struct rgapsd_topic *t = d->topics; t; t = t->next) {
		for (uint32_t k = 0; t->pubs && k < t->lim.max_publishers; k++)
			if (t->pubs[k])
				member_dereg(rt, t->pubs[k]);
		for (uint32_t k = 0; k < t->ngone; k++)
			member_dereg(rt, t->gone[k]);
	}
}

/* ================================================================ start / stop */

/* Stage workers: one per CPU, 1 to 4 (stages run beside the loop and the copies). */
static unsigned stage_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > 4 ? 4 : (unsigned)n;
}

int rgapsd_remote_start(struct rgapsd *d)
{
	struct rgapsd_peers_config pc = { 0 };
	const char *peers[RGAPS_CFG_MAX_PEERS];
	struct rgapsd_remote *rt;
	char err[512];
	int e, n;

	if (!d->cfg.listen[0])
		return 0;
	rgapsd_topics_hook(d, &topic_hooks, d);
	if (!d->cfg.key_file[0]) {
		rgaps_error(
			"\"listen\" needs \"key_file\": peers authenticate with a pre-shared key");
		return -EINVAL;
	}
	if (sodium_init() < 0)
		return -EIO;
	rt = calloc(1, sizeof(*rt));
	if (!rt)
		return -ENOMEM;
	rt->d = d;
	SLIST_INIT(&rt->peers);
	SLIST_INIT(&rt->topics);
	SLIST_INIT(&rt->sources);
	rt_relay_init(rt);
	SLIST_INIT(&rt->stage_plugins);
	SLIST_INIT(&rt->stages);
	n = rgapsd_peers_load_key(d->cfg.key_file, rt->key, sizeof(rt->key), err, sizeof(err));
	if (n < 0) {
		rgaps_error("key file: %s", err);
		free(rt);
		return n;
	}
	rt->keylen = (size_t)n;
	e = rgapsd_mailbox_init(d->loop, &rt->mb);
	if (e) {
		free(rt);
		return e;
	}
	e = rgapsd_worker_start(&rt->worker, &rt->mb, "rgapsd-copy", 1);
	if (e)
		goto err_mb;
	e = rgapsd_worker_start(&rt->stage_pool, &rt->mb, "rgapsd-stage", stage_threads());
	if (e) {
		rgapsd_worker_stop(&rt->worker);
		goto err_mb;
	}
	e = rgapsd_worker_start(&rt->keeper, &rt->mb, "rgapsd-keep", 1);
	if (e) {
		rgapsd_worker_stop(&rt->stage_pool);
		rgapsd_worker_stop(&rt->worker);
		goto err_mb;
	}
	e = rt_transports_start(rt);
	if (e)
		goto err_worker;
	for (uint32_t i = 0; i < d->cfg.npeers; i++)
		peers[i] = d->cfg.peers[i];
	pc.listen = d->cfg.listen;
	pc.peers = peers;
	pc.npeers = d->cfg.npeers;
	pc.key = rt->key;
	pc.keylen = rt->keylen;
	pc.keepalive_ms = d->cfg.keepalive_ms;
	pc.max_pending = d->cfg.peer_max_pending;
	pc.max_pending_per_source = d->cfg.peer_max_pending_per_source;
	pc.hello_timeout_ms = d->cfg.peer_hello_timeout_ms;
	pc.lag = &d->lag;
	d->remote = rt;
	e = rgapsd_peers_start(d->loop, &pc, &rt_peer_ops, rt, &rt->pm);
	/* The peer manager holds the only copy it needs, in guarded memory: wipe ours. */
	sodium_memzero(rt->key, sizeof(rt->key));
	if (e) {
		rgaps_error("cannot serve peers on %s: %s", d->cfg.listen, strerror(-e));
		d->remote = NULL;
		goto err_worker;
	}
	e = membership_start(rt);
	if (e) {
		rgaps_error("cannot keep the membership in etcd: %s", strerror(-e));
		rgapsd_peers_stop(rt->pm);
		rt->pm = NULL;
		d->remote = NULL;
		goto err_worker;
	}
	uv_timer_init(d->loop, &rt->tick);
	uv_timer_init(d->loop, &rt->retry);
	rt_copies_init(rt, d->loop, d->cfg.copy_spin_us);
	rt->tick.data = rt->retry.data = rt;
	uv_timer_start(&rt->tick, rt_on_tick, RT_TICK_MS, RT_TICK_MS);
	rgaps_info("peers: listening on %s, %u configured%s", d->cfg.listen, d->cfg.npeers,
		   rt->ms ? ", the others from etcd" : "");
	return 0;

err_worker:
	rgapsd_worker_stop(&rt->keeper);
	rgapsd_worker_stop(&rt->stage_pool);
	rgapsd_worker_stop(&rt->worker);
	rt_transports_fini(rt);
	rt_transports_unload(rt);
err_mb:
	rgapsd_mailbox_close(&rt->mb);
	sodium_memzero(rt->key, sizeof(rt->key));
	d->remote_dead = rt; /* its async handle closes with the loop; freed in rgapsd_fini */
	return e;
}

void rgapsd_remote_stop(struct rgapsd *d)
{
	struct rgapsd_remote *rt = d->remote;

	if (!rt)
		return;
	/* Forwarders first (they post to the mailbox), then sessions, links, transports. */
	for (struct rt_topic *tt = SLIST_FIRST(&rt->topics); tt; tt = SLIST_NEXT(tt, link))
		rt_forwarder_stop(tt);
	rgapsd_worker_stop(&rt->keeper);
	rgapsd_worker_stop(&rt->stage_pool);
	rgapsd_worker_stop(&rt->worker);
	rgapsd_mailbox_close(&rt->mb); /* runs what the forwarders and the workers posted */
	rgapsd_membership_stop(rt->ms); /* the lease goes: the others drop us at once */
	rt->ms = NULL;
	rgapsd_peers_stop(rt->pm);     /* peer_down for each: rings and links go */
	while (!SLIST_EMPTY(&rt->topics))
		rgapsd_remote_topic_gone(d, SLIST_FIRST(&rt->topics)->t);
	rt_stages_stop(rt);
	dereg_all_pools(d, rt); /* the topics and their members outlive the transports */
	/* fini closes the plugins' uv handles; their close callbacks live in the plugins,
	 * so the modules are unloaded only in rgapsd_remote_free, after the loop ran. */
	rt_transports_fini(rt);
	while (!SLIST_EMPTY(&rt->peers)) {
		struct rt_peer *p = SLIST_FIRST(&rt->peers);

		SLIST_REMOVE_HEAD(&rt->peers, link);
		for (int i = 0; i < rt->ntr; i++)
			rt_deferred_drop(p, i);
		free(p->subs);
		free(p->joined);
		free(p->learned_ns);
		free(p);
	}
	rt_sources_free(rt);
	rt_relay_free(rt);
	uv_close((uv_handle_t *)&rt->tick, NULL);
	uv_close((uv_handle_t *)&rt->retry, NULL);
	rt_copies_fini(rt);
	sodium_memzero(rt->key, sizeof(rt->key));
	/* rt itself is freed in rgapsd_fini, after the loop closed its handles. */
}

void rgapsd_remote_free(struct rgapsd *d)
{
	rgapsd_topics_hook(d, NULL, NULL);
	if (d->remote)
		rt_transports_unload(d->remote);
	free(d->remote);
	free(d->remote_dead);
	d->remote = NULL;
	d->remote_dead = NULL;
}
