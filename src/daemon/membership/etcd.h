/*
 * An etcd v3 client on rgapsd's loop: requests to etcd's JSON gateway (POST
 * /v3/... over HTTP/1.1, or HTTPS with a client certificate) through libcurl's
 * multi-socket interface driven by libuv: a uv_poll per socket curl asks to
 * watch, one uv_timer for curl's timeout, curl_multi_socket_action() from
 * both (the pattern of curl's own multi-uv example). Nothing blocks the loop,
 * and the caller's callbacks never run inside curl's, so they may start,
 * cancel or close anything.
 *
 * Members: a request goes to the current member; one that does not answer
 * (no connection, no reply within timeout_ms, or "no leader") makes the next
 * member current and the request goes there, until every member was tried
 * once: then it fails with -EHOSTUNREACH. A watch is a streaming request whose
 * messages (one JSON object per line) reach on_msg one by one; when a request
 * to its member fails, the watch ends too, so a member that died is noticed
 * by the next renewal of the lease, not by TCP keepalives minutes later.
 *
 * Authentication: with a user, the client asks for a token
 * (/v3/auth/authenticate) before its first request, sends it with each, and
 * asks again once when etcd says a token is no longer valid.
 *
 * Lifecycle: rgapsd_etcd_open() -> rgapsd_etcd_call / _watch / _cancel ->
 * rgapsd_etcd_close(): nothing is called back after it; the memory goes once
 * the loop has closed the handles.
 */
#ifndef RGAPSD_MEMBERSHIP_ETCD_H
#define RGAPSD_MEMBERSHIP_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct cJSON;
struct rgapsd_etcd;
struct rgapsd_etcd_req;

struct rgapsd_etcd_config {
	const char *const *endpoints; /* "http://HOST:PORT" or "https://HOST:PORT" */
	uint32_t nendpoints;
	const char *tls_ca;   /* PEM; NULL or "": the system's CAs */
	const char *tls_cert; /* PEM client certificate and key; NULL or "": none */
	const char *tls_key;
	const char *username; /* NULL or "": no authentication */
	const char *password;
	uint32_t timeout_ms; /* one try of one request at one member */
};

/*
 * A request's end. status 0: reply is etcd's answer (valid during the call).
 * Else why says what failed, in words: -EHOSTUNREACH (no member answered),
 * -EREMOTEIO (etcd refused it: code is its gRPC code, reply its answer),
 * -EPROTO (an answer that is not JSON, or too large), -ECONNRESET (a watch's
 * stream ended).
 */
typedef void (*rgapsd_etcd_done_fn)(void *arg, int status, int code, const struct cJSON *reply,
				    const char *why);
/* One message of a watch (a {"result": ...} or an {"error": ...} object). */
typedef void (*rgapsd_etcd_msg_fn)(void *arg, const struct cJSON *msg);

struct rgapsd_etcd_stats {
	uint64_t requests;	  /* tries of unary requests, at one member each */
	uint64_t failures;	  /* tries a member did not answer */
	uint64_t refusals;	  /* answers that were etcd errors */
	uint64_t watches;	  /* watch streams opened */
	uint64_t watch_msgs;	  /* their messages */
	uint64_t member_switches; /* the current member changed */
	uint64_t auths;		  /* tokens asked for */
	double rtt_ms;		  /* the last answered try's round trip */
	double rtt_ms_max;
	double rtt_ms_sum;
	uint64_t rtt_n;
};

/* 0, or a negative errno with the reason in err (a TLS key file others may read, ...). */
int rgapsd_etcd_open(uv_loop_t *loop, const struct rgapsd_etcd_config *cfg,
		     struct rgapsd_etcd **e_p, char *err, size_t errlen);
void rgapsd_etcd_close(struct rgapsd_etcd *e);

/*
 * POST body (JSON text, copied) to path ("/v3/kv/put") at the current member;
 * done once. *req_p (may be NULL) names it for rgapsd_etcd_cancel until done runs.
 * 0 or -ENOMEM / -ECANCELED (closing).
 */
int rgapsd_etcd_call(struct rgapsd_etcd *e, const char *path, const char *body,
		     rgapsd_etcd_done_fn done, void *arg, struct rgapsd_etcd_req **req_p);
/* POST a watch request body to /v3/watch: on_msg for each message, then done once. */
int rgapsd_etcd_watch(struct rgapsd_etcd *e, const char *body, rgapsd_etcd_msg_fn on_msg,
		      rgapsd_etcd_done_fn done, void *arg, struct rgapsd_etcd_req **req_p);
/* Drop a request: its callbacks are not called. */
void rgapsd_etcd_cancel(struct rgapsd_etcd_req *r);

/* The caller found the current member unfit (a watch said it has no leader): the next one. */
void rgapsd_etcd_next_member(struct rgapsd_etcd *e, const char *why);
uint32_t rgapsd_etcd_members(const struct rgapsd_etcd *e);

void rgapsd_etcd_get_stats(const struct rgapsd_etcd *e, struct rgapsd_etcd_stats *st);
/* The member requests go to now ("http://HOST:PORT"). */
const char *rgapsd_etcd_member(const struct rgapsd_etcd *e);

#endif
