#!/bin/bash
# The README's two commands: `tools/quickstart.sh demo` and `tools/quickstart.sh test`.
# Both install what a fresh Debian 12 machine lacks, build, then run the demo
# (a daemon, a publisher and verifying subscribers on the embedded defaults)
# or every test suite: unit, integration, transport, packaging and gpu (which
# skips without a GPU), the unit and integration suites again under ASan+UBSan
# and under ThreadSanitizer, and the RDMA suite in a Soft-RoCE VM, plain and
# under ASan+UBSan (skipped with its reason where the VM cannot run).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-}
case "$what" in
demo | test | build) ;;
*)
	echo "usage: $0 demo|test|build" >&2
	exit 2
	;;
esac

SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
PKGS="meson ninja-build pkg-config gcc libc6-dev libuv1-dev liburing-dev libcjson-dev libcmocka-dev
      libibverbs-dev librdmacm-dev libsodium-dev libncurses-dev procps iproute2
      python3-dev python3-numpy"
# The tests also lint the Prometheus text with promtool, and build deb and rpm packages.
[ "$what" = test ] && PKGS="$PKGS prometheus dpkg-dev debhelper lintian rpm mandoc man-db mmdebstrap"
# The Python package's pytest suite (suite "python") and its pip build.
[ "$what" = test ] && PKGS="$PKGS python3-pytest python3-mesonpy python3-venv"
missing=()
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "== installing: ${missing[*]}"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# CUDA is optional: the cuda plugin and the gpu suite are built when nvcc is there.
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

build() { # build DIR [meson options...]
	local dir=$1
	shift
	[ -f "$dir/build.ninja" ] || meson setup "$dir" -Dwerror=true "$@"
	ninja -C "$dir"
}

echo "== building"
build build
case "$what" in
build) ;;
demo) exec tools/demo.sh build ;;
test)
	echo "== unit, integration, transport and gpu suites"
	meson test -C build --print-errorlogs --no-rebuild --no-suite rdma
	echo "== unit and integration under ASan+UBSan"
	build build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug
	# Same tests, smaller cross-host volume: ASan makes the byte checks ~5x slower.
	REMOTE_COUNT=150 meson test -C build-asan --print-errorlogs --no-rebuild --suite unit --suite integration
	echo "== unit and integration under ThreadSanitizer (rgapsd's loop, forwarder and worker threads)"
	build build-tsan -Db_sanitize=thread -Db_lundef=false -Dbuildtype=debug -Dcuda=disabled
	# TSan slows every access ~10x while 8 verifying subscribers share the CPUs: a
	# smaller cross-host volume, so that rgapsd's loop is not starved past keepalives.
	TSAN_OPTIONS=${TSAN_OPTIONS:-report_signal_unsafe=0} REMOTE_COUNT=60 FAULTS_MIN_RECEIVED=2400 \
		meson test -C build-tsan --print-errorlogs --no-rebuild --suite unit --suite integration
	echo "== RDMA: the verbs transport over Soft-RoCE, in a VM"
	meson test -C build --print-errorlogs --no-rebuild --suite rdma
	echo "== RDMA again with the ASan+UBSan build (the verbs plugin's memory safety)"
	meson test -C build-asan --print-errorlogs --no-rebuild --suite rdma
	echo "== all suites passed"
	;;
esac
