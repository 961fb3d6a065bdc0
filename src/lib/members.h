/*
 * librgaps internals: the other members of an attached topic, mapped as
 * rgapsd tells of them (members.c).
 */
#ifndef RGAPS_LIB_MEMBERS_H
#define RGAPS_LIB_MEMBERS_H

#include "client.h"

struct cJSON;

/*
 * Apply the "remove", "members" and "limits" of an attach or sync reply
 * (docs/PROTOCOL.md). Returns 1 if rgapsd has more to tell ("more"), 0, or
 * -errno. Unused fds are closed.
 */
int rgaps__members_apply(struct rgaps__attach *a, const struct cJSON *reply, int *fds, int nfds);
/* Unmap a member and release its pool; *m is zeroed. */
void rgaps__peer_unmap(struct rgaps__attach *a, struct rgaps__peer_map *m);
/* The sync callback of topic.h: fetch and map what changed among the members. */
int rgaps__sync(void *attach);
/* Unmap retired streams nobody holds any more (subscriber, after a release). */
void rgaps__sweep_retired(struct rgaps__attach *a);
/* The mapped region of stream slot (NULL when not mapped): for its fence handles. */
const struct rgaps_pub_region *rgaps__stream_region(struct rgaps__attach *a, uint32_t slot,
						    uint64_t gen);

#endif
