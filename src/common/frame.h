/*
 * Length-prefixed frames of the control protocol (docs/PROTOCOL.md, "Local
 * control frames"): a 4-byte little-endian payload length, then that many
 * bytes of UTF-8 JSON holding one object. Length 0 and lengths over
 * RGAPS_FRAME_MAX are protocol errors: the connection cannot be resynchronised
 * and is closed after an error reply.
 *
 * The reader reassembles frames from a byte stream that arrives in arbitrary
 * pieces; it owns a fixed buffer, so a hostile peer cannot make it grow.
 */
#ifndef RGAPS_COMMON_FRAME_H
#define RGAPS_COMMON_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define RGAPS_FRAME_HDR 4u
#define RGAPS_FRAME_MAX (64u * 1024u) /* payload bytes */

struct rgaps_frame_reader {
	size_t len; /* bytes held in buf */
	uint8_t buf[RGAPS_FRAME_HDR + RGAPS_FRAME_MAX];
};

void rgaps__frame_reader_init(struct rgaps_frame_reader *r);

/* Where the next received bytes go and how many fit (always > 0 after next() drains). */
void rgaps__frame_reader_space(struct rgaps_frame_reader *r, uint8_t **buf_p, size_t *len_p);
/* n bytes were written at the space returned above. */
void rgaps__frame_reader_commit(struct rgaps_frame_reader *r, size_t n);
/* Copy-in convenience: feed up to n bytes; returns how many were taken. */
size_t rgaps__frame_reader_feed(struct rgaps_frame_reader *r, const void *data, size_t n);

/*
 * Next complete frame: returns 1 and points payload_p/len_p into the reader
 * (valid until the next call to any reader function), 0 if more bytes are
 * needed, -EMSGSIZE if the header announces more than RGAPS_FRAME_MAX,
 * -EBADMSG for length 0. After an error the reader stays in error.
 */
int rgaps__frame_reader_next(struct rgaps_frame_reader *r, const uint8_t **payload_p,
			    size_t *len_p);

/*
 * The payload length a header announces: 0 and *len_p, or -EBADMSG (length 0),
 * -EMSGSIZE (over RGAPS_FRAME_MAX). For readers that hold no frame buffer
 * between frames (rgapsd's control server).
 */
int rgaps__frame_length(const uint8_t hdr[RGAPS_FRAME_HDR], uint32_t *len_p);

/* Write the 4-byte header for a payload of len bytes (len <= RGAPS_FRAME_MAX). */
void rgaps__frame_header(uint8_t hdr[RGAPS_FRAME_HDR], uint32_t len);

#endif
