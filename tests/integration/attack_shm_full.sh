#!/bin/bash
# A full /dev/shm, and memory that cannot be had (docs/SECURITY.md, "The objects"). rgapsd
# runs as its own user in a mount namespace of its own whose /dev/shm is a 1 MiB tmpfs
# that a hostile user fills to the last byte; topics whose pools are 2 MiB - more than that
# /dev/shm could ever hold - still come, because rgapsd's memory is memfds, which do not
# live there, and an honest pair of a third user verifies every message.
# Memory that cannot be had: every object is sized and allocated whole before anyone but
# its owner maps it, so a lack is a refused attach that names what failed, never a SIGBUS
# at the first touch. A real lack of memory cannot be made on a shared machine without the
# kernel's OOM killer acting first (a memory cgroup at its limit kills the allocating
# process), so rgapsd runs with a file size limit of 8 MiB (RLIMIT_FSIZE: a 16 MiB object
# cannot even be sized, EFBIG, and the attach takes the refusal path that ENOMEM takes),
# and a topic with a 16 MiB pool is asked for.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/limits_lib.sh"
. "$(dirname "$0")/attack_lib.sh"
need_users
command -v unshare >/dev/null && command -v prlimit >/dev/null || skip "unshare and prlimit (util-linux) are needed"

three_users 61020
mkdir -p "$T/topics.d"
echo '{ "pool_size": "16MiB", "max_message_size": "64KiB" }' >"$T/topics.d/big.json"
cat >"$T/rgapsd.json" <<JSON
{ "topics_dir": "$T/topics.d",
  "defaults": { "pool_size": "2MiB", "max_message_size": "64KiB", "overflow": "drop_oldest",
                "memory": "host" } }
JSON
# Its own /dev/shm (1 MiB), then the file size limit, then its user.
DAEMON_AS=(unshare -m --propagation private sh -c
	'mount -t tmpfs -o size=1m,mode=1777 shm /dev/shm && exec "$@"' sh
	prlimit --fsize=8388608:8388608 "${DAEMON_AS[@]}")
start_daemon -c "$T/rgapsd.json"
# in_ns CMD...: run CMD in rgapsd's mount namespace (its /dev/shm)
in_ns() { nsenter -t "$DAEMON_PID" -m "$@"; }
[ "$(in_ns df -B1 --output=size /dev/shm | tail -n 1 | tr -d " ")" -le 1048576 ] || fail "rgapsd's /dev/shm is not the 1 MiB tmpfs"

# The attacker fills rgapsd's /dev/shm.
in_ns "${ATTACKER[@]}" sh -c 'dd if=/dev/zero of=/dev/shm/fill bs=64k >/dev/null 2>&1; true'
[ "$(in_ns df -B1 --output=avail /dev/shm | tail -n 1 | tr -d " ")" = 0 ] || fail "/dev/shm is not full: $(in_ns df -h /dev/shm)"
ok "the attacker filled rgapsd's /dev/shm: $(in_ns df -h --output=used,size /dev/shm | tail -n 1)"

# Pairs on 2 MiB pools, and new topics, while /dev/shm stays full.
for t in one two; do honest_pair "h$t" $t 500; done
for i in $(seq 1 10); do
	"${ATTACKER[@]}" "$RGAPS" sub "new$i" --count 0 >/dev/null || fail "topic new$i was refused with /dev/shm full"
done
for t in one two; do honest_pair_verified "h$t" 500; done
ok "with /dev/shm full: 2 honest pairs verified 500 of 500 each on 2 MiB pools, 10 new topics made"

# A pool that cannot be had: refused at attach, with the reason; rgapsd serves on.
"${ATTACKER[@]}" "$RGAPS" pub big --count 1 --size 1KiB >"$T/big.out" 2>&1 && fail "a 16 MiB pool was made beyond the 8 MiB limit"
grep -q "out of memory" "$T/big.out" || fail "the client is not told: $(cat "$T/big.out")"
grep -q "no_memory: topic 'big': memory 'host' cannot create a 16MiB pool .*File too large" "$T/rgapsd.log" &&
	grep -q "cannot allocate 16MiB of shared memory: larger than this process's file size limit" "$T/rgapsd.log" ||
	fail "rgapsd's log does not say what failed and why: $(grep -i pool "$T/rgapsd.log" | tail -n 3)"
kill -0 "$DAEMON_PID" || fail "rgapsd died"
ok "a 16 MiB pool beyond the limit: $(grep -o 'cannot allocate 16MiB.*' "$T/rgapsd.log" | head -n 1)"
"${ATTACKER[@]}" "$RGAPS" sub big --count 0 >/dev/null || fail "a subscriber of 'big' (no pool) was refused"

# A fresh pair afterwards.
honest_pair fresh one 200
honest_pair_verified fresh 200
ok "a fresh honest pair: 200 of 200 verified"
stop_daemon
ok "rgapsd stopped cleanly"
