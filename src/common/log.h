/*
 * Logging for rgapsd and the tools: leveled, one line per record, to stderr
 * (journald picks it up under systemd). The library logs only when
 * RGAPS_LOG_LEVEL is set, so an application's stderr stays its own.
 */
#ifndef RGAPS_COMMON_LOG_H
#define RGAPS_COMMON_LOG_H

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

#endif
