/*
 * The tools' shared helpers (tool.h). Sizes and futexes are rgaps' own
 * (src/common): one implementation, reached from the tools only through here.
 */
#include "tool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/common/config.h"
#include "../../src/common/futex.h"
#include "rgaps_build_config.h"

const char tool_version[] = RGAPS_VERSION;
const char tool_topic_name_rule[] = RGAPS_TOPIC_NAME_RULE;

volatile sig_atomic_t tool_interrupted;

static void on_signal(int sig)
{
	tool_interrupted = sig;
}

void tool_catch_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: waits end with EINTR */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

uint64_t tool_now_ns(clockid_t clk)
{
	return rgaps_now_ns(clk);
}

double tool_now_s(void)
{
	return (double)rgaps_now_ns(CLOCK_MONOTONIC) / 1e9;
}

void tool_sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

int tool_parse_size(const char *s, uint64_t *v_p)
{
	return rgaps__parse_size(s, v_p);
}

void tool_format_size(uint64_t v, char *buf, size_t len)
{
	rgaps__format_size(v, buf, len);
}

int tool_futex_wait(uint32_t *word, uint32_t val, int64_t timeout_ns)
{
	return rgaps_futex_wait(word, val, timeout_ns);
}

void tool_futex_wake_all(uint32_t *word)
{
	rgaps_futex_wake_all(word);
}

int tool_futex_wait_any(uint32_t *const *words, const uint32_t *seen, uint32_t n,
			int64_t timeout_ns)
{
	struct futex_waitv w[TOOL_WAIT_ANY_MAX];

	if (n == 0 || n > TOOL_WAIT_ANY_MAX || timeout_ns < 0)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		rgaps_waitv_set(&w[i], words[i], seen[i]);
	return rgaps_futex_waitv(w, n, timeout_ns);
}

const char *tool_default_socket(void)
{
	return RGAPS_DEFAULT_SOCKET;
}

const char *tool_socket(void)
{
	const char *env = getenv("RGAPS_SOCKET");

	return env && *env ? env : RGAPS_DEFAULT_SOCKET;
}
