#!/bin/bash
# The GPU run of rgaps in one device call (docs/GPU.md, "Building and running
# on a lent GPU").
#
# Here (no GPU needed):   tests/gpu/run-on-device.sh [--no-build]
#   builds .device/build (meson, cuda enabled, -Dwerror=true; only what the GPU
#   runs need), copies the shared libraries the device image lacks to
#   .device/lib, and prints the device call.
# There (the lent machine): tests/gpu/run-on-device.sh --on-device
#   builds nothing; runs every GPU test and the GPU benchmarks (local fan-out,
#   several GPUs and stream order)
#   on however many GPUs there are (parts that need two say why they skip),
#   each part bounded by `timeout`, the whole by RUN_BUDGET seconds (530);
#   a part that fails or times out does not stop the others. Writes to $OUT:
#     summary.txt   every part: PASS / FAIL / SKIP (why) / TIMEOUT, seconds;
#                   then the targets, computed from the RESULT lines
#     results.txt   every RESULT line and the benchmark tables
#     logs.tar.gz   every log: the parts' outputs, rgapsd logs, client outputs
#   and prints summary.txt at the end. RUN_PARTS="machine table7 ..." runs only
#   the parts named.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

if [ "${1:-}" != --on-device ]; then
	set -e
	export PATH=/usr/local/cuda/bin:$PATH
	if [ "${1:-}" != --no-build ]; then
		if [ ! -f .device/build/build.ninja ]; then
			meson setup .device/build -Dcuda=enabled -Dwerror=true
		fi
		# Only what the GPU runs need, so that a half-edited tool elsewhere does not stop it.
		ninja -C .device/build src/daemon/rgapsd tools/rgaps plugins/memory-host.so \
			plugins/memory-cuda.so plugins/transport-tcp/transport-tcp.so \
			tests/gpu/gpu-pub tests/gpu/gpu-sub tests/gpu/gpu-bench tests/gpu/gpu-e2e \
			tests/gpu/gpu-mbench tests/oracle/oracle-pub \
			plugins/stage-gpusum.so tests/gpu/gpu-stage-check tests/fault/transport-tcp.so
		# The loader wants every plugin in one folder; the build links the tcp one there
		# with a symbolic link, which the carry to the device may not keep: copy it.
		cp --remove-destination .device/build/plugins/transport-tcp/transport-tcp.so \
			.device/build/plugins/transport-tcp.so
	fi
	[ -x .device/build/tests/gpu/gpu-mbench ] ||
		{ echo "gpu programs not built: is nvcc in PATH?" >&2; exit 1; }
	# iperf3 for the daemon-to-daemon benchmark beside it (part tcpbench)
	mkdir -p .device/lib .device/bin
	if command -v iperf3 >/dev/null; then
		cp -L "$(command -v iperf3)" .device/bin/iperf3
	else
		echo "no iperf3 here: part tcpbench will fail (apt-get install iperf3)" >&2
	fi
	# Libraries of this machine that the device image may not have: everything the
	# rgaps binaries and plugins need except libc, libstdc++ and the CUDA driver.
	for f in .device/build/src/daemon/rgapsd .device/build/tools/rgaps \
		.device/build/plugins/*.so .device/build/tests/gpu/gpu-* .device/bin/*; do
		[ -f "$f" ] || continue
		ldd "$f" | awk '$3 ~ /^\// { print $3 }'
	done | sort -u | while read -r lib; do
		case "$(basename "$lib")" in
		libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++*|libgcc_s*|libcuda.so*) ;;
		librgaps*) ;; # found through the build tree's $ORIGIN run paths
		*) cp -L "$lib" .device/lib/ ;;
		esac
	done
	du -sh .device | sed 's/^/carry size: /'
	ls .device/lib
	cat <<'EOF'

Now one device call runs everything (kind nvidia-h100-x2 or any; about 6 minutes):

run(kind="nvidia-h100-x2", carry=[".device"], timeout_s=600,
    command="bash tests/gpu/run-on-device.sh --on-device")
EOF
	exit 0
fi

# ---------------------------------------------------------------- on the device

: "${OUT:?OUT must name the folder whose files come back}"
export LD_LIBRARY_PATH="$ROOT/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RGAPS_BUILD="$ROOT/.device/build" RGAPS_PLUGIN_DIR="$ROOT/.device/build/plugins"
export RGAPS_TEST_KEEP=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
	NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PATH="$PATH:/usr/local/cuda/bin"
START=$(date +%s)
DEADLINE=$((START + ${RUN_BUDGET:-530}))
LOGS=$(mktemp -d /tmp/rgaps-device.XXXXXX)
BEFORE=$(ls -d /tmp/rgaps-itest.* 2>/dev/null) # the tests' own folders of this run are kept
SUMMARY="$OUT/summary.txt"
RESULTS="$OUT/results.txt"
: >"$SUMMARY"
: >"$RESULTS"
echo "rgaps GPU run, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')" |
	tee -a "$SUMMARY"

# part NAME MAX_SECONDS CMD...: run it bounded by its cap and what is left of the budget.
part() {
	local name=$1 max=$2 left rc t0 t1 status why
	shift 2
	# RUN_PARTS="machine table7 ...": only those (a second call for what changed).
	case " ${RUN_PARTS:-$name} " in *" $name "*) ;; *) return 0 ;; esac
	left=$((DEADLINE - $(date +%s)))
	if [ "$left" -lt 25 ]; then
		printf '%-16s SKIP    (time budget spent: %d s left)\n' "$name" "$left" | tee -a "$SUMMARY"
		return 0
	fi
	[ "$max" -gt $((left - 10)) ] && max=$((left - 10))
	echo "---- $name (at most ${max} s)"
	t0=$(date +%s)
	timeout -k 10 "$max" "$@" >"$LOGS/$name.log" 2>&1
	rc=$?
	t1=$(date +%s)
	case $rc in
	0) status=PASS why= ;;
	77) status=SKIP why=$(grep -m1 -i "skip" "$LOGS/$name.log" | cut -c1-150) ;;
	124 | 137) status=TIMEOUT why="killed after ${max} s" ;;
	*) status=FAIL why=$(grep -m1 "FAIL" "$LOGS/$name.log" | cut -c1-200) ;;
	esac
	printf '%-16s %-7s %4d s  rc %3d  %s\n' "$name" "$status" $((t1 - t0)) "$rc" "$why" |
		tee -a "$SUMMARY"
	if [ "$status" = FAIL ] || [ "$status" = TIMEOUT ]; then
		echo "     last lines of $name:"
		tail -n 25 "$LOGS/$name.log" | sed 's/^/     | /'
	fi
	return 0
}

machine() {
	echo "== nvidia-smi"; nvidia-smi -L; nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv
	echo "== topology"; nvidia-smi topo -m
	echo "== nvlink"; nvidia-smi nvlink -s 2>&1 | head -40
	echo "== cpu"; nproc; grep -m1 "model name" /proc/cpuinfo; uname -r
	echo "== tools"; compute-sanitizer --version 2>&1 | head -2
	python3 -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count(), "nccl", torch.cuda.nccl.version())' 2>&1 | tail -1
	echo "== libraries"
	for f in "$RGAPS_BUILD"/src/daemon/rgapsd "$RGAPS_BUILD"/plugins/memory-cuda.so "$RGAPS_BUILD"/tests/gpu/gpu-pub; do
		ldd "$f" | grep -i "not found" && { echo "missing libraries for $f"; return 1; }
	done
	"$RGAPS_BUILD/tests/gpu/gpu-pub" --probe
	echo "GPUs: $("$RGAPS_BUILD/tests/gpu/gpu-pub" --gpus)"
}
dp1() { "$RGAPS_BUILD/tests/gpu/gpu-e2e" --dp1-only --reps 30,20,10; }
table7() {
	BENCH_TIMEOUT=$(($1 - 10)) bash tests/gpu/gpu_bench.sh --schemes rgaps,rgaps-loan \
		--subs 1,8,16,32 --reps 20,10,5
}
export -f machine dp1 table7 # timeout runs programs, not functions: bash -c runs these

part machine 40 bash -c machine
G=$("$RGAPS_BUILD/tests/gpu/gpu-pub" --gpus 2>/dev/null || echo 1)
part selftest 40 "$RGAPS_BUILD/tests/gpu/gpu-pub" --selftest
part oracle 60 bash tests/gpu/gpu_oracle.sh
part suite 150 bash tests/gpu/gpu_suite.sh
part reserve 60 bash tests/gpu/gpu_reserve.sh
part multi 180 bash tests/gpu/gpu_multi.sh
part stream 200 bash tests/gpu/gpu_stream.sh
part remote 120 bash tests/gpu/gpu_remote.sh
part gpustage 120 bash tests/gpu/gpu_stage.sh
part mbench 240 bash tests/gpu/gpu_mbench.sh
part dp1-run1 60 bash -c dp1
part dp1-run2 60 bash -c dp1
part dp1-run3 60 bash -c dp1
part table7 150 bash -c "table7 150"
# After the benchmarks of a fixed length, so that they keep their budget:
# RUN_PARTS="machine relay" runs it alone.
part relay 90 bash tests/gpu/gpu_relay.sh
# Daemon to daemon over TCP against iperf3, host topics then GPU topics, three runs, in
# what is left of the budget (tools/rgaps-bench/remote_bench.sh; docs/BENCHMARKS.md "Across
# hosts"). Alone: RUN_PARTS="machine tcpbench" RUN_BUDGET=580; host topics alone, in one
# call of its own: tools/rgaps-bench/remote_bench_device.sh.
export IPERF3="$ROOT/.device/bin/iperf3"
part tcpbench 520 bash tools/rgaps-bench/remote_bench.sh "$RGAPS_BUILD"

# ---------------------------------------------------------------- results and targets

grep -h "^RESULT" "$LOGS"/*.log >>"$RESULTS" 2>/dev/null
for f in mbench table7; do
	[ -f "$LOGS/$f.log" ] || continue
	echo "==== $f" >>"$RESULTS"
	grep -v "^RESULT" "$LOGS/$f.log" | grep -E "^(gpu-|  |==|[0-9]|size|RESULT|rgapsd|nccl)" >>"$RESULTS"
done
if [ -f "$LOGS/tcpbench.log" ]; then # its table, summary and CPU accounting, whole
	{ echo "==== tcpbench"; grep -v " rgapsd\[" "$LOGS/tcpbench.log"; } >>"$RESULTS"
fi
{
	echo
	echo "== targets (from the RESULT lines; GPUs: $G)"
	python3 - "$RESULTS" <<'PY' || echo "(python3 failed: see results.txt)"
import re, sys, statistics as st
rows = [dict(re.findall(r"(\w+)=(\S+)", l)) | {"kind": l.split()[1]}
        for l in open(sys.argv[1]) if l.startswith("RESULT ")]
fan = [r for r in rows if r["kind"] == "fanout"]
nccl = {(r["G"], r["size"]): float(r["ms"]) for r in rows if r["kind"] == "nccl"}
one = {r["size"]: float(r["delivered_ms"]) for r in fan if r["scheme"] == "one-gpu"}
for r in fan:
    if r["scheme"] == "one-gpu":
        continue
    d, rd, base = float(r["delivered_ms"]), float(r["ready_ms"]), one.get(r["size"])
    n = nccl.get((r["G"], r["size"]))
    ratio = f"{d / base:.2f}x one GPU" if base else "no one-GPU run"
    vs = f", NCCL {n:.3f} ms ({'met' if d <= n else 'not met'})" if n else ", no NCCL run"
    tgt = ""
    if r["size"] in ("64MiB", "1GiB") and base:
        tgt = " target <=1.5x: " + ("met" if d <= 1.5 * base else "NOT MET")
    print(f"fanout {r['scheme']:8} G={r['G']} {r['size']:6} delivered {d:8.3f} ms "
          f"(ready {rd:8.3f}) = {ratio}{tgt}{vs}")
for r in rows:
    if r["kind"] == "stream" and "async_over_sync" in r:
        v = float(r["async_over_sync"])
        print(f"stream order {r['size']:6} producer work {r.get('work_us', '0'):>5} us: "
              f"push_async / push+sync = {v:.3f} "
              f"(target <= 0.5: {'met' if 0 < v <= 0.5 else 'NOT MET'})")
dp = {}
for r in rows:
    if r["kind"] == "dp1":
        dp.setdefault((r["variant"], r["mode"], r["size"]), []).append(float(r["ratio"]))
for (v, m, s), xs in sorted(dp.items()):
    print(f"DP1 {v:15} {m:12} {s:6} runs {len(xs)}: min {min(xs):.3f} median "
          f"{st.median(xs):.3f} max {max(xs):.3f} (target >= 0.95: "
          f"{'met' if min(xs) >= 0.95 else 'median met' if st.median(xs) >= 0.95 else 'NOT MET'})")
PY
} >>"$SUMMARY"

NEW=$(comm -13 <(echo "$BEFORE" | sort) <(ls -d /tmp/rgaps-itest.* 2>/dev/null | sort) | sed 's|^/||')
tar czf "$OUT/logs.tar.gz" --warning=no-file-ignored -C / "${LOGS#/}" $NEW 2>/dev/null
ls -la "$OUT" | sed 's/^/out: /'
echo
echo "================ summary ($(($(date +%s) - START)) s)"
cat "$SUMMARY"
