/*
 * The verification payload of `rgaps pub` / `rgaps sub --verify`, the tests
 * and the benchmarks: a 16-byte header {counter, size} (little-endian), then
 * 64-bit words derived from (counter, word index), so that a message from the
 * wrong publisher step, a torn write, a stale block or a shifted offset all
 * show up as a mismatch. The GPU tests compute the same words in a kernel.
 * A payload is only right when its counter is also its origin sequence number
 * in its publisher's stream (rgaps_pattern_counter_error(), below).
 */
#ifndef RGAPS_TOOLS_PATTERN_H
#define RGAPS_TOOLS_PATTERN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define RGAPS_PATTERN_HDR 16u

static inline uint64_t rgaps_pattern_word(uint64_t counter, uint64_t k)
{
	uint64_t z = counter * 0x9e3779b97f4a7c15ull + (k + 1) * 0xbf58476d1ce4e5b9ull;

	z ^= z >> 31;
	z *= 0x94d049bb133111ebull;
	return z ^ (z >> 29);
}

/* Fill buf (size >= RGAPS_PATTERN_HDR) for this counter. */
static inline void rgaps_pattern_fill(void *buf, size_t size, uint64_t counter)
{
	uint8_t *p = (uint8_t *)buf; /* (cast: also included by C++, the GPU tests) */
	uint64_t hdr[2] = { counter, size }, nwords, k;

	memcpy(p, hdr, RGAPS_PATTERN_HDR);
	p += RGAPS_PATTERN_HDR;
	nwords = (size - RGAPS_PATTERN_HDR) / 8;
	for (k = 0; k < nwords; k++) {
		uint64_t w = rgaps_pattern_word(counter, k);

		memcpy(p + k * 8, &w, 8);
	}
	if ((size - RGAPS_PATTERN_HDR) % 8) {
		uint64_t w = rgaps_pattern_word(counter, k);

		memcpy(p + k * 8, &w, (size - RGAPS_PATTERN_HDR) % 8);
	}
}

/*
 * Check buf: returns -1 if intact, else the offset of the first bad byte.
 * *counter_p gets the counter from the header (even if the body is bad).
 */
static inline int64_t rgaps_pattern_check(const void *buf, size_t size, uint64_t *counter_p)
{
	const uint8_t *p = (const uint8_t *)buf;
	uint64_t hdr[2], nwords, k, tail;

	if (size < RGAPS_PATTERN_HDR)
		return 0;
	memcpy(hdr, p, RGAPS_PATTERN_HDR);
	*counter_p = hdr[0];
	if (hdr[1] != size)
		return 8;
	p += RGAPS_PATTERN_HDR;
	nwords = (size - RGAPS_PATTERN_HDR) / 8;
	for (k = 0; k < nwords; k++) {
		uint64_t w;

		memcpy(&w, p + k * 8, 8);
		if (w != rgaps_pattern_word(hdr[0], k))
			return (int64_t)(RGAPS_PATTERN_HDR + k * 8);
	}
	tail = (size - RGAPS_PATTERN_HDR) % 8;
	if (tail) {
		uint64_t w = rgaps_pattern_word(hdr[0], k);

		if (memcmp(p + k * 8, &w, tail) != 0)
			return (int64_t)(RGAPS_PATTERN_HDR + k * 8);
	}
	return -1;
}

/*
 * The order half of the oracle. Every publisher stream numbers its messages
 * from 0 (rgaps_msg_info(): origin_seq, the same across hosts), and a test
 * publisher puts that number in the payload as its counter; so a message is
 * right only when its payload's counter is its origin sequence number
 * (rgaps_pattern_counter_error()), and its origin sequence number follows the
 * stream's previous one plus the losses reported since (rgaps_pattern_place()):
 * a duplicated, stale, reordered or silently skipped message fails one or the
 * other. A subscriber keeps one rgaps_pattern_stream per publisher stream.
 */
struct rgaps_pattern_stream {
	uint64_t next; /* the origin sequence number due next, before reported losses */
	int started;
};

/*
 * Message number origin of the stream arrives, after gap reported losses
 * (rgaps_msg_t.gap): NULL if that is its place, else what is wrong, in words.
 * The stream follows origin either way, so one bad delivery counts once.
 */
static inline const char *rgaps_pattern_place(struct rgaps_pattern_stream *s, uint64_t origin,
					      uint64_t gap)
{
	uint64_t want = s->next + gap;
	const char *why = NULL;

	if (s->started && origin != want)
		why = origin + 1 == s->next ? "delivered twice" :
		      origin < want	    ? "delivered out of order (older than due)" :
					      "delivered ahead of its place: messages skipped unreported";
	s->started = 1;
	s->next = origin + 1;
	return why;
}

/* A gap-only message: gap messages of the stream were lost after the last one. */
static inline void rgaps_pattern_lost(struct rgaps_pattern_stream *s, uint64_t gap)
{
	s->next += gap;
}

/* The payload's counter got against the origin sequence number want: NULL if equal. */
static inline const char *rgaps_pattern_counter_error(uint64_t got, uint64_t want)
{
	if (got == want)
		return NULL;
	if (got + 1 == want)
		return "the payload of the message before it (a duplicate)";
	return got < want ? "an older payload (stale)" :
			    "a later payload (reordered, or a counter skipped)";
}

#endif
