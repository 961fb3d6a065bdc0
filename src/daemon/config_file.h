/*
 * rgapsd's configuration files (docs/ARCHITECTURE.md section 8): the daemon's file and
 * one file per topic in topics.d.
 *
 * Each component declares its keys once, in a table of struct rgaps_cfg_field
 * (name, type, offset into the struct, default, doc, bounds); parsing,
 * validation, defaults and the `rgapsd --help-config` text all come from that
 * table. Unknown keys, wrong types and impossible values are refused with the
 * file, the key and the reason. Plugin names are checked afterwards against
 * the plugins found (registry.h).
 */
#ifndef RGAPSD_CONFIG_FILE_H
#define RGAPSD_CONFIG_FILE_H

#include <stdio.h>

#include "../common/config.h"

#define RGAPS_CFG_MAX_PEERS 16
#define RGAPS_CFG_MAX_ENDPOINTS 8 /* etcd members named in "discovery" */
#define RGAPS_CFG_PREFIX_MAX 128

enum rgapsd_create_topics {
	RGAPSD_CREATE_ANY = 0,	      /* a client's attach creates any topic it names */
	RGAPSD_CREATE_CONFIGURED = 1, /* only topics of topics.d exist */
};

/*
 * The "discovery" object: membership kept in etcd (src/daemon/membership/). No
 * endpoints: none, the configured "peers" only.
 */
struct rgapsd_discovery_config {
	char endpoints[RGAPS_CFG_MAX_ENDPOINTS][RGAPS_PATH_MAX]; /* "http(s)://HOST:PORT" */
	uint32_t nendpoints;
	char prefix[RGAPS_CFG_PREFIX_MAX]; /* one cluster's keys: "/rgaps/prod" */
	uint32_t lease_ttl_s;		   /* a daemon gone is forgotten after this */
	uint32_t timeout_ms;		   /* one request to etcd */
	char tls_ca[RGAPS_PATH_MAX];	   /* "": the system's CAs (https endpoints) */
	char tls_cert[RGAPS_PATH_MAX];	   /* client certificate, with tls_key */
	char tls_key[RGAPS_PATH_MAX];
	char username[RGAPS_CFG_PREFIX_MAX]; /* etcd authentication ("": none) */
	char password_file[RGAPS_PATH_MAX];
};

struct rgapsd_config {
	char socket_path[RGAPS_SOCKET_PATH_MAX + 1];
	char instance[RGAPS_CFG_NAME_MAX]; /* a label in stats; "" = derived from socket path */
	char plugin_dir[RGAPS_PATH_MAX];   /* "" = built-in default */
	char topics_dir[RGAPS_PATH_MAX];   /* "" = <dir of config file>/topics.d, none without a file */
	int log_level;			   /* enum rgaps_log_level */
	char listen[RGAPS_PATH_MAX];	   /* "HOST:PORT" for peers; "" = single host */
	char peers[RGAPS_CFG_MAX_PEERS][RGAPS_PATH_MAX];
	uint32_t npeers;
	char key_file[RGAPS_PATH_MAX];
	uint32_t keepalive_ms;
	uint32_t copy_spin_us; /* the loop polls this long after a GPU copy started or ended */
	/* Bounds on what local clients can make rgapsd hold (docs/CONFIG.md). */
	uint32_t max_connections;	   /* client connections open at once */
	uint32_t max_connections_per_user; /* of one uid (0 and rgapsd's own: only the above) */
	uint32_t idle_timeout_ms;	   /* an unattached connection silent this long is closed */
	uint32_t frame_timeout_ms;	   /* a frame begun must be complete within this */
	uint64_t max_unsent_replies;	   /* bytes: reading stops while more wait to be sent */
	uint32_t max_topics;		   /* topics not in topics.d, held at once */
	uint32_t max_topics_per_user;	   /* of those, created by one uid (0, ours: exempt) */
	int create_topics;		   /* enum rgapsd_create_topics */
	uint32_t topic_idle_s;		   /* an unused topic from the defaults goes after (0: never) */
	uint64_t gpu_reserve;		   /* bytes of GPU memory a new cuda pool must leave free */
	uint32_t peer_max_pending;	   /* peer connections not yet authenticated, in all */
	uint32_t peer_max_pending_per_source; /* of those, from one source address */
	uint32_t peer_hello_timeout_ms;	   /* an accepted peer connection's first frame */
	char socket_mode[8];		   /* octal permission bits of the socket, e.g. "0660" */
	char socket_group[RGAPS_CFG_NAME_MAX]; /* group of the socket (name or number); "" */
	char metrics_listen[RGAPS_PATH_MAX]; /* "HOST:PORT" of the Prometheus endpoint; "" off */
	char transport_options[2048]; /* JSON: { "<transport>": { "<option>": N } } */
	struct rgapsd_discovery_config discovery;
	struct rgaps_topic_config topic_defaults; /* the "defaults" object */
	struct rgaps_topic_config *topics;	  /* from topics.d, malloc'd */
	uint32_t ntopics;
	char source[RGAPS_PATH_MAX]; /* the file loaded ("" = none), for messages */
};

/* The daemon file read without -c: <sysconfdir>/rgaps/rgapsd.json of the build. */
extern const char *rgapsd_config_default_path;

/* Fill defaults (what runs with no file at all). */
void rgapsd_config_defaults(struct rgapsd_config *cfg);

/*
 * Load the daemon configuration from path (JSON object), then every .json
 * file in <topics_dir> (one topic object per file; "name" defaults to the file
 * name without .json); topic files start from the daemon's "defaults" object.
 * path NULL: use rgapsd_config_default_path if it exists, else only defaults.
 * On error returns -EINVAL (or -errno for I/O), and err holds
 * "FILE: key 'KEY': REASON". cfg is always safe to pass to rgapsd_config_free.
 */
int rgapsd_config_load(const char *path, struct rgapsd_config *cfg, char *err, size_t errlen);
void rgapsd_config_free(struct rgapsd_config *cfg);

/*
 * Parse one topic object (JSON text) on top of *tc (which holds the defaults).
 * what names the source in error messages (a file name). Returns 0 or -EINVAL.
 */
int rgapsd_topic_config_parse(const char *json, size_t len, const char *what,
			     struct rgaps_topic_config *tc, char *err, size_t errlen);

/* Cross-field checks (e.g. max_message_size <= pool_size). 0 or -EINVAL + err. */
int rgapsd_topic_config_validate(const struct rgaps_topic_config *tc, const char *what, char *err,
				size_t errlen);

/* Print every key of both tables with type, default and doc (rgapsd --help-config). */
void rgapsd_config_print_help(FILE *f);

/* The tables rgapsd_config_key_doc() walks. */
enum rgaps_config_table_id {
	RGAPS_CONFIG_DAEMON,	/* rgapsd.json */
	RGAPS_CONFIG_TOPIC,	/* topics.d/NAME.json and the daemon's "defaults" object */
	RGAPS_CONFIG_DISCOVERY, /* the daemon's "discovery" object */
};

/* One key as --help-config shows it, for the rgapsd.json(5) generator (man/). */
struct rgaps_config_key_doc {
	const char *name;
	char type[160];	 /* "size, 4KiB..1TiB", "block | drop_oldest", ... */
	const char *def; /* as written in a file ("\"256MiB\"", "64"), or a phrase */
	const char *doc;
	bool topic_only; /* refused in the daemon's "defaults" object */
};

/* Key i of a table: true and *kd filled, false past its last key. */
bool rgapsd_config_key_doc(enum rgaps_config_table_id table, size_t i,
			  struct rgaps_config_key_doc *kd);

/* The topic config as a cJSON object (for stats/topics replies). Returns cJSON* as void*. */
void *rgapsd_topic_config_to_json(const struct rgaps_topic_config *tc);

#endif
