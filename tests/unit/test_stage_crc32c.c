/*
 * The crc32c stage plugin (plugins/stage-crc32c), loaded through the plugin
 * loader as rgapsd loads it: it describes itself (both points, a 4-byte tag),
 * writes the CRC-32C of a chunk into the tag before sending (the standard
 * check value for "123456789" is 0xe3069283), accepts the chunk on landing
 * when the tag matches, refuses it with a reason when one byte differs, and
 * refuses device memory. Lengths 0..300 at every alignment are compared with
 * a bit-by-bit reference.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "plugin_loader.h"

#ifndef PLUGIN_DIR
#error "PLUGIN_DIR"
#endif

static uint32_t reference(const uint8_t *p, size_t n)
{
	uint32_t c = ~0u;

	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
	}
	return ~c;
}

static uint32_t tag32(const uint8_t *t)
{
	return (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 | (uint32_t)t[3] << 24;
}

static int run(struct rgaps_loaded_plugin *lp, uint32_t point, uint32_t kind, const void *data,
	       size_t len, uint8_t *tag, char *why)
{
	struct rgaps_stage_work w = {
		.point = point, .mem_kind = kind, .topic = "t", .msg_seq = 7, .msg_size = len,
		.data = data, .len = len, .tag = tag, .why = why, .whylen = 200,
	};

	return lp->ops.stage.process(lp->ctx, &w);
}

static void test_crc32c(void **state)
{
	struct rgaps_loaded_plugin *lp;
	struct rgaps_stage_desc d;
	uint8_t tag[8] = { 0 }, buf[320];
	char err[512], why[200] = "";

	assert_int_equal(rgaps__plugin_load(PLUGIN_DIR, RGAPS_PLUGIN_STAGE, "crc32c", &lp, err,
					    sizeof(err)), 0);
	assert_int_equal(lp->ops.stage.init(NULL, &lp->ctx), 0);
	assert_int_equal(lp->ops.stage.describe(lp->ctx, &d), 0);
	assert_int_equal(d.points, RGAPS_STAGE_BEFORE_SEND | RGAPS_STAGE_AFTER_LANDING);
	assert_int_equal(d.tag_len, 4);

	assert_int_equal(run(lp, RGAPS_STAGE_BEFORE_SEND, RGAPS_MEM_HOST, "123456789", 9, tag, why),
			 RGAPS_STAGE_CONTINUE);
	assert_int_equal(tag32(tag), 0xe3069283u);
	assert_int_equal(run(lp, RGAPS_STAGE_AFTER_LANDING, RGAPS_MEM_HOST, "123456789", 9, tag,
			     why), RGAPS_STAGE_CONTINUE);
	assert_int_equal(run(lp, RGAPS_STAGE_AFTER_LANDING, RGAPS_MEM_HOST, "123456780", 9, tag,
			     why), RGAPS_STAGE_FAIL);
	assert_non_null(strstr(why, "crc32c mismatch in bytes 0..8 of message 7"));
	assert_non_null(strstr(why, "the sender's 0xe3069283"));
	assert_int_equal(run(lp, RGAPS_STAGE_BEFORE_SEND, RGAPS_MEM_CUDA, buf, 8, tag, why),
			 RGAPS_STAGE_FAIL);
	assert_non_null(strstr(why, "host memory only"));

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 131 + 17);
	for (size_t off = 0; off < 8; off++) {
		for (size_t len = 0; len + off <= 300; len += 1 + len / 16) {
			assert_int_equal(run(lp, RGAPS_STAGE_BEFORE_SEND, RGAPS_MEM_HOST, buf + off,
					     len, tag, why), RGAPS_STAGE_CONTINUE);
			if (tag32(tag) != reference(buf + off, len))
				fail_msg("offset %zu length %zu: 0x%08x, reference 0x%08x", off, len,
					 tag32(tag), reference(buf + off, len));
		}
	}
	lp->ops.stage.fini(lp->ctx);
	rgaps__plugin_unload(lp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc32c),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
