/*
 * The peer handshake codec (src/daemon/peers/wire.h) against the bytes of
 * docs/PROTOCOL.md section 2, written out here by hand: HELLO encodes to the
 * documented layout and decodes back, every malformed HELLO is refused with
 * its code and reason, the AUTH proof is the documented HMAC transcript and
 * changes with every input, and texts from the wire come out printable.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <sodium.h>
#include <string.h>

#include "peers/wire.h"

static const uint8_t NONCE[PEERS_NONCE] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
					    17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32 };

static void test_hello_layout(void **state)
{
	uint8_t b[PEERS_HELLO_MAX];
	struct peer_hello h;
	char why[128];
	size_t n = rgapsd_peer_hello_encode(b, NONCE, "10.0.0.2:7400");

	/* magic[8] "RGAPSPR1", version u16 = 1, flags u16 = 0, nonce[32], name_len u16, name */
	assert_int_equal(n, 8 + 2 + 2 + 32 + 2 + 13);
	assert_memory_equal(b, "RGAPSPR1\x01\x00\x00\x00", 12);
	assert_memory_equal(b + 12, NONCE, 32);
	assert_memory_equal(b + 44, "\x0d\x00" "10.0.0.2:7400", 15);
	assert_int_equal(rgapsd_peer_hello_decode(b, (uint32_t)n, &h, why, sizeof(why)), 0);
	assert_int_equal(h.version, 1);
	assert_memory_equal(h.nonce, NONCE, 32);
	assert_string_equal(h.name, "10.0.0.2:7400");
	assert_int_equal(rgapsd_peer_hello_encode(b, NONCE, ""), 0);
}

static void hello_refused(uint8_t *b, uint32_t len, int code, const char *needle)
{
	struct peer_hello h;
	char why[128] = "";
	int e = rgapsd_peer_hello_decode(b, len, &h, why, sizeof(why));

	if (e != -code || !strstr(why, needle))
		fail_msg("got %d '%s', expected %d '%s'", e, why, -code, needle);
}

static void test_hello_refusals(void **state)
{
	uint8_t b[PEERS_HELLO_MAX + 8];
	size_t n = rgapsd_peer_hello_encode(b, NONCE, "peer:1");

	hello_refused(b, 7, PE_VERSION, "bad magic");
	hello_refused((uint8_t *)"GET / HTTP/1.0\r\n\r\n", 18, PE_VERSION, "bad magic");
	hello_refused(b, PEERS_HELLO_FIXED - 1, PE_PROTOCOL, "truncated");
	b[8] = 2;
	hello_refused(b, (uint32_t)n, PE_VERSION, "version 2 not supported");
	b[8] = 1;
	hello_refused(b, (uint32_t)n - 1, PE_PROTOCOL, "a name of 6 bytes in 51 bytes");
	hello_refused(b, (uint32_t)n + 1, PE_PROTOCOL, "a name of 6 bytes in 53 bytes");
	b[44] = 0;
	hello_refused(b, PEERS_HELLO_FIXED, PE_PROTOCOL, "a name of 0 bytes");
	b[44] = 0;
	b[45] = 1; /* 256 */
	hello_refused(b, PEERS_HELLO_FIXED + 256, PE_PROTOCOL, "a name of 256 bytes");
	n = rgapsd_peer_hello_encode(b, NONCE, "a b");
	hello_refused(b, (uint32_t)n, PE_PROTOCOL, "byte 0x20");
	n = rgapsd_peer_hello_encode(b, NONCE, "a\x7f");
	hello_refused(b, (uint32_t)n, PE_PROTOCOL, "byte 0x7f");
}

/* The transcript of docs/PROTOCOL.md 2, computed independently with libsodium's one-shot API. */
static void reference_mac(const uint8_t *key, size_t keylen, uint8_t role, const char *from,
			  const char *to, const uint8_t *fn, const uint8_t *tn, uint8_t *mac)
{
	uint8_t t[512];
	size_t n = 0, fl = strlen(from), tl = strlen(to);
	crypto_auth_hmacsha256_state st;

	memcpy(t + n, "rgaps-peer-auth-v1", 18), n += 18;
	t[n++] = 1, t[n++] = 0;
	t[n++] = role;
	t[n++] = (uint8_t)fl, t[n++] = (uint8_t)(fl >> 8);
	memcpy(t + n, from, fl), n += fl;
	t[n++] = (uint8_t)tl, t[n++] = (uint8_t)(tl >> 8);
	memcpy(t + n, to, tl), n += tl;
	memcpy(t + n, fn, 32), n += 32;
	memcpy(t + n, tn, 32), n += 32;
	crypto_auth_hmacsha256_init(&st, key, keylen);
	crypto_auth_hmacsha256_update(&st, t, n);
	crypto_auth_hmacsha256_final(&st, mac);
}

static void test_auth_mac(void **state)
{
	uint8_t key[48], other[PEERS_NONCE], a[PEERS_MAC], b[PEERS_MAC], want[PEERS_MAC];

	assert_true(sodium_init() >= 0);
	memset(key, 0x5a, sizeof(key));
	memset(other, 0xee, sizeof(other));
	rgapsd_peer_auth_mac(key, sizeof(key), PEERS_ROLE_INITIATOR, "h1:1", "h2:2", NONCE, other,
			     a);
	reference_mac(key, sizeof(key), 1, "h1:1", "h2:2", NONCE, other, want);
	assert_memory_equal(a, want, sizeof(a));
	/* Each input changes the proof: role, direction, nonces, key. */
	rgapsd_peer_auth_mac(key, sizeof(key), PEERS_ROLE_RESPONDER, "h1:1", "h2:2", NONCE, other,
			     b);
	assert_memory_not_equal(a, b, sizeof(a));
	rgapsd_peer_auth_mac(key, sizeof(key), PEERS_ROLE_INITIATOR, "h2:2", "h1:1", NONCE, other,
			     b);
	assert_memory_not_equal(a, b, sizeof(a));
	rgapsd_peer_auth_mac(key, sizeof(key), PEERS_ROLE_INITIATOR, "h1:1", "h2:2", other, NONCE,
			     b);
	assert_memory_not_equal(a, b, sizeof(a));
	key[47] ^= 1;
	rgapsd_peer_auth_mac(key, sizeof(key), PEERS_ROLE_INITIATOR, "h1:1", "h2:2", NONCE, other,
			     b);
	assert_memory_not_equal(a, b, sizeof(a));
}

static void test_texts(void **state)
{
	char r[8];

	assert_int_equal(
		rgapsd_peer_error_decode((const uint8_t *)"\x03\x00no\nkey", 8, r, sizeof(r)), 3);
	assert_string_equal(r, "no?key");
	assert_int_equal(rgapsd_peer_error_decode((const uint8_t *)"\x05\x00" "0123456789", 12, r,
					   sizeof(r)), 5);
	assert_string_equal(r, "0123456");
	assert_int_equal(rgapsd_peer_error_decode((const uint8_t *)"\x05", 1, r, sizeof(r)), 0);
	assert_string_equal(r, "");
	assert_string_equal(rgapsd_peer_frame_name(PF_AUTH_OK), "AUTH_OK");
	assert_string_equal(rgapsd_peer_frame_name(200), "unknown");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hello_layout),
		cmocka_unit_test(test_hello_refusals),
		cmocka_unit_test(test_auth_mac),
		cmocka_unit_test(test_texts),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
