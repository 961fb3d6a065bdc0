#!/bin/bash
# Build here (no GPU needed) for the lent GPU machine and print the `run` call
# that executes the gpu suite and the benchmark there (docs/GPU.md).
#
# The build goes to .device/build (ignored by git, carried to the device); the
# shared libraries the device image lacks are copied to .device/lib. Meson
# build dirs hold absolute paths of this machine, so the scripts locate every
# binary from RGAPS_BUILD and pass --plugin-dir / RGAPS_PLUGIN_DIR explicitly;
# nothing is rebuilt or reconfigured on the device.
#
# Usage: tests/gpu/run-on-device.sh [--no-build]
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
export PATH=/usr/local/cuda/bin:$PATH
if [ "${1:-}" != --no-build ]; then
	if [ ! -f .device/build/build.ninja ]; then
		meson setup .device/build -Dcuda=enabled -Dwerror=true
	fi
	# Only what the GPU runs need, so that a half-edited tool elsewhere does not stop it.
	ninja -C .device/build src/daemon/rgapsd tools/rgaps plugins/memory-host.so \
		plugins/memory-cuda.so plugins/transport-tcp/transport-tcp.so \
		tests/gpu/gpu-pub tests/gpu/gpu-sub tests/gpu/gpu-bench tests/gpu/gpu-e2e
	# The loader wants every plugin in one folder; the build links the tcp one there
	# with a symbolic link, which the carry to the device may not keep: copy it.
	cp --remove-destination .device/build/plugins/transport-tcp/transport-tcp.so \
		.device/build/plugins/transport-tcp.so
fi
[ -x .device/build/tests/gpu/gpu-pub ] || { echo "gpu programs not built: is nvcc in PATH?" >&2; exit 1; }

# Libraries of this machine that the device image may not have: everything the
# rgaps binaries and plugins need except libc, libstdc++ and the CUDA driver.
mkdir -p .device/lib
for f in .device/build/src/daemon/rgapsd .device/build/tools/rgaps \
	.device/build/plugins/*.so .device/build/tests/gpu/gpu-*; do
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

Now call the device tool (one call runs the selftest, the suite and the benchmark):

run(carry=[".device"], timeout_s=600, command=
  "export LD_LIBRARY_PATH=$PWD/.device/lib:$LD_LIBRARY_PATH RGAPS_BUILD=$PWD/.device/build
   RGAPS_PLUGIN_DIR=$PWD/.device/build/plugins;
   timeout 60 .device/build/tests/gpu/gpu-pub --selftest;
   timeout 200 bash tests/gpu/gpu_suite.sh > $OUT/suite.log 2>&1; echo suite rc=$?; cat $OUT/suite.log;
   BENCH_TIMEOUT=170 timeout 180 bash tests/gpu/gpu_bench.sh > $OUT/bench.log 2>&1; echo bench rc=$?;
   timeout 200 bash tests/gpu/gpu_remote.sh > $OUT/remote.log 2>&1; echo remote rc=$?;
   BENCH_TIMEOUT=330 timeout 345 bash tests/gpu/gpu_e2e.sh > $OUT/e2e.log 2>&1; echo e2e rc=$?")
EOF
