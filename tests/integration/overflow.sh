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

bg stall "$ITEST" hold blk 1
wait_until 5 subs_are blk 1 || fail "stalled subscriber did not attach"
start=$(date +%s%N)
timeout 20 "$RGAPS" pub blk --count 20 --size 1KiB > "$T/blkpub.out" 2>&1 && fail "publisher on a full blocking topic succeeded"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
grep -q "timed out" "$T/blkpub.out" || fail "no timeout reported: $(cat "$T/blkpub.out")"
"$RGAPS" stats blk --json | tr -d ' \t\n' | grep -q '"timeouts":[1-9]' || fail "timeouts not counted"
ok "block policy: publisher timed out after ${ms} ms, counted in stats"

bg slow "$RGAPS" sub drop --count 200 --verify --timeout 30 --hold-ms 5 --allow-gaps
wait_until 5 subs_are drop 1 || fail "slow subscriber did not attach"
start=$(date +%s%N)
"$RGAPS" pub drop --count 200 --size 1KiB > "$T/droppub.out" || fail "drop_oldest publisher failed"
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ $ms -lt 5000 ] || fail "drop_oldest publisher took $ms ms"
wait_ok slow
grep -q "mismatched 0" "$T/slow.out" || fail "slow subscriber saw corruption"
rcv=$(grep -o 'received [0-9]*' "$T/slow.out" | tr -dc 0-9)
drops=$(grep -o 'drops [0-9]*' "$T/slow.out" | tr -dc 0-9)
[ "${drops:-0}" -gt 0 ] || fail "slow subscriber reported no drops: $(tail -1 "$T/slow.out")"
[ $((rcv + drops)) = 200 ] || fail "received $rcv + dropped $drops != 200 published: something was lost silently"
"$RGAPS" stats drop --json | tr -d ' \t\n' | grep -q '"drops_total":[1-9]' || fail "drops not counted in stats"
ok "drop_oldest: publisher never blocked ($ms ms), slow subscriber: $(tail -1 "$T/slow.out")"
stop_daemon
