/*
 * Private to src/daemon/remote/: the structures every room of the remote path
 * shares, and what each file offers the others. The rest of rgapsd sees only
 * ../remote.h.
 *
 * Files, each calling only the ones below it (no circle):
 *
 *   remote.c      start, stop and the daemon's hooks (../remote.h); what this daemon
 *                 says of itself in the membership (../membership.h)
 *   stats.c       the "peers" section of `rgaps stats`
 *   transports.c  the transport plugins: load, options, listen; routes their callbacks
 *   session.c     peer sessions: up/down, control-message dispatch, the tick
 *   links.c       data links: offer, accept, connect, loss
 *   relay.c       the relay trees: who sends a topic to whom, passing landed records on
 *   sender.c      out rings and chunks: the sender's state machine and its driver
 *   receiver.c    in rings and records: the receiver's state machine and its driver
 *   source.c      a topic's messages from one origin: its sequence and landing stream
 *   forwarder.c   the thread that takes each local message for the sender
 *   attach.c      publishers whose attach waits for the topic's set-ups
 *   resend.c      resend windows: copies of the newest messages, to send again (a flap, a relay)
 *   staging.c     DP1: device-pool chunks copied to pinned host slots
 *   stages.c      pluggable stages: a topic's stage plugins, run on the stage workers
 *   copies.c      copies between pools and host memory off the loop; NUMA placement
 *   peer.c        one peer as the core sees it: lookup, sending, refusing a hostile one
 *   local.c       the remote path's view of the local topic (the only user of ../../common/topic.h)
 *   wire.c        pure codecs: control messages, the record header check (wire.h)
 *   topology.c    pure: the order of a tree's hosts, parents, the model of "auto"
 *
 * Everything runs on the loop thread except the forwarder threads and the
 * workers (copies, stages, the resend windows' keeper), which reach the loop
 * only through the mailbox (../worker.h).
 */
#ifndef RGAPSD_REMOTE_INTERNAL_H
#define RGAPSD_REMOTE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <uv.h>

#include "../../common/futex.h"
#include "../../common/plugin_loader.h"
#include "../admission.h"
#include "record.h"
#include "ring.h"
#include "../daemon.h"
#include "../own.h"
#include "../hostport.h"
#include "../peers/peers.h"
#include "../remote.h"
#include "../worker.h"
#include "wire.h"

#define RT_HDR_SLOTS 512	 /* record headers in flight per out ring */
#define RT_HDR_SLOT 128		 /* bytes per header slot: the header, at +64 the stage tag */
#define RT_SETUP_TIMEOUT_MS 5000 /* a publisher's attach waits at most this for peers */
#define RT_TICK_MS 500
#define RT_RETRY_MS 2	       /* blocked receivers retry this often */
#define RT_RESETUP_MIN_MS 500  /* a refused topic set-up is asked again after this, */
#define RT_RESETUP_MAX_MS 8000 /* doubling up to this */
#define RT_DEFERRED_MAX 64     /* set-ups held while the data link they need connects */
#define RT_TREE_RETRY_MS 250   /* a set-up refused by the tree is asked again after this */

#define RT_TR_MAX RGAPSD_MAX_TRANSPORTS /* transport plugins one daemon uses */

/* ---------------------------------------------------------------- local.c */

/* A message the forwarder took from the local topic. */
struct rt_local_msg {
	uint64_t seq, size, ts_ns;
	uint64_t gap; /* messages of its stream the forwarder missed before it */
	uint64_t origin_stream, origin_seq;
	const uint8_t *data; /* its bytes in this process (a device address for device pools) */
	struct rgapsd_member *src; /* the publisher stream it is in (valid until release) */
	uint64_t fwd_seq;	   /* the forwarder's count, messages it missed included */
	bool remote_origin;	   /* landed from a peer: never forwarded again */
	uint32_t token;		   /* the hold, for release */
};

/*
 * The forwarder's subscriber of a topic: a subscriber region of rgapsd's own
 * and a view of every publisher stream, through the members' mappings. Taken
 * on the forwarder thread, released on the loop: lock serialises the two.
 */
struct rt_local_sub {
	struct rgapsd_own_sub own;
	pthread_mutex_t lock;
	bool open;
};

/* The publisher that lands messages from one in ring: a stream of rgapsd's own. */
struct rt_local_pub {
	struct rgapsd_own_pub own;
	bool open;
};

int rt_local_sub_open(struct rgapsd_topic *t, struct rt_local_sub *s);
/*
 * Take the next message (waits up to timeout_ms). 0; -ETIMEDOUT, -EAGAIN or
 * -EINTR: nothing yet; -ENOBUFS: every hold of the slot is in flight (wait for a
 * release); anything else: the topic is gone. A gap-only message (the loss of
 * messages its publisher never got to forward) has src NULL and nothing to release.
 */
int rt_local_sub_take(struct rt_local_sub *s, int timeout_ms, struct rt_local_msg *m_p);
void rt_local_sub_release(struct rt_local_sub *s, const struct rt_local_msg *m);
void rt_local_sub_close(struct rt_local_sub *s);

int rt_local_pub_open(struct rgapsd_topic *t, struct rt_local_pub *p);
/* Borrow size bytes: the token and where to write them. -EAGAIN / -ENOBUFS: try again later. */
int rt_local_pub_loan(struct rt_local_pub *p, uint64_t size, uint32_t *token_p, uint8_t **dst_p);
/*
 * Publish a loan as a message from a peer (gap: lost before it; origin: its
 * stream and seq on the publishing host). -EAGAIN: queue full, retry.
 */
int rt_local_pub_commit(struct rt_local_pub *p, uint32_t token, uint64_t size, uint64_t ts_ns,
			uint32_t gap, uint64_t origin_stream, uint64_t origin_seq);
void rt_local_pub_cancel(struct rt_local_pub *p, uint32_t token);
/* Publish "gap messages from a peer were lost" with no payload. -EAGAIN: queue full, retry. */
int rt_local_pub_gap(struct rt_local_pub *p, uint32_t gap, uint64_t ts_ns);
/* Free what the subscribers are done with (the sweep: an idle receiver publishes nothing). */
void rt_local_pub_reclaim(struct rt_local_pub *p);
void rt_local_pub_close(struct rt_local_pub *p);

/* ---------------------------------------------------------------- state machines */

/*
 * A message on the sender side (one per locally published message). Its state
 * follows its chunks: it is SENT (or DROPPED) when the last of them is.
 */
enum rt_out_state {
	OUT_TAKEN,    /* held from the topic by the forwarder's subscriber slot */
	OUT_QUEUED,   /* cut into chunks, queued on the ring of every interested peer */
	OUT_SENT,     /* every record left the source memory */
	OUT_RELEASED, /* hold released: the pool block may be freed */
	OUT_DROPPED,  /* a destination went away before all was sent (counted) */
	OUT_NUM_STATES
};
extern const char *const rt_out_state_names[OUT_NUM_STATES];

/*
 * A chunk of a message on its way to one peer's ring (one per chunk and
 * interested ring). The sender's driver (out_drive in sender.c) moves the
 * chunks of a ring strictly in queue order, since ring space is taken in order.
 */
enum rt_chunk_state {
	CHUNK_QUEUED,	  /* in its ring's queue; earlier chunks of the ring go first */
	CHUNK_STAGING,	  /* reached; its D2H copy into a staging slot runs (device pools), or
			     the copy it is sent again from is still being made (resend.c) */
	CHUNK_STAGED,	  /* its bytes are where the transport reads them (pool, slot, window) */
	CHUNK_PROCESSING, /* the topic's before-send stages run on it (stages.c) */
	CHUNK_RESERVED,	  /* ring space taken, header written; waits for send credits */
	CHUNK_POSTED,	  /* handed to the transport; the source may still be read */
	CHUNK_SENT,	  /* record_sent: out of the source memory */
	CHUNK_DROPPED,	  /* never sent (ring closed, link lost, no room) or failed in flight */
	CHUNK_NUM_STATES
};
extern const char *const rt_chunk_state_names[CHUNK_NUM_STATES];

/* A record on the receiver side (one per landed chunk). */
enum rt_in_state {
	IN_RECEIVING, /* its header checked (record_header), its bytes still arriving: into the
			 ring, or straight into its message's pool block */
	IN_LANDED,    /* in the ring (or its block), header checked */
	IN_CHECKING,  /* the topic's after-landing stages run on it (stages.c) */
	IN_CHECKED,   /* ... and passed */
	IN_ALLOCATED, /* its message has a pool block (the first chunk allocates) */
	IN_COPYING,   /* the worker copies ring -> pool */
	IN_COPIED,    /* chunk in the pool */
	IN_FINISHING, /* last chunk: the before-publish stages run on the whole message */
	IN_FINISHED,  /* ... and passed */
	IN_PUBLISHED, /* last chunk: the message is committed to local subscribers */
	IN_RELEASED,  /* ring space given back (Head advanced) */
	IN_DROPPED,   /* refused, failed a stage, or its link lost: nothing published */
	IN_NUM_STATES
};
extern const char *const rt_in_state_names[IN_NUM_STATES];

/* ---------------------------------------------------------------- stages.c */

enum { RT_POINT_SEND, RT_POINT_LANDING, RT_POINT_PUBLISH, RT_POINTS };
extern const char *const rt_stage_point_names[RT_POINTS];

/* A stage plugin as this daemon loaded it (once, whatever the topics using it). */
struct rt_stage_plugin {
	SLIST_ENTRY(rt_stage_plugin) link;
	struct rgaps_loaded_plugin *lp;
	void *ctx;
	struct rgaps_stage_desc desc;
};

/* The stages of one topic, in the order of its "stages" key. */
struct rt_stages {
	SLIST_ENTRY(rt_stages) link;
	struct rgapsd_topic *t;
	uint32_t n;
	struct {
		struct rt_stage_plugin *sp;
		void *topic_state;
		uint32_t tag_off;   /* its bytes in the record's stage tag */
		uint32_t state_off; /* its part of a message's state */
	} s[RGAPS_CFG_MAX_STAGES];
	uint32_t points;	 /* RGAPS_STAGE_* of any of them */
	uint32_t msg_state_size; /* all of them together */
	uint32_t tag_len;	 /* all of them together; > 0: every record carries a tag */
	uint64_t runs[RT_POINTS], fails[RT_POINTS];
	uint64_t ns[RT_POINTS]; /* on the workers: from taking the work to its result */
};

/* One pass of a chunk or message through a topic's stages at one point. */
struct rt_swork {
	struct rgapsd_job job; /* on the stage workers; job.done brings it back */
	struct rt_stages *st;
	struct rgaps_stage_work w; /* the caller sets the point, the data and the message */
	void *msg_state;	   /* the message's state (st->msg_state_size bytes) */
	uint8_t tag[RGAPS_STAGE_TAG_MAX];
	enum { SWORK_IDLE, SWORK_RUNNING, SWORK_DONE } phase;
	int result; /* RGAPS_STAGE_CONTINUE or RGAPS_STAGE_FAIL, with why */
	char why[160];
	uint32_t next;			   /* the stage to run next */
	void (*done)(struct rt_swork *sw); /* on the loop, once */
	void *arg, *arg2;		   /* the caller's */
	struct rgapsd_remote *rt;
	uint64_t t_run, t_end; /* CLOCK_MONOTONIC: a worker took it, the result was posted */
};

/* The stages of topic t (an empty set without "stages"). NULL: err says why. */
struct rt_stages *rt_stages_of(struct rgapsd_remote *rt, struct rgapsd_topic *t, char *err,
			       size_t errlen);
bool rt_stages_at(const struct rt_stages *st, uint32_t point);
/* Run sw's stages at sw->w.point on the stage workers; sw->done(sw) on the loop after. */
void rt_swork_start(struct rgapsd_remote *rt, struct rt_swork *sw);
void rt_stages_free(struct rt_stages *st);
void rt_stages_topic_gone(struct rgapsd_remote *rt, struct rgapsd_topic *t);
void rt_stages_stop(struct rgapsd_remote *rt);

/* ---------------------------------------------------------------- structures */

struct rgapsd_remote;
struct rt_peer;
struct rt_topic;
struct rt_source;

/* One transport plugin (the registry's transports, by priority, highest first). */
struct rt_transport {
	struct rgapsd_remote *rt;
	int idx;
	char name[32];
	uint32_t priority;    /* "auto" takes the first usable one with priority > 0 */
	uint16_t port_offset; /* data links on the control port + this */
	struct rgaps_loaded_plugin *lp;
	void *ctx;
	struct rgaps_transport_cbs cbs;
	/* Its data port's connections that have not presented a token yet (admission.h),
	 * bounded by the peer port's keys; its refusals of tokens, rate-limited in the log. */
	struct rgapsd_admission pending;
	char pending_what[48];
	struct rgaps_ratelimit token_rl;
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

/*
 * A message kept to be sent again (resend.c): its copy at win->mem + off,
 * oldest first in win->kept, the oldest overwritten first.
 */
struct rt_kept {
	TAILQ_ENTRY(rt_kept) link;
	struct rt_window *win;
	uint64_t seq, size, ts_ns, origin_stream, origin_seq, off;
	uint64_t kept_ns; /* when it began to be kept here (monotonic) */
	uint64_t have;	/* its first bytes in the window so far: sent again up to there */
	uint32_t fills; /* copies into it that run on the keep worker */
	uint32_t busy;	/* being made, or sent again: not overwritten until done */
	bool making;	/* not whole yet: it holds one of busy */
	bool dropped;	/* given up before it was whole: freed once its copies ran */
};

/*
 * A resend window: copies of the newest messages of one stream (this host's
 * own messages of a topic, or a source a relay passes on), resend.c.
 */
struct rt_window {
	struct rgapsd_remote *rt;
	uint8_t *mem;
	uint64_t size, used;
	TAILQ_HEAD(rt_keptq, rt_kept) kept;
	void *mr[RT_TR_MAX];
	bool failed;  /* no memory for it: nothing kept (logged once) */
	bool closing; /* freed once no copy runs and none is sent from it */
	uint64_t evicted, unkept;
};

struct rt_omsg {
	struct rt_topic *tt;
	struct rt_local_msg msg;
	struct rt_kept *kept; /* sent again after a flap: from its kept copy, no hold to release */
	/*
	 * A live message's copy in the resend window (busy while m lives): once it is
	 * made, chunks not yet posted go from it, and the forwarder's hold goes as soon
	 * as no transport reads the pool for m (held).
	 */
	struct rt_kept *copy;
	uint32_t pool_reads; /* chunks posted from the pool, not yet sent */
	bool held;	     /* the forwarder's hold on m is ours to release */
	uint32_t refs; /* chunks in flight + 1 while queuing (relayed: + 1 while landing) */
	bool relayed;  /* passing through (relay.c): each chunk holds the record it is sent from */
	bool dropped;
	enum rt_out_state state;
	/* Before-send stages, one pass per chunk, one at a time: chunk k's waits for k-1's. */
	struct rt_swork *works; /* [nchunks], NULL without such stages */
	uint32_t nchunks, works_started;
	void *msg_state;
};

/*
 * A chunk of a message whose pool is device memory, copied once (D2H) into a
 * slot of the topic's pinned staging buffer and sent from there to every
 * interested ring (DP1). Chunk k+1 is staged while chunk k is on the wire.
 */
struct rt_d2h {
	struct rgapsd_job job;	   /* worker fallback; job.done is the completion message */
	STAILQ_ENTRY(rt_d2h) link; /* tt->d2h_q, while waiting for a slot */
	struct rt_topic *tt;
	struct rt_omsg *m;
	uint64_t off, len;
	uint32_t slot;
	uint32_t refs; /* ring chunks that send from it */
	int status;
	bool ready;
};

struct rt_chunk {
	STAILQ_ENTRY(rt_chunk) link; /* o->queue until POSTED, then o->inflight */
	enum rt_chunk_state state;
	uint32_t index; /* in its message */
	struct rt_omsg *m;
	struct rt_d2h *d2h; /* NULL: sent straight from the (host) pool */
	struct rt_rec *rec; /* relayed: the landed record it is sent from (held until sent) */
	struct rt_out *o;
	uint64_t off, len;
	uint32_t flags;
	uint32_t hdr_slot;	     /* RESERVED and later */
	struct rgaps_ring_slot slot; /* RESERVED and later */
	uint64_t loss_seq;	     /* a loss notice (m NULL): the newest message it covers */
	bool from_pool;		     /* POSTED from the pool (m->pool_reads) */
};
STAILQ_HEAD(rt_chunk_q, rt_chunk);

struct rt_out {
	struct rt_peer *p;
	struct rt_topic *tt;
	struct rt_source *src;	      /* a relay's ring (relay.c): what it passes on; NULL: ours */
	SLIST_ENTRY(rt_out) in_topic; /* tt->outs, or src->outs for a relay's ring */
	struct rt_relay_mode mode;    /* the tree it was set up in */
	uint32_t id;
	int tr;
	enum { OUT_RING_PREPARING, OUT_RING_READY, OUT_RING_CLOSING } state;
	bool tell_peer; /* send topic_teardown once closed */
	bool tell_moved; /* ... saying that the peer gets the topic from another host now */
	struct rgaps_ring_geom geom;
	struct rgaps_ring_sender ring;
	uint8_t *hdrs;
	void *hdrs_mr;
	uint32_t hdr_head, hdr_used;
	struct rt_chunk_q queue;    /* QUEUED .. RESERVED, in order */
	struct rt_chunk_q inflight; /* POSTED, in posting order */
	uint64_t record_seq;
	/* The newest message this ring carried to its peer (whole, or in a loss notice). */
	bool told;
	uint64_t told_seq;
	bool queued_any; /* the first message queued on it: older ones are sent again */
	uint64_t first_seq;
	/* A relay's ring: the messages it carries as they land (relay.c). */
	uint64_t live_from;	  /* the first message it may start: none begun before it existed */
	uint64_t skip_below;	  /* the receiver has every message below this one */
	uint64_t carried_next;	  /* one past the last message it began to carry */
	struct rt_omsg *carrying; /* the relayed message whose chunks it takes as they land */
	uint64_t records, bytes, ring_stalls, credit_stalls, dropped_msgs, loss_notices, resent;
};

/* A message landing on an in ring, shared by its records (stages only). */
struct rt_imsg {
	uint32_t refs;
	bool failed;	/* a stage refused it: its records are dropped, its loan given back */
	bool loan_open; /* failed with a loan that its last record gives back */
	uint32_t loan_token;
	void *state; /* the stages' message state */
};

struct rt_rec {
	struct rgapsd_job job;
	uint32_t holds;		   /* chunks that relay.c sends from it: its ring space stays */
	struct rt_swork *work;	   /* after-landing or before-publish stages, while they run */
	struct rt_imsg *im;	   /* NULL for topics without stages */
	STAILQ_ENTRY(rt_rec) link; /* in->recs, in landing order */
	struct rt_in *in;
	struct rgaps_ring_slot slot;
	struct rgaps_record_hdr h;
	enum rt_in_state state;
	uint32_t loan_token;
	uint8_t *loan_dst;
	uint32_t gap; /* upstream gap before this message (first chunk) */
	bool dup;     /* a message sent again that was delivered already: dropped quietly */
	uint64_t lost; /* dropped with this record, to tell subscribers (or a loss notice's) */
	int copy_status;
	/* record_header (tcp): the record arrives after its header was checked */
	STAILQ_ENTRY(rt_rec) alink; /* in->arriving while IN_RECEIVING */
	uint64_t claimed_off, len;  /* as record_header named it: record_landed matches it */
	bool preloaned;	 /* first chunk: its message's block was loaned at this header */
	bool redirected; /* its chunk landed straight in that block: nothing to copy */
	bool in_block;	 /* of a message whose block came at its first header: the ring may
			  * lack its bytes (the relay passes none of it on) */
	bool unloaned;	 /* first chunk counted in in->unloaned until its block is loaned */
};

/* A topic_setup that waits for the data link it names. */
struct rt_deferred {
	STAILQ_ENTRY(rt_deferred) link;
	struct rt_wire_msg m;
};

struct rt_in {
	struct rt_peer *p;
	struct rgapsd_topic *topic;
	struct rt_source *src; /* the origin whose messages it carries */
	uint32_t id;
	int tr;
	uint8_t *mem;
	uint64_t size;
	struct rgaps_ring_geom geom;
	struct rgaps_ring_receiver ring;
	struct rt_local_pub *pub;  /* its source's landing stream */
	struct rt_landing landing; /* what the next record must be (wire.h) */
	struct rt_stages *stages;
	struct rt_imsg *landing_im; /* the message now landing (stages only) */
	struct rt_rec *checking;    /* the record whose after-landing stages run (one at a time) */
	bool lingering; /* dead with work in flight: counted in p->lingering until freed */
	bool have_next;	       /* the sender's sequence number the next message should have */
	uint64_t next_msg_seq; /* (a jump is a loss) */
	/* processing */
	bool asm_open; /* a loan is open for the message being assembled */
	uint32_t asm_token;
	uint8_t *asm_dst;
	uint32_t asm_gap;	    /* lost upstream before it: reported when it is published */
	STAILQ_HEAD(, rt_rec) recs; /* landed, not yet released */
	uint32_t jobs;		    /* records with the worker */
	uint32_t held;		    /* records that relay.c sends from (rt_rec.holds > 0) */
	void *send_mr[RT_TR_MAX];   /* the ring registered as a source of records (relays) */
	struct rt_rec *drive_from;  /* first record not yet handed to the worker */
	bool blocked;
	bool dead;
	bool ending;	      /* rt_in_free tells relay.c of its end: a release must not free it */
	uint64_t pending_gap; /* lost, not yet told: a gap-only message at the end of the drive */
	uint64_t pending_next;
	bool pinned;	      /* ring registered with the memory plugin (device pools) */
	bool have_told;	      /* subscribers know the fate of every message before told_next */
	uint64_t told_next;
	uint64_t epoch;	     /* the sender's topic instance (0: an older sender without one) */
	bool sender_resends; /* it sends again what a flap cut off: no loss to tell at the end */
	bool landing_dup;    /* the message now landing is a duplicate */
	/*
	 * record_header (tcp): records are checked as their headers arrive, and a
	 * host pool's message may land straight in its block (no ring -> pool copy).
	 */
	bool headers;			/* the transport tells this ring's headers */
	STAILQ_HEAD(, rt_rec) arriving; /* IN_RECEIVING, in ring order */
	bool hdr_direct;		/* the message arriving has its block from its header */
	uint32_t hdr_token;
	uint8_t *hdr_dst;
	uint32_t unloaned; /* messages arrived whose block the driver has yet to loan */
	uint64_t direct_records, direct_bytes;
	uint64_t records, bytes, messages, upstream_gaps, refused, blocked_retries, stage_drops;
	uint64_t loss_notices, gap_reports, duplicates;
};

/*
 * A topic's messages from one origin, the host they were published on, as
 * this host receives them, whichever peer sends them (the origin itself, or a
 * relay of its tree): one per (topic, origin), kept by name for the daemon's
 * life. Its sequence goes on across rings, sessions and parents, and so does
 * its landing stream while the topic has subscribers here. In a relay tree it
 * is also what this host passes on to its children (relay.c).
 */
struct rt_source {
	SLIST_ENTRY(rt_source) link; /* rt->sources */
	struct rgapsd_remote *rt;
	char topic[RGAPS_TOPIC_NAME_MAX + 1];
	char origin[RT_HOST_MAX + 1];
	/* Where its next ring goes on: the first message subscribers were not told of. */
	bool seen; /* a ring of it ran: next, epoch and owed hold */
	uint64_t next;
	uint64_t epoch; /* of the origin's topic: another one starts a new sequence */
	uint64_t owed;	/* landed, never published, left for the sender to send again */
	/* While held (a ring, its landing stream, rings to children): its topic. */
	struct rgapsd_topic *t;
	struct rt_in *in;	 /* the ring it arrives on now; NULL between two */
	struct rt_local_pub pub; /* its landing stream here */
	/* Passing it on (relay.c). */
	struct rt_relay_mode mode; /* of its tree, as the set-up of its ring said */
	uint64_t chunk_size;	   /* of its origin (the set-up's): records pass on as they are */
	bool have_seq;		   /* the newest message it heard of, landed or told lost */
	uint64_t last_seq;
	SLIST_HEAD(, rt_out) outs; /* rings to its children */
	struct rt_omsg *relaying;  /* the message whose records land now, NULL between two */
	struct rt_window window;   /* what it sends again to a child that comes to it */
	struct rt_kept *keeping;   /* the entry of the message whose records land now */
	uint64_t relayed, relayed_bytes, relay_drops, relay_aborts, resent;
};

struct rt_peer {
	struct rgapsd_remote *rt;
	struct rgapsd_peer *peer;
	SLIST_ENTRY(rt_peer) link; /* rt->peers */
	bool initiator;
	struct rt_link links[RT_TR_MAX];
	/*
	 * The topics it has subscribers for, and since when (its clock, ms), as it
	 * said last. Kept while it is down: it keeps its place in relay trees, the
	 * hosts below it attach above it, until it comes back and says anew.
	 */
	char (*subs)[RGAPS_TOPIC_NAME_MAX + 1];
	uint64_t *joined;
	/* When this host heard of each first (monotonic; anew with each session): what
	 * this host keeps of a topic from then on is the peer's on its first ring. */
	uint64_t *learned_ns;
	uint32_t nsubs;
	bool subs_fresh; /* said in the current session */
	struct rt_out *out[RT_RINGS];
	struct rt_in *in[RT_RINGS];
	uint32_t next_ring; /* round-robin cursor in our half of the ring ids */
	/* Receiver: set-ups that arrived before the data link they name (its connect
	 * and the set-up race on two sockets); run when the link comes up. */
	STAILQ_HEAD(, rt_deferred) deferred[RT_TR_MAX];
	uint32_t ndeferred[RT_TR_MAX];
	/* Sender: a refused set-up is asked again, with back-off, until it succeeds. */
	uint64_t resetup_at_ns;
	uint32_t resetup_ms;
	/* Its tree refused a set-up or left a ring: no new ring to it before this (monotonic). */
	uint64_t tree_hold_ns;
	uint64_t hostile, link_downs, setup_refusals, setups_deferred, duplicates;
	/* The peer manager forgot the peer (peer_gone): out of rt->peers, peer NULL, freed
	 * once the last of its dead in rings with work in flight (lingering) is. */
	bool gone;
	uint32_t lingering;
	uint64_t tree_refusals, leaves; /* its set-ups refused by the tree; rings it left */
};

struct rt_waiter {
	SLIST_ENTRY(rt_waiter) link; /* tt->waiters */
	void (*done)(void *arg, int status);
	void *arg;
	uint64_t deadline;
};

struct rt_topic {
	struct rgapsd_remote *rt;
	struct rgapsd_topic *t;
	SLIST_ENTRY(rt_topic) link;	 /* rt->topics */
	SLIST_HEAD(, rt_out) outs;	 /* one per interested peer */
	SLIST_HEAD(, rt_waiter) waiters; /* publishers whose attach waits for the set-ups */
	/* forwarder */
	pthread_t fwd_thread;
	bool fwd_started;
	uint32_t fwd_stop;
	uint32_t fwd_released; /* futex word: bumped when the loop releases a forwarded hold */
	struct rt_local_sub fwd;
	void (*fwd_deliver)(struct rt_topic *tt, const struct rt_local_msg *m); /* on the loop */
	uint64_t forwarded, skipped_remote, unsent_no_peer, too_large, stage_drops;
	uint64_t fwd_seq; /* forwarder thread: next fwd_seq (messages missed are skipped) */
	bool have_seq;	  /* loop: the newest fwd_seq assigned (a message, or one missed) */
	uint64_t last_seq;
	struct rt_stages *stages;
	/* staging (device-memory pools only) */
	bool staged;
	uint8_t *stg;
	uint64_t stg_slot, stg_size;
	uint32_t stg_nslots, stg_nfree;
	uint32_t *stg_free;
	bool stg_pinned;
	void *stg_mr[RT_TR_MAX];
	STAILQ_HEAD(, rt_d2h) d2h_q;	      /* waiting for a slot */
	void (*d2h_ready)(struct rt_d2h *st); /* a copy finished (on the loop) */
	uint64_t staged_chunks, staged_bytes;
	uint64_t epoch; /* this instance of the topic, named in topic_setup */
	struct rt_window window; /* resend window (host-memory topics, resend_window > 0) */
	uint64_t resent;
	uint32_t pool_msgs; /* live messages with chunks posted from the pool, not yet sent */
	uint64_t from_copy; /* chunks of live messages posted from their copy in the window */
	/* Its relay tree, as this host (its origin) lays it out (relay.c). */
	struct rt_relay_mode mode;
	bool mode_set;
	uint32_t mode_hosts; /* "auto": the hosts and message size it was decided for */
	uint64_t mode_size;
	char mode_why[320];
	uint64_t size_mean; /* of the messages forwarded lately (a moving mean) */
	/* On a relay: what outlives the rings of the topic's sources here (relay.c). */
	uint32_t nrings;   /* out rings, of tt->outs or a source's, closing ones too */
	uint32_t nrelayed; /* relayed messages whose chunks are not all sent */
};

/* A topic with subscribers on this host, and since when (ms, CLOCK_REALTIME). */
struct rt_joined {
	char topic[RGAPS_TOPIC_NAME_MAX + 1];
	uint64_t ms;
};

struct rgapsd_membership;

struct rgapsd_remote {
	struct rgapsd *d;
	struct rgapsd_peers *pm;
	struct rgapsd_membership *ms; /* with "discovery": the hosts etcd knows */
	struct rt_transport tr[RT_TR_MAX];
	int ntr;
	SLIST_HEAD(, rt_peer) peers;
	SLIST_HEAD(, rt_topic) topics;
	SLIST_HEAD(, rt_source) sources;
	/* What relay.c wants to hear from the receiver (STYLE.md 18: no call upwards). */
	void (*relay_landed)(struct rt_in *in, struct rt_rec *r);
	/* Would the relay read, from the ring, a message that starts landing on in now? */
	bool (*relay_reads_ring)(struct rt_in *in);
	void (*relay_ring_end)(struct rt_in *in);
	/* The sizes of tt's messages moved fourfold since "auto" chose its tree. */
	void (*relay_size_moved)(struct rt_topic *tt);
	struct rt_joined *joined; /* the topics with subscribers here, since when (relay.c) */
	uint32_t njoined;
	struct rgapsd_mailbox mb;
	struct rgapsd_worker worker;	 /* copies (one thread: completions in order) */
	struct rgapsd_worker stage_pool; /* stages (several threads) */
	struct rgapsd_worker keeper;	 /* copies into the resend windows (one thread) */
	SLIST_HEAD(, rt_stage_plugin) stage_plugins;
	SLIST_HEAD(, rt_stages) stages;
	uv_timer_t tick, retry;
	bool retry_armed;
	uint8_t key[RGAPSD_PEER_KEY_MAX];
	size_t keylen;
	uint64_t out_trans[OUT_NUM_STATES][OUT_NUM_STATES];
	uint64_t chunk_trans[CHUNK_NUM_STATES][CHUNK_NUM_STATES];
	uint64_t in_trans[IN_NUM_STATES][IN_NUM_STATES];
	uint64_t unknown_tokens;
	bool mem_async_missing; /* the memory plugin has no copy_async: use the worker */
	/*
	 * Asynchronous copies in flight (copies.c): while some are, the loop polls
	 * instead of sleeping (an idle handle), for at most copy_spin_ns after the
	 * last copy started or ended. The plugin's thread ends copies: atomics.
	 */
	uv_idle_t copy_spin;
	bool copy_spinning;
	uint64_t copy_spin_ns;
	uint32_t copies_in_flight;
	uint64_t copy_last_ns;
	uint64_t copy_spin_rounds, copy_spin_timeouts;
};

/* ---------------------------------------------------------------- peer.c */

/* The core's state for peer (created on first use; NULL when out of memory). */
struct rt_peer *rt_peer_of(struct rgapsd_remote *rt, struct rgapsd_peer *peer);
/* The peer manager forgot p's peer (its session went down before): p leaves rt->peers. */
void rt_peer_forget(struct rt_peer *p);
/* A lingering in ring of p was freed: p goes too if it was the last and p is forgotten. */
void rt_peer_unlinger(struct rt_peer *p);
/* The peer whose data link of transport tr is link, or NULL. */
struct rt_peer *rt_peer_of_link(struct rgapsd_remote *rt, int tr, struct rgaps_link *link);
bool rt_peer_subscribes(const struct rt_peer *p, const char *topic);
/* When this host heard that p subscribes to topic (monotonic), UINT64_MAX if it did not. */
uint64_t rt_peer_learned_ns(const struct rt_peer *p, const char *topic);
/* Send a control message (a failure is logged: the session is going down then). */
void rt_peer_send(struct rt_peer *p, const struct rt_wire_msg *m);
/* A peer broke the protocol: log why, drop the session; nothing it sent goes further. */
void rt_hostile(struct rt_peer *p, const char *fmt, ...) RGAPS_PRINTF(2, 3);
/* Index in rt->tr of the transport of that name, or -1. */
int rt_tr_index(const struct rgapsd_remote *rt, const char *name);
/*
 * The transport a topic uses towards p: its configured one, or "auto": the
 * transport of highest priority with a data link up. -1: none.
 */
int rt_pick_transport(const struct rt_peer *p, const struct rgaps_topic_config *tc);

/* ---------------------------------------------------------------- source.c */

/* The source of topic's messages from origin (created on first use; NULL when out of memory). */
struct rt_source *rt_source_of(struct rgapsd_remote *rt, const char *topic, const char *origin,
			       bool create);
/* Hold t for src and open its landing stream there (once). 0, or -errno (logged). */
int rt_source_open(struct rt_source *src, struct rgapsd_topic *t);
/*
 * Let go of what src no longer needs: its landing stream once no ring lands
 * and the topic has no subscriber here, the topic once nothing holds it.
 */
void rt_source_check(struct rt_source *src);
/* Do sources hold t (a ring landing, a landing stream, rings to children)? */
bool rt_sources_hold(const struct rgapsd_remote *rt, const struct rgapsd_topic *t);
/* t goes: its sources let go of it (their rings are gone already). */
void rt_sources_topic_gone(struct rgapsd_remote *rt, struct rgapsd_topic *t);
void rt_sources_free(struct rgapsd_remote *rt);

/* ---------------------------------------------------------------- copies.c */

/*
 * Copy between a pool and host memory off the loop thread: on the memory
 * plugin's own stream (cuda: completion seen by its waiter thread), else on
 * the worker (job->run does the copy there). job->done runs on the loop either
 * way, in start order, with *status set.
 */
void rt_copy_start(struct rgapsd_remote *rt, struct rgaps_loaded_plugin *mem,
		   struct rgapsd_job *job, int *status, void *dst, const void *src, uint64_t n,
		   uint32_t dir);
/* The loop's polling while asynchronous copies are in flight (copy_spin_us). */
void rt_copies_init(struct rgapsd_remote *rt, uv_loop_t *loop, uint32_t spin_us);
void rt_copies_fini(struct rgapsd_remote *rt);
/* Host memory a GPU copies to or from goes on the GPU's NUMA node: bind, check, log. */
void rt_place_near_device(struct rgapsd_topic *t, void *addr, size_t len, const char *what);

/* ---------------------------------------------------------------- staging.c */

/* Set up the topic's pinned staging buffer and register it with transport tr. */
int rt_staging_setup(struct rt_topic *tt, int tr);
/*
 * Queue st for a staging slot; tt->d2h_ready(st) runs on the loop once its
 * copy is done (st->status says how), holding a reference it must put.
 */
void rt_d2h_queue(struct rt_d2h *st);
/* Start the copies that have a free slot now. */
void rt_d2h_pump(struct rt_topic *tt);
/*
 * Drop one reference. The last frees st and gives its slot back; it returns
 * the message whose reference st held (the caller drops it), else NULL.
 */
struct rt_omsg *rt_d2h_put(struct rt_d2h *st);
void rt_staging_free(struct rt_topic *tt);

/* ---------------------------------------------------------------- resend.c */

void rt_window_init(struct rt_window *w, struct rgapsd_remote *rt);
/*
 * Keep a copy of a forwarded message of topic t in window w, if t has one.
 * The copy is made off the loop, on the keep worker: its entry when it was
 * started, and then done(arg) runs on the loop once it is made (whole); until
 * then the caller keeps msg's bytes where they are (its hold on the message).
 * NULL: nothing kept (no window, or no room: counted), done is never called.
 * The entry is busy until its copy is made; a caller that reads it later keeps
 * it busy itself (busy++ now, busy-- when done with it).
 */
struct rt_kept *rt_window_keep(struct rt_window *w, const struct rgapsd_topic *t,
			       const struct rt_local_msg *msg, void (*done)(void *arg), void *arg);
/*
 * A relayed message of topic t whose first record (h) landed: its entry in w,
 * filled record by record (rt_window_fill) and whole once its last copy is
 * made, or dropped (rt_window_drop). NULL: nothing kept (counted).
 */
struct rt_kept *rt_window_open(struct rt_window *w, const struct rgapsd_topic *t,
			       const struct rgaps_record_hdr *h);
/* Copy len bytes of src to off in k, on the keep worker; done(arg) on the loop after. */
bool rt_window_fill(struct rt_kept *k, uint64_t off, const uint8_t *src, uint64_t len,
		    void (*done)(void *arg), void *arg);
/* k will not be whole (its ring ended): it goes once its copies ran; never sent again. */
void rt_window_drop(struct rt_kept *k);
/* Are bytes [off, off + len) of k in the window (and k not dropped)? All of them? */
bool rt_kept_has(const struct rt_kept *k, uint64_t off, uint64_t len);
bool rt_kept_whole(const struct rt_kept *k);
/* The window's registration with transport tr (made on first use); NULL: refused, logged. */
void *rt_window_mr(struct rt_window *w, int tr);
/* No copy into it runs, and none of it is sent: it may be freed. */
bool rt_window_idle(const struct rt_window *w);
/* Free the window now, or, while copies run or are sent from it, once they are done. */
void rt_window_free(struct rt_window *w);

/* ---------------------------------------------------------------- attach.c */

/* A publisher's attach waits for the topic's set-ups: done(arg, 0) later. 0 or -ENOMEM. */
int rt_waiter_add(struct rt_topic *tt, void (*done)(void *arg, int status), void *arg);
/* Answer publishers that wait for the set-ups (force: even while some still run). */
void rt_waiters_check(struct rt_topic *tt, bool force);
/* Withdraw the waits of arg (its connection closed). */
void rt_waiters_cancel(struct rgapsd_remote *rt, void *arg);

/* ---------------------------------------------------------------- forwarder.c */

/* Start the topic's forwarder (idempotent): each local message reaches tt->fwd_deliver. */
int rt_forwarder_start(struct rt_topic *tt);
void rt_forwarder_stop(struct rt_topic *tt);
/* The loop is done with a forwarded message: release its hold, wake the forwarder. */
void rt_forwarder_release(struct rt_topic *tt, const struct rt_local_msg *m);

/* ---------------------------------------------------------------- relay.c */

/* Hook the relay into the receiver and sender (rt->relay_landed, _ring_end, _size_moved). */
void rt_relay_init(struct rgapsd_remote *rt);
/*
 * Make the out rings of one topic (of every topic) match its trees as this
 * host sees them: its own messages to its children in its tree, and, for
 * every source it receives, that source's messages to its children in the
 * origin's tree.
 */
void rt_reconcile_topic(struct rgapsd_remote *rt, struct rgapsd_topic *t);
void rt_reconcile_all(struct rgapsd_remote *rt);
/* A topic_setup from p: refused unless p is this host's parent in the tree, else set up. */
void rt_relay_on_setup(struct rt_peer *p, const struct rt_wire_msg *m);
/* A topic_teardown from p: the ring goes, and what this host passes on follows the tree. */
void rt_relay_on_teardown(struct rt_peer *p, const struct rt_wire_msg *m);
/* The local subscribers of t came or went: when this host joined the topic's trees. */
void rt_relay_subscribed(struct rgapsd_remote *rt, struct rgapsd_topic *t);
/* When this host's first subscriber of topic attached (ms), 0 if it has none. */
uint64_t rt_relay_joined(const struct rgapsd_remote *rt, const char *topic);
/* t goes: the rings that pass it on. */
void rt_relay_topic_gone(struct rgapsd_remote *rt, struct rgapsd_topic *t);
void rt_relay_free(struct rgapsd_remote *rt);

/* ---------------------------------------------------------------- sender.c */

struct rt_topic *rt_topic_of(struct rgapsd_remote *rt, struct rgapsd_topic *t, bool create);
/*
 * A new out ring to p for tt over transport tr, in tree mode: tt's own
 * messages (src NULL, a ring of tt->outs), or, on a relay, the messages of
 * src as they land (a ring of src->outs). It asks p with a topic_setup.
 */
void rt_out_create(struct rt_peer *p, struct rt_topic *tt, int tr, struct rt_source *src,
		   const struct rt_relay_mode *mode);
/*
 * Retire an out ring (tell_peer: send topic_teardown once its records are
 * back; moved: the peer gets the topic from another host now).
 */
void rt_out_free(struct rt_out *o, bool tell_peer, bool moved);
void rt_out_drive(struct rt_out *o);
/* A message passing through (relayed), its fields from h; one reference, for its landing. */
struct rt_omsg *rt_omsg_relayed(struct rt_topic *tt, const struct rgaps_record_hdr *h);
void rt_omsg_put(struct rt_omsg *m);
/* Queue on o the chunk of relayed message m that record r carries. false: out of memory. */
bool rt_out_queue_record(struct rt_out *o, struct rt_omsg *m, struct rt_rec *r);
void rt_on_topic_leave(struct rt_peer *p, const struct rt_wire_msg *m);
void rt_on_topic_ready(struct rt_peer *p, const struct rt_wire_msg *m);
void rt_on_topic_refused(struct rt_peer *p, const struct rt_wire_msg *m);
void rt_on_record_sent(void *arg, struct rgaps_link *link, uint64_t cookie, int status);
void rt_on_head_update(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t head);
/* The topic goes: its out rings, forwarder, registrations and staging. */
void rt_sender_topic_gone(struct rt_topic *tt);

/* ---------------------------------------------------------------- receiver.c */

void rt_in_free(struct rt_in *in);
void rt_in_teardown(struct rt_in *in);
/* Drop in because its source comes from another host now, and tell its sender (topic_leave). */
void rt_in_leave(struct rt_in *in, const char *why);
/* A relay sends from r: its ring space is given back only after rt_rec_put. */
void rt_rec_hold(struct rt_rec *r);
void rt_rec_put(struct rt_rec *r);
/* in's ring registered with transport tr as a source of records (made once); NULL: logged. */
void *rt_in_send_mr(struct rt_in *in, int tr);
void rt_on_topic_setup(struct rt_peer *p, const struct rt_wire_msg *m);
/* Answer a set-up with topic_refused, saying why (by_tree: not the receiver's parent). */
void rt_setup_refuse(struct rt_peer *p, uint32_t ring_id, bool by_tree, const char *fmt, ...)
	RGAPS_PRINTF(4, 5);
void rt_on_topic_teardown(struct rt_peer *p, const struct rt_wire_msg *m);
/* Drop the set-ups that wait for the data link of transport tr. */
void rt_deferred_drop(struct rt_peer *p, int tr);
/* The data link that deferred set-ups wait for is up: answer them in arrival order. */
void rt_run_deferred(struct rt_peer *p, int tr);
void rt_on_record_landed(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t off,
			 uint64_t len);
/* A record's header arrived before its bytes: checked now; where its chunk may land (NULL: ring). */
void *rt_on_record_header(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t off,
			  uint64_t len, bool can_redirect);
void rt_on_retry(uv_timer_t *t);

/* ---------------------------------------------------------------- links.c */

/* Offer a data link of every usable transport the peer lacks (session initiator only). */
void rt_offer_links(struct rt_peer *p);
void rt_on_link_offer(struct rt_peer *p, const struct rt_wire_msg *m);
void rt_on_link_accept(struct rt_peer *p, const struct rt_wire_msg *m);
void rt_on_link_refuse(struct rt_peer *p, const struct rt_wire_msg *m);
/* The link of transport tr is gone: rings over it go, set-ups waiting for it too. */
void rt_link_lost(struct rt_peer *p, int tr);
void rt_on_link_accepted(void *arg, struct rgaps_link *link,
			 const uint8_t token[RGAPS_LINK_TOKEN_LEN]);
void rt_on_link_connected(void *arg, struct rgaps_link *link, int status);
void rt_on_link_down(void *arg, struct rgaps_link *link, int err, const char *why);

/* ---------------------------------------------------------------- session.c */

extern const struct rgapsd_peers_ops rt_peer_ops;
void rt_send_subs(struct rt_peer *p);
void rt_on_tick(uv_timer_t *t);

/* ---------------------------------------------------------------- transports.c */

/* Load, configure, probe and listen with every transport. -EINVAL: options refused. */
int rt_transports_start(struct rgapsd_remote *rt);
void rt_transports_fini(struct rgapsd_remote *rt);
void rt_transports_unload(struct rgapsd_remote *rt);

#endif
