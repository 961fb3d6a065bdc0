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
#include "rgaps/rgaps.h"
#include "stats.h"
#include "tool.h"

#define EXIT_USAGE 2
/* 128 + the signal, as a shell reports a job it stopped: 130 for ^C (SIGINT) */
#define EXIT_INTERRUPTED (128 + tool_interrupted)

/* A size for OPT: "4096", "64KiB", "16MiB" (binary units, as in the configuration). */
static int parse_size_arg(const char *opt, const char *s, uint64_t *v)
{
	if (tool_parse_size(s, v) != 0) {
		fprintf(stderr,
			"rgaps: %s: '%s' is not a size (a whole number of bytes, with an optional "
			"unit: 4096, 64KiB, 16MiB, 1GiB)\n",
			opt, s);
		return -1;
	}
	return 0;
}

/* --size BYTES or MIN-MAX, each at least the pattern's header. */
static int parse_size_range(const char *arg, uint64_t *min_p, uint64_t *max_p)
{
	char buf[64], *dash;

	if ((size_t)snprintf(buf, sizeof(buf), "%s", arg) >= sizeof(buf))
		return parse_size_arg("--size", arg, min_p);
	/* a dash after the first character separates MIN from MAX; a leading one is a sign */
	dash = buf[0] ? strchr(buf + 1, '-') : NULL;
	if (dash)
		*dash = 0;
	if (parse_size_arg("--size", buf, min_p) ||
	    (dash && parse_size_arg("--size", dash + 1, max_p)))
		return -1;
	if (!dash)
		*max_p = *min_p;
	if (*min_p < RGAPS_PATTERN_HDR || *max_p < *min_p) {
		fprintf(stderr,
			"rgaps: --size %s: a message is at least %u bytes (the payload's header), "
			"and in MIN-MAX, MIN <= MAX\n",
			arg, RGAPS_PATTERN_HDR);
		return -1;
	}
	return 0;
}

/* A number for OPT (seconds, milliseconds, a rate): finite, >= 0. */
static int parse_number(const char *opt, const char *s, double *v)
{
	char *end;

	errno = 0;
	*v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(*v) || *v < 0) {
		fprintf(stderr, "rgaps: %s: '%s' is not a number >= 0\n", opt, s);
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
		"usage: rgaps [--socket PATH] COMMAND [options]\n"
		"  pub TOPIC [--count N] [--size BYTES[-MAXBYTES]] [--rate HZ]\n"
		"            [--wait-subscribers N [--timeout SEC]] [--loan] [--fixed-payload]\n"
		"      publish N messages (default 1) of BYTES (default 4KiB; MIN-MAX: sizes\n"
		"      spread between them) whose payload is derived from their place in the\n"
		"      stream; --rate: at most HZ messages a second; --wait-subscribers: first\n"
		"      wait up to --timeout SEC (default 30) for N subscribers\n"
		"  sub TOPIC [--count N] [--verify] [--timeout SEC] [--allow-gaps] [--hold-ms MS]\n"
		"            [--latency] [--warmup W]\n"
		"      take N messages (default 1); --verify checks every byte and each\n"
		"      message's place; stops after SEC seconds (default 30) without a message;\n"
		"      --warmup: also the rate after the W-th take (\"steady\")\n"
		"  topics [--json]          the daemon's topics, pools and subscribers\n"
		"  stats [TOPIC] [--json | --prometheus]   every counter\n"
		"  --socket PATH            rgapsd's control socket (else $RGAPS_SOCKET, else %s)\n"
		"  --version, --help\n"
		"Exit status: 0 done; 1 failed; 2 bad usage; 3 sub: a message failed --verify;\n"
		"4 sub: stopped (--timeout) before N messages; 5 sub: messages lost (see\n"
		"--allow-gaps); 130 interrupted (SIGINT, SIGTERM) before N messages.\n"
		"Topic names: %s. Manual: rgaps(1).\n",
		tool_default_socket(), tool_topic_name_rule);
}

/*
 * The topic of pub or sub: the one argument getopt left (options may come before or
 * after it). NULL, with the reason printed, if there is none or more than one.
 */
static const char *topic_arg(const char *cmd, int argc, char **argv)
{
	if (optind >= argc) {
		fprintf(stderr, "rgaps %s: no topic given (rgaps %s TOPIC [options])\n", cmd, cmd);
		return NULL;
	}
	if (optind + 1 < argc) {
		fprintf(stderr, "rgaps %s: one topic only: '%s' and then '%s'\n", cmd, argv[optind],
			argv[optind + 1]);
		return NULL;
	}
	return argv[optind];
}

/* An option getopt did not know: say which, and that a topic cannot start with '-'. */
static int bad_option(const char *cmd, char **argv)
{
	fprintf(stderr, "rgaps %s: unknown option or missing value '%s' (see rgaps --help; %s)\n",
		cmd, argv[optind - 1], "topic names do not start with '-'");
	return EXIT_USAGE;
}

/* ---------------------------------------------------------------- queries */

/* The whole reply, every page merged (paged.h); the error printed. */
static int query(const char *type, const char *topic, cJSON **reply_p)
{
	char err[512];
	int r = tool_query(type, topic, reply_p, err, sizeof(err));

	if (r)
		fprintf(stderr, "rgaps: %s: %s\n", type, err);
	return r;
}

/*
 * A size as rgapsd writes sizes: exact when it is a whole number of its unit ("64MiB",
 * "1000B"), else to a tenth of the largest unit it holds ("12.5MiB").
 */
static const char *size_text(double v, char *buf, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB" };
	double x = v;
	int u = -1;

	if (!(v >= 0) || v > 1e18) {
		snprintf(buf, len, "%.0f", v);
		return buf;
	}
	tool_format_size((uint64_t)v, buf, len);
	if (v < 1024 || buf[strlen(buf) - 2] == 'i') /* exact in KiB or above */
		return buf;
	while (x >= 1024 && u < 3) {
		x /= 1024;
		u++;
	}
	snprintf(buf, len, "%.1f%s", x, units[u]);
	return buf;
}

static double num(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

/* "0:pool 1:peer 2:replica" from a topic's "gpus"; "-" on a host without GPUs. */
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

/* Messages outlive their publisher: say whose the pool and queue still hold. */
static void draining_note(const cJSON *t)
{
	double n = num(cJSON_GetObjectItem(t, "queue"), "draining");
	double history = num(cJSON_GetObjectItem(t, "config"), "history");

	if (n <= 0)
		return;
	if (history > 0 && num(t, "publishers") == 0)
		printf("  (of them, the stream of the publisher that left last, kept for late "
		       "joiners: history %.0f)\n", history);
	else
		printf("  (of them, %.0f stream%s of publishers that left, kept until every "
		       "subscriber has read them, 30 s at most)\n", n, n == 1 ? "" : "s");
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
		int r = tool_stats_prometheus(reply, stdout);

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
		printf("%-24s %-6s %5s %5s %12s %10s %10s  %s\n", "TOPIC", "MEMORY", "PUBS", "SUBS",
		       "PUBLISHED", "POOL_USED", "POOL_SIZE", "GPUS");
		cJSON_ArrayForEach(t, arr)
		{
			char gpus[256], used[32], size[32];

			printf("%-24s %-6s %5.0f %5.0f %12.0f %10s %10s  %s\n",
			       cJSON_GetObjectItem(t, "name")->valuestring,
			       cJSON_GetObjectItem(t, "memory")->valuestring, num(t, "publishers"),
			       num(t, "subscribers"), num(t, "published"),
			       size_text(num(t, "pool_used"), used, sizeof(used)),
			       size_text(num(t, "pool_size"), size, sizeof(size)),
			       gpus_of(t, gpus, sizeof(gpus)));
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
			char used[32], size[32];
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
			printf("  pool %s of %s used, %.0f blocks, fragmentation %.2f; queue %.0f/%.0f\n",
			       size_text(num(p, "used_bytes"), used, sizeof(used)),
			       size_text(num(p, "size"), size, sizeof(size)), num(p, "used_blocks"),
			       num(p, "fragmentation"), num(q, "used"), num(q, "depth"));
			draining_note(t);
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
	if (tool_interrupted)
		fprintf(stderr, "rgaps pub: interrupted while waiting for %d subscribers\n", want);
	else
		fprintf(stderr, "rgaps pub: fewer than %d subscribers on '%s' within --timeout\n",
			want, topic);
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

/* The topic's settings that pub and sub check their options against; 0 or -errno. */
static int topic_info(rgaps_publisher_t *pub, rgaps_subscriber_t *sub, rgaps_topic_info_t *info)
{
	*info = (rgaps_topic_info_t){ .struct_size = sizeof(*info) };
	return pub ? rgaps_publisher_info(pub, info) : rgaps_subscriber_info(sub, info);
}

struct pub_opts {
	uint64_t count, smin, smax, want_subs;
	double rate, timeout;
	bool loan, fixed;
};

/* Everything `rgaps pub` can refuse before it publishes: EXIT_USAGE or 0. */
static int pub_check(const char *topic, rgaps_publisher_t *pub, const struct pub_opts *o)
{
	rgaps_topic_info_t info;
	char max[32];
	int r = topic_info(pub, NULL, &info);

	if (r) {
		fprintf(stderr, "rgaps pub: topic '%s': %s\n", topic, rgaps_strerror(r));
		return 1;
	}
	/* This tool touches payloads from the CPU: loans on a GPU pool are device memory. */
	if (o->loan && info.memory == RGAPS_MEMORY_CUDA) {
		fprintf(stderr, "rgaps pub: topic '%s' lives in GPU memory: --loan would write "
				"device memory from the CPU; use push (default)\n", topic);
		return EXIT_USAGE;
	}
	/* Refused at once, before a buffer of that size is made and filled. */
	if (o->smax > info.max_message_size) {
		tool_format_size(info.max_message_size, max, sizeof(max));
		fprintf(stderr,
			"rgaps pub: --size: a message of %" PRIu64 " bytes is larger than topic "
			"'%s''s max_message_size of %s: send smaller messages, or raise "
			"max_message_size in the topic's configuration (docs/CONFIG.md)\n",
			o->smax, topic, max);
		return EXIT_USAGE;
	}
	return 0;
}

/* The size of the next message: log-uniform in [smin, smax], so small and large both occur. */
static uint64_t next_size(const struct pub_opts *o)
{
	uint64_t size;

	if (o->smax == o->smin)
		return o->smin;
	size = (uint64_t)((double)o->smin * pow_ratio(o->smax, o->smin, (double)rand() / RAND_MAX));
	return size < o->smin ? o->smin : size > o->smax ? o->smax : size;
}

/*
 * Publish one message whose payload's counter is seq, its place in this
 * publisher's stream (what `sub --verify` checks it against). 0 or -errno.
 */
static int publish_one(rgaps_publisher_t *pub, const struct pub_opts *o, uint8_t *buf,
		       uint64_t size, uint64_t seq)
{
	rgaps_loan_t l;
	int r;

	if (o->loan) {
		r = rgaps_publisher_loan(pub, size, -1, &l);
		if (r)
			return r;
		/* --fixed-payload: the block is sent as it is (throughput runs) */
		if (!o->fixed)
			rgaps_pattern_fill(l.data, size, seq);
		return rgaps_publisher_commit(pub, &l, size);
	}
	/* --fixed-payload: fill once (throughput runs; not verifiable after the first) */
	if (!o->fixed)
		rgaps_pattern_fill(buf, size, seq);
	else if (seq == 0)
		rgaps_pattern_fill(buf, o->smax, 0);
	return rgaps_publisher_push(pub, size, buf);
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
	struct pub_opts o = { .count = 1, .smin = 4096, .smax = 4096, .timeout = 30 };
	uint64_t failures = 0, bytes = 0, published = 0, i;
	int c, r = 0, last_err = 0, rc;
	rgaps_publisher_t *pub;
	const char *topic;
	double t0, t1;
	uint8_t *buf;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (parse_count("--count", optarg, &o.count))
				return EXIT_USAGE;
			break;
		case 's':
			if (parse_size_range(optarg, &o.smin, &o.smax))
				return EXIT_USAGE;
			break;
		case 'r':
			if (parse_number("--rate", optarg, &o.rate))
				return EXIT_USAGE;
			break;
		case 'w':
			if (parse_count("--wait-subscribers", optarg, &o.want_subs))
				return EXIT_USAGE;
			break;
		case 't':
			if (parse_number("--timeout", optarg, &o.timeout))
				return EXIT_USAGE;
			break;
		case 'L':
			o.loan = true;
			break;
		case 'F':
			o.fixed = true;
			break;
		default:
			return bad_option("pub", argv);
		}
	}
	topic = topic_arg("pub", argc, argv);
	if (!topic)
		return EXIT_USAGE;
	pub = rgaps_publisher_init(topic);
	if (!pub) {
		r = errno;
		fprintf(stderr, "rgaps pub: cannot attach to '%s': %s\n", topic, rgaps_strerror(r));
		return r == EINVAL ? EXIT_USAGE : 1;
	}
	rc = pub_check(topic, pub, &o);
	buf = rc ? NULL : malloc(o.loan ? 1 : o.smax);
	if (!rc && !buf) {
		fprintf(stderr, "rgaps pub: no memory for a buffer of %" PRIu64 " bytes\n", o.smax);
		rc = 1;
	}
	if (!rc && o.want_subs &&
	    wait_subscribers(topic, (int)TOOL_MIN(o.want_subs, INT32_MAX), tool_now_s() + o.timeout))
		rc = tool_interrupted ? EXIT_INTERRUPTED : 1;
	if (rc) {
		free(buf);
		rgaps_publisher_destroy(pub);
		return rc;
	}
	srand(12345);
	t0 = tool_now_s();
	for (i = 0; i < o.count && !tool_interrupted; i++) {
		uint64_t size = next_size(&o);

		r = publish_one(pub, &o, buf, size, published);
		if (r == -EINTR && tool_interrupted)
			break; /* stopped while it waited for room */
		if (r) {
			/* Each kind of failure in full once; the count says how often. */
			if (r != last_err)
				fprintf(stderr, "rgaps pub: message %" PRIu64 " (%" PRIu64 " bytes): %s\n",
					i, size, rgaps_strerror(r));
			last_err = r;
			failures++;
			/* The daemon is gone, or the topic will never take this size. */
			if (r == -ENOTCONN || r == -EMSGSIZE)
				break;
			continue;
		}
		bytes += size;
		published++;
		if (o.rate > 0) {
			double next = t0 + (double)(i + 1) / o.rate, now = tool_now_s();

			if (next > now)
				usleep((useconds_t)TOOL_MIN((next - now) * 1e6, 1e9));
		}
	}
	t1 = tool_now_s();
	printf("published %" PRIu64 " messages (%" PRIu64 " bytes) in %.3f s: %.0f msg/s, "
	       "%.1f MiB/s; failures %" PRIu64 "\n",
	       published, bytes, t1 - t0, (double)published / (t1 - t0),
	       (double)bytes / (1 << 20) / (t1 - t0), failures);
	free(buf);
	rgaps_publisher_destroy(pub);
	if (i < o.count && tool_interrupted) {
		fprintf(stderr, "rgaps pub: interrupted: %" PRIu64 " of %" PRIu64
				" messages published\n", published, o.count);
		return EXIT_INTERRUPTED;
	}
	if (failures)
		fprintf(stderr, "rgaps pub: %" PRIu64 " of %" PRIu64 " messages published, %" PRIu64
				" failed\n", published, o.count, failures);
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
		{ "warmup", required_argument, NULL, 'W' },
		{ 0 },
	};
	struct subscriber_state st = { 0 };
	rgaps_topic_info_t tinfo;
	char why[384];
	bool latency = false;
	double *lat = NULL;
	uint64_t count = 1, received = 0, verified = 0, bad = 0, gaps = 0, drops = 0, bytes = 0;
	uint64_t first_seq = 0, last_seq = 0, warmup = 0, steady_bytes = 0;
	double timeout = 30, hold_ms = 0, deadline, t0 = 0, t_warm = 0, t_last = 0;
	bool verify = false, allow_gaps = false;
	const char *ended = NULL; /* why it stopped before count, in words */
	int c, rc;
	rgaps_subscriber_t *sub;
	const char *topic;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			if (parse_count("--count", optarg, &count))
				return EXIT_USAGE;
			break;
		case 'v':
			verify = true;
			break;
		case 't':
			if (parse_number("--timeout", optarg, &timeout))
				return EXIT_USAGE;
			break;
		case 'g':
			allow_gaps = true;
			break;
		case 'H':
			if (parse_number("--hold-ms", optarg, &hold_ms))
				return EXIT_USAGE;
			break;
		case 'T':
			latency = true;
			break;
		case 'W':
			if (parse_count("--warmup", optarg, &warmup))
				return EXIT_USAGE;
			break;
		default:
			return bad_option("sub", argv);
		}
	}
	topic = topic_arg("sub", argc, argv);
	if (!topic)
		return EXIT_USAGE;
	if (latency) {
		lat = calloc(count ? count : 1, sizeof(*lat));
		if (!lat) {
			fprintf(stderr, "rgaps sub: no memory for %" PRIu64 " latency samples\n", count);
			return 1;
		}
	}
	sub = rgaps_subscriber_init(topic);
	if (!sub) {
		rc = errno;
		fprintf(stderr, "rgaps sub: cannot attach to '%s': %s\n", topic, rgaps_strerror(rc));
		free(lat);
		return rc == EINVAL ? EXIT_USAGE : 1;
	}
	if (verify && topic_info(NULL, sub, &tinfo) == 0 && tinfo.memory == RGAPS_MEMORY_CUDA) {
		fprintf(stderr, "rgaps sub: topic '%s' lives in GPU memory: --verify reads "
				"payloads from the CPU; use tests/gpu/gpu-sub to verify on the GPU\n",
			topic);
		rgaps_subscriber_destroy(sub);
		free(lat);
		return EXIT_USAGE;
	}
	printf("subscribed to %s\n", topic);
	fflush(stdout);
	/* --timeout: how long to wait for the next message, not for all of them */
	deadline = tool_now_s() + timeout;
	rc = 0;
	/* --count N: stop once N messages are accounted for, received or reported lost */
	while (received + gaps + drops < count) {
		rgaps_msg_info_t info = { .struct_size = sizeof(info) };
		double left = deadline - tool_now_s();
		struct vstream *v;
		rgaps_msg_t m;
		int r;

		if (tool_interrupted) {
			ended = "interrupted";
			break;
		}
		if (left <= 0) {
			snprintf(why, sizeof(why), "no message for %g s (--timeout)", timeout);
			ended = why;
			break;
		}
		/* In slices: a signal that comes between two waits (no EINTR) ends us soon. */
		r = rgaps_subscriber_take(sub, &m, (int)TOOL_MIN(left * 1000 + 1, 100));
		if (r == -ETIMEDOUT || r == -EINTR)
			continue; /* the checks above say which */
		if (r) {
			snprintf(why, sizeof(why), "take failed: %s", rgaps_strerror(r));
			ended = why;
			break;
		}
		deadline = tool_now_s() + timeout;
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
		/* --warmup W: the steady rate's clock starts at the W-th take, its bytes after it */
		t_last = tool_now_s();
		if (received == warmup) {
			t_warm = t_last;
			printf("warm %" PRIu64 "\n", warmup); /* a benchmark starts its meters here */
			fflush(stdout);
		} else if (warmup && received > warmup) {
			steady_bytes += m.size;
		}
		if (verify) {
			if (verify_msg(&st, v, &m, &info) == 0)
				verified++;
			else
				bad++;
		}
		if (hold_ms > 0)
			usleep((useconds_t)TOOL_MIN(hold_ms * 1000, 1e9));
		rgaps_subscriber_release(sub, &m);
	}
	printf("received %" PRIu64 " verified %" PRIu64 " mismatched %" PRIu64 " gaps %" PRIu64
	       " drops %" PRIu64 " bytes %" PRIu64 " in %.3f s; streams %zu",
	       received, verified, bad, gaps, drops, bytes, received ? tool_now_s() - t0 : 0.0,
	       st.nstreams);
	if (received)
		printf(" first_seq %" PRIu64 " last_seq %" PRIu64, first_seq, last_seq);
	printf("\n");
	if (warmup && received > warmup)
		printf("steady %" PRIu64 " messages %" PRIu64 " bytes in %.6f s: %.1f MiB/s "
		       "(from the take of message %" PRIu64 " to the last take)\n",
		       received - warmup, steady_bytes, t_last - t_warm,
		       (double)steady_bytes / (1 << 20) / (t_last - t_warm), warmup);
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
	if (ended)
		fprintf(stderr, "rgaps sub: stopped: %s; %" PRIu64 " of %" PRIu64
				" messages accounted for (received or reported lost)\n",
			ended, received + gaps + drops, count);
	if (rc)
		return rc;
	if (bad)
		return 3;
	if (received + gaps + drops < count)
		return tool_interrupted ? EXIT_INTERRUPTED : 4;
	if ((gaps || drops) && !allow_gaps)
		return 5;
	return 0;
}

/*
 * --socket PATH (or --socket=PATH), anywhere before a "--": taken out of argv and
 * given to librgaps as $RGAPS_SOCKET. Returns the new argc, or -1 if PATH is missing.
 */
static int take_socket_option(int argc, char **argv)
{
	int i, n = 1;

	for (i = 1; i < argc; i++) {
		const char *path = NULL;

		if (strcmp(argv[i], "--") == 0)
			break;
		if (strncmp(argv[i], "--socket=", 9) == 0) {
			path = argv[i] + 9;
		} else if (strcmp(argv[i], "--socket") == 0) {
			if (i + 1 >= argc)
				return -1;
			path = argv[++i];
		} else {
			argv[n++] = argv[i];
			continue;
		}
		setenv("RGAPS_SOCKET", path, 1);
	}
	for (; i < argc; i++)
		argv[n++] = argv[i];
	argv[n] = NULL;
	return n;
}

int main(int argc, char **argv)
{
	const char *cmd;

	tool_catch_signals(); /* a take or a sleep ends at SIGINT / SIGTERM */
	opterr = 0;	      /* bad_option() says what was wrong */
	argc = take_socket_option(argc, argv);
	if (argc < 0) {
		fprintf(stderr, "rgaps: --socket needs a PATH\n");
		return EXIT_USAGE;
	}
	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	cmd = argv[1];
	if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
		printf("rgaps %s\n", tool_version);
		return 0;
	}
	/* getopt from the command on: argv[0] is its name */
	if (strcmp(cmd, "pub") == 0)
		return cmd_pub(argc - 1, argv + 1);
	if (strcmp(cmd, "sub") == 0)
		return cmd_sub(argc - 1, argv + 1);
	if (strcmp(cmd, "topics") == 0)
		return cmd_topics(argc - 2, argv + 2, false);
	if (strcmp(cmd, "stats") == 0)
		return cmd_topics(argc - 2, argv + 2, true);
	fprintf(stderr, "rgaps: unknown command '%s' (pub, sub, topics, stats; rgaps --help)\n",
		cmd);
	return EXIT_USAGE;
}
