#!/bin/bash
# Four daemons as four hosts over the TCP transport: a publisher on A sends
# 1000 messages of 4 KiB to 64 MiB; 4 verifying subscribers on B and 4 on C
# receive every message intact, B and C each getting one transfer per
# message, and D, with no subscriber, gets nothing. Then sizes on every
# boundary the sender cuts at: exact multiples of chunk_size and one byte
# under and over (topic "edge", 64 KiB chunks), and whole messages with
# chunking off up to the largest record the ring takes, and one byte over it,
# which is reported lost (topic "whole").
# The topics are stars (A sends to B and C itself): the relay trees have
# remote_relay.sh.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
COUNT=${REMOTE_COUNT:-1000}
# A volume test on a loaded 2-CPU machine: do not let a stalled loop look like a dead peer
# (REMOTE_KEEPALIVE_MS: longer still under ThreadSanitizer, tools/quickstart.sh).
KEEPALIVE_MS=${REMOTE_KEEPALIVE_MS:-${KEEPALIVE_MS:-1000}}
host A 0; host B 1; host C 2; host D 3
declare -A sent
# The boundary topics, read by every host from topics.d beside its configuration.
mkdir "$T/topics.d"
cat >"$T/topics.d/edge.json" <<'JSON'
{ "name": "edge", "transport": "tcp", "chunk_size": "64KiB", "ring_size": "1MiB" }
JSON
cat >"$T/topics.d/whole.json" <<'JSON'
{ "name": "whole", "transport": "tcp", "chunking": false, "ring_size": "1MiB",
  "max_message_size": "1MiB" }
JSON
# A publisher waits as long as it takes for 8 verifying subscribers (a delivery test,
# not a timing one: a loaded machine may make them slow).
for h in A B C D; do start_host $h ', "pool_size": "512MiB", "ring_size": "64MiB", "block_timeout_ms": 120000, "relay": "star"'; done
wait_until 20 peer_up A B || fail "A-B session did not come up: $(tail -5 "$T/A.log")"
wait_until 20 peer_up A C || fail "A-C session did not come up"
wait_until 20 peer_up A D || fail "A-D session did not come up"
for h in B C; do
	for i in 1 2 3 4; do
		BG_TIMEOUT=400 bg "sub$h$i" env RGAPS_SOCKET=${SOCK[$h]} "$RGAPS" sub far --count $COUNT --verify --timeout 300
	done
done
wait_until 20 knows_sub A B far || fail "A never learned that B subscribes"
wait_until 20 knows_sub A C far || fail "A never learned that C subscribes"
ok "sessions up, subscriptions advertised"
start=$(date +%s)
BG_TIMEOUT=400 bg pub env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub far --count $COUNT --size 4KiB-64MiB
wait_ok pub
grep -q "^published $COUNT messages .* failures 0$" "$T/pub.out" || fail "publisher: $(cat "$T/pub.out")"
for h in B C; do
	for i in 1 2 3 4; do
		wait_ok "sub$h$i"
		expect_sub "sub$h$i" received=$COUNT verified=$COUNT mismatched=0 gaps=0 drops=0
	done
done
ok "8 remote subscribers verified $COUNT messages each in $(( $(date +%s) - start )) s: $(sub_line subB1)"
# One transfer per host: each receiving daemon landed exactly COUNT messages.
for h in B C; do
	s=$(hstats $h far)
	n=$(grep -o '"from_peers":{"messages":[0-9]*' <<<"$s" | tr -dc 0-9) || true
	[ "$n" = "$COUNT" ] || fail "$h landed ${n:-no} messages, expected $COUNT (one transfer per message): $s"
done
ok "B and C each landed exactly $COUNT messages (one transfer per host)"
s=$(hstats D)
grep -q '"from_peers":{"messages":[1-9]' <<<"$s" && fail "D, with no subscriber, received messages"
for h in B C D; do sent[$h]=$(link_sent A $h); done
[ "${sent[B]}" -gt 0 ] && [ "${sent[C]}" -gt 0 ] || fail "A's links to B and C carried ${sent[B]} and ${sent[C]} records"
[ "${sent[D]}" = 0 ] || fail "A sent ${sent[D]} records to D, which has no subscriber"
ok "D, with no subscriber, received nothing; A sent it no record (B ${sent[B]}, C ${sent[C]}, D 0)"

# ---- sizes on the sender's boundaries, in this order, from one publisher (oracle-pub
# none: every message right)
K=65536
# Chunks of 64 KiB: a small message, one byte under, at and over one, two and three chunks.
EDGE="25 $((K - 1)) $K $((K + 1)) $((2 * K - 1)) $((2 * K)) $((2 * K + 1)) $((3 * K)) $((3 * K + 1))"
# Whole messages in a 1 MiB ring: a record holds at most half the ring less 64 bytes, the
# 64-byte header included; the largest message that fits, then one byte over (dropped by
# the sender, reported lost), then the largest again.
MAXREC=$((1048576 / 2 - 64)); FIT=$((MAXREC - 64))
WHOLE="25 $((K - 1)) $K $((K + 1)) $FIT $((FIT + 1)) $FIT"
n_edge=$(wc -w <<<"$EDGE"); n_whole=$(wc -w <<<"$WHOLE")
for h in B C; do
	BG_TIMEOUT=200 bg "edge$h" env RGAPS_SOCKET=${SOCK[$h]} "$RGAPS" sub edge --count $n_edge --verify --timeout 120
	BG_TIMEOUT=200 bg "whole$h" env RGAPS_SOCKET=${SOCK[$h]} "$RGAPS" sub whole --count $n_whole --verify --allow-gaps --timeout 120
done
for topic in edge whole; do
	wait_until 20 knows_sub A B $topic || fail "A never learned that B subscribes to $topic"
	wait_until 20 knows_sub A C $topic || fail "A never learned that C subscribes to $topic"
done
publish_sizes() { # TOPIC SIZE...: one message of each size, in order
	local topic=$1
	shift
	on A "$RGAPS_BUILD/tests/oracle/oracle-pub" $topic none --count $# --size "$(tr ' ' , <<<"$*")" \
		>"$T/pub-$topic.out" 2>&1 || fail "oracle-pub $topic $*: $(cat "$T/pub-$topic.out")"
}
publish_sizes edge $EDGE
publish_sizes whole $WHOLE
for h in B C; do
	wait_ok "edge$h"
	expect_sub "edge$h" received=$n_edge verified=$n_edge mismatched=0 gaps=0 drops=0
	wait_ok "whole$h"
	expect_sub "whole$h" received=$((n_whole - 1)) verified=$((n_whole - 1)) mismatched=0
	expect_accounted "whole$h" $n_whole
done
s=$(hstats A whole)
too=$(grep -o '"too_large_for_ring":[0-9]*' <<<"$s" | head -1 | tr -dc 0-9) || true
[ "${too:-0}" -ge 1 ] || fail "A does not count the whole message over the ring's record as too large: $s"
ok "boundary sizes: $n_edge around 64 KiB chunks and $((n_whole - 1)) whole messages up to $FIT bytes intact on B and C; $((FIT + 1)) bytes reported lost"
for h in A B C D; do stop_host $h; done
