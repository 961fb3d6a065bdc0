#!/bin/bash
# The attack soak (docs/SECURITY.md; docs/TESTING.md, "The attack soak"): outside CI.
#
#   sudo RGAPS_BUILD=build tests/attack/soak.sh [SECONDS]     (default 600)
#
# One rgapsd, A, runs as its own user with a peer B (same user) on loopback, in a mount
# namespace of the soak's own whose /dev/shm is a 4 MiB tmpfs. For SECONDS a hostile user
# attacks A with every attack of docs/SECURITY.md at once: a subscriber forging holds on a
# drop_oldest topic and a network neighbour (nobody) flooding A's peer and data ports all the
# time, /dev/shm filled to the last byte and rgapsd's old names squatted in it, and a cycle of
# the others: shrinking, punching, resealing and reopening its objects as a publisher and a
# subscriber, scribbling over its own regions, fences naming a file (read by A's subscribers
# and by A's forwarder to B), fences that never complete, the last reference to a lingering
# socket passed over SCM_RIGHTS, asking after an allow-listed topic and a missing one, a second
# rgapsd of A's instance name started and killed, clients killed at random points.
# Meanwhile four honest pairs of a third user verify every message, round after round: three
# on A (a drop_oldest topic the attacker attacks, an allow-listed block topic, a block topic
# the attacker publishes on) and one from A to B through A's forwarder and data port.
# It fails when: a message is lost without being reported (a round whose subscriber verified
# plus was told lost differs from what its publisher published), a byte is wrong, an attack
# that must be refused was not, A stops answering (10 s) or dies, an allow-listed topic and a
# missing one answer differently, or A's RSS or descriptor count grew: both are measured
# with no client attached before and after (at most 16 MiB and 8 descriptors more) and
# sampled every 5 s throughout (the series is in $T/samples, kept with RGAPS_TEST_KEEP=1).
# The line "ok: SOAK ..." sums it up: duration, rounds and messages verified, RSS and fds.
set -eu
if [ -z "${SOAK_IN_NS:-}" ]; then
	[ "$(id -u)" = 0 ] || { echo "the soak runs as root (its users are made with setpriv)"; exit 77; }
	command -v unshare >/dev/null || { echo "unshare (util-linux) is needed"; exit 77; }
	: "${RGAPS_BUILD:?RGAPS_BUILD must point at the build directory}"
	RGAPS_BUILD=$(realpath "$RGAPS_BUILD")
	exec env SOAK_IN_NS=1 RGAPS_BUILD="$RGAPS_BUILD" unshare -m --propagation private "$(realpath "$0")" "$@"
fi
mount -t tmpfs -o size=4m,mode=1777 soakshm /dev/shm
cd "$(dirname "$0")/../integration"
. ./lib.sh
. ./limits_lib.sh
. ./attack_lib.sh
. ./remote_lib.sh
need_users
DURATION=${1:-600}
OBJECTS="$RGAPS_BUILD/tests/integration/itest-objects"
ATTACK="$RGAPS_BUILD/tests/integration/itest-attack"
PFLOOD="$RGAPS_BUILD/tests/integration/itest-peer-flood"
N=2000 # messages a round of each pair

three_users 61090
chown "$DUID:$DUID" "$KEY"
SOCKB="$T/run/b.sock"
host a 1
host b 2
mkdir -p "$T/topics.d"
echo '{}' >"$T/topics.d/mine.json"
# A's resend window of a topic peers subscribe to is a buffer that fills as messages pass,
# up to its size, and stays (docs/CONFIG.md, resend_window): 4 MiB, full after the warm-up.
for t in fwd remote; do echo '{ "resend_window": "4MiB" }' >"$T/topics.d/$t.json"; done
# open: the attacked drop_oldest topic; 16 forged holds of 8 KiB messages would pin its pool.
echo '{ "pool_size": "128KiB", "max_message_size": "8KiB", "max_holds": 16 }' >"$T/topics.d/open.json"
echo "{ \"allowed_uids\": [$HUID], \"overflow\": \"block\" }" >"$T/topics.d/secret.json"
echo '{ "overflow": "block" }' >"$T/topics.d/blockt.json"
# soak_config NAME [LISTEN PEER]: a daemon's configuration
soak_config() {
	local net=
	[ -z "${2:-}" ] || net="\"listen\": \"$2\", \"peers\": [ \"$3\" ], \"key_file\": \"$KEY\","
	cat >"$T/$1.json" <<JSON
{ $net "topics_dir": "$T/topics.d", "create_topics": "configured", "keepalive_ms": 2000,
  "defaults": { "transport": "tcp", "memory": "host", "pool_size": "1MiB",
                "max_message_size": "64KiB", "overflow": "drop_oldest", "fence_timeout_ms": 2000 } }
JSON
}
soak_config a "${ADDR[a]}:${PORT[a]}" "${ADDR[b]}:${PORT[b]}"
soak_config b "${ADDR[b]}:${PORT[b]}" "${ADDR[a]}:${PORT[a]}"
soak_config second
start_daemon -c "$T/a.json"
"${DAEMON_AS[@]}" "$RGAPSD" -c "$T/b.json" --socket "$SOCKB" --instance "${INSTANCE}b" \
	>>"$T/b.log" 2>&1 &
BPID=$!
PIDS+=("$BPID")
onb() { RGAPS_SOCKET=$SOCKB "$@"; }
wait_until 20 onb "$RGAPS" topics >/dev/null 2>&1 || fail "B did not start: $(tail -n 5 "$T/b.log")"
[ "$(stat -c %u "/proc/$DAEMON_PID")" = $DUID ] && [ "$(stat -c %u "/proc/$BPID")" = $DUID ] ||
	fail "A and B do not run as uid $DUID"
sa() { "$RGAPS" stats --json | flat; }
# knows_b TOPIC: A has heard that B subscribes to TOPIC
knows_b() { grep -q "\"name\":\"${ADDR[b]}:${PORT[b]}\",\"up\":true[^]]*\"subscribes\":\[[^]]*\"$1\"" <<<"$(sa)"; }
b_up() { grep -q "\"name\":\"${ADDR[b]}:${PORT[b]}\",\"up\":true" <<<"$(sa)"; }
wait_until 20 b_up || fail "A and B did not connect"
ok "A (pid $DAEMON_PID) and B (pid $BPID) run as uid $DUID; attacker uid $AUID, honest uid $HUID"

# ---------------------------------------------------------------- the honest pairs
# Each round's verdict is a line in $T/NAME.rounds: "ok P V L" (published, verified, told
# lost) or "FAIL why", its outputs kept as NAME.sub.K and NAME.pub.K; a pair goes on until
# $T/stop, and the verdict counts its failed rounds.
now_s() { echo $((${EPOCHREALTIME/./} / 1000000)); }
# wait_file SECONDS FILE PATTERN: FILE shows PATTERN within SECONDS
wait_file() {
	local end=$(($(now_s) + $1))
	until grep -q "$3" "$2" 2>/dev/null; do
		[ "$(now_s)" -lt $end ] || return 1
		sleep 0.1
	done
}
# local_round NAME TOPIC: a legitsub, then a legitpub of N messages, on A
local_round() {
	local name=$1 topic=$2 sp prc=0 src=0 p v l line
	: >"$T/$name.sub" # emptied before the wait below reads it, not when the job gets there
	timeout -k 2 120 "${HONEST[@]}" "$ITEST" legitsub "$topic" $N >"$T/$name.sub" 2>&1 &
	sp=$!
	wait_file 20 "$T/$name.sub" subscribed || { echo "FAIL subscriber: $(tail -n 2 "$T/$name.sub")"; return; }
	timeout -k 2 120 "${HONEST[@]}" "$ITEST" legitpub "$topic" $N >"$T/$name.pub" 2>&1 || prc=$?
	wait $sp || src=$?
	if [ $prc = 0 ]; then
		p=$N
	else # it stopped at a publish it was told failed: those before it count
		p=$(sed -n 's/^legitpub: publish \([0-9]*\): .*/\1/p' "$T/$name.pub")
		[ -n "$p" ] || { echo "FAIL publisher exited $prc: $(tail -n 2 "$T/$name.pub")"; return; }
	fi
	line=$(grep "^legitsub: [0-9]* verified\|^legitsub: take: " "$T/$name.sub" | tail -n 1) || true
	v=$(sed -n 's/^legitsub: \([0-9]*\) verified, \([0-9]*\) lost.*/\1/p; s/^legitsub: take: .* after \([0-9]*\) messages (\([0-9]*\) lost)/\1/p' <<<"$line")
	l=$(sed -n 's/^legitsub: \([0-9]*\) verified, \([0-9]*\) lost.*/\2/p; s/^legitsub: take: .* after \([0-9]*\) messages (\([0-9]*\) lost)/\2/p' <<<"$line")
	[ $src != 3 ] && [ -n "$v" ] || { echo "FAIL subscriber exited $src: $(tail -n 2 "$T/$name.sub")"; return; }
	[ $src = 0 ] || [ $prc != 0 ] || { echo "FAIL subscriber exited $src: $line"; return; }
	[ $((v + l)) = "$p" ] || { echo "FAIL silent loss: published $p, verified $v, told lost $l"; return; }
	# a last field: the publisher stopped at a publish it was told failed (block: no room in time)
	if [ $prc = 0 ]; then echo "ok $p $v $l"; else echo "ok $p $v $l told-publisher"; fi
}
# remote_round NAME: rgaps sub --verify on B, then rgaps pub on A, of N messages
remote_round() {
	local name=$1 sp src=0 r g d line
	wait_until 20 eval '! knows_b remote' || { echo "FAIL A still knows B's last subscriber"; return; }
	timeout -k 2 120 "${HONEST[@]}" env RGAPS_SOCKET="$SOCKB" "$RGAPS" sub remote --count $N \
		--verify --allow-gaps --timeout 20 >"$T/$name.sub" 2>&1 &
	sp=$!
	wait_until 20 knows_b remote || { echo "FAIL A did not hear of B's subscriber"; return; }
	timeout -k 2 120 "${HONEST[@]}" "$RGAPS" pub remote --count $N --size 64-8KiB --rate 1000 \
		>"$T/$name.pub" 2>&1 || { echo "FAIL publisher: $(tail -n 2 "$T/$name.pub")"; return; }
	wait $sp || src=$?
	line=$(grep -a '^received [0-9]* ' "$T/$name.sub" | tail -n 1) || true
	r=$(grep -o 'received [0-9]*' <<<"$line" | cut -d' ' -f2)
	g=$(grep -o 'gaps [0-9]*' <<<"$line" | cut -d' ' -f2)
	d=$(grep -o 'drops [0-9]*' <<<"$line" | cut -d' ' -f2)
	[ $src != 3 ] && [ -n "$r" ] && grep -q "verified $r mismatched 0 " <<<"$line" ||
		{ echo "FAIL subscriber exited $src: $(tail -n 2 "$T/$name.sub")"; return; }
	[ $((r + g + d)) = $N ] || { echo "FAIL silent loss: published $N: $line"; return; }
	echo "ok $N $r $((g + d))"
}
# pair NAME ROUND_FN ARGS...: rounds until $T/stop
pair() {
	local name=$1 v
	shift
	(
		set +e
		trap - EXIT ERR
		while [ ! -e "$T/stop" ]; do
			v=$("$@")
			echo "$v" >>"$T/$name.rounds"
			[ "${v%% *}" = ok ] || {
				k=$(grep -c . "$T/$name.rounds")
				cp "$T/$name.sub" "$T/$name.sub.$k"
				cp "$T/$name.pub" "$T/$name.pub.$k"
			}
		done
	) &
	LOOPS+=($!)
}
LOOPS=()
# soak_stop: end the loops of this script (they carry no RGAPS_TEST_ID: bash subshells)
soak_stop() {
	local p
	: >"$T/stop"
	for p in ${LOOPS[@]+"${LOOPS[@]}"}; do kill -TERM "$p" 2>/dev/null || true; done
}
trap 'rc=$?; trap - ERR; set +e; soak_stop; (exit $rc); cleanup' EXIT

# ---------------------------------------------------------------- what A holds, unattached
a_rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$DAEMON_PID/status"; }
a_fds() { ls "/proc/$DAEMON_PID/fd" | wc -l; }
# no_clients: A's only connection is the question itself (its own members, forwarders, stay)
no_clients() { [ "$(dstat connections)" = 1 ]; }
# quiet WHEN: no client on A, then its RSS and fds into QUIET_RSS and QUIET_FDS
quiet() {
	wait_until 30 no_clients || fail "clients still connected $1: $(dstat connections) connections"
	sleep 3 # closes and frees posted to other threads land
	QUIET_RSS=$(a_rss) QUIET_FDS=$(a_fds)
	ok "$1, no client attached: A's RSS $QUIET_RSS kB, $QUIET_FDS descriptors"
}

# ---------------------------------------------------------------- the attacks
squat() {
	local t r
	for t in open secret blockt mine fwd remote; do
		for r in meta p0.1 p0.1-pool s0.1 pub pub-pool sub; do
			"${ATTACKER[@]}" sh -c "umask 0; : >/dev/shm/rgaps-$INSTANCE-$t-$r" 2>/dev/null || true
		done
	done
}
unsquat() { find /dev/shm -maxdepth 1 -user "$AUID" -delete; }
answers() { # WHAT: A answers topics and stats within 10 s each, and lives
	local q
	kill -0 "$DAEMON_PID" || fail "A died ($1): $(tail -n 5 "$T/rgapsd.log")"
	for q in topics stats; do
		timeout 10 "$RGAPS" $q >/dev/null || fail "A did not answer '$q' within 10 s ($1)"
	done
}
declare -A TRIES
# atk NAME SECONDS CMD...: one attack in the foreground, bounded; its exit status in $?
atk() {
	local name=$1 s=$2
	shift 2
	TRIES[$name]=$((${TRIES[$name]:-0} + 1))
	timeout -k 2 "$s" "$@" >"$T/atk-$name.out" 2>&1
}
must() { # NAME SECONDS CMD...: an attack whose every attempt must be refused (exit 0)
	local rc=0
	atk "$@" || rc=$?
	[ $rc = 0 ] || fail "attack $1 exited $rc: $(grep -v '^ok' "$T/atk-$1.out" | tail -n 5)"
}
answer() { "${ATTACKER[@]}" "$OBJECTS" ask "$1" | sed "s/'$1'/'NAME'/g"; }
second() { # a second rgapsd of A's instance name, in the same /dev/shm: started, used, killed
	local p
	"${DAEMON_AS[@]}" "$RGAPSD" -c "$T/second.json" --socket "$T/run/second.sock" \
		--instance "$INSTANCE" >>"$T/second.log" 2>&1 &
	p=$!
	wait_until 20 test -S "$T/run/second.sock" || fail "the second rgapsd did not start: $(tail -n 3 "$T/second.log")"
	"${HONEST[@]}" env RGAPS_SOCKET="$T/run/second.sock" timeout 10 "$RGAPS" sub open --count 0 \
		>/dev/null || fail "the second rgapsd did not serve 'open'"
	kill -KILL $p
	wait $p 2>/dev/null || true
	rm -f "$T/run/second.sock"
}
# kill_at_random NAME CMD...: an attacker client, SIGKILLed 0-999 ms after its start
kill_at_random() {
	local name=$1 p
	shift
	TRIES[$name]=$((${TRIES[$name]:-0} + 1))
	"$@" >"$T/atk-$name.out" 2>&1 &
	p=$!
	sleep "0.$(printf %03d $((RANDOM % 1000)))"
	kill -KILL $p 2>/dev/null || true
	wait $p 2>/dev/null || true
}
STUCK=(env RGAPS_HOST_FENCE_DELAY_US=1000000000 "$ATTACK" stuckfence)
# cycle: every attack of the cycle once, A checked after each
cycle() {
	local spec a_s a_n
	for spec in "open pub" "open sub" "mine pub" "mine sub" "blockt pub"; do
		must "shrink-${spec/ /-}" 30 "${ATTACKER[@]}" "$OBJECTS" shrink $spec 0.3
		answers "after shrink $spec"
	done
	for spec in "open pub random" "open sub zero" "blockt pub random" "mine sub random"; do
		must "scribble-${spec// /-}" 30 "${ATTACKER[@]}" "$ITEST" scribble $spec exit 0.5
		answers "after scribble $spec"
	done
	for spec in fwd open blockt; do
		must "fence-$spec" 30 "${ATTACKER[@]}" "$OBJECTS" fence $spec 10 0.5
		answers "after fences naming a file on $spec"
	done
	for spec in open blockt; do
		must "stuckfence-$spec" 30 "${ATTACKER[@]}" "${STUCK[@]}" $spec 10 4096 1
		answers "after fences that never complete on $spec"
	done
	must lingerfd 30 "${ATTACKER[@]}" "$ATTACK" lingerfd 0.2
	grep -q "^lingerfd: refused by the kernel\|^lingerfd: passed; rgapsd closed it at once" \
		"$T/atk-lingerfd.out" || fail "lingerfd: $(cat "$T/atk-lingerfd.out")"
	answers "after a lingering descriptor"
	TRIES[names]=$((${TRIES[names]:-0} + 1))
	a_s=$(answer secret)
	a_n=$(answer no-such-topic)
	[ "$a_s" = "$a_n" ] || fail "an allow-listed topic and a missing one answer differently: '$a_s', '$a_n'"
	squat
	TRIES[squat]=$((${TRIES[squat]:-0} + 1))
	"${ATTACKER[@]}" sh -c 'dd if=/dev/zero of=/dev/shm/fill-more bs=4k >/dev/null 2>&1; true'
	TRIES[fill]=$((${TRIES[fill]:-0} + 1))
	TRIES[second]=$((${TRIES[second]:-0} + 1))
	second
	answers "beside a second rgapsd of its instance name"
	kill_at_random kill-pub "${ATTACKER[@]}" "$RGAPS" pub open --count 1000000 --rate 2000
	kill_at_random kill-shrink "${ATTACKER[@]}" "$OBJECTS" shrink open sub 5
	kill_at_random kill-stuck "${ATTACKER[@]}" "${STUCK[@]}" blockt 100 4096 5
	answers "after clients killed at random points"
}
# The attacks that last: forged holds on open, the flood of A's peer and data ports.
start_lasting() {
	BG_TIMEOUT=$(($1 + 30)) bg liar "${ATTACKER[@]}" "$ATTACK" forgeholds open "$1"
	spawn flood "${NOBODY[@]}" "$PFLOOD" "$1" 10 20 "${PORT[a]}" $((PORT[a] + 1))
	wait_until 10 grep -q started "$T/flood.out" || fail "the flood did not start: $(cat "$T/flood.out")"
}
stop_lasting() {
	end_bg liar
	kill -INT "$PID_flood" 2>/dev/null || true
	wait "$PID_flood" 2>/dev/null || true
	forget_pid "$PID_flood"
}

# ---------------------------------------------------------------- warm-up, then the soak
# The attacker fills /dev/shm first; a sink on B makes A's forwarder read the fwd topic.
"${ATTACKER[@]}" sh -c 'dd if=/dev/zero of=/dev/shm/fill bs=64k >/dev/null 2>&1; true'
[ "$(df -B1 --output=avail /dev/shm | tail -n 1 | tr -d ' ')" = 0 ] || fail "/dev/shm is not full"
BG_TIMEOUT=$((DURATION + 300)) bg fwdsink "${HONEST[@]}" env RGAPS_SOCKET="$SOCKB" "$RGAPS" sub fwd \
	--count 1000000000 --allow-gaps --timeout $((DURATION + 240))
wait_until 20 knows_b fwd || fail "A did not hear of B's subscriber of fwd"
# Warm-up: one round of each pair and one cycle, so that every topic, peer stream and
# forwarder exists when A is first measured.
start_lasting 60
for p in open secret blockt; do
	v=$(local_round "w$p" $p)
	[ "${v%% *}" = ok ] || fail "warm-up round on $p: $v"
done
v=$(remote_round wremote)
[ "${v%% *}" = ok ] || fail "warm-up remote round: $v"
cycle
stop_lasting
end_bg fwdsink
quiet "before the soak"
RSS0=$QUIET_RSS FDS0=$QUIET_FDS
BG_TIMEOUT=$((DURATION + 300)) bg fwdsink "${HONEST[@]}" env RGAPS_SOCKET="$SOCKB" "$RGAPS" sub fwd \
	--count 1000000000 --allow-gaps --timeout $((DURATION + 240))
wait_until 20 knows_b fwd || fail "A did not hear of B's subscriber of fwd"

t0=$(now_s)
END=$((t0 + DURATION))
start_lasting "$DURATION"
(
	set +e
	trap - EXIT ERR
	while [ ! -e "$T/stop" ] && kill -0 "$DAEMON_PID" 2>/dev/null; do
		echo "$(($(now_s) - t0)) $(a_rss) $(a_fds)" >>"$T/samples"
		sleep 5
	done
) &
LOOPS+=($!)
pair open local_round open open
pair secret local_round secret secret
pair blockt local_round blockt blockt
pair remote remote_round remote
cycles=0
while [ "$(now_s)" -lt $END ]; do
	cycle
	cycles=$((cycles + 1))
done
: >"$T/stop"
for p in "${LOOPS[@]}"; do wait "$p"; done
LOOPS=()
elapsed=$(($(now_s) - t0))
answers "at the end of the soak"
flood_line=$(tail -n 1 "$T/flood.out")
s=$(sa)
stop_lasting
end_bg fwdsink

# ---------------------------------------------------------------- the verdict
verified=0 told=0 rounds=0 failed=0
for p in open secret blockt remote; do
	read -r r pp vv ll < <(awk '$1 == "ok" { r++; p += $2; v += $3; l += $4 } END { print r + 0, p + 0, v + 0, l + 0 }' "$T/$p.rounds")
	f=$(grep -c '^FAIL' "$T/$p.rounds" || true)
	ok "pair $p: $r rounds passed, $f failed; in those passed $pp published, $vv verified, $ll told lost"
	grep -n '^FAIL' "$T/$p.rounds" | sed "s/^/    $p round /" || true
	rounds=$((rounds + r)) verified=$((verified + vv)) told=$((told + ll)) failed=$((failed + f))
done
ok "attacks tried: $(for k in "${!TRIES[@]}"; do echo "$k ${TRIES[$k]}"; done | sort | tr '\n' ' ')"
ok "A's flood counters: data port $(grep -o '"data_ports":{"tcp":{[^}]*}' <<<"$s"); the flood: $flood_line"
read -r rmin rmax fmin fmax n < <(awk '{ if (NR == 1 || $2 < a) a = $2; if ($2 > b) b = $2;
	if (NR == 1 || $3 < c) c = $3; if ($3 > d) d = $3 } END { print a, b, c, d, NR }' "$T/samples")
ok "A sampled $n times under the attacks: RSS $rmin-$rmax kB, descriptors $fmin-$fmax"
lines=$(grep -c " warn: " "$T/rgapsd.log" || true)
ok "A's log: $(wc -c <"$T/rgapsd.log") bytes, $lines warnings"
quiet "after the soak"
ok "SOAK $(date -u +%FT%TZ): ${elapsed} s of attacks, $cycles cycles; $rounds rounds of the honest pairs passed ($verified messages verified, $told told lost, none lost silently in them), $failed failed; A's RSS $RSS0 -> $QUIET_RSS kB, descriptors $FDS0 -> $QUIET_FDS (no client attached; under attack RSS $rmin-$rmax kB, descriptors $fmin-$fmax)"
[ $failed = 0 ] || fail "$failed rounds of the honest pairs failed (above; their outputs in $T)"
[ $((QUIET_RSS - RSS0)) -le 16384 ] || fail "A's RSS grew from $RSS0 to $QUIET_RSS kB"
[ $((QUIET_FDS - FDS0)) -le 8 ] || fail "A's descriptors grew from $FDS0 to $QUIET_FDS"
honest_pair fresh open 200
honest_pair_verified fresh 200
ok "a fresh pair verified 200 of 200"
unsquat
stop_pid "$BPID" B || fail "B did not stop cleanly"
forget_pid "$BPID"
stop_daemon
ok "A and B stopped cleanly"
