#!/bin/bash
# Every etcd member stopped for ETCD_OUTAGE_S seconds (3 in CI; the slow suite's
# etcd_outage_30s stops them for 30) while A streams to a subscriber on B:
#   - the existing sessions keep delivering: every message verified, no gap;
#   - each daemon says once that etcd is unusable (log, stats) and keeps all;
#   - E, started meanwhile, waits (no session, state unreachable) and joins
#     once etcd is back: A, B and C find it and it finds them;
#   - D, SIGKILLed meanwhile, is dropped once etcd is back (its lease, renewed
#     by etcd's restart, expires with no one renewing it).
# ETCD_MEMBERS (1 here, 3 in the slow variant) is the size of the cluster.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"
OUTAGE=${ETCD_OUTAGE_S:-3}
RATE=40
COUNT=$((RATE * (OUTAGE + 8)))
host A 0; host B 1; host C 2; host D 3; host E 4
start_etcd "${ETCD_MEMBERS:-1}"
for h in A B C D; do NO_WAIT=1 start_host $h; done
for h in A B C D; do wait_until 20 host_answers $h || fail "$h did not come up"; done
wait_until 30 all_live 3 A B C D || fail "A, B, C and D did not find each other: $(ms_json A)"
BG_TIMEOUT=$((OUTAGE + 60)) bg sub env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub out --count $COUNT --verify --timeout $((OUTAGE + 50))
wait_until 20 knows_sub A B out || fail "A never learned that B subscribes"
BG_TIMEOUT=$((OUTAGE + 60)) bg pub env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub out --count $COUNT --size 2KiB --rate $RATE
sleep 1
t0=$SECONDS
for ((i = 0; i < ETCD_N; i++)); do etcd_stop $i; done
ok "all $ETCD_N etcd member(s) stopped while A streams $COUNT messages to B"
wait_until 20 ms_state_is A unreachable || fail "A did not notice that etcd is gone: $(ms_json A)"
NO_WAIT=1 start_host E
wait_until 20 host_answers E || fail "E did not come up without etcd"
wait_until 20 ms_state_is E unreachable || fail "E: $(ms_json E)"
sessions_up E 0 || fail "E has sessions without etcd"
stop_host D KILL
ok "E started and waits; D SIGKILLed"
[ "$(grep -c 'membership: etcd unusable' "$T/A.log")" = 1 ] || fail "A did not say once that etcd is unusable: $(grep membership "$T/A.log")"
left=$((OUTAGE - (SECONDS - t0)))
[ $left -le 0 ] || sleep $left
for h in A B C; do
	ms_state_is $h unreachable || fail "$h: $(ms_json $h)"
	sessions_up $h 2 || fail "$h lost a session in the outage"
done
ok "after $((SECONDS - t0)) s without etcd, A, B and C keep their sessions"
for ((i = 0; i < ETCD_N; i++)); do etcd_run $i; done
wait_until 30 etcd_healthy || fail "etcd did not come back: $(tail -n 5 "$T/etcd0.log")"
wait_until 30 all_live 3 A B C E ||
	fail "after etcd came back: $(for h in A B C E; do echo "$h: $(ms_json $h)"; done)"
ok "etcd back: E joined, D dropped ($((SECONDS - t0)) s after the stop)"
grep -q "membership: etcd answers again after" "$T/A.log" || fail "A did not say that etcd is back"
[ "$(ms_num A outages)" = 1 ] || fail "A: $(ms_json A)"
wait_ok pub
wait_ok sub
expect_sub sub received=$COUNT verified=$COUNT mismatched=0 gaps=0 drops=0
ok "B's subscriber verified all $COUNT messages, no gap"
etcd_finish A B C E
