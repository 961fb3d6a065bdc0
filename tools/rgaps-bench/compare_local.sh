#!/usr/bin/env bash
# compare_local.sh: the host-memory benchmark at 4 KiB against its targets
# (docs/BENCHMARKS.md, "Local path at 4 KiB"), three contenders
# side by side in one run, interleaved so that drift of a shared machine hits
# them alike:
#
#   now      rgaps-bench and rgapsd built from this work tree
#   before   the same benchmark built from commit b4f3916 (one mutex per topic),
#            from a temporary git worktree that this script removes again
#   iceoryx  tools/rgaps-bench/iox_bench.c (iceoryx 2.0.3, C binding, subscribers
#            sleep on a WaitSet), with its own iox-roudi started and stopped
#
# Usage: tools/rgaps-bench/compare_local.sh [-r ROUNDS] [-o DIR] [-b COMMIT]
#        tools/rgaps-bench/compare_local.sh -p PACK [-b COMMIT]
#        tools/rgaps-bench/compare_local.sh -u PACK [-r ROUNDS] [-o DIR]
#        tools/rgaps-bench/compare_local.sh -s DIR...
#   -r ROUNDS  rounds (default 3); round k runs the three contenders in an order
#              rotated by k, each one complete measurement
#   -o DIR     where the raw output goes (default build-compare/results/<UTC time>)
#   -b COMMIT  the "before" commit (default b4f3916)
#   -p PACK    build both, then copy into the folder PACK everything a run needs
#              (the programs, the shared libraries they load but libc's, iox-roudi
#              and this script), to measure on a machine that can build nothing
#              (a lent GPU host): there, PACK/compare_local.sh -u PACK
#   -u PACK    measure with the programs of a pack, building nothing
#   -s         measure nothing: summarise the result folders of earlier runs
#              together (median and min-max over all their rounds)
#
# Prerequisites (Debian 12), besides rgaps' own build dependencies:
#   apt-get install iceoryx libiceoryx-binding-c-dev python3 git
# (with -u: python3 alone). No other iox-roudi may run (iceoryx 2.0 allows one
# per machine).
#
# What one round runs (each contender its own private daemon):
#   rgaps-bench --spawn-daemon --sizes 4KiB --subs 1,8 --json ...-default.json
#       latency: push with the library's default spin (20 us) and with spin 0,
#       loan/commit; throughput with the default spin
#   rgaps-bench --spawn-daemon --sizes 4KiB --subs 1,8 --mode throughput --spin-us 0
#       throughput with spin 0 (subscribers only sleep, as iceoryx's do)
#   iox-bench --spawn-roudi --size 4096 --subs 1,8
#       latency and throughput with 1 and 8 subscriber processes
# Each program itself runs its configurations round-robin in 8 rounds.
#
# Output in DIR: rN-now-default.json, rN-now-spin0.json, rN-before-*.json,
# rN-iceoryx.json (the programs' raw JSON), rN-*.log (their text output),
# machine.txt, summary.txt (the tables, also printed) and summary.json.
# Builds: build-compare/now and build-compare/before (kept between runs).
set -euo pipefail
unset RGAPS_SPIN_US RGAPS_SOCKET

rounds=3
out=""
before_commit=b4f3916
summarize_only=0
pack=""
use_pack=""
args="$*"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

while getopts "r:o:b:p:u:sh" opt; do
	case $opt in
	s) summarize_only=1 ;;
	r) rounds=$OPTARG ;;
	o) out=$OPTARG ;;
	b) before_commit=$OPTARG ;;
	p) pack=$OPTARG ;;
	u) use_pack=$(cd "$OPTARG" && pwd) ;;
	h) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if ! [[ $rounds =~ ^[1-9][0-9]?$ ]]; then
	echo "compare_local.sh: -r: 1..99 rounds" >&2
	exit 2
fi

# summarize SUMMARY_JSON DIR...: the tables and targets over every round of the folders
summarize() {
	python3 - "$@" <<'EOF'
import json, os, statistics, sys

summary_json, dirs = sys.argv[1], sys.argv[2:]

def load(d, path):
    with open(os.path.join(d, path)) as f:
        return json.load(f)["runs"]

def machine(d):
    with open(os.path.join(d, "machine.txt")) as f:
        return f.read().rstrip()

rlist = []  # (folder, round) of every round
for d in dirs:
    n = int([l.split(":")[1] for l in machine(d).splitlines() if l.startswith("rounds:")][0])
    rlist += [(d, k) for k in range(1, n + 1)]
rounds = len(rlist)

def pick(runs, subs, mode, api="push", spin=None):
    for r in runs:
        if (r["size"] == 4096 and r["subscribers"] == subs and r["mode"] == mode
                and r["api"] == api and (spin is None or r["spin_us"] == spin)):
            return r
    raise KeyError((subs, mode, api, spin))

# One value per round and figure: rows[(contender, subs)][column] = [round1, round2, ...]
cols = ["p50", "p99", "msg/s"]
rows = {}
def add(key, col, v):
    rows.setdefault(key, {c: [] for c in cols})[col].append(v)

for rd, k in rlist:
    for name in ("now", "before"):
        d, z = load(rd, f"r{k}-{name}-default.json"), load(rd, f"r{k}-{name}-spin0.json")
        for n in (1, 8):
            lat0 = pick(d, n, "latency", spin="0")
            latd = pick(d, n, "latency", spin="20*")
            add((name, "spin 0", n), "p50", lat0["p50_ns"] / 1e3)
            add((name, "spin 0", n), "p99", lat0["p99_ns"] / 1e3)
            add((name, "spin 0", n), "msg/s", pick(z, n, "throughput", spin="0")["msgs_per_s_per_sub"])
            add((name, "spin 20", n), "p50", latd["p50_ns"] / 1e3)
            add((name, "spin 20", n), "p99", latd["p99_ns"] / 1e3)
            add((name, "spin 20", n), "msg/s", pick(d, n, "throughput", spin="20*")["msgs_per_s_per_sub"])
    x = load(rd, f"r{k}-iceoryx.json")
    for n in (1, 8):
        lat = pick(x, n, "latency", api="iceoryx")
        add(("iceoryx", "WaitSet", n), "p50", lat["p50_ns"] / 1e3)
        add(("iceoryx", "WaitSet", n), "p99", lat["p99_ns"] / 1e3)
        add(("iceoryx", "WaitSet", n), "msg/s", pick(x, n, "throughput", api="iceoryx")["msgs_per_s_per_sub"])

def mmm(v, fmt):
    s = sorted(v)
    return f"{fmt.format(statistics.median(s))} ({fmt.format(s[0])}-{fmt.format(s[-1])})"

for d in dirs:
    print(machine(d) + "\n")
print(f"4 KiB, median over the {rounds} rounds of {len(dirs)} run(s) (min-max); latency p50/p99 in us (paced,"
      " publish start -> take returns),\nthroughput: msg/s of the slowest subscriber,"
      " back-to-back publishing\n")
print("| contender | subscribers wait | subs | p50 (us) | p99 (us) | msg/s per subscriber |")
print("|---|---|---|---|---|---|")
order = [("now", "spin 0"), ("before", "spin 0"), ("now", "spin 20"), ("before", "spin 20"),
         ("iceoryx", "WaitSet")]
label = {"spin 0": "sleep (spin 0)", "spin 20": "spin 20 us, sleep (default)",
         "WaitSet": "sleep (WaitSet)"}
for n in (1, 8):
    for c, w in order:
        r = rows[(c, w, n)]
        print(f"| {c} | {label[w]} | {n} | {mmm(r['p50'], '{:.1f}')} | {mmm(r['p99'], '{:.1f}')}"
              f" | {mmm(r['msg/s'], '{:,.0f}')} |")

print("\nPer round (p50 us / p99 us / msg/s per subscriber):")
for k, (rd, rk) in enumerate(rlist):
    print(f"{os.path.basename(os.path.normpath(rd))} round {rk}: " + "; ".join(
        f"{c} {w} N={n}: {rows[(c, w, n)]['p50'][k]:.1f} / {rows[(c, w, n)]['p99'][k]:.1f} / "
        f"{rows[(c, w, n)]['msg/s'][k]:,.0f}" for n in (1, 8) for c, w in order))

def ratio(a, b, col):  # paired per round
    return [x / y for x, y in zip(rows[a][col], rows[b][col])]

targets = []
def target(text, vals, ok):
    s = sorted(vals)
    med = statistics.median(s)
    verdict = "met" if ok(med) else "missed"
    if ok(s[0]) != ok(s[-1]):
        verdict += " (not in every round)"
    targets.append({"target": text, "median": med, "min": s[0], "max": s[-1], "verdict": verdict})
    print(f"- {text}: {med:.2f} ({s[0]:.2f}-{s[-1]:.2f}) -> {verdict}")

print("\nTargets (ratios paired within each round; median (min-max)):")
for w in ("spin 20", "spin 0"):
    target(f"throughput per subscriber, N=8, now / before, {w}: >= 2",
           ratio(("now", w, 8), ("before", w, 8), "msg/s"), lambda v: v >= 2)
for w in ("spin 20", "spin 0"):
    target(f"latency p50, N=1, now / before, {w}: <= 1 (no worse)",
           ratio(("now", w, 1), ("before", w, 1), "p50"), lambda v: v <= 1)
    target(f"latency p99, N=1, now / before, {w}: <= 1 (no worse)",
           ratio(("now", w, 1), ("before", w, 1), "p99"), lambda v: v <= 1)
for w in ("spin 0", "spin 20"):
    for c in ("now", "before"):
        for n in (1, 8):
            r = ratio((c, w, n), ("iceoryx", "WaitSet", n), "p50")
            if c == "now" and n == 8:
                target(f"p50 rgaps {c} / iceoryx, N=8, {w}: <= 0.5", r, lambda v: v <= 0.5)
            else:
                s = sorted(r)
                print(f"  (for information: p50 rgaps {c} / iceoryx, N={n}, {w}:"
                      f" {statistics.median(s):.2f} ({s[0]:.2f}-{s[-1]:.2f}))")

with open(summary_json, "w") as f:
    json.dump({"folders": dirs,
               "rows": [{"contender": c, "wait": w, "subscribers": n, **rows[(c, w, n)]}
                        for (c, w, n) in rows], "targets": targets}, f, indent=1)
EOF
}

if [ "$summarize_only" = 1 ]; then
	[ $# -gt 0 ] || { usage >&2; exit 2; }
	summarize /dev/null "$@"
	exit 0
fi

if [ -n "$use_pack" ]; then
	# A pack: the programs in $use_pack/now and $use_pack/before, their libraries and
	# iox-roudi beside them. Nothing is built.
	export LD_LIBRARY_PATH="$use_pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export PATH="$use_pack/bin:$PATH"
	bdir=$use_pack
	root=$(pwd)
else
	root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
	cd "$root"
	bdir=$root/build-compare
fi
missing=()
for c in python3 iox-roudi $([ -n "$use_pack" ] || echo meson ninja git); do
	command -v "$c" >/dev/null || missing+=("$c")
done
[ -n "$use_pack" ] || [ -e /usr/include/iceoryx/v2.0.3/iceoryx_binding_c/runtime.h ] ||
	[ -e /usr/local/include/iceoryx/v2.0.3/iceoryx_binding_c/runtime.h ] ||
	missing+=("iceoryx C binding headers")
if [ ${#missing[@]} -gt 0 ]; then
	echo "compare_local.sh: missing: ${missing[*]}" >&2
	echo "  apt-get install iceoryx libiceoryx-binding-c-dev python3 git meson ninja-build" >&2
	exit 2
fi
if pgrep -x iox-roudi >/dev/null; then
	echo "compare_local.sh: an iox-roudi runs already (pid $(pgrep -x iox-roudi | head -1));" \
		"iceoryx 2.0 allows one per machine: stop it first" >&2
	exit 2
fi

src_before=$bdir/src-before
[ -n "$out" ] || out=$bdir/results/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$bdir"
[ -n "$pack" ] || mkdir -p "$out"

cleanup() {
	if [ -e "$src_before" ]; then
		git worktree remove --force "$src_before" >/dev/null 2>&1 || rm -rf "$src_before"
		git worktree prune
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

build() { # build DIR SRC: the programs the comparison runs, host memory only
	local dir=$1 src=$2
	if [ ! -e "$dir/build.ninja" ]; then
		meson setup "$dir" "$src" -Dwerror=true -Dcuda=disabled -Dtests=false \
			>"$dir.setup.log" 2>&1 || { cat "$dir.setup.log" >&2; return 1; }
	fi
	ninja -C "$dir" tools/rgaps-bench src/daemon/rgapsd plugins/memory-host.so \
		>"$dir.ninja.log" 2>&1 || { tail -40 "$dir.ninja.log" >&2; return 1; }
}

# pack_into DIR: what -u needs, from the builds (their layout kept: rgaps-bench starts
# ../src/daemon/rgapsd, which loads the plugins of RGAPS_PLUGIN_DIR).
pack_into() {
	local dir=$1 name f lib
	rm -rf "$dir"
	mkdir -p "$dir/bin" "$dir/lib"
	for name in now before; do
		mkdir -p "$dir/$name/tools" "$dir/$name/src/daemon" "$dir/$name/src/lib" \
			"$dir/$name/plugins"
		cp "$bdir/$name/tools/rgaps-bench" "$dir/$name/tools/"
		cp "$bdir/$name/src/daemon/rgapsd" "$dir/$name/src/daemon/"
		find "$bdir/$name/src/lib" -maxdepth 1 -name 'librgaps.so*' ! -type d \
			-exec cp -P {} "$dir/$name/src/lib/" \;
		cp "$bdir/$name/plugins/memory-host.so" "$dir/$name/plugins/"
		cp "$bdir/$name.sha" "$dir/$name.sha"
	done
	cp "$bdir/now/tools/iox-bench" "$dir/now/tools/"
	cp "$(command -v iox-roudi)" "$dir/bin/"
	dpkg-query -W -f '${Version}' iceoryx >"$dir/iceoryx.version" 2>/dev/null || true
	cp "$0" "$dir/compare_local.sh"
	for f in "$dir"/*/tools/* "$dir"/*/src/daemon/rgapsd "$dir"/*/plugins/*.so "$dir/bin/iox-roudi"; do
		ldd "$f" | awk '$3 ~ /^\// { print $3 }'
	done | sort -u | while read -r lib; do
		case "$(basename "$lib")" in
		libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | librgaps*) ;;
		*) cp -L "$lib" "$dir/lib/" ;;
		esac
	done
	strip "$dir"/*/tools/* "$dir"/*/src/daemon/rgapsd "$dir"/*/plugins/*.so \
		"$dir"/*/src/lib/librgaps.so.*.* 2>/dev/null || true
	echo "$dir: $(du -sh "$dir" | cut -f1); there: $dir/compare_local.sh -u $dir" >&2
}

if [ -z "$use_pack" ]; then
	echo "== building this work tree into build-compare/now" >&2
	build "$bdir/now" "$root"
	if ! ninja -C "$bdir/now" tools/iox-bench >>"$bdir/now.ninja.log" 2>&1; then
		echo "compare_local.sh: tools/iox-bench did not build (is libiceoryx-binding-c-dev" \
			"installed? then: rm -rf build-compare/now)" >&2
		tail -20 "$bdir/now.ninja.log" >&2
		exit 1
	fi
	echo "== building $before_commit into build-compare/before" >&2
	cleanup
	git worktree add --detach "$src_before" "$before_commit" >/dev/null 2>&1
	build "$bdir/before" "$src_before"
	git -C "$src_before" rev-parse HEAD >"$bdir/before.sha"
	cleanup
	dirty=$(git status --porcelain --untracked-files=no | wc -l)
	echo "$(git rev-parse HEAD) ($(git rev-parse --abbrev-ref HEAD))$([ "$dirty" = 0 ] ||
		echo ", with $dirty uncommitted changes")" >"$bdir/now.sha"
fi
if [ -n "$pack" ]; then
	pack_into "$pack"
	exit 0
fi

{
	echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
	echo "loadavg at start: $(cat /proc/loadavg)"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')," \
		"$(nproc) CPUs online"
	echo "kernel: $(uname -srvm)"
	echo "now: $(cat "$bdir/now.sha")"
	echo "before: $(cat "$bdir/before.sha")"
	echo "iceoryx: $(cat "$bdir/iceoryx.version" 2>/dev/null ||
		dpkg-query -W -f '${Version}' iceoryx 2>/dev/null || echo unknown)" \
		"(iox-roudi from $(command -v iox-roudi))"
	echo "command: tools/rgaps-bench/compare_local.sh $args"
	echo "rounds: $rounds"
	echo "raw output: $out"
} >"$out/machine.txt"
cat "$out/machine.txt" >&2

run_rgaps() { # run_rgaps NAME ROUND
	local name=$1 k=$2 exe=$bdir/$1/tools/rgaps-bench
	export RGAPS_PLUGIN_DIR=$bdir/$name/plugins
	"$exe" --spawn-daemon --sizes 4KiB --subs 1,8 --json "$out/r$k-$name-default.json" \
		>"$out/r$k-$name-default.log" 2>&1 ||
		{ tail -30 "$out/r$k-$name-default.log" >&2; return 1; }
	"$exe" --spawn-daemon --sizes 4KiB --subs 1,8 --mode throughput --spin-us 0 \
		--json "$out/r$k-$name-spin0.json" >"$out/r$k-$name-spin0.log" 2>&1 ||
		{ tail -30 "$out/r$k-$name-spin0.log" >&2; return 1; }
}

run_iceoryx() { # run_iceoryx ROUND
	"$bdir/now/tools/iox-bench" --spawn-roudi --size 4096 --subs 1,8 \
		--json "$out/r$1-iceoryx.json" >"$out/r$1-iceoryx.log" 2>&1 ||
		{ tail -30 "$out/r$1-iceoryx.log" >&2; return 1; }
}

contenders=(now before iceoryx)
for ((k = 1; k <= rounds; k++)); do
	for ((j = 0; j < 3; j++)); do
		c=${contenders[$(((j + k - 1) % 3))]}
		echo "== round $k/$rounds: $c ($(cut -d' ' -f1-3 /proc/loadavg))" >&2
		if [ "$c" = iceoryx ]; then run_iceoryx "$k"; else run_rgaps "$c" "$k"; fi
	done
done

summarize "$out/summary.json" "$out" | tee "$out/summary.txt"
echo "raw JSON and logs: $out" >&2
