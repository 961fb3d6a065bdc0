/*
 * rgaps: the command-line tool. `pub` and `sub` exercise a topic end to end
 * with a verifiable payload (tools/lib/pattern.h); `topics` and `stats` query
 * the daemon. Uses only the public API (include/rgaps/rgaps.h).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "paged.h"
#include "pattern.h"
#include "prometheus.h"
#include "rgaps/rgaps.h"
#include "tool.h"

static int parse_size_arg(const char *opt, const char *s, uint64_t *v)
{
	if (tool_parse_size(s, v) != 0) {
		fprintf(stderr, "rgaps: %s: cannot parse size '%s'\n", opt, s);
		return -1;
	}
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* min * (max/min)^f: sizes spread evenly over orders of magnitude */
static double pow_ratio(uint64_t max, uint64_t min, double f)
{
	return exp(f * log((double)max / (double)min));
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rgaps COMMAND [options]\n"
		"  pub TOPIC --count N --size BYTES[-MAXBYTES] [--rate HZ] [--wait-subscribers N]\n"
		"            [--timeout SEC] [--loan] [--fixed-payload]\n"
		"  sub TOPIC --count N [--verify] [--timeout SEC] [--allow-gaps] [--hold-ms MS]\n"
		"            [--latency]\n"
		"  topics [--json]\n"
		"  stats [TOPIC] [--json | --prometheus]\n"
		"The daemon is found at $RGAPS_SOCKET (default %s).\n",
		tool_default_socket());
}

/* ---------------------------------------------------------------- queries */

/* The whole reply, every page merged (paged.h); the error printed. */
static int query(const char *type, const char *topic, cJSON **reply_p)
{
	char err[512];
	int r = rgaps_tool_query(type, topic, reply_p, err, sizeof(err));

	if (r)
		fprintf(stderr, "rgaps: %s: %s\n", type, err);
	return r;
}

static double num(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* "0:pool 1:peer 2:replica" from a topic's "gpus" (issue 8); "-" on a host without GPUs. */
static const char *gpus_of(const cJSON *t, char *buf, size_t len)
{
	const cJSON *g;
	size_t n = 0;

	buf[0] = 0;
	cJSON_ArrayForEach(g, cJSON_GetObjectItem(t, "gpus"))
	{
		const cJSON *role = cJSON_GetObjectItem(g, "role");

		if (n + 24 >= len)
			break;
		n += (size_t)snprintf(buf + n, len - n, "%s%.0f:%s", n ? " " : "", num(g, "device"),
				      cJSON_IsString(role) ? role->valuestring : "?");
	}
	return buf[0] ? buf : "-";
}

static int cmd_topics(int argc, char **argv, bool stats)
{
	const char *topic = NULL;
	bool json = false, prom = false;
	cJSON *reply, *arr, *t;
	char *out;

	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			json = true;
		else if (stats && strcmp(argv[i], "--prometheus") == 0)
			prom = true;
		else if (stats && !topic && argv[i][0] != '-')
			topic = argv[i];
		else {
			fprintf(stderr, "rgaps: unexpected argument '%s'\n", argv[i]);
			return 2;
		}
	}
	if (query(stats ? "stats" : "topics", topic, &reply))
		return 1;
	if (prom) {
		int r = rgaps_stats_prometheus(reply, stdout);

		cJSON_Delete(reply);
		if (r)
			fprintf(stderr, "rgaps: stats: cannot write the Prometheus text\n");
		return r ? 1 : 0;
	}
	if (json) {
		out = cJSON_Print(reply);
		puts(out);
		free(out);
		cJSON_Delete(reply);
		return 0;
	}
	arr = cJSON_GetObjectItem(reply, "topics");
	if (!stats) {
		printf("%-24s %-6s %5s %5s %12s %12s %12s  %s\n", "TOPIC", "MEMORY", "PUBS", "SUBS",
		       "PUBLISHED", "POOL_USED", "POOL_SIZE", "GPUS");
		cJSON_ArrayForEach(t, arr)
		{
			char gpus[256];

			printf("%-24s %-6s %5.0f %5.0f %12.0f %12.0f %12.0f  %s\n",
			       cJSON_GetObjectItem(t, "name")->valuestring,
			       cJSON_GetObjectItem(t, "memory")->valuestring, num(t, "publishers"),
			       num(t, "subscribers"), num(t, "published"), num(t, "pool_used"),
			       num(t, "pool_size"), gpus_of(t, gpus, sizeof(gpus)));
		}
	} else {
		cJSON *d = cJSON_GetObjectItem(reply, "daemon");

		printf("rgapsd %s instance %s: up %.0f s, %.0f connections, %.0f requests "
		       "(%.0f refused)\n",
		       cJSON_GetObjectItem(d, "version")->valuestring,
		       cJSON_GetObjectItem(d, "instance")->valuestring, num(d, "uptime_s"),
		       num(d, "connections"), num(d, "requests"), num(d, "request_errors"));
		cJSON_ArrayForEach(t, arr)
		{
			cJSON *c = cJSON_GetObjectItem(t, "counters");
			cJSON *p = cJSON_GetObjectItem(t, "pool");
			cJSON *q = cJSON_GetObjectItem(t, "queue");
			cJSON *s;

			printf("topic %s (%s): %.0f pubs, %.0f subs\n",
			       cJSON_GetObjectItem(t, "name")->valuestring,
			       cJSON_GetObjectItem(t, "memory")->valuestring, num(t, "publishers"),
			       num(t, "subscribers"));
			printf("  published %.0f (%.0f bytes), taken %.0f, dropped %.0f, drops %.0f, "
			       "full waits %.0f, timeouts %.0f\n",
			       num(c, "published"), num(c, "published_bytes"), num(c, "taken"),
			       num(c, "dropped"), num(c, "drops_total"), num(c, "full_waits"),
			       num(c, "timeouts"));
			printf("  pool %.0f/%.0f bytes used, %.0f blocks, fragmentation %.2f; "
			       "queue %.0f/%.0f\n",
			       num(p, "used_bytes"), num(p, "size"), num(p, "used_blocks"),
			       num(p, "fragmentation"), num(q, "used"), num(q, "depth"));
			cJSON_ArrayForEach(s, cJSON_GetObjectItem(t, "gpus"))
			{
				cJSON *why = cJSON_GetObjectItem(s, "why");
				cJSON *role = cJSON_GetObjectItem(s, "role");

				printf("  GPU %.0f: %s, %.0f subs, %.0f pubs, %.0f copies (%.0f bytes), "
				       "%.0f lost: %s\n",
				       num(s, "device"), cJSON_IsString(role) ? role->valuestring : "?",
				       num(s, "sub_count"), num(s, "pub_count"), num(s, "copies"),
				       num(s, "bytes"), num(s, "lost"),
				       cJSON_IsString(why) ? why->valuestring : "");
			}
			cJSON_ArrayForEach(s, cJSON_GetObjectItem(t, "subscriber_slots"))
			printf("  sub slot %.0f pid %.0f: taken %.0f lag %.0f drops %.0f holds %.0f\n",
			       num(s, "slot"), num(s, "pid"), num(s, "taken"), num(s, "lag"),
			       num(s, "drops"), num(s, "holds"));
		}
	}
	cJSON_Delete(reply);
	return 0;
}

/* ---------------------------------------------------------------- pub */

static int wait_subscribers(const char *topic, int want, double deadline)
{
	while (!tool_interrupted && tool_now_s() < deadline) {
		cJSON *reply = NULL, *t;
		int have = 0;

		if (query("topics", NULL, &reply) == 0) {
			cJSON_ArrayForEach(t, cJSON_GetObjectItem(reply, "topics"))
			if (strcmp(cJSON_GetObjectItem(t, "name")->valuestring, topic) == 0)
				have = (int)num(t, "subscribers");
			cJSON_Delete(reply);
		}
		if (have >= want)
			return 0;
		usleep(20 * 1000);
	}
	fprintf(stderr, "rgaps pub: fewer than %d subscribers on '%s' before the timeout\n", want,
		topic);
	return -1;
}

/* A decimal count for OPT, all of it digits. */
static int parse_count(const char *opt, const char *s, uint64_t *v)
{
	char *end;

	errno = 0;
	*v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s == '-') {
		fprintf(stderr, "rgaps: %s: '%s' is not a count\n", opt, s);
		return -1;
	}
	return 0;
}

static int cmd_pub(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "count", required_argument, NULL, 'n' },
		{ "size", required_argument, NULL, 's' },
		{ "rate", required_argument, NULL, 'r' },
		{ "wait-subscribers", required_argument, NULL, 'w' },
		{ "timeout", required_argument, NULL, 't' },
		{ "loan", no_argument, NULL, 'L' },
		{ "fixed-payload", no_argument, NULL, 'F' },
		{ 0 },
	};
	bool fixed = false;
	uint64_t count = 1, smin = 4096, smax = 4096, failures = 0, bytes = 0, published = 0;
	double rate = 0, timeout = 30, t0, t1;
	int want_subs = 0, c, r = 0;
	bool loan = false;
	rgaps_publisher_t *pub;
	const char *topic;
	uint8_t *buf;

	if (argc < 2 || argv[1][0] == '-') {
		usage(stderr);
		return 2;
	}
	topic = argv[1];
	optind = 2;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		char *dash;

		switch (c) {
		case 'n':
			if (parse_count("--count", optarg, &count))
				return 2;
			break;
		case 's':
			dash = strchr(optarg, '-');
			if (dash) {
				*dash = 0;
				if (parse_size_arg("--size", optarg, &smin) ||
				    parse_size_arg("--size", dash + 1, &smax))
					return 2;
			} else {
				if (parse_size_arg("--size", optarg, &smin))
					return 2;
				smax = smin;
			}
			break;
		case 'r':
			rate = atof(optarg);
			break;
		case 'w':
			want_subs = atoi(optarg);
			break;
		case 't':
			timeout = atof(optarg);
			break;
		case 'L':
			loan = true;
			break;
		case 'F':
			fixed = true;
			break;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (smin < RGAPS_PATTERN_HDR || smax < smin) {
		fprintf(stderr, "rgaps pub: --size must be >= %u bytes (and MIN <= MAX)\n",
			RGAPS_PATTERN_HDR);
		return 2;
	}
	pub = rgaps_publisher_init(topic);
	if (!pub) {
		fprintf(stderr, "rgaps pub: cannot attach to '%s': %s\n", topic,
			rgaps_strerror(errno));
		return 1;
	}
	{
		rgaps_topic_info_t info = { .struct_size = sizeof(info) };

		/* This tool touches payloads from the CPU: loans on a GPU pool are device memory. */
		if (loan && rgaps_publisher_info(pub, &info) == 0 && info.memory == RGAPS_MEMORY_CUDA) {
			fprintf(stderr, "rgaps pub: topic '%s' lives in GPU memory: --loan would write "
					"device memory from the CPU; use push (default)\n", topic);
			rgaps_publisher_destroy(pub);
			return 2;
		}
	}
	buf = malloc(smax);
	if (!buf) {
		rgaps_publisher_destroy(pub);
		return 1;
	}
	if (want_subs && wait_subscribers(topic, want_subs, tool_now_s() + timeout)) {
		free(buf);
		rgaps_publisher_destroy(pub);
		return 1;
	}
	srand(12345);
	t0 = tool_now_s();
	for (uint64_t i = 0; i < count && !tool_interrupted; i++) {
		uint64_t size = smin;

		if (smax > smin) {
			/* log-uniform sizes so small and large messages both occur */
			double f = (double)rand() / RAND_MAX;

			size = (uint64_t)((double)smin * pow_ratio(smax, smin, f));
			size = size < smin ? smin : size > smax ? smax : size;
		}
		if (loan) {
			rgaps_loan_t l;

			r = rgaps_publisher_loan(pub, size, -1, &l);
			if (r == 0) {
				rgaps_pattern_fill(l.data, size, i);
				r = rgaps_publisher_commit(pub, &l, size);
			}
		} else {
			/* --fixed-payload: fill once (throughput runs; not verifiable after the first) */
			if (!fixed)
				rgaps_pattern_fill(buf, size, i);
			else if (i == 0)
				rgaps_pattern_fill(buf, smax, 0);
			r = rgaps_publisher_push(pub, size, buf);
		}
		if (r == -EINTR && tool_interrupted)
			break; /* stopped while it waited for room: not a failure */
		if (r) {
			failures++;
			fprintf(stderr, "rgaps pub: message %" PRIu64 " (%" PRIu64 " bytes): %s\n", i,
				size, rgaps_strerror(r));
			if (r == -ENOTCONN)
				break;
			continue;
		}
		bytes += size;
		published++;
		if (rate > 0) {
			double next = t0 + (double)(i + 1) / rate, now = tool_now_s();

			if (next > now)
				usleep((useconds_t)((next - now) * 1e6));
		}
	}
	t1 = tool_now_s();
	printf("published %" PRIu64 " messages (%" PRIu64 " bytes) in %.3f s: %.0f msg/s, "
	       "%.1f MiB/s; failures %" PRIu64 "\n",
	       published, bytes, t1 - t0, (double)published / (t1 - t0),
	       (double)bytes / (1 << 20) / (t1 - t0), failures);
	free(buf);
	rgaps_publisher_destroy(pub);
	return failures ? 1 : 0;
}

/* ---------------------------------------------------------------- sub */

/*
 * The payload oracle of `sub --verify`: every byte of a message must be the
 * pattern (tools/lib/pattern.h) for its origin sequence number, the place it
 * has in its publisher's stream; and in each stream those places must follow
 * each other but for the losses reported. So a corrupted, duplicated, stale or
 * reordered message is a mismatch, not only one whose bytes disagree with its
 * own header. Streams are told apart by rgaps_msg_info(); messages that come
 * from another host carry the sequence number they had there.
 */
struct vstream {
	uint64_t id;			   /* rgaps_msg_info_t.stream */
	struct rgaps_pattern_stream place; /* origin sequence numbers (delivery order) */
	uint64_t last_seq;		   /* rgaps_msg_t.seq of its previous message */
	bool have_seq;
};

struct subscriber_state {
	struct vstream *streams;
	size_t nstreams, cap;
	uint64_t reported; /* mismatches described so far */
};

#define VERIFY_REPORT_MAX 20 /* mismatches described on stderr; the rest are counted */

static struct vstream *stream_of(struct subscriber_state *st, uint64_t id)
{
	struct vstream *v;

	for (size_t i = 0; i < st->nstreams; i++)
		if (st->streams[i].id == id)
			return &st->streams[i];
	if (st->nstreams == st->cap) {
		size_t cap = st->cap ? 2 * st->cap : 8;

		v = realloc(st->streams, cap * sizeof(*v));
		if (!v)
			return NULL;
		st->streams = v;
		st->cap = cap;
	}
	v = &st->streams[st->nstreams++];
	memset(v, 0, sizeof(*v));
	v->id = id;
	return v;
}

/* Where message m sits in its publisher's stream: the sequence number it got there. */
static uint64_t msg_origin_seq(const rgaps_msg_info_t *info)
{
	return info->origin_seq;
}

static bool report(struct subscriber_state *st)
{
	if (++st->reported <= VERIFY_REPORT_MAX)
		return true;
	if (st->reported == VERIFY_REPORT_MAX + 1)
		fprintf(stderr, "rgaps sub: more mismatches: only the count from here on\n");
	return false;
}

/* Check m's place in stream v and its payload; 0 if right, else say why and return -1. */
static int verify_msg(struct subscriber_state *st, struct vstream *v, const rgaps_msg_t *m,
		      const rgaps_msg_info_t *info)
{
	uint64_t got = 0, origin = msg_origin_seq(info);
	const char *place = rgaps_pattern_place(&v->place, origin, m->gap), *payload;
	int64_t off = rgaps_pattern_check(m->data, m->size, &got);

	payload = off < 0 ? rgaps_pattern_counter_error(got, origin) : NULL;
	if (off < 0 && !place && !payload)
		return 0;
	if (!report(st))
		return -1;
	if (place)
		fprintf(stderr,
			"rgaps sub: message seq %" PRIu64 " (stream %" PRIu64 ", origin seq %" PRIu64
			", %zu bytes): %s\n",
			m->seq, info->stream, origin, m->size, place);
	if (off >= 0)
		fprintf(stderr,
			"rgaps sub: message seq %" PRIu64 " (origin seq %" PRIu64 ", %zu bytes, counter %" PRIu64
			"): payload differs from the pattern at byte %" PRId64 "\n",
			m->seq, origin, m->size, got, off);
	else if (payload)
		fprintf(stderr,
			"rgaps sub: message seq %" PRIu64 " (origin seq %" PRIu64
			", %zu bytes): counter %" PRIu64 ": %s\n",
			m->seq, origin, m->size, got, payload);
	return -1;
}

static int cmd_sub(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "count", required_argument, NULL, 'n' },
		{ "verify", no_argument, NULL, 'v' },
		{ "timeout", required_argument, NULL, 't' },
		{ "allow-gaps", no_argument, NULL, 'g' },
		{ "hold-ms", required_argument, NULL, 'H' },
		{ "latency", no_argument, NULL, 'T' },
		{ 0 },
	};
	struct subscriber_state st = { 0 };
	bool latency = false;
	double *lat = NULL;
	uint64_t count = 1, received = 0, verified = 0, bad = 0, gaps = 0, drops = 0, bytes = 0;
	uint64_t first_seq = 0, last_seq = 0;
	double timeout = 30, deadline, t0 = 0;
	bool verify = false, allow_gaps = false;
	int c, hold_ms = 0, rc;
	rgaps_subscriber_t *sub;
	const char *topic;

	if (argc < 2 || argv[1][0] == '-') {
		usage(stderr);
		return 2;
	}
	topic = argv[1];
	optind = 2;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (parse_count("--count", optarg, &count))
				return 2;
			break;
		case 'v':
			verify = true;
			break;
		case 't':
			timeout = atof(optarg);
			break;
		case 'g':
			allow_gaps = true;
			break;
		case 'H':
			hold_ms = atoi(optarg);
			break;
		case 'T':
			latency = true;
			break;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (latency) {
		lat = calloc(count ? count : 1, sizeof(*lat));
		if (!lat)
			return 1;
	}
	sub = rgaps_subscriber_init(topic);
	if (!sub) {
		fprintf(stderr, "rgaps sub: cannot attach to '%s': %s\n", topic,
			rgaps_strerror(errno));
		free(lat);
		return 1;
	}
	{
		rgaps_topic_info_t info = { .struct_size = sizeof(info) };

		if ((verify || hold_ms) && rgaps_subscriber_info(sub, &info) == 0 &&
		    info.memory == RGAPS_MEMORY_CUDA && verify) {
			fprintf(stderr, "rgaps sub: topic '%s' lives in GPU memory: --verify reads "
					"payloads from the CPU; use tests/gpu/gpu-sub to verify on the GPU\n",
				topic);
			rgaps_subscriber_destroy(sub);
			free(lat);
			return 2;
		}
	}
	printf("subscribed to %s\n", topic);
	fflush(stdout);
	deadline = tool_now_s() + timeout;
	rc = 0;
	/* --count N: stop once N messages are accounted for, received or reported lost */
	while (received + gaps + drops < count && !tool_interrupted) {
		rgaps_msg_info_t info = { .struct_size = sizeof(info) };
		double left = deadline - tool_now_s();
		struct vstream *v;
		rgaps_msg_t m;
		int r;

		if (left <= 0)
			break;
		r = rgaps_subscriber_take(sub, &m, (int)(left * 1000) + 1);
		if (r == -ETIMEDOUT)
			break;
		if (r == -EINTR)
			continue;
		if (r) {
			fprintf(stderr, "rgaps sub: take: %s\n", rgaps_strerror(r));
			break;
		}
		r = rgaps_msg_info(sub, &m, &info);
		v = r ? NULL : stream_of(&st, info.stream);
		if (!v) {
			fprintf(stderr, "rgaps sub: message seq %" PRIu64 ": no stream: %s\n", m.seq,
				r ? rgaps_strerror(r) : "out of memory");
			rc = 1;
			rgaps_subscriber_release(sub, &m);
			break;
		}
		drops += m.gap;
		/* A jump of its stream's sequence that the daemon did not report is a gap. */
		if (v->have_seq && m.seq > v->last_seq + 1 + m.gap)
			gaps += m.seq - v->last_seq - 1 - m.gap;
		/* (a gap-only message for a stream that is gone has seq 0: it moves nothing back) */
		if (!v->have_seq || m.seq > v->last_seq) {
			v->last_seq = m.seq;
			v->have_seq = true;
		}
		if (m.flags & RGAPS_MSG_GAP) {
			/* no payload: only news of losses, which move the stream's place on */
			rgaps_pattern_lost(&v->place, m.gap);
			rgaps_subscriber_release(sub, &m);
			continue;
		}
		if (lat && received < count) {
			struct timespec ts;

			clock_gettime(CLOCK_REALTIME, &ts);
			lat[received] = ((double)ts.tv_sec * 1e9 + (double)ts.tv_nsec -
					 (double)m.ts_ns) / 1e3;
		}
		if (!received) {
			t0 = tool_now_s();
			first_seq = m.seq;
		}
		last_seq = m.seq;
		received++;
		bytes += m.size;
		if (verify) {
			if (verify_msg(&st, v, &m, &info) == 0)
				verified++;
			else
				bad++;
		}
		if (hold_ms)
			usleep((useconds_t)hold_ms * 1000);
		rgaps_subscriber_release(sub, &m);
	}
	printf("received %" PRIu64 " verified %" PRIu64 " mismatched %" PRIu64 " gaps %" PRIu64
	       " drops %" PRIu64 " bytes %" PRIu64 " in %.3f s; streams %zu",
	       received, verified, bad, gaps, drops, bytes, received ? tool_now_s() - t0 : 0.0,
	       st.nstreams);
	if (received)
		printf(" first_seq %" PRIu64 " last_seq %" PRIu64, first_seq, last_seq);
	printf("\n");
	if (lat && received) {
		uint64_t n = received < count ? received : count;

		qsort(lat, n, sizeof(*lat), cmp_double);
		printf("latency_us p50 %.1f p99 %.1f min %.1f max %.1f (publish to take, %" PRIu64
		       " messages)\n",
		       lat[n / 2], lat[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1], lat[0], lat[n - 1],
		       n);
	}
	free(lat);
	free(st.streams);
	rgaps_subscriber_destroy(sub);
	if (rc)
		return rc;
	if (bad)
		return 3;
	if (received + gaps + drops < count)
		return 4;
	if ((gaps || drops) && !allow_gaps)
		return 5;
	return 0;
}

int main(int argc, char **argv)
{
	tool_catch_signals(); /* a take or a sleep ends at SIGINT / SIGTERM */
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "pub") == 0)
		return cmd_pub(argc - 1, argv + 1);
	if (strcmp(argv[1], "sub") == 0)
		return cmd_sub(argc - 1, argv + 1);
	if (strcmp(argv[1], "topics") == 0)
		return cmd_topics(argc - 2, argv + 2, false);
	if (strcmp(argv[1], "stats") == 0)
		return cmd_topics(argc - 2, argv + 2, true);
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "rgaps: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
