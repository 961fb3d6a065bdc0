#!/bin/bash
# Back-pressure: with overflow "block" a publisher facing a stalled subscriber
# times out (exit non-zero, counted) instead of hanging; with "drop_oldest" it
# never blocks and the slow subscriber's drops are counted and reported.
. "$(dirname "$0")/lib.sh"
mkdir -p "$T/topics.d"
echo "{ \"topics_dir\": \"$T/topics.d\" }" > "$T/rgapsd.json"
echo '{ "queue_depth": 8, "overflow": "block", "block_timeout_ms": 200 }' > "$T/topics.d/blk.json"
echo '{ "queue_depth": 8, "overflow": "drop_oldest" }' > "$T/topics.d/drop.json"
start_daemon --config "$T/rgapsd.json"

# A subscriber that takes one message and never releases it (killed with the test).
bg stall "$ITEST" hold blk 1
wait_until 20 subs_are blk 1 || fail "stalled subscriber did not attach"
start=$(date +%s%N)
expect_exit 1 timeout 20 "$RGAPS" pub blk --count 20 --size 1KiB
ms=$(( ($(date +%s%N) - start) / 1000000 ))
grep -q "timed out" "$T/expect.out" || fail "no timeout reported: $(cat "$T/expect.out")"
s=$(stat_json blk | flat)
[ "$(jnum "$s" timeouts)" -ge 1 ] || fail "timeouts not counted: $s"
ok "block policy: publisher timed out after ${ms} ms, counted in stats ($(jnum "$s" timeouts) timeouts)"

bg slow "$RGAPS" sub drop --count 200 --verify --timeout 30 --hold-ms 5 --allow-gaps
wait_until 20 subs_are drop 1 || fail "slow subscriber did not attach"
"$RGAPS" pub drop --count 200 --size 1KiB > "$T/droppub.out" || fail "drop_oldest publisher failed"
grep -q "^published 200 messages .* failures 0$" "$T/droppub.out" || fail "publisher: $(cat "$T/droppub.out")"
wait_ok slow
# Nothing lost silently: every message received intact or reported dropped.
expect_accounted slow 200
drops=$(sub_field slow drops)
[ "$drops" -gt 0 ] || fail "slow subscriber reported no drops: $(sub_line slow)"
s=$(stat_json drop | flat)
[ "$(jnum "$s" drops_total)" = "$drops" ] || fail "stats count $(jnum "$s" drops_total) drops, the subscriber was told of $drops"
[ "$(jnum "$s" full_waits)" = 0 ] && [ "$(jnum "$s" timeouts)" = 0 ] ||
	fail "the drop_oldest publisher waited for room: $s"
ok "drop_oldest: publisher never waited (full_waits 0), slow subscriber: $(sub_line slow)"
stop_daemon
