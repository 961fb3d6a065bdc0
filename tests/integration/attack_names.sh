#!/bin/bash
# Names tell nothing (docs/SECURITY.md, "The objects"): a user tests which topics exist.
# rgapsd runs as its own user, with create_topics "configured" and an allow-listed topic
# 'secret' of an honest user; an attacker (a third user) asks for 'secret' and for a name
# that does not exist, through the protocol and the CLI, and must get the same answer and
# see the same counter move; /dev/shm shows it nothing of rgapsd's, and rgapsd's
# descriptors and mappings are closed to it. Root, who sees every topic, gets each reason.
# The honest user's pairs on 'secret' and 'open' verify every message throughout.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/limits_lib.sh"
. "$(dirname "$0")/attack_lib.sh"
need_users
OBJECTS="$RGAPS_BUILD/tests/integration/itest-objects"

three_users 61050
mkdir -p "$T/topics.d"
echo "{ \"allowed_uids\": [$HUID] }" >"$T/topics.d/secret.json"
echo '{}' >"$T/topics.d/open.json"
cat >"$T/rgapsd.json" <<JSON
{ "topics_dir": "$T/topics.d", "create_topics": "configured",
  "defaults": { "pool_size": "1MiB", "max_message_size": "64KiB", "overflow": "drop_oldest",
                "memory": "host" } }
JSON
start_daemon -c "$T/rgapsd.json"
honest_pair hs secret 800
honest_pair ho open 800

# answer WHO TOPIC: what WHO learns from an attach, with the topic's name taken out
answer() {
	local -n who=$1
	"${who[@]}" "$OBJECTS" ask "$2" | sed "s/'$2'/'NAME'/g"
}
denied0=$(dstat attach_denied) unconf0=$(dstat topics_refused_unconfigured)
a_secret=$(answer ATTACKER secret)
[ "$(dstat attach_denied)" = $((denied0 + 1)) ] || fail "attach_denied did not count the refusal on 'secret'"
a_none=$(answer ATTACKER no-such-topic)
[ "$(dstat attach_denied)" = $((denied0 + 2)) ] &&
	[ "$(dstat topics_refused_unconfigured)" = "$unconf0" ] ||
	fail "the counters tell the refusals apart: attach_denied $(dstat attach_denied), topics_refused_unconfigured $(dstat topics_refused_unconfigured)"
grep -q '"code":"not_found"' <<<"$a_secret" || fail "secret: $a_secret"
[ "$a_secret" = "$a_none" ] || fail "the answers differ: '$a_secret' and '$a_none'"
ok "an allow-listed topic and a missing one answer alike: $a_none"
for t in secret no-such-topic; do
	rc=0
	"${ATTACKER[@]}" "$RGAPS" sub $t --count 0 >"$T/cli-$t.out" 2>&1 || rc=$?
	echo "exit $rc" >>"$T/cli-$t.out"
	sed -i "s/'$t'/'NAME'/g" "$T/cli-$t.out"
	"${ATTACKER[@]}" "$RGAPS" stats $t >"$T/stats-$t.out" 2>&1 || true
	sed -i "s/'$t'/'NAME'/g" "$T/stats-$t.out"
done
cmp -s "$T/cli-secret.out" "$T/cli-no-such-topic.out" || fail "rgaps sub answers differ: $(cat "$T"/cli-*.out)"
cmp -s "$T/stats-secret.out" "$T/stats-no-such-topic.out" || fail "rgaps stats answers differ: $(cat "$T"/stats-*.out)"
ok "rgaps sub and rgaps stats answer alike too: $(head -n 1 "$T/cli-secret.out")"

# Those who see every topic learn why.
ROOT=(env)
grep -q '"ok":true' <<<"$(answer ROOT secret)" || fail "root was refused on 'secret'"
grep -q "create_topics is" <<<"$(answer ROOT no-such-topic)" || fail "root is not told why: $(answer ROOT no-such-topic)"
ok "root, who sees every topic, attaches to 'secret' and is told why 'no-such-topic' is refused"

# Nothing else tells: no name in /dev/shm, rgapsd's descriptors and mappings closed to it.
[ -z "$(find /dev/shm -maxdepth 1 -user $DUID)" ] || fail "rgapsd has names in /dev/shm"
"${ATTACKER[@]}" ls "/proc/$DAEMON_PID/fd" >/dev/null 2>&1 && fail "the attacker lists rgapsd's descriptors"
"${ATTACKER[@]}" cat "/proc/$DAEMON_PID/maps" >/dev/null 2>&1 && fail "the attacker reads rgapsd's mappings"
ok "no name in /dev/shm; rgapsd's /proc/PID/fd and maps are closed to the attacker"

honest_pair_verified hs 800
honest_pair_verified ho 800
ok "the honest pairs on 'secret' and 'open': 800 of 800 verified each"
honest_pair fs secret 100
honest_pair_verified fs 100
ok "a fresh pair on 'secret': 100 of 100 verified"
stop_daemon
