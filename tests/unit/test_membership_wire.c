/*
 * Tests of the membership's codecs (src/daemon/membership/wire.c): etcd's JSON
 * gateway replies as etcd 3.4 sends them (the texts below were taken from a
 * real etcd), their bounds, the watch stream's framing, the keys under the
 * prefix and the host record. What etcd sends is input from outside: every
 * malformed or oversize case is refused with a reason, never trusted.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "membership/wire.h"

static cJSON *J(const char *text)
{
	cJSON *o = cJSON_Parse(text);

	if (!o)
		fail_msg("test JSON does not parse: %s", text);
	return o;
}

static void test_int64(void **state)
{
	static const struct {
		const char *json;
		int rc;
		int64_t v;
	} cases[] = {
		{ "{}", 0, 0 },
		{ "{\"x\":\"123\"}", 0, 123 },
		{ "{\"x\":\"-5\"}", 0, -5 },
		{ "{\"x\":\"9223372036854775807\"}", 0, INT64_MAX },
		{ "{\"x\":\"7587871234567890123\"}", 0, 7587871234567890123 },
		{ "{\"x\":\"9223372036854775808\"}", -EINVAL, 0 },
		{ "{\"x\":\"12345678901234567890\"}", -EINVAL, 0 },
		{ "{\"x\":\"12a\"}", -EINVAL, 0 },
		{ "{\"x\":\"\"}", -EINVAL, 0 },
		{ "{\"x\":\"-\"}", -EINVAL, 0 },
		{ "{\"x\":\" 1\"}", -EINVAL, 0 },
		{ "{\"x\":42}", 0, 42 },
		{ "{\"x\":1.5}", -EINVAL, 0 },
		{ "{\"x\":1e300}", -EINVAL, 0 },
		{ "{\"x\":true}", -EINVAL, 0 },
		{ "{\"x\":null}", -EINVAL, 0 },
		{ "{\"x\":[1]}", -EINVAL, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cJSON *o = J(cases[i].json);
		int64_t v = -99;
		int rc = rgapsd_etcd_int64(o, "x", &v);

		if (rc != cases[i].rc || (rc == 0 && v != cases[i].v))
			fail_msg("%s: rc %d v %lld", cases[i].json, rc, (long long)v);
		cJSON_Delete(o);
	}
}

static void test_base64(void **state)
{
	char *enc = rgapsd_etcd_b64_encode("/a/x", 4), *dec;
	size_t n;

	assert_string_equal(enc, "L2EveA==");
	assert_int_equal(rgapsd_etcd_b64_decode(enc, 16, &dec, &n), 0);
	assert_int_equal(n, 4);
	assert_string_equal(dec, "/a/x");
	free(dec);
	assert_int_equal(rgapsd_etcd_b64_decode(enc, 3, &dec, &n), -E2BIG);
	assert_null(dec);
	free(enc);
	assert_int_equal(rgapsd_etcd_b64_decode("", 16, &dec, &n), 0);
	assert_int_equal(n, 0);
	assert_string_equal(dec, "");
	free(dec);
	assert_int_equal(rgapsd_etcd_b64_decode("L2Eve", 16, &dec, &n), -EINVAL); /* unpadded */
	assert_int_equal(rgapsd_etcd_b64_decode("L2E!eA==", 16, &dec, &n),
			 -EINVAL); /* not the alphabet */
	assert_int_equal(rgapsd_etcd_b64_decode("L2EveA==x", 16, &dec, &n),
			 -EINVAL); /* after the end */
	assert_int_equal(rgapsd_etcd_b64_decode(NULL, 16, &dec, &n), -EINVAL);
	/* Binary with NUL bytes survives, NUL-terminated after its length. */
	enc = rgapsd_etcd_b64_encode("a\0b", 3);
	assert_int_equal(rgapsd_etcd_b64_decode(enc, 16, &dec, &n), 0);
	assert_int_equal(n, 3);
	assert_memory_equal(dec, "a\0b", 4);
	free(dec);
	free(enc);
}

static void test_errors(void **state)
{
	char msg[64];
	int code = -1;
	cJSON *o;

	o = J("{\"error\":\"etcdserver: requested lease not found\","
	      "\"message\":\"etcdserver: requested lease not found\",\"code\":5}");
	assert_true(rgapsd_etcd_reply_error(o, &code, msg, sizeof(msg)));
	assert_int_equal(code, 5);
	assert_string_equal(msg, "etcdserver: requested lease not found");
	cJSON_Delete(o);
	o = J("{\"error\":{\"grpc_code\":14,\"http_code\":503,\"message\":\"etcdserver: no "
	      "leader\",\"http_status\":\"Service Unavailable\"}}");
	assert_true(rgapsd_etcd_reply_error(o, &code, msg, sizeof(msg)));
	assert_int_equal(code, 14);
	assert_string_equal(msg, "etcdserver: no leader");
	cJSON_Delete(o);
	/* Odd shapes: a code out of range is 0, a text with control bytes is shown safely. */
	o = J("{\"error\":\"x\\u0001y\",\"code\":1e9}");
	assert_true(rgapsd_etcd_reply_error(o, &code, msg, sizeof(msg)));
	assert_int_equal(code, 0);
	assert_string_equal(msg, "x?y");
	cJSON_Delete(o);
	o = J("{\"error\":7}");
	assert_true(rgapsd_etcd_reply_error(o, &code, msg, 8));
	assert_string_equal(msg, "an erro");
	cJSON_Delete(o);
	o = J("{\"header\":{\"revision\":\"2\"}}");
	assert_false(rgapsd_etcd_reply_error(o, &code, msg, sizeof(msg)));
	cJSON_Delete(o);
}

#define HDR                                                                \
	"\"header\":{\"cluster_id\":\"324952591200643719\",\"member_id\":" \
	"\"3319814642761637952\",\"revision\":\"4\",\"raft_term\":\"2\"}"

static void test_leases(void **state)
{
	int64_t id, ttl, rev;
	char why[128];
	cJSON *o;

	o = J("{" HDR ",\"ID\":\"2324035659909678597\",\"TTL\":\"5\"}");
	assert_int_equal(rgapsd_etcd_lease_grant_parse(o, &id, &ttl, why, sizeof(why)), 0);
	assert_true(id == 2324035659909678597);
	assert_int_equal(ttl, 5);
	assert_int_equal(rgapsd_etcd_header_revision(o, &rev, why, sizeof(why)), 0);
	assert_int_equal(rev, 4);
	cJSON_Delete(o);
	o = J("{" HDR ",\"ID\":\"0\",\"TTL\":\"5\"}");
	assert_int_equal(rgapsd_etcd_lease_grant_parse(o, &id, &ttl, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "ID"));
	cJSON_Delete(o);
	o = J("{" HDR ",\"ID\":\"1\"}");
	assert_int_equal(rgapsd_etcd_lease_grant_parse(o, &id, &ttl, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "TTL"));
	cJSON_Delete(o);
	o = J("{\"error\":\"too many leases\",\"ID\":\"1\",\"TTL\":\"5\"}");
	assert_int_equal(rgapsd_etcd_lease_grant_parse(o, &id, &ttl, why, sizeof(why)), -EINVAL);
	assert_string_equal(why, "lease refused: too many leases");
	cJSON_Delete(o);

	o = J("{\"result\":{" HDR ",\"ID\":\"2324035659909678604\",\"TTL\":\"5\"}}");
	assert_int_equal(rgapsd_etcd_keepalive_parse(o, &ttl, why, sizeof(why)), 0);
	assert_int_equal(ttl, 5);
	cJSON_Delete(o);
	o = J("{\"result\":{" HDR ",\"ID\":\"1\"}}"); /* a lease that is gone: no TTL */
	assert_int_equal(rgapsd_etcd_keepalive_parse(o, &ttl, why, sizeof(why)), 0);
	assert_int_equal(ttl, 0);
	cJSON_Delete(o);
	o = J("{\"result\":{\"TTL\":\"-1\"}}");
	assert_int_equal(rgapsd_etcd_keepalive_parse(o, &ttl, why, sizeof(why)), -EINVAL);
	cJSON_Delete(o);
	o = J("{" HDR "}");
	assert_int_equal(rgapsd_etcd_keepalive_parse(o, &ttl, why, sizeof(why)), -EINVAL);
	cJSON_Delete(o);

	o = J("{\"header\":{\"revision\":\"0\"}}");
	assert_int_equal(rgapsd_etcd_header_revision(o, &rev, why, sizeof(why)), -EINVAL);
	cJSON_Delete(o);
	o = J("{}");
	assert_int_equal(rgapsd_etcd_header_revision(o, &rev, why, sizeof(why)), -EINVAL);
	assert_string_equal(why, "no header");
	cJSON_Delete(o);
}

static void test_range(void **state)
{
	struct rgapsd_etcd_range r;
	char why[128], *text, *p;
	cJSON *o;

	o = J("{" HDR ",\"kvs\":[{\"key\":\"L2EveA==\",\"create_revision\":\"2\","
	      "\"mod_revision\":\"3\",\"version\":\"1\",\"value\":\"aGk=\",\"lease\":\"77\"},"
	      "{\"key\":\"L2EveQ==\"}],\"count\":\"2\"}");
	assert_int_equal(rgapsd_etcd_range_parse(o, &r, why, sizeof(why)), 0);
	assert_int_equal(r.n, 2);
	assert_int_equal(r.revision, 4);
	assert_false(r.more);
	assert_string_equal(r.kvs[0].key, "/a/x");
	assert_string_equal(r.kvs[0].value, "hi");
	assert_int_equal(r.kvs[0].mod_revision, 3);
	assert_int_equal(r.kvs[0].lease, 77);
	assert_int_equal(r.kvs[1].value_len, 0);
	rgapsd_etcd_range_free(&r);
	cJSON_Delete(o);

	o = J("{" HDR "}"); /* nothing under the prefix */
	assert_int_equal(rgapsd_etcd_range_parse(o, &r, why, sizeof(why)), 0);
	assert_int_equal(r.n, 0);
	rgapsd_etcd_range_free(&r);
	cJSON_Delete(o);

	static const char *const bad[] = {
		"{" HDR ",\"kvs\":{}}",
		"{" HDR ",\"kvs\":[{\"value\":\"aGk=\"}]}",
		"{" HDR ",\"kvs\":[{\"key\":\"***\"}]}",
		"{" HDR ",\"kvs\":[{\"key\":\"YQ==\",\"value\":7}]}",
		"{" HDR ",\"kvs\":[{\"key\":\"YQ==\",\"mod_revision\":\"x\"}]}",
		"{" HDR ",\"kvs\":[7]}",
		"{\"kvs\":[]}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		o = J(bad[i]);
		if (rgapsd_etcd_range_parse(o, &r, why, sizeof(why)) != -EINVAL || !why[0])
			fail_msg("accepted: %s", bad[i]);
		rgapsd_etcd_range_free(&r);
		cJSON_Delete(o);
	}

	/* A key over MS_KEY_MAX and a value over MS_VALUE_MAX, decoded. */
	text = malloc(MS_VALUE_MAX * 2);
	p = text + sprintf(text, "{" HDR ",\"kvs\":[{\"key\":\"");
	for (size_t i = 0; i < (MS_KEY_MAX + 3) / 3 * 4; i++)
		*p++ = 'Q';
	strcpy(p, "\"}]}");
	o = J(text);
	assert_int_equal(rgapsd_etcd_range_parse(o, &r, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "over 1024 bytes"));
	rgapsd_etcd_range_free(&r);
	cJSON_Delete(o);
	p = text + sprintf(text, "{" HDR ",\"kvs\":[{\"key\":\"YQ==\",\"value\":\"");
	for (size_t i = 0; i < (MS_VALUE_MAX + 3) / 3 * 4; i++)
		*p++ = 'Q';
	strcpy(p, "\"}]}");
	o = J(text);
	assert_int_equal(rgapsd_etcd_range_parse(o, &r, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "over 64 KiB"));
	rgapsd_etcd_range_free(&r);
	cJSON_Delete(o);
	free(text);

	/* More keys than MS_KVS_MAX in one reply. */
	text = malloc((size_t)(MS_KVS_MAX + 1) * 16 + 256);
	p = text + sprintf(text, "{" HDR ",\"kvs\":[");
	for (int i = 0; i <= MS_KVS_MAX; i++)
		p += sprintf(p, "%s{\"key\":\"YQ==\"}", i ? "," : "");
	strcpy(p, "]}");
	o = J(text);
	assert_int_equal(rgapsd_etcd_range_parse(o, &r, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "keys in one reply"));
	rgapsd_etcd_range_free(&r);
	cJSON_Delete(o);
	free(text);
}

static void test_watch(void **state)
{
	struct rgapsd_etcd_watch_msg w;
	char why[128];
	cJSON *o;

	o = J("{\"result\":{" HDR ",\"created\":true}}");
	assert_int_equal(rgapsd_etcd_watch_parse(o, &w, why, sizeof(why)), 0);
	assert_true(w.created);
	assert_false(w.canceled);
	assert_int_equal(w.nevents, 0);
	rgapsd_etcd_watch_free(&w);
	cJSON_Delete(o);

	o = J("{\"result\":{" HDR ",\"events\":[{\"kv\":{\"key\":\"L2EveQ==\",\"create_revision\":"
	      "\"3\",\"mod_revision\":\"3\",\"version\":\"1\",\"value\":\"eW8=\",\"lease\":"
	      "\"2324035659909678604\"}},{\"type\":\"DELETE\",\"kv\":{\"key\":\"L2EveQ==\","
	      "\"mod_revision\":\"4\"},\"prev_kv\":{\"key\":\"L2EveQ==\"}}]}}");
	assert_int_equal(rgapsd_etcd_watch_parse(o, &w, why, sizeof(why)), 0);
	assert_int_equal(w.nevents, 2);
	assert_false(w.events[0].deleted);
	assert_string_equal(w.events[0].kv.key, "/a/y");
	assert_string_equal(w.events[0].kv.value, "yo");
	assert_true(w.events[1].deleted);
	assert_int_equal(w.events[1].kv.mod_revision, 4);
	rgapsd_etcd_watch_free(&w);
	cJSON_Delete(o);

	o = J("{\"result\":{" HDR ",\"canceled\":true,\"compact_revision\":\"3\","
	      "\"cancel_reason\":\"mvcc: required revision has been compacted\"}}");
	assert_int_equal(rgapsd_etcd_watch_parse(o, &w, why, sizeof(why)), 0);
	assert_true(w.canceled);
	assert_int_equal(w.compact_revision, 3);
	assert_string_equal(w.reason, "mvcc: required revision has been compacted");
	rgapsd_etcd_watch_free(&w);
	cJSON_Delete(o);

	static const char *const bad[] = {
		"{\"created\":true}",
		"{\"result\":{\"created\":true}}",
		"{\"result\":{" HDR ",\"events\":{}}}",
		"{\"result\":{" HDR
		",\"events\":[{\"type\":\"EXPIRE\",\"kv\":{\"key\":\"YQ==\"}}]}}",
		"{\"result\":{" HDR ",\"events\":[{\"type\":\"PUT\"}]}}",
		"{\"result\":{" HDR ",\"events\":[1]}}",
		"{\"result\":{" HDR ",\"compact_revision\":\"-1\"}}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		o = J(bad[i]);
		if (rgapsd_etcd_watch_parse(o, &w, why, sizeof(why)) != -EINVAL || !why[0])
			fail_msg("accepted: %s", bad[i]);
		rgapsd_etcd_watch_free(&w);
		cJSON_Delete(o);
	}
}

struct got {
	char msgs[8][64];
	int n, stop_at;
};

static int on_msg(void *arg, const char *text, size_t len)
{
	struct got *g = arg;

	if (g->n == g->stop_at)
		return -EINTR;
	assert_true(len < sizeof(g->msgs[0]));
	memcpy(g->msgs[g->n], text, len);
	g->msgs[g->n][len] = '\0';
	g->n++;
	return 0;
}

static void test_stream(void **state)
{
	struct rgapsd_etcd_stream s = { 0 };
	struct got g = { .stop_at = -1 };
	char *big;

	/* Messages cut anywhere, whole ones in one piece, empty lines skipped. */
	assert_int_equal(rgapsd_etcd_stream_feed(&s, "{\"a\":1}\n{\"b\"", 12, on_msg, &g), 0);
	assert_int_equal(g.n, 1);
	assert_int_equal(rgapsd_etcd_stream_feed(&s, ":2}\n\n{\"c\":3}\n{", 14, on_msg, &g), 0);
	assert_int_equal(g.n, 3);
	assert_string_equal(g.msgs[0], "{\"a\":1}");
	assert_string_equal(g.msgs[1], "{\"b\":2}");
	assert_string_equal(g.msgs[2], "{\"c\":3}");
	assert_int_equal(rgapsd_etcd_stream_feed(&s, "}\n", 2, on_msg, &g), 0);
	assert_string_equal(g.msgs[3], "{}");
	/* The callback stops the feed. */
	g.stop_at = 4;
	assert_int_equal(rgapsd_etcd_stream_feed(&s, "x\ny\n", 4, on_msg, &g), -EINTR);
	rgapsd_etcd_stream_free(&s);

	/* A message that never ends is refused once over MS_REPLY_MAX. */
	big = malloc(1u << 20);
	memset(big, 'x', 1u << 20);
	for (int i = 0;; i++) {
		int e = rgapsd_etcd_stream_feed(&s, big, 1u << 20, on_msg, &g);

		if (e) {
			assert_int_equal(e, -E2BIG);
			assert_int_equal(i, MS_REPLY_MAX >> 20);
			break;
		}
		assert_true(i < 64);
	}
	rgapsd_etcd_stream_free(&s);
	free(big);
}

static void test_keys(void **state)
{
	char dir[64], end[64], name[300], key[600];

	assert_int_equal(rgapsd_membership_hosts_dir("/rgaps/prod", dir, sizeof(dir)), 0);
	assert_string_equal(dir, "/rgaps/prod/hosts/");
	assert_int_equal(rgapsd_membership_hosts_dir("/rgaps/prod", end, 10), -ENAMETOOLONG);
	assert_int_equal(rgapsd_etcd_range_end("/rgaps/prod/hosts/", end, sizeof(end)), 0);
	assert_string_equal(end, "/rgaps/prod/hosts0");
	assert_int_equal(rgapsd_etcd_range_end("", end, sizeof(end)), -EINVAL);
	assert_int_equal(rgapsd_etcd_range_end("/a\xff", end, sizeof(end)), -EINVAL);

	assert_int_equal(rgapsd_membership_key_name(dir, "/rgaps/prod/hosts/10.0.0.1:7000", 31,
						    name, sizeof(name)),
			 0);
	assert_string_equal(name, "10.0.0.1:7000");
	assert_int_equal(rgapsd_membership_key_name(dir, "/rgaps/prod/hosts/[fd00::1]:7000", 32,
						    name, sizeof(name)),
			 0);
	assert_string_equal(name, "[fd00::1]:7000");
	assert_int_equal(
		rgapsd_membership_key_name(dir, "/rgaps/prod/hosts/", 18, name, sizeof(name)),
		-EINVAL);
	assert_int_equal(
		rgapsd_membership_key_name(dir, "/rgaps/other/hosts/a:1", 22, name, sizeof(name)),
		-EINVAL);
	assert_int_equal(
		rgapsd_membership_key_name(dir, "/rgaps/prod/hosts/nohost", 24, name, sizeof(name)),
		-EINVAL);
	assert_int_equal(
		rgapsd_membership_key_name(dir, "/rgaps/prod/hosts/a b:1", 23, name, sizeof(name)),
		-EINVAL);
	assert_int_equal(
		rgapsd_membership_key_name(dir, "/rgaps/prod/hosts/a\0b:1", 23, name, sizeof(name)),
		-EINVAL);
	memset(key, 'h', sizeof(key));
	memcpy(key, dir, strlen(dir));
	assert_int_equal(rgapsd_membership_key_name(dir, key, sizeof(key), name, sizeof(name)),
			 -ENAMETOOLONG);
}

static void test_record(void **state)
{
	struct rgapsd_host_record r = { 0 }, back;
	char why[160], *text;
	char(*topics)[RGAPS_TOPIC_NAME_MAX + 1] = calloc(2, sizeof(*topics));

	snprintf(r.name, sizeof(r.name), "10.0.0.1:7000");
	snprintf(r.version, sizeof(r.version), "0.2.0");
	snprintf(r.hostname, sizeof(r.hostname), "node-3");
	r.pid = 4242;
	snprintf(r.transports[0].name, sizeof(r.transports[0].name), "tcp");
	r.transports[0].port = 7001;
	snprintf(r.transports[1].name, sizeof(r.transports[1].name), "verbs");
	r.transports[1].port = 7002;
	r.ntransports = 2;
	snprintf(r.gpus[0], sizeof(r.gpus[0]), "0000:3b:00.0");
	r.ngpus = 1;
	snprintf(topics[0], sizeof(topics[0]), "cam0");
	snprintf(topics[1], sizeof(topics[1]), "lidar.front");
	r.topics = topics;
	r.ntopics = 2;
	text = rgapsd_host_record_encode(&r);
	assert_non_null(text);
	assert_int_equal(rgapsd_host_record_decode(text, strlen(text), &back, why, sizeof(why)), 0);
	assert_string_equal(back.name, r.name);
	assert_string_equal(back.version, "0.2.0");
	assert_string_equal(back.hostname, "node-3");
	assert_int_equal(back.pid, 4242);
	assert_int_equal(back.ntransports, 2);
	assert_string_equal(back.transports[1].name, "verbs");
	assert_int_equal(back.transports[1].port, 7002);
	assert_int_equal(back.ngpus, 1);
	assert_string_equal(back.gpus[0], "0000:3b:00.0");
	assert_int_equal(back.ntopics, 2);
	assert_string_equal(back.topics[1], "lidar.front");
	rgapsd_host_record_free(&back);
	free(text);
	free(topics);

	/* Fields a later version adds are ignored; absent lists are empty. */
	text = "{\"v\":1,\"name\":\"h:1\",\"new\":{\"x\":[1]}}";
	assert_int_equal(rgapsd_host_record_decode(text, strlen(text), &back, why, sizeof(why)), 0);
	assert_int_equal(back.ntransports + back.ngpus + back.ntopics, 0);
	rgapsd_host_record_free(&back);

	static const struct {
		const char *text, *why;
	} bad[] = {
		{ "[]", "not a JSON object" },
		{ "{\"v\":2,\"name\":\"h:1\"}", "not a record of version 1" },
		{ "{\"name\":\"h:1\"}", "not a record of version 1" },
		{ "{\"v\":1}", "'name' is not a string" },
		{ "{\"v\":1,\"name\":\"h\"}", "its name is not HOST:PORT" },
		{ "{\"v\":1,\"name\":\"h:1\",\"version\":\"a\\u0007\"}", "not printable" },
		{ "{\"v\":1,\"name\":\"h:1\",\"transports\":[{\"name\":\"TCP\",\"port\":1}]}",
		  "not a plugin name" },
		{ "{\"v\":1,\"name\":\"h:1\",\"transports\":[{\"name\":\"tcp\",\"port\":0}]}",
		  "its port is not 1..65535" },
		{ "{\"v\":1,\"name\":\"h:1\",\"transports\":[{\"name\":\"tcp\",\"port\":1.5}]}",
		  "its port is not 1..65535" },
		{ "{\"v\":1,\"name\":\"h:1\",\"transports\":{}}", "'transports' is not an array" },
		{ "{\"v\":1,\"name\":\"h:1\",\"gpus\":[\"0000:3b:00.0:extra\"]}", "a GPU that" },
		{ "{\"v\":1,\"name\":\"h:1\",\"gpus\":[3]}", "a GPU that" },
		{ "{\"v\":1,\"name\":\"h:1\",\"subscribes\":[\"-x\"]}", "invalid topic name" },
		{ "{\"v\":1,\"name\":\"h:1\",\"subscribes\":\"a\"}",
		  "'subscribes' is not an array" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why[0] = '\0';
		if (rgapsd_host_record_decode(bad[i].text, strlen(bad[i].text), &back, why,
					      sizeof(why)) != -EINVAL ||
		    !strstr(why, bad[i].why))
			fail_msg("%s: %s", bad[i].text, why);
		assert_null(back.topics);
	}

	/* Bounds: more than 8 transports, 4096 topics, 64 KiB. */
	text = malloc(MS_VALUE_MAX + 64);
	{
		char *p = text + sprintf(text, "{\"v\":1,\"name\":\"h:1\",\"transports\":[");

		for (int i = 0; i <= MS_TRANSPORTS_MAX; i++)
			p += sprintf(p, "%s{\"name\":\"t\",\"port\":1}", i ? "," : "");
		strcpy(p, "]}");
		assert_int_equal(
			rgapsd_host_record_decode(text, strlen(text), &back, why, sizeof(why)),
			-EINVAL);
		p = text + sprintf(text, "{\"v\":1,\"name\":\"h:1\",\"subscribes\":[");
		for (int i = 0; i <= MS_TOPICS_MAX; i++)
			p += sprintf(p, "%s\"t\"", i ? "," : "");
		strcpy(p, "]}");
		assert_int_equal(
			rgapsd_host_record_decode(text, strlen(text), &back, why, sizeof(why)),
			-EINVAL);
		assert_non_null(strstr(why, "at most 4096"));
		memset(text, ' ', MS_VALUE_MAX + 1);
		assert_int_equal(
			rgapsd_host_record_decode(text, MS_VALUE_MAX + 1, &back, why, sizeof(why)),
			-EINVAL);
	}
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_int64),  cmocka_unit_test(test_base64),
		cmocka_unit_test(test_errors), cmocka_unit_test(test_leases),
		cmocka_unit_test(test_range),  cmocka_unit_test(test_watch),
		cmocka_unit_test(test_stream), cmocka_unit_test(test_keys),
		cmocka_unit_test(test_record),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
