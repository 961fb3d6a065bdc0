#!/bin/bash
# Membership in etcd: 12 daemons with no "peers" key find each other through
# etcd (one member, or a cluster of ETCD_MEMBERS) and deliver verified messages
# between every pair: each has a subscriber and a publisher of topic "mesh", so
# each subscriber receives every publisher's messages, 11 of them from other
# hosts. Each daemon's record is in etcd under the prefix, with its data port;
# of each pair only one dialed (no duplicate connection), and each daemon's
# membership is live with its lease held.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"
NHOSTS=${NHOSTS:-12}
N=${MESH_COUNT:-10}
HOSTS=()
for ((i = 0; i < NHOSTS; i++)); do host "H$i" $i; HOSTS+=("H$i"); done
start_etcd "${ETCD_MEMBERS:-1}"
SMALL=', "pool_size": "4MiB", "max_message_size": "64KiB", "ring_size": "1MiB", "chunk_size": "256KiB", "resend_window": "1MiB"'
for h in "${HOSTS[@]}"; do NO_WAIT=1 start_host "$h" "$SMALL"; done
for h in "${HOSTS[@]}"; do
	wait_until 20 host_answers "$h" || fail "$h did not come up: $(tail -n 5 "$T/$h.log")"
done
wait_until 60 all_live $((NHOSTS - 1)) "${HOSTS[@]}" ||
	fail "the daemons did not all find each other: $(for h in "${HOSTS[@]}"; do echo "$h: $(ms_json $h)"; done)"
ok "$NHOSTS daemons found each other through $ETCD_N etcd member(s), every session up"

# Their records: one key each under the prefix, naming the daemon and its tcp data port.
ctl get --prefix "$ETCD_PREFIX/hosts/" --keys-only | grep -c . > "$T/nkeys" || true
[ "$(cat "$T/nkeys")" = "$NHOSTS" ] || fail "$(cat "$T/nkeys") keys under $ETCD_PREFIX/hosts/, expected $NHOSTS"
rec=$(ctl get --print-value-only "$ETCD_PREFIX/hosts/${ADDR[H0]}:${PORT[H0]}")
grep -q "\"name\":\"${ADDR[H0]}:${PORT[H0]}\"" <<<"$rec" && grep -q "\"transports\":\[{\"name\":\"tcp\",\"port\":$((PORT[H0] + 1))}" <<<"$rec" ||
	fail "H0's record does not name it and its tcp data port: $rec"
# Of each pair only the smaller name dialed: nobody closed a duplicate.
for h in "${HOSTS[@]}"; do
	s=$(hstats "$h")
	[ "$(jnum "$s" duplicates_closed 2>/dev/null || echo 0)" = 0 ] || fail "$h closed duplicate connections"
done
ok "$NHOSTS records in etcd; one connection per pair"

for h in "${HOSTS[@]}"; do
	bg "sub$h" env RGAPS_SOCKET=${SOCK[$h]} "$RGAPS" sub mesh --count $((N * NHOSTS)) --verify --timeout 60
done
wait_until 60 subs_known mesh $((NHOSTS - 1)) "${HOSTS[@]}" || fail "the subscriptions did not reach every daemon"
for h in "${HOSTS[@]}"; do
	bg "pub$h" env RGAPS_SOCKET=${SOCK[$h]} "$RGAPS" pub mesh --count $N --size 1KiB-8KiB --rate 200
done
for h in "${HOSTS[@]}"; do wait_ok "pub$h"; done
for h in "${HOSTS[@]}"; do
	wait_ok "sub$h"
	expect_sub "sub$h" received=$((N * NHOSTS)) verified=$((N * NHOSTS)) mismatched=0 gaps=0 drops=0
done
ok "every subscriber verified $((N * NHOSTS)) messages from all $NHOSTS publishers ($((NHOSTS * (NHOSTS - 1))) host pairs)"
for h in "${HOSTS[@]}"; do
	ms_json "$h" | grep -q '"lease":"held"' || fail "$h: $(ms_json "$h")"
done
[ -n "${MESH_GOES_ON:-}" ] || etcd_finish "${HOSTS[@]}"
