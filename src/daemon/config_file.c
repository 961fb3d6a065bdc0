/*
 * Configuration of rgapsd and its topics (docs/ARCHITECTURE.md section 8). Each component
 * declares its keys once, in a table of struct rgaps_cfg_field: the daemon's
 * keys in daemon_table, a topic's in topic_table. Everything is driven from
 * those tables: defaults are JSON text run through the same setter as values
 * read from a file, the same range checks serve the parser and
 * rgapsd_topic_config_validate(), and --help-config and docs/CONFIG.md print
 * them. A key is added by adding one row. Every refusal names the file, the
 * key and the reason ("FILE: key 'KEY': REASON").
 */
#include "config_file.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/errors.h"
#include "../common/util.h"
#include "hostport.h"
#include "rgaps_build_config.h"

/*
 * The file rgapsd_config_load(NULL, ...) reads: the build's sysconfdir, where
 * `meson install` puts the file and the unit points (/etc/rgaps for /usr,
 * /usr/local/etc/rgaps for /usr/local). Tests point it elsewhere.
 */
const char *rgapsd_config_default_path = RGAPS_SYSCONFDIR "/rgapsd.json";

#define CFG_FILE_MAX (1u << 20) /* a config file larger than this is a mistake */
#define CFG_WHY_MAX 320

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)
#define TiB (UINT64_C(1) << 40)

enum rgaps_cfg_type {
	RGAPS_CFG_STRING,  /* char[size] */
	RGAPS_CFG_CHOICE,  /* char[size] holding one of names[] */
	RGAPS_CFG_ENUM,	   /* int (or an int-sized enum): index into names[] */
	RGAPS_CFG_UINT,	   /* uint32_t or int32_t, non-negative integer in min..max */
	RGAPS_CFG_SIZE,	   /* uint64_t bytes: a JSON number or a string with a unit */
	RGAPS_CFG_BOOL,	   /* bool */
	RGAPS_CFG_DOUBLE,  /* double in dmin..dmax */
	RGAPS_CFG_STRINGS, /* char[max_count][size] + uint32_t count */
	RGAPS_CFG_IDS,	   /* uint32_t-sized ids [max_count] + uint32_t count */
	RGAPS_CFG_OBJECT,  /* a nested struct described by sub */
	/* char[size]: JSON text of { "<plugin>": { "<option>": integer >= 0 } }; the
	 * names and ranges are the plugins' own, checked when they load */
	RGAPS_CFG_PLUGIN_OPTIONS,
};

#define RGAPS_CFG_F_POW2 (1u << 0)	 /* the integer must be a power of two */
#define RGAPS_CFG_F_UNIQUE (1u << 1)	 /* array entries must all differ */
#define RGAPS_CFG_F_TOPIC_ONLY (1u << 2) /* refused in the daemon's "defaults" object */

struct rgaps_cfg_table;

struct rgaps_cfg_field {
	const char *name;
	enum rgaps_cfg_type type;
	size_t offset;	   /* of the value in its struct */
	size_t size;	   /* of the value; strings: the buffer; arrays: one entry */
	const char *def;   /* default as JSON text, applied by the file parser; NULL: zero */
	const char *def_doc; /* what --help shows as the default when def is NULL */
	const char *doc;
	uint64_t min, max; /* _UINT, _SIZE, _IDS entries */
	double dmin, dmax; /* _DOUBLE */
	const char *const *names; /* _CHOICE, _ENUM: NULL-terminated */
	/* _STRING, _STRINGS entries: false, with the reason in why, to refuse s */
	bool (*check)(const char *s, char *why, size_t len);
	size_t count_offset; /* _STRINGS, _IDS: the uint32_t entry count */
	uint32_t max_count;  /* _STRINGS, _IDS */
	unsigned int flags;  /* RGAPS_CFG_F_* */
	const struct rgaps_cfg_table *sub; /* _OBJECT */
};

struct rgaps_cfg_table {
	const struct rgaps_cfg_field *fields;
	size_t nfields;
};

#define CFG_AT(type, member) .offset = offsetof(type, member), .size = sizeof(((type *)0)->member)
#define CFG_ARRAY_AT(type, member, count)                                                    \
	.offset = offsetof(type, member), .size = sizeof(((type *)0)->member[0]),            \
	.count_offset = offsetof(type, count),                                               \
	.max_count = RGAPS_ARRAY_SIZE(((type *)0)->member)

_Static_assert(sizeof(enum rgaps_overflow) == sizeof(int), "ENUM fields are stored as int");
_Static_assert(sizeof(enum rgapsd_create_topics) == sizeof(int), "ENUM fields are stored as int");
_Static_assert(sizeof(uid_t) == sizeof(uint32_t) && sizeof(gid_t) == sizeof(uint32_t),
	       "IDS fields are stored as uint32_t");

/* ------------------------------------------------------------------------ */
/* Checks on string values                                                  */

/* s as printable ASCII for an error message: others become '?', long ones end in "..." */
static const char *cfg_show(const char *s, char *buf, size_t len)
{
	size_t i, n = 0;

	for (i = 0; s[i] && n + 4 < len; i++)
		buf[n++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
	if (s[i] && n + 3 < len) {
		memcpy(buf + n, "...", 3);
		n += 3;
	}
	buf[n] = '\0';
	return buf;
}


/* The same words as every other refusal of a name (config.h). */
static bool check_topic_name(const char *s, char *why, size_t len)
{
	return rgaps__topic_name_check(s, why, len);
}

static bool check_not_empty(const char *s, char *why, size_t len)
{
	if (s[0])
		return true;
	snprintf(why, len, "must not be empty");
	return false;
}

static bool check_name_chars(const char *s, char *why, size_t len)
{
	char shown[80];

	for (size_t i = 0; s[i]; i++) {
		if (!rgaps__name_char(s[i])) {
			snprintf(why, len, "'%s' may only hold A-Z a-z 0-9 . _ -",
				 cfg_show(s, shown, sizeof(shown)));
			return false;
		}
	}
	return true;
}

/*
 * A plugin name (stages, memory, transport): 1..31 of a-z 0-9 _ -. Whether a
 * plugin of that name exists is checked by rgapsd against what it found in its
 * plugin directory (src/daemon/registry.c), not here.
 */
static bool check_plugin_name(const char *s, char *why, size_t len)
{
	char shown[80];
	size_t i;

	for (i = 0; s[i]; i++)
		if (i >= RGAPS_CFG_NAME_MAX - 1 ||
		    !((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' ||
		      s[i] == '-'))
			break;
	if (i > 0 && !s[i])
		return true;
	snprintf(why, len, "'%s' is not a plugin name (1 to %d of a-z 0-9 _ -)",
		 cfg_show(s, shown, sizeof(shown)), RGAPS_CFG_NAME_MAX - 1);
	return false;
}

/* "HOST:PORT" or "[IPV6]:PORT", port 1..65535: the parser the daemon uses at start. */
static bool check_hostport(const char *s, char *why, size_t len)
{
	return rgapsd_hostport_parse(s, NULL, 0, NULL, why, len) == 0;
}

/* "0660": 3 or 4 octal digits, read, write and execute bits only (no setuid, setgid, sticky). */
static bool check_mode(const char *s, char *why, size_t len)
{
	size_t n = strlen(s);
	unsigned long v = 0;
	char shown[80];

	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '7') {
			n = 0;
			break;
		}
		v = v * 8 + (unsigned long)(s[i] - '0');
	}
	if (n < 3 || n > 4 || v > 0777) {
		snprintf(why, len,
			 "'%s' is not a permission mode: 3 or 4 octal digits up to 0777 (e.g. "
			 "\"0660\")", cfg_show(s, shown, sizeof(shown)));
		return false;
	}
	return true;
}

/* A group name (as in /etc/group: letters, digits, . _ -) or a number; "" for none. */
static bool check_group(const char *s, char *why, size_t len)
{
	char shown[80];

	if (s[0] == '-') {
		snprintf(why, len, "'%s' is not a group name or number",
			 cfg_show(s, shown, sizeof(shown)));
		return false;
	}
	return check_name_chars(s, why, len);
}

/* A relay topology: "star", "chain", "tree:K" or "auto". */
static bool check_relay(const char *s, char *why, size_t len)
{
	enum rgaps_relay kind;
	uint32_t fanout;
	const char *bad = rgaps__relay_parse(s, &kind, &fanout);
	char shown[80];

	if (!bad)
		return true;
	snprintf(why, len, "'%s' %s", cfg_show(s, shown, sizeof(shown)), bad);
	return false;
}

static bool check_hostport_or_empty(const char *s, char *why, size_t len)
{
	return !s[0] || check_hostport(s, why, len);
}

/* An etcd member's client URL: "http://HOST:PORT" or "https://HOST:PORT", nothing more. */
static bool check_endpoint(const char *s, char *why, size_t len)
{
	const char *hp = NULL;
	char shown[80], hwhy[CFG_WHY_MAX];

	if (strncmp(s, "http://", 7) == 0)
		hp = s + 7;
	else if (strncmp(s, "https://", 8) == 0)
		hp = s + 8;
	if (!hp) {
		snprintf(why, len, "'%s' is not an etcd client URL (\"http://HOST:PORT\" or "
			 "\"https://HOST:PORT\")", cfg_show(s, shown, sizeof(shown)));
		return false;
	}
	if (rgapsd_hostport_parse(hp, NULL, 0, NULL, hwhy, sizeof(hwhy)) != 0) {
		snprintf(why, len, "'%s': %s", cfg_show(s, shown, sizeof(shown)), hwhy);
		return false;
	}
	return true;
}

/* A key prefix: "/" then path parts of printable ASCII without spaces, no trailing "/". */
static bool check_prefix(const char *s, char *why, size_t len)
{
	char shown[80];
	size_t n = strlen(s);
	bool ok = n >= 2 && s[0] == '/' && s[n - 1] != '/' && !strstr(s, "//");

	for (size_t i = 0; ok && i < n; i++)
		ok = s[i] > 0x20 && s[i] < 0x7f;
	if (!ok)
		snprintf(why, len, "'%s' is not a key prefix: \"/\" and then printable characters "
			 "without spaces, no \"//\", not ending in \"/\" (e.g. \"/rgaps/prod\")",
			 cfg_show(s, shown, sizeof(shown)));
	return ok;
}

/* An etcd user name: printable ASCII without spaces, or "" for none. */
static bool check_printable(const char *s, char *why, size_t len)
{
	char shown[80];

	for (size_t i = 0; s[i]; i++) {
		if (s[i] <= 0x20 || s[i] >= 0x7f) {
			snprintf(why, len, "'%s' may only hold printable characters, no spaces",
				 cfg_show(s, shown, sizeof(shown)));
			return false;
		}
	}
	return true;
}

/* ------------------------------------------------------------------------ */
/* The tables                                                               */

static const char *const overflow_names[] = { "block", "drop_oldest", NULL };
static const char *const gpu_fanout_names[] = { "auto", "peer", "replicate", NULL };
static const char *const create_topics_names[] = { "any", "configured", NULL };
/* In enum rgaps_log_level order; the unit test holds them to rgaps__log_level_parse(). */
static const char *const log_level_names[] = { "error", "warn", "info", "debug", "trace", NULL };

#define T struct rgaps_topic_config
static const struct rgaps_cfg_field topic_fields[] = {
	{ .name = "name", .type = RGAPS_CFG_STRING, CFG_AT(T, name), .def = NULL,
	  .def_doc = "the file name less \".json\"", .check = check_topic_name,
	  .flags = RGAPS_CFG_F_TOPIC_ONLY,
	  .doc = "Topic name that clients attach to: 1 to 63 of A-Z a-z 0-9 . _ -, not starting "
		 "with '.' or '-'. It may differ from the file name, but no two files may "
		 "name the same topic." },
	{ .name = "pool_size", .type = RGAPS_CFG_SIZE, CFG_AT(T, pool_size), .def = "\"256MiB\"",
	  .min = 4 * KiB, .max = TiB,
	  .doc = "Size of the topic's shared pool, where messages live while in flight (GPU "
		 "memory with the cuda backend, shared host memory with host). A message is "
		 "written there once and read in place by every local subscriber." },
	{ .name = "max_message_size", .type = RGAPS_CFG_SIZE, CFG_AT(T, max_message_size),
	  .def = "\"64MiB\"", .min = 1, .max = TiB,
	  .doc = "Largest message a publisher may send. At most pool_size; with chunking off, "
		 "also at most ring_size." },
	{ .name = "queue_depth", .type = RGAPS_CFG_UINT, CFG_AT(T, queue_depth), .def = "64",
	  .min = 2, .max = 65536, .flags = RGAPS_CFG_F_POW2,
	  .doc = "Entries in the topic's message queue, a power of two: how many messages "
		 "can be published and not yet released by every subscriber." },
	{ .name = "history", .type = RGAPS_CFG_UINT, CFG_AT(T, history), .def = "0", .min = 0,
	  .max = 65535,
	  .doc = "Messages a subscriber that joins late is shown on attach (0: live messages "
		 "only). Less than queue_depth." },
	{ .name = "max_subscribers", .type = RGAPS_CFG_UINT, CFG_AT(T, max_subscribers),
	  .def = "64", .min = 1, .max = 1024,
	  .doc = "Subscriber slots in the topic's metadata segment: how many subscribers may be "
		 "attached at once on this host." },
	{ .name = "max_publishers", .type = RGAPS_CFG_UINT, CFG_AT(T, max_publishers),
	  .def = "16", .min = 1, .max = 256,
	  .doc = "Publisher slots: how many publishers may be attached at once on this host." },
	{ .name = "max_holds", .type = RGAPS_CFG_UINT, CFG_AT(T, max_holds), .def = "16",
	  .min = 1, .max = 256,
	  .doc = "Messages one subscriber may hold (received and not yet released) at once. "
		 "With overflow \"drop_oldest\", also only as many of one publisher's messages as "
		 "leave room in its pool for one of max_message_size." },
	{ .name = "max_loans", .type = RGAPS_CFG_UINT, CFG_AT(T, max_loans), .def = "8",
	  .min = 1, .max = 256,
	  .doc = "Loans (pool buffers taken and not yet published) one publisher may hold at "
		 "once." },
	{ .name = "block_timeout_ms", .type = RGAPS_CFG_UINT, CFG_AT(T, block_timeout_ms),
	  .def = "1000", .min = 0, .max = 3600000,
	  .doc = "With overflow \"block\": milliseconds a publisher waits for queue or pool "
		 "space before the publish fails with ETIMEDOUT (0: fail at once)." },
	{ .name = "fence_timeout_ms", .type = RGAPS_CFG_UINT, CFG_AT(T, fence_timeout_ms),
	  .def = "10000", .min = 0, .max = 3600000,
	  .doc = "Milliseconds a subscriber waits for the copy of a message published in stream "
		 "order (push_async) to complete before it reports the message lost (0: until its "
		 "publisher leaves). Meanwhile the other publishers' messages flow." },
	{ .name = "overflow", .type = RGAPS_CFG_ENUM, CFG_AT(T, overflow), .def = "\"block\"",
	  .names = overflow_names,
	  .doc = "What a full queue does: \"block\" makes the publisher wait (block_timeout_ms); "
		 "\"drop_oldest\" moves slow subscribers forward past their oldest messages, "
		 "which are counted as dropped." },
	{ .name = "memory", .type = RGAPS_CFG_STRING, CFG_AT(T, memory), .def = "\"auto\"",
	  .check = check_plugin_name,
	  .doc = "Memory plugin for the pool, by name (those in the plugin directory: the "
		 "shipped ones are \"cuda\" and \"host\", shared memory standing in for device "
		 "memory), or \"auto\": of the usable ones, the one whose plugin declares the "
		 "highest priority (cuda when a GPU is visible, else host)." },
	{ .name = "transport", .type = RGAPS_CFG_STRING, CFG_AT(T, transport), .def = "\"auto\"",
	  .check = check_plugin_name,
	  .doc = "Transport to remote hosts, by name (those in the plugin directory: the shipped "
		 "ones are \"verbs\", RDMA, and \"tcp\"), or \"auto\": of the transports with a "
		 "data link up to the peer, the one whose plugin declares the highest priority "
		 "(verbs when an RDMA device is up, else tcp)." },
	{ .name = "device", .type = RGAPS_CFG_UINT, CFG_AT(T, device), .def = "0", .min = 0,
	  .max = 1023, .doc = "CUDA device ordinal that holds the pool (cuda memory only)." },
	{ .name = "gpu_fanout", .type = RGAPS_CFG_CHOICE, CFG_AT(T, gpu_fanout), .def = "\"auto\"",
	  .names = gpu_fanout_names,
	  .doc = "How subscribers on other GPUs of the host than the pool's are served (cuda "
		 "memory only): \"peer\" (they read the pool in place over NVLink or PCIe; a GPU "
		 "without peer access, or a client whose CUDA_VISIBLE_DEVICES hides the pool's "
		 "GPU, is refused at attach), \"replicate\" (rgapsd copies each message once to "
		 "each GPU that has subscribers, GPU to GPU along a chain, gpu_piece), or "
		 "\"auto\" (per GPU, from the link and max_message_size, and a replica for a "
		 "client that cannot see the pool's GPU; rgapsd logs what it chose and why)." },
	{ .name = "devices", .type = RGAPS_CFG_IDS, CFG_ARRAY_AT(T, devices, ndevices), .def = "[]",
	  .min = 0, .max = 1023, .flags = RGAPS_CFG_F_UNIQUE,
	  .doc = "GPUs the topic serves, by CUDA ordinal as rgapsd sees them (cuda memory only); "
		 "a client on another GPU is refused at attach. Must hold \"device\". Empty: "
		 "every GPU of the host." },
	{ .name = "gpu_piece", .type = RGAPS_CFG_SIZE, CFG_AT(T, gpu_piece), .def = "\"8MiB\"",
	  .min = 64 * KiB, .max = GiB,
	  .doc = "Pipelining unit of replication across GPUs (gpu_fanout \"replicate\", or "
		 "\"auto\" where it replicates): a message moves GPU to GPU along a chain in "
		 "pieces of at least this size, each link carrying each byte once, so the last "
		 "of G GPUs has it about G - 2 piece times after the first. The cuda plugin cuts "
		 "a message in at most 32 pieces (RGAPS_CUDA_RELAY_PIECES), so larger ones move "
		 "in larger pieces. Smaller: less fill time per hop; larger: fewer, faster "
		 "copies (on H100 NVLink 8 MiB pieces were best for 64 MiB messages, 32 MiB "
		 "ones for 1 GiB)." },
	{ .name = "chunk_size", .type = RGAPS_CFG_SIZE, CFG_AT(T, chunk_size), .def = "\"16MiB\"",
	  .min = 4 * KiB, .max = GiB,
	  .doc = "Pipelining unit on the wire: a large message moves in chunks, so the "
		 "device-to-host copy, the network write and the host-to-device copy overlap. "
		 "At most half of ring_size." },
	{ .name = "chunking", .type = RGAPS_CFG_BOOL, CFG_AT(T, chunking), .def = "true",
	  .doc = "false: move whole messages, one stage after the other (then every message "
		 "must fit in ring_size)." },
	{ .name = "ring_size", .type = RGAPS_CFG_SIZE, CFG_AT(T, ring_size), .def = "\"64MiB\"",
	  .min = 8 * KiB, .max = 64 * GiB,
	  .doc = "Receive ring per (topic, remote publisher host): pinned host memory that the "
		 "remote daemon writes into." },
	{ .name = "watermark", .type = RGAPS_CFG_DOUBLE, CFG_AT(T, watermark), .def = "0.25",
	  .dmin = 0.0, .dmax = 1.0,
	  .doc = "Fraction of the receive ring consumed between two updates of the sender's "
		 "copy of Head (0: after every message). Lower: fresher credit, more small "
		 "writes." },
	{ .name = "resend_window", .type = RGAPS_CFG_SIZE, CFG_AT(T, resend_window),
	  .def = "\"256MiB\"", .min = 0, .max = 64 * GiB,
	  .doc = "Bytes of the newest messages published on this host that rgapsd keeps "
		 "(a copy in its own memory, from the first time a peer subscribes) to send "
		 "again to a peer whose link or session flapped: what the peer had not "
		 "received is sent again after the reconnect, what fell out of the window is "
		 "reported lost. The default holds 2.5 s of a 100 MB/s stream (0.4 s at the "
		 "measured end-to-end TCP rate, docs/BENCHMARKS.md), as much as a publisher's "
		 "default pool. 0: nothing is kept or sent again. Host-memory topics only. A "
		 "host that passes messages on in a chain or tree (relay) keeps one of this "
		 "size per origin it receives, for the hosts below it." },
	{ .name = "relay", .type = RGAPS_CFG_STRING, CFG_AT(T, relay), .def = "\"auto\"",
	  .check = check_relay,
	  .doc = "How a message reaches the hosts that subscribe (decided by the publisher's "
		 "host): \"star\" (it sends to each of them), \"chain\" (it sends to the first, "
		 "which passes each chunk on to the next as it lands, and so on), \"tree:K\" "
		 "(it sends to K, each of which passes each chunk on to K more; K 2 to 64), or "
		 "\"auto\" (the one predicted fastest for the number of hosts and the size of "
		 "the messages; rgapsd logs what it chose and why). The hosts are ordered by "
		 "when they subscribed, then by name, the same on every host; a host that fails "
		 "is bypassed, its part of the tree attaching to the nearest host above it." },
	{ .name = "stages", .type = RGAPS_CFG_STRINGS, CFG_ARRAY_AT(T, stages, nstages),
	  .def = "[]", .check = check_plugin_name, .flags = RGAPS_CFG_F_UNIQUE,
	  .doc = "Pipeline stages (stage plugin names) for this topic, in order; each must be "
		 "a stage plugin in the plugin directory." },
	{ .name = "allowed_uids", .type = RGAPS_CFG_IDS,
	  CFG_ARRAY_AT(T, allowed_uids, nallowed_uids), .def = "[]", .min = 0,
	  .max = UINT32_MAX - 1, .flags = RGAPS_CFG_F_UNIQUE,
	  .doc = "User ids that may attach (the uid in the client's socket credentials). "
		 "This list and allowed_gids both empty: everyone may attach." },
	{ .name = "allowed_gids", .type = RGAPS_CFG_IDS,
	  CFG_ARRAY_AT(T, allowed_gids, nallowed_gids), .def = "[]", .min = 0,
	  .max = UINT32_MAX - 1, .flags = RGAPS_CFG_F_UNIQUE,
	  .doc = "Group ids that may attach (the gid in the client's socket credentials)." },
};
#undef T

static const struct rgaps_cfg_table topic_table = { topic_fields, RGAPS_ARRAY_SIZE(topic_fields) };

#define E struct rgapsd_discovery_config
static const struct rgaps_cfg_field discovery_fields[] = {
	{ .name = "endpoints", .type = RGAPS_CFG_STRINGS, CFG_ARRAY_AT(E, endpoints, nendpoints),
	  .def = "[]", .check = check_endpoint, .flags = RGAPS_CFG_F_UNIQUE,
	  .doc = "Client URLs of the etcd members, \"http://HOST:PORT\" or "
		 "\"https://HOST:PORT\" (etcd v3, its JSON gateway). A request that a member "
		 "does not answer goes to the next. Empty: no discovery, the \"peers\" list "
		 "only. With endpoints, \"listen\" (the address the other daemons dial, so "
		 "not a wildcard) and \"key_file\" are needed, and \"peers\" are added to "
		 "what etcd says." },
	{ .name = "prefix", .type = RGAPS_CFG_STRING, CFG_AT(E, prefix), .def = "\"/rgaps\"",
	  .check = check_prefix,
	  .doc = "Where in etcd the cluster's keys live: each daemon registers "
		 "PREFIX/hosts/HOST:PORT and watches PREFIX/hosts/. One cluster per prefix: "
		 "daemons under different prefixes never see each other." },
	{ .name = "lease_ttl_s", .type = RGAPS_CFG_UINT, CFG_AT(E, lease_ttl_s), .def = "10",
	  .min = 2, .max = 3600,
	  .doc = "Seconds the daemon's registration outlives the daemon: it is renewed every "
		 "third of this, and a daemon that dies is forgotten by the others (its "
		 "sessions dropped, its losses reported) at most this long after. Shorter: "
		 "faster to notice, more renewals (docs/SCALING.md)." },
	{ .name = "timeout_ms", .type = RGAPS_CFG_UINT, CFG_AT(E, timeout_ms), .def = "2000",
	  .min = 100, .max = 60000,
	  .doc = "One request to one etcd member: a member that does not answer within it "
		 "is left for the next one." },
	{ .name = "tls_ca", .type = RGAPS_CFG_STRING, CFG_AT(E, tls_ca), .def = "\"\"",
	  .doc = "PEM file of the CA that signed the etcd members' certificates (https "
		 "endpoints). \"\": the system's CAs." },
	{ .name = "tls_cert", .type = RGAPS_CFG_STRING, CFG_AT(E, tls_cert), .def = "\"\"",
	  .doc = "PEM file of this daemon's client certificate, for etcd members that ask for "
		 "one (etcd --client-cert-auth). Needs tls_key." },
	{ .name = "tls_key", .type = RGAPS_CFG_STRING, CFG_AT(E, tls_key), .def = "\"\"",
	  .doc = "PEM file of the private key of tls_cert; rgapsd refuses it when group or "
		 "others may read it." },
	{ .name = "username", .type = RGAPS_CFG_STRING, CFG_AT(E, username), .def = "\"\"",
	  .check = check_printable,
	  .doc = "etcd user, where etcd authentication is on. \"\": none. Needs "
		 "password_file." },
	{ .name = "password_file", .type = RGAPS_CFG_STRING, CFG_AT(E, password_file),
	  .def = "\"\"",
	  .doc = "File holding the etcd user's password (its first line); refused when group "
		 "or others may read it." },
};
#undef E

static const struct rgaps_cfg_table discovery_table = { discovery_fields,
							RGAPS_ARRAY_SIZE(discovery_fields) };

#define D struct rgapsd_config
static const struct rgaps_cfg_field daemon_fields[] = {
	{ .name = "socket", .type = RGAPS_CFG_STRING, CFG_AT(D, socket_path),
	  .def = "\"" RGAPS_DEFAULT_SOCKET "\"", .check = check_not_empty,
	  .doc = "Unix socket where local clients connect." },
	{ .name = "instance", .type = RGAPS_CFG_STRING, CFG_AT(D, instance), .def = "\"\"",
	  .check = check_name_chars,
	  .doc = "This daemon's name in its log, `rgaps stats`, rgaps-top and Prometheus "
		 "(A-Z a-z 0-9 . _ -). \"\": derived from the socket path." },
	{ .name = "plugin_dir", .type = RGAPS_CFG_STRING, CFG_AT(D, plugin_dir), .def = "\"\"",
	  .doc = "Directory of the plugin modules. \"\": the directory built in at install "
		 "time." },
	{ .name = "topics_dir", .type = RGAPS_CFG_STRING, CFG_AT(D, topics_dir), .def = "\"\"",
	  .doc = "Directory of topic files (*.json, one topic each, read in sorted order). "
		 "\"\": topics.d beside this file, skipped if absent; a relative path is taken "
		 "from this file's directory and must exist. After loading, holds the path "
		 "used." },
	{ .name = "log_level", .type = RGAPS_CFG_ENUM, CFG_AT(D, log_level), .def = "\"info\"",
	  .names = log_level_names, .doc = "Least severe log records written." },
	{ .name = "listen", .type = RGAPS_CFG_STRING, CFG_AT(D, listen), .def = "\"\"",
	  .check = check_hostport_or_empty,
	  .doc = "\"HOST:PORT\" where peer daemons connect ([ADDR]:PORT for IPv6). \"\": no "
		 "peers, this host only." },
	{ .name = "peers", .type = RGAPS_CFG_STRINGS, CFG_ARRAY_AT(D, peers, npeers), .def = "[]",
	  .check = check_hostport, .flags = RGAPS_CFG_F_UNIQUE,
	  .doc = "Peer daemons to connect to, each \"HOST:PORT\"." },
	{ .name = "key_file", .type = RGAPS_CFG_STRING, CFG_AT(D, key_file), .def = "\"\"",
	  .doc = "File holding the pre-shared key with which peer daemons authenticate each "
		 "other (challenge-response HMAC)." },
	{ .name = "keepalive_ms", .type = RGAPS_CFG_UINT, CFG_AT(D, keepalive_ms), .def = "2000",
	  .min = 10, .max = 3600000,
	  .doc = "Milliseconds between keepalives on peer connections. A peer heard nothing "
		 "from for three of them (6 s by default), not counting the time this daemon's "
		 "own loop stood still, is declared dead and reconnected. Three of its peers' "
		 "intervals must outlast this host's longest standstill (docs/CONFIG.md, "
		 "keepalive on a loaded host)." },
	{ .name = "copy_spin_us", .type = RGAPS_CFG_UINT, CFG_AT(D, copy_spin_us),
	  .def = "2000", .max = 1000000,
	  .doc = "While copies between a GPU pool and host memory are in flight (a peer's "
		 "sends staged out of the GPU, a peer's messages landing in it), rgapsd's loop "
		 "polls instead of sleeping, for at most this many microseconds after a copy "
		 "started or ended: a copy's end is seen at once, not after the loop's wake-up "
		 "(about 6 us, 7 % of a 4 MiB staging copy: docs/BENCHMARKS.md, DP1). It costs "
		 "the loop's core while GPU copies run. 0: the loop always sleeps." },
	{ .name = "socket_mode", .type = RGAPS_CFG_STRING, CFG_AT(D, socket_mode),
	  .def = "\"0666\"", .check = check_mode,
	  .doc = "Permission bits of the socket, in octal. \"0666\": every local user may "
		 "connect, and each topic's allowed_uids / allowed_gids decide who may attach; "
		 "\"0660\" with socket_group: only that group (and the daemon's user). A "
		 "directory rgapsd creates for the socket gets the matching search bits." },
	{ .name = "socket_group", .type = RGAPS_CFG_STRING, CFG_AT(D, socket_group),
	  .def = "\"\"", .check = check_group,
	  .doc = "Group of the socket (and of a directory rgapsd creates for it): a name or a "
		 "number. \"\": rgapsd's own group. Unless rgapsd runs as root, its user must "
		 "be a member of that group." },
	{ .name = "max_connections", .type = RGAPS_CFG_UINT, CFG_AT(D, max_connections),
	  .def = "1024", .min = 1, .max = 65536,
	  .doc = "Client connections open at once. One more is refused at once with the "
		 "error \"limit\" (counted: connections_refused). The last 16 places (a quarter "
		 "at most) are kept for root and rgapsd's own user, so an operator can always "
		 "connect." },
	{ .name = "max_connections_per_user", .type = RGAPS_CFG_UINT,
	  CFG_AT(D, max_connections_per_user), .def = "256", .min = 1, .max = 65536,
	  .doc = "Client connections of one user (socket credentials' uid) open at once; one "
		 "more is refused with the error \"quota\" (connections_refused_user). Root and "
		 "rgapsd's own user are bound only by max_connections." },
	{ .name = "idle_timeout_ms", .type = RGAPS_CFG_UINT, CFG_AT(D, idle_timeout_ms),
	  .def = "60000", .min = 100, .max = 86400000,
	  .doc = "A connection that holds no attachment and sends nothing for this long is "
		 "closed (idle_closed); so is any connection whose replies wait this long "
		 "without the client reading any of them (stalled_closed)." },
	{ .name = "frame_timeout_ms", .type = RGAPS_CFG_UINT, CFG_AT(D, frame_timeout_ms),
	  .def = "5000", .min = 100, .max = 600000,
	  .doc = "A request frame must arrive whole within this time of its first byte, "
		 "else the connection is closed (frame_timeouts)." },
	{ .name = "max_unsent_replies", .type = RGAPS_CFG_SIZE, CFG_AT(D, max_unsent_replies),
	  .def = "\"1MiB\"", .min = 64 * KiB, .max = GiB,
	  .doc = "Bytes of replies a connection may leave unread before rgapsd stops reading "
		 "its requests (read_pauses); reading resumes as the client catches up." },
	{ .name = "max_topics", .type = RGAPS_CFG_UINT, CFG_AT(D, max_topics), .def = "1024",
	  .min = 1, .max = 1048576,
	  .doc = "Topics made from the defaults (not in topics_dir) that rgapsd holds at "
		 "once, whoever asked for them (a client's attach or a peer's set-up); one more "
		 "is refused with the error \"limit\" (topics_refused_max). Topics of "
		 "topics_dir are always created and do not count." },
	{ .name = "max_topics_per_user", .type = RGAPS_CFG_UINT, CFG_AT(D, max_topics_per_user),
	  .def = "128", .min = 0, .max = 1048576,
	  .doc = "Of those, how many one user's attaches may create; one more is refused with "
		 "the error \"quota\" (topics_refused_quota). Root and rgapsd's own user are "
		 "bound only by max_topics." },
	{ .name = "create_topics", .type = RGAPS_CFG_ENUM, CFG_AT(D, create_topics),
	  .def = "\"any\"", .names = create_topics_names,
	  .doc = "\"any\": attaching to a topic that does not exist creates it from the "
		 "defaults; \"configured\": only topics of topics_dir exist, and others are "
		 "refused with the error \"not_found\" (topics_refused_unconfigured), from "
		 "clients and peers alike." },
	{ .name = "topic_idle_s", .type = RGAPS_CFG_UINT, CFG_AT(D, topic_idle_s), .def = "300",
	  .min = 0, .max = 31536000,
	  .doc = "A topic made from the defaults (not in topics_dir) that has had no "
		 "publisher, no subscriber, no peer's interest or ring and no history kept "
		 "for late joiners for this many seconds is removed, with its shared memory "
		 "(topics_removed_idle); the next attach makes it again. 0: never. Topics of "
		 "topics_dir are never removed." },
	{ .name = "gpu_reserve", .type = RGAPS_CFG_SIZE, CFG_AT(D, gpu_reserve),
	  .def = "\"1GiB\"", .min = 0, .max = 1024 * GiB,
	  .doc = "GPU memory that must stay free on a GPU after a cuda pool is made there; "
		 "a pool that would leave less is refused at attach with the error "
		 "\"no_memory\", naming the free memory, the pool's size and this reserve "
		 "(gpu_pools_refused). 0: only the GPU's own limit." },
	{ .name = "peer_max_pending", .type = RGAPS_CFG_UINT, CFG_AT(D, peer_max_pending),
	  .def = "64", .min = 1, .max = 65536,
	  .doc = "Peer connections accepted and not yet authenticated, in all; a stranger's "
		 "connection beyond it is closed at once (peers.pending_refused). A connection "
		 "from a configured peer's address is still admitted, in place of the oldest "
		 "stranger's (peers.pending_evicted). Each data port (tcp) holds as many "
		 "connections that have not presented their token, by the same rules "
		 "(peers.data_ports)." },
	{ .name = "peer_max_pending_per_source", .type = RGAPS_CFG_UINT,
	  CFG_AT(D, peer_max_pending_per_source), .def = "8", .min = 1, .max = 65536,
	  .doc = "Of those, how many one source address may hold; one more from a stranger "
		 "is closed at once (peers.pending_refused_source), one more from a "
		 "configured peer's address replaces the oldest of that address." },
	{ .name = "peer_hello_timeout_ms", .type = RGAPS_CFG_UINT,
	  CFG_AT(D, peer_hello_timeout_ms), .def = "1000", .min = 100, .max = 3000,
	  .doc = "An accepted peer connection must deliver its first handshake frame (HELLO) "
		 "whole within this time, else it is closed (peers.hello_timeouts); the whole "
		 "handshake must be done 3 s after the connect." },
	{ .name = "metrics_listen", .type = RGAPS_CFG_STRING, CFG_AT(D, metrics_listen),
	  .def = "\"\"", .check = check_hostport_or_empty,
	  .doc = "\"HOST:PORT\" where rgapsd serves its metrics over HTTP, in the Prometheus "
		 "text format at /metrics (what `rgaps stats --prometheus` prints), e.g. "
		 "\"127.0.0.1:9464\". At most 8 connections at once (4 from one address), "
		 "requests of at most 16 KiB, each connection closed after 5 s without "
		 "progress. \"\": off." },
	{ .name = "transport_options", .type = RGAPS_CFG_PLUGIN_OPTIONS,
	  CFG_AT(D, transport_options), .def = "{}",
	  .doc = "Tunables of the transport plugins: { \"verbs\": { \"qps\": 4 }, \"tcp\": "
		 "{ \"sndbuf\": 4194304 } }. Each plugin declares its options, with bounds "
		 "and defaults (docs/CONFIG.md); unknown names and values out of range are "
		 "refused at start." },
	{ .name = "discovery", .type = RGAPS_CFG_OBJECT, CFG_AT(D, discovery), .def = NULL,
	  .def_doc = "no discovery", .sub = &discovery_table,
	  .doc = "Membership kept in etcd, so that daemons find each other without a peers "
		 "list: an object of the discovery keys (below)." },
	{ .name = "defaults", .type = RGAPS_CFG_OBJECT, CFG_AT(D, topic_defaults), .def = NULL,
	  .def_doc = "every topic key's own default", .sub = &topic_table,
	  .doc = "Defaults for every topic: an object of topic keys (below), \"name\" excepted. "
		 "Each topic file starts from these." },
};
#undef D

static const struct rgaps_cfg_table daemon_table = { daemon_fields,
						     RGAPS_ARRAY_SIZE(daemon_fields) };

/* cfg_apply() tracks the keys seen in a 64-bit mask. */
_Static_assert(RGAPS_ARRAY_SIZE(topic_fields) <= 64, "too many topic keys");
_Static_assert(RGAPS_ARRAY_SIZE(daemon_fields) <= 64, "too many daemon keys");

/* ------------------------------------------------------------------------ */
/* Errors                                                                   */

#define cfg_fail(err, errlen, ...) rgaps__fail(-EINVAL, err, errlen, __VA_ARGS__)

/* "WHAT: key 'PREFIXKEY': WHY" */
static int cfg_fail_key(char *err, size_t errlen, const char *what, const char *prefix,
			const char *key, const char *why)
{
	char shown[80];

	return cfg_fail(err, errlen, "%s: key '%s%s': %s", what, prefix,
			cfg_show(key, shown, sizeof(shown)), why);
}

static const char *json_type_name(const cJSON *v)
{
	if (cJSON_IsNull(v))
		return "null";
	if (cJSON_IsBool(v))
		return "a boolean";
	if (cJSON_IsNumber(v))
		return "a number";
	if (cJSON_IsString(v))
		return "a string";
	if (cJSON_IsArray(v))
		return "an array";
	if (cJSON_IsObject(v))
		return "an object";
	return "an unknown value";
}

static const char *cfg_expected(const struct rgaps_cfg_field *f)
{
	switch (f->type) {
	case RGAPS_CFG_STRING:
		return "a string";
	case RGAPS_CFG_CHOICE:
	case RGAPS_CFG_ENUM:
		return "a string (one of the names)";
	case RGAPS_CFG_UINT:
		return "an integer";
	case RGAPS_CFG_SIZE:
		return "a size (a number of bytes, or a string such as \"256MiB\")";
	case RGAPS_CFG_BOOL:
		return "true or false";
	case RGAPS_CFG_DOUBLE:
		return "a number";
	case RGAPS_CFG_STRINGS:
		return "an array of strings";
	case RGAPS_CFG_IDS:
		return "an array of integers";
	case RGAPS_CFG_OBJECT:
		return "an object";
	case RGAPS_CFG_PLUGIN_OPTIONS:
		return "an object of objects of integers";
	}
	return "?";
}

/* A JSON number as a user wrote it: integers without exponent or fraction. */
static const char *cfg_num(double d, char *buf, size_t len)
{
	if (d == floor(d) && fabs(d) < 1e18)
		snprintf(buf, len, "%.0f", d);
	else
		snprintf(buf, len, "%g", d);
	return buf;
}

static void cfg_names_join(const char *const *names, const char *sep, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (size_t i = 0; names[i] && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? sep : "", names[i]);
}

static int cfg_names_find(const char *const *names, const char *s)
{
	for (int i = 0; names[i]; i++)
		if (strcmp(names[i], s) == 0)
			return i;
	return -1;
}

/* ------------------------------------------------------------------------ */
/* Value checks, shared by the parser and by validation of a filled struct  */

static bool cfg_check_uint(const struct rgaps_cfg_field *f, uint64_t v, char *why, size_t len)
{
	char a[32], b[32], c[32];

	if (v < f->min || v > f->max) {
		if (f->type == RGAPS_CFG_SIZE) {
			rgaps__format_size(f->min, a, sizeof(a));
			rgaps__format_size(f->max, b, sizeof(b));
			rgaps__format_size(v, c, sizeof(c));
			snprintf(why, len, "must be between %s and %s (got %s)", a, b, c);
		} else {
			snprintf(why, len, "must be between %" PRIu64 " and %" PRIu64
				 " (got %" PRIu64 ")", f->min, f->max, v);
		}
		return false;
	}
	if ((f->flags & RGAPS_CFG_F_POW2) && !rgaps_is_pow2(v)) {
		snprintf(why, len, "must be a power of two (got %" PRIu64 ")", v);
		return false;
	}
	return true;
}

static bool cfg_check_double(const struct rgaps_cfg_field *f, double v, char *why, size_t len)
{
	char a[32];

	if (!isfinite(v) || v < f->dmin || v > f->dmax) {
		snprintf(why, len, "must be between %g and %g (got %s)", f->dmin, f->dmax,
			 cfg_num(v, a, sizeof(a)));
		return false;
	}
	return true;
}

/* A string value of a _STRING or _CHOICE field, or an entry of a _STRINGS field. */
static bool cfg_check_string(const struct rgaps_cfg_field *f, const char *s, char *why,
			     size_t len)
{
	char names[128], shown[80];
	size_t n = strlen(s);

	if (n >= f->size) {
		snprintf(why, len, "'%s' is too long (%zu bytes, at most %zu)",
			 cfg_show(s, shown, sizeof(shown)), n, f->size - 1);
		return false;
	}
	if (f->type == RGAPS_CFG_CHOICE && cfg_names_find(f->names, s) < 0) {
		cfg_names_join(f->names, ", ", names, sizeof(names));
		snprintf(why, len, "must be one of %s (got '%s')", names,
			 cfg_show(s, shown, sizeof(shown)));
		return false;
	}
	if (f->check && !f->check(s, why, len))
		return false;
	return true;
}

/* The shape of plugin options: each plugin's entry an object of non-negative integers. */
static bool cfg_check_plugin_options(const cJSON *v, char *why, size_t len)
{
	const cJSON *plugin, *opt;

	cJSON_ArrayForEach(plugin, v) {
		if (!cJSON_IsObject(plugin)) {
			snprintf(why, len, "'%s': expected an object of options, got %s",
				 plugin->string, json_type_name(plugin));
			return false;
		}
		cJSON_ArrayForEach(opt, plugin) {
			if (!cJSON_IsNumber(opt) || opt->valuedouble < 0 ||
			    opt->valuedouble != floor(opt->valuedouble) ||
			    opt->valuedouble >= 18446744073709551616.0) {
				snprintf(why, len, "'%s.%s': expected a non-negative integer",
					 plugin->string, opt->string);
				return false;
			}
		}
	}
	return true;
}

static uint64_t cfg_load_uint(const struct rgaps_cfg_field *f, const void *p)
{
	uint32_t v32;
	uint64_t v64;

	if (f->size == sizeof(v64)) {
		memcpy(&v64, p, sizeof(v64));
		return v64;
	}
	memcpy(&v32, p, sizeof(v32));
	return v32;
}

static void cfg_store_uint(const struct rgaps_cfg_field *f, void *p, uint64_t v)
{
	uint32_t v32 = (uint32_t)v;

	rgaps_require(f->size == sizeof(uint64_t) || f->size == sizeof(uint32_t));
	if (f->size == sizeof(uint64_t))
		memcpy(p, &v, sizeof(v));
	else
		memcpy(p, &v32, sizeof(v32));
}

static uint32_t cfg_load_count(const struct rgaps_cfg_field *f, const void *base)
{
	uint32_t n;

	memcpy(&n, (const char *)base + f->count_offset, sizeof(n));
	return n;
}

/*
 * Every rule on one stored field (bounds, names, lengths, counts, repeats):
 * what the parser checked, checked again on a struct that may have been built
 * in code. Keys refused in the defaults object are skipped there.
 */
static bool cfg_check_stored(const struct rgaps_cfg_field *f, const void *base, bool in_defaults,
			     char *why, size_t len)
{
	const char *p = (const char *)base + f->offset;
	char shown[80];
	uint32_t n, i, j;
	double d;
	int iv;

	if (in_defaults && (f->flags & RGAPS_CFG_F_TOPIC_ONLY))
		return true;

	switch (f->type) {
	case RGAPS_CFG_STRING:
	case RGAPS_CFG_CHOICE:
		if (!memchr(p, '\0', f->size)) {
			snprintf(why, len, "is not NUL-terminated");
			return false;
		}
		return cfg_check_string(f, p, why, len);
	case RGAPS_CFG_ENUM:
		memcpy(&iv, p, sizeof(iv));
		for (i = 0; f->names[i]; i++)
			;
		if (iv < 0 || (uint32_t)iv >= i) {
			snprintf(why, len, "holds %d, not one of the names", iv);
			return false;
		}
		return true;
	case RGAPS_CFG_UINT:
	case RGAPS_CFG_SIZE:
		return cfg_check_uint(f, cfg_load_uint(f, p), why, len);
	case RGAPS_CFG_BOOL:
	case RGAPS_CFG_OBJECT:
		return true;
	case RGAPS_CFG_PLUGIN_OPTIONS: {
		cJSON *o;
		bool ok;

		if (!memchr(p, '\0', f->size)) {
			snprintf(why, len, "is not NUL-terminated");
			return false;
		}
		o = cJSON_Parse(p);
		ok = o && cfg_check_plugin_options(o, why, len);
		if (!o)
			snprintf(why, len, "is not JSON");
		cJSON_Delete(o);
		return ok;
	}
	case RGAPS_CFG_DOUBLE:
		memcpy(&d, p, sizeof(d));
		return cfg_check_double(f, d, why, len);
	case RGAPS_CFG_STRINGS:
	case RGAPS_CFG_IDS:
		break;
	}

	n = cfg_load_count(f, base);
	if (n > f->max_count) {
		snprintf(why, len, "too many entries (%" PRIu32 ", at most %" PRIu32 ")", n,
			 f->max_count);
		return false;
	}
	for (i = 0; i < n; i++) {
		const char *e = p + (size_t)i * f->size;
		char ewhy[CFG_WHY_MAX];

		if (f->type == RGAPS_CFG_STRINGS) {
			if (!memchr(e, '\0', f->size)) {
				snprintf(why, len, "entry %" PRIu32 " is not NUL-terminated", i);
				return false;
			}
			if (!cfg_check_string(f, e, ewhy, sizeof(ewhy))) {
				snprintf(why, len, "entry %" PRIu32 ": %s", i, ewhy);
				return false;
			}
		} else if (!cfg_check_uint(f, cfg_load_uint(f, e), ewhy, sizeof(ewhy))) {
			snprintf(why, len, "entry %" PRIu32 ": %s", i, ewhy);
			return false;
		}
		if (!(f->flags & RGAPS_CFG_F_UNIQUE))
			continue;
		for (j = 0; j < i; j++) {
			const char *o = p + (size_t)j * f->size;
			bool same = f->type == RGAPS_CFG_STRINGS ? strcmp(o, e) == 0 :
								   memcmp(o, e, f->size) == 0;

			if (!same)
				continue;
			if (f->type == RGAPS_CFG_STRINGS)
				snprintf(why, len, "entry %" PRIu32 " repeats entry %" PRIu32
					 " ('%s')", i, j, cfg_show(e, shown, sizeof(shown)));
			else
				snprintf(why, len, "entry %" PRIu32 " repeats entry %" PRIu32
					 " (%" PRIu64 ")", i, j, cfg_load_uint(f, e));
			return false;
		}
	}
	return true;
}

/* ------------------------------------------------------------------------ */
/* Setting one field from a JSON value (file values and defaults alike)     */

/* A JSON number, or for sizes a string with a unit, as a non-negative integer. */
static bool cfg_json_uint(const struct rgaps_cfg_field *f, const cJSON *v, uint64_t *out_p,
			  char *why, size_t len)
{
	char shown[80], num[40], a[32], b[32];
	const char *bad;
	double d;

	if (f->type == RGAPS_CFG_SIZE && cJSON_IsString(v)) {
		bad = rgaps__size_parse(v->valuestring, out_p);
		if (bad)
			snprintf(why, len, "'%s' %s (write a number of bytes, or one with a unit: "
				 "B, KiB, MiB, GiB, TiB, e.g. \"256MiB\")",
				 cfg_show(v->valuestring, shown, sizeof(shown)), bad);
		return !bad;
	}
	if (!cJSON_IsNumber(v)) {
		snprintf(why, len, "expected %s, got %s", cfg_expected(f), json_type_name(v));
		return false;
	}
	d = v->valuedouble;
	if (!isfinite(d) || d < 0 || d >= 18446744073709551616.0) {
		if (f->type == RGAPS_CFG_SIZE) {
			rgaps__format_size(f->min, a, sizeof(a));
			rgaps__format_size(f->max, b, sizeof(b));
		} else {
			snprintf(a, sizeof(a), "%" PRIu64, f->min);
			snprintf(b, sizeof(b), "%" PRIu64, f->max);
		}
		snprintf(why, len, "must be between %s and %s (got %s)", a, b,
			 cfg_num(d, num, sizeof(num)));
		return false;
	}
	if (d != floor(d)) {
		snprintf(why, len, "must be a whole number%s (got %s)",
			 f->type == RGAPS_CFG_SIZE ? " of bytes" : "",
			 cfg_num(d, num, sizeof(num)));
		return false;
	}
	*out_p = (uint64_t)d;
	return true;
}

static bool cfg_set(const struct rgaps_cfg_field *f, const cJSON *v, void *base, char *why,
		    size_t len)
{
	char *p = (char *)base + f->offset;
	char names[128], shown[80], ewhy[CFG_WHY_MAX];
	const cJSON *e;
	uint64_t u;
	uint32_t n;
	double d;
	int iv;

	switch (f->type) {
	case RGAPS_CFG_STRING:
	case RGAPS_CFG_CHOICE:
		if (!cJSON_IsString(v))
			goto wrong_type;
		if (!cfg_check_string(f, v->valuestring, why, len))
			return false;
		memcpy(p, v->valuestring, strlen(v->valuestring) + 1);
		return true;
	case RGAPS_CFG_ENUM:
		if (!cJSON_IsString(v))
			goto wrong_type;
		iv = cfg_names_find(f->names, v->valuestring);
		if (iv < 0) {
			cfg_names_join(f->names, ", ", names, sizeof(names));
			snprintf(why, len, "must be one of %s (got '%s')", names,
				 cfg_show(v->valuestring, shown, sizeof(shown)));
			return false;
		}
		memcpy(p, &iv, sizeof(iv));
		return true;
	case RGAPS_CFG_UINT:
	case RGAPS_CFG_SIZE:
		if (!cfg_json_uint(f, v, &u, why, len) || !cfg_check_uint(f, u, why, len))
			return false;
		cfg_store_uint(f, p, u);
		return true;
	case RGAPS_CFG_BOOL:
		if (!cJSON_IsBool(v))
			goto wrong_type;
		*(bool *)p = cJSON_IsTrue(v);
		return true;
	case RGAPS_CFG_DOUBLE:
		if (!cJSON_IsNumber(v))
			goto wrong_type;
		d = v->valuedouble;
		if (!cfg_check_double(f, d, why, len))
			return false;
		memcpy(p, &d, sizeof(d));
		return true;
	case RGAPS_CFG_STRINGS:
	case RGAPS_CFG_IDS:
		break;
	case RGAPS_CFG_OBJECT:
		rgaps_require(!"objects are applied by cfg_apply()");
		return false;
	case RGAPS_CFG_PLUGIN_OPTIONS: {
		char *text;
		bool fits;

		if (!cJSON_IsObject(v))
			goto wrong_type;
		if (!cfg_check_plugin_options(v, why, len))
			return false;
		text = cJSON_PrintUnformatted(v);
		if (!text) {
			snprintf(why, len, "out of memory");
			return false;
		}
		fits = strlen(text) < f->size;
		if (fits)
			memcpy(p, text, strlen(text) + 1);
		else
			snprintf(why, len, "too long (%zu bytes as JSON, at most %zu)", strlen(text),
				 f->size - 1);
		cJSON_free(text);
		return fits;
	}
	}

	if (!cJSON_IsArray(v))
		goto wrong_type;
	if ((unsigned int)cJSON_GetArraySize(v) > f->max_count) {
		snprintf(why, len, "too many entries (%d, at most %" PRIu32 ")",
			 cJSON_GetArraySize(v), f->max_count);
		return false;
	}
	n = 0;
	cJSON_ArrayForEach(e, v) {
		char *slot = p + (size_t)n * f->size;

		if (f->type == RGAPS_CFG_STRINGS) {
			if (!cJSON_IsString(e)) {
				snprintf(why, len, "entry %" PRIu32 ": expected a string, got %s",
					 n, json_type_name(e));
				return false;
			}
			if (strlen(e->valuestring) >= f->size) {
				cfg_check_string(f, e->valuestring, ewhy, sizeof(ewhy));
				snprintf(why, len, "entry %" PRIu32 ": %s", n, ewhy);
				return false;
			}
			memcpy(slot, e->valuestring, strlen(e->valuestring) + 1);
		} else {
			if (!cJSON_IsNumber(e)) {
				snprintf(why, len, "entry %" PRIu32 ": expected an integer, got %s",
					 n, json_type_name(e));
				return false;
			}
			if (!cfg_json_uint(f, e, &u, ewhy, sizeof(ewhy)) ||
			    !cfg_check_uint(f, u, ewhy, sizeof(ewhy))) {
				snprintf(why, len, "entry %" PRIu32 ": %s", n, ewhy);
				return false;
			}
			cfg_store_uint(f, slot, u);
		}
		n++;
	}
	memcpy((char *)base + f->count_offset, &n, sizeof(n));
	return cfg_check_stored(f, base, false, why, len);

wrong_type:
	snprintf(why, len, "expected %s, got %s", cfg_expected(f), json_type_name(v));
	return false;
}

/* ------------------------------------------------------------------------ */
/* Applying a JSON object through a table                                   */

static const struct rgaps_cfg_field *cfg_find(const struct rgaps_cfg_table *t, const char *name)
{
	for (size_t i = 0; i < t->nfields; i++)
		if (strcmp(t->fields[i].name, name) == 0)
			return &t->fields[i];
	return NULL;
}

/* Edit distance, for "did you mean": only short keys are worth comparing. */
static size_t cfg_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), row[65], i, j;

	if (la > 64 || lb > 64)
		return SIZE_MAX;
	for (j = 0; j <= lb; j++)
		row[j] = j;
	for (i = 1; i <= la; i++) {
		size_t diag = row[0];

		row[0] = i;
		for (j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t best = diag + (a[i - 1] != b[j - 1]);

			best = RGAPS_MIN(best, up + 1);
			best = RGAPS_MIN(best, row[j - 1] + 1);
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

static void cfg_unknown_why(const struct rgaps_cfg_table *t, const char *key, bool in_defaults,
			    char *why, size_t len)
{
	const struct rgaps_cfg_field *best = NULL;
	size_t best_d = 3; /* suggest only near misses */

	for (size_t i = 0; i < t->nfields; i++) {
		size_t d = cfg_distance(key, t->fields[i].name);

		if (in_defaults && (t->fields[i].flags & RGAPS_CFG_F_TOPIC_ONLY))
			continue;
		if (d < best_d) {
			best_d = d;
			best = &t->fields[i];
		}
	}
	if (best)
		snprintf(why, len, "unknown key (did you mean '%s'?)", best->name);
	else
		snprintf(why, len, "unknown key");
}

struct cfg_ctx {
	const char *what; /* the file, for messages */
	char *err;
	size_t errlen;
};

static int cfg_apply(const struct cfg_ctx *c, const struct rgaps_cfg_table *t, const cJSON *obj,
		     void *base, const char *prefix, bool in_defaults)
{
	char why[CFG_WHY_MAX], subprefix[64];
	const struct rgaps_cfg_field *f;
	uint64_t seen = 0, bit;
	const cJSON *item;
	int rc;

	cJSON_ArrayForEach(item, obj) {
		f = cfg_find(t, item->string);
		if (!f) {
			cfg_unknown_why(t, item->string, in_defaults, why, sizeof(why));
			return cfg_fail_key(c->err, c->errlen, c->what, prefix, item->string, why);
		}
		bit = UINT64_C(1) << (f - t->fields);
		if (seen & bit)
			return cfg_fail_key(c->err, c->errlen, c->what, prefix, f->name,
					    "given more than once");
		seen |= bit;
		if (in_defaults && (f->flags & RGAPS_CFG_F_TOPIC_ONLY))
			return cfg_fail_key(c->err, c->errlen, c->what, prefix, f->name,
					    "belongs in a topic file, not in defaults");
		if (f->type == RGAPS_CFG_OBJECT) {
			if (!cJSON_IsObject(item)) {
				snprintf(why, sizeof(why), "expected an object, got %s",
					 json_type_name(item));
				return cfg_fail_key(c->err, c->errlen, c->what, prefix, f->name,
						    why);
			}
			snprintf(subprefix, sizeof(subprefix), "%s%s.", prefix, f->name);
			rc = cfg_apply(c, f->sub, item, (char *)base + f->offset, subprefix,
				       f->sub == &topic_table);
			if (rc)
				return rc;
			continue;
		}
		if (!cfg_set(f, item, base, why, sizeof(why)))
			return cfg_fail_key(c->err, c->errlen, c->what, prefix, f->name, why);
	}
	return 0;
}

/* Defaults run through cfg_set(), like a file's values. */
static void cfg_defaults(const struct rgaps_cfg_table *t, void *base)
{
	char why[CFG_WHY_MAX];

	for (size_t i = 0; i < t->nfields; i++) {
		const struct rgaps_cfg_field *f = &t->fields[i];
		cJSON *v;
		bool ok;

		if (f->type == RGAPS_CFG_OBJECT) {
			cfg_defaults(f->sub, (char *)base + f->offset);
			continue;
		}
		if (!f->def)
			continue;
		v = cJSON_Parse(f->def);
		rgaps_require(v != NULL); /* a table default that is not JSON, or no memory */
		ok = cfg_set(f, v, base, why, sizeof(why));
		cJSON_Delete(v);
		rgaps_require(ok); /* a table default that its own field refuses */
	}
}

void rgapsd_topic_config_defaults(struct rgaps_topic_config *tc)
{
	memset(tc, 0, sizeof(*tc));
	cfg_defaults(&topic_table, tc);
}

void rgapsd_config_defaults(struct rgapsd_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg_defaults(&daemon_table, cfg);
}

/* ------------------------------------------------------------------------ */
/* Documents                                                                */

/*
 * "WHAT: invalid JSON at line L, column C: near 'TEXT'" for the parse that stopped at
 * byte at of json (lines and columns from 1, columns in bytes), or "...: the text
 * ends there" when it stopped at the end (a brace or bracket not closed).
 */
static void cfg_json_error(const char *json, size_t len, size_t at, const char *what, char *err,
			   size_t errlen)
{
	size_t line = 1, col = 1, n = 0, rest = at;
	char near[24];

	for (size_t i = 0; i < at && i < len; i++) {
		if (json[i] == '\n') {
			line++;
			col = 1;
		} else {
			col++;
		}
	}
	for (size_t i = at; i < len && json[i] != '\n' && n + 1 < sizeof(near); i++)
		near[n++] = (json[i] >= 0x20 && json[i] < 0x7f) ? json[i] : '?';
	near[n] = '\0';
	while (rest < len && strchr(" \t\r\n", json[rest]))
		rest++;
	if (rest >= len)
		cfg_fail(err, errlen, "%s: invalid JSON at line %zu, column %zu: the text ends there "
			 "(a brace or bracket not closed, or nothing at all?)",
			 what, line, col);
	else
		cfg_fail(err, errlen, "%s: invalid JSON at line %zu, column %zu: near '%s'", what,
			 line, col, near);
}

static cJSON *cfg_parse_json(const char *what, const char *json, size_t len, char *err,
			     size_t errlen)
{
	const char *end = NULL, *nul;
	size_t at;
	cJSON *root;

	/*
	 * cJSON's own trailing-garbage check wants a NUL inside len, which a
	 * caller's buffer need not have: check the tail here. A NUL inside the
	 * text is refused where it is.
	 */
	nul = memchr(json, '\0', len);
	if (rgaps_json_nul_escape(json, nul ? (size_t)(nul - json) : len) >= 0) {
		cfg_fail(err, errlen, "%s: a \\u0000 escape near byte %zd: keys and values may not "
			 "hold NUL", what, rgaps_json_nul_escape(json, len));
		return NULL;
	}
	root = cJSON_ParseWithLengthOpts(json, nul ? (size_t)(nul - json) : len, &end, 0);
	at = end && end >= json ? (size_t)(end - json) : 0;
	while (root && at < len && (json[at] == ' ' || json[at] == '\t' || json[at] == '\n' ||
				    json[at] == '\r'))
		at++;
	if (!root || at < len) {
		cJSON_Delete(root);
		cfg_json_error(json, len, at, what, err, errlen);
		return NULL;
	}
	if (!cJSON_IsObject(root)) {
		cfg_fail(err, errlen, "%s: expected a JSON object at the top level, got %s", what,
			 json_type_name(root));
		cJSON_Delete(root);
		return NULL;
	}
	return root;
}

/* The whole file, NUL-terminated, in *buf_p (free it). 0 or -errno with err set. */
static int cfg_read_file(const char *path, char **buf_p, size_t *len_p, char *err, size_t errlen)
{
	char sz[32], *buf;
	struct stat st;
	size_t len = 0;
	ssize_t n;
	int fd, rc;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		cfg_fail(err, errlen, "%s: cannot open: %s", path, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		cfg_fail(err, errlen, "%s: cannot stat: %s", path, strerror(-rc));
		goto close_fd;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = cfg_fail(err, errlen, "%s: not a regular file", path);
		goto close_fd;
	}
	if ((uint64_t)st.st_size > CFG_FILE_MAX) {
		rgaps__format_size((uint64_t)st.st_size, sz, sizeof(sz));
		cfg_fail(err, errlen, "%s: too large (%s, at most 1MiB)", path, sz);
		rc = -EFBIG;
		goto close_fd;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		rc = -ENOMEM;
		cfg_fail(err, errlen, "%s: out of memory", path);
		goto close_fd;
	}
	while (len < (size_t)st.st_size) {
		n = read(fd, buf + len, (size_t)st.st_size - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			cfg_fail(err, errlen, "%s: cannot read: %s", path, strerror(-rc));
			goto free_buf;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	close(fd);
	*buf_p = buf;
	*len_p = len;
	return 0;

free_buf:
	free(buf);
close_fd:
	close(fd);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Topics                                                                   */

int rgapsd_topic_config_parse(const char *json, size_t len, const char *what,
			     struct rgaps_topic_config *tc, char *err, size_t errlen)
{
	struct rgaps_topic_config tmp = *tc;
	struct cfg_ctx c = { .what = what ? what : "topic", .err = err, .errlen = errlen };
	cJSON *root;
	int rc;

	root = cfg_parse_json(c.what, json, len, err, errlen);
	if (!root)
		return -EINVAL;
	rc = cfg_apply(&c, &topic_table, root, &tmp, "", false);
	cJSON_Delete(root);
	if (rc)
		return rc;
	*tc = tmp;
	return 0;
}

static int topic_validate(const struct rgaps_topic_config *tc, const char *what,
			  const char *prefix, bool in_defaults, char *err, size_t errlen)
{
	char why[CFG_WHY_MAX], a[32], b[32];

	for (size_t i = 0; i < topic_table.nfields; i++) {
		const struct rgaps_cfg_field *f = &topic_table.fields[i];

		if (!cfg_check_stored(f, tc, in_defaults, why, sizeof(why)))
			return cfg_fail_key(err, errlen, what, prefix, f->name, why);
	}
	if (tc->max_message_size > tc->pool_size) {
		rgaps__format_size(tc->max_message_size, a, sizeof(a));
		rgaps__format_size(tc->pool_size, b, sizeof(b));
		snprintf(why, sizeof(why), "%s is larger than pool_size (%s)", a, b);
		return cfg_fail_key(err, errlen, what, prefix, "max_message_size", why);
	}
	if (tc->history >= tc->queue_depth) {
		snprintf(why, sizeof(why),
			 "must be less than queue_depth (%" PRIu32 "), got %" PRIu32,
			 tc->queue_depth, tc->history);
		return cfg_fail_key(err, errlen, what, prefix, "history", why);
	}
	if (tc->chunking && tc->chunk_size > tc->ring_size / 2) {
		rgaps__format_size(tc->chunk_size, a, sizeof(a));
		rgaps__format_size(tc->ring_size, b, sizeof(b));
		snprintf(why, sizeof(why),
			 "%s is more than half of ring_size (%s): two chunks must fit in the "
			 "receive ring", a, b);
		return cfg_fail_key(err, errlen, what, prefix, "chunk_size", why);
	}
	if (!tc->chunking && tc->max_message_size > tc->ring_size) {
		rgaps__format_size(tc->max_message_size, a, sizeof(a));
		rgaps__format_size(tc->ring_size, b, sizeof(b));
		snprintf(why, sizeof(why),
			 "%s does not fit in ring_size (%s), and chunking is off", a, b);
		return cfg_fail_key(err, errlen, what, prefix, "max_message_size", why);
	}
	return 0;
}

int rgapsd_topic_config_validate(const struct rgaps_topic_config *tc, const char *what, char *err,
				size_t errlen)
{
	return topic_validate(tc, what ? what : "topic", "", false, err, errlen);
}

/* While loading topics.d: which file defined each topic, for duplicate errors. */
struct topic_files {
	char **paths; /* parallel to cfg->topics */
	uint32_t cap;
};

static int cfg_add_topic(struct rgapsd_config *cfg, struct topic_files *tf,
			 const struct rgaps_topic_config *tc, const char *path, char *err,
			 size_t errlen)
{
	struct rgaps_topic_config *topics;
	char **paths, why[CFG_WHY_MAX];
	uint32_t cap;

	for (uint32_t i = 0; i < cfg->ntopics; i++) {
		if (strcmp(cfg->topics[i].name, tc->name) == 0) {
			snprintf(why, sizeof(why), "topic '%s' is already defined in %s", tc->name,
				 tf->paths[i]);
			return cfg_fail_key(err, errlen, path, "", "name", why);
		}
	}
	if (cfg->ntopics == tf->cap) {
		cap = tf->cap ? tf->cap * 2 : 8;
		topics = realloc(cfg->topics, cap * sizeof(*topics));
		if (!topics)
			goto nomem;
		cfg->topics = topics;
		paths = realloc(tf->paths, cap * sizeof(*paths));
		if (!paths)
			goto nomem;
		tf->paths = paths;
		tf->cap = cap;
	}
	tf->paths[cfg->ntopics] = strdup(path);
	if (!tf->paths[cfg->ntopics])
		goto nomem;
	cfg->topics[cfg->ntopics++] = *tc;
	return 0;
nomem:
	cfg_fail(err, errlen, "%s: out of memory", path);
	return -ENOMEM;
}

static int cfg_load_topic(struct rgapsd_config *cfg, struct topic_files *tf, const char *path,
			  const char *fname, char *err, size_t errlen)
{
	struct rgaps_topic_config tc = cfg->topic_defaults;
	char stem[NAME_MAX + 1], why[CFG_WHY_MAX], rule[CFG_WHY_MAX - 64], *buf;
	size_t len;
	int rc;

	snprintf(stem, sizeof(stem), "%.*s", (int)(strlen(fname) - strlen(".json")), fname);
	tc.name[0] = '\0';
	if (rgaps__topic_name_valid(stem))
		memcpy(tc.name, stem, strlen(stem) + 1);

	rc = cfg_read_file(path, &buf, &len, err, errlen);
	if (rc)
		return rc;
	rc = rgapsd_topic_config_parse(buf, len, path, &tc, err, errlen);
	free(buf);
	if (rc)
		return rc;
	if (!tc.name[0]) {
		rgaps__topic_name_check(stem, rule, sizeof(rule));
		snprintf(why, sizeof(why),
			 "the file name gives no topic name: %s; set \"name\" or rename the file",
			 rule);
		return cfg_fail_key(err, errlen, path, "", "name", why);
	}
	rc = rgapsd_topic_config_validate(&tc, path, err, errlen);
	if (rc)
		return rc;
	return cfg_add_topic(cfg, tf, &tc, path, err, errlen);
}

static int cfg_strcmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool cfg_is_topic_file(const char *name)
{
	size_t n = strlen(name);

	return name[0] != '.' && n > strlen(".json") && strcmp(name + n - 5, ".json") == 0;
}

/* Every .json file in topics_dir, in sorted order; a missing dir is fine unless required. */
static int cfg_load_topics(struct rgapsd_config *cfg, const char *what, bool required,
			   char *err, size_t errlen)
{
	struct topic_files tf = { 0 };
	char **names = NULL, **grown, path[PATH_MAX], why[CFG_WHY_MAX];
	size_t n = 0, cap = 0, i;
	struct dirent *de;
	DIR *dir;
	int rc = 0;

	dir = opendir(cfg->topics_dir);
	if (!dir) {
		rc = -errno;
		if (rc == -ENOENT && !required)
			return 0;
		snprintf(why, sizeof(why), "cannot open '%s': %s", cfg->topics_dir,
			 strerror(-rc));
		cfg_fail_key(err, errlen, what, "", "topics_dir", why);
		return rc;
	}
	while ((de = readdir(dir))) {
		if (!cfg_is_topic_file(de->d_name))
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			grown = realloc(names, cap * sizeof(*names));
			if (!grown)
				goto nomem;
			names = grown;
		}
		names[n] = strdup(de->d_name);
		if (!names[n])
			goto nomem;
		n++;
	}
	closedir(dir);
	dir = NULL;
	if (n)
		qsort(names, n, sizeof(*names), cfg_strcmp);

	for (i = 0; i < n && !rc; i++) {
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", cfg->topics_dir, names[i]) >=
		    sizeof(path)) {
			rc = cfg_fail(err, errlen, "%s/%s: path too long", cfg->topics_dir,
				      names[i]);
			break;
		}
		rc = cfg_load_topic(cfg, &tf, path, names[i], err, errlen);
	}
	goto free_names;

nomem:
	rc = cfg_fail(err, errlen, "%s: key 'topics_dir': out of memory", what);
	rc = -ENOMEM;
free_names:
	if (dir)
		closedir(dir);
	for (i = 0; i < n; i++)
		free(names[i]);
	free(names);
	for (i = 0; i < cfg->ntopics && tf.paths; i++)
		free(tf.paths[i]);
	free(tf.paths);
	return rc;
}

/* topics_dir as read: "" is topics.d beside the file; relative is from the file's dir. */
static int cfg_resolve_topics_dir(struct rgapsd_config *cfg, const char *path, bool *required_p,
				  char *err, size_t errlen)
{
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX], out[PATH_MAX], why[CFG_WHY_MAX];
	int dlen;

	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == path)
		snprintf(dir, sizeof(dir), "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)RGAPS_MIN((size_t)(slash - path),
								   sizeof(dir) - 1), path);
	dlen = (int)strlen(dir);
	if (dir[dlen - 1] == '/')
		dlen--; /* "/" joins as "/topics.d", not "//topics.d" */

	*required_p = cfg->topics_dir[0] != '\0';
	if (!cfg->topics_dir[0])
		snprintf(out, sizeof(out), "%.*s/topics.d", dlen, dir);
	else if (cfg->topics_dir[0] == '/')
		snprintf(out, sizeof(out), "%s", cfg->topics_dir);
	else
		snprintf(out, sizeof(out), "%.*s/%s", dlen, dir, cfg->topics_dir);

	if (strlen(out) >= sizeof(cfg->topics_dir)) {
		snprintf(why, sizeof(why), "the directory is too long (%zu bytes, at most %zu)",
			 strlen(out), sizeof(cfg->topics_dir) - 1);
		return cfg_fail_key(err, errlen, path, "", "topics_dir", why);
	}
	memcpy(cfg->topics_dir, out, strlen(out) + 1);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* The daemon                                                               */

/* HOST of a "HOST:PORT" is 0.0.0.0 or :: (any address of the host). */
static bool cfg_wildcard(const char *hostport)
{
	char host[RGAPS_PATH_MAX];
	struct in6_addr a6;
	struct in_addr a4;

	if (rgapsd_hostport_parse(hostport, host, sizeof(host), NULL, NULL, 0) != 0)
		return false;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return a4.s_addr == 0;
	return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_UNSPECIFIED(&a6);
}

/* Rules between the daemon's keys: what "discovery" needs of the rest. */
static int daemon_validate(const struct rgapsd_config *cfg, const char *what, char *err,
			   size_t errlen)
{
	const struct rgapsd_discovery_config *dc = &cfg->discovery;

	if (!!dc->tls_cert[0] != !!dc->tls_key[0])
		return cfg_fail_key(err, errlen, what, "discovery.", dc->tls_cert[0] ? "tls_cert" :
			"tls_key", "tls_cert and tls_key go together (a client certificate and its key)");
	if (!!dc->username[0] != !!dc->password_file[0])
		return cfg_fail_key(err, errlen, what, "discovery.", dc->username[0] ? "username" :
			"password_file", "username and password_file go together");
	if (!dc->nendpoints)
		return 0;
	if (!cfg->listen[0])
		return cfg_fail_key(err, errlen, what, "discovery.", "endpoints",
				    "needs \"listen\": the address this daemon registers, where "
				    "the others connect");
	if (!cfg->key_file[0])
		return cfg_fail_key(err, errlen, what, "discovery.", "endpoints",
				    "needs \"key_file\": the key still authenticates every "
				    "session (etcd says where a daemon is, the key that it is one "
				    "of ours)");
	if (cfg_wildcard(cfg->listen))
		return cfg_fail_key(err, errlen, what, "", "listen",
				    "with discovery, the others dial the address this daemon "
				    "registers: name one they reach, not a wildcard");
	return 0;
}

int rgapsd_config_load(const char *path, struct rgapsd_config *cfg, char *err, size_t errlen)
{
	struct cfg_ctx c = { .err = err, .errlen = errlen };
	struct stat st;
	bool required;
	size_t len;
	cJSON *root;
	char *buf;
	int rc;

	rgapsd_config_defaults(cfg);
	if (!path) {
		path = rgapsd_config_default_path;
		if (stat(path, &st) < 0 && errno == ENOENT)
			return 0; /* no file at all: everything at its default */
	}
	c.what = path;
	snprintf(cfg->source, sizeof(cfg->source), "%s", path);

	rc = cfg_read_file(path, &buf, &len, err, errlen);
	if (rc)
		return rc;
	root = cfg_parse_json(path, buf, len, err, errlen);
	free(buf);
	if (!root)
		return -EINVAL;
	rc = cfg_apply(&c, &daemon_table, root, cfg, "", false);
	cJSON_Delete(root);
	if (rc)
		goto fail;
	rc = topic_validate(&cfg->topic_defaults, path, "defaults.", true, err, errlen);
	if (rc)
		goto fail;
	rc = daemon_validate(cfg, path, err, errlen);
	if (rc)
		goto fail;
	rc = cfg_resolve_topics_dir(cfg, path, &required, err, errlen);
	if (rc)
		goto fail;
	rc = cfg_load_topics(cfg, path, required, err, errlen);
	if (rc)
		goto fail;
	return 0;

fail:
	rgapsd_config_free(cfg);
	return rc;
}

void rgapsd_config_free(struct rgapsd_config *cfg)
{
	if (!cfg)
		return;
	free(cfg->topics);
	cfg->topics = NULL;
	cfg->ntopics = 0;
}

/* ------------------------------------------------------------------------ */
/* Output: JSON for replies, text for --help-config                         */

static cJSON *cfg_field_to_json(const struct rgaps_cfg_field *f, const void *base);

static cJSON *cfg_object_to_json(const struct rgaps_cfg_table *t, const void *base)
{
	cJSON *o = cJSON_CreateObject(), *v;

	for (size_t i = 0; o && i < t->nfields; i++) {
		v = cfg_field_to_json(&t->fields[i], base);
		if (!v || !cJSON_AddItemToObject(o, t->fields[i].name, v)) {
			cJSON_Delete(v);
			cJSON_Delete(o);
			return NULL;
		}
	}
	return o;
}

static cJSON *cfg_field_to_json(const struct rgaps_cfg_field *f, const void *base)
{
	const char *p = (const char *)base + f->offset;
	uint32_t n, i, count;
	cJSON *a, *e;
	double d;
	int iv;

	switch (f->type) {
	case RGAPS_CFG_STRING:
	case RGAPS_CFG_CHOICE:
		return cJSON_CreateString(memchr(p, '\0', f->size) ? p : "");
	case RGAPS_CFG_ENUM:
		memcpy(&iv, p, sizeof(iv));
		for (count = 0; f->names[count]; count++)
			;
		return cJSON_CreateString(iv >= 0 && (uint32_t)iv < count ? f->names[iv] : "?");
	case RGAPS_CFG_UINT:
	case RGAPS_CFG_SIZE:
		return cJSON_CreateNumber((double)cfg_load_uint(f, p));
	case RGAPS_CFG_BOOL:
		return cJSON_CreateBool(*(const bool *)p);
	case RGAPS_CFG_DOUBLE:
		memcpy(&d, p, sizeof(d));
		return cJSON_CreateNumber(d);
	case RGAPS_CFG_OBJECT:
		return cfg_object_to_json(f->sub, p);
	case RGAPS_CFG_PLUGIN_OPTIONS:
		return cJSON_Parse(memchr(p, '\0', f->size) ? p : "{}");
	case RGAPS_CFG_STRINGS:
	case RGAPS_CFG_IDS:
		break;
	}
	a = cJSON_CreateArray();
	n = RGAPS_MIN(cfg_load_count(f, base), f->max_count);
	for (i = 0; a && i < n; i++) {
		const char *slot = p + (size_t)i * f->size;

		if (f->type == RGAPS_CFG_STRINGS)
			e = cJSON_CreateString(memchr(slot, '\0', f->size) ? slot : "");
		else
			e = cJSON_CreateNumber((double)cfg_load_uint(f, slot));
		if (!e || !cJSON_AddItemToArray(a, e)) {
			cJSON_Delete(e);
			cJSON_Delete(a);
			return NULL;
		}
	}
	return a;
}

void *rgapsd_topic_config_to_json(const struct rgaps_topic_config *tc)
{
	return cfg_object_to_json(&topic_table, tc);
}

static void cfg_type_doc(const struct rgaps_cfg_field *f, char *buf, size_t len)
{
	char a[32], b[32], names[128];

	switch (f->type) {
	case RGAPS_CFG_STRING:
		snprintf(buf, len, "string, at most %zu bytes", f->size - 1);
		return;
	case RGAPS_CFG_CHOICE:
	case RGAPS_CFG_ENUM:
		cfg_names_join(f->names, " | ", names, sizeof(names));
		snprintf(buf, len, "%s", names);
		return;
	case RGAPS_CFG_UINT:
		snprintf(buf, len, "%s, %" PRIu64 "..%" PRIu64,
			 f->flags & RGAPS_CFG_F_POW2 ? "power of two" : "integer", f->min, f->max);
		return;
	case RGAPS_CFG_SIZE:
		rgaps__format_size(f->min, a, sizeof(a));
		rgaps__format_size(f->max, b, sizeof(b));
		snprintf(buf, len, "size, %s..%s", a, b);
		return;
	case RGAPS_CFG_BOOL:
		snprintf(buf, len, "boolean");
		return;
	case RGAPS_CFG_DOUBLE:
		snprintf(buf, len, "number, %g..%g", f->dmin, f->dmax);
		return;
	case RGAPS_CFG_STRINGS:
		snprintf(buf, len, "array of at most %" PRIu32 " strings%s", f->max_count,
			 f->flags & RGAPS_CFG_F_UNIQUE ? ", no repeats" : "");
		return;
	case RGAPS_CFG_IDS:
		snprintf(buf, len, "array of at most %" PRIu32 " integers%s", f->max_count,
			 f->flags & RGAPS_CFG_F_UNIQUE ? ", no repeats" : "");
		return;
	case RGAPS_CFG_PLUGIN_OPTIONS:
		snprintf(buf, len, "object: plugin name -> { option: integer }");
		return;
	case RGAPS_CFG_OBJECT:
		snprintf(buf, len, "object");
		return;
	}
}

/* Words of text, wrapped to 80 columns under an indent. */
static void cfg_print_wrapped(FILE *out, const char *text, int indent)
{
	const int width = 80;
	int col = indent;
	const char *p = text;

	fprintf(out, "%*s", indent, "");
	while (*p) {
		size_t w = strcspn(p, " ");

		if (col > indent && col + 1 + (int)w > width) {
			fprintf(out, "\n%*s", indent, "");
			col = indent;
		} else if (col > indent) {
			fputc(' ', out);
			col++;
		}
		fprintf(out, "%.*s", (int)w, p);
		col += (int)w;
		p += w;
		while (*p == ' ')
			p++;
	}
	fputc('\n', out);
}

static void cfg_print_table(FILE *out, const struct rgaps_cfg_table *t)
{
	char type[160];

	for (size_t i = 0; i < t->nfields; i++) {
		const struct rgaps_cfg_field *f = &t->fields[i];

		cfg_type_doc(f, type, sizeof(type));
		fprintf(out, "  %s (%s)\n", f->name, type);
		fprintf(out, "      default: %s\n", f->def ? f->def : f->def_doc);
		cfg_print_wrapped(out, f->doc, 6);
		fputc('\n', out);
	}
}

bool rgapsd_config_key_doc(enum rgaps_config_table_id table, size_t i,
			  struct rgaps_config_key_doc *kd)
{
	const struct rgaps_cfg_table *t = table == RGAPS_CONFIG_TOPIC	  ? &topic_table :
					  table == RGAPS_CONFIG_DISCOVERY ? &discovery_table :
									    &daemon_table;
	const struct rgaps_cfg_field *f;

	if (i >= t->nfields)
		return false;
	f = &t->fields[i];
	kd->name = f->name;
	cfg_type_doc(f, kd->type, sizeof(kd->type));
	kd->def = f->def ? f->def : f->def_doc;
	kd->doc = f->doc;
	kd->topic_only = f->flags & RGAPS_CFG_F_TOPIC_ONLY;
	return true;
}

void rgapsd_config_print_help(FILE *f)
{
	fprintf(f, "Daemon keys (%s):\n\n", rgapsd_config_default_path);
	cfg_print_table(f, &daemon_table);
	fprintf(f, "Discovery keys (the \"discovery\" object of the daemon file: membership in\n"
		   "etcd, docs/CONFIG.md \"Several hosts\"):\n\n");
	cfg_print_table(f, &discovery_table);
	fprintf(f, "Topic keys (one object per topics.d/*.json file; all but \"name\" also in\n"
		   "the daemon's \"defaults\" object):\n\n");
	cfg_print_table(f, &topic_table);
	fprintf(f, "Sizes are a number of bytes or a string with a binary unit: \"4096\",\n"
		   "\"4 KiB\", \"256MiB\", \"1.5GiB\"; K, KB and KiB all mean 1024 (likewise M,\n"
		   "G, T).\n");
}
