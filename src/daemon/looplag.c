/*
 * The loop's lag probe (looplag.h): a timer that measures how late it fires.
 */
#include "looplag.h"

#include <time.h>

#include <cjson/cJSON.h>

#define RGAPSD_LAG_LOG_MS 500 /* a standstill this long is logged (rate-limited) */

static void on_probe(uv_timer_t *t)
{
	struct rgapsd_looplag *lag = t->data;
	uint64_t now = uv_hrtime(), late = now > lag->due_ns ? now - lag->due_ns : 0;

	if (late > RGAPSD_LAG_SLACK_MS * 1000000ull)
		lag->stalled_ns += late;
	lag->last_ns = late;
	if (late > lag->max_ns)
		lag->max_ns = late;
	rgaps_lathist_add(&lag->hist, late);
	if (late > RGAPSD_LAG_STALL_MS * 1000000ull)
		lag->stalls++;
	if (late >= RGAPSD_LAG_LOG_MS * 1000000ull)
		rgaps_log_limited(
			&lag->log_rl, RGAPS_LOG_WARN,
			"the loop stood still for %llu ms (a long piece of work on it, or "
			"rgapsd was not scheduled): timers, peers and clients waited",
			(unsigned long long)(late / 1000000));
	/* From now, not from the due time: a standstill is counted once, not again as
	 * the lateness of the probes that would have run inside it. */
	lag->due_ns = now + RGAPSD_LAG_PROBE_MS * 1000000ull;
	uv_timer_start(&lag->probe, on_probe, RGAPSD_LAG_PROBE_MS, 0);
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Before every poll: the CPU time since the last one is this turn's work. */
static void on_turn(uv_prepare_t *h)
{
	struct rgapsd_looplag *lag = h->data;
	uint64_t now = thread_cpu_ns(), cpu = now - lag->turn_cpu_ns;

	lag->turn_cpu_ns = now;
	rgaps_lathist_add(&lag->turn_cpu, cpu);
	if (cpu > lag->turn_cpu_max_ns)
		lag->turn_cpu_max_ns = cpu;
}

void rgapsd_looplag_start(uv_loop_t *loop, struct rgapsd_looplag *lag)
{
	*lag = (struct rgapsd_looplag){ 0 };
	uv_timer_init(loop, &lag->probe);
	lag->probe.data = lag;
	uv_unref((uv_handle_t *)&lag->probe); /* the probe alone never keeps the loop running */
	lag->due_ns = uv_hrtime() + RGAPSD_LAG_PROBE_MS * 1000000ull;
	uv_timer_start(&lag->probe, on_probe, RGAPSD_LAG_PROBE_MS, 0);
	uv_prepare_init(loop, &lag->turn);
	lag->turn.data = lag;
	uv_unref((uv_handle_t *)&lag->turn);
	lag->turn_cpu_ns = thread_cpu_ns();
	uv_prepare_start(&lag->turn, on_turn);
	lag->running = true;
}

void rgapsd_looplag_stop(struct rgapsd_looplag *lag)
{
	if (!lag->running)
		return;
	lag->running = false;
	uv_close((uv_handle_t *)&lag->probe, NULL);
	uv_close((uv_handle_t *)&lag->turn, NULL);
}

uint64_t rgapsd_looplag_stalled_ns(const struct rgapsd_looplag *lag)
{
	uint64_t now, late;

	if (!lag || !lag->running)
		return 0;
	now = uv_hrtime();
	late = now > lag->due_ns ? now - lag->due_ns : 0;
	return lag->stalled_ns + (late > RGAPSD_LAG_SLACK_MS * 1000000ull ? late : 0);
}

void rgapsd_looplag_stats(const struct rgapsd_looplag *lag, struct cJSON *obj)
{
	cJSON_AddNumberToObject(obj, "lag_ms", (double)lag->last_ns / 1e6);
	cJSON_AddNumberToObject(obj, "lag_p50_ms",
				(double)rgaps_lathist_quantile(&lag->hist, 0.5) / 1e6);
	cJSON_AddNumberToObject(obj, "lag_p99_ms",
				(double)rgaps_lathist_quantile(&lag->hist, 0.99) / 1e6);
	cJSON_AddNumberToObject(obj, "lag_max_ms", (double)lag->max_ns / 1e6);
	cJSON_AddNumberToObject(obj, "stalls", (double)lag->stalls);
	cJSON_AddNumberToObject(obj, "stalled_ms", (double)lag->stalled_ns / 1e6);
	cJSON_AddNumberToObject(obj, "probe_ms", RGAPSD_LAG_PROBE_MS);
	cJSON_AddNumberToObject(obj, "turns", (double)lag->turn_cpu.count);
	cJSON_AddNumberToObject(obj, "turn_cpu_p99_ms",
				(double)rgaps_lathist_quantile(&lag->turn_cpu, 0.99) / 1e6);
	cJSON_AddNumberToObject(obj, "turn_cpu_max_ms", (double)lag->turn_cpu_max_ns / 1e6);
}
