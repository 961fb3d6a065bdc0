#!/bin/bash
# Replies of any size: a topics or stats reply larger than a frame comes in
# pages (docs/PROTOCOL.md, "Paged replies"). Here rgapsd holds 10,000 topics
# (fewer where the open-files limit cannot hold them, or under a sanitizer,
# which is ~5x slower), and `rgaps topics`, `rgaps stats --json`,
# `--prometheus` and rgaps-top each show every one of them, read page by page;
# a root client is served within 1 s meanwhile.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/limits_lib.sh"
need_users

n=10000
# One descriptor per topic, and room for rgapsd's connections and attachments.
fit=$(($(ulimit -Hn) - 3500))
[ "$fit" -lt "$n" ] && { echo "note: the open-files limit $(ulimit -Hn) holds $fit topics"; n=$fit; }
if sanitized; then n=2000; echo "note: sanitizer build, $n topics"; fi
[ "$n" -ge 1000 ] || { echo "skipped: the open-files limit $(ulimit -Hn) holds fewer than 1000 topics"; exit 77; }
cat >"$T/rgapsd.json" <<JSON
{ "max_topics": $n,
  "defaults": { "pool_size": "64KiB", "max_message_size": "4KiB", "queue_depth": 4,
                "max_subscribers": 2, "max_publishers": 1, "memory": "host" } }
JSON
start_daemon -c "$T/rgapsd.json"
timeout 300 "$FLOOD" topics bt "$n" >"$T/make.out" 2>&1 || fail "making topics: $(cat "$T/make.out")"
cat "$T/make.out"
[ "$(field "$T/make.out" created)" = "$n" ] || fail "not all $n topics were created"

"$RGAPS" topics >"$T/topics.out" || fail "rgaps topics failed"
[ "$(($(wc -l <"$T/topics.out") - 1))" = "$n" ] || fail "rgaps topics lists $(($(wc -l <"$T/topics.out") - 1)) of $n topics"
ok "rgaps topics lists all $n topics"
"$RGAPS" stats --json >"$T/stats.json" || fail "rgaps stats failed"
[ "$(grep -c '"subscriber_slots"' "$T/stats.json")" = "$n" ] || fail "stats holds $(grep -c '"subscriber_slots"' "$T/stats.json") of $n topics"
grep -q '"next"\|"continued"' "$T/stats.json" && fail "page fields leaked into the merged reply"
ok "rgaps stats --json holds all $n topics ($(wc -c <"$T/stats.json") bytes)"
"$RGAPS" stats bt$((n - 1)) --json | grep -q "\"name\":[[:space:]]*\"bt$((n - 1))\"" || fail "stats of one topic"
"$RGAPS" stats --prometheus >"$T/prom.txt" || fail "rgaps stats --prometheus failed"
[ "$(grep -c '^rgaps_topic_published_messages_total{' "$T/prom.txt")" = "$n" ] ||
	fail "Prometheus text has $(grep -c '^rgaps_topic_published_messages_total{' "$T/prom.txt") of $n topics"
if command -v promtool >/dev/null; then
	promtool check metrics <"$T/prom.txt" >"$T/promtool.out" 2>&1 || fail "promtool: $(head -n 5 "$T/promtool.out")"
fi
ok "rgaps stats --prometheus has all $n topics"
if [ -x "$RGAPS_BUILD/tools/rgaps-top" ]; then
	"$RGAPS_BUILD/tools/rgaps-top" --once --interval 100 >"$T/top.out" 2>&1 || fail "rgaps-top: $(tail -n 3 "$T/top.out")"
	grep -q "TOPICS ($n)" "$T/top.out" || fail "rgaps-top: $(grep TOPICS "$T/top.out")"
	ok "rgaps-top shows all $n topics"
fi
probe "with $n topics"
[ "$(dstat request_errors)" = 0 ] || fail "request_errors: $(dstat request_errors)"
stop_daemon
