/*
 * The local control protocol of rgapsd (docs/PROTOCOL.md, "Local control"):
 * one JSON request per frame, one reply per request, in order. Requests:
 * hello, attach, detach, topics, stats. Every reply is {"ok":true,...} or
 * {"ok":false,"error":{"code","errno","message"}}, echoing the request's "id".
 * Bad input of any kind gets an error reply; only a broken frame (which makes
 * the stream unusable) also closes the connection.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/errors.h"
#include "../common/futex.h"
#include "../common/log.h"
#include "daemon.h"
#include "remote.h"
#include "rgaps/rgaps.h"
#include "rgaps_build_config.h"

enum client_role {
	CLIENT_NONE,
	CLIENT_PUB,
	CLIENT_SUB,
};

/* Per-connection state (rgapsd_conn_set_data). */
struct client {
	struct rgapsd *d;
	struct rgapsd_conn *conn;
	bool hello;
	enum client_role role;
	struct rgapsd_topic *topic;
	uint32_t slot;
	cJSON *pending_reply; /* publisher attach waiting for the peers' topic set-up */
};

static void send_json(struct rgapsd_conn *conn, cJSON *reply, const int *fds, int nfds)
{
	char *text = cJSON_PrintUnformatted(reply);

	if (!text) {
		rgaps_error("out of memory formatting a reply; closing connection %llu",
			    (unsigned long long)rgapsd_conn_id(conn));
		rgapsd_conn_close_after_send(conn);
		return;
	}
	if (rgapsd_conn_send(conn, text, strlen(text), fds, nfds) < 0)
		rgapsd_conn_close_after_send(conn);
	free(text);
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
	rgaps_info("connection %llu (pid %d): %s: %s", (unsigned long long)rgapsd_conn_id(conn),
		   (int)rgapsd_conn_cred(conn)->pid, rgaps__errcode_name(err), msg);
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
	if (c->role == CLIENT_SUB) {
		rgaps_topic_sub_close(&c->topic->t, c->slot);
		if (--c->topic->local_subs == 0)
			rgapsd_remote_subscribers_changed(c->d, c->topic);
	} else if (c->role == CLIENT_PUB) {
		rgaps_topic_pub_close(&c->topic->t, c->slot);
	}
	if (c->topic)
		c->topic->attachments--;
	c->role = CLIENT_NONE;
	c->topic = NULL;
}

/* The peers answered (or the wait timed out): complete a publisher's attach. */
static void attach_done(void *arg, int status)
{
	struct client *c = arg;
	struct rgapsd_topic *t = c->topic;
	cJSON *r = c->pending_reply;
	int fds[2] = { t->meta_fd, t->pool.fd };

	c->pending_reply = NULL;
	send_json(c->conn, r, fds, 2);
	cJSON_Delete(r);
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

static void do_attach(struct rgapsd *d, struct rgapsd_conn *conn, struct client *c,
		      const cJSON *req)
{
	const char *name = str_field(req, "topic"), *role = str_field(req, "role");
	const struct ucred *cred = rgapsd_conn_cred(conn);
	struct rgapsd_topic *t;
	char err[512];
	uint32_t slot;
	cJSON *r;
	int fds[2], rc;
	bool sub;

	if (!c->hello) {
		reply_error(d, conn, req, -EPROTO, "say hello (protocol version) before attach");
		return;
	}
	if (c->role != CLIENT_NONE) {
		reply_error(d, conn, req, -EEXIST, "this connection is attached to '%s' already",
			    c->topic->cfg.name);
		return;
	}
	if (!name || !rgaps_topic_name_valid(name)) {
		reply_error(d, conn, req, -EINVAL,
			    "bad topic name: 1-63 of [A-Za-z0-9._-], not starting with '.' or '-'");
		return;
	}
	if (!role || (strcmp(role, "pub") != 0 && strcmp(role, "sub") != 0)) {
		reply_error(d, conn, req, -EPROTO, "attach needs role \"pub\" or \"sub\"");
		return;
	}
	sub = role[0] == 's';
	rc = rgapsd__topic_get(d, name, &t, err, sizeof(err));
	if (rc) {
		reply_error(d, conn, req, rc, "topic '%s': %s", name, err);
		return;
	}
	if (!rgapsd__topic_allows(t, cred->uid, cred->gid)) {
		reply_error(d, conn, req, -EACCES, "uid %u gid %u is not allowed on topic '%s'",
			    (unsigned)cred->uid, (unsigned)cred->gid, name);
		return;
	}
	rc = sub ? rgaps_topic_sub_open(&t->t, rgapsd_conn_id(conn), cred->pid, &slot)
		 : rgaps_topic_pub_open(&t->t, rgapsd_conn_id(conn), cred->pid, &slot);
	if (rc) {
		reply_error(d, conn, req, rc, "topic '%s': no free %s slot (max %u)", name,
			    sub ? "subscriber" : "publisher",
			    sub ? t->cfg.max_subscribers : t->cfg.max_publishers);
		return;
	}
	c->role = sub ? CLIENT_SUB : CLIENT_PUB;
	c->topic = t;
	c->slot = slot;
	t->attachments++;

	r = reply_ok(req);
	cJSON_AddStringToObject(r, "topic", name);
	cJSON_AddNumberToObject(r, "slot", slot);
	cJSON_AddNumberToObject(r, "meta_size", (double)t->t.size);
	cJSON_AddNumberToObject(r, "pool_size", (double)t->pool.size);
	cJSON_AddStringToObject(r, "memory", t->mem->name);
	cJSON_AddNumberToObject(r, "device", t->pool.device);
	cJSON_AddNumberToObject(r, "mem_flags", t->pool.flags);
	rgaps_debug("pid %d attached to '%s' as %s slot %u", (int)cred->pid, name, role, slot);
	if (sub && t->local_subs++ == 0)
		rgapsd_remote_subscribers_changed(d, t);
	/* DESIGN.md 7: a publisher's attach completes once interested peers set the topic up. */
	if (!sub && rgapsd_remote_publisher_attach(d, t, attach_done, c)) {
		c->pending_reply = r;
		return;
	}
	fds[0] = t->meta_fd;
	fds[1] = t->pool.fd;
	send_json(conn, r, fds, 2);
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

static cJSON *topic_summary(struct rgapsd_topic *t, bool full)
{
	struct rgaps_topic_stats st;
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "name", t->cfg.name);
	cJSON_AddStringToObject(o, "memory", t->mem->name);
	if (rgaps_topic_get_stats(&t->t, &st) != 0)
		return o;
	cJSON_AddNumberToObject(o, "subscribers", st.nsubs);
	cJSON_AddNumberToObject(o, "publishers", st.npubs);
	cJSON_AddNumberToObject(o, "published", (double)st.c.published);
	cJSON_AddNumberToObject(o, "published_bytes", (double)st.c.published_bytes);
	cJSON_AddNumberToObject(o, "pool_size", (double)st.pool.pool_size);
	cJSON_AddNumberToObject(o, "pool_used", (double)st.pool.used_bytes);
	if (!full)
		return o;
	cJSON *rem = cJSON_AddObjectToObject(o, "from_peers");
	cJSON_AddNumberToObject(rem, "messages", (double)t->landed_msgs);
	cJSON_AddNumberToObject(rem, "bytes", (double)t->landed_bytes);
	cJSON_AddNumberToObject(rem, "refused", (double)t->refused_msgs);
	cJSON_AddNumberToObject(rem, "gaps", (double)t->landed_gaps);

	cJSON *pool = cJSON_AddObjectToObject(o, "pool");
	cJSON_AddNumberToObject(pool, "size", (double)st.pool.pool_size);
	cJSON_AddNumberToObject(pool, "used_bytes", (double)st.pool.used_bytes);
	cJSON_AddNumberToObject(pool, "free_bytes", (double)st.pool.free_bytes);
	cJSON_AddNumberToObject(pool, "largest_free", (double)st.pool.largest_free);
	cJSON_AddNumberToObject(pool, "used_blocks", (double)st.pool.used_blocks);
	cJSON_AddNumberToObject(pool, "fragmentation", st.pool.fragmentation);

	cJSON *q = cJSON_AddObjectToObject(o, "queue");
	cJSON_AddNumberToObject(q, "depth", t->cfg.queue_depth);
	cJSON_AddNumberToObject(q, "used", st.queue_used);
	cJSON_AddNumberToObject(q, "head_seq", (double)st.head_seq);
	cJSON_AddNumberToObject(q, "tail_seq", (double)st.tail_seq);

	cJSON *c = cJSON_AddObjectToObject(o, "counters");
#define C(f) cJSON_AddNumberToObject(c, #f, (double)st.c.f)
	C(loans);
	C(published);
	C(published_bytes);
	C(unrouted);
	C(cancelled);
	C(taken);
	C(released);
	C(retired);
	C(dropped);
	C(drops_total);
	C(full_waits);
	C(timeouts);
	C(reclaimed_holds);
	C(reclaimed_loans);
#undef C
	cJSON_AddNumberToObject(c, "journal_rollbacks", (double)st.journal_rollbacks);
	cJSON_AddNumberToObject(c, "journal_high_water", st.journal_high_water);

	{
		struct rgaps_lathist h = { 0 };

		rgaps_lathist_sum(&h, &t->t.hdr->latency);
		add_latency(o, &h, true);
	}

	cJSON *subs = cJSON_AddArrayToObject(o, "subscriber_slots");
	for (uint32_t i = 0; i < t->cfg.max_subscribers; i++) {
		struct rgaps_topic_sub *s = rgaps_topic_sub_at(&t->t, i);
		cJSON *so;

		if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != RGAPS_SLOT_ACTIVE)
			continue;
		/* Read without the lock (the slot's owner may be taking meanwhile): relaxed
		 * loads, and figures that may be one message apart, as statistics allow. */
		uint64_t next = __atomic_load_n(&s->next_seq, __ATOMIC_RELAXED);

		so = cJSON_CreateObject();
		cJSON_AddNumberToObject(so, "slot", i);
		cJSON_AddNumberToObject(so, "pid", __atomic_load_n(&s->pid, __ATOMIC_RELAXED));
		cJSON_AddNumberToObject(so, "next_seq", (double)next);
		cJSON_AddNumberToObject(so, "lag", (double)(st.head_seq > next ?
								    st.head_seq - next : 0));
		cJSON_AddNumberToObject(so, "taken",
					(double)__atomic_load_n(&s->taken, __ATOMIC_RELAXED));
		cJSON_AddNumberToObject(so, "drops",
					(double)__atomic_load_n(&s->drops, __ATOMIC_RELAXED));
		cJSON_AddNumberToObject(so, "holds", __atomic_load_n(&s->nholds, __ATOMIC_RELAXED));
		{
			struct rgaps_lathist h = { 0 };

			rgaps_lathist_sum(&h, rgaps_topic_sub_latency(&t->t, i));
			add_latency(so, &h, false);
		}
		cJSON_AddItemToArray(subs, so);
	}
	cJSON *pubs = cJSON_AddArrayToObject(o, "publisher_slots");
	for (uint32_t i = 0; i < t->cfg.max_publishers; i++) {
		struct rgaps_topic_pub *p = rgaps_topic_pub_at(&t->t, i);
		cJSON *po;

		if (__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) != RGAPS_SLOT_ACTIVE)
			continue;
		po = cJSON_CreateObject();
		cJSON_AddNumberToObject(po, "slot", i);
		cJSON_AddNumberToObject(po, "pid", __atomic_load_n(&p->pid, __ATOMIC_RELAXED));
		cJSON_AddNumberToObject(po, "published",
					(double)__atomic_load_n(&p->published, __ATOMIC_RELAXED));
		cJSON_AddNumberToObject(po, "loans", __atomic_load_n(&p->nloans, __ATOMIC_RELAXED));
		cJSON_AddItemToArray(pubs, po);
	}
	cJSON_AddItemToObject(o, "config", rgaps_topic_config_to_json(&t->cfg));
	return o;
}

static void do_topics(struct rgapsd *d, struct rgapsd_conn *conn, const cJSON *req, bool stats)
{
	const char *only = str_field(req, "topic");
	cJSON *r = reply_ok(req), *arr;
	bool found = !only;

	if (stats) {
		cJSON *dm = cJSON_AddObjectToObject(r, "daemon");

		cJSON_AddStringToObject(dm, "version", RGAPS_VERSION);
		cJSON_AddStringToObject(dm, "instance", d->instance);
		cJSON_AddNumberToObject(dm, "uptime_s",
					(double)(rgaps_now_ns(CLOCK_MONOTONIC) - d->start_ns) / 1e9);
		cJSON_AddNumberToObject(dm, "connections", rgapsd_control_nconns(d->ctl));
		cJSON_AddNumberToObject(dm, "connections_total", (double)d->connections);
		cJSON_AddNumberToObject(dm, "requests", (double)d->requests);
		cJSON_AddNumberToObject(dm, "request_errors", (double)d->request_errors);
		cJSON_AddNumberToObject(dm, "topics", d->ntopics);
	}
	arr = cJSON_AddArrayToObject(r, "topics");
	for (struct rgapsd_topic *t = d->topics; t; t = t->next) {
		if (only && strcmp(only, t->cfg.name) != 0)
			continue;
		found = true;
		cJSON_AddItemToArray(arr, topic_summary(t, stats));
	}
	if (!found) {
		cJSON_Delete(r);
		reply_error(d, conn, req, -ENOENT, "no topic '%s'", only);
		return;
	}
	if (stats)
		rgapsd_remote_stats(d, r, only);
	send_json(conn, r, NULL, 0);
	cJSON_Delete(r);
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

void rgapsd__on_frame(void *ctx, struct rgapsd_conn *conn, const char *payload, size_t len)
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
	type = str_field(req, "type");
	if (!type) {
		reply_error(d, conn, req, -EPROTO, "request has no string 'type'");
		goto out;
	}
	if (strcmp(type, "hello") == 0)
		do_hello(d, conn, c, req);
	else if (strcmp(type, "attach") == 0)
		do_attach(d, conn, c, req);
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

void rgapsd__on_close(void *ctx, struct rgapsd_conn *conn)
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
