/*
 * rgaps-top: the live view of one rgapsd (docs/ARCHITECTURE.md section 9). Polls the
 * daemon's `stats` request every --interval through the public API
 * (rgaps_query(), include/rgaps/rgaps.h) and shows per topic rates, totals,
 * pool and queue fill, drops, gaps and subscriber lag, and per peer sessions,
 * links, rings and the remote path's state machines (top_view.c draws the
 * frames). Interactive with ncurses, or --once / --batch N frames as plain
 * text for scripts. Each poll is a fresh control connection, so a daemon that
 * restarts is picked up again without any reconnect logic here.
 */
#include <curses.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rgaps/rgaps.h"
#include "paged.h"
#include "stats.h"
#include "tool.h"
#include "top_view.h"

#define MIN_INTERVAL_MS 50
#define MAX_INTERVAL_MS 3600000
#define HSCROLL_STEP 8
#define PAIR_ALERT 1

struct top {
	const char *socket; /* where librgaps looks: $RGAPS_SOCKET or the default */
	int interval_ms;
	enum top_sort sort;
	struct top_sample prev, cur; /* cur.stats is NULL until the first poll */
	/* screen */
	enum top_section section;
	int scroll[TOP_NUM_SECTIONS];
	int hscroll;
	bool reachable;
	bool legend;	     /* '?': the meaning of each column instead of a section */
	char error[256];     /* why the last poll failed */
	time_t last_ok;	     /* wall clock of the last good poll */
	bool colors;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rgaps-top [--interval MS] [--once | --batch N] [--sort KEY] [--socket PATH]\n"
		"Live view of one rgapsd: per topic rates, totals, pool and queue fill, drops,\n"
		"gaps and subscriber lag; per peer sessions, links, rings and state machines.\n"
		"  -i, --interval MS  poll every MS milliseconds (default 1000)\n"
		"  -1, --once         print one frame as plain text and exit (--batch 1)\n"
		"  -b, --batch N      print N frames as plain text, one per interval, and exit;\n"
		"                     rates in each frame cover the interval before it\n"
		"  -s, --sort KEY     name, msg, bytes, drops or lag (default msg)\n"
		"  -S, --socket PATH  the daemon's control socket (default $RGAPS_SOCKET, else %s)\n"
		"  -L, --legend       print what each column shows, and exit\n"
		"  -V, --version      print the version, and exit\n"
		"Keys: q quit, t topics, p peers, tab switch, s/S sort, arrows PgUp PgDn Home End\n"
		"scroll (the first column stays), r poll now, ? what each column shows.\n"
		"The screen needs a terminal; without one, rgaps-top exits 1 (use --batch).\n",
		tool_default_socket());
}

/* Poll once; the reply replaces cur (cur becomes prev). 0, or fills t->error. */
static int poll_stats(struct top *t)
{
	char err[200];
	cJSON *j;
	int r;

	/* Every page of the reply, merged: any number of topics (paged.h). */
	r = tool_query("stats", NULL, &j, err, sizeof(err));
	if (r) {
		snprintf(t->error, sizeof(t->error), "stats: %s", err);
		t->reachable = false;
		return r;
	}
	cJSON_Delete(t->prev.stats);
	t->prev = t->cur;
	t->cur.stats = j;
	t->cur.t_s = tool_now_s();
	if (t->prev.stats && top_sample_restarted(&t->prev, &t->cur)) {
		/* another daemon now: its counters started over, rates restart too */
		cJSON_Delete(t->prev.stats);
		t->prev.stats = NULL;
	}
	t->reachable = true;
	t->last_ok = time(NULL);
	t->error[0] = 0;
	return 0;
}

static void fmt_clock(char *buf, size_t n, time_t when)
{
	struct tm tm;

	if (!when || !localtime_r(&when, &tm) || !strftime(buf, n, "%H:%M:%S", &tm))
		snprintf(buf, n, "-");
}

/* ---------------------------------------------------------------- batch */

static int run_batch(struct top *t, int frames)
{
	struct top_frame f = { 0 };

	for (int i = 1; i <= frames; i++) {
		char when[16];

		tool_sleep_ms(t->interval_ms);
		if (tool_interrupted)
			break;
		if (poll_stats(t)) {
			fprintf(stderr, "rgaps-top: lost rgapsd at %s: %s\n", t->socket, t->error);
			return 1;
		}
		fmt_clock(when, sizeof(when), t->last_ok);
		if (t->prev.stats)
			top_frame_printf(&f, TOP_ATTR_NONE,
					 "rgaps-top frame %d/%d at %s  socket %s  rates over %.2f s", i,
					 frames, when, t->socket, t->cur.t_s - t->prev.t_s);
		else
			top_frame_printf(&f, TOP_ATTR_NONE,
					 "rgaps-top frame %d/%d at %s  socket %s  rates from the next "
					 "frame (the daemon restarted)",
					 i, frames, when, t->socket);
		top_render_header(&f, t->cur.stats);
		top_frame_printf(&f, TOP_ATTR_NONE, "%s", "");
		top_render_section(&f, TOP_SECTION_TOPICS, t->sort, &t->prev, &t->cur);
		top_frame_printf(&f, TOP_ATTR_NONE, "%s", "");
		top_render_section(&f, TOP_SECTION_PEERS, t->sort, &t->prev, &t->cur);
		top_frame_printf(&f, TOP_ATTR_NONE, "%s", "");
		for (size_t l = 0; l < f.n; l++)
			puts(f.lines[l].text);
		if (f.oom)
			fprintf(stderr, "rgaps-top: out of memory: frame %d is incomplete\n", i);
		top_frame_clear(&f);
		if (fflush(stdout) != 0)
			return 1;
	}
	/* fewer frames than asked for: stopped by a signal, as the shell reports it */
	return tool_interrupted ? 128 + tool_interrupted : 0;
}

/* ---------------------------------------------------------------- screen */

static attr_t attr_of(const struct top *t, enum top_attr a)
{
	switch (a) {
	case TOP_ATTR_HEADING:
		return A_BOLD;
	case TOP_ATTR_ALERT:
		return t->colors ? (attr_t)(COLOR_PAIR(PAIR_ALERT) | A_BOLD) : A_BOLD;
	default:
		return A_NORMAL;
	}
}

/*
 * One line at row @p y, clipped to the screen: its first @p freeze characters (a
 * table's first column) in place, then the rest from column freeze + hscroll on.
 */
static void put_line(int y, const struct top_line *l, int hscroll, attr_t attr)
{
	size_t len = strlen(l->text), keep = l->freeze > 0 ? (size_t)l->freeze : 0;

	if (y < 0 || y >= LINES || COLS <= 0)
		return;
	move(y, 0);
	clrtoeol();
	keep = keep < len ? keep : len;
	if (hscroll == 0 || keep >= (size_t)COLS)
		keep = 0; /* not scrolled, or the first column alone fills the screen */
	attron(attr);
	addnstr(l->text, (int)keep);
	if (keep + (size_t)hscroll < len)
		addnstr(l->text + keep + hscroll, COLS - (int)keep);
	attroff(attr);
}

/* A full-width bar (title and keys lines). */
static void put_bar(int y, const char *text)
{
	if (y < 0 || y >= LINES || COLS <= 0)
		return;
	attron(A_REVERSE);
	mvhline(y, 0, ' ', COLS);
	mvaddnstr(y, 0, text, COLS);
	attroff(A_REVERSE);
}

static void draw(struct top *t)
{
	struct top_frame head = { 0 }, body = { 0 };
	int body_y = 3, body_h = LINES - 4, maxs;
	char line[512], when[16];
	size_t width;

	erase();
	snprintf(line, sizeof(line), " rgaps-top  %s  every %d ms   %s%s%s  %s%s%s   sort: %s",
		 t->socket, t->interval_ms, t->section == TOP_SECTION_TOPICS ? "[" : "",
		 "Topics", t->section == TOP_SECTION_TOPICS ? "]" : "",
		 t->section == TOP_SECTION_PEERS ? "[" : "", "Peers",
		 t->section == TOP_SECTION_PEERS ? "]" : "", top_sort_name(t->sort));
	put_bar(0, line);

	top_render_header(&head, t->cur.stats);
	if (head.n)
		put_line(1, &head.lines[0], 0, A_BOLD);
	top_frame_clear(&head);

	fmt_clock(when, sizeof(when), t->last_ok);
	if (!t->reachable)
		snprintf(line, sizeof(line),
			 "daemon not reachable at %s (retrying every %d ms; data from %s): %s",
			 t->socket, t->interval_ms, when, t->error);
	else if (t->prev.stats)
		snprintf(line, sizeof(line), "polled at %s, rates over %.2f s", when,
			 t->cur.t_s - t->prev.t_s);
	else
		snprintf(line, sizeof(line), "polled at %s, rates from the next poll", when);
	put_line(2, &(struct top_line){ .text = line }, 0,
		 t->reachable ? A_NORMAL : attr_of(t, TOP_ATTR_ALERT));

	if (t->legend)
		top_render_legend(&body);
	else
		top_render_section(&body, t->section, t->sort, &t->prev, &t->cur);
	if (body.oom)
		top_frame_printf(&body, TOP_ATTR_ALERT, "(out of memory: lines are missing)");
	maxs = body_h > 0 && (int)body.n > body_h ? (int)body.n - body_h : 0;
	if (t->scroll[t->section] > maxs)
		t->scroll[t->section] = maxs;
	if (t->scroll[t->section] < 0)
		t->scroll[t->section] = 0;
	width = top_frame_width(&body);
	if (t->hscroll > (int)width - HSCROLL_STEP)
		t->hscroll = width > HSCROLL_STEP ? (int)(width - HSCROLL_STEP) / HSCROLL_STEP *
							    HSCROLL_STEP :
						    0;
	if (t->hscroll < 0)
		t->hscroll = 0;
	for (int i = 0; i < body_h; i++) {
		size_t l = (size_t)(t->scroll[t->section] + i);

		if (l >= body.n)
			break;
		put_line(body_y + i, &body.lines[l], t->hscroll, attr_of(t, body.lines[l].attr));
	}
	top_frame_clear(&body);
	snprintf(line, sizeof(line),
		 " q quit  t topics  p peers  tab switch  s sort  arrows PgUp PgDn scroll  r poll"
		 "  ? columns   [line %d%s]",
		 t->scroll[t->section] + 1, maxs > t->scroll[t->section] ? ", more below" : "");
	put_bar(LINES - 1, line);
	refresh();
}

static void scroll_by(struct top *t, int n)
{
	long s = (long)t->scroll[t->section] + n;

	t->scroll[t->section] = s < 0 ? 0 : s > INT_MAX / 2 ? INT_MAX / 2 : (int)s;
}

/* Handle one key; false to quit. */
static bool on_key(struct top *t, int ch)
{
	int page = LINES - 5 > 1 ? LINES - 5 : 1;

	switch (ch) {
	case 'q':
	case 'Q':
		return false;
	case '?':
		t->legend = !t->legend;
		break;
	case 't':
	case 'T':
		t->legend = false;
		if (t->section == TOP_SECTION_TOPICS)
			t->scroll[t->section] = 0;
		t->section = TOP_SECTION_TOPICS;
		break;
	case 'p':
	case 'P':
		t->legend = false;
		if (t->section == TOP_SECTION_PEERS)
			t->scroll[t->section] = 0;
		t->section = TOP_SECTION_PEERS;
		break;
	case '\t':
	case KEY_BTAB:
		t->section = (t->section + 1) % TOP_NUM_SECTIONS;
		break;
	case 's':
		t->sort = (t->sort + 1) % TOP_NUM_SORTS;
		break;
	case 'S':
		t->sort = (t->sort + TOP_NUM_SORTS - 1) % TOP_NUM_SORTS;
		break;
	case KEY_UP:
	case 'k':
		scroll_by(t, -1);
		break;
	case KEY_DOWN:
	case 'j':
		scroll_by(t, 1);
		break;
	case KEY_PPAGE:
	case 'b':
		scroll_by(t, -page);
		break;
	case KEY_NPAGE:
	case ' ':
		scroll_by(t, page);
		break;
	case KEY_HOME:
	case 'g':
		t->scroll[t->section] = 0;
		t->hscroll = 0;
		break;
	case KEY_END:
	case 'G':
		t->scroll[t->section] = INT_MAX / 2; /* draw() clamps */
		break;
	case KEY_LEFT:
	case 'h':
		t->hscroll -= HSCROLL_STEP;
		break;
	case KEY_RIGHT:
	case 'l':
		t->hscroll += HSCROLL_STEP;
		break;
	default:
		break; /* KEY_RESIZE and anything else: just redraw */
	}
	return true;
}

static int run_screen(struct top *t)
{
	double next = tool_now_s() + t->interval_ms / 1000.0;
	SCREEN *scr;

	if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
		fprintf(stderr, "rgaps-top: not a terminal; use --once or --batch N for text\n");
		return 1;
	}
	scr = newterm(NULL, stdout, stdin);
	if (!scr) {
		fprintf(stderr, "rgaps-top: cannot use terminal type '%s'; use --once or --batch N\n",
			getenv("TERM") ? getenv("TERM") : "(TERM unset)");
		return 1;
	}
	set_term(scr);
	cbreak();
	noecho();
	keypad(stdscr, TRUE);
	curs_set(0);
	if (has_colors() && start_color() == OK) {
		use_default_colors();
		t->colors = init_pair(PAIR_ALERT, COLOR_RED, -1) == OK;
	}
	while (!tool_interrupted) {
		double now;
		int ch, wait_ms;

		draw(t);
		now = tool_now_s();
		wait_ms = next > now ? (int)ceil((next - now) * 1000) : 0;
		timeout(wait_ms);
		ch = getch();
		if (tool_interrupted)
			break;
		if (ch == ERR || ch == 'r' || ch == 'R' || ch == 12 /* ^L */) {
			if (ch == 12)
				clearok(curscr, TRUE);
			if (ch != ERR || tool_now_s() >= next) {
				poll_stats(t); /* a failure shows in the status line; retried next time */
				next = tool_now_s() + t->interval_ms / 1000.0;
			}
			continue;
		}
		if (!on_key(t, ch))
			break;
	}
	endwin();
	delscreen(scr);
	/* q or ^C end the view; a lost terminal (SIGHUP) or a SIGTERM is reported as such */
	if (tool_interrupted == SIGHUP || tool_interrupted == SIGTERM) {
		fprintf(stderr, "rgaps-top: %s\n", tool_interrupted == SIGHUP ?
						      "the terminal went away (SIGHUP)" :
						      "stopped (SIGTERM)");
		return 128 + tool_interrupted;
	}
	return 0;
}

/* ---------------------------------------------------------------- main */

static int parse_int(const char *opt, const char *s, int min, int max, int *v)
{
	char *end;
	long l;

	errno = 0;
	l = strtol(s, &end, 10);
	if (errno || end == s || *end || l < min || l > max) {
		fprintf(stderr, "rgaps-top: %s: '%s' is not a number from %d to %d\n", opt, s, min,
			max);
		return -1;
	}
	*v = (int)l;
	return 0;
}

static int parse_sort(const char *s, enum top_sort *v)
{
	static const char *const names[TOP_NUM_SORTS] = { "name", "msg", "bytes", "drops", "lag" };

	for (int i = 0; i < TOP_NUM_SORTS; i++) {
		if (strcmp(s, names[i]) == 0 || strcmp(s, top_sort_name((enum top_sort)i)) == 0) {
			*v = (enum top_sort)i;
			return 0;
		}
	}
	fprintf(stderr, "rgaps-top: --sort: '%s' is not one of name, msg, bytes, drops, lag\n", s);
	return -1;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "interval", required_argument, NULL, 'i' },
		{ "once", no_argument, NULL, '1' },
		{ "batch", required_argument, NULL, 'b' },
		{ "sort", required_argument, NULL, 's' },
		{ "socket", required_argument, NULL, 'S' },
		{ "legend", no_argument, NULL, 'L' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct top_frame legend = { 0 };
	struct top t = { .interval_ms = 1000, .sort = TOP_SORT_MSG_RATE };
	int c, batch = 0, rc;

	while ((c = getopt_long(argc, argv, "i:1b:s:S:LVh", opts, NULL)) != -1) {
		switch (c) {
		case 'i':
			if (parse_int("--interval", optarg, MIN_INTERVAL_MS, MAX_INTERVAL_MS,
				      &t.interval_ms))
				return 2;
			break;
		case '1':
			batch = 1;
			break;
		case 'b':
			if (parse_int("--batch", optarg, 1, INT_MAX, &batch))
				return 2;
			break;
		case 's':
			if (parse_sort(optarg, &t.sort))
				return 2;
			break;
		case 'S':
			/* librgaps finds the daemon through $RGAPS_SOCKET */
			if (!*optarg || setenv("RGAPS_SOCKET", optarg, 1) != 0) {
				fprintf(stderr, "rgaps-top: --socket: cannot use '%s'\n", optarg);
				return 2;
			}
			break;
		case 'L':
			top_render_legend(&legend);
			for (size_t l = 0; l < legend.n; l++)
				puts(legend.lines[l].text);
			top_frame_clear(&legend);
			return 0;
		case 'V':
			printf("rgaps-top %s\n", tool_version);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "rgaps-top: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	t.socket = tool_socket();
	tool_catch_signals(); /* sleeps end at SIGINT / SIGTERM */

	/* The first poll decides: no daemon, no view. */
	if (poll_stats(&t)) {
		fprintf(stderr, "rgaps-top: cannot reach rgapsd at %s: %s\n", t.socket, t.error);
		return 1;
	}
	rc = batch ? run_batch(&t, batch) : run_screen(&t);
	cJSON_Delete(t.prev.stats);
	cJSON_Delete(t.cur.stats);
	return rc;
}
