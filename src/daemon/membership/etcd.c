/*
 * The etcd client (etcd.h): libcurl's multi-socket interface on the libuv
 * loop. curl tells us which sockets to watch (on_socket: a uv_poll each) and
 * when to call it back (on_curl_timer: one uv_timer); each poll event and
 * timer expiry is one curl_multi_socket_action(), followed by dispatch(),
 * which hands the caller what came in: the messages of watch streams, then
 * the requests curl finished. The caller's callbacks run only there, never
 * inside curl's, so they may start, cancel or close anything; dispatch()
 * re-reads the state after each.
 *
 * A request's bytes are gathered by curl's write callback: a unary reply up
 * to MS_REPLY_MAX, a watch's stream cut into its messages (wire.c) and queued
 * on the request, at most MS_REPLY_MAX bytes of them at once.
 */
#include "etcd.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <unistd.h>

#include "../../common/errors.h"
#include "../../common/log.h"
#include "../../common/util.h"
#include "../secret.h"
#include "wire.h"

#define ETCD_TOKEN_MAX 4096	 /* an auth token, as text */
#define ETCD_CONNECT_MAX_MS 1000 /* a member that does not take the connection this soon */
#define ETCD_KEEPIDLE_S 10	 /* a watch's TCP keepalive: after this idle, */
#define ETCD_KEEPINTVL_S 5	 /* probes this often */
#define GRPC_UNAVAILABLE 14	 /* "no leader", "request timed out": try another member */
#define GRPC_UNAUTHENTICATED 16	 /* the token is no longer valid */

enum req_kind {
	REQ_UNARY, /* one request, one JSON reply */
	REQ_WATCH, /* one request, a stream of JSON messages */
	REQ_AUTH,  /* the client's own: a token */
};

/* A watch message waiting for dispatch(). */
struct wmsg {
	STAILQ_ENTRY(wmsg) link;
	size_t len;
	char text[];
};

struct rgapsd_etcd_req {
	struct rgapsd_etcd *e;
	TAILQ_ENTRY(rgapsd_etcd_req) link; /* e->reqs, until done or cancelled */
	enum req_kind kind;
	char path[48];
	char *body;
	CURL *easy; /* while a try runs */
	struct curl_slist *hdrs;
	bool waiting_auth; /* until a token comes */
	bool reauthed;	   /* asked for a new token once already */
	uint32_t member;   /* the one tried now */
	uint32_t tries;
	bool finished; /* curl is done with the try: res, http (dispatch() takes it) */
	CURLcode res;
	long http;
	uint64_t t0; /* the try's start (uv_hrtime) */
	/* unary: the reply */
	char *rx;
	size_t rx_len, rx_cap;
	bool rx_over;
	/* watch: the stream, and its messages not yet handed over */
	struct rgapsd_etcd_stream stream;
	STAILQ_HEAD(, wmsg) msgs;
	size_t msgs_bytes;
	bool broken; /* the stream cannot go on: why */
	char broken_why[96];
	rgapsd_etcd_done_fn done;
	rgapsd_etcd_msg_fn on_msg;
	void *arg;
	char errbuf[CURL_ERROR_SIZE];
};
TAILQ_HEAD(req_list, rgapsd_etcd_req);

/* A socket curl asks us to watch. */
struct etcd_sock {
	struct rgapsd_etcd *e;
	LIST_ENTRY(etcd_sock) link; /* e->socks, until closed */
	uv_poll_t poll;
	curl_socket_t fd;
};

struct rgapsd_etcd {
	uv_loop_t *loop;
	CURLM *multi;
	uv_timer_t timer;
	char **endpoints;
	uint32_t n, cur;
	char *ca, *cert, *key, *user;
	char *password; /* sodium_malloc'd */
	char *token;
	bool authing;
	uint32_t timeout_ms;
	struct req_list reqs;
	LIST_HEAD(, etcd_sock) socks;
	unsigned handles; /* uv handles not yet closed: the timer, the polls */
	unsigned dispatching;
	bool closing;
	struct rgapsd_etcd_stats st;
};

static int req_start(struct rgapsd_etcd_req *r);
static int auth_start(struct rgapsd_etcd *e);
static void dispatch(struct rgapsd_etcd *e);
static void close_now(struct rgapsd_etcd *e);

/* ---- memory --------------------------------------------------------------------------------- */

static void free_client(struct rgapsd_etcd *e)
{
	for (uint32_t i = 0; e->endpoints && i < e->n; i++)
		free(e->endpoints[i]);
	free(e->endpoints);
	free(e->ca);
	free(e->cert);
	free(e->key);
	free(e->user);
	if (e->password)
		sodium_free(e->password);
	if (e->token) {
		sodium_memzero(e->token, strlen(e->token));
		free(e->token);
	}
	free(e);
}

/* The timer's data is the client, a poll's its struct etcd_sock. */
static void on_handle_closed(uv_handle_t *h)
{
	struct rgapsd_etcd *e = h->data;

	if (h->type == UV_POLL) {
		struct etcd_sock *es = h->data;

		e = es->e;
		free(es);
	}
	if (--e->handles == 0)
		free_client(e);
}

/* The try in flight, if any: out of curl, its handle and headers gone. */
static void req_detach(struct rgapsd_etcd_req *r)
{
	if (r->easy) {
		curl_multi_remove_handle(r->e->multi, r->easy);
		curl_easy_cleanup(r->easy);
		r->easy = NULL;
	}
	r->finished = false;
	curl_slist_free_all(r->hdrs);
	r->hdrs = NULL;
}

static void req_free(struct rgapsd_etcd_req *r)
{
	struct wmsg *m;

	req_detach(r);
	TAILQ_REMOVE(&r->e->reqs, r, link);
	while ((m = STAILQ_FIRST(&r->msgs))) {
		STAILQ_REMOVE_HEAD(&r->msgs, link);
		free(m);
	}
	rgapsd_etcd_stream_free(&r->stream);
	free(r->rx);
	if (r->body) {
		sodium_memzero(r->body, strlen(r->body)); /* an auth request holds the password */
		free(r->body);
	}
	free(r);
}

/* The request ends: out of the list first (done may start others), then its callback. */
static void req_done(struct rgapsd_etcd_req *r, int status, int code, const cJSON *reply,
		     const char *why)
{
	rgapsd_etcd_done_fn done = r->done;
	void *arg = r->arg;

	req_free(r);
	if (done)
		done(arg, status, code, reply, why);
}

/* ---- curl's callbacks (no caller's callback runs from here) --------------------------------- */

static size_t on_write_unary(char *data, size_t size, size_t nmemb, void *p)
{
	struct rgapsd_etcd_req *r = p;
	size_t n = size * nmemb;

	if (r->rx_len + n > MS_REPLY_MAX) {
		r->rx_over = true;
		return 0; /* curl ends the transfer with CURLE_WRITE_ERROR */
	}
	if (r->rx_len + n + 1 > r->rx_cap) {
		size_t cap = RGAPS_MAX(r->rx_cap * 2, r->rx_len + n + 1);
		char *b = realloc(r->rx, cap);

		if (!b) {
			r->rx_over = true;
			return 0;
		}
		r->rx = b;
		r->rx_cap = cap;
	}
	memcpy(r->rx + r->rx_len, data, n);
	r->rx_len += n;
	r->rx[r->rx_len] = '\0';
	return n;
}

static int queue_msg(void *p, const char *text, size_t len)
{
	struct rgapsd_etcd_req *r = p;
	struct wmsg *m;

	if (r->msgs_bytes + len > MS_REPLY_MAX) {
		snprintf(r->broken_why, sizeof(r->broken_why),
			 "more than %u bytes of watch messages wait", MS_REPLY_MAX);
		return -E2BIG;
	}
	m = malloc(sizeof(*m) + len + 1);
	if (!m) {
		snprintf(r->broken_why, sizeof(r->broken_why), "out of memory for a watch message");
		return -ENOMEM;
	}
	memcpy(m->text, text, len);
	m->text[len] = '\0';
	m->len = len;
	STAILQ_INSERT_TAIL(&r->msgs, m, link);
	r->msgs_bytes += len;
	return 0;
}

static size_t on_write_watch(char *data, size_t size, size_t nmemb, void *p)
{
	struct rgapsd_etcd_req *r = p;
	size_t n = size * nmemb;
	int e = rgapsd_etcd_stream_feed(&r->stream, data, n, queue_msg, r);

	if (e == 0)
		return n;
	if (!r->broken_why[0])
		snprintf(r->broken_why, sizeof(r->broken_why), "%s",
			 e == -E2BIG ? "a watch message over 32 MiB" : "out of memory");
	r->broken = true;
	return 0;
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	struct etcd_sock *es = h->data;
	struct rgapsd_etcd *e = es->e;
	int flags = 0, running;

	if (status < 0)
		flags = CURL_CSELECT_ERR;
	if (events & UV_READABLE)
		flags |= CURL_CSELECT_IN;
	if (events & UV_WRITABLE)
		flags |= CURL_CSELECT_OUT;
	curl_multi_socket_action(e->multi, es->fd, flags, &running);
	dispatch(e);
}

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	struct rgapsd_etcd *e = userp;
	struct etcd_sock *es = socketp;
	int events = 0;

	if (what == CURL_POLL_REMOVE) {
		if (es) {
			curl_multi_assign(e->multi, fd, NULL);
			LIST_REMOVE(es, link);
			uv_close((uv_handle_t *)&es->poll, on_handle_closed);
		}
		return 0;
	}
	if (!es) {
		es = calloc(1, sizeof(*es));
		if (!es)
			return -1; /* curl fails the transfer: counted and retried like any */
		if (uv_poll_init_socket(e->loop, &es->poll, fd) != 0) {
			free(es);
			return -1;
		}
		es->e = e;
		es->fd = fd;
		es->poll.data = es;
		e->handles++;
		LIST_INSERT_HEAD(&e->socks, es, link);
		curl_multi_assign(e->multi, fd, es);
	}
	if (what & CURL_POLL_IN)
		events |= UV_READABLE;
	if (what & CURL_POLL_OUT)
		events |= UV_WRITABLE;
	return uv_poll_start(&es->poll, events, on_poll) == 0 ? 0 : -1;
}

static void on_timer(uv_timer_t *t)
{
	struct rgapsd_etcd *e = t->data;
	int running;

	curl_multi_socket_action(e->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	dispatch(e);
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
	struct rgapsd_etcd *e = userp;

	/* Even 0 goes through the loop: curl must not be re-entered from its own callback. */
	if (timeout_ms < 0)
		uv_timer_stop(&e->timer);
	else
		uv_timer_start(&e->timer, on_timer, (uint64_t)timeout_ms, 0);
	return 0;
}

/* ---- tries ---------------------------------------------------------------------------------- */

static bool set_opts(struct rgapsd_etcd_req *r, const char *url)
{
	struct rgapsd_etcd *e = r->e;
	CURL *c = r->easy;
	bool ok = true;
	uint32_t connect_ms = RGAPS_MIN(e->timeout_ms, (uint32_t)ETCD_CONNECT_MAX_MS);

#define OPT(o, v) ok = ok && curl_easy_setopt(c, o, v) == CURLE_OK
	OPT(CURLOPT_URL, url);
	OPT(CURLOPT_PRIVATE, r);
	OPT(CURLOPT_ERRORBUFFER, r->errbuf);
	OPT(CURLOPT_NOSIGNAL, 1L);
	OPT(CURLOPT_PROTOCOLS_STR, "http,https");
	OPT(CURLOPT_PROXY, ""); /* etcd is reached directly, whatever http_proxy says */
	OPT(CURLOPT_TCP_NODELAY, 1L);
	OPT(CURLOPT_POST, 1L);
	OPT(CURLOPT_POSTFIELDS, r->body);
	OPT(CURLOPT_POSTFIELDSIZE, (long)strlen(r->body));
	OPT(CURLOPT_HTTPHEADER, r->hdrs);
	OPT(CURLOPT_CONNECTTIMEOUT_MS, (long)connect_ms);
	if (r->kind == REQ_WATCH) {
		OPT(CURLOPT_WRITEFUNCTION, on_write_watch);
		OPT(CURLOPT_TCP_KEEPALIVE, 1L);
		OPT(CURLOPT_TCP_KEEPIDLE, (long)ETCD_KEEPIDLE_S);
		OPT(CURLOPT_TCP_KEEPINTVL, (long)ETCD_KEEPINTVL_S);
	} else {
		OPT(CURLOPT_WRITEFUNCTION, on_write_unary);
		OPT(CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
	}
	OPT(CURLOPT_WRITEDATA, r);
	if (e->ca)
		OPT(CURLOPT_CAINFO, e->ca);
	if (e->cert) {
		OPT(CURLOPT_SSLCERT, e->cert);
		OPT(CURLOPT_SSLKEY, e->key);
	}
#undef OPT
	return ok;
}

/* A request's next try, at r->member (or it waits for a token first). 0 or -ENOMEM. */
static int req_start(struct rgapsd_etcd_req *r)
{
	struct rgapsd_etcd *e = r->e;
	char url[RGAPS_PATH_MAX + 64], auth[ETCD_TOKEN_MAX + 32];
	struct curl_slist *h;
	bool ok;

	if (e->user && r->kind != REQ_AUTH && !e->token) {
		r->waiting_auth = true;
		return e->authing ? 0 : auth_start(e);
	}
	r->waiting_auth = false;
	memset(r->errbuf, 0, sizeof(r->errbuf));
	free(r->rx);
	r->rx = NULL;
	r->rx_len = r->rx_cap = 0;
	snprintf(url, sizeof(url), "%s%s", e->endpoints[r->member], r->path);
	h = curl_slist_append(NULL, "Content-Type: application/json");
	r->hdrs = h;
	h = h ? curl_slist_append(h, "Expect:") : NULL; /* no 100-continue round trip */
	if (h && r->kind == REQ_WATCH) /* etcd ends a watch whose member loses its leader */
		h = curl_slist_append(h, "Grpc-Metadata-hasleader: true");
	if (h && r->kind != REQ_AUTH && e->token) {
		snprintf(auth, sizeof(auth), "Authorization: %s", e->token);
		h = curl_slist_append(h, auth);
		sodium_memzero(auth, sizeof(auth));
	}
	r->easy = h ? curl_easy_init() : NULL;
	ok = r->easy && set_opts(r, url) && curl_multi_add_handle(e->multi, r->easy) == CURLM_OK;
	if (!ok) {
		req_detach(r);
		return -ENOMEM;
	}
	r->t0 = uv_hrtime();
	if (r->kind == REQ_WATCH)
		e->st.watches++;
	else
		e->st.requests++;
	return 0;
}

/* The next try, from dispatch(): a failure to start it ends the request. */
static void req_restart(struct rgapsd_etcd_req *r)
{
	if (req_start(r))
		req_done(r, -ENOMEM, 0, NULL, "out of memory for a request to etcd");
}

/* ---- members -------------------------------------------------------------------------------- */

/* Member i did not answer: the next one is current. No callback runs. */
static void member_failed(struct rgapsd_etcd *e, uint32_t i, const char *why)
{
	if (e->cur != i)
		return;
	e->cur = (i + 1) % e->n;
	e->st.member_switches++;
	if (e->n > 1)
		rgaps_info("etcd: %s did not answer (%s); going on with %s", e->endpoints[i], why,
			   e->endpoints[e->cur]);
}

/*
 * ...and the watches on it end: their stream may hang on a member that is gone. Called
 * last by whoever found the member failed: the callbacks may change anything.
 */
static void end_watches(struct rgapsd_etcd *e, uint32_t i, const char *why)
{
	struct rgapsd_etcd_req *w;
	char text[320];

	snprintf(text, sizeof(text), "etcd member %s stopped answering: %s", e->endpoints[i], why);
	for (;;) { /* each done may change the list: look again from the start */
		TAILQ_FOREACH(w, &e->reqs, link)
			if (w->kind == REQ_WATCH && w->easy && w->member == i)
				break;
		if (!w || e->closing)
			return;
		req_done(w, -ECONNRESET, 0, NULL, text);
	}
}

/* r's try at r->member got no answer: the next member, or the end. */
static void req_retry(struct rgapsd_etcd_req *r, const char *why)
{
	struct rgapsd_etcd *e = r->e;
	char text[320];

	req_detach(r);
	r->tries++;
	if (r->tries >= e->n) {
		snprintf(text, sizeof(text), "no etcd member answered (%u tried; the last, %s: %s)",
			 e->n, e->endpoints[r->member], why);
		req_done(r, -EHOSTUNREACH, 0, NULL, text);
		return;
	}
	r->member = (r->member + 1) % e->n;
	req_restart(r);
}

/* ---- authentication ------------------------------------------------------------------------- */

/* The first request that waits for a token, or NULL. */
static struct rgapsd_etcd_req *first_waiting(struct rgapsd_etcd *e)
{
	struct rgapsd_etcd_req *r;

	TAILQ_FOREACH(r, &e->reqs, link)
		if (r->waiting_auth)
			return r;
	return NULL;
}

static void on_auth_done(void *arg, int status, int code, const cJSON *reply, const char *why)
{
	struct rgapsd_etcd *e = arg;
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(reply, "token");
	struct rgapsd_etcd_req *r;
	char text[320];
	size_t n = cJSON_IsString(t) ? strlen(t->valuestring) : 0;

	e->authing = false;
	if (status == 0 && (n == 0 || n > ETCD_TOKEN_MAX)) {
		status = -EPROTO;
		why = "the authentication reply holds no token of at most 4096 bytes";
	}
	if (status == 0) {
		e->token = strdup(t->valuestring);
		if (!e->token) {
			status = -ENOMEM;
			why = "out of memory for the token";
		}
	}
	if (status)
		snprintf(text, sizeof(text), "etcd authentication as %s failed: %s", e->user, why);
	/* Each start or end may change the list: look again from its start every time. */
	while (!e->closing && (r = first_waiting(e))) {
		if (status == 0)
			req_restart(r);
		else
			req_done(r, status, code, reply, text);
	}
}

/*
 * r (calloc'd, its body set or NULL) becomes a request of e and its first try starts.
 * 0; -ENOMEM, r freed (a failure to start is reported here, never through done).
 */
static int req_submit(struct rgapsd_etcd *e, struct rgapsd_etcd_req *r, enum req_kind kind,
		      const char *path, rgapsd_etcd_msg_fn on_msg, rgapsd_etcd_done_fn done,
		      void *arg)
{
	r->e = e;
	r->kind = kind;
	snprintf(r->path, sizeof(r->path), "%s", path);
	STAILQ_INIT(&r->msgs);
	r->member = e->cur;
	r->on_msg = on_msg;
	r->done = done;
	r->arg = arg;
	TAILQ_INSERT_TAIL(&e->reqs, r, link);
	if (!r->body || req_start(r)) {
		req_free(r);
		return -ENOMEM;
	}
	return 0;
}

/* Ask for a token; the requests waiting for one start when it comes. 0 or -ENOMEM. */
static int auth_start(struct rgapsd_etcd *e)
{
	struct rgapsd_etcd_req *r = calloc(1, sizeof(*r));
	cJSON *o = cJSON_CreateObject(), *pw;
	int rc;

	if (r && o && cJSON_AddStringToObject(o, "name", e->user) &&
	    cJSON_AddStringToObject(o, "password", e->password))
		r->body = cJSON_PrintUnformatted(o);
	pw = cJSON_GetObjectItemCaseSensitive(o, "password");
	if (cJSON_IsString(pw))
		sodium_memzero(pw->valuestring, strlen(pw->valuestring));
	cJSON_Delete(o);
	if (!r)
		return -ENOMEM;
	rc = req_submit(e, r, REQ_AUTH, "/v3/auth/authenticate", NULL, on_auth_done, e);
	if (rc)
		return rc;
	e->authing = true;
	e->st.auths++;
	return 0;
}

/* ---- what curl finished --------------------------------------------------------------------- */

/* A watch's oldest message to its caller (one that is no JSON object ends the watch). */
static void deliver(struct rgapsd_etcd_req *r)
{
	struct wmsg *w = STAILQ_FIRST(&r->msgs);
	cJSON *msg;

	STAILQ_REMOVE_HEAD(&r->msgs, link);
	r->msgs_bytes -= w->len;
	r->e->st.watch_msgs++;
	msg = cJSON_ParseWithLength(w->text, w->len);
	free(w);
	if (!cJSON_IsObject(msg)) {
		cJSON_Delete(msg);
		req_done(r, -EPROTO, 0, NULL, "a watch message that is no JSON object");
		return;
	}
	r->on_msg(r->arg, msg);
	cJSON_Delete(msg);
}

/*
 * What curl says went wrong: its code's text and the first detail it wrote down. A
 * member that wants a client certificate drops the connection of a client without one
 * at its first read, which curl reports as a broken connection: say what to look at.
 */
static void curl_why(const struct rgapsd_etcd_req *r, CURLcode res, char *why, size_t len)
{
	const struct rgapsd_etcd *e = r->e;
	bool tls_hint = !e->cert && strncmp(e->endpoints[r->member], "https:", 6) == 0 &&
			(res == CURLE_RECV_ERROR || res == CURLE_SEND_ERROR ||
			 res == CURLE_GOT_NOTHING || res == CURLE_SSL_CONNECT_ERROR);

	snprintf(why, len, "%s%s%s%s", curl_easy_strerror(res), r->errbuf[0] ? " (" : "", r->errbuf,
		 r->errbuf[0] ? ")" : "");
	if (tls_hint && strlen(why) + 120 < len)
		strcat(why, "; a member that asks for a client certificate drops a client "
			    "without one (discovery.tls_cert)");
}

static void finished_watch(struct rgapsd_etcd_req *r, CURLcode res, long http)
{
	char why[320];

	if (r->broken)
		snprintf(why, sizeof(why), "%s", r->broken_why);
	else if (res != CURLE_OK)
		curl_why(r, res, why, sizeof(why));
	else if (http != 200)
		snprintf(why, sizeof(why), "HTTP status %ld", http);
	else
		snprintf(why, sizeof(why), "the member ended the stream");
	if (res == CURLE_COULDNT_CONNECT || res == CURLE_OPERATION_TIMEDOUT)
		member_failed(r->e, r->member, why);
	req_done(r, r->broken ? -EPROTO : -ECONNRESET, 0, NULL, why);
}

/*
 * r's member did not answer it (why): the next member is current, r tries it, and the
 * watches on the failed member end (last: their callbacks may change anything).
 */
static void unanswered(struct rgapsd_etcd_req *r, const char *why)
{
	struct rgapsd_etcd *e = r->e;
	uint32_t member = r->member;

	e->st.failures++;
	member_failed(e, member, why);
	req_retry(r, why);
	end_watches(e, member, why);
}

static void finished_unary(struct rgapsd_etcd_req *r, CURLcode res, long http)
{
	struct rgapsd_etcd *e = r->e;
	char why[320], msg[MS_REASON_MAX + 1];
	double ms = (double)(uv_hrtime() - r->t0) / 1e6;
	cJSON *reply;
	int code = 0;

	if (r->rx_over) {
		req_done(r, -EPROTO, 0, NULL, "etcd's answer is over 32 MiB");
		return;
	}
	if (res != CURLE_OK) {
		curl_why(r, res, why, sizeof(why));
		unanswered(r, why);
		return;
	}
	e->st.rtt_ms = ms;
	e->st.rtt_ms_max = RGAPS_MAX(e->st.rtt_ms_max, ms);
	e->st.rtt_ms_sum += ms;
	e->st.rtt_n++;
	reply = r->rx ? cJSON_ParseWithLength(r->rx, r->rx_len) : NULL;
	if (!cJSON_IsObject(reply)) {
		char text[100] = "";

		/* Its first words, printable: the gateway answers some refusals in plain text. */
		for (size_t i = 0; r->rx && i < r->rx_len && i + 1 < sizeof(text); i++)
			text[i] = r->rx[i] >= 0x20 && r->rx[i] < 0x7f ? r->rx[i] : ' ';
		snprintf(why, sizeof(why), "%s answered HTTP %ld with no JSON object%s%s",
			 e->endpoints[r->member], http, text[0] ? ": " : "", text);
		cJSON_Delete(reply);
		req_done(r, -EPROTO, 0, NULL, why);
		return;
	}
	if (rgapsd_etcd_reply_error(reply, &code, msg, sizeof(msg))) {
		if (code == GRPC_UNAUTHENTICATED && e->user && r->kind != REQ_AUTH &&
		    !r->reauthed) {
			/* The token expired (etcd restarted, or its TTL): one new one. */
			cJSON_Delete(reply);
			req_detach(r);
			r->reauthed = true;
			if (e->token) {
				sodium_memzero(e->token, strlen(e->token));
				free(e->token);
				e->token = NULL;
			}
			req_restart(r);
			return;
		}
		if (code == GRPC_UNAVAILABLE || http == 503) {
			snprintf(why, sizeof(why), "%s (code %d)", msg, code);
			cJSON_Delete(reply);
			unanswered(r, why);
			return;
		}
		e->st.refusals++;
		snprintf(why, sizeof(why), "etcd refused %s: %s (code %d)", r->path, msg, code);
		req_done(r, -EREMOTEIO, code, reply, why);
		cJSON_Delete(reply);
		return;
	}
	if (http != 200) {
		snprintf(why, sizeof(why), "%s answered %s with HTTP status %ld",
			 e->endpoints[r->member], r->path, http);
		req_done(r, -EPROTO, 0, reply, why);
	} else {
		req_done(r, 0, 0, reply, NULL);
	}
	cJSON_Delete(reply);
}

/*
 * Hand the caller what came in: each watch's messages, then each finished try (a
 * watch's after its last message). Each callback may change anything: every step
 * looks again from the start of the list.
 */
static void dispatch(struct rgapsd_etcd *e)
{
	struct rgapsd_etcd_req *r;
	CURLMsg *m;
	int left;

	e->dispatching++;
	while ((m = curl_multi_info_read(e->multi, &left))) {
		char *priv = NULL;

		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
		r = (struct rgapsd_etcd_req *)priv;
		r->finished = true;
		r->res = m->data.result;
		curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &r->http);
	}
	while (!e->closing) {
		TAILQ_FOREACH(r, &e->reqs, link)
			if ((r->kind == REQ_WATCH && !STAILQ_EMPTY(&r->msgs)) || r->finished)
				break;
		if (!r)
			break;
		if (r->kind == REQ_WATCH && !STAILQ_EMPTY(&r->msgs))
			deliver(r);
		else if (r->kind == REQ_WATCH)
			finished_watch(r, r->res, r->http);
		else
			finished_unary(r, r->res, r->http);
	}
	if (--e->dispatching == 0 && e->closing)
		close_now(e);
}

/* ---- open, close, requests ----------------------------------------------------------------- */

static char *dup_or_null(const char *s, bool *ok)
{
	char *d;

	if (!s || !s[0])
		return NULL;
	d = strdup(s);
	if (!d)
		*ok = false;
	return d;
}

int rgapsd_etcd_open(uv_loop_t *loop, const struct rgapsd_etcd_config *cfg,
		     struct rgapsd_etcd **e_p, char *err, size_t errlen)
{
	struct rgapsd_etcd *e;
	bool ok = true;
	int fd;

	if (!cfg->nendpoints) {
		rgaps__fail(0, err, errlen, "no etcd endpoint");
		return -EINVAL;
	}
	if (cfg->tls_key && cfg->tls_key[0]) {
		fd = rgapsd_secret_open(cfg->tls_key, "TLS key file", err, errlen);
		if (fd < 0)
			return fd;
		close(fd);
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		rgaps__fail(0, err, errlen, "libcurl cannot be initialised");
		return -EIO;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->loop = loop;
	e->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : 2000;
	TAILQ_INIT(&e->reqs);
	LIST_INIT(&e->socks);
	e->endpoints = calloc(cfg->nendpoints, sizeof(*e->endpoints));
	ok = e->endpoints != NULL;
	for (uint32_t i = 0; ok && i < cfg->nendpoints; i++) {
		e->endpoints[i] = strdup(cfg->endpoints[i]);
		ok = e->endpoints[i] != NULL;
		e->n += ok;
	}
	e->ca = dup_or_null(cfg->tls_ca, &ok);
	e->cert = dup_or_null(cfg->tls_cert, &ok);
	e->key = dup_or_null(cfg->tls_key, &ok);
	e->user = dup_or_null(cfg->username, &ok);
	if (ok && e->user) {
		size_t n = cfg->password ? strlen(cfg->password) : 0;

		e->password = sodium_malloc(n + 1);
		ok = e->password != NULL;
		if (ok)
			memcpy(e->password, cfg->password ? cfg->password : "", n + 1);
	}
	e->multi = ok ? curl_multi_init() : NULL;
	if (!e->multi) {
		free_client(e);
		rgaps__fail(0, err, errlen, "out of memory");
		return -ENOMEM;
	}
	curl_multi_setopt(e->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
	curl_multi_setopt(e->multi, CURLMOPT_SOCKETDATA, e);
	curl_multi_setopt(e->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
	curl_multi_setopt(e->multi, CURLMOPT_TIMERDATA, e);
	rgaps_require(uv_timer_init(loop, &e->timer) == 0);
	e->timer.data = e;
	e->handles = 1;
	*e_p = e;
	return 0;
}

static void close_now(struct rgapsd_etcd *e)
{
	struct rgapsd_etcd_req *r;
	struct etcd_sock *es;

	while ((r = TAILQ_FIRST(&e->reqs)))
		req_free(r);
	/* Our polls go before curl closes its sockets: none is left watching a closed fd. */
	while ((es = LIST_FIRST(&e->socks))) {
		curl_multi_assign(e->multi, es->fd, NULL);
		LIST_REMOVE(es, link);
		uv_close((uv_handle_t *)&es->poll, on_handle_closed);
	}
	curl_multi_cleanup(e->multi);
	e->multi = NULL;
	uv_close((uv_handle_t *)&e->timer, on_handle_closed);
}

void rgapsd_etcd_close(struct rgapsd_etcd *e)
{
	if (!e || e->closing)
		return;
	e->closing = true;
	if (!e->dispatching)
		close_now(e);
}

static int new_req(struct rgapsd_etcd *e, enum req_kind kind, const char *path, const char *body,
		   rgapsd_etcd_msg_fn on_msg, rgapsd_etcd_done_fn done, void *arg,
		   struct rgapsd_etcd_req **req_p)
{
	struct rgapsd_etcd_req *r;
	int rc;

	if (e->closing)
		return -ECANCELED;
	if (strlen(path) >= sizeof(r->path))
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->body = strdup(body);
	rc = req_submit(e, r, kind, path, on_msg, done, arg);
	if (rc)
		return rc;
	if (req_p)
		*req_p = r;
	return 0;
}

int rgapsd_etcd_call(struct rgapsd_etcd *e, const char *path, const char *body,
		     rgapsd_etcd_done_fn done, void *arg, struct rgapsd_etcd_req **req_p)
{
	return new_req(e, REQ_UNARY, path, body, NULL, done, arg, req_p);
}

int rgapsd_etcd_watch(struct rgapsd_etcd *e, const char *body, rgapsd_etcd_msg_fn on_msg,
		      rgapsd_etcd_done_fn done, void *arg, struct rgapsd_etcd_req **req_p)
{
	return new_req(e, REQ_WATCH, "/v3/watch", body, on_msg, done, arg, req_p);
}

void rgapsd_etcd_cancel(struct rgapsd_etcd_req *r)
{
	if (r)
		req_free(r);
}

void rgapsd_etcd_next_member(struct rgapsd_etcd *e, const char *why)
{
	member_failed(e, e->cur, why);
}

uint32_t rgapsd_etcd_members(const struct rgapsd_etcd *e)
{
	return e->n;
}

void rgapsd_etcd_get_stats(const struct rgapsd_etcd *e, struct rgapsd_etcd_stats *st)
{
	*st = e->st;
}

const char *rgapsd_etcd_member(const struct rgapsd_etcd *e)
{
	return e->endpoints[e->cur];
}
