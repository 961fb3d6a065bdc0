#!/bin/bash
# A network neighbour floods both daemons' peer ports with
# connections that never send a byte (500 a port, from 50 source addresses
# 127.0.0.2 ...), and one daemon restarts meanwhile: pending connections are
# capped per source address and in all, a configured peer's address is admitted
# even when strangers fill every place, and silent ones are closed after the
# first-frame deadline. The two daemons' session is up again within 5 s of the
# flood's start. The flood runs as nobody.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/limits_lib.sh"
. "$(dirname "$0")/remote_lib.sh"
need_users
PFLOOD="$RGAPS_BUILD/tests/integration/itest-peer-flood"
KEEPALIVE_MS=2000
host a 1
host b 2
start_host a
start_host b
wait_until 20 peer_up a b || fail "a and b did not connect before the flood"
wait_until 20 peer_up b a || fail "b does not see a up before the flood"
ok "a and b are peers"

# The issue's bound is for the daemon as shipped; a sanitizer build's loop runs many
# times slower (decision 37: stalls of seconds under ThreadSanitizer), so it gets 20 s.
BOUND_MS=5000
sanitized && BOUND_MS=20000
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
pstat() { on "$1" "$RGAPS" stats --json | flat | grep -o "\"$2\":[0-9]*" | head -n 1 | cut -d: -f2; }
# pstat_pos HOST KEY: a predicate for wait_until (evaluated at every poll)
pstat_pos() { local v; v=$(pstat "$1" "$2"); [ -n "$v" ] && [ "$v" -gt 0 ]; }

# 50 sources x 10 connections on each port: 500 per daemon (8 per source fit), held
# until the checks below are done (then stopped; at most 20 s plus the bound).
t0=$(now_ms)
spawn flood "${NOBODY[@]}" "$PFLOOD" $(( 20 + BOUND_MS / 1000 )) 50 10 "${PORT[a]}" "${PORT[b]}"
wait_until 10 grep -q started "$T/flood.out" || fail "the flood did not start: $(cat "$T/flood.out")"
wait_until 10 pstat_pos a pending_refused ||
	fail "a refused nothing: is the flood reaching it? $(cat "$T/flood.out")"
ok "a under the flood: pending_refused $(pstat a pending_refused), pending_refused_source $(pstat a pending_refused_source)"

# b restarts inside the flood; both ends must see the session again.
stop_host b
start_host b
up_ms=
while [ $(( $(now_ms) - t0 )) -lt $(( BOUND_MS + 10000 )) ]; do
	if peer_up a b && peer_up b a; then up_ms=$(( $(now_ms) - t0 )); break; fi
	sleep 0.05
done
[ -n "$up_ms" ] || fail "no session between a and b $(( BOUND_MS / 1000 + 10 )) s after the flood started"
[ "$up_ms" -le "$BOUND_MS" ] || fail "the session came up $up_ms ms after the flood started (more than $BOUND_MS ms)"
ok "session a-b up again ${up_ms} ms after the flood started, b restarted inside it"

# The restarted daemon was flooded too, and its limits did the work.
wait_until 10 pstat_pos b pending_refused ||
	fail "b refused nothing: the flood did not reach the restarted daemon"
kill -0 "${PID_flood}" 2>/dev/null || fail "the flood ended early: $(cat "$T/flood.out")"
ok "b under the flood: pending_refused $(pstat b pending_refused), pending_refused_source $(pstat b pending_refused_source), hello_timeouts $(pstat b hello_timeouts); strangers evicted for the other daemon: a $(pstat a pending_evicted), b $(pstat b pending_evicted)"

# Silent connections that got a place are closed after the first-frame deadline (1 s).
wait_until 10 pstat_pos a hello_timeouts ||
	fail "a closed no silent connection for want of a HELLO"
ok "a closed $(pstat a hello_timeouts) silent connections at the first-frame deadline"

# Both still serve local clients and the session carries data during the flood.
bg sub env RGAPS_SOCKET="${SOCK[b]}" "$RGAPS" sub pf --count 5 --timeout 30
wait_until 20 knows_sub a b pf || fail "a did not learn of b's subscriber during the flood"
on a "$RGAPS" pub pf --count 5 --size 1KiB >/dev/null || fail "publish on a failed"
wait_ok sub
ok "messages crossed the session during the flood"
kill -INT "${PID_flood}" 2>/dev/null
wait "${PID_flood}" 2>/dev/null
ok "flood over: $(tail -n 1 "$T/flood.out")"
stop_host a
stop_host b
