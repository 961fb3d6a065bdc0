#!/bin/bash
# Every GPU of a host (docs/GPU.md, "Every GPU of a host"), on real GPUs: the
# topic's pools on GPU 0, subscriber processes on every GPU checking every
# byte of every message in place with a kernel on their own GPU.
#  1. gpu_fanout peer and replicate (and auto, which logs its choice): one
#     push publisher on GPU 0, then a loan publisher on the last GPU (its
#     kernels write the pool on GPU 0); 2 subscribers per GPU, one of them
#     stream-ordered (take_async + release_async). Replicate: exactly one copy
#     per message per GPU, whatever the number of subscribers there.
#  2. Refusals at attach, never a crash at a read: a GPU outside "devices";
#     peer access asked for pools that cannot be opened to another GPU (cudaIpc
#     pools, RGAPS_CUDA_IPC=1), while auto serves that GPU with a replica.
#  3. SIGKILL of a subscriber holding 8 messages on a GPU that is not the
#     pool's (peer, then replica): every pool back to idle.
#  4. The remote path: two rgapsd on this machine over TCP, the publisher on
#     A's GPU 0, subscribers on every GPU of B (peer and replicate): every
#     message lands once on B, then one copy per other GPU (replicate); the
#     SIGKILL of a holder on B's last GPU leaves B's pools idle.
#  5. Chained replication: each GPU's replica is fed from another GPU than
#     every other one's (a chain, not a star from GPU 0); messages of up to 64
#     MiB in 1 MiB pieces, verified on every GPU.
#  6. GPU identity: subscribers that each see exactly one GPU
#     (CUDA_VISIBLE_DEVICES=g, their GPU 0) are matched by PCI address and
#     read the replica on their own GPU under auto; under peer one is refused,
#     naming the pools' GPU by PCI address and CUDA_VISIBLE_DEVICES.
# Needs 2 or more GPUs: skips (77) with the reason otherwise.
# Run: RGAPS_BUILD=<build dir> bash tests/gpu/gpu_multi.sh
. "$(dirname "$0")/../integration/lib.sh"
GPU_PUB="$RGAPS_BUILD/tests/gpu/gpu-pub"
GPU_SUB="$RGAPS_BUILD/tests/gpu/gpu-sub"
[ -x "$GPU_PUB" ] || skip "$GPU_PUB not built (no nvcc at configure time)"
require "a GPU" "$GPU_PUB" --probe
G=$("$GPU_PUB" --gpus)
[ "${G:-1}" -ge 2 ] || skip "$G GPU visible; serving several GPUs needs 2 or more"
LAST=$((G - 1))
N=${GPU_MULTI_COUNT:-200}

flat() { tr -d ' \t\n'; }
gpu_field() { # TOPIC DEVICE FIELD [socket]
	RGAPS_SOCKET=${4:-$RGAPS_SOCKET} "$RGAPS" stats "$1" --json | flat |
		grep -o "\"device\":$2,\"role\"[^}]*" | grep -o "\"$3\":[^,]*" | head -1 | cut -d: -f2 | tr -d '"'
}
echo "GPUs: $G"
command -v nvidia-smi >/dev/null && nvidia-smi topo -m 2>/dev/null | sed 's/^/   /'

mkdir -p "$T/topics.d"
echo '{ "topics_dir": "topics.d" }' >"$T/rgapsd.json"
# A delivery test, not a timing one: a publisher waits up to 10 s for room (on a machine's
# first run, readers on other GPUs took over the default 1 s to open the pool).
topic() { # NAME FANOUT [extra]
	printf '{ "memory": "cuda", "device": 0, "pool_size": "512MiB", "max_message_size": "16MiB", "queue_depth": 64, "block_timeout_ms": 10000, "gpu_fanout": "%s" %s }\n' \
		"$2" "${3:-}" >"$T/topics.d/$1.json"
}
topic mpeer peer
topic mrep replicate
topic mauto auto
topic mdev auto ', "devices": [0]'
topic mkillp peer ', "max_holds": 8'
topic mkillr replicate ', "max_holds": 8'
start_daemon -c "$T/rgapsd.json" --plugin-dir "$RGAPS_BUILD/plugins"
grep "GPUs (links learned" "$T/rgapsd.log" | head -1 | sed 's/^/   /'

# 1. fan-out to every GPU
fanout() { # TOPIC EXPECTED_PATH_ON_OTHER_GPUS PUBLISHER_ARGS LABEL
	local topic=$1 other=$2 pubargs=$3 label=$4 subs=0
	for g in $(seq 0 $LAST); do
		local path="--path $other"; [ "$g" = 0 ] && path="--path local"
		[ "$other" = any ] && [ "$g" != 0 ] && path=
		BG_TIMEOUT=240 bg "${topic}s${g}a" "$GPU_SUB" $topic --device $g --count $N $path --timeout 220
		BG_TIMEOUT=240 bg "${topic}s${g}b" "$GPU_SUB" $topic --device $g --count $N $path --async --timeout 220
		subs=$((subs + 2))
	done
	BG_TIMEOUT=240 bg "${topic}p" "$GPU_PUB" $topic --count $N --size 16-16MiB --wait-subscribers $subs \
		--timeout 120 $pubargs
	wait_ok "${topic}p"
	for g in $(seq 0 $LAST); do
		for v in a b; do
			wait_ok "${topic}s$g$v"
			expect_sub "${topic}s$g$v" received=$N verified=$N mismatched=0 gaps=0
		done
	done
	grep -h "attached to\|first message" "$T/${topic}s${LAST}b.out" | sed 's/^/   /'
	ok "$label: $((G * 2)) subscribers on $G GPUs verified every byte of $N messages in place ($(tail -1 "$T/${topic}p.out"))"
}
fanout mpeer peer "" "peer, push from GPU 0"
fanout mpeer peer "--device $LAST --loan --async" "peer, loans written by kernels on GPU $LAST, commit_async"
for g in $(seq 1 $LAST); do
	[ "$(gpu_field mpeer $g role)" = peer ] || fail "mpeer GPU $g role $(gpu_field mpeer $g role)"
	[ "$(gpu_field mpeer $g copies)" = 0 ] || fail "mpeer GPU $g made copies"
done
fanout mrep replica "" "replicate, push from GPU 0"
fanout mrep replica "--device $LAST --async" "replicate, push_async from GPU $LAST"
for g in $(seq 1 $LAST); do
	c=$(gpu_field mrep $g copies)
	[ "$c" = $((2 * N)) ] || fail "mrep GPU $g: $c replica copies for $((2 * N)) messages and 2 subscribers"
done
ok "replicate: $((2 * N)) messages, $((2 * N)) copies to each of GPUs 1-$LAST (one per message, not per subscriber) by $(gpu_field mrep 1 copy) copy"
# 5. a chain: no GPU feeds two replicas (each link carries each byte once)
fed=$(for g in $(seq 1 $LAST); do gpu_field mrep $g fed_from; done | sort | uniq -d)
[ -z "$fed" ] || fail "mrep: GPU(s) $fed feed more than one replica: not a chain"
grep -h "topic 'mrep': replicas fed along" "$T/rgapsd.log" | tail -1 | sed 's/^.*info: /   /'
ok "replicate: the replicas are fed along a chain (no GPU feeds two)"
fanout mauto any "" "auto (its choice per GPU is logged)"
grep -h "topic 'mauto': GPU\|topic 'mrep': replicator\|topic 'mpeer': GPU" "$T/rgapsd.log" | sed 's/^.*info: /   /'

# 2. refusals at attach
rc=0
"$GPU_SUB" mdev --device 1 --count 1 --timeout 5 >"$T/refdev.out" 2>&1 || rc=$?
[ $rc = 3 ] || fail "GPU 1 on mdev (devices [0]) was not refused: $(cat "$T/refdev.out")"
grep -q "no_device: topic 'mdev': the topic serves GPUs 0 only" "$T/rgapsd.log" || fail "no reason logged for mdev"
ok "a GPU outside \"devices\" is refused at attach: $(grep -o "no_device: topic 'mdev'.*" "$T/rgapsd.log" | head -1)"

# 3. SIGKILL of holders on a GPU that is not the pool's
for t in mkillp mkillr; do
	BG_TIMEOUT=90 bg "${t}h" "$GPU_SUB" $t --device $LAST --hold 8 --timeout 80
	BG_TIMEOUT=90 bg "${t}s" "$GPU_SUB" $t --device $LAST --count 40 --async --timeout 80
	"$GPU_PUB" $t --count 40 --size 1MiB --wait-subscribers 2 --timeout 30 >"$T/${t}p.out" 2>&1 ||
		fail "publish to $t: $(cat "$T/${t}p.out")"
	wait_until 20 grep -q "holding 8" "$T/${t}h.out" || fail "$t holder: $(cat "$T/${t}h.out")"
	wait_ok "${t}s"
	used=$(pool_used $t)
	[ "$used" -ge $((8 << 20)) ] || fail "$t pools should hold the 8 held messages, hold $used"
	kill9 "${t}h"
	wait_until 10 pool_is $t 0 || fail "$t pools not idle after SIGKILL: $(pool_used $t)"
	ok "$t: a subscriber on GPU $LAST SIGKILLed holding 8 messages ($used bytes): every pool idle"
done

# 5. the chain's pieces: messages of up to 64 MiB in 1 MiB pieces, every byte on every GPU
printf '{ "memory": "cuda", "device": 0, "pool_size": "1GiB", "max_message_size": "64MiB", "queue_depth": 16, "gpu_fanout": "replicate", "gpu_piece": "1MiB" }\n' \
	>"$T/topics.d/mchain.json"
printf '{ "memory": "cuda", "device": 0, "pool_size": "256MiB", "max_message_size": "16MiB", "gpu_fanout": "peer" }\n' \
	>"$T/topics.d/mpeer1.json"
stop_daemon
start_daemon -c "$T/rgapsd.json" --plugin-dir "$RGAPS_BUILD/plugins"
C=40
# chain_round NAME ONE GPU...: a subscriber on each GPU verifies $C messages of 1-64 MiB of
# mchain; ONE=1: each sees only its own GPU (CUDA_VISIBLE_DEVICES=g, its GPU 0), a replica
chain_round() {
	local name=$1 one=$2 g
	shift 2
	for g in "$@"; do
		if [ "$one" = 1 ]; then
			BG_TIMEOUT=200 bg "$name$g" env CUDA_VISIBLE_DEVICES=$g "$GPU_SUB" mchain --device 0 \
				--count $C --path replica --timeout 180
		else
			BG_TIMEOUT=200 bg "$name$g" "$GPU_SUB" mchain --device $g --count $C --timeout 180
		fi
	done
	BG_TIMEOUT=200 bg "${name}p" "$GPU_PUB" mchain --count $C --size 1MiB-64MiB --wait-subscribers $# \
		--timeout 120
	wait_ok "${name}p"
	for g in "$@"; do
		wait_ok "$name$g"
		expect_sub "$name$g" received=$C verified=$C mismatched=0 gaps=0
	done
}
chain_round ch 0 $(seq 0 $LAST)
grep -h "topic 'mchain': replicas fed along\|cuda: GPU-to-GPU relays" "$T/rgapsd.log" | tail -2 | sed 's/^.*info: /   /'
ok "chain: $C messages of 1-64 MiB in 1 MiB pieces verified byte for byte on all $G GPUs"

# 6. subscribers that see one GPU each (a container's view): matched by PCI address
chain_round one 1 $(seq 1 $LAST)
for g in $(seq 1 $LAST); do
	grep -q "topic 'mchain': the client's GPU 0 (PCI .*) is GPU $g here" "$T/rgapsd.log" ||
		fail "the one-GPU client on GPU $g was not matched by PCI address"
done
rc=0
CUDA_VISIBLE_DEVICES=1 "$GPU_SUB" mpeer1 --device 0 --count 1 --timeout 5 >"$T/refone.out" 2>&1 || rc=$?
[ $rc = 3 ] || fail "a subscriber not seeing GPU 0 was not refused under peer: $(cat "$T/refone.out")"
grep -q "no_device: topic 'mpeer1': GPU 0 (PCI [0-9a-f:.]*), where the topic's pools live, is not visible to this client on GPU 1 (PCI [0-9a-f:.]*): its CUDA_VISIBLE_DEVICES hides it" \
	"$T/rgapsd.log" || fail "the refusal does not name GPU 0 by PCI address: $(grep mpeer1 "$T/rgapsd.log" | tail -2)"
grep -h "does not see GPU 0\|no_device: topic 'mpeer1'" "$T/rgapsd.log" | head -2 | sed 's/^.*\(info\|warn\): /   /'
ok "one GPU per subscriber (CUDA_VISIBLE_DEVICES=g): matched by PCI address, served replicas on GPUs 1-$LAST, $C messages verified each; under peer refused naming GPU 0's PCI address"

# 2b. cudaIpc pools: peer access impossible -> refused under peer, replica under auto
stop_daemon
topic mipcpeer peer
topic mipcauto auto
RGAPS_CUDA_IPC=1 start_daemon -c "$T/rgapsd.json" --plugin-dir "$RGAPS_BUILD/plugins"
for t in mipcpeer mipcauto; do
	BG_TIMEOUT=60 bg "${t}p" "$GPU_PUB" $t --count 20 --size 1MiB --wait-subscribers 1 --timeout 40
	wait_until 10 grep -q "cuda: pool .*$t.* shared by cudaIpc" "$T/rgapsd.log" || fail "$t pool not made"
done
rc=0
"$GPU_SUB" mipcpeer --device 1 --count 1 --timeout 5 >"$T/refipc.out" 2>&1 || rc=$?
[ $rc = 3 ] || fail "GPU 1 on a cudaIpc topic under peer was not refused: $(cat "$T/refipc.out")"
grep -q "no_device: topic 'mipcpeer': the topic's pools cannot be opened to GPU 1" "$T/rgapsd.log" ||
	fail "no reason logged for mipcpeer: $(grep mipcpeer "$T/rgapsd.log" | tail -3)"
"$GPU_SUB" mipcpeer --device 0 --count 20 --timeout 40 >"$T/ipc0.out" 2>&1 || fail "mipcpeer GPU 0: $(cat "$T/ipc0.out")"
"$GPU_SUB" mipcauto --device 1 --count 20 --path replica --timeout 40 >"$T/ipc1.out" 2>&1 ||
	fail "mipcauto GPU 1: $(cat "$T/ipc1.out")"
wait_ok mipcpeerp
wait_ok mipcautop
grep -h "topic 'mipc.*': GPU 1" "$T/rgapsd.log" | sed 's/^.*info: /   /'
ok "cudaIpc pools: GPU 1 refused at attach under peer (reason logged); auto serves it a replica, verified"
stop_daemon

# 4. the remote path: B serves every GPU
. "$(dirname "$0")/../integration/remote_lib.sh"
KEEPALIVE_MS=1000
host A 0; host B 1
rm -f "$T"/topics.d/*.json
topic rpeer peer ', "ring_size": "256MiB", "chunk_size": "4MiB"'
topic rrep replicate ', "ring_size": "256MiB", "chunk_size": "4MiB"'
topic rkill replicate ', "ring_size": "256MiB", "max_holds": 8'
for name in A B; do
	peers=""
	for h in "${!PORT[@]}"; do [ "$h" = "$name" ] || peers="$peers${peers:+, }\"${ADDR[$h]}:${PORT[$h]}\""; done
	cat >"$T/$name.json" <<JSON
{ "listen": "${ADDR[$name]}:${PORT[$name]}", "peers": [ $peers ], "key_file": "$KEY",
  "keepalive_ms": $KEEPALIVE_MS, "topics_dir": "$T/topics.d", "defaults": { "transport": "tcp" } }
JSON
	"$RGAPSD" --config "$T/$name.json" --socket "${SOCK[$name]}" --instance "$INSTANCE$name" \
		--plugin-dir "$RGAPS_BUILD/plugins" --log-level "${RGAPS_TEST_LOG:-info}" >>"$T/$name.log" 2>&1 &
	DPID[$name]=$!; PIDS+=(${DPID[$name]})
	wait_until 20 host_answers $name || fail "$name did not come up: $(tail -5 "$T/$name.log")"
done
wait_until 15 peer_up A B || fail "A-B session did not come up"
bsubs() { test "$(RGAPS_SOCKET=${SOCK[B]} nsubs "$1")" -ge "$2"; }
for t in rpeer rrep; do
	other=peer; [ $t = rrep ] && other=replica
	for g in $(seq 0 $LAST); do
		path=$other; [ "$g" = 0 ] && path=local
		v=; [ $((g % 2)) = 1 ] && v=--async
		BG_TIMEOUT=240 bg "B$t$g" env RGAPS_SOCKET=${SOCK[B]} "$GPU_SUB" $t --device $g --count $N --path $path $v --timeout 220
	done
	wait_until 20 knows_sub A B $t || fail "A never learned that B subscribes to $t"
	wait_until 20 bsubs $t $G || fail "subscribers on B did not attach to $t"
	BG_TIMEOUT=240 bg "A${t}p" env RGAPS_SOCKET=${SOCK[A]} "$GPU_PUB" $t --count $N --size 4KiB-16MiB --timeout 60
	wait_ok "A${t}p"
	for g in $(seq 0 $LAST); do
		wait_ok "B$t$g"
		expect_sub "B$t$g" received=$N verified=$N mismatched=0 gaps=0
	done
	landed=$(on B "$RGAPS" stats $t --json | flat | grep -o '"from_peers":{"messages":[0-9]*' | tr -dc 0-9)
	[ "$landed" = "$N" ] || fail "B landed $landed messages of $t, expected $N (once each)"
	if [ $t = rrep ]; then
		for g in $(seq 1 $LAST); do
			c=$(gpu_field rrep $g copies "${SOCK[B]}")
			[ "$c" = "$N" ] || fail "B made $c copies of rrep to GPU $g, expected $N"
		done
	fi
	ok "remote $t: subscribers on B's $G GPUs verified $N messages from A; B landed each once$([ $t = rrep ] && echo ", then one copy per other GPU")"
done
BG_TIMEOUT=120 bg Bholder env RGAPS_SOCKET=${SOCK[B]} "$GPU_SUB" rkill --device $LAST --hold 8 --timeout 100
wait_until 20 knows_sub A B rkill || fail "A never learned that B subscribes to rkill"
RGAPS_SOCKET=${SOCK[A]} "$GPU_PUB" rkill --count 8 --size 1MiB --timeout 30 >"$T/rkillp.out" 2>&1 || fail "rkill pub: $(cat "$T/rkillp.out")"
wait_until 30 grep -q "holding 8" "$T/Bholder.out" || fail "B holder: $(cat "$T/Bholder.out")"
kill9 Bholder
bpool() { test "$(on B "$RGAPS" stats rkill --json | grep -m1 '"pool_used"' | tr -dc '0-9')" = 0; }
wait_until 10 bpool || fail "B's pools of rkill not idle after the SIGKILL"
ok "remote: a subscriber on B's GPU $LAST SIGKILLed holding 8 replica messages: B's pools idle"
for h in A B; do
	! grep -E "hostile|copy into the pool failed|cuda: .*failed|lost message" "$T/$h.log" || fail "$h logged errors"
done
for h in A B; do stop_host $h; done
ok "both daemons stopped cleanly"
