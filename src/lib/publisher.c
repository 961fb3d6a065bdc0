/*
 * librgaps publisher: push (one copy into the shared pool) and loan/commit
 * (zero copies). Everything after init is shared memory: the daemon is not on
 * the hot path.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/futex.h"
#include "../common/util.h"
#include "client.h"

struct rgaps_publisher {
	struct rgaps__attach a;
};

RGAPS_EXPORT rgaps_publisher_t *rgaps_publisher_init(const char *topic)
{
	rgaps_publisher_t *pub = calloc(1, sizeof(*pub));
	int r;

	if (!pub) {
		errno = ENOMEM;
		return NULL;
	}
	r = rgaps__attach_open(topic, RGAPS__ROLE_PUB, &pub->a);
	if (r) {
		free(pub);
		errno = -r;
		return NULL;
	}
	return pub;
}

RGAPS_EXPORT void rgaps_publisher_destroy(rgaps_publisher_t *pub)
{
	if (!pub)
		return;
	rgaps__attach_close(&pub->a);
	free(pub);
}

static int effective_timeout(const rgaps_publisher_t *pub, int timeout_ms)
{
	return timeout_ms < 0 ? (int)pub->a.topic.hdr->block_timeout_ms : timeout_ms;
}

RGAPS_EXPORT int rgaps_publisher_loan(rgaps_publisher_t *pub, size_t size, int timeout_ms,
				      rgaps_loan_t *loan_p)
{
	uint32_t token;
	uint64_t off;
	int r;

	if (!pub || !loan_p)
		return -EINVAL;
	r = rgaps_topic_loan(&pub->a.topic, pub->a.slot, size, effective_timeout(pub, timeout_ms),
			     rgaps__alive, &pub->a, &token, &off);
	if (r)
		return r;
	loan_p->data = pub->a.topic.pool + off;
	loan_p->size = size;
	loan_p->token = token;
	loan_p->reserved = 0;
	return 0;
}

RGAPS_EXPORT int rgaps_publisher_commit(rgaps_publisher_t *pub, rgaps_loan_t *loan, size_t size)
{
	if (!pub || !loan)
		return -EINVAL;
	if (size > loan->size) {
		rgaps_topic_cancel(&pub->a.topic, pub->a.slot, loan->token);
		return -EINVAL;
	}
	return rgaps_topic_commit(&pub->a.topic, pub->a.slot, loan->token, size,
				  rgaps_now_ns(CLOCK_REALTIME),
				  effective_timeout(pub, -1), rgaps__alive, &pub->a, NULL);
}

RGAPS_EXPORT int rgaps_publisher_cancel(rgaps_publisher_t *pub, rgaps_loan_t *loan)
{
	if (!pub || !loan)
		return -EINVAL;
	return rgaps_topic_cancel(&pub->a.topic, pub->a.slot, loan->token);
}

RGAPS_EXPORT int rgaps_publisher_push_timeout(rgaps_publisher_t *pub, size_t size,
					      const void *device_ptr, int timeout_ms)
{
	uint64_t ts = rgaps_now_ns(CLOCK_REALTIME), start, spent;
	rgaps_loan_t loan;
	int r, t;

	if (!pub || !device_ptr)
		return -EINVAL;
	t = effective_timeout(pub, timeout_ms);
	start = rgaps_now_ns(CLOCK_MONOTONIC);
	r = rgaps_publisher_loan(pub, size, t, &loan);
	if (r)
		return r;
	r = pub->a.mem->ops.memory.copy(pub->a.mem->ctx, loan.data, device_ptr, size,
					RGAPS_COPY_TO_POOL);
	if (r) {
		rgaps_topic_cancel(&pub->a.topic, pub->a.slot, loan.token);
		return r;
	}
	/* The commit may wait for a queue entry: only for what is left of the timeout. */
	spent = (rgaps_now_ns(CLOCK_MONOTONIC) - start) / 1000000;
	if (t > 0)
		t = spent >= (uint64_t)t ? 0 : t - (int)spent;
	return rgaps_topic_commit(&pub->a.topic, pub->a.slot, loan.token, size, ts, t,
				  rgaps__alive, &pub->a, NULL);
}

RGAPS_EXPORT int rgaps_publisher_push(rgaps_publisher_t *pub, size_t size, const void *device_ptr)
{
	return rgaps_publisher_push_timeout(pub, size, device_ptr, -1);
}

RGAPS_EXPORT int rgaps_publisher_info(rgaps_publisher_t *pub, rgaps_topic_info_t *info)
{
	if (!pub)
		return -EINVAL;
	return rgaps__attach_info(&pub->a, info);
}
