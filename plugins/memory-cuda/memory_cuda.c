/*
 * The cuda memory plugin: a topic's pool is one allocation of GPU memory that
 * rgapsd creates and every local client maps, so that a message is written
 * there once (a device-to-device copy, or none with the loan API) and read in
 * place by every subscriber's kernels. Two ways to share it (docs/GPU.md):
 *
 *   VMM  cuMemCreate with a POSIX file-descriptor handle, exported with
 *        cuMemExportToShareableHandle; the fd travels over the control socket
 *        and importers cuMemImportFromShareableHandle + reserve + map + set
 *        access. The driver frees the memory when the last mapping goes.
 *   IPC  where VMM fd handles are missing: cudaMalloc + cudaIpcGetMemHandle;
 *        the 64-byte handle is written into a memfd, which is the region's fd,
 *        and importers cudaIpcOpenMemHandle it.
 *
 * The CUDA runtime is linked statically, so the module needs only the driver
 * (libcuda.so.1) at run time, found by the runtime when it is first used; the
 * few driver calls for VMM come from cudaGetDriverEntryPointByVersion, never
 * from linking libcuda. init() touches no CUDA at all: a daemon on a machine
 * without a GPU loads this plugin, probe() says why it cannot work, and
 * "auto" falls back to the host plugin.
 *
 * Synchronous copies run on one non-blocking stream per (context, device);
 * asynchronous ones (the remote path) on a few, taken in turn, reported by a
 * waiter thread ("Asynchronous copies" below). Several devices: the topology
 * (peer access, NVLink or PCIe, from the CUDA P2P attributes and NVML when the
 * driver has it), and access to a pool for another device (pool_grant).
 * Stream order: copies on the caller's stream and fences, which are CUDA
 * events, interprocess ones when other processes wait for them.
 * Every failed CUDA call is logged with the call and the error's words.
 * This file sees only include/rgaps/plugin.h.
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rgaps/plugin.h"

/* region.flags: how importers must open the fd (sent to them with it). */
#define CUDA_FLAG_VMM 0x1u /* fd is a cuMem POSIX fd handle */
#define CUDA_FLAG_IPC 0x2u /* fd is a memfd holding a cudaIpcMemHandle_t */

#define CUDA_MAX_DEVICES 64
#define CUDA_COPY_STREAMS_MAX 4 /* asynchronous copy streams per device */
#define RELAY_LANES_MAX 4	/* parallel lanes of a relay (RGAPS_CUDA_RELAY_LANES) */
#define RELAY_SETS 4		/* relays running at once per context (one per thread) */
/* Driver ABI the entry points are asked for: the VMM calls date from 10.2. */
#define CUDA_DRIVER_ABI 12000
#define MiB (1024.0 * 1024.0)
#define RGAPS_MIN_SZ(a, b) ((a) < (b) ? (a) : (b))

enum { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

/* The driver calls we need, resolved once per process through the runtime. */
static struct {
	pthread_once_t once;
	int err; /* 0, or a negative errno when an entry point is missing */
	char why[160];
	PFN_cuGetErrorString_v6000 GetErrorString;
	PFN_cuDeviceGet_v2000 DeviceGet;
	PFN_cuDeviceGetAttribute_v2000 DeviceGetAttribute;
	PFN_cuMemGetAllocationGranularity_v10020 MemGetAllocationGranularity;
	PFN_cuMemCreate_v10020 MemCreate;
	PFN_cuMemRelease_v10020 MemRelease;
	PFN_cuMemExportToShareableHandle_v10020 MemExportToShareableHandle;
	PFN_cuMemImportFromShareableHandle_v10020 MemImportFromShareableHandle;
	PFN_cuMemAddressReserve_v10020 MemAddressReserve;
	PFN_cuMemAddressFree_v10020 MemAddressFree;
	PFN_cuMemMap_v10020 MemMap;
	PFN_cuMemUnmap_v10020 MemUnmap;
	PFN_cuMemSetAccess_v10020 MemSetAccess;
} drv = { .once = PTHREAD_ONCE_INIT };

struct cuda_pool;

/* The streams and events one relay uses on each device it touches (see "relays"). */
struct relay_set {
	bool busy;
	cudaStream_t s[CUDA_MAX_DEVICES][RELAY_LANES_MAX];
	cudaEvent_t link[CUDA_MAX_DEVICES][RELAY_LANES_MAX]; /* after each piece's part */
	cudaEvent_t done[CUDA_MAX_DEVICES][RELAY_LANES_MAX]; /* after the last (blocking sync) */
};

/* A copy_async in flight: its event, and whom to tell (see "asynchronous copies"). */
struct copy_wait {
	struct copy_wait *next;
	cudaEvent_t ev;
	int device;
	void (*done)(void *arg, int status); /* NULL: a leading part of a split copy */
	void *arg;
};

struct cuda_ctx {
	void (*log)(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
	pthread_mutex_t lock;		       /* guards streams, pools, numa_logged */
	/* [dev][0]: synchronous copies and the first asynchronous stream; created on first use */
	cudaStream_t stream[CUDA_MAX_DEVICES][CUDA_COPY_STREAMS_MAX];
	uint32_t next_stream[CUDA_MAX_DEVICES]; /* asynchronous copies: round robin */
	uint32_t nstreams;	/* asynchronous copy streams per device (RGAPS_CUDA_COPY_STREAMS) */
	uint64_t split_min;	/* asynchronous copies this large go in parts over the streams */
	uint64_t spin_ns;	/* the waiter polls an event this long before it sleeps */
	/* split copies: the parts on streams 1.. are joined into stream 0's by these events */
	cudaEvent_t join[CUDA_MAX_DEVICES][CUDA_COPY_STREAMS_MAX];
	uint64_t numa_logged;		       /* bit per device: placement reported */
	struct cuda_pool *pools;	       /* regions this context mapped */
	/* copy_async completions: FIFO of copies in start order, one waiter thread */
	pthread_mutex_t qlock;
	pthread_cond_t qcond;
	struct copy_wait *q_head, *q_tail;
	struct copy_wait *spare[CUDA_MAX_DEVICES]; /* finished, event kept for the next copy */
	uint32_t nspare[CUDA_MAX_DEVICES];
	pthread_t waiter;
	bool waiter_started, waiter_stop;
	/* copy_relay: sets of streams and events, taken by one relay at a time (lock) */
	struct relay_set *relay[RELAY_SETS];
	pthread_cond_t relay_free;
	uint32_t relay_lanes;  /* RGAPS_CUDA_RELAY_LANES */
	uint64_t relay_pieces; /* RGAPS_CUDA_RELAY_PIECES: most pieces of one message */
	bool relay_logged;
};

/* One region as this process holds it (region.priv). */
struct cuda_pool {
	struct cuda_pool *next;
	uint32_t mode;	 /* CUDA_FLAG_VMM or CUDA_FLAG_IPC */
	bool creator;	 /* the creator owns the allocation (IPC: frees it) */
	bool read_only;	 /* VMM: mapped with read access only (a subscriber's view) */
	int device;
	uint64_t size;
	CUdeviceptr va;	 /* VMM: reserved and mapped range */
	CUmemGenericAllocationHandle handle;
	void *ptr;	 /* IPC: cudaMalloc'd (creator) or opened (importer) */
};

/* ---------------------------------------------------------------- helpers */

#define plog(ctx, level, ...)                               \
	do {                                                \
		if ((ctx) && (ctx)->log)                    \
			(ctx)->log((level), __VA_ARGS__);   \
	} while (0)

static int errno_of_rt(cudaError_t e)
{
	switch (e) {
	case cudaSuccess:
		return 0;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorNoDevice:
	case cudaErrorInvalidDevice:
	case cudaErrorInsufficientDriver:
		return -ENODEV;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidDevicePointer:
	case cudaErrorInvalidResourceHandle:
		return -EINVAL;
	case cudaErrorNotSupported:
		return -ENOTSUP;
	case cudaErrorHostMemoryAlreadyRegistered:
		return -EEXIST;
	case cudaErrorHostMemoryNotRegistered:
		return -ENOENT;
	default:
		return -EIO;
	}
}

static int errno_of_drv(CUresult e)
{
	switch (e) {
	case CUDA_SUCCESS:
		return 0;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return -ENOMEM;
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_INVALID_DEVICE:
		return -ENODEV;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_HANDLE:
		return -EINVAL;
	case CUDA_ERROR_NOT_SUPPORTED:
	case CUDA_ERROR_NOT_PERMITTED:
		return -ENOTSUP;
	default:
		return -EIO;
	}
}

static const char *drv_str(CUresult e)
{
	const char *s = NULL;

	if (drv.GetErrorString && drv.GetErrorString(e, &s) == CUDA_SUCCESS && s)
		return s;
	return "unknown driver error";
}

/* Log a failed driver call and turn it into an errno. */
static int drv_fail(struct cuda_ctx *ctx, const char *what, CUresult e)
{
	plog(ctx, LOG_ERROR, "cuda: %s failed: %s (CUresult %d)", what, drv_str(e), (int)e);
	return errno_of_drv(e);
}

static int rt_fail(struct cuda_ctx *ctx, const char *what, cudaError_t e)
{
	plog(ctx, LOG_ERROR, "cuda: %s failed: %s", what, cudaGetErrorString(e));
	return errno_of_rt(e);
}

static void load_driver(void)
{
	static const struct {
		const char *sym;
		size_t off;
	} tab[] = {
#define E(name) { "cu" #name, offsetof(__typeof__(drv), name) }
		E(GetErrorString), E(DeviceGet), E(DeviceGetAttribute),
		E(MemGetAllocationGranularity), E(MemCreate), E(MemRelease),
		E(MemExportToShareableHandle), E(MemImportFromShareableHandle),
		E(MemAddressReserve), E(MemAddressFree), E(MemMap), E(MemUnmap), E(MemSetAccess),
#undef E
	};

	for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
		enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
		void *fn = NULL;
		cudaError_t e = cudaGetDriverEntryPointByVersion(tab[i].sym, &fn, CUDA_DRIVER_ABI,
								 cudaEnableDefault, &q);

		if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn) {
			snprintf(drv.why, sizeof(drv.why), "driver entry point %s unavailable: %s",
				 tab[i].sym,
				 e != cudaSuccess ? cudaGetErrorString(e) : "symbol not found");
			drv.err = -ENOTSUP;
			return;
		}
		memcpy((char *)&drv + tab[i].off, &fn, sizeof(fn));
	}
}

static int need_driver(char *why, size_t whylen)
{
	pthread_once(&drv.once, load_driver);
	if (drv.err && why)
		snprintf(why, whylen, "%s", drv.why);
	return drv.err;
}

/*
 * Is the device usable? 0, or -ENODEV and why in words: no driver, no device,
 * ordinal out of range. Does not create a context.
 */
static int check_device(int32_t device, char *why, size_t whylen)
{
	int drv_version = 0, count = 0;
	cudaError_t e;

	e = cudaDriverGetVersion(&drv_version);
	if (e != cudaSuccess || drv_version == 0) {
		snprintf(why, whylen, "no NVIDIA driver: libcuda.so.1 could not be loaded");
		return -ENODEV;
	}
	e = cudaGetDeviceCount(&count);
	if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0)) {
		const char *vis = getenv("CUDA_VISIBLE_DEVICES");

		snprintf(why, whylen, "no CUDA device visible (driver for CUDA %d.%d%s%s)",
			 drv_version / 1000, drv_version % 1000 / 10,
			 vis ? ", CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "");
		return -ENODEV;
	}
	if (e == cudaErrorInsufficientDriver) {
		int rt = 0;

		cudaRuntimeGetVersion(&rt);
		snprintf(why, whylen, "driver supports CUDA %d.%d, this plugin needs %d.%d",
			 drv_version / 1000, drv_version % 1000 / 10, rt / 1000, rt % 1000 / 10);
		return -ENODEV;
	}
	if (e != cudaSuccess) {
		snprintf(why, whylen, "cannot count CUDA devices: %s", cudaGetErrorString(e));
		return -ENODEV;
	}
	if (device < 0 || device >= count || device >= CUDA_MAX_DEVICES) {
		snprintf(why, whylen, "device ordinal %d out of range: %d CUDA device%s visible",
			 (int)device, count, count == 1 ? "" : "s");
		return -ENODEV;
	}
	return 0;
}

/* Make device current (and its primary context live); *old_p gets the caller's. */
static int enter_device(struct cuda_ctx *ctx, int device, int *old_p)
{
	cudaError_t e;
	int old = -1;

	if (cudaGetDevice(&old) != cudaSuccess)
		old = -1;
	if (old != device) {
		e = cudaSetDevice(device);
		if (e != cudaSuccess)
			return rt_fail(ctx, "cudaSetDevice", e);
	}
	*old_p = old;
	return 0;
}

static void leave_device(int device, int old)
{
	if (old >= 0 && old != device)
		cudaSetDevice(old);
}

/* The PCI device's NUMA node from sysfs: -1 when the platform reports none. */
static int gpu_numa_node(int device, char *pci, size_t pcilen)
{
	char path[128], buf[16];
	int fd, node = -1;
	ssize_t n;

	if (cudaDeviceGetPCIBusId(pci, (int)pcilen, device) != cudaSuccess) {
		snprintf(pci, pcilen, "?");
		return -1;
	}
	for (char *p = pci; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", pci);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n > 0) {
		buf[n] = 0;
		node = atoi(buf);
	}
	return node;
}

/* Say once per device where it sits: the staging pool (DP1) will go on that node. */
static void report_placement(struct cuda_ctx *ctx, int device)
{
	struct cudaDeviceProp prop;
	char pci[32];
	bool first;
	int node;

	pthread_mutex_lock(&ctx->lock);
	first = !(ctx->numa_logged & (1ull << device));
	ctx->numa_logged |= 1ull << device;
	pthread_mutex_unlock(&ctx->lock);
	if (!first)
		return;
	if (cudaGetDeviceProperties(&prop, device) != cudaSuccess)
		snprintf(prop.name, sizeof(prop.name), "?");
	node = gpu_numa_node(device, pci, sizeof(pci));
	if (node >= 0)
		plog(ctx, LOG_INFO,
		     "cuda: GPU %d (%s, PCI %s) is on NUMA node %d: host staging memory for it "
		     "belongs there",
		     device, prop.name, pci, node);
	else
		plog(ctx, LOG_INFO,
		     "cuda: GPU %d (%s, PCI %s): the platform reports no NUMA node for it",
		     device, prop.name, pci);
}

/* VMM with POSIX fd export, unless the device lacks it or RGAPS_CUDA_IPC=1 asks for IPC. */
static uint32_t share_mode(int device, char *why, size_t whylen)
{
	const char *force = getenv("RGAPS_CUDA_IPC");
	int vmm = 0, fdh = 0;
	CUdevice dev;

	if (force && strcmp(force, "1") == 0) {
		snprintf(why, whylen, "RGAPS_CUDA_IPC=1");
		return CUDA_FLAG_IPC;
	}
	if (need_driver(why, whylen))
		return CUDA_FLAG_IPC;
	if (drv.DeviceGet(&dev, device) != CUDA_SUCCESS ||
	    drv.DeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
				   dev) != CUDA_SUCCESS ||
	    drv.DeviceGetAttribute(&fdh,
				   CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
				   dev) != CUDA_SUCCESS) {
		snprintf(why, whylen, "cannot read the device's VMM attributes");
		return CUDA_FLAG_IPC;
	}
	if (!vmm || !fdh) {
		snprintf(why, whylen, "device %d lacks %s", device,
			 !vmm ? "virtual memory management" : "POSIX fd export of VMM memory");
		return CUDA_FLAG_IPC;
	}
	snprintf(why, whylen, "VMM with POSIX fd export");
	return CUDA_FLAG_VMM;
}

static void pool_link(struct cuda_ctx *ctx, struct cuda_pool *p)
{
	pthread_mutex_lock(&ctx->lock);
	p->next = ctx->pools;
	ctx->pools = p;
	pthread_mutex_unlock(&ctx->lock);
}

static void pool_unlink(struct cuda_ctx *ctx, struct cuda_pool *p)
{
	pthread_mutex_lock(&ctx->lock);
	for (struct cuda_pool **pp = &ctx->pools; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	}
	pthread_mutex_unlock(&ctx->lock);
}

static uintptr_t pool_base(const struct cuda_pool *p)
{
	return p->mode == CUDA_FLAG_VMM ? (uintptr_t)p->va : (uintptr_t)p->ptr;
}

/* ---------------------------------------------------------------- init, probe */

/* A whole number from the environment within [min, max], else def (and say why). */
static uint64_t env_u64(struct cuda_ctx *ctx, const char *name, uint64_t def, uint64_t min,
			uint64_t max)
{
	const char *v = getenv(name);
	char *end;
	unsigned long long x;

	if (!v || !*v)
		return def;
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || *end || x < min || x > max) {
		plog(ctx, LOG_WARN, "cuda: %s=%s ignored: not a whole number in [%llu, %llu]", name, v,
		     (unsigned long long)min, (unsigned long long)max);
		return def;
	}
	return x;
}

static int cuda_init(const struct rgaps_plugin_env *env, void **ctx_p)
{
	struct cuda_ctx *ctx = calloc(1, sizeof(*ctx));

	if (!ctx)
		return -ENOMEM;
	if (env && env->struct_size >= offsetof(struct rgaps_plugin_env, log) + sizeof(env->log))
		ctx->log = env->log; /* env itself may not outlive this call */
	/* Tunables of the asynchronous copies (docs/GPU.md, "Copies and streams"). */
	ctx->nstreams = (uint32_t)env_u64(ctx, "RGAPS_CUDA_COPY_STREAMS", 2, 1,
					  CUDA_COPY_STREAMS_MAX);
	ctx->split_min = env_u64(ctx, "RGAPS_CUDA_SPLIT_MIN", 0, 0, UINT64_MAX);
	ctx->spin_ns = env_u64(ctx, "RGAPS_CUDA_SPIN_US", 2000, 0, 1000000) * 1000ull;
	ctx->relay_lanes = (uint32_t)env_u64(ctx, "RGAPS_CUDA_RELAY_LANES", 1, 1, RELAY_LANES_MAX);
	ctx->relay_pieces = env_u64(ctx, "RGAPS_CUDA_RELAY_PIECES", 32, 1, 4096);
	pthread_cond_init(&ctx->relay_free, NULL);
	pthread_mutex_init(&ctx->lock, NULL);
	pthread_mutex_init(&ctx->qlock, NULL);
	pthread_cond_init(&ctx->qcond, NULL);
	/* No CUDA here: init must succeed where there is no GPU (probe says why). */
	*ctx_p = ctx;
	return 0;
}

static void relay_set_free(struct cuda_ctx *ctx, struct relay_set *rs);

static void cuda_fini(void *vctx)
{
	struct cuda_ctx *ctx = vctx;

	if (!ctx)
		return;
	if (ctx->waiter_started) { /* it reports every copy still in flight, then ends */
		pthread_mutex_lock(&ctx->qlock);
		ctx->waiter_stop = true;
		pthread_cond_signal(&ctx->qcond);
		pthread_mutex_unlock(&ctx->qlock);
		pthread_join(ctx->waiter, NULL);
	}
	for (int d = 0; d < CUDA_MAX_DEVICES; d++) {
		int old;

		if (!ctx->stream[d][0] || enter_device(ctx, d, &old))
			continue;
		while (ctx->spare[d]) {
			struct copy_wait *w = ctx->spare[d];

			ctx->spare[d] = w->next;
			cudaEventDestroy(w->ev);
			free(w);
		}
		for (int k = 0; k < CUDA_COPY_STREAMS_MAX; k++) {
			if (ctx->join[d][k])
				cudaEventDestroy(ctx->join[d][k]);
			if (ctx->stream[d][k])
				cudaStreamDestroy(ctx->stream[d][k]);
		}
		leave_device(d, old);
	}
	for (int k = 0; k < RELAY_SETS; k++)
		relay_set_free(ctx, ctx->relay[k]);
	pthread_cond_destroy(&ctx->relay_free);
	pthread_cond_destroy(&ctx->qcond);
	pthread_mutex_destroy(&ctx->qlock);
	if (ctx->pools)
		plog(ctx, LOG_WARN, "cuda: plugin closed with pools still mapped");
	pthread_mutex_destroy(&ctx->lock);
	free(ctx);
}

static int cuda_probe(void *vctx, int32_t device, char *why, size_t whylen)
{
	struct cuda_ctx *ctx = vctx;
	char mode_why[160];
	size_t free_b = 0, total_b = 0;
	uint32_t mode;
	int old, r;

	r = check_device(device, why, whylen);
	if (r)
		return r;
	r = enter_device(ctx, device, &old);
	if (r) {
		snprintf(why, whylen, "cannot use CUDA device %d", (int)device);
		return -ENODEV;
	}
	mode = share_mode(device, mode_why, sizeof(mode_why));
	cudaMemGetInfo(&free_b, &total_b);
	leave_device(device, old);
	report_placement(ctx, device);
	snprintf(why, whylen,
		 "CUDA device %d usable, %.0f MiB free of %.0f; pools shared by %s (%s)",
		 (int)device, free_b / MiB, total_b / MiB,
		 mode == CUDA_FLAG_VMM ? "VMM fd" : "cudaIpc handle", mode_why);
	return 0;
}

/* ---------------------------------------------------------------- VMM */

static void vmm_prop(CUmemAllocationProp *prop, int device)
{
	memset(prop, 0, sizeof(*prop));
	prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop->location.id = device;
	prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

/* Reserve a range for p->handle, map it and open it to p->device (read-only for readers). */
static int vmm_map(struct cuda_ctx *ctx, struct cuda_pool *p, size_t align)
{
	CUmemAccessDesc acc = {
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = p->device },
		.flags = p->read_only ? CU_MEM_ACCESS_FLAGS_PROT_READ :
					CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
	CUresult e;

	e = drv.MemAddressReserve(&p->va, p->size, align, 0, 0);
	if (e != CUDA_SUCCESS)
		return drv_fail(ctx, "cuMemAddressReserve", e);
	e = drv.MemMap(p->va, p->size, 0, p->handle, 0);
	if (e != CUDA_SUCCESS) {
		drv_fail(ctx, "cuMemMap", e);
		goto err_free_va;
	}
	e = drv.MemSetAccess(p->va, p->size, &acc, 1);
	if (e != CUDA_SUCCESS) {
		drv_fail(ctx, "cuMemSetAccess", e);
		goto err_unmap;
	}
	return 0;

err_unmap:
	drv.MemUnmap(p->va, p->size);
err_free_va:
	drv.MemAddressFree(p->va, p->size);
	p->va = 0;
	return errno_of_drv(e);
}

static void vmm_unmap(struct cuda_pool *p)
{
	if (p->va) {
		drv.MemUnmap(p->va, p->size);
		drv.MemAddressFree(p->va, p->size);
		p->va = 0;
	}
	if (p->handle) {
		drv.MemRelease(p->handle);
		p->handle = 0;
	}
}

static int vmm_granularity(struct cuda_ctx *ctx, int device, size_t *gran_p)
{
	CUmemAllocationProp prop;
	size_t gran = 0;
	CUresult e;

	vmm_prop(&prop, device);
	e = drv.MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
	if (e != CUDA_SUCCESS || gran == 0)
		e = drv.MemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (e != CUDA_SUCCESS)
		return drv_fail(ctx, "cuMemGetAllocationGranularity", e);
	*gran_p = gran;
	return 0;
}

static int vmm_create(struct cuda_ctx *ctx, struct cuda_pool *p, uint64_t size, int *fd_p)
{
	CUmemAllocationProp prop;
	size_t gran;
	int fd = -1, r;
	CUresult e;

	r = vmm_granularity(ctx, p->device, &gran);
	if (r)
		return r;
	p->size = (size + gran - 1) / gran * gran;
	vmm_prop(&prop, p->device);
	e = drv.MemCreate(&p->handle, p->size, &prop, 0);
	if (e != CUDA_SUCCESS) {
		p->handle = 0;
		return drv_fail(ctx, "cuMemCreate", e);
	}
	e = drv.MemExportToShareableHandle(&fd, p->handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
					   0);
	if (e != CUDA_SUCCESS) {
		r = drv_fail(ctx, "cuMemExportToShareableHandle", e);
		goto err_release;
	}
	r = vmm_map(ctx, p, gran);
	if (r)
		goto err_close;
	*fd_p = fd;
	return 0;

err_close:
	close(fd);
err_release:
	drv.MemRelease(p->handle);
	p->handle = 0;
	return r;
}

static int vmm_import(struct cuda_ctx *ctx, struct cuda_pool *p, int fd)
{
	size_t gran;
	CUresult e;
	int r;

	r = vmm_granularity(ctx, p->device, &gran);
	if (r)
		return r;
	if (p->size % gran) {
		plog(ctx, LOG_ERROR,
		     "cuda: pool size %llu is not a multiple of the granularity %zu",
		     (unsigned long long)p->size, gran);
		return -EINVAL;
	}
	e = drv.MemImportFromShareableHandle(&p->handle, (void *)(uintptr_t)fd,
					     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (e != CUDA_SUCCESS) {
		p->handle = 0;
		return drv_fail(ctx, "cuMemImportFromShareableHandle", e);
	}
	r = vmm_map(ctx, p, gran);
	if (r) {
		drv.MemRelease(p->handle);
		p->handle = 0;
	}
	return r;
}

/* ---------------------------------------------------------------- IPC fallback */

static int ipc_create(struct cuda_ctx *ctx, struct cuda_pool *p, uint64_t size, int *fd_p)
{
	cudaIpcMemHandle_t h;
	cudaError_t e;
	int fd, r;

	p->size = (size + 0xfffff) & ~(uint64_t)0xfffff;
	e = cudaMalloc(&p->ptr, p->size);
	if (e != cudaSuccess) {
		p->ptr = NULL;
		return rt_fail(ctx, "cudaMalloc", e);
	}
	e = cudaIpcGetMemHandle(&h, p->ptr);
	if (e != cudaSuccess) {
		r = rt_fail(ctx, "cudaIpcGetMemHandle", e);
		goto err_free;
	}
	fd = memfd_create("rgaps-cuda-ipc", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		r = -errno;
		plog(ctx, LOG_ERROR, "cuda: memfd_create: %s", strerror(errno));
		goto err_free;
	}
	/* Every importer gets this fd read-write (a VMM handle has no read-only form):
	 * sealed, nobody can change or shorten the handle the next importer reads. */
	if (pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		r = -EIO;
		plog(ctx, LOG_ERROR, "cuda: cannot write and seal the IPC handle in its memfd");
		close(fd);
		goto err_free;
	}
	*fd_p = fd;
	return 0;

err_free:
	cudaFree(p->ptr);
	p->ptr = NULL;
	return r;
}

static int ipc_import(struct cuda_ctx *ctx, struct cuda_pool *p, int fd)
{
	cudaIpcMemHandle_t h;
	cudaError_t e;

	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		plog(ctx, LOG_ERROR, "cuda: the pool fd does not hold a CUDA IPC handle");
		return -EINVAL;
	}
	e = cudaIpcOpenMemHandle(&p->ptr, h, cudaIpcMemLazyEnablePeerAccess);
	if (e != cudaSuccess) {
		p->ptr = NULL;
		return rt_fail(ctx, "cudaIpcOpenMemHandle", e);
	}
	return 0;
}

/* ---------------------------------------------------------------- pools */

static int cuda_pool_create(void *vctx, const char *name, uint64_t size, int32_t device,
			    struct rgaps_mem_region *region_p)
{
	struct cuda_ctx *ctx = vctx;
	struct cuda_pool *p;
	size_t free_b = 0, total_b = 0;
	char why[200];
	int old, fd = -1, r;
	cudaError_t e;

	r = check_device(device, why, sizeof(why));
	if (r) {
		plog(ctx, LOG_ERROR, "cuda: cannot create pool %s: %s", name, why);
		return r;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->device = device;
	p->creator = true;
	r = enter_device(ctx, device, &old);
	if (r)
		goto err_free;
	report_placement(ctx, device);
	e = cudaMemGetInfo(&free_b, &total_b);
	if (e != cudaSuccess) {
		r = rt_fail(ctx, "cudaMemGetInfo", e);
		goto err_leave;
	}
	if (free_b < size) {
		plog(ctx, LOG_ERROR,
		     "cuda: GPU %d has %.0f MiB free, topic needs %.0f MiB (pool %s)",
		     (int)device, free_b / MiB, size / MiB, name);
		r = -ENOMEM;
		goto err_leave;
	}
	p->mode = share_mode(device, why, sizeof(why));
	if (p->mode == CUDA_FLAG_VMM)
		r = vmm_create(ctx, p, size, &fd);
	else
		r = ipc_create(ctx, p, size, &fd);
	if (r) {
		plog(ctx, LOG_ERROR, "cuda: cannot create a %.0f MiB pool on GPU %d (%s)",
		     size / MiB, (int)device, p->mode == CUDA_FLAG_VMM ? "VMM" : "cudaIpc");
		goto err_leave;
	}
	leave_device(device, old);
	pool_link(ctx, p);
	plog(ctx, LOG_INFO, "cuda: pool %s: %.0f MiB on GPU %d at 0x%llx, shared by %s (%s)", name,
	     p->size / MiB, (int)device, (unsigned long long)pool_base(p),
	     p->mode == CUDA_FLAG_VMM ? "VMM fd" : "cudaIpc handle", why);
	*region_p = (struct rgaps_mem_region){
		.base = (void *)pool_base(p),
		.size = p->size,
		.fd = fd,
		.kind = RGAPS_MEM_CUDA,
		.device = device,
		.flags = p->mode,
		.priv = p,
	};
	return 0;

err_leave:
	leave_device(device, old);
err_free:
	free(p);
	return r;
}

static int cuda_pool_import(void *vctx, int fd, uint64_t size, int32_t device, uint32_t flags,
			    struct rgaps_mem_region *region_p)
{
	struct cuda_ctx *ctx = vctx;
	bool read_only = flags & RGAPS_MEM_IMPORT_READONLY;
	struct cuda_pool *p;
	char why[200];
	int old, r;

	flags &= ~RGAPS_MEM_IMPORT_READONLY;
	if (flags != CUDA_FLAG_VMM && flags != CUDA_FLAG_IPC) {
		plog(ctx, LOG_ERROR, "cuda: pool flags 0x%x name no sharing method", flags);
		r = -EINVAL;
		goto err_close;
	}
	r = check_device(device, why, sizeof(why));
	if (r) {
		plog(ctx, LOG_ERROR, "cuda: cannot import the pool: %s", why);
		goto err_close;
	}
	if (flags == CUDA_FLAG_VMM && need_driver(why, sizeof(why))) {
		plog(ctx, LOG_ERROR, "cuda: cannot import a VMM pool: %s", why);
		r = -ENOTSUP;
		goto err_close;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		r = -ENOMEM;
		goto err_close;
	}
	p->device = device;
	p->mode = flags;
	p->size = size;
	/* cudaIpc mappings have no read-only form: only VMM pools are mapped so. */
	p->read_only = read_only && flags == CUDA_FLAG_VMM;
	r = enter_device(ctx, device, &old);
	if (r)
		goto err_free;
	r = flags == CUDA_FLAG_VMM ? vmm_import(ctx, p, fd) : ipc_import(ctx, p, fd);
	leave_device(device, old);
	if (r)
		goto err_free;
	pool_link(ctx, p);
	*region_p = (struct rgaps_mem_region){
		.base = (void *)pool_base(p),
		.size = p->size,
		.fd = fd, /* consumed: owned by the region now */
		.kind = RGAPS_MEM_CUDA,
		.device = device,
		.flags = flags,
		.priv = p,
	};
	return 0;

err_free:
	free(p);
err_close:
	close(fd); /* consumed, as the operation says */
	return r;
}

static void cuda_pool_release(void *vctx, struct rgaps_mem_region *region)
{
	struct cuda_ctx *ctx = vctx;
	struct cuda_pool *p = region->priv;
	int old;

	if (p) {
		pool_unlink(ctx, p);
		if (enter_device(ctx, p->device, &old) == 0) {
			/* Reverse order: unmap, give the range back, drop our reference. */
			if (p->mode == CUDA_FLAG_VMM)
				vmm_unmap(p);
			else if (p->ptr && p->creator)
				cudaFree(p->ptr);
			else if (p->ptr)
				cudaIpcCloseMemHandle(p->ptr);
			leave_device(p->device, old);
		}
		free(p);
	}
	if (region->fd >= 0)
		close(region->fd);
	region->base = NULL;
	region->fd = -1;
	region->priv = NULL;
}

/* ---------------------------------------------------------------- copies */

/* The device a copy runs on: the pool's, found among this context's regions. */
static int copy_device(struct cuda_ctx *ctx, const void *dst, const void *src, uint32_t dir)
{
	const void *cand[2] = { dst, src };
	int dev = -1;

	if (dir == RGAPS_COPY_FROM_POOL) {
		cand[0] = src;
		cand[1] = dst;
	}
	pthread_mutex_lock(&ctx->lock);
	for (int i = 0; i < 2 && dev < 0; i++)
		for (struct cuda_pool *p = ctx->pools; p; p = p->next)
			if ((uintptr_t)cand[i] - pool_base(p) < p->size) {
				dev = p->device;
				break;
			}
	pthread_mutex_unlock(&ctx->lock);
	for (int i = 0; i < 2 && dev < 0; i++) {
		struct cudaPointerAttributes a;

		if (cudaPointerGetAttributes(&a, cand[i]) == cudaSuccess &&
		    a.type == cudaMemoryTypeDevice)
			dev = a.device;
	}
	if (dev < 0 && cudaGetDevice(&dev) != cudaSuccess)
		dev = 0;
	cudaGetLastError(); /* a host pointer to cudaPointerGetAttributes is no error */
	return dev;
}

/* The device's stream in *slot, created on first use (copy or completion stream). NULL: failed. */
static cudaStream_t lazy_stream(struct cuda_ctx *ctx, cudaStream_t *slot)
{
	cudaStream_t s;

	pthread_mutex_lock(&ctx->lock);
	if (!*slot && cudaStreamCreateWithFlags(slot, cudaStreamNonBlocking) != cudaSuccess)
		*slot = NULL;
	s = *slot;
	pthread_mutex_unlock(&ctx->lock);
	return s;
}

static int cuda_copy_during(void *vctx, void *dst, const void *src, size_t n, uint32_t dir,
			    bool (*during)(void *arg), void *arg)
{
	struct cuda_ctx *ctx = vctx;
	cudaStream_t s;
	cudaError_t e;
	int dev, old, r;

	if (n == 0)
		return 0;
	dev = copy_device(ctx, dst, src, dir);
	if (dev < 0 || dev >= CUDA_MAX_DEVICES)
		return -ENODEV;
	r = enter_device(ctx, dev, &old);
	if (r)
		return r;
	s = lazy_stream(ctx, &ctx->stream[dev][0]);
	if (!s) {
		r = -ENOMEM;
		plog(ctx, LOG_ERROR, "cuda: cannot create a copy stream on GPU %d", dev);
		goto out;
	}
	e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s);
	/* An error of the copy ends the calls; the synchronize then reports it. */
	if (e == cudaSuccess && during)
		while (during(arg) && cudaStreamQuery(s) == cudaErrorNotReady)
			;
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(s);
	r = e == cudaSuccess ? 0 : rt_fail(ctx, "copy into/out of the pool", e);
out:
	leave_device(dev, old);
	return r;
}

static int cuda_copy(void *vctx, void *dst, const void *src, size_t n, uint32_t dir)
{
	return cuda_copy_during(vctx, dst, src, n, dir, NULL, NULL);
}

/*
 * Asynchronous copies (the remote path: ring -> GPU pool, GPU pool -> staging).
 * Each copy is queued on the device's copy stream with an event recorded
 * after it; one waiter thread per context takes the events in start order
 * and calls done(), which only signals the daemon's loop (STYLE.md item 9).
 *
 * The waiter polls the head event for up to COPY_SPIN_NS, then sleeps on it
 * (blocking-sync events). Measured on an H200 (docs/BENCHMARKS.md, DP1): a
 * stream host function per copy costs about 50 us, and on the copy stream it
 * also holds every later copy (chunk trains at 0.54-0.66 of raw D2H); on a
 * second stream it no longer holds them but a lone 4 MiB copy still waits
 * its 50 us (0.61-0.67 at 4 MiB). Polling the event reports a copy within a
 * few microseconds. The bound keeps it adaptive, like the verbs transport's
 * completion queue: while chunks follow each other (4 MiB: one every ~85 us)
 * the thread polls; a copy longer than the bound (over ~100 MiB) or an idle
 * context sleeps, so no core spins when nothing moves.
 */
/* The polling bound defaults to 2 ms (RGAPS_CUDA_SPIN_US), a 64 MiB copy at 55 GB/s. */
#define COPY_SPARES 64		 /* finished entries (and their events) kept per device */

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int copy_wait_event(struct cuda_ctx *ctx, struct copy_wait *w)
{
	uint64_t t0 = mono_ns();
	cudaError_t e;

	while ((e = cudaEventQuery(w->ev)) == cudaErrorNotReady) {
		if (mono_ns() - t0 > ctx->spin_ns) {
			e = cudaEventSynchronize(w->ev);
			break;
		}
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
	}
	return e == cudaSuccess ? 0 : rt_fail(ctx, "asynchronous copy into/out of the pool", e);
}

/*
 * An entry with its event for a copy on dev: a spare one (creating an event
 * costs microseconds, which a 4 MiB copy's report would otherwise wait for),
 * else a new one. Called with dev current. NULL: out of memory or events.
 */
static struct copy_wait *copy_wait_get(struct cuda_ctx *ctx, int dev)
{
	struct copy_wait *w;

	pthread_mutex_lock(&ctx->qlock);
	w = ctx->spare[dev];
	if (w) {
		ctx->spare[dev] = w->next;
		ctx->nspare[dev]--;
	}
	pthread_mutex_unlock(&ctx->qlock);
	if (w)
		return w;
	w = calloc(1, sizeof(*w));
	if (w && cudaEventCreateWithFlags(&w->ev, cudaEventBlockingSync |
							  cudaEventDisableTiming) != cudaSuccess) {
		free(w);
		w = NULL;
	}
	if (w)
		w->device = dev;
	return w;
}

/* A finished entry goes back to its device's spares (or away). Called with qlock held. */
static void copy_wait_put(struct cuda_ctx *ctx, struct copy_wait *w)
{
	if (ctx->nspare[w->device] < COPY_SPARES) {
		w->next = ctx->spare[w->device];
		ctx->spare[w->device] = w;
		ctx->nspare[w->device]++;
		return;
	}
	cudaEventDestroy(w->ev);
	free(w);
}

static void *copy_waiter_main(void *p)
{
	struct cuda_ctx *ctx = p;
	int current = -1;

	pthread_setname_np(pthread_self(), "rgaps-cuda-wait");
	pthread_mutex_lock(&ctx->qlock);
	for (;;) {
		void (*done)(void *arg, int status);
		struct copy_wait *w;
		void *arg;
		int status;

		while (!ctx->q_head && !ctx->waiter_stop)
			pthread_cond_wait(&ctx->qcond, &ctx->qlock);
		w = ctx->q_head;
		if (!w)
			break; /* stopping, and every copy reported */
		pthread_mutex_unlock(&ctx->qlock);
		if (w->device != current) { /* this thread's runtime calls go to that device */
			cudaSetDevice(w->device);
			current = w->device;
		}
		status = copy_wait_event(ctx, w);
		done = w->done;
		arg = w->arg;
		pthread_mutex_lock(&ctx->qlock);
		ctx->q_head = w->next;
		if (!ctx->q_head)
			ctx->q_tail = NULL;
		copy_wait_put(ctx, w);
		pthread_mutex_unlock(&ctx->qlock);
		done(arg, status);
		pthread_mutex_lock(&ctx->qlock);
	}
	pthread_mutex_unlock(&ctx->qlock);
	return NULL;
}

/* Hand w to the waiter (started on the first asynchronous copy). 0 or -errno. */
static int copy_wait_push(struct cuda_ctx *ctx, struct copy_wait *w)
{
	int r = 0;

	pthread_mutex_lock(&ctx->qlock);
	if (!ctx->waiter_started) {
		r = -pthread_create(&ctx->waiter, NULL, copy_waiter_main, ctx);
		ctx->waiter_started = r == 0;
	}
	if (r == 0) {
		w->next = NULL;
		if (ctx->q_tail)
			ctx->q_tail->next = w;
		else
			ctx->q_head = w;
		ctx->q_tail = w;
		pthread_cond_signal(&ctx->qcond);
	}
	pthread_mutex_unlock(&ctx->qlock);
	return r;
}

/*
 * The stream of an asynchronous copy and, for a split copy, the joins. Several
 * streams let consecutive copies overlap their start and end on the copy
 * engines (chunk trains lost ~2 % to the gaps on one stream: docs/BENCHMARKS.md,
 * "raw async 4MiB x k"); completions are still reported in start order, since
 * the waiter takes the events in that order. Called with dev current.
 */
static int copy_streams(struct cuda_ctx *ctx, int dev, uint32_t want, cudaStream_t *out)
{
	for (uint32_t k = 0; k < want; k++) {
		out[k] = lazy_stream(ctx, &ctx->stream[dev][k]);
		if (!out[k])
			return -ENOMEM;
	}
	return 0;
}

/*
 * Queue the copy on one stream (round robin), or in parts on every stream when
 * it is at least split_min bytes: the parts on streams 1.. record a join event
 * that stream 0 waits for, so the one event recorded on stream 0 after its own
 * part completes when every part has. On failure nothing is left queued that
 * anyone will report: what was queued is waited for. Returns the stream whose
 * event marks the end, or NULL and the CUDA error in *e_p.
 */
static cudaStream_t copy_queue(struct cuda_ctx *ctx, int dev, void *dst, const void *src,
			       size_t n, cudaError_t *e_p)
{
	cudaStream_t st[CUDA_COPY_STREAMS_MAX];
	uint32_t parts = 1, k;
	cudaError_t e = cudaSuccess;
	size_t part;

	if (ctx->nstreams > 1 && ctx->split_min && n >= ctx->split_min)
		parts = ctx->nstreams;
	if (copy_streams(ctx, dev, parts > 1 ? parts : ctx->nstreams, st)) {
		*e_p = cudaErrorMemoryAllocation;
		return NULL;
	}
	if (parts == 1) {
		pthread_mutex_lock(&ctx->lock);
		k = ctx->next_stream[dev]++ % ctx->nstreams;
		pthread_mutex_unlock(&ctx->lock);
		*e_p = n ? cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, st[k]) : cudaSuccess;
		return *e_p == cudaSuccess ? st[k] : NULL;
	}
	/* Parts of 1 MiB multiples, the last one on stream 0 carries the rest. */
	part = (n / parts) & ~(size_t)0xfffff;
	if (!part)
		part = n / parts;
	for (k = 1; k < parts && e == cudaSuccess; k++) {
		size_t off = (size_t)(k - 1) * part;

		if (!ctx->join[dev][k]) {
			e = cudaEventCreateWithFlags(&ctx->join[dev][k], cudaEventDisableTiming);
			if (e != cudaSuccess) {
				ctx->join[dev][k] = NULL;
				break;
			}
		}
		e = cudaMemcpyAsync((uint8_t *)dst + off, (const uint8_t *)src + off, part,
				    cudaMemcpyDefault, st[k]);
		if (e == cudaSuccess)
			e = cudaEventRecord(ctx->join[dev][k], st[k]);
		if (e == cudaSuccess)
			e = cudaStreamWaitEvent(st[0], ctx->join[dev][k], 0);
	}
	if (e == cudaSuccess) {
		size_t off = (size_t)(parts - 1) * part;

		e = cudaMemcpyAsync((uint8_t *)dst + off, (const uint8_t *)src + off, n - off,
				    cudaMemcpyDefault, st[0]);
	}
	if (e != cudaSuccess) {
		for (k = 0; k < parts; k++)
			cudaStreamSynchronize(st[k]);
		*e_p = e;
		return NULL;
	}
	*e_p = cudaSuccess;
	return st[0];
}

static int cuda_copy_async(void *vctx, void *dst, const void *src, size_t n, uint32_t dir,
			   void (*done)(void *arg, int status), void *arg)
{
	struct cuda_ctx *ctx = vctx;
	struct copy_wait *w;
	cudaStream_t s;
	cudaError_t e;
	int dev, old, r = 0;

	dev = copy_device(ctx, dst, src, dir);
	if (dev < 0 || dev >= CUDA_MAX_DEVICES)
		return -ENODEV;
	r = enter_device(ctx, dev, &old);
	if (r)
		return r;
	w = copy_wait_get(ctx, dev);
	if (!w) {
		plog(ctx, LOG_ERROR, "cuda: cannot create a completion event on GPU %d", dev);
		leave_device(dev, old);
		return -ENOMEM;
	}
	w->done = done;
	w->arg = arg;
	s = copy_queue(ctx, dev, dst, src, n, &e);
	if (s)
		e = cudaEventRecord(w->ev, s);
	if (e != cudaSuccess) {
		if (s)
			cudaStreamSynchronize(s); /* nothing of it may run on unreported */
		pthread_mutex_lock(&ctx->qlock);
		copy_wait_put(ctx, w);
		pthread_mutex_unlock(&ctx->qlock);
		r = rt_fail(ctx, "asynchronous copy into/out of the pool", e);
	} else {
		r = copy_wait_push(ctx, w);
		if (r) { /* no waiter thread: wait here, so the copy is still reported once */
			plog(ctx, LOG_WARN, "cuda: no completion thread (%s): copy waited for",
			     strerror(-r));
			r = copy_wait_event(ctx, w);
			pthread_mutex_lock(&ctx->qlock);
			copy_wait_put(ctx, w);
			pthread_mutex_unlock(&ctx->qlock);
			leave_device(dev, old);
			done(arg, r);
			return 0;
		}
	}
	leave_device(dev, old);
	return r;
}

/* ---------------------------------------------------------------- relays */

/*
 * copy_relay: one message to several GPUs along a chain (or a tree), in
 * pieces, as NCCL's broadcast moves it: piece j goes hop i-1 -> i while piece
 * j + 1 goes into hop i-1, so every link carries each byte once and the last
 * GPU has the message about one piece-time per hop after the first. A star
 * (every hop from the source) instead sends everything out of the source's
 * links at once: 9.1 ms for 1 GiB to 3 GPUs on H100, where one copy takes 3.7
 * (docs/BENCHMARKS.md, "Chained replication").
 *
 * Each hop's copies run on streams of its own device, which pulls from its
 * source through the peer mapping (pool_grant). Small pieces cost bandwidth:
 * on H100 NVLink one copy engine moved 4 MiB pieces at 284 GB/s, 32 MiB ones
 * at 376 and a whole message at 396 (docs/BENCHMARKS.md, "Chained
 * replication"), so pieces are at least n / relay_pieces, and a relay in which
 * no hop feeds another (one hop, or a star) copies each message whole. A
 * relay may have `lanes` streams per hop and put piece j on lane j % lanes
 * (RGAPS_CUDA_RELAY_LANES; 2 and 3 measured no faster than 1). Lane k of a
 * hop waits for lane k of its source only, through one event per (hop, lane)
 * recorded after each piece: a wait takes the event's latest record, and hop
 * i's wait for piece j is queued right after hop i-1 recorded piece j, so one
 * event serves every piece. The host queues everything first, then waits for
 * each hop's done events in hop order.
 */

/* Destroy a set's streams and events (fini; nothing of it is in flight). */
static void relay_set_free(struct cuda_ctx *ctx, struct relay_set *rs)
{
	if (!rs)
		return;
	for (int d = 0; d < CUDA_MAX_DEVICES; d++) {
		int old;

		if (!rs->s[d][0] || enter_device(ctx, d, &old))
			continue;
		for (int k = 0; k < RELAY_LANES_MAX; k++) {
			if (rs->link[d][k])
				cudaEventDestroy(rs->link[d][k]);
			if (rs->done[d][k])
				cudaEventDestroy(rs->done[d][k]);
			if (rs->s[d][k])
				cudaStreamDestroy(rs->s[d][k]);
		}
		leave_device(d, old);
	}
	free(rs);
}

/* A free set for this relay: relays of several threads never share events. */
static struct relay_set *relay_set_get(struct cuda_ctx *ctx)
{
	struct relay_set *rs = NULL;

	pthread_mutex_lock(&ctx->lock);
	while (!rs) {
		for (int k = 0; k < RELAY_SETS && !rs; k++) {
			if (!ctx->relay[k])
				ctx->relay[k] = calloc(1, sizeof(*ctx->relay[k]));
			if (ctx->relay[k] && !ctx->relay[k]->busy)
				rs = ctx->relay[k];
		}
		if (!rs && !ctx->relay[0])
			break; /* out of memory */
		if (!rs)
			pthread_cond_wait(&ctx->relay_free, &ctx->lock);
	}
	if (rs)
		rs->busy = true;
	pthread_mutex_unlock(&ctx->lock);
	return rs;
}

static void relay_set_put(struct cuda_ctx *ctx, struct relay_set *rs)
{
	pthread_mutex_lock(&ctx->lock);
	rs->busy = false;
	pthread_cond_signal(&ctx->relay_free);
	pthread_mutex_unlock(&ctx->lock);
}

/* The set's streams and events on dev (made on first use); dev is current. */
static cudaError_t relay_prepare(struct relay_set *rs, int dev, uint32_t lanes)
{
	cudaError_t e = cudaSuccess;

	for (uint32_t k = 0; k < lanes && e == cudaSuccess; k++) {
		if (!rs->s[dev][k])
			e = cudaStreamCreateWithFlags(&rs->s[dev][k], cudaStreamNonBlocking);
		if (e == cudaSuccess && !rs->link[dev][k])
			e = cudaEventCreateWithFlags(&rs->link[dev][k], cudaEventDisableTiming);
		if (e == cudaSuccess && !rs->done[dev][k])
			e = cudaEventCreateWithFlags(
				&rs->done[dev][k], cudaEventDisableTiming | cudaEventBlockingSync);
	}
	return e;
}

/* Check the hops: distinct devices in range, each fed from the source or an earlier hop. */
static int relay_check(const struct rgaps_relay_hop *hops, uint32_t nhops)
{
	uint64_t seen = 0;

	if (nhops > RGAPS_MEM_MAX_DEVICES)
		return -EINVAL;
	for (uint32_t i = 0; i < nhops; i++) {
		int32_t d = hops[i].device;

		if (d < 0 || d >= CUDA_MAX_DEVICES || (seen & (1ull << d)) || hops[i].from < -1 ||
		    hops[i].from >= (int32_t)i)
			return -EINVAL;
		seen |= 1ull << d;
	}
	return 0;
}

/* Does some hop feed another? (Else there is nothing to pipeline.) */
static bool relay_chained(const struct rgaps_relay_hop *hops, uint32_t nhops)
{
	for (uint32_t i = 0; i < nhops; i++)
		if (hops[i].from >= 0)
			return true;
	return false;
}

/*
 * Queue piece j ([off, off + len)) on every hop, on lane j % lanes: its copy
 * waits for the same lane of the hop it is fed from, which recorded piece j
 * just before.
 */
static cudaError_t relay_queue_piece(struct relay_set *rs, const uint8_t *src,
				     const struct rgaps_relay_hop *hops, uint32_t nhops,
				     uint32_t lane, size_t off, size_t len, uint32_t *failed_p)
{
	cudaError_t e = cudaSuccess;

	for (uint32_t i = 0; i < nhops && e == cudaSuccess; i++) {
		const struct rgaps_relay_hop *h = &hops[i];
		const uint8_t *from = h->from < 0 ? src : (const uint8_t *)hops[h->from].dst;
		cudaStream_t s = rs->s[h->device][lane];

		e = cudaSetDevice(h->device);
		if (e == cudaSuccess && h->from >= 0)
			e = cudaStreamWaitEvent(s, rs->link[hops[h->from].device][lane], 0);
		if (e == cudaSuccess)
			e = cudaMemcpyAsync((uint8_t *)h->dst + off, from + off, len,
					    cudaMemcpyDefault, s);
		if (e == cudaSuccess)
			e = cudaEventRecord(rs->link[h->device][lane], s);
		if (e != cudaSuccess)
			*failed_p = i;
	}
	return e;
}

/*
 * Wait for a done event: poll (a sleep costs its wake-up, 50-100 us, on every
 * replica) for as long as a relay of a large message takes, then sleep.
 */
#define RELAY_SPIN_NS (50ull * 1000 * 1000)

static cudaError_t relay_wait(struct cuda_ctx *ctx, cudaEvent_t ev)
{
	uint64_t until = mono_ns() + (ctx->spin_ns > RELAY_SPIN_NS ? ctx->spin_ns : RELAY_SPIN_NS);
	cudaError_t e;

	while ((e = cudaEventQuery(ev)) == cudaErrorNotReady && mono_ns() < until)
		;
	return e == cudaErrorNotReady ? cudaEventSynchronize(ev) : e;
}

static int cuda_copy_relay(void *vctx, const void *src, size_t n,
			   const struct rgaps_relay_hop *hops, uint32_t nhops, size_t piece,
			   void (*whole)(void *arg, uint32_t hop), void *arg)
{
	struct cuda_ctx *ctx = vctx;
	uint32_t lanes = ctx->relay_lanes, failed = nhops, i = 0, k;
	struct relay_set *rs;
	cudaError_t e = cudaSuccess;
	int old = -1, r = 0;

	if (!piece || relay_check(hops, nhops))
		return -EINVAL;
	if (!nhops)
		return 0;
	if (piece < (n + ctx->relay_pieces - 1) / ctx->relay_pieces)
		piece = (n + ctx->relay_pieces - 1) / ctx->relay_pieces;
	if (!relay_chained(hops, nhops))
		piece = n ? n : 1; /* nothing to overlap: one copy per hop moves fastest */
	if (!__atomic_exchange_n(&ctx->relay_logged, true, __ATOMIC_RELAXED))
		plog(ctx, LOG_INFO,
		     "cuda: GPU-to-GPU relays copy in pieces of at least %zu bytes "
		     "(at most %llu per message), %u lane%s per hop",
		     piece, (unsigned long long)ctx->relay_pieces, lanes, lanes == 1 ? "" : "s");
	rs = relay_set_get(ctx);
	if (!rs)
		return -ENOMEM;
	if (cudaGetDevice(&old) != cudaSuccess)
		old = -1;
	for (i = 0; i < nhops && e == cudaSuccess; i++) {
		e = cudaSetDevice(hops[i].device);
		if (e == cudaSuccess)
			e = relay_prepare(rs, hops[i].device, lanes);
	}
	if (e != cudaSuccess) {
		r = rt_fail(ctx, "relay streams and events", e);
		goto out; /* nothing queued */
	}
	for (size_t off = 0, j = 0; off < n && e == cudaSuccess; off += piece, j++)
		e = relay_queue_piece(rs, src, hops, nhops, (uint32_t)(j % lanes), off,
				      RGAPS_MIN_SZ(piece, n - off), &failed);
	for (i = 0; i < nhops && e == cudaSuccess; i++) {
		e = cudaSetDevice(hops[i].device);
		for (k = 0; k < lanes && e == cudaSuccess; k++)
			e = cudaEventRecord(rs->done[hops[i].device][k], rs->s[hops[i].device][k]);
		if (e != cudaSuccess)
			failed = i;
	}
	for (i = 0; i < nhops && e == cudaSuccess; i++) {
		for (k = 0; k < lanes && e == cudaSuccess; k++)
			e = relay_wait(ctx, rs->done[hops[i].device][k]);
		if (e == cudaSuccess)
			whole(arg, i);
		else
			failed = i;
	}
	if (e != cudaSuccess) {
		char what[96];

		/* Nothing of it may run on after we return: the caller reuses the blocks. */
		for (i = 0; i < nhops; i++)
			for (k = 0; k < lanes; k++)
				if (rs->s[hops[i].device][k])
					cudaStreamSynchronize(rs->s[hops[i].device][k]);
		snprintf(what, sizeof(what), "relay copy into GPU %d (hop %u of %u)",
			 failed < nhops ? (int)hops[failed].device : -1, failed, nhops);
		r = rt_fail(ctx, what, e);
	}
out:
	if (old >= 0)
		cudaSetDevice(old);
	relay_set_put(ctx, rs);
	return r;
}

/* ---------------------------------------------------------------- pinning */

static int cuda_host_register(void *vctx, void *ptr, size_t n)
{
	cudaError_t e = cudaHostRegister(ptr, n, cudaHostRegisterPortable);

	return e == cudaSuccess ? 0 : rt_fail(vctx, "cudaHostRegister", e);
}

static int cuda_host_unregister(void *vctx, void *ptr)
{
	cudaError_t e = cudaHostUnregister(ptr);

	return e == cudaSuccess ? 0 : rt_fail(vctx, "cudaHostUnregister", e);
}

static int cuda_numa_node(void *vctx, int32_t device)
{
	char pci[32];

	return gpu_numa_node(device, pci, sizeof(pci));
}

/* ---------------------------------------------------------------- several devices */

/*
 * NVLink or PCIe: NVML knows (nvmlDeviceGetP2PStatus with the NVLink index),
 * when the driver ships it; it is opened here for the question and closed
 * again, never linked. Its few declarations are copied from nvml.h, whose
 * types and values are stable (NVML_P2P_CAPS_INDEX_NVLINK is 2, OK is 0).
 */
typedef struct nvml_device *nvml_device_t;
struct nvml_api {
	void *dl;
	int (*init)(void);
	int (*shutdown)(void);
	int (*by_pci)(const char *pci, nvml_device_t *dev);
	int (*p2p)(nvml_device_t a, nvml_device_t b, int index, int *status);
};
#define NVML_P2P_CAPS_INDEX_NVLINK 2
#define NVML_P2P_STATUS_OK 0

static bool nvml_open(struct nvml_api *n)
{
	memset(n, 0, sizeof(*n));
	n->dl = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!n->dl)
		return false;
	*(void **)&n->init = dlsym(n->dl, "nvmlInit_v2");
	*(void **)&n->shutdown = dlsym(n->dl, "nvmlShutdown");
	*(void **)&n->by_pci = dlsym(n->dl, "nvmlDeviceGetHandleByPciBusId_v2");
	*(void **)&n->p2p = dlsym(n->dl, "nvmlDeviceGetP2PStatus");
	if (!n->init || !n->shutdown || !n->by_pci || !n->p2p || n->init() != 0) {
		dlclose(n->dl);
		n->dl = NULL;
		return false;
	}
	return true;
}

static void nvml_close(struct nvml_api *n)
{
	if (n->dl) {
		n->shutdown();
		dlclose(n->dl);
		n->dl = NULL;
	}
}

static int cuda_topology(void *vctx, struct rgaps_mem_topology *t)
{
	struct cuda_ctx *ctx = vctx;
	nvml_device_t nd[RGAPS_MEM_MAX_DEVICES] = { 0 };
	struct nvml_api nvml;
	bool have_nvml;
	int count = 0, drv_version = 0;
	cudaError_t e;

	t->ndevices = 0;
	snprintf(t->how, sizeof(t->how), "none");
	if (cudaDriverGetVersion(&drv_version) != cudaSuccess || drv_version == 0)
		return 0; /* no driver: no device (probe says so in words) */
	e = cudaGetDeviceCount(&count);
	if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0)) {
		cudaGetLastError();
		return 0;
	}
	if (e != cudaSuccess)
		return rt_fail(ctx, "cudaGetDeviceCount", e);
	if (count > RGAPS_MEM_MAX_DEVICES) {
		plog(ctx, LOG_WARN, "cuda: %d devices visible; only the first %d are served", count,
		     RGAPS_MEM_MAX_DEVICES);
		count = RGAPS_MEM_MAX_DEVICES;
	}
	t->ndevices = (uint32_t)count;
	for (int i = 0; i < count; i++) {
		e = cudaDeviceGetPCIBusId(t->pci[i], (int)sizeof(t->pci[i]), i);
		if (e != cudaSuccess) {
			rt_fail(ctx, "cudaDeviceGetPCIBusId", e);
			t->pci[i][0] = 0;
		}
		for (char *c = t->pci[i]; *c; c++)
			*c = (char)tolower((unsigned char)*c);
	}
	have_nvml = nvml_open(&nvml);
	for (int i = 0; have_nvml && i < count; i++)
		if (!t->pci[i][0] || nvml.by_pci(t->pci[i], &nd[i]) != 0)
			nd[i] = NULL;
	for (int i = 0; i < count; i++) {
		for (int j = 0; j < count; j++) {
			struct rgaps_mem_link *l = &t->link[i][j];
			int can = 0, rank = -1, atomics = 0, st = -1;

			memset(l, 0, sizeof(*l));
			l->rank = -1;
			if (i == j) {
				l->kind = RGAPS_MEM_LINK_SELF;
				l->rank = 0;
				continue;
			}
			/* Can i map j's memory? (cudaDeviceCanAccessPeer(&can, device, peer)) */
			e = cudaDeviceCanAccessPeer(&can, i, j);
			if (e != cudaSuccess) {
				rt_fail(ctx, "cudaDeviceCanAccessPeer", e);
				can = 0;
			}
			if (!can) {
				l->kind = RGAPS_MEM_LINK_NONE;
				continue;
			}
			if (cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, i, j) !=
			    cudaSuccess)
				rank = -1;
			if (cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, i,
						      j) != cudaSuccess)
				atomics = 0;
			cudaGetLastError();
			l->rank = (int8_t)(rank < -1 ? -1 : rank > 127 ? 127 : rank);
			l->atomics = atomics != 0;
			if (nd[i] && nd[j] && nvml.p2p(nd[i], nd[j], NVML_P2P_CAPS_INDEX_NVLINK, &st) == 0)
				l->kind = st == NVML_P2P_STATUS_OK ? RGAPS_MEM_LINK_NVLINK :
								     RGAPS_MEM_LINK_PCIE;
			else /* without NVML: native atomics between GPUs come with NVLink */
				l->kind = atomics ? RGAPS_MEM_LINK_NVLINK : RGAPS_MEM_LINK_PCIE;
		}
	}
	snprintf(t->how, sizeof(t->how), "%s",
		 have_nvml ? "CUDA peer attributes, NVLink from NVML" :
			     "CUDA peer attributes (no NVML: NVLink assumed where native atomics are)");
	nvml_close(&nvml);
	return 0;
}

/*
 * Open a mapped pool to another device. VMM: cuMemSetAccess for that device
 * (what the issue measured: without it a kernel on GPU 1 reading a GPU 0 pool
 * faults with Xid 31, and cudaDeviceEnablePeerAccess does not help, as it
 * covers cudaMalloc memory only). The device's primary context is made
 * current first, so that its page tables exist. cudaIpc mappings have no such
 * call: refused, and rgapsd does not offer peer access for such pools.
 */
static int cuda_pool_grant(void *vctx, struct rgaps_mem_region *region, int32_t device,
			   uint32_t flags)
{
	struct cuda_ctx *ctx = vctx;
	struct cuda_pool *p = region->priv;
	bool write = flags & RGAPS_MEM_GRANT_WRITE;
	CUmemAccessDesc acc;
	char why[200];
	int can = 0, old, r;
	cudaError_t ce;
	CUresult e;

	if (!p)
		return -EINVAL;
	if (write && p->read_only) {
		plog(ctx, LOG_ERROR, "cuda: a read-only pool mapping cannot be opened for writing "
				     "to GPU %d", (int)device);
		return -EPERM;
	}
	r = check_device(device, why, sizeof(why));
	if (r) {
		plog(ctx, LOG_ERROR, "cuda: cannot open a pool to GPU %d: %s", (int)device, why);
		return r;
	}
	if (device == p->device)
		return 0; /* mapped for its own device already */
	if (p->mode != CUDA_FLAG_VMM) {
		plog(ctx, LOG_ERROR,
		     "cuda: the pool on GPU %d is shared by cudaIpc, which cannot be opened to "
		     "GPU %d (use gpu_fanout \"replicate\", or a driver with VMM fd export)",
		     p->device, (int)device);
		return -ENOTSUP;
	}
	ce = cudaDeviceCanAccessPeer(&can, device, p->device);
	if (ce != cudaSuccess || !can) {
		if (ce != cudaSuccess)
			rt_fail(ctx, "cudaDeviceCanAccessPeer", ce);
		plog(ctx, LOG_ERROR, "cuda: GPU %d has no peer access to GPU %d: it cannot read the "
				     "pool there", (int)device, p->device);
		return -ENODEV;
	}
	r = enter_device(ctx, device, &old);
	if (r)
		return r;
	ce = cudaFree(NULL); /* the device's primary context, before its mappings */
	if (ce != cudaSuccess) {
		r = rt_fail(ctx, "cudaFree(NULL) (context of the granted device)", ce);
		leave_device(device, old);
		return r;
	}
	memset(&acc, 0, sizeof(acc));
	acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = device;
	acc.flags = write ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_READ;
	e = drv.MemSetAccess(p->va, p->size, &acc, 1);
	leave_device(device, old);
	if (e != CUDA_SUCCESS) {
		char what[96];

		snprintf(what, sizeof(what), "cuMemSetAccess (GPU %d %s on GPU %d's pool)",
			 (int)device, write ? "read-write" : "read-only", p->device);
		return drv_fail(ctx, what, e);
	}
	plog(ctx, LOG_DEBUG, "cuda: pool at 0x%llx on GPU %d opened %s to GPU %d",
	     (unsigned long long)p->va, p->device, write ? "read-write" : "read-only", (int)device);
	return 0;
}

/* ---------------------------------------------------------------- stream order */

static int cuda_copy_stream(void *vctx, void *dst, const void *src, size_t n, void *stream)
{
	cudaError_t e;

	if (n == 0)
		return 0;
	e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, (cudaStream_t)stream);
	return e == cudaSuccess ? 0 : rt_fail(vctx, "cudaMemcpyAsync on the caller's stream", e);
}

static int cuda_stream_sync(void *vctx, void *stream)
{
	cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);

	return e == cudaSuccess ? 0 : rt_fail(vctx, "cudaStreamSynchronize", e);
}

struct cuda_fence {
	cudaEvent_t ev;
	int device; /* where it was created or opened (records must be on this device's streams) */
};

/* A CUDA event is the driver's: its handle names it, no shared state word is needed. */
static int cuda_fence_create(void *vctx, int32_t device, uint32_t flags, void **fence_p,
			     uint8_t handle[RGAPS_FENCE_HANDLE_LEN], uint64_t *state)
{
	struct cuda_ctx *ctx = vctx;
	struct cuda_fence *f;
	cudaIpcEventHandle_t h;
	cudaError_t e;
	int old = -1, r;

	_Static_assert(sizeof(h) == RGAPS_FENCE_HANDLE_LEN, "a CUDA IPC event handle is 64 bytes");
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	if (device < 0 && cudaGetDevice(&device) != cudaSuccess)
		device = 0;
	f->device = device;
	r = enter_device(ctx, device, &old);
	if (r)
		goto err_free;
	e = cudaEventCreateWithFlags(&f->ev, cudaEventDisableTiming |
						     ((flags & RGAPS_FENCE_IPC) ? cudaEventInterprocess :
										  0));
	if (e != cudaSuccess) {
		r = rt_fail(ctx, "cudaEventCreateWithFlags (fence)", e);
		goto err_leave;
	}
	if (flags & RGAPS_FENCE_IPC) {
		e = cudaIpcGetEventHandle(&h, f->ev);
		if (e != cudaSuccess) {
			r = rt_fail(ctx, "cudaIpcGetEventHandle", e);
			cudaEventDestroy(f->ev);
			goto err_leave;
		}
		memcpy(handle, &h, sizeof(h));
	} else if (handle) {
		memset(handle, 0, RGAPS_FENCE_HANDLE_LEN);
	}
	leave_device(device, old);
	*fence_p = f;
	return 0;

err_leave:
	leave_device(device, old);
err_free:
	free(f);
	return r;
}

static int cuda_fence_open(void *vctx, const uint8_t handle[RGAPS_FENCE_HANDLE_LEN],
			   const uint64_t *state, void **fence_p)
{
	struct cuda_fence *f = calloc(1, sizeof(*f));
	cudaIpcEventHandle_t h;
	cudaError_t e;

	if (!f)
		return -ENOMEM;
	if (cudaGetDevice(&f->device) != cudaSuccess)
		f->device = -1;
	memcpy(&h, handle, sizeof(h));
	/* Opened on the calling thread's current device; waits may come from any device. */
	e = cudaIpcOpenEventHandle(&f->ev, h);
	if (e != cudaSuccess) {
		free(f);
		return rt_fail(vctx, "cudaIpcOpenEventHandle (another process's fence)", e);
	}
	*fence_p = f;
	return 0;
}

static void cuda_fence_destroy(void *vctx, void *fence)
{
	struct cuda_fence *f = fence;
	cudaError_t e;

	if (!f)
		return;
	/* Waits already queued on it keep what they captured (CUDA releases it after). */
	e = cudaEventDestroy(f->ev);
	if (e != cudaSuccess)
		rt_fail(vctx, "cudaEventDestroy (fence)", e);
	free(f);
}

static int cuda_fence_record(void *vctx, void *fence, void *stream)
{
	struct cuda_fence *f = fence;
	cudaError_t e = cudaEventRecord(f->ev, (cudaStream_t)stream);

	if (e == cudaSuccess)
		return 0;
	if (e == cudaErrorInvalidResourceHandle) {
		/* The usual cause: a stream of another device than the fence's. */
		plog((struct cuda_ctx *)vctx, LOG_ERROR,
		     "cuda: cudaEventRecord failed: %s: is the stream on GPU %d, where the fence "
		     "was made? (stream-ordered calls take streams of the handle's GPU)",
		     cudaGetErrorString(e), f->device);
		return -EXDEV;
	}
	return rt_fail(vctx, "cudaEventRecord (fence)", e);
}

static int cuda_fence_query(void *vctx, void *fence)
{
	struct cuda_fence *f = fence;
	cudaError_t e = cudaEventQuery(f->ev);

	if (e == cudaSuccess)
		return 0;
	if (e == cudaErrorNotReady)
		return -EAGAIN; /* not an error, and not recorded as the thread's last one */
	return rt_fail(vctx, "cudaEventQuery (fence)", e);
}

static int cuda_fence_wait(void *vctx, void *fence, void *stream)
{
	struct cuda_fence *f = fence;
	cudaError_t e = cudaStreamWaitEvent((cudaStream_t)stream, f->ev, 0);

	return e == cudaSuccess ? 0 : rt_fail(vctx, "cudaStreamWaitEvent (fence)", e);
}

static int cuda_mem_info(void *vctx, int32_t device, uint64_t *free_p, uint64_t *total_p)
{
	struct cuda_ctx *ctx = vctx;
	size_t free_b = 0, total_b = 0;
	char why[200];
	cudaError_t e;
	int old, r;

	r = check_device(device, why, sizeof(why));
	if (r)
		return r;
	r = enter_device(ctx, device, &old);
	if (r)
		return r;
	e = cudaMemGetInfo(&free_b, &total_b);
	leave_device(device, old);
	if (e != cudaSuccess)
		return rt_fail(ctx, "cudaMemGetInfo", e);
	*free_p = free_b;
	*total_p = total_b;
	return 0;
}

static const struct rgaps_memory_ops cuda_ops = {
	.init = cuda_init,
	.fini = cuda_fini,
	.probe = cuda_probe,
	.pool_create = cuda_pool_create,
	.pool_import = cuda_pool_import,
	.pool_release = cuda_pool_release,
	.copy = cuda_copy,
	.host_register = cuda_host_register,
	.host_unregister = cuda_host_unregister,
	.copy_async = cuda_copy_async,
	.numa_node = cuda_numa_node,
	.topology = cuda_topology,
	.pool_grant = cuda_pool_grant,
	.copy_stream = cuda_copy_stream,
	.stream_sync = cuda_stream_sync,
	.fence_create = cuda_fence_create,
	.fence_open = cuda_fence_open,
	.fence_destroy = cuda_fence_destroy,
	.fence_record = cuda_fence_record,
	.fence_query = cuda_fence_query,
	.fence_wait = cuda_fence_wait,
	.mem_info = cuda_mem_info,
	.copy_relay = cuda_copy_relay,
	.copy_during = cuda_copy_during,
};

RGAPS_PLUGIN_EXPORT const struct rgaps_plugin rgaps_plugin = {
	.abi_version = RGAPS_PLUGIN_ABI_VERSION,
	.struct_size = sizeof(struct rgaps_plugin),
	.kind = RGAPS_PLUGIN_MEMORY,
	.ops_size = sizeof(struct rgaps_memory_ops),
	.name = "cuda",
	.description = "CUDA device memory shared by VMM fd export (cudaIpc fallback)",
	.ops = &cuda_ops,
	.priority = 20, /* "auto" prefers it to host (10) */
};
