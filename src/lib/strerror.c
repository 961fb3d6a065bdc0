/*
 * rgaps_strerror(): errno values in the words of rgaps where the generic text
 * would mislead (ENOBUFS means "release or cancel first" here, not "kernel out
 * of buffers"). The last failure of this thread, when the library kept its
 * reason (errors.h, rgaps__reason_set()), is told in its own words: a bad topic
 * name and the rule, a message over the topic's limit and the key, a socket
 * that cannot be reached and why, rgapsd's reason for refusing an attach.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/errors.h"
#include "../common/util.h"
#include "rgaps/rgaps.h"

RGAPS_EXPORT const char *rgaps_strerror(int err)
{
	const char *reason = rgaps__reason_text(err);

	if (reason)
		return reason;
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
		return "timed out: no message came in time (take), or no room for one in the "
		       "topic's pool or queue (publish: its subscribers have not yet taken or "
		       "released earlier messages)";
	case EPROTO:
		return "unexpected reply from rgapsd";
	case EINVAL:
		return "invalid argument";
	case ECANCELED:
		return "the publisher was interrupted (rgaps_publisher_interrupt): it waits no more";
	case ESHUTDOWN:
		return "the subscriber was stopped (rgaps_subscriber_stop): it takes no more messages";
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
