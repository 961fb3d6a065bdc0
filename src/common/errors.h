/*
 * Stable error codes of the control protocol. Inside rgaps every failure is a
 * negative errno; on the wire a reply carries {"code": NAME, "errno": N,
 * "message": TEXT}. NAME comes from this one table, never changes once
 * released, and is what tools and tests match on (docs/PROTOCOL.md, "Errors").
 */
#ifndef RGAPS_COMMON_ERRORS_H
#define RGAPS_COMMON_ERRORS_H

/* Stable name for a (positive or negative) errno value; "internal" if none. */
const char *rgaps__errcode_name(int err);
/* errno (positive) for a stable name; EIO for an unknown name. */
int rgaps__errcode_errno(const char *name);

#endif
