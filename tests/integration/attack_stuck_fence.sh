#!/bin/bash
# A fence that never completes (docs/SECURITY.md, "A fence that never completes"): an
# unprivileged publisher publishes in stream order and its copies never end (the host plugin's
# RGAPS_HOST_FENCE_DELAY_US: its fences' state words say "complete in 1000 s"), and stays
# attached, against
# rgapsd running as its own user, while subscribers of a third user read the same topics:
#   - a take with a 5 s timeout ends then, while only the liar's messages are there (before, it
#     waited for their copies for as long as the liar stayed);
#   - an honest pair verifies every message while the liar's wait, and the liar's messages are
#     reported lost once fence_timeout_ms has passed;
#   - rgapsd lives, and a fresh pair works afterwards.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/limits_lib.sh"
. "$(dirname "$0")/attack_lib.sh"
need_users
ATTACK="$RGAPS_BUILD/tests/integration/itest-attack"
N=2000
STUCK=(RGAPS_HOST_FENCE_DELAY_US=1000000000 "$ATTACK" stuckfence)

three_users 61040
mkdir -p "$T/topics.d"
cat >"$T/rgapsd.json" <<JSON
{ "topics_dir": "$T/topics.d",
  "defaults": { "memory": "host", "pool_size": "16MiB", "max_message_size": "64KiB",
                "fence_timeout_ms": 2000 } }
JSON
echo '{ "fence_timeout_ms": 15000 }' >"$T/topics.d/lonely.json"
start_daemon -c "$T/rgapsd.json"

# A take bounded by 5 s, with nothing but the liar's messages to take (published after it
# subscribed; their copies end in 1000 s, and lonely's fence_timeout_ms is 15 s).
t0=${EPOCHREALTIME/./}
BG_TIMEOUT=30 bg timed "${HONEST[@]}" "$RGAPS" sub lonely --count 1 --timeout 5 --allow-gaps
wait_until 10 grep -q "subscribed to lonely" "$T/timed.out" || fail "the timed subscriber: $(cat "$T/timed.out")"
BG_TIMEOUT=60 bg liar1 "${ATTACKER[@]}" "${STUCK[@]}" lonely 5 4096 30
rc=0
wait "$(bg_pid timed)" || rc=$?
took=$(((${EPOCHREALTIME/./} - t0) / 1000))
[ $rc -ne 124 ] || fail "a take with a 5 s timeout hung behind the liar's fences"
grep -q "stuckfence: published 5 in stream order" "$T/liar1.out" ||
	fail "the liar had not published within the take's 5 s: $(cat "$T/liar1.out")"
[ $took -lt 12000 ] || fail "a take with a 5 s timeout ended after $took ms"
grep -q "^received 0 " "$T/timed.out" || fail "the timed subscriber got something: $(cat "$T/timed.out")"
ok "a take with a 5 s timeout ended after $took ms, the liar's 5 messages untaken: $(tail -1 "$T/timed.out")"

# The honest pair on a topic the liar publishes on meanwhile.
honest_pair a open $N
BG_TIMEOUT=60 bg liar2 "${ATTACKER[@]}" "${STUCK[@]}" open 20 4096 30
honest_pair_verified a $N
grep -q "stuckfence: published 20 in stream order" "$T/liar2.out" || fail "the liar: $(cat "$T/liar2.out")"
ok "the honest pair verified $N messages while the liar's copies never ended"
lost_told() { local s; s=$(stat_json open | flat); [ "$(jnum "$s" drops_total)" -ge 1 ]; }
wait_until 20 lost_told || fail "the liar's messages were never reported lost"
stat_json open > "$T/open.json"
ok "the liar's messages reported lost after fence_timeout_ms: drops_total $(jnum "$(stat_json open | flat)" drops_total)"

kill9 liar1
kill9 liar2
honest_pair fresh open 200
honest_pair_verified fresh 200
ok "a fresh pair verified 200 messages after the attack"
stop_daemon
