#!/bin/bash
# End-to-end GPU benchmark of the remote path (docs/BENCHMARKS.md (GPU sections)): two
# rgapsd on this machine as two hosts over the TCP transport on 127.0.0.1,
# every topic on "memory": "cuda", and gpu-e2e (tests/gpu/gpu_e2e.cu)
# publishing on A to subscribers on B:
#   e2eon   chunking on, 4 MiB chunks (pipelined), receive ring 256 MiB
#   e2eoff  chunking off (whole messages), receive ring 2176 MiB: a 1 GiB
#           message and its header fit half of it
# plus the all-baseline path and DP1, all in one run. Extra arguments go to
# gpu-e2e (e.g. --sizes 4MiB,64MiB --subs 1,8 --reps 10,10). The stats of both
# daemons are printed after the run. Skips (77) without a GPU; a probe that
# fails otherwise fails. DAEMON_EXTRA: more daemon keys for both, each followed
# by a comma (e.g. '"copy_spin_us": 0,').
# Run: RGAPS_BUILD=<build dir> bash tests/gpu/gpu_e2e.sh
. "$(dirname "$0")/../integration/lib.sh"
GPU_E2E="$RGAPS_BUILD/tests/gpu/gpu-e2e"
[ -x "$GPU_E2E" ] || skip "$GPU_E2E not built (no nvcc at configure time)"
require "a GPU" "$RGAPS_BUILD/tests/gpu/gpu-pub" --probe
[ -e "$RGAPS_BUILD/plugins/transport-tcp.so" ] || fail "no tcp transport plugin in $RGAPS_BUILD/plugins"
KEEPALIVE_MS=${KEEPALIVE_MS:-2000} # pinning a 2 GiB ring stalls a loop for a moment
. "$(dirname "$0")/../integration/remote_lib.sh"

host A 0; host B 1
mkdir -p "$T/topics.d"
common='"memory": "cuda", "pool_size": "4GiB", "max_message_size": "1GiB", "queue_depth": 16, "block_timeout_ms": 20000'
echo "{ $common, \"chunking\": true, \"chunk_size\": \"4MiB\", \"ring_size\": \"256MiB\" }" >"$T/topics.d/e2eon.json"
echo "{ $common, \"chunking\": false, \"ring_size\": \"2176MiB\" }" >"$T/topics.d/e2eoff.json"
for name in A B; do
	peers=""
	for h in "${!PORT[@]}"; do
		[ "$h" = "$name" ] || peers="$peers${peers:+, }\"${ADDR[$h]}:${PORT[$h]}\""
	done
	cat >"$T/$name.json" <<JSON
{ ${DAEMON_EXTRA:-} "listen": "${ADDR[$name]}:${PORT[$name]}", "peers": [ $peers ], "key_file": "$KEY",
  "keepalive_ms": $KEEPALIVE_MS, "topics_dir": "$T/topics.d", "defaults": { "transport": "tcp" } }
JSON
	"$RGAPSD" --config "$T/$name.json" --socket "${SOCK[$name]}" --instance "$INSTANCE$name" \
		--log-level "${RGAPS_TEST_LOG:-info}" >>"$T/$name.log" 2>&1 &
	DPID[$name]=$!; PIDS+=(${DPID[$name]})
	wait_until 20 host_answers $name || fail "$name did not come up: $(tail -5 "$T/$name.log")"
done
wait_until 15 peer_up A B || fail "A-B session did not come up: $(tail -5 "$T/A.log")"

rc=0
RGAPS_SOCKET=${SOCK[A]} timeout -k 5 "${BENCH_TIMEOUT:-540}" "$GPU_E2E" --sub-socket "${SOCK[B]}" \
	--topic-on e2eon --topic-off e2eoff "$@" || rc=$?
echo
echo "== daemon counters after the run =="
for h in A B; do
	echo "-- $h: topics"
	s=$(hstats $h)
	grep -o '"name":"e2eo[nf]*","memory":"[a-z]*"[^{]*"from_peers":{[^}]*}' <<<"$s" | sed 's/^/   /' || true
	echo "-- $h: forwarders and rings"
	grep -o '"forwarders":\[[^]]*\]' <<<"$s" | sed 's/^/   /' || true
	grep -o '"copy_spin":{[^}]*}' <<<"$s" | sed 's/^/   /' || true
	grep -o '{"topic":"e2eo[nf]*","direction":"[a-z]*"[^}]*}' <<<"$s" | sed 's/^/   /' || true
done
grep -hE "staging|not pinned|cuda:|hostile|refused|failed" "$T/A.log" "$T/B.log" | sed 's/^/log: /' | head -40 || true
for h in A B; do stop_host $h; done
exit $rc
