/*
 * The codecs of the membership (wire.h): etcd's JSON gateway replies, the keys
 * under the prefix, the host record. Pure: they read and build text, nothing
 * else.
 */
#include "wire.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/errors.h"
#include "../../common/util.h"
#include "../hostport.h"

#define fail(why, whylen, ...) rgaps__fail(-EINVAL, why, whylen, __VA_ARGS__)
#define MS_STR2(x) #x
#define MS_STR(x) MS_STR2(x)

/* ---- numbers, text, base64 ------------------------------------------------------------------ */

int rgapsd_etcd_int64(const cJSON *o, const char *field, int64_t *v_p)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
	const char *s;
	bool neg = false;
	uint64_t u = 0;
	size_t n = 0;

	if (!v) {
		*v_p = 0;
		return 0;
	}
	if (cJSON_IsNumber(v)) {
		double d = v->valuedouble;

		if (!isfinite(d) || d != floor(d) || fabs(d) >= 9007199254740992.0)
			return -EINVAL;
		*v_p = (int64_t)d;
		return 0;
	}
	if (!cJSON_IsString(v) || !v->valuestring)
		return -EINVAL;
	s = v->valuestring;
	if (*s == '-') {
		neg = true;
		s++;
	}
	for (; s[n]; n++) {
		if (s[n] < '0' || s[n] > '9' || n >= 19)
			return -EINVAL;
		u = u * 10 + (uint64_t)(s[n] - '0');
	}
	if (n == 0 || u > (uint64_t)INT64_MAX)
		return -EINVAL;
	*v_p = neg ? -(int64_t)u : (int64_t)u;
	return 0;
}

char *rgapsd_etcd_b64_encode(const void *bin, size_t len)
{
	size_t n = sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL);
	char *out = malloc(n);

	if (out)
		sodium_bin2base64(out, n, bin, len, sodium_base64_VARIANT_ORIGINAL);
	return out;
}

int rgapsd_etcd_b64_decode(const char *b64, size_t max, char **out_p, size_t *len_p)
{
	size_t n = b64 ? strlen(b64) : 0, len = 0;
	const char *end = NULL;
	char *out;

	*out_p = NULL;
	*len_p = 0;
	if (!b64 || n / 4 * 3 > max + 2)
		return b64 ? -E2BIG : -EINVAL;
	out = malloc(n / 4 * 3 + 3);
	if (!out)
		return -ENOMEM;
	if (sodium_base642bin((unsigned char *)out, n / 4 * 3 + 2, b64, n, NULL, &len, &end,
			      sodium_base64_VARIANT_ORIGINAL) != 0 ||
	    end != b64 + n) {
		free(out);
		return -EINVAL;
	}
	if (len > max) {
		free(out);
		return -E2BIG;
	}
	out[len] = '\0';
	*out_p = out;
	*len_p = len;
	return 0;
}

/* A text from outside, for a message: printable ASCII, bounded, '?' for the rest. */
static void printable(char *dst, size_t len, const char *src)
{
	size_t i = 0;

	if (!len)
		return;
	for (; src && src[i] && i + 1 < len; i++)
		dst[i] = src[i] >= 0x20 && src[i] < 0x7f ? src[i] : '?';
	dst[i] = '\0';
}

static const char *str_field(const cJSON *o, const char *field)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* ---- replies -------------------------------------------------------------------------------- */

bool rgapsd_etcd_reply_error(const cJSON *reply, int *code_p, char *msg, size_t len)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(reply, "error");
	const cJSON *c;
	const char *text;

	if (!e)
		return false;
	if (cJSON_IsObject(e)) { /* in a stream */
		c = cJSON_GetObjectItemCaseSensitive(e, "grpc_code");
		text = str_field(e, "message");
	} else {
		c = cJSON_GetObjectItemCaseSensitive(reply, "code");
		text = str_field(reply, "message");
		if (!text)
			text = cJSON_IsString(e) ? e->valuestring : NULL;
	}
	*code_p = cJSON_IsNumber(c) && c->valuedouble >= 0 && c->valuedouble < 1000
			  ? (int)c->valuedouble
			  : 0;
	printable(msg, len, text ? text : "an error without a message");
	return true;
}

int rgapsd_etcd_header_revision(const cJSON *reply, int64_t *rev_p, char *why, size_t whylen)
{
	const cJSON *h = cJSON_GetObjectItemCaseSensitive(reply, "header");
	int64_t rev;

	if (!cJSON_IsObject(h))
		return fail(why, whylen, "no header");
	if (rgapsd_etcd_int64(h, "revision", &rev) || rev <= 0)
		return fail(why, whylen, "the header's revision is not a positive integer");
	*rev_p = rev;
	return 0;
}

int rgapsd_etcd_lease_grant_parse(const cJSON *reply, int64_t *id_p, int64_t *ttl_p, char *why,
				  size_t whylen)
{
	const char *err = str_field(reply, "error");
	char shown[MS_REASON_MAX + 1];
	int64_t id, ttl;

	if (err && err[0]) {
		printable(shown, sizeof(shown), err);
		return fail(why, whylen, "lease refused: %s", shown);
	}
	if (rgapsd_etcd_int64(reply, "ID", &id) || id <= 0)
		return fail(why, whylen, "the lease's ID is not a positive integer");
	if (rgapsd_etcd_int64(reply, "TTL", &ttl) || ttl <= 0)
		return fail(why, whylen, "the lease's TTL is not a positive integer");
	*id_p = id;
	*ttl_p = ttl;
	return 0;
}

int rgapsd_etcd_keepalive_parse(const cJSON *reply, int64_t *ttl_p, char *why, size_t whylen)
{
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(reply, "result");
	int64_t ttl;

	if (!cJSON_IsObject(r))
		return fail(why, whylen, "no result");
	if (rgapsd_etcd_int64(r, "TTL", &ttl) || ttl < 0)
		return fail(why, whylen, "the TTL left is not a non-negative integer");
	*ttl_p = ttl;
	return 0;
}

static void kv_free(struct rgapsd_etcd_kv *kv)
{
	free(kv->key);
	free(kv->value);
	memset(kv, 0, sizeof(*kv));
}

/* One "kv" object; an absent value is empty (a DELETE's kv has none). */
static int kv_parse(const cJSON *o, struct rgapsd_etcd_kv *kv, char *why, size_t whylen)
{
	const char *k = str_field(o, "key"), *v = str_field(o, "value");
	int e;

	memset(kv, 0, sizeof(*kv));
	if (!cJSON_IsObject(o) || !k)
		return fail(why, whylen, "a key-value without a key");
	if (!v && cJSON_GetObjectItemCaseSensitive(o, "value"))
		return fail(why, whylen, "a value that is not a string");
	e = rgapsd_etcd_b64_decode(k, MS_KEY_MAX, &kv->key, &kv->key_len);
	if (e == -ENOMEM)
		return e;
	if (e)
		return fail(why, whylen, "a key that is %s",
			    e == -E2BIG ? "over " MS_STR(MS_KEY_MAX) " bytes" : "not base64");
	e = rgapsd_etcd_b64_decode(v ? v : "", MS_VALUE_MAX, &kv->value, &kv->value_len);
	if (e == -ENOMEM)
		goto out;
	if (e) {
		e = fail(why, whylen, "a value of %s", e == -E2BIG ? "over 64 KiB" : "no base64");
		goto out;
	}
	if (rgapsd_etcd_int64(o, "mod_revision", &kv->mod_revision) ||
	    rgapsd_etcd_int64(o, "lease", &kv->lease)) {
		e = fail(why, whylen, "a key-value with a revision or lease that is no integer");
		goto out;
	}
	return 0;
out:
	kv_free(kv);
	return e;
}

void rgapsd_etcd_range_free(struct rgapsd_etcd_range *r)
{
	for (size_t i = 0; r->kvs && i < r->n; i++)
		kv_free(&r->kvs[i]);
	free(r->kvs);
	memset(r, 0, sizeof(*r));
}

int rgapsd_etcd_range_parse(const cJSON *reply, struct rgapsd_etcd_range *r, char *why,
			    size_t whylen)
{
	const cJSON *kvs = cJSON_GetObjectItemCaseSensitive(reply, "kvs"), *o;
	const cJSON *more = cJSON_GetObjectItemCaseSensitive(reply, "more");
	int n, e;

	memset(r, 0, sizeof(*r));
	e = rgapsd_etcd_header_revision(reply, &r->revision, why, whylen);
	if (e)
		return e;
	r->more = cJSON_IsTrue(more);
	if (!kvs)
		return 0; /* nothing under the prefix */
	if (!cJSON_IsArray(kvs))
		return fail(why, whylen, "kvs is not an array");
	n = cJSON_GetArraySize(kvs);
	if (n > MS_KVS_MAX)
		return fail(why, whylen, "%d keys in one reply (at most %d)", n, MS_KVS_MAX);
	r->kvs = calloc((size_t)n + 1, sizeof(*r->kvs));
	if (!r->kvs)
		return -ENOMEM;
	cJSON_ArrayForEach(o, kvs)
	{
		e = kv_parse(o, &r->kvs[r->n], why, whylen);
		if (e)
			return e;
		r->n++;
	}
	return 0;
}

void rgapsd_etcd_watch_free(struct rgapsd_etcd_watch_msg *m)
{
	for (size_t i = 0; m->events && i < m->nevents; i++)
		kv_free(&m->events[i].kv);
	free(m->events);
	memset(m, 0, sizeof(*m));
}

static int event_parse(const cJSON *o, struct rgapsd_etcd_event *ev, char *why, size_t whylen)
{
	const char *type = str_field(o, "type");

	if (!cJSON_IsObject(o))
		return fail(why, whylen, "an event that is not an object");
	if (!type || strcmp(type, "PUT") == 0)
		ev->deleted = false;
	else if (strcmp(type, "DELETE") == 0)
		ev->deleted = true;
	else
		return fail(why, whylen, "an event of an unknown type");
	return kv_parse(cJSON_GetObjectItemCaseSensitive(o, "kv"), &ev->kv, why, whylen);
}

int rgapsd_etcd_watch_parse(const cJSON *msg, struct rgapsd_etcd_watch_msg *m, char *why,
			    size_t whylen)
{
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(msg, "result"), *evs, *o;
	int n, e;

	memset(m, 0, sizeof(*m));
	if (!cJSON_IsObject(r))
		return fail(why, whylen, "a watch message without a result");
	e = rgapsd_etcd_header_revision(r, &m->revision, why, whylen);
	if (e)
		return e;
	m->created = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "created"));
	m->canceled = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "canceled"));
	if (rgapsd_etcd_int64(r, "compact_revision", &m->compact_revision) ||
	    m->compact_revision < 0)
		return fail(why, whylen, "a compact_revision that is no revision");
	printable(m->reason, sizeof(m->reason), str_field(r, "cancel_reason"));
	evs = cJSON_GetObjectItemCaseSensitive(r, "events");
	if (!evs)
		return 0;
	if (!cJSON_IsArray(evs))
		return fail(why, whylen, "events is not an array");
	n = cJSON_GetArraySize(evs);
	if (n > MS_KVS_MAX)
		return fail(why, whylen, "%d events in one message (at most %d)", n, MS_KVS_MAX);
	m->events = calloc((size_t)n + 1, sizeof(*m->events));
	if (!m->events)
		return -ENOMEM;
	cJSON_ArrayForEach(o, evs)
	{
		e = event_parse(o, &m->events[m->nevents], why, whylen);
		if (e)
			return e;
		m->nevents++;
	}
	return 0;
}

/* ---- the stream ----------------------------------------------------------------------------- */

int rgapsd_etcd_stream_feed(struct rgapsd_etcd_stream *s, const char *data, size_t n,
			    int (*on_msg)(void *arg, const char *text, size_t len), void *arg)
{
	while (n) {
		const char *nl = memchr(data, '\n', n);
		size_t take = nl ? (size_t)(nl - data) : n;
		int rc;

		if (s->len + take > MS_REPLY_MAX)
			return -E2BIG;
		if (nl && s->len == 0) { /* whole in this piece: no copy */
			if (take && (rc = on_msg(arg, data, take)))
				return rc;
		} else {
			if (s->len + take > s->cap) {
				size_t cap = RGAPS_MAX(s->cap * 2, s->len + take);
				char *b = realloc(s->buf, RGAPS_MIN(cap, (size_t)MS_REPLY_MAX));

				if (!b)
					return -ENOMEM;
				s->buf = b;
				s->cap = RGAPS_MIN(cap, (size_t)MS_REPLY_MAX);
			}
			memcpy(s->buf + s->len, data, take);
			s->len += take;
			if (nl) {
				size_t len = s->len;

				s->len = 0;
				if (len && (rc = on_msg(arg, s->buf, len)))
					return rc;
			}
		}
		if (!nl)
			break;
		data += take + 1;
		n -= take + 1;
	}
	return 0;
}

void rgapsd_etcd_stream_free(struct rgapsd_etcd_stream *s)
{
	free(s->buf);
	memset(s, 0, sizeof(*s));
}

/* ---- keys ----------------------------------------------------------------------------------- */

int rgapsd_membership_hosts_dir(const char *prefix, char *buf, size_t len)
{
	return (size_t)snprintf(buf, len, "%s/hosts/", prefix) < len ? 0 : -ENAMETOOLONG;
}

int rgapsd_etcd_range_end(const char *dir, char *buf, size_t len)
{
	size_t n = strlen(dir);

	/* Every key is at most MS_KEY_MAX bytes: a prefix ending in 0xff has no end to name. */
	if (n == 0 || n >= len || (unsigned char)dir[n - 1] == 0xff)
		return -EINVAL;
	memcpy(buf, dir, n + 1);
	buf[n - 1] = (char)((unsigned char)buf[n - 1] + 1);
	return 0;
}

int rgapsd_membership_key_name(const char *dir, const char *key, size_t key_len, char *name,
			       size_t len)
{
	size_t dl = strlen(dir), nl;

	if (key_len <= dl || memcmp(key, dir, dl) != 0)
		return -EINVAL;
	nl = key_len - dl;
	if (nl > MS_NAME_MAX || nl >= len)
		return -ENAMETOOLONG;
	for (size_t i = 0; i < nl; i++)
		if (key[dl + i] <= 0x20 || key[dl + i] >= 0x7f)
			return -EINVAL;
	memcpy(name, key + dl, nl);
	name[nl] = '\0';
	return rgapsd_hostport_parse(name, NULL, 0, NULL, NULL, 0) == 0 ? 0 : -EINVAL;
}

/* ---- the host record ------------------------------------------------------------------------ */

char *rgapsd_host_record_encode(const struct rgapsd_host_record *r)
{
	cJSON *o = cJSON_CreateObject(), *a, *t;
	char *text = NULL;
	bool ok = o != NULL;

	ok = ok && cJSON_AddNumberToObject(o, "v", MS_RECORD_VERSION);
	ok = ok && cJSON_AddStringToObject(o, "name", r->name);
	ok = ok && cJSON_AddStringToObject(o, "version", r->version);
	ok = ok && cJSON_AddStringToObject(o, "hostname", r->hostname);
	ok = ok && cJSON_AddNumberToObject(o, "pid", r->pid);
	a = ok ? cJSON_AddArrayToObject(o, "transports") : NULL;
	for (uint32_t i = 0; a && i < r->ntransports && i < MS_TRANSPORTS_MAX; i++) {
		t = cJSON_CreateObject();
		ok = t && cJSON_AddItemToArray(a, t) &&
		     cJSON_AddStringToObject(t, "name", r->transports[i].name) &&
		     cJSON_AddNumberToObject(t, "port", r->transports[i].port);
		if (!ok)
			break;
	}
	a = ok && a ? cJSON_AddArrayToObject(o, "gpus") : NULL;
	for (uint32_t i = 0; a && ok && i < r->ngpus && i < MS_GPUS_MAX; i++)
		ok = cJSON_AddItemToArray(a, cJSON_CreateString(r->gpus[i]));
	a = ok && a ? cJSON_AddArrayToObject(o, "subscribes") : NULL;
	for (uint32_t i = 0; a && ok && i < r->ntopics && i < MS_TOPICS_MAX; i++)
		ok = cJSON_AddItemToArray(a, cJSON_CreateString(r->topics[i]));
	if (ok && a)
		text = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return text;
}

void rgapsd_host_record_free(struct rgapsd_host_record *r)
{
	free(r->topics);
	memset(r, 0, sizeof(*r));
}

/* A string field of at most max bytes, printable ASCII (required: absent is an error). */
static int rec_string(const cJSON *o, const char *field, bool required, char *dst, size_t max,
		      char *why, size_t whylen)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
	size_t n;

	dst[0] = '\0';
	if (!v && !required)
		return 0;
	if (!cJSON_IsString(v) || !v->valuestring)
		return fail(why, whylen, "'%s' is not a string", field);
	n = strlen(v->valuestring);
	if (n > max)
		return fail(why, whylen, "'%s' is longer than %zu bytes", field, max);
	for (size_t i = 0; i < n; i++)
		if (v->valuestring[i] < 0x20 || v->valuestring[i] >= 0x7f)
			return fail(why, whylen, "'%s' holds a byte that is not printable", field);
	memcpy(dst, v->valuestring, n + 1);
	return 0;
}

static bool plugin_name_ok(const char *s)
{
	size_t i = 0;

	for (; s[i]; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' ||
		      s[i] == '-'))
			return false;
	return i > 0;
}

static int rec_transports(const cJSON *a, struct rgapsd_host_record *r, char *why, size_t whylen)
{
	const cJSON *t;
	double port;

	if (!a)
		return 0;
	if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > MS_TRANSPORTS_MAX)
		return fail(why, whylen, "'transports' is not an array of at most %d",
			    MS_TRANSPORTS_MAX);
	cJSON_ArrayForEach(t, a)
	{
		struct rgapsd_host_transport *tr = &r->transports[r->ntransports];
		const cJSON *p = cJSON_GetObjectItemCaseSensitive(t, "port");

		if (rec_string(t, "name", true, tr->name, sizeof(tr->name) - 1, why, whylen))
			return -EINVAL;
		if (!plugin_name_ok(tr->name))
			return fail(why, whylen, "transport '%s' is not a plugin name", tr->name);
		port = cJSON_IsNumber(p) ? p->valuedouble : -1;
		if (port != floor(port) || port < 1 || port > 65535)
			return fail(why, whylen, "transport '%s': its port is not 1..65535",
				    tr->name);
		tr->port = (uint16_t)port;
		r->ntransports++;
	}
	return 0;
}

static int rec_gpus(const cJSON *a, struct rgapsd_host_record *r, char *why, size_t whylen)
{
	const cJSON *g;

	if (!a)
		return 0;
	if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > MS_GPUS_MAX)
		return fail(why, whylen, "'gpus' is not an array of at most %d", MS_GPUS_MAX);
	cJSON_ArrayForEach(g, a)
	{
		size_t n = cJSON_IsString(g) ? strlen(g->valuestring) : SIZE_MAX;

		if (n > MS_GPU_ID_MAX)
			return fail(why, whylen, "a GPU that is not a string of at most %d bytes",
				    MS_GPU_ID_MAX);
		for (size_t i = 0; i < n; i++)
			if (g->valuestring[i] <= 0x20 || g->valuestring[i] >= 0x7f)
				return fail(why, whylen, "a GPU name that is not printable");
		memcpy(r->gpus[r->ngpus++], g->valuestring, n + 1);
	}
	return 0;
}

static int rec_topics(const cJSON *a, struct rgapsd_host_record *r, char *why, size_t whylen)
{
	const cJSON *t;
	int n;

	if (!a)
		return 0;
	n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
	if (n < 0 || n > MS_TOPICS_MAX)
		return fail(why, whylen, "'subscribes' is not an array of at most %d",
			    MS_TOPICS_MAX);
	r->topics = calloc((size_t)n + 1, sizeof(*r->topics));
	if (!r->topics)
		return -ENOMEM;
	cJSON_ArrayForEach(t, a)
	{
		if (!cJSON_IsString(t) || !rgaps__topic_name_valid(t->valuestring))
			return fail(why, whylen, "'subscribes' holds an invalid topic name");
		snprintf(r->topics[r->ntopics++], sizeof(r->topics[0]), "%s", t->valuestring);
	}
	return 0;
}

int rgapsd_host_record_decode(const char *text, size_t len, struct rgapsd_host_record *r, char *why,
			      size_t whylen)
{
	const cJSON *v;
	cJSON *o;
	double d;
	int e = -EINVAL;

	memset(r, 0, sizeof(*r));
	if (len > MS_VALUE_MAX)
		return fail(why, whylen, "a record of %zu bytes (at most %u)", len, MS_VALUE_MAX);
	o = cJSON_ParseWithLength(text, len);
	if (!cJSON_IsObject(o)) {
		fail(why, whylen, "not a JSON object");
		goto out;
	}
	v = cJSON_GetObjectItemCaseSensitive(o, "v");
	if (!cJSON_IsNumber(v) || v->valuedouble != MS_RECORD_VERSION) {
		fail(why, whylen, "not a record of version %d", MS_RECORD_VERSION);
		goto out;
	}
	if (rec_string(o, "name", true, r->name, MS_NAME_MAX, why, whylen) ||
	    rec_string(o, "version", false, r->version, MS_VERSION_MAX, why, whylen) ||
	    rec_string(o, "hostname", false, r->hostname, MS_HOSTNAME_MAX, why, whylen))
		goto out;
	if (rgapsd_hostport_parse(r->name, NULL, 0, NULL, NULL, 0) != 0) {
		fail(why, whylen, "its name is not HOST:PORT");
		goto out;
	}
	v = cJSON_GetObjectItemCaseSensitive(o, "pid");
	d = cJSON_IsNumber(v) ? v->valuedouble : 0;
	r->pid = d >= 0 && d <= INT32_MAX && d == floor(d) ? (uint32_t)d : 0;
	e = rec_transports(cJSON_GetObjectItemCaseSensitive(o, "transports"), r, why, whylen);
	if (!e)
		e = rec_gpus(cJSON_GetObjectItemCaseSensitive(o, "gpus"), r, why, whylen);
	if (!e)
		e = rec_topics(cJSON_GetObjectItemCaseSensitive(o, "subscribes"), r, why, whylen);
out:
	cJSON_Delete(o);
	if (e)
		rgapsd_host_record_free(r);
	return e;
}
