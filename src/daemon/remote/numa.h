/*
 * Placement of host memory that a device DMAs to or from (staging buffers,
 * receive rings) on the device's NUMA node, and the check that it happened.
 * Raw mbind/get_mempolicy system calls: no libnuma dependency.
 */
#ifndef RGAPS_COMMON_NUMA_H
#define RGAPS_COMMON_NUMA_H

#include <stddef.h>

/*
 * Prefer node for [addr, addr + len) (page aligned, not yet touched), fault the
 * pages in, then count where they landed. Returns 0 and writes how many of the
 * sampled pages are on node (*on_p) out of *sampled_p, or a negative errno
 * (-ENOSYS: no NUMA support in this kernel).
 */
int rt_numa_place(void *addr, size_t len, int node, unsigned *on_p, unsigned *sampled_p);

#endif
