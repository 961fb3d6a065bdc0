#!/bin/bash
# Faults across hosts (TCP transport, three daemons on loopback):
#  1. kill -9 of B mid-stream: A keeps serving C and its local subscribers, its
#     publisher never hangs; B restarted: the link and topic come back without
#     restarting A or its clients.
#  2. hostile peers: garbage on the control port, a daemon with the wrong key,
#     and senders that corrupt records (bad magic, oversize, wrong offset,
#     records out of order, offset outside the ring): each is disconnected with
#     a logged reason and nothing it sent reaches subscribers.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
host A 0; host B 1; host C 2; host D 3   # D: listed by all, started later with a wrong key
for h in A B C; do start_host $h ', "overflow": "drop_oldest"'; done
wait_until 20 peer_up A B && wait_until 20 peer_up A C || fail "sessions did not come up"

# ---- 1. peer kill and restart. A's and C's subscribers account for every one of the
# 3000 messages (received intact or reported lost), and B's death cost them nothing
# on the way: no gap (a message lost upstream of them). Their own overflow policy may
# still drop the oldest when they fall behind on a loaded machine (drops, counted);
# how many is the machine's business, not B's, so no floor on what they received.
N=3000
for h in C B A; do
	bg "sub$h" env RGAPS_SOCKET=${SOCK[$h]} "$RGAPS" sub live --count $N --verify --timeout 120 --allow-gaps
done
wait_until 20 knows_sub A B live && wait_until 20 knows_sub A C live || fail "subscriptions not advertised"
BG_TIMEOUT=120 bg pub env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub live --count $N --size 64KiB --rate 500
wait_until 30 grep -q "^subscribed" "$T/subB.out" || fail "subB never subscribed"
wait_until 30 on B subs_are live 1 || fail "subB is not attached on B"
sleep 1.5
stop_host B KILL
end_bg subB # (it may have seen its daemon die and ended already)
ok "B killed mid-stream"
sleep 1
# Still publishing, or (a loaded machine may take the 6 s of its stream to get here) done
# with every message published; its status is checked below.
kill -0 "$PID_pub" 2>/dev/null || grep -q "^published $N messages .* failures 0$" "$T/pub.out" ||
	fail "publisher on A died when B was killed: $(cat "$T/pub.out")"
start_host B ', "overflow": "drop_oldest"'
wait_until 20 peer_up A B || fail "A did not reconnect to the restarted B"
# The new B's topic starts with whatever message of A's stream comes first; each
# carries the sequence number it had on A, which its payload must match.
bg subB2 env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub live --count 50 --verify --timeout 60 --allow-gaps
wait_ok subB2
expect_sub subB2 mismatched=0 verified="$(sub_field subB2 received)"
ok "B restarted: link and topic came back without restarting A: $(sub_line subB2)"
wait_ok pub
grep -q "^published $N messages .* failures 0$" "$T/pub.out" || fail "publisher on A: $(cat "$T/pub.out")"
for s in subA subC; do
	wait_ok $s
	expect_accounted $s $N
	expect_sub $s gaps=0
	ok "$s unaffected by B's death, all $N accounted for: $(sub_line $s)"
done
s=$(hstats A)
reconnects=$(grep -o "\"name\":\"127.0.0.1:${PORT[B]}\"[^]]*" <<<"$s" | grep -o '"sessions":[0-9]*' | tr -dc 0-9) || true
[ "${reconnects:-0}" -ge 2 ] || fail "A does not count B's second session: $s"
ok "A counted $reconnects sessions with B"

# ---- 2. hostile control-port traffic and a wrong key
printf 'GET / HTTP/1.0\r\n\r\n' > /dev/tcp/127.0.0.1/${PORT[A]} 2>/dev/null || true
head -c 100000 /dev/urandom > /dev/tcp/127.0.0.1/${PORT[A]} 2>/dev/null || true
head -c 48 /dev/urandom > "$T/badkey"; chmod 600 "$T/badkey"
cat > "$T/D.json" <<JSON
{ "listen": "127.0.0.1:${PORT[D]}", "peers": [ "127.0.0.1:${PORT[A]}" ], "key_file": "$T/badkey", "keepalive_ms": 200 }
JSON
"$RGAPSD" --config "$T/D.json" --socket "${SOCK[D]}" --instance "${INSTANCE}D" >>"$T/D.log" 2>&1 &
dpid=$!
PIDS+=($dpid)
# A must refuse D's proof itself (D connects to A: A checks first). D refusing A's
# proof and telling A so would also count as an authentication failure on A, but
# it is D's check, not A's.
wait_until 20 grep -q "authentication failed: 127.0.0.1:${PORT[D]} does not hold our key" "$T/A.log" ||
	fail "A did not refuse D's proof itself: $(grep -h "${PORT[D]}" "$T/A.log" | tail -n 5)"
wait_until 20 grep -q "refused by the other side: authentication failed" "$T/D.log" ||
	fail "D was not told that A refused it: $(tail -n 5 "$T/D.log")"
stop_pid $dpid D || fail "D did not stop cleanly"
forget_pid $dpid
grep -q "peer 127.0.0.1:${PORT[A]} up" "$T/D.log" && fail "D, with the wrong key, had a session with A"
s=$(hstats A)
[ "$(jnum "$s" auth_failures)" -ge 1 ] || fail "wrong key not counted on A: $s"
[ "$(jnum "$s" protocol_errors)" -ge 1 ] || fail "garbage not counted on A: $s"
kill -0 "${DPID[A]}" || fail "A died"
ok "garbage and a wrong key refused by A itself and counted; A serves on"

# corrupt_stopped: a predicate for wait_until: A dropped C for its corrupt record, or C's own
# transport refused to send it.
corrupt_stopped() {
	grep -q "peer 127.0.0.1:${PORT[C]}.*disconnecting\|record for ring.*outside" "$T/A.log" ||
		grep -q "transport refused a record" "$T/C.log"
}

# ---- 3. senders that corrupt records (RGAPSD_FAULT=KIND:3: after 3 good records).
# A fresh topic for each, so that its numbering starts with C's publisher.
for fault in magic oversize offset order outside; do
	stop_host C
	RGAPSD_FAULT=$fault:3 start_host C ', "resend_window": 0' # no good copies sent again
	grep -q "RGAPSD_FAULT=$fault" "$T/C.log" || fail "C did not take the fault $fault"
	wait_until 20 peer_up A C || fail "C ($fault) did not come up"
	bg "h$fault" env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" sub "evil_$fault" --count 100000 --verify --timeout 30 --allow-gaps
	wait_until 20 knows_sub C A "evil_$fault" || fail "C did not learn A's subscription"
	on C "$RGAPS" pub "evil_$fault" --count 10 --size 8KiB --rate 100 >"$T/cpub.out" 2>&1 || true
	# The receiver (A) drops C; for "outside" C's own transport may refuse first (C restarts
	# the session): either ends the wait (one predicate, so neither waits out the other's time).
	wait_until 20 corrupt_stopped ||
		fail "the corrupt record was not stopped ($fault): $(tail -5 "$T/A.log")"
	stop_bg "h$fault" INT 130
	n=$(sub_field "h$fault" received)
	expect_sub "h$fault" mismatched=0 verified="$n"
	[ "$n" -le 3 ] || fail "$fault: subscriber got $n messages, at most the 3 before the fault"
	why=$(grep -h -o "peer 127.0.0.1:${PORT[C]}: .*: disconnecting\|record for ring.*outside the ring[^;]*\|transport refused a record" "$T/A.log" "$T/C.log" | tail -1)
	ok "$fault: stopped ($why); subscriber got $n clean messages"
	cat "$T/A.log" >> "$T/A.old.log"; : > "$T/A.log"
done
for h in A B C; do stop_host $h; done
