/*
 * libFuzzer target for what rgapsd reads from etcd (src/daemon/membership/wire.c):
 * arbitrary bytes as a watch stream (cut into messages), each message parsed as
 * every reply the membership reads (watch message, range, lease grant, lease
 * renewal, error), and the whole input as a host record and as a key under the
 * prefix. Whatever a writer of the etcd prefix puts there, every count and
 * length that comes out is within its bound, every text printable, and a
 * record that decodes encodes again to one that decodes the same.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "membership/wire.h"

static void check_kv(const struct rgapsd_etcd_kv *kv)
{
	REQUIRE(kv->key && kv->key_len <= MS_KEY_MAX && kv->key[kv->key_len] == '\0');
	REQUIRE(kv->value && kv->value_len <= MS_VALUE_MAX && kv->value[kv->value_len] == '\0');
}

static void check_text(const char *s, size_t max)
{
	REQUIRE(strlen(s) <= max);
	for (size_t i = 0; s[i]; i++)
		REQUIRE(s[i] >= 0x20 && s[i] < 0x7f);
}

static void check_record(const struct rgapsd_host_record *r)
{
	char *again;
	struct rgapsd_host_record r2;
	char why[256];

	check_text(r->name, MS_NAME_MAX);
	check_text(r->version, MS_VERSION_MAX);
	check_text(r->hostname, MS_HOSTNAME_MAX);
	REQUIRE(r->ntransports <= MS_TRANSPORTS_MAX && r->ngpus <= MS_GPUS_MAX &&
		r->ntopics <= MS_TOPICS_MAX);
	for (uint32_t i = 0; i < r->ntransports; i++)
		REQUIRE(r->transports[i].name[0] && r->transports[i].port >= 1);
	for (uint32_t i = 0; i < r->ntopics; i++)
		REQUIRE(rgaps__topic_name_valid(r->topics[i]));
	again = rgapsd_host_record_encode(r);
	if (!again)
		return;
	REQUIRE(rgapsd_host_record_decode(again, strlen(again), &r2, why, sizeof(why)) == 0);
	REQUIRE(strcmp(r2.name, r->name) == 0 && r2.ntransports == r->ntransports &&
		r2.ngpus == r->ngpus && r2.ntopics == r->ntopics && r2.pid == r->pid);
	rgapsd_host_record_free(&r2);
	free(again);
}

static int on_msg(void *arg, const char *text, size_t len)
{
	cJSON *o = cJSON_ParseWithLength(text, len);
	struct rgapsd_etcd_watch_msg w;
	struct rgapsd_etcd_range r;
	int64_t a, b;
	char why[256], msg[MS_REASON_MAX + 1];
	int code;

	(void)arg;
	REQUIRE(len > 0 && len <= MS_REPLY_MAX && !memchr(text, '\n', len));
	if (!o)
		return 0;
	if (rgapsd_etcd_watch_parse(o, &w, why, sizeof(why)) == 0) {
		REQUIRE(w.nevents <= MS_KVS_MAX && w.revision > 0 && w.compact_revision >= 0);
		check_text(w.reason, MS_REASON_MAX);
		for (size_t i = 0; i < w.nevents; i++)
			check_kv(&w.events[i].kv);
	} else {
		REQUIRE(why[0]);
	}
	rgapsd_etcd_watch_free(&w);
	if (rgapsd_etcd_range_parse(o, &r, why, sizeof(why)) == 0) {
		REQUIRE(r.n <= MS_KVS_MAX && r.revision > 0);
		for (size_t i = 0; i < r.n; i++)
			check_kv(&r.kvs[i]);
	}
	rgapsd_etcd_range_free(&r);
	if (rgapsd_etcd_lease_grant_parse(o, &a, &b, why, sizeof(why)) == 0)
		REQUIRE(a > 0 && b > 0);
	if (rgapsd_etcd_keepalive_parse(o, &a, why, sizeof(why)) == 0)
		REQUIRE(a >= 0);
	if (rgapsd_etcd_reply_error(o, &code, msg, sizeof(msg))) {
		REQUIRE(code >= 0 && code < 1000);
		check_text(msg, MS_REASON_MAX);
	}
	cJSON_Delete(o);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rgapsd_etcd_stream s = { 0 };
	struct rgapsd_host_record rec;
	char why[256], name[MS_NAME_MAX + 1];
	int e;

	e = rgapsd_etcd_stream_feed(&s, (const char *)data, size, on_msg, NULL);
	REQUIRE(e == 0 || e == -E2BIG || e == -ENOMEM);
	REQUIRE(s.len <= MS_REPLY_MAX);
	rgapsd_etcd_stream_free(&s);
	if (rgapsd_host_record_decode((const char *)data, size, &rec, why, sizeof(why)) == 0) {
		check_record(&rec);
		rgapsd_host_record_free(&rec);
	} else {
		REQUIRE(why[0] && rec.topics == NULL);
	}
	if (rgapsd_membership_key_name("/rgaps/hosts/", (const char *)data, size, name,
				       sizeof(name)) == 0)
		check_text(name, MS_NAME_MAX);
	return 0;
}
