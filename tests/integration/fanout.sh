#!/bin/bash
# 1 publisher x 8 subscribers on one host: every byte of every message is
# verified by every subscriber; then the same with the zero-copy loan API;
# then the pool is back to empty.
. "$(dirname "$0")/lib.sh"
start_daemon
for mode in push loan; do
	for i in 1 2 3 4 5 6 7 8; do bg "sub$i" "$RGAPS" sub fan --count 300 --verify --timeout 50; done
	extra=; [ $mode = loan ] && extra=--loan
	bg pub "$RGAPS" pub fan --count 300 --size 16-4MiB --wait-subscribers 8 --timeout 20 $extra
	wait_ok pub
	grep -q "^published 300 messages .* failures 0$" "$T/pub.out" || fail "publisher ($mode): $(cat "$T/pub.out")"
	for i in 1 2 3 4 5 6 7 8; do
		wait_ok "sub$i"
		expect_sub "sub$i" received=300 verified=300 mismatched=0 gaps=0 drops=0 streams=1
	done
	ok "$mode: 8 subscribers verified 300 messages each"
done
# Every take by the 16 subscribers is in the topic's publish -> take histogram.
s=$(stat_json fan | flat)
lat=$(grep -o '"latency_us":{[^}]*}' <<< "$s" | head -1) || true
[ -n "$lat" ] || fail "no latency_us histogram in the stats: ${s:0:300}"
[ "$(jnum "$lat" count)" = $((2 * 8 * 300)) ] || fail "latency histogram does not hold the 4800 takes: $lat"
p50=$(jnum "$lat" p50)
p99=$(jnum "$lat" p99)
awk -v a="$p50" -v b="$p99" 'BEGIN { exit !(a > 0 && b >= a) }' || fail "latency p50 $p50, p99 $p99: $lat"
ok "publish -> take latency of all 4800 takes: p50 $p50 us, p99 $p99 us"
# A departed publisher's stream drains, then rgapsd discards it and its pool (its sweep runs
# every 100 ms): bounded by the clock, not by a count of polls.
wait_until 5 pool_is fan 0 || fail "pool holds $(pool_used fan) bytes 5 s after everyone left"
ok "pool empty after the run"
stop_daemon
[ -e "$RGAPS_SOCKET" ] && fail "socket left after SIGTERM"
ok "clean shutdown"
