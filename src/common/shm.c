/*
 * The shared-memory objects of rgaps (shm.h): memfds, made and sealed by
 * rgapsd and checked by whoever maps one. Why each step is there:
 *
 * - memfd, not shm_open: no name in /dev/shm that another user could create
 *   first, that a second daemon sharing /dev/shm could remove, or that a
 *   crash could leave behind; and memfds live on the kernel's own tmpfs, so a
 *   full /dev/shm is no concern of ours.
 * - mode 0600: a memfd is made 0777 (0666 without exec); anyone holding a
 *   read-only fd could otherwise reopen /proc/self/fd/N read-write.
 * - F_SEAL_SHRINK | F_SEAL_GROW: a mapping never reaches past the end.
 * - fallocate: every page exists before anyone but its owner maps the object,
 *   so a lack of memory is an error, not a SIGBUS at the first touch.
 * - F_SEAL_FUTURE_WRITE, then a look at the block count, then F_SEAL_SEAL:
 *   punching a hole needs write access to the object, which the first seal
 *   takes away from every fd (the owner's mapping, made before, stays
 *   writable); after it, no page can go missing, so one missing then is
 *   missing for good, and the object is refused.
 */
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"

#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008u /* Linux 6.3: not executable, ever (and no warning) */
#endif
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

#define SEALS_MADE (F_SEAL_SHRINK | F_SEAL_GROW)
#define SEALS_FINAL (SEALS_MADE | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)

int rgaps__shm_name(char *buf, size_t len, const char *instance, const char *topic,
		    const char *role)
{
	int n = snprintf(buf, len, "rgaps-%s-%s-%s", instance, topic, role);

	return (n < 0 || (size_t)n >= len) ? -ENAMETOOLONG : 0;
}

/* fallocate's failures in words: what the administrator can change. */
static void alloc_failed(int e, uint64_t size, char *why, size_t whylen)
{
	char s[32];

	rgaps__format_size(size, s, sizeof(s));
	if (e == EFBIG)
		snprintf(why, whylen,
			 "cannot allocate %s of shared memory: larger than this "
			 "process's file size limit (ulimit -f, LimitFSIZE=)",
			 s);
	else if (e == ENOMEM || e == ENOSPC)
		snprintf(why, whylen,
			 "cannot allocate %s of shared memory: %s (host memory, "
			 "or this process's memory cgroup, is full)",
			 s, strerror(e));
	else
		snprintf(why, whylen, "cannot allocate %s of shared memory: %s", s, strerror(e));
}

int rgaps__shm_create(const char *name, uint64_t size, char *why, size_t whylen)
{
	int fd, e;

	if (size == 0 || size > (uint64_t)INT64_MAX) {
		snprintf(why, whylen, "a shared-memory object of %llu bytes",
			 (unsigned long long)size);
		return -EINVAL;
	}
	fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL);
	if (fd < 0 && errno == EINVAL) /* a kernel before 6.3 */
		fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		e = -errno;
		snprintf(why, whylen, "memfd_create: %s", strerror(-e));
		return e;
	}
	if (fchmod(fd, 0600) < 0) {
		e = -errno;
		snprintf(why, whylen, "cannot make the object private (fchmod 0600): %s",
			 strerror(-e));
		goto err;
	}
	if (ftruncate(fd, (off_t)size) < 0) {
		e = -errno;
		alloc_failed(-e, size, why, whylen);
		goto err;
	}
	if (fcntl(fd, F_ADD_SEALS, SEALS_MADE) < 0) {
		e = -errno;
		snprintf(why, whylen, "cannot seal the object's size: %s", strerror(-e));
		goto err;
	}
	return fd;
err:
	close(fd);
	return e;
}

int rgaps__shm_back(int fd, uint64_t size, char *why, size_t whylen)
{
	int e;

	if (fallocate(fd, 0, 0, (off_t)size) == 0)
		return 0;
	e = errno == ENOSPC ? ENOMEM : errno;
	alloc_failed(e, size, why, whylen);
	return -e;
}

/* Every page of the object's size has memory (no hole). */
static bool fully_backed(int fd, uint64_t size)
{
	struct stat st;

	return fstat(fd, &st) == 0 && (uint64_t)st.st_blocks * 512 >= size;
}

int rgaps__shm_seal(int fd, uint64_t size, bool whole, char *why, size_t whylen)
{
	int seals = fcntl(fd, F_GET_SEALS), e;

	if (seals < 0) {
		e = -errno;
		snprintf(why, whylen, "cannot read the object's seals: %s", strerror(-e));
		return e;
	}
	/* First no more write access anywhere, so that no hole can be punched after... */
	if (!(seals & F_SEAL_FUTURE_WRITE) && fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) < 0) {
		e = -errno;
		snprintf(why, whylen, "cannot seal the object against writers: %s%s", strerror(-e),
			 e == -EPERM ? " (its owner sealed its seals first)" : "");
		return e;
	}
	/* ...then every page must be there: one missing now stays missing. */
	if (whole && !fully_backed(fd, size)) {
		snprintf(why, whylen,
			 "a page of the object is missing: it was not backed whole, "
			 "or a hole was punched in it");
		return -EFAULT;
	}
	if (!(seals & F_SEAL_SEAL) && fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL) < 0) {
		e = -errno;
		snprintf(why, whylen, "cannot seal the object's seals: %s", strerror(-e));
		return e;
	}
	return 0;
}

int rgaps__shm_check(int fd, uint64_t size, bool sealed)
{
	int want = sealed ? SEALS_FINAL : SEALS_MADE, seals;
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0)
		return errno == EINVAL ? -EBADFD : -errno;
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != size)
		return -EBADFD;
	return (seals & want) == want ? 0 : -EPERM;
}

int rgaps__shm_reopen_read_only(int fd)
{
	char path[64];
	int r;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	r = open(path, O_RDONLY | O_CLOEXEC);
	return r < 0 ? -errno : r;
}

int rgaps__shm_map(int fd, size_t size, void **addr_p)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	if (p == MAP_FAILED)
		return -errno;
	*addr_p = p;
	return 0;
}
