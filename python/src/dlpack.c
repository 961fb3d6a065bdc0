/*
 * The exports Message and Loan share: buffer-protocol views, DLPack capsules
 * (whose deleter gives a claim back) and the __dlpack__ keyword protocol, the
 * __cuda_array_interface__ dict, and the refusals numpy's __array__ meets. The rules for the capsule follow
 * the DLPack Python specification: a capsule named "dltensor" (or, when the
 * consumer asked for max_version >= (1, 0), "dltensor_versioned") that the
 * consumer renames to "used_..." when it takes ownership; if nobody consumes
 * it, the capsule's destructor calls the deleter itself.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rgpy.h"

struct export {
	union {
		DLManagedTensor legacy;
		DLManagedTensorVersioned v;
	} m;
	int64_t shape[RGPY_MAX_NDIM], strides[RGPY_MAX_NDIM];
	void (*done)(void *ctx);
	void *ctx;
};

static void legacy_deleter(DLManagedTensor *self)
{
	struct export *e = self->manager_ctx;

	e->done(e->ctx);
	free(e);
}

static void versioned_deleter(DLManagedTensorVersioned *self)
{
	struct export *e = self->manager_ctx;

	e->done(e->ctx);
	free(e);
}

/* Nobody consumed the capsule: the deleter is ours to call. */
static void capsule_destructor(PyObject *cap)
{
	if (PyCapsule_IsValid(cap, "dltensor")) {
		DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");

		if (m && m->deleter)
			m->deleter(m);
	} else if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
		DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");

		if (m && m->deleter)
			m->deleter(m);
	}
}

PyObject *rgpy_dlpack_capsule(const DLTensor *t, bool versioned, uint64_t flags,
			      void (*done)(void *ctx), void *ctx)
{
	struct export *e = calloc(1, sizeof(*e));
	DLTensor *dst;
	PyObject *cap;

	if (!e) {
		done(ctx);
		return PyErr_NoMemory();
	}
	e->done = done;
	e->ctx = ctx;
	if (versioned) {
		e->m.v.version = (DLPackVersion){ RGPY_DLPACK_MAJOR, RGPY_DLPACK_MINOR };
		e->m.v.manager_ctx = e;
		e->m.v.deleter = versioned_deleter;
		e->m.v.flags = flags;
		dst = &e->m.v.dl_tensor;
	} else {
		e->m.legacy.manager_ctx = e;
		e->m.legacy.deleter = legacy_deleter;
		dst = &e->m.legacy.dl_tensor;
	}
	*dst = *t;
	memcpy(e->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
	memcpy(e->strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
	dst->shape = e->shape;
	dst->strides = e->strides;
	cap = PyCapsule_New(&e->m, versioned ? "dltensor_versioned" : "dltensor",
			    capsule_destructor);
	if (!cap) {
		done(ctx);
		free(e);
	}
	return cap;
}

static int parse_pair(PyObject *o, const char *what, long *a_p, long *b_p)
{
	if (!PyTuple_Check(o) || PyTuple_Size(o) != 2) {
		PyErr_Format(PyExc_TypeError, "%s must be a tuple of two ints, not %R", what, o);
		return -1;
	}
	*a_p = PyLong_AsLong(PyTuple_GetItem(o, 0));
	*b_p = PyLong_AsLong(PyTuple_GetItem(o, 1));
	return PyErr_Occurred() ? -1 : 0;
}

int rgpy_dlpack_args(PyObject *args, PyObject *kw, DLDevice here, bool *versioned_p,
		     PyObject **stream_p)
{
	static char *kwlist[] = { "stream", "max_version", "dl_device", "copy", NULL };
	PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
	long a, b;

	/* stream may come positionally: consumers written before the keyword-only signature. */
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$OOO:__dlpack__", kwlist, &stream,
					 &max_version, &dl_device, &copy))
		return -1;
	*versioned_p = false;
	if (max_version != Py_None) {
		if (parse_pair(max_version, "max_version", &a, &b))
			return -1;
		*versioned_p = a >= RGPY_DLPACK_MAJOR;
	}
	if (dl_device != Py_None) {
		if (parse_pair(dl_device, "dl_device", &a, &b))
			return -1;
		if (a != here.device_type || b != here.device_id) {
			PyErr_Format(PyExc_BufferError,
				     "rgaps exports its shared memory in place, on device (%d, %d); "
				     "it cannot export to device (%ld, %ld)",
				     (int)here.device_type, here.device_id, a, b);
			return -1;
		}
	}
	if (copy != Py_None && PyObject_IsTrue(copy)) {
		PyErr_SetString(PyExc_BufferError,
				"rgaps exports its shared memory in place; copy=True is not "
				"supported (copy the array you get instead)");
		return -1;
	}
	*stream_p = stream;
	return 0;
}

PyObject *rgpy_cai_dict(const struct rgpy_desc *d, uintptr_t ptr, bool readonly, PyObject *stream)
{
	const char *ts = rgpy_dtype_typestr(d->dtype);
	unsigned item = rgpy_dtype_size(d->dtype);
	PyObject *shape, *strides = Py_None, *out;

	if (!ts) {
		PyErr_Format(PyExc_TypeError,
			     "%s has no __cuda_array_interface__ typestr: use DLPack "
			     "(torch.from_dlpack)",
			     rgpy_dtype_name(d->dtype));
		return NULL;
	}
	shape = PyTuple_New(d->ndim);
	if (!shape)
		return NULL;
	for (unsigned i = 0; i < d->ndim; i++)
		PyTuple_SetItem(shape, i, PyLong_FromLongLong(d->shape[i]));
	if (d->has_strides) {
		strides = PyTuple_New(d->ndim);
		if (!strides) {
			Py_DECREF(shape);
			return NULL;
		}
		for (unsigned i = 0; i < d->ndim; i++)
			PyTuple_SetItem(strides, i, PyLong_FromLongLong(d->strides[i] * (int64_t)item));
	} else {
		Py_INCREF(strides);
	}
	out = Py_BuildValue("{s:N,s:s,s:(KO),s:i,s:N,s:O}", "shape", shape, "typestr", ts, "data",
			    (unsigned long long)ptr, readonly ? Py_True : Py_False, "version", 3,
			    "strides", strides, "stream", stream);
	return out;
}

int rgpy_view_fill(Py_buffer *view, PyObject *obj, void *buf, const struct rgpy_desc *d,
		   Py_ssize_t *shape, Py_ssize_t *strides, bool writable, int flags,
		   const char *what)
{
	const char *fmt = rgpy_dtype_format(d->dtype);
	unsigned item = rgpy_dtype_size(d->dtype);
	Py_ssize_t n = 1;

	if (!writable && (flags & PyBUF_WRITABLE)) {
		PyErr_Format(PyExc_BufferError,
			     "%ss are read-only (subscribers map the pool read-only)", what);
		return -1;
	}
	if (!fmt) {
		PyErr_Format(PyExc_BufferError,
			     "%s has no buffer-protocol format: use DLPack (torch.from_dlpack(%s))",
			     rgpy_dtype_name(d->dtype), what);
		return -1;
	}
	if (!(flags & PyBUF_STRIDES) && d->has_strides) {
		PyErr_SetString(PyExc_BufferError,
				"the array is not C-contiguous: ask for strides (numpy.asarray does)");
		return -1;
	}
	for (unsigned i = 0; i < d->ndim; i++)
		n *= shape[i];
	view->obj = obj;
	Py_INCREF(obj);
	view->buf = buf;
	view->len = n * (Py_ssize_t)item;
	view->readonly = !writable;
	view->itemsize = item;
	view->format = (flags & PyBUF_FORMAT) ? (char *)fmt : NULL;
	view->ndim = (flags & PyBUF_ND) ? d->ndim : 1;
	view->shape = (flags & PyBUF_ND) ? shape : NULL;
	view->strides = (flags & PyBUF_STRIDES) ? strides : NULL;
	view->suboffsets = NULL;
	view->internal = NULL;
	return 0;
}

void rgpy_gpu_refusal(PyObject *exc, const char *what)
{
	PyErr_Format(exc,
		     "the %s is in GPU memory, which the buffer protocol and numpy cannot reach: "
		     "use torch.from_dlpack(%s), cupy.asarray(%s) or jax.dlpack.from_dlpack(%s) "
		     "(then .cpu() or .get() for a host copy)",
		     what, what, what, what);
}

PyObject *rgpy_no_array(const char *why, bool cuda, DLDataType t, const char *what)
{
	if (why) /* released or committed: as the buffer protocol says it */
		PyErr_SetString(PyExc_BufferError, why);
	else if (cuda)
		rgpy_gpu_refusal(PyExc_TypeError, what);
	else
		PyErr_Format(PyExc_TypeError,
			     "%s has no numpy buffer format: use DLPack (torch.from_dlpack(%s))",
			     rgpy_dtype_name(t), what);
	return NULL;
}
