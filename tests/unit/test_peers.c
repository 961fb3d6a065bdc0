/*
 * Tests of the peer control plane (src/daemon/peers/peers.c) over real loopback TCP.
 * Each daemon of a test is a manager on its own libuv loop ("A" on la, "B" on
 * lb); the main thread drives both loops, so a test can freeze B by not
 * running lb (a daemon that hangs, for the keepalive and send-queue tests).
 * Hostile peers are raw blocking sockets in a second thread that speak (or
 * break) the protocol of docs/PROTOCOL.md section 2 with their own HMAC code, so
 * the documented transcript is checked, not just the implementation against
 * itself. Every test is bounded by a 10 s uv_timer watchdog, stops the
 * managers, runs the loops until nothing is left and asserts uv_loop_close()
 * == 0 and that no descriptor leaked.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "hostport.h"
#include "log.h"
#include "peers/peers.h"
#include "util.h"

#define WATCHDOG_MS 10000
#define KA_MS 100	   /* keepalive of the tests that time it */
#define KA_SLOW_MS 300 /* the others: the test body may hold both loops a while */
#define BIG_LEN (512 * 1024)
#define NSMALL 1000
#define FAKE_NAME "127.0.0.1:1" /* sorts before every 127.0.0.1:PORT with PORT >= 10 */

/* Wire constants, written down again from docs/PROTOCOL.md section 2. */
enum { F_HELLO = 1, F_AUTH, F_AUTH_OK, F_ERROR, F_MSG, F_PING, F_PONG, F_BYE };
enum { E_PROTOCOL = 1, E_VERSION, E_AUTH, E_UNKNOWN_PEER, E_DUPLICATE, E_TIMEOUT };

struct fx;

struct side {
	struct fx *fx;
	const char *label;
	uv_loop_t *loop;
	struct rgapsd_peers *pm;
	char name[64];
	char plist[4][64];
	const char *peers[4];
	uint32_t npeers;
	uint8_t key[64];
	size_t keylen;
	uint32_t keepalive_ms;
	uint32_t max_pending, max_pending_src, hello_ms; /* 0: the defaults */

	/* Loop thread. */
	unsigned ups, downs;
	bool up;
	bool last_initiator;
	struct rgapsd_peer *peer;
	char down_why[256];
	uint64_t down_ms;
	unsigned msgs;
	uint32_t next_seq;
	bool order_bad;
	unsigned bigs;
	unsigned gones; /* peer_gone */
	size_t last_len;
	bool in_api;	  /* the test is inside a call: a peer_down now would re-enter it */
	bool stop_on_msg; /* stop the manager from inside peer_msg */
	bool echo;	  /* send every message back */
	int downs_shared; /* copy of downs for the client thread (atomic) */
};

struct fx {
	uv_loop_t la, lb;
	uv_timer_t watchdog;
	bool timed_out;
	bool frozen; /* lb is not run */
	struct side a, b;
	int fds_before;

	pthread_t thread;
	bool thread_on;
	int thread_done; /* atomic */
	void (*client)(struct fx *fx);
	uint16_t port; /* the raw client's target */
	int listen_fd;	/* the raw server's socket */
	char raw_name[64]; /* the raw server's name, as A lists it */
	int flood[128];	   /* connections a flood left open (-1: none) */
	int nflood;
	char err[512];
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
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
	return n - 1;
}

static uint16_t free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

/* ---- manager callbacks ------------------------------------------------------------------- */

static void t_up(void *ctx, struct rgapsd_peer *p, bool initiator)
{
	struct side *s = ctx;

	if (s->up)
		fail_msg("%s: peer_up for %s while its session is up", s->label,
			 rgapsd_peer_name(p));
	assert_true(rgapsd_peer_is_up(p));
	s->up = true;
	s->ups++;
	s->peer = p;
	s->last_initiator = initiator;
}

static void t_down(void *ctx, struct rgapsd_peer *p, const char *why)
{
	struct side *s = ctx;

	if (!s->up)
		fail_msg("%s: peer_down for %s (%s) without a session up", s->label,
			 rgapsd_peer_name(p), why);
	if (s->in_api)
		fail_msg("%s: peer_down (%s) inside a call of the core", s->label, why);
	assert_false(rgapsd_peer_is_up(p));
	assert_int_equal(rgapsd_peer_send(p, "{}", 2), -ENOTCONN);
	s->up = false;
	s->downs++;
	__atomic_store_n(&s->downs_shared, (int)s->downs, __ATOMIC_RELEASE);
	snprintf(s->down_why, sizeof(s->down_why), "%s", why);
	s->down_ms = now_ms();
}

static bool big_ok(const char *json, size_t len)
{
	if (len < 10 || memcmp(json, "{\"big\":\"", 8) != 0 ||
	    memcmp(json + len - 2, "\"}", 2) != 0)
		return false;
	for (size_t i = 8; i < len - 2; i++)
		if (json[i] != (char)('a' + (i * 7) % 26))
			return false;
	return true;
}

static char *big_make(size_t len)
{
	char *b = malloc(len);

	assert_non_null(b);
	memcpy(b, "{\"big\":\"", 8);
	for (size_t i = 8; i < len - 2; i++)
		b[i] = (char)('a' + (i * 7) % 26);
	memcpy(b + len - 2, "\"}", 2);
	return b;
}

static void t_msg(void *ctx, struct rgapsd_peer *p, const char *json, size_t len)
{
	struct side *s = ctx;
	unsigned seq;

	assert_true(s->up);
	s->msgs++;
	s->last_len = len;
	if (len > 8 && memcmp(json, "{\"seq\":", 7) == 0) {
		char tmp[32];

		memcpy(tmp, json, RGAPS_MIN(len, sizeof(tmp) - 1));
		tmp[RGAPS_MIN(len, sizeof(tmp) - 1)] = '\0';
		if (sscanf(tmp, "{\"seq\":%u}", &seq) != 1 || seq != s->next_seq)
			s->order_bad = true;
		s->next_seq++;
	} else if (len > 8 && memcmp(json, "{\"big\":", 7) == 0) {
		if (!big_ok(json, len))
			fail_msg("%s: the big message arrived damaged (%zu bytes)", s->label, len);
		s->bigs++;
	}
	if (s->stop_on_msg && s->pm) {
		struct rgapsd_peers *pm = s->pm;

		s->pm = NULL;
		rgapsd_peers_stop(pm);
		/* peer_down came inside stop; sending now finds no session. */
		assert_int_equal(s->downs, 1);
		assert_int_equal(rgapsd_peer_send(p, "{}", 2), -ENOTCONN);
		return;
	}
	if (s->echo)
		assert_int_equal(rgapsd_peer_send(p, json, len), 0);
}

static void t_gone(void *ctx, struct rgapsd_peer *p)
{
	struct side *s = ctx;

	if (s->up && s->peer == p)
		fail_msg("%s: peer_gone for %s before its peer_down", s->label, rgapsd_peer_name(p));
	s->gones++;
	if (s->peer == p)
		s->peer = NULL;
}

static const struct rgapsd_peers_ops t_ops = {
	.peer_up = t_up,
	.peer_down = t_down,
	.peer_msg = t_msg,
	.peer_gone = t_gone,
};

/* ---- fixture ------------------------------------------------------------------------------- */

static void on_watchdog(uv_timer_t *t)
{
	struct fx *fx = t->data;

	fx->timed_out = true;
}

static void side_init(struct fx *fx, struct side *s, const char *label, uv_loop_t *loop,
		      uint16_t port)
{
	memset(s, 0, sizeof(*s));
	s->fx = fx;
	s->label = label;
	s->loop = loop;
	snprintf(s->name, sizeof(s->name), "127.0.0.1:%u", port);
	s->keylen = 48;
	s->keepalive_ms = KA_SLOW_MS;
	for (size_t i = 0; i < s->keylen; i++)
		s->key[i] = (uint8_t)(i * 13 + 1);
}

static void side_add_peer(struct side *s, const char *name)
{
	snprintf(s->plist[s->npeers], sizeof(s->plist[0]), "%s", name);
	s->peers[s->npeers] = s->plist[s->npeers];
	s->npeers++;
}

static int side_try_start(struct side *s)
{
	struct rgapsd_peers_config cfg = {
		.listen = s->name,
		.peers = s->peers,
		.npeers = s->npeers,
		.key = s->key,
		.keylen = s->keylen,
		.keepalive_ms = s->keepalive_ms,
		.max_pending = s->max_pending,
		.max_pending_per_source = s->max_pending_src,
		.hello_timeout_ms = s->hello_ms,
	};

	return rgapsd_peers_start(s->loop, &cfg, &t_ops, s, &s->pm);
}

static void side_start(struct side *s)
{
	int rc = side_try_start(s);

	if (rc)
		fail_msg("%s: rgapsd_peers_start(%s): %s", s->label, s->name, strerror(-rc));
}

static void side_stop(struct side *s)
{
	if (s->pm) {
		struct rgapsd_peers *pm = s->pm;

		s->pm = NULL;
		rgapsd_peers_stop(pm);
	}
}

static struct rgapsd_peer *side_peer(struct side *s)
{
	return s->pm ? rgapsd_peers_next(s->pm, NULL) : NULL;
}

static struct rgapsd_peers_stats side_stats(struct side *s)
{
	struct rgapsd_peers_stats st;

	rgapsd_peers_get_stats(s->pm, &st);
	return st;
}

static struct rgapsd_peer_stats peer_stats(struct side *s)
{
	struct rgapsd_peer_stats st;

	rgapsd_peer_get_stats(side_peer(s), &st);
	return st;
}

/* Two daemons A and B that list each other, on free loopback ports. */
static void fx_init(struct fx *fx)
{
	uint16_t pa = free_port(), pb = free_port();

	memset(fx, 0, sizeof(*fx));
	fx->fds_before = count_fds();
	fx->listen_fd = -1;
	while (pb == pa)
		pb = free_port();
	assert_int_equal(uv_loop_init(&fx->la), 0);
	assert_int_equal(uv_loop_init(&fx->lb), 0);
	assert_int_equal(uv_timer_init(&fx->la, &fx->watchdog), 0);
	fx->watchdog.data = fx;
	assert_int_equal(uv_timer_start(&fx->watchdog, on_watchdog, WATCHDOG_MS, 0), 0);
	side_init(fx, &fx->a, "A", &fx->la, pa);
	side_init(fx, &fx->b, "B", &fx->lb, pb);
	side_add_peer(&fx->a, fx->b.name);
	side_add_peer(&fx->b, fx->a.name);
}

/* Run the loops (lb unless frozen) until cond holds, ms pass, or the watchdog fires. */
static bool run_until(struct fx *fx, bool (*cond)(struct fx *fx), unsigned ms)
{
	uint64_t deadline = now_ms() + ms;

	for (;;) {
		struct pollfd pfd[2] = {
			{ .fd = uv_backend_fd(&fx->la), .events = POLLIN },
			{ .fd = uv_backend_fd(&fx->lb), .events = POLLIN },
		};
		int t = 5, ta;

		uv_run(&fx->la, UV_RUN_NOWAIT);
		if (!fx->frozen)
			uv_run(&fx->lb, UV_RUN_NOWAIT);
		if (cond && cond(fx))
			return true;
		if (fx->timed_out || now_ms() >= deadline)
			return false;
		ta = uv_backend_timeout(&fx->la);
		if (ta >= 0 && ta < t)
			t = ta;
		if (!fx->frozen) {
			ta = uv_backend_timeout(&fx->lb);
			if (ta >= 0 && ta < t)
				t = ta;
		}
		poll(pfd, fx->frozen ? 1 : 2, t);
	}
}

static void run_for(struct fx *fx, unsigned ms)
{
	run_until(fx, NULL, ms);
}

static bool loops_idle(struct fx *fx)
{
	return !uv_loop_alive(&fx->la) && !uv_loop_alive(&fx->lb);
}

static void fx_finish(struct fx *fx)
{
	bool timed_out = fx->timed_out;

	fx->frozen = false;
	side_stop(&fx->a);
	side_stop(&fx->b);
	uv_close((uv_handle_t *)&fx->watchdog, NULL);
	/* The linger of a final frame is 1 s at most. */
	if (!run_until(fx, loops_idle, 5000))
		fail_msg("the loops still have handles 5 s after stop");
	if (fx->thread_on)
		assert_int_equal(pthread_join(fx->thread, NULL), 0);
	if (fx->listen_fd >= 0)
		close(fx->listen_fd);
	assert_int_equal(uv_loop_close(&fx->la), 0);
	assert_int_equal(uv_loop_close(&fx->lb), 0);
	if (timed_out)
		fail_msg("test timed out after %d ms (client: %s)", WATCHDOG_MS,
			 fx->err[0] ? fx->err : "no error");
	if (fx->err[0])
		fail_msg("client: %s", fx->err);
	assert_int_equal(count_fds(), fx->fds_before);
}

static bool both_up(struct fx *fx)
{
	return fx->a.up && fx->b.up;
}

static void fx_start_pair(struct fx *fx)
{
	side_start(&fx->a);
	side_start(&fx->b);
	if (!run_until(fx, both_up, 5000))
		fail_msg("A and B did not come up (A ups %u, B ups %u)", fx->a.ups, fx->b.ups);
}

/* ---- raw peer (client thread) ------------------------------------------------------------- */

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

#define CHECK(fx, cond, ...)                                      \
	do {                                                      \
		if (!(cond)) {                                    \
			client_fail((fx), __LINE__, __VA_ARGS__); \
			return;                                   \
		}                                                 \
	} while (0)

static void *client_main(void *arg)
{
	struct fx *fx = arg;

	fx->client(fx);
	__atomic_store_n(&fx->thread_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static bool client_done(struct fx *fx)
{
	return __atomic_load_n(&fx->thread_done, __ATOMIC_ACQUIRE);
}

static void fx_run_client(struct fx *fx, void (*client)(struct fx *fx), unsigned ms)
{
	fx->client = client;
	assert_int_equal(pthread_create(&fx->thread, NULL, client_main, fx), 0);
	fx->thread_on = true;
	if (!run_until(fx, client_done, ms))
		fail_msg("the raw peer did not finish in %u ms (%s)", ms,
			 fx->err[0] ? fx->err : "no error yet");
}

static void set_timeouts(int fd, int ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static int raw_connect(uint16_t port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	set_timeouts(fd, 5000);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

static int send_all(int fd, const void *buf, size_t len)
{
	size_t off = 0;

	while (off < len) {
		ssize_t n = send(fd, (const char *)buf + off, len - off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		off += (size_t)n;
	}
	return 0;
}

static int send_frame(int fd, uint8_t type, const void *payload, uint32_t len)
{
	uint8_t *f = malloc(5 + (size_t)len);
	int rc;

	if (!f)
		return -ENOMEM;
	f[0] = (uint8_t)len;
	f[1] = (uint8_t)(len >> 8);
	f[2] = (uint8_t)(len >> 16);
	f[3] = (uint8_t)(len >> 24);
	f[4] = type;
	if (len)
		memcpy(f + 5, payload, len);
	rc = send_all(fd, f, 5 + (size_t)len);
	free(f);
	return rc;
}

/* 1, 0 on EOF before the first byte, or -errno (-EPIPE: EOF inside). */
static int recv_exact(int fd, void *buf, size_t n)
{
	size_t off = 0;

	while (off < n) {
		ssize_t got = recv(fd, (char *)buf + off, n - off, 0);

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -errno;
		if (got == 0)
			return off ? -EPIPE : 0;
		off += (size_t)got;
	}
	return 1;
}

/* One frame into buf: 1 with *type_p and *len_p, 0 on EOF, or -errno. */
static int recv_frame(int fd, uint8_t *type_p, uint8_t *buf, size_t cap, uint32_t *len_p)
{
	uint8_t h[5];
	uint32_t len;
	int rc = recv_exact(fd, h, 5);

	if (rc <= 0)
		return rc;
	len = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
	if (len > cap)
		return -EMSGSIZE;
	rc = len ? recv_exact(fd, buf, len) : 1;
	if (rc == 0)
		rc = -EPIPE;
	if (rc < 0)
		return rc;
	*type_p = h[4];
	*len_p = len;
	return 1;
}

/* The next frame that is not a PING (each answered with a PONG when pong is set). */
static int recv_frame_np(int fd, uint8_t *type_p, uint8_t *buf, size_t cap, uint32_t *len_p,
			 bool pong)
{
	for (;;) {
		int rc = recv_frame(fd, type_p, buf, cap, len_p);

		if (rc <= 0 || *type_p != F_PING)
			return rc;
		if (pong && *len_p == 8)
			send_frame(fd, F_PONG, buf, 8);
	}
}

static size_t hello_build(uint8_t *h, const char *magic, uint16_t version, const uint8_t *nonce,
			  const char *name)
{
	size_t nl = strlen(name);

	memcpy(h, magic, 8);
	h[8] = (uint8_t)version;
	h[9] = (uint8_t)(version >> 8);
	h[10] = h[11] = 0;
	memcpy(h + 12, nonce, 32);
	h[44] = (uint8_t)nl;
	h[45] = (uint8_t)(nl >> 8);
	memcpy(h + 46, name, nl);
	return 46 + nl;
}

/* The documented transcript: domain, version, role, names (sender's first), nonces likewise. */
static void mac_compute(const uint8_t *key, size_t keylen, uint8_t role, const char *from,
			const char *to, const uint8_t *from_nonce, const uint8_t *to_nonce,
			uint8_t mac[32])
{
	crypto_auth_hmacsha256_state st;
	uint8_t b[2];
	size_t fl = strlen(from), tl = strlen(to);

	crypto_auth_hmacsha256_init(&st, key, keylen);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)"rgaps-peer-auth-v1", 18);
	b[0] = 1, b[1] = 0;
	crypto_auth_hmacsha256_update(&st, b, 2);
	crypto_auth_hmacsha256_update(&st, &role, 1);
	b[0] = (uint8_t)fl, b[1] = (uint8_t)(fl >> 8);
	crypto_auth_hmacsha256_update(&st, b, 2);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)from, fl);
	b[0] = (uint8_t)tl, b[1] = (uint8_t)(tl >> 8);
	crypto_auth_hmacsha256_update(&st, b, 2);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)to, tl);
	crypto_auth_hmacsha256_update(&st, from_nonce, 32);
	crypto_auth_hmacsha256_update(&st, to_nonce, 32);
	crypto_auth_hmacsha256_final(&st, mac);
}

/* Expect an ERROR frame with code (0: any) and a reason holding want (NULL: any), then EOF. */
static void expect_error_reason(struct fx *fx, int fd, uint16_t code, const char *want,
				const char *what)
{
	uint8_t buf[1024], type = 0;
	uint32_t len = 0;
	int rc;

	rc = recv_frame_np(fd, &type, buf, sizeof(buf), &len, false);
	/* The HELLO of a responder comes first. */
	if (rc == 1 && type == F_HELLO)
		rc = recv_frame_np(fd, &type, buf, sizeof(buf), &len, false);
	CHECK(fx, rc == 1, "%s: no ERROR frame: %d (%s)", what, rc, strerror(-rc));
	CHECK(fx, type == F_ERROR && len >= 2, "%s: frame type %u len %u, not ERROR", what, type,
	      len);
	CHECK(fx, !code || (buf[0] | buf[1] << 8) == code, "%s: ERROR code %u, expected %u (%.*s)",
	      what, buf[0] | buf[1] << 8, code, (int)(len - 2), (const char *)buf + 2);
	CHECK(fx, len > 2, "%s: ERROR without a reason", what);
	buf[len] = '\0';
	CHECK(fx, !want || strstr((char *)buf + 2, want), "%s: reason \"%s\" lacks \"%s\"", what,
	      (char *)buf + 2, want);
	rc = recv_frame(fd, &type, buf, sizeof(buf), &len);
	CHECK(fx, rc == 0, "%s: expected EOF after the ERROR, got %d (type %u)", what, rc, type);
}

static void expect_error_eof(struct fx *fx, int fd, uint16_t code, const char *what)
{
	expect_error_reason(fx, fd, code, NULL, what);
}

/* ---- tests: parsing and the key file ------------------------------------------------------- */

static void test_parse_hostport(void **state)
{
	static const struct {
		const char *s, *host;
		uint16_t port;
	} good[] = {
		{ "1.2.3.4:5", "1.2.3.4", 5 },
		{ "localhost:5", "localhost", 5 },
		{ "[::1]:5", "::1", 5 },
		{ "[fe80::1%eth0]:7400", "fe80::1%eth0", 7400 },
		{ "host-a.example.org:65535", "host-a.example.org", 65535 },
		{ "10.0.0.2:1", "10.0.0.2", 1 },
	};
	static const char *const bad[] = {
		"",	     ":5",	"1.2.3.4",    "1.2.3.4:",  "1.2.3.4:0",	   "1.2.3.4:65536",
		"1.2.3.4:99999999", "1.2.3.4:-1", "1.2.3.4:+5", "1.2.3.4:5x", "::1:5", "[::1]5",
		"[::1]:",    "[]:5",	"[zz::1]:5",  "[::1",	   "ho st:5",	   "host:5 ",
		"a\n:5",     "[::1%]:5", "1.2.3.4:00000005",
	};
	char host[64];
	uint16_t port;

	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(good); i++) {
		port = 0;
		if (rgapsd_hostport_parse(good[i].s, host, sizeof(host), &port, NULL, 0) != 0)
			fail_msg("\"%s\" refused", good[i].s);
		assert_string_equal(host, good[i].host);
		assert_int_equal(port, good[i].port);
	}
	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(bad); i++) {
		strcpy(host, "untouched");
		port = 42;
		if (rgapsd_hostport_parse(bad[i], host, sizeof(host), &port, NULL, 0) != -EINVAL)
			fail_msg("\"%s\" accepted", bad[i]);
		/* Outputs are written only on success. */
		assert_string_equal(host, "untouched");
		assert_int_equal(port, 42);
	}
	/* A host that does not fit the buffer. */
	assert_int_equal(rgapsd_hostport_parse("abcdefgh:5", host, 8, &port, NULL, 0), -EINVAL);
	assert_int_equal(rgapsd_hostport_parse("abcdefg:5", host, 8, &port, NULL, 0), 0);
	assert_int_equal(rgapsd_hostport_parse(NULL, host, sizeof(host), &port, NULL, 0), -EINVAL);
}

static void write_file(const char *path, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	uint8_t b[8192];

	assert_true(fd >= 0);
	for (size_t i = 0; i < len && i < sizeof(b); i++)
		b[i] = (uint8_t)(i * 31 + 7);
	assert_true(len <= sizeof(b));
	assert_int_equal(write(fd, b, len), (ssize_t)len);
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static void test_load_key(void **state)
{
	char dir[] = "/tmp/rgaps-test-peers-XXXXXX", path[128], err[256];
	uint8_t key[RGAPSD_PEER_KEY_MAX];
	int fds = count_fds();

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/key", dir);

	/* Good: 32 and 64 bytes of anything, mode 0600 and 0400. */
	write_file(path, 32, 0600);
	assert_int_equal(rgapsd_peers_load_key(path, key, sizeof(key), err, sizeof(err)), 32);
	assert_int_equal(key[1], (uint8_t)(31 + 7));
	write_file(path, 64, 0400);
	assert_int_equal(rgapsd_peers_load_key(path, key, sizeof(key), err, sizeof(err)), 64);
	unlink(path);

	/* Too short. */
	write_file(path, 31, 0600);
	err[0] = '\0';
	assert_int_equal(rgapsd_peers_load_key(path, key, sizeof(key), err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "at least 32"));
	unlink(path);
	write_file(path, 0, 0600);
	assert_int_equal(rgapsd_peers_load_key(path, key, sizeof(key), err, sizeof(err)),
			 -EINVAL);
	unlink(path);

	/* Too long for the caller's buffer. */
	write_file(path, 100, 0600);
	assert_int_equal(rgapsd_peers_load_key(path, key, 64, err, sizeof(err)), -EFBIG);
	unlink(path);

	/* Readable by group or others, or any group/other bit at all. */
	write_file(path, 32, 0644);
	err[0] = '\0';
	assert_int_equal(rgapsd_peers_load_key(path, key, sizeof(key), err, sizeof(err)), -EPERM);
	assert_non_null(strstr(err, "0644"));
	assert_non_null(strstr(err, "chmod 600"));
	assert_int_equal(chmod(path, 0640), 0);
	assert_int_equal(rgapsd_peers_load_key(path, key, sizeof(key), err, sizeof(err)), -EPERM);
	assert_int_equal(chmod(path, 0604), 0);
	assert_int_equal(rgapsd_peers_load_key(path, key, sizeof(key), err, sizeof(err)), -EPERM);
	assert_int_equal(chmod(path, 0610), 0);
	assert_int_equal(rgapsd_peers_load_key(path, key, sizeof(key), err, sizeof(err)), -EPERM);
	unlink(path);

	/* Another user's file, even with mode 0600 (root only: chown needs it). */
	if (geteuid() == 0) {
		write_file(path, 32, 0600);
		assert_int_equal(chown(path, 65534, 65534), 0);
		err[0] = '\0';
		assert_int_equal(rgapsd_peers_load_key(path, key, sizeof(key), err, sizeof(err)),
				 -EPERM);
		assert_non_null(strstr(err, "belongs to uid 65534"));
		assert_non_null(strstr(err, "chown 0"));
		unlink(path);
	}

	/* Missing. */
	err[0] = '\0';
	assert_int_equal(rgapsd_peers_load_key(path, key, sizeof(key), err, sizeof(err)),
			 -ENOENT);
	assert_non_null(strstr(err, path));

	/* A directory, and a FIFO (which must not block the open). */
	err[0] = '\0';
	assert_int_equal(rgapsd_peers_load_key(dir, key, sizeof(key), err, sizeof(err)), -EISDIR);
	assert_non_null(strstr(err, "not a regular file"));
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(rgapsd_peers_load_key(path, key, sizeof(key), err, sizeof(err)), -EINVAL);
	unlink(path);

	/* No path. */
	assert_int_equal(rgapsd_peers_load_key("", key, sizeof(key), err, sizeof(err)), -EINVAL);
	assert_int_equal(rmdir(dir), 0);
	assert_int_equal(count_fds(), fds);
}

/* ---- tests: start arguments ----------------------------------------------------------------- */

static void test_start_errors(void **state)
{
	struct fx fx;
	struct rgapsd_peers *pm = (struct rgapsd_peers *)&pm;
	struct rgapsd_peers_config cfg;
	const char *badpeer[] = { "nohost" };
	uint8_t key[40] = { 1 };

	fx_init(&fx);
	cfg = (struct rgapsd_peers_config){ .listen = fx.a.name, .key = key, .keylen = 31 };
	assert_int_equal(rgapsd_peers_start(&fx.la, &cfg, &t_ops, NULL, &pm), -EINVAL);
	cfg.keylen = sizeof(key);
	cfg.listen = "127.0.0.1:0";
	assert_int_equal(rgapsd_peers_start(&fx.la, &cfg, &t_ops, NULL, &pm), -EINVAL);
	cfg.listen = NULL;
	assert_int_equal(rgapsd_peers_start(&fx.la, &cfg, &t_ops, NULL, &pm), -EINVAL);
	cfg.listen = fx.a.name;
	cfg.peers = badpeer;
	cfg.npeers = 1;
	assert_int_equal(rgapsd_peers_start(&fx.la, &cfg, &t_ops, NULL, &pm), -EINVAL);
	assert_ptr_equal(pm, (struct rgapsd_peers *)&pm); /* untouched on failure */

	/* The address is taken by A: a second manager gets -EADDRINUSE and leaves nothing. */
	side_start(&fx.a);
	cfg.peers = NULL;
	cfg.npeers = 0;
	assert_int_equal(rgapsd_peers_start(&fx.lb, &cfg, &t_ops, NULL, &pm), -EADDRINUSE);
	assert_ptr_equal(pm, (struct rgapsd_peers *)&pm);
	assert_false(uv_loop_alive(&fx.lb));
	fx_finish(&fx);
}

/* ---- tests: two daemons ---------------------------------------------------------------------- */

static bool a_b_msgs_done(struct fx *fx)
{
	return fx->a.msgs >= NSMALL + 2 && fx->b.msgs >= NSMALL + 3;
}

static bool pongs_seen(struct fx *fx)
{
	return peer_stats(&fx->a).pongs_received >= 2 && peer_stats(&fx->b).pongs_received >= 2;
}

static bool b_down(struct fx *fx)
{
	return fx->b.downs >= 1;
}

static void test_pair_exchange(void **state)
{
	struct fx fx;
	struct rgapsd_peer *pa, *pb;
	struct rgapsd_peer_stats sa, sb;
	struct rgapsd_peers_stats ma, mb;
	bool a_smaller;
	char *big, *max, m[32];

	fx_init(&fx);
	side_start(&fx.a);
	side_start(&fx.b);
	pa = side_peer(&fx.a);
	pb = side_peer(&fx.b);
	assert_non_null(pa);
	assert_null(rgapsd_peers_next(fx.a.pm, pa));
	assert_string_equal(rgapsd_peer_name(pa), fx.b.name);
	assert_string_equal(rgapsd_peer_host(pa), "127.0.0.1");
	assert_false(rgapsd_peer_is_up(pa));
	assert_int_equal(rgapsd_peer_send(pa, "{}", 2), -ENOTCONN);
	rgapsd_peer_set_data(pa, &fx);
	assert_ptr_equal(rgapsd_peer_get_data(pa), &fx);

	if (!run_until(&fx, both_up, 5000))
		fail_msg("A and B did not come up");
	assert_ptr_equal(fx.a.peer, pa);
	assert_ptr_equal(fx.b.peer, pb);
	/* Both connected; the session initiated by the smaller name is the one kept. */
	a_smaller = strcmp(fx.a.name, fx.b.name) < 0;
	assert_int_equal(fx.a.last_initiator, a_smaller);
	assert_int_equal(fx.b.last_initiator, !a_smaller);
	ma = side_stats(&fx.a);
	mb = side_stats(&fx.b);
	assert_true(ma.duplicates_closed + mb.duplicates_closed >= 1);

	/* Both ways: one small, the biggest allowed, 512 KiB, 1000 in order. */
	assert_int_equal(rgapsd_peer_send(pa, "{\"hello\":\"B\"}", 13), 0);
	assert_int_equal(rgapsd_peer_send(pb, "{\"hello\":\"A\"}", 13), 0);
	max = big_make(RGAPSD_PEER_MSG_MAX);
	assert_int_equal(rgapsd_peer_send(pa, max, RGAPSD_PEER_MSG_MAX), 0);
	assert_int_equal(rgapsd_peer_send(pa, max, RGAPSD_PEER_MSG_MAX + 1), -EMSGSIZE);
	assert_int_equal(rgapsd_peer_send(pa, max, 0), -EMSGSIZE);
	free(max);
	big = big_make(BIG_LEN);
	assert_int_equal(rgapsd_peer_send(pa, big, BIG_LEN), 0);
	assert_int_equal(rgapsd_peer_send(pb, big, BIG_LEN), 0);
	free(big);
	for (unsigned i = 0; i < NSMALL; i++) {
		int n = snprintf(m, sizeof(m), "{\"seq\":%u}", i);

		assert_int_equal(rgapsd_peer_send(pa, m, (size_t)n), 0);
		assert_int_equal(rgapsd_peer_send(pb, m, (size_t)n), 0);
	}
	if (!run_until(&fx, a_b_msgs_done, 5000))
		fail_msg("messages missing: A got %u, B got %u", fx.a.msgs, fx.b.msgs);
	assert_false(fx.a.order_bad);
	assert_false(fx.b.order_bad);
	assert_int_equal(fx.a.next_seq, NSMALL);
	assert_int_equal(fx.b.next_seq, NSMALL);
	assert_int_equal(fx.a.bigs, 1);
	assert_int_equal(fx.b.bigs, 2);

	/* Keepalive round trips, and no session churn meanwhile. */
	if (!run_until(&fx, pongs_seen, 3000))
		fail_msg("no pongs");
	run_for(&fx, 3 * KA_SLOW_MS);
	assert_int_equal(fx.a.ups, 1);
	assert_int_equal(fx.b.ups, 1);
	assert_int_equal(fx.a.downs, 0);
	assert_int_equal(fx.b.downs, 0);

	sa = peer_stats(&fx.a);
	sb = peer_stats(&fx.b);
	assert_true(sa.up && sb.up);
	assert_int_equal(sa.sessions, 1);
	assert_int_equal(sb.sessions, 1);
	assert_int_equal(sa.msgs_sent, NSMALL + 3);
	assert_int_equal(sb.msgs_received, NSMALL + 3);
	assert_int_equal(sb.msgs_sent, NSMALL + 2);
	assert_int_equal(sa.msgs_received, NSMALL + 2);
	assert_int_equal(sa.bytes_sent, sb.bytes_received);
	assert_int_equal(sb.bytes_sent, sa.bytes_received);
	assert_true(sa.bytes_sent > RGAPSD_PEER_MSG_MAX + BIG_LEN);
	assert_true(sa.pings_sent >= sa.pongs_received && sa.pongs_received >= 2);
	assert_true(sa.rtt_ms >= 0 && sa.rtt_ms < 1000);
	ma = side_stats(&fx.a);
	mb = side_stats(&fx.b);
	assert_int_equal(ma.auth_failures + mb.auth_failures, 0);
	assert_int_equal(ma.protocol_errors + mb.protocol_errors, 0);
	assert_int_equal(ma.unknown_peers + mb.unknown_peers, 0);
	assert_true(ma.accepted >= 1 && mb.accepted >= 1);

	/* A stops: its peer_down comes inside stop, B's when the BYE arrives. */
	side_stop(&fx.a);
	assert_int_equal(fx.a.downs, 1);
	assert_string_equal(fx.a.down_why, "shutting down");
	if (!run_until(&fx, b_down, 3000))
		fail_msg("B did not see A go");
	assert_non_null(strstr(fx.b.down_why, "shutting down"));
	fx_finish(&fx);
	assert_int_equal(fx.a.downs, 1);
	assert_int_equal(fx.b.downs, 1);
}

static bool a_up(struct fx *fx)
{
	return fx->a.up;
}

static bool a_saw_down(struct fx *fx)
{
	return fx->a.downs >= 1;
}

static bool small_refused(struct fx *fx)
{
	return side_stats(&fx->a).unknown_peers + side_stats(&fx->b).unknown_peers >= 2;
}

/*
 * Peers a membership source adds and drops at run time: of two discovered daemons only
 * the smaller name connects (one connection, no duplicate); a refusal because the other
 * has not learned of us yet is asked again at once; a dropped peer's session ends
 * (peer_down, then peer_gone) and the other side, which does not dial, stays down; the
 * peer can be added again.
 */
static void test_discovered_peers(void **state)
{
	struct fx fx;
	struct side *small, *big;
	struct rgapsd_peer *p;

	fx_init(&fx);
	fx.a.npeers = fx.b.npeers = 0;
	side_start(&fx.a);
	side_start(&fx.b);
	small = strcmp(fx.a.name, fx.b.name) < 0 ? &fx.a : &fx.b;
	big = small == &fx.a ? &fx.b : &fx.a;
	assert_int_equal(rgapsd_peers_count(small->pm), 0);
	assert_int_equal(rgapsd_peers_add(small->pm, small->name, RGAPSD_PEER_DISCOVERED, true),
			 -EEXIST);
	assert_int_equal(rgapsd_peers_add(small->pm, "nohost", RGAPSD_PEER_DISCOVERED, true),
			 -EINVAL);
	assert_int_equal(rgapsd_peers_add(small->pm, big->name, RGAPSD_PEER_STATIC, true), -EINVAL);
	assert_int_equal(rgapsd_peers_drop(small->pm, big->name, RGAPSD_PEER_DISCOVERED, "x"),
			 -ENOENT);

	/* The smaller learns of the bigger first and is refused: unknown there. */
	assert_int_equal(rgapsd_peers_add(small->pm, big->name, RGAPSD_PEER_DISCOVERED, true), 0);
	if (!run_until(&fx, small_refused, 5000))
		fail_msg("the smaller daemon was never refused as unknown");
	assert_int_equal(rgapsd_peers_add(big->pm, small->name, RGAPSD_PEER_DISCOVERED, false), 0);
	assert_int_equal(rgapsd_peers_add(big->pm, small->name, RGAPSD_PEER_DISCOVERED, false), 0);
	if (!run_until(&fx, both_up, 5000))
		fail_msg("the discovered peers did not come up");
	assert_true(small->last_initiator);
	assert_false(big->last_initiator);
	assert_int_equal(side_stats(small).duplicates_closed + side_stats(big).duplicates_closed, 0);
	p = side_peer(small);
	assert_int_equal(rgapsd_peers_count(small->pm), 1);
	assert_int_equal(rgapsd_peer_sources(p), RGAPSD_PEER_DISCOVERED);
	assert_true(rgapsd_peer_dials(p));
	assert_false(rgapsd_peer_dials(side_peer(big)));
	assert_true(rgapsd_peer_id(p) == rgapsd_peers_id(big->pm));
	assert_true(rgapsd_peer_id(side_peer(big)) == rgapsd_peers_name_id(small->name));
	assert_true(rgapsd_peers_id(small->pm) != rgapsd_peers_id(big->pm));
	assert_string_equal(rgapsd_peers_name(small->pm), small->name);

	/* Dropped by the smaller: peer_down, then peer_gone; the bigger does not dial. */
	assert_int_equal(rgapsd_peers_drop(small->pm, big->name, RGAPSD_PEER_DISCOVERED,
					   "its key is gone"), 0);
	assert_int_equal(small->downs, 1);
	assert_int_equal(small->gones, 1);
	assert_string_equal(small->down_why, "its key is gone");
	assert_int_equal(rgapsd_peers_count(small->pm), 0);
	assert_null(side_peer(small));
	assert_int_equal(rgapsd_peers_drop(small->pm, big->name, RGAPSD_PEER_DISCOVERED, "x"),
			 -ENOENT);
	if (!run_until(&fx, small == &fx.a ? b_down : a_saw_down, 3000))
		fail_msg("the bigger daemon did not see the session end");
	assert_non_null(strstr(big->down_why, "its key is gone"));
	run_for(&fx, 500);
	assert_int_equal(big->ups, 1);
	assert_int_equal(peer_stats(big).reconnects, 0);

	/* Known again: up again. */
	assert_int_equal(rgapsd_peers_add(small->pm, big->name, RGAPSD_PEER_DISCOVERED, true), 0);
	if (!run_until(&fx, both_up, 5000))
		fail_msg("the peers did not come up again");
	assert_int_equal(small->ups, 2);
	assert_int_equal(big->ups, 2);
	fx_finish(&fx);
	assert_int_equal(big->gones, 0);
}

/* A peer dropped while we connect to it (its handshake in flight) goes cleanly. */
static void test_drop_while_connecting(void **state)
{
	struct fx fx;

	fx_init(&fx);
	fx.a.npeers = fx.b.npeers = 0;
	side_start(&fx.a);
	side_start(&fx.b);
	fx.frozen = true; /* B accepts in the kernel but never answers */
	assert_int_equal(rgapsd_peers_add(fx.a.pm, fx.b.name, RGAPSD_PEER_DISCOVERED, true), 0);
	run_for(&fx, 200);
	assert_int_equal(rgapsd_peers_drop(fx.a.pm, fx.b.name, RGAPSD_PEER_DISCOVERED, "gone"), 0);
	assert_int_equal(fx.a.downs, 0);
	assert_int_equal(fx.a.gones, 1); /* never up: no peer_down, but peer_gone all the same */
	run_for(&fx, 200);
	fx.frozen = false;
	run_for(&fx, 200);
	assert_false(a_up(&fx));
	fx_finish(&fx);
}

static bool auth_failed_both(struct fx *fx)
{
	return side_stats(&fx->a).auth_failures >= 2 && side_stats(&fx->b).auth_failures >= 2 &&
	       peer_stats(&fx->a).reconnects >= 1;
}

static void test_wrong_key(void **state)
{
	struct fx fx;

	fx_init(&fx);
	fx.b.key[5] ^= 1;
	side_start(&fx.a);
	side_start(&fx.b);
	if (!run_until(&fx, auth_failed_both, 5000))
		fail_msg("auth failures: A %llu, B %llu",
			 (unsigned long long)side_stats(&fx.a).auth_failures,
			 (unsigned long long)side_stats(&fx.b).auth_failures);
	assert_int_equal(fx.a.ups, 0);
	assert_int_equal(fx.b.ups, 0);
	/* They keep trying, with back-off. */
	assert_true(peer_stats(&fx.a).reconnects >= 1);
	assert_int_equal(peer_stats(&fx.a).sessions, 0);
	fx_finish(&fx);
}

static bool unknown_both(struct fx *fx)
{
	return side_stats(&fx->a).unknown_peers >= 1 && side_stats(&fx->b).unknown_peers >= 1;
}

static void test_unknown_peer(void **state)
{
	struct fx fx;

	fx_init(&fx);
	/* A does not list B (only a daemon that is not there); B lists A. */
	fx.a.npeers = 0;
	side_add_peer(&fx.a, FAKE_NAME);
	side_start(&fx.a);
	side_start(&fx.b);
	if (!run_until(&fx, unknown_both, 5000))
		fail_msg("unknown peers: A %llu, B %llu",
			 (unsigned long long)side_stats(&fx.a).unknown_peers,
			 (unsigned long long)side_stats(&fx.b).unknown_peers);
	run_for(&fx, 300);
	assert_int_equal(fx.a.ups, 0);
	assert_int_equal(fx.b.ups, 0);
	assert_true(side_stats(&fx.a).accepted >= 1);
	assert_int_equal(side_stats(&fx.a).auth_failures, 0);
	/* A's attempts at the absent daemon are counted. */
	assert_true(peer_stats(&fx.a).reconnects >= 1);
	fx_finish(&fx);
}

static bool a_down(struct fx *fx)
{
	return fx->a.downs >= 1;
}

static bool both_up_twice(struct fx *fx)
{
	return fx->a.ups >= 2 && fx->b.ups >= 2 && fx->a.up && fx->b.up;
}

/* B hangs (its loop stops running): A declares it dead after 3 silent intervals. */
static void test_keepalive_freeze(void **state)
{
	struct fx fx;
	uint64_t t0, dt;

	fx_init(&fx);
	fx.a.keepalive_ms = fx.b.keepalive_ms = KA_MS;
	fx_start_pair(&fx);
	run_for(&fx, 2 * KA_MS);
	fx.frozen = true;
	t0 = now_ms();
	if (!run_until(&fx, a_down, 3000))
		fail_msg("A did not notice B hang");
	dt = fx.a.down_ms - t0;
	assert_non_null(strstr(fx.a.down_why, "keepalive timeout"));
	/* Silence counts from B's last frame (<= 1 interval before the freeze). */
	if (dt < 2 * KA_MS - 20 || dt > 3 * KA_MS + 400)
		fail_msg("keepalive timeout after %llu ms (interval %d ms)",
			 (unsigned long long)dt, KA_MS);
	assert_false(rgapsd_peer_is_up(side_peer(&fx.a)));
	/* B wakes up: it learns the session is gone, and both come back. */
	fx.frozen = false;
	if (!run_until(&fx, both_up_twice, 8000))
		fail_msg("no second session (A ups %u downs %u, B ups %u downs %u)", fx.a.ups,
			 fx.a.downs, fx.b.ups, fx.b.downs);
	assert_int_equal(fx.a.downs, 1);
	assert_int_equal(fx.b.downs, 1);
	assert_int_equal(peer_stats(&fx.a).sessions, 2);
	assert_int_equal(peer_stats(&fx.b).sessions, 2);
	assert_true(peer_stats(&fx.a).reconnects + peer_stats(&fx.b).reconnects >= 1);
	fx_finish(&fx);
}

static bool a_up_twice(struct fx *fx)
{
	return fx->a.ups >= 2 && fx->a.up && fx->b.up;
}

static bool lb_idle(struct fx *fx)
{
	return !uv_loop_alive(&fx->lb);
}

/* B stops and a new B starts on the same port: A reconnects with back-off. */
static void test_peer_restart(void **state)
{
	struct fx fx;
	struct rgapsd_peer_stats st;

	fx_init(&fx);
	fx_start_pair(&fx);
	side_stop(&fx.b);
	assert_int_equal(fx.b.downs, 1);
	if (!run_until(&fx, a_down, 3000))
		fail_msg("A did not see B stop");
	assert_non_null(strstr(fx.a.down_why, "shutting down"));
	/* A retries against the closed port meanwhile. */
	run_for(&fx, 600);
	assert_true(run_until(&fx, lb_idle, 3000));
	assert_int_equal(fx.a.ups, 1);
	assert_true(peer_stats(&fx.a).reconnects >= 2);

	/* The new B: same name and port, fresh manager. */
	fx.b.up = false;
	fx.b.ups = fx.b.downs = 0;
	side_start(&fx.b);
	if (!run_until(&fx, a_up_twice, 8000))
		fail_msg("A did not come back up (ups %u)", fx.a.ups);
	st = peer_stats(&fx.a);
	assert_int_equal(st.sessions, 2);
	assert_true(st.up);
	assert_int_equal(fx.a.downs, 1);
	assert_int_equal(fx.b.ups, 1);
	fx_finish(&fx);
}

/* B hangs while A keeps sending: the unsent queue is capped and the session dropped. */
static void test_send_queue_cap(void **state)
{
	struct fx fx;
	struct rgapsd_peer *pa;
	char *big = big_make(RGAPSD_PEER_MSG_MAX);
	unsigned n = 0;
	int rc = 0;

	fx_init(&fx);
	fx_start_pair(&fx);
	pa = side_peer(&fx.a);
	fx.frozen = true;
	fx.a.in_api = true;
	while (n < 300) {
		rc = rgapsd_peer_send(pa, big, RGAPSD_PEER_MSG_MAX);
		if (rc)
			break;
		n++;
	}
	fx.a.in_api = false;
	free(big);
	assert_int_equal(rc, -ENOTCONN);
	/* 64 MiB in libuv's queue, plus what the kernel's buffers took. */
	if (n < 60 || n > 200)
		fail_msg("the session was dropped after %u MiB", n);
	assert_false(rgapsd_peer_is_up(pa));
	assert_int_equal(fx.a.downs, 0); /* posted, not called inside send */
	if (!run_until(&fx, a_down, 3000))
		fail_msg("no peer_down after the queue overflowed");
	assert_non_null(strstr(fx.a.down_why, "does not read"));
	fx.frozen = false;
	if (!run_until(&fx, both_up_twice, 8000))
		fail_msg("no second session (A ups %u, B ups %u)", fx.a.ups, fx.b.ups);
	fx_finish(&fx);
}

static bool both_down(struct fx *fx)
{
	return fx->a.downs >= 1 && fx->b.downs >= 1;
}

static void test_disconnect(void **state)
{
	struct fx fx;
	struct rgapsd_peer *pa;

	fx_init(&fx);
	fx_start_pair(&fx);
	pa = side_peer(&fx.a);
	fx.a.in_api = true;
	rgapsd_peer_disconnect(pa, "the core found it hostile");
	rgapsd_peer_disconnect(pa, "twice is harmless");
	fx.a.in_api = false;
	assert_false(rgapsd_peer_is_up(pa));
	assert_int_equal(rgapsd_peer_send(pa, "{}", 2), -ENOTCONN);
	assert_int_equal(fx.a.downs, 0);
	if (!run_until(&fx, both_down, 3000))
		fail_msg("peer_down missing (A %u, B %u)", fx.a.downs, fx.b.downs);
	assert_string_equal(fx.a.down_why, "the core found it hostile");
	assert_non_null(strstr(fx.b.down_why, "the core found it hostile"));
	/* The peer returns: a new session. */
	if (!run_until(&fx, both_up_twice, 5000))
		fail_msg("no second session");
	assert_int_equal(fx.a.downs, 1);
	assert_int_equal(fx.b.downs, 1);
	fx_finish(&fx);
}

static bool a_down_b_stopped(struct fx *fx)
{
	return fx->a.downs >= 1 && !fx->b.pm;
}

static void test_stop_in_callback(void **state)
{
	struct fx fx;
	struct rgapsd_peer *pa;

	fx_init(&fx);
	fx_start_pair(&fx);
	pa = side_peer(&fx.a);
	fx.b.stop_on_msg = true;
	/* Several frames in one read: nothing after the stop reaches B's core. */
	for (int i = 0; i < 10; i++)
		assert_int_equal(rgapsd_peer_send(pa, "{\"x\":1}", 7), 0);
	if (!run_until(&fx, a_down_b_stopped, 3000))
		fail_msg("A did not see B stop");
	run_for(&fx, 100);
	assert_int_equal(fx.b.msgs, 1);
	assert_int_equal(fx.b.downs, 1);
	fx_finish(&fx);
}

static void test_localhost_names(void **state)
{
	struct fx fx;
	uint16_t pa, pb;

	fx_init(&fx);
	pa = free_port();
	pb = free_port();
	snprintf(fx.a.name, sizeof(fx.a.name), "localhost:%u", pa);
	snprintf(fx.b.name, sizeof(fx.b.name), "localhost:%u", pb);
	fx.a.npeers = fx.b.npeers = 0;
	side_add_peer(&fx.a, fx.b.name);
	side_add_peer(&fx.a, fx.a.name); /* a shared list naming ourselves: skipped */
	side_add_peer(&fx.b, fx.a.name);
	fx_start_pair(&fx);
	assert_string_equal(rgapsd_peer_host(side_peer(&fx.a)), "localhost");
	assert_null(rgapsd_peers_next(fx.a.pm, side_peer(&fx.a)));
	fx_finish(&fx);
}

static void test_ipv6_names(void **state)
{
	struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	socklen_t sl = sizeof(sa);
	uint16_t port[2];
	struct fx fx;

	for (int i = 0; i < 2; i++) {
		int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);

		sa.sin6_port = 0;
		if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			if (fd >= 0)
				close(fd);
			print_message("no IPv6 loopback here: %s\n", strerror(errno));
			skip();
		}
		assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
		port[i] = ntohs(sa.sin6_port);
		close(fd);
	}
	fx_init(&fx);
	snprintf(fx.a.name, sizeof(fx.a.name), "[::1]:%u", port[0]);
	snprintf(fx.b.name, sizeof(fx.b.name), "[::1]:%u", port[1]);
	fx.a.npeers = fx.b.npeers = 0;
	side_add_peer(&fx.a, fx.b.name);
	side_add_peer(&fx.b, fx.a.name);
	fx_start_pair(&fx);
	assert_string_equal(rgapsd_peer_host(side_peer(&fx.a)), "::1");
	assert_int_equal(rgapsd_peer_send(side_peer(&fx.a), "{\"v6\":1}", 8), 0);
	fx_finish(&fx);
}

/* ---- tests: hostile peers -------------------------------------------------------------------- */

/* HELLO as FAKE_NAME; A's HELLO read back into its nonce. 0 or an error recorded. */
static int raw_hello(struct fx *fx, int fd, uint8_t nonce[32], uint8_t a_nonce[32], bool dribble)
{
	uint8_t h[512], f[600], type;
	uint32_t len;
	size_t hl;
	int rc;

	randombytes_buf(nonce, 32);
	hl = hello_build(h, "RGAPSPR1", 1, nonce, FAKE_NAME);
	if (dribble) {
		f[0] = (uint8_t)hl, f[1] = (uint8_t)(hl >> 8), f[2] = f[3] = 0, f[4] = F_HELLO;
		memcpy(f + 5, h, hl);
		for (size_t i = 0; i < hl + 5; i++) {
			rc = send_all(fd, f + i, 1);
			if (rc)
				break;
			usleep(200);
		}
	} else {
		rc = send_frame(fd, F_HELLO, h, (uint32_t)hl);
	}
	if (rc) {
		client_fail(fx, __LINE__, "send HELLO: %s", strerror(-rc));
		return -1;
	}
	rc = recv_frame(fd, &type, h, sizeof(h), &len);
	if (rc != 1 || type != F_HELLO || len != 46 + strlen(fx->a.name) ||
	    memcmp(h, "RGAPSPR1", 8) != 0 || h[8] != 1 || h[9] != 0 ||
	    memcmp(h + 46, fx->a.name, strlen(fx->a.name)) != 0) {
		client_fail(fx, __LINE__, "A's HELLO: rc %d type %u len %u", rc, type, len);
		return -1;
	}
	memcpy(a_nonce, h + 12, 32);
	return 0;
}

/* A whole handshake as FAKE_NAME (the initiator), checking A's proof. */
static int raw_handshake(struct fx *fx, int fd, bool dribble)
{
	uint8_t n[32], an[32], mac[32], b[64], type;
	uint32_t len;
	int rc;

	if (raw_hello(fx, fd, n, an, dribble))
		return -1;
	mac_compute(fx->a.key, fx->a.keylen, 1, FAKE_NAME, fx->a.name, n, an, mac);
	send_frame(fd, F_AUTH, mac, 32);
	rc = recv_frame(fd, &type, b, sizeof(b), &len);
	mac_compute(fx->a.key, fx->a.keylen, 2, fx->a.name, FAKE_NAME, an, n, mac);
	if (rc != 1 || type != F_AUTH || len != 32 || memcmp(b, mac, 32) != 0) {
		client_fail(fx, __LINE__, "A's AUTH: rc %d type %u len %u%s", rc, type, len,
			    rc == 1 && type == F_AUTH ? " (not the documented MAC)" : "");
		return -1;
	}
	rc = recv_frame(fd, &type, b, sizeof(b), &len);
	if (rc != 1 || type != F_AUTH_OK || len != 0) {
		client_fail(fx, __LINE__, "A's AUTH_OK: rc %d type %u len %u", rc, type, len);
		return -1;
	}
	return 0;
}

static void client_hostile(struct fx *fx)
{
	uint8_t h[600], n[32], an[32], zero[32] = { 0 }, buf[1024], type;
	uint32_t len;
	uint64_t t_idle, t;
	int fd, idle, rc;
	size_t hl;

	/* Opened first, says nothing: the first-frame deadline (1 s) closes it. */
	idle = raw_connect(fx->port);
	CHECK(fx, idle >= 0, "connect: %s", strerror(-idle));
	t_idle = now_ms();

	/* An HTTP client: the first four bytes read as a huge length. */
	fd = raw_connect(fx->port);
	CHECK(fx, fd >= 0, "connect: %s", strerror(-fd));
	send_all(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
	expect_error_eof(fx, fd, E_PROTOCOL, "http");
	close(fd);

	/* Bad magic, then a version from the future. */
	fd = raw_connect(fx->port);
	randombytes_buf(n, 32);
	hl = hello_build(h, "RGAPSXX1", 1, n, FAKE_NAME);
	send_frame(fd, F_HELLO, h, (uint32_t)hl);
	expect_error_reason(fx, fd, E_VERSION, "bad magic", "bad magic");
	close(fd);
	fd = raw_connect(fx->port);
	hl = hello_build(h, "RGAPSPR1", 2, n, FAKE_NAME);
	send_frame(fd, F_HELLO, h, (uint32_t)hl);
	expect_error_reason(fx, fd, E_VERSION, "version 2 not supported", "version 2");
	close(fd);

	/* Oversize length before authentication; a MSG before authentication. */
	fd = raw_connect(fx->port);
	memcpy(h, "\xff\xff\xff\xff\x05", 5);
	send_all(fd, h, 5);
	expect_error_reason(fx, fd, E_PROTOCOL, "over the limit of 512", "oversize");
	close(fd);
	fd = raw_connect(fx->port);
	send_frame(fd, F_MSG, "{}", 2);
	expect_error_reason(fx, fd, E_PROTOCOL, "MSG frame (type 5) before HELLO", "msg first");
	close(fd);

	/* Truncated HELLO; a HELLO with trailing bytes; AUTH before HELLO. */
	fd = raw_connect(fx->port);
	send_frame(fd, F_HELLO, "RGAPSPR1\x01\x00", 10);
	expect_error_eof(fx, fd, E_PROTOCOL, "truncated hello");
	close(fd);
	fd = raw_connect(fx->port);
	hl = hello_build(h, "RGAPSPR1", 1, n, FAKE_NAME);
	memset(h + hl, 0, 3);
	send_frame(fd, F_HELLO, h, (uint32_t)hl + 3);
	expect_error_eof(fx, fd, E_PROTOCOL, "hello trailing");
	close(fd);
	fd = raw_connect(fx->port);
	send_frame(fd, F_AUTH, zero, 32);
	expect_error_eof(fx, fd, E_PROTOCOL, "auth first");
	close(fd);

	/* A name that is not in A's list. */
	fd = raw_connect(fx->port);
	hl = hello_build(h, "RGAPSPR1", 1, n, "10.9.9.9:7400");
	send_frame(fd, F_HELLO, h, (uint32_t)hl);
	expect_error_reason(fx, fd, E_UNKNOWN_PEER, "unknown peer 10.9.9.9:7400", "unknown name");
	close(fd);

	/* The right name, a wrong proof; then a proof replayed from another session. */
	fd = raw_connect(fx->port);
	CHECK(fx, raw_hello(fx, fd, n, an, false) == 0, "hello");
	send_frame(fd, F_AUTH, zero, 32);
	expect_error_reason(fx, fd, E_AUTH, "authentication failed", "zero mac");
	close(fd);
	{
		uint8_t old[32];

		/* A valid proof for the last session's nonces is worthless in the next. */
		mac_compute(fx->a.key, fx->a.keylen, 1, FAKE_NAME, fx->a.name, n, an, old);
		fd = raw_connect(fx->port);
		hl = hello_build(h, "RGAPSPR1", 1, n, FAKE_NAME); /* even the same nonce */
		send_frame(fd, F_HELLO, h, (uint32_t)hl);
		rc = recv_frame(fd, &type, buf, sizeof(buf), &len);
		CHECK(fx, rc == 1 && type == F_HELLO, "replay: A's HELLO %d", rc);
		CHECK(fx, memcmp(buf + 12, an, 32) != 0, "A reused its nonce");
		send_frame(fd, F_AUTH, old, 32);
		expect_error_eof(fx, fd, E_AUTH, "replayed mac");
		close(fd);
		/* Reflection: A's own responder proof sent back to it as ours. */
		fd = raw_connect(fx->port);
		CHECK(fx, raw_hello(fx, fd, n, an, false) == 0, "hello");
		mac_compute(fx->a.key, fx->a.keylen, 2, fx->a.name, FAKE_NAME, an, n, old);
		send_frame(fd, F_AUTH, old, 32);
		expect_error_eof(fx, fd, E_AUTH, "reflected mac");
		close(fd);
	}

	/* Three bytes and a hang-up: nothing to answer, A just closes. */
	fd = raw_connect(fx->port);
	send_all(fd, "\x01\x00\x00", 3);
	close(fd);

	if (fx->err[0])
		return;

	/* A real session, the HELLO dribbled a byte at a time. A echoes what we send. */
	fd = raw_connect(fx->port);
	CHECK(fx, fd >= 0, "connect");
	if (raw_handshake(fx, fd, true)) {
		close(fd);
		return;
	}
	send_frame(fd, F_MSG, "{\"hi\":1}", 8);
	rc = recv_frame_np(fd, &type, buf, sizeof(buf), &len, true);
	CHECK(fx, rc == 1 && type == F_MSG && len == 8 && memcmp(buf, "{\"hi\":1}", 8) == 0,
	      "echo: rc %d type %u len %u", rc, type, len);
	/* A ping from us gets its bytes back. */
	send_frame(fd, F_PING, "12345678", 8);
	rc = recv_frame(fd, &type, buf, sizeof(buf), &len);
	while (rc == 1 && type == F_PING)
		rc = recv_frame(fd, &type, buf, sizeof(buf), &len);
	CHECK(fx, rc == 1 && type == F_PONG && len == 8 && memcmp(buf, "12345678", 8) == 0,
	      "pong: rc %d type %u", rc, type);
	/* Now silent: A must give up on us after 3 intervals and say so. */
	t = now_ms();
	while (__atomic_load_n(&fx->a.downs_shared, __ATOMIC_ACQUIRE) < 1 && now_ms() - t < 3000)
		usleep(5000);
	CHECK(fx, fx->a.downs_shared >= 1, "A did not time the silent peer out");
	do
		rc = recv_frame(fd, &type, buf, sizeof(buf), &len);
	while (rc == 1 && type == F_PING);
	CHECK(fx, rc == 1 && type == F_BYE, "expected BYE after the timeout: %d type %u", rc, type);
	buf[len] = '\0';
	CHECK(fx, strstr((char *)buf, "keepalive"), "BYE reason: %s", (char *)buf);
	rc = recv_frame(fd, &type, buf, sizeof(buf), &len);
	CHECK(fx, rc == 0, "expected EOF after BYE: %d", rc);
	close(fd);

	/* More sessions, ended by an oversize MSG, a NUL in a MSG, an unexpected HELLO. */
	fd = raw_connect(fx->port);
	if (raw_handshake(fx, fd, false)) {
		close(fd);
		return;
	}
	memcpy(h, "\x01\x00\x10\x00\x05", 5); /* 1 MiB + 1 */
	send_all(fd, h, 5);
	expect_error_eof(fx, fd, E_PROTOCOL, "oversize msg");
	close(fd);
	fd = raw_connect(fx->port);
	if (raw_handshake(fx, fd, false)) {
		close(fd);
		return;
	}
	send_frame(fd, F_MSG, "{\"a\":\"\0\"}", 9);
	expect_error_eof(fx, fd, E_PROTOCOL, "NUL in MSG");
	close(fd);
	fd = raw_connect(fx->port);
	if (raw_handshake(fx, fd, false)) {
		close(fd);
		return;
	}
	hl = hello_build(h, "RGAPSPR1", 1, n, FAKE_NAME);
	send_frame(fd, F_HELLO, h, (uint32_t)hl);
	expect_error_eof(fx, fd, E_PROTOCOL, "hello in session");
	close(fd);

	/* The idle one: closed with a timeout error for want of a HELLO, not before the
	 * first-frame deadline (1 s by default). */
	set_timeouts(idle, 6000);
	expect_error_reason(fx, idle, E_TIMEOUT, "no whole HELLO", "idle");
	t = now_ms() - t_idle;
	close(idle);
	CHECK(fx, t >= 900, "first-frame timeout after %llu ms", (unsigned long long)t);
}

static void test_hostile_initiators(void **state)
{
	struct fx fx;
	struct rgapsd_peers_stats st;

	fx_init(&fx);
	fx.a.npeers = 0;
	side_add_peer(&fx.a, FAKE_NAME);
	fx.a.echo = true;
	fx.a.keepalive_ms = KA_MS;
	side_start(&fx.a);
	fx.port = (uint16_t)atoi(strchr(fx.a.name, ':') + 1);
	fx_run_client(&fx, client_hostile, 9000);
	st = side_stats(&fx.a);
	/* http, magic, version, oversize, msg, truncated, trailing, auth first, timeout,
	 * oversize msg, NUL in msg, hello in session. */
	if (st.protocol_errors != 12)
		fail_msg("protocol_errors %llu", (unsigned long long)st.protocol_errors);
	assert_int_equal(st.auth_failures, 3);
	assert_int_equal(st.unknown_peers, 1);
	assert_int_equal(st.hello_timeouts, 1);
	assert_int_equal(st.accepted, 18);
	assert_int_equal(fx.a.ups, 4);
	assert_int_equal(fx.a.downs, 4);
	assert_non_null(strstr(fx.a.down_why, "unexpected HELLO"));
	fx_finish(&fx);
}

/* ---- hostile responder: A connects to a raw server ---------------------------------------- */

static int raw_accept(struct fx *fx)
{
	struct pollfd p = { .fd = fx->listen_fd, .events = POLLIN };
	int fd;

	if (poll(&p, 1, 6000) != 1)
		return -ETIMEDOUT;
	fd = accept4(fx->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd >= 0)
		set_timeouts(fd, 5000);
	return fd < 0 ? -errno : fd;
}

/* Accept A, read its HELLO, answer with ours under name. */
static int raw_serve_hello(struct fx *fx, const char *name, uint8_t n[32], uint8_t an[32])
{
	uint8_t h[600], type;
	uint32_t len;
	size_t hl;
	int fd = raw_accept(fx), rc;

	if (fd < 0) {
		client_fail(fx, __LINE__, "accept: %s", strerror(-fd));
		return -1;
	}
	rc = recv_frame(fd, &type, h, sizeof(h), &len);
	if (rc != 1 || type != F_HELLO || len != 46 + strlen(fx->a.name)) {
		client_fail(fx, __LINE__, "A's HELLO: %d type %u", rc, type);
		close(fd);
		return -1;
	}
	memcpy(an, h + 12, 32);
	randombytes_buf(n, 32);
	hl = hello_build(h, "RGAPSPR1", 1, n, name);
	send_frame(fd, F_HELLO, h, (uint32_t)hl);
	return fd;
}

static void client_responder(struct fx *fx)
{
	uint8_t n[32], an[32], mac[32], buf[600], type;
	uint32_t len;
	int fd, rc;

	/* 1: the daemon at the address calls itself something else. */
	fd = raw_serve_hello(fx, "127.0.0.1:9", n, an);
	CHECK(fx, fd >= 0, "serve 1");
	expect_error_reason(fx, fd, E_UNKNOWN_PEER, "calls itself 127.0.0.1:9", "wrong name");
	close(fd);

	/* 2: A's proof is the documented one; ours is wrong. */
	fd = raw_serve_hello(fx, fx->raw_name, n, an);
	CHECK(fx, fd >= 0, "serve 2");
	rc = recv_frame(fd, &type, buf, sizeof(buf), &len);
	mac_compute(fx->a.key, fx->a.keylen, 1, fx->a.name, fx->raw_name, an, n, mac);
	CHECK(fx, rc == 1 && type == F_AUTH && len == 32 && memcmp(buf, mac, 32) == 0,
	      "A's AUTH as initiator: rc %d type %u", rc, type);
	mac[0] ^= 1;
	send_frame(fd, F_AUTH, mac, 32);
	expect_error_eof(fx, fd, E_AUTH, "bad responder mac");
	close(fd);

	/* 3: a verdict before the proof. */
	fd = raw_serve_hello(fx, fx->raw_name, n, an);
	CHECK(fx, fd >= 0, "serve 3");
	rc = recv_frame(fd, &type, buf, sizeof(buf), &len);
	CHECK(fx, rc == 1 && type == F_AUTH, "A's AUTH: %d", rc);
	send_frame(fd, F_AUTH_OK, NULL, 0);
	expect_error_eof(fx, fd, E_PROTOCOL, "early AUTH_OK");
	close(fd);

	/* 4: a proper responder; then a BYE ends the session. */
	fd = raw_serve_hello(fx, fx->raw_name, n, an);
	CHECK(fx, fd >= 0, "serve 4");
	rc = recv_frame(fd, &type, buf, sizeof(buf), &len);
	CHECK(fx, rc == 1 && type == F_AUTH, "A's AUTH: %d", rc);
	mac_compute(fx->a.key, fx->a.keylen, 2, fx->raw_name, fx->a.name, n, an, mac);
	send_frame(fd, F_AUTH, mac, 32);
	send_frame(fd, F_AUTH_OK, NULL, 0);
	send_frame(fd, F_MSG, "{\"from\":\"raw\"}", 14);
	rc = recv_frame_np(fd, &type, buf, sizeof(buf), &len, true);
	CHECK(fx, rc == 1 && type == F_MSG && len == 14, "echo: %d type %u", rc, type);
	send_frame(fd, F_BYE, "test over", 9);
	rc = recv_frame_np(fd, &type, buf, sizeof(buf), &len, false);
	CHECK(fx, rc == 0, "expected EOF after our BYE: %d type %u", rc, type);
	close(fd);
}

static void test_hostile_responder(void **state)
{
	struct fx fx;
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	struct rgapsd_peers_stats st;

	fx_init(&fx);
	/* A's only peer is a raw server on a free port. */
	fx.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fx.listen_fd >= 0);
	assert_int_equal(bind(fx.listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fx.listen_fd, 8), 0);
	assert_int_equal(getsockname(fx.listen_fd, (struct sockaddr *)&sa, &sl), 0);
	snprintf(fx.raw_name, sizeof(fx.raw_name), "127.0.0.1:%u", ntohs(sa.sin_port));
	fx.a.npeers = 0;
	side_add_peer(&fx.a, fx.raw_name);
	fx.a.echo = true;
	side_start(&fx.a);
	fx_run_client(&fx, client_responder, 9000);
	st = side_stats(&fx.a);
	assert_int_equal(st.unknown_peers, 1);
	assert_int_equal(st.auth_failures, 1);
	assert_true(st.protocol_errors >= 1);
	assert_int_equal(fx.a.ups, 1);
	assert_true(fx.a.last_initiator);
	assert_int_equal(fx.a.downs, 1);
	assert_non_null(strstr(fx.a.down_why, "test over"));
	assert_true(peer_stats(&fx.a).reconnects >= 3);
	fx_finish(&fx);
}

/* A connection to port from source address 127.0.0.src. */
static int raw_connect_from(uint16_t port, unsigned src)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_in from = { .sin_family = AF_INET,
				    .sin_addr.s_addr = htonl(0x7f000000u | src) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), err;

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&from, sizeof(from)) < 0 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

/*
 * Strangers that never speak, 10 from each of 127.0.0.2 .. 127.0.0.11 (A's only
 * configured address is 127.0.0.1): left open for the test to close.
 */
enum { FLOOD_SOURCES = 10, FLOOD_PER_SOURCE = 10 };

static void client_flood(struct fx *fx)
{
	for (unsigned s = 0; s < FLOOD_SOURCES; s++) {
		for (unsigned i = 0; i < FLOOD_PER_SOURCE; i++) {
			int fd = raw_connect_from(fx->port, 2 + s);

			if (fd < 0) {
				client_fail(fx, __LINE__, "connect from 127.0.0.%u: %s", 2 + s,
					    strerror(-fd));
				return;
			}
			fx->flood[fx->nflood++] = fd;
		}
	}
}

static bool b_up(struct fx *fx)
{
	struct rgapsd_peer *p = side_peer(&fx->b);

	return p && rgapsd_peer_is_up(p);
}

static bool a_accepted_flood(struct fx *fx)
{
	return side_stats(&fx->a).accepted >= FLOOD_SOURCES * FLOOD_PER_SOURCE;
}

/*
 * Pending connections: at most 8 per source address and 64 in all for strangers
 * (the rest closed at once, counted); B, from a configured peer's address, still
 * comes up while the strangers hold every place, in place of the oldest of them.
 */
static void test_pending_limit(void **state)
{
	struct fx fx;
	struct rgapsd_peers_stats st;

	fx_init(&fx);
	fx.a.hello_ms = 30000; /* the flood stays pending for the whole test */
	side_start(&fx.a);
	fx.port = (uint16_t)atoi(strchr(fx.a.name, ':') + 1);
	fx_run_client(&fx, client_flood, 5000);
	if (!run_until(&fx, a_accepted_flood, 5000))
		fail_msg("A accepted %llu of %d connections",
			 (unsigned long long)side_stats(&fx.a).accepted,
			 FLOOD_SOURCES * FLOOD_PER_SOURCE);
	st = side_stats(&fx.a);
	/* 127.0.0.2 .. .9: 8 kept and 2 refused each (64 kept); .10 and .11: all refused. */
	assert_int_equal(st.pending_refused_source, 8 * 2);
	assert_int_equal(st.pending_refused, 2 * FLOOD_PER_SOURCE);
	assert_int_equal(st.pending_evicted, 0);
	/* B connects from 127.0.0.1, A's configured peer's address: admitted, comes up. */
	side_start(&fx.b);
	if (!run_until(&fx, b_up, 5000))
		fail_msg("B did not come up while strangers held A's pending places");
	st = side_stats(&fx.a);
	assert_true(st.pending_evicted >= 1);
	assert_int_equal(st.hello_timeouts, 0);
	for (int i = 0; i < fx.nflood; i++)
		close(fx.flood[i]);
	fx_finish(&fx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_hostport),
		cmocka_unit_test(test_load_key),
		cmocka_unit_test(test_start_errors),
		cmocka_unit_test(test_pair_exchange),
		cmocka_unit_test(test_wrong_key),
		cmocka_unit_test(test_unknown_peer),
		cmocka_unit_test(test_keepalive_freeze),
		cmocka_unit_test(test_peer_restart),
		cmocka_unit_test(test_send_queue_cap),
		cmocka_unit_test(test_disconnect),
		cmocka_unit_test(test_stop_in_callback),
		cmocka_unit_test(test_localhost_names),
		cmocka_unit_test(test_ipv6_names),
		cmocka_unit_test(test_hostile_initiators),
		cmocka_unit_test(test_hostile_responder),
		cmocka_unit_test(test_pending_limit),
		cmocka_unit_test(test_discovered_peers),
		cmocka_unit_test(test_drop_while_connecting),
	};
	const char *lvl = getenv("RGAPS_LOG_LEVEL");

	signal(SIGPIPE, SIG_IGN);
	rgaps__log_level = lvl ? rgaps__log_level_parse(lvl) : RGAPS_LOG_ERROR;
	if (rgaps__log_level < 0)
		rgaps__log_level = RGAPS_LOG_ERROR;
	assert_true(sodium_init() >= 0);
	{
		/* libuv opens process-wide descriptors at its first loop: not a leak of a test. */
		uv_loop_t l;

		assert_int_equal(uv_loop_init(&l), 0);
		assert_int_equal(uv_loop_close(&l), 0);
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
