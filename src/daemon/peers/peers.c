/*
 * The peer control plane of rgapsd (peers.h, docs/ARCHITECTURE.md section 7): one TCP
 * listener and, per configured peer, one connection attempt at a time with
 * jittered exponential back-off, all libuv handles on the loop thread. Every
 * connection runs the same handshake (HELLO both ways, then the initiator's
 * AUTH, the responder's AUTH and its verdict AUTH_OK or ERROR) before any MSG
 * may flow; the frames, the HMAC transcript and the duplicate rule are drawn
 * in docs/PROTOCOL.md section 2.
 *
 * Ownership: a connection (struct peer_conn) belongs to the manager until its
 * two handles (socket, timer) have closed; a peer (struct rgapsd_peer) lives
 * as long as the manager and points at most at one session (the connection
 * announced up) and one attempt of ours in progress. The manager is freed
 * when its last handle, connection or resolver request is gone.
 *
 * Callbacks: peer_up and peer_down alternate per peer, once per session.
 * When a session ends inside a loop callback (read, timer, write) peer_down
 * runs there; when it ends inside a call the core makes (rgapsd_peer_send,
 * rgapsd_peer_disconnect) it is posted to the peer's timer, so the core is
 * never re-entered while it holds state on its stack. After every callback the
 * code re-reads the connection's state: the core may have disconnected the
 * peer or stopped the manager meanwhile (memory stays valid until the handles'
 * close callbacks, which run on a later loop iteration).
 *
 * libuv writes with write(2): the process must ignore SIGPIPE (rgapsd's main
 * does), or a peer that resets would kill it.
 */
#include "peers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admission.h"
#include "errors.h"
#include "hostport.h"
#include "log.h"
#include "looplag.h"
#include "wire.h"
#include "secret.h"
#include "util.h"

#define PEERS_SMALL_MAX 512	 /* any frame before authentication, and all but MSG after */
#define PEERS_REASON_MAX 200	 /* ERROR and BYE texts */
#define PEERS_HANDSHAKE_MS 3000	 /* connect + handshake */
#define PEERS_LINGER_MS 1000	 /* a final ERROR/BYE gets this long to leave */
#define PEERS_BACKOFF_MIN_MS 100
#define PEERS_BACKOFF_MAX_MS 5000
#define PEERS_KEEPALIVE_DEFAULT_MS 1000
#define PEERS_DEAD_INTERVALS 3
#define PEERS_SENDQ_MAX (64u << 20) /* bytes libuv holds unsent, per session */
#define PEERS_HELLO_RECHECK_MS 50   /* a first-frame timeout looks once more for input */
/* A keepalive timeout looks once more after one poll for input. Not 0: libuv before
 * 1.45 runs a 0 ms timer started in a timer callback in the same pass, before any poll. */
#define PEERS_KA_RECHECK_MS 1
#define PEERS_RXBUF (64 * 1024)
/* A discovered peer that refuses us as unknown this soon after we learned of it has most
 * likely not learned of us yet: it is asked again at the least back-off, not a growing one. */
#define PEERS_YOUNG_MS 3000

enum conn_state {
	CONN_CONNECTING, /* ours: TCP connect in flight */
	CONN_HELLO,	 /* our HELLO sent: waiting for the other side's */
	CONN_AUTH,	 /* HELLOs exchanged: waiting for the other side's AUTH */
	CONN_AUTH_OK,	 /* ours: the responder's AUTH verified, waiting for its verdict */
	CONN_UP,	 /* the peer's session: MSG, PING, PONG, BYE */
	CONN_CLOSING,	 /* final ERROR/BYE queued, write side shut: input discarded until EOF */
	CONN_CLOSED,	 /* handles closing; freed when both close callbacks ran */
	CONN_NUM_STATES
};

static const char *const conn_state_names[CONN_NUM_STATES] = {
	"connecting", "hello", "auth", "auth_ok", "up", "closing", "closed",
};

struct rgapsd_peers;

struct peer_conn {
	struct rgapsd_peers *pm;
	struct rgapsd_peer *peer; /* NULL until an accepted connection's HELLO names one */
	struct peer_conn *prev, *next; /* pm->conns, until freed */
	enum conn_state state;
	bool initiator;
	bool pending; /* accepted and not yet authenticated: kept in pm->pending */
	int handles;
	uv_tcp_t tcp;
	uv_timer_t timer; /* handshake deadline, then keepalive, then linger */
	uv_connect_t connect_req;
	uv_shutdown_t shutdown_req;
	char addr[INET6_ADDRSTRLEN + 16]; /* remote address, for the log */
	uint8_t nonce[PEERS_NONCE];
	uint8_t peer_nonce[PEERS_NONCE];
	uint64_t last_rx_ms, last_ping_ms;
	uint64_t rx_stalled_ns; /* our loop's standstill so far (looplag.h) at last_rx_ms */
	bool ka_recheck; /* silent too long: look once more after the next poll for input */
	bool ka_excused; /* counted in stall_excused since last_rx_ms */
	/* When the handshake began (connect or accept), and our standstill then. */
	uint64_t started_ms, started_stalled_ns;
	/* Accepted connections: where from, whether that is a configured peer's address,
	 * when (loop time), and whether the first-frame deadline was looked at twice. */
	struct sockaddr_storage src;
	bool src_configured;
	bool hello_recheck;
	uint64_t accepted_ms;

	/* Frame reassembly: header bytes, then a payload that straddled reads. */
	uint8_t hdr[PEERS_HDR];
	unsigned hdr_have;
	uint8_t type;
	uint32_t len;
	uint32_t have;
	uint8_t *buf;
};

struct rgapsd_peer {
	struct rgapsd_peers *pm;
	TAILQ_ENTRY(rgapsd_peer) link; /* pm->peers, until forgotten */
	char name[PEERS_NAME_MAX + 1];
	char host[PEERS_NAME_MAX + 1];
	uint16_t port;
	bool numeric; /* addr holds the address; otherwise host is resolved per attempt */
	struct sockaddr_storage addr;
	void *data;
	struct rgapsd_peer_stats st;
	struct peer_conn *session; /* announced up */
	struct peer_conn *out;	   /* our attempt, until it is the session or gone */
	uv_timer_t timer;	   /* back-off, and peer_down posted from an API call */
	uv_getaddrinfo_t gai;
	bool resolving;
	bool attempted;	    /* a first attempt was made: later ones count as reconnects */
	bool failing;	    /* a streak of failed attempts: logged once */
	/* Its address as last resolved or seen on a session it opened (names only:
	 * a numeric peer's is addr), so that its connections are told from strangers'. */
	struct sockaddr_storage seen;
	bool have_seen;
	bool down_pending;  /* a session ended, peer_down not called yet */
	char down_why[PEERS_REASON_MAX + 64];
	uint32_t backoff_ms;
	uint64_t next_attempt_ms; /* loop time */
	uint64_t id;		  /* rgapsd_peers_name_id(name) */
	unsigned sources;	  /* RGAPSD_PEER_STATIC | RGAPSD_PEER_DISCOVERED */
	bool dial;		  /* we connect to it; else we wait for it to connect */
	uint64_t added_ms;	  /* loop time it became known */
	/* No source left: out of pm->peers, and freed once its timer has closed and its
	 * resolver request (if any) has ended: holds counts the two. */
	bool forgotten;
	unsigned holds;
};
TAILQ_HEAD(peer_list, rgapsd_peer);

struct rgapsd_peers {
	uv_loop_t *loop;
	const struct rgapsd_peers_ops *ops;
	void *ctx;
	char name[PEERS_NAME_MAX + 1];
	uint8_t *key; /* sodium_malloc'd */
	size_t keylen;
	uint32_t keepalive_ms;
	uv_tcp_t listener;
	struct peer_list peers; /* known peers, in the order they became known */
	uint32_t npeers;
	uint64_t id;
	struct peer_conn *conns;
	struct rgapsd_admission pending; /* accepted connections not yet authenticated */
	uint32_t hello_ms;
	const struct rgapsd_looplag *lag;
	unsigned refs; /* listener, peer timers, connections, resolver requests */
	bool stopping;
	struct rgaps_ratelimit log_rl; /* refusals of accepted connections */
	struct rgapsd_peers_stats st;
	uint64_t entered[CONN_NUM_STATES]; /* per state: connections that entered it */
	char rxbuf[PEERS_RXBUF];	   /* every read lands here, then is parsed at once */
};

static void conn_end(struct peer_conn *conn, uint8_t final_type, uint16_t code, bool notify,
		     const char *why);
static void peer_schedule(struct rgapsd_peer *p);
static void peer_on_timer_closed(uv_handle_t *h);
static void peer_connect(struct rgapsd_peer *p);

/* ---- small helpers --------------------------------------------------------------------- */

/* d +- 25 %, so daemons that lost each other at the same moment do not retry in step. */
static uint32_t jitter(uint32_t d)
{
	return d - d / 4 + randombytes_uniform(d / 2 + 1);
}

static void pm_put(struct rgapsd_peers *pm)
{
	rgaps_require(pm->refs > 0);
	if (--pm->refs)
		return;
	rgaps_debug("peers: closed (connections entering connecting %llu, hello %llu, auth %llu, "
		    "auth_ok %llu, up %llu, closing %llu, closed %llu)",
		    (unsigned long long)pm->entered[CONN_CONNECTING],
		    (unsigned long long)pm->entered[CONN_HELLO],
		    (unsigned long long)pm->entered[CONN_AUTH],
		    (unsigned long long)pm->entered[CONN_AUTH_OK],
		    (unsigned long long)pm->entered[CONN_UP],
		    (unsigned long long)pm->entered[CONN_CLOSING],
		    (unsigned long long)pm->entered[CONN_CLOSED]);
	if (pm->key)
		sodium_free(pm->key);
	rgapsd_admission_fini(&pm->pending);
	free(pm);
}

static struct rgapsd_peer *pm_find(struct rgapsd_peers *pm, const char *name)
{
	struct rgapsd_peer *p;

	TAILQ_FOREACH(p, &pm->peers, link)
		if (strcmp(p->name, name) == 0)
			return p;
	return NULL;
}

/* The peer's memory goes with its last hold (its timer, a resolver request). */
static void peer_put(struct rgapsd_peer *p)
{
	rgaps_require(p->holds > 0);
	if (--p->holds == 0)
		free(p);
}

/* ---- HOST:PORT and the key file ---------------------------------------------------------- */

int rgapsd_peers_load_key(const char *path, uint8_t *key, size_t keymax, char *err,
			  size_t errlen)
{
	return rgapsd_secret_read(path, "key file", key, RGAPSD_PEER_KEY_MIN,
				  RGAPS_MIN(keymax, (size_t)RGAPSD_PEER_KEY_MAX), err, errlen);
}

/* Numeric HOST into ss (a v6 zone allowed); false for a name. */
static bool addr_numeric(const char *host, uint16_t port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0)
		return true;
	if (strchr(host, ':') && uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0)
		return true;
	return false;
}

static void addr_format(const struct sockaddr *sa, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

		uv_ip6_name(s6, ip, sizeof(ip));
		snprintf(buf, len, "[%s]:%u", ip, ntohs(s6->sin6_port));
	} else if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;

		uv_ip4_name(s4, ip, sizeof(ip));
		snprintf(buf, len, "%s:%u", ip, ntohs(s4->sin_port));
	} else {
		snprintf(buf, len, "?");
	}
}

/* ---- HMAC transcript ------------------------------------------------------------------------ */

static void auth_mac(const struct rgapsd_peers *pm, uint8_t role, const char *from, const char *to,
		     const uint8_t from_nonce[PEERS_NONCE], const uint8_t to_nonce[PEERS_NONCE],
		     uint8_t mac[PEERS_MAC])
{
	rgapsd_peer_auth_mac(pm->key, pm->keylen, role, from, to, from_nonce, to_nonce, mac);
}

/* ---- connections: writing -------------------------------------------------------------------- */

struct peer_wreq {
	uv_write_t req;
	size_t len;
	uint8_t data[];
};

static void conn_set_state(struct peer_conn *conn, enum conn_state s)
{
	rgaps_trace("peers: %s: %s -> %s", conn->addr, conn_state_names[conn->state],
		    conn_state_names[s]);
	conn->state = s;
	conn->pm->entered[s]++;
}

static void conn_on_write(uv_write_t *req, int status)
{
	struct peer_wreq *w = RGAPS_CONTAINER_OF(req, struct peer_wreq, req);
	struct peer_conn *conn = req->handle->data;
	char why[96];

	free(w);
	if (status < 0 && status != UV_ECANCELED && conn->state < CONN_CLOSING) {
		snprintf(why, sizeof(why), "send failed: %s", uv_strerror(status));
		conn_end(conn, 0, 0, true, why);
	}
}

/*
 * One frame: header, then a and b back to back. 0, -ENOBUFS when libuv already holds
 * PEERS_SENDQ_MAX bytes unsent (a peer that does not read, even one that only pings), or
 * another negative errno.
 */
static int conn_send(struct peer_conn *conn, uint8_t type, const void *a, size_t alen,
		     const void *b, size_t blen)
{
	size_t len = alen + blen;
	struct peer_wreq *w;
	uv_buf_t buf;
	int rc;

	if (uv_stream_get_write_queue_size((uv_stream_t *)&conn->tcp) + PEERS_HDR + len >
	    PEERS_SENDQ_MAX)
		return -ENOBUFS;
	w = malloc(sizeof(*w) + PEERS_HDR + len);
	if (!w)
		return -ENOMEM;
	peer_put32(w->data, (uint32_t)len);
	w->data[4] = type;
	if (alen)
		memcpy(w->data + PEERS_HDR, a, alen);
	if (blen)
		memcpy(w->data + PEERS_HDR + alen, b, blen);
	w->len = PEERS_HDR + len;
	buf = uv_buf_init((char *)w->data, (unsigned)w->len);
	rc = uv_write(&w->req, (uv_stream_t *)&conn->tcp, &buf, 1, conn_on_write);
	if (rc) {
		free(w);
		return rc;
	}
	return 0;
}

static int conn_send_hello(struct peer_conn *conn)
{
	uint8_t h[PEERS_HELLO_MAX];
	size_t n = rgapsd_peer_hello_encode(h, conn->nonce, conn->pm->name);

	return n ? conn_send(conn, PF_HELLO, h, n, NULL, 0) : -EINVAL;
}

static int conn_send_auth(struct peer_conn *conn)
{
	struct rgapsd_peers *pm = conn->pm;
	uint8_t mac[PEERS_MAC];
	int rc;

	auth_mac(pm, conn->initiator ? PEERS_ROLE_INITIATOR : PEERS_ROLE_RESPONDER, pm->name,
		 conn->peer->name, conn->nonce, conn->peer_nonce, mac);
	rc = conn_send(conn, PF_AUTH, mac, sizeof(mac), NULL, 0);
	sodium_memzero(mac, sizeof(mac));
	return rc;
}

/* ---- connections: closing -------------------------------------------------------------------- */

static void conn_send_failed(struct peer_conn *conn, const char *what, int rc, bool notify);

static void conn_on_handle_closed(uv_handle_t *h)
{
	struct peer_conn *conn = h->data;
	struct rgapsd_peers *pm = conn->pm;

	if (--conn->handles)
		return;
	if (conn->prev)
		conn->prev->next = conn->next;
	else
		pm->conns = conn->next;
	if (conn->next)
		conn->next->prev = conn->prev;
	free(conn->buf);
	free(conn);
	pm_put(pm);
}

static void conn_close(struct peer_conn *conn)
{
	if (conn->state == CONN_CLOSED)
		return;
	conn_set_state(conn, CONN_CLOSED);
	uv_close((uv_handle_t *)&conn->tcp, conn_on_handle_closed);
	uv_close((uv_handle_t *)&conn->timer, conn_on_handle_closed);
}

static void peer_flush_down(struct rgapsd_peer *p)
{
	struct rgapsd_peers *pm = p->pm;
	char why[sizeof(p->down_why)];

	if (!p->down_pending)
		return;
	p->down_pending = false;
	memcpy(why, p->down_why, sizeof(why));
	pm->ops->peer_down(pm->ctx, p, why);
}

/* Unlink conn from its peer: the session ends, or our attempt failed. */
static void conn_detach(struct peer_conn *conn, const char *why)
{
	struct rgapsd_peers *pm = conn->pm;
	struct rgapsd_peer *p = conn->peer;
	uint64_t now = uv_now(pm->loop);

	if (conn->pending) {
		conn->pending = false;
		rgapsd_admission_settled(&pm->pending, conn, NULL);
	}
	if (!p)
		return;
	if (p->session == conn) {
		p->session = NULL;
		p->st.up = false;
		/* At most one is pending: a new session flushes the old one's first. */
		rgaps_require(!p->down_pending);
		p->down_pending = true;
		snprintf(p->down_why, sizeof(p->down_why), "%s", why);
		p->backoff_ms = PEERS_BACKOFF_MIN_MS;
		p->next_attempt_ms = now + jitter(PEERS_BACKOFF_MIN_MS);
	} else if (p->out == conn) {
		p->out = NULL;
		p->next_attempt_ms = now + jitter(p->backoff_ms);
		p->backoff_ms = RGAPS_MIN(p->backoff_ms * 2, PEERS_BACKOFF_MAX_MS);
	}
	peer_schedule(p);
}

static void conn_on_shutdown(uv_shutdown_t *req, int status)
{
	struct peer_conn *conn = req->handle->data;

	/* Done (the final frame left): EOF from the other side, or the linger timer, closes. */
	if (status < 0 && conn->state == CONN_CLOSING)
		conn_close(conn);
}

static void conn_on_timer(uv_timer_t *t);

/*
 * End conn: unlink it from its peer, log, and either send a final frame (PF_ERROR with code,
 * or PF_BYE; final_type 0: none) and linger until the other side closes, or close at once.
 * notify: call a session's peer_down now (loop callbacks); else the peer's timer does.
 */
static void conn_end(struct peer_conn *conn, uint8_t final_type, uint16_t code, bool notify,
		     const char *why)
{
	struct rgapsd_peer *p = conn->peer;
	bool was_up = conn->state == CONN_UP;
	uint8_t c[2];
	int rc;

	if (conn->state >= CONN_CLOSING)
		return;
	if (was_up)
		rgaps_info("peers: session with %s (%s) down: %s", p->name, conn->addr, why);
	else
		rgaps_debug("peers: connection %s %s (%s) ends in state %s: %s",
			    conn->initiator ? "to" : "from", p ? p->name : "an unidentified peer",
			    conn->addr, conn_state_names[conn->state], why);
	conn_detach(conn, why);
	uv_timer_stop(&conn->timer);
	if (conn->state == CONN_CONNECTING)
		final_type = 0;
	if (final_type) {
		size_t wl = RGAPS_MIN(strlen(why), (size_t)PEERS_REASON_MAX);

		if (final_type == PF_ERROR) {
			peer_put16(c, code);
			rc = conn_send(conn, PF_ERROR, c, 2, why, wl);
		} else {
			rc = conn_send(conn, PF_BYE, why, wl, NULL, 0);
		}
		if (rc == 0)
			rc = uv_shutdown(&conn->shutdown_req, (uv_stream_t *)&conn->tcp,
					 conn_on_shutdown);
		if (rc == 0) {
			conn_set_state(conn, CONN_CLOSING);
			uv_timer_start(&conn->timer, conn_on_timer, PEERS_LINGER_MS, 0);
		} else {
			conn_close(conn);
		}
	} else {
		conn_close(conn);
	}
	if (notify && p)
		peer_flush_down(p);
}

/* A frame could not be queued: the session cannot go on. */
static void conn_send_failed(struct peer_conn *conn, const char *what, int rc, bool notify)
{
	char why[160];

	if (rc == -ENOBUFS)
		snprintf(why, sizeof(why),
			 "%zu bytes wait to be sent (limit %u): the peer does not read",
			 uv_stream_get_write_queue_size((uv_stream_t *)&conn->tcp),
			 PEERS_SENDQ_MAX);
	else
		snprintf(why, sizeof(why), "cannot send %s: %s", what, uv_strerror(rc));
	if (conn->state == CONN_UP)
		rgaps_warn("peers: dropping the session with %s (%s): %s", conn->peer->name,
			   conn->addr, why);
	/* No final frame: it could not be queued either. */
	conn_end(conn, 0, 0, notify, why);
}

static void conn_refuse(struct peer_conn *conn, uint16_t code, uint64_t *counter,
			const char *fmt, ...) RGAPS_PRINTF(4, 5);
static void conn_refuse(struct peer_conn *conn, uint16_t code, uint64_t *counter,
			const char *fmt, ...)
{
	char why[PEERS_REASON_MAX + 1];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (counter)
		(*counter)++;
	if (code == PE_DUPLICATE)
		rgaps_debug("peers: closing duplicate connection %s %s (%s): %s",
			    conn->initiator ? "to" : "from", conn->peer ? conn->peer->name : "?",
			    conn->addr, why);
	else if (conn->initiator)
		rgaps_warn("peers: connection to %s (%s): %s; closing it", conn->peer->name,
			   conn->addr, why);
	else /* anyone who reaches the port can cause these: a flood must not flood the log */
		rgaps_log_limited(&conn->pm->log_rl, RGAPS_LOG_WARN,
				  "peers: connection from %s (%s): %s; closing it",
				  conn->peer ? conn->peer->name : "an unidentified peer", conn->addr,
				  why);
	conn_end(conn, PF_ERROR, code, true, why);
}

/* ---- deadlines -------------------------------------------------------------------------------- */

/*
 * Loop time since ms, less the time our own loop stood still since then
 * (stalled: rgapsd_looplag_stalled_ns() at ms): how long we could have heard
 * the other side. While our loop stands still, nothing it sends is read; and
 * timers run before the poll for input, so after a standstill its frames may
 * still wait in the socket. Our standstill is never its silence.
 */
static uint64_t listened_since(const struct rgapsd_peers *pm, uint64_t ms, uint64_t stalled)
{
	uint64_t now = uv_now(pm->loop), span = now > ms ? now - ms : 0;
	uint64_t still = (rgapsd_looplag_stalled_ns(pm->lag) - stalled) / 1000000;

	return span > still ? span - still : 0;
}

/*
 * A handshake deadline of limit_ms fired. If our own loop stood still for part
 * of it, the other side gets that time again: the timer is armed for what is
 * left, and true says so.
 */
static bool conn_deadline_moved(struct peer_conn *conn, uint64_t limit_ms)
{
	struct rgapsd_peers *pm = conn->pm;
	uint64_t had = listened_since(pm, conn->started_ms, conn->started_stalled_ns);

	if (had >= limit_ms)
		return false;
	/* Counted (and logged) only for a stall, not the few ms a loaded loop is late. */
	if (uv_now(pm->loop) - conn->started_ms >= limit_ms &&
	    uv_now(pm->loop) - conn->started_ms - had >= RGAPSD_LAG_STALL_MS) {
		pm->st.stall_excused++;
		rgaps_info("peers: connection %s %s (%s): our own loop stood still for %llu of the "
			   "%llu ms it had to complete its handshake; it gets them again",
			   conn->initiator ? "to" : "from", conn->peer ? conn->peer->name : "?",
			   conn->addr,
			   (unsigned long long)(uv_now(pm->loop) - conn->started_ms - had),
			   (unsigned long long)limit_ms);
	}
	uv_timer_start(&conn->timer, conn_on_timer, limit_ms - had, 0);
	return true;
}

/* ---- sessions -------------------------------------------------------------------------------- */

static void conn_heard(struct peer_conn *conn)
{
	conn->last_rx_ms = uv_now(conn->pm->loop);
	conn->rx_stalled_ns = rgapsd_looplag_stalled_ns(conn->pm->lag);
	conn->ka_excused = false;
}

static void conn_ka_arm(struct peer_conn *conn)
{
	struct rgapsd_peers *pm = conn->pm;
	uint64_t ka = pm->keepalive_ms, now = uv_now(pm->loop), dead = PEERS_DEAD_INTERVALS * ka;
	uint64_t heard = listened_since(pm, conn->last_rx_ms, conn->rx_stalled_ns);
	uint64_t next = RGAPS_MIN(conn->last_ping_ms + ka, now + (heard < dead ? dead - heard : 0));

	uv_timer_start(&conn->timer, conn_on_timer, next > now ? next - now : 0, 0);
}

static void conn_keepalive(struct peer_conn *conn)
{
	struct rgapsd_peers *pm = conn->pm;
	uint64_t ka = pm->keepalive_ms, now = uv_now(pm->loop), dead = PEERS_DEAD_INTERVALS * ka;
	uint64_t heard = listened_since(pm, conn->last_rx_ms, conn->rx_stalled_ns);
	uint8_t t[8];
	char why[96];
	int rc;

	if (now - conn->last_rx_ms >= dead && heard < dead && !conn->ka_excused &&
	    now - conn->last_rx_ms - heard >= RGAPSD_LAG_STALL_MS) {
		conn->ka_excused = true;
		pm->st.stall_excused++;
		rgaps_info("peers: nothing heard from %s for %llu ms, but our own loop stood still "
			   "for %llu ms of it: not counted against the peer",
			   conn->peer->name, (unsigned long long)(now - conn->last_rx_ms),
			   (unsigned long long)(now - conn->last_rx_ms - heard));
	}
	if (heard >= dead) {
		/* A standstill too short for the probe to see may still hide its frames:
		 * look once more after one poll for input. */
		if (!conn->ka_recheck) {
			conn->ka_recheck = true;
			uv_timer_start(&conn->timer, conn_on_timer, PEERS_KA_RECHECK_MS, 0);
			return;
		}
		snprintf(why, sizeof(why), "keepalive timeout (nothing heard for %llu ms)",
			 (unsigned long long)(now - conn->last_rx_ms));
		conn_end(conn, PF_BYE, 0, true, why);
		return;
	}
	conn->ka_recheck = false;
	if (now - conn->last_ping_ms >= ka) {
		peer_put64(t, uv_hrtime());
		rc = conn_send(conn, PF_PING, t, sizeof(t), NULL, 0);
		if (rc) {
			conn_send_failed(conn, "a PING", rc, true);
			return;
		}
		conn->peer->st.pings_sent++;
		conn->last_ping_ms = now;
	}
	conn_ka_arm(conn);
}

/* Authenticated and accepted: conn becomes p's session. */
static void conn_up(struct peer_conn *conn)
{
	struct rgapsd_peers *pm = conn->pm;
	struct rgapsd_peer *p = conn->peer;

	if (conn->pending) {
		conn->pending = false;
		rgapsd_admission_settled(&pm->pending, conn, NULL);
	}
	if (p->out == conn)
		p->out = NULL;
	if (!conn->initiator && !p->numeric && conn->src.ss_family) {
		p->seen = conn->src; /* it proved the key from there */
		p->have_seen = true;
	}
	if (p->session) /* the other side opened a new session: this one is stale */
		conn_end(p->session, PF_BYE, 0, true, "replaced by a new session from the peer");
	peer_flush_down(p); /* peer_down of the last session before peer_up of this one */
	if (pm->stopping || conn->state >= CONN_CLOSING)
		return;
	conn_set_state(conn, CONN_UP);
	p->session = conn;
	p->st.up = true;
	p->st.sessions++;
	p->backoff_ms = PEERS_BACKOFF_MIN_MS;
	p->failing = false;
	conn_heard(conn);
	conn->last_ping_ms = conn->last_rx_ms;
	uv_timer_stop(&conn->timer);
	conn_ka_arm(conn);
	peer_schedule(p);
	rgaps_info("peers: session with %s (%s) up, %s", p->name, conn->addr,
		   conn->initiator ? "we connected" : "it connected");
	pm->ops->peer_up(pm->ctx, p, conn->initiator);
}

/*
 * An accepted connection proved the key: keep it, or refuse it because the pair's other
 * connection wins. The one initiated by the smaller name is kept; the peer connects only when it
 * has no session, so a session it replaces is stale (docs/PROTOCOL.md 2, "Duplicates").
 */
static void conn_accept_session(struct peer_conn *conn)
{
	struct rgapsd_peers *pm = conn->pm;
	struct rgapsd_peer *p = conn->peer;
	bool preferred = strcmp(p->name, pm->name) < 0;
	int rc;

	if (!preferred && (p->out || p->resolving ||
			   (p->session && p->session->initiator))) {
		conn_refuse(conn, PE_DUPLICATE, &pm->st.duplicates_closed,
			    "duplicate: our own connection to %s is kept", p->name);
		return;
	}
	if (preferred && p->out) {
		pm->st.duplicates_closed++;
		conn_end(p->out, PF_ERROR, PE_DUPLICATE, true,
			 "duplicate: the connection initiated by the smaller name is kept");
		if (pm->stopping || conn->state != CONN_AUTH)
			return;
	}
	if (p->resolving) {
		uv_cancel((uv_req_t *)&p->gai); /* the callback sees the session and stops */
	}
	rc = conn_send_auth(conn);
	if (rc == 0)
		rc = conn_send(conn, PF_AUTH_OK, NULL, 0, NULL, 0);
	if (rc) {
		conn_send_failed(conn, "AUTH", rc, true);
		return;
	}
	conn_up(conn);
}

/* ---- connections: receiving ------------------------------------------------------------------ */

static void on_hello(struct peer_conn *conn, const uint8_t *b, uint32_t len)
{
	struct rgapsd_peers *pm = conn->pm;
	struct peer_hello h;
	char why[PEERS_REASON_MAX];
	const char *name = h.name;
	int rc;

	rc = rgapsd_peer_hello_decode(b, len, &h, why, sizeof(why));
	if (rc) {
		conn_refuse(conn, (uint16_t)-rc, &pm->st.protocol_errors, "%s", why);
		return;
	}
	memcpy(conn->peer_nonce, h.nonce, PEERS_NONCE);
	if (sodium_memcmp(conn->peer_nonce, conn->nonce, PEERS_NONCE) == 0) {
		conn_refuse(conn, PE_PROTOCOL, &pm->st.protocol_errors,
			    "HELLO echoes our nonce (reflection?)");
		return;
	}
	if (conn->initiator) {
		if (strcmp(name, conn->peer->name) != 0) {
			conn_refuse(conn, PE_UNKNOWN_PEER, &pm->st.unknown_peers,
				    "unknown peer: we connected to %s, the daemon there calls "
				    "itself %s", conn->peer->name, name);
			return;
		}
		conn_set_state(conn, CONN_AUTH);
		rc = conn_send_auth(conn);
		if (rc)
			conn_send_failed(conn, "AUTH", rc, true);
		return;
	}
	conn->peer = pm_find(pm, name);
	if (!conn->peer) {
		conn_refuse(conn, PE_UNKNOWN_PEER, &pm->st.unknown_peers,
			    "unknown peer %s (not in the peers list of %s, nor in its membership)",
			    name, pm->name);
		return;
	}
	conn_set_state(conn, CONN_AUTH);
	/* The first frame came in time: the rest of the handshake gets what is left of
	 * PEERS_HANDSHAKE_MS since the accept. */
	{
		uint64_t spent = uv_now(pm->loop) - conn->accepted_ms;

		uv_timer_start(&conn->timer, conn_on_timer,
			       spent < PEERS_HANDSHAKE_MS ? PEERS_HANDSHAKE_MS - spent : 1, 0);
	}
}

static void on_auth(struct peer_conn *conn, const uint8_t *b, uint32_t len)
{
	struct rgapsd_peers *pm = conn->pm;
	uint8_t want[PEERS_MAC];
	bool ok;

	if (len != PEERS_MAC) {
		conn_refuse(conn, PE_PROTOCOL, &pm->st.protocol_errors,
			    "AUTH of %u bytes (expected %u)", len, (unsigned)PEERS_MAC);
		return;
	}
	/* The other side's proof: its role, its name first, its nonce first. */
	auth_mac(pm, conn->initiator ? PEERS_ROLE_RESPONDER : PEERS_ROLE_INITIATOR,
		 conn->peer->name, pm->name, conn->peer_nonce, conn->nonce, want);
	ok = crypto_verify_32(b, want) == 0;
	sodium_memzero(want, sizeof(want));
	if (!ok) {
		conn_refuse(conn, PE_AUTH, &pm->st.auth_failures,
			    "authentication failed: %s does not hold our key", conn->peer->name);
		return;
	}
	if (conn->initiator)
		conn_set_state(conn, CONN_AUTH_OK);
	else
		conn_accept_session(conn);
}

/* A peer only discovered, and only lately: it may not have learned of us yet. */
static bool peer_young(const struct rgapsd_peer *p)
{
	return p && p->sources == RGAPSD_PEER_DISCOVERED &&
	       uv_now(p->pm->loop) - p->added_ms < PEERS_YOUNG_MS;
}

static void on_error_frame(struct peer_conn *conn, const uint8_t *b, uint32_t len)
{
	struct rgapsd_peers *pm = conn->pm;
	char reason[PEERS_REASON_MAX + 1], why[PEERS_REASON_MAX + 64];
	uint16_t code = rgapsd_peer_error_decode(b, len, reason, sizeof(reason));
	uint64_t *counter;

	switch (code) {
	case PE_AUTH:
		counter = &pm->st.auth_failures;
		break;
	case PE_UNKNOWN_PEER:
		counter = &pm->st.unknown_peers;
		break;
	case PE_DUPLICATE:
		counter = &pm->st.duplicates_closed;
		break;
	default:
		counter = &pm->st.protocol_errors;
		break;
	}
	(*counter)++;
	snprintf(why, sizeof(why), "%s by the other side: %s (code %u)",
		 conn->state == CONN_UP ? "error reported" : "refused", reason, code);
	if (code == PE_UNKNOWN_PEER && conn->initiator && peer_young(conn->peer)) {
		/* It learns of us from the same membership, a moment later: ask again soon. */
		rgaps_debug("peers: %s does not know us yet; asking again", conn->peer->name);
		conn->peer->backoff_ms = PEERS_BACKOFF_MIN_MS;
		conn_end(conn, 0, 0, true, why);
		return;
	}
	if (code == PE_DUPLICATE)
		rgaps_debug("peers: connection %s %s (%s) %s", conn->initiator ? "to" : "from",
			    conn->peer ? conn->peer->name : "an unidentified peer", conn->addr,
			    why);
	else if (conn->state != CONN_UP) /* the session's end is logged by conn_end() */
		rgaps_warn("peers: connection %s %s (%s) %s", conn->initiator ? "to" : "from",
			   conn->peer ? conn->peer->name : "an unidentified peer", conn->addr, why);
	conn_end(conn, 0, 0, true, why);
}

static void on_session_frame(struct peer_conn *conn, uint8_t type, const uint8_t *b, uint32_t len)
{
	struct rgapsd_peers *pm = conn->pm;
	struct rgapsd_peer *p = conn->peer;
	char reason[PEERS_REASON_MAX + 1], why[PEERS_REASON_MAX + 64];
	int rc;

	switch (type) {
	case PF_MSG:
		if (len == 0) {
			conn_refuse(conn, PE_PROTOCOL, &pm->st.protocol_errors, "empty MSG");
			return;
		}
		/* JSON text never holds a NUL; the core may treat the payload as a C string. */
		if (memchr(b, 0, len)) {
			conn_refuse(conn, PE_PROTOCOL, &pm->st.protocol_errors,
				    "MSG of %u bytes holds a NUL byte", len);
			return;
		}
		p->st.msgs_received++;
		p->st.bytes_received += len;
		pm->ops->peer_msg(pm->ctx, p, (const char *)b, len);
		return;
	case PF_PING:
		if (len != 8) {
			conn_refuse(conn, PE_PROTOCOL, &pm->st.protocol_errors,
				    "PING of %u bytes (expected 8)", len);
			return;
		}
		rc = conn_send(conn, PF_PONG, b, 8, NULL, 0);
		if (rc)
			conn_send_failed(conn, "a PONG", rc, true);
		return;
	case PF_PONG: {
		uint64_t t, now = uv_hrtime();

		if (len != 8) {
			conn_refuse(conn, PE_PROTOCOL, &pm->st.protocol_errors,
				    "PONG of %u bytes (expected 8)", len);
			return;
		}
		t = peer_get64(b);
		p->st.pongs_received++;
		if (t <= now) /* our own clock read back; anything else is ignored */
			p->st.rtt_ms = (double)(now - t) / 1e6;
		return;
	}
	case PF_BYE:
		rgapsd_peer_text(reason, sizeof(reason), b, len);
		snprintf(why, sizeof(why), "closed by the peer: %s", reason[0] ? reason : "bye");
		conn_end(conn, 0, 0, true, why);
		return;
	case PF_ERROR:
		on_error_frame(conn, b, len);
		return;
	default:
		conn_refuse(conn, PE_PROTOCOL, &pm->st.protocol_errors,
			    "unexpected %s frame (type %u) in the session",
			    rgapsd_peer_frame_name(type), type);
		return;
	}
}

static void conn_dispatch(struct peer_conn *conn, uint8_t type, const uint8_t *b, uint32_t len)
{
	struct rgapsd_peers *pm = conn->pm;

	if (type == PF_ERROR && conn->state != CONN_UP) {
		on_error_frame(conn, b, len);
		return;
	}
	if (type == PF_BYE && conn->state != CONN_UP) {
		conn_end(conn, 0, 0, true, "closed by the other side during the handshake");
		return;
	}
	switch (conn->state) {
	case CONN_HELLO:
		if (type == PF_HELLO)
			on_hello(conn, b, len);
		else
			conn_refuse(conn, PE_PROTOCOL, &pm->st.protocol_errors,
				    "%s frame (type %u) before HELLO", rgapsd_peer_frame_name(type),
				    type);
		break;
	case CONN_AUTH:
		if (type == PF_AUTH)
			on_auth(conn, b, len);
		else
			conn_refuse(conn, PE_PROTOCOL, &pm->st.protocol_errors,
				    "%s frame (type %u) before authentication",
				    rgapsd_peer_frame_name(type), type);
		break;
	case CONN_AUTH_OK:
		if (type == PF_AUTH_OK && len == 0)
			conn_up(conn);
		else
			conn_refuse(conn, PE_PROTOCOL, &pm->st.protocol_errors,
				    "%s frame (type %u, %u bytes) instead of AUTH_OK",
				    rgapsd_peer_frame_name(type), type, len);
		break;
	case CONN_UP:
		on_session_frame(conn, type, b, len);
		break;
	case CONN_CONNECTING:
	case CONN_CLOSING:
	case CONN_CLOSED:
	case CONN_NUM_STATES:
		break;
	}
}

static uint32_t conn_frame_limit(const struct peer_conn *conn, uint8_t type)
{
	/* Before authentication nobody makes us allocate more than a handshake frame. */
	if (conn->state == CONN_UP && type == PF_MSG)
		return RGAPSD_PEER_MSG_MAX;
	return PEERS_SMALL_MAX;
}

/* Parse a received chunk: frames wholly inside it are handed out in place, others assembled. */
static void conn_feed(struct peer_conn *conn, const uint8_t *d, size_t n)
{
	while (n && conn->state >= CONN_HELLO && conn->state <= CONN_UP) {
		if (conn->hdr_have < PEERS_HDR) {
			size_t take = RGAPS_MIN(PEERS_HDR - conn->hdr_have, n);
			uint32_t limit;

			memcpy(conn->hdr + conn->hdr_have, d, take);
			conn->hdr_have += (unsigned)take;
			d += take;
			n -= take;
			if (conn->hdr_have < PEERS_HDR)
				break;
			conn->len = peer_get32(conn->hdr);
			conn->type = conn->hdr[4];
			limit = conn_frame_limit(conn, conn->type);
			if (conn->len > limit) {
				conn_refuse(conn, PE_PROTOCOL, &conn->pm->st.protocol_errors,
					    "%s frame (type %u) of %u bytes over the limit of %u",
					    rgapsd_peer_frame_name(conn->type), conn->type,
					    conn->len, limit);
				return;
			}
			if (n >= conn->len) {
				const uint8_t *payload = d;
				uint32_t len = conn->len;

				d += len;
				n -= len;
				conn->hdr_have = 0;
				conn_dispatch(conn, conn->type, payload, len);
				continue;
			}
			conn->buf = malloc(conn->len);
			if (!conn->buf) {
				conn_end(conn, 0, 0, true, "out of memory for a received frame");
				return;
			}
			conn->have = 0;
		}
		{
			size_t take = RGAPS_MIN((size_t)(conn->len - conn->have), n);
			uint8_t *b;

			memcpy(conn->buf + conn->have, d, take);
			conn->have += (uint32_t)take;
			d += take;
			n -= take;
			if (conn->have < conn->len)
				break;
			b = conn->buf;
			conn->buf = NULL;
			conn->hdr_have = 0;
			conn_dispatch(conn, conn->type, b, conn->len);
			free(b);
		}
	}
}

static void conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct peer_conn *conn = h->data;

	/* One buffer serves every connection: each read is parsed before the next alloc. */
	*buf = uv_buf_init(conn->pm->rxbuf, sizeof(conn->pm->rxbuf));
}

static void conn_on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct peer_conn *conn = s->data;
	char why[96];

	if (nread == 0)
		return;
	if (conn->state == CONN_CLOSING) {
		if (nread < 0) /* the other side closed too: done */
			conn_close(conn);
		return;
	}
	if (conn->state == CONN_CLOSED)
		return;
	if (nread < 0) {
		if (nread == UV_EOF)
			snprintf(why, sizeof(why), "connection closed by the other side%s",
				 conn->state == CONN_UP ? "" : " during the handshake");
		else
			snprintf(why, sizeof(why), "receive failed: %s", uv_strerror((int)nread));
		conn_end(conn, 0, 0, true, why);
		return;
	}
	/* Any byte is a sign of life, even the start of a frame still arriving. */
	conn_heard(conn);
	conn_feed(conn, (const uint8_t *)buf->base, (size_t)nread);
}

static void conn_on_timer(uv_timer_t *t)
{
	struct peer_conn *conn = t->data;
	struct rgapsd_peers *pm = conn->pm;
	char why[96];

	switch (conn->state) {
	case CONN_CONNECTING:
		if (conn_deadline_moved(conn, PEERS_HANDSHAKE_MS))
			break;
		snprintf(why, sizeof(why), "connect timed out after %d ms", PEERS_HANDSHAKE_MS);
		if (!conn->peer->failing)
			rgaps_info("peers: cannot connect to %s: %s; retrying with back-off",
				   conn->peer->name, why);
		conn->peer->failing = true;
		conn_end(conn, 0, 0, true, why);
		break;
	case CONN_HELLO:
		if (!conn->initiator) {
			if (conn_deadline_moved(conn, pm->hello_ms))
				break;
			/* Timers run before the poll for input: after a stall of our own loop
			 * the HELLO may be waiting unread. Look once more after a poll. */
			if (!conn->hello_recheck) {
				conn->hello_recheck = true;
				uv_timer_start(&conn->timer, conn_on_timer, PEERS_HELLO_RECHECK_MS, 0);
				break;
			}
			pm->st.hello_timeouts++;
			conn_refuse(conn, PE_TIMEOUT, &pm->st.protocol_errors,
				    "no whole HELLO within %u ms of connecting", pm->hello_ms);
			break;
		}
		/* ours waits for the responder's HELLO */
		__attribute__((fallthrough));
	case CONN_AUTH:
	case CONN_AUTH_OK:
		if (conn_deadline_moved(conn, PEERS_HANDSHAKE_MS))
			break;
		conn_refuse(conn, PE_TIMEOUT, &pm->st.protocol_errors,
			    "handshake not completed within %d ms (stuck in %s)",
			    PEERS_HANDSHAKE_MS, conn_state_names[conn->state]);
		break;
	case CONN_UP:
		conn_keepalive(conn);
		break;
	case CONN_CLOSING:
		conn_close(conn);
		break;
	case CONN_CLOSED:
	case CONN_NUM_STATES:
		break;
	}
}

/* Socket options and reading for a connected socket; the address for the log. */
static int conn_open(struct peer_conn *conn)
{
	struct sockaddr_storage ss;
	int sl = sizeof(ss);
	int rc;

	if (uv_tcp_getpeername(&conn->tcp, (struct sockaddr *)&ss, &sl) == 0)
		addr_format((struct sockaddr *)&ss, conn->addr, sizeof(conn->addr));
	/* Control messages are small and latency matters; liveness is our own PING. */
	rc = uv_tcp_nodelay(&conn->tcp, 1);
	if (rc == 0)
		rc = uv_tcp_keepalive(&conn->tcp, 0, 0);
	if (rc == 0)
		rc = uv_read_start((uv_stream_t *)&conn->tcp, conn_alloc, conn_on_read);
	if (rc == 0)
		rc = conn_send_hello(conn);
	return rc;
}

static struct peer_conn *conn_new(struct rgapsd_peers *pm)
{
	struct peer_conn *conn = calloc(1, sizeof(*conn));

	if (!conn)
		return NULL;
	conn->pm = pm;
	/* uv_tcp_init and uv_timer_init cannot fail for AF_UNSPEC on Unix. */
	rgaps_require(uv_tcp_init(pm->loop, &conn->tcp) == 0);
	rgaps_require(uv_timer_init(pm->loop, &conn->timer) == 0);
	conn->tcp.data = conn;
	conn->timer.data = conn;
	conn->handles = 2;
	conn->state = CONN_CLOSED; /* until the caller sets the first real state */
	snprintf(conn->addr, sizeof(conn->addr), "?");
	randombytes_buf(conn->nonce, sizeof(conn->nonce));
	conn->next = pm->conns;
	if (pm->conns)
		pm->conns->prev = conn;
	pm->conns = conn;
	pm->refs++;
	return conn;
}

/* ---- accepting ----------------------------------------------------------------------------- */

bool rgapsd_peers_source_known(const struct rgapsd_peers *pm, const struct sockaddr *sa)
{
	const struct rgapsd_peer *p;

	TAILQ_FOREACH(p, &pm->peers, link) {
		if ((p->numeric && rgapsd_addr_same_host((const struct sockaddr *)&p->addr, sa)) ||
		    (p->have_seen && rgapsd_addr_same_host((const struct sockaddr *)&p->seen, sa)))
			return true;
	}
	return false;
}

/*
 * Pending connections are bounded per source address and in all, and a configured peer's
 * address is admitted in place of the oldest stranger (or the oldest of its own address),
 * so strangers cannot keep the daemons of the configuration out (admission.h). false:
 * conn refused (closed at once, nothing sent: a flood gets no work from us).
 */
static bool pm_admit_pending(struct rgapsd_peers *pm, struct peer_conn *conn)
{
	const struct sockaddr *sa = (const struct sockaddr *)&conn->src;
	void *victim;

	conn->src_configured = rgapsd_peers_source_known(pm, sa);
	if (rgapsd_admission_admit(&pm->pending, conn, sa, conn->src_configured, uv_now(pm->loop),
				   &victim)) {
		conn_close(conn);
		return false;
	}
	conn->pending = true;
	if (victim) {
		struct peer_conn *v = victim;

		rgaps_debug("peers: closing pending %s to admit %s, a configured peer's address",
			    v->addr, conn->addr);
		v->pending = false; /* the admission forgot it already */
		conn_end(v, 0, 0, true, "closed to admit a configured peer's connection");
		if (pm->stopping)
			return false; /* the owner stopped us from its callback: conn is closed too */
	}
	return true;
}

/* Into the handshake, both ways a connection begins; false: it failed and was ended. */
static bool conn_start_hello(struct peer_conn *conn)
{
	char why[128];
	int rc;

	conn_set_state(conn, CONN_HELLO);
	rc = conn_open(conn);
	if (rc) {
		snprintf(why, sizeof(why), "cannot set the connection up: %s", uv_strerror(rc));
		conn_end(conn, 0, 0, true, why);
		return false;
	}
	return true;
}

static void pm_on_connection(uv_stream_t *server, int status)
{
	struct rgapsd_peers *pm = server->data;
	struct peer_conn *conn;
	int sl = sizeof(conn->src);
	int rc;

	if (status < 0) {
		rgaps_warn("peers: accept on %s failed: %s", pm->name, uv_strerror(status));
		return;
	}
	conn = conn_new(pm);
	if (!conn) {
		rgaps_error("peers: out of memory for an incoming connection on %s", pm->name);
		return;
	}
	conn->state = CONN_HELLO; /* provisional: closing needs a state below CLOSED */
	rc = uv_accept(server, (uv_stream_t *)&conn->tcp);
	if (rc) {
		rgaps_warn("peers: accept on %s failed: %s", pm->name, uv_strerror(rc));
		conn_close(conn);
		return;
	}
	pm->st.accepted++;
	if (pm->stopping) {
		conn_close(conn);
		return;
	}
	if (uv_tcp_getpeername(&conn->tcp, (struct sockaddr *)&conn->src, &sl) == 0)
		addr_format((struct sockaddr *)&conn->src, conn->addr, sizeof(conn->addr));
	else
		memset(&conn->src, 0, sizeof(conn->src));
	if (!pm_admit_pending(pm, conn))
		return;
	conn->accepted_ms = conn->started_ms = uv_now(pm->loop);
	conn->started_stalled_ns = rgapsd_looplag_stalled_ns(pm->lag);
	if (!conn_start_hello(conn))
		return;
	/* A short deadline for the first frame; the rest of the handshake gets more. */
	uv_timer_start(&conn->timer, conn_on_timer, pm->hello_ms, 0);
	rgaps_debug("peers: connection from %s%s", conn->addr,
		    conn->src_configured ? " (a configured peer's address)" : "");
}

/* ---- connecting ---------------------------------------------------------------------------- */

static void conn_on_connect(uv_connect_t *req, int status)
{
	struct peer_conn *conn = req->handle->data;
	struct rgapsd_peer *p = conn->peer;
	char why[128];

	if (status == UV_ECANCELED || conn->state != CONN_CONNECTING)
		return;
	if (status < 0) {
		snprintf(why, sizeof(why), "connect: %s", uv_strerror(status));
		if (!p->failing)
			rgaps_info("peers: cannot connect to %s: %s; retrying with back-off",
				   p->name, uv_strerror(status));
		p->failing = true;
		conn_end(conn, 0, 0, true, why);
		return;
	}
	if (!conn_start_hello(conn))
		return;
	rgaps_debug("peers: connected to %s (%s)", p->name, conn->addr);
}

static void peer_connect_addr(struct rgapsd_peer *p, const struct sockaddr *sa)
{
	struct rgapsd_peers *pm = p->pm;
	struct peer_conn *conn = conn_new(pm);
	char why[128];
	int rc;

	if (!conn) {
		rgaps_error("peers: out of memory connecting to %s", p->name);
		p->next_attempt_ms = uv_now(pm->loop) + jitter(p->backoff_ms);
		return;
	}
	conn->initiator = true;
	conn->peer = p;
	p->out = conn;
	addr_format(sa, conn->addr, sizeof(conn->addr));
	conn_set_state(conn, CONN_CONNECTING);
	conn->started_ms = uv_now(pm->loop);
	conn->started_stalled_ns = rgapsd_looplag_stalled_ns(pm->lag);
	/* Bounds the connect too: a peer whose SYNs vanish is retried. */
	uv_timer_start(&conn->timer, conn_on_timer, PEERS_HANDSHAKE_MS, 0);
	rc = uv_tcp_connect(&conn->connect_req, &conn->tcp, sa, conn_on_connect);
	if (rc) {
		snprintf(why, sizeof(why), "connect: %s", uv_strerror(rc));
		if (!p->failing)
			rgaps_info("peers: cannot connect to %s: %s; retrying with back-off",
				   p->name, uv_strerror(rc));
		p->failing = true;
		conn_end(conn, 0, 0, true, why);
	}
}

static void peer_on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	struct rgapsd_peer *p = RGAPS_CONTAINER_OF(req, struct rgapsd_peer, gai);
	struct rgapsd_peers *pm = p->pm;

	p->resolving = false;
	if (p->forgotten) {
		/* nothing to do: the peer is gone */
	} else if (pm->stopping || p->session || status < 0 || !res) {
		if (!pm->stopping && !p->session) {
			if (!p->failing && status != UV_EAI_CANCELED)
				rgaps_info("peers: cannot resolve %s: %s; retrying with back-off",
					   p->host, uv_strerror(status));
			p->failing = true;
			p->next_attempt_ms = uv_now(pm->loop) + jitter(p->backoff_ms);
			p->backoff_ms = RGAPS_MIN(p->backoff_ms * 2, PEERS_BACKOFF_MAX_MS);
			peer_schedule(p);
		}
	} else {
		if (res->ai_addrlen <= sizeof(p->seen)) {
			memcpy(&p->seen, res->ai_addr, res->ai_addrlen);
			p->have_seen = true;
		}
		peer_connect_addr(p, res->ai_addr);
	}
	if (res)
		uv_freeaddrinfo(res);
	peer_put(p);
	pm_put(pm);
}

static void peer_connect(struct rgapsd_peer *p)
{
	struct rgapsd_peers *pm = p->pm;
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV };
	char port[8];
	int rc;

	if (p->attempted)
		p->st.reconnects++;
	p->attempted = true;
	if (p->numeric) {
		peer_connect_addr(p, (const struct sockaddr *)&p->addr);
		return;
	}
	/* libuv's resolver: a slow DNS must not hold the loop. */
	snprintf(port, sizeof(port), "%u", p->port);
	rc = uv_getaddrinfo(pm->loop, &p->gai, peer_on_resolved, p->host, port, &hints);
	if (rc) {
		rgaps_warn("peers: cannot resolve %s: %s", p->host, uv_strerror(rc));
		p->next_attempt_ms = uv_now(pm->loop) + jitter(p->backoff_ms);
		p->backoff_ms = RGAPS_MIN(p->backoff_ms * 2, PEERS_BACKOFF_MAX_MS);
		return;
	}
	p->resolving = true;
	p->holds++;
	pm->refs++;
}

static void peer_on_timer(uv_timer_t *t)
{
	struct rgapsd_peer *p = t->data;
	struct rgapsd_peers *pm = p->pm;

	peer_flush_down(p);
	if (pm->stopping || p->forgotten)
		return;
	if (p->dial && !p->session && !p->out && !p->resolving &&
	    uv_now(pm->loop) >= p->next_attempt_ms)
		peer_connect(p);
	peer_schedule(p);
}

/* Arm the peer's timer for what it has to do next: a posted peer_down, or the next attempt. */
static void peer_schedule(struct rgapsd_peer *p)
{
	struct rgapsd_peers *pm = p->pm;
	uint64_t now;

	if (pm->stopping || p->forgotten)
		return;
	if (p->down_pending) {
		uv_timer_start(&p->timer, peer_on_timer, 0, 0);
		return;
	}
	if (!p->dial || p->session || p->out || p->resolving) {
		uv_timer_stop(&p->timer);
		return;
	}
	now = uv_now(pm->loop);
	uv_timer_start(&p->timer, peer_on_timer,
		       p->next_attempt_ms > now ? p->next_attempt_ms - now : 0, 0);
}

/* ---- the set of peers ------------------------------------------------------------------------ */

static const char *sources_name(unsigned sources)
{
	switch (sources & (RGAPSD_PEER_STATIC | RGAPSD_PEER_DISCOVERED)) {
	case RGAPSD_PEER_STATIC:
		return "configured";
	case RGAPSD_PEER_DISCOVERED:
		return "discovered";
	case RGAPSD_PEER_STATIC | RGAPSD_PEER_DISCOVERED:
		return "configured and discovered";
	default:
		return "no source";
	}
}

/* A known peer, in pm->peers (name: HOST:PORT, checked by the caller). NULL: no memory. */
static struct rgapsd_peer *peer_new(struct rgapsd_peers *pm, const char *name, unsigned sources,
				    bool dial)
{
	struct rgapsd_peer *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->pm = pm;
	snprintf(p->name, sizeof(p->name), "%s", name);
	rgaps_require(rgapsd_hostport_parse(p->name, p->host, sizeof(p->host), &p->port, NULL, 0) ==
		      0);
	p->numeric = addr_numeric(p->host, p->port, &p->addr);
	p->backoff_ms = PEERS_BACKOFF_MIN_MS;
	p->id = rgapsd_peers_name_id(p->name);
	p->sources = sources;
	p->dial = dial;
	TAILQ_INSERT_TAIL(&pm->peers, p, link);
	pm->npeers++;
	return p;
}

/* Its timer (a hold on it and on the manager), and its first attempt from the loop. */
static void peer_start(struct rgapsd_peer *p)
{
	struct rgapsd_peers *pm = p->pm;

	rgaps_require(uv_timer_init(pm->loop, &p->timer) == 0);
	p->timer.data = p;
	p->holds++;
	pm->refs++;
	p->added_ms = p->next_attempt_ms = uv_now(pm->loop);
	peer_schedule(p);
}

/*
 * No source knows the peer any more: its connections end (a session with BYE: peer_down
 * first), the core lets go of it (peer_gone), and its memory goes once its timer has
 * closed and a resolver request of it has ended.
 */
static void peer_forget(struct rgapsd_peer *p, const char *why)
{
	struct rgapsd_peers *pm = p->pm;
	char reason[PEERS_REASON_MAX + 1];
	struct peer_conn *c, *next;

	snprintf(reason, sizeof(reason), "%s", why && why[0] ? why : "no longer a peer");
	TAILQ_REMOVE(&pm->peers, p, link);
	pm->npeers--;
	p->forgotten = true; /* from here peer_schedule() does nothing */
	rgaps_info("peers: %s is no longer a peer: %s", p->name, reason);
	if (p->resolving)
		uv_cancel((uv_req_t *)&p->gai); /* its callback sees forgotten */
	for (c = pm->conns; c; c = next) {
		next = c->next; /* conn_end() unlinks nothing: a connection goes with its handles */
		if (c->peer != p)
			continue;
		if (c->state < CONN_CLOSING)
			conn_end(c, c->state == CONN_UP ? PF_BYE : PF_ERROR, PE_UNKNOWN_PEER, true,
				 reason);
		c->peer = NULL; /* closing connections never look at their peer again */
	}
	peer_flush_down(p);
	if (pm->ops->peer_gone)
		pm->ops->peer_gone(pm->ctx, p);
	uv_close((uv_handle_t *)&p->timer, peer_on_timer_closed);
}

int rgapsd_peers_add(struct rgapsd_peers *pm, const char *name, unsigned source, bool dial)
{
	struct rgapsd_peer *p;
	char why[128];

	if (!pm || !name || !source || (source & ~RGAPSD_PEER_DISCOVERED))
		return -EINVAL;
	if (pm->stopping)
		return -ECANCELED;
	if (strlen(name) > PEERS_NAME_MAX ||
	    rgapsd_hostport_parse(name, NULL, 0, NULL, why, sizeof(why)) != 0)
		return -EINVAL;
	if (strcmp(name, pm->name) == 0)
		return -EEXIST;
	p = pm_find(pm, name);
	if (p) {
		p->sources |= source;
		if (dial && !p->dial) {
			p->dial = true;
			peer_schedule(p);
		}
		return 0;
	}
	p = peer_new(pm, name, source, dial);
	if (!p)
		return -ENOMEM;
	peer_start(p);
	rgaps_debug("peers: %s is a peer (%s): %s", p->name, sources_name(source),
		    dial ? "we connect to it" : "it connects to us");
	return 0;
}

int rgapsd_peers_drop(struct rgapsd_peers *pm, const char *name, unsigned source, const char *why)
{
	struct rgapsd_peer *p;

	if (!pm || !name || !source || (source & ~RGAPSD_PEER_DISCOVERED))
		return -EINVAL;
	p = pm->stopping ? NULL : pm_find(pm, name);
	if (!p || !(p->sources & source))
		return -ENOENT;
	p->sources &= ~source;
	if (!p->sources)
		peer_forget(p, why);
	return 0;
}

/* ---- start / stop ---------------------------------------------------------------------------- */

static void pm_on_handle_closed(uv_handle_t *h)
{
	pm_put(h->data);
}

static void peer_on_timer_closed(uv_handle_t *h)
{
	struct rgapsd_peer *p = h->data;
	struct rgapsd_peers *pm = p->pm;

	peer_put(p);
	pm_put(pm);
}

/* The listening socket, bound here so that a busy address fails start() with no handle made. */
static int pm_bind(struct rgapsd_peers *pm, const char *host, uint16_t port)
{
	struct sockaddr_storage ss;
	const struct sockaddr *sa = (const struct sockaddr *)&ss;
	struct addrinfo *res = NULL;
	socklen_t sl;
	int fd, err, one = 1;

	if (!addr_numeric(host, port, &ss)) {
		struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
					  .ai_flags = AI_NUMERICSERV };
		char ps[8];

		snprintf(ps, sizeof(ps), "%u", port);
		/* Once, at start: blocking here is acceptable, unlike per connect. */
		err = getaddrinfo(host, ps, &hints, &res);
		if (err) {
			rgaps_error("peers: cannot resolve listen address %s: %s", pm->name,
				    gai_strerror(err));
			return -EADDRNOTAVAIL;
		}
		sa = res->ai_addr;
	}
	sl = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		err = -errno;
		rgaps_error("peers: socket for %s: %s", pm->name, strerror(errno));
		goto out;
	}
	/* A restarted daemon must get its port back while old connections sit in TIME_WAIT. */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, sa, sl) < 0) {
		err = -errno;
		rgaps_error("peers: cannot listen on %s: bind: %s", pm->name, strerror(errno));
		close(fd);
		goto out;
	}
	if (listen(fd, SOMAXCONN) < 0) {
		err = -errno;
		rgaps_error("peers: cannot listen on %s: %s", pm->name, strerror(errno));
		close(fd);
		goto out;
	}
	err = fd;
out:
	if (res)
		freeaddrinfo(res);
	return err;
}

static int pm_check_config(const struct rgapsd_peers_config *cfg,
			   const struct rgapsd_peers_ops *ops)
{
	char host[PEERS_NAME_MAX + 1];
	uint16_t port;

	if (!cfg || !ops || !ops->peer_up || !ops->peer_down || !ops->peer_msg)
		return -EINVAL;
	if (!cfg->listen || strlen(cfg->listen) > PEERS_NAME_MAX ||
	    rgapsd_hostport_parse(cfg->listen, host, sizeof(host), &port, NULL, 0)) {
		rgaps_error("peers: listen address \"%s\" is not HOST:PORT",
			    cfg->listen ? cfg->listen : "");
		return -EINVAL;
	}
	if (!cfg->key || cfg->keylen < RGAPSD_PEER_KEY_MIN || cfg->keylen > RGAPSD_PEER_KEY_MAX) {
		rgaps_error("peers: the key must hold %d to %d bytes (got %zu)",
			    RGAPSD_PEER_KEY_MIN, RGAPSD_PEER_KEY_MAX, cfg->key ? cfg->keylen : 0);
		return -EINVAL;
	}
	if (cfg->npeers && !cfg->peers)
		return -EINVAL;
	for (uint32_t i = 0; i < cfg->npeers; i++) {
		if (!cfg->peers[i] || strlen(cfg->peers[i]) > PEERS_NAME_MAX ||
		    rgapsd_hostport_parse(cfg->peers[i], host, sizeof(host), &port, NULL, 0)) {
			rgaps_error("peers: peer \"%s\" is not HOST:PORT",
				    cfg->peers[i] ? cfg->peers[i] : "(null)");
			return -EINVAL;
		}
	}
	return 0;
}

int rgapsd_peers_start(uv_loop_t *loop, const struct rgapsd_peers_config *cfg,
		       const struct rgapsd_peers_ops *ops, void *ctx, struct rgapsd_peers **pm_p)
{
	struct rgapsd_peers *pm;
	struct rgapsd_peer *p;
	char host[PEERS_NAME_MAX + 1];
	uint16_t port;
	int err, fd;

	if (!loop || !pm_p)
		return -EINVAL;
	err = pm_check_config(cfg, ops);
	if (err)
		return err;
	if (sodium_init() < 0) {
		rgaps_error("peers: libsodium cannot be initialised");
		return -EIO;
	}
	pm = calloc(1, sizeof(*pm));
	if (!pm)
		return -ENOMEM;
	pm->loop = loop;
	pm->ops = ops;
	pm->ctx = ctx;
	snprintf(pm->name, sizeof(pm->name), "%s", cfg->listen);
	pm->keepalive_ms = cfg->keepalive_ms ? cfg->keepalive_ms : PEERS_KEEPALIVE_DEFAULT_MS;
	rgapsd_admission_init(&pm->pending, "peers",
			      cfg->max_pending ? cfg->max_pending : RGAPSD_PEERS_MAX_PENDING_DEFAULT,
			      cfg->max_pending_per_source ?
				      cfg->max_pending_per_source :
				      RGAPSD_PEERS_MAX_PENDING_PER_SOURCE_DEFAULT);
	pm->lag = cfg->lag;
	pm->hello_ms = cfg->hello_timeout_ms ? cfg->hello_timeout_ms
					     : RGAPSD_PEERS_HELLO_TIMEOUT_DEFAULT_MS;
	pm->id = rgapsd_peers_name_id(pm->name);
	TAILQ_INIT(&pm->peers);
	pm->key = sodium_malloc(cfg->keylen);
	if (!pm->key) {
		err = -ENOMEM;
		goto err_free;
	}
	memcpy(pm->key, cfg->key, cfg->keylen);
	pm->keylen = cfg->keylen;

	for (uint32_t i = 0; i < cfg->npeers; i++) {
		if (strcmp(cfg->peers[i], pm->name) == 0) {
			rgaps_debug("peers: %s is this daemon; not a peer", cfg->peers[i]);
			continue;
		}
		if (pm_find(pm, cfg->peers[i])) {
			rgaps_warn("peers: %s is listed twice; once is enough", cfg->peers[i]);
			continue;
		}
		if (!peer_new(pm, cfg->peers[i], RGAPSD_PEER_STATIC, true)) {
			err = -ENOMEM;
			goto err_free;
		}
	}

	rgaps_require(rgapsd_hostport_parse(pm->name, host, sizeof(host), &port, NULL, 0) == 0);
	fd = pm_bind(pm, host, port);
	if (fd < 0) {
		err = fd;
		goto err_free;
	}
	rgaps_require(uv_tcp_init(loop, &pm->listener) == 0);
	pm->listener.data = pm;
	pm->refs = 1;
	err = uv_tcp_open(&pm->listener, fd);
	if (err) {
		close(fd);
	} else {
		err = uv_listen((uv_stream_t *)&pm->listener, SOMAXCONN, pm_on_connection);
	}
	if (err) {
		/* The handle exists: pm goes in its close callback, on the caller's next uv_run. */
		rgaps_error("peers: cannot listen on %s: %s", pm->name, uv_strerror(err));
		uv_close((uv_handle_t *)&pm->listener, pm_on_handle_closed);
		return err;
	}

	/* First attempts from the loop, so that daemons started together see each other listen. */
	TAILQ_FOREACH(p, &pm->peers, link)
		peer_start(p);
	rgaps_info("peers: listening on %s, %u peer(s), keepalive %u ms", pm->name, pm->npeers,
		   pm->keepalive_ms);
	*pm_p = pm;
	return 0;

err_free:
	/* No handle exists yet: the peers go with the manager. */
	while ((p = TAILQ_FIRST(&pm->peers))) {
		TAILQ_REMOVE(&pm->peers, p, link);
		free(p);
	}
	if (pm->key)
		sodium_free(pm->key);
	free(pm);
	return err;
}

void rgapsd_peers_stop(struct rgapsd_peers *pm)
{
	struct rgapsd_peer *p;

	if (!pm || pm->stopping)
		return;
	pm->stopping = true;
	rgaps_info("peers: stopping (%s)", pm->name);
	uv_close((uv_handle_t *)&pm->listener, pm_on_handle_closed);
	TAILQ_FOREACH(p, &pm->peers, link) {
		uv_timer_stop(&p->timer);
		if (p->resolving)
			uv_cancel((uv_req_t *)&p->gai);
		peer_flush_down(p);
		if (p->session)
			conn_end(p->session, PF_BYE, 0, true, "shutting down");
	}
	/* Handshakes in progress just close: the other side sees EOF, not a protocol error. */
	for (struct peer_conn *c = pm->conns; c; c = c->next)
		if (c->state < CONN_CLOSING)
			conn_end(c, 0, 0, true, "shutting down");
	/* Each peer goes in its timer's close callback: the list is not walked again. */
	TAILQ_FOREACH(p, &pm->peers, link)
		uv_close((uv_handle_t *)&p->timer, peer_on_timer_closed);
}

/* ---- the core's calls ------------------------------------------------------------------------ */

int rgapsd_peer_send(struct rgapsd_peer *p, const char *json, size_t len)
{
	struct peer_conn *conn;
	int rc;

	if (!p || !json || len == 0 || len > RGAPSD_PEER_MSG_MAX)
		return -EMSGSIZE;
	conn = p->session;
	if (!conn || conn->state != CONN_UP)
		return -ENOTCONN;
	rc = conn_send(conn, PF_MSG, json, len, NULL, 0);
	if (rc == -ENOMEM)
		return rc;
	if (rc) {
		/* Over the queue cap, or the stream broke: the session goes, peer_down posted. */
		conn_send_failed(conn, "a MSG", rc, false);
		return -ENOTCONN;
	}
	p->st.msgs_sent++;
	p->st.bytes_sent += len;
	return 0;
}

void rgapsd_peer_disconnect(struct rgapsd_peer *p, const char *why)
{
	char reason[PEERS_REASON_MAX + 1];

	if (!p || !p->session || p->session->state != CONN_UP)
		return;
	snprintf(reason, sizeof(reason), "%s", why && why[0] ? why : "disconnected");
	conn_end(p->session, PF_BYE, 0, false, reason);
}

const char *rgapsd_peer_name(const struct rgapsd_peer *p)
{
	return p->name;
}

const char *rgapsd_peer_host(const struct rgapsd_peer *p)
{
	return p->host;
}

bool rgapsd_peer_is_up(const struct rgapsd_peer *p)
{
	return p->session != NULL;
}

void rgapsd_peer_set_data(struct rgapsd_peer *p, void *data)
{
	p->data = data;
}

void *rgapsd_peer_get_data(const struct rgapsd_peer *p)
{
	return p->data;
}

void rgapsd_peer_get_stats(const struct rgapsd_peer *p, struct rgapsd_peer_stats *st)
{
	*st = p->st;
}

void rgapsd_peers_get_stats(const struct rgapsd_peers *pm, struct rgapsd_peers_stats *st)
{
	*st = pm->st;
	st->pending_refused = pm->pending.st.refused;
	st->pending_refused_source = pm->pending.st.refused_source;
	st->pending_evicted = pm->pending.st.evicted;
}

struct rgapsd_peer *rgapsd_peers_next(struct rgapsd_peers *pm, struct rgapsd_peer *prev)
{
	return prev ? TAILQ_NEXT(prev, link) : TAILQ_FIRST(&pm->peers);
}

struct rgapsd_peer *rgapsd_peers_find(struct rgapsd_peers *pm, const char *name)
{
	return pm->stopping ? NULL : pm_find(pm, name);
}

uint64_t rgapsd_peer_id(const struct rgapsd_peer *p)
{
	return p->id;
}

unsigned rgapsd_peer_sources(const struct rgapsd_peer *p)
{
	return p->sources;
}

bool rgapsd_peer_dials(const struct rgapsd_peer *p)
{
	return p->dial;
}

const char *rgapsd_peers_name(const struct rgapsd_peers *pm)
{
	return pm->name;
}

uint64_t rgapsd_peers_id(const struct rgapsd_peers *pm)
{
	return pm->id;
}

uint32_t rgapsd_peers_count(const struct rgapsd_peers *pm)
{
	return pm->npeers;
}

uint64_t rgapsd_peers_name_id(const char *name)
{
	uint8_t h[crypto_generichash_BYTES_MIN];
	uint64_t id = 0;

	crypto_generichash(h, sizeof(h), (const uint8_t *)name, strlen(name), NULL, 0);
	for (int i = 7; i >= 0; i--)
		id = id << 8 | h[i];
	return id;
}
