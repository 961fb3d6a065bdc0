/*
 * Helper of the limit tests: the floods a hostile local user can
 * aim at rgapsd's control socket, each bounded in count and time, and a
 * probe that times one legitimate request. Speaks the wire protocol itself
 * (docs/PROTOCOL.md), so it can misbehave where librgaps would not.
 *
 *   conns N HOLD_S      open N connections, say how many the daemon refused and
 *                       with which code, hold the rest HOLD_S s, and count those
 *                       the daemon closed meanwhile (idle timeout)
 *   partial N WAIT_S    N connections each sending an unfinished frame (half a
 *                       header, or a header and part of its payload); count those
 *                       the daemon cut off with "timeout" within WAIT_S s
 *   replies N WAIT_S    one connection sends up to N stats requests and reads no
 *                       reply; say how many went in before the daemon stopped
 *                       reading, and whether it closed the connection in WAIT_S s
 *   topics PREFIX N     attach to (and detach from) PREFIX0 .. PREFIX<N-1>, each
 *                       creating a topic; count created and refused, by code
 *   probe MAX_MS        one `topics` request; exit 1 unless answered within MAX_MS
 *   watch SECS EVERY_MS a `topics` request every EVERY_MS for SECS s: how long the
 *                       daemon's loop took to answer (p50, p99, max), a measure of its
 *                       stalls (docs/BENCHMARKS.md, keepalive under load)
 *   notify PATH SECS    receive datagrams on PATH (a $NOTIFY_SOCKET) for SECS s,
 *                       or until STOPPING=1; print each, lines joined by '|'
 *
 * The socket is $RGAPS_SOCKET. Each prints one summary line per result, which
 * the scripts check; exit 2 on a usage or setup error.
 */
#include <errno.h>
#include <stddef.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../../src/common/frame.h"

#define MAX_CONNS 20000
#define IO_TIMEOUT_MS 5000

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int dial(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *path = getenv("RGAPS_SOCKET");
	int fd;

	if (!path) {
		fprintf(stderr, "RGAPS_SOCKET is not set\n");
		exit(2);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

static int wait_fd(int fd, short ev, int ms)
{
	struct pollfd p = { .fd = fd, .events = ev };
	int rc;

	do
		rc = poll(&p, 1, ms);
	while (rc < 0 && errno == EINTR);
	return rc > 0 ? p.revents : 0;
}

static int send_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			if (!wait_fd(fd, POLLOUT, IO_TIMEOUT_MS))
				return -ETIMEDOUT;
			continue;
		}
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int send_frame(int fd, const char *payload)
{
	uint8_t hdr[RGAPS_FRAME_HDR];
	int rc;

	rgaps__frame_header(hdr, (uint32_t)strlen(payload));
	rc = send_all(fd, hdr, sizeof(hdr));
	return rc ? rc : send_all(fd, payload, strlen(payload));
}

/* Exactly n bytes; descriptors that come along are closed. 1, 0 at EOF, or -errno. */
static int recv_exact(int fd, void *buf, size_t n, int ms)
{
	size_t off = 0;

	while (off < n) {
		union {
			struct cmsghdr align;
			char b[CMSG_SPACE(sizeof(int) * 8)];
		} cm;
		struct iovec iov = { .iov_base = (char *)buf + off, .iov_len = n - off };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
				      .msg_controllen = sizeof(cm.b) };
		ssize_t got;

		if (!wait_fd(fd, POLLIN, ms))
			return -ETIMEDOUT;
		got = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (got < 0)
			return -errno;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
			size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			for (size_t i = 0; c->cmsg_type == SCM_RIGHTS && i < k; i++) {
				int rfd;

				memcpy(&rfd, CMSG_DATA(c) + i * sizeof(int), sizeof(rfd));
				close(rfd);
			}
		}
		if (got == 0)
			return off ? -EPIPE : 0;
		off += (size_t)got;
	}
	return 1;
}

/* One reply into buf (NUL-terminated): 1, 0 at EOF, or -errno. */
static int recv_reply(int fd, char *buf, size_t cap, int ms)
{
	uint8_t hdr[RGAPS_FRAME_HDR];
	uint32_t len;
	int rc = recv_exact(fd, hdr, sizeof(hdr), ms);

	if (rc <= 0)
		return rc;
	if (rgaps__frame_length(hdr, &len) || len >= cap)
		return -EMSGSIZE;
	rc = recv_exact(fd, buf, len, ms);
	if (rc <= 0)
		return rc ? rc : -EPIPE;
	buf[len] = '\0';
	return 1;
}

/* The "code" of an error reply ("" for ok), in out. */
static const char *reply_code(const char *r, char *out, size_t len)
{
	const char *c = strstr(r, "\"code\":\"");

	out[0] = '\0';
	if (c) {
		c += 8;
		snprintf(out, len, "%.*s", (int)strcspn(c, "\""), c);
	}
	return out;
}

/* ---- conns --------------------------------------------------------------------------- */

/*
 * Read what the daemon said on each readable connection of fds and close it: a refusal
 * ("quota", "limit") or a close for idleness ("timeout"). Returns how many were readable.
 */
static int conns_scan(int *fds, int n, int *quota, int *limit, int *idle, int *other)
{
	static struct pollfd p[MAX_CONNS];
	char buf[1024], code[32];
	int ready = 0;

	for (int i = 0; i < n; i++)
		p[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
	if (poll(p, (nfds_t)n, 0) <= 0)
		return 0;
	for (int i = 0; i < n; i++) {
		if (fds[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		ready++;
		if (recv_reply(fds[i], buf, sizeof(buf), 1000) == 1) {
			reply_code(buf, code, sizeof(code));
			if (strcmp(code, "quota") == 0)
				(*quota)++;
			else if (strcmp(code, "limit") == 0)
				(*limit)++;
			else if (strcmp(code, "timeout") == 0)
				(*idle)++;
			else
				(*other)++;
		} else {
			(*other)++;
		}
		close(fds[i]);
		fds[i] = -1;
	}
	return ready;
}

static int cmd_conns(int n, double hold)
{
	static int fds[MAX_CONNS];
	int quota = 0, limit = 0, idle = 0, other = 0, failed = 0, open;
	double t0;

	if (n < 1 || n > MAX_CONNS)
		return 2;
	for (int i = 0; i < n; i++) {
		fds[i] = dial();
		if (fds[i] < 0)
			failed++;
	}
	/* A refused connection gets its error frame at once: gather them until none come. */
	for (int quiet = 0, rounds = 0; quiet < 3 && rounds < 100; rounds++) {
		int before = quota + limit;

		usleep(100 * 1000);
		conns_scan(fds, n, &quota, &limit, &idle, &other);
		quiet = quota + limit == before ? quiet + 1 : 0;
	}
	open = n - quota - limit - other - failed;
	printf("conns: asked %d open %d refused_quota %d refused_limit %d other %d failed %d\n",
	       n, open, quota, limit, other, failed);
	fflush(stdout);
	/* Hold the rest; count the ones the daemon closes (idle timeout). */
	t0 = now_s();
	while (now_s() - t0 < hold && idle + other < open) {
		conns_scan(fds, n, &quota, &limit, &idle, &other);
		usleep(100 * 1000);
	}
	printf("conns: closed_by_daemon %d of %d (timeout %d) after %.1f s\n", idle + other, open,
	       idle, now_s() - t0);
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return 0;
}

/* ---- partial ------------------------------------------------------------------------- */

static int cmd_partial(int n, double wait)
{
	static int fds[MAX_CONNS];
	uint8_t part[RGAPS_FRAME_HDR + 16];
	int timed_out = 0, other = 0, failed = 0;
	char buf[1024], code[32];
	double t0 = now_s(), last = 0;

	if (n < 1 || n > MAX_CONNS)
		return 2;
	rgaps__frame_header(part, 60000);
	memset(part + RGAPS_FRAME_HDR, '{', 16);
	for (int i = 0; i < n; i++) {
		fds[i] = dial();
		/* Half a header, or a header announcing 60000 bytes and 16 of them. */
		if (fds[i] < 0 || send_all(fds[i], part, i % 2 ? sizeof(part) : 2)) {
			failed++;
			if (fds[i] >= 0)
				close(fds[i]);
			fds[i] = -1;
		}
	}
	while (now_s() - t0 < wait && timed_out + other + failed < n) {
		for (int i = 0; i < n; i++) {
			if (fds[i] < 0 || !(wait_fd(fds[i], POLLIN, 0) & (POLLIN | POLLHUP)))
				continue;
			if (recv_reply(fds[i], buf, sizeof(buf), 1000) == 1 &&
			    strcmp(reply_code(buf, code, sizeof(code)), "timeout") == 0)
				timed_out++;
			else
				other++;
			last = now_s() - t0;
			close(fds[i]);
			fds[i] = -1;
		}
		usleep(50 * 1000);
	}
	printf("partial: asked %d timed_out %d other %d failed %d last_closed_after %.1f s\n", n,
	       timed_out, other, failed, last);
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return 0;
}

/* ---- replies ------------------------------------------------------------------------- */

static int cmd_replies(int n, double wait)
{
	static const char req[] = "{\"type\":\"stats\"}";
	uint8_t frame[RGAPS_FRAME_HDR + sizeof(req) - 1];
	size_t off = 0;
	int fd = dial(), sent = 0, ev;
	double t0;

	if (fd < 0) {
		fprintf(stderr, "replies: connect: %s\n", strerror(-fd));
		return 2;
	}
	rgaps__frame_header(frame, sizeof(req) - 1);
	memcpy(frame + RGAPS_FRAME_HDR, req, sizeof(req) - 1);
	/* Send until the socket takes nothing for 2 s: the daemon stopped reading. */
	while (sent < n) {
		ssize_t k = send(fd, frame + off, sizeof(frame) - off, MSG_DONTWAIT | MSG_NOSIGNAL);

		if (k < 0 && errno == EAGAIN) {
			if (!wait_fd(fd, POLLOUT, 2000))
				break;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			printf("replies: send failed after %d requests: %s\n", sent, strerror(errno));
			close(fd);
			return 0;
		}
		off += (size_t)k;
		if (off == sizeof(frame)) {
			off = 0;
			sent++;
		}
	}
	printf("replies: sent %d of %d requests before the daemon stopped reading\n", sent, n);
	fflush(stdout);
	t0 = now_s();
	ev = wait_fd(fd, POLLRDHUP, (int)(wait * 1000));
	if (ev & (POLLRDHUP | POLLHUP))
		printf("replies: closed_by_daemon after %.1f s\n", now_s() - t0);
	else
		printf("replies: still open after %.1f s\n", now_s() - t0);
	close(fd);
	return 0;
}

/* ---- topics -------------------------------------------------------------------------- */

static int cmd_topics(const char *prefix, int n)
{
	char buf[4096], req[256], code[32], first_refusal[512] = "";
	int fd = dial(), created = 0, refused = 0, rc;
	int quota = 0, limit = 0, denied = 0, not_found = 0;
	double t0 = now_s();

	if (fd < 0) {
		fprintf(stderr, "topics: connect: %s\n", strerror(-fd));
		return 2;
	}
	if (send_frame(fd, "{\"type\":\"hello\",\"version\":2}") ||
	    recv_reply(fd, buf, sizeof(buf), IO_TIMEOUT_MS) != 1 || !strstr(buf, "\"ok\":true")) {
		fprintf(stderr, "topics: hello failed\n");
		return 2;
	}
	for (int i = 0; i < n; i++) {
		snprintf(req, sizeof(req), "{\"type\":\"attach\",\"topic\":\"%s%d\",\"role\":\"sub\"}",
			 prefix, i);
		rc = send_frame(fd, req);
		if (rc == 0)
			rc = recv_reply(fd, buf, sizeof(buf), IO_TIMEOUT_MS);
		if (rc != 1) {
			printf("topics: connection lost at %d: %s\n", i, rc ? strerror(-rc) : "EOF");
			break;
		}
		if (strstr(buf, "\"ok\":true")) {
			created++;
			rc = send_frame(fd, "{\"type\":\"detach\"}");
			if (rc == 0)
				rc = recv_reply(fd, buf, sizeof(buf), IO_TIMEOUT_MS);
			if (rc != 1 || !strstr(buf, "\"ok\":true")) {
				printf("topics: detach failed at %d\n", i);
				break;
			}
			continue;
		}
		refused++;
		reply_code(buf, code, sizeof(code));
		quota += strcmp(code, "quota") == 0;
		limit += strcmp(code, "limit") == 0;
		denied += strcmp(code, "denied") == 0;
		not_found += strcmp(code, "not_found") == 0;
		if (!first_refusal[0])
			snprintf(first_refusal, sizeof(first_refusal), "%s", buf);
	}
	printf("topics: asked %d created %d refused %d quota %d limit %d denied %d not_found %d "
	       "in %.1f s\n",
	       n, created, refused, quota, limit, denied, not_found, now_s() - t0);
	if (first_refusal[0])
		printf("topics: first refusal: %s\n", first_refusal);
	close(fd);
	return 0;
}

/* ---- probe --------------------------------------------------------------------------- */

static int cmd_probe(int max_ms)
{
	double t0 = now_s(), ms;
	char buf[RGAPS_FRAME_MAX + 1];
	int fd = dial(), rc;

	if (fd < 0) {
		printf("probe: connect: %s\n", strerror(-fd));
		return 1;
	}
	rc = send_frame(fd, "{\"type\":\"topics\",\"id\":\"probe\"}");
	if (rc == 0)
		rc = recv_reply(fd, buf, sizeof(buf), IO_TIMEOUT_MS);
	ms = (now_s() - t0) * 1000;
	close(fd);
	if (rc != 1 || !strstr(buf, "\"ok\":true")) {
		printf("probe: no good reply after %.0f ms (%s)\n", ms,
		       rc == 1 ? buf : rc ? strerror(-rc) : "EOF");
		return 1;
	}
	printf("probe: served in %.1f ms\n", ms);
	return ms <= max_ms ? 0 : 1;
}

/* ---- watch -------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int cmd_watch(double secs, int every_ms)
{
	size_t n = 0, cap = (size_t)(secs * 1000 / (every_ms > 0 ? every_ms : 1)) + 16;
	double *ms = calloc(cap, sizeof(*ms)), t0 = now_s();
	char buf[RGAPS_FRAME_MAX + 1];
	int failed = 0;

	if (!ms || every_ms < 1)
		return 2;
	while (now_s() - t0 < secs && n < cap) {
		double t1 = now_s();
		int fd = dial(), rc = fd;

		if (fd >= 0) {
			rc = send_frame(fd, "{\"type\":\"topics\"}");
			if (rc == 0)
				rc = recv_reply(fd, buf, sizeof(buf), 30000);
			close(fd);
		}
		if (rc == 1)
			ms[n++] = (now_s() - t1) * 1000;
		else
			failed++;
		usleep((useconds_t)every_ms * 1000);
	}
	qsort(ms, n, sizeof(*ms), cmp_double);
	if (n)
		printf("watch: %zu requests, p50 %.1f ms, p99 %.1f ms, max %.1f ms, failed %d\n", n,
		       ms[n / 2], ms[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1], ms[n - 1], failed);
	else
		printf("watch: no request answered, failed %d\n", failed);
	free(ms);
	return n ? 0 : 1;
}

/* ---- notify -------------------------------------------------------------------------- */

static int cmd_notify(const char *path, double secs)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	socklen_t salen = sizeof(sa);
	double t0 = now_s();
	char buf[4096];

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (path[0] == '@') { /* the abstract namespace, as systemd may name it */
		sa.sun_path[0] = '\0';
		salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
	} else {
		unlink(path);
	}
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, salen) < 0) {
		perror("notify: bind");
		return 2;
	}
	printf("notify: listening\n");
	fflush(stdout);
	while (now_s() - t0 < secs) {
		ssize_t n;

		if (!wait_fd(fd, POLLIN, 100))
			continue;
		n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		for (ssize_t i = 0; i < n; i++)
			if (buf[i] == '\n')
				buf[i] = '|';
		printf("notify: %.3f %s\n", now_s() - t0, buf);
		fflush(stdout);
		if (strstr(buf, "STOPPING=1"))
			break;
	}
	close(fd);
	if (path[0] != '@')
		unlink(path);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && strcmp(argv[1], "conns") == 0)
		return cmd_conns(atoi(argv[2]), atof(argv[3]));
	if (argc == 4 && strcmp(argv[1], "partial") == 0)
		return cmd_partial(atoi(argv[2]), atof(argv[3]));
	if (argc == 4 && strcmp(argv[1], "replies") == 0)
		return cmd_replies(atoi(argv[2]), atof(argv[3]));
	if (argc == 4 && strcmp(argv[1], "topics") == 0)
		return cmd_topics(argv[2], atoi(argv[3]));
	if (argc == 3 && strcmp(argv[1], "probe") == 0)
		return cmd_probe(atoi(argv[2]));
	if (argc == 4 && strcmp(argv[1], "watch") == 0)
		return cmd_watch(atof(argv[2]), atoi(argv[3]));
	if (argc == 4 && strcmp(argv[1], "notify") == 0)
		return cmd_notify(argv[2], atof(argv[3]));
	fprintf(stderr, "usage: itest-flood conns N HOLD_S | partial N WAIT_S | replies N WAIT_S |\n"
			"       topics PREFIX N | probe MAX_MS | watch SECS EVERY_MS | notify PATH SECS\n");
	return 2;
}
