/*
 * libFuzzer target for the control-protocol frame reader (src/common/frame.c).
 * The input's first 8 bytes seed how the rest is cut into pieces and whether
 * each piece goes through feed() or space()/commit(); the rest is the byte
 * stream a client would send. A reference parser that sees the whole stream
 * at once says which frames and which error must come out; the reader, fed
 * piece by piece, must agree exactly, take no byte past a frame, keep its byte
 * count in bounds, always offer space while it waits, and stay in error.
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Isrc/common \
 *         src/common/frame.c tests/fuzz/fuzz_frame.c -o fuzz_frame
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "frame.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FRAMES 4096

struct ref {
	size_t off[MAX_FRAMES]; /* offset of each complete frame's header in the stream */
	uint32_t len[MAX_FRAMES];
	size_t nframes;
	int err;	/* 0, -EMSGSIZE or -EBADMSG for the header after the last frame */
	size_t err_end; /* stream offset just past that bad header */
};

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void ref_parse(const uint8_t *s, size_t n, struct ref *ref)
{
	size_t off = 0;

	ref->nframes = 0;
	ref->err = 0;
	while (off + RGAPS_FRAME_HDR <= n && ref->nframes < MAX_FRAMES) {
		uint32_t len = le32(s + off);

		if (len == 0 || len > RGAPS_FRAME_MAX) {
			ref->err = len ? -EMSGSIZE : -EBADMSG;
			ref->err_end = off + RGAPS_FRAME_HDR;
			return;
		}
		if (off + RGAPS_FRAME_HDR + len > n)
			return;
		ref->off[ref->nframes] = off;
		ref->len[ref->nframes] = len;
		ref->nframes++;
		off += RGAPS_FRAME_HDR + len;
	}
}

/* xorshift64*: cheap, and the same cuts for the same input everywhere. */
static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

static size_t piece_len(uint64_t *rng, size_t left)
{
	uint64_t r = rng_next(rng);
	size_t n;

	switch (r & 3) {
	case 0:
		n = 1 + (r >> 8) % 4; /* around the header */
		break;
	case 1:
		n = 1 + (r >> 8) % 64;
		break;
	case 2:
		n = 1 + (r >> 8) % (RGAPS_FRAME_MAX + 2 * RGAPS_FRAME_HDR);
		break;
	default:
		n = left; /* everything at once */
		break;
	}
	return RGAPS_MIN(n, left);
}

static size_t space_len(struct rgaps_frame_reader *r)
{
	uint8_t *buf;
	size_t len;

	rgaps__frame_reader_space(r, &buf, &len);
	rgaps_require(buf == r->buf + r->len);
	rgaps_require(r->len + len <= sizeof(r->buf));
	return len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct rgaps_frame_reader reader;
	static struct ref ref;
	struct rgaps_frame_reader *r = &reader;
	uint64_t rng = 0x9e3779b97f4a7c15ull;
	const uint8_t *s;
	size_t n, pos = 0, k = 0, frame_end = 0;
	int err = 0;

	if (size >= 8) {
		uint64_t seed;

		memcpy(&seed, data, sizeof(seed));
		rng ^= seed;
		data += 8;
		size -= 8;
	}
	if (!rng)
		rng = 1;
	s = data;
	n = size;
	ref_parse(s, n, &ref);

	rgaps__frame_reader_init(r);
	while (pos < n && !err && k < MAX_FRAMES) {
		size_t want = piece_len(&rng, n - pos), took;

		if (rng_next(&rng) & 1) {
			took = rgaps__frame_reader_feed(r, s + pos, want);
			rgaps_require(took <= want);
		} else {
			uint8_t *buf;
			size_t room;

			rgaps__frame_reader_space(r, &buf, &room);
			rgaps_require(buf == r->buf + r->len);
			took = RGAPS_MIN(room, want);
			memcpy(buf, s + pos, took);
			rgaps__frame_reader_commit(r, took);
		}
		pos += took;
		rgaps_require(r->len <= sizeof(r->buf));
		/* Never a byte past the frame being assembled. */
		rgaps_require(r->len == pos - frame_end);

		for (;;) {
			const uint8_t *payload = NULL;
			size_t len = 0;
			int rc = rgaps__frame_reader_next(r, &payload, &len);

			if (rc == 1) {
				rgaps_require(k < ref.nframes);
				rgaps_require(len == ref.len[k]);
				rgaps_require(payload == r->buf + RGAPS_FRAME_HDR);
				rgaps_require(!memcmp(payload, s + ref.off[k] + RGAPS_FRAME_HDR,
						      len));
				frame_end = ref.off[k] + RGAPS_FRAME_HDR + len;
				rgaps_require(frame_end == pos);
				k++;
				continue;
			}
			if (rc == 0) {
				rgaps_require(payload == NULL && len == 0);
				/* Waiting for more: there must be room for it. */
				rgaps_require(space_len(r) > 0);
				break;
			}
			/* An error: exactly the reference's, found as soon as the header was in. */
			rgaps_require(rc == -EMSGSIZE || rc == -EBADMSG);
			rgaps_require(payload == NULL && len == 0);
			rgaps_require(k == ref.nframes && rc == ref.err);
			rgaps_require(pos == ref.err_end);
			err = rc;
			break;
		}
	}

	if (err) {
		/* Sticky: nothing more is taken, no room is offered, the same error comes back. */
		const uint8_t *payload;
		size_t len;

		rgaps_require(rgaps__frame_reader_feed(r, s, n) == 0);
		rgaps_require(space_len(r) == 0);
		rgaps_require(rgaps__frame_reader_next(r, &payload, &len) == err);
	} else if (k < MAX_FRAMES) {
		/* The whole stream went in: every complete frame came out, the rest is held. */
		rgaps_require(pos == n);
		rgaps_require(k == ref.nframes);
		rgaps_require(ref.err == 0);
		rgaps_require(r->len == n - frame_end);
	}
	return 0;
}
