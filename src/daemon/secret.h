/*
 * Files that hold secrets: the peers' pre-shared key, an etcd password, the
 * private key of a TLS client certificate. Each must be a regular file of this
 * daemon's effective user that neither group nor others may read or write;
 * anything else is refused with what to do about it. Checked on the open file,
 * so nothing can be swapped in between the check and the read.
 */
#ifndef RGAPSD_SECRET_H
#define RGAPSD_SECRET_H

#include <stddef.h>
#include <stdint.h>

/*
 * Open path (what names it in messages: "key file") and check it. The fd
 * (close it), or a negative errno with the reason in err.
 */
int rgapsd_secret_open(const char *path, const char *what, char *err, size_t errlen);

/*
 * Read the whole file into buf: min to max bytes. Its length, or a negative errno
 * with the reason in err (buf wiped of what was read).
 */
int rgapsd_secret_read(const char *path, const char *what, uint8_t *buf, size_t min, size_t max,
		       char *err, size_t errlen);

#endif
