/*
 * The closer (closer.h): one thread that closes, in turn, the descriptors the
 * loop hands it, each socket disarmed first so that its close cannot wait.
 */
#include "closer.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "futex.h" /* rgaps_now_ns */
#include "log.h"
#include "util.h"

#define CLOSER_SLOW_NS 1000000000ull /* a close this long is logged */
#define CLOSER_STOP_WAIT_S 1	     /* stop waits this long for a close under way */

struct rgapsd_closer {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* work queued, or the thread ended */
	int *q;		     /* queued descriptors */
	uint32_t n, cap;
	bool busy; /* the thread is inside a close */
	bool stop, ended;
	struct rgapsd_closer_stats st;
	struct rgaps_ratelimit rl;
};

/*
 * An abortive close for a socket: no linger, and its unsent bytes dropped at
 * once (a disconnect; TCP answers the peer with a reset). Anything else is
 * left as it is: other files have nothing to wait for at their close that a
 * client controls, or fail these calls harmlessly.
 */
static void disarm(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	struct sockaddr sa = { .sa_family = AF_UNSPEC };

	if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0)
		(void)!connect(fd, &sa, sizeof(sa));
}

static void *closer_main(void *arg)
{
	struct rgapsd_closer *c = arg;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		uint64_t t0, took;
		int fd;

		while (!c->n && !c->stop)
			pthread_cond_wait(&c->cond, &c->lock);
		if (!c->n)
			break;
		fd = c->q[--c->n];
		c->busy = true;
		pthread_mutex_unlock(&c->lock);
		t0 = rgaps_now_ns(CLOCK_MONOTONIC);
		disarm(fd);
		close(fd);
		took = rgaps_now_ns(CLOCK_MONOTONIC) - t0;
		pthread_mutex_lock(&c->lock);
		c->busy = false;
		c->st.closed++;
		if (took >= CLOSER_SLOW_NS) {
			c->st.slow++;
			rgaps_log_limited(&c->rl, RGAPS_LOG_WARN,
					  "closer: closing a descriptor a client handed over took "
					  "%llu ms (its owner held it open); the loop did not wait",
					  (unsigned long long)(took / 1000000));
		}
	}
	c->ended = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

int rgapsd_closer_start(struct rgapsd_closer **c_p)
{
	struct rgapsd_closer *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	r = pthread_create(&c->thread, NULL, closer_main, c);
	if (r) {
		pthread_cond_destroy(&c->cond);
		pthread_mutex_destroy(&c->lock);
		free(c);
		return -r;
	}
	pthread_setname_np(c->thread, "closer");
	*c_p = c;
	return 0;
}

void rgapsd_closer_close(struct rgapsd_closer *c, int fd)
{
	pthread_mutex_lock(&c->lock);
	if (c->n == c->cap) {
		uint32_t cap = c->cap ? 2 * c->cap : 64;
		int *q = realloc(c->q, cap * sizeof(*q));

		if (!q) {
			pthread_mutex_unlock(&c->lock);
			/* Disarmed, a socket's close does not wait: better than keeping it open. */
			rgaps_error("closer: out of memory; closing a client's descriptor here");
			disarm(fd);
			close(fd);
			return;
		}
		c->q = q;
		c->cap = cap;
	}
	c->q[c->n++] = fd;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

void rgapsd_closer_stats(struct rgapsd_closer *c, struct rgapsd_closer_stats *st)
{
	pthread_mutex_lock(&c->lock);
	*st = c->st;
	st->pending = c->n + (c->busy ? 1 : 0);
	pthread_mutex_unlock(&c->lock);
}

void rgapsd_closer_stop(struct rgapsd_closer *c)
{
	struct timespec deadline;
	bool ended;

	if (!c)
		return;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += CLOSER_STOP_WAIT_S;
	pthread_mutex_lock(&c->lock);
	c->stop = true;
	pthread_cond_signal(&c->cond);
	while (!c->ended && pthread_cond_timedwait(&c->cond, &c->lock, &deadline) != ETIMEDOUT)
		;
	ended = c->ended;
	pthread_mutex_unlock(&c->lock);
	if (!ended) {
		/* A close that waits for its owner: the process's exit ends it (no linger then). */
		rgaps_warn("closer: a close still waits after %d s; leaving it to the exit",
			   CLOSER_STOP_WAIT_S);
		pthread_detach(c->thread);
		return;
	}
	pthread_join(c->thread, NULL);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
	free(c->q);
	free(c);
}
