/*
 * The table of stable wire error codes (see errors.h). Adding a row is fine;
 * renaming or removing one breaks clients and is never done.
 */
#include "errors.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static const struct {
	int err;
	const char *name;
} errcodes[] = {
	{ EBADMSG, "bad_frame" },	    /* frame or JSON that cannot be parsed */
	{ EMSGSIZE, "too_large" },	    /* frame or message over its limit */
	{ EPROTO, "bad_request" },	    /* well-formed JSON, wrong fields */
	{ EOPNOTSUPP, "unknown_request" },  /* no such request type */
	{ EINVAL, "invalid" },		    /* a field's value is refused */
	{ ENOENT, "not_found" },	    /* no such topic / attachment */
	{ EACCES, "denied" },		    /* allow-list or permissions */
	{ EEXIST, "exists" },		    /* already attached / already there */
	{ ENOMEM, "no_memory" },	    /* the daemon is out of memory */
	{ ENOSPC, "no_space" },		    /* no free slot (subscribers, publishers) */
	{ EBUSY, "busy" },		    /* resource in use */
	{ EPROTONOSUPPORT, "version" },	    /* protocol version mismatch */
	{ ENOTCONN, "not_attached" },	    /* request needs an attachment first */
	{ EAGAIN, "again" },		    /* try later */
	{ ETIMEDOUT, "timeout" },	    /* an operation timed out */
	{ ENOTSUP, "not_supported" },	    /* plugin lacks the operation */
	{ ENODEV, "no_device" },	    /* memory or transport device missing */
	{ ECONNRESET, "peer_gone" },	    /* peer daemon disconnected */
	{ EIO, "internal" },		    /* anything else */
};

const char *rgaps__errcode_name(int err)
{
	err = abs(err);
	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(errcodes); i++)
		if (errcodes[i].err == err)
			return errcodes[i].name;
	return "internal";
}

int rgaps__errcode_errno(const char *name)
{
	for (size_t i = 0; name && i < RGAPS_ARRAY_SIZE(errcodes); i++)
		if (strcmp(errcodes[i].name, name) == 0)
			return errcodes[i].err;
	return EIO;
}
