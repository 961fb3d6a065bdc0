/*
 * Which GPUs the caller sees and works on, learned without starting CUDA: a
 * process that uses a GPU has the driver (libcuda.so.1) loaded; one that does
 * not, has not, and stays free of CUDA (host-memory topics, tools). The driver
 * is asked only if it is loaded already (RTLD_NOLOAD).
 *
 * GPUs are named between processes by PCI address, never by ordinal: a
 * process's ordinals depend on its CUDA_VISIBLE_DEVICES (a container or a job
 * scheduler shows it only its own GPU, as its GPU 0). The library tells
 * rgapsd the PCI address of its GPU and of every GPU it sees, and maps the
 * PCI addresses in rgapsd's replies back to its own ordinals (docs/GPU.md,
 * "GPU identity").
 */
#include "client.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The driver API's few types, as cuda.h defines them (stable ABI). */
typedef int cu_result;
typedef int cu_device;
typedef struct cu_ctx_st *cu_context;

struct driver {
	void *dl;
	cu_result (*init)(unsigned int);
	cu_result (*count)(int *);
	cu_result (*get)(cu_device *, int);
	cu_result (*bus_id)(char *, int, cu_device);
	cu_result (*ctx_current)(cu_context *);
	cu_result (*ctx_device)(cu_device *);
};

/* The process's driver, if it loaded one; false otherwise (no CUDA here). */
static bool driver_open(struct driver *drv)
{
	memset(drv, 0, sizeof(*drv));
	drv->dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
	if (!drv->dl)
		return false;
	*(void **)&drv->init = dlsym(drv->dl, "cuInit");
	*(void **)&drv->count = dlsym(drv->dl, "cuDeviceGetCount");
	*(void **)&drv->get = dlsym(drv->dl, "cuDeviceGet");
	*(void **)&drv->bus_id = dlsym(drv->dl, "cuDeviceGetPCIBusId");
	*(void **)&drv->ctx_current = dlsym(drv->dl, "cuCtxGetCurrent");
	*(void **)&drv->ctx_device = dlsym(drv->dl, "cuCtxGetDevice");
	return true;
}

static void driver_close(struct driver *drv)
{
	dlclose(drv->dl); /* drops only our reference: the process keeps its driver */
}

/* Every GPU the process sees, by its ordinal (a process that loaded CUDA uses it: cuInit is due). */
static void view_fill(struct driver *drv, struct rgaps__gpu_view *v)
{
	int n = 0;

	if (!drv->init || !drv->count || !drv->get || !drv->bus_id || drv->init(0) != 0 ||
	    drv->count(&n) != 0 || n <= 0)
		return;
	for (int i = 0; i < n && i < RGAPS_MEM_MAX_DEVICES; i++) {
		cu_device dev;

		if (drv->get(&dev, i) != 0 || drv->bus_id(v->pci[i], sizeof(v->pci[i]), dev) != 0) {
			v->n = 0; /* a partial list would misname GPUs: none */
			return;
		}
		for (char *c = v->pci[i]; *c; c++)
			*c = (char)tolower((unsigned char)*c);
		v->n = (uint32_t)i + 1;
	}
}

int rgaps__caller_gpus(int32_t *device_p, struct rgaps__gpu_view *v)
{
	struct driver drv;
	cu_context ctx = NULL;
	cu_device dev = -1;

	memset(v, 0, sizeof(*v));
	if (!driver_open(&drv))
		return -ENOENT; /* no CUDA in this process: no device */
	view_fill(&drv, v);
	if (*device_p < 0 && drv.ctx_current && drv.ctx_device && drv.ctx_current(&ctx) == 0 &&
	    ctx && drv.ctx_device(&dev) == 0 && dev >= 0)
		*device_p = dev;
	driver_close(&drv);
	return 0;
}

int32_t rgaps__gpu_local(const struct rgaps__gpu_view *v, const char *pci, int32_t ordinal)
{
	if (!pci || !pci[0] || !v->n)
		return ordinal; /* nothing to match by: the two processes number alike */
	for (uint32_t i = 0; i < v->n; i++)
		if (strcmp(v->pci[i], pci) == 0)
			return (int32_t)i;
	return -1;
}

const char *rgaps__gpu_pci(const struct rgaps__gpu_view *v, int32_t ordinal)
{
	return ordinal >= 0 && (uint32_t)ordinal < v->n ? v->pci[ordinal] : "";
}
