/*
 * The host memory plugin: a topic's pool is plain POSIX shared memory standing
 * in for device memory, so that every path of rgaps runs and is tested on
 * machines without a GPU. Its "device pointers" are host pointers; copies are
 * memcpy; pinning is a no-op. It sees only include/rgaps/plugin.h.
 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rgaps/plugin.h"

struct host_pool {
	char name[256]; /* set by the creator, which unlinks it on release */
};

static int host_init(const struct rgaps_plugin_env *env, void **ctx_p)
{
	*ctx_p = NULL;
	return 0;
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
	struct rgaps_mem_region r = { .fd = -1 };
	struct host_pool *hp = calloc(1, sizeof(*hp));
	int fd, e;

	if (!hp)
		return -ENOMEM;
	snprintf(hp->name, sizeof(hp->name), "%s", name);
	fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EEXIST) {
		shm_unlink(name);
		fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
	}
	if (fd < 0) {
		e = -errno;
		goto err_free;
	}
	if (ftruncate(fd, (off_t)size) < 0) {
		e = -errno;
		goto err_unlink;
	}
	e = map_region(fd, size, device, true, &r);
	if (e)
		goto err_unlink;
	r.priv = hp;
	*region_p = r;
	return 0;

err_unlink:
	close(fd);
	shm_unlink(name);
err_free:
	free(hp);
	return e;
}

static int host_pool_import(void *ctx, int fd, uint64_t size, int32_t device, uint32_t flags,
			    struct rgaps_mem_region *region_p)
{
	struct rgaps_mem_region r = { .fd = -1 };
	struct stat st;
	int e;

	if (fstat(fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size < size)
		return -EINVAL; /* never map past the object: SIGBUS on touch */
	/* A read-only fd cannot be mapped writable (the subscribers' view of a pool). */
	e = map_region(fd, size, device,
		       !(flags & RGAPS_MEM_IMPORT_READONLY) && (fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR,
		       &r);
	if (e)
		return e;
	*region_p = r;
	return 0;
}

static void host_pool_release(void *ctx, struct rgaps_mem_region *region)
{
	struct host_pool *hp = region->priv;

	if (region->base)
		munmap(region->base, region->size);
	if (region->fd >= 0)
		close(region->fd);
	if (hp) {
		shm_unlink(hp->name);
		free(hp);
	}
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

static const struct rgaps_memory_ops host_ops = {
	.init = host_init,
	.probe = host_probe,
	.pool_create = host_pool_create,
	.pool_import = host_pool_import,
	.pool_release = host_pool_release,
	.copy = host_copy,
	.host_register = host_register,
	.host_unregister = host_unregister,
};

RGAPS_PLUGIN_EXPORT const struct rgaps_plugin rgaps_plugin = {
	.abi_version = RGAPS_PLUGIN_ABI_VERSION,
	.struct_size = sizeof(struct rgaps_plugin),
	.kind = RGAPS_PLUGIN_MEMORY,
	.ops_size = sizeof(struct rgaps_memory_ops),
	.name = "host",
	.description = "POSIX shared memory standing in for device memory",
	.ops = &host_ops,
};
