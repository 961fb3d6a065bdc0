#!/bin/bash
# The gpusum stage on a GPU (docs/GPU.md, "The gpusum stage"): the check of a
# whole message by a CUDA kernel on the receiving host's GPU.
#  1. gpu-stage-check: the kernel equals the CPU sum on every path (sizes,
#     alignments, message offsets); a message with a flipped byte in device
#     memory is refused; the check's time per 64 MiB and 1 GiB message; the
#     small pieces again under compute-sanitizer memcheck where it is.
#  2. Two rgapsd on this machine as two hosts over tcp on 127.0.0.1, every
#     topic on "memory": "cuda" with "stages": ["gpusum"], 4 MiB chunks:
#     64 MiB and 1 GiB messages from gpu-pub on A reach gpu-sub on B, which
#     verifies every byte in place; B checked every message before publishing
#     it (peers.stages[] before_publish runs, none failed) and its time per
#     message is printed from B's stats.
#  3. A spoils one chunk on the wire (the test-only fault transport,
#     RGAPSD_FAULT=chunk:6): B's kernel catches it, the message is dropped and
#     reported to the subscriber (gpu-sub: gaps 1), every other one verified.
# Skips (exit 77) with the reason when there is no GPU or the plugin is not
# built; a probe that fails otherwise fails.
# Run: RGAPS_BUILD=<build dir> bash tests/gpu/gpu_stage.sh
. "$(dirname "$0")/../integration/lib.sh"
GPU_PUB="$RGAPS_BUILD/tests/gpu/gpu-pub"
GPU_SUB="$RGAPS_BUILD/tests/gpu/gpu-sub"
CHECK="$RGAPS_BUILD/tests/gpu/gpu-stage-check"
FAULT_TCP="$RGAPS_BUILD/tests/fault/transport-tcp.so"
PLUGINS=${RGAPS_PLUGIN_DIR:-$RGAPS_BUILD/plugins}
[ -x "$GPU_PUB" ] || skip "$GPU_PUB not built (no nvcc at configure time)"
[ -e "$PLUGINS/stage-gpusum.so" ] || skip "no gpusum stage plugin in $PLUGINS (not built)"
require "a GPU" "$GPU_PUB" --probe
[ -e "$PLUGINS/transport-tcp.so" ] || fail "no tcp transport plugin in $PLUGINS"
for f in "$CHECK" "$FAULT_TCP"; do
	[ -e "$f" ] || fail "$f not built"
done
KEEPALIVE_MS=${KEEPALIVE_MS:-1000} # pinning rings stalls a loop for a moment
. "$(dirname "$0")/../integration/remote_lib.sh"
# ---- 1. the kernel alone
"$CHECK" "$PLUGINS" | tee "$T/check.out"
[ "${PIPESTATUS[0]}" = 0 ] || fail "gpu-stage-check: $(grep FAIL "$T/check.out" | head -3)"
ok "the kernel equals the CPU sum; $(grep -o 'size=1GiB ms=[0-9.]* GBps=[0-9.]*' "$T/check.out")"
if command -v compute-sanitizer >/dev/null; then
	compute-sanitizer --tool memcheck --error-exitcode 1 "$CHECK" "$PLUGINS" --small >"$T/memcheck.out" 2>&1 ||
		fail "compute-sanitizer memcheck on the kernel: $(grep -m3 -E 'ERROR|Invalid|FAIL' "$T/memcheck.out")"
	ok "compute-sanitizer memcheck: $(grep -m1 'ERROR SUMMARY' "$T/memcheck.out")"
else
	echo "(no compute-sanitizer in PATH: the memcheck of the kernel skipped)"
fi

# ---- 2. two daemons, cuda topics with the stage
host A 0; host B 1
mkdir -p "$T/topics.d" "$T/fault"
printf '{ "max_message_size": "64MiB", "pool_size": "1GiB" }\n' >"$T/topics.d/g64.json"
printf '{ "max_message_size": "1GiB", "pool_size": "3GiB" }\n' >"$T/topics.d/g1g.json"
# The fault transport in a folder of its own beside copies of the other plugins
# (a build tree copied to a GPU machine keeps no links), the real tcp plugin named.
for p in "$PLUGINS"/*.so; do
	[ "${p##*/}" = transport-tcp.so ] || cp -L "$p" "$T/fault/"
done
cp -L "$FAULT_TCP" "$T/fault/transport-tcp.so"
export RGAPSD_FAULT_TCP=$(readlink -f "$PLUGINS/transport-tcp.so") FAULT_PLUGIN_DIR=$T/fault
DAEMON_EXTRA="\"topics_dir\": \"$T/topics.d\","
DEF=', "memory": "cuda", "stages": ["gpusum"], "chunk_size": "4MiB", "ring_size": "256MiB"'
start_host A "$DEF"
start_host B "$DEF"
wait_until 15 peer_up A B || fail "A-B session did not come up: $(tail -5 "$T/A.log")"
ok "two daemons up over tcp on 127.0.0.1, cuda topics with the gpusum stage"

run_topic() { # TOPIC SIZE COUNT [SUB_COUNT --allow-gaps]
	local topic=$1 size=$2 n=$3
	BG_TIMEOUT=300 bg "s$topic" env RGAPS_SOCKET=${SOCK[B]} "$GPU_SUB" $topic --count ${4:-$n} --timeout 280 ${5:-}
	wait_until 20 knows_sub A B $topic || fail "A never learned that B subscribes to $topic"
	BG_TIMEOUT=300 bg "p$topic" env RGAPS_SOCKET=${SOCK[A]} "$GPU_PUB" $topic --count $n --size $size \
		--timeout 120 # (its --wait-subscribers counts local subscribers only)
	wait_ok "p$topic"
	wait_ok "s$topic"
}
checked() { # TOPIC N LABEL: B checked N messages on its GPU, none refused; their time
	local topic=$1 n=$2 ns
	wait_until 10 eval 'test "$(stage_count B $topic before_publish runs)" = "$n"' ||
		fail "B checked $(stage_count B $topic before_publish runs) messages of $topic, expected $n"
	[ "$(stage_count B $topic before_publish failed)" = 0 ] || fail "B refused a message of $topic"
	on B "$RGAPS" stats $topic --json | flat | grep -q '"memory":"cuda"' || fail "$topic on B is not in GPU memory"
	ns=$(stage_count B $topic before_publish ns)
	echo "RESULT gpustage size=$3 messages=$n check_ms=$(awk -v t="$ns" -v n="$n" 'BEGIN { printf "%.3f", t / n / 1e6 }')"
	ok "$3: $n messages verified in place by gpu-sub on B and checked by B's kernel before publishing; $(awk -v t="$ns" -v n="$n" 'BEGIN { printf "%.3f", t / n / 1e6 }') ms a message (B's stats)"
}
run_topic g64 64MiB 20
grep -q "received 20 verified 20 mismatched 0 gaps 0 drops 0" "$T/sg64.out" || fail "g64: $(tail -2 "$T/sg64.out")"
checked g64 20 64MiB
run_topic g1g 1GiB 4
grep -q "received 4 verified 4 mismatched 0 gaps 0 drops 0" "$T/sg1g.out" || fail "g1g: $(tail -2 "$T/sg1g.out")"
checked g1g 4 1GiB

# ---- 3. a chunk spoiled on the wire
stop_host A
RGAPSD_FAULT=chunk:6 start_host A "$DEF"
wait_until 15 peer_up A B || fail "A (corrupting) did not come up"
before=$(stage_count B g64 before_publish failed)
run_topic g64 64MiB 20 19 --allow-gaps # gpu-sub counts what it receives
grep -q "fault injection: spoiling record 6" "$T/A.log" || fail "A corrupted nothing: $(grep -i fault "$T/A.log")"
grep -q "received 19 verified 19 mismatched 0 gaps 1 drops 0" "$T/sg64.out" || fail "g64 with a fault: $(tail -2 "$T/sg64.out")"
[ "$(stage_count B g64 before_publish failed)" = $((before + 1)) ] ||
	fail "B refused $(stage_count B g64 before_publish failed) messages of g64 in all, expected $((before + 1))"
why=$(grep -o "gpusum mismatch in message [0-9]* (67108864 bytes, summed on GPU [0-9]*): 0x[0-9a-f]*, the sender's 0x[0-9a-f]*" "$T/B.log" | head -1)
[ -n "$why" ] || fail "B did not say why it dropped the message: $(grep -i gpusum "$T/B.log" | tail -2)"
ok "a spoiled chunk caught by B's kernel: $(tail -1 "$T/sg64.out" | cut -d' ' -f1-10); B: $why"

for h in A B; do
	grep -E "hostile|staging copy failed|copy into the pool failed|cuda: .*failed|gpusum: " "$T/$h.log" &&
		fail "$h logged errors"
done
for h in A B; do stop_host $h; done
ok "both daemons stopped cleanly"
