/*
 * libFuzzer target for everything that reads another process's region of a
 * topic (src/common/topic*.c, docs/SHM-LAYOUT.md): the input is the image of a
 * publisher's control region and of a subscriber's region, as a hostile client
 * could leave them. Then:
 *
 *   - rgapsd's readers (rgaps__pub_snapshot, rgaps__sub_snapshot,
 *     rgaps__sub_position, rgaps__sub_holds_stream) must return values inside the
 *     limits;
 *   - rgaps__entry_read must accept only entries inside the pool;
 *   - a subscriber taking from the spoiled stream must return only messages
 *     whose bytes lie inside the stream's pool, and must not loop forever;
 *   - a publisher watching the spoiled subscriber region must keep exact books
 *     (rgaps__pub_check) through publishes and reclaims.
 *
 * ASan and UBSan (the build's flags) catch any read or write outside.
 *
 *   CC=clang meson setup build-fuzz -Dfuzz=true && ninja -C build-fuzz
 *   build-fuzz/tests/fuzz/fuzz_topic -max_total_time=60 tests/fuzz/corpus/fuzz_topic
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "topic.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define POOL (64u << 10)

static struct rgaps_topic_limits lim;
static struct rgaps_topic_hdr *hdr;
static uint8_t *pool;

static void setup(void)
{
	struct rgaps_topic_config tc = {
		.pool_size = POOL,
		.max_message_size = 16u << 10,
		.queue_depth = 8,
		.history = 1,
		.max_subscribers = 4,
		.max_publishers = 4,
		.max_holds = 4,
		.max_loans = 2,
		.block_timeout_ms = 0,
	};

	if (hdr)
		return;
	rgaps__log_level = RGAPS_LOG_ERROR - 1; /* the poisoned-stream warnings: quiet */
	if (rgaps__topic_limits_from_config(&tc, 0, 0, &lim))
		abort();
	hdr = calloc(1, rgaps__topic_hdr_size());
	pool = calloc(1, POOL);
	if (!hdr || !pool || rgaps__topic_hdr_format(hdr, rgaps__topic_hdr_size(), "fuzz", &lim))
		abort();
}

/* A region image: the input (repeated) over the whole size; small fixups below. */
static void *image(const uint8_t *data, size_t size, size_t len)
{
	uint8_t *p = calloc(1, len);

	for (size_t i = 0; size && i < len; i++)
		p[i] = data[i % size];
	return p;
}

static void check_readers(struct rgaps_pub_region *pr, struct rgaps_sub_region *sr)
{
	struct rgaps_pub_snapshot ps;
	struct rgaps_sub_snapshot ss;
	struct rgaps_topic_entry e;
	char why[160];

	rgaps__pub_snapshot(&lim, pr, &ps);
	if (ps.tail > ps.head || ps.head - ps.tail > lim.queue_depth ||
	    ps.c.pool_used_bytes > lim.pool_size || ps.c.nloans > lim.max_loans)
		abort();
	rgaps__sub_snapshot(&lim, sr, &ss);
	if (ss.nholds > lim.max_holds)
		abort();
	for (uint32_t k = 0; k < lim.max_publishers + 2; k++) {
		uint64_t p = rgaps__sub_position(&lim, sr, k, 1 + k, ps.tail, ps.head);

		if (p < ps.tail || p > ps.head)
			abort();
	}
	(void)rgaps__sub_holds_stream(&lim, sr, 1);
	for (uint64_t q = ps.tail; q < ps.tail + lim.queue_depth; q++) {
		if (rgaps__entry_read(&lim, pr, q, &e, why, sizeof(why)) == 0 &&
		    !(e.flags & RGAPS_ENTRY_GAP_ONLY) &&
		    (e.size == 0 || e.size > lim.max_message_size || e.off > lim.pool_size - e.size))
			abort();
	}
}

static int no_sync(void *arg)
{
	return 0;
}

/* A subscriber reading the spoiled stream: only bytes inside the pool, and it ends. */
static void take_from(struct rgaps_pub_region *pr)
{
	struct rgaps_topic_cbs cbs = { .sync = no_sync };
	struct rgaps_sub_region *mine = calloc(1, lim.sub_region_size);
	struct rgaps_sub *s;

	rgaps__sub_region_format(mine, &lim, 0, 7);
	if (rgaps__sub_create(hdr, &lim, mine, &cbs, &s) ||
	    rgaps__sub_set_stream(s, 0, 1, pr, pool, UINT64_MAX))
		abort();
	for (int i = 0; i < 16; i++) {
		struct rgaps_sub_msg m;
		int r = rgaps__sub_take(s, 0, 0, &m);

		if (r)
			break;
		if (m.data && (m.data < pool || m.data + m.size > pool + POOL))
			abort();
		if (m.attr_len > RGAPS_ATTR_MAX)
			abort();
		if (m.token != UINT32_MAX)
			rgaps__sub_release(s, m.token);
	}
	rgaps__sub_destroy(s);
	free(mine);
}

/* A publisher watching the spoiled subscriber region: its books stay exact. */
static void publish_to(struct rgaps_sub_region *sr)
{
	struct rgaps_topic_cbs cbs = { .sync = no_sync };
	struct rgaps_pub_region *mine = calloc(1, lim.pub_region_size);
	struct rgaps_pub_commit c = { .ts_ns = 1 };
	struct rgaps_pub *p;
	char why[256];

	rgaps__pub_region_format(mine, &lim, 1, 9);
	if (rgaps__pub_create(hdr, &lim, mine, pool, &cbs, &p) || rgaps__pub_set_sub(p, 0, 7, sr))
		abort();
	for (int i = 0; i < 24; i++) {
		uint32_t tok;
		uint64_t off;

		if (rgaps__pub_loan(p, 1000 + (uint64_t)i * 300, 0, &tok, &off) == 0)
			rgaps__pub_commit(p, tok, 100, &c, 0, false, NULL);
		if (rgaps__pub_check(p, why, sizeof(why))) {
			fprintf(stderr, "publisher books: %s\n", why);
			abort();
		}
	}
	rgaps__pub_destroy(p);
	free(mine);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rgaps_pub_region *pr;
	struct rgaps_sub_region *sr;

	setup();
	pr = image(data, size, lim.pub_region_size);
	sr = image(size > 8 ? data + 8 : data, size > 8 ? size - 8 : size, lim.sub_region_size);
	check_readers(pr, sr);
	take_from(pr);
	/* The subscriber region claims stream 9 (the publisher's) in its cursor and holds. */
	rgaps__sub_region_set_cursor(sr, &lim, 1, 9, size ? data[0] : 0, 0);
	publish_to(sr);
	free(pr);
	free(sr);
	return 0;
}
