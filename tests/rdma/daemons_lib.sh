# The start of the tests that run rgapsd daemons inside the rxe VM (e2e_verbs.sh,
# relay_verbs.sh), sourced as `. daemons_lib.sh BUILD_DIR TRANSPORT`: the build
# directory (RGAPS_BUILD), a skip (77) when that transport's plugin was not built,
# then tests/integration's lib.sh and remote_lib.sh (several daemons as hosts).
set -u
[ -n "${1:-}" ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
RGAPS_BUILD=$(cd "$1" && pwd -P) || exit 2
export RGAPS_BUILD
TR=$2
if [ ! -e "$RGAPS_BUILD/plugins/transport-$TR.so" ]; then
	echo "SKIP: $RGAPS_BUILD/plugins/transport-$TR.so is not built"
	exit 77
fi
. "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
. "$(dirname "${BASH_SOURCE[0]}")/../integration/remote_lib.sh"
