/**
 * @file plugin.h
 * @brief The plugin ABI of rgaps: memory backends, transports, stages.
 *
 * A plugin is a shared module named `<kind>-<name>.so` in the plugin directory
 * that exports one symbol, `rgaps_plugin`, a `const struct rgaps_plugin`
 * carrying the ABI version it was built against, its own struct size and a
 * pointer to a `static const` operations table. The loader refuses a version
 * mismatch with a clear error and fills operations the plugin leaves NULL (or
 * that an older, shorter table lacks) with stubs returning -ENOTSUP.
 *
 * Plugins see only this header; the daemon passes what they may use from it
 * (logging, the loop) in struct rgaps_plugin_env. Every operation returns 0 or
 * a negative errno; output arguments are written only on success.
 */
#ifndef RGAPS_PLUGIN_H
#define RGAPS_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Bumped on any incompatible change of this header. */
#define RGAPS_PLUGIN_ABI_VERSION 1
/** Name of the one symbol every plugin exports. */
#define RGAPS_PLUGIN_SYMBOL "rgaps_plugin"
#define RGAPS_PLUGIN_EXPORT __attribute__((visibility("default")))

enum rgaps_plugin_kind {
	RGAPS_PLUGIN_MEMORY = 1,    /**< where pools live: host shm, CUDA device memory */
	RGAPS_PLUGIN_TRANSPORT = 2, /**< how messages cross hosts: tcp, verbs */
	RGAPS_PLUGIN_STAGE = 3,	    /**< optional per-topic processing step */
};

enum rgaps_plugin_role {
	RGAPS_ROLE_DAEMON = 0, /**< loaded by rgapsd */
	RGAPS_ROLE_CLIENT = 1, /**< loaded by librgaps in an application */
};

/** What the host process offers a plugin. */
struct rgaps_plugin_env {
	uint32_t struct_size; /**< sizeof(struct rgaps_plugin_env) as the host built it */
	uint32_t role;	      /**< enum rgaps_plugin_role */
	/** Log one line at level (0 error .. 4 trace); printf format. */
	void (*log)(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
	void *uv_loop; /**< the daemon's uv_loop_t (only touched on the loop thread); NULL in clients */
};

/* ------------------------------------------------------------------ */
/* memory                                                              */
/* ------------------------------------------------------------------ */

enum rgaps_mem_kind {
	RGAPS_MEM_HOST = 0, /**< base is a host address */
	RGAPS_MEM_CUDA = 1, /**< base is a CUDA device address */
};

/** A shared pool as one process sees it. */
struct rgaps_mem_region {
	void *base;	/**< address usable in this process (device address for cuda) */
	uint64_t size;	/**< bytes */
	int fd;		/**< exportable POSIX fd (owned by the region), -1 if none */
	uint32_t kind;	/**< enum rgaps_mem_kind */
	int32_t device; /**< device ordinal */
	uint32_t flags; /**< plugin-defined; sent to importers with the fd */
	void *priv;	/**< plugin-private */
};

/** Copy directions, for backends that must know them. */
enum rgaps_copy_dir {
	RGAPS_COPY_DEFAULT = 0, /**< infer from the pointers */
	RGAPS_COPY_TO_POOL = 1,
	RGAPS_COPY_FROM_POOL = 2,
};

struct rgaps_memory_ops {
	/** Per-process set-up. */
	int (*init)(const struct rgaps_plugin_env *env, void **ctx_p);
	void (*fini)(void *ctx);
	/** 0 if this backend can work here; else -ENODEV and why (used by "auto"). */
	int (*probe)(void *ctx, int32_t device, char *why, size_t whylen);
	/**
	 * Create a pool of size bytes that other processes can import with the fd
	 * in the region. name is unique per daemon instance and topic
	 * ("rgaps-INSTANCE-TOPIC-pool"); backends may ignore it.
	 */
	int (*pool_create)(void *ctx, const char *name, uint64_t size, int32_t device,
			   struct rgaps_mem_region *region_p);
	/** Map a pool created elsewhere; the fd is consumed (owned by the region). */
	int (*pool_import)(void *ctx, int fd, uint64_t size, int32_t device, uint32_t flags,
			   struct rgaps_mem_region *region_p);
	/** Unmap / free this process's view; the creator's destroy frees the memory. */
	void (*pool_release)(void *ctx, struct rgaps_mem_region *region);
	/** Synchronous copy of n bytes between pool and caller memory (either side device). */
	int (*copy)(void *ctx, void *dst, const void *src, size_t n, uint32_t dir);
	/** Pin host memory so the device can DMA from/to it (the DP1 staging pool). */
	int (*host_register)(void *ctx, void *ptr, size_t n);
	int (*host_unregister)(void *ctx, void *ptr);
};

/* ------------------------------------------------------------------ */
/* the one exported object                                             */
/* ------------------------------------------------------------------ */

struct rgaps_plugin {
	uint32_t abi_version; /**< RGAPS_PLUGIN_ABI_VERSION */
	uint32_t struct_size; /**< sizeof(struct rgaps_plugin) as the plugin built it */
	uint32_t kind;	      /**< enum rgaps_plugin_kind */
	uint32_t ops_size;    /**< sizeof the ops table as the plugin built it */
	const char *name;     /**< "host", "cuda", "tcp", ... (matches the file name) */
	const char *description;
	const void *ops; /**< const struct rgaps_memory_ops * etc., per kind */
};

#ifdef __cplusplus
}
#endif

#endif
