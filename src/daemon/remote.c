/*
 * The remote path of rgapsd (see remote.h for the picture): peer sessions and
 * their control messages, data links of the transport plugins, the sender
 * half (forwarder thread -> chunks -> records into the peers' rings) and the
 * receiver half (landed record -> pool block -> local publish). Everything
 * here runs on the loop thread except the forwarder threads (one per topic
 * with an interested peer) and the copy worker, which talk to the loop only
 * through the mailbox (worker.h).
 *
 * Control messages between daemons (JSON, docs/PROTOCOL.md section 4):
 *   link_offer / link_accept   data-link token for one transport
 *   subs                       the topics this host has subscribers for
 *   topic_setup / topic_ready / topic_refused / topic_teardown
 *                              the topic initialisation sequence of DESIGN.md 7
 */
#include "remote.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <sodium.h>

#include "../common/futex.h"
#include "../common/log.h"
#include "../common/numa.h"
#include "../common/record.h"
#include "../common/ring.h"
#include "daemon.h"
#include "peers.h"
#include "worker.h"

#define RT_RINGS 128		 /* ring ids per direction of a peer pair (immediate: 7 bits) */
#define RT_HDR_SLOTS 512	 /* record headers in flight per out ring */
#define RT_SETUP_TIMEOUT_MS 5000 /* a publisher's attach waits at most this for peers */
#define RT_TICK_MS 500
#define RT_RETRY_MS 2 /* blocked receivers retry this often */
#define RT_RESETUP_MIN_MS 500	/* a refused topic set-up is asked again after this, */
#define RT_RESETUP_MAX_MS 8000	/* doubling up to this */
#define RT_DEFERRED_MAX 64	/* set-ups held while the data link they need connects */

enum { TR_TCP, TR_VERBS, TR_NUM };
static const char *const tr_names[TR_NUM] = { "tcp", "verbs" };
static const uint16_t tr_port_offset[TR_NUM] = { 1, 2 }; /* data ports: control port + n */

/* ---------------------------------------------------------------- state machines */

/* A message on the sender side (one per locally published message). */
enum rt_out_state {
	OUT_TAKEN,    /* held from the topic by the forwarder's subscriber slot */
	OUT_QUEUED,   /* chunks queued on the ring of every interested peer */
	OUT_SENT,     /* every record left the source memory */
	OUT_RELEASED, /* hold released: the pool block may be freed */
	OUT_DROPPED,  /* a destination went away before all was sent (counted) */
	OUT_NUM_STATES
};

static const char *const out_state_names[OUT_NUM_STATES] = {
	"taken", "queued", "sent", "released", "dropped",
};

/* A record on the receiver side (one per landed chunk). */
enum rt_in_state {
	IN_LANDED,    /* in the ring, header checked */
	IN_ALLOCATED, /* its message has a pool block (the first chunk allocates) */
	IN_COPYING,   /* the worker copies ring -> pool */
	IN_COPIED,    /* chunk in the pool */
	IN_PUBLISHED, /* last chunk: the message is committed to local subscribers */
	IN_RELEASED,  /* ring space given back (Head advanced) */
	IN_DROPPED,   /* the message was refused or its link lost: nothing published */
	IN_NUM_STATES
};

static const char *const in_state_names[IN_NUM_STATES] = {
	"landed", "allocated", "copying", "copied", "published", "released", "dropped",
};

struct rt_transport {
	struct rgapsd_remote *rt;
	int idx;
	struct rgaps_loaded_plugin *lp;
	void *ctx;
	struct rgaps_transport_cbs cbs;
	bool usable;
};

enum rt_link_state {
	LINK_NONE,	 /* nothing */
	LINK_OFFERED,	 /* we expect the peer to connect with our token */
	LINK_CONNECTING, /* we connect with the peer's token */
	LINK_UP,
};

struct rt_link {
	enum rt_link_state state;
	struct rgaps_link *link;
	uint8_t token[RGAPS_LINK_TOKEN_LEN];
};

struct rt_peer;
struct rt_topic;

struct rt_omsg {
	struct rt_topic *tt;
	struct rgaps_topic_msg msg;
	uint32_t refs; /* chunks in flight + 1 while queuing */
	bool dropped;
	enum rt_out_state state;
};

/*
 * A chunk of a message whose pool is device memory, copied once (D2H) into a
 * slot of the topic's pinned staging buffer and sent from there to every
 * interested ring (DP1). Chunk k+1 is staged while chunk k is on the wire.
 */
struct rt_stage {
	struct rgapsd_job job; /* worker fallback; job.done is the completion message */
	struct rt_stage *next;
	struct rt_topic *tt;
	struct rt_omsg *m;
	uint64_t off, len;
	uint32_t slot;
	uint32_t refs; /* ring chunks that send from it */
	int status;
	bool ready;
};

struct rt_chunk {
	struct rt_chunk *next;
	struct rt_omsg *m;
	struct rt_stage *stage; /* NULL: sent straight from the (host) pool */
	struct rt_out *o;
	uint64_t off, len;
	uint32_t flags;
	uint32_t hdr_slot;
	bool reserved; /* ring space taken (a post refused for credits keeps it) */
	struct rgaps_ring_slot slot;
};

struct rt_out {
	struct rt_peer *p;
	struct rt_topic *tt;
	struct rt_out *next_in_topic;
	uint32_t id;
	int tr;
	enum { OUT_RING_PREPARING, OUT_RING_READY, OUT_RING_CLOSING } state;
	bool tell_peer; /* send topic_teardown once closed */
	struct rgaps_ring_geom geom;
	struct rgaps_ring_sender ring;
	uint8_t *hdrs;
	void *hdrs_mr;
	uint32_t hdr_head, hdr_used;
	struct rt_chunk *q_head, *q_tail; /* waiting for ring space or credits */
	struct rt_chunk *inflight_head, *inflight_tail;
	uint64_t record_seq;
	uint64_t records, bytes, ring_stalls, credit_stalls, dropped_msgs;
};

struct rt_rec {
	struct rgapsd_job job;
	struct rt_rec *next;
	struct rt_in *in;
	struct rgaps_ring_slot slot;
	struct rgaps_record_hdr h;
	enum rt_in_state state;
	uint32_t loan_token;
	uint64_t loan_off;
	uint32_t gap; /* upstream gap before this message (first chunk) */
	int copy_status;
};

struct rt_in {
	struct rt_peer *p;
	struct rgapsd_topic *topic;
	uint32_t id;
	int tr;
	uint8_t *mem;
	uint64_t size;
	struct rgaps_ring_geom geom;
	struct rgaps_ring_receiver ring;
	uint32_t pub_slot;
	bool pub_open;
	/* landing-order checks */
	uint64_t next_record_seq;
	bool land_in_msg;
	uint64_t land_msg_seq, land_msg_size, land_next_off;
	bool have_last_seq;
	uint64_t last_msg_seq;
	/* processing */
	bool asm_open; /* a loan is open for the message being assembled */
	uint32_t asm_token;
	uint64_t asm_off;
	struct rt_rec *q_head, *q_tail;
	uint32_t jobs; /* records with the worker */
	struct rt_rec *drive_from; /* first record not yet handed to the worker */
	bool blocked;
	bool dead;
	uint32_t pending_gap; /* refused here: reported with the next published message */
	bool pinned;	      /* ring registered with the memory plugin (device pools) */
	bool have_pub_seq;    /* the sender's sequence number of the last message published */
	uint64_t pub_seq;
	uint64_t records, bytes, messages, upstream_gaps, refused, blocked_retries;
};

struct rt_peer {
	struct rgapsd_remote *rt;
	struct rgapsd_peer *peer;
	struct rt_peer *next;
	bool initiator;
	struct rt_link links[TR_NUM];
	char (*subs)[RGAPS_TOPIC_NAME_MAX + 1];
	uint32_t nsubs;
	struct rt_out *out[RT_RINGS];
	struct rt_in *in[RT_RINGS];
	uint32_t next_ring; /* round-robin cursor in our half of the ring ids */
	/* Last sequence number landed per topic, kept across rings and sessions, so
	 * messages lost while a link was down reach subscribers as a gap. */
	struct rt_seen {
		char topic[RGAPS_TOPIC_NAME_MAX + 1];
		uint64_t last_seq;
	} *seen;
	uint32_t nseen;
	/* Receiver: set-ups that arrived before the data link they name (its connect
	 * and the set-up race on two sockets); run when the link comes up. */
	cJSON *deferred[TR_NUM];
	/* Sender: a refused set-up is asked again, with back-off, until it succeeds. */
	uint64_t resetup_at_ns;
	uint32_t resetup_ms;
	uint64_t hostile, link_downs, setup_refusals, setups_deferred;
};

struct rt_waiter {
	struct rt_waiter *next;
	void (*done)(void *arg, int status);
	void *arg;
	uint64_t deadline;
};

struct rt_fwd_msg {
	struct rgapsd_msg m;
	struct rt_topic *tt;
	struct rgaps_topic_msg msg;
};

struct rt_topic {
	struct rgapsd_remote *rt;
	struct rgapsd_topic *t;
	struct rt_topic *next;
	struct rt_out *outs;
	void *pool_mr[TR_NUM];
	struct rt_waiter *waiters;
	/* forwarder */
	pthread_t fwd_thread;
	bool fwd_started;
	uint32_t fwd_stop;
	uint32_t fwd_released; /* futex word: bumped when the loop releases a forwarded hold */
	uint32_t fwd_slot;
	bool fwd_slot_open;
	uint64_t forwarded, skipped_remote, unsent_no_peer, too_large;
	/* staging (device-memory pools only) */
	bool staged;
	uint8_t *stg;
	uint64_t stg_slot, stg_size;
	uint32_t stg_nslots, stg_nfree;
	uint32_t *stg_free;
	bool stg_pinned;
	void *stg_mr[TR_NUM];
	struct rt_stage *stage_head, *stage_tail; /* waiting for a slot */
	uint64_t staged_chunks, staged_bytes;
};

/*
 * Fault injection for the tests (RGAPSD_FAULT=name[:after]): the sender
 * corrupts its N+1-th record in the named way so the receiver's checks can be
 * tested end to end against a real hostile peer. Never set in production.
 */
enum rt_fault {
	FAULT_NONE,
	FAULT_MAGIC,	 /* bad record magic */
	FAULT_OVERSIZE,	 /* msg_size over the topic maximum */
	FAULT_OFFSET,	 /* write at an offset the receiver does not expect */
	FAULT_ORDER,	 /* record_seq skips one */
	FAULT_OUTSIDE,	 /* claim an offset past the end of the ring */
	/* Not a corruption: the receiver handles each accepted data link N ms late, so
	 * a sender's topic set-up surely arrives before the link it names. */
	FAULT_LATE_ACCEPT,
};

struct rt_late_accept { /* FAULT_LATE_ACCEPT: one accepted link, held back */
	uv_timer_t timer;
	struct rt_transport *tr;
	struct rgaps_link *link;
	uint8_t token[RGAPS_LINK_TOKEN_LEN];
};

struct rgapsd_remote {
	struct rgapsd *d;
	enum rt_fault fault;
	uint64_t fault_after;
	struct rt_late_accept *late; /* FAULT_LATE_ACCEPT, while one is held back */
	struct rgapsd_peers *pm;
	struct rt_transport tr[TR_NUM];
	struct rt_peer *peers;
	struct rt_topic *topics;
	struct rgapsd_mailbox mb;
	struct rgapsd_worker worker;
	uv_timer_t tick, retry;
	bool retry_armed;
	uint8_t key[RGAPSD_PEER_KEY_MAX];
	size_t keylen;
	uint64_t out_trans[OUT_NUM_STATES][OUT_NUM_STATES];
	uint64_t in_trans[IN_NUM_STATES][IN_NUM_STATES];
	uint64_t unknown_tokens;
	bool mem_async_missing; /* the memory plugin has no copy_async: use the worker */
};


/* ---------------------------------------------------------------- small helpers */

static void out_set(struct rgapsd_remote *rt, struct rt_omsg *m, enum rt_out_state s)
{
	rt->out_trans[m->state][s]++;
	m->state = s;
}

static void in_set(struct rgapsd_remote *rt, struct rt_rec *r, enum rt_in_state s)
{
	rt->in_trans[r->state][s]++;
	r->state = s;
}

static void to_hex(const uint8_t *b, size_t n, char *out)
{
	static const char hx[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hx[b[i] >> 4];
		out[2 * i + 1] = hx[b[i] & 15];
	}
	out[2 * n] = 0;
}

static int from_hex(const char *s, uint8_t *b, size_t max, size_t *n_p)
{
	size_t n = s ? strlen(s) : 1;

	if (n % 2 || n / 2 > max)
		return -EINVAL;
	for (size_t i = 0; i < n / 2; i++) {
		unsigned v;

		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -EINVAL;
		b[i] = (uint8_t)v;
	}
	*n_p = n / 2;
	return 0;
}

static const char *jstr(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool jnum(const cJSON *o, const char *k, double *v)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);

	if (!cJSON_IsNumber(x))
		return false;
	*v = x->valuedouble;
	return true;
}

static int tr_index(const char *name)
{
	for (int i = 0; name && i < TR_NUM; i++)
		if (strcmp(name, tr_names[i]) == 0)
			return i;
	return -1;
}

static void peer_send_json(struct rt_peer *p, cJSON *o)
{
	char *text = cJSON_PrintUnformatted(o);

	if (text && rgapsd_peer_send(p->peer, text, strlen(text)) != 0)
		rgaps_warn("peer %s: control message dropped (session going down)",
			   rgapsd_peer_name(p->peer));
	free(text);
	cJSON_Delete(o);
}

static cJSON *msg_new(const char *type)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "type", type);
	return o;
}

static struct rt_topic *rt_topic_of(struct rgapsd_remote *rt, struct rgapsd_topic *t, bool create)
{
	struct rt_topic *tt;

	for (tt = rt->topics; tt; tt = tt->next)
		if (tt->t == t)
			return tt;
	if (!create)
		return NULL;
	tt = calloc(1, sizeof(*tt));
	if (!tt)
		return NULL;
	tt->rt = rt;
	tt->t = t;
	tt->next = rt->topics;
	rt->topics = tt;
	return tt;
}

static struct rt_peer *peer_of_link(struct rgapsd_remote *rt, int tr, struct rgaps_link *link)
{
	for (struct rt_peer *p = rt->peers; p; p = p->next)
		if (p->links[tr].link == link && p->links[tr].state != LINK_NONE)
			return p;
	return NULL;
}

static bool peer_subscribes(const struct rt_peer *p, const char *topic)
{
	for (uint32_t i = 0; i < p->nsubs; i++)
		if (strcmp(p->subs[i], topic) == 0)
			return true;
	return false;
}

/* The transport a topic uses towards p: its configured one, or auto = verbs when up. */
static int pick_transport(const struct rt_peer *p, const struct rgaps_topic_config *tc)
{
	int want = tr_index(tc->transport);

	if (want >= 0)
		return p->links[want].state == LINK_UP ? want : -1;
	if (p->links[TR_VERBS].state == LINK_UP)
		return TR_VERBS;
	if (p->links[TR_TCP].state == LINK_UP)
		return TR_TCP;
	return -1;
}

static void hostile(struct rt_peer *p, const char *fmt, ...) RGAPS_PRINTF(2, 3);

/* A peer broke the protocol: log why, drop the session; nothing it sent goes further. */
static void hostile(struct rt_peer *p, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	p->hostile++;
	rgaps_warn("peer %s: %s: disconnecting", rgapsd_peer_name(p->peer), why);
	rgapsd_peer_disconnect(p->peer, why);
}

/* ================================================================ sender half */

static void waiters_check(struct rt_topic *tt, bool force)
{
	bool preparing = false;
	struct rt_waiter **wp = &tt->waiters;

	for (struct rt_out *o = tt->outs; o; o = o->next_in_topic)
		if (o->state == OUT_RING_PREPARING)
			preparing = true;
	while (*wp) {
		struct rt_waiter *w = *wp;
		uint64_t now = rgaps_now_ns(CLOCK_MONOTONIC);

		if (preparing && !force && now < w->deadline) {
			wp = &w->next;
			continue;
		}
		if (preparing)
			rgaps_warn("topic '%s': set-up with every interested peer not finished in %d ms; "
				   "the publisher attaches anyway",
				   tt->t->cfg.name, RT_SETUP_TIMEOUT_MS);
		*wp = w->next;
		w->done(w->arg, 0);
		free(w);
	}
}

static void omsg_put(struct rgapsd_remote *rt, struct rt_omsg *m)
{
	rgaps_require(m->refs > 0);
	if (--m->refs)
		return;
	if (m->state == OUT_QUEUED)
		out_set(rt, m, m->dropped ? OUT_DROPPED : OUT_SENT);
	if (m->tt->fwd_slot_open)
		rgaps_topic_release(&m->tt->t->t, m->tt->fwd_slot, m->msg.token);
	/* A forwarder with every hold in flight sleeps on this word. */
	__atomic_fetch_add(&m->tt->fwd_released, 1, __ATOMIC_SEQ_CST);
	rgaps_futex_wake_all(&m->tt->fwd_released);
	out_set(rt, m, OUT_RELEASED);
	free(m);
}

static void stage_put(struct rt_stage *st);
static void out_pump(struct rt_out *o);

static void chunk_free(struct rgapsd_remote *rt, struct rt_chunk *c, bool dropped)
{
	if (dropped)
		c->m->dropped = true;
	if (c->stage)
		stage_put(c->stage);
	omsg_put(rt, c->m);
	free(c);
}

/* ---------------------------------------------------------------- copies */

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

/*
 * Copy between a pool and host memory off the loop thread: on the memory
 * plugin's own stream (cuda: completion by a stream host function), else on
 * the worker. done runs on the loop either way, in start order.
 */
static void start_copy(struct rgapsd_remote *rt, struct rgaps_loaded_plugin *mem,
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

/* ---------------------------------------------------------------- staging */

static void stage_run(struct rgapsd_job *job)
{
	struct rt_stage *st = RGAPS_CONTAINER_OF(job, struct rt_stage, job);
	struct rgapsd_topic *t = st->tt->t;

	st->status = t->mem->ops.memory.copy(t->mem->ctx, st->tt->stg + st->slot * st->tt->stg_slot,
					     t->t.pool + st->m->msg.off + st->off, st->len,
					     RGAPS_COPY_FROM_POOL);
}

static void stage_done(struct rgapsd_msg *m)
{
	struct rt_stage *st = RGAPS_CONTAINER_OF(m, struct rt_stage, job.done);
	struct rt_topic *tt = st->tt;

	st->ready = true;
	if (st->status) {
		/* Ring space is reserved for it already: restart the sessions, never send garbage. */
		rgaps_error("topic '%s': staging copy failed: %s; restarting its peer sessions",
			    tt->t->cfg.name, strerror(-st->status));
		for (struct rt_out *o = tt->outs; o; o = o->next_in_topic)
			rgapsd_peer_disconnect(o->p->peer, "local staging copy failed");
	} else {
		tt->staged_chunks++;
		tt->staged_bytes += st->len;
		for (struct rt_out *o = tt->outs; o; o = o->next_in_topic)
			out_pump(o);
	}
	stage_put(st); /* the copy's reference */
}

static void stage_pump(struct rt_topic *tt)
{
	while (tt->stage_head && tt->stg_nfree) {
		struct rt_stage *st = tt->stage_head;

		tt->stage_head = st->next;
		if (!tt->stage_head)
			tt->stage_tail = NULL;
		st->slot = tt->stg_free[--tt->stg_nfree];
		st->refs++; /* held by the copy until stage_done */
		st->job.run = stage_run;
		st->job.done.fn = stage_done;
		start_copy(tt->rt, tt->t->mem, &st->job, &st->status,
			   tt->stg + st->slot * tt->stg_slot, tt->t->t.pool + st->m->msg.off + st->off,
			   st->len, RGAPS_COPY_FROM_POOL);
	}
}

static void stage_put(struct rt_stage *st)
{
	struct rt_topic *tt = st->tt;

	if (--st->refs)
		return;
	if (st->slot == UINT32_MAX) {
		/* Never started: take it off the queue. */
		for (struct rt_stage **sp = &tt->stage_head; *sp; sp = &(*sp)->next) {
			if (*sp == st) {
				*sp = st->next;
				break;
			}
		}
		tt->stage_tail = NULL;
		for (struct rt_stage *x = tt->stage_head; x; x = x->next)
			tt->stage_tail = x;
	} else {
		tt->stg_free[tt->stg_nfree++] = st->slot;
	}
	omsg_put(tt->rt, st->m);
	free(st);
	stage_pump(tt);
}

/*
 * Host memory a GPU copies to or from goes on the GPU's NUMA node (issue 4,
 * "placement"): bind, fault in, verify, and say what happened.
 */
static void place_near_device(struct rgapsd_topic *t, void *addr, size_t len, const char *what)
{
	int node = t->mem->ops.memory.numa_node(t->mem->ctx, t->cfg.device);
	unsigned on = 0, n = 0;
	int e;

	if (node < 0) {
		rgaps_info("topic '%s': %s: GPU %d reports no NUMA node (one-node host): no placement "
			   "needed", t->cfg.name, what, t->cfg.device);
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

/* Device-memory pools are staged through a pinned host buffer the transports can read. */
static int staging_setup(struct rt_topic *tt, int tr_idx)
{
	struct rgapsd_topic *t = tt->t;
	struct rt_transport *tr = &tt->rt->tr[tr_idx];
	int e;

	if (!tt->stg) {
		tt->stg_slot = t->cfg.chunking ? t->cfg.chunk_size : t->cfg.max_message_size;
		tt->stg_nslots = (uint32_t)RGAPS_MAX(2, RGAPS_MIN(16, (256ull << 20) / tt->stg_slot));
		tt->stg_size = tt->stg_slot * tt->stg_nslots;
		tt->stg = mmap(NULL, tt->stg_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			       -1, 0);
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
		place_near_device(t, tt->stg, tt->stg_size, "staging buffer");
		e = t->mem->ops.memory.host_register(t->mem->ctx, tt->stg, tt->stg_size);
		tt->stg_pinned = e == 0;
		if (e)
			rgaps_warn("topic '%s': staging buffer not pinned (%s): D2H copies run slower",
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

static void out_pump(struct rt_out *o)
{
	struct rgapsd_remote *rt = o->p->rt;
	struct rt_transport *tr = &rt->tr[o->tr];
	struct rt_link *l = &o->p->links[o->tr];
	bool posted = false;

	if (o->state != OUT_RING_READY || l->state != LINK_UP)
		return;
	while (o->q_head) {
		struct rt_chunk *c = o->q_head;
		struct rgaps_record_hdr *h;
		struct rgaps_sg sg[2];
		uint8_t *pool = o->tt->t->t.pool;
		int r;

		if (o->hdr_used == RT_HDR_SLOTS)
			break;
		if (c->stage && (!c->stage->ready || c->stage->status))
			break; /* D2H of this chunk still running: resumes in stage_done */
		if (!c->reserved) {
			r = rgaps_ring_sender_reserve(&o->ring, RGAPS_RECORD_HDR + c->len, &c->slot);
			if (r == -EAGAIN) {
				o->ring_stalls++; /* resumes on the next head_update */
				break;
			}
			if (r) {
				rgaps_error("topic '%s' ring %u to %s: cannot place a %llu-byte record: %s",
					    o->tt->t->cfg.name, o->id, rgapsd_peer_name(o->p->peer),
					    (unsigned long long)c->len, strerror(-r));
				o->q_head = c->next;
				if (!o->q_head)
					o->q_tail = NULL;
				o->dropped_msgs++;
				chunk_free(rt, c, true);
				continue;
			}
			c->reserved = true;
			c->hdr_slot = (o->hdr_head + o->hdr_used) % RT_HDR_SLOTS;
			h = (struct rgaps_record_hdr *)(o->hdrs + (size_t)c->hdr_slot * RGAPS_RECORD_HDR);
			memset(h, 0, sizeof(*h));
			h->magic = RGAPS_RECORD_MAGIC;
			h->flags = c->flags;
			h->msg_seq = c->m->msg.seq;
			h->msg_size = c->m->msg.size;
			h->chunk_off = c->off;
			h->chunk_len = (uint32_t)c->len;
			h->ring_id = o->id;
			h->ts_ns = c->m->msg.ts_ns;
			h->record_seq = o->record_seq++;
			o->hdr_used++;
			if (rt->fault && rt->fault < FAULT_LATE_ACCEPT &&
			    o->records >= rt->fault_after) {
				rgaps_warn("fault injection: corrupting record %llu to %s",
					   (unsigned long long)h->record_seq,
					   rgapsd_peer_name(o->p->peer));
				switch (rt->fault) {
				case FAULT_MAGIC:
					h->magic ^= 0xff;
					break;
				case FAULT_OVERSIZE:
					h->msg_size = UINT64_MAX / 2;
					break;
				case FAULT_OFFSET:
					c->slot.off = (c->slot.off + 4096) % o->geom.size;
					break;
				case FAULT_ORDER:
					h->record_seq++;
					break;
				case FAULT_OUTSIDE:
					c->slot.off = o->geom.size - 64;
					break;
				case FAULT_NONE:
				case FAULT_LATE_ACCEPT:
					break;
				}
				rt->fault = FAULT_NONE;
			}
		}
		h = (struct rgaps_record_hdr *)(o->hdrs + (size_t)c->hdr_slot * RGAPS_RECORD_HDR);
		sg[0] = (struct rgaps_sg){ .mr = o->hdrs_mr, .addr = h, .len = RGAPS_RECORD_HDR };
		if (c->stage) {
			sg[1] = (struct rgaps_sg){ .mr = o->tt->stg_mr[o->tr],
						   .addr = o->tt->stg + c->stage->slot * o->tt->stg_slot,
						   .len = c->len };
		} else {
			sg[1] = (struct rgaps_sg){ .mr = o->tt->pool_mr[o->tr],
						   .addr = pool + c->m->msg.off + c->off,
						   .len = c->len };
		}
		r = tr->lp->ops.transport.post_record(tr->ctx, l->link, o->id, c->slot.off, sg, 2,
						      (uint64_t)(uintptr_t)c);
		if (r == -EAGAIN) {
			o->credit_stalls++; /* resumes on the next record_sent */
			break;
		}
		if (r == -ENOTCONN)
			break; /* the link is going down: link_down follows */
		if (r) {
			/* The transport refused what we asked: our state is wrong, start over. */
			rgaps_error("topic '%s' ring %u to %s: the transport refused a record: %s; "
				    "restarting the session",
				    o->tt->t->cfg.name, o->id, rgapsd_peer_name(o->p->peer), strerror(-r));
			rgapsd_peer_disconnect(o->p->peer, "transport refused a record");
			break;
		}
		o->q_head = c->next;
		if (!o->q_head)
			o->q_tail = NULL;
		c->next = NULL;
		if (o->inflight_tail)
			o->inflight_tail->next = c;
		else
			o->inflight_head = c;
		o->inflight_tail = c;
		o->records++;
		o->bytes += c->len;
		posted = true;
	}
	if (posted)
		tr->lp->ops.transport.flush(tr->ctx, l->link);
}

static void out_finish(struct rt_out *o);

/*
 * Retire an out ring. Records already posted may still be read by the NIC from
 * the pool: while the link is up, the ring waits in CLOSING until their
 * completions came back, and only then is detached and its holds released.
 * When the link is gone, the transport has completed or failed every record.
 */
static void out_free(struct rt_out *o, bool tell_peer)
{
	struct rgapsd_remote *rt = o->p->rt;
	struct rt_out **op;
	struct rt_chunk *c;

	for (op = &o->tt->outs; *op; op = &(*op)->next_in_topic) {
		if (*op == o) {
			*op = o->next_in_topic;
			break;
		}
	}
	while ((c = o->q_head)) {
		o->q_head = c->next;
		chunk_free(rt, c, true);
	}
	o->q_tail = NULL;
	o->tell_peer = tell_peer;
	o->state = OUT_RING_CLOSING;
	waiters_check(o->tt, false);
	if (o->inflight_head && o->p->links[o->tr].state == LINK_UP)
		return; /* on_record_sent finishes it */
	out_finish(o);
}

static void out_finish(struct rt_out *o)
{
	struct rgapsd_remote *rt = o->p->rt;
	struct rt_transport *tr = &rt->tr[o->tr];
	struct rt_chunk *c;
	bool tell_peer = o->tell_peer;

	o->p->out[o->id] = NULL;
	while ((c = o->inflight_head)) {
		o->inflight_head = c->next;
		chunk_free(rt, c, true);
	}
	if (o->p->links[o->tr].state == LINK_UP) {
		tr->lp->ops.transport.ring_detach(tr->ctx, o->p->links[o->tr].link, o->id);
		if (tell_peer) {
			cJSON *m = msg_new("topic_teardown");

			cJSON_AddNumberToObject(m, "ring_id", o->id);
			peer_send_json(o->p, m);
		}
	}
	if (o->hdrs_mr)
		tr->lp->ops.transport.dereg_local(tr->ctx, o->hdrs_mr);
	free(o->hdrs);
	free(o);
}

static void *forwarder_main(void *arg);

static int forwarder_start(struct rt_topic *tt)
{
	int r;

	if (tt->fwd_started)
		return 0;
	r = rgaps_topic_sub_open(&tt->t->t, 0, getpid(), &tt->fwd_slot);
	if (r) {
		rgaps_error("topic '%s': no subscriber slot for the forwarder: %s",
			    tt->t->cfg.name, strerror(-r));
		return r;
	}
	tt->fwd_slot_open = true;
	r = pthread_create(&tt->fwd_thread, NULL, forwarder_main, tt);
	if (r) {
		rgaps_topic_sub_close(&tt->t->t, tt->fwd_slot);
		tt->fwd_slot_open = false;
		return -r;
	}
	tt->fwd_started = true;
	return 0;
}

static void out_create(struct rt_peer *p, struct rt_topic *tt, int tr_idx)
{
	struct rgapsd_remote *rt = p->rt;
	struct rt_transport *tr = &rt->tr[tr_idx];
	struct rt_link *l = &p->links[tr_idx];
	uint8_t desc[RGAPS_RING_DESC_MAX];
	char hex[2 * RGAPS_RING_DESC_MAX + 1];
	size_t dlen = sizeof(desc);
	struct rt_out *o;
	uint32_t id;
	cJSON *m;
	int r;

	/*
	 * Each direction of a link owns half of the ring ids (the session initiator
	 * sends on 0..63, the other side on 64..127), so a ring id names one ring on
	 * a link whichever end speaks of it; ids go round-robin so a torn-down id is
	 * not reused while a late Head update for it may still be on the wire.
	 */
	{
		uint32_t base = p->initiator ? 0 : RT_RINGS / 2, k;

		for (k = 0; k < RT_RINGS / 2; k++) {
			id = base + (p->next_ring + k) % (RT_RINGS / 2);
			if (!p->out[id])
				break;
		}
		if (k == RT_RINGS / 2)
			id = RT_RINGS;
		else
			p->next_ring = (id - base + 1) % (RT_RINGS / 2);
	}
	if (id == RT_RINGS) {
		rgaps_error("peer %s: all %d rings of this direction in use; topic '%s' not sent there",
			    rgapsd_peer_name(p->peer), RT_RINGS / 2, tt->t->cfg.name);
		return;
	}
	if (tt->t->pool.kind != RGAPS_MEM_HOST) {
		r = staging_setup(tt, tr_idx);
		if (r) {
			rgaps_error("topic '%s': %s cannot use a staging buffer: %s", tt->t->cfg.name,
				    tr_names[tr_idx], strerror(-r));
			return;
		}
	} else if (!tt->pool_mr[tr_idx]) {
		r = tr->lp->ops.transport.reg_local(tr->ctx, tt->t->t.pool, tt->t->pool.size,
						    &tt->pool_mr[tr_idx]);
		if (r) {
			rgaps_error("topic '%s': %s cannot register the pool: %s", tt->t->cfg.name,
				    tr_names[tr_idx], strerror(-r));
			return;
		}
	}
	if (forwarder_start(tt))
		return;
	o = calloc(1, sizeof(*o));
	if (!o)
		return;
	o->p = p;
	o->tt = tt;
	o->id = id;
	o->tr = tr_idx;
	o->state = OUT_RING_PREPARING;
	o->hdrs = aligned_alloc(4096, (size_t)RT_HDR_SLOTS * RGAPS_RECORD_HDR);
	if (!o->hdrs ||
	    tr->lp->ops.transport.reg_local(tr->ctx, o->hdrs, (uint64_t)RT_HDR_SLOTS * RGAPS_RECORD_HDR,
					    &o->hdrs_mr) != 0) {
		rgaps_error("topic '%s': cannot set up header buffers", tt->t->cfg.name);
		free(o->hdrs);
		free(o);
		return;
	}
	r = tr->lp->ops.transport.sender_ring_prepare(tr->ctx, l->link, id, desc, &dlen);
	if (r) {
		rgaps_error("topic '%s': %s ring prepare failed: %s", tt->t->cfg.name,
			    tr_names[tr_idx], strerror(-r));
		tr->lp->ops.transport.dereg_local(tr->ctx, o->hdrs_mr);
		free(o->hdrs);
		free(o);
		return;
	}
	p->out[id] = o;
	o->next_in_topic = tt->outs;
	tt->outs = o;
	to_hex(desc, dlen, hex);
	m = msg_new("topic_setup");
	cJSON_AddStringToObject(m, "topic", tt->t->cfg.name);
	cJSON_AddNumberToObject(m, "ring_id", id);
	cJSON_AddStringToObject(m, "transport", tr_names[tr_idx]);
	cJSON_AddStringToObject(m, "head_desc", hex);
	cJSON_AddNumberToObject(m, "chunk_size", (double)tt->t->cfg.chunk_size);
	peer_send_json(p, m);
	rgaps_info("topic '%s': setting up ring %u to %s over %s", tt->t->cfg.name, id,
		   rgapsd_peer_name(p->peer), tr_names[tr_idx]);
}

static bool topic_is_source(const struct rgapsd_topic *t)
{
	return t->publishers_seen;
}

/* Make the out rings of one topic match who subscribes to it. */
static void reconcile_topic(struct rgapsd_remote *rt, struct rgapsd_topic *t)
{
	struct rt_topic *tt;

	if (!topic_is_source(t))
		return;
	tt = rt_topic_of(rt, t, true);
	if (!tt)
		return;
	for (struct rt_peer *p = rt->peers; p; p = p->next) {
		struct rt_out *have = NULL;
		bool want = rgapsd_peer_is_up(p->peer) && peer_subscribes(p, t->cfg.name);
		int tr;

		for (struct rt_out *o = tt->outs; o; o = o->next_in_topic)
			if (o->p == p)
				have = o;
		if (have && !want)
			out_free(have, rgapsd_peer_is_up(p->peer));
		if (have || !want)
			continue;
		tr = pick_transport(p, &t->cfg);
		if (tr >= 0)
			out_create(p, tt, tr);
	}
	waiters_check(tt, false);
}

static void reconcile_all(struct rgapsd_remote *rt)
{
	for (struct rgapsd_topic *t = rt->d->topics; t; t = t->next)
		reconcile_topic(rt, t);
}

/* A locally published message reached the loop from the forwarder thread. */
static void on_forwarded(struct rgapsd_msg *mm)
{
	struct rt_fwd_msg *f = RGAPS_CONTAINER_OF(mm, struct rt_fwd_msg, m);
	struct rt_topic *tt = f->tt;
	struct rgapsd_remote *rt = tt->rt;
	struct rt_omsg *m = calloc(1, sizeof(*m));
	uint64_t chunk = tt->t->cfg.chunking ? tt->t->cfg.chunk_size : f->msg.size;
	struct rt_stage **stages = NULL;
	uint64_t nstages = 0;
	uint32_t rings = 0;

	if (!m) {
		rgaps_topic_release(&tt->t->t, tt->fwd_slot, f->msg.token);
		free(f);
		return;
	}
	m->tt = tt;
	m->msg = f->msg;
	m->refs = 1;
	m->state = OUT_TAKEN;
	rt->out_trans[OUT_TAKEN][OUT_TAKEN]++;
	free(f);
	tt->forwarded++;
	for (struct rt_out *o = tt->outs; o; o = o->next_in_topic) {
		if (RGAPS_RECORD_HDR + RGAPS_MIN(chunk, m->msg.size) > o->geom.max_record &&
		    o->state == OUT_RING_READY) {
			/* Whole-message mode with a message over half the ring. */
			tt->too_large++;
			o->dropped_msgs++;
			m->dropped = true;
			continue;
		}
		for (uint64_t off = 0, k = 0; off < m->msg.size; off += chunk, k++) {
			struct rt_chunk *c = calloc(1, sizeof(*c));

			if (!c) {
				m->dropped = true;
				break;
			}
			if (tt->staged) {
				/* One D2H per chunk, shared by every ring that sends it. */
				if (k >= nstages) {
					struct rt_stage **ns = realloc(stages, (k + 1) * sizeof(*ns));

					if (!ns) {
						free(c);
						m->dropped = true;
						break;
					}
					stages = ns;
					stages[k] = calloc(1, sizeof(**stages));
					if (!stages[k]) {
						free(c);
						m->dropped = true;
						break;
					}
					stages[k]->tt = tt;
					stages[k]->m = m;
					stages[k]->off = off;
					stages[k]->len = RGAPS_MIN(chunk, m->msg.size - off);
					stages[k]->slot = UINT32_MAX;
					m->refs++;
					nstages = k + 1;
				}
				c->stage = stages[k];
				c->stage->refs++;
			}
			c->m = m;
			c->o = o;
			c->off = off;
			c->len = RGAPS_MIN(chunk, m->msg.size - off);
			c->flags = (off == 0 ? RGAPS_RECORD_FIRST : 0) |
				   (off + c->len == m->msg.size ? RGAPS_RECORD_LAST : 0);
			m->refs++;
			if (o->q_tail)
				o->q_tail->next = c;
			else
				o->q_head = c;
			o->q_tail = c;
		}
		rings++;
	}
	if (!rings)
		tt->unsent_no_peer++;
	for (uint64_t k = 0; k < nstages; k++) {
		struct rt_stage *st = stages[k];

		if (!st->refs) { /* no ring took it (allocation failure) */
			omsg_put(rt, m);
			free(st);
			continue;
		}
		if (tt->stage_tail)
			tt->stage_tail->next = st;
		else
			tt->stage_head = st;
		tt->stage_tail = st;
	}
	free(stages);
	stage_pump(tt);
	out_set(rt, m, OUT_QUEUED);
	for (struct rt_out *o = tt->outs; o; o = o->next_in_topic)
		out_pump(o);
	omsg_put(rt, m);
}

/*
 * One per topic that has interested peers: a subscriber of the topic like any
 * other, so back-pressure and drop policies apply to the remote path too.
 * Messages that came from a peer are not forwarded again.
 */
static void *forwarder_main(void *arg)
{
	struct rt_topic *tt = arg;
	struct rgapsd_remote *rt = tt->rt;
	char name[16];

	snprintf(name, sizeof(name), "fwd-%.11s", tt->t->cfg.name);
	pthread_setname_np(pthread_self(), name);
	while (!__atomic_load_n(&tt->fwd_stop, __ATOMIC_ACQUIRE)) {
		uint32_t released = __atomic_load_n(&tt->fwd_released, __ATOMIC_SEQ_CST);
		struct rgaps_topic_msg msg;
		struct rt_fwd_msg *f;
		int r = rgaps_topic_take(&tt->t->t, tt->fwd_slot, 200, 0, NULL, NULL, &msg);

		if (r == -ETIMEDOUT || r == -EAGAIN || r == -EINTR)
			continue;
		if (r == -ENOBUFS) {
			/* Every hold is in flight to peers: sleep until the loop releases one
			 * (read before the take, so a release in between is not missed). */
			rgaps_futex_wait(&tt->fwd_released, released, 200ll * 1000 * 1000);
			continue;
		}
		if (r)
			break;
		if (msg.flags & RGAPS_ENTRY_REMOTE) {
			rgaps_topic_release(&tt->t->t, tt->fwd_slot, msg.token);
			__atomic_fetch_add(&tt->skipped_remote, 1, __ATOMIC_RELAXED);
			continue;
		}
		f = calloc(1, sizeof(*f));
		if (!f) {
			rgaps_topic_release(&tt->t->t, tt->fwd_slot, msg.token);
			continue;
		}
		f->m.fn = on_forwarded;
		f->tt = tt;
		f->msg = msg;
		rgapsd_mailbox_post(&rt->mb, &f->m);
	}
	return NULL;
}

/* ================================================================ receiver half */

static void in_free(struct rt_in *in);
static void in_drive(struct rt_in *in);

static void arm_retry(struct rgapsd_remote *rt);

static void copy_run(struct rgapsd_job *job)
{
	struct rt_rec *r = RGAPS_CONTAINER_OF(job, struct rt_rec, job);
	struct rt_in *in = r->in;
	struct rgaps_loaded_plugin *mem = in->topic->mem;

	r->copy_status = mem->ops.memory.copy(mem->ctx,
					      in->topic->t.pool + r->loan_off + r->h.chunk_off,
					      in->mem + r->slot.off + RGAPS_RECORD_HDR, r->h.chunk_len,
					      RGAPS_COPY_TO_POOL);
}

static void copy_done(struct rgapsd_msg *m)
{
	struct rt_rec *r = RGAPS_CONTAINER_OF(m, struct rt_rec, job.done);
	struct rt_in *in = r->in;

	in->jobs--;
	in_set(in->p->rt, r, IN_COPIED);
	if (in->dead) {
		if (!in->jobs)
			in_free(in);
		return;
	}
	if (r->copy_status) {
		/* Our own memory failed us: the message cannot be trusted; restart the session. */
		rgaps_error("topic '%s': copy into the pool failed: %s; dropping the session with %s",
			    in->topic->cfg.name, strerror(-r->copy_status),
			    rgapsd_peer_name(in->p->peer));
		rgapsd_peer_disconnect(in->p->peer, "local copy into the pool failed");
		return;
	}
	in_drive(in);
}

static void drop_assembly(struct rt_in *in)
{
	if (in->asm_open) {
		rgaps_topic_cancel(&in->topic->t, in->pub_slot, in->asm_token);
		in->asm_open = false;
	}
}

/*
 * The receiver's driver: walk the records in landing order. Allocation and
 * copies may run ahead (chunk k copies while k+1 lands and k+2 is on the
 * wire); publication and ring release happen strictly in order at the head.
 */
static void in_drive(struct rt_in *in)
{
	struct rgapsd_remote *rt = in->p->rt;
	struct rt_transport *tr = &rt->tr[in->tr];
	struct rt_link *l = &in->p->links[in->tr];
	bool released = false, progress;
	uint64_t head;

again:
	progress = false;
	in->blocked = false;
	for (struct rt_rec *r = in->drive_from; r; r = r->next) {
		enum rt_in_state prev;
		bool stop = false;

		do {
			prev = r->state;
			switch (r->state) {
			case IN_LANDED:
				if (r->h.flags & RGAPS_RECORD_FIRST) {
					uint32_t tok;
					uint64_t off;
					int e;

					drop_assembly(in); /* defensive: checked at landing */
					e = rgaps_topic_loan(&in->topic->t, in->pub_slot,
							     r->h.msg_size, 0, NULL, NULL, &tok, &off);
					if (e == -EAGAIN || e == -ENOBUFS) {
						/* Pool full under "block", or every loan of our slot
						 * is still being assembled: keep the ring full too;
						 * the sender stalls, its publishers feel it. */
						in->blocked = true;
						in->blocked_retries++;
						stop = true;
						break;
					}
					if (e) {
						rgaps_warn("topic '%s': message of %llu bytes from %s "
							   "refused: %s",
							   in->topic->cfg.name,
							   (unsigned long long)r->h.msg_size,
							   rgapsd_peer_name(in->p->peer), strerror(-e));
						in->refused++;
						in->topic->refused_msgs++;
						in->pending_gap += 1 + r->gap; /* nothing lost silently */
						in_set(rt, r, IN_DROPPED);
						break;
					}
					in->asm_open = true;
					in->asm_token = tok;
					in->asm_off = off;
				}
				if (!in->asm_open) {
					in_set(rt, r, IN_DROPPED); /* rest of a refused message */
					break;
				}
				r->loan_token = in->asm_token;
				r->loan_off = in->asm_off;
				if (r->h.flags & RGAPS_RECORD_LAST)
					in->asm_open = false; /* the record now owns the loan */
				in_set(rt, r, IN_ALLOCATED);
				break;
			case IN_ALLOCATED:
				in_set(rt, r, IN_COPYING);
				in->jobs++;
				r->job.run = copy_run;
				r->job.done.fn = copy_done;
				start_copy(rt, in->topic->mem, &r->job, &r->copy_status,
					   in->topic->t.pool + r->loan_off + r->h.chunk_off,
					   in->mem + r->slot.off + RGAPS_RECORD_HDR, r->h.chunk_len,
					   RGAPS_COPY_TO_POOL);
				break;
			case IN_COPYING: /* async: copy_done moves it on */
			case IN_COPIED:
			case IN_PUBLISHED:
			case IN_RELEASED:
			case IN_DROPPED:
			case IN_NUM_STATES:
				break;
			}
		} while (r->state != prev && !stop);
		if (stop)
			break;
		in->drive_from = r->next; /* r is with the worker, or dropped */
	}

	/* In order at the head: publish last chunks, give ring space back. */
	while (in->q_head) {
		struct rt_rec *r = in->q_head;

		if (r->state == IN_COPIED && (r->h.flags & RGAPS_RECORD_LAST)) {
			int e = rgaps_topic_commit_remote(&in->topic->t, in->pub_slot, r->loan_token,
							  r->h.msg_size, r->h.ts_ns,
							  r->gap + in->pending_gap, NULL);

			if (e == -EAGAIN) {
				in->blocked = true; /* queue full under "block": retry */
				in->blocked_retries++;
				break;
			}
			if (e) {
				rgaps_warn("topic '%s': publish failed: %s", in->topic->cfg.name,
					   strerror(-e));
				in_set(rt, r, IN_DROPPED);
			} else {
				in->messages++;
				in->have_pub_seq = true;
				in->pub_seq = r->h.msg_seq;
				in->topic->landed_msgs++;
				in->topic->landed_bytes += r->h.msg_size;
				in->pending_gap = 0;
				in_set(rt, r, IN_PUBLISHED);
			}
		}
		if (r->state != IN_COPIED && r->state != IN_PUBLISHED && r->state != IN_DROPPED)
			break;
		rgaps_ring_receiver_consume(&in->ring, &r->slot);
		in_set(rt, r, IN_RELEASED);
		released = true;
		progress = true;
		in->q_head = r->next;
		if (!in->q_head)
			in->q_tail = NULL;
		free(r);
	}
	/* A publish returned loans: records that waited for one may go on now. */
	if (in->blocked && progress)
		goto again;
	if (released && l->link && rgaps_ring_receiver_should_report(&in->ring, &head)) {
		if (tr->lp->ops.transport.post_head(tr->ctx, l->link, in->id, head) == 0) {
			rgaps_ring_receiver_reported(&in->ring, head);
			tr->lp->ops.transport.flush(tr->ctx, l->link);
		}
	}
	if (in->blocked)
		arm_retry(rt);
}

static struct rt_seen *seen_of(struct rt_peer *p, const char *topic, bool create)
{
	struct rt_seen *n;

	for (uint32_t i = 0; i < p->nseen; i++)
		if (strcmp(p->seen[i].topic, topic) == 0)
			return &p->seen[i];
	if (!create)
		return NULL;
	n = realloc(p->seen, (p->nseen + 1) * sizeof(*n));
	if (!n)
		return NULL;
	p->seen = n;
	n = &p->seen[p->nseen++];
	snprintf(n->topic, sizeof(n->topic), "%s", topic);
	n->last_seq = 0;
	return n;
}

static void in_free(struct rt_in *in)
{
	struct rgapsd_remote *rt = in->p->rt;
	struct rt_rec *r;

	if (in->have_pub_seq && !in->dead) {
		struct rt_seen *sn = seen_of(in->p, in->topic->cfg.name, true);

		if (sn)
			sn->last_seq = in->pub_seq;
	}

	in->dead = true;
	if (in->p->in[in->id] == in)
		in->p->in[in->id] = NULL;
	if (in->jobs)
		return; /* copy_done finishes the job */
	while ((r = in->q_head)) {
		in->q_head = r->next;
		/* Copied chunks of an unfinished message own its loan: give it back once. */
		if ((r->h.flags & RGAPS_RECORD_LAST) &&
		    (r->state == IN_ALLOCATED || r->state == IN_COPIED))
			rgaps_topic_cancel(&in->topic->t, in->pub_slot, r->loan_token);
		in_set(rt, r, IN_DROPPED);
		free(r);
	}
	drop_assembly(in);
	if (in->pub_open)
		rgaps_topic_pub_close(&in->topic->t, in->pub_slot);
	if (in->pinned)
		in->topic->mem->ops.memory.host_unregister(in->topic->mem->ctx, in->mem);
	if (in->mem)
		munmap(in->mem, in->size);
	free(in);
}

static void in_teardown(struct rt_in *in)
{
	struct rgapsd_remote *rt = in->p->rt;
	struct rt_link *l = &in->p->links[in->tr];

	if (l->link) /* up, or (receiver rings only) still connecting: see do_topic_setup */
		rt->tr[in->tr].lp->ops.transport.ring_detach(rt->tr[in->tr].ctx, l->link, in->id);
	in_free(in);
}

static void on_record_landed(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t off,
			     uint64_t len)
{
	struct rt_transport *tr = arg;
	struct rgapsd_remote *rt = tr->rt;
	struct rt_peer *p = peer_of_link(rt, tr->idx, link);
	struct rgaps_ring_slot slot;
	struct rgaps_record_hdr h;
	struct rt_in *in;
	struct rt_rec *r;
	uint64_t need;
	int e;

	if (!p)
		return;
	in = ring_id < RT_RINGS ? p->in[ring_id] : NULL;
	if (!in || in->tr != tr->idx) {
		hostile(p, "record for ring %u, which was never set up", ring_id);
		return;
	}
	if (off != UINT64_MAX) {
		e = rgaps_ring_receiver_verify(&in->ring, off, len);
		if (e) {
			hostile(p, "ring %u: record of %llu bytes at %llu, expected elsewhere", ring_id,
				(unsigned long long)len, (unsigned long long)off);
			return;
		}
	}
	e = rgaps_ring_receiver_land(&in->ring, len, &slot);
	if (e) {
		hostile(p, "ring %u: a %llu-byte record cannot be where the sender put it (%s)",
			ring_id, (unsigned long long)len, strerror(-e));
		return;
	}
	if (len < RGAPS_RECORD_HDR) {
		hostile(p, "ring %u: record of %llu bytes has no header", ring_id,
			(unsigned long long)len);
		return;
	}
	memcpy(&h, in->mem + slot.off, sizeof(h));
	need = RGAPS_RECORD_HDR + (uint64_t)h.chunk_len;
	if (h.magic != RGAPS_RECORD_MAGIC || h.ring_id != ring_id) {
		hostile(p, "ring %u: bad record header", ring_id);
		return;
	}
	if (h.record_seq != in->next_record_seq) {
		hostile(p, "ring %u: record %llu arrived, %llu expected", ring_id,
			(unsigned long long)h.record_seq,
			(unsigned long long)in->next_record_seq);
		return;
	}
	if (need > len || RGAPS_ALIGN_UP(need, 64) != RGAPS_ALIGN_UP(len, 64)) {
		hostile(p, "ring %u: chunk of %u bytes in a %llu-byte record", ring_id,
			h.chunk_len, (unsigned long long)len);
		return;
	}
	if (h.msg_size == 0 || h.chunk_len == 0 || h.chunk_off > h.msg_size ||
	    h.chunk_len > h.msg_size - h.chunk_off) {
		hostile(p, "ring %u: chunk [%llu, +%u) outside a %llu-byte message", ring_id,
			(unsigned long long)h.chunk_off, h.chunk_len,
			(unsigned long long)h.msg_size);
		return;
	}
	if (h.msg_size > in->topic->cfg.max_message_size) {
		hostile(p, "ring %u: message of %llu bytes over topic '%s' maximum %llu",
			ring_id, (unsigned long long)h.msg_size, in->topic->cfg.name,
			(unsigned long long)in->topic->cfg.max_message_size);
		return;
	}
	if (h.flags & RGAPS_RECORD_FIRST) {
		if (in->land_in_msg || h.chunk_off != 0) {
			hostile(p, "ring %u: a message starts before the last one ended",
				ring_id);
			return;
		}
	} else if (!in->land_in_msg || h.msg_seq != in->land_msg_seq ||
		   h.msg_size != in->land_msg_size || h.chunk_off != in->land_next_off) {
		hostile(p, "ring %u: chunk out of order", ring_id);
		return;
	}
	if ((h.flags & RGAPS_RECORD_LAST) != 0 && h.chunk_off + h.chunk_len != h.msg_size) {
		hostile(p, "ring %u: last chunk ends before the message", ring_id);
		return;
	}
	if (!(h.flags & RGAPS_RECORD_LAST) && h.chunk_off + h.chunk_len == h.msg_size) {
		hostile(p, "ring %u: message complete without a last chunk", ring_id);
		return;
	}

	r = calloc(1, sizeof(*r));
	if (!r) {
		hostile(p, "out of memory");
		return;
	}
	r->in = in;
	r->slot = slot;
	r->h = h;
	r->state = IN_LANDED;
	r->loan_token = UINT32_MAX;
	rt->in_trans[IN_LANDED][IN_LANDED]++;
	if (h.flags & RGAPS_RECORD_FIRST) {
		if (in->have_last_seq && h.msg_seq > in->last_msg_seq + 1) {
			r->gap = (uint32_t)RGAPS_MIN(h.msg_seq - in->last_msg_seq - 1, UINT32_MAX);
			in->upstream_gaps += r->gap;
			in->topic->landed_gaps += r->gap; /* outlives the ring, for stats */
		} else if (in->have_last_seq && h.msg_seq <= in->last_msg_seq) {
			/* The sender's topic started over (its daemon restarted): no gap to count. */
			rgaps_info("topic '%s': %s restarted its sequence at %llu", in->topic->cfg.name,
				   rgapsd_peer_name(p->peer), (unsigned long long)h.msg_seq);
		}
		in->have_last_seq = true;
		in->last_msg_seq = h.msg_seq;
	}
	in->next_record_seq++;
	in->land_in_msg = !(h.flags & RGAPS_RECORD_LAST);
	in->land_msg_seq = h.msg_seq;
	in->land_msg_size = h.msg_size;
	in->land_next_off = h.chunk_off + h.chunk_len;
	in->records++;
	in->bytes += h.chunk_len;
	if (in->q_tail)
		in->q_tail->next = r;
	else
		in->q_head = r;
	in->q_tail = r;
	if (!in->drive_from)
		in->drive_from = r;
	in_drive(in);
}

static void on_retry(uv_timer_t *t)
{
	struct rgapsd_remote *rt = t->data;

	rt->retry_armed = false;
	for (struct rt_peer *p = rt->peers; p; p = p->next)
		for (uint32_t i = 0; i < RT_RINGS; i++)
			if (p->in[i] && p->in[i]->blocked)
				in_drive(p->in[i]);
}

static void arm_retry(struct rgapsd_remote *rt)
{
	if (rt->retry_armed)
		return;
	rt->retry_armed = true;
	uv_timer_start(&rt->retry, on_retry, RT_RETRY_MS, 0);
}

/* ================================================================ transport callbacks */

static void on_record_sent(void *arg, struct rgaps_link *link, uint64_t cookie, int status)
{
	struct rt_transport *tr = arg;
	struct rt_chunk *c = (struct rt_chunk *)(uintptr_t)cookie;
	struct rt_out *o = c->o;

	/* Completions come in posting order per ring. */
	rgaps_require(o->inflight_head == c);
	o->inflight_head = c->next;
	if (!o->inflight_head)
		o->inflight_tail = NULL;
	o->hdr_head = (o->hdr_head + 1) % RT_HDR_SLOTS;
	o->hdr_used--;
	chunk_free(tr->rt, c, status != 0);
	if (o->state == OUT_RING_CLOSING) {
		if (!o->inflight_head)
			out_finish(o);
		return;
	}
	out_pump(o);
}

static void on_head_update(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t head)
{
	struct rt_transport *tr = arg;
	struct rt_peer *p = peer_of_link(tr->rt, tr->idx, link);
	struct rt_out *o;

	if (!p)
		return;
	o = ring_id < RT_RINGS ? p->out[ring_id] : NULL;
	if (o && o->state == OUT_RING_CLOSING)
		return; /* late, harmless */
	if (!o || o->state != OUT_RING_READY) {
		hostile(p, "Head update for ring %u, which is not ours", ring_id);
		return;
	}
	if (rgaps_ring_sender_update_dhead(&o->ring, head) != 0) {
		hostile(p, "ring %u: Head %llu goes backwards or past Tail", ring_id,
			(unsigned long long)head);
		return;
	}
	out_pump(o);
}

static void link_lost(struct rt_peer *p, int tr_idx)
{
	struct rt_link *l = &p->links[tr_idx];

	/* Rings over this link go first (the transport already dropped the link). */
	l->state = LINK_NONE;
	l->link = NULL;
	cJSON_Delete(p->deferred[tr_idx]); /* their sender drops its rings over this link too */
	p->deferred[tr_idx] = NULL;
	for (uint32_t i = 0; i < RT_RINGS; i++) {
		if (p->out[i] && p->out[i]->tr == tr_idx)
			out_free(p->out[i], false);
		if (p->in[i] && p->in[i]->tr == tr_idx)
			in_free(p->in[i]);
	}
}

static void on_link_down(void *arg, struct rgaps_link *link, int err, const char *why)
{
	struct rt_transport *tr = arg;
	struct rt_peer *p = peer_of_link(tr->rt, tr->idx, link);

	if (!p)
		return;
	p->link_downs++;
	rgaps_warn("peer %s: %s data link down: %s", rgapsd_peer_name(p->peer), tr_names[tr->idx],
		   why);
	link_lost(p, tr->idx);
	reconcile_all(tr->rt); /* another transport may still carry the topics */
}

static void do_topic_setup(struct rgapsd_remote *rt, struct rt_peer *p, const cJSON *m);

/* The data link that deferred set-ups wait for is up: answer them in arrival order. */
static void run_deferred(struct rgapsd_remote *rt, struct rt_peer *p, int tr_idx)
{
	cJSON *list = p->deferred[tr_idx], *m;

	p->deferred[tr_idx] = NULL;
	cJSON_ArrayForEach(m, list)
	{
		if (p->links[tr_idx].state != LINK_UP)
			break; /* the peer went away meanwhile: its sender forgot these rings */
		do_topic_setup(rt, p, m);
	}
	cJSON_Delete(list);
}

static void link_accepted(struct rt_transport *tr, struct rgaps_link *link,
			  const uint8_t token[RGAPS_LINK_TOKEN_LEN]);

static void on_late_accept_closed(uv_handle_t *h)
{
	free(h->data);
}

static void on_late_accept(uv_timer_t *t)
{
	struct rt_late_accept *la = t->data;

	la->tr->rt->late = NULL;
	link_accepted(la->tr, la->link, la->token);
	uv_close((uv_handle_t *)&la->timer, on_late_accept_closed);
}

static void on_link_accepted(void *arg, struct rgaps_link *link,
			     const uint8_t token[RGAPS_LINK_TOKEN_LEN])
{
	struct rt_transport *tr = arg;
	struct rgapsd_remote *rt = tr->rt;
	struct rt_late_accept *la;

	if (rt->fault == FAULT_LATE_ACCEPT && !rt->late && (la = calloc(1, sizeof(*la)))) {
		rgaps_warn("fault injection: %s data link accepted, handled in %llu ms",
			   tr_names[tr->idx], (unsigned long long)rt->fault_after);
		la->tr = tr;
		la->link = link;
		memcpy(la->token, token, sizeof(la->token));
		uv_timer_init(rt->d->loop, &la->timer);
		la->timer.data = la;
		uv_timer_start(&la->timer, on_late_accept, rt->fault_after, 0);
		rt->late = la;
		return;
	}
	link_accepted(tr, link, token);
}

static void link_accepted(struct rt_transport *tr, struct rgaps_link *link,
			  const uint8_t token[RGAPS_LINK_TOKEN_LEN])
{
	for (struct rt_peer *p = tr->rt->peers; p; p = p->next) {
		struct rt_link *l = &p->links[tr->idx];

		if (l->state == LINK_OFFERED &&
		    sodium_memcmp(l->token, token, RGAPS_LINK_TOKEN_LEN) == 0) {
			l->link = link;
			l->state = LINK_UP;
			rgaps_info("peer %s: %s data link up (accepted)", rgapsd_peer_name(p->peer),
				   tr_names[tr->idx]);
			run_deferred(tr->rt, p, tr->idx);
			reconcile_all(tr->rt);
			return;
		}
	}
	tr->rt->unknown_tokens++;
	rgaps_warn("%s: data link with an unknown token refused", tr_names[tr->idx]);
	tr->lp->ops.transport.close(tr->ctx, link);
}

static void on_link_connected(void *arg, struct rgaps_link *link, int status)
{
	struct rt_transport *tr = arg;
	struct rt_peer *p = peer_of_link(tr->rt, tr->idx, link);

	if (!p)
		return;
	if (status) {
		rgaps_warn("peer %s: %s data link failed: %s (retrying)", rgapsd_peer_name(p->peer),
			   tr_names[tr->idx], strerror(-status));
		link_lost(p, tr->idx); /* and the rings attached while it was connecting */
		return;
	}
	p->links[tr->idx].state = LINK_UP;
	rgaps_info("peer %s: %s data link up (connected)", rgapsd_peer_name(p->peer),
		   tr_names[tr->idx]);
	reconcile_all(tr->rt);
}

/* ================================================================ peer control messages */

static void send_subs(struct rgapsd_remote *rt, struct rt_peer *p)
{
	cJSON *m = msg_new("subs"), *arr = cJSON_AddArrayToObject(m, "topics");

	for (struct rgapsd_topic *t = rt->d->topics; t; t = t->next)
		if (t->local_subs)
			cJSON_AddItemToArray(arr, cJSON_CreateString(t->cfg.name));
	peer_send_json(p, m);
}

static void offer_links(struct rgapsd_remote *rt, struct rt_peer *p)
{
	if (!p->initiator || !rgapsd_peer_is_up(p->peer))
		return;
	for (int i = 0; i < TR_NUM; i++) {
		struct rt_link *l = &p->links[i];
		char hex[2 * RGAPS_LINK_TOKEN_LEN + 1];
		cJSON *m;

		if (!rt->tr[i].usable || l->state != LINK_NONE)
			continue;
		randombytes_buf(l->token, sizeof(l->token));
		to_hex(l->token, sizeof(l->token), hex);
		l->state = LINK_OFFERED; /* until the peer accepts: then we connect */
		m = msg_new("link_offer");
		cJSON_AddStringToObject(m, "transport", tr_names[i]);
		cJSON_AddStringToObject(m, "token", hex);
		peer_send_json(p, m);
	}
}

static void do_link_offer(struct rgapsd_remote *rt, struct rt_peer *p, const cJSON *m)
{
	int i = tr_index(jstr(m, "transport"));
	size_t n = 0;
	cJSON *r;

	if (i < 0 || from_hex(jstr(m, "token"), p->links[i].token, RGAPS_LINK_TOKEN_LEN, &n) ||
	    n != RGAPS_LINK_TOKEN_LEN) {
		hostile(p, "bad link_offer");
		return;
	}
	r = msg_new(rt->tr[i].usable ? "link_accept" : "link_refuse");
	cJSON_AddStringToObject(r, "transport", tr_names[i]);
	if (rt->tr[i].usable) {
		if (p->links[i].state != LINK_NONE)
			link_lost(p, i); /* a new offer replaces the old link and what waited for it */
		p->links[i].state = LINK_OFFERED;
		p->links[i].link = NULL;
	}
	peer_send_json(p, r);
}

static void do_link_accept(struct rgapsd_remote *rt, struct rt_peer *p, const cJSON *m)
{
	int i = tr_index(jstr(m, "transport"));
	char host[256];
	uint16_t port;
	struct rgaps_link *link = NULL;
	int e;

	if (i < 0 || p->links[i].state != LINK_OFFERED) {
		hostile(p, "unexpected link_accept");
		return;
	}
	if (rgapsd_parse_hostport(rgapsd_peer_name(p->peer), host, sizeof(host), &port) != 0)
		return;
	e = rt->tr[i].lp->ops.transport.connect(rt->tr[i].ctx, host,
						 (uint16_t)(port + tr_port_offset[i]),
						 p->links[i].token, &link);
	if (e) {
		rgaps_warn("peer %s: %s connect failed: %s", rgapsd_peer_name(p->peer), tr_names[i],
			   strerror(-e));
		p->links[i].state = LINK_NONE;
		return;
	}
	p->links[i].link = link;
	p->links[i].state = LINK_CONNECTING;
}

static void do_subs(struct rgapsd_remote *rt, struct rt_peer *p, const cJSON *m)
{
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(m, "topics"), *it;
	uint32_t n = 0;

	if (!cJSON_IsArray(arr)) {
		hostile(p, "bad subs message");
		return;
	}
	free(p->subs);
	p->subs = calloc((size_t)cJSON_GetArraySize(arr) + 1, sizeof(*p->subs));
	p->nsubs = 0;
	cJSON_ArrayForEach(it, arr)
	{
		if (!cJSON_IsString(it) || !rgaps_topic_name_valid(it->valuestring)) {
			hostile(p, "bad topic name in subs");
			return;
		}
		snprintf(p->subs[n++], sizeof(p->subs[0]), "%s", it->valuestring);
	}
	p->nsubs = n;
	reconcile_all(rt);
}

static void refuse_setup(struct rt_peer *p, double ring_id, const char *fmt, ...)
	RGAPS_PRINTF(3, 4);

static void refuse_setup(struct rt_peer *p, double ring_id, const char *fmt, ...)
{
	char why[512];
	va_list ap;
	cJSON *r = msg_new("topic_refused");

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	rgaps_warn("peer %s: topic set-up refused: %s", rgapsd_peer_name(p->peer), why);
	cJSON_AddNumberToObject(r, "ring_id", ring_id);
	cJSON_AddStringToObject(r, "reason", why);
	peer_send_json(p, r);
}

/* Receiver side of the topic initialisation sequence (DESIGN.md section 7). */
static void do_topic_setup(struct rgapsd_remote *rt, struct rt_peer *p, const cJSON *m)
{
	const char *name = jstr(m, "topic");
	int i = tr_index(jstr(m, "transport"));
	uint8_t peer_desc[RGAPS_RING_DESC_MAX], desc[RGAPS_RING_DESC_MAX];
	char hex[2 * RGAPS_RING_DESC_MAX + 1], err[512];
	size_t pdlen = 0, dlen = sizeof(desc);
	struct rt_transport *tr;
	struct rgapsd_topic *t;
	struct rt_in *in;
	double id;
	cJSON *r;
	int e;

	if (!name || !rgaps_topic_name_valid(name) || i < 0 || !jnum(m, "ring_id", &id) || id < 0 ||
	    id >= RT_RINGS || id != (uint32_t)id ||
	    (id < RT_RINGS / 2) == p->initiator /* the sender's half is the other one */ ||
	    from_hex(jstr(m, "head_desc"), peer_desc, sizeof(peer_desc), &pdlen)) {
		hostile(p, "bad topic_setup");
		return;
	}
	tr = &rt->tr[i];
	/*
	 * The listener end of a data link is up at link_accepted, which for verbs comes at
	 * the connect request, before the connector's link_connected: a sender that
	 * accepted the link may ask before this end (the connector) has heard that it is
	 * up. The link exists and accepts rings and Head writes (they wait for it), so a
	 * connecting link is enough; a refusal here would leave the topic unsent.
	 *
	 * The other way round, a sender that connected sends its set-up on the control
	 * session as soon as its connect completes; this end may read that before it
	 * accepts the data link (two sockets, no order between them). The set-up then
	 * waits for the link it names (run_deferred), and is dropped with it.
	 */
	if (p->links[i].state == LINK_OFFERED) {
		cJSON *copy;

		if (!p->deferred[i])
			p->deferred[i] = cJSON_CreateArray();
		if (!p->deferred[i] || cJSON_GetArraySize(p->deferred[i]) >= RT_DEFERRED_MAX ||
		    !(copy = cJSON_Duplicate(m, true))) {
			refuse_setup(p, id, "too many set-ups wait for the %s data link",
				     tr_names[i]);
			return;
		}
		cJSON_AddItemToArray(p->deferred[i], copy);
		p->setups_deferred++;
		rgaps_debug("peer %s: topic '%s' set-up waits for the %s data link",
			    rgapsd_peer_name(p->peer), name, tr_names[i]);
		return;
	}
	if (p->links[i].state != LINK_UP && p->links[i].state != LINK_CONNECTING) {
		refuse_setup(p, id, "no %s data link", tr_names[i]);
		return;
	}
	if (p->in[(uint32_t)id])
		in_teardown(p->in[(uint32_t)id]); /* the sender re-uses an id it gave up */
	/* First arrival: the topic is created here if nobody used it yet. */
	e = rgapsd__topic_get(rt->d, name, &t, err, sizeof(err));
	if (e) {
		refuse_setup(p, id, "topic '%s': %s", name, err);
		return;
	}
	in = calloc(1, sizeof(*in));
	if (!in) {
		refuse_setup(p, id, "out of memory");
		return;
	}
	in->p = p;
	in->topic = t;
	in->id = (uint32_t)id;
	in->tr = i;
	in->size = t->cfg.ring_size;
	e = rgaps_ring_geom_init(in->size, in->size / 2 - RGAPS_RING_ALIGN, RGAPS_RING_ALIGN,
				 &in->geom);
	if (!e)
		e = rgaps_ring_receiver_init(&in->ring, &in->geom, t->cfg.watermark);
	if (e) {
		free(in);
		refuse_setup(p, id, "topic '%s': ring of %llu bytes refused", name,
			     (unsigned long long)t->cfg.ring_size);
		return;
	}
	in->mem = mmap(NULL, in->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (in->mem == MAP_FAILED) {
		in->mem = NULL;
		free(in);
		refuse_setup(p, id, "cannot allocate a %llu-byte ring",
			     (unsigned long long)t->cfg.ring_size);
		return;
	}
	if (t->pool.kind != RGAPS_MEM_HOST) {
		/* DP3 copies ring -> GPU pool: a pinned ring next to the GPU runs at full speed. */
		place_near_device(t, in->mem, in->size, "receive ring");
		in->pinned = t->mem->ops.memory.host_register(t->mem->ctx, in->mem, in->size) == 0;
		if (!in->pinned)
			rgaps_warn("topic '%s': receive ring not pinned: H2D copies run slower", name);
	}
	e = rgaps_topic_pub_open(&t->t, 0, getpid(), &in->pub_slot);
	if (e) {
		munmap(in->mem, in->size);
		free(in);
		refuse_setup(p, id, "topic '%s': no publisher slot", name);
		return;
	}
	in->pub_open = true;
	e = tr->lp->ops.transport.receiver_ring_attach(tr->ctx, p->links[i].link, in->id, in->mem,
						       in->size, peer_desc, pdlen, desc, &dlen);
	if (e) {
		in_free(in);
		refuse_setup(p, id, "%s cannot attach the ring: %s", tr_names[i],
			     strerror(-e));
		return;
	}
	p->in[in->id] = in;
	{
		struct rt_seen *sn = seen_of(p, name, false);

		if (sn) { /* a ring for this topic existed before: continue its sequence */
			in->have_last_seq = true;
			in->last_msg_seq = sn->last_seq;
		}
	}
	to_hex(desc, dlen, hex);
	r = msg_new("topic_ready");
	cJSON_AddNumberToObject(r, "ring_id", in->id);
	cJSON_AddStringToObject(r, "ring_desc", hex);
	cJSON_AddNumberToObject(r, "ring_size", (double)in->size);
	peer_send_json(p, r);
	rgaps_info("topic '%s': ring %u from %s ready (%s, %llu bytes)", name, in->id,
		   rgapsd_peer_name(p->peer), tr_names[i], (unsigned long long)in->size);
}

static void do_topic_ready(struct rgapsd_remote *rt, struct rt_peer *p, const cJSON *m)
{
	uint8_t desc[RGAPS_RING_DESC_MAX];
	size_t dlen = 0;
	double id, size;
	struct rt_out *o;
	struct rt_transport *tr;
	int e;

	if (!jnum(m, "ring_id", &id) || id < 0 || id >= RT_RINGS || !jnum(m, "ring_size", &size) ||
	    from_hex(jstr(m, "ring_desc"), desc, sizeof(desc), &dlen)) {
		hostile(p, "bad topic_ready");
		return;
	}
	o = p->out[(uint32_t)id];
	if (!o || o->state != OUT_RING_PREPARING)
		return; /* torn down meanwhile */
	tr = &rt->tr[o->tr];
	e = rgaps_ring_geom_init((uint64_t)size, (uint64_t)size / 2 - RGAPS_RING_ALIGN,
				 RGAPS_RING_ALIGN, &o->geom);
	if (!e)
		e = tr->lp->ops.transport.sender_ring_connect(tr->ctx, p->links[o->tr].link, o->id,
							      desc, dlen);
	if (e) {
		rgaps_error("topic '%s': ring %u to %s unusable: %s", o->tt->t->cfg.name, o->id,
			    rgapsd_peer_name(p->peer), strerror(-e));
		out_free(o, true);
		return;
	}
	rgaps_ring_sender_init(&o->ring, &o->geom);
	o->state = OUT_RING_READY;
	p->resetup_ms = 0; /* the peer answers again: the next refusal starts the back-off anew */
	rgaps_info("topic '%s': ring %u to %s ready", o->tt->t->cfg.name, o->id,
		   rgapsd_peer_name(p->peer));
	waiters_check(o->tt, false);
	out_pump(o);
}

static void do_topic_refused(struct rgapsd_remote *rt, struct rt_peer *p, const cJSON *m)
{
	double id;
	struct rt_out *o;

	if (!jnum(m, "ring_id", &id) || id < 0 || id >= RT_RINGS) {
		hostile(p, "bad topic_refused");
		return;
	}
	o = p->out[(uint32_t)id];
	if (!o)
		return;
	p->setup_refusals++;
	p->resetup_ms = p->resetup_ms ? RGAPS_MIN(2 * p->resetup_ms, RT_RESETUP_MAX_MS)
				      : RT_RESETUP_MIN_MS;
	p->resetup_at_ns = rgaps_now_ns(CLOCK_MONOTONIC) + p->resetup_ms * 1000000ull;
	rgaps_warn("topic '%s': %s refused the set-up: %s (asking again in %u ms)",
		   o->tt->t->cfg.name, rgapsd_peer_name(p->peer),
		   jstr(m, "reason") ? jstr(m, "reason") : "?", p->resetup_ms);
	out_free(o, false);
}

static void do_topic_teardown(struct rgapsd_remote *rt, struct rt_peer *p, const cJSON *m)
{
	double id;

	if (!jnum(m, "ring_id", &id) || id < 0 || id >= RT_RINGS) {
		hostile(p, "bad topic_teardown");
		return;
	}
	for (int i = 0; i < TR_NUM; i++) { /* given up before its data link came */
		cJSON *it = p->deferred[i] ? p->deferred[i]->child : NULL, *next;
		double did;

		for (; it; it = next) {
			next = it->next;
			if (jnum(it, "ring_id", &did) && did == id)
				cJSON_Delete(cJSON_DetachItemViaPointer(p->deferred[i], it));
		}
	}
	if (p->in[(uint32_t)id]) {
		struct rt_in *in = p->in[(uint32_t)id];
		struct rt_seen *sn = seen_of(p, in->topic->cfg.name, false);

		/* The sender stopped on purpose (nobody here subscribes any more): what it
		 * publishes from now on is lost to no one, so a later ring counts no gap. */
		in->have_pub_seq = false;
		if (sn)
			*sn = p->seen[--p->nseen]; /* forget the topic's sequence */
		in_teardown(in);
	}
}

/* ================================================================ peer sessions */

static struct rt_peer *rt_peer_of(struct rgapsd_remote *rt, struct rgapsd_peer *peer)
{
	struct rt_peer *p = rgapsd_peer_get_data(peer);

	if (p)
		return p;
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->rt = rt;
	p->peer = peer;
	p->next = rt->peers;
	rt->peers = p;
	rgapsd_peer_set_data(peer, p);
	return p;
}

static void on_peer_up(void *ctx, struct rgapsd_peer *peer, bool initiator)
{
	struct rgapsd_remote *rt = ctx;
	struct rt_peer *p = rt_peer_of(rt, peer);

	if (!p)
		return;
	p->initiator = initiator;
	rgaps_info("peer %s up (%s)", rgapsd_peer_name(peer),
		   initiator ? "we connected" : "it connected");
	send_subs(rt, p);
	offer_links(rt, p);
}

static void on_peer_down(void *ctx, struct rgapsd_peer *peer, const char *why)
{
	struct rgapsd_remote *rt = ctx;
	struct rt_peer *p = rgapsd_peer_get_data(peer);

	rgaps_warn("peer %s down: %s", rgapsd_peer_name(peer), why);
	if (!p)
		return;
	/* Tear down in reverse: rings, then the data links (QPs to error, drain, destroy). */
	for (int i = 0; i < TR_NUM; i++) {
		struct rgaps_link *link = p->links[i].link;
		bool had = p->links[i].state == LINK_UP || p->links[i].state == LINK_CONNECTING;

		link_lost(p, i);
		if (had && link)
			rt->tr[i].lp->ops.transport.close(rt->tr[i].ctx, link);
	}
	free(p->subs);
	p->subs = NULL;
	p->nsubs = 0;
	reconcile_all(rt);
}

static void on_peer_msg(void *ctx, struct rgapsd_peer *peer, const char *json, size_t len)
{
	struct rgapsd_remote *rt = ctx;
	struct rt_peer *p = rt_peer_of(rt, peer);
	cJSON *m = rgaps_json_nul_escape(json, len) < 0 ? cJSON_ParseWithLength(json, len) : NULL;
	const char *type = m ? jstr(m, "type") : NULL;

	if (!p) {
		cJSON_Delete(m);
		return;
	}
	if (!type) {
		cJSON_Delete(m);
		hostile(p, "control message without a type");
		return;
	}
	if (strcmp(type, "subs") == 0)
		do_subs(rt, p, m);
	else if (strcmp(type, "link_offer") == 0)
		do_link_offer(rt, p, m);
	else if (strcmp(type, "link_accept") == 0)
		do_link_accept(rt, p, m);
	else if (strcmp(type, "link_refuse") == 0) {
		int i = tr_index(jstr(m, "transport"));

		if (i >= 0 && p->links[i].state == LINK_OFFERED)
			p->links[i].state = LINK_NONE;
	} else if (strcmp(type, "topic_setup") == 0)
		do_topic_setup(rt, p, m);
	else if (strcmp(type, "topic_ready") == 0)
		do_topic_ready(rt, p, m);
	else if (strcmp(type, "topic_refused") == 0)
		do_topic_refused(rt, p, m);
	else if (strcmp(type, "topic_teardown") == 0)
		do_topic_teardown(rt, p, m);
	else
		rgaps_warn("peer %s: unknown control message '%.32s' ignored",
			   rgapsd_peer_name(peer), type);
	cJSON_Delete(m);
}

static const struct rgapsd_peers_ops peer_ops = {
	.peer_up = on_peer_up,
	.peer_down = on_peer_down,
	.peer_msg = on_peer_msg,
};

static void on_tick(uv_timer_t *t)
{
	struct rgapsd_remote *rt = t->data;

	uint64_t now = rgaps_now_ns(CLOCK_MONOTONIC);
	bool resetup = false;

	for (struct rt_peer *p = rt->peers; p; p = p->next) {
		offer_links(rt, p);
		if (p->resetup_at_ns && now >= p->resetup_at_ns) {
			p->resetup_at_ns = 0;
			resetup = true;
		}
	}
	if (resetup)
		reconcile_all(rt); /* creates again the rings that were refused */
	for (struct rt_topic *tt = rt->topics; tt; tt = tt->next)
		waiters_check(tt, false);
}

/* ================================================================ daemon hooks */

void rgapsd_remote_subscribers_changed(struct rgapsd *d, struct rgapsd_topic *t)
{
	struct rgapsd_remote *rt = d->remote;

	if (!rt)
		return;
	for (struct rt_peer *p = rt->peers; p; p = p->next)
		if (rgapsd_peer_is_up(p->peer))
			send_subs(rt, p);
}

bool rgapsd_remote_publisher_attach(struct rgapsd *d, struct rgapsd_topic *t,
				    void (*done)(void *arg, int status), void *arg)
{
	struct rgapsd_remote *rt = d->remote;
	struct rt_topic *tt;
	struct rt_waiter *w;
	bool preparing = false;

	t->publishers_seen = true;
	if (!rt)
		return false;
	reconcile_topic(rt, t);
	tt = rt_topic_of(rt, t, false);
	for (struct rt_out *o = tt ? tt->outs : NULL; o; o = o->next_in_topic)
		if (o->state == OUT_RING_PREPARING)
			preparing = true;
	if (!preparing)
		return false;
	w = calloc(1, sizeof(*w));
	if (!w)
		return false;
	w->done = done;
	w->arg = arg;
	w->deadline = rgaps_now_ns(CLOCK_MONOTONIC) + RT_SETUP_TIMEOUT_MS * 1000000ull;
	w->next = tt->waiters;
	tt->waiters = w;
	return true;
}

void rgapsd_remote_cancel_attach(struct rgapsd *d, void *arg)
{
	struct rgapsd_remote *rt = d->remote;

	for (struct rt_topic *tt = rt ? rt->topics : NULL; tt; tt = tt->next) {
		for (struct rt_waiter **wp = &tt->waiters; *wp;) {
			struct rt_waiter *w = *wp;

			if (w->arg == arg) {
				*wp = w->next;
				free(w);
			} else {
				wp = &w->next;
			}
		}
	}
}

static void forwarder_stop(struct rt_topic *tt)
{
	if (tt->fwd_started) {
		__atomic_store_n(&tt->fwd_stop, 1, __ATOMIC_RELEASE);
		__atomic_fetch_add(&tt->fwd_released, 1, __ATOMIC_SEQ_CST);
		rgaps_futex_wake_all(&tt->fwd_released);
		pthread_join(tt->fwd_thread, NULL);
		tt->fwd_started = false;
	}
}

void rgapsd_remote_topic_gone(struct rgapsd *d, struct rgapsd_topic *t)
{
	struct rgapsd_remote *rt = d->remote;
	struct rt_topic *tt = rt ? rt_topic_of(rt, t, false) : NULL;

	if (!rt)
		return;
	for (struct rt_peer *p = rt->peers; p; p = p->next)
		for (uint32_t i = 0; i < RT_RINGS; i++)
			if (p->in[i] && p->in[i]->topic == t)
				in_teardown(p->in[i]);
	if (!tt)
		return;
	forwarder_stop(tt);
	while (tt->outs)
		out_free(tt->outs, false);
	waiters_check(tt, true);
	for (int i = 0; i < TR_NUM; i++) {
		if (tt->pool_mr[i])
			rt->tr[i].lp->ops.transport.dereg_local(rt->tr[i].ctx, tt->pool_mr[i]);
		if (tt->stg_mr[i])
			rt->tr[i].lp->ops.transport.dereg_local(rt->tr[i].ctx, tt->stg_mr[i]);
	}
	if (tt->stg) {
		if (tt->stg_pinned)
			t->mem->ops.memory.host_unregister(t->mem->ctx, tt->stg);
		munmap(tt->stg, tt->stg_size);
		free(tt->stg_free);
	}
	/* Flush messages the forwarder posted before it stopped. */
	for (struct rt_topic **tp = &rt->topics; *tp; tp = &(*tp)->next) {
		if (*tp == tt) {
			*tp = tt->next;
			break;
		}
	}
	if (tt->fwd_slot_open)
		rgaps_topic_sub_close(&t->t, tt->fwd_slot);
	free(tt);
}

/* ================================================================ start / stop / stats */

void rgapsd_remote_print_options(FILE *f, const char *plugin_dir)
{
	fprintf(f, "\nTransport options (\"transport_options\": { \"<transport>\": { ... } } in "
		   "the daemon's file),\nas the plugins in %s declare them:\n", plugin_dir);
	for (int i = 0; i < TR_NUM; i++) {
		const struct rgaps_plugin_option *o;
		struct rgaps_loaded_plugin *lp;
		char why[256];
		uint32_t n;

		if (rgaps__plugin_load(plugin_dir, RGAPS_PLUGIN_TRANSPORT, tr_names[i], &lp, why,
				       sizeof(why))) {
			fprintf(f, "\n  %s: not available (%s)\n", tr_names[i], why);
			continue;
		}
		o = rgaps__plugin_options(lp, &n);
		fprintf(f, "\n  %s:%s\n", tr_names[i], n ? "" : " no options");
		for (uint32_t k = 0; k < n; k++)
			fprintf(f, "    %s (integer, %llu..%llu)\n        default: %llu\n        %s\n",
				o[k].name, (unsigned long long)o[k].min,
				(unsigned long long)o[k].max, (unsigned long long)o[k].def,
				o[k].doc);
		rgaps__plugin_unload(lp);
	}
}

int rgapsd_remote_check_options(const struct rgapsd_config *cfg, const char *plugin_dir,
				char *err, size_t errlen)
{
	cJSON *all = cJSON_Parse(cfg->transport_options), *it;
	int e = 0;

	cJSON_ArrayForEach(it, all)
	{
		struct rgaps_option_value opts[32];
		struct rgaps_loaded_plugin *lp;
		char why[256], prefix[64];
		uint32_t n;

		if (tr_index(it->string) < 0) {
			snprintf(err, errlen, "key 'transport_options.%s': no transport of that name "
				 "(tcp, verbs)", it->string);
			e = -EINVAL;
			break;
		}
		if (rgaps__plugin_load(plugin_dir, RGAPS_PLUGIN_TRANSPORT, it->string, &lp, why,
				       sizeof(why)))
			continue; /* not on this host: its options are not used (logged at start) */
		snprintf(prefix, sizeof(prefix), "transport_options.%s.", it->string);
		e = rgaps__plugin_options_check(lp, it, prefix, opts, RGAPS_ARRAY_SIZE(opts), &n,
						err, errlen);
		rgaps__plugin_unload(lp);
		if (e)
			break;
	}
	cJSON_Delete(all);
	return e;
}

/* Load, configure, probe and listen with transport i. *fatal: its options are refused. */
static int load_transport(struct rgapsd_remote *rt, int i, bool *fatal)
{
	struct rt_transport *tr = &rt->tr[i];
	struct rgaps_option_value opts[32];
	struct rgaps_plugin_env env;
	char why[256] = "", host[256];
	cJSON *all, *mine;
	uint32_t nopts = 0;
	uint16_t port;
	int e;

	tr->rt = rt;
	tr->idx = i;
	all = cJSON_Parse(rt->d->cfg.transport_options);
	mine = cJSON_GetObjectItemCaseSensitive(all, tr_names[i]);
	e = rgaps__plugin_load(rt->d->plugin_dir, RGAPS_PLUGIN_TRANSPORT, tr_names[i], &tr->lp, why,
			       sizeof(why));
	if (e) {
		rgaps_info("transport %s not available: %s%s", tr_names[i], why,
			   mine ? " (its transport_options are not used)" : "");
		cJSON_Delete(all);
		return e;
	}
	snprintf(host, sizeof(host), "transport_options.%s.", tr_names[i]);
	e = rgaps__plugin_options_check(tr->lp, mine, host, opts, RGAPS_ARRAY_SIZE(opts), &nopts,
					why, sizeof(why));
	cJSON_Delete(all);
	if (e) {
		rgaps_error("%s: %s", rt->d->cfg.source[0] ? rt->d->cfg.source : "configuration",
			    why);
		*fatal = true;
		rgaps__plugin_unload(tr->lp);
		tr->lp = NULL;
		return e;
	}
	tr->cbs = (struct rgaps_transport_cbs){
		.arg = tr,
		.link_accepted = on_link_accepted,
		.link_connected = on_link_connected,
		.link_down = on_link_down,
		.record_landed = on_record_landed,
		.record_sent = on_record_sent,
		.head_update = on_head_update,
	};
	rgaps__plugin_env_init(&env, RGAPS_ROLE_DAEMON, rt->d->loop);
	env.options = opts; /* read during init */
	env.noptions = nopts;
	e = tr->lp->ops.transport.init(&env, &tr->cbs, &tr->ctx);
	if (!e)
		e = tr->lp->ops.transport.probe(tr->ctx, why, sizeof(why));
	if (e) {
		rgaps_info("transport %s not usable here: %s", tr_names[i],
			   why[0] ? why : strerror(-e));
		goto err;
	}
	rgapsd_parse_hostport(rt->d->cfg.listen, host, sizeof(host), &port);
	e = tr->lp->ops.transport.listen(tr->ctx, host, (uint16_t)(port + tr_port_offset[i]));
	if (e) {
		rgaps_error("transport %s cannot listen on %s:%u: %s", tr_names[i], host,
			    port + tr_port_offset[i], strerror(-e));
		goto err;
	}
	tr->usable = true;
	rgaps_info("transport %s: data links on %s:%u", tr_names[i], host,
		   port + tr_port_offset[i]);
	return 0;
err:
	tr->lp->ops.transport.fini(tr->ctx);
	rgaps__plugin_unload(tr->lp);
	tr->lp = NULL;
	return e;
}

int rgapsd_remote_start(struct rgapsd *d)
{
	struct rgapsd_peers_config pc = { 0 };
	const char *peers[RGAPS_CFG_MAX_PEERS];
	struct rgapsd_remote *rt;
	char err[512];
	int e, n;

	if (!d->cfg.listen[0])
		return 0;
	if (!d->cfg.key_file[0]) {
		rgaps_error("\"listen\" needs \"key_file\": peers authenticate with a pre-shared key");
		return -EINVAL;
	}
	if (sodium_init() < 0)
		return -EIO;
	rt = calloc(1, sizeof(*rt));
	if (!rt)
		return -ENOMEM;
	rt->d = d;
	{
		static const char *const names[] = { "", "magic", "oversize", "offset", "order",
						     "outside", "late_accept" };
		const char *f = getenv("RGAPSD_FAULT");

		for (int i = 1; f && i < (int)RGAPS_ARRAY_SIZE(names); i++) {
			if (strncmp(f, names[i], strlen(names[i])) == 0) {
				rt->fault = (enum rt_fault)i;
				if (f[strlen(names[i])] == ':')
					rt->fault_after = strtoull(f + strlen(names[i]) + 1, NULL, 10);
				rgaps_warn("RGAPSD_FAULT=%s: this daemon misbehaves on purpose "
					   "(tests only)", f);
			}
		}
	}
	n = rgapsd_peers_load_key(d->cfg.key_file, rt->key, sizeof(rt->key), err, sizeof(err));
	if (n < 0) {
		rgaps_error("key file: %s", err);
		free(rt);
		return n;
	}
	rt->keylen = (size_t)n;
	e = rgapsd_mailbox_init(d->loop, &rt->mb);
	if (e) {
		free(rt);
		return e;
	}
	e = rgapsd_worker_start(&rt->worker, &rt->mb, "rgapsd-copy");
	if (e)
		goto err_mb;
	{
		bool fatal = false;

		/* Unknown transports and options are refused before any plugin starts. */
		if (rgapsd_remote_check_options(&d->cfg, d->plugin_dir, err, sizeof(err))) {
			rgaps_error("%s: %s", d->cfg.source[0] ? d->cfg.source : "configuration",
				    err);
			fatal = true;
		}
		for (int i = 0; i < TR_NUM && !fatal; i++)
			load_transport(rt, i, &fatal);
		if (fatal) {
			e = -EINVAL;
			goto err_worker;
		}
	}
	if (!rt->tr[TR_TCP].usable && !rt->tr[TR_VERBS].usable) {
		rgaps_error("no transport usable: cannot serve peers");
		e = -ENODEV;
		goto err_worker;
	}
	for (uint32_t i = 0; i < d->cfg.npeers; i++)
		peers[i] = d->cfg.peers[i];
	pc.listen = d->cfg.listen;
	pc.peers = peers;
	pc.npeers = d->cfg.npeers;
	pc.key = rt->key;
	pc.keylen = rt->keylen;
	pc.keepalive_ms = d->cfg.keepalive_ms;
	d->remote = rt;
	e = rgapsd_peers_start(d->loop, &pc, &peer_ops, rt, &rt->pm);
	if (e) {
		rgaps_error("cannot serve peers on %s: %s", d->cfg.listen, strerror(-e));
		d->remote = NULL;
		goto err_worker;
	}
	uv_timer_init(d->loop, &rt->tick);
	uv_timer_init(d->loop, &rt->retry);
	rt->tick.data = rt->retry.data = rt;
	uv_timer_start(&rt->tick, on_tick, RT_TICK_MS, RT_TICK_MS);
	rgaps_info("peers: listening on %s, %u configured", d->cfg.listen, d->cfg.npeers);
	return 0;

err_worker:
	rgapsd_worker_stop(&rt->worker);
	for (int i = 0; i < TR_NUM; i++) {
		if (rt->tr[i].lp) {
			rt->tr[i].lp->ops.transport.fini(rt->tr[i].ctx);
			rgaps__plugin_unload(rt->tr[i].lp);
		}
	}
err_mb:
	rgapsd_mailbox_close(&rt->mb);
	sodium_memzero(rt->key, sizeof(rt->key));
	d->remote_dead = rt; /* its async handle closes with the loop; freed in rgapsd_fini */
	return e;
}

void rgapsd_remote_stop(struct rgapsd *d)
{
	struct rgapsd_remote *rt = d->remote;

	if (!rt)
		return;
	/* Forwarders first (they post to the mailbox), then sessions, links, transports. */
	for (struct rt_topic *tt = rt->topics; tt; tt = tt->next)
		forwarder_stop(tt);
	rgapsd_worker_stop(&rt->worker);
	rgapsd_mailbox_close(&rt->mb); /* runs what the forwarders and the worker posted */
	if (rt->late) { /* FAULT_LATE_ACCEPT: the link nobody took */
		rt->late->tr->lp->ops.transport.close(rt->late->tr->ctx, rt->late->link);
		uv_close((uv_handle_t *)&rt->late->timer, on_late_accept_closed);
		rt->late = NULL;
	}
	rgapsd_peers_stop(rt->pm);     /* peer_down for each: rings and links go */
	while (rt->topics)
		rgapsd_remote_topic_gone(d, rt->topics->t);
	/* fini closes the plugins' uv handles; their close callbacks live in the plugins,
	 * so the modules are unloaded only in rgapsd_remote_free, after the loop ran. */
	for (int i = 0; i < TR_NUM; i++)
		if (rt->tr[i].lp)
			rt->tr[i].lp->ops.transport.fini(rt->tr[i].ctx);
	while (rt->peers) {
		struct rt_peer *p = rt->peers;

		rt->peers = p->next;
		for (int i = 0; i < TR_NUM; i++)
			cJSON_Delete(p->deferred[i]);
		free(p->subs);
		free(p->seen);
		free(p);
	}
	uv_close((uv_handle_t *)&rt->tick, NULL);
	uv_close((uv_handle_t *)&rt->retry, NULL);
	sodium_memzero(rt->key, sizeof(rt->key));
	/* rt itself is freed in rgapsd_fini, after the loop closed its handles. */
}

void rgapsd_remote_free(struct rgapsd *d)
{
	struct rgapsd_remote *rt = d->remote;

	for (int i = 0; rt && i < TR_NUM; i++)
		if (rt->tr[i].lp)
			rgaps__plugin_unload(rt->tr[i].lp);
	free(d->remote);
	free(d->remote_dead);
	d->remote = NULL;
	d->remote_dead = NULL;
}

static cJSON *transitions(const uint64_t *m, int n, const char *const *names)
{
	cJSON *o = cJSON_CreateObject();

	for (int a = 0; a < n; a++) {
		for (int b = 0; b < n; b++) {
			char k[48];

			if (!m[a * n + b])
				continue;
			if (a == b)
				snprintf(k, sizeof(k), "->%s", names[b]);
			else
				snprintf(k, sizeof(k), "%s->%s", names[a], names[b]);
			cJSON_AddNumberToObject(o, k, (double)m[a * n + b]);
		}
	}
	return o;
}

void rgapsd_remote_stats(struct rgapsd *d, cJSON *reply, const char *topic_filter)
{
	struct rgapsd_remote *rt = d->remote;
	struct rgapsd_peers_stats ps;
	cJSON *peers, *topics, *sm;

	if (!rt)
		return;
	rgapsd_peers_get_stats(rt->pm, &ps);
	peers = cJSON_AddObjectToObject(reply, "peers");
	cJSON_AddStringToObject(peers, "listen", d->cfg.listen);
	cJSON_AddNumberToObject(peers, "accepted", (double)ps.accepted);
	cJSON_AddNumberToObject(peers, "auth_failures", (double)ps.auth_failures);
	cJSON_AddNumberToObject(peers, "unknown_peers", (double)ps.unknown_peers);
	cJSON_AddNumberToObject(peers, "protocol_errors", (double)ps.protocol_errors);
	cJSON_AddNumberToObject(peers, "unknown_link_tokens", (double)rt->unknown_tokens);
	cJSON *arr = cJSON_AddArrayToObject(peers, "sessions");
	for (struct rt_peer *p = rt->peers; p; p = p->next) {
		struct rgapsd_peer_stats st;
		cJSON *po = cJSON_CreateObject(), *links;

		rgapsd_peer_get_stats(p->peer, &st);
		cJSON_AddStringToObject(po, "name", rgapsd_peer_name(p->peer));
		cJSON_AddBoolToObject(po, "up", st.up);
		cJSON_AddNumberToObject(po, "sessions", (double)st.sessions);
		cJSON_AddNumberToObject(po, "reconnects", (double)st.reconnects);
		cJSON_AddNumberToObject(po, "rtt_ms", st.rtt_ms);
		cJSON_AddNumberToObject(po, "hostile", (double)p->hostile);
		cJSON_AddNumberToObject(po, "link_downs", (double)p->link_downs);
		cJSON_AddNumberToObject(po, "setup_refusals", (double)p->setup_refusals);
		cJSON_AddNumberToObject(po, "setups_deferred", (double)p->setups_deferred);
		cJSON *subs = cJSON_AddArrayToObject(po, "subscribes");
		for (uint32_t i = 0; i < p->nsubs; i++)
			cJSON_AddItemToArray(subs, cJSON_CreateString(p->subs[i]));
		links = cJSON_AddObjectToObject(po, "links");
		for (int i = 0; i < TR_NUM; i++) {
			static const char *const ls[] = { "none", "offered", "connecting", "up" };
			struct rgaps_link_stats lst;
			cJSON *lo = cJSON_AddObjectToObject(links, tr_names[i]);

			cJSON_AddStringToObject(lo, "state", ls[p->links[i].state]);
			if (p->links[i].state != LINK_UP)
				continue;
			rt->tr[i].lp->ops.transport.link_stats(rt->tr[i].ctx, p->links[i].link,
								&lst);
			cJSON_AddNumberToObject(lo, "records_sent", (double)lst.records_sent);
			cJSON_AddNumberToObject(lo, "bytes_sent", (double)lst.bytes_sent);
			cJSON_AddNumberToObject(lo, "records_landed", (double)lst.records_landed);
			cJSON_AddNumberToObject(lo, "bytes_landed", (double)lst.bytes_landed);
			cJSON_AddNumberToObject(lo, "send_credit_stalls",
						(double)lst.send_credit_stalls);
			cJSON_AddNumberToObject(lo, "cq_events", (double)lst.cq_events);
			cJSON_AddNumberToObject(lo, "cq_polls_busy", (double)lst.cq_polls_busy);
			cJSON_AddNumberToObject(lo, "cq_overflows", (double)lst.cq_overflows);
			cJSON_AddNumberToObject(lo, "records_late", (double)lst.records_late);
		}
		cJSON_AddItemToArray(arr, po);
	}
	sm = cJSON_AddObjectToObject(peers, "state_machine");
	cJSON_AddItemToObject(sm, "sender", transitions(&rt->out_trans[0][0], OUT_NUM_STATES,
						       out_state_names));
	cJSON_AddItemToObject(sm, "receiver", transitions(&rt->in_trans[0][0], IN_NUM_STATES,
							 in_state_names));

	topics = cJSON_AddArrayToObject(peers, "rings");
	for (struct rt_peer *p = rt->peers; p; p = p->next) {
		for (uint32_t i = 0; i < RT_RINGS; i++) {
			struct rt_out *o = p->out[i];
			struct rt_in *in = p->in[i];
			cJSON *ro;

			if (o && (!topic_filter || strcmp(topic_filter, o->tt->t->cfg.name) == 0)) {
				ro = cJSON_CreateObject();
				cJSON_AddStringToObject(ro, "topic", o->tt->t->cfg.name);
				cJSON_AddStringToObject(ro, "direction", "out");
				cJSON_AddStringToObject(ro, "peer", rgapsd_peer_name(p->peer));
				cJSON_AddStringToObject(ro, "transport", tr_names[o->tr]);
				cJSON_AddNumberToObject(ro, "ring_id", o->id);
				cJSON_AddBoolToObject(ro, "ready", o->state == OUT_RING_READY);
				cJSON_AddNumberToObject(ro, "records", (double)o->records);
				cJSON_AddNumberToObject(ro, "bytes", (double)o->bytes);
				cJSON_AddNumberToObject(ro, "ring_stalls", (double)o->ring_stalls);
				cJSON_AddNumberToObject(ro, "credit_stalls", (double)o->credit_stalls);
				cJSON_AddNumberToObject(ro, "dropped_messages",
							(double)o->dropped_msgs);
				cJSON_AddNumberToObject(ro, "ring_used",
							(double)rgaps_ring_sender_used(&o->ring));
				cJSON_AddItemToArray(topics, ro);
			}
			if (in && (!topic_filter || strcmp(topic_filter, in->topic->cfg.name) == 0)) {
				ro = cJSON_CreateObject();
				cJSON_AddStringToObject(ro, "topic", in->topic->cfg.name);
				cJSON_AddStringToObject(ro, "direction", "in");
				cJSON_AddStringToObject(ro, "peer", rgapsd_peer_name(p->peer));
				cJSON_AddStringToObject(ro, "transport", tr_names[in->tr]);
				cJSON_AddNumberToObject(ro, "ring_id", in->id);
				cJSON_AddNumberToObject(ro, "records", (double)in->records);
				cJSON_AddNumberToObject(ro, "bytes", (double)in->bytes);
				cJSON_AddNumberToObject(ro, "messages", (double)in->messages);
				cJSON_AddNumberToObject(ro, "upstream_gaps", (double)in->upstream_gaps);
				cJSON_AddNumberToObject(ro, "refused", (double)in->refused);
				cJSON_AddNumberToObject(ro, "blocked_retries",
							(double)in->blocked_retries);
				cJSON_AddNumberToObject(ro, "ring_used",
							(double)rgaps_ring_receiver_used(&in->ring));
				cJSON_AddItemToArray(topics, ro);
			}
		}
	}
	cJSON *fw = cJSON_AddArrayToObject(peers, "forwarders");
	for (struct rt_topic *tt = rt->topics; tt; tt = tt->next) {
		cJSON *fo;

		if (topic_filter && strcmp(topic_filter, tt->t->cfg.name) != 0)
			continue;
		fo = cJSON_CreateObject();
		cJSON_AddStringToObject(fo, "topic", tt->t->cfg.name);
		cJSON_AddNumberToObject(fo, "forwarded", (double)tt->forwarded);
		cJSON_AddNumberToObject(fo, "skipped_remote_origin", (double)tt->skipped_remote);
		cJSON_AddNumberToObject(fo, "no_interested_peer", (double)tt->unsent_no_peer);
		cJSON_AddNumberToObject(fo, "too_large_for_ring", (double)tt->too_large);
		cJSON_AddBoolToObject(fo, "staged", tt->staged);
		cJSON_AddNumberToObject(fo, "staged_chunks", (double)tt->staged_chunks);
		cJSON_AddNumberToObject(fo, "staged_bytes", (double)tt->staged_bytes);
		cJSON_AddItemToArray(fw, fo);
	}
}
