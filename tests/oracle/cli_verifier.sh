#!/bin/bash
# The payload oracle of `rgaps sub --verify`, fed wrong data of every kind
# (tests/oracle/oracle_pub.c): it must count exactly the planted bad messages
# as mismatched, say which one and why, and exit 3; the control run (nothing
# planted) must verify all. Locally, then with two publishers (two streams),
# then across two daemons (the remote path: messages carry the sequence number
# they had on A).
. "$(dirname "$(dirname "$0")")/integration/lib.sh"
ORACLE_PUB="$RGAPS_BUILD/tests/oracle/oracle-pub"
N=8   # messages per run; the fault is planted at message 4 (4101 bytes each)

# KIND MISMATCHED WHAT-THE-SUBSCRIBER-MUST-SAY (about message 4; origin seq = seq here)
CASES=(
	"none 0 -"
	"body 1 seq 4 (origin seq 4, 4101 bytes, counter 4): payload differs from the pattern at byte 2056"
	"first 1 seq 4 (origin seq 4, 4101 bytes, counter 4): payload differs from the pattern at byte 16"
	"last 1 seq 4 (origin seq 4, 4101 bytes, counter 4): payload differs from the pattern at byte 4096"
	"counter 1 seq 4 (origin seq 4, 4101 bytes, counter 1073741828): payload differs from the pattern at byte 16"
	"size 1 seq 4 (origin seq 4, 4101 bytes, counter 4): payload differs from the pattern at byte 8"
	"torn 1 seq 4 (origin seq 4, 4101 bytes, counter 4): payload differs from the pattern at byte 2048"
	"duplicate 1 seq 4 (origin seq 4, 4101 bytes): counter 3: the payload of the message before it"
	"stale 1 seq 4 (origin seq 4, 4101 bytes): counter 1: an older payload (stale)"
	"reorder 2 seq 4 (origin seq 4, 4101 bytes): counter 5: a later payload"
	"skip 4 seq 4 (origin seq 4, 4101 bytes): counter 5: a later payload"
)

# run WHERE-SUB WHERE-PUB TOPIC KIND MISMATCHED WHAT: one run, checked
run() {
	local subsock=$1 pubsock=$2 topic=$3 kind=$4 m=$5 what=$6 want=3
	[ "$m" = 0 ] && want=0
	bg "s_$topic" env RGAPS_SOCKET="$subsock" "$RGAPS" sub "$topic" --count $N --verify --timeout 30
	wait_until 20 grep -q "^subscribed" "$T/s_$topic.out" || fail "$topic: subscriber did not attach"
	[ -z "${WAIT_REMOTE:-}" ] || wait_until 20 knows_sub A B "$topic" || fail "A did not learn B subscribes to $topic"
	RGAPS_SOCKET="$pubsock" "$ORACLE_PUB" "$topic" "$kind" --count $N >"$T/p_$topic.out" 2>&1 ||
		fail "oracle-pub $kind: $(cat "$T/p_$topic.out")"
	wait_rc "s_$topic" $want
	expect_sub "s_$topic" received=$N verified=$((N - m)) mismatched="$m" gaps=0 drops=0
	if [ "$m" != 0 ]; then
		grep -qF "rgaps sub: message $what" "$T/s_$topic.out" ||
			fail "$kind: the subscriber does not say 'message $what': $(grep 'rgaps sub:' "$T/s_$topic.out")"
		[ "$(grep -c '^rgaps sub: message seq' "$T/s_$topic.out")" = "$m" ] ||
			fail "$kind: not one line per mismatch: $(grep 'rgaps sub:' "$T/s_$topic.out")"
	fi
}

start_daemon
for c in "${CASES[@]}"; do
	read -r kind m what <<<"$c"
	run "$RGAPS_SOCKET" "$RGAPS_SOCKET" "o_$kind" "$kind" "$m" "$what"
	ok "local, $kind: $m of $N mismatched"
done

# Two publishers one after the other: two streams, each numbered from 0, both verified.
bg two "$RGAPS" sub two --count 8 --verify --timeout 30
wait_until 20 subs_are two 1 || fail "subscriber did not attach"
"$RGAPS" pub two --count 5 --size 1KiB >/dev/null
"$RGAPS" pub two --count 3 --size 1KiB >/dev/null
wait_ok two
expect_sub two received=8 verified=8 mismatched=0 streams=2
ok "two publishers, two streams from 0: all 8 verified"
stop_daemon

# The remote path: a publisher on A, the verifying subscriber on B.
. "$(dirname "$(dirname "$0")")/integration/remote_lib.sh"
host A 0; host B 1
for h in A B; do start_host $h; done
wait_until 20 peer_up A B || fail "A-B session did not come up"
WAIT_REMOTE=1
for c in "${CASES[@]}"; do
	read -r kind m what <<<"$c"
	case $kind in none | body | duplicate | stale | reorder | skip) ;; *) continue ;; esac
	run "${SOCK[B]}" "${SOCK[A]}" "r_$kind" "$kind" "$m" "$what"
	ok "A -> B, $kind: $m of $N mismatched"
done
for h in A B; do stop_host $h; done
