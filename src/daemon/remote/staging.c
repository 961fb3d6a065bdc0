/*
 * DP1 staging (docs/ARCHITECTURE.md section 1): a topic whose pool is device memory is
 * sent from pinned host memory the transports can read. Each chunk is copied
 * once (D2H) into a slot of the topic's staging buffer and sent from there to
 * every interested ring; chunk k+1 is staged while chunk k is on the wire.
 * Slots are taken in queue order; a chunk waits here while none is free.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../../common/log.h"
#include "internal.h"

static void d2h_run(struct rgapsd_job *job)
{
	struct rt_d2h *st = RGAPS_CONTAINER_OF(job, struct rt_d2h, job);
	struct rgapsd_topic *t = st->tt->t;

	st->status =
		t->mem->ops.memory.copy(t->mem->ctx, st->tt->stg + st->slot * st->tt->stg_slot,
					st->m->msg.data + st->off, st->len, RGAPS_COPY_FROM_POOL);
}

static void d2h_done(struct rgapsd_msg *m)
{
	struct rt_d2h *st = RGAPS_CONTAINER_OF(m, struct rt_d2h, job.done);

	st->ready = true;
	if (!st->status) {
		st->tt->staged_chunks++;
		st->tt->staged_bytes += st->len;
	}
	st->tt->d2h_ready(st); /* drops the copy's reference */
}

void rt_d2h_pump(struct rt_topic *tt)
{
	while (!STAILQ_EMPTY(&tt->d2h_q) && tt->stg_nfree) {
		struct rt_d2h *st = STAILQ_FIRST(&tt->d2h_q);

		STAILQ_REMOVE_HEAD(&tt->d2h_q, link);
		st->slot = tt->stg_free[--tt->stg_nfree];
		st->refs++; /* held by the copy until d2h_done */
		st->job.run = d2h_run;
		st->job.done.fn = d2h_done;
		rt_copy_start(tt->rt, tt->t->mem, &st->job, &st->status,
			      tt->stg + st->slot * tt->stg_slot, st->m->msg.data + st->off, st->len,
			      RGAPS_COPY_FROM_POOL);
	}
}

void rt_d2h_queue(struct rt_d2h *st)
{
	struct rt_topic *tt = st->tt;

	st->slot = UINT32_MAX;
	STAILQ_INSERT_TAIL(&tt->d2h_q, st, link);
}

struct rt_omsg *rt_d2h_put(struct rt_d2h *st)
{
	struct rt_topic *tt = st->tt;
	struct rt_omsg *m = st->m;

	if (--st->refs)
		return NULL;
	if (st->slot == UINT32_MAX) {
		/* Never started: take it off the queue. */
		STAILQ_REMOVE(&tt->d2h_q, st, rt_d2h, link);
	} else {
		tt->stg_free[tt->stg_nfree++] = st->slot;
	}
	free(st);
	rt_d2h_pump(tt);
	return m;
}

int rt_staging_setup(struct rt_topic *tt, int tr_idx)
{
	struct rgapsd_topic *t = tt->t;
	struct rt_transport *tr = &tt->rt->tr[tr_idx];
	int e;

	if (!tt->stg) {
		tt->stg_slot = t->cfg.chunking ? t->cfg.chunk_size : t->cfg.max_message_size;
		/* 64 MiB in flight (4 slots of the default 16 MiB chunk), two at least */
		tt->stg_nslots =
			(uint32_t)RGAPS_MAX(2, RGAPS_MIN(16, (64ull << 20) / tt->stg_slot));
		tt->stg_size = tt->stg_slot * tt->stg_nslots;
		tt->stg = mmap(NULL, tt->stg_size, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		tt->stg_free = calloc(tt->stg_nslots, sizeof(*tt->stg_free));
		if (tt->stg == MAP_FAILED || !tt->stg_free) {
			if (tt->stg != MAP_FAILED)
				munmap(tt->stg, tt->stg_size);
			tt->stg = NULL;
			free(tt->stg_free);
			tt->stg_free = NULL;
			return -ENOMEM;
		}
		for (uint32_t i = 0; i < tt->stg_nslots; i++)
			tt->stg_free[tt->stg_nfree++] = tt->stg_nslots - 1 - i;
		rt_place_near_device(t, tt->stg, tt->stg_size, "staging buffer");
		e = t->mem->ops.memory.host_register(t->mem->ctx, tt->stg, tt->stg_size);
		tt->stg_pinned = e == 0;
		if (e)
			rgaps_warn(
				"topic '%s': staging buffer not pinned (%s): D2H copies run slower",
				t->cfg.name, strerror(-e));
		tt->staged = true;
		rgaps_info("topic '%s': device pool; staging %u x %llu bytes of pinned host memory",
			   t->cfg.name, tt->stg_nslots, (unsigned long long)tt->stg_slot);
	}
	if (!tt->stg_mr[tr_idx]) {
		e = tr->lp->ops.transport.reg_local(tr->ctx, tt->stg, tt->stg_size,
						    &tt->stg_mr[tr_idx]);
		if (e)
			return e;
	}
	return 0;
}

void rt_staging_free(struct rt_topic *tt)
{
	struct rgapsd_remote *rt = tt->rt;

	for (int i = 0; i < rt->ntr; i++) {
		if (tt->stg_mr[i])
			rt->tr[i].lp->ops.transport.dereg_local(rt->tr[i].ctx, tt->stg_mr[i]);
		tt->stg_mr[i] = NULL;
	}
	if (tt->stg) {
		if (tt->stg_pinned)
			tt->t->mem->ops.memory.host_unregister(tt->t->mem->ctx, tt->stg);
		munmap(tt->stg, tt->stg_size);
		free(tt->stg_free);
		tt->stg = NULL;
		tt->stg_free = NULL;
	}
}
