/* The GPU memory reserve: gpu_reserve.h. */
#include "gpu_reserve.h"

#include <errno.h>
#include <stdio.h>

/* "1.5 GiB", "512 MiB", "4 KiB", "100 bytes": sizes for people. */
static const char *human(uint64_t n, char *buf, size_t len)
{
	static const char *const units[] = { "bytes", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)n;
	unsigned u = 0;

	while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu bytes", (unsigned long long)n);
	else
		snprintf(buf, len, "%.4g %s", v, units[u]);
	return buf;
}

int rgapsd_gpu_reserve_check(int32_t device, uint64_t free_b, uint64_t total_b, uint64_t pool,
			     uint64_t reserve, char *err, size_t errlen)
{
	char f[32], t[32], p[32], l[32], r[32];

	/* No overflow: pool + reserve could wrap where free_b - pool cannot. */
	if (free_b >= pool && free_b - pool >= reserve)
		return 0;
	if (free_b < pool)
		snprintf(err, errlen, "GPU %d has %s free of %s (%llu bytes): a %s pool does not "
			 "fit, and gpu_reserve keeps %s free besides", (int)device,
			 human(free_b, f, sizeof(f)), human(total_b, t, sizeof(t)),
			 (unsigned long long)free_b, human(pool, p, sizeof(p)),
			 human(reserve, r, sizeof(r)));
	else
		snprintf(err, errlen, "GPU %d has %s free of %s (%llu bytes): a %s pool would "
			 "leave %s, less than gpu_reserve (%s)", (int)device,
			 human(free_b, f, sizeof(f)), human(total_b, t, sizeof(t)),
			 (unsigned long long)free_b, human(pool, p, sizeof(p)),
			 human(free_b - pool, l, sizeof(l)), human(reserve, r, sizeof(r)));
	return -ENOMEM;
}
