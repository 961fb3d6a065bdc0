/*
 * The `stats` reply of rgapsd in the Prometheus text exposition format
 * (`rgaps stats --prometheus`; see prometheus.c).
 */
#ifndef RGAPS_TOOLS_PROMETHEUS_H
#define RGAPS_TOOLS_PROMETHEUS_H

#include <stdio.h>

#include <cjson/cJSON.h>

/* Write every metric of reply to out. 0, or -1 (not a stats reply, or a write error). */
int rgaps_stats_prometheus(const cJSON *reply, FILE *out);

#endif
