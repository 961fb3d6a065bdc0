#!/bin/bash
# tests/rdma/run.sh BUILD_DIR [--bench]
#
# Host side of the Soft-RoCE suite (docs/VERBS.md, "Tests"): builds nothing;
# boots the project's rxe VM (tests/rdma/vm.sh) once and runs
# tests/rdma/rdma_suite.sh BUILD_DIR inside it (the repository is shared into
# the VM at the same path). Exit: the suite's own status; 77 (skip, with the
# reason) when the VM cannot run here; 1 when the VM fails to boot or set up
# rxe0 (a broken harness is not a missing RDMA device) and on a VM timeout.
# --bench also runs the throughput comparison with ib_write_bw
# (docs/BENCHMARKS.md, "verbs").
set -u
here=$(cd "$(dirname "$0")" && pwd -P)
root=$(cd "$here/../.." && pwd -P)
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [--bench]" >&2; exit 2; }
build=$(cd "$1" 2>/dev/null && pwd -P) || { echo "run.sh: no build directory $1" >&2; exit 2; }
shift
vm=$here/vm.sh

skip() {
	echo "SKIP: $*"
	exit 77
}

[ "$(id -u)" = 0 ] || skip "the rxe VM needs root (apt-get, 9p passthrough), this is uid $(id -u)"
plugin=$build/plugins/transport-verbs.so
[ -e "$plugin" ] || skip "$plugin is not built (libibverbs-dev / librdmacm-dev missing at configure time?)"

# The VM shares the current directory read-write; a build tree outside it is shared too.
share=${RGAPS_VM_SHARE:-}
case "$build/" in
"$root"/*) ;;
*) share=${share:+$share:}$build ;;
esac

cd "$root" || exit 2
log=$(mktemp /tmp/rgaps-rdma.XXXXXX)
trap 'rm -f "$log"' EXIT
RGAPS_VM_SHARE=$share RGAPS_VM_TIMEOUT=${RGAPS_VM_TIMEOUT:-780} \
	bash "$vm" bash tests/rdma/rdma_suite.sh "$build" "$@" 2> >(tee "$log" >&2)
rc=$?
wait
case $rc in
125)
	echo "--- VM console / setup messages:"
	tail -n 15 "$log"
	echo "FAIL: the Soft-RoCE VM failed to boot or set up rxe0 (tests/rdma/vm.sh exit 125)"
	exit 1
	;;
124)
	echo "FAIL: the Soft-RoCE VM timed out"
	exit 1
	;;
esac
exit $rc
