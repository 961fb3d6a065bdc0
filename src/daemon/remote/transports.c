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


void rgapsd_remote_print_options(FILE *f, const char *plugin_dir)
{
	fprintf(f, "\nTransport options (\"transport_options\": { \"<transport>\": { ... } } in "
		   "the daemon's file),\nas the plugins in %s declare them:\n", plugin_dir);
	for (int i = 0; i < TR_NUM; i++) {
		const struct rgaps_plugin_option *o;
		struct rgaps_loaded_plugin *lp;
		char why[256];
		uint32_t n;

		if (rgaps__plugin_load(plugin_dir, RGAPS_PLUGIN_TRANSPORT, rt_tr_names[i], &lp, why,
				       sizeof(why))) {
			fprintf(f, "\n  %s: not available (%s)\n", rt_tr_names[i], why);
			continue;
		}
		o = rgaps__plugin_options(lp, &n);
		fprintf(f, "\n  %s:%s\n", rt_tr_names[i], n ? "" : " no options");
		for (uint32_t k = 0; k < n; k++)
			fprintf(f, "    %s (integer, %llu..%llu)\n        default: %llu\n        %s\n",
				o[k].name, (unsigned long long)o[k].min,
				(unsigned long long)o[k].max, (unsigned long long)o[k].def,
				o[k].doc);
		rgaps__plugin_unload(lp);
	}
}

int rgapsd_remote_check_options(const struct rgapsd_config *cfg, const char *plugin_dir,
				char *err, size_t errlen)
{
	cJSON *all = cJSON_Parse(cfg->transport_options), *it;
	int e = 0;

	cJSON_ArrayForEach(it, all)
	{
		struct rgaps_option_value opts[32];
		struct rgaps_loaded_plugin *lp;
		char why[256], prefix[64];
		uint32_t n;

		if (rt_tr_index(it->string) < 0) {
			snprintf(err, errlen, "key 'transport_options.%s': no transport of that name "
				 "(tcp, verbs)", it->string);
			e = -EINVAL;
			break;
		}
		if (rgaps__plugin_load(plugin_dir, RGAPS_PLUGIN_TRANSPORT, it->string, &lp, why,
				       sizeof(why)))
			continue; /* not on this host: its options are not used (logged at start) */
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

/* Load, configure, probe and listen with transport i. *fatal: its options are refused. */
static int load_transport(struct rgapsd_remote *rt, int i, bool *fatal)
{
	struct rt_transport *tr = &rt->tr[i];
	struct rgaps_option_value opts[32];
	struct rgaps_plugin_env env;
	char why[256] = "", host[256];
	cJSON *all, *mine;
	uint32_t nopts = 0;
	uint16_t port;
	int e;

	tr->rt = rt;
	tr->idx = i;
	all = cJSON_Parse(rt->d->cfg.transport_options);
	mine = cJSON_GetObjectItemCaseSensitive(all, rt_tr_names[i]);
	e = rgaps__plugin_load(rt->d->plugin_dir, RGAPS_PLUGIN_TRANSPORT, rt_tr_names[i], &tr->lp, why,
			       sizeof(why));
	if (e) {
		rgaps_info("transport %s not available: %s%s", rt_tr_names[i], why,
			   mine ? " (its transport_options are not used)" : "");
		cJSON_Delete(all);
		return e;
	}
	snprintf(host, sizeof(host), "transport_options.%s.", rt_tr_names[i]);
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
		.record_sent = rt_on_record_sent,
		.head_update = rt_on_head_update,
	};
	rgaps__plugin_env_init(&env, RGAPS_ROLE_DAEMON, rt->d->loop);
	env.options = opts; /* read during init */
	env.noptions = nopts;
	e = tr->lp->ops.transport.init(&env, &tr->cbs, &tr->ctx);
	if (!e)
		e = tr->lp->ops.transport.probe(tr->ctx, why, sizeof(why));
	if (e) {
		rgaps_info("transport %s not usable here: %s", rt_tr_names[i],
			   why[0] ? why : strerror(-e));
		goto err;
	}
	rgapsd_parse_hostport(rt->d->cfg.listen, host, sizeof(host), &port);
	e = tr->lp->ops.transport.listen(tr->ctx, host, (uint16_t)(port + rt_tr_port_offset[i]));
	if (e) {
		rgaps_error("transport %s cannot listen on %s:%u: %s", rt_tr_names[i], host,
			    port + rt_tr_port_offset[i], strerror(-e));
		goto err;
	}
	tr->usable = true;
	rgaps_info("transport %s: data links on %s:%u", rt_tr_names[i], host,
		   port + rt_tr_port_offset[i]);
	return 0;
err:
	tr->lp->ops.transport.fini(tr->ctx);
	rgaps__plugin_unload(tr->lp);
	tr->lp = NULL;
	return e;
}

int rt_transports_start(struct rgapsd_remote *rt)
{
	struct rgapsd *d = rt->d;
	bool fatal = false;
	char err[512];

	/* Unknown transports and options are refused before any plugin starts. */
	if (rgapsd_remote_check_options(&d->cfg, d->plugin_dir, err, sizeof(err))) {
		rgaps_error("%s: %s", d->cfg.source[0] ? d->cfg.source : "configuration", err);
		return -EINVAL;
	}
	for (int i = 0; i < TR_NUM && !fatal; i++)
		load_transport(rt, i, &fatal);
	if (fatal)
		return -EINVAL;
	for (int i = 0; i < TR_NUM; i++)
		if (rt->tr[i].usable)
			return 0;
	rgaps_error("no transport usable: cannot serve peers");
	return -ENODEV;
}

void rt_transports_fini(struct rgapsd_remote *rt)
{
	for (int i = 0; i < TR_NUM; i++)
		if (rt->tr[i].lp)
			rt->tr[i].lp->ops.transport.fini(rt->tr[i].ctx);
}

void rt_transports_unload(struct rgapsd_remote *rt)
{
	for (int i = 0; i < TR_NUM; i++) {
		rgaps__plugin_unload(rt->tr[i].lp);
		rt->tr[i].lp = NULL;
	}
}
