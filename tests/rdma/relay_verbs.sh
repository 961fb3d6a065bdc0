#!/bin/bash
# tests/rdma/relay_verbs.sh BUILD_DIR
#
# The relay path over verbs, INSIDE the Soft-RoCE VM (run by
# tests/rdma/rdma_suite.sh): three daemons as three hosts on rxe0 (A and C on
# $RXE_ADDR, B on $RXE_ADDR2, each its own ports), a topic with "relay": "chain"
# over "transport": "verbs", a verifying subscriber on B and two on C (B
# subscribes first, so the chain is A > B > C):
#  1. RELAY_COUNT (default 60) messages of 4 KiB to 8 MiB from A reach every
#     subscriber intact and in order, nothing lost;
#  2. the chain is what it should be: A's only ring of the topic goes to B, B's
#     source comes from A and B passes on every message to C, over verbs (the
#     records leave B's receive ring, registered with the device, for C's);
#     C's source comes from B. (Looked at once every message landed, while the
#     subscribers are still there: the rings go with them.)
# RELAY_TRANSPORT=tcp runs the same test over tcp (RXE_ADDR=RXE_ADDR2=127.0.0.1:
# a check of the test itself on a machine without RDMA).
. "$(dirname "$0")/daemons_lib.sh" "${1:-}" "${RELAY_TRANSPORT:-verbs}"

COUNT=${RELAY_COUNT:-60}
TOPIC=relay
TRANSPORT=$TR
# Small for the VM's 2 GiB (each daemon registers its pools and rings with the
# device); the keepalive is rgapsd's default: registering stalls a loop under TCG.
DEFAULTS=', "pool_size": "48MiB", "max_message_size": "8MiB", "ring_size": "16MiB",
  "chunk_size": "1MiB", "resend_window": "16MiB", "relay": "chain", "block_timeout_ms": 60000'
KEEPALIVE_MS=${KEEPALIVE_MS:-2000}
host A 0 "${RXE_ADDR:-169.254.77.1}"
host B 1 "${RXE_ADDR2:-169.254.77.2}"
host C 2 "${RXE_ADDR:-169.254.77.1}"
name_of() { echo "${ADDR[$1]}:${PORT[$1]}"; }
source_entry() { hstats "$1" $TOPIC | grep -o "{\"topic\":\"$TOPIC\",\"origin\":[^}]*}"; }
# out_rings HOST: "peer transport" of each of HOST's out rings of the topic
out_rings() {
	hstats "$1" $TOPIC | grep -o "{\"topic\":\"$TOPIC\",\"direction\":\"out\",\"peer\":\"[^\"]*\",\"transport\":\"[a-z]*\"" |
		sed 's/.*"peer":"\([^"]*\)","transport":"\([a-z]*\)"/\1 \2/'
}

for h in A B C; do start_host $h "$DEFAULTS"; done
for p in "A B" "A C" "B C"; do
	wait_until 30 peer_up $p || fail "the session $p did not come up"
done
ok "A ($(name_of A)), B ($(name_of B)) and C ($(name_of C)) up, topic '$TOPIC' over $TR"

# The subscribers stay after the stream (they wait for more than it holds), so that
# the tree is still there to look at once every message landed; then they stop.
BG_TIMEOUT=400 bg subB env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub $TOPIC --count 100000 --verify --timeout 360
for h in A C; do wait_until 30 knows_sub $h B $TOPIC || fail "$h never learned that B subscribes"; done
sleep 0.01
for i in 1 2; do
	BG_TIMEOUT=400 bg "subC$i" env RGAPS_SOCKET=${SOCK[C]} "$RGAPS" sub $TOPIC --count 100000 --verify --timeout 360
done
for h in A B; do wait_until 30 knows_sub $h C $TOPIC || fail "$h never learned that C subscribes"; done
BG_TIMEOUT=300 bg pub env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub $TOPIC --count "$COUNT" --size 4KiB-8MiB --rate 10
wait_ok pub
landed() { hstats "$1" $TOPIC | grep -o '"from_peers":{"messages":[0-9]*' | tr -dc 0-9; }
for h in B C; do
	wait_until 240 eval '[ "$(landed '$h')" -ge "$COUNT" ]' || fail "$h landed $(landed $h) of $COUNT messages"
done

# ---- 2. the chain
source_entry C | grep -q "\"parent\":\"$(name_of B)\"" || fail "C's parent is not B: $(source_entry C)"
source_entry B | grep -q "\"parent\":\"$(name_of A)\"" || fail "B's parent is not A: $(source_entry B)"
[ "$(out_rings A)" = "$(name_of B) $TR" ] || fail "A's rings of '$TOPIC': $(out_rings A)"
[ "$(out_rings B)" = "$(name_of C) $TR" ] || fail "B's rings of '$TOPIC': $(out_rings B)"
relayed=$(source_entry B | grep -o '"relayed":[0-9]*' | tr -dc 0-9)
[ "$relayed" = "$COUNT" ] || fail "B passed on $relayed of $COUNT messages: $(source_entry B)"
ok "chain A > B > C over $TR: A sends to B only, B passed on all $COUNT messages to C"

# ---- 1. every message everywhere, once its subscribers took it all
for s in subB subC1 subC2; do
	h=${s:3:1}
	wait_until 60 eval '! hstats '$h' $TOPIC | grep -q "\"daemon\":false,[^}]*\"lag\":[1-9]"' || true
	stop_bg $s INT 130
	expect_sub $s received="$COUNT" verified="$COUNT" mismatched=0 gaps=0 drops=0
done
ok "$COUNT messages of 4 KiB..8 MiB: B and C (2 subscribers) received every one, verified, in order ($(sub_line subC1 | sed 's/ bytes.*//'))"
for h in A B C; do stop_host $h; done
