#!/bin/bash
# Throughput of the tcp transport plugin against iperf3's single TCP stream, on
# one path (loopback by default), in one run: the target is >= 0.9 of iperf3
# (docs/BENCHMARKS.md). Both sides of both tools are two processes; the transport side is
# transport-conformance --bench (sender and receiver rgapsd stand-ins, records
# from registered memory straight into the receiver's ring, headers and samples
# of every record verified). Runs are interleaved and repeated; medians compared.
#
#   a 64 MiB message in 16 records of 4 MiB (chunk_size "4MiB", the default
#   before 0.2: docs/DECISIONS.md 55), ring 64 MiB, watermark 0.25;
#   the same message unchunked: one 64 MiB record, ring 256 MiB.
#
# BENCH_EXTRA=1 adds a ring small enough to stay in the CPU caches (256 KiB
# records, 1 MiB ring: not a daemon setting), to show what the ring's memory
# footprint costs against iperf3, whose buffer stays in cache.
#
# usage: bench_tcp.sh [BUILD_DIR] [SECONDS] [REPS]   (BENCH_ADDR: address, default 127.0.0.1)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../../build}" && pwd)
secs=${2:-5}
reps=${3:-3}
addr=${BENCH_ADDR:-127.0.0.1}
conf=$build/tests/transport/transport-conformance
plugins=$build/plugins

if [ ! -x "$conf" ] || [ ! -e "$plugins/transport-tcp.so" ]; then
	echo "bench_tcp: build first (no $conf or $plugins/transport-tcp.so)" >&2
	exit 1
fi
if ! command -v iperf3 >/dev/null; then
	echo "SKIP: iperf3 is not installed (Debian: apt-get install -y iperf3)"
	exit 77
fi

pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
}
trap cleanup EXIT

free_port() {
	python3 -c 'import socket, sys
s = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
s.bind((sys.argv[1], 0))
print(s.getsockname()[1])' "$addr"
}

listening() {
	ss -ltnH "sport = :$1" 2>/dev/null | grep -q .
}

median() {
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
		END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# iperf3 single stream; prints Gbit/s as the receiver counted it.
iperf_run() {
	local port spid json
	port=$(free_port)
	iperf3 -s -1 -B "$addr" -p "$port" >/dev/null 2>&1 &
	spid=$!
	pids+=("$spid")
	for _ in $(seq 100); do
		listening "$port" && break
		sleep 0.05
	done
	if ! json=$(iperf3 -c "$addr" -p "$port" -t "$secs" -J "$@"); then
		kill "$spid" 2>/dev/null || true
		wait "$spid" 2>/dev/null || true
		echo "bench_tcp: iperf3 -c $* failed: $json" >&2
		exit 1
	fi
	wait "$spid" || true
	python3 -c 'import json, sys
print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))' <<<"$json"
}

# The transport, sender and receiver processes; prints Gbit/s.
rgaps_run() {
	local out line
	out=$("$conf" --transport tcp --plugin-dir "$plugins" --addr "$addr" --bench \
		--seconds "$secs" "$@")
	line=$(grep '^RESULT ' <<<"$out" || true)
	if [ -z "$line" ] || ! grep -q ' ok=1' <<<"$line"; then
		echo "bench_tcp: transport run failed:" >&2
		echo "$out" >&2
		exit 1
	fi
	sed -n 's/.* Gbps=\([0-9.]*\).*/\1/p' <<<"$line"
}

cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
echo "# tcp transport vs iperf3, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# machine: ${cpu:-?}, $(nproc) CPUs, kernel $(uname -r), $(iperf3 --version | head -1)"
echo "# path: $addr loopback, $secs s per run, $reps runs each, interleaved"
echo "# tcp_rmem: $(sysctl -n net.ipv4.tcp_rmem 2>/dev/null | tr '\t' ' ')," \
	"tcp_wmem: $(sysctl -n net.ipv4.tcp_wmem 2>/dev/null | tr '\t' ' ')," \
	"RGAPS_TCP_SNDBUF=${RGAPS_TCP_SNDBUF:-auto} RGAPS_TCP_RCVBUF=${RGAPS_TCP_RCVBUF:-auto}"

ip_def=() ip_4m=() rg_4m=() rg_64m=() rg_small=()
for rep in $(seq "$reps"); do
	ip_def+=("$(iperf_run)")
	rg_4m+=("$(rgaps_run --record-size 4M --ring-size 64M --watermark 0.25)")
	ip_4m+=("$(iperf_run -l 1M)")
	rg_64m+=("$(rgaps_run --record-size 64M --ring-size 256M --watermark 0.25)")
	extra=
	if [ -n "${BENCH_EXTRA:-}" ]; then
		rg_small+=("$(rgaps_run --record-size 256K --ring-size 1M --watermark 0.25)")
		extra=", rgaps 256 KiB/1 MiB ring ${rg_small[-1]}"
	fi
	echo "# run $rep: iperf3 ${ip_def[-1]}, rgaps 4 MiB ${rg_4m[-1]}," \
		"iperf3 -l 1M ${ip_4m[-1]}, rgaps 64 MiB ${rg_64m[-1]}$extra Gbit/s"
done

m_ip=$(median "${ip_def[@]}")
m_ip4=$(median "${ip_4m[@]}")
m_4m=$(median "${rg_4m[@]}")
m_64m=$(median "${rg_64m[@]}")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }'; }

row() {
	printf '| %-58s | %8s | %-24s |\n' "$1" "$2" "$3"
}

echo
row "run (median of $reps x $secs s)" "Gbit/s" "vs iperf3 single stream"
row "---" "---:" "---:"
row "iperf3 -c, single stream (128 KiB writes)" "$m_ip" "1.00 (reference)"
row "iperf3 -c -l 1M (its largest writes), single stream" "$m_ip4" "$(ratio "$m_ip4" "$m_ip")"
row "rgaps tcp: 4 MiB records (64 MiB msg, default chunking)" "$m_4m" "$(ratio "$m_4m" "$m_ip")"
row "rgaps tcp: 64 MiB records (64 MiB msg unchunked)" "$m_64m" "$(ratio "$m_64m" "$m_ip")"
if [ -n "${BENCH_EXTRA:-}" ]; then
	m_small=$(median "${rg_small[@]}")
	row "rgaps tcp: 256 KiB records, 1 MiB ring (cache-resident)" "$m_small" \
		"$(ratio "$m_small" "$m_ip")"
fi
echo
r=$(ratio "$m_4m" "$m_ip")
if awk -v r="$r" 'BEGIN { exit !(r >= 0.9) }'; then
	echo "target >= 0.90 of iperf3's single stream: met ($r)"
else
	echo "target >= 0.90 of iperf3's single stream: NOT met ($r)"
fi
