/*
 * rgapsd across hosts (docs/ARCHITECTURE.md sections 1, 4, 7): the peer sessions, the
 * data links of the transport plugins, and the two halves of the remote path
 * for every topic:
 *
 *   sender:   a forwarder thread takes each locally published message (a
 *             subscriber slot of the daemon), the loop cuts it into chunks and
 *             writes them as records into the receive ring of every peer that
 *             subscribes to the topic (one transfer per interested host);
 *   receiver: each landed record is checked, copied by the worker into a
 *             block of the local pool (allocated on the first chunk), the ring
 *             space is given back (Head, watermark), and the last chunk
 *             publishes the message to the local subscribers.
 *
 * The code is in src/daemon/remote/, one file per job (remote/internal.h
 * draws the map): sender.c and receiver.c hold the two state machines, each
 * with one driver and a counter per transition, reported by `rgaps stats`.
 */
#ifndef RGAPSD_REMOTE_H
#define RGAPSD_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct rgapsd;
struct rgapsd_config;
struct rgapsd_registry;
struct rgapsd_topic;
struct cJSON;

/*
 * Start peers and transports when the configuration has "listen". 0 or -errno.
 * The remote path registers its hooks with the topic table (rgapsd_topics_hook)
 * until rgapsd_remote_free: the topic table tells it of a publisher's pool that
 * goes, and asks whether it still holds a topic.
 */
int rgapsd_remote_start(struct rgapsd *d);

/* rgapsd --help-config: the options each transport plugin of the registry declares. */
void rgapsd_remote_print_options(FILE *f, const struct rgapsd_registry *reg);

/*
 * The "transport_options" of cfg against what the transport plugins declare
 * (their names were checked by rgapsd_registry_check). 0, or -EINVAL with
 * "key '...': reason" in err.
 */
int rgapsd_remote_check_options(const struct rgapsd_config *cfg,
				const struct rgapsd_registry *reg, char *err, size_t errlen);
void rgapsd_remote_stop(struct rgapsd *d);

/* The number of local client subscribers of a topic changed (advertised to peers). */
void rgapsd_remote_subscribers_changed(struct rgapsd *d, struct rgapsd_topic *t);

/*
 * A publisher attaches: set the topic up with every interested peer. Returns
 * false when nothing is pending (reply now); true when done(arg, status) will
 * be called once the set-ups completed or failed (bounded by a timeout).
 * rgapsd_remote_cancel_attach() withdraws a pending done (connection closed).
 */
bool rgapsd_remote_publisher_attach(struct rgapsd *d, struct rgapsd_topic *t,
				    void (*done)(void *arg, int status), void *arg);
void rgapsd_remote_cancel_attach(struct rgapsd *d, void *arg);

/* Add "peers" and per-topic "remote" sections to a stats reply. */
void rgapsd_remote_stats(struct rgapsd *d, struct cJSON *reply, const char *topic_filter);

/* Free what is left once the loop has closed every handle (rgapsd_fini). */
void rgapsd_remote_free(struct rgapsd *d);

/* A topic is about to be destroyed (shutdown). */
void rgapsd_remote_topic_gone(struct rgapsd *d, struct rgapsd_topic *t);

#endif
