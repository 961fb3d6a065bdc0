/*
 * The host memory plugin: a topic's pool is plain shared memory standing in
 * for device memory, so that every path of rgaps runs and is tested on
 * machines without a GPU. Its "device pointers" are host pointers; copies are
 * memcpy; pinning is a no-op. It sees only include/rgaps/plugin.h; its pools
 * are the objects the host environment makes (shm_create: sealed memfds,
 * allocated up front), checked again by every process that imports one.
 *
 * It has no devices, unless a test makes it pretend (docs/GPU.md, "Testing
 * without a GPU"): RGAPS_HOST_DEVICES=N gives N emulated devices, whose links
 * RGAPS_HOST_LINKS describes ("nvlink" by default; "pcie", "none", and
 * per-pair overrides "nvlink;0-2=none;2-0=none"), so that rgapsd's choice
 * between peer access and replicas, its refusals and its replicators run
 * here. Stream order needs nothing on the host (every copy is done when it
 * returns), so fences are complete at once; RGAPS_HOST_FENCE_DELAY_US=N makes
 * each record complete N microseconds later, through the fence slot's state
 * word in its publisher's region, so that the code that waits for fences runs
 * too. A process whose CUDA_VISIBLE_DEVICES lists emulated devices ("2" or
 * "2,0") sees only those, numbered in that order, as CUDA would show it real
 * ones: the container case (docs/GPU.md, "GPU identity").
 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rgaps/plugin.h"

struct host_ctx {
	void (*log)(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
	uint32_t ndevices;			/* emulated and visible here */
	uint32_t global[RGAPS_MEM_MAX_DEVICES]; /* our ordinal -> the emulated device */
	uint8_t link[RGAPS_MEM_MAX_DEVICES][RGAPS_MEM_MAX_DEVICES]; /* between emulated devices */
	uint64_t fence_delay_ns;		/* RGAPS_HOST_FENCE_DELAY_US */
	int (*shm_create)(const char *name, uint64_t size, char *why, size_t whylen);
	int (*shm_check)(int fd, uint64_t size, bool sealed);
};

static int link_kind_of(const char *s, size_t n)
{
	if (n == 6 && strncmp(s, "nvlink", 6) == 0)
		return RGAPS_MEM_LINK_NVLINK;
	if (n == 4 && strncmp(s, "pcie", 4) == 0)
		return RGAPS_MEM_LINK_PCIE;
	if (n == 4 && strncmp(s, "none", 4) == 0)
		return RGAPS_MEM_LINK_NONE;
	return -1;
}

/* RGAPS_HOST_LINKS: "KIND" (every pair) then ";I-J=KIND" overrides, I reaching J's memory. */
static int parse_links(struct host_ctx *c, const char *spec)
{
	const char *p = spec;
	int def = RGAPS_MEM_LINK_NVLINK;

	for (uint32_t i = 0; i < RGAPS_MEM_MAX_DEVICES; i++)
		for (uint32_t j = 0; j < RGAPS_MEM_MAX_DEVICES; j++)
			c->link[i][j] = i == j ? RGAPS_MEM_LINK_SELF : (uint8_t)def;
	while (p && *p) {
		const char *end = strchr(p, ';'), *eq;
		size_t n = end ? (size_t)(end - p) : strlen(p);
		unsigned a, b;
		int k;

		eq = memchr(p, '=', n);
		if (!eq) {
			def = link_kind_of(p, n);
			if (def < 0)
				return -EINVAL;
			for (uint32_t i = 0; i < RGAPS_MEM_MAX_DEVICES; i++)
				for (uint32_t j = 0; j < RGAPS_MEM_MAX_DEVICES; j++)
					if (i != j)
						c->link[i][j] = (uint8_t)def;
		} else {
			k = link_kind_of(eq + 1, n - (size_t)(eq + 1 - p));
			if (k < 0 || sscanf(p, "%u-%u=", &a, &b) != 2 || a >= RGAPS_MEM_MAX_DEVICES ||
			    b >= RGAPS_MEM_MAX_DEVICES || a == b)
				return -EINVAL;
			c->link[a][b] = (uint8_t)k;
		}
		p = end ? end + 1 : NULL;
	}
	return 0;
}

/*
 * CUDA_VISIBLE_DEVICES over the n emulated devices: ordinals up to the first
 * entry that is not one, as CUDA reads it (no UUIDs here). Unset: all of them.
 */
static void parse_visible(struct host_ctx *c, uint32_t n, const char *spec)
{
	const char *p = spec;

	c->ndevices = 0;
	if (!spec) {
		for (uint32_t i = 0; i < n; i++)
			c->global[c->ndevices++] = i;
		return;
	}
	while (*p && c->ndevices < RGAPS_MEM_MAX_DEVICES) {
		char *end;
		unsigned long v = strtoul(p, &end, 10);

		if (end == p || v >= n || (*end && *end != ','))
			break;
		c->global[c->ndevices++] = (uint32_t)v;
		p = *end ? end + 1 : end;
	}
}

/* How our device i reaches our device j's memory. */
static uint8_t link_of(const struct host_ctx *c, uint32_t i, uint32_t j)
{
	return c->link[c->global[i]][c->global[j]];
}

static int host_init(const struct rgaps_plugin_env *env, void **ctx_p)
{
	struct host_ctx *c = calloc(1, sizeof(*c));
	const char *nd = getenv("RGAPS_HOST_DEVICES"), *links = getenv("RGAPS_HOST_LINKS");
	const char *delay = getenv("RGAPS_HOST_FENCE_DELAY_US");

	if (!c)
		return -ENOMEM;
	if (env && env->struct_size >= offsetof(struct rgaps_plugin_env, log) + sizeof(env->log))
		c->log = env->log;
	if (rgaps_plugin_env_has_shm(env)) {
		c->shm_create = env->shm_create;
		c->shm_check = env->shm_check;
	}
	if (nd && *nd) {
		unsigned long n = strtoul(nd, NULL, 10);

		parse_visible(c, n > RGAPS_MEM_MAX_DEVICES ? RGAPS_MEM_MAX_DEVICES : (uint32_t)n,
			      getenv("CUDA_VISIBLE_DEVICES"));
	}
	if (parse_links(c, links ? links : "nvlink")) {
		if (c->log)
			c->log(0, "host: RGAPS_HOST_LINKS='%s' is not KIND[;I-J=KIND...] with KIND "
				  "nvlink, pcie or none", links);
		free(c);
		return -EINVAL;
	}
	if (delay && *delay)
		c->fence_delay_ns = strtoull(delay, NULL, 10) * 1000ull;
	*ctx_p = c;
	return 0;
}

static void host_fini(void *ctx)
{
	free(ctx);
}

static int host_probe(void *ctx, int32_t device, char *why, size_t whylen)
{
	snprintf(why, whylen, "host memory is always available");
	return 0;
}

static int map_region(int fd, uint64_t size, int32_t device, bool writable,
		      struct rgaps_mem_region *r)
{
	void *p = mmap(NULL, size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);

	if (p == MAP_FAILED)
		return -errno;
	r->base = p;
	r->size = size;
	r->fd = fd;
	r->kind = RGAPS_MEM_HOST;
	r->device = device;
	r->flags = 0;
	return 0;
}

static int host_pool_create(void *ctx, const char *name, uint64_t size, int32_t device,
			    struct rgaps_mem_region *region_p)
{
	struct host_ctx *c = ctx;
	struct rgaps_mem_region r = { .fd = -1 };
	char why[256];
	int fd, e;

	if (!c || !c->shm_create) {
		if (c && c->log)
			c->log(0, "host: this host process makes no shared memory for plugins (an "
				  "rgapsd older than the plugin)");
		return -ENOTSUP;
	}
	fd = c->shm_create(name, size, why, sizeof(why));
	if (fd < 0) {
		if (c->log)
			c->log(0, "host: pool %s: %s", name, why);
		return fd;
	}
	e = map_region(fd, size, device, true, &r);
	if (e) {
		close(fd);
		return e;
	}
	*region_p = r;
	return 0;
}

static int host_pool_import(void *ctx, int fd, uint64_t size, int32_t device, uint32_t flags,
			    struct rgaps_mem_region *region_p)
{
	struct host_ctx *c = ctx;
	struct rgaps_mem_region r = { .fd = -1 };
	bool readonly = flags & RGAPS_MEM_IMPORT_READONLY;
	int e;

	/*
	 * Only an object nobody can resize (a mapping past its end is SIGBUS on touch),
	 * and one sealed for good when it is someone else's (no hole can be punched in it).
	 */
	e = c && c->shm_check ? c->shm_check(fd, size, readonly) : -ENOTSUP;
	if (e) {
		if (c && c->log)
			c->log(0, "host: a pool fd of %llu bytes is refused: %s",
			       (unsigned long long)size,
			       e == -EPERM     ? "it is not sealed"
			       : e == -ENOTSUP ? "this host process cannot check it"
					       : "not a shared-memory object of that size");
		goto err;
	}
	/* A read-only fd cannot be mapped writable (the subscribers' view of a pool). */
	e = map_region(fd, size, device, !readonly && (fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR,
		       &r);
	if (e)
		goto err;
	*region_p = r;
	return 0;
err:
	close(fd); /* consumed, as the operation says */
	return e;
}

static void host_pool_release(void *ctx, struct rgaps_mem_region *region)
{
	if (region->base)
		munmap(region->base, region->size);
	if (region->fd >= 0)
		close(region->fd);
	region->base = NULL;
	region->fd = -1;
	region->priv = NULL;
}

static int host_copy(void *ctx, void *dst, const void *src, size_t n, uint32_t dir)
{
	memcpy(dst, src, n);
	return 0;
}

static int host_register(void *ctx, void *ptr, size_t n)
{
	return 0; /* plain host memory needs no pinning for memcpy */
}

static int host_unregister(void *ctx, void *ptr)
{
	return 0;
}

/* ---------------------------------------------------------------- emulated devices */

static int host_topology(void *ctx, struct rgaps_mem_topology *t)
{
	struct host_ctx *c = ctx;

	t->ndevices = c ? c->ndevices : 0;
	snprintf(t->how, sizeof(t->how), "emulated by the host plugin (RGAPS_HOST_DEVICES)");
	for (uint32_t i = 0; i < t->ndevices; i++) {
		snprintf(t->pci[i], sizeof(t->pci[i]), "0000:%02x:00.0", 0x10 + c->global[i]);
		for (uint32_t j = 0; j < t->ndevices; j++) {
			uint8_t k = link_of(c, i, j);

			t->link[i][j].kind = k;
			t->link[i][j].atomics = k == RGAPS_MEM_LINK_NVLINK;
			t->link[i][j].rank = k == RGAPS_MEM_LINK_NONE ? -1 : 0;
		}
	}
	return 0;
}

static int host_pool_grant(void *ctx, struct rgaps_mem_region *region, int32_t device,
			   uint32_t flags)
{
	struct host_ctx *c = ctx;

	/* Host memory is reachable from everywhere; an emulated device only over a link. */
	if (!c || !c->ndevices || region->device < 0 || device == region->device)
		return 0;
	if (device < 0 || (uint32_t)device >= c->ndevices ||
	    (uint32_t)region->device >= c->ndevices ||
	    link_of(c, (uint32_t)device, (uint32_t)region->device) == RGAPS_MEM_LINK_NONE) {
		if (c->log)
			c->log(0, "host: emulated device %d cannot reach device %d's memory",
			       (int)device, (int)region->device);
		return -ENODEV;
	}
	return 0;
}

/*
 * Hop after hop, each whole before the next starts (no pieces: memcpy has
 * nothing to overlap). An emulated device that cannot reach the memory of the
 * hop it is fed from is refused as the cuda plugin's copy would fail.
 */
static int host_copy_relay(void *ctx, const void *src, size_t n, const struct rgaps_relay_hop *hops,
			   uint32_t nhops, size_t piece, void (*whole)(void *arg, uint32_t hop),
			   void *arg)
{
	struct host_ctx *c = ctx;

	if (!piece)
		return -EINVAL;
	for (uint32_t i = 0; i < nhops; i++) {
		const struct rgaps_relay_hop *h = &hops[i];

		if (h->from < -1 || h->from >= (int32_t)i)
			return -EINVAL;
		if (h->from >= 0 && c && c->ndevices) {
			int32_t a = h->device, b = hops[h->from].device;

			if (a < 0 || b < 0 || (uint32_t)a >= c->ndevices ||
			    (uint32_t)b >= c->ndevices || a == b ||
			    link_of(c, (uint32_t)a, (uint32_t)b) == RGAPS_MEM_LINK_NONE) {
				if (c->log)
					c->log(0,
					       "host: relay hop %u: emulated device %d cannot read "
					       "device %d's memory",
					       i, (int)a, (int)b);
				return -ENODEV;
			}
		}
		memcpy(h->dst, h->from < 0 ? src : hops[h->from].dst, n);
		whole(arg, i);
	}
	return 0;
}

static int host_copy_stream(void *ctx, void *dst, const void *src, size_t n, void *stream)
{
	memcpy(dst, src, n); /* host "streams" run each copy to its end at once */
	return 0;
}

static int host_stream_sync(void *ctx, void *stream)
{
	return 0;
}

/*
 * Fences. Host copies are done when they return, so a fence is complete at its
 * record; with RGAPS_HOST_FENCE_DELAY_US a record completes that much later. The
 * completion time (CLOCK_MONOTONIC ns) is the fence slot's state word in its
 * publisher's region, which rgapsd made: a reader reads it there. The handle names
 * nothing and is all zeros; any other handle is refused, so no reader ever opens
 * an object that a publisher chose.
 */
struct host_fence {
	uint64_t *state; /* the slot's state word; NULL: not shared, complete at once */
	bool owner;	 /* ours: records write the word; else a reader's view of it */
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int host_fence_create(void *ctx, int32_t device, uint32_t flags, void **fence_p,
			     uint8_t handle[RGAPS_FENCE_HANDLE_LEN], uint64_t *state)
{
	struct host_fence *f = calloc(1, sizeof(*f));

	if (!f)
		return -ENOMEM;
	if (handle)
		memset(handle, 0, RGAPS_FENCE_HANDLE_LEN);
	f->state = state;
	f->owner = true;
	*fence_p = f;
	return 0;
}

static int host_fence_open(void *ctx, const uint8_t handle[RGAPS_FENCE_HANDLE_LEN],
			   const uint64_t *state, void **fence_p)
{
	struct host_fence *f;

	/* The caller reports the refusal (the message is lost, its stream skipped). */
	for (uint32_t i = 0; i < RGAPS_FENCE_HANDLE_LEN; i++)
		if (handle[i])
			return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->state = (uint64_t *)state; /* read only: a reader never records */
	*fence_p = f;
	return 0;
}

static void host_fence_destroy(void *ctx, void *fence)
{
	free(fence); /* the state word is the region's: not ours to touch */
}

static int host_fence_record(void *ctx, void *fence, void *stream)
{
	struct host_fence *f = fence;
	struct host_ctx *c = ctx;

	if (f->owner && f->state)
		__atomic_store_n(f->state, mono_ns() + (c ? c->fence_delay_ns : 0),
				 __ATOMIC_RELEASE);
	return 0;
}

static int host_fence_query(void *ctx, void *fence)
{
	struct host_fence *f = fence;

	if (f->state && mono_ns() < __atomic_load_n(f->state, __ATOMIC_ACQUIRE))
		return -EAGAIN;
	return 0;
}

static int host_fence_wait(void *ctx, void *fence, void *stream)
{
	return 0; /* the bytes are in place already: host copies finish before they return */
}

static const struct rgaps_memory_ops host_ops = {
	.init = host_init,
	.probe = host_probe,
	.pool_create = host_pool_create,
	.pool_import = host_pool_import,
	.pool_release = host_pool_release,
	.copy = host_copy,
	.host_register = host_register,
	.host_unregister = host_unregister,
	.fini = host_fini,
	.topology = host_topology,
	.pool_grant = host_pool_grant,
	.copy_stream = host_copy_stream,
	.stream_sync = host_stream_sync,
	.fence_create = host_fence_create,
	.fence_open = host_fence_open,
	.fence_destroy = host_fence_destroy,
	.fence_record = host_fence_record,
	.fence_query = host_fence_query,
	.fence_wait = host_fence_wait,
	.copy_relay = host_copy_relay,
};

RGAPS_PLUGIN_EXPORT const struct rgaps_plugin rgaps_plugin = {
	.abi_version = RGAPS_PLUGIN_ABI_VERSION,
	.struct_size = sizeof(struct rgaps_plugin),
	.kind = RGAPS_PLUGIN_MEMORY,
	.ops_size = sizeof(struct rgaps_memory_ops),
	.name = "host",
	.description = "POSIX shared memory standing in for device memory",
	.ops = &host_ops,
	.priority = 10, /* "auto" prefers it to nothing: the fallback */
};
