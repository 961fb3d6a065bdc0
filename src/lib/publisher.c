/*
 * librgaps publisher: push (one copy into the publisher's own pool) and
 * loan/commit (zero copies), each also in stream order (push_async,
 * commit_async: the copy or the kernels run on the caller's stream, a fence
 * recorded after them rides with the message; docs/SHM-LAYOUT.md). Everything
 * after init is shared memory: the daemon is on the path only when
 * subscribers come or go (the sync of topic.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/config.h"
#include "../common/errors.h"
#include "../common/futex.h"
#include "../common/log.h"
#include "../common/util.h"
#include "client.h"
#include "fences.h"

/* Copies into the pool longer than this get no early wake (announce_soon()): waking is
 * a small part of them, and neither we nor the subscribers should spin so long. */
#define ANNOUNCE_MAX_NS (1000ull * 1000)
#define PREWAKE_DEFAULT_US 20

struct rgaps_publisher {
	struct rgaps__attach a;
	/* How long before a copy's expected end its subscribers are woken (RGAPS_PREWAKE_US;
	 * 0: never early), and for each size class (log2 of its bytes) how long a copy of
	 * copy_bytes is expected to run (expect_copy()). */
	uint64_t prewake_ns;
	uint64_t copy_ns[64], copy_bytes[64];
};

RGAPS_EXPORT rgaps_publisher_t *rgaps_publisher_init_ex(const char *topic,
						       const rgaps_attach_opts_t *opts)
{
	rgaps_publisher_t *pub = calloc(1, sizeof(*pub));
	const char *prewake;
	int r;

	if (!pub) {
		errno = ENOMEM;
		return NULL;
	}
	r = rgaps__attach_open(topic, RGAPS__ROLE_PUB, opts, NULL, &pub->a);
	if (r) {
		free(pub);
		errno = -r;
		return NULL;
	}
	/* Beyond ANNOUNCE_MAX_NS every announced copy is woken for at once: no larger value. */
	prewake = getenv("RGAPS_PREWAKE_US");
	pub->prewake_ns = RGAPS_MIN(prewake ? strtoull(prewake, NULL, 10) : PREWAKE_DEFAULT_US,
				    ANNOUNCE_MAX_NS / 1000) *
			  1000;
	return pub;
}

RGAPS_EXPORT rgaps_publisher_t *rgaps_publisher_init(const char *topic)
{
	return rgaps_publisher_init_ex(topic, NULL);
}

RGAPS_EXPORT void rgaps_publisher_destroy(rgaps_publisher_t *pub)
{
	if (!pub)
		return;
	rgaps__attach_close(&pub->a);
	free(pub);
}

static int effective_timeout(const rgaps_publisher_t *pub, int timeout_ms)
{
	return timeout_ms < 0 ? (int)pub->a.lim.block_timeout_ms : timeout_ms;
}

/* rgaps_publisher_interrupt() was called: every wait ends, and no new one starts. */
static bool interrupted(const rgaps_publisher_t *pub)
{
	return __atomic_load_n(&pub->a.interrupted, __ATOMIC_ACQUIRE);
}

/*
 * A loan or push of size bytes that failed with r, waiting at most timeout_ms:
 * the reason in words for rgaps_strerror() where the errno alone does not say
 * which limit was met and what to change. Returns r.
 */
static int pub_failed(const rgaps_publisher_t *pub, int r, size_t size, int timeout_ms)
{
	const struct rgaps_topic_limits *lim = &pub->a.lim;
	char max[32], pool[32], when[64];

	/* An interrupted wait looks to the core like a daemon gone (rgaps__alive()). */
	if (r == -ENOTCONN && interrupted(pub))
		r = -ECANCELED;
	switch (r) {
	case -EMSGSIZE:
		rgaps__format_size(lim->max_message_size, max, sizeof(max));
		return rgaps__reason_set(r,
					 "a message of %zu bytes is larger than topic '%s''s "
					 "max_message_size of %s: send smaller messages, or raise "
					 "max_message_size in the topic's configuration "
					 "(docs/CONFIG.md)",
					 size, pub->a.topic, max);
	case -ETIMEDOUT:
	case -EAGAIN:
		rgaps__format_size(lim->pool_size, pool, sizeof(pool));
		if (r == -ETIMEDOUT)
			snprintf(when, sizeof(when), "timed out after %d ms waiting for", timeout_ms);
		else
			snprintf(when, sizeof(when), "no room now (timeout 0: not waiting) for");
		return rgaps__reason_set(
			r,
			"%s room for a message of %zu bytes in topic '%s': its pool (%s) or queue "
			"(%u entries) is full of messages that subscribers %s; `rgaps stats %s` "
			"shows each subscriber's lag and holds",
			when, size, pub->a.topic, pool, lim->queue_depth,
			lim->overflow == RGAPS_OVERFLOW_BLOCK ?
				"have not yet taken or still hold (overflow \"block\" waits for "
				"them, up to block_timeout_ms)" :
				"still hold",
			pub->a.topic);
	case -ECANCELED:
		return rgaps__reason_set(r,
					 "publisher of topic '%s' interrupted "
					 "(rgaps_publisher_interrupt): it waits no more",
					 pub->a.topic);
	case -ENOBUFS:
		return rgaps__reason_set(r,
					 "this publisher holds %u loans already (max_loans): commit "
					 "or cancel one first",
					 lim->max_loans);
	}
	return r;
}

/* Options a caller may pass (struct_size: those it knows of); NULL: the defaults. */
static int read_opts(const rgaps_pub_opts_t *in, rgaps_pub_opts_t *out)
{
	*out = (rgaps_pub_opts_t){ .struct_size = sizeof(*out), .timeout_ms = -1 };
	if (!in)
		return 0;
	if (in->struct_size < sizeof(in->struct_size) || in->struct_size > 4096)
		return -EINVAL;
	memcpy(out, in, RGAPS_MIN(in->struct_size, sizeof(*out)));
	if (out->attr_len > RGAPS_ATTR_MAX || (out->attr_len && !out->attrs))
		return -EINVAL;
	return 0;
}

RGAPS_EXPORT int rgaps_publisher_loan(rgaps_publisher_t *pub, size_t size, int timeout_ms,
				      rgaps_loan_t *loan_p)
{
	uint32_t token;
	uint64_t off;
	int r;

	if (!pub || !loan_p)
		return -EINVAL;
	rgaps__reason_clear();
	timeout_ms = effective_timeout(pub, timeout_ms);
	if (interrupted(pub))
		return pub_failed(pub, -ECANCELED, size, timeout_ms);
	r = rgaps__pub_loan(pub->a.pub, size, timeout_ms, &token, &off);
	if (r)
		return pub_failed(pub, r, size, timeout_ms);
	loan_p->data = (uint8_t *)pub->a.pool.base + off;
	loan_p->size = size;
	loan_p->token = token;
	loan_p->reserved = 0;
	return 0;
}

static int commit_fenced(rgaps_publisher_t *pub, rgaps_loan_t *loan, size_t size,
			 const rgaps_pub_opts_t *o, uint64_t ts, int timeout_ms);
static int push_in_order(rgaps_publisher_t *pub, size_t size, const void *device_ptr,
			 const rgaps_pub_opts_t *o);

static int commit(rgaps_publisher_t *pub, rgaps_loan_t *loan, size_t size, uint64_t ts,
		  const rgaps_pub_opts_t *o, int timeout_ms)
{
	struct rgaps_pub_commit c = {
		.ts_ns = ts,
		.attrs = o->attrs,
		.attr_len = (uint32_t)o->attr_len,
	};
	int r;

	if (o->stream)
		r = commit_fenced(pub, loan, size, o, ts, timeout_ms);
	else
		r = rgaps__pub_commit(pub->a.pub, loan->token, size, &c, timeout_ms, false, NULL);
	return r;
}

RGAPS_EXPORT int rgaps_publisher_commit_ex(rgaps_publisher_t *pub, rgaps_loan_t *loan, size_t size,
					   const rgaps_pub_opts_t *opts)
{
	rgaps_pub_opts_t o;
	int r, t;

	if (!pub || !loan)
		return -EINVAL;
	rgaps__reason_clear();
	r = read_opts(opts, &o);
	if (!r && size > loan->size)
		r = -EINVAL;
	if (!r && interrupted(pub))
		r = pub_failed(pub, -ECANCELED, size, 0);
	if (r) {
		/* The caller's kernels may still write it: wait for them before it is freed. */
		if (opts && opts->struct_size >= sizeof(*opts) && opts->stream)
			pub->a.mem->ops.memory.stream_sync(pub->a.mem->ctx, opts->stream);
		rgaps__pub_cancel(pub->a.pub, loan->token);
		return r;
	}
	t = effective_timeout(pub, o.timeout_ms);
	r = commit(pub, loan, size, rgaps_now_ns(CLOCK_REALTIME), &o, t);
	return r ? pub_failed(pub, r, size, t) : 0;
}

RGAPS_EXPORT int rgaps_publisher_commit(rgaps_publisher_t *pub, rgaps_loan_t *loan, size_t size)
{
	return rgaps_publisher_commit_ex(pub, loan, size, NULL);
}

RGAPS_EXPORT int rgaps_publisher_cancel(rgaps_publisher_t *pub, rgaps_loan_t *loan)
{
	if (!pub || !loan)
		return -EINVAL;
	return rgaps__pub_cancel(pub->a.pub, loan->token);
}

/* What is left of timeout t (ms; < 0: none) since start. */
static int remaining_ms(int t, uint64_t start)
{
	uint64_t spent = (rgaps_now_ns(CLOCK_MONOTONIC) - start) / 1000000;

	if (t <= 0)
		return t;
	return spent >= (uint64_t)t ? 0 : t - (int)spent;
}

/* A push's copy into the pool, under way (the memory plugin's copy_during()). */
struct push_copy {
	rgaps_publisher_t *pub;
	size_t size;
	uint64_t queued_ns; /* 0 until the plugin first calls announce_soon() */
	uint64_t wake_ns;   /* when to wake the subscribers */
};

static unsigned int size_class(size_t n)
{
	return 63u - (unsigned int)__builtin_clzll((unsigned long long)n | 1);
}

/* How long a copy of n bytes into the pool should run, from the copies before it; 0: unknown. */
static uint64_t expect_copy(const rgaps_publisher_t *pub, size_t n)
{
	unsigned int k = size_class(n);
	uint64_t bytes = __atomic_load_n(&pub->copy_bytes[k], __ATOMIC_RELAXED);

	if (!bytes)
		return 0;
	return (uint64_t)((unsigned __int128)__atomic_load_n(&pub->copy_ns[k], __ATOMIC_RELAXED) *
			  n / bytes);
}

/*
 * A copy of n bytes ran took_ns (from its start to our seeing its end). The
 * expectation follows a faster copy at once and a slower one by a sixteenth:
 * a copy can look slower than it was (this thread was descheduled), never
 * faster, and one slow copy of many (the first on a cold device) must not
 * make the subscribers spin long.
 */
static void learn_copy(rgaps_publisher_t *pub, size_t n, uint64_t took_ns)
{
	unsigned int k = size_class(n);
	uint64_t was = expect_copy(pub, n);

	if (was && took_ns > was)
		took_ns = was + (took_ns - was) / 16;
	__atomic_store_n(&pub->copy_ns[k], took_ns, __ATOMIC_RELAXED);
	__atomic_store_n(&pub->copy_bytes[k], (uint64_t)n, __ATOMIC_RELAXED);
}

/*
 * Called by the memory plugin while the copy runs on the device, again and
 * again until we return false or the copy ends: wake the subscribers about
 * prewake_ns before the end we expect from the copies of this size before
 * it, so that they are up when the message is (rgaps__pub_announce()).
 * Waking N sleeping processes takes the kernel about a microsecond each, and
 * the last one a few more to be running (docs/BENCHMARKS.md, "GPU fan-out"):
 * done at the commit, that came on top of the copy; done now, it overlaps it.
 * Not for copies expected to run longer than ANNOUNCE_MAX_NS, where the wake
 * is a small part, nor when we have no expectation yet (the first copy of a
 * size): then the commit wakes them, as a copy that ends before our time does.
 */
static bool announce_soon(void *arg)
{
	struct push_copy *c = arg;
	rgaps_publisher_t *pub = c->pub;
	uint64_t now = rgaps_now_ns(CLOCK_MONOTONIC);

	if (!c->queued_ns) {
		uint64_t expect = expect_copy(pub, c->size);

		c->queued_ns = now;
		if (!pub->prewake_ns || !expect || expect > ANNOUNCE_MAX_NS)
			return false;
		c->wake_ns = now + (expect > pub->prewake_ns ? expect - pub->prewake_ns : 0);
	}
	if (now < c->wake_ns)
		return true;
	rgaps__pub_announce(pub->a.pub);
	return false;
}

/* Copy size bytes into the loan, its subscribers woken while the copy runs where the
 * memory plugin can say when that is. */
static int copy_in(rgaps_publisher_t *pub, void *dst, const void *src, size_t size)
{
	const struct rgaps_memory_ops *ops = &pub->a.mem->ops.memory;
	struct push_copy c = { .pub = pub, .size = size };
	int r;

	r = ops->copy_during(pub->a.mem->ctx, dst, src, size, RGAPS_COPY_TO_POOL, announce_soon,
			     &c);
	if (r == -ENOTSUP)
		return ops->copy(pub->a.mem->ctx, dst, src, size, RGAPS_COPY_TO_POOL);
	if (r == 0 && c.queued_ns)
		learn_copy(pub, size, rgaps_now_ns(CLOCK_MONOTONIC) - c.queued_ns);
	return r;
}

RGAPS_EXPORT int rgaps_publisher_push_ex(rgaps_publisher_t *pub, size_t size,
					 const void *device_ptr, const rgaps_pub_opts_t *opts)
{
	uint64_t ts = rgaps_now_ns(CLOCK_REALTIME), start;
	rgaps_pub_opts_t o;
	rgaps_loan_t loan;
	int r, t;

	if (!pub || !device_ptr)
		return -EINVAL;
	rgaps__reason_clear();
	r = read_opts(opts, &o);
	if (r)
		return r;
	if (o.stream)
		return push_in_order(pub, size, device_ptr, &o);
	t = effective_timeout(pub, o.timeout_ms);
	start = rgaps_now_ns(CLOCK_MONOTONIC);
	r = rgaps_publisher_loan(pub, size, t, &loan);
	if (r)
		return r;
	r = copy_in(pub, loan.data, device_ptr, size);
	if (r) {
		rgaps__pub_cancel(pub->a.pub, loan.token);
		return r;
	}
	/* The commit may wait for a queue entry: only for what is left of the timeout. */
	r = commit(pub, &loan, size, ts, &o, remaining_ms(t, start));
	return r ? pub_failed(pub, r, size, t) : 0;
}

RGAPS_EXPORT int rgaps_publisher_push_timeout(rgaps_publisher_t *pub, size_t size,
					      const void *device_ptr, int timeout_ms)
{
	rgaps_pub_opts_t o = { .struct_size = sizeof(o), .timeout_ms = timeout_ms };

	return rgaps_publisher_push_ex(pub, size, device_ptr, &o);
}

RGAPS_EXPORT int rgaps_publisher_push(rgaps_publisher_t *pub, size_t size, const void *device_ptr)
{
	return rgaps_publisher_push_ex(pub, size, device_ptr, NULL);
}

/* ---------------------------------------------------------------- stream order */

/*
 * Publish a loan whose bytes are being written by work queued on stream:
 * record a fence slot after that work and commit with it. Without a free slot
 * (or if the record fails) the stream is waited for on this thread and the
 * message committed complete: slower, never wrong. If the commit fails, the
 * block goes back to the pool at once, so the work writing it must be over
 * first: then too the fence is waited for here.
 */
static int commit_fenced(rgaps_publisher_t *pub, rgaps_loan_t *loan, size_t size,
			 const rgaps_pub_opts_t *o, uint64_t ts, int timeout_ms)
{
	const struct rgaps_memory_ops *ops = &pub->a.mem->ops.memory;
	void *mctx = pub->a.mem->ctx;
	void *stream = o->stream;
	struct rgaps_pub_commit c = {
		.ts_ns = ts,
		.attrs = o->attrs,
		.attr_len = (uint32_t)o->attr_len,
	};
	uint32_t k;
	int r;

	r = rgaps__fence_get(&pub->a, &k);
	if (r == 0) {
		r = ops->fence_record(mctx, rgaps__fence_of(&pub->a, k), stream);
		if (r) {
			rgaps__fence_put(&pub->a, k);
		} else {
			c.has_fence = true;
			c.fence = k;
		}
	}
	if (!c.has_fence) {
		if (r != -ENOSPC)
			rgaps_debug("stream-ordered publish without a fence (%s): waiting for the "
				    "stream", strerror(-r));
		__atomic_fetch_add(&((struct rgaps_pub_region *)pub->a.region)->c.fence_waits, 1,
				   __ATOMIC_RELAXED);
		r = ops->stream_sync(mctx, stream);
		if (r) { /* the context is broken: nothing more runs into the block */
			rgaps__pub_cancel(pub->a.pub, loan->token);
			return r;
		}
	}
	r = rgaps__pub_commit(pub->a.pub, loan->token, size, &c, timeout_ms, false, NULL);
	if (r && c.has_fence) {
		/* The loan went back to the pool: no one may write it once we return. */
		rgaps__fence_wait_host(ops, mctx, rgaps__fence_of(&pub->a, k), UINT64_MAX, NULL,
				      NULL);
		rgaps__fence_put(&pub->a, k);
	}
	return r;
}

/* push_ex with a stream: the copy queued on it, the message published with a fence. */
static int push_in_order(rgaps_publisher_t *pub, size_t size, const void *device_ptr,
			 const rgaps_pub_opts_t *o)
{
	uint64_t ts = rgaps_now_ns(CLOCK_REALTIME), start = rgaps_now_ns(CLOCK_MONOTONIC);
	rgaps_loan_t loan;
	int r, t;

	t = effective_timeout(pub, o->timeout_ms);
	r = rgaps_publisher_loan(pub, size, t, &loan);
	if (r)
		return r;
	r = pub->a.mem->ops.memory.copy_stream(pub->a.mem->ctx, loan.data, device_ptr, size,
					       o->stream);
	if (r) { /* nothing was queued */
		rgaps__pub_cancel(pub->a.pub, loan.token);
		return r;
	}
	r = commit_fenced(pub, &loan, size, o, ts, remaining_ms(t, start));
	return r ? pub_failed(pub, r, size, t) : 0;
}

RGAPS_EXPORT int rgaps_publisher_push_async(rgaps_publisher_t *pub, size_t size,
					    const void *device_ptr, void *stream)
{
	rgaps_pub_opts_t o = { .struct_size = sizeof(o), .timeout_ms = -1, .stream = stream };

	if (!pub || !device_ptr)
		return -EINVAL;
	/* The legacy default stream is NULL here; in the options NULL means "none". */
	if (!o.stream)
		o.stream = (void *)(uintptr_t)1; /* cudaStreamLegacy */
	return push_in_order(pub, size, device_ptr, &o);
}

RGAPS_EXPORT int rgaps_publisher_commit_async(rgaps_publisher_t *pub, rgaps_loan_t *loan,
					      size_t size, void *stream)
{
	rgaps_pub_opts_t o = { .struct_size = sizeof(o), .timeout_ms = -1, .stream = stream };

	if (!o.stream)
		o.stream = (void *)(uintptr_t)1; /* cudaStreamLegacy */
	return rgaps_publisher_commit_ex(pub, loan, size, &o);
}

RGAPS_EXPORT int rgaps_publisher_interrupt(rgaps_publisher_t *pub)
{
	if (!pub)
		return -EINVAL;
	/* Waits look at it each time they ask whether rgapsd is alive (about every 200 ms). */
	__atomic_store_n(&pub->a.interrupted, 1, __ATOMIC_RELEASE);
	return 0;
}

RGAPS_EXPORT int rgaps_publisher_info(rgaps_publisher_t *pub, rgaps_topic_info_t *info)
{
	if (!pub)
		return -EINVAL;
	return rgaps__attach_info(&pub->a, info);
}
