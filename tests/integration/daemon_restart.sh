#!/bin/bash
# rgapsd killed with SIGKILL leaves nothing behind in /dev/shm (its segments have
# no names: they go with their last user); a new rgapsd on the same socket serves
# again; clients of the dead daemon - waiting, or publishing and taking as fast as
# they can, or holding messages - get -ENOTCONN within 1 s instead of carrying on
# in a world nobody reads. A second daemon on a live socket refuses to start.
. "$(dirname "$0")/lib.sh"
# Pools of 16 MiB: a client's exit frees its pool's memory (allocated whole), and what is
# timed here is how soon it notices its daemon's death, not how long 256 MiB take to free.
echo '{ "defaults": { "pool_size": "16MiB", "max_message_size": "4MiB" } }' >"$T/rgapsd.json"
start_daemon -c "$T/rgapsd.json"
expect_exit 1 timeout -k 2 20 "$RGAPSD" --socket "$RGAPS_SOCKET" --instance "$INSTANCE"
grep -qi "already serving" "$T/expect.out" || fail "second rgapsd gave no clear reason: $(cat "$T/expect.out")"
ok "second daemon refused: $(grep -i 'already' "$T/expect.out" | head -1 | sed 's/.*error: //')"

bg waiter "$RGAPS" sub rs --count 5 --timeout 30
wait_until 20 subs_are rs 1 || fail "subscriber did not attach"
"$RGAPS" pub rs --count 2 --size 4KiB >/dev/null
[ "$(daemon_segments "$INSTANCE-rs-")" -ge 2 ] || fail "rgapsd holds no segments of 'rs' while running"
kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=
[ -z "$(lib_segments)" ] || fail "names in /dev/shm after SIGKILL: $(lib_segments)"
# The orphaned subscriber notices within its liveness interval, no hang.
rc=0
wait "$PID_waiter" || rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "subscriber of a dead daemon exited $rc"
grep -q "rgapsd is gone" "$T/waiter.out" || fail "subscriber did not report the daemon's death: $(cat "$T/waiter.out")"
expect_sub waiter received=2
ok "subscriber of the killed daemon got its 2 messages, then: $(grep 'take' "$T/waiter.out")"

start_daemon -c "$T/rgapsd.json"
bg s2 "$RGAPS" sub rs --count 20 --verify --timeout 20
wait_until 20 subs_are rs 1 || fail "subscriber did not attach after restart"
"$RGAPS" pub rs --count 20 --size 1MiB >/dev/null || fail "publish after restart"
wait_ok s2
expect_sub s2 received=20 verified=20 mismatched=0 gaps=0 drops=0
ok "restarted daemon serves: $(sub_line s2)"

# A busy pair when rgapsd dies: both end with an error within 1 s of the kill.
bg bsub "$RGAPS" sub busy --count 1000000 --timeout 60 --allow-gaps
wait_until 20 subs_are busy 1 || fail "busy subscriber did not attach"
bg bpub "$RGAPS" pub busy --count 100000000 --size 4KiB --rate 20000
sleep 0.5
kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=
t0=$(date +%s%N)
for j in bpub bsub; do
	pid=$(bg_pid $j)
	for _ in $(seq 200); do lib_ours "$pid" || break; sleep 0.01; done
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	lib_ours "$pid" && fail "$j still running ${ms} ms after rgapsd was killed"
	[ "$ms" -le 1000 ] || fail "$j took ${ms} ms to notice rgapsd was gone"
	rc=0
	wait "$pid" || rc=$?
	[ $rc -ne 0 ] || fail "$j exited 0 after its daemon died"
	grep -q "rgapsd is gone" "$T/$j.out" || fail "$j: $(tail -2 "$T/$j.out")"
	ok "$j noticed within ${ms} ms: $(grep -m1 'rgapsd is gone' "$T/$j.out")"
done

# A subscriber holding messages and waiting for more when rgapsd dies: its wait ends
# with -ENOTCONN within 1 s; the messages it holds stay readable; releasing them and
# destroying the handle return.
start_daemon -c "$T/rgapsd.json"
bg holder "$ITEST" holdwait hd 4
wait_until 20 grep -q "^ready" "$T/holder.out" || fail "holder did not attach: $(cat "$T/holder.out")"
wait_until 20 subs_are hd 1 || fail "holder is not attached"
"$RGAPS" pub hd --count 4 --size 64KiB >/dev/null || fail "publish to the holder"
wait_until 20 grep -q "^holding 4" "$T/holder.out" || fail "holder took no 4: $(cat "$T/holder.out")"
kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=
t0=$(date +%s%N)
pid=$(bg_pid holder)
for _ in $(seq 200); do lib_ours "$pid" || break; sleep 0.01; done
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
lib_ours "$pid" && fail "holder still waiting ${ms} ms after rgapsd was killed"
[ "$ms" -le 1000 ] || fail "holder took ${ms} ms to notice rgapsd was gone"
wait_ok holder
ok "a subscriber holding 4 messages noticed within ${ms} ms: $(grep '^holdwait' "$T/holder.out")"
start_daemon -c "$T/rgapsd.json"
stop_daemon
