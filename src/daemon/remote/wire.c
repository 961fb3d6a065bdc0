/*
 * Pure codecs of the remote path (wire.h): the daemon control messages and
 * the record header check. Everything from another host is checked here for
 * type and range before any of it is converted or used.
 */
#include "wire.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "../../common/errors.h"
#include "../../common/util.h"

static const char *const type_names[RT_MSG_NUM_TYPES] = {
	[RT_MSG_SUBS] = "subs",
	[RT_MSG_LINK_OFFER] = "link_offer",
	[RT_MSG_LINK_ACCEPT] = "link_accept",
	[RT_MSG_LINK_REFUSE] = "link_refuse",
	[RT_MSG_TOPIC_SETUP] = "topic_setup",
	[RT_MSG_TOPIC_READY] = "topic_ready",
	[RT_MSG_TOPIC_REFUSED] = "topic_refused",
	[RT_MSG_TOPIC_TEARDOWN] = "topic_teardown",
	[RT_MSG_TOPIC_LEAVE] = "topic_leave",
	[RT_MSG_UNKNOWN] = "unknown",
};

const char *rt_wire_type_name(enum rt_msg_type type)
{
	return type < RT_MSG_NUM_TYPES ? type_names[type] : "?";
}

/* ---------------------------------------------------------------- hex */

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

bool rt_wire_name_valid(const char *s)
{
	size_t i;

	for (i = 0; s && s[i]; i++)
		if (i + 1 >= RGAPS_CFG_NAME_MAX ||
		    !((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' ||
		      s[i] == '-'))
			return false;
	return s && i > 0;
}

bool rt_wire_host_valid(const char *s)
{
	size_t i;

	for (i = 0; s && s[i]; i++)
		if (i >= RT_HOST_MAX || s[i] < 0x21 || s[i] > 0x7e)
			return false;
	return s && i > 0;
}

/* ---------------------------------------------------------------- decoding */

#define bad(why, whylen, ...) rgaps__fail(-EPROTO, why, whylen, __VA_ARGS__)

/* Text from the wire made safe to log: printable ASCII, the rest as '?'. */
static void printable(char *dst, size_t cap, const char *src)
{
	size_t i;

	for (i = 0; src[i] && i + 1 < cap; i++)
		dst[i] = src[i] >= 0x20 && src[i] < 0x7f ? src[i] : '?';
	dst[i] = '\0';
}

struct dec {
	const cJSON *o;
	const char *type;
	char *why;
	size_t whylen;
};

static const char *get_str(struct dec *d, const char *k, int *e)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(d->o, k);

	if (!cJSON_IsString(v) || !v->valuestring) {
		*e = bad(d->why, d->whylen, "bad %s: '%s' is %s", d->type, k,
			 v ? "not a string" : "missing");
		return NULL;
	}
	return v->valuestring;
}

/*
 * An integer field in [min, max], checked on the double before any conversion
 * (a double outside the range of uint64_t converts to anything).
 */
static uint64_t get_uint(struct dec *d, const char *k, uint64_t min, uint64_t max, bool optional,
			 int *e)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(d->o, k);
	double x;

	if (!v && optional)
		return 0;
	if (!cJSON_IsNumber(v)) {
		*e = bad(d->why, d->whylen, "bad %s: '%s' is %s", d->type, k,
			 v ? "not a number" : "missing");
		return 0;
	}
	x = v->valuedouble;
	if (!(x >= (double)min && x <= (double)max) || x != floor(x)) {
		*e = bad(d->why, d->whylen, "bad %s: '%s' is not an integer in %llu..%llu", d->type,
			 k, (unsigned long long)min, (unsigned long long)max);
		return 0;
	}
	return (uint64_t)x;
}

/* An optional boolean field: false when absent. */
static bool get_bool(struct dec *d, const char *k, int *e)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(d->o, k);

	if (!v)
		return false;
	if (!cJSON_IsBool(v)) {
		*e = bad(d->why, d->whylen, "bad %s: '%s' is not true or false", d->type, k);
		return false;
	}
	return cJSON_IsTrue(v);
}

static void get_name(struct dec *d, const char *k, char *out, size_t cap, int *e)
{
	const char *s = get_str(d, k, e);

	if (!s)
		return;
	if (!rt_wire_name_valid(s)) {
		*e = bad(d->why, d->whylen, "bad %s: '%s' is not a name (1 to %d of a-z 0-9 _ -)",
			 d->type, k, RGAPS_CFG_NAME_MAX - 1);
		return;
	}
	snprintf(out, cap, "%s", s);
}

static void get_hex(struct dec *d, const char *k, uint8_t *out, size_t max, size_t exact,
		    size_t *n_p, int *e)
{
	const char *s = get_str(d, k, e);
	size_t n = 0;

	if (!s)
		return;
	if (rt_unhex(s, out, max, &n) != 0 || (exact && n != exact)) {
		*e = bad(d->why, d->whylen, "bad %s: '%s' is not %s%zu bytes of hex", d->type, k,
			 exact ? "" : "at most ", exact ? exact : max);
		return;
	}
	*n_p = n;
}

/*
 * subs' optional "joined": for each topic, when its first subscriber attached
 * there (ms on that host's clock), which orders the hosts of a relay tree.
 * Absent (an older daemon): 0 for each.
 */
static int decode_joined(struct dec *d, struct rt_wire_msg *m, int n)
{
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(d->o, "joined"), *it;
	uint32_t i = 0;

	m->joined = calloc((size_t)n + 1, sizeof(*m->joined));
	if (!m->joined)
		return -ENOMEM;
	if (!arr)
		return 0;
	if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n)
		return bad(d->why, d->whylen, "bad subs: 'joined' is not an array of %d numbers",
			   n);
	cJSON_ArrayForEach(it, arr)
	{
		double x = it->valuedouble;

		if (!cJSON_IsNumber(it) || !(x >= 0 && x <= (double)RT_SEQ_MAX) || x != floor(x))
			return bad(d->why, d->whylen,
				   "bad subs: joined %u is not an integer in 0..%llu", i,
				   (unsigned long long)RT_SEQ_MAX);
		m->joined[i++] = (uint64_t)x;
	}
	return 0;
}

static int decode_subs(struct dec *d, struct rt_wire_msg *m)
{
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(d->o, "topics"), *it;
	int n;

	if (!cJSON_IsArray(arr))
		return bad(d->why, d->whylen, "bad subs: 'topics' is not an array");
	n = cJSON_GetArraySize(arr);
	if (n > RT_SUBS_MAX)
		return bad(d->why, d->whylen, "bad subs: %d topics, at most %d", n, RT_SUBS_MAX);
	m->subs = calloc((size_t)n + 1, sizeof(*m->subs));
	if (!m->subs)
		return -ENOMEM;
	cJSON_ArrayForEach(it, arr)
	{
		if (!cJSON_IsString(it) || !rgaps__topic_name_valid(it->valuestring)) {
			free(m->subs);
			m->subs = NULL;
			return bad(d->why, d->whylen, "bad subs: topic %u is not a topic name",
				   m->nsubs);
		}
		snprintf(m->subs[m->nsubs++], sizeof(m->subs[0]), "%s", it->valuestring);
	}
	return decode_joined(d, m, n);
}

/* topic_setup's optional "stages": the stage plugins the sender runs on the topic. */
static int decode_stages(struct dec *d, struct rt_wire_msg *m)
{
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(d->o, "stages"), *it;

	if (!arr)
		return 0;
	if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) > RGAPS_CFG_MAX_STAGES)
		return bad(d->why, d->whylen,
			   "bad %s: 'stages' is not an array of at most %d names", d->type,
			   RGAPS_CFG_MAX_STAGES);
	cJSON_ArrayForEach(it, arr)
	{
		if (!cJSON_IsString(it) || !rt_wire_name_valid(it->valuestring))
			return bad(d->why, d->whylen, "bad %s: stage %u is not a name", d->type,
				   m->nstages);
		snprintf(m->stages[m->nstages++], sizeof(m->stages[0]), "%s", it->valuestring);
	}
	return 0;
}

/* topic_setup's optional "origin" and "relay": whose messages, along which tree. */
static int decode_tree(struct dec *d, struct rt_wire_msg *m)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(d->o, "origin");
	struct rt_relay_mode mode;
	int e = 0;

	if (v) {
		if (!cJSON_IsString(v) || !rt_wire_host_valid(v->valuestring))
			return bad(d->why, d->whylen,
				   "bad topic_setup: 'origin' is not a daemon's name (1 to %d "
				   "printable bytes, no spaces)",
				   RT_HOST_MAX);
		snprintf(m->origin, sizeof(m->origin), "%s", v->valuestring);
	}
	if (!cJSON_GetObjectItemCaseSensitive(d->o, "relay"))
		return 0;
	v = cJSON_GetObjectItemCaseSensitive(d->o, "relay");
	if (!cJSON_IsString(v) || rt_relay_mode_parse(v->valuestring, &mode) != 0)
		return bad(d->why, d->whylen,
			   "bad topic_setup: 'relay' is not \"star\", \"chain\" or \"tree:K\" "
			   "(K 2 to %d)",
			   RGAPS_RELAY_FANOUT_MAX);
	rt_relay_mode_name(&mode, m->relay, sizeof(m->relay));
	return e;
}

int rt_wire_decode(const char *json, size_t len, struct rt_wire_msg *m, char *why, size_t whylen)
{
	struct dec d = { .why = why, .whylen = whylen };
	const char *type, *s;
	cJSON *o;
	int e = 0;

	memset(m, 0, sizeof(*m));
	/* cJSON would cut a string at a "\u0000" escape: refuse such text, never guess. */
	if (rgaps_json_nul_escape(json, len) >= 0)
		return bad(why, whylen, "control message holds a \\u0000 escape");
	o = cJSON_ParseWithLength(json, len);
	if (!cJSON_IsObject(o)) {
		cJSON_Delete(o);
		return bad(why, whylen, "control message is not a JSON object");
	}
	d.o = o;
	type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "type"));
	if (!type) {
		cJSON_Delete(o);
		return bad(why, whylen, "control message without a type");
	}
	for (m->type = 0; m->type < RT_MSG_UNKNOWN; m->type++)
		if (strcmp(type, type_names[m->type]) == 0)
			break;
	d.type = type_names[m->type];
	switch (m->type) {
	case RT_MSG_SUBS:
		e = decode_subs(&d, m);
		break;
	case RT_MSG_LINK_OFFER: {
		size_t n;

		get_name(&d, "transport", m->transport, sizeof(m->transport), &e);
		if (!e)
			get_hex(&d, "token", m->token, sizeof(m->token), sizeof(m->token), &n, &e);
		break;
	}
	case RT_MSG_LINK_ACCEPT:
	case RT_MSG_LINK_REFUSE:
		get_name(&d, "transport", m->transport, sizeof(m->transport), &e);
		break;
	case RT_MSG_TOPIC_SETUP:
		s = get_str(&d, "topic", &e);
		if (s && !rgaps__topic_name_valid(s))
			e = bad(why, whylen, "bad topic_setup: 'topic' is not a topic name");
		else if (s)
			snprintf(m->topic, sizeof(m->topic), "%s", s);
		if (!e)
			m->ring_id = (uint32_t)get_uint(&d, "ring_id", 0, RT_RINGS - 1, false, &e);
		if (!e)
			get_name(&d, "transport", m->transport, sizeof(m->transport), &e);
		if (!e)
			get_hex(&d, "head_desc", m->desc, sizeof(m->desc), 0, &m->desc_len, &e);
		if (!e)
			m->chunk_size = get_uint(&d, "chunk_size", 1, RT_CHUNK_SIZE_MAX, true, &e);
		if (!e)
			e = decode_stages(&d, m);
		if (!e)
			m->epoch = get_uint(&d, "epoch", 1, RT_SEQ_MAX, true, &e);
		if (!e)
			m->resend = get_uint(&d, "resend", 0, RT_RESEND_MAX, true, &e);
		m->has_from = cJSON_GetObjectItemCaseSensitive(o, "from") != NULL;
		if (!e && m->has_from)
			m->from = get_uint(&d, "from", 0, RT_SEQ_MAX, false, &e);
		if (!e)
			e = decode_tree(&d, m);
		break;
	case RT_MSG_TOPIC_READY:
		m->ring_id = (uint32_t)get_uint(&d, "ring_id", 0, RT_RINGS - 1, false, &e);
		if (!e)
			m->ring_size = get_uint(&d, "ring_size", RT_RING_SIZE_MIN, RT_RING_SIZE_MAX,
						false, &e);
		if (!e)
			get_hex(&d, "ring_desc", m->desc, sizeof(m->desc), 0, &m->desc_len, &e);
		m->has_next = cJSON_GetObjectItemCaseSensitive(o, "next") != NULL;
		if (!e && m->has_next)
			m->next = get_uint(&d, "next", 0, RT_SEQ_MAX, false, &e);
		break;
	case RT_MSG_TOPIC_REFUSED:
	case RT_MSG_TOPIC_LEAVE:
		m->ring_id = (uint32_t)get_uint(&d, "ring_id", 0, RT_RINGS - 1, false, &e);
		s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "reason"));
		printable(m->reason, sizeof(m->reason), s ? s : "no reason given");
		if (!e && m->type == RT_MSG_TOPIC_REFUSED)
			m->by_tree = get_bool(&d, "tree", &e);
		break;
	case RT_MSG_TOPIC_TEARDOWN:
		m->ring_id = (uint32_t)get_uint(&d, "ring_id", 0, RT_RINGS - 1, false, &e);
		if (!e)
			m->moved = get_bool(&d, "moved", &e);
		break;
	case RT_MSG_UNKNOWN:
	case RT_MSG_NUM_TYPES:
		printable(m->type_name, sizeof(m->type_name), type);
		break;
	}
	cJSON_Delete(o);
	if (e)
		rt_wire_free(m);
	return e;
}

void rt_wire_free(struct rt_wire_msg *m)
{
	free(m->subs);
	free(m->joined);
	m->subs = NULL;
	m->joined = NULL;
	m->nsubs = 0;
}

/* ---------------------------------------------------------------- encoding */

static bool add_hex(cJSON *o, const char *k, const uint8_t *b, size_t n)
{
	char hex[2 * RGAPS_RING_DESC_MAX + 1];

	rt_hex(b, RGAPS_MIN(n, (size_t)RGAPS_RING_DESC_MAX), hex);
	return cJSON_AddStringToObject(o, k, hex) != NULL;
}

char *rt_wire_encode(const struct rt_wire_msg *m)
{
	cJSON *o = cJSON_CreateObject(), *arr;
	bool ok = o && m->type < RT_MSG_UNKNOWN &&
		  cJSON_AddStringToObject(o, "type", type_names[m->type]);
	char *text = NULL;

	switch (ok ? m->type : RT_MSG_UNKNOWN) {
	case RT_MSG_SUBS:
		arr = cJSON_AddArrayToObject(o, "topics");
		ok = arr != NULL;
		for (uint32_t i = 0; ok && i < m->nsubs; i++)
			ok = cJSON_AddItemToArray(arr, cJSON_CreateString(m->subs[i]));
		if (ok && m->joined) {
			arr = cJSON_AddArrayToObject(o, "joined");
			ok = arr != NULL;
			for (uint32_t i = 0; ok && i < m->nsubs; i++)
				ok = cJSON_AddItemToArray(arr,
							  cJSON_CreateNumber((double)m->joined[i]));
		}
		break;
	case RT_MSG_LINK_OFFER:
		ok = cJSON_AddStringToObject(o, "transport", m->transport) &&
		     add_hex(o, "token", m->token, sizeof(m->token));
		break;
	case RT_MSG_LINK_ACCEPT:
	case RT_MSG_LINK_REFUSE:
		ok = cJSON_AddStringToObject(o, "transport", m->transport) != NULL;
		break;
	case RT_MSG_TOPIC_SETUP:
		ok = cJSON_AddStringToObject(o, "topic", m->topic) &&
		     cJSON_AddNumberToObject(o, "ring_id", m->ring_id) &&
		     cJSON_AddStringToObject(o, "transport", m->transport) &&
		     add_hex(o, "head_desc", m->desc, m->desc_len) &&
		     (!m->chunk_size ||
		      cJSON_AddNumberToObject(o, "chunk_size", (double)m->chunk_size));
		if (ok && m->nstages) {
			arr = cJSON_AddArrayToObject(o, "stages");
			ok = arr != NULL;
			for (uint32_t i = 0; ok && i < m->nstages && i < RGAPS_CFG_MAX_STAGES; i++)
				ok = cJSON_AddItemToArray(arr, cJSON_CreateString(m->stages[i]));
		}
		ok = ok && (!m->epoch || cJSON_AddNumberToObject(o, "epoch", (double)m->epoch)) &&
		     (!m->resend || cJSON_AddNumberToObject(o, "resend", (double)m->resend)) &&
		     (!m->has_from || cJSON_AddNumberToObject(o, "from", (double)m->from)) &&
		     (!m->origin[0] || cJSON_AddStringToObject(o, "origin", m->origin)) &&
		     (!m->relay[0] || cJSON_AddStringToObject(o, "relay", m->relay));
		break;
	case RT_MSG_TOPIC_READY:
		ok = cJSON_AddNumberToObject(o, "ring_id", m->ring_id) &&
		     add_hex(o, "ring_desc", m->desc, m->desc_len) &&
		     cJSON_AddNumberToObject(o, "ring_size", (double)m->ring_size) &&
		     (!m->has_next || cJSON_AddNumberToObject(o, "next", (double)m->next));
		break;
	case RT_MSG_TOPIC_REFUSED:
	case RT_MSG_TOPIC_LEAVE:
		ok = cJSON_AddNumberToObject(o, "ring_id", m->ring_id) &&
		     cJSON_AddStringToObject(o, "reason", m->reason) &&
		     (!m->by_tree || cJSON_AddBoolToObject(o, "tree", true));
		break;
	case RT_MSG_TOPIC_TEARDOWN:
		ok = cJSON_AddNumberToObject(o, "ring_id", m->ring_id) &&
		     (!m->moved || cJSON_AddBoolToObject(o, "moved", true));
		break;
	case RT_MSG_UNKNOWN:
	case RT_MSG_NUM_TYPES:
		break;
	}
	if (ok)
		text = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return text;
}

/* ---------------------------------------------------------------- records */

int rt_record_check(const void *rec, uint64_t len, uint32_t ring_id, uint64_t max_message_size,
		    const struct rt_landing *st, struct rgaps_record_hdr *h_p, char *why,
		    size_t whylen)
{
	struct rgaps_record_hdr h;
	uint64_t need;

	if (len < RGAPS_RECORD_HDR)
		return bad(why, whylen, "ring %u: record of %llu bytes has no header", ring_id,
			   (unsigned long long)len);
	memcpy(&h, rec, sizeof(h));
	need = RGAPS_RECORD_HDR + (uint64_t)h.chunk_len +
	       (h.flags & RGAPS_RECORD_TAG ? RGAPS_RECORD_TAG_LEN : 0);
	if (h.magic != RGAPS_RECORD_MAGIC || h.ring_id != ring_id)
		return bad(why, whylen, "ring %u: bad record header", ring_id);
	if (h.record_seq != (uint32_t)st->next_record_seq) /* 32 bits on the wire */
		return bad(why, whylen, "ring %u: record %llu arrived, %llu expected", ring_id,
			   (unsigned long long)h.record_seq,
			   (unsigned long long)(uint32_t)st->next_record_seq);
	if (need > len || RGAPS_ALIGN_UP(need, 64) != RGAPS_ALIGN_UP(len, 64))
		return bad(why, whylen, "ring %u: chunk of %u bytes in a %llu-byte record", ring_id,
			   h.chunk_len, (unsigned long long)len);
	if (h.flags & RGAPS_RECORD_LOSS) {
		if (h.flags != (RGAPS_RECORD_FIRST | RGAPS_RECORD_LAST | RGAPS_RECORD_LOSS) ||
		    h.msg_size || h.chunk_len || h.chunk_off)
			return bad(why, whylen, "ring %u: malformed loss notice", ring_id);
		if (st->in_msg)
			return bad(why, whylen, "ring %u: a loss notice inside a message", ring_id);
		*h_p = h;
		return 0;
	}
	if (h.msg_size == 0 || h.chunk_len == 0 || h.chunk_off > h.msg_size ||
	    h.chunk_len > h.msg_size - h.chunk_off)
		return bad(why, whylen, "ring %u: chunk [%llu, +%u) outside a %llu-byte message",
			   ring_id, (unsigned long long)h.chunk_off, h.chunk_len,
			   (unsigned long long)h.msg_size);
	if (h.msg_size > max_message_size)
		return bad(why, whylen,
			   "ring %u: message of %llu bytes over the topic's maximum %llu", ring_id,
			   (unsigned long long)h.msg_size, (unsigned long long)max_message_size);
	if (h.flags & ~(RGAPS_RECORD_FIRST | RGAPS_RECORD_LAST | RGAPS_RECORD_TAG))
		return bad(why, whylen, "ring %u: unknown record flags 0x%x", ring_id, h.flags);
	if (h.flags & RGAPS_RECORD_FIRST) {
		if (st->in_msg || h.chunk_off != 0)
			return bad(why, whylen,
				   "ring %u: a message starts before the last one ended", ring_id);
	} else if (!st->in_msg || h.msg_seq != st->msg_seq || h.msg_size != st->msg_size ||
		   h.chunk_off != st->next_off) {
		return bad(why, whylen, "ring %u: chunk out of order", ring_id);
	}
	if ((h.flags & RGAPS_RECORD_LAST) && h.chunk_off + h.chunk_len != h.msg_size)
		return bad(why, whylen, "ring %u: last chunk ends before the message", ring_id);
	if (!(h.flags & RGAPS_RECORD_LAST) && h.chunk_off + h.chunk_len == h.msg_size)
		return bad(why, whylen, "ring %u: message complete without a last chunk", ring_id);
	*h_p = h;
	return 0;
}

void rt_record_advance(struct rt_landing *st, const struct rgaps_record_hdr *h)
{
	st->next_record_seq++;
	st->in_msg = !(h->flags & RGAPS_RECORD_LAST);
	st->msg_seq = h->msg_seq;
	st->msg_size = h->msg_size;
	st->next_off = h->chunk_off + h->chunk_len;
}
