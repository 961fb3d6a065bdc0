/*
 * The verbs transport (libibverbs + librdmacm): records go from the sender's
 * registered staging memory into the receiver's ring with RDMA WRITE WITH
 * IMMEDIATE, Head comes back with an 8-byte inline RDMA WRITE WITH IMMEDIATE
 * into the sender's Delayed Head word (docs/ARCHITECTURE.md section 4, docs/PROTOCOL.md
 * section 3, design notes in docs/VERBS.md). This file holds the operations
 * table of include/rgaps/plugin.h: context and device set-up, probe, local
 * registrations, the ring descriptors, and the posting path (send credits,
 * selective signalling, WR chains rung with one doorbell per QP in flush()).
 * Connection handling is in verbs_conn.c, completions in verbs_cq.c. The core
 * decides every ring offset; this plugin writes where it is told and checks
 * what a peer announces against what is attached.
 */
#include <ctype.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verbs.h"

_Static_assert(VERBS_DESC_LEN <= RGAPS_RING_DESC_MAX, "descriptors must fit the ABI's buffer");

/* ---------------------------------------------------------------- small helpers */

int rgaps__verbs_set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

void rgaps__verbs_free_handle(uv_handle_t *h)
{
	free(h);
}

/* Close a uv handle held through a pointer (uv_poll_t **, uv_idle_t ** ...) and clear it. */
void rgaps__verbs_handle_close(void *handle_p)
{
	uv_handle_t **hp = handle_p;

	if (*hp) {
		uv_close(*hp, rgaps__verbs_free_handle);
		*hp = NULL;
	}
}

int rgaps__verbs_poll_start(struct verbs_ctx *ctx, int fd, uv_poll_t **poll_p, void *data,
			    uv_poll_cb cb)
{
	uv_poll_t *p;
	int r;

	r = rgaps__verbs_set_nonblock(fd);
	if (r)
		return r;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	r = uv_poll_init(ctx->loop, p, fd);
	if (r) {
		free(p);
		return r;
	}
	p->data = data;
	r = uv_poll_start(p, UV_READABLE, cb);
	if (r) {
		uv_close((uv_handle_t *)p, rgaps__verbs_free_handle);
		return r;
	}
	*poll_p = p;
	return 0;
}

static void reap(struct verbs_ctx *ctx)
{
	while (!vlist_empty(&ctx->graveyard)) {
		struct rgaps_link *l = vlist_entry(ctx->graveyard.next, struct rgaps_link, node);

		vlist_del(&l->node);
		free(l);
	}
}

void rgaps__verbs_enter(struct verbs_ctx *ctx)
{
	ctx->depth++;
}

void rgaps__verbs_leave(struct verbs_ctx *ctx)
{
	if (--ctx->depth == 0)
		reap(ctx);
}

uint32_t rgaps__verbs_lmr_index(struct verbs_ctx *ctx, struct verbs_dev *dev)
{
	return (uint32_t)(dev - ctx->devs);
}

/* ---------------------------------------------------------------- configuration */

/*
 * Tunables: the daemon's "transport_options": { "verbs": { ... } }, else the
 * environment variable RGAPS_VERBS_<NAME> (for programs that load the plugin
 * without a daemon configuration: tests, benchmarks), else the default.
 * docs/VERBS.md explains each choice.
 */
enum {
	OPT_QPS,
	OPT_SQ_DEPTH,
	OPT_SRQ_DEPTH,
	OPT_SIGNAL_EVERY,
	OPT_BUSY_ROUNDS,
	OPT_CONNECT_TIMEOUT_MS,
	OPT_ACK_TIMEOUT,
	OPT_MIN_RNR_TIMER,
	OPT_NUM,
};

static const struct rgaps_plugin_option verbs_options[OPT_NUM] = {
	[OPT_QPS] = { "qps", 2, 1, VERBS_MAX_QPS,
		      "RC QPs per link, sharing one CQ (the connecting side's value rules)" },
	[OPT_SQ_DEPTH] = { "sq_depth", 256, 32, 16384, "send slots per QP" },
	[OPT_SRQ_DEPTH] = { "srq_depth", 1024, 64, 65536,
			    "receives posted per device (per QP without an SRQ)" },
	[OPT_SIGNAL_EVERY] = { "signal_every", 16, 1, 1024,
			       "one signalled send in this many (at most sq_depth / 4)" },
	[OPT_BUSY_ROUNDS] = { "busy_rounds", 16, 0, 1u << 20,
			      "most empty busy polls before re-arming the completion channel; "
			      "0: channel events only" },
	[OPT_CONNECT_TIMEOUT_MS] = { "connect_timeout_ms", 15000, 100, 600000,
				     "a link not established in this time fails and is retried" },
	[OPT_ACK_TIMEOUT] = { "ack_timeout", 16, 1, 31,
			      "local ACK timeout exponent: 4.096 us x 2^N" },
	[OPT_MIN_RNR_TIMER] = { "min_rnr_timer", 12, 0, 31,
				"IB encoding of the RNR back-off (12 = 0.64 ms)" },
};

static uint32_t opt_u32(struct verbs_ctx *ctx, const struct rgaps_plugin_env *env, int i)
{
	const struct rgaps_plugin_option *o = &verbs_options[i];
	char var[64];
	const char *s;
	unsigned long long v;
	uint64_t cv;
	char *end;

	if (rgaps_plugin_env_option(env, o->name, &cv))
		return (uint32_t)cv; /* the daemon checked the bounds */
	snprintf(var, sizeof(var), "RGAPS_VERBS_%s", o->name);
	for (char *p = var; *p; p++)
		*p = (char)toupper((unsigned char)*p);
	s = getenv(var);
	if (!s || !*s)
		return (uint32_t)o->def;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || *end || v < o->min || v > o->max) {
		vlog(ctx, VERBS_LOG_WARN, "%s=%s is not a number in [%llu, %llu]; using %llu", var,
		     s, (unsigned long long)o->min, (unsigned long long)o->max,
		     (unsigned long long)o->def);
		return (uint32_t)o->def;
	}
	return (uint32_t)v;
}

static void cfg_load(struct verbs_ctx *ctx, const struct rgaps_plugin_env *env)
{
	struct verbs_cfg *c = &ctx->cfg;

	c->nqps = opt_u32(ctx, env, OPT_QPS);
	c->sq_depth = opt_u32(ctx, env, OPT_SQ_DEPTH);
	c->rq_depth = opt_u32(ctx, env, OPT_SRQ_DEPTH);
	c->signal_every = opt_u32(ctx, env, OPT_SIGNAL_EVERY);
	if (c->signal_every > c->sq_depth / 4)
		c->signal_every = c->sq_depth / 4;
	c->busy_rounds = opt_u32(ctx, env, OPT_BUSY_ROUNDS);
	c->connect_timeout_ms = opt_u32(ctx, env, OPT_CONNECT_TIMEOUT_MS);
	c->ack_timeout = (uint8_t)opt_u32(ctx, env, OPT_ACK_TIMEOUT);
	c->min_rnr_timer = (uint8_t)opt_u32(ctx, env, OPT_MIN_RNR_TIMER);
	c->head_reserve = 8;
	c->retry_cnt = 7;
	c->rnr_retry = 7;
	vlog(ctx, VERBS_LOG_INFO,
	     "options: qps %u, sq_depth %u, srq_depth %u, signal_every %u, busy_rounds %u, "
	     "connect_timeout_ms %u, ack_timeout %u, min_rnr_timer %u",
	     c->nqps, c->sq_depth, c->rq_depth, c->signal_every, c->busy_rounds,
	     c->connect_timeout_ms, c->ack_timeout, c->min_rnr_timer);
}

/* ---------------------------------------------------------------- devices */

static int dev_open(struct verbs_ctx *ctx, struct verbs_dev *dev, struct ibv_context *verbs)
{
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	int r;

	dev->ctx = ctx;
	dev->verbs = verbs;
	snprintf(dev->name, sizeof(dev->name), "%s", ibv_get_device_name(verbs->device));
	r = ibv_query_device(verbs, &da);
	if (r)
		return -r;
	dev->max_sge = (uint32_t)da.max_sge;
	dev->max_qp_wr = (uint32_t)da.max_qp_wr;
	dev->max_cqe = (uint32_t)da.max_cqe;
	dev->max_msg = 1ull << 31;
	for (uint8_t p = 1; p <= da.phys_port_cnt; p++)
		if (ibv_query_port(verbs, p, &pa) == 0 && pa.max_msg_sz &&
		    pa.max_msg_sz < dev->max_msg)
			dev->max_msg = pa.max_msg_sz;
	/* Segments must stay 64-byte multiples so a split record keeps its offsets aligned. */
	dev->max_msg &= ~(uint64_t)(VERBS_UNIT - 1);
	if (dev->max_msg < VERBS_UNIT)
		return -EINVAL;
	dev->pd = ibv_alloc_pd(verbs);
	if (!dev->pd)
		return errno ? -errno : -ENOMEM;
	dev->rq_depth = ctx->cfg.rq_depth;
	if (da.max_srq > 0 && da.max_srq_wr > 0) {
		struct ibv_srq_init_attr sa = { .srq_context = dev };

		if ((uint32_t)da.max_srq_wr < dev->rq_depth)
			dev->rq_depth = (uint32_t)da.max_srq_wr;
		sa.attr.max_wr = dev->rq_depth;
		sa.attr.max_sge = 1;
		dev->srq = ibv_create_srq(dev->pd, &sa);
		if (!dev->srq)
			vlog(ctx, VERBS_LOG_WARN,
			     "%s: ibv_create_srq: %s; each QP gets its own receive queue", dev->name,
			     strerror(errno));
	}
	if (!dev->srq && dev->rq_depth > dev->max_qp_wr)
		dev->rq_depth = dev->max_qp_wr;
	dev->recv_wrs = calloc(dev->rq_depth, sizeof(*dev->recv_wrs));
	if (!dev->recv_wrs)
		return -ENOMEM;
	if (dev->srq) {
		r = rgaps__verbs_recv_fill(dev, NULL);
		if (r)
			return r;
	}
	if (ctx->loop) {
		r = rgaps__verbs_poll_start(ctx, verbs->async_fd, &dev->async_poll, dev,
					    rgaps__verbs_async_cb);
		/*
		 * librdmacm shares one ibv_context per device in a process: a second
		 * context of this plugin in the same process (tests) finds the fd
		 * watched already; the first one's reader routes events to any link.
		 */
		if (r == UV_EEXIST)
			r = 0;
		if (r)
			return r;
	}
	return 0;
}

static void dev_close(struct verbs_dev *dev)
{
	rgaps__verbs_handle_close(&dev->async_poll);
	if (dev->srq && ibv_destroy_srq(dev->srq))
		vlog(dev->ctx, VERBS_LOG_WARN, "%s: ibv_destroy_srq failed", dev->name);
	dev->srq = NULL;
	free(dev->recv_wrs);
	dev->recv_wrs = NULL;
	if (dev->pd && ibv_dealloc_pd(dev->pd))
		vlog(dev->ctx, VERBS_LOG_WARN, "%s: ibv_dealloc_pd failed (registrations left?)",
		     dev->name);
	dev->pd = NULL;
}

static void devs_open(struct verbs_ctx *ctx)
{
	int n = 0, r, usable = 0;

	ctx->devlist = rdma_get_devices(&n);
	if (!ctx->devlist || n <= 0) {
		ctx->unavailable_err = -ENODEV;
		snprintf(ctx->unavailable, sizeof(ctx->unavailable),
			 "no RDMA device found (no rdma_rxe, mlx5, ... device is loaded)");
		return;
	}
	ctx->devs = calloc((size_t)n, sizeof(*ctx->devs));
	if (!ctx->devs) {
		ctx->unavailable_err = -ENOMEM;
		snprintf(ctx->unavailable, sizeof(ctx->unavailable), "out of memory");
		return;
	}
	ctx->ndev = (uint32_t)n;
	for (int i = 0; i < n; i++) {
		r = dev_open(ctx, &ctx->devs[i], ctx->devlist[i]);
		if (r) {
			vlog(ctx, VERBS_LOG_WARN, "device %s unusable: %s", ctx->devs[i].name,
			     strerror(-r));
			dev_close(&ctx->devs[i]);
			continue;
		}
		usable++;
	}
	if (!usable) {
		ctx->unavailable_err = -ENODEV;
		snprintf(ctx->unavailable, sizeof(ctx->unavailable),
			 "%d RDMA device(s) but none could be opened (see the log)", n);
	}
}

struct verbs_dev *rgaps__verbs_dev_of(struct verbs_ctx *ctx, struct ibv_context *verbs)
{
	for (uint32_t i = 0; i < ctx->ndev; i++)
		if (ctx->devs[i].verbs == verbs && ctx->devs[i].pd)
			return &ctx->devs[i];
	return NULL;
}

/* ---------------------------------------------------------------- loop helpers */

static void flush_check_cb(uv_check_t *h)
{
	struct verbs_ctx *ctx = h->data;
	struct vlist *p, *tmp;

	rgaps__verbs_enter(ctx);
	vlist_for_each_safe(p, tmp, &ctx->links)
		rgaps__verbs_flush_link(vlist_entry(p, struct rgaps_link, node));
	rgaps__verbs_leave(ctx);
}

/* ---------------------------------------------------------------- init, fini, probe */

static int verbs_init(const struct rgaps_plugin_env *env, const struct rgaps_transport_cbs *cbs,
		      void **ctx_p)
{
	struct verbs_ctx *ctx;
	int r;

	if (!env)
		return -EINVAL;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	memcpy(&ctx->env, env, RGAPS_MIN_SZ(env->struct_size, sizeof(ctx->env)));
	if (cbs)
		ctx->cbs = *cbs;
	ctx->loop = env->uv_loop;
	vlist_init(&ctx->links);
	vlist_init(&ctx->graveyard);
	vlist_init(&ctx->deferred);
	vlist_init(&ctx->listeners);
	vlist_init(&ctx->lmrs);
	cfg_load(ctx, env);

	ctx->ec = rdma_create_event_channel();
	if (!ctx->ec) {
		ctx->unavailable_err = -ENODEV;
		snprintf(ctx->unavailable, sizeof(ctx->unavailable),
			 "rdma_cm is unavailable (/dev/infiniband/rdma_cm: %s)", strerror(errno));
	} else {
		devs_open(ctx);
	}
	if (ctx->loop) {
		ctx->flush_check = calloc(1, sizeof(*ctx->flush_check));
		ctx->defer_idle = calloc(1, sizeof(*ctx->defer_idle));
		if (!ctx->flush_check || !ctx->defer_idle) {
			free(ctx->flush_check);
			free(ctx->defer_idle);
			ctx->flush_check = NULL;
			ctx->defer_idle = NULL;
			r = -ENOMEM;
			goto err_devs;
		}
		uv_check_init(ctx->loop, ctx->flush_check);
		ctx->flush_check->data = ctx;
		uv_check_start(ctx->flush_check, flush_check_cb);
		uv_unref((uv_handle_t *)ctx->flush_check);
		uv_idle_init(ctx->loop, ctx->defer_idle);
		ctx->defer_idle->data = ctx;
		if (ctx->ec) {
			r = rgaps__verbs_poll_start(ctx, ctx->ec->fd, &ctx->ec_poll, ctx,
						    rgaps__verbs_cm_cb);
			if (r)
				goto err_handles;
		}
	}
	vlog(ctx, VERBS_LOG_DEBUG,
	     "init: %u QPs per link, SQ %u, receives %u, signal 1/%u, busy rounds %u, ack timeout %u, min RNR timer %u%s%s",
	     ctx->cfg.nqps, ctx->cfg.sq_depth, ctx->cfg.rq_depth, ctx->cfg.signal_every,
	     ctx->cfg.busy_rounds, ctx->cfg.ack_timeout, ctx->cfg.min_rnr_timer,
	     ctx->unavailable_err ? "; unavailable: " : "", ctx->unavailable);
	*ctx_p = ctx;
	return 0;

err_handles:
	rgaps__verbs_handle_close(&ctx->flush_check);
	rgaps__verbs_handle_close(&ctx->defer_idle);
err_devs:
	for (uint32_t i = 0; i < ctx->ndev; i++)
		dev_close(&ctx->devs[i]);
	free(ctx->devs);
	if (ctx->devlist)
		rdma_free_devices(ctx->devlist);
	if (ctx->ec)
		rdma_destroy_event_channel(ctx->ec);
	free(ctx);
	return r;
}

static void verbs_fini(void *vctx)
{
	struct verbs_ctx *ctx = vctx;
	struct vlist *p, *tmp;
	uint32_t left = 0;

	if (!ctx)
		return;
	rgaps__verbs_enter(ctx);
	vlist_for_each_safe(p, tmp, &ctx->links)
		rgaps__verbs_link_close(vlist_entry(p, struct rgaps_link, node));
	vlist_for_each_safe(p, tmp, &ctx->deferred)
		vlist_del(p);
	rgaps__verbs_listeners_close(ctx);
	rgaps__verbs_leave(ctx);
	vlist_for_each_safe(p, tmp, &ctx->lmrs) {
		struct verbs_lmr *m = vlist_entry(p, struct verbs_lmr, node);

		for (uint32_t i = 0; i < m->n; i++)
			if (m->mr[i])
				ibv_dereg_mr(m->mr[i]);
		vlist_del(&m->node);
		free(m);
		left++;
	}
	if (left)
		vlog(ctx, VERBS_LOG_WARN, "fini: %u local registration(s) were never released",
		     left);
	for (uint32_t i = ctx->ndev; i-- > 0;)
		dev_close(&ctx->devs[i]);
	free(ctx->devs);
	if (ctx->devlist)
		rdma_free_devices(ctx->devlist);
	rgaps__verbs_handle_close(&ctx->ec_poll);
	if (ctx->ec)
		rdma_destroy_event_channel(ctx->ec);
	rgaps__verbs_handle_close(&ctx->defer_idle);
	rgaps__verbs_handle_close(&ctx->flush_check);
	free(ctx);
}

static const char *link_layer_name(uint8_t ll)
{
	return ll == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand";
}

static int verbs_probe(void *vctx, char *why, size_t whylen)
{
	struct verbs_ctx *ctx = vctx;
	char down[160] = "";
	size_t dl = 0;

	if (!ctx) {
		snprintf(why, whylen, "not initialised");
		return -ENODEV;
	}
	if (ctx->unavailable_err) {
		snprintf(why, whylen, "%s", ctx->unavailable);
		return -ENODEV;
	}
	for (uint32_t i = 0; i < ctx->ndev; i++) {
		struct verbs_dev *dev = &ctx->devs[i];
		struct ibv_device_attr da;

		if (!dev->pd || ibv_query_device(dev->verbs, &da))
			continue;
		for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
			struct ibv_port_attr pa;

			if (ibv_query_port(dev->verbs, p, &pa))
				continue;
			if (pa.state == IBV_PORT_ACTIVE) {
				snprintf(why, whylen,
					 "%s port %u ACTIVE (%s, MTU %d, %s shared receive queue)",
					 dev->name, p, link_layer_name(pa.link_layer),
					 128 << pa.active_mtu, dev->srq ? "with" : "no");
				return 0;
			}
			if (dl < sizeof(down))
				dl += (size_t)snprintf(down + dl, sizeof(down) - dl,
						       "%s%s port %u %s", dl ? ", " : "",
						       dev->name, p, ibv_port_state_str(pa.state));
		}
	}
	snprintf(why, whylen, "no ACTIVE RDMA port (%s)", dl ? down : "no ports");
	return -ENODEV;
}

static int verbs_listen(void *vctx, const char *host, uint16_t port)
{
	return rgaps__verbs_listen(vctx, host, port);
}

static int verbs_connect(void *vctx, const char *host, uint16_t port,
			 const uint8_t token[RGAPS_LINK_TOKEN_LEN], struct rgaps_link **link_p)
{
	struct verbs_ctx *ctx = vctx;
	int r;

	rgaps__verbs_enter(ctx);
	r = rgaps__verbs_connect(ctx, host, port, token, link_p);
	rgaps__verbs_leave(ctx);
	return r;
}

static void verbs_close(void *vctx, struct rgaps_link *l)
{
	struct verbs_ctx *ctx = vctx;

	if (!l || l->state == VERBS_LINK_DEAD)
		return;
	rgaps__verbs_enter(ctx);
	rgaps__verbs_link_close(l);
	rgaps__verbs_leave(ctx);
}

/* ---------------------------------------------------------------- local registrations */

static int verbs_reg_local(void *vctx, void *addr, uint64_t len, void **mr_p)
{
	struct verbs_ctx *ctx = vctx;
	struct verbs_lmr *m;
	uint32_t ok = 0;
	int err = -ENODEV;

	if (!addr || !len)
		return -EINVAL;
	if (!ctx->ndev)
		return -ENODEV;
	m = calloc(1, sizeof(*m) + ctx->ndev * sizeof(m->mr[0]));
	if (!m)
		return -ENOMEM;
	m->addr = addr;
	m->len = len;
	m->n = ctx->ndev;
	for (uint32_t i = 0; i < ctx->ndev; i++) {
		if (!ctx->devs[i].pd)
			continue;
		/*
		 * LOCAL_WRITE makes the kernel pin writable pages: pinning untouched
		 * anonymous memory read-only would pin the shared zero page and send
		 * zeros after the process writes its own copy.
		 */
		m->mr[i] = ibv_reg_mr(ctx->devs[i].pd, addr, len, IBV_ACCESS_LOCAL_WRITE);
		if (!m->mr[i]) /* a read-only mapping */
			m->mr[i] = ibv_reg_mr(ctx->devs[i].pd, addr, len, 0);
		if (!m->mr[i]) {
			err = errno ? -errno : -ENOMEM;
			vlog(ctx, VERBS_LOG_WARN, "%s: ibv_reg_mr(%p, %llu): %s", ctx->devs[i].name,
			     addr, (unsigned long long)len, strerror(-err));
			continue;
		}
		ok++;
	}
	if (!ok) {
		free(m);
		return err;
	}
	vlist_add_tail(&ctx->lmrs, &m->node);
	*mr_p = m;
	return 0;
}

static void verbs_dereg_local(void *vctx, void *mr)
{
	struct verbs_lmr *m = mr;

	if (!m)
		return;
	for (uint32_t i = 0; i < m->n; i++)
		if (m->mr[i])
			ibv_dereg_mr(m->mr[i]);
	vlist_del(&m->node);
	free(m);
}

/* ---------------------------------------------------------------- descriptors */

/*
 * 32 bytes, little-endian (drawn in docs/VERBS.md "Descriptors"):
 * magic u32, version u8, kind u8, ring_id u16, addr u64, size u64, rkey u32, 0 u32.
 */
static void desc_encode(uint8_t *d, uint8_t kind, uint32_t ring_id, uint64_t addr, uint64_t size,
			uint32_t rkey)
{
	uint32_t u32;
	uint64_t u64;
	uint16_t u16;

	memset(d, 0, VERBS_DESC_LEN);
	u32 = htole32(VERBS_DESC_MAGIC);
	memcpy(d, &u32, 4);
	d[4] = VERBS_DESC_VERSION;
	d[5] = kind;
	u16 = htole16((uint16_t)ring_id);
	memcpy(d + 6, &u16, 2);
	u64 = htole64(addr);
	memcpy(d + 8, &u64, 8);
	u64 = htole64(size);
	memcpy(d + 16, &u64, 8);
	u32 = htole32(rkey);
	memcpy(d + 24, &u32, 4);
}

static int desc_decode(const uint8_t *d, size_t len, uint8_t kind, uint32_t ring_id,
		       uint64_t *addr_p, uint64_t *size_p, uint32_t *rkey_p)
{
	uint32_t magic, rkey;
	uint64_t addr, size;
	uint16_t rid;

	if (!d || len != VERBS_DESC_LEN)
		return -EINVAL;
	memcpy(&magic, d, 4);
	memcpy(&rid, d + 6, 2);
	memcpy(&addr, d + 8, 8);
	memcpy(&size, d + 16, 8);
	memcpy(&rkey, d + 24, 4);
	addr = le64toh(addr);
	size = le64toh(size);
	if (le32toh(magic) != VERBS_DESC_MAGIC || d[4] != VERBS_DESC_VERSION || d[5] != kind ||
	    le16toh(rid) != ring_id || addr + size < addr)
		return -EINVAL;
	*addr_p = addr;
	*size_p = size;
	*rkey_p = le32toh(rkey);
	return 0;
}

/* ---------------------------------------------------------------- rings */

static int verbs_sender_ring_prepare(void *vctx, struct rgaps_link *l, uint32_t ring_id,
				     uint8_t *desc, size_t *desc_len_p)
{
	struct verbs_tx_ring *t;

	if (!l || l->state == VERBS_LINK_DEAD || !desc || !desc_len_p)
		return -EINVAL;
	if (ring_id >= VERBS_MAX_RINGS)
		return -EINVAL;
	if (!l->dhead_mr)
		return -ENOTCONN;
	t = &l->tx[ring_id];
	memset(t, 0, sizeof(*t));
	__atomic_store_n(&l->dhead[ring_id], 0, __ATOMIC_RELAXED);
	t->prepared = true;
	desc_encode(desc, VERBS_DESC_HEAD, ring_id, (uintptr_t)&l->dhead[ring_id], sizeof(uint64_t),
		    l->dhead_mr->rkey);
	*desc_len_p = VERBS_DESC_LEN;
	return 0;
}

static int verbs_receiver_ring_attach(void *vctx, struct rgaps_link *l, uint32_t ring_id,
				      void *ring, uint64_t size, const uint8_t *peer_desc,
				      size_t peer_desc_len, uint8_t *desc, size_t *desc_len_p)
{
	struct verbs_ctx *ctx = vctx;
	struct verbs_rx_ring *r;
	uint64_t haddr, hsize;
	uint32_t hkey;
	struct ibv_mr *mr;

	if (!l || l->state == VERBS_LINK_DEAD || !desc || !desc_len_p || !ring)
		return -EINVAL;
	if (ring_id >= VERBS_MAX_RINGS || !size || size % VERBS_UNIT ||
	    (uintptr_t)ring % VERBS_UNIT)
		return -EINVAL;
	if (!l->dev)
		return -ENOTCONN;
	r = &l->rx[ring_id];
	if (r->attached)
		return -EBUSY;
	if (desc_decode(peer_desc, peer_desc_len, VERBS_DESC_HEAD, ring_id, &haddr, &hsize,
			&hkey) ||
	    hsize != sizeof(uint64_t) || haddr % sizeof(uint64_t))
		return -EINVAL;
	/* The peer may write into the ring and nothing else: no remote read, no atomics. */
	mr = ibv_reg_mr(l->dev->pd, ring, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr) {
		int e = errno ? -errno : -ENOMEM;

		vlog(ctx, VERBS_LOG_ERR, "ring %u: ibv_reg_mr(%llu bytes): %s", ring_id,
		     (unsigned long long)size, strerror(-e));
		return e;
	}
	memset(r, 0, sizeof(*r));
	r->attached = true;
	r->base = ring;
	r->size = size;
	r->mr = mr;
	r->head_raddr = haddr;
	r->head_rkey = hkey;
	desc_encode(desc, VERBS_DESC_RING, ring_id, (uintptr_t)ring, size, mr->rkey);
	*desc_len_p = VERBS_DESC_LEN;
	return 0;
}

static int verbs_sender_ring_connect(void *vctx, struct rgaps_link *l, uint32_t ring_id,
				     const uint8_t *desc, size_t desc_len)
{
	struct verbs_tx_ring *t;
	uint64_t addr, size;
	uint32_t rkey;

	if (!l || l->state == VERBS_LINK_DEAD || ring_id >= VERBS_MAX_RINGS)
		return -EINVAL;
	t = &l->tx[ring_id];
	if (!t->prepared)
		return -EINVAL;
	if (desc_decode(desc, desc_len, VERBS_DESC_RING, ring_id, &addr, &size, &rkey) || !size ||
	    size % VERBS_UNIT)
		return -EINVAL;
	t->raddr = addr;
	t->size = size;
	t->rkey = rkey;
	t->connected = true;
	return 0;
}

/*
 * Sender side of ring_detach: the core releases the records' memory when this
 * returns, so none of their cookies may come back. Records still chained
 * become zero-length RDMA WRITEs (no bytes read or written, no receive
 * consumed, no R_Key check: IB C9-88) so the chain keeps its shape; records
 * on the wire complete silently. Those cannot be recalled: the device may
 * still read their source until they complete (docs/VERBS.md).
 */
static void tx_ring_forget(struct verbs_ctx *ctx, struct rgaps_link *l, uint32_t ring_id)
{
	struct verbs_qp *qp = &l->qps[ring_id % l->nqps];
	uint32_t depth = ctx->cfg.sq_depth;

	if (!qp->slots)
		return;
	for (uint64_t seq = qp->done; seq < qp->next; seq++) {
		struct verbs_slot *s = &qp->slots[seq % depth];

		if (s->ring_id != ring_id ||
		    (s->kind != VERBS_SLOT_RECORD && s->kind != VERBS_SLOT_SEGMENT))
			continue;
		s->kind = VERBS_SLOT_SEGMENT; /* no cookie */
		if (seq < qp->posted)
			continue;
		s->wr.opcode = IBV_WR_RDMA_WRITE;
		s->wr.num_sge = 0;
		s->wr.imm_data = 0;
		s->wr.send_flags &= ~(unsigned int)IBV_SEND_INLINE;
		s->wr.wr.rdma.remote_addr = 0;
		s->wr.wr.rdma.rkey = 0;
	}
}

static void verbs_ring_detach(void *vctx, struct rgaps_link *l, uint32_t ring_id)
{
	struct verbs_ctx *ctx = vctx;
	struct verbs_rx_ring *r;

	if (!l || l->state == VERBS_LINK_DEAD || ring_id >= VERBS_MAX_RINGS)
		return;
	r = &l->rx[ring_id];
	if (r->mr)
		ibv_dereg_mr(r->mr);
	{
		bool was = r->attached || r->retired;

		memset(r, 0, sizeof(*r));
		r->retired = was;
	}
	if (l->tx[ring_id].prepared) {
		tx_ring_forget(ctx, l, ring_id);
		/* A Head write already on its way for this ring is ignored, not an error. */
		memset(&l->tx[ring_id], 0, sizeof(l->tx[ring_id]));
		l->tx[ring_id].retired = true;
	}
}

/* ---------------------------------------------------------------- posting */

/* Append one slot to the QP's pending chain; signals every Nth and near a full queue. */
static struct verbs_slot *slot_push(struct verbs_ctx *ctx, struct verbs_qp *qp)
{
	uint32_t depth = ctx->cfg.sq_depth;
	uint64_t seq = qp->next++;
	struct verbs_slot *s = &qp->slots[seq % depth];

	memset(&s->wr, 0, sizeof(s->wr));
	s->wr.wr_id = seq;
	s->wr.sg_list = s->sge;
	s->cookie = 0;
	s->bytes = 0;
	if (seq > qp->posted)
		qp->slots[(seq - 1) % depth].wr.next = &s->wr;
	if (++qp->since_signal >= ctx->cfg.signal_every ||
	    qp->next - qp->done >= depth - ctx->cfg.signal_every) {
		s->wr.send_flags = IBV_SEND_SIGNALED;
		qp->since_signal = 0;
	}
	return s;
}

static int verbs_post_record(void *vctx, struct rgaps_link *l, uint32_t ring_id, uint64_t off,
			     const struct rgaps_sg *sg, uint32_t nsg, uint64_t cookie)
{
	struct verbs_ctx *ctx = vctx;
	uint32_t lkey[RGAPS_RECORD_SG_MAX], idx, piece = 0;
	uint64_t len = 0, units, nseg, max_msg, limit, used, poff = 0;
	struct verbs_tx_ring *t;
	struct verbs_qp *qp;

	if (!l || l->state == VERBS_LINK_DEAD || l->closed || l->failing)
		return -ENOTCONN;
	if (ring_id >= VERBS_MAX_RINGS || !sg || nsg == 0 || nsg > RGAPS_RECORD_SG_MAX)
		return -EINVAL;
	t = &l->tx[ring_id];
	if (!t->connected)
		return -ENOTCONN;
	idx = rgaps__verbs_lmr_index(ctx, l->dev);
	for (uint32_t i = 0; i < nsg; i++) {
		const struct verbs_lmr *m = sg[i].mr;
		const char *a = sg[i].addr;

		if (!m || idx >= m->n || !m->mr[idx] || a < m->addr || sg[i].len > m->len ||
		    (uint64_t)(a - m->addr) > m->len - sg[i].len)
			return -EINVAL;
		lkey[i] = m->mr[idx]->lkey;
		len += sg[i].len;
	}
	units = (len + VERBS_UNIT - 1) / VERBS_UNIT;
	if (!len || units > VERBS_IMM_UNITS_MAX)
		return -EMSGSIZE;
	if (off % VERBS_UNIT || off > t->size || len > t->size - off)
		return -EINVAL;
	qp = &l->qps[ring_id % l->nqps];
	if (nsg > qp->max_sge)
		return -EINVAL;
	max_msg = l->dev->max_msg;
	nseg = (len + max_msg - 1) / max_msg;
	limit = ctx->cfg.sq_depth - ctx->cfg.head_reserve;
	if (nseg > limit)
		return -EMSGSIZE;
	/*
	 * The credit gate, with hysteresis: once a post found the queue full,
	 * posts wait until it has drained to half (low watermark), so the core
	 * refills it with one chained post instead of one WR per completion.
	 */
	used = qp->next - qp->done;
	if (used + nseg > limit || (qp->credit_wait && used > limit / 2)) {
		qp->credit_wait = true;
		l->st.send_credit_stalls++;
		return -EAGAIN;
	}
	qp->credit_wait = false;
	for (uint64_t s = 0; s < nseg; s++) {
		uint64_t seg_off = s * max_msg, rem = RGAPS_MIN_SZ(max_msg, len - seg_off);
		struct verbs_slot *slot = slot_push(ctx, qp);
		int n = 0;

		slot->ring_id = (uint8_t)ring_id;
		while (rem) {
			uint64_t take;

			while (sg[piece].len == poff) { /* skip empty pieces */
				piece++;
				poff = 0;
			}
			take = RGAPS_MIN_SZ(rem, sg[piece].len - poff);
			slot->sge[n].addr = (uintptr_t)sg[piece].addr + poff;
			slot->sge[n].length = (uint32_t)take;
			slot->sge[n].lkey = lkey[piece];
			n++;
			rem -= take;
			poff += take;
		}
		slot->wr.num_sge = n;
		slot->wr.wr.rdma.remote_addr = t->raddr + off + seg_off;
		slot->wr.wr.rdma.rkey = t->rkey;
		if (s + 1 < nseg) {
			slot->wr.opcode = IBV_WR_RDMA_WRITE;
			slot->kind = VERBS_SLOT_SEGMENT;
		} else {
			slot->wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
			slot->wr.imm_data =
				htobe32(ring_id << VERBS_IMM_RING_SHIFT | (uint32_t)units);
			slot->kind = VERBS_SLOT_RECORD;
			slot->cookie = cookie;
			slot->bytes = len;
		}
	}
	return 0;
}

static int verbs_post_head(void *vctx, struct rgaps_link *l, uint32_t ring_id, uint64_t head)
{
	struct verbs_ctx *ctx = vctx;
	struct verbs_rx_ring *r;
	struct verbs_slot *slot;
	struct verbs_qp *qp;

	if (!l || l->state == VERBS_LINK_DEAD || l->closed || l->failing)
		return -ENOTCONN;
	if (ring_id >= VERBS_MAX_RINGS || !l->rx[ring_id].attached)
		return -EINVAL;
	r = &l->rx[ring_id];
	qp = &l->qps[ring_id % l->nqps];
	if (r->head_pending && r->head_seq >= qp->posted && r->head_seq < qp->next) {
		/* The previous Head of this ring has not left yet: send the newer value instead. */
		qp->slots[r->head_seq % ctx->cfg.sq_depth].head_le = htole64(head);
		return 0;
	}
	if (qp->next - qp->done >= ctx->cfg.sq_depth)
		return -EAGAIN;
	slot = slot_push(ctx, qp);
	slot->kind = VERBS_SLOT_HEAD;
	slot->ring_id = (uint8_t)ring_id;
	slot->head_le = htole64(head);
	slot->sge[0].addr = (uintptr_t)&slot->head_le;
	slot->sge[0].length = sizeof(slot->head_le);
	slot->sge[0].lkey = qp->slots_mr->lkey;
	slot->wr.num_sge = 1;
	slot->wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	slot->wr.imm_data = htobe32(VERBS_IMM_HEAD | ring_id << VERBS_IMM_RING_SHIFT);
	slot->wr.wr.rdma.remote_addr = r->head_raddr;
	slot->wr.wr.rdma.rkey = r->head_rkey;
	if (qp->inline_head)
		slot->wr.send_flags |= IBV_SEND_INLINE;
	r->head_pending = true;
	r->head_seq = slot->wr.wr_id;
	l->st.head_updates_sent++;
	return 0;
}

/* One doorbell per QP for the chain posted since the last flush. */
void rgaps__verbs_flush_link(struct rgaps_link *l)
{
	struct verbs_ctx *ctx = l->ctx;
	uint32_t depth = ctx->cfg.sq_depth;

	if (l->state != VERBS_LINK_UP || l->failing)
		return;
	for (uint32_t i = 0; i < l->nqps; i++) {
		struct verbs_qp *qp = &l->qps[i];
		struct ibv_send_wr *bad = NULL;
		struct verbs_slot *last;
		int r;

		if (qp->posted == qp->next)
			continue;
		if (!qp->qp)
			continue; /* cannot happen once the link is up; keeps the chain if it did */
		last = &qp->slots[(qp->next - 1) % depth];
		last->wr.next = NULL;
		if (!(last->wr.send_flags & IBV_SEND_SIGNALED)) {
			/* The last WR of a batch is signalled: no cookie waits for more traffic. */
			last->wr.send_flags |= IBV_SEND_SIGNALED;
			qp->since_signal = 0;
		}
		r = ibv_post_send(qp->qp, &qp->slots[qp->posted % depth].wr, &bad);
		if (r) {
			if (bad)
				qp->posted = bad->wr_id;
			rgaps__verbs_link_fail_later(l, -r, "ibv_post_send on QP %u: %s", i,
						     strerror(r));
			return;
		}
		qp->posted = qp->next;
	}
}

static void verbs_flush(void *vctx, struct rgaps_link *l)
{
	if (l)
		rgaps__verbs_flush_link(l);
}

static void verbs_link_stats(void *vctx, struct rgaps_link *l, struct rgaps_link_stats *st)
{
	if (!l) {
		memset(st, 0, sizeof(*st));
		return;
	}
	*st = l->st;
}

/* ---------------------------------------------------------------- the plugin */

static const struct rgaps_transport_ops verbs_ops = {
	.init = verbs_init,
	.fini = verbs_fini,
	.probe = verbs_probe,
	.listen = verbs_listen,
	.connect = verbs_connect,
	.close = verbs_close,
	.reg_local = verbs_reg_local,
	.dereg_local = verbs_dereg_local,
	.sender_ring_prepare = verbs_sender_ring_prepare,
	.receiver_ring_attach = verbs_receiver_ring_attach,
	.sender_ring_connect = verbs_sender_ring_connect,
	.ring_detach = verbs_ring_detach,
	.post_record = verbs_post_record,
	.post_head = verbs_post_head,
	.flush = verbs_flush,
	.link_stats = verbs_link_stats,
};

RGAPS_PLUGIN_EXPORT const struct rgaps_plugin rgaps_plugin = {
	.abi_version = RGAPS_PLUGIN_ABI_VERSION,
	.struct_size = sizeof(struct rgaps_plugin),
	.kind = RGAPS_PLUGIN_TRANSPORT,
	.ops_size = sizeof(struct rgaps_transport_ops),
	.name = "verbs",
	.description = "RDMA WRITE WITH IMMEDIATE over RC QPs (libibverbs, librdmacm)",
	.ops = &verbs_ops,
	.options = verbs_options,
	.noptions = OPT_NUM,
	.priority = 20, /* "auto" prefers it to tcp (10) */
	.data_port_offset = 2, /* data links on the control port + 2 */
};
