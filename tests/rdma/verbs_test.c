/*
 * Tests and throughput benchmark of the verbs transport through the plugin ABI
 * (include/rgaps/plugin.h, section "transport"), for the Soft-RoCE VM
 * (tests/rdma/rdma_suite.sh). It plays the core on both ends: two contexts of
 * the plugin on one uv loop, A (listens) and B (connects), rings set up in the
 * ABI order, and the ring arithmetic of src/daemon/remote/ring.h around them. The
 * verbs transport reports a landed record as its 64-byte aligned footprint
 * with no offset (docs/PROTOCOL.md section 3), so the receiver places it from
 * that length alone and reads the exact length from the record's own header
 * (the pattern header of tools/lib/pattern.h here). Cases:
 *
 *   records     three rings on one link, plus one the other way, 1 500 records
 *               each, gathered from up to four pieces of two registrations,
 *               every byte checked, ring invariants checked after every event
 *   wrap        4 KiB rings with records up to 1 KiB: wrap-around with padding,
 *               watermarks 0 and 1.0
 *   ring-full   a receiver that stops consuming: the sender waits on Delayed
 *               Head, then resumes
 *   credits     20 000 tiny records: post_record says -EAGAIN, send_credit_stalls
 *               counts it, every record still arrives in order
 *   big         records larger than one RDMA WRITE of the device (split writes)
 *   hostile     a RECORD immediate for a ring not attached, one that cannot fit
 *               its ring, a HEAD immediate for a ring never prepared: link_down
 *               with a reason on the receiving end, no crash, the peer sees it
 *   tokens      an unknown token is refused (link_connected < 0); a port with no
 *               listener too
 *   down        close() with records in flight: the peer gets link_down and
 *               every cookie back; close() from inside a callback; reconnect
 *   detach      ring_detach on the sender with records in flight and chained:
 *               no record_sent follows, the chained ones never land, the link
 *               stays up, the ring id can be set up again
 *   stats       counters add up; cq_overflows stays 0
 *   fini        fini() with live links and registrations: no callbacks, the
 *               loop closes cleanly
 *
 * --bench: sender and receiver in two processes (two daemons), records of
 * --size bytes through a --ring byte ring; prints one "verbs-bench" line.
 * Prints "N passed, M failed"; exit 0 when all passed, 77 when the transport
 * cannot work here (probe), 1 otherwise.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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
#define ALIGN 64u
#define MAX_TL 64
#define MAX_FLOWS 16
#define SEQ_MASK ((1ull << 48) - 1)

/* ------------------------------------------------------------------ options, state */

static struct {
	const char *plugin_dir, *addr, *connect_addr, *cases;
	uint16_t port;
	bool bench, verbose;
	uint64_t size, ring, count;
} opt = {
	.addr = "169.254.77.1",
	.port = 7600,
	.size = MiB,
	.ring = 32 * MiB,
	.count = 256,
	.cases = "all",
};

static uv_loop_t loop;
static uv_timer_t watchdog, tick;
static bool wd_fired;
static struct rgaps_loaded_plugin *lp;
static const struct rgaps_transport_ops *T;
static int n_pass, n_fail;

struct side {
	const char *name;
	void *ctx;
	struct rgaps_transport_cbs cbs;
};

static struct side A = { .name = "A" }, B = { .name = "B" };

/* One end of a link as this stand-in core sees it. */
struct tl {
	struct side *side;
	struct rgaps_link *link; /* NULL once closed, down or refused */
	uint8_t token[RGAPS_LINK_TOKEN_LEN];
	bool expect; /* A: a token the core knows */
	bool up, connect_done, down, closed;
	int status, down_err;
	char why[256];
	uint64_t close_after_landed; /* >0: close() from inside that record_landed */
	uint64_t landed_any;
	uint64_t cb_after_close;
};

static struct tl tls[MAX_TL];
static int ntl;
static uint64_t unknown_tokens, stray_cbs;

struct flow {
	int id;
	char name[64];
	struct tl *stl, *rtl; /* the sender's and the receiver's end */
	uint32_t ring_id;
	struct rgaps_ring_geom g;
	struct rgaps_ring_sender s;
	struct rgaps_ring_receiver r;
	uint8_t *ring, *mirror; /* receive ring; sender staging at the same offsets */
	void *mr_lo, *mr_hi;	/* the mirror registered in two halves */
	uint64_t nrecords, min_len, max_len;
	uint64_t rng;
	bool paused;
	bool no_flush;	/* post without ringing the doorbell */
	bool detached;	/* the sender detached the ring: no record_sent may follow */
	uint64_t after_detach;
	/* sender */
	bool have_cur;
	struct rgaps_ring_slot cur;
	uint64_t cur_len;
	struct rgaps_sg sg[RGAPS_RECORD_SG_MAX];
	uint32_t nsg;
	uint64_t next_seq, posted, sent_ok, sent_err, next_sent, ring_stalls, credit_stalls;
	/* receiver */
	uint64_t landed, bytes;
	struct rgaps_ring_slot *q;
	uint64_t qh, qt, qcap;
	uv_timer_t retry;
	uint64_t head_eagain;
	bool failed;
	char why[256];
};

static struct flow *flows[MAX_FLOWS];

/* ------------------------------------------------------------------ helpers */

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

static uint64_t rnd(uint64_t *st)
{
	return mix64(++*st);
}

static uint64_t now_ns(void);
static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static uint64_t t_start;

static void check(bool ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s - [%5.1fs] ", ok ? "ok  " : "FAIL", (double)(now_ns() - t_start) / 1e9);
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

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void note(const char *fmt, ...)
{
	va_list ap;

	printf("#    ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static bool want(const char *c)
{
	return !strcmp(opt.cases, "all") || strstr(opt.cases, c);
}

static void *xalloc(size_t n)
{
	void *p = aligned_alloc(4096, RGAPS_ALIGN_UP(n, 4096));

	rgaps_require(p);
	memset(p, 0, RGAPS_ALIGN_UP(n, 4096));
	return p;
}

static void on_watchdog(uv_timer_t *t)
{
	wd_fired = true;
}

static void on_tick(uv_timer_t *t)
{
}

static bool run_until(bool (*pred)(void *), void *arg, uint64_t ms, const char *what)
{
	bool ok;

	wd_fired = false;
	uv_timer_start(&watchdog, on_watchdog, ms, 0);
	while (!pred(arg) && !wd_fired)
		uv_run(&loop, UV_RUN_ONCE);
	ok = pred(arg);
	uv_timer_stop(&watchdog);
	if (!ok)
		note("timed out after %" PRIu64 " ms waiting for %s", ms, what);
	return ok;
}

static void run_for(uint64_t ms)
{
	wd_fired = false;
	uv_timer_start(&watchdog, on_watchdog, ms, 0);
	while (!wd_fired)
		uv_run(&loop, UV_RUN_ONCE);
}

/* ------------------------------------------------------------------ links */

static struct tl *tl_new(struct side *s, uint64_t salt)
{
	struct tl *t;
	uint64_t a = mix64(salt * 7919 + 13), b = mix64(a);

	rgaps_require(ntl < MAX_TL);
	t = &tls[ntl++];
	memset(t, 0, sizeof(*t));
	t->side = s;
	memcpy(t->token, &a, 8);
	memcpy(t->token + 8, &b, 8);
	return t;
}

static struct tl *tl_find(struct side *s, struct rgaps_link *l)
{
	for (int i = 0; i < ntl; i++)
		if (tls[i].side == s && tls[i].link == l && l)
			return &tls[i];
	return NULL;
}

static bool pred_connect_done(void *arg)
{
	return ((struct tl *)arg)->connect_done;
}

static bool pred_up(void *arg)
{
	return ((struct tl *)arg)->up || ((struct tl *)arg)->down;
}

static bool pred_down(void *arg)
{
	return ((struct tl *)arg)->down;
}

/* B connects to A presenting a token A expects; both ends up. */
static bool pair(struct tl **b_p, struct tl **a_p, uint64_t salt, const char *what)
{
	struct tl *a = tl_new(&A, salt), *b = tl_new(&B, salt);
	const char *host = opt.connect_addr ? opt.connect_addr : opt.addr;
	int r;

	a->expect = true;
	memcpy(b->token, a->token, RGAPS_LINK_TOKEN_LEN);
	r = T->connect(B.ctx, host, opt.port, b->token, &b->link);
	if (r) {
		check(false, "%s: connect(%s:%u): %s", what, host, opt.port, strerror(-r));
		return false;
	}
	if (!run_until(pred_connect_done, b, 20000, "link_connected") ||
	    !run_until(pred_up, a, 20000, "link_accepted") || b->status || !a->up) {
		check(false, "%s: link did not come up (status %s)", what, strerror(-b->status));
		return false;
	}
	*b_p = b;
	*a_p = a;
	return true;
}

static void tl_close(struct tl *t)
{
	if (!t->link)
		return;
	T->close(t->side->ctx, t->link);
	t->link = NULL;
	t->closed = true;
}

/* ------------------------------------------------------------------ flows */

static uint64_t counter_of(const struct flow *f, uint64_t seq)
{
	return (uint64_t)f->id << 48 | seq;
}

static void flow_fail(struct flow *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void flow_fail(struct flow *f, const char *fmt, ...)
{
	va_list ap;

	if (f->failed)
		return;
	f->failed = true;
	va_start(ap, fmt);
	vsnprintf(f->why, sizeof(f->why), fmt, ap);
	va_end(ap);
	note("%s: %s", f->name, f->why);
}

static void flow_check(struct flow *f)
{
	const char *why;

	if (!f->failed && rt_ring_check(&f->s, &f->r, &why))
		flow_fail(f, "ring invariant: %s", why);
}

static uint64_t flow_len(struct flow *f)
{
	uint64_t x = rnd(&f->rng), span = f->max_len - f->min_len + 1;

	switch (x % 6) {
	case 0:
		return f->max_len; /* exact fits and wraps with padding */
	case 1:
		return f->min_len + (x >> 8) % RGAPS_MIN(span, 200);
	default:
		return f->min_len + (x >> 8) % span;
	}
}

/* Cut [0, len) at the middle of the mirror (the two registrations) and up to two random places. */
static void flow_build(struct flow *f, uint64_t off, uint64_t len)
{
	uint64_t cuts[4], x = rnd(&f->rng), half = f->g.size / 2;
	uint32_t nc = 0, extra = (uint32_t)(x % 3);

	if (off < half && off + len > half)
		cuts[nc++] = half - off;
	for (uint32_t i = 0; i < extra && len > 1; i++)
		cuts[nc++] = 1 + (x >> (8 + 16 * i)) % (len - 1);
	/* sort, unique */
	for (uint32_t i = 1; i < nc; i++)
		for (uint32_t j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
			uint64_t t = cuts[j];

			cuts[j] = cuts[j - 1];
			cuts[j - 1] = t;
		}
	f->nsg = 0;
	for (uint32_t i = 0; i <= nc; i++) {
		uint64_t end = i < nc ? cuts[i] : len, a = i ? cuts[i - 1] : 0;

		if (end == a)
			continue;
		f->sg[f->nsg].mr = off + a < half ? f->mr_lo : f->mr_hi;
		f->sg[f->nsg].addr = f->mirror + off + a;
		f->sg[f->nsg].len = end - a;
		f->nsg++;
	}
}

static void flow_pump(struct flow *f)
{
	void *sctx = f->stl->side->ctx;
	struct rgaps_ring_slot slot;
	bool any = false;
	int r;

	if (f->failed || !f->stl->link)
		return;
	for (;;) {
		if (!f->have_cur) {
			uint64_t len;

			if (f->next_seq >= f->nrecords)
				break;
			len = flow_len(f);
			r = rt_ring_sender_reserve(&f->s, len, &slot);
			if (r == -EAGAIN) {
				f->ring_stalls++;
				break;
			}
			if (r) {
				flow_fail(f, "reserve(%" PRIu64 "): %s", len, strerror(-r));
				return;
			}
			rgaps_pattern_fill(f->mirror + slot.off, len, counter_of(f, f->next_seq));
			flow_build(f, slot.off, len);
			f->cur = slot;
			f->cur_len = len;
			f->have_cur = true;
		}
		r = T->post_record(sctx, f->stl->link, f->ring_id, f->cur.off, f->sg, f->nsg,
				   (uint64_t)f->id << 48 | f->next_seq);
		if (r == -EAGAIN) {
			f->credit_stalls++;
			break;
		}
		if (r == -ENOTCONN && (f->stl->down || f->stl->closed || f->rtl->closed))
			break; /* the link is going down: its callbacks are on their way */
		if (r) {
			flow_fail(f, "post_record(seq %" PRIu64 ", off %" PRIu64 ", len %" PRIu64 "): %s",
				  f->next_seq, f->cur.off, f->cur_len, strerror(-r));
			return;
		}
		f->have_cur = false;
		f->posted++;
		f->next_seq++;
		any = true;
	}
	if (any && !f->no_flush)
		T->flush(sctx, f->stl->link);
	flow_check(f);
}

static void flow_retry_cb(uv_timer_t *t);

static void flow_report(struct flow *f)
{
	uint64_t h;
	int r;

	if (!f->rtl->link || f->failed || !rt_ring_receiver_should_report(&f->r, &h))
		return;
	r = T->post_head(f->rtl->side->ctx, f->rtl->link, f->ring_id, h);
	if (r == -EAGAIN) {
		f->head_eagain++;
		uv_timer_start(&f->retry, flow_retry_cb, 1, 0);
		return;
	}
	if (r) {
		flow_fail(f, "post_head(%" PRIu64 "): %s", h, strerror(-r));
		return;
	}
	rt_ring_receiver_reported(&f->r, h);
	T->flush(f->rtl->side->ctx, f->rtl->link);
}

static void flow_consume(struct flow *f)
{
	if (f->paused || f->qh == f->qt)
		return;
	rt_ring_receiver_consume(&f->r, &f->q[(f->qt - 1) % f->qcap]);
	f->qh = f->qt;
	flow_report(f);
	flow_check(f);
}

static void flow_retry_cb(uv_timer_t *t)
{
	flow_report(t->data);
}

static void flow_landed(struct flow *f, uint64_t off, uint64_t len)
{
	struct rgaps_ring_slot slot;
	uint64_t hdr[2] = { 0, 0 }, c;
	int64_t bad;
	int r;

	if (f->failed)
		return;
	if (off != UINT64_MAX || len % ALIGN) {
		flow_fail(f, "record_landed(off %" PRIu64 ", len %" PRIu64 "): verbs reports no offset"
			     " and a 64-byte multiple", off, len);
		return;
	}
	r = rt_ring_receiver_land(&f->r, len, &slot);
	if (r) {
		flow_fail(f, "record %" PRIu64 " of %" PRIu64 " bytes cannot land: %s", f->landed, len,
			  strerror(-r));
		return;
	}
	memcpy(hdr, f->ring + slot.off, sizeof(hdr));
	if (hdr[0] != counter_of(f, f->landed) || RGAPS_ALIGN_UP(hdr[1], ALIGN) != len ||
	    hdr[1] > len) {
		flow_fail(f, "record %" PRIu64 " at %" PRIu64 ": header {%" PRIx64 ", %" PRIu64
			     "}, footprint %" PRIu64, f->landed, slot.off, hdr[0], hdr[1], len);
		return;
	}
	bad = rgaps_pattern_check(f->ring + slot.off, hdr[1], &c);
	if (bad >= 0) {
		flow_fail(f, "record %" PRIu64 " (%" PRIu64 " bytes at %" PRIu64 "): byte %" PRId64
			     " differs", f->landed, hdr[1], slot.off, bad);
		return;
	}
	f->landed++;
	f->bytes += hdr[1];
	f->q[f->qt++ % f->qcap] = slot;
	flow_consume(f);
	flow_check(f);
}

static void flow_sent(struct flow *f, uint64_t seq, int status)
{
	if (seq != f->next_sent) {
		flow_fail(f, "record_sent for %" PRIu64 ", expected %" PRIu64 " (cookies out of order)",
			  seq, f->next_sent);
		return;
	}
	f->next_sent++;
	if (status)
		f->sent_err++;
	else
		f->sent_ok++;
	flow_pump(f);
}

static void flow_head(struct flow *f, uint64_t head)
{
	int r = rt_ring_sender_update_dhead(&f->s, head);

	if (r) {
		flow_fail(f, "head_update(%" PRIu64 ") refused (tail %" PRIu64 ", dhead %" PRIu64 ")",
			  head, f->s.tail, f->s.dhead);
		return;
	}
	flow_pump(f);
}

static struct flow *flow_new(const char *name, struct tl *stl, struct tl *rtl, uint32_t ring_id,
			     uint64_t size, uint64_t max_len, double wm, uint64_t n)
{
	uint8_t d1[RGAPS_RING_DESC_MAX], d2[RGAPS_RING_DESC_MAX];
	size_t l1 = sizeof(d1), l2 = sizeof(d2);
	struct flow *f = calloc(1, sizeof(*f));
	int r, id = -1;

	rgaps_require(f);
	for (int i = 0; i < MAX_FLOWS; i++)
		if (!flows[i]) {
			id = i;
			break;
		}
	rgaps_require(id >= 0);
	f->id = id;
	snprintf(f->name, sizeof(f->name), "%s", name);
	f->stl = stl;
	f->rtl = rtl;
	f->ring_id = ring_id;
	f->nrecords = n;
	f->min_len = 16;
	f->max_len = max_len;
	f->rng = (uint64_t)id * 1000 + ring_id;
	r = rt_ring_geom_init(size, RGAPS_ALIGN_UP(max_len, ALIGN), ALIGN, &f->g);
	rgaps_require(r == 0);
	rt_ring_sender_init(&f->s, &f->g);
	rgaps_require(rt_ring_receiver_init(&f->r, &f->g, wm) == 0);
	f->ring = xalloc(size);
	f->mirror = xalloc(size);
	f->qcap = size / ALIGN + 2;
	f->q = calloc(f->qcap, sizeof(*f->q));
	rgaps_require(f->q);
	uv_timer_init(&loop, &f->retry);
	f->retry.data = f;
	flows[id] = f;
	r = T->reg_local(stl->side->ctx, f->mirror, size / 2, &f->mr_lo);
	if (!r)
		r = T->reg_local(stl->side->ctx, f->mirror + size / 2, size - size / 2, &f->mr_hi);
	if (r) {
		flow_fail(f, "reg_local: %s", strerror(-r));
		return f;
	}
	r = T->sender_ring_prepare(stl->side->ctx, stl->link, ring_id, d1, &l1);
	if (r) {
		flow_fail(f, "sender_ring_prepare: %s", strerror(-r));
		return f;
	}
	r = T->receiver_ring_attach(rtl->side->ctx, rtl->link, ring_id, f->ring, size, d1, l1, d2,
				    &l2);
	if (r) {
		flow_fail(f, "receiver_ring_attach: %s", strerror(-r));
		return f;
	}
	r = T->sender_ring_connect(stl->side->ctx, stl->link, ring_id, d2, l2);
	if (r)
		flow_fail(f, "sender_ring_connect: %s", strerror(-r));
	return f;
}

static void flow_free(struct flow *f)
{
	if (f->stl->link)
		T->ring_detach(f->stl->side->ctx, f->stl->link, f->ring_id);
	if (f->rtl->link)
		T->ring_detach(f->rtl->side->ctx, f->rtl->link, f->ring_id);
	if (f->mr_lo)
		T->dereg_local(f->stl->side->ctx, f->mr_lo);
	if (f->mr_hi)
		T->dereg_local(f->stl->side->ctx, f->mr_hi);
	uv_timer_stop(&f->retry);
	uv_close((uv_handle_t *)&f->retry, NULL);
	uv_run(&loop, UV_RUN_NOWAIT);
	flows[f->id] = NULL;
	free(f->ring);
	free(f->mirror);
	free(f->q);
	free(f);
}

static struct flow *flow_by_end(struct tl *t, uint32_t ring_id, bool sender)
{
	for (int i = 0; i < MAX_FLOWS; i++)
		if (flows[i] && flows[i]->ring_id == ring_id &&
		    (sender ? flows[i]->stl : flows[i]->rtl) == t)
			return flows[i];
	return NULL;
}

static bool flow_done(const struct flow *f)
{
	return f->failed ||
	       (f->next_sent == f->nrecords && f->landed == f->nrecords && f->qh == f->qt);
}

static bool pred_flows_done(void *arg)
{
	struct flow **fs = arg;

	for (int i = 0; fs[i]; i++)
		if (!flow_done(fs[i]))
			return false;
	return true;
}

/* ------------------------------------------------------------------ callbacks */

static void cb_link_accepted(void *arg, struct rgaps_link *link, const uint8_t *token)
{
	struct side *s = arg;

	for (int i = 0; i < ntl; i++) {
		struct tl *t = &tls[i];

		if (t->side == s && t->expect && !t->link && !t->up &&
		    !memcmp(t->token, token, RGAPS_LINK_TOKEN_LEN)) {
			t->link = link;
			t->up = true;
			return;
		}
	}
	unknown_tokens++;
	T->close(s->ctx, link); /* a token this core does not know */
}

static void cb_link_connected(void *arg, struct rgaps_link *link, int status)
{
	struct tl *t = tl_find(arg, link);

	if (!t) {
		stray_cbs++;
		return;
	}
	t->connect_done = true;
	t->status = status;
	t->up = status == 0;
	if (status)
		t->link = NULL; /* freed by the transport */
}

static void cb_link_down(void *arg, struct rgaps_link *link, int err, const char *why)
{
	struct tl *t = tl_find(arg, link);

	if (!t) {
		stray_cbs++;
		return;
	}
	t->down = true;
	t->down_err = err;
	snprintf(t->why, sizeof(t->why), "%s", why);
	t->link = NULL;
	if (opt.verbose)
		note("%s: link_down(%s): %s", ((struct side *)arg)->name, strerror(-err), why);
}

static void cb_record_landed(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t off,
			     uint64_t len)
{
	struct tl *t = tl_find(arg, link);
	struct flow *f;

	if (!t) {
		stray_cbs++;
		return;
	}
	f = flow_by_end(t, ring_id, false);
	if (f)
		flow_landed(f, off, len);
	if (t->close_after_landed && ++t->landed_any == t->close_after_landed)
		tl_close(t);
}

#define HOSTILE_COOKIE (1ull << 63) /* records of the hostile cases belong to no flow */

static void cb_record_sent(void *arg, struct rgaps_link *link, uint64_t cookie, int status)
{
	struct flow *f = flows[(cookie >> 48) % MAX_FLOWS];

	if (cookie & HOSTILE_COOKIE)
		return;
	if (f && f->detached) {
		f->after_detach++;
		return;
	}
	if (!tl_find(arg, link) || !f) {
		stray_cbs++;
		return;
	}
	flow_sent(f, cookie & SEQ_MASK, status);
}

static void cb_head_update(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t head)
{
	struct tl *t = tl_find(arg, link);
	struct flow *f = t ? flow_by_end(t, ring_id, true) : NULL;

	if (!f) {
		stray_cbs++;
		return;
	}
	flow_head(f, head);
}

static int side_init(struct side *s, struct rgaps_plugin_env *env)
{
	s->cbs = (struct rgaps_transport_cbs){
		.arg = s,
		.link_accepted = cb_link_accepted,
		.link_connected = cb_link_connected,
		.link_down = cb_link_down,
		.record_landed = cb_record_landed,
		.record_sent = cb_record_sent,
		.head_update = cb_head_update,
	};
	return T->init(env, &s->cbs, &s->ctx);
}

/* ------------------------------------------------------------------ cases */

static void case_records(void)
{
	struct tl *b, *a;
	struct flow *fs[5] = { 0 };
	bool ok = true;

	if (!pair(&b, &a, 1, "records"))
		return;
	fs[0] = flow_new("ring 0, 256 KiB, <=64 KiB", b, a, 0, 256 * KiB, 64 * KiB, 0.25, 1500);
	fs[1] = flow_new("ring 1, 256 KiB, <=64 KiB", b, a, 1, 256 * KiB, 64 * KiB, 0.0, 1500);
	fs[2] = flow_new("ring 5, 1 MiB, <=200 KiB", b, a, 5, MiB, 200 * KiB, 0.5, 1500);
	fs[3] = flow_new("ring 2 the other way, 512 KiB", a, b, 2, 512 * KiB, 100 * KiB, 0.25,
			 1500);
	for (int i = 0; fs[i]; i++)
		flow_pump(fs[i]);
	run_until(pred_flows_done, fs, 120000, "the records");
	for (int i = 0; fs[i]; i++) {
		struct flow *f = fs[i];

		check(!f->failed && f->landed == f->nrecords && f->sent_ok == f->nrecords,
		      "records: %s: %" PRIu64 "/%" PRIu64 " landed and verified, %" PRIu64
		      " sent, %" PRIu64 " ring stalls, %" PRIu64 " Head reports%s%s", f->name,
		      f->landed, f->nrecords, f->sent_ok, f->ring_stalls, f->r.reports,
		      f->failed ? ": " : "", f->failed ? f->why : "");
		ok &= !f->failed;
		flow_free(f);
	}
	check(b->link && a->link && !b->down && !a->down, "records: the link stays up");
	tl_close(b);
	run_until(pred_down, a, 10000, "link_down on A");
	check(a->down && a->down_err, "records: close() on B gives A link_down (%s)", a->why);
}

static void case_wrap(void)
{
	struct tl *b, *a;
	double wms[2] = { 0.0, 1.0 };

	if (!pair(&b, &a, 2, "wrap"))
		return;
	for (int i = 0; i < 2; i++) {
		char name[64];
		struct flow *fs[2] = { 0 };
		struct flow *f;

		snprintf(name, sizeof(name), "wrap 4 KiB ring, watermark %.2f", wms[i]);
		f = fs[0] = flow_new(name, b, a, 3 + (uint32_t)i, 4 * KiB, KiB, wms[i], 3000);
		f->min_len = 16;
		flow_pump(f);
		run_until(pred_flows_done, fs, 60000, name);
		check(!f->failed && f->landed == f->nrecords && f->s.pad_bytes > 0 &&
			      f->r.pad_bytes == f->s.pad_bytes,
		      "wrap: %s: %" PRIu64 " records, %" PRIu64 " wraps' padding bytes, %" PRIu64
		      " Head reports, %" PRIu64 " ring stalls%s%s", name, f->landed, f->s.pad_bytes,
		      f->r.reports, f->ring_stalls, f->failed ? ": " : "", f->failed ? f->why : "");
		flow_free(f);
	}
	tl_close(b);
	tl_close(a);
	run_for(50);
}

static void case_ring_full(void)
{
	struct tl *b, *a;
	struct flow *fs[2] = { 0 };
	struct flow *f;
	uint64_t posted;

	if (!pair(&b, &a, 3, "ring-full"))
		return;
	f = fs[0] = flow_new("ring-full", b, a, 6, 64 * KiB, 8 * KiB, 0.25, 400);
	f->paused = true;
	flow_pump(f);
	run_for(300);
	posted = f->posted;
	run_for(300);
	check(!f->failed && f->ring_stalls > 0 && f->posted == posted && posted < f->nrecords &&
		      rt_ring_sender_free(&f->s) < 8 * KiB * 2,
	      "ring-full: the sender stops at a full ring (%" PRIu64 " posted, %" PRIu64
	      " bytes free, %" PRIu64 " stalls)", posted, rt_ring_sender_free(&f->s),
	      f->ring_stalls);
	f->paused = false;
	flow_consume(f);
	run_until(pred_flows_done, fs, 30000, "ring-full");
	check(!f->failed && f->landed == f->nrecords,
	      "ring-full: resumes after Head comes back: %" PRIu64 "/%" PRIu64 " landed%s%s",
	      f->landed, f->nrecords, f->failed ? ": " : "", f->failed ? f->why : "");
	flow_free(f);
	tl_close(b);
	tl_close(a);
	run_for(50);
}

static void case_credits(void)
{
	struct tl *b, *a;
	struct flow *fs[2] = { 0 };
	struct rgaps_link_stats st;
	struct flow *f;

	if (!pair(&b, &a, 4, "credits"))
		return;
	f = fs[0] = flow_new("credits", b, a, 7, 4 * MiB, 64, 0.25, 20000);
	f->min_len = 16;
	flow_pump(f);
	run_until(pred_flows_done, fs, 120000, "credits");
	T->link_stats(B.ctx, b->link, &st);
	check(!f->failed && f->landed == f->nrecords && f->sent_ok == f->nrecords &&
		      f->credit_stalls > 0 && st.send_credit_stalls == f->credit_stalls,
	      "credits: %" PRIu64 " tiny records in order, %" PRIu64 " -EAGAIN from post_record,"
	      " send_credit_stalls %" PRIu64 "%s%s", f->landed, f->credit_stalls,
	      st.send_credit_stalls, f->failed ? ": " : "", f->failed ? f->why : "");
	flow_free(f);
	tl_close(b);
	tl_close(a);
	run_for(50);
}

static void case_big(void)
{
	struct tl *b, *a;
	struct flow *fs[2] = { 0 };
	struct flow *f;

	if (!pair(&b, &a, 5, "big"))
		return;
	/* rxe takes at most 8 MiB per RDMA WRITE: 12 MiB records go as two writes. */
	f = fs[0] = flow_new("big", b, a, 8, 40 * MiB, 12 * MiB, 0.0, 10);
	f->min_len = 9 * MiB;
	flow_pump(f);
	run_until(pred_flows_done, fs, 120000, "big records");
	check(!f->failed && f->landed == f->nrecords,
	      "big: %" PRIu64 " records of 9..12 MiB (split writes), every byte checked%s%s",
	      f->landed, f->failed ? ": " : "", f->failed ? f->why : "");
	flow_free(f);
	tl_close(b);
	tl_close(a);
	run_for(50);
}

/* Patch the ring id (bytes 6..7) of a descriptor: the hostile peer forges one. */
static void desc_set_ring(uint8_t *d, uint32_t ring_id)
{
	d[6] = (uint8_t)ring_id;
	d[7] = (uint8_t)(ring_id >> 8);
}

static void hostile_wait(struct tl *victim, struct tl *other, const char *what, const char *expect)
{
	run_until(pred_down, victim, 15000, what);
	run_until(pred_down, other, 15000, what);
	check(victim->down && strstr(victim->why, expect) && victim->down_err == -EPROTO,
	      "hostile: %s: link_down on the receiving end (%s)", what,
	      victim->down ? victim->why : "none");
	check(other->down, "hostile: %s: the peer sees its link go down too (%s)", what,
	      other->down ? other->why : "none");
}

static void case_hostile(void)
{
	uint8_t d[RGAPS_RING_DESC_MAX], dr[RGAPS_RING_DESC_MAX], d6[RGAPS_RING_DESC_MAX];
	size_t dl = sizeof(d), drl = sizeof(dr), d6l = sizeof(d6);
	uint8_t *ring = xalloc(64 * KiB), *ring2 = xalloc(64 * KiB), *src = xalloc(64 * KiB);
	struct rgaps_sg sg;
	struct tl *b, *a;
	void *mr = NULL;
	int r;

	rgaps_require(T->reg_local(B.ctx, src, 64 * KiB, &mr) == 0);
	sg = (struct rgaps_sg){ .mr = mr, .addr = src, .len = 4 * KiB };

	/* 1. A RECORD immediate for a ring A never attached. */
	if (pair(&b, &a, 10, "hostile 1")) {
		T->sender_ring_prepare(B.ctx, b->link, 0, d, &dl);
		r = T->receiver_ring_attach(A.ctx, a->link, 0, ring, 64 * KiB, d, dl, dr, &drl);
		T->sender_ring_prepare(B.ctx, b->link, 9, d, &dl);
		desc_set_ring(dr, 9); /* ring 0's memory and key, announced as ring 9 */
		r = r ?: T->sender_ring_connect(B.ctx, b->link, 9, dr, drl);
		r = r ?: T->post_record(B.ctx, b->link, 9, 0, &sg, 1, HOSTILE_COOKIE | 1);
		if (r)
			check(false, "hostile 1 set-up: %s", strerror(-r));
		T->flush(B.ctx, b->link);
		hostile_wait(a, b, "record for a ring not attached", "not attached");
	}
	/* 2. A record too long for the ring it names. */
	dl = drl = d6l = sizeof(d);
	if (pair(&b, &a, 11, "hostile 2")) {
		T->sender_ring_prepare(B.ctx, b->link, 4, d, &dl);
		r = T->receiver_ring_attach(A.ctx, a->link, 4, ring, 4 * KiB, d, dl, dr, &drl);
		T->sender_ring_prepare(B.ctx, b->link, 6, d, &dl);
		r = r ?: T->receiver_ring_attach(A.ctx, a->link, 6, ring2, 64 * KiB, d, dl, d6,
						 &d6l);
		desc_set_ring(d6, 4); /* ring 6 (64 KiB) passed off as ring 4 (4 KiB) */
		r = r ?: T->sender_ring_connect(B.ctx, b->link, 4, d6, d6l);
		sg.len = 8 * KiB;
		r = r ?: T->post_record(B.ctx, b->link, 4, 0, &sg, 1, HOSTILE_COOKIE | 2);
		if (r)
			check(false, "hostile 2 set-up: %s", strerror(-r));
		T->flush(B.ctx, b->link);
		hostile_wait(a, b, "record that cannot fit its ring", "cannot fit");
	}
	/* 3. A HEAD immediate for a ring B never prepared. */
	dl = drl = sizeof(d);
	if (pair(&b, &a, 12, "hostile 3")) {
		T->sender_ring_prepare(B.ctx, b->link, 0, d, &dl);
		desc_set_ring(d, 7); /* B's ring-0 word, as if B had prepared ring 7 */
		r = T->receiver_ring_attach(A.ctx, a->link, 7, ring, 64 * KiB, d, dl, dr, &drl);
		r = r ?: T->post_head(A.ctx, a->link, 7, 64);
		if (r)
			check(false, "hostile 3 set-up: %s", strerror(-r));
		T->flush(A.ctx, a->link);
		hostile_wait(b, a, "Head for a ring never prepared", "never prepared");
	}
	/* 4. Descriptors that do not parse are refused locally. */
	dl = sizeof(d);
	if (pair(&b, &a, 13, "hostile 4")) {
		uint8_t junk[32];

		memset(junk, 0x41, sizeof(junk));
		T->sender_ring_prepare(B.ctx, b->link, 0, d, &dl);
		r = T->receiver_ring_attach(A.ctx, a->link, 0, ring, 64 * KiB, junk, sizeof(junk),
					    dr, &drl);
		check(r == -EINVAL, "hostile: a garbage Head descriptor is refused (%s)",
		      strerror(-r));
		r = T->sender_ring_connect(B.ctx, b->link, 0, junk, sizeof(junk));
		check(r == -EINVAL, "hostile: a garbage ring descriptor is refused (%s)",
		      strerror(-r));
		r = T->post_record(B.ctx, b->link, 0, 0, &sg, 1, HOSTILE_COOKIE | 3);
		check(r == -ENOTCONN, "hostile: post_record to an unconnected ring is refused (%s)",
		      strerror(-r));
		tl_close(b);
		tl_close(a);
	}
	T->dereg_local(B.ctx, mr);
	run_for(50);
	free(ring);
	free(ring2);
	free(src);
}

static void case_tokens(void)
{
	struct tl *b = tl_new(&B, 20);
	const char *host = opt.connect_addr ? opt.connect_addr : opt.addr;
	uint64_t before = unknown_tokens;
	int r;

	r = T->connect(B.ctx, host, opt.port, b->token, &b->link);
	if (!r)
		run_until(pred_connect_done, b, 20000, "link_connected (unknown token)");
	check(!r && b->connect_done && b->status < 0 && unknown_tokens == before + 1,
	      "tokens: an unknown token is closed in link_accepted; the connector gets %s",
	      b->connect_done ? strerror(-b->status) : "nothing");
	b = tl_new(&B, 21);
	r = T->connect(B.ctx, host, (uint16_t)(opt.port + 1), b->token, &b->link);
	if (!r)
		run_until(pred_connect_done, b, 20000, "link_connected (no listener)");
	check(r < 0 || (b->connect_done && b->status < 0),
	      "tokens: no listener on the port: %s",
	      r < 0 ? strerror(-r) : b->connect_done ? strerror(-b->status) : "no answer");
}

static void case_down(void)
{
	struct tl *b, *a;
	struct flow *fs[2] = { 0 };
	struct flow *f;

	/* close() on the receiver with records in flight. */
	if (pair(&b, &a, 30, "down")) {
		uint64_t in_flight;

		f = fs[0] = flow_new("down", b, a, 0, 64 * MiB, 8 * MiB, 0.25, 100000);
		f->min_len = 4 * MiB;
		flow_pump(f);
		run_for(20);
		in_flight = f->posted - f->next_sent;
		tl_close(a);
		run_until(pred_down, b, 15000, "link_down on B");
		check(b->down, "down: the sender gets link_down: %s", b->down ? b->why : "none");
		check(f->next_sent == f->posted,
		      "down: every cookie came back, in order: %" PRIu64 " ok + %" PRIu64
		      " failed of %" PRIu64 " posted (%" PRIu64 " in flight at close())",
		      f->sent_ok, f->sent_err, f->posted, in_flight);
		check(a->cb_after_close == 0, "down: no callbacks on the closed end");
		flow_free(f);
	}
	/* close() from inside record_landed. */
	if (pair(&b, &a, 31, "down 2")) {
		f = fs[0] = flow_new("close-in-callback", b, a, 1, 256 * KiB, 16 * KiB, 0.25, 5000);
		a->close_after_landed = 100;
		flow_pump(f);
		run_until(pred_down, b, 15000, "link_down on B");
		check(a->closed && b->down && f->landed == 100,
		      "down: close() from inside record_landed (after %" PRIu64 "), the peer sees %s",
		      f->landed, b->down ? b->why : "nothing");
		flow_free(f);
	}
	/* The same token again: a peer that comes back gets a working link. */
	if (pair(&b, &a, 30, "reconnect")) {
		f = fs[0] = flow_new("reconnect", b, a, 0, 256 * KiB, 32 * KiB, 0.25, 200);
		flow_pump(f);
		run_until(pred_flows_done, fs, 30000, "reconnect");
		check(!f->failed && f->landed == f->nrecords,
		      "down: reconnect with the same token carries records again (%" PRIu64 ")",
		      f->landed);
		flow_free(f);
		tl_close(b);
		tl_close(a);
		run_for(50);
	}
}

static void case_detach(void)
{
	struct flow *fs[2] = { 0 };
	struct tl *b, *a;
	struct flow *f;
	uint64_t landed;

	if (!pair(&b, &a, 60, "detach"))
		return;
	/*
	 * 10 records go out; 8 more stay chained (no flush); then the sender
	 * detaches. 18 fit any send queue (the smallest, 32, takes 24 records).
	 */
	f = fs[0] = flow_new("detach", b, a, 3, MiB, 16 * KiB, 0.25, 10);
	flow_pump(f);
	f->nrecords = 18;
	f->no_flush = true;
	flow_pump(f);
	check(f->posted == 18, "detach: 10 records flushed, 8 chained (%" PRIu64 " posted)",
	      f->posted);
	T->ring_detach(B.ctx, b->link, 3);
	f->detached = true;
	T->flush(B.ctx, b->link);
	run_for(500);
	landed = f->landed;
	check(f->after_detach == 0 && landed <= 10 && !f->failed,
	      "detach: no record_sent after the sender's ring_detach (%" PRIu64 "), the chained"
	      " records never land (%" PRIu64 " landed)", f->after_detach, landed);
	T->ring_detach(A.ctx, a->link, 3);
	check(b->link && a->link && !b->down && !a->down, "detach: the link stays up");
	f->detached = false;
	flow_free(f);
	f = fs[0] = flow_new("after detach", b, a, 3, 256 * KiB, 16 * KiB, 0.25, 200);
	flow_pump(f);
	run_until(pred_flows_done, fs, 30000, "records after detach");
	check(!f->failed && f->landed == f->nrecords,
	      "detach: the ring id is set up again and carries %" PRIu64 " records%s%s", f->landed,
	      f->failed ? ": " : "", f->failed ? f->why : "");
	flow_free(f);
	tl_close(b);
	tl_close(a);
	run_for(50);
}

static void case_stats(void)
{
	struct rgaps_link_stats sb, sa;
	struct flow *fs[2] = { 0 };
	struct tl *b, *a;
	struct flow *f;

	if (!pair(&b, &a, 40, "stats"))
		return;
	f = fs[0] = flow_new("stats", b, a, 0, 1 * MiB, 64 * KiB, 0.25, 2000);
	flow_pump(f);
	run_until(pred_flows_done, fs, 60000, "stats");
	run_for(100); /* the last Head writes complete */
	T->link_stats(B.ctx, b->link, &sb);
	T->link_stats(A.ctx, a->link, &sa);
	note("sender:   records_sent %" PRIu64 " bytes_sent %" PRIu64 " heads_received %" PRIu64
	     " credit_stalls %" PRIu64 " cq_events %" PRIu64 " cq_polls_busy %" PRIu64,
	     sb.records_sent, sb.bytes_sent, sb.head_updates_received, sb.send_credit_stalls,
	     sb.cq_events, sb.cq_polls_busy);
	note("receiver: records_landed %" PRIu64 " bytes_landed %" PRIu64 " heads_sent %" PRIu64
	     " cq_events %" PRIu64 " cq_polls_busy %" PRIu64, sa.records_landed, sa.bytes_landed,
	     sa.head_updates_sent, sa.cq_events, sa.cq_polls_busy);
	check(!f->failed && sb.records_sent == f->nrecords && sa.records_landed == f->nrecords &&
		      sb.bytes_sent == f->bytes &&
		      sa.bytes_landed >= f->bytes &&
		      sa.bytes_landed < f->bytes + 64 * f->nrecords &&
		      sa.head_updates_sent == sb.head_updates_received && sa.head_updates_sent > 0,
	      "stats: records, bytes and Head updates add up on both ends");
	check(sa.cq_overflows == 0 && sb.cq_overflows == 0 &&
		      (sa.cq_events + sa.cq_polls_busy) > 0 && (sb.cq_events + sb.cq_polls_busy) > 0,
	      "stats: cq_overflows 0; completion wake-ups and busy polls counted");
	flow_free(f);
	tl_close(b);
	tl_close(a);
	run_for(50);
}

static void case_fini(struct rgaps_plugin_env *env)
{
	struct tl *b, *a;
	struct flow *f;
	uint64_t strays = stray_cbs;

	if (!pair(&b, &a, 50, "fini"))
		return;
	f = flow_new("fini", b, a, 0, 256 * KiB, 16 * KiB, 0.25, 100000);
	flow_pump(f);
	run_for(100);
	/* Memory registrations and links stay: fini releases them, without callbacks. */
	T->fini(A.ctx);
	T->fini(B.ctx);
	A.ctx = B.ctx = NULL;
	b->link = a->link = NULL;
	f->mr_lo = f->mr_hi = NULL;
	f->stl->link = f->rtl->link = NULL;
	run_for(100);
	check(stray_cbs == strays && !a->down && !b->down, "fini: no callbacks after fini()");
	flow_free(f);
}

/* ------------------------------------------------------------------ bench */

static int sock_fd = -1;

static void sock_write(const void *p, size_t n)
{
	rgaps_require(write(sock_fd, p, n) == (ssize_t)n);
}

/* Read n bytes while the loop keeps turning (CM events must progress meanwhile). */
static bool sock_read(void *p, size_t n, uint64_t ms)
{
	uint64_t end = now_ns() + ms * 1000000ull;
	size_t got = 0;

	while (got < n && now_ns() < end) {
		struct pollfd pfd = { .fd = sock_fd, .events = POLLIN };
		ssize_t r;

		if (poll(&pfd, 1, 0) == 1) {
			r = read(sock_fd, (char *)p + got, n - got);
			if (r <= 0)
				return false;
			got += (size_t)r;
			continue;
		}
		uv_run(&loop, UV_RUN_NOWAIT);
		usleep(200);
	}
	return got == n;
}

struct bench {
	struct rgaps_ring_sender s;
	struct rgaps_ring_receiver r;
	struct rgaps_ring_geom g;
	uint8_t *mem;
	void *mr;
	struct rgaps_link *link;
	bool up, down;
	uint64_t posted, sent, landed, bad, t0, t1;
	bool have_cur;
	struct rgaps_ring_slot cur;
};

static struct bench bn;

static void bench_pump(void)
{
	struct rgaps_sg sg;
	bool any = false;
	int r;

	while (bn.posted < opt.count && bn.link) {
		if (!bn.have_cur) {
			if (rt_ring_sender_reserve(&bn.s, opt.size, &bn.cur))
				break;
			/* A stamp the receiver checks. */
			memcpy(bn.mem + bn.cur.off, &bn.posted, 8);
			bn.have_cur = true;
		}
		sg = (struct rgaps_sg){ .mr = bn.mr, .addr = bn.mem + bn.cur.off, .len = opt.size };
		r = T->post_record(B.ctx, bn.link, 0, bn.cur.off, &sg, 1, bn.posted);
		if (r == -EAGAIN)
			break;
		rgaps_require(r == 0);
		if (!bn.posted)
			bn.t0 = now_ns();
		bn.have_cur = false;
		bn.posted++;
		any = true;
	}
	if (any)
		T->flush(B.ctx, bn.link);
}

static void bcb_accepted(void *arg, struct rgaps_link *link, const uint8_t *token)
{
	bn.link = link;
	bn.up = true;
}

static void bcb_connected(void *arg, struct rgaps_link *link, int status)
{
	bn.up = status == 0;
	bn.down = status != 0;
	if (status)
		bn.link = NULL;
}

static void bcb_down(void *arg, struct rgaps_link *link, int err, const char *why)
{
	bn.down = true;
	bn.link = NULL;
}

static void bcb_landed(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t off,
		       uint64_t len)
{
	struct rgaps_ring_slot slot;
	uint64_t stamp, h;

	if (rt_ring_receiver_land(&bn.r, len, &slot)) {
		bn.bad++;
		return;
	}
	memcpy(&stamp, bn.mem + slot.off, 8);
	if (stamp != bn.landed)
		bn.bad++;
	if (!bn.landed)
		bn.t0 = now_ns();
	bn.landed++;
	bn.t1 = now_ns();
	rt_ring_receiver_consume(&bn.r, &slot);
	if (rt_ring_receiver_should_report(&bn.r, &h) &&
	    T->post_head(A.ctx, link, 0, h) == 0) {
		rt_ring_receiver_reported(&bn.r, h);
		T->flush(A.ctx, link);
	}
}

static void bcb_sent(void *arg, struct rgaps_link *link, uint64_t cookie, int status)
{
	if (status)
		bn.bad++;
	bn.sent++;
	bn.t1 = now_ns();
	bench_pump();
}

static void bcb_head(void *arg, struct rgaps_link *link, uint32_t ring_id, uint64_t head)
{
	if (rt_ring_sender_update_dhead(&bn.s, head))
		bn.bad++;
	bench_pump();
}

static bool pred_bench_up(void *arg)
{
	return bn.up || bn.down;
}

static bool pred_bench_sent(void *arg)
{
	return bn.sent == opt.count || bn.down;
}

static bool pred_bench_landed(void *arg)
{
	return bn.landed == opt.count || bn.down;
}

static int bench_side(bool receiver, struct rgaps_plugin_env *env)
{
	static const uint8_t token[RGAPS_LINK_TOKEN_LEN] = "rgaps-bench-tok";
	struct side *s = receiver ? &A : &B;
	uint8_t d[RGAPS_RING_DESC_MAX];
	size_t dl = sizeof(d);
	struct rgaps_link_stats st;
	char go = 0;
	int r;

	s->cbs = (struct rgaps_transport_cbs){
		.arg = s,
		.link_accepted = bcb_accepted,
		.link_connected = bcb_connected,
		.link_down = bcb_down,
		.record_landed = bcb_landed,
		.record_sent = bcb_sent,
		.head_update = bcb_head,
	};
	r = T->init(env, &s->cbs, &s->ctx);
	if (r)
		return fprintf(stderr, "init: %s\n", strerror(-r)), 1;
	rgaps_require(rt_ring_geom_init(opt.ring, opt.size, ALIGN, &bn.g) == 0);
	bn.mem = xalloc(opt.ring);
	if (receiver) {
		rgaps_require(rt_ring_receiver_init(&bn.r, &bn.g, 0.25) == 0);
		r = T->listen(s->ctx, opt.addr, opt.port);
		if (r)
			return fprintf(stderr, "listen: %s\n", strerror(-r)), 1;
		sock_write("R", 1);
		if (!run_until(pred_bench_up, NULL, 30000, "link") || !bn.link)
			return 1;
		if (!sock_read(&dl, sizeof(dl), 30000) || !sock_read(d, dl, 30000))
			return 1;
		r = T->receiver_ring_attach(s->ctx, bn.link, 0, bn.mem, opt.ring, d, dl, d, &dl);
		if (r)
			return fprintf(stderr, "attach: %s\n", strerror(-r)), 1;
		sock_write(&dl, sizeof(dl));
		sock_write(d, dl);
		run_until(pred_bench_landed, NULL, 600000, "records");
		T->link_stats(s->ctx, bn.link, &st);
		sock_write(&bn.t0, 8);
		sock_write(&bn.t1, 8);
		sock_write(&bn.landed, 8);
		sock_write(&bn.bad, 8);
		sock_write(&st, sizeof(st));
		sock_read(&go, 1, 30000); /* the sender has its numbers */
	} else {
		uint64_t rt0 = 0, rt1 = 0, rlanded = 0, rbad = 0;
		struct rgaps_link_stats rst;
		double secs, rsecs;

		memset(&rst, 0, sizeof(rst));
		rt_ring_sender_init(&bn.s, &bn.g);
		if (!sock_read(&go, 1, 30000))
			return 1;
		r = T->connect(s->ctx, opt.connect_addr ? opt.connect_addr : opt.addr, opt.port,
			       token, &bn.link);
		if (r || !run_until(pred_bench_up, NULL, 30000, "link") || !bn.link)
			return fprintf(stderr, "connect failed\n"), 1;
		rgaps_require(T->reg_local(s->ctx, bn.mem, opt.ring, &bn.mr) == 0);
		rgaps_require(T->sender_ring_prepare(s->ctx, bn.link, 0, d, &dl) == 0);
		sock_write(&dl, sizeof(dl));
		sock_write(d, dl);
		if (!sock_read(&dl, sizeof(dl), 30000) || !sock_read(d, dl, 30000))
			return 1;
		rgaps_require(T->sender_ring_connect(s->ctx, bn.link, 0, d, dl) == 0);
		bench_pump();
		run_until(pred_bench_sent, NULL, 600000, "records sent");
		T->link_stats(s->ctx, bn.link, &st);
		if (!sock_read(&rt0, 8, 60000) || !sock_read(&rt1, 8, 5000) ||
		    !sock_read(&rlanded, 8, 5000) || !sock_read(&rbad, 8, 5000) ||
		    !sock_read(&rst, sizeof(rst), 5000))
			fprintf(stderr, "no numbers from the receiver\n");
		sock_write("G", 1);
		secs = (double)(bn.t1 - bn.t0) / 1e9;
		rsecs = (double)(rt1 - rt0) / 1e9;
		printf("verbs-bench size=%" PRIu64 " count=%" PRIu64 " ring=%" PRIu64
		       " sent=%" PRIu64 " landed=%" PRIu64 " bad=%" PRIu64 " seconds=%.3f MiBps=%.1f"
		       " recv_MiBps=%.1f credit_stalls=%" PRIu64 " ring_stalls=%" PRIu64
		       " tx_cq_events=%" PRIu64 " tx_busy_polls=%" PRIu64 " rx_cq_events=%" PRIu64
		       " rx_busy_polls=%" PRIu64 " cq_overflows=%" PRIu64 "\n",
		       opt.size, opt.count, opt.ring, bn.sent, rlanded, bn.bad + rbad, secs,
		       (double)(bn.sent * opt.size) / secs / MiB,
		       rsecs > 0 ? (double)((rlanded > 1 ? rlanded - 1 : 0) * opt.size) / rsecs / MiB :
				   0.0,
		       st.send_credit_stalls, bn.s.stalls, st.cq_events, st.cq_polls_busy,
		       rst.cq_events, rst.cq_polls_busy, st.cq_overflows + rst.cq_overflows);
		fflush(stdout);
		if (bn.bad + rbad || rlanded != opt.count || bn.sent != opt.count)
			return 1;
	}
	T->fini(s->ctx);
	run_for(20);
	return 0;
}

static int bench(struct rgaps_plugin_env *env)
{
	int sv[2], st = 0, rc;
	pid_t pid;

	rgaps_require(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	fflush(stdout);
	pid = fork();
	rgaps_require(pid >= 0);
	if (pid == 0) {
		close(sv[0]);
		sock_fd = sv[1];
		_exit(bench_side(true, env));
	}
	close(sv[1]);
	sock_fd = sv[0];
	rc = bench_side(false, env);
	if (rc)
		kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return rc || !WIFEXITED(st) || WEXITSTATUS(st) ? 1 : 0;
}

/* ------------------------------------------------------------------ main */

static void usage(FILE *out)
{
	fprintf(out,
		"usage: verbs-test [options]\n"
		"  --plugin-dir DIR     where transport-verbs.so is (default: build tree)\n"
		"  --addr ADDR          A listens here (default 169.254.77.1)\n"
		"  --connect-addr ADDR  B connects here (default: --addr)\n"
		"  --port N             (default 7600; N+1 must have no listener)\n"
		"  --cases LIST         records,wrap,ring-full,credits,big,hostile,tokens,down,detach,\n"
		"                       stats,fini (default: all)\n"
		"  --bench              throughput: two processes, --count records of --size bytes\n"
		"  --size N --ring N --count N   (bench; default 1 MiB, 32 MiB, 256)\n"
		"  -v                   log the plugin's messages\n");
}

static int parse_args(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "-v")) {
			opt.verbose = true;
			continue;
		}
		if (!strcmp(a, "--bench")) {
			opt.bench = true;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			exit(0);
		}
		if (!v) {
			usage(stderr);
			return -1;
		}
		i++;
		if (!strcmp(a, "--plugin-dir"))
			opt.plugin_dir = v;
		else if (!strcmp(a, "--addr"))
			opt.addr = v;
		else if (!strcmp(a, "--connect-addr"))
			opt.connect_addr = v;
		else if (!strcmp(a, "--port"))
			opt.port = (uint16_t)strtoul(v, NULL, 0);
		else if (!strcmp(a, "--cases"))
			opt.cases = v;
		else if (!strcmp(a, "--size"))
			opt.size = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--ring"))
			opt.ring = strtoull(v, NULL, 0);
		else if (!strcmp(a, "--count"))
			opt.count = strtoull(v, NULL, 0);
		else {
			usage(stderr);
			return -1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct rgaps_plugin_env env;
	char err[512], why[256];
	int r;

	setvbuf(stdout, NULL, _IOLBF, 0);
	t_start = now_ns();
	if (parse_args(argc, argv))
		return 2;
	rgaps__log_level = opt.verbose ? RGAPS_LOG_DEBUG : RGAPS_LOG_ERROR;
	rgaps_require(uv_loop_init(&loop) == 0);
	uv_timer_init(&loop, &watchdog);
	uv_timer_init(&loop, &tick);
	uv_timer_start(&tick, on_tick, 5, 5); /* run_until wakes up even when nothing happens */
	/* tick only wakes the loop; the watchdog stays referenced: it keeps run_for() turning */
	uv_unref((uv_handle_t *)&tick);
	r = rgaps__plugin_load(opt.plugin_dir ? opt.plugin_dir : rgaps__plugin_default_dir(),
			       RGAPS_PLUGIN_TRANSPORT, "verbs", &lp, err, sizeof(err));
	if (r) {
		printf("SKIP: %s\n", err);
		return 77;
	}
	T = &lp->ops.transport;
	rgaps__plugin_env_init(&env, RGAPS_ROLE_DAEMON, &loop);
	if (opt.bench)
		return bench(&env);

	r = side_init(&A, &env);
	if (!r)
		r = side_init(&B, &env);
	if (r) {
		printf("FAIL - init: %s\n", strerror(-r));
		return 1;
	}
	r = T->probe(A.ctx, why, sizeof(why));
	if (r) {
		printf("SKIP: the verbs transport cannot work here: %s\n", why);
		return 77;
	}
	check(true, "probe: %s", why);
	r = T->listen(A.ctx, opt.addr, opt.port);
	check(r == 0, "listen on %s:%u%s%s", opt.addr, opt.port, r ? ": " : "",
	      r ? strerror(-r) : "");
	if (r)
		goto out;
	if (want("records"))
		case_records();
	if (want("wrap"))
		case_wrap();
	if (want("ring-full"))
		case_ring_full();
	if (want("credits"))
		case_credits();
	if (want("big"))
		case_big();
	if (want("hostile"))
		case_hostile();
	if (want("tokens"))
		case_tokens();
	if (want("down"))
		case_down();
	if (want("detach"))
		case_detach();
	if (want("stats"))
		case_stats();
	check(stray_cbs == 0, "no callback for an unknown link or cookie (%" PRIu64 ")", stray_cbs);
	if (want("fini")) {
		case_fini(&env);
	} else {
		T->fini(A.ctx);
		T->fini(B.ctx);
	}
	uv_close((uv_handle_t *)&watchdog, NULL);
	uv_close((uv_handle_t *)&tick, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	r = uv_loop_close(&loop);
	check(r == 0, "the loop closes cleanly after fini (%s)",
	      r ? uv_strerror(r) : "no handles left");
out:
	rgaps__plugin_unload(lp);
	printf("%d passed, %d failed\n", n_pass, n_fail);
	return n_fail ? 1 : 0;
}
