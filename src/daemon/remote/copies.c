/*
 * Copies between a topic's pool and host memory (the sender's staging slots,
 * the receiver's ring), started on the loop and run off it: on the memory
 * plugin's own stream when it has copy_async (cuda: a stream host function
 * signals the end), else on the copy worker. Either way the completion comes
 * back to the loop through the mailbox, in start order (STYLE.md items 7, 9).
 * Also where host memory that a GPU copies to or from is placed (NUMA).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "../../common/numa.h"
#include "internal.h"

struct rt_copy {
	struct rgapsd_remote *rt;
	struct rgapsd_msg *done;
	int *status;
};

static void copy_signal(void *arg, int status)
{
	struct rt_copy *c = arg;
	struct rgapsd_remote *rt = c->rt;
	struct rgapsd_msg *done = c->done;

	*c->status = status;
	free(c);
	rgapsd_mailbox_post(&rt->mb, done); /* only signal: the loop does the work */
}

void rt_copy_start(struct rgapsd_remote *rt, struct rgaps_loaded_plugin *mem,
		   struct rgapsd_job *job, int *status, void *dst, const void *src, uint64_t n,
		   uint32_t dir)
{
	if (!rt->mem_async_missing) {
		struct rt_copy *c = malloc(sizeof(*c));
		int e = -ENOMEM;

		if (c) {
			c->rt = rt;
			c->done = &job->done;
			c->status = status;
			e = mem->ops.memory.copy_async(mem->ctx, dst, src, n, dir, copy_signal, c);
			if (e == 0)
				return;
			free(c);
		}
		if (e != -ENOTSUP) {
			*status = e;
			rgapsd_mailbox_post(&rt->mb, &job->done);
			return;
		}
		rt->mem_async_missing = true;
	}
	rgapsd_worker_submit(&rt->worker, job);
}

/* Bind, fault in, verify, and say what happened: DMA from a remote node runs slower. */
void rt_place_near_device(struct rgapsd_topic *t, void *addr, size_t len, const char *what)
{
	int node = t->mem->ops.memory.numa_node(t->mem->ctx, t->cfg.device);
	unsigned on = 0, n = 0;
	int e;

	if (node < 0) {
		rgaps_info(
			"topic '%s': %s: GPU %d reports no NUMA node (one-node host): no placement "
			"needed",
			t->cfg.name, what, t->cfg.device);
		return;
	}
	e = rgaps_numa_place(addr, len, node, &on, &n);
	if (e)
		rgaps_warn("topic '%s': %s could not be placed on NUMA node %d (GPU %d's): %s",
			   t->cfg.name, what, node, t->cfg.device, strerror(-e));
	else if (on < n)
		rgaps_warn("topic '%s': %s: only %u of %u sampled pages on NUMA node %d (GPU %d's)",
			   t->cfg.name, what, on, n, node, t->cfg.device);
	else
		rgaps_info("topic '%s': %s on NUMA node %d, next to GPU %d (%u pages checked)",
			   t->cfg.name, what, node, t->cfg.device, n);
}
