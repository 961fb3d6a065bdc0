/*
 * rgapsd's topic table: topics from topics.d are configured at start but
 * created (segments allocated) on first attach, like topics absent from the
 * configuration, which are made from the daemon's defaults. A topic lives
 * until the daemon stops; its memory backend is chosen once, at creation
 * ("auto": cuda when a GPU is usable, else host, with the reason logged).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/shm.h"
#include "daemon.h"

static struct rgaps_loaded_plugin *memory_plugin(struct rgapsd *d, const char *name, char *err,
						 size_t errlen)
{
	struct rgaps_plugin_env env;
	struct rgaps_loaded_plugin *lp;
	int r;

	for (uint32_t i = 0; i < d->nmem_plugins; i++)
		if (strcmp(d->mem_plugins[i]->name, name) == 0)
			return d->mem_plugins[i];
	if (d->nmem_plugins == RGAPSD_MAX_MEMORY_PLUGINS) {
		snprintf(err, errlen, "too many memory plugins");
		return NULL;
	}
	r = rgaps__plugin_load(d->plugin_dir, RGAPS_PLUGIN_MEMORY, name, &lp, err, errlen);
	if (r)
		return NULL;
	rgaps__plugin_env_init(&env, RGAPS_ROLE_DAEMON, d->loop);
	r = lp->ops.memory.init(&env, &lp->ctx);
	if (r) {
		snprintf(err, errlen, "memory plugin '%s': init failed: %s", name, strerror(-r));
		rgaps__plugin_unload(lp);
		return NULL;
	}
	rgaps_info("loaded memory plugin '%s' from %s", name, lp->path);
	d->mem_plugins[d->nmem_plugins++] = lp;
	return lp;
}

/* Resolve "auto" / "host" / "cuda" for a topic; logs what was picked and why. */
static struct rgaps_loaded_plugin *pick_memory(struct rgapsd *d, const struct rgaps_topic_config *tc,
					       char *err, size_t errlen)
{
	struct rgaps_loaded_plugin *lp;
	char why[256] = "";

	if (strcmp(tc->memory, "auto") != 0) {
		lp = memory_plugin(d, tc->memory, err, errlen);
		if (!lp)
			return NULL;
		if (lp->ops.memory.probe(lp->ctx, tc->device, why, sizeof(why)) != 0) {
			snprintf(err, errlen, "memory '%s' unusable for topic '%s': %s", tc->memory,
				 tc->name, why);
			return NULL;
		}
		return lp;
	}
	lp = memory_plugin(d, "cuda", why, sizeof(why));
	if (lp && lp->ops.memory.probe(lp->ctx, tc->device, why, sizeof(why)) == 0) {
		rgaps_info("topic '%s': memory auto -> cuda (device %d)", tc->name, tc->device);
		return lp;
	}
	rgaps_info("topic '%s': memory auto -> host (cuda not usable: %s)", tc->name, why);
	return memory_plugin(d, "host", err, errlen);
}

static const struct rgaps_topic_config *configured(const struct rgapsd *d, const char *name)
{
	for (uint32_t i = 0; i < d->cfg.ntopics; i++)
		if (strcmp(d->cfg.topics[i].name, name) == 0)
			return &d->cfg.topics[i];
	return NULL;
}

static void topic_free(struct rgapsd_topic *t)
{
	if (t->pool.base || t->pool.fd >= 0)
		t->mem->ops.memory.pool_release(t->mem->ctx, &t->pool);
	if (t->t.hdr)
		munmap(t->t.hdr, t->t.size);
	if (t->meta_fd >= 0)
		close(t->meta_fd);
	if (t->meta_name[0])
		shm_unlink(t->meta_name);
	free(t);
}

static int topic_create(struct rgapsd *d, const char *name, struct rgapsd_topic **t_p, char *err,
			size_t errlen)
{
	const struct rgaps_topic_config *tc = configured(d, name);
	struct rgapsd_topic *t = calloc(1, sizeof(*t));
	char pool_name[192];
	void *meta;
	size_t size;
	int r;

	if (!t) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	t->meta_fd = -1;
	t->pool.fd = -1;
	if (tc) {
		t->cfg = *tc;
	} else {
		t->cfg = d->cfg.topic_defaults;
		snprintf(t->cfg.name, sizeof(t->cfg.name), "%s", name);
	}
	t->mem = pick_memory(d, &t->cfg, err, errlen);
	if (!t->mem) {
		r = -ENODEV;
		goto err_free;
	}
	if (rgaps_shm_name(t->meta_name, sizeof(t->meta_name), d->instance, name, "meta") ||
	    rgaps_shm_name(pool_name, sizeof(pool_name), d->instance, name, "pool")) {
		t->meta_name[0] = 0;
		snprintf(err, errlen, "segment name too long");
		r = -ENAMETOOLONG;
		goto err_free;
	}
	size = rgaps_topic_segment_size(&t->cfg);
	r = rgaps_shm_create(t->meta_name, size);
	if (r < 0) {
		snprintf(err, errlen, "cannot create %s: %s", t->meta_name, strerror(-r));
		t->meta_name[0] = 0;
		goto err_free;
	}
	t->meta_fd = r;
	r = rgaps_shm_map(t->meta_fd, size, &meta);
	if (r) {
		snprintf(err, errlen, "cannot map %s: %s", t->meta_name, strerror(-r));
		goto err_free;
	}
	t->t.hdr = meta;
	t->t.size = size;
	r = t->mem->ops.memory.pool_create(t->mem->ctx, pool_name, t->cfg.pool_size,
					   t->cfg.device, &t->pool);
	if (r) {
		snprintf(err, errlen, "memory '%s' cannot create a %llu-byte pool: %s",
			 t->mem->name, (unsigned long long)t->cfg.pool_size, strerror(-r));
		t->pool.fd = -1;
		goto err_free;
	}
	t->t.pool = t->pool.base;
	r = rgaps_topic_format(meta, size, &t->cfg, t->pool.kind);
	if (r) {
		snprintf(err, errlen, "cannot format topic segment: %s", strerror(-r));
		goto err_free;
	}
	t->next = d->topics;
	d->topics = t;
	d->ntopics++;
	rgaps_info("topic '%s' created: memory %s, pool %llu bytes, queue %u, %s%s", name,
		   t->mem->name, (unsigned long long)t->cfg.pool_size, t->cfg.queue_depth,
		   t->cfg.overflow == RGAPS_OVERFLOW_BLOCK ? "overflow block" : "overflow drop_oldest",
		   tc ? "" : " (defaults)");
	*t_p = t;
	return 0;

err_free:
	topic_free(t);
	return r;
}

int rgapsd__topic_get(struct rgapsd *d, const char *name, struct rgapsd_topic **t_p, char *err,
		      size_t errlen)
{
	for (struct rgapsd_topic *t = d->topics; t; t = t->next) {
		if (strcmp(t->cfg.name, name) == 0) {
			*t_p = t;
			return 0;
		}
	}
	return topic_create(d, name, t_p, err, errlen);
}

bool rgapsd__topic_allows(const struct rgapsd_topic *t, uid_t uid, gid_t gid)
{
	if (t->cfg.nallowed_uids == 0 && t->cfg.nallowed_gids == 0)
		return true;
	if (uid == 0 || uid == getuid())
		return true;
	for (uint32_t i = 0; i < t->cfg.nallowed_uids; i++)
		if (t->cfg.allowed_uids[i] == uid)
			return true;
	for (uint32_t i = 0; i < t->cfg.nallowed_gids; i++)
		if (t->cfg.allowed_gids[i] == gid)
			return true;
	return false;
}

void rgapsd__topics_destroy(struct rgapsd *d)
{
	while (d->topics) {
		struct rgapsd_topic *t = d->topics;

		d->topics = t->next;
		rgaps_topic_close(&t->t);
		topic_free(t);
	}
	d->ntopics = 0;
	for (uint32_t i = 0; i < d->nmem_plugins; i++) {
		d->mem_plugins[i]->ops.memory.fini(d->mem_plugins[i]->ctx);
		rgaps__plugin_unload(d->mem_plugins[i]);
	}
	d->nmem_plugins = 0;
}
