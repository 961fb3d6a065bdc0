#!/bin/bash
# A client that cannot reach rgapsd is told why, as an administrator would
# fix it (librgaps' rgaps_strerror, errors.c): no socket at the path;
# permission denied on the socket's directory or on the socket, naming it,
# its mode and group and "add yourself to group ..."; nobody listening, or a
# daemon that hung up. The
# allow-list message comes only when the daemon refused the attach. The
# clients run as nobody (setpriv), the daemon as root; needs root.
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" -eq 0 ] || skip "needs root to run clients as another user (setpriv)"
command -v setpriv >/dev/null || skip "setpriv (util-linux) is missing"
getent group daemon >/dev/null || skip "no group 'daemon' to gate the directory with"
as_nobody() { timeout -k 2 20 setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }

# expect WHAT RC PATTERN CMD...: CMD exits RC and says PATTERN (grep -E) on stderr.
expect() {
	local what=$1 want=$2 pat=$3 rc=0
	shift 3
	"$@" >"$T/out" 2>"$T/err" || rc=$?
	[ $rc -eq "$want" ] || fail "$what: exit $rc, not $want: $(cat "$T/err")"
	grep -qE -- "$pat" "$T/err" || fail "$what: the message does not say '$pat': $(cat "$T/err")"
	ok "$what: $(head -n 1 "$T/err")"
}

# No socket: nothing at the path.
RGAPS_SOCKET="$T/none/rgapsd.sock" expect "no socket" 1 \
	"no rgapsd socket at $T/none/rgapsd\.sock: is rgapsd running\?" "$RGAPS" topics

# A gate directory like the service's /run/rgaps: 0750, a group nobody lacks.
chmod 0755 "$T"
mkdir "$T/gate" "$T/td"
chgrp daemon "$T/gate"
chmod 0750 "$T/gate"
echo '{ "allowed_uids": [0] }' >"$T/td/locked.json"
echo "{ \"topics_dir\": \"$T/td\" }" >"$T/rgapsd.json"
export RGAPS_SOCKET="$T/gate/rgapsd.sock"
start_daemon --config "$T/rgapsd.json"

expect "directory denies" 1 \
	"no permission to reach rgapsd's socket $T/gate/rgapsd\.sock: the directory $T/gate \(mode 0750, group daemon\).*add yourself to group daemon \(usermod -aG daemon nobody\)" \
	as_nobody "$RGAPS" topics
grep -q "allow-list" "$T/err" && fail "directory denies: the message blames the allow-list"
expect "directory denies an attach" 1 "cannot attach to 'open': no permission to reach.*group daemon" \
	as_nobody "$RGAPS" pub open --count 1

# The directory opens, the socket itself does not.
chmod 0755 "$T/gate"
chmod 0660 "$RGAPS_SOCKET"
expect "socket denies" 1 \
	"the socket itself \(mode 0660, group root\) does not let this user connect; add yourself to group root" \
	as_nobody "$RGAPS" sub open --count 1 --timeout 1

# Reachable: a topic open to all works, the allow-list of another refuses.
chmod 0666 "$RGAPS_SOCKET"
as_nobody "$RGAPS" topics >"$T/out" 2>&1 || fail "nobody cannot list topics through an open socket: $(cat "$T/out")"
expect "allow-list" 1 "cannot attach to 'locked': rgapsd refused: not on the topic's allow-list" \
	as_nobody "$RGAPS" sub locked --count 1 --timeout 1
grep -q "no permission" "$T/err" && fail "allow-list: the message blames the socket"

# Nobody listening: the daemon died and left its socket.
kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=
[ -S "$RGAPS_SOCKET" ] || fail "the killed daemon's socket is gone: cannot test a refused connect"
# The kernel may still take connections for a moment after the process is
# gone (its io_uring lets go of the socket asynchronously): a client then sees
# the daemon hang up, and is told so.
for _ in $(seq 100); do
	"$RGAPS" topics >"$T/out" 2>"$T/err" && fail "rgaps topics succeeded with no daemon"
	grep -q "nothing listens" "$T/err" && break
	grep -q "rgapsd at $T/gate/rgapsd.sock closed the connection without answering (it is stopping, or has just died)" \
		"$T/err" || fail "just after the daemon died: $(cat "$T/err")"
	ok "just after the daemon died: $(cat "$T/err")"
	sleep 0.05
done
expect "nobody listens" 1 "nothing listens at $T/gate/rgapsd\.sock: rgapsd is not running" "$RGAPS" topics
# A new daemon on the same socket removes what the killed one left (nothing may stay behind).
start_daemon --config "$T/rgapsd.json"
stop_daemon
echo "connect errors: all cases name their cause"
