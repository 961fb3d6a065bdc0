/*
 * The payload oracle's C half (tools/lib/pattern.h), fed wrong data: a flip of
 * any one byte of a payload of every length from 16 to 80 bytes and of 4101
 * bytes is found, at the word that holds it; a payload with another counter is
 * refused by the counter check, in the words for each kind; and the place
 * check of a stream refuses a duplicate, a late and a skipped delivery while it
 * accepts reported losses (gaps and gap-only messages) and any first place.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pattern.h"

static void test_every_byte(void **state)
{
	static uint8_t buf[4101];
	uint64_t sizes[66], counter;
	size_t n = 0;

	for (uint64_t s = 16; s <= 80; s++)
		sizes[n++] = s;
	sizes[n++] = sizeof(buf);
	for (size_t i = 0; i < n; i++) {
		uint64_t size = sizes[i];

		rgaps_pattern_fill(buf, size, 77);
		assert_int_equal(rgaps_pattern_check(buf, size, &counter), -1);
		assert_int_equal(counter, 77);
		for (uint64_t off = 0; off < size; off++) {
			int64_t at;

			buf[off] ^= 0x01;
			at = rgaps_pattern_check(buf, size, &counter);
			if (off < 8 && size == RGAPS_PATTERN_HDR) {
				/* a header alone: the counter is checked against the stream */
				assert_int_equal(at, -1);
				assert_non_null(rgaps_pattern_counter_error(counter, 77));
			} else if (off < 8) {
				assert_int_equal(at, RGAPS_PATTERN_HDR); /* every body word */
			} else if (off < 16) {
				assert_int_equal(at, 8); /* the size field */
			} else {
				assert_int_equal(at, RGAPS_PATTERN_HDR + (off - 16) / 8 * 8);
			}
			buf[off] ^= 0x01;
		}
		if (size > RGAPS_PATTERN_HDR) /* cut short: the size field disagrees */
			assert_int_equal(rgaps_pattern_check(buf, size - 1, &counter), 8);
	}
	assert_int_equal(rgaps_pattern_check(buf, 15, &counter), 0);
	(void)state;
}

static void test_counter(void **state)
{
	assert_null(rgaps_pattern_counter_error(5, 5));
	assert_string_equal(rgaps_pattern_counter_error(4, 5),
			    "the payload of the message before it (a duplicate)");
	assert_string_equal(rgaps_pattern_counter_error(1, 5), "an older payload (stale)");
	assert_string_equal(rgaps_pattern_counter_error(6, 5),
			    "a later payload (reordered, or a counter skipped)");
	(void)state;
}

static void test_place(void **state)
{
	struct rgaps_pattern_stream s = { 0 };

	assert_null(rgaps_pattern_place(&s, 57, 0)); /* a first message may be anywhere */
	assert_null(rgaps_pattern_place(&s, 58, 0));
	assert_null(rgaps_pattern_place(&s, 61, 2)); /* 59 and 60 reported lost */
	assert_string_equal(rgaps_pattern_place(&s, 61, 0), "delivered twice");
	assert_null(rgaps_pattern_place(&s, 62, 0)); /* one bad delivery counts once */
	assert_string_equal(rgaps_pattern_place(&s, 64, 0),
			    "delivered ahead of its place: messages skipped unreported");
	assert_string_equal(rgaps_pattern_place(&s, 60, 0),
			    "delivered out of order (older than due)");
	assert_null(rgaps_pattern_place(&s, 61, 0));
	rgaps_pattern_lost(&s, 4); /* a gap-only message */
	assert_null(rgaps_pattern_place(&s, 66, 0));
	assert_string_equal(rgaps_pattern_place(&s, 68, 0),
			    "delivered ahead of its place: messages skipped unreported");
	(void)state;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_byte),
		cmocka_unit_test(test_counter),
		cmocka_unit_test(test_place),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
