/*
 * librgaps: talking to rgapsd over its Unix control socket, and attaching a
 * handle to a topic (see client.h). Requests are rare (attach, detach,
 * queries), so this side is plain blocking I/O with poll() timeouts.
 */
#include "client.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../common/errors.h"
#include "../common/frame.h"
#include "../common/futex.h"
#include "../common/log.h"
#include "rgaps_build_config.h"

#define REQUEST_TIMEOUT_MS 10000
#define MAX_FDS 8

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

		r = rgaps_frame_reader_next(rd, payload_p, len_p);
		if (r < 0)
			return -EPROTO;
		if (r == 1) {
			*nfds_p = nfds;
			return 0;
		}
		rgaps_frame_reader_space(rd, &space, &room);
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
		rgaps_frame_reader_commit(rd, (size_t)n);
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
	rgaps_frame_header(out, (uint32_t)len);
	memcpy(out + RGAPS_FRAME_HDR, text, len);
	r = send_all(fd, out, RGAPS_FRAME_HDR + len, deadline);
	if (r)
		goto out;
	rgaps_frame_reader_init(rd);
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
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		rgaps_debug("cannot reach rgapsd at %s: %s", path, strerror(errno));
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
	if (r) {
		close(fd);
		return r;
	}
	return fd;
}

static uint64_t num_of(cJSON *o, const char *key)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(v) && v->valuedouble >= 0 ? (uint64_t)v->valuedouble : 0;
}

int rgaps__attach_open(const char *topic, enum rgaps__role role, struct rgaps__attach *a)
{
	struct rgaps_plugin_env env;
	cJSON *req, *reply = NULL, *mem;
	int fds[2] = { -1, -1 }, nfds = 2, r;
	uint64_t pool_size;
	char err[512];

	memset(a, 0, sizeof(*a));
	a->fd = -1;
	a->role = role;
	if (!topic || !rgaps_topic_name_valid(topic))
		return -EINVAL;
	r = rgaps__connect();
	if (r < 0)
		return r;
	a->fd = r;

	req = cJSON_CreateObject();
	cJSON_AddStringToObject(req, "type", "attach");
	cJSON_AddStringToObject(req, "topic", topic);
	cJSON_AddStringToObject(req, "role", role == RGAPS__ROLE_PUB ? "pub" : "sub");
	r = rgaps__request(a->fd, req, REQUEST_TIMEOUT_MS, &reply, fds, &nfds);
	cJSON_Delete(req);
	if (r)
		goto err_close;
	if (nfds != 2) {
		r = -EPROTO;
		goto err_fds;
	}
	a->slot = (uint32_t)num_of(reply, "slot");
	a->meta_size = (size_t)num_of(reply, "meta_size");
	pool_size = num_of(reply, "pool_size");
	a->device = (int32_t)num_of(reply, "device");
	mem = cJSON_GetObjectItemCaseSensitive(reply, "memory");
	snprintf(a->memory_name, sizeof(a->memory_name), "%s",
		 cJSON_IsString(mem) ? mem->valuestring : "");

	a->meta = mmap(NULL, a->meta_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	if (a->meta == MAP_FAILED) {
		a->meta = NULL;
		r = -errno;
		goto err_fds;
	}
	close(fds[0]);
	fds[0] = -1;
	r = rgaps_topic_validate(a->meta, a->meta_size);
	if (r)
		goto err_fds;
	a->topic.hdr = a->meta;
	a->topic.size = a->meta_size;

	r = rgaps__plugin_load(rgaps__plugin_default_dir(), RGAPS_PLUGIN_MEMORY, a->memory_name,
			       &a->mem, err, sizeof(err));
	if (r) {
		rgaps_warn("%s", err);
		goto err_fds;
	}
	rgaps__plugin_env_init(&env, RGAPS_ROLE_CLIENT, NULL);
	r = a->mem->ops.memory.init(&env, &a->mem->ctx);
	if (r)
		goto err_fds;
	r = a->mem->ops.memory.pool_import(a->mem->ctx, fds[1], pool_size, a->device,
					   (uint32_t)num_of(reply, "mem_flags"), &a->pool);
	if (r)
		goto err_fds;
	fds[1] = -1; /* the region owns it now */
	a->topic.pool = a->pool.base;
	cJSON_Delete(reply);
	return 0;

err_fds:
	for (int i = 0; i < 2; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	cJSON_Delete(reply);
err_close:
	rgaps__attach_close(a);
	return r;
}

void rgaps__attach_close(struct rgaps__attach *a)
{
	if (a->mem) {
		if (a->pool.base)
			a->mem->ops.memory.pool_release(a->mem->ctx, &a->pool);
		a->mem->ops.memory.fini(a->mem->ctx);
		rgaps__plugin_unload(a->mem);
		a->mem = NULL;
	}
	if (a->meta)
		munmap(a->meta, a->meta_size);
	a->meta = NULL;
	/* Closing the connection is the detach: rgapsd reclaims the slot. */
	if (a->fd >= 0)
		close(a->fd);
	a->fd = -1;
}

bool rgaps__alive(void *arg)
{
	struct rgaps__attach *a = arg;
	struct pollfd p = { .fd = a->fd, .events = POLLIN | POLLRDHUP };

	/* rgapsd never writes unprompted: readable, hang-up or error means it is gone. */
	return poll(&p, 1, 0) == 0;
}

int rgaps__attach_info(struct rgaps__attach *a, rgaps_topic_info_t *info)
{
	const struct rgaps_topic_hdr *h = a->topic.hdr;
	rgaps_topic_info_t out = { 0 };
	size_t n;

	if (!info || info->struct_size == 0)
		return -EINVAL;
	n = RGAPS_MIN(info->struct_size, sizeof(out));
	out.struct_size = n;
	snprintf(out.name, sizeof(out.name), "%s", h->name);
	out.memory = h->mem_kind == RGAPS_MEM_CUDA ? RGAPS_MEMORY_CUDA : RGAPS_MEMORY_HOST;
	out.device = h->device;
	out.pool_size = h->pool_size;
	out.max_message_size = h->max_message_size;
	out.queue_depth = h->queue_depth;
	if (a->role == RGAPS__ROLE_SUB)
		out.drops = __atomic_load_n(&rgaps_topic_sub_at(&a->topic, a->slot)->drops,
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
