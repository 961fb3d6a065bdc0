/*
 * Files that hold secrets (secret.h): opened without following a FIFO into a
 * blocking open, checked with fstat on the open file, read whole.
 */
#include "secret.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errors.h"

#define set_err(err, errlen, ...) ((void)rgaps__fail(0, err, errlen, __VA_ARGS__))

static int secret_check(int fd, const char *path, const char *what, struct stat *st, char *err,
			size_t errlen)
{
	if (fstat(fd, st) < 0) {
		set_err(err, errlen, "%s %s: fstat: %s", what, path, strerror(errno));
		return -errno;
	}
	if (!S_ISREG(st->st_mode)) {
		set_err(err, errlen, "%s %s is not a regular file", what, path);
		return S_ISDIR(st->st_mode) ? -EISDIR : -EINVAL;
	}
	if (st->st_uid != geteuid()) {
		set_err(err, errlen,
			"%s %s belongs to uid %u, not to this daemon's user (uid %u): another user "
			"could replace it (chown %u %s)",
			what, path, (unsigned)st->st_uid, (unsigned)geteuid(), (unsigned)geteuid(),
			path);
		return -EPERM;
	}
	if (st->st_mode & 077) {
		set_err(err, errlen,
			"%s %s has mode %04o: it must not be accessible by group or others "
			"(chmod 600 %s)",
			what, path, (unsigned)(st->st_mode & 07777), path);
		return -EPERM;
	}
	return 0;
}

int rgapsd_secret_open(const char *path, const char *what, char *err, size_t errlen)
{
	struct stat st;
	int fd, rc;

	if (!path || !path[0]) {
		set_err(err, errlen, "no %s given", what);
		return -EINVAL;
	}
	/* O_NONBLOCK: a FIFO planted at the path must not block the open; it is refused. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		rc = -errno;
		set_err(err, errlen, "%s %s: %s", what, path, strerror(errno));
		return rc;
	}
	rc = secret_check(fd, path, what, &st, err, errlen);
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

int rgapsd_secret_read(const char *path, const char *what, uint8_t *buf, size_t min, size_t max,
		       char *err, size_t errlen)
{
	struct stat st;
	size_t want, got = 0;
	int fd, rc;

	if (!buf) {
		set_err(err, errlen, "no buffer for %s %s", what, path ? path : "");
		return -EINVAL;
	}
	fd = rgapsd_secret_open(path, what, err, errlen);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		set_err(err, errlen, "%s %s: fstat: %s", what, path, strerror(errno));
		goto out;
	}
	if ((uint64_t)st.st_size < min) {
		rc = -EINVAL;
		set_err(err, errlen, "%s %s holds %lld bytes: at least %zu are needed", what, path,
			(long long)st.st_size, min);
		goto out;
	}
	if ((uint64_t)st.st_size > max) {
		rc = -EFBIG;
		set_err(err, errlen, "%s %s holds %lld bytes: at most %zu are accepted", what, path,
			(long long)st.st_size, max);
		goto out;
	}
	want = (size_t)st.st_size;
	while (got < want) {
		ssize_t n = read(fd, buf + got, want - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			set_err(err, errlen, "%s %s: read: %s", what, path, strerror(errno));
			goto out_wipe;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	if (got != want) {
		rc = -EIO;
		set_err(err, errlen, "%s %s changed size while being read", what, path);
		goto out_wipe;
	}
	rc = (int)got;
	goto out;

out_wipe:
	sodium_memzero(buf, want);
out:
	close(fd);
	return rc;
}
