#!/bin/bash
# Malformed, oversized and truncated frames, unknown requests and bad topic
# names each get an error reply (or a hang-up where the stream is broken),
# while a publisher and a verifying subscriber keep working throughout.
. "$(dirname "$0")/lib.sh"
start_daemon
bg sub "$RGAPS" sub steady --count 400 --verify --timeout 60
wait_until 20 subs_are steady 1 || fail "subscriber did not attach"
bg pub "$RGAPS" pub steady --count 400 --size 64KiB --rate 200
rc=0
"$ITEST" badframes > "$T/bad.out" 2>&1 || rc=$?
cat "$T/bad.out"
[ $rc -eq 0 ] || fail "badframes exited $rc"
grep -q "^0 failures$" "$T/bad.out" || fail "badframes did not finish its cases"
wait_ok pub
wait_ok sub
expect_sub sub received=400 verified=400 mismatched=0 gaps=0 drops=0
kill -0 "$DAEMON_PID" || fail "rgapsd died"
ok "steady pair unaffected: $(sub_line sub)"
stop_daemon
