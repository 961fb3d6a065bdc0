/*
 * itest-peer-flood: a network neighbour that fills rgapsd's peer ports with
 * connections that never send a byte (peer_flood.sh).
 *
 *   itest-peer-flood SECONDS SOURCES PER_SOURCE PORT [PORT...]
 *
 * For every PORT on 127.0.0.1 it holds PER_SOURCE connections from each of the
 * source addresses 127.0.0.2 .. 127.0.0.(SOURCES+1), and opens a new one in
 * place of every connection the daemon closes (every 100 ms), for SECONDS or
 * until SIGINT or SIGTERM. It prints "flood: started" once the first round is
 * out, and at the end what it did: "flood: connects N closed_by_daemon N".
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 8192

struct slot {
	int fd;
	uint16_t port;
	unsigned src;
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A non-blocking connect from 127.0.0.src to 127.0.0.1:port: the fd, or -1. */
static int open_from(uint16_t port, unsigned src)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_in from = { .sin_family = AF_INET,
				    .sin_addr.s_addr = htonl(0x7f000000u | src) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&from, sizeof(from)) < 0 ||
	    (connect(fd, (struct sockaddr *)&to, sizeof(to)) < 0 && errno != EINPROGRESS)) {
		close(fd);
		return -1;
	}
	return fd;
}

int main(int argc, char **argv)
{
	static struct slot s[MAX_CONNS];
	static struct pollfd pfd[MAX_CONNS];
	unsigned long long connects = 0, closed = 0;
	struct rlimit rl;
	double end, next_round = 0;
	unsigned sources, per, n = 0;
	bool announced = false;
	char junk[4096];

	if (argc < 5) {
		fprintf(stderr, "usage: %s SECONDS SOURCES PER_SOURCE PORT [PORT...]\n", argv[0]);
		return 2;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	end = now_s() + atof(argv[1]);
	sources = (unsigned)atoi(argv[2]);
	per = (unsigned)atoi(argv[3]);
	if (sources < 1 || sources > 250 || per < 1 ||
	    (unsigned long)sources * per * (unsigned)(argc - 4) > MAX_CONNS) {
		fprintf(stderr, "flood: at most %d connections, sources 1..250\n", MAX_CONNS);
		return 2;
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	for (int a = 4; a < argc; a++)
		for (unsigned src = 0; src < sources; src++)
			for (unsigned i = 0; i < per; i++)
				s[n++] = (struct slot){ .fd = -1, .port = (uint16_t)atoi(argv[a]),
							.src = 2 + src };
	while (!stop && now_s() < end) {
		if (now_s() >= next_round) {
			for (unsigned i = 0; i < n; i++) {
				if (s[i].fd >= 0)
					continue;
				s[i].fd = open_from(s[i].port, s[i].src);
				connects += s[i].fd >= 0;
			}
			next_round = now_s() + 0.1;
			if (!announced) {
				printf("flood: started, %u connections\n", n);
				fflush(stdout);
				announced = true;
			}
		}
		for (unsigned i = 0; i < n; i++)
			pfd[i] = (struct pollfd){ .fd = s[i].fd, .events = POLLIN };
		if (poll(pfd, n, 20) < 0 && errno != EINTR)
			break;
		for (unsigned i = 0; i < n; i++) {
			ssize_t r;

			if (s[i].fd < 0 || !(pfd[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			/* Whatever the daemon says (a HELLO, an ERROR) is read and ignored; EOF or
			 * an error means it closed us: a new connection takes the place. */
			r = recv(s[i].fd, junk, sizeof(junk), MSG_DONTWAIT);
			if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR)))
				continue;
			close(s[i].fd);
			s[i].fd = -1;
			closed++;
		}
	}
	for (unsigned i = 0; i < n; i++)
		if (s[i].fd >= 0)
			close(s[i].fd);
	printf("flood: connects %llu closed_by_daemon %llu\n", connects, closed);
	return 0;
}
