/*
 * librgaps internals: the control connection to rgapsd and the attachment of a
 * handle to a topic (mapped metadata segment, imported pool, memory plugin).
 * One connection per handle: closing it (or dying) is the detach that makes
 * rgapsd reclaim the handle's slot, holds and loans.
 */
#ifndef RGAPS_LIB_CLIENT_H
#define RGAPS_LIB_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include "../common/plugin_loader.h"
#include "../common/topic.h"
#include "rgaps/rgaps.h"

struct cJSON;

enum rgaps__role {
	RGAPS__ROLE_PUB,
	RGAPS__ROLE_SUB,
};

struct rgaps__attach {
	int fd; /* control connection */
	enum rgaps__role role;
	uint32_t slot;
	struct rgaps_topic topic;
	void *meta;
	size_t meta_size;
	struct rgaps_loaded_plugin *mem;
	struct rgaps_mem_region pool;
	char memory_name[32];
	int32_t device;
};

/* Socket path: $RGAPS_SOCKET, else the default. */
const char *rgaps__socket_path(void);
/* Connect and say hello. Returns fd or -errno. */
int rgaps__connect(void);
/*
 * One request, one reply. On success *reply_p is the parsed reply (ok true);
 * an error reply becomes its errno (negative) and nothing is returned. Up to
 * *nfds_p fds are received into fds; *nfds_p is set to how many came.
 */
int rgaps__request(int fd, struct cJSON *req, int timeout_ms, struct cJSON **reply_p, int *fds,
		   int *nfds_p);
int rgaps__attach_open(const char *topic, enum rgaps__role role, struct rgaps__attach *a);
void rgaps__attach_close(struct rgaps__attach *a);
/* Liveness check of the daemon for long waits (rgaps_topic_alive_fn). */
bool rgaps__alive(void *attach);
int rgaps__attach_info(struct rgaps__attach *a, rgaps_topic_info_t *info);

#endif
