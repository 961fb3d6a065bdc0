/*
 * C side of the GPU test programs (see gpu_util.h).
 */
#include "gpu_util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "pattern.h"
#include "rgaps/rgaps.h"

uint64_t gpu_ref_pattern_word(uint64_t counter, uint64_t k)
{
	return rgaps_pattern_word(counter, k);
}

int64_t gpu_ref_pattern_check(const void *buf, size_t size, uint64_t *counter_p)
{
	return rgaps_pattern_check(buf, size, counter_p);
}

int gpu_parse_size(const char *s, uint64_t *v_p)
{
	return rgaps__parse_size(s, v_p);
}

uint64_t gpu_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The topic object named topic in the reply to {"type": type}; NULL if absent. */
static cJSON *topic_of(const char *type, const char *topic, cJSON **reply_p)
{
	char req[64], *text = NULL;
	cJSON *reply, *t;

	snprintf(req, sizeof(req), "{\"type\":\"%s\"}", type);
	if (rgaps_query(req, &text) != 0) {
		free(text);
		return NULL;
	}
	reply = cJSON_Parse(text);
	free(text);
	if (!reply)
		return NULL;
	cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(reply, "topics"))
	{
		cJSON *n = cJSON_GetObjectItemCaseSensitive(t, "name");

		if (cJSON_IsString(n) && strcmp(n->valuestring, topic) == 0) {
			*reply_p = reply;
			return t;
		}
	}
	cJSON_Delete(reply);
	return NULL;
}

int gpu_topic_subscribers(const char *topic)
{
	cJSON *reply = NULL, *t = topic_of("stats", topic, &reply), *s;
	int n = 0;

	if (!t)
		return 0; /* not created yet: nobody attached */
	/* Client subscribers only: rgapsd's forwarder and replicators are subscribers too. */
	cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(t, "subscriber_slots"))
		n += !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "daemon"));
	cJSON_Delete(reply);
	return n;
}

int64_t gpu_topic_pool_used(const char *topic)
{
	cJSON *reply = NULL, *t = topic_of("stats", topic, &reply), *v;
	int64_t n = -ENOENT;

	if (!t)
		return -ENOENT;
	v = cJSON_GetObjectItemCaseSensitive(t, "pool_used");
	if (cJSON_IsNumber(v))
		n = (int64_t)v->valuedouble;
	cJSON_Delete(reply);
	return n;
}
