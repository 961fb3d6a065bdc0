/*
 * rgapsd's membership kept in etcd (docs/ARCHITECTURE.md section 7,
 * "Membership"; the keys and the record in docs/PROTOCOL.md section 6). Each
 * daemon registers itself under PREFIX/hosts/NAME with a lease it keeps
 * alive, lists and then watches PREFIX/hosts/, and tells the peer manager
 * (peers.h) of each daemon that appears (rgapsd_peers_add) and each whose key
 * goes (rgapsd_peers_drop: its session ends, its losses are reported as for a
 * dead peer). The pre-shared key still authenticates every session: etcd says
 * where a daemon is, the key that it is one of ours.
 *
 * When no etcd member answers, every session and topic stays as it is; the
 * membership says so once (log, stats), retries with back-off and, when etcd
 * answers again, lists the hosts once more: those that left meanwhile are
 * dropped, new ones added, and nothing that still works restarts.
 *
 * The code is in src/daemon/membership/: etcd.c (the etcd client on the
 * loop), wire.c (etcd's replies and the host record), membership.c (this).
 * It calls down into the peer manager only; what it publishes of this daemon
 * is handed to it (rgapsd_membership_update), it never asks.
 *
 * Lifecycle: rgapsd_membership_start() -> _update (any number of times) ->
 * rgapsd_membership_stop() (the lease is revoked, so the others drop this
 * daemon at once, within a second at most; memory goes once the loop has
 * closed the handles).
 */
#ifndef RGAPSD_MEMBERSHIP_H
#define RGAPSD_MEMBERSHIP_H

#include <uv.h>

#include "membership/wire.h"

struct cJSON;
struct rgapsd_discovery_config;
struct rgapsd_membership;
struct rgapsd_peers;

/*
 * Start with self (copied: its name is the peer manager's own). 0, or a negative
 * errno with the reason logged (a password or TLS key file refused, no memory).
 * An etcd that does not answer is no error: the membership waits for it.
 */
int rgapsd_membership_start(uv_loop_t *loop, const struct rgapsd_discovery_config *cfg,
			    struct rgapsd_peers *pm, const struct rgapsd_host_record *self,
			    struct rgapsd_membership **m_p);
/* What this daemon says of itself changed (its subscribed topics, its GPUs): put again. */
void rgapsd_membership_update(struct rgapsd_membership *m, const struct rgapsd_host_record *self);
void rgapsd_membership_stop(struct rgapsd_membership *m);
/* The "membership" object of a stats reply. */
void rgapsd_membership_stats(const struct rgapsd_membership *m, struct cJSON *obj);

#endif
