#!/bin/bash
# A file descriptor as a weapon (docs/SECURITY.md, "File descriptors"): an unprivileged client
# passes rgapsd, over SCM_RIGHTS, the last reference to a TCP socket that lingers 60 s with
# bytes stuck behind a zero window, against rgapsd running as its own user, while an honest
# pair of a third user runs:
#   - the kernel refuses the descriptor (SO_PASSRIGHTS, Linux 6.16+), or rgapsd closes it at
#     once, off its loop (its peer is reset long before the linger would end);
#   - rgapsd answers every request meanwhile, and the honest pair verifies every message;
#   - a fresh pair works afterwards.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/limits_lib.sh"
. "$(dirname "$0")/attack_lib.sh"
need_users
ATTACK="$RGAPS_BUILD/tests/integration/itest-attack"
N=1500

three_users 61070
echo '{ "defaults": { "memory": "host", "pool_size": "16MiB", "max_message_size": "64KiB" } }' \
	>"$T/rgapsd.json"
start_daemon -c "$T/rgapsd.json"

honest_pair a open $N
for i in 1 2 3; do
	BG_TIMEOUT=40 bg "liar$i" "${ATTACKER[@]}" "$ATTACK" lingerfd 20
	wait_until 15 grep -q "^lingerfd: " "$T/liar$i.out" || fail "attacker $i: $(cat "$T/liar$i.out")"
	grep -q "^lingerfd: refused by the kernel\|^lingerfd: passed; rgapsd closed it at once" \
		"$T/liar$i.out" || fail "attacker $i: $(cat "$T/liar$i.out")"
	# The loop answers while the socket would linger (60 s): 10 s is a wide bound.
	for q in topics stats; do
		"${HONEST[@]}" timeout 10 "$RGAPS" $q >/dev/null ||
			fail "rgaps $q did not answer within 10 s after attacker $i"
	done
done
ok "$(grep -h '^lingerfd:' "$T"/liar*.out | sort | uniq -c | sed 's/^ *//' | tr '\n' ' ')"
honest_pair_verified a $N
s=$(stat_json | flat)
ok "the honest pair verified $N messages; rgapsd closed $(jnum "$s" fds_closed) passed descriptors"
for i in 1 2 3; do kill9 "liar$i"; done
honest_pair fresh open 200
honest_pair_verified fresh 200
ok "a fresh pair verified 200 messages after the attacks"
stop_daemon
