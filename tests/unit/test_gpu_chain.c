/*
 * The copy chain of a topic's replicas (src/daemon/gpu_chain.h), without a
 * GPU: the order of the GPUs for several link topologies, and one message's
 * copy along it through a memory backend of memcpy, hops without peer access
 * through the host buffer.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_chain.h"

static struct rgaps_mem_link links[RGAPS_MEM_MAX_DEVICES][RGAPS_MEM_MAX_DEVICES];

/* n GPUs, every pair linked by kind at rank 0. */
static void links_all(uint32_t n, uint8_t kind)
{
	memset(links, 0, sizeof(links));
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t j = 0; j < n; j++)
			links[i][j] = (struct rgaps_mem_link){
				i == j ? RGAPS_MEM_LINK_SELF : kind, 0,
				i == j || kind == RGAPS_MEM_LINK_NONE ? -1 : 0, 0
			};
}

/* i and j cannot read each other's memory. */
static void unlink_pair(uint32_t i, uint32_t j)
{
	links[i][j].kind = links[j][i].kind = RGAPS_MEM_LINK_NONE;
}

static void order_is(int32_t source, const int32_t *gpus, uint32_t n, const char *want)
{
	struct rgapsd_chain_hop hops[RGAPS_MEM_MAX_DEVICES];
	char got[256];

	rgapsd_chain_order(links, source, gpus, n, hops);
	rgapsd_chain_describe(source, hops, n, got, sizeof(got));
	assert_string_equal(got, want);
}

static void test_switch(void **state)
{
	int32_t gpus[] = { 3, 1, 2 };

	/* NVSwitch: every pair alike, the chain goes by ordinal, each GPU fed once. */
	links_all(4, RGAPS_MEM_LINK_NVLINK);
	order_is(0, gpus, 3, "0 -> 1 -> 2 -> 3");
	order_is(2, (int32_t[]){ 0, 3 }, 2, "2 -> 0 -> 3");
	order_is(0, (int32_t[]){ 2 }, 1, "0 -> 2");
	links_all(4, RGAPS_MEM_LINK_PCIE);
	order_is(0, gpus, 3, "0 -> 1 -> 2 -> 3");
}

static void test_links_decide(void **state)
{
	int32_t gpus[] = { 1, 2, 3 };

	/* GPU 3 reaches only GPU 2: it comes last, over its one link. */
	links_all(4, RGAPS_MEM_LINK_NVLINK);
	unlink_pair(3, 0);
	unlink_pair(3, 1);
	order_is(0, gpus, 3, "0 -> 1 -> 2 -> 3");
	/* Without GPU 2 in the chain, GPU 3 is fed from the tail through host memory. */
	order_is(0, (int32_t[]){ 1, 3 }, 2, "0 -> 1, 1 -> 3 (through host memory)");
	/* NVLink before PCIe: GPU 2 (NVLink to 0) goes before GPU 1 (PCIe to 0). */
	links_all(3, RGAPS_MEM_LINK_NVLINK);
	links[1][0].kind = links[0][1].kind = RGAPS_MEM_LINK_PCIE;
	order_is(0, (int32_t[]){ 1, 2 }, 2, "0 -> 2 -> 1");
	/* The driver's rank breaks a tie of kinds. */
	links_all(3, RGAPS_MEM_LINK_NVLINK);
	links[1][0].rank = 2;
	order_is(0, (int32_t[]){ 1, 2 }, 2, "0 -> 2 -> 1");
}

static void test_branch(void **state)
{
	struct rgapsd_chain_hop hops[3];

	/* GPU 2 cannot read GPU 1 but reads GPU 0: a branch off the source, not host memory. */
	links_all(3, RGAPS_MEM_LINK_NVLINK);
	unlink_pair(2, 1);
	rgapsd_chain_order(links, 0, (int32_t[]){ 1, 2 }, 2, hops);
	assert_int_equal(hops[0].gpu, 1);
	assert_int_equal(hops[0].from, -1);
	assert_int_equal(hops[1].gpu, 2);
	assert_int_equal(hops[1].from, -1);
	assert_false(hops[1].via_host);
	order_is(0, (int32_t[]){ 1, 2 }, 2, "0 -> 1, 0 -> 2");
	/* No peer access anywhere: every hop through host memory, each from the last. */
	links_all(3, RGAPS_MEM_LINK_NONE);
	order_is(0, (int32_t[]){ 1, 2 }, 2,
		 "0 -> 1 (through host memory), 1 -> 2 (through host memory)");
}

/* ---------------------------------------------------------------- the copy */

static uint32_t wholes[8], nwholes, relays, copies;

static int fake_copy(void *ctx, void *dst, const void *src, size_t n, uint32_t dir)
{
	copies++;
	memcpy(dst, src, n);
	return 0;
}

static int fake_register(void *ctx, void *p, size_t n)
{
	return 0;
}

static int fake_unregister(void *ctx, void *p)
{
	return 0;
}

static int fake_relay(void *ctx, const void *src, size_t n, const struct rgaps_relay_hop *hops,
		      uint32_t nhops, size_t piece, void (*whole)(void *arg, uint32_t hop),
		      void *arg)
{
	relays++;
	for (uint32_t i = 0; i < nhops; i++) {
		assert_true(hops[i].from < (int32_t)i);
		memcpy(hops[i].dst, hops[i].from < 0 ? src : hops[hops[i].from].dst, n);
		whole(arg, i);
	}
	return 0;
}

static void on_whole(void *arg, uint32_t hop)
{
	wholes[nwholes++] = hop;
}

/*
 * Copy a message to n replicas of the GPUs gpus (links already set) through
 * ops, check every byte of each and that whole() came once per hop, in order.
 */
static void copy_and_check(int (*relay)(void *, const void *, size_t,
					const struct rgaps_relay_hop *, uint32_t, size_t,
					void (*)(void *, uint32_t), void *),
			   const int32_t *gpus, uint32_t n, struct rgapsd_chain *c)
{
	/* static: the chain keeps a pointer to the operations until its fini */
	static struct rgaps_memory_ops ops = { .copy = fake_copy,
					       .host_register = fake_register,
					       .host_unregister = fake_unregister };
	struct rgapsd_chain_hop hops[3];
	static uint8_t src[4096], dst[3][4096];

	ops.copy_relay = relay;
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)(i * 7 + 1);
	rgapsd_chain_order(links, 0, gpus, n, hops);
	for (uint32_t i = 0; i < n; i++) {
		memset(dst[i], 0, sizeof(dst[i]));
		hops[i].dst = dst[i];
	}
	rgapsd_chain_init(c, &ops, NULL, 1024, sizeof(src));
	nwholes = relays = copies = 0;
	assert_int_equal(rgapsd_chain_copy(c, src, sizeof(src), hops, n, on_whole, NULL), 0);
	assert_int_equal(nwholes, n);
	for (uint32_t i = 0; i < n; i++) {
		assert_memory_equal(dst[i], src, sizeof(src));
		assert_int_equal(wholes[i], i);
	}
}

static void test_copy(void **state)
{
	struct rgapsd_chain c;

	/* 0 -> 1 -> 2 over links, 2 -> 3 through host memory. */
	links_all(4, RGAPS_MEM_LINK_NVLINK);
	unlink_pair(3, 0);
	unlink_pair(3, 1);
	unlink_pair(3, 2);
	copy_and_check(fake_relay, (int32_t[]){ 1, 2, 3 }, 3, &c);
	/* One relay for the linked hops, two copies (to and from host memory) for GPU 3. */
	assert_int_equal(relays, 1);
	assert_int_equal(copies, 2);
	rgapsd_chain_fini(&c);
}

static int relay_unsupported(void *ctx, const void *src, size_t n,
			     const struct rgaps_relay_hop *hops, uint32_t nhops, size_t piece,
			     void (*whole)(void *arg, uint32_t hop), void *arg)
{
	return -ENOTSUP;
}

static void test_copy_without_relay(void **state)
{
	struct rgapsd_chain c;

	/* A plugin from before copy_relay: each replica whole from the one before it. */
	links_all(3, RGAPS_MEM_LINK_NVLINK);
	copy_and_check(relay_unsupported, (int32_t[]){ 1, 2 }, 2, &c);
	assert_int_equal(copies, 2);
	assert_true(c.hop_by_hop);
	rgapsd_chain_fini(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_switch),
		cmocka_unit_test(test_links_decide),
		cmocka_unit_test(test_branch),
		cmocka_unit_test(test_copy),
		cmocka_unit_test(test_copy_without_relay),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
