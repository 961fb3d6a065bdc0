/*
 * The tcp transport (include/rgaps/plugin.h, section "transport"): one libuv TCP
 * stream per data link, on the daemon's loop. The wire format is drawn in
 * docs/PROTOCOL.md section 3, "tcp: data connection": the connector's 24-byte
 * preamble with the link token, then 24-byte frames both ways. A RECORD leaves
 * the sender's registered memory with one writev (frame header + the gathered
 * pieces, never copied in user space) and lands straight in the receiver's ring:
 * the buffer handed to libuv's alloc_cb points into the ring at the claimed
 * offset and is sized to the bytes still due, so nothing is staged. Every frame
 * is checked before a byte of its payload is read (magic, type, ring attached,
 * bounds, and that it cannot overwrite bytes the core has not released yet); a
 * violation drops the link with the reason in words. The core's ring arithmetic
 * (src/daemon/remote/ring.h) decides every offset: this file checks and moves bytes.
 *
 * Lifecycle: init -> listen / connect -> links come and go -> fini. Handles are
 * closed asynchronously (libuv): a link's memory is freed once its handles have
 * closed, the context's once every link and handle has, so after fini() the
 * host's loop must still run (it does until uv_loop_close) to free them. The
 * module is linked with -z nodelete: the loader may dlclose() it right after
 * fini(), before those close callbacks have run.
 *
 * Completions: every posted record gets exactly one record_sent, in posting
 * order; when an up link fails, the records still queued or on the wire get
 * record_sent(err) first, then link_down. A connect that fails gets
 * link_connected(err) and the link is freed after it. close() and fini() call
 * nothing back. Send credits bound what one link queues (TCP_TX_RECORDS
 * records, TCP_TX_BYTES bytes): beyond, post_record() says -EAGAIN and the core
 * retries after a record_sent. Batching: records posted before flush() leave in
 * one writev; whatever flush() was not called for leaves before the loop sleeps.
 *
 * Ring descriptors, opaque to the core, little-endian: the sender's (its
 * Delayed Head word stays local) is 8 bytes {u32 "RGTH", u8 version 1,
 * u8 ring_id, u16 0}; the receiver's is 16 bytes {u32 "RGTR", u8 1, u8 ring_id,
 * u16 0, u64 ring size}, which bounds the offsets post_record() accepts.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <uv.h>

#include "rgaps/plugin.h"

#define TCP_PREAMBLE_MAGIC   0x44544752u /* "RGTD" little-endian */
#define TCP_PREAMBLE_VERSION 1u
#define TCP_PREAMBLE_LEN     24u
#define TCP_FRAME_MAGIC	     0x46544752u /* "RGTF" */
#define TCP_FRAME_LEN	     24u
#define TCP_FRAME_RECORD     1u
#define TCP_FRAME_HEAD	     2u
#define TCP_RINGS	     128u

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
#define TCP_BATCH_BYTES		(1u << 20)     /* write at once when this much waits for flush() */
#define TCP_READ_MAX		(1u << 30)     /* largest single read into the ring */
#define TCP_DISCARD_BUF		(64u << 10)    /* sink for records of a ring detached meanwhile */
#define TCP_WHY_LEN		256

enum link_state {
	LINK_RESOLVING,	 /* connector: resolving the peer's host name */
	LINK_CONNECTING, /* connector: TCP handshake in progress */
	LINK_PREAMBLE,	 /* listener: accepted, waiting for the preamble; unknown to the core */
	LINK_UP,	 /* frames flow both ways */
	LINK_DEAD,	 /* closed or failed: no more callbacks, handles closing */
	LINK_NUM_STATES
};

enum rx_state {
	RX_PREAMBLE, /* reading the connector's preamble into rx_hdr */
	RX_HEADER,   /* reading a frame header into rx_hdr */
	RX_PAYLOAD,  /* reading a RECORD payload straight into the ring */
	RX_DISCARD,  /* reading a RECORD payload for a ring detached meanwhile into a sink */
	RX_NUM_STATES
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

/* One frame queued (unsent) or on the wire (sent, write not completed). */
struct tx_frame {
	uint8_t hdr[TCP_FRAME_LEN];
	uint8_t type;
	uint8_t nsg;
	uint8_t ring_id;
	uint64_t cookie;
	uint64_t len; /* payload bytes */
	uv_buf_t sg[RGAPS_RECORD_SG_MAX];
};

/* One uv_write of a run of consecutive frames. */
struct tx_batch {
	uv_write_t req;
	struct rgaps_link *link;
	uint32_t nframes;
};

struct rx_ring {
	uint8_t *base;
	uint64_t size;
	/*
	 * Cursors (docs/RING.md) as far as this side can follow them: tail is the
	 * end of the last landed record, head the last Head the core posted. A
	 * record may end at most one ring past head: anything else would
	 * overwrite bytes the core has not released.
	 */
	uint64_t tail;
	uint64_t head;
	uint32_t head_frame; /* 1 + index of an unsent HEAD frame for this ring, 0: none */
	uint8_t state;
};

struct tx_ring {
	uint64_t size;
	uint8_t state;
};

struct tcp_ctx;

struct rgaps_link {
	struct tcp_ctx *ctx;
	struct rgaps_link *prev, *next; /* in ctx->links until torn down */
	enum link_state state;
	bool known;	      /* the core has this pointer (connect() or link_accepted) */
	bool silent;	      /* closed by the core or by fini: no callbacks at all */
	bool pending_counted; /* counted in ctx->npending */
	bool admitted;	      /* kept by the host's admission (env conn_pending): settle it */
	bool tcp_open, timer_open;
	int refs;     /* open handles and requests; the link is freed at 0 */
	int fail_err; /* deferred failure, reported from the timer */
	char fail_why[TCP_WHY_LEN];
	char peer[80];
	uint16_t port;
	uint8_t token[RGAPS_LINK_TOKEN_LEN];

	uv_tcp_t tcp;
	uv_timer_t timer; /* preamble timeout; deferred failure report */
	uv_connect_t conn_req;
	uv_getaddrinfo_t gai;
	uv_write_t preamble_req;
	uint8_t preamble[TCP_PREAMBLE_LEN];

	/* receive */
	enum rx_state rx;
	uint8_t rx_hdr[TCP_FRAME_LEN];
	uint32_t rx_have;
	uint32_t rx_ring;
	uint64_t rx_off, rx_len, rx_got;
	uint8_t *discard;

	/* send: frames [tx_done, tx_unsent) are written, [tx_unsent, tx_end) queued */
	uint32_t tx_done, tx_unsent, tx_end;
	uint32_t tx_records, tx_heads;
	uint64_t tx_bytes, unsent_bytes;
	uint32_t b_done, b_end;
	struct tx_frame tx[TCP_TX_FIFO];
	struct tx_batch batch[TCP_TX_FIFO];

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
	uv_prepare_t prepare;	  /* writes what posts left queued before the loop sleeps */
	bool listening, prepare_open, finalizing;
	int refs; /* 1 until fini, + open handles, + links not yet freed */
	int npending;
	int sndbuf, rcvbuf; /* RGAPS_TCP_SNDBUF / RGAPS_TCP_RCVBUF, 0: kernel autotuning */
};

static void link_unref(struct rgaps_link *l);
static void link_flush(struct rgaps_link *l);

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

static void frame_encode(uint8_t *hdr, uint8_t type, uint8_t ring_id, uint64_t off, uint64_t len)
{
	put_le32(hdr, TCP_FRAME_MAGIC);
	hdr[4] = type;
	hdr[5] = ring_id;
	hdr[6] = 0;
	hdr[7] = 0;
	put_le64(hdr + 8, off);
	put_le64(hdr + 16, len);
}

/*
 * Tunables: the daemon's "transport_options": { "tcp": { ... } }, else the
 * environment variable RGAPS_TCP_<NAME> (programs without a daemon
 * configuration), else the default. 0 leaves the kernel's autotuning alone.
 */
enum { OPT_SNDBUF, OPT_RCVBUF, OPT_NUM };

static const struct rgaps_plugin_option tcp_options[OPT_NUM] = {
	[OPT_SNDBUF] = { "sndbuf", 0, 0, 1u << 30,
			 "SO_SNDBUF of data links in bytes; 0: the kernel autotunes" },
	[OPT_RCVBUF] = { "rcvbuf", 0, 0, 1u << 30,
			 "SO_RCVBUF of data links in bytes; 0: the kernel autotunes" },
};

static int opt_int(const struct rgaps_plugin_env *env, int i)
{
	const struct rgaps_plugin_option *o = &tcp_options[i];
	const char *s = getenv(i == OPT_SNDBUF ? "RGAPS_TCP_SNDBUF" : "RGAPS_TCP_RCVBUF");
	uint64_t v;
	char *end;

	if (rgaps_plugin_env_option(env, o->name, &v))
		return (int)v; /* the daemon checked the bounds */
	if (!s || !*s)
		return (int)o->def;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || *end || v > o->max) {
		if (env->log)
			env->log(1, "tcp: %s=%s is not a number in [0, %llu]; using the default",
				 i == OPT_SNDBUF ? "RGAPS_TCP_SNDBUF" : "RGAPS_TCP_RCVBUF", s,
				 (unsigned long long)o->max);
		return (int)o->def;
	}
	return (int)v;
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

/* ------------------------------------------------------------------ link lifecycle */

static void link_handle_closed(uv_handle_t *h)
{
	link_unref(h->data);
}

static void link_unref(struct rgaps_link *l)
{
	struct tcp_ctx *c = l->ctx;

	if (--l->refs > 0)
		return;
	free(l->discard);
	free(l);
	ctx_unref(c);
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
	l->tcp.data = l;
	l->tcp_open = true;
	l->refs++;
	uv_timer_init(c->loop, &l->timer);
	l->timer.data = l;
	l->timer_open = true;
	l->refs++;
	c->refs++;
	l->next = c->links;
	if (c->links)
		c->links->prev = l;
	c->links = l;
	return l;
}

/*
 * Stop everything: the socket is closed at once (the kernel keeps no pointer
 * into source or ring memory after this returns), memory goes when the handles'
 * close callbacks have run. Writes still queued complete with UV_ECANCELED and
 * are ignored.
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
	if (l->prev)
		l->prev->next = l->next;
	else if (c->links == l)
		c->links = l->next;
	if (l->next)
		l->next->prev = l->prev;
	l->prev = l->next = NULL;
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
}

/*
 * The link failed. Tear it down, then tell the core: a connect that never came
 * up gets link_connected(err); an up link first fails every record still queued
 * or in flight (record_sent with err, so the core can release their chunks) and
 * then gets link_down. A link the core never saw is only logged. The core may
 * close the link, or call fini, from any of these callbacks: then we stop.
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
	while (l->tx_done != l->tx_end && !l->silent) {
		struct tx_frame *f = &l->tx[l->tx_done++ % TCP_TX_FIFO];

		if (f->type == TCP_FRAME_RECORD && c->cbs.record_sent)
			c->cbs.record_sent(c->cbs.arg, l, f->cookie, err);
	}
	if (!l->silent)
		c->cbs.link_down(c->cbs.arg, l, err, why);
out:
	l->silent = true;
	link_unref(l);
}

static void on_deferred_fail(uv_timer_t *t)
{
	struct rgaps_link *l = t->data;

	link_fail(l, l->fail_err, "%s", l->fail_why);
}

/* A failure found inside an operation: report it from the loop, never re-entrantly. */
static void link_fail_later(struct rgaps_link *l, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void link_fail_later(struct rgaps_link *l, int err, const char *fmt, ...)
{
	va_list ap;

	if (l->fail_err || l->state == LINK_DEAD)
		return;
	l->fail_err = err ? err : -EIO;
	va_start(ap, fmt);
	vsnprintf(l->fail_why, sizeof(l->fail_why), fmt, ap);
	va_end(ap);
	uv_read_stop((uv_stream_t *)&l->tcp);
	uv_timer_stop(&l->timer);
	uv_timer_start(&l->timer, on_deferred_fail, 0, 0);
}

/* ------------------------------------------------------------------ send */

static void on_write(uv_write_t *req, int status)
{
	struct tx_batch *b = (struct tx_batch *)req;
	struct rgaps_link *l = b->link;
	struct tcp_ctx *c = l->ctx;
	uint32_t n = b->nframes;

	if (l->state == LINK_DEAD)
		return; /* the records were failed when the link went down */
	l->b_done++;
	if (status < 0) {
		link_fail(l, status, "write to %s failed: %s", l->peer, uv_strerror(status));
		return;
	}
	/* Writes complete in order: this batch is the oldest run of frames. */
	while (n--) {
		struct tx_frame *f = &l->tx[l->tx_done++ % TCP_TX_FIFO];

		if (f->type == TCP_FRAME_HEAD) {
			l->tx_heads--;
			continue;
		}
		l->tx_records--;
		l->tx_bytes -= f->len;
		l->st.records_sent++;
		l->st.bytes_sent += f->len;
		c->cbs.record_sent(c->cbs.arg, l, f->cookie, 0);
		if (l->state == LINK_DEAD)
			return;
	}
}

/* Hand every queued frame to the socket with one uv_write (one writev when it fits). */
static void link_flush(struct rgaps_link *l)
{
	uv_buf_t bufs[TCP_TX_FIFO * (1 + RGAPS_RECORD_SG_MAX)];
	struct tx_batch *b;
	uint32_t nbufs = 0, i;
	int r;

	if (l->state != LINK_UP || l->fail_err || l->tx_unsent == l->tx_end)
		return;
	for (i = l->tx_unsent; i != l->tx_end; i++) {
		struct tx_frame *f = &l->tx[i % TCP_TX_FIFO];

		bufs[nbufs++] = uv_buf_init((char *)f->hdr, TCP_FRAME_LEN);
		for (uint32_t k = 0; k < f->nsg; k++)
			bufs[nbufs++] = f->sg[k];
		if (f->type == TCP_FRAME_HEAD)
			l->rxr[f->ring_id].head_frame = 0; /* on its way: no more coalescing */
	}
	b = &l->batch[l->b_end++ % TCP_TX_FIFO];
	b->link = l;
	b->nframes = l->tx_end - l->tx_unsent;
	l->tx_unsent = l->tx_end;
	l->unsent_bytes = 0;
	r = uv_write(&b->req, (uv_stream_t *)&l->tcp, bufs, nbufs, on_write);
	if (r < 0)
		link_fail_later(l, r, "write to %s failed: %s", l->peer, uv_strerror(r));
}

static void on_prepare(uv_prepare_t *p)
{
	struct tcp_ctx *c = p->data;

	for (struct rgaps_link *l = c->links; l; l = l->next)
		link_flush(l);
	uv_prepare_stop(p);
}

/* Frames were queued: write them at flush() or, at the latest, before the loop sleeps. */
static void queued(struct rgaps_link *l)
{
	struct tcp_ctx *c = l->ctx;

	if (l->unsent_bytes >= TCP_BATCH_BYTES)
		link_flush(l);
	else if (c->prepare_open)
		uv_prepare_start(&c->prepare, on_prepare);
}

/* ------------------------------------------------------------------ receive */

static void rx_to_header(struct rgaps_link *l)
{
	l->rx = RX_HEADER;
	l->rx_have = 0;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct rgaps_link *l = h->data;
	uint64_t left = l->rx_len - l->rx_got;

	switch (l->rx) {
	case RX_PREAMBLE:
		*buf = uv_buf_init((char *)l->rx_hdr + l->rx_have, TCP_PREAMBLE_LEN - l->rx_have);
		break;
	case RX_HEADER:
		*buf = uv_buf_init((char *)l->rx_hdr + l->rx_have, TCP_FRAME_LEN - l->rx_have);
		break;
	case RX_PAYLOAD:
		/* Straight into the ring, never past the record's last byte. */
		*buf = uv_buf_init((char *)l->rxr[l->rx_ring].base + l->rx_off + l->rx_got,
				   (unsigned int)(left < TCP_READ_MAX ? left : TCP_READ_MAX));
		break;
	case RX_DISCARD:
		if (!l->discard)
			l->discard = malloc(TCP_DISCARD_BUF);
		/* No sink: a zero-length buffer makes libuv report UV_ENOBUFS. */
		*buf = uv_buf_init(
			(char *)l->discard,
			l->discard ? (unsigned int)(left < TCP_DISCARD_BUF ? left : TCP_DISCARD_BUF)
				   : 0);
		break;
	default:
		*buf = uv_buf_init(NULL, 0);
		break;
	}
}

static void preamble_done(struct rgaps_link *l)
{
	struct tcp_ctx *c = l->ctx;
	uint32_t magic = get_le32(l->rx_hdr), version = get_le32(l->rx_hdr + 4);

	if (magic != TCP_PREAMBLE_MAGIC) {
		link_fail(l, -EPROTO, "bad preamble magic 0x%08" PRIx32 " (not an rgaps data link)",
			  magic);
		return;
	}
	if (version != TCP_PREAMBLE_VERSION) {
		link_fail(l, -EPROTO, "data link version %" PRIu32 ", this side speaks %u", version,
			  TCP_PREAMBLE_VERSION);
		return;
	}
	memcpy(l->token, l->rx_hdr + 8, RGAPS_LINK_TOKEN_LEN);
	uv_timer_stop(&l->timer);
	if (l->pending_counted) {
		c->npending--;
		l->pending_counted = false;
	}
	if (l->admitted) {
		l->admitted = false;
		c->env.conn_settled(c->env.admit_arg, l, NULL);
	}
	l->state = LINK_UP;
	l->known = true;
	rx_to_header(l);
	/* The core closes it (close()) if it does not know the token. */
	c->cbs.link_accepted(c->cbs.arg, l, l->token);
}

static void frame_record(struct rgaps_link *l, uint32_t ring_id, uint64_t off, uint64_t len)
{
	struct rx_ring *r;
	uint64_t start;

	if (ring_id >= TCP_RINGS) {
		link_fail(l, -EPROTO, "record for ring %" PRIu32 ": ring ids are below %u", ring_id,
			  TCP_RINGS);
		return;
	}
	r = &l->rxr[ring_id];
	if (r->state == RING_DETACHED) {
		/* Sent before the sender heard of the detach: drop it quietly. */
		l->st.records_late++;
		l->rx = RX_DISCARD;
		l->rx_ring = ring_id;
		l->rx_len = len;
		l->rx_got = 0;
		if (len == 0)
			rx_to_header(l);
		return;
	}
	if (r->state != RING_ATTACHED) {
		link_fail(l, -EPROTO,
			  "record for ring %" PRIu32 ", which is not attached on this link",
			  ring_id);
		return;
	}
	if (len == 0) {
		link_fail(l, -EPROTO, "empty record for ring %" PRIu32, ring_id);
		return;
	}
	if (off > r->size || len > r->size - off) {
		link_fail(l, -EPROTO,
			  "record for ring %" PRIu32 " outside the ring: off %" PRIu64
			  " len %" PRIu64 " size %" PRIu64,
			  ring_id, off, len, r->size);
		return;
	}
	/*
	 * The record starts at the first cursor at or after the last landed byte
	 * whose offset is off (a sender following docs/RING.md never leaves more
	 * than a ring's worth of padding), and must end within one ring of the
	 * last Head the core released: beyond, it would overwrite bytes still in
	 * use. The core's own placement check (verify) follows on record_landed.
	 */
	start = r->tail + (off + r->size - r->tail % r->size) % r->size;
	if (start + len > r->head + r->size) {
		link_fail(l, -EPROTO,
			  "record for ring %" PRIu32
			  " would overwrite unconsumed bytes: off %" PRIu64 " len %" PRIu64
			  ", ring of %" PRIu64 " released up to cursor %" PRIu64
			  ", landed up to %" PRIu64,
			  ring_id, off, len, r->size, r->head, r->tail);
		return;
	}
	r->tail = start + len;
	l->rx = RX_PAYLOAD;
	l->rx_ring = ring_id;
	l->rx_off = off;
	l->rx_len = len;
	l->rx_got = 0;
}

static void frame_head(struct rgaps_link *l, uint32_t ring_id, uint64_t head, uint64_t len)
{
	struct tcp_ctx *c = l->ctx;
	struct tx_ring *t;

	if (len != 0) {
		link_fail(l, -EPROTO, "head update for ring %" PRIu32 " carries %" PRIu64 " bytes",
			  ring_id, len);
		return;
	}
	if (ring_id >= TCP_RINGS) {
		link_fail(l, -EPROTO, "head update for ring %" PRIu32 ": ring ids are below %u",
			  ring_id, TCP_RINGS);
		return;
	}
	t = &l->txr[ring_id];
	rx_to_header(l);
	if (t->state == RING_DETACHED)
		return;
	if (t->state != RING_PREPARED && t->state != RING_CONNECTED) {
		link_fail(l, -EPROTO,
			  "head update for ring %" PRIu32 ", which this side does not write to",
			  ring_id);
		return;
	}
	l->st.head_updates_received++;
	c->cbs.head_update(c->cbs.arg, l, ring_id, head);
}

static void frame_header(struct rgaps_link *l)
{
	const uint8_t *h = l->rx_hdr;
	uint32_t magic = get_le32(h);
	uint64_t off = get_le64(h + 8), len = get_le64(h + 16);

	if (magic != TCP_FRAME_MAGIC) {
		link_fail(l, -EPROTO, "bad frame magic 0x%08" PRIx32 " from %s", magic, l->peer);
		return;
	}
	if (h[6] || h[7]) {
		link_fail(l, -EPROTO, "frame with nonzero reserved bytes from %s", l->peer);
		return;
	}
	switch (h[4]) {
	case TCP_FRAME_RECORD:
		frame_record(l, h[5], off, len);
		break;
	case TCP_FRAME_HEAD:
		frame_head(l, h[5], off, len);
		break;
	default:
		link_fail(l, -EPROTO, "unknown frame type %u from %s", h[4], l->peer);
		break;
	}
}

static void payload_done(struct rgaps_link *l)
{
	struct tcp_ctx *c = l->ctx;
	uint32_t ring_id = l->rx_ring;
	uint64_t off = l->rx_off, len = l->rx_len;

	rx_to_header(l);
	l->st.records_landed++;
	l->st.bytes_landed += len;
	c->cbs.record_landed(c->cbs.arg, l, ring_id, off, len);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct rgaps_link *l = s->data;

	if (l->state == LINK_DEAD || nread == 0)
		return;
	if (nread < 0) {
		if (nread == UV_EOF)
			link_fail(l, -ECONNRESET, "%s closed the data link", l->peer);
		else
			link_fail(l, (int)nread, "read from %s failed: %s", l->peer,
				  uv_strerror((int)nread));
		return;
	}
	l->st.cq_events++;
	switch (l->rx) {
	case RX_PREAMBLE:
		l->rx_have += (uint32_t)nread;
		if (l->rx_have == TCP_PREAMBLE_LEN)
			preamble_done(l);
		break;
	case RX_HEADER:
		l->rx_have += (uint32_t)nread;
		if (l->rx_have == TCP_FRAME_LEN)
			frame_header(l);
		break;
	case RX_PAYLOAD:
		l->rx_got += (uint64_t)nread;
		if (l->rx_got == l->rx_len)
			payload_done(l);
		break;
	case RX_DISCARD:
		l->rx_got += (uint64_t)nread;
		if (l->rx_got == l->rx_len)
			rx_to_header(l);
		break;
	default:
		break;
	}
}

/* ------------------------------------------------------------------ listen / connect */

static void on_preamble_timeout(uv_timer_t *t)
{
	struct rgaps_link *l = t->data;

	link_fail(l, -ETIMEDOUT, "no preamble within %d ms", TCP_PREAMBLE_TIMEOUT_MS);
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
	l->rx = RX_PREAMBLE;
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

static void on_preamble_written(uv_write_t *req, int status)
{
	struct rgaps_link *l = req->data;

	if (l->state == LINK_DEAD || status >= 0)
		return;
	link_fail(l, status, "sending the preamble to %s failed: %s", l->peer, uv_strerror(status));
}

static void on_connect(uv_connect_t *req, int status)
{
	struct rgaps_link *l = req->data;
	struct tcp_ctx *c = l->ctx;
	uv_buf_t b;
	int r;

	if (l->state == LINK_DEAD)
		return;
	if (status < 0) {
		link_fail(l, status, "connect to %s failed: %s", l->peer, uv_strerror(status));
		return;
	}
	uv_tcp_nodelay(&l->tcp, 1);
	/* The preamble goes first on the stream: every later write queues behind it. */
	put_le32(l->preamble, TCP_PREAMBLE_MAGIC);
	put_le32(l->preamble + 4, TCP_PREAMBLE_VERSION);
	memcpy(l->preamble + 8, l->token, RGAPS_LINK_TOKEN_LEN);
	b = uv_buf_init((char *)l->preamble, TCP_PREAMBLE_LEN);
	l->preamble_req.data = l;
	r = uv_write(&l->preamble_req, (uv_stream_t *)&l->tcp, &b, 1, on_preamble_written);
	if (r == 0)
		r = uv_read_start((uv_stream_t *)&l->tcp, on_alloc, on_read);
	if (r < 0) {
		link_fail(l, r, "starting the data link to %s failed: %s", l->peer, uv_strerror(r));
		return;
	}
	l->state = LINK_UP;
	rx_to_header(l);
	c->cbs.link_connected(c->cbs.arg, l, 0);
}

static int start_connect(struct rgaps_link *l, const struct sockaddr *sa)
{
	struct tcp_ctx *c = l->ctx;
	int r;

	addr_name(sa, l->peer, sizeof(l->peer), NULL);
	l->conn_req.data = l;
	r = uv_tcp_connect(&l->conn_req, &l->tcp, sa, on_connect);
	if (r < 0)
		return r;
	/* After the SYN, but the window scale already allows tcp_rmem's maximum. */
	set_sockbufs(c, (uv_handle_t *)&l->tcp);
	l->state = LINK_CONNECTING;
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
	c->sndbuf = opt_int(env, OPT_SNDBUF);
	c->rcvbuf = opt_int(env, OPT_RCVBUF);
	if ((c->sndbuf || c->rcvbuf) && env->log)
		env->log(2, "tcp: options: sndbuf %d, rcvbuf %d (0: autotuned)", c->sndbuf,
			 c->rcvbuf);
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
	l = malloc(sizeof(*l));
	if (!l)
		return -ENOMEM;
	r = uv_tcp_init(c->loop, l);
	if (r < 0) {
		free(l);
		return r;
	}
	l->data = c;
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
	if (l->txr[ring_id].state == RING_PREPARED || l->txr[ring_id].state == RING_CONNECTED)
		return -EBUSY;
	/* The Delayed Head word is this side's: the peer only needs to name the ring. */
	put_le32(desc, TCP_DESC_HEAD_MAGIC);
	desc[4] = TCP_DESC_VERSION;
	desc[5] = (uint8_t)ring_id;
	desc[6] = 0;
	desc[7] = 0;
	l->txr[ring_id].state = RING_PREPARED;
	l->txr[ring_id].size = 0;
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
	r = &l->rxr[ring_id];
	if (r->state == RING_ATTACHED)
		return -EBUSY;
	memset(r, 0, sizeof(*r));
	r->base = ring;
	r->size = size;
	r->state = RING_ATTACHED;
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
	l->txr[ring_id].size = size;
	l->txr[ring_id].state = RING_CONNECTED;
	return 0;
}

static void tcp_ring_detach(void *ctx, struct rgaps_link *l, uint32_t ring_id)
{
	if (!l || ring_id >= TCP_RINGS)
		return;
	if (l->txr[ring_id].state != RING_NONE)
		l->txr[ring_id].state = RING_DETACHED;
	if (l->rxr[ring_id].state != RING_NONE) {
		l->rxr[ring_id].state = RING_DETACHED;
		l->rxr[ring_id].base = NULL;
		/* The ring memory may go away now: the rest of a record in progress is dropped. */
		if (l->rx == RX_PAYLOAD && l->rx_ring == ring_id)
			l->rx = RX_DISCARD;
	}
}

static int tcp_post_record(void *ctx, struct rgaps_link *l, uint32_t ring_id, uint64_t off,
			   const struct rgaps_sg *sg, uint32_t nsg, uint64_t cookie)
{
	struct tx_frame *f;
	uint64_t total = 0;
	struct tx_ring *t;
	uint32_t k;

	if (!l || l->state != LINK_UP || l->fail_err)
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
	if (l->tx_records >= TCP_TX_RECORDS ||
	    (l->tx_records && l->tx_bytes + total > TCP_TX_BYTES) ||
	    l->tx_end - l->tx_done >= TCP_TX_FIFO) {
		l->st.send_credit_stalls++;
		return -EAGAIN;
	}
	f = &l->tx[l->tx_end % TCP_TX_FIFO];
	frame_encode(f->hdr, TCP_FRAME_RECORD, (uint8_t)ring_id, off, total);
	f->type = TCP_FRAME_RECORD;
	f->ring_id = (uint8_t)ring_id;
	f->cookie = cookie;
	f->len = total;
	f->nsg = 0;
	for (k = 0; k < nsg; k++) {
		if (!sg[k].len)
			continue;
		f->sg[f->nsg].base = sg[k].addr;
		f->sg[f->nsg].len = (size_t)sg[k].len;
		f->nsg++;
	}
	l->tx_end++;
	l->tx_records++;
	l->tx_bytes += total;
	l->unsent_bytes += TCP_FRAME_LEN + total;
	queued(l);
	return 0;
}

static int tcp_post_head(void *ctx, struct rgaps_link *l, uint32_t ring_id, uint64_t head)
{
	struct rx_ring *r;
	struct tx_frame *f;

	if (!l || l->state != LINK_UP || l->fail_err)
		return -ENOTCONN;
	if (ring_id >= TCP_RINGS || l->rxr[ring_id].state != RING_ATTACHED)
		return -EINVAL;
	r = &l->rxr[ring_id];
	if (head > r->head)
		r->head = head;
	if (r->head_frame) {
		/* A Head for this ring still waits to be written: the newer one replaces it. */
		f = &l->tx[(r->head_frame - 1) % TCP_TX_FIFO];
		put_le64(f->hdr + 8, r->head);
		return 0;
	}
	if (l->tx_heads >= TCP_TX_HEADS || l->tx_end - l->tx_done >= TCP_TX_FIFO)
		return -EAGAIN;
	f = &l->tx[l->tx_end % TCP_TX_FIFO];
	frame_encode(f->hdr, TCP_FRAME_HEAD, (uint8_t)ring_id, r->head, 0);
	f->type = TCP_FRAME_HEAD;
	f->ring_id = (uint8_t)ring_id;
	f->nsg = 0;
	f->len = 0;
	f->cookie = 0;
	r->head_frame = 1 + l->tx_end % TCP_TX_FIFO;
	l->tx_end++;
	l->tx_heads++;
	l->st.head_updates_sent++;
	l->unsent_bytes += TCP_FRAME_LEN;
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
	if (l)
		*st = l->st;
	else
		memset(st, 0, sizeof(*st));
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
	.description = "TCP data links (libuv): framed writes received straight into the ring",
	.ops = &tcp_ops,
	.options = tcp_options,
	.noptions = OPT_NUM,
	.priority = 10, /* "auto" prefers it to nothing: the fallback */
	.data_port_offset = 1, /* data links on the control port + 1 */
};
