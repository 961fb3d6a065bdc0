/*
 * The 64-byte header at the start of every DP2 record (docs/PROTOCOL.md,
 * section 3). Written by the sending rgapsd into a registered header buffer
 * and gathered in front of the chunk (and, with RGAPS_RECORD_TAG, the stage
 * tag behind it); read by the receiving rgapsd from its ring after the
 * transport reports the landing.
 */
#ifndef RGAPS_COMMON_RECORD_H
#define RGAPS_COMMON_RECORD_H

#include <stdint.h>

#define RGAPS_RECORD_MAGIC 0x32524752u /* "RGR2": 2: origin stream and seq */
#define RGAPS_RECORD_HDR 64u
#define RGAPS_RECORD_FIRST 0x1u
#define RGAPS_RECORD_LAST 0x2u
/* The record carries RGAPS_RECORD_TAG_LEN bytes of stage tag after its chunk:
 * what the topic's before-send stages hand to the receiver's (crc32c: the CRC). */
#define RGAPS_RECORD_TAG 0x4u
#define RGAPS_RECORD_TAG_LEN 8u
/* A loss notice, not a message: header only (FIRST | LAST | LOSS, no chunk, msg_size 0).
 * msg_seq names the newest message the sender assigned: every message up to it that
 * the receiver has not received by now never comes (docs/PROTOCOL.md section 3). */
#define RGAPS_RECORD_LOSS 0x8u

struct rgaps_record_hdr {
	uint32_t magic;
	uint32_t flags;
	uint64_t msg_seq;  /* the ring's message counter: a jump is messages lost upstream */
	uint64_t msg_size;
	uint64_t chunk_off;
	uint32_t chunk_len;
	uint32_t ring_id;
	uint64_t ts_ns;
	uint32_t record_seq;	/* the ring's record counter (mod 2^32): records arrive in order */
	uint32_t origin_stream; /* the publisher stream on the sending host (its low 32 bits) */
	uint64_t origin_seq;	/* the message's seq in that stream */
};

_Static_assert(sizeof(struct rgaps_record_hdr) == RGAPS_RECORD_HDR, "record header is 64 bytes");

#endif
