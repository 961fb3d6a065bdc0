/*
 * The transport plugins as the remote path uses them (include/rgaps/plugin.h,
 * "transport"): each is loaded from the plugin directory, its options are
 * checked against what it declares, it is probed, and it listens on its data
 * port (the control port + its offset). Its callbacks are routed to the rooms
 * that handle them: links, sender and receiver.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "internal.h"

void rgapsd_remote_print_options(FILE *f, const struct rgapsd_registry *reg)
{
	fprintf(f,
		"\nTransport options (\"transport_options\": { \"<transport>\": { ... } } in "
		"the daemon's file),\nas the plugins in %s declare them:\n",
		reg->dir);
	if (!reg->n[RGAPS_PLUGIN_TRANSPORT])
		fprintf(f, "\n  (no transport plugins there)\n");
	for (uint32_t i = 0; i < reg->n[RGAPS_PLUGIN_TRANSPORT]; i++) {
		const struct rgaps_plugin_info *pi = &reg->of[RGAPS_PLUGIN_TRANSPORT][i];
		const struct rgaps_plugin_option *o;
		struct rgaps_loaded_plugin *lp;
		char why[256];
		uint32_t n;

		if (rgaps__plugin_load(reg->dir, RGAPS_PLUGIN_TRANSPORT, pi->name, &lp, why,
				       sizeof(why))) {
			fprintf(f, "\n  %s: not available (%s)\n", pi->name, why);
			continue;
		}
		o = rgaps__plugin_options(lp, &n);
		fprintf(f, "\n  %s (priority %u, data port +%u):%s\n", pi->name, pi->priority,
			pi->data_port_offset, n ? "" : " no options");
		for (uint32_t k = 0; k < n; k++)
			fprintf(f,
				"    %s (integer, %llu..%llu)\n        default: %llu\n        %s\n",
				o[k].name, (unsigned long long)o[k].min,
				(unsigned long long)o[k].max, (unsigned long long)o[k].def,
				o[k].doc);
		rgaps__plugin_unload(lp);
	}
}

int rgapsd_remote_check_options(const struct rgapsd_config *cfg, const struct rgapsd_registry *reg,
				char *err, size_t errlen)
{
	cJSON *all = cJSON_Parse(cfg->transport_options), *it;
	int e = 0;

	cJSON_ArrayForEach(it, all)
	{
		struct rgaps_option_value opts[32];
		struct rgaps_loaded_plugin *lp;
		char prefix[64];
		uint32_t n;

		/* The names were checked against the registry (rgapsd_registry_check). */
		e = rgaps__plugin_load(reg->dir, RGAPS_PLUGIN_TRANSPORT, it->string, &lp, err,
				       errlen);
		if (e)
			break;
		snprintf(prefix, sizeof(prefix), "transport_options.%s.", it->string);
		e = rgaps__plugin_options_check(lp, it, prefix, opts, RGAPS_ARRAY_SIZE(opts), &n,
						err, errlen);
		rgaps__plugin_unload(lp);
		if (e)
			break;
	}
	cJSON_Delete(all);
	return e;
}

/* env's conn_pending: a data-port connection from sa, before its token (admission.h). */
static int tr_conn_pending(void *arg, struct rgaps_link *link, const void *sa, uint32_t salen)
{
	struct rt_transport *tr = arg;
	const struct sockaddr *from = sa;
	void *victim;
	int e;

	if (salen < sizeof(from->sa_family))
		return -EINVAL;
	e = rgapsd_admission_admit(&tr->pending, link, from,
				   rgapsd_peers_source_known(tr->rt->pm, from),
				   uv_now(tr->rt->d->loop), &victim);
	if (victim) /* made room for a configured peer's address: nothing is said to it */
		tr->lp->ops.transport.close(tr->ctx, victim);
	return e;
}

/* env's conn_settled: it presented its token (why NULL), or went before. */
static void tr_conn_settled(void *arg, struct rgaps_link *link, const char *why)
{
	struct rt_transport *tr = arg;

	rgapsd_admission_settled(&tr->pending, link, why);
}

/* Load, configure, probe and listen with transport i. *fatal: its options are refused. */
static int load_transport(struct rgapsd_remote *rt, int i, bool *fatal)
{
	struct rt_transport *tr = &rt->tr[i];
	const char *name = tr->name;
	struct rgaps_option_value opts[32];
	struct rgaps_plugin_env env;
	char why[256] = "", host[256], what[sizeof(tr->pending_what)];
	cJSON *all, *mine;
	uint32_t nopts = 0;
	uint16_t port;
	int e;

	all = cJSON_Parse(rt->d->cfg.transport_options);
	mine = cJSON_GetObjectItemCaseSensitive(all, name);
	e = rgaps__plugin_load(rt->d->plugin_dir, RGAPS_PLUGIN_TRANSPORT, name, &tr->lp, why,
			       sizeof(why));
	if (e) {
		rgaps_info("transport %s not available: %s%s", name, why,
			   mine ? " (its transport_options are not used)" : "");
		cJSON_Delete(all);
		return e;
	}
	snprintf(host, sizeof(host), "transport_options.%s.", name);
	e = rgaps__plugin_options_check(tr->lp, mine, host, opts, RGAPS_ARRAY_SIZE(opts), &nopts,
					why, sizeof(why));
	cJSON_Delete(all);
	if (e) {
		rgaps_error("%s: %s", rt->d->cfg.source[0] ? rt->d->cfg.source : "configuration",
			    why);
		*fatal = true;
		rgaps__plugin_unload(tr->lp);
		tr->lp = NULL;
		return e;
	}
	tr->cbs = (struct rgaps_transport_cbs){
		.arg = tr,
		.link_accepted = rt_on_link_accepted,
		.link_connected = rt_on_link_connected,
		.link_down = rt_on_link_down,
		.record_landed = rt_on_record_landed,
		.record_header = rt_on_record_header,
		.record_sent = rt_on_record_sent,
		.head_update = rt_on_head_update,
	};
	rgaps__plugin_env_init(&env, RGAPS_ROLE_DAEMON, rt->d->loop);
	env.options = opts; /* read during init */
	env.noptions = nopts;
	/* Through a copy: at -O0 (the sanitizer builds) GCC's -Wrestrict takes name, which
	 * is tr->name, for a part of the destination. */
	snprintf(what, sizeof(what), "%s data port", name);
	memcpy(tr->pending_what, what, sizeof(what));
	rgapsd_admission_init(&tr->pending, tr->pending_what, rt->d->cfg.peer_max_pending,
			      rt->d->cfg.peer_max_pending_per_source);
	env.conn_pending = tr_conn_pending;
	env.conn_settled = tr_conn_settled;
	env.admit_arg = tr;
	e = tr->lp->ops.transport.init(&env, &tr->cbs, &tr->ctx);
	if (!e)
		e = tr->lp->ops.transport.probe(tr->ctx, why, sizeof(why));
	if (e) {
		rgaps_info("transport %s not usable here: %s", name, why[0] ? why : strerror(-e));
		goto err;
	}
	rgapsd_hostport_parse(rt->d->cfg.listen, host, sizeof(host), &port, NULL, 0);
	e = tr->lp->ops.transport.listen(tr->ctx, host, (uint16_t)(port + tr->port_offset));
	if (e) {
		rgaps_error("transport %s cannot listen on %s:%u: %s", name, host,
			    port + tr->port_offset, strerror(-e));
		goto err;
	}
	tr->usable = true;
	rgaps_info("transport %s: data links on %s:%u", name, host, port + tr->port_offset);
	return 0;
err:
	tr->lp->ops.transport.fini(tr->ctx);
	rgaps__plugin_unload(tr->lp);
	tr->lp = NULL;
	return e;
}

int rt_transports_start(struct rgapsd_remote *rt)
{
	const struct rgapsd_registry *reg = &rt->d->reg;
	struct rgapsd *d = rt->d;
	bool fatal = false;
	char err[512];

	/* Options are refused before any plugin starts. */
	if (rgapsd_remote_check_options(&d->cfg, reg, err, sizeof(err))) {
		rgaps_error("%s: %s", d->cfg.source[0] ? d->cfg.source : "configuration", err);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < reg->n[RGAPS_PLUGIN_TRANSPORT] && rt->ntr < RT_TR_MAX; i++) {
		const struct rgaps_plugin_info *pi = &reg->of[RGAPS_PLUGIN_TRANSPORT][i];
		struct rt_transport *tr = &rt->tr[rt->ntr];

		tr->rt = rt;
		tr->idx = rt->ntr++;
		snprintf(tr->name, sizeof(tr->name), "%s", pi->name);
		tr->priority = pi->priority;
		tr->port_offset = (uint16_t)pi->data_port_offset;
	}
	if (reg->n[RGAPS_PLUGIN_TRANSPORT] > RT_TR_MAX)
		rgaps_warn("%u transport plugins in %s: only the first %d by priority are used",
			   reg->n[RGAPS_PLUGIN_TRANSPORT], reg->dir, RT_TR_MAX);
	for (int i = 0; i < rt->ntr && !fatal; i++)
		load_transport(rt, i, &fatal);
	if (fatal)
		return -EINVAL;
	for (int i = 0; i < rt->ntr; i++)
		if (rt->tr[i].usable)
			return 0;
	rgaps_error("no transport usable: cannot serve peers (transport plugins in %s: %d)",
		    reg->dir, rt->ntr);
	return -ENODEV;
}

void rt_transports_fini(struct rgapsd_remote *rt)
{
	for (int i = 0; i < rt->ntr; i++) {
		if (rt->tr[i].lp)
			rt->tr[i].lp->ops.transport.fini(rt->tr[i].ctx);
		rt->tr[i].ctx = NULL; /* nothing may call into it any more */
		rgapsd_admission_fini(&rt->tr[i].pending);
	}
}

void rt_transports_unload(struct rgapsd_remote *rt)
{
	for (int i = 0; i < rt->ntr; i++) {
		rgaps__plugin_unload(rt->tr[i].lp);
		rt->tr[i].lp = NULL;
	}
}
