#!/bin/bash
# topic_idle_s: topics made from the defaults that nobody
# uses - no publisher, no subscriber, no history kept, no peer - are removed
# with their shared memory after topic_idle_s, so ad hoc topics made and left
# by any user (here nobody, 40 of them) do not stay forever; a topic with a
# subscriber attached and the topics of topics.d stay; a removed topic is made
# again by the next attach.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/limits_lib.sh"
need_users

shm_count() { daemon_segments "$INSTANCE-"; }
mkdir -p "$T/topics.d"
echo '{}' >"$T/topics.d/conf.json"
cat >"$T/rgapsd.json" <<JSON
{ "topic_idle_s": 2, "max_topics_per_user": 100,
  "defaults": { "pool_size": "64KiB", "max_message_size": "4KiB", "memory": "host" } }
JSON
start_daemon -c "$T/rgapsd.json"

# A subscriber that stays, on an ad hoc topic; the configured topic, used and left.
bg keeper "$RGAPS" sub kept --count 1 --timeout 60
wait_until 10 subs_are kept 1 || fail "the subscriber of 'kept' did not attach"
"$RGAPS" sub conf --count 0 >/dev/null || fail "cannot attach to the configured topic"
# nobody makes 40 topics and leaves them.
"${NOBODY[@]}" timeout 60 "$FLOOD" topics idle 40 >"$T/idle.out" 2>&1 || fail "flood: $(cat "$T/idle.out")"
[ "$(field "$T/idle.out" created)" = 40 ] || fail "nobody could not make 40 topics: $(cat "$T/idle.out")"
n0=$(dstat topics); s0=$(shm_count)
[ "$n0" = 42 ] || fail "$n0 topics after the flood, expected 42"
ok "42 topics (40 left by nobody, 'kept', 'conf'), rgapsd holds $s0 segments"

# Past topic_idle_s (2 s, looked at every second): the 40 go, with their segments.
wait_until 20 dstat_is topics_removed_idle 40 || fail "$(dstat topics_removed_idle) of 40 idle topics removed in 20 s"
[ "$(dstat topics)" = 2 ] || fail "$(dstat topics) topics left, expected 2"
"$RGAPS" topics | grep -q "^idle" && fail "'rgaps topics' still lists an idle topic: $("$RGAPS" topics)"
"$RGAPS" topics | grep -q "^kept " || fail "'kept', with its subscriber, was removed"
"$RGAPS" topics | grep -q "^conf " || fail "the configured topic was removed"
[ "$(daemon_segments "$INSTANCE-idle")" = 0 ] || fail "segments of removed topics are left: $(daemon_segments "$INSTANCE-idle")"
s1=$(shm_count)
[ "$s1" -lt "$s0" ] || fail "rgapsd's segments did not go: $s0 -> $s1"
ok "40 idle topics removed (topics_removed_idle 40), rgapsd's segments $s0 -> $s1; 'kept' and 'conf' stay"

# 'kept' still works for its subscriber, and a removed topic comes back on attach.
"$RGAPS" pub kept --count 1 --size 1KiB >/dev/null || fail "cannot publish on 'kept'"
wait_ok keeper
grep -q "received 1" "$T/keeper.out" || fail "the subscriber of 'kept': $(tail -n 1 "$T/keeper.out")"
"${NOBODY[@]}" "$RGAPS" sub idle7 --count 0 >/dev/null || fail "nobody cannot make 'idle7' again"
"$RGAPS" topics | grep -q "^idle7 " || fail "'idle7' was not made again"
ok "the subscriber of 'kept' got its message; 'idle7' was made again on attach"
probe "after the idle sweep"
stop_daemon
