/*
 * Tests of paged replies: the writer (src/daemon/pages.c) and the merge
 * (tools/lib/page_merge.c) together. A reply with small and large members,
 * a keyed array of elements of every size (some far larger than a page,
 * with nested arrays) is written page by page under several limits; every
 * page must be valid JSON within its limit, and the pages merged in order
 * must equal the reply written whole. Bad cursors and pieces that cannot be
 * split are refused with an error, never cut.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "page_merge.h"
#include "pages.h"

#define NELEMS 60

struct src {
	int nelems;
	int gone; /* an element removed between pages: -1 none */
	size_t big_scalar; /* > 0: "daemon" holds a string this long */
};

static cJSON *make_elem(int i)
{
	cJSON *o = cJSON_CreateObject(), *slots, *cfg, *ids;
	char name[16];
	int nslots = (i % 7 == 3) ? 400 : (i % 5); /* a few far larger than small pages */

	snprintf(name, sizeof(name), "t%04d", i);
	cJSON_AddStringToObject(o, "name", name);
	cJSON_AddNumberToObject(o, "published", i * 1000.0);
	slots = cJSON_AddArrayToObject(o, "subscriber_slots");
	for (int k = 0; k < nslots; k++) {
		cJSON *s = cJSON_CreateObject();

		cJSON_AddNumberToObject(s, "slot", k);
		cJSON_AddNumberToObject(s, "pid", 1000 + k);
		cJSON_AddStringToObject(s, "note", "some text to take room in the page");
		cJSON_AddItemToArray(slots, s);
	}
	cfg = cJSON_AddObjectToObject(o, "config");
	cJSON_AddStringToObject(cfg, "memory", "host");
	ids = cJSON_AddArrayToObject(cfg, "allowed_uids");
	for (int k = 0; k < (i % 3) * 10; k++)
		cJSON_AddItemToArray(ids, cJSON_CreateNumber(k));
	return o;
}

static cJSON *build_daemon(void *ctx)
{
	struct src *s = ctx;
	cJSON *o = cJSON_CreateObject();

	cJSON_AddNumberToObject(o, "uptime_s", 12.5);
	cJSON_AddStringToObject(o, "instance", "abc");
	if (s->big_scalar) {
		char *big = malloc(s->big_scalar + 1);

		memset(big, 'x', s->big_scalar);
		big[s->big_scalar] = '\0';
		cJSON_AddStringToObject(o, "huge", big);
		free(big);
	}
	return o;
}

static cJSON *build_peers(void *ctx)
{
	cJSON *p = cJSON_CreateObject(), *sessions = cJSON_AddArrayToObject(p, "sessions");

	cJSON_AddStringToObject(p, "listen", "127.0.0.1:7400");
	for (int i = 0; i < 3; i++) {
		cJSON *s = cJSON_CreateObject(), *subs = cJSON_AddArrayToObject(s, "subscribes");
		char n[32];

		snprintf(n, sizeof(n), "10.0.0.%d:7400", i);
		cJSON_AddStringToObject(s, "name", n);
		for (int k = 0; k < (i == 1 ? 3000 : 5); k++) {
			snprintf(n, sizeof(n), "topic-%d", k);
			cJSON_AddItemToArray(subs, cJSON_CreateString(n));
		}
		cJSON_AddBoolToObject(s, "up", 1);
		cJSON_AddItemToArray(sessions, s);
	}
	cJSON_AddNumberToObject(p, "accepted", 3);
	return p;
}

static cJSON *next_elem(void *ctx, const char *key, bool inclusive, char *key_out)
{
	struct src *s = ctx;
	int i = 0;

	if (key) {
		i = atoi(key + 1);
		if (!inclusive)
			i++;
	}
	if (i == s->gone)
		i++;
	if (i >= s->nelems)
		return NULL;
	snprintf(key_out, RGAPSD_PAGE_KEY_MAX, "t%04d", i);
	return make_elem(i);
}

static const struct rgapsd_page_member members[] = {
	{ .name = "daemon", .build = build_daemon },
	{ .name = "peers", .build = build_peers },
	{ .name = "topics", .next = next_elem },
};

/* The reply as one object, as a client would have it with no limit at all. */
static cJSON *whole(struct src *s)
{
	cJSON *r = cJSON_CreateObject(), *arr;
	char key[RGAPSD_PAGE_KEY_MAX];
	cJSON *e;

	cJSON_AddItemToObject(r, "daemon", build_daemon(s));
	cJSON_AddItemToObject(r, "peers", build_peers(s));
	arr = cJSON_AddArrayToObject(r, "topics");
	for (e = next_elem(s, NULL, true, key); e; e = next_elem(s, key, false, key))
		cJSON_AddItemToArray(arr, e);
	return r;
}

/* Every page of the reply under limit, merged; the number of pages in *npages. */
static cJSON *paged(struct src *s, size_t limit, int *npages)
{
	cJSON *acc = cJSON_CreateObject(), *id = cJSON_CreateString("req-7");
	char cursor[RGAPSD_CURSOR_MAX] = "", err[256];

	*npages = 0;
	for (;;) {
		cJSON *page, *next, *pid;
		size_t len;
		char *text;
		int rc;

		rc = rgapsd_page_write(members, 3, s, cursor, id, limit, &text, &len, err,
				       sizeof(err));
		if (rc)
			fail_msg("page %d (cursor '%s'): %d: %s", *npages, cursor, rc, err);
		assert_int_equal(strlen(text), len);
		if (len > limit)
			fail_msg("page %d: %zu bytes over the limit of %zu", *npages, len, limit);
		page = cJSON_Parse(text);
		if (!page)
			fail_msg("page %d is not JSON: %.200s", *npages, text);
		free(text);
		assert_true(cJSON_IsTrue(cJSON_GetObjectItem(page, "ok")));
		pid = cJSON_GetObjectItem(page, "id");
		assert_true(cJSON_IsString(pid) && strcmp(pid->valuestring, "req-7") == 0);
		next = cJSON_GetObjectItem(page, "next");
		if (next) {
			assert_true(cJSON_IsString(next));
			assert_true(strcmp(next->valuestring, cursor) != 0); /* progress */
			snprintf(cursor, sizeof(cursor), "%s", next->valuestring);
		}
		tool_page_merge(acc, page);
		cJSON_Delete(page);
		(*npages)++;
		if (!next)
			break;
		if (*npages > 100000)
			fail_msg("no end after 100000 pages");
	}
	cJSON_Delete(id);
	return acc;
}

static void check_limit(size_t limit, int min_pages)
{
	struct src s = { .nelems = NELEMS, .gone = -1 };
	cJSON *want = whole(&s), *got;
	int npages;

	got = paged(&s, limit, &npages);
	if (!cJSON_Compare(want, got, 1)) {
		char *a = cJSON_PrintUnformatted(want), *b = cJSON_PrintUnformatted(got);

		fail_msg("limit %zu: merged pages differ from the whole reply\nwant %.300s\ngot  %.300s",
			 limit, a, b);
	}
	if (npages < min_pages)
		fail_msg("limit %zu: only %d pages", limit, npages);
	print_message("limit %zu: %d pages\n", limit, npages);
	cJSON_Delete(want);
	cJSON_Delete(got);
}

static void test_small_pages(void **state)
{
	check_limit(1500, 100);
}

static void test_medium_pages(void **state)
{
	check_limit(8192, 10);
}

static void test_frame_pages(void **state)
{
	check_limit(65536, 2);
}

/* Everything fits: one page, no "next". */
static void test_one_page(void **state)
{
	struct src s = { .nelems = 2, .gone = -1 };
	char *text, err[128];
	size_t len;
	cJSON *p;

	assert_int_equal(rgapsd_page_write(members, 1, &s, NULL, NULL, 65536, &text, &len, err,
					   sizeof(err)),
			 0);
	p = cJSON_Parse(text);
	assert_non_null(p);
	assert_null(cJSON_GetObjectItem(p, "next"));
	assert_null(cJSON_GetObjectItem(p, "id"));
	assert_non_null(cJSON_GetObjectItem(p, "daemon"));
	cJSON_Delete(p);
	free(text);
}

/* A topic removed between two pages: the next page goes on after it, nothing breaks. */
static void test_element_gone(void **state)
{
	struct src s = { .nelems = NELEMS, .gone = -1 };
	char cursor[RGAPSD_CURSOR_MAX] = "", err[256], *text;
	bool saw_gap = false;
	size_t len;

	for (int n = 0; n < 1000; n++) {
		cJSON *page, *next;

		assert_int_equal(rgapsd_page_write(members, 3, &s, cursor, NULL, 1500, &text, &len,
						   err, sizeof(err)),
				 0);
		page = cJSON_Parse(text);
		free(text);
		assert_non_null(page);
		next = cJSON_GetObjectItem(page, "next");
		if (!next) {
			cJSON_Delete(page);
			break;
		}
		snprintf(cursor, sizeof(cursor), "%s", next->valuestring);
		/* Remove the element the cursor names (inside or at it). */
		if (!saw_gap && strstr(cursor, "/kt0010")) {
			s.gone = 10;
			saw_gap = true;
		}
		cJSON_Delete(page);
	}
	assert_true(saw_gap);
}

static void test_bad_cursors(void **state)
{
	static const char *const bad[] = {
		"x", "1x", "1/", "1/m", "1/kt0001", "1/i3", "1/mtopics/i", "1/mtopics/i01",
		"1/mtopics/i99999999", "1/mtopics/q1", "1/mto pics", "1/mtopics//kt1",
		"1/mnosuch", "1/mdaemon/mx/mx/mx/mx/mx/mx/mx/mx", "2/mtopics",
		"1/mtopics/kt0001/msubscriber_slots/i1/mx/mx/mx/mx/mx",
	};
	struct src s = { .nelems = NELEMS, .gone = -1 };
	char err[256], *text = NULL;
	size_t len;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = rgapsd_page_write(members, 3, &s, bad[i], NULL, 4096, &text, &len, err,
					   sizeof(err));

		if (rc != -EINVAL)
			fail_msg("cursor '%s': %d, want -EINVAL", bad[i], rc);
		assert_true(strstr(err, "cursor") != NULL);
	}
	/* The topics array is keyed: an index there is refused, a key for a topic gone is fine. */
	assert_int_equal(rgapsd_page_write(members, 3, &s, "1/mtopics/i2", NULL, 4096, &text, &len,
					   err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(rgapsd_page_write(members, 3, &s, "1/mtopics/kzzz", NULL, 4096, &text,
					   &len, err, sizeof(err)),
			 0);
	free(text);
}

/* A string larger than a page cannot be split: an error, never a cut or an endless loop. */
static void test_unsplittable(void **state)
{
	struct src s = { .nelems = 3, .gone = -1, .big_scalar = 5000 };
	char cursor[RGAPSD_CURSOR_MAX] = "", err[256];
	int rc = 0, n;

	/* The pieces before it go out; the page that reaches it fails. */
	for (n = 0; n < 10; n++) {
		char *text = NULL;
		cJSON *page, *next;
		size_t len;

		rc = rgapsd_page_write(members, 3, &s, cursor, NULL, 4096, &text, &len, err,
				       sizeof(err));
		if (rc) {
			assert_null(text);
			break;
		}
		page = cJSON_Parse(text);
		free(text);
		next = cJSON_GetObjectItem(page, "next");
		assert_non_null(next);
		snprintf(cursor, sizeof(cursor), "%s", next->valuestring);
		cJSON_Delete(page);
	}
	assert_int_equal(rc, -EMSGSIZE);
	assert_true(strstr(err, "larger than a frame") != NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_small_pages),
		cmocka_unit_test(test_medium_pages),
		cmocka_unit_test(test_frame_pages),
		cmocka_unit_test(test_one_page),
		cmocka_unit_test(test_element_gone),
		cmocka_unit_test(test_bad_cursors),
		cmocka_unit_test(test_unsplittable),
	};

	return cmocka_run_group_tests_name("pages", tests, NULL, NULL);
}
