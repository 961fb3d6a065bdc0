#!/bin/bash
# Relay trees against the star (docs/BENCHMARKS.md "Relay trees across hosts",
# docs/SCALING.md): hosts as network namespaces on one switch, each host's link
# shaped with tc to the same RATE both ways, a publisher on H0 and one subscriber
# on each of N hosts (H1 .. HN, subscribing in that order). For each message size,
# each N and each of star, chain and tree:2, ROUNDS times:
#   - the time from the publish of one message to the last host's subscriber
#     holding it (the largest publish-to-take latency of the N subscribers);
#   - the bytes the publisher's host sent on its link meanwhile (its egress).
# Each round first sends a 64 KiB message through the tree (so that every ring of
# it is set up), then the one measured. Then a relay killed mid-stream: a chain
# of KILL_N hosts, messages of 4 MiB at 4 a second, its second host SIGKILLed;
# the time from the kill until every host below it has received or been told
# lost every message published before the kill, and, once the stream ends,
# received + reported lost = published on every host that lived.
# Usage (root: network namespaces):
#   tools/rgaps-bench/relay_bench.sh [BUILD_DIR]
#   RATE=200mbit SIZES="64MiB 256MiB" NS="1 2 4 8" ROUNDS=3 KILL_N=4 (the defaults)
set -u
B=$(cd "${1:-build}" && pwd)
export RGAPS_BUILD=$B
. "$(dirname "$0")/../../tests/integration/lib.sh"
. "$(dirname "$0")/../../tests/integration/remote_lib.sh"
. "$(dirname "$0")/../../tests/integration/netns_lib.sh"
RATE=${RATE:-200mbit}
SIZES=${SIZES:-64MiB 256MiB}
NS=${NS:-1 2 4 8}
ROUNDS=${ROUNDS:-3}
KILL_N=${KILL_N:-4}
CHUNK=${CHUNK:-1MiB}
MODES="star chain tree:2"
nmax=0
for n in $NS $KILL_N; do [ "$n" -gt $nmax ] && nmax=$n; done
largest=$(for s in $SIZES; do echo "$s"; done | sort -h | tail -1)

echo "# relay_bench: $(date -u +%FT%TZ) on $(hostname), $(nproc) CPUs, $(uname -r)"
echo "# $((nmax + 1)) hosts in network namespaces, each link $RATE both ways (tc tbf); chunks of $CHUNK"
netns_hosts $((nmax + 1)) "$RATE"

# One topic per size and mode, the mode in the topic's file; pools for two messages.
mkdir -p "$T/topics.d"
for s in $SIZES kill; do
	for m in $MODES; do
		name="${s}_${m/:/}"
		echo "{ \"name\": \"$name\", \"relay\": \"$m\" }" >"$T/topics.d/$name.json"
	done
done
DAEMON_EXTRA="\"topics_dir\": \"$T/topics.d\","
pool=$(($(numfmt --from=iec-i "${largest%B}") * 2))
DEFAULTS=", \"pool_size\": $pool, \"max_message_size\": \"$largest\", \"ring_size\": \"16MiB\",
  \"chunk_size\": \"$CHUNK\", \"resend_window\": \"64MiB\", \"queue_depth\": 8, \"block_timeout_ms\": 600000"
for ((i = 0; i <= nmax; i++)); do start_host H$i "$DEFAULTS"; done
for ((i = 1; i <= nmax; i++)); do
	wait_until 30 peer_up H0 H$i || fail "H0-H$i session did not come up"
done

# subscribe TOPIC N COUNT [ARGS]: a subscriber on H1 .. HN, joining in that order, each
# known to every one of those hosts (and to H0) before the next joins
subscribe() {
	local t=$1 n=$2 count=$3 i j
	shift 3
	for ((i = 1; i <= n; i++)); do
		BG_TIMEOUT=900 bg "s$i" env RGAPS_SOCKET=${SOCK[H$i]} "$RGAPS" sub "$t" --count "$count" --timeout 800 "$@"
		for ((j = 0; j <= n; j++)); do
			[ $j = $i ] || wait_until 30 knows_sub H$j H$i "$t" || fail "H$j never learned that H$i subscribes to $t"
		done
		sleep 0.01
	done
}
landed() { hstats "$1" "$2" 2>/dev/null | grep -o '"from_peers":{"messages":[0-9]*' | tr -dc 0-9; }
# landed_all HOST TOPIC N: HOST published N messages of TOPIC (so far) and its subscriber took them
landed_all() {
	local s
	s=$(hstats "$1" "$2")
	[ "$(grep -o '"from_peers":{"messages":[0-9]*' <<<"$s" | tr -dc 0-9)" -ge "$3" ] &&
		! grep -q '"daemon":false,[^}]*"lag":[1-9]' <<<"$s"
}
max_latency_ms() { # N: the largest max latency of s1 .. sN, in ms
	local i l worst=0
	for ((i = 1; i <= $1; i++)); do
		l=$(grep -o 'max [0-9.]*' "$T/s$i.out" | head -1 | cut -d' ' -f2)
		worst=$(awk -v a="$worst" -v b="$l" 'BEGIN { print (b > a ? b : a) }')
	done
	awk -v w="$worst" 'BEGIN { printf "%.0f", w / 1000 }'
}
stats3() { # values...: "min median max" of the numbers
	printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { printf "%s %s %s", v[1], v[int((NR + 1) / 2)], v[NR] }'
}

printf '\n%-8s %3s %-7s %28s %32s\n' size N mode "publish->last host, ms" "publisher egress, MiB/message"
printf '%-8s %3s %-7s %28s %32s\n' "" "" "" "min / median / max" "min / median / max"
for s in $SIZES; do
	bytes=$(numfmt --from=iec-i "${s%B}")
	for n in $NS; do
		for m in $MODES; do
			t="${s}_${m/:/}" lat=() egr=()
			for ((r = 0; r < ROUNDS; r++)); do
				# Subscribers stay until every host has the message: one that left
				# would take its host out of the tree while it still passes it on.
				declare -A base
				for ((i = 1; i <= n; i++)); do base[H$i]=$(landed H$i "$t"); done
				subscribe "$t" "$n" 1000 --latency
				on H0 "$RGAPS" pub "$t" --count 1 --size 64KiB >/dev/null || fail "warm-up $t"
				for ((i = 1; i <= n; i++)); do
					wait_until 60 landed_all H$i "$t" $((${base[H$i]:-0} + 1)) ||
						fail "the warm-up of $t did not reach H$i"
				done
				tx0=$(netns_tx H0)
				on H0 "$RGAPS" pub "$t" --count 1 --size "$s" >/dev/null || fail "publish $t"
				for ((i = 1; i <= n; i++)); do
					wait_until 900 landed_all H$i "$t" $((${base[H$i]:-0} + 2)) ||
						fail "$t did not reach H$i"
				done
				tx1=$(netns_tx H0)
				for ((i = 1; i <= n; i++)); do stop_bg "s$i" INT 130; done
				lat+=("$(max_latency_ms "$n")")
				egr+=("$(awk -v b=$((tx1 - tx0)) 'BEGIN { printf "%.1f", b / 1048576 }')")
			done
			printf '%-8s %3s %-7s %28s %32s\n' "$s" "$n" "$m" "$(stats3 "${lat[@]}")" "$(stats3 "${egr[@]}")"
		done
	done
	echo "# one message of $s takes $(awk -v b="$bytes" -v r="${RATE%mbit}" 'BEGIN { printf "%.0f", b * 8 / (r * 1e6) * 1000 }') ms on one link at $RATE"
done

# ---- a relay killed mid-stream
t="kill_chain" count=100000
subscribe "$t" "$KILL_N" "$count" --allow-gaps
BG_TIMEOUT=900 bg pub env RGAPS_SOCKET=${SOCK[H0]} "$RGAPS" pub "$t" --count $count --size 4MiB --rate 4
wait_until 60 eval '[ "$(hstats H$KILL_N "$t" | grep -o "\"from_peers\":{\"messages\":[0-9]*" | tr -dc 0-9)" -ge 8 ]' ||
	fail "the chain did not reach H$KILL_N"
published() { on H0 "$RGAPS" topics --json | flat | grep -o "{\"name\":\"$t\"[^}]*" | grep -o '"published":[0-9]*' | tr -dc 0-9; }
told_next() { hstats "$1" "$t" | grep -o "{\"topic\":\"$t\",\"origin\":[^}]*" | grep -o '"told_next":[0-9]*' | tr -dc 0-9; }
at_kill=$(published)
k0=${EPOCHREALTIME/./}
stop_host H2 KILL
end_bg s2
rm -f /dev/shm/rgaps-"$INSTANCE"H2-*
declare -A took
for ((i = 3; i <= KILL_N; i++)); do took[H$i]=; done
until [ -z "$(for h in "${!took[@]}"; do [ -n "${took[$h]}" ] || echo "$h"; done)" ]; do
	now=${EPOCHREALTIME/./}
	[ $((now - k0)) -lt 60000000 ] || fail "hosts below the killed relay did not account for the $at_kill messages in 60 s"
	for h in "${!took[@]}"; do
		[ -n "${took[$h]}" ] && continue
		v=$(told_next "$h")
		[ "${v:-0}" -ge "$at_kill" ] && took[$h]=$(awk -v d=$((now - k0)) 'BEGIN { printf "%.2f", d / 1e6 }')
	done
	sleep 0.05
done
sleep 5
stop_bg pub INT 130
final=$(grep -o '^published [0-9]*' "$T/pub.out" | tr -dc 0-9)
echo
echo "relay killed mid-stream: chain H0 > H1 > ... > H$KILL_N, 4 MiB messages at 4/s, H2 SIGKILLed with $at_kill published"
for ((i = 3; i <= KILL_N; i++)); do
	echo "  H$i: every message published before the kill received or told lost $(printf %s "${took[H$i]}") s after it"
done
for ((i = 1; i <= KILL_N; i++)); do
	[ $i = 2 ] && continue
	wait_until 60 eval '[ "$(told_next H'$i')" -ge "$final" ]' || fail "H$i did not account for all $final messages"
	wait_until 30 eval '! hstats H'$i' "$t" | grep -q "\"daemon\":false,[^}]*\"lag\":[1-9]"' || true
	stop_bg s$i INT 130
	r=$(sub_field s$i received) g=$(sub_field s$i gaps) d=$(sub_field s$i drops)
	echo "  H$i: received $r + reported lost $((g + d)) = $((r + g + d)) of $final published"
done
for ((i = 0; i <= nmax; i++)); do [ $i = 2 ] || stop_host H$i; done
