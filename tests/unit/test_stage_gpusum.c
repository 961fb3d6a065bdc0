/*
 * The gpusum checksum (plugins/stage-gpusum/gpusum.c) and, where the build has
 * CUDA, the stage plugin through the loader as rgapsd loads it, on host memory:
 *  - the sum matches a reference written from the definition (words padded
 *    with zeros, weighted by index + 1) for sizes 0..300 at every alignment;
 *  - cut into chunks of many sizes (1, 3, 4, 5, 7, 64, 4095, 4097 bytes,
 *    uneven cuts), the chunks' sums add up to the whole message's;
 *  - a flipped byte (at every position of a small message), two swapped
 *    chunks and a truncated tail all change it;
 *  - the plugin: both ends and all three points, a message passing, one with
 *    a flipped byte refused with both sums in the reason, one whose chunks'
 *    tags do not cover it refused, device memory refused with CUDA's reason
 *    where there is no GPU.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../plugins/stage-gpusum/gpusum.h"
#ifdef PLUGIN_DIR
#include "plugin_loader.h"
#endif

/* The definition, word by word: w_i * (i + 1) over the zero-padded words. */
static uint64_t reference(const uint8_t *p, size_t n)
{
	uint64_t s = 0;

	for (size_t i = 0; 4 * i < n; i++) {
		uint32_t w = 0;

		for (size_t b = 0; b < 4 && 4 * i + b < n; b++)
			w |= (uint32_t)p[4 * i + b] << (8 * b);
		s += (uint64_t)w * (i + 1);
	}
	return s;
}

static uint8_t *pattern(size_t n, uint32_t seed)
{
	uint8_t *p = malloc(n + 16);
	uint32_t x = seed * 2654435761u + 1;

	assert_non_null(p);
	for (size_t i = 0; i < n + 16; i++) {
		x ^= x << 13, x ^= x >> 17, x ^= x << 5;
		p[i] = (uint8_t)x;
	}
	return p;
}

/* The sum of p[0..n) cut into pieces of len bytes (the last one shorter). */
static uint64_t chunked(const uint8_t *p, size_t n, size_t len)
{
	uint64_t s = 0;

	for (size_t off = 0; off < n; off += len)
		s += gpusum_cpu(p + off, off + len <= n ? len : n - off, off);
	return s;
}

static void test_reference(void **state)
{
	uint8_t *buf = pattern(320, 1);

	assert_int_equal(gpusum_cpu(buf, 0, 0), 0);
	assert_int_equal(gpusum_cpu("\x01\x00\x00\x00\x02\x00\x00\x00", 8, 0), 1 * 1 + 2 * 2);
	assert_int_equal(gpusum_cpu("\xff\xff\xff\xff\x01", 5, 0), 0xffffffffull + 2);
	for (size_t at = 0; at < 16; at++) /* the same bytes elsewhere in memory: the same sum */
		for (size_t n = 0; n + at <= 300; n += 1 + n / 8)
			if (gpusum_cpu(buf + at, n, 0) != reference(buf + at, n))
				fail_msg("address +%zu, %zu bytes: 0x%llx, reference 0x%llx", at, n,
					 (unsigned long long)gpusum_cpu(buf + at, n, 0),
					 (unsigned long long)reference(buf + at, n));
	free(buf);
}

static void test_chunks_add_up(void **state)
{
	static const size_t sizes[] = { 1, 2, 3, 4, 5, 7, 15, 16, 17, 100, 4095, 4096, 4097,
					65536, 1048576 + 3 };
	static const size_t chunks[] = { 1, 3, 4, 5, 7, 64, 4095, 4097, 65536 };

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t n = sizes[i];
		uint8_t *p = pattern(n, (uint32_t)i);
		uint64_t whole = gpusum_cpu(p, n, 0);

		assert_true(whole == reference(p, n));
		for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
			if (n / chunks[c] > 200000)
				continue; /* 1-byte chunks of a MiB: no more than the small ones show */
			if (chunked(p, n, chunks[c]) != whole)
				fail_msg("%zu bytes in chunks of %zu: 0x%llx, whole 0x%llx", n, chunks[c],
					 (unsigned long long)chunked(p, n, chunks[c]),
					 (unsigned long long)whole);
		}
		/* uneven cuts: 1, 2, 3, ... bytes */
		uint64_t s = 0;
		for (size_t off = 0, len = 1; off < n; off += len, len++)
			s += gpusum_cpu(p + off, off + len <= n ? len : n - off, off);
		assert_true(s == whole);
		free(p);
	}
}

static void test_changes(void **state)
{
	size_t n = 4096 * 3 + 5;
	uint8_t *p = pattern(n, 7), *q = malloc(n);
	uint64_t whole = gpusum_cpu(p, n, 0);

	assert_non_null(q);
	for (size_t i = 0; i < 300; i++) { /* every byte of a small message, every bit of it */
		uint8_t *s = pattern(300, 3);
		uint64_t before = gpusum_cpu(s, 300, 0);

		for (int bit = 0; bit < 8; bit++) {
			s[i] ^= (uint8_t)(1u << bit);
			if (gpusum_cpu(s, 300, 0) == before)
				fail_msg("bit %d of byte %zu flipped: the sum did not change", bit, i);
			s[i] ^= (uint8_t)(1u << bit);
		}
		free(s);
	}
	memcpy(q, p, n); /* a byte flipped far into the message */
	q[n - 7] ^= 0x5a;
	assert_true(gpusum_cpu(q, n, 0) != whole);
	memcpy(q, p, n); /* chunks 0 and 2 (4 KiB each) swapped */
	memcpy(q, p + 8192, 4096);
	memcpy(q + 8192, p, 4096);
	assert_true(gpusum_cpu(q, n, 0) != whole);
	assert_true(chunked(q, n, 4096) == gpusum_cpu(q, n, 0));
	memcpy(q, p, n); /* two neighbouring words swapped */
	memcpy(q + 40, p + 44, 4);
	memcpy(q + 44, p + 40, 4);
	assert_true(gpusum_cpu(q, n, 0) != whole);
	p[n - 1] |= 1; /* a truncated tail: the last byte, and the last word, gone */
	whole = gpusum_cpu(p, n, 0);
	assert_true(gpusum_cpu(p, n - 1, 0) != whole);
	assert_true(gpusum_cpu(p, n - 4, 0) != whole);
	free(p);
	free(q);
}

#ifdef PLUGIN_DIR
struct state {
	uint64_t sum, bytes;
};

static int run(struct rgaps_loaded_plugin *lp, uint32_t point, uint32_t kind, const uint8_t *data,
	       size_t off, size_t len, size_t msg_size, uint8_t *tag, struct state *ms, char *why)
{
	struct rgaps_stage_work w = {
		.point = point, .mem_kind = kind, .topic = "t", .msg_seq = 9, .msg_size = msg_size,
		.chunk_off = off, .data = data, .len = len, .tag = tag, .msg_state = ms,
		.why = why, .whylen = 300,
	};

	why[0] = '\0';
	return lp->ops.stage.process(lp->ctx, &w);
}

/* One message through both ends in chunks of chunk bytes; the receiver's copy is rx. */
static int through(struct rgaps_loaded_plugin *lp, const uint8_t *tx, uint8_t *rx, size_t n,
		   size_t chunk, char *why)
{
	struct state ms = { 0 };

	for (size_t off = 0; off < n || off == 0; off += chunk) {
		size_t len = off + chunk <= n ? chunk : n - off;
		uint8_t tag[8];

		assert_int_equal(run(lp, RGAPS_STAGE_BEFORE_SEND, RGAPS_MEM_HOST, tx + off, off,
				     len, n, tag, NULL, why), RGAPS_STAGE_CONTINUE);
		assert_int_equal(run(lp, RGAPS_STAGE_AFTER_LANDING, RGAPS_MEM_HOST, rx + off, off,
				     len, n, tag, &ms, why), RGAPS_STAGE_CONTINUE);
		if (!n)
			break;
	}
	return run(lp, RGAPS_STAGE_BEFORE_PUBLISH, RGAPS_MEM_HOST, rx, 0, n, n, NULL, &ms, why);
}

static void test_plugin(void **state)
{
	struct rgaps_loaded_plugin *lp;
	struct rgaps_stage_desc d;
	size_t n = 100003;
	uint8_t *tx = pattern(n, 5), *rx = malloc(n), tag[8] = { 0 };
	struct state ms = { 0 };
	char err[512], why[300];
	int r;

	assert_non_null(rx);
	assert_int_equal(rgaps__plugin_load(PLUGIN_DIR, RGAPS_PLUGIN_STAGE, "gpusum", &lp, err,
					    sizeof(err)), 0);
	assert_int_equal(lp->ops.stage.init(NULL, &lp->ctx), 0);
	assert_int_equal(lp->ops.stage.describe(lp->ctx, &d), 0);
	assert_int_equal(d.points, RGAPS_STAGE_BEFORE_SEND | RGAPS_STAGE_AFTER_LANDING |
					   RGAPS_STAGE_BEFORE_PUBLISH);
	assert_int_equal(d.tag_len, 8);
	assert_int_equal(d.msg_state_size, sizeof(struct state));

	memcpy(rx, tx, n);
	for (size_t chunk = 4096; chunk <= n + 4096; chunk += 4097 * 3)
		assert_int_equal(through(lp, tx, rx, n, chunk, why), RGAPS_STAGE_CONTINUE);
	assert_int_equal(through(lp, tx, rx, 0, 4096, why), RGAPS_STAGE_CONTINUE);

	rx[77777] ^= 0x5a;
	assert_int_equal(through(lp, tx, rx, n, 4096, why), RGAPS_STAGE_FAIL);
	assert_non_null(strstr(why, "gpusum mismatch in message 9 (100003 bytes, summed on the "
				    "CPU): 0x"));
	assert_non_null(strstr(why, ", the sender's 0x"));
	rx[77777] ^= 0x5a;

	/* the chunks' tags cover 4096 bytes of 8192: refused before any sum */
	assert_int_equal(run(lp, RGAPS_STAGE_BEFORE_SEND, RGAPS_MEM_HOST, tx, 0, 4096, 8192, tag,
			     NULL, why), RGAPS_STAGE_CONTINUE);
	assert_int_equal(run(lp, RGAPS_STAGE_AFTER_LANDING, RGAPS_MEM_HOST, tx, 0, 4096, 8192, tag,
			     &ms, why), RGAPS_STAGE_CONTINUE);
	assert_int_equal(run(lp, RGAPS_STAGE_BEFORE_PUBLISH, RGAPS_MEM_HOST, tx, 0, 8192, 8192,
			     NULL, &ms, why), RGAPS_STAGE_FAIL);
	assert_string_equal(why, "gpusum: message 9 has 8192 bytes, its chunks' sums cover 4096");

	/* "device memory" that is not: refused with CUDA's reason (no GPU here, or not device memory) */
	r = run(lp, RGAPS_STAGE_BEFORE_SEND, RGAPS_MEM_CUDA, tx, 0, 64, 64, tag, NULL, why);
	assert_int_equal(r, RGAPS_STAGE_FAIL);
	assert_true(strncmp(why, "gpusum: ", 8) == 0);
	print_message("device memory that is not: %s\n", why);

	lp->ops.stage.fini(lp->ctx);
	rgaps__plugin_unload(lp);
	free(tx);
	free(rx);
}
#endif

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reference),
		cmocka_unit_test(test_chunks_add_up),
		cmocka_unit_test(test_changes),
#ifdef PLUGIN_DIR
		cmocka_unit_test(test_plugin),
#endif
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
