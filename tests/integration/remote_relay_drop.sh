#!/bin/bash
# A slow host at the end of a chain under "overflow": "drop_oldest" (docs/CONFIG.md,
# "Choosing a relay topology", back-pressure): three daemons in network
# namespaces, a chain H0 > H1 > H2, H0's and H1's cables at 400 Mbit/s, H2's at
# 4 (a fifth of the stream, which lasts far longer than the rings and sockets on
# the way can hold). The relay H1 starts no message on H2's ring while
# that ring still has an earlier one to post; H2 is told of each skipped message
# as lost. So:
#  1. H1 is not held back by H2: its subscriber receives every message, none lost;
#  2. H1 counts the messages it skipped for H2 (relay_drops);
#  3. H2's subscriber receives, verified and in order, what H1 passed on, and is
#     told of every other message as lost: received + reported lost = published.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
. "$(dirname "$0")/netns_lib.sh"
netns_hosts 3 400mbit
netns_rate H2 4mbit || fail "cannot shape H2's cable to 4mbit"
ok "3 hosts in network namespaces on one switch: H0 and H1 at 400mbit each way, H2 at 4mbit"

# 40 messages a second of 64 KiB: 21 Mbit/s, within H1's link, not within H2's.
COUNT=300
DEFAULTS=', "pool_size": "32MiB", "max_message_size": "256KiB", "ring_size": "1MiB",
  "chunk_size": "64KiB", "resend_window": "16MiB", "overflow": "drop_oldest",
  "queue_depth": 256, "relay": "chain"'
netns_start 3 "$DEFAULTS"
# H1's subscriber waits for more than the stream holds: it is stopped once H2 is
# done, so that H1 stays in the chain (a relay that leaves moves the hosts below it).
BG_TIMEOUT=200 bg sub1 env RGAPS_SOCKET=${SOCK[H1]} "$RGAPS" sub relay --count 100000 --verify --timeout 150
for j in 0 2; do wait_until 20 knows_sub H$j H1 relay || fail "H$j never learned that H1 subscribes"; done
sleep 0.01 # a later millisecond: H1 joined first, so the chain is H0 > H1 > H2
BG_TIMEOUT=200 bg sub2 env RGAPS_SOCKET=${SOCK[H2]} "$RGAPS" sub relay --count $COUNT --verify --allow-gaps --timeout 150
for j in 0 1; do wait_until 20 knows_sub H$j H2 relay || fail "H$j never learned that H2 subscribes"; done
name_of() { echo "${ADDR[$1]}:${PORT[$1]}"; }
source_entry() { hstats "$1" relay | grep -o "{\"topic\":\"relay\",\"origin\":[^}]*}"; }

BG_TIMEOUT=200 bg pub env RGAPS_SOCKET=${SOCK[H0]} "$RGAPS" pub relay --count $COUNT --size 64KiB --rate 40
wait_ok pub
grep -q "^published $COUNT messages .* failures 0$" "$T/pub.out" || fail "publisher on H0: $(cat "$T/pub.out")"
source_entry H2 | grep -q "\"parent\":\"$(name_of H1)\"" || fail "H2's parent is not H1: $(source_entry H2)"

# ---- 3. H2: what it got, verified; the rest reported lost
wait_ok sub2
r=$(sub_field sub2 received) g=$(sub_field sub2 gaps) d=$(sub_field sub2 drops)
expect_sub sub2 mismatched=0 verified="$r"
[ $((r + g + d)) -eq $COUNT ] || fail "H2: received $r + reported lost $((g + d)) != $COUNT published: $(sub_line sub2)"
[ $((g + d)) -gt 0 ] || fail "H2 lost nothing on a link a fifth of the stream's rate: $(sub_line sub2)"
[ "$r" -gt 0 ] || fail "H2 received nothing: $(sub_line sub2)"
ok "H2 (4mbit): $r received in order, $((g + d)) reported lost, of $COUNT: none lost silently"

# ---- 2. H1 skipped them for H2
drops=$(source_entry H1 | grep -o '"relay_drops":[0-9]*' | tr -dc 0-9)
[ "${drops:-0}" -gt 0 ] || fail "H1 counts no message skipped for H2: $(source_entry H1)"
ok "H1 skipped $drops messages for H2 (relay_drops)"

# ---- 1. H1 lost nothing
wait_until 30 eval '! hstats H1 relay | grep -q "\"daemon\":false,[^}]*\"lag\":[1-9]"' ||
	fail "H1's subscriber did not take every message: $(hstats H1 relay)"
stop_bg sub1 INT 130
expect_sub sub1 received=$COUNT verified=$COUNT mismatched=0 gaps=0 drops=0
ok "H1 was not held back by H2: its subscriber received all $COUNT messages, verified, none lost"
for i in 0 1 2; do stop_host H$i; done
