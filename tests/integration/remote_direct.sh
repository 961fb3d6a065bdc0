#!/bin/bash
# Chunks received straight into their pool block (receiver.c, record_header):
# two daemons over tcp links of 4 streams, 256 KiB chunks. A publishes
# messages of 64 B to 3 MiB to a verifying subscriber on B that holds each a
# few ms in a 16 MiB pool, so that some first chunks find no room when their
# header comes and are copied from the ring instead, small last chunks of a
# message whose block came early are copied into it, and the rest land
# straight: every byte must arrive, whatever path it took. Then B's
# subscriber leaves while A goes on publishing 3 MiB messages: the ring goes
# with chunks on their way into loaned blocks, and every block comes back.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
N=${DIRECT_COUNT:-120}
host A 0; host B 1
DAEMON_EXTRA='"transport_options": { "tcp": { "streams": 4 } },'
for h in A B; do
	start_host $h ', "chunk_size": "256KiB", "ring_size": "4MiB", "pool_size": "16MiB",
	  "max_message_size": "4MiB", "block_timeout_ms": 60000'
done
wait_until 20 peer_up A B || fail "A-B session did not come up: $(tail -5 "$T/A.log")"

# machine HOST TRANSITION: B's receiver state machine counter (0 when absent)
machine() {
	local v
	v=$(on "$1" "$RGAPS" stats --json | flat | grep -o '"receiver":{[^}]*}' |
		grep -o "\"$2\":[0-9]*" | cut -d: -f2) || true
	echo "${v:-0}"
}

BG_TIMEOUT=300 bg sub env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub direct --count $N --verify \
	--hold-ms 3 --timeout 250
wait_until 20 knows_sub A B direct || fail "A never learned that B subscribes"
BG_TIMEOUT=300 bg pub env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub direct --count $N --size 64-3MiB
wait_ok pub
wait_ok sub
expect_sub sub received=$N verified=$N mismatched=0 gaps=0 drops=0
direct=$(machine B 'allocated->copied')
copied=$(machine B 'copying->copied')
landed=$(machine B 'receiving->landed')
[ "$direct" -gt 0 ] || fail "B: no chunk landed straight in its pool block (copied $copied)"
[ $((direct + copied)) -le "$landed" ] ||
	fail "B: $direct straight + $copied copied chunks, more than the $landed that landed"
ok "B verified $N messages of 64 B..3 MiB: $direct chunks landed straight in the pool, $copied were copied from the ring"

# The subscriber leaves mid-stream: A tears the ring down, B frees it with chunks still
# arriving into their blocks; every loaned block is given back.
BG_TIMEOUT=120 bg quitter env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub direct2 --count 5 --timeout 100
wait_until 20 knows_sub A B direct2 || fail "A never learned that B subscribes to direct2"
BG_TIMEOUT=120 bg pub2 env RGAPS_SOCKET=${SOCK[A]} "$RGAPS" pub direct2 --count 60 --size 3MiB \
	--rate 40
wait_ok quitter
wait_ok pub2
on B "$RGAPS" stats direct2 --json >/dev/null || fail "B lost its topic"
pool_zero() { test "$(RGAPS_SOCKET=${SOCK[B]} pool_used direct2)" = 0; }
wait_until 20 pool_zero || fail "B still holds $(RGAPS_SOCKET=${SOCK[B]} pool_used direct2) bytes of its pool"
s=$(hstats B)
[ "$(jnum "$s" hostile)" = 0 ] || fail "B saw A as hostile: $s"
ok "B's subscriber left mid-stream: its ring went, every loaned block came back (pool_used 0)"
