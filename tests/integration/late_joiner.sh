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

# 20 messages before anyone listens: nobody gets them on the live topic.
"$RGAPS" pub live --count 20 --size 1KiB >/dev/null || fail "early publish"
bg late "$RGAPS" sub live --count 10 --verify --timeout 20
wait_until 5 subs_are live 1 || fail "late subscriber did not attach"
"$RGAPS" pub live --count 10 --size 1KiB >/dev/null || fail "second publish"
wait_ok late
grep -q "received 10 verified 10" "$T/late.out" || fail "late joiner: $(tail -1 "$T/late.out")"
# and it saw seq 20..29: no gap inside what it received
grep -q "gaps 0" "$T/late.out" || fail "late joiner saw gaps"
ok "late joiner gets only live messages"

# History 5: a late joiner first receives the last 5.
"$RGAPS" pub hist --count 20 --size 1KiB >/dev/null || fail "history publish"
bg hist "$RGAPS" sub hist --count 5 --verify --timeout 10
wait_ok hist
grep -q "received 5 verified 5 mismatched 0 gaps 0" "$T/hist.out" || fail "history: $(tail -1 "$T/hist.out")"
ok "late joiner on a history topic gets the last 5"

# The RGAPS interface and the pollable fd.
bg pull "$ITEST" pull rgapsif 200
bg fd "$ITEST" fdsub rgapsif 200
wait_until 5 subs_are rgapsif 2 || fail "pull/fd subscribers did not attach"
"$ITEST" push rgapsif 200 65536 || fail "push via rgaps_publisher_push"
wait_ok pull
wait_ok fd
ok "push/pull and fd-driven subscribers verified 200 messages ($(grep -o 'in [0-9]* wake-ups' "$T/fd.out"))"
stop_daemon
