/*
 * Helper program of the integration tests:
 *   badframes          hostile and malformed control traffic, each case checked
 *   pull TOPIC N       the RGAPS interface: pull() N messages, verify each
 *   push TOPIC N SIZE  the RGAPS interface: push() N verifiable messages
 *   fdsub TOPIC N      take N messages driven by poll() on rgaps_subscriber_fd()
 *   hold TOPIC N       take N messages, never release them, sleep (to be killed)
 *   loanhold TOPIC N   loan N blocks, never commit, sleep (to be killed)
 *   scribble TOPIC pub|sub random|zero exit|stay SECONDS
 *                      the attacker of tests/integration/attack_shm.sh: attach, then
 *                      overwrite every byte of every mapping it can write, again and
 *                      again for SECONDS, and check it can write nothing else
 *   legitpub TOPIC N   publish N verifiable messages marked with this process's pid
 *   legitsub TOPIC N   take until N messages marked by a legitpub are accounted for (each
 *                      checked against its stream's sequence, or reported lost); other
 *                      streams' bytes are theirs
 * Exit 0 when everything checked out; messages say what did not (3: wrong bytes).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <time.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../../src/common/frame.h"
#include "../../src/common/futex.h"
#include "../../src/common/topic.h"
#include "../../tools/lib/pattern.h"
#include "rgaps/rgaps.h"

static int failures;

#define CHECK(cond, ...)                                     \
	do {                                                 \
		if (!(cond)) {                               \
			failures++;                          \
			fprintf(stderr, "FAIL: " __VA_ARGS__); \
			fprintf(stderr, "\n");               \
		}                                            \
	} while (0)

static int dial(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct timeval tv = { .tv_sec = 5 };

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", getenv("RGAPS_SOCKET"));
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("connect");
		exit(2);
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static void send_raw(int fd, const void *buf, size_t len)
{
	if (send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
		fprintf(stderr, "note: short send (%s)\n", strerror(errno));
}

static void send_frame(int fd, const char *payload)
{
	uint8_t hdr[RGAPS_FRAME_HDR];

	rgaps__frame_header(hdr, (uint32_t)strlen(payload));
	send_raw(fd, hdr, sizeof(hdr));
	send_raw(fd, payload, strlen(payload));
}

/* Read one reply; returns its text (static buffer) or NULL on EOF/timeout. */
static const char *recv_reply(int fd)
{
	static struct rgaps_frame_reader rd;
	static char out[RGAPS_FRAME_MAX + 1];
	static int inited;
	const uint8_t *p;
	size_t len;

	if (!inited || rd.len == 0) {
		rgaps__frame_reader_init(&rd);
		inited = 1;
	}
	for (;;) {
		uint8_t *space;
		size_t room;
		ssize_t n;

		if (rgaps__frame_reader_next(&rd, &p, &len) == 1) {
			memcpy(out, p, len);
			out[len] = 0;
			return out;
		}
		rgaps__frame_reader_space(&rd, &space, &room);
		n = recv(fd, space, room, 0);
		if (n <= 0) {
			rgaps__frame_reader_init(&rd);
			return NULL;
		}
		rgaps__frame_reader_commit(&rd, (size_t)n);
	}
}

static void expect(int fd, const char *what, const char *code)
{
	const char *r = recv_reply(fd);
	char want[96];

	if (!code) {
		CHECK(r && strstr(r, "\"ok\":true"), "%s: expected ok, got %s", what, r ? r : "EOF");
		return;
	}
	snprintf(want, sizeof(want), "\"code\":\"%s\"", code);
	CHECK(r && strstr(r, want) && strstr(r, "\"message\""), "%s: expected %s, got %s", what,
	      code, r ? r : "EOF");
	if (r && strstr(r, want))
		printf("ok: %s -> %s\n", what, code);
}

static void expect_eof(int fd, const char *what)
{
	char c;
	ssize_t n = recv(fd, &c, 1, 0);

	CHECK(n == 0, "%s: expected the daemon to close the connection (got %zd)", what, n);
}

static int hello(void)
{
	int fd = dial();

	send_frame(fd, "{\"type\":\"hello\",\"version\":2}");
	expect(fd, "hello", NULL);
	return fd;
}

static int cmd_badframes(void)
{
	char big[200];
	int fd;

	fd = dial();
	send_frame(fd, "this is not json");
	expect(fd, "non-JSON frame", "bad_frame");
	send_frame(fd, "[1,2,3]");
	expect(fd, "JSON array", "bad_request");
	send_frame(fd, "{\"id\":7}");
	expect(fd, "no type", "bad_request");
	send_frame(fd, "{\"type\":42}");
	expect(fd, "numeric type", "bad_request");
	send_frame(fd, "{\"type\":\"launch_missiles\"}");
	expect(fd, "unknown request", "unknown_request");
	send_frame(fd, "{\"type\":\"attach\",\"topic\":\"t\",\"role\":\"sub\"}");
	expect(fd, "attach before hello", "bad_request");
	send_frame(fd, "{\"type\":\"hello\",\"version\":99}");
	expect(fd, "hello with version 99", "version");
	send_frame(fd, "{\"type\":\"hello\"}");
	expect(fd, "hello without version", "bad_request");
	send_frame(fd, "{\"type\":\"hello\",\"version\":2}");
	expect(fd, "hello after errors on the same connection", NULL);
	send_frame(fd, "\x01\x02\xff\xfe garbage \x00 bytes");
	expect(fd, "binary garbage", "bad_frame");
	close(fd);

	fd = hello();
	{
		static const char *const bad[] = { "\"\"", "\".hidden\"", "\"a/b\"", "\"-x\"",
						    "\"sp ace\"", "5", "null", "\"\\u00e9\"" };

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			char req[160], what[96];

			snprintf(req, sizeof(req),
				 "{\"type\":\"attach\",\"topic\":%s,\"role\":\"sub\"}", bad[i]);
			snprintf(what, sizeof(what), "topic name %s", bad[i]);
			send_frame(fd, req);
			expect(fd, what, "invalid");
		}
		memset(big, 'x', 64);
		big[64] = 0;
		snprintf(big + 80, 120, "{\"type\":\"attach\",\"topic\":\"%.64s\",\"role\":\"sub\"}", big);
		send_frame(fd, big + 80);
		expect(fd, "64-character topic name", "invalid");
	}
	/* cJSON would cut "ok\u0000/../x" to "ok": the frame is refused, never truncated. */
	send_frame(fd, "{\"type\":\"attach\",\"topic\":\"ok\\u0000/../x\",\"role\":\"sub\"}");
	expect(fd, "topic name with a \\u0000 escape", "bad_frame");
	send_frame(fd, "{\"type\":\"attach\",\"topic\":\"ok\",\"role\":\"boss\"}");
	expect(fd, "bad role", "bad_request");
	send_frame(fd, "{\"type\":\"detach\"}");
	expect(fd, "detach when not attached", "not_attached");
	send_frame(fd, "{\"type\":\"stats\",\"topic\":\"no-such-topic\"}");
	expect(fd, "stats of a missing topic", "not_found");
	/* Pipelined requests: replies come back in order. */
	send_frame(fd, "{\"type\":\"topics\",\"id\":1}{");
	send_frame(fd, "{\"type\":\"topics\",\"id\":2}");
	send_frame(fd, "{\"type\":\"topics\",\"id\":3}");
	expect(fd, "pipelined 1 (trailing junk)", "bad_frame");
	{
		const char *r2 = recv_reply(fd);

		CHECK(r2 && strstr(r2, "\"id\":2"), "pipelined reply 2 out of order: %s", r2);
		r2 = recv_reply(fd);
		CHECK(r2 && strstr(r2, "\"id\":3"), "pipelined reply 3 out of order: %s", r2);
	}
	close(fd);

	/* Attaching twice on one connection. */
	fd = hello();
	send_frame(fd, "{\"type\":\"attach\",\"topic\":\"twice\",\"role\":\"pub\"}");
	expect(fd, "first attach", NULL);
	send_frame(fd, "{\"type\":\"attach\",\"topic\":\"twice\",\"role\":\"pub\"}");
	expect(fd, "second attach on one connection", "exists");
	close(fd);

	/* Frames that break the stream: error, then the daemon hangs up. */
	fd = dial();
	{
		uint8_t hdr[4] = { 0x01, 0x00, 0x01, 0x00 }; /* 65537 bytes */

		send_raw(fd, hdr, 4);
		expect(fd, "oversized frame header", "too_large");
		expect_eof(fd, "oversized frame");
	}
	close(fd);
	fd = dial();
	{
		uint8_t hdr[4] = { 0, 0, 0, 0 };

		send_raw(fd, hdr, 4);
		expect(fd, "zero-length frame", "bad_frame");
		expect_eof(fd, "zero-length frame");
	}
	close(fd);
	fd = dial();
	{
		uint8_t hdr[4] = { 100, 0, 0, 0 };

		send_raw(fd, hdr, 4);
		send_raw(fd, "{\"type\":", 8);
		/* truncated: hang up mid-frame */
	}
	close(fd);
	fd = dial();
	send_raw(fd, "\x05\x00", 2); /* truncated header */
	close(fd);

	/* A client that sends file descriptors: the kernel refuses them (SO_PASSRIGHTS, Linux
	 * 6.16+), or they are closed unread and the request served. */
	fd = dial();
	{
		const char *p = "{\"type\":\"hello\",\"version\":2}";
		uint8_t buf[64];
		union {
			char c[CMSG_SPACE(sizeof(int))];
			struct cmsghdr a;
		} cb;
		struct iovec iov = { .iov_base = buf, .iov_len = 4 + strlen(p) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.c,
				     .msg_controllen = sizeof(cb.c) };
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		int sent = STDOUT_FILENO;

		rgaps__frame_header(buf, (uint32_t)strlen(p));
		memcpy(buf + 4, p, strlen(p));
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &sent, sizeof(int));
		if (sendmsg(fd, &mh, 0) < 0) {
			CHECK(errno == EPERM, "sendmsg with fds: %s (expected EPERM)",
			      strerror(errno));
		} else {
			expect(fd, "request carrying a file descriptor", NULL);
		}
	}
	close(fd);

	/* After all that, the daemon still serves. */
	fd = hello();
	send_frame(fd, "{\"type\":\"stats\"}");
	expect(fd, "stats after the abuse", NULL);
	close(fd);
	printf("%d failures\n", failures);
	return failures ? 1 : 0;
}

static int verify(const void *p, size_t size, uint64_t seq)
{
	uint64_t ctr;
	int64_t off = rgaps_pattern_check(p, size, &ctr);

	CHECK(off < 0, "message seq %llu: mismatch at byte %lld", (unsigned long long)seq,
	      (long long)off);
	return off < 0;
}

static int cmd_pull(const char *topic, long n)
{
	rgaps_subscriber_t *sub = rgaps_subscriber_init(topic);
	rgaps_topic_info_t info = { .struct_size = sizeof(info) };

	if (!sub) {
		fprintf(stderr, "subscriber_init: %s\n", rgaps_strerror(errno));
		return 2;
	}
	CHECK(rgaps_subscriber_info(sub, &info) == 0 && strcmp(info.name, topic) == 0,
	      "subscriber_info");
	printf("ready\n");
	fflush(stdout);
	for (long i = 0; i < n; i++) {
		uint8_t *p = rgaps_subscriber_pull(sub);
		uint64_t hdr[2];

		if (!p) {
			fprintf(stderr, "pull: %s\n", rgaps_strerror(errno));
			rgaps_subscriber_destroy(sub);
			return 1;
		}
		memcpy(hdr, p, sizeof(hdr));
		verify(p, hdr[1], (uint64_t)i);
	}
	rgaps_subscriber_destroy(sub);
	printf("pulled %ld, %d failures\n", n, failures);
	return failures ? 1 : 0;
}

static int cmd_push(const char *topic, long n, size_t size)
{
	rgaps_publisher_t *pub = rgaps_publisher_init(topic);
	uint8_t *buf = malloc(size);

	if (!pub || !buf) {
		fprintf(stderr, "publisher_init: %s\n", rgaps_strerror(errno));
		return 2;
	}
	CHECK(rgaps_publisher_push(pub, 0, buf) != 0, "push of 0 bytes must fail");
	for (long i = 0; i < n; i++) {
		int r;

		rgaps_pattern_fill(buf, size, (uint64_t)i);
		r = rgaps_publisher_push(pub, size, buf);
		CHECK(r == 0, "push %ld: %s", i, rgaps_strerror(r));
	}
	rgaps_publisher_destroy(pub);
	free(buf);
	return failures ? 1 : 0;
}

static int cmd_fdsub(const char *topic, long n)
{
	rgaps_subscriber_t *sub = rgaps_subscriber_init(topic);
	long got = 0, wakeups = 0;
	int fd;

	if (!sub) {
		fprintf(stderr, "subscriber_init: %s\n", rgaps_strerror(errno));
		return 2;
	}
	fd = rgaps_subscriber_fd(sub);
	CHECK(fd >= 0, "subscriber_fd: %s", rgaps_strerror(fd));
	CHECK(rgaps_subscriber_fd(sub) == fd, "subscriber_fd is stable");
	printf("ready\n");
	fflush(stdout);
	while (got < n) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		rgaps_msg_t m;
		int r = poll(&p, 1, 10000);

		if (r <= 0) {
			fprintf(stderr, "poll: timed out with %ld of %ld\n", got, n);
			break;
		}
		wakeups++;
		while ((r = rgaps_subscriber_take(sub, &m, 0)) == 0) {
			verify(m.data, m.size, m.seq);
			rgaps_subscriber_release(sub, &m);
			got++;
		}
		CHECK(r == -EAGAIN, "take after poll: %s", rgaps_strerror(r));
	}
	printf("fd-driven: %ld messages in %ld wake-ups, %d failures\n", got, wakeups, failures);
	rgaps_subscriber_destroy(sub);
	return (failures || got < n) ? 1 : 0;
}

static int cmd_hold(const char *topic, long n)
{
	rgaps_subscriber_t *sub = rgaps_subscriber_init(topic);
	rgaps_msg_t m;
	long got = 0;

	if (!sub)
		return 2;
	printf("ready\n");
	fflush(stdout);
	while (got < n && rgaps_subscriber_take(sub, &m, 20000) == 0)
		got++;
	printf("holding %ld\n", got);
	fflush(stdout);
	pause();
	return 0;
}

/*
 * Hold N messages, then wait for more: when rgapsd dies the wait must end with
 * -ENOTCONN (within the library's liveness interval), the held messages must
 * stay readable, and releasing them and destroying the handle must not hang.
 */
static int cmd_holdwait(const char *topic, long n)
{
	rgaps_subscriber_t *sub = rgaps_subscriber_init(topic);
	rgaps_msg_t held[64], m;
	long got = 0;
	unsigned sum = 0;
	int r;

	if (!sub || n < 1 || n > 64)
		return 2;
	printf("ready\n");
	fflush(stdout);
	while (got < n && rgaps_subscriber_take(sub, &held[got], 20000) == 0)
		got++;
	printf("holding %ld\n", got);
	fflush(stdout);
	if (got != n)
		return 1;
	r = rgaps_subscriber_take(sub, &m, 60000);
	if (r == 0) {
		printf("holdwait: a message came, none was published\n");
		return 1;
	}
	for (long i = 0; i < got; i++) { /* the held bytes are still mapped */
		const volatile uint8_t *b = held[i].data;

		if (held[i].size)
			sum += b[0] + b[held[i].size - 1];
	}
	for (long i = 0; i < got; i++)
		(void)rgaps_subscriber_release(sub, &held[i]);
	rgaps_subscriber_destroy(sub);
	printf("holdwait: the wait ended with %s (%d) while holding %ld; held bytes readable "
	       "(sum %u); released and destroyed\n",
	       rgaps_strerror(r), r, got, sum);
	return r == -ENOTCONN ? 0 : 1;
}

static int cmd_loanhold(const char *topic, long n)
{
	rgaps_publisher_t *pub = rgaps_publisher_init(topic);
	rgaps_loan_t l;
	long got = 0;

	if (!pub)
		return 2;
	while (got < n && rgaps_publisher_loan(pub, 65536, 1000, &l) == 0)
		got++;
	printf("loaned %ld\n", got);
	fflush(stdout);
	pause();
	return 0;
}

/* ---------------------------------------------------------------- the shared-memory attacker */

struct target {
	uint8_t *addr;
	size_t len;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Every descriptor of an rgaps segment this process holds (its pools: the
 * library keeps them open): a read-only one cannot be reopened read-write
 * through /proc, and none can be shrunk (each is sealed against it).
 */
static void check_fds(void)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *de;
	int ro = 0, rw = 0;

	if (!dir)
		return;
	while ((de = readdir(dir))) {
		char path[64], link[256] = "";
		int fd = atoi(de->d_name), other;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", de->d_name);
		if (readlink(path, link, sizeof(link) - 1) < 0 || !strstr(link, "/memfd:rgaps-"))
			continue;
		CHECK(ftruncate(fd, 0) != 0, "%s (%s) was shrunk", path, link);
		if ((fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDONLY) {
			rw++;
			continue;
		}
		ro++;
		other = open(path, O_RDWR);
		CHECK(other < 0, "%s (%s), read-only, reopened read-write", path, link);
		if (other >= 0)
			close(other);
	}
	closedir(dir);
	printf("scribble: %d read-only and %d read-write segment fds checked\n", ro, rw);
}

/*
 * Every shared mapping of an rgaps segment in this process: the writable ones
 * are the targets; for each read-only one, check that mprotect() cannot make it
 * writable.
 */
static int find_targets(struct target *t, int max)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0, ro = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perms[8], path[400] = "";

		if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %399[^\n]", &lo, &hi, perms, path) < 3 ||
		    !strstr(path, "/memfd:rgaps-") || perms[3] != 's')
			continue;
		if (perms[1] == 'w') {
			if (n < max)
				t[n++] = (struct target){ (uint8_t *)lo, hi - lo };
			continue;
		}
		ro++;
		CHECK(mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE) != 0,
		      "mprotect made a read-only mapping of %s writable", path);
	}
	fclose(f);
	printf("scribble: %d writable mappings (its own), %d read-only ones checked\n", n, ro);
	check_fds();
	return n;
}

static int cmd_scribble(const char *topic, const char *role, const char *fill, const char *after,
			double seconds)
{
	rgaps_publisher_t *pub = NULL;
	rgaps_subscriber_t *sub = NULL;
	struct target t[16];
	uint64_t x = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull, rounds = 0;
	double end;
	int n;

	if (strcmp(role, "pub") == 0) {
		pub = rgaps_publisher_init(topic);
		if (!pub) {
			fprintf(stderr, "scribble: cannot attach: %s\n", rgaps_strerror(errno));
			return 1;
		}
		for (int i = 0; i < 8; i++) {
			uint8_t buf[4096];

			rgaps_pattern_fill(buf, sizeof(buf), (uint64_t)i);
			rgaps_publisher_push_timeout(pub, sizeof(buf), buf, 0);
		}
	} else {
		rgaps_msg_t m;

		sub = rgaps_subscriber_init(topic);
		if (!sub) {
			fprintf(stderr, "scribble: cannot attach: %s\n", rgaps_strerror(errno));
			return 1;
		}
		/* Hold what comes within a second: the holds are ours to spoil too. */
		for (int i = 0; i < 4; i++)
			rgaps_subscriber_take(sub, &m, 250);
	}
	n = find_targets(t, 16);
	CHECK(n > 0, "no writable mapping found");
	end = now_s() + seconds;
	do {
		for (int i = 0; i < n; i++) {
			if (strcmp(fill, "zero") == 0) {
				memset(t[i].addr, 0, t[i].len);
				continue;
			}
			for (size_t k = 0; k + 8 <= t[i].len; k += 8) {
				x ^= x << 13;
				x ^= x >> 7;
				x ^= x << 17;
				memcpy(t[i].addr + k, &x, 8);
			}
		}
		rounds++;
		usleep(2000);
	} while (now_s() < end);
	printf("scribble: %llu rounds over %d mappings; %s\n", (unsigned long long)rounds, n, after);
	fflush(stdout);
	if (strcmp(after, "stay") == 0)
		/* Killed by the test: everything it holds stays held until then. A test that
		 * died first leaves us to init: go too. */
		while (getppid() != 1)
			sleep(1);
	/* Exit without detaching cleanly: the kernel closes the connection. */
	_exit(failures ? 1 : 0);
}

#define LEGIT_MARK "legit:"

static int cmd_legitpub(const char *topic, long n)
{
	rgaps_publisher_t *pub = rgaps_publisher_init(topic);
	char mark[32];
	rgaps_pub_opts_t o = { .struct_size = sizeof(o), .attrs = mark, .timeout_ms = 2000 };
	uint8_t buf[8192];

	if (!pub) {
		fprintf(stderr, "legitpub: cannot attach to %s: %s\n", topic, rgaps_strerror(errno));
		return 1;
	}
	o.attr_len = (size_t)snprintf(mark, sizeof(mark), LEGIT_MARK "%d", (int)getpid());
	for (long i = 0; i < n; i++) {
		size_t size = 64 + (size_t)(i * 977) % (sizeof(buf) - 64);
		int r;

		rgaps_pattern_fill(buf, size, (uint64_t)i);
		r = rgaps_publisher_push_ex(pub, size, buf, &o);
		if (r) {
			fprintf(stderr, "legitpub: publish %ld: %s\n", i, rgaps_strerror(r));
			rgaps_publisher_destroy(pub);
			return 1;
		}
		usleep(1000);
	}
	printf("legitpub: published %ld\n", n);
	rgaps_publisher_destroy(pub);
	return 0;
}

static int cmd_legitsub(const char *topic, long n)
{
	rgaps_subscriber_t *sub = rgaps_subscriber_init(topic);
	uint64_t legit_stream = 0, next = 0, other = 0, lost = 0;
	long got = 0;

	if (!sub) {
		fprintf(stderr, "legitsub: cannot attach to %s: %s\n", topic, rgaps_strerror(errno));
		return 1;
	}
	printf("legitsub: subscribed\n");
	fflush(stdout);
	while (got + (long)lost < n) { /* every message verified, or reported lost */
		rgaps_msg_info_t info = { .struct_size = sizeof(info) };
		rgaps_msg_t m;
		uint64_t ctr = UINT64_MAX;
		int r = rgaps_subscriber_take(sub, &m, 5000);

		if (r) {
			fprintf(stderr, "legitsub: take: %s after %ld messages (%llu lost)\n",
				rgaps_strerror(r), got, (unsigned long long)lost);
			rgaps_subscriber_destroy(sub);
			return 1;
		}
		CHECK(rgaps_msg_info(sub, &m, &info) == 0, "msg_info of a held message");
		if (info.attr_len < strlen(LEGIT_MARK) ||
		    memcmp(info.attrs, LEGIT_MARK, strlen(LEGIT_MARK)) != 0 ||
		    (legit_stream && info.stream != legit_stream)) {
			other++; /* another publisher's: its bytes are its own business */
			rgaps_subscriber_release(sub, &m);
			continue;
		}
		legit_stream = info.stream;
		lost += m.gap;
		next += m.gap;
		if (rgaps_pattern_check(m.data, m.size, &ctr) >= 0 || ctr != m.seq ||
		    m.seq != next) {
			fprintf(stderr, "legitsub: WRONG BYTES: seq %llu (expected %llu), counter %llu\n",
				(unsigned long long)m.seq, (unsigned long long)next,
				(unsigned long long)ctr);
			return 3;
		}
		next++;
		got++;
		rgaps_subscriber_release(sub, &m);
	}
	printf("legitsub: %ld verified, %llu lost, %llu from other streams\n", got,
	       (unsigned long long)lost, (unsigned long long)other);
	rgaps_subscriber_destroy(sub);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "badframes") == 0)
		return cmd_badframes();
	if (argc >= 4 && strcmp(argv[1], "pull") == 0)
		return cmd_pull(argv[2], atol(argv[3]));
	if (argc >= 5 && strcmp(argv[1], "push") == 0)
		return cmd_push(argv[2], atol(argv[3]), (size_t)atol(argv[4]));
	if (argc >= 4 && strcmp(argv[1], "fdsub") == 0)
		return cmd_fdsub(argv[2], atol(argv[3]));
	if (argc >= 4 && strcmp(argv[1], "hold") == 0)
		return cmd_hold(argv[2], atol(argv[3]));
	if (argc >= 4 && strcmp(argv[1], "holdwait") == 0)
		return cmd_holdwait(argv[2], atol(argv[3]));
	if (argc >= 4 && strcmp(argv[1], "loanhold") == 0)
		return cmd_loanhold(argv[2], atol(argv[3]));
	if (argc >= 7 && strcmp(argv[1], "scribble") == 0)
		return cmd_scribble(argv[2], argv[3], argv[4], argv[5], atof(argv[6]));
	if (argc >= 4 && strcmp(argv[1], "legitpub") == 0)
		return cmd_legitpub(argv[2], atol(argv[3]));
	if (argc >= 4 && strcmp(argv[1], "legitsub") == 0)
		return cmd_legitsub(argv[2], atol(argv[3]));
	fprintf(stderr,
		"usage: itest-client badframes | pull T N | push T N SIZE | fdsub T N | "
		"hold T N | holdwait T N | loanhold T N | scribble T pub|sub random|zero exit|stay SECONDS | "
		"legitpub T N | legitsub T N\n");
	return 2;
}
