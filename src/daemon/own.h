/*
 * rgapsd's own members of a topic: the daemon subscribing and publishing on
 * a topic like a client does (src/common/topic.h), with a member of its own
 * (members.c) instead of a client's attachment. Two users build on it: the
 * remote path (remote/local.c: the forwarder's subscriber, the landing
 * publisher of each in ring) and the replicator (replicator.c: its subscriber
 * of the topic's own streams, the publisher of each GPU's replica).
 *
 * Each follows the topic's member table in its sync callback: a subscriber
 * reads the publishers' streams of its own `serve`, a publisher's stream waits
 * for the subscribers of its `serve` (rgapsd_member_reads). It takes a
 * reference on every member it maps, so the loop frees no region while it
 * still reads it; a stream that leaves while one of its messages is held is
 * kept (leaving) until the holds are released.
 *
 * Neither locks itself: its user calls it from one thread at a time (the
 * forwarder serialises its thread and the loop's releases with a lock of its
 * own; the replicator calls it from its thread alone).
 */
#ifndef RGAPSD_OWN_H
#define RGAPSD_OWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rgapsd_topic;
struct rgapsd_member;
struct rgaps_sub;
struct rgaps_pub;
struct rgaps_fence_cache;

/*
 * A stream came into publisher slot `slot` (came) or left it: a user that keeps
 * something per stream (the replicator: the GPUs each pool is opened to) learns
 * of it in the sync callback, on the subscriber's thread.
 */
typedef void (*rgapsd_own_moved_fn)(void *arg, uint32_t slot, bool came);

/* A subscriber of the topic's own streams (serve RGAPSD_SERVE_ORIGINAL). */
struct rgapsd_own_sub {
	struct rgapsd_topic *t;
	struct rgapsd_member *self;
	struct rgaps_sub *sub;
	struct rgapsd_member **streams; /* [max_publishers]: referenced while read */
	struct rgapsd_member **leaving; /* left their slot while a message of them is held */
	uint32_t nleaving;
	struct rgaps_fence_cache *fences; /* publishers' fences (stream order), made on first use */
	rgapsd_own_moved_fn moved;	  /* NULL: nobody asks */
	void *moved_arg;
};

/*
 * Make the subscriber's member and its reader; it maps no stream until its
 * first take or rgapsd_own_sub_follow(). moved may be NULL. 0, or -errno with
 * err saying why; s is left as rgapsd_own_sub_close() may take it.
 */
int rgapsd_own_sub_open(struct rgapsd_topic *t, rgapsd_own_moved_fn moved, void *moved_arg,
			struct rgapsd_own_sub *s, char *err, size_t errlen);
/* Map the streams the topic has now (what the sync callback does). */
void rgapsd_own_sub_follow(struct rgapsd_own_sub *s);
/* The member of the stream gen that a message taken from slot came from, NULL none. */
struct rgapsd_member *rgapsd_own_sub_stream(const struct rgapsd_own_sub *s, uint32_t slot,
					    uint64_t gen);
/*
 * Release a taken message (token UINT32_MAX: a gap-only message, nothing to
 * release), then let go of the departed streams nothing is held of any more.
 */
void rgapsd_own_sub_release(struct rgapsd_own_sub *s, uint32_t token);
/* Destroy the reader, drop every reference, leave the topic. Takes a zeroed s too. */
void rgapsd_own_sub_close(struct rgapsd_own_sub *s);

/*
 * A publisher of a stream of rgapsd's own: serve RGAPSD_SERVE_ORIGINAL (the
 * topic's own streams, its pool on the topic's device) or a GPU g (the replica
 * for g, its pool on g).
 */
struct rgapsd_own_pub {
	struct rgapsd_topic *t;
	struct rgapsd_member *self;
	struct rgaps_pub *pub;
	struct rgapsd_member **subs; /* [max_subscribers]: referenced while watched */
	/* Its sync runs off the loop: the member table is read under t->lock. On the
	 * loop, which alone writes the table, it is read as it is. */
	bool off_loop;
};

/*
 * Make the stream's member and its publisher; it watches no subscriber until
 * its first operation or rgapsd_own_pub_follow(). 0, or -errno with err saying
 * why; p is left as rgapsd_own_pub_close() may take it.
 */
int rgapsd_own_pub_open(struct rgapsd_topic *t, int32_t serve, bool off_loop,
			struct rgapsd_own_pub *p, char *err, size_t errlen);
/* Watch the subscribers the topic has now (what the sync callback does). */
void rgapsd_own_pub_follow(struct rgapsd_own_pub *p);
/* Where the block of a loan at offset off is, in rgapsd's mapping of the pool. */
uint8_t *rgapsd_own_pub_block(const struct rgapsd_own_pub *p, uint64_t off);
/*
 * Destroy the publisher, drop every reference, leave the topic: the stream
 * drains like a departed client's. Takes a zeroed p too.
 */
void rgapsd_own_pub_close(struct rgapsd_own_pub *p);

#endif
