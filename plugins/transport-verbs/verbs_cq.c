/*
 * Completions of the verbs transport (docs/VERBS.md "Completions"): one CQ per
 * link, shared by its QPs, with its own completion channel under uv_poll. On a
 * wake-up: drain ibv_get_cq_event() until EAGAIN, acknowledge the batch, poll.
 * When a poll finds work the link switches to busy polling (a uv_idle handle:
 * the loop keeps turning without sleeping) and stays there until busy_limit
 * polls in a row find nothing (the limit adapts to whether spinning pays, up
 * to RGAPS_VERBS_BUSY_ROUNDS); then it re-arms the CQ and polls once more
 * (arm-then-recheck: a completion that arrived between the last poll and the
 * arm is not left waiting for an event that will never come).
 *
 * Send completions are selective: one signalled completion retires every
 * earlier slot of its QP in order (record_sent per record). Receive
 * completions are RDMA WRITE WITH IMMEDIATE arrivals; their immediate value is
 * checked against what is attached before anything reaches the core. Also
 * here: the shared receive queue refill and the device's async events (CQ
 * overrun, fatal QP errors).
 */
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "verbs.h"

#define VERBS_POLL_BATCH 32
#define VERBS_POLL_BUDGET 512 /* completions per callback before yielding to the loop */
#define VERBS_DRAIN_MS 500
#define VERBS_BUSY_PROBE 8	/* completions in one wake-up that re-enable busy polling */

/* ---------------------------------------------------------------- receives */

int rgaps__verbs_recv_fill(struct verbs_dev *dev, struct verbs_qp *qp)
{
	uint32_t have = qp ? qp->rq_posted : dev->srq_posted;
	uint32_t n = dev->rq_depth - have;
	struct ibv_recv_wr *bad = NULL;
	int r;

	if (!n)
		return 0;
	/* Zero-length receives: WRITE WITH IMMEDIATE consumes one but puts no bytes in it. */
	for (uint32_t i = 0; i < n; i++) {
		dev->recv_wrs[i].wr_id = VERBS_RECV_WRID;
		dev->recv_wrs[i].next = i + 1 < n ? &dev->recv_wrs[i + 1] : NULL;
		dev->recv_wrs[i].sg_list = NULL;
		dev->recv_wrs[i].num_sge = 0;
	}
	r = qp ? ibv_post_recv(qp->qp, dev->recv_wrs, &bad) :
		 ibv_post_srq_recv(dev->srq, dev->recv_wrs, &bad);
	if (r && bad)
		n = (uint32_t)(bad - dev->recv_wrs);
	if (qp)
		qp->rq_posted += n;
	else
		dev->srq_posted += n;
	return r ? -r : 0;
}

static void recv_account(struct rgaps_link *l, struct verbs_qp *qp)
{
	if (l->dev->srq) {
		if (l->dev->srq_posted)
			l->dev->srq_posted--;
	} else if (qp->rq_posted) {
		qp->rq_posted--;
	}
}

/* Refill in batches: one chained post per 1/16 of the queue, not one per completion. */
static void recv_refill(struct rgaps_link *l)
{
	struct verbs_dev *dev = l->dev;
	uint32_t batch = dev->rq_depth / 16 ? dev->rq_depth / 16 : 1;
	int r = 0;

	if (dev->srq) {
		if (dev->rq_depth - dev->srq_posted >= batch)
			r = rgaps__verbs_recv_fill(dev, NULL);
	} else {
		for (uint32_t i = 0; i < l->nqps && !r; i++)
			if (l->qps[i].qp && dev->rq_depth - l->qps[i].rq_posted >= batch)
				r = rgaps__verbs_recv_fill(dev, &l->qps[i]);
	}
	if (r)
		vlog(l->ctx, VERBS_LOG_WARN, "%s: posting receives: %s", dev->name, strerror(-r));
}

/* ---------------------------------------------------------------- CQ objects */

static void cq_channel_cb(uv_poll_t *h, int status, int events);

int rgaps__verbs_cq_create(struct rgaps_link *l)
{
	struct verbs_ctx *ctx = l->ctx;
	struct verbs_dev *dev = l->dev;
	uint64_t size;
	int r;

	/*
	 * Never overruns: at most sq_depth send completions per QP (credits bound
	 * the WRs posted; flushes produce one per WR) and at most rq_depth receive
	 * completions (no more receives are posted than that, shared or not).
	 */
	size = (uint64_t)l->nqps * ctx->cfg.sq_depth +
	       (dev->srq ? dev->rq_depth : (uint64_t)l->nqps * dev->rq_depth) + 16;
	if (size > dev->max_cqe) {
		vlog(ctx, VERBS_LOG_ERR,
		     "%s: a CQ of %llu entries exceeds the device's %u: lower RGAPS_VERBS_QPS, RGAPS_VERBS_SQ_DEPTH or RGAPS_VERBS_SRQ_DEPTH",
		     dev->name, (unsigned long long)size, dev->max_cqe);
		return -EINVAL;
	}
	l->ch = ibv_create_comp_channel(dev->verbs);
	if (!l->ch)
		return errno ? -errno : -ENOMEM;
	r = rgaps__verbs_poll_start(ctx, l->ch->fd, &l->ch_poll, l, cq_channel_cb);
	if (r)
		return r;
	l->cq = ibv_create_cq(dev->verbs, (int)size, l, l->ch, 0);
	if (!l->cq)
		return errno ? -errno : -ENOMEM;
	l->cq_size = (uint32_t)size;
	r = ibv_req_notify_cq(l->cq, 0);
	if (r)
		return -r;
	l->busy = calloc(1, sizeof(*l->busy));
	if (!l->busy)
		return -ENOMEM;
	uv_idle_init(ctx->loop, l->busy);
	l->busy->data = l;
	l->busy_limit = ctx->cfg.busy_rounds;
	return 0;
}

void rgaps__verbs_cq_destroy(struct rgaps_link *l)
{
	rgaps__verbs_handle_close(&l->busy);
	l->busy_on = false;
	if (l->cq && ibv_destroy_cq(l->cq))
		vlog(l->ctx, VERBS_LOG_WARN, "ibv_destroy_cq failed (QPs still attached?)");
	l->cq = NULL;
	/* The poll handle stops watching the fd now; only then may the fd close. */
	rgaps__verbs_handle_close(&l->ch_poll);
	if (l->ch && ibv_destroy_comp_channel(l->ch))
		vlog(l->ctx, VERBS_LOG_WARN, "ibv_destroy_comp_channel failed");
	l->ch = NULL;
}

/* ---------------------------------------------------------------- one completion */

static struct verbs_qp *qp_of(struct rgaps_link *l, uint32_t qp_num)
{
	for (uint32_t i = 0; i < l->nqps; i++)
		if (l->qps[i].qp && l->qps[i].qp->qp_num == qp_num)
			return &l->qps[i];
	return NULL;
}

static int wc_errno(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return -ETIMEDOUT;
	case IBV_WC_REM_ACCESS_ERR:
	case IBV_WC_LOC_PROT_ERR:
		return -EACCES;
	case IBV_WC_WR_FLUSH_ERR:
		return -ECONNRESET;
	default:
		return -EIO;
	}
}

/* Retire every slot of qp up to and including seq (selective signalling). */
static void send_done(struct rgaps_link *l, struct verbs_qp *qp, uint64_t seq)
{
	struct verbs_ctx *ctx = l->ctx;
	uint32_t depth = ctx->cfg.sq_depth;

	if (seq < qp->done || seq >= qp->posted)
		return; /* already retired (a flush of an unsignalled WR) */
	while (qp->done <= seq) {
		struct verbs_slot *s = &qp->slots[qp->done % depth];
		uint64_t cookie = s->cookie, bytes = s->bytes;
		uint8_t kind = s->kind;

		/* Copy first: a post from inside the callback may reuse the slot. */
		s->kind = VERBS_SLOT_FREE;
		qp->done++;
		if (kind != VERBS_SLOT_RECORD)
			continue;
		l->st.records_sent++;
		l->st.bytes_sent += bytes;
		if (ctx->cbs.record_sent)
			ctx->cbs.record_sent(ctx->cbs.arg, l, cookie, 0);
		if (l->state == VERBS_LINK_DEAD || l->closed)
			return;
	}
}

static void recv_done(struct rgaps_link *l, struct verbs_qp *qp, const struct ibv_wc *wc)
{
	struct verbs_ctx *ctx = l->ctx;
	uint32_t imm, ring, units;

	if (wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc->wc_flags & IBV_WC_WITH_IMM)) {
		rgaps__verbs_link_fail(l, -EPROTO,
				       "the peer sent opcode %d, not an RDMA WRITE WITH IMMEDIATE",
				       wc->opcode);
		return;
	}
	imm = be32toh(wc->imm_data);
	ring = imm >> VERBS_IMM_RING_SHIFT & VERBS_IMM_RING_MASK;
	units = imm & VERBS_IMM_UNITS_MAX;
	if (qp->idx != ring % l->nqps) {
		rgaps__verbs_link_fail(l, -EPROTO, "ring %u traffic arrived on QP %u, not QP %u",
				       ring, qp->idx, ring % l->nqps);
		return;
	}
	if (imm & VERBS_IMM_HEAD) {
		struct verbs_tx_ring *t = &l->tx[ring];
		uint64_t head;

		if (!t->prepared) {
			if (t->retired)
				return;
			rgaps__verbs_link_fail(l, -EPROTO,
					       "Head update for ring %u, which this side never prepared",
					       ring);
			return;
		}
		if (units) {
			rgaps__verbs_link_fail(l, -EPROTO, "Head update with nonzero units (imm 0x%08x)",
					       imm);
			return;
		}
		/* The word is in memory once its completion is polled. */
		head = le64toh(__atomic_load_n(&l->dhead[ring], __ATOMIC_ACQUIRE));
		l->st.head_updates_received++;
		if (ctx->cbs.head_update)
			ctx->cbs.head_update(ctx->cbs.arg, l, ring, head);
		return;
	}
	if (!l->rx[ring].attached && l->rx[ring].retired) {
		l->st.records_late++; /* its receive is already reposted */
		return;
	}
	if (!l->rx[ring].attached) {
		rgaps__verbs_link_fail(l, -EPROTO, "record for ring %u, which is not attached", ring);
		return;
	}
	if (!units || units > l->rx[ring].size / VERBS_UNIT) {
		rgaps__verbs_link_fail(l, -EPROTO,
				       "record of %llu bytes cannot fit ring %u (%llu bytes)",
				       (unsigned long long)units * VERBS_UNIT, ring,
				       (unsigned long long)l->rx[ring].size);
		return;
	}
	l->st.records_landed++;
	l->st.bytes_landed += (uint64_t)units * VERBS_UNIT;
	if (ctx->cbs.record_landed)
		ctx->cbs.record_landed(ctx->cbs.arg, l, ring, UINT64_MAX,
				       (uint64_t)units * VERBS_UNIT);
}

static void wc_handle(struct rgaps_link *l, const struct ibv_wc *wc)
{
	struct verbs_qp *qp = qp_of(l, wc->qp_num);
	bool recv = wc->wr_id == VERBS_RECV_WRID; /* opcode is undefined on errors */

	if (!qp)
		return;
	if (recv)
		recv_account(l, qp);
	if (wc->status != IBV_WC_SUCCESS) {
		if (l->failing)
			return;
		if (!recv && wc->wr_id > qp->ok_upto)
			qp->ok_upto = wc->wr_id; /* RC: everything before it completed */
		rgaps__verbs_link_fail(l, wc_errno(wc->status), "%s on QP %u failed: %s (vendor 0x%x)",
				       recv ? "receive" : "RDMA write", qp->idx,
				       ibv_wc_status_str(wc->status), wc->vendor_err);
		return;
	}
	if (recv)
		recv_done(l, qp, wc);
	else
		send_done(l, qp, wc->wr_id);
}

/* Poll up to budget completions. Returns how many, or -1 if the link died meanwhile. */
static int cq_poll(struct rgaps_link *l, int budget)
{
	struct ibv_wc wc[VERBS_POLL_BATCH];
	int total = 0, n;

	l->n_polls++;
	while (total < budget) {
		n = ibv_poll_cq(l->cq, VERBS_POLL_BATCH, wc);
		if (n < 0) {
			rgaps__verbs_link_fail(l, -EIO, "ibv_poll_cq failed (%d)", n);
			return -1;
		}
		for (int i = 0; i < n; i++) {
			wc_handle(l, &wc[i]);
			if (l->state == VERBS_LINK_DEAD || l->closed)
				return -1;
		}
		total += n;
		l->n_wc += (uint64_t)n;
		if (n < VERBS_POLL_BATCH)
			break;
	}
	if (total)
		recv_refill(l);
	return total;
}

/* ---------------------------------------------------------------- adaptive polling */

static void busy_cb(uv_idle_t *h);

static void busy_start(struct rgaps_link *l)
{
	l->busy_empty = 0;
	if (!l->busy_on) {
		l->busy_on = true;
		l->busy_caught = 0;
		uv_idle_start(l->busy, busy_cb);
	}
}

/* Whether a poll that found n completions should keep the link polling from the loop. */
static bool keep_polling(const struct rgaps_link *l, int n)
{
	return n >= VERBS_POLL_BUDGET || (n > 0 && l->busy_limit);
}

/*
 * Back on the channel: arm, then poll once more. A completion that arrived
 * before the arm raises no event, so this poll is what finds it; one after the
 * arm raises an event (perhaps for something this poll takes: a spurious
 * wake-up, harmless). Never loops: work found here goes to the busy handle.
 */
static void cq_arm(struct rgaps_link *l)
{
	int n, r;

	l->n_arms++;
	r = ibv_req_notify_cq(l->cq, 0);
	if (r) {
		rgaps__verbs_link_fail(l, -r, "ibv_req_notify_cq: %s", strerror(r));
		return;
	}
	n = cq_poll(l, VERBS_POLL_BUDGET);
	if (keep_polling(l, n))
		busy_start(l);
}

/*
 * End of a busy period: it lasted until busy_limit polls in a row found
 * nothing. If some poll after an empty one caught work, spinning saved a
 * wake-up: allow longer next time; if not, the empty polls were waste: halve.
 */
static void busy_adapt(struct rgaps_link *l)
{
	uint32_t max = l->ctx->cfg.busy_rounds;

	if (l->busy_caught)
		l->busy_limit = !l->busy_limit ? 1 : l->busy_limit * 2 > max ? max :
						       l->busy_limit * 2;
	else
		l->busy_limit /= 2;
}

static void busy_cb(uv_idle_t *h)
{
	struct rgaps_link *l = h->data;
	struct verbs_ctx *ctx = l->ctx;
	int n;

	rgaps__verbs_enter(ctx);
	l->st.cq_polls_busy++;
	n = cq_poll(l, VERBS_POLL_BUDGET);
	if (n > 0) {
		if (l->busy_empty)
			l->busy_caught++;
		l->busy_empty = 0;
	} else if (n == 0 && ++l->busy_empty >= l->busy_limit) {
		uv_idle_stop(l->busy);
		l->busy_on = false;
		busy_adapt(l);
		cq_arm(l);
	}
	rgaps__verbs_leave(ctx);
}

static void cq_channel_cb(uv_poll_t *h, int status, int events)
{
	struct rgaps_link *l = h->data;
	struct verbs_ctx *ctx = l->ctx;
	struct ibv_cq *cq;
	void *cq_ctx;
	unsigned int n = 0;
	int polled;

	rgaps__verbs_enter(ctx);
	while (ibv_get_cq_event(l->ch, &cq, &cq_ctx) == 0)
		n++;
	if (n) {
		ibv_ack_cq_events(l->cq, n); /* one acknowledgement for the whole batch */
		l->st.cq_events += n;
	}
	if (l->busy_on) {
		/* Polling from the loop already: the event is from an arm that found work. */
		rgaps__verbs_leave(ctx);
		return;
	}
	polled = cq_poll(l, VERBS_POLL_BUDGET);
	/* A wake-up that finds a batch means load: give busy polling a chance again. */
	if (polled >= VERBS_BUSY_PROBE && !l->busy_limit && ctx->cfg.busy_rounds)
		l->busy_limit = 1;
	if (keep_polling(l, polled))
		busy_start(l);
	else if (polled >= 0)
		cq_arm(l);
	rgaps__verbs_leave(ctx);
}

/* ---------------------------------------------------------------- teardown drain */

static bool sends_pending(const struct rgaps_link *l)
{
	for (uint32_t i = 0; i < l->nqps; i++)
		if (l->qps[i].qp && l->qps[i].drained < l->qps[i].posted)
			return true;
	return false;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void rgaps__verbs_drain(struct rgaps_link *l)
{
	struct ibv_wc wc[VERBS_POLL_BATCH];
	struct ibv_qp_attr a;
	uint64_t deadline;

	if (l->failing)
		return;
	l->failing = true;
	for (uint32_t i = 0; i < l->nqps; i++) {
		struct verbs_qp *qp = &l->qps[i];

		qp->drained = qp->done;
		if (!qp->qp)
			continue;
		/* rdma_disconnect moves the QP to ERR and tells the peer (DREQ). */
		if (qp->established || qp->accepted)
			rdma_disconnect(qp->id);
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_ERR;
		ibv_modify_qp(qp->qp, &a, IBV_QP_STATE);
	}
	if (!l->cq)
		return;
	/* In ERR every posted send completes (flushed if not done): wait for all of them. */
	deadline = now_ms() + VERBS_DRAIN_MS;
	while (sends_pending(l)) {
		int n = ibv_poll_cq(l->cq, VERBS_POLL_BATCH, wc);

		if (n < 0)
			break;
		for (int i = 0; i < n; i++) {
			struct verbs_qp *qp = qp_of(l, wc[i].qp_num);

			if (!qp)
				continue;
			if (wc[i].wr_id == VERBS_RECV_WRID) {
				recv_account(l, qp);
				continue;
			}
			if (wc[i].wr_id >= qp->posted)
				continue;
			/* Success retires a prefix; flushes come one per WR, in order. */
			if (wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id + 1 > qp->ok_upto)
				qp->ok_upto = wc[i].wr_id + 1;
			if (wc[i].wr_id + 1 > qp->drained)
				qp->drained = wc[i].wr_id + 1;
		}
		if (n == 0) {
			struct timespec ts = { 0, 20000 };

			if (now_ms() > deadline) {
				vlog(l->ctx, VERBS_LOG_WARN,
				     "link %s: sends still unflushed after %u ms; destroying anyway",
				     l->peer, VERBS_DRAIN_MS);
				break;
			}
			nanosleep(&ts, NULL);
		}
	}
}

/* ---------------------------------------------------------------- async events */

static void fail_dev_links(struct verbs_ctx *ctx, struct verbs_dev *dev, int err, const char *why)
{
	struct vlist *p, *tmp;

	vlist_for_each_safe(p, tmp, &ctx->links) {
		struct rgaps_link *l = vlist_entry(p, struct rgaps_link, node);

		if (l->dev == dev)
			rgaps__verbs_link_fail(l, err, "%s", why);
	}
}

static void link_fail_async(struct rgaps_link *l, int err, const char *what)
{
	struct verbs_ctx *lc = l->ctx; /* may be another context of this process (tests) */

	rgaps__verbs_enter(lc);
	rgaps__verbs_link_fail(l, err, "%s", what);
	rgaps__verbs_leave(lc);
}

void rgaps__verbs_async_cb(uv_poll_t *h, int status, int events)
{
	struct verbs_dev *dev = h->data;
	struct verbs_ctx *ctx = dev->ctx;
	struct ibv_async_event ev;

	rgaps__verbs_enter(ctx);
	while (ibv_get_async_event(dev->verbs, &ev) == 0) {
		enum ibv_event_type type = ev.event_type;
		struct ibv_cq *cq = NULL;
		struct ibv_qp *qp = NULL;

		if (type == IBV_EVENT_CQ_ERR)
			cq = ev.element.cq;
		else if (type == IBV_EVENT_QP_FATAL || type == IBV_EVENT_QP_REQ_ERR ||
			 type == IBV_EVENT_QP_ACCESS_ERR || type == IBV_EVENT_COMM_EST ||
			 type == IBV_EVENT_QP_LAST_WQE_REACHED)
			qp = ev.element.qp;
		ibv_ack_async_event(&ev); /* before handling: destroying the object waits for it */

		switch (type) {
		case IBV_EVENT_CQ_ERR: {
			struct rgaps_link *l = cq->cq_context;

			l->st.cq_overflows++;
			link_fail_async(l, -EOVERFLOW,
					"completion queue overrun (IBV_EVENT_CQ_ERR)");
			break;
		}
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR: {
			struct verbs_qp *vq = qp->qp_context;
			char what[96];

			snprintf(what, sizeof(what), "QP %u: %s", vq->idx,
				 ibv_event_type_str(type));
			link_fail_async(vq->link, type == IBV_EVENT_QP_ACCESS_ERR ? -EACCES : -EIO,
					what);
			break;
		}
		case IBV_EVENT_COMM_EST: {
			/* Data came before the RTU: tell the CM the connection is up. */
			struct verbs_qp *vq = qp->qp_context;

			if (vq->id)
				rdma_notify(vq->id, IBV_EVENT_COMM_EST);
			break;
		}
		case IBV_EVENT_SRQ_ERR:
			vlog(ctx, VERBS_LOG_ERR, "%s: shared receive queue error", dev->name);
			fail_dev_links(ctx, dev, -EIO, "shared receive queue error");
			break;
		case IBV_EVENT_DEVICE_FATAL:
			vlog(ctx, VERBS_LOG_ERR, "%s: device fatal error", dev->name);
			fail_dev_links(ctx, dev, -ENODEV, "RDMA device fatal error");
			break;
		case IBV_EVENT_PORT_ERR:
		case IBV_EVENT_PORT_ACTIVE:
			vlog(ctx, VERBS_LOG_WARN, "%s: %s", dev->name, ibv_event_type_str(type));
			break;
		default:
			vlog(ctx, VERBS_LOG_DEBUG, "%s: %s", dev->name, ibv_event_type_str(type));
			break;
		}
	}
	rgaps__verbs_leave(ctx);
}
