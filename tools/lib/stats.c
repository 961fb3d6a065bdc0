/*
 * Lookups in a stats reply (stats.h).
 */
#include "stats.h"

#include <math.h>
#include <string.h>

double stats_num(const cJSON *o, const char *path)
{
	char key[64];

	while (o && *path) {
		const char *dot = strchr(path, '.');
		size_t n = dot ? (size_t)(dot - path) : strlen(path);

		if (n >= sizeof(key))
			return NAN;
		memcpy(key, path, n);
		key[n] = '\0';
		o = cJSON_GetObjectItemCaseSensitive(o, key);
		path += n + (dot ? 1 : 0);
	}
	if (cJSON_IsNumber(o))
		return o->valuedouble;
	if (cJSON_IsBool(o))
		return cJSON_IsTrue(o) ? 1 : 0;
	return NAN;
}

const char *stats_str(const cJSON *o, const char *key)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

const cJSON *stats_get(const cJSON *o, const char *key)
{
	return o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

const cJSON *stats_find(const cJSON *arr, const char *key, const char *val)
{
	const cJSON *e;

	if (!val)
		return NULL;
	cJSON_ArrayForEach(e, arr)
	{
		const char *s = stats_str(e, key);

		if (s && strcmp(s, val) == 0)
			return e;
	}
	return NULL;
}
