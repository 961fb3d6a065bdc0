/*
 * Unit tests of the pending connections' bounds (src/daemon/admission.c), as the
 * data ports keep them: per source address and in all; a configured peer's
 * address takes the oldest stranger's place, or its own address's oldest; an
 * IPv4-mapped IPv6 address is its IPv4 one; settled connections leave.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "admission.h"

static struct sockaddr_in v4(const char *ip)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(40000) };

	assert_int_equal(inet_pton(AF_INET, ip, &sa.sin_addr), 1);
	return sa;
}

static int admit(struct rgapsd_admission *a, uintptr_t key, const char *ip, bool configured,
		 uint64_t now, void **victim)
{
	struct sockaddr_in sa = v4(ip);

	return rgapsd_admission_admit(a, (void *)key, (struct sockaddr *)&sa, configured, now,
				      victim);
}

static void test_same_host(void **state)
{
	struct sockaddr_in a = v4("10.0.0.1"), b = v4("10.0.0.1"), c = v4("10.0.0.2");
	struct sockaddr_in6 m = { .sin6_family = AF_INET6, .sin6_port = htons(1) };

	b.sin_port = htons(1234);
	assert_true(rgapsd_addr_same_host((struct sockaddr *)&a, (struct sockaddr *)&b));
	assert_false(rgapsd_addr_same_host((struct sockaddr *)&a, (struct sockaddr *)&c));
	assert_int_equal(inet_pton(AF_INET6, "::ffff:10.0.0.1", &m.sin6_addr), 1);
	assert_true(rgapsd_addr_same_host((struct sockaddr *)&a, (struct sockaddr *)&m));
}

static void test_bounds_and_a_place_for_peers(void **state)
{
	struct rgapsd_admission a;
	void *victim;
	uintptr_t key = 1;

	rgapsd_admission_init(&a, "test port", 6, 2);
	/* Two per source: the third from 10.0.0.2 is refused. */
	assert_int_equal(admit(&a, key++, "10.0.0.2", false, 1, &victim), 0);
	assert_int_equal(admit(&a, key++, "10.0.0.2", false, 2, &victim), 0);
	assert_int_equal(admit(&a, key++, "10.0.0.2", false, 3, &victim), -EBUSY);
	assert_int_equal(a.st.refused_source, 1);
	/* Six in all. */
	for (int i = 3; i <= 6; i++) {
		char ip[16];

		snprintf(ip, sizeof(ip), "10.0.0.%d", i);
		assert_int_equal(admit(&a, key++, ip, false, (uint64_t)(10 + i), &victim), 0);
		assert_null(victim);
	}
	assert_int_equal(a.st.pending, 6);
	assert_int_equal(admit(&a, key++, "10.0.0.9", false, 20, &victim), -EBUSY);
	assert_int_equal(a.st.refused, 1);
	/* A configured peer's address takes the oldest stranger's place (key 1, since 1). */
	assert_int_equal(admit(&a, 100, "10.0.0.1", true, 21, &victim), 0);
	assert_ptr_equal(victim, (void *)1);
	assert_int_equal(a.st.evicted, 1);
	assert_int_equal(a.st.pending, 6);
	/* Over its own address's share, a configured address replaces its own oldest. */
	assert_int_equal(admit(&a, 101, "10.0.0.1", true, 22, &victim), 0);
	assert_ptr_equal(victim, (void *)2); /* every place taken: the oldest stranger again */
	assert_int_equal(admit(&a, 102, "10.0.0.1", true, 23, &victim), 0);
	assert_ptr_equal(victim, (void *)100);
	/* Settled connections leave; a drop (why) is counted. */
	rgapsd_admission_settled(&a, (void *)101, NULL);
	rgapsd_admission_settled(&a, (void *)102, "no preamble within 3000 ms");
	assert_int_equal(a.st.dropped, 1);
	assert_int_equal(a.st.pending, 4);
	assert_int_equal(admit(&a, key++, "10.0.0.9", false, 30, &victim), 0);
	assert_null(victim);
	rgapsd_admission_settled(&a, (void *)12345, "never admitted: nothing happens");
	assert_int_equal(a.st.dropped, 1);
	rgapsd_admission_fini(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_same_host),
		cmocka_unit_test(test_bounds_and_a_place_for_peers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
