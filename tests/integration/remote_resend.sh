#!/bin/bash
# The resend window: a link flap inside the window loses
# nothing, one beyond it reports exactly what it lost.
#  1. The data link is cut after 50 of 200 messages (the test-only fault
#     transport, RGAPSD_FAULT=cut:50 on the sender) with the default window:
#     every message is received once, verified, nothing lost, and the sender
#     counts messages sent again.
#  2. The same with a window of 16 messages, cut after 20 of 100: what fell out
#     of the window is reported lost, received + lost = 100 exactly.
#  3. A window of 4 messages while the publisher runs on through the cut and
#     the reconnect: copies being sent again are wanted for new ones; every
#     message is received intact or reported lost.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
[ -d "$RGAPS_BUILD/tests/fault/plugins" ] || { echo "SKIP: the fault transport plugin was not built (tcp transport absent)"; exit 77; }
SUB_TIMEOUT=120

# field HOST KEY: the first number KEY has in HOST's stats (peers.forwarders[] and sessions[])
field() { on "$1" "$RGAPS" stats --json | flat | grep -o "\"$2\":[0-9]*" | head -1 | tr -dc 0-9; }
# summary NAME KEY: a number from a subscriber's summary line
summary() { grep '^received' "$T/$1.out" | grep -o "$2 [0-9]*" | tr -dc 0-9; }

# run_flap CUT N WINDOW_JSON: fresh hosts, the link cut after CUT records, N messages of 4 KiB
run_flap() {
	local cut=$1 n=$2 win=$3 tag=$4
	for h in A B; do [ -n "${DPID[$h]:-}" ] && stop_host $h; done
	host A 0; host B 1
	RGAPSD_FAULT=cut:$cut start_host A "$win"
	start_host B "$win"
	wait_until 10 peer_up A B || fail "session did not come up"
	START=$(date +%s)
	BG_TIMEOUT=$((SUB_TIMEOUT + 30)) bg "sub$tag" env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub flap --count "$n" --verify --allow-gaps --timeout $SUB_TIMEOUT
	wait_until 10 knows_sub A B flap || fail "subscription not advertised"
	on A "$RGAPS" pub flap --count "$n" --size 4KiB >"$T/pub$tag.out" 2>&1 || fail "pub: $(cat "$T/pub$tag.out")"
	wait_ok "sub$tag"
	grep -q "fault injection: data link cut after $cut records" "$T/A.log" || fail "the link was not cut"
	grep -q "mismatched 0" "$T/sub$tag.out" || fail "sub$tag: $(tail -1 "$T/sub$tag.out")"
	[ $(( $(date +%s) - START )) -lt $((SUB_TIMEOUT / 2)) ] || fail "sub$tag waited for its timeout"
}

# ---- 1. a flap inside the window: nothing lost, nothing twice
run_flap 50 200 "" 1
rec=$(summary sub1 received); lost=$(summary sub1 drops); gaps=$(summary sub1 gaps)
[ "$rec" = 200 ] && [ "$lost" = 0 ] && [ "$gaps" = 0 ] ||
	fail "flap inside the window: $(tail -1 "$T/sub1.out")"
resent=$(field A resent)
[ "${resent:-0}" -gt 0 ] || fail "A counts no message sent again ($(on A "$RGAPS" stats --json | flat | grep -o '"forwarders":[^]]*'))"
dups=$(field B duplicates)
ok "flap inside the window: 200 of 200 received once, verified; $resent sent again, $dups duplicates dropped"

# ---- 2. a flap beyond the window (16 messages of 4 KiB): the rest reported lost, exactly
run_flap 20 100 ', "resend_window": "64KiB"' 2
rec=$(summary sub2 received); lost=$(summary sub2 drops)
[ $((rec + lost)) -eq 100 ] || fail "flap beyond the window: received $rec + lost $lost != 100"
[ "$lost" -gt 0 ] || fail "flap beyond the window lost nothing: the window was not exceeded"
resent=$(field A resent)
[ "${resent:-0}" -gt 0 ] || fail "A sent nothing again"
ok "flap beyond the window: received $rec, lost $lost (reported), of 100; $resent sent again"

# ---- 3. a window of four messages while the publisher runs through the flap: the sender
# sends again from copies that new messages want the place of (a copy being sent again is
# never overwritten: the newest goes unkept and is reported lost if the flap needs it), from
# a small ring that makes the records sent again wait for room
for h in A B; do stop_host $h; done
host A 0; host B 1
win=', "resend_window": "32KiB", "ring_size": "32KiB", "chunk_size": "8KiB", "overflow": "drop_oldest"'
RGAPSD_FAULT=cut:60 start_host A "$win"
start_host B "$win"
wait_until 10 peer_up A B || fail "session did not come up"
BG_TIMEOUT=$((SUB_TIMEOUT + 30)) bg sub3 env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub flap --count 1000 --verify --allow-gaps --timeout $SUB_TIMEOUT
wait_until 10 knows_sub A B flap || fail "subscription not advertised"
on A "$RGAPS" pub flap --count 1000 --size 8KiB --rate 1000 >"$T/pub3.out" 2>&1 || fail "pub: $(cat "$T/pub3.out")"
wait_ok sub3
grep -q "fault injection: data link cut after 60 records" "$T/A.log" || fail "the link was not cut"
expect_accounted sub3 1000
# How many went again depends on the race between the reconnect and the publisher, which
# may have filled the four places with messages newer than the first the new ring carries.
s=$(on A "$RGAPS" stats --json | flat)
ok "flap with a window of 4 messages, publisher running: $(sub_line sub3 | cut -d';' -f1); $(jnum "$s" resent) sent again, $(jnum "$s" resend_unkept) unkept, $(jnum "$s" resend_evicted) overwritten"
