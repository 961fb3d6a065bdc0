#!/bin/bash
# Cross-host benchmark, two daemons on loopback standing for two hosts (TCP
# transport), every number from this one run:
#   1. throughput of 64 MiB messages A -> B (publisher on A, one verifying-off
#      subscriber on B) against iperf3's single stream on the same loopback;
#   2. end-to-end publish -> take latency of 64 MiB and 256 MiB messages with
#      chunking on (4 MiB chunks, pipelined) and off (whole message, the RGAPS
#      thesis' stage-after-stage order), and the ratio.
# Usage: tools/rgaps-bench/remote_bench.sh [BUILD_DIR]   (needs iperf3)
set -u
B=$(cd "${1:-build}" && pwd)
export RGAPS_BUILD=$B
. "$(dirname "$0")/../../tests/integration/lib.sh"
. "$(dirname "$0")/../../tests/integration/remote_lib.sh"
command -v iperf3 >/dev/null || { echo "iperf3 missing: apt-get install iperf3" >&2; exit 1; }
N64=${N64:-30}
NLAT=${NLAT:-12}

host A 0; host B 1
defaults=', "pool_size": "1GiB", "max_message_size": "256MiB", "ring_size": "1GiB", "queue_depth": 16'
for h in A B; do start_host $h "$defaults"; done
mkdir -p "$T/td"
wait_until 10 peer_up A B || fail "no session"

# iperf3 single stream, loopback, same machine, same moment
IP=$((BASE + 7))
iperf3 -s -1 -p $IP >/dev/null 2>&1 &
PIDS+=($!)
sleep 0.3
iperf3 -c 127.0.0.1 -p $IP -t 5 -J > "$T/iperf.json" || fail "iperf3"
ibps=$(grep -m1 '"bits_per_second"' <(sed -n '/"sum_received"/,/}/p' "$T/iperf.json") | tr -dc '0-9.')
iperf_gib=$(awk -v b="$ibps" 'BEGIN { printf "%.2f", b / 8 / 1073741824 }')

# rgaps, 64 MiB messages, chunked (default), one subscriber on B
bg thr env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub thr --count $N64 --timeout 120
wait_until 10 knows_sub A B thr || fail "subscription not advertised"
on A "$RGAPS" pub thr --count $N64 --size 64MiB --fixed-payload > "$T/thrpub.out" || fail "publish"
wait_ok thr
secs=$(grep -o 'in [0-9.]* s' "$T/thr.out" | tr -dc '0-9.')
rg_gib=$(awk -v n=$N64 -v s="$secs" 'BEGIN { printf "%.2f", (n - 1) * 64 / 1024 / s }')

lat() { # lat TOPIC SIZE CHUNKING -> p50 ms
	local t=$1 size=$2
	bg "l$t" env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub "$t" --count $NLAT --timeout 120 --latency
	wait_until 10 knows_sub A B "$t" || fail "subscription $t"
	on A "$RGAPS" pub "$t" --count $NLAT --size "$size" --rate 2 >/dev/null || fail "publish $t"
	wait_ok "l$t"
	grep -o 'p50 [0-9.]*' "$T/l$t.out" | awk '{ printf "%.1f", $2 / 1000 }'
}
# chunking is a topic setting: the sender's decides; topics from topics.d on A
stop_host A
mkdir -p "$T/A.d"
for s in 64 256; do
	echo "{ \"chunking\": true, \"chunk_size\": \"4MiB\" }" > "$T/A.d/on$s.json"
	echo "{ \"chunking\": false }" > "$T/A.d/off$s.json"
done
sed -i "s|\"keepalive_ms\"|\"topics_dir\": \"$T/A.d\", \"keepalive_ms\"|" "$T/A.json"
"$RGAPSD" --config "$T/A.json" --socket "${SOCK[A]}" --instance "${INSTANCE}A2" >>"$T/A.log" 2>&1 &
DPID[A]=$!; PIDS+=(${DPID[A]})
wait_until 10 peer_up A B || fail "A did not come back"
on64=$(lat on64 64MiB); off64=$(lat off64 64MiB)
on256=$(lat on256 256MiB); off256=$(lat off256 256MiB)

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
echo
echo "machine: $cpu, $(nproc) cores, $(uname -r); $(date -u '+%Y-%m-%d %H:%M UTC')"
printf '%-52s %10s\n' "measure" "value"
printf '%-52s %10s\n' "iperf3 single stream, loopback (GiB/s)" "$iperf_gib"
printf '%-52s %10s\n' "rgaps 64 MiB messages A->B over tcp (GiB/s)" "$rg_gib"
printf '%-52s %10s\n' "ratio rgaps / iperf3" "$(awk -v a=$rg_gib -v b=$iperf_gib 'BEGIN{printf "%.2f", a/b}')"
printf '%-52s %10s\n' "64 MiB publish->take p50, chunked 4 MiB (ms)" "$on64"
printf '%-52s %10s\n' "64 MiB publish->take p50, whole message (ms)" "$off64"
printf '%-52s %10s\n' "ratio chunked / whole, 64 MiB" "$(awk -v a=$on64 -v b=$off64 'BEGIN{printf "%.2f", a/b}')"
printf '%-52s %10s\n' "256 MiB publish->take p50, chunked 4 MiB (ms)" "$on256"
printf '%-52s %10s\n' "256 MiB publish->take p50, whole message (ms)" "$off256"
printf '%-52s %10s\n' "ratio chunked / whole, 256 MiB" "$(awk -v a=$on256 -v b=$off256 'BEGIN{printf "%.2f", a/b}')"
for h in A B; do stop_host $h; done
