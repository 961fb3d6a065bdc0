#!/bin/bash
# Relay trees (docs/ARCHITECTURE.md section 1, "Relays"): six daemons in network
# namespaces on one switch, every link shaped with tc, a verifying subscriber on
# every host. A publisher on H0 sends one topic along a chain and another along a
# binary tree, at once:
#  1. every subscriber, on every host, receives every message of both, byte-exact
#     and in order, nothing lost; each host lands each message once;
#  2. the trees are what the order says (hosts by when they subscribed, then by
#     name): in the chain H0 sends to one host only and every host but the last
#     passes each message on to one more; in the tree H0 and two more pass on to
#     two each; each relay passed on every message;
#  3. a seventh host joins the chain in the middle of the stream (a subscriber
#     attaches there), receives from then on in order, and leaves again: the six
#     others see none of it, nothing lost, nobody's parent changed.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
. "$(dirname "$0")/netns_lib.sh"
RATE=${RELAY_RATE:-400mbit}
netns_hosts 7 "$RATE"
ok "7 hosts in network namespaces on one switch, every link shaped to $RATE each way"

mkdir -p "$T/topics.d"
for t in chain:chain tree:tree:2; do
	cat >"$T/topics.d/${t%%:*}.json" <<JSON
{ "name": "${t%%:*}", "relay": "${t#*:}" }
JSON
done
# Chunks of 64 KiB: a message of up to 1 MiB passes each relay chunk by chunk.
DAEMON_EXTRA="\"topics_dir\": \"$T/topics.d\","
DEFAULTS=', "pool_size": "32MiB", "max_message_size": "1MiB", "ring_size": "4MiB",
  "chunk_size": "64KiB", "resend_window": "16MiB", "block_timeout_ms": 60000'
for i in 0 1 2 3 4 5 6; do start_host H$i "$DEFAULTS"; done
for i in 1 2 3 4 5 6; do
	wait_until 20 peer_up H0 H$i || fail "H0-H$i session did not come up"
done
ok "7 daemons up, each in its own namespace"

# Subscribers join one host at a time, so that the order of the trees is known:
# H1, H2, ... H5 (H0 publishes; its own subscriber is not in the tree, it is the root).
# They wait for more than the stream holds: they are stopped once every message
# landed, so that no host leaves a tree while the stream still runs (a leaving
# host moves the hosts below it: remote_relay_faults' business).
for i in 0 1 2 3 4 5; do
	for t in chain tree; do
		BG_TIMEOUT=400 bg "sub$t$i" env RGAPS_SOCKET=${SOCK[H$i]} "$RGAPS" sub $t --count 1000000 --verify --timeout 360
	done
	[ $i = 0 ] && continue
	for j in 0 1 2 3 4 5; do
		[ $j = $i ] && continue
		wait_until 20 knows_sub H$j H$i chain || fail "H$j never learned that H$i subscribes"
		wait_until 20 knows_sub H$j H$i tree || fail "H$j never learned that H$i subscribes"
	done
	sleep 0.01 # a later millisecond: the order of joining is the order of the index
done
ok "subscribers on H0 .. H5 (in that order), every host knows of every one"

# Both topics stream until stopped, 40 messages a second each. Under the sanitizers
# (REMOTE_COUNT set: their smaller cross-host volume) messages are a quarter of the
# size, still several chunks each: 12 verifying subscribers check every byte.
SIZES=64KiB-1MiB
[ -z "${REMOTE_COUNT:-}" ] || SIZES=16KiB-256KiB
for t in chain tree; do
	BG_TIMEOUT=400 bg pub$t env RGAPS_SOCKET=${SOCK[H0]} "$RGAPS" pub $t --count 1000000 --size $SIZES --rate 40
done

landed() { hstats "$1" "$2" | grep -o '"from_peers":{"messages":[0-9]*' | tr -dc 0-9; }
wait_until 60 eval '[ "$(landed H5 chain)" -ge 20 ] && [ "$(landed H5 tree)" -ge 20 ]' ||
	fail "the topics did not reach H5 ($(landed H5 chain) and $(landed H5 tree) messages)"

# ---- 2. the trees, mid-stream: each host's parent as its stats say
source_entry() { hstats "$1" "$2" | grep -o "{\"topic\":\"$2\",\"origin\":[^}]*}"; }
name_of() { echo "${ADDR[$1]}:${PORT[$1]}"; }
parent_is() { # HOST TOPIC PARENT
	source_entry "$1" "$2" | grep -q "\"parent\":\"$(name_of "$3")\"" ||
		fail "$1's parent in $2 is not $3: $(source_entry "$1" "$2")"
}
for i in 1 2 3 4 5; do parent_is H$i chain H$((i - 1)); done
for i in 1 2 3 4 5; do parent_is H$i tree H$(((i - 1) / 2)); done
# The origin's own rings: the chain's to H1 only, the tree's to H1 and H2 only.
out_peers() { hstats H0 "$1" | grep -o "{\"topic\":\"$1\",\"direction\":\"out\",\"peer\":\"[^\"]*\"" |
	sed 's/.*"peer":"//; s/"$//' | sort | tr '\n' ' '; }
[ "$(out_peers chain)" = "$(name_of H1) " ] || fail "H0 sends the chain to: $(out_peers chain)"
[ "$(out_peers tree)" = "$(printf '%s\n' "$(name_of H1)" "$(name_of H2)" | sort | tr '\n' ' ')" ] ||
	fail "H0 sends the tree to: $(out_peers tree)"
ok "chain H0 > H1 > H2 > H3 > H4 > H5 and tree H0 > {H1 > {H3, H4}, H2 > {H5}}; H0 sends to its children only"

# ---- 3. mid-stream, H6 joins the chain (a subscriber for 15 messages) and leaves
BG_TIMEOUT=100 bg late env RGAPS_SOCKET=${SOCK[H6]} "$RGAPS" sub chain --count 15 --verify --timeout 60
wait_ok late
expect_sub late received=15 verified=15 mismatched=0 gaps=0 drops=0
ok "H6 joined the chain mid-stream, received 15 messages in order ($(sub_line late)), and left"
# Its join moved nobody (H5's parent is still H4), and its ring went with its subscriber.
parent_is H5 chain H4
wait_until 20 eval '! source_entry H5 chain | grep -q "\"children\":\[\"$(name_of H6)\"\]"' ||
	fail "H5 still passes the chain on to H6, which left: $(source_entry H5 chain)"
ok "H6 joined at the end of the chain and left it; nobody else moved"

# ---- 1. the streams end: every message on every host, once, in order
declare -A N
for t in chain tree; do
	stop_bg pub$t INT 130
	N[$t]=$(grep -o '^published [0-9]*' "$T/pub$t.out" | tr -dc 0-9)
	[ -n "${N[$t]}" ] || fail "pub $t said nothing: $(cat "$T/pub$t.out")"
done
# taken_all HOST TOPIC: HOST landed every message of TOPIC and its subscriber took them
taken_all() {
	local s
	s=$(hstats "$1" "$2")
	[ "$(grep -o '"from_peers":{"messages":[0-9]*' <<<"$s" | tr -dc 0-9)" -ge "${N[$2]}" ] &&
		! grep -q '"daemon":false,[^}]*"lag":[1-9]' <<<"$s"
}
for i in 1 2 3 4 5; do
	for t in chain tree; do
		wait_until 120 taken_all H$i $t || fail "H$i did not land all ${N[$t]} messages of $t: $(landed H$i $t)"
	done
done
# Each relay passed on every message; the leaves of the tree none (before anyone leaves).
relayed() { source_entry "$1" "$2" | grep -o '"relayed":[0-9]*' | tr -dc 0-9; }
for i in 1 2 3 4; do
	[ "$(relayed H$i chain)" = "${N[chain]}" ] ||
		fail "H$i passed on $(relayed H$i chain) of ${N[chain]} chain messages"
done
for i in 1 2; do
	[ "$(relayed H$i tree)" = "${N[tree]}" ] ||
		fail "H$i passed on $(relayed H$i tree) of ${N[tree]} tree messages"
done
for i in 3 4 5; do
	[ "$(relayed H$i tree)" = 0 ] || fail "H$i, a leaf of the tree, passed on $(relayed H$i tree) messages"
done
ok "every relay passed on all ${N[chain]} and ${N[tree]} messages, the leaves none"
for i in 0 1 2 3 4 5; do
	for t in chain tree; do
		stop_bg "sub$t$i" INT 130
		expect_sub "sub$t$i" received="${N[$t]}" verified="${N[$t]}" mismatched=0 gaps=0 drops=0
	done
done
ok "12 subscribers on 6 hosts received all ${N[chain]} and ${N[tree]} messages, verified, in order"
# ... and each host landed each message once.
for i in 1 2 3 4 5; do
	for t in chain tree; do
		[ "$(landed H$i $t)" = "${N[$t]}" ] || fail "H$i landed $(landed H$i $t) messages of $t, published ${N[$t]}"
	done
done
ok "H1 .. H5 each landed every message of both topics exactly once"
for i in 0 1 2 3 4 5 6; do stop_host H$i; done
