/*
 * Logging for rgapsd and the tools: leveled, one line per record, to stderr
 * (journald picks it up under systemd). The library logs only when
 * RGAPS_LOG_LEVEL is set, so an application's stderr stays its own.
 */
#ifndef RGAPS_COMMON_LOG_H
#define RGAPS_COMMON_LOG_H

#include <stdbool.h>
#include <stdint.h>

#include "util.h"

enum rgaps_log_level {
	RGAPS_LOG_ERROR,
	RGAPS_LOG_WARN,
	RGAPS_LOG_INFO,
	RGAPS_LOG_DEBUG,
	RGAPS_LOG_TRACE,
};

extern int rgaps__log_level;

/* Parse "error|warn|info|debug|trace"; returns the level or -EINVAL. */
int rgaps__log_level_parse(const char *name);
const char *rgaps__log_level_name(int level);
void rgaps__log_set_prefix(const char *prefix);
void rgaps__log(int level, const char *file, int line, const char *fmt, ...) RGAPS_PRINTF(4, 5);

#define rgaps_log(lvl, ...)                                                   \
	do {                                                                  \
		if ((lvl) <= rgaps__log_level)                                \
			rgaps__log((lvl), __FILE__, __LINE__, __VA_ARGS__);   \
	} while (0)
#define rgaps_error(...) rgaps_log(RGAPS_LOG_ERROR, __VA_ARGS__)
#define rgaps_warn(...) rgaps_log(RGAPS_LOG_WARN, __VA_ARGS__)
#define rgaps_info(...) rgaps_log(RGAPS_LOG_INFO, __VA_ARGS__)
#define rgaps_debug(...) rgaps_log(RGAPS_LOG_DEBUG, __VA_ARGS__)
#define rgaps_trace(...) rgaps_log(RGAPS_LOG_TRACE, __VA_ARGS__)

/*
 * A log rate limit for records that a client or a peer can cause at will
 * (refused requests, refused connections): at most `burst` records per
 * `interval_ms`; the ones over it are counted, and the first record allowed
 * after them says how many were suppressed. Zero-initialised is ready; one
 * thread only.
 */
struct rgaps_ratelimit {
	uint64_t window_start_ms;
	uint32_t in_window;
	uint64_t suppressed;	   /* since the last record written */
	uint64_t suppressed_total; /* since start, for statistics */
};

/*
 * true: write the record (and, when *suppressed_p > 0, say that many were
 * suppressed before it); false: count it and write nothing (or write it at
 * debug level only). now_ms: any monotonic clock in milliseconds.
 */
bool rgaps__ratelimit_ok(struct rgaps_ratelimit *rl, uint64_t now_ms, uint32_t burst,
			uint32_t interval_ms, uint64_t *suppressed_p);

/*
 * Log at level while rl allows (RGAPS_LOG_BURST records per
 * RGAPS_LOG_INTERVAL_MS), else at debug level only; the first record allowed
 * after suppressed ones says how many there were.
 */
#define RGAPS_LOG_BURST 5
#define RGAPS_LOG_INTERVAL_MS 10000
void rgaps__log_limited(struct rgaps_ratelimit *rl, int level, const char *file, int line,
			const char *fmt, ...) RGAPS_PRINTF(5, 6);
#define rgaps_log_limited(rl, lvl, ...) rgaps__log_limited((rl), (lvl), __FILE__, __LINE__, __VA_ARGS__)

#endif
