#!/bin/bash
# Link down and up: daemons A and B in two network namespaces joined by a veth
# pair that this test creates (addresses only inside those namespaces). The
# link is cut while A publishes; both sides detect it by keepalive, 6 s later;
# A's publisher never hangs; when the link returns, the session, the data link
# and the topic come back by themselves, and B's subscriber sees every message
# either received intact or reported lost (received + lost == published).
# The flap is inside A's resend window, so nothing may be lost upstream: not
# even while the cut goes unnoticed, when A's records pile up on a dead
# socket and the topic's drop_oldest would lap a forwarder whose holds they
# kept (decision 123). The topic's queue holds 2.56 s of the stream: a host
# that leaves A's forwarder unscheduled for longer loses messages to A's own
# drop_oldest, whatever the link does; the cut goes unnoticed for longer.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
NA=rgA$$; NB=rgB$$; VA=rgvA$$; VB=rgvB$$
at_exit ip netns del $NA
at_exit ip netns del $NB
ip netns add $NA 2>"$T/ns.err" || skip "cannot create network namespaces: $(cat "$T/ns.err")"
ip netns add $NB
ip link add $VA type veth peer name $VB 2>"$T/ns.err" || skip "no veth support: $(cat "$T/ns.err")"
ip link set $VA netns $NA; ip link set $VB netns $NB
SUB=$((RANDOM % 200 + 20))
ip -n $NA addr add 10.77.$SUB.1/24 dev $VA; ip -n $NB addr add 10.77.$SUB.2/24 dev $VB
for n in $NA $NB; do ip -n $n link set lo up; done
ip -n $NA link set $VA up; ip -n $NB link set $VB up
ok "namespaces $NA and $NB joined by a veth pair (10.77.$SUB.1 <-> 10.77.$SUB.2)"

KEY="$T/psk"; head -c 48 /dev/urandom > "$KEY"; chmod 600 "$KEY"
PORT=$(( 20000 + RANDOM % 20000 ))
declare -A ADDR=([A]=10.77.$SUB.1 [B]=10.77.$SUB.2) NS=([A]=$NA [B]=$NB) DP
for h in A B; do
	o=B; [ $h = B ] && o=A
	cat > "$T/$h.json" <<JSON
{ "listen": "${ADDR[$h]}:$PORT", "peers": [ "${ADDR[$o]}:$PORT" ], "key_file": "$KEY",
  "keepalive_ms": 2000,
  "defaults": { "transport": "tcp", "overflow": "drop_oldest", "queue_depth": 256 } }
JSON
	ip netns exec ${NS[$h]} "$RGAPSD" --config "$T/$h.json" --socket "$T/$h.sock" \
		--instance "$INSTANCE$h" >>"$T/$h.log" 2>&1 &
	DP[$h]=$!; PIDS+=(${DP[$h]})
done
on() { local h=$1; shift; RGAPS_SOCKET=$T/$h.sock "$@"; }
up() { local s; s=$(on A "$RGAPS" stats --json 2>/dev/null | flat) && grep -q "\"name\":\"${ADDR[B]}:$PORT\",\"up\":true" <<<"$s"; }
knows() { local s; s=$(on A "$RGAPS" stats --json 2>/dev/null | flat) && grep -q "\"subscribes\":\[\"net\"\]" <<<"$s"; }
wait_until 20 up || fail "session did not come up across the veth: $(tail -3 "$T/A.log")"

TOTAL=1000
BG_TIMEOUT=120 bg sub env RGAPS_SOCKET=$T/B.sock "$RGAPS" sub net --count $TOTAL --verify --timeout 60 --allow-gaps
wait_until 20 knows || fail "A did not learn B's subscription"
BG_TIMEOUT=120 bg pub env RGAPS_SOCKET=$T/A.sock "$RGAPS" pub net --count $TOTAL --size 16KiB --rate 100
sleep 1.5
ip -n $NA link set $VA down
ok "link cut"
wait_until 20 grep -q "keepalive timeout" "$T/A.log" || fail "A did not detect the dead link"
wait_until 20 grep -q "keepalive timeout" "$T/B.log" || fail "B did not detect the dead link"
ok "both sides detected the cut by keepalive"
sleep 1
# Still publishing, or (a loaded machine may take its 10 s to get here) done with all.
kill -0 "$PID_pub" 2>/dev/null || grep -q "^published $TOTAL messages .* failures 0$" "$T/pub.out" ||
	fail "publisher on A ended while the link was down: $(cat "$T/pub.out")"
ip -n $NA link set $VA up
wait_until 20 up || fail "session did not come back after the link returned"
ok "link back: session re-established"
wait_ok pub
grep -q "^published $TOTAL messages .* failures 0$" "$T/pub.out" || fail "publisher on A: $(cat "$T/pub.out")"
wait_ok sub
expect_accounted sub $TOTAL
line=$(sub_line sub)
rcv=$(sub_field sub received)
drops=$(sub_field sub drops)
gaps=$(sub_field sub gaps)
# Down about 8 s at 100 messages of 16 KiB a second: inside the resend window, nothing
# lost on the way (B's own drop_oldest may still skip some, counted below).
[ "$rcv" -gt $((TOTAL / 2)) ] || fail "too few received after the link came back: $line"
ok "B: $rcv received intact, $((drops + gaps)) reported lost, none silently: $line"
# The subscriber's reported losses (its 'drops': the gap counts the daemon handed it)
# are what B saw lost upstream plus what B's own drop_oldest skipped.
bs=$(on B "$RGAPS" stats net --json | flat)
[ -n "$bs" ] || fail "B's stats: no answer"
fg=$(grep -o '"from_peers":{[^}]*}' <<< "$bs" | grep -o '"gaps":[0-9]*' | cut -d: -f2)
ld=$(grep -o '"drops_total":[0-9]*' <<< "$bs" | head -1 | cut -d: -f2)
[ -n "$fg" ] && [ -n "$ld" ] && [ $((fg + ld)) = "$drops" ] ||
	fail "B's stats: ${fg:-no} upstream gaps + ${ld:-no} local drops, its subscriber was told of $drops"
ok "B's stats: $fg lost upstream + $ld dropped here = the $drops its subscriber was told of"
[ "$fg" = 0 ] || fail "$fg messages lost upstream although the flap was inside the resend window"
s=$(on A "$RGAPS" stats net --json | flat)
sent=$(grep -o '"resent":[0-9]*' <<<"$s" | head -1 | tr -dc 0-9) || true
ok "nothing lost upstream: A sent ${sent:-0} messages again after the reconnect"
s=$(on A "$RGAPS" stats --json | flat)
n=$(jnum "$s" sessions)
[ "${n:-0}" -ge 2 ] || fail "A counts $n sessions with B"
ok "A counted $n sessions with B"
for h in A B; do stop_pid ${DP[$h]} $h || fail "$h did not stop cleanly"; forget_pid ${DP[$h]}; done
