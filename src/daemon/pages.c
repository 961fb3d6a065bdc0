/*
 * The writer of paged replies (pages.h, docs/PROTOCOL.md "Paged replies").
 *
 * It walks the reply as a tree: the page object, its members, and inside
 * them objects and arrays, each child a "unit" (a member with its name, or
 * an array element). A unit is printed on its own first; if it fits in
 * what is left of the page it is copied in whole. If not, a unit larger
 * than half a page (or the first of a page) is descended into and written
 * piece by piece; any other unit ends the page, and the place where it
 * would have gone becomes the cursor: the path of steps from the page down
 * to it (a member name, an array index, or the key of a keyed array's
 * element). Containers close themselves as the recursion unwinds, so a page
 * is always one valid JSON object. On the next page the same walk skips
 * every unit before the path, continues the units the path goes through
 * (an element as {"continued":true, ...the rest}), and writes the rest whole.
 *
 * Cursor text: "1" then "/m<name>", "/i<index>" or "/k<key>" per step; names
 * and keys 1 to 63 of [A-Za-z0-9._-], at most PW_DEPTH steps, the first a
 * member. Anything else is refused: the cursor comes from a client.
 */
#include "pages.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"

#define PW_DEPTH 8
#define PW_NAME_MAX RGAPSD_PAGE_KEY_MAX
#define PW_INDEX_MAX 9999999u
/* Kept free for the closers of open containers and the "next" member. */
#define PW_RESERVE (RGAPSD_CURSOR_MAX + 32 + PW_DEPTH + 2)
/* A unit is descended into only where this much room is left for its key and first piece. */
#define PW_DESCEND_MIN 128

enum pw_kind {
	PW_MEMBER = 'm', /* a member of an object, by name */
	PW_INDEX = 'i',	 /* an element of an array, by position */
	PW_KEY = 'k',	 /* an element of a keyed array, by key */
};

struct pw_step {
	char kind; /* enum pw_kind */
	uint32_t index;
	char name[PW_NAME_MAX];
};

struct pw_path {
	struct pw_step s[PW_DEPTH];
	int n;
};

struct pw {
	void *ctx;
	char *buf;
	size_t len, cap;
	size_t budget; /* the content ends before this; the rest is the reserve */
	bool wrote;    /* a unit was copied into this page */
	bool stopped;  /* the page is full: stop holds where to go on */
	int err;
	char *errmsg;
	size_t errlen;
	int cdepth;		     /* containers open below the page object */
	bool first[PW_DEPTH + 2];    /* per open container: nothing written in it yet */
	struct pw_path cur, stop;
};

static const struct pw_path pw_none;

static bool pw_put(struct pw *w, const char *s, size_t n)
{
	if (w->err)
		return false;
	if (w->len + n + 1 > w->cap) {
		size_t cap = RGAPS_MAX(w->cap * 2, w->len + n + 1);
		char *b = realloc(w->buf, RGAPS_MAX(cap, (size_t)4096));

		if (!b) {
			w->err = -ENOMEM;
			return false;
		}
		w->buf = b;
		w->cap = RGAPS_MAX(cap, (size_t)4096);
	}
	memcpy(w->buf + w->len, s, n);
	w->len += n;
	w->buf[w->len] = '\0';
	return true;
}

static bool pw_puts(struct pw *w, const char *s)
{
	return pw_put(w, s, strlen(s));
}

static size_t pw_room(const struct pw *w)
{
	return w->len < w->budget ? w->budget - w->len : 0;
}

static bool pw_name_ok(const char *s)
{
	size_t i;

	if (!s || !s[0])
		return false;
	for (i = 0; s[i]; i++) {
		char c = s[i];

		if (i >= PW_NAME_MAX - 1 ||
		    !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

/* A member's key as JSON text: length of the quoted, escaped string. */
static size_t pw_key_len(const char *name)
{
	size_t n = 2;

	for (const char *p = name; *p; p++)
		n += (*p == '"' || *p == '\\') ? 2 : ((unsigned char)*p < 0x20 ? 6 : 1);
	return n;
}

static void pw_put_key(struct pw *w, const char *name)
{
	char esc[8];

	pw_put(w, "\"", 1);
	for (const char *p = name; *p; p++) {
		if (*p == '"' || *p == '\\') {
			esc[0] = '\\';
			esc[1] = *p;
			pw_put(w, esc, 2);
		} else if ((unsigned char)*p < 0x20) {
			snprintf(esc, sizeof(esc), "\\u%04x", (unsigned)(unsigned char)*p);
			pw_put(w, esc, 6);
		} else {
			pw_put(w, p, 1);
		}
	}
	pw_put(w, "\":", 2);
}

/* What goes before a unit: the comma after a sibling, and a member's key. */
static void pw_sep(struct pw *w, const char *name)
{
	if (!w->first[w->cdepth])
		pw_put(w, ",", 1);
	w->first[w->cdepth] = false;
	if (name)
		pw_put_key(w, name);
}

static size_t pw_sep_len(const struct pw *w, const char *name)
{
	return (w->first[w->cdepth] ? 0 : 1) + (name ? pw_key_len(name) + 1 : 0);
}

static void pw_open(struct pw *w, char c)
{
	pw_put(w, &c, 1);
	w->cdepth++;
	w->first[w->cdepth] = true;
}

static void pw_close(struct pw *w, char c)
{
	pw_put(w, &c, 1);
	w->cdepth--;
}

static void pw_push(struct pw *w, char kind, uint32_t index, const char *name)
{
	struct pw_step *s;

	rgaps_require(w->cur.n < PW_DEPTH);
	s = &w->cur.s[w->cur.n++];
	s->kind = kind;
	s->index = index;
	snprintf(s->name, sizeof(s->name), "%s", name ? name : "");
}

static void pw_pop(struct pw *w)
{
	w->cur.n--;
}

/* The page ends before the unit being written (the last step of cur). */
static void pw_stop_here(struct pw *w)
{
	w->stop = w->cur;
	w->stopped = true;
}

static void pw_fail(struct pw *w, int err, const char *fmt, ...) RGAPS_PRINTF(3, 4);

static void pw_fail(struct pw *w, int err, const char *fmt, ...)
{
	va_list ap;

	if (w->err)
		return;
	w->err = err;
	if (w->errmsg && w->errlen) {
		va_start(ap, fmt);
		vsnprintf(w->errmsg, w->errlen, fmt, ap);
		va_end(ap);
	}
}

static bool pw_unit(struct pw *w, const char *name, const cJSON *v, const struct pw_path *resume,
		    int rfrom);

/*
 * The children of an object or array, from the step resume->s[rfrom] on (whole when
 * rfrom == resume->n). cont: an element continued from the page before.
 */
static bool pw_container(struct pw *w, const cJSON *v, const struct pw_path *resume, int rfrom,
			 bool cont)
{
	bool obj = cJSON_IsObject(v);
	const struct pw_step *st = rfrom < resume->n ? &resume->s[rfrom] : NULL;
	bool started = !st, ok = true;
	const cJSON *c;
	uint32_t i = 0;

	pw_open(w, obj ? '{' : '[');
	if (cont && obj) {
		pw_puts(w, "\"continued\":true");
		w->first[w->cdepth] = false;
	}
	cJSON_ArrayForEach(c, v)
	{
		int sub = resume->n;

		if (!started) {
			/* A step that no longer matches (the value changed): nothing more of v. */
			if (obj ? (st->kind == PW_MEMBER && c->string && strcmp(c->string, st->name) == 0)
				: (st->kind == PW_INDEX && i == st->index)) {
				started = true;
				sub = rfrom + 1;
			} else {
				i++;
				continue;
			}
		}
		pw_push(w, obj ? PW_MEMBER : PW_INDEX, i, obj ? c->string : NULL);
		ok = pw_unit(w, obj ? c->string : NULL, c, resume, sub);
		pw_pop(w);
		i++;
		if (!ok)
			break;
	}
	pw_close(w, obj ? '}' : ']');
	return ok && !w->err;
}

/*
 * One unit (a member when name is set, else an element), whole, or continued from resume
 * when rfrom < resume->n. false: the page is full (w->stopped) or failed (w->err).
 */
static bool pw_unit(struct pw *w, const char *name, const cJSON *v, const struct pw_path *resume,
		    int rfrom)
{
	bool container = cJSON_IsObject(v) || cJSON_IsArray(v);
	/* Only objects carry the "continued" mark: an array inside an array is never split. */
	bool splittable = (cJSON_IsObject(v) || (cJSON_IsArray(v) && name)) &&
			  w->cur.n < PW_DEPTH && (!name || pw_name_ok(name));
	size_t sep = pw_sep_len(w, name), n;
	char *text;

	if (rfrom < resume->n && container) {
		pw_sep(w, name);
		return pw_container(w, v, resume, rfrom, !name);
	}
	text = cJSON_PrintUnformatted(v);
	if (!text) {
		w->err = -ENOMEM;
		return false;
	}
	n = strlen(text);
	if (sep + n <= pw_room(w)) {
		pw_sep(w, name);
		pw_put(w, text, n);
		free(text);
		w->wrote = true;
		return !w->err;
	}
	free(text);
	if (splittable && (n > w->budget / 2 || !w->wrote) &&
	    (pw_room(w) >= sep + PW_DESCEND_MIN || !w->wrote)) {
		pw_sep(w, name);
		return pw_container(w, v, &pw_none, 0, false);
	}
	if (!w->wrote) {
		pw_fail(w, -EMSGSIZE, "a piece of the reply that cannot be split (%s) is larger "
			"than a frame", name ? name : "an array element");
		return false;
	}
	pw_stop_here(w);
	return false;
}

/* A keyed array, from the element with key resume->s[rfrom] on (or from its first). */
static bool pw_keyed(struct pw *w, const struct rgapsd_page_member *m,
		     const struct pw_path *resume, int rfrom)
{
	const struct pw_step *st = rfrom < resume->n ? &resume->s[rfrom] : NULL;
	char key[PW_NAME_MAX], prev[PW_NAME_MAX];
	bool ok = true, first = true;
	cJSON *e;

	if (st && st->kind != PW_KEY) {
		pw_fail(w, -EINVAL, "bad cursor: '%s' is a list of named elements", m->name);
		return false;
	}
	if (pw_room(w) < pw_sep_len(w, m->name) + PW_DESCEND_MIN && w->wrote) {
		pw_stop_here(w);
		return false;
	}
	pw_sep(w, m->name);
	pw_open(w, '[');
	key[0] = '\0';
	e = m->next(w->ctx, st ? st->name : NULL, true, key);
	while (e) {
		/* The element the cursor stopped inside, if it is still there. */
		int sub = first && st && strcmp(key, st->name) == 0 ? rfrom + 1 : resume->n;

		first = false;
		if (!pw_name_ok(key)) {
			cJSON_Delete(e);
			pw_fail(w, -EINVAL, "element key '%.63s' cannot go in a cursor", key);
			ok = false;
			break;
		}
		pw_push(w, PW_KEY, 0, key);
		ok = pw_unit(w, NULL, e, resume, sub);
		pw_pop(w);
		cJSON_Delete(e);
		if (!ok)
			break;
		memcpy(prev, key, sizeof(prev));
		e = m->next(w->ctx, prev, false, key);
	}
	pw_close(w, ']');
	return ok && !w->err;
}

static int pw_cursor_parse(const char *text, struct pw_path *p, char *err, size_t errlen)
{
	const char *s = text;

	memset(p, 0, sizeof(*p));
	if (strlen(text) >= RGAPSD_CURSOR_MAX || s[0] != '1')
		goto bad;
	s++;
	while (*s) {
		struct pw_step *st;
		const char *end;
		size_t n;

		if (*s != '/' || p->n == PW_DEPTH || !s[1])
			goto bad;
		s++;
		st = &p->s[p->n++];
		st->kind = *s++; /* not the NUL: checked above */
		end = strchr(s, '/');
		n = end ? (size_t)(end - s) : strlen(s);
		if (n == 0 || n >= PW_NAME_MAX)
			goto bad;
		if (st->kind == PW_INDEX) {
			uint64_t v = 0;

			for (size_t i = 0; i < n; i++) {
				if (s[i] < '0' || s[i] > '9' || v > PW_INDEX_MAX)
					goto bad;
				v = v * 10 + (uint64_t)(s[i] - '0');
			}
			if (v > PW_INDEX_MAX || (n > 1 && s[0] == '0'))
				goto bad;
			st->index = (uint32_t)v;
		} else if (st->kind == PW_MEMBER || st->kind == PW_KEY) {
			memcpy(st->name, s, n);
			st->name[n] = '\0';
			if (!pw_name_ok(st->name))
				goto bad;
		} else {
			goto bad;
		}
		s += n;
	}
	if (p->n == 0 || p->s[0].kind != PW_MEMBER)
		goto bad;
	return 0;
bad:
	snprintf(err, errlen, "bad cursor: give back the \"next\" of the page before, unchanged");
	return -EINVAL;
}

static int pw_cursor_format(const struct pw_path *p, char *out, size_t len)
{
	size_t off = 0;
	int n;

	n = snprintf(out, len, "1");
	for (int i = 0; n >= 0 && (size_t)n < len - off && i < p->n; i++) {
		const struct pw_step *st = &p->s[i];

		off += (size_t)n;
		if (st->kind == PW_INDEX)
			n = snprintf(out + off, len - off, "/i%u", st->index);
		else if (pw_name_ok(st->name))
			n = snprintf(out + off, len - off, "/%c%s", st->kind, st->name);
		else
			return -EINVAL;
	}
	return n >= 0 && (size_t)n < len - off ? 0 : -EINVAL;
}

int rgapsd_page_write(const struct rgapsd_page_member *members, size_t nmembers, void *ctx,
		      const char *cursor, const cJSON *id, size_t limit, char **text_p,
		      size_t *len_p, char *err, size_t errlen)
{
	struct pw w = { .ctx = ctx, .errmsg = err, .errlen = errlen };
	struct pw_path resume = { .n = 0 };
	char next[RGAPSD_CURSOR_MAX];
	bool started, ok = true;
	int rc;

	if (limit <= PW_RESERVE + 64)
		return -EINVAL;
	if (cursor && cursor[0]) {
		rc = pw_cursor_parse(cursor, &resume, err, errlen);
		if (rc)
			return rc;
	}
	started = resume.n == 0;
	w.budget = limit - PW_RESERVE;
	pw_puts(&w, "{\"ok\":true");
	if (id) {
		char *t = cJSON_PrintUnformatted(id);

		if (!t) {
			w.err = -ENOMEM;
			goto out;
		}
		pw_puts(&w, ",\"id\":");
		pw_puts(&w, t);
		free(t);
	}
	for (size_t i = 0; i < nmembers && ok; i++) {
		const struct rgapsd_page_member *m = &members[i];
		int sub = resume.n;

		if (!started) {
			if (strcmp(resume.s[0].name, m->name) != 0)
				continue;
			started = true;
			sub = 1;
		}
		pw_push(&w, PW_MEMBER, 0, m->name);
		if (m->next) {
			ok = pw_keyed(&w, m, &resume, sub);
		} else {
			cJSON *v = m->build(ctx);

			if (v) {
				ok = pw_unit(&w, m->name, v, &resume, sub);
				cJSON_Delete(v);
			} else {
				ok = !w.err;
			}
		}
		pw_pop(&w);
	}
	if (!started && !w.err)
		pw_fail(&w, -EINVAL, "bad cursor: no part '%s' in this reply", resume.s[0].name);
	if (w.err)
		goto out;
	if (w.stopped) {
		if (pw_cursor_format(&w.stop, next, sizeof(next))) {
			pw_fail(&w, -EMSGSIZE, "%s", "the reply cannot be cut into pages here");
			goto out;
		}
		pw_puts(&w, ",\"next\":\"");
		pw_puts(&w, next);
		pw_puts(&w, "\"");
	}
	pw_puts(&w, "}");
	if (!w.err && w.len > limit)
		pw_fail(&w, -EMSGSIZE, "%s", "a page came out over its limit");
out:
	if (w.err) {
		free(w.buf);
		return w.err;
	}
	*text_p = w.buf;
	*len_p = w.len;
	return 0;
}
