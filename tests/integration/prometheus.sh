#!/bin/bash
# rgapsd's metrics as Prometheus reads them: two daemons as two hosts, a
# publisher on A and a subscriber on B. `rgaps stats --prometheus` of each is
# well-formed Prometheus text (every family with HELP and TYPE before its
# samples, counters named *_total, one family per name, numeric values; and
# `promtool check metrics` where promtool is installed), and it says what
# happened: A published N messages and sent records on its tcp link, B landed
# N from its peer, its subscriber's N takes are in the latency histogram, the
# peers are up. Then Debian's Prometheus server scrapes A's metrics_listen on
# loopback, and a query of its HTTP API returns A's rgaps series with the
# published count, labelled by Prometheus (instance, job) and by rgaps
# (rgaps_instance), nothing renamed to exported_instance.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
N=50
host A 0; host B 1
MPORT=$((BASE + 5)) PPORT=$((BASE + 6))
DAEMON_EXTRA="\"metrics_listen\": \"127.0.0.1:$MPORT\"," start_host A
start_host B
wait_until 20 peer_up A B || fail "no session"
bg sub env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub prom --count $N --verify --timeout 30
wait_until 20 knows_sub A B prom || fail "A did not learn B's subscription"
on A "$RGAPS" pub prom --count $N --size 64KiB --rate 500 >/dev/null || fail "publish"
wait_ok sub
expect_sub sub received=$N verified=$N mismatched=0 gaps=0 drops=0
for h in A B; do
	on $h "$RGAPS" stats --prometheus > "$T/$h.prom" || fail "$h: rgaps stats --prometheus failed"
	awk -v host=$h '
		/^# HELP / { help[$3] = 1; next }
		/^# TYPE / { if ($3 in type) { print host ": family " $3 " declared twice"; bad = 1 }
			     type[$3] = $4; if (!($3 in help)) { print host ": " $3 " has no HELP"; bad = 1 }
			     if ($4 == "counter" && $3 !~ /_total$/) { print host ": counter " $3 " not *_total"; bad = 1 }
			     cur = $3; next }
		/^#/ { next }
		{ name = $1; sub(/\{.*/, "", name)
		  if (name != cur) { print host ": sample of " name " outside its family"; bad = 1 }
		  if ($1 !~ /^rgaps_[a-z0-9_]+\{([a-z_]+="[^"]*",?)*\}$/) { print host ": bad sample: " $0; bad = 1 }
		  if ($2 !~ /^-?[0-9.]+(e[-+]?[0-9]+)?$/) { print host ": bad value: " $0; bad = 1 }
		  n++ }
		END { if (!n) { print host ": no samples"; bad = 1 } exit bad }' "$T/$h.prom" ||
		fail "$h: malformed Prometheus text"
done
ok "A and B: well-formed ($(grep -vc '^#' "$T/A.prom") and $(grep -vc '^#' "$T/B.prom") samples)"
if command -v promtool >/dev/null; then
	for h in A B; do
		promtool check metrics < "$T/$h.prom" > "$T/promtool.$h" 2>&1 ||
			fail "$h: promtool check metrics: $(cat "$T/promtool.$h")"
	done
	ok "promtool check metrics: clean on both"
else
	skip_part "promtool is not installed (Debian: prometheus): only the structural checks of the Prometheus text ran"
fi
val() { grep -F "$2{" "$T/$1.prom" | grep -F "$3" | head -1 | awk '{ print $2 }'; }
[ "$(val A rgaps_topic_published_messages_total 'topic="prom"')" = $N ] || fail "A: published $(val A rgaps_topic_published_messages_total 'topic="prom"')"
[ "$(val B rgaps_topic_remote_messages_total 'topic="prom"')" = $N ] || fail "B: landed $(val B rgaps_topic_remote_messages_total 'topic="prom"')"
[ "$(val B rgaps_topic_latency_samples_total 'topic="prom"')" = $N ] || fail "B: latency samples"
[ "$(val B rgaps_topic_remote_gaps_total 'topic="prom"')" = 0 ] || fail "B: gaps"
[ "$(val A rgaps_peer_up "peer=\"${ADDR[B]}:${PORT[B]}\"")" = 1 ] || fail "A: peer B not up"
[ "$(val A rgaps_membership_hosts 'source="static"')" = 1 ] || fail "A: membership hosts $(val A rgaps_membership_hosts 'source="static"')"
sent=$(val A rgaps_link_records_sent_total 'transport="tcp"')
[ "${sent:-0}" -ge $N ] || fail "A: tcp link records_sent ${sent:-none}"
p50=$(val B rgaps_topic_latency_p50_seconds 'topic="prom"')
awk -v v="$p50" 'BEGIN { exit !(v > 0 && v < 10) }' || fail "B: latency p50 '$p50' s"
ok "A published $N and sent $sent records over tcp; B landed $N, latency p50 $p50 s, no gap"

# Debian's Prometheus server scrapes A's metrics_listen every second.
if ! command -v prometheus >/dev/null; then
	skip_part "no prometheus server (Debian: prometheus): A's /metrics was not scraped by one"
else
	cat >"$T/prometheus.yml" <<-EOF
	global: { scrape_interval: 1s, scrape_timeout: 1s }
	scrape_configs:
	  - job_name: rgapsd
	    static_configs: [ { targets: ["127.0.0.1:$MPORT"] } ]
	EOF
	BG_TIMEOUT=120 bg promsrv prometheus --config.file="$T/prometheus.yml" \
		--storage.tsdb.path="$T/tsdb" --web.listen-address="127.0.0.1:$PPORT" --log.level=warn
	# query EXPR: the result of an instant query of its HTTP API, one series a line:
	# "label=value,...  value" (none while it has not scraped yet)
	query() {
		python3 - "$PPORT" "$1" <<-'PY' 2>/dev/null
		import json, sys, urllib.parse, urllib.request
		url = f"http://127.0.0.1:{sys.argv[1]}/api/v1/query?" + urllib.parse.urlencode({"query": sys.argv[2]})
		r = json.load(urllib.request.urlopen(url, timeout=5))
		for s in r["data"]["result"]:
		    print(",".join(f"{k}={v}" for k, v in sorted(s["metric"].items())), s["value"][1])
		PY
	}
	scraped() { query "rgaps_topic_published_messages_total{topic=\"prom\"}" >"$T/query.out" &&
		grep -q " $N$" "$T/query.out"; }
	wait_until 60 scraped || fail "Prometheus never returned A's published count $N: $(cat "$T/query.out"; tail -n 5 "$T/promsrv.out")"
	series=$(head -n 1 "$T/query.out")
	for l in "__name__=rgaps_topic_published_messages_total" "instance=127.0.0.1:$MPORT" \
		"job=rgapsd" "rgaps_instance=${INSTANCE}A" "topic=prom"; do
		[[ ",${series% *}," == *",$l,"* ]] || fail "the series lacks $l: $series"
	done
	[[ "$series" == *exported_instance* ]] && fail "a label was renamed exported_instance: $series"
	n=$(query '{__name__=~"rgaps_.+"}' | wc -l)
	[ "$n" -gt 20 ] || fail "Prometheus holds only $n rgaps series"
	ok "Prometheus $(prometheus --version 2>&1 | sed -n '1s/prometheus, version \([^ ]*\).*/\1/p') scraped A: $n rgaps series, $series"
	end_bg promsrv
fi
for h in A B; do stop_host $h; done
