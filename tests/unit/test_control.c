/*
 * Tests of rgapsd's control socket (src/daemon/control.c) with a real libuv
 * loop, a real io_uring and a real Unix socket in a temporary directory. The
 * server side is a test on_frame that echoes each payload back with a pipe's
 * read end attached; clients are plain blocking sockets (5 s timeouts) in a
 * second thread, which record the first thing that went wrong for the main
 * thread to assert on. Every test ends by stopping the control, running the
 * loop until no handle is left, and asserting uv_loop_close() == 0, that the
 * socket and lock file are gone and that no descriptor leaked; a 5 s watchdog
 * timer fails a test that hangs.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "control.h"
#include "frame.h"
#include "log.h"
#include "stuck_tcp.h"
#include "util.h"

#define WATCHDOG_MS 10000
#define MAX_IDS 256

struct fx {
	uv_loop_t loop;
	uv_timer_t watchdog;
	uv_async_t done;
	struct rgapsd_control *ctl;
	struct rgapsd_control_opts opts; /* all zero: the defaults */
	char dir[64];
	char path[100];
	char lock_path[112];
	int pipe[2]; /* its read end goes with every echo reply */
	bool kernel_refused_fds; /* a client's sendmsg with fds failed (SO_PASSRIGHTS) */
	int fds_before;
	void (*client)(struct fx *fx);
	pthread_t thread;

	/* Loop thread only. */
	unsigned frames;
	unsigned closes;
	unsigned wait_closes; /* stop once this many connections closed and the client is done */
	bool client_done;
	bool watchdog_closed;
	bool timed_out;
	pid_t last_pid;
	uid_t last_uid;
	uint64_t closed_ids[MAX_IDS];
	struct rgapsd_control_stats last_stats; /* as the last on_close saw them */
	uint64_t max_frame_bytes;		 /* largest frame buffer seen by the poller */

	/* Client thread only, read by the main thread after join. */
	char err[512];
};

/* ---- loop side ---------------------------------------------------------------------------- */

static void fx_stop_ctl(struct fx *fx)
{
	if (fx->ctl) {
		rgapsd_control_stop(fx->ctl);
		fx->ctl = NULL;
	}
}

static void fx_maybe_finish(struct fx *fx)
{
	if (!fx->client_done || fx->closes < fx->wait_closes || fx->watchdog_closed)
		return;
	if (fx->ctl)
		assert_int_equal(rgapsd_control_nconns(fx->ctl), 0);
	fx_stop_ctl(fx);
	uv_close((uv_handle_t *)&fx->watchdog, NULL);
	fx->watchdog_closed = true;
}

static void on_frame(void *ctx, struct rgapsd_conn *conn, const char *payload, size_t len)
{
	struct fx *fx = ctx;
	const struct ucred *cred = rgapsd_conn_cred(conn);
	unsigned *seen = rgapsd_conn_get_data(conn);
	int rc;

	fx->frames++;
	fx->last_pid = cred->pid;
	fx->last_uid = cred->uid;
	if (!seen) {
		seen = calloc(1, sizeof(*seen));
		assert_non_null(seen);
		rgapsd_conn_set_data(conn, seen);
	}
	(*seen)++;

	/* A frame is read only while the replies left unread are within the limit. */
	assert_true(rgapsd_conn_unsent(conn) <=
		    (fx->opts.max_unsent ? fx->opts.max_unsent : 1u << 20));
	if (len == 6 && memcmp(payload, "attach", 6) == 0) {
		rgapsd_conn_set_attached(conn, true);
		assert_int_equal(rgapsd_conn_send(conn, "attached", 8, NULL, 0), 0);
		return;
	}
	if (len == 6 && memcmp(payload, "groups", 6) == 0) {
		uint32_t n;
		const gid_t *g = rgapsd_conn_groups(conn, &n);
		gid_t mine[256];
		int nmine = getgroups(256, mine);

		/* SO_PEERGROUPS: the client's supplementary groups, as getgroups() sees them. */
		assert_int_equal((int)n, nmine);
		for (uint32_t i = 0; i < n; i++)
			assert_int_equal(g[i], mine[i]);
		assert_int_equal(rgapsd_conn_send(conn, "groups-ok", 9, NULL, 0), 0);
		return;
	}
	if (len == 3 && memcmp(payload, "bye", 3) == 0) {
		assert_int_equal(rgapsd_conn_send(conn, "bye-ack", 7, NULL, 0), 0);
		rgapsd_conn_close_after_send(conn);
		/* Closing: no more replies accepted, and asking twice is harmless. */
		assert_int_equal(rgapsd_conn_send(conn, "late", 4, NULL, 0), -ENOTCONN);
		rgapsd_conn_close_after_send(conn);
		return;
	}
	if (len == 4 && memcmp(payload, "stop", 4) == 0) {
		/* Stopping from inside a completion handler. */
		fx_stop_ctl(fx);
		return;
	}
	if (len == 3 && memcmp(payload, "api", 3) == 0) {
		static char big[RGAPS_FRAME_MAX + 1];
		struct rgapsd_control_stats st;
		int many[33] = { 0 };
		int bad = -1;

		/* The only client: no frame buffer is held while its frame is being handled. */
		rgapsd_control_get_stats(fx->ctl, &st);
		assert_int_equal(st.frame_bytes, 0);

		assert_int_equal(rgapsd_conn_send(conn, big, sizeof(big), NULL, 0), -EMSGSIZE);
		assert_int_equal(rgapsd_conn_send(conn, big, 0, NULL, 0), -EMSGSIZE);
		assert_int_equal(rgapsd_conn_send(conn, "x", 1, many, 33), -EINVAL);
		assert_int_equal(rgapsd_conn_send(conn, "x", 1, &bad, 1), -EBADF);
		assert_int_equal(rgapsd_conn_send(conn, "api-ok", 6, NULL, 0), 0);
		return;
	}
	rc = rgapsd_conn_send(conn, payload, len, &fx->pipe[0], 1);
	assert_int_equal(rc, 0);
}

static void on_close(void *ctx, struct rgapsd_conn *conn)
{
	struct fx *fx = ctx;
	uint64_t id = rgapsd_conn_id(conn);

	for (unsigned i = 0; i < fx->closes && i < MAX_IDS; i++)
		if (fx->closed_ids[i] == id)
			fail_msg("on_close called twice for connection %llu",
				 (unsigned long long)id);
	if (fx->closes < MAX_IDS)
		fx->closed_ids[fx->closes] = id;
	fx->closes++;
	assert_int_equal(rgapsd_conn_send(conn, "x", 1, NULL, 0), -ENOTCONN);
	if (fx->ctl)
		rgapsd_control_get_stats(fx->ctl, &fx->last_stats);
	free(rgapsd_conn_get_data(conn));
	rgapsd_conn_set_data(conn, NULL);
	fx_maybe_finish(fx);
}

static const struct rgapsd_control_ops test_ops = {
	.on_frame = on_frame,
	.on_close = on_close,
};

/* Shut down rather than longjmp out of uv_run: the client thread still uses fx. */
static void on_watchdog(uv_timer_t *t)
{
	struct fx *fx = t->data;

	fx->timed_out = true;
	fx_stop_ctl(fx);
	uv_close((uv_handle_t *)t, NULL);
	fx->watchdog_closed = true;
}

static void on_client_done(uv_async_t *a)
{
	struct fx *fx = a->data;

	fx->client_done = true;
	uv_close((uv_handle_t *)a, NULL);
	fx_maybe_finish(fx);
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the DIR's own */
}

static bool path_exists(const char *p)
{
	struct stat st;

	return lstat(p, &st) == 0;
}

/* Loop, watchdog, temp dir and pipe; the socket goes in a subdirectory start() must create. */
static void fx_init(struct fx *fx)
{
	memset(fx, 0, sizeof(*fx));
	fx->fds_before = count_fds();
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/rgaps-test-control-XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	snprintf(fx->path, sizeof(fx->path), "%s/run/ctl.sock", fx->dir);
	snprintf(fx->lock_path, sizeof(fx->lock_path), "%s.lock", fx->path);
	assert_int_equal(pipe2(fx->pipe, O_CLOEXEC), 0);
	assert_int_equal(uv_loop_init(&fx->loop), 0);
	assert_int_equal(uv_timer_init(&fx->loop, &fx->watchdog), 0);
	assert_int_equal(uv_timer_start(&fx->watchdog, on_watchdog, WATCHDOG_MS, 0), 0);
	fx->watchdog.data = fx;
}

static void fx_start(struct fx *fx)
{
	struct stat st;

	assert_int_equal(rgapsd_control_start(&fx->loop, fx->path, &fx->opts, &test_ops, fx,
					      &fx->ctl), 0);
	assert_int_equal(stat(fx->path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, fx->opts.socket_mode ? fx->opts.socket_mode : 0666);
	assert_true(path_exists(fx->lock_path));
	assert_int_equal(rgapsd_control_nconns(fx->ctl), 0);
}

static void *client_main(void *arg)
{
	struct fx *fx = arg;

	fx->client(fx);
	uv_async_send(&fx->done);
	return NULL;
}

/* Run the client thread against the loop until both are done, then check all is released. */
static void fx_run(struct fx *fx, void (*client)(struct fx *fx))
{
	char sub[96];

	fx->client = client;
	assert_int_equal(uv_async_init(&fx->loop, &fx->done, on_client_done), 0);
	fx->done.data = fx;
	assert_int_equal(pthread_create(&fx->thread, NULL, client_main, fx), 0);
	assert_int_equal(uv_run(&fx->loop, UV_RUN_DEFAULT), 0);
	assert_int_equal(pthread_join(fx->thread, NULL), 0);
	if (fx->timed_out)
		fail_msg("test timed out after %d ms (client: %s)", WATCHDOG_MS,
			 fx->err[0] ? fx->err : "no error");
	if (fx->err[0])
		fail_msg("client: %s", fx->err);
	assert_null(fx->ctl);
	assert_int_equal(uv_loop_close(&fx->loop), 0);
	assert_false(path_exists(fx->path));
	assert_false(path_exists(fx->lock_path));
	close(fx->pipe[0]);
	close(fx->pipe[1]);
	assert_int_equal(count_fds(), fx->fds_before);
	snprintf(sub, sizeof(sub), "%s/run", fx->dir);
	assert_int_equal(rmdir(sub), 0);
	assert_int_equal(rmdir(fx->dir), 0);
}

/* ---- client side -------------------------------------------------------------------------- */

static void client_fail(struct fx *fx, int line, const char *fmt, ...) RGAPS_PRINTF(3, 4);
static void client_fail(struct fx *fx, int line, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (fx->err[0])
		return;
	n = snprintf(fx->err, sizeof(fx->err), "line %d: ", line);
	va_start(ap, fmt);
	vsnprintf(fx->err + n, sizeof(fx->err) - (size_t)n, fmt, ap);
	va_end(ap);
}

#define CHECK(fx, cond, ...)                                         \
	do {                                                         \
		if (!(cond)) {                                       \
			client_fail((fx), __LINE__, __VA_ARGS__);    \
			return;                                      \
		}                                                    \
	} while (0)

static int client_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = 5 };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

/* All of buf; nfds fds ride with the first byte. 0 or -errno. */
static int send_all_fds(int fd, const void *buf, size_t len, const int *fds, int nfds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * 32)];
	} cm;
	size_t off = 0;

	while (off < len) {
		struct iovec iov = { .iov_base = (char *)buf + off, .iov_len = len - off };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
		ssize_t n;

		if (nfds > 0 && off == 0) {
			struct cmsghdr *c;

			if (nfds > 32)
				return -EINVAL;
			memset(&cm, 0, sizeof(cm));
			msg.msg_control = cm.buf;
			msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
			c = CMSG_FIRSTHDR(&msg);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
			memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
		}
		n = sendmsg(fd, &msg, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		off += (size_t)n;
	}
	return 0;
}

static int send_all(int fd, const void *buf, size_t len, int pass_fd)
{
	return send_all_fds(fd, buf, len, &pass_fd, pass_fd >= 0 ? 1 : 0);
}

static int send_frame_fds(int fd, const void *payload, uint32_t len, const int *fds, int nfds)
{
	uint8_t *f = malloc(RGAPS_FRAME_HDR + (size_t)len);
	int rc;

	if (!f)
		return -ENOMEM;
	rgaps__frame_header(f, len);
	memcpy(f + RGAPS_FRAME_HDR, payload, len);
	rc = send_all_fds(fd, f, RGAPS_FRAME_HDR + (size_t)len, fds, nfds);
	free(f);
	return rc;
}

static int send_frame(int fd, const void *payload, uint32_t len, int pass_fd)
{
	return send_frame_fds(fd, payload, len, &pass_fd, pass_fd >= 0 ? 1 : 0);
}

/*
 * Exactly n bytes. Fds that arrive are collected into *fd_p (the first; any more are closed).
 * Returns 1, 0 on EOF before the first byte, -EPIPE on EOF inside, or -errno.
 */
static int recv_exact(int fd, void *buf, size_t n, int *fd_p)
{
	size_t off = 0;

	while (off < n) {
		union {
			struct cmsghdr align;
			char buf[CMSG_SPACE(sizeof(int) * 8)];
		} cm;
		struct iovec iov = { .iov_base = (char *)buf + off, .iov_len = n - off };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
				      .msg_controllen = sizeof(cm.buf) };
		struct cmsghdr *c;
		ssize_t got = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);

		if (got < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
			size_t cnt;

			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < cnt; i++) {
				int rfd;

				memcpy(&rfd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				if (fd_p && *fd_p < 0)
					*fd_p = rfd;
				else
					close(rfd);
			}
		}
		if (got == 0)
			return off ? -EPIPE : 0;
		off += (size_t)got;
	}
	return 1;
}

/* One frame into buf (cap bytes): 1 and *len_p, 0 on EOF, or -errno. */
static int recv_frame(int fd, void *buf, size_t cap, size_t *len_p, int *fd_p)
{
	uint8_t hdr[RGAPS_FRAME_HDR];
	uint32_t len;
	int rc;

	if (fd_p)
		*fd_p = -1;
	rc = recv_exact(fd, hdr, sizeof(hdr), fd_p);
	if (rc <= 0)
		return rc;
	len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
	      (uint32_t)hdr[3] << 24;
	if (len == 0 || len > cap)
		return -EMSGSIZE;
	rc = recv_exact(fd, buf, len, fd_p);
	if (rc == 0)
		rc = -EPIPE;
	if (rc < 0)
		return rc;
	*len_p = len;
	return 1;
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed * 31 + i * 7);
}

/* ---- tests -------------------------------------------------------------------------------- */

static const uint32_t echo_sizes[] = { 1, 100, 1000, RGAPS_FRAME_MAX, 7 };

/*
 * A client passing fds. The kernel refuses them (SO_PASSRIGHTS, Linux 6.16+:
 * sendmsg fails with EPERM) unless the server asked for them (pass_rights, as
 * a kernel without the option behaves); then the server closes them (EOF on
 * our read end) and keeps serving.
 */
static void client_passes_fds(struct fx *fx, int fd)
{
	char in[64], c;
	size_t len;
	int rc, rfd, q[2];

	CHECK(fx, pipe2(q, O_CLOEXEC) == 0, "pipe: %s", strerror(errno));
	rc = send_frame(fd, "with-fd", 7, q[1]);
	close(q[1]);
	if (rc == -EPERM && !fx->opts.pass_rights) {
		close(q[0]);
		fx->kernel_refused_fds = true;
		return;
	}
	CHECK(fx, rc == 0, "send with fd: %s", strerror(-rc));
	rc = recv_frame(fd, in, sizeof(in), &len, &rfd);
	CHECK(fx, rc == 1 && len == 7 && memcmp(in, "with-fd", 7) == 0, "reply to with-fd: %d", rc);
	close(rfd);
	{
		struct pollfd pfd = { .fd = q[0], .events = POLLIN };

		rc = poll(&pfd, 1, 5000);
		c = 0;
		CHECK(fx, rc == 1 && read(q[0], &c, 1) == 0,
		      "the fd we passed is still open in the server");
		close(q[0]);
	}

	/* More fds than the server's control buffer holds: it closes some, the kernel the rest. */
	{
		int many[20];
		struct pollfd pfd;

		CHECK(fx, pipe2(q, O_CLOEXEC) == 0, "pipe: %s", strerror(errno));
		for (int i = 0; i < 20; i++)
			many[i] = q[1];
		rc = send_frame_fds(fd, "many-fds", 8, many, 20);
		close(q[1]);
		CHECK(fx, rc == 0, "send with 20 fds: %s", strerror(-rc));
		rc = recv_frame(fd, in, sizeof(in), &len, &rfd);
		CHECK(fx, rc == 1 && len == 8, "reply to many-fds: %d", rc);
		close(rfd);
		pfd = (struct pollfd){ .fd = q[0], .events = POLLIN };
		rc = poll(&pfd, 1, 5000);
		c = 0;
		CHECK(fx, rc == 1 && read(q[0], &c, 1) == 0,
		      "some of the 20 fds we passed are still open in the server");
		close(q[0]);
	}
}

static void client_echo(struct fx *fx)
{
	static uint8_t out[RGAPS_FRAME_MAX], in[RGAPS_FRAME_MAX];
	uint8_t *burst, *p;
	size_t total = 0, len;
	int fd, rfd, rc;
	char c;

	fd = client_connect(fx->path);
	CHECK(fx, fd >= 0, "connect: %s", strerror(-fd));

	/* Several frames in one write: the server must split them. */
	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(echo_sizes); i++)
		total += RGAPS_FRAME_HDR + echo_sizes[i];
	burst = p = malloc(total);
	CHECK(fx, burst, "malloc");
	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(echo_sizes); i++) {
		rgaps__frame_header(p, echo_sizes[i]);
		fill(p + RGAPS_FRAME_HDR, echo_sizes[i], (unsigned)i);
		p += RGAPS_FRAME_HDR + echo_sizes[i];
	}
	rc = send_all(fd, burst, total, -1);
	free(burst);
	CHECK(fx, rc == 0, "send burst: %s", strerror(-rc));

	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(echo_sizes); i++) {
		rc = recv_frame(fd, in, sizeof(in), &len, &rfd);
		CHECK(fx, rc == 1, "reply %zu: %d (%s)", i, rc, strerror(-rc));
		fill(out, echo_sizes[i], (unsigned)i);
		CHECK(fx, len == echo_sizes[i] && memcmp(in, out, len) == 0,
		      "reply %zu: wrong payload (%zu bytes)", i, len);
		CHECK(fx, rfd >= 0, "reply %zu came without a descriptor", i);
		/* The passed fd is the pipe's read end: it yields the bytes the test wrote. */
		rc = (int)read(rfd, &c, 1);
		close(rfd);
		CHECK(fx, rc == 1 && c == (char)('a' + i), "reply %zu: read from passed fd: %d",
		      i, rc);
	}

	/* One frame dribbled a byte at a time. */
	{
		uint8_t f[RGAPS_FRAME_HDR + 20];

		rgaps__frame_header(f, 20);
		fill(f + RGAPS_FRAME_HDR, 20, 99);
		for (size_t i = 0; i < sizeof(f); i++) {
			rc = send_all(fd, f + i, 1, -1);
			CHECK(fx, rc == 0, "dribble: %s", strerror(-rc));
			usleep(500);
		}
		rc = recv_frame(fd, in, sizeof(in), &len, &rfd);
		CHECK(fx, rc == 1 && len == 20 && memcmp(in, f + RGAPS_FRAME_HDR, 20) == 0,
		      "dribbled frame: %d", rc);
		CHECK(fx, rfd >= 0, "dribbled frame came without a descriptor");
		close(rfd);
	}

	client_passes_fds(fx, fd);

	/* API misuse checks run on the loop thread; the reply says they passed. */
	rc = send_frame(fd, "api", 3, -1);
	CHECK(fx, rc == 0, "send api: %s", strerror(-rc));
	rc = recv_frame(fd, in, sizeof(in), &len, NULL);
	CHECK(fx, rc == 1 && len == 6 && memcmp(in, "api-ok", 6) == 0, "api reply: %d", rc);
	rc = send_frame(fd, "groups", 6, -1);
	CHECK(fx, rc == 0, "send groups: %s", strerror(-rc));
	rc = recv_frame(fd, in, sizeof(in), &len, NULL);
	CHECK(fx, rc == 1 && len == 9 && memcmp(in, "groups-ok", 9) == 0, "groups reply: %d", rc);
	close(fd);
}

/*
 * A kernel that lets client fds in (pass_rights): a socket whose last close
 * would wait 60 s is closed off the loop, at once (its peer is reset), and the
 * loop answers meanwhile.
 */
static void client_passes_stuck_socket(struct fx *fx)
{
	struct stuck_tcp st;
	char in[64];
	size_t len;
	int fd, rfd, rc, q[2], pass[2];

	fd = client_connect(fx->path);
	CHECK(fx, fd >= 0, "connect: %s", strerror(-fd));
	rc = stuck_tcp_make(&st, 60);
	CHECK(fx, rc == 0, "a lingering socket: %s", strerror(-rc));
	CHECK(fx, pipe2(q, O_CLOEXEC) == 0, "pipe: %s", strerror(errno));
	if (fx->err[0])
		return;
	pass[0] = st.sender;
	pass[1] = q[1];
	rc = send_frame_fds(fd, "with-fd", 7, pass, 2);
	CHECK(fx, rc == 0, "send with fds: %s", strerror(-rc));
	stuck_tcp_close_fd(&st.sender); /* the server holds the last reference */
	close(q[1]);
	rc = recv_frame(fd, in, sizeof(in), &len, &rfd);
	CHECK(fx, rc == 1 && len == 7, "reply to with-fd: %d", rc);
	if (rc == 1)
		close(rfd);
	rc = send_frame(fd, "again", 5, -1);
	rc = rc ? rc : recv_frame(fd, in, sizeof(in), &len, &rfd);
	CHECK(fx, rc == 1 && len == 5, "the next reply: %d", rc);
	if (rc == 1)
		close(rfd);
	CHECK(fx, stuck_tcp_reset_within(&st, 10000),
	      "the lingering socket was not reset within 10 s (its linger: 60 s)");
	{
		struct pollfd pfd = { .fd = q[0], .events = POLLIN };
		char c = 1;

		rc = poll(&pfd, 1, 5000);
		CHECK(fx, rc == 1 && read(q[0], &c, 1) == 0, "the pipe we passed is still open");
	}
	close(q[0]);
	stuck_tcp_close_fd(&st.receiver);
	close(fd);
}

static void test_passed_fds_closed_off_loop(void **state)
{
	struct fx fx;

	fx_init(&fx);
	fx.opts.pass_rights = true;
	fx_start(&fx);
	fx.wait_closes = 1;
	fx_run(&fx, client_passes_stuck_socket);
	assert_int_equal(fx.closes, 1);
	assert_int_equal(fx.last_stats.fds_closed, 2);
}

/* As a kernel with SO_PASSRIGHTS runs it (fds refused at the client), and as one without. */
static void test_echo_and_fd(void **state)
{
	for (int pass = 0; pass < 2; pass++) {
		struct fx fx;

		fx_init(&fx);
		fx.opts.pass_rights = pass;
		assert_int_equal(write(fx.pipe[1], "abcde", 5), 5);
		fx_start(&fx);
		fx.wait_closes = 1;
		fx_run(&fx, client_echo);
		assert_int_equal(fx.closes, 1);
		/* The dribbled frame, api and groups; and the two that carried fds, where they
		 * came (one, then 20 of which the server closed what its buffer held, 16). */
		assert_true(!pass || !fx.kernel_refused_fds);
		assert_int_equal(fx.frames,
				 RGAPS_ARRAY_SIZE(echo_sizes) + (fx.kernel_refused_fds ? 3 : 5));
		assert_int_equal(fx.last_stats.fds_closed, fx.kernel_refused_fds ? 0 : 17);
		assert_int_equal(fx.last_pid, getpid());
		assert_int_equal(fx.last_uid, getuid());
	}
}

/* Expect one error reply naming code and errno, then EOF. */
static void expect_error_then_eof(struct fx *fx, int fd, const char *code, int err)
{
	char in[1024], want[64];
	size_t len;
	int rc;

	rc = recv_frame(fd, in, sizeof(in) - 1, &len, NULL);
	CHECK(fx, rc == 1, "%s: no error reply: %d (%s)", code, rc, strerror(-rc));
	in[len] = '\0';
	CHECK(fx, strstr(in, "\"ok\":false"), "%s: reply %s", code, in);
	snprintf(want, sizeof(want), "\"code\":\"%s\"", code);
	CHECK(fx, strstr(in, want), "%s: reply %s", code, in);
	snprintf(want, sizeof(want), "\"errno\":%d", err);
	CHECK(fx, strstr(in, want), "%s: reply %s", code, in);
	CHECK(fx, strstr(in, "\"message\":\""), "%s: reply %s", code, in);
	rc = recv_frame(fd, in, sizeof(in), &len, NULL);
	CHECK(fx, rc == 0, "%s: expected EOF after the error reply, got %d", code, rc);
}

static void client_protocol_errors(struct fx *fx)
{
	uint8_t hdr[RGAPS_FRAME_HDR];
	char in[64];
	size_t len;
	int fd, rfd, rc;

	/* Oversize header: the payload is never sent, nor waited for. */
	fd = client_connect(fx->path);
	CHECK(fx, fd >= 0, "connect: %s", strerror(-fd));
	hdr[0] = 1, hdr[1] = 0, hdr[2] = 1, hdr[3] = 0; /* RGAPS_FRAME_MAX + 1 */
	rc = send_all(fd, hdr, sizeof(hdr), -1);
	CHECK(fx, rc == 0, "send: %s", strerror(-rc));
	expect_error_then_eof(fx, fd, "too_large", EMSGSIZE);
	close(fd);
	if (fx->err[0])
		return;

	/* A good frame, then a zero-length one. */
	fd = client_connect(fx->path);
	CHECK(fx, fd >= 0, "connect: %s", strerror(-fd));
	rc = send_frame(fd, "hello", 5, -1);
	CHECK(fx, rc == 0, "send: %s", strerror(-rc));
	rc = recv_frame(fd, in, sizeof(in), &len, &rfd);
	CHECK(fx, rc == 1 && len == 5 && rfd >= 0, "hello reply: %d", rc);
	close(rfd);
	memset(hdr, 0, sizeof(hdr));
	rc = send_all(fd, hdr, sizeof(hdr), -1);
	CHECK(fx, rc == 0, "send: %s", strerror(-rc));
	expect_error_then_eof(fx, fd, "bad_frame", EBADMSG);
	close(fd);
	if (fx->err[0])
		return;

	/* close_after_send from on_frame: the reply, then EOF. */
	fd = client_connect(fx->path);
	CHECK(fx, fd >= 0, "connect: %s", strerror(-fd));
	rc = send_frame(fd, "bye", 3, -1);
	CHECK(fx, rc == 0, "send: %s", strerror(-rc));
	rc = recv_frame(fd, in, sizeof(in), &len, NULL);
	CHECK(fx, rc == 1 && len == 7 && memcmp(in, "bye-ack", 7) == 0, "bye reply: %d", rc);
	rc = recv_frame(fd, in, sizeof(in), &len, NULL);
	CHECK(fx, rc == 0, "expected EOF after bye-ack, got %d", rc);
	close(fd);
}

static void test_protocol_errors(void **state)
{
	struct fx fx;

	fx_init(&fx);
	fx_start(&fx);
	fx.wait_closes = 3;
	fx_run(&fx, client_protocol_errors);
	assert_int_equal(fx.closes, 3);
}

static void client_none(struct fx *fx)
{
}

static void client_echo_once(struct fx *fx)
{
	char in[16];
	size_t len;
	int fd, rfd, rc;

	fd = client_connect(fx->path);
	CHECK(fx, fd >= 0, "connect: %s", strerror(-fd));
	rc = send_frame(fd, "ping", 4, -1);
	if (rc == 0)
		rc = recv_frame(fd, in, sizeof(in), &len, &rfd);
	close(fd);
	CHECK(fx, rc == 1 && len == 4 && memcmp(in, "ping", 4) == 0, "ping: %d", rc);
	close(rfd);
}

static void test_second_start_busy(void **state)
{
	struct rgapsd_control *second = (struct rgapsd_control *)&second;
	struct fx fx;

	fx_init(&fx);
	fx_start(&fx);
	assert_int_equal(rgapsd_control_start(&fx.loop, fx.path, NULL, &test_ops, &fx, &second),
			 -EADDRINUSE);
	assert_ptr_equal(second, (struct rgapsd_control *)&second); /* untouched on failure */
	/* The first one's socket and lock are intact. */
	assert_true(path_exists(fx.path));
	assert_true(path_exists(fx.lock_path));
	fx_run(&fx, client_none);
	assert_int_equal(fx.closes, 0);
}

#define NCLIENTS 50

static void client_many(struct fx *fx)
{
	int fds[NCLIENTS];
	char in[64];
	size_t len;
	int rfd, rc;

	/* All open at once, half of them talk, then all hang up. */
	for (int i = 0; i < NCLIENTS; i++) {
		fds[i] = client_connect(fx->path);
		if (fds[i] < 0) {
			client_fail(fx, __LINE__, "connect %d: %s", i, strerror(-fds[i]));
			while (i--)
				close(fds[i]);
			return;
		}
	}
	for (int i = 1; i < NCLIENTS && !fx->err[0]; i += 2) {
		rc = send_frame(fds[i], "ping", 4, -1);
		if (rc == 0)
			rc = recv_frame(fds[i], in, sizeof(in), &len, &rfd);
		if (rc != 1 || len != 4 || memcmp(in, "ping", 4) != 0)
			client_fail(fx, __LINE__, "client %d: ping: %d", i, rc);
		else
			close(rfd);
	}
	for (int i = 0; i < NCLIENTS; i++)
		close(fds[i]);
}

static void test_many_clients(void **state)
{
	struct fx fx;

	fx_init(&fx);
	fx_start(&fx);
	fx.wait_closes = NCLIENTS;
	fx_run(&fx, client_many);
	assert_int_equal(fx.closes, NCLIENTS);
	assert_int_equal(fx.frames, NCLIENTS / 2);
}

static void client_stop_inside(struct fx *fx)
{
	int fds[3];
	char in[64];
	size_t len;
	int rfd, rc;

	for (int i = 0; i < 3; i++) {
		fds[i] = client_connect(fx->path);
		CHECK(fx, fds[i] >= 0, "connect: %s", strerror(-fds[i]));
		rc = send_frame(fds[i], "ping", 4, -1);
		CHECK(fx, rc == 0, "send: %s", strerror(-rc));
		rc = recv_frame(fds[i], in, sizeof(in), &len, &rfd);
		CHECK(fx, rc == 1, "ping %d: %d", i, rc);
		close(rfd);
	}
	/* The server stops from inside on_frame: every connection sees EOF. */
	rc = send_frame(fds[0], "stop", 4, -1);
	CHECK(fx, rc == 0, "send stop: %s", strerror(-rc));
	for (int i = 0; i < 3; i++) {
		rc = recv_frame(fds[i], in, sizeof(in), &len, NULL);
		CHECK(fx, rc == 0, "conn %d: expected EOF at stop, got %d", i, rc);
		close(fds[i]);
	}
	rc = client_connect(fx->path);
	if (rc >= 0)
		close(rc);
	CHECK(fx, rc == -ENOENT, "connect after stop: %d", rc);
}

static void test_stop_inside_handler(void **state)
{
	struct fx fx;

	fx_init(&fx);
	fx_start(&fx);
	fx.wait_closes = 3;
	fx_run(&fx, client_stop_inside);
	assert_int_equal(fx.closes, 3);
}

#define NBIG 40
#define BIG_LEN 60000u
#define SMALL_UNSENT (256u * 1024u)

/*
 * Send frames of BIG_LEN without blocking until the socket has not taken a byte for stall_ms
 * (the server stopped reading). Returns the frames wholly sent; *off_p: bytes of the next.
 */
static int send_until_stalled(int fd, const uint8_t *frame, unsigned max, int stall_ms,
			      size_t *off_p)
{
	size_t flen = RGAPS_FRAME_HDR + BIG_LEN;
	unsigned n = 0;

	*off_p = 0;
	while (n < max) {
		ssize_t k = send(fd, frame + *off_p, flen - *off_p, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == EAGAIN) {
			struct pollfd p = { .fd = fd, .events = POLLOUT };

			if (poll(&p, 1, stall_ms) == 0)
				break;
			continue;
		}
		if (k < 0)
			return -errno;
		*off_p += (size_t)k;
		if (*off_p == flen) {
			*off_p = 0;
			n++;
		}
	}
	return (int)n;
}

/*
 * Far more requests than the reply limit allows while the client is not reading: the server
 * stops reading (the client's sends stall), then serves everything once the client reads,
 * in pieces (short sends), each reply's fd with its first piece.
 */
static void client_backpressure(struct fx *fx)
{
	static uint8_t frame[RGAPS_FRAME_HDR + BIG_LEN], out[BIG_LEN], in[RGAPS_FRAME_MAX];
	unsigned sent, got = 0;
	size_t len, off;
	int fd, rfd, rc;
	struct stat st;

	fd = client_connect(fx->path);
	CHECK(fx, fd >= 0, "connect: %s", strerror(-fd));
	rgaps__frame_header(frame, BIG_LEN);
	fill(frame + RGAPS_FRAME_HDR, BIG_LEN, 7);
	/* A second without progress: the server stopped reading (not merely slow, even loaded). */
	rc = send_until_stalled(fd, frame, NBIG, 1000, &off);
	CHECK(fx, rc >= 0, "send: %s", strerror(-rc));
	sent = (unsigned)rc;
	/* 256 KiB of replies, one more frame, and the socket buffers: well short of 40 frames. */
	CHECK(fx, sent < NBIG, "all %u frames went in: the server never stopped reading", sent);
	/* Now read replies and send the rest as the server takes it: it resumes reading. */
	fill(out, BIG_LEN, 7);
	while (got < NBIG) {
		struct pollfd p = { .fd = fd, .events = POLLIN | (sent < NBIG ? POLLOUT : 0) };

		rc = poll(&p, 1, 5000);
		CHECK(fx, rc == 1, "no progress for 5 s (%u sent, %u replies)", sent, got);
		if (p.revents & POLLOUT) {
			ssize_t k = send(fd, frame + off, sizeof(frame) - off,
					 MSG_DONTWAIT | MSG_NOSIGNAL);

			CHECK(fx, k >= 0 || errno == EAGAIN || errno == EINTR, "send %u: %s",
			      sent, strerror(errno));
			off += k > 0 ? (size_t)k : 0;
			if (off == sizeof(frame)) {
				off = 0;
				sent++;
			}
		}
		if (!(p.revents & POLLIN))
			continue;
		rc = recv_frame(fd, in, sizeof(in), &len, &rfd);
		CHECK(fx, rc == 1, "reply %u: %d (%s)", got, rc, strerror(-rc));
		CHECK(fx, len == BIG_LEN && memcmp(in, out, len) == 0, "reply %u: wrong payload",
		      got);
		CHECK(fx, rfd >= 0, "reply %u: no descriptor", got);
		rc = fstat(rfd, &st);
		close(rfd);
		CHECK(fx, rc == 0 && S_ISFIFO(st.st_mode), "reply %u: not the pipe", got);
		got++;
	}
	close(fd);
}

static void test_backpressure(void **state)
{
	struct fx fx;

	fx_init(&fx);
	fx.opts.max_unsent = SMALL_UNSENT;
	fx_start(&fx);
	fx.wait_closes = 1;
	fx_run(&fx, client_backpressure);
	assert_int_equal(fx.frames, NBIG);
	assert_true(fx.last_stats.read_pauses > 0);
	assert_int_equal(fx.last_stats.paused, 0);
}

/* Connect and send frames until the server stops reading (stall_ms without progress). */
static int client_flood(struct fx *fx, int stall_ms)
{
	static uint8_t frame[RGAPS_FRAME_HDR + BIG_LEN];
	size_t off;
	int fd, rc;

	fd = client_connect(fx->path);
	if (fd < 0) {
		client_fail(fx, __LINE__, "connect: %s", strerror(-fd));
		return -1;
	}
	rgaps__frame_header(frame, BIG_LEN);
	fill(frame + RGAPS_FRAME_HDR, BIG_LEN, 1);
	rc = send_until_stalled(fd, frame, NBIG, stall_ms, &off);
	if (rc <= 0) {
		client_fail(fx, __LINE__, "send: %d", rc);
		close(fd);
		return -1;
	}
	return fd;
}

/* The client hangs up with replies still queued: they are dropped with their fds. */
static void client_hangup_with_backlog(struct fx *fx)
{
	int fd = client_flood(fx, 300);

	if (fd >= 0)
		close(fd);
}

static void test_hangup_with_backlog(void **state)
{
	struct fx fx;

	fx_init(&fx);
	fx.opts.max_unsent = SMALL_UNSENT;
	fx_start(&fx);
	fx.wait_closes = 1;
	fx_run(&fx, client_hangup_with_backlog);
	assert_int_equal(fx.closes, 1);
}

/* The client never reads its replies: after idle_timeout_ms without progress it is cut off. */
static void client_stalled(struct fx *fx)
{
	struct pollfd p;
	int fd, rc;

	fd = client_flood(fx, 500);
	if (fd < 0)
		return;
	p = (struct pollfd){ .fd = fd, .events = POLLRDHUP };
	rc = poll(&p, 1, 8000);
	close(fd);
	CHECK(fx, rc == 1 && (p.revents & (POLLHUP | POLLRDHUP)),
	      "the server kept a connection that reads nothing (poll %d, revents %#x)", rc,
	      (unsigned)p.revents);
}

static void test_stalled_reader(void **state)
{
	struct fx fx;

	fx_init(&fx);
	fx.opts.max_unsent = SMALL_UNSENT;
	fx.opts.idle_timeout_ms = 2000;
	fx_start(&fx);
	fx.wait_closes = 1;
	fx_run(&fx, client_stalled);
	assert_int_equal(fx.last_stats.stalled_closed, 1);
	assert_int_equal(fx.last_stats.idle_closed, 0);
}

/* Beyond max_conns: an error frame ("limit"), then EOF; a place that frees up is usable. */
static void client_conn_cap(struct fx *fx)
{
	char in[64];
	size_t len;
	int fds[3], fd, rfd, rc;

	for (int i = 0; i < 3; i++) {
		fds[i] = client_connect(fx->path);
		CHECK(fx, fds[i] >= 0, "connect %d: %s", i, strerror(-fds[i]));
		/* A reply proves the server accepted it before the next one comes. */
		rc = send_frame(fds[i], "ping", 4, -1);
		if (rc == 0)
			rc = recv_frame(fds[i], in, sizeof(in), &len, &rfd);
		CHECK(fx, rc == 1, "ping %d: %d", i, rc);
		close(rfd);
	}
	fd = client_connect(fx->path);
	CHECK(fx, fd >= 0, "connect 4: %s", strerror(-fd));
	expect_error_then_eof(fx, fd, "limit", ENFILE);
	close(fd);
	close(fds[0]);
	/* The server sees the hang-up asynchronously: retry for a while. */
	for (int i = 0; i < 100; i++) {
		fd = client_connect(fx->path);
		CHECK(fx, fd >= 0, "connect 5: %s", strerror(-fd));
		rc = send_frame(fd, "ping", 4, -1);
		if (rc == 0)
			rc = recv_frame(fd, in, sizeof(in), &len, &rfd);
		if (rc == 1 && len == 4 && memcmp(in, "ping", 4) == 0)
			break;
		close(fd);
		fd = -1;
		usleep(20 * 1000);
	}
	CHECK(fx, fd >= 0, "no connection accepted after one closed");
	close(rfd);
	close(fd);
	close(fds[1]);
	close(fds[2]);
}

static void test_conn_cap(void **state)
{
	struct fx fx;

	fx_init(&fx);
	fx.opts.max_conns = 3;
	fx_start(&fx);
	fx.wait_closes = 4;
	fx_run(&fx, client_conn_cap);
	assert_true(fx.last_stats.refused_max >= 1);
	assert_int_equal(fx.last_stats.refused_user, 0); /* root is exempt from the per-user cap */
}

/* Unattached and silent: closed with a "timeout" error. Attached: kept however long. */
static void client_idle_timeout(struct fx *fx)
{
	char in[64];
	size_t len;
	int idle, held, rfd, rc;

	idle = client_connect(fx->path);
	CHECK(fx, idle >= 0, "connect: %s", strerror(-idle));
	held = client_connect(fx->path);
	CHECK(fx, held >= 0, "connect: %s", strerror(-held));
	rc = send_frame(held, "attach", 6, -1);
	if (rc == 0)
		rc = recv_frame(held, in, sizeof(in), &len, NULL);
	CHECK(fx, rc == 1 && len == 8, "attach: %d", rc);
	expect_error_then_eof(fx, idle, "timeout", ETIMEDOUT);
	close(idle);
	if (fx->err[0])
		return;
	usleep(600 * 1000); /* three idle timeouts */
	rc = send_frame(held, "ping", 4, -1);
	if (rc == 0)
		rc = recv_frame(held, in, sizeof(in), &len, &rfd);
	CHECK(fx, rc == 1 && len == 4, "the attached connection was closed: %d", rc);
	close(rfd);
	close(held);
}

static void test_idle_timeout(void **state)
{
	struct fx fx;

	fx_init(&fx);
	fx.opts.idle_timeout_ms = 200;
	fx_start(&fx);
	fx.wait_closes = 2;
	fx_run(&fx, client_idle_timeout);
	assert_int_equal(fx.last_stats.idle_closed, 1);
}

/* Half a header, and a header with part of its payload: both cut off at the deadline. */
static void client_frame_timeout(struct fx *fx)
{
	uint8_t part[RGAPS_FRAME_HDR + 10];
	int a, b, rc;

	a = client_connect(fx->path);
	CHECK(fx, a >= 0, "connect: %s", strerror(-a));
	b = client_connect(fx->path);
	CHECK(fx, b >= 0, "connect: %s", strerror(-b));
	rgaps__frame_header(part, 100);
	memset(part + RGAPS_FRAME_HDR, 'x', 10);
	rc = send_all(a, part, 2, -1);
	CHECK(fx, rc == 0, "send: %s", strerror(-rc));
	rc = send_all(b, part, sizeof(part), -1);
	CHECK(fx, rc == 0, "send: %s", strerror(-rc));
	expect_error_then_eof(fx, a, "timeout", ETIMEDOUT);
	expect_error_then_eof(fx, b, "timeout", ETIMEDOUT);
	close(a);
	close(b);
}

static void on_poll_frame_bytes(uv_timer_t *t)
{
	struct fx *fx = t->data;
	struct rgapsd_control_stats st;

	if (!fx->ctl) {
		uv_close((uv_handle_t *)t, NULL);
		return;
	}
	rgapsd_control_get_stats(fx->ctl, &st);
	fx->max_frame_bytes = RGAPS_MAX(fx->max_frame_bytes, st.frame_bytes);
}

static void test_frame_timeout(void **state)
{
	uv_timer_t poller;
	struct fx fx;

	fx_init(&fx);
	fx.opts.frame_timeout_ms = 200;
	fx_start(&fx);
	fx.wait_closes = 2;
	assert_int_equal(uv_timer_init(&fx.loop, &poller), 0);
	poller.data = &fx;
	assert_int_equal(uv_timer_start(&poller, on_poll_frame_bytes, 5, 5), 0);
	fx_run(&fx, client_frame_timeout);
	assert_int_equal(fx.last_stats.frame_timeouts, 2);
	/* The buffer is the announced frame's size (not the 64 KiB limit). */
	assert_int_equal(fx.max_frame_bytes, 100);
}

/* Stop while clients are connected and idle: on_close for each, and they see EOF. */
static void client_idle(struct fx *fx)
{
	int fds[4];
	char in[16];
	size_t len;
	int rc;

	for (int i = 0; i < 4; i++) {
		fds[i] = client_connect(fx->path);
		CHECK(fx, fds[i] >= 0, "connect: %s", strerror(-fds[i]));
	}
	/* The main test stops the control once all four are accepted. */
	for (int i = 0; i < 4; i++) {
		rc = recv_frame(fds[i], in, sizeof(in), &len, NULL);
		CHECK(fx, rc == 0, "conn %d: expected EOF at stop, got %d", i, rc);
		close(fds[i]);
	}
}

static void on_poll_nconns(uv_timer_t *t)
{
	struct fx *fx = t->data;

	if (fx->ctl && rgapsd_control_nconns(fx->ctl) == 4) {
		fx_stop_ctl(fx);
		uv_close((uv_handle_t *)t, NULL);
	}
}

static void test_stop_with_idle_clients(void **state)
{
	uv_timer_t poller;
	struct fx fx;

	fx_init(&fx);
	fx_start(&fx);
	fx.wait_closes = 4;
	assert_int_equal(uv_timer_init(&fx.loop, &poller), 0);
	poller.data = &fx;
	assert_int_equal(uv_timer_start(&poller, on_poll_nconns, 1, 1), 0);
	fx_run(&fx, client_idle);
	assert_int_equal(fx.closes, 4);
}

static void test_start_errors(void **state)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct rgapsd_control *ctl = NULL;
	char longpath[200], sub[96], buf[8];
	struct fx fx;
	int fd;

	fx_init(&fx);
	/* Too long for sun_path, or empty. */
	memset(longpath, 'a', sizeof(longpath) - 1);
	longpath[0] = '/';
	longpath[sizeof(longpath) - 1] = '\0';
	assert_int_equal(rgapsd_control_start(&fx.loop, longpath, NULL, &test_ops, &fx, &ctl),
			 -ENAMETOOLONG);
	assert_int_equal(rgapsd_control_start(&fx.loop, "", NULL, &test_ops, &fx, &ctl), -EINVAL);
	assert_null(ctl);

	/* Something that is not a socket at the path is not ours to remove. */
	snprintf(sub, sizeof(sub), "%s/run", fx.dir);
	assert_int_equal(mkdir(sub, 0755), 0);
	fd = open(fx.path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "data", 4), 4);
	close(fd);
	assert_int_equal(rgapsd_control_start(&fx.loop, fx.path, NULL, &test_ops, &fx, &ctl), -EEXIST);
	assert_null(ctl);
	fd = open(fx.path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, buf, sizeof(buf)), 4);
	close(fd);
	assert_false(path_exists(fx.lock_path)); /* nothing left behind */
	assert_int_equal(unlink(fx.path), 0);

	/* A stale socket (its daemon died) is replaced. */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", fx.path);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	assert_true(path_exists(fx.path));
	fx_start(&fx);
	fx.wait_closes = 1;
	fx_run(&fx, client_echo_once);
	assert_int_equal(fx.closes, 1);
}

/* socket_mode 0600 and an explicit group: the socket and the directory made for it follow. */
static void test_socket_mode(void **state)
{
	char sub[96];
	struct stat st;
	struct fx fx;

	fx_init(&fx);
	fx.opts.socket_mode = 0600;
	fx.opts.set_group = true;
	fx.opts.group = getgid();
	fx_start(&fx); /* asserts the socket's mode */
	snprintf(sub, sizeof(sub), "%s/run", fx.dir);
	assert_int_equal(stat(sub, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	assert_int_equal(st.st_gid, getgid());
	assert_int_equal(stat(fx.path, &st), 0);
	assert_int_equal(st.st_gid, getgid());
	fx.wait_closes = 1;
	fx_run(&fx, client_echo_once);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_echo_and_fd),
		cmocka_unit_test(test_protocol_errors),
		cmocka_unit_test(test_second_start_busy),
		cmocka_unit_test(test_many_clients),
		cmocka_unit_test(test_stop_inside_handler),
		cmocka_unit_test(test_backpressure),
		cmocka_unit_test(test_hangup_with_backlog),
		cmocka_unit_test(test_stalled_reader),
		cmocka_unit_test(test_conn_cap),
		cmocka_unit_test(test_idle_timeout),
		cmocka_unit_test(test_frame_timeout),
		cmocka_unit_test(test_stop_with_idle_clients),
		cmocka_unit_test(test_start_errors),
		cmocka_unit_test(test_socket_mode),
		cmocka_unit_test(test_passed_fds_closed_off_loop),
	};
	const char *lvl = getenv("RGAPS_LOG_LEVEL");
	uv_loop_t warm;

	/* libuv opens a process-wide pipe on its first loop: not a leak of the code under test. */
	if (uv_loop_init(&warm) == 0)
		uv_loop_close(&warm);

	rgaps__log_level = lvl ? rgaps__log_level_parse(lvl) : RGAPS_LOG_WARN;
	if (rgaps__log_level < 0)
		rgaps__log_level = RGAPS_LOG_WARN;
	return cmocka_run_group_tests_name("control", tests, NULL, NULL);
}
