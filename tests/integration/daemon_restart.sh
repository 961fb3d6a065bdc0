#!/bin/bash
# rgapsd killed with SIGKILL leaves its segments behind; a new rgapsd on the
# same socket closes them (waking whoever still waits on them), removes them and
# serves again; clients of the dead daemon - waiting, or publishing and taking
# as fast as they can - get -ENOTCONN within 1 s instead of carrying on in a
# world nobody reads. A second daemon on a live socket refuses to start.
. "$(dirname "$0")/lib.sh"
start_daemon
"$RGAPSD" --socket "$RGAPS_SOCKET" --instance "$INSTANCE" >"$T/second.log" 2>&1 &
second=$!
for _ in $(seq 100); do kill -0 $second 2>/dev/null || break; sleep 0.05; done
kill -0 $second 2>/dev/null && { kill -9 $second; fail "a second rgapsd started on a live socket"; }
wait $second; rc=$?
[ $rc -ne 0 ] || fail "second rgapsd exited 0"
grep -qi "already serving" "$T/second.log" || fail "second rgapsd gave no clear reason: $(cat "$T/second.log")"
ok "second daemon refused: $(grep -i 'already' "$T/second.log" | head -1 | sed 's/.*error: //')"

bg waiter "$RGAPS" sub rs --count 5 --timeout 30
wait_until 5 subs_are rs 1 || fail "subscriber did not attach"
"$RGAPS" pub rs --count 2 --size 4KiB >/dev/null
ls /dev/shm | grep -q "rgaps-$INSTANCE-rs-" || fail "no segments while running"
kill -9 "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null; DAEMON_PID=
ls /dev/shm | grep -q "rgaps-$INSTANCE-rs-meta" || fail "expected stale segments after SIGKILL"
# The orphaned subscriber notices within its liveness interval, no hang.
wait "$PID_waiter"; rc=$?
[ $rc -ne 0 ] || fail "subscriber of a dead daemon exited 0"
grep -q "rgapsd is gone" "$T/waiter.out" || fail "subscriber did not report the daemon's death: $(cat "$T/waiter.out")"
ok "subscriber of the killed daemon got: $(grep 'take' "$T/waiter.out")"

# An old client that missed the death (here: one that maps the header and waits): the new
# rgapsd closes the stale header and wakes it before removing it.
bg stale "$ITEST" stalewait "/rgaps-$INSTANCE-rs-meta"
wait_until 5 grep -q waiting "$T/stale.out" || fail "stalewait did not start: $(cat "$T/stale.out")"
start_daemon
wait_ok stale
ok "a client still waiting on the dead daemon's topic was woken: $(tail -1 "$T/stale.out")"
grep -q "removed .* stale shared-memory segments" "$T/rgapsd.log" || fail "restart did not report stale segments"
ls /dev/shm | grep -q "rgaps-$INSTANCE-rs-" && fail "stale segments still there after restart"
bg s2 "$RGAPS" sub rs --count 20 --verify --timeout 20
wait_until 5 subs_are rs 1 || fail "subscriber did not attach after restart"
"$RGAPS" pub rs --count 20 --size 1MiB >/dev/null || fail "publish after restart"
wait_ok s2
ok "restarted daemon serves: $(tail -1 "$T/s2.out")"

# A busy pair when rgapsd dies: both end with an error within 1 s of the kill.
bg bsub "$RGAPS" sub busy --count 1000000 --timeout 60 --allow-gaps
wait_until 5 subs_are busy 1 || fail "busy subscriber did not attach"
bg bpub "$RGAPS" pub busy --count 100000000 --size 4KiB --rate 20000
sleep 0.5
kill -9 "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null; DAEMON_PID=
t0=$(date +%s%N)
for j in bpub bsub; do
	eval "pid=\$PID_$j"
	for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.01; done
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	kill -0 "$pid" 2>/dev/null && fail "$j still running ${ms} ms after rgapsd was killed"
	[ "$ms" -le 1000 ] || fail "$j took ${ms} ms to notice rgapsd was gone"
	wait "$pid"; rc=$?
	[ $rc -ne 0 ] || fail "$j exited 0 after its daemon died"
	grep -q "rgapsd is gone" "$T/$j.out" || fail "$j: $(tail -2 "$T/$j.out")"
	ok "$j noticed within ${ms} ms: $(grep -m1 'rgapsd is gone' "$T/$j.out")"
done
start_daemon
stop_daemon
