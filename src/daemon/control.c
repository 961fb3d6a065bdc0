/*
 * rgapsd's local control socket (control.h, docs/ARCHITECTURE.md section 7): a Unix stream
 * socket served through io_uring on the loop thread. One multishot accept
 * feeds connections; each connection has at most one recvmsg (into its frame
 * reader) and one sendmsg (the head of its reply queue) in flight. The ring's
 * eventfd sits under a uv_poll handle: on wake-up every available completion
 * is handled, then whatever the handlers queued is submitted in one call.
 *
 * Every submission carries user_data = pointer | op kind (enum ctl_op), and a
 * connection counts its ops in flight: memory a pending op may still touch
 * (msghdr, iovec, control buffer, reader, reply) is freed only after that op's
 * completion, and the fd is closed only then, so its number cannot be reused
 * under a pending op. Closing a connection needs no io_uring cancel: shutdown(2)
 * makes its pending recv return 0 and its pending send fail with EPIPE at once.
 *
 * on_close runs only from a completion handler, the sweep timer or
 * rgapsd_control_stop(), never inside a call the owner makes (send,
 * close_after_send), so the owner is never re-entered while it holds state on
 * the stack.
 *
 * Limits (control.h, docs/PROTOCOL.md "Limits"). A connection over a cap gets
 * an error frame and is closed as it is accepted. A recv takes at most the
 * rest of one frame (its header, then its payload, into a buffer allocated
 * when the header is in and freed when the frame has been handled), so each
 * recv brings at most one request and so at most one reply: a connection
 * whose unsent replies pass max_unsent is simply not read again until the
 * client has taken them below it. A sweep timer, every quarter of the shorter
 * deadline, closes the connections past one: a frame begun and not complete
 * within frame_timeout_ms, an unattached connection silent for
 * idle_timeout_ms, replies unread for idle_timeout_ms.
 *
 * Clients send no descriptors. The kernel is asked to refuse them
 * (SO_PASSRIGHTS off on the listening socket, inherited by every connection:
 * the client's sendmsg fails with EPERM); where it cannot be (Linux before
 * 6.16), the descriptors that come and the connections themselves, whose
 * unread bytes may carry more, are closed on the closer's thread (closer.h),
 * never here: the last close of a client's file can wait for as long as the
 * client wants.
 */
#include "control.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <liburing.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "closer.h"
#include "errors.h"
#include "frame.h"
#include "log.h"
#include "util.h"

#ifndef SO_PASSRIGHTS
#define SO_PASSRIGHTS 83 /* Linux 6.16, asm-generic/socket.h (the headers may predate it) */
#endif

#define CTL_QUEUE_DEPTH 256
#define CTL_SEND_MAX_FDS 32 /* an attach or sync reply: header, own region and pool, members */
/* Room to see (and close) what a misbehaving client passes; the kernel drops any excess. */
#define CTL_RECV_MAX_FDS 16
#define CTL_CQE_BATCH 64
#define CTL_ACCEPT_BACKOFF_MS 100
#define CTL_STOP_TIMEOUT_MS 2000
#define CTL_LOCK_TRIES 8
#define CTL_ADMIN_RESERVE 16 /* places of max_conns only root and our own user may take */
#define CTL_SWEEP_MIN_MS 20
#define CTL_SWEEP_MAX_MS 1000

static const struct rgapsd_control_opts ctl_default_opts = {
	.max_conns = 1024,
	.max_conns_per_user = 256,
	.idle_timeout_ms = 60000,
	.frame_timeout_ms = 5000,
	.max_unsent = 1u << 20,
	.socket_mode = 0666,
};

/* The op kind in the low bits of user_data; the rest is the object's pointer. */
enum ctl_op {
	CTL_OP_ACCEPT = 1, /* multishot accept; pointer: the control */
	CTL_OP_RECV,	   /* recvmsg into the reader; pointer: the connection */
	CTL_OP_SEND,	   /* sendmsg of the reply queue's head; pointer: the connection */
	CTL_OP_CANCEL,	   /* async cancel of the accept; no pointer, result unused */
};
#define CTL_OP_MASK 7ull

enum conn_state {
	CONN_OPEN,	/* serving: a recv is armed (or its frame is being handed out, or reading
			 * is paused while the client takes its replies) */
	CONN_DRAINING,	/* close requested: queued replies still go out, nothing is read */
	CONN_CLOSING,	/* on_close done, off the list: waiting for the last op, then freed */
	CONN_NUM_STATES
};

/* One queued reply: header + payload, and the dup'd fds that go with its first byte. */
struct ctl_send {
	struct ctl_send *next;
	size_t len; /* header + payload */
	size_t off; /* bytes the kernel has taken */
	int nfds;   /* fds not yet sent; closed once the first piece went out */
	int fds[CTL_SEND_MAX_FDS];
	uint8_t data[];
};

struct rgapsd_conn {
	struct rgapsd_control *ctl;
	struct rgapsd_conn *prev, *next; /* ctl->conns, while OPEN or DRAINING */
	enum conn_state state;
	int fd;
	uint64_t id;
	struct ucred cred;
	gid_t *groups; /* supplementary groups (SO_PEERGROUPS), NULL when none */
	uint32_t ngroups;
	void *data;
	unsigned refs; /* ops in flight, plus one while a handler or close runs */
	bool recv_armed;
	bool send_armed;
	bool attached; /* the owner's word: never closed for idleness */
	bool paused;   /* not read while its unsent replies pass max_unsent */

	/* The frame arriving: its header, then its payload (allocated once the header is in). */
	uint8_t hdr[RGAPS_FRAME_HDR];
	uint32_t hdr_have;
	uint8_t *payload; /* NULL between frames */
	uint32_t payload_len, payload_have;
	uint64_t frame_start_ms; /* its first byte; 0 between frames */
	uint64_t active_ms;	 /* the last byte received (or the accept) */
	uint64_t sent_ms;	 /* the last progress of the reply queue, or when it filled */
	size_t unsent;		 /* bytes queued and not yet taken by the kernel */

	struct msghdr rmsg;
	struct iovec riov;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * CTL_RECV_MAX_FDS)];
	} rcmsg;

	struct ctl_send *sq_head, **sq_tail;
	struct msghdr smsg;
	struct iovec siov;
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * CTL_SEND_MAX_FDS)];
	} scmsg;
};

struct rgapsd_control {
	uv_loop_t *loop;
	const struct rgapsd_control_ops *ops;
	void *ctx;
	char *path;
	char *lock_path;
	int listen_fd;
	int lock_fd;
	int event_fd;
	struct io_uring ring;
	uv_poll_t poll;
	uv_timer_t backoff; /* re-arms the accept after a failure (EMFILE...) */
	uv_timer_t sweep;   /* closes the connections past a deadline */
	int handles_open;
	struct rgapsd_control_opts opts;
	struct rgapsd_control_stats st; /* conns and paused: see nconns and the conns */
	struct rgaps_ratelimit log_rl;	/* refusals and timeouts a client can cause at will */
	struct rgapsd_closer *closer;	/* made when a client's file must be closed (above) */
	bool refuses_fds;		/* the kernel refuses client descriptors (SO_PASSRIGHTS) */
	uid_t self_uid;
	struct rgapsd_conn *conns;
	unsigned nconns;   /* OPEN or DRAINING */
	unsigned nzombies; /* CLOSING, not yet freed */
	bool accept_armed;
	bool accept_failing; /* warned once per streak of accept failures */
	bool dispatching;    /* inside ctl_drain(): submission waits for its end */
	bool stopping;
	bool finished;
};

static uint64_t ctl_conn_ids;

static uint64_t ctl_ud(const void *ptr, enum ctl_op op)
{
	uint64_t p = (uint64_t)(uintptr_t)ptr;

	rgaps_require((p & CTL_OP_MASK) == 0);
	return p | (uint64_t)op;
}

static uint64_t ctl_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The loop's clock (updated once per iteration): deadlines need no more. */
static uint64_t ctl_now(const struct rgapsd_control *ctl)
{
	return uv_now(ctl->loop);
}

static void ctl_submit(struct rgapsd_control *ctl)
{
	int rc = io_uring_submit(&ctl->ring);

	/* What was not taken stays in the SQ and goes with the next submit. */
	if (rc < 0)
		rgaps_warn("control: io_uring_submit failed: %s", strerror(-rc));
}

/* NULL only when the kernel refuses to take the queued entries (then the op fails). */
static struct io_uring_sqe *ctl_get_sqe(struct rgapsd_control *ctl)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ctl->ring);

	if (!sqe) {
		ctl_submit(ctl);
		sqe = io_uring_get_sqe(&ctl->ring);
	}
	return sqe;
}

static void ctl_submit_unless_dispatching(struct rgapsd_control *ctl)
{
	if (!ctl->dispatching)
		ctl_submit(ctl);
}

/* ---- connections ---------------------------------------------------------------------- */

/* Refusals and timeouts that a client causes at will: rate-limited, with the count kept. */
static void ctl_log_refusal(struct rgapsd_control *ctl, const char *fmt, ...) RGAPS_PRINTF(2, 3);

static void ctl_log_refusal(struct rgapsd_control *ctl, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	rgaps_log_limited(&ctl->log_rl, RGAPS_LOG_WARN, "control: %s", msg);
}

/* A reply leaves the queue (sent, or dropped with its connection). */
static void send_free(struct rgapsd_conn *conn, struct ctl_send *s)
{
	size_t left = s->len - s->off;

	for (int i = 0; i < s->nfds; i++)
		close(s->fds[i]);
	conn->unsent -= left;
	conn->ctl->st.unsent_bytes -= left;
	free(s);
}

/*
 * A file a client may have handed us, or a connection whose unread bytes may
 * carry some: its last close could wait for as long as the client wants, so
 * the closer does it. Without the closer's thread (none could be made) it is
 * closed here.
 */
static void ctl_close_untrusted(struct rgapsd_control *ctl, int fd)
{
	int r;

	if (!ctl->closer) {
		r = rgapsd_closer_start(&ctl->closer);
		if (r) {
			rgaps_error("control: cannot start the closer's thread: %s; closing a "
				    "client's file on the loop",
				    strerror(-r));
			ctl->closer = NULL;
			close(fd);
			return;
		}
	}
	rgapsd_closer_close(ctl->closer, fd);
}

static void conn_free(struct rgapsd_conn *conn)
{
	struct rgapsd_control *ctl = conn->ctl;
	struct ctl_send *s;

	while ((s = conn->sq_head)) {
		conn->sq_head = s->next;
		send_free(conn, s);
	}
	if (conn->payload) {
		ctl->st.frame_bytes -= conn->payload_len;
		free(conn->payload);
	}
	free(conn->groups);
	if (ctl->refuses_fds)
		close(conn->fd);
	else
		ctl_close_untrusted(ctl, conn->fd);
	ctl->nzombies--;
	free(conn);
}

static void conn_put(struct rgapsd_conn *conn)
{
	rgaps_require(conn->refs > 0);
	if (--conn->refs)
		return;
	rgaps_require(conn->state == CONN_CLOSING);
	conn_free(conn);
}

static void conn_close(struct rgapsd_conn *conn)
{
	struct rgapsd_control *ctl = conn->ctl;
	struct ctl_send *s, *keep;

	if (conn->state == CONN_CLOSING)
		return;
	conn->state = CONN_CLOSING;
	conn->refs++;
	if (conn->prev)
		conn->prev->next = conn->next;
	else
		ctl->conns = conn->next;
	if (conn->next)
		conn->next->prev = conn->prev;
	conn->prev = conn->next = NULL;
	ctl->nconns--;
	ctl->nzombies++;
	if (conn->paused) {
		conn->paused = false;
		ctl->st.paused--;
	}
	rgaps_debug("control: connection %llu closed (pid %d uid %u)", (unsigned long long)conn->id,
		    (int)conn->cred.pid, (unsigned)conn->cred.uid);
	ctl->ops->on_close(ctl->ctx, conn);

	/* The pending recv returns 0 and the pending send EPIPE: their completions come now. */
	if (conn->recv_armed || conn->send_armed)
		shutdown(conn->fd, SHUT_RDWR);
	/* Replies not yet handed to the kernel are dropped; the one in flight waits for its CQE. */
	keep = conn->send_armed ? conn->sq_head : NULL;
	s = keep ? keep->next : conn->sq_head;
	while (s) {
		struct ctl_send *next = s->next;

		send_free(conn, s);
		s = next;
	}
	conn->sq_head = keep;
	if (keep)
		keep->next = NULL;
	conn->sq_tail = keep ? &keep->next : &conn->sq_head;
	conn_put(conn);
}

static int conn_recv_arm(struct rgapsd_conn *conn, bool poll_first)
{
	struct io_uring_sqe *sqe = ctl_get_sqe(conn->ctl);
	uint8_t *buf;
	size_t len;

	if (!sqe)
		return -ENOMEM;
	/* The rest of the header, else the rest of the payload: never a byte of the next frame. */
	if (conn->hdr_have < RGAPS_FRAME_HDR) {
		buf = conn->hdr + conn->hdr_have;
		len = RGAPS_FRAME_HDR - conn->hdr_have;
	} else {
		buf = conn->payload + conn->payload_have;
		len = conn->payload_len - conn->payload_have;
	}
	rgaps_require(len > 0);
	conn->riov.iov_base = buf;
	conn->riov.iov_len = len;
	memset(&conn->rmsg, 0, sizeof(conn->rmsg));
	/* Zeroed: whatever the kernel does not fill in parses as "no control message". */
	memset(&conn->rcmsg, 0, sizeof(conn->rcmsg));
	conn->rmsg.msg_iov = &conn->riov;
	conn->rmsg.msg_iovlen = 1;
	conn->rmsg.msg_control = conn->rcmsg.buf;
	conn->rmsg.msg_controllen = sizeof(conn->rcmsg.buf);
	io_uring_prep_recvmsg(sqe, conn->fd, &conn->rmsg, MSG_CMSG_CLOEXEC);
	if (poll_first)
		sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;
	io_uring_sqe_set_data64(sqe, ctl_ud(conn, CTL_OP_RECV));
	conn->recv_armed = true;
	conn->refs++;
	return 0;
}

static int conn_send_arm(struct rgapsd_conn *conn, bool poll_first)
{
	struct io_uring_sqe *sqe = ctl_get_sqe(conn->ctl);
	struct ctl_send *s = conn->sq_head;
	struct cmsghdr *cm;

	if (!sqe)
		return -ENOMEM;
	conn->siov.iov_base = s->data + s->off;
	conn->siov.iov_len = s->len - s->off;
	memset(&conn->smsg, 0, sizeof(conn->smsg));
	conn->smsg.msg_iov = &conn->siov;
	conn->smsg.msg_iovlen = 1;
	if (s->nfds) {
		/* Only the first piece carries fds: they are closed once it has gone out. */
		rgaps_require(s->off == 0);
		memset(&conn->scmsg, 0, sizeof(conn->scmsg));
		conn->smsg.msg_control = conn->scmsg.buf;
		conn->smsg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)s->nfds);
		cm = CMSG_FIRSTHDR(&conn->smsg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)s->nfds);
		memcpy(CMSG_DATA(cm), s->fds, sizeof(int) * (size_t)s->nfds);
	}
	/* MSG_NOSIGNAL: a client that hung up must cost an EPIPE, not a SIGPIPE to rgapsd. */
	io_uring_prep_sendmsg(sqe, conn->fd, &conn->smsg, MSG_NOSIGNAL);
	if (poll_first)
		sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;
	io_uring_sqe_set_data64(sqe, ctl_ud(conn, CTL_OP_SEND));
	conn->send_armed = true;
	conn->refs++;
	return 0;
}

/* Clients never send fds: close whatever came with the last recv (off the loop), and say so. */
static void conn_drop_fds(struct rgapsd_conn *conn)
{
	bool truncated = conn->rmsg.msg_flags & MSG_CTRUNC;
	struct cmsghdr *cm;
	unsigned n = 0;

	for (cm = CMSG_FIRSTHDR(&conn->rmsg); cm; cm = CMSG_NXTHDR(&conn->rmsg, cm)) {
		size_t cnt;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
		    cm->cmsg_len < CMSG_LEN(0))
			continue;
		cnt = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < cnt; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
			ctl_close_untrusted(conn->ctl, fd);
			n++;
		}
	}
	conn->ctl->st.fds_closed += n;
	if (n || truncated)
		ctl_log_refusal(conn->ctl, "connection %llu (pid %d uid %u) passed %u file "
				"descriptor(s)%s; closed them (clients never send descriptors)",
				(unsigned long long)conn->id, (int)conn->cred.pid,
				(unsigned)conn->cred.uid, n,
				truncated ? " and more the kernel discarded" : "");
}

/* The error frame of the stable table (src/common/errors.c) that ends a connection. */
static int ctl_error_frame(char *buf, size_t len, int err, const char *why)
{
	int n = snprintf(buf, len,
			 "{\"ok\":false,\"error\":{\"code\":\"%s\",\"errno\":%d,"
			 "\"message\":\"%s; closing the connection\"}}",
			 rgaps__errcode_name(err), -err, why);

	rgaps_require(n > 0 && (size_t)n < len);
	return n;
}

/* The stream cannot go on (bad frame, a deadline): say why, then hang up once that is sent. */
static void conn_fail(struct rgapsd_conn *conn, int err, const char *why)
{
	char reply[384];
	int n, rc;

	ctl_log_refusal(conn->ctl, "connection %llu (pid %d uid %u): %s; closing it",
			(unsigned long long)conn->id, (int)conn->cred.pid,
			(unsigned)conn->cred.uid, why);
	n = ctl_error_frame(reply, sizeof(reply), err, why);
	rc = rgapsd_conn_send(conn, reply, (size_t)n, NULL, 0);
	if (rc)
		rgaps_debug("control: connection %llu: cannot queue the error reply: %s",
			    (unsigned long long)conn->id, strerror(-rc));
	rgapsd_conn_close_after_send(conn);
}

static void conn_reject(struct rgapsd_conn *conn, int err)
{
	char why[96];

	if (err == -EMSGSIZE)
		snprintf(why, sizeof(why), "frame length exceeds the limit of %u bytes",
			 RGAPS_FRAME_MAX);
	else
		snprintf(why, sizeof(why), "frame length is 0");
	conn_fail(conn, err, why);
}

/* Bytes of the frame arriving came in: the header's, then the payload's. */
static void conn_on_data(struct rgapsd_conn *conn, int res)
{
	struct rgapsd_control *ctl = conn->ctl;
	uint8_t *payload;
	uint32_t len;
	int rc;

	if (res == -EAGAIN || res == -EINTR) {
		if (conn_recv_arm(conn, true))
			conn_close(conn);
		return;
	}
	if (res <= 0) {
		rgaps_debug("control: connection %llu (pid %d): %s", (unsigned long long)conn->id,
			    (int)conn->cred.pid, res ? strerror(-res) : "peer hung up");
		conn_close(conn);
		return;
	}
	conn->active_ms = ctl_now(ctl);
	if (!conn->frame_start_ms)
		conn->frame_start_ms = conn->active_ms;
	if (conn->hdr_have < RGAPS_FRAME_HDR) {
		conn->hdr_have += (uint32_t)res;
		if (conn->hdr_have < RGAPS_FRAME_HDR)
			goto next;
		rc = rgaps__frame_length(conn->hdr, &len);
		if (rc) {
			conn_reject(conn, rc);
			goto next;
		}
		conn->payload = malloc(len);
		if (!conn->payload) {
			rgaps_warn("control: connection %llu: no memory for a %u-byte frame; "
				   "closing it", (unsigned long long)conn->id, len);
			conn_close(conn);
			return;
		}
		conn->payload_len = len;
		conn->payload_have = 0;
		ctl->st.frame_bytes += len;
		goto next;
	}
	conn->payload_have += (uint32_t)res;
	if (conn->payload_have < conn->payload_len)
		goto next;
	payload = conn->payload;
	len = conn->payload_len;
	conn->payload = NULL;
	conn->hdr_have = 0;
	conn->frame_start_ms = 0;
	ctl->st.frame_bytes -= len;
	/* May send, ask to close, or even stop the control: the state says which. */
	ctl->ops->on_frame(ctl->ctx, conn, (const char *)payload, len);
	free(payload);
next:
	if (conn->state == CONN_OPEN) {
		if (conn->unsent > ctl->opts.max_unsent) {
			/* Resumed by conn_on_send once the client has taken enough. */
			conn->paused = true;
			ctl->st.paused++;
			ctl->st.read_pauses++;
			rgaps_debug("control: connection %llu: %zu bytes of replies unread; not "
				    "reading its requests until it takes them",
				    (unsigned long long)conn->id, conn->unsent);
			return;
		}
		if (conn_recv_arm(conn, false))
			conn_close(conn);
	} else if (conn->state == CONN_DRAINING && !conn->send_armed) {
		conn_close(conn);
	}
}

static void conn_on_recv(struct rgapsd_conn *conn, int res)
{
	conn->recv_armed = false;
	if (res > 0)
		conn_drop_fds(conn);
	switch (conn->state) {
	case CONN_OPEN:
		conn_on_data(conn, res);
		break;
	case CONN_DRAINING:
		/* Woken by close_after_send's shutdown, or data we no longer read. */
		if (!conn->send_armed)
			conn_close(conn);
		break;
	case CONN_CLOSING:
	case CONN_NUM_STATES:
		break;
	}
	conn_put(conn);
}

static void conn_on_send(struct rgapsd_conn *conn, int res)
{
	struct rgapsd_control *ctl = conn->ctl;
	struct ctl_send *s = conn->sq_head;

	conn->send_armed = false;
	if (conn->state == CONN_CLOSING)
		goto out;
	if (res == -EAGAIN || res == -EINTR) {
		if (conn_send_arm(conn, true))
			conn_close(conn);
		goto out;
	}
	if (res <= 0) {
		rgaps_debug("control: connection %llu (pid %d): send: %s",
			    (unsigned long long)conn->id, (int)conn->cred.pid,
			    res ? strerror(-res) : "nothing sent");
		conn_close(conn);
		goto out;
	}
	/* The fds went with the first byte: the kernel holds its own references now. */
	for (int i = 0; i < s->nfds; i++)
		close(s->fds[i]);
	s->nfds = 0;
	s->off += (size_t)res;
	conn->unsent -= (size_t)res;
	ctl->st.unsent_bytes -= (uint64_t)res;
	conn->sent_ms = ctl_now(ctl);
	if (s->off < s->len)
		rgaps_trace("control: connection %llu: short send, %zu of %zu bytes left",
			    (unsigned long long)conn->id, s->len - s->off, s->len);
	if (s->off == s->len) {
		conn->sq_head = s->next;
		if (!conn->sq_head)
			conn->sq_tail = &conn->sq_head;
		send_free(conn, s);
	}
	/* A short send resubmits the rest; otherwise the next reply, if any. */
	if (conn->sq_head) {
		if (conn_send_arm(conn, false)) {
			conn_close(conn);
			goto out;
		}
	} else if (conn->state == CONN_DRAINING) {
		conn_close(conn);
		goto out;
	}
	if (conn->paused && conn->state == CONN_OPEN && conn->unsent <= ctl->opts.max_unsent) {
		conn->paused = false;
		ctl->st.paused--;
		if (conn_recv_arm(conn, false))
			conn_close(conn);
	}
out:
	conn_put(conn);
}

/* The client's supplementary groups (Linux 4.13+); without them only the primary gid counts. */
static void conn_read_groups(struct rgapsd_conn *conn)
{
	socklen_t len = 16 * sizeof(gid_t);
	static bool warned;

	for (int tries = 0; tries < 3; tries++) {
		gid_t *g = malloc(len ? len : sizeof(gid_t));

		if (!g)
			break;
		if (getsockopt(conn->fd, SOL_SOCKET, SO_PEERGROUPS, g, &len) == 0) {
			conn->groups = g;
			conn->ngroups = (uint32_t)(len / sizeof(gid_t));
			return;
		}
		free(g);
		/* ERANGE: len now holds the size needed (at most NGROUPS_MAX gids). */
		if (errno != ERANGE || len > (socklen_t)(NGROUPS_MAX * sizeof(gid_t)))
			break;
	}
	if (!warned) {
		rgaps_warn("control: SO_PEERGROUPS failed (%s): allow-lists see only the primary "
			   "group of clients", strerror(errno));
		warned = true;
	}
}

/* Root and rgapsd's own user are bound only by the daemon-wide cap. */
static bool ctl_uid_exempt(const struct rgapsd_control *ctl, uid_t uid)
{
	return uid == 0 || uid == ctl->self_uid;
}

/*
 * The last places under max_conns are kept for root and rgapsd's own user, so that an
 * operator can always connect (rgaps stats) while other users hold every other place.
 */
static uint32_t ctl_reserve(const struct rgapsd_control *ctl)
{
	return RGAPS_MIN((uint32_t)CTL_ADMIN_RESERVE, ctl->opts.max_conns / 4);
}

static uint32_t ctl_conns_of(const struct rgapsd_control *ctl, uid_t uid)
{
	uint32_t n = 0;

	for (const struct rgapsd_conn *c = ctl->conns; c; c = c->next)
		n += c->cred.uid == uid;
	return n;
}

/* Over a cap: one error frame (the socket is new, its buffer empty), then close. */
static void ctl_refuse(struct rgapsd_control *ctl, int fd, const struct ucred *cred, int err,
		       const char *why)
{
	char reply[384];
	int n = ctl_error_frame(reply + RGAPS_FRAME_HDR, sizeof(reply) - RGAPS_FRAME_HDR, err,
				why);

	rgaps__frame_header((uint8_t *)reply, (uint32_t)n);
	(void)!send(fd, reply, RGAPS_FRAME_HDR + (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
	close(fd);
	ctl_log_refusal(ctl, "refused a connection of pid %d uid %u: %s", (int)cred->pid,
			(unsigned)cred->uid, why);
}

static void conn_new(struct rgapsd_control *ctl, int fd)
{
	struct rgapsd_conn *conn;
	struct ucred cred;
	socklen_t cred_len = sizeof(cred);
	char why[160];

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) < 0) {
		rgaps_warn("control: SO_PEERCRED on a new connection failed: %s; dropping it",
			   strerror(errno));
		close(fd);
		return;
	}
	ctl->st.accepted++;
	if (ctl->nconns >= ctl->opts.max_conns ||
	    (!ctl_uid_exempt(ctl, cred.uid) && ctl->nconns >= ctl->opts.max_conns - ctl_reserve(ctl))) {
		ctl->st.refused_max++;
		snprintf(why, sizeof(why), "rgapsd serves max_connections (%u) connections%s",
			 ctl->opts.max_conns,
			 ctl_uid_exempt(ctl, cred.uid) ? "" : ", the last kept for its operators");
		ctl_refuse(ctl, fd, &cred, -ENFILE, why);
		return;
	}
	if (!ctl_uid_exempt(ctl, cred.uid) &&
	    ctl_conns_of(ctl, cred.uid) >= ctl->opts.max_conns_per_user) {
		ctl->st.refused_user++;
		snprintf(why, sizeof(why), "uid %u has max_connections_per_user (%u) connections open",
			 (unsigned)cred.uid, ctl->opts.max_conns_per_user);
		ctl_refuse(ctl, fd, &cred, -EDQUOT, why);
		return;
	}
	conn = calloc(1, sizeof(*conn));
	if (!conn) {
		rgaps_warn("control: out of memory for the connection of pid %d uid %u; "
			   "dropping it", (int)cred.pid, (unsigned)cred.uid);
		close(fd);
		return;
	}
	conn->ctl = ctl;
	conn->fd = fd;
	conn->id = __atomic_add_fetch(&ctl_conn_ids, 1, __ATOMIC_RELAXED);
	conn->cred = cred;
	conn->state = CONN_OPEN;
	conn->sq_tail = &conn->sq_head;
	conn->active_ms = ctl_now(ctl);
	conn_read_groups(conn);
	conn->next = ctl->conns;
	if (ctl->conns)
		ctl->conns->prev = conn;
	ctl->conns = conn;
	ctl->nconns++;
	rgaps_debug("control: connection %llu opened (pid %d uid %u gid %u, %u groups)",
		    (unsigned long long)conn->id, (int)cred.pid, (unsigned)cred.uid,
		    (unsigned)cred.gid, conn->ngroups);
	conn->refs = 1;
	if (conn_recv_arm(conn, false)) {
		rgaps_warn("control: connection %llu: no submission queue entry for its first "
			   "receive; closing it", (unsigned long long)conn->id);
		conn_close(conn);
	}
	conn_put(conn);
}

/* ---- deadlines ------------------------------------------------------------------------- */

static void ctl_on_sweep(uv_timer_t *t)
{
	struct rgapsd_control *ctl = t->data;
	const struct rgapsd_control_opts *o = &ctl->opts;
	uint64_t now = ctl_now(ctl);
	struct rgapsd_conn *conn, *next;
	char why[128];

	for (conn = ctl->conns; conn; conn = next) {
		next = conn->next;
		if (conn->sq_head && now - conn->sent_ms >= o->idle_timeout_ms) {
			/* It reads nothing: an error frame would not get through either. */
			ctl->st.stalled_closed++;
			ctl_log_refusal(ctl, "connection %llu (pid %d uid %u) left %zu bytes of "
					"replies unread for %u ms; closing it",
					(unsigned long long)conn->id, (int)conn->cred.pid,
					(unsigned)conn->cred.uid, conn->unsent, o->idle_timeout_ms);
			conn_close(conn);
			continue;
		}
		if (conn->state != CONN_OPEN)
			continue;
		if (conn->frame_start_ms && now - conn->frame_start_ms >= o->frame_timeout_ms) {
			ctl->st.frame_timeouts++;
			snprintf(why, sizeof(why), "frame not complete %u ms after its first byte",
				 o->frame_timeout_ms);
			conn_fail(conn, -ETIMEDOUT, why);
		} else if (!conn->attached && !conn->frame_start_ms && !conn->sq_head &&
			   now - conn->active_ms >= o->idle_timeout_ms) {
			ctl->st.idle_closed++;
			snprintf(why, sizeof(why), "idle for %u ms without an attachment",
				 o->idle_timeout_ms);
			conn_fail(conn, -ETIMEDOUT, why);
		}
	}
	ctl_submit_unless_dispatching(ctl);
}

static uint64_t ctl_sweep_interval(const struct rgapsd_control_opts *o)
{
	uint64_t ms = RGAPS_MIN(o->idle_timeout_ms, o->frame_timeout_ms) / 4;

	return RGAPS_MAX(RGAPS_MIN(ms, (uint64_t)CTL_SWEEP_MAX_MS), (uint64_t)CTL_SWEEP_MIN_MS);
}

/* ---- accepting ------------------------------------------------------------------------- */

static int ctl_accept_arm(struct rgapsd_control *ctl)
{
	struct io_uring_sqe *sqe = ctl_get_sqe(ctl);

	if (!sqe)
		return -ENOMEM;
	io_uring_prep_multishot_accept(sqe, ctl->listen_fd, NULL, NULL,
				       SOCK_CLOEXEC | SOCK_NONBLOCK);
	io_uring_sqe_set_data64(sqe, ctl_ud(ctl, CTL_OP_ACCEPT));
	ctl->accept_armed = true;
	return 0;
}

static void ctl_on_backoff(uv_timer_t *t)
{
	struct rgapsd_control *ctl = t->data;

	if (ctl->stopping || ctl->accept_armed)
		return;
	if (ctl_accept_arm(ctl))
		uv_timer_start(&ctl->backoff, ctl_on_backoff, CTL_ACCEPT_BACKOFF_MS, 0);
	else
		ctl_submit_unless_dispatching(ctl);
}

static void ctl_on_accept(struct rgapsd_control *ctl, int res, unsigned flags)
{
	if (!(flags & IORING_CQE_F_MORE))
		ctl->accept_armed = false;
	if (res >= 0) {
		ctl->accept_failing = false;
		if (ctl->stopping)
			close(res);
		else
			conn_new(ctl, res);
	} else if (!ctl->stopping && !ctl->accept_failing) {
		/* EMFILE and friends last a while: once per streak, and a pause before retrying. */
		ctl_log_refusal(ctl, "accept on %s failed: %s; retrying every %d ms", ctl->path,
				strerror(-res), CTL_ACCEPT_BACKOFF_MS);
		ctl->accept_failing = true;
	}
	if (ctl->accept_armed || ctl->stopping)
		return;
	if (res < 0 || ctl_accept_arm(ctl))
		uv_timer_start(&ctl->backoff, ctl_on_backoff, CTL_ACCEPT_BACKOFF_MS, 0);
}

/* ---- the completion loop --------------------------------------------------------------- */

static void ctl_handle(struct rgapsd_control *ctl, uint64_t ud, int res, unsigned flags)
{
	void *ptr = (void *)(uintptr_t)(ud & ~CTL_OP_MASK);

	switch ((enum ctl_op)(ud & CTL_OP_MASK)) {
	case CTL_OP_ACCEPT:
		ctl_on_accept(ctl, res, flags);
		break;
	case CTL_OP_RECV:
		conn_on_recv(ptr, res);
		break;
	case CTL_OP_SEND:
		conn_on_send(ptr, res);
		break;
	case CTL_OP_CANCEL:
		break;
	default:
		rgaps_require(!"unknown io_uring user_data");
	}
}

/* Handle every completion available now, then submit what the handlers queued. */
static void ctl_drain(struct rgapsd_control *ctl)
{
	struct io_uring_cqe *cqes[CTL_CQE_BATCH];
	struct {
		uint64_t ud;
		int res;
		unsigned flags;
	} batch[CTL_CQE_BATCH];
	unsigned n;

	rgaps_require(!ctl->dispatching);
	ctl->dispatching = true;
	/* Copied out and the CQ released before any handler runs: handlers may queue more. */
	while ((n = io_uring_peek_batch_cqe(&ctl->ring, cqes, CTL_CQE_BATCH)) > 0) {
		for (unsigned i = 0; i < n; i++) {
			batch[i].ud = io_uring_cqe_get_data64(cqes[i]);
			batch[i].res = cqes[i]->res;
			batch[i].flags = cqes[i]->flags;
		}
		io_uring_cq_advance(&ctl->ring, n);
		for (unsigned i = 0; i < n; i++)
			ctl_handle(ctl, batch[i].ud, batch[i].res, batch[i].flags);
	}
	ctl->dispatching = false;
	ctl_submit(ctl);
}

static void ctl_on_handle_closed(uv_handle_t *h)
{
	struct rgapsd_control *ctl = h->data;

	if (--ctl->handles_open)
		return;
	rgapsd_closer_stop(ctl->closer);
	close(ctl->event_fd);
	free(ctl->lock_path);
	free(ctl->path);
	free(ctl);
}

/* ctl and its eventfd are released once libuv has closed the three handles. */
static void ctl_close_handles(struct rgapsd_control *ctl)
{
	ctl->handles_open = 3;
	uv_close((uv_handle_t *)&ctl->poll, ctl_on_handle_closed);
	uv_close((uv_handle_t *)&ctl->backoff, ctl_on_handle_closed);
	uv_close((uv_handle_t *)&ctl->sweep, ctl_on_handle_closed);
}

/*
 * Wait (bounded: this is shutdown) for the accept and every closing connection's ops to
 * complete, then release the ring, the fds and, once libuv has closed them, the handles.
 */
static void ctl_finish(struct rgapsd_control *ctl)
{
	uint64_t deadline = ctl_now_ms() + CTL_STOP_TIMEOUT_MS;
	struct __kernel_timespec ts = { .tv_sec = 0, .tv_nsec = 50 * 1000 * 1000 };
	struct io_uring_cqe *cqe;
	int rc;

	ctl->finished = true;
	ctl_submit(ctl);
	while ((ctl->accept_armed || ctl->nzombies) && ctl_now_ms() < deadline) {
		rc = io_uring_wait_cqe_timeout(&ctl->ring, &cqe, &ts);
		if (rc < 0 && rc != -ETIME && rc != -EINTR) {
			rgaps_error("control: waiting for io_uring completions at stop: %s",
				    strerror(-rc));
			break;
		}
		ctl_drain(ctl);
	}
	if (ctl->accept_armed || ctl->nzombies)
		/* Freeing memory the kernel may still write is worse than leaking it at exit. */
		rgaps_error("control: %u connection(s)%s still had io_uring operations pending "
			    "after %d ms; leaking their memory",
			    ctl->nzombies, ctl->accept_armed ? " and the accept" : "",
			    CTL_STOP_TIMEOUT_MS);
	io_uring_queue_exit(&ctl->ring);
	close(ctl->listen_fd);
	close(ctl->lock_fd);
	ctl_close_handles(ctl);
}

static void ctl_on_event(uv_poll_t *h, int status, int events)
{
	struct rgapsd_control *ctl = h->data;
	eventfd_t v;

	if (status < 0)
		rgaps_warn("control: poll on the io_uring eventfd: %s", uv_strerror(status));
	/* EAGAIN: a wake-up for completions an earlier drain already handled. */
	(void)eventfd_read(ctl->event_fd, &v);
	ctl_drain(ctl);
	/* stop() from inside a handler defers the teardown to here. */
	if (ctl->stopping && !ctl->finished)
		ctl_finish(ctl);
}

/* ---- start / stop ---------------------------------------------------------------------- */

/*
 * The search bits a directory needs so that those the socket's mode lets in can reach it:
 * 0666 -> 0755, 0660 -> 0750, 0600 -> 0700.
 */
static mode_t ctl_dir_mode(mode_t sock_mode)
{
	return 0700 | ((sock_mode & 0060) ? 0050 : 0) | ((sock_mode & 0006) ? 0005 : 0);
}

/*
 * mkdir -p of path's parent. Directories made get exactly the mode for the socket's (umask
 * aside) and its group; *created_p: offset of the first directory made, or -1.
 */
static int ctl_make_parents(const struct rgapsd_control *ctl, const char *path,
			    ssize_t *created_p)
{
	mode_t mode = ctl_dir_mode(ctl->opts.socket_mode);
	char *p = strdup(path);
	ssize_t created = -1;
	int err = 0;

	*created_p = -1;
	if (!p)
		return -ENOMEM;
	for (char *s = strchr(p + 1, '/'); s && !err; s = strchr(s + 1, '/')) {
		struct stat st;

		*s = '\0';
		if (mkdir(p, mode) == 0) {
			if (created < 0)
				created = s - p;
			if (chmod(p, mode) < 0 ||
			    (ctl->opts.set_group && chown(p, (uid_t)-1, ctl->opts.group) < 0)) {
				err = -errno;
				rgaps_error("control: cannot give directory %s mode %04o%s: %s", p,
					    (unsigned)mode, ctl->opts.set_group ? " and its group" : "",
					    strerror(errno));
			}
		} else if (errno != EEXIST) {
			int e = errno; /* stat's ENOENT must not hide mkdir's EACCES */

			if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
				*s = '/';
				continue;
			}
			err = -e;
			rgaps_error("control: cannot create directory %s for %s: %s%s", p, path,
				    strerror(e),
				    e == EACCES && geteuid() != 0 ?
					    " (as a user other than root, give a socket path you "
					    "may create: --socket or \"socket\", e.g. "
					    "$XDG_RUNTIME_DIR/rgaps/rgapsd.sock, and point clients at "
					    "it with RGAPS_SOCKET)" :
					    "");
		}
		*s = '/';
	}
	free(p);
	*created_p = created;
	return err;
}

/* Remove, deepest first, the directories ctl_make_parents() made. */
static void ctl_remove_parents(const char *path, ssize_t created)
{
	char *p;

	if (created < 0 || !(p = strdup(path)))
		return;
	for (char *s = strrchr(p, '/'); s && s - p >= created; s = strrchr(p, '/')) {
		*s = '\0';
		rmdir(p);
	}
	free(p);
}

/*
 * The lock file outlives no daemon: it is unlinked at stop. So a lock taken on a file that was
 * unlinked meanwhile guards nothing; check the path still names the locked file, else retry.
 */
static int ctl_lock(struct rgapsd_control *ctl)
{
	struct stat held, named;

	for (int i = 0; i < CTL_LOCK_TRIES; i++) {
		int fd = open(ctl->lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
		int err;

		if (fd < 0) {
			err = -errno;
			rgaps_error("control: cannot open lock file %s: %s", ctl->lock_path,
				    strerror(errno));
			return err;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			err = -errno;
			close(fd);
			if (err == -EWOULDBLOCK) {
				rgaps_error("control: another rgapsd is already serving %s "
					    "(lock %s held)", ctl->path, ctl->lock_path);
				return -EADDRINUSE;
			}
			rgaps_error("control: cannot lock %s: %s", ctl->lock_path, strerror(-err));
			return err;
		}
		if (fstat(fd, &held) == 0 && stat(ctl->lock_path, &named) == 0 &&
		    held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
			ctl->lock_fd = fd;
			return 0;
		}
		close(fd);
	}
	rgaps_error("control: lock file %s keeps being replaced; giving up", ctl->lock_path);
	return -EAGAIN;
}

/* A socket left by a daemon that died goes; anything else at the path is not ours to remove. */
static int ctl_remove_stale(struct rgapsd_control *ctl)
{
	struct stat st;

	if (lstat(ctl->path, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		rgaps_error("control: cannot stat %s: %s", ctl->path, strerror(errno));
		return -errno;
	}
	if (!S_ISSOCK(st.st_mode)) {
		rgaps_error("control: %s exists and is not a socket; refusing to replace it",
			    ctl->path);
		return -EEXIST;
	}
	if (unlink(ctl->path) < 0 && errno != ENOENT) {
		rgaps_error("control: cannot remove stale socket %s: %s", ctl->path,
			    strerror(errno));
		return -errno;
	}
	rgaps_debug("control: removed stale socket %s", ctl->path);
	return 0;
}

static int ctl_listen(struct rgapsd_control *ctl)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, err;

	memcpy(sa.sun_path, ctl->path, strlen(ctl->path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		err = -errno;
		rgaps_error("control: socket(AF_UNIX): %s", strerror(errno));
		return err;
	}
	/* Before listen(): every connection inherits it, so none ever carries a descriptor. */
	ctl->refuses_fds = !ctl->opts.pass_rights &&
			   setsockopt(fd, SOL_SOCKET, SO_PASSRIGHTS, &(int){ 0 }, sizeof(int)) == 0;
	if (!ctl->refuses_fds)
		rgaps_info(
			"control: the kernel lets clients pass descriptors (SO_PASSRIGHTS came "
			"with Linux 6.16): those that come, and the connections, are closed on a "
			"thread of their own");
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = -errno;
		rgaps_error("control: cannot bind %s: %s", ctl->path, strerror(errno));
		goto err_close;
	}
	/* 0666 by default: any local user may connect, and the topics' allow-lists decide. */
	if (chmod(ctl->path, ctl->opts.socket_mode) < 0) {
		err = -errno;
		rgaps_error("control: cannot chmod %04o %s: %s", ctl->opts.socket_mode, ctl->path,
			    strerror(errno));
		goto err_unlink;
	}
	if (ctl->opts.set_group && chown(ctl->path, (uid_t)-1, ctl->opts.group) < 0) {
		err = -errno;
		rgaps_error("control: cannot give %s the group %u: %s%s", ctl->path,
			    (unsigned)ctl->opts.group, strerror(errno),
			    errno == EPERM ? " (rgapsd's user must be a member of socket_group)" : "");
		goto err_unlink;
	}
	if (listen(fd, SOMAXCONN) < 0) {
		err = -errno;
		rgaps_error("control: cannot listen on %s: %s", ctl->path, strerror(errno));
		goto err_unlink;
	}
	ctl->listen_fd = fd;
	return 0;

err_unlink:
	unlink(ctl->path);
err_close:
	close(fd);
	return err;
}

static int ctl_ring_init(struct rgapsd_control *ctl)
{
	int err;

	ctl->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ctl->event_fd < 0) {
		err = -errno;
		rgaps_error("control: eventfd: %s", strerror(errno));
		return err;
	}
	err = io_uring_queue_init(CTL_QUEUE_DEPTH, &ctl->ring, 0);
	if (err) {
		rgaps_error("control: io_uring_queue_init(%d): %s%s", CTL_QUEUE_DEPTH,
			    strerror(-err),
			    err == -EPERM || err == -ENOSYS ?
				    " (is io_uring disabled: kernel.io_uring_disabled, seccomp?)" :
				    "");
		goto err_eventfd;
	}
	err = io_uring_register_eventfd(&ctl->ring, ctl->event_fd);
	if (err) {
		rgaps_error("control: io_uring_register_eventfd: %s", strerror(-err));
		goto err_ring;
	}
	err = ctl_accept_arm(ctl);
	if (err) {
		rgaps_error("control: no submission queue entry for the accept");
		goto err_ring;
	}
	err = io_uring_submit(&ctl->ring);
	if (err < 0) {
		rgaps_error("control: submitting the accept on %s: %s", ctl->path, strerror(-err));
		goto err_ring;
	}
	return 0;

err_ring:
	io_uring_queue_exit(&ctl->ring);
err_eventfd:
	close(ctl->event_fd);
	return err;
}

/* Zero fields take the defaults; the socket's mode keeps only its permission bits. */
static void ctl_set_opts(struct rgapsd_control *ctl, const struct rgapsd_control_opts *o)
{
	const struct rgapsd_control_opts *d = &ctl_default_opts;

	ctl->opts = o ? *o : *d;
	if (!ctl->opts.max_conns)
		ctl->opts.max_conns = d->max_conns;
	if (!ctl->opts.max_conns_per_user)
		ctl->opts.max_conns_per_user = d->max_conns_per_user;
	if (!ctl->opts.idle_timeout_ms)
		ctl->opts.idle_timeout_ms = d->idle_timeout_ms;
	if (!ctl->opts.frame_timeout_ms)
		ctl->opts.frame_timeout_ms = d->frame_timeout_ms;
	if (!ctl->opts.max_unsent)
		ctl->opts.max_unsent = d->max_unsent;
	if (!ctl->opts.socket_mode)
		ctl->opts.socket_mode = d->socket_mode;
	ctl->opts.socket_mode &= 0777;
}

int rgapsd_control_start(uv_loop_t *loop, const char *path, const struct rgapsd_control_opts *opts,
			 const struct rgapsd_control_ops *ops, void *ctx,
			 struct rgapsd_control **ctl_p)
{
	struct rgapsd_control *ctl;
	ssize_t created_dir = -1;
	size_t path_len;
	int err;

	if (!loop || !path || !ops || !ops->on_frame || !ops->on_close || !ctl_p)
		return -EINVAL;
	path_len = strlen(path);
	if (path_len == 0 || path_len >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		rgaps_error("control: socket path \"%s\" is %s (at most %zu bytes)", path,
			    path_len ? "too long" : "empty",
			    sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		return path_len ? -ENAMETOOLONG : -EINVAL;
	}
	ctl = calloc(1, sizeof(*ctl));
	if (!ctl)
		return -ENOMEM;
	ctl->loop = loop;
	ctl->ops = ops;
	ctl->ctx = ctx;
	ctl->self_uid = geteuid();
	ctl_set_opts(ctl, opts);
	ctl->listen_fd = ctl->lock_fd = ctl->event_fd = -1;
	ctl->path = strdup(path);
	if (!ctl->path || asprintf(&ctl->lock_path, "%s.lock", path) < 0) {
		ctl->lock_path = NULL;
		err = -ENOMEM;
		goto err_free;
	}

	err = ctl_make_parents(ctl, path, &created_dir);
	if (err)
		goto err_dirs;
	err = ctl_lock(ctl);
	if (err)
		goto err_dirs;
	err = ctl_remove_stale(ctl);
	if (err)
		goto err_lock;
	err = ctl_listen(ctl);
	if (err)
		goto err_lock;
	err = ctl_ring_init(ctl);
	if (err)
		goto err_listen;
	err = uv_poll_init(loop, &ctl->poll, ctl->event_fd);
	if (err) {
		rgaps_error("control: uv_poll_init on the io_uring eventfd: %s", uv_strerror(err));
		goto err_ring;
	}
	ctl->poll.data = ctl;
	uv_timer_init(loop, &ctl->backoff);
	ctl->backoff.data = ctl;
	uv_timer_init(loop, &ctl->sweep);
	ctl->sweep.data = ctl;
	err = uv_poll_start(&ctl->poll, UV_READABLE, ctl_on_event);
	if (err) {
		rgaps_error("control: uv_poll_start on the io_uring eventfd: %s", uv_strerror(err));
		goto err_uv;
	}
	uv_timer_start(&ctl->sweep, ctl_on_sweep, ctl_sweep_interval(&ctl->opts),
		       ctl_sweep_interval(&ctl->opts));
	rgaps_info("control: serving %s (mode %04o; at most %u connections, %u per user; idle "
		   "%u ms, frame %u ms, %" PRIu64 " bytes of unread replies)",
		   path, ctl->opts.socket_mode, ctl->opts.max_conns, ctl->opts.max_conns_per_user,
		   ctl->opts.idle_timeout_ms, ctl->opts.frame_timeout_ms, ctl->opts.max_unsent);
	*ctl_p = ctl;
	return 0;

err_uv:
	/* The handles exist now: ctl and the eventfd are released in their close callbacks. */
	io_uring_queue_exit(&ctl->ring);
	close(ctl->listen_fd);
	unlink(ctl->path);
	unlink(ctl->lock_path);
	close(ctl->lock_fd);
	ctl_remove_parents(path, created_dir);
	ctl_close_handles(ctl);
	return err;
err_ring:
	io_uring_queue_exit(&ctl->ring);
	close(ctl->event_fd);
err_listen:
	close(ctl->listen_fd);
	unlink(ctl->path);
err_lock:
	unlink(ctl->lock_path);
	close(ctl->lock_fd);
err_dirs:
	ctl_remove_parents(path, created_dir);
err_free:
	free(ctl->lock_path);
	free(ctl->path);
	free(ctl);
	return err;
}

void rgapsd_control_stop(struct rgapsd_control *ctl)
{
	struct io_uring_sqe *sqe;

	if (!ctl || ctl->stopping)
		return;
	ctl->stopping = true;
	uv_timer_stop(&ctl->backoff);
	uv_timer_stop(&ctl->sweep);
	if (ctl->accept_armed) {
		sqe = ctl_get_sqe(ctl);
		if (sqe) {
			io_uring_prep_cancel64(sqe, ctl_ud(ctl, CTL_OP_ACCEPT), 0);
			io_uring_sqe_set_data64(sqe, ctl_ud(NULL, CTL_OP_CANCEL));
		}
	}
	while (ctl->conns)
		conn_close(ctl->conns);
	/* Socket first: once the lock file is gone a new daemon may bind the path. */
	if (unlink(ctl->path) < 0 && errno != ENOENT)
		rgaps_warn("control: cannot remove %s: %s", ctl->path, strerror(errno));
	if (unlink(ctl->lock_path) < 0 && errno != ENOENT)
		rgaps_warn("control: cannot remove %s: %s", ctl->lock_path, strerror(errno));
	rgaps_info("control: stopped serving %s", ctl->path);
	if (!ctl->dispatching)
		ctl_finish(ctl);
}

int rgapsd_conn_send(struct rgapsd_conn *conn, const char *payload, size_t len, const int *fds,
		     int nfds)
{
	struct ctl_send *s;
	int err;

	if (conn->state != CONN_OPEN)
		return -ENOTCONN;
	if (len == 0 || len > RGAPS_FRAME_MAX)
		return -EMSGSIZE;
	if (nfds < 0 || nfds > CTL_SEND_MAX_FDS || (nfds && !fds))
		return -EINVAL;
	s = malloc(sizeof(*s) + RGAPS_FRAME_HDR + len);
	if (!s)
		return -ENOMEM;
	for (int i = 0; i < nfds; i++) {
		s->fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
		if (s->fds[i] < 0) {
			err = -errno;
			while (i--)
				close(s->fds[i]);
			free(s);
			return err;
		}
	}
	s->nfds = nfds;
	s->next = NULL;
	s->off = 0;
	s->len = RGAPS_FRAME_HDR + len;
	rgaps__frame_header(s->data, (uint32_t)len);
	memcpy(s->data + RGAPS_FRAME_HDR, payload, len);
	*conn->sq_tail = s;
	conn->sq_tail = &s->next;
	conn->unsent += s->len;
	conn->ctl->st.unsent_bytes += s->len;
	if (conn->send_armed)
		return 0;
	/* Idle sender means an empty queue (see conn_on_send): s is the head. */
	rgaps_require(conn->sq_head == s);
	conn->sent_ms = ctl_now(conn->ctl);
	err = conn_send_arm(conn, false);
	if (err) {
		conn->sq_head = NULL;
		conn->sq_tail = &conn->sq_head;
		send_free(conn, s);
		return err;
	}
	ctl_submit_unless_dispatching(conn->ctl);
	return 0;
}

void rgapsd_conn_close_after_send(struct rgapsd_conn *conn)
{
	if (conn->state != CONN_OPEN)
		return;
	conn->state = CONN_DRAINING;
	/*
	 * Nothing queued and a recv armed (called outside on_frame): its completion is what
	 * closes, so on_close does not run inside this call. Shutting reads down brings it now.
	 */
	if (!conn->send_armed && conn->recv_armed)
		shutdown(conn->fd, SHUT_RD);
}

void rgapsd_conn_set_attached(struct rgapsd_conn *conn, bool attached)
{
	conn->attached = attached;
	/* Idle time counts from the detach, not from the last request before the attach. */
	conn->active_ms = ctl_now(conn->ctl);
}

const struct ucred *rgapsd_conn_cred(const struct rgapsd_conn *conn)
{
	return &conn->cred;
}

const gid_t *rgapsd_conn_groups(const struct rgapsd_conn *conn, uint32_t *n_p)
{
	*n_p = conn->ngroups;
	return conn->groups;
}

size_t rgapsd_conn_unsent(const struct rgapsd_conn *conn)
{
	return conn->unsent;
}

uint64_t rgapsd_conn_id(const struct rgapsd_conn *conn)
{
	return conn->id;
}

void rgapsd_conn_set_data(struct rgapsd_conn *conn, void *data)
{
	conn->data = data;
}

void *rgapsd_conn_get_data(const struct rgapsd_conn *conn)
{
	return conn->data;
}

unsigned rgapsd_control_nconns(const struct rgapsd_control *ctl)
{
	return ctl->nconns;
}

void rgapsd_control_get_stats(const struct rgapsd_control *ctl, struct rgapsd_control_stats *st)
{
	*st = ctl->st;
	st->conns = ctl->nconns;
	st->log_suppressed = ctl->log_rl.suppressed_total;
}
