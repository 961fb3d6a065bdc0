#!/bin/bash
# The integration harness (tests/integration/lib.sh) is an oracle too: it must
# stop a test at its first unchecked failure, kill every process a test starts
# (a job's whole process group, not its wrapper), fail a test that leaves a
# process or a shared-memory segment behind, stop daemons that fail to stop,
# skip only with a reason, and fail a probe that crashes. Each case runs a tiny
# test script under lib.sh and checks its exit status and what it printed.
set -u
: "${RGAPS_BUILD:?RGAPS_BUILD must point at the build directory}"
LIB=$(cd "$(dirname "$0")/../integration" && pwd)/lib.sh
W=$(mktemp -d /tmp/rgaps-harness.XXXXXX)
trap 'rm -rf "$W"' EXIT
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# case NAME WANT-EXIT WANT-OUTPUT(ERE) <<'SCRIPT' ... : run the script (after sourcing
# lib.sh) and check its exit status and that its output matches
case_() {
	local name=$1 want=$2 pat=$3 rc=0
	{ echo ". '$LIB'"; cat; } >"$W/$name.sh"
	timeout -k 2 60 bash "$W/$name.sh" >"$W/$name.out" 2>&1 || rc=$?
	if [ $rc != "$want" ]; then
		bad "$name: exit $rc, expected $want: $(tail -n 5 "$W/$name.out")"
	elif ! grep -qE "$pat" "$W/$name.out"; then
		bad "$name: output does not match /$pat/: $(tail -n 5 "$W/$name.out")"
	else
		echo "ok: $name"
	fi
}
# alive PID: it still runs 2 s on (a killed process may stay a zombie until init reaps it)
alive() {
	local i st
	[ -n "$1" ] || return 1
	for i in $(seq 20); do
		st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) || return 1
		[ "$st" = Z ] && return 1
		sleep 0.1
	done
	return 0
}

case_ errexit 1 "FAIL: errexit.sh line 2: 'false' exited 1" <<'EOF'
false
echo "went on after a failed command"
EOF
grep -q "went on" "$W/errexit.out" && bad "errexit: the script went on after the failure"

case_ errexit-subst 1 "FAIL: errexit-subst.sh line 2: 'x=\\$\\(false\\)' exited 1" <<'EOF'
x=$(false)
echo "went on after a failed substitution"
EOF

case_ escaped-process 1 "processes left behind by this test" <<EOF
setsid sleep 300 &
echo \$! >"$W/escaped.pid"
EOF
alive "$(cat "$W/escaped.pid" 2>/dev/null)" && bad "escaped-process: the process still runs after the test"

case_ job-group 0 "^ok: started" <<EOF
bg job bash -c 'sleep 300 & echo \$! >"$W/grandchild.pid"; wait'
wait_until 10 test -s "$W/grandchild.pid" || fail "no grandchild"
ok started
EOF
alive "$(cat "$W/grandchild.pid" 2>/dev/null)" && bad "job-group: a process of a bg job's group outlived the test"

case_ segment 1 "shared memory left behind by this test: /dev/shm/rgaps-it[0-9]+-harness_seg-meta" <<'EOF'
: >"/dev/shm/rgaps-$INSTANCE-harness_seg-meta"
EOF
ls /dev/shm/rgaps-it*-harness_seg-meta 2>/dev/null | grep -q . && bad "segment: the segment is still there"

case_ daemon-stop 1 "exited 3 after SIGTERM" <<'EOF'
bash -c 'trap "exit 3" TERM; while :; do sleep 0.1; done' &
PIDS+=($!)
sleep 0.3
EOF

case_ skip 77 "^SKIP: no widget here$" <<'EOF'
skip "no widget here"
EOF

case_ probe-skips 77 "^SKIP: none on this machine$" <<'EOF'
require "a widget" bash -c 'echo "SKIP widget-probe: none on this machine"; exit 77'
EOF

case_ probe-crashes 1 "the probe for a widget .* failed with exit 139" <<'EOF'
require "a widget" bash -c 'kill -SEGV $$'
EOF

case_ expect-sub 1 "s: expected mismatched 0: received 8 verified 7 mismatched 1" <<'EOF'
echo "received 8 verified 7 mismatched 1 gaps 0 drops 0 bytes 1 in 0.1 s" >"$T/s.out"
expect_sub s received=8 mismatched=0
EOF

case_ wait-bounded 0 "^ok: bounded$" <<'EOF'
s=$SECONDS
wait_until 1 false && fail "wait_until said a false condition came true"
[ $((SECONDS - s)) -le 3 ] || fail "wait_until 1 took $((SECONDS - s)) s"
ok bounded
EOF

[ $fails = 0 ] || { echo "$fails harness checks failed"; exit 1; }
echo "the harness caught every planted problem"
