#!/bin/bash
# The objects are rgapsd's (docs/SECURITY.md, "The objects"): a hostile local user attacks
# the shared-memory objects themselves, not their bytes, against rgapsd running as its own
# user, while an honest verifying pair of a third user runs beside it:
#   - shrinking (ftruncate to 0, the attack that killed rgapsd with SIGBUS), growing,
#     punching holes, resealing, reopening read-write, on every fd rgapsd hands it, as a
#     publisher and a subscriber of a shared topic and of a topic of its own, and leaving;
#   - squatting the names rgapsd used in /dev/shm, with files of its own, before rgapsd
#     starts and while it runs (the attacker needs no access to the socket);
#   - a second rgapsd with the same instance name (two containers sharing /dev/shm derive
#     the same name from the same socket path), started, killed and restarted meanwhile.
# Throughout and after: rgapsd lives, the honest pairs verify every message, /dev/shm holds
# no name of rgapsd's, and a fresh pair works.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/limits_lib.sh"
. "$(dirname "$0")/attack_lib.sh"
need_users
OBJECTS="$RGAPS_BUILD/tests/integration/itest-objects"
N=1500

three_users 61010
mkdir -p "$T/topics.d"
echo "{ \"allowed_uids\": [$HUID] }" >"$T/topics.d/secret.json"
cat >"$T/rgapsd.json" <<JSON
{ "topics_dir": "$T/topics.d",
  "defaults": { "pool_size": "1MiB", "max_message_size": "64KiB", "overflow": "drop_oldest",
                "memory": "host" } }
JSON

# Names rgapsd once made in /dev/shm, taken first by the attacker: mode 0666, empty.
squat() {
	local t r
	for t in open secret mine; do
		for r in meta p0.1 p0.1-pool s0.1 s1.2 pub pub-pool sub; do
			"${ATTACKER[@]}" sh -c "umask 0; : >/dev/shm/rgaps-$INSTANCE-$t-$r" || true
		done
	done
	"${ATTACKER[@]}" sh -c "umask 0; : >/dev/shm/rgaps-hostfence-1-0"
}
unsquat() { rm -f /dev/shm/rgaps-"$INSTANCE"-* /dev/shm/rgaps-hostfence-1-0; }
at_exit unsquat
squat
start_daemon -c "$T/rgapsd.json"
[ "$(stat -c %u "/proc/$DAEMON_PID")" = $DUID ] || fail "rgapsd does not run as uid $DUID"
ok "rgapsd runs as uid $DUID; $(ls /dev/shm | grep -c "^rgaps-$INSTANCE-") names squatted before it started"

answers_fast() {
	for q in topics stats; do
		timeout 1 "$RGAPS" $q >/dev/null || fail "rgaps $q did not answer within 1 s ($1)"
	done
	kill -0 "$DAEMON_PID" || fail "rgapsd died ($1)"
}

# The honest pairs, on a topic the attacker shares and on one it may not attach to.
pairs() { for t in open secret; do honest_pair "$1$t" $t "$2"; done; }
pairs_verified() { for t in open secret; do honest_pair_verified "$1$t" "$2"; done; }
pairs a $N

# Shrink, grow, punch, reseal, reopen: as a publisher and a subscriber of the shared topic,
# and as the publisher of a topic of its own; each stays a moment, then leaves.
round=0
for spec in "open pub" "open sub" "mine pub" "mine sub"; do
	round=$((round + 1))
	bg "shrink$round" "${ATTACKER[@]}" "$OBJECTS" shrink $spec 0.5
	wait_ok "shrink$round"
	grep -q "^objects: .* refused" "$T/shrink$round.out" || fail "$spec: $(cat "$T/shrink$round.out")"
	answers_fast "after the attack of $spec"
	ok "$spec: $(grep '^objects:' "$T/shrink$round.out" | sed 's/; staying.*//')"
done
"${ATTACKER[@]}" "$RGAPS" sub secret --count 0 >"$T/denied.out" 2>&1 && fail "the attacker attached to 'secret'"

# Squatting while it runs, and a second rgapsd of the same instance name beside it.
squat
mkdir -p "$T/run2"
chown "$DUID:$DUID" "$T/run2"
second() {
	"${DAEMON_AS[@]}" "$RGAPSD" -c "$T/rgapsd.json" --socket "$T/run2/rgapsd.sock" \
		--instance "$INSTANCE" >>"$T/second.log" 2>&1 &
	SECOND=$!
	PIDS+=("$SECOND")
	wait_until 20 test -S "$T/run2/rgapsd.sock" || fail "the second rgapsd did not start: $(tail -3 "$T/second.log")"
}
second
"${HONEST[@]}" env RGAPS_SOCKET="$T/run2/rgapsd.sock" "$RGAPS" sub open --count 0 >/dev/null ||
	fail "no topic 'open' on the second rgapsd"
kill -KILL "$SECOND"
wait "$SECOND" 2>/dev/null || true
forget_pid "$SECOND"
second
answers_fast "beside a second rgapsd of instance $INSTANCE, killed and restarted"
ok "a second rgapsd of instance $INSTANCE made topic 'open', was killed and restarted beside it"

pairs_verified a $N
ok "honest pairs on 'open' and 'secret': $N of $N verified each, 0 lost, throughout"
[ -z "$(find /dev/shm -maxdepth 1 -user $DUID)" ] || fail "rgapsd made names in /dev/shm: $(find /dev/shm -maxdepth 1 -user $DUID)"
[ "$(daemon_segments "$INSTANCE-")" -ge 2 ] || fail "rgapsd holds no segments: $(ls -l /proc/$DAEMON_PID/fd)"
ok "/dev/shm holds no name of rgapsd's; it holds its $(daemon_segments "$INSTANCE-") segments as memfds"

# A fresh pair on each topic, after it all.
pairs b 200
pairs_verified b 200
ok "fresh honest pairs: 200 of 200 verified each"
stop_pid "$SECOND" "the second rgapsd" || fail "the second rgapsd did not stop cleanly"
forget_pid "$SECOND"
unsquat
stop_daemon
ok "rgapsd stopped cleanly"
