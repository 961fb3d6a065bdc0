/*
 * The local control socket of rgapsd: a Unix-domain stream socket served
 * through io_uring (multishot accept, recvmsg, sendmsg with SCM_RIGHTS), whose
 * completion eventfd sits under a uv_poll handle on the daemon's loop. Frames
 * (frame.h) are reassembled per connection and handed to ops->on_frame on the
 * loop thread; replies are queued per connection and sent in order.
 *
 * Lifecycle: rgapsd_control_start() -> frames/replies -> rgapsd_control_stop();
 * each connection: accepted -> on_frame* -> on_close (exactly once, for any
 * cause: peer hang-up, error, protocol violation, a limit, stop) -> freed after
 * every io_uring operation on it has completed.
 *
 * What one client can make the server hold is bounded (struct
 * rgapsd_control_opts, docs/PROTOCOL.md "Limits"): connections in all and per
 * user, an idle timeout, a deadline for each frame, and the bytes of replies
 * it leaves unread (reading stops above them). A connection holds a frame
 * buffer only while a frame is arriving, sized to that frame.
 */
#ifndef RGAPSD_CONTROL_H
#define RGAPSD_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <uv.h>

struct rgapsd_control;
struct rgapsd_conn;

struct rgapsd_control_ops {
	/* A complete frame arrived (payload is not NUL-terminated; valid during the call). */
	void (*on_frame)(void *ctx, struct rgapsd_conn *conn, const char *payload, size_t len);
	/* The connection is gone; release everything attached to it. Called once. */
	void (*on_close)(void *ctx, struct rgapsd_conn *conn);
};

/* Limits and the socket's access. Zero fields take the defaults below. */
struct rgapsd_control_opts {
	uint32_t max_conns;	     /* default 1024, the last 16 (a quarter at most) for uid 0 and ours */
	uint32_t max_conns_per_user; /* default 256; uid 0 and our own uid: only max_conns */
	uint32_t idle_timeout_ms;    /* default 60000: an unattached, silent connection goes */
	uint32_t frame_timeout_ms;   /* default 5000: from a frame's first byte to its last */
	uint64_t max_unsent;	     /* default 1 MiB: reading stops while more replies wait */
	unsigned socket_mode;	     /* permission bits, default 0666 */
	bool set_group;		     /* chown the socket (and the dirs made for it) to group */
	gid_t group;
	/* Tests: let client descriptors in, as a kernel without SO_PASSRIGHTS does (they are
	 * closed on the closer's thread then: closer.h). */
	bool pass_rights;
};

/* Counters and gauges of the server, for `rgaps stats`. */
struct rgapsd_control_stats {
	uint64_t accepted;
	uint64_t refused_max;	 /* over max_conns */
	uint64_t refused_user;	 /* over max_conns_per_user */
	uint64_t idle_closed;	 /* idle_timeout_ms without input, unattached */
	uint64_t frame_timeouts; /* a frame not complete within frame_timeout_ms */
	uint64_t stalled_closed; /* replies unread for idle_timeout_ms */
	uint64_t read_pauses;	 /* reading stopped for max_unsent */
	uint64_t log_suppressed; /* log records of refusals over the rate limit */
	uint64_t fds_closed;	 /* descriptors clients passed (kernels that let them in) */
	uint64_t unsent_bytes;	 /* now: replies queued, all connections */
	uint64_t frame_bytes;	 /* now: buffers of frames arriving */
	uint32_t conns;		 /* now */
	uint32_t paused;	 /* now: connections not read for their unsent replies */
};

/*
 * Bind path (permission bits and group from opts, which may be NULL for the
 * defaults; missing parent directories are created with the matching search
 * bits and group), take an exclusive flock on "<path>.lock" so a second
 * daemon on the same path fails with -EADDRINUSE (and a readable log line),
 * remove a stale socket file, set up the io_uring (queue depth 256) with a
 * registered eventfd under uv_poll. Returns 0 and writes *ctl_p, or -errno
 * (nothing left behind on failure).
 */
int rgapsd_control_start(uv_loop_t *loop, const char *path, const struct rgapsd_control_opts *opts,
			 const struct rgapsd_control_ops *ops, void *ctx,
			 struct rgapsd_control **ctl_p);

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

/*
 * An attached connection is never closed for being idle: its client works on
 * shared memory and may not speak for hours. The owner says when it holds one.
 */
void rgapsd_conn_set_attached(struct rgapsd_conn *conn, bool attached);

const struct ucred *rgapsd_conn_cred(const struct rgapsd_conn *conn);
/* The client's supplementary groups at connect time (SO_PEERGROUPS); *n_p may be 0. */
const gid_t *rgapsd_conn_groups(const struct rgapsd_conn *conn, uint32_t *n_p);
/* Bytes of replies queued and not yet taken by the kernel. */
size_t rgapsd_conn_unsent(const struct rgapsd_conn *conn);
uint64_t rgapsd_conn_id(const struct rgapsd_conn *conn);	   /* unique, never reused */
void rgapsd_conn_set_data(struct rgapsd_conn *conn, void *data); /* owner's per-conn state */
void *rgapsd_conn_get_data(const struct rgapsd_conn *conn);
unsigned rgapsd_control_nconns(const struct rgapsd_control *ctl);
void rgapsd_control_get_stats(const struct rgapsd_control *ctl, struct rgapsd_control_stats *st);

#endif
