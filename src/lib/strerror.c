/*
 * rgaps_strerror(): errno values in the words of rgaps where the generic text
 * would mislead (ENOBUFS means "release or cancel first" here, not "kernel out
 * of buffers").
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "rgaps/rgaps.h"

RGAPS_EXPORT const char *rgaps_strerror(int err)
{
	switch (abs(err)) {
	case 0:
		return "success";
	case ECONNREFUSED:
	case ENOENT:
		return "rgapsd is not running (no control socket; see $RGAPS_SOCKET)";
	case ENOTCONN:
		return "rgapsd is gone or the topic was closed";
	case EPROTONOSUPPORT:
		return "rgapsd speaks another protocol version";
	case EACCES:
		return "not on the topic's allow-list";
	case ENOSPC:
		return "no free publisher or subscriber slot on the topic";
	case EMSGSIZE:
		return "message larger than the topic's max_message_size";
	case ENOBUFS:
		return "too many messages held or loaned: release or cancel first";
	case EAGAIN:
		return "nothing available now (try again)";
	case ETIMEDOUT:
		return "timed out waiting for room or a message";
	case EPROTO:
		return "unexpected reply from rgapsd";
	case EINVAL:
		return "invalid argument";
	}
	return strerror(abs(err));
}
