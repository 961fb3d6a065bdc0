#!/bin/bash
# systemd: rgapsd speaks the sd_notify protocol itself. With
# $NOTIFY_SOCKET set it sends READY=1 (with a first STATUS=) once the
# control socket serves, STATUS= when topics, clients or peers change,
# WATCHDOG=1 every half of $WATCHDOG_USEC when $WATCHDOG_PID is its own pid
# (none when it names another), and STOPPING=1 at SIGTERM. Checked with a
# socket path, and in the abstract namespace ("@name") as systemd uses.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/limits_lib.sh"
FLOOD="$RGAPS_BUILD/tests/integration/itest-flood"

# run NOTIFY_SOCKET LISTENER_OUT WATCHDOG_PID_MODE: rgapsd with a notify listener
run() {
	local sock=$1 out=$2 pidmode=$3
	spawn "$out" "$FLOOD" notify "$sock" 20
	wait_until 5 grep -q "listening" "$T/$out.out" || fail "listener did not start"
	# exec keeps the pid: WATCHDOG_PID can name rgapsd itself, as systemd does.
	NOTIFY_SOCKET=$sock WATCHDOG_USEC=400000 bash -c \
		'if [ "$0" = self ]; then export WATCHDOG_PID=$$; else export WATCHDOG_PID=1; fi; exec "$@"' \
		"$pidmode" "$RGAPSD" --socket "$RGAPS_SOCKET" --instance "$INSTANCE" >>"$T/rgapsd.log" 2>&1 &
	DAEMON_PID=$!
	wait_until 5 grep -q "READY=1" "$T/$out.out" || fail "no READY=1: $(cat "$T/$out.out")"
	# READY=1 means serving: a client connects at once, no retry.
	"$RGAPS" topics >/dev/null || fail "READY=1 came before the socket served"
}

pings_ge() { test "$(grep -c WATCHDOG=1 "$T/$1.out")" -ge "$2"; }

run "$T/notify.sock" path self
grep -q "READY=1|STATUS=0 topics, 0 clients, single host" "$T/path.out" || fail "first message: $(grep READY "$T/path.out")"
ok "READY=1 with its status once the socket serves"
"$RGAPS" sub watched --count 0 >/dev/null || fail "attach"
wait_until 5 grep -q "STATUS=1 topics" "$T/path.out" || fail "STATUS did not follow the new topic"
ok "STATUS= follows topics: $(grep -o 'STATUS=1 topics[^|]*' "$T/path.out" | tail -n 1)"
wait_until 5 pings_ge path 4 || fail "watchdog pings: $(grep -c WATCHDOG=1 "$T/path.out")"
ok "WATCHDOG=1 every 200 ms ($(grep -c WATCHDOG=1 "$T/path.out") so far)"
stop_daemon
wait_until 5 grep -q "STOPPING=1" "$T/path.out" || fail "no STOPPING=1"
wait_ok path
ok "STOPPING=1 at SIGTERM"

# Abstract namespace; WATCHDOG_PID naming another process: no pings.
run "@rgaps-itest-$$" abstract other
sleep 1
grep -q WATCHDOG "$T/abstract.out" && fail "pinged a watchdog that is another process's"
stop_daemon
wait_until 5 grep -q "STOPPING=1" "$T/abstract.out" || fail "no STOPPING=1 (abstract)"
wait_ok abstract
ok "abstract \$NOTIFY_SOCKET works; no pings for another pid's watchdog"

# Without $NOTIFY_SOCKET nothing changes; a bad one is reported, and rgapsd still serves.
NOTIFY_SOCKET=relative/path start_daemon
grep -q "NOTIFY_SOCKET=relative/path is neither" "$T/rgapsd.log" || fail "a bad NOTIFY_SOCKET was not reported"
stop_daemon
ok "a bad \$NOTIFY_SOCKET is logged"
