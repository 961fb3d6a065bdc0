#!/bin/bash
# The quick-start demo: rgapsd on its embedded defaults (no configuration
# file), one publisher sending 500 messages from 16 B to 16 MiB, and four
# subscribers that verify every byte; then what flowed, from the daemon's stats.
set -u
B=${1:-build}
D=$(mktemp -d /tmp/rgaps-demo.XXXXXX)
export RGAPS_SOCKET=$D/rgapsd.sock RGAPS_PLUGIN_DIR=$B/plugins
pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null; [ -n "${dpid:-}" ] && kill -9 $dpid 2>/dev/null; rm -rf "$D"' EXIT
"$B/src/daemon/rgapsd" --socket "$RGAPS_SOCKET" >"$D/rgapsd.log" 2>&1 &
dpid=$!
for _ in $(seq 100); do [ -S "$RGAPS_SOCKET" ] && break; sleep 0.05; done
echo "== rgapsd started (pid $dpid, socket $RGAPS_SOCKET)"
for i in 1 2 3 4; do
	timeout 60 "$B/tools/rgaps" sub demo --count 500 --verify --timeout 50 >"$D/sub$i.out" 2>&1 &
	pids+=($!)
done
echo "== publishing 500 messages (16 B .. 16 MiB) to 4 verifying subscribers"
timeout 60 "$B/tools/rgaps" pub demo --count 500 --size 16-16MiB --wait-subscribers 4 || exit 1
rc=0
for i in 1 2 3 4; do
	wait "${pids[$((i - 1))]}" || rc=1
	echo "subscriber $i: $(tail -n 1 "$D/sub$i.out")"
done
echo "== rgaps stats"
"$B/tools/rgaps" stats
kill -TERM $dpid; wait $dpid; dpid=
[ $rc = 0 ] && echo "== demo OK: every subscriber verified every byte" || echo "== demo FAILED"
exit $rc
