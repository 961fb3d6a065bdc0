/*
 * libFuzzer target for the decoder of the daemon control messages
 * (src/daemon/remote/wire.c, docs/PROTOCOL.md section 4): arbitrary bytes
 * as a peer's MSG payload. The decoder must not crash, leak or read past
 * the input; what it accepts must re-encode to text that decodes to the same
 * message (fields within their documented ranges), and a refusal must say why.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "remote/wire.h"

static void same(const struct rt_wire_msg *a, const struct rt_wire_msg *b)
{
	REQUIRE(a->type == b->type);
	REQUIRE(strcmp(a->transport, b->transport) == 0);
	REQUIRE(memcmp(a->token, b->token, sizeof(a->token)) == 0);
	REQUIRE(strcmp(a->topic, b->topic) == 0);
	REQUIRE(a->ring_id == b->ring_id);
	REQUIRE(a->desc_len == b->desc_len && memcmp(a->desc, b->desc, a->desc_len) == 0);
	REQUIRE(a->ring_size == b->ring_size && a->chunk_size == b->chunk_size);
	REQUIRE(strcmp(a->reason, b->reason) == 0);
	REQUIRE(a->nsubs == b->nsubs);
	for (uint32_t i = 0; i < a->nsubs; i++)
		REQUIRE(strcmp(a->subs[i], b->subs[i]) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rt_wire_msg m, again;
	char why[256] = "";
	char *text;
	int e;

	/* Like the peer plane, which refuses a MSG holding a NUL byte. */
	if (memchr(data, 0, size))
		return 0;
	e = rt_wire_decode((const char *)data, size, &m, why, sizeof(why));
	if (e) {
		REQUIRE(e == -EPROTO || e == -ENOMEM);
		REQUIRE(e == -ENOMEM || why[0]);
		return 0;
	}
	REQUIRE(m.type < RT_MSG_NUM_TYPES);
	REQUIRE(m.ring_id < RT_RINGS);
	REQUIRE(m.desc_len <= RGAPS_RING_DESC_MAX);
	REQUIRE(m.nsubs <= RT_SUBS_MAX);
	if (m.type == RT_MSG_TOPIC_READY)
		REQUIRE(m.ring_size >= RT_RING_SIZE_MIN && m.ring_size <= RT_RING_SIZE_MAX);
	if (m.type != RT_MSG_UNKNOWN) {
		text = rt_wire_encode(&m);
		REQUIRE(text);
		REQUIRE(rt_wire_decode(text, strlen(text), &again, why, sizeof(why)) == 0);
		same(&m, &again);
		rt_wire_free(&again);
		free(text);
	}
	rt_wire_free(&m);
	return 0;
}
