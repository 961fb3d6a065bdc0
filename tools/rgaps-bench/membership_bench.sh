#!/bin/bash
# The membership in etcd on this machine: one etcd member (Debian's etcd-server)
# and daemons on loopback standing for hosts, every number from this one run:
#   1. join: from a new subscriber host's start (its rgapsd exec'd) to its first
#      message from a publisher host that publishes 200 messages a second, with
#      1, 10 and 50 daemons registered before it (ROUNDS rounds each);
#   2. etcd load with 50 daemons: requests and watch events per second (summed
#      over the 50 daemons' own counts; etcd's count of the gRPC calls it served,
#      the churning daemons' included, beside), at steady state (no change) and
#      during churn (one daemon leaves and one joins every second), each over
#      WINDOWS windows of WINDOW_S seconds.
# Usage: tools/rgaps-bench/membership_bench.sh [BUILD_DIR]   (LEASE_TTL: 10 s)
set -u
B=$(cd "${1:-build}" && pwd)
export RGAPS_BUILD=$B
PORT_SPAN=600
LEASE_TTL=${LEASE_TTL:-10}
. "$(dirname "$0")/../../tests/integration/lib.sh"
. "$(dirname "$0")/../../tests/integration/etcd_lib.sh"
ROUNDS=${ROUNDS:-7}
WINDOWS=${WINDOWS:-3}
WINDOW_S=${WINDOW_S:-10}
SMALL=', "pool_size": "4MiB", "max_message_size": "64KiB", "ring_size": "1MiB", "chunk_size": "256KiB", "resend_window": "0"'
now_ms() { echo $(( ${EPOCHREALTIME/./} / 1000 )); }
stats3() { # min median max of the numbers on stdin
	sort -n | awk '{ v[NR] = $1 } END { printf "%s / %s / %s", v[1], v[int((NR + 1) / 2)], v[NR] }'
}

start_etcd 1
HOSTS=()
grow() { # grow N: N daemons registered (H0 publishes)
	local i h
	for ((i = ${#HOSTS[@]}; i < $1; i++)); do
		h="H$i"
		host "$h" "$i"
		HOSTS+=("$h")
		NO_WAIT=1 start_host "$h" "$SMALL"
	done
	for h in "${HOSTS[@]}"; do wait_until 60 host_answers "$h" || fail "$h did not come up"; done
	wait_until 120 all_live $(($1 - 1)) "${HOSTS[@]}" || fail "$1 daemons did not find each other"
}
host S 55

join_round() { # one new subscriber host: ms from its start to its first message
	local t0 t1 rc=1
	t0=$(now_ms)
	NO_WAIT=1 start_host S "$SMALL"
	for _ in $(seq 2000); do
		RGAPS_SOCKET=${SOCK[S]} timeout 30 "$RGAPS" sub bench --count 1 >/dev/null 2>&1 && { rc=0; break; }
		sleep 0.005
	done
	t1=$(now_ms)
	[ $rc = 0 ] || fail "S's subscriber got nothing"
	stop_host S
	wait_until 30 hosts_are H0 $((${#HOSTS[@]} - 1)) || fail "H0 did not drop S"
	echo $((t1 - t0))
}

declare -A JOIN
for n in 1 10 50; do
	grow $n
	if [ $n = 1 ]; then
		BG_TIMEOUT=3600 bg pub env RGAPS_SOCKET=${SOCK[H0]} "$RGAPS" pub bench --count 100000000 --size 4KiB --rate 200
	fi
	: >"$T/join$n"
	for ((r = 0; r < ROUNDS; r++)); do join_round >>"$T/join$n"; done
	JOIN[$n]=$(stats3 <"$T/join$n")
	echo "join with $n registered (ms, min / median / max of $ROUNDS): ${JOIN[$n]}"
done

# ---- etcd load with 50 daemons
sum_of() { # sum_of FIELD: over every daemon's membership.etcd object
	local h s t=0 v
	for h in "${HOSTS[@]}"; do
		s=$(hstats "$h")
		v=$(grep -o '"etcd":{[^}]*' <<<"$s" | grep -o "\"$1\":[0-9]*" | cut -d: -f2)
		t=$((t + ${v:-0}))
	done
	echo $t
}
served() { # gRPC calls etcd served, all methods
	curl -s "$(etcd_url 0)/metrics" | awk '/^grpc_server_handled_total/ { s += $2 } END { printf "%d", s }'
}
sample() { echo "$(now_ms) $(sum_of requests) $(sum_of watch_events) $(served)"; }
rates() { # rates "T R W E" "T R W E": requests/s, watch events/s, etcd calls/s
	awk -v a="$1" -v b="$2" 'BEGIN { split(a, x); split(b, y); dt = (y[1] - x[1]) / 1000
		printf "%.1f %.1f %.1f", (y[2] - x[2]) / dt, (y[3] - x[3]) / dt, (y[4] - x[4]) / dt }'
}
report() { # report WHAT FILE: min / median / max of each column of FILE's rate lines
	echo "$1: requests/s $(cut -d' ' -f1 "$2" | stats3), watch events/s $(cut -d' ' -f2 "$2" | stats3), etcd served calls/s $(cut -d' ' -f3 "$2" | stats3) (min / median / max of $WINDOWS windows of $WINDOW_S s)"
}
sleep 2
: >"$T/steady"
for ((w = 0; w < WINDOWS; w++)); do
	s0=$(sample)
	sleep "$WINDOW_S"
	rates "$s0" "$(sample)" >>"$T/steady"
	echo >>"$T/steady"
done
report "steady, 50 daemons, lease $LEASE_TTL s" "$T/steady"

# Churn: every second the oldest of three extra daemons leaves and another one joins.
for i in 0 1 2; do host "C$i" $((51 + i)); done
NO_WAIT=1 start_host C0 "$SMALL"
wait_until 30 host_answers C0 || fail "C0"
t=0
churn() { # one second: C(t) leaves, C(t+1) joins
	local tick=$(now_ms) out="C$((t % 3))" in="C$(((t + 1) % 3))" left
	t=$((t + 1))
	stop_host "$out"
	NO_WAIT=1 start_host "$in" "$SMALL"
	left=$((1000 - ($(now_ms) - tick)))
	[ $left -le 0 ] || sleep "$(awk -v l=$left 'BEGIN { printf "%.3f", l / 1000 }')"
}
: >"$T/churn"
for ((w = 0; w < WINDOWS; w++)); do
	c0=$(sample)
	for ((k = 0; k < WINDOW_S; k++)); do churn; done
	rates "$c0" "$(sample)" >>"$T/churn"
	echo >>"$T/churn"
done
last="C$((t % 3))"
wait_until 30 host_answers "$last" || fail "$last"
report "churn, 50 daemons and one leaving and one joining every second" "$T/churn"
HOSTS+=("$last")
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); etcd $(etcd --version | head -1 | awk '{ print $3 }'); $(date -u +%Y-%m-%d)"
end_bg pub
etcd_finish "${HOSTS[@]}"
