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
 *
 * The core calls, and the conveniences that are one core call with some
 * options fixed (each says which):
 *   - publisher: rgaps_publisher_init_ex(), _loan(), _commit_ex(), _cancel(),
 *     _push_ex(), _info(), _interrupt(), _destroy(). Conveniences: _init() (no options);
 *     _push(), _push_timeout(), _push_async() (push_ex with no options, a
 *     timeout, a CUDA stream); _commit(), _commit_async() (commit_ex with no
 *     options, a CUDA stream).
 *   - subscriber: rgaps_subscriber_init_ex(), _take(), _take_async(),
 *     _release(), _release_async(), _fd(), _info(), _stop(), _destroy(), and
 *     rgaps_msg_info(), rgaps_msg_wait() on a message it holds. Conveniences:
 *     _init() (no options); _pull(), kept for programs written against 0.1:
 *     take without a bound that releases the message before.
 *   - rgaps_query() (a request to rgapsd), rgaps_strerror(), rgaps_version().
 *
 * Every call added to this API follows one convention, which the calls of 0.1
 * and 0.2 keep too, except where binary compatibility holds them to their
 * first form (the four init calls and _pull() return a handle or pointer, or
 * NULL with errno):
 *   - its name is rgaps_<object>_<verb>(); it returns 0 or a negative errno;
 *     what it makes or finds goes to output arguments, last, named *_p, and
 *     written only on success;
 *   - optional parameters come in an options struct whose first member,
 *     struct_size, the caller sets to sizeof(the struct); NULL means the
 *     defaults. A struct grows only at its end and the library reads only
 *     what struct_size covers, so a program built against an older header
 *     keeps working; a struct the library fills (rgaps_topic_info_t,
 *     rgaps_msg_info_t) is filled only as far as struct_size says;
 *   - a call that may wait takes int timeout_ms: 0 do not wait (-EAGAIN when
 *     it would), > 0 at most that many milliseconds (-ETIMEDOUT), -1 the
 *     call's own bound (the topic's block timeout for a publisher, none for a
 *     take);
 *   - its documentation says @since which version added it; the library
 *     exports it in that version's stanza of its symbol map, and a released
 *     stanza never changes.
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

/** Version of the local control protocol this library speaks (2: attach, then "mapped"). */
#define RGAPS_PROTOCOL_VERSION 2

/**
 * @name The version of librgaps this header belongs to
 * MAJOR.MINOR.PATCH. A new MINOR adds calls and keeps every call and structure
 * of the versions before it; a new MAJOR changes the library's soname. Check
 * at build time with RGAPS_VERSION_HEX, at run time with rgaps_version().
 * @{
 */
#define RGAPS_VERSION_MAJOR 0
#define RGAPS_VERSION_MINOR 3
#define RGAPS_VERSION_PATCH 0
/** A version as one number that compares with < and >: 0x00MMmmpp. */
#define RGAPS_VERSION_NUM(major, minor, patch) (((major) << 16) | ((minor) << 8) | (patch))
/** This header's version as one number. */
#define RGAPS_VERSION_HEX \
	RGAPS_VERSION_NUM(RGAPS_VERSION_MAJOR, RGAPS_VERSION_MINOR, RGAPS_VERSION_PATCH)
/** @} */

/* ------------------------------------------------------------------ */
/* The RGAPS interface                                                 */
/* ------------------------------------------------------------------ */

/**
 * Attach to @p topic as a publisher (creates the topic from the daemon's
 * defaults if it does not exist yet).
 * @return a handle, or NULL with errno set (ENOENT: no socket at the path,
 * ECONNREFUSED: nobody listens there, EPERM: no permission to reach the socket
 * or its directory, ECONNRESET: the daemon hung up before answering, EINVAL:
 * bad topic name, EACCES: rgapsd refused the attach (the topic's allow-list),
 * ENOSPC: no publisher slot left, EPROTONOSUPPORT: daemon speaks another
 * protocol). rgaps_strerror() then tells the cause in words (the rule a
 * topic name breaks, where the socket is and what is wrong with it, rgapsd's
 * own reason for refusing).
 * A convenience: rgaps_publisher_init_ex() with no options.
 */
rgaps_publisher_t *rgaps_publisher_init(const char *topic);

/**
 * Publish one message: copy @p size bytes from @p device_ptr (device memory
 * with the cuda backend, host memory with the host backend) once into this
 * publisher's pool, which every local subscriber maps read-only, and wake every
 * subscriber. With the topic's overflow policy "block" this waits up to the
 * topic's block timeout for room.
 * @return 0, -EMSGSIZE (over max_message_size), -ETIMEDOUT (no room in time),
 * -EINVAL, -ENOTCONN (rgapsd is gone or was restarted: destroy the handle and
 * attach again). A convenience: rgaps_publisher_push_ex() with no options.
 */
int rgaps_publisher_push(rgaps_publisher_t *pub, size_t size, const void *device_ptr);

/** Detach and free the handle. Loans not yet committed are returned to the pool. */
void rgaps_publisher_destroy(rgaps_publisher_t *pub);

/**
 * Attach to @p topic as a subscriber. Live delivery: the first message seen is
 * the next one published (or the last @c history ones if the topic keeps history).
 * @return a handle, or NULL with errno set (as rgaps_publisher_init()).
 * A convenience: rgaps_subscriber_init_ex() with no options.
 */
rgaps_subscriber_t *rgaps_subscriber_init(const char *topic);

/**
 * Wait for the next message and return a pointer to its payload in the shared
 * pool (a device pointer with the cuda backend). The previous message returned
 * by pull is released first. The pointer stays valid until the next pull or
 * destroy. Blocks without limit; NULL with errno set on error (ENOTCONN).
 * Kept for programs written against 0.1; rgaps_subscriber_take() is the call.
 */
void *rgaps_subscriber_pull(rgaps_subscriber_t *sub);

/** Detach and free the handle; every message it holds is released. */
void rgaps_subscriber_destroy(rgaps_subscriber_t *sub);

/* ------------------------------------------------------------------ */
/* Messages, loans and options                                         */
/* ------------------------------------------------------------------ */

/**
 * A message held by a subscriber (rgaps_subscriber_take()).
 *
 * Every publisher of a topic has its own stream: @c seq counts that stream's
 * messages from 0, with no holes except messages this subscriber missed, which
 * @c gap reports (with the next message of the same stream). With one publisher
 * per topic, as is usual, that is the topic's sequence. rgaps_msg_info() tells
 * which stream a message belongs to, where it came from and its attribute block.
 *
 * A message with @c flags & RGAPS_MSG_GAP has no payload (@c data NULL, @c size
 * 0): it reports @c gap messages lost where no later message can carry the news
 * (a stream that ended, a link that failed); releasing it is allowed and does
 * nothing.
 */
typedef struct rgaps_msg {
	void *data;	 /**< payload in the publisher's pool (device pointer with cuda), read-only */
	size_t size;	 /**< payload bytes */
	uint64_t seq;	 /**< sequence number in its publisher's stream, from 0 */
	uint64_t ts_ns;	 /**< publish time, CLOCK_REALTIME nanoseconds (of the origin host) */
	uint64_t gap;	 /**< messages of this stream lost just before this one */
	uint32_t token;	 /**< internal: identifies the hold; do not change */
	uint32_t flags;	 /**< RGAPS_MSG_* (@since 0.2) */
} rgaps_msg_t;

/** rgaps_msg_t.flags: the message came from another host. */
#define RGAPS_MSG_REMOTE 0x1u
/** rgaps_msg_t.flags: no payload; @c gap messages were lost. */
#define RGAPS_MSG_GAP 0x2u

/** Largest attribute block a message carries (bytes). */
#define RGAPS_ATTR_MAX 256

/** Details of a held message (rgaps_msg_info()). */
typedef struct rgaps_msg_info {
	size_t struct_size;	/**< set by the caller to sizeof(rgaps_msg_info_t) */
	uint64_t stream;	/**< its publisher stream here (unique in the topic while rgapsd runs) */
	uint64_t origin_stream; /**< the stream on the host it was published on (= stream if local) */
	uint64_t origin_seq;	/**< its sequence number there (= seq if local) */
	const void *attrs;	/**< its attribute block (valid until release), NULL if none */
	size_t attr_len;	/**< bytes of the attribute block */
} rgaps_msg_info_t;

/** Options of rgaps_publisher_push_ex() and rgaps_publisher_commit_ex(). */
typedef struct rgaps_pub_opts {
	size_t struct_size; /**< set by the caller to sizeof(rgaps_pub_opts_t) */
	const void *attrs;  /**< attribute block sent with the message, or NULL */
	size_t attr_len;    /**< its bytes, at most RGAPS_ATTR_MAX */
	int timeout_ms;	    /**< wait for room: 0 none, -1 the topic's block timeout, >0 ms */
	/**
	 * A CUDA stream (cudaStream_t): publish in stream order, as
	 * rgaps_publisher_push_async() / rgaps_publisher_commit_async() do, with the
	 * attribute block. NULL: not stream-ordered (pass cudaStreamLegacy, 0x1, to
	 * order on the legacy default stream). @since 0.2
	 */
	void *stream;
} rgaps_pub_opts_t;

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
	int device;		 /**< the pools' CUDA device, as this process numbers its GPUs
				      (cuda memory; -1: this process does not see it) */
	size_t pool_size;	 /**< bytes in the shared pool */
	size_t max_message_size; /**< largest accepted message */
	uint32_t queue_depth;	 /**< message queue entries */
	uint64_t drops;		 /**< subscriber: messages skipped by drop_oldest */
	/* @since 0.2: read them only if struct_size covers them */
	int handle_device; /**< the GPU this handle was attached for, as this process numbers them
				(-1: none, host memory, or unknown) */
	int gpu_path;	   /**< how it reaches the messages: RGAPS_GPU_PATH_* */
	/* @since 0.3: read them only if struct_size covers them */
	int block_timeout_ms; /**< how long a publish waits for room when told -1 */
	int overflow;	      /**< 0: "block", 1: "drop_oldest" */
} rgaps_topic_info_t;

/** rgaps_topic_info_t.gpu_path */
enum rgaps_gpu_path {
	RGAPS_GPU_PATH_LOCAL = 0,   /**< on the pool's GPU, or host memory: read in place */
	RGAPS_GPU_PATH_PEER = 1,    /**< another GPU reading the pool in place (peer access) */
	RGAPS_GPU_PATH_REPLICA = 2, /**< another GPU reading rgapsd's replica on its own GPU */
};

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
 * A convenience: rgaps_publisher_commit_ex() with no options.
 */
int rgaps_publisher_commit(rgaps_publisher_t *pub, rgaps_loan_t *loan, size_t size);

/** Return a loan to the pool unpublished. */
int rgaps_publisher_cancel(rgaps_publisher_t *pub, rgaps_loan_t *loan);

/**
 * rgaps_publisher_push() with an explicit wait: @p timeout_ms 0 = do not wait
 * (-EAGAIN if there is no room), -1 = the topic's block timeout, >0 = that long.
 * A convenience: rgaps_publisher_push_ex() with only @c timeout_ms set.
 */
int rgaps_publisher_push_timeout(rgaps_publisher_t *pub, size_t size, const void *device_ptr,
				 int timeout_ms);

/**
 * rgaps_publisher_push() with options: an attribute block that travels with
 * the message (to local and remote subscribers), a timeout and a CUDA stream
 * to publish in order on. @p opts may be NULL (the defaults: no attributes, the
 * topic's block timeout, no stream). The block is copied; it may be reused when
 * this returns. @since 0.2
 */
int rgaps_publisher_push_ex(rgaps_publisher_t *pub, size_t size, const void *device_ptr,
			    const rgaps_pub_opts_t *opts);

/**
 * rgaps_publisher_commit() with options (attribute block, timeout, CUDA stream);
 * @p opts may be NULL. @since 0.2
 */
int rgaps_publisher_commit_ex(rgaps_publisher_t *pub, rgaps_loan_t *loan, size_t size,
			      const rgaps_pub_opts_t *opts);

/**
 * Details of a message this subscriber holds (or of the gap-only message it
 * took last): its stream, origin and attribute block.
 * @return 0, or -EINVAL if @p msg is not held by @p sub. @since 0.2
 */
int rgaps_msg_info(rgaps_subscriber_t *sub, const rgaps_msg_t *msg, rgaps_msg_info_t *info);

/**
 * Take the next message: @p timeout_ms 0 = do not wait (-EAGAIN when none),
 * -1 = wait forever, >0 = wait that long (-ETIMEDOUT). The message stays
 * valid until rgaps_subscriber_release(); a subscriber may hold up to the
 * topic's max_holds messages at once (-ENOBUFS beyond), and on a
 * "drop_oldest" topic only as many of one publisher's messages as leave room
 * in its pool for one message of max_message_size (-ENOBUFS when every
 * stream with a message waiting is so held: release one). A signal delivered
 * to a waiting thread ends the wait with -EINTR. Messages from several
 * publishers are taken in turn, each stream in its own order. A message
 * published in stream order (rgaps_publisher_push_async()) is returned once
 * its copy has completed; until then the other publishers' messages come,
 * and one whose copy has not completed within the topic's fence_timeout_ms
 * is reported lost (a gap). No wait outlasts @p timeout_ms.
 * @return 0 and fills @p msg_p (see rgaps_msg_t for gap-only messages), or a
 * negative errno (-ENOTCONN: rgapsd is gone or was restarted: destroy the
 * handle and attach again).
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

/* ------------------------------------------------------------------ */
/* Several GPUs, and stream order                                     */
/* ------------------------------------------------------------------ */

/** Options of rgaps_publisher_init_ex() and rgaps_subscriber_init_ex(). */
typedef struct rgaps_attach_opts {
	size_t struct_size; /**< set by the caller to sizeof(rgaps_attach_opts_t) */
	/**
	 * The CUDA device whose kernels will read or write this handle's
	 * messages, as this process numbers its GPUs (its CUDA_VISIBLE_DEVICES
	 * applies: the library names the GPU to rgapsd by PCI address, so the two
	 * processes need not number GPUs alike). -1: the device of the calling
	 * thread's current CUDA context, or, when it has none, the topic's own
	 * device.
	 */
	int device;
} rgaps_attach_opts_t;

/**
 * rgaps_publisher_init() for a given GPU. rgapsd opens the publisher's pool to
 * that GPU when it can (so kernels there may write loans), and refuses a GPU
 * the topic does not serve (errno ENODEV, with rgapsd's reason in its log).
 * @p opts may be NULL (the defaults). @since 0.2
 */
rgaps_publisher_t *rgaps_publisher_init_ex(const char *topic, const rgaps_attach_opts_t *opts);

/**
 * rgaps_subscriber_init() for a given GPU: messages come as pointers that
 * kernels on that GPU can read, either in the publishers' pools (peer access)
 * or in rgapsd's replica on that GPU, as the topic's gpu_fanout decides
 * (docs/GPU.md). A GPU the topic cannot serve is refused here, never at the
 * first read: NULL with errno ENODEV (rgapsd's log says why). @p opts may be NULL.
 * @since 0.2
 */
rgaps_subscriber_t *rgaps_subscriber_init_ex(const char *topic, const rgaps_attach_opts_t *opts);

/**
 * Publish in stream order: the copy of @p size bytes from @p device_ptr into
 * the pool is queued on @p stream (a cudaStream_t; NULL is the legacy default
 * stream) after the work the caller queued there before, and this returns
 * without waiting for it. The message is visible to subscribers at once and
 * complete when the copy is: subscribers that take it with
 * rgaps_subscriber_take_async() order their kernels after it on the GPU; those
 * that use rgaps_subscriber_take() get it once the copy is done. The source
 * may be reused once @p stream has passed this call. Waits for room as
 * rgaps_publisher_push() does. The stream should belong to this handle's GPU:
 * with a stream of another GPU the call waits for the stream on the host.
 * @return as rgaps_publisher_push(); the copy's own errors surface at the
 * stream's next synchronisation, as for any CUDA work.
 * A convenience: rgaps_publisher_push_ex() with only @c stream set (NULL here
 * is cudaStreamLegacy). @since 0.2
 */
int rgaps_publisher_push_async(rgaps_publisher_t *pub, size_t size, const void *device_ptr,
			       void *stream);

/**
 * Publish a loan whose bytes are written by work queued on @p stream (kernels
 * writing loan->data): the message is complete when that work is, and this
 * returns at once. The loan is consumed whether or not this succeeds.
 * A convenience: rgaps_publisher_commit_ex() with only @c stream set (NULL here
 * is cudaStreamLegacy). @since 0.2
 */
int rgaps_publisher_commit_async(rgaps_publisher_t *pub, rgaps_loan_t *loan, size_t size,
				 void *stream);

/**
 * rgaps_subscriber_take() that does not wait for the message's bytes on the
 * host: work queued on @p stream after this call runs once the publisher's
 * copy is complete (the stream waits for it on the GPU). Use the message on
 * that stream (or order others after it), then give it back with
 * rgaps_subscriber_release_async() on the last stream that reads it. @since 0.2
 */
int rgaps_subscriber_take_async(rgaps_subscriber_t *sub, rgaps_msg_t *msg_p, int timeout_ms,
				void *stream);

/**
 * Order the work queued on @p stream after this call behind the bytes of a
 * message the handle holds: nothing to do for a message taken with
 * rgaps_subscriber_take() (its bytes were complete when it returned), the GPU
 * wait of rgaps_subscriber_take_async() again otherwise (e.g. for another
 * stream). @return 0, or -EINVAL if @p msg is not held. @since 0.2
 */
int rgaps_msg_wait(rgaps_subscriber_t *sub, const rgaps_msg_t *msg, void *stream);

/**
 * Release a message once the work queued on @p stream so far is done: this
 * returns at once, and the publisher may not reuse the block before that work
 * has finished. The library completes the release at the handle's next call
 * (or when its pollable fd wakes); until then the message counts against
 * max_holds. rgaps_subscriber_destroy() waits for releases still pending.
 * @since 0.2
 */
int rgaps_subscriber_release_async(rgaps_subscriber_t *sub, rgaps_msg_t *msg, void *stream);

/* ------------------------------------------------------------------ */
/* Ending from another thread                                          */
/* ------------------------------------------------------------------ */

/**
 * Take no more messages, and keep those held: publishers and rgapsd stop
 * waiting for this subscriber (it gives up its place in every stream and no
 * longer counts among the topic's subscribers), while each message it holds
 * stays valid, and its memory mapped, until rgaps_subscriber_release(). For a
 * subscriber that is done while something still reads its messages (the Python
 * package's close() with arrays alive). Later takes and pulls fail with
 * -ESHUTDOWN, and a take waiting in another thread returns so within its wait:
 * this call, like rgaps_publisher_interrupt(), may be made while another thread
 * uses the handle. Destroy the handle as usual once its messages are released.
 * @return 0, or -EINVAL (@p sub is NULL).
 * @since 0.3
 */
int rgaps_subscriber_stop(rgaps_subscriber_t *sub);

/**
 * End this publisher's waits from another thread: a push, loan or commit that
 * waits for room returns -ECANCELED within about 200 ms, and so does every
 * later one, so that a thread may close a publisher another thread waits on.
 * Like rgaps_subscriber_stop(), it may be made while another thread uses the
 * handle; destroy the handle as usual once no call is in progress.
 * @return 0, or -EINVAL (@p pub is NULL).
 * @since 0.3
 */
int rgaps_publisher_interrupt(rgaps_publisher_t *pub);

/**
 * Send one control request to rgapsd and return its reply, for tools and
 * monitoring (requests "topics" and "stats", see docs/PROTOCOL.md).
 * @param request_json a JSON object with at least "type".
 * @param reply_json_p receives the reply text (free() it), also for an error reply.
 * @return 0 if the daemon answered ok, else a negative errno (the reply's error).
 */
int rgaps_query(const char *request_json, char **reply_json_p);

/**
 * Text for a (negative or positive) errno returned by this library. Called
 * right after a call that failed with @p err, in the same thread, it gives that
 * failure's cause where the library knows more than the errno: the rule a topic
 * name breaks, the limit a message passes and the key that sets it, why the
 * daemon's socket cannot be reached, rgapsd's reason for refusing an attach.
 * The text is valid until the thread's next call of this library.
 */
const char *rgaps_strerror(int err);

/**
 * The version of the librgaps this process runs with, as RGAPS_VERSION_NUM()
 * makes it: newer than RGAPS_VERSION_HEX when the program was built against an
 * older header. @since 0.3
 */
unsigned int rgaps_version(void);

#ifdef __cplusplus
}
#endif

#endif
