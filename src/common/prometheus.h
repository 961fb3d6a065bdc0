/*
 * rgapsd's `stats` reply in the Prometheus text exposition format
 * (prometheus.c): rgapsd's /metrics and `rgaps stats --prometheus`.
 */
#ifndef RGAPS_COMMON_PROMETHEUS_H
#define RGAPS_COMMON_PROMETHEUS_H

#include <stdio.h>

#include <cjson/cJSON.h>

/* Write every metric of reply to out. 0, or -1 (not a stats reply, or a write error). */
int rgaps__stats_prometheus(const cJSON *reply, FILE *out);

/* The number at a dotted path below o (booleans read 0 or 1); NAN when absent. */
double rgaps__json_num(const cJSON *o, const char *path);
/* The string member key of o, or NULL. */
const char *rgaps__json_str(const cJSON *o, const char *key);

#endif
