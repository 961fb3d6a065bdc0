#!/bin/bash
# rgapsd's metrics_listen (docs/CONFIG.md): GET /metrics over HTTP is the Prometheus
# text of `rgaps stats --prometheus` - the same families, the same counters, every
# sample labelled rgaps_instance and none with Prometheus's own label "instance" -
# while scrapes run beside a publisher and a verifying subscriber; other paths and
# methods are refused; one address holds at most 4 connections, a request of more
# than 16 KiB is refused, a connection that sends nothing is closed after 5 s, and
# meanwhile rgapsd serves its clients. An address rgapsd cannot listen on stops it
# at start, saying why. (The real Prometheus server scrapes it in prometheus.sh.)
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh" # BASE: a range of ports nothing here uses
PROBE=(python3 "$(dirname "$0")/metrics_probe.py")
MPORT=$((BASE + 5))
listening() { ss -Htln 2>/dev/null | awk '{ n = split($4, a, ":"); print a[n] }' | grep -qx "$1"; }

# An address in use: rgapsd does not start, and says where and why.
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(1); time.sleep(60)' \
	"$MPORT" &
TAKER=$!
PIDS+=("$TAKER")
wait_until 10 listening "$MPORT" || fail "the port taker did not listen"
echo "{ \"metrics_listen\": \"127.0.0.1:$MPORT\" }" >"$T/rgapsd.json"
expect_exit 1 "$RGAPSD" --config "$T/rgapsd.json" --socket "$T/no.sock" --instance "${INSTANCE}x"
grep -q "metrics_listen '127.0.0.1:$MPORT': cannot listen there: Address already in use" \
	"$T/expect.out" || fail "a taken port: $(cat "$T/expect.out")"
kill "$TAKER"
wait "$TAKER" 2>/dev/null || true
forget_pid "$TAKER"
echo '{ "metrics_listen": "127.0.0.1:99999" }' >"$T/bad.json"
expect_exit 1 "$RGAPSD" --config "$T/bad.json" --check-config
grep -q "key 'metrics_listen'" "$T/expect.out" || fail "a bad port: $(cat "$T/expect.out")"
ok "metrics_listen on a taken port or a bad one: rgapsd refuses to start, naming it"

start_daemon --config "$T/rgapsd.json"
grep -q "metrics: serving the Prometheus text at http://127.0.0.1:$MPORT/metrics" "$T/rgapsd.log" ||
	fail "no word of the metrics address in the log"

# Traffic while scrapes run: a verifying subscriber, 200 messages, 20 scrapes.
bg sub "$RGAPS" sub m --count 200 --verify --timeout 20
wait_until 20 subs_are m 1 || fail "subscriber did not attach"
bg pub "$RGAPS" pub m --count 200 --size 1KiB-64KiB --rate 400
for i in $(seq 20); do
	"${PROBE[@]}" get 127.0.0.1 "$MPORT" /metrics >"$T/scrape.out" || fail "scrape $i failed"
	[ "$(head -n 1 "$T/scrape.out")" = 200 ] || fail "scrape $i: $(head -n 3 "$T/scrape.out")"
done
wait_ok pub
wait_ok sub
expect_sub sub received=200 verified=200 mismatched=0
ok "20 scrapes during 200 verified messages"

# The same text as rgaps stats --prometheus: families, labels and counters.
"${PROBE[@]}" get 127.0.0.1 "$MPORT" /metrics | tail -n +2 >"$T/http.prom"
"$RGAPS" stats --prometheus >"$T/cli.prom"
diff <(grep '^# TYPE' "$T/http.prom") <(grep '^# TYPE' "$T/cli.prom") >"$T/families.diff" ||
	fail "the families differ from rgaps stats --prometheus: $(head -n 10 "$T/families.diff")"
sample="rgaps_topic_published_messages_total{rgaps_instance=\"$INSTANCE\",topic=\"m\"} 200"
grep -qxF "$sample" "$T/http.prom" || fail "no '$sample' in /metrics"
grep -qxF "$sample" "$T/cli.prom" || fail "no '$sample' in rgaps stats --prometheus"
grep -q '[{,]instance=' "$T/http.prom" "$T/cli.prom" && fail "a sample labelled instance: Prometheus's own label"
if command -v promtool >/dev/null; then
	promtool check metrics <"$T/http.prom" >"$T/promtool.out" 2>&1 ||
		fail "promtool check metrics: $(cat "$T/promtool.out")"
else
	skip_part "promtool is not installed (Debian: prometheus): /metrics not linted"
fi
ok "/metrics: $(grep -c '^# TYPE' "$T/http.prom") families, those of rgaps stats --prometheus; $sample"

"${PROBE[@]}" get 127.0.0.1 "$MPORT" /nope >"$T/404.out"
[ "$(head -n 1 "$T/404.out")" = 404 ] || fail "/nope: $(cat "$T/404.out")"
"${PROBE[@]}" get 127.0.0.1 "$MPORT" /metrics POST >"$T/405.out"
[ "$(head -n 1 "$T/405.out")" = 405 ] || fail "POST /metrics: $(cat "$T/405.out")"
ok "other paths: 404; other methods: 405"

# The bounds, and rgapsd's clients served while a scraper holds connections.
BG_TIMEOUT=120 bg bounds "${PROBE[@]}" bounds 127.0.0.1 "$MPORT"
wait_until 30 grep -q "held," "$T/bounds.out" || fail "the probe did not get going: $(cat "$T/bounds.out")"
for i in 1 2 3; do
	timeout 10 "$RGAPS" topics >/dev/null || fail "rgaps topics failed while a scraper held connections"
done
wait_ok bounds
sed 's/^/   /' "$T/bounds.out"
ok "bounds held; rgapsd's clients were served meanwhile"
stop_daemon
listening "$MPORT" && fail "rgapsd stopped, and port $MPORT still listens"
ok "stopped: the metrics port is closed"
