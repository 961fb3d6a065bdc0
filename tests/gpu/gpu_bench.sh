#!/bin/bash
# Runs gpu-bench (tests/gpu/gpu_bench.cu) against its own rgapsd: topic gbench
# on "memory": "cuda" and hbench on "memory": "host" (the shared-memory
# baselines), each a 4 GiB pool taking messages up to 1 GiB. Extra arguments go
# to gpu-bench (e.g. --sizes 4MiB,64MiB --subs 1,8). Skips (77) without a GPU;
# a probe that fails otherwise fails.
# Run: RGAPS_BUILD=<build dir> bash tests/gpu/gpu_bench.sh
. "$(dirname "$0")/../integration/lib.sh"
GPU_BENCH="$RGAPS_BUILD/tests/gpu/gpu-bench"
[ -x "$GPU_BENCH" ] || skip "$GPU_BENCH not built (no nvcc at configure time)"
require "a GPU" "$RGAPS_BUILD/tests/gpu/gpu-pub" --probe

mkdir -p "$T/topics.d"
echo '{ "topics_dir": "topics.d" }' >"$T/rgapsd.json"
# The host baseline's pool is host memory, allocated whole at attach: smaller where little is free.
hpool=4GiB
avail=$(($(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo) << 10))
if [ "$avail" -lt $((12 << 30)) ]; then
	hpool=2GiB
	echo "note: $((avail >> 20)) MiB of memory available: host pool $hpool"
fi
for t in gbench:cuda:4GiB hbench:host:$hpool; do
	IFS=: read -r name mem pool <<<"$t"
	printf '{ "memory": "%s", "pool_size": "%s", "max_message_size": "1GiB", "queue_depth": 64, "block_timeout_ms": 10000 }\n' \
		"$mem" "$pool" >"$T/topics.d/$name.json"
done
start_daemon -c "$T/rgapsd.json" --plugin-dir "$RGAPS_BUILD/plugins"
rc=0
timeout -k 5 "${BENCH_TIMEOUT:-540}" "$GPU_BENCH" --gpu-topic gbench --host-topic hbench "$@" || rc=$?
grep "cuda:" "$T/rgapsd.log" | sed 's/^/rgapsd: /' || true
stop_daemon
exit $rc
