/*
 * The rgaps Python extension (rgaps._rgaps): declarations shared by its files.
 *
 * Written against the limited API of CPython 3.11 (abi3), so that one build
 * loads in every CPython from 3.11 on. The Python objects are thin: what must
 * outlive them - a subscriber's C handle while arrays made from its messages
 * exist, a held message while a DLPack consumer still uses it - lives in
 * reference-counted C structs (struct rgpy_subcore, rgpy_hold, rgpy_pubcore,
 * rgpy_loan) that are released without the GIL, from whatever thread a
 * consumer frees its array in. docs/PYTHON.md states the rules; the attribute
 * block encoding is drawn there too.
 */
#ifndef RGPY_H
#define RGPY_H

#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <rgaps/rgaps.h>

#include "dlpack.h"

/* ------------------------------------------------------------ attribute blocks */

/* Most dimensions an array may have: 12 + 15 * 16 bytes still fit RGAPS_ATTR_MAX. */
#define RGPY_MAX_NDIM 15
#define RGPY_ATTR_VERSION 1
#define RGPY_ATTR_HDR 12 /* fixed part of a version-1 block */
#define RGPY_ATTR_FLAG_STRIDES 0x01u

/* An array's description: what the attribute block carries, decoded and checked. */
struct rgpy_desc {
	DLDataType dtype;
	uint8_t ndim;
	bool has_strides;		/* false: C-contiguous */
	int64_t shape[RGPY_MAX_NDIM];
	int64_t strides[RGPY_MAX_NDIM]; /* in elements, as DLPack counts them */
	uint16_t header_off, header_len; /* the user header inside the block */
	uint64_t span;			/* bytes from the first element to past the last */
};

/* Bytes per element of a supported dtype, 0 if rgaps cannot describe it. */
unsigned rgpy_dtype_size(DLDataType t);
/* "float32", "bfloat16", ... or NULL. */
const char *rgpy_dtype_name(DLDataType t);
/* The buffer protocol's struct format ("f", "Zd", ...) or NULL (bfloat16). */
const char *rgpy_dtype_format(DLDataType t);
/* __cuda_array_interface__ / __array_interface__ typestr ("<f4") or NULL. */
const char *rgpy_dtype_typestr(DLDataType t);
/* Parse a buffer-protocol format of @p itemsize bytes. 0 or -EINVAL. */
int rgpy_dtype_from_format(const char *fmt, Py_ssize_t itemsize, DLDataType *t_p);
/* Parse a typestr ("<f4", "|u1"). 0 or -EINVAL. */
int rgpy_dtype_from_typestr(const char *ts, DLDataType *t_p);
/* Parse a name ("float32", "f4", "<f4", "uint8", "bool"). 0 or -EINVAL. */
int rgpy_dtype_from_name(const char *name, DLDataType *t_p);

/*
 * Fill d->span from shape, strides and dtype, refusing negative strides, a
 * dtype rgaps cannot describe and any overflow. With @p require_dense, strides
 * must lay the elements out without holes (a permutation of a contiguous
 * layout), so that span is exactly the array's bytes.
 */
int rgpy_desc_check(struct rgpy_desc *d, bool require_dense);
/* Drop strides that are C-contiguous anyway. */
void rgpy_desc_normalise(struct rgpy_desc *d);
/* Encode a version-1 block into out[RGAPS_ATTR_MAX]; -E2BIG if it does not fit. */
int rgpy_attrs_encode(const struct rgpy_desc *d, const void *header, size_t header_len,
		      uint8_t *out, size_t *len_p);
/*
 * Decode a block that came with a message of @p payload bytes. 0 and *d, or
 * -ENOMSG (not a version-1 block: no magic, another version) or -EINVAL
 * (claims to be one but is malformed or larger than the payload), with a reason.
 */
int rgpy_attrs_decode(const uint8_t *a, size_t len, uint64_t payload, struct rgpy_desc *d,
		      const char **why_p);
/* The description of raw bytes: uint8, shape (n,). */
void rgpy_desc_bytes(struct rgpy_desc *d, uint64_t n);

/* ------------------------------------------------------------ errors */

extern PyObject *rgpy_Error, *rgpy_Timeout, *rgpy_Disconnected;
/* Raise the exception for a negative errno @p err of "@p what": returns NULL. */
PyObject *rgpy_raise(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The error of Publisher()/Subscriber(): as rgpy_raise, naming the socket when there is no daemon. */
PyObject *rgpy_raise_attach(int err, const char *role, const char *topic);

/* CLOCK_MONOTONIC in nanoseconds, for the deadlines of waits made in slices. */
uint64_t rgpy_now_ns(void);

/* ------------------------------------------------------------ fork safety */

/* Bumped in every child after fork(): handles made before it belong to the parent. */
unsigned rgpy_fork_gen(void);

/* ------------------------------------------------------------ CUDA (dlopen'd libcuda) */

/* Stream handles as DLPack and the CUDA driver spell the special ones. */
#define RGPY_STREAM_NONE ((uintptr_t)0) /* no stream: synchronise the whole device */
#define RGPY_STREAM_LEGACY ((uintptr_t)1)
#define RGPY_STREAM_PER_THREAD ((uintptr_t)2)

/*
 * Wait on the host until @p stream has finished its work so far; with
 * RGPY_STREAM_NONE, until device @p device has (cuCtxSynchronize in its
 * primary context). Works without a current context. 0 or a negative errno
 * with a reason in err.
 */
int rgpy_cuda_sync(int device, uintptr_t stream, char *err, size_t errlen);
/* Start of the allocation that holds @p ptr and its size (cuMemGetAddressRange). */
int rgpy_cuda_range(uintptr_t ptr, uintptr_t *base_p, size_t *size_p, char *err, size_t errlen);

/* A Python stream argument (None, int, torch/CuPy stream, __cuda_stream__) as a handle. */
int rgpy_stream_arg(PyObject *o, bool *given_p, uintptr_t *handle_p);

/* ------------------------------------------------------------ the stream-ordered C API */

/*
 * Whether librgaps has the stream-ordered calls of the multi-GPU issue (see
 * meson.build: detected in rgaps.h at configure time). Without them every
 * stream= argument synchronises on the host instead.
 */
#if defined(RGPY_HAVE_ASYNC_PUB) && defined(RGPY_HAVE_ASYNC_SUB)
#define RGPY_STREAM_ORDERED 1
#else
#define RGPY_STREAM_ORDERED 0
#endif

/* ------------------------------------------------------------ handles (handle.c) */

struct rgpy_handle;

/* What differs between a publisher and a subscriber handle. */
struct rgpy_role {
	const char *name;  /* "Publisher" */
	size_t core_size;  /* of the struct whose first member is the rgpy_handle */
	bool has_drops;	   /* info() reports drops */
	void *(*attach)(const char *topic); /* NULL with errno */
	int (*info)(void *c, rgaps_topic_info_t *info);
	void (*destroy)(void *c);
	/*
	 * close(), from any thread, while other threads may be in a call: what the C
	 * handle must give up at once (its waits, its place in the queue) while what
	 * is still in use keeps it alive.
	 */
	void (*close)(void *c);
};

/*
 * A publisher's or subscriber's C handle, kept until the Python object and
 * everything made from it (held messages, loans, their arrays) are gone. The C
 * handle may be used by one thread at a time: the lock.
 */
struct rgpy_handle {
	uint32_t refs;
	pthread_mutex_t lock;
	void *c; /* rgaps_publisher_t * or rgaps_subscriber_t * */
	const struct rgpy_role *role;
	unsigned fork_gen;
	bool closed; /* close() was called: no more operations */
	bool cuda;
	int device;
	size_t max_message_size;
	int block_timeout_ms; /* what a publish waits with timeout None */
	char topic[64];
};

typedef struct {
	PyObject_HEAD
	struct rgpy_handle *core;
} rgpy_HandleObject;

void rgpy_handle_ref(struct rgpy_handle *h);
/* The last reference destroys the C handle (not in a forked child) and frees the core. */
void rgpy_handle_unref(struct rgpy_handle *h);
/* Whether this process made the handle (not a child that inherited it with fork()). */
bool rgpy_handle_ours(const struct rgpy_handle *h);
/* tp_init: attach to the topic of the (topic) argument. */
int rgpy_handle_init(rgpy_HandleObject *self, PyObject *args, PyObject *kw,
		     const struct rgpy_role *role);
/* 0, or -1 with ValueError (closed) or RuntimeError (made before fork()). */
int rgpy_handle_usable(rgpy_HandleObject *self);
void rgpy_handle_close(rgpy_HandleObject *self);
void rgpy_handle_dealloc(PyObject *self);
PyObject *rgpy_handle_close_m(PyObject *self, PyObject *unused);
PyObject *rgpy_handle_enter(PyObject *self, PyObject *unused);
PyObject *rgpy_handle_exit(PyObject *self, PyObject *args);
PyObject *rgpy_handle_info(PyObject *self, PyObject *unused);
PyObject *rgpy_handle_get_topic(PyObject *self, void *unused);
PyObject *rgpy_handle_get_closed(PyObject *self, void *unused);
PyObject *rgpy_handle_get_memory(PyObject *self, void *unused);
PyObject *rgpy_handle_get_max_message_size(PyObject *self, void *unused);

/* Method and attribute table entries both types have. */
#define RGPY_HANDLE_METHODS                                                              \
	{ "info", rgpy_handle_info, METH_NOARGS, "info() -> dict: the topic's settings." }, \
		{ "close", rgpy_handle_close_m, METH_NOARGS,                                \
		  "close(): detach. What is still in use (held messages, loans, arrays "    \
		  "made from them) keeps the shared memory mapped until it goes." },        \
		{ "__enter__", rgpy_handle_enter, METH_NOARGS, NULL },                       \
		{ "__exit__", rgpy_handle_exit, METH_VARARGS, NULL }
#define RGPY_HANDLE_GETSET                                                               \
	{ "topic", rgpy_handle_get_topic, NULL, "topic name", NULL },                       \
		{ "closed", rgpy_handle_get_closed, NULL, "whether close() was called", NULL }, \
		{ "memory", rgpy_handle_get_memory, NULL, "'host' or 'cuda'", NULL },         \
		{ "max_message_size", rgpy_handle_get_max_message_size, NULL,                \
		  "largest message the topic takes", NULL }

/* ------------------------------------------------------------ subscriber side */

struct rgpy_hold;

struct rgpy_subcore {
	struct rgpy_handle h;
	struct rgpy_hold *pending; /* releases another thread left for the lock holder */
	uint32_t nheld;		   /* messages whose block is still held */
};

/* One taken message. */
struct rgpy_hold {
	uint32_t refs;	 /* lifetime of this struct: the Message object, each export */
	uint32_t claims; /* who keeps the block: the Message until release(), each export,
			  * the Message again once its pointer was handed out raw */
	struct rgpy_subcore *core; /* NULL once the block is released (or for a gap-only message) */
	struct rgpy_hold *next_pending;
	rgaps_msg_t msg;
	uint64_t stream, origin_stream, origin_seq;
	uintptr_t release_stream; /* GPU: the stream release(stream=) named */
	bool release_stream_set;
	bool gap_only, described, cuda;
	int device;
	const char *undescribed_why; /* why a block that claimed to be ours was refused */
	struct rgpy_desc desc;
	Py_ssize_t shape_ss[RGPY_MAX_NDIM], strides_ss[RGPY_MAX_NDIM]; /* buffer protocol */
	uint16_t attr_len;
	uint8_t attrs[RGAPS_ATTR_MAX];
};

/* Unlock the core's lock after applying the releases other threads left meanwhile. */
void rgpy_subcore_unlock(struct rgpy_subcore *c);
void rgpy_hold_ref(struct rgpy_hold *h);
void rgpy_hold_unref(struct rgpy_hold *h);
/* Drop one claim on the block; the last one releases it (any thread, no GIL needed). */
void rgpy_hold_unclaim(struct rgpy_hold *h);
void rgpy_hold_claim(struct rgpy_hold *h);

extern PyTypeObject *rgpy_MessageType;
/* A Message that owns one ref and one claim of @p h (which it takes over). */
PyObject *rgpy_message_new(struct rgpy_hold *h);

/* ------------------------------------------------------------ DLPack export */

/*
 * Make a DLPack capsule of @p t (whose shape and strides are copied) whose
 * deleter calls @p done(@p ctx). @p versioned: a DLPack 1.0
 * "dltensor_versioned" capsule with @p flags; else a legacy "dltensor".
 */
PyObject *rgpy_dlpack_capsule(const DLTensor *t, bool versioned, uint64_t flags,
			      void (*done)(void *ctx), void *ctx);
/* Parse __dlpack__'s keywords: whether a versioned capsule is wanted; checks dl_device and copy. */
int rgpy_dlpack_args(PyObject *args, PyObject *kw, DLDevice here, bool *versioned_p,
		     PyObject **stream_p);
/*
 * Fill @p view (the buffer protocol) for @p obj: the array @p d at @p buf, with
 * @p shape and @p strides (bytes) that outlive the view. Refuses what the
 * protocol cannot carry (a dtype without format, strides not asked for, a
 * write access when not @p writable); @p what names the object in errors.
 */
int rgpy_view_fill(Py_buffer *view, PyObject *obj, void *buf, const struct rgpy_desc *d,
		   Py_ssize_t *shape, Py_ssize_t *strides, bool writable, int flags,
		   const char *what);
/* Set @p exc: the @p what ("message", "loan") is in GPU memory, and how to reach it. */
void rgpy_gpu_refusal(PyObject *exc, const char *what);
/*
 * __array__, reached only when the buffer protocol refused: BufferError when released or
 * committed (why), else TypeError, saying why.
 */
PyObject *rgpy_no_array(const char *why, bool cuda, DLDataType t, const char *what);
/* The __cuda_array_interface__ (version 3) dict of an array at @p ptr. */
PyObject *rgpy_cai_dict(const struct rgpy_desc *d, uintptr_t ptr, bool readonly, PyObject *stream);

/* ------------------------------------------------------------ module-wide */

extern PyTypeObject *rgpy_PublisherType, *rgpy_SubscriberType, *rgpy_LoanType;
int rgpy_message_init_type(PyObject *m);
int rgpy_subscriber_init_type(PyObject *m);
int rgpy_publisher_init_type(PyObject *m);

/* Timeout argument (seconds, None = @p none_ms) in ms; -1 with an exception on bad input. */
int rgpy_timeout_ms(PyObject *o, int none_ms, int *ms_p);
/* Make a type from @p spec into *@p type_p and, with a @p name, add it to module @p m. */
int rgpy_add_type(PyObject *m, PyType_Spec *spec, const char *name, PyTypeObject **type_p);
/* Call tp_free of the object's (heap) type and drop the type's reference. */
void rgpy_free(PyObject *self);

#endif
