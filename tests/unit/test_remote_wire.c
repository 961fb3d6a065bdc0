/*
 * The remote path's parsers (src/daemon/remote/wire.h): every control message
 * survives encode -> decode unchanged, every malformed one is refused with a
 * reason (type, range and length checks before any conversion), and the
 * record-header check accepts a well-ordered stream and refuses each way a
 * header can be wrong. The JSON texts are written out by hand, as a peer
 * would send them (docs/PROTOCOL.md section 4).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote/wire.h"

static int dec(const char *json, struct rt_wire_msg *m, char *why)
{
	return rt_wire_decode(json, strlen(json), m, why, 256);
}

/* json must be refused, with a reason that contains needle. */
static void refused(const char *json, const char *needle)
{
	struct rt_wire_msg m;
	char why[256] = "";
	int e = dec(json, &m, why);

	if (e != -EPROTO || !strstr(why, needle))
		fail_msg("%s: got %d '%s', expected -EPROTO with '%s'", json, e, why, needle);
}

static void roundtrip(const struct rt_wire_msg *in, struct rt_wire_msg *out)
{
	char *text = rt_wire_encode(in);
	char why[256] = "";

	assert_non_null(text);
	if (dec(text, out, why) != 0)
		fail_msg("%s: %s", text, why);
	assert_int_equal(out->type, in->type);
	free(text);
}

static void test_roundtrip(void **state)
{
	struct rt_wire_msg in, out;

	memset(&in, 0, sizeof(in));
	in.type = RT_MSG_SUBS;
	in.nsubs = 3;
	in.subs = calloc(3, sizeof(*in.subs));
	strcpy(in.subs[0], "a");
	strcpy(in.subs[1], "camera.front_0");
	strcpy(in.subs[2], "x-y");
	roundtrip(&in, &out);
	assert_int_equal(out.nsubs, 3);
	assert_string_equal(out.subs[1], "camera.front_0");
	assert_non_null(out.joined); /* absent (an older daemon): 0 for each topic */
	assert_int_equal(out.joined[2], 0);
	rt_wire_free(&out);
	in.joined = calloc(3, sizeof(*in.joined));
	in.joined[0] = 1700000000123;
	in.joined[2] = RT_SEQ_MAX;
	roundtrip(&in, &out);
	assert_int_equal(out.joined[0], 1700000000123);
	assert_int_equal(out.joined[1], 0);
	assert_int_equal(out.joined[2], RT_SEQ_MAX);
	rt_wire_free(&out);
	rt_wire_free(&in);

	memset(&in, 0, sizeof(in));
	in.type = RT_MSG_LINK_OFFER;
	strcpy(in.transport, "verbs");
	for (int i = 0; i < RGAPS_LINK_TOKEN_LEN; i++)
		in.token[i] = (uint8_t)(0xf0 + i);
	roundtrip(&in, &out);
	assert_string_equal(out.transport, "verbs");
	assert_memory_equal(out.token, in.token, sizeof(in.token));

	for (int t = RT_MSG_LINK_ACCEPT; t <= RT_MSG_LINK_REFUSE; t++) {
		memset(&in, 0, sizeof(in));
		in.type = t;
		strcpy(in.transport, "tcp");
		roundtrip(&in, &out);
		assert_string_equal(out.transport, "tcp");
	}

	memset(&in, 0, sizeof(in));
	in.type = RT_MSG_TOPIC_SETUP;
	strcpy(in.topic, "t1");
	strcpy(in.transport, "tcp");
	in.ring_id = 127;
	in.desc_len = RGAPS_RING_DESC_MAX;
	memset(in.desc, 0xab, in.desc_len);
	in.chunk_size = 4 << 20;
	roundtrip(&in, &out);
	assert_string_equal(out.topic, "t1");
	assert_int_equal(out.ring_id, 127);
	assert_int_equal(out.desc_len, RGAPS_RING_DESC_MAX);
	assert_memory_equal(out.desc, in.desc, in.desc_len);
	assert_int_equal(out.chunk_size, 4 << 20);
	assert_int_equal(out.epoch, 0); /* absent: an older sender */
	assert_int_equal(out.resend, 0);
	in.epoch = RT_SEQ_MAX;
	in.resend = 256 << 20;
	roundtrip(&in, &out);
	assert_int_equal(out.epoch, RT_SEQ_MAX);
	assert_int_equal(out.resend, 256 << 20);
	assert_false(out.has_from);
	in.has_from = true; /* 0 is a value, not an absence */
	roundtrip(&in, &out);
	assert_true(out.has_from);
	assert_int_equal(out.from, 0);
	in.from = 12345678901234;
	roundtrip(&in, &out);
	assert_int_equal(out.from, 12345678901234);
	assert_string_equal(out.origin, ""); /* absent: the sender is the origin, a star */
	assert_string_equal(out.relay, "");
	strcpy(in.origin, "[fe80::1]:7000");
	strcpy(in.relay, "tree:16");
	roundtrip(&in, &out);
	assert_string_equal(out.origin, "[fe80::1]:7000");
	assert_string_equal(out.relay, "tree:16");

	memset(&in, 0, sizeof(in));
	in.type = RT_MSG_TOPIC_READY;
	in.ring_id = 64;
	in.ring_size = RT_RING_SIZE_MAX;
	in.desc_len = 5;
	memcpy(in.desc, "\x01\x02\x03\x04\x05", 5);
	roundtrip(&in, &out);
	assert_int_equal(out.ring_id, 64);
	assert_int_equal(out.ring_size, RT_RING_SIZE_MAX);
	assert_int_equal(out.desc_len, 5);
	assert_false(out.has_next);
	in.has_next = true; /* 0 is a value, not an absence */
	roundtrip(&in, &out);
	assert_true(out.has_next);
	assert_int_equal(out.next, 0);
	in.next = RT_SEQ_MAX;
	roundtrip(&in, &out);
	assert_int_equal(out.next, RT_SEQ_MAX);

	memset(&in, 0, sizeof(in));
	in.type = RT_MSG_TOPIC_REFUSED;
	in.ring_id = 3;
	strcpy(in.reason, "topic 'x': no pool");
	roundtrip(&in, &out);
	assert_string_equal(out.reason, "topic 'x': no pool");
	assert_false(out.by_tree);
	in.by_tree = true;
	roundtrip(&in, &out);
	assert_true(out.by_tree);

	memset(&in, 0, sizeof(in));
	in.type = RT_MSG_TOPIC_TEARDOWN;
	in.ring_id = 0;
	roundtrip(&in, &out);
	assert_int_equal(out.ring_id, 0);
	assert_false(out.moved);
	in.moved = true;
	roundtrip(&in, &out);
	assert_true(out.moved);

	memset(&in, 0, sizeof(in));
	in.type = RT_MSG_TOPIC_LEAVE;
	in.ring_id = 100;
	strcpy(in.reason, "another host sends this topic here now");
	roundtrip(&in, &out);
	assert_int_equal(out.ring_id, 100);
	assert_string_equal(out.reason, "another host sends this topic here now");
}

static void test_refusals(void **state)
{
	char big[RT_SUBS_MAX * 6 + 64];
	size_t n;

	refused("", "not a JSON object");
	refused("[1]", "not a JSON object");
	refused("{\"type\":\"subs\"", "not a JSON object");
	refused("{}", "without a type");
	refused("{\"type\":7}", "without a type");
	refused("{\"type\":\"subs\",\"topics\":[\"a\\u0000b\"]}", "\\u0000");
	refused("{\"type\":\"subs\"}", "'topics' is not an array");
	refused("{\"type\":\"subs\",\"topics\":[\"ok\",\".bad\"]}", "topic 1 is not a topic name");
	refused("{\"type\":\"subs\",\"topics\":[3]}", "topic 0");
	n = (size_t)snprintf(big, sizeof(big), "{\"type\":\"subs\",\"topics\":[");
	for (int i = 0; i <= RT_SUBS_MAX; i++)
		n += (size_t)snprintf(big + n, sizeof(big) - n, "%s\"t\"", i ? "," : "");
	snprintf(big + n, sizeof(big) - n, "]}");
	refused(big, "at most 4096");

	refused("{\"type\":\"link_offer\",\"token\":\"00\"}", "'transport' is missing");
	refused("{\"type\":\"link_offer\",\"transport\":\"TCP\",\"token\":\"00\"}", "not a name");
	refused("{\"type\":\"link_offer\",\"transport\":\"abcdefghijklmnopqrstuvwxyz0123456\","
		"\"token\":\"00\"}", "not a name");
	refused("{\"type\":\"link_offer\",\"transport\":\"\",\"token\":\"00\"}", "not a name");
	refused("{\"type\":\"link_offer\",\"transport\":\"tcp\",\"token\":\"0011\"}",
		"'token' is not 16 bytes");
	refused("{\"type\":\"link_offer\",\"transport\":\"tcp\","
		"\"token\":\"000102030405060708090a0b0c0d0e0g\"}", "'token' is not 16 bytes");
	refused("{\"type\":\"link_offer\",\"transport\":\"tcp\","
		"\"token\":\"000102030405060708090a0b0c0d0e0\"}", "'token' is not 16 bytes");
	refused("{\"type\":\"link_accept\",\"transport\":[]}", "'transport' is not a string");

	refused("{\"type\":\"topic_setup\",\"topic\":\"-x\",\"ring_id\":1,\"transport\":\"tcp\","
		"\"head_desc\":\"\"}", "'topic' is not a topic name");
	refused("{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":3.5,\"transport\":\"tcp\","
		"\"head_desc\":\"\"}", "'ring_id' is not an integer in 0..127");
	refused("{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":-1,\"transport\":\"tcp\","
		"\"head_desc\":\"\"}", "'ring_id' is not an integer");
	refused("{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":128,\"transport\":\"tcp\","
		"\"head_desc\":\"\"}", "'ring_id' is not an integer");
	refused("{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":1e300,\"transport\":\"tcp\","
		"\"head_desc\":\"\"}", "'ring_id' is not an integer");
	refused("{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":\"1\",\"transport\":\"tcp\","
		"\"head_desc\":\"\"}", "'ring_id' is not a number");
	refused("{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":1,\"transport\":\"tcp\"}",
		"'head_desc' is missing");
	snprintf(big, sizeof(big), "{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":1,"
		 "\"transport\":\"tcp\",\"head_desc\":\"%0130d\"}", 0);
	refused(big, "'head_desc' is not at most 64 bytes");
	refused("{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":1,\"transport\":\"tcp\","
		"\"head_desc\":\"\",\"chunk_size\":0}", "'chunk_size' is not an integer");
	refused("{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":1,\"transport\":\"tcp\","
		"\"head_desc\":\"\",\"chunk_size\":2147483648}", "'chunk_size' is not an integer");

	refused("{\"type\":\"topic_ready\",\"ring_id\":1,\"ring_desc\":\"\",\"ring_size\":4096}",
		"'ring_size' is not an integer in 8192..68719476736");
	refused("{\"type\":\"topic_ready\",\"ring_id\":1,\"ring_desc\":\"\","
		"\"ring_size\":1e19}", "'ring_size' is not an integer");
	refused("{\"type\":\"topic_ready\",\"ring_id\":1,\"ring_desc\":\"\","
		"\"ring_size\":65536.5}", "'ring_size' is not an integer");
	refused("{\"type\":\"topic_ready\",\"ring_id\":1,\"ring_size\":65536}", "'ring_desc'");
	refused("{\"type\":\"topic_ready\",\"ring_id\":1,\"ring_desc\":\"\",\"ring_size\":65536,"
		"\"next\":-1}", "'next' is not an integer in 0..999999999999999");
	refused("{\"type\":\"topic_ready\",\"ring_id\":1,\"ring_desc\":\"\",\"ring_size\":65536,"
		"\"next\":1000000000000000}", "'next' is not an integer");
	refused("{\"type\":\"topic_ready\",\"ring_id\":1,\"ring_desc\":\"\",\"ring_size\":65536,"
		"\"next\":null}", "'next' is not a number");
	refused("{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":1,\"transport\":\"tcp\","
		"\"head_desc\":\"\",\"epoch\":0}", "'epoch' is not an integer in 1..");
	refused("{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":1,\"transport\":\"tcp\","
		"\"head_desc\":\"\",\"epoch\":1.5}", "'epoch' is not an integer");
	refused("{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":1,\"transport\":\"tcp\","
		"\"head_desc\":\"\",\"resend\":1e12}", "'resend' is not an integer in 0..68719476736");
	refused("{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":1,\"transport\":\"tcp\","
		"\"head_desc\":\"\",\"from\":-2}", "'from' is not an integer in 0..999999999999999");
	refused("{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":1,\"transport\":\"tcp\","
		"\"head_desc\":\"\",\"from\":\"7\"}", "'from' is not a number");
	refused("{\"type\":\"topic_refused\"}", "'ring_id' is missing");
	refused("{\"type\":\"subs\",\"topics\":[\"a\",\"b\"],\"joined\":[1]}",
		"'joined' is not an array of 2 numbers");
	refused("{\"type\":\"subs\",\"topics\":[\"a\"],\"joined\":[-1]}",
		"joined 0 is not an integer in 0..999999999999999");
	refused("{\"type\":\"subs\",\"topics\":[\"a\"],\"joined\":[\"1\"]}", "joined 0");
	refused("{\"type\":\"subs\",\"topics\":[\"a\"],\"joined\":[0.5]}", "joined 0");
	refused("{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":1,\"transport\":\"tcp\","
		"\"head_desc\":\"\",\"origin\":\"a b:1\"}",
		"'origin' is not a daemon's name");
	refused("{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":1,\"transport\":\"tcp\","
		"\"head_desc\":\"\",\"origin\":\"\"}",
		"'origin' is not a daemon's name");
	refused("{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":1,\"transport\":\"tcp\","
		"\"head_desc\":\"\",\"origin\":7}",
		"'origin'");
	refused("{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":1,\"transport\":\"tcp\","
		"\"head_desc\":\"\",\"relay\":\"auto\"}",
		"'relay' is not");
	refused("{\"type\":\"topic_setup\",\"topic\":\"x\",\"ring_id\":1,\"transport\":\"tcp\","
		"\"head_desc\":\"\",\"relay\":\"tree:1\"}",
		"(K 2 to 64)");
	refused("{\"type\":\"topic_teardown\",\"ring_id\":1,\"moved\":1}",
		"'moved' is not true or false");
	refused("{\"type\":\"topic_refused\",\"ring_id\":1,\"tree\":\"yes\"}",
		"'tree' is not true or false");
	refused("{\"type\":\"topic_leave\"}", "'ring_id' is missing");
	refused("{\"type\":\"topic_teardown\",\"ring_id\":null}", "'ring_id' is not a number");
}

static void test_unknown_and_text(void **state)
{
	struct rt_wire_msg m;
	char why[256];

	assert_int_equal(dec("{\"type\":\"future_thing\",\"x\":1}", &m, why), 0);
	assert_int_equal(m.type, RT_MSG_UNKNOWN);
	assert_string_equal(m.type_name, "future_thing");
	assert_int_equal(dec("{\"type\":\"\\u001b[2Jx\"}", &m, why), 0);
	assert_string_equal(m.type_name, "?[2Jx");
	assert_int_equal(dec("{\"type\":\"topic_refused\",\"ring_id\":2,\"reason\":\"a\\nb\"}",
			     &m, why), 0);
	assert_string_equal(m.reason, "a?b");
	assert_int_equal(dec("{\"type\":\"topic_refused\",\"ring_id\":2}", &m, why), 0);
	assert_string_equal(m.reason, "no reason given");
	/* Not NUL-terminated: only len bytes are read. */
	assert_int_equal(rt_wire_decode("{\"type\":\"topic_teardown\",\"ring_id\":5}garbage", 37,
					&m, why, sizeof(why)), 0);
	assert_int_equal(m.ring_id, 5);
	assert_null(rt_wire_encode(&(struct rt_wire_msg){ .type = RT_MSG_UNKNOWN }));
}

static void test_hex(void **state)
{
	uint8_t b[4];
	char hex[9];
	size_t n;

	rt_hex((const uint8_t *)"\x00\x7f\x80\xff", 4, hex);
	assert_string_equal(hex, "007f80ff");
	assert_int_equal(rt_unhex("007F80ff", b, sizeof(b), &n), 0);
	assert_int_equal(n, 4);
	assert_memory_equal(b, "\x00\x7f\x80\xff", 4);
	assert_int_equal(rt_unhex("", b, sizeof(b), &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(rt_unhex(NULL, b, sizeof(b), &n), -EINVAL);
	assert_int_equal(rt_unhex("abc", b, sizeof(b), &n), -EINVAL);
	assert_int_equal(rt_unhex("0011223344", b, sizeof(b), &n), -EINVAL);
	assert_int_equal(rt_unhex("zz", b, sizeof(b), &n), -EINVAL);
	assert_int_equal(rt_unhex("0 11", b, sizeof(b), &n), -EINVAL);
	assert_true(rt_wire_name_valid("tcp"));
	assert_true(rt_wire_name_valid("crc32c"));
	assert_false(rt_wire_name_valid("Tcp"));
	assert_false(rt_wire_name_valid("a.b"));
	assert_false(rt_wire_name_valid(""));
	assert_false(rt_wire_name_valid(NULL));
}

/* ---------------------------------------------------------------- records */

#define RING 7
#define MAXMSG (1u << 20)

static struct rgaps_record_hdr hdr(uint64_t rseq, uint64_t mseq, uint64_t size, uint64_t off,
				   uint32_t len, uint32_t flags)
{
	return (struct rgaps_record_hdr){ .magic = RGAPS_RECORD_MAGIC, .flags = flags,
					  .msg_seq = mseq, .msg_size = size, .chunk_off = off,
					  .chunk_len = len, .ring_id = RING, .record_seq = rseq };
}

/* h as a record of 64 + chunk_len bytes must pass (and is accounted) or be refused with needle. */
static void check(struct rt_landing *st, struct rgaps_record_hdr h, uint64_t len,
		  const char *needle)
{
	struct rgaps_record_hdr out;
	char why[256] = "";
	int e = rt_record_check(&h, len ? len : RGAPS_RECORD_HDR + h.chunk_len, RING, MAXMSG, st,
				&out, why, sizeof(why));

	if (!needle) {
		if (e)
			fail_msg("refused: %s", why);
		assert_memory_equal(&out, &h, sizeof(h));
		rt_record_advance(st, &out);
	} else if (e != -EPROTO || !strstr(why, needle)) {
		fail_msg("got %d '%s', expected '%s'", e, why, needle);
	}
}

static void test_records(void **state)
{
	struct rt_landing st = { 0 };
	struct rgaps_record_hdr h;
	const uint32_t F = RGAPS_RECORD_FIRST, L = RGAPS_RECORD_LAST, T = RGAPS_RECORD_TAG;

	/* A whole message, then one in three chunks, then one whose record is 64-byte padded. */
	check(&st, hdr(0, 10, 100, 0, 100, F | L), 0, NULL);
	check(&st, hdr(1, 11, 3000, 0, 1000, F), 0, NULL);
	assert_true(st.in_msg);
	check(&st, hdr(2, 11, 3000, 1000, 1000, 0), 0, NULL);
	check(&st, hdr(3, 11, 3000, 2000, 1000, L), 0, NULL);
	assert_false(st.in_msg);
	check(&st, hdr(4, 12, 100, 0, 100, F | L), 192, NULL); /* verbs: aligned footprint */
	assert_int_equal(st.next_record_seq, 5);

	check(&st, hdr(5, 13, 100, 0, 100, F | L), 63, "no header");
	h = hdr(5, 13, 100, 0, 100, F | L);
	h.magic ^= 1;
	check(&st, h, 0, "bad record header");
	h = hdr(5, 13, 100, 0, 100, F | L);
	h.ring_id = RING + 1;
	check(&st, h, 0, "bad record header");
	check(&st, hdr(6, 13, 100, 0, 100, F | L), 0, "record 6 arrived, 5 expected");
	check(&st, hdr(5, 13, 100, 0, 100, F | L), 100, "chunk of 100 bytes in a 100-byte");
	check(&st, hdr(5, 13, 100, 0, 100, F | L), 256, "chunk of 100 bytes in a 256-byte");
	check(&st, hdr(5, 13, 0, 0, 0, F | L), 64, "outside a 0-byte message");
	check(&st, hdr(5, 13, 100, 50, 60, F | L), 0, "outside a 100-byte message");
	check(&st, hdr(5, 13, 100, UINT64_MAX, 60, F | L), 0, "outside");
	check(&st, hdr(5, 13, MAXMSG + 1ull, 0, 100, F), 0, "over the topic's maximum");
	check(&st, hdr(5, 13, 100, 0, 100, F | L | 16), 0, "unknown record flags 0x13");
	check(&st, hdr(5, 13, 200, 0, 100, 0), 0, "chunk out of order");
	check(&st, hdr(5, 13, 200, 0, 100, F | L), 0, "last chunk ends before the message");
	check(&st, hdr(5, 13, 100, 0, 100, F), 0, "complete without a last chunk");

	check(&st, hdr(5, 13, 300, 0, 100, F), 0, NULL);
	check(&st, hdr(6, 13, 300, 0, 100, F), 0, "starts before the last one ended");
	check(&st, hdr(6, 14, 300, 100, 100, 0), 0, "chunk out of order");	/* other message */
	check(&st, hdr(6, 13, 301, 100, 100, 0), 0, "chunk out of order");	/* other size */
	check(&st, hdr(6, 13, 300, 150, 100, 0), 0, "chunk out of order");	/* a hole */
	check(&st, hdr(6, 13, 300, 100, 200, L), 0, NULL);

	/* A stage tag of 8 bytes follows the chunk: the record must hold it. */
	check(&st, hdr(7, 15, 100, 0, 100, F | L | T), 164, "chunk of 100 bytes in a 164-byte");
	check(&st, hdr(7, 15, 100, 0, 100, F | L | T), 172, NULL);
	check(&st, hdr(8, 16, 100, 0, 100, F | L | T), 192, NULL); /* verbs: aligned footprint */
	check(&st, hdr(9, 17, 121, 0, 121, F | L | T), 192, "chunk of 121 bytes in a 192-byte");
}

/* A loss notice: a bare header, FIRST | LAST | LOSS, no chunk, between messages only. */
static void test_loss_records(void **state)
{
	struct rt_landing st = { 0 };
	const uint32_t F = RGAPS_RECORD_FIRST, L = RGAPS_RECORD_LAST, X = RGAPS_RECORD_LOSS;

	check(&st, hdr(0, 10, 100, 0, 100, F | L), 0, NULL);
	check(&st, hdr(1, 25, 0, 0, 0, F | L | X), 0, NULL);
	assert_false(st.in_msg);
	assert_int_equal(st.next_record_seq, 2);
	check(&st, hdr(2, 26, 0, 0, 0, F | L | X), 128, "chunk of 0 bytes in a 128-byte");
	check(&st, hdr(2, 26, 0, 0, 0, F | X), 0, "malformed loss notice");
	check(&st, hdr(2, 26, 0, 0, 0, L | X), 0, "malformed loss notice");
	check(&st, hdr(2, 26, 0, 0, 0, F | L | X | RGAPS_RECORD_TAG), 72, "malformed loss notice");
	check(&st, hdr(2, 26, 1, 0, 0, F | L | X), 0, "malformed loss notice");
	check(&st, hdr(2, 26, 0, 5, 0, F | L | X), 0, "malformed loss notice");
	check(&st, hdr(2, 26, 100, 0, 100, F | L | X), 0, "malformed loss notice");
	check(&st, hdr(2, 26, 0, 0, 0, F | L | X), 0, NULL);
	/* Never inside a message: it would cut the message short. */
	check(&st, hdr(3, 27, 300, 0, 100, F), 0, NULL);
	check(&st, hdr(4, 28, 0, 0, 0, F | L | X), 0, "a loss notice inside a message");
	check(&st, hdr(5, 28, 0, 0, 0, F | L | X), 0, "record 5 arrived, 4 expected");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_unknown_and_text),
		cmocka_unit_test(test_hex),
		cmocka_unit_test(test_records),
		cmocka_unit_test(test_loss_records),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
