#!/bin/bash
# Build here, for the lent GPU machine, what python/tests/gpu/gpu_python.sh
# runs: tests/gpu/run-on-device.sh (the cuda build in .device/build, the
# libraries the device lacks in .device/lib), then the Python package and
# the rgaps-bench tool in that build, then print the device call.
set -eu
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$ROOT"
bash tests/gpu/run-on-device.sh "$@" >/dev/null
ninja -C .device/build python/rgaps/_rgaps.abi3.so python/rgaps/__init__.py \
	python/rgaps/__init__.pyi python/rgaps/_rgaps.pyi python/rgaps/py.typed tools/rgaps-bench
for f in .device/build/python/rgaps/_rgaps.abi3.so .device/build/tools/rgaps-bench; do
	ldd "$f" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
	case "$(basename "$lib")" in
	libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++*|libgcc_s*|libcuda.so*) ;;
	librgaps*) ;; # found through the build tree's $ORIGIN run paths
	*) cp -L "$lib" .device/lib/ ;;
	esac
done
# The extension is limited-API (abi3): built with this machine's Python, it loads in the device's.
ls .device/build/python/rgaps/_rgaps.abi3.so
du -sh .device | sed 's/^/carry size: /'
cat <<'CALL'

Now call the device tool (one call, under 4 minutes of device time; logs come back in $OUT):

run(carry=[".device"], timeout_s=300, command="bash python/tests/gpu/gpu_python.sh")
CALL
