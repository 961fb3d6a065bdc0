/*
 * The local control socket of rgapsd: a Unix-domain stream socket served
 * through io_uring (multishot accept, recvmsg, sendmsg with SCM_RIGHTS), whose
 * completion eventfd sits under a uv_poll handle on the daemon's loop. Frames
 * (frame.h) are reassembled per connection and handed to ops->on_frame on the
 * loop thread; replies are queued per connection and sent in order.
 *
 * Lifecycle: rgapsd_control_start() -> frames/replies -> rgapsd_control_stop();
 * each connection: accepted -> on_frame* -> on_close (exactly once, for any
 * cause: peer hang-up, error, protocol violation, stop) -> freed after every
 * io_uring operation on it has completed.
 */
#ifndef RGAPSD_CONTROL_H
#define RGAPSD_CONTROL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

struct rgapsd_control;
struct rgapsd_conn;

struct rgapsd_control_ops {
	/* A complete frame arrived (payload is not NUL-terminated; valid during the call). */
	void (*on_frame)(void *ctx, struct rgapsd_conn *conn, const char *payload, size_t len);
	/* The connection is gone; release everything attached to it. Called once. */
	void (*on_close)(void *ctx, struct rgapsd_conn *conn);
};

/*
 * Bind path (mode 0666 socket, parent dir created 0755 if missing), take an
 * exclusive flock on "<path>.lock" so a second daemon on the same path fails
 * with -EADDRINUSE (and a readable log line), remove a stale socket file, set
 * up the io_uring (queue depth 256) with a registered eventfd under uv_poll.
 * Returns 0 and writes *ctl_p, or -errno (nothing left behind on failure).
 */
int rgapsd_control_start(uv_loop_t *loop, const char *path, const struct rgapsd_control_ops *ops,
			 void *ctx, struct rgapsd_control **ctl_p);

/*
 * Close every connection (on_close for each), stop accepting, unlink the socket
 * and lock file, tear down the ring. Uv handles are closed asynchronously: the
 * loop must run until it has no more handles; memory is freed then.
 */
void rgapsd_control_stop(struct rgapsd_control *ctl);

/*
 * Queue one reply frame: the payload is copied; fds (may be NULL / 0, at most
 * 32) are dup'd, so the caller keeps its own. Sent with sendmsg + SCM_RIGHTS.
 * Returns 0, -ENOTCONN if the connection is closing, -EMSGSIZE, -ENOMEM.
 */
int rgapsd_conn_send(struct rgapsd_conn *conn, const char *payload, size_t len, const int *fds,
		     int nfds);

/* Close after the queued replies have been sent (protocol violation path). */
void rgapsd_conn_close_after_send(struct rgapsd_conn *conn);

const struct ucred *rgapsd_conn_cred(const struct rgapsd_conn *conn);
uint64_t rgapsd_conn_id(const struct rgapsd_conn *conn);	   /* unique, never reused */
void rgapsd_conn_set_data(struct rgapsd_conn *conn, void *data); /* owner's per-conn state */
void *rgapsd_conn_get_data(const struct rgapsd_conn *conn);
unsigned rgapsd_control_nconns(const struct rgapsd_control *ctl);

#endif
