/*
 * metrics_listen: rgapsd's statistics over HTTP, in the Prometheus text format
 * at /metrics (the text of `rgaps stats --prometheus`, src/common/prometheus.c),
 * for a Prometheus server to scrape. Off unless configured.
 *
 * libmicrohttpd serves the connections in a thread of its own; rgapsd's loop
 * only makes the snapshot of its counters that a scrape asks for, through a
 * mailbox (docs/DECISIONS.md 133, docs/ARCHITECTURE.md).
 *
 * Lifecycle, on the loop thread: rgapsd_metrics_start() -> serving ->
 * rgapsd_metrics_stop() (the server's thread joined; the memory goes once the
 * loop has closed the mailbox).
 */
#ifndef RGAPSD_METRICS_H
#define RGAPSD_METRICS_H

#include <stddef.h>

struct rgapsd;
struct rgapsd_metrics;

/* Bounds of what a scraper may make rgapsd hold (docs/CONFIG.md, metrics_listen). */
#define RGAPSD_METRICS_MAX_CONNECTIONS 8
#define RGAPSD_METRICS_MAX_PER_ADDRESS 4
#define RGAPSD_METRICS_REQUEST_MAX (16 * 1024) /* bytes of a request's line and headers */
#define RGAPSD_METRICS_IDLE_S 5		       /* a connection without progress is closed */
#define RGAPSD_METRICS_LOOP_WAIT_MS 5000       /* a scrape waits this long for the loop */
#define RGAPSD_METRICS_FRESH_MS 100	       /* scrapes this close share one snapshot */

/*
 * Serve d's metrics at addr ("HOST:PORT"). 0 and *m_p, or a negative errno with
 * the reason in err (the address is taken, the name does not resolve...).
 */
int rgapsd_metrics_start(struct rgapsd *d, const char *addr, struct rgapsd_metrics **m_p,
			 char *err, size_t errlen);
/* Stop serving: scrapes in progress get 503, connections are closed. NULL is fine. */
void rgapsd_metrics_stop(struct rgapsd_metrics *m);

#endif
