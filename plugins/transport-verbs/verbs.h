/*
 * Internal declarations of the verbs transport (docs/VERBS.md): the objects a
 * context owns (devices with their PD and shared receive queue, listeners,
 * links, local registrations), a link's QPs with their send-slot rings, and the
 * helpers the three source files share: transport_verbs.c (the operations
 * table, rings, posting), verbs_conn.c (rdma_cm events, link set-up and
 * teardown) and verbs_cq.c (completion channel, adaptive polling, async
 * events). Nothing here is visible outside the plugin (-fvisibility=hidden).
 *
 * Everything runs on the loop thread. Callbacks into the core are made only
 * from uv callbacks (never from inside an operation), between
 * rgaps__verbs_enter() and rgaps__verbs_leave(): a link the core closes from
 * inside a callback is torn down at once but its memory is freed only when the
 * outermost callback returns, so the code that called back can still look at
 * link->state.
 */
#ifndef RGAPS_TRANSPORT_VERBS_H
#define RGAPS_TRANSPORT_VERBS_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <uv.h>

#include "rgaps/plugin.h"

#define VERBS_MAX_QPS 16
#define VERBS_MAX_RINGS 128
#define VERBS_UNIT 64u /* the immediate counts 64-byte units (PROTOCOL.md 3) */
#define VERBS_RECV_WRID UINT64_MAX /* wr_id of every receive; sends use sequence numbers */
#define RGAPS_MIN_SZ(a, b) ((a) < (b) ? (a) : (b))
#define RGAPS_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Immediate value, host order (docs/PROTOCOL.md section 3). */
#define VERBS_IMM_HEAD (1u << 31)
#define VERBS_IMM_RING_SHIFT 24
#define VERBS_IMM_RING_MASK 0x7fu
#define VERBS_IMM_UNITS_MAX 0xffffffu

/* Private data of each rdma_connect (docs/VERBS.md "Connection set-up"). */
#define VERBS_CONN_MAGIC 0x43564752u /* "RGVC" */
#define VERBS_CONN_VERSION 1
#define VERBS_CONN_PDATA_LEN 32

/* Ring / head-word descriptors (docs/VERBS.md "Descriptors"). */
#define VERBS_DESC_MAGIC 0x44564752u /* "RGVD" */
#define VERBS_DESC_VERSION 1
#define VERBS_DESC_LEN 32
enum verbs_desc_kind {
	VERBS_DESC_HEAD = 1, /* the sender's 8-byte Delayed Head word */
	VERBS_DESC_RING = 2, /* the receiver's ring */
};

/* ---------------------------------------------------------------- lists */

struct vlist {
	struct vlist *next, *prev;
};

static inline void vlist_init(struct vlist *h)
{
	h->next = h->prev = h;
}

static inline bool vlist_empty(const struct vlist *h)
{
	return h->next == h;
}

static inline void vlist_add_tail(struct vlist *h, struct vlist *n)
{
	n->prev = h->prev;
	n->next = h;
	h->prev->next = n;
	h->prev = n;
}

static inline void vlist_del(struct vlist *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = n;
}

#define vlist_entry(p, type, member) ((type *)((char *)(p) - offsetof(type, member)))
#define vlist_for_each_safe(p, tmp, h) \
	for ((p) = (h)->next, (tmp) = (p)->next; (p) != (h); (p) = (tmp), (tmp) = (p)->next)

/* ---------------------------------------------------------------- configuration */

/* Read once at init from the environment (docs/VERBS.md "Knobs"). */
struct verbs_cfg {
	uint32_t nqps;		     /* RGAPS_VERBS_QPS: QPs per link */
	uint32_t sq_depth;	     /* RGAPS_VERBS_SQ_DEPTH: send WRs per QP */
	uint32_t rq_depth;	     /* RGAPS_VERBS_SRQ_DEPTH: receives posted per device */
	uint32_t signal_every;	     /* RGAPS_VERBS_SIGNAL_EVERY: one signalled send in N */
	uint32_t busy_rounds;	     /* RGAPS_VERBS_BUSY_ROUNDS: most empty busy polls */
	uint32_t head_reserve;	     /* send slots per QP that only Head writes may use */
	uint32_t connect_timeout_ms; /* RGAPS_VERBS_CONNECT_TIMEOUT_MS */
	uint8_t ack_timeout;	     /* RGAPS_VERBS_ACK_TIMEOUT: 4.096 us * 2^x */
	uint8_t min_rnr_timer;	     /* RGAPS_VERBS_MIN_RNR_TIMER: IB encoding */
	uint8_t retry_cnt;	     /* transport retries (7 = the most) */
	uint8_t rnr_retry;	     /* RNR retries (7 = forever) */
};

/* ---------------------------------------------------------------- objects */

/* First member of what an rdma_cm_id's context points to. */
enum verbs_obj {
	VERBS_OBJ_LISTENER = 0x4c495354, /* struct verbs_listener */
	VERBS_OBJ_QP = 0x51505150,	 /* struct verbs_qp */
};

struct verbs_ctx;
struct rgaps_link;

/* One RDMA device (as librdmacm opened it): PD, receive queue, async events. */
struct verbs_dev {
	struct verbs_ctx *ctx;
	struct ibv_context *verbs; /* owned by librdmacm */
	struct ibv_pd *pd;
	struct ibv_srq *srq;	   /* shared by every link on the device; NULL: none */
	uint32_t rq_depth;	   /* receives kept posted (in the SRQ, or per QP) */
	uint32_t srq_posted;	   /* receives in the SRQ now */
	struct ibv_recv_wr *recv_wrs; /* rq_depth zero-length receives, chained per post */
	uv_poll_t *async_poll;	   /* the context's async_fd */
	uint64_t max_msg;	   /* largest single RDMA WRITE (port max_msg_sz) */
	uint32_t max_sge, max_qp_wr, max_cqe;
	char name[64];
};

/* A reg_local() registration: one MR per device, so any link can use it. */
struct verbs_lmr {
	struct vlist node; /* ctx->lmrs */
	char *addr;
	uint64_t len;
	uint32_t n;
	struct ibv_mr *mr[]; /* index: device */
};

enum verbs_slot_kind {
	VERBS_SLOT_FREE = 0,
	VERBS_SLOT_RECORD = 1,	/* last (or only) write of a record: has the cookie and imm */
	VERBS_SLOT_SEGMENT = 2, /* an earlier plain write of a record over max_msg bytes */
	VERBS_SLOT_HEAD = 3,	/* an 8-byte Head write with imm */
};

/*
 * One send work request. Slots form a ring per QP indexed by sequence number:
 * [done, posted) are on the wire, [posted, next) are chained and wait for the
 * doorbell (flush). wr_id is the sequence number, so one signalled completion
 * retires every earlier slot of its QP (RC completes in order).
 */
struct verbs_slot {
	struct ibv_send_wr wr;
	struct ibv_sge sge[RGAPS_RECORD_SG_MAX];
	uint64_t cookie;
	uint64_t bytes;
	uint64_t head_le; /* HEAD: the value written (the source of the inline write) */
	uint8_t kind;
	uint8_t ring_id;
};

struct verbs_qp {
	uint32_t obj; /* VERBS_OBJ_QP */
	struct rgaps_link *link;
	uint32_t idx;
	struct rdma_cm_id *id;
	struct ibv_qp *qp; /* id->qp once created */
	bool established;
	bool accepted;	   /* passive: rdma_accept() done */
	bool inline_head;  /* the QP takes 8-byte inline writes */
	uint32_t max_sge;
	struct verbs_slot *slots;
	struct ibv_mr *slots_mr; /* the non-inline fallback reads head_le from here */
	uint64_t next, posted, done;
	uint64_t ok_upto;	 /* teardown: slots below it completed successfully */
	uint64_t drained;	 /* teardown: slots below it have their completion */
	uint32_t since_signal;
	bool credit_wait;	 /* the queue was full: refuse records until it is half empty */
	uint32_t rq_posted;	 /* without an SRQ: receives posted on this QP */
};

enum verbs_link_state {
	VERBS_LINK_CONNECTING, /* some QP not yet established */
	VERBS_LINK_UP,	       /* every QP established */
	VERBS_LINK_DEAD,       /* torn down; memory freed when the outermost callback returns */
};

struct verbs_tx_ring {
	bool prepared;	/* Delayed Head word handed out */
	bool retired;	/* detached: a late Head write is ignored, not an error */
	bool connected; /* the receiver's ring is known */
	uint64_t raddr, size;
	uint32_t rkey;
};

struct verbs_rx_ring {
	bool attached;
	/* Detached since it was attached: records whose completions are still queued
	 * (the sender saw them acknowledged and then tore the ring down on the
	 * session, which may be read first) are dropped quietly, not a failure. */
	bool retired;
	char *base;
	uint64_t size;
	struct ibv_mr *mr; /* REMOTE_WRITE */
	uint64_t head_raddr;
	uint32_t head_rkey;
	bool head_pending; /* a Head write for this ring waits for the doorbell ... */
	uint64_t head_seq; /* ... in this slot: a newer Head overwrites its value */
};

struct rgaps_link {
	struct vlist node;	 /* ctx->links; ctx->graveyard once dead */
	struct vlist defer_node; /* ctx->deferred while a failure waits for the loop */
	struct verbs_ctx *ctx;
	struct verbs_dev *dev;
	enum verbs_link_state state;
	bool passive;  /* accepted by our listener */
	bool reported; /* the core knows it: link_accepted, or link_connected(0) */
	bool closed;   /* the core called close(), or we reported it down: no more callbacks */
	bool failing;  /* QPs moved to error by us: flush completions are expected */
	int defer_err;
	char defer_why[160];
	uint8_t token[RGAPS_LINK_TOKEN_LEN];
	uint64_t nonce;
	char peer[INET6_ADDRSTRLEN + 8];
	uint32_t nqps, nestablished;
	struct verbs_qp qps[VERBS_MAX_QPS];
	struct ibv_comp_channel *ch;
	uv_poll_t *ch_poll;
	struct ibv_cq *cq;
	uint32_t cq_size;
	uv_idle_t *busy;      /* adaptive polling: runs while the link is busy */
	bool busy_on;
	uint32_t busy_empty;  /* empty polls in a row */
	uint32_t busy_limit;  /* empty polls that end a busy period (adapted, <= busy_rounds) */
	uint32_t busy_caught; /* polls of this period that found work after an empty one */
	uv_timer_t *timer; /* set-up deadline */
	uint64_t *dhead;   /* VERBS_MAX_RINGS Delayed Head words, written by the peer */
	struct ibv_mr *dhead_mr;
	struct verbs_tx_ring tx[VERBS_MAX_RINGS];
	struct verbs_rx_ring rx[VERBS_MAX_RINGS];
	struct rgaps_link_stats st;
	uint64_t n_polls, n_wc, n_arms; /* beyond the ABI's stats: logged at teardown (debug) */
};

struct verbs_listener {
	uint32_t obj; /* VERBS_OBJ_LISTENER */
	struct vlist node;
	struct rdma_cm_id *id;
	char addr[INET6_ADDRSTRLEN + 8];
};

struct verbs_ctx {
	struct rgaps_plugin_env env;
	struct rgaps_transport_cbs cbs;
	uv_loop_t *loop;
	struct verbs_cfg cfg;
	struct rdma_event_channel *ec;
	uv_poll_t *ec_poll;
	struct ibv_context **devlist; /* rdma_get_devices() */
	uint32_t ndev;
	struct verbs_dev *devs;
	int unavailable_err; /* 0, or why nothing can work here (probe says it) */
	char unavailable[256];
	struct vlist links, graveyard, deferred, listeners, lmrs;
	uv_check_t *flush_check; /* rings doorbells left pending at the end of a loop turn */
	uv_idle_t *defer_idle;	 /* reports failures found inside operations */
	uint32_t depth;		 /* nesting of uv callbacks (see the top of this file) */
	uint64_t refused[16];	 /* nonces of passive links that died setting up ... */
	uint32_t nrefused;	 /* ... so their late QP requests are rejected quietly */
};

/* ---------------------------------------------------------------- logging */

#define VERBS_LOG_ERR 0
#define VERBS_LOG_WARN 1
#define VERBS_LOG_INFO 2
#define VERBS_LOG_DEBUG 3

#define vlog(ctx, lvl, ...)                                    \
	do {                                                   \
		if ((ctx)->env.log)                            \
			(ctx)->env.log((lvl), "verbs: " __VA_ARGS__); \
	} while (0)

/* ---------------------------------------------------------------- shared helpers */

/* Around every uv callback: the outermost leave frees dead links. */
void rgaps__verbs_enter(struct verbs_ctx *ctx);
void rgaps__verbs_leave(struct verbs_ctx *ctx);

/* uv close callback that frees the handle (handles are malloc'ed one by one). */
void rgaps__verbs_free_handle(uv_handle_t *h);
int rgaps__verbs_poll_start(struct verbs_ctx *ctx, int fd, uv_poll_t **poll_p, void *data,
			    uv_poll_cb cb);
void rgaps__verbs_handle_close(void *handle_p);
int rgaps__verbs_set_nonblock(int fd);

/* verbs_conn.c */
void rgaps__verbs_cm_cb(uv_poll_t *h, int status, int events);
int rgaps__verbs_listen(struct verbs_ctx *ctx, const char *host, uint16_t port);
int rgaps__verbs_connect(struct verbs_ctx *ctx, const char *host, uint16_t port,
			 const uint8_t token[RGAPS_LINK_TOKEN_LEN], struct rgaps_link **link_p);
/* Fail a link from loop context: QPs to error, drain, complete cookies, report, destroy. */
void rgaps__verbs_link_fail(struct rgaps_link *l, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Fail a link from inside an operation: reported on the next loop turn. */
void rgaps__verbs_link_fail_later(struct rgaps_link *l, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void rgaps__verbs_defer_cb(uv_idle_t *h);
/* The core's close(): teardown without callbacks. */
void rgaps__verbs_link_close(struct rgaps_link *l);
void rgaps__verbs_listeners_close(struct verbs_ctx *ctx);
struct verbs_dev *rgaps__verbs_dev_of(struct verbs_ctx *ctx, struct ibv_context *verbs);

/* verbs_cq.c */
int rgaps__verbs_cq_create(struct rgaps_link *l);
void rgaps__verbs_cq_destroy(struct rgaps_link *l);
/* QPs to error (if not yet) and poll the CQ until every posted send is accounted for. */
void rgaps__verbs_drain(struct rgaps_link *l);
int rgaps__verbs_recv_fill(struct verbs_dev *dev, struct verbs_qp *qp);
void rgaps__verbs_async_cb(uv_poll_t *h, int status, int events);

/* transport_verbs.c */
void rgaps__verbs_flush_link(struct rgaps_link *l);
uint32_t rgaps__verbs_lmr_index(struct verbs_ctx *ctx, struct verbs_dev *dev);

#endif
