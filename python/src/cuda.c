/*
 * The few CUDA driver calls the extension makes itself: host-side waits for a
 * stream or a device (the fallback of every stream= argument while librgaps
 * has no stream-ordered API) and the address range of a device pointer (for
 * the zero-copy check of the GPU tests). libcuda.so.1 is opened on first use,
 * so that the package imports and serves host topics on machines without a
 * GPU or driver; nothing here runs for a host topic.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "rgpy.h"

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

static struct {
	CUresult (*init)(unsigned);
	CUresult (*device_get)(CUdevice *, int);
	CUresult (*ctx_get_current)(CUcontext *);
	CUresult (*primary_retain)(CUcontext *, CUdevice);
	CUresult (*primary_release)(CUdevice);
	CUresult (*ctx_push)(CUcontext);
	CUresult (*ctx_pop)(CUcontext *);
	CUresult (*ctx_sync)(void);
	CUresult (*stream_sync)(CUstream);
	CUresult (*addr_range)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*error_string)(CUresult, const char **);
	const char *missing; /* why the driver cannot be used, or NULL */
} cu;

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static void cu_load(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		cu.missing = "no NVIDIA driver (libcuda.so.1 could not be loaded)";
		return;
	}
#define SYM(field, name)                                                     \
	do {                                                                 \
		*(void **)&cu.field = dlsym(h, name);                        \
		if (!cu.field) {                                             \
			cu.missing = "libcuda.so.1 lacks " name;              \
			return;                                              \
		}                                                            \
	} while (0)
	SYM(init, "cuInit");
	SYM(device_get, "cuDeviceGet");
	SYM(ctx_get_current, "cuCtxGetCurrent");
	SYM(primary_retain, "cuDevicePrimaryCtxRetain");
	SYM(primary_release, "cuDevicePrimaryCtxRelease_v2");
	SYM(ctx_push, "cuCtxPushCurrent_v2");
	SYM(ctx_pop, "cuCtxPopCurrent_v2");
	SYM(ctx_sync, "cuCtxSynchronize");
	SYM(stream_sync, "cuStreamSynchronize");
	SYM(addr_range, "cuMemGetAddressRange_v2");
	SYM(error_string, "cuGetErrorString");
#undef SYM
	if (cu.init(0))
		cu.missing = "cuInit failed: no usable CUDA device";
}

static int cu_fail(CUresult r, const char *call, char *err, size_t errlen)
{
	const char *s = NULL;

	if (cu.error_string)
		cu.error_string(r, &s);
	snprintf(err, errlen, "%s: %s (CUDA error %d)", call, s ? s : "unknown error", r);
	return -EIO;
}

/* Make device @p device's primary context current for this call; *pushed_p says to pop it. */
static int enter_device(int device, bool need_primary, bool *pushed_p, char *err, size_t errlen)
{
	CUcontext cur = NULL, ctx;
	CUdevice dev;
	CUresult r;

	*pushed_p = false;
	if (!need_primary && !cu.ctx_get_current(&cur) && cur)
		return 0;
	r = cu.device_get(&dev, device);
	if (r)
		return cu_fail(r, "cuDeviceGet", err, errlen);
	r = cu.primary_retain(&ctx, dev);
	if (r)
		return cu_fail(r, "cuDevicePrimaryCtxRetain", err, errlen);
	r = cu.ctx_push(ctx);
	if (r) {
		cu.primary_release(dev);
		return cu_fail(r, "cuCtxPushCurrent", err, errlen);
	}
	*pushed_p = true;
	return 0;
}

static void leave_device(int device, bool pushed)
{
	CUcontext ctx;
	CUdevice dev;

	if (!pushed)
		return;
	cu.ctx_pop(&ctx);
	if (!cu.device_get(&dev, device))
		cu.primary_release(dev);
}

int rgpy_cuda_sync(int device, uintptr_t stream, char *err, size_t errlen)
{
	bool pushed;
	CUresult r;
	int e;

	pthread_once(&cu_once, cu_load);
	if (cu.missing) {
		snprintf(err, errlen, "%s", cu.missing);
		return -ENODEV;
	}
	/*
	 * A stream of our own knows its context; the special handles (legacy,
	 * per-thread) and a whole-device wait mean the device's primary context,
	 * the one torch, CuPy and JAX use.
	 */
	e = enter_device(device, stream <= RGPY_STREAM_PER_THREAD, &pushed, err, errlen);
	if (e)
		return e;
	if (stream == RGPY_STREAM_NONE) {
		r = cu.ctx_sync();
		e = r ? cu_fail(r, "cuCtxSynchronize", err, errlen) : 0;
	} else {
		r = cu.stream_sync((CUstream)stream);
		e = r ? cu_fail(r, "cuStreamSynchronize", err, errlen) : 0;
	}
	leave_device(device, pushed);
	return e;
}

int rgpy_cuda_range(uintptr_t ptr, uintptr_t *base_p, size_t *size_p, char *err, size_t errlen)
{
	CUdeviceptr base;
	size_t size;
	CUresult r;

	pthread_once(&cu_once, cu_load);
	if (cu.missing) {
		snprintf(err, errlen, "%s", cu.missing);
		return -ENODEV;
	}
	r = cu.addr_range(&base, &size, (CUdeviceptr)ptr);
	if (r)
		return cu_fail(r, "cuMemGetAddressRange", err, errlen);
	*base_p = (uintptr_t)base;
	*size_p = size;
	return 0;
}
