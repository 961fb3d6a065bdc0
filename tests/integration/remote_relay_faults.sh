#!/bin/bash
# A relay that fails in the middle of a stream (docs/ARCHITECTURE.md section 1,
# "Relays"): six daemons in network namespaces on tc-shaped links, a chain
# H0 > H1 > H2 > H3 > H4 > H5, a verifying subscriber on H1 .. H5, a publisher
# on H0 sending all along (drop_oldest: it never waits for the tree). In turn:
#  1. H2 is SIGKILLed: H3 attaches to H1 (H4, H5 keep their parents);
#  2. H3 is SIGSTOPped for 10 s: H4 attaches to H1 once the keepalive runs out,
#     and back to H3 when it wakes, which takes its place again;
#  3. H4's cable is pulled for 3 s: H5 attaches to H3, and back to H4.
# Every subscriber of a host that lived ends with every message published
# either received intact, in order, once, or reported lost, none silently; each
# re-attachment is seen in the parents' stats. The time they take is measured by
# tools/rgaps-bench/relay_bench.sh, not here (no test depends on a timing margin).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
. "$(dirname "$0")/netns_lib.sh"
RATE=${RELAY_RATE:-400mbit}
# Not REMOTE_KEEPALIVE_MS: the freeze must outlast the keepalive under sanitizers too.
KEEPALIVE_MS=${RELAY_KEEPALIVE_MS:-500}
netns_hosts 6 "$RATE"
ok "6 hosts in network namespaces on one switch, every link shaped to $RATE each way"

DEFAULTS=', "pool_size": "32MiB", "max_message_size": "256KiB", "ring_size": "4MiB",
  "chunk_size": "64KiB", "resend_window": "32MiB", "overflow": "drop_oldest", "relay": "chain"'
for i in 0 1 2 3 4 5; do start_host H$i "$DEFAULTS"; done
for i in 1 2 3 4 5; do
	wait_until 20 peer_up H0 H$i || fail "H0-H$i session did not come up"
done
for i in 1 2 3 4 5; do
	BG_TIMEOUT=200 bg "sub$i" env RGAPS_SOCKET=${SOCK[H$i]} "$RGAPS" sub relay --count 100000 --verify --allow-gaps --timeout 150
	for j in 0 1 2 3 4 5; do
		[ $j = $i ] || wait_until 20 knows_sub H$j H$i relay || fail "H$j never learned that H$i subscribes"
	done
	sleep 0.01 # a later millisecond: the order of joining is the order of the index
done
ok "chain H0 > H1 > H2 > H3 > H4 > H5 (keepalive $KEEPALIVE_MS ms)"

name_of() { echo "${ADDR[$1]}:${PORT[$1]}"; }
source_entry() { hstats "$1" relay | grep -o "{\"topic\":\"relay\",\"origin\":[^}]*}"; }
parent_of_is() { source_entry "$1" | grep -q "\"parent\":\"$(name_of "$2")\""; }
landed() { hstats "$1" relay | grep -o '"from_peers":{"messages":[0-9]*' | tr -dc 0-9; }

# 200 messages a second of 16 to 256 KiB, for as long as the faults take.
BG_TIMEOUT=200 bg pub env RGAPS_SOCKET=${SOCK[H0]} "$RGAPS" pub relay --count 100000 --size 16KiB-256KiB --rate 200
for i in 1 2 3 4 5; do
	wait_until 20 parent_of_is H$i H$((i - 1)) || fail "H$i's parent is not H$((i - 1)): $(source_entry H$i)"
done
wait_until 20 eval '[ "$(landed H5)" -gt 100 ]' || fail "the chain did not reach H5"

# ---- 1. SIGKILL H2
stop_host H2 KILL
end_bg sub2
rm -f /dev/shm/rgaps-"$INSTANCE"H2-* # what a killed daemon leaves (a new one would close it)
wait_until 20 parent_of_is H3 H1 || fail "H3 did not attach to H1 after H2 was killed: $(source_entry H3)"
n=$(landed H3)
wait_until 20 eval '[ "$(landed H3)" -gt $((n + 100)) ]' || fail "H3 receives nothing from H1"
parent_of_is H4 H3 || fail "H4 moved although its parent lives: $(source_entry H4)"
ok "H2 killed: H3 attached to H1 and receives again; H4 and H5 kept their parents"

# ---- 2. SIGSTOP H3 for 10 s (the keepalive runs out after 3 intervals: 1.5 s by default)
stopped=${EPOCHREALTIME/./}
kill -STOP "${DPID[H3]}"
resume() { kill -CONT "${DPID[H3]}"; }
wait_until 9 parent_of_is H4 H1 || { resume; fail "H4 did not attach to H1 while H3 was stopped: $(source_entry H4)"; }
n=$(landed H4)
wait_until 9 eval '[ "$(landed H4)" -gt $((n + 100)) ]' || { resume; fail "H4 receives nothing from H1"; }
ok "H3 stopped: H4 attached to H1 and receives again"
left=$((stopped + 10000000 - ${EPOCHREALTIME/./}))
[ $left -le 0 ] || sleep "$((left / 1000000)).$(printf %06d $((left % 1000000)))"
resume
wait_until 30 parent_of_is H4 H3 || fail "H3 woke, but H4 did not attach to it again: $(source_entry H4)"
n=$(landed H4)
wait_until 20 eval '[ "$(landed H4)" -gt $((n + 100)) ]' || fail "H4 receives nothing from H3 again"
ok "H3 woke after 10 s and took its place again: H4 receives from it"

# ---- 3. pull H4's cable for 3 s
netns_link H4 down
wait_until 20 parent_of_is H5 H3 || { netns_link H4 up; fail "H5 did not attach to H3 while H4's cable was out: $(source_entry H5)"; }
n=$(landed H5)
wait_until 20 eval '[ "$(landed H5)" -gt $((n + 100)) ]' || { netns_link H4 up; fail "H5 receives nothing from H3"; }
ok "H4's cable out: H5 attached to H3 and receives again"
sleep 2
netns_link H4 up
wait_until 30 parent_of_is H5 H4 || fail "H4's cable is back, but H5 did not attach to it again: $(source_entry H5)"
ok "H4's cable back: H5 receives from H4 again"

# ---- the stream ends: every message accounted for on every host that lived
n=$(landed H5)
wait_until 20 eval '[ "$(landed H5)" -gt $((n + 100)) ]' || fail "H5 receives nothing at the end"
stop_bg pub INT 130
published=$(grep -o '^published [0-9]*' "$T/pub.out" | tr -dc 0-9)
[ -n "$published" ] || fail "the publisher said nothing: $(cat "$T/pub.out")"
# A subscriber is stopped once its host has told it the fate of every message
# (published it, or reported it lost) and it has taken all of it.
told_all() { # HOST
	local s
	s=$(source_entry "$1" | grep -o '"told_next":[0-9]*' | tr -dc 0-9)
	[ "${s:-0}" -ge "$published" ] || return 1
	! hstats "$1" relay | grep -q '"daemon":false,[^}]*"lag":[1-9]'
}
for i in 1 3 4 5; do
	wait_until 30 told_all H$i || fail "H$i did not account for all $published messages: $(source_entry H$i)"
	stop_bg sub$i INT 130
	r=$(sub_field sub$i received) g=$(sub_field sub$i gaps) d=$(sub_field sub$i drops)
	expect_sub sub$i mismatched=0 verified="$r"
	[ $((r + g + d)) -eq "$published" ] ||
		fail "H$i: received $r + reported lost $((g + d)) != $published published: $(sub_line sub$i)"
	ok "H$i: $r received in order, $((g + d)) reported lost, of $published: none lost silently"
done
for i in 0 1 3 4 5; do stop_host H$i; done
