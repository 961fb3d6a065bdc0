/*
 * The copy chain of a topic's replicas (gpu_chain.h, docs/GPU.md "Chained
 * replication"). The order is greedy from the pools' GPU: on the usual
 * machines (NVSwitch: every pair of GPUs one NVLink hop apart; or PCIe only)
 * every link is alike and the chain is 0 -> 1 -> 2 -> ..., each GPU sending
 * once and receiving once. The copy itself is the memory plugin's copy_relay
 * (pieces, every hop at once); hops without peer access go through a host
 * buffer, whole, and feed their own followers from there.
 */
#include "gpu_chain.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../common/util.h"

#define SOURCE (-1)

/* ---------------------------------------------------------------- the order */

struct cost {
	int kind;   /* 0 NVLink, 1 PCIe, 2 none (host memory) */
	int branch; /* 0: extends the chain from its tail, 1: branches off an earlier GPU */
	int rank;   /* the driver's performance rank, unknown last */
	int gpu;
};

static int kind_cost(uint8_t kind)
{
	return kind == RGAPS_MEM_LINK_NVLINK ? 0 : kind == RGAPS_MEM_LINK_PCIE ? 1 : 2;
}

static bool cheaper(const struct cost *a, const struct cost *b)
{
	if (a->kind != b->kind)
		return a->kind < b->kind;
	if (a->branch != b->branch)
		return a->branch < b->branch;
	if (a->rank != b->rank)
		return a->rank < b->rank;
	return a->gpu < b->gpu;
}

static struct cost cost_of(const struct rgaps_mem_link *l, int branch, int32_t gpu)
{
	struct cost c = { kind_cost(l->kind), branch, l->rank < 0 ? 128 : l->rank, (int)gpu };

	return c;
}

void rgapsd_chain_order(
	const struct rgaps_mem_link link[RGAPS_MEM_MAX_DEVICES][RGAPS_MEM_MAX_DEVICES],
	int32_t source, const int32_t *gpus, uint32_t n, struct rgapsd_chain_hop *hops)
{
	bool used[RGAPS_MEM_MAX_DEVICES] = { false };
	int32_t tail = SOURCE; /* hop index; SOURCE: the message itself */

	for (uint32_t step = 0; step < n; step++) {
		struct cost best = { 3, 0, 0, 0 };
		uint32_t pick = 0;
		int32_t parent = SOURCE;

		for (uint32_t k = 0; k < n; k++) {
			int32_t g = gpus[k], tail_gpu = tail == SOURCE ? source : hops[tail].gpu;
			struct cost c = cost_of(&link[g][tail_gpu], 0, g);
			int32_t from = tail;
			bool tail_only_host = c.kind == 2;

			if (used[k])
				continue;
			/* Only host memory from the tail: the best earlier GPU it reads directly. */
			for (int32_t p = SOURCE; tail_only_host && p < (int32_t)step; p++) {
				int32_t pg = p == SOURCE ? source : hops[p].gpu;
				struct cost b = cost_of(&link[g][pg], 1, g);

				if (p != tail && b.kind < 2 && (from == tail || cheaper(&b, &c))) {
					c = b;
					from = p;
				}
			}
			if (cheaper(&c, &best)) {
				best = c;
				pick = k;
				parent = from;
			}
		}
		used[pick] = true;
		hops[step].gpu = gpus[pick];
		hops[step].from = parent;
		hops[step].via_host = best.kind == 2;
		hops[step].dst = NULL;
		if (parent == tail)
			tail = (int32_t)step;
	}
}

void rgapsd_chain_describe(int32_t source, const struct rgapsd_chain_hop *hops, uint32_t n,
			    char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = 0;
	for (uint32_t i = 0; i < n && at + 32 < len; i++) {
		int32_t from = hops[i].from == SOURCE ? source : hops[hops[i].from].gpu;
		bool extends = i > 0 && hops[i].from == (int32_t)i - 1 && !hops[i].via_host &&
			       !hops[i - 1].via_host;

		if (extends)
			at += (size_t)snprintf(buf + at, len - at, " -> %d", (int)hops[i].gpu);
		else
			at += (size_t)snprintf(buf + at, len - at, "%s%d -> %d%s", i ? ", " : "",
					       (int)from, (int)hops[i].gpu,
					       hops[i].via_host ? " (through host memory)" : "");
	}
}

/* ---------------------------------------------------------------- the copy */

void rgapsd_chain_init(struct rgapsd_chain *c, const struct rgaps_memory_ops *ops, void *ctx,
			uint64_t piece, uint64_t max_message_size)
{
	memset(c, 0, sizeof(*c));
	c->ops = ops;
	c->ctx = ctx;
	c->piece = piece;
	c->bounce_max = RGAPS_MIN(64ull << 20, max_message_size);
}

void rgapsd_chain_fini(struct rgapsd_chain *c)
{
	if (c->bounce) {
		if (c->bounce_pinned)
			c->ops->host_unregister(c->ctx, c->bounce);
		munmap(c->bounce, c->bounce_len);
	}
	c->bounce = NULL;
}

/* GPU to host to GPU, in steps of the host buffer (made and pinned on first use). */
static int bounce_copy(struct rgapsd_chain *c, void *dst, const void *src, uint64_t n)
{
	int e = 0;

	if (!c->bounce) {
		void *b = mmap(NULL, c->bounce_max, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (b == MAP_FAILED)
			return -ENOMEM;
		c->bounce = b;
		c->bounce_len = c->bounce_max;
		c->bounce_pinned = c->ops->host_register(c->ctx, b, c->bounce_len) == 0;
	}
	for (uint64_t off = 0; off < n && !e; off += c->bounce_len) {
		uint64_t len = RGAPS_MIN(c->bounce_len, n - off);

		e = c->ops->copy(c->ctx, c->bounce, (const uint8_t *)src + off, len,
				 RGAPS_COPY_FROM_POOL);
		if (!e)
			e = c->ops->copy(c->ctx, (uint8_t *)dst + off, c->bounce, len,
					 RGAPS_COPY_TO_POOL);
	}
	return e;
}

/* One group: the hops fed, over links, from the same root (the message or a via_host hop). */
struct group {
	struct rgaps_relay_hop h[RGAPS_MEM_MAX_DEVICES];
	uint32_t global[RGAPS_MEM_MAX_DEVICES]; /* its hops' indices in the chain */
	uint32_t n;
	void (*whole)(void *arg, uint32_t hop);
	void *arg;
};

static void group_whole(void *arg, uint32_t k)
{
	struct group *g = arg;

	g->whole(g->arg, g->global[k]);
}

/* Each hop whole before the next starts (a plugin without copy_relay). */
static int group_hop_by_hop(struct rgapsd_chain *c, const void *src, uint64_t n, struct group *g)
{
	for (uint32_t k = 0; k < g->n; k++) {
		const void *from = g->h[k].from < 0 ? src : g->h[g->h[k].from].dst;
		int e = c->ops->copy(c->ctx, g->h[k].dst, from, n, RGAPS_COPY_TO_POOL);

		if (e)
			return e;
		group_whole(g, k);
	}
	return 0;
}

static int group_copy(struct rgapsd_chain *c, const void *src, uint64_t n,
		      const struct rgapsd_chain_hop *hops, uint32_t nhops, const int32_t *root,
		      int32_t groot, struct group *g)
{
	int32_t local[RGAPS_MEM_MAX_DEVICES];
	int e;

	g->n = 0;
	for (uint32_t i = 0; i < nhops; i++) {
		if (root[i] != groot || (int32_t)i == groot)
			continue;
		local[i] = (int32_t)g->n;
		g->h[g->n].dst = hops[i].dst;
		g->h[g->n].device = hops[i].gpu;
		g->h[g->n].from = hops[i].from == groot ? -1 : local[hops[i].from];
		g->global[g->n++] = i;
	}
	if (!g->n)
		return 0;
	if (c->hop_by_hop)
		return group_hop_by_hop(c, src, n, g);
	e = c->ops->copy_relay(c->ctx, src, n, g->h, g->n, c->piece, group_whole, g);
	if (e == -ENOTSUP) {
		c->hop_by_hop = true;
		return group_hop_by_hop(c, src, n, g);
	}
	return e;
}

int rgapsd_chain_copy(struct rgapsd_chain *c, const void *src, uint64_t n,
		       const struct rgapsd_chain_hop *hops, uint32_t nhops,
		       void (*whole)(void *arg, uint32_t hop), void *arg)
{
	int32_t root[RGAPS_MEM_MAX_DEVICES] = { 0 };
	struct group g = { .whole = whole, .arg = arg };
	int e;

	if (nhops > RGAPS_MEM_MAX_DEVICES)
		return -EINVAL;
	/* Which root feeds each hop over links: the message, or the nearest via_host hop. */
	for (uint32_t i = 0; i < nhops; i++) {
		if (hops[i].from < SOURCE || hops[i].from >= (int32_t)i)
			return -EINVAL;
		root[i] = hops[i].via_host	   ? (int32_t)i
			  : hops[i].from == SOURCE ? SOURCE
						   : root[hops[i].from];
	}
	e = group_copy(c, src, n, hops, nhops, root, SOURCE, &g);
	for (uint32_t r = 0; r < nhops && !e; r++) {
		const void *from;

		if (!hops[r].via_host)
			continue;
		from = hops[r].from < 0 ? src : hops[hops[r].from].dst;
		e = bounce_copy(c, hops[r].dst, from, n);
		if (e)
			break;
		whole(arg, r);
		e = group_copy(c, hops[r].dst, n, hops, nhops, root, (int32_t)r, &g);
	}
	return e;
}
