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
 * librgaps: why connect(2) to the daemon's socket failed, for rgaps_strerror().
 * rgaps__connect_failed() takes connect's errno (positive), or that of a hello
 * exchange the daemon hung up on (ECONNRESET, ENOTCONN) or never answered
 * (ETIMEDOUT), and the socket path; finds the cause (no socket, which
 * directory or socket denies access and through which group it could be
 * reached, nobody listening, a daemon that hung up), keeps the text for the
 * calling thread and returns the errno to report: ENOENT (no socket), EPERM
 * (no permission: never EACCES, which means the daemon refused the attach),
 * ECONNREFUSED (nobody listens), ECONNRESET (hung up), else err.
 * rgaps__connect_succeeded()
 * forgets the text; rgaps__connect_error_text(err) gives it while err (either
 * sign) is the errno last reported by this thread's failed connect, else NULL.
 */
int rgaps__connect_failed(int err, const char *path);
void rgaps__connect_succeeded(void);
const char *rgaps__connect_error_text(int err);

/*
 * Write the reason for a failure into err (printf format; nothing when err is
 * NULL or errlen 0) and return code: `return rgaps__fail(-EINVAL, err, len,
 * "key '%s': ...", k);`. The one helper behind every "why" buffer of rgaps.
 */
int rgaps__fail(int code, char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
