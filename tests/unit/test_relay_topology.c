/*
 * The relay topologies (src/daemon/remote/topology.h): the "relay" values and
 * their one spelling each, the order every host derives (joined, then name),
 * the parent each mode gives and the nearest live ancestor when hosts are
 * down, a joining host that moves nobody, and the model "auto" chooses with
 * (docs/SCALING.md).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote/topology.h"

static void test_parse(void **state)
{
	static const char *const good[] = { "star", "chain", "tree:2", "tree:7", "tree:64" };
	static const char *const bad[] = {
		"",	   "Star",    "tree",	 "tree:",   "tree:1", "tree:0",		  "tree:65",
		"tree:02", "tree:+2", "tree: 2", "tree:2 ", "chain ", "tree:99999999999", "auto"
	};
	struct rt_relay_mode m;
	char name[RT_RELAY_NAME_MAX];
	enum rgaps_relay kind;
	uint32_t fanout;

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		assert_int_equal(rt_relay_mode_parse(good[i], &m), 0);
		assert_string_equal(rt_relay_mode_name(&m, name, sizeof(name)), good[i]);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (rt_relay_mode_parse(bad[i], &m) != -EINVAL)
			fail_msg("'%s' was taken for a relay mode", bad[i]);
	/* The configuration takes "auto" too; a tree says how many children, in words. */
	assert_null(rgaps__relay_parse("auto", &kind, &fanout));
	assert_int_equal(kind, RGAPS_RELAY_AUTO);
	assert_non_null(strstr(rgaps__relay_parse("tree:1", &kind, &fanout), "from 2 to 64"));
	assert_non_null(strstr(rgaps__relay_parse("ring", &kind, &fanout), "\"chain\""));
	assert_null(rgaps__relay_parse("tree:3", &kind, &fanout));
	assert_int_equal(kind, RGAPS_RELAY_TREE);
	assert_int_equal(fanout, 3);
}

/* The same hosts in any order come out in one order: joined first, then name. */
static void test_order(void **state)
{
	struct rt_tree_host a[] = {
		{ "10.0.0.9:7000", 300, true, NULL },  { "10.0.0.1:7000", 300, true, NULL },
		{ "10.0.0.5:7000", 100, true, NULL },  { "10.0.0.2:7000", 0, false, NULL },
		{ "10.0.0.10:7000", 300, true, NULL },
	};
	/* names compare as bytes: ':' sorts after '0' */
	static const char *const want[] = { "10.0.0.2:7000", "10.0.0.5:7000", "10.0.0.10:7000",
					    "10.0.0.1:7000", "10.0.0.9:7000" };
	struct rt_tree_host b[5];

	(void)state;
	for (int round = 0; round < 20; round++) {
		/* a shuffled copy, as another host's view may list them */
		memcpy(b, a, sizeof(a));
		for (int i = 4; i > 0; i--) {
			int j = (round * 7 + i * 3) % (i + 1);
			struct rt_tree_host x = b[i];

			b[i] = b[j];
			b[j] = x;
		}
		rt_tree_sort(b, 5);
		for (int i = 0; i < 5; i++)
			assert_string_equal(b[i].name, want[i]);
	}
}

static uint32_t parent(const char *mode, const bool *live, uint32_t n, uint32_t i)
{
	struct rt_relay_mode m;

	assert_int_equal(rt_relay_mode_parse(mode, &m), 0);
	return rt_tree_parent(&m, live, n, i);
}

static void test_layouts(void **state)
{
	bool live[16];

	(void)state;
	memset(live, 1, sizeof(live));
	for (uint32_t i = 1; i <= 15; i++) {
		assert_int_equal(parent("star", live, 15, i), 0);
		assert_int_equal(parent("chain", live, 15, i), i - 1);
		assert_int_equal(parent("tree:2", live, 15, i), (i - 1) / 2);
		assert_int_equal(parent("tree:4", live, 15, i), (i - 1) / 4);
	}
	/* Out of range and the origin itself have no parent. */
	assert_int_equal(parent("chain", live, 15, 0), RT_TREE_NONE);
	assert_int_equal(parent("chain", live, 15, 16), RT_TREE_NONE);
}

/*
 * A host that is down keeps its place: the hosts below it attach to the
 * nearest live one above, and only they move; with the origin down too,
 * hosts whose every ancestor is down have no parent.
 */
static void test_nearest_live_ancestor(void **state)
{
	bool live[16];

	(void)state;
	memset(live, 1, sizeof(live));
	live[3] = false; /* chain: 4 goes to 2; tree:2: 7 and 8 go to 1 */
	assert_int_equal(parent("chain", live, 15, 4), 2);
	assert_int_equal(parent("chain", live, 15, 5), 4);
	assert_int_equal(parent("tree:2", live, 15, 7), 1);
	assert_int_equal(parent("tree:2", live, 15, 8), 1);
	assert_int_equal(parent("tree:2", live, 15, 15), 7);
	assert_int_equal(parent("tree:2", live, 15, 6), 2); /* another subtree: unmoved */
	live[1] = false;				    /* now 7 and 8 go to the origin */
	assert_int_equal(parent("tree:2", live, 15, 7), 0);
	assert_int_equal(parent("chain", live, 15, 4), 2);
	live[2] = false;
	assert_int_equal(parent("chain", live, 15, 4), 0);
	/* The host asking is down itself: its place still says where it would attach. */
	assert_int_equal(parent("chain", live, 15, 3), 0);
	live[0] = false;
	assert_int_equal(parent("chain", live, 15, 4), RT_TREE_NONE);
	assert_int_equal(parent("chain", live, 15, 5), 4);
	assert_int_equal(parent("star", live, 15, 9), RT_TREE_NONE);
}

/* A host that subscribes later than every other joins at the end: nobody's parent changes. */
static void test_join_moves_nobody(void **state)
{
	static const char *const modes[] = { "star", "chain", "tree:2", "tree:3" };
	bool live[32];

	(void)state;
	memset(live, 1, sizeof(live));
	for (size_t k = 0; k < sizeof(modes) / sizeof(modes[0]); k++)
		for (uint32_t n = 1; n < 30; n++)
			for (uint32_t i = 1; i <= n; i++)
				assert_int_equal(parent(modes[k], live, n, i),
						 parent(modes[k], live, n + 1, i));
}

static double predict(const char *mode, uint32_t n, uint64_t size, uint64_t chunk)
{
	struct rt_relay_mode m;

	assert_int_equal(rt_relay_mode_parse(mode, &m), 0);
	return rt_relay_predict(&m, n, size, chunk);
}

/*
 * The model: star n copies; chain one message plus a chunk per further hop;
 * tree:K K copies per level. A hop's own cost weighs only for small messages.
 */
static void test_model(void **state)
{
	const uint64_t MiB = 1 << 20;
	struct rt_relay_mode m;
	char why[512];

	(void)state;
	assert_true(fabs(predict("star", 8, 64 * MiB, MiB) - 8.0) < 0.01);
	assert_true(fabs(predict("chain", 8, 64 * MiB, MiB) - (64.0 + 7) / 64) < 0.01);
	/* tree:2 of 8 hosts is 3 levels deep: 2 copies of 64 + 2 chunks */
	assert_true(fabs(predict("tree:2", 8, 64 * MiB, MiB) - 2 * (64.0 + 2) / 64) < 0.01);
	assert_true(fabs(predict("chain", 1, 64 * MiB, MiB) - predict("star", 1, 64 * MiB, MiB)) <
		    1e-9);
	/* A message smaller than a chunk is one chunk of its own size. */
	assert_true(fabs(predict("chain", 4, 4096, MiB) - predict("chain", 4, 4096, 4096)) < 1e-9);

	rt_relay_auto(1, 64 * MiB, MiB, &m, why, sizeof(why));
	assert_int_equal(m.kind, RGAPS_RELAY_STAR); /* one host: nothing to relay */
	rt_relay_auto(8, 64 * MiB, MiB, &m, why, sizeof(why));
	assert_int_equal(m.kind, RGAPS_RELAY_CHAIN);
	assert_non_null(strstr(why, "chain for 8 hosts and 64MiB messages in 1MiB chunks"));
	assert_non_null(strstr(why, "star 8.0"));
	/* Long chains of big chunks lose to a tree; small messages go the fewest hops. */
	rt_relay_auto(200, 64 * MiB, 16 * MiB, &m, why, sizeof(why));
	assert_int_equal(m.kind, RGAPS_RELAY_TREE);
	rt_relay_auto(8, 4096, 16 * MiB, &m, why, sizeof(why));
	assert_int_equal(m.kind, RGAPS_RELAY_STAR);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_order),
		cmocka_unit_test(test_layouts),
		cmocka_unit_test(test_nearest_live_ancestor),
		cmocka_unit_test(test_join_moves_nobody),
		cmocka_unit_test(test_model),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
