#!/bin/bash
# The remote pipeline's state machines (src/daemon/remote/sender.c and
# receiver.c), two daemons over TCP: A publishes 40 messages of 1 MiB in
# 256 KiB chunks to a verifying subscriber on B. Afterwards every chunk A
# queued went queued -> staged -> reserved -> posted -> sent (4 per message,
# none dropped), every message taken -> queued -> sent -> released, and B's
# records receiving -> landed -> ... -> released, most of them landed straight
# in their pool block; rgaps-top shows the chunk machine.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
# Exact counts of a run without flaps: keepalive at its default, which a loaded machine
# does not trip (a flap sends messages again: remote_resend.sh tests that).
KEEPALIVE_MS=${KEEPALIVE_MS:-2000}
N=40
host A 0; host B 1
for h in A B; do start_host $h ', "chunk_size": "256KiB", "ring_size": "4MiB"'; done
wait_until 10 peer_up A B || fail "A-B session did not come up: $(tail -5 "$T/A.log")"
BG_TIMEOUT=120 bg sub env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub piped --count $N --verify --timeout 100
wait_until 10 knows_sub A B piped || fail "A never learned that B subscribes"
BG_TIMEOUT=120 bg pub env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub piped --count $N --size 1MiB
wait_ok pub
wait_ok sub
expect_sub sub received=$N verified=$N mismatched=0 gaps=0 drops=0
ok "B verified $N messages of 1 MiB"

# count HOST MACHINE TRANSITION: the transition's counter in HOST's stats (0 when absent)
count() {
	local v
	v=$(on "$1" "$RGAPS" stats --json | flat | grep -o "\"$2\":{[^}]*}" | grep -o "\"$3\":[0-9]*" | cut -d: -f2)
	echo "${v:-0}"
}
C=$((N * 4))
# Every record is back (record_sent) once B has everything; give the last completions a moment.
wait_until 10 eval 'test "$(count A sender_chunks "posted->sent")" = $C' ||
	fail "A: posted->sent $(count A sender_chunks 'posted->sent'), expected $C"
for tr in '->queued' 'queued->staged' 'staged->reserved' 'reserved->posted' 'posted->sent'; do
	[ "$(count A sender_chunks "$tr")" = $C ] || fail "A sender_chunks $tr = $(count A sender_chunks "$tr"), expected $C"
done
chunks=$(on A "$RGAPS" stats --json | flat | grep -o '"sender_chunks":{[^}]*}')
! grep -q dropped <<<"$chunks" || fail "A dropped chunks: $chunks"
ok "A: $C chunks queued -> staged -> reserved -> posted -> sent, none dropped"
for tr in '->taken' 'taken->queued' 'queued->sent' 'sent->released'; do
	[ "$(count A sender "$tr")" = $N ] || fail "A sender $tr = $(count A sender "$tr"), expected $N"
done
ok "A: $N messages taken -> queued -> sent -> released"
# tcp tells each record's header before its bytes (record_header): checked as it arrives,
# and a chunk of 256 KiB lands straight in its message's pool block (nothing to copy)
# unless that block could not be loaned yet (then it is copied from the ring as before).
for tr in '->receiving' 'receiving->landed' 'landed->allocated'; do
	[ "$(count B receiver "$tr")" = $C ] || fail "B receiver $tr = $(count B receiver "$tr"), expected $C"
done
direct=$(count B receiver 'allocated->copied')
copied=$(count B receiver 'copying->copied')
[ "$(count B receiver 'allocated->copying')" = "$copied" ] && [ $((direct + copied)) = $C ] ||
	fail "B receiver: $direct chunks straight into the pool, $copied copied, expected $C in all"
[ "$direct" -gt 0 ] || fail "B: no chunk landed straight in its pool block"
[ "$(count B receiver 'copied->published')" = $N ] || fail "B receiver copied->published = $(count B receiver 'copied->published')"
ok "B: $C records receiving -> landed -> allocated -> copied ($direct straight into the pool, $copied copied from the ring), $N published"

TOP="$RGAPS_BUILD/tools/rgaps-top"
if [ -x "$TOP" ]; then
	env RGAPS_SOCKET=${SOCK[A]} timeout -k 2 20 "$TOP" --batch 1 --interval 100 >"$T/top.out" 2>&1 ||
		fail "rgaps-top: $(tail -3 "$T/top.out")"
	grep -q "sender_chunks: in flight" "$T/top.out" || fail "rgaps-top shows no sender_chunks machine"
	grep -q "sender_chunks *posted->sent *$C" "$T/top.out" || fail "rgaps-top: $(grep sender_chunks "$T/top.out")"
	ok "rgaps-top shows the chunk state machine: $(grep 'sender_chunks: in flight' "$T/top.out")"
fi
