/*
 * Replies of any size in frames of at most RGAPS_FRAME_MAX bytes
 * (docs/PROTOCOL.md, "Paged replies"). A reply is a list of members, each a
 * value built when a page reaches it or an array of elements ordered by a
 * key (the topics, by name), generated one at a time. The writer serialises
 * them into one page under a byte budget; where the next piece does not fit
 * it stops, between two members of an object or two elements of an array at
 * any depth, closes what is open, and names the place in a cursor ("next").
 * The request for the next page brings the cursor back: everything before it
 * is skipped, and an element it stopped inside is continued as an object
 * marked "continued": true holding the rest of its members.
 *
 * Merging the pages in order gives the whole reply: arrays are appended,
 * except that a first element marked "continued" is merged into the last
 * element so far; objects are merged member by member by the same rule;
 * other values are replaced. An element that fits in half a page is never
 * split: it moves to the next page whole.
 *
 * The server keeps no state between pages: each page is built from the live
 * tables, so a reply read over several pages is a live view, not a snapshot
 * (a topic created meanwhile with a name before the cursor is not listed).
 */
#ifndef RGAPSD_PAGES_H
#define RGAPSD_PAGES_H

#include <stdbool.h>
#include <stddef.h>

struct cJSON;

#define RGAPSD_CURSOR_MAX 600  /* bytes of a cursor, NUL included */
#define RGAPSD_PAGE_KEY_MAX 64 /* bytes of a key of a keyed array, NUL included */

struct rgapsd_page_member {
	const char *name;
	/* A value, built when a page reaches it (NULL: the member is left out); freed by the writer. */
	struct cJSON *(*build)(void *ctx);
	/*
	 * Or an array ordered by key: the element with the smallest key >= key (inclusive) or
	 * > key (key NULL: the first), its key copied to key_out; NULL past the end. Keys are
	 * 1 to 63 of [A-Za-z0-9._-]. The element is freed by the writer.
	 */
	struct cJSON *(*next)(void *ctx, const char *key, bool inclusive, char *key_out);
};

/*
 * One page of the reply: {"ok":true,"id":ID,<members from cursor>,"next":"..."}, at most
 * limit bytes ("next" only when more follows). cursor NULL or "": the first page; id NULL:
 * none. Returns 0 and a malloc'd NUL-terminated text in *text_p (length in *len_p), or
 * -EINVAL (a cursor this writer did not make, with the reason in err), -EMSGSIZE (one piece
 * that cannot be split is larger than a page), -ENOMEM.
 */
int rgapsd_page_write(const struct rgapsd_page_member *members, size_t nmembers, void *ctx,
		      const char *cursor, const struct cJSON *id, size_t limit, char **text_p,
		      size_t *len_p, char *err, size_t errlen);

#endif
