/*
 * rgaps_strerror(): errno values in the words of rgaps where the generic text
 * would mislead (ENOBUFS means "release or cancel first" here, not "kernel out
 * of buffers"). A connect to the daemon's socket that failed in this thread is
 * told with its cause and the path (errors.h, rgaps__connect_failed()): no
 * socket, which directory denies access and what to do, nobody listening.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/errors.h"
#include "../common/util.h"
#include "rgaps/rgaps.h"

RGAPS_EXPORT const char *rgaps_strerror(int err)
{
	const char *connect_text = rgaps__connect_error_text(err);

	if (connect_text)
		return connect_text;
	switch (abs(err)) {
	case 0:
		return "success";
	case ENOENT:
		return "not found: no rgapsd socket (is rgapsd running?), or no such topic";
	case ECONNREFUSED:
		return "rgapsd is not running: nothing listens at its socket";
	case EPERM:
		return "no permission to reach rgapsd's socket: join the group of its directory "
		       "(rgaps for the packaged service), then log in again";
	case ENOTCONN:
		return "rgapsd is gone or the topic was closed";
	case EPROTONOSUPPORT:
		return "rgapsd speaks another protocol version";
	case EACCES:
		return "rgapsd refused: not on the topic's allow-list (allowed_uids, allowed_gids)";
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
	case ENFILE:
		return "rgapsd is at a limit (max_connections or max_topics)";
	case EDQUOT:
		return "this user is at its limit of connections or topics in rgapsd";
	case ENOMEM:
		return "out of memory (here or in rgapsd; on a GPU topic: the pool would leave "
		       "less than gpu_reserve free on the GPU, rgapsd's log has the numbers)";
	}
	return strerror(abs(err));
}
