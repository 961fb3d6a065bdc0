#!/bin/bash
# The remote path on a GPU (docs/GPU.md): two rgapsd on this machine as two
# hosts over the TCP transport on 127.0.0.1, every topic forced onto
# "memory": "cuda" on both.
#  1. gpu-pub on A pushes device buffers (4 KiB to 64 MiB, chunked in 4 MiB);
#     4 gpu-sub on B verify every byte in place in B's GPU pool with a CUDA
#     kernel, and one gpu-sub on A does the same at once (local + remote).
#     A must have staged the chunks D2H (forwarders[].staged, staged_chunks),
#     B must have landed every message once (topics[].from_peers.messages).
#  2. The same with chunking off (whole messages, the thesis order).
#  3. SIGKILL of a subscriber on B holding 8 GPU messages that came from A:
#     B's GPU pool back to idle.
# Skips (exit 77) with the reason when there is no GPU; a probe that fails
# otherwise fails the test.
# Run: RGAPS_BUILD=<build dir> bash tests/gpu/gpu_remote.sh
. "$(dirname "$0")/../integration/lib.sh"
GPU_PUB="$RGAPS_BUILD/tests/gpu/gpu-pub"
GPU_SUB="$RGAPS_BUILD/tests/gpu/gpu-sub"
[ -x "$GPU_PUB" ] || skip "$GPU_PUB not built (no nvcc at configure time)"
require "a GPU" "$GPU_PUB" --probe
[ -e "$RGAPS_BUILD/plugins/transport-tcp.so" ] || fail "no tcp transport plugin in $RGAPS_BUILD/plugins"
# Pinning rings and staging buffers stalls a daemon's loop for a moment: keep
# the sessions from declaring each other dead meanwhile.
KEEPALIVE_MS=${KEEPALIVE_MS:-1000}
. "$(dirname "$0")/../integration/remote_lib.sh"

COUNT=${GPU_REMOTE_COUNT:-300}
host A 0; host B 1
mkdir -p "$T/topics.d"
# Per-topic files, the same on both hosts (the sender's chunking decides).
printf '{ "chunking": false, "max_message_size": "16MiB", "ring_size": "64MiB" }\n' \
	>"$T/topics.d/gwhole.json"
# start_host of remote_lib.sh, plus a topics_dir
gstart() { # NAME DEFAULTS
	local name=$1 peers=""
	for h in "${!PORT[@]}"; do
		[ "$h" = "$name" ] || peers="$peers${peers:+, }\"${ADDR[$h]}:${PORT[$h]}\""
	done
	cat >"$T/$name.json" <<JSON
{ "listen": "${ADDR[$name]}:${PORT[$name]}", "peers": [ $peers ], "key_file": "$KEY",
  "keepalive_ms": $KEEPALIVE_MS, "topics_dir": "$T/topics.d",
  "defaults": { "transport": "tcp" $2 } }
JSON
	"$RGAPSD" --config "$T/$name.json" --socket "${SOCK[$name]}" --instance "$INSTANCE$name" \
		--log-level "${RGAPS_TEST_LOG:-info}" >>"$T/$name.log" 2>&1 &
	DPID[$name]=$!; PIDS+=(${DPID[$name]})
	wait_until 20 host_answers $name || fail "$name did not come up: $(tail -5 "$T/$name.log")"
}
for h in A B; do
	gstart $h ', "memory": "cuda", "pool_size": "1GiB", "max_message_size": "64MiB", "ring_size": "256MiB", "chunk_size": "4MiB"'
done
wait_until 15 peer_up A B || fail "A-B session did not come up: $(tail -5 "$T/A.log")"
ok "two daemons up over tcp on 127.0.0.1 (A ${PORT[A]}, B ${PORT[B]})"

bpool_used() { on B "$RGAPS" stats "$1" --json | grep -m1 '"pool_used"' | tr -dc '0-9'; }
bpool_is() { test "$(bpool_used "$1")" = "$2"; }

# 1 and 2: remote fan-out with kernel verification, chunked then whole messages
run_fanout() { # TOPIC SIZES COUNT LABEL
	local topic=$1 sizes=$2 n=$3 label=$4
	for i in 1 2 3 4; do
		BG_TIMEOUT=300 bg "b$topic$i" env RGAPS_SOCKET=${SOCK[B]} "$GPU_SUB" $topic --count $n --timeout 280
	done
	BG_TIMEOUT=300 bg "a$topic" env RGAPS_SOCKET=${SOCK[A]} "$GPU_SUB" $topic --count $n --timeout 280
	wait_until 20 knows_sub A B $topic || fail "A never learned that B subscribes to $topic"
	wait_until 20 subs_on B $topic 4 || fail "the 4 subscribers on B did not attach"
	local start=$(date +%s.%N)
	BG_TIMEOUT=300 bg "p$topic" env RGAPS_SOCKET=${SOCK[A]} "$GPU_PUB" $topic --count $n --size $sizes \
		--wait-subscribers 1 --timeout 60
	wait_ok "p$topic"
	for s in "b${topic}1" "b${topic}2" "b${topic}3" "b${topic}4" "a$topic"; do
		wait_ok "$s"
		expect_sub "$s" received=$n verified=$n mismatched=0 gaps=0 drops=0
	done
	local secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
	grep -h "first message" "$T/b${topic}1.out" | sed 's/^/   B: /'
	ok "$label: 4 subscribers on B and 1 on A verified every byte of $n GPU messages in place ($secs s; $(tail -1 "$T/p$topic.out"))"
	local staged=$(on A "$RGAPS" stats $topic --json | flat | grep -o '"forwarders":\[[^]]*' )
	echo "   A forwarder: ${staged#*\[}"
	echo "$staged" | grep -q '"staged":true' || fail "A did not stage $topic through host memory"
	local chunks=$(echo "$staged" | grep -o '"staged_chunks":[0-9]*' | cut -d: -f2)
	[ "${chunks:-0}" -gt 0 ] || fail "A staged no chunk of $topic"
	local landed=$(on B "$RGAPS" stats $topic --json | flat | grep -o '"from_peers":{"messages":[0-9]*' | tr -dc 0-9)
	[ "$landed" = "$n" ] || fail "B landed $landed messages of $topic, expected $n"
	local bmem=$(on B "$RGAPS" stats $topic --json | flat | grep -o '"memory":"[a-z]*"' | head -1)
	[ "$bmem" = '"memory":"cuda"' ] || fail "$topic on B is not in GPU memory ($bmem)"
	ok "$label: A staged $chunks chunks D2H; B landed $landed messages (one transfer each) into its GPU pool"
	wait_until 10 bpool_is $topic 0 || fail "B's pool of $topic holds $(bpool_used $topic) bytes after the run"
}
subs_on() { test "$(RGAPS_SOCKET=${SOCK[$1]} nsubs "$2")" = "$3"; }

run_fanout gfar 4KiB-64MiB $COUNT "chunked (4 MiB)"
run_fanout gwhole 4KiB-16MiB $((COUNT / 3)) "whole messages (chunking off)"
grep -q "topic 'gfar': device pool; staging" "$T/A.log" || fail "A logged no staging buffer for gfar"
grep -h "staging\|receive ring not pinned\|staging buffer not pinned" "$T/A.log" "$T/B.log" | sed 's/^/   /'

# 3. a subscriber on B killed while holding GPU messages that came from A
BG_TIMEOUT=120 bg holder env RGAPS_SOCKET=${SOCK[B]} "$GPU_SUB" gkill --hold 8 --timeout 100
BG_TIMEOUT=120 bg steady env RGAPS_SOCKET=${SOCK[B]} "$GPU_SUB" gkill --count 40 --timeout 100
wait_until 20 knows_sub A B gkill || fail "A never learned that B subscribes to gkill"
wait_until 20 subs_on B gkill 2 || fail "the 2 subscribers on B did not attach"
RGAPS_SOCKET=${SOCK[A]} "$GPU_PUB" gkill --count 40 --size 1MiB --timeout 30 >"$T/kpub.out" 2>&1 ||
	fail "publish to gkill: $(cat "$T/kpub.out")"
wait_until 30 grep -q "holding 8" "$T/holder.out" || fail "holder did not take 8: $(cat "$T/holder.out")"
wait_ok steady
expect_sub steady received=40 verified=40 mismatched=0 gaps=0
used=$(bpool_used gkill)
[ "$used" -ge $((8 * 1024 * 1024)) ] || fail "B's pool should hold the 8 held messages, has $used"
kill9 holder
wait_until 10 bpool_is gkill 0 || fail "B's GPU pool not reclaimed after SIGKILL: $(bpool_used gkill)"
ok "SIGKILLed subscriber on B: its 8 remote GPU messages ($used bytes) reclaimed, B's pool idle"
RGAPS_SOCKET=${SOCK[A]} "$GPU_PUB" gkill --count 5 --size 1MiB >/dev/null || fail "gkill unusable after the kill"

for h in A B; do
	! grep -E "hostile|staging copy failed|copy into the pool failed|cuda: .*failed" "$T/$h.log" ||
		fail "$h logged errors"
done
for h in A B; do stop_host $h; done
ok "both daemons stopped cleanly"
