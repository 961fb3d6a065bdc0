/*
 * rgapsd start-up and shutdown: the instance label, the control server,
 * signal handling. Everything here runs on the loop thread. There is nothing
 * to clean up from a predecessor: rgapsd's shared memory has no names, so a
 * crashed daemon leaves none behind, and its clients see its connection close.
 */
#include "daemon.h"
#include "metrics.h"
#include "rgaps_build_config.h"

#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../common/futex.h"
#include "../common/log.h"
#include "notify.h"
#include "remote.h"

/* The instance label (logs, stats, rgaps-top) from the socket path: one per socket. */
static void derive_instance(const char *path, char *out, size_t len)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (const char *p = path; *p; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	snprintf(out, len, "%08x", h);
}

static void on_signal(uv_signal_t *s, int signum)
{
	struct rgapsd *d = s->data;

	rgaps_info("signal %d: shutting down", signum);
	rgapsd_shutdown(d);
}

/* socket_group: a name from the group database, or a number. 0 or -errno, with the reason logged. */
static int resolve_group(const char *name, gid_t *gid_p)
{
	struct group gr, *res = NULL;
	char buf[4096], *end;
	unsigned long v;
	int rc;

	errno = 0;
	v = strtoul(name, &end, 10);
	if (*name && !*end && errno == 0 && v < (gid_t)-1) {
		*gid_p = (gid_t)v;
		return 0;
	}
	rc = getgrnam_r(name, &gr, buf, sizeof(buf), &res);
	if (rc || !res) {
		rgaps_error("socket_group: no group '%s'%s%s", name, rc ? ": " : "",
			    rc ? strerror(rc) : "");
		return rc ? -rc : -ENOENT;
	}
	*gid_p = gr.gr_gid;
	return 0;
}

/*
 * Descriptors: one per topic (its header), and per client connection the socket and its
 * attachment's region and pool. The soft limit goes up to the hard one, and a limit that
 * cannot cover the configured maxima is reported.
 */
static void raise_fd_limit(const struct rgapsd_config *cfg)
{
	uint64_t want = 3ull * cfg->max_connections + cfg->max_topics + cfg->ntopics + 256;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want)
		rgaps_warn("open files limit %llu is below what max_connections (%u) and max_topics "
			   "(%u, plus %u configured) may need (%llu): raise it (LimitNOFILE=) or "
			   "lower them",
			   (unsigned long long)rl.rlim_cur, cfg->max_connections, cfg->max_topics,
			   cfg->ntopics, (unsigned long long)want);
}

static const struct rgapsd_control_ops control_ops = {
	.on_frame = rgapsd_on_frame,
	.on_close = rgapsd_on_close,
};

int rgapsd_init(struct rgapsd *d, uv_loop_t *loop, const struct rgapsd_config *cfg)
{
	struct rgapsd_control_opts copts = {
		.max_conns = cfg->max_connections,
		.max_conns_per_user = cfg->max_connections_per_user,
		.idle_timeout_ms = cfg->idle_timeout_ms,
		.frame_timeout_ms = cfg->frame_timeout_ms,
		.max_unsent = cfg->max_unsent_replies,
		.socket_mode = (unsigned)strtoul(cfg->socket_mode, NULL, 8),
	};
	char err[640];
	int r;

	memset(d, 0, sizeof(*d));
	d->loop = loop;
	d->cfg = *cfg;
	d->start_ns = rgaps_now_ns(CLOCK_MONOTONIC);
	if (cfg->instance[0])
		snprintf(d->instance, sizeof(d->instance), "%s", cfg->instance);
	else
		derive_instance(cfg->socket_path, d->instance, sizeof(d->instance));
	snprintf(d->plugin_dir, sizeof(d->plugin_dir), "%s",
		 cfg->plugin_dir[0] ? cfg->plugin_dir : rgaps__plugin_default_dir());
	/* The plugins there, and the configuration's plugin names against them. */
	r = rgapsd_registry_scan(&d->reg, d->plugin_dir, err, sizeof(err));
	if (!r) {
		r = rgapsd_registry_check(&d->reg, cfg, err, sizeof(err));
		if (r)
			rgapsd_registry_free(&d->reg);
	}
	if (r) {
		rgaps_error("%s: %s", cfg->source[0] ? cfg->source : "configuration", err);
		return r;
	}

	if (cfg->socket_group[0]) {
		r = resolve_group(cfg->socket_group, &copts.group);
		if (r)
			return r;
		copts.set_group = true;
	}
	raise_fd_limit(cfg);
	/* Scrapes are answered from the loop, so none is before rgapsd_init() returns. */
	if (cfg->metrics_listen[0]) {
		r = rgapsd_metrics_start(d, cfg->metrics_listen, &d->metrics, err, sizeof(err));
		if (r) {
			rgaps_error("%s", err);
			rgapsd_registry_free(&d->reg);
			return r;
		}
	}
	r = rgapsd_control_start(loop, cfg->socket_path, &copts, &control_ops, d, &d->ctl);
	if (r) {
		rgaps_error("cannot serve %s: %s", cfg->socket_path, strerror(-r));
		rgapsd_metrics_stop(d->metrics);
		d->metrics = NULL;
		rgapsd_registry_free(&d->reg);
		return r;
	}

	rgapsd_looplag_start(loop, &d->lag);
	r = rgapsd_remote_start(d);
	if (r) {
		rgapsd_looplag_stop(&d->lag);
		rgapsd_metrics_stop(d->metrics);
		d->metrics = NULL;
		rgapsd_control_stop(d->ctl);
		d->ctl = NULL;
		rgapsd_registry_free(&d->reg);
		return r;
	}
	/* Without it, freed members' memory is released on the loop (logged). */
	r = rgapsd_worker_start(&d->reaper, NULL, "rgapsd-reap", 1);
	if (r)
		rgaps_warn("no reaper thread (%s): freed pools are released on the loop",
			   strerror(-r));
	rgapsd_topics_start(d);
	uv_signal_init(loop, &d->sig_term);
	uv_signal_init(loop, &d->sig_int);
	d->sig_term.data = d->sig_int.data = d;
	uv_signal_start(&d->sig_term, on_signal, SIGTERM);
	uv_signal_start(&d->sig_int, on_signal, SIGINT);
	rgaps_info("rgapsd %s serving %s (instance %s, plugins %s, %u configured topics)",
		   RGAPS_VERSION, cfg->socket_path, d->instance, d->plugin_dir, cfg->ntopics);
	/* Serving: systemd may start the clients ordered after us. A bad $NOTIFY_SOCKET is
	 * logged; systemd then times the start out, with the reason in the journal. */
	rgapsd_notify_start(d);
	return 0;
}

void rgapsd_shutdown(struct rgapsd *d)
{
	if (d->stopping)
		return;
	d->stopping = true;
	rgapsd_notify_stop(d);
	/* Before the state a snapshot reads goes (the server's thread is joined here). */
	rgapsd_metrics_stop(d->metrics);
	d->metrics = NULL;
	/* Clients first (each on_close detaches), then topics, then our own handles. */
	rgapsd_control_stop(d->ctl);
	d->ctl = NULL;
	rgapsd_remote_stop(d);
	rgapsd_topics_stop(d);
	rgapsd_topics_destroy(d);
	uv_close((uv_handle_t *)&d->sig_term, NULL);
	uv_close((uv_handle_t *)&d->sig_int, NULL);
	rgapsd_looplag_stop(&d->lag);
}

void rgapsd_fini(struct rgapsd *d)
{
	rgapsd_topics_destroy(d);
	rgapsd_remote_free(d);
	rgapsd_registry_free(&d->reg);
}
