/*
 * The GPU memory reserve (gpu_reserve, docs/CONFIG.md): a cuda pool is made
 * only when the GPU keeps at least the reserve free after it, so that a flood
 * of topics cannot take the memory the GPU's other work needs. A pure function,
 * unit-tested without a GPU; members.c asks the memory plugin (mem_info) for
 * the numbers just before it creates a pool.
 */
#ifndef RGAPSD_GPU_RESERVE_H
#define RGAPSD_GPU_RESERVE_H

#include <stddef.h>
#include <stdint.h>

/*
 * May a pool of pool bytes be made on GPU device, which has free_b of total_b
 * bytes free, keeping reserve bytes free? 0, or -ENOMEM with the numbers in err
 * ("GPU 0 has 1.5 GiB free of 80 GiB: a 1 GiB pool would leave 512 MiB, less than
 * the 1 GiB gpu_reserve").
 */
int rgapsd_gpu_reserve_check(int32_t device, uint64_t free_b, uint64_t total_b, uint64_t pool,
			     uint64_t reserve, char *err, size_t errlen);

#endif
