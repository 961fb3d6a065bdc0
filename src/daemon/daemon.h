/*
 * rgapsd's process-wide state, owned by the loop thread: configuration, the
 * control server, the topic table and the loaded plugins. Lifecycle:
 * rgapsd_init() -> uv_run() -> (SIGTERM/SIGINT) rgapsd_shutdown() -> the loop
 * drains its handles -> rgapsd_fini().
 */
#ifndef RGAPSD_DAEMON_H
#define RGAPSD_DAEMON_H

#include <stdbool.h>
#include <pthread.h>
#include <stdint.h>
#include <uv.h>

#include "../common/config.h"
#include "../common/log.h"
#include "../common/fence.h"
#include "../common/plugin_loader.h"
#include "../common/shm.h"
#include "../common/topic.h"
#include "config_file.h"
#include "control.h"
#include "looplag.h"
#include "registry.h"
#include "worker.h"

#define RGAPSD_MAX_MEMORY_PLUGINS 4
#define RGAPSD_MAX_TRANSPORTS 4

enum rgapsd_member_kind {
	RGAPSD_MEMBER_PUB, /* a publisher stream: control region + pool */
	RGAPSD_MEMBER_SUB, /* a subscriber region */
};

/* A member's `serve`: which streams a subscriber reads, which readers a stream has. */
#define RGAPSD_SERVE_ORIGINAL (-1) /* the topic's own streams (pools on its device) */

enum rgapsd_member_state {
	RGAPSD_MEMBER_PENDING,	/* made; its owner maps it: in no table, read by nobody */
	RGAPSD_MEMBER_ACTIVE,	/* its owner is attached */
	RGAPSD_MEMBER_DRAINING, /* publisher gone; subscribers read up to limit */
	RGAPSD_MEMBER_GONE,	/* out of the topic; freed once nobody maps it through us */
};

/*
 * One attachment to a topic and the shared memory made for it
 * (docs/SHM-LAYOUT.md). Owned by the loop thread; rgapsd's own views (the
 * forwarder's subscriber, the receivers' publishers) take references, and the
 * loop frees a GONE member once no reference is left (members.c).
 */
struct rgapsd_member {
	struct rgapsd_topic *t;
	uint32_t refs; /* atomic: views of rgapsd's own that map it through this */
	enum rgapsd_member_kind kind;
	enum rgapsd_member_state state; /* under t->lock */
	uint32_t slot;			/* from activation on */
	uint64_t gen;
	uint64_t limit; /* DRAINING: the stream's final head (under t->lock) */
	uint64_t since_ns; /* DRAINING since */
	uint64_t conn_id;  /* 0: rgapsd's own */
	pid_t pid;
	int fd;	  /* the region's fd (read-write; a read-only one is opened per share) */
	void *map; /* rgapsd's mapping: read-write for its own members and until activation,
		      else read-only */
	size_t size;
	struct rgaps_mem_region pool; /* publishers */
	void *pool_mr[RGAPSD_MAX_TRANSPORTS]; /* transport registrations of a host pool (remote/) */
	bool own;
	/*
	 * Several GPUs (docs/GPU.md). gpu: the GPU the client works on (-1: unknown,
	 * none, or rgapsd's own member); pool_dev: a stream's pool device; serve:
	 * RGAPSD_SERVE_ORIGINAL or a GPU g - a subscriber reads exactly the streams
	 * of its own serve, the topic's own streams or rgapsd's replica for GPU g.
	 */
	int32_t gpu;
	int32_t pool_dev;
	int32_t serve;
};

/* What to make (rgapsd_member_create_spec). */
struct rgapsd_member_spec {
	enum rgapsd_member_kind kind;
	uint64_t conn_id; /* 0: rgapsd's own */
	pid_t pid;
	bool own;
	int32_t gpu;	  /* the client's GPU, -1 unknown */
	int32_t pool_dev; /* publishers: where the pool goes; -1: the topic's device */
	int32_t serve;
};

/* How a topic serves one GPU of the host (topics.c). */
enum rgapsd_gpu_role {
	RGAPSD_GPU_UNSET = 0, /* nobody attached from it yet */
	RGAPSD_GPU_POOL,      /* the topic's device: pools live there */
	RGAPSD_GPU_PEER,      /* reads the pools in place (peer access) */
	RGAPSD_GPU_REPLICA,   /* reads rgapsd's replica on it (replicator.c) */
};

struct rgapsd_replicator;

struct rgapsd_gpu {
	enum rgapsd_gpu_role role;
	char why[192];			/* the decision in words (logged, in stats) */
	uint64_t copies, bytes, lost;	/* of replicas that ended */
	uint64_t idle_since;		/* no subscriber left on it since (for the sweep) */
};

struct cJSON;

struct rgapsd_topic {
	struct rgapsd_topic *next;
	struct rgapsd *d;
	struct rgaps_topic_config cfg;
	struct rgaps_topic_limits lim;
	struct rgaps_topic_hdr *hdr; /* read-write here; clients map it read-only */
	int hdr_fd;
	struct rgaps_loaded_plugin *mem; /* shared, owned by struct rgapsd */
	pthread_mutex_t lock;		 /* pubs/subs and member state: loop writes, forwarder reads */
	struct rgapsd_member **pubs;	 /* [max_publishers] */
	struct rgapsd_member **subs;	 /* [max_subscribers] */
	uint32_t npubs, nsubs, ndraining;
	struct rgapsd_member **gone;	 /* GONE members still referenced by a view */
	uint32_t ngone, gone_cap;
	uint64_t next_gen;
	uint32_t attachments;
	uint32_t local_subs;  /* client subscribers (advertised to peers when > 0) */
	bool publishers_seen; /* a local publisher attached once: send to interested peers */
	uint64_t landed_msgs, landed_bytes; /* received from peers and published here */
	uint64_t refused_msgs;		    /* received from peers, refused here (counted gaps) */
	uint64_t landed_gaps;		    /* lost upstream (seen as sequence gaps), all rings */
	/* Counters of members that are gone, folded in when they went. */
	struct rgaps_pub_counters gone_pubs;
	struct rgaps_sub_counters gone_subs;
	struct rgaps_lathist gone_latency;
	uint64_t reclaimed_holds, reclaimed_loans, bad_regions;
	bool adhoc;			    /* made from the defaults: counts in max_topics */
	bool has_creator;		    /* a client's attach made it (not a peer's set-up) */
	uint64_t busy_ns;		    /* last seen in use (topic_idle_s; monotonic) */
	uid_t creator;			    /* that client's uid: counts in its quota */
	/* The host's GPUs as the memory plugin sees them (NULL or none: a host topic). */
	struct rgaps_mem_topology *topo;
	struct rgapsd_gpu *gpus; /* [topo->ndevices] */
	struct rgapsd_replicator *replicator; /* while some GPU reads a replica (replicator.c) */
};

/* A client as its socket credentials name it (access.c). */
struct rgapsd_client_id {
	uid_t uid;
	gid_t gid;
	const gid_t *groups; /* supplementary groups (SO_PEERGROUPS) */
	uint32_t ngroups;
};

/* Requests and topics refused by a limit or an allow-list, for `rgaps stats`. */
struct rgapsd_refusals {
	uint64_t attach_denied;		  /* not on the topic's allow-list */
	uint64_t topics_refused_max;	  /* max_topics */
	uint64_t topics_refused_quota;	  /* max_topics_per_user */
	uint64_t topics_refused_unconfigured; /* create_topics "configured" */
};

/*
 * What the layers above the topic table learn of it, through the hooks they
 * register (rgapsd_topics_hook: the remote path's): the topic table and its
 * members never call them by name. Each may be NULL; all run on the loop.
 */
struct rgapsd_topic_hooks {
	/* A publisher stream's pool is about to be released: let go of what refers to
	 * it (the transports' registrations of it). */
	void (*member_gone)(void *ctx, struct rgapsd_member *m);
	/* Does the layer hold topic t? An idle topic is removed only when none does. */
	bool (*topic_held)(void *ctx, struct rgapsd_topic *t);
};

struct rgapsd {
	uv_loop_t *loop;
	struct rgapsd_config cfg;
	char instance[RGAPS_CFG_NAME_MAX];
	char plugin_dir[RGAPS_PATH_MAX];
	struct rgapsd_registry reg; /* the plugins found in plugin_dir */
	struct rgapsd_control *ctl;
	uv_signal_t sig_term, sig_int;
	struct rgapsd_looplag lag; /* how late the loop runs (stats, peer deadlines) */
	struct rgapsd_topic *topics;
	uint32_t ntopics;
	struct rgaps_loaded_plugin *mem_plugins[RGAPSD_MAX_MEMORY_PLUGINS];
	uint32_t nmem_plugins;
	uint64_t start_ns;
	uint64_t requests, request_errors, connections;
	struct rgapsd_refusals refused;
	struct rgaps_ratelimit log_rl; /* refused requests: a client can cause them at will */
	bool stopping;
	struct rgapsd_notify *notify;	   /* systemd's notify socket (NULL: not under systemd) */
	struct rgapsd_remote *remote;	   /* peers and transports (NULL: single host) */
	struct rgapsd_remote *remote_dead; /* a failed start, freed in rgapsd_fini */
	struct rgapsd_metrics *metrics;	   /* metrics_listen's HTTP server (NULL: off) */
	const struct rgapsd_topic_hooks *hooks; /* NULL: nobody above the topics listens */
	void *hooks_ctx;
	uv_timer_t sweep; /* replicas, departed streams, idle topics (topics.c) */
	struct rgapsd_worker reaper; /* releases freed members' memory, off the loop */
	bool sweep_started;
	uint64_t idle_checked_ns;     /* the last look for idle topics (topics.c) */
	uint64_t topics_removed_idle; /* topic_idle_s */
	uint64_t gpu_pools_refused;   /* gpu_reserve */
};

int rgapsd_init(struct rgapsd *d, uv_loop_t *loop, const struct rgapsd_config *cfg);
void rgapsd_shutdown(struct rgapsd *d);
void rgapsd_fini(struct rgapsd *d);

/* Request handling (requests.c). */
void rgapsd_on_frame(void *ctx, struct rgapsd_conn *conn, const char *payload, size_t len);
void rgapsd_on_close(void *ctx, struct rgapsd_conn *conn);
/*
 * The whole `stats` reply, every topic and peer, in one object (what the pages of a
 * stats request merge to), as rgapsd's own user sees it: for metrics_listen. On the
 * loop; NULL when out of memory.
 */
struct cJSON *rgapsd_stats_all(struct rgapsd *d);

/* Topics (topics.c). */
int rgapsd_topic_get(struct rgapsd *d, const char *name, struct rgapsd_topic **t_p, char *err,
		      size_t errlen);
void rgapsd_topics_destroy(struct rgapsd *d);
/*
 * The sweep, every 100 ms on the loop: each topic's replicas without
 * subscribers and its departed members (rgapsd_members_sweep), then the topics
 * made from the defaults that topic_idle_s says are unused.
 */
void rgapsd_topics_start(struct rgapsd *d);
void rgapsd_topics_stop(struct rgapsd *d);
/* Register the hooks of the layer above (NULL: none); on the loop. */
void rgapsd_topics_hook(struct rgapsd *d, const struct rgapsd_topic_hooks *hooks, void *ctx);

/* What a client says of its GPUs at attach (requests.c): GPUs match by PCI address. */
struct rgapsd_client_gpus {
	int32_t gpu;	 /* the GPU it works on, by its own ordinal; -1 unknown */
	const char *pci; /* that GPU's PCI address; NULL unknown */
	uint32_t nseen;	 /* 0: it did not say which GPUs it sees */
	const char *seen[RGAPS_MEM_MAX_DEVICES]; /* the PCI address of every GPU it sees */
};

/*
 * Where a client attaching as a subscriber or publisher is served (topics.c):
 * *gpu_p its GPU as rgapsd numbers it, *serve_p, *path_p ("local", "peer",
 * "replica"), *grant_rw_p (a publisher's own pool may be opened read-write to
 * its GPU). A subscriber that cannot see the pools' GPU reads a replica on its
 * own. Starts the GPU's replica if it needs one. -ENODEV (err says why in
 * words, naming GPUs by PCI address) for a GPU the topic cannot serve, or the
 * replica's failure.
 */
int rgapsd_topic_gpu_attach(struct rgapsd_topic *t, bool sub, const struct rgapsd_client_gpus *cg,
			     int32_t *gpu_p, int32_t *serve_p, const char **path_p,
			     bool *grant_rw_p, char *err, size_t errlen);
/* The PCI address of GPU gpu as rgapsd numbers them, NULL unknown. */
const char *rgapsd_gpu_pci(const struct rgapsd_topic *t, int32_t gpu);
/* The "gpus" array of a topic's stats (NULL: no GPU to tell of). Returns cJSON *. */
struct cJSON *rgapsd_topic_gpus_json(struct rgapsd_topic *t);
/* The table of a topic's members of kind (*n_p: its slots), under t->lock or on the loop. */
static inline struct rgapsd_member **rgapsd_member_table(struct rgapsd_topic *t,
							 enum rgapsd_member_kind kind,
							 uint32_t *n_p)
{
	*n_p = kind == RGAPSD_MEMBER_PUB ? t->lim.max_publishers : t->lim.max_subscribers;
	return kind == RGAPSD_MEMBER_PUB ? t->pubs : t->subs;
}
/* Does subscriber member s read stream member p? */
static inline bool rgapsd_member_reads(const struct rgapsd_member *s, const struct rgapsd_member *p)
{
	return s->serve == p->serve;
}

/*
 * Replicas (replicator.c): one per (topic, GPU) that subscribers read a
 * replica on, all fed by the topic's one replicator along a chain of GPUs.
 * On the loop. start: make GPU gpu's replica (and the replicator), or keep
 * the one there is; -ENODEV or -ENOMEM with err in words. stop: ask it out
 * (the sweep ends it once the replicator let go of it).
 */
int rgapsd_replica_start(struct rgapsd_topic *t, int32_t gpu, char *err, size_t errlen);
void rgapsd_replica_stop(struct rgapsd_topic *t, int32_t gpu);
/* Is there a replica on gpu (being fed, or about to be)? */
bool rgapsd_replica_on(const struct rgapsd_topic *t, int32_t gpu);
/* End the replicas let go of; stop the replicator when none is left. */
void rgapsd_replicator_sweep(struct rgapsd_topic *t);
/* Stop the replicator and end every replica (the topic goes). */
void rgapsd_replicator_destroy(struct rgapsd_topic *t);
struct rgapsd_replica_stats {
	uint64_t copies, bytes, lost, stream;
	int32_t fed_from; /* the GPU its bytes come from, -1 not fed yet */
	const char *how;  /* "peer" (over a link), "host" (through host memory) */
};
/* The replica on gpu: false if there is none. */
bool rgapsd_replica_stats_get(const struct rgapsd_topic *t, int32_t gpu,
			   struct rgapsd_replica_stats *st);

/* Members (members.c). */
int rgapsd_member_create_spec(struct rgapsd_topic *t, const struct rgapsd_member_spec *spec,
			       struct rgapsd_member **m_p, char *err, size_t errlen);
/*
 * A client's attachment in two steps (docs/SHM-LAYOUT.md, "The objects"). Prepare:
 * its region and pool made (sized, backed, resize-proof), in no table yet; the
 * client maps them. Activate, once it has: sealed for good, a slot and stream id,
 * the region formatted, visible to the others. Each fails with err saying why
 * (-ENOSPC: no free slot). rgapsd_member_create_spec does both at once (rgapsd's
 * own members). A PENDING member that is left is freed by rgapsd_member_leave.
 */
int rgapsd_member_prepare(struct rgapsd_topic *t, const struct rgapsd_member_spec *spec,
			  struct rgapsd_member **m_p, char *err, size_t errlen);
int rgapsd_member_activate(struct rgapsd_member *m, char *err, size_t errlen);
/* Is there a slot of kind for a new member (a free one, or a departed stream's)? */
bool rgapsd_member_slot_free(struct rgapsd_topic *t, enum rgapsd_member_kind kind);
/* The member's owner detached: a subscriber goes, a publisher's stream drains. */
void rgapsd_member_leave(struct rgapsd_member *m);
void rgapsd_member_get(struct rgapsd_member *m);
void rgapsd_member_put(struct rgapsd_member *m);
/* A new fd for another process: read-only unless writable (the owner's). -errno. */
int rgapsd_member_share_fd(const struct rgapsd_member *m, bool pool, bool writable);
/* Wake every member's futex word (after dir_gen moved or the topic closed). */
void rgapsd_members_wake(struct rgapsd_topic *t);
/*
 * The topic's sweep (topics.c): end the departed streams every reader has read
 * (or that waited too long), free the GONE members nobody maps.
 */
void rgapsd_members_sweep(struct rgapsd_topic *t, uint64_t now);
/* Tear every member of a topic down (the topic is destroyed). */
void rgapsd_members_destroy(struct rgapsd_topic *t);
/* Snapshot of a publisher member's stream (clamped): head, tail, counters. */
void rgapsd_member_pub_snapshot(const struct rgapsd_member *m, struct rgaps_pub_snapshot *s);

/*
 * What a client has been told about a topic's members, and the diff since
 * (the "members" of an attach reply and every "sync" reply: docs/PROTOCOL.md;
 * told.c).
 */
struct rgapsd_told {
	uint64_t *gen;	 /* per slot of the other kind: the gen told, 0 none */
	uint64_t *limit; /* and the limit told */
	uint32_t n;
};
int rgapsd_told_init(struct rgapsd_told *told, const struct rgapsd_topic *t,
		      enum rgapsd_member_kind watch);
void rgapsd_told_free(struct rgapsd_told *told);
/*
 * Add "members", "remove" and "more" to reply and up to max_fds fds to fds
 * (*nfds_p on entry: fds already used), for members of kind watch that serve
 * as the client does (serve) and that the client has not been told of.
 * -errno when an fd cannot be opened.
 */
int rgapsd_told_diff(struct rgapsd_told *told, struct rgapsd_topic *t,
		      enum rgapsd_member_kind watch, int32_t serve, struct cJSON *reply, int *fds,
		      int *nfds_p, int max_fds);

/* The topic's configuration from topics.d, or NULL. */
const struct rgaps_topic_config *rgapsd_topic_configured(const struct rgapsd *d, const char *name);

/* Who may see, attach to and create which topic (access.c). */
void rgapsd_client_identify(struct rgapsd_conn *conn, struct rgapsd_client_id *id);
/* Root, rgapsd's own user and members of its group see every topic. */
bool rgapsd_sees_all(const struct rgapsd_client_id *id);
/* The allow-list of cfg admits id (root and rgapsd's own user always). */
bool rgapsd_allows(const struct rgaps_topic_config *cfg, const struct rgapsd_client_id *id);
/* The configuration topic name has, or would get if an attach created it. */
const struct rgaps_topic_config *rgapsd_config_of(const struct rgapsd *d, const char *name,
						   struct rgapsd_topic **t_p);
/*
 * Before an attach: may id attach to topic name, creating it if need be? 0 (*t_p: the
 * topic, NULL when the attach will create it), -EACCES or -EDQUOT with the reason in err.
 * Nothing is created either way.
 */
int rgapsd_attach_admit(struct rgapsd *d, const char *name, const struct rgapsd_client_id *id,
			 struct rgapsd_topic **t_p, char *err, size_t errlen);

#endif
