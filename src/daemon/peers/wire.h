/*
 * The codec of the peer session's handshake (docs/PROTOCOL.md section 2), as
 * pure functions so that each has unit tests (tests/unit/test_peers.c) and a
 * libFuzzer target (tests/fuzz/fuzz_hello.c): the frame header, HELLO
 * (magic, version, nonce, name), the AUTH proof (an HMAC over the transcript)
 * and the ERROR/BYE texts. peers.c runs the sockets and the state machine.
 * Integers on the wire are little-endian.
 */
#ifndef RGAPSD_PEER_WIRE_H
#define RGAPSD_PEER_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define PEERS_MAGIC "RGAPSPR1"
#define PEERS_MAGIC_LEN 8
#define PEERS_VERSION 1
#define PEERS_HDR 5 /* u32 payload length + u8 type */
#define PEERS_NONCE 32
#define PEERS_MAC 32 /* HMAC-SHA-256 */
#define PEERS_NAME_MAX 255
#define PEERS_HELLO_FIXED (PEERS_MAGIC_LEN + 2 + 2 + PEERS_NONCE + 2)
#define PEERS_HELLO_MAX (PEERS_HELLO_FIXED + PEERS_NAME_MAX)
#define PEERS_AUTH_DOMAIN "rgaps-peer-auth-v1"
#define PEERS_ROLE_INITIATOR 1
#define PEERS_ROLE_RESPONDER 2

/* Frame types (docs/PROTOCOL.md section 2, "Frames"). */
enum peer_frame {
	PF_HELLO = 1,
	PF_AUTH = 2,
	PF_AUTH_OK = 3,
	PF_ERROR = 4,
	PF_MSG = 5,
	PF_PING = 6,
	PF_PONG = 7,
	PF_BYE = 8,
};

/* ERROR codes: why the sender refuses or ends the connection. */
enum peer_error {
	PE_PROTOCOL = 1,     /* malformed, oversize or unexpected frame */
	PE_VERSION = 2,	     /* bad magic or unsupported protocol version */
	PE_AUTH = 3,	     /* the HMAC did not verify: different keys */
	PE_UNKNOWN_PEER = 4, /* the name is not in the receiver's peers list */
	PE_DUPLICATE = 5,    /* the pair's other connection is kept */
	PE_TIMEOUT = 6,	     /* handshake not completed in time */
};

static inline void peer_put16(uint8_t *b, uint16_t v)
{
	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
}

static inline void peer_put32(uint8_t *b, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		b[i] = (uint8_t)(v >> (8 * i));
}

static inline void peer_put64(uint8_t *b, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t peer_get16(const uint8_t *b)
{
	return (uint16_t)(b[0] | b[1] << 8);
}

static inline uint32_t peer_get32(const uint8_t *b)
{
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static inline uint64_t peer_get64(const uint8_t *b)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | b[i];
	return v;
}

/* A decoded HELLO. */
struct peer_hello {
	uint16_t version;
	uint8_t nonce[PEERS_NONCE];
	char name[PEERS_NAME_MAX + 1]; /* printable ASCII, no spaces */
};

/* HELLO payload for nonce and name (1..255 bytes) into out (PEERS_HELLO_MAX). Its length, or 0. */
size_t rgapsd_peer_hello_encode(uint8_t *out, const uint8_t nonce[PEERS_NONCE], const char *name);

/*
 * Decode a HELLO payload of len bytes. 0 and *h; or -PE_VERSION (bad magic, a
 * version this daemon does not speak) or -PE_PROTOCOL (truncated, a bad name),
 * with why.
 */
int rgapsd_peer_hello_decode(const uint8_t *b, uint32_t len, struct peer_hello *h, char *why,
		      size_t whylen);

/*
 * MAC of one side's proof (docs/PROTOCOL.md 2, "AUTH: the proof"): domain,
 * version, the sender's role, both names and both nonces, the sender's first.
 * The role and the order of the names make a proof useless anywhere but in the
 * direction and session it was made for.
 */
void rgapsd_peer_auth_mac(const uint8_t *key, size_t keylen, uint8_t role, const char *from,
		   const char *to, const uint8_t from_nonce[PEERS_NONCE],
		   const uint8_t to_nonce[PEERS_NONCE], uint8_t mac[PEERS_MAC]);

/* Text from the wire made safe to log: printable ASCII, the rest as '?'; cut to cap - 1. */
void rgapsd_peer_text(char *dst, size_t cap, const uint8_t *src, size_t len);

/* An ERROR payload: its code (0 when too short) and its reason, made safe to log. */
uint16_t rgapsd_peer_error_decode(const uint8_t *b, uint32_t len, char *reason, size_t cap);

/* The name of a frame type, for the log. */
const char *rgapsd_peer_frame_name(uint8_t type);

#endif
