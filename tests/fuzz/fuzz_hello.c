/*
 * libFuzzer target for the peer handshake codec (src/daemon/peers/wire.c):
 * arbitrary bytes as a HELLO and as an ERROR payload, as an unauthenticated
 * network neighbour sends them. A decoded HELLO must carry the version this
 * daemon speaks and a 1..255-byte printable name, and must encode back to
 * the very bytes it came from; a refusal must give a code and a reason; an
 * ERROR's reason must come out printable and bounded.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "peers/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t again[PEERS_HELLO_MAX];
	struct peer_hello h;
	char why[256] = "", reason[201];
	uint32_t len = size > UINT32_MAX ? UINT32_MAX : (uint32_t)size;
	int e = rgapsd_peer_hello_decode(data, len, &h, why, sizeof(why));

	if (e == 0) {
		size_t nl = strlen(h.name), n;

		REQUIRE(h.version == PEERS_VERSION && nl >= 1 && nl <= PEERS_NAME_MAX);
		for (size_t i = 0; i < nl; i++)
			REQUIRE(h.name[i] > 0x20 && h.name[i] < 0x7f);
		n = rgapsd_peer_hello_encode(again, h.nonce, h.name);
		REQUIRE(n == size);
		/* Only the flags field may differ: it is ignored and always sent as 0. */
		REQUIRE(memcmp(again, data, 10) == 0 && memcmp(again + 12, data + 12, n - 12) == 0);
	} else {
		REQUIRE((e == -PE_VERSION || e == -PE_PROTOCOL) && why[0]);
	}
	(void)rgapsd_peer_error_decode(data, len, reason, sizeof(reason));
	REQUIRE(strlen(reason) <= 200);
	for (size_t i = 0; reason[i]; i++)
		REQUIRE(reason[i] >= 0x20 && reason[i] < 0x7f);
	return 0;
}
