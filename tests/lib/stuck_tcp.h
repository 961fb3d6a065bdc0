/*
 * A file whose last close waits (tests of docs/SECURITY.md, "File descriptors"):
 * a TCP connection on loopback whose receiver never reads, with SO_LINGER set
 * and unsent bytes stuck behind its zero window. close() of the sending end
 * waits out the linger time; an abortive close (SO_LINGER {on, 0}) ends at
 * once and resets the receiving end.
 */
#ifndef RGAPS_TESTS_STUCK_TCP_H
#define RGAPS_TESTS_STUCK_TCP_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct stuck_tcp {
	int sender;   /* close() of this waits for linger_s */
	int receiver; /* the other end, never read: keep it open while the close should wait */
};

static inline void stuck_tcp_close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* 0, or -errno. The sender is left blocking, its send buffer full. */
static inline int stuck_tcp_make(struct stuck_tcp *st, int linger_s)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	struct linger lg = { .l_onoff = 1, .l_linger = linger_s };
	int small = 4096, lfd, e = 0, fl;
	static char junk[65536];

	st->sender = st->receiver = -1;
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		return -errno;
	/* Small buffers on both sides: the window closes after a few KiB. */
	if (setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) < 0 ||
	    bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 1) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0)
		goto fail;
	st->sender = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (st->sender < 0 ||
	    setsockopt(st->sender, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) < 0 ||
	    connect(st->sender, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto fail;
	st->receiver = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (st->receiver < 0)
		goto fail;
	stuck_tcp_close_fd(&lfd);
	/* Fill the send buffer until nothing more goes: the rest waits for a window. */
	fl = fcntl(st->sender, F_GETFL);
	if (fl < 0 || fcntl(st->sender, F_SETFL, fl | O_NONBLOCK) < 0)
		goto fail;
	for (int i = 0; i < 10000; i++) {
		ssize_t n = send(st->sender, junk, sizeof(junk), MSG_NOSIGNAL);

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n < 0)
			goto fail;
	}
	if (fcntl(st->sender, F_SETFL, fl) < 0 ||
	    setsockopt(st->sender, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
		goto fail;
	return 0;
fail:
	e = -errno;
	stuck_tcp_close_fd(&lfd);
	stuck_tcp_close_fd(&st->sender);
	stuck_tcp_close_fd(&st->receiver);
	return e ? e : -EIO;
}

/*
 * Whether the receiving end was reset (the sender's close was abortive)
 * within timeout_ms: its queued bytes are read and thrown away until the
 * reset (ECONNRESET) or an orderly end (0: the sender's close lingered and
 * sent everything, which it only does once the window opens, i.e. here).
 */
static inline bool stuck_tcp_reset_within(struct stuck_tcp *st, int timeout_ms)
{
	static char sink[65536];

	for (int waited = 0; waited < timeout_ms; waited += 10) {
		struct pollfd p = { .fd = st->receiver, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 10) <= 0)
			continue;
		n = recv(st->receiver, sink, sizeof(sink), MSG_DONTWAIT);
		if (n < 0 && errno == ECONNRESET)
			return true;
		if (n == 0)
			return false;
	}
	return false;
}

#endif
