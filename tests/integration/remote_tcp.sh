#!/bin/bash
# Four daemons as four hosts over the TCP transport: a publisher on A sends
# 1000 messages of 4 KiB to 64 MiB; 4 verifying subscribers on B and 4 on C
# receive every message intact, B and C each getting one transfer per
# message, and D, with no subscriber, gets nothing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
COUNT=${REMOTE_COUNT:-1000}
# A volume test on a loaded 2-CPU machine: do not let a stalled loop look like a dead peer
# (REMOTE_KEEPALIVE_MS: longer still under ThreadSanitizer, tools/quickstart.sh).
KEEPALIVE_MS=${REMOTE_KEEPALIVE_MS:-${KEEPALIVE_MS:-1000}}
host A 0; host B 1; host C 2; host D 3
declare -A sent
# A publisher waits as long as it takes for 8 verifying subscribers (a delivery test,
# not a timing one: a loaded machine may make them slow).
for h in A B C D; do start_host $h ', "pool_size": "512MiB", "ring_size": "64MiB", "block_timeout_ms": 120000'; done
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
for h in A B C D; do stop_host $h; done
