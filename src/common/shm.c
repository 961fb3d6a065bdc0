/*
 * POSIX shm helpers (see shm.h). Segments are created by rgapsd only and
 * handed to clients as file descriptors over the control socket, so a client
 * never needs a name and the topic's allow-list cannot be bypassed by opening
 * /dev/shm directly (the files are 0600, owned by the daemon's user).
 */
#include "shm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int rgaps_shm_name(char *buf, size_t len, const char *instance, const char *topic,
		   const char *role)
{
	int n = snprintf(buf, len, "/rgaps-%s-%s-%s", instance, topic, role);

	return (n < 0 || (size_t)n >= len) ? -ENAMETOOLONG : 0;
}

int rgaps_shm_create(const char *name, size_t size)
{
	int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);

	if (fd < 0 && errno == EEXIST) {
		/* Left by a daemon of this instance that died; we hold its lock now. */
		shm_unlink(name);
		fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
	}
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0) {
		int e = errno;

		close(fd);
		shm_unlink(name);
		return -e;
	}
	return fd;
}

int rgaps_shm_map(int fd, size_t size, void **addr_p)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	if (p == MAP_FAILED)
		return -errno;
	*addr_p = p;
	return 0;
}

int rgaps_shm_cleanup_instance(const char *instance)
{
	char prefix[RGAPS_SHM_NAME_MAX];
	DIR *d = opendir("/dev/shm");
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	snprintf(prefix, sizeof(prefix), "rgaps-%s-", instance);
	while ((de = readdir(d))) {
		char name[RGAPS_SHM_NAME_MAX + 2];

		if (strncmp(de->d_name, prefix, strlen(prefix)) != 0)
			continue;
		snprintf(name, sizeof(name), "/%s", de->d_name);
		if (shm_unlink(name) == 0)
			n++;
	}
	closedir(d);
	return n;
}
