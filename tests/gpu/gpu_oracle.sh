#!/bin/bash
# gpu-sub's oracle (a CUDA kernel checks every byte in place; the order check of
# tools/lib/pattern.h on the host), fed wrong data of every kind by
# tests/oracle/oracle-pub through a topic on "memory": "cuda" (the publisher
# pushes from host memory: one H2D copy into the GPU pool). gpu-sub must count
# exactly the planted bad messages as mismatched, name the message and why, and
# exit 1; the control run must verify all 8. Skips (77) with the reason when
# there is no GPU; a probe that fails otherwise fails.
# Run: RGAPS_BUILD=<build dir> bash tests/gpu/gpu_oracle.sh
. "$(dirname "$0")/../integration/lib.sh"
GPU_PUB="$RGAPS_BUILD/tests/gpu/gpu-pub"
GPU_SUB="$RGAPS_BUILD/tests/gpu/gpu-sub"
ORACLE_PUB="$RGAPS_BUILD/tests/oracle/oracle-pub"
[ -x "$GPU_SUB" ] || skip "$GPU_SUB not built (no nvcc at configure time)"
require "a GPU" "$GPU_PUB" --probe
N=8 # messages per run; the fault is planted at message 4 (4101 bytes each)

# KIND MISMATCHED WHAT-GPU-SUB-MUST-SAY (an extended regular expression)
CASES=(
	"none 0 -"
	"body 1 seq 4 \(origin seq 4, 4101 bytes, counter 4\): 1 bad words, first at byte 2056$"
	"first 1 seq 4 \(origin seq 4, 4101 bytes, counter 4\): 1 bad words, first at byte 16$"
	"last 1 seq 4 \(origin seq 4, 4101 bytes, counter 4\): 1 bad words, first at byte 4096$"
	"counter 1 seq 4 \(origin seq 4, 4101 bytes, counter 1073741828\): 511 bad words, first at byte 16$"
	"size 1 seq 4 \(origin seq 4, 4101 bytes, counter 4\): 1 bad words, first at byte 8$"
	"torn 1 seq 4 \(origin seq 4, 4101 bytes, counter 4\): [0-9]+ bad words, first at byte 2048$"
	"duplicate 1 seq 4 \(origin seq 4, 4101 bytes\): counter 3: the payload of the message before it"
	"stale 1 seq 4 \(origin seq 4, 4101 bytes\): counter 1: an older payload \(stale\)"
	"reorder 2 seq 4 \(origin seq 4, 4101 bytes\): counter 5: a later payload"
	"skip 4 seq 4 \(origin seq 4, 4101 bytes\): counter 5: a later payload"
)

echo '{ "defaults": { "memory": "cuda", "pool_size": "64MiB", "max_message_size": "1MiB" } }' >"$T/rgapsd.json"
start_daemon --config "$T/rgapsd.json" --plugin-dir "$RGAPS_BUILD/plugins"
for c in "${CASES[@]}"; do
	read -r kind m what <<<"$c"
	want=1
	[ "$m" = 0 ] && want=0
	bg "s_$kind" "$GPU_SUB" "g_$kind" --count $N --timeout 60
	wait_until 30 grep -q "^attached to" "$T/s_$kind.out" || fail "$kind: gpu-sub did not attach: $(cat "$T/s_$kind.out")"
	"$ORACLE_PUB" "g_$kind" "$kind" --count $N >"$T/p_$kind.out" 2>&1 ||
		fail "oracle-pub $kind: $(cat "$T/p_$kind.out")"
	wait_rc "s_$kind" $want
	expect_sub "s_$kind" received=$N verified=$((N - m)) mismatched="$m"
	if [ "$m" != 0 ]; then
		grep -qE "^gpu-sub: $what" "$T/s_$kind.out" ||
			fail "$kind: gpu-sub does not say '$what': $(grep '^gpu-sub:' "$T/s_$kind.out")"
		[ "$(grep -c '^gpu-sub: seq' "$T/s_$kind.out")" = "$m" ] ||
			fail "$kind: not one line per mismatch: $(grep '^gpu-sub:' "$T/s_$kind.out")"
	fi
	ok "gpu-sub, $kind: $m of $N mismatched"
done
grep -q "topic 'g_none' created: memory cuda" "$T/rgapsd.log" || fail "the topics are not on the cuda backend"
stop_daemon
