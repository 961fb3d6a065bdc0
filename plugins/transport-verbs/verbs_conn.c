/*
 * Links of the verbs transport: set-up through the RDMA CM event channel (its
 * fd non-blocking under uv_poll), and teardown (docs/VERBS.md "Connection
 * set-up" and "Teardown").
 *
 * A link is nqps RC QPs to one peer, each its own rdma_cm connection. The
 * connector resolves address and route for every QP and connects presenting
 * {magic, version, qp index, nqps, nonce, token} as private data; the listener
 * groups requests by (nonce, token), reports link_accepted(token) on the first
 * one (the core may close the link from inside the callback: the requests are
 * then rejected) and accepts each. The link is up when every QP is
 * ESTABLISHED; the connector then reports link_connected(0). Work posted
 * before that waits in the QPs' chains.
 *
 * Teardown, whatever the cause: QPs to ERR (rdma_disconnect, so the peer hears
 * of it at once), drain the CQ until every posted send has completed or been
 * flushed, then, on a failure only, complete the outstanding cookies in order
 * and report link_down; finally destroy in reverse order of creation.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "verbs.h"

#define VERBS_RESOLVE_TIMEOUT_MS 2000
#define VERBS_LISTEN_BACKLOG 64

/* ---------------------------------------------------------------- private data */

/*
 * 32 bytes, little-endian, in every connect request (fits the 56 bytes RoCE
 * leaves for rdma_cm private data):
 * magic u32, version u8, qp_idx u8, nqps u8, 0 u8, nonce u64, token[16].
 */
static void pdata_encode(uint8_t *d, const struct rgaps_link *l, uint32_t idx)
{
	uint32_t magic = htole32(VERBS_CONN_MAGIC);
	uint64_t nonce = htole64(l->nonce);

	memset(d, 0, VERBS_CONN_PDATA_LEN);
	memcpy(d, &magic, 4);
	d[4] = VERBS_CONN_VERSION;
	d[5] = (uint8_t)idx;
	d[6] = (uint8_t)l->nqps;
	memcpy(d + 8, &nonce, 8);
	memcpy(d + 16, l->token, RGAPS_LINK_TOKEN_LEN);
}

struct conn_req {
	uint32_t idx, nqps;
	uint64_t nonce;
	uint8_t token[RGAPS_LINK_TOKEN_LEN];
};

static const char *pdata_decode(const uint8_t *d, size_t len, struct conn_req *q)
{
	uint32_t magic;
	uint64_t nonce;

	if (!d || len < VERBS_CONN_PDATA_LEN)
		return "no rgaps private data";
	memcpy(&magic, d, 4);
	if (le32toh(magic) != VERBS_CONN_MAGIC)
		return "bad magic in the private data";
	if (d[4] != VERBS_CONN_VERSION)
		return "unsupported connection version";
	if (d[6] < 1 || d[6] > VERBS_MAX_QPS || d[5] >= d[6])
		return "bad QP index or count";
	memcpy(&nonce, d + 8, 8);
	q->idx = d[5];
	q->nqps = d[6];
	q->nonce = le64toh(nonce);
	memcpy(q->token, d + 16, RGAPS_LINK_TOKEN_LEN);
	return NULL;
}

/* ---------------------------------------------------------------- link objects */

static void timer_cb(uv_timer_t *h);

static struct rgaps_link *link_new(struct verbs_ctx *ctx, bool passive, uint32_t nqps)
{
	struct rgaps_link *l = calloc(1, sizeof(*l));

	if (!l)
		return NULL;
	l->timer = calloc(1, sizeof(*l->timer));
	if (!l->timer) {
		free(l);
		return NULL;
	}
	l->ctx = ctx;
	l->passive = passive;
	l->nqps = nqps;
	l->state = VERBS_LINK_CONNECTING;
	vlist_init(&l->defer_node);
	for (uint32_t i = 0; i < nqps; i++) {
		l->qps[i].obj = VERBS_OBJ_QP;
		l->qps[i].link = l;
		l->qps[i].idx = i;
	}
	uv_timer_init(ctx->loop, l->timer);
	l->timer->data = l;
	uv_timer_start(l->timer, timer_cb, ctx->cfg.connect_timeout_ms, 0);
	vlist_add_tail(&ctx->links, &l->node);
	return l;
}

/* Tie the link to the device its first QP resolved to: CQ, channel, Delayed Head words. */
static int link_bind_dev(struct rgaps_link *l, struct ibv_context *verbs)
{
	struct verbs_ctx *ctx = l->ctx;
	struct verbs_dev *dev;
	int r;

	if (l->dev)
		return l->dev->verbs == verbs ? 0 : -EXDEV;
	dev = rgaps__verbs_dev_of(ctx, verbs);
	if (!dev)
		return -ENODEV;
	l->dev = dev;
	r = rgaps__verbs_cq_create(l);
	if (r)
		return r;
	l->dhead = aligned_alloc(4096, 4096);
	if (!l->dhead)
		return -ENOMEM;
	memset(l->dhead, 0, 4096);
	l->dhead_mr = ibv_reg_mr(dev->pd, l->dhead, VERBS_MAX_RINGS * sizeof(uint64_t),
				 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!l->dhead_mr)
		return errno ? -errno : -ENOMEM;
	/*
	 * Send slots for every QP now, not when each QP is created: the core may
	 * post as soon as it knows the link, and work for a QP still connecting
	 * waits in its chain until the link is up.
	 */
	for (uint32_t i = 0; i < l->nqps; i++) {
		struct verbs_qp *qp = &l->qps[i];

		qp->max_sge = RGAPS_MIN_SZ(RGAPS_RECORD_SG_MAX, dev->max_sge);
		qp->slots = calloc(ctx->cfg.sq_depth, sizeof(*qp->slots));
		if (!qp->slots)
			return -ENOMEM;
		qp->slots_mr = ibv_reg_mr(dev->pd, qp->slots,
					  ctx->cfg.sq_depth * sizeof(*qp->slots),
					  IBV_ACCESS_LOCAL_WRITE);
		if (!qp->slots_mr)
			return errno ? -errno : -ENOMEM;
	}
	return 0;
}

static int qp_create(struct verbs_qp *qp)
{
	struct rgaps_link *l = qp->link;
	struct verbs_ctx *ctx = l->ctx;
	struct verbs_dev *dev = l->dev;
	struct ibv_qp_init_attr a;
	uint8_t ack = ctx->cfg.ack_timeout;
	int r;

	memset(&a, 0, sizeof(a));
	a.qp_context = qp;
	a.send_cq = l->cq;
	a.recv_cq = l->cq;
	a.srq = dev->srq;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 0;
	a.cap.max_send_wr = ctx->cfg.sq_depth;
	a.cap.max_recv_wr = dev->srq ? 0 : dev->rq_depth;
	a.cap.max_send_sge = RGAPS_MIN_SZ(RGAPS_RECORD_SG_MAX, dev->max_sge);
	a.cap.max_recv_sge = 1;
	a.cap.max_inline_data = 64;
	if (rdma_create_qp(qp->id, dev->pd, &a)) {
		/* Some devices take no inline data: Heads then go from the registered slot. */
		a.cap.max_inline_data = 0;
		if (rdma_create_qp(qp->id, dev->pd, &a))
			return errno ? -errno : -EINVAL;
	}
	qp->qp = qp->id->qp;
	qp->qp->qp_context = qp; /* async events find us from the QP */
	qp->inline_head = a.cap.max_inline_data >= sizeof(uint64_t);
	if (!dev->srq) {
		r = rgaps__verbs_recv_fill(dev, qp);
		if (r)
			return r;
	}
	/* Local ACK timeout 4.096 us * 2^ack: how soon a lost packet is retransmitted. */
	if (rdma_set_option(qp->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack, sizeof(ack)))
		vlog(ctx, VERBS_LOG_DEBUG, "rdma_set_option(ACK_TIMEOUT): %s; the CM default stays",
		     strerror(errno));
	return 0;
}

/* Destroy in reverse order of creation; memory goes when the outermost callback returns. */
static void link_destroy(struct rgaps_link *l)
{
	struct verbs_ctx *ctx = l->ctx;

	if (l->state == VERBS_LINK_DEAD)
		return;
	if (l->passive && l->state == VERBS_LINK_CONNECTING)
		ctx->refused[ctx->nrefused++ % RGAPS_ARRAY_LEN(ctx->refused)] = l->nonce;
	vlog(ctx, VERBS_LOG_DEBUG,
	     "link %s %s closed: %llu polls found %llu completions, %llu arms, %llu wake-ups, %llu busy polls",
	     l->passive ? "from" : "to", l->peer, (unsigned long long)l->n_polls,
	     (unsigned long long)l->n_wc, (unsigned long long)l->n_arms,
	     (unsigned long long)l->st.cq_events, (unsigned long long)l->st.cq_polls_busy);
	l->state = VERBS_LINK_DEAD;
	l->closed = true;
	vlist_del(&l->defer_node);
	for (uint32_t i = VERBS_MAX_RINGS; i-- > 0;)
		if (l->rx[i].mr)
			ibv_dereg_mr(l->rx[i].mr);
	for (uint32_t i = l->nqps; i-- > 0;) {
		struct verbs_qp *qp = &l->qps[i];

		if (qp->id && l->passive && !qp->accepted)
			rdma_reject(qp->id, NULL, 0);
		if (qp->qp)
			rdma_destroy_qp(qp->id);
		qp->qp = NULL;
	}
	for (uint32_t i = l->nqps; i-- > 0;) {
		struct verbs_qp *qp = &l->qps[i];

		if (qp->slots_mr)
			ibv_dereg_mr(qp->slots_mr);
		free(qp->slots);
		qp->slots = NULL;
	}
	if (l->dhead_mr)
		ibv_dereg_mr(l->dhead_mr);
	free(l->dhead);
	rgaps__verbs_cq_destroy(l);
	for (uint32_t i = l->nqps; i-- > 0;)
		if (l->qps[i].id)
			rdma_destroy_id(l->qps[i].id);
	rgaps__verbs_handle_close(&l->timer);
	vlist_del(&l->node);
	vlist_add_tail(&ctx->graveyard, &l->node);
}

static void link_vfail(struct rgaps_link *l, int err, const char *fmt, va_list ap)
{
	struct verbs_ctx *ctx = l->ctx;
	char why[200];

	if (l->state == VERBS_LINK_DEAD || l->failing)
		return;
	vsnprintf(why, sizeof(why), fmt, ap);
	vlog(ctx, l->reported ? VERBS_LOG_WARN : VERBS_LOG_INFO, "link %s %s: %s",
	     l->passive ? "from" : "to", l->peer, why);
	rgaps__verbs_drain(l);
	if (!l->closed && l->reported) {
		uint32_t depth = ctx->cfg.sq_depth;

		/* Every cookie gets its answer, in post order per QP, before link_down. */
		for (uint32_t i = 0; i < l->nqps && !l->closed; i++) {
			struct verbs_qp *qp = &l->qps[i];

			while (qp->slots && qp->done < qp->next && !l->closed) {
				struct verbs_slot *s = &qp->slots[qp->done % depth];
				int st = qp->done < qp->ok_upto ? 0 : err;
				uint64_t cookie = s->cookie;
				uint8_t kind = s->kind;

				qp->done++;
				if (kind != VERBS_SLOT_RECORD)
					continue;
				if (!st) {
					l->st.records_sent++;
					l->st.bytes_sent += s->bytes;
				}
				if (ctx->cbs.record_sent)
					ctx->cbs.record_sent(ctx->cbs.arg, l, cookie, st);
			}
		}
		if (!l->closed) {
			l->closed = true;
			if (ctx->cbs.link_down)
				ctx->cbs.link_down(ctx->cbs.arg, l, err, why);
		}
	} else if (!l->closed && !l->passive) {
		l->closed = true;
		if (ctx->cbs.link_connected)
			ctx->cbs.link_connected(ctx->cbs.arg, l, err);
	}
	link_destroy(l);
}

void rgaps__verbs_link_fail(struct rgaps_link *l, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	link_vfail(l, err, fmt, ap);
	va_end(ap);
}

void rgaps__verbs_link_fail_later(struct rgaps_link *l, int err, const char *fmt, ...)
{
	struct verbs_ctx *ctx = l->ctx;
	va_list ap;

	if (l->state == VERBS_LINK_DEAD || l->failing || !vlist_empty(&l->defer_node))
		return;
	l->defer_err = err;
	va_start(ap, fmt);
	vsnprintf(l->defer_why, sizeof(l->defer_why), fmt, ap);
	va_end(ap);
	vlist_add_tail(&ctx->deferred, &l->defer_node);
	uv_idle_start(ctx->defer_idle, rgaps__verbs_defer_cb);
}

void rgaps__verbs_defer_cb(uv_idle_t *h)
{
	struct verbs_ctx *ctx = h->data;

	rgaps__verbs_enter(ctx);
	while (!vlist_empty(&ctx->deferred)) {
		struct rgaps_link *l =
			vlist_entry(ctx->deferred.next, struct rgaps_link, defer_node);

		vlist_del(&l->defer_node);
		rgaps__verbs_link_fail(l, l->defer_err, "%s", l->defer_why);
	}
	uv_idle_stop(h);
	rgaps__verbs_leave(ctx);
}

void rgaps__verbs_link_close(struct rgaps_link *l)
{
	if (l->state == VERBS_LINK_DEAD)
		return;
	l->closed = true;
	rgaps__verbs_drain(l);
	link_destroy(l);
}

static void timer_cb(uv_timer_t *h)
{
	struct rgaps_link *l = h->data;
	struct verbs_ctx *ctx = l->ctx;

	rgaps__verbs_enter(ctx);
	if (l->state == VERBS_LINK_CONNECTING)
		rgaps__verbs_link_fail(l, -ETIMEDOUT,
				       "set-up did not finish within %u ms (%u of %u QPs established)",
				       ctx->cfg.connect_timeout_ms, l->nestablished, l->nqps);
	rgaps__verbs_leave(ctx);
}

/* ---------------------------------------------------------------- listen */

static int resolve(const char *host, uint16_t port, bool passive, struct addrinfo **ai_p)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	char ps[8];
	int r;

	hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
	snprintf(ps, sizeof(ps), "%u", port);
	r = getaddrinfo(host && *host ? host : NULL, ps, &hints, ai_p);
	if (r)
		return r == EAI_SYSTEM ? -errno : -EADDRNOTAVAIL;
	return 0;
}

int rgaps__verbs_listen(struct verbs_ctx *ctx, const char *host, uint16_t port)
{
	struct verbs_listener *lst;
	struct addrinfo *ai;
	int one = 1, r;

	if (ctx->unavailable_err)
		return ctx->unavailable_err;
	if (!ctx->loop || !ctx->ec)
		return -EINVAL;
	r = resolve(host, port, true, &ai);
	if (r)
		return r;
	lst = calloc(1, sizeof(*lst));
	if (!lst) {
		r = -ENOMEM;
		goto err_ai;
	}
	lst->obj = VERBS_OBJ_LISTENER;
	snprintf(lst->addr, sizeof(lst->addr), "%s:%u", host ? host : "*", port);
	if (rdma_create_id(ctx->ec, &lst->id, lst, RDMA_PS_TCP)) {
		r = -errno;
		goto err_free;
	}
	/* A restarted daemon must get its port back while old connections sit in timewait. */
	if (rdma_set_option(lst->id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)))
		vlog(ctx, VERBS_LOG_DEBUG, "rdma_set_option(REUSEADDR): %s", strerror(errno));
	if (rdma_bind_addr(lst->id, ai->ai_addr)) {
		r = -errno;
		vlog(ctx, VERBS_LOG_ERR, "listen %s: rdma_bind_addr: %s (is it an RDMA address?)",
		     lst->addr, strerror(-r));
		goto err_id;
	}
	if (rdma_listen(lst->id, VERBS_LISTEN_BACKLOG)) {
		r = -errno;
		vlog(ctx, VERBS_LOG_ERR, "listen %s: rdma_listen: %s", lst->addr, strerror(-r));
		goto err_id;
	}
	freeaddrinfo(ai);
	vlist_add_tail(&ctx->listeners, &lst->node);
	vlog(ctx, VERBS_LOG_INFO, "listening on %s", lst->addr);
	return 0;

err_id:
	rdma_destroy_id(lst->id);
err_free:
	free(lst);
err_ai:
	freeaddrinfo(ai);
	return r;
}

void rgaps__verbs_listeners_close(struct verbs_ctx *ctx)
{
	while (!vlist_empty(&ctx->listeners)) {
		struct verbs_listener *lst =
			vlist_entry(ctx->listeners.next, struct verbs_listener, node);

		vlist_del(&lst->node);
		rdma_destroy_id(lst->id);
		free(lst);
	}
}

/* ---------------------------------------------------------------- connect */

static void addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
	char h[INET6_ADDRSTRLEN] = "?";
	uint16_t port = 0;

	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)sa;

		inet_ntop(AF_INET, &s->sin_addr, h, sizeof(h));
		port = ntohs(s->sin_port);
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)sa;

		inet_ntop(AF_INET6, &s->sin6_addr, h, sizeof(h));
		port = ntohs(s->sin6_port);
	}
	snprintf(buf, len, "%s:%u", h, port);
}

static uint64_t random_nonce(void)
{
	uint64_t n;
	struct timespec ts;

	if (getrandom(&n, sizeof(n), GRND_NONBLOCK) == sizeof(n))
		return n;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec;
}

int rgaps__verbs_connect(struct verbs_ctx *ctx, const char *host, uint16_t port,
			 const uint8_t token[RGAPS_LINK_TOKEN_LEN], struct rgaps_link **link_p)
{
	struct rgaps_link *l;
	struct addrinfo *ai;
	int r;

	if (ctx->unavailable_err)
		return ctx->unavailable_err;
	if (!ctx->loop || !ctx->ec || !host || !token || !link_p)
		return -EINVAL;
	r = resolve(host, port, false, &ai);
	if (r)
		return r;
	l = link_new(ctx, false, ctx->cfg.nqps);
	if (!l) {
		freeaddrinfo(ai);
		return -ENOMEM;
	}
	memcpy(l->token, token, RGAPS_LINK_TOKEN_LEN);
	l->nonce = random_nonce();
	snprintf(l->peer, sizeof(l->peer), "%s:%u", host, port);
	for (uint32_t i = 0; i < l->nqps; i++) {
		struct verbs_qp *qp = &l->qps[i];

		if (rdma_create_id(ctx->ec, &qp->id, qp, RDMA_PS_TCP) ||
		    rdma_resolve_addr(qp->id, NULL, ai->ai_addr, VERBS_RESOLVE_TIMEOUT_MS)) {
			r = errno ? -errno : -EINVAL;
			vlog(ctx, VERBS_LOG_ERR, "connect %s: %s: %s", l->peer,
			     qp->id ? "rdma_resolve_addr" : "rdma_create_id", strerror(-r));
			freeaddrinfo(ai);
			l->closed = true;
			link_destroy(l);
			return r;
		}
	}
	freeaddrinfo(ai);
	*link_p = l;
	return 0;
}

/* ---------------------------------------------------------------- CM events */

/* What we keep of an event: it is acknowledged before it is handled (see cm_cb). */
struct cm_ev {
	enum rdma_cm_event_type type;
	int status;
	struct rdma_cm_id *id;
	struct rdma_cm_id *listen_id;
	uint8_t pdata[64];
	size_t pdata_len;
};

static void reject_request(struct verbs_ctx *ctx, struct rdma_cm_id *id, const char *why)
{
	char peer[INET6_ADDRSTRLEN + 8];

	addr_str(rdma_get_peer_addr(id), peer, sizeof(peer));
	vlog(ctx, VERBS_LOG_WARN, "rejected a connection from %s: %s", peer, why);
	rdma_reject(id, NULL, 0);
	rdma_destroy_id(id);
}

static struct rgaps_link *find_group(struct verbs_ctx *ctx, const struct conn_req *q)
{
	struct vlist *p, *tmp;

	vlist_for_each_safe(p, tmp, &ctx->links) {
		struct rgaps_link *l = vlist_entry(p, struct rgaps_link, node);

		if (l->passive && l->state == VERBS_LINK_CONNECTING && !l->failing &&
		    l->nonce == q->nonce && l->nqps == q->nqps &&
		    !memcmp(l->token, q->token, RGAPS_LINK_TOKEN_LEN))
			return l;
	}
	return NULL;
}

static void on_connect_request(struct verbs_ctx *ctx, const struct cm_ev *e)
{
	struct rdma_conn_param cp;
	struct rgaps_link *l;
	struct verbs_qp *qp;
	struct conn_req q;
	const char *bad;
	bool fresh = false;
	int r;

	bad = pdata_decode(e->pdata, e->pdata_len, &q);
	if (bad) {
		reject_request(ctx, e->id, bad);
		return;
	}
	for (uint32_t i = 0; i < RGAPS_ARRAY_LEN(ctx->refused); i++) {
		if (ctx->refused[i] == q.nonce && q.nonce) {
			/* Another QP of a link refused or failed while setting up. */
			rdma_reject(e->id, NULL, 0);
			rdma_destroy_id(e->id);
			return;
		}
	}
	if (!rgaps__verbs_dev_of(ctx, e->id->verbs)) {
		reject_request(ctx, e->id, "the request came in on an unusable device");
		return;
	}
	l = find_group(ctx, &q);
	if (!l) {
		l = link_new(ctx, true, q.nqps);
		if (!l) {
			reject_request(ctx, e->id, "out of memory");
			return;
		}
		fresh = true;
		l->nonce = q.nonce;
		memcpy(l->token, q.token, RGAPS_LINK_TOKEN_LEN);
		addr_str(rdma_get_peer_addr(e->id), l->peer, sizeof(l->peer));
	} else if (l->qps[q.idx].id) {
		reject_request(ctx, e->id, "duplicate QP index in a link");
		return;
	}
	qp = &l->qps[q.idx];
	qp->id = e->id;
	qp->id->context = qp;
	r = link_bind_dev(l, e->id->verbs);
	if (!r)
		r = qp_create(qp);
	if (r) {
		if (fresh)
			l->closed = true; /* never reported: no callback */
		rgaps__verbs_link_fail(l, r, "cannot set up QP %u: %s", q.idx, strerror(-r));
		return;
	}
	if (fresh) {
		l->reported = true;
		if (ctx->cbs.link_accepted)
			ctx->cbs.link_accepted(ctx->cbs.arg, l, l->token);
		if (l->state == VERBS_LINK_DEAD || l->closed)
			return; /* the core did not know the token: close() rejected the request */
	}
	memset(&cp, 0, sizeof(cp));
	/* WRITE only: no RDMA READ or atomics in either direction, so no responder resources. */
	cp.responder_resources = 0;
	cp.initiator_depth = 0;
	cp.retry_count = ctx->cfg.retry_cnt;
	cp.rnr_retry_count = ctx->cfg.rnr_retry;
	if (rdma_accept(qp->id, &cp)) {
		r = -errno;
		rgaps__verbs_link_fail(l, r, "rdma_accept of QP %u: %s", q.idx, strerror(-r));
		return;
	}
	qp->accepted = true;
}

static void on_route_resolved(struct verbs_qp *qp)
{
	struct rgaps_link *l = qp->link;
	struct verbs_ctx *ctx = l->ctx;
	uint8_t pd[VERBS_CONN_PDATA_LEN];
	struct rdma_conn_param cp;
	int r;

	r = link_bind_dev(l, qp->id->verbs);
	if (r == -EXDEV) {
		rgaps__verbs_link_fail(l, r, "QPs of one link resolved to different RDMA devices");
		return;
	}
	if (!r)
		r = qp_create(qp);
	if (r) {
		rgaps__verbs_link_fail(l, r, "cannot set up QP %u: %s", qp->idx, strerror(-r));
		return;
	}
	pdata_encode(pd, l, qp->idx);
	memset(&cp, 0, sizeof(cp));
	cp.private_data = pd;
	cp.private_data_len = sizeof(pd);
	cp.responder_resources = 0;
	cp.initiator_depth = 0;
	cp.retry_count = ctx->cfg.retry_cnt;
	cp.rnr_retry_count = ctx->cfg.rnr_retry;
	if (rdma_connect(qp->id, &cp)) {
		r = -errno;
		rgaps__verbs_link_fail(l, r, "rdma_connect of QP %u: %s", qp->idx, strerror(-r));
	}
}

static void on_established(struct verbs_qp *qp)
{
	struct rgaps_link *l = qp->link;
	struct verbs_ctx *ctx = l->ctx;
	struct ibv_qp_attr a;

	if (qp->established)
		return;
	qp->established = true;
	l->nestablished++;
	/*
	 * The CM leaves min_rnr_timer at 0, which encodes 655 ms: one RNR NAK
	 * would stall the peer for that long. Ask for a short back-off instead.
	 */
	memset(&a, 0, sizeof(a));
	a.min_rnr_timer = ctx->cfg.min_rnr_timer;
	if (ibv_modify_qp(qp->qp, &a, IBV_QP_MIN_RNR_TIMER))
		vlog(ctx, VERBS_LOG_DEBUG, "QP %u: setting min_rnr_timer: %s", qp->idx,
		     strerror(errno));
	if (l->nestablished < l->nqps)
		return;
	l->state = VERBS_LINK_UP;
	uv_timer_stop(l->timer);
	vlog(ctx, VERBS_LOG_INFO, "link %s %s up: %u QPs on %s", l->passive ? "from" : "to",
	     l->peer, l->nqps, l->dev->name);
	if (!l->passive) {
		l->reported = true;
		if (ctx->cbs.link_connected)
			ctx->cbs.link_connected(ctx->cbs.arg, l, 0);
		if (l->state == VERBS_LINK_DEAD)
			return;
	}
	rgaps__verbs_flush_link(l); /* whatever was posted while connecting */
}

static void on_qp_event(struct verbs_qp *qp, const struct cm_ev *e)
{
	struct rgaps_link *l = qp->link;
	int r;

	switch (e->type) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(qp->id, VERBS_RESOLVE_TIMEOUT_MS)) {
			r = -errno;
			rgaps__verbs_link_fail(l, r, "rdma_resolve_route: %s", strerror(-r));
		}
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		on_route_resolved(qp);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		on_established(qp);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		rgaps__verbs_link_fail(l, -EHOSTUNREACH, "no RDMA route to %s (%s, status %d)",
				       l->peer, rdma_event_str(e->type), e->status);
		break;
	case RDMA_CM_EVENT_UNREACHABLE:
		rgaps__verbs_link_fail(l, -EHOSTUNREACH, "%s is unreachable (status %d)", l->peer,
				       e->status);
		break;
	case RDMA_CM_EVENT_REJECTED:
		rgaps__verbs_link_fail(l, -ECONNREFUSED,
				       "%s rejected QP %u (reason %d: no listener, or unknown token)",
				       l->peer, qp->idx, e->status);
		break;
	case RDMA_CM_EVENT_CONNECT_ERROR:
		rgaps__verbs_link_fail(l, -ECONNABORTED, "connecting QP %u failed (status %d)",
				       qp->idx, e->status);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		rgaps__verbs_link_fail(l, -ECONNRESET, "the peer closed the connection (QP %u)",
				       qp->idx);
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		rgaps__verbs_link_fail(l, -ENODEV, "RDMA device %s was removed",
				       l->dev ? l->dev->name : "?");
		break;
	default: /* TIMEWAIT_EXIT, ADDR_CHANGE, ...: nothing to do */
		vlog(l->ctx, VERBS_LOG_DEBUG, "QP %u of %s: %s", qp->idx, l->peer,
		     rdma_event_str(e->type));
		break;
	}
}

void rgaps__verbs_cm_cb(uv_poll_t *h, int status, int events)
{
	struct verbs_ctx *ctx = h->data;
	struct rdma_cm_event *ev;
	struct cm_ev e;

	rgaps__verbs_enter(ctx);
	while (ctx->ec && rdma_get_cm_event(ctx->ec, &ev) == 0) {
		/*
		 * Copy and acknowledge first: rdma_destroy_id() waits for every
		 * event of its id to be acknowledged, and handling may destroy it.
		 */
		memset(&e, 0, sizeof(e));
		e.type = ev->event;
		e.status = ev->status;
		e.id = ev->id;
		e.listen_id = ev->listen_id;
		if (ev->param.conn.private_data && ev->param.conn.private_data_len) {
			e.pdata_len =
				RGAPS_MIN_SZ(ev->param.conn.private_data_len, sizeof(e.pdata));
			memcpy(e.pdata, ev->param.conn.private_data, e.pdata_len);
		}
		rdma_ack_cm_event(ev);

		if (e.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
			on_connect_request(ctx, &e);
		} else if (e.id && e.id->context &&
			   *(const uint32_t *)e.id->context == VERBS_OBJ_QP) {
			struct verbs_qp *qp = e.id->context;

			if (qp->link->state != VERBS_LINK_DEAD)
				on_qp_event(qp, &e);
		} else {
			vlog(ctx, e.type == RDMA_CM_EVENT_DEVICE_REMOVAL ? VERBS_LOG_ERR :
									   VERBS_LOG_DEBUG,
			     "listener event: %s (status %d)", rdma_event_str(e.type), e.status);
		}
	}
	rgaps__verbs_leave(ctx);
}
