/*
 * What the network can make rgapsd hold before a connection has proved
 * itself (docs/CONFIG.md, "Limits on what the network can make rgapsd
 * hold"): connections that have not yet authenticated or presented their
 * token are *pending*, bounded per source address and in all, and a
 * configured peer's address always finds a place, taken from the oldest
 * stranger (or from the oldest of its own address). Refusals anyone can cause
 * are logged at most 5 per 10 s. The peer port (peers.c) and the tcp data
 * ports (remote/transports.c) keep their pending connections here.
 *
 * Loop thread only. A pending connection is named by the caller's pointer.
 */
#ifndef RGAPSD_ADMISSION_H
#define RGAPSD_ADMISSION_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "log.h"

/* Same source host: the IP addresses (an IPv4-mapped IPv6 address is the IPv4 one). */
bool rgapsd_addr_same_host(const struct sockaddr *a, const struct sockaddr *b);

struct rgapsd_admission_stats {
	uint64_t refused;	 /* a stranger found every place taken */
	uint64_t refused_source; /* a stranger's address held its share already */
	uint64_t evicted;	 /* closed to admit a configured peer's address */
	uint64_t dropped;	 /* closed before they proved themselves (deadline, garbage) */
	uint32_t pending;	 /* now */
};

struct rgapsd_pending;

struct rgapsd_admission {
	const char *what; /* "the tcp data port", for the log */
	uint32_t max, max_per_source;
	struct rgapsd_pending *v; /* [n] */
	uint32_t n, cap;
	struct rgapsd_admission_stats st;
	struct rgaps_ratelimit rl;
};

void rgapsd_admission_init(struct rgapsd_admission *a, const char *what, uint32_t max,
			   uint32_t max_per_source);
void rgapsd_admission_fini(struct rgapsd_admission *a);

/*
 * A new connection key from sa (configured: a configured peer's address).
 * 0: keep it; then *victim_p is a pending connection the caller must close
 * first to make room (forgotten here already), or NULL. -EBUSY: refuse it
 * (counted and logged); -ENOMEM.
 */
int rgapsd_admission_admit(struct rgapsd_admission *a, void *key, const struct sockaddr *sa,
			   bool configured, uint64_t now_ms, void **victim_p);
/* key proved itself (why NULL) or was closed before (why says so, logged at most 5 per 10 s). */
void rgapsd_admission_settled(struct rgapsd_admission *a, void *key, const char *why);

#endif
