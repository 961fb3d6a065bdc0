#!/bin/bash
# Link down and up: daemons A and B in two network namespaces joined by a veth
# pair that this test creates (addresses only inside those namespaces). The
# link is cut while A publishes; both sides detect it by keepalive; A's
# publisher never hangs; when the link returns, the session, the data link and
# the topic come back by themselves, and B's subscriber sees every message
# either received intact or reported lost (received + lost == published).
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root to create network namespaces"; exit 77; }
command -v ip >/dev/null || { echo "SKIP: iproute2 (ip) is not installed"; exit 77; }
NA=rgA$$; NB=rgB$$; VA=rgvA$$; VB=rgvB$$
net_cleanup() { ip netns del $NA 2>/dev/null; ip netns del $NB 2>/dev/null; }
trap 'rc=$?; net_cleanup; (exit $rc); cleanup' EXIT
ip netns add $NA 2>"$T/ns.err" || { echo "SKIP: cannot create network namespaces: $(cat "$T/ns.err")"; exit 77; }
ip netns add $NB
ip link add $VA type veth peer name $VB || { echo "SKIP: no veth support"; exit 77; }
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
  "keepalive_ms": 200, "defaults": { "transport": "tcp", "overflow": "drop_oldest" } }
JSON
	ip netns exec ${NS[$h]} "$RGAPSD" --config "$T/$h.json" --socket "$T/$h.sock" \
		--instance "$INSTANCE$h" >>"$T/$h.log" 2>&1 &
	DP[$h]=$!; PIDS+=(${DP[$h]})
done
on() { local h=$1; shift; RGAPS_SOCKET=$T/$h.sock "$@"; }
flat() { tr -d ' \t\n'; }
up() { on A "$RGAPS" stats --json 2>/dev/null | flat | grep -q "\"name\":\"${ADDR[B]}:$PORT\",\"up\":true"; }
knows() { on A "$RGAPS" stats --json 2>/dev/null | flat | grep -q "\"subscribes\":\[\"net\"\]"; }
wait_until 10 up || fail "session did not come up across the veth: $(tail -3 "$T/A.log")"

TOTAL=600
BG_TIMEOUT=120 bg sub env RGAPS_SOCKET=$T/B.sock "$RGAPS" sub net --count $TOTAL --verify --timeout 60 --allow-gaps
wait_until 10 knows || fail "A did not learn B's subscription"
BG_TIMEOUT=120 bg pub env RGAPS_SOCKET=$T/A.sock "$RGAPS" pub net --count $TOTAL --size 16KiB --rate 100
sleep 1.5
ip -n $NA link set $VA down
ok "link cut"
wait_until 5 grep -q "keepalive timeout" "$T/A.log" || fail "A did not detect the dead link"
wait_until 5 grep -q "keepalive timeout" "$T/B.log" || fail "B did not detect the dead link"
ok "both sides detected the cut by keepalive"
sleep 1
kill -0 "$PID_pub" 2>/dev/null || { wait "$PID_pub"; [ $? = 0 ] || fail "publisher failed while the link was down"; }
ip -n $NA link set $VA up
wait_until 15 up || fail "session did not come back after the link returned"
ok "link back: session re-established"
wait_ok pub
wait_ok sub
line=$(tail -1 "$T/sub.out")
rcv=$(echo "$line" | grep -o 'received [0-9]*' | tr -dc 0-9)
drops=$(echo "$line" | grep -o 'drops [0-9]*' | tr -dc 0-9)
gaps=$(echo "$line" | grep -o 'gaps [0-9]*' | tr -dc 0-9)
echo "$line" | grep -q "mismatched 0" || fail "corrupt data: $line"
[ $((rcv + drops + gaps)) = $TOTAL ] || fail "received $rcv + reported lost $((drops + gaps)) != $TOTAL published"
# Down about 2.5 s at 100 messages of 16 KiB a second: inside the resend window, nothing
# lost on the way (B's own drop_oldest may still skip some, counted below).
[ "$rcv" -gt $((TOTAL / 2)) ] || fail "too few received after the link came back: $line"
ok "B: $rcv received intact, $((drops + gaps)) reported lost, none silently: $line"
# The subscriber's reported losses (its 'drops': the gap counts the daemon handed it)
# are what B saw lost upstream plus what B's own drop_oldest skipped.
bs=$(on B "$RGAPS" stats net --json | flat)
fg=$(grep -o '"from_peers":{[^}]*}' <<< "$bs" | grep -o '"gaps":[0-9]*' | cut -d: -f2)
ld=$(grep -o '"drops_total":[0-9]*' <<< "$bs" | head -1 | cut -d: -f2)
[ -n "$fg" ] && [ -n "$ld" ] && [ $((fg + ld)) = "$drops" ] ||
	fail "B's stats: ${fg:-no} upstream gaps + ${ld:-no} local drops, its subscriber was told of $drops"
ok "B's stats: $fg lost upstream + $ld dropped here = the $drops its subscriber was told of"
[ "$fg" = 0 ] || fail "$fg messages lost upstream although the flap was inside the resend window"
sent=$(on A "$RGAPS" stats net --json | flat | grep -o '"resent":[0-9]*' | head -1 | tr -dc 0-9)
ok "nothing lost upstream: A sent ${sent:-0} messages again after the reconnect"
n=$(on A "$RGAPS" stats --json | flat | grep -o '"sessions":[0-9][0-9]*' | head -1 | tr -dc 0-9)
[ "${n:-0}" -ge 2 ] || fail "A counts $n sessions with B"
ok "A counted $n sessions with B"
for h in A B; do kill -TERM ${DP[$h]}; wait ${DP[$h]} || fail "$h exited badly"; done
