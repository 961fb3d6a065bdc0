#!/bin/bash
# Visibility and access: topics and stats show a user only the
# topics it may attach to (root and rgapsd's group see all); supplementary
# groups count in allow-lists; socket_mode and socket_group set who may
# connect; rgapsd started by hand by a user other than root makes its
# socket directory itself, with that user, group and the matching mode.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/limits_lib.sh"
need_users

mkdir -p "$T/topics.d"
echo '{ "allowed_uids": [0] }' >"$T/topics.d/secret.json"
echo '{ "allowed_gids": [4242] }' >"$T/topics.d/grp.json"
cat >"$T/rgapsd.json" <<JSON
{ "defaults": { "pool_size": "64KiB", "max_message_size": "4KiB", "memory": "host" } }
JSON
start_daemon -c "$T/rgapsd.json"
for t in secret grp open; do "$RGAPS" sub "$t" --count 0 >/dev/null || fail "root: attach $t"; done

# lists USER...: the topic names `rgaps topics --json` shows to the AS prefix given
lists() { "$@" "$RGAPS" topics --json | tr -d ' \t\n' | grep -o '"name":"[^"]*"' | cut -d'"' -f4 | sort | tr '\n' ' '; }
[ "$(lists)" = "grp open secret " ] || fail "root sees: $(lists)"
[ "$(lists "${NOBODY[@]}")" = "open " ] || fail "nobody sees: $(lists "${NOBODY[@]}")"
"${NOBODY[@]}" "$RGAPS" stats --json | grep -q '"secret"' && fail "nobody's stats show 'secret'"
"${NOBODY[@]}" "$RGAPS" stats secret >"$T/s.out" 2>&1 && fail "nobody's stats of 'secret' answered"
grep -q "no topic 'secret'" "$T/s.out" || fail "stats secret as nobody: $(cat "$T/s.out")"
ok "nobody sees only 'open'; stats of 'secret' is not_found for it"

# A supplementary group in an allow-list: seen and attachable with it, neither without.
as 65534 65534 4242
[ "$(lists "${AS[@]}")" = "grp open " ] || fail "nobody in group 4242 sees: $(lists "${AS[@]}")"
"${AS[@]}" "$RGAPS" sub grp --count 0 >/dev/null || fail "nobody in group 4242 may not attach to grp"
"${NOBODY[@]}" "$RGAPS" sub grp --count 0 >"$T/g.out" 2>&1 && fail "nobody without group 4242 attached to grp"
ok "supplementary group 4242 admits nobody to 'grp' (SO_PEERGROUPS)"

# rgapsd's group (root's: gid 0 here) sees all, and still attaches by the allow-lists.
as 65534 65534 0
[ "$(lists "${AS[@]}")" = "grp open secret " ] || fail "a member of rgapsd's group sees: $(lists "${AS[@]}")"
"${AS[@]}" "$RGAPS" sub secret --count 0 >/dev/null 2>&1 && fail "seeing all let nobody attach to secret"
ok "a member of rgapsd's group sees every topic, attaches only where allowed"
stop_daemon

# rgapsd started by nobody, socket in a directory that does not exist yet, mode 0660.
mkdir -p "$T/nb" && chown 65534:65534 "$T/nb"
cat >"$T/nb/rgapsd.json" <<JSON
{ "socket": "$T/nb/run/sub/rgapsd.sock", "socket_mode": "0660",
  "defaults": { "pool_size": "64KiB", "max_message_size": "4KiB", "memory": "host" } }
JSON
spawn nbd "${NOBODY[@]}" "$RGAPSD" -c "$T/nb/rgapsd.json" --instance "${INSTANCE}nb"
wait_until 10 test -S "$T/nb/run/sub/rgapsd.sock" || fail "rgapsd as nobody did not serve: $(cat "$T/nbd.out")"
for p in "$T/nb/run" "$T/nb/run/sub"; do
	[ "$(stat -c '%a %u %g' "$p")" = "750 65534 65534" ] || fail "$p: $(stat -c '%a %u %g' "$p")"
done
[ "$(stat -c '%a %u %g' "$T/nb/run/sub/rgapsd.sock")" = "660 65534 65534" ] ||
	fail "socket: $(stat -c '%a %u %g' "$T/nb/run/sub/rgapsd.sock")"
ok "directories made 0750 nobody:nogroup, socket 0660"
export RGAPS_SOCKET="$T/nb/run/sub/rgapsd.sock"
as 65534 65534
"${AS[@]}" "$RGAPS" topics >/dev/null || fail "nobody cannot use its own daemon"
as 65533 65533
"${AS[@]}" "$RGAPS" topics >"$T/other.out" 2>&1 && fail "another user reached a 0660 socket"
ok "its user connects; another user cannot ($(head -n 1 "$T/other.out"))"
kill -TERM "$PID_nbd" 2>/dev/null
wait_until 10 test ! -S "$T/nb/run/sub/rgapsd.sock" || fail "rgapsd as nobody did not stop"

# The default /run/rgaps cannot be made by nobody: a clear error, not a crash.
as 65534 65534
"${AS[@]}" "$RGAPSD" --socket /run/rgaps-itest-$$/x/rgapsd.sock --instance "${INSTANCE}x" >"$T/run.out" 2>&1 &&
	fail "rgapsd as nobody started without its directory"
grep -q "give a socket path you may create" "$T/run.out" || fail "no advice: $(cat "$T/run.out")"
ok "as nobody, an uncreatable socket directory is refused with advice"

# Across hosts: A's stats show nobody neither B's subscription to 'secret' nor its ring.
. "$(dirname "$0")/remote_lib.sh"
host A 0
host B 1
DAEMON_EXTRA="\"topics_dir\": \"$T/topics.d\"," start_host A
start_host B
wait_until 20 peer_up A B || fail "A and B did not connect"
for t in secret open; do spawn "sub_$t" env RGAPS_SOCKET="${SOCK[B]}" "$RGAPS" sub "$t" --count 2 --timeout 50; done
wait_until 20 knows_sub A B secret || fail "A did not hear of B's subscription to secret"
wait_until 20 knows_sub A B open || fail "A did not hear of B's subscription to open"
# One message each sets up A's rings to B; the subscribers stay for a second one.
for t in secret open; do on A "$RGAPS" pub "$t" --count 1 --size 4KiB >/dev/null || fail "publish $t on A"; done
wait_until 20 grep -q "received 1\|^subscribed" "$T/sub_open.out"
on A "$RGAPS" stats --json | flat >"$T/a_root.json"
grep -q '"topic":"secret","direction":"out"' "$T/a_root.json" || fail "root does not see the ring of secret"
RGAPS_SOCKET=${SOCK[A]} as 65534 65534
"${AS[@]}" "$RGAPS" stats --json | flat >"$T/a_nobody.json"
grep -q '"subscribes":\[[^]]*"open"' "$T/a_nobody.json" || fail "nobody does not see B's subscription to open"
grep -q '"secret"' "$T/a_nobody.json" && fail "nobody sees 'secret' in A's peer section"
grep -q '"topic":"open","direction":"out"' "$T/a_nobody.json" || fail "nobody does not see the ring of open"
for t in secret open; do
	on A "$RGAPS" pub "$t" --count 1 --size 4KiB >/dev/null || fail "publish $t on A"
	wait_ok "sub_$t"
done
ok "peer subscriptions and rings of 'secret' hidden from nobody, those of 'open' shown"
stop_host B
stop_host A
