/**
 * @file rgaps.h
 * @brief librgaps: the client API of rgaps (Remote GPU-Aware Publish/Subscribe).
 *
 * A process publishes or subscribes to a named topic through the local rgapsd
 * daemon, found at $RGAPS_SOCKET or else /run/rgaps/rgapsd.sock. Attaching
 * goes through the daemon's control socket; after that, the hot path is
 * shared memory: a publisher copies a message once into the topic's shared
 * pool (or writes it there directly with the loan API) and every local
 * subscriber reads the same bytes in place. A message stays valid and
 * unmodified until its subscriber releases it.
 *
 * Lifecycle of every handle: *_init -> use -> *_destroy. Handles are not
 * thread-safe: use one handle from one thread at a time (several handles may
 * be used concurrently). Functions return 0 or a negative errno unless stated
 * otherwise; rgaps_strerror() gives the text.
 */
#ifndef RGAPS_RGAPS_H
#define RGAPS_RGAPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque publisher handle. */
typedef struct rgaps_publisher rgaps_publisher_t;
/** Opaque subscriber handle. */
typedef struct rgaps_subscriber rgaps_subscriber_t;

/** Version of the local control protocol this library speaks. */
#define RGAPS_PROTOCOL_VERSION 1

/* ------------------------------------------------------------------ */
/* The RGAPS interface                                                 */
/* ------------------------------------------------------------------ */

/**
 * Attach to @p topic as a publisher (creates the topic from the daemon's
 * defaults if it does not exist yet).
 * @return a handle, or NULL with errno set (ECONNREFUSED/ENOENT: no daemon,
 * EINVAL: bad topic name, EACCES: not on the topic's allow-list, ENOSPC: no
 * publisher slot left, EPROTONOSUPPORT: daemon speaks another protocol).
 */
rgaps_publisher_t *rgaps_publisher_init(const char *topic);

/**
 * Publish one message: copy @p size bytes from @p device_ptr (device memory
 * with the cuda backend, host memory with the host backend) once into the
 * topic's shared pool and wake every subscriber. With the topic's overflow
 * policy "block" this waits up to the topic's block timeout for room.
 * @return 0, -EMSGSIZE (over max_message_size), -ETIMEDOUT (no room in time),
 * -EINVAL, -ENOTCONN (daemon gone).
 */
int rgaps_publisher_push(rgaps_publisher_t *pub, size_t size, const void *device_ptr);

/** Detach and free the handle. Loans not yet committed are returned to the pool. */
void rgaps_publisher_destroy(rgaps_publisher_t *pub);

/**
 * Attach to @p topic as a subscriber. Live delivery: the first message seen is
 * the next one published (or the last @c history ones if the topic keeps history).
 * @return a handle, or NULL with errno set (as rgaps_publisher_init()).
 */
rgaps_subscriber_t *rgaps_subscriber_init(const char *topic);

/**
 * Wait for the next message and return a pointer to its payload in the shared
 * pool (a device pointer with the cuda backend). The previous message returned
 * by pull is released first. The pointer stays valid until the next pull or
 * destroy. Blocks without limit; NULL with errno set on error (ENOTCONN).
 */
void *rgaps_subscriber_pull(rgaps_subscriber_t *sub);

/** Detach and free the handle; every message it holds is released. */
void rgaps_subscriber_destroy(rgaps_subscriber_t *sub);

/* ------------------------------------------------------------------ */
/* Messages, loans and options                                         */
/* ------------------------------------------------------------------ */

/** A message held by a subscriber (rgaps_subscriber_take()). */
typedef struct rgaps_msg {
	void *data;	   /**< payload in the shared pool (device pointer with cuda) */
	size_t size;	   /**< payload bytes */
	uint64_t seq;	   /**< per-topic sequence number, from 0, no holes unless dropped */
	uint64_t ts_ns;	   /**< publish time, CLOCK_REALTIME nanoseconds */
	uint64_t gap;	   /**< messages skipped just before this one (drops) */
	uint32_t token;	   /**< internal: identifies the hold; do not change */
	uint32_t reserved; /**< zero */
} rgaps_msg_t;

/** A loaned block of the pool, written by the publisher in place (rgaps_publisher_loan()). */
typedef struct rgaps_loan {
	void *data;	/**< where to write (device pointer with cuda) */
	size_t size;	/**< bytes loaned */
	uint32_t token; /**< internal: identifies the loan; do not change */
	uint32_t reserved;
} rgaps_loan_t;

/** What the topic's memory is: host memory or CUDA device memory. */
enum rgaps_memory_kind {
	RGAPS_MEMORY_HOST = 0,
	RGAPS_MEMORY_CUDA = 1,
};

/** Snapshot of a handle's topic (rgaps_publisher_info() / rgaps_subscriber_info()). */
typedef struct rgaps_topic_info {
	size_t struct_size;	 /**< set by the caller to sizeof(rgaps_topic_info_t) */
	char name[64];		 /**< topic name */
	enum rgaps_memory_kind memory; /**< where payloads live */
	int device;		 /**< CUDA device ordinal (cuda memory) */
	size_t pool_size;	 /**< bytes in the shared pool */
	size_t max_message_size; /**< largest accepted message */
	uint32_t queue_depth;	 /**< message queue entries */
	uint64_t drops;		 /**< subscriber: messages skipped by drop_oldest */
} rgaps_topic_info_t;

/**
 * Borrow @p size bytes of the pool to fill in place (zero copies). Give it
 * back with rgaps_publisher_commit() (publishes it) or rgaps_publisher_cancel().
 * @param timeout_ms how long to wait for room: 0 = do not wait, -1 = the topic's
 * block timeout.
 * @return 0 and fills @p loan_p, or -EMSGSIZE, -EAGAIN (no room, timeout 0),
 * -ETIMEDOUT, -ENOBUFS (this publisher holds max_loans loans already).
 */
int rgaps_publisher_loan(rgaps_publisher_t *pub, size_t size, int timeout_ms,
			 rgaps_loan_t *loan_p);

/**
 * Publish a loan. @p size may be smaller than the loaned size (not larger).
 * The loan is consumed whether or not this succeeds.
 */
int rgaps_publisher_commit(rgaps_publisher_t *pub, rgaps_loan_t *loan, size_t size);

/** Return a loan to the pool unpublished. */
int rgaps_publisher_cancel(rgaps_publisher_t *pub, rgaps_loan_t *loan);

/**
 * rgaps_publisher_push() with an explicit wait: @p timeout_ms 0 = do not wait
 * (-EAGAIN if there is no room), -1 = the topic's block timeout, >0 = that long.
 */
int rgaps_publisher_push_timeout(rgaps_publisher_t *pub, size_t size, const void *device_ptr,
				 int timeout_ms);

/**
 * Take the next message: @p timeout_ms 0 = do not wait (-EAGAIN when none),
 * -1 = wait forever, >0 = wait that long (-ETIMEDOUT). The message stays
 * valid until rgaps_subscriber_release(); a subscriber may hold up to the
 * topic's max_holds messages at once (-ENOBUFS beyond). A signal delivered
 * to a waiting thread ends the wait with -EINTR.
 * @return 0 and fills @p msg_p, or a negative errno (-ENOTCONN: daemon gone).
 */
int rgaps_subscriber_take(rgaps_subscriber_t *sub, rgaps_msg_t *msg_p, int timeout_ms);

/** Release a message taken with rgaps_subscriber_take(). */
int rgaps_subscriber_release(rgaps_subscriber_t *sub, rgaps_msg_t *msg);

/**
 * A file descriptor that becomes readable when a message may be available, for
 * poll/epoll/libuv integration. After it polls readable, call
 * rgaps_subscriber_take() with timeout 0 until it returns -EAGAIN; that also
 * re-arms the fd. Owned by the handle. Returns the fd or a negative errno.
 */
int rgaps_subscriber_fd(rgaps_subscriber_t *sub);

/** Fill @p info (set info->struct_size first). */
int rgaps_publisher_info(rgaps_publisher_t *pub, rgaps_topic_info_t *info);
/** Fill @p info (set info->struct_size first). */
int rgaps_subscriber_info(rgaps_subscriber_t *sub, rgaps_topic_info_t *info);

/**
 * Send one control request to rgapsd and return its reply, for tools and
 * monitoring (requests "topics" and "stats", see docs/PROTOCOL.md).
 * @param request_json a JSON object with at least "type".
 * @param reply_json_p receives the reply text (free() it), also for an error reply.
 * @return 0 if the daemon answered ok, else a negative errno (the reply's error).
 */
int rgaps_query(const char *request_json, char **reply_json_p);

/** Text for a (negative or positive) errno returned by this library. */
const char *rgaps_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif
