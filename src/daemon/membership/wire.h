/*
 * What rgapsd reads from etcd and writes there, as pure functions (no state, no
 * I/O), so that each has unit tests (tests/unit/test_membership_wire.c) and a
 * libFuzzer target (tests/fuzz/fuzz_etcd.c):
 *
 *   - the replies of etcd's JSON gateway (the etcd v3 API over HTTP/1.1): its
 *     int64 fields (JSON strings of decimal digits), its base64 keys and values,
 *     range replies, lease replies, errors, and the messages of a watch (one
 *     JSON object per line of a streaming reply);
 *   - the host record each daemon keeps under PREFIX/hosts/NAME (drawn in
 *     docs/PROTOCOL.md section 6).
 *
 * etcd is input from outside: anyone who may write under the prefix can put
 * anything there. Every count, length and number is bounded before use and a
 * reply that breaks a bound is refused with the reason; nothing is asserted.
 */
#ifndef RGAPSD_MEMBERSHIP_WIRE_H
#define RGAPSD_MEMBERSHIP_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/config.h"

struct cJSON;

#define MS_KEY_MAX 1024		 /* bytes of one key, decoded */
#define MS_VALUE_MAX (64u << 10) /* bytes of one value (a host record), decoded */
#define MS_REPLY_MAX (32u << 20) /* bytes of one reply, or of one watch message, as text */
#define MS_KVS_MAX 100000	 /* keys in one range reply, events in one watch message */
#define MS_REASON_MAX 256	 /* an error or cancel text kept from etcd */

#define MS_RECORD_VERSION 1
#define MS_NAME_MAX 255	    /* HOST:PORT, as the peer handshake bounds it */
#define MS_TRANSPORTS_MAX 8 /* transports in one record */
#define MS_GPUS_MAX 32	    /* GPUs in one record (RGAPS_MEM_MAX_DEVICES) */
#define MS_GPU_ID_MAX 15    /* "0000:3b:00.0" */
#define MS_TOPICS_MAX 4096  /* topics in one record (RT_SUBS_MAX) */
#define MS_VERSION_MAX 31   /* the daemon's version string */
#define MS_HOSTNAME_MAX 255

/* One key and its value, decoded and NUL-terminated (they may hold NUL bytes too). */
struct rgapsd_etcd_kv {
	char *key;
	size_t key_len;
	char *value;
	size_t value_len;
	int64_t mod_revision;
	int64_t lease;
};

/* A range reply: the keys, and the store's revision when it was read. */
struct rgapsd_etcd_range {
	struct rgapsd_etcd_kv *kvs;
	size_t n;
	int64_t revision;
	bool more; /* etcd left keys out (a limit): the caller must not take it as all */
};

struct rgapsd_etcd_event {
	bool deleted; /* DELETE (an expired lease too); else PUT */
	struct rgapsd_etcd_kv kv;
};

/* One message of a watch stream. */
struct rgapsd_etcd_watch_msg {
	int64_t revision; /* the store's, after these events */
	bool created;	  /* the watch is set up */
	bool canceled;	  /* the watch ended (compaction, no leader, ...): start again */
	int64_t compact_revision;
	char reason[MS_REASON_MAX + 1]; /* why it was canceled */
	struct rgapsd_etcd_event *events;
	size_t nevents;
};

/* ---- etcd's replies ------------------------------------------------------------------------- */

/*
 * An int64 field of object o: absent is 0 (proto3 leaves zero values out), else
 * a string of decimal digits (an optional '-', at most 19 digits, in range) or a
 * JSON integer below 2^53. 0 or -EINVAL.
 */
int rgapsd_etcd_int64(const struct cJSON *o, const char *field, int64_t *v_p);

/* base64 (standard alphabet, padded) of len bytes: malloc'd text, NULL when out of memory. */
char *rgapsd_etcd_b64_encode(const void *bin, size_t len);
/* Decode a base64 field of at most max bytes into a malloc'd, NUL-terminated copy. */
int rgapsd_etcd_b64_decode(const char *b64, size_t max, char **out_p, size_t *len_p);

/*
 * Is reply an error? The gateway's {"error": TEXT, "code": N, "message": TEXT}, or a
 * watch stream's {"error": {"grpc_code": N, "message": TEXT}}: true, *code_p the gRPC
 * code (0 when absent) and msg the text (printable, bounded). false: not an error.
 */
bool rgapsd_etcd_reply_error(const struct cJSON *reply, int *code_p, char *msg, size_t len);

/* The header's revision (> 0). 0 or -EINVAL with why. */
int rgapsd_etcd_header_revision(const struct cJSON *reply, int64_t *rev_p, char *why,
				size_t whylen);
/* /v3/lease/grant: the lease's ID and TTL, both > 0. 0 or -EINVAL with why. */
int rgapsd_etcd_lease_grant_parse(const struct cJSON *reply, int64_t *id_p, int64_t *ttl_p,
				  char *why, size_t whylen);
/*
 * /v3/lease/keepalive: {"result": {...}} with the TTL left (0: the lease is gone).
 * 0 or -EINVAL with why.
 */
int rgapsd_etcd_keepalive_parse(const struct cJSON *reply, int64_t *ttl_p, char *why,
				size_t whylen);
/* /v3/kv/range. 0, -EINVAL with why, -ENOMEM. Free with rgapsd_etcd_range_free (also on error). */
int rgapsd_etcd_range_parse(const struct cJSON *reply, struct rgapsd_etcd_range *r, char *why,
			    size_t whylen);
void rgapsd_etcd_range_free(struct rgapsd_etcd_range *r);
/* One message of /v3/watch. 0, -EINVAL with why, -ENOMEM. Free with rgapsd_etcd_watch_free. */
int rgapsd_etcd_watch_parse(const struct cJSON *msg, struct rgapsd_etcd_watch_msg *m, char *why,
			    size_t whylen);
void rgapsd_etcd_watch_free(struct rgapsd_etcd_watch_msg *m);

/*
 * A streaming reply (the watch) cut into its messages: each a JSON text ended by a
 * newline, at most MS_REPLY_MAX bytes. Bytes that end no message yet are kept.
 */
struct rgapsd_etcd_stream {
	char *buf;
	size_t len, cap;
};
/*
 * Feed n bytes: on_msg(arg, text, len) for each whole message, in order (its return:
 * 0 to go on, anything else stops the feed and is returned). 0; -E2BIG for a message
 * over MS_REPLY_MAX (the stream is broken: drop it); -ENOMEM.
 */
int rgapsd_etcd_stream_feed(struct rgapsd_etcd_stream *s, const char *data, size_t n,
			    int (*on_msg)(void *arg, const char *text, size_t len), void *arg);
void rgapsd_etcd_stream_free(struct rgapsd_etcd_stream *s);

/* ---- keys ----------------------------------------------------------------------------------- */

/* "PREFIX/hosts/" into buf. 0 or -ENAMETOOLONG. */
int rgapsd_membership_hosts_dir(const char *prefix, char *buf, size_t len);
/* The end of the range of every key that starts with dir (its last byte + 1). */
int rgapsd_etcd_range_end(const char *dir, char *buf, size_t len);
/*
 * The daemon name of a key under dir ("PREFIX/hosts/NAME"): 0 with name copied;
 * -EINVAL (not under dir, or NAME is not HOST:PORT of printable ASCII), -ENAMETOOLONG.
 */
int rgapsd_membership_key_name(const char *dir, const char *key, size_t key_len, char *name,
			       size_t len);

/* ---- the host record ------------------------------------------------------------------------ */

struct rgapsd_host_transport {
	char name[RGAPS_CFG_NAME_MAX];
	uint16_t port; /* its data port */
};

/* What a daemon says of itself under PREFIX/hosts/NAME (docs/PROTOCOL.md section 6). */
struct rgapsd_host_record {
	char name[MS_NAME_MAX + 1]; /* HOST:PORT: the peer sessions' name; the key's NAME */
	char version[MS_VERSION_MAX + 1];
	char hostname[MS_HOSTNAME_MAX + 1];
	uint32_t pid;
	struct rgapsd_host_transport transports[MS_TRANSPORTS_MAX];
	uint32_t ntransports;
	char gpus[MS_GPUS_MAX][MS_GPU_ID_MAX + 1]; /* PCI addresses */
	uint32_t ngpus;
	char (*topics)[RGAPS_TOPIC_NAME_MAX + 1]; /* with subscribers there; malloc'd */
	uint32_t ntopics;
};

/* The record as JSON text (malloc'd), or NULL when out of memory. */
char *rgapsd_host_record_encode(const struct rgapsd_host_record *r);
/*
 * Parse and check a record (fields it does not know are ignored, so that a later
 * version may add some). 0, -EINVAL with why, -ENOMEM. Free with rgapsd_host_record_free.
 */
int rgapsd_host_record_decode(const char *text, size_t len, struct rgapsd_host_record *r, char *why,
			      size_t whylen);
void rgapsd_host_record_free(struct rgapsd_host_record *r);

#endif
