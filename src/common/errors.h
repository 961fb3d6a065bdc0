/*
 * Stable error codes of the control protocol. Inside rgaps every failure is a
 * negative errno; on the wire a reply carries {"code": NAME, "errno": N,
 * "message": TEXT}. NAME comes from this one table, never changes once
 * released, and is what tools and tests match on (docs/PROTOCOL.md, "Errors").
 */
#ifndef RGAPS_COMMON_ERRORS_H
#define RGAPS_COMMON_ERRORS_H

#include <stddef.h>

/* Stable name for a (positive or negative) errno value; "internal" if none. */
const char *rgaps__errcode_name(int err);
/* errno (positive) for a stable name; EIO for an unknown name. */
int rgaps__errcode_errno(const char *name);

/*
 * librgaps: the reason for the last failure of a call in this thread, in
 * words, for rgaps_strerror(). rgaps__reason_set() keeps the text with the
 * errno the call reports and returns err unchanged (either sign), so that a
 * failing path ends in `return rgaps__reason_set(-EMSGSIZE, "...", ...)`;
 * rgaps__reason_clear() forgets it (calls that can leave a reason clear it
 * when they start); rgaps__reason_text(err) gives it while err (either sign)
 * is the errno it was kept with, else NULL.
 */
int rgaps__reason_set(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rgaps__reason_clear(void);
const char *rgaps__reason_text(int err);

/*
 * Why connect(2) to the daemon's socket failed, kept as the thread's reason.
 * rgaps__connect_failed() takes connect's errno (positive), or that of a
 * hello exchange the daemon hung up on (ECONNRESET, ENOTCONN) or never
 * answered (ETIMEDOUT), and the socket path; finds the cause (no socket, a
 * path that is not a socket, which directory or socket denies access and
 * through which group it could be reached, nobody listening, a daemon that
 * hung up), keeps the text and returns the errno to report: ENOENT (no
 * socket), EPERM (no permission: never EACCES, which means the daemon
 * refused the attach), ECONNREFUSED (nobody listens, or the path is a
 * directory or a file, not a socket), ECONNRESET (hung up), else err.
 */
int rgaps__connect_failed(int err, const char *path);

/*
 * Write the reason for a failure into err (printf format; nothing when err is
 * NULL or errlen 0) and return code: `return rgaps__fail(-EINVAL, err, len,
 * "key '%s': ...", k);`. The one helper behind every "why" buffer of rgaps.
 */
int rgaps__fail(int code, char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
