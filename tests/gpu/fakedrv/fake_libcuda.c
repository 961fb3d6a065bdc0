/*
 * A stand-in for the CUDA driver (libcuda.so.1) with the few calls librgaps
 * asks a process's driver (src/lib/device.c): how many GPUs it sees, their
 * PCI addresses, the current context's device. Its GPUs are the host memory
 * plugin's emulated ones (RGAPS_HOST_DEVICES, PCI 0000:1N:00.0 for device N),
 * and it honours CUDA_VISIBLE_DEVICES as the real driver does, so that a test
 * client can see only "its own" GPU, as in a container (tests/gpu/multigpu_host.sh).
 * gpu-host-client loads it (RGAPS_FAKE_CUDA_DRIVER) before librgaps looks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_MAX 32
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_INVALID_DEVICE 101

typedef int CUresult;
typedef int CUdevice;
typedef struct fake_ctx *CUcontext;

#define EXPORT __attribute__((visibility("default")))

/* The driver's entry points (cuda.h declares them so). */
EXPORT CUresult cuInit(unsigned int flags);
EXPORT CUresult cuDeviceGetCount(int *n);
EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal);
EXPORT CUresult cuDeviceGetPCIBusId(char *buf, int len, CUdevice dev);
EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx);
EXPORT CUresult cuCtxGetDevice(CUdevice *dev);

static int global[FAKE_MAX]; /* our ordinal -> emulated device */
static int count = -1;

static void visible(void)
{
	const char *nd = getenv("RGAPS_HOST_DEVICES"), *vis = getenv("CUDA_VISIBLE_DEVICES");
	int n = nd ? atoi(nd) : 0;

	count = 0;
	if (n > FAKE_MAX)
		n = FAKE_MAX;
	if (!vis) {
		for (int i = 0; i < n; i++)
			global[count++] = i;
		return;
	}
	/* Ordinals up to the first entry that is not one, as CUDA reads it. */
	while (*vis && count < FAKE_MAX) {
		char *end;
		long v = strtol(vis, &end, 10);

		if (end == vis || v < 0 || v >= n || (*end && *end != ','))
			break;
		global[count++] = (int)v;
		vis = *end ? end + 1 : end;
	}
}

EXPORT CUresult cuInit(unsigned int flags)
{
	if (count < 0)
		visible();
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetCount(int *n)
{
	cuInit(0);
	*n = count;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
	cuInit(0);
	if (ordinal < 0 || ordinal >= count)
		return CUDA_ERROR_INVALID_DEVICE;
	*dev = ordinal;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuDeviceGetPCIBusId(char *buf, int len, CUdevice dev)
{
	cuInit(0);
	if (dev < 0 || dev >= count || len < 13)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(buf, (size_t)len, "0000:%02X:00.0", 0x10 + global[dev]);
	return CUDA_SUCCESS;
}

/* No context is ever current: the test clients name their device. */
EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx)
{
	*ctx = NULL;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *dev)
{
	return CUDA_ERROR_INVALID_VALUE;
}
