#!/bin/bash
# Nothing lost silently when a peer stalls: B stops (SIGSTOP) for longer than 3
# keepalives while A streams to B and C, so A and B drop their session and
# connect again. Every message must reach each subscriber intact or be
# reported lost: received + reported lost = published, each received one in
# its place in A's stream (a stream that ends while B is away owes B a
# gap-only message).
#  1. drop_oldest, 3000 messages of 64 KiB at 1000/s, B stopped 2 s; C is the
#     control (its link never breaks).
#  2. block, 100 messages of 4 KiB..64 MiB in 4 MiB chunks at 20/s, B stopped
#     three times 1.2 s: chunks in flight when the session drops.
#
# It was a known bug until the resend window (losses of a flap told or sent
# again) and the entries' running count (a subscriber lapped past a relay's
# entries reports what they carried: docs/DECISIONS.md 73); docs/TESTING.md,
# "Known bugs", keeps the history.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
host A 0; host B 1; host C 2
KEEPALIVE_MS=${KEEPALIVE_MS:-200} # a stopped peer is noticed in 0.6 s: what this test is about
stall_b() { # TIMES SECONDS
	for _ in $(seq "$1"); do
		sleep 1
		kill -STOP "${DPID[B]}"
		sleep "$2"
		kill -CONT "${DPID[B]}"
	done
}
account() { # JOB N
	local rc=0
	wait "$(bg_pid "$1")" || rc=$?
	[ $rc = 0 ] || { grep '^rgaps sub:' "$T/$1.out" | head -n 3; fail "$1 exited $rc: $(sub_line "$1")"; }
	expect_accounted "$1" "$2"
}

# ---- 1. drop_oldest
N=3000
for h in A B C; do start_host $h ', "overflow": "drop_oldest"'; done
wait_until 20 peer_up A B && wait_until 20 peer_up A C || fail "the sessions did not come up"
for h in B C; do
	BG_TIMEOUT=120 bg "sub$h" env RGAPS_SOCKET=${SOCK[$h]} "$RGAPS" sub drop --count $N --verify --allow-gaps --timeout 60
done
wait_until 20 knows_sub A B drop && wait_until 20 knows_sub A C drop || fail "A did not learn the subscriptions"
BG_TIMEOUT=120 bg pub env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub drop --count $N --size 64KiB --rate 1000
stall_b 1 2
wait_ok pub
account subC $N
ok "C (control): $(sub_line subC)"
account subB $N
ok "B, stopped 2 s: $(sub_line subB)"
for h in A B C; do stop_host $h; done

# ---- 2. block, chunked messages
N=100
unset 'DPID[C]' 'PORT[C]' 'ADDR[C]' 'SOCK[C]'
for h in A B; do start_host $h ', "pool_size": "512MiB", "ring_size": "64MiB", "block_timeout_ms": 120000'; done
wait_until 20 peer_up A B || fail "the A-B session did not come up"
BG_TIMEOUT=120 bg sub2 env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub stall --count $N --verify --allow-gaps --timeout 60
wait_until 20 knows_sub A B stall || fail "A did not learn B's subscription"
BG_TIMEOUT=120 bg pub2 env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub stall --count $N --size 4KiB-64MiB --rate 20
stall_b 3 1.2
wait_ok pub2
grep -q "^published $N messages .* failures 0$" "$T/pub2.out" || fail "publisher on A: $(cat "$T/pub2.out")"
account sub2 $N
ok "B, stopped 3 times during chunked transfers: $(sub_line sub2)"
for h in A B; do stop_host $h; done
