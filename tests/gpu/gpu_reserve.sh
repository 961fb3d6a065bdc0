#!/bin/bash
# gpu_reserve on a real GPU: a cuda pool that would leave
# less than gpu_reserve free on its GPU is refused at attach with "no_memory"
# and the numbers (free, total, pool, reserve), counted as gpu_pools_refused;
# with the default reserve (1 GiB) the same pool is made. rgapsd asks the cuda
# plugin for the GPU's free memory (mem_info, cudaMemGetInfo) before each pool.
# Skips (77) with the reason when there is no GPU; a probe that fails otherwise
# fails.
# Run: RGAPS_BUILD=<build dir> bash tests/gpu/gpu_reserve.sh
. "$(dirname "$0")/../integration/lib.sh"
GPU_PUB="$RGAPS_BUILD/tests/gpu/gpu-pub"
[ -x "$GPU_PUB" ] || skip "$GPU_PUB not built (no nvcc at configure time)"
require "a GPU" "$GPU_PUB" --probe
dstat() { "$RGAPS" stats --json | tr -d ' \t\n' | grep -o "\"$1\":[0-9]*" | head -n 1 | cut -d: -f2; }
conf() { # conf RESERVE
	cat >"$T/rgapsd.json" <<JSON
{ "gpu_reserve": "$1",
  "defaults": { "memory": "cuda", "pool_size": "256MiB", "max_message_size": "1MiB" } }
JSON
}

# No GPU holds 1 TiB free besides a pool: refused, with the numbers.
conf 1024GiB
start_daemon -c "$T/rgapsd.json" --plugin-dir "$RGAPS_BUILD/plugins"
! "$RGAPS" pub big --count 1 --size 4KiB >"$T/big.out" 2>&1 || fail "a pool was made although it leaves less than 1 TiB free"
# The client gets no_memory (ENOMEM), in words that name gpu_reserve; the reply's message
# and rgapsd's log name the numbers.
grep -q "gpu_reserve" "$T/big.out" || fail "no clear error: $(cat "$T/big.out")"
line=$(grep "pool refused" "$T/rgapsd.log" | head -n 1)
echo "$line" | grep -q "free of" && echo "$line" | grep -q "a 256 MiB pool" &&
	echo "$line" | grep -q "gpu_reserve (1 TiB)" ||
	fail "rgapsd's log does not name free memory, pool and reserve: ${line:-nothing}"
[ "$(dstat gpu_pools_refused)" = 1 ] || fail "gpu_pools_refused is $(dstat gpu_pools_refused), expected 1"
ok "refused: $(echo "$line" | grep -o 'GPU [0-9]* has.*')"
stop_daemon

# The default reserve (1 GiB): the same 256 MiB pool is made.
conf 1GiB
start_daemon -c "$T/rgapsd.json" --plugin-dir "$RGAPS_BUILD/plugins"
"$RGAPS" pub big --count 1 --size 4KiB >"$T/ok.out" 2>&1 || fail "the pool was refused with a 1 GiB reserve: $(cat "$T/ok.out")"
[ "$(dstat gpu_pools_refused)" = 0 ] || fail "gpu_pools_refused is $(dstat gpu_pools_refused), expected 0"
ok "made with gpu_reserve 1GiB"
stop_daemon
