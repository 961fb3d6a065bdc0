/*
 * Unit tests of rgaps-top's view (top_view.c): number formatting, rates from
 * two polls (and none across a daemon restart), sorting, the state-machine
 * occupancy, and replies with fields missing or of the wrong type, which
 * must print "-" and never crash; the topics table fits 120 columns, the
 * first column stays when scrolling, and every column title is explained.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stats.h"
#include "top_view.h"

/* Render @p section of cur (prev may be NULL) and return the lines joined by '\n'. */
static char *render(const char *prev_json, const char *cur_json, double dt, enum top_section s,
		    enum top_sort sort)
{
	struct top_sample prev = { .stats = prev_json ? cJSON_Parse(prev_json) : NULL, .t_s = 10 };
	struct top_sample cur = { .stats = cJSON_Parse(cur_json), .t_s = 10 + dt };
	struct top_frame f = { 0 };
	size_t len = 1;
	char *out;

	assert_non_null(cur.stats);
	top_render_header(&f, cur.stats);
	top_render_section(&f, s, sort, prev_json ? &prev : NULL, &cur);
	assert_false(f.oom);
	for (size_t i = 0; i < f.n; i++)
		len += strlen(f.lines[i].text) + 1;
	out = calloc(1, len);
	assert_non_null(out);
	for (size_t i = 0; i < f.n; i++) {
		strcat(out, f.lines[i].text);
		strcat(out, "\n");
	}
	top_frame_clear(&f);
	cJSON_Delete(prev.stats);
	cJSON_Delete(cur.stats);
	return out;
}

/* The line of @p text that starts with @p prefix (static copy). */
static const char *line_of(const char *text, const char *prefix)
{
	static char line[1024];
	const char *p = text;

	while (p && *p) {
		const char *nl = strchr(p, '\n');
		size_t l = nl ? (size_t)(nl - p) : strlen(p);

		if (strncmp(p, prefix, strlen(prefix)) == 0 && l < sizeof(line)) {
			memcpy(line, p, l);
			line[l] = 0;
			return line;
		}
		p = nl ? nl + 1 : NULL;
	}
	return NULL;
}

/* Token @p i (from 0) of a line of whitespace-separated cells (static copy). */
static const char *tok(const char *line, int i)
{
	static char t[128];
	const char *p = line;
	size_t l;

	assert_non_null(line);
	for (;;) {
		p += strspn(p, " ");
		l = strcspn(p, " ");
		if (!l)
			return "";
		if (i-- == 0)
			break;
		p += l;
	}
	assert_true(l < sizeof(t));
	memcpy(t, p, l);
	t[l] = 0;
	return t;
}

static void test_format(void **state)
{
	char b[32];

	assert_string_equal(top_fmt_count(b, sizeof(b), NAN), "-");
	assert_string_equal(top_fmt_count(b, sizeof(b), 0), "0");
	assert_string_equal(top_fmt_count(b, sizeof(b), 99999), "99999");
	assert_string_equal(top_fmt_count(b, sizeof(b), 1234567), "1.2M");
	assert_string_equal(top_fmt_rate(b, sizeof(b), 0.5), "0.5");
	assert_string_equal(top_fmt_rate(b, sizeof(b), 333.3), "333");
	assert_string_equal(top_fmt_rate(b, sizeof(b), NAN), "-");
	assert_string_equal(top_fmt_bytes(b, sizeof(b), 512), "512B");
	assert_string_equal(top_fmt_bytes(b, sizeof(b), 1048576), "1.0MiB");
	assert_string_equal(top_fmt_bytes(b, sizeof(b), NAN), "-");
	assert_string_equal(top_fmt_pct(b, sizeof(b), 1, 4), "25.0%");
	assert_string_equal(top_fmt_pct(b, sizeof(b), 1, 0), "-");
	assert_string_equal(top_fmt_duration(b, sizeof(b), 366), "6m06s");
	assert_string_equal(top_fmt_duration(b, sizeof(b), 90000), "1d01h");
	assert_string_equal(top_fmt_duration(b, sizeof(b), NAN), "-");
}

static void test_values(void **state)
{
	cJSON *o = cJSON_Parse("{\"a\":{\"b\":3,\"s\":\"x\",\"t\":true},\"n\":null}");

	assert_true(tool_stats_num(o, "a.b") == 3);
	assert_true(tool_stats_num(o, "a.t") == 1);
	assert_true(isnan(tool_stats_num(o, "a.s")));
	assert_true(isnan(tool_stats_num(o, "a.missing")));
	assert_true(isnan(tool_stats_num(o, "n.x")));
	assert_true(isnan(tool_stats_num(NULL, "a")));
	assert_string_equal(tool_stats_str(cJSON_GetObjectItem(o, "a"), "s"), "x");
	assert_null(tool_stats_str(o, "a"));
	assert_true(top_rate(30, 10, 2) == 10);
	assert_true(isnan(top_rate(5, 10, 2))); /* counter went back: restarted */
	assert_true(isnan(top_rate(5, 1, 0)));
	assert_true(isnan(top_rate(NAN, 1, 1)));
	cJSON_Delete(o);
}

#define DAEMON(up) "\"daemon\":{\"version\":\"0.1.0\",\"instance\":\"tx\",\"uptime_s\":" #up "}"
#define TOPIC(name, pub, bytes, drops)                                                        \
	"{\"name\":\"" name "\",\"memory\":\"host\",\"subscribers\":1,\"publishers\":0,"      \
	"\"counters\":{\"published\":" #pub ",\"published_bytes\":" #bytes                   \
	",\"drops_total\":" #drops "},\"queue\":{\"depth\":64,\"used\":3},"                  \
	"\"pool\":{\"size\":1000,\"used_bytes\":250},"                                       \
	"\"subscriber_slots\":[{\"slot\":0,\"pid\":42,\"taken\":" #pub ",\"lag\":7}]}"

static void test_topic_rates(void **state)
{
	const char *prev = "{" DAEMON(1) ",\"topics\":[" TOPIC("cam", 100, 1000, 0) "]}";
	const char *cur = "{" DAEMON(3) ",\"topics\":[" TOPIC("cam", 300, 3000, 0) "]}";
	char *out = render(prev, cur, 2.0, TOP_SECTION_TOPICS, TOP_SORT_MSG_RATE);
	const char *l = line_of(out, "cam ");

	assert_non_null(strstr(out, "rgapsd 0.1.0  instance tx"));
	assert_non_null(l);
	/* TOPIC MEM PUBS SUBS MSG/S BYTES/S MSGS BYTES POOL POOL% QUEUE DROPS GAPS MAX_LAG:
	 * 200 messages, 2000 bytes in 2 s; 300 total; pool 25%; queue 3/64; no peers; lag 7 */
	assert_string_equal(tok(l, 1), "host");
	assert_string_equal(tok(l, 2), "0");
	assert_string_equal(tok(l, 3), "1");
	assert_string_equal(tok(l, 4), "100");
	assert_string_equal(tok(l, 5), "1000B");
	assert_string_equal(tok(l, 6), "300");
	assert_string_equal(tok(l, 7), "2.9KiB");
	assert_string_equal(tok(l, 8), "250B");
	assert_string_equal(tok(l, 9), "25.0%");
	assert_string_equal(tok(l, 10), "3/64");
	assert_string_equal(tok(l, 11), "0");
	assert_string_equal(tok(l, 12), "-");
	assert_string_equal(tok(l, 13), "7");
	free(out);

	/* Without a previous poll the rates are "-", the totals are there. */
	out = render(NULL, cur, 2.0, TOP_SECTION_TOPICS, TOP_SORT_NAME);
	l = line_of(out, "cam ");
	assert_string_equal(tok(l, 4), "-");
	assert_string_equal(tok(l, 5), "-");
	assert_string_equal(tok(l, 6), "300");
	free(out);
}

static void test_restart_resets_rates(void **state)
{
	/* Uptime went back: the daemon restarted, its counters start over. */
	const char *prev = "{" DAEMON(100) ",\"topics\":[" TOPIC("cam", 100, 1000, 0) "]}";
	const char *cur = "{" DAEMON(1) ",\"topics\":[" TOPIC("cam", 300, 3000, 0) "]}";
	struct top_sample p = { .stats = cJSON_Parse(prev) }, c = { .stats = cJSON_Parse(cur) };
	char *out;

	assert_true(top_sample_restarted(&p, &c));
	assert_false(top_sample_restarted(&c, &c));
	cJSON_Delete(p.stats);
	cJSON_Delete(c.stats);
	out = render(prev, cur, 1.0, TOP_SECTION_TOPICS, TOP_SORT_NAME);
	assert_string_equal(tok(line_of(out, "cam "), 4), "-");
	free(out);
}

static void test_sort(void **state)
{
	const char *prev = "{" DAEMON(1) ",\"topics\":[" TOPIC("aaa", 0, 0, 0) "," TOPIC("zzz", 0, 0, 5) "]}";
	const char *cur = "{" DAEMON(2) ",\"topics\":[" TOPIC("aaa", 10, 10, 0) "," TOPIC("zzz", 500, 500, 9) "]}";
	char *out;

	out = render(prev, cur, 1.0, TOP_SECTION_TOPICS, TOP_SORT_NAME);
	assert_true(strstr(out, "\naaa ") < strstr(out, "\nzzz "));
	free(out);
	out = render(prev, cur, 1.0, TOP_SECTION_TOPICS, TOP_SORT_MSG_RATE);
	assert_true(strstr(out, "\nzzz ") < strstr(out, "\naaa "));
	free(out);
	out = render(prev, cur, 1.0, TOP_SECTION_TOPICS, TOP_SORT_DROPS);
	assert_true(strstr(out, "\nzzz ") < strstr(out, "\naaa "));
	free(out);
}

static void test_missing_fields(void **state)
{
	static const char *const replies[] = {
		"{}",
		"{\"ok\":true}",
		"{\"daemon\":7,\"topics\":{}}",
		"{\"topics\":[{}]}",
		"{\"topics\":[{\"name\":5,\"counters\":[1,2],\"subscriber_slots\":{\"x\":1}}]}",
		"{\"topics\":[{\"name\":\"bare\",\"memory\":\"host\"}],\"peers\":{}}",
		"{\"peers\":{\"sessions\":[{},{\"name\":\"h\",\"up\":false,\"links\":{\"tcp\":{}}}],"
		"\"rings\":[{}],\"forwarders\":[{}],\"state_machine\":{\"s\":{\"->\":1,\"x\":2,"
		"\"a->\":3,\"y\":\"z\"}}}}",
		"{\"peers\":{\"sessions\":7,\"rings\":\"x\",\"state_machine\":[1]}}",
	};

	for (size_t i = 0; i < sizeof(replies) / sizeof(replies[0]); i++) {
		for (int s = 0; s < TOP_NUM_SECTIONS; s++) {
			char *out = render(replies[i], replies[i], 1.0, (enum top_section)s,
					   TOP_SORT_MSG_RATE);

			assert_non_null(strstr(out, "rgapsd"));
			free(out);
		}
	}
	/* A topic whose counters could not be read: name and memory, then "-". */
	{
		char *out = render(NULL, replies[5], 1.0, TOP_SECTION_TOPICS, TOP_SORT_NAME);
		const char *l = line_of(out, "bare ");

		assert_string_equal(tok(l, 1), "host");
		for (int i = 2; i < 14; i++) /* GAPS: a peers section without rings has none */
			assert_string_equal(tok(l, i), i == 12 ? "0" : "-");
		free(out);
	}
}

/* The limits' counters: one alert line once anything was refused, none before. */
static void test_limits(void **state)
{
	char *quiet = render(NULL, "{\"daemon\":{\"connections_refused\":0,\"idle_closed\":0},"
				   "\"topics\":[]}",
			     1, TOP_SECTION_TOPICS, TOP_SORT_NAME);
	char *out = render(NULL,
			   "{\"daemon\":{\"connections_refused_user\":1936,\"idle_closed\":64,"
			   "\"topics_refused_quota\":90},\"topics\":[]}",
			   1, TOP_SECTION_TOPICS, TOP_SORT_NAME);

	assert_null(strstr(quiet, "limits:"));
	assert_string_equal(line_of(out, "limits:"),
			    "limits: refused by user quota 1936, idle closed 64, topics over quota 90");
	free(quiet);
	free(out);
}

static void test_peers(void **state)
{
	const char *prev =
		"{" DAEMON(1) ",\"topics\":[],\"peers\":{\"listen\":\"127.0.0.1:1\","
		"\"sessions\":[{\"name\":\"10.0.0.2:7000\",\"up\":true,\"sessions\":1,"
		"\"links\":{\"tcp\":{\"state\":\"up\",\"records_sent\":10,\"bytes_sent\":1024,"
		"\"cq_overflows\":0},\"verbs\":{\"state\":\"none\"}}}],"
		"\"state_machine\":{\"sender\":{\"->taken\":10,\"taken->queued\":10,"
		"\"queued->sent\":8,\"sent->released\":8}}}}";
	const char *cur =
		"{" DAEMON(2) ",\"topics\":[],\"peers\":{\"listen\":\"127.0.0.1:1\","
		"\"sessions\":[{\"name\":\"10.0.0.2:7000\",\"up\":false,\"sessions\":2,"
		"\"links\":{\"tcp\":{\"state\":\"up\",\"records_sent\":30,\"bytes_sent\":3072,"
		"\"cq_overflows\":1},\"verbs\":{\"state\":\"none\"}}}],"
		"\"state_machine\":{\"sender\":{\"->taken\":30,\"taken->queued\":29,"
		"\"queued->sent\":25,\"sent->released\":20,\"queued->dropped\":1}}}}";
	char *out = render(prev, cur, 2.0, TOP_SECTION_PEERS, TOP_SORT_BYTE_RATE);
	const char *l;

	l = line_of(out, "10.0.0.2:7000 down");
	assert_non_null(l);
	/* PEER LINK STATE REC_SENT REC_LANDED REC/S TX_B/S RX_B/S CREDIT_STALLS CQ_OVERFLOWS */
	l = line_of(out, "10.0.0.2:7000 tcp");
	assert_string_equal(tok(l, 3), "30");
	assert_string_equal(tok(l, 5), "10");	  /* 20 records in 2 s */
	assert_string_equal(tok(l, 6), "1.0KiB"); /* 2048 bytes in 2 s */
	assert_string_equal(tok(l, 9), "1");
	assert_null(line_of(out, "10.0.0.2:7000 verbs"));
	/* taken 30-29 = 1, queued 29-25-1 = 3, sent 25-20 = 5; released 20, dropped 1 */
	l = line_of(out, "sender: ");
	assert_non_null(l);
	assert_string_equal(l, "sender: in flight: taken 1, queued 3, sent 5; "
			       "finished: released 20, dropped 1");
	l = line_of(out, "sender  queued->dropped");
	assert_string_equal(tok(l, 2), "1");
	assert_string_equal(tok(l, 3), "0.5"); /* new since the last poll: 1 in 2 s */
	free(out);

	out = render(NULL, "{\"topics\":[]}", 1.0, TOP_SECTION_PEERS, TOP_SORT_NAME);
	assert_non_null(strstr(out, "no peers section"));
	free(out);
}

/* A frame of every section of cur (prev: the poll before), for the layout tests. */
static void render_frame(struct top_frame *f, const char *prev_json, const char *cur_json)
{
	struct top_sample prev = { .stats = cJSON_Parse(prev_json), .t_s = 10 };
	struct top_sample cur = { .stats = cJSON_Parse(cur_json), .t_s = 12 };

	assert_non_null(prev.stats);
	assert_non_null(cur.stats);
	for (int s = 0; s < TOP_NUM_SECTIONS; s++)
		top_render_section(f, (enum top_section)s, TOP_SORT_NAME, &prev, &cur);
	assert_false(f->oom);
	cJSON_Delete(prev.stats);
	cJSON_Delete(cur.stats);
}

/* A stats reply with every table filled: two topics (GPUs on one), a peer, a ring. */
#define FULL_TOPIC(name, pub)                                                                \
	"{\"name\":\"" name "\",\"memory\":\"cuda\",\"subscribers\":12,\"publishers\":3,"     \
	"\"counters\":{\"published\":" #pub ",\"published_bytes\":" #pub "000000,"               \
	"\"drops_total\":123456,\"taken\":" #pub ",\"released\":1,\"retired\":1,"              \
	"\"loans\":1,\"cancelled\":1,\"dropped\":1,\"unrouted\":1,\"full_waits\":99999,"       \
	"\"timeouts\":1,\"reclaimed_holds\":1,\"reclaimed_loans\":1,\"bad_regions\":0},"        \
	"\"queue\":{\"depth\":1024,\"used\":1000},"                                               \
	"\"pool\":{\"size\":4294967296,\"used_bytes\":3500000000,\"fragmentation\":0.25},"       \
	"\"latency_us\":{\"p50\":12345,\"p99\":123456},\"from_peers\":{\"messages\":5,"        \
	"\"bytes\":500,\"refused\":0,\"gaps\":77},"                                               \
	"\"gpus\":[{\"device\":1,\"role\":\"replica\",\"link\":\"nvlink\",\"sub_count\":4,"     \
	"\"pub_count\":0,\"copies\":9,\"bytes\":900,\"lost\":0}],"                                \
	"\"subscriber_slots\":[{\"slot\":11,\"pid\":4194304,\"taken\":" #pub ",\"lag\":1000,"    \
	"\"holds\":16,\"drops\":0,\"latency_us\":{\"p50\":1,\"p99\":2}}],"                       \
	"\"publisher_slots\":[{\"slot\":2,\"pid\":4194303,\"published\":" #pub ",\"loans\":1}]}"
#define FULL_PEERS(rec)                                                                      \
	"\"peers\":{\"listen\":\"10.0.0.1:7000\",\"sessions\":[{\"name\":\"10.0.0.2:7000\","       \
	"\"up\":true,\"sessions\":1,\"reconnects\":0,\"rtt_ms\":0.2,\"link_downs\":0,"           \
	"\"subscribes\":[\"camera-front-left\"],\"links\":{\"tcp\":{\"state\":\"up\","           \
	"\"records_sent\":" #rec ",\"records_landed\":1,\"bytes_sent\":1,\"bytes_landed\":1}}}],"   \
	"\"rings\":[{\"topic\":\"camera-front-left\",\"direction\":\"out\",\"peer\":"           \
	"\"10.0.0.2:7000\",\"transport\":\"tcp\",\"ready\":true,\"ring_id\":1,\"records\":"      \
	#rec "}],\"forwarders\":[{\"topic\":\"camera-front-left\",\"forwarded\":" #rec "}],"      \
	"\"state_machine\":{\"sender\":{\"->taken\":" #rec ",\"taken->sent\":1}}}"

static const char full_prev[] = "{" DAEMON(1) ",\"topics\":[" FULL_TOPIC("camera-front-left", 1)
				"," FULL_TOPIC("depth", 1) "]," FULL_PEERS(1) "}";
static const char full_cur[] = "{" DAEMON(3) ",\"topics\":["
			       FULL_TOPIC("camera-front-left", 9999999) ","
			       FULL_TOPIC("depth", 9999999) "]," FULL_PEERS(99) "}";

/* The main topics table of a busy topic with a 17-character name fits a 120-column terminal. */
static void test_topics_fit_120(void **state)
{
	struct top_frame f = { 0 };
	size_t i;

	render_frame(&f, full_prev, full_cur);
	for (i = 0; i < f.n && strncmp(f.lines[i].text, "TOPIC ", 6) != 0; i++)
		;
	assert_true(i + 2 < f.n);
	for (size_t k = i; k < i + 3; k++) { /* the titles and both rows */
		if (strlen(f.lines[k].text) > 120)
			fail_msg("%zu columns: %s", strlen(f.lines[k].text), f.lines[k].text);
	}
	assert_non_null(strstr(f.lines[i].text, "P99_US"));
	top_frame_clear(&f);
}

/* Every line of a table keeps its first column (and the gap after it) in place when scrolled. */
static void test_first_column_frozen(void **state)
{
	struct top_frame f = { 0 };
	int tables = 0;

	render_frame(&f, full_prev, full_cur);
	for (size_t i = 0; i < f.n; i++) {
		const struct top_line *l = &f.lines[i];
		size_t first = strcspn(l->text, " ");

		if (!l->columns)
			continue;
		tables++;
		/* the titles and every row of the table after them */
		assert_true(i + 1 < f.n && f.lines[i + 1].freeze > 0 && !f.lines[i + 1].columns);
		for (size_t k = i; k < f.n && f.lines[k].freeze && (k == i || !f.lines[k].columns);
		     k++) {
			assert_int_equal(f.lines[k].freeze, f.lines[i].freeze);
			assert_true((size_t)f.lines[k].freeze > first);
			assert_true(f.lines[k].text[f.lines[k].freeze - 1] == ' ' ||
				    strlen(f.lines[k].text) < (size_t)f.lines[k].freeze);
		}
	}
	assert_true(tables >= 8);
	/* text that is no table scrolls whole */
	assert_int_equal(f.lines[0].freeze, 0);
	top_frame_clear(&f);
}

/* Every column title of every table has a meaning in the legend ('?', --legend). */
static void test_legend_covers_columns(void **state)
{
	struct top_frame f = { 0 }, legend = { 0 };
	int titles = 0;

	render_frame(&f, full_prev, full_cur);
	for (size_t i = 0; i < f.n; i++) {
		char buf[1024], *save = NULL;

		if (!f.lines[i].columns)
			continue;
		snprintf(buf, sizeof(buf), "%s", f.lines[i].text);
		for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
			if (!top_column_meaning(t))
				fail_msg("column %s has no meaning in the legend", t);
			titles++;
		}
	}
	assert_true(titles > 60);
	assert_null(top_column_meaning("JRNL_ROLLBK"));
	top_render_legend(&legend);
	assert_true(legend.n > 60);
	assert_non_null(line_of(legend.lines[0].text, "COLUMNS"));
	top_frame_clear(&legend);
	top_frame_clear(&f);
}

static void test_membership(void **state)
{
	const char *live =
		"{" DAEMON(1) ",\"topics\":[],\"peers\":{\"listen\":\"127.0.0.1:1\","
		"\"membership\":{\"source\":\"etcd\",\"state\":\"live\",\"prefix\":\"/rgaps\","
		"\"endpoint\":\"http://e:2379\",\"lease\":\"held\",\"lease_ttl_s\":10,"
		"\"hosts\":11,\"hosts_missing\":0,\"joined\":12,\"left\":1,"
		"\"etcd\":{\"requests\":40,\"failures\":0,\"watch_events\":13,\"rtt_ms\":1.5,"
		"\"rtt_ms_avg\":2,\"rtt_ms_max\":9}},\"sessions\":[]}}";
	const char *away =
		"{" DAEMON(2) ",\"topics\":[],\"peers\":{\"listen\":\"127.0.0.1:1\","
		"\"membership\":{\"source\":\"etcd\",\"state\":\"unreachable\","
		"\"unreachable_s\":75,\"last_error\":\"listing the hosts: no etcd member "
		"answered\"},\"sessions\":[]}}";
	const char *fixed = "{" DAEMON(1) ",\"topics\":[],\"peers\":{\"listen\":\"127.0.0.1:1\","
			    "\"membership\":{\"source\":\"static\",\"hosts\":3},"
			    "\"sessions\":[]}}";
	char *out = render(NULL, live, 1.0, TOP_SECTION_PEERS, TOP_SORT_NAME);

	assert_string_equal(line_of(out, "MEMBERSHIP"),
			    "MEMBERSHIP  etcd live  http://e:2379  prefix /rgaps  lease held (10 s)  "
			    "hosts 11 (0 missing)  joined 12  left 1");
	assert_string_equal(line_of(out, "etcd: rtt"),
			    "etcd: rtt 1.500 ms (avg 2.000, max 9.000)  requests 40  failures 0  "
			    "watch events 13");
	assert_null(strstr(out, "UNREACHABLE"));
	free(out);
	out = render(NULL, away, 1.0, TOP_SECTION_PEERS, TOP_SORT_NAME);
	assert_string_equal(line_of(out, "etcd UNREACHABLE"),
			    "etcd UNREACHABLE for 1m15s: every session and topic is kept; listing "
			    "the hosts: no etcd member answered");
	free(out);
	out = render(NULL, fixed, 1.0, TOP_SECTION_PEERS, TOP_SORT_NAME);
	assert_string_equal(line_of(out, "MEMBERSHIP"), "MEMBERSHIP  static  hosts 3");
	free(out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_values),
		cmocka_unit_test(test_topic_rates),
		cmocka_unit_test(test_restart_resets_rates),
		cmocka_unit_test(test_sort),
		cmocka_unit_test(test_missing_fields),
		cmocka_unit_test(test_peers),
		cmocka_unit_test(test_membership),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_topics_fit_120),
		cmocka_unit_test(test_first_column_frozen),
		cmocka_unit_test(test_legend_covers_columns),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
