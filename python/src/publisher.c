/*
 * rgaps._rgaps.Publisher and Loan.
 *
 * publish() reads any array-like through the buffer protocol (NumPy, bytes),
 * DLPack (torch, CuPy, JAX) or __cuda_array_interface__ (Numba, CuPy),
 * describes it in the attribute block (attrs.c) and pushes it: one copy into
 * the publisher's pool. loan() hands out a writable array in the pool itself,
 * published when its with block ends (zero copies).
 *
 * GPU sources and streams: the producer's writes must be complete before the
 * copy starts. With the stream-ordered C API (RGPY_HAVE_ASYNC_PUB) the copy is
 * queued on the producer's stream; without it the host waits for that stream
 * first (the DLPack producer is asked to order its work on the stream we
 * name: the caller's, else the legacy default stream).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rgpy.h"

typedef rgpy_HandleObject PublisherObject;

enum loan_state { LOAN_OPEN, LOAN_COMMITTED, LOAN_CANCELLED };

struct rgpy_loan {
	uint32_t refs; /* the Loan object, plus one per export */
	struct rgpy_handle *core;
	rgaps_loan_t loan;
	enum loan_state state;
	struct rgpy_desc desc;
	Py_ssize_t shape_ss[RGPY_MAX_NDIM], strides_ss[RGPY_MAX_NDIM];
	int64_t strides[RGPY_MAX_NDIM];
	size_t attr_len;
	uint8_t attrs[RGAPS_ATTR_MAX];
};

typedef struct {
	PyObject_HEAD
	struct rgpy_loan *l;
} LoanObject;

PyTypeObject *rgpy_PublisherType, *rgpy_LoanType;

static const uint8_t zero_pad[1];

/* ---------------------------------------------------------------- the core */

static void *pub_attach(const char *topic)
{
	return rgaps_publisher_init(topic);
}

static int pub_info_of(void *c, rgaps_topic_info_t *info)
{
	return rgaps_publisher_info(c, info);
}

static void pub_destroy(void *c)
{
	rgaps_publisher_destroy(c);
}

#ifdef RGPY_HAVE_CLOSE_WAKES
/* close(): a publish waiting for room in another thread ends (-ECANCELED, within 200 ms). */
static void pub_close(void *c)
{
	rgaps_publisher_interrupt(c);
}
#endif

static const struct rgpy_role pub_role = {
	.name = "Publisher",
	.core_size = sizeof(struct rgpy_handle),
	.attach = pub_attach,
	.info = pub_info_of,
	.destroy = pub_destroy,
#ifdef RGPY_HAVE_CLOSE_WAKES
	.close = pub_close,
#endif
};

static rgaps_publisher_t *cpub(struct rgpy_handle *c)
{
	return c->c;
}

static PyObject *raise_push(int r, struct rgpy_handle *c, const char *op, uint64_t size)
{
	if (r == -EINTR && PyErr_Occurred())
		return NULL; /* a signal handler raised (Ctrl-C: KeyboardInterrupt) */
	if (r == -ECANCELED || __atomic_load_n(&c->closed, __ATOMIC_ACQUIRE)) {
		PyErr_Format(PyExc_ValueError,
			     "Publisher('%s').%s: the publisher was closed while it waited for room",
			     c->topic, op);
		return NULL;
	}
	if (r == -EMSGSIZE)
		return rgpy_raise(r, "Publisher('%s').%s: %llu bytes, the topic's max_message_size is %zu",
				  c->topic, op, (unsigned long long)size, c->max_message_size);
	if (r == -ETIMEDOUT || r == -EAGAIN)
		return rgpy_raise(-ETIMEDOUT,
				  "Publisher('%s').%s: no room in the topic's pool or queue in time "
				  "(subscribers hold or have not read the earlier messages)",
				  c->topic, op);
	if (r == -ENOBUFS)
		return rgpy_raise(r, "Publisher('%s').%s: this publisher holds the topic's "
				     "max_loans loans already: commit or cancel some",
				  c->topic, op);
	return rgpy_raise(r, "Publisher('%s').%s", c->topic, op);
}

/* One wait of a publish, push or loan, run without the GIL under the handle's lock. */
typedef int (*pub_op)(struct rgpy_handle *c, void *ctx, int timeout_ms);

/*
 * Run op until it is done or fails for good. A signal that interrupts its
 * wait (-EINTR) goes to Python's handlers first, as take() does: Ctrl-C
 * raises KeyboardInterrupt from here, at once; a handler that raises nothing
 * lets the wait go on for what is left of timeout_ms (-1: the topic's
 * block_timeout_ms). Returns 0 or op's error (-EINTR: with the exception set).
 */
static int pub_run(struct rgpy_handle *c, pub_op op, void *ctx, int ms)
{
	uint64_t deadline = 0;
	int r;

	if (ms < 0 && c->block_timeout_ms >= 0)
		ms = c->block_timeout_ms;
	if (ms > 0)
		deadline = rgpy_now_ns() + (uint64_t)ms * 1000000ull;
	for (;;) {
		Py_BEGIN_ALLOW_THREADS
		pthread_mutex_lock(&c->lock);
		r = op(c, ctx, ms);
		pthread_mutex_unlock(&c->lock);
		Py_END_ALLOW_THREADS
		if (r != -EINTR || PyErr_CheckSignals())
			return r;
		if (ms > 0) { /* what is left, rounded up */
			uint64_t now = rgpy_now_ns();

			if (now >= deadline)
				return -ETIMEDOUT;
			ms = (int)((deadline - now + 999999) / 1000000);
		}
	}
}

struct push_args {
	size_t size;
	const void *data;
	rgaps_pub_opts_t *o;
};

static int push_op(struct rgpy_handle *c, void *ctx, int timeout_ms)
{
	struct push_args *a = ctx;

	a->o->timeout_ms = timeout_ms;
	return rgaps_publisher_push_ex(cpub(c), a->size, a->data, a->o);
}

/* ---------------------------------------------------------------- Publisher */

static int pub_init(PyObject *self, PyObject *args, PyObject *kw)
{
	return rgpy_handle_init((rgpy_HandleObject *)self, args, kw, &pub_role);
}

/* What publish() found in its argument. */
struct source {
	const void *ptr;
	struct rgpy_desc d;
	bool on_gpu;	   /* not readable by the CPU */
	int device;	   /* its GPU */
	uintptr_t order[2]; /* streams the producer's writes are on */
	int norder;
	Py_buffer view;
	bool have_view;
	PyObject *capsule;   /* the DLPack capsule we consumed */
	void *managed;	     /* its managed tensor, deleted after the copy */
	bool versioned;
	PyObject *keep;	     /* __cuda_array_interface__ source, alive until the copy is done */
	char what[96];	     /* "float32 array", for errors */
};

static void source_done(struct source *s)
{
	if (s->have_view)
		PyBuffer_Release(&s->view);
	if (s->managed) {
		if (s->versioned) {
			DLManagedTensorVersioned *m = s->managed;

			if (m->deleter)
				m->deleter(m);
		} else {
			DLManagedTensor *m = s->managed;

			if (m->deleter)
				m->deleter(m);
		}
	}
	Py_XDECREF(s->capsule);
	Py_XDECREF(s->keep);
}

/* Strides in bytes (or NULL: C order) into elements; 0 or -1 with an exception. */
static int set_strides(struct source *s, const Py_ssize_t *shape, const Py_ssize_t *strides,
		       Py_ssize_t item)
{
	struct rgpy_desc *d = &s->d;

	for (unsigned i = 0; i < d->ndim; i++) {
		d->shape[i] = shape[i];
		if (strides) {
			if (strides[i] < 0 || strides[i] % item) {
				PyErr_SetString(PyExc_ValueError,
						"publish(): the array has negative or unaligned "
						"strides: publish a contiguous copy "
						"(numpy.ascontiguousarray(a), t.contiguous())");
				return -1;
			}
			d->strides[i] = strides[i] / item;
		}
	}
	d->has_strides = strides != NULL;
	return 0;
}

static int check_layout(struct source *s)
{
	for (unsigned i = 0; i < s->d.ndim; i++) {
		if (s->d.shape[i] < 0) {
			PyErr_Format(PyExc_ValueError,
				     "publish(): the %s has a negative shape (%lld in dimension %u): "
				     "no array has that",
				     s->what[0] ? s->what : "array", (long long)s->d.shape[i], i);
			return -1;
		}
	}
	rgpy_desc_normalise(&s->d);
	if (rgpy_desc_check(&s->d, true)) {
		PyErr_SetString(PyExc_ValueError,
				"publish(): the array is not contiguous (it has holes between its "
				"elements): publish a contiguous copy (numpy.ascontiguousarray(a), "
				"t.contiguous())");
		return -1;
	}
	return 0;
}

static int from_buffer(PyObject *obj, struct source *s)
{
	Py_buffer *v = &s->view;
	Py_ssize_t one_dim;

	if (PyObject_GetBuffer(obj, v, PyBUF_RECORDS_RO))
		return -1;
	s->have_view = true; /* from here on, errors are about the array, not the protocol */
	if (rgpy_dtype_from_format(v->format, v->itemsize, &s->d.dtype)) {
		PyErr_Format(PyExc_TypeError,
			     "publish(): buffer format '%s' is not a dtype rgaps describes; "
			     "publish memoryview(obj).cast('B') to send its bytes",
			     v->format ? v->format : "B");
		return -1;
	}
	if (v->ndim > RGPY_MAX_NDIM) {
		PyErr_Format(PyExc_ValueError, "publish(): %d dimensions, rgaps describes at most %d",
			     v->ndim, RGPY_MAX_NDIM);
		return -1;
	}
	s->d.ndim = (uint8_t)v->ndim;
	one_dim = v->len / v->itemsize;
	if (set_strides(s, v->shape ? v->shape : &one_dim,
			PyBuffer_IsContiguous(v, 'C') ? NULL : v->strides, v->itemsize))
		return -1;
	s->ptr = v->buf;
	return check_layout(s);
}

/* obj.__dlpack__(**kw) with max_version=(1, 0), or without it for older producers. */
static PyObject *call_dlpack(PyObject *obj, PyObject *stream)
{
	PyObject *meth = PyObject_GetAttrString(obj, "__dlpack__"), *args, *kw, *cap;

	if (!meth)
		return NULL;
	args = PyTuple_New(0);
	kw = Py_BuildValue("{s:(ii)}", "max_version", RGPY_DLPACK_MAJOR, RGPY_DLPACK_MINOR);
	if (kw && stream)
		PyDict_SetItemString(kw, "stream", stream);
	cap = args && kw ? PyObject_Call(meth, args, kw) : NULL;
	if (!cap && PyErr_ExceptionMatches(PyExc_TypeError)) {
		PyErr_Clear();
		if (stream)
			PyDict_DelItemString(kw, "max_version");
		cap = stream ? PyObject_Call(meth, args, kw) : PyObject_CallNoArgs(meth);
	}
	Py_XDECREF(kw);
	Py_XDECREF(args);
	Py_DECREF(meth);
	return cap;
}

static int from_dlpack(PyObject *obj, struct source *s, bool stream_given, uintptr_t stream)
{
	PyObject *dev = PyObject_CallMethod(obj, "__dlpack_device__", NULL), *st = NULL;
	const DLTensor *t;
	long type, id;

	if (!dev)
		return -1;
	type = PyTuple_Check(dev) && PyTuple_Size(dev) == 2 ? PyLong_AsLong(PyTuple_GetItem(dev, 0))
							    : -1;
	id = type >= 0 ? PyLong_AsLong(PyTuple_GetItem(dev, 1)) : -1;
	Py_DECREF(dev);
	if (PyErr_Occurred())
		return -1;
	switch (type) {
	case kDLCPU:
	case kDLCUDAHost:
		break;
	case kDLCUDA:
	case kDLCUDAManaged:
		s->on_gpu = true;
		s->device = (int)id;
		/* The producer orders its work before this stream; we then wait for it (or queue on it). */
		s->order[s->norder++] = stream_given ? stream : RGPY_STREAM_LEGACY;
		st = PyLong_FromUnsignedLongLong(s->order[0]);
		if (!st)
			return -1;
		break;
	default:
		PyErr_Format(PyExc_TypeError,
			     "publish(): the array is on DLPack device type %ld, which rgaps does "
			     "not serve (CPU and CUDA only)",
			     type);
		return -1;
	}
	s->capsule = call_dlpack(obj, st);
	Py_XDECREF(st);
	if (!s->capsule)
		return -1;
	if (PyCapsule_IsValid(s->capsule, "dltensor_versioned")) {
		DLManagedTensorVersioned *m = PyCapsule_GetPointer(s->capsule, "dltensor_versioned");

		if (m->version.major != RGPY_DLPACK_MAJOR) {
			PyErr_Format(PyExc_BufferError, "publish(): DLPack version %u.%u not supported",
				     m->version.major, m->version.minor);
			return -1;
		}
		if (PyCapsule_SetName(s->capsule, "used_dltensor_versioned"))
			return -1;
		s->managed = m;
		s->versioned = true;
		t = &m->dl_tensor;
	} else if (PyCapsule_IsValid(s->capsule, "dltensor")) {
		DLManagedTensor *m = PyCapsule_GetPointer(s->capsule, "dltensor");

		if (PyCapsule_SetName(s->capsule, "used_dltensor"))
			return -1;
		s->managed = m;
		t = &m->dl_tensor;
	} else {
		PyErr_SetString(PyExc_TypeError,
				"publish(): __dlpack__ did not return a DLPack capsule");
		return -1;
	}
	if (t->ndim < 0 || t->ndim > RGPY_MAX_NDIM) {
		PyErr_Format(PyExc_ValueError, "publish(): %d dimensions, rgaps describes at most %d",
			     (int)t->ndim, RGPY_MAX_NDIM);
		return -1;
	}
	s->d.dtype = t->dtype;
	s->d.ndim = (uint8_t)t->ndim;
	if (!rgpy_dtype_size(t->dtype)) {
		PyErr_Format(PyExc_TypeError,
			     "publish(): DLPack dtype (code %u, %u bits, %u lanes) is not one rgaps "
			     "describes",
			     t->dtype.code, t->dtype.bits, t->dtype.lanes);
		return -1;
	}
	for (int i = 0; i < t->ndim; i++) {
		s->d.shape[i] = t->shape[i];
		if (t->strides) {
			if (t->strides[i] < 0) {
				PyErr_SetString(PyExc_ValueError,
						"publish(): negative strides: publish a contiguous "
						"copy (t.contiguous())");
				return -1;
			}
			s->d.strides[i] = t->strides[i];
		}
	}
	s->d.has_strides = t->strides != NULL;
	s->ptr = (const uint8_t *)t->data + t->byte_offset;
	return check_layout(s);
}

static int from_cai(PyObject *obj, struct source *s, bool stream_given, uintptr_t stream)
{
	PyObject *d = PyObject_GetAttrString(obj, "__cuda_array_interface__"), *v;
	Py_ssize_t shape[RGPY_MAX_NDIM], strides[RGPY_MAX_NDIM], n, item;
	const char *ts;
	int r = -1;

	if (!d)
		return -1;
	if (!PyDict_Check(d)) {
		PyErr_SetString(PyExc_TypeError, "publish(): __cuda_array_interface__ is not a dict");
		goto out;
	}
	v = PyDict_GetItemString(d, "mask");
	if (v && v != Py_None) {
		PyErr_SetString(PyExc_ValueError, "publish(): masked arrays are not supported");
		goto out;
	}
	v = PyDict_GetItemString(d, "typestr");
	ts = v && PyUnicode_Check(v) ? PyUnicode_AsUTF8AndSize(v, NULL) : NULL;
	if (!ts || rgpy_dtype_from_typestr(ts, &s->d.dtype)) {
		PyErr_Format(PyExc_TypeError, "publish(): typestr %R is not a dtype rgaps describes",
			     v ? v : Py_None);
		goto out;
	}
	item = rgpy_dtype_size(s->d.dtype);
	v = PyDict_GetItemString(d, "shape");
	n = v && PyTuple_Check(v) ? PyTuple_Size(v) : -1;
	if (n < 0 || n > RGPY_MAX_NDIM) {
		PyErr_SetString(PyExc_ValueError,
				"publish(): __cuda_array_interface__ shape must be a tuple of at "
				"most 15 ints");
		goto out;
	}
	s->d.ndim = (uint8_t)n;
	for (Py_ssize_t i = 0; i < n; i++)
		shape[i] = PyLong_AsSsize_t(PyTuple_GetItem(v, i));
	v = PyDict_GetItemString(d, "strides");
	if (v && v != Py_None) {
		if (!PyTuple_Check(v) || PyTuple_Size(v) != n) {
			PyErr_SetString(PyExc_ValueError, "publish(): strides do not match the shape");
			goto out;
		}
		for (Py_ssize_t i = 0; i < n; i++)
			strides[i] = PyLong_AsSsize_t(PyTuple_GetItem(v, i));
	}
	if (PyErr_Occurred() ||
	    set_strides(s, shape, v && v != Py_None ? strides : NULL, item))
		goto out;
	v = PyDict_GetItemString(d, "data");
	if (!v || !PyTuple_Check(v) || PyTuple_Size(v) != 2) {
		PyErr_SetString(PyExc_ValueError, "publish(): __cuda_array_interface__ has no data");
		goto out;
	}
	s->ptr = PyLong_AsVoidPtr(PyTuple_GetItem(v, 0));
	if (PyErr_Occurred())
		goto out;
	s->on_gpu = true;
	s->device = -1; /* the topic's, for the special stream handles */
	/* Version 3: the producer's writes may still be queued on "stream". */
	v = PyDict_GetItemString(d, "stream");
	if (v && v != Py_None) {
		unsigned long long h = PyLong_AsUnsignedLongLong(v);

		if (PyErr_Occurred())
			goto out;
		s->order[s->norder++] = (uintptr_t)h;
	}
	if (stream_given)
		s->order[s->norder++] = stream;
	Py_INCREF(obj);
	s->keep = obj;
	r = check_layout(s);
out:
	Py_DECREF(d);
	return r;
}

/*
 * Whether obj has the array protocol name: 1, 0 (absent: AttributeError), or -1
 * with the exception reading it raised (a property that fails), so that the
 * caller reports that, not a missing protocol.
 */
static int has_protocol(PyObject *obj, const char *name)
{
	PyObject *v = PyObject_GetAttrString(obj, name);

	if (v) {
		Py_DECREF(v);
		return 1;
	}
	if (!PyErr_ExceptionMatches(PyExc_AttributeError))
		return -1;
	PyErr_Clear();
	return 0;
}

/*
 * The exception being raised, set aside while other attributes are looked at,
 * then dropped or raised again. PyErr_Fetch is the 3.11 limited API's way
 * (deprecated by 3.12's headers in favour of a call 3.11 lacks).
 */
struct saved_error {
	PyObject *type, *value, *tb;
};

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void error_save(struct saved_error *e)
{
	PyErr_Fetch(&e->type, &e->value, &e->tb);
}

static void error_restore(struct saved_error *e)
{
	PyErr_Restore(e->type, e->value, e->tb);
}
#pragma GCC diagnostic pop

static void error_drop(struct saved_error *e)
{
	Py_XDECREF(e->type);
	Py_XDECREF(e->value);
	Py_XDECREF(e->tb);
}

static int source_of(PyObject *obj, struct source *s, bool stream_given, uintptr_t stream)
{
	struct saved_error refused;
	int dl, cai;

	if (PyObject_CheckBuffer(obj)) {
		if (!from_buffer(obj, s))
			return 0;
		if (s->have_view)
			return -1;
		/* A GPU array may have a buffer slot that refuses: try its other protocols. */
		error_save(&refused);
		dl = has_protocol(obj, "__dlpack__");
		cai = dl ? 0 : has_protocol(obj, "__cuda_array_interface__");
		if (dl <= 0 && cai <= 0) {
			if (dl < 0 || cai < 0) {
				error_drop(&refused); /* what the other protocol raised says more */
			} else {
				error_restore(&refused);
			}
			return -1;
		}
		error_drop(&refused);
		memset(&s->d, 0, sizeof(s->d));
	}
	dl = has_protocol(obj, "__dlpack__");
	if (dl)
		return dl < 0 ? -1 : from_dlpack(obj, s, stream_given, stream);
	cai = has_protocol(obj, "__cuda_array_interface__");
	if (cai)
		return cai < 0 ? -1 : from_cai(obj, s, stream_given, stream);
	PyErr_Format(PyExc_TypeError,
		     "publish() takes an array: an object with the buffer protocol (bytes, numpy), "
		     "__dlpack__ (torch, CuPy, JAX) or __cuda_array_interface__ (Numba), not %S",
		     (PyObject *)Py_TYPE(obj));
	return -1;
}

/* Header argument: bytes-like or None. */
static int header_arg(PyObject *o, Py_buffer *b)
{
	memset(b, 0, sizeof(*b));
	if (!o || o == Py_None)
		return 0;
	if (PyUnicode_Check(o)) {
		PyErr_SetString(PyExc_TypeError,
				"header must be bytes-like (encode text first: s.encode())");
		return -1;
	}
	return PyObject_GetBuffer(o, b, PyBUF_SIMPLE);
}

#ifdef RGPY_HAVE_ASYNC_PUB
#define SET_OPTS_STREAM(o, s) ((o).stream = (void *)(s))
#else
#define SET_OPTS_STREAM(o, s) ((void)(s))
#endif

static PyObject *pub_publish(PublisherObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "obj", "header", "timeout", "stream", NULL };
	PyObject *obj, *header = Py_None, *timeout = Py_None, *stream = Py_None;
	struct rgpy_handle *c;
	struct source s;
	uint8_t attrs[RGAPS_ATTR_MAX];
	rgaps_pub_opts_t o = { .struct_size = sizeof(o) };
	Py_buffer hdr;
	uintptr_t st;
	bool given, ordered = false;
	char err[256] = "";
	uint64_t size;
	size_t alen;
	Py_ssize_t hlen;
	int r, cr = 0, ms;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$OOO:publish", kwlist, &obj, &header,
					 &timeout, &stream) ||
	    rgpy_timeout_ms(timeout, -1, &ms) || rgpy_stream_arg(stream, &given, &st) ||
	    rgpy_handle_usable(self))
		return NULL;
	c = self->core;
	memset(&s, 0, sizeof(s));
	if (source_of(obj, &s, given, st))
		goto fail;
	if (s.on_gpu && !c->cuda) {
		PyErr_Format(PyExc_ValueError,
			     "Publisher('%s').publish: the topic keeps messages in host memory and "
			     "this array is in GPU memory: publish a host copy (t.cpu(), "
			     "cupy.asnumpy(a)) or use a topic with \"memory\": \"cuda\"",
			     c->topic);
		goto fail;
	}
	if (header_arg(header, &hdr))
		goto fail;
	hlen = hdr.buf ? hdr.len : 0;
	r = rgpy_attrs_encode(&s.d, hdr.buf, (size_t)hlen, attrs, &alen);
	if (hdr.buf)
		PyBuffer_Release(&hdr);
	if (r) {
		PyErr_Format(PyExc_ValueError,
			     "Publisher('%s').publish: the header (%zd bytes) and the array's "
			     "description do not fit in the %d-byte attribute block",
			     c->topic, hlen, RGAPS_ATTR_MAX);
		goto fail;
	}
	size = s.d.span ? s.d.span : 1; /* rgaps has no empty messages: one pad byte */
	o.attrs = attrs;
	o.attr_len = alen;
#ifdef RGPY_HAVE_ASYNC_PUB
	/* Queue the copy on the producer's stream instead of waiting for it here. */
	if (s.on_gpu && s.norder == 1) {
		SET_OPTS_STREAM(o, s.order[0]);
		ordered = true;
	}
#endif
	rgpy_handle_ref(c);
	r = 0;
	if (!ordered && s.norder) {
		Py_BEGIN_ALLOW_THREADS
		for (int i = 0; !cr && i < s.norder; i++)
			cr = rgpy_cuda_sync(s.device >= 0 ? s.device : c->device, s.order[i], err,
					    sizeof(err));
		Py_END_ALLOW_THREADS
	}
	if (!cr)
		r = pub_run(c, push_op,
			    &(struct push_args){ size, s.d.span ? s.ptr : zero_pad, &o }, ms);
	source_done(&s);
	if (cr)
		PyErr_Format(rgpy_Error, "Publisher('%s').publish: waiting for the producer's stream: %s",
			     c->topic, err);
	else if (r)
		raise_push(r, c, "publish", size);
	rgpy_handle_unref(c);
	if (cr || r)
		return NULL;
	Py_RETURN_NONE;
fail:
	source_done(&s);
	return NULL;
}

/* push(data, *, attrs=None, timeout=None): bytes with a raw attribute block, as the C API. */
static PyObject *pub_push(PublisherObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "data", "attrs", "timeout", NULL };
	PyObject *timeout = Py_None, *attrs = Py_None;
	rgaps_pub_opts_t o = { .struct_size = sizeof(o) };
	struct rgpy_handle *c;
	Py_buffer data, a;
	int r, ms;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|$OO:push", kwlist, &data, &attrs, &timeout))
		return NULL;
	if (rgpy_timeout_ms(timeout, -1, &ms) || rgpy_handle_usable(self) || header_arg(attrs, &a)) {
		PyBuffer_Release(&data);
		return NULL;
	}
	c = self->core;
	if (a.buf && a.len > RGAPS_ATTR_MAX) {
		PyErr_Format(PyExc_ValueError, "Publisher('%s').push: attrs of %zd bytes (at most %d)",
			     c->topic, a.len, RGAPS_ATTR_MAX);
		PyBuffer_Release(&a);
		PyBuffer_Release(&data);
		return NULL;
	}
	if (!data.len) {
		PyErr_Format(PyExc_ValueError,
			     "Publisher('%s').push: an empty message: rgaps messages have at least "
			     "one byte (publish() sends an empty array as one described pad byte)",
			     c->topic);
		if (a.buf)
			PyBuffer_Release(&a);
		PyBuffer_Release(&data);
		return NULL;
	}
	o.attrs = a.buf;
	o.attr_len = a.buf ? (size_t)a.len : 0;
	rgpy_handle_ref(c);
	r = pub_run(c, push_op, &(struct push_args){ (size_t)data.len, data.buf, &o }, ms);
	if (a.buf)
		PyBuffer_Release(&a);
	PyBuffer_Release(&data);
	if (r)
		raise_push(r, c, "push", (uint64_t)data.len);
	rgpy_handle_unref(c);
	if (r)
		return NULL;
	Py_RETURN_NONE;
}

/* ---------------------------------------------------------------- Loan */

static void loan_unref(struct rgpy_loan *l)
{
	struct rgpy_handle *c = l->core;

	if (__atomic_sub_fetch(&l->refs, 1, __ATOMIC_SEQ_CST))
		return;
	/* Nobody commits it any more: give the block back. */
	if (l->state == LOAN_OPEN && rgpy_handle_ours(c) && cpub(c)) {
		pthread_mutex_lock(&c->lock);
		rgaps_publisher_cancel(cpub(c), &l->loan);
		pthread_mutex_unlock(&c->lock);
	}
	rgpy_handle_unref(c);
	free(l);
}

static int loan_op(struct rgpy_handle *c, void *ctx, int timeout_ms)
{
	struct rgpy_loan *l = ctx;

	return rgaps_publisher_loan(cpub(c), l->desc.span ? l->desc.span : 1, timeout_ms, &l->loan);
}

static PyObject *pub_loan(PublisherObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "shape", "dtype", "header", "timeout", NULL };
	PyObject *shape, *header = Py_None, *timeout = Py_None;
	const char *dtype = "uint8";
	struct rgpy_handle *c;
	struct rgpy_loan *l;
	LoanObject *lo;
	Py_buffer hdr;
	Py_ssize_t n;
	int r, ms;
	unsigned item;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|s$OO:loan", kwlist, &shape, &dtype, &header,
					 &timeout) ||
	    rgpy_timeout_ms(timeout, -1, &ms) || rgpy_handle_usable(self))
		return NULL;
	c = self->core;
	l = calloc(1, sizeof(*l));
	if (!l)
		return PyErr_NoMemory();
	if (rgpy_dtype_from_name(dtype, &l->desc.dtype)) {
		PyErr_Format(PyExc_TypeError, "loan(): dtype '%s' is not one rgaps describes", dtype);
		goto err;
	}
	if (PyIndex_Check(shape)) { /* an int, numpy.int64, anything with __index__ */
		n = 1;
		l->desc.shape[0] = PyLong_AsLongLong(shape);
	} else {
		PyObject *t = PySequence_Tuple(shape);

		if (!t) {
			PyErr_Format(PyExc_TypeError,
				     "loan(): shape must be an int or a sequence of ints, not %S",
				     (PyObject *)Py_TYPE(shape));
			goto err;
		}
		n = PyTuple_Size(t);
		for (Py_ssize_t i = 0; i < n && i < RGPY_MAX_NDIM; i++)
			l->desc.shape[i] = PyLong_AsLongLong(PyTuple_GetItem(t, i));
		Py_DECREF(t);
	}
	if (PyErr_Occurred())
		goto err;
	if (n > RGPY_MAX_NDIM) {
		PyErr_Format(PyExc_ValueError, "loan(): %zd dimensions, at most %d", n, RGPY_MAX_NDIM);
		goto err;
	}
	l->desc.ndim = (uint8_t)n;
	if (rgpy_desc_check(&l->desc, true)) {
		PyErr_SetString(PyExc_ValueError, "loan(): shape must be non-negative and not overflow");
		goto err;
	}
	if (header_arg(header, &hdr))
		goto err;
	r = rgpy_attrs_encode(&l->desc, hdr.buf, hdr.buf ? (size_t)hdr.len : 0, l->attrs,
			      &l->attr_len);
	if (hdr.buf)
		PyBuffer_Release(&hdr);
	if (r) {
		PyErr_Format(PyExc_ValueError,
			     "loan(): the header and the description do not fit in %d bytes",
			     RGAPS_ATTR_MAX);
		goto err;
	}
	item = rgpy_dtype_size(l->desc.dtype);
	for (Py_ssize_t i = n - 1, s = 1; i >= 0; i--) {
		l->shape_ss[i] = (Py_ssize_t)l->desc.shape[i];
		l->strides_ss[i] = s * (Py_ssize_t)item;
		l->strides[i] = s;
		s *= (Py_ssize_t)l->desc.shape[i];
	}
	rgpy_handle_ref(c);
	r = pub_run(c, loan_op, l, ms);
	if (r) {
		raise_push(r, c, "loan", l->desc.span);
		rgpy_handle_unref(c);
		goto err;
	}
	l->core = c;
	l->refs = 1;
	lo = PyObject_New(LoanObject, rgpy_LoanType);
	if (!lo) {
		loan_unref(l);
		return NULL;
	}
	lo->l = l;
	return (PyObject *)lo;
err:
	free(l);
	return NULL;
}

static PyObject *pub_repr(PublisherObject *self)
{
	if (!self->core)
		return PyUnicode_FromString("<rgaps.Publisher closed>");
	return PyUnicode_FromFormat("<rgaps.Publisher topic='%s' memory=%s>", self->core->topic,
				    self->core->cuda ? "cuda" : "host");
}

static PyMethodDef pub_methods[] = {
	{ "publish", (PyCFunction)(void (*)(void))pub_publish, METH_VARARGS | METH_KEYWORDS,
	  "publish(obj, *, header=None, timeout=None, stream=None): copy an array (buffer "
	  "protocol, __dlpack__ or __cuda_array_interface__) once into the topic's pool with "
	  "its dtype, shape and `header` (bytes), and wake the subscribers." },
	{ "push", (PyCFunction)(void (*)(void))pub_push, METH_VARARGS | METH_KEYWORDS,
	  "push(data, *, attrs=None, timeout=None): publish bytes with a raw attribute block "
	  "(as the C API's rgaps_publisher_push_ex)." },
	{ "loan", (PyCFunction)(void (*)(void))pub_loan, METH_VARARGS | METH_KEYWORDS,
	  "loan(shape, dtype='uint8', *, header=None, timeout=None) -> Loan: a writable array "
	  "in the pool, published when its with block ends." },
	RGPY_HANDLE_METHODS,
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef pub_getset[] = {
	RGPY_HANDLE_GETSET,
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot pub_slots[] = {
	{ Py_tp_doc, "Publisher(topic): publishes arrays to a topic (see docs/PYTHON.md)." },
	{ Py_tp_new, PyType_GenericNew },
	{ Py_tp_init, pub_init },
	{ Py_tp_dealloc, rgpy_handle_dealloc },
	{ Py_tp_methods, pub_methods },
	{ Py_tp_getset, pub_getset },
	{ Py_tp_repr, pub_repr },
	{ 0, NULL },
};

static PyType_Spec pub_spec = {
	.name = "rgaps._rgaps.Publisher",
	.basicsize = sizeof(PublisherObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.slots = pub_slots,
};

/* ---------------------------------------------------------------- Loan methods */

static const char *loan_unusable(const struct rgpy_loan *l)
{
	switch (l->state) {
	case LOAN_COMMITTED:
		return "the loan was published already";
	case LOAN_CANCELLED:
		return "the loan was cancelled";
	default:
		return NULL;
	}
}

static DLDevice loan_device(const struct rgpy_loan *l)
{
	return l->core->cuda ? (DLDevice){ kDLCUDA, l->core->device } : (DLDevice){ kDLCPU, 0 };
}

static void loan_dealloc(LoanObject *self)
{
	loan_unref(self->l);
	rgpy_free((PyObject *)self);
}

static int loan_getbuffer(LoanObject *self, Py_buffer *view, int flags)
{
	struct rgpy_loan *l = self->l;
	const char *why = loan_unusable(l);

	if (why) {
		PyErr_SetString(PyExc_BufferError, why);
		return -1;
	}
	if (l->core->cuda) {
		rgpy_gpu_refusal(PyExc_BufferError, "loan");
		return -1;
	}
	return rgpy_view_fill(view, (PyObject *)self, l->loan.data, &l->desc, l->shape_ss,
			      l->strides_ss, true, flags, "loan");
}

static void loan_export_done(void *ctx)
{
	loan_unref(ctx);
}

static PyObject *loan_dlpack(LoanObject *self, PyObject *args, PyObject *kw)
{
	struct rgpy_loan *l = self->l;
	const char *why = loan_unusable(l);
	PyObject *stream;
	bool versioned;
	DLTensor t;

	if (why) {
		PyErr_SetString(PyExc_BufferError, why);
		return NULL;
	}
	if (rgpy_dlpack_args(args, kw, loan_device(l), &versioned, &stream))
		return NULL;
	t = (DLTensor){
		.data = l->loan.data,
		.device = loan_device(l),
		.ndim = l->desc.ndim,
		.dtype = l->desc.dtype,
		.shape = l->desc.shape,
		.strides = l->strides,
	};
	__atomic_add_fetch(&l->refs, 1, __ATOMIC_SEQ_CST);
	return rgpy_dlpack_capsule(&t, versioned, 0, loan_export_done, l);
}

static PyObject *loan_dlpack_device(LoanObject *self, PyObject *unused)
{
	DLDevice d = loan_device(self->l);

	return Py_BuildValue("(ii)", (int)d.device_type, d.device_id);
}

static PyObject *loan_get_cai(LoanObject *self, void *unused)
{
	struct rgpy_loan *l = self->l;
	const char *why = loan_unusable(l);

	if (!l->core->cuda) {
		PyErr_SetString(PyExc_AttributeError,
				"a host-memory loan has no __cuda_array_interface__: use "
				"numpy.asarray(loan)");
		return NULL;
	}
	if (why) {
		PyErr_SetString(PyExc_BufferError, why);
		return NULL;
	}
	return rgpy_cai_dict(&l->desc, (uintptr_t)l->loan.data, false, Py_None);
}

static PyObject *loan_commit(LoanObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "stream", "timeout", NULL };
	PyObject *stream = Py_None, *timeout = Py_None;
	struct rgpy_loan *l = self->l;
	struct rgpy_handle *c = l->core;
	rgaps_pub_opts_t o = { .struct_size = sizeof(o) };
	const char *why = loan_unusable(l);
	bool given, ordered = false;
	char err[256] = "";
	uintptr_t st;
	int r, ms;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OO:commit", kwlist, &stream, &timeout) ||
	    rgpy_timeout_ms(timeout, -1, &ms) || rgpy_stream_arg(stream, &given, &st))
		return NULL;
	if (why) {
		PyErr_SetString(PyExc_ValueError, why);
		return NULL;
	}
	if (c->closed || !rgpy_handle_ours(c)) {
		PyErr_Format(PyExc_ValueError, "Publisher('%s') is closed: the loan cannot be published",
			     c->topic);
		return NULL;
	}
	o.attrs = l->attrs;
	o.attr_len = l->attr_len;
	o.timeout_ms = ms;
#ifdef RGPY_HAVE_ASYNC_PUB
	if (c->cuda && given) {
		SET_OPTS_STREAM(o, st);
		ordered = true;
	}
#endif
	l->state = LOAN_COMMITTED; /* the C API consumes the loan whether or not this succeeds */
	Py_BEGIN_ALLOW_THREADS
	r = 0;
	/* Kernels may still be writing: wait for their stream (else the whole device). */
	if (c->cuda && !ordered)
		r = rgpy_cuda_sync(c->device, given ? st : RGPY_STREAM_NONE, err, sizeof(err));
	pthread_mutex_lock(&c->lock);
	if (r)
		rgaps_publisher_cancel(cpub(c), &l->loan);
	else
		r = rgaps_publisher_commit_ex(cpub(c), &l->loan, l->desc.span ? l->desc.span : 1, &o);
	pthread_mutex_unlock(&c->lock);
	Py_END_ALLOW_THREADS
	if (r)
		l->state = LOAN_CANCELLED; /* the library gave the block back */
	if (err[0]) {
		PyErr_Format(rgpy_Error, "Publisher('%s') loan: waiting for the GPU before commit: %s",
			     c->topic, err);
		return NULL;
	}
	/* A signal ended the wait for a queue entry: the loan is gone, its handler runs now. */
	if (r == -EINTR && PyErr_CheckSignals())
		return NULL;
	if (r)
		return raise_push(r, c, "loan commit", l->desc.span);
	Py_RETURN_NONE;
}

static PyObject *loan_cancel(LoanObject *self, PyObject *unused)
{
	struct rgpy_loan *l = self->l;
	struct rgpy_handle *c = l->core;

	if (l->state != LOAN_OPEN)
		Py_RETURN_NONE;
	l->state = LOAN_CANCELLED;
	if (!rgpy_handle_ours(c))
		Py_RETURN_NONE;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&c->lock);
	rgaps_publisher_cancel(cpub(c), &l->loan);
	pthread_mutex_unlock(&c->lock);
	Py_END_ALLOW_THREADS
	Py_RETURN_NONE;
}

static PyObject *loan_enter(LoanObject *self, PyObject *unused)
{
	const char *why = loan_unusable(self->l);

	if (why) {
		PyErr_SetString(PyExc_ValueError, why);
		return NULL;
	}
	Py_INCREF((PyObject *)self);
	return (PyObject *)self;
}

static PyObject *loan_exit(LoanObject *self, PyObject *args)
{
	PyObject *et = PyTuple_Size(args) > 0 ? PyTuple_GetItem(args, 0) : Py_None, *r;

	if (et && et != Py_None) {
		r = loan_cancel(self, NULL);
	} else {
		PyObject *empty = PyTuple_New(0);

		r = empty ? loan_commit(self, empty, NULL) : NULL;
		Py_XDECREF(empty);
	}
	if (!r)
		return NULL;
	Py_DECREF(r);
	Py_RETURN_FALSE;
}

/* numpy reaches __array__ only when the buffer protocol refused: say why. */
static PyObject *loan_array(LoanObject *self, PyObject *args, PyObject *kw)
{
	return rgpy_no_array(loan_unusable(self->l), self->l->core->cuda, self->l->desc.dtype,
			     "loan");
}

static PyObject *loan_get_state(LoanObject *self, void *unused)
{
	static const char *names[] = { "open", "committed", "cancelled" };

	return PyUnicode_FromString(names[self->l->state]);
}

static PyObject *loan_get_shape(LoanObject *self, void *unused)
{
	PyObject *t = PyTuple_New(self->l->desc.ndim);

	for (unsigned i = 0; t && i < self->l->desc.ndim; i++)
		PyTuple_SetItem(t, i, PyLong_FromLongLong(self->l->desc.shape[i]));
	return t;
}

static PyObject *loan_get_dtype(LoanObject *self, void *unused)
{
	return PyUnicode_FromString(rgpy_dtype_name(self->l->desc.dtype));
}

static PyObject *loan_get_nbytes(LoanObject *self, void *unused)
{
	return PyLong_FromUnsignedLongLong(self->l->desc.span);
}

static PyObject *loan_get_ptr(LoanObject *self, void *unused)
{
	return PyLong_FromUnsignedLongLong((uintptr_t)self->l->loan.data);
}

static PyObject *loan_repr(LoanObject *self)
{
	PyObject *shape = loan_get_shape(self, NULL), *r;
	static const char *names[] = { "open", "committed", "cancelled" };

	if (!shape)
		return NULL;
	r = PyUnicode_FromFormat("<rgaps.Loan %s%R %s>", rgpy_dtype_name(self->l->desc.dtype),
				 shape, names[self->l->state]);
	Py_DECREF(shape);
	return r;
}

static PyMethodDef loan_methods[] = {
	{ "commit", (PyCFunction)(void (*)(void))loan_commit, METH_VARARGS | METH_KEYWORDS,
	  "commit(*, stream=None, timeout=None): publish what was written (on a GPU topic after "
	  "`stream`, default the whole device, has finished writing)." },
	{ "cancel", (PyCFunction)loan_cancel, METH_NOARGS, "cancel(): give the block back unpublished." },
	{ "__dlpack__", (PyCFunction)(void (*)(void))loan_dlpack, METH_VARARGS | METH_KEYWORDS,
	  "DLPack export, writable." },
	{ "__dlpack_device__", (PyCFunction)loan_dlpack_device, METH_NOARGS, NULL },
	{ "__array__", (PyCFunction)(void (*)(void))loan_array, METH_VARARGS | METH_KEYWORDS,
	  NULL },
	{ "__enter__", (PyCFunction)loan_enter, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)loan_exit, METH_VARARGS, NULL },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef loan_getset[] = {
	{ "state", (getter)loan_get_state, NULL, "'open', 'committed' or 'cancelled'", NULL },
	{ "shape", (getter)loan_get_shape, NULL, "the array's shape", NULL },
	{ "dtype", (getter)loan_get_dtype, NULL, "element type name", NULL },
	{ "nbytes", (getter)loan_get_nbytes, NULL, "bytes of the array", NULL },
	{ "ptr", (getter)loan_get_ptr, NULL, "address of the loaned block", NULL },
	{ "__cuda_array_interface__", (getter)loan_get_cai, NULL, "version 3 (GPU topics)", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyType_Slot loan_slots[] = {
	{ Py_tp_doc, "A writable array in the topic's pool (Publisher.loan()): write it, then "
		     "leave the with block to publish it (an exception cancels it)." },
	{ Py_tp_dealloc, loan_dealloc },
	{ Py_tp_methods, loan_methods },
	{ Py_tp_getset, loan_getset },
	{ Py_tp_repr, loan_repr },
	{ Py_bf_getbuffer, loan_getbuffer },
	{ 0, NULL },
};

static PyType_Spec loan_spec = {
	.name = "rgaps._rgaps.Loan",
	.basicsize = sizeof(LoanObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = loan_slots,
};

int rgpy_publisher_init_type(PyObject *m)
{
	return rgpy_add_type(m, &pub_spec, "Publisher", &rgpy_PublisherType) ||
	       rgpy_add_type(m, &loan_spec, "Loan", &rgpy_LoanType);
}
