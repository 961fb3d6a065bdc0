/*
 * The relay topologies of the remote path as pure functions (no state, no
 * I/O), so that every host computes the same tree from the same view and the
 * unit tests (tests/unit/test_relay_topology.c) can check it.
 *
 * A topic's messages from one origin (the publisher's host) reach the hosts
 * that subscribe to it along a tree rooted at the origin. The hosts are put in
 * one order, the same on every host: the origin first, then the interested
 * hosts by the time each says it subscribed ("joined", from its own clock,
 * advertised with its subscriptions) and then by name. So a host that joins
 * later goes to the end: no host that was there before changes its parent.
 * The mode lays the order out as a tree: star (every host is a child of the
 * origin), chain (host i's parent is host i - 1) or tree:K (host i's parent
 * is host (i - 1) / K, a heap). A host that is down keeps its place, and
 * the hosts below it attach to the nearest live host above them (its
 * "nearest live ancestor"), so a failure moves only the subtree of the failed
 * host, and a host that comes back takes its place again. docs/SCALING.md
 * models the time each mode takes.
 */
#ifndef RGAPSD_REMOTE_TOPOLOGY_H
#define RGAPSD_REMOTE_TOPOLOGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/config.h"

#define RT_TREE_NONE UINT32_MAX /* no such host (no live ancestor) */
#define RT_RELAY_NAME_MAX 12	/* "tree:64" and its NUL, with room */

/* A relay topology: star (fanout 0), chain (1) or tree (fanout K). Never auto. */
struct rt_relay_mode {
	enum rgaps_relay kind;
	uint32_t fanout;
};

/* A relay value ("star", "chain", "tree:K") into *m_p; "auto" and junk: -EINVAL. */
int rt_relay_mode_parse(const char *s, struct rt_relay_mode *m_p);
/* Its name, as rt_relay_mode_parse() reads it (buf of at least RT_RELAY_NAME_MAX). */
const char *rt_relay_mode_name(const struct rt_relay_mode *m, char *buf, size_t len);
bool rt_relay_mode_equal(const struct rt_relay_mode *a, const struct rt_relay_mode *b);

/* One host of a topic's tree, as the caller's view has it. */
struct rt_tree_host {
	const char *name; /* "HOST:PORT", as the daemons name each other */
	uint64_t joined;  /* when it said it subscribed (ms); 0: it did not say */
	bool live;	  /* its session is up (this host itself: always) */
	void *arg;	  /* the caller's */
};

/*
 * Put hosts[0..n) in tree order: by joined, then by name (bytes). The origin
 * is not among them: in the tree it is index 0 and these follow it, host k
 * of this array at index k + 1.
 */
void rt_tree_sort(struct rt_tree_host *hosts, uint32_t n);

/*
 * In a tree of n hosts after the origin (indices 1..n; the origin is 0 and
 * live[0] says whether it is up), the parent of host i (1..n) that is up: the
 * nearest live ancestor; RT_TREE_NONE when no host above it is up.
 */
uint32_t rt_tree_parent(const struct rt_relay_mode *m, const bool *live, uint32_t n, uint32_t i);

/* The position of host i (1..n) in its tree: its depth below the origin (1: a child of it). */
uint32_t rt_tree_depth(const struct rt_relay_mode *m, uint32_t i);

/*
 * What the model predicts a message of size bytes in chunks of chunk bytes
 * takes to reach the last of n hosts under m, in units of one message's time
 * on one link (size / link rate): K * (size + (D - 1) * chunk) / size for K
 * copies leaving each host and a tree D levels deep (docs/SCALING.md).
 */
double rt_relay_predict(const struct rt_relay_mode *m, uint32_t n, uint64_t size, uint64_t chunk);

/*
 * "auto": the mode predicted fastest for n hosts and messages of size bytes
 * in chunks of chunk bytes, of star, chain and tree:K for K 2, 3, 4 and 8;
 * on a tie the one with the fewest hops. why says what was chosen and why.
 */
void rt_relay_auto(uint32_t n, uint64_t size, uint64_t chunk, struct rt_relay_mode *m_p, char *why,
		   size_t whylen);

#endif
