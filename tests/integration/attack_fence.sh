#!/bin/bash
# A fence that names a file (docs/SECURITY.md, "The objects"): an unprivileged publisher
# publishes stream-ordered messages whose fence handles name an empty file of its own in
# /dev/shm, mode 0666, as the host backend's handles once named the segments readers were
# to map read-write; any reader that opened what a handle names would die of SIGBUS at its
# first read - another user's subscriber, and rgapsd's forwarder for a subscriber on
# another host. Two daemons on loopback (A, B), running as a user of their own; the attacker,
# an honest publisher and an honest subscriber (a third user) on A, and an honest subscriber
# on B. The host backend's
# fences now live in the publisher's region (a state word rgapsd made), their handles are
# all zeros and any other is refused: the attacker's messages are reported lost, by every
# reader, and nothing else happens. Throughout: both daemons live, both honest
# subscribers verify every honest message, and a fresh pair works afterwards.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/limits_lib.sh"
. "$(dirname "$0")/attack_lib.sh"
. "$(dirname "$0")/remote_lib.sh"
need_users
OBJECTS="$RGAPS_BUILD/tests/integration/itest-objects"
DUID=61060 AUID=61061 HUID=61062 # rgapsd's user, the attacker, the honest user
N=600

# rgapsd runs as a user of its own, as the packaged unit runs it: the key and the sockets'
# folder are that user's.
as $DUID $DUID
HOST_AS=("${AS[@]}")
mkdir -p "$T/run"
chown $DUID:$DUID "$T/run" "$KEY"
host A 0
host B 1
SOCK[A]=$T/run/A.sock SOCK[B]=$T/run/B.sock
start_host A ', "memory": "host", "pool_size": "4MiB", "max_message_size": "64KiB", "overflow": "block"'
start_host B ', "memory": "host", "pool_size": "4MiB", "max_message_size": "64KiB", "overflow": "block"'
for h in A B; do
	[ "$(stat -c %u "/proc/${DPID[$h]}")" = $DUID ] || fail "$h's rgapsd does not run as uid $DUID"
done
wait_until 20 peer_up A B || fail "A and B did not connect"
RGAPS_SOCKET=${SOCK[A]} as $AUID $AUID
ATTACKER=("${AS[@]}")
RGAPS_SOCKET=${SOCK[A]} as $HUID $HUID
HONEST_A=("${AS[@]}")
RGAPS_SOCKET=${SOCK[B]} as $HUID $HUID
HONEST_B=("${AS[@]}")
# The attacker removes its file as it ends; after a failure, whatever of its is left.
at_exit find /dev/shm -maxdepth 1 -user $AUID -name 'rgaps-hostfence-*' -delete

# The honest subscribers first, on A and on B; B's tells A, whose forwarder then reads every
# stream of the topic, the attacker's too. On B both come as one stream, whose messages
# carry no attributes: B's subscriber checks every byte it gets (rgaps sub --verify) and
# ends 5 s after the last; every honest message must be received or reported lost, and
# no message skipped unreported.
bg hBsub "${HONEST_B[@]}" "$RGAPS" sub fenced --count $((N + 40)) --verify --allow-gaps --timeout 5
wait_until 10 grep -q subscribed "$T/hBsub.out" || fail "hBsub: $(cat "$T/hBsub.out")"
wait_until 20 knows_sub A B fenced || fail "A did not hear of B's subscriber"
honest_pair hA fenced $N HONEST_A
bg atk "${ATTACKER[@]}" "$OBJECTS" fence fenced 40 3
wait_ok atk
ok "the attacker: $(grep '^objects:' "$T/atk.out" | sed 's/; staying.*//')"
honest_pair_verified hA $N
rc=0
wait "$(bg_pid hBsub)" || rc=$?
[ $rc = 0 ] || [ $rc = 4 ] || fail "B's subscriber exited $rc: $(tail -n 3 "$T/hBsub.out")"
expect_sub hBsub verified="$(sub_field hBsub received)" mismatched=0 gaps=0
[ $(($(sub_field hBsub received) + $(sub_field hBsub drops))) -ge $N ] ||
	fail "B's subscriber got, or was told of, fewer than the $N honest messages: $(sub_line hBsub)"
for h in A B; do kill -0 "${DPID[$h]}" || fail "rgapsd $h died"; done
# Refused as a handle (while the attacker is attached: it stays 3 s), or, for a reader that
# gets there after it left, lost without a look at the handle (its copies never said done).
lost="fence slot .* cannot be opened: Invalid argument\|its publisher left before its copy completed"
grep -q "$lost" "$T/hAsub.out" ||
	fail "the subscriber on A did not report the attacker's messages lost: $(tail -n 3 "$T/hAsub.out")"
grep -q "$lost" "$T/A.log" ||
	fail "A's forwarder did not report the attacker's messages lost: $(grep -i fence "$T/A.log" | head -n 3)"
ok "honest subscribers on A and B: $N of $N verified each ($(sub_line hBsub | cut -d' ' -f1-10)); the attacker's fences refused by its readers, on A and by A's forwarder"

# A fresh pair afterwards, across the hosts.
bg fsub "${HONEST_B[@]}" "$RGAPS" sub fenced --count 100 --verify --timeout 30
wait_until 10 grep -q subscribed "$T/fsub.out" || fail "fresh subscriber: $(cat "$T/fsub.out")"
"${HONEST_A[@]}" "$RGAPS" pub fenced --count 100 --size 4KiB >"$T/fpub.out" 2>&1 || fail "fresh publisher: $(cat "$T/fpub.out")"
wait_ok fsub
expect_sub fsub received=100 verified=100 mismatched=0 gaps=0 drops=0
ok "a fresh pair, A to B: 100 of 100 verified"
stop_host B
stop_host A
