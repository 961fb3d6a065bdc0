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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Bumped on any incompatible change of this header. 2: struct
 * rgaps_link_stats grew (records_late), and a plugin fills it whole.
 * (Options in struct rgaps_plugin and rgaps_plugin_env came with it; those
 * two are extended compatibly, through their struct_size.) 3: every plugin
 * declares its priority for "auto" and, a transport, its data-port offset
 * (struct rgaps_plugin), so that rgapsd finds plugins without knowing their
 * names. 4: fence_create and fence_open take the fence slot's state word, so
 * that a backend's shared fence state lives in memory rgapsd made, never in
 * an object that a handle names. 5: struct rgaps_transport_cbs grew
 * record_header (a receiver may land a record's payload outside its ring),
 * struct rgaps_link_stats grew zc_sends and zc_copied.
 */
#define RGAPS_PLUGIN_ABI_VERSION 5
/** Name of the one symbol every plugin exports. */
#define RGAPS_PLUGIN_SYMBOL "rgaps_plugin"
#define RGAPS_PLUGIN_EXPORT __attribute__((visibility("default")))

enum rgaps_plugin_kind {
	RGAPS_PLUGIN_MEMORY = 1,    /**< where pools live: host shm, CUDA device memory */
	RGAPS_PLUGIN_TRANSPORT = 2, /**< how messages cross hosts: tcp, verbs */
	RGAPS_PLUGIN_STAGE = 3,	    /**< optional per-topic processing step (struct rgaps_stage_ops) */
};

enum rgaps_plugin_role {
	RGAPS_ROLE_DAEMON = 0, /**< loaded by rgapsd */
	RGAPS_ROLE_CLIENT = 1, /**< loaded by librgaps in an application */
};

/**
 * One tunable a plugin declares (struct rgaps_plugin.options): an unsigned
 * integer in [min, max]. The daemon takes values from its configuration
 * (rgapsd.json "transport_options": { "<plugin name>": { "<option>": N } }),
 * refuses unknown names and values out of range at start, and hands the
 * plugin the ones that were set (struct rgaps_plugin_env.options).
 */
struct rgaps_plugin_option {
	const char *name; /**< lower case, [a-z0-9_] */
	uint64_t def, min, max;
	const char *doc; /**< one line for `rgapsd --help-config` and docs */
};

/** A configured value of one option, checked by the host against its declaration. */
struct rgaps_option_value {
	const char *name;
	uint64_t value;
};

struct rgaps_link; /* transport-owned, opaque to the core */

/** What the host process offers a plugin. */
struct rgaps_plugin_env {
	uint32_t struct_size; /**< sizeof(struct rgaps_plugin_env) as the host built it */
	uint32_t role;	      /**< enum rgaps_plugin_role */
	/** Log one line at level (0 error .. 4 trace); printf format. */
	void (*log)(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
	void *uv_loop; /**< the daemon's uv_loop_t (only touched on the loop thread); NULL in clients */
	/** The plugin's options that the configuration sets (others keep their default). */
	const struct rgaps_option_value *options;
	uint32_t noptions;
	/**
	 * Host memory that other processes map, as rgaps makes it (docs/SHM-LAYOUT.md,
	 * "The objects"): an anonymous memfd of size bytes labelled name, mode 0600,
	 * sealed against shrinking and growing, not yet backed (its owner allocates
	 * it). Returns the fd or -errno with why in words. A pool of kind
	 * RGAPS_MEM_HOST must be one: the daemon seals it for good once its owner
	 * has mapped and backed it.
	 */
	int (*shm_create)(const char *name, uint64_t size, char *why, size_t whylen);
	/**
	 * 0 when fd is such an object of exactly size bytes, sealed for good if
	 * sealed; else -EBADFD (another kind of file) or -EPERM (seals missing).
	 */
	int (*shm_check)(int fd, uint64_t size, bool sealed);
	/**
	 * Transports in the daemon (NULL in clients, and from a host built before
	 * them: rgaps_plugin_env_has_admission()): the host's admission of
	 * connections to the data port it does not know yet, by the peer port's
	 * rules (docs/CONFIG.md, "Limits on what the network can make rgapsd
	 * hold"). conn_pending: connection link, from address sa (a struct
	 * sockaddr of salen bytes), was accepted and owes its preamble; 0: keep
	 * it; a negative errno: close it at once and say nothing (the host counted
	 * and logged the refusal). The host may make room by closing another link
	 * it was told of (the transport's close()). conn_settled: a link
	 * conn_pending kept presented its preamble (why NULL) or was closed before
	 * (why: for the host's log, which it rate-limits); never for a link the
	 * host closed. Both with admit_arg, on the loop thread.
	 */
	int (*conn_pending)(void *admit_arg, struct rgaps_link *link, const void *sa,
			    uint32_t salen);
	void (*conn_settled)(void *admit_arg, struct rgaps_link *link, const char *why);
	void *admit_arg;
};

/** The environment's shm_create and shm_check, if the host is new enough to offer them. */
static inline bool rgaps_plugin_env_has_shm(const struct rgaps_plugin_env *env)
{
	return env &&
	       env->struct_size >=
		       offsetof(struct rgaps_plugin_env, shm_check) + sizeof(env->shm_check) &&
	       env->shm_create && env->shm_check;
}

/** Whether env carries the data-port admission hooks (a host that has them set both). */
static inline bool rgaps_plugin_env_has_admission(const struct rgaps_plugin_env *env)
{
	return env &&
	       env->struct_size >=
		       offsetof(struct rgaps_plugin_env, admit_arg) + sizeof(env->admit_arg) &&
	       env->conn_pending && env->conn_settled;
}

/**
 * The configured value of option name, if the host set it: true and *value.
 * Safe with an env from a host built before options existed (struct_size).
 */
static inline bool rgaps_plugin_env_option(const struct rgaps_plugin_env *env, const char *name,
					   uint64_t *value)
{
	if (!env || env->struct_size < offsetof(struct rgaps_plugin_env, noptions) +
					       sizeof(env->noptions))
		return false;
	for (uint32_t i = 0; i < env->noptions; i++) {
		if (strcmp(env->options[i].name, name) == 0) {
			*value = env->options[i].value;
			return true;
		}
	}
	return false;
}

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

/**
 * A pool_import() flag set by the core, outside the plugin-defined low 16
 * bits: map the pool read-only (a subscriber's view of a publisher's pool).
 * Host memory comes with a read-only fd as well; a device backend sets the
 * mapping's access so (cuMemSetAccess PROT_READ).
 */
#define RGAPS_MEM_IMPORT_READONLY 0x10000u

/** pool_grant() flags. */
#define RGAPS_MEM_GRANT_READ 0x1u
#define RGAPS_MEM_GRANT_WRITE 0x2u

/** The most devices a topology describes (more are ignored). */
#define RGAPS_MEM_MAX_DEVICES 32

/** How device i reaches device j's memory (struct rgaps_mem_topology). */
enum rgaps_mem_link_kind {
	RGAPS_MEM_LINK_NONE = 0,   /**< no peer access: copies go through host memory */
	RGAPS_MEM_LINK_PCIE = 1,   /**< peer access over PCIe */
	RGAPS_MEM_LINK_NVLINK = 2, /**< peer access over NVLink (or an equally fast fabric) */
	RGAPS_MEM_LINK_SELF = 3,   /**< i == j */
};

struct rgaps_mem_link {
	uint8_t kind;	 /**< enum rgaps_mem_link_kind */
	uint8_t atomics; /**< native atomics across the link */
	int8_t rank;	 /**< the driver's performance rank (0 best), -1 unknown */
	uint8_t pad;
};

/** The devices of the host (memory op topology()). */
struct rgaps_mem_topology {
	uint32_t struct_size; /**< set by the caller */
	uint32_t ndevices;    /**< at most RGAPS_MEM_MAX_DEVICES */
	char pci[RGAPS_MEM_MAX_DEVICES][16]; /**< "0000:3b:00.0" (lower case), "" unknown */
	struct rgaps_mem_link link[RGAPS_MEM_MAX_DEVICES][RGAPS_MEM_MAX_DEVICES]; /**< [from][to] */
	char how[128]; /**< how the links were learned, for the log ("NVML", "P2P attributes") */
};

/** fence_create() flags and the size of a fence's shareable handle. */
#define RGAPS_FENCE_IPC 0x1u
#define RGAPS_FENCE_HANDLE_LEN 64

/**
 * One destination of copy_relay(): n bytes go to dst, on device, from the
 * source (from = -1) or from the destination of an earlier hop (0 <= from <
 * this hop's index), whose device must be able to read from.
 */
struct rgaps_relay_hop {
	void *dst;
	int32_t device;
	int32_t from;
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
	/**
	 * Map a pool created elsewhere; the fd is consumed (owned by the region, or
	 * closed on failure). flags: the creator's region.flags, plus
	 * RGAPS_MEM_IMPORT_READONLY. A host pool's fd is checked (env shm_check:
	 * made by rgapsd, and sealed for good unless it is the importer's own).
	 */
	int (*pool_import)(void *ctx, int fd, uint64_t size, int32_t device, uint32_t flags,
			   struct rgaps_mem_region *region_p);
	/**
	 * Unmap / free this process's view; the creator's destroy frees the memory.
	 * Any thread may call it (rgapsd releases pools on a thread of their own,
	 * never on its loop).
	 */
	void (*pool_release)(void *ctx, struct rgaps_mem_region *region);
	/** Synchronous copy of n bytes between pool and caller memory (either side device). */
	int (*copy)(void *ctx, void *dst, const void *src, size_t n, uint32_t dir);
	/** Pin host memory so the device can DMA from/to it (the DP1 staging pool). */
	int (*host_register)(void *ctx, void *ptr, size_t n);
	int (*host_unregister)(void *ctx, void *ptr);
	/**
	 * Start a copy and return at once; done(arg, status) is called exactly once
	 * when it completed, possibly before this returns and from any thread (a
	 * CUDA host callback): it must only signal. Copies started on one context
	 * complete in the order they were started. -ENOTSUP: use copy() instead.
	 */
	int (*copy_async)(void *ctx, void *dst, const void *src, size_t n, uint32_t dir,
			  void (*done)(void *arg, int status), void *arg);
	/** NUMA node nearest to device (host memory it DMAs to should live there), or -1. */
	int (*numa_node)(void *ctx, int32_t device);

	/*
	 * Several devices and stream order (docs/GPU.md, "Every GPU of a host").
	 * Appended to the table, so a plugin built before them gets the loader's
	 * -ENOTSUP stubs and a host built before them never calls them: the ABI
	 * version is unchanged (ops_size tells the loader what a plugin has).
	 */
	/**
	 * The host's devices as this backend sees them: how many, their PCI
	 * addresses and which can map which other's memory (topo->struct_size is
	 * set by the caller). ndevices 0: a backend without devices (host memory).
	 */
	int (*topology)(void *ctx, struct rgaps_mem_topology *topo);
	/**
	 * Open a mapped region (from pool_create or pool_import) to another device
	 * of this host as well: flags RGAPS_MEM_GRANT_READ, plus _WRITE for read-write.
	 * -ENODEV (logged with the reason) when that device cannot reach the
	 * region's memory; then its kernels must not touch it.
	 */
	int (*pool_grant)(void *ctx, struct rgaps_mem_region *region, int32_t device,
			  uint32_t flags);
	/**
	 * Queue a copy of n bytes on the caller's stream (a cudaStream_t; 0 is the
	 * default stream) and return: ordered after the caller's prior work on it.
	 * Either side may be a pool or caller memory.
	 */
	int (*copy_stream)(void *ctx, void *dst, const void *src, size_t n, void *stream);
	/** Block the calling thread until the caller's stream has done its work so far. */
	int (*stream_sync)(void *ctx, void *stream);
	/**
	 * A fence: a point in a stream that other streams and processes can wait
	 * for (a CUDA event). device: where its records happen. With
	 * RGAPS_FENCE_IPC it is shareable: handle receives the bytes that
	 * fence_open() takes in another process of the host, and state is the
	 * fence slot's 8-byte state word in the creator's region (zero at first;
	 * NULL for a fence that is not shared): memory rgapsd made and sealed, so
	 * reading it never faults, writable here and read-only in every other
	 * process. A backend whose fences need state that other processes read
	 * (the host backend's completion time) keeps it there, never in an
	 * object of its own that a handle would name. The word stays mapped while
	 * the fence may be recorded, queried or waited on; fence_destroy() must
	 * not touch it.
	 */
	int (*fence_create)(void *ctx, int32_t device, uint32_t flags, void **fence_p,
			    uint8_t handle[RGAPS_FENCE_HANDLE_LEN], uint64_t *state);
	/**
	 * Open another process's fence from its handle and state word (both
	 * untrusted: written by that process; the backend checks them). state is
	 * the slot's word in this process's read-only mapping of the creator's
	 * region, mapped as fence_create() says.
	 */
	int (*fence_open)(void *ctx, const uint8_t handle[RGAPS_FENCE_HANDLE_LEN],
			  const uint64_t *state, void **fence_p);
	void (*fence_destroy)(void *ctx, void *fence);
	/** The fence completes when the stream's work queued so far has. */
	int (*fence_record)(void *ctx, void *fence, void *stream);
	/** 0: complete (or never recorded); -EAGAIN: not yet; else the error of the work. */
	int (*fence_query)(void *ctx, void *fence);
	/** Order the stream's later work after the fence's last record; returns at once. */
	int (*fence_wait)(void *ctx, void *fence, void *stream);
	/**
	 * Free and total memory of device now, in bytes (rgapsd's gpu_reserve is
	 * checked with it before each pool). -ENOTSUP: the backend has no device
	 * memory (host), or is older than this operation.
	 */
	int (*mem_info)(void *ctx, int32_t device, uint64_t *free_p, uint64_t *total_p);
	/**
	 * Copy n bytes from src to every hop's dst, each hop fed from its `from`
	 * (a chain: from = i - 1; a star: from = -1), in pieces of at most piece
	 * bytes: piece j of a hop moves while piece j + 1 of the hop it is fed
	 * from does, so that each link carries each byte once and a chain of h
	 * hops is whole about (n + (h - 1) * piece) / link rate after the start.
	 * The hops' devices are distinct, and each can read its source's memory
	 * (pool_grant). Blocks the calling thread; whole(arg, i) is called on it
	 * once per hop, in hop order, as soon as hop i holds all n bytes. 0; or
	 * the error of the first hop that failed, after waiting for every piece
	 * that was started (no whole() for that hop and those after it).
	 */
	int (*copy_relay)(void *ctx, const void *src, size_t n, const struct rgaps_relay_hop *hops,
			  uint32_t nhops, size_t piece, void (*whole)(void *arg, uint32_t hop),
			  void *arg);
	/**
	 * copy(), with calls while it runs: once the copy is under way (queued on
	 * the device), during(arg) is called on the calling thread, and again as
	 * long as it returns true and the copy has not ended; then the copy is
	 * waited for. A publisher uses the time to wake its subscribers shortly
	 * before the copy ends, so that they are up when the message is
	 * (docs/SHM-LAYOUT.md, "Early wake"). during() is not called when the copy
	 * could not be started. -ENOTSUP (a backend whose copies run on the
	 * calling thread): use copy().
	 */
	int (*copy_during)(void *ctx, void *dst, const void *src, size_t n, uint32_t dir,
			   bool (*during)(void *arg), void *arg);
};

/* ------------------------------------------------------------------ */
/* transport                                                           */
/* ------------------------------------------------------------------ */

/*
 * A transport moves records from a sender daemon into a receive ring of a
 * receiver daemon (docs/ARCHITECTURE.md section 4; docs/PROTOCOL.md section 3). The core
 * decides every offset (Tail/Head/Delayed Head arithmetic, src/daemon/remote/ring.h);
 * the transport only writes bytes where it is told and reports completions.
 * Its operations are called on the daemon's loop thread and its callbacks
 * come on that thread, never from inside the operation that caused them (no
 * re-entrance). The bytes may move on threads of the transport's own (tcp:
 * two per TCP stream), which reach the loop through a uv_async handle.
 *
 * Links are data connections to one peer daemon. The peer control plane
 * (authenticated, src/daemon/peers/peers.c) tells the listener which 16-byte token
 * to expect; the connector presents it (tcp: first bytes on the stream; verbs:
 * rdma_cm private data). A link whose token the core does not know is closed.
 *
 * Guarantees every transport gives (the core relies on them):
 * - record_sent comes once per posted record, in posting order per ring.
 * - When a link fails, every outstanding record gets its record_sent (status 0
 *   if it completed, else the error) before link_down; after link_down the
 *   link is freed. After link_connected(link, err < 0) the link is freed too
 *   and no link_down follows.
 * - close(), ring_detach() and fini() make no callbacks; after ring_detach()
 *   the transport writes nothing more into that ring's memory, and no
 *   head_update comes for that ring (a Head that arrives late is dropped).
 * - record_landed's len is the record's exact length (tcp) or its 64-byte
 *   aligned footprint (verbs: the immediate carries 64-byte units); the exact
 *   length is 64 + the header's chunk_len (+ 8: a stage tag, flag TAG).
 * - record_header, where a transport calls it (tcp; verbs never does), comes
 *   for every record of the link, in ring order, before that record's
 *   record_landed; after ring_detach() none comes for that ring, and the
 *   transport writes nothing more where record_header told it to.
 * - A ring id names one ring per link: the core gives each direction its own
 *   half of the ids (docs/PROTOCOL.md section 4).
 * - Descriptor buffers hold RGAPS_RING_DESC_MAX bytes; *desc_len_p is output.
 * - Plugins with uv handles are linked -z nodelete: fini() leaves handle
 *   closes to the loop, whose callbacks live in the plugin (the daemon also
 *   unloads transports only after its loop has closed every handle).
 */

#define RGAPS_LINK_TOKEN_LEN 16
#define RGAPS_RING_DESC_MAX 64 /* bytes of an opaque ring / head-word descriptor */
#define RGAPS_RECORD_SG_MAX 4
/* Bytes of a record that land in the ring before record_header: its header (PROTOCOL.md 3). */
#define RGAPS_RECORD_PEEK 64

/* Where a record's bytes come from: pieces of locally registered memory. */
struct rgaps_sg {
	void *mr;     /* from reg_local() */
	void *addr;   /* inside that registration */
	uint64_t len;
};

struct rgaps_transport_cbs {
	void *arg;
	/* Accepted link presenting token (listener side). */
	void (*link_accepted)(void *arg, struct rgaps_link *link,
			      const uint8_t token[RGAPS_LINK_TOKEN_LEN]);
	/* A connect() finished: status 0 (up) or a negative errno. */
	void (*link_connected)(void *arg, struct rgaps_link *link, int status);
	/* The link failed or was closed by the peer; why is for the log. The link is
	 * freed after this returns; the core must not use it again. */
	void (*link_down)(void *arg, struct rgaps_link *link, int err, const char *why);
	/*
	 * Receiver: a record of len bytes landed in ring ring_id. off is the ring
	 * offset the sender claims (tcp) or UINT64_MAX when the transport cannot
	 * know it (verbs: the immediate carries only ring and length; the core
	 * computes the placement). The bytes are in ring memory already.
	 */
	void (*record_landed)(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t off,
			      uint64_t len);
	/*
	 * Receiver, optional (NULL: every record lands whole in the ring): a record
	 * of len bytes for ring ring_id at off (as record_landed) is arriving, and
	 * its first RGAPS_RECORD_PEEK bytes (all of it when shorter) are in ring
	 * memory already. With can_redirect the transport can receive the rest
	 * elsewhere: the core may return host memory for bytes [RGAPS_RECORD_PEEK,
	 * len) of the record, which the transport writes there instead of into the
	 * ring (those ring bytes stay as they were); NULL: into the ring. The
	 * memory must stay writable until the record's record_landed, or until
	 * ring_detach() of its ring, after which the transport writes none of it.
	 */
	void *(*record_header)(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t off,
			       uint64_t len, bool can_redirect);
	/* Sender: the record posted with cookie is out of the source memory (status < 0: failed). */
	void (*record_sent)(void *arg, struct rgaps_link *link, uint64_t cookie, int status);
	/* Sender: the receiver advanced Head of ring ring_id (the Delayed Head). */
	void (*head_update)(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t head);
};

/* Counters a transport keeps per link (stats). */
struct rgaps_link_stats {
	uint64_t records_sent, bytes_sent, records_landed, bytes_landed;
	uint64_t head_updates_sent, head_updates_received;
	uint64_t send_credit_stalls; /* post_record refused for lack of send credits */
	uint64_t cq_events, cq_polls_busy; /* completion-channel wake-ups, busy-poll rounds */
	uint64_t cq_overflows;	    /* must stay 0 */
	uint64_t records_late;	    /* landed in a ring detached meanwhile: dropped */
	uint64_t zc_sends;  /* sends that left the source memory without a copy (MSG_ZEROCOPY) */
	uint64_t zc_copied; /* ... that the kernel completed with a copy after all (loopback) */
};

struct rgaps_transport_ops {
	int (*init)(const struct rgaps_plugin_env *env, const struct rgaps_transport_cbs *cbs,
		    void **ctx_p);
	/* Close every link (no callbacks), release everything. */
	void (*fini)(void *ctx);
	/* 0 if usable here; else -ENODEV and why (verbs: no active RDMA port). */
	int (*probe)(void *ctx, char *why, size_t whylen);
	/* Accept data links on host:port (host may be "0.0.0.0"). */
	int (*listen)(void *ctx, const char *host, uint16_t port);
	/* Open a data link to host:port presenting token; completion via link_connected. */
	int (*connect)(void *ctx, const char *host, uint16_t port,
		       const uint8_t token[RGAPS_LINK_TOKEN_LEN], struct rgaps_link **link_p);
	/* Tear a link down (QP to error, drain, destroy): no link_down callback follows. */
	void (*close)(void *ctx, struct rgaps_link *link);

	/* Register local memory as a source of records (staging pool, header buffers). */
	int (*reg_local)(void *ctx, void *addr, uint64_t len, void **mr_p);
	void (*dereg_local)(void *ctx, void *mr);

	/*
	 * Ring set-up, in the order of the topic initialisation sequence:
	 * 1. sender:   sender_ring_prepare() -> descriptor of its Delayed Head word;
	 * 2. receiver: receiver_ring_attach() with that descriptor and its ring
	 *              memory -> descriptor of the ring (address, key, size);
	 * 3. sender:   sender_ring_connect() with the ring's descriptor.
	 * Descriptors are opaque bytes (<= RGAPS_RING_DESC_MAX) the core carries
	 * over the peer control plane. ring_id is chosen by the sender, < 128.
	 */
	int (*sender_ring_prepare)(void *ctx, struct rgaps_link *link, uint32_t ring_id,
				   uint8_t *desc, size_t *desc_len_p);
	int (*receiver_ring_attach)(void *ctx, struct rgaps_link *link, uint32_t ring_id,
				    void *ring, uint64_t size, const uint8_t *peer_desc,
				    size_t peer_desc_len, uint8_t *desc, size_t *desc_len_p);
	int (*sender_ring_connect)(void *ctx, struct rgaps_link *link, uint32_t ring_id,
				   const uint8_t *desc, size_t desc_len);
	void (*ring_detach)(void *ctx, struct rgaps_link *link, uint32_t ring_id);

	/*
	 * Sender: write the gathered pieces (total len bytes) into ring ring_id at
	 * offset off, contiguously, and tell the receiver (RDMA WRITE WITH
	 * IMMEDIATE / a framed write). -EAGAIN when out of send credits: retry
	 * after a record_sent. cookie comes back in record_sent. Posts may be
	 * batched: the transport rings the doorbell at the latest in flush().
	 */
	int (*post_record)(void *ctx, struct rgaps_link *link, uint32_t ring_id, uint64_t off,
			   const struct rgaps_sg *sg, uint32_t nsg, uint64_t cookie);
	/* Receiver: publish a new Head of ring_id to the sender's Delayed Head word. */
	int (*post_head)(void *ctx, struct rgaps_link *link, uint32_t ring_id, uint64_t head);
	/* Ring the doorbell for everything posted since the last flush. */
	void (*flush)(void *ctx, struct rgaps_link *link);
	void (*link_stats)(void *ctx, struct rgaps_link *link, struct rgaps_link_stats *st);
};

/* ------------------------------------------------------------------ */
/* stage                                                               */
/* ------------------------------------------------------------------ */

/*
 * A stage is a processing step that rgapsd runs on the messages of the topics
 * that name it in their "stages" key, at fixed points of the remote path
 * (docs/ARCHITECTURE.md section 5): on the sending host before each chunk's
 * record is posted, on the receiving host after each record landed (before
 * its copy into the pool) and before a whole message is published to local
 * subscribers. process() runs on rgapsd's stage worker threads, never on the
 * loop; several chunks of one topic may be processed at once on different
 * threads, each with its own struct rgaps_stage_work.
 *
 * A stage may carry a few bytes from the sending host to the receiving one
 * with each chunk (tag_len, at most RGAPS_STAGE_TAG_MAX for all the stages of
 * a topic together): the sender's BEFORE_SEND writes them, the receiver's
 * AFTER_LANDING reads them (docs/PROTOCOL.md section 3: the record's stage
 * tag, 8 bytes behind its chunk).
 * Both hosts must run the same stages on a topic; a topic set-up between
 * hosts that do not is refused with both lists.
 */

#define RGAPS_STAGE_TAG_MAX 8

/** Where in the remote path a stage runs (a bit set in struct rgaps_stage_desc.points). */
enum rgaps_stage_point {
	RGAPS_STAGE_BEFORE_SEND = 1u << 0,    /**< sender: a chunk's bytes are staged */
	RGAPS_STAGE_AFTER_LANDING = 1u << 1,  /**< receiver: a record landed, header checked */
	RGAPS_STAGE_BEFORE_PUBLISH = 1u << 2, /**< receiver: the message is whole in the pool */
};

/** What process() returns. */
enum rgaps_stage_result {
	RGAPS_STAGE_CONTINUE = 0, /**< done: the chunk goes on */
	RGAPS_STAGE_ASYNC = 1,	  /**< will call work->done(work, result) exactly once, from any thread */
	RGAPS_STAGE_FAIL = 2,	  /**< the message is dropped (counted as a gap), why in work->why */
};

/** What a stage declares once, at init (describe). */
struct rgaps_stage_desc {
	uint32_t points;	   /**< enum rgaps_stage_point bits */
	uint32_t topic_state_size; /**< bytes of per-topic state (zeroed at topic_open) */
	uint32_t msg_state_size;   /**< bytes of per-message state (zeroed at its first chunk) */
	uint32_t tag_len;	   /**< bytes it carries per chunk from sender to receiver */
};

/** One unit of work: a chunk (BEFORE_SEND, AFTER_LANDING) or a message (BEFORE_PUBLISH). */
struct rgaps_stage_work {
	uint32_t point;	       /**< enum rgaps_stage_point: where this runs */
	uint32_t mem_kind;     /**< enum rgaps_mem_kind of data */
	const char *topic;
	uint64_t msg_seq, msg_size;
	uint64_t chunk_off;    /**< of data in its message (BEFORE_PUBLISH: 0) */
	const uint8_t *data;   /**< the bytes, readable for the call (device memory: mem_kind) */
	uint64_t len;
	uint8_t *tag;	       /**< tag_len bytes: BEFORE_SEND writes, AFTER_LANDING reads */
	void *topic_state;     /**< topic_state_size bytes, shared by concurrent calls: lock it */
	void *msg_state;       /**< msg_state_size bytes (chunks of one message never run at once) */
	char *why;	       /**< FAIL: why, for the log and stats */
	size_t whylen;
	/** ASYNC: report the result (CONTINUE or FAIL) exactly once, from any thread. */
	void (*done)(struct rgaps_stage_work *work, int result);
};

struct rgaps_stage_ops {
	int (*init)(const struct rgaps_plugin_env *env, void **ctx_p);
	void (*fini)(void *ctx);
	/** What the stage is (points, state sizes, tag). */
	int (*describe)(void *ctx, struct rgaps_stage_desc *desc_p);
	/** A topic starts using the stage (its state is zeroed). */
	int (*topic_open)(void *ctx, const char *topic, void *topic_state);
	void (*topic_close)(void *ctx, void *topic_state);
	/** Process one chunk or message: enum rgaps_stage_result. */
	int (*process)(void *ctx, struct rgaps_stage_work *work);
};

/* ------------------------------------------------------------------ */
/* the one exported object                                             */
/* ------------------------------------------------------------------ */

/** Largest data-port offset a transport may declare. */
#define RGAPS_PLUGIN_PORT_OFFSET_MAX 99

/**
 * What a plugin is. rgapsd discovers plugins by kind: every file
 * `<kind>-<name>.so` in its plugin directory whose descriptor passes the
 * checks (ABI version, kind, name matching the file) is registered under its
 * name; topic and daemon configuration name plugins by that name, or "auto".
 */
struct rgaps_plugin {
	uint32_t abi_version; /**< RGAPS_PLUGIN_ABI_VERSION */
	uint32_t struct_size; /**< sizeof(struct rgaps_plugin) as the plugin built it */
	uint32_t kind;	      /**< enum rgaps_plugin_kind */
	uint32_t ops_size;    /**< sizeof the ops table as the plugin built it */
	const char *name;     /**< 1..31 of a-z 0-9 _ -, the `<name>` of its file name */
	const char *description;
	const void *ops; /**< const struct rgaps_memory_ops * etc., per kind */
	/** Tunables the plugin accepts (may be NULL / 0); see struct rgaps_plugin_option. */
	const struct rgaps_plugin_option *options;
	uint32_t noptions;
	/**
	 * Choice under "auto": of the plugins of a kind that are usable here (probe),
	 * the one with the highest priority serves (ties: the smaller name). 0: never
	 * chosen by "auto", only when named. The shipped ones: memory cuda 20, host
	 * 10; transport verbs 20, tcp 10.
	 */
	uint32_t priority;
	/**
	 * Transports: data links listen on the daemon's control port + this offset
	 * (1..RGAPS_PLUGIN_PORT_OFFSET_MAX, different for every transport of a
	 * daemon). 0 for other kinds.
	 */
	uint32_t data_port_offset;
};

#ifdef __cplusplus
}
#endif

#endif
