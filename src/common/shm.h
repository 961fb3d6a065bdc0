/*
 * Named POSIX shared-memory segments of one daemon instance. Names are
 * "/rgaps-INSTANCE-TOPIC-ROLE" so several daemons can share a machine (tests)
 * and a restarted daemon can find and remove what a crashed one left behind.
 */
#ifndef RGAPS_COMMON_SHM_H
#define RGAPS_COMMON_SHM_H

#include <stddef.h>

#define RGAPS_SHM_NAME_MAX 160

/* "/rgaps-INSTANCE-TOPIC-ROLE" into buf; -ENAMETOOLONG if it does not fit. */
int rgaps_shm_name(char *buf, size_t len, const char *instance, const char *topic,
		   const char *role);
/* Create (O_EXCL, mode 0600) and size a segment; returns the fd or -errno. */
int rgaps_shm_create(const char *name, size_t size);
/* Map an fd read-write shared. 0 or -errno. */
int rgaps_shm_map(int fd, size_t size, void **addr_p);
/* Unlink every segment of this instance; returns how many were removed. */
int rgaps_shm_cleanup_instance(const char *instance);

#endif
