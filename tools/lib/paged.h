/*
 * A `topics` or `stats` reply in full, for the tools: every page
 * (docs/PROTOCOL.md "Paged replies") fetched through rgaps_query() and
 * merged into one object shaped like a reply that fitted a single frame.
 */
#ifndef RGAPS_TOOLS_PAGED_H
#define RGAPS_TOOLS_PAGED_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* Never more pages than this: 10,000 topics with full stats take a few hundred. */
#define RGAPS_TOOL_MAX_PAGES 1000000

/*
 * type "topics" or "stats", topic NULL or a filter. 0 and *reply_p (the caller frees it),
 * or a negative errno with the daemon's message (or rgaps_strerror's words) in err.
 */
int tool_query(const char *type, const char *topic, cJSON **reply_p, char *err,
		     size_t errlen);

#endif
