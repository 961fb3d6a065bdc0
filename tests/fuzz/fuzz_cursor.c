/*
 * libFuzzer target for the cursor of paged replies (src/daemon/pages.c): the
 * "cursor" of a topics or stats request comes from any local client. The
 * input is the cursor; the reply it pages holds a small member, a member with
 * nested arrays, and a keyed array of elements of several sizes, under a
 * small page limit so every depth is cut. A cursor is refused (-EINVAL) or
 * yields one page: valid JSON, within the limit, with a "next" only when it
 * stopped, and that "next" itself parses back.
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Isrc/common -Isrc/daemon \
 *         src/daemon/pages.c tests/fuzz/fuzz_cursor.c -lcjson -o fuzz_cursor
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pages.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LIMIT 2048
#define NELEMS 12

static cJSON *build_small(void *ctx)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddNumberToObject(o, "uptime_s", 1.5);
	return o;
}

static cJSON *build_nested(void *ctx)
{
	cJSON *o = cJSON_CreateObject(), *s = cJSON_AddArrayToObject(o, "sessions");

	for (int i = 0; i < 3; i++) {
		cJSON *e = cJSON_CreateObject(), *subs = cJSON_AddArrayToObject(e, "subscribes");

		cJSON_AddNumberToObject(e, "i", i);
		for (int k = 0; k < 150 * i; k++)
			cJSON_AddItemToArray(subs, cJSON_CreateString("some-topic-name"));
		cJSON_AddItemToArray(s, e);
	}
	return o;
}

static cJSON *next_elem(void *ctx, const char *key, bool inclusive, char *key_out)
{
	int i = 0;
	cJSON *o, *slots;

	if (key) {
		/* Keys are "e00".."e11"; any other key sorts as strcmp says. */
		for (i = 0; i < NELEMS; i++) {
			char k[8];
			int c;

			snprintf(k, sizeof(k), "e%02d", i);
			c = strcmp(k, key);
			if (c > 0 || (c == 0 && inclusive))
				break;
		}
	}
	if (i >= NELEMS)
		return NULL;
	snprintf(key_out, RGAPSD_PAGE_KEY_MAX, "e%02d", i);
	o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "name", key_out);
	slots = cJSON_AddArrayToObject(o, "slots");
	for (int k = 0; k < (i % 4) * 40; k++) {
		cJSON *s = cJSON_CreateObject();

		cJSON_AddNumberToObject(s, "slot", k);
		cJSON_AddItemToArray(slots, s);
	}
	return o;
}

static const struct rgapsd_page_member members[] = {
	{ .name = "daemon", .build = build_small },
	{ .name = "peers", .build = build_nested },
	{ .name = "topics", .next = next_elem },
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *cursor = malloc(size + 1), err[256], *text = NULL;
	size_t len = 0;
	cJSON *page;
	int rc;

	if (!cursor)
		return 0;
	memcpy(cursor, data, size);
	cursor[size] = '\0';
	rc = rgapsd_page_write(members, 3, NULL, cursor, NULL, LIMIT, &text, &len, err,
			       sizeof(err));
	free(cursor);
	if (rc) {
		if (rc != -EINVAL || text)
			abort();
		return 0;
	}
	if (!text || len > LIMIT || strlen(text) != len)
		abort();
	page = cJSON_ParseWithLength(text, len);
	if (!page)
		abort();
	{
		const cJSON *next = cJSON_GetObjectItemCaseSensitive(page, "next");
		char *t2 = NULL;
		size_t l2;

		/* A cursor rgapsd made is one it takes back. */
		if (next && (!cJSON_IsString(next) ||
			     rgapsd_page_write(members, 3, NULL, next->valuestring, NULL, LIMIT, &t2,
					       &l2, err, sizeof(err)) != 0))
			abort();
		free(t2);
	}
	cJSON_Delete(page);
	free(text);
	return 0;
}
