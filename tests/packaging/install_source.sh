#!/bin/bash
# A newcomer on a clean Debian root, following README.md and docs/PYTHON.md as
# written (docs/TESTING.md, "Docs as written"):
#  1. a clean root of this host's release with what their `apt-get install`
#     lines name and nothing else - no dpkg-dev, so meson must find the
#     library directory itself (tests/packaging/clean_root.sh: cached);
#  2. this tree copied in (what git tracks and does not ignore);
#  3. every block of README.md and docs/PYTHON.md that claims to run, run in
#     one session in the root, in order (tests/docs/docs_blocks.py): the demo,
#     the install from source, rgapsd, rgaps, rgaps-top, the C example built
#     with pkg-config, the Python examples, pip into a venv;
#  4. then what they promise: the library, its .pc and the plugins in
#     /usr/local/lib/<triplet>, none in lib64; programs that find it without
#     LD_LIBRARY_PATH; `import rgaps` from /usr/local/lib/python3.X; rgapsd
#     reading /usr/local/etc/rgaps/rgapsd.json without -c; the README's
#     metrics_listen answering /metrics; the demo's build without its tests;
#     meson set up without a warning; nothing left in /tmp by quickstart.sh.
# The session runs in namespaces of its own (mount, pid, network: loopback
# only), so its daemons die with it and its ports are its own. Skips (77)
# without root, mmdebstrap or the mirror. RGAPS_TEST_KEEP=1 keeps the root.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/rgaps-srctest.XXXXXX")
R="$T/root"
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }
cleanup() {
	local rc=$?
	if [ $rc -ne 0 ] && [ $rc -ne 77 ] && [ -f "$T/session.log" ]; then
		echo "---- session (last 40 lines) ----"
		tail -n 40 "$T/session.log"
	fi
	if [ -n "${RGAPS_TEST_KEEP:-}" ]; then
		echo "kept $T"
	else
		rm -rf --one-file-system "$T"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ "$(id -u)" -eq 0 ] || skip "needs root for the clean root and chroot"
command -v unshare >/dev/null || skip "no unshare (util-linux)"
. "$SRC/tests/packaging/clean_root.sh"
DOCS=(README.md docs/PYTHON.md)
read -r -a PKGS < <(python3 "$SRC/tests/docs/docs_blocks.py" packages "$SRC" "${DOCS[@]}")
[ ${#PKGS[@]} -gt 10 ] || fail "the docs name only these packages: ${PKGS[*]}"
ROOT_LOG="$T/mmdebstrap.log" timeout -k 10 900 bash -c '. "$1"; shift; root_make "$@"' _ \
	"$SRC/tests/packaging/clean_root.sh" "$R" "${PKGS[@]}" 2>"$T/root.why" ||
	skip "no clean root: $(tail -n 1 "$T/root.why")"
[ -e "$R/usr/bin/dpkg-architecture" ] && fail "the clean root has dpkg-dev: meson would not be tested without it"
ok "clean $ROOT_SUITE root: Debian's essential set, apt and the ${#PKGS[@]} packages the docs name (${PKGS[*]})"

# The checkout as a newcomer gets it: what git tracks, and untracked files it does not ignore.
mkdir -p "$R/root/rgaps"
if git -C "$SRC" rev-parse >/dev/null 2>&1; then
	(cd "$SRC" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) |
		tar -C "$R/root/rgaps" -xf - || fail "copying the tree"
else
	tar -C "$SRC" --exclude='./build*' --exclude=./.device -cf - . | tar -C "$R/root/rgaps" -xf - ||
		fail "copying the tree"
fi

# The session: the docs' blocks, then the checks, in one bash in the root.
python3 "$SRC/tests/docs/docs_blocks.py" script "$SRC" /root/rgaps "${DOCS[@]}" >"$R/tmp/docs.sh" ||
	fail "extracting the docs' blocks"
# README's metrics_listen, as it is written there
python3 - "$SRC/README.md" >"$R/tmp/metrics.json" <<'PY' || fail "no metrics_listen block in README.md"
import re, sys
for m in re.finditer(r"^```json\n(.*?)^```", open(sys.argv[1]).read(), re.S | re.M):
    if "metrics_listen" in m.group(1):
        print(m.group(1)); break
else:
    sys.exit(1)
PY
cat >"$R/tmp/checks.sh" <<'EOF'
set -u
fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok: $*"; }
cd /root/rgaps
MA=$(gcc -print-multiarch)
L=/usr/local/lib/$MA
[ -e "$L/librgaps.so.0" ] && [ -e "$L/pkgconfig/librgaps.pc" ] && [ -e "$L/rgaps/plugins/memory-host.so" ] ||
	fail "library, .pc or plugins not in $L: $(ls -R /usr/local/lib* 2>&1 | head -n 20)"
[ -e /usr/local/lib64 ] && fail "something went to /usr/local/lib64: $(ls -R /usr/local/lib64 | head)"
[ "$(echo $(pkg-config --libs librgaps))" = "-L$L -lrgaps" ] || fail "pkg-config --libs librgaps: $(pkg-config --libs librgaps 2>&1)"
env -u LD_LIBRARY_PATH rgaps --version | grep -q '^rgaps ' || fail "rgaps --version: $(rgaps --version 2>&1)"
ldd "$(command -v rgaps)" | grep -q "librgaps.so.0 => $L/librgaps.so.0" || fail "rgaps does not find $L/librgaps.so.0: $(ldd "$(command -v rgaps)" | grep rgaps)"
ok "library, librgaps.pc and plugins in $L; the programs find it; nothing in lib64"
py=$(cd / && python3 -c 'import rgaps; print(rgaps.__file__)') || fail "import rgaps"
case $py in /usr/local/lib/python3.*/dist-packages/rgaps/__init__.py) ;; *) fail "rgaps imported from $py" ;; esac
ok "python3 imports rgaps from ${py%/__init__.py}"
rgapsd --help | grep -q "default /usr/local/etc/rgaps/rgapsd.json" && [ -e /usr/local/etc/rgaps/rgapsd.json ] ||
	fail "rgapsd without -c: $(rgapsd --help | grep -- --config)"
ok "rgapsd without -c reads /usr/local/etc/rgaps/rgapsd.json, where the install put it"
rgapsd --background -c /tmp/metrics.json --socket /tmp/m.sock --instance srcm >/tmp/m.out 2>&1 || fail "rgapsd with README's metrics_listen: $(cat /tmp/m.out)"
python3 - "$(python3 -c 'import json; print(json.load(open("/tmp/metrics.json"))["metrics_listen"])')" <<'PY' || fail "no /metrics"
import sys, urllib.request
text = urllib.request.urlopen(f"http://{sys.argv[1]}/metrics", timeout=10).read().decode()
assert "rgaps_daemon_uptime_seconds{rgaps_instance=\"srcm\"}" in text, text[:300]
print(f"ok: README's metrics_listen {sys.argv[1]}: /metrics answered ({len(text)} bytes)")
PY
[ ! -e build/tests ] || fail "the demo's build/ holds the tests: $(ls build/tests | head)"
ok "the demo's build/ has no tests"
left=$(ls /tmp/rgaps-skips.* 2>/dev/null)
[ -z "$left" ] || fail "quickstart.sh left $left"
ok "quickstart.sh left nothing in /tmp"
EOF
printf '#!/bin/sh\nexec "$@"\n' >"$R/tmp/sudo" && chmod +x "$R/tmp/sudo"
mkdir -p "$R/tmp/bin" && mv "$R/tmp/sudo" "$R/tmp/bin/sudo"

# Namespaces: the session's mounts, processes and ports are its own, and go with it.
timeout -k 10 1200 unshare --mount --pid --fork --net --mount-proc="$R/proc" sh -c '
	R=$1
	mount -t tmpfs -o mode=1777 tmpfs "$R/dev/shm" && mount -t tmpfs tmpfs "$R/run" &&
	ip link set lo up 2>/dev/null
	exec chroot "$R" env -i PATH=/tmp/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive TERM=dumb \
		bash -c "bash /tmp/docs.sh && echo ok: the docs ran as written && bash /tmp/checks.sh" ' \
	_ "$R" >"$T/session.log" 2>&1
rc=$?
grep -E '^(== docs|ok:|FAIL)' "$T/session.log" | sed 's/^/   /'
[ $rc -eq 0 ] || fail "the session in the root exited $rc: $(grep -m1 FAIL "$T/session.log")"
grep -q "^ok: quickstart.sh left nothing" "$T/session.log" || fail "the checks did not all run"
# meson's own warnings when the demo set up build/ (a CUDA toolkit it could not find, a
# dependency it guessed): the output of the first block, up to the second
warn=$(awk '/^== docs: /{ n++ } n == 1' "$T/session.log" | grep -E '^WARNING:' | sort -u)
[ -z "$warn" ] || fail "meson warned: $warn"
ok "a clean root followed README.md and docs/PYTHON.md as written: $(grep -c '^== docs: [^0-9]' "$T/session.log") blocks; meson set up without a warning"
