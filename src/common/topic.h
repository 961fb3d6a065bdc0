/*
 * A topic's shared memory under the ownership rule (docs/SHM-LAYOUT.md):
 * every process writes only memory that it owns and maps the rest read-only.
 *
 *   topic header   rgapsd writes it: the layout constants, the directory
 *                  generation (a futex word bumped whenever a member comes or
 *                  goes) and the closed flag. Everyone else reads it.
 *   publisher      one per publisher attachment: a control region (the
 *                  stream's head and tail, its doorbell futex word, its queue
 *                  of entries and their attribute blocks) and a pool. The
 *                  publisher writes both; its allocator state is private to
 *                  it. Subscribers and rgapsd map both read-only.
 *   subscriber     one region per subscriber attachment: a cursor per
 *                  publisher stream, its holds, its progress futex word. The
 *                  subscriber writes it; publishers and rgapsd read it.
 *
 * So take and release need no lock: a subscriber advances its own cursor and
 * records its own holds; a publisher frees a block of its own pool once every
 * subscriber's cursor has passed it and no hold names it (a hazard-pointer
 * protocol: see rgaps__sub_take() and the publisher's reclaim). Nobody waits for
 * anybody else's lock, and a process killed anywhere leaves only its own
 * region half-written, which rgapsd discards with its connection.
 *
 * Everything read from memory that another process writes is checked against
 * this process's own copy of the layout constants (struct rgaps_topic_limits)
 * before use: a spoiled publisher region can at worst spoil that publisher's
 * own messages, and a spoiled subscriber region can at worst keep blocks of a
 * pool in use (bounded by max_holds) or stall a "block" topic as a subscriber
 * that stops reading would.
 *
 * Who calls what:
 *   rgapsd           rgaps__topic_hdr_format(), rgaps__pub_region_format(),
 *                    rgaps__sub_region_format(), the readers at the end;
 *                    and as a client itself (its forwarder subscribes, its
 *                    receiver publishes what lands from peers).
 *   librgaps         rgaps_pub_*() and rgaps_sub_*() on the hot path.
 * Membership (which publisher streams a subscriber reads, which subscriber
 * regions a publisher watches) is told by rgapsd over the control socket: when
 * the header's dir_gen moves, the hot-path calls ask the caller's sync callback
 * to fetch and map what changed, then carry on.
 */
#ifndef RGAPS_COMMON_TOPIC_H
#define RGAPS_COMMON_TOPIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/types.h>

#include "config.h"
#include "lathist.h"
#include "rgaps/rgaps.h" /* RGAPS_ATTR_MAX */
#include "tlsf.h"
#include "util.h"

#define RGAPS_TOPIC_MAGIC 0x32504f5453504752ull	 /* "RGPSTOP2" */
#define RGAPS_PUB_MAGIC 0x3242555053504752ull	 /* "RGPSPUB2" */
#define RGAPS_SUB_MAGIC 0x3242555353504752ull	 /* "RGPSSUB2" */
/* 3: ownership regions, no lock, no journal; 4: stream order (fences in publisher regions);
 * 5: `accounted` in entries and publisher regions (what entries a reader skipped stood for);
 * 6: fence_timeout_ms in the limits;
 * 7: a state word per fence slot (a backend's shared fence state: no object of its own);
 * 8: a publisher waits for room up to `space_target`; a subscriber's sleep words on a cache
 * line of their own */
#define RGAPS_TOPIC_LAYOUT_VERSION 8
#define RGAPS_POOL_ALIGN 256u /* pool block alignment: fits GPU and DMA needs */
#define RGAPS_WAITV_MAX 128u  /* futex_waitv's limit (FUTEX_WAITV_MAX) */
#define RGAPS_FENCE_BYTES 64u /* a fence handle (RGAPS_FENCE_HANDLE_LEN of plugin.h) */

/* ---------------------------------------------------------------- layout */

/*
 * The layout constants. rgapsd derives them from the topic's configuration;
 * every process keeps its own copy and checks shared data against it, never
 * against values read back from shared memory.
 */
struct rgaps_topic_limits {
	uint64_t pool_size;	   /* bytes of each publisher's pool */
	uint64_t max_message_size;
	uint64_t pub_region_size;  /* bytes of a publisher control region */
	uint64_t sub_region_size;  /* bytes of a subscriber region */
	uint32_t queue_depth;	   /* entries per publisher stream, a power of two */
	uint32_t history;	   /* entries a stream keeps for late joiners */
	uint32_t max_subscribers;
	uint32_t max_publishers;
	uint32_t max_holds;	   /* per subscriber */
	uint32_t max_loans;	   /* per publisher */
	uint32_t block_timeout_ms;
	uint32_t overflow;	   /* enum rgaps_overflow */
	uint32_t mem_kind;	   /* enum rgaps_mem_kind (plugin.h) */
	int32_t device;
	uint32_t fence_timeout_ms; /* a reader's wait for a fenced message (0: no bound) */
	uint32_t pad;
};

/* The topic header: written by rgapsd only. */
struct rgaps_topic_hdr {
	uint64_t magic;
	uint32_t layout_version;
	uint32_t hdr_size;
	uint64_t segment_size;
	char name[RGAPS_TOPIC_NAME_MAX + 1];
	struct rgaps_topic_limits lim;

	/* Futex word: bumped (and woken) when a member comes or goes, and at close. */
	uint32_t dir_gen __attribute__((aligned(RGAPS_CACHELINE)));
	uint32_t closed; /* rgapsd is gone or shutting down: every call ends with -ENOTCONN */
	uint32_t nsubs;	 /* attached subscribers, publishers (for the spinning heuristic) */
	uint32_t npubs;
};

/* Entry flags. */
#define RGAPS_ENTRY_REMOTE 0x1u	  /* landed from a peer daemon: never forwarded again */
#define RGAPS_ENTRY_GAP_ONLY 0x2u /* no payload: reports `gap` messages lost upstream */
#define RGAPS_ENTRY_FENCE 0x4u	  /* the payload is complete once fence slot `fence` of its
				     publisher has (stream order: docs/SHM-LAYOUT.md) */

/*
 * One message of a stream. The publisher rewrites an entry only after
 * retiring it, and brackets the rewrite with seq: it stores ~0, then the
 * fields, then the new seq (release), so a reader that sees the same seq
 * before and after reading the fields read one consistent entry.
 */
struct rgaps_topic_entry {
	uint64_t seq;
	uint64_t off;		/* in the publisher's pool */
	uint64_t size;
	uint64_t ts_ns;		/* publish time, CLOCK_REALTIME (the origin host's) */
	uint64_t origin_stream; /* the publishing stream on the origin host */
	uint64_t origin_seq;	/* its sequence number there */
	uint32_t gap;		/* messages lost upstream just before this one */
	uint32_t accounted;	/* the stream's messages accounted for up to and including this
				   entry, mod 2^32: 1 per entry with a payload, plus every gap */
	uint16_t flags;		/* RGAPS_ENTRY_* */
	uint16_t attr_len;	/* bytes of its attribute block (<= RGAPS_ATTR_MAX) */
	uint32_t fence;		/* with RGAPS_ENTRY_FENCE: the publisher's fence slot */
};

_Static_assert(sizeof(struct rgaps_topic_entry) == 64, "an entry is one cache line");

/* Statistics a publisher keeps in its region: informational, never trusted. */
struct rgaps_pub_counters {
	uint64_t published;
	uint64_t published_bytes;
	uint64_t loans;
	uint64_t cancelled;
	uint64_t unrouted;    /* published with no subscriber watching */
	uint64_t retired;     /* entries retired from the queue */
	uint64_t dropped;     /* entries forced out while some subscriber lagged (drop_oldest) */
	uint64_t full_waits;  /* times the publisher waited for room */
	uint64_t timeouts;    /* waits that ran out */
	uint64_t pool_used_bytes;
	uint64_t pool_used_blocks;
	uint64_t pool_largest_free;
	uint64_t nloans;      /* loans held now */
	uint64_t holds_ignored; /* subscribers found holding more than rgaps__holds_fit() allows */
	uint64_t fenced;      /* published stream-ordered: ready when their fence completes */
	uint64_t fence_waits; /* stream-ordered publishes that found no free fence and waited */
};

/* The head of a publisher's control region; entries, attribute blocks and fence handles follow. */
struct rgaps_pub_region {
	uint64_t magic;
	uint32_t version;
	uint32_t slot;
	uint64_t gen; /* the stream's id: unique per topic for the daemon's life */
	uint64_t size;
	/* Fence handles [0, nfences) are valid (written once each, before this grows). */
	uint32_t nfences;
	/* Set by the publisher once every copy it queued is done and before it destroys its
	 * fences: readers must not use them any more, and every fenced message is complete. */
	uint32_t fences_retired;

	/* The stream, written by its publisher. */
	uint64_t head __attribute__((aligned(RGAPS_CACHELINE))); /* next seq; the commit point */
	uint64_t tail;	   /* oldest entry kept */
	uint32_t doorbell; /* futex word: bumped after every publish */
	uint32_t space_waiting; /* the publisher sleeps for room: 0 no, slot + 1 for that
				   subscriber's progress, UINT32_MAX for anyone's */
	uint32_t accounted; /* that of entry head - 1 (0 before the first): what the entries
			       a departing stream leaves untaken stood for */
	uint32_t copying;   /* a message is on its way: its copy into the pool runs and the
			       sleepers were woken for it (rgaps__pub_announce); cleared by
			       the next publish */
	uint64_t space_target; /* while space_waiting: wake the publisher once your take
				  moves your cursor to this seq */

	struct rgaps_pub_counters c __attribute__((aligned(RGAPS_CACHELINE)));
};

/* A subscriber's position in one publisher stream. */
struct rgaps_sub_cursor {
	uint64_t gen;  /* the stream this cursor belongs to (written after next) */
	uint64_t next; /* the next seq to take */
	uint32_t flags; /* RGAPS_CURSOR_* */
	uint32_t pad;
};

#define RGAPS_CURSOR_FRESH 0x1u /* set at attach: messages retired before the first take are
				   not a gap (they were published while the attach ran) */

/* A message a subscriber holds: {stream, seq}; gen 0 = free. */
struct rgaps_sub_hold {
	uint64_t gen;
	uint64_t seq;
};

struct rgaps_sub_counters {
	uint64_t taken;
	uint64_t released;
	uint64_t drops;	 /* messages skipped (lapped under drop_oldest, or lost upstream) */
	uint64_t errors; /* spoiled entries seen in publisher streams (skipped) */
};

/* The head of a subscriber's region; cursors[max_publishers] and holds[max_holds] follow. */
struct rgaps_sub_region {
	uint64_t magic;
	uint32_t version;
	uint32_t slot;
	uint64_t gen;
	uint64_t size;

	/* Read by every publisher at every publish and reclaim, so written only around
	 * sleeps, when a publisher waiting for room names this subscriber, and once at stop:
	 * a cache line of their own. */
	uint32_t sleeping __attribute__((aligned(RGAPS_CACHELINE))); /* threads of this subscriber
									asleep waiting for
									publishers */
	uint32_t progress; /* futex word: bumped by a take or release that a publisher waiting
			      for room asked for (its space_waiting and space_target) */
	uint32_t stopped;  /* set once by the subscriber: it takes nothing more, so no stream
			      waits for its cursors; its holds still keep their blocks */

	/* Written at every take and release. */
	uint32_t nholds __attribute__((aligned(RGAPS_CACHELINE))); /* a hint for publishers'
								     scans: holds in use */
	uint32_t pad;
	struct rgaps_sub_counters c;
	/* Publish -> take latency of this subscriber's takes (lathist.h). */
	struct rgaps_lathist latency __attribute__((aligned(RGAPS_CACHELINE)));
};

/* Limits for a configuration (rgapsd). 0 or -EINVAL (queue_depth not a power of two...). */
int rgaps__topic_limits_from_config(const struct rgaps_topic_config *tc, uint32_t mem_kind,
				   int32_t device, struct rgaps_topic_limits *lim_p);
/* The whole layout follows from these: the check a client makes of the header's copy. */
int rgaps__topic_limits_check(const struct rgaps_topic_limits *lim);
/* Fence slots of a publisher region: enough for every block a stream can have in flight. */
uint32_t rgaps__topic_nfences(const struct rgaps_topic_limits *lim);

size_t rgaps__topic_hdr_size(void);
/*
 * Whether waiting by spinning pays on this topic: only while every subscriber
 * can have a CPU (fewer subscribers than online CPUs); beyond that spinners
 * delay the publisher and each other (docs/BENCHMARKS.md).
 */
bool rgaps__topic_spin_pays(const struct rgaps_topic_hdr *hdr);

/*
 * What one subscriber may hold of one stream's pool under drop_oldest: its held
 * messages, as extents [off, off + size rounded up to RGAPS_POOL_ALIGN), must
 * leave a free stretch of rgaps__topic_hold_room(lim) bytes somewhere in the
 * pool, where the publisher can always place a message of max_message_size
 * once it has forced every unheld block out; one message alone is always
 * allowed. Subscribers check it before they take (a take that would break it
 * is refused with -ENOBUFS); publishers ignore the holds of a subscriber that
 * breaks it (docs/SHM-LAYOUT.md, "Holds"). Other policies bound nothing here.
 */
struct rgaps_extent {
	uint64_t off, len;
};

uint64_t rgaps__topic_hold_room(const struct rgaps_topic_limits *lim);
/* Whether one subscriber may hold the n messages of x (sorted here, in place). */
bool rgaps__holds_fit(const struct rgaps_topic_limits *lim, struct rgaps_extent *x, uint32_t n);

/* Entries, attribute blocks, cursors, holds of a region (lim trusted, region mapped). */
struct rgaps_topic_entry *rgaps__pub_entries(const struct rgaps_topic_limits *lim,
					     const struct rgaps_pub_region *r);
uint8_t *rgaps__pub_attrs(const struct rgaps_topic_limits *lim, const struct rgaps_pub_region *r);
/* Fence handle k (RGAPS_FENCE_BYTES bytes), k < rgaps__topic_nfences(lim). */
uint8_t *rgaps__pub_fence_handle(const struct rgaps_topic_limits *lim,
				const struct rgaps_pub_region *r, uint32_t k);
/* Fence slot k's state word (plugin.h, fence_create): the publisher's, read by readers. */
uint64_t *rgaps__pub_fence_state(const struct rgaps_topic_limits *lim,
				const struct rgaps_pub_region *r, uint32_t k);
struct rgaps_sub_cursor *rgaps__sub_cursors(const struct rgaps_topic_limits *lim,
					   const struct rgaps_sub_region *r);
struct rgaps_sub_hold *rgaps__sub_holds(const struct rgaps_topic_limits *lim,
				       const struct rgaps_sub_region *r);

/* rgapsd: format zeroed memory of the sizes in lim. */
int rgaps__topic_hdr_format(void *mem, size_t size, const char *name,
			   const struct rgaps_topic_limits *lim);
void rgaps__pub_region_format(void *mem, const struct rgaps_topic_limits *lim, uint32_t slot,
			     uint64_t gen);
void rgaps__sub_region_format(void *mem, const struct rgaps_topic_limits *lim, uint32_t slot,
			     uint64_t gen);
/* rgapsd, before handing a new subscriber region over: where it starts in one stream. */
void rgaps__sub_region_set_cursor(struct rgaps_sub_region *r, const struct rgaps_topic_limits *lim,
				 uint32_t pub_slot, uint64_t gen, uint64_t next, uint32_t flags);

/* Clients: check a mapped header and copy its limits out. 0 or -EPROTO. */
int rgaps__topic_hdr_validate(const void *mem, size_t size, struct rgaps_topic_limits *lim_p);
/* Check a mapped region's magic and size against lim (hygiene: every use is bounded anyway). */
int rgaps__pub_region_validate(const void *mem, size_t size, const struct rgaps_topic_limits *lim);
int rgaps__sub_region_validate(const void *mem, size_t size, const struct rgaps_topic_limits *lim);

/* rgapsd: mark closed and wake everyone waiting on the header. */
void rgaps__topic_close(struct rgaps_topic_hdr *h);
/* rgapsd: a member came or went. */
void rgaps__topic_dir_changed(struct rgaps_topic_hdr *h);

/*
 * Checked reads of another process's entry (used by subscribers and by rgapsd):
 * 0 and *e_p, -EAGAIN when the entry is being rewritten or holds another seq
 * (the reader was lapped), -EBADMSG when it holds impossible values (why says
 * which; the stream is spoiled).
 */
int rgaps__entry_read(const struct rgaps_topic_limits *lim, const struct rgaps_pub_region *r,
		     uint64_t seq, struct rgaps_topic_entry *e_p, char *why, size_t whylen);

/*
 * An attribute block (len <= RGAPS_ATTR_MAX) into / out of its slot, which is
 * 8-byte aligned: word by word with atomics, since a slot may be rewritten
 * while a lapped reader copies it (the reader checks the entry's seq after).
 */
void rgaps__attrs_store(uint8_t *dst, const void *src, uint32_t len);
void rgaps__attrs_load(void *dst, const uint8_t *src, uint32_t len);

/* ---------------------------------------------------------------- the caller's hooks */

struct rgaps_sub_msg;

struct rgaps_topic_cbs {
	/*
	 * The header's dir_gen moved: fetch what changed (rgaps__pub_set_sub() and
	 * friends). 0, or a negative errno that ends the calling operation.
	 */
	int (*sync)(void *arg);
	/* Between sleeps: is rgapsd still there? NULL: assume so. */
	bool (*alive)(void *arg);
	/*
	 * Stream order (publishers that commit with a fence; NULL otherwise): is
	 * fence slot k still pending (the copy into its block may still run)? A
	 * block is freed only once its fence has completed, and then ev_free(k)
	 * hands the slot back to the caller.
	 */
	bool (*fence_pending)(void *arg, uint32_t k);
	void (*fence_free)(void *arg, uint32_t k);
	/*
	 * Stream order (subscribers; NULL: a take returns fenced messages as they
	 * come and the caller settles them): is the copy into held message m
	 * (flags & RGAPS_ENTRY_FENCE) complete? 0: yes, the take returns it;
	 * -EAGAIN: not yet: m is parked (held; its stream is passed over while the
	 * others flow) and asked about again at every look, until it completes or
	 * lim.fence_timeout_ms passes; another negative errno: never (its
	 * publisher crashed, or its fence is spoiled: say why in the log): m is
	 * released and reported lost, with the gap it carried. Asked from within
	 * rgaps__sub_take(): it must not wait.
	 */
	int (*fence_done)(void *arg, const struct rgaps_sub_msg *m);
	void *arg;
};

/* ---------------------------------------------------------------- publisher */

struct rgaps_pub;

/* A publisher over its own region and pool (pool: this process's address of it). */
int rgaps__pub_create(const struct rgaps_topic_hdr *hdr, const struct rgaps_topic_limits *lim,
		     struct rgaps_pub_region *mine, uint8_t *pool,
		     const struct rgaps_topic_cbs *cbs, struct rgaps_pub **pub_p);
void rgaps__pub_destroy(struct rgaps_pub *pub);
/* Membership (from the sync callback): watch or forget a subscriber region. */
int rgaps__pub_set_sub(struct rgaps_pub *pub, uint32_t slot, uint64_t gen,
		      const struct rgaps_sub_region *r);
void rgaps__pub_clear_sub(struct rgaps_pub *pub, uint32_t slot);

/* timeout_ms: 0 no wait, < 0 without limit, else bounded. */
int rgaps__pub_loan(struct rgaps_pub *pub, uint64_t size, int timeout_ms, uint32_t *token_p,
		   uint64_t *off_p);

struct rgaps_pub_commit {
	uint64_t ts_ns;
	const void *attrs; /* attribute block, attr_len bytes (<= RGAPS_ATTR_MAX) */
	uint32_t attr_len;
	uint32_t flags;	   /* RGAPS_ENTRY_REMOTE... */
	uint32_t gap;	   /* lost upstream just before this one */
	uint64_t origin_stream, origin_seq; /* 0, 0: this stream, its own seq */
	bool has_fence;	   /* stream order: the payload is complete once fence slot `fence` has */
	uint32_t fence;
};

/*
 * Publish a loan (size <= loaned). timeout_ms bounds a wait for a queue entry
 * under "block". The loan is consumed unless -EAGAIN is returned with
 * keep_on_again set (rgapsd retries from its loop, which never waits).
 */
int rgaps__pub_commit(struct rgaps_pub *pub, uint32_t token, uint64_t size,
		     const struct rgaps_pub_commit *c, int timeout_ms, bool keep_on_again,
		     uint64_t *seq_p);
/* Publish "gap messages were lost" with no payload (needs a queue entry, never waits). */
int rgaps__pub_gap(struct rgaps_pub *pub, uint32_t gap, uint64_t ts_ns);
/* The same with entry flags (RGAPS_ENTRY_REMOTE alone: a loss on the way from a peer). */
int rgaps__pub_gap_flags(struct rgaps_pub *pub, uint32_t gap, uint64_t ts_ns, uint32_t flags);
int rgaps__pub_cancel(struct rgaps_pub *pub, uint32_t token);
/* Retire and free what no subscriber needs any more. Returns blocks freed. */
uint32_t rgaps__pub_reclaim(struct rgaps_pub *pub);
/*
 * A message of this publisher is on its way (its copy into a loan runs, on a
 * GPU): wake the subscribers asleep on the doorbell now, and have them spin
 * until the next publish rather than sleep again, so that they are up when
 * it comes. The next commit or cancel ends it. Nothing where spinning does
 * not pay (rgaps__topic_spin_pays()).
 */
void rgaps__pub_announce(struct rgaps_pub *pub);
/* Loaned block's size, for callers that validate (0 if token is not a loan). */
uint64_t rgaps__pub_loan_size(const struct rgaps_pub *pub, uint32_t token);

struct rgaps_pub_state {
	uint64_t head, tail;
	uint32_t nsubs, nloans, nretired;
	struct rgaps_tlsf_stats pool;
};
void rgaps__pub_get_state(const struct rgaps_pub *pub, struct rgaps_pub_state *st);
/* Full consistency check of the publisher's own books (tests): every block accounted for. */
int rgaps__pub_check(struct rgaps_pub *pub, char *why, size_t whylen);

/* ---------------------------------------------------------------- subscriber */

struct rgaps_sub;

int rgaps__sub_create(const struct rgaps_topic_hdr *hdr, const struct rgaps_topic_limits *lim,
		     struct rgaps_sub_region *mine, const struct rgaps_topic_cbs *cbs,
		     struct rgaps_sub **sub_p);
void rgaps__sub_destroy(struct rgaps_sub *sub);
/*
 * Membership: read (or stop reading) the stream of publisher slot `slot`.
 * limit: UINT64_MAX while its publisher is attached; its final head once it has
 * gone (the stream drains up to there). pool: this process's mapping of its pool.
 */
int rgaps__sub_set_stream(struct rgaps_sub *sub, uint32_t slot, uint64_t gen,
			 const struct rgaps_pub_region *r, const uint8_t *pool, uint64_t limit);
/*
 * Stop reading a stream. Messages not yet taken are counted as lost (reported
 * with a gap-only message). Returns true if the caller may unmap it now; false
 * while a held message still points into it: then rgaps__sub_stream_held()
 * tells when it may (after releases).
 */
bool rgaps__sub_clear_stream(struct rgaps_sub *sub, uint32_t slot);
bool rgaps__sub_stream_held(const struct rgaps_sub *sub, uint64_t gen);
/* Whether stream (slot, gen) is read here and its publisher still attached (not draining). */
bool rgaps__sub_stream_live(const struct rgaps_sub *sub, uint32_t slot, uint64_t gen);

/* What a take returns. */
struct rgaps_sub_msg {
	uint64_t seq;
	uint64_t off; /* in the stream's pool */
	const uint8_t *data; /* pool + off (NULL for a gap-only message) */
	uint64_t size;
	uint64_t ts_ns;
	uint64_t gap; /* messages of this stream lost just before this one */
	uint64_t stream, origin_stream, origin_seq;
	uint32_t token; /* the hold; UINT32_MAX for a gap-only message */
	uint32_t flags; /* RGAPS_ENTRY_* */
	uint32_t slot;	/* the publisher slot */
	uint32_t attr_len;
	const void *attrs; /* a private copy, valid until release */
	uint32_t fence;	/* with flags & RGAPS_ENTRY_FENCE: the publisher's fence slot (checked) */
};

/* Take the next message of any stream (round robin). timeout as for loans. */
int rgaps__sub_take(struct rgaps_sub *sub, int timeout_ms, uint32_t spin_us,
		   struct rgaps_sub_msg *msg_p);
int rgaps__sub_release(struct rgaps_sub *sub, uint32_t token);
/*
 * Take nothing more (rgaps_subscriber_stop()): mark the region stopped, so that
 * no publisher and not rgapsd waits for its cursors any longer, and wake the
 * publishers that wait for room. Held messages stay held until released; later
 * takes fail with -ESHUTDOWN.
 */
void rgaps__sub_stop(struct rgaps_sub *sub);
/* Something to take, a membership change or a close (lock-free hint, for a pollable fd). */
bool rgaps__sub_ready(struct rgaps_sub *sub);
/*
 * Messages parked for their fences (cbs.fence_done) ring no futex: how long a
 * sleep of a reader may last before it looks at them again. INT64_MAX: none is
 * parked; 0: do not sleep (yield), one was parked just now and its copy is
 * likely about to end; else nanoseconds: an eighth of how long the youngest
 * has waited, 50 us to 50 ms. Safe from another thread than the taker's.
 */
int64_t rgaps__sub_fence_slice(const struct rgaps_sub *sub);

/*
 * Sleep until rgaps__sub_ready() may be true (a publisher rang, the membership
 * changed, the topic closed), one of the caller's nextra extra futex words
 * moved, or slice_ns passed. For a thread other than the one that takes (a
 * pollable fd's helper, rgapsd's forwarder): lock (may be NULL) is the lock
 * the caller's sync callback holds while it changes the mappings; ready_too
 * (may be NULL) is another reason not to sleep, asked under that lock.
 * Returns 1 at once if something is ready, 0 after a sleep, or -EINTR.
 */
int rgaps__sub_sleep(struct rgaps_sub *sub, pthread_mutex_t *lock, const struct futex_waitv *extra,
		    uint32_t nextra, bool (*ready_too)(void *arg), void *arg, int64_t slice_ns);
/* The futex words and values a sleep waits on (at most max). Returns how many. */
uint32_t rgaps__sub_wait_words(struct rgaps_sub *sub, struct futex_waitv *w, uint32_t max);
void rgaps__sub_sleeping(struct rgaps_sub *sub, int delta);
/* A take of a message stamped ts_ns (CLOCK_REALTIME of its origin) at now_ns: the histogram. */
void rgaps__sub_record_latency(struct rgaps_sub *sub, uint64_t ts_ns, uint64_t now_ns);

struct rgaps_sub_state {
	uint32_t nstreams, nholds;
	uint64_t drops, taken;
};
void rgaps__sub_get_state(const struct rgaps_sub *sub, struct rgaps_sub_state *st);
struct rgaps_sub_region *rgaps__sub_region(const struct rgaps_sub *sub);

/* ---------------------------------------------------------------- rgapsd's readers */

/*
 * Snapshots of other processes' regions for statistics and rgapsd's decisions,
 * every value clamped to what lim allows (a lie changes the statistics of the
 * liar, never rgapsd's memory safety).
 */
struct rgaps_pub_snapshot {
	uint64_t head, tail;
	struct rgaps_pub_counters c;
	bool bad; /* the region contradicts lim (logged by the caller) */
};
void rgaps__pub_snapshot(const struct rgaps_topic_limits *lim, const struct rgaps_pub_region *r,
			struct rgaps_pub_snapshot *s);

struct rgaps_sub_snapshot {
	struct rgaps_sub_counters c;
	uint32_t nholds;
	bool stopped; /* it takes nothing more (rgaps__sub_stop), and only holds */
	struct rgaps_lathist latency;
};
void rgaps__sub_snapshot(const struct rgaps_topic_limits *lim, const struct rgaps_sub_region *r,
			struct rgaps_sub_snapshot *s);
/*
 * Where subscriber region r stands in stream (slot, gen): its next seq, clamped
 * to [tail, head] of that stream, or tail if it has not started reading it.
 */
uint64_t rgaps__sub_position(const struct rgaps_topic_limits *lim, const struct rgaps_sub_region *r,
			    uint32_t slot, uint64_t gen, uint64_t tail, uint64_t head);
/* Whether r holds any message of stream gen. */
bool rgaps__sub_holds_stream(const struct rgaps_topic_limits *lim, const struct rgaps_sub_region *r,
			    uint64_t gen);

#endif
