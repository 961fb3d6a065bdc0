#!/bin/bash
# Forged holds (docs/SECURITY.md, "Holds"): a subscriber that takes nothing writes holds in its
# own region on the next messages of every stream, over and over, as an unprivileged user,
# against rgapsd running as its own user, while an honest pair of a third user publishes
# messages of a quarter of the pool:
#   - on drop_oldest its publisher never waits for the liar (every publish goes through within
#     its timeout) and counts it (holds_ignored); the honest subscriber verifies every message
#     or is told of each it missed;
#   - on block the liar holds the publisher back as a subscriber that stops reading does: a
#     publish waits for room up to its timeout (2 s) and ends with ETIMEDOUT, never later;
#   - rgapsd lives, and a fresh pair works afterwards.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/limits_lib.sh"
. "$(dirname "$0")/attack_lib.sh"
need_users
ATTACK="$RGAPS_BUILD/tests/integration/itest-attack"
N=300
SIZE=262144 # a quarter of the pool: 16 forged holds would pin it four times over

three_users 61030
mkdir -p "$T/topics.d"
cat >"$T/rgapsd.json" <<JSON
{ "topics_dir": "$T/topics.d",
  "defaults": { "memory": "host", "pool_size": "1MiB", "max_message_size": "256KiB",
                "max_holds": 16, "overflow": "drop_oldest" } }
JSON
echo '{ "overflow": "block" }' >"$T/topics.d/blocked.json"
start_daemon -c "$T/rgapsd.json"

# has_publisher TOPIC: a publisher is attached (the liar maps its stream at its own attach)
has_publisher() {
	local s
	s=$("$RGAPS" topics --json | flat)
	[ "$(grep -o "\"name\":\"$1\"[^}]*" <<<"$s" | grep -o '"publishers":[0-9]*' | tr -dc '0-9')" -ge 1 ]
}

# drop_oldest: the pair first, then the liar, which forges for as long as the pair runs.
bg hsub "${HONEST[@]}" "$ITEST" legitsub open $N
wait_until 10 grep -q subscribed "$T/hsub.out" || fail "honest subscriber: $(cat "$T/hsub.out")"
bg hpub "${HONEST[@]}" "$ATTACK" bigpub open $N $SIZE
wait_until 10 has_publisher open || fail "the honest publisher did not attach: $(cat "$T/hpub.out")"
bg liar "${ATTACKER[@]}" "$ATTACK" forgeholds open 30
wait_until 10 grep -q subscribed "$T/liar.out" || fail "the liar did not attach: $(cat "$T/liar.out")"
wait_ok hpub
wait_ok hsub
line=$(grep "legitsub:" "$T/hsub.out" | tail -1)
v=$(sed -n 's/^legitsub: \([0-9]*\) verified, \([0-9]*\) lost.*/\1/p' <<<"$line")
l=$(sed -n 's/^legitsub: \([0-9]*\) verified, \([0-9]*\) lost.*/\2/p' <<<"$line")
[ -n "$v" ] && [ $((v + l)) -eq $N ] || fail "the honest subscriber: $line"
s=$(stat_json open | flat)
[ "$(jnum "$s" holds_ignored)" -ge 1 ] || fail "the publisher saw no forged holds: the attack did not bite"
ok "drop_oldest: $N messages of $SIZE bytes published while the liar forged holds ($(tail -1 "$T/liar.out" 2>/dev/null)); $line; holds_ignored $(jnum "$s" holds_ignored)"
kill9 liar
daemon_answers "$DAEMON_PID" || fail "rgapsd does not answer"

# block: the liar (never taking) holds a publish back for its timeout, no longer.
bg liar2 "${ATTACKER[@]}" "$ATTACK" forgeholds blocked 30
wait_until 10 grep -q subscribed "$T/liar2.out" || fail "the liar did not attach: $(cat "$T/liar2.out")"
BG_TIMEOUT=30 bg bpub "${HONEST[@]}" "$ATTACK" bigpub blocked 10 $SIZE
rc=0
wait "$(bg_pid bpub)" || rc=$?
[ $rc -ne 124 ] || fail "block: the publisher hung behind the liar"
[ $rc -eq 0 ] || grep -q "legitpub: publish [0-9]*: timed out" "$T/bpub.out" ||
	fail "block: neither published nor timed out: $(cat "$T/bpub.out")"
ok "block: the publisher behind the liar: $(tail -1 "$T/bpub.out")"
kill9 liar2

# Afterwards: rgapsd alive, a fresh pair verifies every message.
honest_pair fresh open 200
honest_pair_verified fresh 200
ok "a fresh pair verified 200 messages after the attacks"
stop_daemon
