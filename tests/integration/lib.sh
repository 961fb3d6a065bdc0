# Shared helpers of the integration tests (sourced first by each test).
#
# Every check can fail: the shell stops at the first command that fails
# (set -e, also inside $(...)), naming its line, unless the test handles the
# status itself (`cmd || fail "why"`, `if cmd`, `expect_exit`). Pipelines are
# not checked as a whole (no pipefail: `producer | grep -q` would fail on the
# producer's SIGPIPE); a test that needs the producer's status captures its
# output first (`s=$(stat_json topic | flat)`), and the helpers here do.
#
# Each test gets its own directory, socket and daemon instance. Every process
# it starts dies with it, pass or fail: background jobs run under timeout(1),
# which makes each its own process group, and the group is killed, not just
# the wrapper; every process that still carries this test's RGAPS_TEST_ID in
# its environment afterwards is reported and killed, and so is any shared
# memory segment of this test's instances: a test that leaves either behind
# fails. Timeouts bound every wait, by the clock.
set -eEu
shopt -s inherit_errexit
: "${RGAPS_BUILD:?RGAPS_BUILD must point at the build directory}"
RGAPSD="$RGAPS_BUILD/src/daemon/rgapsd"
RGAPS="$RGAPS_BUILD/tools/rgaps"
ITEST="$RGAPS_BUILD/tests/integration/itest-client"
export RGAPS_PLUGIN_DIR="$RGAPS_BUILD/plugins"
T=$(mktemp -d /tmp/rgaps-itest.XXXXXX)
export RGAPS_SOCKET="$T/rgapsd.sock"
# Inherited by every process the test starts (env, setpriv, ip netns exec keep it).
export RGAPS_TEST_ID="${T##*/}"
INSTANCE="it$$"
PIDS=()    # processes to stop at exit (daemons started outside start_daemon, ...)
BG_PIDS=() # timeout(1) wrappers of bg jobs: each leads its process group
DAEMON_PID=
LIB_AT_EXIT=()

# Sanitizer builds: any report anywhere fails the test.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
sanitizer_reports() {
	grep -l -E "(ERROR|WARNING): (Address|Leak|Thread)Sanitizer|runtime error:" "$T"/*.out "$T"/*.log 2>/dev/null || true
}

fail() {
	echo "FAIL: $*" >&2
	exit 1
}
ok() { echo "ok: $*"; }
# skip REASON: the test cannot run here; one line that says why (tools/quickstart.sh collects it).
skip() {
	echo "SKIP: $*"
	exit 77
}
# skip_part REASON: a part of the test cannot run here; it goes on (and the line is collected).
skip_part() { echo "SKIP (part): $*"; }

# require WHAT CMD...: CMD probes for WHAT (a GPU, an RDMA device...): exit 0, it is
# here; exit 77 with a "SKIP...: reason" line, it is not, and the test skips with that
# reason; any other status (an error, a crash) fails the test: a probe that breaks
# must not pass for a machine without the device.
require() {
	local what=$1 rc=0 why
	shift
	"$@" >"$T/probe.out" 2>&1 || rc=$?
	case $rc in
	0) return 0 ;;
	77)
		why=$(sed -n 's/^SKIP[^:]*: //p' "$T/probe.out" | head -n 1)
		skip "${why:-no $what here ($* exited 77 without saying why)}"
		;;
	*)
		cat "$T/probe.out"
		fail "the probe for $what ($*) failed with exit $rc: a broken setup, not a missing device"
		;;
	esac
}

lib_on_err() { # LINE FILE COMMAND (the ERR trap: a command failed and nothing handled it)
	local rc=$?
	# Inside $(...) a failure is the substitution's status: the shell that uses it reports it.
	[ "$BASH_SUBSHELL" = 0 ] || return 0
	echo "FAIL: ${2##*/} line $1: '$3' exited $rc" >&2
}
trap 'lib_on_err "$LINENO" "${BASH_SOURCE[0]}" "$BASH_COMMAND"' ERR

# at_exit CMD...: run CMD at exit, after every process of the test is gone (netns, files...).
at_exit() { LIB_AT_EXIT+=("$(printf '%q ' "$@")"); }

# Processes (pids) that carry this test's RGAPS_TEST_ID. The shell itself and its
# subshells do not: it was exported after bash started, and a fork keeps the
# environment bash was started with in /proc.
# Also the children of this shell (one forked but not yet exec'd shows bash's environment).
lib_tagged() {
	local f
	for f in $(env -u RGAPS_TEST_ID grep -lsxzF "RGAPS_TEST_ID=$RGAPS_TEST_ID" /proc/[0-9]*/environ || true); do
		f=${f#/proc/}
		echo "${f%/environ}"
	done
	for f in $(pgrep -P $$ || true); do
		[ "$f" = "$BASHPID" ] && continue
		# a zombie is gone, only not reaped yet
		[ "$(cut -d' ' -f3 "/proc/$f/stat" 2>/dev/null || true)" = Z ] || echo "$f"
	done
}

# lib_ours PID: PID is a process of this test (not a later process that reuses the number)
lib_ours() { env -u RGAPS_TEST_ID grep -qsxzF "RGAPS_TEST_ID=$RGAPS_TEST_ID" "/proc/$1/environ"; }

# daemon_segments [LABEL] [PID]: how many shared-memory objects of rgaps rgapsd (PID, default
# $DAEMON_PID) holds open: memfds labelled rgaps-INSTANCE-TOPIC-ROLE (docs/SHM-LAYOUT.md),
# those whose label holds LABEL if given. They have no name anywhere else.
daemon_segments() {
	local n
	n=$(ls -l "/proc/${2:-$DAEMON_PID}/fd" 2>/dev/null | grep -c "/memfd:rgaps-[^ ]*${1:-}") || true
	echo "${n:-0}"
}

# Shared memory of this test: its instance and the instances of its hosts (INSTANCE + name).
# rgaps names nothing in /dev/shm: one that appears there is a regression, and fails the test.
lib_segments() {
	local f
	for f in /dev/shm/rgaps-"$INSTANCE"-* /dev/shm/rgaps-"$INSTANCE"[A-Za-z]*-*; do
		[ -e "$f" ] && echo "$f"
	done
	return 0
}

# stop_pid PID WHAT: SIGTERM, up to 10 s, then SIGKILL; 0 if it exited 0 on SIGTERM
# (or had exited 0 before).
stop_pid() {
	local p=$1 rc=0
	if ! lib_ours "$p"; then
		wait "$p" 2>/dev/null || rc=$?
		[ $rc = 0 ] || [ $rc = 127 ] || { echo "$2 (pid $p) had exited $rc before it was stopped" >&2; return 1; }
		return 0
	fi
	kill -TERM "$p" 2>/dev/null || true
	wait_until 10 lib_gone "$p" || { kill -KILL "$p" 2>/dev/null; echo "$2 (pid $p) ignored SIGTERM for 10 s" >&2; rc=1; }
	wait "$p" 2>/dev/null || { local w=$?; [ $w = 127 ] || [ $rc = 1 ] || { echo "$2 (pid $p) exited $w after SIGTERM" >&2; rc=1; }; }
	return $rc
}
lib_gone() { ! lib_ours "$1"; }
# forget_pid PID: a process of PIDS is gone and reaped: do not signal its number at exit
forget_pid() {
	local p keep=()
	for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
	PIDS=("${keep[@]}")
}

cleanup() {
	local rc=$? p left segs h
	set +e
	trap - ERR
	# Clients: the whole process group of every bg job (the program, not only its wrapper).
	for p in "${BG_PIDS[@]}"; do
		lib_ours "$p" || continue
		kill -KILL -- "-$p" 2>/dev/null
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	# Daemons: after a pass they are stopped as a user would (SIGTERM, and they must
	# exit 0 and remove their segments); after a failure they are killed.
	for p in $DAEMON_PID "${PIDS[@]}"; do
		lib_ours "$p" || continue
		if [ $rc -eq 0 ]; then
			stop_pid "$p" "a daemon still running at the end" || rc=1
		else
			kill -KILL "$p" 2>/dev/null
			wait "$p" 2>/dev/null
		fi
	done
	if [ $rc -eq 0 ] && [ -n "$(sanitizer_reports)" ]; then
		echo "FAIL: sanitizer reports in: $(sanitizer_reports)"
		grep -h -A12 -E "(ERROR|WARNING): (Address|Leak|Thread)Sanitizer|runtime error:" $(sanitizer_reports) | head -60
		rc=1
	fi
	# Whatever is left escaped its process group: name it, fail, then kill it.
	left=$(lib_tagged)
	if [ -n "$left" ]; then
		echo "FAIL: processes left behind by this test (not in the process group of the job that started them):"
		ps -o pid=,pgid=,ppid=,etimes=,args= -p "${left//$'\n'/,}" | sed 's/^/    /'
		kill -KILL $left 2>/dev/null
		rc=1
	fi
	segs=$(lib_segments)
	if [ -n "$segs" ]; then
		if [ $rc -eq 0 ]; then
			echo "FAIL: shared memory left behind by this test: $(echo $segs)"
			rc=1
		fi
		rm -f $segs
	fi
	for h in "${LIB_AT_EXIT[@]}"; do eval "$h"; done
	# GPU_KEEP_LOGS=DIR: keep every log and output there (device runs: under $OUT)
	if [ -n "${GPU_KEEP_LOGS:-}" ]; then
		mkdir -p "$GPU_KEEP_LOGS" && cp "$T"/*.log "$T"/*.out "$T"/*.json "$GPU_KEEP_LOGS"/ 2>/dev/null
	fi
	if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
		for f in "$T"/*.log; do
			[ -f "$f" ] || continue
			echo "---- $(basename "$f") (warnings and the last 15 lines) ----"
			grep -E " (warn|error): " "$f" | tail -n 15
			tail -n 15 "$f"
			# A sanitizer's report says why a daemon failed; its summary line alone does not.
			if grep -qE "^(WARNING: ThreadSanitizer|==[0-9]+==ERROR: )|runtime error: " "$f"; then
				echo "---- $(basename "$f"): the first sanitizer report ----"
				grep -m1 -A40 -E "^(WARNING: ThreadSanitizer|==[0-9]+==ERROR: )|runtime error: " "$f"
			fi
		done
	fi
	if [ -n "${RGAPS_TEST_KEEP:-}" ]; then echo "kept $T"; else rm -rf "$T"; fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_daemon [extra rgapsd args...]: start and wait for the socket (START_TIMEOUT, 20 s).
# DAEMON_AS=(a prefix that execs its command, e.g. setpriv): run rgapsd through it.
DAEMON_AS=()
start_daemon() {
	${DAEMON_AS[@]+"${DAEMON_AS[@]}"} "$RGAPSD" --socket "$RGAPS_SOCKET" --instance "$INSTANCE" \
		--log-level "${RGAPS_TEST_LOG:-info}" "$@" >>"$T/rgapsd.log" 2>&1 &
	DAEMON_PID=$!
	wait_until "${START_TIMEOUT:-20}" daemon_answers "$DAEMON_PID" ||
		fail "rgapsd did not come up in ${START_TIMEOUT:-20} s: $(tail -n 5 "$T/rgapsd.log")"
}
daemon_answers() { # PID: it answers on $RGAPS_SOCKET (fails the test if it died)
	kill -0 "$1" 2>/dev/null || fail "rgapsd exited at start: $(tail -n 5 "$T/rgapsd.log")"
	[ -S "$RGAPS_SOCKET" ] && "$RGAPS" topics >/dev/null 2>&1
}

stop_daemon() {
	[ -n "$DAEMON_PID" ] || return 0
	local p=$DAEMON_PID
	DAEMON_PID=
	stop_pid "$p" rgapsd || fail "rgapsd did not stop cleanly on SIGTERM"
}

# bg NAME CMD...: run in the background under timeout (BG_TIMEOUT, 60 s), output in
# $T/NAME.out; $PID_NAME is the wrapper, which leads the job's process group.
bg() {
	local name=$1 pid
	shift
	: >"$T/$name.out" # there at once, for a wait_until that greps it
	timeout -k 2 "${BG_TIMEOUT:-60}" "$@" >>"$T/$name.out" 2>&1 &
	pid=$!
	BG_PIDS+=("$pid")
	eval "PID_$name=$pid"
}

# bg_pid NAME: the wrapper's pid
bg_pid() { eval "echo \$PID_$1"; }

# kill9 NAME: SIGKILL the bg job's whole process group (the program, not only its wrapper)
kill9() {
	local pid
	pid=$(bg_pid "$1")
	lib_ours "$pid" || fail "kill9 $1: it is not running: $(tail -n 3 "$T/$1.out")"
	kill -KILL -- "-$pid"
	wait "$pid" 2>/dev/null || true
}

# end_bg NAME: SIGKILL what is left of a bg job whose program may have ended on its own
# (its daemon was killed), and reap it; its exit status does not matter
end_bg() {
	local pid
	pid=$(bg_pid "$1")
	! lib_ours "$pid" || kill -KILL -- "-$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# stop_bg NAME [SIGNAL [CODE]]: signal the bg job's program (default SIGINT: the tools
# end cleanly on it), wait for it, and require exit CODE (default 0; `rgaps pub` and
# `rgaps sub` say 130 when SIGINT stopped them before their --count).
stop_bg() {
	local name=$1 sig=${2:-INT} want=${3:-0} pid kids rc=0 n
	pid=$(bg_pid "$name")
	kids=$(pgrep -P "$pid") || fail "stop_bg $name: its program is not running: $(tail -n 3 "$T/$name.out")"
	kill -"$sig" $kids
	# A signal that lands between a tool's check of its flag and its next wait is
	# seen only when that wait ends: signal again until it has ended (bounded).
	for ((n = 0; n < 100; n++)); do
		sleep 0.2
		kill -"$sig" $kids 2>/dev/null || break # its wrapper reaped it: gone
	done
	wait "$pid" || rc=$?
	[ $rc -eq "$want" ] || { tail -n 20 "$T/$name.out"; fail "$name exited $rc after SIG$sig, expected $want"; }
}

# wait_ok NAME: wait for a bg job and require exit 0
wait_ok() {
	local name=$1 pid rc=0
	pid=$(bg_pid "$name")
	wait "$pid" || rc=$?
	[ $rc -ne 124 ] || { tail -n 20 "$T/$name.out"; fail "$name timed out (BG_TIMEOUT ${BG_TIMEOUT:-60} s)"; }
	[ $rc -eq 0 ] || { tail -n 20 "$T/$name.out"; fail "$name exited $rc"; }
}

# wait_rc NAME CODE: wait for a bg job and require exit CODE
wait_rc() {
	local name=$1 want=$2 pid rc=0
	pid=$(bg_pid "$name")
	wait "$pid" || rc=$?
	[ $rc -eq "$want" ] || { tail -n 20 "$T/$name.out"; fail "$name exited $rc, expected $want"; }
}

# expect_exit CODE CMD...: run CMD (output in $T/expect.out) and require exit CODE
expect_exit() {
	local want=$1 rc=0
	shift
	"$@" >"$T/expect.out" 2>&1 || rc=$?
	[ $rc -eq "$want" ] || { tail -n 20 "$T/expect.out"; fail "$* exited $rc, expected $want"; }
}

# ---- the result line of `rgaps sub` and gpu-sub:
#      "received R verified V mismatched M gaps G drops D ..."
sub_line() { # NAME: the job's last result line (fails the test if it printed none)
	local l
	l=$(grep -a '^received [0-9]* ' "$T/$1.out" | tail -n 1) || true
	[ -n "$l" ] || fail "$1 printed no result line: $(tail -n 3 "$T/$1.out")"
	echo "$l"
}
sub_field() { # NAME FIELD: one number of the job's result line
	local v
	v=$(sub_line "$1" | grep -o "$2 [0-9]*" | head -n 1 | cut -d' ' -f2)
	[ -n "$v" ] || fail "$1: no '$2' in its result line"
	echo "$v"
}
# expect_sub NAME FIELD=VALUE...: each field of the job's result line is exactly VALUE
expect_sub() {
	local name=$1 kv line
	shift
	line=$(sub_line "$name")
	for kv in "$@"; do
		[ "$(sub_field "$name" "${kv%%=*}")" = "${kv#*=}" ] ||
			fail "$name: expected ${kv%%=*} ${kv#*=}: $line"
	done
}
# expect_accounted NAME TOTAL: a verifying subscriber accounted for all TOTAL messages
# published: every one received intact or reported lost (received + gaps + drops),
# none mismatched, each received one verified.
expect_accounted() {
	local name=$1 total=$2 r g d
	r=$(sub_field "$name" received)
	g=$(sub_field "$name" gaps)
	d=$(sub_field "$name" drops)
	expect_sub "$name" mismatched=0 verified="$r"
	[ $((r + g + d)) -eq "$total" ] ||
		fail "$name: received $r + reported lost $((g + d)) != $total published: $(sub_line "$name")"
}

# ---- daemon queries (each fails the test when rgapsd does not answer)
stat_json() { "$RGAPS" stats "$@" --json; }
flat() { tr -d ' \t\n'; }
# jnum JSON KEY: the first number under "KEY" in (flat) JSON; fails if there is none
jnum() {
	local v
	v=$(grep -o "\"$2\":-\?[0-9][0-9.e+-]*" <<<"$1" | head -n 1 | cut -d: -f2) || true
	[ -n "$v" ] || fail "no number \"$2\" in: ${1:0:400}"
	echo "$v"
}
pool_used() { local s; s=$(stat_json "$1" | flat); jnum "$s" pool_used; }
nsubs() {
	local s
	s=$("$RGAPS" topics --json | flat)
	grep -o "\"name\":\"$1\"[^}]*" <<<"$s" | grep -o '"subscribers":[0-9]*' | tr -dc '0-9'
}

# predicates for wait_until (evaluated on every poll; a failed query is "not yet")
subs_are() { test "$(nsubs "$1" 2>/dev/null)" = "$2"; }
pool_is() { test "$(pool_used "$1" 2>/dev/null)" = "$2"; }

# wait_until SECONDS CMD...: poll CMD every 50 ms until it succeeds or SECONDS pass. CMD's
# words are expanded once, by the call: a "$(query)" in them is a constant, so a value that
# must be read again on every poll goes in a predicate function or in eval '...'.
wait_until() {
	local end=$((${EPOCHREALTIME/./} + $1 * 1000000))
	shift
	until "$@"; do
		[ "${EPOCHREALTIME/./}" -lt $end ] || return 1
		sleep 0.05
	done
}
