/*
 * Reading rgapsd's `stats` reply (docs/PROTOCOL.md, "stats"), for the tools
 * that show it: `rgaps stats --prometheus` and rgaps-top. The reply is a JSON
 * object; a number is named by its dotted path from the object that holds it
 * ("pool.used", "latency.p99_us"). Nothing here assumes a field exists: an
 * absent or non-numeric one reads as NAN, so an older or newer daemon shows
 * what it has.
 *
 * The parts the tools walk:
 *   daemon          version, instance, uptime_s, requests, connections
 *   topics[]        name, memory, config{...}, counters (published, taken,
 *                   dropped, ...), pool{...}, queue{...}, latency{...},
 *                   subscribers[] and publishers[] (per slot), from_peers{...}
 *   peers           listen, accepted, auth_failures, ..., sessions[] (per
 *                   peer, with links{<transport>: {...}}), rings[] (per ring,
 *                   direction "in" or "out"), forwarders[] (per topic), and
 *                   state_machine{<machine>: {"a->b": count, "->a": entries}}
 */
#ifndef RGAPS_TOOLS_STATS_H
#define RGAPS_TOOLS_STATS_H

#include <stdio.h>

#include <cjson/cJSON.h>

/* The number at a dotted path below o (booleans read 0 or 1); NAN when absent. */
double tool_stats_num(const cJSON *o, const char *path);
/* The string member key of o, or NULL. */
const char *tool_stats_str(const cJSON *o, const char *key);
/* The member key of o, or NULL (o may be NULL). */
const cJSON *tool_stats_get(const cJSON *o, const char *key);
/*
 * The reply in the Prometheus text format, as rgapsd serves it at /metrics
 * (metrics_listen). 0, or -1 (not a stats reply, or a write error).
 */
int tool_stats_prometheus(const cJSON *reply, FILE *out);
/* The element of array arr whose string member key equals val, or NULL. */
const cJSON *tool_stats_find(const cJSON *arr, const char *key, const char *val);

#endif
