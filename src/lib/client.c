/*
 * librgaps: talking to rgapsd over its Unix control socket, and attaching a
 * handle to a topic (see client.h). Requests are rare (attach, detach,
 * queries), so this side is plain blocking I/O with poll() timeouts.
 */
#include "client.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../common/errors.h"
#include "../common/frame.h"
#include "../common/futex.h"
#include "../common/log.h"
#include "../common/shm.h"
#include "fences.h"
#include "members.h"
#include "reply.h"
#include "rgaps_build_config.h"

const char *rgaps__socket_path(void)
{
	const char *p = getenv("RGAPS_SOCKET");

	return (p && *p) ? p : RGAPS_DEFAULT_SOCKET;
}

static int poll_fd(int fd, short ev, uint64_t deadline)
{
	for (;;) {
		uint64_t now = rgaps_now_ns(CLOCK_MONOTONIC);
		struct pollfd p = { .fd = fd, .events = ev };
		int r;

		if (now >= deadline)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)((deadline - now) / 1000000) + 1);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

static int send_all(int fd, const uint8_t *buf, size_t len, uint64_t deadline)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0) {
			int r;

			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				return errno == EPIPE ? -ENOTCONN : -errno;
			r = poll_fd(fd, POLLOUT, deadline);
			if (r)
				return r;
			continue;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Receive one frame, collecting fds. Frames and fds are small: one reader per call. */
static int recv_frame(int fd, struct rgaps_frame_reader *rd, uint64_t deadline, int *fds,
		      int *nfds_p, const uint8_t **payload_p, size_t *len_p)
{
	int max_fds = *nfds_p, nfds = 0, r;

	for (;;) {
		union {
			char buf[CMSG_SPACE(MAX_FDS * sizeof(int))];
			struct cmsghdr align;
		} cbuf;
		struct msghdr mh = { 0 };
		struct iovec iov;
		uint8_t *space;
		size_t room;
		ssize_t n;

		r = rgaps__frame_reader_next(rd, payload_p, len_p);
		if (r < 0)
			return -EPROTO;
		if (r == 1) {
			*nfds_p = nfds;
			return 0;
		}
		rgaps__frame_reader_space(rd, &space, &room);
		iov.iov_base = space;
		iov.iov_len = room;
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = cbuf.buf;
		mh.msg_controllen = sizeof(cbuf.buf);
		n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN) {
				r = -errno;
				goto err;
			}
			r = poll_fd(fd, POLLIN, deadline);
			if (r)
				goto err;
			continue;
		}
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			int *p = (int *)CMSG_DATA(c);
			size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			for (size_t i = 0; i < k; i++) {
				if (nfds < max_fds)
					fds[nfds++] = p[i];
				else
					close(p[i]);
			}
		}
		if (n == 0) {
			r = -ENOTCONN;
			goto err;
		}
		rgaps__frame_reader_commit(rd, (size_t)n);
	}
err:
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	return r;
}

static int request(int fd, cJSON *req, int timeout_ms, cJSON **reply_p, int *fds, int *nfds_p,
		   bool keep_error_reply)
{
	uint64_t deadline = rgaps_now_ns(CLOCK_MONOTONIC) + (uint64_t)timeout_ms * 1000000ull;
	struct rgaps_frame_reader *rd = NULL;
	uint8_t *out = NULL;
	const uint8_t *payload;
	cJSON *reply = NULL, *ok;
	char *text;
	size_t len;
	int nfds = fds ? *nfds_p : 0, r;

	text = cJSON_PrintUnformatted(req);
	if (!text)
		return -ENOMEM;
	len = strlen(text);
	if (len > RGAPS_FRAME_MAX) {
		r = -EMSGSIZE;
		goto out;
	}
	out = malloc(RGAPS_FRAME_HDR + len);
	rd = malloc(sizeof(*rd));
	if (!out || !rd) {
		r = -ENOMEM;
		goto out;
	}
	rgaps__frame_header(out, (uint32_t)len);
	memcpy(out + RGAPS_FRAME_HDR, text, len);
	r = send_all(fd, out, RGAPS_FRAME_HDR + len, deadline);
	if (r)
		goto out;
	rgaps__frame_reader_init(rd);
	r = recv_frame(fd, rd, deadline, fds, &nfds, &payload, &len);
	if (r)
		goto out;
	reply = cJSON_ParseWithLength((const char *)payload, len);
	if (!reply || !cJSON_IsObject(reply)) {
		r = -EPROTO;
		goto err_fds;
	}
	ok = cJSON_GetObjectItemCaseSensitive(reply, "ok");
	if (!cJSON_IsTrue(ok)) {
		cJSON *err = cJSON_GetObjectItemCaseSensitive(reply, "error");
		cJSON *code = cJSON_GetObjectItemCaseSensitive(err, "code");
		cJSON *msg = cJSON_GetObjectItemCaseSensitive(err, "message");

		r = -rgaps__errcode_errno(cJSON_IsString(code) ? code->valuestring : NULL);
		rgaps_debug("rgapsd refused the request: %s: %s",
			    cJSON_IsString(code) ? code->valuestring : "?",
			    cJSON_IsString(msg) ? msg->valuestring : "?");
		/* rgapsd's own words, with the text of the errno, for rgaps_strerror() */
		if (cJSON_IsString(msg)) {
			rgaps__reason_clear();
			rgaps__reason_set(r, "%s (rgapsd: %.400s)", rgaps_strerror(r),
					  msg->valuestring);
		}
		if (keep_error_reply) {
			*reply_p = reply;
			reply = NULL;
		}
		goto err_fds;
	}
	if (fds)
		*nfds_p = nfds;
	*reply_p = reply;
	reply = NULL;
	r = 0;
	goto out;
err_fds:
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
out:
	cJSON_Delete(reply);
	free(rd);
	free(out);
	free(text);
	return r;
}

int rgaps__request(int fd, cJSON *req, int timeout_ms, cJSON **reply_p, int *fds, int *nfds_p)
{
	return request(fd, req, timeout_ms, reply_p, fds, nfds_p, false);
}

static int request_raw(int fd, cJSON *req, int timeout_ms, cJSON **reply_p)
{
	return request(fd, req, timeout_ms, reply_p, NULL, NULL, true);
}

int rgaps__connect(void)
{
	const char *path = rgaps__socket_path();
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	cJSON *req, *reply = NULL;
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -rgaps__connect_failed(ENAMETOOLONG, path);
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		/* The cause in words for rgaps_strerror(); EACCES becomes EPERM (errors.h). */
		r = -rgaps__connect_failed(errno, path);
		rgaps_debug("%s", rgaps__reason_text(r));
		close(fd);
		return r;
	}
	req = cJSON_CreateObject();
	cJSON_AddStringToObject(req, "type", "hello");
	cJSON_AddNumberToObject(req, "version", RGAPS_PROTOCOL_VERSION);
	cJSON_AddStringToObject(req, "client", "librgaps " RGAPS_VERSION);
	r = rgaps__request(fd, req, REQUEST_TIMEOUT_MS, &reply, NULL, NULL);
	cJSON_Delete(req);
	cJSON_Delete(reply);
	if (r == -ECONNRESET || r == -ENOTCONN || r == -ETIMEDOUT) {
		/* Hung up or silent before its hello reply: told like a failed connect. */
		r = -rgaps__connect_failed(-r, path);
		rgaps_debug("%s", rgaps__reason_text(r));
	} else {
		rgaps__reason_clear(); /* the daemon answered: its own code says the rest */
	}
	if (r) {
		close(fd);
		return r;
	}
	return fd;
}

/* ---------------------------------------------------------------- attach */

static int gpu_path_of(const char *s)
{
	if (s && strcmp(s, "peer") == 0)
		return RGAPS_GPU_PATH_PEER;
	if (s && strcmp(s, "replica") == 0)
		return RGAPS_GPU_PATH_REPLICA;
	return RGAPS_GPU_PATH_LOCAL;
}

/*
 * What rgapsd's attach reply says of our memory: the header's size, the pools'
 * GPU and ours (by PCI address where it names one), how it serves us, the
 * memory plugin and, for a publisher, its pool's flags (*flags_p).
 */
static int attach_reply_read(struct rgaps__attach *a, const cJSON *reply, int nfds,
			     uint64_t *flags_p, char pools_pci[16], bool *grant_rw_p)
{
	uint64_t hdr_size, device, mine = UINT64_MAX;
	const cJSON *mem = cJSON_GetObjectItemCaseSensitive(reply, "memory"), *v;
	char mine_pci[16];

	if (rgaps__reply_num(reply, "hdr_size", 1u << 20, &hdr_size) ||
	    rgaps__reply_num(reply, "device", 1023, &device) ||
	    (a->role == RGAPS__ROLE_PUB && rgaps__reply_num(reply, "mem_flags", 0xffff, flags_p)) ||
	    !cJSON_IsString(mem) || nfds < (a->role == RGAPS__ROLE_PUB ? 3 : 2))
		return -EPROTO;
	/* The device rgapsd serves us on (absent: -1, unknown) and how (absent: local). */
	v = cJSON_GetObjectItemCaseSensitive(reply, "my_device");
	if ((v && (!cJSON_IsNumber(v) ||
		   (v->valuedouble != -1 && rgaps__reply_num(reply, "my_device", 1023, &mine)))) ||
	    rgaps__reply_pci(reply, "device_pci", pools_pci) ||
	    rgaps__reply_pci(reply, "my_device_pci", mine_pci))
		return -EPROTO;
	/* rgapsd's ordinals, as ours: by PCI address where it names one. */
	a->device = rgaps__gpu_local(&a->gpus, pools_pci, (int32_t)device);
	a->my_device =
		mine == UINT64_MAX ? -1 : rgaps__gpu_local(&a->gpus, mine_pci, (int32_t)mine);
	v = cJSON_GetObjectItemCaseSensitive(reply, "gpu_path");
	a->gpu_path = gpu_path_of(cJSON_IsString(v) ? v->valuestring : NULL);
	*grant_rw_p = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "grant_rw"));
	snprintf(a->memory_name, sizeof(a->memory_name), "%s", mem->valuestring);
	a->hdr_size = (size_t)hdr_size;
	return 0;
}

/*
 * The header, read-only and sealed, and our own copy of its limits; our region,
 * read-write. Consumes fds[0..1].
 */
static int map_own_segments(struct rgaps__attach *a, int *fds)
{
	int r;

	r = rgaps__reply_map(fds[0], a->hdr_size, false, &a->hdr);
	close(fds[0]);
	fds[0] = -1;
	if (!r)
		r = rgaps__topic_hdr_validate(a->hdr, a->hdr_size, &a->lim);
	if (r)
		return r;
	/* Our region is formatted once we say "mapped": checked then. */
	a->region_size =
		a->role == RGAPS__ROLE_PUB ? a->lim.pub_region_size : a->lim.sub_region_size;
	r = rgaps__reply_map(fds[1], a->region_size, true, &a->region);
	close(fds[1]);
	fds[1] = -1;
	return r;
}

/* The memory plugin the topic names, which maps the pools. */
static int memory_open(struct rgaps__attach *a)
{
	struct rgaps_plugin_env env;
	char err[512];
	int r;

	r = rgaps__plugin_load(rgaps__plugin_default_dir(), RGAPS_PLUGIN_MEMORY, a->memory_name,
			       &a->mem, err, sizeof(err));
	if (r) {
		rgaps_warn("%s", err);
		return r;
	}
	rgaps__plugin_env_init(&env, RGAPS_ROLE_CLIENT, NULL);
	return a->mem->ops.memory.init(&env, &a->mem->ctx);
}

/* A publisher's own pool, read-write, on the pools' GPU (at pools_pci). Consumes fds[2]. */
static int own_pool_import(struct rgaps__attach *a, int *fds, uint64_t flags, const char *pools_pci)
{
	char err[512];
	int fd, r;

	if (a->device < 0) { /* rgapsd refuses such a publisher first */
		rgaps_warn("topic '%.64s': the topic's pools are on the GPU at PCI %s, which this "
			   "process does not see",
			   ((const struct rgaps_topic_hdr *)a->hdr)->name, pools_pci);
		return -ENODEV;
	}
	fd = fds[2];
	fds[2] = -1;
	r = a->mem->ops.memory.pool_import(a->mem->ctx, fd, a->lim.pool_size, a->device,
					   (uint32_t)flags, &a->pool);
	if (r)
		return r;
	a->have_pool = true;
	/* A host pool is ours to back, whole, before rgapsd seals it (it refuses holes). */
	if (a->pool.kind == RGAPS_MEM_HOST) {
		r = rgaps__shm_back(a->pool.fd, a->pool.size, err, sizeof(err));
		if (r)
			rgaps__reason_set(r, "topic '%.64s': our pool: %s", a->topic, err);
	}
	return r;
}

/*
 * The first half of an attach: our own memory (docs/PROTOCOL.md, "attach"). The
 * header, read-only and sealed, and our own copy of its limits; our region and
 * a publisher's pool, read-write; the memory plugin that maps the pools.
 * Consumes fds[0..2].
 */
static int map_own(struct rgaps__attach *a, const cJSON *reply, int *fds, int nfds,
		   bool *grant_rw_p)
{
	uint64_t flags = 0;
	char pools_pci[16];
	int r;

	r = attach_reply_read(a, reply, nfds, &flags, pools_pci, grant_rw_p);
	if (!r)
		r = map_own_segments(a, fds);
	if (!r)
		r = memory_open(a);
	if (r || a->role != RGAPS__ROLE_PUB)
		return r;
	return own_pool_import(a, fds, flags, pools_pci);
}

/* A publisher on another GPU than its pool's: its kernels may write loans once let in. */
static int grant_own_pool(struct rgaps__attach *a, const char *topic, bool grant_rw)
{
	int r;

	if (a->my_device < 0 || a->my_device == a->device)
		return 0;
	if (!grant_rw) {
		rgaps_warn("topic '%s': GPU %d has no peer access to its pool on GPU %d: push "
			   "works (the driver copies through host memory), but kernels on GPU "
			   "%d cannot write loans",
			   topic, (int)a->my_device, (int)a->device, (int)a->my_device);
		return 0;
	}
	r = a->mem->ops.memory.pool_grant(a->mem->ctx, &a->pool, a->my_device,
					  RGAPS_MEM_GRANT_READ | RGAPS_MEM_GRANT_WRITE);
	if (r) {
		rgaps_warn("topic '%s': GPU %d cannot be given access to its pool on GPU %d: %s",
			   topic, (int)a->my_device, (int)a->device, strerror(-r));
		return -ENODEV;
	}
	return 0;
}

/*
 * The second half: tell rgapsd our memory is mapped (it seals it and lets us into
 * the topic), check the region it formatted, and map the members it names.
 */
static int attach_mapped(struct rgaps__attach *a,
			 int (*fence_done)(void *attach, const struct rgaps_sub_msg *m))
{
	struct rgaps_topic_cbs cbs = { .sync = rgaps__sync, .alive = rgaps__alive, .arg = a };
	cJSON *req = cJSON_CreateObject(), *reply = NULL;
	int fds[MAX_FDS], nfds = MAX_FDS, r;
	uint64_t slot, gen;

	if (!req)
		return -ENOMEM;
	cJSON_AddStringToObject(req, "type", "mapped");
	r = rgaps__request(a->fd, req, REQUEST_TIMEOUT_MS, &reply, fds, &nfds);
	cJSON_Delete(req);
	if (r)
		return r;
	if (rgaps__reply_num(reply, "slot", 1023, &slot) ||
	    rgaps__reply_num(reply, "gen", UINT64_MAX, &gen)) {
		r = -EPROTO;
		goto out;
	}
	a->slot = (uint32_t)slot;
	a->gen = gen;
	r = a->role == RGAPS__ROLE_PUB
		    ? rgaps__pub_region_validate(a->region, a->region_size, &a->lim)
		    : rgaps__sub_region_validate(a->region, a->region_size, &a->lim);
	if (r)
		goto out;
	a->npeers = a->role == RGAPS__ROLE_PUB ? a->lim.max_subscribers : a->lim.max_publishers;
	a->peers = calloc(a->npeers, sizeof(*a->peers));
	if (!a->peers) {
		r = -ENOMEM;
		goto out;
	}
	if (a->role == RGAPS__ROLE_PUB) {
		cbs.fence_pending = rgaps__fences_pending;
		cbs.fence_free = rgaps__fences_free;
		r = rgaps__pub_create(a->hdr, &a->lim, a->region, a->pool.base, &cbs, &a->pub);
	} else {
		cbs.fence_done = fence_done;
		r = rgaps__sub_create(a->hdr, &a->lim, a->region, &cbs, &a->sub);
	}
	if (r)
		goto out;
	/* The members there are, then whatever did not fit into this reply. */
	r = rgaps__members_apply(a, reply, fds, nfds);
	nfds = 0;
	if (r > 0)
		r = rgaps__sync(a);
out:
	rgaps__reply_fds_close(fds, nfds);
	cJSON_Delete(reply);
	return r;
}

/* A fresh attach of @role to @topic, its options checked; *want_p: the GPU they ask for. */
static int attach_begin(struct rgaps__attach *a, const char *topic, enum rgaps__role role,
			const rgaps_attach_opts_t *opts, int32_t *want_p)
{
	char err[256];

	memset(a, 0, sizeof(*a));
	a->fd = -1;
	a->role = role;
	a->my_device = -1;
	pthread_mutex_init(&a->lock, NULL);
	rgaps__reason_clear();
	if (!rgaps__topic_name_check(topic, err, sizeof(err)))
		return rgaps__reason_set(-EINVAL, "%s", err);
	snprintf(a->topic, sizeof(a->topic), "%s", topic);
	if (opts) {
		if (opts->struct_size <
			    offsetof(rgaps_attach_opts_t, device) + sizeof(opts->device) ||
		    opts->struct_size > 4096 || opts->device < -1 || opts->device > 1023)
			return -EINVAL;
		*want_p = opts->device;
	}
	return 0;
}

/* The "attach" request: the topic, our role, the GPU we want and the GPUs we see. */
static cJSON *attach_request_make(const struct rgaps__attach *a, const char *topic, int32_t want,
				  const char *pci)
{
	cJSON *req = cJSON_CreateObject();

	cJSON_AddStringToObject(req, "type", "attach");
	cJSON_AddStringToObject(req, "topic", topic);
	cJSON_AddStringToObject(req, "role", a->role == RGAPS__ROLE_PUB ? "pub" : "sub");
	if (want >= 0) {
		cJSON_AddNumberToObject(req, "device", want);
		if (pci[0])
			cJSON_AddStringToObject(req, "device_pci", pci);
	}
	if (a->gpus.n) { /* what we see: rgapsd serves what we cannot see by a replica */
		cJSON *seen = cJSON_AddArrayToObject(req, "gpus_pci");

		for (uint32_t i = 0; seen && i < a->gpus.n; i++)
			cJSON_AddItemToArray(seen, cJSON_CreateString(a->gpus.pci[i]));
	}
	return req;
}

/* Over the connected a->fd: ask to attach, map our memory, then say "mapped". */
static int attach_exchange(struct rgaps__attach *a, const char *topic, int32_t want,
			   const char *pci,
			   int (*fence_done)(void *attach, const struct rgaps_sub_msg *m))
{
	cJSON *req, *reply = NULL;
	int fds[MAX_FDS], nfds = MAX_FDS, r;
	bool grant_rw = false;

	req = attach_request_make(a, topic, want, pci);
	r = rgaps__request(a->fd, req, REQUEST_TIMEOUT_MS, &reply, fds, &nfds);
	cJSON_Delete(req);
	if (r)
		return r;
	r = map_own(a, reply, fds, nfds, &grant_rw);
	rgaps__reply_fds_close(fds, nfds);
	cJSON_Delete(reply);
	if (!r && a->role == RGAPS__ROLE_PUB)
		r = grant_own_pool(a, topic, grant_rw);
	if (!r)
		r = attach_mapped(a, fence_done);
	return r;
}

int rgaps__attach_open(const char *topic, enum rgaps__role role, const rgaps_attach_opts_t *opts,
		       int (*fence_done)(void *attach, const struct rgaps_sub_msg *m),
		       struct rgaps__attach *a)
{
	int32_t want = -1;
	const char *pci;
	int r;

	r = attach_begin(a, topic, role, opts, &want);
	if (r)
		return r;
	/* No CUDA here, or no current context: rgapsd serves us as on the pools' GPU. */
	rgaps__caller_gpus(&want, &a->gpus);
	pci = rgaps__gpu_pci(&a->gpus, want);
	r = rgaps__connect();
	if (r < 0)
		return r;
	a->fd = r;
	r = attach_exchange(a, topic, want, pci, fence_done);
	if (r)
		rgaps__attach_close(a);
	return r;
}

void rgaps__attach_close(struct rgaps__attach *a)
{
	if (a->mem)
		rgaps__fences_fini(a);
	rgaps__fence_cache_destroy(a->fcache);
	a->fcache = NULL;
	for (uint32_t i = 0; a->peers && i < a->npeers; i++)
		if (a->peers[i].gen)
			rgaps__peer_unmap(a, &a->peers[i]);
	for (uint32_t i = 0; i < a->nretired; i++)
		rgaps__peer_unmap(a, &a->retired[i]);
	free(a->retired);
	free(a->peers);
	a->retired = NULL;
	a->peers = NULL;
	a->nretired = 0;
	rgaps__pub_destroy(a->pub);
	rgaps__sub_destroy(a->sub);
	a->pub = NULL;
	a->sub = NULL;
	if (a->mem) {
		if (a->have_pool)
			a->mem->ops.memory.pool_release(a->mem->ctx, &a->pool);
		a->have_pool = false;
		a->mem->ops.memory.fini(a->mem->ctx);
		rgaps__plugin_unload(a->mem);
		a->mem = NULL;
	}
	if (a->region)
		munmap(a->region, a->region_size);
	if (a->hdr)
		munmap(a->hdr, a->hdr_size);
	a->region = a->hdr = NULL;
	/* Closing the connection is the detach: rgapsd discards our region. */
	if (a->fd >= 0)
		close(a->fd);
	a->fd = -1;
	pthread_mutex_destroy(&a->lock);
}

bool rgaps__alive(void *arg)
{
	struct rgaps__attach *a = arg;
	struct pollfd p = { .fd = a->fd, .events = POLLIN | POLLRDHUP };

	/* rgaps_publisher_interrupt(): end the wait as if rgapsd were gone (the caller tells) */
	if (__atomic_load_n(&a->interrupted, __ATOMIC_ACQUIRE))
		return false;
	/* rgapsd never writes unprompted: readable, hang-up or error means it is gone. */
	return poll(&p, 1, 0) == 0;
}

int rgaps__attach_info(struct rgaps__attach *a, rgaps_topic_info_t *info)
{
	const struct rgaps_topic_hdr *h = a->hdr;
	rgaps_topic_info_t out = { 0 };
	size_t n;

	if (!info || info->struct_size == 0)
		return -EINVAL;
	n = RGAPS_MIN(info->struct_size, sizeof(out));
	out.struct_size = n;
	snprintf(out.name, sizeof(out.name), "%.63s", h->name);
	out.memory = a->lim.mem_kind == RGAPS_MEM_CUDA ? RGAPS_MEMORY_CUDA : RGAPS_MEMORY_HOST;
	out.device = a->device;
	out.pool_size = a->lim.pool_size;
	out.max_message_size = a->lim.max_message_size;
	out.queue_depth = a->lim.queue_depth;
	out.handle_device = a->my_device;
	out.gpu_path = a->gpu_path;
	out.block_timeout_ms = (int)RGAPS_MIN(a->lim.block_timeout_ms, (uint32_t)INT32_MAX);
	out.overflow = (int)a->lim.overflow;
	if (a->role == RGAPS__ROLE_SUB)
		out.drops = __atomic_load_n(&((struct rgaps_sub_region *)a->region)->c.drops,
					    __ATOMIC_RELAXED);
	memcpy(info, &out, n);
	return 0;
}

RGAPS_EXPORT int rgaps_query(const char *request_json, char **reply_json_p)
{
	cJSON *req, *reply = NULL;
	int fd, r;

	if (!request_json || !reply_json_p)
		return -EINVAL;
	req = cJSON_Parse(request_json);
	if (!req)
		return -EINVAL;
	fd = rgaps__connect();
	if (fd < 0) {
		cJSON_Delete(req);
		return fd;
	}
	r = request_raw(fd, req, REQUEST_TIMEOUT_MS, &reply);
	close(fd);
	cJSON_Delete(req);
	if (reply) {
		*reply_json_p = cJSON_Print(reply);
		cJSON_Delete(reply);
	}
	return r;
}
