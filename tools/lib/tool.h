/*
 * The small library the rgaps tools share (rgaps, rgaps-top, rgaps-bench):
 * what they need beside the public API (include/rgaps/rgaps.h) and the stats
 * schema (stats.h), written once. Nothing here is part of librgaps.
 *
 *   - signals: SIGINT, SIGTERM and SIGHUP set tool_interrupted, without SA_RESTART, so
 *     that a blocking wait (a take, a sleep) returns and the tool can finish;
 *   - clocks and sleeps;
 *   - size strings ("256MiB"), parsed and formatted as rgapsd does;
 *   - futex waits between the processes of a benchmark, on one word or on several;
 *   - where librgaps finds rgapsd ($RGAPS_SOCKET, else the default socket);
 *   - the version, and the rule for topic names, as rgapsd states them.
 */
#ifndef RGAPS_TOOLS_TOOL_H
#define RGAPS_TOOLS_TOOL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define TOOL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TOOL_MAX(a, b) ((a) > (b) ? (a) : (b))
#define TOOL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define TOOL_PRINTF(f, a) __attribute__((format(printf, f, a)))

/* The signal that came (SIGINT, SIGTERM or SIGHUP) once tool_catch_signals() ran; else 0. */
extern volatile sig_atomic_t tool_interrupted;
void tool_catch_signals(void);

/* Nanoseconds of clock clk (CLOCK_MONOTONIC, CLOCK_REALTIME). */
uint64_t tool_now_ns(clockid_t clk);
/* Seconds of CLOCK_MONOTONIC. */
double tool_now_s(void);
/* Sleep ms milliseconds, less when a signal arrives. */
void tool_sleep_ms(int ms);

/* "256MiB", "4 KiB", "1G", "4096" (binary units; docs/CONFIG.md). 0 or -EINVAL. */
int tool_parse_size(const char *s, uint64_t *v_p);
/* "64MiB" / "4KiB" / "1000B", exact. */
void tool_format_size(uint64_t v, char *buf, size_t len);

/* Wait while *word == val, at most timeout_ns (< 0: no bound). 0, -ETIMEDOUT, -EINTR. */
int tool_futex_wait(uint32_t *word, uint32_t val, int64_t timeout_ns);
void tool_futex_wake_all(uint32_t *word);
/*
 * Wait until one of n words (at most TOOL_WAIT_ANY_MAX) differs from its seen value or
 * is woken, at most timeout_ns (>= 0): futex_waitv, as librgaps waits on several
 * publishers. The index woken, -EAGAIN (a word had moved), -ETIMEDOUT, -EINTR, -ENOSYS
 * (Linux before 5.16), -EINVAL (n out of range).
 */
#define TOOL_WAIT_ANY_MAX 8
int tool_futex_wait_any(uint32_t *const *words, const uint32_t *seen, uint32_t n,
			int64_t timeout_ns);

/* "rgaps 0.2.0"'s number, and the rule for topic names in words. */
extern const char tool_version[];
extern const char tool_topic_name_rule[];

/* The socket librgaps connects to: $RGAPS_SOCKET when set and not empty, else the default. */
const char *tool_socket(void);
/* The default control socket of rgapsd ("/run/rgaps/rgapsd.sock"). */
const char *tool_default_socket(void);

#endif
