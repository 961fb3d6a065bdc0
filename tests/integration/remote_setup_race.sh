#!/bin/bash
# The topic set-up and the data link it names travel on two sockets, with no
# order between them: the sender may ask for a ring before the receiver has
# accepted the data link. Host B (the subscriber's) is made to handle each
# accepted data link 1.5 s late (RGAPSD_FAULT=late_accept), so A's set-up
# surely arrives first. B must hold it until the link is up, answer it then,
# and every message must reach B's subscriber; nothing is refused.
#
# The race needs A to be the end that connects (B then accepts the data link).
# B starts first and tries A in vain; A, started next, normally connects before
# B's next try. When B wins anyway, the attempt is repeated (at most 3 times),
# and if the race was never provoked the test skips, saying so.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
host A 0; host B 1
COUNT=200

attempt() { # N: one run; sets provoked=1 when the race was provoked (and checked)
	local n=$1 d r
	RGAPSD_FAULT=late_accept:1500 start_host B
	grep -q "RGAPSD_FAULT=late_accept" "$T/B.log" || fail "B did not take the fault"
	bg "sub$n" env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub "race$n" --count $COUNT --verify --timeout 30
	# B has tried A in vain by now and waits out its back-off: A, started next,
	# connects first, so B is the end that accepts the data link.
	sleep 1
	start_host A
	wait_until 20 knows_sub A B "race$n" || fail "A did not learn B's subscription"
	# The attach waits for B's ring (at most 5 s), which B answers when its link is up.
	BG_TIMEOUT=60 bg "pub$n" env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub "race$n" --count $COUNT --size 64KiB \
		--rate 200
	wait_ok "pub$n"
	wait_ok "sub$n"
	expect_sub "sub$n" received=$COUNT verified=$COUNT mismatched=0 gaps=0 drops=0
	ok "attempt $n: B's subscriber verified all $COUNT messages: $(sub_line "sub$n")"
	r=$(jnum "$(hstats A)" setup_refusals)
	[ "$r" = 0 ] || fail "A saw $r set-up refusals"
	d=$(jnum "$(hstats B)" setups_deferred)
	provoked=1
	grep -q "peer 127.0.0.1:${PORT[B]} up (we connected)" "$T/A.log" || provoked=0
	for h in A B; do stop_host $h; done
	for h in A B; do cat "$T/$h.log" >> "$T/$h.all.log"; : > "$T/$h.log"; done
	[ $provoked = 1 ] || { echo "note: attempt $n: B connected first: the race was not provoked"; return 0; }
	[ "$d" -ge 1 ] || fail "B never held a set-up for its data link (setups_deferred $d)"
	ok "attempt $n: A connected; B held $d set-up(s) until the data link was up; A saw no set-up refused"
}
# (not `attempt && ...`: set -e does not apply inside a function called as a condition)
for n in 1 2 3; do
	attempt $n
	[ $provoked = 0 ] || exit 0
done
skip "the set-up race was not provoked in 3 attempts (B connected first each time; delivery was checked)"
