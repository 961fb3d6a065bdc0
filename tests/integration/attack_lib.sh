# Helpers of the attack tests on rgapsd's objects (attack_*.sh, tests/attack/soak.sh),
# sourced after lib.sh and limits_lib.sh: three users who need no passwd entry - rgapsd's
# own, an attacker and an honest user - and honest verifying pairs (itest-client legitpub /
# legitsub) to run beside an attack.

# three_users BASE: DUID=BASE (rgapsd's user), AUID=BASE+1 (the attacker), HUID=BASE+2 (the
# honest user), each its own group; rgapsd's socket in $T/run, which its user owns.
# DAEMON_AS, ATTACKER, HONEST: the prefixes that run a command as each. Each test takes a
# base of its own (tests of other worktrees may run at the same time): attack_objects
# 61010, attack_shm_full 61020, attack_holds 61030, attack_stuck_fence 61040, attack_names
# 61050, attack_fence 61060 (its own three, without this helper), attack_fds 61070;
# dataport_flood 61080 (its honest user) and 61081 (rgapsd's); tests/attack/soak.sh (outside
# CI) 61090.
three_users() {
	DUID=$1 AUID=$(($1 + 1)) HUID=$(($1 + 2))
	mkdir -p "$T/run"
	chown "$DUID:$DUID" "$T/run"
	export RGAPS_SOCKET="$T/run/rgapsd.sock"
	as $AUID $AUID
	ATTACKER=("${AS[@]}")
	as $HUID $HUID
	HONEST=("${AS[@]}")
	as $DUID $DUID
	DAEMON_AS=("${AS[@]}")
}

# honest_pair NAME TOPIC N [SUB_AS [PUB_AS]]: a verifying subscriber of TOPIC, then its
# publisher of N messages, as the prefixes named SUB_AS and PUB_AS (arrays; default HONEST).
honest_pair() {
	local -n sub_as=${4:-HONEST} pub_as=${5:-${4:-HONEST}}
	bg "$1sub" "${sub_as[@]}" "$ITEST" legitsub "$2" "$3"
	wait_until 10 grep -q subscribed "$T/$1sub.out" || fail "$1: the subscriber: $(cat "$T/$1sub.out")"
	bg "$1pub" "${pub_as[@]}" "$ITEST" legitpub "$2" "$3"
}

# honest_pair_verified NAME N: both ended well, and the subscriber verified all N, none lost.
honest_pair_verified() {
	wait_ok "$1pub"
	wait_ok "$1sub"
	grep -q "legitsub: $2 verified, 0 lost" "$T/$1sub.out" || fail "$1: $(cat "$T/$1sub.out")"
}
