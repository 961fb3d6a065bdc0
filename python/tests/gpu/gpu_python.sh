#!/bin/bash
# The GPU run of the Python package (issue 9), in one call of the device tool,
# under 4 minutes, everything logged in $OUT:
#   1. gpu_checks.py: torch producer + 4 consumer processes checking every
#      element on the GPU, zero-copy proof, interop (torch -> CuPy, JAX;
#      CuPy, __cuda_array_interface__, JAX -> torch), streams, a consumer
#      SIGKILLed holding GPU tensors, clear errors;
#   2. gpu_bench.py: Python against the C benchmark (gpu-bench) and against
#      torch.multiprocessing queues and pickling, 4 MiB and 64 MiB, 1 and 8
#      consumers; bench_latency.py: 4 KiB Python against C on host memory;
#      publish_cost.py: what a publish() of a CUDA tensor spends, step by step;
#   3. compute-sanitizer memcheck on a torch producer and a torch consumer.
# Built here by python/tests/gpu/prepare-device.sh (which prints the call);
# on the device: bash python/tests/gpu/gpu_python.sh. Skips (77) with the
# reason where no GPU or torch is usable. GPU_PY_BUDGET: seconds (230).
set -u
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$ROOT"
: "${RGAPS_BUILD:=$ROOT/.device/build}"
OUT=${OUT:-$(mktemp -d /tmp/rgaps-gpupy-out.XXXXXX)}
mkdir -p "$OUT"
BUDGET=${GPU_PY_BUDGET:-230}
START=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - START))); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $((l > 5 ? l - 5 : 1)); }
export RGAPS_BUILD PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$RGAPS_BUILD/python${PYTHONPATH:+:$PYTHONPATH}"
export LD_LIBRARY_PATH="$ROOT/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RGAPS_PLUGIN_DIR="$RGAPS_BUILD/plugins"
# JAX takes 75 % of the GPU at start unless told not to; NVLink multicast stays off.
export XLA_PYTHON_CLIENT_PREALLOCATE=false NCCL_NVLS_ENABLE=0
exec > >(tee "$OUT/gpu_python.log") 2>&1
HERE=python/tests/gpu
PY=${PYTHON:-python3}
SANITIZER=${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}
command -v "$SANITIZER" >/dev/null || SANITIZER=$(command -v compute-sanitizer || true)

echo "== $(date -u '+%F %T') UTC; budget ${BUDGET} s; OUT=$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader ||
	{ echo "SKIP: nvidia-smi finds no GPU"; exit 77; }
$PY -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__);
sys.exit(0 if torch.cuda.is_available() else 1)' || { echo "SKIP: torch sees no CUDA GPU"; exit 77; }
$PY -c 'import rgaps; print("rgaps", rgaps.__version__, rgaps._rgaps.__file__,
"stream-ordered:", rgaps.STREAM_ORDERED)' || { echo "FAIL: import rgaps"; exit 1; }
[ -x "$RGAPS_BUILD/src/daemon/rgapsd" ] || { echo "FAIL: no rgapsd in $RGAPS_BUILD"; exit 1; }

T=$(mktemp -d /tmp/rgaps-gpupy.XXXXXX)
INSTANCE="gpy$$"
export RGAPS_SOCKET="$T/rgapsd.sock"
DAEMON=
cleanup() {
	local rc=$?
	if [ -n "$DAEMON" ] && kill -TERM "$DAEMON" 2>/dev/null; then
		for _ in $(seq 50); do kill -0 "$DAEMON" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$DAEMON" 2>/dev/null
	fi
	cp "$T/rgapsd.log" "$OUT/rgapsd.log" 2>/dev/null
	rm -rf "$T"
	exit $rc
}
trap cleanup EXIT
mkdir -p "$T/topics.d"
topic() { # NAME MEMORY POOL MAXMSG [extra json]
	printf '{ "memory": "%s", "pool_size": "%s", "max_message_size": "%s"%s }\n' \
		"$2" "$3" "$4" "${5:+, $5}" >"$T/topics.d/$1.json"
}
topic gpu-fan cuda 1GiB 64MiB '"queue_depth": 64'
topic gpu-ix1 cuda 256MiB 16MiB
topic gpu-ix-cupy cuda 256MiB 16MiB
topic gpu-ix-jax cuda 256MiB 16MiB
topic gpu-stream cuda 256MiB 16MiB
topic gpu-kill cuda 64MiB 8MiB '"queue_depth": 16'
topic gpu-err cuda 64MiB 1MiB
topic gpu-hostonly host 16MiB 1MiB
topic san cuda 64MiB 1MiB
topic gbench cuda 2GiB 128MiB '"queue_depth": 64, "block_timeout_ms": 10000'
topic hbench host 256MiB 64MiB '"queue_depth": 64, "block_timeout_ms": 10000'
echo '{ "topics_dir": "topics.d", "defaults": { "memory": "cuda" } }' >"$T/rgapsd.json"
"$RGAPS_BUILD/src/daemon/rgapsd" --socket "$RGAPS_SOCKET" --instance "$INSTANCE" \
	--plugin-dir "$RGAPS_BUILD/plugins" -c "$T/rgapsd.json" >"$T/rgapsd.log" 2>&1 &
DAEMON=$!
for _ in $(seq 100); do
	$PY -c 'import rgaps; rgaps.topics()' 2>/dev/null && break
	kill -0 $DAEMON 2>/dev/null || { echo "FAIL: rgapsd exited: $(tail -5 "$T/rgapsd.log")"; exit 1; }
	sleep 0.1
done
fails=0

# GPU_PY_PARTS: which of checks, bench, sanitizer run (all three); GPU_PY_BENCH_RUNS: how
# many times the benchmarks run back to back (1), for min / median / max over runs.
want() { case " ${GPU_PY_PARTS:-checks bench sanitizer} " in *" $1 "*) return 0 ;; esac; return 1; }
if want checks; then
	echo "== 1. checks ($(left) s left)"
	timeout -k 5 "$(cap 120)" $PY $HERE/gpu_checks.py --json "$OUT/gpu_checks.json"
	rc=$?
	[ $rc -eq 0 ] || { echo "checks: exit $rc"; fails=$((fails + 1)); }
fi

for run in $(seq "${GPU_PY_BENCH_RUNS:-1}"); do
	want bench || break
	sfx=$([ "${GPU_PY_BENCH_RUNS:-1}" = 1 ] || echo "-$run")
	echo "== 2. benchmarks, run $run ($(left) s left)"
	timeout -k 5 "$(cap 100)" $PY $HERE/gpu_bench.py --json "$OUT/gpu_bench$sfx.json" ||
		{ echo "gpu benchmark: exit $?"; fails=$((fails + 1)); }
	timeout -k 5 "$(cap 30)" $PY python/bench/bench_latency.py --build "$RGAPS_BUILD" \
		--iters 4000 --rounds 4 --json "$OUT/bench_latency$sfx.json" ||
		echo "4 KiB host benchmark: exit $? (not counted as a failure)"
	timeout -k 5 "$(cap 30)" $PY $HERE/publish_cost.py --json "$OUT/publish_cost$sfx.json" ||
		echo "publish() step costs: exit $? (not counted as a failure)"
done

echo "== 3. compute-sanitizer memcheck ($(left) s left)"
if ! want sanitizer; then
	echo "note: compute-sanitizer not asked for (GPU_PY_PARTS)"
elif [ -z "$SANITIZER" ]; then
	echo "note: compute-sanitizer not found: not run"
elif [ "$(left)" -lt 40 ]; then
	echo "note: compute-sanitizer not run: only $(left) s of the budget left"
else
	s=$(cap 110)
	CS=("$SANITIZER" --tool memcheck --error-exitcode 99 --print-limit 20)
	timeout -k 5 "$s" "${CS[@]}" $PY $HERE/gpu_checks.py --sanitizer-consumer san -n 10 \
		>"$T/san-sub.log" 2>&1 &
	sub=$!
	timeout -k 5 "$s" "${CS[@]}" $PY $HERE/gpu_checks.py --sanitizer-producer san -n 10 \
		>"$T/san-pub.log" 2>&1
	prc=$?
	wait $sub
	src=$?
	cat "$T/san-pub.log" "$T/san-sub.log" >"$OUT/sanitizer.log"
	tail -n 4 "$T/san-pub.log" "$T/san-sub.log"
	if [ $prc -eq 124 ] || [ $src -eq 124 ]; then
		echo "sanitizer: did not finish within $s s (not counted; see sanitizer.log)"
	elif [ $prc -ne 0 ] || [ $src -ne 0 ] || ! grep -q "ERROR SUMMARY: 0 errors" "$T/san-pub.log" ||
		! grep -q "ERROR SUMMARY: 0 errors" "$T/san-sub.log" ||
		! grep -q "received 20 verified 20" "$T/san-sub.log"; then
		echo "FAIL: compute-sanitizer: producer exit $prc, consumer exit $src"
		fails=$((fails + 1))
	else
		echo "ok: compute-sanitizer memcheck: torch producer and consumer clean, 20 messages verified"
	fi
fi

echo "== done in $(($(date +%s) - START)) s: $fails failed part(s); logs in $OUT"
[ $fails -eq 0 ]
