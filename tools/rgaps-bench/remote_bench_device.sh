#!/bin/bash
# Daemon to daemon over TCP against iperf3 on a lent machine, in one device call
# (docs/BENCHMARKS.md, "Across hosts, daemon to daemon"): remote_bench.sh with host topics
# (CUDA_VISIBLE_DEVICES empty), streams 1 and 4, zerocopy off and on, three runs.
#
# Here (no GPU needed):   [BUILD=dir] tools/rgaps-bench/remote_bench_device.sh [--no-build]
#   builds what the benchmark needs in BUILD (default build; set up with -Dwerror=true,
#   cuda disabled: host topics only, if it is not there),
#   stages what the benchmark runs into .device/tcp/build (rgapsd, rgaps, librgaps, the
#   host memory and tcp plugins, in the build tree's layout so that their $ORIGIN run
#   paths hold), copies iperf3 and every shared library these need but libc into
#   .device/tcp/{bin,lib}, and prints the device call (carry: .device/tcp).
# There (the lent machine): tools/rgaps-bench/remote_bench_device.sh --on-device
#   builds nothing; runs tools/rgaps-bench/remote_bench.sh on the staged build, bounded by
#   RUN_BUDGET seconds (230), and writes $OUT/tcpbench.log (the table, the summary and the
#   CPU accounting) and $OUT/logs.tar.gz (the daemons' logs). Knobs are remote_bench.sh's
#   (RUNS, STREAMS, ZEROCOPY, MODES, MSG, COUNT, WARMUP, IPERF_SECS, LAT); the defaults
#   here are RUNS=3 STREAMS="1 4" ZEROCOPY="0 1" MODES=host-loan LAT=0 IPERF_SECS=4:
#   twelve rgaps rounds and six iperf3 rounds, about two minutes on 16 cores.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
DEV=.device/tcp
FULL=${BUILD:-build} # the build; what the device runs is staged from it into $DEV/build

if [ "${1:-}" != --on-device ]; then
	set -e
	if [ "${1:-}" != --no-build ]; then
		[ -f $FULL/build.ninja ] ||
			meson setup $FULL -Dcuda=disabled -Dpython=disabled -Dwerror=true
		ninja -C $FULL src/daemon/rgapsd tools/rgaps plugins/memory-host.so \
			plugins/transport-tcp/transport-tcp.so
	fi
	rm -rf $DEV/build $DEV/lib $DEV/bin
	mkdir -p $DEV/build/src/daemon $DEV/build/tools $DEV/build/src/lib $DEV/build/plugins \
		$DEV/lib $DEV/bin
	cp $FULL/src/daemon/rgapsd $DEV/build/src/daemon/
	cp $FULL/tools/rgaps $DEV/build/tools/
	# by its soname, a file (the carry may not keep symbolic links)
	cp -L $FULL/src/lib/librgaps.so.0 $DEV/build/src/lib/
	cp $FULL/plugins/memory-host.so $DEV/build/plugins/
	# the loader wants every plugin in one folder (the build links the tcp one there)
	cp $FULL/plugins/transport-tcp/transport-tcp.so $DEV/build/plugins/
	command -v iperf3 >/dev/null || { echo "no iperf3 here: apt-get install iperf3" >&2; exit 1; }
	cp -L "$(command -v iperf3)" $DEV/bin/iperf3
	# Libraries the device image may lack: all that these need but libc and the loader.
	for f in $DEV/build/src/daemon/rgapsd $DEV/build/tools/rgaps $DEV/build/plugins/*.so \
		$DEV/bin/iperf3; do
		if ldd "$f" | grep "not found"; then
			echo "$f: a library is missing here" >&2
			exit 1
		fi
		ldd "$f" | awk '$3 ~ /^\// { print $3 }'
	done | sort -u | while read -r lib; do
		case "$(basename "$lib")" in
		libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux*) ;;
		librgaps*) ;; # found through the staged tree's $ORIGIN run paths
		*) cp -L "$lib" $DEV/lib/ ;;
		esac
	done
	git rev-parse --short HEAD >$DEV/commit
	du -sh $DEV | sed 's/^/carry size: /'
	echo "libraries: $(ls $DEV/lib | tr '\n' ' ')"
	cat <<'EOF'

The device call (one GPU host of 16 or more CPUs; about two minutes):

run(kind="nvidia-h100-x1", carry=[".device/tcp"], timeout_s=300,
    command="bash tools/rgaps-bench/remote_bench_device.sh --on-device")
EOF
	exit 0
fi

# ---------------------------------------------------------------- on the device

: "${OUT:?OUT must name the folder whose files come back}"
[ -x "$ROOT/$DEV/build/src/daemon/rgapsd" ] ||
	{ echo "no staged build in $DEV/build: run this script here first, then carry $DEV" >&2; exit 1; }
export LD_LIBRARY_PATH="$ROOT/$DEV/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export IPERF3="$ROOT/$DEV/bin/iperf3" RGAPS_COMMIT
RGAPS_COMMIT=$(cat "$ROOT/$DEV/commit" 2>/dev/null || echo '?')
export CUDA_VISIBLE_DEVICES= GPU=0 RGAPS_TEST_KEEP=1
export RUNS=${RUNS:-3} STREAMS=${STREAMS:-1 4} ZEROCOPY=${ZEROCOPY:-0 1} MODES=${MODES:-host-loan}
export LAT=${LAT:-0} IPERF_SECS=${IPERF_SECS:-4}
for f in "$ROOT/$DEV/build/src/daemon/rgapsd" "$ROOT/$DEV/build/tools/rgaps" \
	"$ROOT/$DEV/build/plugins/"*.so "$IPERF3"; do
	if ldd "$f" | grep "not found"; then
		echo "$f: a library is missing on this machine" >&2
		exit 1
	fi
done
BEFORE=$(ls -d /tmp/rgaps-itest.* 2>/dev/null)
echo "rgaps TCP benchmark on the device: $(nproc) CPUs, budget ${RUN_BUDGET:-230} s"
timeout -k 10 "${RUN_BUDGET:-230}" bash tools/rgaps-bench/remote_bench.sh "$ROOT/$DEV/build" \
	2>&1 | tee "$OUT/tcpbench.log"
rc=${PIPESTATUS[0]}
[ "$rc" = 0 ] || echo "remote_bench.sh exited $rc (124: the budget ran out)" | tee -a "$OUT/tcpbench.log"
NEW=$(comm -13 <(echo "$BEFORE" | sort) <(ls -d /tmp/rgaps-itest.* 2>/dev/null | sort) | sed 's|^/||')
[ -z "$NEW" ] || tar czf "$OUT/logs.tar.gz" -C / $NEW 2>/dev/null
exit "$rc"
