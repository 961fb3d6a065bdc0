/*
 * The sd_notify protocol (sd_notify(3), systemd's "notify" socket): each
 * message is one datagram of newline-separated VAR=VALUE lines sent to the
 * AF_UNIX datagram socket named by $NOTIFY_SOCKET, a file system path or,
 * when it starts with '@', a name in the abstract namespace. rgapsd sends
 * READY=1 once its control socket serves, STATUS= whenever the line it would
 * show changes, WATCHDOG=1 every half of $WATCHDOG_USEC (only when
 * $WATCHDOG_PID is unset or names this process), and STOPPING=1 at shutdown.
 * All from the loop thread: a loop that stalls stops the watchdog pings, and
 * systemd restarts the daemon as WatchdogSec= asks.
 */
#include "notify.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../common/log.h"
#include "daemon.h"
#include "remote.h"

#define NOTIFY_STATUS_MS 1000 /* STATUS= is looked at this often */
#define NOTIFY_STATUS_MAX 256

struct rgapsd_notify {
	struct rgapsd *d;
	int fd;
	struct sockaddr_un sa;
	socklen_t salen;
	uv_timer_t timer;
	uint64_t watchdog_ms; /* ping interval (half of WATCHDOG_USEC); 0: no watchdog */
	uint64_t last_ping_ms;
	char status[NOTIFY_STATUS_MAX];
	struct rgaps_ratelimit log_rl;
};

static void notify_send(struct rgapsd_notify *n, const char *msg)
{
	if (sendto(n->fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT,
		   (const struct sockaddr *)&n->sa, n->salen) < 0)
		rgaps_log_limited(&n->log_rl, RGAPS_LOG_WARN,
				  "notify: cannot send \"%.40s\" to $NOTIFY_SOCKET: %s", msg,
				  strerror(errno));
}

/* Peers listed and up, from the same figures `rgaps stats` shows; -1 when single host. */
static void notify_peers(struct rgapsd *d, int *up_p, int *all_p)
{
	cJSON *tmp = cJSON_CreateObject(), *s;
	const cJSON *sessions;

	*up_p = *all_p = -1;
	if (!tmp)
		return;
	rgapsd_remote_stats(d, tmp, NULL);
	sessions = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tmp, "peers"),
						    "sessions");
	if (cJSON_IsArray(sessions)) {
		*up_p = *all_p = 0;
		cJSON_ArrayForEach(s, sessions)
		{
			(*all_p)++;
			*up_p += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "up"));
		}
	}
	cJSON_Delete(tmp);
}

/* The status line now, into n->status; true when it changed. */
static bool notify_status_line(struct rgapsd_notify *n)
{
	struct rgapsd *d = n->d;
	char status[NOTIFY_STATUS_MAX];
	int up, all;

	notify_peers(d, &up, &all);
	if (all < 0)
		snprintf(status, sizeof(status), "%u topics, %u clients, single host", d->ntopics,
			 d->ctl ? rgapsd_control_nconns(d->ctl) : 0);
	else
		snprintf(status, sizeof(status), "%u topics, %u clients, %d of %d peers up",
			 d->ntopics, d->ctl ? rgapsd_control_nconns(d->ctl) : 0, up, all);
	if (strcmp(status, n->status) == 0)
		return false;
	memcpy(n->status, status, sizeof(status));
	return true;
}

static void notify_on_timer(uv_timer_t *t)
{
	struct rgapsd_notify *n = t->data;
	uint64_t now = uv_now(t->loop);

	if (n->watchdog_ms && now - n->last_ping_ms >= n->watchdog_ms) {
		notify_send(n, "WATCHDOG=1");
		n->last_ping_ms = now;
	}
	if (notify_status_line(n)) {
		char msg[NOTIFY_STATUS_MAX + 16];

		snprintf(msg, sizeof(msg), "STATUS=%s", n->status);
		notify_send(n, msg);
	}
}

/* $NOTIFY_SOCKET as an address: a path, or '@' for the abstract namespace. */
static int notify_address(struct rgapsd_notify *n, const char *name)
{
	size_t len = strlen(name);

	n->sa.sun_family = AF_UNIX;
	if ((name[0] != '/' && name[0] != '@') || len < 2 || len >= sizeof(n->sa.sun_path))
		return -EINVAL;
	memcpy(n->sa.sun_path, name, len);
	if (name[0] == '@')
		n->sa.sun_path[0] = '\0';
	n->salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (name[0] == '/'));
	return 0;
}

/* $WATCHDOG_USEC, unless $WATCHDOG_PID names another process: the ping interval in ms. */
static uint64_t notify_watchdog_ms(void)
{
	const char *usec = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
	unsigned long long v;
	char *end;

	if (!usec || !*usec)
		return 0;
	if (pid && *pid && strtol(pid, &end, 10) != (long)getpid())
		return 0;
	errno = 0;
	v = strtoull(usec, &end, 10);
	if (errno || *end || v == 0 || v > 24ull * 3600 * 1000000) {
		rgaps_warn("notify: WATCHDOG_USEC=%s is not a time in microseconds; no watchdog",
			   usec);
		return 0;
	}
	/* Half the timeout, as sd_watchdog_enabled(3) advises; at least every 10 ms. */
	return RGAPS_MAX(v / 2000, 10ull);
}

int rgapsd_notify_start(struct rgapsd *d)
{
	const char *name = getenv("NOTIFY_SOCKET");
	struct rgapsd_notify *n;
	char msg[NOTIFY_STATUS_MAX + 48];

	if (!name || !*name)
		return 0;
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->d = d;
	if (notify_address(n, name)) {
		rgaps_error("notify: NOTIFY_SOCKET=%s is neither a path nor an @abstract name "
			    "that fits a socket address", name);
		free(n);
		return -EINVAL;
	}
	n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (n->fd < 0) {
		int err = -errno;

		rgaps_error("notify: socket(AF_UNIX, SOCK_DGRAM): %s", strerror(errno));
		free(n);
		return err;
	}
	n->watchdog_ms = notify_watchdog_ms();
	uv_timer_init(d->loop, &n->timer);
	n->timer.data = n;
	d->notify = n;
	/* READY=1 and the first status in one datagram: systemd sees both at once. */
	notify_status_line(n);
	snprintf(msg, sizeof(msg), "READY=1\nSTATUS=%s", n->status);
	notify_send(n, msg);
	n->last_ping_ms = uv_now(d->loop);
	uv_timer_start(&n->timer, notify_on_timer,
		       n->watchdog_ms ? RGAPS_MIN(n->watchdog_ms, (uint64_t)NOTIFY_STATUS_MS)
				      : NOTIFY_STATUS_MS,
		       n->watchdog_ms ? RGAPS_MIN(n->watchdog_ms, (uint64_t)NOTIFY_STATUS_MS)
				      : NOTIFY_STATUS_MS);
	if (n->watchdog_ms)
		rgaps_info("notify: told systemd we are ready; watchdog ping every %" PRIu64 " ms",
			   n->watchdog_ms);
	else
		rgaps_info("notify: told systemd we are ready");
	return 0;
}

static void notify_on_closed(uv_handle_t *h)
{
	struct rgapsd_notify *n = h->data;

	close(n->fd);
	free(n);
}

void rgapsd_notify_stop(struct rgapsd *d)
{
	struct rgapsd_notify *n = d->notify;

	if (!n)
		return;
	d->notify = NULL;
	notify_send(n, "STOPPING=1\nSTATUS=shutting down");
	uv_timer_stop(&n->timer);
	uv_close((uv_handle_t *)&n->timer, notify_on_closed);
}
