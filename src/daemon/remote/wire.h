/*
 * The remote path's parsers of what other hosts send, as pure functions
 * (no state, no I/O, no allocation but the subs list), so that each has unit
 * tests (tests/unit/test_remote_wire.c) and a libFuzzer target
 * (tests/fuzz/fuzz_peer_msg.c, fuzz_record.c):
 *
 *   - the daemon control messages carried in the peer session's MSG frames
 *     (docs/PROTOCOL.md section 4): decoded into struct rt_wire_msg with every
 *     field's type and range checked before use, and encoded from it;
 *   - the 64-byte header of each record landed in a receive ring
 *     (docs/PROTOCOL.md section 3), checked against the ring's landing order.
 *
 * The handlers (session.c, links.c, sender.c, receiver.c) then judge what a
 * well-formed message means in their state.
 */
#ifndef RGAPSD_REMOTE_WIRE_H
#define RGAPSD_REMOTE_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/config.h"
#include "record.h"
#include "rgaps/plugin.h"
#include "topology.h"

#define RT_RINGS 128	  /* ring ids per direction of a peer pair (immediate: 7 bits) */
#define RT_SUBS_MAX 4096  /* topic names in one subs message */
#define RT_REASON_MAX 512 /* topic_refused text */
#define RT_TYPE_MAX 32	  /* a message type name */
#define RT_RING_SIZE_MIN (8ull << 10) /* the ring_size bounds of the topic configuration */
#define RT_RING_SIZE_MAX (64ull << 30)
#define RT_CHUNK_SIZE_MAX (1ull << 30) /* the chunk_size bound of the topic configuration */
#define RT_SEQ_MAX 999999999999999ull /* sequence numbers, epochs: 15 digits, exact in JSON text */
#define RT_RESEND_MAX (64ull << 30)	/* the resend_window bound of the topic configuration */
#define RT_HOST_MAX 255 /* a daemon's name, "HOST:PORT" (as in the peer handshake) */

enum rt_msg_type {
	RT_MSG_SUBS,	       /* the topics this host has local subscribers for */
	RT_MSG_LINK_OFFER,     /* a data-link token for one transport */
	RT_MSG_LINK_ACCEPT,    /* ... accepted: connect to the offerer's data port */
	RT_MSG_LINK_REFUSE,    /* ... refused: that transport is not usable here */
	RT_MSG_TOPIC_SETUP,    /* sender: set a ring up for a topic */
	RT_MSG_TOPIC_READY,    /* receiver: the ring is attached */
	RT_MSG_TOPIC_REFUSED,  /* receiver: no ring, and why */
	RT_MSG_TOPIC_TEARDOWN, /* sender: the ring is no longer wanted */
	RT_MSG_TOPIC_LEAVE,    /* receiver: stop sending on this ring (another host sends it) */
	RT_MSG_UNKNOWN,	       /* a type this version does not know: ignored */
	RT_MSG_NUM_TYPES
};

/* One control message; which fields are set depends on type (docs/PROTOCOL.md 4). */
struct rt_wire_msg {
	enum rt_msg_type type;
	char type_name[RT_TYPE_MAX + 1];      /* RT_MSG_UNKNOWN: the type as sent, printable */
	char transport[RGAPS_CFG_NAME_MAX];   /* link_*, topic_setup */
	uint8_t token[RGAPS_LINK_TOKEN_LEN];  /* link_offer */
	char topic[RGAPS_TOPIC_NAME_MAX + 1]; /* topic_setup */
	char origin[RT_HOST_MAX + 1];  /* topic_setup: the publishers' host ("": the sender) */
	char relay[RT_RELAY_NAME_MAX]; /* topic_setup: the topology ("": star) */
	uint32_t ring_id;		      /* topic_* */
	uint8_t desc[RGAPS_RING_DESC_MAX];    /* topic_setup: head_desc; topic_ready: ring_desc */
	size_t desc_len;
	uint64_t ring_size;				       /* topic_ready */
	uint64_t chunk_size;				       /* topic_setup, 0 when absent */
	char stages[RGAPS_CFG_MAX_STAGES][RGAPS_CFG_NAME_MAX]; /* topic_setup: the sender's */
	uint32_t nstages;
	uint64_t epoch;	 /* topic_setup: the sender's topic instance (0: not sent) */
	uint64_t resend; /* topic_setup: the sender's resend_window (0: it sends nothing again) */
	bool has_from;	 /* topic_setup: from is sent */
	uint64_t from;	 /* topic_setup: the first message sequence number meant for the receiver */
	bool has_next;	 /* topic_ready: next is known */
	uint64_t next;	 /* topic_ready: the first message of the topic not yet delivered */
	bool moved;	 /* topic_teardown: the receiver gets the topic from another host now */
	bool by_tree;	 /* topic_refused: the sender is not the receiver's parent in the tree */
	char reason[RT_REASON_MAX];		/* topic_refused, topic_leave: printable */
	char (*subs)[RGAPS_TOPIC_NAME_MAX + 1]; /* subs: malloc'd (rt_wire_free) */
	uint64_t *joined; /* subs: when each topic got its first subscriber (ms), 0 unknown */
	uint32_t nsubs;
};

const char *rt_wire_type_name(enum rt_msg_type type);

/*
 * Decode one control message (JSON text, len bytes, not NUL-terminated). 0 and
 * *m filled; -EPROTO with why ("bad topic_setup: ring_id 3.5 is not an integer
 * in 0..127"); -ENOMEM. *m needs rt_wire_free() after 0 only.
 */
int rt_wire_decode(const char *json, size_t len, struct rt_wire_msg *m, char *why, size_t whylen);
void rt_wire_free(struct rt_wire_msg *m);

/* Encode m as JSON text (malloc'd, NUL-terminated), or NULL when out of memory. */
char *rt_wire_encode(const struct rt_wire_msg *m);

/* Lower-case hex of n bytes into out (2n + 1 bytes). */
void rt_hex(const uint8_t *b, size_t n, char *out);
/* Hex text s into at most max bytes. 0, or -EINVAL (NULL, odd length, too long, not hex). */
int rt_unhex(const char *s, uint8_t *b, size_t max, size_t *n_p);

/* Transport and stage names on the wire: 1..31 of [a-z0-9_-]. */
bool rt_wire_name_valid(const char *s);
/* A daemon's name on the wire: 1..255 bytes of printable ASCII without spaces. */
bool rt_wire_host_valid(const char *s);

/*
 * Where a ring is in its stream of records: what the next record must be.
 * Starts zeroed (record 0, between messages).
 */
struct rt_landing {
	uint64_t next_record_seq;
	bool in_msg; /* the last record was not the last chunk of its message */
	uint64_t msg_seq, msg_size, next_off;
};

/*
 * Check a record of len bytes as it landed in ring ring_id (rec: its first
 * bytes in ring memory, at least min(len, 64) readable): its header is well
 * formed, names this ring, comes next in order and continues (or starts) a
 * message of at most max_message_size bytes. 0 and the header in *h_p, or
 * -EPROTO and why. len is the record's exact length or, over verbs, its
 * 64-byte aligned footprint.
 */
int rt_record_check(const void *rec, uint64_t len, uint32_t ring_id, uint64_t max_message_size,
		    const struct rt_landing *st, struct rgaps_record_hdr *h_p, char *why,
		    size_t whylen);
/* Account a record that passed rt_record_check. */
void rt_record_advance(struct rt_landing *st, const struct rgaps_record_hdr *h);

#endif
