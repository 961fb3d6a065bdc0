#!/bin/bash
# rgaps-top, the live view of one rgapsd: batch frames show a topic's name,
# its message rate and total and its subscriber count while a publisher runs;
# the interactive screen (under script(1) for a terminal) shows "daemon not
# reachable" while the daemon restarts, picks it up again and quits on 'q'
# with status 0; with no daemon, rgaps-top exits 1 naming the socket.
. "$(dirname "$0")/lib.sh"
TOP="$RGAPS_BUILD/tools/rgaps-top"
[ -x "$TOP" ] || skip "rgaps-top was not built (ncurses was not found when the build was configured)"
start_daemon

# A subscriber that keeps up and a publisher at a steady rate for the whole batch.
bg sub "$RGAPS" sub toptopic --count 1000000 --timeout 50
wait_until 20 subs_are toptopic 1 || fail "subscriber did not attach"
bg pub "$RGAPS" pub toptopic --count 1000000 --size 4KiB --rate 200 --timeout 50
# Its attach makes a pool of 256 MiB (allocated whole): frames from its first message on.
published() { stat_json toptopic | flat | grep -q '"published":[1-9]'; }
wait_until 20 published || fail "the publisher published nothing in 20 s: $(tail -n 3 "$T/pub.out")"
timeout -k 2 20 "$TOP" --batch 2 --interval 300 >"$T/batch.out" 2>"$T/batch.err" ||
	fail "rgaps-top --batch 2 exited $?: $(cat "$T/batch.err")"
[ "$(grep -c '^rgaps-top frame [12]/2 ' "$T/batch.out")" = 2 ] || fail "expected 2 frames: $(head -5 "$T/batch.out")"
grep -q "^rgapsd .* instance $INSTANCE " "$T/batch.out" || fail "no daemon line with instance $INSTANCE"
# The topic's row (first table of each frame): TOPIC MEM PUBS SUBS MSG/S BYTES/S MSGS ...
rate_seen=
for frame in 1 2; do
	row=$(awk -v fr="^rgaps-top frame $frame/2 " '$0 ~ fr { f = 1 } f && $1 == "toptopic" { print; exit }' "$T/batch.out")
	[ -n "$row" ] || fail "frame $frame has no row for toptopic: $(cat "$T/batch.out")"
	set -- $row
	[ "$4" = 1 ] || fail "frame $frame: subscribers '$4', expected 1: $row"
	[[ "$7" =~ ^[0-9] ]] && [ "$7" != 0 ] || fail "frame $frame: message total '$7' is not a nonzero count: $row"
	[[ "$5" =~ ^[0-9] ]] && [ "$5" != 0 ] && rate_seen="$5 msg/s"
done
[ -n "$rate_seen" ] || fail "no frame shows a nonzero message rate: $(grep '^toptopic ' "$T/batch.out")"
ok "batch: toptopic with 1 subscriber, $rate_seen, frames: $(grep -c '^rgaps-top frame' "$T/batch.out")"
kill9 pub
kill9 sub

# Interactive, in script(1)'s terminal: keys come through a FIFO that this shell
# holds open, named inside the job (bash gives a background job /dev/null).
if ! command -v script >/dev/null; then
	skip_part "no script(1) (util-linux): the interactive screen of rgaps-top is not tested"
else
	mkfifo "$T/keys"
	exec 7<>"$T/keys"
	BG_TIMEOUT=40 bg screen env TERM=xterm bash -c 'exec script -qec "$1" /dev/null <"$2"' screen \
		"$TOP --interval 200" "$T/keys"
	wait_until 20 grep -aq "toptopic" "$T/screen.out" || fail "screen never showed the topic: $(cat -v "$T/screen.out" | tail -c 600)"
	stop_daemon
	wait_until 20 grep -aq "daemon not reachable" "$T/screen.out" ||
		fail "screen did not say the daemon is not reachable"
	kill -0 "$PID_screen" 2>/dev/null || fail "rgaps-top quit when the daemon stopped"
	start_daemon
	# The status line is back to "polled at ..." once the new daemon answers.
	after() { local s; s=$(tr -d '\0' <"$T/screen.out"); [[ "${s##*daemon not reachable}" == *"polled at"* ]]; }
	wait_until 20 after || fail "screen did not reconnect to the restarted daemon"
	printf q >&7
	wait_ok screen
	exec 7>&-
	ok "screen: showed the topic, 'daemon not reachable' during a restart, reconnected, quit on q"
fi

stop_daemon
rc=0
timeout -k 2 10 "$TOP" --batch 2 --interval 100 >"$T/gone.out" 2>"$T/gone.err" || rc=$?
[ $rc = 1 ] || fail "rgaps-top without a daemon exited $rc, expected 1: $(cat "$T/gone.err")"
grep -qF "$RGAPS_SOCKET" "$T/gone.err" || fail "error does not name the socket: $(cat "$T/gone.err")"
[ -s "$T/gone.out" ] && fail "rgaps-top printed frames without a daemon"
ok "no daemon: exit 1, $(cat "$T/gone.err")"
