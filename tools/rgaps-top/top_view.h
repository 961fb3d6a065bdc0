/*
 * rgaps-top's view: turns two `stats` replies of rgapsd (the previous poll and
 * this one, as parsed cJSON) into lines of text, with rates computed from the
 * deltas between them. Pure: no I/O, no terminal, no clock, so that the batch
 * output, the ncurses screen and the unit tests all see the same frame. Every
 * field of the reply may be missing (an older or newer daemon, a topic whose
 * counters could not be read): a missing value is NAN here and prints as "-".
 */
#ifndef RGAPS_TOP_VIEW_H
#define RGAPS_TOP_VIEW_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

/* How a line is drawn on the screen (plain text in batch mode). */
enum top_attr {
	TOP_ATTR_NONE,	  /* a table row or text */
	TOP_ATTR_HEADING, /* a section or table heading */
	TOP_ATTR_ALERT,	  /* something the operator should look at */
};

struct top_line {
	char *text;
	enum top_attr attr;
	int freeze;   /* leading characters that stay in place when scrolling right (a
		       * table's first column: the TOPIC or PEER a row is about) */
	bool columns; /* a table's column titles (their meanings: top_column_meaning()) */
};

/* A rendered frame: lines without newlines, owned by the frame. */
struct top_frame {
	struct top_line *lines;
	size_t n, cap;
	bool oom; /* an allocation failed: some lines are missing */
};

enum top_section {
	TOP_SECTION_TOPICS, /* per topic: rates, totals, pool, queue, subscribers, lifecycle */
	TOP_SECTION_PEERS,  /* per peer: sessions, links, rings, forwarders, state machines */
	TOP_NUM_SECTIONS
};

enum top_sort {
	TOP_SORT_NAME,	    /* topic (peer) name, ascending */
	TOP_SORT_MSG_RATE,  /* messages (records) per second, descending */
	TOP_SORT_BYTE_RATE, /* bytes per second, descending */
	TOP_SORT_DROPS,	    /* drops, descending */
	TOP_SORT_LAG,	    /* largest subscriber lag, descending */
	TOP_NUM_SORTS
};

/* One poll: the parsed `stats` reply and the monotonic time it was taken. */
struct top_sample {
	cJSON *stats;
	double t_s;
};

const char *top_section_name(enum top_section s);
const char *top_sort_name(enum top_sort s);

/** Free the lines; the frame can be filled again. */
void top_frame_clear(struct top_frame *f);

/** Append one line (printf format). */
void top_frame_printf(struct top_frame *f, enum top_attr attr, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/** Widest line of the frame, in characters. */
size_t top_frame_width(const struct top_frame *f);

/** (cur - prev) / dt_s, or NAN when either is missing, dt_s <= 0 or the counter went back. */
double top_rate(double cur, double prev, double dt_s);

/*
 * Formatting into @p buf (size @p n), each returning @p buf and writing "-"
 * for a missing value: counts (12345 -> "12345", 1234567 -> "1.2M"), rates
 * ("0.5", "333", "12.3k"), bytes ("512B", "1.0MiB"), a percentage of
 * @p den, a duration ("5m06s").
 */
char *top_fmt_count(char *buf, size_t n, double v);
char *top_fmt_rate(char *buf, size_t n, double v);
char *top_fmt_bytes(char *buf, size_t n, double v);
char *top_fmt_pct(char *buf, size_t n, double num, double den);
char *top_fmt_duration(char *buf, size_t n, double s);

/**
 * True when @p cur cannot be compared with @p prev: another daemon instance,
 * or the same one restarted (uptime went back). Rates start over then.
 */
bool top_sample_restarted(const struct top_sample *prev, const struct top_sample *cur);

/** What a column title means, in words ("MAX_LAG": ...); NULL for a title it does not know. */
const char *top_column_meaning(const char *title);

/** Every column title of every table with its meaning (the '?' screen and --legend). */
void top_render_legend(struct top_frame *f);

/** The daemon line: version, instance, uptime, connections, requests, topics. */
void top_render_header(struct top_frame *f, const cJSON *stats);

/**
 * Append @p section of @p cur to @p f. @p prev (may be NULL or hold NULL stats)
 * is the previous poll; rates are "-" without it.
 */
void top_render_section(struct top_frame *f, enum top_section section, enum top_sort sort,
			const struct top_sample *prev, const struct top_sample *cur);

#endif
