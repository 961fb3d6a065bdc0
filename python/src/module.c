/*
 * rgaps._rgaps: module set-up, exceptions, the fork guard, rgaps.query() and
 * small argument helpers. The types live in publisher.c, subscriber.c and
 * message.c; the pure-Python package (python/rgaps/__init__.py) re-exports them.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rgpy.h"

PyObject *rgpy_Error, *rgpy_Timeout, *rgpy_Disconnected;

PyObject *rgpy_raise(int err, const char *fmt, ...)
{
	char what[512], text[1024];
	PyObject *cls = rgpy_Error, *exc;
	va_list ap;

	if (err > 0)
		err = -err;
	switch (err) {
	case -ETIMEDOUT:
	case -EAGAIN:
		cls = rgpy_Timeout;
		break;
	case -ENOTCONN:
	case -ECONNREFUSED:
	case -ECONNRESET:
	case -EPIPE:
		cls = rgpy_Disconnected;
		break;
	}
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	snprintf(text, sizeof(text), "%s: %s", what, rgaps_strerror(err));
	exc = PyObject_CallFunction(cls, "is", -err, text);
	if (exc) {
		PyErr_SetObject(cls, exc);
		Py_DECREF(exc);
	}
	return NULL;
}

PyObject *rgpy_raise_attach(int err, const char *role, const char *topic)
{
	const char *sock = getenv("RGAPS_SOCKET");
	char text[512];
	PyObject *exc;

	if (err < 0)
		err = -err;
	if (err != ENOENT && err != ECONNREFUSED)
		return rgpy_raise(err, "%s('%s')", role, topic);
	snprintf(text, sizeof(text), "%s('%s'): no rgapsd at %s%s: %s", role, topic,
		 sock && *sock ? sock : "/run/rgaps/rgapsd.sock",
		 sock && *sock ? " ($RGAPS_SOCKET)" : " (set $RGAPS_SOCKET for another)",
		 rgaps_strerror(-err));
	exc = PyObject_CallFunction(rgpy_Disconnected, "is", err, text);
	if (exc) {
		PyErr_SetObject(rgpy_Disconnected, exc);
		Py_DECREF(exc);
	}
	return NULL;
}

uint64_t rgpy_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---------------------------------------------------------------- fork guard */

static unsigned fork_gen;

static void after_fork_child(void)
{
	__atomic_add_fetch(&fork_gen, 1, __ATOMIC_SEQ_CST);
}

unsigned rgpy_fork_gen(void)
{
	return __atomic_load_n(&fork_gen, __ATOMIC_SEQ_CST);
}

/* ---------------------------------------------------------------- helpers */

int rgpy_timeout_ms(PyObject *o, int none_ms, int *ms_p)
{
	double s;

	if (!o || o == Py_None) {
		*ms_p = none_ms;
		return 0;
	}
	s = PyFloat_AsDouble(o);
	if (s == -1.0 && PyErr_Occurred())
		return -1;
	if (isnan(s) || s < 0) {
		PyErr_Format(PyExc_ValueError, "timeout must be None or >= 0 seconds, not %R", o);
		return -1;
	}
	if (s > (double)INT_MAX / 1000.0) {
		PyErr_Format(PyExc_ValueError,
			     "timeout %R is too long (at most %d s; None waits without limit)", o,
			     INT_MAX / 1000);
		return -1;
	}
	/* Round up: a wait is never shorter than asked. */
	*ms_p = (int)ceil(s * 1000.0);
	return 0;
}

void rgpy_free(PyObject *self)
{
	PyTypeObject *tp = Py_TYPE(self);
	freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);

	f(self);
	Py_DECREF(tp);
}

int rgpy_stream_arg(PyObject *o, bool *given_p, uintptr_t *handle_p)
{
	PyObject *v = NULL;
	unsigned long long h;

	*given_p = false;
	*handle_p = 0;
	if (!o || o == Py_None)
		return 0;
	if (PyLong_Check(o)) {
		v = o;
		Py_INCREF(v);
	} else if (PyObject_HasAttrString(o, "__cuda_stream__")) {
		/* The CUDA stream protocol: __cuda_stream__() -> (version, handle). */
		PyObject *t = PyObject_CallMethod(o, "__cuda_stream__", NULL);

		if (!t)
			return -1;
		if (PyTuple_Check(t) && PyTuple_Size(t) == 2) {
			v = PyTuple_GetItem(t, 1);
			Py_XINCREF(v);
		}
		Py_DECREF(t);
	} else if (PyObject_HasAttrString(o, "cuda_stream")) { /* torch.cuda.Stream */
		v = PyObject_GetAttrString(o, "cuda_stream");
	} else if (PyObject_HasAttrString(o, "ptr")) { /* cupy.cuda.Stream */
		v = PyObject_GetAttrString(o, "ptr");
	}
	if (!v || !PyLong_Check(v)) {
		if (!PyErr_Occurred())
			PyErr_Format(PyExc_TypeError,
				     "stream must be None, an int handle, or a torch or CuPy stream "
				     "(or have __cuda_stream__), not %R",
				     o);
		Py_XDECREF(v);
		return -1;
	}
	h = PyLong_AsUnsignedLongLong(v);
	Py_DECREF(v);
	if (h == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_SetString(PyExc_ValueError, "stream handle must be a non-negative int");
		return -1;
	}
	*given_p = true;
	/* DLPack spells the legacy default stream 1; the CUDA driver also accepts 0. */
	*handle_p = h == 0 ? RGPY_STREAM_LEGACY : (uintptr_t)h;
	return 0;
}

int rgpy_add_type(PyObject *m, PyType_Spec *spec, const char *name, PyTypeObject **type_p)
{
	PyTypeObject *t = (PyTypeObject *)PyType_FromSpec(spec);

	if (!t)
		return -1;
	*type_p = t; /* the module's static reference */
	if (!name)
		return 0;
	Py_INCREF((PyObject *)t);
	if (PyModule_AddObject(m, name, (PyObject *)t)) {
		Py_DECREF((PyObject *)t);
		return -1;
	}
	return 0;
}

/* ---------------------------------------------------------------- rgaps.query */

static PyObject *mod_query(PyObject *mod, PyObject *args)
{
	const char *req;
	char *reply = NULL;
	PyObject *out;
	int r;

	if (!PyArg_ParseTuple(args, "s:_query", &req))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	r = rgaps_query(req, &reply);
	Py_END_ALLOW_THREADS
	if (r && !reply)
		return rgpy_raise(r, "query to rgapsd");
	out = Py_BuildValue("(is)", r, reply ? reply : "");
	free(reply);
	return out;
}

static PyObject *mod_strerror(PyObject *mod, PyObject *args)
{
	int err;

	if (!PyArg_ParseTuple(args, "i:strerror", &err))
		return NULL;
	return PyUnicode_FromString(rgaps_strerror(err));
}

/* Encode an attribute block (for tests and for C interop): (dtype, shape, strides, header). */
static PyObject *mod_encode(PyObject *mod, PyObject *args)
{
	const char *name;
	PyObject *shape, *strides = Py_None;
	Py_buffer hdr = { 0 };
	struct rgpy_desc d = { 0 };
	uint8_t out[RGAPS_ATTR_MAX];
	size_t len;
	Py_ssize_t n;
	int r;

	if (!PyArg_ParseTuple(args, "sO|Oy*:encode_attrs", &name, &shape, &strides, &hdr))
		return NULL;
	if (rgpy_dtype_from_name(name, &d.dtype)) {
		PyErr_Format(PyExc_TypeError, "dtype %s is not one rgaps can describe", name);
		goto err;
	}
	n = PyTuple_Check(shape) ? PyTuple_Size(shape) : -1;
	if (n < 0 || n > RGPY_MAX_NDIM ||
	    (strides != Py_None && (!PyTuple_Check(strides) || PyTuple_Size(strides) != n))) {
		PyErr_SetString(PyExc_ValueError,
				"shape (and strides) must be tuples of at most 15 ints");
		goto err;
	}
	d.ndim = (uint8_t)n;
	d.has_strides = strides != Py_None;
	for (Py_ssize_t i = 0; i < n; i++) {
		d.shape[i] = PyLong_AsLongLong(PyTuple_GetItem(shape, i));
		if (d.has_strides)
			d.strides[i] = PyLong_AsLongLong(PyTuple_GetItem(strides, i));
	}
	if (PyErr_Occurred())
		goto err;
	r = rgpy_attrs_encode(&d, hdr.buf, hdr.buf ? (size_t)hdr.len : 0, out, &len);
	if (hdr.buf)
		PyBuffer_Release(&hdr);
	if (r) {
		PyErr_SetString(PyExc_ValueError, "attribute block over 256 bytes");
		return NULL;
	}
	return PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)len);
err:
	if (hdr.buf)
		PyBuffer_Release(&hdr);
	return NULL;
}

/* (base, size) of the device allocation that holds @p ptr: the GPU tests' zero-copy check. */
static PyObject *mod_cuda_range(PyObject *mod, PyObject *args)
{
	unsigned long long ptr;
	uintptr_t base;
	size_t size;
	char err[256];
	int r;

	if (!PyArg_ParseTuple(args, "K:_cuda_range", &ptr))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	r = rgpy_cuda_range((uintptr_t)ptr, &base, &size, err, sizeof(err));
	Py_END_ALLOW_THREADS
	if (r) {
		PyErr_SetString(rgpy_Error, err);
		return NULL;
	}
	return Py_BuildValue("(KK)", (unsigned long long)base, (unsigned long long)size);
}

static PyMethodDef mod_methods[] = {
	{ "_query", mod_query, METH_VARARGS,
	  "_query(request_json) -> (errno, reply_json): one control request to rgapsd." },
	{ "_cuda_range", mod_cuda_range, METH_VARARGS,
	  "_cuda_range(ptr) -> (base, size): cuMemGetAddressRange of a device pointer." },
	{ "strerror", mod_strerror, METH_VARARGS, "strerror(errno) -> text of an rgaps error." },
	{ "encode_attrs", mod_encode, METH_VARARGS,
	  "encode_attrs(dtype, shape, strides=None, header=b'') -> bytes: a version-1 array "
	  "attribute block (docs/PYTHON.md), as publish() writes it; strides in elements." },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef moduledef = {
	PyModuleDef_HEAD_INIT,
	.m_name = "rgaps._rgaps",
	.m_doc = "C core of the rgaps package (import rgaps instead).",
	.m_size = -1,
	.m_methods = mod_methods,
};

static int add_exceptions(PyObject *m)
{
	PyObject *bases;

	rgpy_Error = PyErr_NewExceptionWithDoc(
		"rgaps.Error",
		"An rgaps operation failed; errno and strerror say why (OSError subclass).",
		PyExc_OSError, NULL);
	if (!rgpy_Error)
		return -1;
	bases = PyTuple_Pack(2, rgpy_Error, PyExc_TimeoutError);
	rgpy_Timeout = bases ? PyErr_NewExceptionWithDoc(
				       "rgaps.Timeout",
				       "Nothing arrived, or no room was found, within the timeout.",
				       bases, NULL)
			     : NULL;
	Py_XDECREF(bases);
	if (!rgpy_Timeout)
		return -1;
	bases = PyTuple_Pack(2, rgpy_Error, PyExc_ConnectionError);
	rgpy_Disconnected = bases ? PyErr_NewExceptionWithDoc(
					    "rgaps.Disconnected",
					    "rgapsd cannot be reached, or went away or was restarted: "
					    "close the handle and attach again.",
					    bases, NULL)
				  : NULL;
	Py_XDECREF(bases);
	if (!rgpy_Disconnected)
		return -1;
	Py_INCREF(rgpy_Error);
	Py_INCREF(rgpy_Timeout);
	Py_INCREF(rgpy_Disconnected);
	if (PyModule_AddObject(m, "Error", rgpy_Error) ||
	    PyModule_AddObject(m, "Timeout", rgpy_Timeout) ||
	    PyModule_AddObject(m, "Disconnected", rgpy_Disconnected))
		return -1;
	return 0;
}

PyMODINIT_FUNC PyInit__rgaps(void);
PyMODINIT_FUNC PyInit__rgaps(void)
{
	PyObject *m = PyModule_Create(&moduledef);

	if (!m)
		return NULL;
	if (add_exceptions(m) || rgpy_message_init_type(m) || rgpy_subscriber_init_type(m) ||
	    rgpy_publisher_init_type(m) ||
	    PyModule_AddIntConstant(m, "ATTR_MAX", RGAPS_ATTR_MAX) ||
	    PyModule_AddIntConstant(m, "MAX_NDIM", RGPY_MAX_NDIM) ||
	    PyModule_AddIntConstant(m, "ATTR_VERSION", RGPY_ATTR_VERSION) ||
	    PyModule_AddIntConstant(m, "PROTOCOL_VERSION", RGAPS_PROTOCOL_VERSION) ||
	    PyModule_AddIntConstant(m, "STREAM_ORDERED", RGPY_STREAM_ORDERED) ||
	    PyModule_AddStringConstant(m, "DLPACK_VERSION", "1.0")) {
		Py_DECREF(m);
		return NULL;
	}
	if (pthread_atfork(NULL, NULL, after_fork_child)) {
		PyErr_SetString(PyExc_RuntimeError, "pthread_atfork failed");
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
