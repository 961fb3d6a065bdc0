/*
 * Fetching a paged reply (paged.h): request, merge, follow "next" until a
 * page has none. Each page is its own rgaps_query() (one connection), so a
 * reply of hundreds of pages never holds the daemon's attention for long.
 */
#include "paged.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "page_merge.h"
#include "rgaps/rgaps.h"

/* The error message of a refused request, else the words for its errno. */
static void query_error(const char *reply, int r, char *err, size_t errlen)
{
	cJSON *j = reply ? cJSON_Parse(reply) : NULL;
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(j, "error"), "message");

	snprintf(err, errlen, "%s", cJSON_IsString(m) ? m->valuestring : rgaps_strerror(r));
	cJSON_Delete(j);
}

int tool_query(const char *type, const char *topic, cJSON **reply_p, char *err,
		     size_t errlen)
{
	cJSON *acc = cJSON_CreateObject();
	char *cursor = NULL;
	int r = 0;

	cJSON_AddTrueToObject(acc, "ok");
	for (long pages = 0;; pages++) {
		cJSON *req = cJSON_CreateObject(), *page;
		const cJSON *next;
		char *text, *reply = NULL;

		if (pages == RGAPS_TOOL_MAX_PAGES) {
			snprintf(err, errlen, "no end after %d pages", RGAPS_TOOL_MAX_PAGES);
			r = -EPROTO;
			break;
		}
		cJSON_AddStringToObject(req, "type", type);
		if (topic)
			cJSON_AddStringToObject(req, "topic", topic);
		if (cursor)
			cJSON_AddStringToObject(req, "cursor", cursor);
		text = cJSON_PrintUnformatted(req);
		cJSON_Delete(req);
		if (!text) {
			r = -ENOMEM;
			snprintf(err, errlen, "out of memory");
			break;
		}
		r = rgaps_query(text, &reply);
		free(text);
		if (r) {
			query_error(reply, r, err, errlen);
			free(reply);
			break;
		}
		page = cJSON_Parse(reply);
		free(reply);
		if (!cJSON_IsObject(page)) {
			cJSON_Delete(page);
			snprintf(err, errlen, "unreadable reply from rgapsd");
			r = -EPROTO;
			break;
		}
		next = cJSON_GetObjectItemCaseSensitive(page, "next");
		if (next && (!cJSON_IsString(next) || (cursor && !strcmp(cursor, next->valuestring)))) {
			cJSON_Delete(page);
			snprintf(err, errlen, "rgapsd's pages do not advance");
			r = -EPROTO;
			break;
		}
		free(cursor);
		cursor = next ? strdup(next->valuestring) : NULL;
		tool_page_merge(acc, page);
		cJSON_Delete(page);
		if (!next)
			break;
		if (!cursor) {
			snprintf(err, errlen, "out of memory");
			r = -ENOMEM;
			break;
		}
	}
	free(cursor);
	if (r) {
		cJSON_Delete(acc);
		return r;
	}
	*reply_p = acc;
	return 0;
}
