#!/bin/bash
# The topic set-up and the data link it names travel on two sockets, with no
# order between them: the sender may ask for a ring before the receiver has
# accepted the data link. Host B (the subscriber's) is made to handle each
# accepted data link 1.5 s late (RGAPSD_FAULT=late_accept), so A's set-up
# surely arrives first. B must hold it until the link is up, answer it then,
# and every message must reach B's subscriber; nothing is refused.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
host A 0; host B 1
COUNT=200
RGAPSD_FAULT=late_accept:1500 start_host B
grep -q "RGAPSD_FAULT=late_accept" "$T/B.log" || fail "B did not take the fault"
bg sub env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub race --count $COUNT --verify --timeout 30
# B has tried A in vain by now and waits out its back-off: A, started next,
# connects first, so B is the end that accepts the data link.
sleep 1
start_host A
wait_until 5 knows_sub A B race || fail "A did not learn B's subscription"
# The attach waits for B's ring (at most 5 s), which B answers when its link is up.
BG_TIMEOUT=60 bg pub env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub race --count $COUNT --size 64KiB \
	--rate 200
wait_ok pub
wait_ok sub
grep -q "verified $COUNT" "$T/sub.out" || fail "B's subscriber: $(tail -1 "$T/sub.out")"
ok "B's subscriber verified all $COUNT messages: $(tail -1 "$T/sub.out")"
if grep -q "peer 127.0.0.1:${PORT[B]} up (we connected)" "$T/A.log"; then
	n=$(on B "$RGAPS" stats --json | flat | grep -o '"setups_deferred":[0-9]*' | head -1 | tr -dc 0-9)
	[ "${n:-0}" -ge 1 ] || fail "B never held a set-up for its data link (setups_deferred ${n:-none})"
	ok "B held $n set-up(s) until the data link was up"
else
	ok "B connected first this time: the race was not provoked (delivery checked anyway)"
fi
r=$(on A "$RGAPS" stats --json | flat | grep -o '"setup_refusals":[0-9]*' | head -1 | tr -dc 0-9)
[ "${r:-x}" = 0 ] || fail "A saw ${r:-no count of} set-up refusals"
ok "A saw no set-up refused"
for h in A B; do stop_host $h; done
