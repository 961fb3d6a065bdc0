#!/bin/bash
# Live delivery: a subscriber that joins late sees only what is published after
# it attached; on a topic with history K it first gets the last K. Also the
# RGAPS interface (push/pull) and the pollable fd, end to end.
. "$(dirname "$0")/lib.sh"
mkdir -p "$T/topics.d"
cat > "$T/rgapsd.json" <<JSON
{ "topics_dir": "$T/topics.d" }
JSON
echo '{ "history": 5, "queue_depth": 16 }' > "$T/topics.d/hist.json"
start_daemon --config "$T/rgapsd.json"

# 20 messages before anyone listens: nobody gets them on the live topic (they are
# another publisher's stream: one of them would make two streams).
"$RGAPS" pub live --count 20 --size 1KiB >/dev/null || fail "early publish"
bg late "$RGAPS" sub live --count 10 --verify --timeout 20
wait_until 20 subs_are live 1 || fail "late subscriber did not attach"
"$RGAPS" pub live --count 10 --size 1KiB >/dev/null || fail "second publish"
wait_ok late
# the 10 live messages: one stream (the second publisher's), seq 0..9, payloads 0..9
expect_sub late received=10 verified=10 mismatched=0 gaps=0 drops=0 streams=1 first_seq=0 last_seq=9
ok "late joiner gets only the live messages: the second publisher's stream, seq 0..9"

# History 5: a late joiner first receives the last 5 (seq and payload counters 15..19).
"$RGAPS" pub hist --count 20 --size 1KiB >/dev/null || fail "history publish"
bg hist "$RGAPS" sub hist --count 5 --verify --timeout 10
wait_ok hist
expect_sub hist received=5 verified=5 mismatched=0 gaps=0 drops=0 streams=1 first_seq=15 last_seq=19
ok "late joiner on a history topic gets the last 5 (seq 15..19)"

# The RGAPS interface and the pollable fd.
bg pull "$ITEST" pull rgapsif 200
bg fd "$ITEST" fdsub rgapsif 200
wait_until 20 subs_are rgapsif 2 || fail "pull/fd subscribers did not attach"
"$ITEST" push rgapsif 200 65536 || fail "push via rgaps_publisher_push"
wait_ok pull
wait_ok fd
grep -q "^pulled 200, 0 failures$" "$T/pull.out" || fail "pull: $(cat "$T/pull.out")"
grep -q "^fd-driven: 200 messages in [0-9]* wake-ups, 0 failures$" "$T/fd.out" || fail "fd: $(cat "$T/fd.out")"
ok "push/pull and fd-driven subscribers verified 200 messages ($(grep -o 'in [0-9]* wake-ups' "$T/fd.out"))"
stop_daemon
