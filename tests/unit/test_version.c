/*
 * The library's version: rgaps_version() of the librgaps this test runs with
 * is the header's RGAPS_VERSION_HEX, and both are the project's version (the
 * string rgapsd and the packages carry).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "rgaps/rgaps.h"
#include "rgaps_build_config.h"

static void test_library_is_header(void **state)
{
	(void)state;
	assert_int_equal(rgaps_version(), RGAPS_VERSION_HEX);
}

static void test_header_is_project(void **state)
{
	char v[32];

	(void)state;
	snprintf(v, sizeof(v), "%d.%d.%d", RGAPS_VERSION_MAJOR, RGAPS_VERSION_MINOR,
		 RGAPS_VERSION_PATCH);
	assert_string_equal(v, RGAPS_VERSION);
}

static void test_numbers_compare(void **state)
{
	(void)state;
	assert_true(RGAPS_VERSION_NUM(0, 3, 0) > RGAPS_VERSION_NUM(0, 2, 9));
	assert_true(RGAPS_VERSION_NUM(1, 0, 0) > RGAPS_VERSION_NUM(0, 255, 255));
	assert_true(RGAPS_VERSION_HEX >= RGAPS_VERSION_NUM(0, 3, 0)); /* rgaps_version() is 0.3's */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_library_is_header),
		cmocka_unit_test(test_header_is_project),
		cmocka_unit_test(test_numbers_compare),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
