/*
 * rgapsd's topic table: topics from topics.d are configured at start but
 * created (a header segment) on first attach, like topics absent from the
 * configuration, which are made from the daemon's defaults. A topic lives
 * until the daemon stops; its memory backend is chosen once, at creation
 * ("auto": cuda when a GPU is usable, else host, with the reason logged).
 * Its members - one per attachment, with their regions and pools - are in
 * members.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

/* What the backend's pools hold: host memory only for the host backend. */
static uint32_t mem_kind_of(const struct rgaps_loaded_plugin *lp)
{
	return strcmp(lp->name, "host") == 0 ? RGAPS_MEM_HOST : RGAPS_MEM_CUDA;
}

const struct rgaps_topic_config *rgapsd__topic_configured(const struct rgapsd *d, const char *name)
{
	for (uint32_t i = 0; i < d->cfg.ntopics; i++)
		if (strcmp(d->cfg.topics[i].name, name) == 0)
			return &d->cfg.topics[i];
	return NULL;
}

static void topic_free(struct rgapsd_topic *t)
{
	if (t->pubs && t->subs)
		rgapsd__members_destroy(t);
	free(t->pubs);
	free(t->subs);
	if (t->hdr)
		munmap(t->hdr, rgaps_topic_hdr_size());
	if (t->hdr_fd >= 0)
		close(t->hdr_fd);
	if (t->hdr_name[0])
		shm_unlink(t->hdr_name);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

/*
 * A topic is its header segment (layout constants, the directory generation,
 * the closed flag) and its members; each attachment brings the memory it needs
 * (members.c), so an idle topic costs one page.
 */
static int topic_create(struct rgapsd *d, const char *name, struct rgapsd_topic **t_p, char *err,
			size_t errlen)
{
	const struct rgaps_topic_config *tc = rgapsd__topic_configured(d, name);
	struct rgapsd_topic *t = calloc(1, sizeof(*t));
	void *hdr;
	int r;

	if (!t) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	t->d = d;
	t->hdr_fd = -1;
	pthread_mutex_init(&t->lock, NULL);
	t->adhoc = !tc;
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
	r = rgaps_topic_limits_from_config(&t->cfg, mem_kind_of(t->mem), t->cfg.device, &t->lim);
	if (r) {
		snprintf(err, errlen, "topic configuration out of bounds");
		goto err_free;
	}
	t->pubs = calloc(t->lim.max_publishers, sizeof(*t->pubs));
	t->subs = calloc(t->lim.max_subscribers, sizeof(*t->subs));
	if (!t->pubs || !t->subs) {
		snprintf(err, errlen, "out of memory");
		r = -ENOMEM;
		goto err_free;
	}
	if (rgaps_shm_name(t->hdr_name, sizeof(t->hdr_name), d->instance, name, "meta")) {
		t->hdr_name[0] = 0;
		snprintf(err, errlen, "segment name too long");
		r = -ENAMETOOLONG;
		goto err_free;
	}
	r = rgaps_shm_create(t->hdr_name, rgaps_topic_hdr_size());
	if (r < 0) {
		snprintf(err, errlen, "cannot create %s: %s", t->hdr_name, strerror(-r));
		t->hdr_name[0] = 0;
		goto err_free;
	}
	t->hdr_fd = r;
	r = rgaps_shm_map(t->hdr_fd, rgaps_topic_hdr_size(), &hdr);
	if (r) {
		snprintf(err, errlen, "cannot map %s: %s", t->hdr_name, strerror(-r));
		goto err_free;
	}
	t->hdr = hdr;
	r = rgaps_topic_hdr_format(hdr, rgaps_topic_hdr_size(), name, &t->lim);
	if (r) {
		snprintf(err, errlen, "cannot format the topic header: %s", strerror(-r));
		goto err_free;
	}
	t->next = d->topics;
	d->topics = t;
	d->ntopics++;
	rgaps_info("topic '%s' created: memory %s, pool %llu bytes per publisher, queue %u, %s%s",
		   name, t->mem->name, (unsigned long long)t->cfg.pool_size, t->cfg.queue_depth,
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
	int r;

	for (struct rgapsd_topic *t = d->topics; t; t = t->next) {
		if (strcmp(t->cfg.name, name) == 0) {
			*t_p = t;
			return 0;
		}
	}
	r = rgapsd__topic_may_create(d, name, err, errlen);
	if (r)
		return r;
	return topic_create(d, name, t_p, err, errlen);
}

void rgapsd__topics_destroy(struct rgapsd *d)
{
	while (d->topics) {
		struct rgapsd_topic *t = d->topics;

		d->topics = t->next;
		rgaps_topic_close(t->hdr);
		rgapsd__members_wake(t);
		topic_free(t);
	}
	d->ntopics = 0;
	for (uint32_t i = 0; i < d->nmem_plugins; i++) {
		d->mem_plugins[i]->ops.memory.fini(d->mem_plugins[i]->ctx);
		rgaps__plugin_unload(d->mem_plugins[i]);
	}
	d->nmem_plugins = 0;
}

void rgapsd__topics_close_stale(const char *instance)
{
	char prefix[RGAPS_SHM_NAME_MAX];
	DIR *dir = opendir("/dev/shm");
	struct dirent *de;
	size_t plen;

	if (!dir)
		return;
	snprintf(prefix, sizeof(prefix), "rgaps-%s-", instance);
	plen = strlen(prefix);
	while ((de = readdir(dir))) {
		size_t len = strlen(de->d_name);
		char name[RGAPS_SHM_NAME_MAX + 2];
		struct rgaps_topic_hdr *h;
		int fd;

		if (strncmp(de->d_name, prefix, plen) != 0 || len < 5 ||
		    strcmp(de->d_name + len - 5, "-meta") != 0)
			continue;
		snprintf(name, sizeof(name), "/%s", de->d_name);
		fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
		if (fd < 0)
			continue;
		h = mmap(NULL, sizeof(*h), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
		if (h == MAP_FAILED)
			continue;
		/* Only what a daemon of ours made: then the old clients learn it is over. */
		if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == RGAPS_TOPIC_MAGIC &&
		    h->layout_version == RGAPS_TOPIC_LAYOUT_VERSION)
			rgaps_topic_close(h);
		munmap(h, sizeof(*h));
	}
	closedir(dir);
}
