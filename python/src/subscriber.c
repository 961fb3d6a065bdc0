/*
 * rgaps._rgaps.Subscriber and the life of held messages.
 *
 * A subscriber's C handle lives in a struct rgpy_subcore that the Python
 * object and every message still held share; each taken message is a struct
 * rgpy_hold whose block is released when its last claim goes (the Message's
 * own until release(), one per array exported from it). Claims are dropped by
 * DLPack deleters too, in any thread and without the GIL, so nothing here
 * touches Python objects. The C handle may be used by one thread at a time:
 * the core's mutex guards it, and a release that finds the mutex taken (a
 * take() waiting in another thread) leaves the hold on a lock-free list that
 * the lock holder drains before it lets go. A blocking take() waits in slices
 * of at most TAKE_SLICE_MS, so such releases, and Ctrl-C, are served promptly.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpy.h"

#define TAKE_SLICE_MS 200

typedef rgpy_HandleObject SubscriberObject;

PyTypeObject *rgpy_SubscriberType;

static void *sub_attach(const char *topic)
{
	return rgaps_subscriber_init(topic);
}

static int sub_info_of(void *c, rgaps_topic_info_t *info)
{
	return rgaps_subscriber_info(c, info);
}

static void sub_destroy(void *c)
{
	/* Holds die with our region: rgapsd discards it when the connection closes. */
	rgaps_subscriber_destroy(c);
}

#ifdef RGPY_HAVE_CLOSE_WAKES
/*
 * close() with arrays still alive: they keep the C handle (their blocks must
 * stay), but it takes nothing more, so no publisher waits for it and it no
 * longer counts as a subscriber; a take() in another thread ends with -ESHUTDOWN.
 */
static void sub_close(void *c)
{
	rgaps_subscriber_stop(c);
}
#endif

static const struct rgpy_role sub_role = {
	.name = "Subscriber",
	.core_size = sizeof(struct rgpy_subcore),
	.has_drops = true,
	.attach = sub_attach,
	.info = sub_info_of,
	.destroy = sub_destroy,
#ifdef RGPY_HAVE_CLOSE_WAKES
	.close = sub_close,
#endif
};

/* ---------------------------------------------------------------- the core */

static struct rgpy_subcore *core_of(SubscriberObject *self)
{
	return (struct rgpy_subcore *)self->core;
}

static rgaps_subscriber_t *csub(struct rgpy_subcore *c)
{
	return c->h.c;
}

static void core_ref(struct rgpy_subcore *c)
{
	rgpy_handle_ref(&c->h);
}

static void core_unref(struct rgpy_subcore *c)
{
	rgpy_handle_unref(&c->h);
}

/* With the lock held: give the block back to the topic. */
static void release_locked(struct rgpy_subcore *c, struct rgpy_hold *h)
{
	if (rgpy_handle_ours(&c->h)) {
#if RGPY_STREAM_ORDERED
		/* The block is reused only after that stream is done with it. */
		if (h->cuda && h->release_stream_set)
			rgaps_subscriber_release_async(csub(c), &h->msg, (void *)h->release_stream);
		else
#endif
			rgaps_subscriber_release(csub(c), &h->msg);
	}
	__atomic_sub_fetch(&c->nheld, 1, __ATOMIC_SEQ_CST);
}

/*
 * Drain what other threads left, then unlock; look again after unlocking, since
 * a release may have been left after our last look but before the unlock. The
 * holds drained are finished (their core and struct references dropped) only
 * after the last unlock, since that may free the core.
 */
void rgpy_subcore_unlock(struct rgpy_subcore *c)
{
	struct rgpy_hold *done = NULL;

	for (;;) {
		struct rgpy_hold *h = __atomic_exchange_n(&c->pending, NULL, __ATOMIC_SEQ_CST);

		while (h) {
			struct rgpy_hold *next = h->next_pending;

			release_locked(c, h);
			h->next_pending = done;
			done = h;
			h = next;
		}
		pthread_mutex_unlock(&c->h.lock);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (!__atomic_load_n(&c->pending, __ATOMIC_SEQ_CST) || pthread_mutex_trylock(&c->h.lock))
			break;
	}
	while (done) {
		struct rgpy_hold *next = done->next_pending;

		done->core = NULL;
		core_unref(c);
		rgpy_hold_unref(done);
		done = next;
	}
}

/* ---------------------------------------------------------------- holds */

void rgpy_hold_ref(struct rgpy_hold *h)
{
	__atomic_add_fetch(&h->refs, 1, __ATOMIC_SEQ_CST);
}

void rgpy_hold_unref(struct rgpy_hold *h)
{
	if (!__atomic_sub_fetch(&h->refs, 1, __ATOMIC_SEQ_CST))
		free(h);
}

void rgpy_hold_claim(struct rgpy_hold *h)
{
	__atomic_add_fetch(&h->claims, 1, __ATOMIC_SEQ_CST);
}

void rgpy_hold_unclaim(struct rgpy_hold *h)
{
	struct rgpy_subcore *c = h->core;

	if (__atomic_sub_fetch(&h->claims, 1, __ATOMIC_SEQ_CST))
		return;
	if (!c) /* a gap-only message: nothing held */
		return;
	/*
	 * On a GPU, kernels that read the block may still be queued: the block goes
	 * back only after the stream release(stream=) named, else the whole device,
	 * has finished (host-side wait while librgaps has no stream-ordered release).
	 */
	if (h->cuda && rgpy_handle_ours(&c->h) &&
	    !(RGPY_STREAM_ORDERED && h->release_stream_set)) {
		char err[256];

		if (rgpy_cuda_sync(h->device, h->release_stream_set ? h->release_stream : RGPY_STREAM_NONE,
				   err, sizeof(err)))
			fprintf(stderr, "rgaps: topic '%s': before releasing message %llu: %s\n",
				c->h.topic, (unsigned long long)h->msg.seq, err);
	}
	/* The hold's struct must outlive the release: keep a reference until it is finished. */
	rgpy_hold_ref(h);
	core_ref(c); /* the core must outlive our look at its lock, whoever finishes h */
	if (!pthread_mutex_trylock(&c->h.lock)) {
		release_locked(c, h);
		h->core = NULL;
		rgpy_subcore_unlock(c);
		core_unref(c); /* h's reference */
		rgpy_hold_unref(h);
	} else {
		struct rgpy_hold *old = __atomic_load_n(&c->pending, __ATOMIC_SEQ_CST);

		do
			h->next_pending = old;
		while (!__atomic_compare_exchange_n(&c->pending, &old, h, false, __ATOMIC_SEQ_CST,
						    __ATOMIC_SEQ_CST));
		/* The holder may have looked before our push: drain it ourselves if we can. */
		if (!pthread_mutex_trylock(&c->h.lock))
			rgpy_subcore_unlock(c);
	}
	core_unref(c);
}

/* ---------------------------------------------------------------- Subscriber */

static int sub_init(PyObject *self, PyObject *args, PyObject *kw)
{
	return rgpy_handle_init((rgpy_HandleObject *)self, args, kw, &sub_role);
}

/* Copy what the library tells of the message into a fresh hold, and decode its description. */
static struct rgpy_hold *hold_new(struct rgpy_subcore *c, const rgaps_msg_t *m)
{
	rgaps_msg_info_t info = { .struct_size = sizeof(info) };
	struct rgpy_hold *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->refs = 1;
	h->claims = 1;
	h->msg = *m;
	h->gap_only = m->flags & RGAPS_MSG_GAP;
	h->cuda = c->h.cuda;
	h->device = c->h.device;
	if (!rgaps_msg_info(csub(c), m, &info)) {
		h->stream = info.stream;
		h->origin_stream = info.origin_stream;
		h->origin_seq = info.origin_seq;
		if (info.attrs && info.attr_len <= RGAPS_ATTR_MAX) {
			memcpy(h->attrs, info.attrs, info.attr_len);
			h->attr_len = (uint16_t)info.attr_len;
		}
	}
	return h;
}

/* Outside the lock: the description and the buffer protocol's arrays. */
static void hold_describe(struct rgpy_hold *h)
{
	struct rgpy_desc *d = &h->desc;
	unsigned item;

	h->described = h->attr_len &&
		       !rgpy_attrs_decode(h->attrs, h->attr_len, h->msg.size, d, &h->undescribed_why);
	if (!h->described)
		rgpy_desc_bytes(d, h->msg.size);
	item = rgpy_dtype_size(d->dtype);
	for (unsigned i = 0; i < d->ndim; i++) {
		h->shape_ss[i] = (Py_ssize_t)d->shape[i];
		h->strides_ss[i] = (Py_ssize_t)(d->has_strides ? d->strides[i] * (int64_t)item : 0);
	}
	if (!d->has_strides) { /* C order */
		Py_ssize_t s = item;

		for (int i = (int)d->ndim - 1; i >= 0; i--) {
			h->strides_ss[i] = s;
			s *= h->shape_ss[i];
		}
	}
}

/*
 * The next message, waiting up to ms (-1: without limit) in slices; NULL with an
 * exception, or - when iterating - NULL without one once the subscriber was
 * closed (by another thread meanwhile): the end of `for msg in sub`.
 */
static PyObject *take_msg(SubscriberObject *self, int ms, bool iterating)
{
	PyObject *out = NULL;
	struct rgpy_subcore *c;
	struct rgpy_hold *h = NULL;
	uint64_t deadline = 0;
	rgaps_msg_t m;
	int asked_ms = ms, r;

	if (iterating && (!self->core || self->core->closed))
		return NULL; /* StopIteration */
	if (rgpy_handle_usable(self))
		return NULL;
	c = core_of(self);
	core_ref(c); /* close() in another thread must not free it under us */
	if (ms > 0) /* in ns: a deadline in whole ms could end a wait up to 1 ms early */
		deadline = rgpy_now_ns() + (uint64_t)ms * 1000000ull;
	for (;;) {
		int slice = ms < 0 || ms > TAKE_SLICE_MS ? TAKE_SLICE_MS : ms;

		Py_BEGIN_ALLOW_THREADS
		pthread_mutex_lock(&c->h.lock);
		r = rgaps_subscriber_take(csub(c), &m, slice);
		if (!r) {
			h = hold_new(c, &m);
			if (!h) {
				rgaps_subscriber_release(csub(c), &m);
			} else if (!h->gap_only) {
				h->core = c;
				core_ref(c);
				__atomic_add_fetch(&c->nheld, 1, __ATOMIC_SEQ_CST);
			}
		}
		rgpy_subcore_unlock(c);
		Py_END_ALLOW_THREADS
		if (!r)
			break;
		if (r == -ESHUTDOWN || __atomic_load_n(&c->h.closed, __ATOMIC_ACQUIRE)) {
			/* closed by another thread meanwhile: the loop ends, a take says so */
			if (!iterating)
				rgpy_handle_usable(self);
			goto out;
		}
		if (r == -EINTR || r == -ETIMEDOUT || r == -EAGAIN) {
			if (PyErr_CheckSignals())
				goto out;
		} else if (r == -ENOBUFS) {
			rgpy_raise(r,
				   "Subscriber('%s').take: this subscriber holds as many messages as "
				   "the topic's max_holds allows (%u held); release messages, or drop "
				   "arrays made from them",
				   c->h.topic, __atomic_load_n(&c->nheld, __ATOMIC_SEQ_CST));
			goto out;
		} else {
			rgpy_raise(r, "Subscriber('%s').take", c->h.topic);
			goto out;
		}
		if (ms == 0 || (ms > 0 && rgpy_now_ns() >= deadline)) {
			rgpy_raise(-ETIMEDOUT, "Subscriber('%s').take: no message within %g s",
				   c->h.topic, asked_ms / 1000.0);
			goto out;
		}
		if (ms > 0) { /* what is left, rounded up */
			uint64_t now = rgpy_now_ns();

			ms = now >= deadline ? 1 : (int)((deadline - now + 999999) / 1000000);
		}
	}
	if (!h) {
		PyErr_NoMemory();
		goto out;
	}
	hold_describe(h);
	out = rgpy_message_new(h);
out:
	core_unref(c);
	return out;
}

static PyObject *sub_take(SubscriberObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "timeout", NULL };
	PyObject *timeout = Py_None;
	int ms;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:take", kwlist, &timeout) ||
	    rgpy_timeout_ms(timeout, -1, &ms))
		return NULL;
	return take_msg(self, ms, false);
}

static PyObject *sub_iternext(SubscriberObject *self)
{
	return take_msg(self, -1, true);
}

static PyObject *sub_iter(PyObject *self)
{
	Py_INCREF(self);
	return self;
}

static PyObject *sub_fileno(SubscriberObject *self, PyObject *unused)
{
	struct rgpy_subcore *c;
	PyObject *out;
	int fd;

	if (rgpy_handle_usable(self))
		return NULL;
	c = core_of(self);
	core_ref(c);
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&c->h.lock);
	fd = rgaps_subscriber_fd(csub(c));
	rgpy_subcore_unlock(c);
	Py_END_ALLOW_THREADS
	out = fd < 0 ? rgpy_raise(fd, "Subscriber('%s').fileno", c->h.topic) : PyLong_FromLong(fd);
	core_unref(c);
	return out;
}

static PyObject *sub_get_held(SubscriberObject *self, void *unused)
{
	return PyLong_FromUnsignedLong(self->core ? __atomic_load_n(&core_of(self)->nheld,
								     __ATOMIC_SEQ_CST)
						  : 0);
}

static PyObject *sub_repr(SubscriberObject *self)
{
	if (!self->core)
		return PyUnicode_FromString("<rgaps.Subscriber closed>");
	return PyUnicode_FromFormat("<rgaps.Subscriber topic='%s' memory=%s held=%u>",
				    self->core->topic, self->core->cuda ? "cuda" : "host",
				    __atomic_load_n(&core_of(self)->nheld, __ATOMIC_SEQ_CST));
}

static PyMethodDef sub_methods[] = {
	{ "take", (PyCFunction)(void (*)(void))sub_take, METH_VARARGS | METH_KEYWORDS,
	  "take(timeout=None) -> Message: the next message (None: wait without limit; "
	  "0: do not wait). Raises rgaps.Timeout when none came in time." },
	{ "fileno", (PyCFunction)sub_fileno, METH_NOARGS,
	  "fileno() -> int: readable when a message may be there (then take(0) until "
	  "rgaps.Timeout)." },
	RGPY_HANDLE_METHODS,
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef sub_getset[] = {
	RGPY_HANDLE_GETSET,
	{ "held", (getter)sub_get_held, NULL,
	  "messages whose memory is still held (by a Message or an array made from one)", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot sub_slots[] = {
	{ Py_tp_doc, "Subscriber(topic): takes messages of a topic (see docs/PYTHON.md)." },
	{ Py_tp_new, PyType_GenericNew },
	{ Py_tp_init, sub_init },
	{ Py_tp_dealloc, rgpy_handle_dealloc },
	{ Py_tp_methods, sub_methods },
	{ Py_tp_getset, sub_getset },
	{ Py_tp_iter, sub_iter },
	{ Py_tp_iternext, sub_iternext },
	{ Py_tp_repr, sub_repr },
	{ 0, NULL },
};

static PyType_Spec sub_spec = {
	.name = "rgaps._rgaps.Subscriber",
	.basicsize = sizeof(SubscriberObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.slots = sub_slots,
};

int rgpy_subscriber_init_type(PyObject *m)
{
	return rgpy_add_type(m, &sub_spec, "Subscriber", &rgpy_SubscriberType);
}
