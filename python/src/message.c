/*
 * rgaps._rgaps.Message: one taken message, its metadata, and its payload as
 * an array through the buffer protocol (host topics), DLPack (all topics) and
 * __cuda_array_interface__ (GPU topics), all in place in the topic's shared
 * memory.
 *
 * The release rule (docs/PYTHON.md "When a message is released"): the block
 * is given back to the publisher when every claim on it is gone. The Message
 * holds one until release() (or the end of its with block, or its garbage
 * collection); every buffer view and every DLPack capsule holds one until the
 * consumer lets go of it (PyBuffer_Release, the DLPack deleter); handing out
 * the raw address (ptr, __cuda_array_interface__, which carry no lifetime)
 * adds one that lasts until the Message object itself is gone.
 */
#include <errno.h>
#include <string.h>

#include "rgpy.h"

typedef struct {
	PyObject_HEAD
	struct rgpy_hold *h;
	bool claimed; /* the Message's own claim (until release()) */
	bool pinned;  /* a raw address went out: a claim until dealloc */
} MessageObject;

PyTypeObject *rgpy_MessageType;

PyObject *rgpy_message_new(struct rgpy_hold *h)
{
	MessageObject *m = PyObject_New(MessageObject, rgpy_MessageType);

	if (!m) {
		rgpy_hold_unclaim(h);
		rgpy_hold_unref(h);
		return NULL;
	}
	m->h = h;
	m->claimed = true;
	m->pinned = false;
	return (PyObject *)m;
}

static void msg_dealloc(MessageObject *self)
{
	if (self->claimed)
		rgpy_hold_unclaim(self->h);
	if (self->pinned)
		rgpy_hold_unclaim(self->h);
	rgpy_hold_unref(self->h);
	rgpy_free((PyObject *)self);
}

/* Why the payload cannot be handed out as an array now, or NULL. */
static const char *unusable(MessageObject *self)
{
	if (!self->claimed)
		return "the message was released: make arrays from it before release() or inside "
		       "its with block (arrays made before keep it valid)";
	return NULL;
}

static DLDevice device_of(const struct rgpy_hold *h)
{
	return h->cuda ? (DLDevice){ kDLCUDA, h->device } : (DLDevice){ kDLCPU, 0 };
}

static void *data_of(const struct rgpy_hold *h)
{
	static const char empty[1];

	/* A gap-only message has no payload; arrays of it are empty but need an address. */
	return h->msg.data ? h->msg.data : (void *)empty;
}

/* ---------------------------------------------------------------- the stream-ordered wait */

static int wait_on(MessageObject *self, PyObject *stream)
{
#if RGPY_STREAM_ORDERED
	struct rgpy_hold *h = self->h;
	bool given;
	uintptr_t s;
	int r = 0;

	if (!h->cuda || !h->core || rgpy_stream_arg(stream, &given, &s))
		return PyErr_Occurred() ? -1 : 0;
	if (!given)
		s = RGPY_STREAM_LEGACY;
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&h->core->h.lock);
	r = rgaps_msg_wait(h->core->h.c, &h->msg, (void *)s);
	rgpy_subcore_unlock(h->core);
	Py_END_ALLOW_THREADS
	if (r) {
		rgpy_raise(r, "Message.wait");
		return -1;
	}
	return 0;
#else
	/* Without the stream-ordered API, take() returns only complete messages. */
	bool given;
	uintptr_t s;

	return rgpy_stream_arg(stream, &given, &s);
#endif
}

/* ---------------------------------------------------------------- buffer protocol */

static int msg_getbuffer(MessageObject *self, Py_buffer *view, int flags)
{
	struct rgpy_hold *h = self->h;
	const char *why = unusable(self);

	if (why) {
		PyErr_SetString(PyExc_BufferError, why);
		return -1;
	}
	if (h->cuda) {
		rgpy_gpu_refusal(PyExc_BufferError, "message");
		return -1;
	}
	if (rgpy_view_fill(view, (PyObject *)self, data_of(h), &h->desc, h->shape_ss,
			   h->strides_ss, false, flags, "message"))
		return -1;
	rgpy_hold_claim(h);
	return 0;
}

static void msg_releasebuffer(MessageObject *self, Py_buffer *view)
{
	rgpy_hold_unclaim(self->h);
}

/* ---------------------------------------------------------------- DLPack */

static void export_done(void *ctx)
{
	struct rgpy_hold *h = ctx;

	rgpy_hold_unclaim(h);
	rgpy_hold_unref(h);
}

static void fill_tensor(struct rgpy_hold *h, DLTensor *t, int64_t *strides)
{
	const struct rgpy_desc *d = &h->desc;
	int64_t s = 1;

	for (int i = (int)d->ndim - 1; i >= 0; i--) {
		strides[i] = d->has_strides ? d->strides[i] : s;
		s *= d->shape[i];
	}
	*t = (DLTensor){
		.data = data_of(h),
		.device = device_of(h),
		.ndim = d->ndim,
		.dtype = d->dtype,
		.shape = (int64_t *)d->shape,
		.strides = strides,
		.byte_offset = 0,
	};
}

static PyObject *msg_dlpack(MessageObject *self, PyObject *args, PyObject *kw)
{
	struct rgpy_hold *h = self->h;
	int64_t strides[RGPY_MAX_NDIM];
	const char *why = unusable(self);
	PyObject *stream;
	bool versioned;
	DLTensor t;

	if (why) {
		PyErr_SetString(PyExc_BufferError, why);
		return NULL;
	}
	if (rgpy_dlpack_args(args, kw, device_of(h), &versioned, &stream))
		return NULL;
	/* -1: the consumer asks for no synchronisation at all. */
	if (h->cuda && stream != Py_None &&
	    !(PyLong_Check(stream) && PyLong_AsLong(stream) == -1) && wait_on(self, stream))
		return NULL;
	fill_tensor(h, &t, strides);
	rgpy_hold_ref(h);
	rgpy_hold_claim(h);
	return rgpy_dlpack_capsule(&t, versioned, DLPACK_FLAG_BITMASK_READ_ONLY, export_done, h);
}

static PyObject *msg_dlpack_device(MessageObject *self, PyObject *unused)
{
	DLDevice d = device_of(self->h);

	return Py_BuildValue("(ii)", (int)d.device_type, d.device_id);
}

/* ---------------------------------------------------------------- raw address */

static void pin(MessageObject *self)
{
	if (!self->pinned) {
		rgpy_hold_claim(self->h);
		self->pinned = true;
	}
}

static PyObject *cai(MessageObject *self, bool check_cuda)
{
	struct rgpy_hold *h = self->h;
	const char *why = unusable(self);
	PyObject *stream = Py_None, *out;

	if (check_cuda && !h->cuda) {
		PyErr_SetString(PyExc_AttributeError,
				"a host-memory message has no __cuda_array_interface__: use "
				"numpy.asarray(msg) or DLPack");
		return NULL;
	}
	if (why) {
		PyErr_SetString(PyExc_BufferError, why);
		return NULL;
	}
#if RGPY_STREAM_ORDERED
	/* The consumer orders its work after the legacy default stream, which waited for the producer. */
	if (h->cuda) {
		stream = PyLong_FromLong(RGPY_STREAM_LEGACY);
		if (!stream || wait_on(self, stream)) {
			Py_XDECREF(stream);
			return NULL;
		}
	} else {
		Py_INCREF(stream);
	}
#else
	Py_INCREF(stream);
#endif
	out = rgpy_cai_dict(&h->desc, (uintptr_t)data_of(h), true, stream);
	Py_DECREF(stream);
	if (out)
		pin(self);
	return out;
}

static PyObject *msg_get_cai(MessageObject *self, void *unused)
{
	return cai(self, true);
}

/* The same dict for any topic: lets tests check its structure on a host topic. */
static PyObject *msg_cai_any(MessageObject *self, PyObject *unused)
{
	return cai(self, false);
}

static PyObject *msg_get_ptr(MessageObject *self, void *unused)
{
	const char *why = unusable(self);

	if (why) {
		PyErr_SetString(PyExc_BufferError, why);
		return NULL;
	}
	pin(self);
	return PyLong_FromUnsignedLongLong((uintptr_t)data_of(self->h));
}

/* ---------------------------------------------------------------- methods */

static PyObject *msg_release(MessageObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "stream", NULL };
	PyObject *stream = Py_None;
	bool given;
	uintptr_t s;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|$O:release", kwlist, &stream) ||
	    rgpy_stream_arg(stream, &given, &s))
		return NULL;
	if (!self->claimed)
		Py_RETURN_NONE;
	if (given && self->h->cuda) {
		self->h->release_stream = s;
		self->h->release_stream_set = true;
	}
	self->claimed = false;
	Py_BEGIN_ALLOW_THREADS /* a GPU release may wait for the stream */
	rgpy_hold_unclaim(self->h);
	Py_END_ALLOW_THREADS
	Py_RETURN_NONE;
}

static PyObject *msg_wait(MessageObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "stream", NULL };
	PyObject *stream = Py_None;
	const char *why = unusable(self);

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:wait", kwlist, &stream))
		return NULL;
	if (why) {
		PyErr_SetString(PyExc_ValueError, why);
		return NULL;
	}
	if (wait_on(self, stream))
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *msg_enter(PyObject *self, PyObject *unused)
{
	Py_INCREF((PyObject *)self);
	return self;
}

static PyObject *msg_exit(MessageObject *self, PyObject *args)
{
	PyObject *none = PyTuple_New(0), *r;

	if (!none)
		return NULL;
	r = msg_release(self, none, NULL);
	Py_DECREF(none);
	if (!r)
		return NULL;
	Py_DECREF(r);
	Py_RETURN_FALSE;
}

/*
 * raw(): the payload's bytes as a memoryview. The view is exported by a small
 * object that keeps the Message alive and holds a claim while the view lives.
 */
typedef struct {
	PyObject_HEAD
	MessageObject *msg;
} RawObject;

static PyTypeObject *RawType;

static int raw_getbuffer(RawObject *self, Py_buffer *view, int flags)
{
	struct rgpy_hold *h = self->msg->h;

	if (PyBuffer_FillInfo(view, (PyObject *)self, data_of(h), (Py_ssize_t)h->msg.size, 1,
			      flags))
		return -1;
	rgpy_hold_claim(h);
	return 0;
}

static void raw_releasebuffer(RawObject *self, Py_buffer *view)
{
	rgpy_hold_unclaim(self->msg->h);
}

static void raw_dealloc(RawObject *self)
{
	Py_DECREF(self->msg);
	rgpy_free((PyObject *)self);
}

static PyType_Slot raw_slots[] = {
	{ Py_tp_dealloc, raw_dealloc },
	{ Py_bf_getbuffer, raw_getbuffer },
	{ Py_bf_releasebuffer, raw_releasebuffer },
	{ 0, NULL },
};

static PyType_Spec raw_spec = {
	.name = "rgaps._rgaps._RawPayload",
	.basicsize = sizeof(RawObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = raw_slots,
};

static PyObject *msg_raw(MessageObject *self, PyObject *unused)
{
	struct rgpy_hold *h = self->h;
	const char *why = unusable(self);
	RawObject *raw;
	PyObject *mv;

	if (why) {
		PyErr_SetString(PyExc_BufferError, why);
		return NULL;
	}
	if (h->cuda) {
		rgpy_gpu_refusal(PyExc_BufferError, "message");
		return NULL;
	}
	raw = PyObject_New(RawObject, RawType);
	if (!raw)
		return NULL;
	Py_INCREF((PyObject *)self);
	raw->msg = self;
	mv = PyMemoryView_FromObject((PyObject *)raw);
	Py_DECREF(raw);
	return mv;
}

/* numpy reaches __array__ only when the buffer protocol refused: say why. */
static PyObject *msg_array(MessageObject *self, PyObject *args, PyObject *kw)
{
	return rgpy_no_array(unusable(self), self->h->cuda, self->h->desc.dtype, "msg");
}

/* ---------------------------------------------------------------- attributes */

#define GET_U64(field, expr)                                                   \
	static PyObject *msg_get_##field(MessageObject *self, void *unused)    \
	{                                                                      \
		return PyLong_FromUnsignedLongLong((unsigned long long)(expr)); \
	}
GET_U64(seq, self->h->msg.seq)
GET_U64(timestamp_ns, self->h->msg.ts_ns)
GET_U64(gap, self->h->msg.gap)
GET_U64(nbytes, self->h->msg.size)
GET_U64(stream, self->h->stream)
GET_U64(origin_stream, self->h->origin_stream)
GET_U64(origin_seq, self->h->origin_seq)
GET_U64(flags, self->h->msg.flags)
#undef GET_U64

static PyObject *msg_get_timestamp(MessageObject *self, void *unused)
{
	return PyFloat_FromDouble((double)self->h->msg.ts_ns / 1e9);
}

static PyObject *msg_get_is_gap(MessageObject *self, void *unused)
{
	return PyBool_FromLong(self->h->gap_only);
}

static PyObject *msg_get_remote(MessageObject *self, void *unused)
{
	return PyBool_FromLong(!!(self->h->msg.flags & RGAPS_MSG_REMOTE));
}

static PyObject *msg_get_released(MessageObject *self, void *unused)
{
	return PyBool_FromLong(!self->claimed);
}

static PyObject *msg_get_described(MessageObject *self, void *unused)
{
	return PyBool_FromLong(self->h->described);
}

static PyObject *msg_get_undescribed_reason(MessageObject *self, void *unused)
{
	if (self->h->described || !self->h->undescribed_why)
		Py_RETURN_NONE;
	return PyUnicode_FromString(self->h->undescribed_why);
}

static PyObject *msg_get_attrs(MessageObject *self, void *unused)
{
	return PyBytes_FromStringAndSize((const char *)self->h->attrs, self->h->attr_len);
}

static PyObject *msg_get_header(MessageObject *self, void *unused)
{
	const struct rgpy_hold *h = self->h;

	if (!h->described)
		Py_RETURN_NONE;
	return PyBytes_FromStringAndSize((const char *)h->attrs + h->desc.header_off,
					 h->desc.header_len);
}

static PyObject *msg_get_dtype(MessageObject *self, void *unused)
{
	return PyUnicode_FromString(rgpy_dtype_name(self->h->desc.dtype));
}

static PyObject *msg_get_itemsize(MessageObject *self, void *unused)
{
	return PyLong_FromLong(rgpy_dtype_size(self->h->desc.dtype));
}

static PyObject *msg_get_ndim(MessageObject *self, void *unused)
{
	return PyLong_FromLong(self->h->desc.ndim);
}

static PyObject *msg_get_shape(MessageObject *self, void *unused)
{
	const struct rgpy_desc *d = &self->h->desc;
	PyObject *t = PyTuple_New(d->ndim);

	for (unsigned i = 0; t && i < d->ndim; i++)
		PyTuple_SetItem(t, i, PyLong_FromLongLong(d->shape[i]));
	return t;
}

static PyObject *msg_get_strides(MessageObject *self, void *unused)
{
	const struct rgpy_hold *h = self->h;
	PyObject *t;

	if (!h->desc.has_strides)
		Py_RETURN_NONE;
	t = PyTuple_New(h->desc.ndim);
	for (unsigned i = 0; t && i < h->desc.ndim; i++)
		PyTuple_SetItem(t, i, PyLong_FromSsize_t(h->strides_ss[i]));
	return t;
}

static PyObject *msg_get_device(MessageObject *self, void *unused)
{
	if (self->h->cuda)
		return PyUnicode_FromFormat("cuda:%d", self->h->device);
	return PyUnicode_FromString("cpu");
}

static PyObject *msg_repr(MessageObject *self)
{
	const struct rgpy_hold *h = self->h;
	PyObject *shape = msg_get_shape(self, NULL), *r;

	if (!shape)
		return NULL;
	if (h->gap_only)
		r = PyUnicode_FromFormat("<rgaps.Message seq=%llu gap-only: %llu lost>",
					 (unsigned long long)h->msg.seq,
					 (unsigned long long)h->msg.gap);
	else
		r = PyUnicode_FromFormat("<rgaps.Message seq=%llu %s%R %zu B on %s gap=%llu%s>",
					 (unsigned long long)h->msg.seq,
					 rgpy_dtype_name(h->desc.dtype), shape, h->msg.size,
					 h->cuda ? "cuda" : "cpu", (unsigned long long)h->msg.gap,
					 self->claimed ? "" : " released");
	Py_DECREF(shape);
	return r;
}

static PyMethodDef msg_methods[] = {
	{ "release", (PyCFunction)(void (*)(void))msg_release, METH_VARARGS | METH_KEYWORDS,
	  "release(*, stream=None): give the message back. Arrays already made from it stay "
	  "valid, and keep it, until they are freed. On a GPU topic the memory is reused only "
	  "after `stream` (default: the whole device) has finished its work so far." },
	{ "wait", (PyCFunction)(void (*)(void))msg_wait, METH_VARARGS | METH_KEYWORDS,
	  "wait(stream=None): order `stream` after the publisher's writes (GPU topics with the "
	  "stream-ordered C API; otherwise take() already returned a complete message)." },
	{ "raw", (PyCFunction)msg_raw, METH_NOARGS,
	  "raw() -> memoryview: the payload's bytes (host topics)." },
	{ "__dlpack__", (PyCFunction)(void (*)(void))msg_dlpack, METH_VARARGS | METH_KEYWORDS,
	  "DLPack export, in place and read-only." },
	{ "__dlpack_device__", (PyCFunction)msg_dlpack_device, METH_NOARGS, NULL },
	{ "__array__", (PyCFunction)(void (*)(void))msg_array, METH_VARARGS | METH_KEYWORDS,
	  NULL },
	{ "_cuda_array_interface", (PyCFunction)msg_cai_any, METH_NOARGS,
	  "__cuda_array_interface__'s dict for any topic (tests)." },
	{ "__enter__", msg_enter, METH_NOARGS, NULL },
	{ "__exit__", (PyCFunction)msg_exit, METH_VARARGS, NULL },
	{ NULL, NULL, 0, NULL },
};

#define RO(name, doc) { #name, (getter)msg_get_##name, NULL, doc, NULL }
static PyGetSetDef msg_getset[] = {
	RO(seq, "sequence number in its publisher's stream, from 0"),
	RO(timestamp_ns, "publish time, CLOCK_REALTIME nanoseconds of the origin host"),
	RO(timestamp, "publish time in seconds, like time.time()"),
	RO(gap, "messages of this stream lost just before this one"),
	RO(is_gap, "True for a gap-only message (no payload; reports `gap` lost messages)"),
	RO(nbytes, "payload bytes"),
	RO(remote, "True if the message came from another host"),
	RO(stream, "its publisher stream here"),
	RO(origin_stream, "its stream on the host it was published on"),
	RO(origin_seq, "its sequence number there"),
	RO(flags, "RGAPS_MSG_* flags of the C API"),
	RO(released, "True once release() was called (arrays may still hold the memory)"),
	RO(described, "True if the publisher sent an rgaps array description"),
	RO(undescribed_reason, "why an attribute block was not used as a description, or None"),
	RO(attrs, "the raw attribute block"),
	RO(header, "the user header sent with publish(header=...), or None"),
	RO(dtype, "element type name ('float32', 'uint8', ...)"),
	RO(itemsize, "bytes per element"),
	RO(ndim, "number of dimensions"),
	RO(shape, "the array's shape"),
	RO(strides, "strides in bytes, or None when C-contiguous"),
	RO(device, "'cpu' or 'cuda:N'"),
	{ "ptr", (getter)msg_get_ptr, NULL,
	  "address of the payload; reading it keeps the message held until this object is "
	  "gone",
	  NULL },
	{ "__cuda_array_interface__", (getter)msg_get_cai, NULL,
	  "version 3 interface (GPU topics); reading it keeps the message held until this "
	  "object is gone",
	  NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};
#undef RO

static PyType_Slot msg_slots[] = {
	{ Py_tp_doc, "A message taken from a topic (see docs/PYTHON.md). Made by "
		     "Subscriber.take(); use it in a with block." },
	{ Py_tp_dealloc, msg_dealloc },
	{ Py_tp_methods, msg_methods },
	{ Py_tp_getset, msg_getset },
	{ Py_tp_repr, msg_repr },
	{ Py_bf_getbuffer, msg_getbuffer },
	{ Py_bf_releasebuffer, msg_releasebuffer },
	{ 0, NULL },
};

static PyType_Spec msg_spec = {
	.name = "rgaps._rgaps.Message",
	.basicsize = sizeof(MessageObject),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
	.slots = msg_slots,
};

int rgpy_message_init_type(PyObject *m)
{
	return rgpy_add_type(m, &msg_spec, "Message", &rgpy_MessageType) ||
	       rgpy_add_type(m, &raw_spec, NULL, &RawType);
}
