#!/bin/bash
# SIGKILL of a publisher mid-push, of a subscriber holding messages and of a
# publisher holding loans: rgapsd reclaims what they held, the pool returns to
# its idle value (empty), and a verifying subscriber running throughout keeps
# receiving intact messages.
. "$(dirname "$0")/lib.sh"
start_daemon
idle=$(pool_used kt 2>/dev/null || echo 0)

# A subscriber that holds 8 messages and is killed while holding them.
bg holder "$ITEST" hold kt 8
bg steady "$RGAPS" sub kt --count 100000 --verify --timeout 60 --allow-gaps
wait_until 5 subs_are kt 2 || fail "subscribers did not attach"
"$RGAPS" pub kt --count 40 --size 256KiB >/dev/null || fail "publish"
wait_until 5 grep -q "holding 8" "$T/holder.out" || fail "holder did not take 8"
used=$(pool_used kt)
[ "$used" -ge $((8 * 256 * 1024)) ] || fail "pool should hold the 8 held messages, has $used"
kill9 holder
wait_until 5 pool_is kt 0 || fail "pool not reclaimed after killing the holder: $(pool_used kt)"
ok "killed subscriber's 8 held messages reclaimed"

# Publishers killed at random points while pushing large messages, 10 times.
for i in $(seq 10); do
	"$RGAPS" pub kt --count 1000000 --size 64KiB-4MiB >/dev/null 2>&1 &
	p=$!
	sleep 0.$((RANDOM % 3))$((RANDOM % 10))
	kill -9 $p; wait $p 2>/dev/null
done
wait_until 5 pool_is kt 0 || fail "pool not idle after killed publishers: $(pool_used kt)"
ok "10 publishers killed mid-push: pool back to idle"

# A publisher killed while holding loans.
bg loaner "$ITEST" loanhold kt 4
wait_until 5 grep -q "loaned 4" "$T/loaner.out" || fail "loaner did not loan"
[ "$(pool_used kt)" -ge $((4 * 65536)) ] || fail "loans not visible in the pool"
kill9 loaner
wait_until 5 pool_is kt 0 || fail "loans not reclaimed: $(pool_used kt)"
ok "killed publisher's 4 loans reclaimed"

# The steady subscriber saw only intact messages and the topic still works.
"$RGAPS" pub kt --count 50 --size 1KiB >/dev/null || fail "publish after the kills"
kill -INT $(pgrep -P "$PID_steady"); wait "$PID_steady"
grep -q "mismatched 0" "$T/steady.out" || fail "steady subscriber: $(tail -1 "$T/steady.out")"
ok "steady subscriber: $(tail -1 "$T/steady.out")"
"$RGAPS" stats kt --json | grep -q '"reclaimed_holds":[ 	]*8' || "$RGAPS" stats kt --json | grep -A0 reclaimed_holds
stop_daemon
