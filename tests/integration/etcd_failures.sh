#!/bin/bash
# Daemons that die or do not belong, with the membership in etcd:
#  1. C, streaming to a subscriber on A, is SIGKILLed: A and B drop it within
#     the lease TTL + 1 s of the kill (its losses go to A's subscriber as for
#     any dead peer: what it received is intact), and C restarted under
#     another port is found by both;
#  2. W, with another pre-shared key, registers under the prefix: A and B see
#     its record but every session with it is refused (logged, counted), and
#     nothing reaches it or comes from it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"
host A 0; host B 1; host C 2; host W 4
start_etcd 1
for h in A B C; do NO_WAIT=1 start_host $h; done
for h in A B C; do wait_until 20 host_answers $h || fail "$h did not come up"; done
wait_until 30 all_live 2 A B C || fail "A, B and C did not find each other: $(ms_json A)"

# ---- 1. SIGKILL, then back under another port
BG_TIMEOUT=60 bg sub env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" sub dies --count 100000 --verify --timeout 40 --allow-gaps
wait_until 20 knows_sub C A dies || fail "C never learned that A subscribes"
bg pub env RGAPS_SOCKET=${SOCK[C]} "$RGAPS" pub dies --count 100000 --size 256KiB --rate 200
wait_until 20 eval '[ "$(jnum "$(hstats A dies)" messages 2>/dev/null || echo 0)" -gt 20 ]' ||
	fail "A's subscriber got nothing from C"
# Times of day in microseconds: the kill's, and the log line's of each drop (one clock).
tod_us() { local hh mm ss us; IFS=:. read -r hh mm ss us <<<"$1"; echo $(( ((10#$hh * 60 + 10#$mm) * 60 + 10#$ss) * 1000000 + 10#$us )); }
killed=$(tod_us "$(date +%H:%M:%S.%6N)")
stop_host C KILL
end_bg pub
dropped() { grep -q "membership: ${ADDR[C]}:${PORT[C]} left" "$T/$1.log" && hosts_are $1 1; }
wait_until 20 dropped A && wait_until 20 dropped B || fail "C was not dropped: $(ms_json A)"
for h in A B; do
	at=$(tod_us "$(grep "membership: ${ADDR[C]}:${PORT[C]} left" "$T/$h.log" | head -n 1 | cut -d' ' -f1)")
	took=$(( (at - killed + 86400000000) % 86400000000 ))
	[ $took -le $(( (LEASE_TTL + 1) * 1000000 )) ] ||
		fail "$h dropped C $((took / 1000)) ms after the kill: more than the lease TTL + 1 s ($LEASE_TTL + 1 s)"
	ok "$h dropped C $((took / 1000)) ms after the kill (lease TTL $LEASE_TTL s)"
done
stop_bg sub INT 130 # stopped by ^C before its --count
expect_sub sub mismatched=0 verified="$(sub_field sub received)"
ok "A's subscriber: what came from C is intact ($(sub_line sub))"
host C 3 # the same daemon (its instance: its segments are cleaned up) under another port
start_host C
wait_until 30 all_live 2 A B C || fail "C, back under another port, was not found: $(ms_json A)"
ok "C restarted under another port is found by A and B"

# ---- 2. a daemon with another key registered under the prefix
head -c 48 /dev/urandom > "$T/wrongkey"; chmod 600 "$T/wrongkey"
KEY="$T/wrongkey" start_host W
wait_until 30 hosts_are A 3 || fail "A does not see W's record: $(ms_json A)"
refused() { [ "$(jnum "$(hstats "$1")" auth_failures)" -gt 0 ]; }
wait_until 30 refused A || wait_until 30 refused W || fail "no session with W was refused"
grep -q "authentication failed\|does not hold our key" "$T/A.log" "$T/B.log" "$T/W.log" ||
	fail "the refusals are not logged"
sessions_up W 0 || fail "W has a session: $(hstats W)"
bg subW env RGAPS_SOCKET=${SOCK[W]} "$RGAPS" sub wrong --count 11 --timeout 2
bg subA2 env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" sub wrong --count 11 --timeout 2
sleep 1
on W "$RGAPS" pub wrong --count 10 --size 4KiB >/dev/null || fail "publish on W"
on A "$RGAPS" pub wrong --count 10 --size 4KiB >/dev/null || fail "publish on A"
wait_rc subW 4 # its own host's 10 reach it; nothing from A
grep -q "^received 10 " "$T/subW.out" || fail "W's subscriber: $(cat "$T/subW.out")"
wait_rc subA2 4
grep -q "^received 10 " "$T/subA2.out" || fail "A's subscriber: $(cat "$T/subA2.out")"
for h in A W; do
	s=$(hstats $h wrong)
	! grep -q '"from_peers":{"messages":[1-9]' <<<"$s" || fail "$h landed messages of topic wrong from a peer: $s"
done
ok "W's record is seen, its sessions refused and logged, nothing crosses between it and A"
etcd_finish A B C W
