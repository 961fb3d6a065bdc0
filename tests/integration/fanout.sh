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
	for i in 1 2 3 4 5 6 7 8; do
		wait_ok "sub$i"
		grep -q "received 300 verified 300 mismatched 0 gaps 0 drops 0" "$T/sub$i.out" ||
			fail "sub$i ($mode): $(tail -1 "$T/sub$i.out")"
	done
	ok "$mode: 8 subscribers verified 300 messages each"
done
used=$(pool_used fan)
[ "$used" = 0 ] || fail "pool holds $used bytes after everyone left"
ok "pool empty after the run"
stop_daemon
ls /dev/shm | grep -q "rgaps-$INSTANCE-" && fail "segments left after SIGTERM"
[ -e "$RGAPS_SOCKET" ] && fail "socket left after SIGTERM"
ok "clean shutdown"
