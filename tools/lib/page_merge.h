/*
 * Assembling a paged reply (docs/PROTOCOL.md "Paged replies"): `topics` and
 * `stats` replies come in pages of at most one frame each; merging them in
 * order gives the whole reply. Arrays are appended, except that a first
 * element marked "continued": true is merged into the last element so far;
 * objects are merged member by member by the same rule; other values are
 * replaced. The page's own "ok", "id" and "next" are not merged.
 */
#ifndef RGAPS_TOOLS_PAGE_MERGE_H
#define RGAPS_TOOLS_PAGE_MERGE_H

#include <cjson/cJSON.h>

/* Move the members of page (an object) into reply (an object); page is left empty. */
void tool_page_merge(cJSON *reply, cJSON *page);

#endif
