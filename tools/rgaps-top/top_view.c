/*
 * rgaps-top's view (top_view.h): tables of the `stats` reply. Each table
 * collects its cells first and sizes every column to its widest cell, so the
 * same frame reads well in a terminal and in a script's log. The reply's
 * layout is the daemon's (src/daemon/requests.c topic_summary(),
 * src/daemon/remote/stats.c rgapsd_remote_stats()); nothing here assumes a field
 * is present.
 */
#include "top_view.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"

#define CELL 72	    /* bytes of one table cell, NUL included */
#define MAX_COLS 16 /* columns of one table */
#define MIN_NUM_W 5 /* numeric columns are at least this wide, so they jump less */
#define COL_GAP 1   /* spaces between columns: the topics table fits 120 columns */

static const char *const section_names[TOP_NUM_SECTIONS] = { "topics", "peers" };
static const char *const sort_names[TOP_NUM_SORTS] = { "name", "msg/s", "bytes/s", "drops",
							 "lag" };

const char *top_section_name(enum top_section s)
{
	return (unsigned)s < TOP_NUM_SECTIONS ? section_names[s] : "?";
}

const char *top_sort_name(enum top_sort s)
{
	return (unsigned)s < TOP_NUM_SORTS ? sort_names[s] : "?";
}

/* ---------------------------------------------------------------- frame */

void top_frame_clear(struct top_frame *f)
{
	for (size_t i = 0; i < f->n; i++)
		free(f->lines[i].text);
	free(f->lines);
	memset(f, 0, sizeof(*f));
}

static void frame_add(struct top_frame *f, enum top_attr attr, char *text)
{
	if (!text) {
		f->oom = true;
		return;
	}
	if (f->n == f->cap) {
		size_t cap = f->cap ? 2 * f->cap : 64;
		struct top_line *l = realloc(f->lines, cap * sizeof(*l));

		if (!l) {
			free(text);
			f->oom = true;
			return;
		}
		f->lines = l;
		f->cap = cap;
	}
	f->lines[f->n] = (struct top_line){ .text = text, .attr = attr };
	f->n++;
}

void top_frame_printf(struct top_frame *f, enum top_attr attr, const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	frame_add(f, attr, s);
}

size_t top_frame_width(const struct top_frame *f)
{
	size_t w = 0;

	for (size_t i = 0; i < f->n; i++) {
		size_t l = strlen(f->lines[i].text);

		w = l > w ? l : w;
	}
	return w;
}

/* ---------------------------------------------------------------- values */

double top_rate(double cur, double prev, double dt_s)
{
	if (isnan(cur) || isnan(prev) || !(dt_s > 0) || cur < prev)
		return NAN;
	return (cur - prev) / dt_s;
}

/* NAN + x stays NAN: sums of fields keep "missing" visible. */
static double add(double a, double b)
{
	return a + b;
}

char *top_fmt_count(char *buf, size_t n, double v)
{
	static const char units[] = "kMGTPE";
	int u = -1;

	if (isnan(v)) {
		snprintf(buf, n, "-");
		return buf;
	}
	if (fabs(v) < 100000) {
		snprintf(buf, n, "%.0f", v);
		return buf;
	}
	while (fabs(v) >= 1000 && u < (int)sizeof(units) - 2) {
		v /= 1000;
		u++;
	}
	snprintf(buf, n, "%.1f%c", v, units[u]);
	return buf;
}

char *top_fmt_rate(char *buf, size_t n, double v)
{
	if (!isnan(v) && fabs(v) < 10 && v != 0) {
		snprintf(buf, n, "%.1f", v);
		return buf;
	}
	return top_fmt_count(buf, n, isnan(v) ? v : round(v));
}

char *top_fmt_bytes(char *buf, size_t n, double v)
{
	static const char units[] = "KMGTPE";
	int u = -1;

	if (isnan(v)) {
		snprintf(buf, n, "-");
		return buf;
	}
	if (fabs(v) < 1024) {
		snprintf(buf, n, "%.0fB", v);
		return buf;
	}
	while (fabs(v) >= 1024 && u < (int)sizeof(units) - 2) {
		v /= 1024;
		u++;
	}
	snprintf(buf, n, "%.1f%ciB", v, units[u]);
	return buf;
}

char *top_fmt_pct(char *buf, size_t n, double num, double den)
{
	if (isnan(num) || isnan(den) || !(den > 0))
		snprintf(buf, n, "-");
	else
		snprintf(buf, n, "%.1f%%", 100.0 * num / den);
	return buf;
}

char *top_fmt_duration(char *buf, size_t n, double s)
{
	uint64_t t;

	if (isnan(s) || s < 0) {
		snprintf(buf, n, "-");
		return buf;
	}
	t = (uint64_t)s;
	if (t < 60)
		snprintf(buf, n, "%.1fs", s);
	else if (t < 3600)
		snprintf(buf, n, "%um%02us", (unsigned)(t / 60), (unsigned)(t % 60));
	else if (t < 86400)
		snprintf(buf, n, "%uh%02um", (unsigned)(t / 3600), (unsigned)(t / 60 % 60));
	else
		snprintf(buf, n, "%ud%02uh", (unsigned)(t / 86400), (unsigned)(t / 3600 % 24));
	return buf;
}

static char *fmt_str(char *buf, size_t n, const char *s)
{
	snprintf(buf, n, "%s", s && *s ? s : "-");
	return buf;
}

/* "up" / "down" / "-" for a JSON boolean */
static const char *fmt_bool(const cJSON *o, const char *key, const char *yes, const char *no)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;

	if (!cJSON_IsBool(v))
		return "-";
	return cJSON_IsTrue(v) ? yes : no;
}

bool top_sample_restarted(const struct top_sample *prev, const struct top_sample *cur)
{
	const cJSON *pd, *cd;
	const char *pi, *ci;
	double pu, cu;

	if (!prev || !prev->stats || !cur || !cur->stats)
		return true;
	pd = cJSON_GetObjectItemCaseSensitive(prev->stats, "daemon");
	cd = cJSON_GetObjectItemCaseSensitive(cur->stats, "daemon");
	pi = tool_stats_str(pd, "instance");
	ci = tool_stats_str(cd, "instance");
	if ((pi || ci) && (!pi || !ci || strcmp(pi, ci) != 0))
		return true;
	pu = tool_stats_num(pd, "uptime_s");
	cu = tool_stats_num(cd, "uptime_s");
	return !isnan(pu) && !isnan(cu) && cu < pu;
}

/* ---------------------------------------------------------------- tables */

struct col {
	const char *title;
	bool left; /* text, left-aligned; numbers are right-aligned */
};

struct table {
	const struct col *cols;
	int ncols;
	char (*cells)[MAX_COLS][CELL];
	enum top_attr *attrs;
	size_t nrows, cap;
	bool oom;
};

static void table_init(struct table *t, const struct col *cols, int ncols)
{
	memset(t, 0, sizeof(*t));
	t->cols = cols;
	t->ncols = ncols < MAX_COLS ? ncols : MAX_COLS;
}

/* A new row, its cells "-" until filled; NULL when out of memory. */
static char (*table_row(struct table *t, enum top_attr attr))[CELL]
{
	if (t->nrows == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 16;
		void *c = realloc(t->cells, cap * sizeof(*t->cells));
		void *a;

		if (!c) {
			t->oom = true;
			return NULL;
		}
		t->cells = c;
		a = realloc(t->attrs, cap * sizeof(*t->attrs));
		if (!a) {
			t->oom = true;
			return NULL;
		}
		t->attrs = a;
		t->cap = cap;
	}
	for (int i = 0; i < MAX_COLS; i++)
		strcpy(t->cells[t->nrows][i], "-");
	t->attrs[t->nrows] = attr;
	return t->cells[t->nrows++];
}

static void table_line(struct top_frame *f, const struct table *t, const int *w,
		       enum top_attr attr, const char *const *cells, bool titles)
{
	char line[MAX_COLS * (CELL + 2) + 1];
	size_t o = 0;

	for (int i = 0; i < t->ncols && o < sizeof(line) - 1; i++) {
		o += (size_t)snprintf(line + o, sizeof(line) - o, t->cols[i].left ? "%-*s%*s" : "%*s%*s",
				      w[i], cells[i], i + 1 < t->ncols ? COL_GAP : 0, "");
	}
	if (o > sizeof(line) - 1)
		o = sizeof(line) - 1;
	while (o && line[o - 1] == ' ')
		line[--o] = 0;
	top_frame_printf(f, attr, "%s", line);
	if (f->n && !f->oom) {
		f->lines[f->n - 1].freeze = w[0] + COL_GAP;
		f->lines[f->n - 1].columns = titles;
	}
}

/* Emit the heading and the rows ("(none)" without rows), then free the table. */
static void table_emit(struct top_frame *f, struct table *t)
{
	const char *cells[MAX_COLS];
	int w[MAX_COLS];

	if (!t->nrows) {
		top_frame_printf(f, TOP_ATTR_NONE, "(none)");
		goto free_cells;
	}
	for (int i = 0; i < t->ncols; i++) {
		w[i] = (int)strlen(t->cols[i].title);
		if (!t->cols[i].left && w[i] < MIN_NUM_W)
			w[i] = MIN_NUM_W;
		for (size_t r = 0; r < t->nrows; r++) {
			int l = (int)strlen(t->cells[r][i]);

			w[i] = l > w[i] ? l : w[i];
		}
		cells[i] = t->cols[i].title;
	}
	table_line(f, t, w, TOP_ATTR_HEADING, cells, true);
	for (size_t r = 0; r < t->nrows; r++) {
		for (int i = 0; i < t->ncols; i++)
			cells[i] = t->cells[r][i];
		table_line(f, t, w, t->attrs[r], cells, false);
	}
free_cells:
	if (t->oom)
		f->oom = true;
	free(t->cells);
	free(t->attrs);
	memset(t, 0, sizeof(*t));
}

/* ---------------------------------------------------------------- legend */

/* Every column title of every table, once, with what it shows (sorted by title). */
static const struct {
	const char *title, *meaning;
} legend[] = {
	{ "B/S", "bytes per second through the ring" },
	{ "BAD_REGIONS", "shared memory regions of clients refused as malformed (the client is "
			 "disconnected; docs/SECURITY.md)" },
	{ "BYTES", "bytes published, in total" },
	{ "BYTES/S", "bytes published per second" },
	{ "CANCELLED", "loans given back unpublished" },
	{ "COPIES", "messages copied to this GPU's replica" },
	{ "COPIES/S", "copies to this GPU's replica per second" },
	{ "CQ_OVERFLOWS", "completion queue overflows of an RDMA link (each one resets the link)" },
	{ "CREDIT_STALLS", "times a sender waited for the receiver to give back room" },
	{ "DEFERRED", "topic set-ups the peer asked to retry later" },
	{ "DIR", "out: this host sends into the peer's ring; in: this host lands the peer's" },
	{ "DROPPED", "messages dropped (drop_oldest: forced out of the queue; rings: not landed)" },
	{ "DROPS", "messages skipped for subscribers that lagged (drop_oldest), reported to them "
		   "as gaps" },
	{ "FORWARDED", "messages of a local topic sent to peers" },
	{ "FRAG", "pool fragmentation: 0 (one free block) to 1 (free space in crumbs)" },
	{ "FROM_PEERS", "messages that came from peers and were published here" },
	{ "FULL_WAITS", "times a publisher waited for room (overflow block)" },
	{ "FWD/S", "messages forwarded per second" },
	{ "GAPS", "messages lost upstream (a peer restarted, a link broke), reported to "
		  "subscribers" },
	{ "GPU", "the GPU, as rgapsd numbers them" },
	{ "HELD", "messages subscribers hold now (taken, not yet released)" },
	{ "HOLDS", "messages this subscriber holds now" },
	{ "HOSTILE", "times the peer sent what the protocol forbids (it was refused)" },
	{ "IN_QUEUE", "messages in the queue now" },
	{ "LAG", "messages published and not yet taken by this subscriber" },
	{ "LINK", "the transport of a data link (tcp, verbs) or how a GPU reaches the pool" },
	{ "LINK_DOWNS", "times a data link to the peer failed" },
	{ "LOANED", "blocks loaned to publishers now (not yet committed)" },
	{ "LOANS", "loans made (publishers writing in place)" },
	{ "LOST", "messages that did not reach this GPU's replica" },
	{ "MACHINE", "a state machine of the remote path" },
	{ "MAX_LAG", "the largest LAG among the topic's subscribers" },
	{ "MEM", "where the payloads live: host or cuda" },
	{ "MSG/S", "messages published per second" },
	{ "MSGS", "messages published, in total" },
	{ "NO_PEER", "messages not sent: no peer wanted the topic" },
	{ "P50_US", "publish-to-take latency, median, in microseconds" },
	{ "P99_US", "publish-to-take latency, 99th percentile, in microseconds" },
	{ "PEER", "a peer daemon (its address)" },
	{ "PEER_B/S", "bytes per second that came from peers" },
	{ "PEER_REFUSED", "messages from peers refused here (counted as gaps)" },
	{ "PER_S", "transitions per second" },
	{ "PID", "the process" },
	{ "POOL", "bytes of the topic's pools in use (messages not yet retired)" },
	{ "POOL%", "POOL as a share of the pools' size" },
	{ "PUB/S", "messages this publisher publishes per second" },
	{ "PUBLISHED", "messages published" },
	{ "PUBS", "publishers attached" },
	{ "QUEUE", "queue entries in use / queue_depth" },
	{ "READY", "whether the ring is set up and usable" },
	{ "REC/S", "records (chunks) per second" },
	{ "REC_LANDED", "records (chunks) landed from the peer" },
	{ "REC_SENT", "records (chunks) sent to the peer" },
	{ "RECL_HOLDS", "holds of subscribers that died, reclaimed by rgapsd" },
	{ "RECL_LOANS", "loans of publishers that died, reclaimed by rgapsd" },
	{ "RECONNECTS", "times the session to the peer was set up again" },
	{ "RECORDS", "records (chunks) through the ring" },
	{ "RECORDS_LATE", "records that landed in a ring detached meanwhile (dropped)" },
	{ "REFUSALS", "topic set-ups the peer refused" },
	{ "REFUSED", "messages refused at landing (counted as gaps)" },
	{ "RELEASED", "messages released by subscribers" },
	{ "REMOTE_ORIGIN", "messages not forwarded: they came from a peer" },
	{ "RETIRED", "messages every subscriber is done with (their blocks are free)" },
	{ "RETRIES", "landings retried while the local pool had no room" },
	{ "RING_STALLS", "times the ring was full" },
	{ "RING_USED", "bytes of the receive ring in use" },
	{ "ROLE", "how the topic serves the GPU: pool, peer (reads the pool in place) or replica" },
	{ "RTT_MS", "round-trip time of the session's keepalive, in milliseconds" },
	{ "RX_B/S", "bytes per second landed from the peer" },
	{ "SESSIONS", "sessions set up with the peer" },
	{ "SLOT", "the subscriber's or publisher's slot in the topic" },
	{ "STAGED", "whether sends go through a host staging pool (GPU pools)" },
	{ "STAGED_CHUNKS", "chunks copied into the staging pool" },
	{ "STATE", "the session's or link's state" },
	{ "SUBS", "subscribers attached" },
	{ "SUBSCRIBES", "the topics the peer subscribes to" },
	{ "TAKEN", "messages taken by subscribers" },
	{ "TAKEN/S", "messages this subscriber takes per second" },
	{ "TIMEOUTS", "publishes that found no room within block_timeout_ms" },
	{ "TOO_LARGE", "messages not forwarded: larger than the peer's ring takes" },
	{ "TOPIC", "the topic" },
	{ "TOTAL", "transitions, in total" },
	{ "TRANSITION", "a state change of the machine (from->to)" },
	{ "TX_B/S", "bytes per second sent to the peer" },
	{ "UNROUTED", "messages published while the topic had no subscriber" },
};

const char *top_column_meaning(const char *title)
{
	for (size_t i = 0; title && i < sizeof(legend) / sizeof(legend[0]); i++)
		if (strcmp(legend[i].title, title) == 0)
			return legend[i].meaning;
	return NULL;
}

void top_render_legend(struct top_frame *f)
{
	top_frame_printf(f, TOP_ATTR_HEADING, "COLUMNS");
	for (size_t i = 0; i < sizeof(legend) / sizeof(legend[0]); i++)
		top_frame_printf(f, TOP_ATTR_NONE, "%-14s %s", legend[i].title, legend[i].meaning);
}

/* ---------------------------------------------------------------- lookups */

/* The elements of an array by their string member key, for lookups in O(log n). */
struct name_index {
	const cJSON **e;
	size_t n;
	const char *key;
};

static const char *name_index_key;

static int name_index_cmp(const void *a, const void *b)
{
	const char *x = tool_stats_str(*(const cJSON *const *)a, name_index_key);
	const char *y = tool_stats_str(*(const cJSON *const *)b, name_index_key);

	return strcmp(x ? x : "", y ? y : "");
}

/* false when out of memory (then lookups find nothing). */
static bool name_index_init(struct name_index *ix, const cJSON *arr, const char *key)
{
	const cJSON *e;

	ix->n = 0;
	ix->key = key;
	ix->e = malloc(sizeof(*ix->e) * ((size_t)cJSON_GetArraySize(arr) + 1));
	if (!ix->e)
		return false;
	cJSON_ArrayForEach(e, arr)
	ix->e[ix->n++] = e;
	name_index_key = key;
	qsort(ix->e, ix->n, sizeof(*ix->e), name_index_cmp);
	return true;
}

static const cJSON *name_index_find(const struct name_index *ix, const char *val)
{
	size_t lo = 0, hi = ix->n;

	while (val && lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const char *s = tool_stats_str(ix->e[mid], ix->key);
		int c = strcmp(s ? s : "", val);

		if (c == 0)
			return ix->e[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* A subscriber or publisher slot of the previous poll: same slot, same pid. */
static const cJSON *find_slot(const cJSON *arr, const cJSON *slot)
{
	double s = tool_stats_num(slot, "slot"), pid = tool_stats_num(slot, "pid");
	const cJSON *e;

	if (isnan(s))
		return NULL;
	cJSON_ArrayForEach(e, arr)
	{
		if (tool_stats_num(e, "slot") == s && tool_stats_num(e, "pid") == pid)
			return e;
	}
	return NULL;
}

static double dt_of(const struct top_sample *prev, const struct top_sample *cur)
{
	return prev && prev->stats ? cur->t_s - prev->t_s : NAN;
}

/* Rate of @p path between two objects (either may be NULL). */
static double rate_of(const cJSON *cur, const cJSON *prev, const char *path, double dt)
{
	return prev ? top_rate(tool_stats_num(cur, path), tool_stats_num(prev, path), dt) : NAN;
}

/* ---------------------------------------------------------------- header */

/* What rgapsd's limits refused or cut off (docs/CONFIG.md), once anything was: one line. */
static void top_render_limits(struct top_frame *f, const cJSON *d)
{
	static const struct {
		const char *key, *label;
	} lim[] = {
		{ "connections_refused", "connections refused" },
		{ "connections_refused_user", "refused by user quota" },
		{ "idle_closed", "idle closed" },
		{ "frame_timeouts", "frame timeouts" },
		{ "stalled_closed", "unread replies closed" },
		{ "read_pauses", "read pauses" },
		{ "attach_denied", "attaches denied" },
		{ "topics_refused_max", "topics over max" },
		{ "topics_refused_quota", "topics over quota" },
		{ "topics_refused_unconfigured", "unconfigured topics" },
		{ "topics_removed_idle", "idle topics removed" },
		{ "gpu_pools_refused", "GPU pools over gpu_reserve" },
	};
	char line[512], n[24];
	size_t off = 0;

	line[0] = '\0';
	for (size_t i = 0; i < sizeof(lim) / sizeof(lim[0]) && off < sizeof(line); i++) {
		double v = tool_stats_num(d, lim[i].key);

		if (isnan(v) || v <= 0)
			continue;
		off += (size_t)snprintf(line + off, sizeof(line) - off, "%s%s %s", off ? ", " : "",
					lim[i].label, top_fmt_count(n, sizeof(n), v));
	}
	if (off)
		top_frame_printf(f, TOP_ATTR_ALERT, "limits: %s", line);
}

/* How late the loop runs (daemon.loop): one line, an alert once it stalled. */
static void top_render_loop(struct top_frame *f, const cJSON *l)
{
	double stalls = tool_stats_num(l, "stalls");

	if (!l)
		return; /* an older rgapsd */
	top_frame_printf(f, stalls > 0 ? TOP_ATTR_ALERT : TOP_ATTR_NONE,
			 "loop lag %.1f ms (p99 %.1f, max %.1f)  stalls %.0f (%.1f s)  longest "
			 "turn %.1f ms of CPU",
			 tool_stats_num(l, "lag_ms"), tool_stats_num(l, "lag_p99_ms"),
			 tool_stats_num(l, "lag_max_ms"), stalls,
			 tool_stats_num(l, "stalled_ms") / 1e3,
			 tool_stats_num(l, "turn_cpu_max_ms"));
}

void top_render_header(struct top_frame *f, const cJSON *stats)
{
	const cJSON *d = tool_stats_get(stats, "daemon");
	char up[24], c[24], ct[24], rq[24], re[24], nt[24];
	const char *v = tool_stats_str(d, "version"), *in = tool_stats_str(d, "instance");

	top_frame_printf(f, TOP_ATTR_HEADING,
			 "rgapsd %s  instance %s  up %s  connections %s (%s total)  requests %s "
			 "(%s refused)  topics %s",
			 v ? v : "-", in ? in : "-",
			 top_fmt_duration(up, sizeof(up), tool_stats_num(d, "uptime_s")),
			 top_fmt_count(c, sizeof(c), tool_stats_num(d, "connections")),
			 top_fmt_count(ct, sizeof(ct), tool_stats_num(d, "connections_total")),
			 top_fmt_count(rq, sizeof(rq), tool_stats_num(d, "requests")),
			 top_fmt_count(re, sizeof(re), tool_stats_num(d, "request_errors")),
			 top_fmt_count(nt, sizeof(nt), tool_stats_num(d, "topics")));
	top_render_loop(f, tool_stats_get(d, "loop"));
	top_render_limits(f, d);
}

/* ---------------------------------------------------------------- topics */

struct topic_row {
	const cJSON *t, *p; /* this poll's topic, the previous poll's (or NULL) */
	const char *name;
	double msg_rate, byte_rate, drops, lag, gaps, key;
};

static double published(const cJSON *t)
{
	double v = tool_stats_num(t, "counters.published");

	return isnan(v) ? tool_stats_num(t, "published") : v;
}

static double published_bytes(const cJSON *t)
{
	double v = tool_stats_num(t, "counters.published_bytes");

	return isnan(v) ? tool_stats_num(t, "published_bytes") : v;
}

/* Largest lag of the topic's subscribers; NAN without any. */
static double max_lag(const cJSON *t)
{
	double m = NAN;
	const cJSON *s;

	cJSON_ArrayForEach(s, tool_stats_get(t, "subscriber_slots"))
	{
		double l = tool_stats_num(s, "lag");

		if (!isnan(l) && (isnan(m) || l > m))
			m = l;
	}
	return m;
}

/* Messages lost upstream on the topic's incoming rings; NAN without a peers section. */
static double topic_gaps(const cJSON *stats, const char *name)
{
	const cJSON *peers = tool_stats_get(stats, "peers"), *r;
	double g = 0;

	if (!peers || !name)
		return NAN;
	cJSON_ArrayForEach(r, tool_stats_get(peers, "rings"))
	{
		const char *t = tool_stats_str(r, "topic"), *dir = tool_stats_str(r, "direction");
		double v = tool_stats_num(r, "upstream_gaps");

		if (t && strcmp(t, name) == 0 && dir && strcmp(dir, "in") == 0 && !isnan(v))
			g += v;
	}
	return g;
}

static double sort_key(enum top_sort sort, const struct topic_row *r)
{
	switch (sort) {
	case TOP_SORT_MSG_RATE:
		return r->msg_rate;
	case TOP_SORT_BYTE_RATE:
		return r->byte_rate;
	case TOP_SORT_DROPS:
		return r->drops;
	case TOP_SORT_LAG:
		return r->lag;
	default:
		return 0;
	}
}

/* Descending by key (missing last), then ascending by name. */
static int cmp_rows(const void *a, const void *b)
{
	const struct topic_row *x = a, *y = b;
	double kx = isnan(x->key) ? -INFINITY : x->key, ky = isnan(y->key) ? -INFINITY : y->key;

	if (kx != ky)
		return kx < ky ? 1 : -1;
	return strcmp(x->name, y->name);
}

/* Publish -> take latency in microseconds, 3 significant digits ('-' when unknown). */
static void fmt_us(char *buf, size_t len, double us)
{
	if (isnan(us) || us < 0)
		snprintf(buf, len, "-");
	else if (us < 10)
		snprintf(buf, len, "%.2f", us);
	else if (us < 100)
		snprintf(buf, len, "%.1f", us);
	else
		snprintf(buf, len, "%.0f", us);
}

/* One row per topic, with its rates since the previous poll; NULL when out of memory. */
static struct topic_row *topic_rows(enum top_sort sort, const struct top_sample *prev,
				    const struct top_sample *cur, double dt, size_t *n_p)
{
	const cJSON *topics = tool_stats_get(cur->stats, "topics"), *ptopics = NULL, *t;
	struct topic_row *rows;
	size_t n = 0, cap = (size_t)cJSON_GetArraySize(topics);
	struct name_index pix;

	if (prev && prev->stats)
		ptopics = tool_stats_get(prev->stats, "topics");
	rows = calloc(cap ? cap : 1, sizeof(*rows));
	/* Thousands of topics: the previous poll's by name, not a scan per topic. */
	if (!rows || !name_index_init(&pix, ptopics, "name")) {
		free(rows);
		return NULL;
	}
	cJSON_ArrayForEach(t, topics)
	{
		struct topic_row *r;

		if (n == cap)
			break;
		r = &rows[n++];
		r->t = t;
		r->name = tool_stats_str(t, "name");
		if (!r->name)
			r->name = "?";
		r->p = name_index_find(&pix, r->name);
		r->msg_rate = r->p ? top_rate(published(t), published(r->p), dt) : NAN;
		r->byte_rate = r->p ? top_rate(published_bytes(t), published_bytes(r->p), dt) : NAN;
		r->drops = tool_stats_num(t, "counters.drops_total");
		r->lag = max_lag(t);
		/* rgapsd 0.1 after 2026-11-26 counts them per topic; older ones per live ring. */
		r->gaps = tool_stats_num(t, "from_peers.gaps");
		if (isnan(r->gaps))
			r->gaps = topic_gaps(cur->stats, r->name);
		r->key = sort_key(sort, r);
	}
	free(pix.e);
	qsort(rows, n, sizeof(*rows), cmp_rows);
	*n_p = n;
	return rows;
}

/* The main table's cells of one topic. */
static void topic_cells(char (*c)[CELL], const struct topic_row *r)
{
	double qu = tool_stats_num(r->t, "queue.used"), qd = tool_stats_num(r->t, "queue.depth");
	double pu = tool_stats_num(r->t, "pool.used_bytes"), ps = tool_stats_num(r->t, "pool.size");

	if (isnan(pu))
		pu = tool_stats_num(r->t, "pool_used");
	if (isnan(ps))
		ps = tool_stats_num(r->t, "pool_size");
	fmt_str(c[0], CELL, r->name);
	fmt_str(c[1], CELL, tool_stats_str(r->t, "memory"));
	top_fmt_count(c[2], CELL, tool_stats_num(r->t, "publishers"));
	top_fmt_count(c[3], CELL, tool_stats_num(r->t, "subscribers"));
	top_fmt_rate(c[4], CELL, r->msg_rate);
	top_fmt_bytes(c[5], CELL, r->byte_rate);
	top_fmt_count(c[6], CELL, published(r->t));
	top_fmt_bytes(c[7], CELL, published_bytes(r->t));
	top_fmt_bytes(c[8], CELL, pu);
	top_fmt_pct(c[9], CELL, pu, ps);
	if (!isnan(qu) || !isnan(qd)) {
		char a[24], b[24];

		snprintf(c[10], CELL, "%s/%s", top_fmt_count(a, sizeof(a), qu),
			 top_fmt_count(b, sizeof(b), qd));
	}
	top_fmt_count(c[11], CELL, r->drops);
	top_fmt_count(c[12], CELL, r->gaps);
	top_fmt_count(c[13], CELL, r->lag);
	fmt_us(c[14], CELL, tool_stats_num(r->t, "latency_us.p50"));
	fmt_us(c[15], CELL, tool_stats_num(r->t, "latency_us.p99"));
}

static void render_topic_table(struct top_frame *f, const struct topic_row *rows, size_t n)
{
	static const struct col cols[] = {
		{ "TOPIC", true }, { "MEM", true }, { "PUBS" },	  { "SUBS" },
		{ "MSG/S" },	   { "BYTES/S" },   { "MSGS" },	  { "BYTES" },
		{ "POOL" },	   { "POOL%" },	    { "QUEUE" },  { "DROPS" },
		{ "GAPS" },	   { "MAX_LAG" },   { "P50_US" }, { "P99_US" },
	};
	struct table tb;

	table_init(&tb, cols, (int)(sizeof(cols) / sizeof(cols[0])));
	for (size_t i = 0; i < n; i++) {
		const struct topic_row *r = &rows[i];
		bool alert = (!isnan(r->drops) && r->drops > 0) || (!isnan(r->gaps) && r->gaps > 0);
		char(*c)[CELL] = table_row(&tb, alert ? TOP_ATTR_ALERT : TOP_ATTR_NONE);

		if (!c)
			break;
		topic_cells(c, r);
	}
	table_emit(f, &tb);
}

/* A blank line, the table's heading, then an empty table of @cols. */
static void table_start(struct top_frame *f, struct table *t, const char *heading,
			const struct col *cols, int ncols)
{
	top_frame_printf(f, TOP_ATTR_NONE, "%s", "");
	top_frame_printf(f, TOP_ATTR_HEADING, "%s", heading);
	table_init(t, cols, ncols);
}

/* Fills the cells of one item @s of topic @name; @before: the previous poll's items. */
typedef void item_cells_fn(char (*c)[CELL], const char *name, const cJSON *s, const cJSON *before,
			   double dt);

/*
 * One row per item of each topic's array @key (its subscribers, publishers, GPUs),
 * in alert where the item's number @alert_key is above zero.
 */
static void table_items(struct table *tb, const struct topic_row *rows, size_t n, const char *key,
			const char *alert_key, item_cells_fn *fill, double dt)
{
	for (size_t i = 0; i < n; i++) {
		const cJSON *s, *before = tool_stats_get(rows[i].p, key);

		cJSON_ArrayForEach(s, tool_stats_get(rows[i].t, key))
		{
			double bad = alert_key ? tool_stats_num(s, alert_key) : NAN;
			char(*c)[CELL] = table_row(tb, !isnan(bad) && bad > 0 ? TOP_ATTR_ALERT
									      : TOP_ATTR_NONE);

			if (!c)
				break;
			fill(c, rows[i].name, s, before, dt);
		}
	}
}

/* A member's first cells: its topic, slot, pid, its @counter and that counter's rate. */
static void slot_cells(char (*c)[CELL], const char *name, const cJSON *s, const cJSON *pslots,
		       const char *counter, double dt)
{
	fmt_str(c[0], CELL, name);
	top_fmt_count(c[1], CELL, tool_stats_num(s, "slot"));
	top_fmt_count(c[2], CELL, tool_stats_num(s, "pid"));
	top_fmt_count(c[3], CELL, tool_stats_num(s, counter));
	top_fmt_rate(c[4], CELL, rate_of(s, find_slot(pslots, s), counter, dt));
}

static void sub_cells(char (*c)[CELL], const char *name, const cJSON *s, const cJSON *pslots,
		      double dt)
{
	slot_cells(c, name, s, pslots, "taken", dt);
	top_fmt_count(c[5], CELL, tool_stats_num(s, "lag"));
	top_fmt_count(c[6], CELL, tool_stats_num(s, "drops"));
	top_fmt_count(c[7], CELL, tool_stats_num(s, "holds"));
	fmt_us(c[8], CELL, tool_stats_num(s, "latency_us.p50"));
	fmt_us(c[9], CELL, tool_stats_num(s, "latency_us.p99"));
}

static void render_subscribers(struct top_frame *f, const struct topic_row *rows, size_t n,
			       double dt)
{
	static const struct col cols[] = {
		{ "TOPIC", true }, { "SLOT" },	{ "PID" },   { "TAKEN" },  { "TAKEN/S" },
		{ "LAG" },	   { "DROPS" }, { "HOLDS" }, { "P50_US" }, { "P99_US" },
	};
	struct table tb;

	table_start(f, &tb, "SUBSCRIBERS (lag: messages published, not yet taken)", cols,
		    (int)(sizeof(cols) / sizeof(cols[0])));
	table_items(&tb, rows, n, "subscriber_slots", "drops", sub_cells, dt);
	table_emit(f, &tb);
}

static void pub_cells(char (*c)[CELL], const char *name, const cJSON *s, const cJSON *pslots,
		      double dt)
{
	slot_cells(c, name, s, pslots, "published", dt);
	top_fmt_count(c[5], CELL, tool_stats_num(s, "loans"));
}

static void render_publishers(struct top_frame *f, const struct topic_row *rows, size_t n,
			      double dt)
{
	static const struct col cols[] = {
		{ "TOPIC", true }, { "SLOT" }, { "PID" }, { "PUBLISHED" }, { "PUB/S" }, { "LOANS" },
	};
	struct table tb;

	table_start(f, &tb, "PUBLISHERS", cols, (int)(sizeof(cols) / sizeof(cols[0])));
	table_items(&tb, rows, n, "publisher_slots", NULL, pub_cells, dt);
	table_emit(f, &tb);
}

/* How topic @name serves one GPU @g; @pg: the topic's GPUs at the previous poll. */
static void gpu_cells(char (*c)[CELL], const char *name, const cJSON *g, const cJSON *pg, double dt)
{
	const cJSON *before = NULL, *e;

	cJSON_ArrayForEach(e, pg)
	{
		if (tool_stats_num(e, "device") == tool_stats_num(g, "device"))
			before = e;
	}
	fmt_str(c[0], CELL, name);
	top_fmt_count(c[1], CELL, tool_stats_num(g, "device"));
	fmt_str(c[2], CELL, tool_stats_str(g, "role"));
	fmt_str(c[3], CELL, tool_stats_str(g, "link"));
	top_fmt_count(c[4], CELL, tool_stats_num(g, "sub_count"));
	top_fmt_count(c[5], CELL, tool_stats_num(g, "pub_count"));
	top_fmt_count(c[6], CELL, tool_stats_num(g, "copies"));
	top_fmt_rate(c[7], CELL, rate_of(g, before, "copies", dt));
	top_fmt_bytes(c[8], CELL, tool_stats_num(g, "bytes"));
	top_fmt_count(c[9], CELL, tool_stats_num(g, "lost"));
}

/* Several GPUs: how each topic serves each GPU, and the copies to it. */
static void render_gpus(struct top_frame *f, const struct topic_row *rows, size_t n, double dt)
{
	static const struct col cols[] = {
		{ "TOPIC", true }, { "GPU" },	 { "ROLE", true }, { "LINK", true }, { "SUBS" },
		{ "PUBS" },	   { "COPIES" }, { "COPIES/S" },   { "BYTES" },	     { "LOST" },
	};
	struct table tb;
	bool any = false;

	for (size_t i = 0; i < n && !any; i++)
		any = cJSON_GetArraySize(tool_stats_get(rows[i].t, "gpus")) > 0;
	if (!any)
		return;
	table_start(f, &tb,
		    "GPUS (pool: the topic's device; peer: reads it in place; "
		    "replica: rgapsd copies once per message)",
		    cols, (int)(sizeof(cols) / sizeof(cols[0])));
	table_items(&tb, rows, n, "gpus", "lost", gpu_cells, dt);
	table_emit(f, &tb);
}

/*
 * Where the topic's local messages are. stats has counters per step, not a
 * transition matrix per topic: in the queue, held by subscribers and loaned
 * to publishers are what the daemon reports now.
 */
static void lifecycle_cells(char (*c)[CELL], const struct topic_row *r)
{
	const cJSON *t1 = r->t, *s;
	double held = NAN, loaned = NAN;

	if (tool_stats_get(t1, "subscriber_slots"))
		held = 0;
	cJSON_ArrayForEach(s, tool_stats_get(t1, "subscriber_slots"))
	{
		held = add(held, tool_stats_num(s, "holds"));
	}
	if (tool_stats_get(t1, "publisher_slots"))
		loaned = 0;
	cJSON_ArrayForEach(s, tool_stats_get(t1, "publisher_slots"))
	{
		loaned = add(loaned, tool_stats_num(s, "loans"));
	}
	fmt_str(c[0], CELL, r->name);
	top_fmt_count(c[1], CELL, tool_stats_num(t1, "counters.loans"));
	top_fmt_count(c[2], CELL, published(t1));
	top_fmt_count(c[3], CELL, tool_stats_num(t1, "counters.taken"));
	top_fmt_count(c[4], CELL, tool_stats_num(t1, "counters.released"));
	top_fmt_count(c[5], CELL, tool_stats_num(t1, "counters.retired"));
	top_fmt_count(c[6], CELL, tool_stats_num(t1, "counters.cancelled"));
	top_fmt_count(c[7], CELL, tool_stats_num(t1, "counters.dropped"));
	top_fmt_count(c[8], CELL, tool_stats_num(t1, "counters.unrouted"));
	top_fmt_count(c[9], CELL, tool_stats_num(t1, "queue.used"));
	top_fmt_count(c[10], CELL, held);
	top_fmt_count(c[11], CELL, loaned);
}

static void render_lifecycle(struct top_frame *f, const struct topic_row *rows, size_t n)
{
	static const struct col cols[] = {
		{ "TOPIC", true }, { "LOANS" },	   { "PUBLISHED" }, { "TAKEN" },
		{ "RELEASED" },	   { "RETIRED" },  { "CANCELLED" }, { "DROPPED" },
		{ "UNROUTED" },	   { "IN_QUEUE" }, { "HELD" },	    { "LOANED" },
	};
	struct table tb;

	table_start(f, &tb,
		    "LIFECYCLE (loaned -> published -> taken -> released -> retired; now: "
		    "in queue, held, loaned)",
		    cols, (int)(sizeof(cols) / sizeof(cols[0])));
	for (size_t i = 0; i < n; i++) {
		char(*c)[CELL] = table_row(&tb, TOP_ATTR_NONE);

		if (!c)
			break;
		lifecycle_cells(c, &rows[i]);
	}
	table_emit(f, &tb);
}

static void render_flow(struct top_frame *f, const struct topic_row *rows, size_t n, double dt)
{
	static const struct col cols[] = {
		{ "TOPIC", true },  { "FULL_WAITS" },  { "TIMEOUTS" },	 { "RECL_HOLDS" },
		{ "RECL_LOANS" },   { "FRAG" },	       { "FROM_PEERS" }, { "PEER_B/S" },
		{ "PEER_REFUSED" }, { "BAD_REGIONS" },
	};
	struct table tb;

	table_start(f, &tb, "FLOW CONTROL AND RECOVERY", cols,
		    (int)(sizeof(cols) / sizeof(cols[0])));
	for (size_t i = 0; i < n; i++) {
		const cJSON *t1 = rows[i].t;
		double frag = tool_stats_num(t1, "pool.fragmentation");
		char(*c)[CELL] = table_row(&tb, TOP_ATTR_NONE);

		if (!c)
			break;
		fmt_str(c[0], CELL, rows[i].name);
		top_fmt_count(c[1], CELL, tool_stats_num(t1, "counters.full_waits"));
		top_fmt_count(c[2], CELL, tool_stats_num(t1, "counters.timeouts"));
		top_fmt_count(c[3], CELL, tool_stats_num(t1, "counters.reclaimed_holds"));
		top_fmt_count(c[4], CELL, tool_stats_num(t1, "counters.reclaimed_loans"));
		if (!isnan(frag))
			snprintf(c[5], CELL, "%.2f", frag);
		top_fmt_count(c[6], CELL, tool_stats_num(t1, "from_peers.messages"));
		top_fmt_bytes(c[7], CELL, rate_of(t1, rows[i].p, "from_peers.bytes", dt));
		top_fmt_count(c[8], CELL, tool_stats_num(t1, "from_peers.refused"));
		top_fmt_count(c[9], CELL, tool_stats_num(t1, "counters.bad_regions"));
	}
	table_emit(f, &tb);
}

static void render_topics(struct top_frame *f, enum top_sort sort, const struct top_sample *prev,
			  const struct top_sample *cur)
{
	double dt = dt_of(prev, cur);
	struct topic_row *rows;
	size_t n = 0;

	rows = topic_rows(sort, prev, cur, dt, &n);
	if (!rows) {
		f->oom = true;
		return;
	}
	top_frame_printf(f, TOP_ATTR_HEADING, "TOPICS (%zu)  sorted by %s", n, top_sort_name(sort));
	if (!tool_stats_get(cur->stats, "topics"))
		top_frame_printf(f, TOP_ATTR_ALERT, "stats has no topic list");
	render_topic_table(f, rows, n);
	render_subscribers(f, rows, n, dt);
	render_publishers(f, rows, n, dt);
	render_gpus(f, rows, n, dt);
	render_lifecycle(f, rows, n);
	render_flow(f, rows, n, dt);
	free(rows);
}

/* ---------------------------------------------------------------- peers */

/* Bytes per second over all of a peer's links, for sorting. */
static double peer_bytes_rate(const cJSON *p, const cJSON *pp, double dt)
{
	const cJSON *l;
	double sum = NAN;

	cJSON_ArrayForEach(l, tool_stats_get(p, "links"))
	{
		const cJSON *pl = tool_stats_get(tool_stats_get(pp, "links"), l->string);
		double tx = rate_of(l, pl, "bytes_sent", dt), rx = rate_of(l, pl, "bytes_landed", dt);

		if (!isnan(tx))
			sum = isnan(sum) ? tx : sum + tx;
		if (!isnan(rx))
			sum = isnan(sum) ? rx : sum + rx;
	}
	return sum;
}

struct peer_row {
	const cJSON *p, *pp;
	const char *name;
	double key;
};

static int cmp_peer_rows(const void *a, const void *b)
{
	const struct peer_row *x = a, *y = b;
	double kx = isnan(x->key) ? -INFINITY : x->key, ky = isnan(y->key) ? -INFINITY : y->key;

	if (kx != ky)
		return kx < ky ? 1 : -1;
	return strcmp(x->name, y->name);
}

/* States no message leaves: their count is a total, not messages in flight. */
static bool final_state(const char *s)
{
	/* "sent" ends a chunk; a message leaves it for "released" (then it has an out count). */
	static const char *const names[] = { "released", "dropped", "freed", "failed", "retired",
					     "sent" };

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(s, names[i]) == 0)
			return true;
	return false;
}

#define MAX_STATES 32

struct sm_state {
	char name[32];
	double in, out;
};

static struct sm_state *sm_state_of(struct sm_state *st, int *n, const char *name, size_t len)
{
	for (int i = 0; i < *n; i++)
		if (strlen(st[i].name) == len && memcmp(st[i].name, name, len) == 0)
			return &st[i];
	if (*n == MAX_STATES || len >= sizeof(st[0].name))
		return NULL;
	memcpy(st[*n].name, name, len);
	st[*n].name[len] = 0;
	st[*n].in = st[*n].out = 0;
	return &st[(*n)++];
}

/*
 * One state machine ("sender": {"->taken": 5, "taken->queued": 5, ...}): how
 * many messages are in each state now (entered minus left), then every
 * transition with its total and rate.
 */
static void render_machine(struct top_frame *f, const cJSON *m, const cJSON *pm, double dt)
{
	static const struct col cols[] = {
		{ "MACHINE", true }, { "TRANSITION", true }, { "TOTAL" }, { "PER_S" },
	};
	struct sm_state st[MAX_STATES];
	char now[512], done[512];
	size_t on = 0, dn = 0;
	struct table tb;
	const cJSON *tr;
	int n = 0;

	cJSON_ArrayForEach(tr, m)
	{
		const char *arrow = tr->string ? strstr(tr->string, "->") : NULL;
		struct sm_state *a, *b;

		if (!arrow || !cJSON_IsNumber(tr))
			continue;
		b = sm_state_of(st, &n, arrow + 2, strlen(arrow + 2));
		if (b)
			b->in += tr->valuedouble;
		if (arrow == tr->string)
			continue; /* "->x": entry into the first state */
		a = sm_state_of(st, &n, tr->string, (size_t)(arrow - tr->string));
		if (a && a != b)
			a->out += tr->valuedouble;
		else if (a)
			a->in -= tr->valuedouble; /* a loop leaves the count alone */
	}
	now[0] = done[0] = 0;
	for (int i = 0; i < n; i++) {
		char v[24];
		bool fin = final_state(st[i].name) && st[i].out == 0;
		char *buf = fin ? done : now;
		size_t *o = fin ? &dn : &on;

		top_fmt_count(v, sizeof(v), st[i].in - st[i].out);
		if (*o < sizeof(now))
			*o += (size_t)snprintf(buf + *o, sizeof(now) - *o, "%s%s %s", *o ? ", " : "",
					       st[i].name, v);
	}
	top_frame_printf(f, TOP_ATTR_NONE, "%s: in flight: %s; finished: %s", m->string ? m->string : "?",
			 on ? now : "none", dn ? done : "none");
	if (!n)
		return;
	table_init(&tb, cols, (int)(sizeof(cols) / sizeof(cols[0])));
	cJSON_ArrayForEach(tr, m)
	{
		const char *k = tr->string;
		const cJSON *ptr = k ? tool_stats_get(pm, k) : NULL;
		char(*c)[CELL];

		if (!k || !cJSON_IsNumber(tr))
			continue;
		c = table_row(&tb, strstr(k, "->dropped") || strstr(k, "->failed") ? TOP_ATTR_ALERT :
										      TOP_ATTR_NONE);
		if (!c)
			break;
		fmt_str(c[0], CELL, m->string);
		fmt_str(c[1], CELL, k);
		top_fmt_count(c[2], CELL, tr->valuedouble);
		top_fmt_rate(c[3], CELL,
			     cJSON_IsNumber(ptr) ? top_rate(tr->valuedouble, ptr->valuedouble, dt) :
			     pm			 ? top_rate(tr->valuedouble, 0, dt) :
						   NAN);
	}
	table_emit(f, &tb);
}

/*
 * Where the hosts come from: "static" (the peers list), or etcd with its state, lease,
 * hosts and round trips; an etcd that does not answer is an alert (everything is kept).
 */
static void render_membership(struct top_frame *f, const cJSON *m)
{
	const char *src = tool_stats_str(m, "source"), *state = tool_stats_str(m, "state");
	const char *err = tool_stats_str(m, "last_error");
	char h[24], mi[24], j[24], l[24], rq[24], fl[24], ev[24], dur[24];

	if (!m)
		return;
	if (!src || strcmp(src, "etcd") != 0) {
		top_frame_printf(f, TOP_ATTR_NONE, "MEMBERSHIP  %s  hosts %s", src ? src : "-",
				 top_fmt_count(h, sizeof(h), tool_stats_num(m, "hosts")));
		return;
	}
	top_frame_printf(f, TOP_ATTR_NONE,
			 "MEMBERSHIP  etcd %s  %s  prefix %s  lease %s (%s s)  hosts %s (%s "
			 "missing)  joined %s  left %s",
			 state ? state : "-",
			 tool_stats_str(m, "endpoint") ? tool_stats_str(m, "endpoint") : "-",
			 tool_stats_str(m, "prefix") ? tool_stats_str(m, "prefix") : "-",
			 tool_stats_str(m, "lease") ? tool_stats_str(m, "lease") : "-",
			 top_fmt_count(dur, sizeof(dur), tool_stats_num(m, "lease_ttl_s")),
			 top_fmt_count(h, sizeof(h), tool_stats_num(m, "hosts")),
			 top_fmt_count(mi, sizeof(mi), tool_stats_num(m, "hosts_missing")),
			 top_fmt_count(j, sizeof(j), tool_stats_num(m, "joined")),
			 top_fmt_count(l, sizeof(l), tool_stats_num(m, "left")));
	top_frame_printf(f, TOP_ATTR_NONE,
			 "etcd: rtt %.3f ms (avg %.3f, max %.3f)  requests %s  failures "
			 "%s  watch events %s",
			 tool_stats_num(m, "etcd.rtt_ms"), tool_stats_num(m, "etcd.rtt_ms_avg"),
			 tool_stats_num(m, "etcd.rtt_ms_max"),
			 top_fmt_count(rq, sizeof(rq), tool_stats_num(m, "etcd.requests")),
			 top_fmt_count(fl, sizeof(fl), tool_stats_num(m, "etcd.failures")),
			 top_fmt_count(ev, sizeof(ev), tool_stats_num(m, "etcd.watch_events")));
	if (state && strcmp(state, "unreachable") == 0)
		top_frame_printf(
			f, TOP_ATTR_ALERT,
			"etcd UNREACHABLE for %s: every session and topic is kept; %s",
			top_fmt_duration(dur, sizeof(dur), tool_stats_num(m, "unreachable_s")),
			err && err[0] ? err : "no reason given");
}

static void render_peers(struct top_frame *f, enum top_sort sort, const struct top_sample *prev,
			 const struct top_sample *cur)
{
	static const struct col peer_cols[] = {
		{ "PEER", true },   { "STATE", true }, { "SESSIONS" },	 { "RECONNECTS" },
		{ "RTT_MS" },	    { "LINK_DOWNS" },  { "REFUSALS" },	 { "DEFERRED" },
		{ "HOSTILE" },	    { "SUBSCRIBES", true },
	};
	static const struct col link_cols[] = {
		{ "PEER", true }, { "LINK", true },  { "STATE", true },	  { "REC_SENT" },
		{ "REC_LANDED" }, { "REC/S" },	     { "TX_B/S" },	  { "RX_B/S" },
		{ "CREDIT_STALLS" }, { "CQ_OVERFLOWS" }, { "RECORDS_LATE" },
	};
	static const struct col ring_cols[] = {
		{ "TOPIC", true },   { "DIR", true },	{ "PEER", true },     { "LINK", true },
		{ "READY", true },   { "RECORDS" },	{ "REC/S" },	      { "B/S" },
		{ "RING_USED" },     { "CREDIT_STALLS" }, { "RING_STALLS" },  { "DROPPED" },
		{ "GAPS" },	     { "REFUSED" },	{ "RETRIES" },
	};
	static const struct col fw_cols[] = {
		{ "TOPIC", true },    { "FORWARDED" },	{ "FWD/S" },	     { "NO_PEER" },
		{ "REMOTE_ORIGIN" },  { "TOO_LARGE" },	{ "STAGED", true },  { "STAGED_CHUNKS" },
	};
	const cJSON *peers = tool_stats_get(cur->stats, "peers"), *pprev = NULL, *p, *x;
	double dt = dt_of(prev, cur);
	struct peer_row *rows;
	size_t n = 0, cap;
	struct table tb;
	char a[24], b[24], c1[24], d[24], e[24];

	if (prev && prev->stats)
		pprev = tool_stats_get(prev->stats, "peers");
	if (!peers) {
		top_frame_printf(f, TOP_ATTR_HEADING, "PEERS");
		top_frame_printf(f, TOP_ATTR_NONE,
				 "no peers section in stats: this rgapsd has no remote transport "
				 "(no listen address or peers configured)");
		return;
	}
	top_frame_printf(f, TOP_ATTR_HEADING,
			 "PEERS  listen %s  accepted %s  auth failures %s  unknown peers %s  "
			 "protocol errors %s  unknown link tokens %s",
			 tool_stats_str(peers, "listen") ? tool_stats_str(peers, "listen") : "-",
			 top_fmt_count(a, sizeof(a), tool_stats_num(peers, "accepted")),
			 top_fmt_count(b, sizeof(b), tool_stats_num(peers, "auth_failures")),
			 top_fmt_count(c1, sizeof(c1), tool_stats_num(peers, "unknown_peers")),
			 top_fmt_count(d, sizeof(d), tool_stats_num(peers, "protocol_errors")),
			 top_fmt_count(e, sizeof(e), tool_stats_num(peers, "unknown_link_tokens")));
	render_membership(f, tool_stats_get(peers, "membership"));

	cap = (size_t)cJSON_GetArraySize(tool_stats_get(peers, "sessions"));
	rows = calloc(cap ? cap : 1, sizeof(*rows));
	if (!rows) {
		f->oom = true;
		return;
	}
	cJSON_ArrayForEach(p, tool_stats_get(peers, "sessions"))
	{
		struct peer_row *r;

		if (n == cap)
			break;
		r = &rows[n++];
		r->p = p;
		r->name = tool_stats_str(p, "name") ? tool_stats_str(p, "name") : "?";
		r->pp = tool_stats_find(tool_stats_get(pprev, "sessions"), "name", r->name);
		r->key = sort == TOP_SORT_NAME ? 0 : peer_bytes_rate(p, r->pp, dt);
	}
	qsort(rows, n, sizeof(*rows), cmp_peer_rows);

	table_init(&tb, peer_cols, (int)(sizeof(peer_cols) / sizeof(peer_cols[0])));
	for (size_t i = 0; i < n; i++) {
		const char *state = fmt_bool(rows[i].p, "up", "up", "down");
		char(*c)[CELL] = table_row(&tb, strcmp(state, "down") == 0 ? TOP_ATTR_ALERT :
									      TOP_ATTR_NONE);
		double rtt = tool_stats_num(rows[i].p, "rtt_ms");
		size_t o = 0;

		if (!c)
			break;
		fmt_str(c[0], CELL, rows[i].name);
		fmt_str(c[1], CELL, state);
		top_fmt_count(c[2], CELL, tool_stats_num(rows[i].p, "sessions"));
		top_fmt_count(c[3], CELL, tool_stats_num(rows[i].p, "reconnects"));
		if (!isnan(rtt))
			snprintf(c[4], CELL, "%.3f", rtt);
		top_fmt_count(c[5], CELL, tool_stats_num(rows[i].p, "link_downs"));
		top_fmt_count(c[6], CELL, tool_stats_num(rows[i].p, "setup_refusals"));
		top_fmt_count(c[7], CELL, tool_stats_num(rows[i].p, "setups_deferred"));
		top_fmt_count(c[8], CELL, tool_stats_num(rows[i].p, "hostile"));
		if (cJSON_IsArray(tool_stats_get(rows[i].p, "subscribes")))
			c[9][0] = 0;
		cJSON_ArrayForEach(x, tool_stats_get(rows[i].p, "subscribes"))
		{
			if (!cJSON_IsString(x) || o >= CELL)
				continue;
			o += (size_t)snprintf(c[9] + o, CELL - o, "%s%s", o ? "," : "", x->valuestring);
		}
		if (o >= CELL)
			memcpy(c[9] + CELL - 4, "...", 4);
		if (cJSON_IsArray(tool_stats_get(rows[i].p, "subscribes")) && !o)
			strcpy(c[9], "(none)");
	}
	table_emit(f, &tb);

	top_frame_printf(f, TOP_ATTR_NONE, "%s", "");
	top_frame_printf(f, TOP_ATTR_HEADING, "LINKS (data connections; links never set up are left out)");
	table_init(&tb, link_cols, (int)(sizeof(link_cols) / sizeof(link_cols[0])));
	for (size_t i = 0; i < n; i++) {
		const cJSON *l, *plinks = tool_stats_get(rows[i].pp, "links");

		cJSON_ArrayForEach(l, tool_stats_get(rows[i].p, "links"))
		{
			const char *state = tool_stats_str(l, "state");
			const cJSON *pl = l->string ? tool_stats_get(plinks, l->string) : NULL;
			double cs = tool_stats_num(l, "send_credit_stalls"),
			       ov = tool_stats_num(l, "cq_overflows");
			double rs, rl;
			char(*c)[CELL];

			if (state && strcmp(state, "none") == 0)
				continue;
			c = table_row(&tb, (!isnan(ov) && ov > 0) ? TOP_ATTR_ALERT : TOP_ATTR_NONE);
			if (!c)
				break;
			fmt_str(c[0], CELL, rows[i].name);
			fmt_str(c[1], CELL, l->string);
			fmt_str(c[2], CELL, state);
			top_fmt_count(c[3], CELL, tool_stats_num(l, "records_sent"));
			top_fmt_count(c[4], CELL, tool_stats_num(l, "records_landed"));
			rs = rate_of(l, pl, "records_sent", dt);
			rl = rate_of(l, pl, "records_landed", dt);
			top_fmt_rate(c[5], CELL, isnan(rs) ? rl : isnan(rl) ? rs : rs + rl);
			top_fmt_bytes(c[6], CELL, rate_of(l, pl, "bytes_sent", dt));
			top_fmt_bytes(c[7], CELL, rate_of(l, pl, "bytes_landed", dt));
			top_fmt_count(c[8], CELL, cs);
			top_fmt_count(c[9], CELL, ov);
			top_fmt_count(c[10], CELL, tool_stats_num(l, "records_late"));
		}
	}
	table_emit(f, &tb);

	top_frame_printf(f, TOP_ATTR_NONE, "%s", "");
	top_frame_printf(f, TOP_ATTR_HEADING, "RINGS (out: this host sends; in: this host lands)");
	table_init(&tb, ring_cols, (int)(sizeof(ring_cols) / sizeof(ring_cols[0])));
	cJSON_ArrayForEach(x, tool_stats_get(peers, "rings"))
	{
		const cJSON *pr = NULL, *r2;
		double gaps = tool_stats_num(x, "upstream_gaps"),
		       dropped = tool_stats_num(x, "dropped_messages");
		char(*c)[CELL];

		/* The same ring in the previous poll: topic, direction, peer and id. */
		cJSON_ArrayForEach(r2, tool_stats_get(pprev, "rings"))
		{
			const char *k[] = { "topic", "direction", "peer" };
			bool same = tool_stats_num(r2, "ring_id") == tool_stats_num(x, "ring_id");

			for (int i = 0; same && i < 3; i++) {
				const char *s1 = tool_stats_str(x, k[i]),
					   *s2 = tool_stats_str(r2, k[i]);

				same = s1 && s2 && strcmp(s1, s2) == 0;
			}
			if (same) {
				pr = r2;
				break;
			}
		}
		c = table_row(&tb, (!isnan(gaps) && gaps > 0) || (!isnan(dropped) && dropped > 0) ?
					   TOP_ATTR_ALERT :
					   TOP_ATTR_NONE);
		if (!c)
			break;
		fmt_str(c[0], CELL, tool_stats_str(x, "topic"));
		fmt_str(c[1], CELL, tool_stats_str(x, "direction"));
		fmt_str(c[2], CELL, tool_stats_str(x, "peer"));
		fmt_str(c[3], CELL, tool_stats_str(x, "transport"));
		fmt_str(c[4], CELL, fmt_bool(x, "ready", "yes", "no"));
		top_fmt_count(c[5], CELL, tool_stats_num(x, "records"));
		top_fmt_rate(c[6], CELL, rate_of(x, pr, "records", dt));
		top_fmt_bytes(c[7], CELL, rate_of(x, pr, "bytes", dt));
		top_fmt_bytes(c[8], CELL, tool_stats_num(x, "ring_used"));
		top_fmt_count(c[9], CELL, tool_stats_num(x, "credit_stalls"));
		top_fmt_count(c[10], CELL, tool_stats_num(x, "ring_stalls"));
		top_fmt_count(c[11], CELL, dropped);
		top_fmt_count(c[12], CELL, gaps);
		top_fmt_count(c[13], CELL, tool_stats_num(x, "refused"));
		top_fmt_count(c[14], CELL, tool_stats_num(x, "blocked_retries"));
	}
	table_emit(f, &tb);

	top_frame_printf(f, TOP_ATTR_NONE, "%s", "");
	top_frame_printf(f, TOP_ATTR_HEADING, "FORWARDERS (local topics sent to peers)");
	table_init(&tb, fw_cols, (int)(sizeof(fw_cols) / sizeof(fw_cols[0])));
	cJSON_ArrayForEach(x, tool_stats_get(peers, "forwarders"))
	{
		const cJSON *pf = tool_stats_find(tool_stats_get(pprev, "forwarders"), "topic",
						  tool_stats_str(x, "topic"));
		char(*c)[CELL] = table_row(&tb, TOP_ATTR_NONE);

		if (!c)
			break;
		fmt_str(c[0], CELL, tool_stats_str(x, "topic"));
		top_fmt_count(c[1], CELL, tool_stats_num(x, "forwarded"));
		top_fmt_rate(c[2], CELL, rate_of(x, pf, "forwarded", dt));
		top_fmt_count(c[3], CELL, tool_stats_num(x, "no_interested_peer"));
		top_fmt_count(c[4], CELL, tool_stats_num(x, "skipped_remote_origin"));
		top_fmt_count(c[5], CELL, tool_stats_num(x, "too_large_for_ring"));
		fmt_str(c[6], CELL, fmt_bool(x, "staged", "yes", "no"));
		top_fmt_count(c[7], CELL, tool_stats_num(x, "staged_chunks"));
	}
	table_emit(f, &tb);

	top_frame_printf(f, TOP_ATTR_NONE, "%s", "");
	top_frame_printf(f, TOP_ATTR_HEADING,
			 "STATE MACHINES (remote path, all topics: messages in each state now; "
			 "transitions)");
	if (!tool_stats_get(peers, "state_machine"))
		top_frame_printf(f, TOP_ATTR_NONE, "(not in stats)");
	cJSON_ArrayForEach(x, tool_stats_get(peers, "state_machine"))
	{
		const cJSON *pm = NULL;

		if (!cJSON_IsObject(x))
			continue;
		if (pprev && x->string)
			pm = tool_stats_get(tool_stats_get(pprev, "state_machine"), x->string);
		render_machine(f, x, pm, dt);
	}
	free(rows);
}

void top_render_section(struct top_frame *f, enum top_section section, enum top_sort sort,
			const struct top_sample *prev, const struct top_sample *cur)
{
	if (!cur || !cur->stats) {
		top_frame_printf(f, TOP_ATTR_ALERT, "no data yet");
		return;
	}
	if (prev && top_sample_restarted(prev, cur))
		prev = NULL;
	if (section == TOP_SECTION_PEERS)
		render_peers(f, sort, prev, cur);
	else
		render_topics(f, sort, prev, cur);
}
