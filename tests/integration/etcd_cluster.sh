#!/bin/bash
# Membership on a 3-member etcd cluster: the 12 daemons of etcd_mesh.sh find
# each other and mesh through it; then the member every daemon talks to is
# SIGKILLed (a follower: the leader's loss is an election, an outage of etcd
# that etcd_outage.sh covers) while a publisher streams to a subscriber on another host: nothing
# is noticed by the clients (every message verified, no gap), the daemons go
# on with another member, and a daemon started afterwards is found by all.
ETCD_MEMBERS=3
MESH_GOES_ON=1
. "$(dirname "$0")/etcd_mesh.sh"
bg stream env RGAPS_SOCKET=${SOCK[H1]} "$RGAPS" sub stream --count 200 --verify --timeout 60
wait_until 20 knows_sub H0 H1 stream || fail "H0 never learned that H1 subscribes to stream"
bg streampub env RGAPS_SOCKET=${SOCK[H0]} "$RGAPS" pub stream --count 200 --size 4KiB --rate 40
sleep 1 # a part of the stream before the kill, the rest after it
# Every daemon starts with the first endpoint: the member they all use dies. It is not the
# leader (an election would leave etcd without one for a while: an outage, etcd_outage.sh).
etcd_not_leader 0
etcd_stop 0 KILL
ok "etcd member e0 SIGKILLed while 200 messages stream from H0 to H1"
wait_ok streampub
wait_ok stream
expect_sub stream received=200 verified=200 mismatched=0 gaps=0 drops=0
moved() { # every daemon renewed its lease through another member since the kill
	local h
	for h in "${HOSTS[@]}"; do
		ms_state_is "$h" live && ms_json "$h" | grep -q "\"endpoint\":\"$(etcd_url 1)\"\|\"endpoint\":\"$(etcd_url 2)\"" || return 1
	done
}
wait_until 30 moved || fail "not every daemon went on with another member: $(for h in "${HOSTS[@]}"; do ms_json $h; echo; done)"
for h in "${HOSTS[@]}"; do
	[ "$(ms_num "$h" outages)" = 0 ] || fail "$h took the loss of one member for an outage: $(ms_json "$h")"
done
ok "the subscriber verified all 200 messages, no gap; every daemon went on with another member"

host H12 12
HOSTS+=(H12)
start_host H12 "$SMALL"
wait_until 30 all_live 12 "${HOSTS[@]}" ||
	fail "H12 was not found by all: $(for h in "${HOSTS[@]}"; do echo "$h: $(ms_json $h)"; done)"
ok "H12, started after the kill, found by the other 12 (and they by it)"
etcd_finish "${HOSTS[@]}"
