/*
 * The members of rgapsd's topics (daemon.h, docs/SHM-LAYOUT.md): one per
 * attachment, each with the shared memory made for it - a publisher's control
 * region and pool, a subscriber's region. What every client has been told of
 * the others (the "members" of attach and sync replies) is in told.c.
 *
 * rgapsd creates and formats each region, hands its owner a read-write fd and
 * everyone else read-only ones, and keeps a read-only mapping of its own to
 * read from (statistics, where a new subscriber starts, whether a departed
 * publisher's stream has drained). Every value read through those mappings is
 * clamped (topic.h readers): a client lies only about itself.
 *
 * A subscriber's region goes with its connection. A publisher's stream stays
 * readable after its publisher detaches (DRAINING) until every subscriber has
 * read and released it, or a deadline passes, so that a publisher may exit
 * right after its last publish. The topic table's sweep (topics.c) asks
 * rgapsd_members_sweep() to decide that, and to free GONE members once no view
 * of rgapsd's own still maps them.
 *
 * Several GPUs: every member says which streams it belongs to (`serve`, the
 * topic's own or the replica for one GPU); a subscriber reads, and a stream
 * waits for, only members of the same serve (docs/GPU.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../common/futex.h"
#include "../common/log.h"
#include "daemon.h"
#include "gpu_reserve.h"

#define DRAIN_MAX_NS (30ull * 1000 * 1000 * 1000) /* a departed stream is kept at most this */

void rgapsd_member_get(struct rgapsd_member *m)
{
	__atomic_fetch_add(&m->refs, 1, __ATOMIC_ACQ_REL);
}

void rgapsd_member_put(struct rgapsd_member *m)
{
	uint32_t was = __atomic_fetch_sub(&m->refs, 1, __ATOMIC_ACQ_REL);

	rgaps_require(was > 0);
}

void rgapsd_member_pub_snapshot(const struct rgapsd_member *m, struct rgaps_pub_snapshot *s)
{
	rgaps__pub_snapshot(&m->t->lim, m->map, s);
}

/*
 * What a freed member leaves to unmap and remove: unmapping a pool the
 * publisher filled, and removing its last reference, frees every page of it
 * (about 130 ms of CPU for 512 MiB), so the reaper does it, off the loop.
 */
struct member_remains {
	struct rgapsd_job job; /* manual: the reaper frees it */
	struct rgaps_loaded_plugin *mem;
	struct rgaps_mem_region pool;
	void *map;
	size_t size;
	int fd;
};

static void remains_release(struct member_remains *r)
{
	if (r->pool.base || r->pool.fd >= 0)
		r->mem->ops.memory.pool_release(r->mem->ctx, &r->pool);
	if (r->map)
		munmap(r->map, r->size);
	if (r->fd >= 0)
		close(r->fd);
}

static void remains_run(struct rgapsd_job *job)
{
	struct member_remains *r = RGAPS_CONTAINER_OF(job, struct member_remains, job);

	remains_release(r);
	free(r);
}

/* Back rgapsd's own pool; if it cannot be, its pages come as rgapsd writes them. */
static void back_own(const char *topic, int fd, uint64_t size)
{
	char why[256];

	if (rgaps__shm_back(fd, size, why, sizeof(why)))
		rgaps_warn("topic '%s': rgapsd's own pool: %s; its pages come as rgapsd writes "
			   "them",
			   topic, why);
}

/* Allocating a pool takes 55 ms per 256 MiB, much more on a loaded host: the reaper's. */
struct pool_backing {
	struct rgapsd_job job; /* manual: the reaper frees it */
	int fd;		       /* a dup of the pool's fd: the pool may go first */
	uint64_t size;
	char topic[RGAPS_CFG_NAME_MAX];
};

static void backing_run(struct rgapsd_job *job)
{
	struct pool_backing *b = RGAPS_CONTAINER_OF(job, struct pool_backing, job);

	back_own(b->topic, b->fd, b->size);
	close(b->fd);
	free(b);
}

/*
 * rgapsd's own pool (a replica, a stream from a peer), sealed already: backed on the
 * reaper (before any release queued after it), else here.
 */
static void pool_back(struct rgapsd_topic *t, const struct rgaps_mem_region *pool)
{
	struct pool_backing *b = t->d->reaper.nthreads ? calloc(1, sizeof(*b)) : NULL;

	if (b) {
		b->fd = fcntl(pool->fd, F_DUPFD_CLOEXEC, 0);
		b->size = pool->size;
		snprintf(b->topic, sizeof(b->topic), "%s", t->cfg.name);
		if (b->fd >= 0) {
			b->job = (struct rgapsd_job){ .run = backing_run, .manual = true };
			rgapsd_worker_submit(&t->d->reaper, &b->job);
			return;
		}
		free(b);
	}
	back_own(t->cfg.name, pool->fd, pool->size);
}

/*
 * Free the member (the loop thread, nobody maps it through us); its memory goes
 * on the reaper, or here when the reaper is not running (start, shutdown).
 */
static void member_free(struct rgapsd_member *m)
{
	struct rgapsd_topic *t = m->t;
	struct member_remains *r = t->d->reaper.nthreads ? malloc(sizeof(*r)) : NULL, here;

	if (m->kind == RGAPSD_MEMBER_PUB && t->d->hooks && t->d->hooks->member_gone)
		t->d->hooks->member_gone(t->d->hooks_ctx, m);
	if (!r)
		r = &here;
	*r = (struct member_remains){
		.mem = t->mem, .pool = m->pool, .map = m->map, .size = m->size, .fd = m->fd
	};
	free(m);
	if (r == &here) {
		remains_release(r);
		return;
	}
	r->job.run = remains_run;
	r->job.manual = true;
	rgapsd_worker_submit(&t->d->reaper, &r->job);
}

static int gone_push(struct rgapsd_topic *t, struct rgapsd_member *m)
{
	if (t->ngone == t->gone_cap) {
		uint32_t cap = t->gone_cap ? 2 * t->gone_cap : 8;
		struct rgapsd_member **g = realloc(t->gone, cap * sizeof(*g));

		if (!g)
			return -ENOMEM;
		t->gone = g;
		t->gone_cap = cap;
	}
	t->gone[t->ngone++] = m;
	return 0;
}

void rgapsd_members_wake(struct rgapsd_topic *t)
{
	/*
	 * A client asleep on a single futex word - the one stream's doorbell, the one
	 * subscriber's progress word - learns of a membership change or a close only if
	 * that word is woken: FUTEX_WAKE works through our read-only mappings.
	 */
	for (uint32_t k = 0; k < t->lim.max_publishers; k++)
		if (t->pubs[k])
			rgaps_futex_wake_all(&((struct rgaps_pub_region *)t->pubs[k]->map)->doorbell);
	for (uint32_t j = 0; j < t->lim.max_subscribers; j++)
		if (t->subs[j])
			rgaps_futex_wake_all(&((struct rgaps_sub_region *)t->subs[j]->map)->progress);
}

static void dir_changed(struct rgapsd_topic *t)
{
	rgaps__topic_dir_changed(t->hdr);
	rgapsd_members_wake(t);
}

static void counts_to_hdr(struct rgapsd_topic *t)
{
	__atomic_store_n(&t->hdr->nsubs, t->nsubs, __ATOMIC_RELAXED);
	__atomic_store_n(&t->hdr->npubs, t->npubs, __ATOMIC_RELAXED);
}

/* Out of the table (under the lock), its counters folded in, freed once unreferenced. */
static void member_gone(struct rgapsd_member *m)
{
	struct rgapsd_topic *t = m->t;
	uint32_t n;
	struct rgapsd_member **tab = rgapsd_member_table(t, m->kind, &n);

	pthread_mutex_lock(&t->lock);
	rgaps_require(tab[m->slot] == m);
	tab[m->slot] = NULL;
	if (m->state == RGAPSD_MEMBER_DRAINING)
		t->ndraining--;
	m->state = RGAPSD_MEMBER_GONE;
	pthread_mutex_unlock(&t->lock);
	if (m->kind == RGAPSD_MEMBER_PUB) {
		struct rgaps_pub_snapshot s;
		const uint64_t *src = (const uint64_t *)&s.c;
		uint64_t *dst = (uint64_t *)&t->gone_pubs;

		rgapsd_member_pub_snapshot(m, &s);
		/* Saturating sums: a liar's counters must not wrap the topic's. */
		for (size_t i = 0; i < sizeof(s.c) / sizeof(uint64_t); i++)
			dst[i] = dst[i] + src[i] < dst[i] ? UINT64_MAX : dst[i] + src[i];
		t->gone_pubs.pool_used_bytes = t->gone_pubs.pool_used_blocks = 0;
		t->gone_pubs.pool_largest_free = t->gone_pubs.nloans = 0;
		if (s.bad)
			t->bad_regions++;
	} else {
		struct rgaps_sub_snapshot s;

		rgaps__sub_snapshot(&t->lim, m->map, &s);
		t->gone_subs.taken += s.c.taken;
		t->gone_subs.released += s.c.released;
		t->gone_subs.drops += s.c.drops;
		t->gone_subs.errors += s.c.errors;
		t->reclaimed_holds += s.nholds;
		rgaps_lathist_sum(&t->gone_latency, &s.latency);
		t->nsubs--;
	}
	counts_to_hdr(t);
	dir_changed(t);
	/* Out of the table, so not among those dir_changed woke: whoever sleeps on it too. */
	rgaps_futex_wake_all(m->kind == RGAPSD_MEMBER_PUB ?
				     &((struct rgaps_pub_region *)m->map)->doorbell :
				     &((struct rgaps_sub_region *)m->map)->progress);
	if (__atomic_load_n(&m->refs, __ATOMIC_ACQUIRE) == 0)
		member_free(m);
	else if (gone_push(t, m))
		rgaps_error("topic '%s': out of memory: member %llu is never freed", t->cfg.name,
			    (unsigned long long)m->gen);
}

/* ---------------------------------------------------------------- creation */

/* Where a new subscriber starts in stream p: its last `history` messages, else live. */
static uint64_t start_of(struct rgapsd_topic *t, const struct rgapsd_member *p)
{
	struct rgaps_pub_snapshot s;
	uint64_t head;

	rgapsd_member_pub_snapshot(p, &s);
	head = p->state == RGAPSD_MEMBER_DRAINING ? RGAPS_MIN(s.head, p->limit) : s.head;
	if (s.tail > head)
		return head;
	return head - RGAPS_MIN((uint64_t)t->lim.history, head - s.tail);
}

/* The member's region: made (sized, resize-proof), backed, mapped read-write here for now. */
static int map_region(struct rgapsd_member *m, const char *label, size_t size, char *err,
		      size_t errlen)
{
	char why[256];
	int r = rgaps__shm_create(label, size, why, sizeof(why));

	if (r >= 0) {
		m->fd = r;
		m->size = size;
		r = rgaps__shm_back(m->fd, size, why, sizeof(why));
	}
	if (r < 0) {
		snprintf(err, errlen, "%s region: %s",
			 m->kind == RGAPSD_MEMBER_PUB ? "publisher" : "subscriber", why);
		return r;
	}
	r = rgaps__shm_map(m->fd, size, &m->map);
	if (r) {
		snprintf(err, errlen, "cannot map a new region: %s", strerror(-r));
		m->map = NULL;
	}
	return r;
}

/* rgapsd reads clients' regions through a read-only mapping: it never writes what they own. */
static int remap_read_only(struct rgapsd_member *m)
{
	void *ro = mmap(NULL, m->size, PROT_READ, MAP_SHARED, m->fd, 0);

	if (ro == MAP_FAILED)
		return -errno;
	munmap(m->map, m->size);
	m->map = ro;
	return 0;
}

/* gpu_reserve: a pool on a GPU must leave that much free there (gpu_reserve.h). */
static int reserve_check(struct rgapsd_topic *t, int32_t device, char *err, size_t errlen)
{
	uint64_t free_b, total_b;
	int r;

	if (!t->d->cfg.gpu_reserve)
		return 0;
	r = t->mem->ops.memory.mem_info(t->mem->ctx, device, &free_b, &total_b);
	if (r == -ENOTSUP)
		return 0; /* no device memory to keep, or a plugin that cannot tell */
	if (r) {
		snprintf(err, errlen, "memory '%s' cannot tell the free memory of GPU %d: %s",
			 t->mem->name, (int)device, strerror(-r));
		return r;
	}
	r = rgapsd_gpu_reserve_check(device, free_b, total_b, t->lim.pool_size,
				     t->d->cfg.gpu_reserve, err, errlen);
	if (r) {
		t->d->gpu_pools_refused++;
		rgaps_log_limited(&t->d->log_rl, RGAPS_LOG_WARN, "topic '%s': pool refused: %s",
				  t->cfg.name, err);
	}
	return r;
}

int rgapsd_member_create_spec(struct rgapsd_topic *t, const struct rgapsd_member_spec *spec,
			       struct rgapsd_member **m_p, char *err, size_t errlen)
{
	struct rgapsd_member *m;
	int r = rgapsd_member_prepare(t, spec, &m, err, errlen);

	if (r)
		return r;
	r = rgapsd_member_activate(m, err, errlen);
	/* rgapsd's own pool is rgapsd's to back (a client backs the one it asked for). */
	if (!r && m->kind == RGAPSD_MEMBER_PUB && m->pool.kind == RGAPS_MEM_HOST)
		pool_back(t, &m->pool);
	if (r) {
		member_free(m);
		return r;
	}
	*m_p = m;
	return 0;
}

int rgapsd_member_prepare(struct rgapsd_topic *t, const struct rgapsd_member_spec *spec,
			  struct rgapsd_member **m_p, char *err, size_t errlen)
{
	enum rgapsd_member_kind kind = spec->kind;
	char label[RGAPS_SHM_NAME_MAX], pool_label[RGAPS_SHM_NAME_MAX + 8];
	struct rgapsd_member *m;
	uint32_t n;
	int r;

	if (!rgapsd_member_slot_free(t, kind)) {
		rgapsd_member_table(t, kind, &n);
		snprintf(err, errlen, "no free %s slot (max %u)",
			 kind == RGAPSD_MEMBER_PUB ? "publisher" : "subscriber", n);
		return -ENOSPC;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	m->t = t;
	m->kind = kind;
	m->state = RGAPSD_MEMBER_PENDING;
	m->conn_id = spec->conn_id;
	m->pid = spec->pid;
	m->own = spec->own;
	m->gpu = spec->gpu;
	m->pool_dev = kind == RGAPSD_MEMBER_PUB ? (spec->pool_dev >= 0 ? spec->pool_dev :
									t->cfg.device) :
						  -1;
	m->serve = spec->serve;
	m->fd = -1;
	m->pool.fd = -1;
	m->limit = UINT64_MAX;
	/* Labels only (ls -l /proc/PID/fd): the objects have no name anyone can open. */
	if (rgaps__shm_name(label, sizeof(label), t->d->instance, t->cfg.name,
			    kind == RGAPSD_MEMBER_PUB ? "pub" : "sub"))
		snprintf(label, sizeof(label), "rgaps-region");
	r = map_region(m, label,
		       kind == RGAPSD_MEMBER_PUB ? t->lim.pub_region_size : t->lim.sub_region_size,
		       err, errlen);
	if (r)
		goto err;
	if (kind == RGAPSD_MEMBER_PUB) {
		snprintf(pool_label, sizeof(pool_label), "%s-pool", label);
		r = reserve_check(t, m->pool_dev, err, errlen);
		if (r)
			goto err;
		r = t->mem->ops.memory.pool_create(t->mem->ctx, pool_label, t->lim.pool_size,
						   m->pool_dev, &m->pool);
		if (r) {
			char size[32];

			rgaps__format_size(t->lim.pool_size, size, sizeof(size));
			snprintf(err, errlen,
				 "memory '%s' cannot create a %s pool on device %d: %s "
				 "(rgapsd's log says more)",
				 t->mem->name, size, (int)m->pool_dev, strerror(-r));
			m->pool.fd = -1;
			m->pool.base = NULL;
			goto err;
		}
	}
	*m_p = m;
	return 0;
err:
	member_free(m);
	/* Memory that cannot be had, whatever limit says so: the client's code is no_memory. */
	return r == -EFBIG || r == -ENOSPC ? -ENOMEM : r;
}

bool rgapsd_member_slot_free(struct rgapsd_topic *t, enum rgapsd_member_kind kind)
{
	uint32_t n;
	struct rgapsd_member **tab = rgapsd_member_table(t, kind, &n);

	for (uint32_t i = 0; i < n; i++)
		if (!tab[i] ||
		    (kind == RGAPSD_MEMBER_PUB && tab[i]->state == RGAPSD_MEMBER_DRAINING))
			return true;
	return false;
}

/* A free slot of kind; a departed stream kept for history gives its slot to a live publisher. */
static int take_slot(struct rgapsd_topic *t, enum rgapsd_member_kind kind, uint32_t *slot_p)
{
	uint32_t n, slot;
	struct rgapsd_member **tab = rgapsd_member_table(t, kind, &n);

	for (slot = 0; slot < n && tab[slot]; slot++)
		;
	if (slot == n && kind == RGAPSD_MEMBER_PUB) {
		for (uint32_t i = 0; i < n; i++) {
			if (tab[i]->state == RGAPSD_MEMBER_DRAINING) {
				member_gone(tab[i]);
				slot = i;
				break;
			}
		}
	}
	if (slot == n)
		return -ENOSPC;
	*slot_p = slot;
	return 0;
}

/*
 * Seal what the owner has mapped and backed: no writable mapping, no hole, ever again
 * (shm.h). A host pool is a memfd the plugin made through the environment (plugin.h);
 * a device pool's memory is the driver's to keep.
 */
static int seal_memory(struct rgapsd_member *m, char *err, size_t errlen)
{
	char why[256];
	int r = rgaps__shm_seal(m->fd, m->size, true, why, sizeof(why));

	/* A client's pool must be whole now; rgapsd's own is backed once sealed. */
	if (!r && m->kind == RGAPSD_MEMBER_PUB && m->pool.kind == RGAPS_MEM_HOST)
		r = rgaps__shm_seal(m->pool.fd, m->pool.size, !m->own, why, sizeof(why));
	if (r)
		snprintf(err, errlen, "cannot seal the attachment's memory: %s", why);
	/* Its owner sealed it first (denied), or left it with holes (not what "mapped" says). */
	return r == -EPERM ? -EACCES : r == -EFAULT ? -EPROTO : r;
}

int rgapsd_member_activate(struct rgapsd_member *m, char *err, size_t errlen)
{
	struct rgapsd_topic *t = m->t;
	enum rgapsd_member_kind kind = m->kind;
	uint32_t n, slot;
	struct rgapsd_member **tab = rgapsd_member_table(t, kind, &n);
	int r;

	rgaps_require(m->state == RGAPSD_MEMBER_PENDING);
	r = seal_memory(m, err, errlen);
	if (r)
		return r;
	if (take_slot(t, kind, &slot)) {
		snprintf(err, errlen, "no free %s slot (max %u)",
			 kind == RGAPSD_MEMBER_PUB ? "publisher" : "subscriber", n);
		return -ENOSPC;
	}
	m->slot = slot;
	m->gen = ++t->next_gen;
	/* Formatted through our mapping, still writable: the seals stop new mappings only. */
	if (kind == RGAPSD_MEMBER_PUB) {
		rgaps__pub_region_format(m->map, &t->lim, slot, m->gen);
	} else {
		rgaps__sub_region_format(m->map, &t->lim, slot, m->gen);
		/* Where it starts in every stream there is (read before it is visible: it can
		 * miss nothing published after its attach completes). */
		for (uint32_t k = 0; k < t->lim.max_publishers; k++)
			if (t->pubs[k] && rgapsd_member_reads(m, t->pubs[k]))
				rgaps__sub_region_set_cursor(m->map, &t->lim, k, t->pubs[k]->gen,
							    start_of(t, t->pubs[k]),
							    RGAPS_CURSOR_FRESH);
	}
	if (!m->own) {
		r = remap_read_only(m);
		if (r) {
			snprintf(err, errlen, "cannot map a region read-only: %s", strerror(-r));
			return r;
		}
	}
	pthread_mutex_lock(&t->lock);
	m->state = RGAPSD_MEMBER_ACTIVE;
	tab[slot] = m;
	pthread_mutex_unlock(&t->lock);
	if (kind == RGAPSD_MEMBER_PUB)
		t->npubs++;
	else
		t->nsubs++;
	counts_to_hdr(t);
	dir_changed(t);
	return 0;
}

void rgapsd_member_leave(struct rgapsd_member *m)
{
	struct rgapsd_topic *t = m->t;
	struct rgaps_pub_snapshot s;

	if (m->state == RGAPSD_MEMBER_PENDING) { /* in no table: nobody else saw it */
		member_free(m);
		return;
	}
	if (m->kind == RGAPSD_MEMBER_SUB) {
		member_gone(m);
		return;
	}
	if (m->state != RGAPSD_MEMBER_ACTIVE)
		return;
	rgapsd_member_pub_snapshot(m, &s);
	/* Loans die with the publisher: its pool goes when its stream has drained. */
	t->reclaimed_loans += s.c.nloans;
	pthread_mutex_lock(&t->lock);
	m->state = RGAPSD_MEMBER_DRAINING;
	m->limit = s.head;
	m->since_ns = rgaps_now_ns(CLOCK_MONOTONIC);
	t->ndraining++;
	pthread_mutex_unlock(&t->lock);
	t->npubs--;
	counts_to_hdr(t);
	dir_changed(t);
}

int rgapsd_member_share_fd(const struct rgapsd_member *m, bool pool, bool writable)
{
	int fd = pool ? m->pool.fd : m->fd, r;

	if (fd < 0)
		return -EBADF;
	if (writable || (pool && m->pool.kind != RGAPS_MEM_HOST)) {
		/* A CUDA pool's handle has no read-only form: the importer maps it read-only. */
		r = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		return r < 0 ? -errno : r;
	}
	/* mmap(PROT_WRITE) and mprotect() fail on it; the object's mode (0600) keeps other
	 * users from reopening it read-write through /proc. */
	return rgaps__shm_reopen_read_only(fd);
}

/* ---------------------------------------------------------------- sweeping */

static bool drained(struct rgapsd_topic *t, const struct rgapsd_member *p)
{
	struct rgaps_pub_snapshot s;
	uint64_t limit;

	rgapsd_member_pub_snapshot(p, &s);
	limit = RGAPS_MIN(p->limit, s.head);
	for (uint32_t j = 0; j < t->lim.max_subscribers; j++) {
		const struct rgapsd_member *sm = t->subs[j];

		if (!sm || !rgapsd_member_reads(sm, p))
			continue; /* it reads other streams: nothing of this one to wait for */
		if (rgaps__sub_position(&t->lim, sm->map, p->slot, p->gen, s.tail, limit) < limit ||
		    rgaps__sub_holds_stream(&t->lim, sm->map, p->gen))
			return false;
	}
	return true;
}

/* With history, the newest departed stream stays (for late joiners) while no publisher is on. */
static bool kept_for_history(const struct rgapsd_topic *t, const struct rgapsd_member *p)
{
	if (!t->lim.history || t->npubs)
		return false;
	for (uint32_t k = 0; k < t->lim.max_publishers; k++)
		if (t->pubs[k] && t->pubs[k]->gen > p->gen)
			return false;
	return true;
}

void rgapsd_members_sweep(struct rgapsd_topic *t, uint64_t now)
{
	uint32_t keep = 0;

	for (uint32_t k = 0; k < t->lim.max_publishers && t->ndraining; k++) {
		struct rgapsd_member *p = t->pubs[k];

		if (!p || p->state != RGAPSD_MEMBER_DRAINING)
			continue;
		if (kept_for_history(t, p))
			continue;
		if (drained(t, p)) {
			member_gone(p);
		} else if (now - p->since_ns > DRAIN_MAX_NS) {
			rgaps_warn("topic '%s': publisher stream %llu (pid %d) still unread %llu s after "
				   "its publisher left: dropped (its subscribers count it as lost)",
				   t->cfg.name, (unsigned long long)p->gen, (int)p->pid,
				   (unsigned long long)(DRAIN_MAX_NS / 1000000000ull));
			member_gone(p);
		}
	}
	for (uint32_t i = 0; i < t->ngone; i++) {
		struct rgapsd_member *m = t->gone[i];

		if (__atomic_load_n(&m->refs, __ATOMIC_ACQUIRE))
			t->gone[keep++] = m;
		else
			member_free(m);
	}
	t->ngone = keep;
}

void rgapsd_members_destroy(struct rgapsd_topic *t)
{
	for (uint32_t j = 0; j < t->lim.max_subscribers; j++)
		if (t->subs[j])
			member_gone(t->subs[j]);
	for (uint32_t k = 0; k < t->lim.max_publishers; k++)
		if (t->pubs[k])
			member_gone(t->pubs[k]);
	/* Views of our own are stopped by now (rgapsd_remote_stop): free what is left. */
	for (uint32_t i = 0; i < t->ngone; i++) {
		rgaps_require(__atomic_load_n(&t->gone[i]->refs, __ATOMIC_ACQUIRE) == 0);
		member_free(t->gone[i]);
	}
	t->ngone = 0;
	free(t->gone);
	t->gone = NULL;
}
