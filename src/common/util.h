/*
 * Small helpers shared by rgapsd, librgaps and the plugins' build: compiler
 * attributes, the fatal invariant check, and arithmetic on sizes. Nothing here
 * allocates or logs except rgaps_require(), which aborts on a broken invariant
 * (never on bad input: input is checked and refused; CONTRIBUTING.md, "Style").
 */
#ifndef RGAPS_COMMON_UTIL_H
#define RGAPS_COMMON_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define RGAPS_EXPORT __attribute__((visibility("default")))
#define RGAPS_LIKELY(x) __builtin_expect(!!(x), 1)
#define RGAPS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define RGAPS_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define RGAPS_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define RGAPS_CONTAINER_OF(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))
#define RGAPS_MIN(a, b) ((a) < (b) ? (a) : (b))
#define RGAPS_MAX(a, b) ((a) > (b) ? (a) : (b))
#define RGAPS_ALIGN_UP(x, a) (((x) + ((a) - 1)) & ~((__typeof__(x))(a) - 1))
#define RGAPS_CACHELINE 64

/* Fatal check of an internal invariant. Not for input validation. */
#define rgaps_require(cond)                                                               \
	do {                                                                              \
		if (RGAPS_UNLIKELY(!(cond))) {                                            \
			fprintf(stderr, "rgaps: invariant failed at %s:%d (%s): %s\n",   \
				__FILE__, __LINE__, __func__, #cond);                     \
			abort();                                                          \
		}                                                                         \
	} while (0)

/*
 * Offset of the first "\u0000" escape in JSON text, or -1. cJSON decodes it
 * into a NUL inside its C strings, so everything after it in that key or value
 * would be silently cut off; the parsers of rgaps refuse such text instead.
 * Backslashes are only legal inside strings, so a scan of the escapes is exact.
 */
static inline ptrdiff_t rgaps_json_nul_escape(const char *s, size_t n)
{
	for (size_t i = 0; i + 1 < n; i++) {
		if (s[i] != '\\')
			continue;
		if (s[i + 1] == 'u' && i + 5 < n && s[i + 2] == '0' && s[i + 3] == '0' &&
		    s[i + 4] == '0' && s[i + 5] == '0')
			return (ptrdiff_t)i;
		i++; /* skip the escaped character: an escaped backslash before "u0000" is text */
	}
	return -1;
}

static inline int rgaps_is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

#endif
