/*
 * Threads and the loop (docs/ARCHITECTURE.md section 2, STYLE.md item 7). Only the loop
 * thread touches uv handles and daemon state; other threads hand work back as
 * messages {fn, ctx} on a mailbox: a multi-producer queue plus uv_async_send,
 * whose handler drains the whole queue (several sends may give one wake-up).
 *
 * A worker is one or more threads taking jobs in FIFO order (the copies of
 * the remote path with one thread; the pipeline stages with several); each
 * job's completion is posted back to the loop through a mailbox. With one
 * thread, completions come back in submission order.
 *
 * Lifecycle: init -> post/submit -> close (the worker is joined; messages
 * still queued run before the async handle closes).
 */
#ifndef RGAPSD_WORKER_H
#define RGAPSD_WORKER_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/queue.h>
#include <uv.h>

struct rgapsd_msg {
	STAILQ_ENTRY(rgapsd_msg) link;
	void (*fn)(struct rgapsd_msg *m); /* runs on the loop thread */
};
STAILQ_HEAD(rgapsd_msg_q, rgapsd_msg);

struct rgapsd_mailbox {
	uv_async_t async;
	pthread_mutex_t lock;
	struct rgapsd_msg_q q;
	bool closing;
	/* Set by the owner, or NULL: called on the loop once closed (may free what holds mb). */
	void (*on_closed)(struct rgapsd_mailbox *mb);
};

int rgapsd_mailbox_init(uv_loop_t *loop, struct rgapsd_mailbox *mb);
/* Any thread. */
void rgapsd_mailbox_post(struct rgapsd_mailbox *mb, struct rgapsd_msg *m);
/* Loop thread: run what is queued, then close the async handle. */
void rgapsd_mailbox_close(struct rgapsd_mailbox *mb);

struct rgapsd_job {
	struct rgapsd_msg done; /* posted to the mailbox after run(), unless manual */
	STAILQ_ENTRY(rgapsd_job) link;
	void (*run)(struct rgapsd_job *job); /* runs on a worker thread */
	bool manual; /* run() (or what it started) posts done itself, once */
};

#define RGAPSD_WORKER_THREADS_MAX 16

struct rgapsd_worker {
	pthread_t threads[RGAPSD_WORKER_THREADS_MAX];
	unsigned nthreads;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	STAILQ_HEAD(, rgapsd_job) q;
	struct rgapsd_mailbox *mb;
	bool stop;
};

/* Start nthreads (1..RGAPSD_WORKER_THREADS_MAX) threads named name-N. 0 or -errno. */
int rgapsd_worker_start(struct rgapsd_worker *w, struct rgapsd_mailbox *mb, const char *name,
			unsigned nthreads);
void rgapsd_worker_submit(struct rgapsd_worker *w, struct rgapsd_job *job);
/* Finish the queued jobs (their completions are posted), then join. */
void rgapsd_worker_stop(struct rgapsd_worker *w);
/*
 * munmap() on the worker (freeing a large mapping that was written takes
 * milliseconds per 64 MiB): nothing is posted back. Here when w is not running
 * or out of memory.
 */
void rgapsd_worker_unmap(struct rgapsd_worker *w, void *addr, size_t len);

#endif
