#!/bin/bash
# Malformed, oversized and truncated frames, unknown requests and bad topic
# names each get an error reply (or a hang-up where the stream is broken),
# while a publisher and a verifying subscriber keep working throughout.
. "$(dirname "$0")/lib.sh"
start_daemon
bg sub "$RGAPS" sub steady --count 400 --verify --timeout 60
wait_until 5 subs_are steady 1 || fail "subscriber did not attach"
bg pub "$RGAPS" pub steady --count 400 --size 64KiB --rate 200
"$ITEST" badframes > "$T/bad.out" 2>&1; rc=$?
cat "$T/bad.out"
[ $rc -eq 0 ] || fail "badframes reported failures"
wait_ok pub
wait_ok sub
grep -q "received 400 verified 400 mismatched 0 gaps 0" "$T/sub.out" || fail "steady pair: $(tail -1 "$T/sub.out")"
kill -0 "$DAEMON_PID" || fail "rgapsd died"
ok "steady pair unaffected: $(tail -1 "$T/sub.out")"
stop_daemon
