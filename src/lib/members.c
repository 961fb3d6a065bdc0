/*
 * librgaps: the other members of an attached topic (docs/PROTOCOL.md, "sync").
 * rgapsd tells which members came and went; this side maps each one read-only
 * (for a subscriber a publisher's stream and pool, for a publisher a
 * subscriber's region), hands it to topic.h, and keeps a stream that left
 * while the subscriber still holds its messages until they are released.
 */
#include "members.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../common/log.h"
#include "reply.h"

void rgaps__peer_unmap(struct rgaps__attach *a, struct rgaps__peer_map *m)
{
	if (m->has_pool)
		a->mem->ops.memory.pool_release(a->mem->ctx, &m->pool);
	if (m->map)
		munmap(m->map, m->size);
	memset(m, 0, sizeof(*m));
}

/* Map a member rgapsd told of: a subscriber's region, or a publisher's stream and pool. */
static int peer_map(struct rgaps__attach *a, const cJSON *o, int *fds, int nfds,
		    struct rgaps__peer_map *m)
{
	bool stream = a->role == RGAPS__ROLE_SUB;
	uint64_t flags = 0, pdev = (uint64_t)a->device;
	char pci[16];
	int fd, pfd = -1, r;

	memset(m, 0, sizeof(*m));
	m->size = stream ? a->lim.pub_region_size : a->lim.sub_region_size;
	if (rgaps__reply_num(o, "gen", UINT64_MAX, &m->gen) || !m->gen ||
	    rgaps__reply_fd(o, "fd", fds, nfds, &fd))
		return -EPROTO;
	if (stream && (rgaps__reply_fd(o, "pool_fd", fds, nfds, &pfd) ||
		       rgaps__reply_num(o, "mem_flags", 0xffff, &flags) ||
		       /* pool_device is optional: without it, the topic's device */
		       (cJSON_GetObjectItemCaseSensitive(o, "pool_device") &&
			rgaps__reply_num(o, "pool_device", 1023, &pdev)) ||
		       rgaps__reply_pci(o, "pool_pci", pci))) {
		close(fd);
		if (pfd >= 0)
			close(pfd);
		return -EPROTO;
	}
	/* rgapsd numbers GPUs as it sees them: its PCI address names ours. */
	m->pool_device = stream ? rgaps__gpu_local(&a->gpus, pci, (int32_t)pdev) : (int32_t)pdev;
	if (m->pool_device < 0) {
		const char *vis = getenv("CUDA_VISIBLE_DEVICES");

		rgaps_warn(
			"topic '%.64s': a stream's pool is on the GPU at PCI %s, which this process "
			"does not see (CUDA_VISIBLE_DEVICES=%s)",
			((const struct rgaps_topic_hdr *)a->hdr)->name, pci, vis ? vis : "(unset)");
		close(fd);
		close(pfd);
		return -ENODEV;
	}
	/* Only its size is checked here: what it holds is its owner's to write, so every
	 * value is checked where it is used (topic.h), not trusted once at mapping. */
	r = rgaps__reply_map(fd, m->size, false, &m->map);
	close(fd);
	if (r)
		goto err;
	if (stream) {
		r = a->mem->ops.memory.pool_import(
			a->mem->ctx, pfd, a->lim.pool_size, m->pool_device,
			(uint32_t)flags | RGAPS_MEM_IMPORT_READONLY, &m->pool);
		pfd = -1; /* consumed */
		if (r)
			goto err;
		m->has_pool = true;
		/*
		 * Peer access: a pool on another GPU than ours is read in place, once that
		 * GPU is let in (cuMemSetAccess); without it, the first read would fault.
		 */
		if (a->my_device >= 0 && m->pool_device != a->my_device) {
			r = a->mem->ops.memory.pool_grant(a->mem->ctx, &m->pool, a->my_device,
							  RGAPS_MEM_GRANT_READ);
			if (r) {
				rgaps_warn(
					"topic '%.64s': GPU %d cannot be given read access to the "
					"pool on GPU %d: %s",
					((const struct rgaps_topic_hdr *)a->hdr)->name,
					(int)a->my_device, (int)m->pool_device, strerror(-r));
				r = -ENODEV;
				goto err;
			}
		}
	}
	return 0;
err:
	if (pfd >= 0)
		close(pfd);
	if (m->map)
		munmap(m->map, m->size);
	memset(m, 0, sizeof(*m));
	return r;
}

static int retire_peer(struct rgaps__attach *a, struct rgaps__peer_map *m)
{
	if (a->nretired == a->retired_cap) {
		uint32_t cap = a->retired_cap ? 2 * a->retired_cap : 4;
		struct rgaps__peer_map *n = realloc(a->retired, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		a->retired = n;
		a->retired_cap = cap;
	}
	a->retired[a->nretired++] = *m;
	memset(m, 0, sizeof(*m));
	return 0;
}

void rgaps__sweep_retired(struct rgaps__attach *a)
{
	uint32_t keep = 0;

	for (uint32_t i = 0; i < a->nretired; i++) {
		if (rgaps__sub_stream_held(a->sub, a->retired[i].gen))
			a->retired[keep++] = a->retired[i];
		else
			rgaps__peer_unmap(a, &a->retired[i]);
	}
	a->nretired = keep;
}

/* Forget member slot (it left, or its slot has a new member). */
static void peer_forget(struct rgaps__attach *a, uint32_t slot)
{
	struct rgaps__peer_map *m = &a->peers[slot];

	if (!m->gen)
		return;
	if (a->role == RGAPS__ROLE_PUB) {
		rgaps__pub_clear_sub(a->pub, slot);
		rgaps__peer_unmap(a, m);
		return;
	}
	/* Its fences stay open until the slot has a new stream (a take may be waiting on one). */
	if (rgaps__sub_clear_stream(a->sub, slot) || retire_peer(a, m)) {
		/* Nothing held in it (or no memory to wait: then it is unmapped now and the
		 * holds into it are the caller's to stop using, as after a detach). */
		rgaps__peer_unmap(a, m);
	}
}

/* The reply's "remove": forget each member still in its slot with that gen. */
static int members_remove(struct rgaps__attach *a, const cJSON *rem)
{
	const cJSON *o;

	cJSON_ArrayForEach(o, rem)
	{
		uint64_t slot, gen;

		if (rgaps__reply_num(o, "slot", a->npeers - 1, &slot) ||
		    rgaps__reply_num(o, "gen", UINT64_MAX, &gen))
			return -EPROTO;
		if (a->peers[slot].gen == gen)
			peer_forget(a, (uint32_t)slot);
	}
	return 0;
}

/* The reply's "members": map each one and hand it to topic.h in its slot. */
static int members_add(struct rgaps__attach *a, const cJSON *add, int *fds, int nfds)
{
	const cJSON *o;
	int r;

	cJSON_ArrayForEach(o, add)
	{
		struct rgaps__peer_map m;
		uint64_t slot, limit = UINT64_MAX;

		if (rgaps__reply_num(o, "slot", a->npeers - 1, &slot) ||
		    (cJSON_GetObjectItemCaseSensitive(o, "limit") &&
		     rgaps__reply_num(o, "limit", UINT64_MAX, &limit)))
			return -EPROTO;
		peer_forget(a, (uint32_t)slot);
		r = peer_map(a, o, fds, nfds, &m);
		if (r == -EPROTO || r == -ENODEV)
			return r; /* rgapsd's reply itself is wrong, or our GPU cannot read a pool */
		if (r) {
			/* This member only (say, out of memory): go on without it. */
			rgaps_warn("topic '%.64s': cannot map member %llu: %s",
				   ((struct rgaps_topic_hdr *)a->hdr)->name,
				   (unsigned long long)slot, strerror(-r));
			continue;
		}
		r = a->role == RGAPS__ROLE_PUB
			    ? rgaps__pub_set_sub(a->pub, (uint32_t)slot, m.gen, m.map)
			    : rgaps__sub_set_stream(a->sub, (uint32_t)slot, m.gen, m.map,
						    m.pool.base, limit);
		if (r) {
			rgaps__peer_unmap(a, &m);
			return r;
		}
		a->peers[slot] = m;
	}
	return 0;
}

/* The reply's "limits": a subscriber's new limit on a stream it has mapped. */
static int members_limits(struct rgaps__attach *a, const cJSON *lims)
{
	const cJSON *o;

	cJSON_ArrayForEach(o, lims)
	{
		uint64_t slot, gen, limit;
		struct rgaps__peer_map *m;

		if (rgaps__reply_num(o, "slot", a->npeers - 1, &slot) ||
		    rgaps__reply_num(o, "gen", UINT64_MAX, &gen) ||
		    rgaps__reply_num(o, "limit", UINT64_MAX, &limit))
			return -EPROTO;
		m = &a->peers[slot];
		if (a->role == RGAPS__ROLE_SUB && m->gen == gen)
			rgaps__sub_set_stream(a->sub, (uint32_t)slot, gen, m->map, m->pool.base,
					      limit);
	}
	return 0;
}

int rgaps__members_apply(struct rgaps__attach *a, const cJSON *reply, int *fds, int nfds)
{
	int r;

	pthread_mutex_lock(&a->lock);
	r = members_remove(a, rgaps__reply_array(reply, "remove"));
	if (!r)
		r = members_add(a, rgaps__reply_array(reply, "members"), fds, nfds);
	if (!r)
		r = members_limits(a, rgaps__reply_array(reply, "limits"));
	if (!r) {
		if (a->role == RGAPS__ROLE_SUB)
			rgaps__sweep_retired(a);
		r = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(reply, "more")) ? 1 : 0;
	}
	__atomic_fetch_add(&a->view_gen, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&a->lock);
	syscall(SYS_futex, &a->view_gen, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
	rgaps__reply_fds_close(fds, nfds);
	return r;
}

int rgaps__sync(void *arg)
{
	struct rgaps__attach *a = arg;

	/* Bounded: each round maps at least one member, and there are at most 1024 of them. */
	for (int round = 0; round < 1100; round++) {
		cJSON *req = cJSON_CreateObject(), *reply = NULL;
		int fds[MAX_FDS], nfds = MAX_FDS, r;

		if (!req)
			return -ENOMEM;
		cJSON_AddStringToObject(req, "type", "sync");
		r = rgaps__request(a->fd, req, REQUEST_TIMEOUT_MS, &reply, fds, &nfds);
		cJSON_Delete(req);
		if (r)
			return r == -EPROTO ? r : -ENOTCONN;
		r = rgaps__members_apply(a, reply, fds, nfds);
		cJSON_Delete(reply);
		if (r <= 0)
			return r;
	}
	return -EPROTO;
}

const struct rgaps_pub_region *rgaps__stream_region(struct rgaps__attach *a, uint32_t slot,
						    uint64_t gen)
{
	if (slot < a->npeers && a->peers[slot].gen == gen)
		return a->peers[slot].map;
	for (uint32_t i = 0; i < a->nretired; i++)
		if (a->retired[i].gen == gen)
			return a->retired[i].map;
	return NULL;
}
