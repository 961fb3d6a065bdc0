/*
 * Which GPU the caller works on, learned without starting CUDA: a process
 * that uses a GPU has the driver (libcuda.so.1) loaded and a current context
 * on the thread that calls init; one that does not, has neither, and stays
 * free of CUDA (host-memory topics, tools). The driver is asked only if it is
 * loaded already (RTLD_NOLOAD), for the device of the current context and its
 * PCI address, which rgapsd uses to map the ordinal if the two processes
 * number devices differently (docs/GPU.md).
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

int rgaps__caller_device(int32_t *device_p, char *pci, size_t pcilen)
{
	void *dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
	cu_result (*get_current)(cu_context *);
	cu_result (*get_device)(cu_device *);
	cu_result (*bus_id)(char *, int, cu_device);
	cu_context ctx = NULL;
	cu_device dev = -1;
	int r = -ENOENT;

	if (pci && pcilen)
		pci[0] = 0;
	if (!dl)
		return -ENOENT; /* no CUDA in this process: no device */
	*(void **)&get_current = dlsym(dl, "cuCtxGetCurrent");
	*(void **)&get_device = dlsym(dl, "cuCtxGetDevice");
	*(void **)&bus_id = dlsym(dl, "cuDeviceGetPCIBusId");
	if (get_current && get_device && get_current(&ctx) == 0 && ctx &&
	    get_device(&dev) == 0 && dev >= 0) {
		*device_p = dev;
		if (pci && pcilen && bus_id && bus_id(pci, (int)pcilen, dev) == 0) {
			for (char *c = pci; *c; c++)
				*c = (char)tolower((unsigned char)*c);
		} else if (pci && pcilen) {
			pci[0] = 0;
		}
		r = 0;
	}
	dlclose(dl); /* drops only our reference: the process keeps its driver */
	return r;
}
