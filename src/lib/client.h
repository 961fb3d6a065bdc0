/*
 * librgaps internals: the control connection to rgapsd and the attachment of a
 * handle to a topic (docs/SHM-LAYOUT.md): the topic header (read-only), the
 * handle's own region (read-write) and, for a publisher, its own pool; and the
 * other kind of members, mapped read-only as rgapsd tells of them - for a
 * subscriber every publisher's stream and pool, for a publisher every
 * subscriber's region. One connection per handle: closing it (or dying) is the
 * detach that makes rgapsd discard the handle's region.
 */
#ifndef RGAPS_LIB_CLIENT_H
#define RGAPS_LIB_CLIENT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../common/fence.h"
#include "../common/plugin_loader.h"
#include "../common/topic.h"
#include "rgaps/rgaps.h"

struct cJSON;

enum rgaps__role {
	RGAPS__ROLE_PUB,
	RGAPS__ROLE_SUB,
};

/* The GPUs this process sees: its CUDA ordinal -> PCI address ("0000:3b:00.0"). */
struct rgaps__gpu_view {
	uint32_t n; /* 0: not known (no CUDA driver loaded in this process) */
	char pci[RGAPS_MEM_MAX_DEVICES][16];
};

/* A read-only mapping of another member's region (and a publisher's pool). */
struct rgaps__peer_map {
	uint64_t gen; /* 0: none */
	void *map;
	size_t size;
	struct rgaps_mem_region pool;
	bool has_pool;
	int32_t pool_device; /* where the pool lives (rgapsd says; replicas live elsewhere) */
};

/* A publisher's fence slots (stream order, docs/SHM-LAYOUT.md): created on first use. */
struct rgaps__fences {
	void **f;	    /* [n]: the fence of each slot made so far */
	uint32_t made, n;   /* made <= n = rgaps__topic_nfences() */
	uint32_t *free;	    /* stack of slots ready to be recorded again */
	uint32_t nfree;
	uint32_t in_use;    /* recorded for a block not freed yet */
};

struct rgaps__attach {
	int fd; /* control connection */
	enum rgaps__role role;
	uint32_t slot;
	uint64_t gen;
	void *hdr; /* read-only */
	size_t hdr_size;
	struct rgaps_topic_limits lim; /* our own copy: shared memory is checked against it */
	void *region; /* ours, read-write */
	size_t region_size;
	struct rgaps_loaded_plugin *mem;
	struct rgaps_mem_region pool; /* publisher: our pool */
	bool have_pool;
	char topic[64];	      /* its name, for messages */
	char memory_name[32];
	/* GPUs by this process's ordinals (rgapsd's differ where CUDA_VISIBLE_DEVICES does) */
	struct rgaps__gpu_view gpus;
	int32_t device;	      /* the topic's (its pools') device; -1 not visible here */
	int32_t my_device;    /* the device this handle serves; -1 none */
	int gpu_path;	      /* enum rgaps_gpu_path, from the attach reply */
	struct rgaps__fences fences;	    /* publisher */
	struct rgaps_fence_cache *fcache;   /* subscriber: the publishers' fences it opened */
	struct rgaps__peer_map *peers; /* [max_subscribers] (publisher) / [max_publishers] */
	uint32_t npeers;
	struct rgaps__peer_map *retired; /* streams gone while we still hold their messages */
	uint32_t nretired, retired_cap;
	struct rgaps_pub *pub;
	struct rgaps_sub *sub;
	/*
	 * Membership changes against the subscriber's fd helper thread, which reads
	 * the stream mappings to know what to sleep on. view_gen (a private futex
	 * word) is bumped after each change to wake it.
	 */
	pthread_mutex_t lock;
	uint32_t view_gen;
	uint32_t interrupted; /* rgaps_publisher_interrupt() (atomic: another thread sets it) */
};

#define REQUEST_TIMEOUT_MS 10000
#define MAX_FDS 32 /* an attach or sync reply (rgapsd sends at most this many) */

/* Socket path: $RGAPS_SOCKET, else the default. */
const char *rgaps__socket_path(void);
/* Connect and say hello. Returns fd or -errno. */
int rgaps__connect(void);
/*
 * One request, one reply. On success *reply_p is the parsed reply (ok true);
 * an error reply becomes its errno (negative) and nothing is returned. Up to
 * *nfds_p fds are received into fds; *nfds_p is set to how many came.
 */
int rgaps__request(int fd, struct cJSON *req, int timeout_ms, struct cJSON **reply_p, int *fds,
		   int *nfds_p);
/*
 * Attach as role. fence_done (subscribers; NULL for publishers): topic.h's hook,
 * called with a, that says whether a fenced message's copy is complete.
 */
int rgaps__attach_open(const char *topic, enum rgaps__role role, const rgaps_attach_opts_t *opts,
		       int (*fence_done)(void *attach, const struct rgaps_sub_msg *m),
		       struct rgaps__attach *a);
void rgaps__attach_close(struct rgaps__attach *a);
/* Liveness check of the daemon for long waits. */
bool rgaps__alive(void *attach);
int rgaps__attach_info(struct rgaps__attach *a, rgaps_topic_info_t *info);
/*
 * The GPUs this process sees (*v; v->n 0 when not known) and, if *device_p is
 * -1, the device of the calling thread's current CUDA context, from the CUDA
 * driver if the process has loaded it (device.c). 0, or -ENOENT: no driver.
 */
int rgaps__caller_gpus(int32_t *device_p, struct rgaps__gpu_view *v);
/*
 * This process's ordinal of the GPU at PCI address pci: ordinal itself when
 * pci is empty or the view unknown (both processes number alike then), -1
 * when this process does not see that GPU.
 */
int32_t rgaps__gpu_local(const struct rgaps__gpu_view *v, const char *pci, int32_t ordinal);
/* The PCI address of our GPU ordinal, "" unknown. */
const char *rgaps__gpu_pci(const struct rgaps__gpu_view *v, int32_t ordinal);

#endif
