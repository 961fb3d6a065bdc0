/*
 * Mailbox and FIFO worker thread (see worker.h).
 */
#include "worker.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../common/util.h"

static void on_async(uv_async_t *a)
{
	struct rgapsd_mailbox *mb = a->data;
	struct rgapsd_msg_q q = STAILQ_HEAD_INITIALIZER(q);
	struct rgapsd_msg *m;

	pthread_mutex_lock(&mb->lock);
	STAILQ_CONCAT(&q, &mb->q);
	pthread_mutex_unlock(&mb->lock);
	while ((m = STAILQ_FIRST(&q))) {
		STAILQ_REMOVE_HEAD(&q, link); /* fn may free m */
		m->fn(m);
	}
}

int rgapsd_mailbox_init(uv_loop_t *loop, struct rgapsd_mailbox *mb)
{
	int r;

	memset(mb, 0, sizeof(*mb));
	STAILQ_INIT(&mb->q);
	pthread_mutex_init(&mb->lock, NULL);
	r = uv_async_init(loop, &mb->async, on_async);
	if (r) {
		pthread_mutex_destroy(&mb->lock);
		return r;
	}
	mb->async.data = mb;
	return 0;
}

void rgapsd_mailbox_post(struct rgapsd_mailbox *mb, struct rgapsd_msg *m)
{
	pthread_mutex_lock(&mb->lock);
	STAILQ_INSERT_TAIL(&mb->q, m, link);
	pthread_mutex_unlock(&mb->lock);
	uv_async_send(&mb->async);
}

static void mailbox_closed(uv_handle_t *h)
{
	struct rgapsd_mailbox *mb = h->data;

	pthread_mutex_destroy(&mb->lock);
	if (mb->on_closed)
		mb->on_closed(mb);
}

void rgapsd_mailbox_close(struct rgapsd_mailbox *mb)
{
	if (mb->closing)
		return;
	mb->closing = true;
	on_async(&mb->async);
	uv_close((uv_handle_t *)&mb->async, mailbox_closed);
}

static void *worker_main(void *arg)
{
	struct rgapsd_worker *w = arg;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct rgapsd_job *j;

		while (STAILQ_EMPTY(&w->q) && !w->stop)
			pthread_cond_wait(&w->cond, &w->lock);
		j = STAILQ_FIRST(&w->q);
		if (!j)
			break; /* stop, and nothing left to do */
		STAILQ_REMOVE_HEAD(&w->q, link);
		pthread_mutex_unlock(&w->lock);
		if (j->manual) {
			j->run(j); /* j may be done and freed by now */
		} else {
			j->run(j);
			rgapsd_mailbox_post(w->mb, &j->done);
		}
		pthread_mutex_lock(&w->lock);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

int rgapsd_worker_start(struct rgapsd_worker *w, struct rgapsd_mailbox *mb, const char *name,
			unsigned nthreads)
{
	int r = 0;

	memset(w, 0, sizeof(*w));
	STAILQ_INIT(&w->q);
	w->mb = mb;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	if (nthreads < 1 || nthreads > RGAPSD_WORKER_THREADS_MAX)
		return -EINVAL;
	while (w->nthreads < nthreads) {
		char tname[16];

		r = pthread_create(&w->threads[w->nthreads], NULL, worker_main, w);
		if (r)
			break;
		snprintf(tname, sizeof(tname), nthreads > 1 ? "%.12s-%u" : "%.15s", name,
			 w->nthreads);
		pthread_setname_np(w->threads[w->nthreads], tname);
		w->nthreads++;
	}
	if (r) {
		rgapsd_worker_stop(w);
		return -r;
	}
	return 0;
}

void rgapsd_worker_submit(struct rgapsd_worker *w, struct rgapsd_job *job)
{
	pthread_mutex_lock(&w->lock);
	STAILQ_INSERT_TAIL(&w->q, job, link);
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

void rgapsd_worker_stop(struct rgapsd_worker *w)
{
	if (!w->nthreads)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
	while (w->nthreads)
		pthread_join(w->threads[--w->nthreads], NULL);
}

struct unmap_job {
	struct rgapsd_job job;
	void *addr;
	size_t len;
};

static void unmap_run(struct rgapsd_job *job)
{
	struct unmap_job *u = RGAPS_CONTAINER_OF(job, struct unmap_job, job);

	munmap(u->addr, u->len);
	free(u);
}

void rgapsd_worker_unmap(struct rgapsd_worker *w, void *addr, size_t len)
{
	struct unmap_job *u = w->nthreads ? malloc(sizeof(*u)) : NULL;

	if (!u) {
		munmap(addr, len);
		return;
	}
	*u = (struct unmap_job){ .job = { .run = unmap_run, .manual = true },
				 .addr = addr,
				 .len = len };
	rgapsd_worker_submit(w, &u->job);
}
