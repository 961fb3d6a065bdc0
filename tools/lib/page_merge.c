/*
 * Merging the pages of a paged reply (page_merge.h). cJSON appends to an
 * array in constant time (the first element's prev is the last), so a reply
 * of 10,000 topics over hundreds of pages costs no more than one of 10.
 */
#include "page_merge.h"

#include <stdbool.h>
#include <string.h>

static void merge_object(cJSON *dst, cJSON *src, bool page);

static void merge_array(cJSON *dst, cJSON *src)
{
	cJSON *e = src->child, *last = dst->child ? dst->child->prev : NULL;

	if (e && cJSON_IsObject(e) &&
	    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "continued")) && cJSON_IsObject(last)) {
		cJSON_DetachItemViaPointer(src, e);
		merge_object(last, e, false);
		cJSON_Delete(e);
	}
	while ((e = src->child)) {
		cJSON_DetachItemViaPointer(src, e);
		cJSON_AddItemToArray(dst, e);
	}
}

static void merge_object(cJSON *dst, cJSON *src, bool page)
{
	cJSON *m, *d;

	while ((m = src->child)) {
		cJSON_DetachItemViaPointer(src, m);
		if (!m->string || strcmp(m->string, "continued") == 0 ||
		    (page && (strcmp(m->string, "ok") == 0 || strcmp(m->string, "id") == 0 ||
			      strcmp(m->string, "next") == 0))) {
			cJSON_Delete(m);
			continue;
		}
		d = cJSON_GetObjectItemCaseSensitive(dst, m->string);
		if (cJSON_IsArray(d) && cJSON_IsArray(m)) {
			merge_array(d, m);
			cJSON_Delete(m);
		} else if (cJSON_IsObject(d) && cJSON_IsObject(m)) {
			merge_object(d, m, false);
			cJSON_Delete(m);
		} else if (d) {
			cJSON_ReplaceItemViaPointer(dst, d, m);
		} else {
			cJSON_AddItemToObject(dst, m->string, m);
		}
	}
}

void tool_page_merge(cJSON *reply, cJSON *page)
{
	if (cJSON_IsObject(reply) && cJSON_IsObject(page))
		merge_object(reply, page, true);
}
