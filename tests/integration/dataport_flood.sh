#!/bin/bash
# The tcp data port under a flood (docs/SECURITY.md, "The data port"; docs/CONFIG.md, "Data
# ports"): a network neighbour without the key holds silent connections on both daemons' data
# ports (200 a port, from 10 source addresses 127.0.0.2 ...), running as nobody, against
# daemons running as a user of their own, and one
# daemon restarts inside the flood (before, the data link stayed down 25 s here: strangers
# held all 64 places of the data port). Pending connections are bounded per source address and in
# all, and the configured peer's address still finds a place: the data link comes back and an
# honest pair of another user verifies every cross-host message; refusals are counted and the
# log stays short (at most 5 lines per 10 s of each kind).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/limits_lib.sh"
. "$(dirname "$0")/remote_lib.sh"
need_users
PFLOOD="$RGAPS_BUILD/tests/integration/itest-peer-flood"
as 61080 61080
HONEST=("${AS[@]}")
# rgapsd runs as a user of its own, as the packaged unit runs it: the key and the sockets'
# folder are that user's.
as 61081 61081
HOST_AS=("${AS[@]}")
mkdir -p "$T/run"
chown 61081:61081 "$T/run" "$KEY"
N=50
host a 1
host b 2
SOCK[a]=$T/run/a.sock SOCK[b]=$T/run/b.sock
start_host a
start_host b
for h in a b; do
	[ "$(stat -c %u "/proc/${DPID[$h]}")" = 61081 ] || fail "$h's rgapsd does not run as uid 61081"
done
wait_until 20 peer_up a b || fail "a and b did not connect before the flood"
wait_until 20 peer_up b a || fail "b does not see a up before the flood"

# dp HOST KEY: a counter of HOST's tcp data port (peers.data_ports.tcp)
dp() { grep -o '"data_ports":{"tcp":{[^}]*}' <<<"$(hstats "$1")" | grep -o "\"$2\":[0-9]*" | cut -d: -f2; }
dp_pos() { local v; v=$(dp "$1" "$2"); [ -n "$v" ] && [ "$v" -gt 0 ]; }
# tcp_up HOST PEER: HOST's tcp data link to PEER is up
tcp_up() { grep -q "\"name\":\"${ADDR[$2]}:${PORT[$2]}\",\"up\":true,[^{]*\"links\":{\"tcp\":{\"state\":\"up\"" <<<"$(hstats "$1")"; }
wait_until 20 tcp_up a b || fail "no data link a-b before the flood"

spawn flood "${NOBODY[@]}" "$PFLOOD" 40 10 20 $((PORT[a] + 1)) $((PORT[b] + 1))
wait_until 10 grep -q started "$T/flood.out" || fail "the flood did not start: $(cat "$T/flood.out")"
wait_until 10 dp_pos a pending_refused_source ||
	fail "a's data port refused nothing: is the flood reaching it? $(cat "$T/flood.out")"
ok "a's data port under the flood: pending $(dp a pending), refused $(dp a pending_refused), refused per source $(dp a pending_refused_source)"

# b restarts inside the flood: its data link must come back through it, in a few seconds
# (a sanitizer build's loop runs many times slower: 30 s).
BOUND_MS=10000
sanitized && BOUND_MS=30000
stop_host b
t0=${EPOCHREALTIME/./}
start_host b
up_ms=
while [ $(((${EPOCHREALTIME/./} - t0) / 1000)) -lt $((BOUND_MS + 20000)) ]; do
	if tcp_up a b && tcp_up b a; then up_ms=$(((${EPOCHREALTIME/./} - t0) / 1000)); break; fi
	sleep 0.1
done
[ -n "$up_ms" ] || fail "the data link a-b did not come back inside the flood"
[ "$up_ms" -le "$BOUND_MS" ] || fail "the data link a-b came back $up_ms ms after b's restart (more than $BOUND_MS)"
ok "data link a-b up again ${up_ms} ms after b's restart inside the flood; strangers evicted for it: a $(dp a pending_evicted), b $(dp b pending_evicted)"

bg pfsub "${HONEST[@]}" env RGAPS_SOCKET="${SOCK[b]}" "$RGAPS" sub pf --count $N --verify --timeout 30
wait_until 20 knows_sub a b pf || fail "a did not learn of b's subscriber during the flood"
"${HONEST[@]}" env RGAPS_SOCKET="${SOCK[a]}" "$RGAPS" pub pf --count $N --size 4KiB --rate 200 \
	>"$T/pfpub.out" || fail "publish on a failed: $(cat "$T/pfpub.out")"
wait_ok pfsub
expect_sub pfsub received=$N verified=$N mismatched=0 gaps=0 drops=0
ok "the honest pair: $N cross-host messages verified during the flood"
kill -0 "${PID_flood}" 2>/dev/null || fail "the flood ended early: $(cat "$T/flood.out")"
wait_until 10 dp_pos b pending_refused_source || fail "the restarted b's data port refused nothing"

# Rate-limited logs: a few lines a kind per 10 s, however many connections were refused.
for h in a b; do
	lines=$(grep -c "tcp data port\|data link from\|unknown token" "$T/$h.log" || true)
	[ "$lines" -le 60 ] || fail "$h logged $lines lines about the data port's flood"
	ok "$h: $lines log lines for $(( $(dp "$h" pending_refused) + $(dp "$h" pending_refused_source) )) refusals and $(dp "$h" dropped) connections closed before their token"
done
kill -INT "${PID_flood}" 2>/dev/null
wait "${PID_flood}" 2>/dev/null
ok "flood over: $(tail -n 1 "$T/flood.out")"
stop_host a
stop_host b
