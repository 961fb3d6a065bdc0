#!/bin/bash
# rgapsd's multi-GPU logic and the stream-order API, on emulated devices (the
# host memory plugin with RGAPS_HOST_DEVICES, docs/GPU.md "Testing without a
# GPU"), so that they run on every machine; tests/gpu/gpu_multi.sh runs the
# same on real GPUs. Three emulated GPUs: 0 and 1 linked by "NVLink", 2 with no
# peer access to 0 (RGAPS_HOST_LINKS), pools on GPU 0.
#  1. gpu_fanout auto: subscribers on GPUs 0, 1 and 2 verify every byte; 0 reads
#     the pool, 1 by peer access, 2 a replica; one copy per message to GPU 2.
#  2. gpu_fanout replicate: two subscribers on GPU 1, one copy per message (not
#     one per subscriber), from loans written on GPU 1.
#  3. gpu_fanout peer: GPU 2 is refused at attach, with the reason in the log;
#     devices [0, 1]: GPU 2 refused; GPU 7 (no such GPU) refused.
#  4. SIGKILL of a subscriber holding replica messages: every pool back to idle,
#     the replicator stops once its GPU has no subscriber left.
#  5. Stream order with slow emulated fences: push_async and commit_async, read
#     by take (waits on the host) and take_async + release_async, on every path;
#     a publisher and a subscriber in one process (the subscriber borrows the
#     publisher's fences: CUDA does not open an IPC handle in its own process).
#  6. A publisher killed with copies in flight: its messages reported lost.
#  7. Chained replication over four emulated GPUs, GPU 3 reaching only GPU 2:
#     the replicas are fed 0 -> 1 -> 2 -> 3 (GPU 3 over its one link, not
#     through host memory), each fed once per message; a GPU without
#     subscribers is left out of the chain (GPU 3 is then fed from 1 through
#     host memory) and joins it when a subscriber comes, missing nothing
#     published after its attach; a replica whose reader stalls loses messages
#     under "block" (counted, reported as gaps) while the GPU after it in the
#     chain gets every one; under "drop_oldest" nothing waits for it.
#  8. GPU identity: clients that each see exactly one GPU (CUDA_VISIBLE_DEVICES,
#     through a stand-in CUDA driver, tests/gpu/fakedrv) are matched by PCI
#     address: one on GPU 2 that cannot see the pools' GPU 0 reads the replica
#     on its own GPU under auto (where a client seeing both reads in place),
#     and is refused under peer, as is a publisher that cannot see GPU 0; the
#     refusals name GPU 0 by its PCI address and CUDA_VISIBLE_DEVICES.
# Run: RGAPS_BUILD=<build dir> bash tests/gpu/multigpu_host.sh
. "$(dirname "$0")/../integration/lib.sh"
CLIENT="$RGAPS_BUILD/tests/gpu/gpu-host-client"
[ -x "$CLIENT" ] || fail "$CLIENT not built"
flat() { tr -d ' \t\n'; }
# gpu_field TOPIC DEVICE FIELD: a field of the topic's per-GPU stats entry
gpu_field() {
	"$RGAPS" stats "$1" --json | flat | grep -o "\"device\":$2,\"role\"[^}]*" |
		grep -o "\"$3\":[^,]*" | head -1 | cut -d: -f2 | tr -d '"'
}
gpu_is() { test "$(gpu_field "$1" "$2" "$3")" = "$4"; }

export RGAPS_HOST_DEVICES=3 RGAPS_HOST_LINKS="nvlink;2-0=none;0-2=none"
mkdir -p "$T/topics.d"
echo '{ "topics_dir": "topics.d" }' >"$T/rgapsd.json"
for t in auto:auto rep:replicate peer:peer; do
	printf '{ "memory": "host", "pool_size": "16MiB", "max_message_size": "1MiB", "gpu_fanout": "%s" }\n' \
		"${t#*:}" >"$T/topics.d/h${t%%:*}.json"
done
printf '{ "memory": "host", "devices": [0, 1] }\n' >"$T/topics.d/hdev.json"
printf '{ "memory": "host", "pool_size": "16MiB", "max_message_size": "1MiB", "max_holds": 8 }\n' \
	>"$T/topics.d/hkill.json"
start_daemon -c "$T/rgapsd.json"
N=200

# 1. auto: pool, peer, replica
for g in 0 1 2; do
	path=(local peer replica)
	bg "a$g" "$CLIENT" sub hauto $N --device $g --path "${path[$g]}"
done
# (a topic's "subscribers" count rgapsd's own too: GPU 2's replicator is one)
wait_until 10 subs_are hauto 4 || fail "3 subscribers did not attach to hauto: $(cat "$T"/a*.out)"
"$CLIENT" pub hauto $N 64KiB --device 0 >"$T/apub.out" 2>&1 || fail "pub: $(cat "$T/apub.out")"
for g in 0 1 2; do
	wait_ok "a$g"
	grep -q "received $N verified $N mismatched 0 gaps 0" "$T/a$g.out" || fail "a$g: $(cat "$T/a$g.out")"
done
gpu_is hauto 0 role pool && gpu_is hauto 1 role peer && gpu_is hauto 2 role replica ||
	fail "hauto roles: $("$RGAPS" stats hauto --json | flat | grep -o '"gpus":\[[^]]*')"
gpu_is hauto 2 copies $N || fail "GPU 2 got $(gpu_field hauto 2 copies) replica copies, expected $N"
gpu_is hauto 2 bytes $((N * 65536)) || fail "GPU 2 replica bytes: $(gpu_field hauto 2 bytes)"
gpu_is hauto 1 copies 0 || fail "GPU 1 (peer) got copies"
grep -q "topic 'hauto': GPU 1 -> peer: reads the pools on GPU 0 in place over NVLink" "$T/rgapsd.log" ||
	fail "no logged reason for GPU 1"
grep -q "topic 'hauto': GPU 2 -> replica: a replica copied once from GPU 0 through host memory (auto: no peer access" \
	"$T/rgapsd.log" || fail "no logged reason for GPU 2"
grep "topic 'hauto': GPU\|replicator for GPU" "$T/rgapsd.log" | sed 's/^/   /'
ok "auto: GPUs 0 (pool), 1 (peer), 2 (replica) verified $N messages each; $N copies to GPU 2"
# The tools show it: rgaps topics, rgaps stats, rgaps-top
"$RGAPS" topics | grep -q "^hauto .* 0:pool 1:peer 2:replica$" || fail "rgaps topics: $("$RGAPS" topics)"
"$RGAPS" stats hauto | grep -q "GPU 2: replica, 0 subs, 0 pubs, $N copies ($((N * 65536)) bytes), 0 lost: a replica" ||
	fail "rgaps stats: $("$RGAPS" stats hauto | grep GPU)"
if [ -x "$RGAPS_BUILD/tools/rgaps-top" ]; then
	timeout -k 2 20 "$RGAPS_BUILD/tools/rgaps-top" --batch 1 >"$T/top.out" 2>&1 || fail "rgaps-top: $(cat "$T/top.out")"
	grep -q "^GPUS (pool" "$T/top.out" && grep -qE "hauto +2 +replica +no peer access +0 +0 +$N " "$T/top.out" ||
		fail "rgaps-top shows no GPU table: $(grep -A6 GPUS "$T/top.out")"
fi
ok "rgaps topics, rgaps stats and rgaps-top show each GPU's role and its copies"

# 2. replicate: one copy per message whatever the number of subscribers on the GPU
for i in 1 2; do bg "r$i" "$CLIENT" sub hrep $N --device 1 --path replica; done
bg r0 "$CLIENT" sub hrep $N --device 0 --path local
wait_until 10 subs_are hrep 4 || fail "subscribers did not attach to hrep"
"$CLIENT" pub hrep $N 1MiB --device 1 --loan >"$T/rpub.out" 2>&1 || fail "pub: $(cat "$T/rpub.out")"
for i in 0 1 2; do
	wait_ok "r$i"
	grep -q "received $N verified $N mismatched 0 gaps 0" "$T/r$i.out" || fail "r$i: $(cat "$T/r$i.out")"
done
gpu_is hrep 1 copies $N || fail "GPU 1 got $(gpu_field hrep 1 copies) copies for 2 subscribers, expected $N"
gpu_is hrep 1 copy peer || fail "GPU 1 replicas should be copied GPU to GPU"
"$RGAPS" stats hrep --json | flat | grep -q '"replica_for":1' || fail "no replica stream in stats"
ok "replicate: 2 subscribers on GPU 1 and 1 on GPU 0 verified $N messages (1 MiB, loans from GPU 1); $N copies to GPU 1"

# 3. refusals: peer without peer access, a GPU outside devices, a GPU that does not exist
"$CLIENT" attach sub hpeer --device 1 >/dev/null || fail "GPU 1 refused on hpeer"
out=$("$CLIENT" attach sub hpeer --device 2) && fail "GPU 2 attached to hpeer (no peer access)"
echo "$out" | grep -q "refused: No such device" || fail "GPU 2 on hpeer: $out"
grep -q "no_device: topic 'hpeer': GPU 2 has no peer access to GPU 0, where the topic's pools live, and gpu_fanout is \"peer\"" \
	"$T/rgapsd.log" || fail "no reason logged for GPU 2 on hpeer"
out=$("$CLIENT" attach pub hdev --device 2) && fail "GPU 2 attached to hdev"
grep -q "topic 'hdev': the topic serves GPUs 0, 1 only (its \"devices\"); this client is on GPU 2" \
	"$T/rgapsd.log" || fail "no reason logged for hdev"
out=$("$CLIENT" attach sub hauto --device 7) && fail "GPU 7 attached"
grep -q "GPU 7 does not exist here: rgapsd sees 3 GPUs" "$T/rgapsd.log" || fail "no reason for GPU 7"
grep -E "no_device" "$T/rgapsd.log" | sed 's/^.*no_device/   no_device/'
ok "refusals at attach: no peer access under peer, outside devices, no such GPU (ENODEV, reason logged)"

# 4. SIGKILL of a replica reader holding messages
BG_TIMEOUT=60 bg holder "$CLIENT" sub hkill 0 --device 2 --hold 8 --timeout 50
bg steady "$CLIENT" sub hkill 40 --device 2
BG_TIMEOUT=60 bg keep "$CLIENT" sub hkill 1000 --device 2 --timeout 50 # keeps the replicator up
wait_until 10 subs_are hkill 4 || fail "subscribers did not attach to hkill"
"$CLIENT" pub hkill 40 256KiB --device 0 >"$T/kpub.out" 2>&1 || fail "pub: $(cat "$T/kpub.out")"
wait_until 10 grep -q "holding 8" "$T/holder.out" || fail "holder: $(cat "$T/holder.out")"
wait_ok steady
used=$(pool_used hkill)
[ "$used" -ge $((8 * 262144)) ] || fail "the replica should hold 8 messages, pools hold $used"
kill9 holder
# The replicator publishes nothing more, yet must see the reader go and free its blocks.
wait_until 10 pool_is hkill 0 || fail "pools not idle after SIGKILL: $(pool_used hkill)"
grep -q "topic 'hkill': replicator for GPU 2 stopped" "$T/rgapsd.log" &&
	fail "the replicator stopped while a subscriber was still on its GPU"
kill9 keep
wait_until 10 grep -q "topic 'hkill': replicator for GPU 2 stopped after 40 copies" "$T/rgapsd.log" ||
	fail "the replicator did not stop: $(grep hkill "$T/rgapsd.log" | tail -3)"
ok "SIGKILLed replica reader: its 8 messages ($used bytes) reclaimed by the idle replicator, pools idle; the replicator stopped once its GPU had no subscriber"

# 5. stream order, with fences that complete 3 ms after their record
stop_daemon
export RGAPS_HOST_FENCE_DELAY_US=3000
start_daemon -c "$T/rgapsd.json"
M=60
bg s0 "$CLIENT" sub hauto $M --device 0
bg s1 "$CLIENT" sub hauto $M --device 1 --async
bg s2 "$CLIENT" sub hauto $M --device 2 --async
bg s3 "$CLIENT" sub hauto $M --device 2
wait_until 10 subs_are hauto 5 || fail "subscribers did not attach"
"$CLIENT" pub hauto $((M / 2)) 128KiB --device 0 --async >"$T/spub1.out" 2>&1 || fail "push_async: $(cat "$T/spub1.out")"
"$CLIENT" pub hauto $((M / 2)) 128KiB --device 0 --async --loan >"$T/spub2.out" 2>&1 ||
	fail "commit_async: $(cat "$T/spub2.out")"
for i in 0 1 2 3; do
	wait_ok "s$i"
	grep -q "received $M verified $M mismatched 0 gaps 0" "$T/s$i.out" || fail "s$i: $(cat "$T/s$i.out")"
done
fenced=$("$RGAPS" stats hauto --json | flat | grep -o '"fenced":[0-9]*' | head -1 | cut -d: -f2)
[ "$fenced" = "$M" ] || fail "$fenced messages published with a fence, expected $M"
"$CLIENT" local hlocal 40 --device 0 >"$T/local.out" 2>&1 || fail "same-process: $(cat "$T/local.out")"
grep -q "local: 40 of 40 verified" "$T/local.out" || fail "same-process: $(cat "$T/local.out")"
wait_until 10 pool_is hauto 0 || fail "pools not idle after the stream-ordered run: $(pool_used hauto)"
ok "stream order: $M fenced messages (push_async, commit_async) verified by take and take_async + release_async on the pool, peer and replica paths; a publisher and a subscriber in one process too"

# 6. a publisher killed while its copies are still queued (fences 60 s late): the readers
#    neither hang nor touch its fences once it is gone; its messages are reported lost
BG_TIMEOUT=60 bg lost1 "$CLIENT" sub hauto 0 --device 0 --expect-gaps 5 --timeout 40
BG_TIMEOUT=60 bg lost2 "$CLIENT" sub hauto 0 --device 2 --async --expect-gaps 5 --timeout 40
wait_until 10 subs_are hauto 3 || fail "subscribers did not attach (2 and GPU 2's replicator)"
RGAPS_HOST_FENCE_DELAY_US=60000000 BG_TIMEOUT=60 bg crashpub "$CLIENT" pub hauto 5 64KiB --device 0 \
	--async --linger 50
wait_until 10 grep -q "published 5 failures 0" "$T/crashpub.out" || fail "crashpub: $(cat "$T/crashpub.out")"
sleep 0.5
kill9 crashpub
for s in lost1 lost2; do
	wait_ok $s
	grep -q "received 0 verified 0 mismatched 0 gaps 5" "$T/$s.out" || fail "$s: $(cat "$T/$s.out")"
done
grep -q "its publisher left before its copy completed" "$T/rgapsd.log" ||
	fail "rgapsd's replicator did not report the crashed publisher's messages lost"
ok "a publisher SIGKILLed with 5 copies in flight: readers (take, take_async, replicator) report them lost, nothing hangs"

# 7. chained replication
stop_daemon
unset RGAPS_HOST_FENCE_DELAY_US
export RGAPS_HOST_DEVICES=4 RGAPS_HOST_LINKS="nvlink;3-0=none;0-3=none;3-1=none;1-3=none"
rep_topic() { # NAME [extra]
	printf '{ "memory": "host", "pool_size": "16MiB", "max_message_size": "1MiB", "gpu_fanout": "replicate", "gpu_piece": "64KiB" %s }\n' \
		"${2:-}" >"$T/topics.d/$1.json"
}
rep_topic hchain
rep_topic hjoin
rep_topic hslow ', "queue_depth": 4, "block_timeout_ms": 100, "max_holds": 2'
rep_topic hslowd ', "queue_depth": 4, "max_holds": 2, "overflow": "drop_oldest"'
start_daemon -c "$T/rgapsd.json"
for g in 0 1 2 3; do
	path=replica; [ $g = 0 ] && path=local
	bg "c$g" "$CLIENT" sub hchain $N --device $g --path $path
done
wait_until 10 subs_are hchain 5 || fail "subscribers did not attach to hchain"
"$CLIENT" pub hchain $N 256KiB --device 0 >"$T/cpub.out" 2>&1 || fail "pub: $(cat "$T/cpub.out")"
for g in 0 1 2 3; do
	wait_ok "c$g"
	grep -q "received $N verified $N mismatched 0 gaps 0" "$T/c$g.out" || fail "c$g: $(cat "$T/c$g.out")"
done
for g in 1 2 3; do
	gpu_is hchain $g copies $N || fail "GPU $g got $(gpu_field hchain $g copies) copies, expected $N"
	gpu_is hchain $g fed_from $((g - 1)) || fail "GPU $g fed from $(gpu_field hchain $g fed_from)"
	gpu_is hchain $g copy peer || fail "GPU $g fed through $(gpu_field hchain $g copy)"
done
grep -q "topic 'hchain': replicas fed along 0 -> 1 -> 2 -> 3$" "$T/rgapsd.log" ||
	fail "no chain 0 -> 1 -> 2 -> 3 logged: $(grep "hchain': replicas fed" "$T/rgapsd.log")"
ok "chain: GPUs 1, 2, 3 fed 0 -> 1 -> 2 -> 3 ($N messages, one copy each per GPU; GPU 3 over its link to 2)"

# a GPU with no subscriber is no relay; a subscriber that comes joins the chain
H=40
for g in 1 3; do bg "j$g" "$CLIENT" sub hjoin $((2 * H)) --device $g --path replica; done
wait_until 10 subs_are hjoin 3 || fail "subscribers did not attach to hjoin"
"$CLIENT" pub hjoin $H 64KiB --device 0 >"$T/jpub1.out" 2>&1 || fail "pub: $(cat "$T/jpub1.out")"
grep -q "topic 'hjoin': replicas fed along 0 -> 1, 1 -> 3 (through host memory)$" "$T/rgapsd.log" ||
	fail "GPU 2 relayed or GPU 3 not fed through host memory: $(grep "hjoin': replicas fed" "$T/rgapsd.log")"
gpu_is hjoin 3 copy host || fail "GPU 3 fed by $(gpu_field hjoin 3 copy)"
bg j2 "$CLIENT" sub hjoin $H --device 2 --path replica
wait_until 10 subs_are hjoin 4 || fail "the subscriber on GPU 2 did not attach"
"$CLIENT" pub hjoin $H 64KiB --device 0 >"$T/jpub2.out" 2>&1 || fail "pub: $(cat "$T/jpub2.out")"
for g in 1 2 3; do
	wait_ok "j$g"
	n=$((2 * H)); [ $g = 2 ] && n=$H
	grep -q "received $n verified $n mismatched 0 gaps 0" "$T/j$g.out" || fail "j$g: $(cat "$T/j$g.out")"
done
grep -q "topic 'hjoin': replicas fed along 0 -> 1 -> 2 -> 3$" "$T/rgapsd.log" ||
	fail "GPU 2 did not join the chain: $(grep "hjoin': replicas fed" "$T/rgapsd.log")"
ok "a GPU without subscribers is skipped (0 -> 1, 1 -> 3 through host memory); a subscriber on it joins the chain and gets all $H messages after its attach"

# a stalled reader on GPU 2: block loses there, the GPU after it gets everything
# (drop_oldest lets the publisher outrun any reader, rgapsd's replicator too: there the
# readers on GPUs 1 and 3 account for every message, received or reported lost)
S=20
for t in hslow hslowd; do
	acc=; [ $t = hslowd ] && acc=--accounted
	BG_TIMEOUT=60 bg "${t}h" "$CLIENT" sub $t 0 --device 2 --hold 2 --timeout 40
	for g in 1 3; do bg "$t$g" "$CLIENT" sub $t $S --device $g --path replica --timeout 40 $acc; done
	wait_until 10 subs_are $t 4 || fail "subscribers did not attach to $t"
	"$CLIENT" pub $t $S 64KiB --device 0 --retry >"$T/${t}p.out" 2>&1 || fail "pub $t: $(cat "$T/${t}p.out")"
	for g in 1 3; do
		wait_ok "$t$g"
		[ $t = hslowd ] && continue
		grep -q "received $S verified $S mismatched 0 gaps 0" "$T/$t$g.out" || fail "$t$g: $(cat "$T/$t$g.out")"
	done
	wait_until 10 grep -q "holding 2" "$T/${t}h.out" || fail "${t}h: $(cat "$T/${t}h.out")"
done
lost=$(gpu_field hslow 2 lost)
[ "${lost:-0}" -gt 0 ] && [ "$(gpu_field hslow 3 lost)" = 0 ] ||
	fail "hslow: GPU 2 lost ${lost:-?}, GPU 3 lost $(gpu_field hslow 3 lost)"
grep -q "topic 'hslow': the replica on GPU 2 lost message" "$T/rgapsd.log" || fail "no loss logged for hslow"
[ "$(gpu_field hslowd 2 lost)" = 0 ] || fail "hslowd: GPU 2 lost $(gpu_field hslowd 2 lost) under drop_oldest"
kill9 hslowh
kill9 hslowdh
ok "a stalled reader on GPU 2: under block its replica lost $lost of $S (counted, gaps) and GPUs 1 and 3 got all $S; under drop_oldest it lost none and 1 and 3 accounted for all $S"

# 8. GPU identity by PCI address: clients that see one GPU each
FAKE="$RGAPS_BUILD/tests/gpu/fakedrv/libcuda.so.1"
[ -f "$FAKE" ] || fail "$FAKE not built"
export RGAPS_HOST_LINKS=nvlink
printf '{ "memory": "host", "pool_size": "16MiB", "max_message_size": "1MiB", "gpu_fanout": "%s" }\n' auto \
	>"$T/topics.d/hid.json"
printf '{ "memory": "host", "pool_size": "16MiB", "max_message_size": "1MiB", "gpu_fanout": "%s" }\n' peer \
	>"$T/topics.d/hidpeer.json"
stop_daemon
start_daemon -c "$T/rgapsd.json"
export RGAPS_FAKE_CUDA_DRIVER="$FAKE" # clients see the GPUs their CUDA_VISIBLE_DEVICES names
bg id2 env CUDA_VISIBLE_DEVICES=2 "$CLIENT" sub hid $N --device 0 --path replica
bg id1 env CUDA_VISIBLE_DEVICES=0,1 "$CLIENT" sub hid $N --device 1 --path peer
wait_until 10 subs_are hid 3 || fail "subscribers did not attach to hid: $(cat "$T"/id*.out)"
CUDA_VISIBLE_DEVICES=0 "$CLIENT" pub hid $N 64KiB --device 0 >"$T/idpub.out" 2>&1 || fail "pub: $(cat "$T/idpub.out")"
for s in id2 id1; do
	wait_ok $s
	grep -q "received $N verified $N mismatched 0 gaps 0" "$T/$s.out" || fail "$s: $(cat "$T/$s.out")"
done
grep -q "attached: GPU 0, path replica" "$T/id2.out" || fail "id2: $(head -1 "$T/id2.out")"
grep -q "topic 'hid': the client's GPU 0 (PCI 0000:12:00.0) is GPU 2 here" "$T/rgapsd.log" ||
	fail "the client's GPU 0 was not matched to GPU 2 by its PCI address"
grep -q "topic 'hid': a subscriber on GPU 2 (PCI 0000:12:00.0) does not see GPU 0 (PCI 0000:10:00.0), where the pools live" \
	"$T/rgapsd.log" || fail "no reason logged for the replica of the one-GPU client"
gpu_is hid 2 copies $N || fail "GPU 2 got $(gpu_field hid 2 copies) replica copies, expected $N"
ok "a subscriber seeing only GPU 2 (its GPU 0) is matched by PCI address and reads the replica on its own GPU under auto; one seeing GPUs 0 and 1 reads in place; $N messages each"
out=$(CUDA_VISIBLE_DEVICES=3 "$CLIENT" attach sub hidpeer --device 0) && fail "a client not seeing GPU 0 attached to hidpeer"
grep -q "no_device: topic 'hidpeer': GPU 0 (PCI 0000:10:00.0), where the topic's pools live, is not visible to this client on GPU 3 (PCI 0000:13:00.0): its CUDA_VISIBLE_DEVICES hides it" \
	"$T/rgapsd.log" || fail "no PCI address or CUDA_VISIBLE_DEVICES in the peer refusal"
out=$(CUDA_VISIBLE_DEVICES=1 "$CLIENT" attach pub hid --device 0) && fail "a publisher not seeing GPU 0 attached"
grep -q "no_device: topic 'hid': a publisher writes the topic's pools on GPU 0 (PCI 0000:10:00.0), which this client on GPU 1 (PCI 0000:11:00.0) does not see (its CUDA_VISIBLE_DEVICES hides it)" \
	"$T/rgapsd.log" || fail "no PCI address or CUDA_VISIBLE_DEVICES in the publisher refusal"
grep -E "no_device: topic 'hid" "$T/rgapsd.log" | sed 's/^.*no_device/   no_device/'
ok "refusals where no path exists name the GPU by PCI address and CUDA_VISIBLE_DEVICES (peer subscriber, publisher)"
unset RGAPS_FAKE_CUDA_DRIVER

stop_daemon
ok "clean shutdown"
