/*
 * Pure helpers of the remote path: hex text for tokens and descriptors (the
 * control messages carry bytes as hex, docs/PROTOCOL.md section 4) and the
 * small cJSON accessors the message handlers use. No state, no I/O.
 */
#include <errno.h>
#include <string.h>

#include <sodium.h>

#include "internal.h"

void rt_hex(const uint8_t *b, size_t n, char *out)
{
	sodium_bin2hex(out, 2 * n + 1, b, n);
}

int rt_unhex(const char *s, uint8_t *b, size_t max, size_t *n_p)
{
	size_t n = s ? strlen(s) : 1, got = 0;

	if (n % 2 || n / 2 > max)
		return -EINVAL;
	if (sodium_hex2bin(b, max, s, n, NULL, &got, NULL) != 0 || got != n / 2)
		return -EINVAL;
	*n_p = got;
	return 0;
}

const char *rt_jstr(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

bool rt_jnum(const cJSON *o, const char *k, double *v)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);

	if (!cJSON_IsNumber(x))
		return false;
	*v = x->valuedouble;
	return true;
}

cJSON *rt_msg_new(const char *type)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "type", type);
	return o;
}
