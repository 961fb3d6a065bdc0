/* The GPU memory reserve check (src/daemon/gpu_reserve.h), without a GPU. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <string.h>

#include "gpu_reserve.h"

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

static void test_fits(void **state)
{
	char err[256] = "";

	/* 80 GiB free, a 256 MiB pool, 1 GiB reserve. */
	assert_int_equal(rgapsd_gpu_reserve_check(0, 80 * GiB, 80 * GiB, 256 * MiB, GiB, err,
						  sizeof(err)), 0);
	/* Exactly the reserve left. */
	assert_int_equal(rgapsd_gpu_reserve_check(0, 2 * GiB, 80 * GiB, GiB, GiB, err,
						  sizeof(err)), 0);
	/* No reserve: only the pool must fit. */
	assert_int_equal(rgapsd_gpu_reserve_check(0, GiB, 80 * GiB, GiB, 0, err, sizeof(err)), 0);
	assert_string_equal(err, "");
}

static void test_refused_reserve(void **state)
{
	char err[256] = "";

	/* 1.5 GiB free, a 1 GiB pool would leave 512 MiB < 1 GiB. */
	assert_int_equal(rgapsd_gpu_reserve_check(3, GiB + 512 * MiB, 80 * GiB, GiB, GiB, err,
						  sizeof(err)), -ENOMEM);
	assert_non_null(strstr(err, "GPU 3"));
	assert_non_null(strstr(err, "1.5 GiB free of 80 GiB"));
	assert_non_null(strstr(err, "a 1 GiB pool would leave 512 MiB"));
	assert_non_null(strstr(err, "gpu_reserve (1 GiB)"));
	/* One byte short of the reserve. */
	assert_int_equal(rgapsd_gpu_reserve_check(0, 2 * GiB - 1, 80 * GiB, GiB, GiB, err,
						  sizeof(err)), -ENOMEM);
}

static void test_refused_no_fit(void **state)
{
	char err[256] = "";

	assert_int_equal(rgapsd_gpu_reserve_check(1, 100 * MiB, 16 * GiB, 256 * MiB, 0, err,
						  sizeof(err)), -ENOMEM);
	assert_non_null(strstr(err, "a 256 MiB pool does not fit"));
	/* No wrap-around with the largest numbers. */
	assert_int_equal(rgapsd_gpu_reserve_check(0, UINT64_MAX, UINT64_MAX, UINT64_MAX,
						  UINT64_MAX, err, sizeof(err)), -ENOMEM);
	assert_int_equal(rgapsd_gpu_reserve_check(0, UINT64_MAX - 1, UINT64_MAX, 2, UINT64_MAX,
						  err, sizeof(err)), -ENOMEM);
	assert_int_equal(rgapsd_gpu_reserve_check(0, 0, 0, 0, 0, err, sizeof(err)), 0);
	assert_int_equal(rgapsd_gpu_reserve_check(0, 0, 0, 1, 0, err, sizeof(err)), -ENOMEM);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fits),
		cmocka_unit_test(test_refused_reserve),
		cmocka_unit_test(test_refused_no_fit),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
