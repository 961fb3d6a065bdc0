/*
 * Copies between a topic's pool and host memory (the sender's staging slots,
 * the receiver's ring), started on the loop and run off it: on the memory
 * plugin's own stream when it has copy_async (cuda: its waiter thread signals
 * the end), else on the copy worker. Either way the completion comes
 * back to the loop through the mailbox, in start order (STYLE.md items 7, 9);
 * while asynchronous copies are in flight the loop polls for it rather than
 * sleeping (copy_spin_us, bounded).
 * Also where host memory that a GPU copies to or from is placed (NUMA).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "numa.h"
#include "internal.h"

struct rt_copy {
	struct rgapsd_remote *rt;
	struct rgapsd_msg *done;
	int *status;
};

/* On the plugin's thread: a copy ended. */
static void copy_signal(void *arg, int status)
{
	struct rt_copy *c = arg;
	struct rgapsd_remote *rt = c->rt;
	struct rgapsd_msg *done = c->done;

	*c->status = status;
	free(c);
	__atomic_store_n(&rt->copy_last_ns, rgaps_now_ns(CLOCK_MONOTONIC), __ATOMIC_RELAXED);
	rgapsd_mailbox_post(&rt->mb, done); /* only signal: the loop does the work */
	/* After the post: a loop that sees no copy in flight has the signal to read. */
	__atomic_fetch_sub(&rt->copies_in_flight, 1, __ATOMIC_RELEASE);
}

/*
 * The loop's idle handle while copies are in flight: an active idle handle makes
 * the loop poll its descriptors without sleeping, so the mailbox's signal of a
 * copy's end is read at once (DP1: a sleeping loop's wake-up is ~6 us of a 4 MiB
 * copy's 86). It stops once no copy is in flight, or once none started or ended
 * for copy_spin_ns (a long copy: then the loop sleeps and is woken as usual).
 */
static void copy_spin_cb(uv_idle_t *h)
{
	struct rgapsd_remote *rt = h->data;
	uint64_t last;

	rt->copy_spin_rounds++;
	if (!__atomic_load_n(&rt->copies_in_flight, __ATOMIC_ACQUIRE)) {
		uv_idle_stop(h);
		rt->copy_spinning = false;
		return;
	}
	last = __atomic_load_n(&rt->copy_last_ns, __ATOMIC_RELAXED);
	if (rgaps_now_ns(CLOCK_MONOTONIC) - last > rt->copy_spin_ns) {
		uv_idle_stop(h);
		rt->copy_spinning = false;
		rt->copy_spin_timeouts++;
	}
}

void rt_copies_init(struct rgapsd_remote *rt, uv_loop_t *loop, uint32_t spin_us)
{
	uv_idle_init(loop, &rt->copy_spin);
	rt->copy_spin.data = rt;
	rt->copy_spin_ns = (uint64_t)spin_us * 1000;
}

void rt_copies_fini(struct rgapsd_remote *rt)
{
	uv_close((uv_handle_t *)&rt->copy_spin, NULL);
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
			/* Counted before the copy starts: its end may be signalled at once. */
			__atomic_fetch_add(&rt->copies_in_flight, 1, __ATOMIC_RELAXED);
			__atomic_store_n(&rt->copy_last_ns, rgaps_now_ns(CLOCK_MONOTONIC),
					 __ATOMIC_RELAXED);
			e = mem->ops.memory.copy_async(mem->ctx, dst, src, n, dir, copy_signal, c);
			if (e == 0) {
				if (rt->copy_spin_ns && !rt->copy_spinning) {
					uv_idle_start(&rt->copy_spin, copy_spin_cb);
					rt->copy_spinning = true;
				}
				return;
			}
			__atomic_fetch_sub(&rt->copies_in_flight, 1, __ATOMIC_RELAXED);
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
	e = rt_numa_place(addr, len, node, &on, &n);
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
