/*
 * The attacker of tests/integration/attack_objects.sh: a client that speaks the
 * control protocol itself, so that it holds the very descriptors rgapsd hands
 * out (librgaps maps them and closes most), and attacks the objects rather
 * than their bytes (docs/SECURITY.md, "The objects"):
 *
 *   shrink TOPIC pub|sub SECONDS
 *       attach; on its own read-write fds, before saying "mapped": shrink, grow,
 *       write past the end, punch the whole object full of holes, then say
 *       "mapped" (refused: the attach is over). Attach again, back its memory
 *       whole and say "mapped"; then, on its own fds: shrink, punch,
 *       MADV_REMOVE, map writable again, add seals; on every read-only fd (the
 *       header, the members'): shrink, punch, reopen read-write through /proc,
 *       map writable, add seals. Then it stays SECONDS, attached, and leaves
 *       without a word (the kernel closes its connection).
 *   ask TOPIC
 *       attach as a subscriber and print rgapsd's reply as it came (what a
 *       client learns of a topic from its name alone), then leave.
 *   fence TOPIC N SECONDS
 *       attach as a publisher (host memory) and publish N stream-ordered
 *       messages whose fence slots all hold a host fence handle naming a file
 *       of its own in /dev/shm (empty, mode 0666): a backend that opened what a
 *       handle names would map it and die of SIGBUS at the first read, in every
 *       subscriber and in rgapsd's forwarder. Then it stays SECONDS.
 *
 * Each attempt that must fail and did not is a line "FAIL: ..."; the summary
 * line "objects: N attempts refused, M allowed as they should be" ends a run.
 * Exit 0 when every attack was refused as it must be, 1 when one got through,
 * 2 when it could not attach at all.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <linux/falloc.h>

#include "../../src/common/frame.h"
#include "../../src/common/topic.h"

#define MAX_FDS 32

static int failures, refused, allowed;

/* An attempt that must fail: rc < 0. */
static void must_fail(int rc, const char *what, int fd)
{
	if (rc < 0) {
		refused++;
		return;
	}
	failures++;
	printf("FAIL: %s on fd %d succeeded\n", what, fd);
}

/* An attempt the owner may make: rc == 0. */
static void must_work(int rc, const char *what, int fd)
{
	if (rc == 0) {
		allowed++;
		return;
	}
	failures++;
	printf("FAIL: %s on fd %d: %s\n", what, fd, strerror(errno));
}

static int dial(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct timeval tv = { .tv_sec = 10 };

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", getenv("RGAPS_SOCKET"));
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("objects: connect");
		exit(2);
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* One request and its reply (parsed), with the fds that came with it. NULL on EOF. */
static cJSON *request(int sock, const char *json, int *fds, int *nfds_p)
{
	static struct rgaps_frame_reader rd;
	uint8_t hdr[RGAPS_FRAME_HDR];
	const uint8_t *payload;
	size_t len;

	*nfds_p = 0;
	rgaps__frame_header(hdr, (uint32_t)strlen(json));
	if (send(sock, hdr, sizeof(hdr), MSG_NOSIGNAL) != (ssize_t)sizeof(hdr) ||
	    send(sock, json, strlen(json), MSG_NOSIGNAL) != (ssize_t)strlen(json))
		return NULL;
	rgaps__frame_reader_init(&rd);
	while (rgaps__frame_reader_next(&rd, &payload, &len) != 1) {
		char cbuf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
		struct iovec iov;
		struct msghdr mh = { .msg_iov = &iov,
				     .msg_iovlen = 1,
				     .msg_control = cbuf,
				     .msg_controllen = sizeof(cbuf) };
		uint8_t *space;
		ssize_t n;

		rgaps__frame_reader_space(&rd, &space, &len);
		iov = (struct iovec){ space, len };
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
		if (n <= 0)
			return NULL;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			for (size_t i = 0;
			     i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int) && *nfds_p < MAX_FDS;
			     i++)
				memcpy(&fds[(*nfds_p)++], CMSG_DATA(c) + i * sizeof(int),
				       sizeof(int));
		}
		rgaps__frame_reader_commit(&rd, (size_t)n);
	}
	return cJSON_ParseWithLength((const char *)payload, len);
}

static bool ok_reply(const cJSON *r)
{
	return r && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok"));
}

static off_t size_of(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 ? st.st_size : -1;
}

/*
 * Its own memory, before "mapped": nobody can resize it; its owner may punch it
 * (punch), or back it whole, as librgaps does.
 */
static void attack_own_made(int fd, void **map_p, bool punch)
{
	off_t size = size_of(fd);

	must_fail(ftruncate(fd, 0), "shrinking its own object to 0", fd);
	must_fail(ftruncate(fd, size / 2), "shrinking its own object by half", fd);
	must_fail(ftruncate(fd, size * 2), "growing its own object", fd);
	must_fail(pwrite(fd, "x", 1, size) == 1 ? 0 : -1, "writing past its own object's end", fd);
	*map_p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	must_work(*map_p == MAP_FAILED ? -1 : 0, "mapping its own object writable", fd);
	if (punch) /* allowed until "mapped", which then refuses the holes */
		must_work(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, size),
			  "punching holes in its own object before sealing", fd);
	else
		must_work(fallocate(fd, 0, 0, size), "backing its own object", fd);
}

/* Its own memory, sealed: still written through its mapping, never resized or punched. */
static void attack_own_sealed(int fd, void *map)
{
	off_t size = size_of(fd);
	struct stat st;
	void *again;

	must_fail(ftruncate(fd, 0), "shrinking its own sealed object", fd);
	must_fail(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, size),
		  "punching its own sealed object", fd);
	if (map != MAP_FAILED) {
		must_fail(madvise(map, (size_t)size, MADV_REMOVE), "MADV_REMOVE on its own mapping",
			  fd);
		memset(map, 0xa5, 64);
		allowed++; /* it wrote its own memory through its mapping */
	}
	again = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	must_fail(again == MAP_FAILED ? -1 : 0, "mapping its own sealed object writable again", fd);
	if (again != MAP_FAILED)
		munmap(again, (size_t)size);
	must_fail(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), "adding a seal to its own object", fd);
	/* Every page still there: none could be taken out. */
	if (fstat(fd, &st) == 0 && (off_t)st.st_blocks * 512 >= size) {
		allowed++;
	} else {
		failures++;
		printf("FAIL: fd %d: %lld of %lld bytes allocated after sealing\n", fd,
		       (long long)st.st_blocks * 512, (long long)size);
	}
}

/* Someone else's memory (or rgapsd's header): read-only, whatever it tries. */
static void attack_read_only(int fd)
{
	off_t size = size_of(fd);
	char path[64];
	struct stat st;
	void *p;
	int other;

	must_fail(ftruncate(fd, 0), "shrinking a read-only object", fd);
	must_fail(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, size),
		  "punching a read-only object", fd);
	p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	must_fail(p == MAP_FAILED ? -1 : 0, "mapping a read-only object writable", fd);
	if (p != MAP_FAILED)
		munmap(p, (size_t)size);
	p = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
	if (p != MAP_FAILED) {
		must_fail(mprotect(p, (size_t)size, PROT_READ | PROT_WRITE),
			  "mprotect of a read-only mapping", fd);
		munmap(p, (size_t)size);
	}
	must_fail(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), "adding a seal to a read-only object", fd);
	/* Another user: the object's mode (0600) refuses a read-write reopen. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	other = open(path, O_RDWR);
	if (fstat(fd, &st) == 0 && st.st_uid != getuid())
		must_fail(other, "reopening a read-only object read-write", fd);
	if (other >= 0)
		close(other);
}

/* The fds a "members" array names (indices into the reply's fds). */
static void attack_members(const cJSON *reply, const int *fds, int nfds)
{
	const cJSON *o, *m = cJSON_GetObjectItemCaseSensitive(reply, "members");

	cJSON_ArrayForEach(o, m)
	{
		const char *keys[] = { "fd", "pool_fd" };

		for (int k = 0; k < 2; k++) {
			const cJSON *i = cJSON_GetObjectItemCaseSensitive(o, keys[k]);

			if (cJSON_IsNumber(i) && i->valueint >= 0 && i->valueint < nfds)
				attack_read_only(fds[i->valueint]);
		}
	}
}

/* hello and attach: the fds of its own memory (header, region, a publisher's pool). */
static int attach_raw(const char *topic, const char *role, int *fds, int *nfds_p)
{
	int sock = dial();
	char req[256];
	cJSON *r;

	r = request(sock, "{\"type\":\"hello\",\"version\":2}", fds, nfds_p);
	if (!ok_reply(r)) {
		fprintf(stderr, "objects: hello refused\n");
		exit(2);
	}
	cJSON_Delete(r);
	snprintf(req, sizeof(req), "{\"type\":\"attach\",\"topic\":\"%s\",\"role\":\"%s\"}", topic,
		 role);
	r = request(sock, req, fds, nfds_p);
	if (!ok_reply(r) || *nfds_p < 2) {
		fprintf(stderr, "objects: attach refused (%d fds)\n", *nfds_p);
		exit(2);
	}
	cJSON_Delete(r);
	return sock;
}

static int cmd_shrink(const char *topic, const char *role, double seconds)
{
	int fds[MAX_FDS], nfds, mfds[MAX_FDS], nm, own = 0, sock;
	void *maps[2] = { MAP_FAILED, MAP_FAILED };
	cJSON *r;

	/* First its memory full of holes: "mapped" must refuse it, and the attach is over. */
	sock = attach_raw(topic, role, fds, &nfds);
	attack_read_only(fds[0]);
	for (int i = 1; i < nfds && own < 2; i++)
		attack_own_made(fds[i], &maps[own++], true);
	r = request(sock, "{\"type\":\"mapped\"}", mfds, &nm);
	must_fail(ok_reply(r) ? 0 : -1, "saying mapped over memory with holes", fds[1]);
	cJSON_Delete(r);
	close(sock);
	for (int i = 0; i < own; i++)
		if (maps[i] != MAP_FAILED)
			munmap(maps[i], (size_t)size_of(fds[1 + i]));
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	/* Then as librgaps does: back it whole, say "mapped", and attack the sealed objects. */
	own = 0;
	sock = attach_raw(topic, role, fds, &nfds);
	attack_read_only(fds[0]);
	for (int i = 1; i < nfds && own < 2; i++)
		attack_own_made(fds[i], &maps[own++], false);
	r = request(sock, "{\"type\":\"mapped\"}", mfds, &nm);
	if (!ok_reply(r)) {
		char *t = r ? cJSON_PrintUnformatted(r) : NULL;

		fprintf(stderr, "objects: mapped refused: %s\n", t ? t : "EOF");
		return 2;
	}
	for (int i = 1; i < 1 + own; i++)
		attack_own_sealed(fds[i], maps[i - 1]);
	attack_members(r, mfds, nm);
	cJSON_Delete(r);
	printf("objects: %d attempts refused, %d allowed as they should be; staying %.1f s\n",
	       refused, allowed, seconds);
	fflush(stdout);
	usleep((useconds_t)(seconds * 1e6));
	_exit(failures ? 1 : 0); /* no detach: the kernel closes the connection */
}

static int cmd_ask(const char *topic)
{
	int sock = dial(), fds[MAX_FDS], nfds;
	char req[256], *text;
	cJSON *r;

	cJSON_Delete(request(sock, "{\"type\":\"hello\",\"version\":2}", fds, &nfds));
	snprintf(req, sizeof(req), "{\"type\":\"attach\",\"topic\":\"%s\",\"role\":\"sub\"}",
		 topic);
	r = request(sock, req, fds, &nfds);
	text = r ? cJSON_PrintUnformatted(r) : NULL;
	printf("%s\n", text ? text : "EOF");
	free(text);
	cJSON_Delete(r);
	return r ? 0 : 2;
}

/* A host fence handle as the backend once made them: magic, then a path to open. */
#define OLD_HOST_FENCE_MAGIC "RGHF1"

static int cmd_fence(const char *topic, long n, double seconds)
{
	int fds[MAX_FDS], nfds, mfds[MAX_FDS], nm, sock = attach_raw(topic, "pub", fds, &nfds);
	struct rgaps_topic_limits lim;
	struct rgaps_topic_cbs cbs = { 0 };
	uint8_t handle[RGAPS_FENCE_BYTES] = OLD_HOST_FENCE_MAGIC;
	struct rgaps_pub_region *region;
	struct rgaps_pub *pub;
	void *hdr, *pool;
	char path[64];
	uint32_t nfences;
	long sent = 0;
	cJSON *r;
	int f;

	hdr = mmap(NULL, (size_t)size_of(fds[0]), PROT_READ, MAP_SHARED, fds[0], 0);
	if (nfds < 3 || hdr == MAP_FAILED ||
	    rgaps__topic_hdr_validate(hdr, (size_t)size_of(fds[0]), &lim) ||
	    size_of(fds[2]) != (off_t)lim.pool_size) {
		fprintf(stderr, "objects: not a host topic, or its header does not validate\n");
		return 2;
	}
	region = mmap(NULL, lim.pub_region_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
	pool = mmap(NULL, lim.pool_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[2], 0);
	if (region == MAP_FAILED || pool == MAP_FAILED ||
	    fallocate(fds[2], 0, 0, (off_t)lim.pool_size)) {
		fprintf(stderr, "objects: cannot map and back its memory\n");
		return 2;
	}
	r = request(sock, "{\"type\":\"mapped\"}", mfds, &nm);
	if (!ok_reply(r)) {
		fprintf(stderr, "objects: mapped refused\n");
		return 2;
	}
	cJSON_Delete(r);
	/* The file its handles name: empty, anyone may map it read-write. */
	snprintf(path, sizeof(path), "/dev/shm/rgaps-hostfence-%d-0", (int)getpid());
	umask(0);
	f = open(path, O_CREAT | O_RDWR | O_TRUNC, 0666);
	if (f < 0) {
		perror(path);
		return 2;
	}
	close(f);
	snprintf((char *)handle + 8, sizeof(handle) - 8, "%s", path + 8);
	nfences = rgaps__topic_nfences(&lim);
	for (uint32_t k = 0; k < nfences; k++)
		memcpy(rgaps__pub_fence_handle(&lim, region, k), handle, sizeof(handle));
	__atomic_store_n(&region->nfences, nfences, __ATOMIC_RELEASE);
	if (rgaps__pub_create(hdr, &lim, region, pool, &cbs, &pub)) {
		fprintf(stderr, "objects: cannot publish over its region\n");
		unlink(path);
		return 2;
	}
	for (long i = 0; i < n; i++) {
		struct rgaps_pub_commit c = { .has_fence = true, .fence = (uint32_t)(i % nfences) };
		uint32_t token;
		uint64_t off;

		if (rgaps__pub_loan(pub, 4096, 100, &token, &off))
			continue;
		memset((uint8_t *)pool + off, 0x5a, 4096);
		if (rgaps__pub_commit(pub, token, 4096, &c, 100, false, NULL) == 0)
			sent++;
		usleep(2000);
	}
	printf("objects: %ld messages fenced by handles naming %s; staying %.1f s\n", sent, path,
	       seconds);
	fflush(stdout);
	usleep((useconds_t)(seconds * 1e6));
	unlink(path);
	_exit(sent == n ? 0 : 1);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && strcmp(argv[1], "shrink") == 0)
		return cmd_shrink(argv[2], argv[3], atof(argv[4]));
	if (argc == 3 && strcmp(argv[1], "ask") == 0)
		return cmd_ask(argv[2]);
	if (argc == 5 && strcmp(argv[1], "fence") == 0)
		return cmd_fence(argv[2], atol(argv[3]), atof(argv[4]));
	fprintf(stderr, "usage: itest-objects shrink TOPIC pub|sub SECONDS | ask TOPIC | "
			"fence TOPIC N SECONDS\n");
	return 2;
}
