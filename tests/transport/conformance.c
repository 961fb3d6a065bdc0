/*
 * Conformance test and throughput benchmark of a transport plugin
 * (include/rgaps/plugin.h, section "transport"), for tcp and verbs alike.
 *
 * It plays the core on both ends: two independent contexts of the plugin on
 * one uv loop, A (sender) and B (receiver), a data link from A to B presenting
 * a token, rings set up in the ABI order, and the core's ring logic from
 * src/daemon/remote/ring.h around them: A reserves (the Exceed check) and posts
 * records gathered from registered memory, B places each landed record (or
 * checks the offset the transport claims), checks every byte, consumes and
 * writes Head back per the watermark, A takes it as its Delayed Head. The pair
 * invariants are checked after every event. Cases:
 *
 *   a  2000 records of 1 B..256 KiB through a 1 MiB ring (wrap-around, back-pressure)
 *   b  the same at watermarks 0, 0.25 and 1.0; consumption in random batches
 *   c  tiny records: send-credit stalls (-EAGAIN from post_record) handled
 *   d  big records (4 MiB, 64 MiB ring) for a few seconds: GB/s
 *   e  link close from either side, a refused connect, a close with records in flight
 *   f  (tcp only) hostile raw connections: unknown token, bad preamble, records
 *      outside the ring or over unconsumed bytes, garbage frames, a silent peer;
 *      links of several streams that never form, name a stream twice, claim
 *      too many, number their records wrongly or lose a stream
 *   g  (tcp, --streams N > 1) one stream of a link dies with records in flight:
 *      the whole link goes down on both ends, every record completes once and
 *      in order, and a new link works
 *
 * --streams N opens every link with N TCP streams (the tcp option "streams");
 * --zerocopy sends large writes with MSG_ZEROCOPY (the tcp option "zerocopy"),
 * and the flows of large records check that the sends went that way.
 * --redirect plays a core that takes record_header: of every three records the
 * transport may redirect, two land in a shadow of the ring (the pool block a
 * core would give), and the check reads their header from the ring, their
 * payload from the shadow, and that the ring's bytes after the header stayed
 * untouched; headers come in ring order, each before its record_landed.
 *
 * record_landed's length: tcp reports the record's exact length; verbs reports
 * its ring footprint, ALIGN_UP(len, 64), all its immediate can carry (the
 * exact length is 64 + chunk_len from the record header, docs/VERBS.md). The
 * receiver checks the reported length against the one the sender posted (the
 * footprint of it for verbs) and every byte of the record at its exact length,
 * in every case (d included). Only --bench samples by default (the header, 4
 * KiB at each end and 64 B in the middle of each payload; --verify-all checks
 * every byte there too), and its result line says which.
 *
 * --corrupt WHERE (a test of this checker, tests/transport/oracle.sh) flips one
 * byte of the 5th record of each flow in B's ring after it landed, before the
 * check: hdr (its header's record_seq), first, third (a third into the payload:
 * missed by sampling), last (the record's last byte). The checker must fail.
 *
 * --bench runs only the throughput measurement, with sender and receiver in two
 * processes (as two daemons would be), for tests/transport/bench_tcp.sh. Every
 * wait is bounded by a watchdog timer. Exit 0 when every check passed, 77 when
 * the transport is not usable here (probe), 1 otherwise.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "log.h"
#include "pattern.h"
#include "plugin_loader.h"
#include "remote/ring.h"
#include "util.h"

#define KiB ((uint64_t)1024)
#define MiB ((uint64_t)1024 * 1024)
#define GiB ((uint64_t)1024 * 1024 * 1024)

#define REC_HDR	     64u	 /* docs/PROTOCOL.md section 3: record header */
#define REC_MAGIC    0x31524752u /* "RGR1" */
#define REC_FIRST    0x1u
#define REC_LAST     0x2u
#define NHDR	     4096u     /* header slots: records in flight per flow at most */
#define SRC_SLACK    (1 * MiB) /* payloads start at a per-record offset below this */
#define GUARD	     4096u     /* bytes checked on both sides of every ring */
#define GUARD_BYTE   0xa5
#define RING_FILL    0x5a
#define PATTERN_SEED 0x5eedull
#define SAMPLE	     4096u /* bytes checked at each end of a payload when sampling */

/* ------------------------------------------------------------------ options */

struct opts {
	const char *transport;
	const char *plugin_dir;
	const char *addr;	  /* where B listens */
	const char *connect_addr; /* where A connects (default: addr) */
	uint16_t port;
	uint32_t records;
	double seconds;
	const char *cases;
	bool bench;
	uint64_t record_size, ring_size;
	double watermark;
	bool verify_all;
	uint64_t seed;
	int verbose;
	const char *corrupt; /* --corrupt: NULL, "hdr", "first", "third" or "last" */
	uint32_t streams;    /* --streams: TCP streams per link (tcp option "streams") */
	bool redirect;	     /* --redirect: take record_header, land large records elsewhere */
	bool zerocopy;	     /* --zerocopy: the tcp option "zerocopy" */
};

static struct opts opt = {
	.transport = "tcp",
	.addr = "127.0.0.1",
	.records = 2000,
	.seconds = 2.0,
	.cases = "abcdefg",
	.record_size = 4 * MiB,
	.ring_size = 64 * MiB,
	.watermark = 0.25,
	.seed = 1,
	.streams = 1,
};

/* ------------------------------------------------------------------ state */

struct side {
	const char *name;
	void *ctx;
	struct rgaps_transport_cbs cbs;
};

struct tlink {
	struct side *side;
	struct rgaps_link *link; /* NULL once closed or down */
	uint8_t token[RGAPS_LINK_TOKEN_LEN];
	bool expect;  /* B: a token this "core" knows */
	bool hostile; /* records landing here are not a flow's */
	bool up, connect_done, down, closed;
	int status, down_err;
	char why[256];
	uint64_t landed, landed_bytes;
};

#define MAX_LINKS 48
static struct tlink links[MAX_LINKS];
static int nlinks;

static uv_loop_t loop;
static uv_timer_t watchdog;
static bool wd_fired;
static struct rgaps_loaded_plugin *lp;
static const struct rgaps_transport_ops *T;
static struct rgaps_plugin_env env;
static struct side A = { .name = "A" }, B = { .name = "B" };
static bool is_tcp;
static bool footprint_lengths; /* record_landed reports ALIGN_UP(len, 64) (verbs) */
static int n_pass, n_fail;
static uint64_t unknown_tokens, stray_callbacks, accepted_total;
static bool allow_send_errors; /* case e: records failed by a link going down */

/* Source memory of A: a pattern the payloads are cut from, and header slots. */
static uint8_t *src, *hdrs;
static uint64_t src_size;
static void *src_mr, *hdr_mr;

struct flow;
static struct flow *flows[128]; /* by ring id */

/* ------------------------------------------------------------------ small helpers */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t rnd(uint64_t *state)
{
	*state += 1;
	return mix64(*state);
}

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void check(bool ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s - ", ok ? "ok  " : "FAIL");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (ok)
		n_pass++;
	else
		n_fail++;
}

static void info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void info(const char *fmt, ...)
{
	va_list ap;

	if (!opt.verbose)
		return;
	printf("#    ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static int parse_size(const char *s, uint64_t *v_p)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || v < 0)
		return -EINVAL;
	switch (*end) {
	case 'k':
	case 'K':
		v *= KiB;
		end++;
		break;
	case 'm':
	case 'M':
		v *= MiB;
		end++;
		break;
	case 'g':
	case 'G':
		v *= GiB;
		end++;
		break;
	default:
		break;
	}
	if (*end == 'i')
		end++;
	if (*end == 'B')
		end++;
	if (*end)
		return -EINVAL;
	*v_p = (uint64_t)v;
	return 0;
}

static const char *size_str(uint64_t v, char *buf, size_t len)
{
	if (v >= GiB && v % GiB == 0)
		snprintf(buf, len, "%" PRIu64 " GiB", v / GiB);
	else if (v >= MiB && v % MiB == 0)
		snprintf(buf, len, "%" PRIu64 " MiB", v / MiB);
	else if (v >= KiB && v % KiB == 0)
		snprintf(buf, len, "%" PRIu64 " KiB", v / KiB);
	else
		snprintf(buf, len, "%" PRIu64 " B", v);
	return buf;
}

/* ------------------------------------------------------------------ waiting */

static void on_watchdog(uv_timer_t *t)
{
	wd_fired = true;
}

/* Run the loop until pred(arg) holds or timeout_ms pass (false, with what in the log). */
static bool run_until(bool (*pred)(void *), void *arg, uint64_t timeout_ms, const char *what)
{
	bool ok;

	wd_fired = false;
	uv_timer_start(&watchdog, on_watchdog, timeout_ms, 0);
	while (!pred(arg) && !wd_fired)
		uv_run(&loop, UV_RUN_ONCE);
	ok = pred(arg);
	uv_timer_stop(&watchdog);
	if (!ok)
		printf("#    timed out after %" PRIu64 " ms waiting for %s\n", timeout_ms, what);
	return ok;
}

/* Let the loop run for ms (callbacks that must not come get their chance). */
static void run_for(uint64_t ms)
{
	wd_fired = false;
	uv_timer_start(&watchdog, on_watchdog, ms, 0);
	while (!wd_fired)
		uv_run(&loop, UV_RUN_ONCE);
}

static bool pred_link_up(void *arg)
{
	return ((struct tlink *)arg)->up || ((struct tlink *)arg)->down;
}

static bool pred_connect_done(void *arg)
{
	return ((struct tlink *)arg)->connect_done;
}

static bool pred_link_down(void *arg)
{
	return ((struct tlink *)arg)->down;
}

/* ------------------------------------------------------------------ links */

static struct tlink *tlink_new(struct side *s, uint32_t salt)
{
	struct tlink *t;
	uint64_t a, b;

	rgaps_require(nlinks < MAX_LINKS);
	t = &links[nlinks++];
	memset(t, 0, sizeof(*t));
	t->side = s;
	a = mix64(opt.seed * 1000003u + salt);
	b = mix64(a ^ 0x746f6b656eull);
	memcpy(t->token, &a, 8);
	memcpy(t->token + 8, &b, 8);
	return t;
}

static struct tlink *tlink_find(struct side *s, struct rgaps_link *link)
{
	for (int i = 0; i < nlinks; i++)
		if (links[i].side == s && links[i].link == link && link)
			return &links[i];
	return NULL;
}

/* B: the listener side of t, known by its token. */
static struct tlink *expect_link(uint32_t salt, bool hostile)
{
	struct tlink *t = tlink_new(&B, salt);

	t->expect = true;
	t->hostile = hostile;
	return t;
}

/* A: connect presenting `want`'s token; waits until both ends report. */
static bool connect_pair(struct tlink *a, struct tlink *b, const char *what)
{
	const char *host = opt.connect_addr ? opt.connect_addr : opt.addr;
	int r;

	memcpy(a->token, b->token, RGAPS_LINK_TOKEN_LEN);
	r = T->connect(A.ctx, host, opt.port, a->token, &a->link);
	if (r) {
		check(false, "%s: connect(%s:%u) = %s", what, host, opt.port, strerror(-r));
		return false;
	}
	if (!run_until(pred_connect_done, a, 10000, "link_connected") ||
	    !run_until(pred_link_up, b, 10000, "link_accepted")) {
		check(false, "%s: link did not come up", what);
		return false;
	}
	if (a->status || !a->up || !b->up) {
		check(false, "%s: link failed: connect status %s", what, strerror(-a->status));
		return false;
	}
	return true;
}

static void tl_close(struct tlink *t)
{
	if (!t->link)
		return;
	T->close(t->side->ctx, t->link);
	t->link = NULL;
	t->closed = true;
}

/* ------------------------------------------------------------------ records */

/* The 64-byte record header of docs/PROTOCOL.md section 3, little-endian. */
static void build_hdr(uint8_t *h, uint64_t seq, uint64_t len, uint32_t ring_id)
{
	uint64_t chunk = len > REC_HDR ? len - REC_HDR : 0;

	put_le32(h, REC_MAGIC);
	put_le32(h + 4, REC_FIRST | REC_LAST);
	put_le64(h + 8, seq);
	put_le64(h + 16, chunk);
	put_le64(h + 24, 0);
	put_le32(h + 32, (uint32_t)chunk);
	put_le32(h + 36, ring_id);
	put_le64(h + 40, seq * 1000 + 7); /* stands in for ts_ns; deterministic to compare */
	put_le64(h + 48, seq);
	put_le64(h + 56, 0);
}

static uint64_t src_off(uint64_t seq, uint32_t align)
{
	return (mix64(seq ^ 0x50ffull) % SRC_SLACK) & ~(uint64_t)(align - 1);
}

static void fill_pattern(uint8_t *p, uint64_t n)
{
	uint64_t k;

	for (k = 0; k + 8 <= n; k += 8) {
		uint64_t w = rgaps_pattern_word(PATTERN_SEED, k / 8);

		memcpy(p + k, &w, 8);
	}
	for (; k < n; k++)
		p[k] = (uint8_t)k;
}

struct flow {
	char label[160];
	uint32_t ring_id;
	struct tlink *sl, *rl; /* A's and B's end; NULL for the half in the other process */
	struct rgaps_ring_geom g;
	double watermark;
	uint64_t min_len, max_len;
	uint64_t nrecords; /* 0: run for `seconds` */
	double seconds;
	bool verify_all, split_sg, lazy_consume;
	uint32_t src_align;
	uint64_t rng;

	/* sender */
	struct rgaps_ring_sender s;
	bool have_cur, stop_posting, link_failed;
	struct rgaps_ring_slot cur_slot;
	struct rgaps_sg cur_sg[RGAPS_RECORD_SG_MAX];
	uint32_t cur_nsg;
	uint64_t cur_len;
	uint64_t next_seq, posted, posted_bytes, sent_ok, sent_err, next_sent;
	uint64_t ring_stalls, credit_stalls, hdr_stalls;
	uint64_t deadline_ns, t_first_post, t_last_sent;

	/* receiver */
	uint8_t *ring_mem, *ring;
	struct rgaps_ring_receiver r;
	uint64_t landed, landed_bytes, expect_seq, expect_total;
	uint64_t t_first_land, t_last_land, first_len;
	struct rgaps_ring_slot *q;
	uint64_t q_head, q_tail, q_cap;
	uint64_t *lens; /* in-process flows: exact length of record seq at [seq % q_cap] */
	/* --redirect: the shadow the payloads of redirected records land in, and per
	 * record (header order, [seq % q_cap]) where record_header sent it */
	uint8_t *shadow_mem, *shadow;
	struct hdr_seen {
		uint64_t off, len;
		bool redirected;
	} *hdrs_seen;
	uint64_t headers, redirected;
	uv_timer_t consume_timer;
	bool timer_open;
	uint64_t head_eagain, verify_errors;

	bool failed;
	char why[512];
};

static void flow_fail(struct flow *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void flow_fail(struct flow *f, const char *fmt, ...)
{
	va_list ap;

	if (f->failed)
		return;
	f->failed = true;
	f->stop_posting = true;
	va_start(ap, fmt);
	vsnprintf(f->why, sizeof(f->why), fmt, ap);
	va_end(ap);
	printf("#    %s: %s\n", f->label, f->why);
}

static void flow_check_pair(struct flow *f)
{
	const char *why;

	if (f->sl && f->rl && !f->failed && rt_ring_check(&f->s, &f->r, &why) != 0)
		flow_fail(f, "ring invariant broken: %s", why);
}

static uint64_t flow_next_len(struct flow *f)
{
	uint64_t span = f->max_len - f->min_len + 1, x = rnd(&f->rng);

	if (span == 1)
		return f->min_len;
	switch (x % 8) {
	case 0: /* tiny, headers cut short */
		return RGAPS_MAX(f->min_len, RGAPS_MIN(f->max_len, 1 + (x >> 8) % 128));
	case 1: { /* log-uniform */
		uint32_t bits = 1 + (uint32_t)((x >> 8) % 63);
		uint64_t v = 1 + ((x >> 16) & ((bits >= 63 ? ~0ull : (1ull << bits)) - 1));

		return f->min_len + v % span;
	}
	case 2: /* the largest record: exact fits and wraps with padding */
		return f->max_len;
	default:
		return f->min_len + (x >> 8) % span;
	}
}

/* The pieces of record seq: header slot, then the payload cut into 1..3 pieces. */
static void flow_build(struct flow *f, uint64_t seq, uint64_t len)
{
	uint8_t *h = hdrs + (seq % NHDR) * REC_HDR;
	uint64_t plen = len > REC_HDR ? len - REC_HDR : 0, x = rnd(&f->rng);
	uint8_t *p = src + src_off(seq, f->src_align);
	uint32_t pieces = 1, n = 0;

	build_hdr(h, seq, len, f->ring_id);
	f->cur_sg[n++] =
		(struct rgaps_sg){ .mr = hdr_mr, .addr = h, .len = RGAPS_MIN(len, REC_HDR) };
	if (!plen) {
		f->cur_nsg = n;
		return;
	}
	if (f->split_sg && plen >= 3)
		pieces = 1 + (uint32_t)(x % 3);
	for (uint32_t i = 0; i < pieces; i++) {
		uint64_t after = pieces - i - 1; /* pieces still to come, a byte each at least */
		uint64_t piece = after ? 1 + (x >> (8 + 8 * i)) % (plen - after) : plen;

		f->cur_sg[n++] = (struct rgaps_sg){ .mr = src_mr, .addr = p, .len = piece };
		p += piece;
		plen -= piece;
	}
	f->cur_nsg = n;
}

static bool flow_sender_done(const struct flow *f)
{
	uint64_t completed = f->sent_ok + f->sent_err;

	if (f->failed)
		return true;
	if (f->nrecords)
		return completed == f->nrecords;
	return f->stop_posting && !f->have_cur && completed == f->posted;
}

static bool flow_receiver_done(const struct flow *f)
{
	if (f->failed)
		return true;
	if (f->nrecords)
		return f->landed == f->nrecords;
	return f->expect_total && f->landed == f->expect_total;
}

static bool pred_flow_done(void *arg)
{
	struct flow *f = arg;

	if (f->failed)
		return true;
	if (f->sl && !flow_sender_done(f))
		return false;
	if (f->rl) {
		if (!f->nrecords && f->sl)
			f->expect_total = f->posted;
		return flow_receiver_done(f);
	}
	return true;
}

static void flow_pump(struct flow *f)
{
	struct rgaps_ring_slot slot;
	bool posted_any = false;
	int r;

	if (!f->sl || !f->sl->link || f->failed || f->link_failed)
		return;
	for (;;) {
		if (!f->have_cur) {
			uint64_t len;

			if (f->stop_posting || (f->nrecords && f->next_seq >= f->nrecords))
				break;
			if (f->seconds > 0 && f->posted && now_ns() >= f->deadline_ns) {
				f->stop_posting = true;
				break;
			}
			if (f->next_seq - (f->sent_ok + f->sent_err) >= NHDR) {
				f->hdr_stalls++;
				break;
			}
			len = flow_next_len(f);
			r = rt_ring_sender_reserve(&f->s, len, &slot);
			if (r == -EAGAIN) {
				f->ring_stalls++; /* resumes on the next head_update */
				break;
			}
			if (r) {
				flow_fail(f, "reserve(%" PRIu64 ") failed: %s", len, strerror(-r));
				break;
			}
			flow_build(f, f->next_seq, len);
			f->cur_slot = slot;
			f->cur_len = len;
			f->have_cur = true;
		}
		r = T->post_record(A.ctx, f->sl->link, f->ring_id, f->cur_slot.off, f->cur_sg,
				   f->cur_nsg, ((uint64_t)f->ring_id << 56) | f->next_seq);
		if (r == -EAGAIN) {
			f->credit_stalls++; /* resumes on the next record_sent */
			break;
		}
		if (r == -ENOTCONN && allow_send_errors) {
			/* a record_sent of the link going down made us post: its link_down follows */
			f->link_failed = true;
			break;
		}
		if (r) {
			flow_fail(f,
				  "post_record(seq %" PRIu64 ", off %" PRIu64 ", len %" PRIu64
				  ") failed: %s",
				  f->next_seq, f->cur_slot.off, f->cur_len, strerror(-r));
			break;
		}
		if (f->lens)
			f->lens[f->next_seq % f->q_cap] = f->cur_len;
		if (!f->posted) {
			f->t_first_post = now_ns();
			if (f->seconds > 0)
				f->deadline_ns = f->t_first_post + (uint64_t)(f->seconds * 1e9);
		}
		f->have_cur = false;
		f->posted++;
		f->posted_bytes += f->cur_len;
		f->next_seq++;
		posted_any = true;
	}
	if (posted_any)
		T->flush(A.ctx, f->sl->link);
	flow_check_pair(f);
}

static void flow_report(struct flow *f);

static void on_consume_timer(uv_timer_t *t)
{
	struct flow *f = t->data;
	uint64_t n = f->q_tail - f->q_head;
	struct rgaps_ring_slot last;

	if (f->failed)
		return;
	if (n) {
		if (f->lazy_consume)
			n = 1 + rnd(&f->rng) % n; /* DP3 finishes a prefix at a time */
		/* --redirect: consumed bytes go back to the fill, which a redirected record's
		 * ring bytes must still hold when it lands */
		for (uint64_t i = 0; f->shadow && i < n; i++) {
			const struct rgaps_ring_slot *q = &f->q[(f->q_head + i) % f->q_cap];

			memset(f->ring + q->off, RING_FILL, q->len);
		}
		last = f->q[(f->q_head + n - 1) % f->q_cap];
		f->q_head += n;
		rt_ring_receiver_consume(&f->r, &last);
	}
	flow_report(f);
	if (f->q_tail != f->q_head)
		uv_timer_start(&f->consume_timer, on_consume_timer, 0, 0);
	flow_check_pair(f);
}

static void flow_report(struct flow *f)
{
	uint64_t h;
	int r;

	if (!f->rl->link || !rt_ring_receiver_should_report(&f->r, &h))
		return;
	r = T->post_head(B.ctx, f->rl->link, f->ring_id, h);
	if (r == -EAGAIN) {
		f->head_eagain++; /* asks again shortly */
		uv_timer_start(&f->consume_timer, on_consume_timer, 1, 0);
		return;
	}
	if (r) {
		flow_fail(f, "post_head(%" PRIu64 ") failed: %s", h, strerror(-r));
		return;
	}
	rt_ring_receiver_reported(&f->r, h);
	T->flush(B.ctx, f->rl->link);
}

/*
 * The exact length of record seq as the sender posted it: the flow's only
 * length, or (both ends in this process) the one logged at post time. A
 * record's slot stays reserved until it is consumed, so at most q_cap - 2
 * records are between post and landing: the log of q_cap entries is enough.
 */
static uint64_t flow_exact_len(const struct flow *f, uint64_t seq, uint64_t reported)
{
	if (f->min_len == f->max_len)
		return f->min_len;
	if (f->lens)
		return f->lens[seq % f->q_cap];
	return reported;
}

#define CORRUPT_SEQ 4 /* --corrupt: the 5th record of each flow */

/*
 * --corrupt: flip the byte that opt.corrupt names in a landed record of exact
 * bytes, whose header is at rec and whose payload is at payload.
 */
static void corrupt_record(uint8_t *rec, uint8_t *payload, uint64_t exact)
{
	uint64_t plen = exact > REC_HDR ? exact - REC_HDR : 0, at;

	if (!strcmp(opt.corrupt, "hdr"))
		at = 48; /* record_seq */
	else if (!strcmp(opt.corrupt, "first"))
		at = REC_HDR;
	else if (!strcmp(opt.corrupt, "third"))
		at = REC_HDR + plen / 3;
	else
		at = exact - 1;
	if (at < exact) {
		printf("#    --corrupt %s: byte %" PRIu64 " of record %u (%" PRIu64
		       " bytes) flipped\n",
		       opt.corrupt, at, CORRUPT_SEQ, exact);
		if (at < REC_HDR)
			rec[at] ^= 0x40;
		else
			payload[at - REC_HDR] ^= 0x40;
	}
}

static void flow_landed(struct flow *f, uint64_t off, uint64_t len)
{
	struct rgaps_ring_slot slot;
	uint64_t seq = f->expect_seq, plen, exact, want_len;
	uint8_t want[REC_HDR];
	const uint8_t *buf, *pbuf, *p;
	int r;

	if (f->failed)
		return;
	/* tcp: the exact length; verbs: the footprint (the header has the exact one). */
	exact = flow_exact_len(f, seq, len);
	want_len = footprint_lengths ? RGAPS_ALIGN_UP(exact, RGAPS_RING_ALIGN) : exact;
	if (len != want_len) {
		flow_fail(f,
			  "record %" PRIu64 " of %" PRIu64 " bytes reported as %" PRIu64
			  " bytes, expected %" PRIu64 "%s",
			  seq, exact, len, want_len,
			  footprint_lengths ? " (its 64-byte footprint)" : "");
		return;
	}
	if (off != UINT64_MAX) {
		r = rt_ring_receiver_verify(&f->r, off, len);
		if (r) {
			struct rgaps_ring_slot exp;
			int e = rt_ring_receiver_expect(&f->r, len, &exp);

			flow_fail(f,
				  "record %" PRIu64 " of %" PRIu64
				  " bytes reported at offset %" PRIu64 ", expected %" PRIu64
				  " (%s)",
				  seq, len, off, e ? UINT64_MAX : exp.off, strerror(-r));
			return;
		}
	}
	r = rt_ring_receiver_land(&f->r, len, &slot);
	if (r) {
		flow_fail(f, "record %" PRIu64 " of %" PRIu64 " bytes cannot land: %s", seq, len,
			  strerror(-r));
		return;
	}
	if (off != UINT64_MAX && slot.off != off) {
		flow_fail(f, "record %" PRIu64 " landed at %" PRIu64 ", placement says %" PRIu64,
			  seq, off, slot.off);
		return;
	}
	buf = f->ring + slot.off;
	pbuf = buf + REC_HDR; /* where the payload is: after the header, or in the shadow */
	if (f->hdrs_seen) {
		struct hdr_seen *hs = &f->hdrs_seen[seq % f->q_cap];

		if (f->headers <= seq || hs->off != off || hs->len != len) {
			flow_fail(f,
				  "record %" PRIu64 " landed (at %" PRIu64 ", %" PRIu64
				  " bytes) without its record_header first (%" PRIu64 " headers)",
				  seq, off, len, f->headers);
			return;
		}
		if (hs->redirected) {
			pbuf = f->shadow + slot.off + REC_HDR;
			for (uint64_t i = REC_HDR; i < exact; i++)
				if (buf[i] != RING_FILL) {
					flow_fail(f,
						  "record %" PRIu64
						  " was redirected, but ring byte "
						  "%" PRIu64 " of it was written",
						  seq, i);
					return;
				}
		}
	}
	if (opt.corrupt && seq == CORRUPT_SEQ)
		corrupt_record(f->ring + slot.off, (uint8_t *)pbuf, exact);
	/* Every byte the sender wrote, at the exact length (past it: padding, not checked). */
	build_hdr(want, seq, exact, f->ring_id);
	if (memcmp(buf, want, RGAPS_MIN(exact, REC_HDR)) != 0) {
		uint64_t got_seq = 0;

		if (exact >= 56)
			memcpy(&got_seq, buf + 48, 8);
		flow_fail(f,
			  "record %" PRIu64 " (%" PRIu64 " bytes at %" PRIu64 "): header differs"
			  " (record_seq there: %" PRIu64 ")",
			  seq, exact, slot.off, got_seq);
		f->verify_errors++;
		return;
	}
	if (exact > REC_HDR) {
		plen = exact - REC_HDR;
		p = src + src_off(seq, f->src_align);
		if (f->verify_all || plen <= 2 * SAMPLE) {
			if (memcmp(pbuf, p, plen) != 0) {
				uint64_t i = 0;

				while (i < plen && pbuf[i] == p[i])
					i++;
				flow_fail(f,
					  "record %" PRIu64 " (%" PRIu64
					  " bytes at ring offset %" PRIu64
					  "): payload byte %" PRIu64 " differs",
					  seq, exact, slot.off, i);
				f->verify_errors++;
				return;
			}
		} else if (memcmp(pbuf, p, SAMPLE) != 0 ||
			   memcmp(pbuf + plen - SAMPLE, p + plen - SAMPLE, SAMPLE) != 0 ||
			   memcmp(pbuf + plen / 2, p + plen / 2, 64) != 0) {
			flow_fail(f,
				  "record %" PRIu64 " (%" PRIu64 " bytes at %" PRIu64
				  "): sampled payload differs",
				  seq, exact, slot.off);
			f->verify_errors++;
			return;
		}
	}
	if (!f->landed) {
		f->t_first_land = now_ns();
		f->first_len = len;
	}
	f->t_last_land = now_ns();
	f->expect_seq++;
	f->landed++;
	f->landed_bytes += len;
	if (f->q_tail - f->q_head >= f->q_cap) {
		flow_fail(f, "more records landed unconsumed than the ring can hold (%" PRIu64 ")",
			  f->q_cap);
		return;
	}
	f->q[f->q_tail++ % f->q_cap] = slot;
	if (f->lazy_consume) {
		if (!uv_is_active((uv_handle_t *)&f->consume_timer))
			uv_timer_start(&f->consume_timer, on_consume_timer, 0, 0);
	} else {
		on_consume_timer(&f->consume_timer);
	}
	flow_check_pair(f);
}

/* Source buffers of A, registered once, big enough for the largest record. */
static int sources_init(uint64_t max_len)
{
	int r;

	src_size = max_len + SRC_SLACK;
	src = aligned_alloc(4096, RGAPS_ALIGN_UP(src_size, 4096));
	hdrs = aligned_alloc(4096, (size_t)NHDR * REC_HDR);
	if (!src || !hdrs)
		return -ENOMEM;
	fill_pattern(src, src_size);
	memset(hdrs, 0, (size_t)NHDR * REC_HDR);
	if (!A.ctx)
		return 0;
	r = T->reg_local(A.ctx, src, src_size, &src_mr);
	if (r)
		return r;
	return T->reg_local(A.ctx, hdrs, (uint64_t)NHDR * REC_HDR, &hdr_mr);
}

static void sources_fini(void)
{
	if (src_mr)
		T->dereg_local(A.ctx, src_mr);
	if (hdr_mr)
		T->dereg_local(A.ctx, hdr_mr);
	src_mr = hdr_mr = NULL;
	free(src);
	free(hdrs);
	src = hdrs = NULL;
}

static uint8_t *ring_alloc(uint64_t size, uint8_t **mem_p)
{
	uint8_t *mem = aligned_alloc(4096, RGAPS_ALIGN_UP(size + 2 * GUARD, 4096));

	if (!mem)
		return NULL;
	memset(mem, GUARD_BYTE, GUARD);
	memset(mem + GUARD, 0, size); /* faulted in, as rgapsd's pinned ring is */
	memset(mem + GUARD + size, GUARD_BYTE, GUARD);
	*mem_p = mem;
	return mem + GUARD;
}

static bool guards_intact(const uint8_t *ring, uint64_t size)
{
	for (uint32_t i = 0; i < GUARD; i++)
		if (ring[-(int64_t)GUARD + i] != GUARD_BYTE || ring[size + i] != GUARD_BYTE)
			return false;
	return true;
}

struct flow_cfg {
	const char *label;
	uint32_t ring_id;
	uint64_t ring_size, min_len, max_len, nrecords;
	double seconds, watermark;
	bool verify_all, split_sg, lazy_consume;
	uint32_t src_align;
};

/* Receiver half: geometry, ring memory, the consume timer. */
static int flow_init(struct flow *f, const struct flow_cfg *c, struct tlink *sl, struct tlink *rl)
{
	int r;

	memset(f, 0, sizeof(*f));
	snprintf(f->label, sizeof(f->label), "%s", c->label);
	f->ring_id = c->ring_id;
	f->sl = sl;
	f->rl = rl;
	f->watermark = c->watermark;
	f->min_len = c->min_len;
	f->max_len = c->max_len;
	f->nrecords = c->nrecords;
	f->seconds = c->seconds;
	f->verify_all = c->verify_all;
	f->split_sg = c->split_sg;
	f->lazy_consume = c->lazy_consume;
	f->src_align = c->src_align ? c->src_align : 1;
	f->rng = mix64(opt.seed ^ ((uint64_t)c->ring_id << 32));
	r = rt_ring_geom_init(c->ring_size, c->max_len, RGAPS_RING_ALIGN, &f->g);
	if (r) {
		flow_fail(f, "bad ring shape: size %" PRIu64 " max record %" PRIu64, c->ring_size,
			  c->max_len);
		return r;
	}
	rt_ring_sender_init(&f->s, &f->g);
	if (rl) {
		r = rt_ring_receiver_init(&f->r, &f->g, c->watermark);
		if (r) {
			flow_fail(f, "bad watermark %g", c->watermark);
			return r;
		}
		f->ring = ring_alloc(c->ring_size, &f->ring_mem);
		f->q_cap = c->ring_size / RGAPS_ALIGN_UP(c->min_len, RGAPS_RING_ALIGN) + 2;
		f->q = calloc(f->q_cap, sizeof(*f->q));
		if (sl && c->min_len != c->max_len)
			f->lens = calloc(f->q_cap, sizeof(*f->lens));
		if (opt.redirect) {
			f->shadow = ring_alloc(c->ring_size, &f->shadow_mem);
			f->hdrs_seen = calloc(f->q_cap, sizeof(*f->hdrs_seen));
			if (f->ring)
				memset(f->ring, RING_FILL, c->ring_size);
		}
		if (!f->ring || !f->q || (sl && c->min_len != c->max_len && !f->lens) ||
		    (opt.redirect && (!f->shadow || !f->hdrs_seen))) {
			flow_fail(f, "out of memory for a %" PRIu64 "-byte ring", c->ring_size);
			return -ENOMEM;
		}
		uv_timer_init(&loop, &f->consume_timer);
		f->consume_timer.data = f;
		f->timer_open = true;
	}
	flows[f->ring_id] = f;
	return 0;
}

static void on_flow_timer_closed(uv_handle_t *h)
{
	struct flow *f = h->data;

	f->timer_open = false;
}

static bool pred_flow_timer_closed(void *arg)
{
	return !((struct flow *)arg)->timer_open;
}

static void flow_fini(struct flow *f)
{
	if (f->sl && f->sl->link)
		T->ring_detach(A.ctx, f->sl->link, f->ring_id);
	if (f->rl && f->rl->link)
		T->ring_detach(B.ctx, f->rl->link, f->ring_id);
	if (f->timer_open) {
		uv_close((uv_handle_t *)&f->consume_timer, on_flow_timer_closed);
		run_until(pred_flow_timer_closed, f, 1000, "a timer to close");
	}
	flows[f->ring_id] = NULL;
	if (f->shadow && !guards_intact(f->shadow, f->g.size))
		flow_fail(f, "bytes written outside the shadow of the ring");
	free(f->ring_mem);
	free(f->shadow_mem);
	free(f->hdrs_seen);
	f->shadow_mem = f->shadow = NULL;
	f->hdrs_seen = NULL;
	free(f->q);
	free(f->lens);
	f->ring_mem = f->ring = NULL;
	f->q = NULL;
	f->lens = NULL;
}

/* The ABI's set-up order: sender prepare -> receiver attach -> sender connect. */
static int flow_connect_rings(struct flow *f)
{
	uint8_t d1[RGAPS_RING_DESC_MAX], d2[RGAPS_RING_DESC_MAX];
	size_t n1 = 0, n2 = 0;
	int r;

	r = T->sender_ring_prepare(A.ctx, f->sl->link, f->ring_id, d1, &n1);
	if (r || n1 > RGAPS_RING_DESC_MAX) {
		flow_fail(f, "sender_ring_prepare: %s (desc %zu bytes)", strerror(-r), n1);
		return r ? r : -EINVAL;
	}
	r = T->receiver_ring_attach(B.ctx, f->rl->link, f->ring_id, f->ring, f->g.size, d1, n1, d2,
				    &n2);
	if (r || n2 > RGAPS_RING_DESC_MAX) {
		flow_fail(f, "receiver_ring_attach: %s (desc %zu bytes)", strerror(-r), n2);
		return r ? r : -EINVAL;
	}
	r = T->sender_ring_connect(A.ctx, f->sl->link, f->ring_id, d2, n2);
	if (r) {
		flow_fail(f, "sender_ring_connect: %s", strerror(-r));
		return r;
	}
	return 0;
}

/* This flow's share of a link's counters. */
static void stats_sub(struct rgaps_link_stats *st, const struct rgaps_link_stats *base)
{
	uint64_t *a = (uint64_t *)st;
	const uint64_t *b = (const uint64_t *)base;

	for (size_t i = 0; i < sizeof(*st) / sizeof(uint64_t); i++)
		a[i] -= b[i];
}

static void flow_run(const struct flow_cfg *c, struct tlink *sl, struct tlink *rl)
{
	struct rgaps_link_stats sst = { 0 }, rst = { 0 }, s0 = { 0 }, r0 = { 0 };
	struct flow f;
	char sz[32], rs[32];
	double secs, gbps;
	uint64_t timeout_ms;

	allow_send_errors = false;
	if (sl->link)
		T->link_stats(A.ctx, sl->link, &s0);
	if (rl->link)
		T->link_stats(B.ctx, rl->link, &r0);
	if (flow_init(&f, c, sl, rl) == 0 && flow_connect_rings(&f) == 0) {
		timeout_ms = c->nrecords ? 60000 + c->nrecords * 10
					 : (uint64_t)(c->seconds * 1000) + 60000;
		flow_pump(&f);
		if (!run_until(pred_flow_done, &f, timeout_ms, f.label))
			flow_fail(&f,
				  "stuck: posted %" PRIu64 " sent %" PRIu64 " landed %" PRIu64
				  " tail %" PRIu64 " dhead %" PRIu64 " head %" PRIu64
				  " have_cur %d",
				  f.posted, f.sent_ok, f.landed, f.s.tail, f.s.dhead, f.r.head,
				  f.have_cur);
		/* Whatever was consumed last is reported (the watermark may hold it back). */
		if (!f.failed && f.landed && f.sent_err == 0 && f.posted != f.landed)
			flow_fail(&f, "posted %" PRIu64 " records, %" PRIu64 " landed", f.posted,
				  f.landed);
	}
	if (f.ring && !guards_intact(f.ring, f.g.size))
		flow_fail(&f, "bytes written outside the ring");
	if (!f.failed && f.sent_err)
		flow_fail(&f, "%" PRIu64 " records failed to send", f.sent_err);
	if (sl->link)
		T->link_stats(A.ctx, sl->link, &sst);
	if (rl->link)
		T->link_stats(B.ctx, rl->link, &rst);
	stats_sub(&sst, &s0);
	stats_sub(&rst, &r0);
	secs = f.t_last_land > f.t_first_post ? (double)(f.t_last_land - f.t_first_post) / 1e9 : 0;
	gbps = secs > 0 ? (double)f.landed_bytes / secs / 1e9 : 0;
	check(!f.failed,
	      "%s: %" PRIu64 " records, %.1f MB in %.2f s (%.2f GB/s); ring %s, max record %s, "
	      "wm %.2f; stalls: ring %" PRIu64 ", credits %" PRIu64 " (transport counts %" PRIu64
	      "); pads %" PRIu64 "; heads %" PRIu64 " sent / %" PRIu64 " received",
	      f.label, f.landed, (double)f.landed_bytes / 1e6, secs, gbps,
	      size_str(c->ring_size, rs, sizeof(rs)), size_str(c->max_len, sz, sizeof(sz)),
	      c->watermark, f.ring_stalls, f.credit_stalls, sst.send_credit_stalls, f.s.pad_bytes,
	      rst.head_updates_sent, sst.head_updates_received);
	if (!f.failed && c->nrecords)
		check(sst.records_sent == c->nrecords && rst.records_landed == c->nrecords &&
			      sst.bytes_sent == f.posted_bytes &&
			      rst.bytes_landed == f.landed_bytes,
		      "%s: link stats count the records (sent %" PRIu64 ", landed %" PRIu64 ")",
		      f.label, sst.records_sent, rst.records_landed);
	if (!f.failed && opt.zerocopy && c->max_len >= 256 * KiB)
		check(sst.zc_sends > 0,
		      "%s: %" PRIu64 " sends without a copy (MSG_ZEROCOPY), %" PRIu64
		      " of them completed by a copy after all (loopback does)",
		      f.label, sst.zc_sends, sst.zc_copied);
	if (!f.failed && opt.redirect && c->max_len >= 256 * KiB)
		check(f.redirected > 0 && f.headers == f.landed,
		      "%s: a record_header for each of the %" PRIu64 " records, in ring order, "
		      "before it landed; %" PRIu64 " redirected",
		      f.label, f.landed, f.redirected);
	flow_fini(&f);
	if (c->min_len <= 512 && c->max_len <= 512 && c->nrecords)
		check(f.credit_stalls > 0 && sst.send_credit_stalls > 0,
		      "%s: post_record said -EAGAIN (%" PRIu64 " times; link stats %" PRIu64
		      ") and every record still arrived in order",
		      f.label, f.credit_stalls, sst.send_credit_stalls);
}

/* 200 records of 1 B..64 KiB through a 1 MiB ring, every byte checked: a link works. */
static void flow_smoke(const char *label, uint32_t ring_id, struct tlink *sl, struct tlink *rl)
{
	struct flow_cfg c = { .label = label,
			      .ring_id = ring_id,
			      .ring_size = 1 * MiB,
			      .min_len = 1,
			      .max_len = 64 * KiB,
			      .nrecords = 200,
			      .watermark = 0,
			      .verify_all = true,
			      .split_sg = true };

	flow_run(&c, sl, rl);
}

/* ------------------------------------------------------------------ callbacks */

static void cb_link_accepted(void *arg, struct rgaps_link *link,
			     const uint8_t token[RGAPS_LINK_TOKEN_LEN])
{
	struct side *s = arg;

	accepted_total++;
	for (int i = 0; i < nlinks; i++) {
		struct tlink *t = &links[i];

		if (t->side == s && t->expect && !t->link && !t->up && !t->down &&
		    memcmp(t->token, token, RGAPS_LINK_TOKEN_LEN) == 0) {
			t->link = link;
			t->up = true;
			return;
		}
	}
	/* What the core does with a token it does not know. */
	unknown_tokens++;
	T->close(s->ctx, link);
}

static void cb_link_connected(void *arg, struct rgaps_link *link, int status)
{
	struct tlink *t = tlink_find(arg, link);

	if (!t) {
		stray_callbacks++;
		return;
	}
	t->connect_done = true;
	t->status = status;
	if (status == 0) {
		t->up = true;
	} else {
		t->down = true; /* the transport frees a link that never came up */
		t->link = NULL;
	}
}

static void cb_link_down(void *arg, struct rgaps_link *link, int err, const char *why)
{
	struct tlink *t = tlink_find(arg, link);

	if (!t) {
		stray_callbacks++;
		printf("#    link_down for a link the test closed or never had: %s\n", why);
		return;
	}
	t->down = true;
	t->down_err = err;
	snprintf(t->why, sizeof(t->why), "%s", why ? why : "");
	t->link = NULL;
	info("%s: link_down (%s): %s", t->side->name, strerror(-err), t->why);
}

static void cb_record_landed(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t off,
			     uint64_t len)
{
	struct tlink *t = tlink_find(arg, link);
	struct flow *f = ring_id < 128 ? flows[ring_id] : NULL;

	if (!t) {
		stray_callbacks++;
		return;
	}
	t->landed++;
	t->landed_bytes += len;
	if (t->hostile)
		return;
	if (!f || f->rl != t) {
		stray_callbacks++;
		printf("#    record for ring %u landed on a link that has no such flow\n", ring_id);
		return;
	}
	flow_landed(f, off, len);
}

/*
 * --redirect: a record is arriving (its header in the ring): note it in ring
 * order, and send two of every three that may go elsewhere to the shadow.
 */
static void *cb_record_header(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t off,
			      uint64_t len, bool can_redirect)
{
	struct tlink *t = tlink_find(arg, link);
	struct flow *f = ring_id < 128 ? flows[ring_id] : NULL;
	struct hdr_seen *hs;
	uint64_t seq;

	if (!t) {
		stray_callbacks++;
		return NULL;
	}
	if (t->hostile || !f || f->rl != t || !f->hdrs_seen || f->failed)
		return NULL;
	seq = f->headers++;
	if (seq - f->landed >= f->q_cap) {
		flow_fail(f, "%" PRIu64 " record headers ahead of the landings", seq - f->landed);
		return NULL;
	}
	hs = &f->hdrs_seen[seq % f->q_cap];
	hs->off = off;
	hs->len = len;
	hs->redirected = can_redirect && len > REC_HDR && seq % 3 != 2 && off < f->g.size &&
			 len <= f->g.size - off;
	if (!hs->redirected)
		return NULL;
	f->redirected++;
	return f->shadow + off + REC_HDR;
}

static void cb_record_sent(void *arg, struct rgaps_link *link, uint64_t cookie, int status)
{
	struct tlink *t = tlink_find(arg, link);
	uint32_t ring_id = (uint32_t)(cookie >> 56);
	uint64_t seq = cookie & ((1ull << 56) - 1);
	struct flow *f = ring_id < 128 ? flows[ring_id] : NULL;

	if (!t || !f || f->sl != t) {
		stray_callbacks++;
		return;
	}
	/* The core relies on completions in posting order per ring. */
	if (seq != f->next_sent)
		flow_fail(f, "record_sent for record %" PRIu64 ", expected %" PRIu64, seq,
			  f->next_sent);
	f->next_sent = seq + 1;
	if (status == 0) {
		f->sent_ok++;
	} else {
		f->sent_err++;
		f->link_failed = true; /* nothing more goes out on this link */
		if (!allow_send_errors)
			flow_fail(f, "record %" PRIu64 " failed: %s", seq, strerror(-status));
	}
	f->t_last_sent = now_ns();
	flow_pump(f);
}

static void cb_head_update(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t head)
{
	struct tlink *t = tlink_find(arg, link);
	struct flow *f = ring_id < 128 ? flows[ring_id] : NULL;
	int r;

	if (!t || !f || f->sl != t) {
		stray_callbacks++;
		return;
	}
	r = rt_ring_sender_update_dhead(&f->s, head);
	if (r) {
		flow_fail(f,
			  "head_update %" PRIu64 " refused (tail %" PRIu64 ", dhead %" PRIu64 ")",
			  head, f->s.tail, f->s.dhead);
		return;
	}
	flow_pump(f);
}

static void side_cbs(struct side *s)
{
	s->cbs = (struct rgaps_transport_cbs){
		.arg = s,
		.link_accepted = cb_link_accepted,
		.link_connected = cb_link_connected,
		.link_down = cb_link_down,
		.record_landed = cb_record_landed,
		.record_header = opt.redirect ? cb_record_header : NULL,
		.record_sent = cb_record_sent,
		.head_update = cb_head_update,
	};
}

/* ------------------------------------------------------------------ set-up */

/* A port nobody listens on right now (the kernel's pick for a throwaway socket). */
static int free_port(const char *addr, uint16_t *port_p)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t len;
	int fd, r;

	if (uv_ip4_addr(addr, 0, (struct sockaddr_in *)&ss) == 0)
		len = sizeof(struct sockaddr_in);
	else if (uv_ip6_addr(addr, 0, (struct sockaddr_in6 *)&ss) == 0)
		len = sizeof(struct sockaddr_in6);
	else
		return -EINVAL;
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	r = bind(fd, (struct sockaddr *)&ss, len);
	if (r == 0)
		r = getsockname(fd, (struct sockaddr *)&ss, &len);
	if (r) {
		r = -errno;
		close(fd);
		return r;
	}
	close(fd);
	*port_p = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
						: ((struct sockaddr_in6 *)&ss)->sin6_port);
	return 0;
}

static int load_plugin(void)
{
	char err[512];
	int r;

	if (!opt.plugin_dir)
		opt.plugin_dir = rgaps__plugin_default_dir();
	r = rgaps__plugin_load(opt.plugin_dir, RGAPS_PLUGIN_TRANSPORT, opt.transport, &lp, err,
			       sizeof(err));
	if (r) {
		fprintf(stderr, "transport-conformance: %s\n", err);
		return r;
	}
	T = &lp->ops.transport;
	return 0;
}

/* init + probe one side; 77 (skip) when the transport cannot work here. */
static int side_init(struct side *s)
{
	char why[256] = "";
	int r;

	side_cbs(s);
	r = T->init(&env, &s->cbs, &s->ctx);
	if (r) {
		fprintf(stderr, "transport-conformance: %s init: %s\n", opt.transport,
			strerror(-r));
		return r;
	}
	r = T->probe(s->ctx, why, sizeof(why));
	if (r == -ENODEV) {
		printf("SKIP: transport %s not usable here: %s\n", opt.transport, why);
		return 77;
	}
	if (r) {
		fprintf(stderr, "transport-conformance: %s probe: %s (%s)\n", opt.transport,
			strerror(-r), why);
		return r;
	}
	return 0;
}

static bool pred_loop_idle(void *arg)
{
	return !uv_loop_alive(&loop);
}

/*
 * Teardown as rgapsd does it: fini, unload, then the loop finishes the
 * plugin's handle closes. The loop must close with nothing left behind.
 */
static bool teardown(void)
{
	int spins = 0, r;

	sources_fini();
	if (A.ctx)
		T->fini(A.ctx);
	if (B.ctx)
		T->fini(B.ctx);
	A.ctx = B.ctx = NULL;
	rgaps__plugin_unload(lp);
	lp = NULL;
	uv_close((uv_handle_t *)&watchdog, NULL);
	while (uv_loop_alive(&loop) && spins++ < 2000) {
		uv_run(&loop, UV_RUN_NOWAIT);
		if (!pred_loop_idle(NULL))
			usleep(1000);
	}
	r = uv_loop_close(&loop);
	if (r)
		uv_print_all_handles(&loop, stdout);
	return r == 0;
}

/* ------------------------------------------------------------------ case e: closing */

static bool pred_sender_settled(void *arg)
{
	struct flow *f = arg;

	return f->sl->down && f->sent_ok + f->sent_err == f->posted;
}

static void case_close(struct tlink *main_a)
{
	struct tlink *a2 = tlink_new(&A, 0), *b2 = expect_link(102, false);
	struct tlink *a3 = tlink_new(&A, 0), *b3 = expect_link(103, false);
	struct tlink *a4 = tlink_new(&A, 0), *b4 = expect_link(104, false);
	struct tlink *a5 = tlink_new(&A, 0);
	uint64_t stray0 = stray_callbacks;
	uint16_t closed_port = 0;
	struct flow f;
	int r;

	/* A closes: B sees link_down, A hears nothing more. */
	if (connect_pair(a2, b2, "e: close by the connector")) {
		tl_close(a2);
		run_until(pred_link_down, b2, 10000, "link_down on the listener");
		run_for(100);
		check(b2->down && !a2->down && stray_callbacks == stray0,
		      "e: A closes its link: B sees link_down (%s), A gets no callback", b2->why);
	}
	/* B closes: A sees link_down. */
	if (connect_pair(a3, b3, "e: close by the listener")) {
		tl_close(b3);
		run_until(pred_link_down, a3, 10000, "link_down on the connector");
		run_for(100);
		check(a3->down && !b3->down && stray_callbacks == stray0,
		      "e: B closes its link: A sees link_down (%s), B gets no callback", a3->why);
	}
	/* Records in flight when the link goes: each completes once, then link_down. */
	if (connect_pair(a4, b4, "e: close with records in flight")) {
		struct flow_cfg c = { .label = "e: records in flight",
				      .ring_id = 60,
				      .ring_size = 16 * MiB,
				      .min_len = 256 * KiB,
				      .max_len = 256 * KiB,
				      .nrecords = 48,
				      .watermark = 0 };

		if (flow_init(&f, &c, a4, b4) == 0 && flow_connect_rings(&f) == 0) {
			allow_send_errors = true;
			flow_pump(&f);
			tl_close(b4);
			run_until(pred_sender_settled, &f, 10000,
				  "link_down and every record_sent");
			run_for(100);
			check(a4->down && f.sent_ok + f.sent_err == f.posted && !f.failed &&
				      stray_callbacks == stray0,
			      "e: B closes with %" PRIu64 " records posted: %" PRIu64
			      " sent, %" PRIu64
			      " failed, each once and in order, then link_down (%s)",
			      f.posted, f.sent_ok, f.sent_err, a4->why);
			allow_send_errors = false;
		}
		b4->link = NULL;
		flow_fini(&f);
	}
	/* Nobody listens: link_connected with an error, and nothing after it. */
	r = free_port(opt.connect_addr ? opt.connect_addr : opt.addr, &closed_port);
	if (r == 0) {
		uint16_t saved = opt.port;

		opt.port = closed_port;
		r = T->connect(A.ctx, opt.connect_addr ? opt.connect_addr : opt.addr, closed_port,
			       a5->token, &a5->link);
		opt.port = saved;
		if (r == 0) {
			run_until(pred_connect_done, a5, 15000, "a refused connect to fail");
			run_for(100);
			check(a5->connect_done && a5->status < 0 && stray_callbacks == stray0,
			      "e: connect to a closed port: link_connected(%s), nothing after",
			      strerror(-a5->status));
		} else {
			check(r < 0, "e: connect to a closed port refused at once (%s)",
			      strerror(-r));
		}
	}
	check(main_a->up && main_a->link && !main_a->down, "e: the main link is unaffected");
}

/* ------------------------------------------------------------------ case g: a stream dies */

/* Sockets of this process connected to `port` (the connector's streams), into fds; how many. */
static int connected_to(uint16_t port, int *fds, int max)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)) && n < max) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		struct stat st;
		int fd = atoi(e->d_name);

		if (e->d_name[0] == '.' || fd == dirfd(d) || fstat(fd, &st) ||
		    !S_ISSOCK(st.st_mode))
			continue;
		if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0 && ss.ss_family == AF_INET &&
		    ntohs(((struct sockaddr_in *)&ss)->sin_port) == port)
			fds[n++] = fd;
	}
	closedir(d);
	return n;
}

static bool pred_both_settled(void *arg)
{
	struct flow *f = arg;

	return f->sl->down && f->rl->down && f->sent_ok + f->sent_err == f->posted;
}

static bool pred_landed_some(void *arg)
{
	struct flow *f = arg;

	return f->landed >= 8 || f->failed;
}

/*
 * One stream of a link of several dies (shut down under the transport, as a
 * failing network path would) while records are on the wire: the link goes
 * down as a whole on both ends, every posted record completes once, in order,
 * what landed landed whole and in order, and a new link carries a flow again.
 */
static void case_stream_dies(void)
{
	struct tlink *a = tlink_new(&A, 0), *b = expect_link(120, false);
	struct tlink *a2 = tlink_new(&A, 0), *b2 = expect_link(121, false);
	int before[64], after[64], nb, na, victim = -1;
	uint64_t stray0 = stray_callbacks;
	struct flow f;

	nb = connected_to(opt.port, before, 64);
	if (!connect_pair(a, b, "g: a link of several streams"))
		return;
	na = connected_to(opt.port, after, 64);
	for (int i = 0; i < na && victim < 0; i++) {
		bool old = false;

		for (int j = 0; j < nb; j++)
			old = old || before[j] == after[i];
		if (!old)
			victim = after[i];
	}
	check(na - nb == (int)opt.streams && victim >= 0,
	      "g: the link has %d TCP connections (%u streams)", na - nb, opt.streams);
	if (victim < 0) {
		tl_close(a);
		tl_close(b);
		return;
	}
	struct flow_cfg c = { .label = "g: records in flight when a stream dies",
			      .ring_id = 62,
			      .ring_size = 16 * MiB,
			      .min_len = 1,
			      .max_len = 512 * KiB,
			      .nrecords = 400,
			      .watermark = 0.25,
			      .verify_all = true };

	if (flow_init(&f, &c, a, b) == 0 && flow_connect_rings(&f) == 0) {
		allow_send_errors = true;
		flow_pump(&f);
		run_until(pred_landed_some, &f, 10000, "a few records to land");
		shutdown(victim, SHUT_RDWR);
		run_until(pred_both_settled, &f, 10000, "both ends down, every record_sent");
		run_for(100);
		check(a->down && b->down && f.sent_ok + f.sent_err == f.posted && !f.failed &&
			      f.landed <= f.sent_ok && stray_callbacks == stray0,
		      "g: a stream shut down: both ends down (A: %s; B: %s); %" PRIu64
		      " records posted, %" PRIu64 " sent, %" PRIu64 " failed, each once and in "
		      "order; %" PRIu64 " landed whole and in order",
		      a->why, b->why, f.posted, f.sent_ok, f.sent_err, f.landed);
		allow_send_errors = false;
	}
	flow_fini(&f);
	if (connect_pair(a2, b2, "g: a new link after the loss"))
		flow_smoke("g: the new link carries records again", 63, a2, b2);
	tl_close(a2);
	tl_close(b2);
}

/* ------------------------------------------------------------------ case f: hostile (tcp) */

struct raw {
	uv_tcp_t tcp;
	uv_connect_t creq;
	uv_write_t wreq;
	bool connected, eof, written, closed;
	int status;
	uint8_t wbuf[8192];
	char rbuf[512];
};

static void raw_on_connect(uv_connect_t *req, int status)
{
	struct raw *w = req->data;

	w->connected = true;
	w->status = status;
}

static void raw_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct raw *w = h->data;

	*buf = uv_buf_init(w->rbuf, sizeof(w->rbuf));
}

static void raw_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct raw *w = s->data;

	if (nread < 0) {
		w->eof = true;
		uv_read_stop(s);
	}
}

static void raw_written(uv_write_t *req, int status)
{
	struct raw *w = req->data;

	w->written = true;
	if (status < 0)
		w->eof = true;
}

static void raw_closed(uv_handle_t *h)
{
	((struct raw *)h->data)->closed = true;
}

static bool pred_raw_connected(void *arg)
{
	return ((struct raw *)arg)->connected;
}

static bool pred_raw_written(void *arg)
{
	return ((struct raw *)arg)->written;
}

static bool pred_raw_eof(void *arg)
{
	return ((struct raw *)arg)->eof;
}

static bool pred_raw_closed(void *arg)
{
	return ((struct raw *)arg)->closed;
}

static bool raw_open(struct raw *w)
{
	struct sockaddr_storage ss;

	memset(w, 0, sizeof(*w));
	if (uv_ip4_addr(opt.addr, opt.port, (struct sockaddr_in *)&ss) != 0 &&
	    uv_ip6_addr(opt.addr, opt.port, (struct sockaddr_in6 *)&ss) != 0)
		return false;
	uv_tcp_init(&loop, &w->tcp);
	w->tcp.data = w;
	w->creq.data = w;
	w->wreq.data = w;
	if (uv_tcp_connect(&w->creq, &w->tcp, (struct sockaddr *)&ss, raw_on_connect) != 0)
		return false;
	if (!run_until(pred_raw_connected, w, 5000, "a raw connection") || w->status)
		return false;
	uv_read_start((uv_stream_t *)&w->tcp, raw_alloc, raw_read);
	return true;
}

static bool raw_send(struct raw *w, const void *data, size_t n)
{
	uv_buf_t b = uv_buf_init((char *)w->wbuf, (unsigned int)n);

	rgaps_require(n <= sizeof(w->wbuf));
	memcpy(w->wbuf, data, n);
	w->written = false;
	if (uv_write(&w->wreq, (uv_stream_t *)&w->tcp, &b, 1, raw_written) != 0)
		return false;
	return run_until(pred_raw_written, w, 5000, "a raw write");
}

static void raw_close(struct raw *w)
{
	uv_close((uv_handle_t *)&w->tcp, raw_closed);
	run_until(pred_raw_closed, w, 1000, "a raw socket to close");
}

static void mk_preamble(uint8_t *p, uint32_t magic, uint32_t version, const uint8_t *token)
{
	put_le32(p, magic);
	put_le32(p + 4, version);
	memcpy(p + 8, token, RGAPS_LINK_TOKEN_LEN);
}

/* docs/PROTOCOL.md section 3: the 32-byte preamble of stream idx of a link of count streams. */
static void mk_preamble2(uint8_t *p, const uint8_t *token, uint16_t idx, uint16_t count)
{
	mk_preamble(p, 0x44544752u, 2, token);
	p[24] = (uint8_t)idx;
	p[25] = (uint8_t)(idx >> 8);
	p[26] = (uint8_t)count;
	p[27] = (uint8_t)(count >> 8);
	memset(p + 28, 0, 4);
}

static void mk_frame(uint8_t *p, uint32_t magic, uint8_t type, uint8_t ring, uint64_t off,
		     uint64_t len)
{
	put_le32(p, magic);
	p[4] = type;
	p[5] = ring;
	p[6] = 0;
	p[7] = 0;
	put_le64(p + 8, off);
	put_le64(p + 16, len);
}

#define TCP_PRE_MAGIC	  0x44544752u
#define TCP_FRAME_MAGIC	  0x46544752u
#define HOSTILE_RING_SIZE (64 * KiB)

/*
 * A ring of HOSTILE_RING_SIZE bytes of RING_FILL (*ring, in *mem: free it), prepared on
 * A's main link and attached on B's hostile link h as ring_id: 0, or the error of the step
 * that failed.
 */
static int hostile_ring(struct tlink *main_a, struct tlink *h, uint32_t ring_id, uint8_t **ring,
			uint8_t **mem)
{
	uint8_t d1[RGAPS_RING_DESC_MAX], d2[RGAPS_RING_DESC_MAX];
	size_t n1 = 0, n2 = 0;
	int r;

	*ring = ring_alloc(HOSTILE_RING_SIZE, mem);
	memset(*ring, RING_FILL, HOSTILE_RING_SIZE);
	r = T->sender_ring_prepare(A.ctx, main_a->link, ring_id, d1, &n1);
	if (r == 0)
		r = T->receiver_ring_attach(B.ctx, h->link, ring_id, *ring, HOSTILE_RING_SIZE, d1,
					    n1, d2, &n2);
	return r;
}

/*
 * A raw client that presents a known token, a ring attached for it on B (with a
 * sender descriptor A prepared on the main link), then `bytes`. Expects B's
 * link_down with `want` in the reason, nothing written outside the ring, and
 * the ring untouched except for records that legitimately landed before.
 */
static void hostile_frames(const char *label, struct tlink *main_a, uint32_t salt, uint32_t ring_id,
			   bool attach, const uint8_t *bytes, size_t n, const char *want,
			   uint64_t first_ok_len)
{
	struct tlink *h = expect_link(salt, true);
	uint8_t pre[24];
	uint8_t *mem = NULL, *ring = NULL;
	bool intact = true;
	struct raw w;
	int r = 0;

	if (!raw_open(&w)) {
		check(false, "%s: raw connection failed", label);
		return;
	}
	mk_preamble(pre, TCP_PRE_MAGIC, 1, h->token);
	raw_send(&w, pre, sizeof(pre));
	if (!run_until(pred_link_up, h, 5000, "the hostile link to be accepted")) {
		check(false, "%s: link with a known token not accepted", label);
		raw_close(&w);
		return;
	}
	if (attach)
		r = hostile_ring(main_a, h, ring_id, &ring, &mem);
	if (r == 0) {
		raw_send(&w, bytes, n);
		run_until(pred_link_down, h, 5000, "link_down of the hostile link");
		run_until(pred_raw_eof, &w, 5000, "the hostile connection to be closed");
	}
	if (ring) {
		for (uint64_t i = 0; i < HOSTILE_RING_SIZE; i++) {
			uint8_t want_b = i < first_ok_len ? 0x11 : RING_FILL;

			if (ring[i] != want_b) {
				intact = false;
				break;
			}
		}
		intact = intact && guards_intact(ring, HOSTILE_RING_SIZE);
		T->ring_detach(A.ctx, main_a->link, ring_id);
	}
	check(r == 0 && h->down && strstr(h->why, want) && w.eof && intact &&
		      h->landed == (first_ok_len ? 1u : 0u),
	      "%s: link_down \"%s\"; peer disconnected; %s", label, h->why,
	      ring ? (intact ? "ring and guards untouched" : "RING OR GUARDS CHANGED") : "no ring");
	raw_close(&w);
	free(mem);
}

/*
 * The core detaches a ring (and frees it) while a record for it is half read:
 * the rest of that record and later ones for the ring are dropped, never
 * written to the freed memory (ASan watches), and the link stays up.
 */
static void case_detach_midway(struct tlink *main_a)
{
	struct tlink *h = expect_link(212, true);
	uint8_t pre[24], buf[8192];
	uint8_t *mem = NULL, *ring;
	struct raw w;
	int r;

	if (!raw_open(&w)) {
		check(false, "f: detach midway: raw connection failed");
		return;
	}
	mk_preamble(pre, TCP_PRE_MAGIC, 1, h->token);
	raw_send(&w, pre, sizeof(pre));
	if (!run_until(pred_link_up, h, 5000, "the link to be accepted")) {
		check(false, "f: detach midway: link not accepted");
		raw_close(&w);
		return;
	}
	r = hostile_ring(main_a, h, 81, &ring, &mem);
	if (r == 0) {
		mk_frame(buf, TCP_FRAME_MAGIC, 1, 81, 0, 6000);
		memset(buf + 24, 0x33, sizeof(buf) - 24);
		raw_send(&w, buf, 24 + 1000);
		run_for(50);
		T->ring_detach(B.ctx, h->link, 81);
		free(mem); /* the core may free the ring once it is detached */
		mem = NULL;
		raw_send(&w, buf + 24, 5000);
		mk_frame(buf, TCP_FRAME_MAGIC, 1, 81, 0, 3000);
		raw_send(&w, buf, 24 + 3000);
		run_for(100);
	}
	T->ring_detach(A.ctx, main_a->link, 81);
	check(r == 0 && !h->down && h->landed == 0 && !w.eof,
	      "f: ring detached with a record half read: the rest and a later record dropped, "
	      "the link stays up");
	raw_close(&w);
	run_until(pred_link_down, h, 5000, "link_down after the peer closed");
	free(mem);
}

/*
 * One raw connection presents stream 0 of count (a link that must not form): the
 * transport closes it, waiting is what it waits for, and the core is never offered
 * a link; says is the check's line.
 */
static void one_stream_refused(const uint8_t *token, uint16_t count, const char *waiting,
			       const char *says)
{
	uint64_t accepted0 = accepted_total;
	uint8_t pre[32];
	struct raw w;

	if (!raw_open(&w))
		return;
	mk_preamble2(pre, token, 0, count);
	raw_send(&w, pre, sizeof(pre));
	run_until(pred_raw_eof, &w, 8000, waiting);
	check(w.eof && accepted_total == accepted0, "%s", says);
	raw_close(&w);
}

/*
 * Links of several streams that break the rules: one that never forms (only
 * stream 0 of 2 comes), a stream index twice, too many streams, and formed
 * links (known token, a ring attached) whose streams number a record twice or
 * lose a stream. None is offered to the core before it forms; a formed one
 * goes down with the reason and leaves its ring as it was.
 */
static void case_hostile_streams(struct tlink *main_a)
{
	uint8_t pre[32], token[16], buf[256];
	uint64_t accepted0 = accepted_total;
	struct raw w[2];
	uint8_t *mem = NULL, *ring;
	bool intact;
	int r;

	memset(token, 0xd5, sizeof(token));
	one_stream_refused(
		token, 2, "a link that never forms to be dropped",
		"f: stream 0 of 2, and never stream 1: dropped, never offered to the core");
	if (raw_open(&w[0]) && raw_open(&w[1])) {
		mk_preamble2(pre, token, 0, 2);
		raw_send(&w[0], pre, sizeof(pre));
		raw_send(&w[1], pre, sizeof(pre));
		run_until(pred_raw_eof, &w[1], 8000, "a stream named twice to be refused");
		check(w[1].eof && accepted_total == accepted0,
		      "f: stream 0 of 2 twice: the second closed, never offered to the core");
		raw_close(&w[0]);
		raw_close(&w[1]);
	}
	one_stream_refused(token, 17, "17 streams to be refused",
			   "f: a link of 17 streams: closed, never offered to the core");
	for (int k = 0; k < 2; k++) {
		struct tlink *h = expect_link(220 + k, true);
		uint32_t ring_id = 82 + k;
		const char *want = k == 0 ? "numbered twice" : "closed the data link";

		if (!raw_open(&w[0]) || !raw_open(&w[1]))
			break;
		for (uint16_t i = 0; i < 2; i++) {
			mk_preamble2(pre, h->token, i, 2);
			raw_send(&w[i], pre, sizeof(pre));
		}
		if (!run_until(pred_link_up, h, 5000, "a link of two streams to be accepted")) {
			check(false,
			      "f: a link of two raw streams with a known token not accepted");
			raw_close(&w[0]);
			raw_close(&w[1]);
			break;
		}
		r = hostile_ring(main_a, h, ring_id, &ring, &mem);
		if (r == 0 && k == 0) {
			/* both streams say they carry record 0, the same one: whichever is
			 * read first lands at 0, the other is refused */
			mk_frame(buf, TCP_FRAME_MAGIC, 1, (uint8_t)ring_id, 0, 64);
			memset(buf + 24, 0x11, 64);
			raw_send(&w[0], buf, 24 + 64);
			raw_send(&w[1], buf, 24 + 64);
		} else if (r == 0) {
			raw_close(&w[1]); /* one stream is lost */
		}
		if (r == 0)
			run_until(pred_link_down, h, 5000, "link_down of the broken link");
		intact = guards_intact(ring, HOSTILE_RING_SIZE);
		for (uint64_t i = 64; i < HOSTILE_RING_SIZE; i++)
			intact = intact && ring[i] == RING_FILL;
		check(r == 0 && h->down && strstr(h->why, want) && intact,
		      "f: a link of two streams %s: link_down \"%s\"; the ring untouched past the "
		      "first record",
		      k == 0 ? "that numbers a record twice" : "that loses one", h->why);
		T->ring_detach(A.ctx, main_a->link, ring_id);
		raw_close(&w[0]);
		if (k == 0)
			raw_close(&w[1]);
		free(mem);
		mem = NULL;
	}
}

static void case_hostile(struct tlink *main_a)
{
	uint8_t pre[24], buf[4096 + 96], bad_token[16];
	uint64_t unknown0 = unknown_tokens, accepted0;
	struct raw w;

	/* Unknown token: the core (this test) closes the link it is offered. */
	memset(bad_token, 0xee, sizeof(bad_token));
	if (raw_open(&w)) {
		mk_preamble(pre, TCP_PRE_MAGIC, 1, bad_token);
		raw_send(&w, pre, sizeof(pre));
		run_until(pred_raw_eof, &w, 5000, "an unknown token to be refused");
		check(w.eof && unknown_tokens == unknown0 + 1,
		      "f: preamble with an unknown token: offered to the core, closed by it");
		raw_close(&w);
	}
	/* Not a preamble: closed without the core hearing of it. */
	accepted0 = accepted_total;
	if (raw_open(&w)) {
		mk_preamble(pre, 0x20544547u /* "GET " */, 1, bad_token);
		raw_send(&w, pre, sizeof(pre));
		run_until(pred_raw_eof, &w, 5000, "a bad preamble to be refused");
		check(w.eof && accepted_total == accepted0,
		      "f: bad preamble magic: closed, never offered to the core");
		raw_close(&w);
	}
	if (raw_open(&w)) {
		mk_preamble(pre, TCP_PRE_MAGIC, 3, bad_token);
		raw_send(&w, pre, sizeof(pre));
		run_until(pred_raw_eof, &w, 5000, "a preamble of another version to be refused");
		check(w.eof && accepted_total == accepted0,
		      "f: preamble version 3: closed, never offered to the core");
		raw_close(&w);
	}
	/* Silent peer: dropped after the preamble timeout (~3 s). */
	if (raw_open(&w)) {
		uint64_t t0 = now_ns();

		raw_send(&w, "RGTD", 4);
		run_until(pred_raw_eof, &w, 8000, "a silent peer to be dropped");
		check(w.eof && accepted_total == accepted0,
		      "f: half a preamble then silence: dropped after %.1f s, never offered",
		      (double)(now_ns() - t0) / 1e9);
		raw_close(&w);
	}

	/* Known token, then frames that break the rules. */
	mk_frame(buf, TCP_FRAME_MAGIC, 1, 70, HOSTILE_RING_SIZE - 16, 100);
	memset(buf + 24, 0xee, 100);
	hostile_frames("f: record outside the ring", main_a, 201, 70, true, buf, 24 + 100,
		       "outside the ring", 0);
	mk_frame(buf, TCP_FRAME_MAGIC, 1, 71, UINT64_MAX - 8, 64);
	hostile_frames("f: record with a wrapping offset", main_a, 202, 71, true, buf, 24 + 64,
		       "outside the ring", 0);
	mk_frame(buf, TCP_FRAME_MAGIC, 1, 72, 0, HOSTILE_RING_SIZE + 64);
	hostile_frames("f: record longer than the ring", main_a, 203, 72, true, buf, 24,
		       "outside the ring", 0);
	mk_frame(buf, 0x46544753u, 1, 73, 0, 64);
	hostile_frames("f: bad frame magic", main_a, 204, 73, true, buf, 24 + 64, "magic", 0);
	mk_frame(buf, TCP_FRAME_MAGIC, 9, 74, 0, 64);
	hostile_frames("f: unknown frame type", main_a, 205, 74, true, buf, 24, "type", 0);
	mk_frame(buf, TCP_FRAME_MAGIC, 1, 90, 0, 64);
	hostile_frames("f: record for a ring never attached", main_a, 206, 75, true, buf, 24 + 64,
		       "not attached", 0);
	mk_frame(buf, TCP_FRAME_MAGIC, 1, 200, 0, 64);
	hostile_frames("f: record for ring id 200", main_a, 207, 76, true, buf, 24 + 64, "ring", 0);
	mk_frame(buf, TCP_FRAME_MAGIC, 1, 77, 0, 0);
	hostile_frames("f: empty record", main_a, 208, 77, true, buf, 24, "empty", 0);
	mk_frame(buf, TCP_FRAME_MAGIC, 2, 78, 0, 0);
	hostile_frames("f: head update for a ring B does not write to", main_a, 209, 78, true, buf,
		       24, "does not write", 0);
	mk_frame(buf, TCP_FRAME_MAGIC, 2, 79, 0, 8);
	hostile_frames("f: head update with a payload", main_a, 210, 79, true, buf, 24 + 8,
		       "carries", 0);
	/* A valid record lands, then one over it (unconsumed) is refused before a byte lands. */
	mk_frame(buf, TCP_FRAME_MAGIC, 1, 80, 0, 4096);
	memset(buf + 24, 0x11, 4096);
	mk_frame(buf + 24 + 4096, TCP_FRAME_MAGIC, 1, 80, 0, 64);
	memset(buf + 48 + 4096, 0x22, 48);
	hostile_frames("f: record over unconsumed bytes", main_a, 211, 80, true, buf,
		       24 + 4096 + 24 + 48, "unconsumed", 4096);
	case_detach_midway(main_a);
	case_hostile_streams(main_a);
}

/* ------------------------------------------------------------------ the in-process run */

static int run_conformance(void)
{
	struct tlink *a, *b;
	uint64_t stray0;
	char rs[32];
	int r;

	r = side_init(&A);
	if (r == 0)
		r = side_init(&B);
	if (r)
		return r == 77 ? 77 : 1;
	if (!opt.port && (r = free_port(opt.addr, &opt.port)) != 0) {
		fprintf(stderr, "no free port on %s: %s\n", opt.addr, strerror(-r));
		return 1;
	}
	r = T->listen(B.ctx, opt.addr, opt.port);
	check(r == 0, "B listens on %s:%u (%s)", opt.addr, opt.port, r ? strerror(-r) : "ok");
	if (r)
		return 1;
	r = sources_init(RGAPS_MAX(opt.record_size, 256 * KiB));
	if (r) {
		check(false, "reg_local of the source buffers: %s", strerror(-r));
		return 1;
	}
	a = tlink_new(&A, 0);
	b = expect_link(1, false);
	if (!connect_pair(a, b, "main link"))
		return 1;
	check(true, "A connects to %s:%u presenting a token; B accepts it",
	      opt.connect_addr ? opt.connect_addr : opt.addr, opt.port);
	stray0 = stray_callbacks;

	if (strchr(opt.cases, 'a') || strchr(opt.cases, 'b')) {
		static const double wms[] = { 0.0, 0.25, 1.0 };

		for (unsigned i = 0; i < RGAPS_ARRAY_SIZE(wms); i++) {
			char label[96];
			struct flow_cfg c = {
				.label = label,
				.ring_id = 1 + i,
				.ring_size = 1 * MiB,
				.min_len = 1,
				.max_len = 256 * KiB,
				.nrecords = opt.records,
				.watermark = wms[i],
				.verify_all = true,
				.split_sg = true,
				.lazy_consume = true,
			};

			if (i > 0 && !strchr(opt.cases, 'b'))
				break;
			if (i == 0 && !strchr(opt.cases, 'a'))
				continue;
			snprintf(label, sizeof(label),
				 "%s: random records 1 B..256 KiB, watermark %.2f",
				 i == 0 ? "a" : "b", wms[i]);
			flow_run(&c, a, b);
		}
	}
	if (strchr(opt.cases, 'c')) {
		struct flow_cfg c = { .label = "c: tiny records 1..512 B (send credits)",
				      .ring_id = 10,
				      .ring_size = 4 * MiB,
				      .min_len = 1,
				      .max_len = 512,
				      .nrecords = opt.records * 10,
				      .watermark = 0.25,
				      .verify_all = true,
				      .split_sg = true };

		flow_run(&c, a, b);
	}
	if (strchr(opt.cases, 'd')) {
		char label[128];
		struct flow_cfg c = { .label = label,
				      .ring_id = 20,
				      .ring_size = opt.ring_size,
				      .min_len = opt.record_size,
				      .max_len = opt.record_size,
				      .seconds = opt.seconds,
				      .watermark = opt.watermark,
				      .verify_all = true,
				      .src_align = 64 };

		snprintf(label, sizeof(label),
			 "d: %s records for %.1f s, every byte checked (in-process: one thread)",
			 size_str(opt.record_size, rs, sizeof(rs)), opt.seconds);
		flow_run(&c, a, b);
	}
	if (strchr(opt.cases, 'f')) {
		if (is_tcp)
			case_hostile(a);
		else
			printf("#    f: hostile raw connections are tcp-only; skipped for %s\n",
			       opt.transport);
		if (is_tcp)
			flow_smoke("f: the main link still works afterwards", 30, a, b);
	}
	if (strchr(opt.cases, 'e'))
		case_close(a);
	if (strchr(opt.cases, 'g')) {
		if (is_tcp && opt.streams > 1)
			case_stream_dies();
		else
			printf("#    g: a stream that dies needs tcp with --streams > 1; skipped\n");
	}
	check(stray_callbacks == stray0,
	      "no callback for a closed, failed or unknown link (%" PRIu64 ")",
	      stray_callbacks - stray0);
	tl_close(a);
	tl_close(b);
	return 0;
}

/* ------------------------------------------------------------------ --bench: two processes */

struct bench_params {
	uint64_t ring_size, record_size;
	double watermark;
	uint32_t verify_all, desc_len;
	uint8_t desc[RGAPS_RING_DESC_MAX];
};

struct bench_ring {
	int32_t status;
	uint32_t desc_len;
	uint8_t desc[RGAPS_RING_DESC_MAX];
};

struct bench_total {
	uint64_t records, bytes;
};

struct bench_result {
	int32_t ok;
	uint64_t records, bytes, first_len, t_first, t_last;
	struct rgaps_link_stats st;
	char why[256];
};

static int ctl_write(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t w = write(fd, b, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -EIO;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

static int ctl_read(int fd, void *p, size_t n, int timeout_ms)
{
	uint8_t *b = p;

	while (n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&pfd, 1, timeout_ms) <= 0)
			return -ETIMEDOUT;
		r = read(fd, b, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -EIO;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

static struct flow bench_flow;
static int bench_ctl = -1;
static uv_poll_t ctl_poll;

static void on_ctl_readable(uv_poll_t *p, int status, int events)
{
	struct bench_total tot;

	uv_poll_stop(p);
	if (ctl_read(bench_ctl, &tot, sizeof(tot), 1000) != 0) {
		flow_fail(&bench_flow, "the sender went away");
		return;
	}
	bench_flow.expect_total = tot.records;
}

static bool pred_bench_rx_done(void *arg)
{
	return flow_receiver_done(&bench_flow) || !bench_flow.rl->link;
}

static int bench_receiver(int ctl, struct tlink *b)
{
	struct bench_params bp;
	struct bench_ring br = { 0 };
	struct bench_result res = { 0 };
	struct flow *f = &bench_flow;
	size_t n = 0;
	int r;

	bench_ctl = ctl;
	r = side_init(&B);
	if (r == 0)
		r = T->listen(B.ctx, opt.addr, opt.port);
	if (ctl_write(ctl, &r, sizeof(r)) || r)
		return 1;
	if (!run_until(pred_link_up, b, 15000, "the sender's link"))
		return 1;
	if (ctl_read(ctl, &bp, sizeof(bp), 15000))
		return 1;
	struct flow_cfg c = { .label = "bench receiver",
			      .ring_id = 1,
			      .ring_size = bp.ring_size,
			      .min_len = bp.record_size,
			      .max_len = bp.record_size,
			      .seconds = 1,
			      .watermark = bp.watermark,
			      .verify_all = bp.verify_all,
			      .src_align = 64 };

	src_size = bp.record_size + SRC_SLACK; /* the same pattern the sender cuts from */
	src = aligned_alloc(4096, RGAPS_ALIGN_UP(src_size, 4096));
	if (!src)
		return 1;
	fill_pattern(src, src_size);
	br.status = flow_init(f, &c, NULL, b);
	if (br.status == 0)
		br.status = T->receiver_ring_attach(B.ctx, b->link, 1, f->ring, f->g.size, bp.desc,
						    bp.desc_len, br.desc, &n);
	br.desc_len = (uint32_t)n;
	if (ctl_write(ctl, &br, sizeof(br)) || br.status)
		return 1;
	uv_poll_init(&loop, &ctl_poll, ctl);
	uv_poll_start(&ctl_poll, UV_READABLE, on_ctl_readable);
	run_until(pred_bench_rx_done, NULL, (uint64_t)(opt.seconds * 1000) + 120000,
		  "every record to land");
	uv_close((uv_handle_t *)&ctl_poll, NULL);
	res.ok = flow_receiver_done(f) && !f->failed;
	res.records = f->landed;
	res.bytes = f->landed_bytes;
	res.first_len = f->first_len;
	res.t_first = f->t_first_land;
	res.t_last = f->t_last_land;
	if (b->link)
		T->link_stats(B.ctx, b->link, &res.st);
	snprintf(res.why, sizeof(res.why), "%s", f->failed ? f->why : "");
	if (ctl_write(ctl, &res, sizeof(res)))
		return 1;
	run_until(pred_link_down, b, 10000, "the sender to close");
	flow_fini(f);
	free(src);
	src = NULL;
	tl_close(b);
	return res.ok && b->down ? 0 : 1;
}

static int bench_sender(int ctl, pid_t child, struct tlink *a, struct tlink *b)
{
	struct bench_params bp = { 0 };
	struct bench_ring br;
	struct bench_total tot;
	struct bench_result res;
	struct flow *f = &bench_flow;
	char rs[32], zs[32];
	size_t n = 0;
	int r, st;
	double secs, gbs, tx_secs;

	if (ctl_read(ctl, &r, sizeof(r), 15000) || r) {
		fprintf(stderr, "bench: the receiver did not start listening\n");
		return 1;
	}
	r = side_init(&A);
	if (r)
		return 1;
	r = T->connect(A.ctx, opt.connect_addr ? opt.connect_addr : opt.addr, opt.port, b->token,
		       &a->link);
	if (r || !run_until(pred_connect_done, a, 15000, "the link") || a->status) {
		fprintf(stderr, "bench: connect failed: %s\n", strerror(-(r ? r : a->status)));
		return 1;
	}
	r = sources_init(opt.record_size);
	if (r)
		return 1;
	struct flow_cfg c = { .label = "bench",
			      .ring_id = 1,
			      .ring_size = opt.ring_size,
			      .min_len = opt.record_size,
			      .max_len = opt.record_size,
			      .seconds = opt.seconds,
			      .watermark = opt.watermark,
			      .src_align = 64 };

	if (flow_init(f, &c, a, NULL))
		return 1;
	r = T->sender_ring_prepare(A.ctx, a->link, 1, bp.desc, &n);
	if (r)
		return 1;
	bp.desc_len = (uint32_t)n;
	bp.ring_size = opt.ring_size;
	bp.record_size = opt.record_size;
	bp.watermark = opt.watermark;
	bp.verify_all = opt.verify_all;
	if (ctl_write(ctl, &bp, sizeof(bp)) || ctl_read(ctl, &br, sizeof(br), 15000) || br.status) {
		fprintf(stderr, "bench: the receiver could not attach its ring\n");
		return 1;
	}
	r = T->sender_ring_connect(A.ctx, a->link, 1, br.desc, br.desc_len);
	if (r)
		return 1;
	flow_pump(f);
	run_until(pred_flow_done, f, (uint64_t)(opt.seconds * 1000) + 120000, "the sender");
	tot.records = f->posted;
	tot.bytes = f->posted_bytes;
	if (ctl_write(ctl, &tot, sizeof(tot)) || ctl_read(ctl, &res, sizeof(res), 120000)) {
		fprintf(stderr, "bench: no result from the receiver\n");
		return 1;
	}
	run_for(20); /* read the last Head frames, so the close is a FIN, not a reset */
	tl_close(a);
	if (waitpid(child, &st, 0) != child)
		st = -1;
	secs = res.t_last > f->t_first_post ? (double)(res.t_last - f->t_first_post) / 1e9 : 0;
	gbs = secs > 0 ? (double)res.bytes / secs / 1e9 : 0;
	tx_secs = (double)(f->t_last_sent - f->t_first_post) / 1e9;
	check(res.ok && !f->failed && res.records == f->posted,
	      "bench %s: %s records, ring %s, watermark %.2f, verify %s: %" PRIu64 " records, "
	      "%.2f GB in %.2f s = %.3f GB/s (%.2f Gbit/s); sender stalls: ring %" PRIu64
	      ", credits %" PRIu64 "; %s",
	      opt.transport, size_str(opt.record_size, zs, sizeof(zs)),
	      size_str(opt.ring_size, rs, sizeof(rs)), opt.watermark,
	      opt.verify_all ? "every byte" : "headers + samples", res.records,
	      (double)res.bytes / 1e9, secs, gbs, gbs * 8, f->ring_stalls, f->credit_stalls,
	      res.ok ? "all landed and verified" : res.why);
	printf("RESULT transport=%s record_bytes=%" PRIu64 " ring_bytes=%" PRIu64
	       " watermark=%.2f seconds=%.3f bytes=%" PRIu64 " records=%" PRIu64
	       " GBps=%.4f Gbps=%.3f tx_seconds=%.3f ok=%d\n",
	       opt.transport, opt.record_size, opt.ring_size, opt.watermark, secs, res.bytes,
	       res.records, gbs, gbs * 8, tx_secs, res.ok);
	check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "bench receiver process exited cleanly");
	return 0;
}

static int run_bench(void)
{
	struct tlink *a, *b;
	int sv[2], r, status;
	pid_t pid;

	if (!opt.port && free_port(opt.addr, &opt.port) != 0)
		return 1;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		return 1;
	a = tlink_new(&A, 0);
	b = expect_link(1, false);
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		close(sv[0]);
		uv_loop_fork(&loop);
		r = bench_receiver(sv[1], b);
		if (!teardown())
			r = 1;
		_exit(r);
	}
	close(sv[1]);
	r = bench_sender(sv[0], pid, a, b);
	if (r) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		check(false, "bench failed");
	}
	close(sv[0]);
	return 0;
}

/* ------------------------------------------------------------------ main */

static void usage(FILE *out)
{
	fprintf(out,
		"usage: transport-conformance [options]\n"
		"  --transport NAME     transport plugin (tcp, verbs; default tcp)\n"
		"  --plugin-dir DIR     where transport-NAME.so is (default: build tree)\n"
		"  --addr ADDR          B listens here (default 127.0.0.1)\n"
		"  --connect-addr ADDR  A connects here (default: --addr)\n"
		"  --port N             (default: a free port)\n"
		"  --cases LETTERS      subset of abcdefg (default all)\n"
		"  --records N          records of case a/b (default 2000; c uses 10x)\n"
		"  --seconds S          length of the throughput run (default 2)\n"
		"  --record-size SIZE   throughput record size (default 4M)\n"
		"  --ring-size SIZE     throughput ring size (default 64M)\n"
		"  --watermark W        throughput watermark (default 0.25)\n"
		"  --verify-all         --bench: check every byte (default: headers + samples)\n"
		"  --corrupt WHERE      test the checker: flip a byte of the 5th record of each\n"
		"                       flow (hdr, first, third or last); it must fail\n"
		"  --bench              throughput only, sender and receiver in two processes\n"
		"  --streams N          TCP streams per link (tcp option \"streams\", default 1)\n"
		"  --redirect           take record_header: land large records in a shadow ring\n"
		"  --zerocopy           send large writes with MSG_ZEROCOPY (tcp option)\n"
		"  --seed N, -v\n");
}

static int parse_args(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		bool takes = true;

		if (!strcmp(a, "--transport") && v)
			opt.transport = v;
		else if (!strcmp(a, "--plugin-dir") && v)
			opt.plugin_dir = v;
		else if (!strcmp(a, "--addr") && v)
			opt.addr = v;
		else if (!strcmp(a, "--connect-addr") && v)
			opt.connect_addr = v;
		else if (!strcmp(a, "--port") && v)
			opt.port = (uint16_t)atoi(v);
		else if (!strcmp(a, "--cases") && v)
			opt.cases = v;
		else if (!strcmp(a, "--records") && v)
			opt.records = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--seconds") && v)
			opt.seconds = atof(v);
		else if (!strcmp(a, "--watermark") && v)
			opt.watermark = atof(v);
		else if (!strcmp(a, "--seed") && v)
			opt.seed = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--streams") && v)
			opt.streams = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--corrupt") && v) {
			if (strcmp(v, "hdr") && strcmp(v, "first") && strcmp(v, "third") &&
			    strcmp(v, "last")) {
				fprintf(stderr, "--corrupt: hdr, first, third or last\n");
				return -EINVAL;
			}
			opt.corrupt = v;
		}
		else if (!strcmp(a, "--record-size") && v) {
			if (parse_size(v, &opt.record_size))
				return -EINVAL;
		} else if (!strcmp(a, "--ring-size") && v) {
			if (parse_size(v, &opt.ring_size))
				return -EINVAL;
		} else {
			takes = false;
			if (!strcmp(a, "--bench"))
				opt.bench = true;
			else if (!strcmp(a, "--verify-all"))
				opt.verify_all = true;
			else if (!strcmp(a, "--redirect"))
				opt.redirect = true;
			else if (!strcmp(a, "--zerocopy"))
				opt.zerocopy = true;
			else if (!strcmp(a, "-v"))
				opt.verbose++;
			else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
				usage(stdout);
				exit(0);
			} else {
				fprintf(stderr, "unknown or incomplete option %s\n", a);
				usage(stderr);
				return -EINVAL;
			}
		}
		if (takes)
			i++;
	}
	if (opt.record_size < 1 || opt.ring_size < 2 * RGAPS_ALIGN_UP(opt.record_size, 64)) {
		fprintf(stderr,
			"the ring must hold two records: --ring-size >= 2 x --record-size\n");
		return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int r;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	if (parse_args(argc, argv))
		return 2;
	is_tcp = strcmp(opt.transport, "tcp") == 0;
	footprint_lengths = strcmp(opt.transport, "verbs") == 0;
	/* The plugin's own warnings (a link down and why) show, except in the benchmark. */
	rgaps__log_level = opt.verbose ? 3 : opt.bench ? 0 : 1;
	if (load_plugin())
		return 1;
	uv_loop_init(&loop);
	uv_timer_init(&loop, &watchdog);
	rgaps__plugin_env_init(&env, RGAPS_ROLE_DAEMON, &loop);
	if (opt.streams != 1 || opt.zerocopy) {
		static struct rgaps_option_value ov[2] = { { .name = "streams" },
							   { .name = "zerocopy" } };

		/* as rgapsd hands them from "transport_options" (it checked the bounds there) */
		ov[0].value = opt.streams;
		ov[1].value = opt.zerocopy;
		env.options = ov;
		env.noptions = 2;
	}
	printf("# transport %s from %s: %s\n", opt.transport, lp->path, lp->desc->description);
	printf("# %u stream%s per link%s%s\n", opt.streams, opt.streams == 1 ? "" : "s",
	       opt.redirect ? "; records of 256 KiB and more redirected to a shadow ring" : "",
	       opt.zerocopy ? "; zerocopy sends" : "");
	r = opt.bench ? run_bench() : run_conformance();
	if (r == 77) {
		teardown();
		return 77;
	}
	if (r)
		check(false, "set-up failed; later cases not run");
	check(teardown(), "fini, unload, then the loop closes with no handle left behind");
	printf("%d passed, %d failed\n", n_pass, n_fail);
	return n_fail ? 1 : 0;
}
