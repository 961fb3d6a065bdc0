#!/bin/bash
# Connections: one user's idle connections cannot cost rgapsd its memory nor
# its other clients their service. Here nobody asks for 2,000 and keeps them:
# max_connections_per_user lets 64 in, the rest are refused with "quota" at
# once, root is still served within 1 s, rgapsd's memory hardly moves, and
# idle_timeout_ms closes the 64 it holds. Then two
# users together reach max_connections: the next one gets "limit", while
# root, for whom the last places are kept, is still served.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/limits_lib.sh"
need_users

cat >"$T/rgapsd.json" <<JSON
{ "max_connections": 1024, "max_connections_per_user": 64, "idle_timeout_ms": 3000 }
JSON
start_daemon -c "$T/rgapsd.json"
rss0=$(rss_kb)
spawn flood "${NOBODY[@]}" "$FLOOD" conns 2000 20
wait_until 30 grep -q "^conns: asked" "$T/flood.out" || fail "the flood did not report: $(cat "$T/flood.out")"
cat "$T/flood.out"
[ "$(field "$T/flood.out" open)" = 64 ] || fail "nobody holds $(field "$T/flood.out" open) connections, not 64"
[ "$(field "$T/flood.out" refused_quota)" = 1936 ] || fail "not every connection over the cap was refused with quota"
ok "max_connections_per_user: 64 held, 1936 refused with quota"
probe "while nobody holds 64 connections"
rss_bounded "$rss0" 20000 "2000 connection attempts"
# The 64 held are closed after idle_timeout_ms (3 s) without a request.
wait_until 20 grep -q "closed_by_daemon" "$T/flood.out" || fail "the flood did not end"
grep "closed_by_daemon" "$T/flood.out"
grep -q "closed_by_daemon 64 of 64" "$T/flood.out" || fail "idle connections were not all closed"
wait_ok flood
[ "$(dstat connections_refused_user)" -ge 1936 ] || fail "connections_refused_user: $(dstat connections_refused_user)"
[ "$(dstat idle_closed)" -ge 64 ] || fail "idle_closed: $(dstat idle_closed)"
ok "counters: connections_refused_user $(dstat connections_refused_user), idle_closed $(dstat idle_closed)"
grep -c "refused a connection" "$T/rgapsd.log" | {
	read -r n
	[ "$n" -le 12 ] || fail "$n log lines for refused connections: the rate limit did not hold"
	ok "$n log lines for 1936 refusals (rate-limited)"
}
stop_daemon

# max_connections: two users of 60 each against a cap of 100, whose last 16 places are kept
# for root and rgapsd's user: the second gets 24 and "limit" for the rest, and root is
# still served while they hold everything else.
cat >"$T/rgapsd.json" <<JSON
{ "max_connections": 100, "max_connections_per_user": 60, "idle_timeout_ms": 60000 }
JSON
start_daemon -c "$T/rgapsd.json"
rss0=$(rss_kb)
spawn first "${NOBODY[@]}" "$FLOOD" conns 60 8
wait_until 30 grep -q "^conns: asked" "$T/first.out" || fail "first flood did not report"
as 65533 65533
spawn second "${AS[@]}" "$FLOOD" conns 60 4
wait_until 30 grep -q "^conns: asked" "$T/second.out" || fail "second flood did not report"
cat "$T/first.out" "$T/second.out" | grep asked
[ "$(field "$T/second.out" open)" = 24 ] && [ "$(field "$T/second.out" refused_limit)" = 36 ] ||
	fail "with 84 connections of users open the next ones were not refused with limit"
ok "max_connections: users hold 84, 36 more refused with limit"
probe "while users hold every place but the operators'"
rss_bounded "$rss0" 20000 "two users at max_connections"
wait_ok second
wait_ok first
[ "$(dstat connections_refused)" -ge 36 ] || fail "connections_refused: $(dstat connections_refused)"
ok "counter: connections_refused $(dstat connections_refused)"
stop_daemon
