/*
 * The frame reader and header codec of the control protocol (frame.h,
 * docs/PROTOCOL.md "Local control frames"). The reader never takes bytes past
 * the end of the frame it is assembling: space() offers the rest of the header,
 * then the rest of the payload. So a complete frame always starts at buf[0] and
 * is handed out in place, with no copy and no compaction, and the reader needs
 * no state beyond its byte count: the frame's header in buf is the state,
 * which also makes an error sticky for free (a bad header is never consumed).
 * The price is two receives per frame (header, then payload), which a control
 * plane's request rate does not notice.
 */
#include "frame.h"

#include <errno.h>
#include <string.h>

#include "util.h"

static uint32_t frame_header_get(const uint8_t hdr[RGAPS_FRAME_HDR])
{
	return (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
	       (uint32_t)hdr[3] << 24;
}

static int frame_len_check(uint32_t len)
{
	if (len == 0)
		return -EBADMSG;
	if (len > RGAPS_FRAME_MAX)
		return -EMSGSIZE;
	return 0;
}

/* Bytes the frame being assembled still needs: 0 once it is complete or its header is bad. */
static size_t frame_reader_want(const struct rgaps_frame_reader *r)
{
	uint32_t len;

	if (r->len < RGAPS_FRAME_HDR)
		return RGAPS_FRAME_HDR - r->len;
	len = frame_header_get(r->buf);
	if (frame_len_check(len))
		return 0;
	return RGAPS_FRAME_HDR + len - r->len;
}

void rgaps__frame_reader_init(struct rgaps_frame_reader *r)
{
	r->len = 0;
}

void rgaps__frame_reader_space(struct rgaps_frame_reader *r, uint8_t **buf_p, size_t *len_p)
{
	*buf_p = r->buf + r->len;
	*len_p = frame_reader_want(r);
}

void rgaps__frame_reader_commit(struct rgaps_frame_reader *r, size_t n)
{
	rgaps_require(n <= frame_reader_want(r));
	r->len += n;
}

size_t rgaps__frame_reader_feed(struct rgaps_frame_reader *r, const void *data, size_t n)
{
	const uint8_t *p = data;
	size_t taken = 0, want, k;

	/* Twice at most: the rest of the header, then the rest of the payload it announces. */
	while (taken < n && (want = frame_reader_want(r)) > 0) {
		k = RGAPS_MIN(want, n - taken);
		memcpy(r->buf + r->len, p + taken, k);
		r->len += k;
		taken += k;
	}
	return taken;
}

int rgaps__frame_reader_next(struct rgaps_frame_reader *r, const uint8_t **payload_p,
			    size_t *len_p)
{
	uint32_t len;
	int err;

	if (r->len < RGAPS_FRAME_HDR)
		return 0;
	len = frame_header_get(r->buf);
	err = frame_len_check(len);
	if (err)
		return err;
	if (r->len < RGAPS_FRAME_HDR + len)
		return 0;
	/* The bytes stay where they are until the next write into buf: the payload's lifetime. */
	r->len = 0;
	*payload_p = r->buf + RGAPS_FRAME_HDR;
	*len_p = len;
	return 1;
}

int rgaps__frame_length(const uint8_t hdr[RGAPS_FRAME_HDR], uint32_t *len_p)
{
	uint32_t len = frame_header_get(hdr);
	int err = frame_len_check(len);

	if (err)
		return err;
	*len_p = len;
	return 0;
}

void rgaps__frame_header(uint8_t hdr[RGAPS_FRAME_HDR], uint32_t len)
{
	rgaps_require(len <= RGAPS_FRAME_MAX);
	hdr[0] = (uint8_t)len;
	hdr[1] = (uint8_t)(len >> 8);
	hdr[2] = (uint8_t)(len >> 16);
	hdr[3] = (uint8_t)(len >> 24);
}
