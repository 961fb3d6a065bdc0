#!/bin/bash
# A GPU topic along a relay chain (docs/GPU.md, "Across hosts, along a relay
# tree"): three rgapsd on this machine as three hosts over TCP on 127.0.0.1, a
# topic in "memory": "cuda" with "relay": "chain", chunks of 4 MiB.
#  1. gpu-pub on A pushes device buffers of 4 KiB to 64 MiB; two gpu-sub on B and
#     two on C verify every byte in place in their host's GPU pool with a CUDA
#     kernel (B subscribes first, so the chain is A > B > C);
#  2. the chain is what it should be: A's only ring of the topic goes to B, B's
#     parent is A and it passed on every message to C, C's parent is B;
#  3. only the origin copies off the GPU: A staged the chunks device-to-host
#     (its forwarder's staged_chunks), B passed them on from its receive ring and
#     staged none, although it also landed each one into its own GPU pool.
# Skips (exit 77) with the reason when there is no GPU.
# GPU_RELAY_CHECK=host runs the same with host memory and rgaps pub / sub --verify
# (no staging to look at): a check of the test itself on a machine without a GPU.
# Run: RGAPS_BUILD=<build dir> bash tests/gpu/gpu_relay.sh
. "$(dirname "$0")/../integration/lib.sh"
CHECK=${GPU_RELAY_CHECK:-}
GPU_PUB="$RGAPS_BUILD/tests/gpu/gpu-pub"
GPU_SUB="$RGAPS_BUILD/tests/gpu/gpu-sub"
if [ -z "$CHECK" ]; then
	[ -x "$GPU_PUB" ] || skip "$GPU_PUB not built (no nvcc at configure time)"
	require "a GPU" "$GPU_PUB" --probe
	MEMORY=cuda
	sub_cmd() { echo "$GPU_SUB"; }
	STOPPED_RC=1 # gpu-sub stopped before --count: its summary, then 1
else
	MEMORY=host
	sub_cmd() { echo "$RGAPS sub --verify"; }
	STOPPED_RC=130
fi
[ -e "$RGAPS_BUILD/plugins/transport-tcp.so" ] || fail "no tcp transport plugin in $RGAPS_BUILD/plugins"
# Pinning rings and staging buffers stalls a daemon's loop for a moment: keep
# the sessions from declaring each other dead meanwhile.
KEEPALIVE_MS=${KEEPALIVE_MS:-1000}
. "$(dirname "$0")/../integration/remote_lib.sh"

COUNT=${GPU_RELAY_COUNT:-120}
TOPIC=grelay
host A 0; host B 1; host C 2
DEFAULTS=", \"memory\": \"$MEMORY\", \"pool_size\": \"1GiB\", \"max_message_size\": \"64MiB\",
  \"ring_size\": \"256MiB\", \"chunk_size\": \"4MiB\", \"relay\": \"chain\", \"block_timeout_ms\": 60000"
for h in A B C; do start_host $h "$DEFAULTS"; done
for p in "A B" "A C" "B C"; do
	wait_until 20 peer_up $p || fail "the session $p did not come up"
done
ok "A, B and C up over tcp on 127.0.0.1, topic '$TOPIC' in $MEMORY memory along a chain"

# The subscribers stay after the stream (they wait for more than it holds), so that
# the chain is still there to look at once every message landed; then they stop.
BG_TIMEOUT=300 bg subA env RGAPS_SOCKET=${SOCK[A]} $(sub_cmd) $TOPIC --count $COUNT --timeout 280
for h in B C; do
	for i in 1 2; do
		BG_TIMEOUT=300 bg "sub$h$i" env RGAPS_SOCKET=${SOCK[$h]} $(sub_cmd) $TOPIC --count 1000000 --timeout 280
	done
	for o in A B C; do
		[ $o = $h ] || wait_until 20 knows_sub $o $h $TOPIC || fail "$o never learned that $h subscribes"
	done
	sleep 0.01 # a later millisecond: B joined first, so the chain is A > B > C
done
if [ -z "$CHECK" ]; then
	BG_TIMEOUT=300 bg pub env RGAPS_SOCKET=${SOCK[A]} "$GPU_PUB" $TOPIC --count $COUNT --size 4KiB-64MiB \
		--wait-subscribers 1 --timeout 60
else
	BG_TIMEOUT=300 bg pub env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub $TOPIC --count $COUNT --size 4KiB-64MiB
fi
wait_ok pub
landed() { hstats "$1" $TOPIC | grep -o '"from_peers":{"messages":[0-9]*' | tr -dc 0-9; }
for h in B C; do
	wait_until 120 eval '[ "$(landed '$h')" -ge $COUNT ]' || fail "$h landed $(landed $h) of $COUNT messages"
done

# ---- 2. the chain
name_of() { echo "${ADDR[$1]}:${PORT[$1]}"; }
source_entry() { hstats "$1" $TOPIC | grep -o "{\"topic\":\"$TOPIC\",\"origin\":[^}]*}"; }
out_peers() { hstats "$1" $TOPIC | grep -o "{\"topic\":\"$TOPIC\",\"direction\":\"out\",\"peer\":\"[^\"]*\"" |
	sed 's/.*"peer":"//; s/"$//' | tr '\n' ' '; }
source_entry B | grep -q "\"parent\":\"$(name_of A)\"" || fail "B's parent is not A: $(source_entry B)"
source_entry C | grep -q "\"parent\":\"$(name_of B)\"" || fail "C's parent is not B: $(source_entry C)"
[ "$(out_peers A)" = "$(name_of B) " ] || fail "A sends '$TOPIC' to: $(out_peers A)"
relayed=$(source_entry B | grep -o '"relayed":[0-9]*' | tr -dc 0-9)
[ "$relayed" = $COUNT ] || fail "B passed on $relayed of $COUNT messages: $(source_entry B)"
ok "chain A > B > C: A sends to B only, B passed on all $COUNT messages to C"

# ---- 3. one copy off the GPU, at the origin
staged() { hstats "$1" $TOPIC | grep -o '"staged_chunks":[0-9]*' | cut -d: -f2 | awk '{ s += $1 } END { print s + 0 }'; }
sa=$(staged A) sb=$(staged B)
[ "$sb" = 0 ] || fail "B staged $sb chunks device-to-host: a relay must pass them on from its ring"
if [ -z "$CHECK" ]; then
	[ "$sa" -gt 0 ] || fail "A staged no chunk of '$TOPIC' off its GPU"
	for h in B C; do
		hstats $h $TOPIC | grep -q '"memory":"cuda"' || fail "'$TOPIC' on $h is not in GPU memory"
	done
	ok "A staged $sa chunks off its GPU; B staged none, passing each on from its ring while landing it into its GPU pool"
fi

# ---- 1. every message on every subscriber, verified in place
wait_ok subA
expect_sub subA received=$COUNT verified=$COUNT mismatched=0 gaps=0 drops=0
for h in B C; do
	wait_until 60 eval '! hstats '$h' $TOPIC | grep -q "\"daemon\":false,[^}]*\"lag\":[1-9]"' ||
		fail "$h's subscribers did not take every message"
	for i in 1 2; do
		stop_bg "sub$h$i" INT $STOPPED_RC
		expect_sub "sub$h$i" received=$COUNT verified=$COUNT mismatched=0 gaps=0 drops=0
	done
done
ok "$COUNT messages of 4 KiB..64 MiB: A (1), B (2) and C (2 subscribers) verified every byte"
for h in A B C; do
	! grep -E "hostile|staging copy failed|copy into the pool failed|cuda: .*failed" "$T/$h.log" ||
		fail "$h logged errors"
done
for h in A B C; do stop_host $h; done
