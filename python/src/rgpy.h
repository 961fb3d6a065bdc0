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

/* ------------------------------------------------------------ subscriber side */

struct rgpy_hold;

/* A subscriber's C handle, kept until the Python object and every held message are gone. */
struct rgpy_subcore {
	uint32_t refs;		 /* the Subscriber object's, plus one per held message */
	pthread_mutex_t lock;	 /* the C handle is used by one thread at a time */
	rgaps_subscriber_t *sub; /* NULL once destroyed */
	struct rgpy_hold *pending; /* releases another thread left for the lock holder */
	uint32_t nheld;		 /* messages whose block is still held */
	unsigned fork_gen;
	bool closed;		 /* Subscriber.close(): no more takes */
	bool cuda;
	int device;
	char topic[64];
	size_t max_holds_hint;
};

/* One taken message. */
struct rgpy_hold {
	uint32_t refs;	 /* lifetime of this struct: the Message object, each export */
	uint32_t claims; /* who keeps the block: the Message until release(), each export,
			  * the Message again once its pointer was handed out raw */
	struct rgpy_subcore *core; /* NULL once the block is released */
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

void rgpy_hold_ref(struct rgpy_hold *h);
void rgpy_hold_unref(struct rgpy_hold *h);
/* Drop one claim on the block; the last one releases it (any thread, no GIL needed). */
void rgpy_hold_unclaim(struct rgpy_hold *h);
void rgpy_hold_claim(struct rgpy_hold *h);

extern PyTypeObject *rgpy_MessageType;
/* A Message that owns one ref and one claim of @p h (which it takes over). */
PyObject *rgpy_message_new(struct rgpy_hold *h);

/* ------------------------------------------------------------ publisher side */

struct rgpy_pubcore {
	uint32_t refs; /* the Publisher object's, plus one per live loan */
	pthread_mutex_t lock;
	rgaps_publisher_t *pub;
	unsigned fork_gen;
	bool closed;
	bool cuda;
	int device;
	size_t max_message_size;
	char topic[64];
};

void rgpy_pubcore_unref(struct rgpy_pubcore *c);

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
/* The __cuda_array_interface__ (version 3) dict of an array at @p ptr. */
PyObject *rgpy_cai_dict(const struct rgpy_desc *d, uintptr_t ptr, bool readonly, PyObject *stream);

/* ------------------------------------------------------------ module-wide */

extern PyTypeObject *rgpy_PublisherType, *rgpy_SubscriberType, *rgpy_LoanType;
int rgpy_message_init_type(PyObject *m);
int rgpy_subscriber_init_type(PyObject *m);
int rgpy_publisher_init_type(PyObject *m);

/* Timeout argument (seconds, None = @p none_ms) in ms; -1 with an exception on bad input. */
int rgpy_timeout_ms(PyObject *o, int none_ms, int *ms_p);
/* Call tp_free of the object's (heap) type and drop the type's reference. */
void rgpy_free(PyObject *self);

#endif
