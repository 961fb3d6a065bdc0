/*
 * metrics_listen (metrics.h): GET /metrics answers the Prometheus text of the
 * whole daemon's statistics.
 *
 * libmicrohttpd runs its own thread for the sockets (accepting, reading
 * requests, writing replies to slow readers), bounded by its options. A scrape
 * needs a snapshot of state only the loop may read: the server's thread posts
 * a message to the loop's mailbox and waits (at most LOOP_WAIT) for the loop to
 * hand back the whole stats reply as a cJSON tree (rgapsd_stats_all(), what a
 * `stats` request costs the loop); it then renders the text itself, off the
 * loop. Scrapes within FRESH of the last snapshot get its text, so however
 * often a scraper asks, the loop makes at most one snapshot per FRESH.
 */
#include "metrics.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../common/errors.h"
#include "../common/futex.h"
#include "../common/log.h"
#include "../common/prometheus.h"
#include "../common/util.h"
#include "daemon.h"
#include "hostport.h"
#include "worker.h"

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct rgapsd_metrics {
	struct rgapsd *d;
	struct MHD_Daemon *mhd;
	struct rgapsd_mailbox mb; /* the server's thread -> the loop */
	struct rgapsd_msg ask;	  /* "make a snapshot", posted while asked */
	pthread_mutex_t lock;	  /* guards what follows */
	pthread_cond_t cond;	  /* a snapshot came, or stopping */
	bool asked;
	bool stopping;
	uint64_t made;		  /* snapshots the loop made */
	cJSON *snapshot;	  /* the loop's newest, not yet rendered (NULL: out of memory) */
	/* The server's thread only: the newest text and when its snapshot was asked for. */
	char *text;
	size_t len;
	uint64_t text_ns;
};

static uint64_t mono_ns(void)
{
	return rgaps_now_ns(CLOCK_MONOTONIC);
}

/* ---------------------------------------------------------------- the loop's side */

static void on_ask(struct rgapsd_msg *msg)
{
	struct rgapsd_metrics *m = RGAPS_CONTAINER_OF(msg, struct rgapsd_metrics, ask);
	cJSON *s;

	pthread_mutex_lock(&m->lock);
	if (m->stopping) {
		pthread_mutex_unlock(&m->lock);
		return;
	}
	pthread_mutex_unlock(&m->lock);
	s = rgapsd_stats_all(m->d); /* the loop's own state: here, on the loop */
	pthread_mutex_lock(&m->lock);
	cJSON_Delete(m->snapshot);
	m->snapshot = s;
	m->made++;
	m->asked = false;
	pthread_cond_broadcast(&m->cond);
	pthread_mutex_unlock(&m->lock);
}

/* ---------------------------------------------------------------- the server's side */

/*
 * A fresh snapshot from the loop, rendered into m->text. 0, -ENOMEM, -ETIMEDOUT (the
 * loop did not answer within LOOP_WAIT), -ESHUTDOWN (rgapsd is stopping).
 */
static int refresh(struct rgapsd_metrics *m)
{
	struct timespec until;
	uint64_t want, asked_ns = mono_ns();
	cJSON *s = NULL;
	char *text = NULL;
	size_t len = 0;
	FILE *f;
	int r = 0;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += RGAPSD_METRICS_LOOP_WAIT_MS / 1000;
	until.tv_nsec += (long)(RGAPSD_METRICS_LOOP_WAIT_MS % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&m->lock);
	want = m->made + 1;
	if (!m->asked && !m->stopping) {
		m->asked = true;
		rgapsd_mailbox_post(&m->mb, &m->ask);
	}
	while (m->made < want && !m->stopping && !r)
		r = -pthread_cond_timedwait(&m->cond, &m->lock, &until);
	if (m->stopping)
		r = -ESHUTDOWN;
	if (!r) {
		s = m->snapshot;
		m->snapshot = NULL;
		if (!s)
			r = -ENOMEM;
	}
	pthread_mutex_unlock(&m->lock);
	if (r)
		return r;
	f = open_memstream(&text, &len);
	if (!f) {
		cJSON_Delete(s);
		return -ENOMEM;
	}
	r = rgaps__stats_prometheus(s, f);
	if (fclose(f) || r)
		r = -ENOMEM;
	cJSON_Delete(s);
	if (r) {
		free(text);
		return r;
	}
	free(m->text);
	m->text = text;
	m->len = len;
	m->text_ns = asked_ns;
	return 0;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *text,
			     size_t len, const char *type, bool copy)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(
		len, (void *)text, copy ? MHD_RESPMEM_MUST_COPY : MHD_RESPMEM_PERSISTENT);
	enum MHD_Result r;

	if (!resp)
		return MHD_NO; /* MHD closes the connection */
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
	r = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return r;
}

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned status, const char *msg)
{
	return reply(conn, status, msg, strlen(msg), "text/plain; charset=utf-8", false);
}

/* The server's thread, once a request's line and headers are in (and again for a body). */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **req_ctx)
{
	struct rgapsd_metrics *m = cls;
	char why[160];
	int r;

	(void)version;
	(void)upload;
	if (*upload_size) { /* a body: nothing here takes one */
		*upload_size = 0;
		return MHD_YES;
	}
	if (!*req_ctx && strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
	    strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
	*req_ctx = m;
	if (strcmp(url, "/") == 0)
		return reply_text(conn, MHD_HTTP_OK,
				  "rgapsd: the Prometheus metrics are at /metrics\n");
	if (strcmp(url, "/metrics") != 0)
		return reply_text(conn, MHD_HTTP_NOT_FOUND, "no such page: try /metrics\n");
	if (!m->text || mono_ns() - m->text_ns >= (uint64_t)RGAPSD_METRICS_FRESH_MS * 1000000) {
		r = refresh(m);
		if (r) {
			snprintf(why, sizeof(why), "rgapsd: no snapshot of its statistics: %s\n",
				 r == -ETIMEDOUT ? "its loop did not answer within 5 s" :
				 r == -ESHUTDOWN ? "it is stopping" :
						   "out of memory");
			rgaps_debug("metrics: %s", why);
			return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, why, strlen(why),
				     "text/plain; charset=utf-8", true);
		}
	}
	return reply(conn, MHD_HTTP_OK, m->text, m->len, CONTENT_TYPE, true);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[256];
	size_t n;

	(void)cls;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
		msg[--n] = '\0';
	rgaps_debug("metrics: libmicrohttpd: %s", msg);
}

/* ---------------------------------------------------------------- start, stop */

/* A listening socket on addr ("HOST:PORT"): the fd, or a negative errno and why in err. */
static int listen_on(const char *addr, char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	char host[256], port[8], why[256];
	uint16_t p;
	int fd = -1, one = 1, r;

	if (rgapsd_hostport_parse(addr, host, sizeof(host), &p, why, sizeof(why)))
		return rgaps__fail(-EINVAL, err, errlen, "metrics_listen: %s", why);
	snprintf(port, sizeof(port), "%u", p);
	r = getaddrinfo(host, port, &hints, &ai);
	if (r)
		return rgaps__fail(-EINVAL, err, errlen, "metrics_listen '%s': %s", addr,
				   gai_strerror(r));
	fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
	if (fd < 0) {
		r = -errno;
		goto fail;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 ||
	    listen(fd, RGAPSD_METRICS_MAX_CONNECTIONS * 2) < 0) {
		r = -errno;
		goto fail;
	}
	freeaddrinfo(ai);
	return fd;
fail:
	freeaddrinfo(ai);
	if (fd >= 0)
		close(fd);
	return rgaps__fail(r, err, errlen, "metrics_listen '%s': cannot listen there: %s", addr,
			   strerror(-r));
}

/* The mailbox closed (after rgapsd_metrics_stop()): nothing refers to m any more. */
static void free_metrics(struct rgapsd_mailbox *mb)
{
	struct rgapsd_metrics *m = RGAPS_CONTAINER_OF(mb, struct rgapsd_metrics, mb);

	cJSON_Delete(m->snapshot);
	free(m->text);
	pthread_cond_destroy(&m->cond);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

int rgapsd_metrics_start(struct rgapsd *d, const char *addr, struct rgapsd_metrics **m_p,
			 char *err, size_t errlen)
{
	struct rgapsd_metrics *m;
	pthread_condattr_t ca;
	int fd, r;

	/* What can fail for the address first, while there is nothing to undo but a socket. */
	fd = listen_on(addr, err, errlen);
	if (fd < 0)
		return fd;
	m = calloc(1, sizeof(*m));
	if (!m) {
		close(fd);
		return rgaps__fail(-ENOMEM, err, errlen, "metrics_listen: out of memory");
	}
	m->d = d;
	m->ask.fn = on_ask;
	pthread_mutex_init(&m->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&m->cond, &ca);
	pthread_condattr_destroy(&ca);
	r = rgapsd_mailbox_init(d->loop, &m->mb);
	if (r) {
		close(fd);
		m->mb.on_closed = NULL;
		free_metrics(&m->mb);
		return rgaps__fail(r, err, errlen, "metrics_listen: %s", uv_strerror(r));
	}
	m->mb.on_closed = free_metrics;
	/* The bounds of every other input: connections, bytes of a request, time. */
	m->mhd = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG, 0, NULL, NULL,
		on_request, m, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, m, MHD_OPTION_LISTEN_SOCKET,
		fd, MHD_OPTION_CONNECTION_LIMIT, (unsigned)RGAPSD_METRICS_MAX_CONNECTIONS,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)RGAPSD_METRICS_MAX_PER_ADDRESS,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)RGAPSD_METRICS_REQUEST_MAX,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)RGAPSD_METRICS_IDLE_S, MHD_OPTION_END);
	if (!m->mhd) {
		close(fd);
		rgapsd_metrics_stop(m); /* freed once the loop has closed the mailbox */
		return rgaps__fail(-EIO, err, errlen,
				   "metrics_listen '%s': libmicrohttpd did not start (the debug log "
				   "says why)",
				   addr);
	}
	rgaps_info("metrics: serving the Prometheus text at http://%s/metrics (at most %d "
		   "connections, %d from one address)",
		   addr, RGAPSD_METRICS_MAX_CONNECTIONS, RGAPSD_METRICS_MAX_PER_ADDRESS);
	*m_p = m;
	return 0;
}

void rgapsd_metrics_stop(struct rgapsd_metrics *m)
{
	if (!m)
		return;
	/* A scrape waiting for the loop (this thread) gives up now, so that the join below ends. */
	pthread_mutex_lock(&m->lock);
	m->stopping = true;
	pthread_cond_broadcast(&m->cond);
	pthread_mutex_unlock(&m->lock);
	if (m->mhd)
		MHD_stop_daemon(m->mhd); /* joins its thread, closes the sockets */
	m->mhd = NULL;
	/* An ask still queued runs now and finds stopping; then free_metrics(). */
	rgapsd_mailbox_close(&m->mb);
}
