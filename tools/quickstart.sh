#!/bin/bash
# The README's two commands: `tools/quickstart.sh demo` and `tools/quickstart.sh test`.
# Both install what a fresh Debian 12 machine lacks, build, then run the demo
# (a daemon, a publisher and verifying subscribers on the embedded defaults)
# or every test suite: unit, integration, transport, packaging and gpu (which
# skips without a GPU), the unit and integration suites again under ASan+UBSan
# and under ThreadSanitizer, the libFuzzer targets (built with clang: every
# corpus replayed, then a short run of each), and the RDMA suite in a Soft-RoCE
# VM with the ASan+UBSan build (skipped with its reason where the VM cannot run).
#
# `test` ends with "== all suites passed" only when nothing was skipped; else
# "== passed, N skipped:" and one line per skipped test (or skipped part of a
# test) saying why. Any failure stops it with a non-zero status.
#
# Environment:
#   RGAPS_TEST_LOAD=N   start N CPU-bound processes (busy loops) beside the first
#                       test run (unit, integration, transport, gpu of the plain
#                       build), to show that the tests pass on a loaded machine;
#                       .ci/run sets 2 (the machine has 2 cores). Default 0.
#   FUZZ_SECONDS=S      length of each libFuzzer run (default 8; 8 targets, as many at
#                       once as there are cores).
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

# Each step's line says how long the command has run so far.
T0=$SECONDS
say() { echo "== [$(( (SECONDS - T0) / 60 ))m$(( (SECONDS - T0) % 60 ))s] $*"; }

SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
# What the build needs: README.md's "Installing from source" names the same list
# (the unit test docs-blocks holds them equal).
PKGS="meson ninja-build pkg-config gcc libc6-dev libuv1-dev liburing-dev libcjson-dev
      libibverbs-dev librdmacm-dev libsodium-dev libncurses-dev libmicrohttpd-dev libcurl4-openssl-dev
      procps iproute2
      python3-dev python3-numpy"
# The tests (cmocka), built by build and test, not by the demo.
[ "$what" != demo ] && PKGS="$PKGS libcmocka-dev"
# The tests also lint the Prometheus text with promtool, build deb and rpm packages and
# check their manual pages, build the fuzz targets with clang, and read meson's test
# log with python3.
[ "$what" = test ] && PKGS="$PKGS prometheus dpkg-dev debhelper lintian rpm mandoc man-db mmdebstrap clang python3"
# The membership tests start etcd members of their own, with certificates made by openssl.
[ "$what" = test ] && PKGS="$PKGS etcd-server etcd-client openssl"
# The Python package's pytest suite (suite "python") and its pip build.
[ "$what" = test ] && PKGS="$PKGS python3-pytest python3-mesonpy python3-venv"
missing=()
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	say "installing: ${missing[*]}"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# CUDA is optional: the cuda plugin and the gpu programs are built when nvcc is there.
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

build() { # build DIR [meson options...]: everything, the tests included
	local dir=$1
	shift
	[ -f "$dir/build.ninja" ] || meson setup "$dir" -Dwerror=true "$@"
	# (the demo's build/ leaves them out)
	meson configure "$dir" | grep -qE '^ *tests +true' || meson configure "$dir" -Dtests=true
	ninja -C "$dir"
}

# What the demo runs, and nothing else: rgapsd, rgaps and the plugins (meson's targets
# defined in plugins/), not the tests, benchmarks and the Python package.
build_demo() {
	local targets
	[ -f build/build.ninja ] || meson setup build -Dwerror=true -Dtests=false
	mapfile -t targets < <(meson introspect build --targets | python3 -c '
import json, os, sys
for t in json.load(sys.stdin):
    if t["name"] in ("rgapsd", "rgaps") or "/plugins/" in t["defined_in"]:
        for f in t["filename"]:
            print(os.path.relpath(f, os.path.abspath("build")))')
	[ ${#targets[@]} -ge 3 ] || { echo "quickstart: no demo targets in build/" >&2; exit 1; }
	ninja -C build "${targets[@]}"
}

# ---- skipped tests (test only): collected from meson's log after each run, printed at the end
SKIPS=
HOGS=()
finish() {
	stop_load
	[ -z "$SKIPS" ] || rm -f "$SKIPS"
}
trap finish EXIT

# collect_skips LABEL BUILD_DIR: every test of the last `meson test` in BUILD_DIR that
# skipped (its "SKIP...: reason" line), and every "SKIP (part): ..." line of one that passed
collect_skips() {
	python3 - "$1" "$2/meson-logs/testlog.json" >>"$SKIPS" <<'PY'
import json, re, sys
label, log = sys.argv[1], sys.argv[2]
for line in open(log):
    t = json.loads(line)
    out = t.get("stdout") or ""
    name = t["name"].split(" / ", 1)[-1]
    if t["result"] == "SKIP":
        why = [m.group(1) for m in re.finditer(r"^SKIP[^:\n]*: (.*)$", out, re.M)]
        print(f"{label}: {name}: {why[0] if why else 'no reason given'}")
    for m in re.finditer(r"^SKIP \(part\): (.*)$", out, re.M):
        if t["result"] != "SKIP":
            print(f"{label}: {name} (part): {m.group(1)}")
PY
}

# suites LABEL BUILD_DIR [meson test args...]: run them, then collect their skips
suites() {
	local label=$1 dir=$2
	shift 2
	meson test -C "$dir" --print-errorlogs --no-rebuild "$@"
	collect_skips "$label" "$dir"
}

start_load() { # N: N busy loops until stop_load
	local i
	for i in $(seq "$1"); do
		bash -c 'while :; do :; done' &
		HOGS+=($!)
	done
	say "load: $1 CPU-bound processes run beside these tests (RGAPS_TEST_LOAD=$1)"
}
stop_load() {
	local p
	for p in "${HOGS[@]}"; do kill "$p" 2>/dev/null || true; done
	HOGS=()
}

case "$what" in
build)
	say "building"
	build build
	;;
demo)
	say "building rgapsd, rgaps and the plugins"
	build_demo
	exec tools/demo.sh build
	;;
test)
	say "building"
	build build
	SKIPS=$(mktemp /tmp/rgaps-skips.XXXXXX)
	say "unit, integration, transport, packaging and gpu suites"
	# The integration suite beside the busy loops (it must pass on a loaded machine),
	# then the other suites without them.
	[ "${RGAPS_TEST_LOAD:-0}" -gt 0 ] && start_load "$RGAPS_TEST_LOAD"
	suites plain build --suite integration
	stop_load
	# Suite slow (a 30 s etcd outage, run alone) is for releases, not for every CI run.
	suites plain build --no-suite integration --no-suite rdma --no-suite packaging \
		--no-suite known_bug --no-suite slow
	# Tests that show an open bug are not run, and counted among the skipped.
	# (meson fails "No suitable tests defined" while none is open)
	{ meson test -C build --list --no-rebuild --suite known_bug 2>/dev/null || true; } |
		sed -n 's|^.* / ||p' |
		while read -r t; do echo "plain: $t: not run: it shows an open bug (docs/TESTING.md, Known bugs)"; done >>"$SKIPS"
	suites plain build --suite packaging
	say "unit and integration under ASan+UBSan"
	# The sanitizer builds make only what their runs test (unit, integration, rdma): the
	# gpu programs need a GPU and the Python package has its own suite on the plain build.
	build build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug \
		-Dcuda=disabled -Dpython=disabled
	# Same tests but the two with 12 daemons on etcd (etcd_mesh, etcd_cluster: the
	# membership's scale, 35 s under ASan, whose code the other etcd tests run with 4 or
	# 5 daemons), smaller cross-host volume: ASan makes the byte checks ~5x slower.
	# (By name: meson runs the tests that match a name and a --suite, not either.)
	sanitizer_heavy='etcd_mesh|etcd_cluster'
	mapfile -t asan_tests < <(meson test -C build-asan --list --no-rebuild --suite unit \
		--suite integration 2>/dev/null | sed -n 's|^.* / ||p' | grep -vxE "$sanitizer_heavy")
	[ "${#asan_tests[@]}" -gt 20 ] || { echo "quickstart: too few tests to run under ASan" >&2; exit 1; }
	REMOTE_COUNT=150 suites asan build-asan "${asan_tests[@]}"
	say "unit and integration under ThreadSanitizer (rgapsd's loop, forwarder and worker threads)"
	build build-tsan -Db_sanitize=thread -Db_lundef=false -Dbuildtype=debug -Dcuda=disabled \
		-Dpython=disabled
	# TSan slows every access ~10x while 8 verifying subscribers share the CPUs: a
	# smaller cross-host volume and longer keepalives, so that rgapsd's loop is not
	# starved past them. It runs the tests where threads meet (the remote path's
	# forwarder, copy and stage workers, clients against the loop), not those that
	# only feed the loop thread hostile or excessive input (plain and ASan run those):
	# they took half of its time. Nor the 12-daemon etcd tests (as under ASan).
	tsan_only_input='attack_shm|attack_fence|attack_names|attack_objects|attack_shm_full|attack_fds|peer_flood|dataport_flood|big_replies|limits_connections|limits_frames|limits_replies|limits_topics|visibility|bad_input|connect_errors|config|oracle-cli|harness|topic_idle|sd_notify|prometheus|top|cli'
	# (By name: meson runs the tests that match a name and a --suite, not either.)
	mapfile -t tsan_tests < <(meson test -C build-tsan --list --no-rebuild --suite unit \
		--suite integration 2>/dev/null | sed -n 's|^.* / ||p' |
		grep -vxE "$tsan_only_input|$sanitizer_heavy")
	[ "${#tsan_tests[@]}" -gt 20 ] || { echo "quickstart: too few tests to run under TSan" >&2; exit 1; }
	TSAN_OPTIONS=${TSAN_OPTIONS:-report_signal_unsafe=0} REMOTE_COUNT=60 REMOTE_KEEPALIVE_MS=5000 \
		suites tsan build-tsan "${tsan_tests[@]}"
	export FUZZ_SECONDS=${FUZZ_SECONDS:-8}
	say "fuzz targets (clang, libFuzzer): every corpus replayed, then $FUZZ_SECONDS s of each"
	[ -f build-fuzz/build.ninja ] || CC=clang meson setup build-fuzz -Dfuzz=true -Dcuda=disabled
	ninja -C build-fuzz fuzz-targets
	suites fuzz build-fuzz --suite fuzz
	# One VM run (3-4 minutes), with the ASan+UBSan build: the same tests as the plain
	# build, plus the verbs plugin's memory safety. Two runs did not fit in CI's 20
	# minutes (docs/TESTING.md); `meson test -C build --suite rdma` runs the plain one.
	say "RDMA: the verbs transport over Soft-RoCE, in a VM, with the ASan+UBSan build"
	suites rdma-asan build-asan --suite rdma
	n=$(grep -c . "$SKIPS" || true)
	if [ "$n" = 0 ]; then
		say "all suites passed"
	else
		say "passed, $n skipped:"
		sed 's/^/   /' "$SKIPS"
	fi
	;;
esac
