/*
 * rgapsd's process-wide state, owned by the loop thread: configuration, the
 * control server, the topic table and the loaded plugins. Lifecycle:
 * rgapsd_init() -> uv_run() -> (SIGTERM/SIGINT) rgapsd_shutdown() -> the loop
 * drains its handles -> rgapsd_fini().
 */
#ifndef RGAPSD_DAEMON_H
#define RGAPSD_DAEMON_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "../common/config.h"
#include "../common/plugin_loader.h"
#include "../common/topic.h"
#include "control.h"

#define RGAPSD_MAX_MEMORY_PLUGINS 4

struct rgapsd_topic {
	struct rgapsd_topic *next;
	struct rgaps_topic_config cfg;
	struct rgaps_topic t;
	int meta_fd;
	char meta_name[192];
	struct rgaps_loaded_plugin *mem; /* shared, owned by struct rgapsd */
	struct rgaps_mem_region pool;
	uint32_t attachments;
	uint32_t local_subs;  /* client subscribers (advertised to peers when > 0) */
	bool publishers_seen; /* a local publisher attached once: send to interested peers */
	uint64_t landed_msgs, landed_bytes; /* received from peers and published here */
	uint64_t refused_msgs;		    /* received from peers, refused here (counted gaps) */
	uint64_t landed_gaps;		    /* lost upstream (seen as sequence gaps), all rings */
};

struct rgapsd {
	uv_loop_t *loop;
	struct rgapsd_config cfg;
	char instance[RGAPS_CFG_NAME_MAX];
	char plugin_dir[RGAPS_PATH_MAX];
	struct rgapsd_control *ctl;
	uv_signal_t sig_term, sig_int;
	struct rgapsd_topic *topics;
	uint32_t ntopics;
	struct rgaps_loaded_plugin *mem_plugins[RGAPSD_MAX_MEMORY_PLUGINS];
	uint32_t nmem_plugins;
	uint64_t start_ns;
	uint64_t requests, request_errors, connections;
	bool stopping;
	struct rgapsd_remote *remote;	   /* peers and transports (NULL: single host) */
	struct rgapsd_remote *remote_dead; /* a failed start, freed in rgapsd_fini */
};

int rgapsd_init(struct rgapsd *d, uv_loop_t *loop, const struct rgapsd_config *cfg);
void rgapsd_shutdown(struct rgapsd *d);
void rgapsd_fini(struct rgapsd *d);

/* Request handling (requests.c). */
void rgapsd__on_frame(void *ctx, struct rgapsd_conn *conn, const char *payload, size_t len);
void rgapsd__on_close(void *ctx, struct rgapsd_conn *conn);

/* Topics (topics.c). */
int rgapsd__topic_get(struct rgapsd *d, const char *name, struct rgapsd_topic **t_p, char *err,
		      size_t errlen);
void rgapsd__topics_destroy(struct rgapsd *d);
bool rgapsd__topic_allows(const struct rgapsd_topic *t, uid_t uid, gid_t gid);

#endif
