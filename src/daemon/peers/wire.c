/*
 * The peer handshake codec (wire.h): pure functions over bytes.
 */
#include "wire.h"

#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../../common/errors.h"
#include "../../common/util.h"

_Static_assert(PEERS_MAC == crypto_auth_hmacsha256_BYTES, "the AUTH proof is an HMAC-SHA-256");

#define refuse(code, why, whylen, ...) rgaps__fail(-(code), why, whylen, __VA_ARGS__)

size_t rgapsd_peer_hello_encode(uint8_t *out, const uint8_t nonce[PEERS_NONCE], const char *name)
{
	size_t nl = strlen(name);

	if (nl == 0 || nl > PEERS_NAME_MAX)
		return 0;
	memcpy(out, PEERS_MAGIC, PEERS_MAGIC_LEN);
	peer_put16(out + 8, PEERS_VERSION);
	peer_put16(out + 10, 0); /* flags: none defined */
	memcpy(out + 12, nonce, PEERS_NONCE);
	peer_put16(out + 44, (uint16_t)nl);
	memcpy(out + PEERS_HELLO_FIXED, name, nl);
	return PEERS_HELLO_FIXED + nl;
}

int rgapsd_peer_hello_decode(const uint8_t *b, uint32_t len, struct peer_hello *h, char *why,
		      size_t whylen)
{
	uint16_t nl;

	if (len < PEERS_MAGIC_LEN || memcmp(b, PEERS_MAGIC, PEERS_MAGIC_LEN) != 0)
		return refuse(PE_VERSION, why, whylen, "bad magic in HELLO (not an rgapsd peer?)");
	if (len < PEERS_HELLO_FIXED)
		return refuse(PE_PROTOCOL, why, whylen, "HELLO of %u bytes is truncated", len);
	h->version = peer_get16(b + 8);
	if (h->version != PEERS_VERSION)
		return refuse(PE_VERSION, why, whylen,
			      "protocol version %u not supported (this daemon speaks %u)",
			      h->version, PEERS_VERSION);
	nl = peer_get16(b + 44);
	if (nl == 0 || nl > PEERS_NAME_MAX || len != PEERS_HELLO_FIXED + (uint32_t)nl)
		return refuse(PE_PROTOCOL, why, whylen, "HELLO with a name of %u bytes in %u bytes",
			      nl, len);
	for (unsigned i = 0; i < nl; i++) {
		uint8_t c = b[PEERS_HELLO_FIXED + i];

		if (c <= 0x20 || c >= 0x7f)
			return refuse(PE_PROTOCOL, why, whylen, "HELLO name holds byte 0x%02x", c);
	}
	memcpy(h->name, b + PEERS_HELLO_FIXED, nl);
	h->name[nl] = '\0';
	memcpy(h->nonce, b + 12, PEERS_NONCE);
	return 0;
}

void rgapsd_peer_auth_mac(const uint8_t *key, size_t keylen, uint8_t role, const char *from,
		   const char *to, const uint8_t from_nonce[PEERS_NONCE],
		   const uint8_t to_nonce[PEERS_NONCE], uint8_t mac[PEERS_MAC])
{
	crypto_auth_hmacsha256_state st;
	size_t fl = strlen(from), tl = strlen(to);
	uint8_t b[2];

	crypto_auth_hmacsha256_init(&st, key, keylen);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)PEERS_AUTH_DOMAIN,
				      sizeof(PEERS_AUTH_DOMAIN) - 1);
	peer_put16(b, PEERS_VERSION);
	crypto_auth_hmacsha256_update(&st, b, 2);
	crypto_auth_hmacsha256_update(&st, &role, 1);
	peer_put16(b, (uint16_t)fl);
	crypto_auth_hmacsha256_update(&st, b, 2);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)from, fl);
	peer_put16(b, (uint16_t)tl);
	crypto_auth_hmacsha256_update(&st, b, 2);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)to, tl);
	crypto_auth_hmacsha256_update(&st, from_nonce, PEERS_NONCE);
	crypto_auth_hmacsha256_update(&st, to_nonce, PEERS_NONCE);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_memzero(&st, sizeof(st));
}

void rgapsd_peer_text(char *dst, size_t cap, const uint8_t *src, size_t len)
{
	size_t n = RGAPS_MIN(len, cap - 1);

	for (size_t i = 0; i < n; i++)
		dst[i] = src[i] >= 0x20 && src[i] < 0x7f ? (char)src[i] : '?';
	dst[n] = '\0';
}

uint16_t rgapsd_peer_error_decode(const uint8_t *b, uint32_t len, char *reason, size_t cap)
{
	rgapsd_peer_text(reason, cap, b + RGAPS_MIN(len, 2u), len > 2 ? len - 2 : 0);
	return len >= 2 ? peer_get16(b) : 0;
}

const char *rgapsd_peer_frame_name(uint8_t type)
{
	static const char *const names[] = { "?",   "HELLO", "AUTH", "AUTH_OK", "ERROR",
					     "MSG", "PING",  "PONG", "BYE" };

	return type < RGAPS_ARRAY_SIZE(names) ? names[type] : "unknown";
}
