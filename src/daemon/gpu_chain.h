/*
 * The copy chain of a topic's replicas (docs/GPU.md, "Chained replication"):
 * in which order the GPUs that hold replicas are fed, and one message's copy
 * along that order, piece by piece, each link carrying each byte once. It
 * knows nothing of members or streams: the replicator (replicator.c) says
 * where the message is and where each replica goes, and commits each replica
 * when this says it is whole.
 */
#ifndef RGAPSD_GPU_CHAIN_H
#define RGAPSD_GPU_CHAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rgaps/plugin.h"

/* One replica's place in the chain. */
struct rgapsd_chain_hop {
	int32_t gpu;   /* where the replica lives */
	int32_t from;  /* the hop it is fed from (an earlier index), -1: the message itself */
	bool via_host; /* no peer access from its source: copied through host memory */
	void *dst;     /* where this message's replica goes (set per message) */
};

/*
 * Arrange gpus[0..n) (distinct, valid, none of them source) into hops[0..n):
 * each next GPU is the one with the best link from the tail of the chain
 * (NVLink before PCIe, then the driver's performance rank, then the lower
 * ordinal); one that reads the tail only through host memory but some GPU
 * already placed over a link branches off that GPU instead; one that no
 * placed GPU reaches is fed from the tail through host memory. link[i][j]:
 * how GPU i reads GPU j's memory. A pure function.
 */
void rgapsd_chain_order(
	const struct rgaps_mem_link link[RGAPS_MEM_MAX_DEVICES][RGAPS_MEM_MAX_DEVICES],
	int32_t source, const int32_t *gpus, uint32_t n, struct rgapsd_chain_hop *hops);

/* The order in words for the log: "0 -> 1 -> 3, 1 -> 2 (host)". */
void rgapsd_chain_describe(int32_t source, const struct rgapsd_chain_hop *hops, uint32_t n,
			    char *buf, size_t len);

/* A replicator's copier: the memory plugin, the piece size, a host buffer made on first use. */
struct rgapsd_chain {
	const struct rgaps_memory_ops *ops;
	void *ctx;
	uint64_t piece;
	uint64_t bounce_max;
	uint8_t *bounce; /* for hops via_host, pinned where the plugin can */
	uint64_t bounce_len;
	bool bounce_pinned;
	bool hop_by_hop; /* the plugin has no copy_relay: each replica whole, then the next */
};

void rgapsd_chain_init(struct rgapsd_chain *c, const struct rgaps_memory_ops *ops, void *ctx,
			uint64_t piece, uint64_t max_message_size);
void rgapsd_chain_fini(struct rgapsd_chain *c);

/*
 * Copy n bytes from src into hops[i].dst for every hop, along their order.
 * whole(arg, i) is called on this thread as soon as hop i holds all n bytes,
 * each hop once, never before the hop it is fed from. 0; or a negative errno
 * when a copy failed: the hops whole() was not called for hold nothing usable.
 */
int rgapsd_chain_copy(struct rgapsd_chain *c, const void *src, uint64_t n,
		       const struct rgapsd_chain_hop *hops, uint32_t nhops,
		       void (*whole)(void *arg, uint32_t hop), void *arg);

#endif
