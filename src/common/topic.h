/*
 * The per-topic metadata segment: the shared-memory heart of the local path.
 *
 * One segment per topic holds the topic header (configuration snapshot, the
 * robust lock, cursors, counters, the undo journal), the message queue (one
 * entry per published message still retained), subscriber slots (cursor,
 * holds), publisher slots (loans), one reference count per pool block, and
 * the TLSF allocator state for the pool. rgapsd formats it; rgapsd and every
 * local client map it; every mutation happens under the topic lock and is
 * journaled (journal.h). The drawing is in docs/SHM-LAYOUT.md.
 *
 * Reference counting: a pool block is freed when its count reaches zero. The
 * queue holds one reference per retained entry, each subscriber hold one, each
 * publisher loan one. An entry is retained while some subscriber has not yet
 * passed it ("pending") or while it is within the history window; it is
 * retired eagerly as soon as neither holds.
 *
 * Wake-ups: publishers bump wake_seq and do one FUTEX_WAKE for all sleeping
 * subscribers; releases and retirements bump space_seq for blocked publishers.
 */
#ifndef RGAPS_COMMON_TOPIC_H
#define RGAPS_COMMON_TOPIC_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"
#include "journal.h"
#include "lathist.h"
#include "tlsf.h"

#define RGAPS_TOPIC_MAGIC 0x31504f5453504752ull /* "RGPSTOP1" */
#define RGAPS_TOPIC_LAYOUT_VERSION 2 /* 2: latency histograms */
#define RGAPS_POOL_ALIGN 256u /* pool block alignment: fits GPU and DMA needs */

enum rgaps_slot_state {
	RGAPS_SLOT_FREE = 0,
	RGAPS_SLOT_ACTIVE = 1,
};

/* Counters of the local message lifecycle (publisher and subscriber side). */
struct rgaps_topic_counters {
	uint64_t loans;		/* blocks handed to publishers */
	uint64_t published;	/* entries committed */
	uint64_t published_bytes;
	uint64_t unrouted;	/* published with no subscriber attached */
	uint64_t cancelled;	/* loans returned unpublished */
	uint64_t taken;		/* messages taken by subscribers (sum) */
	uint64_t released;	/* holds released */
	uint64_t retired;	/* entries retired from the queue */
	uint64_t dropped;	/* entries forced out while some subscriber lagged */
	uint64_t drops_total;	/* sum of per-subscriber drops */
	uint64_t full_waits;	/* times a publisher had to wait for room */
	uint64_t timeouts;	/* publisher waits that timed out */
	uint64_t reclaimed_holds; /* holds released for dead subscribers */
	uint64_t reclaimed_loans; /* loans freed for dead publishers */
};

struct rgaps_topic_hdr {
	uint64_t magic;
	uint32_t layout_version;
	uint32_t hdr_size;
	uint64_t segment_size;
	char name[RGAPS_TOPIC_NAME_MAX + 1];

	/* Configuration snapshot (what clients need; the rest stays in rgapsd). */
	uint64_t pool_size;
	uint64_t max_message_size;
	uint32_t queue_depth;
	uint32_t history;
	uint32_t max_subscribers;
	uint32_t max_publishers;
	uint32_t max_holds;
	uint32_t max_loans;
	uint32_t block_timeout_ms;
	uint32_t overflow;
	uint32_t nblocks;
	uint32_t mem_kind;
	int32_t device;
	uint32_t pad0;

	/* Section offsets from the segment start. */
	uint64_t off_queue;
	uint64_t off_subs;
	uint64_t off_pubs;
	uint64_t off_refs;
	uint64_t off_tlsf;
	uint64_t off_lat; /* one struct rgaps_lathist per subscriber slot */
	uint64_t sub_stride;
	uint64_t pub_stride;

	pthread_mutex_t lock; /* robust, process-shared */

	/* Under the lock. */
	uint64_t head_seq; /* next sequence number to publish */
	uint64_t tail_seq; /* oldest retained entry */
	uint32_t nsubs;
	uint32_t npubs;
	uint32_t closed; /* the daemon is gone or shutting down */
	uint32_t pad1;
	struct rgaps_topic_counters c;

	/* Wake-up words: atomics, outside the lock, each on its own line. */
	uint32_t wake_seq __attribute__((aligned(RGAPS_CACHELINE)));
	uint32_t waiters;
	uint32_t space_seq __attribute__((aligned(RGAPS_CACHELINE)));
	uint32_t space_waiters;

	struct rgaps_journal journal __attribute__((aligned(RGAPS_CACHELINE)));

	/* Publish -> take latency of every take by a client subscriber (lathist.h). */
	struct rgaps_lathist latency __attribute__((aligned(RGAPS_CACHELINE)));
};

/* Entry flags. */
#define RGAPS_ENTRY_REMOTE 0x1u /* landed from a peer daemon: never forwarded again */

struct rgaps_topic_entry {
	uint64_t seq;
	uint64_t off;
	uint64_t size;
	uint64_t ts_ns;
	uint32_t block;	  /* TLSF block id */
	uint32_t pending; /* active subscribers that have not passed it yet */
	uint32_t flags;	  /* RGAPS_ENTRY_* */
	uint32_t gap;	  /* messages lost upstream just before this one (remote path) */
};

struct rgaps_topic_hold {
	uint64_t seq;
	uint32_t block; /* RGAPS_TLSF_NIL when the hold is free */
	uint32_t pad;
};

struct rgaps_topic_sub {
	uint32_t state;
	int32_t pid;
	uint64_t conn_id;
	uint64_t next_seq; /* next message this subscriber takes */
	uint64_t taken;
	uint64_t drops;	      /* messages skipped by drop_oldest */
	uint64_t pending_gap; /* drops not yet reported with a message */
	uint32_t nholds;
	uint32_t waiting; /* counted in hdr->waiters */
	struct rgaps_topic_hold holds[];
};

struct rgaps_topic_pub {
	uint32_t state;
	int32_t pid;
	uint64_t conn_id;
	uint64_t published;
	uint32_t nloans;
	uint32_t waiting; /* counted in hdr->space_waiters */
	uint32_t loans[]; /* block ids, RGAPS_TLSF_NIL when free */
};

/* A mapped topic segment as one process sees it. */
struct rgaps_topic {
	struct rgaps_topic_hdr *hdr;
	size_t size;
	uint8_t *pool; /* this process's address of the pool (may be a device address) */
};

/* A subscriber's view of one message (pool offset, not address). */
struct rgaps_topic_msg {
	uint64_t seq;
	uint64_t off;
	uint64_t size;
	uint64_t ts_ns;
	uint64_t gap; /* dropped for this subscriber + lost upstream */
	uint32_t token;
	uint32_t flags; /* RGAPS_ENTRY_* */
};

struct rgaps_topic_stats {
	struct rgaps_topic_counters c;
	struct rgaps_tlsf_stats pool;
	uint64_t head_seq, tail_seq;
	uint32_t nsubs, npubs, queue_used;
	uint32_t journal_high_water;
	uint64_t journal_rollbacks;
};

/* Bytes of the metadata segment for this configuration. */
size_t rgaps_topic_segment_size(const struct rgaps_topic_config *tc);

/* Format a zeroed segment of rgaps_topic_segment_size() bytes (daemon). */
int rgaps_topic_format(void *mem, size_t size, const struct rgaps_topic_config *tc,
		       uint32_t mem_kind);

/* Check a mapped segment before use (client): magic, version, sizes. 0 or -EPROTO. */
int rgaps_topic_validate(const void *mem, size_t size);

/* Slots (daemon, at attach / on connection close). */
int rgaps_topic_sub_open(struct rgaps_topic *t, uint64_t conn_id, pid_t pid, uint32_t *slot_p);

/* The publish -> take latency histogram of subscriber slot `slot` (zeroed at sub_open). */
struct rgaps_lathist *rgaps_topic_sub_latency(const struct rgaps_topic *t, uint32_t slot);
/*
 * A client subscriber took a message stamped ts_ns (CLOCK_REALTIME of the
 * publishing host) at now_ns: add the difference to its slot's histogram and
 * the topic's. Lock-free; a timestamp ahead of now_ns counts as skewed, 0 ns.
 */
void rgaps_topic_record_latency(struct rgaps_topic *t, uint32_t slot, uint64_t ts_ns,
				uint64_t now_ns);
void rgaps_topic_sub_close(struct rgaps_topic *t, uint32_t slot);
int rgaps_topic_pub_open(struct rgaps_topic *t, uint64_t conn_id, pid_t pid, uint32_t *slot_p);
void rgaps_topic_pub_close(struct rgaps_topic *t, uint32_t slot);
/* Mark closed and wake everyone (daemon shutdown). */
void rgaps_topic_close(struct rgaps_topic *t);

/*
 * Publisher: borrow a block of size bytes. timeout_ms: 0 no wait, < 0 forever,
 * else bounded. The alive callback (may be NULL) is asked between sleeps
 * whether the daemon is still there; returning false ends the wait with -ENOTCONN.
 */
typedef bool (*rgaps_topic_alive_fn)(void *arg);
int rgaps_topic_loan(struct rgaps_topic *t, uint32_t pub_slot, uint64_t size, int timeout_ms,
		     rgaps_topic_alive_fn alive, void *alive_arg, uint32_t *token_p,
		     uint64_t *off_p);
int rgaps_topic_commit(struct rgaps_topic *t, uint32_t pub_slot, uint32_t token, uint64_t size,
		       uint64_t ts_ns, int timeout_ms, rgaps_topic_alive_fn alive, void *alive_arg,
		       uint64_t *seq_p);
/*
 * Commit on behalf of a peer daemon (flags RGAPS_ENTRY_REMOTE, gap = messages
 * lost upstream). Never waits: -EAGAIN when the queue is full under the block
 * policy, and then the loan is kept so the caller can retry.
 */
int rgaps_topic_commit_remote(struct rgaps_topic *t, uint32_t pub_slot, uint32_t token,
			      uint64_t size, uint64_t ts_ns, uint32_t gap, uint64_t *seq_p);
int rgaps_topic_cancel(struct rgaps_topic *t, uint32_t pub_slot, uint32_t token);

/* Subscriber: take the next message (timeout as above) and release it. */
int rgaps_topic_take(struct rgaps_topic *t, uint32_t sub_slot, int timeout_ms, uint32_t spin_us,
		     rgaps_topic_alive_fn alive, void *alive_arg, struct rgaps_topic_msg *msg_p);
int rgaps_topic_release(struct rgaps_topic *t, uint32_t sub_slot, uint32_t token);
/* True if sub_slot has a message to take (lock-free hint, for the pollable fd). */
bool rgaps_topic_sub_ready(const struct rgaps_topic *t, uint32_t sub_slot);

int rgaps_topic_get_stats(struct rgaps_topic *t, struct rgaps_topic_stats *st);
struct rgaps_topic_sub *rgaps_topic_sub_at(const struct rgaps_topic *t, uint32_t slot);
struct rgaps_topic_pub *rgaps_topic_pub_at(const struct rgaps_topic *t, uint32_t slot);

/* Full consistency check (tests, debug): refcounts, pending counts, allocator. */
int rgaps_topic_check(struct rgaps_topic *t, char *why, size_t whylen);

#endif
