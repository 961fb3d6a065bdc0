/*
 * What Publisher and Subscriber share: attaching, the reference-counted core
 * that keeps the C handle until the Python object and everything made from it
 * are gone, the fork guard, and the methods and attributes both have (info,
 * close, the context manager, topic, memory...). A role (rgpy_pub_role,
 * rgpy_sub_role) supplies the C calls and the size of its core, whose first
 * member is the struct rgpy_handle.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "rgpy.h"

void rgpy_handle_ref(struct rgpy_handle *h)
{
	__atomic_add_fetch(&h->refs, 1, __ATOMIC_SEQ_CST);
}

void rgpy_handle_unref(struct rgpy_handle *h)
{
	if (__atomic_sub_fetch(&h->refs, 1, __ATOMIC_SEQ_CST))
		return;
	/* In a forked child the handle is the parent's: leave its memory and socket alone. */
	if (h->c && rgpy_handle_ours(h))
		h->role->destroy(h->c);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

bool rgpy_handle_ours(const struct rgpy_handle *h)
{
	return h->fork_gen == rgpy_fork_gen();
}

int rgpy_handle_init(rgpy_HandleObject *self, PyObject *args, PyObject *kw,
		     const struct rgpy_role *role)
{
	static char *kwlist[] = { "topic", NULL };
	rgaps_topic_info_t info = { .struct_size = sizeof(info) };
	struct rgpy_handle *h;
	const char *topic;
	char fmt[32];
	int err = 0;

	snprintf(fmt, sizeof(fmt), "s:%s", role->name);
	if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kwlist, &topic))
		return -1;
	if (self->core) {
		PyErr_Format(PyExc_RuntimeError, "%s.__init__ called twice", role->name);
		return -1;
	}
	h = calloc(1, role->core_size);
	if (!h) {
		PyErr_NoMemory();
		return -1;
	}
	snprintf(h->topic, sizeof(h->topic), "%s", topic);
	Py_BEGIN_ALLOW_THREADS
	h->c = role->attach(topic);
	if (!h->c)
		err = errno;
	else
		err = -role->info(h->c, &info);
	Py_END_ALLOW_THREADS
	if (!h->c || err) {
		if (h->c)
			role->destroy(h->c);
		free(h);
		rgpy_raise_attach(err ? err : EIO, role->name, topic);
		return -1;
	}
	pthread_mutex_init(&h->lock, NULL);
	h->refs = 1;
	h->role = role;
	h->fork_gen = rgpy_fork_gen();
	h->cuda = info.memory == RGAPS_MEMORY_CUDA;
	h->device = info.device;
	h->max_message_size = info.max_message_size;
	h->block_timeout_ms = info.block_timeout_ms;
	self->core = h;
	return 0;
}

int rgpy_handle_usable(rgpy_HandleObject *self)
{
	struct rgpy_handle *h = self->core;

	if (!h || h->closed) {
		PyErr_Format(PyExc_ValueError, "I/O operation on a closed rgaps.%s",
			     PyType_IsSubtype(Py_TYPE((PyObject *)self), rgpy_SubscriberType) ? "Subscriber"
										  : "Publisher");
		return -1;
	}
	if (!rgpy_handle_ours(h)) {
		PyErr_Format(PyExc_RuntimeError,
			     "%s('%s') was created before fork(): a handle belongs to the process "
			     "that made it; create one in this process",
			     h->role->name, h->topic);
		return -1;
	}
	return 0;
}

void rgpy_handle_close(rgpy_HandleObject *self)
{
	struct rgpy_handle *h = self->core;

	if (!h)
		return;
	self->core = NULL;
	__atomic_store_n(&h->closed, true, __ATOMIC_RELEASE);
	/* Waiters in other threads end now; what is still in use keeps the rest alive. */
	if (h->role->close && rgpy_handle_ours(h))
		h->role->close(h->c);
	rgpy_handle_unref(h);
}

void rgpy_handle_dealloc(PyObject *self)
{
	rgpy_handle_close((rgpy_HandleObject *)self);
	rgpy_free(self);
}

PyObject *rgpy_handle_close_m(PyObject *self, PyObject *unused)
{
	rgpy_handle_close((rgpy_HandleObject *)self);
	Py_RETURN_NONE;
}

PyObject *rgpy_handle_enter(PyObject *self, PyObject *unused)
{
	if (rgpy_handle_usable((rgpy_HandleObject *)self))
		return NULL;
	Py_INCREF(self);
	return self;
}

PyObject *rgpy_handle_exit(PyObject *self, PyObject *args)
{
	rgpy_handle_close((rgpy_HandleObject *)self);
	Py_RETURN_FALSE;
}

PyObject *rgpy_handle_info(PyObject *self, PyObject *unused)
{
	rgaps_topic_info_t info = { .struct_size = sizeof(info) };
	struct rgpy_handle *h;
	PyObject *d;
	int r;

	if (rgpy_handle_usable((rgpy_HandleObject *)self))
		return NULL;
	h = ((rgpy_HandleObject *)self)->core;
	rgpy_handle_ref(h); /* close() in another thread must not free it under us */
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&h->lock);
	r = h->role->info(h->c, &info);
	pthread_mutex_unlock(&h->lock);
	Py_END_ALLOW_THREADS
	if (r) {
		rgpy_raise(r, "%s('%s').info", h->role->name, h->topic);
		rgpy_handle_unref(h);
		return NULL;
	}
	d = Py_BuildValue("{s:s,s:s,s:i,s:n,s:n,s:I}", "name", info.name, "memory",
			  info.memory == RGAPS_MEMORY_CUDA ? "cuda" : "host", "device", info.device,
			  "pool_size", (Py_ssize_t)info.pool_size, "max_message_size",
			  (Py_ssize_t)info.max_message_size, "queue_depth", info.queue_depth);
	if (d && h->role->has_drops) {
		PyObject *v = PyLong_FromUnsignedLongLong(info.drops);

		if (!v || PyDict_SetItemString(d, "drops", v))
			Py_CLEAR(d);
		Py_XDECREF(v);
	}
	rgpy_handle_unref(h);
	return d;
}

static struct rgpy_handle *core_of(PyObject *self)
{
	return ((rgpy_HandleObject *)self)->core;
}

PyObject *rgpy_handle_get_topic(PyObject *self, void *unused)
{
	if (!core_of(self))
		Py_RETURN_NONE;
	return PyUnicode_FromString(core_of(self)->topic);
}

PyObject *rgpy_handle_get_closed(PyObject *self, void *unused)
{
	return PyBool_FromLong(!core_of(self) || core_of(self)->closed);
}

PyObject *rgpy_handle_get_memory(PyObject *self, void *unused)
{
	if (!core_of(self))
		Py_RETURN_NONE;
	return PyUnicode_FromString(core_of(self)->cuda ? "cuda" : "host");
}

PyObject *rgpy_handle_get_max_message_size(PyObject *self, void *unused)
{
	if (!core_of(self))
		Py_RETURN_NONE;
	return PyLong_FromSize_t(core_of(self)->max_message_size);
}
