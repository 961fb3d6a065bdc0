/*
 * Unit tests of a topic's shared memory (src/common/topic*.c): the layout
 * checks, every bound rgapsd and the library apply to what they read from
 * another process's region, delivery and reclaim across publishers and
 * subscribers, the overflow policies, history, attribute blocks, gap-only
 * messages, spoiled regions, futex wake-ups, and crash safety by construction:
 * processes killed at random points leave only their own region half-written,
 * and every block of a pool is accounted for afterwards.
 *
 * The fixture plays rgapsd: it formats the header and the regions in shared
 * anonymous memory (so forked children see them) and keeps a directory of
 * members there, which the clients' sync callback follows.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "futex.h"
#include "log.h"
#include "pattern.h"
#include "topic.h"

#define MAXP 4
#define MAXS 8

struct dir {
	uint64_t pub_gen[MAXP];
	uint64_t pub_limit[MAXP];
	uint64_t sub_gen[MAXS];
};

struct fixture {
	struct rgaps_topic_config tc;
	struct rgaps_topic_limits lim;
	struct rgaps_topic_hdr *hdr;
	struct rgaps_pub_region *pubr[MAXP];
	uint8_t *pool[MAXP];
	struct rgaps_sub_region *subr[MAXS];
	struct dir *dir;
	uint64_t next_gen;
};

static void *shared(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	assert_true(p != MAP_FAILED);
	return p;
}

/* A topic whose largest message is max bytes (pool: each publisher's pool). */
static struct fixture *make_max(uint64_t pool, uint64_t max, uint32_t depth, uint32_t history,
				uint32_t overflow)
{
	struct fixture *f = calloc(1, sizeof(*f));

	rgapsd_topic_config_defaults(&f->tc);
	snprintf(f->tc.name, sizeof(f->tc.name), "unit");
	f->tc.pool_size = pool;
	f->tc.max_message_size = max;
	f->tc.queue_depth = depth;
	f->tc.history = history;
	f->tc.overflow = overflow;
	f->tc.max_subscribers = MAXS;
	f->tc.max_publishers = MAXP;
	f->tc.max_holds = 4;
	f->tc.max_loans = 2;
	f->tc.block_timeout_ms = 50;
	assert_int_equal(rgaps__topic_limits_from_config(&f->tc, 0, 0, &f->lim), 0);
	f->hdr = shared(rgaps__topic_hdr_size());
	assert_int_equal(rgaps__topic_hdr_format(f->hdr, rgaps__topic_hdr_size(), "unit", &f->lim),
			 0);
	for (int i = 0; i < MAXP; i++) {
		f->pubr[i] = shared(f->lim.pub_region_size);
		f->pool[i] = shared(pool);
	}
	for (int i = 0; i < MAXS; i++)
		f->subr[i] = shared(f->lim.sub_region_size);
	f->dir = shared(sizeof(*f->dir));
	return f;
}

static struct fixture *make(uint64_t pool, uint32_t depth, uint32_t history, uint32_t overflow)
{
	return make_max(pool, pool, depth, history, overflow);
}

static void destroy(struct fixture *f)
{
	for (int i = 0; i < MAXP; i++) {
		munmap(f->pubr[i], f->lim.pub_region_size);
		munmap(f->pool[i], f->lim.pool_size);
	}
	for (int i = 0; i < MAXS; i++)
		munmap(f->subr[i], f->lim.sub_region_size);
	munmap(f->dir, sizeof(*f->dir));
	munmap(f->hdr, rgaps__topic_hdr_size());
	free(f);
}

/* ---------------------------------------------------------------- the fixture as rgapsd */

static void fx_add_pub(struct fixture *f, uint32_t slot)
{
	uint64_t gen = ++f->next_gen;

	rgaps__pub_region_format(f->pubr[slot], &f->lim, slot, gen);
	f->dir->pub_limit[slot] = UINT64_MAX;
	__atomic_store_n(&f->dir->pub_gen[slot], gen, __ATOMIC_RELEASE);
	rgaps__topic_dir_changed(f->hdr);
}

/* A subscriber starts where rgapsd starts it (members.c): the last `history` of each stream. */
static void fx_add_sub(struct fixture *f, uint32_t slot)
{
	uint64_t gen = ++f->next_gen;

	rgaps__sub_region_format(f->subr[slot], &f->lim, slot, gen);
	for (uint32_t k = 0; k < MAXP; k++) {
		struct rgaps_pub_snapshot s;
		uint64_t head;

		if (!f->dir->pub_gen[k])
			continue;
		rgaps__pub_snapshot(&f->lim, f->pubr[k], &s);
		head = RGAPS_MIN(s.head, f->dir->pub_limit[k]);
		rgaps__sub_region_set_cursor(f->subr[slot], &f->lim, k, f->dir->pub_gen[k],
					    head - RGAPS_MIN((uint64_t)f->lim.history, head - s.tail),
					    RGAPS_CURSOR_FRESH);
	}
	__atomic_store_n(&f->dir->sub_gen[slot], gen, __ATOMIC_RELEASE);
	rgaps__topic_dir_changed(f->hdr);
}

static void fx_remove_sub(struct fixture *f, uint32_t slot)
{
	__atomic_store_n(&f->dir->sub_gen[slot], 0, __ATOMIC_RELEASE);
	rgaps__topic_dir_changed(f->hdr);
}

static void fx_pub_leaves(struct fixture *f, uint32_t slot)
{
	f->dir->pub_limit[slot] = __atomic_load_n(&f->pubr[slot]->head, __ATOMIC_ACQUIRE);
	rgaps__topic_dir_changed(f->hdr);
}

static void fx_remove_pub(struct fixture *f, uint32_t slot)
{
	__atomic_store_n(&f->dir->pub_gen[slot], 0, __ATOMIC_RELEASE);
	rgaps__topic_dir_changed(f->hdr);
}

/* ---------------------------------------------------------------- clients */

struct client {
	struct fixture *f;
	struct rgaps_pub *pub;
	struct rgaps_sub *sub;
	uint32_t slot;
	uint64_t seen_gen[MAXS > MAXP ? MAXS : MAXP];
	uint64_t seen_limit[MAXP];
};

static int pub_sync(void *arg)
{
	struct client *c = arg;

	for (uint32_t j = 0; j < MAXS; j++) {
		uint64_t g = __atomic_load_n(&c->f->dir->sub_gen[j], __ATOMIC_ACQUIRE);

		if (g == c->seen_gen[j])
			continue;
		rgaps__pub_clear_sub(c->pub, j);
		if (g)
			assert_int_equal(rgaps__pub_set_sub(c->pub, j, g, c->f->subr[j]), 0);
		c->seen_gen[j] = g;
	}
	return 0;
}

static int sub_sync(void *arg)
{
	struct client *c = arg;

	for (uint32_t k = 0; k < MAXP; k++) {
		uint64_t g = __atomic_load_n(&c->f->dir->pub_gen[k], __ATOMIC_ACQUIRE);
		uint64_t limit = c->f->dir->pub_limit[k];

		if (g != c->seen_gen[k]) {
			if (c->seen_gen[k])
				rgaps__sub_clear_stream(c->sub, k);
			c->seen_gen[k] = 0;
		}
		if (g && (g != c->seen_gen[k] || limit != c->seen_limit[k])) {
			assert_int_equal(rgaps__sub_set_stream(c->sub, k, g, c->f->pubr[k],
							      c->f->pool[k], limit),
					 0);
			c->seen_gen[k] = g;
			c->seen_limit[k] = limit;
		}
	}
	return 0;
}

static struct client *pub_open(struct fixture *f, uint32_t slot)
{
	struct client *c = calloc(1, sizeof(*c));
	struct rgaps_topic_cbs cbs = { .sync = pub_sync, .arg = c };

	c->f = f;
	c->slot = slot;
	fx_add_pub(f, slot);
	assert_int_equal(rgaps__pub_create(f->hdr, &f->lim, f->pubr[slot], f->pool[slot], &cbs,
					  &c->pub),
			 0);
	pub_sync(c);
	return c;
}

static struct client *sub_open(struct fixture *f, uint32_t slot)
{
	struct client *c = calloc(1, sizeof(*c));
	struct rgaps_topic_cbs cbs = { .sync = sub_sync, .arg = c };

	c->f = f;
	c->slot = slot;
	fx_add_sub(f, slot);
	assert_int_equal(rgaps__sub_create(f->hdr, &f->lim, f->subr[slot], &cbs, &c->sub), 0);
	sub_sync(c);
	return c;
}

static void client_close(struct client *c)
{
	rgaps__pub_destroy(c->pub);
	rgaps__sub_destroy(c->sub);
	free(c);
}

static void check_pub(struct client *c)
{
	char why[256] = "";

	if (rgaps__pub_check(c->pub, why, sizeof(why)) != 0)
		fail_msg("publisher check: %s", why);
}

static uint64_t pool_used(struct client *c)
{
	struct rgaps_pub_state st;

	rgaps__pub_get_state(c->pub, &st);
	return st.pool.used_bytes;
}

/* Publish one message of size bytes carrying the verification pattern of its seq. */
static int publish_t(struct client *c, uint64_t size, int timeout_ms, uint64_t *seq_p)
{
	struct rgaps_pub_state st;
	struct rgaps_pub_commit cm = { .ts_ns = 1 };
	uint32_t tok;
	uint64_t off;
	int r;

	r = rgaps__pub_loan(c->pub, size, timeout_ms, &tok, &off);
	if (r)
		return r;
	rgaps__pub_get_state(c->pub, &st);
	/* The seq this message will get, unless a drop_oldest retire runs first (it does not
	 * change head). */
	if (size >= RGAPS_PATTERN_HDR)
		rgaps_pattern_fill(c->f->pool[c->slot] + off, size, st.head);
	return rgaps__pub_commit(c->pub, tok, size, &cm, timeout_ms, false, seq_p);
}

static int publish(struct client *c, uint64_t size)
{
	return publish_t(c, size, 0, NULL);
}

static void take_ok(struct client *c, struct rgaps_sub_msg *m)
{
	uint64_t ctr;

	assert_int_equal(rgaps__sub_take(c->sub, 0, 0, m), 0);
	if (m->size >= RGAPS_PATTERN_HDR) {
		assert_true(rgaps_pattern_check(m->data, m->size, &ctr) < 0);
		assert_int_equal(ctr, m->seq);
	}
}

/* ---------------------------------------------------------------- layout and bounds */

static void test_limits_bounds(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	struct rgaps_topic_limits l;

#define REJECT(field, value)                                      \
	do {                                                      \
		l = f->lim;                                       \
		l.field = value;                                  \
		assert_int_equal(rgaps__topic_limits_check(&l), -EINVAL); \
	} while (0)
	assert_int_equal(rgaps__topic_limits_check(&f->lim), 0);
	REJECT(queue_depth, 12);
	REJECT(queue_depth, 1);
	REJECT(queue_depth, 1u << 17);
	REJECT(history, 8);
	REJECT(max_subscribers, 0);
	REJECT(max_subscribers, 1025);
	REJECT(max_publishers, 257);
	REJECT(max_holds, 0);
	REJECT(max_loans, 257);
	REJECT(pool_size, 16);
	REJECT(max_message_size, 0);
	REJECT(max_message_size, (1 << 20) + 1);
	REJECT(overflow, 2);
	REJECT(pub_region_size, f->lim.pub_region_size + 4096);
	REJECT(sub_region_size, f->lim.sub_region_size + 4096);
#undef REJECT
	destroy(f);
}

static void test_hdr_validate_rejects(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	size_t size = rgaps__topic_hdr_size();
	struct rgaps_topic_hdr *h = malloc(size);
	struct rgaps_topic_limits l;

	memcpy(h, f->hdr, size);
	assert_int_equal(rgaps__topic_hdr_validate(h, size, &l), 0);
	assert_memory_equal(&l, &f->lim, sizeof(l));
	assert_int_equal(rgaps__topic_hdr_validate(h, sizeof(*h) - 1, &l), -EPROTO);
	assert_int_equal(rgaps__topic_hdr_validate(h, size + 4096, &l), -EPROTO);
	h->magic ^= 1;
	assert_int_equal(rgaps__topic_hdr_validate(h, size, &l), -EPROTO);
	memcpy(h, f->hdr, size);
	h->layout_version++;
	assert_int_equal(rgaps__topic_hdr_validate(h, size, &l), -EPROTO);
	memcpy(h, f->hdr, size);
	h->lim.queue_depth = 3;
	assert_int_equal(rgaps__topic_hdr_validate(h, size, &l), -EPROTO);
	memcpy(h, f->hdr, size);
	h->lim.max_holds = 100000;
	assert_int_equal(rgaps__topic_hdr_validate(h, size, &l), -EPROTO);
	/* Regions: magic and size. */
	fx_add_pub(f, 0);
	assert_int_equal(rgaps__pub_region_validate(f->pubr[0], f->lim.pub_region_size, &f->lim),
			 0);
	assert_int_equal(rgaps__pub_region_validate(f->pubr[0], f->lim.pub_region_size + 4096,
						   &f->lim),
			 -EPROTO);
	assert_int_equal(rgaps__sub_region_validate(f->pubr[0], f->lim.sub_region_size, &f->lim),
			 -EPROTO);
	free(h);
	destroy(f);
}

/* Every check of rgaps__entry_read(), one rejection at a time. */
static void test_entry_read_rejects(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	struct rgaps_topic_entry *e, good = {
		.seq = 5, .off = 4096, .size = 100, .ts_ns = 1, .origin_stream = 1, .origin_seq = 5,
	};
	struct rgaps_topic_entry out;
	char why[160];

	fx_add_pub(f, 0);
	e = &rgaps__pub_entries(&f->lim, f->pubr[0])[5 & 7];
#define TRY(expect, ...)                                                                   \
	do {                                                                               \
		*e = good;                                                                 \
		__VA_ARGS__;                                                               \
		assert_int_equal(rgaps__entry_read(&f->lim, f->pubr[0], 5, &out, why,       \
						  sizeof(why)),                            \
				 expect);                                                  \
	} while (0)
	TRY(0);
	assert_int_equal(out.size, 100);
	TRY(-EAGAIN, e->seq = 13);		    /* lapped: the slot holds another message */
	TRY(-EAGAIN, e->seq = UINT64_MAX);	    /* being rewritten */
	TRY(-EBADMSG, e->flags = 0x80);		    /* unknown flag */
	TRY(-EBADMSG, e->attr_len = RGAPS_ATTR_MAX + 1);
	TRY(-EBADMSG, e->size = 0);
	TRY(-EBADMSG, e->size = f->lim.max_message_size + 1);
	TRY(-EBADMSG, e->off = f->lim.pool_size - 64); /* past the end of the pool */
	TRY(-EBADMSG, e->off = UINT64_MAX - 50);       /* wraps */
	TRY(-EBADMSG, e->off = 4097);		       /* unaligned */
	TRY(-EBADMSG, e->flags = RGAPS_ENTRY_GAP_ONLY, e->gap = 0, e->size = 0);
	TRY(-EBADMSG, e->flags = RGAPS_ENTRY_GAP_ONLY, e->gap = 3);
	TRY(0, e->flags = RGAPS_ENTRY_GAP_ONLY, e->gap = 3, e->size = 0);
	/* Stream order: the fence slot is bounded by the region's slots, never on a gap entry. */
	TRY(0, e->flags = RGAPS_ENTRY_FENCE, e->fence = rgaps__topic_nfences(&f->lim) - 1);
	assert_int_equal(out.fence, rgaps__topic_nfences(&f->lim) - 1);
	TRY(-EBADMSG, e->flags = RGAPS_ENTRY_FENCE, e->fence = rgaps__topic_nfences(&f->lim));
	TRY(-EBADMSG, e->flags = RGAPS_ENTRY_FENCE, e->fence = UINT32_MAX);
	TRY(-EBADMSG, e->flags = RGAPS_ENTRY_GAP_ONLY | RGAPS_ENTRY_FENCE, e->gap = 3,
	    e->size = 0);
	TRY(0, e->fence = 77); /* without the flag the field means nothing */
	assert_int_equal(out.fence, 0);
#undef TRY
	destroy(f);
}

/* rgapsd's readers clamp what a region claims. */
static void test_snapshots_clamp(void **state)
{
	struct fixture *f = make(1 << 20, 8, 2, RGAPS_OVERFLOW_BLOCK);
	struct rgaps_pub_snapshot ps;
	struct rgaps_sub_snapshot ss;

	fx_add_pub(f, 0);
	fx_add_sub(f, 0);
	f->pubr[0]->head = 5;
	f->pubr[0]->tail = 9; /* tail past head */
	rgaps__pub_snapshot(&f->lim, f->pubr[0], &ps);
	assert_true(ps.bad);
	assert_int_equal(ps.head - ps.tail, 0);
	f->pubr[0]->head = 1000;
	f->pubr[0]->tail = 10; /* more kept than the queue holds */
	rgaps__pub_snapshot(&f->lim, f->pubr[0], &ps);
	assert_true(ps.bad);
	f->pubr[0]->tail = 995;
	f->pubr[0]->c.pool_used_bytes = UINT64_MAX;
	f->pubr[0]->c.nloans = 1000;
	rgaps__pub_snapshot(&f->lim, f->pubr[0], &ps);
	assert_false(ps.bad);
	assert_int_equal(ps.c.pool_used_bytes, f->lim.pool_size);
	assert_int_equal(ps.c.nloans, f->lim.max_loans);

	f->subr[0]->nholds = 99999;
	rgaps__sub_snapshot(&f->lim, f->subr[0], &ss);
	assert_int_equal(ss.nholds, f->lim.max_holds);
	/* A cursor outside [tail, head] reads as the nearest end; another stream's as tail. */
	rgaps__sub_region_set_cursor(f->subr[0], &f->lim, 0, f->dir->pub_gen[0], 5, 0);
	assert_int_equal(rgaps__sub_position(&f->lim, f->subr[0], 0, f->dir->pub_gen[0], 995, 1000),
			 995);
	rgaps__sub_region_set_cursor(f->subr[0], &f->lim, 0, f->dir->pub_gen[0], 1u << 30, 0);
	assert_int_equal(rgaps__sub_position(&f->lim, f->subr[0], 0, f->dir->pub_gen[0], 995, 1000),
			 1000);
	assert_int_equal(rgaps__sub_position(&f->lim, f->subr[0], 0, 777, 995, 1000), 995);
	assert_int_equal(rgaps__sub_position(&f->lim, f->subr[0], MAXP + 5, 1, 995, 1000), 995);
	destroy(f);
}

/* ---------------------------------------------------------------- delivery and reclaim */

static void test_fanout_and_reclaim(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *s[3], *p;
	struct rgaps_sub_msg m[3];

	for (int i = 0; i < 3; i++)
		s[i] = sub_open(f, (uint32_t)i);
	p = pub_open(f, 0);
	for (int n = 0; n < 20; n++) {
		assert_int_equal(publish(p, 1000 + (uint64_t)n), 0);
		for (int i = 0; i < 3; i++) {
			take_ok(s[i], &m[i]);
			assert_int_equal(m[i].seq, (uint64_t)n);
			assert_int_equal(m[i].gap, 0);
			assert_int_equal(m[i].size, 1000 + (uint64_t)n);
			/* N subscribers read the same bytes. */
			assert_ptr_equal(m[i].data, m[0].data);
		}
		check_pub(p);
		for (int i = 0; i < 3; i++)
			assert_int_equal(rgaps__sub_release(s[i]->sub, m[i].token), 0);
	}
	rgaps__pub_reclaim(p->pub);
	check_pub(p);
	assert_int_equal(pool_used(p), 0);
	assert_int_equal(rgaps__sub_take(s[0]->sub, 0, 0, &m[0]), -EAGAIN);
	client_close(p);
	for (int i = 0; i < 3; i++)
		client_close(s[i]);
	destroy(f);
}

static void test_no_subscribers_retires_at_once(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *p = pub_open(f, 0);

	for (int n = 0; n < 50; n++)
		assert_int_equal(publish(p, 4096), 0);
	assert_int_equal(pool_used(p), 0);
	assert_int_equal(f->pubr[0]->c.unrouted, 50);
	check_pub(p);
	client_close(p);
	destroy(f);
}

static void test_block_policy_times_out(void **state)
{
	struct fixture *f = make(1 << 20, 4, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *s = sub_open(f, 0), *p = pub_open(f, 0);
	struct rgaps_sub_msg m;

	for (int n = 0; n < 4; n++)
		assert_int_equal(publish(p, 100), 0);
	assert_int_equal(publish(p, 100), -EAGAIN);
	assert_int_equal(publish_t(p, 100, 30, NULL), -ETIMEDOUT);
	assert_int_equal(f->pubr[0]->c.timeouts, 1);
	/* One take frees one entry. */
	take_ok(s, &m);
	rgaps__sub_release(s->sub, m.token);
	assert_int_equal(publish(p, 100), 0);
	/* Pool full: a message as large as the pool waits, then times out. */
	assert_int_equal(publish_t(p, (1 << 20) - 256, 20, NULL), -ETIMEDOUT);
	check_pub(p);
	client_close(p);
	client_close(s);
	destroy(f);
}

static void test_drop_oldest_counts_gaps(void **state)
{
	struct fixture *f = make(1 << 20, 4, 0, RGAPS_OVERFLOW_DROP_OLDEST);
	struct client *slow = sub_open(f, 0), *fast = sub_open(f, 1), *p = pub_open(f, 0);
	struct rgaps_sub_msg m;

	for (int n = 0; n < 10; n++) {
		assert_int_equal(publish(p, 100), 0);
		take_ok(fast, &m);
		assert_int_equal(m.gap, 0);
		rgaps__sub_release(fast->sub, m.token);
	}
	/* The slow one kept only the last 4: 6 dropped, reported with the next message. */
	take_ok(slow, &m);
	assert_int_equal(m.seq, 6);
	assert_int_equal(m.gap, 6);
	assert_int_equal(slow->f->subr[0]->c.drops, 6);
	assert_true(f->pubr[0]->c.dropped >= 6);
	rgaps__sub_release(slow->sub, m.token);
	take_ok(slow, &m);
	assert_int_equal(m.gap, 0);
	assert_int_equal(m.seq, 7);
	rgaps__sub_release(slow->sub, m.token);
	check_pub(p);
	client_close(p);
	client_close(slow);
	client_close(fast);
	destroy(f);
}

/* Publish one message of sizeof(copy) bytes, take and hold it, keep a copy of its bytes. */
static void hold_one(struct client *p, struct client *s, struct rgaps_sub_msg *held,
		     uint8_t (*copy)[8192])
{
	assert_int_equal(publish(p, sizeof(*copy)), 0);
	take_ok(s, held);
	memcpy(*copy, held->data, sizeof(*copy));
}

/* A held message keeps its bytes while drop_oldest retires it and reuses the pool. */
static void test_hold_protects_block(void **state)
{
	struct fixture *f = make_max(64 << 10, 16 << 10, 4, 0, RGAPS_OVERFLOW_DROP_OLDEST);
	struct client *s = sub_open(f, 0), *p = pub_open(f, 0);
	struct rgaps_sub_msg held, m;
	uint8_t copy[8192];
	uint64_t ctr;

	hold_one(p, s, &held, &copy);
	for (int n = 0; n < 200; n++)
		assert_int_equal(publish(p, 8192), 0);
	assert_memory_equal(held.data, copy, sizeof(copy));
	assert_true(rgaps_pattern_check(held.data, held.size, &ctr) < 0);
	assert_int_equal(ctr, 0);
	check_pub(p);
	/* The rest was lapped: the next take reports the gap. */
	take_ok(s, &m);
	assert_true(m.gap > 0);
	rgaps__sub_release(s->sub, m.token);
	rgaps__sub_release(s->sub, held.token);
	rgaps__pub_reclaim(p->pub);
	check_pub(p);
	client_close(p);
	client_close(s);
	destroy(f);
}

/*
 * A stopped subscriber (rgaps__sub_stop) gives up its place: the publisher no longer
 * waits for its cursor, rgapsd sees it at the head, its takes fail; what it holds
 * keeps its bytes while the pool is reused, and is freed once released.
 */
static void test_stopped_subscriber_keeps_holds_only(void **state)
{
	struct fixture *f = make(64 << 10, 4, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *s = sub_open(f, 0), *p = pub_open(f, 0);
	struct rgaps_sub_msg held, m;
	struct rgaps_pub_state st;
	uint8_t copy[8192];
	uint64_t ctr;

	hold_one(p, s, &held, &copy);
	for (int n = 0; n < 4; n++)
		assert_int_equal(publish(p, 100), 0);
	assert_int_equal(publish(p, 100), -EAGAIN); /* its cursor holds the queue */
	rgaps__sub_stop(s->sub);
	for (int n = 0; n < 200; n++) /* ... no longer */
		assert_int_equal(publish(p, 4096), 0);
	rgaps__pub_get_state(p->pub, &st);
	assert_int_equal(rgaps__sub_position(&f->lim, f->subr[0], 0, f->pubr[0]->gen, st.tail,
					    st.head),
			 st.head);
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), -ESHUTDOWN);
	assert_memory_equal(held.data, copy, sizeof(copy));
	assert_true(rgaps_pattern_check(held.data, held.size, &ctr) < 0);
	assert_int_equal(ctr, 0);
	check_pub(p);
	assert_int_equal(rgaps__sub_release(s->sub, held.token), 0);
	rgaps__pub_reclaim(p->pub);
	check_pub(p);
	client_close(p);
	client_close(s);
	destroy(f);
}

/*
 * Stream order: a block committed with a fence stays allocated until its fence
 * completes, even once nobody needs the message, and the slot comes back to
 * the caller only then; a fence slot out of range is refused.
 */
struct fence_book {
	bool pending[4096];
	uint32_t freed[64];
	uint32_t nfreed;
};

static struct fence_book fence_book; /* the callbacks' arg is the client, as for sync */

static bool fb_pending(void *arg, uint32_t k)
{
	return fence_book.pending[k];
}

static void fb_free(void *arg, uint32_t k)
{
	if (fence_book.nfreed < 64)
		fence_book.freed[fence_book.nfreed++] = k;
}

static int fenced_pub_sync(void *arg)
{
	return pub_sync(arg);
}

static void test_fenced_blocks_wait_for_their_fence(void **state)
{
	struct fixture *f = make(64 << 10, 4, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *p = calloc(1, sizeof(*p));
	struct rgaps_topic_cbs cbs = { .sync = fenced_pub_sync, .fence_pending = fb_pending,
				       .fence_free = fb_free, .arg = p };
	struct rgaps_pub_commit cm = { .ts_ns = 1, .has_fence = true, .fence = 3 };
	struct rgaps_topic_entry e;
	uint32_t tok;
	uint64_t off, seq;
	char why[128];

	memset(&fence_book, 0, sizeof(fence_book));
	p->f = f;
	fx_add_pub(f, 0);
	assert_int_equal(rgaps__pub_create(f->hdr, &f->lim, f->pubr[0], f->pool[0], &cbs, &p->pub),
			 0);
	/* No subscriber: the message retires at once, but its copy may still run. */
	fence_book.pending[3] = true;
	assert_int_equal(rgaps__pub_loan(p->pub, 8192, 0, &tok, &off), 0);
	assert_int_equal(rgaps__pub_commit(p->pub, tok, 8192, &cm, 0, false, &seq), 0);
	assert_int_equal(rgaps__entry_read(&f->lim, f->pubr[0], seq, &e, why, sizeof(why)), 0);
	assert_true(e.flags & RGAPS_ENTRY_FENCE);
	assert_int_equal(e.fence, 3);
	assert_int_equal(f->pubr[0]->c.fenced, 1);
	rgaps__pub_reclaim(p->pub);
	assert_int_equal(pool_used(p), 8192); /* kept for its fence */
	assert_int_equal(fence_book.nfreed, 0);
	check_pub(p);
	/* The fence completes: the block goes, the slot comes back. */
	fence_book.pending[3] = false;
	rgaps__pub_reclaim(p->pub);
	assert_int_equal(pool_used(p), 0);
	assert_int_equal(fence_book.nfreed, 1);
	assert_int_equal(fence_book.freed[0], 3);
	/* A full pool of fenced blocks: a bounded loan waits (short slices), then times out. */
	fence_book.pending[5] = true;
	cm.fence = 5;
	assert_int_equal(rgaps__pub_loan(p->pub, 60 << 10, 0, &tok, &off), 0);
	assert_int_equal(rgaps__pub_commit(p->pub, tok, 60 << 10, &cm, 0, false, NULL), 0);
	assert_int_equal(rgaps__pub_loan(p->pub, 60 << 10, 20, &tok, &off), -ETIMEDOUT);
	fence_book.pending[5] = false;
	assert_int_equal(rgaps__pub_loan(p->pub, 60 << 10, 20, &tok, &off), 0);
	/* A fence slot the region does not have: refused, the loan gone. */
	cm.fence = rgaps__topic_nfences(&f->lim);
	assert_int_equal(rgaps__pub_commit(p->pub, tok, 100, &cm, 0, false, NULL), -EINVAL);
	assert_int_equal(pool_used(p), 0);
	check_pub(p);
	client_close(p);
	destroy(f);
}

/*
 * Stream order as a reader sees it (cbs.fence_done): the test says which
 * message's copy is still under way (stuck) or never will complete (broken).
 */
static int64_t stuck_seq[MAXP], broken_seq[MAXP];

static int test_fence_done(void *arg, const struct rgaps_sub_msg *m)
{
	if ((int64_t)m->seq == stuck_seq[m->slot])
		return -EAGAIN;
	return (int64_t)m->seq == broken_seq[m->slot] ? -EBADMSG : 0;
}

static struct client *sub_open_fenced(struct fixture *f, uint32_t slot)
{
	struct client *c = calloc(1, sizeof(*c));
	struct rgaps_topic_cbs cbs = { .sync = sub_sync, .fence_done = test_fence_done, .arg = c };

	for (int k = 0; k < MAXP; k++)
		stuck_seq[k] = broken_seq[k] = -1;
	c->f = f;
	c->slot = slot;
	fx_add_sub(f, slot);
	assert_int_equal(rgaps__sub_create(f->hdr, &f->lim, f->subr[slot], &cbs, &c->sub), 0);
	sub_sync(c);
	return c;
}

/* Publish a message in stream order (fence slot 0; its publisher keeps no books of it). */
static void publish_fenced(struct client *c, uint64_t size)
{
	struct rgaps_pub_commit cm = { .ts_ns = 1, .has_fence = true };
	struct rgaps_pub_state st;
	uint32_t tok;
	uint64_t off;

	assert_int_equal(rgaps__pub_loan(c->pub, size, 0, &tok, &off), 0);
	rgaps__pub_get_state(c->pub, &st);
	rgaps_pattern_fill(c->f->pool[c->slot] + off, size, st.head);
	assert_int_equal(rgaps__pub_commit(c->pub, tok, size, &cm, 0, false, NULL), 0);
}

static uint64_t ms_since(uint64_t t0)
{
	return (rgaps_now_ns(CLOCK_MONOTONIC) - t0) / 1000000;
}

/*
 * A message whose copy is under way is passed over: the other streams flow,
 * a take with a timeout ends at its timeout, and once the copy completes the
 * message comes, then its stream's next, in order.
 */
static void test_unfinished_copy_is_passed_over(void **state)
{
	struct fixture *f = make_max(1 << 20, 64 << 10, 8, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *s = sub_open_fenced(f, 0), *p0 = pub_open(f, 0), *p1 = pub_open(f, 1);
	struct rgaps_sub_msg m;
	uint64_t t0;

	stuck_seq[0] = 0;
	publish_fenced(p0, 100);
	publish_fenced(p0, 100);
	assert_int_equal(publish(p1, 100), 0);
	assert_int_equal(publish(p1, 100), 0);
	for (uint64_t want = 0; want < 2; want++) {
		take_ok(s, &m);
		assert_int_equal(m.slot, 1);
		assert_int_equal(m.seq, want);
		rgaps__sub_release(s->sub, m.token);
	}
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), -EAGAIN);
	t0 = rgaps_now_ns(CLOCK_MONOTONIC);
	assert_int_equal(rgaps__sub_take(s->sub, 150, 0, &m), -ETIMEDOUT);
	assert_true(ms_since(t0) >= 150);
	assert_int_equal(publish(p1, 100), 0); /* still flowing */
	take_ok(s, &m);
	assert_int_equal(m.slot, 1);
	rgaps__sub_release(s->sub, m.token);
	stuck_seq[0] = -1; /* the copy is done */
	for (uint64_t want = 0; want < 2; want++) {
		assert_int_equal(rgaps__sub_take(s->sub, 1000, 0, &m), 0);
		assert_int_equal(m.slot, 0);
		assert_int_equal(m.seq, want);
		assert_int_equal(m.gap, 0);
		rgaps__sub_release(s->sub, m.token);
	}
	assert_int_equal(f->subr[0]->c.drops, 0);
	client_close(p1);
	client_close(p0);
	client_close(s);
	destroy(f);
}

/*
 * A copy that never completes is reported lost: after fence_timeout_ms, at
 * once when its fence is spoiled, and (for the one waiting longest) when more
 * than half of the reader's holds would wait; each as a gap of its stream.
 */
static void test_copy_that_never_ends_is_lost(void **state)
{
	struct fixture *f = make_max(1 << 20, 64 << 10, 8, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *s, *p[3];
	struct rgaps_sub_msg m;
	uint64_t t0;

	f->lim.fence_timeout_ms = 100;
	s = sub_open_fenced(f, 0);
	for (int i = 0; i < 3; i++)
		p[i] = pub_open(f, (uint32_t)i);
	stuck_seq[0] = 0;
	publish_fenced(p[0], 100);
	publish_fenced(p[0], 100);
	t0 = rgaps_now_ns(CLOCK_MONOTONIC);
	assert_int_equal(rgaps__sub_take(s->sub, 5000, 0, &m), 0);
	assert_true(ms_since(t0) >= 100);
	assert_int_equal(m.seq, 1);
	assert_int_equal(m.gap, 1);
	rgaps__sub_release(s->sub, m.token);

	broken_seq[0] = 2;
	publish_fenced(p[0], 100);
	publish_fenced(p[0], 100);
	take_ok(s, &m);
	assert_int_equal(m.seq, 3);
	assert_int_equal(m.gap, 1);
	rgaps__sub_release(s->sub, m.token);
	/* A lost message that carried the gap before it: both told, each counted once. */
	stuck_seq[0] = 4;
	broken_seq[0] = 5;
	publish_fenced(p[0], 100);
	publish_fenced(p[0], 100);
	publish_fenced(p[0], 100);
	assert_int_equal(rgaps__sub_take(s->sub, 5000, 0, &m), 0);
	assert_int_equal(m.seq, 6);
	assert_int_equal(m.gap, 2);
	rgaps__sub_release(s->sub, m.token);
	assert_int_equal(f->subr[0]->c.drops, 4);

	/* max_holds 4: two may wait; a third makes the first give way. */
	rgaps__sub_destroy(s->sub);
	free(s);
	fx_remove_sub(f, 0);
	f->lim.fence_timeout_ms = 0;
	s = sub_open_fenced(f, 1);
	for (int i = 0; i < 3; i++) {
		struct rgaps_pub_state ps;

		rgaps__pub_get_state(p[i]->pub, &ps);
		stuck_seq[i] = (int64_t)ps.head; /* the next message of each stream */
		publish_fenced(p[i], 100);
	}
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), -EAGAIN);
	for (int i = 0; i < 3; i++)
		stuck_seq[i] = -1;
	for (int i = 1; i < 3; i++) {
		take_ok(s, &m);
		assert_int_equal(m.slot, (uint32_t)i);
		assert_int_equal(m.gap, 0);
		rgaps__sub_release(s->sub, m.token);
	}
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), -EAGAIN);
	publish_fenced(p[0], 100);
	take_ok(s, &m);
	assert_int_equal(m.slot, 0);
	assert_int_equal(m.gap, 1);
	rgaps__sub_release(s->sub, m.token);
	for (int i = 0; i < 3; i++)
		client_close(p[i]);
	client_close(s);
	destroy(f);
}

static void test_history_for_late_joiner(void **state)
{
	struct fixture *f = make(1 << 20, 8, 3, RGAPS_OVERFLOW_BLOCK);
	struct client *p = pub_open(f, 0), *s;
	struct rgaps_sub_msg m;

	for (int n = 0; n < 10; n++)
		assert_int_equal(publish(p, 200), 0);
	s = sub_open(f, 0);
	for (uint64_t want = 7; want < 10; want++) {
		take_ok(s, &m);
		assert_int_equal(m.seq, want);
		assert_int_equal(m.gap, 0);
		rgaps__sub_release(s->sub, m.token);
	}
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), -EAGAIN);
	assert_int_equal(publish(p, 200), 0);
	take_ok(s, &m);
	assert_int_equal(m.seq, 10);
	rgaps__sub_release(s->sub, m.token);
	check_pub(p);
	client_close(p);
	client_close(s);
	destroy(f);
}

static void test_hold_limit(void **state)
{
	struct fixture *f = make(1 << 20, 16, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *s = sub_open(f, 0), *p = pub_open(f, 0);
	struct rgaps_sub_msg m[5];

	for (int n = 0; n < 5; n++)
		assert_int_equal(publish(p, 100), 0);
	for (int n = 0; n < 4; n++)
		take_ok(s, &m[n]);
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m[4]), -ENOBUFS);
	assert_int_equal(rgaps__sub_release(s->sub, m[1].token), 0);
	assert_int_equal(rgaps__sub_release(s->sub, m[1].token), -EINVAL);
	assert_int_equal(rgaps__sub_release(s->sub, 99), -EINVAL);
	take_ok(s, &m[4]);
	assert_int_equal(m[4].seq, 4);
	check_pub(p);
	client_close(p);
	client_close(s);
	destroy(f);
}

/*
 * The bound on what one subscriber's holds pin under drop_oldest
 * (rgaps__holds_fit): the fit size is what TLSF needs, and the rule counts
 * where held messages lie, not only their bytes.
 */
static void test_holds_fit_rule(void **state)
{
	struct fixture *f = make_max(1 << 20, 256 << 10, 16, 0, RGAPS_OVERFLOW_DROP_OLDEST);
	const uint64_t K = 1024;
	struct rgaps_extent x[5];

	/* A pool exactly the fit size of a request takes it, for any request size. */
	for (uint64_t size = 1; size < (64ull << 20); size = size * 3 + 77) {
		uint64_t fit = rgaps__tlsf_fit_size(size, RGAPS_POOL_ALIGN);
		struct rgaps_tlsf *t = malloc(rgaps__tlsf_state_size(8));
		uint32_t b1, b2;

		assert_true(fit >= RGAPS_ALIGN_UP(size, RGAPS_POOL_ALIGN));
		assert_true(fit <= RGAPS_ALIGN_UP(size, RGAPS_POOL_ALIGN) * 33 / 32 + 256);
		/* A block in front that is then freed: the free stretch is not the first block. */
		assert_int_equal(rgaps__tlsf_init(t, fit + 4096, 8, RGAPS_POOL_ALIGN), 0);
		assert_int_equal(rgaps__tlsf_alloc(t, 4096, &b1), 0);
		assert_int_equal(rgaps__tlsf_alloc(t, size, &b2), 0);
		free(t);
	}
	assert_int_equal(rgaps__topic_hold_room(&f->lim), 256 * K);

	/* One message is always allowed; three of 256 KiB side by side leave 256 KiB. */
	x[0] = (struct rgaps_extent){ 0, 1 << 20 };
	assert_true(rgaps__holds_fit(&f->lim, x, 1));
	for (int i = 0; i < 4; i++)
		x[i] = (struct rgaps_extent){ (uint64_t)(3 - i) * 256 * K, 256 * K };
	assert_true(rgaps__holds_fit(&f->lim, x, 2));
	assert_true(rgaps__holds_fit(&f->lim, x, 3));
	assert_false(rgaps__holds_fit(&f->lim, x, 4));
	/* Four small messages spread over the pool: 1 KiB held, no room left anywhere. */
	for (int i = 0; i < 4; i++)
		x[i] = (struct rgaps_extent){ (uint64_t)(200 + 250 * i) * K, 256 };
	assert_false(rgaps__holds_fit(&f->lim, x, 4));
	assert_true(rgaps__holds_fit(&f->lim, x, 3)); /* the last 300 KiB are free */
	/* Overlapping or out-of-pool extents (a liar's) never make room. */
	x[0] = (struct rgaps_extent){ 0, 2 << 20 };
	x[1] = (struct rgaps_extent){ 4 << 20, 256 };
	assert_false(rgaps__holds_fit(&f->lim, x, 2));
	/* "block" bounds nothing here: its publishers wait, as they wait for a cursor. */
	f->lim.overflow = RGAPS_OVERFLOW_BLOCK;
	assert_true(rgaps__holds_fit(&f->lim, x, 2));
	destroy(f);
}

/* Publish one message of size bytes that must go through at once (drop_oldest). */
static void publish_now(struct client *p, uint64_t size)
{
	assert_int_equal(publish(p, size), 0);
}

/*
 * An honest subscriber under drop_oldest holds what leaves room for one more
 * largest message: beyond, its take says -ENOBUFS for that stream (another
 * stream still gives), and its publisher never waits for it.
 */
static void test_holds_leave_room_under_drop_oldest(void **state)
{
	struct fixture *f = make_max(1 << 20, 256 << 10, 16, 0, RGAPS_OVERFLOW_DROP_OLDEST);
	struct client *s = sub_open(f, 0), *p = pub_open(f, 0), *p2;
	struct rgaps_sub_msg m[4], m2;
	uint64_t ctr;

	for (int n = 0; n < 4; n++)
		publish_now(p, 256 << 10);
	for (int n = 0; n < 3; n++)
		take_ok(s, &m[n]);
	/* Held at 0, 256 and 512 KiB: the fourth would leave no room. */
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m[3]), -ENOBUFS);
	p2 = pub_open(f, 1);
	publish_now(p2, 100);
	take_ok(s, &m2);
	assert_int_equal(m2.slot, 1);
	rgaps__sub_release(s->sub, m2.token);
	/* The publisher of the largest messages goes on: it never waits for us. */
	for (int n = 0; n < 20; n++)
		publish_now(p, 256 << 10);
	assert_int_equal(f->pubr[0]->c.full_waits, 0);
	assert_int_equal(f->pubr[0]->c.holds_ignored, 0);
	for (int n = 0; n < 3; n++) {
		assert_true(rgaps_pattern_check(m[n].data, m[n].size, &ctr) < 0);
		assert_int_equal(ctr, m[n].seq);
	}
	check_pub(p);
	assert_int_equal(rgaps__sub_release(s->sub, m[0].token), 0);
	take_ok(s, &m[3]); /* lapped meanwhile: the gap says what went */
	assert_true(m[3].gap > 0);
	for (int n = 1; n < 4; n++)
		rgaps__sub_release(s->sub, m[n].token);
	check_pub(p);
	client_close(p2);
	client_close(p);
	client_close(s);
	destroy(f);
}

/* A subscriber that writes holds of its own on messages it never took. */
static void forge_holds(struct fixture *f, uint32_t sub_slot, uint32_t pub_slot, uint64_t first)
{
	struct rgaps_sub_hold *h = rgaps__sub_holds(&f->lim, f->subr[sub_slot]);

	for (uint32_t k = 0; k < f->lim.max_holds; k++) {
		h[k].seq = first + k;
		h[k].gen = f->dir->pub_gen[pub_slot];
	}
	f->subr[sub_slot]->nholds = f->lim.max_holds;
}

/*
 * Forged holds on the next messages of a stream (a subscriber that takes
 * nothing): under drop_oldest its publisher ignores them and goes on, counted
 * and logged once, while an honest subscriber beside it verifies every
 * message; under "block" it waits for them, up to block_timeout_ms per
 * message, as it waits for a subscriber that stops reading.
 */
static void test_forged_holds_are_ignored(void **state)
{
	for (int pass = 0; pass < 2; pass++) {
		uint32_t policy = pass ? RGAPS_OVERFLOW_BLOCK : RGAPS_OVERFLOW_DROP_OLDEST;
		struct fixture *f = make_max(1 << 20, 256 << 10, 16, 0, policy);
		struct client *honest = sub_open(f, 0), *p = pub_open(f, 0);
		struct client *liar = sub_open(f, 1); /* its region is written here */
		struct rgaps_sub_msg m;
		int r = 0;

		publish_now(p, 100);
		take_ok(honest, &m);
		rgaps__sub_release(honest->sub, m.token);
		forge_holds(f, 1, 0, 1);
		for (int n = 0; n < 20 && !r; n++) {
			r = publish_t(p, 256 << 10, 50, NULL);
			if (r)
				break;
			take_ok(honest, &m);
			assert_int_equal(m.gap, 0);
			rgaps__sub_release(honest->sub, m.token);
		}
		if (policy == RGAPS_OVERFLOW_DROP_OLDEST) {
			assert_int_equal(r, 0);
			assert_int_equal(f->pubr[0]->c.holds_ignored, 1);
		} else {
			/* The liar's cursor never moved either: "block" waits, then says so. */
			assert_int_equal(r, -ETIMEDOUT);
			assert_int_equal(f->pubr[0]->c.holds_ignored, 0);
		}
		check_pub(p);
		client_close(p);
		client_close(liar);
		client_close(honest);
		destroy(f);
	}
}

/*
 * A subscriber that holds as much as it may and releases its oldest hold when
 * a take says -ENOBUFS, as fast as it can, while its publisher publishes
 * messages of every size under drop_oldest: the publisher never takes it for
 * a liar (its holds move between the publisher's two looks), never frees a
 * block it holds (checked at release), and never waits.
 */
static void test_honest_holds_are_never_ignored(void **state)
{
	struct fixture *f = make_max(1 << 20, 256 << 10, 16, 0, RGAPS_OVERFLOW_DROP_OLDEST);
	struct client *p;
	bool alive;
	pid_t child;
	int status, r = 0;

	fx_add_sub(f, 0);
	child = fork();
	if (child == 0) {
		struct client c = { .f = f, .slot = 0 };
		struct rgaps_topic_cbs cbs = { .sync = sub_sync, .arg = &c };
		struct rgaps_sub_msg held[4];
		uint32_t nheld = 0;

		if (rgaps__sub_create(f->hdr, &f->lim, f->subr[0], &cbs, &c.sub))
			_exit(3);
		sub_sync(&c);
		for (;;) {
			struct rgaps_sub_msg m;
			uint64_t ctr;
			int e = rgaps__sub_take(c.sub, 10, 0, &m);

			if (e == -ENOBUFS) { /* max_holds (4), or no more room: the oldest goes */
				if (held[0].size >= RGAPS_PATTERN_HDR &&
				    (rgaps_pattern_check(held[0].data, held[0].size, &ctr) >= 0 ||
				     ctr != held[0].seq))
					_exit(4);
				rgaps__sub_release(c.sub, held[0].token);
				memmove(held, held + 1, --nheld * sizeof(*held));
				continue;
			}
			if (!e && m.data)
				held[nheld++] = m;
		}
	}
	p = pub_open(f, 0);
	for (uint64_t i = 0; i < 1500 && !r; i++)
		r = publish(p, 1 + (i * 7919 * 33) % (256 << 10));
	alive = waitpid(child, &status, WNOHANG) == 0; /* it verified every release so far */
	if (alive) {
		kill(child, SIGKILL);
		assert_int_equal(waitpid(child, &status, 0), child);
	}
	if (!alive)
		fail_msg("the subscriber exited %d (4: a block it held was reused)",
			 WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
	assert_int_equal(r, 0);
	assert_int_equal(f->pubr[0]->c.holds_ignored, 0);
	assert_int_equal(f->pubr[0]->c.full_waits, 0);
	fx_remove_sub(f, 0);
	rgaps__pub_reclaim(p->pub);
	check_pub(p);
	client_close(p);
	destroy(f);
}

static void test_loans(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *p = pub_open(f, 0);
	struct rgaps_pub_commit cm = { .ts_ns = 1 };
	uint32_t t1, t2, t3;
	uint64_t off;

	assert_int_equal(rgaps__pub_loan(p->pub, 0, 0, &t1, &off), -EINVAL);
	assert_int_equal(rgaps__pub_loan(p->pub, (1 << 20) + 1, 0, &t1, &off), -EMSGSIZE);
	assert_int_equal(rgaps__pub_loan(p->pub, 100, 0, &t1, &off), 0);
	assert_int_equal(rgaps__pub_loan(p->pub, 100, 0, &t2, &off), 0);
	assert_int_equal(rgaps__pub_loan(p->pub, 100, 0, &t3, &off), -ENOBUFS);
	assert_int_equal(rgaps__pub_cancel(p->pub, t2), 0);
	assert_int_equal(rgaps__pub_cancel(p->pub, t2), -EINVAL);
	/* Larger than loaned: refused, and the loan is gone. */
	assert_int_equal(rgaps__pub_commit(p->pub, t1, 1000, &cm, 0, false, NULL), -EINVAL);
	assert_int_equal(rgaps__pub_commit(p->pub, t1, 100, &cm, 0, false, NULL), -EINVAL);
	check_pub(p);
	assert_int_equal(pool_used(p), 0);
	client_close(p);
	destroy(f);
}

static void test_attributes_and_origin(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *s = sub_open(f, 0), *p = pub_open(f, 0);
	uint8_t attrs[RGAPS_ATTR_MAX];
	struct rgaps_pub_commit cm = { .ts_ns = 7, .attrs = attrs, .attr_len = sizeof(attrs) };
	struct rgaps_sub_msg m;
	uint32_t tok;
	uint64_t off;

	for (size_t i = 0; i < sizeof(attrs); i++)
		attrs[i] = (uint8_t)(i * 31);
	assert_int_equal(rgaps__pub_loan(p->pub, 64, 0, &tok, &off), 0);
	assert_int_equal(rgaps__pub_commit(p->pub, tok, 64, &cm, 0, false, NULL), 0);
	cm.attr_len = 3;
	cm.origin_stream = 99;
	cm.origin_seq = 12345;
	cm.flags = RGAPS_ENTRY_REMOTE;
	assert_int_equal(rgaps__pub_loan(p->pub, 64, 0, &tok, &off), 0);
	assert_int_equal(rgaps__pub_commit(p->pub, tok, 64, &cm, 0, false, NULL), 0);
	cm.attr_len = RGAPS_ATTR_MAX + 1;
	assert_int_equal(rgaps__pub_loan(p->pub, 64, 0, &tok, &off), 0);
	assert_int_equal(rgaps__pub_commit(p->pub, tok, 64, &cm, 0, false, NULL), -EINVAL);

	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), 0);
	assert_int_equal(m.attr_len, RGAPS_ATTR_MAX);
	assert_memory_equal(m.attrs, attrs, RGAPS_ATTR_MAX);
	assert_int_equal(m.origin_stream, m.stream);
	assert_int_equal(m.origin_seq, 0);
	assert_int_equal(m.ts_ns, 7);
	rgaps__sub_release(s->sub, m.token);
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), 0);
	assert_int_equal(m.attr_len, 3);
	assert_memory_equal(m.attrs, attrs, 3);
	assert_int_equal(m.origin_stream, 99);
	assert_int_equal(m.origin_seq, 12345);
	assert_true(m.flags & RGAPS_ENTRY_REMOTE);
	rgaps__sub_release(s->sub, m.token);
	check_pub(p);
	client_close(p);
	client_close(s);
	destroy(f);
}

/* Losses with no later message: a gap-only entry, and a stream that went away unread. */
static void test_gap_only_messages(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *s = sub_open(f, 0), *p = pub_open(f, 0);
	struct rgaps_sub_msg m;

	assert_int_equal(rgaps__pub_gap(p->pub, 0, 1), -EINVAL);
	assert_int_equal(rgaps__pub_gap(p->pub, 5, 1), 0);
	assert_int_equal(rgaps__pub_gap_flags(p->pub, 3, 1, RGAPS_ENTRY_FENCE), -EINVAL);
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), 0);
	assert_true(m.flags & RGAPS_ENTRY_GAP_ONLY);
	assert_int_equal(m.gap, 5);
	assert_null(m.data);
	assert_int_equal(m.size, 0);
	assert_int_equal(m.token, UINT32_MAX);
	assert_false(m.flags & RGAPS_ENTRY_REMOTE);
	/* A loss on the way from a peer says so: a forwarder never sends it on. */
	assert_int_equal(rgaps__pub_gap_flags(p->pub, 4, 1, RGAPS_ENTRY_REMOTE), 0);
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), 0);
	assert_int_equal(m.flags, RGAPS_ENTRY_GAP_ONLY | RGAPS_ENTRY_REMOTE);
	assert_int_equal(m.gap, 4);
	check_pub(p);

	/* Three published, never taken; then the stream is removed. */
	for (int n = 0; n < 3; n++)
		assert_int_equal(publish(p, 100), 0);
	fx_remove_pub(f, 0);
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), 0);
	assert_true(m.flags & RGAPS_ENTRY_GAP_ONLY);
	assert_int_equal(m.gap, 3);
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), -EAGAIN);
	client_close(p);
	client_close(s);
	destroy(f);
}

/* Publish one message of size bytes that follows gap messages lost upstream (a relay). */
static void publish_after_loss(struct client *c, uint64_t size, uint32_t gap)
{
	struct rgaps_pub_commit cm = { .ts_ns = 1, .gap = gap };
	struct rgaps_pub_state st;
	uint32_t tok;
	uint64_t off;

	assert_int_equal(rgaps__pub_loan(c->pub, size, 0, &tok, &off), 0);
	rgaps__pub_get_state(c->pub, &st);
	rgaps_pattern_fill(c->f->pool[c->slot] + off, size, st.head); /* take_ok checks it */
	assert_int_equal(rgaps__pub_commit(c->pub, tok, size, &cm, 0, false, NULL), 0);
}

/*
 * A subscriber lapped past entries that carried losses (a relay's stream:
 * messages with gaps, gap-only entries) reports those losses too, and counts a
 * gap-only entry it skipped as its gap, not as a message: what it receives
 * plus what it is told lost is what the stream stood for. Likewise for the
 * entries a departing stream leaves untaken.
 */
static void test_lapped_reader_counts_what_it_skipped(void **state)
{
	struct fixture *f = make(1 << 20, 4, 0, RGAPS_OVERFLOW_DROP_OLDEST);
	struct client *s = sub_open(f, 0), *p = pub_open(f, 0);
	static const uint32_t gaps[] = { 2, 0, 1, 0, 3, 0, 0 }; /* messages 1..7 */
	struct rgaps_sub_msg m;
	uint64_t got = 0, told = 0;

	publish_after_loss(p, 100, 0);
	take_ok(s, &m);
	assert_int_equal(m.gap, 0);
	rgaps__sub_release(s->sub, m.token);
	got++;
	/* 1 (after 2 lost), a notice of 5 lost, 2, 3 (after 1), 4, 5 (after 3), 6, 7: the
	 * queue keeps the last 4, so the subscriber skips 1, the notice, 2 and 3. */
	publish_after_loss(p, 100, gaps[0]);
	assert_int_equal(rgaps__pub_gap(p->pub, 5, 1), 0);
	for (int k = 1; k < 7; k++)
		publish_after_loss(p, 100, gaps[k]);
	take_ok(s, &m);
	assert_int_equal(m.seq, 5); /* message 4 */
	assert_int_equal(m.gap, (1 + 2) + 5 + 1 + (1 + 1));
	got++, told += m.gap;
	rgaps__sub_release(s->sub, m.token);
	for (uint32_t want = 3; want != UINT32_MAX; want = want ? 0 : UINT32_MAX) {
		for (int k = 0; k < (want ? 1 : 2); k++) {
			take_ok(s, &m);
			assert_int_equal(m.gap, want);
			got++, told += m.gap;
			rgaps__sub_release(s->sub, m.token);
		}
	}
	assert_int_equal(got + told, 8 + 2 + 5 + 1 + 3);
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), -EAGAIN);

	/* Untaken when the stream goes: 8 (after 4 lost), a notice of 2, 9. */
	publish_after_loss(p, 100, 4);
	assert_int_equal(rgaps__pub_gap(p->pub, 2, 1), 0);
	publish_after_loss(p, 100, 0);
	fx_remove_pub(f, 0);
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), 0);
	assert_true(m.flags & RGAPS_ENTRY_GAP_ONLY);
	assert_int_equal(m.gap, (1 + 4) + 2 + 1);
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), -EAGAIN);
	client_close(p);
	client_close(s);
	destroy(f);
}

/*
 * A subscriber lapped in a drop_oldest stream whose next entry after the lap
 * is a loss notice (a gap-only entry, a relay's way to say messages were lost
 * upstream with no message behind them): the notice it lands on tells it
 * everything it skipped, the entries and what they carried, plus the
 * notice's own loss, which counts as a gap and not as a message.
 */
static void test_lapped_reader_lands_on_a_notice(void **state)
{
	struct fixture *f = make(1 << 20, 4, 0, RGAPS_OVERFLOW_DROP_OLDEST);
	struct client *s = sub_open(f, 0), *p = pub_open(f, 0);
	struct rgaps_sub_msg m;
	uint64_t got = 0, told = 0;

	publish_after_loss(p, 100, 0); /* 0: taken, so the reader knows the running count */
	take_ok(s, &m);
	rgaps__sub_release(s->sub, m.token);
	got++;
	/* 1 (after 2 lost), 2, 3 (after 1), a notice of 6 lost, 5, 6, 7: the queue keeps
	 * the last 4, so the reader skips 1..3 and lands exactly on the notice. */
	publish_after_loss(p, 100, 2);
	publish_after_loss(p, 100, 0);
	publish_after_loss(p, 100, 1);
	assert_int_equal(rgaps__pub_gap(p->pub, 6, 1), 0);
	for (int k = 0; k < 3; k++)
		publish_after_loss(p, 100, 0);
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), 0);
	assert_int_equal(m.seq, 4);
	assert_true(m.flags & RGAPS_ENTRY_GAP_ONLY);
	assert_int_equal(m.token, UINT32_MAX);
	assert_int_equal(m.gap, 3 + (2 + 0 + 1) + 6);
	assert_int_equal(f->subr[0]->c.drops, 3);
	told += m.gap;
	for (uint64_t want = 5; want <= 7; want++) {
		take_ok(s, &m);
		assert_int_equal(m.seq, want);
		assert_int_equal(m.gap, 0);
		rgaps__sub_release(s->sub, m.token);
		got++;
	}
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), -EAGAIN);
	/* What the stream stood for: 7 messages, 2 + 1 lost before them, 6 in the notice. */
	assert_int_equal(got + told, 7 + (2 + 1) + 6);
	client_close(p);
	client_close(s);
	destroy(f);
}

/*
 * The linker sends every rgaps__entry_read here (-Wl,--wrap, tests/unit/meson.build):
 * a test may run something just before the next one, that is between a subscriber's
 * read of a stream's head and its read of the entry there, where a loaded machine
 * may deschedule it for as long as it likes.
 */
int __real_rgaps__entry_read(const struct rgaps_topic_limits *lim, const struct rgaps_pub_region *r,
			    uint64_t seq, struct rgaps_topic_entry *e_p, char *why, size_t whylen);
int __wrap_rgaps__entry_read(const struct rgaps_topic_limits *lim, const struct rgaps_pub_region *r,
			    uint64_t seq, struct rgaps_topic_entry *e_p, char *why, size_t whylen);

static void (*before_entry_read)(struct client *);
static struct client *before_entry_read_arg;

int __wrap_rgaps__entry_read(const struct rgaps_topic_limits *lim, const struct rgaps_pub_region *r,
			    uint64_t seq, struct rgaps_topic_entry *e_p, char *why, size_t whylen)
{
	void (*fn)(struct client *) = before_entry_read;

	if (fn) {
		before_entry_read = NULL;
		fn(before_entry_read_arg);
	}
	return __real_rgaps__entry_read(lim, r, seq, e_p, why, whylen);
}

static void publish_ten(struct client *p)
{
	for (int k = 0; k < 10; k++)
		assert_int_equal(publish(p, 100), 0);
}

/*
 * A subscriber that read a stream's head, then looked away while its publisher
 * lapped it, finds the stream's tail ahead of the head it read: no lie, only a
 * stale head. (remote_stall on a loaded machine: the subscriber poisoned an honest
 * relay stream, skipped the rest of it and waited out its timeout.) A tail ahead
 * of the head as it is now still poisons.
 */
static void test_stale_head_is_no_lie(void **state)
{
	struct fixture *f = make(1 << 20, 4, 0, RGAPS_OVERFLOW_DROP_OLDEST);
	struct client *s = sub_open(f, 0), *p = pub_open(f, 0);
	struct rgaps_sub_msg m;

	assert_int_equal(publish(p, 100), 0); /* the subscriber reads head 1 */
	before_entry_read = publish_ten;      /* 1..10 meanwhile: head 11, tail 7 */
	before_entry_read_arg = p;
	take_ok(s, &m);
	assert_null(before_entry_read);
	assert_int_equal(m.seq, 7);
	assert_int_equal(m.gap, 7); /* 0..6, lapped */
	rgaps__sub_release(s->sub, m.token);
	for (uint64_t want = 8; want <= 10; want++) {
		take_ok(s, &m);
		assert_int_equal(m.seq, want);
		assert_int_equal(m.gap, 0);
		rgaps__sub_release(s->sub, m.token);
	}
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), -EAGAIN);
	assert_int_equal(f->subr[0]->c.errors, 0);

	/* The liar: message 11, then a tail past its head. */
	assert_int_equal(publish(p, 100), 0);
	__atomic_store_n(&f->pubr[0]->tail, 20, __ATOMIC_SEQ_CST);
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), -EAGAIN);
	assert_int_equal(f->subr[0]->c.errors, 1);
	client_close(p);
	client_close(s);
	destroy(f);
}

/* A departed publisher's stream drains up to its limit, then nothing more. */
static void test_departed_stream_drains(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *s = sub_open(f, 0), *p = pub_open(f, 0);
	struct rgaps_sub_msg m;

	for (int n = 0; n < 3; n++)
		assert_int_equal(publish(p, 100), 0);
	fx_pub_leaves(f, 0);
	/* A zombie keeps publishing after it left: never seen. */
	assert_int_equal(publish(p, 100), 0);
	for (uint64_t want = 0; want < 3; want++) {
		take_ok(s, &m);
		assert_int_equal(m.seq, want);
		rgaps__sub_release(s->sub, m.token);
	}
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), -EAGAIN);
	assert_int_equal(rgaps__sub_position(&f->lim, f->subr[0], 0, f->dir->pub_gen[0], 0, 3), 3);
	client_close(p);
	client_close(s);
	destroy(f);
}

static void test_publishers_round_robin(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *s = sub_open(f, 0), *p[3];
	uint64_t next[3] = { 0 }, streams[3];
	struct rgaps_sub_msg m;

	for (int i = 0; i < 3; i++) {
		p[i] = pub_open(f, (uint32_t)i);
		streams[i] = f->dir->pub_gen[i];
	}
	for (int n = 0; n < 5; n++)
		for (int i = 0; i < 3; i++)
			assert_int_equal(publish(p[i], 128), 0);
	for (int n = 0; n < 15; n++) {
		int i;

		take_ok(s, &m);
		for (i = 0; i < 3 && streams[i] != m.stream; i++)
			;
		assert_true(i < 3);
		assert_int_equal(m.slot, (uint32_t)i);
		assert_int_equal(m.seq, next[i]++);
		rgaps__sub_release(s->sub, m.token);
	}
	for (int i = 0; i < 3; i++) {
		assert_int_equal(next[i], 5);
		check_pub(p[i]);
		client_close(p[i]);
	}
	client_close(s);
	destroy(f);
}

/* ---------------------------------------------------------------- spoiled regions */

/* A spoiled stream is skipped, never read out of its pool; the others are served. */
static void test_spoiled_stream_is_poisoned(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *s = sub_open(f, 0), *bad = pub_open(f, 0), *good = pub_open(f, 1);
	struct rgaps_topic_entry *e = rgaps__pub_entries(&f->lim, f->pubr[0]);
	struct rgaps_sub_msg m;
	int got_good = 0;

	assert_int_equal(publish(bad, 100), 0);
	assert_int_equal(publish(good, 100), 0);
	e[0].off = UINT64_MAX - 64; /* the liar moves its message outside its pool */
	for (int n = 0; n < 4; n++) {
		int r = rgaps__sub_take(s->sub, 0, 0, &m);

		if (r == -EAGAIN)
			break;
		assert_int_equal(r, 0);
		assert_int_equal(m.stream, f->dir->pub_gen[1]);
		got_good++;
		rgaps__sub_release(s->sub, m.token);
	}
	assert_int_equal(got_good, 1);
	assert_int_equal(f->subr[0]->c.errors, 1);
	/* Poisoned for good, even once the entry looks sane again. */
	assert_int_equal(publish(bad, 100), 0);
	assert_int_equal(rgaps__sub_take(s->sub, 0, 0, &m), -EAGAIN);
	/* A head that lies about the number of messages: lapped, then poisoned by tail. */
	client_close(bad);
	client_close(good);
	client_close(s);
	destroy(f);
}

/* Random bytes in every region a client could write: nobody crashes, books stay right. */
static void test_random_regions(void **state)
{
	srand(777);
	for (int round = 0; round < 200; round++) {
		struct fixture *f = make(1 << 20, 8, 1, round & 1);
		struct client *s = sub_open(f, 0), *p = pub_open(f, 0);
		struct rgaps_sub_msg m;
		uint8_t *target = round % 3 == 0 ? (uint8_t *)f->subr[0] : (uint8_t *)f->pubr[0];
		size_t n = round % 3 == 0 ? f->lim.sub_region_size : f->lim.pub_region_size;

		for (int i = 0; i < 3; i++)
			publish(p, 100);
		for (size_t i = 0; i < n; i++)
			target[i] = (uint8_t)(round % 5 == 0 ? 0 : rand());
		/* The other side keeps working, within bounds. */
		for (int i = 0; i < 10; i++) {
			if (rgaps__sub_take(s->sub, 0, 0, &m) == 0) {
				assert_true(m.data == NULL ||
					    (m.data >= f->pool[0] &&
					     m.data + m.size <= f->pool[0] + f->lim.pool_size));
				rgaps__sub_release(s->sub, m.token);
			}
		}
		if (target == (uint8_t *)f->subr[0]) {
			for (int i = 0; i < 20; i++)
				publish_t(p, 100, 0, NULL);
			rgaps__pub_reclaim(p->pub);
			check_pub(p);
		}
		client_close(p);
		client_close(s);
		destroy(f);
	}
}

/* ---------------------------------------------------------------- wake-ups */

/* The forked child exited, with 0. */
static void child_ok(pid_t child)
{
	int status;

	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_blocked_subscriber_wakes(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *s = sub_open(f, 0), *p = pub_open(f, 0);
	struct rgaps_sub_msg m;
	pid_t child;

	child = fork();
	if (child == 0) {
		usleep(50 * 1000);
		_exit(publish(p, 128) == 0 ? 0 : 1);
	}
	/* No spin: this must be the futex wake-up. */
	assert_int_equal(rgaps__sub_take(s->sub, 2000, 0, &m), 0);
	assert_int_equal(m.size, 128);
	child_ok(child);
	client_close(p);
	client_close(s);
	destroy(f);
}

static void test_blocked_publisher_wakes(void **state)
{
	struct fixture *f = make(1 << 20, 2, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *s = sub_open(f, 0), *p = pub_open(f, 0);
	struct rgaps_sub_msg m;
	uint64_t t0;
	pid_t child;

	assert_int_equal(publish(p, 64), 0);
	assert_int_equal(publish(p, 64), 0);
	child = fork();
	if (child == 0) {
		struct client *cs = s;

		usleep(50 * 1000);
		if (rgaps__sub_take(cs->sub, 0, 0, &m))
			_exit(2);
		_exit(rgaps__sub_release(cs->sub, m.token) == 0 ? 0 : 1);
	}
	t0 = rgaps_now_ns(CLOCK_MONOTONIC);
	f->tc.block_timeout_ms = 5000;
	assert_int_equal(publish_t(p, 64, 5000, NULL), 0);
	/* Woken by the subscriber's progress word, long before the 200 ms slice. */
	assert_true(rgaps_now_ns(CLOCK_MONOTONIC) - t0 < 2ull * 1000 * 1000 * 1000);
	child_ok(child);
	client_close(p);
	client_close(s);
	destroy(f);
}

/* Wait (bounded) until a word of shared memory is non-zero. */
static void wait_nonzero(const uint32_t *word)
{
	for (int i = 0; i < 5000 && !__atomic_load_n(word, __ATOMIC_SEQ_CST); i++)
		usleep(1000);
	assert_int_not_equal(__atomic_load_n(word, __ATOMIC_SEQ_CST), 0);
}

/*
 * A publisher waiting for room names one subscriber and a target seq (here we
 * play that publisher, writing its region): only the take that brings that
 * subscriber's cursor to the target bumps its progress word, the word the
 * publisher sleeps on; the takes before and after it leave it alone, so a
 * batch of takes costs the publisher one wake-up.
 */
static void test_only_the_target_take_wakes_the_publisher(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *s = sub_open(f, 0), *p = pub_open(f, 0);
	struct rgaps_sub_msg m;
	uint32_t progress;

	for (int n = 0; n < 8; n++)
		assert_int_equal(publish(p, 64), 0);
	__atomic_store_n(&f->pubr[0]->space_target, 3, __ATOMIC_SEQ_CST);
	__atomic_store_n(&f->pubr[0]->space_waiting, 0 + 1, __ATOMIC_SEQ_CST);
	progress = __atomic_load_n(&f->subr[0]->progress, __ATOMIC_SEQ_CST);
	for (uint64_t seq = 0; seq < 5; seq++) {
		take_ok(s, &m);
		assert_int_equal(m.seq, seq);
		assert_int_equal(rgaps__sub_release(s->sub, m.token), 0);
		assert_int_equal(__atomic_load_n(&f->subr[0]->progress, __ATOMIC_SEQ_CST),
				 progress + (seq + 1 >= 3 ? 1 : 0));
	}
	__atomic_store_n(&f->pubr[0]->space_waiting, 0, __ATOMIC_SEQ_CST);
	client_close(p);
	client_close(s);
	destroy(f);
}

/*
 * A publisher blocked on a full queue waits for a quarter of it; a subscriber
 * that takes less and stops still lets the publish through (after one short
 * slice, it waits for one entry).
 */
static void test_subscriber_stopping_inside_a_batch(void **state)
{
	struct fixture *f = make(1 << 20, 16, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *s = sub_open(f, 0), *p = pub_open(f, 0);
	struct rgaps_sub_msg m;
	pid_t child;

	for (int n = 0; n < 16; n++)
		assert_int_equal(publish(p, 64), 0);
	child = fork();
	if (child == 0)
		_exit(publish_t(p, 64, 5000, NULL) == 0 ? 0 : 1);
	wait_nonzero(&f->pubr[0]->space_waiting);
	take_ok(s, &m); /* one of the four it waits for */
	assert_int_equal(rgaps__sub_release(s->sub, m.token), 0);
	child_ok(child);
	client_close(p);
	client_close(s);
	destroy(f);
}

/*
 * rgaps__pub_announce() marks the region while a message's copy runs and
 * wakes a sleeping subscriber early; the subscriber finds nothing yet, waits
 * on, and takes the message once it is committed. A cancel withdraws it.
 */
static void test_announced_message_is_taken(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *s = sub_open(f, 0), *p = pub_open(f, 0);
	struct rgaps_pub_commit cm = { .ts_ns = 1 };
	struct rgaps_sub_msg m;
	uint32_t tok;
	uint64_t off;
	pid_t child;

	assert_int_equal(rgaps__pub_loan(p->pub, 64, 0, &tok, &off), 0);
	rgaps__pub_announce(p->pub);
	assert_int_equal(__atomic_load_n(&f->pubr[0]->copying, __ATOMIC_SEQ_CST), 1);
	assert_int_equal(rgaps__pub_cancel(p->pub, tok), 0);
	assert_int_equal(__atomic_load_n(&f->pubr[0]->copying, __ATOMIC_SEQ_CST), 0);

	child = fork();
	if (child == 0) {
		if (rgaps__sub_take(s->sub, 5000, 20, &m) || m.size != 64 || m.seq != 0)
			_exit(1);
		_exit(0);
	}
	wait_nonzero(&f->subr[0]->sleeping);
	assert_int_equal(rgaps__pub_loan(p->pub, 64, 0, &tok, &off), 0);
	rgaps__pub_announce(p->pub);
	usleep(1000); /* the subscriber wakes to nothing, then waits on */
	assert_int_equal(rgaps__pub_commit(p->pub, tok, 64, &cm, 0, false, NULL), 0);
	assert_int_equal(__atomic_load_n(&f->pubr[0]->copying, __ATOMIC_SEQ_CST), 0);
	child_ok(child);
	check_pub(p);
	client_close(p);
	client_close(s);
	destroy(f);
}

static void test_close_ends_waits(void **state)
{
	struct fixture *f = make(1 << 20, 8, 0, RGAPS_OVERFLOW_BLOCK);
	struct client *s = sub_open(f, 0), *p = pub_open(f, 0);
	struct rgaps_sub_msg m;
	pid_t child = fork();
	int status;

	if (child == 0) {
		usleep(50 * 1000);
		rgaps__topic_close(f->hdr);
		_exit(0);
	}
	assert_int_equal(rgaps__sub_take(s->sub, 5000, 0, &m), -ENOTCONN);
	waitpid(child, &status, 0);
	assert_int_equal(publish(p, 10), -ENOTCONN);
	client_close(p);
	client_close(s);
	destroy(f);
}

/* ---------------------------------------------------------------- crash safety */

/* A subscriber child that takes, verifies and releases as fast as it can. */
static void subscriber_loop(struct fixture *f, uint32_t slot)
{
	struct client *s;
	struct rgaps_topic_cbs cbs = { .sync = sub_sync };

	s = calloc(1, sizeof(*s));
	s->f = f;
	s->slot = slot;
	cbs.arg = s;
	if (rgaps__sub_create(f->hdr, &f->lim, f->subr[slot], &cbs, &s->sub))
		_exit(3);
	sub_sync(s);
	for (;;) {
		struct rgaps_sub_msg m;
		uint64_t ctr;

		if (rgaps__sub_take(s->sub, 10, 0, &m))
			continue;
		if (m.data && (rgaps_pattern_check(m.data, m.size, &ctr) >= 0 || ctr != m.seq))
			_exit(4); /* wrong bytes: the parent sees exit status 4 */
		if (rand() % 4)
			rgaps__sub_release(s->sub, m.token);
	}
}

struct pub_thread {
	struct client *p;
	int stop; /* atomic */
	uint64_t published;
};

static void *publisher_thread(void *arg)
{
	struct pub_thread *pt = arg;

	for (uint64_t i = 0; !__atomic_load_n(&pt->stop, __ATOMIC_RELAXED); i++)
		if (publish_t(pt->p, 64 + (i * 7919) % 8192, 5, NULL) == 0)
			pt->published++;
	return NULL;
}

/*
 * Subscribers killed at random points - inside a take, between the hold and the
 * cursor, while releasing - while a publisher publishes without pause. Each
 * round rgapsd's part (here, the test) removes the dead; the publisher's books
 * must then account for every block, and with nobody left its pool must drain.
 * Subscribers also check every byte they read (exit 4 on a mismatch).
 */
static void test_sigkill_subscribers_anywhere(void **state)
{
	struct fixture *f = make(1 << 20, 16, 0, RGAPS_OVERFLOW_DROP_OLDEST);
	struct client *p = pub_open(f, 0);
	struct pub_thread pt = { .p = p };
	pthread_t th;

	srand(4242);
	for (int round = 0; round < 150; round++) {
		pid_t kids[2];
		int status;

		for (uint32_t k = 0; k < 2; k++) {
			fx_add_sub(f, k);
			kids[k] = fork();
			if (kids[k] == 0)
				subscriber_loop(f, k);
		}
		__atomic_store_n(&pt.stop, 0, __ATOMIC_RELAXED);
		pthread_create(&th, NULL, publisher_thread, &pt);
		usleep(200 + (useconds_t)(rand() % 3000));
		kill(kids[0], SIGKILL);
		usleep((useconds_t)(rand() % 300));
		kill(kids[1], SIGKILL);
		for (int k = 0; k < 2; k++) {
			assert_int_equal(waitpid(kids[k], &status, 0), kids[k]);
			assert_true(WIFSIGNALED(status)); /* never exited on a bad byte */
		}
		__atomic_store_n(&pt.stop, 1, __ATOMIC_RELAXED);
		pthread_join(th, NULL);
		/* rgapsd discards what the dead owned... */
		fx_remove_sub(f, 0);
		fx_remove_sub(f, 1);
		/* ...and the publisher's next operation frees what they held. */
		assert_int_equal(publish(p, 64), 0);
		check_pub(p);
		assert_int_equal(pool_used(p), 0);
	}
	assert_true(pt.published > 1000);
	print_message("  %llu messages published while 300 subscribers were killed\n",
		      (unsigned long long)pt.published);
	client_close(p);
	destroy(f);
}

/*
 * Publishers killed at random points - half-way through writing an entry,
 * between the entry and head - while a subscriber reads them. The survivor must
 * never see wrong bytes, nor wait for anything the dead one held: its stream
 * drains up to where it stopped, then goes.
 */
static void test_sigkill_publishers_anywhere(void **state)
{
	struct fixture *f = make(1 << 20, 16, 0, RGAPS_OVERFLOW_DROP_OLDEST);
	struct client *s = sub_open(f, 0);
	uint64_t taken = 0;

	srand(99);
	for (int round = 0; round < 100; round++) {
		struct client *p = pub_open(f, (uint32_t)(round % MAXP));
		uint32_t slot = p->slot;
		struct rgaps_sub_msg m;
		pid_t kid = fork();
		int status;

		if (kid == 0) {
			for (;;)
				publish_t(p, 64 + (uint64_t)(rand() % 4096), 5, NULL);
		}
		for (int i = 0; i < 50; i++) {
			if (rgaps__sub_take(s->sub, 1, 0, &m) == 0) {
				uint64_t ctr;

				if (m.data) {
					assert_true(rgaps_pattern_check(m.data, m.size, &ctr) < 0);
					assert_int_equal(ctr, m.seq);
					taken++;
				}
				rgaps__sub_release(s->sub, m.token);
			}
		}
		kill(kid, SIGKILL);
		assert_int_equal(waitpid(kid, &status, 0), kid);
		fx_pub_leaves(f, slot);
		/* Drain what it published, every byte checked, then it is gone. */
		while (rgaps__sub_take(s->sub, 0, 0, &m) == 0) {
			uint64_t ctr;

			if (m.data) {
				assert_true(rgaps_pattern_check(m.data, m.size, &ctr) < 0);
				assert_int_equal(ctr, m.seq);
				taken++;
			}
			rgaps__sub_release(s->sub, m.token);
		}
		fx_remove_pub(f, slot);
		client_close(p);
	}
	assert_true(taken > 100);
	print_message("  %llu messages taken from 100 publishers killed mid-stream\n",
		      (unsigned long long)taken);
	client_close(s);
	destroy(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_limits_bounds),
		cmocka_unit_test(test_hdr_validate_rejects),
		cmocka_unit_test(test_entry_read_rejects),
		cmocka_unit_test(test_snapshots_clamp),
		cmocka_unit_test(test_fanout_and_reclaim),
		cmocka_unit_test(test_no_subscribers_retires_at_once),
		cmocka_unit_test(test_block_policy_times_out),
		cmocka_unit_test(test_drop_oldest_counts_gaps),
		cmocka_unit_test(test_hold_protects_block),
		cmocka_unit_test(test_fenced_blocks_wait_for_their_fence),
		cmocka_unit_test(test_unfinished_copy_is_passed_over),
		cmocka_unit_test(test_copy_that_never_ends_is_lost),
		cmocka_unit_test(test_history_for_late_joiner),
		cmocka_unit_test(test_hold_limit),
		cmocka_unit_test(test_holds_fit_rule),
		cmocka_unit_test(test_holds_leave_room_under_drop_oldest),
		cmocka_unit_test(test_forged_holds_are_ignored),
		cmocka_unit_test(test_honest_holds_are_never_ignored),
		cmocka_unit_test(test_loans),
		cmocka_unit_test(test_attributes_and_origin),
		cmocka_unit_test(test_gap_only_messages),
		cmocka_unit_test(test_lapped_reader_counts_what_it_skipped),
		cmocka_unit_test(test_lapped_reader_lands_on_a_notice),
		cmocka_unit_test(test_stale_head_is_no_lie),
		cmocka_unit_test(test_departed_stream_drains),
		cmocka_unit_test(test_publishers_round_robin),
		cmocka_unit_test(test_spoiled_stream_is_poisoned),
		cmocka_unit_test(test_random_regions),
		cmocka_unit_test(test_blocked_subscriber_wakes),
		cmocka_unit_test(test_blocked_publisher_wakes),
		cmocka_unit_test(test_only_the_target_take_wakes_the_publisher),
		cmocka_unit_test(test_subscriber_stopping_inside_a_batch),
		cmocka_unit_test(test_announced_message_is_taken),
		cmocka_unit_test(test_close_ends_waits),
		cmocka_unit_test(test_stopped_subscriber_keeps_holds_only),
		cmocka_unit_test(test_sigkill_subscribers_anywhere),
		cmocka_unit_test(test_sigkill_publishers_anywhere),
	};

	rgaps__log_level = RGAPS_LOG_ERROR;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
