/*
 * The local control protocol of rgapsd (docs/PROTOCOL.md, "Local control"):
 * one JSON request per frame, one reply per request, in order. Requests:
 * hello, attach, mapped, sync, detach, topics, stats. Every reply is {"ok":true,...} or
 * {"ok":false,"error":{"code","errno","message"}}, echoing the request's "id".
 * Bad input of any kind gets an error reply; only a broken frame (which makes
 * the stream unusable) also closes the connection. `topics` and `stats` are
 * paged (pages.h): each reply fits a frame, whatever the number of topics,
 * and shows only the topics the client may attach to (access.c).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../common/errors.h"
#include "../common/frame.h"
#include "../common/futex.h"
#include "../common/log.h"
#include "daemon.h"
#include "pages.h"
#include "remote.h"
#include "rgaps/rgaps.h"
#include "rgaps_build_config.h"

enum client_role {
	CLIENT_NONE,
	CLIENT_PUB,
	CLIENT_SUB,
};

#define MAX_REPLY_FDS 32 /* the control server's limit per reply (control.c) */

/* Per-connection state (rgapsd_conn_set_data). */
struct client {
	struct rgapsd *d;
	struct rgapsd_conn *conn;
	bool hello;
	enum client_role role;
	struct rgapsd_topic *topic;
	struct rgapsd_member *member; /* the attachment's own region (and pool) */
	bool active;		      /* "mapped" came: the member is in the topic */
	struct rgapsd_told told;      /* what it knows of the other kind of members */
	cJSON *pending_reply; /* publisher attach waiting for the peers' topic set-up */
};

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

/* An "id" longer than this is refused: every reply echoes it, and must still fit a frame. */
#define REQUEST_ID_MAX 256

/* The reply that replaces one too large for a frame: nothing is dropped without a word. */
static void send_too_large(struct rgapsd_conn *conn, const cJSON *id, size_t len)
{
	cJSON *r = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(r, "error");
	char msg[160], *text;

	snprintf(msg, sizeof(msg), "the reply would be %zu bytes, over the frame limit of %u",
		 len, RGAPS_FRAME_MAX);
	rgaps_warn("connection %llu: %s; sent an error instead",
		   (unsigned long long)rgapsd_conn_id(conn), msg);
	cJSON_AddBoolToObject(r, "ok", 0);
	if (id)
		cJSON_AddItemToObject(r, "id", cJSON_Duplicate(id, 1));
	cJSON_AddStringToObject(e, "code", rgaps__errcode_name(EMSGSIZE));
	cJSON_AddNumberToObject(e, "errno", EMSGSIZE);
	cJSON_AddStringToObject(e, "message", msg);
	text = cJSON_PrintUnformatted(r);
	if (!text || rgapsd_conn_send(conn, text, strlen(text), NULL, 0) < 0)
		rgapsd_conn_close_after_send(conn);
	free(text);
	cJSON_Delete(r);
}

/*
 * A reply too large for a frame goes out as an error instead; one that cannot be queued
 * closes the connection. A reply with fds that could not be passed (EMFILE...) is not
 * sent: the error is returned for the caller to undo what the reply announced and say so.
 */
static int send_json(struct rgapsd_conn *conn, cJSON *reply, const int *fds, int nfds)
{
	char *text = cJSON_PrintUnformatted(reply);
	size_t len;
	int rc;

	if (!text) {
		rgaps_error("out of memory formatting a reply; closing connection %llu",
			    (unsigned long long)rgapsd_conn_id(conn));
		rgapsd_conn_close_after_send(conn);
		return -ENOMEM;
	}
	len = strlen(text);
	rc = rgapsd_conn_send(conn, text, len, fds, nfds);
	free(text);
	if (rc == -EMSGSIZE) {
		send_too_large(conn, cJSON_GetObjectItemCaseSensitive(reply, "id"), len);
		return 0;
	}
	if (rc < 0 && !(nfds && rc != -ENOTCONN && rc != -ENOMEM))
		rgapsd_conn_close_after_send(conn);
	return rc;
}

static cJSON *reply_ok(const cJSON *req)
{
	cJSON *r = cJSON_CreateObject();
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(req, "id");

	cJSON_AddBoolToObject(r, "ok", 1);
	if (id && (cJSON_IsNumber(id) || cJSON_IsString(id)))
		cJSON_AddItemToObject(r, "id", cJSON_Duplicate(id, 1));
	return r;
}

static void reply_error(struct rgapsd *d, struct rgapsd_conn *conn, const cJSON *req, int err,
			const char *fmt, ...) RGAPS_PRINTF(5, 6);

static void reply_error(struct rgapsd *d, struct rgapsd_conn *conn, const cJSON *req, int err,
			const char *fmt, ...)
{
	const cJSON *id = req ? cJSON_GetObjectItemCaseSensitive(req, "id") : NULL;
	cJSON *r = cJSON_CreateObject(), *e = cJSON_CreateObject();
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	d->request_errors++;
	/* A client can cause refusals at will: a few at info level, the rest at debug only. */
	rgaps_log_limited(&d->log_rl, RGAPS_LOG_INFO, "connection %llu (pid %d uid %u): %s: %s",
			  (unsigned long long)rgapsd_conn_id(conn), (int)rgapsd_conn_cred(conn)->pid,
			  (unsigned)rgapsd_conn_cred(conn)->uid, rgaps__errcode_name(err), msg);
	cJSON_AddBoolToObject(r, "ok", 0);
	if (id && (cJSON_IsNumber(id) || cJSON_IsString(id)))
		cJSON_AddItemToObject(r, "id", cJSON_Duplicate(id, 1));
	cJSON_AddStringToObject(e, "code", rgaps__errcode_name(err));
	cJSON_AddNumberToObject(e, "errno", abs(err));
	cJSON_AddStringToObject(e, "message", msg);
	cJSON_AddItemToObject(r, "error", e);
	send_json(conn, r, NULL, 0);
	cJSON_Delete(r);
}

static const char *str_field(const cJSON *req, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, key);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void detach(struct client *c)
{
	if (c->pending_reply) {
		rgapsd_remote_cancel_attach(c->d, c);
		cJSON_Delete(c->pending_reply);
		c->pending_reply = NULL;
	}
	if (c->member)
		rgapsd_member_leave(c->member);
	if (c->role == CLIENT_SUB && c->active && --c->topic->local_subs == 0)
		rgapsd_remote_subscribers_changed(c->d, c->topic);
	if (c->topic) {
		c->topic->attachments--;
		c->topic->busy_ns = rgaps_now_ns(CLOCK_MONOTONIC); /* idle from now on */
	}
	rgapsd_told_free(&c->told);
	c->member = NULL;
	if (c->active)
		rgapsd_conn_set_attached(c->conn, false);
	c->active = false;
	c->role = CLIENT_NONE;
	c->topic = NULL;
}

/*
 * Send a reply of the attach with its fds, unless e (an error of preparing it);
 * when it cannot be sent (EMFILE...), or e, there is no attachment, and the
 * client is told.
 */
static void send_attach_part(struct client *c, cJSON *r, int *fds, int nfds, int e)
{
	if (!e) {
		e = send_json(c->conn, r, fds, nfds);
		if (e == -ENOTCONN || e == -ENOMEM)
			e = 0; /* it left, or the connection closes after what was sent */
	}
	close_fds(fds, nfds);
	cJSON_Delete(r);
	if (!e)
		return;
	detach(c);
	reply_error(c->d, c->conn, NULL, e, "cannot share the topic's memory: %s", strerror(-e));
}

/*
 * The first reply of an attach: the topic header (read-only), the client's own
 * region (read-write) and, for a publisher, its pool (read-write), still open to
 * writable mappings until the client says "mapped".
 */
static void send_attach_reply(struct client *c, cJSON *r)
{
	struct rgapsd_member *m = c->member;
	int fds[3], nfds = 0, e;

	/* A read-only open of the sealed header: clients cannot map it writable. */
	e = rgaps__shm_reopen_read_only(c->topic->hdr_fd);
	if (e >= 0)
		fds[nfds++] = e;
	if (e >= 0)
		e = rgapsd_member_share_fd(m, false, true);
	if (e >= 0)
		fds[nfds++] = e;
	if (e >= 0 && c->role == CLIENT_PUB) {
		e = rgapsd_member_share_fd(m, true, true);
		if (e >= 0)
			fds[nfds++] = e;
	}
	send_attach_part(c, r, fds, nfds, e < 0 ? e : 0);
}

/* The reply that completes an attach ("mapped"): the members the client must know of. */
static void send_members_reply(struct client *c, cJSON *r)
{
	int fds[MAX_REPLY_FDS], nfds = 0;
	int e = rgapsd_told_diff(&c->told, c->topic,
				  c->role == CLIENT_PUB ? RGAPSD_MEMBER_SUB : RGAPSD_MEMBER_PUB,
				  c->member->serve, r, fds, &nfds, MAX_REPLY_FDS);

	send_attach_part(c, r, fds, nfds, e);
}

/* The peers answered (or the wait timed out): complete a publisher's attach. */
static void attach_done(void *arg, int status)
{
	struct client *c = arg;
	cJSON *r = c->pending_reply;

	c->pending_reply = NULL;
	send_members_reply(c, r);
}

/* ---------------------------------------------------------------- requests */

static void do_hello(struct rgapsd *d, struct rgapsd_conn *conn, struct client *c,
		     const cJSON *req)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, "version");
	cJSON *r;

	if (!cJSON_IsNumber(v)) {
		reply_error(d, conn, req, -EPROTO, "hello needs a numeric 'version'");
		return;
	}
	if (v->valuedouble != RGAPS_PROTOCOL_VERSION) {
		reply_error(d, conn, req, -EPROTONOSUPPORT,
			    "client speaks protocol %g, rgapsd speaks %d", v->valuedouble,
			    RGAPS_PROTOCOL_VERSION);
		return;
	}
	c->hello = true;
	r = reply_ok(req);
	cJSON_AddNumberToObject(r, "version", RGAPS_PROTOCOL_VERSION);
	cJSON_AddStringToObject(r, "daemon", "rgapsd " RGAPS_VERSION);
	cJSON_AddStringToObject(r, "instance", d->instance);
	send_json(conn, r, NULL, 0);
	cJSON_Delete(r);
}

static bool pci_valid(const char *pci)
{
	return strlen(pci) < sizeof(((struct rgaps_mem_topology *)0)->pci[0]) &&
	       strspn(pci, "0123456789abcdef:.") == strlen(pci);
}

/* The client's PCI addresses of its GPU and of every GPU it sees (optional; checked). */
static int client_gpus_parse(const cJSON *req, struct rgapsd_client_gpus *cg, char *err,
			     size_t errlen)
{
	const cJSON *seen = cJSON_GetObjectItemCaseSensitive(req, "gpus_pci"), *v;

	if (cg->pci && !pci_valid(cg->pci)) {
		snprintf(err, errlen,
			 "'device_pci' must be a PCI address in lower case, like "
			 "0000:3b:00.0");
		return -EPROTO;
	}
	if (!seen)
		return 0;
	if (!cJSON_IsArray(seen) || cJSON_GetArraySize(seen) > RGAPS_MEM_MAX_DEVICES) {
		snprintf(err, errlen, "'gpus_pci' must be an array of at most %d PCI addresses",
			 RGAPS_MEM_MAX_DEVICES);
		return -EPROTO;
	}
	cJSON_ArrayForEach(v, seen)
	{
		if (!cJSON_IsString(v) || !pci_valid(v->valuestring)) {
			snprintf(err, errlen,
				 "'gpus_pci' must hold PCI addresses in lower case, like "
				 "0000:3b:00.0");
			return -EPROTO;
		}
		cg->seen[cg->nseen++] = v->valuestring;
	}
	return 0;
}

static void do_attach(struct rgapsd *d, struct rgapsd_conn *conn, struct client *c,
		      const cJSON *req)
{
	const char *name = str_field(req, "topic"), *role = str_field(req, "role");
	const char *path;
	const cJSON *dev = cJSON_GetObjectItemCaseSensitive(req, "device");
	struct rgapsd_client_gpus cg = { .gpu = -1, .pci = str_field(req, "device_pci") };
	const struct ucred *cred = rgapsd_conn_cred(conn);
	struct rgapsd_client_id id;
	struct rgapsd_member_spec spec = { .conn_id = rgapsd_conn_id(conn), .pid = cred->pid,
					   .pool_dev = -1 };
	struct rgapsd_topic *t;
	char err[512], why[256];
	cJSON *r;
	int rc;
	bool sub, created, grant_rw;

	if (!c->hello) {
		reply_error(d, conn, req, -EPROTO, "say hello (protocol version) before attach");
		return;
	}
	if (c->role != CLIENT_NONE) {
		reply_error(d, conn, req, -EEXIST, "this connection is attached to '%s' already",
			    c->topic->cfg.name);
		return;
	}
	if (!rgaps__topic_name_check(name, why, sizeof(why))) {
		reply_error(d, conn, req, -EINVAL, "%s", why);
		return;
	}
	if (!role || (strcmp(role, "pub") != 0 && strcmp(role, "sub") != 0)) {
		reply_error(d, conn, req, -EPROTO, "attach needs role \"pub\" or \"sub\"");
		return;
	}
	/* The client's GPU: optional, an ordinal and its PCI address ("0000:3b:00.0"). */
	if (dev && (!cJSON_IsNumber(dev) || dev->valuedouble < 0 || dev->valuedouble > 1023 ||
		    dev->valuedouble != (int)dev->valuedouble)) {
		reply_error(d, conn, req, -EPROTO, "'device' must be a GPU ordinal, 0 to 1023");
		return;
	}
	if (dev)
		cg.gpu = (int32_t)dev->valuedouble;
	rc = client_gpus_parse(req, &cg, err, sizeof(err));
	if (rc) {
		reply_error(d, conn, req, rc, "%s", err);
		return;
	}
	sub = role[0] == 's';
	/* Allow-list and quota first: a refused client creates nothing. */
	rgapsd_client_identify(conn, &id);
	rc = rgapsd_attach_admit(d, name, &id, &t, err, sizeof(err));
	if (rc) {
		reply_error(d, conn, req, rc, "%s", err);
		return;
	}
	created = !t;
	rc = rgapsd_topic_get(d, name, &t, err, sizeof(err));
	if (rc) {
		reply_error(d, conn, req, rc, "topic '%s': %s", name, err);
		return;
	}
	if (created) {
		t->has_creator = true;
		t->creator = cred->uid;
	}
	/* Which GPU it is on and how that GPU is served: refused here, never at a read. */
	rc = rgapsd_topic_gpu_attach(t, sub, &cg, &spec.gpu, &spec.serve, &path, &grant_rw, err,
				      sizeof(err));
	if (rc) {
		reply_error(d, conn, req, rc, "topic '%s': %s", name, err);
		return;
	}
	rc = rgapsd_told_init(&c->told, t, sub ? RGAPSD_MEMBER_PUB : RGAPSD_MEMBER_SUB);
	if (rc) {
		reply_error(d, conn, req, rc, "out of memory");
		return;
	}
	spec.kind = sub ? RGAPSD_MEMBER_SUB : RGAPSD_MEMBER_PUB;
	/* Its memory now; it joins the topic once it has mapped it (do_mapped). */
	rc = rgapsd_member_prepare(t, &spec, &c->member, err, sizeof(err));
	if (rc) {
		rgapsd_told_free(&c->told);
		reply_error(d, conn, req, rc, "topic '%s': %s", name, err);
		return;
	}
	c->role = sub ? CLIENT_SUB : CLIENT_PUB;
	c->topic = t;
	t->attachments++;

	r = reply_ok(req);
	cJSON_AddStringToObject(r, "topic", name);
	cJSON_AddNumberToObject(r, "hdr_size", (double)rgaps__topic_hdr_size());
	cJSON_AddStringToObject(r, "memory", t->mem->name);
	cJSON_AddNumberToObject(r, "device", t->cfg.device);
	if (!sub)
		cJSON_AddNumberToObject(r, "mem_flags", c->member->pool.flags);
	cJSON_AddNumberToObject(r, "my_device", spec.gpu);
	/* GPUs by PCI address too: the client's ordinals may differ (CUDA_VISIBLE_DEVICES). */
	if (rgapsd_gpu_pci(t, t->cfg.device))
		cJSON_AddStringToObject(r, "device_pci", rgapsd_gpu_pci(t, t->cfg.device));
	if (rgapsd_gpu_pci(t, spec.gpu))
		cJSON_AddStringToObject(r, "my_device_pci", rgapsd_gpu_pci(t, spec.gpu));
	cJSON_AddStringToObject(r, "gpu_path", path);
	cJSON_AddBoolToObject(r, "grant_rw", grant_rw);
	send_attach_reply(c, r);
}

/*
 * The client has mapped its own memory: seal it for good, let the member into the
 * topic, and complete the attach with the members it must know of.
 */
static void do_mapped(struct rgapsd *d, struct rgapsd_conn *conn, struct client *c,
		      const cJSON *req)
{
	struct rgapsd_member *m = c->member;
	char err[512];
	cJSON *r;
	int rc;

	if (c->role == CLIENT_NONE || c->active) {
		reply_error(d, conn, req, -EPROTO,
			    c->active ? "\"mapped\" came already" : "\"mapped\" before attach");
		return;
	}
	rc = rgapsd_member_activate(m, err, sizeof(err));
	if (rc) {
		reply_error(d, conn, req, rc, "topic '%s': %s", c->topic->cfg.name, err);
		detach(c);
		return;
	}
	c->active = true;
	rgapsd_conn_set_attached(conn, true);
	rgaps_debug("pid %d attached to '%s' as %s slot %u (stream %llu, GPU %d)", (int)m->pid,
		    c->topic->cfg.name, c->role == CLIENT_SUB ? "sub" : "pub", m->slot,
		    (unsigned long long)m->gen, (int)m->gpu);
	r = reply_ok(req);
	cJSON_AddNumberToObject(r, "slot", m->slot);
	cJSON_AddNumberToObject(r, "gen", (double)m->gen);
	if (c->role == CLIENT_SUB && c->topic->local_subs++ == 0)
		rgapsd_remote_subscribers_changed(d, c->topic);
	/* A publisher's attach completes once interested peers set the topic up
	 * (docs/ARCHITECTURE.md section 7). */
	if (c->role == CLIENT_PUB && rgapsd_remote_publisher_attach(d, c->topic, attach_done, c)) {
		c->pending_reply = r;
		return;
	}
	send_members_reply(c, r);
}

/* The client saw the topic's directory move: tell it what changed since. */
static void do_sync(struct rgapsd *d, struct rgapsd_conn *conn, struct client *c,
		    const cJSON *req)
{
	int fds[MAX_REPLY_FDS], nfds = 0, e;
	cJSON *r;

	if (!c->active || c->pending_reply) {
		reply_error(d, conn, req, -ENOTCONN, "not attached");
		return;
	}
	r = reply_ok(req);
	e = rgapsd_told_diff(&c->told, c->topic,
			      c->role == CLIENT_PUB ? RGAPSD_MEMBER_SUB : RGAPSD_MEMBER_PUB,
			      c->member->serve, r, fds, &nfds, MAX_REPLY_FDS);
	if (e) {
		close_fds(fds, nfds);
		cJSON_Delete(r);
		reply_error(d, conn, req, e, "cannot share a member's memory: %s", strerror(-e));
		return;
	}
	e = send_json(conn, r, fds, nfds);
	if (e && e != -ENOTCONN && e != -ENOMEM) {
		/* What it was told is recorded: a client that missed it cannot go on. */
		rgaps_warn("connection %llu: cannot pass the members' descriptors: %s; closing it",
			   (unsigned long long)rgapsd_conn_id(conn), strerror(-e));
		rgapsd_conn_close_after_send(conn);
	}
	close_fds(fds, nfds);
	cJSON_Delete(r);
}

static void do_detach(struct rgapsd *d, struct rgapsd_conn *conn, struct client *c,
		      const cJSON *req)
{
	cJSON *r;

	if (c->role == CLIENT_NONE) {
		reply_error(d, conn, req, -ENOTCONN, "not attached");
		return;
	}
	detach(c);
	r = reply_ok(req);
	send_json(conn, r, NULL, 0);
	cJSON_Delete(r);
}

/*
 * "latency_us": publish -> take, from the histogram snapshot h (lathist.h:
 * bucket midpoints, within 6.25%). Across hosts the publisher's clock stamps
 * the message, so the figure holds as well as the hosts' clocks agree.
 */
static void add_latency(cJSON *o, const struct rgaps_lathist *h, bool tail)
{
	cJSON *l = cJSON_AddObjectToObject(o, "latency_us");

	cJSON_AddNumberToObject(l, "count", (double)h->count);
	cJSON_AddNumberToObject(l, "p50", (double)rgaps_lathist_quantile(h, 0.50) / 1e3);
	cJSON_AddNumberToObject(l, "p99", (double)rgaps_lathist_quantile(h, 0.99) / 1e3);
	if (!tail)
		return;
	cJSON_AddNumberToObject(l, "p999", (double)rgaps_lathist_quantile(h, 0.999) / 1e3);
	cJSON_AddNumberToObject(l, "max", (double)rgaps_lathist_quantile(h, 1.0) / 1e3);
	cJSON_AddNumberToObject(l, "skewed", (double)h->skewed);
}

/* Sums over a topic's members, read through clamped snapshots (topic.h). */
struct topic_sums {
	struct rgaps_pub_counters pc;
	struct rgaps_sub_counters sc;
	uint64_t queue_used, pool_used, pool_blocks;
	double fragmentation;
	uint32_t streams, draining, bad;
	uint32_t readers; /* subscribers that take messages (not stopped, holding only) */
};

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

static void topic_sums(const struct rgapsd_topic *t, struct topic_sums *ts)
{
	memset(ts, 0, sizeof(*ts));
	ts->pc = t->gone_pubs;
	ts->sc = t->gone_subs;
	for (uint32_t k = 0; k < t->lim.max_publishers; k++) {
		const struct rgapsd_member *p = t->pubs[k];
		struct rgaps_pub_snapshot s;
		const uint64_t *src = (const uint64_t *)&s.c;
		uint64_t *dst = (uint64_t *)&ts->pc, freeb;

		if (!p)
			continue;
		rgapsd_member_pub_snapshot(p, &s);
		for (size_t i = 0; i < sizeof(s.c) / sizeof(uint64_t); i++)
			dst[i] = sat_add(dst[i], src[i]);
		ts->streams++;
		ts->draining += p->state == RGAPSD_MEMBER_DRAINING;
		ts->bad += s.bad;
		ts->queue_used += s.head - s.tail;
		ts->pool_used = sat_add(ts->pool_used, s.c.pool_used_bytes);
		ts->pool_blocks = sat_add(ts->pool_blocks, s.c.pool_used_blocks);
		freeb = t->lim.pool_size - s.c.pool_used_bytes;
		if (freeb && s.c.pool_largest_free <= freeb)
			ts->fragmentation = RGAPS_MAX(ts->fragmentation,
						      1.0 - (double)s.c.pool_largest_free / (double)freeb);
	}
	for (uint32_t j = 0; j < t->lim.max_subscribers; j++) {
		struct rgaps_sub_snapshot s;

		if (!t->subs[j])
			continue;
		rgaps__sub_snapshot(&t->lim, t->subs[j]->map, &s);
		ts->readers += !s.stopped;
		ts->sc.taken = sat_add(ts->sc.taken, s.c.taken);
		ts->sc.released = sat_add(ts->sc.released, s.c.released);
		ts->sc.drops = sat_add(ts->sc.drops, s.c.drops);
		ts->sc.errors = sat_add(ts->sc.errors, s.c.errors);
	}
}

/* Messages of every stream that subscriber region sm has not taken yet. */
static uint64_t lag_of(const struct rgapsd_topic *t, const struct rgapsd_member *sm)
{
	uint64_t lag = 0;

	for (uint32_t k = 0; k < t->lim.max_publishers; k++) {
		const struct rgapsd_member *p = t->pubs[k];
		struct rgaps_pub_snapshot s;
		uint64_t head;

		if (!p || !rgapsd_member_reads(sm, p))
			continue;
		rgapsd_member_pub_snapshot(p, &s);
		head = RGAPS_MIN(s.head, p->limit);
		if (head < s.tail)
			continue;
		lag += head - rgaps__sub_position(&t->lim, sm->map, k, p->gen, s.tail, head);
	}
	return lag;
}

static cJSON *topic_summary(struct rgapsd_topic *t, bool full)
{
	struct topic_sums ts;
	cJSON *o = cJSON_CreateObject();

	topic_sums(t, &ts);
	cJSON_AddStringToObject(o, "name", t->cfg.name);
	cJSON_AddStringToObject(o, "memory", t->mem->name);
	/* A stopped subscriber only keeps what it holds: it is no longer one (rgaps.h). */
	cJSON_AddNumberToObject(o, "subscribers", ts.readers);
	cJSON_AddNumberToObject(o, "publishers", t->npubs);
	cJSON_AddNumberToObject(o, "published", (double)ts.pc.published);
	cJSON_AddNumberToObject(o, "published_bytes", (double)ts.pc.published_bytes);
	cJSON_AddNumberToObject(o, "pool_size", (double)t->lim.pool_size);
	cJSON_AddNumberToObject(o, "pool_used", (double)ts.pool_used);
	{
		/* Several GPUs: which it serves and how (pool, peer, replica), and the copies. */
		cJSON *g = rgapsd_topic_gpus_json(t);

		if (g) {
			cJSON_AddStringToObject(o, "gpu_fanout", t->cfg.gpu_fanout);
			cJSON_AddItemToObject(o, "gpus", g);
		}
	}
	if (!full)
		return o;
	cJSON *rem = cJSON_AddObjectToObject(o, "from_peers");
	cJSON_AddNumberToObject(rem, "messages", (double)t->landed_msgs);
	cJSON_AddNumberToObject(rem, "bytes", (double)t->landed_bytes);
	cJSON_AddNumberToObject(rem, "refused", (double)t->refused_msgs);
	cJSON_AddNumberToObject(rem, "gaps", (double)t->landed_gaps);

	/* Each publisher has a pool of pool_size bytes: these are the sums over them. */
	cJSON *pool = cJSON_AddObjectToObject(o, "pool");
	cJSON_AddNumberToObject(pool, "size", (double)t->lim.pool_size);
	cJSON_AddNumberToObject(pool, "pools", ts.streams);
	cJSON_AddNumberToObject(pool, "used_bytes", (double)ts.pool_used);
	cJSON_AddNumberToObject(pool, "used_blocks", (double)ts.pool_blocks);
	cJSON_AddNumberToObject(pool, "fragmentation", ts.fragmentation);

	cJSON *q = cJSON_AddObjectToObject(o, "queue");
	cJSON_AddNumberToObject(q, "depth", t->cfg.queue_depth);
	cJSON_AddNumberToObject(q, "used", (double)ts.queue_used);
	cJSON_AddNumberToObject(q, "streams", ts.streams);
	cJSON_AddNumberToObject(q, "draining", ts.draining);

	cJSON *c = cJSON_AddObjectToObject(o, "counters");
#define C(f, v) cJSON_AddNumberToObject(c, f, (double)(v))
	C("loans", ts.pc.loans);
	C("published", ts.pc.published);
	C("published_bytes", ts.pc.published_bytes);
	C("unrouted", ts.pc.unrouted);
	C("cancelled", ts.pc.cancelled);
	C("taken", ts.sc.taken);
	C("released", ts.sc.released);
	C("retired", ts.pc.retired);
	C("dropped", ts.pc.dropped);
	C("drops_total", ts.sc.drops);
	C("full_waits", ts.pc.full_waits);
	C("timeouts", ts.pc.timeouts);
	C("fenced", ts.pc.fenced);
	C("fence_waits", ts.pc.fence_waits);
	C("holds_ignored", ts.pc.holds_ignored);
	C("reclaimed_holds", t->reclaimed_holds);
	C("reclaimed_loans", t->reclaimed_loans);
	C("bad_entries_seen", ts.sc.errors);
	C("bad_regions", t->bad_regions + ts.bad);
#undef C

	{
		struct rgaps_lathist h = t->gone_latency;

		for (uint32_t j = 0; j < t->lim.max_subscribers; j++)
			if (t->subs[j])
				rgaps_lathist_sum(&h, &((const struct rgaps_sub_region *)
							       t->subs[j]->map)->latency);
		add_latency(o, &h, true);
	}

	cJSON *subs = cJSON_AddArrayToObject(o, "subscriber_slots");
	for (uint32_t i = 0; i < t->lim.max_subscribers; i++) {
		const struct rgapsd_member *sm = t->subs[i];
		struct rgaps_sub_snapshot s;
		cJSON *so;

		if (!sm)
			continue;
		rgaps__sub_snapshot(&t->lim, sm->map, &s);
		so = cJSON_CreateObject();
		cJSON_AddNumberToObject(so, "slot", i);
		cJSON_AddNumberToObject(so, "pid", sm->pid);
		cJSON_AddBoolToObject(so, "daemon", sm->own);
		if (sm->gpu >= 0)
			cJSON_AddNumberToObject(so, "gpu", sm->gpu);
		cJSON_AddNumberToObject(so, "lag", (double)lag_of(t, sm));
		cJSON_AddNumberToObject(so, "taken", (double)s.c.taken);
		cJSON_AddNumberToObject(so, "drops", (double)s.c.drops);
		cJSON_AddNumberToObject(so, "holds", s.nholds);
		if (s.stopped)
			cJSON_AddBoolToObject(so, "stopped", true);
		cJSON_AddNumberToObject(so, "bad_entries_seen", (double)s.c.errors);
		add_latency(so, &s.latency, false);
		cJSON_AddItemToArray(subs, so);
	}
	cJSON *pubs = cJSON_AddArrayToObject(o, "publisher_slots");
	for (uint32_t i = 0; i < t->lim.max_publishers; i++) {
		const struct rgapsd_member *p = t->pubs[i];
		struct rgaps_pub_snapshot s;
		cJSON *po;

		if (!p)
			continue;
		rgapsd_member_pub_snapshot(p, &s);
		po = cJSON_CreateObject();
		cJSON_AddNumberToObject(po, "slot", i);
		cJSON_AddNumberToObject(po, "stream", (double)p->gen);
		cJSON_AddNumberToObject(po, "pid", p->pid);
		cJSON_AddBoolToObject(po, "daemon", p->own);
		cJSON_AddStringToObject(po, "state",
					p->state == RGAPSD_MEMBER_DRAINING ? "draining" : "active");
		if (t->topo) {
			cJSON_AddNumberToObject(po, "pool_device", p->pool_dev);
			if (p->serve != RGAPSD_SERVE_ORIGINAL)
				cJSON_AddNumberToObject(po, "replica_for", p->serve);
		}
		cJSON_AddNumberToObject(po, "head_seq", (double)s.head);
		cJSON_AddNumberToObject(po, "tail_seq", (double)s.tail);
		cJSON_AddNumberToObject(po, "published", (double)s.c.published);
		cJSON_AddNumberToObject(po, "loans", (double)s.c.nloans);
		cJSON_AddNumberToObject(po, "pool_used", (double)s.c.pool_used_bytes);
		cJSON_AddNumberToObject(po, "fenced", (double)s.c.fenced);
		cJSON_AddItemToArray(pubs, po);
	}
	cJSON_AddItemToObject(o, "config", rgapsd_topic_config_to_json(&t->cfg));
	return o;
}

/* One page of a topics or stats reply (pages.h): what it shows, to whom. */
struct page_ctx {
	struct rgapsd *d;
	struct rgapsd_client_id id;
	const char *only; /* the request's "topic" filter, or NULL */
	bool stats;
	bool sorted_ready;
	struct rgapsd_topic **sorted; /* the visible topics, by name, made at the first need */
	size_t nsorted;
};

static bool page_visible(struct page_ctx *pc, const char *name)
{
	struct rgapsd_topic *t;

	return rgapsd_sees_all(&pc->id) ||
	       rgapsd_allows(rgapsd_config_of(pc->d, name, &t), &pc->id);
}

static int topic_name_cmp(const void *a, const void *b)
{
	return strcmp((*(struct rgapsd_topic *const *)a)->cfg.name,
		      (*(struct rgapsd_topic *const *)b)->cfg.name);
}

static bool page_sort(struct page_ctx *pc)
{
	size_t n = 0;

	pc->sorted_ready = true;
	pc->sorted = malloc(sizeof(*pc->sorted) * (pc->d->ntopics + 1));
	if (!pc->sorted)
		return false;
	for (struct rgapsd_topic *t = pc->d->topics; t; t = t->next) {
		if (pc->only && strcmp(pc->only, t->cfg.name) != 0)
			continue;
		if (rgapsd_sees_all(&pc->id) || rgapsd_allows(&t->cfg, &pc->id))
			pc->sorted[n++] = t;
	}
	qsort(pc->sorted, n, sizeof(*pc->sorted), topic_name_cmp);
	pc->nsorted = n;
	return true;
}

/* The visible topic with the smallest name >= key (inclusive) or > key. */
static cJSON *page_next_topic(void *ctx, const char *key, bool inclusive, char *key_out)
{
	struct page_ctx *pc = ctx;
	size_t lo = 0, hi;
	struct rgapsd_topic *t;

	if (!pc->sorted_ready && !page_sort(pc))
		return NULL;
	hi = pc->nsorted;
	while (key && lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(pc->sorted[mid]->cfg.name, key);

		if (c < 0 || (c == 0 && !inclusive))
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo >= pc->nsorted)
		return NULL;
	t = pc->sorted[lo];
	snprintf(key_out, RGAPSD_PAGE_KEY_MAX, "%s", t->cfg.name);
	return topic_summary(t, pc->stats);
}

static cJSON *page_daemon(void *ctx)
{
	struct page_ctx *pc = ctx;
	struct rgapsd *d = pc->d;
	struct rgapsd_control_stats cs;
	cJSON *dm = cJSON_CreateObject(), *lim;

	rgapsd_control_get_stats(d->ctl, &cs);
	cJSON_AddStringToObject(dm, "version", RGAPS_VERSION);
	cJSON_AddStringToObject(dm, "instance", d->instance);
	cJSON_AddNumberToObject(dm, "uptime_s",
				(double)(rgaps_now_ns(CLOCK_MONOTONIC) - d->start_ns) / 1e9);
	cJSON_AddNumberToObject(dm, "connections", cs.conns);
	cJSON_AddNumberToObject(dm, "connections_total", (double)d->connections);
	cJSON_AddNumberToObject(dm, "requests", (double)d->requests);
	cJSON_AddNumberToObject(dm, "request_errors", (double)d->request_errors);
	cJSON_AddNumberToObject(dm, "topics", d->ntopics);
	/* What the limits refused or cut off (docs/CONFIG.md names the key of each). */
	cJSON_AddNumberToObject(dm, "connections_refused", (double)cs.refused_max);
	cJSON_AddNumberToObject(dm, "connections_refused_user", (double)cs.refused_user);
	cJSON_AddNumberToObject(dm, "idle_closed", (double)cs.idle_closed);
	cJSON_AddNumberToObject(dm, "frame_timeouts", (double)cs.frame_timeouts);
	cJSON_AddNumberToObject(dm, "stalled_closed", (double)cs.stalled_closed);
	cJSON_AddNumberToObject(dm, "read_pauses", (double)cs.read_pauses);
	cJSON_AddNumberToObject(dm, "paused_connections", cs.paused);
	cJSON_AddNumberToObject(dm, "fds_closed", (double)cs.fds_closed);
	cJSON_AddNumberToObject(dm, "unsent_bytes", (double)cs.unsent_bytes);
	cJSON_AddNumberToObject(dm, "frame_bytes", (double)cs.frame_bytes);
	cJSON_AddNumberToObject(dm, "attach_denied", (double)d->refused.attach_denied);
	cJSON_AddNumberToObject(dm, "topics_refused_max", (double)d->refused.topics_refused_max);
	cJSON_AddNumberToObject(dm, "topics_refused_quota",
				(double)d->refused.topics_refused_quota);
	cJSON_AddNumberToObject(dm, "topics_refused_unconfigured",
				(double)d->refused.topics_refused_unconfigured);
	cJSON_AddNumberToObject(dm, "topics_removed_idle", (double)d->topics_removed_idle);
	cJSON_AddNumberToObject(dm, "gpu_pools_refused", (double)d->gpu_pools_refused);
	cJSON_AddNumberToObject(dm, "log_suppressed",
				(double)(cs.log_suppressed + d->log_rl.suppressed_total));
	rgapsd_looplag_stats(&d->lag, cJSON_AddObjectToObject(dm, "loop"));
	lim = cJSON_AddObjectToObject(dm, "limits");
	cJSON_AddNumberToObject(lim, "max_connections", d->cfg.max_connections);
	cJSON_AddNumberToObject(lim, "max_connections_per_user", d->cfg.max_connections_per_user);
	cJSON_AddNumberToObject(lim, "idle_timeout_ms", d->cfg.idle_timeout_ms);
	cJSON_AddNumberToObject(lim, "frame_timeout_ms", d->cfg.frame_timeout_ms);
	cJSON_AddNumberToObject(lim, "max_unsent_replies", (double)d->cfg.max_unsent_replies);
	cJSON_AddNumberToObject(lim, "max_topics", d->cfg.max_topics);
	cJSON_AddNumberToObject(lim, "max_topics_per_user", d->cfg.max_topics_per_user);
	cJSON_AddStringToObject(lim, "create_topics",
				d->cfg.create_topics == RGAPSD_CREATE_CONFIGURED ? "configured"
										: "any");
	return dm;
}

/*
 * Hide from the peers section what names a topic the client may not see, wherever it is:
 * elements of any array that are objects with such a "topic" (rings, forwarders...), and
 * such names in the "subscribes" lists of the sessions.
 */
static void page_filter(struct page_ctx *pc, cJSON *v, bool names)
{
	cJSON *e = v ? v->child : NULL;

	while (e) {
		cJSON *next = e->next;
		const cJSON *n = names ? e : cJSON_GetObjectItemCaseSensitive(e, "topic");

		if (cJSON_IsArray(v) && cJSON_IsString(n) && !page_visible(pc, n->valuestring)) {
			cJSON_Delete(cJSON_DetachItemViaPointer(v, e));
		} else if (cJSON_IsArray(e) || cJSON_IsObject(e)) {
			page_filter(pc, e, e->string && strcmp(e->string, "subscribes") == 0);
		}
		e = next;
	}
}

static cJSON *page_peers(void *ctx)
{
	struct page_ctx *pc = ctx;
	cJSON *tmp = cJSON_CreateObject(), *peers;

	rgapsd_remote_stats(pc->d, tmp, pc->only);
	peers = cJSON_DetachItemFromObjectCaseSensitive(tmp, "peers");
	cJSON_Delete(tmp);
	if (peers && !rgapsd_sees_all(&pc->id))
		page_filter(pc, peers, false);
	return peers;
}

static const struct rgapsd_page_member stats_members[] = {
	{ .name = "daemon", .build = page_daemon },
	{ .name = "peers", .build = page_peers },
	{ .name = "topics", .next = page_next_topic },
};

static const struct rgapsd_page_member topics_members[] = {
	{ .name = "topics", .next = page_next_topic },
};

cJSON *rgapsd_stats_all(struct rgapsd *d)
{
	/* As rgapsd's own user sees it: every topic (metrics_listen is the operator's). */
	struct page_ctx pc = { .d = d, .id = { .uid = geteuid(), .gid = getegid() }, .stats = true };
	char key[RGAPSD_PAGE_KEY_MAX];
	cJSON *o = cJSON_CreateObject(), *topics, *t;

	if (!o)
		return NULL;
	cJSON_AddItemToObject(o, "daemon", page_daemon(&pc));
	t = page_peers(&pc);
	if (t)
		cJSON_AddItemToObject(o, "peers", t);
	topics = cJSON_AddArrayToObject(o, "topics");
	for (t = page_next_topic(&pc, NULL, true, key); t && topics;
	     t = page_next_topic(&pc, key, false, key))
		cJSON_AddItemToArray(topics, t);
	/* (the sorted list is made at the first topic: NULL then is out of memory too) */
	if (!topics || !cJSON_GetObjectItemCaseSensitive(o, "daemon") || !pc.sorted) {
		free(pc.sorted);
		cJSON_Delete(o);
		return NULL;
	}
	free(pc.sorted);
	return o;
}

static void do_topics(struct rgapsd *d, struct rgapsd_conn *conn, const cJSON *req, bool stats)
{
	const cJSON *cursor = cJSON_GetObjectItemCaseSensitive(req, "cursor");
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(req, "id");
	struct page_ctx pc = { .d = d, .only = str_field(req, "topic"), .stats = stats };
	char err[256] = "", *text = NULL;
	struct rgapsd_topic *t;
	size_t len;
	int rc;

	if (cursor && !cJSON_IsString(cursor)) {
		reply_error(d, conn, req, -EPROTO, "'cursor' must be a string (a page's \"next\")");
		return;
	}
	rgapsd_client_identify(conn, &pc.id);
	/* A topic the client may not see is as absent as one that does not exist. */
	if (pc.only && (rgapsd_config_of(d, pc.only, &t), !t || !page_visible(&pc, pc.only))) {
		reply_error(d, conn, req, -ENOENT, "no topic '%.63s'", pc.only);
		return;
	}
	rc = rgapsd_page_write(stats ? stats_members : topics_members,
			       stats ? RGAPS_ARRAY_SIZE(stats_members) :
				       RGAPS_ARRAY_SIZE(topics_members),
			       &pc, cursor ? cursor->valuestring : NULL,
			       (cJSON_IsNumber(id) || cJSON_IsString(id)) ? id : NULL, RGAPS_FRAME_MAX,
			       &text, &len, err, sizeof(err));
	free(pc.sorted);
	if (rc) {
		reply_error(d, conn, req, rc, "%s", err[0] ? err : strerror(-rc));
		return;
	}
	if (rgapsd_conn_send(conn, text, len, NULL, 0) < 0)
		rgapsd_conn_close_after_send(conn);
	free(text);
}

/* ---------------------------------------------------------------- dispatch */

/* One JSON value and nothing after it but white space: trailing bytes are an error. */
static cJSON *parse_strict(const char *payload, size_t len)
{
	const char *end = NULL;
	cJSON *v;

	if (rgaps_json_nul_escape(payload, len) >= 0)
		return NULL; /* cJSON would cut the string at the NUL: refuse, never truncate */
	v = cJSON_ParseWithLengthOpts(payload, len, &end, 0);
	if (!v)
		return NULL;
	while (end && end < payload + len && (*end == ' ' || *end == '\t' || *end == '\n' ||
					      *end == '\r'))
		end++;
	if (!end || end != payload + len) {
		cJSON_Delete(v);
		return NULL;
	}
	return v;
}

void rgapsd_on_frame(void *ctx, struct rgapsd_conn *conn, const char *payload, size_t len)
{
	struct rgapsd *d = ctx;
	struct client *c = rgapsd_conn_get_data(conn);
	cJSON *req;
	const char *type;

	if (!c) {
		c = calloc(1, sizeof(*c));
		if (!c) {
			rgapsd_conn_close_after_send(conn);
			return;
		}
		c->d = d;
		c->conn = conn;
		rgapsd_conn_set_data(conn, c);
		d->connections++;
	}
	d->requests++;
	req = parse_strict(payload, len);
	if (!req) {
		reply_error(d, conn, NULL, -EBADMSG, "frame is not one valid JSON value");
		return;
	}
	if (!cJSON_IsObject(req)) {
		reply_error(d, conn, req, -EPROTO, "request must be a JSON object");
		goto out;
	}
	{
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(req, "id");

		if (cJSON_IsString(id) && strlen(id->valuestring) > REQUEST_ID_MAX) {
			reply_error(d, conn, NULL, -EINVAL, "'id' is longer than %d bytes",
				    REQUEST_ID_MAX);
			goto out;
		}
	}
	type = str_field(req, "type");
	if (!type) {
		reply_error(d, conn, req, -EPROTO, "request has no string 'type'");
		goto out;
	}
	if (strcmp(type, "hello") == 0)
		do_hello(d, conn, c, req);
	else if (strcmp(type, "attach") == 0)
		do_attach(d, conn, c, req);
	else if (strcmp(type, "mapped") == 0)
		do_mapped(d, conn, c, req);
	else if (strcmp(type, "sync") == 0)
		do_sync(d, conn, c, req);
	else if (strcmp(type, "detach") == 0)
		do_detach(d, conn, c, req);
	else if (strcmp(type, "topics") == 0)
		do_topics(d, conn, req, false);
	else if (strcmp(type, "stats") == 0)
		do_topics(d, conn, req, true);
	else
		reply_error(d, conn, req, -EOPNOTSUPP, "unknown request type '%.64s'", type);
out:
	cJSON_Delete(req);
}

void rgapsd_on_close(void *ctx, struct rgapsd_conn *conn)
{
	struct client *c = rgapsd_conn_get_data(conn);

	if (!c)
		return;
	if (c->role != CLIENT_NONE)
		rgaps_debug("connection %llu closed: reclaiming its %s slot on '%s'",
			    (unsigned long long)rgapsd_conn_id(conn),
			    c->role == CLIENT_SUB ? "subscriber" : "publisher", c->topic->cfg.name);
	detach(c);
	rgapsd_conn_set_data(conn, NULL);
	free(c);
}
