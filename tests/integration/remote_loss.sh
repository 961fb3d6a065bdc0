#!/bin/bash
# Losses at the end of a stream reach subscribers at once:
# no later message has to come to carry the news.
#  1. The data link is cut after K of N messages (the test-only fault transport,
#     RGAPSD_FAULT=cut:K on the sender) and nothing more is published: the
#     subscriber on the receiving host ends with received + lost = N, the loss
#     reported (a loss notice on the next ring, a gap-only message), long before
#     its timeout.
#  2. The peer session dies (the receiving daemon stopped past the keepalive) and
#     the tail of the stream is published meanwhile: the same, once it is back.
# Nothing is sent again here (resend_window 0): remote_resend.sh tests the window.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
[ -d "$RGAPS_BUILD/tests/fault/plugins" ] || { echo "SKIP: the fault transport plugin was not built (tcp transport absent)"; exit 77; }
host A 0; host B 1
KEEPALIVE_MS=${KEEPALIVE_MS:-200} # a stopped peer is noticed in 0.6 s: what this test is about
SUB_TIMEOUT=120 # the subscriber's own limit: it must end long before

# sub_counts NAME: "received drops" from a subscriber's summary line
sub_counts() {
	local line
	line=$(grep '^received' "$T/$1.out") || return 1
	echo "$(echo "$line" | grep -o 'received [0-9]*' | tr -dc 0-9) $(echo "$line" | grep -o 'drops [0-9]*' | tr -dc 0-9)"
}

# check_sub NAME N: it ended by itself, everything verified, received + lost = N, some lost
check_sub() {
	local name=$1 n=$2 counts rec lost took
	wait_ok "$name"
	grep -q "mismatched 0" "$T/$name.out" || fail "$name: $(tail -1 "$T/$name.out")"
	counts=$(sub_counts "$name") || fail "$name: no summary: $(cat "$T/$name.out")"
	rec=${counts% *}; lost=${counts#* }
	[ $((rec + lost)) -eq "$n" ] || fail "$name: received $rec + lost $lost != $n"
	[ "$lost" -gt 0 ] || fail "$name: nothing lost: the fault did not bite ($(tail -1 "$T/$name.out"))"
	took=$(( $(date +%s) - START ))
	[ $took -lt $((SUB_TIMEOUT / 2)) ] || fail "$name took $took s (its timeout: $SUB_TIMEOUT s)"
	ok "$name: received $rec, lost $lost (reported), of $n, ended after $took s"
}

# ---- 1. the data link cut after 20 of 60 messages, the end of the stream
NORESEND=', "resend_window": 0'
RGAPSD_FAULT=cut:20 start_host A "$NORESEND"
start_host B "$NORESEND"
wait_until 10 peer_up A B || fail "session did not come up"
START=$(date +%s)
BG_TIMEOUT=$((SUB_TIMEOUT + 30)) bg sub1 env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub tail --count 60 --verify --allow-gaps --timeout $SUB_TIMEOUT
wait_until 10 knows_sub A B tail || fail "subscription not advertised"
on A "$RGAPS" pub tail --count 60 --size 4KiB >"$T/pub1.out" 2>&1 || fail "pub: $(cat "$T/pub1.out")"
check_sub sub1 60
grep -q "fault injection: data link cut after 20 records" "$T/A.log" || fail "the link was not cut"
grep -q "topic 'tail': .* reports [1-9][0-9]* messages lost" "$T/B.log" || fail "B got no loss notice"
ok "the cut link's loss was told by a loss notice: $(grep -o "reports [0-9]* messages lost" "$T/B.log" | tail -1)"

# ---- 2. the session dies (B stopped past the keepalive), the tail is published meanwhile
START=$(date +%s)
BG_TIMEOUT=$((SUB_TIMEOUT + 30)) bg sub2 env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub tail2 --count 40 --verify --allow-gaps --timeout $SUB_TIMEOUT
wait_until 10 knows_sub A B tail2 || fail "subscription not advertised"
on A "$RGAPS" pub tail2 --count 10 --size 4KiB >"$T/pub2.out" 2>&1 || fail "pub: $(cat "$T/pub2.out")"
landed() { on B "$RGAPS" stats tail2 --json | flat | grep -o '"from_peers":{"messages":[0-9]*' | tr -dc 0-9; }
landed_is() { test "$(landed)" = "$1"; } # evaluated on every poll
wait_until 30 landed_is 10 ||
	fail "B did not land the first 10 messages: $(on B "$RGAPS" stats tail2 --json | flat | grep -o '"from_peers":{[^}]*}')"
kill -STOP "${DPID[B]}"
wait_until 20 eval '! peer_up A B' || { kill -CONT "${DPID[B]}"; fail "A did not notice B stopped"; }
on A "$RGAPS" pub tail2 --count 30 --size 4KiB >"$T/pub3.out" 2>&1 || { kill -CONT "${DPID[B]}"; fail "pub: $(cat "$T/pub3.out")"; }
kill -CONT "${DPID[B]}"
check_sub sub2 40
ok "messages published while the session was down: the loss told when it came back"
