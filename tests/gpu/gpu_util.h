/*
 * C helpers of the GPU test programs (gpu_util.c, built by the C compiler so
 * that it can use src/common as the rest of rgaps does): the host reference
 * of the payload pattern, size parsing, daemon queries, clocks.
 */
#ifndef RGAPS_TESTS_GPU_UTIL_H
#define RGAPS_TESTS_GPU_UTIL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* rgaps_pattern_word() of tools/lib/pattern.h: the reference the kernels must match. */
uint64_t gpu_ref_pattern_word(uint64_t counter, uint64_t k);
/* rgaps_pattern_check(): -1 if buf holds the pattern for its header's counter. */
int64_t gpu_ref_pattern_check(const void *buf, size_t size, uint64_t *counter_p);
/* "4MiB", "1GiB", "4096" -> bytes; 0 on success. */
int gpu_parse_size(const char *s, uint64_t *v_p);
/* Client subscribers attached to topic (rgapsd's own excluded), from its "stats" reply. */
int gpu_topic_subscribers(const char *topic);
/* Pool bytes in use on topic ("stats"), or a negative errno. */
int64_t gpu_topic_pool_used(const char *topic);
uint64_t gpu_now_ns(void); /* CLOCK_MONOTONIC: one clock for every process of the host */

#ifdef __cplusplus
}
#endif

#endif
