#!/bin/bash
# Pluggable stages across hosts (src/daemon/remote/stages.c, the crc32c plugin),
# two daemons over TCP:
#  1. a topic with "stages": ["crc32c"]: 40 messages of 1 MiB in 256 KiB chunks
#     reach a verifying subscriber intact; the sender ran the stage before each
#     chunk was sent, the receiver after each landed (160 each, none refused);
#  2. the sender corrupts one chunk on the wire (the test-only fault plugin,
#     RGAPSD_FAULT=chunk): with crc32c the receiver drops that message and its
#     subscriber is told of one lost message (drops 1), every message it gets
#     verified;
#     the same corruption on a topic without stages reaches the subscriber as
#     wrong bytes, which is what the stage is there to stop;
#  3. hosts that disagree on a topic's stages refuse its set-up, naming both;
#  4. an unknown stage refuses the configuration.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
# Exact counts of a run without flaps: keepalive at its default, which a loaded machine
# does not trip (a flap sends messages again: remote_resend.sh tests that).
KEEPALIVE_MS=${KEEPALIVE_MS:-2000}
N=40
CHUNKS=$((N * 4))
host A 0; host B 1
DEF=', "chunk_size": "256KiB", "ring_size": "8MiB"'

# ---- 1. crc32c on every chunk, both ends
start_host A "$DEF"', "stages": ["crc32c"]'
start_host B "$DEF"', "stages": ["crc32c"]'
wait_until 10 peer_up A B || fail "A-B session did not come up"
BG_TIMEOUT=120 bg sub env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub crc --count $N --verify --timeout 100
wait_until 10 knows_sub A B crc || fail "A never learned that B subscribes"
BG_TIMEOUT=120 bg pub env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub crc --count $N --size 1MiB
wait_ok pub
wait_ok sub
expect_sub sub received=$N verified=$N mismatched=0 gaps=0 drops=0
wait_until 10 eval 'test "$(stage_count B crc after_landing runs)" = $CHUNKS' ||
	fail "B ran crc32c on $(stage_count B crc after_landing runs) chunks, expected $CHUNKS"
[ "$(stage_count A crc before_send runs)" = $CHUNKS ] || fail "A ran crc32c on $(stage_count A crc before_send runs) chunks"
[ "$(stage_count A crc before_send failed)" = 0 ] && [ "$(stage_count B crc after_landing failed)" = 0 ] ||
	fail "a chunk was refused: $(on B "$RGAPS" stats --json | flat | grep -o '"stages":\[{.*')"
ok "crc32c: $N messages verified; $CHUNKS chunks checksummed on A and checked on B"
grep -q '"sender_chunks":{[^}]*"staged->processing":'$CHUNKS <<< "$(on A "$RGAPS" stats --json | flat)" ||
	fail "A's chunks did not pass the processing state"
grep -q '"receiver":{[^}]*"checking->checked":'$CHUNKS <<< "$(on B "$RGAPS" stats --json | flat)" ||
	fail "B's records did not pass the checking state"
ok "the state machines show the stages (staged->processing, checking->checked)"

# ---- 2. one chunk corrupted on the wire
stop_host A
RGAPSD_FAULT=chunk:6 start_host A "$DEF"', "stages": ["crc32c"]'
wait_until 10 peer_up A B || fail "A (corrupting) did not come up"
BG_TIMEOUT=120 bg sub2 env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub crc --count $N --verify --timeout 100 --allow-gaps
wait_until 10 knows_sub A B crc || fail "A never learned that B subscribes"
BG_TIMEOUT=120 bg pub2 env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub crc --count $N --size 1MiB
wait_ok pub2
wait_ok sub2
grep -q "fault injection: spoiling record 6" "$T/A.log" || fail "A corrupted nothing: $(grep -i fault "$T/A.log")"
# The lost message is reported to the subscriber ("drops 1": a gap the daemon announced), never silent.
expect_sub sub2 received=$((N - 1)) verified=$((N - 1)) mismatched=0 gaps=0 drops=1
[ "$(stage_count B crc after_landing failed)" = 1 ] || fail "B refused $(stage_count B crc after_landing failed) chunks, expected 1"
# (the ring itself is gone: nobody on B subscribes any more; the topic keeps the count)
on B "$RGAPS" stats crc --json | flat | grep -q '"from_peers":{[^}]*"refused":1' ||
	fail "B's topic does not count the dropped message: $(on B "$RGAPS" stats crc --json | flat | grep -o '"from_peers":{[^}]*}')"
why=$(grep -o "crc32c mismatch in bytes [^:]*: [^,]*, the sender's 0x[0-9a-f]*" "$T/B.log" | head -1)
[ -n "$why" ] || fail "B did not say why it dropped the message"
ok "a corrupted chunk caught: $(tail -1 "$T/sub2.out" | cut -d' ' -f1-10); B: $why"

# The same corruption without the stage reaches the subscriber (the stage is what stops it).
stop_host A
stop_host B
RGAPSD_FAULT=chunk:6 start_host A "$DEF"
start_host B "$DEF"
wait_until 10 peer_up A B || fail "A-B (no stages) did not come up"
BG_TIMEOUT=120 bg sub3 env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub plain --count $N --verify --timeout 100
wait_until 10 knows_sub A B plain || fail "A never learned that B subscribes"
BG_TIMEOUT=120 bg pub3 env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub plain --count $N --size 1MiB
wait_ok pub3
# (exit 3: a mismatch; every other message verified, nothing lost)
wait_rc sub3 3
expect_sub sub3 received=$N verified=$((N - 1)) mismatched=1 gaps=0 drops=0
ok "without a stage the same corruption reaches the subscriber: $(tail -1 "$T/sub3.out" | cut -d' ' -f1-6)"

# ---- 3. hosts that disagree on a topic's stages
stop_host A
start_host A "$DEF"', "stages": ["crc32c"]'
wait_until 10 peer_up A B || fail "A-B did not come up"
bg sub4 env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub mixed --count 1 --timeout 20
wait_until 10 knows_sub A B mixed || fail "A never learned that B subscribes"
on A "$RGAPS" pub mixed --count 1 --size 4KiB >/dev/null 2>&1
wait_until 10 grep -q "refused the set-up: topic 'mixed': the sender runs the stages \[crc32c\], this host \[\]" "$T/A.log" ||
	fail "the set-up was not refused for its stages: $(grep -i refus "$T/A.log" | tail -2)"
kill9 sub4
ok "a set-up between hosts with different stages refused: $(grep -o "refused the set-up: [^(]*" "$T/A.log" | head -1)"

# ---- 4. an unknown stage
echo "{ \"defaults\": { \"stages\": [\"crc32c\", \"nosuch\"] } }" > "$T/bad.json"
"$RGAPSD" --config "$T/bad.json" --check-config > "$T/check.out" 2>&1 && fail "an unknown stage was accepted"
grep -q "key 'stages': no stage plugin 'nosuch' in .* (found: crc32c[^)]*)" "$T/check.out" || fail "$(cat "$T/check.out")"
ok "unknown stage refused: $(sed 's/^rgapsd: //' "$T/check.out")"
