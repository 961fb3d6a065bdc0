#!/bin/bash
# A daemon whose own loop stands still does not blame its peer, and nothing is
# lost. A publishes to a subscriber on B while A's whole process is
#  1. stopped (SIGSTOP) for 5 s: longer than A's own dead interval (3 x its
#     keepalive of 1 s), shorter than B's keepalive (10 s), so B hears A in
#     time and A, back, must not count its own standstill as B's silence;
#  2. then held to 2 ms of CPU a second by a throttled cgroup (cpu.max, or
#     cpu.cfs_* on cgroup v1) for 4 s: most of each second without a CPU.
# Neither session drops, B's subscriber receives every message intact and none
# is reported lost, and A counts the deadlines its own standstill moved.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
COUNT=400
host A 0; host B 1
KEEPALIVE_MS=1000 start_host A ', "block_timeout_ms": 120000'
KEEPALIVE_MS=10000 start_host B ', "block_timeout_ms": 120000'
wait_until 20 peer_up A B || fail "A-B session did not come up: $(tail -5 "$T/A.log")"
BG_TIMEOUT=150 bg sub env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub starved --count $COUNT --verify --timeout 120
wait_until 20 knows_sub A B starved || fail "A never learned that B subscribes"
BG_TIMEOUT=150 bg pub env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub starved --count $COUNT --size 64KiB --rate 40
landed() { # B landed at least N messages from A
	local n
	n=$(hstats B starved | grep -o '"from_peers":{"messages":[0-9]*' | tr -dc 0-9) || true
	[ "${n:-0}" -ge "$1" ]
}
wait_until 30 landed 20 || fail "B landed fewer than 20 messages: $(tail -3 "$T/B.log")"

# moved: how many deadlines A moved for its own standstill, and how long it stood still
moved() {
	local s
	s=$(hstats A)
	echo "$(jnum "$s" stall_excused) deadlines moved, $(jnum "$s" stalled_ms | cut -d. -f1) ms still"
}

# ---- 1. stopped for 5 s
resume_a() { kill -CONT "${DPID[A]}" 2>/dev/null || true; }
at_exit resume_a # never leave it stopped, whatever fails
kill -STOP "${DPID[A]}"
sleep 5
kill -CONT "${DPID[A]}"
ok "A stopped for 5 s (its own dead interval: 3 s; B's: 30 s); A: $(moved)"

# ---- 2. held to 2 ms of CPU a second for 4 s
CG=
cg_throttle() { # PID: into a cgroup of its own with 2 ms of CPU per 1000 ms
	local root=/sys/fs/cgroup
	if [ -f $root/cgroup.controllers ]; then # v2
		grep -qw cpu $root/cgroup.controllers || return 1
		grep -qw cpu $root/cgroup.subtree_control || echo +cpu >$root/cgroup.subtree_control || return 1
		CG=$root/rgaps-starved-$$
		mkdir "$CG" && echo "2000 1000000" >"$CG/cpu.max" || return 1
	elif [ -d $root/cpu ]; then # v1
		CG=$root/cpu/rgaps-starved-$$
		mkdir "$CG" && echo 1000000 >"$CG/cpu.cfs_period_us" &&
			echo 2000 >"$CG/cpu.cfs_quota_us" || return 1
	else
		return 1
	fi
	echo "$1" >"$CG/cgroup.procs"
}
cg_release() { # PID: back where the test runs, then the cgroup goes
	local home
	[ -n "$CG" ] || return 0
	home=$(dirname "$CG")
	[ -f "$home/cgroup.procs" ] && echo "$1" >"$home/cgroup.procs" 2>/dev/null
	rmdir "$CG" 2>/dev/null || true
}
cg_remove() { rmdir "/sys/fs/cgroup/rgaps-starved-$$" "/sys/fs/cgroup/cpu/rgaps-starved-$$" 2>/dev/null || true; }
at_exit cg_remove
if cg_throttle "${DPID[A]}" 2>"$T/cg.err"; then
	sleep 4
	cg_release "${DPID[A]}"
	ok "A held to 2 ms of CPU a second for 4 s ($CG); A: $(moved)"
else
	cg_release "${DPID[A]}"
	skip_part "no CPU-throttled cgroup here ($(head -c 200 "$T/cg.err")): the stop alone starves A"
fi

wait_ok pub
grep -q "^published $COUNT messages .* failures 0$" "$T/pub.out" || fail "publisher: $(cat "$T/pub.out")"
wait_ok sub
expect_sub sub received=$COUNT verified=$COUNT mismatched=0 gaps=0 drops=0
ok "B's subscriber: all $COUNT received intact, none lost"

for h in A B; do
	o=B; [ $h = B ] && o=A
	grep -q "peer ${ADDR[$o]}:${PORT[$o]} down" "$T/$h.log" &&
		fail "$h dropped its session with $o: $(grep -m1 "down" "$T/$h.log")"
	s=$(hstats $h)
	n=$(jnum "$(grep -o "\"name\":\"${ADDR[$o]}:${PORT[$o]}\",[^{]*" <<<"$s")" sessions)
	[ "$n" = 1 ] || fail "$h counts $n sessions with $o (the first one dropped)"
done
s=$(hstats A)
[ "$(jnum "$s" stall_excused)" -ge 1 ] ||
	fail "A counts no deadline moved by its own standstill: $(grep -o '"loop":{[^}]*}' <<<"$s")"
ok "no session dropped; A: $(moved)"
for h in A B; do stop_host $h; done
