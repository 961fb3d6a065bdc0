/*
 * The membership in etcd (../membership.h): one state machine, driven by
 * ms_enter(), that takes a lease, lists the hosts under the prefix, registers
 * this daemon, then watches from the listed revision on; in MS_LIVE the
 * lease is renewed every third of its TTL. Any step that no member answers
 * leads to MS_UNREACHABLE (back-off, then the sequence again from the lease),
 * and what was listed is reconciled with what the peer manager was told.
 *
 * Order matters for the daemons' first sessions: the hosts found by the list
 * are handed to the peer manager only once our own record is in etcd, so that
 * a daemon we dial has had the chance to learn of us (it refuses names it does
 * not know); a refusal that comes anyway is asked again at once (peers.c).
 */
#include "../membership.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "../../common/log.h"
#include "../../common/util.h"
#include "../config_file.h"
#include "../peers/peers.h"
#include "../secret.h"
#include "etcd.h"

#define MS_BACKOFF_MIN_MS 100
#define MS_BACKOFF_MAX_MS 5000
#define MS_PUT_DELAY_MS 20   /* changes of our record this close together make one put */
#define MS_STOP_MAX_MS 1000  /* the lease's revocation at stop waits at most this */
#define MS_PASSWORD_MAX 1024 /* bytes of an etcd password file */

enum ms_state {
	MS_GRANT,	/* asking for a lease */
	MS_RENEW,	/* after an outage: is the lease we hold still alive? */
	MS_LIST,	/* reading every host under the prefix */
	MS_REGISTER,	/* putting our record under our lease; then the listed hosts are applied */
	MS_WATCH,	/* watching the prefix from the list's revision on: waiting for "created" */
	MS_LIVE,	/* watching; the lease renewed every third of its TTL */
	MS_UNREACHABLE, /* etcd did not answer (or refused): all kept, retried with back-off */
	MS_STOPPING,	/* revoking the lease before the client closes */
	MS_STOPPED,	/* closed; freed once the handles are */
	MS_NUM_STATES
};

static const char *const ms_state_names[MS_NUM_STATES] = {
	"grant", "renew", "list", "register", "watch", "live", "unreachable", "stopping", "stopped",
};

/* A daemon found under the prefix (not us). */
struct ms_host {
	TAILQ_ENTRY(ms_host) link;
	struct rgapsd_host_record rec;
	bool seen;		/* in the list being reconciled */
	uint64_t missing_since; /* loop ms its key went while its session was up; 0: there */
};

struct rgapsd_membership {
	uv_loop_t *loop;
	struct rgapsd_peers *pm;
	struct rgapsd_etcd *etcd;
	char prefix[RGAPS_CFG_PREFIX_MAX];
	char dir[RGAPS_CFG_PREFIX_MAX + 16]; /* PREFIX/hosts/ */
	char dir_end[RGAPS_CFG_PREFIX_MAX + 16];
	char key[RGAPS_CFG_PREFIX_MAX + 16 + MS_NAME_MAX + 1]; /* ours */
	uint32_t ttl_s;
	struct rgapsd_host_record self;
	enum ms_state state;
	uint64_t trans[MS_NUM_STATES][MS_NUM_STATES];
	/* etcd's side */
	int64_t lease;		       /* 0: none */
	int64_t ttl_left;	       /* as the last renewal said */
	int64_t revision;	       /* the newest revision seen */
	struct rgapsd_etcd_range list; /* MS_REGISTER: what MS_LIST found, applied once we are in */
	TAILQ_HEAD(, ms_host) hosts;
	uint32_t nhosts;
	/* requests in flight */
	struct rgapsd_etcd_req *step;  /* the state's own (grant, renew, list, register, revoke) */
	struct rgapsd_etcd_req *watch; /* MS_WATCH, MS_LIVE */
	struct rgapsd_etcd_req *renew; /* MS_LIVE */
	struct rgapsd_etcd_req *put;   /* MS_LIVE: our record again */
	uint32_t watch_ends;	       /* watches that ended in a row, none created */
	uint32_t timeout_ms;
	bool put_again;	      /* it changed while a put was in flight */
	uv_timer_t timer;     /* back-off; renewals; the stop's bound */
	uv_timer_t put_timer; /* MS_PUT_DELAY_MS after a change */
	unsigned handles;
	uint32_t backoff_ms;
	/* what happened, for stats and the log */
	uint64_t joined, left, refused_records, reconciliations, outages, watch_events;
	uint64_t returned; /* hosts whose key came back while their session was up */
	uint32_t nmissing;
	uint64_t unreachable_since; /* loop ms; 0: reachable */
	uint64_t live_once;	    /* MS_LIVE was reached once */
	uint64_t away_joined, away_left;
	char last_error[320];
	struct rgaps_ratelimit log_rl; /* records refused: anyone who may write etcd causes them */
};

static void ms_enter(struct rgapsd_membership *m, enum ms_state s);
static void watch_again(struct rgapsd_membership *m, const char *why);
static void ms_failed(struct rgapsd_membership *m, int status, const char *what, const char *why);

/* ---- the hosts ------------------------------------------------------------------------------ */

static struct ms_host *host_find(struct rgapsd_membership *m, const char *name)
{
	struct ms_host *h;

	TAILQ_FOREACH(h, &m->hosts, link)
		if (strcmp(h->rec.name, name) == 0)
			return h;
	return NULL;
}

static void host_drop(struct rgapsd_membership *m, struct ms_host *h, const char *why)
{
	TAILQ_REMOVE(&m->hosts, h, link);
	m->nhosts--;
	m->nmissing -= h->missing_since != 0;
	m->left++;
	if (m->unreachable_since || m->state == MS_REGISTER)
		m->away_left++;
	rgaps_info("membership: %s left: %s", h->rec.name, why);
	rgapsd_peers_drop(m->pm, h->rec.name, RGAPSD_PEER_DISCOVERED, why);
	rgapsd_host_record_free(&h->rec);
	free(h);
}

/* How long a host whose key went keeps its live session (see host_gone). */
static uint64_t grace_ms(const struct rgapsd_membership *m)
{
	return (uint64_t)m->ttl_s * 1000u + 2u * MS_BACKOFF_MAX_MS;
}

static bool host_session_up(struct rgapsd_membership *m, const struct ms_host *h)
{
	struct rgapsd_peer *p = rgapsd_peers_find(m->pm, h->rec.name);

	return p && rgapsd_peer_is_up(p);
}

/*
 * The host's key went. Its session down: it is dropped at once (a daemon that died or
 * stopped). Its session up: the daemon is alive and lost its lease while etcd was away
 * (all of us do, in an outage longer than the lease): it keeps its session for
 * grace_ms() to register again; a session that goes down meanwhile, or a grace that
 * ends, drops it (host_sweep).
 */
static void host_gone(struct rgapsd_membership *m, struct ms_host *h, const char *why)
{
	if (!host_session_up(m, h)) {
		host_drop(m, h, why);
		return;
	}
	if (h->missing_since)
		return;
	h->missing_since = uv_now(m->loop) ? uv_now(m->loop) : 1;
	m->nmissing++;
	rgaps_info("membership: %s: %s, but its session is up: it has %.0f s to register again",
		   h->rec.name, why, (double)grace_ms(m) / 1000.0);
}

/* Drop the hosts whose key went and whose session went down or whose grace ended. */
static void host_sweep(struct rgapsd_membership *m)
{
	uint64_t now = uv_now(m->loop);
	struct ms_host *h, *next;

	for (h = TAILQ_FIRST(&m->hosts); m->nmissing && h; h = next) {
		next = TAILQ_NEXT(h, link);
		if (!h->missing_since)
			continue;
		if (!host_session_up(m, h))
			host_drop(m, h, "its key went and its session is down");
		else if (now - h->missing_since >= grace_ms(m))
			host_drop(m, h, "its key went and it did not register again in time");
	}
}

/* A record found under name (its key's NAME): a new host, or what a known one says now. */
static void host_put(struct rgapsd_membership *m, const char *name, const char *value, size_t len,
		     int64_t rev)
{
	struct rgapsd_host_record rec;
	struct ms_host *h;
	char why[256];
	int e;

	if (strcmp(name, m->self.name) == 0)
		return; /* ours */
	e = rgapsd_host_record_decode(value, len, &rec, why, sizeof(why));
	if (e == 0 && strcmp(rec.name, name) != 0) {
		snprintf(why, sizeof(why), "it names itself %s", rec.name);
		rgapsd_host_record_free(&rec);
		e = -EINVAL;
	}
	if (e) {
		m->refused_records++;
		rgaps_log_limited(&m->log_rl, RGAPS_LOG_WARN,
				  "membership: the record of %s (revision %" PRId64 ") is refused: "
				  "%s",
				  name, rev, why);
		return;
	}
	h = host_find(m, name);
	if (h) {
		rgapsd_host_record_free(&h->rec);
		h->rec = rec;
		h->seen = true;
		if (h->missing_since) {
			h->missing_since = 0;
			m->nmissing--;
			m->returned++;
			rgaps_info("membership: %s registered again", name);
		}
		return;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		rgapsd_host_record_free(&rec);
		rgaps_error("membership: out of memory for host %s", name);
		return;
	}
	h->rec = rec;
	h->seen = true;
	e = rgapsd_peers_add(m->pm, name, RGAPSD_PEER_DISCOVERED, strcmp(m->self.name, name) < 0);
	if (e) {
		rgaps_warn("membership: host %s not added as a peer: %s", name, strerror(-e));
		rgapsd_host_record_free(&h->rec);
		free(h);
		return;
	}
	TAILQ_INSERT_TAIL(&m->hosts, h, link);
	m->nhosts++;
	m->joined++;
	if (m->unreachable_since || m->state == MS_REGISTER)
		m->away_joined++;
	rgaps_info("membership: %s joined (%s, %s%s)", name,
		   h->rec.hostname[0] ? h->rec.hostname : "no host name",
		   h->rec.version[0] ? "rgaps " : "", h->rec.version);
}

/* One key: ours, another host's, or something else under the prefix (skipped). */
static void key_put(struct rgapsd_membership *m, const struct rgapsd_etcd_kv *kv)
{
	char name[MS_NAME_MAX + 1];

	if (rgapsd_membership_key_name(m->dir, kv->key, kv->key_len, name, sizeof(name)) != 0) {
		m->refused_records++;
		rgaps_log_limited(&m->log_rl, RGAPS_LOG_WARN,
				  "membership: a key under %s that names no daemon (HOST:PORT) is "
				  "skipped",
				  m->dir);
		return;
	}
	host_put(m, name, kv->value, kv->value_len, kv->mod_revision);
}

/* The list says who is there: add what is new, drop who is not there any more. */
static void reconcile(struct rgapsd_membership *m)
{
	struct ms_host *h, *next;

	TAILQ_FOREACH(h, &m->hosts, link)
		h->seen = false;
	for (size_t i = 0; i < m->list.n; i++)
		key_put(m, &m->list.kvs[i]);
	for (h = TAILQ_FIRST(&m->hosts); h; h = next) {
		next = TAILQ_NEXT(h, link);
		if (!h->seen)
			host_gone(m, h, "its key is no longer in etcd (its lease expired)");
	}
	m->revision = RGAPS_MAX(m->revision, m->list.revision);
	m->reconciliations++;
	rgapsd_etcd_range_free(&m->list);
}

/* ---- requests -------------------------------------------------------------------------------- */

/* A JSON body of name/value pairs (values: strings), NULL when out of memory. */
static char *body_of(const char *const *kv)
{
	cJSON *o = cJSON_CreateObject();
	char *text = NULL;
	bool ok = o != NULL;

	for (; ok && kv[0]; kv += 2)
		ok = cJSON_AddStringToObject(o, kv[0], kv[1]) != NULL;
	if (ok)
		text = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return text;
}

static int call(struct rgapsd_membership *m, const char *path, char *body, rgapsd_etcd_done_fn done,
		struct rgapsd_etcd_req **req_p)
{
	int e = body ? rgapsd_etcd_call(m->etcd, path, body, done, m, req_p) : -ENOMEM;

	free(body);
	return e;
}

static void lease_text(int64_t v, char *buf, size_t len)
{
	snprintf(buf, len, "%" PRId64, v);
}

/* ---- the steps ------------------------------------------------------------------------------ */

static void on_grant(void *arg, int status, int code, const cJSON *reply, const char *why)
{
	struct rgapsd_membership *m = arg;
	char err[256];

	m->step = NULL;
	if (status == 0 &&
	    rgapsd_etcd_lease_grant_parse(reply, &m->lease, &m->ttl_left, err, sizeof(err)))
		status = -EPROTO, why = err;
	if (status) {
		ms_failed(m, status, "asking for a lease", why);
		return;
	}
	rgaps_debug("membership: lease %016" PRIx64 " of %" PRId64 " s", (uint64_t)m->lease,
		    m->ttl_left);
	ms_enter(m, MS_LIST);
}

/*
 * What a renewal of the lease said: 1, it lives (ttl_left is what is left of it); 0, etcd
 * no longer has it (expired, or never heard of: "requested lease not found"), logged;
 * -1, no usable answer: the membership has failed (ms_failed).
 */
static int renewed(struct rgapsd_membership *m, int status, const cJSON *reply, const char *why)
{
	int64_t ttl = 0;
	char err[256];

	if (status == 0 && rgapsd_etcd_keepalive_parse(reply, &ttl, err, sizeof(err)))
		status = -EPROTO, why = err;
	if (status == -EREMOTEIO || (status == 0 && ttl == 0)) {
		rgaps_warn("membership: etcd no longer has our lease (%s); registering again",
			   status ? why : "it expired");
		m->lease = 0;
		return 0;
	}
	if (status) {
		ms_failed(m, status, "renewing the lease", why);
		return -1;
	}
	m->ttl_left = ttl;
	return 1;
}

/* MS_RENEW: after an outage, the lease we hold lives on, or a new one. */
static void on_renew_step(void *arg, int status, int code, const cJSON *reply, const char *why)
{
	struct rgapsd_membership *m = arg;
	int r;

	m->step = NULL;
	r = renewed(m, status, reply, why);
	if (r >= 0)
		ms_enter(m, r ? MS_LIST : MS_GRANT);
}

static void on_list(void *arg, int status, int code, const cJSON *reply, const char *why)
{
	struct rgapsd_membership *m = arg;
	char err[256];

	m->step = NULL;
	rgapsd_etcd_range_free(&m->list);
	if (status == 0 && rgapsd_etcd_range_parse(reply, &m->list, err, sizeof(err))) {
		rgapsd_etcd_range_free(&m->list);
		status = -EPROTO, why = err;
	}
	if (status == 0 && m->list.more) {
		rgapsd_etcd_range_free(&m->list);
		status = -EPROTO, why = "etcd listed only part of the hosts";
	}
	if (status) {
		ms_failed(m, status, "listing the hosts", why);
		return;
	}
	ms_enter(m, MS_REGISTER);
}

static void on_register(void *arg, int status, int code, const cJSON *reply, const char *why)
{
	struct rgapsd_membership *m = arg;

	m->step = NULL;
	if (status) {
		if (status == -EREMOTEIO && code == 5) /* NotFound: the lease expired meanwhile */
			m->lease = 0;
		ms_failed(m, status, "registering this daemon", why);
		return;
	}
	reconcile(m);
	ms_enter(m, MS_WATCH);
}

static void on_revoke(void *arg, int status, int code, const cJSON *reply, const char *why)
{
	struct rgapsd_membership *m = arg;

	m->step = NULL;
	if (status)
		rgaps_info("membership: the lease was not revoked (%s): the others drop this "
			   "daemon when it expires",
			   why);
	ms_enter(m, MS_STOPPED);
}

/* ---- the watch ------------------------------------------------------------------------------ */

static void on_watch_msg(void *arg, const cJSON *msg)
{
	struct rgapsd_membership *m = arg;
	struct rgapsd_etcd_watch_msg w;
	char err[256], name[MS_NAME_MAX + 1];
	int code = 0;

	if (rgapsd_etcd_reply_error(msg, &code, err, sizeof(err))) {
		/* The member cannot serve the watch ("no leader"): another one may. */
		rgapsd_etcd_cancel(m->watch);
		m->watch = NULL;
		rgapsd_etcd_next_member(m->etcd, err);
		watch_again(m, err);
		return;
	}
	if (rgapsd_etcd_watch_parse(msg, &w, err, sizeof(err))) {
		rgapsd_etcd_watch_free(&w);
		rgapsd_etcd_cancel(m->watch);
		m->watch = NULL;
		ms_failed(m, -EPROTO, "watching the hosts", err);
		return;
	}
	m->revision = RGAPS_MAX(m->revision, w.revision);
	for (size_t i = 0; i < w.nevents; i++) {
		const struct rgapsd_etcd_kv *kv = &w.events[i].kv;
		struct ms_host *h;

		m->watch_events++;
		if (!w.events[i].deleted) {
			key_put(m, kv);
			continue;
		}
		if (rgapsd_membership_key_name(m->dir, kv->key, kv->key_len, name, sizeof(name)) !=
		    0)
			continue;
		if (strcmp(name, m->self.name) == 0) {
			/* Our key went: our lease expired, or someone deleted it. Again. */
			rgaps_warn("membership: our key was deleted from etcd; registering again");
			rgapsd_etcd_watch_free(&w);
			rgapsd_etcd_cancel(m->watch);
			m->watch = NULL;
			ms_enter(m, MS_RENEW);
			return;
		}
		h = host_find(m, name);
		if (h)
			host_gone(m, h, "its key was deleted (its lease expired, or it stopped)");
	}
	if (w.canceled) {
		snprintf(err, sizeof(err), "%s%s",
			 w.compact_revision ? "etcd compacted the revisions the watch needed"
					    : "etcd ended the watch",
			 w.reason[0] ? w.reason : "");
		rgapsd_etcd_watch_free(&w);
		rgapsd_etcd_cancel(m->watch);
		m->watch = NULL;
		rgaps_info("membership: %s; listing the hosts again", err);
		ms_enter(m, MS_LIST);
		return;
	}
	if (w.created) {
		m->watch_ends = 0;
		if (m->state == MS_WATCH)
			ms_enter(m, MS_LIVE);
	}
	rgapsd_etcd_watch_free(&w);
}

static void on_watch_end(void *arg, int status, int code, const cJSON *reply, const char *why)
{
	struct rgapsd_membership *m = arg;

	m->watch = NULL;
	watch_again(m, why);
}

/*
 * The watch ended (its member died, lost its leader, closed the stream): a new one from
 * the newest revision seen, at the member the client goes to now; nothing is missed in
 * between (etcd keeps the history, and says when it compacted it away: list again then).
 * Ends in a row, as many as there are members, with no watch set up: etcd is unusable.
 */
static void watch_again(struct rgapsd_membership *m, const char *why)
{
	if (m->state != MS_WATCH && m->state != MS_LIVE)
		return;
	if (++m->watch_ends > rgapsd_etcd_members(m->etcd)) {
		ms_failed(m, -ECONNRESET, "watching the hosts", why);
		return;
	}
	rgaps_info("membership: the watch ended (%s); watching again from revision %" PRId64, why,
		   m->revision + 1);
	ms_enter(m, MS_WATCH);
}

static int watch_start(struct rgapsd_membership *m)
{
	cJSON *o = cJSON_CreateObject(),
	      *c = o ? cJSON_AddObjectToObject(o, "create_request") : NULL;
	char *k = rgapsd_etcd_b64_encode(m->dir, strlen(m->dir));
	char *end = rgapsd_etcd_b64_encode(m->dir_end, strlen(m->dir_end));
	char rev[24], *body = NULL;
	int e = -ENOMEM;

	lease_text(m->revision + 1, rev, sizeof(rev));
	if (c && k && end && cJSON_AddStringToObject(c, "key", k) &&
	    cJSON_AddStringToObject(c, "range_end", end) &&
	    cJSON_AddStringToObject(c, "start_revision", rev))
		body = cJSON_PrintUnformatted(o);
	if (body)
		e = rgapsd_etcd_watch(m->etcd, body, on_watch_msg, on_watch_end, m, &m->watch);
	cJSON_Delete(o);
	free(k);
	free(end);
	free(body);
	return e;
}

/* ---- renewals and puts while live --------------------------------------------------------- */

static void on_timer(uv_timer_t *t);

static void renew_arm(struct rgapsd_membership *m)
{
	uv_timer_start(&m->timer, on_timer, RGAPS_MAX(m->ttl_s * 1000u / 3, 500u), 0);
}

/* A renewal while watching (MS_WATCH, MS_LIVE). */
static void on_renew(void *arg, int status, int code, const cJSON *reply, const char *why)
{
	struct rgapsd_membership *m = arg;
	int r;

	m->renew = NULL;
	r = renewed(m, status, reply, why);
	if (r == 0) {
		rgapsd_etcd_cancel(m->watch);
		m->watch = NULL;
		ms_enter(m, MS_GRANT);
	} else if (r > 0 && m->state == MS_LIVE) {
		renew_arm(m);
		host_sweep(m);
	}
}

static char *put_body(struct rgapsd_membership *m)
{
	char *rec = rgapsd_host_record_encode(&m->self),
	     *k = rgapsd_etcd_b64_encode(m->key, strlen(m->key));
	char *v = rec ? rgapsd_etcd_b64_encode(rec, strlen(rec)) : NULL, lease[24], *body = NULL;

	lease_text(m->lease, lease, sizeof(lease));
	if (k && v)
		body = body_of((const char *const[]){ "key", k, "value", v, "lease", lease, NULL });
	free(rec);
	free(k);
	free(v);
	return body;
}

static void put_live(struct rgapsd_membership *m);

static void on_put(void *arg, int status, int code, const cJSON *reply, const char *why)
{
	struct rgapsd_membership *m = arg;

	m->put = NULL;
	if (status == -EREMOTEIO && code == 5) { /* our lease is gone: the renewal says so too */
		m->lease = 0;
		rgapsd_etcd_cancel(m->watch);
		m->watch = NULL;
		ms_enter(m, MS_GRANT);
		return;
	}
	if (status) {
		ms_failed(m, status, "putting our record", why);
		return;
	}
	if (m->put_again)
		put_live(m);
}

static void put_live(struct rgapsd_membership *m)
{
	int e;

	m->put_again = false;
	e = call(m, "/v3/kv/put", put_body(m), on_put, &m->put);
	if (e)
		ms_failed(m, e, "putting our record", strerror(-e));
}

static void on_put_timer(uv_timer_t *t)
{
	struct rgapsd_membership *m = t->data;

	if (m->state != MS_LIVE)
		return; /* MS_REGISTER puts the newest record anyway */
	if (m->put)
		m->put_again = true;
	else
		put_live(m);
}

/* ---- the driver ----------------------------------------------------------------------------- */

static void cancel_all(struct rgapsd_membership *m)
{
	rgapsd_etcd_cancel(m->step);
	rgapsd_etcd_cancel(m->watch);
	rgapsd_etcd_cancel(m->renew);
	rgapsd_etcd_cancel(m->put);
	m->step = m->watch = m->renew = m->put = NULL;
	uv_timer_stop(&m->timer);
}

/* A step failed. Unreachable members, refusals and bad answers alike: back off, try again. */
static void ms_failed(struct rgapsd_membership *m, int status, const char *what, const char *why)
{
	if (m->state >= MS_UNREACHABLE)
		return;
	snprintf(m->last_error, sizeof(m->last_error), "%s: %s", what,
		 why ? why : strerror(-status));
	ms_enter(m, MS_UNREACHABLE);
}

static void on_handle_closed(uv_handle_t *h)
{
	struct rgapsd_membership *m = h->data;
	struct ms_host *host;

	if (--m->handles)
		return;
	while ((host = TAILQ_FIRST(&m->hosts))) {
		TAILQ_REMOVE(&m->hosts, host, link);
		rgapsd_host_record_free(&host->rec);
		free(host);
	}
	rgapsd_etcd_range_free(&m->list);
	rgapsd_host_record_free(&m->self);
	free(m);
}

static uint32_t jitter(uint32_t d)
{
	return d - d / 4 + randombytes_uniform(d / 2 + 1);
}

/* Leave the state we are in for s, and start what s does. */
static void ms_enter(struct rgapsd_membership *m, enum ms_state s)
{
	enum ms_state prev = m->state;
	uint64_t now = uv_now(m->loop);
	char body[64];
	int e = 0;

	m->trans[prev][s]++;
	m->state = s;
	rgaps_debug("membership: %s -> %s", ms_state_names[prev], ms_state_names[s]);
	switch (s) {
	case MS_GRANT:
		m->lease = 0;
		snprintf(body, sizeof(body), "{\"TTL\":\"%u\"}", m->ttl_s);
		e = call(m, "/v3/lease/grant", strdup(body), on_grant, &m->step);
		break;
	case MS_RENEW:
		snprintf(body, sizeof(body), "{\"ID\":\"%" PRId64 "\"}", m->lease);
		e = call(m, "/v3/lease/keepalive", strdup(body), on_renew_step, &m->step);
		break;
	case MS_LIST: {
		char *k = rgapsd_etcd_b64_encode(m->dir, strlen(m->dir));
		char *end = rgapsd_etcd_b64_encode(m->dir_end, strlen(m->dir_end));

		e = call(m, "/v3/kv/range",
			 k && end ? body_of((const char *const[]){ "key", k, "range_end", end,
								   NULL })
				  : NULL,
			 on_list, &m->step);
		free(k);
		free(end);
		break;
	}
	case MS_REGISTER:
		e = call(m, "/v3/kv/put", put_body(m), on_register, &m->step);
		break;
	case MS_WATCH:
		/* Renewals go on meanwhile: one that a hung member does not answer moves the
		 * client to the next member, and ends a watch left hanging there. */
		if (!uv_is_active((uv_handle_t *)&m->timer))
			uv_timer_start(&m->timer, on_timer, m->timeout_ms, 0);
		e = watch_start(m);
		break;
	case MS_LIVE:
		m->backoff_ms = MS_BACKOFF_MIN_MS;
		if (m->unreachable_since) {
			rgaps_info(
				"membership: etcd answers again after %.1f s (%s); %u hosts: %llu "
				"joined and %llu left meanwhile",
				(double)(now - m->unreachable_since) / 1000.0,
				rgapsd_etcd_member(m->etcd), m->nhosts,
				(unsigned long long)m->away_joined,
				(unsigned long long)m->away_left);
			m->unreachable_since = 0;
		} else if (!m->live_once) {
			rgaps_info("membership: registered as %s under %s in etcd (%s), %u other "
				   "hosts",
				   m->self.name, m->prefix, rgapsd_etcd_member(m->etcd), m->nhosts);
		}
		m->live_once = 1;
		m->away_joined = m->away_left = 0;
		m->last_error[0] = '\0';
		renew_arm(m);
		if (m->put_again) /* changed while we were registering */
			on_put_timer(&m->put_timer);
		break;
	case MS_UNREACHABLE:
		cancel_all(m);
		if (!m->unreachable_since) {
			m->unreachable_since = now ? now : 1;
			m->outages++;
			m->away_joined = m->away_left = 0;
			rgaps_warn(
				"membership: etcd unusable (%s); keeping every session and topic, "
				"retrying with back-off",
				m->last_error);
		} else {
			rgaps_debug("membership: still unusable: %s", m->last_error);
		}
		uv_timer_start(&m->timer, on_timer, jitter(m->backoff_ms), 0);
		m->backoff_ms = RGAPS_MIN(m->backoff_ms * 2, (uint32_t)MS_BACKOFF_MAX_MS);
		break;
	case MS_STOPPING:
		cancel_all(m);
		snprintf(body, sizeof(body), "{\"ID\":\"%" PRId64 "\"}", m->lease);
		e = call(m, "/v3/kv/lease/revoke", strdup(body), on_revoke, &m->step);
		if (!e)
			uv_timer_start(&m->timer, on_timer, MS_STOP_MAX_MS, 0);
		break;
	case MS_STOPPED:
		cancel_all(m);
		rgapsd_etcd_close(m->etcd);
		m->etcd = NULL;
		uv_close((uv_handle_t *)&m->timer, on_handle_closed);
		uv_close((uv_handle_t *)&m->put_timer, on_handle_closed);
		break;
	case MS_NUM_STATES:
		break;
	}
	if (e && s == MS_STOPPING)
		ms_enter(m, MS_STOPPED);
	else if (e)
		ms_failed(m, e, ms_state_names[s], strerror(-e));
}

static void on_timer(uv_timer_t *t)
{
	struct rgapsd_membership *m = t->data;
	char body[64];
	int e;

	switch (m->state) {
	case MS_UNREACHABLE:
		ms_enter(m, m->lease ? MS_RENEW : MS_GRANT);
		break;
	case MS_WATCH:
	case MS_LIVE:
		snprintf(body, sizeof(body), "{\"ID\":\"%" PRId64 "\"}", m->lease);
		e = m->renew ? 0
			     : call(m, "/v3/lease/keepalive", strdup(body), on_renew, &m->renew);
		if (e)
			ms_failed(m, e, "renewing the lease", strerror(-e));
		else if (m->state == MS_WATCH)
			uv_timer_start(&m->timer, on_timer, m->timeout_ms, 0);
		break;
	case MS_STOPPING:
		rgaps_info("membership: etcd did not answer the lease's revocation within %d ms: "
			   "the others drop this daemon when it expires",
			   MS_STOP_MAX_MS);
		ms_enter(m, MS_STOPPED);
		break;
	default:
		break;
	}
}

/* ---- start, update, stop, stats ------------------------------------------------------------- */

static int record_copy(struct rgapsd_host_record *dst, const struct rgapsd_host_record *src)
{
	*dst = *src;
	dst->topics = NULL;
	if (src->ntopics) {
		dst->topics = malloc(src->ntopics * sizeof(*dst->topics));
		if (!dst->topics) {
			dst->ntopics = 0;
			return -ENOMEM;
		}
		memcpy(dst->topics, src->topics, src->ntopics * sizeof(*dst->topics));
	}
	return 0;
}

/* The first line of the password file, in guarded memory (NULL: none configured). */
static int read_password(const struct rgapsd_discovery_config *cfg, char **pw_p)
{
	uint8_t buf[MS_PASSWORD_MAX + 1];
	char err[512];
	int n;

	*pw_p = NULL;
	if (!cfg->username[0])
		return 0;
	n = rgapsd_secret_read(cfg->password_file, "etcd password file", buf, 1, MS_PASSWORD_MAX,
			       err, sizeof(err));
	if (n < 0) {
		rgaps_error("membership: %s", err);
		return n;
	}
	buf[n] = '\0';
	buf[strcspn((char *)buf, "\r\n")] = '\0';
	*pw_p = sodium_malloc(strlen((char *)buf) + 1);
	if (*pw_p)
		memcpy(*pw_p, buf, strlen((char *)buf) + 1);
	sodium_memzero(buf, sizeof(buf));
	return *pw_p ? 0 : -ENOMEM;
}

int rgapsd_membership_start(uv_loop_t *loop, const struct rgapsd_discovery_config *cfg,
			    struct rgapsd_peers *pm, const struct rgapsd_host_record *self,
			    struct rgapsd_membership **m_p)
{
	const char *eps[RGAPS_CFG_MAX_ENDPOINTS];
	struct rgapsd_etcd_config ec = { 0 };
	struct rgapsd_membership *m;
	char err[512], *password = NULL;
	int e;

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->loop = loop;
	m->pm = pm;
	m->ttl_s = cfg->lease_ttl_s;
	m->timeout_ms = cfg->timeout_ms;
	m->backoff_ms = MS_BACKOFF_MIN_MS;
	TAILQ_INIT(&m->hosts);
	snprintf(m->prefix, sizeof(m->prefix), "%s", cfg->prefix);
	if (rgapsd_membership_hosts_dir(m->prefix, m->dir, sizeof(m->dir)) ||
	    rgapsd_etcd_range_end(m->dir, m->dir_end, sizeof(m->dir_end)) ||
	    (size_t)snprintf(m->key, sizeof(m->key), "%s%s", m->dir, self->name) >=
		    sizeof(m->key)) {
		rgaps_error("membership: prefix %s: the keys under it are too long", cfg->prefix);
		free(m);
		return -ENAMETOOLONG;
	}
	e = record_copy(&m->self, self);
	if (!e)
		e = read_password(cfg, &password);
	if (e)
		goto err_free;
	for (uint32_t i = 0; i < cfg->nendpoints; i++)
		eps[i] = cfg->endpoints[i];
	ec.endpoints = eps;
	ec.nendpoints = cfg->nendpoints;
	ec.tls_ca = cfg->tls_ca;
	ec.tls_cert = cfg->tls_cert;
	ec.tls_key = cfg->tls_key;
	ec.username = cfg->username;
	ec.password = password;
	ec.timeout_ms = cfg->timeout_ms;
	e = rgapsd_etcd_open(loop, &ec, &m->etcd, err, sizeof(err));
	if (password)
		sodium_free(password);
	if (e) {
		rgaps_error("membership: %s", err);
		goto err_free;
	}
	rgaps_require(uv_timer_init(loop, &m->timer) == 0);
	rgaps_require(uv_timer_init(loop, &m->put_timer) == 0);
	m->timer.data = m->put_timer.data = m;
	m->handles = 2;
	rgaps_info("membership: etcd at %s%s, prefix %s, lease %u s", cfg->endpoints[0],
		   cfg->nendpoints > 1 ? " and more" : "", m->prefix, m->ttl_s);
	m->state = MS_GRANT;
	ms_enter(m, MS_GRANT);
	*m_p = m;
	return 0;

err_free:
	rgapsd_host_record_free(&m->self);
	free(m);
	return e;
}

void rgapsd_membership_update(struct rgapsd_membership *m, const struct rgapsd_host_record *self)
{
	struct rgapsd_host_record rec;

	if (!m || m->state >= MS_STOPPING || record_copy(&rec, self))
		return;
	rgapsd_host_record_free(&m->self);
	m->self = rec;
	m->put_again = true;
	if (m->state == MS_LIVE && !uv_is_active((uv_handle_t *)&m->put_timer))
		uv_timer_start(&m->put_timer, on_put_timer, MS_PUT_DELAY_MS, 0);
}

void rgapsd_membership_stop(struct rgapsd_membership *m)
{
	if (!m || m->state >= MS_STOPPING)
		return;
	uv_timer_stop(&m->put_timer);
	if (m->lease && m->state != MS_UNREACHABLE && m->state != MS_GRANT)
		ms_enter(m, MS_STOPPING);
	else
		ms_enter(m, MS_STOPPED);
}

void rgapsd_membership_stats(const struct rgapsd_membership *m, cJSON *o)
{
	struct rgapsd_etcd_stats es = { 0 };
	uint64_t now = uv_now(m->loop);
	char lease[24], k[48];
	cJSON *sm, *eo;

	if (m->etcd)
		rgapsd_etcd_get_stats(m->etcd, &es);
	snprintf(lease, sizeof(lease), "%016" PRIx64, (uint64_t)m->lease);
	cJSON_AddStringToObject(o, "source", "etcd");
	cJSON_AddStringToObject(o, "state", ms_state_names[m->state]);
	cJSON_AddBoolToObject(o, "live", m->state == MS_LIVE);
	cJSON_AddStringToObject(o, "prefix", m->prefix);
	cJSON_AddStringToObject(o, "endpoint", m->etcd ? rgapsd_etcd_member(m->etcd) : "");
	cJSON_AddStringToObject(o, "lease",
				!m->lease	       ? "none"
				: m->unreachable_since ? "unknown"
						       : "held");
	cJSON_AddStringToObject(o, "lease_id", lease);
	cJSON_AddNumberToObject(o, "lease_ttl_s", m->ttl_s);
	cJSON_AddNumberToObject(o, "hosts", m->nhosts);
	cJSON_AddNumberToObject(o, "hosts_missing", m->nmissing);
	cJSON_AddNumberToObject(o, "returned", (double)m->returned);
	cJSON_AddNumberToObject(o, "joined", (double)m->joined);
	cJSON_AddNumberToObject(o, "left", (double)m->left);
	cJSON_AddNumberToObject(o, "records_refused", (double)m->refused_records);
	cJSON_AddNumberToObject(o, "reconciliations", (double)m->reconciliations);
	cJSON_AddNumberToObject(o, "outages", (double)m->outages);
	cJSON_AddNumberToObject(o, "unreachable_s",
				m->unreachable_since ? (double)(now - m->unreachable_since) / 1000.0
						     : 0);
	cJSON_AddStringToObject(o, "last_error", m->last_error);
	cJSON_AddNumberToObject(o, "revision", (double)m->revision);
	eo = cJSON_AddObjectToObject(o, "etcd");
	cJSON_AddNumberToObject(eo, "requests", (double)es.requests);
	cJSON_AddNumberToObject(eo, "failures", (double)es.failures);
	cJSON_AddNumberToObject(eo, "refusals", (double)es.refusals);
	cJSON_AddNumberToObject(eo, "watches", (double)es.watches);
	cJSON_AddNumberToObject(eo, "watch_messages", (double)es.watch_msgs);
	cJSON_AddNumberToObject(eo, "watch_events", (double)m->watch_events);
	cJSON_AddNumberToObject(eo, "member_switches", (double)es.member_switches);
	cJSON_AddNumberToObject(eo, "auths", (double)es.auths);
	cJSON_AddNumberToObject(eo, "rtt_ms", es.rtt_ms);
	cJSON_AddNumberToObject(eo, "rtt_ms_avg", es.rtt_n ? es.rtt_ms_sum / (double)es.rtt_n : 0);
	cJSON_AddNumberToObject(eo, "rtt_ms_max", es.rtt_ms_max);
	sm = cJSON_AddObjectToObject(o, "state_machine");
	for (int a = 0; a < MS_NUM_STATES; a++) {
		for (int b = 0; b < MS_NUM_STATES; b++) {
			if (!m->trans[a][b])
				continue;
			snprintf(k, sizeof(k), "%s->%s", a == b ? "" : ms_state_names[a],
				 ms_state_names[b]);
			cJSON_AddNumberToObject(sm, k, (double)m->trans[a][b]);
		}
	}
}
