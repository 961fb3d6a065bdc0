/*
 * The peer control plane of rgapsd (docs/ARCHITECTURE.md section 7, docs/PROTOCOL.md
 * section 2): authenticated TCP sessions with the other daemons, on the loop
 * (libuv). It listens on "listen", connects to every configured peer with
 * back-off, runs the versioned handshake and the pre-shared-key
 * challenge-response (HMAC, libsodium), keeps sessions alive with pings, and
 * carries JSON control messages for the core (topic set-up, subscriptions,
 * data-link tokens). It knows nothing of topics.
 *
 * Identity: a daemon is named by its listen address "HOST:PORT" as written in
 * the others' "peers" lists and in the membership (src/daemon/membership/).
 * A session is accepted only from a daemon that proves the key and that is a
 * known peer; between two daemons that know each other only one session
 * survives (the one initiated by the smaller name).
 *
 * The set of peers: the configured ones (RGAPSD_PEER_STATIC, for the life of
 * the manager; we connect to each and each connects to us), and those a
 * membership source adds and drops at run time (RGAPSD_PEER_DISCOVERED; of
 * two such daemons only the smaller name connects, so a pair makes one
 * connection, not two that the duplicate rule then sorts out). Every peer has
 * an id that every host computes alike from its name (rgapsd_peers_name_id),
 * so that what is derived from the set (relay topologies) is the same
 * everywhere whatever source named the peer.
 *
 * Lifecycle: rgapsd_peers_start() -> peer_up / peer_msg / peer_down (any
 * number of times per peer: a peer that returns comes up again; a dropped
 * peer's last peer_down comes before its peer_gone) -> rgapsd_peers_stop()
 * (peer_down for each live session, then handles close asynchronously;
 * memory freed when the loop has closed them).
 */
#ifndef RGAPSD_PEERS_H
#define RGAPSD_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct sockaddr;

#define RGAPSD_PEER_KEY_MIN 32
#define RGAPSD_PEER_KEY_MAX 4096
#define RGAPSD_PEER_MSG_MAX (1024 * 1024) /* one control message */

struct rgapsd_peers;
struct rgapsd_peer;
struct rgapsd_looplag;

/* Where the manager learned of a peer (a peer may be known from both). */
#define RGAPSD_PEER_STATIC 0x1u	    /* the configuration's "peers" */
#define RGAPSD_PEER_DISCOVERED 0x2u /* a membership source (etcd) */

struct rgapsd_peers_ops {
	/* Authenticated session established. initiator: we connected. */
	void (*peer_up)(void *ctx, struct rgapsd_peer *p, bool initiator);
	/* Session gone (closed, keepalive timeout, protocol error); why is for the log.
	 * The peer object stays valid (it is reused when the peer returns). */
	void (*peer_down)(void *ctx, struct rgapsd_peer *p, const char *why);
	/* One control message (JSON text, not NUL-terminated) from an up peer. */
	void (*peer_msg)(void *ctx, struct rgapsd_peer *p, const char *json, size_t len);
	/* Optional. The peer is forgotten (rgapsd_peers_drop took its last source): the core
	 * lets go of p and of its data; p is freed once this returns and the loop ran. */
	void (*peer_gone)(void *ctx, struct rgapsd_peer *p);
};

struct rgapsd_peers_config {
	const char *listen;	      /* "HOST:PORT": our name and where we listen */
	const char *const *peers;     /* "HOST:PORT" of the other daemons */
	uint32_t npeers;
	const uint8_t *key;	      /* pre-shared key */
	size_t keylen;
	uint32_t keepalive_ms;	      /* ping interval; dead after 3 silent intervals */
	/*
	 * Accepted connections not yet authenticated (0: the defaults below). A source
	 * address holds at most max_pending_per_source of the max_pending places; a
	 * connection from a configured peer's address is admitted even when strangers
	 * fill them, in place of the oldest stranger (or the oldest of its own address).
	 * An accepted connection must deliver its whole HELLO within hello_timeout_ms.
	 */
	uint32_t max_pending;
	uint32_t max_pending_per_source;
	uint32_t hello_timeout_ms;
	/*
	 * The loop's lag probe (NULL: none). Deadlines that judge the other side by
	 * what we heard (keepalive, handshake) leave out the time our own loop stood
	 * still: its frames may have waited, unread, in our socket.
	 */
	const struct rgapsd_looplag *lag;
};

#define RGAPSD_PEERS_MAX_PENDING_DEFAULT 64
#define RGAPSD_PEERS_MAX_PENDING_PER_SOURCE_DEFAULT 8
#define RGAPSD_PEERS_HELLO_TIMEOUT_DEFAULT_MS 1000

struct rgapsd_peer_stats {
	uint64_t sessions;     /* times this peer came up */
	uint64_t reconnects;   /* connect attempts after the first */
	uint64_t msgs_sent, msgs_received, bytes_sent, bytes_received;
	uint64_t pings_sent, pongs_received;
	double rtt_ms;	       /* last ping round trip */
	bool up;
};

struct rgapsd_peers_stats {
	uint64_t accepted, auth_failures, unknown_peers, protocol_errors, duplicates_closed;
	uint64_t pending_refused;	 /* a stranger found every pending place taken */
	uint64_t pending_refused_source; /* a stranger's address held its share already */
	uint64_t pending_evicted;	 /* closed to admit a configured peer's address */
	uint64_t hello_timeouts;	 /* no whole HELLO within hello_timeout_ms */
	uint64_t stall_excused;		 /* deadlines moved: our own loop stood still (lag) */
};

/*
 * Read the key file: at least 32 bytes of any content, refused when group- or
 * world-readable (mode & 077), owned by another user than the process's
 * effective one, or not a regular file. Returns the length or a
 * negative errno, with the reason in err.
 */
int rgapsd_peers_load_key(const char *path, uint8_t *key, size_t keymax, char *err,
			  size_t errlen);


/* Bind the listener and start connecting. 0 or -errno (e.g. address in use). */
int rgapsd_peers_start(uv_loop_t *loop, const struct rgapsd_peers_config *cfg,
		       const struct rgapsd_peers_ops *ops, void *ctx, struct rgapsd_peers **pm_p);
void rgapsd_peers_stop(struct rgapsd_peers *pm);

/*
 * A peer a membership source learned of (source RGAPSD_PEER_DISCOVERED), or that
 * source added to a known peer. dial: we connect to it (else we only accept its
 * connections). 0; -EINVAL (not HOST:PORT); -EEXIST (our own name); -ECANCELED
 * (stopping); -ENOMEM. Not from inside a callback of the manager.
 */
int rgapsd_peers_add(struct rgapsd_peers *pm, const char *name, unsigned source, bool dial);
/*
 * The source no longer knows the peer. A peer left with no source is forgotten:
 * its session ends (peer_down with why), then peer_gone. 0, or -ENOENT when the
 * source did not know it. Not from inside a callback of the manager.
 */
int rgapsd_peers_drop(struct rgapsd_peers *pm, const char *name, unsigned source,
		      const char *why);
/* The known peer of that name, or NULL. */
struct rgapsd_peer *rgapsd_peers_find(struct rgapsd_peers *pm, const char *name);
/* A peer's id: the first 8 bytes of BLAKE2b-128 of its name, little-endian. */
uint64_t rgapsd_peers_name_id(const char *name);
const char *rgapsd_peers_name(const struct rgapsd_peers *pm); /* ours: the listen address */
uint64_t rgapsd_peers_id(const struct rgapsd_peers *pm);      /* ours */
uint32_t rgapsd_peers_count(const struct rgapsd_peers *pm);   /* known peers */

/* Queue one control message to an up peer (copied). 0, -ENOTCONN, -EMSGSIZE, -ENOMEM. */
int rgapsd_peer_send(struct rgapsd_peer *p, const char *json, size_t len);
/* Drop the session (e.g. the core found the peer hostile); peer_down follows. */
void rgapsd_peer_disconnect(struct rgapsd_peer *p, const char *why);

const char *rgapsd_peer_name(const struct rgapsd_peer *p); /* "HOST:PORT" */
const char *rgapsd_peer_host(const struct rgapsd_peer *p); /* HOST, for data links */
bool rgapsd_peer_is_up(const struct rgapsd_peer *p);
uint64_t rgapsd_peer_id(const struct rgapsd_peer *p);
unsigned rgapsd_peer_sources(const struct rgapsd_peer *p); /* RGAPSD_PEER_* bits */
bool rgapsd_peer_dials(const struct rgapsd_peer *p);	   /* we connect to it */
void rgapsd_peer_set_data(struct rgapsd_peer *p, void *data);
void *rgapsd_peer_get_data(const struct rgapsd_peer *p);
void rgapsd_peer_get_stats(const struct rgapsd_peer *p, struct rgapsd_peer_stats *st);
void rgapsd_peers_get_stats(const struct rgapsd_peers *pm, struct rgapsd_peers_stats *st);
/*
 * Is sa (a connection's source) a known peer's address, configured or
 * discovered: its numeric address, the one its name resolved to, or the one it
 * last opened a session from? Such connections always find a place among the
 * pending ones (admission.h).
 */
bool rgapsd_peers_source_known(const struct rgapsd_peers *pm, const struct sockaddr *sa);
/*
 * Iterate over every known peer, configured or discovered, in the order they became
 * known (the membership view: a peer that is down is still known). The walk must not
 * span a rgapsd_peers_drop().
 */
struct rgapsd_peer *rgapsd_peers_next(struct rgapsd_peers *pm, struct rgapsd_peer *prev);

#endif
