/*
 * NUMA placement (see numa.h). MPOL_PREFERRED rather than MPOL_BIND: memory
 * on another node is slower, memory that cannot be had at all is worse; the
 * caller reports what it got.
 */
#include "numa.h"

#include <errno.h>
#include <linux/mempolicy.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

int rt_numa_place(void *addr, size_t len, int node, unsigned *on_p, unsigned *sampled_p)
{
	unsigned long mask[16] = { 0 };
	long page = sysconf(_SC_PAGESIZE);
	size_t step;
	unsigned on = 0, n = 0;

	if (node < 0 || node >= (int)(sizeof(mask) * 8))
		return -EINVAL;
	mask[node / (8 * sizeof(long))] = 1ul << (node % (8 * sizeof(long)));
	if (syscall(SYS_mbind, addr, len, MPOL_PREFERRED, mask, sizeof(mask) * 8, 0) != 0)
		return -errno;
	/* Fault every page in under the policy (write: anonymous pages get a frame). */
	if (madvise(addr, len, MADV_POPULATE_WRITE) != 0) {
		for (size_t off = 0; off < len; off += (size_t)page)
			((volatile char *)addr)[off] = 0;
	}
	/* About 64 pages sampled, evenly. */
	step = len / 64 > (size_t)page ? (len / 64) / (size_t)page * (size_t)page : (size_t)page;
	for (size_t off = 0; off < len; off += step, n++) {
		int where = -1;

		if (syscall(SYS_get_mempolicy, &where, NULL, 0, (char *)addr + off,
			    MPOL_F_NODE | MPOL_F_ADDR) == 0 && where == node)
			on++;
	}
	*on_p = on;
	*sampled_p = n;
	return 0;
}
