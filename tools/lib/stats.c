/*
 * Lookups in a stats reply, and its Prometheus text (stats.h): rgapsd's own
 * (src/common/prometheus.c, also behind its /metrics), handed on.
 */
#include "stats.h"

#include <string.h>

#include "../../src/common/prometheus.h"

double tool_stats_num(const cJSON *o, const char *path)
{
	return rgaps__json_num(o, path);
}

const char *tool_stats_str(const cJSON *o, const char *key)
{
	return rgaps__json_str(o, key);
}

int tool_stats_prometheus(const cJSON *reply, FILE *out)
{
	return rgaps__stats_prometheus(reply, out);
}

const cJSON *tool_stats_get(const cJSON *o, const char *key)
{
	return o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

const cJSON *tool_stats_find(const cJSON *arr, const char *key, const char *val)
{
	const cJSON *e;

	if (!val)
		return NULL;
	cJSON_ArrayForEach(e, arr)
	{
		const char *s = tool_stats_str(e, key);

		if (s && strcmp(s, val) == 0)
			return e;
	}
	return NULL;
}
