#!/bin/bash
# The gpusum stage (plugins/stage-gpusum) on host-memory topics, two daemons
# over TCP: the checksum the receiver computes over the whole message in its
# pool (here on the CPU; on a GPU host by a kernel, tests/gpu/gpu_stage.sh)
# against the sum of the parts the sender put in each chunk's tag.
#  1. 40 messages of 1 MiB in 256 KiB chunks reach a verifying subscriber;
#     the sender summed 160 chunks, the receiver added 160 tags and checked
#     40 messages, none refused;
#  2. chunks of 4097 bytes (parts cut off word boundaries) and messages of
#     16 bytes to 100000 bytes: every one verified and checked;
#  3. the sender corrupts one chunk on the wire (the test-only fault plugin,
#     RGAPSD_FAULT=chunk:6): the receiver refuses that message before
#     publishing it, its subscriber is told of one lost message (drops 1),
#     every message it gets verified, and the log says why with both sums.
# Skips (exit 77) where the plugin was not built (it needs nvcc).
: "${RGAPS_BUILD:?RGAPS_BUILD must point at the build directory}"
[ -e "$RGAPS_BUILD/plugins/stage-gpusum.so" ] ||
	{ echo "SKIP: the gpusum stage plugin is not built (it needs CUDA's nvcc at configure time)"; exit 77; }
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
N=40
CHUNKS=$((N * 4))
ODD=200
host A 0; host B 1
mkdir -p "$T/td"
echo '{ "name": "odd", "chunk_size": 4097 }' > "$T/td/odd.json"
DAEMON_EXTRA="\"topics_dir\": \"$T/td\","
DEF=', "memory": "host", "chunk_size": "256KiB", "ring_size": "8MiB", "stages": ["gpusum"]'

# ---- 1. 1 MiB messages in 256 KiB chunks
start_host A "$DEF"
start_host B "$DEF"
wait_until 10 peer_up A B || fail "A-B session did not come up"
BG_TIMEOUT=120 bg sub env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub sum --count $N --verify --timeout 100
wait_until 10 knows_sub A B sum || fail "A never learned that B subscribes"
BG_TIMEOUT=120 bg pub env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub sum --count $N --size 1MiB
wait_ok pub
wait_ok sub
grep -q "received $N verified $N mismatched 0 gaps 0 drops 0" "$T/sub.out" || fail "sub: $(tail -1 "$T/sub.out")"
wait_until 10 eval 'test "$(stage_count B sum before_publish runs)" = $N' ||
	fail "B checked $(stage_count B sum before_publish runs) messages, expected $N"
[ "$(stage_count B sum after_landing runs)" = $CHUNKS ] || fail "B added $(stage_count B sum after_landing runs) tags, expected $CHUNKS"
[ "$(stage_count A sum before_send runs)" = $CHUNKS ] || fail "A summed $(stage_count A sum before_send runs) chunks, expected $CHUNKS"
for p in "A before_send" "B after_landing" "B before_publish"; do
	set -- $p
	[ "$(stage_count $1 sum $2 failed)" = 0 ] || fail "$1 refused $(stage_count $1 sum $2 failed) at $2"
done
ns=$(stage_count B sum before_publish ns)
[ "$ns" -gt 0 ] || fail "B's stats give no time for its checks (before_publish.ns $ns)"
ok "gpusum: $N messages verified; A summed $CHUNKS chunks, B added their tags and checked $N messages ($((ns / N / 1000)) us a message on the CPU, stats)"

# ---- 2. chunks cut off word boundaries, messages of every size
BG_TIMEOUT=120 bg osub env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub odd --count $ODD --verify --timeout 100
wait_until 10 knows_sub A B odd || fail "A never learned that B subscribes to odd"
BG_TIMEOUT=120 bg opub env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub odd --count $ODD --size 16-100000
wait_ok opub
wait_ok osub
grep -q "received $ODD verified $ODD mismatched 0 gaps 0 drops 0" "$T/osub.out" || fail "odd: $(tail -1 "$T/osub.out")"
wait_until 10 eval 'test "$(stage_count B odd before_publish runs)" = $ODD' ||
	fail "B checked $(stage_count B odd before_publish runs) messages of odd, expected $ODD"
landed=$(stage_count B odd after_landing runs)
[ "$landed" -gt $ODD ] || fail "odd: $landed chunks for $ODD messages: no message was cut"
[ "$(stage_count B odd before_publish failed)" = 0 ] || fail "B refused a message of odd"
ok "chunks of 4097 bytes: $ODD messages of 16..100000 bytes ($landed chunks) verified and checked"

# ---- 3. one chunk corrupted on the wire
stop_host A
RGAPSD_FAULT=chunk:6 start_host A "$DEF"
wait_until 10 peer_up A B || fail "A (corrupting) did not come up"
before=$(stage_count B sum before_publish failed)
BG_TIMEOUT=120 bg sub2 env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub sum --count $N --verify --timeout 100 --allow-gaps
wait_until 10 knows_sub A B sum || fail "A never learned that B subscribes"
BG_TIMEOUT=120 bg pub2 env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub sum --count $N --size 1MiB
wait_ok pub2
wait_ok sub2
grep -q "fault injection: spoiling record 6" "$T/A.log" || fail "A corrupted nothing: $(grep -i fault "$T/A.log")"
grep -q "received $((N - 1)) verified $((N - 1)) mismatched 0 gaps 0 drops 1 " "$T/sub2.out" ||
	fail "sub2: $(tail -1 "$T/sub2.out")"
[ "$(stage_count B sum before_publish failed)" = $((before + 1)) ] ||
	fail "B refused $(stage_count B sum before_publish failed) messages in all, expected $((before + 1))"
[ "$(stage_count B sum after_landing failed)" = 0 ] || fail "B refused a chunk on landing"
on B "$RGAPS" stats sum --json | flat | grep -q '"from_peers":{[^}]*"refused":1' ||
	fail "B's topic does not count the dropped message: $(on B "$RGAPS" stats sum --json | flat | grep -o '"from_peers":{[^}]*}')"
why=$(grep -o "gpusum mismatch in message [0-9]* (1048576 bytes, summed on the CPU): 0x[0-9a-f]*, the sender's 0x[0-9a-f]*" "$T/B.log" | head -1)
[ -n "$why" ] || fail "B did not say why it dropped the message: $(grep -i gpusum "$T/B.log" | tail -2)"
ok "a corrupted chunk caught before publishing: $(tail -1 "$T/sub2.out" | cut -d' ' -f1-10); B: $why"
