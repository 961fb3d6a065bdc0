/*
 * How late rgapsd's loop runs (docs/ARCHITECTURE.md section 2). A probe timer
 * is due every RGAPSD_LAG_PROBE_MS; how late it fires is how long nothing on
 * the loop could run: a callback that took that long, or a host that did not
 * schedule rgapsd at all (a starved CPU, a throttled cgroup, SIGSTOP). Each
 * probe's lateness goes into a histogram and a running total: `rgaps stats`
 * shows them (daemon.loop), and deadlines that judge a peer by its silence
 * leave out the time the loop itself stood still (peers.c), so a daemon that
 * could not listen does not blame the peer it did not hear.
 *
 * Lateness mixes the loop's own work with the host's: a prepare handle also
 * takes the thread's CPU time at every turn of the loop, so the CPU time of
 * each turn (every callback it ran) is known apart from time not scheduled.
 * The longest turn is the longest piece of work on the loop.
 *
 * Lifecycle: rgapsd_looplag_start() -> rgapsd_looplag_stop() (the timer
 * closes with the loop). Loop thread only.
 */
#ifndef RGAPSD_LOOPLAG_H
#define RGAPSD_LOOPLAG_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "../common/lathist.h"
#include "../common/log.h"

#define RGAPSD_LAG_PROBE_MS 100
#define RGAPSD_LAG_STALL_MS 100 /* a probe later than this is a stall (counted, logged) */
#define RGAPSD_LAG_SLACK_MS 10	/* ...and one later than this a standstill (stalled_ns) */

struct cJSON;

struct rgapsd_looplag {
	uv_timer_t probe;
	uv_prepare_t turn;
	bool running;
	uint64_t due_ns;     /* uv_hrtime() when the probe is due next */
	uint64_t stalled_ns; /* lateness of probes past the slack, summed: standstill so far */
	uint64_t last_ns, max_ns;
	uint64_t stalls; /* probes later than RGAPSD_LAG_STALL_MS */
	struct rgaps_lathist hist;
	uint64_t turn_cpu_ns;	       /* the thread's CPU time at the last turn */
	uint64_t turn_cpu_max_ns;      /* CPU time of the longest turn */
	struct rgaps_lathist turn_cpu; /* CPU time of every turn */
	struct rgaps_ratelimit log_rl;
};

void rgapsd_looplag_start(uv_loop_t *loop, struct rgapsd_looplag *lag);
void rgapsd_looplag_stop(struct rgapsd_looplag *lag);
/*
 * Nanoseconds the loop stood still since it started, a standstill still under
 * way included (the probe overdue now). Only probes later than the slack
 * count, so a timer's ordinary jitter adds up to nothing. Differences between
 * two calls give the standstill in between. 0 for a NULL or stopped lag.
 */
uint64_t rgapsd_looplag_stalled_ns(const struct rgapsd_looplag *lag);
/* Its figures as the members of obj (milliseconds): see docs/ARCHITECTURE.md section 9. */
void rgapsd_looplag_stats(const struct rgapsd_looplag *lag, struct cJSON *obj);

#endif
