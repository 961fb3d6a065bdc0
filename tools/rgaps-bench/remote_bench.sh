#!/bin/bash
# Daemon to daemon over TCP against iperf3, side by side, every figure from this one run
# (docs/BENCHMARKS.md, "Across hosts, daemon to daemon").
#
# Two rgapsd on loopback stand for two hosts, A and B, TCP transport. Each run measures,
# interleaved, for every stream count S of $STREAMS:
#   iperf3   iperf3 -c 127.0.0.1 -P S -t $IPERF_SECS -J (its default 128 KiB writes); the
#            figure is end.sum_received.bits_per_second: the bytes the server received on
#            all S streams over the test's duration.
#   rgaps    for each Z of $ZEROCOPY, both daemons with "transport_options": { "tcp": {
#            "streams": S, "zerocopy": Z } } (Z = 1: MSG_ZEROCOPY sends, docs/CONFIG.md); one
#            publisher on A (`rgaps pub --count $COUNT --size $MSG --fixed-payload`), one
#            subscriber on B that takes each message and releases it (`rgaps sub --warmup
#            $WARMUP`, no verification); the figure is its "steady" line: the bytes of the
#            messages taken after the $WARMUP-th over the time from that take to the last
#            one, so that no page of a pool, ring or window is touched for the first time
#            inside it (the first pass over 1 GiB of fresh memory costs page faults, not
#            copies). Modes ($MODES): host-loan (the publisher loans each block and
#            publishes it as it is, writing nothing: the daemons' path alone, as iperf3
#            sends a buffer it never writes), host-push (it copies a buffer filled once
#            into the pool: one more copy, the publisher's), cuda-push (a GPU topic: the
#            publisher's copy into GPU memory, D2H on A, H2D on B). Host topics run with
#            CUDA_VISIBLE_DEVICES empty; cuda-push runs when a GPU is visible (GPU=0
#            skips it, GPU=1 requires it).
# then, once per run (LAT=0 skips it), the publish -> take latency p50 of 64 MiB and 256 MiB
# messages with chunking on (4 MiB chunks) and off (whole message), host topics, S = 1.
# For every rgaps round it also prints where the CPU went: CPU seconds per GiB of each
# thread of both daemons (from /proc) and of the two clients. On a host with a core per
# thread the busiest thread bounds the rate: 1 / (its s/GiB) GiB/s.
#
# Usage: tools/rgaps-bench/remote_bench.sh [BUILD_DIR]   (needs iperf3; $IPERF3 names it)
# Knobs (environment): RUNS (3), STREAMS ("1 4"), ZEROCOPY ("0"; "0 1": both), MODES ("host-loan host-push", then
# cuda-push with a GPU), MSG (64MiB), COUNT (100), WARMUP (20),
# IPERF_SECS (5), LAT (1), GPU (auto), TOPIC (extra topic defaults, JSON members each
# preceded by a comma, after the benchmark's own: pool_size 1GiB, max_message_size 256MiB,
# ring_size 1GiB, queue_depth 16, block_timeout_ms 60000: a loaded machine may leave a
# publisher waiting for room longer than the default second). The summary gives min /
# median / max over the runs, ratios paired within each run.
set -u
B=$(cd "${1:-build}" && pwd)
export RGAPS_BUILD=$B
. "$(dirname "$0")/../../tests/integration/lib.sh"
. "$(dirname "$0")/../../tests/integration/remote_lib.sh"
IPERF3=${IPERF3:-iperf3}
command -v "$IPERF3" >/dev/null || fail "iperf3 missing: apt-get install iperf3 (or IPERF3=path)"
RUNS=${RUNS:-3}
STREAMS=${STREAMS:-1 4}
ZEROCOPY=${ZEROCOPY:-0}
MSG=${MSG:-64MiB}
COUNT=${COUNT:-100}
WARMUP=${WARMUP:-20}
IPERF_SECS=${IPERF_SECS:-5}
LAT=${LAT:-1}
NLAT=${NLAT:-12}
TICK=$(getconf CLK_TCK)
BG_TIMEOUT=600
export PIDFILE="$T/client.pid"
[ "$COUNT" -gt "$WARMUP" ] || fail "COUNT ($COUNT) must exceed WARMUP ($WARMUP)"
# --warmup where this build's `rgaps sub` has it (an older build: timed from the first take)
# (WARMUP=0: no warm-up, the figure and the CPU cover every message but the first)
warm_opt="--warmup $WARMUP"
"$RGAPS" 2>&1 | grep -q -- --warmup || WARMUP=0
[ "$WARMUP" -gt 0 ] || warm_opt=""
msg_bytes=$(numfmt --from=iec-i --suffix=B "$MSG" 2>/dev/null || numfmt --from=iec "${MSG%B}")

gpu_visible() {
	[ -f "$RGAPS_PLUGIN_DIR/memory-cuda.so" ] && command -v nvidia-smi >/dev/null &&
		nvidia-smi -L 2>/dev/null | grep -q '^GPU'
}
case ${GPU:-auto} in
0) gpu=0 ;;
1) gpu_visible || fail "GPU=1 but no GPU is visible (nvidia-smi -L, memory-cuda.so)"; gpu=1 ;;
*) if gpu_visible; then gpu=1; else gpu=0; fi ;;
esac
if [ $gpu = 1 ]; then MODES=${MODES:-host-loan host-push cuda-push}; else MODES=${MODES:-host-loan host-push}; fi

base='"pool_size": "1GiB", "max_message_size": "256MiB", "ring_size": "1GiB", "queue_depth": 16, "block_timeout_ms": 60000'
host A 0
host B 1

# ---------------------------------------------------------------- CPU accounting

# cpu_snap PID LABEL: "LABEL/thread ticks" for every thread of PID (names as the daemon set them)
cpu_snap() {
	local f
	for f in /proc/"$1"/task/*/stat; do
		# comm is in parentheses; utime and stime are fields 14 and 15
		sed -E 's/^[0-9]+ \(([^)]*)\) (.*)$/\1 \2/' "$f" 2>/dev/null |
			awk -v l="$2" '{ print l "/" $1, $13 + $14 }'
	done
}
# cpu_per_gib BEFORE AFTER GIB_A GIB_A_TX GIB_B GIB_B_RX: per thread, the CPU seconds per
# GiB that thread handled in the window (the tcp writers of A and readers of B by the
# link's bytes, the other threads by messages), busiest first; n/a: none in the window
cpu_per_gib() {
	awk -v tick="$TICK" -v a="$3" -v atx="$4" -v b="$5" -v brx="$6" '
		FNR == NR { before[$1] += $2; next }
		{ after[$1] += $2 }
		END {
			for (k in after) {
				g = k ~ /^A\/rgaps-tcp-tx/ ? atx : k ~ /^A\// ? a : k ~ /^B\/rgaps-tcp-rx/ ? brx : b
				d = after[k] - before[k]
				if (d <= 0) continue
				if (g <= 0) printf "%s n/a\n", k
				else if (d / tick / g > 0.0005) printf "%s %.4f\n", k, d / tick / g
			}
		}' "$1" "$2"
}
# times(1) of a client, run as: bash -c 'CMD; times' ...: its children's "user sys" line
client_secs() { # OUTFILE -> CPU seconds
	local l
	l=$(grep -E '^[0-9]+m[0-9.]+s [0-9]+m[0-9.]+s$' "$1" | tail -n 1) || true
	[ -n "$l" ] || { echo 0; return 0; }
	awk '{ split($1, u, /[ms]/); split($2, s, /[ms]/); print u[1] * 60 + u[2] + s[1] * 60 + s[2] }' <<<"$l"
}
client_ticks() { awk -v s="$(client_secs "$1")" -v t="$TICK" 'BEGIN { printf "%d", s * t + 0.5 }'; }
client_cpu() { # OUTFILE LABEL GIB
	awk -v l="$2" -v s="$(client_secs "$1")" -v gib="$3" 'BEGIN { printf "%s %.4f\n", l, s / gib }'
}

# ---------------------------------------------------------------- rounds

start_pair() { # STREAMS ZEROCOPY MEM [daemon keys]
	local s=$1 zc=$2 mem=$3 tro=""
	if [ "$s" -gt 1 ] || [ "$zc" != 0 ]; then
		tro="\"transport_options\": { \"tcp\": { \"streams\": $s, \"zerocopy\": $zc } },"
	fi
	DAEMON_EXTRA="$tro ${4:-}"
	export DAEMON_EXTRA
	for h in A B; do
		if [ "$mem" = host ]; then
			CUDA_VISIBLE_DEVICES= start_host $h ", \"memory\": \"host\", $base ${TOPIC:-}"
		else
			start_host $h ", \"memory\": \"cuda\", $base ${TOPIC:-}"
		fi
	done
	unset DAEMON_EXTRA
	wait_until 20 peer_up A B || fail "no session between A and B"
}
stop_pair() { for h in A B; do stop_host $h; done; }

# iperf_round STREAMS RUN -> GiB/s; its CPU per GiB into $T/cpu.<run>.iperf3.<s>
iperf_round() {
	local s=$1 run=$2 port=$((BASE + 7)) bps bytes gib
	bash -c '"$@"; rc=$?; times; exit $rc' _ "$IPERF3" -s -1 -B 127.0.0.1 -p $port >"$T/iperfd.out" 2>&1 &
	local spid=$!
	if command -v ss >/dev/null; then
		wait_until 5 eval "ss -Hltn | grep -q ':$port '" || fail "iperf3 server did not listen"
	else
		sleep 0.5 # no ss(8) on this machine to see it listen
	fi
	bash -c '"$@"; rc=$?; times >&2; exit $rc' _ "$IPERF3" -c 127.0.0.1 -p $port -P "$s" \
		-t "$IPERF_SECS" -J >"$T/iperf$s.json" 2>"$T/iperfc.out" ||
		fail "iperf3 -P $s: $(tail -n 5 "$T/iperf$s.json")"
	wait $spid 2>/dev/null || true
	bps=$(sed -n '/"sum_received"/,/}/p' "$T/iperf$s.json" | grep -m1 '"bits_per_second"' |
		sed -E 's/.*:[[:space:]]*([0-9.eE+]+).*/\1/')
	bytes=$(sed -n '/"sum_received"/,/}/p' "$T/iperf$s.json" | grep -m1 '"bytes"' | tr -dc '0-9')
	[ -n "$bps" ] && [ -n "$bytes" ] || fail "no sum_received in iperf3's output"
	gib=$(awk -v b="$bytes" 'BEGIN { printf "%.6f", b / 1073741824 }')
	{
		client_cpu "$T/iperfc.out" iperf3-client "$gib"
		client_cpu "$T/iperfd.out" iperf3-server "$gib"
	} | sort -k2 -gr >"$T/cpu.$run.iperf3.$s"
	awk -v b="$bps" 'BEGIN { printf "%.3f", b / 8 / 1073741824 }'
}

# proc_ticks PID: CPU ticks of a whole process, all its threads
proc_ticks() { sed -E 's/^[0-9]+ \([^)]*\) //' "/proc/$1/stat" 2>/dev/null | awk '{ print $12 + $13 }'; }
# count HOST TOPIC KEY: the first number KEY in HOST's stats of TOPIC ("": of all)
count() { local s; s=$(hstats "$1" ${2:+"$2"}); jnum "$s" "$3"; }

# rgaps_round STREAMS ZEROCOPY MODE RUN -> GiB/s; CPU per thread into
# $T/cpu.<run>.<mode>.<s>[.zc] (.zc: zerocopy on)
#
# The CPU figures cover the same window as the rate: from the subscriber's warm-up take
# to the end. Each process is divided by the messages it handled in that window (the
# publisher and A run ahead of B by what the pools and the ring hold): the publisher by
# those it published after the snapshot, A by those its forwarder took after it, B by
# those it landed after it, the subscriber by those it took.
rgaps_round() {
	local s=$1 zc=$2 mode=$3 run=$4 topic="thr$1z$2${3%-*}${3#*-}" cpuenv=() pubpid subpid rate
	local n_pub n_fwd n_land b_sent b_landed p0 q0 p1 q1 mem=${3%-*} loan=() tag
	tag=$run.$mode.$s$([ "$zc" = 0 ] || echo .zc)
	[ "$mem" = host ] && cpuenv=(env CUDA_VISIBLE_DEVICES=)
	[ "${mode#*-}" = loan ] && loan=(--loan)
	start_pair "$s" "$zc" "$mem"
	bg "$topic" "${cpuenv[@]}" env RGAPS_SOCKET="${SOCK[B]}" bash -c \
		'"$@" & echo $! >"$PIDFILE"; wait $!; rc=$?; times; exit $rc' _ \
		"$RGAPS" sub "$topic" --count "$COUNT" $warm_opt --timeout 500
	wait_until 20 knows_sub A B "$topic" || fail "B's subscription to $topic did not reach A"
	if [ -z "$warm_opt" ]; then # the meters start before the publisher
		n_pub=0 n_fwd=0 n_land=0 b_sent=0 b_landed=0 p0=0
		cpu_snap "${DPID[A]}" A >"$T/cpu0"
		cpu_snap "${DPID[B]}" B >>"$T/cpu0"
		q0=$(proc_ticks "$(cat "$PIDFILE")")
	fi
	bg "p$topic" "${cpuenv[@]}" env RGAPS_SOCKET="${SOCK[A]}" bash -c \
		'"$@" & echo $! >"$PIDFILE.pub"; wait $!; rc=$?; times; exit $rc' _ \
		"$RGAPS" pub "$topic" --count "$COUNT" --size "$MSG" --fixed-payload "${loan[@]}" \
		--timeout 500
	if [ -n "$warm_opt" ]; then
		wait_until 300 grep -q '^warm ' "$T/$topic.out" || fail "the subscriber never warmed up"
		subpid=$(cat "$PIDFILE"); pubpid=$(cat "$PIDFILE.pub")
		# each side's counts just before its snapshot (a query takes a few ms)
		n_pub=$(count A "$topic" published); n_fwd=$(count A "$topic" forwarded)
		b_sent=$(count A "" bytes_sent)
		p0=$(proc_ticks "$pubpid"); cpu_snap "${DPID[A]}" A >"$T/cpu0"
		n_land=$(count B "$topic" messages); b_landed=$(count B "" bytes_landed)
		q0=$(proc_ticks "$subpid"); cpu_snap "${DPID[B]}" B >>"$T/cpu0"
	fi
	wait_ok "p$topic"
	wait_ok "$topic"
	{ cpu_snap "${DPID[A]}" A; cpu_snap "${DPID[B]}" B; } >"$T/cpu1"
	gib() { awk -v n="$1" -v b="$msg_bytes" 'BEGIN { printf "%.6f", n * b / 1073741824 }'; }
	# the bytes a tcp thread moved in the window: every message's record, less what it
	# had moved before (a record: the 64-byte header and the chunk)
	bgib() {
		awk -v n="$COUNT" -v m="$msg_bytes" -v done="$1" \
			'BEGIN { printf "%.6f", (n * m - done) / 1073741824 }'
	}
	{
		cpu_per_gib "$T/cpu0" "$T/cpu1" "$(gib $((COUNT - n_fwd)))" "$(bgib "$b_sent")" \
			"$(gib $((COUNT - n_land)))" "$(bgib "$b_landed")"
		p1=$(client_ticks "$T/p$topic.out"); q1=$(client_ticks "$T/$topic.out")
		awk -v d=$((p1 - ${p0:-0})) -v t="$TICK" -v g="$(gib $((COUNT - n_pub)))" \
			'BEGIN { if (g > 0) printf "pub %.4f\n", d / t / g }'
		awk -v d=$((q1 - ${q0:-0})) -v t="$TICK" -v g="$(gib $((COUNT - WARMUP)))" \
			'BEGIN { if (g > 0) printf "sub %.4f\n", d / t / g }'
	} | sort -k2 -gr >"$T/cpu.$tag"
	echo "$run $s $zc $mode pub_at_warm $n_pub fwd_at_warm $n_fwd landed_at_warm $n_land" >>"$T/windows"
	rate=$(grep -m1 '^steady ' "$T/$topic.out" | sed -E 's/.*: ([0-9.]+) MiB\/s.*/\1/')
	if [ -z "$rate" ]; then
		# No warm-up (WARMUP=0, or a build whose `rgaps sub` lacks it): first take to the end
		rate=$(grep -m1 '^received ' "$T/$topic.out" | sed -E 's/.* in ([0-9.]+) s.*/\1/' |
			awk -v n="$COUNT" -v b="$msg_bytes" '$1 > 0 { printf "%.1f", (n - 1) * b / 1048576 / $1 }')
		[ -n "$rate" ] || fail "no rate from the subscriber: $(cat "$T/$topic.out")"
	fi
	grep -q " gaps 0 drops 0 " "$T/$topic.out" ||
		fail "the subscriber missed messages: $(grep received "$T/$topic.out")"
	# how many of A's zerocopy sends the kernel completed by copying (loopback: all)
	[ "$zc" = 0 ] || echo "$tag: zc_sends $(count A "" zc_sends) zc_copied $(count A "" zc_copied)" \
		>>"$T/zc"
	stop_pair
	awk -v r="$rate" 'BEGIN { printf "%.3f", r / 1024 }'
}

lat_round() { # -> "on64 off64 on256 off256" p50 in ms
	local out="" t size
	mkdir -p "$T/lat.d"
	for size in 64 256; do
		echo '{ "chunking": true, "chunk_size": "4MiB" }' >"$T/lat.d/on$size.json"
		echo '{ "chunking": false }' >"$T/lat.d/off$size.json"
	done
	CUDA_VISIBLE_DEVICES= start_pair 1 0 host "\"topics_dir\": \"$T/lat.d\","
	for t in on64 off64 on256 off256; do
		size=${t#o[nf]}; size=${size#f}
		bg "l$t" env CUDA_VISIBLE_DEVICES= RGAPS_SOCKET="${SOCK[B]}" "$RGAPS" sub "$t" --count "$NLAT" --timeout 120 --latency
		wait_until 20 knows_sub A B "$t" || fail "subscription $t"
		on A env CUDA_VISIBLE_DEVICES= "$RGAPS" pub "$t" --count "$NLAT" --size "${size}MiB" --rate 2 >/dev/null ||
			fail "publish $t"
		wait_ok "l$t"
		out="$out $(grep -o 'p50 [0-9.]*' "$T/l$t.out" | awk '{ printf "%.1f", $2 / 1000 }')"
	done
	stop_pair
	echo $out
}

# ---------------------------------------------------------------- the run

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
echo "machine: $cpu, $(nproc) CPUs, $(uname -r), $("$IPERF3" --version | head -n 1 | cut -d' ' -f1-2)"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit ${RGAPS_COMMIT:-$(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo '?')}"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "rgaps: $COUNT messages of $MSG per round, figure over the last $((COUNT - (WARMUP ? WARMUP : 1)))$([ "$WARMUP" -gt 0 ] || echo " (no warm-up: CPU over the whole round)"); topic: $base ${TOPIC:-}"
echo "iperf3: -P S -t $IPERF_SECS, default writes; modes: $MODES; streams: $STREAMS; zerocopy: $ZEROCOPY; runs: $RUNS"
echo
printf '%-4s %-3s %-3s %-10s %10s %10s %7s   %s\n' run S ZC mode iperf3 rgaps ratio \
	"busiest threads, CPU s/GiB"
for ((run = 1; run <= RUNS; run++)); do
	for s in $STREAMS; do
		ip=$(iperf_round "$s" "$run")
		for zc in $ZEROCOPY; do
			for mode in $MODES; do
				rg=$(rgaps_round "$s" "$zc" "$mode" "$run")
				ratio=$(awk -v a="$rg" -v b="$ip" 'BEGIN { printf "%.2f", a / b }')
				echo "$run $s $zc $mode $ip $rg $ratio" >>"$T/results"
				printf '%-4s %-3s %-3s %-10s %10s %10s %7s   %s\n' "$run" "$s" "$zc" "$mode" \
					"$ip" "$rg" "$ratio" "$(head -n 4 "$T/cpu.$run.$mode.$s$([ "$zc" = 0 ] ||
						echo .zc)" | awk '{ printf "%s %s  ", $1, $2 }')"
			done
		done
	done
	if [ "$LAT" = 1 ]; then
		echo "$run $(lat_round)" >>"$T/lat"
	fi
done

echo
echo "summary over $RUNS runs (min / median / max; GiB/s; ratio = rgaps / iperf3 within each run)"
printf '%-3s %-3s %-10s %-22s %-22s %-18s\n' S ZC mode iperf3 rgaps ratio
mmm() { # column of $T/results for S, zerocopy and mode -> "min / median / max"
	awk -v s="$1" -v z="$2" -v m="$3" -v c="$4" '$2 == s && $3 == z && $4 == m { print $c }' \
		"$T/results" | sort -g |
		awk '{ v[NR] = $1 } END { if (NR) printf "%s / %s / %s", v[1], v[int((NR + 1) / 2)], v[NR] }'
}
for s in $STREAMS; do
	for zc in $ZEROCOPY; do
		for mode in $MODES; do
			printf '%-3s %-3s %-10s %-22s %-22s %-18s\n' "$s" "$zc" "$mode" \
				"$(mmm "$s" "$zc" "$mode" 5)" "$(mmm "$s" "$zc" "$mode" 6)" \
				"$(mmm "$s" "$zc" "$mode" 7)"
		done
	done
done
echo
echo "CPU s/GiB per thread, every round (A/ and B/: the daemons' threads; pub, sub: the clients;"
echo "iperf3: its client and server processes, all their threads)"
for f in "$T"/cpu.*; do
	echo "  ${f##*/cpu.}: $(awk '{ printf "%s %s  ", $1, $2 }' "$f")"
done
if [ -f "$T/zc" ]; then
	echo
	echo "zerocopy sends of A (run.mode.S.zc: sends, of which the kernel completed by a copy)"
	sed 's/^/  /' "$T/zc"
fi
if [ "$LAT" = 1 ]; then
	echo
	echo "publish -> take p50 (ms), host topics, S = 1: 64 MiB chunked 4 MiB / whole; 256 MiB chunked / whole"
	while read -r run a b c d; do
		printf '  run %s: 64 MiB %s / %s (%.2f); 256 MiB %s / %s (%.2f)\n' "$run" "$a" "$b" \
			"$(awk -v x="$a" -v y="$b" 'BEGIN { print x / y }')" "$c" "$d" \
			"$(awk -v x="$c" -v y="$d" 'BEGIN { print x / y }')"
	done <"$T/lat"
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
