/*
 * Leveled logging to stderr. Each record is formatted into one buffer and
 * written with one write(2), so lines from several threads or processes do not
 * interleave mid-line.
 */
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

int rgaps__log_level = RGAPS_LOG_INFO;
static char log_prefix[32] = "rgaps";

static const char *const level_names[] = { "error", "warn", "info", "debug", "trace" };

int rgaps__log_level_parse(const char *name)
{
	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(level_names); i++)
		if (strcasecmp(name, level_names[i]) == 0)
			return (int)i;
	return -EINVAL;
}

const char *rgaps__log_level_name(int level)
{
	if (level < 0 || (size_t)level >= RGAPS_ARRAY_SIZE(level_names))
		return "?";
	return level_names[level];
}

void rgaps__log_set_prefix(const char *prefix)
{
	snprintf(log_prefix, sizeof(log_prefix), "%s", prefix);
}

void rgaps__log(int level, const char *file, int line, const char *fmt, ...)
{
	char buf[1024];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	int n, saved = errno;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(buf, sizeof(buf), "%02d:%02d:%02d.%06ld %s[%d] %s: ", tm.tm_hour, tm.tm_min,
		     tm.tm_sec, ts.tv_nsec / 1000, log_prefix, (int)getpid(),
		     rgaps__log_level_name(level));
	if (level >= RGAPS_LOG_DEBUG && n < (int)sizeof(buf))
		n += snprintf(buf + n, sizeof(buf) - (size_t)n, "(%s:%d) ", file, line);
	va_start(ap, fmt);
	if (n < (int)sizeof(buf))
		n += vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof(buf) - 1)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	(void)!write(STDERR_FILENO, buf, (size_t)n);
	errno = saved;
}

bool rgaps__ratelimit_ok(struct rgaps_ratelimit *rl, uint64_t now_ms, uint32_t burst,
			uint32_t interval_ms, uint64_t *suppressed_p)
{
	if (now_ms - rl->window_start_ms >= interval_ms || now_ms < rl->window_start_ms) {
		rl->window_start_ms = now_ms;
		rl->in_window = 0;
	}
	if (rl->in_window >= burst) {
		rl->suppressed++;
		rl->suppressed_total++;
		return false;
	}
	rl->in_window++;
	*suppressed_p = rl->suppressed;
	rl->suppressed = 0;
	return true;
}

void rgaps__log_limited(struct rgaps_ratelimit *rl, int level, const char *file, int line,
			const char *fmt, ...)
{
	struct timespec ts;
	uint64_t now, suppressed = 0;
	char msg[900];
	va_list ap;
	bool ok;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
	/* Counted whatever the log level, so the statistics hold at any level. */
	ok = rgaps__ratelimit_ok(rl, now, RGAPS_LOG_BURST, RGAPS_LOG_INTERVAL_MS, &suppressed);
	if (!ok)
		level = RGAPS_LOG_DEBUG;
	if (level > rgaps__log_level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (suppressed)
		rgaps__log(level, file, line, "%s [%" PRIu64 " similar record(s) before this one "
			   "were suppressed]", msg, suppressed);
	else
		rgaps__log(level, file, line, "%s", msg);
}
