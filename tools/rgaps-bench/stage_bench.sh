#!/bin/bash
# The cost of a stage on the remote path: throughput of the TCP path between
# two daemons on loopback (standing for two hosts), one topic without stages
# and one with "stages": ["crc32c"], measured in alternating rounds in one run
# so that both see the same machine. Each round publishes N messages of SIZE
# (4 MiB chunks) on A to one subscriber on B; the rate is N x SIZE over the
# time from the publisher's start to the subscriber's exit after its last
# message (end to end: a subscriber that lagged and caught up from its queue
# does not inflate it). Prints a Markdown table row per topic (min / median /
# max over the rounds) and the machine it ran on.
# Usage: tools/rgaps-bench/stage_bench.sh [BUILD_DIR]   (ROUNDS, N, SIZE from the environment)
set -u
B=$(cd "${1:-build}" && pwd)
export RGAPS_BUILD=$B
. "$(dirname "$0")/../../tests/integration/lib.sh"
. "$(dirname "$0")/../../tests/integration/remote_lib.sh"
# A loaded machine must not make a stalled loop look like a dead peer mid-round.
KEEPALIVE_MS=${KEEPALIVE_MS:-3000}
BG_TIMEOUT=${BG_TIMEOUT:-600}
ROUNDS=${ROUNDS:-7}
N=${N:-40}
SIZE=${SIZE:-16MiB}

mkdir -p "$T/td"
echo '{ "name": "plain" }' > "$T/td/plain.json"
echo '{ "name": "crc", "stages": ["crc32c"] }' > "$T/td/crc.json"
DAEMON_EXTRA="\"topics_dir\": \"$T/td\","
host A 0; host B 1
for h in A B; do
	start_host $h ', "pool_size": "1GiB", "max_message_size": "64MiB", "ring_size": "256MiB", "chunk_size": "4MiB", "memory": "host"'
done
wait_until 10 peer_up A B || fail "no session"

round() { # round TOPIC -> MiB/s
	local t=$1 t0 t1
	bg "s$t" env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub "$t" --count "$N" --timeout 300
	wait_until 10 knows_sub A B "$t" || fail "subscription $t"
	t0=$(date +%s%N)
	on A "$RGAPS" pub "$t" --count "$N" --size "$SIZE" --fixed-payload >/dev/null || fail "publish $t"
	wait_ok "s$t"
	t1=$(date +%s%N)
	grep -q "received $N " "$T/s$t.out" || fail "$t: $(tail -1 "$T/s$t.out")"
	awk -v n="$N" -v ns=$((t1 - t0)) -v sz="$(numfmt --from=iec-i "${SIZE%B}")" \
		'BEGIN { printf "%.1f\n", n * sz / 1048576 / (ns / 1e9) }'
}
stats() { sort -n | awk '{ v[NR] = $1 } END { printf "%.1f | %.1f | %.1f", v[1], v[int((NR + 1) / 2)], v[NR] }'; }

: > "$T/plain.rates"
: > "$T/crc.rates"
for r in $(seq "$ROUNDS"); do
	if [ $((r % 2)) = 1 ]; then order="plain crc"; else order="crc plain"; fi
	for t in $order; do round "$t" >> "$T/$t.rates"; done
	echo "# round $r: plain $(tail -1 "$T/plain.rates") MiB/s, crc32c $(tail -1 "$T/crc.rates") MiB/s" >&2
done
runs=$(on B "$RGAPS" stats --json | flat | grep -o '"after_landing":{"runs":[0-9]*,"failed":[0-9]*}')
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
echo "machine: $cpu, $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%Y-%m-%d)"
echo "crc32c on B: $runs"
echo "| topic | messages | rounds | MiB/s min | median | max |"
echo "|---|---|---|---|---|---|"
echo "| no stage | $N x $SIZE | $ROUNDS | $(stats < "$T/plain.rates") |"
echo "| crc32c | $N x $SIZE | $ROUNDS | $(stats < "$T/crc.rates") |"
