#!/bin/bash
# Four daemons as four hosts over the TCP transport: a publisher on A sends
# 1000 messages of 4 KiB to 64 MiB; 4 verifying subscribers on B and 4 on C
# receive every message intact, B and C each getting one transfer per
# message, and D, with no subscriber, gets nothing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
COUNT=${REMOTE_COUNT:-1000}
# A volume test on a loaded 2-CPU machine: do not let a stalled loop look like a dead peer.
KEEPALIVE_MS=${KEEPALIVE_MS:-1000}
host A 0; host B 1; host C 2; host D 3
for h in A B C D; do start_host $h ', "pool_size": "512MiB", "ring_size": "64MiB"'; done
wait_until 10 peer_up A B || fail "A-B session did not come up: $(tail -5 "$T/A.log")"
wait_until 10 peer_up A C || fail "A-C session did not come up"
wait_until 10 peer_up A D || fail "A-D session did not come up"
for h in B C; do
	for i in 1 2 3 4; do
		BG_TIMEOUT=400 bg "sub$h$i" env RGAPS_SOCKET=${SOCK[$h]} "$RGAPS" sub far --count $COUNT --verify --timeout 300
	done
done
wait_until 10 knows_sub A B far || fail "A never learned that B subscribes"
wait_until 10 knows_sub A C far || fail "A never learned that C subscribes"
ok "sessions up, subscriptions advertised"
start=$(date +%s)
BG_TIMEOUT=400 bg pub env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub far --count $COUNT --size 4KiB-64MiB
wait_ok pub
for h in B C; do
	for i in 1 2 3 4; do
		wait_ok "sub$h$i"
		grep -q "received $COUNT verified $COUNT mismatched 0 gaps 0 drops 0" "$T/sub$h$i.out" ||
			fail "sub$h$i: $(tail -1 "$T/sub$h$i.out")"
	done
done
ok "8 remote subscribers verified $COUNT messages each in $(( $(date +%s) - start )) s: $(tail -1 "$T/subB1.out")"
# One transfer per host: each receiving daemon landed exactly COUNT messages.
for h in B C; do
	n=$(on $h "$RGAPS" stats far --json | flat | grep -o '"from_peers":{"messages":[0-9]*' | tr -dc 0-9)
	[ "$n" = "$COUNT" ] || fail "$h landed $n messages, expected $COUNT (one transfer per message)"
done
ok "B and C each landed exactly $COUNT messages (one transfer per host)"
on D "$RGAPS" stats --json | flat | grep -q '"from_peers":{"messages":[1-9]' && fail "D, with no subscriber, received messages"
on A "$RGAPS" stats --json | flat | grep -q "\"peer\":\"127.0.0.1:${PORT[D]}\"" && fail "A set up a ring to D, which has no subscriber"
ok "D, with no subscriber, received nothing and got no ring"
for h in A B C D; do stop_host $h; done
