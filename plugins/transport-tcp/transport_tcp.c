/*
 * The tcp transport (include/rgaps/plugin.h, section "transport"): a data link
 * is one TCP connection or several ("streams", transport option `streams`),
 * each carrying whole records; the wire format is drawn in docs/PROTOCOL.md
 * section 3, "tcp: data connection". Connections are made on the daemon's
 * loop with libuv (connect, accept, the connector's preamble, its deadline);
 * once a link is up each of its streams gets two threads of its own, one that
 * writes and one that reads, so that the copies of the bytes through the
 * kernel run beside the loop and beside each other. The threads reach the
 * loop only through the link's uv_async handle; every callback to the core
 * runs on the loop.
 *
 * Sending: post_record() queues a frame on the stream with the fewest bytes
 * queued; its thread writes every frame queued on it with one writev straight
 * from the core's registered memory (frame header + the gathered pieces, no
 * copy in user space). record_sent comes in posting order: a record written
 * on one stream waits for those posted before it on others.
 *
 * Receiving: every frame is checked before a byte of its payload is read
 * (magic, type, ring attached, bounds, and that it cannot overwrite bytes the
 * core has not released yet); a violation drops the link with the reason in
 * words. With several streams each RECORD frame carries its number on the
 * link, and the readers take their headers in that order (a reader whose next
 * record is not the next in number waits for the others), so the checks run
 * in ring order; payloads then arrive side by side, and record_landed comes in
 * that order too. Where the core asks (record_header), a large record's bytes
 * after its header go where the core says (a pool block) instead of the ring.
 * A reader writes ring memory only inside one non-blocking recv at a time,
 * marked on the ring, so ring_detach() waits at most for one such copy.
 *
 * Lifecycle: init -> listen / connect -> links come and go -> fini. A link's
 * threads are stopped and joined when it is torn down (shutdown(2) ends their
 * system calls), before close() or link_down returns; its memory goes once its
 * libuv handles have closed, the context's once every link and handle has, so
 * after fini() the host's loop must still run (it does until uv_loop_close).
 * The module is linked with -z nodelete: the loader may dlclose() it right
 * after fini(), before those close callbacks have run.
 *
 * Completions: every posted record gets exactly one record_sent, in posting
 * order; when an up link fails, the records written already get record_sent(0)
 * and the rest record_sent(err), then link_down. A connect that fails gets
 * link_connected(err) and the link is freed after it. close() and fini() call
 * nothing back. Send credits bound what one link queues (TCP_TX_RECORDS
 * records, TCP_TX_BYTES bytes): beyond, post_record() says -EAGAIN and the core
 * retries after a record_sent. Batching: a stream's writer wakes at flush() (or
 * before the loop sleeps, or once TCP_BATCH_BYTES wait) and writes everything
 * queued on it at once.
 *
 * Ring descriptors, opaque to the core, little-endian: the sender's (its
 * Delayed Head word stays local) is 8 bytes {u32 "RGTH", u8 version 1,
 * u8 ring_id, u16 0}; the receiver's is 16 bytes {u32 "RGTR", u8 1, u8 ring_id,
 * u16 0, u64 ring size}, which bounds the offsets post_record() accepts.
 *
 * Locking: each link has one mutex (lock) for everything its threads and the
 * loop share: the frame queue, the rings' cursors and states, the landing
 * order, the stats. It is never held across a system call that can wait, nor
 * across a callback to the core.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>
#include <uv.h>

#include "rgaps/plugin.h"

#define TCP_PREAMBLE_MAGIC  0x44544752u /* "RGTD" little-endian */
#define TCP_PREAMBLE_V1	    1u		/* one stream: magic, version, token */
#define TCP_PREAMBLE_V2	    2u		/* several: ... then stream, streams, 0 */
#define TCP_PREAMBLE_V1_LEN 24u
#define TCP_PREAMBLE_V2_LEN 32u
#define TCP_FRAME_MAGIC	    0x46544752u /* "RGTF" */
#define TCP_FRAME_LEN	    24u
#define TCP_FRAME_RECORD    1u
#define TCP_FRAME_HEAD	    2u
#define TCP_RINGS	    128u
#define TCP_STREAMS_MAX	    16u

/* Ring descriptors carried by the core over the peer control plane (little-endian). */
#define TCP_DESC_HEAD_MAGIC 0x48544752u /* "RGTH": sender's Delayed Head word */
#define TCP_DESC_RING_MAGIC 0x52544752u /* "RGTR": receiver's ring */
#define TCP_DESC_VERSION    1u
#define TCP_DESC_HEAD_LEN   8u	/* magic u32, version u8, ring_id u8, 0 u16 */
#define TCP_DESC_RING_LEN   16u /* the same, then ring size u64 */

#define TCP_PREAMBLE_TIMEOUT_MS 3000
#define TCP_PENDING_MAX 64	    /* owing their preamble, with no host admission (env) */
#define TCP_TX_RECORDS		64u /* send credits: records queued or in flight per link */
#define TCP_TX_BYTES		(256ull << 20) /* ... and their bytes (one record always fits) */
#define TCP_TX_HEADS		32u	       /* HEAD frames queued per link */
#define TCP_TX_FIFO		128u	       /* >= records + heads; a power of two */
#define TCP_BATCH_BYTES		(1u << 20)     /* wake a writer at once when this much waits */
#define TCP_IOV_MAX		256u	       /* iovecs of one writev */
#define TCP_RX_WINDOW		64u	       /* records of a link landing at once: > streams */
#define TCP_DISCARD_BUF		(64u << 10)    /* sink for records of a ring detached meanwhile */
#define TCP_REDIRECT_MIN	(256u << 10)   /* smallest record whose rest may land elsewhere */
#define TCP_ZC_MIN		(64u << 10)    /* smallest write sent with MSG_ZEROCOPY */
#define TCP_ZC_RANGES		32u	       /* completions of later sends kept for their turn */
#define TCP_WHY_LEN		256

enum link_state {
	LINK_RESOLVING,	 /* connector: resolving the peer's host name */
	LINK_CONNECTING, /* connector: TCP handshakes in progress */
	LINK_PREAMBLE,	 /* listener: accepted, waiting for the preamble; unknown to the core */
	LINK_FORMING,	 /* listener: some of its streams are here, the others are awaited */
	LINK_UP,	 /* frames flow both ways; the streams' threads run */
	LINK_DEAD,	 /* closed or failed: no more callbacks, handles closing */
	LINK_NUM_STATES
};

enum ring_state {
	RING_NONE,	/* never set up on this link */
	RING_PREPARED,	/* sender: sender_ring_prepare() done */
	RING_CONNECTED, /* sender: sender_ring_connect() done: records may be posted */
	RING_ATTACHED,	/* receiver: receiver_ring_attach() done: records land */
	RING_DETACHED,	/* was set up, ring_detach() since: late frames are dropped quietly */
};

struct tcp_mr {
	uint8_t *addr;
	uint64_t len;
};

/* One frame queued on a stream (unwritten) or written, waiting for its turn to complete. */
struct tx_frame {
	uint8_t hdr[TCP_FRAME_LEN];
	uint8_t type;
	uint8_t nsg;
	uint8_t ring_id;
	uint8_t stream;
	bool taken;   /* its stream's writer has it: no more changes to it */
	bool written; /* out of the source memory */
	bool zc;      /* sent with MSG_ZEROCOPY: out of the source once send zc_id completes */
	uint32_t zc_id;
	uint64_t cookie;
	uint64_t len; /* payload bytes */
	struct iovec sg[RGAPS_RECORD_SG_MAX];
};

struct rx_ring {
	uint8_t *base;
	uint64_t size;
	/*
	 * Cursors (docs/RING.md) as far as this side can follow them: tail is the
	 * end of the last record placed, head the last Head the core posted. A
	 * record may end at most one ring past head: anything else would
	 * overwrite bytes the core has not released.
	 */
	uint64_t tail;
	uint64_t head;
	uint32_t head_frame; /* 1 + index of an unsent HEAD frame for this ring, 0: none */
	uint32_t writers;    /* readers inside a recv into its memory (or where it sent them) */
	uint32_t gen;	     /* attachments so far: a record of an earlier one never lands */
	uint8_t state;
};

struct tx_ring {
	uint64_t size;
	uint64_t head_in; /* the newest Head the peer wrote, for the loop */
	bool head_new;
	uint8_t state;
};

/* A record in landing order: what its reader saw, for the loop to report. */
struct rx_slot {
	enum { SLOT_FREE, SLOT_READING, SLOT_LANDED, SLOT_DROPPED } state;
	bool told; /* its record_header question was answered (or none is asked) */
	uint32_t ring_id, gen;
	uint64_t off, len;
};

struct tcp_ctx;
struct rgaps_link;

struct tcp_stream {
	struct rgaps_link *l;
	uint32_t idx;
	int fd;	     /* ours once the link is up (a dup of libuv's), -1 before */
	uv_tcp_t *h; /* connector: its libuv handle while it connects (stream 0: l->tcp) */
	uv_connect_t creq;
	bool connected;
	pthread_t rx_thread, tx_thread;
	bool rx_on, tx_on;
	/* send: indices of its frames in l->tx: [.., qnext) taken by its writer, [qnext, qtail) queued */
	uint32_t q[TCP_TX_FIFO];
	uint32_t qnext, qtail;
	uint64_t qbytes;
	bool kick;		/* flush() asked: write what is queued */
	bool streaming;		/* the writer goes on without waiting for a kick */
	pthread_cond_t tx_cond; /* frames to write, or stop */
	/* receive: a record_header answer the reader waits for */
	bool asking;
	bool answered;
	uint32_t ask_no; /* its question's number (l->hdr_tail when asked) */
	uint32_t ask_ring;
	uint8_t *redirect;
	uint8_t *discard; /* the reader's sink */
	/* MSG_ZEROCOPY: sends numbered from 0 by the kernel, those below zc_done completed;
	 * ranges reported before an earlier one wait in zc_early */
	bool zc;
	uint32_t zc_next, zc_done;
	uint32_t zc_nearly;
	struct {
		uint32_t lo, hi;
	} zc_early[TCP_ZC_RANGES];
};

struct rgaps_link {
	struct tcp_ctx *ctx;
	struct rgaps_link *prev, *next; /* in ctx->links until torn down */
	enum link_state state;
	bool known;		  /* the core has this pointer (connect() or link_accepted) */
	bool silent;		  /* closed by the core or by fini: no callbacks at all */
	bool pending_counted;	  /* counted in ctx->npending */
	uint32_t pending_members; /* LINK_FORMING: streams counted in ctx->npending */
	bool admitted;		  /* kept by the host's admission (env conn_pending): settle it */
	bool tcp_open, timer_open, async_open;
	int refs; /* open handles and requests; the link is freed at 0 */
	char peer[80];
	uint16_t port;
	uint8_t token[RGAPS_LINK_TOKEN_LEN];
	uint32_t version; /* of its preamble: 1 (one stream), 2 (several) */

	uv_tcp_t tcp;	  /* the first connection until the link is up */
	uv_timer_t timer; /* the preamble deadline (listener) */
	uv_async_t async; /* the threads' news for the loop */
	uv_getaddrinfo_t gai;
	struct sockaddr_storage addr; /* connector: where every stream goes */
	uint8_t preamble[TCP_PREAMBLE_V2_LEN];
	uint32_t rx_have; /* preamble bytes read (listener) */

	pthread_mutex_t lock;
	pthread_cond_t rx_cond; /* a reader's turn, a ring's writers gone, an answer */
	bool stop;		/* the threads end */
	int thread_err;		/* the first failure a thread saw, for the loop */
	char thread_why[TCP_WHY_LEN];
	uint32_t nstreams, nconnected;
	struct tcp_stream s[TCP_STREAMS_MAX];

	/* receive order: records are numbered as their headers are taken */
	uint32_t rx_next;	     /* number of the next record whose header is taken */
	uint32_t rx_deliver;	     /* number of the next record_landed */
	uint32_t slot_waiting;	     /* readers waiting for a landing slot */
	uint32_t hdr_head, hdr_tail; /* record_header questions, in order: rx_asks */
	struct {
		uint32_t stream, ring_id, gen, no;
		uint64_t off, len;
		bool can_redirect;
	} rx_asks[TCP_RX_WINDOW];
	struct rx_slot rx_slots[TCP_RX_WINDOW];
	bool heads_new; /* some tx ring has head_new */

	/* send: frames [tx_done, tx_end) are queued or written, in posting order */
	uint32_t tx_done, tx_end;
	uint32_t tx_records, tx_heads, tx_seq;
	uint64_t tx_bytes, unsent_bytes;
	struct tx_frame tx[TCP_TX_FIFO];

	struct rx_ring rxr[TCP_RINGS];
	struct tx_ring txr[TCP_RINGS];
	struct rgaps_link_stats st;
};

struct tcp_ctx {
	struct rgaps_plugin_env env;
	struct rgaps_transport_cbs cbs;
	uv_loop_t *loop;
	struct rgaps_link *links; /* every link not yet torn down */
	uv_tcp_t *listener;	  /* heap: a failed listen() may be retried while it closes */
	uv_prepare_t prepare;	  /* wakes writers with frames queued before the loop sleeps */
	bool listening, prepare_open, finalizing;
	int refs; /* 1 until fini, + open handles, + links not yet freed */
	int npending;
	int sndbuf, rcvbuf; /* RGAPS_TCP_SNDBUF / RGAPS_TCP_RCVBUF, 0: kernel autotuning */
	uint32_t streams;   /* TCP connections per link this side opens */
	bool zerocopy;	    /* send large writes with MSG_ZEROCOPY */
};

static void link_unref(struct rgaps_link *l);
static void link_flush(struct rgaps_link *l);
static void link_progress(struct rgaps_link *l);

/* ------------------------------------------------------------------ helpers */

static void tcp_log(struct tcp_ctx *c, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void tcp_log(struct tcp_ctx *c, int level, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	if (!c->env.log)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	c->env.log(level, "tcp: %s", buf);
}

static void put_le16(uint8_t *p, uint16_t v)
{
	v = htole16(v);
	memcpy(p, &v, 2);
}

static void put_le32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static void put_le64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

static uint16_t get_le16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return le16toh(v);
}

static uint32_t get_le32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static uint64_t get_le64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

static void frame_encode(uint8_t *hdr, uint8_t type, uint8_t ring_id, uint16_t num, uint64_t off,
			 uint64_t len)
{
	put_le32(hdr, TCP_FRAME_MAGIC);
	hdr[4] = type;
	hdr[5] = ring_id;
	put_le16(hdr + 6, num);
	put_le64(hdr + 8, off);
	put_le64(hdr + 16, len);
}

/*
 * Tunables: the daemon's "transport_options": { "tcp": { ... } }, else the
 * environment variable RGAPS_TCP_<NAME> (programs without a daemon
 * configuration), else the default. Socket buffers: 0 leaves the kernel's
 * autotuning alone.
 */
enum { OPT_SNDBUF, OPT_RCVBUF, OPT_STREAMS, OPT_ZEROCOPY, OPT_NUM };

static const struct rgaps_plugin_option tcp_options[OPT_NUM] = {
	[OPT_SNDBUF] = { "sndbuf", 0, 0, 1u << 30,
			 "SO_SNDBUF of data links in bytes; 0: the kernel autotunes" },
	[OPT_RCVBUF] = { "rcvbuf", 0, 0, 1u << 30,
			 "SO_RCVBUF of data links in bytes; 0: the kernel autotunes" },
	[OPT_STREAMS] = { "streams", 1, 1, TCP_STREAMS_MAX,
			  "TCP connections per data link, each with its own threads (the "
			  "connecting side's value rules)" },
	[OPT_ZEROCOPY] = { "zerocopy", 0, 0, 1,
			   "1: send writes of 64 KiB and more with MSG_ZEROCOPY (a NIC reads the "
			   "source; loopback copies anyway)" },
};

static const char *const opt_env[OPT_NUM] = {
	[OPT_SNDBUF] = "RGAPS_TCP_SNDBUF",
	[OPT_RCVBUF] = "RGAPS_TCP_RCVBUF",
	[OPT_STREAMS] = "RGAPS_TCP_STREAMS",
	[OPT_ZEROCOPY] = "RGAPS_TCP_ZEROCOPY",
};

static uint64_t opt_value(const struct rgaps_plugin_env *env, int i)
{
	const struct rgaps_plugin_option *o = &tcp_options[i];
	const char *s = getenv(opt_env[i]);
	uint64_t v;
	char *end;

	if (rgaps_plugin_env_option(env, o->name, &v))
		return v; /* the daemon checked the bounds */
	if (!s || !*s)
		return o->def;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || *end || v < o->min || v > o->max) {
		if (env->log)
			env->log(1, "tcp: %s=%s is not a number in [%llu, %llu]; using %llu",
				 opt_env[i], s, (unsigned long long)o->min,
				 (unsigned long long)o->max, (unsigned long long)o->def);
		return o->def;
	}
	return v;
}

/* A libuv TCP handle of the heap, its data set (the caller frees it in its close callback). */
static int handle_new(struct tcp_ctx *c, void *data, uv_tcp_t **h_p)
{
	uv_tcp_t *h = malloc(sizeof(*h));
	int r;

	if (!h)
		return -ENOMEM;
	r = uv_tcp_init(c->loop, h);
	if (r < 0) {
		free(h);
		return r;
	}
	h->data = data;
	*h_p = h;
	return 0;
}

static void ctx_unref(struct tcp_ctx *c)
{
	if (--c->refs == 0)
		free(c);
}

static void ctx_handle_closed(uv_handle_t *h)
{
	ctx_unref(h->data);
}

static void listener_closed(uv_handle_t *h)
{
	struct tcp_ctx *c = h->data;

	free(h);
	ctx_unref(c);
}

/* Host and port of a sockaddr, for messages. */
static void addr_name(const struct sockaddr *sa, char *buf, size_t len, uint16_t *port_p)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	uint16_t port = 0;

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		uv_ip4_name(in, ip, sizeof(ip));
		port = ntohs(in->sin_port);
		snprintf(buf, len, "%s:%u", ip, port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		uv_ip6_name(in6, ip, sizeof(ip));
		port = ntohs(in6->sin6_port);
		snprintf(buf, len, "[%s]:%u", ip, port);
	} else {
		snprintf(buf, len, "?");
	}
	if (port_p)
		*port_p = port;
}

/* A numeric IPv4 or IPv6 address; -EINVAL for a host name. */
static int parse_numeric(const char *host, uint16_t port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0)
		return 0;
	if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0)
		return 0;
	return -EINVAL;
}

static void set_sockbufs(struct tcp_ctx *c, uv_handle_t *h)
{
	int v;

	/* Explicit sizes turn Linux's autotuning off; by default the kernel decides. */
	if (c->sndbuf) {
		v = c->sndbuf;
		uv_send_buffer_size(h, &v);
	}
	if (c->rcvbuf) {
		v = c->rcvbuf;
		uv_recv_buffer_size(h, &v);
	}
}

/* ------------------------------------------------------------------ the threads' side */

/*
 * A thread met a failure (or the end of its stream): the first one is kept for
 * the loop, which tears the link down. Called with the lock held.
 */
static void thread_fail_locked(struct rgaps_link *l, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void thread_fail_locked(struct rgaps_link *l, int err, const char *fmt, ...)
{
	va_list ap;

	if (!l->stop && !l->thread_err) {
		l->thread_err = err ? err : -EIO;
		va_start(ap, fmt);
		vsnprintf(l->thread_why, sizeof(l->thread_why), fmt, ap);
		va_end(ap);
	}
	__atomic_store_n(&l->stop, true, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&l->rx_cond);
	for (uint32_t i = 0; i < l->nstreams; i++)
		pthread_cond_signal(&l->s[i].tx_cond);
	uv_async_send(&l->async);
}

/*
 * MSG_ZEROCOPY sends [lo, hi] of stream s completed (copied: by a copy after
 * all). Lock held. The frames they carried are out of the source memory now.
 */
static void zc_completed_locked(struct tcp_stream *s, uint32_t lo, uint32_t hi, bool copied)
{
	struct rgaps_link *l = s->l;

	l->st.zc_copied += copied ? (uint64_t)(hi - lo) + 1 : 0;
	if ((int32_t)(lo - s->zc_done) > 0) {
		/* a later send done before an earlier one (loopback copies on delivery) */
		if (s->zc_nearly < TCP_ZC_RANGES) {
			s->zc_early[s->zc_nearly].lo = lo;
			s->zc_early[s->zc_nearly++].hi = hi;
			return;
		}
		/* cannot happen with sends bounded by the link's credits: keep the order safe */
		thread_fail_locked(l, -EPROTO, "more than %u zerocopy completions out of order",
				   TCP_ZC_RANGES);
		return;
	}
	if ((int32_t)(hi + 1 - s->zc_done) > 0)
		s->zc_done = hi + 1;
	for (uint32_t k = 0; k < s->zc_nearly;) { /* ranges that join now */
		if ((int32_t)(s->zc_early[k].lo - s->zc_done) > 0) {
			k++;
			continue;
		}
		if ((int32_t)(s->zc_early[k].hi + 1 - s->zc_done) > 0)
			s->zc_done = s->zc_early[k].hi + 1;
		s->zc_early[k] = s->zc_early[--s->zc_nearly];
		k = 0;
	}
	for (uint32_t i = l->tx_done; i != l->tx_end; i++) {
		struct tx_frame *f = &l->tx[i % TCP_TX_FIFO];

		if (f->zc && !f->written && f->stream == s->idx &&
		    (int32_t)(f->zc_id - s->zc_done) < 0)
			f->written = true;
	}
	uv_async_send(&l->async);
}

/* Read the completions of MSG_ZEROCOPY sends off the socket's error queue; how many. */
static int zc_drain(struct tcp_stream *s)
{
	char ctl[CMSG_SPACE(sizeof(struct sock_extended_err)) + 64];
	int n = 0;

	for (;; n++) {
		struct msghdr msg = { .msg_control = ctl, .msg_controllen = sizeof(ctl) };
		struct cmsghdr *c;

		if (recvmsg(s->fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
			return n; /* empty (a real socket error shows on the next send or read) */
		for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
			struct sock_extended_err e;

			if (!((c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR) ||
			      (c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_RECVERR)))
				continue;
			memcpy(&e, CMSG_DATA(c), sizeof(e));
			if (e.ee_errno != 0 || e.ee_origin != SO_EE_ORIGIN_ZEROCOPY)
				continue;
			pthread_mutex_lock(&s->l->lock);
			zc_completed_locked(s, e.ee_info, e.ee_data,
					    e.ee_code & SO_EE_CODE_ZEROCOPY_COPIED);
			pthread_mutex_unlock(&s->l->lock);
		}
	}
}

/*
 * Wait until s's socket is readable (or writable); false once the link
 * stops. Completions of zerocopy sends wake it too (POLLERR): they are read
 * here, by whichever of the stream's threads polls.
 */
static bool wait_fd(struct tcp_stream *s, short events)
{
	struct rgaps_link *l = s->l;
	struct pollfd p = { .fd = s->fd, .events = events };

	for (;;) {
		int r = poll(&p, 1, -1);

		if (__atomic_load_n(&l->stop, __ATOMIC_RELAXED))
			return false;
		if (r > 0 && (p.revents & POLLERR) && s->zc && zc_drain(s) > 0 &&
		    !(p.revents & (events | POLLHUP)))
			continue; /* only completions: wait on */
		if (r > 0 || (r < 0 && errno != EINTR))
			return true; /* the next system call says what it was */
	}
}

/* Read exactly n bytes into buf, memory of the reader's own. 0, or -1 (the link failed). */
static int read_own(struct tcp_stream *s, uint8_t *buf, size_t n)
{
	struct rgaps_link *l = s->l;

	while (n) {
		ssize_t r = recv(s->fd, buf, n, MSG_DONTWAIT);

		if (r > 0) {
			buf += r;
			n -= (size_t)r;
			continue;
		}
		if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
			if (!wait_fd(s, POLLIN))
				return -1;
			continue;
		}
		pthread_mutex_lock(&l->lock);
		if (r == 0)
			thread_fail_locked(l, -ECONNRESET, "%s closed the data link", l->peer);
		else
			thread_fail_locked(l, -errno, "read from %s failed: %s", l->peer,
					   strerror(errno));
		pthread_mutex_unlock(&l->lock);
		return -1;
	}
	return 0;
}

/*
 * Read n bytes of ring ring_id's record: to dst (the ring, or where the core
 * redirected them) while the ring stays attached, else into the sink. Ring
 * memory is written only inside one non-blocking recv at a time, counted in
 * the ring's writers, so that ring_detach() waits for one such copy at most.
 * 0 when done (*dropped_p: some bytes went to the sink), -1: the link failed.
 */
static int read_ring(struct tcp_stream *s, uint32_t ring_id, uint32_t gen, uint8_t *dst, uint64_t n,
		     bool *dropped_p)
{
	struct rgaps_link *l = s->l;
	struct rx_ring *r = &l->rxr[ring_id];

	while (n) {
		size_t want = n > (1u << 30) ? (1u << 30) : (size_t)n;
		uint8_t *to;
		ssize_t got;
		int e;

		pthread_mutex_lock(&l->lock);
		if (dst && r->state == RING_ATTACHED && r->gen == gen) {
			r->writers++;
			to = dst;
		} else {
			*dropped_p = true;
			to = s->discard;
			want = want < TCP_DISCARD_BUF ? want : TCP_DISCARD_BUF;
		}
		pthread_mutex_unlock(&l->lock);
		got = recv(s->fd, to, want, MSG_DONTWAIT);
		e = errno;
		pthread_mutex_lock(&l->lock);
		if (to != s->discard && --r->writers == 0 && r->state != RING_ATTACHED)
			pthread_cond_broadcast(&l->rx_cond); /* ring_detach() waits for this */
		l->st.cq_events++;
		if (got > 0) {
			pthread_mutex_unlock(&l->lock);
			n -= (uint64_t)got;
			if (to != s->discard)
				dst += got;
			continue;
		}
		if (got < 0 && (e == EAGAIN || e == EINTR)) {
			pthread_mutex_unlock(&l->lock);
			if (!wait_fd(s, POLLIN))
				return -1;
			continue;
		}
		if (got == 0)
			thread_fail_locked(l, -ECONNRESET, "%s closed the data link", l->peer);
		else
			thread_fail_locked(l, -e, "read from %s failed: %s", l->peer, strerror(e));
		pthread_mutex_unlock(&l->lock);
		return -1;
	}
	return 0;
}

/*
 * Several streams: wait (lock held) until num is the link's next record
 * number (the record before it may still be queued on another stream's
 * writer). false: the link stops, or num was taken already: a sender that
 * numbers a record twice breaks the protocol. One that skips a number only
 * stalls its own link.
 */
static bool wait_turn_locked(struct tcp_stream *s, uint16_t num)
{
	struct rgaps_link *l = s->l;

	while (!l->stop && (uint16_t)l->rx_next != num) {
		if ((uint16_t)(num - (uint16_t)l->rx_next) >= 0x8000u) {
			thread_fail_locked(l, -EPROTO,
					   "record number %u on stream %u from %s, after %u: "
					   "numbered twice",
					   num, s->idx, l->peer,
					   (unsigned)(uint16_t)(l->rx_next - 1));
			return false;
		}
		pthread_cond_wait(&l->rx_cond, &l->lock);
	}
	return !l->stop;
}

/*
 * A RECORD frame's header (lock held, in the link's record order): check it
 * against the ring and place it. 0: it lands in ring ring_id at off; 1: the
 * ring was detached meanwhile, drop it; -1: the link failed.
 */
static int place_record_locked(struct rgaps_link *l, uint32_t ring_id, uint64_t off, uint64_t len)
{
	struct rx_ring *r;
	uint64_t start;

	if (ring_id >= TCP_RINGS) {
		thread_fail_locked(l, -EPROTO, "record for ring %" PRIu32 ": ring ids are below %u",
				   ring_id, TCP_RINGS);
		return -1;
	}
	r = &l->rxr[ring_id];
	if (r->state == RING_DETACHED) {
		l->st.records_late++; /* sent before the sender heard of the detach */
		return 1;
	}
	if (r->state != RING_ATTACHED) {
		thread_fail_locked(
			l, -EPROTO,
			"record for ring %" PRIu32 ", which is not attached on this link", ring_id);
		return -1;
	}
	if (len == 0) {
		thread_fail_locked(l, -EPROTO, "empty record for ring %" PRIu32, ring_id);
		return -1;
	}
	if (off > r->size || len > r->size - off) {
		thread_fail_locked(l, -EPROTO,
				   "record for ring %" PRIu32 " outside the ring: off %" PRIu64
				   " len %" PRIu64 " size %" PRIu64,
				   ring_id, off, len, r->size);
		return -1;
	}
	/*
	 * The record starts at the first cursor at or after the end of the last
	 * one whose offset is off (a sender following docs/RING.md never leaves
	 * more than a ring's worth of padding), and must end within one ring of
	 * the last Head the core released: beyond, it would overwrite bytes still
	 * in use. The core's own placement check (verify) follows on record_landed.
	 */
	start = r->tail + (off + r->size - r->tail % r->size) % r->size;
	if (start + len > r->head + r->size) {
		thread_fail_locked(l, -EPROTO,
				   "record for ring %" PRIu32
				   " would overwrite unconsumed bytes: off %" PRIu64 " len %" PRIu64
				   ", ring of %" PRIu64 " released up to cursor %" PRIu64
				   ", placed up to %" PRIu64,
				   ring_id, off, len, r->size, r->head, r->tail);
		return -1;
	}
	r->tail = start + len;
	return 0;
}

/* A HEAD frame (lock held): the newest Head of one of our out rings, for the loop. */
static int frame_head_locked(struct rgaps_link *l, uint32_t ring_id, uint64_t head, uint64_t len)
{
	struct tx_ring *t;

	if (len != 0) {
		thread_fail_locked(l, -EPROTO,
				   "head update for ring %" PRIu32 " carries %" PRIu64 " bytes",
				   ring_id, len);
		return -1;
	}
	if (ring_id >= TCP_RINGS) {
		thread_fail_locked(l, -EPROTO,
				   "head update for ring %" PRIu32 ": ring ids are below %u",
				   ring_id, TCP_RINGS);
		return -1;
	}
	t = &l->txr[ring_id];
	if (t->state == RING_DETACHED)
		return 0;
	if (t->state != RING_PREPARED && t->state != RING_CONNECTED) {
		thread_fail_locked(l, -EPROTO,
				   "head update for ring %" PRIu32
				   ", which this side does not write to",
				   ring_id);
		return -1;
	}
	l->st.head_updates_received++;
	t->head_in = head;
	t->head_new = true;
	l->heads_new = true;
	uv_async_send(&l->async);
	return 0;
}

/*
 * One record on stream s, its frame header checked for magic and type: take
 * its turn, place it, read it (its first bytes into the ring, then, if the
 * core redirects them, the rest where it says), and leave it in landing order
 * for the loop. 0, or -1: the link failed.
 */
static int rx_record(struct tcp_stream *s, uint32_t ring_id, uint16_t num, uint64_t off,
		     uint64_t len)
{
	struct rgaps_link *l = s->l;
	bool ask = l->ctx->cbs.record_header != NULL, dropped = false;
	/* asking: its first bytes are read before the question, the rest after the answer */
	uint64_t peek = !ask ? 0 : len < RGAPS_RECORD_PEEK ? len : RGAPS_RECORD_PEEK;
	struct rx_slot *slot;
	uint8_t *dst = NULL;
	uint32_t gen = 0;
	int placed;

	pthread_mutex_lock(&l->lock);
	if (l->nstreams > 1 && !wait_turn_locked(s, num)) {
		pthread_mutex_unlock(&l->lock);
		return -1;
	}
	placed = place_record_locked(l, ring_id, off, len);
	if (placed < 0) {
		pthread_mutex_unlock(&l->lock);
		return -1;
	}
	/* its place in landing order: wait while the loop is that far behind */
	slot = &l->rx_slots[l->rx_next % TCP_RX_WINDOW];
	while (slot->state != SLOT_FREE && !l->stop) {
		l->slot_waiting++;
		pthread_cond_wait(&l->rx_cond, &l->lock);
		l->slot_waiting--;
	}
	if (l->stop) {
		pthread_mutex_unlock(&l->lock);
		return -1;
	}
	slot->state = placed ? SLOT_DROPPED : SLOT_READING;
	slot->told = placed || !ask;
	slot->ring_id = ring_id;
	slot->off = off;
	slot->len = len;
	if (!placed) {
		gen = slot->gen = l->rxr[ring_id].gen;
		dst = l->rxr[ring_id].base + off;
	}
	if (placed || !ask) {
		l->rx_next++; /* the next reader may take its header now */
		pthread_cond_broadcast(&l->rx_cond);
	}
	pthread_mutex_unlock(&l->lock);
	if (placed)
		return read_ring(s, ring_id, 0, NULL, len, &dropped);

	if (ask) {
		uint32_t q;

		/* Its header into the ring, then the question, in record order (turn held). */
		if (read_ring(s, ring_id, gen, dst, peek, &dropped) < 0)
			return -1;
		pthread_mutex_lock(&l->lock);
		q = l->hdr_tail % TCP_RX_WINDOW;
		l->rx_asks[q].stream = s->idx;
		l->rx_asks[q].ring_id = ring_id;
		l->rx_asks[q].gen = gen;
		l->rx_asks[q].no = l->rx_next;
		l->rx_asks[q].off = off;
		l->rx_asks[q].len = len;
		l->rx_asks[q].can_redirect = len >= TCP_REDIRECT_MIN && !dropped;
		s->asking = l->rx_asks[q].can_redirect;
		s->answered = false;
		s->ask_no = l->hdr_tail++;
		s->ask_ring = ring_id;
		s->redirect = NULL;
		l->rx_next++;
		pthread_cond_broadcast(&l->rx_cond);
		uv_async_send(&l->async);
		while (s->asking && !s->answered && !l->stop)
			pthread_cond_wait(&l->rx_cond, &l->lock);
		if (s->redirect)
			dst = s->redirect - peek; /* the rest goes there, at its place */
		s->asking = false;
		if (l->stop) {
			pthread_mutex_unlock(&l->lock);
			return -1;
		}
		pthread_mutex_unlock(&l->lock);
	}
	if (read_ring(s, ring_id, gen, dst + peek, len - peek, &dropped) < 0)
		return -1;
	pthread_mutex_lock(&l->lock);
	slot->state = dropped ? SLOT_DROPPED : SLOT_LANDED;
	if (!dropped) {
		l->st.records_landed++;
		l->st.bytes_landed += len;
	}
	uv_async_send(&l->async);
	pthread_mutex_unlock(&l->lock);
	return 0;
}

static void *rx_main(void *arg)
{
	struct tcp_stream *s = arg;
	struct rgaps_link *l = s->l;
	uint8_t h[TCP_FRAME_LEN];

	while (read_own(s, h, sizeof(h)) == 0) {
		uint32_t magic = get_le32(h);
		uint16_t num = get_le16(h + 6);
		uint64_t off = get_le64(h + 8), len = get_le64(h + 16);
		int e = 0;

		pthread_mutex_lock(&l->lock);
		if (magic != TCP_FRAME_MAGIC)
			thread_fail_locked(l, -EPROTO, "bad frame magic 0x%08" PRIx32 " from %s",
					   magic, l->peer);
		else if (h[4] == TCP_FRAME_HEAD && num)
			thread_fail_locked(l, -EPROTO,
					   "head frame with nonzero reserved bytes from %s",
					   l->peer);
		else if (h[4] == TCP_FRAME_RECORD && l->nstreams == 1 && num)
			thread_fail_locked(l, -EPROTO, "frame with nonzero reserved bytes from %s",
					   l->peer);
		else if (h[4] == TCP_FRAME_HEAD)
			e = frame_head_locked(l, h[5], off, len);
		else if (h[4] != TCP_FRAME_RECORD)
			thread_fail_locked(l, -EPROTO, "unknown frame type %u from %s", h[4],
					   l->peer);
		if (l->stop || e < 0) {
			pthread_mutex_unlock(&l->lock);
			break;
		}
		pthread_mutex_unlock(&l->lock);
		if (h[4] == TCP_FRAME_RECORD && rx_record(s, h[5], num, off, len) < 0)
			break;
	}
	return NULL;
}

/* What one write_all() handed to the kernel. */
struct tx_sent {
	uint64_t bytes; /* accepted by the socket, whole or not */
	bool zc;	/* some of them went without a copy (MSG_ZEROCOPY) ... */
	uint32_t zc_last; /* ... the last in the send numbered this */
};

/*
 * Write iov[0..n) whole, with MSG_ZEROCOPY when zc; what went is in *out,
 * also when it fails. 0, or -1 (the link failed).
 */
static int write_all(struct tcp_stream *s, struct iovec *iov, int n, bool zc, struct tx_sent *out)
{
	struct rgaps_link *l = s->l;

	while (n > 0) {
		struct msghdr msg = { .msg_iov = iov, .msg_iovlen = (size_t)(n > IOV_MAX ? IOV_MAX : n) };
		ssize_t w = sendmsg(s->fd, &msg, MSG_NOSIGNAL | (zc ? MSG_ZEROCOPY : 0));

		if (w < 0 && errno == ENOBUFS && zc) {
			zc = false; /* out of optmem for the notifications: copy this write */
			continue;
		}
		if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
			if (!wait_fd(s, POLLOUT))
				return -1;
			continue;
		}
		if (w < 0) {
			int e = errno;

			pthread_mutex_lock(&l->lock);
			thread_fail_locked(l, -e, "write to %s failed: %s", l->peer, strerror(e));
			pthread_mutex_unlock(&l->lock);
			return -1;
		}
		out->bytes += (uint64_t)w;
		if (w > 0 && zc) {
			out->zc = true;
			out->zc_last = s->zc_next++; /* the kernel numbers every send that took bytes */
			pthread_mutex_lock(&l->lock);
			l->st.zc_sends++;
			pthread_mutex_unlock(&l->lock);
		}
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

static void *tx_main(void *arg)
{
	struct tcp_stream *s = arg;
	struct rgaps_link *l = s->l;
	struct iovec iov[TCP_IOV_MAX];

	if (l->version) { /* connector: the preamble goes first on each stream */
		uint8_t pre[TCP_PREAMBLE_V2_LEN];
		struct iovec p = { pre, l->version == TCP_PREAMBLE_V1 ? TCP_PREAMBLE_V1_LEN
								      : TCP_PREAMBLE_V2_LEN };

		memcpy(pre, l->preamble, sizeof(pre));
		put_le16(pre + 24, (uint16_t)s->idx); /* (version 2: which stream this is) */
		struct tx_sent sent = { 0 };

		if (write_all(s, &p, 1, false, &sent) < 0)
			return NULL;
	}
	pthread_mutex_lock(&l->lock);
	for (;;) {
		struct tx_sent sent = { 0 };
		uint32_t first, n = 0, niov = 0;
		uint64_t bytes = 0;
		int r;

		while (!l->stop && (s->qnext == s->qtail || (!s->kick && !s->streaming)))
			pthread_cond_wait(&s->tx_cond, &l->lock);
		if (l->stop)
			break;
		s->kick = false;
		first = s->qnext;
		/* every frame queued on this stream, as many as one writev takes */
		while (first + n != s->qtail) {
			struct tx_frame *f = &l->tx[s->q[(first + n) % TCP_TX_FIFO] % TCP_TX_FIFO];

			if (niov + 1 + f->nsg > TCP_IOV_MAX)
				break;
			f->taken = true;
			if (f->type == TCP_FRAME_HEAD)
				/* on its way: a newer Head no longer replaces it */
				l->rxr[f->ring_id].head_frame = 0;
			iov[niov].iov_base = f->hdr;
			iov[niov++].iov_len = TCP_FRAME_LEN;
			for (uint32_t k = 0; k < f->nsg; k++)
				iov[niov++] = f->sg[k];
			bytes += f->len;
			n++;
		}
		s->qnext = first + n;
		pthread_mutex_unlock(&l->lock);
		r = write_all(s, iov, (int)niov, s->zc && bytes >= TCP_ZC_MIN, &sent);
		pthread_mutex_lock(&l->lock);
		/* the frames the socket took whole (all of them, unless the write failed) */
		for (uint32_t i = 0; i < n; i++) {
			struct tx_frame *f = &l->tx[s->q[(first + i) % TCP_TX_FIFO] % TCP_TX_FIFO];

			if (sent.bytes < TCP_FRAME_LEN + f->len)
				break;
			sent.bytes -= TCP_FRAME_LEN + f->len;
			/* a zerocopy send holds the source until the kernel says it is done */
			f->zc = sent.zc && (int32_t)(sent.zc_last - s->zc_done) >= 0;
			f->zc_id = sent.zc_last;
			f->written = !f->zc;
			s->qbytes -= TCP_FRAME_LEN + f->len;
		}
		if (r < 0)
			break; /* the link failed: the loop hears it */
		s->streaming = s->qnext != s->qtail; /* more came while it wrote: go on */
		uv_async_send(&l->async);
	}
	pthread_mutex_unlock(&l->lock);
	return NULL;
}

/* ------------------------------------------------------------------ link lifecycle */

static void link_handle_closed(uv_handle_t *h)
{
	link_unref(h->data);
}

static void stream_handle_closed(uv_handle_t *h)
{
	struct rgaps_link *l = h->data;

	free(h);
	link_unref(l);
}

static void link_unref(struct rgaps_link *l)
{
	struct tcp_ctx *c = l->ctx;

	if (--l->refs > 0)
		return;
	for (uint32_t i = 0; i < TCP_STREAMS_MAX; i++) {
		free(l->s[i].discard);
		pthread_cond_destroy(&l->s[i].tx_cond);
	}
	pthread_cond_destroy(&l->rx_cond);
	pthread_mutex_destroy(&l->lock);
	free(l);
	ctx_unref(c);
}

static void on_async(uv_async_t *a)
{
	struct rgaps_link *l = a->data;

	if (l->state == LINK_UP)
		link_progress(l);
}

static struct rgaps_link *link_new(struct tcp_ctx *c)
{
	struct rgaps_link *l = calloc(1, sizeof(*l));

	if (!l)
		return NULL;
	l->ctx = c;
	if (uv_tcp_init(c->loop, &l->tcp) < 0) {
		free(l);
		return NULL;
	}
	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->rx_cond, NULL);
	for (uint32_t i = 0; i < TCP_STREAMS_MAX; i++) {
		l->s[i].l = l;
		l->s[i].idx = i;
		l->s[i].fd = -1;
		pthread_cond_init(&l->s[i].tx_cond, NULL);
	}
	l->tcp.data = l;
	l->tcp_open = true;
	l->refs++;
	uv_timer_init(c->loop, &l->timer);
	l->timer.data = l;
	l->timer_open = true;
	l->refs++;
	uv_async_init(c->loop, &l->async, on_async);
	l->async.data = l;
	l->async_open = true;
	l->refs++;
	c->refs++;
	l->next = c->links;
	if (c->links)
		c->links->prev = l;
	c->links = l;
	return l;
}

/* Stop and join the streams' threads, close their sockets (lock not held). */
static void streams_stop(struct rgaps_link *l)
{
	pthread_mutex_lock(&l->lock);
	__atomic_store_n(&l->stop, true, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&l->rx_cond);
	for (uint32_t i = 0; i < l->nstreams; i++)
		pthread_cond_signal(&l->s[i].tx_cond);
	pthread_mutex_unlock(&l->lock);
	/* Ends every recv, writev and poll of the threads at once. */
	for (uint32_t i = 0; i < l->nstreams; i++) {
		struct tcp_stream *s = &l->s[i];

		if (s->fd < 0)
			continue;
		if (s->zc) {
			/* The kernel would go on sending what it queued after close, from pages
			 * of ours (zerocopy): a reset drops it now. */
			struct linger lg = { .l_onoff = 1, .l_linger = 0 };

			setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		}
		shutdown(s->fd, SHUT_RDWR);
	}
	for (uint32_t i = 0; i < l->nstreams; i++) {
		struct tcp_stream *s = &l->s[i];

		if (s->rx_on)
			pthread_join(s->rx_thread, NULL);
		if (s->tx_on)
			pthread_join(s->tx_thread, NULL);
		s->rx_on = s->tx_on = false;
		if (s->fd >= 0)
			close(s->fd);
		s->fd = -1;
	}
}

/*
 * Stop everything: the threads are joined and the sockets closed at once (the
 * kernel keeps no pointer into source or ring memory after this returns),
 * memory goes when the handles' close callbacks have run. libuv writes still
 * queued (a connector's preamble) complete with UV_ECANCELED and are ignored.
 */
static void link_teardown(struct rgaps_link *l)
{
	struct tcp_ctx *c = l->ctx;

	if (l->state == LINK_DEAD)
		return;
	if (l->state == LINK_RESOLVING)
		uv_cancel((uv_req_t *)&l->gai); /* its callback still comes, and unrefs */
	l->state = LINK_DEAD;
	if (l->pending_counted) {
		c->npending--;
		l->pending_counted = false;
	}
	c->npending -= (int)l->pending_members;
	l->pending_members = 0;
	if (l->prev)
		l->prev->next = l->next;
	else if (c->links == l)
		c->links = l->next;
	if (l->next)
		l->next->prev = l->prev;
	l->prev = l->next = NULL;
	streams_stop(l);
	for (uint32_t i = 1; i < TCP_STREAMS_MAX; i++) {
		if (l->s[i].h) {
			uv_close((uv_handle_t *)l->s[i].h, stream_handle_closed);
			l->s[i].h = NULL;
		}
	}
	if (l->tcp_open) {
		uv_read_stop((uv_stream_t *)&l->tcp);
		uv_close((uv_handle_t *)&l->tcp, link_handle_closed);
		l->tcp_open = false;
	}
	if (l->timer_open) {
		uv_timer_stop(&l->timer);
		uv_close((uv_handle_t *)&l->timer, link_handle_closed);
		l->timer_open = false;
	}
	if (l->async_open) {
		uv_close((uv_handle_t *)&l->async, link_handle_closed);
		l->async_open = false;
	}
}

/*
 * The link failed. Tear it down, then tell the core: a connect that never came
 * up gets link_connected(err); an up link first completes every record still
 * queued or in flight (record_sent: 0 for those written, else err, so the core
 * can release their chunks) and then gets link_down. A link the core never saw
 * is only logged. The core may close the link, or call fini, from any of these
 * callbacks: then we stop.
 */
static void link_fail(struct rgaps_link *l, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void link_fail(struct rgaps_link *l, int err, const char *fmt, ...)
{
	struct tcp_ctx *c = l->ctx;
	enum link_state prev = l->state;
	char why[TCP_WHY_LEN];
	va_list ap;

	if (prev == LINK_DEAD)
		return;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	link_teardown(l);
	if (!l->known || l->silent) {
		/* Only this plugin and the admission saw it (a bad or missing preamble): say so,
		 * through the host where it keeps them (its log is rate-limited: anyone can make
		 * these). */
		if (l->admitted) {
			l->admitted = false;
			c->env.conn_settled(c->env.admit_arg, l, why);
		} else if (!l->known) {
			tcp_log(c, 1, "data link from %s dropped: %s", l->peer, why);
		}
		return;
	}
	/* Keep the memory across the callbacks even if a handle close completes meanwhile. */
	l->refs++;
	if (prev == LINK_RESOLVING || prev == LINK_CONNECTING) {
		c->cbs.link_connected(c->cbs.arg, l, err);
		goto out;
	}
	tcp_log(c, 2, "data link %s down: %s", l->peer, why); /* the core reports it */
	/*
	 * The threads are gone: the frames' flags hold still now. A zerocopy send
	 * whose completion never came went whole to the kernel, which let go of its
	 * pages when the socket closed (a NIC still sending one reads it for a dead
	 * peer): written too.
	 */
	while (l->tx_done != l->tx_end && !l->silent) {
		struct tx_frame *f = &l->tx[l->tx_done++ % TCP_TX_FIFO];

		if (f->type == TCP_FRAME_RECORD && c->cbs.record_sent)
			c->cbs.record_sent(c->cbs.arg, l, f->cookie,
					   f->written || f->zc ? 0 : err);
	}
	if (!l->silent)
		c->cbs.link_down(c->cbs.arg, l, err, why);
out:
	l->silent = true;
	link_unref(l);
}

/*
 * Take the socket of owner's connection h for stream s: a dup, and libuv's
 * handle closes (it was only read for the preamble; its epoll registration
 * goes with it). h is owner->tcp or, on a connector, the stream's own handle.
 */
static int stream_adopt(struct tcp_stream *s, struct rgaps_link *owner, uv_tcp_t *h)
{
	int one = 1, fd;
	uv_os_fd_t ufd;

	if (uv_fileno((uv_handle_t *)h, &ufd) < 0)
		return -EBADF;
	fd = fcntl(ufd, F_DUPFD_CLOEXEC, 3);
	if (fd < 0)
		return -errno;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	s->fd = fd;
	if (owner->ctx->zerocopy) {
		s->zc = setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) == 0;
		if (!s->zc)
			tcp_log(owner->ctx, 1, "zerocopy refused on a data link to %s (%s): copies",
				owner->peer, strerror(errno));
	}
	uv_read_stop((uv_stream_t *)h);
	if (h == &owner->tcp) {
		uv_close((uv_handle_t *)h, link_handle_closed);
		owner->tcp_open = false;
	} else {
		uv_close((uv_handle_t *)h, stream_handle_closed);
		s->h = NULL;
	}
	return 0;
}

/* Every stream has its socket: start the threads (connector: each writes its preamble first). */
static int streams_start(struct rgaps_link *l)
{
	for (uint32_t i = 0; i < l->nstreams; i++) {
		struct tcp_stream *s = &l->s[i];
		int r;

		s->discard = malloc(TCP_DISCARD_BUF);
		if (!s->discard)
			return -ENOMEM;
		r = pthread_create(&s->tx_thread, NULL, tx_main, s);
		if (r)
			return -r;
		s->tx_on = true;
		r = pthread_create(&s->rx_thread, NULL, rx_main, s);
		if (r)
			return -r;
		s->rx_on = true;
		{
			char name[16];

			snprintf(name, sizeof(name), "rgaps-tcp-tx%u", i);
			pthread_setname_np(s->tx_thread, name);
			snprintf(name, sizeof(name), "rgaps-tcp-rx%u", i);
			pthread_setname_np(s->rx_thread, name);
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ on the loop: the threads' news */

/* Records written: record_sent in posting order (a frame waits for those posted before it). */
static void deliver_sent(struct rgaps_link *l)
{
	struct tcp_ctx *c = l->ctx;

	for (;;) {
		struct tx_frame *f;
		uint64_t cookie;

		pthread_mutex_lock(&l->lock);
		f = &l->tx[l->tx_done % TCP_TX_FIFO];
		if (l->tx_done == l->tx_end || !f->written) {
			pthread_mutex_unlock(&l->lock);
			return;
		}
		l->tx_done++;
		if (f->type == TCP_FRAME_HEAD) {
			l->tx_heads--;
			pthread_mutex_unlock(&l->lock);
			continue;
		}
		l->tx_records--;
		l->tx_bytes -= f->len;
		l->st.records_sent++;
		l->st.bytes_sent += f->len;
		cookie = f->cookie;
		pthread_mutex_unlock(&l->lock);
		c->cbs.record_sent(c->cbs.arg, l, cookie, 0);
		if (l->state != LINK_UP)
			return;
	}
}

/*
 * New Heads of our out rings: head_update with the newest of each. None for a ring
 * detached since its reader saw the Head (the core may have freed the ring's id, or a
 * head_update callback of this round may detach the next ring).
 */
static void deliver_heads(struct rgaps_link *l)
{
	struct tcp_ctx *c = l->ctx;

	pthread_mutex_lock(&l->lock);
	if (!l->heads_new) {
		pthread_mutex_unlock(&l->lock);
		return;
	}
	l->heads_new = false;
	for (uint32_t i = 0; i < TCP_RINGS && l->state == LINK_UP; i++) {
		struct tx_ring *t = &l->txr[i];
		uint64_t head = t->head_in;

		if (!t->head_new)
			continue;
		t->head_new = false;
		if (t->state != RING_PREPARED && t->state != RING_CONNECTED)
			continue;
		pthread_mutex_unlock(&l->lock);
		c->cbs.head_update(c->cbs.arg, l, i, head);
		pthread_mutex_lock(&l->lock);
	}
	pthread_mutex_unlock(&l->lock);
}

/* record_header questions, in record order: the answer goes back to the reader that waits. */
static void deliver_headers(struct rgaps_link *l)
{
	struct tcp_ctx *c = l->ctx;

	for (;;) {
		uint32_t q, no, ring_id, gen;
		struct tcp_stream *s;
		uint64_t off, len;
		bool can, live;
		void *to = NULL;

		pthread_mutex_lock(&l->lock);
		if (l->hdr_head == l->hdr_tail) {
			pthread_mutex_unlock(&l->lock);
			return;
		}
		no = l->hdr_head++;
		q = no % TCP_RX_WINDOW;
		s = &l->s[l->rx_asks[q].stream];
		ring_id = l->rx_asks[q].ring_id;
		gen = l->rx_asks[q].gen;
		off = l->rx_asks[q].off;
		len = l->rx_asks[q].len;
		can = l->rx_asks[q].can_redirect;
		live = l->rxr[ring_id].state == RING_ATTACHED && l->rxr[ring_id].gen == gen;
		pthread_mutex_unlock(&l->lock);
		if (live) /* none for a ring the core detached meanwhile */
			to = c->cbs.record_header(c->cbs.arg, l, ring_id, off, len, can);
		if (l->state != LINK_UP)
			return;
		pthread_mutex_lock(&l->lock);
		l->rx_slots[l->rx_asks[q].no % TCP_RX_WINDOW].told = true;
		if (s->asking && s->ask_no == no && !s->answered) {
			s->redirect = can ? to : NULL;
			s->answered = true;
			pthread_cond_broadcast(&l->rx_cond);
		}
		pthread_mutex_unlock(&l->lock);
	}
}

/* Records read whole: record_landed in record order (ring order, per ring). */
static void deliver_landed(struct rgaps_link *l)
{
	struct tcp_ctx *c = l->ctx;

	for (;;) {
		struct rx_slot *slot, got;

		pthread_mutex_lock(&l->lock);
		slot = &l->rx_slots[l->rx_deliver % TCP_RX_WINDOW];
		if (l->rx_deliver == l->rx_next || !slot->told ||
		    (slot->state != SLOT_LANDED && slot->state != SLOT_DROPPED)) {
			pthread_mutex_unlock(&l->lock);
			return;
		}
		got = *slot;
		slot->state = SLOT_FREE;
		l->rx_deliver++;
		if (l->slot_waiting)
			pthread_cond_broadcast(&l->rx_cond);
		if (got.state == SLOT_LANDED && (l->rxr[got.ring_id].state != RING_ATTACHED ||
						 l->rxr[got.ring_id].gen != got.gen))
			got.state = SLOT_DROPPED; /* detached since it landed */
		pthread_mutex_unlock(&l->lock);
		if (got.state == SLOT_LANDED)
			c->cbs.record_landed(c->cbs.arg, l, got.ring_id, got.off, got.len);
		if (l->state != LINK_UP)
			return;
	}
}

/* On the loop: whatever the threads have done since the last time, in order. */
static void link_progress(struct rgaps_link *l)
{
	int err;

	deliver_sent(l);
	if (l->state == LINK_UP)
		deliver_heads(l);
	if (l->state == LINK_UP && l->ctx->cbs.record_header)
		deliver_headers(l);
	if (l->state == LINK_UP)
		deliver_landed(l);
	if (l->state != LINK_UP)
		return;
	pthread_mutex_lock(&l->lock);
	err = l->thread_err;
	pthread_mutex_unlock(&l->lock);
	if (err)
		link_fail(l, err, "%s", l->thread_why); /* the threads wrote it before err */
}

/* ------------------------------------------------------------------ send */

static void on_prepare(uv_prepare_t *p)
{
	struct tcp_ctx *c = p->data;

	for (struct rgaps_link *l = c->links; l; l = l->next)
		link_flush(l);
	uv_prepare_stop(p);
}

/* Wake the writers of every stream with frames queued. */
static void link_flush(struct rgaps_link *l)
{
	if (l->state != LINK_UP || !l->unsent_bytes)
		return;
	pthread_mutex_lock(&l->lock);
	for (uint32_t i = 0; i < l->nstreams; i++) {
		struct tcp_stream *s = &l->s[i];

		if (s->qnext != s->qtail && !s->kick) {
			s->kick = true;
			pthread_cond_signal(&s->tx_cond);
		}
	}
	l->unsent_bytes = 0;
	pthread_mutex_unlock(&l->lock);
}

/* Frames were queued: the writers wake at flush() or, at the latest, before the loop sleeps. */
static void queued(struct rgaps_link *l)
{
	struct tcp_ctx *c = l->ctx;

	if (l->unsent_bytes >= TCP_BATCH_BYTES)
		link_flush(l);
	else if (c->prepare_open)
		uv_prepare_start(&c->prepare, on_prepare);
}

/* The stream with the fewest bytes queued, ties taken in turn (lock held). */
static struct tcp_stream *pick_stream(struct rgaps_link *l)
{
	uint32_t first = l->tx_seq % l->nstreams;
	struct tcp_stream *best = &l->s[first];

	for (uint32_t k = 1; k < l->nstreams; k++) {
		struct tcp_stream *s = &l->s[(first + k) % l->nstreams];

		if (s->qbytes < best->qbytes)
			best = s;
	}
	return best;
}

/* Queue frame f on stream s (lock held). */
static void enqueue_locked(struct rgaps_link *l, struct tcp_stream *s, struct tx_frame *f)
{
	f->stream = (uint8_t)s->idx;
	f->taken = f->written = f->zc = false;
	s->q[s->qtail++ % TCP_TX_FIFO] = l->tx_end;
	s->qbytes += TCP_FRAME_LEN + f->len;
	l->tx_end++;
	l->unsent_bytes += TCP_FRAME_LEN + f->len;
}

/* ------------------------------------------------------------------ listen / accept */

static void on_preamble_timeout(uv_timer_t *t)
{
	struct rgaps_link *l = t->data;

	if (l->state == LINK_FORMING)
		link_fail(l, -ETIMEDOUT, "only %u of %u streams came within %d ms", l->nconnected,
			  l->nstreams, TCP_PREAMBLE_TIMEOUT_MS);
	else
		link_fail(l, -ETIMEDOUT, "no preamble within %d ms", TCP_PREAMBLE_TIMEOUT_MS);
}

/* Every stream of listener-side link l is here: up, and offered to the core. */
static void accepted_up(struct rgaps_link *l)
{
	struct tcp_ctx *c = l->ctx;
	int r;

	uv_timer_stop(&l->timer);
	if (l->pending_counted) {
		c->npending--;
		l->pending_counted = false;
	}
	if (l->admitted) {
		l->admitted = false;
		c->env.conn_settled(c->env.admit_arg, l, NULL);
	}
	c->npending -= (int)l->pending_members;
	l->pending_members = 0;
	l->state = LINK_UP;
	l->version = 0; /* the listener writes no preamble */
	r = streams_start(l);
	if (r < 0) {
		link_fail(l, r, "cannot start the data link's threads: %s", strerror(-r));
		return;
	}
	l->known = true;
	/* The core closes it (close()) if it does not know the token. */
	c->cbs.link_accepted(c->cbs.arg, l, l->token);
}

/* Pending connection p, one stream of a several-stream link, joins its link (or starts it). */
static void join_group(struct rgaps_link *p, uint32_t idx, uint32_t count)
{
	struct tcp_ctx *c = p->ctx;
	struct rgaps_link *g;
	int r;

	for (g = c->links; g; g = g->next)
		if (g->state == LINK_FORMING && g != p && g->nstreams == count &&
		    memcmp(g->token, p->token, RGAPS_LINK_TOKEN_LEN) == 0)
			break;
	if (!g) {
		/* the first of its streams: this connection becomes the link */
		g = p;
		g->state = LINK_FORMING;
		g->nstreams = count;
		g->nconnected = 0;
	} else if (g->s[idx].fd >= 0) {
		link_fail(p, -EPROTO, "stream %u of a data link came twice", idx);
		return;
	}
	r = stream_adopt(&g->s[idx], p, &p->tcp);
	if (r < 0) {
		link_fail(p, r, "cannot take the connection from %s: %s", p->peer, strerror(-r));
		return;
	}
	g->nconnected++;
	if (g != p) {
		/*
		 * Its pending place moves to the link it joined; the connection's shell goes,
		 * and with it its place in the host's admission (its preamble is whole: the
		 * link's first stream keeps the link's place until it forms or fails).
		 */
		if (p->pending_counted) {
			p->pending_counted = false;
			g->pending_members++;
		}
		if (p->admitted) {
			p->admitted = false;
			c->env.conn_settled(c->env.admit_arg, p, NULL);
		}
		p->silent = true;
		link_teardown(p);
	}
	if (g->nconnected == g->nstreams)
		accepted_up(g);
}

/* The preamble is whole (on_read checked its magic and version). */
static void preamble_done(struct rgaps_link *l)
{
	uint32_t version = get_le32(l->preamble + 4);
	uint32_t idx, count;
	int r;

	memcpy(l->token, l->preamble + 8, RGAPS_LINK_TOKEN_LEN);
	if (version == TCP_PREAMBLE_V1) {
		l->nstreams = 1;
		r = stream_adopt(&l->s[0], l, &l->tcp);
		if (r < 0) {
			link_fail(l, r, "cannot take the connection from %s: %s", l->peer,
				  strerror(-r));
			return;
		}
		accepted_up(l);
		return;
	}
	idx = get_le16(l->preamble + 24);
	count = get_le16(l->preamble + 26);
	if (get_le32(l->preamble + 28) || count < 2 || count > TCP_STREAMS_MAX || idx >= count) {
		link_fail(l, -EPROTO,
			  "preamble for stream %" PRIu32 " of %" PRIu32 " (at most %u, reserved 0)",
			  idx, count, TCP_STREAMS_MAX);
		return;
	}
	join_group(l, idx, count);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct rgaps_link *l = h->data;
	uint32_t want = TCP_PREAMBLE_V1_LEN;

	if (l->rx_have >= 8 && get_le32(l->preamble + 4) == TCP_PREAMBLE_V2)
		want = TCP_PREAMBLE_V2_LEN;
	else if (l->rx_have < 8)
		want = 8; /* magic and version first: they say how long the rest is */
	/* never more than the preamble: the frames after it are the threads' */
	*buf = uv_buf_init((char *)l->preamble + l->rx_have, want - l->rx_have);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct rgaps_link *l = s->data;
	uint32_t magic, version;

	if (l->state != LINK_PREAMBLE || nread == 0)
		return;
	if (nread < 0) {
		if (nread == UV_EOF)
			link_fail(l, -ECONNRESET, "%s closed the data link", l->peer);
		else
			link_fail(l, (int)nread, "read from %s failed: %s", l->peer,
				  uv_strerror((int)nread));
		return;
	}
	l->rx_have += (uint32_t)nread;
	if (l->rx_have < 8)
		return;
	magic = get_le32(l->preamble);
	version = get_le32(l->preamble + 4);
	if (magic != TCP_PREAMBLE_MAGIC) {
		link_fail(l, -EPROTO, "bad preamble magic 0x%08" PRIx32 " (not an rgaps data link)",
			  magic);
		return;
	}
	if (version != TCP_PREAMBLE_V1 && version != TCP_PREAMBLE_V2) {
		link_fail(l, -EPROTO, "data link version %" PRIu32 ", this side speaks 1 and 2",
			  version);
		return;
	}
	if (l->rx_have == (version == TCP_PREAMBLE_V1 ? TCP_PREAMBLE_V1_LEN : TCP_PREAMBLE_V2_LEN))
		preamble_done(l);
}

static void on_connection(uv_stream_t *server, int status)
{
	struct tcp_ctx *c = server->data;
	struct sockaddr_storage ss;
	int namelen = sizeof(ss);
	struct rgaps_link *l;
	int r;

	if (status < 0) {
		tcp_log(c, 1, "accept failed: %s", uv_strerror(status));
		return;
	}
	l = link_new(c);
	if (!l) {
		tcp_log(c, 0, "out of memory accepting a data link");
		return;
	}
	l->state = LINK_PREAMBLE;
	snprintf(l->peer, sizeof(l->peer), "?");
	r = uv_accept(server, (uv_stream_t *)&l->tcp);
	if (r < 0) {
		link_fail(l, r, "accept failed: %s", uv_strerror(r));
		return;
	}
	r = uv_tcp_getpeername(&l->tcp, (struct sockaddr *)&ss, &namelen);
	if (r < 0) {
		link_fail(l, r, "accepted, but its address is unknown: %s", uv_strerror(r));
		return;
	}
	addr_name((struct sockaddr *)&ss, l->peer, sizeof(l->peer), &l->port);
	if (rgaps_plugin_env_has_admission(&c->env)) {
		/* Bounded per source, a place kept for configured peers: the host decides. */
		if (c->env.conn_pending(c->env.admit_arg, l, &ss, (uint32_t)namelen)) {
			link_teardown(l); /* refused: counted and logged by the host */
			return;
		}
		l->admitted = true;
	} else if (c->npending >= TCP_PENDING_MAX) {
		link_fail(l, -EBUSY, "%d connections already wait for their preamble",
			  TCP_PENDING_MAX);
		return;
	}
	c->npending++;
	l->pending_counted = true;
	uv_tcp_nodelay(&l->tcp, 1);
	set_sockbufs(c, (uv_handle_t *)&l->tcp);
	uv_timer_start(&l->timer, on_preamble_timeout, TCP_PREAMBLE_TIMEOUT_MS, 0);
	r = uv_read_start((uv_stream_t *)&l->tcp, on_alloc, on_read);
	if (r < 0)
		link_fail(l, r, "read from %s failed: %s", l->peer, uv_strerror(r));
}

/* ------------------------------------------------------------------ connect */

static void on_connect(uv_connect_t *req, int status)
{
	struct tcp_stream *s = req->data;
	struct rgaps_link *l = s->l;
	struct tcp_ctx *c = l->ctx;
	int r;

	if (l->state == LINK_DEAD)
		return;
	if (status < 0) {
		link_fail(l, status, "connect to %s failed: %s", l->peer, uv_strerror(status));
		return;
	}
	s->connected = true;
	if (++l->nconnected < l->nstreams)
		return;
	/* Every stream is connected: take the sockets and start the threads. */
	for (uint32_t i = 0; i < l->nstreams; i++) {
		r = stream_adopt(&l->s[i], l, i ? l->s[i].h : &l->tcp);
		if (r < 0) {
			link_fail(l, r, "cannot take the connection to %s: %s", l->peer,
				  strerror(-r));
			return;
		}
	}
	put_le32(l->preamble, TCP_PREAMBLE_MAGIC);
	put_le32(l->preamble + 4, l->version);
	memcpy(l->preamble + 8, l->token, RGAPS_LINK_TOKEN_LEN);
	put_le16(l->preamble + 26, (uint16_t)l->nstreams);
	put_le32(l->preamble + 28, 0);
	l->state = LINK_UP;
	r = streams_start(l);
	if (r < 0) {
		l->state = LINK_CONNECTING; /* reported as a failed connect */
		link_fail(l, r, "cannot start the data link's threads: %s", strerror(-r));
		return;
	}
	c->cbs.link_connected(c->cbs.arg, l, 0);
}

static int start_connect(struct rgaps_link *l, const struct sockaddr *sa)
{
	struct tcp_ctx *c = l->ctx;
	int r;

	addr_name(sa, l->peer, sizeof(l->peer), NULL);
	l->state = LINK_CONNECTING;
	for (uint32_t i = 0; i < l->nstreams; i++) {
		struct tcp_stream *s = &l->s[i];
		uv_tcp_t *h = &l->tcp;

		if (i) {
			r = handle_new(c, l, &h);
			if (r < 0)
				return r;
			s->h = h;
			l->refs++;
		}
		s->creq.data = s;
		r = uv_tcp_connect(&s->creq, h, sa, on_connect);
		if (r < 0)
			return r;
		/* After the SYN, but the window scale already allows tcp_rmem's maximum. */
		set_sockbufs(c, (uv_handle_t *)h);
	}
	return 0;
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	struct rgaps_link *l = req->data;
	int r;

	if (l->state == LINK_DEAD) {
		uv_freeaddrinfo(res);
		link_unref(l); /* the request's reference */
		return;
	}
	if (status < 0 || !res) {
		link_fail(l, status < 0 ? status : -ENOENT, "cannot resolve %s: %s", l->peer,
			  status < 0 ? uv_strerror(status) : "no address");
		uv_freeaddrinfo(res);
		link_unref(l);
		return;
	}
	r = start_connect(l, res->ai_addr);
	uv_freeaddrinfo(res);
	if (r < 0)
		link_fail(l, r, "connect to %s failed: %s", l->peer, uv_strerror(r));
	link_unref(l);
}

/* ------------------------------------------------------------------ operations */

static int tcp_init(const struct rgaps_plugin_env *env, const struct rgaps_transport_cbs *cbs,
		    void **ctx_p)
{
	struct tcp_ctx *c;

	if (!env || !cbs || !env->uv_loop)
		return -EINVAL; /* tcp runs on the daemon's loop only */
	if (!cbs->link_accepted || !cbs->link_connected || !cbs->link_down || !cbs->record_landed ||
	    !cbs->record_sent || !cbs->head_update)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	memcpy(&c->env, env, env->struct_size < sizeof(c->env) ? env->struct_size : sizeof(c->env));
	c->cbs = *cbs;
	c->loop = env->uv_loop;
	c->refs = 1;
	c->sndbuf = (int)opt_value(env, OPT_SNDBUF);
	c->rcvbuf = (int)opt_value(env, OPT_RCVBUF);
	c->streams = (uint32_t)opt_value(env, OPT_STREAMS);
	c->zerocopy = opt_value(env, OPT_ZEROCOPY) != 0;
	if ((c->sndbuf || c->rcvbuf || c->streams > 1 || c->zerocopy) && env->log)
		env->log(2, "tcp: options: sndbuf %d, rcvbuf %d (0: autotuned), streams %u, "
			    "zerocopy %d",
			 c->sndbuf, c->rcvbuf, c->streams, c->zerocopy);
	uv_prepare_init(c->loop, &c->prepare);
	c->prepare.data = c;
	c->prepare_open = true;
	c->refs++;
	*ctx_p = c;
	return 0;
}

static void tcp_fini(void *ctx)
{
	struct tcp_ctx *c = ctx;

	if (!c)
		return;
	c->finalizing = true;
	while (c->links) {
		c->links->silent = true;
		link_teardown(c->links);
	}
	if (c->listening) {
		uv_close((uv_handle_t *)c->listener, listener_closed);
		c->listener = NULL;
		c->listening = false;
	}
	if (c->prepare_open) {
		uv_close((uv_handle_t *)&c->prepare, ctx_handle_closed);
		c->prepare_open = false;
	}
	ctx_unref(c);
}

static int tcp_probe(void *ctx, char *why, size_t whylen)
{
	if (why && whylen)
		snprintf(why, whylen, "TCP is always available");
	return 0;
}

static int tcp_listen(void *ctx, const char *host, uint16_t port)
{
	struct tcp_ctx *c = ctx;
	struct sockaddr_storage ss;
	uv_getaddrinfo_t req;
	const struct addrinfo hints = { .ai_family = AF_UNSPEC,
					.ai_socktype = SOCK_STREAM,
					.ai_flags = AI_PASSIVE };
	char portstr[8];
	uv_tcp_t *l;
	int r;

	if (c->listening || c->finalizing)
		return -EALREADY;
	if (parse_numeric(host, port, &ss) < 0) {
		/* A name: resolved once, synchronously, at set-up time. */
		snprintf(portstr, sizeof(portstr), "%u", port);
		r = uv_getaddrinfo(c->loop, &req, NULL, host, portstr, &hints);
		if (r < 0) {
			tcp_log(c, 0, "cannot resolve listen address %s: %s", host, uv_strerror(r));
			return r;
		}
		memcpy(&ss, req.addrinfo->ai_addr, req.addrinfo->ai_addrlen);
		uv_freeaddrinfo(req.addrinfo);
	}
	r = handle_new(c, c, &l);
	if (r < 0)
		return r;
	c->refs++;
	r = uv_tcp_bind(l, (struct sockaddr *)&ss, 0);
	if (r == 0)
		r = uv_listen((uv_stream_t *)l, 128, on_connection);
	if (r < 0) {
		tcp_log(c, 0, "cannot listen on %s:%u: %s", host, port, uv_strerror(r));
		uv_close((uv_handle_t *)l, listener_closed);
		return r;
	}
	c->listener = l;
	c->listening = true;
	tcp_log(c, 3, "listening for data links on %s:%u", host, port);
	return 0;
}

static int tcp_connect(void *ctx, const char *host, uint16_t port,
		       const uint8_t token[RGAPS_LINK_TOKEN_LEN], struct rgaps_link **link_p)
{
	struct tcp_ctx *c = ctx;
	const struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct sockaddr_storage ss;
	struct rgaps_link *l;
	char portstr[8];
	int r;

	if (c->finalizing)
		return -ESHUTDOWN;
	l = link_new(c);
	if (!l)
		return -ENOMEM;
	memcpy(l->token, token, RGAPS_LINK_TOKEN_LEN);
	l->port = port;
	l->nstreams = c->streams;
	/* One stream speaks version 1, which every rgaps tcp transport understands. */
	l->version = l->nstreams > 1 ? TCP_PREAMBLE_V2 : TCP_PREAMBLE_V1;
	if (parse_numeric(host, port, &ss) == 0) {
		r = start_connect(l, (struct sockaddr *)&ss);
	} else {
		snprintf(l->peer, sizeof(l->peer), "%s:%u", host, port);
		snprintf(portstr, sizeof(portstr), "%u", port);
		l->gai.data = l;
		l->state = LINK_RESOLVING;
		l->refs++;
		r = uv_getaddrinfo(c->loop, &l->gai, on_resolved, host, portstr, &hints);
		if (r < 0) {
			l->refs--;
			l->state = LINK_CONNECTING;
		}
	}
	if (r < 0) {
		l->silent = true;
		link_teardown(l);
		return r;
	}
	l->known = true;
	*link_p = l;
	return 0;
}

static void tcp_close(void *ctx, struct rgaps_link *l)
{
	if (!l)
		return;
	l->silent = true;
	link_teardown(l);
}

static int tcp_reg_local(void *ctx, void *addr, uint64_t len, void **mr_p)
{
	struct tcp_mr *mr;

	if (!addr || !len)
		return -EINVAL;
	mr = malloc(sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	mr->addr = addr;
	mr->len = len;
	*mr_p = mr;
	return 0;
}

static void tcp_dereg_local(void *ctx, void *mr)
{
	free(mr);
}

static int tcp_sender_ring_prepare(void *ctx, struct rgaps_link *l, uint32_t ring_id, uint8_t *desc,
				   size_t *desc_len_p)
{
	if (!l || l->state != LINK_UP)
		return -ENOTCONN;
	if (ring_id >= TCP_RINGS)
		return -EINVAL;
	pthread_mutex_lock(&l->lock);
	if (l->txr[ring_id].state == RING_PREPARED || l->txr[ring_id].state == RING_CONNECTED) {
		pthread_mutex_unlock(&l->lock);
		return -EBUSY;
	}
	l->txr[ring_id].state = RING_PREPARED;
	l->txr[ring_id].size = 0;
	l->txr[ring_id].head_new = false;
	pthread_mutex_unlock(&l->lock);
	/* The Delayed Head word is this side's: the peer only needs to name the ring. */
	put_le32(desc, TCP_DESC_HEAD_MAGIC);
	desc[4] = TCP_DESC_VERSION;
	desc[5] = (uint8_t)ring_id;
	desc[6] = 0;
	desc[7] = 0;
	*desc_len_p = TCP_DESC_HEAD_LEN;
	return 0;
}

static int tcp_receiver_ring_attach(void *ctx, struct rgaps_link *l, uint32_t ring_id, void *ring,
				    uint64_t size, const uint8_t *peer_desc, size_t peer_desc_len,
				    uint8_t *desc, size_t *desc_len_p)
{
	struct tcp_ctx *c = ctx;
	struct rx_ring *r;

	if (!l || l->state != LINK_UP)
		return -ENOTCONN;
	if (ring_id >= TCP_RINGS || !ring || !size)
		return -EINVAL;
	if (!peer_desc || peer_desc_len != TCP_DESC_HEAD_LEN ||
	    get_le32(peer_desc) != TCP_DESC_HEAD_MAGIC || peer_desc[4] != TCP_DESC_VERSION ||
	    peer_desc[5] != ring_id) {
		tcp_log(c, 1, "ring %" PRIu32 " from %s: not a tcp sender descriptor for this ring",
			ring_id, l->peer);
		return -EINVAL;
	}
	pthread_mutex_lock(&l->lock);
	r = &l->rxr[ring_id];
	if (r->state == RING_ATTACHED) {
		pthread_mutex_unlock(&l->lock);
		return -EBUSY;
	}
	/* a detached ring's readers are gone (ring_detach waited for them) */
	{
		uint32_t gen = r->gen + 1;

		memset(r, 0, sizeof(*r));
		r->gen = gen;
	}
	r->base = ring;
	r->size = size;
	r->state = RING_ATTACHED;
	pthread_mutex_unlock(&l->lock);
	put_le32(desc, TCP_DESC_RING_MAGIC);
	desc[4] = TCP_DESC_VERSION;
	desc[5] = (uint8_t)ring_id;
	desc[6] = 0;
	desc[7] = 0;
	put_le64(desc + 8, size);
	*desc_len_p = TCP_DESC_RING_LEN;
	return 0;
}

static int tcp_sender_ring_connect(void *ctx, struct rgaps_link *l, uint32_t ring_id,
				   const uint8_t *desc, size_t desc_len)
{
	struct tcp_ctx *c = ctx;
	uint64_t size;

	if (!l || l->state != LINK_UP)
		return -ENOTCONN;
	if (ring_id >= TCP_RINGS)
		return -EINVAL;
	if (l->txr[ring_id].state != RING_PREPARED)
		return -EINVAL; /* prepare first, once */
	if (!desc || desc_len != TCP_DESC_RING_LEN || get_le32(desc) != TCP_DESC_RING_MAGIC ||
	    desc[4] != TCP_DESC_VERSION || desc[5] != ring_id) {
		tcp_log(c, 1, "ring %" PRIu32 " to %s: not a tcp ring descriptor for this ring",
			ring_id, l->peer);
		return -EINVAL;
	}
	size = get_le64(desc + 8);
	if (!size)
		return -EINVAL;
	pthread_mutex_lock(&l->lock);
	l->txr[ring_id].size = size;
	l->txr[ring_id].state = RING_CONNECTED;
	pthread_mutex_unlock(&l->lock);
	return 0;
}

/*
 * The ring goes: no more writes into its memory, nor where record_header sent
 * its records. A reader inside a recv into it is waited for (one bounded,
 * non-blocking copy); the rest of its record goes to the sink.
 */
static void tcp_ring_detach(void *ctx, struct rgaps_link *l, uint32_t ring_id)
{
	if (!l || ring_id >= TCP_RINGS)
		return;
	pthread_mutex_lock(&l->lock);
	if (l->txr[ring_id].state != RING_NONE) {
		l->txr[ring_id].state = RING_DETACHED;
		l->txr[ring_id].head_new = false; /* seen by a reader, not yet told: never */
	}
	if (l->rxr[ring_id].state != RING_NONE) {
		struct rx_ring *r = &l->rxr[ring_id];

		r->state = RING_DETACHED;
		r->base = NULL;
		while (r->writers)
			pthread_cond_wait(&l->rx_cond, &l->lock);
		/* readers waiting for a record_header answer for it get none: into the sink */
		for (uint32_t i = 0; i < l->nstreams; i++) {
			struct tcp_stream *s = &l->s[i];

			if (s->asking && !s->answered && s->ask_ring == ring_id) {
				s->redirect = NULL;
				s->answered = true;
			}
		}
		pthread_cond_broadcast(&l->rx_cond);
	}
	pthread_mutex_unlock(&l->lock);
}

static int tcp_post_record(void *ctx, struct rgaps_link *l, uint32_t ring_id, uint64_t off,
			   const struct rgaps_sg *sg, uint32_t nsg, uint64_t cookie)
{
	struct tx_frame *f;
	uint64_t total = 0;
	struct tx_ring *t;
	uint32_t k;

	if (!l || l->state != LINK_UP)
		return -ENOTCONN;
	if (ring_id >= TCP_RINGS || !sg || nsg == 0 || nsg > RGAPS_RECORD_SG_MAX)
		return -EINVAL;
	t = &l->txr[ring_id];
	if (t->state != RING_CONNECTED)
		return -EINVAL;
	for (k = 0; k < nsg; k++) {
		const struct tcp_mr *mr = sg[k].mr;
		const uint8_t *a = sg[k].addr;

		if (!mr || a < mr->addr || sg[k].len > mr->len ||
		    (uint64_t)(a - mr->addr) > mr->len - sg[k].len)
			return -EINVAL;
		total += sg[k].len;
	}
	if (total == 0 || off > t->size || total > t->size - off)
		return -EINVAL;
	pthread_mutex_lock(&l->lock);
	if (l->tx_records >= TCP_TX_RECORDS ||
	    (l->tx_records && l->tx_bytes + total > TCP_TX_BYTES) ||
	    l->tx_end - l->tx_done >= TCP_TX_FIFO) {
		l->st.send_credit_stalls++;
		pthread_mutex_unlock(&l->lock);
		return -EAGAIN;
	}
	f = &l->tx[l->tx_end % TCP_TX_FIFO];
	frame_encode(f->hdr, TCP_FRAME_RECORD, (uint8_t)ring_id,
		     l->nstreams > 1 ? (uint16_t)l->tx_seq : 0, off, total);
	l->tx_seq++;
	f->type = TCP_FRAME_RECORD;
	f->ring_id = (uint8_t)ring_id;
	f->cookie = cookie;
	f->len = total;
	f->nsg = 0;
	for (k = 0; k < nsg; k++) {
		if (!sg[k].len)
			continue;
		f->sg[f->nsg].iov_base = sg[k].addr;
		f->sg[f->nsg].iov_len = (size_t)sg[k].len;
		f->nsg++;
	}
	enqueue_locked(l, pick_stream(l), f);
	l->tx_records++;
	l->tx_bytes += total;
	pthread_mutex_unlock(&l->lock);
	queued(l);
	return 0;
}

static int tcp_post_head(void *ctx, struct rgaps_link *l, uint32_t ring_id, uint64_t head)
{
	struct rx_ring *r;
	struct tx_frame *f;

	if (!l || l->state != LINK_UP)
		return -ENOTCONN;
	if (ring_id >= TCP_RINGS)
		return -EINVAL;
	pthread_mutex_lock(&l->lock);
	r = &l->rxr[ring_id];
	if (r->state != RING_ATTACHED) {
		pthread_mutex_unlock(&l->lock);
		return -EINVAL;
	}
	if (head > r->head)
		r->head = head;
	if (r->head_frame) {
		/* A Head for this ring still waits to be written: the newer one replaces it. */
		f = &l->tx[(r->head_frame - 1) % TCP_TX_FIFO];
		put_le64(f->hdr + 8, r->head);
		pthread_mutex_unlock(&l->lock);
		return 0;
	}
	if (l->tx_heads >= TCP_TX_HEADS || l->tx_end - l->tx_done >= TCP_TX_FIFO) {
		pthread_mutex_unlock(&l->lock);
		return -EAGAIN;
	}
	f = &l->tx[l->tx_end % TCP_TX_FIFO];
	frame_encode(f->hdr, TCP_FRAME_HEAD, (uint8_t)ring_id, 0, r->head, 0);
	f->type = TCP_FRAME_HEAD;
	f->ring_id = (uint8_t)ring_id;
	f->nsg = 0;
	f->len = 0;
	f->cookie = 0;
	r->head_frame = 1 + l->tx_end % TCP_TX_FIFO;
	/* Heads keep their order on one stream: a later one never overtakes an earlier one. */
	enqueue_locked(l, &l->s[0], f);
	l->tx_heads++;
	l->st.head_updates_sent++;
	pthread_mutex_unlock(&l->lock);
	queued(l);
	return 0;
}

static void tcp_flush(void *ctx, struct rgaps_link *l)
{
	if (l)
		link_flush(l);
}

static void tcp_link_stats(void *ctx, struct rgaps_link *l, struct rgaps_link_stats *st)
{
	if (!l) {
		memset(st, 0, sizeof(*st));
		return;
	}
	pthread_mutex_lock(&l->lock);
	*st = l->st;
	pthread_mutex_unlock(&l->lock);
}

static const struct rgaps_transport_ops tcp_ops = {
	.init = tcp_init,
	.fini = tcp_fini,
	.probe = tcp_probe,
	.listen = tcp_listen,
	.connect = tcp_connect,
	.close = tcp_close,
	.reg_local = tcp_reg_local,
	.dereg_local = tcp_dereg_local,
	.sender_ring_prepare = tcp_sender_ring_prepare,
	.receiver_ring_attach = tcp_receiver_ring_attach,
	.sender_ring_connect = tcp_sender_ring_connect,
	.ring_detach = tcp_ring_detach,
	.post_record = tcp_post_record,
	.post_head = tcp_post_head,
	.flush = tcp_flush,
	.link_stats = tcp_link_stats,
};

RGAPS_PLUGIN_EXPORT const struct rgaps_plugin rgaps_plugin = {
	.abi_version = RGAPS_PLUGIN_ABI_VERSION,
	.struct_size = sizeof(struct rgaps_plugin),
	.kind = RGAPS_PLUGIN_TRANSPORT,
	.ops_size = sizeof(struct rgaps_transport_ops),
	.name = "tcp",
	.description = "TCP data links: one or several streams per link, each with a reader and a "
		       "writer thread; records received straight into the ring (or the pool)",
	.ops = &tcp_ops,
	.options = tcp_options,
	.noptions = OPT_NUM,
	.priority = 10,	       /* "auto" prefers it to nothing: the fallback */
	.data_port_offset = 1, /* data links on the control port + 1 */
};
