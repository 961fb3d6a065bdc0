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
wait_until 10 peer_up A B && wait_until 10 peer_up A C || fail "sessions did not come up"

# ---- 1. peer kill and restart (FAULTS_MIN_RECEIVED: what A's and C's subscribers must get of
# the 3000; their overflow policy drops the oldest when they fall behind, as they may when a
# sanitizer slows every process ten times)
bg subC env RGAPS_SOCKET=${SOCK[C]} "$RGAPS" sub live --count 100000 --verify --timeout 120 --allow-gaps
bg subB env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub live --count 100000 --verify --timeout 120 --allow-gaps
bg subA env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" sub live --count 100000 --verify --timeout 120 --allow-gaps
wait_until 10 knows_sub A B live && wait_until 10 knows_sub A C live || fail "subscriptions not advertised"
BG_TIMEOUT=120 bg pub env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub live --count 3000 --size 64KiB --rate 500
sleep 1.5
stop_host B KILL
kill -9 $(pgrep -P "$PID_subB") 2>/dev/null
ok "B killed mid-stream"
sleep 1
kill -0 "$PID_pub" || { wait "$PID_pub"; fail "publisher on A died when B was killed: $(cat "$T/pub.out")"; }
start_host B ', "overflow": "drop_oldest"'
wait_until 10 peer_up A B || fail "A did not reconnect to the restarted B"
bg subB2 env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub live --count 50 --verify --timeout 60 --allow-gaps
wait_ok subB2
grep -q "mismatched 0" "$T/subB2.out" || fail "B after restart: $(tail -1 "$T/subB2.out")"
ok "B restarted: link and topic came back without restarting A: $(tail -1 "$T/subB2.out")"
wait_ok pub
for s in subA subC; do
	kill -INT $(pgrep -P "$(eval echo \$PID_$s)") 2>/dev/null; wait "$(eval echo \$PID_$s)"
	grep -q "mismatched 0" "$T/$s.out" || fail "$s: $(tail -1 "$T/$s.out")"
	n=$(grep -o 'received [0-9]*' "$T/$s.out" | tr -dc 0-9)
	[ "$n" -ge "${FAULTS_MIN_RECEIVED:-2900}" ] || fail "$s lost messages while B was down: $(tail -1 "$T/$s.out")"
	ok "$s unaffected by B's death: $(tail -1 "$T/$s.out")"
done
reconnects=$(on A "$RGAPS" stats --json | flat | grep -o "\"name\":\"127.0.0.1:${PORT[B]}\"[^]]*" | grep -o '"sessions":[0-9]*' | tr -dc 0-9)
[ "${reconnects:-0}" -ge 2 ] || fail "A does not count B's second session"
ok "A counted $reconnects sessions with B"

# ---- 2. hostile control-port traffic and a wrong key
printf 'GET / HTTP/1.0\r\n\r\n' > /dev/tcp/127.0.0.1/${PORT[A]} 2>/dev/null || true
head -c 100000 /dev/urandom > /dev/tcp/127.0.0.1/${PORT[A]} 2>/dev/null || true
head -c 48 /dev/urandom > "$T/badkey"; chmod 600 "$T/badkey"
cat > "$T/D.json" <<JSON
{ "listen": "127.0.0.1:${PORT[D]}", "peers": [ "127.0.0.1:${PORT[A]}" ], "key_file": "$T/badkey", "keepalive_ms": 200 }
JSON
"$RGAPSD" --config "$T/D.json" --socket "${SOCK[D]}" --instance "${INSTANCE}D" >>"$T/D.log" 2>&1 &
PIDS+=($!); dpid=$!
sleep 1.5
kill -TERM $dpid; wait $dpid
on A "$RGAPS" stats --json | flat | grep -q '"auth_failures":[1-9]' || fail "wrong key not counted on A"
on A "$RGAPS" stats --json | flat | grep -q '"protocol_errors":[1-9]' || fail "garbage not counted on A"
kill -0 "${DPID[A]}" || fail "A died"
ok "garbage and a wrong key refused and counted; A serves on"

# ---- 3. senders that corrupt records
for fault in magic oversize offset order outside; do
	stop_host C
	RGAPSD_FAULT=$fault:3 start_host C ', "resend_window": 0' # no good copies sent again
	wait_until 10 peer_up A C || fail "C ($fault) did not come up"
	bg "h$fault" env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" sub evil --count 100000 --verify --timeout 30 --allow-gaps
	wait_until 10 knows_sub C A evil || fail "C did not learn A's subscription"
	on C "$RGAPS" pub evil --count 10 --size 8KiB --rate 100 >/dev/null 2>&1
	# The receiver (A) drops C; for "outside" C's own transport may refuse first (C restarts the session).
	wait_until 10 grep -q "peer 127.0.0.1:${PORT[C]}.*disconnecting\|record for ring.*outside" "$T/A.log" ||
		wait_until 1 grep -q "transport refused a record" "$T/C.log" ||
		fail "the corrupt record was not stopped ($fault): $(tail -5 "$T/A.log")"
	kill -INT $(pgrep -P "$(eval echo \$PID_h$fault)") 2>/dev/null; wait "$(eval echo \$PID_h$fault)"
	grep -q "mismatched 0" "$T/h$fault.out" || fail "corrupt data reached a subscriber ($fault)"
	n=$(grep -o 'received [0-9]*' "$T/h$fault.out" | tr -dc 0-9)
	[ "${n:-0}" -le 3 ] || fail "$fault: subscriber got $n messages, at most the 3 before the fault"
	why=$(grep -h -o "peer 127.0.0.1:${PORT[C]}: .*: disconnecting\|record for ring.*outside the ring[^;]*\|transport refused a record" "$T/A.log" "$T/C.log" | tail -1)
	ok "$fault: stopped ($why); subscriber got $n clean messages"
	cat "$T/A.log" >> "$T/A.old.log"; : > "$T/A.log"
done
for h in A B; do stop_host $h; done
stop_host C
