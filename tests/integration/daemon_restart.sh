#!/bin/bash
# rgapsd killed with SIGKILL leaves its segments behind; a new rgapsd on the
# same socket removes them, serves again, and clients of the dead daemon get
# an error instead of hanging. A second daemon on a live socket refuses to start.
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

start_daemon
grep -q "removed .* stale shared-memory segments" "$T/rgapsd.log" || fail "restart did not report stale segments"
ls /dev/shm | grep -q "rgaps-$INSTANCE-rs-" && fail "stale segments still there after restart"
bg s2 "$RGAPS" sub rs --count 20 --verify --timeout 20
wait_until 5 subs_are rs 1 || fail "subscriber did not attach after restart"
"$RGAPS" pub rs --count 20 --size 1MiB >/dev/null || fail "publish after restart"
wait_ok s2
ok "restarted daemon serves: $(tail -1 "$T/s2.out")"
stop_daemon
