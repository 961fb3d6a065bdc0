#!/bin/bash
# The GPU suite (docs/GPU.md): rgapsd with topics forced onto "memory": "cuda".
#  1. 1 publisher x 8 subscriber processes, every byte of every message checked
#     in place by a CUDA kernel in each subscriber; push (one D2D copy) and loan
#     (zero copies, the kernel writes into the pool).
#  2. SIGKILL of a subscriber holding GPU messages: pool occupancy back to idle.
#  3. The cudaIpc fallback (RGAPS_CUDA_IPC=1 in rgapsd) with 4 subscribers.
#  4. compute-sanitizer (memcheck) on gpu-pub and gpu-sub, if it is installed.
#  5. Clear refusals: device out of range, pool larger than the free GPU memory,
#     no device visible (and "auto" falling back to host, saying why).
# Skips (exit 77) with the reason when there is no GPU; a probe that fails
# otherwise fails the test.
# Run: RGAPS_BUILD=<build dir> bash tests/gpu/gpu_suite.sh
. "$(dirname "$0")/../integration/lib.sh"
GPU_PUB="$RGAPS_BUILD/tests/gpu/gpu-pub"
GPU_SUB="$RGAPS_BUILD/tests/gpu/gpu-sub"
SANITIZER=${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}
[ -x "$GPU_PUB" ] || skip "$GPU_PUB not built (no nvcc at configure time)"
require "a GPU" "$GPU_PUB" --probe

mkdir -p "$T/topics.d"
echo '{ "topics_dir": "topics.d" }' >"$T/rgapsd.json"
topic() { # NAME POOL MAXMSG
	printf '{ "memory": "cuda", "pool_size": "%s", "max_message_size": "%s", "queue_depth": 64 }\n' \
		"$2" "$3" >"$T/topics.d/$1.json"
}
topic gfan 1GiB 16MiB
topic gkill 256MiB 4MiB
topic gipc 256MiB 8MiB
topic gsan 64MiB 1MiB
start_daemon -c "$T/rgapsd.json" --plugin-dir "$RGAPS_BUILD/plugins"

# 1. fan-out with kernel verification
for mode in push loan; do
	for i in 1 2 3 4 5 6 7 8; do bg "sub$i" "$GPU_SUB" gfan --count 300 --timeout 100; done
	extra=; [ $mode = loan ] && extra=--loan
	bg pub "$GPU_PUB" gfan --count 300 --size 16-16MiB --wait-subscribers 8 --timeout 60 $extra
	wait_ok pub
	for i in 1 2 3 4 5 6 7 8; do
		wait_ok "sub$i"
		expect_sub "sub$i" received=300 verified=300 mismatched=0 gaps=0 drops=0
	done
	ok "$mode: 8 subscribers verified every byte of 300 GPU messages in place ($(tail -1 "$T/pub.out"))"
done
grep -q "topic 'gfan' created: memory cuda" "$T/rgapsd.log" || fail "gfan is not on the cuda backend"
grep -q "cuda: pool .*gfan.* shared by VMM fd" "$T/rgapsd.log" || fail "gfan pool is not a VMM pool"
grep -m1 "NUMA" "$T/rgapsd.log" | sed 's/^/   /' || true
[ "$(pool_used gfan)" = 0 ] || fail "gfan pool holds $(pool_used gfan) bytes after everyone left"
ok "VMM pool, GPU pool empty after the run"

# "auto" picks cuda where a GPU is usable (a host-memory source: one H2D copy)
"$RGAPS" pub gauto --count 3 --size 64KiB >/dev/null || fail "publish to an auto topic"
grep -q "topic 'gauto': memory auto -> cuda" "$T/rgapsd.log" || fail "auto did not pick cuda"
ok "memory auto -> cuda; push from host memory into the GPU pool works"

# 2. a subscriber killed while holding GPU messages
BG_TIMEOUT=60 bg holder "$GPU_SUB" gkill --hold 8 --timeout 50
bg steady "$GPU_SUB" gkill --count 40 --timeout 50
"$GPU_PUB" gkill --count 40 --size 1MiB --wait-subscribers 2 --timeout 30 >"$T/kpub.out" 2>&1 ||
	fail "publish to gkill: $(cat "$T/kpub.out")"
wait_until 20 grep -q "holding 8" "$T/holder.out" || fail "holder did not take 8: $(cat "$T/holder.out")"
wait_ok steady
expect_sub steady received=40 verified=40 mismatched=0 gaps=0
used=$(pool_used gkill)
[ "$used" -ge $((8 * 1024 * 1024)) ] || fail "pool should hold the 8 held messages, has $used"
kill9 holder
wait_until 20 pool_is gkill 0 || fail "GPU pool not reclaimed after SIGKILL: $(pool_used gkill)"
ok "SIGKILLed subscriber's 8 GPU messages ($used bytes) reclaimed, pool idle"
"$GPU_PUB" gkill --count 5 --size 1MiB >/dev/null || fail "gkill unusable after the kill"

# 3. the cudaIpc fallback
stop_daemon
RGAPS_CUDA_IPC=1 start_daemon -c "$T/rgapsd.json" --plugin-dir "$RGAPS_BUILD/plugins"
for i in 1 2 3 4; do bg "isub$i" "$GPU_SUB" gipc --count 100 --timeout 60; done
bg ipub "$GPU_PUB" gipc --count 100 --size 16-8MiB --wait-subscribers 4 --timeout 40
wait_ok ipub
for i in 1 2 3 4; do
	wait_ok "isub$i"
	expect_sub "isub$i" received=100 verified=100 mismatched=0 gaps=0 drops=0
done
grep -q "cuda: pool .*gipc.* shared by cudaIpc handle" "$T/rgapsd.log" ||
	fail "gipc pool did not use the IPC fallback"
ok "cudaIpc fallback: 4 subscribers verified 100 messages"

# 4. compute-sanitizer
if [ -x "$SANITIZER" ]; then
	CS=("$SANITIZER" --tool memcheck --error-exitcode 99 --print-limit 20)
	BG_TIMEOUT=180 bg csub "${CS[@]}" "$GPU_SUB" gsan --count 20 --timeout 170
	BG_TIMEOUT=180 bg cpub "${CS[@]}" "$GPU_PUB" gsan --count 20 --size 16-1MiB \
		--wait-subscribers 1 --timeout 170
	wait_ok cpub
	wait_ok csub
	for f in cpub csub; do
		grep -q "ERROR SUMMARY: 0 errors" "$T/$f.out" || fail "$f: $(tail -5 "$T/$f.out")"
	done
	expect_sub csub received=20 verified=20 mismatched=0
	ok "compute-sanitizer memcheck: gpu-pub and gpu-sub clean"
else
	skip_part "$SANITIZER not found: gpu-pub and gpu-sub were not run under compute-sanitizer"
fi

# 5. clear refusals: device ordinal out of range, not enough GPU memory, no device visible
printf '{ "memory": "cuda", "device": 9 }\n' >"$T/topics.d/gdev9.json"
printf '{ "memory": "cuda", "pool_size": "1TiB" }\n' >"$T/topics.d/ghuge.json"
stop_daemon
start_daemon -c "$T/rgapsd.json" --plugin-dir "$RGAPS_BUILD/plugins"
"$RGAPS" pub gdev9 --count 1 --size 1KiB >/dev/null 2>&1 && fail "a topic on device 9 attached"
grep -q "device ordinal 9 out of range: 1 CUDA device visible" "$T/rgapsd.log" ||
	grep -q "device ordinal 9 out of range" "$T/rgapsd.log" || fail "no reason for device 9"
"$RGAPS" pub ghuge --count 1 --size 1KiB >/dev/null 2>&1 && fail "a 1 TiB GPU pool was created"
grep -q "topic 'ghuge': pool refused: GPU 0 has [0-9.]* GiB free of [0-9.]* GiB ([0-9]* bytes): a 1 TiB pool does not fit" \
	"$T/rgapsd.log" || fail "no clear error for a pool larger than the GPU: $(grep ghuge "$T/rgapsd.log" | tail -n 3)"
stop_daemon
CUDA_VISIBLE_DEVICES= start_daemon -c "$T/rgapsd.json" --plugin-dir "$RGAPS_BUILD/plugins"
"$RGAPS" pub gauto2 --count 1 --size 1KiB >/dev/null || fail "auto topic without a visible GPU"
# (the plugin registry says why cuda cannot serve the topic, then what it picked)
grep -q "topic 'gauto2': memory auto: cuda not usable: no CUDA device visible" "$T/rgapsd.log" ||
	fail "auto did not say why cuda is not usable: $(grep gauto2 "$T/rgapsd.log")"
grep -q "topic 'gauto2': memory auto -> host" "$T/rgapsd.log" ||
	fail "auto did not fall back to host: $(grep gauto2 "$T/rgapsd.log")"
grep -E "out of range|pool refused|auto: cuda not usable|auto -> host" "$T/rgapsd.log" | sed 's/^/   /' || true
ok "clear refusals (device out of range, GPU memory, no device) and auto -> host fallback"

stop_daemon
ok "clean shutdown"
