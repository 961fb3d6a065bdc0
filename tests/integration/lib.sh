# Shared helpers of the integration tests: each test gets its own directory,
# socket and daemon instance; every process it starts is killed and every
# segment removed on exit, pass or fail. Timeouts bound every wait.
set -u
: "${RGAPS_BUILD:?RGAPS_BUILD must point at the build directory}"
RGAPSD="$RGAPS_BUILD/src/daemon/rgapsd"
RGAPS="$RGAPS_BUILD/tools/rgaps"
ITEST="$RGAPS_BUILD/tests/integration/itest-client"
export RGAPS_PLUGIN_DIR="$RGAPS_BUILD/plugins"
T=$(mktemp -d /tmp/rgaps-itest.XXXXXX)
export RGAPS_SOCKET="$T/rgapsd.sock"
INSTANCE="it$$"
PIDS=()
DAEMON_PID=

# Sanitizer builds: any report anywhere fails the test.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
sanitizer_reports() {
	grep -l -E "(ERROR|WARNING): (Address|Leak|Thread)Sanitizer|runtime error:" "$T"/*.out "$T"/*.log 2>/dev/null
}

cleanup() {
	local rc=$?
	for p in "${PIDS[@]}" $DAEMON_PID; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	if [ $rc -eq 0 ] && [ -n "$(sanitizer_reports)" ]; then
		echo "FAIL: sanitizer reports in: $(sanitizer_reports)"
		grep -h -A12 -E "(ERROR|WARNING): (Address|Leak|Thread)Sanitizer|runtime error:" $(sanitizer_reports) | head -60
		rc=1
	fi
	if [ $rc -ne 0 ]; then
		for f in "$T"/*.log; do
			[ -f "$f" ] || continue
			echo "---- $(basename "$f") (warnings and the last 15 lines) ----"
			grep -E " (warn|error): " "$f" | tail -n 15
			tail -n 15 "$f"
		done
	fi
	rm -f /dev/shm/rgaps-"$INSTANCE"* 2>/dev/null
	if [ -n "${RGAPS_TEST_KEEP:-}" ]; then echo "kept $T"; else rm -rf "$T"; fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

# start_daemon [extra rgapsd args...]: start and wait for the socket (5 s).
start_daemon() {
	"$RGAPSD" --socket "$RGAPS_SOCKET" --instance "$INSTANCE" --log-level "${RGAPS_TEST_LOG:-info}" "$@" \
		>>"$T/rgapsd.log" 2>&1 &
	DAEMON_PID=$!
	for _ in $(seq 100); do
		[ -S "$RGAPS_SOCKET" ] && "$RGAPS" topics >/dev/null 2>&1 && return 0
		kill -0 "$DAEMON_PID" 2>/dev/null || fail "rgapsd exited at start: $(tail -n 5 "$T/rgapsd.log")"
		sleep 0.05
	done
	fail "rgapsd did not come up in 5 s"
}

stop_daemon() {
	[ -n "$DAEMON_PID" ] || return 0
	kill -TERM "$DAEMON_PID" 2>/dev/null
	for _ in $(seq 100); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.05; done
	kill -0 "$DAEMON_PID" 2>/dev/null && fail "rgapsd ignored SIGTERM for 5 s"
	wait "$DAEMON_PID" 2>/dev/null; local rc=$?
	DAEMON_PID=
	[ $rc -eq 0 ] || fail "rgapsd exited $rc after SIGTERM"
}

# bg NAME CMD...: run in the background with a timeout, output in $T/NAME.out
bg() {
	local name=$1; shift
	timeout -k 2 "${BG_TIMEOUT:-60}" "$@" >"$T/$name.out" 2>&1 &
	PIDS+=($!)
	eval "PID_$name=$!"
}

# kill9 NAME: SIGKILL the program a bg job runs (not its timeout wrapper)
kill9() {
	local pid kids
	eval "pid=\$PID_$1"
	kids=$(pgrep -P "$pid")
	[ -n "$kids" ] || fail "kill9 $1: no process under $pid"
	kill -9 $kids
	wait "$pid" 2>/dev/null
}

# wait_ok NAME: wait for a bg job and require exit 0
wait_ok() {
	local name=$1 pid
	eval "pid=\$PID_$name"
	wait "$pid"; local rc=$?
	[ $rc -eq 0 ] || { cat "$T/$name.out"; fail "$name exited $rc"; }
}

# stat_field TOPIC JSONPATH (python-free: rgaps stats --json piped through a tiny jq-like)
stat_json() { "$RGAPS" stats "$1" --json; }
pool_used() { stat_json "$1" | grep -m1 '"pool_used"' | tr -dc '0-9'; }
nsubs() { "$RGAPS" topics --json | tr -d ' \t\n' | grep -o "\"name\":\"$1\"[^}]*" | grep -o '"subscribers":[0-9]*' | tr -dc '0-9'; }

# predicates for wait_until (evaluated on every poll)
subs_are() { test "$(nsubs "$1")" = "$2"; }
pool_is() { test "$(pool_used "$1")" = "$2"; }

# wait_until SECONDS CMD...: poll CMD every 50 ms until it succeeds
wait_until() {
	local n=$(( $1 * 20 )); shift
	for _ in $(seq "$n"); do "$@" && return 0; sleep 0.05; done
	return 1
}
