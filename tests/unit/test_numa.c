/*
 * NUMA placement (src/daemon/remote/numa.c): memory preferred on node 0 (every host
 * has it) lands there, all sampled pages checked; bad nodes are refused.
 * Skips, with the reason, where the kernel has no NUMA system calls.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "remote/numa.h"

static void test_place_on_node0(void **state)
{
	size_t len = 8u << 20;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned on = 0, n = 0;
	int r;

	assert_true(p != MAP_FAILED);
	r = rt_numa_place(p, len, 0, &on, &n);
	if (r == -ENOSYS || r == -EPERM) {
		munmap(p, len);
		print_message("  skipped: this kernel refuses mbind (%s)\n", strerror(-r));
		skip();
	}
	assert_int_equal(r, 0);
	assert_true(n >= 32);
	assert_int_equal(on, n);
	munmap(p, len);
}

static void test_bad_node(void **state)
{
	char buf[4096] __attribute__((aligned(4096)));
	unsigned on, n;

	assert_int_equal(rt_numa_place(buf, sizeof(buf), -1, &on, &n), -EINVAL);
	assert_int_equal(rt_numa_place(buf, sizeof(buf), 100000, &on, &n), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_place_on_node0),
		cmocka_unit_test(test_bad_node),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
