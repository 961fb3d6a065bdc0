/*
 * DLPack export (capsules whose deleter gives a claim back) and the
 * __dlpack__ keyword protocol, plus the __cuda_array_interface__ dict: what
 * Message and Loan hand to array libraries. The rules for the capsule follow
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
