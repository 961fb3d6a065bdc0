/*
 * A test-only transport plugin that misbehaves on purpose, so the receiving
 * daemon's checks can be tested end to end against a real hostile peer. It
 * is built only with the tests, never installed, and lives in its own plugin
 * directory (build/tests/fault/plugins) as "transport-tcp.so": it loads the
 * real tcp plugin and forwards every operation to it, except what
 * RGAPSD_FAULT=name[:N] asks it to spoil. rgapsd itself holds no fault code.
 *
 * Faults (N: records posted before the one spoiled, or milliseconds):
 *   magic     the record header's magic
 *   oversize  msg_size over any topic's maximum
 *   offset    the record written 4 KiB past where the receiver expects it
 *   order     record_seq skips one
 *   outside   an offset far past the end of the ring
 *   chunk     one byte of the chunk flipped on the wire (the data, not the
 *             header; a copy is sent, the sender's pool stays intact)
 *   late_accept  not a corruption: each accepted data link is handed to
 *             rgapsd N ms late, so a topic set-up surely arrives before the
 *             link it names
 *   cut       not a corruption: once N records are posted, the data link is
 *             cut (closed both ways, as by a failing network) instead of
 *             sending the next one; the session stays, the link is offered
 *             again (the link-flap and end-of-stream loss tests)
 *
 * The tests select it by pointing RGAPS_PLUGIN_DIR at its directory for the
 * daemon that should misbehave (tests/integration/remote_lib.sh).
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "rgaps/plugin.h"

#ifndef REAL_TCP_PLUGIN
#error "REAL_TCP_PLUGIN: the path of the real transport-tcp.so"
#endif

#define HDR 64
#define MAX_COPIES 64 /* "chunk": spoiled copies in flight at once */

enum fault {
	F_NONE,
	F_MAGIC,
	F_OVERSIZE,
	F_OFFSET,
	F_ORDER,
	F_OUTSIDE,
	F_CHUNK,
	F_LATE_ACCEPT,
	F_CUT
};
static const char *const fault_names[] = { "",	    "magic",   "oversize",    "offset", "order",
					   "outside", "chunk", "late_accept", "cut" };

struct copy { /* "chunk": a spoiled copy of a record, freed at its record_sent */
	uint64_t cookie;
	void *mr;
	uint8_t *buf;
};

struct fault_ctx {
	void *real_ctx;
	void (*log)(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
	void *uv_loop; /* the env is the host's, valid during init only: keep what we use */
	struct rgaps_transport_cbs core; /* rgapsd's callbacks */
	struct rgaps_transport_cbs mine; /* handed to the real plugin */
	enum fault fault;
	uint64_t after;
	uint64_t posted;
	bool done;
	uv_timer_t *late_timer; /* late_accept: one accepted link held back */
	struct rgaps_link *late_link;
	uint8_t late_token[RGAPS_LINK_TOKEN_LEN];
	uv_timer_t *cut_timer; /* cut: the link is cut from the loop, after the post returned */
	struct rgaps_link *cut_link;
	struct copy copies[MAX_COPIES];
};

static const struct rgaps_plugin *real_desc;
static const struct rgaps_transport_ops *real;
static struct rgaps_plugin desc; /* the real descriptor, ops replaced by ours */

#define LOG(ctx, level, ...) ((ctx)->log(level, __VA_ARGS__))

/* ---------------------------------------------------------------- callbacks */

static void cb_link_connected(void *arg, struct rgaps_link *link, int status)
{
	struct fault_ctx *c = arg;

	c->core.link_connected(c->core.arg, link, status);
}

static void cb_link_down(void *arg, struct rgaps_link *link, int err, const char *why)
{
	struct fault_ctx *c = arg;

	if (c->late_link == link)
		c->late_link = NULL;
	if (c->cut_link == link)
		c->cut_link = NULL;
	c->core.link_down(c->core.arg, link, err, why);
}

static void cb_record_landed(void *arg, struct rgaps_link *link, uint32_t ring, uint64_t off,
			     uint64_t len)
{
	struct fault_ctx *c = arg;

	c->core.record_landed(c->core.arg, link, ring, off, len);
}

static void *cb_record_header(void *arg, struct rgaps_link *link, uint32_t ring, uint64_t off,
			      uint64_t len, bool can_redirect)
{
	struct fault_ctx *c = arg;

	return c->core.record_header(c->core.arg, link, ring, off, len, can_redirect);
}

static void cb_record_sent(void *arg, struct rgaps_link *link, uint64_t cookie, int status)
{
	struct fault_ctx *c = arg;

	for (int i = 0; i < MAX_COPIES; i++) {
		if (c->copies[i].buf && c->copies[i].cookie == cookie) {
			real->dereg_local(c->real_ctx, c->copies[i].mr);
			free(c->copies[i].buf);
			c->copies[i].buf = NULL;
		}
	}
	c->core.record_sent(c->core.arg, link, cookie, status);
}

static void cb_head_update(void *arg, struct rgaps_link *link, uint32_t ring, uint64_t head)
{
	struct fault_ctx *c = arg;

	c->core.head_update(c->core.arg, link, ring, head);
}

static void on_late_closed(uv_handle_t *h)
{
	free(h);
}

static void on_late(uv_timer_t *t)
{
	struct fault_ctx *c = t->data;
	struct rgaps_link *link = c->late_link;

	c->late_link = NULL;
	uv_close((uv_handle_t *)t, on_late_closed);
	c->late_timer = NULL;
	if (link)
		c->core.link_accepted(c->core.arg, link, c->late_token);
}

static void cb_link_accepted(void *arg, struct rgaps_link *link,
			     const uint8_t token[RGAPS_LINK_TOKEN_LEN])
{
	struct fault_ctx *c = arg;

	if (c->fault == F_LATE_ACCEPT && !c->late_timer) {
		c->late_timer = calloc(1, sizeof(*c->late_timer));
		if (c->late_timer) {
			LOG(c, 1,
			    "fault injection: data link accepted, handed to rgapsd in %llu ms",
			    (unsigned long long)c->after);
			uv_timer_init(c->uv_loop, c->late_timer);
			c->late_timer->data = c;
			c->late_link = link;
			memcpy(c->late_token, token, RGAPS_LINK_TOKEN_LEN);
			uv_timer_start(c->late_timer, on_late, c->after, 0);
			return;
		}
	}
	c->core.link_accepted(c->core.arg, link, token);
}

/* "cut": rgapsd hears the link is down, then it is closed (both ways: the peer sees EOF). */
static void on_cut(uv_timer_t *t)
{
	struct fault_ctx *c = t->data;
	struct rgaps_link *link = c->cut_link;

	c->cut_link = NULL;
	uv_close((uv_handle_t *)t, on_late_closed);
	c->cut_timer = NULL;
	if (!link)
		return;
	LOG(c, 1, "fault injection: data link cut after %llu records",
	    (unsigned long long)c->posted);
	c->core.link_down(c->core.arg, link, -ECONNRESET, "fault injection: link cut");
	real->close(c->real_ctx, link);
}

/* ---------------------------------------------------------------- operations */

static int f_init(const struct rgaps_plugin_env *env, const struct rgaps_transport_cbs *cbs,
		  void **ctx_p)
{
	struct fault_ctx *c = calloc(1, sizeof(*c));
	const char *f = getenv("RGAPSD_FAULT");
	int e;

	if (!c)
		return -ENOMEM;
	c->log = env->log;
	c->uv_loop = env->uv_loop;
	c->core = *cbs;
	c->mine = (struct rgaps_transport_cbs){
		.arg = c,
		.link_accepted = cb_link_accepted,
		.link_connected = cb_link_connected,
		.link_down = cb_link_down,
		.record_landed = cb_record_landed,
		.record_header = cbs->record_header ? cb_record_header : NULL,
		.record_sent = cb_record_sent,
		.head_update = cb_head_update,
	};
	for (int i = 1; f && i < (int)(sizeof(fault_names) / sizeof(fault_names[0])); i++) {
		size_t n = strlen(fault_names[i]);

		if (strncmp(f, fault_names[i], n) == 0 && (f[n] == '\0' || f[n] == ':')) {
			c->fault = (enum fault)i;
			c->after = f[n] == ':' ? strtoull(f + n + 1, NULL, 10) : 0;
		}
	}
	if (f && c->fault == F_NONE) {
		env->log(0, "RGAPSD_FAULT=%s: no such fault", f);
		free(c);
		return -EINVAL;
	}
	if (f)
		env->log(1, "RGAPSD_FAULT=%s: this daemon misbehaves on purpose (tests only)", f);
	e = real->init(env, &c->mine, &c->real_ctx);
	if (e) {
		free(c);
		return e;
	}
	*ctx_p = c;
	return 0;
}

static void f_fini(void *ctx)
{
	struct fault_ctx *c = ctx;

	if (c->late_timer) {
		uv_close((uv_handle_t *)c->late_timer, on_late_closed);
		c->late_timer = NULL;
	}
	if (c->cut_timer) {
		uv_close((uv_handle_t *)c->cut_timer, on_late_closed);
		c->cut_timer = NULL;
	}
	real->fini(c->real_ctx); /* closes every link, the held one too */
	for (int i = 0; i < MAX_COPIES; i++)
		free(c->copies[i].buf);
	free(c);
}

static int f_probe(void *ctx, char *why, size_t whylen)
{
	return real->probe(((struct fault_ctx *)ctx)->real_ctx, why, whylen);
}

static int f_listen(void *ctx, const char *host, uint16_t port)
{
	return real->listen(((struct fault_ctx *)ctx)->real_ctx, host, port);
}

static int f_connect(void *ctx, const char *host, uint16_t port,
		     const uint8_t token[RGAPS_LINK_TOKEN_LEN], struct rgaps_link **link_p)
{
	return real->connect(((struct fault_ctx *)ctx)->real_ctx, host, port, token, link_p);
}

static void f_close(void *ctx, struct rgaps_link *link)
{
	struct fault_ctx *c = ctx;

	if (c->late_link == link)
		c->late_link = NULL;
	if (c->cut_link == link)
		c->cut_link = NULL;
	real->close(c->real_ctx, link);
}

static int f_reg_local(void *ctx, void *addr, uint64_t len, void **mr_p)
{
	return real->reg_local(((struct fault_ctx *)ctx)->real_ctx, addr, len, mr_p);
}

static void f_dereg_local(void *ctx, void *mr)
{
	real->dereg_local(((struct fault_ctx *)ctx)->real_ctx, mr);
}

static int f_sender_ring_prepare(void *ctx, struct rgaps_link *link, uint32_t ring_id,
				 uint8_t *desc_out, size_t *desc_len_p)
{
	return real->sender_ring_prepare(((struct fault_ctx *)ctx)->real_ctx, link, ring_id,
					 desc_out, desc_len_p);
}

static int f_receiver_ring_attach(void *ctx, struct rgaps_link *link, uint32_t ring_id, void *ring,
				  uint64_t size, const uint8_t *peer_desc, size_t peer_desc_len,
				  uint8_t *desc_out, size_t *desc_len_p)
{
	return real->receiver_ring_attach(((struct fault_ctx *)ctx)->real_ctx, link, ring_id, ring,
					  size, peer_desc, peer_desc_len, desc_out, desc_len_p);
}

static int f_sender_ring_connect(void *ctx, struct rgaps_link *link, uint32_t ring_id,
				 const uint8_t *d, size_t dlen)
{
	return real->sender_ring_connect(((struct fault_ctx *)ctx)->real_ctx, link, ring_id, d,
					 dlen);
}

static void f_ring_detach(void *ctx, struct rgaps_link *link, uint32_t ring_id)
{
	real->ring_detach(((struct fault_ctx *)ctx)->real_ctx, link, ring_id);
}

/* "chunk": send a copy of the record with one data byte flipped. */
static int post_spoiled_copy(struct fault_ctx *c, struct rgaps_link *link, uint32_t ring_id,
			     uint64_t off, const struct rgaps_sg *sg, uint32_t nsg, uint64_t cookie)
{
	struct rgaps_sg one;
	uint64_t len = 0, at = 0;
	struct copy *cp = NULL;
	int e;

	for (int i = 0; i < MAX_COPIES && !cp; i++)
		if (!c->copies[i].buf)
			cp = &c->copies[i];
	for (uint32_t i = 0; i < nsg; i++)
		len += sg[i].len;
	if (!cp || len <= HDR || !(cp->buf = malloc(len)))
		return -EAGAIN; /* try the fault on a later record */
	for (uint32_t i = 0; i < nsg; i++) {
		memcpy(cp->buf + at, sg[i].addr, sg[i].len);
		at += sg[i].len;
	}
	cp->buf[HDR + (nsg > 1 ? sg[1].len : len - HDR) / 2] ^= 0x5a; /* the chunk, not a tag */
	e = real->reg_local(c->real_ctx, cp->buf, len, &cp->mr);
	if (!e) {
		one = (struct rgaps_sg){ .mr = cp->mr, .addr = cp->buf, .len = len };
		cp->cookie = cookie;
		e = real->post_record(c->real_ctx, link, ring_id, off, &one, 1, cookie);
		if (e)
			real->dereg_local(c->real_ctx, cp->mr);
	}
	if (e) {
		free(cp->buf);
		cp->buf = NULL;
	}
	return e;
}

static int f_post_record(void *ctx, struct rgaps_link *link, uint32_t ring_id, uint64_t off,
			 const struct rgaps_sg *sg, uint32_t nsg, uint64_t cookie)
{
	struct fault_ctx *c = ctx;
	uint8_t *h = nsg ? sg[0].addr : NULL;
	int e;

	if (c->cut_link == link)
		return -ENOTCONN; /* cut: the link is going down */
	if (c->fault == F_CUT && !c->done && c->posted >= c->after) {
		c->cut_timer = calloc(1, sizeof(*c->cut_timer));
		if (c->cut_timer) {
			c->done = true;
			c->cut_link = link;
			uv_timer_init(c->uv_loop, c->cut_timer);
			c->cut_timer->data = c;
			uv_timer_start(c->cut_timer, on_cut, 0, 0);
			return -ENOTCONN;
		}
	}
	if (c->fault == F_NONE || c->fault == F_LATE_ACCEPT || c->fault == F_CUT || c->done || c->posted < c->after ||
	    !h || sg[0].len < HDR) {
		e = real->post_record(c->real_ctx, link, ring_id, off, sg, nsg, cookie);
		c->posted += e == 0;
		return e;
	}
	LOG(c, 1, "fault injection: spoiling record %llu on ring %u (%s)",
	    (unsigned long long)c->posted, ring_id, fault_names[c->fault]);
	switch (c->fault) { /* the header is the sender's own buffer: spoil it in place */
	case F_MAGIC:
		h[0] ^= 0xff;
		break;
	case F_OVERSIZE:
		for (int i = 16; i < 24; i++)
			h[i] = i == 23 ? 0x3f : 0xff; /* msg_size = 2^62 - 1 */
		break;
	case F_OFFSET:
		off += 4096; /* ahead of where the receiver expects it */
		break;
	case F_ORDER:
		h[48]++; /* record_seq, little-endian: one more */
		break;
	case F_OUTSIDE:
		off = 1ull << 40;
		break;
	case F_CHUNK:
		e = post_spoiled_copy(c, link, ring_id, off, sg, nsg, cookie);
		if (e == -EAGAIN && nsg && sg[0].len >= HDR)
			return real->post_record(c->real_ctx, link, ring_id, off, sg, nsg, cookie);
		c->done = e == 0;
		c->posted += e == 0;
		return e;
	case F_NONE:
	case F_LATE_ACCEPT:
	case F_CUT:
		break;
	}
	c->done = true;
	e = real->post_record(c->real_ctx, link, ring_id, off, sg, nsg, cookie);
	c->posted += e == 0;
	return e;
}

static int f_post_head(void *ctx, struct rgaps_link *link, uint32_t ring_id, uint64_t head)
{
	return real->post_head(((struct fault_ctx *)ctx)->real_ctx, link, ring_id, head);
}

static void f_flush(void *ctx, struct rgaps_link *link)
{
	real->flush(((struct fault_ctx *)ctx)->real_ctx, link);
}

static void f_link_stats(void *ctx, struct rgaps_link *link, struct rgaps_link_stats *st)
{
	real->link_stats(((struct fault_ctx *)ctx)->real_ctx, link, st);
}

static const struct rgaps_transport_ops fault_ops = {
	.init = f_init,
	.fini = f_fini,
	.probe = f_probe,
	.listen = f_listen,
	.connect = f_connect,
	.close = f_close,
	.reg_local = f_reg_local,
	.dereg_local = f_dereg_local,
	.sender_ring_prepare = f_sender_ring_prepare,
	.receiver_ring_attach = f_receiver_ring_attach,
	.sender_ring_connect = f_sender_ring_connect,
	.ring_detach = f_ring_detach,
	.post_record = f_post_record,
	.post_head = f_post_head,
	.flush = f_flush,
	.link_stats = f_link_stats,
};

/*
 * The descriptor is the real plugin's, with our operations: filled when this
 * module is loaded, before the loader reads it. The real plugin fills all of
 * its operations (the tcp plugin does); a real one that did not would make the
 * forwarding above call NULL, so it is refused here.
 */
RGAPS_PLUGIN_EXPORT struct rgaps_plugin rgaps_plugin;

__attribute__((constructor)) static void load_real(void)
{
	/* RGAPSD_FAULT_TCP: the real plugin elsewhere (a build tree copied to a GPU machine) */
	const char *path = getenv("RGAPSD_FAULT_TCP") ? getenv("RGAPSD_FAULT_TCP") : REAL_TCP_PLUGIN;
	void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	const void *const *op;

	real_desc = dl ? dlsym(dl, RGAPS_PLUGIN_SYMBOL) : NULL;
	if (!real_desc || real_desc->abi_version != RGAPS_PLUGIN_ABI_VERSION ||
	    real_desc->ops_size < sizeof(struct rgaps_transport_ops)) {
		fprintf(stderr, "transport-fault: cannot use %s: %s\n", path,
			dl ? "not a matching tcp plugin" : dlerror());
		return; /* rgaps_plugin stays zero: the loader refuses this module */
	}
	real = real_desc->ops;
	op = (const void *const *)real;
	for (size_t i = 0; i < sizeof(*real) / sizeof(void *); i++)
		if (!op[i])
			return;
	desc = *real_desc;
	desc.ops = &fault_ops;
	desc.ops_size = sizeof(fault_ops);
	desc.description = "tcp with faults injected on purpose (tests only)";
	rgaps_plugin = desc;
}
