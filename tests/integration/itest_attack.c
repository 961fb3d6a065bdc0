/*
 * The attacker of the tests of holds, fences and descriptors (attack_holds.sh,
 * attack_stuck_fence.sh, attack_fds.sh; docs/SECURITY.md), run as an unprivileged
 * user against rgapsd running as another:
 *   forgeholds TOPIC SECONDS
 *       subscribe and take nothing; write holds into its own region on the
 *       next max_holds messages of every stream it maps (from where the stream
 *       stood when first seen), again and again for SECONDS: a publisher that
 *       honoured them could never place a message once those were published
 *   stuckfence TOPIC N SIZE SECONDS
 *       publish N messages of SIZE bytes in stream order whose copies never
 *       complete (the host plugin's RGAPS_HOST_FENCE_DELAY_US, which the test
 *       sets), then stay attached SECONDS
 *   lingerfd SECONDS
 *       pass rgapsd, over SCM_RIGHTS, the last reference to a TCP socket that
 *       lingers 60 s with bytes stuck behind a zero window; say whether the
 *       kernel refused it (EPERM) or rgapsd took it and reset it at once; keep
 *       the socket's peer open SECONDS (its close would wait that long)
 *   bigpub TOPIC N SIZE
 *       as itest-client's legitpub, with messages of SIZE bytes
 * Output lines start with the command's name; exit 0 when the attack ran.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../../src/common/frame.h"
#include "../../src/common/topic.h"
#include "../../tools/lib/pattern.h"
#include "rgaps/rgaps.h"
#include "stuck_tcp.h"

#define LEGIT_MARK "legit:" /* itest_client.c's: legitsub verifies these */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---------------------------------------------------------------- forged holds */

struct view {
	const struct rgaps_topic_hdr *hdr;
	struct rgaps_sub_region *mine;
	const struct rgaps_pub_region *pubs[256];
	int npubs;
};

/* Our shared mappings, told apart by their magic (names differ between kinds of objects). */
static void look(struct view *v)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];

	memset(v, 0, sizeof(*v));
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perms[8];
		uint64_t magic;

		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[0] != 'r' ||
		    perms[3] != 's' || hi - lo < sizeof(magic))
			continue;
		memcpy(&magic, (const void *)lo, sizeof(magic));
		if (magic == RGAPS_TOPIC_MAGIC)
			v->hdr = (const void *)lo;
		else if (magic == RGAPS_SUB_MAGIC && perms[1] == 'w')
			v->mine = (void *)lo;
		else if (magic == RGAPS_PUB_MAGIC && v->npubs < 256)
			v->pubs[v->npubs++] = (const void *)lo;
	}
	fclose(f);
}

static int cmd_forgeholds(const char *topic, double seconds)
{
	rgaps_subscriber_t *sub = rgaps_subscriber_init(topic);
	unsigned long rounds = 0, forged = 0;
	double end = now_s() + seconds;
	uint64_t bases[256][2]; /* per stream seen: its gen, its head when first seen */
	int nbases = 0;

	if (!sub) {
		fprintf(stderr, "forgeholds: cannot attach: %s\n", rgaps_strerror(errno));
		return 1;
	}
	printf("forgeholds: subscribed\n");
	fflush(stdout);
	do {
		struct view v;

		look(&v);
		if (v.hdr && v.mine && v.npubs) {
			const struct rgaps_topic_limits *lim = &v.hdr->lim;
			struct rgaps_sub_hold *h = rgaps__sub_holds(lim, v.mine);
			uint32_t per = lim->max_holds / (uint32_t)v.npubs;

			/* The next messages of each stream from where it stood when first seen, kept
			 * there: those blocks, once published, would never be free again. */
			for (int i = 0; i < v.npubs; i++) {
				uint64_t gen = v.pubs[i]->gen, base = 0;
				int b;

				for (b = 0; b < nbases && bases[b][0] != gen; b++)
					;
				if (b == nbases && nbases < 256) {
					bases[nbases][0] = gen;
					bases[nbases++][1] =
						__atomic_load_n(&v.pubs[i]->head, __ATOMIC_ACQUIRE);
				}
				if (b < nbases)
					base = bases[b][1];
				for (uint32_t k = 0;
				     k < (per ? per : 1) && i * per + k < lim->max_holds; k++) {
					struct rgaps_sub_hold *x = &h[i * per + k];

					__atomic_store_n(&x->seq, base + k, __ATOMIC_RELAXED);
					__atomic_store_n(&x->gen, gen, __ATOMIC_SEQ_CST);
					forged++;
				}
			}
			__atomic_store_n(&v.mine->nholds, lim->max_holds, __ATOMIC_SEQ_CST);
		}
		rounds++;
		usleep(20 * 1000);
	} while (now_s() < end);
	printf("forgeholds: %lu rounds, %lu holds forged\n", rounds, forged);
	fflush(stdout);
	_exit(0); /* as a crash would: the kernel closes the connection */
}

/* ---------------------------------------------------------------- fences that never complete */

static int cmd_stuckfence(const char *topic, long n, size_t size, double seconds)
{
	rgaps_publisher_t *pub = rgaps_publisher_init(topic);
	rgaps_pub_opts_t o = { .struct_size = sizeof(o), .timeout_ms = 0, .stream = (void *)1 };
	uint8_t *buf = malloc(size);
	long sent = 0;
	double end;

	if (!pub || !buf) {
		fprintf(stderr, "stuckfence: cannot attach: %s\n", rgaps_strerror(errno));
		if (pub)
			rgaps_publisher_destroy(pub);
		free(buf);
		return 1;
	}
	if (!getenv("RGAPS_HOST_FENCE_DELAY_US"))
		fprintf(stderr, "stuckfence: RGAPS_HOST_FENCE_DELAY_US is not set: its copies "
				"complete at once\n");
	memset(buf, 0xa5, size);
	for (long i = 0; i < n; i++) {
		sent += rgaps_publisher_push_ex(pub, size, buf, &o) == 0;
		usleep(2000);
	}
	printf("stuckfence: published %ld in stream order\n", sent);
	fflush(stdout);
	for (end = now_s() + seconds; now_s() < end && getppid() != 1;)
		usleep(100 * 1000);
	_exit(0); /* attached to the end, as if its copies were still running */
}

/* ---------------------------------------------------------------- a descriptor that lingers */

static int dial(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *path = getenv("RGAPS_SOCKET");
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path ? path : "/run/rgaps/rgapsd.sock");
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("lingerfd: connect to rgapsd");
		exit(1);
	}
	return fd;
}

/* A hello frame carrying fd: 0, or -errno of sendmsg. */
static int send_with_fd(int s, int fd)
{
	static const char req[] = "{\"type\":\"hello\",\"version\":1}";
	uint8_t frame[RGAPS_FRAME_HDR + sizeof(req) - 1];
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int))];
	} cm = { 0 };
	struct iovec iov = { frame, sizeof(frame) };
	struct msghdr m = { .msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = cm.buf,
			    .msg_controllen = sizeof(cm.buf) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);

	rgaps__frame_header(frame, sizeof(req) - 1);
	memcpy(frame + RGAPS_FRAME_HDR, req, sizeof(req) - 1);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(fd));
	return sendmsg(s, &m, MSG_NOSIGNAL) < 0 ? -errno : 0;
}

static int cmd_lingerfd(double seconds)
{
	struct stuck_tcp st;
	int s = dial(), r = stuck_tcp_make(&st, 60);

	if (r) {
		fprintf(stderr, "lingerfd: cannot make a lingering socket: %s\n", strerror(-r));
		return 1;
	}
	r = send_with_fd(s, st.sender);
	if (r) { /* ours is the last reference: a close at once, not the 60 s linger */
		struct linger lg = { .l_onoff = 1, .l_linger = 0 };

		setsockopt(st.sender, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	}
	stuck_tcp_close_fd(&st.sender); /* rgapsd holds the last reference, if it took it */
	if (r == -EPERM) {
		printf("lingerfd: refused by the kernel (EPERM: rgapsd takes no descriptors)\n");
	} else if (r) {
		fprintf(stderr, "lingerfd: sendmsg: %s\n", strerror(-r));
		return 1;
	} else if (stuck_tcp_reset_within(&st, 10000)) {
		printf("lingerfd: passed; rgapsd closed it at once (its peer was reset)\n");
	} else {
		printf("lingerfd: passed; NOT reset within 10 s\n");
	}
	fflush(stdout);
	for (double end = now_s() + seconds; now_s() < end && getppid() != 1;)
		usleep(100 * 1000);
	close(s);
	stuck_tcp_close_fd(&st.receiver);
	return 0;
}

/* ---------------------------------------------------------------- an honest publisher */

static int cmd_bigpub(const char *topic, long n, size_t size)
{
	rgaps_publisher_t *pub = rgaps_publisher_init(topic);
	char mark[32];
	rgaps_pub_opts_t o = { .struct_size = sizeof(o), .attrs = mark, .timeout_ms = 2000 };
	uint8_t *buf = malloc(size);
	int rc = 0;

	if (!pub || !buf) {
		fprintf(stderr, "legitpub: cannot attach to %s: %s\n", topic,
			rgaps_strerror(errno));
		rc = 1;
		goto out;
	}
	o.attr_len = (size_t)snprintf(mark, sizeof(mark), LEGIT_MARK "%d", (int)getpid());
	for (long i = 0; i < n; i++) {
		int r;

		rgaps_pattern_fill(buf, size, (uint64_t)i);
		r = rgaps_publisher_push_ex(pub, size, buf, &o);
		if (r) {
			fprintf(stderr, "legitpub: publish %ld: %s\n", i, rgaps_strerror(r));
			rc = 1;
			goto out;
		}
		usleep(2000);
	}
	printf("legitpub: published %ld\n", n);
out:
	if (pub)
		rgaps_publisher_destroy(pub);
	free(buf);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc >= 4 && strcmp(argv[1], "forgeholds") == 0)
		return cmd_forgeholds(argv[2], atof(argv[3]));
	if (argc >= 6 && strcmp(argv[1], "stuckfence") == 0)
		return cmd_stuckfence(argv[2], atol(argv[3]), (size_t)atol(argv[4]), atof(argv[5]));
	if (argc >= 3 && strcmp(argv[1], "lingerfd") == 0)
		return cmd_lingerfd(atof(argv[2]));
	if (argc >= 5 && strcmp(argv[1], "bigpub") == 0)
		return cmd_bigpub(argv[2], atol(argv[3]), (size_t)atol(argv[4]));
	fprintf(stderr, "usage: itest-attack forgeholds TOPIC SECONDS | stuckfence TOPIC N SIZE "
			"SECONDS | lingerfd SECONDS | bigpub TOPIC N SIZE\n");
	return 2;
}
