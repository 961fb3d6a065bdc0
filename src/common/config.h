/*
 * What rgapsd, librgaps and the tools share of the configuration (docs/ARCHITECTURE.md
 * section 8): the limits on names and counts, one topic's settings as a
 * struct (the topic segment's layout is computed from it), the rule for topic
 * names and the size strings ("256MiB"). Reading files, the key tables and
 * their checks are rgapsd's alone (src/daemon/config_file.h): librgaps does
 * not link them.
 */
#ifndef RGAPS_COMMON_CONFIG_H
#define RGAPS_COMMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define RGAPS_TOPIC_NAME_MAX 63
#define RGAPS_PATH_MAX 256
#define RGAPS_SOCKET_PATH_MAX 107 /* sun_path less the NUL */
#define RGAPS_CFG_MAX_IDS 32
#define RGAPS_CFG_MAX_STAGES 8
#define RGAPS_CFG_NAME_MAX 32
#define RGAPS_CFG_MAX_DEVICES 32 /* a topic's "devices" list */
#define RGAPS_DEFAULT_SOCKET "/run/rgaps/rgapsd.sock"

enum rgaps_overflow {
	RGAPS_OVERFLOW_BLOCK = 0,	/* publisher waits (block_timeout_ms), then -ETIMEDOUT */
	RGAPS_OVERFLOW_DROP_OLDEST = 1, /* slow subscribers are skipped forward; drops counted */
};

/* One topic. Every field has a default (the topic table of src/daemon/config_file.c). */
struct rgaps_topic_config {
	char name[RGAPS_TOPIC_NAME_MAX + 1];
	uint64_t pool_size;	   /* bytes of the shared pool (GPU pool / host pool) */
	uint64_t max_message_size; /* largest message accepted */
	uint32_t queue_depth;	   /* message queue entries (power of two) */
	uint32_t history;	   /* messages a late joiner sees (0 = live only) */
	uint32_t max_subscribers;  /* subscriber slots in the metadata segment */
	uint32_t max_publishers;   /* publisher slots */
	uint32_t max_holds;	   /* messages one subscriber may hold at once */
	uint32_t max_loans;	   /* uncommitted loans one publisher may hold */
	uint32_t block_timeout_ms; /* overflow=block: how long a publisher waits */
	uint32_t fence_timeout_ms; /* how long a reader waits for a message's copy (0: no bound) */
	enum rgaps_overflow overflow;
	char memory[RGAPS_CFG_NAME_MAX];    /* a memory plugin's name, or "auto" */
	char transport[RGAPS_CFG_NAME_MAX]; /* a transport plugin's name, or "auto" */
	int32_t device;			    /* GPU ordinal for a device-memory plugin */
	char gpu_fanout[RGAPS_CFG_NAME_MAX]; /* "auto", "peer", "replicate": other GPUs */
	uint32_t devices[RGAPS_CFG_MAX_DEVICES]; /* GPUs served; none listed: every GPU */
	uint32_t ndevices;
	uint64_t gpu_piece;		    /* pipelining unit of the replica chain across GPUs */
	uint64_t chunk_size;		    /* pipelining unit on the wire */
	bool chunking;			    /* false: whole-message, stage after stage */
	uint64_t ring_size;		    /* receive ring per (topic, remote host) */
	double watermark;		    /* fraction of the ring between Head updates */
	uint64_t resend_window;		    /* bytes kept to send again after a link flap */
	char relay[RGAPS_CFG_NAME_MAX]; /* "star", "chain", "tree:K", "auto" (rgaps__relay_parse) */
	char stages[RGAPS_CFG_MAX_STAGES][RGAPS_CFG_NAME_MAX]; /* stage plugins, in order */
	uint32_t nstages;
	uid_t allowed_uids[RGAPS_CFG_MAX_IDS];
	uint32_t nallowed_uids;		    /* 0 and no gids: everyone may attach */
	gid_t allowed_gids[RGAPS_CFG_MAX_IDS];
	uint32_t nallowed_gids;
};

/* How a topic's messages reach the hosts that subscribe to it (its "relay" key). */
enum rgaps_relay {
	RGAPS_RELAY_STAR,  /* the publisher's host sends each message to every one of them */
	RGAPS_RELAY_CHAIN, /* to the first, which passes each chunk on to the next, and so on */
	RGAPS_RELAY_TREE,  /* to K of them, each of which passes each chunk on to K more */
	RGAPS_RELAY_AUTO,  /* what the publisher's host predicts fastest (docs/SCALING.md) */
};
#define RGAPS_RELAY_FANOUT_MAX 64

/*
 * A "relay" value: "star", "chain", "tree:K" (K 2..RGAPS_RELAY_FANOUT_MAX) or
 * "auto". NULL and its kind and fan-out (star 0, chain 1, tree K, auto 0), or
 * what is wrong with it in words (the outputs untouched).
 */
const char *rgaps__relay_parse(const char *s, enum rgaps_relay *kind_p, uint32_t *fanout_p);

/*
 * Fill the defaults (what runs with no file at all). Defined with the key
 * tables, in src/daemon/config_file.c: the defaults are written once, there;
 * rgapsd and the tests that build topics link it from there.
 */
void rgapsd_topic_config_defaults(struct rgaps_topic_config *tc);

/* Topic names: 1..63 of [A-Za-z0-9._-], not starting with '.' or '-'. */
bool rgaps__topic_name_valid(const char *name);
/* The rule in words, for every message that refuses a name. */
#define RGAPS_TOPIC_NAME_RULE                                                                \
	"a topic name is 1 to 63 characters of A-Z a-z 0-9 . _ -, not starting with '.' "  \
	"or '-'"
_Static_assert(RGAPS_TOPIC_NAME_MAX == 63, "RGAPS_TOPIC_NAME_RULE names the length");
/*
 * Whether name is a topic name; if not, why in words (what is wrong, then the
 * rule) into why (nothing when why is NULL or len 0).
 */
bool rgaps__topic_name_check(const char *name, char *why, size_t len);
/* A character of a name: A-Z a-z 0-9 . _ - */
bool rgaps__name_char(char ch);

/*
 * "256MiB", "4 KiB", "1G", "4096", "1.5GiB"; suffixes B, K/KB/KiB, M/MB/MiB,
 * G/GB/GiB, T/TB/TiB (any case) are all binary (1024-based). Spaces may only
 * separate the number from a unit; at most 18 decimals; the value must be a
 * whole number of bytes. 0 or -EINVAL (junk, overflow).
 */
int rgaps__parse_size(const char *s, uint64_t *out_p);
/* The same, saying why not: NULL, or "is not a size" / "is too large" / ... */
const char *rgaps__size_parse(const char *s, uint64_t *out_p);
/* Format bytes as "64MiB" / "4KiB" / "1000B" (exact when possible). */
void rgaps__format_size(uint64_t v, char *buf, size_t len);

#endif
