#!/bin/bash
# Back-pressure along a relay chain (docs/CONFIG.md, "Choosing a relay topology"):
# three daemons in network namespaces on tc-shaped links, a chain H0 > H1 > H2 of
# a topic under "overflow": "block", a verifying subscriber on H1 and one on H2.
#  1. H2's subscriber is frozen (SIGSTOP) while H0 publishes far more than every
#     pool, ring and window on the way holds: H2's pool fills, its ring stops
#     draining, H1 keeps the records H2 lacks in its own ring, so H1 stops
#     landing too (although its own subscriber keeps up), and H0's publisher
#     waits: the slow host holds back every host above it;
#  2. the subscriber wakes: the stream goes on, and both subscribers receive
#     every message, verified, in order, none lost; the publisher saw no failure.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
. "$(dirname "$0")/netns_lib.sh"
RATE=${RELAY_RATE:-400mbit}
netns_hosts 3 "$RATE"
ok "3 hosts in network namespaces on one switch, every link shaped to $RATE each way"

# 32 MiB of messages against about 15 MiB of room on the way (pools 4 MiB, rings
# 1 MiB, windows 4 MiB); the publisher may wait up to a minute for room.
COUNT=512
DEFAULTS=', "pool_size": "4MiB", "max_message_size": "256KiB", "ring_size": "1MiB",
  "chunk_size": "64KiB", "resend_window": "4MiB", "overflow": "block",
  "block_timeout_ms": 60000, "relay": "chain"'
netns_start 3 "$DEFAULTS"
# H1's subscriber waits for more than the stream holds: it is stopped once H2 has it
# all, so that H1 stays in the chain (a relay that leaves moves the hosts below it).
for i in 1 2; do
	n=$COUNT
	[ $i = 1 ] && n=100000
	BG_TIMEOUT=200 bg "sub$i" env RGAPS_SOCKET=${SOCK[H$i]} "$RGAPS" sub relay --count $n --verify --timeout 150
	for j in 0 1 2; do
		[ $j = $i ] || wait_until 20 knows_sub H$j H$i relay || fail "H$j never learned that H$i subscribes"
	done
	sleep 0.01 # a later millisecond: H1 joined first, so the chain is H0 > H1 > H2
done
name_of() { echo "${ADDR[$1]}:${PORT[$1]}"; }
source_entry() { hstats "$1" relay | grep -o "{\"topic\":\"relay\",\"origin\":[^}]*}"; }
landed() { hstats "$1" relay | grep -o '"from_peers":{"messages":[0-9]*' | tr -dc 0-9; }

# ---- 1. H2's subscriber frozen: everything above it is held back
sub2=$(pgrep -P "$(bg_pid sub2)") || fail "H2's subscriber is not running: $(cat "$T/sub2.out")"
kill -STOP "$sub2"
thaw() { kill -CONT "$sub2" 2>/dev/null || true; }
at_exit thaw
BG_TIMEOUT=200 bg pub env RGAPS_SOCKET=${SOCK[H0]} "$RGAPS" pub relay --count $COUNT --size 64KiB
wait_until 20 eval 'source_entry H2 | grep -q "\"parent\":\"$(name_of H1)\""' ||
	fail "H2's parent is not H1: $(source_entry H2)"
# Held: H1 lands no more for a second, well short of the stream, and the publisher waits.
held() {
	local n
	n=$(landed H1)
	[ -n "$n" ] && [ "$n" -lt $COUNT ] || return 1
	sleep 1
	[ "$(landed H1)" = "$n" ]
}
wait_until 60 held || fail "H1 was not held back by H2: it landed $(landed H1) of $COUNT"
h1=$(landed H1) h2=$(landed H2)
kill -0 "$(bg_pid pub)" 2>/dev/null || fail "the publisher ended although H2 holds the chain: $(cat "$T/pub.out")"
waits=$(hstats H0 relay | grep -o '"full_waits":[0-9]*' | head -1 | tr -dc 0-9)
[ "${waits:-0}" -gt 0 ] || fail "H0's publisher never waited for room (full_waits ${waits:-none})"
ok "H2's subscriber frozen: H1 stopped at $h1 and H2 at $h2 of $COUNT messages, H0's publisher waits"

# ---- 2. it wakes: every message reaches both, none lost
kill -CONT "$sub2"
wait_ok pub
grep -q "^published $COUNT messages .* failures 0$" "$T/pub.out" || fail "publisher on H0: $(cat "$T/pub.out")"
wait_ok sub2
expect_sub sub2 received=$COUNT verified=$COUNT mismatched=0 gaps=0 drops=0
wait_until 30 eval '! hstats H1 relay | grep -q "\"daemon\":false,[^}]*\"lag\":[1-9]"' ||
	fail "H1's subscriber did not take every message: $(hstats H1 relay)"
stop_bg sub1 INT 130
expect_sub sub1 received=$COUNT verified=$COUNT mismatched=0 gaps=0 drops=0
relayed=$(source_entry H1 | grep -o '"relayed":[0-9]*' | tr -dc 0-9)
[ "$relayed" = $COUNT ] || fail "H1 passed on $relayed of $COUNT messages: $(source_entry H1)"
ok "H2's subscriber woke: H1 and H2 received all $COUNT messages, verified, in order, none lost"
for i in 0 1 2; do stop_host H$i; done
