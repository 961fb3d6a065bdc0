/*
 * libFuzzer target for the record-header check of the receive path
 * (src/daemon/remote/wire.c rt_record_check, docs/PROTOCOL.md section 3):
 * the input is a stream of records as a hostile sender would land them, each
 * a 2-byte length (the landed length, up to 64 + 255 bytes) and that many
 * bytes. Every accepted record must keep the stream's invariants: the
 * sequence numbers follow each other, a chunk lies inside its message, the
 * message is within the topic's maximum and is assembled from consecutive
 * chunks, first to last; a record that says it carries a stage tag holds it;
 * the check reads nothing beyond the landed bytes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "remote/wire.h"

#define MAXMSG 4096u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rt_landing st = { 0 };
	uint64_t assembled = 0;

	while (size >= 2) {
		uint64_t len = (uint64_t)(data[0] | data[1] << 8) % (RGAPS_RECORD_HDR + 256);
		struct rgaps_record_hdr h;
		struct rt_landing before = st;
		char why[256];
		uint8_t *rec;

		data += 2;
		size -= 2;
		if (len > size)
			len = size;
		/* An exact-size copy, so ASan sees any read past the landed bytes. */
		rec = malloc(len ? len : 1);
		REQUIRE(rec);
		memcpy(rec, data, len);
		if (rt_record_check(rec, len, 3, MAXMSG, &st, &h, why, sizeof(why)) == 0) {
			REQUIRE(len >= RGAPS_RECORD_HDR + h.chunk_len +
					       (h.flags & RGAPS_RECORD_TAG ? RGAPS_RECORD_TAG_LEN : 0));
			REQUIRE(h.record_seq == (uint32_t)before.next_record_seq);
			REQUIRE(h.msg_size && h.msg_size <= MAXMSG && h.chunk_len);
			REQUIRE(h.chunk_off + h.chunk_len <= h.msg_size);
			if (h.flags & RGAPS_RECORD_FIRST) {
				REQUIRE(!before.in_msg && h.chunk_off == 0);
				assembled = 0;
			} else {
				REQUIRE(before.in_msg && h.chunk_off == assembled);
			}
			assembled += h.chunk_len;
			REQUIRE(!(h.flags & RGAPS_RECORD_LAST) || assembled == h.msg_size);
			rt_record_advance(&st, &h);
		} else {
			REQUIRE(memcmp(&before, &st, sizeof(st)) == 0);
		}
		free(rec);
		data += len;
		size -= len;
	}
	return 0;
}
