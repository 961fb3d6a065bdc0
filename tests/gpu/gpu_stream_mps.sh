#!/bin/bash
# Stream order with and without CUDA MPS (docs/BENCHMARKS.md, "Stream order"):
# `gpu-mbench --stream-order` (through gpu_mbench.sh) once as the processes
# run by default, each with its own context that the GPU time-slices, then
# once with every process (rgapsd, publisher, subscriber) a client of a
# private MPS server, which runs their work side by side. The difference is
# the context switch between the publisher's and the subscriber's work.
# The MPS server is this script's own (private pipe and log folders) and is
# told to quit on every exit path; the GPU's compute mode is not changed.
# Skips (77) without a GPU; the MPS half skips without nvidia-cuda-mps-control.
# Run: RGAPS_BUILD=<build dir> bash tests/gpu/gpu_stream_mps.sh
set -u
: "${RGAPS_BUILD:?RGAPS_BUILD must point at the build directory}"
HERE=$(dirname "$0")
[ -x "$RGAPS_BUILD/tests/gpu/gpu-mbench" ] ||
	{ echo "SKIP: gpu-mbench not built (no nvcc at configure time)"; exit 77; }
# The probe exits 77 when there is no GPU; any other failure is a broken setup, not a skip.
rc=0
"$RGAPS_BUILD/tests/gpu/gpu-pub" --probe || rc=$?
[ $rc = 0 ] || { [ $rc = 77 ] || echo "FAIL: gpu-pub --probe exited $rc"; exit $rc; }

echo "== stream order, one context per process (no MPS)"
MBENCH_PARTS=stream timeout -k 5 200 bash "$HERE/gpu_mbench.sh" || exit $?

if ! command -v nvidia-cuda-mps-control >/dev/null; then
	echo "SKIP (part): the MPS half: no nvidia-cuda-mps-control on this machine"
	exit 0
fi
CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d /tmp/rgaps-mps-pipe.XXXXXX)
CUDA_MPS_LOG_DIRECTORY=$(mktemp -d /tmp/rgaps-mps-log.XXXXXX)
export CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
stop_mps() {
	echo quit | timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
	rm -rf "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
}
trap stop_mps EXIT
nvidia-cuda-mps-control -d || { echo "FAIL: nvidia-cuda-mps-control -d"; exit 1; }
echo "== stream order, every process a client of one MPS server"
MBENCH_PARTS=stream timeout -k 5 200 bash "$HERE/gpu_mbench.sh" | sed 's/^RESULT stream /RESULT stream mps=1 /'
exit "${PIPESTATUS[0]}"
