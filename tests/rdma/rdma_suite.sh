#!/bin/bash
# tests/rdma/rdma_suite.sh BUILD_DIR [--bench]
#
# Runs INSIDE the Soft-RoCE VM (tests/rdma/run.sh starts it): every verbs test
# of rgaps against the real rxe0 device, one VM boot for all of them. Binaries
# come from BUILD_DIR (built on the host). Ends with "N passed, M failed, K
# skipped" and exits 1 if anything failed; 77 (a skip, with the reasons) if
# there is no RDMA device here or every inner test skipped; 0 otherwise, with a
# "SKIP (part): ..." line for each inner test that skipped.
#
#   verbs-test      the plugin through its ABI (tests/rdma/verbs_test.c), at
#                   2 QPs per link (the default), 1 QP with the completion
#                   channel only (no busy polling), and 4 QPs between two addresses
#   conformance     tests/transport/conformance.c --transport verbs, when built
#   e2e             rgapsd end to end over verbs: two daemons as two hosts on
#                   rxe0, 4 verifying subscribers, 4 KiB..16 MiB, a peer
#                   restart (tests/rdma/e2e_verbs.sh)
#   relay           three daemons in a relay chain over verbs, the middle one
#                   passing records on from its receive ring (tests/rdma/relay_verbs.sh)
#   --bench         throughput against ib_write_bw on the same device, same run
set -u
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [--bench]" >&2; exit 2; }
build=$1
shift
bench=0
[ "${1:-}" = --bench ] && bench=1
addr=${RXE_ADDR:-169.254.77.1}
addr2=${RXE_ADDR2:-169.254.77.2}
dev=${RXE_DEV:-rxe0}
export RGAPS_PLUGIN_DIR=$build/plugins
pass=0
fail=0
skipped=0
skips=() # "test: reason" of each inner test that skipped
suite_start=$(date +%s)
work=$(mktemp -d /tmp/rdma-suite.XXXXXX)
pids=()

cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	rm -rf "$work"
}
trap cleanup EXIT

if ! grep -q ACTIVE "/sys/class/infiniband/$dev/ports/1/state" 2>/dev/null; then
	echo "SKIP: no ACTIVE RDMA device $dev here (run this inside the rxe VM: tests/rdma/run.sh)"
	exit 77
fi

find_bin() {
	local c
	for c in "$@"; do
		[ -x "$build/$c" ] && { echo "$build/$c"; return 0; }
	done
	return 1
}

# t NAME CMD...: run one test, keep its output, show it on failure (77 = skipped).
t() {
	local name=$1 s rc
	shift
	s=$(date +%s%N)
	"$@" > "$work/out" 2>&1
	rc=$?
	case $rc in
	0) pass=$((pass + 1)); r=ok ;;
	77)
		skipped=$((skipped + 1))
		r=SKIP
		skips+=("$name: $(sed -n 's/^SKIP[^:]*: //p' "$work/out" | head -n 1)")
		;;
	*) fail=$((fail + 1)); r=FAIL ;;
	esac
	echo "[$r $(( ($(date +%s%N) - s) / 1000000 )) ms] $name"
	grep -E '^(FAIL|SKIP|#)|passed, .* failed' "$work/out" | sed 's/^/    /'
	if [ $rc != 0 ] && [ $rc != 77 ]; then
		echo "    --- last lines:"
		tail -n 60 "$work/out" | sed 's/^/    /'
	fi
}

verbs_test=$(find_bin tests/rdma/verbs-test plugins/transport-verbs/verbs-test) ||
	{ echo "FAIL: verbs-test is not built in $build"; exit 1; }

echo "# rgaps verbs suite on $dev ($(uname -r), $(nproc) vCPU), build $build"
ibv_devinfo -d "$dev" 2>/dev/null | grep -E 'state|active_mtu' | head -2 | sed 's/^[[:space:]]*/#   /'

# ---- the plugin through its ABI
t "verbs-test, 2 QPs per link (default)" \
	"$verbs_test" --addr "$addr" --port 7600
t "verbs-test, 1 QP, completion channel only (no busy polling)" \
	env RGAPS_VERBS_QPS=1 RGAPS_VERBS_BUSY_ROUNDS=0 \
	"$verbs_test" --addr "$addr" --port 7610 --cases records,wrap,credits,down,detach,stats,fini
t "verbs-test, 4 QPs per link, small send queue, listener on the second address" \
	env RGAPS_VERBS_QPS=4 RGAPS_VERBS_SQ_DEPTH=64 RGAPS_VERBS_SIGNAL_EVERY=8 \
	"$verbs_test" --addr "$addr2" --port 7620 --cases records,credits,big,hostile,stats,fini

# ---- the shared transport conformance test, when it is built
# verbs reports a landed record as its 64-byte footprint, without offset (the
# immediate carries 24 bits of 64-byte units, docs/PROTOCOL.md section 3); the
# test checks the footprint of the length it posted and every byte up to the
# exact length (64 + chunk_len in the record header).
conf=$(find_bin tests/transport/transport-conformance) ||
	{ echo "FAIL: $build/tests/transport/transport-conformance is not built"; exit 1; }
t "transport conformance (tests/transport/conformance.c), verbs, cases a b c (records of 1 B..256 KiB)" \
	"$conf" --transport verbs --plugin-dir "$build/plugins" --addr "$addr" --port 7710 \
	--cases abc
t "transport conformance (tests/transport/conformance.c), verbs, cases d e f" \
	"$conf" --transport verbs --plugin-dir "$build/plugins" --addr "$addr" --port 7700 \
	--cases def

# ---- rgapsd end to end over verbs: A on $addr, B on $addr2, both on $dev
t "e2e: two rgapsd over verbs, 4 verifying subscribers, 4 KiB..16 MiB, peer restart" \
	env RXE_ADDR="$addr" RXE_ADDR2="$addr2" bash "$(dirname "$0")/e2e_verbs.sh" "$build"

# ---- the relay path over verbs: three daemons in a chain, A and C on $addr, B on $addr2
t "relay: three rgapsd in a chain over verbs, the middle one passing records on from its ring" \
	env RXE_ADDR="$addr" RXE_ADDR2="$addr2" bash "$(dirname "$0")/relay_verbs.sh" "$build"

# ---- throughput against ib_write_bw (same device, same VM run)
# TCG timings wander with the host's load, so the two alternate, three rounds
# each, and the medians are compared. MiB/s on both sides (perftest's MB is 2^20).
ibwb() { # SIZE COUNT PORT -> BW average
	local size=$1 count=$2 port=$3 spid
	ib_write_bw -d "$dev" -R -F -p "$port" -s "$size" -n "$count" > "$work/ibsrv" 2>&1 &
	spid=$!
	pids+=("$spid")
	sleep 1
	timeout 120 ib_write_bw -d "$dev" -R -F -p "$port" -s "$size" -n "$count" "$addr" \
		> "$work/ibcli" 2>&1
	wait "$spid"
	awk -v s="$size" '$1 == s && NF >= 4 { v = $4 } END { print v }' "$work/ibcli"
}

median3() {
	printf '%s\n' "$@" | sort -g | sed -n 2p
}

if [ $bench = 1 ]; then
	echo "# benchmark: verbs transport vs ib_write_bw on $dev, MiB/s, median of 3 alternating rounds"
	echo "# | record size | records | ib_write_bw | verbs transport | ratio | target 0.8 |"
	echo "# |---|---|---|---|---|---|"
	for spec in 4194304:64 1048576:256 65536:2048; do
		size=${spec%%:*}
		count=${spec##*:}
		refs=()
		ours=()
		ok=1
		for round in 1 2 3; do
			refs+=("$(ibwb "$size" "$count" 18515)")
			timeout 300 "$verbs_test" --bench --addr "$addr" --port $((7800 + round)) \
				--size "$size" --count "$count" --ring $((size * 32)) > "$work/bench" 2>&1
			rc=$?
			line=$(grep '^verbs-bench' "$work/bench")
			v=$(sed -n 's/.* MiBps=\([0-9.]*\).*/\1/p' <<< "$line")
			if [ $rc != 0 ] || [ -z "$v" ] || [ -z "${refs[-1]}" ]; then
				echo "[FAIL] bench $size x $count, round $round: rc $rc, ib_write_bw '${refs[-1]}'"
				tail -n 20 "$work/bench" "$work/ibcli" | sed 's/^/    /'
				ok=0
				break
			fi
			ours+=("$v")
			echo "#   round $round: ib_write_bw ${refs[-1]}, ${line#verbs-bench }"
		done
		if [ $ok = 0 ]; then
			fail=$((fail + 1))
			continue
		fi
		r=$(median3 "${refs[@]}")
		o=$(median3 "${ours[@]}")
		ratio=$(awk -v a="$o" -v b="$r" 'BEGIN { printf "%.2f", a / b }')
		met=$(awk -v x="$ratio" 'BEGIN { print (x >= 0.8) ? "met" : "BELOW" }')
		echo "# | $size | $count | $r (${refs[*]}) | $o (${ours[*]}) | $ratio | $met |"
		pass=$((pass + 1))
	done
fi

# RGAPS_BENCH_EXTRA=1: how the busy-polling cap (RGAPS_VERBS_BUSY_ROUNDS) changes throughput
# here, the caps alternating, three rounds each (docs/VERBS.md "Adaptive hysteresis").
if [ $bench = 1 ] && [ "${RGAPS_BENCH_EXTRA:-0}" = 1 ]; then
	echo "# busy-polling cap sweep, MiB/s, median of 3 alternating rounds"
	echo "# | record size | records | cap 0 | cap 16 (default) | cap 1024 |"
	echo "# |---|---|---|---|---|"
	for spec in 1048576:256 65536:2048; do
		size=${spec%%:*}
		count=${spec##*:}
		declare -A got=()
		for round in 1 2 3; do
			for cap in 0 16 1024; do
				RGAPS_VERBS_BUSY_ROUNDS=$cap timeout 300 "$verbs_test" --bench --addr "$addr" \
					--port $((7900 + round)) --size "$size" --count "$count" \
					--ring $((size * 32)) > "$work/bench" 2>&1
				v=$(sed -n 's/.* MiBps=\([0-9.]*\).*/\1/p' "$work/bench")
				got[$cap]="${got[$cap]:-} ${v:-0}"
			done
		done
		row="# | $size | $count |"
		for cap in 0 16 1024; do
			# shellcheck disable=SC2086
			row="$row $(median3 ${got[$cap]}) (${got[$cap]# }) |"
		done
		echo "$row"
		unset got
	done
fi

echo "# $(( $(date +%s) - suite_start )) s in the VM after boot"
echo "$pass passed, $fail failed, $skipped skipped"
[ $fail = 0 ] || exit 1
# A suite that tested nothing is a skip, not a pass; a partial one says what it left out.
if [ $pass = 0 ]; then
	echo "SKIP: every inner test of the RDMA suite skipped: $(printf '%s; ' "${skips[@]}")"
	exit 77
fi
for s in "${skips[@]}"; do echo "SKIP (part): RDMA suite: $s"; done
exit 0
