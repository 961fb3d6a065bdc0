#!/bin/bash
# The packages of this tree (docs/PACKAGING.md, "The test"):
#  1. build the debs with packaging/build-deb.sh; lintian: no error, no warning;
#  2. what each deb holds and depends on: the library and its headers need no
#     daemon (nothing of theirs names rgapsd but a Suggests) and are
#     Multi-Arch: same; the memory plugins are the library's, the transport
#     plugins the daemon's; every manual page is where it belongs;
#  3. every shipped manual page renders with man -l without a groff warning
#     and passes mandoc -T lint; the unit's Documentation= targets are in the
#     rgapsd package under the names the unit gives; README.md and every
#     document it links are shipped uncompressed;
#  4. the extracted rgapsd and rgaps run (publish and verify, stop with
#     SIGTERM); the unit passes systemd-analyze verify; the sysusers file
#     makes user and group rgaps;
#  5. a clean Debian root (mmdebstrap; root and the Debian mirror needed)
#     where apt-get installs librgaps-dev from a local repository of these
#     debs, with Recommends on: rgapsd must stay out; a client built there
#     with pkg-config publishes and takes messages through the extracted
#     rgapsd on the host (a container beside its host's daemon); purge leaves
#     none of the library's files. Without root or mirror, it says what it
#     could not check, and `apt-get --simulate` on the host stands in;
#  6. the rpms build (rpmbuild --nodeps on Debian) and hold the same split.
# Nothing is installed into the system but the tools the test needs (apt-get,
# as root only); everything else lives in one temporary directory, removed
# on exit. Skips (77) where dpkg-buildpackage or the build dependencies are
# missing and cannot be installed (not root). RGAPS_PKG_JOBS: build jobs (2).
# RGAPS_PKG_MIRROR: the mirror for the clean root (default: the host's).
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
JOBS=${RGAPS_PKG_JOBS:-2}
T=$(mktemp -d "${TMPDIR:-/tmp}/rgaps-pkgtest.XXXXXX")
INSTANCE="pkg$$"
DAEMON_PID=
ROOT_PID=
CR_RM_PID=
NOT_CHECKED=()

# Whatever is mounted under $T (a clean root whose mmdebstrap was killed) goes
# before the tree, and rm never crosses into another file system.
unmount_under() {
	local m
	for m in $(findmnt -rn -o TARGET 2>/dev/null | grep -F "$1/" | sort -r); do
		umount -l "$m" 2>/dev/null
	done
}
cleanup() {
	local rc=$?
	[ -n "$DAEMON_PID" ] && kill -9 "$DAEMON_PID" 2>/dev/null
	# Whatever else this test started and is still running (a build, mmdebstrap
	# and its apt and dpkg, a bounded command's children): TERM, which lets
	# mmdebstrap unmount what it mounted, then KILL. By process group, when the
	# test leads its own (meson, a shell's job); else its direct children.
	[ -n "$CR_RM_PID" ] && wait "$CR_RM_PID" 2>/dev/null   # the clean root's removal
	local how=-P
	[ "$(ps -o pgid= -p $$ | tr -d ' ')" = "$$" ] && how=-g
	others() { # not this shell, nor the subshell that runs this function
		local p out=()
		for p in $(pgrep "$how" $$); do
			[ "$p" = $$ ] || [ "$p" = "$BASHPID" ] || out+=("$p")
		done
		echo "${out[*]}"
	}
	if [ -n "$(others)" ]; then
		kill -TERM $(others) 2>/dev/null
		for _ in $(seq 100); do [ -n "$(others)" ] || break; sleep 0.1; done
		kill -KILL $(others) 2>/dev/null
	fi
	wait 2>/dev/null
	if [ $rc -ne 0 ] && [ $rc -ne 77 ] && [ -f "$T/rgapsd.log" ]; then
		echo "---- rgapsd.log (last 15 lines) ----"
		tail -n 15 "$T/rgapsd.log"
	fi
	unmount_under "$T"
	if [ -n "${RGAPS_TEST_KEEP:-}" ]; then
		echo "kept $T"
	else
		# A killed mmdebstrap's own teardown may still be emptying the root: retry.
		for _ in 1 2 3 4 5; do rm -rf --one-file-system "$T" 2>/dev/null && break; sleep 1; done
		[ -e "$T" ] && echo "could not remove $T: $(rm -rf --one-file-system "$T" 2>&1 | head -n 1)"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# bounded SECONDS CMD...: CMD, ended (TERM, then KILL 10 s later) if it runs
# longer. --foreground keeps it in the test's process group, so that a
# signal to the group (meson's timeout, ^C) reaches it and all it started.
bounded() { timeout --foreground -k 10 "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }
skip() { echo "SKIP: $*"; exit 77; }
not_checked() { echo "not checked: $*"; NOT_CHECKED+=("$*"); }
is_root() { [ "$(id -u)" -eq 0 ]; }
apt_install() {
	command -v apt-get >/dev/null || return 1
	{ DEBIAN_FRONTEND=noninteractive bounded 600 apt-get install -y --no-install-recommends "$@" ||
		{ bounded 300 apt-get update &&
		  DEBIAN_FRONTEND=noninteractive bounded 600 apt-get install -y --no-install-recommends "$@"; }
	} >>"$T/apt.log" 2>&1
}
phase() { echo "-- $* (${SECONDS} s)"; }

# ------------------------------------------------------------------ tools
if ! command -v dpkg-buildpackage >/dev/null || ! command -v dh >/dev/null; then
	is_root || skip "dpkg-buildpackage or debhelper missing, and not root to install them"
	apt_install dpkg-dev debhelper build-essential ||
		skip "dpkg-buildpackage missing and apt-get could not install it: $(tail -n 1 "$T/apt.log")"
fi
if ! is_root && ! dpkg-checkbuilddeps "$SRC/packaging/debian/control" >"$T/deps.txt" 2>&1; then
	skip "build dependencies missing, and not root to install them: $(cat "$T/deps.txt")"
fi
# tool package: what the test uses of it
for tp in lintian:lintian rpm:rpmbuild mandoc:mandoc man-db:man mmdebstrap:mmdebstrap; do
	command -v "${tp#*:}" >/dev/null || ! is_root || apt_install "${tp%%:*}" ||
		echo "note: could not install ${tp%%:*}: $(tail -n 1 "$T/apt.log")"
done
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
VERSION=$(sed -n 's/^Version:[[:space:]]*//p' "$SRC/packaging/rpm/rgaps.spec")

# The clean root of part 5 is unpacked (made, the first time) while the packages build
# (mostly waiting on the mirror and the disk), in the test's process group, so that a
# timeout's signal to the group reaches it too: Debian's essential set, apt, and what a
# client build needs (tests/packaging/clean_root.sh).
CR="$T/clean"
. "$SRC/tests/packaging/clean_root.sh"
ROOT_LOG="$T/mmdebstrap.log" root_make "$CR" gcc libc6-dev pkgconf &
ROOT_PID=$!

# ------------------------------------------------------------------ 1. build, lint
phase "building the debs (DEB_BUILD_OPTIONS=nocheck parallel=$JOBS)"
DEB_BUILD_OPTIONS="nocheck parallel=$JOBS" bounded 600 "$SRC/packaging/build-deb.sh" "$T/deb" ||
	fail "build-deb.sh failed"
deb() {
	local f
	f=$(ls "$T"/deb/"$1"_*.deb 2>/dev/null | head -n 1)
	[ -n "$f" ] || fail "no $1 package was built"
	echo "$f"
}
RGAPSD_DEB=$(deb rgapsd)
LIB_DEB=$(deb librgaps0)
DEV_DEB=$(deb librgaps-dev)
TOOLS_DEB=$(deb rgaps-tools)
ok "built $(cd "$T/deb" && ls -- *.deb | tr '\n' ' ')"

if command -v lintian >/dev/null; then
	phase lintian
	root_opt=; is_root && root_opt=--allow-root
	bounded 300 lintian $root_opt --tag-display-limit 0 --display-info "$T"/deb/*.changes \
		>"$T/lintian.txt" 2>&1
	lrc=$?
	[ $lrc -le 1 ] || { cat "$T/lintian.txt"; fail "lintian itself failed ($lrc)"; }
	grep -E '^(E|W|I): ' "$T/lintian.txt" | sed 's/^/  lintian: /'
	errors=$(grep -c '^E: ' "$T/lintian.txt")
	warnings=$(grep -c '^W: ' "$T/lintian.txt")
	[ "$errors" -eq 0 ] && [ "$warnings" -eq 0 ] || fail "lintian: $errors errors, $warnings warnings"
	ok "lintian: no errors, no warnings, $(grep -c '^I: ' "$T/lintian.txt") info tags"
else
	not_checked "lintian (not installed)"
fi

# ------------------------------------------------------------------ 2. contents, relations
phase "contents and relations"
# has DEB PATH...: each PATH (as dpkg-deb -c prints it, less the leading '.') is in DEB.
has() {
	local f=$1 p; shift
	dpkg-deb -c "$f" | awk '{ print $6 }' | sed 's/^\.//' >"$T/list.txt"
	for p in "$@"; do
		grep -qxF "$p" "$T/list.txt" || fail "$(basename "$f") lacks $p"
	done
}
# lacks DEB REGEX: nothing in DEB matches REGEX (after has or list of DEB).
lacks() {
	dpkg-deb -c "$1" | awk '{ print $6 }' | sed 's/^\.//' | grep -E "$2" &&
		fail "$(basename "$1") holds what it must not: $2"
	return 0
}
PLUG=/usr/lib/$MA/rgaps/plugins
MAN=/usr/share/man
has "$RGAPSD_DEB" /usr/sbin/rgapsd "$PLUG/transport-tcp.so" "$PLUG/transport-verbs.so" "$PLUG/stage-crc32c.so" \
	/lib/systemd/system/rgapsd.service /usr/lib/sysusers.d/rgaps.conf /etc/rgaps/rgapsd.json \
	/etc/rgaps/topics.d/example.json.example "$MAN/man8/rgapsd.8.gz" "$MAN/man5/rgapsd.json.5.gz"
lacks "$RGAPSD_DEB" "memory-.*\.so$"
dpkg-deb -I "$RGAPSD_DEB" conffiles | grep -qx /etc/rgaps/rgapsd.json ||
	fail "/etc/rgaps/rgapsd.json is not a conffile"
dpkg-deb -I "$RGAPSD_DEB" postinst >"$T/postinst" 2>/dev/null || fail "rgapsd has no postinst"
grep -q "systemd-sysusers.*rgaps.conf" "$T/postinst" || fail "rgapsd's postinst does not run systemd-sysusers"
grep -q "deb-systemd-helper.*rgapsd.service" "$T/postinst" || fail "rgapsd's postinst does not enable the unit"
dpkg-deb -f "$RGAPSD_DEB" Depends | grep -q "librgaps0 (= $VERSION" ||
	fail "rgapsd does not depend on librgaps0 of its version (the memory plugins): $(dpkg-deb -f "$RGAPSD_DEB" Depends)"
# metrics_listen's HTTP server is libmicrohttpd: the daemon's package pulls it in, the library's not.
dpkg-deb -f "$RGAPSD_DEB" Depends | grep -q "libmicrohttpd" ||
	fail "rgapsd does not depend on libmicrohttpd (metrics_listen): $(dpkg-deb -f "$RGAPSD_DEB" Depends)"
dpkg-deb -f "$LIB_DEB" Depends | grep -q "libmicrohttpd" && fail "librgaps0 depends on libmicrohttpd"
ok "rgapsd: daemon, transport plugins, unit, sysusers, conffile, postinst, rgapsd(8), rgapsd.json(5); depends on librgaps0"

has "$LIB_DEB" "/usr/lib/$MA/librgaps.so.0" "/usr/lib/$MA/librgaps.so.$VERSION" "$PLUG/memory-host.so"
lacks "$LIB_DEB" "librgaps\.so$|transport-.*\.so$|memory-cuda\.so$"
dpkg-deb -I "$LIB_DEB" symbols | grep -q "rgaps_publisher_init@RGAPS_0.1" || fail "librgaps0 has no symbols file"
has "$DEV_DEB" "/usr/lib/$MA/librgaps.so" "/usr/lib/$MA/pkgconfig/librgaps.pc" \
	/usr/include/rgaps/rgaps.h /usr/include/rgaps/plugin.h "$MAN/man3/librgaps.3.gz"
for f in "$LIB_DEB" "$DEV_DEB"; do
	p=$(dpkg-deb -f "$f" Package)
	rel=$(dpkg-deb -f "$f" Pre-Depends Depends Recommends)
	grep -qw rgapsd <<<"$rel" && fail "$p pulls in the daemon: $rel"
	[ "$(dpkg-deb -f "$f" Multi-Arch)" = same ] || fail "$p is not Multi-Arch: same"
done
ok "librgaps0 (library, memory-host plugin, symbols) and librgaps-dev (headers, .so, .pc, librgaps(3)): Multi-Arch: same, neither depends on nor recommends rgapsd"

TOOLS_MAN=("$MAN/man1/rgaps.1.gz" "$MAN/man1/rgaps-bench.1.gz")
has "$TOOLS_DEB" /usr/bin/rgaps /usr/bin/rgaps-bench "${TOOLS_MAN[@]}"
if grep -q "/usr/bin/rgaps-top$" "$T/list.txt"; then
	TOOLS_MAN+=("$MAN/man1/rgaps-top.1.gz")
	has "$TOOLS_DEB" "$MAN/man1/rgaps-top.1.gz"
	ok "rgaps-tools: rgaps, rgaps-bench, rgaps-top and their pages"
else
	grep -q "rgaps-top.1" "$T/list.txt" && fail "rgaps-tools has rgaps-top(1) but no rgaps-top"
	ok "rgaps-tools: rgaps, rgaps-bench and their pages (no ncurses: no rgaps-top)"
fi

# ------------------------------------------------------------------ 3. pages, links, docs
phase "manual pages, Documentation=, docs"
R="$T/root"
for f in "$RGAPSD_DEB" "$LIB_DEB" "$DEV_DEB" "$TOOLS_DEB"; do dpkg -x "$f" "$R" || fail "dpkg -x $f"; done
PAGES=("$MAN/man8/rgapsd.8.gz" "$MAN/man5/rgapsd.json.5.gz" "$MAN/man3/librgaps.3.gz" "${TOOLS_MAN[@]}")
if command -v man >/dev/null; then
	for p in "${PAGES[@]}"; do
		MANWIDTH=80 man --warnings -E UTF-8 -l "$R$p" >"$T/page.txt" 2>"$T/page.err"
		[ -s "$T/page.err" ] && fail "man -l $p warns: $(head -n 5 "$T/page.err")"
		[ "$(wc -l <"$T/page.txt")" -gt 20 ] || fail "man -l $p rendered $(wc -l <"$T/page.txt") lines"
	done
	ok "man --warnings -l renders all ${#PAGES[@]} shipped pages without a warning"
else
	not_checked "rendering the pages (no man)"
fi
if command -v mandoc >/dev/null; then
	for p in "${PAGES[@]}"; do
		# Cross-references resolve only where pages are installed (man-pages test checks ours).
		mandoc -T lint -W style "$R$p" 2>&1 |
			grep -v -E "referenced manual not found|outdated mandoc.db" >"$T/lint.txt"
		[ -s "$T/lint.txt" ] && fail "mandoc -T lint $p: $(cat "$T/lint.txt")"
	done
	ok "mandoc -T lint: all ${#PAGES[@]} shipped pages clean"
else
	not_checked "mandoc -T lint of the shipped pages (no mandoc)"
fi

UNIT="$R/lib/systemd/system/rgapsd.service"   # Debian 12: /lib (packaging/debian/rules)
docs=$(sed -n 's/^Documentation=//p' "$UNIT")
[ -n "$docs" ] || fail "the unit has no Documentation="
for d in $docs; do
	case $d in
	man:*\(*\))
		page=${d#man:}; sec=${page#*\(}; sec=${sec%\)}; page=${page%%\(*}
		[ -f "$R$MAN/man$sec/$page.$sec.gz" ] || [ -f "$R$MAN/man$sec/$page.$sec" ] ||
			fail "Documentation=$d: rgapsd has no $MAN/man$sec/$page.$sec(.gz)" ;;
	file:/*)
		dpkg-deb -c "$RGAPSD_DEB" | awk '{ print $6 }' | grep -qxF ".${d#file:}" ||
			fail "Documentation=$d: not in rgapsd (compressed to .gz?)" ;;
	http://* | https://*) ;;
	*) fail "Documentation=$d: not a man:, file: or http(s): URI" ;;
	esac
done
ok "Documentation= targets are in rgapsd: $docs"

DOC=$R/usr/share/doc/rgapsd
[ -f "$DOC/README.md" ] || fail "rgapsd does not ship README.md uncompressed"
outside=()
for l in $(grep -oE '\]\([^)#]+' "$SRC/README.md" | sed 's/^](//' | sort -u); do
	case $l in
	http://* | https://* | mailto:*) continue ;;
	../*) outside+=("$l"); continue ;;   # outside this tree: not ours to ship
	*.md) [ -f "$DOC/$l" ] || fail "README.md links $l, which rgapsd does not ship at $DOC/$l" ;;
	esac
done
ls "$DOC"/docs/*.md.gz >/dev/null 2>&1 && fail "docs were compressed: the README's links break"
ok "README.md and the $(grep -oE '\]\(docs/[^)#]+\.md' "$SRC/README.md" | sort -u | wc -l) documents it links are in $DOC, uncompressed${outside:+; links outside the tree, not shipped: ${outside[*]}}"

# ------------------------------------------------------------------ 4. run them, the unit
phase "running the extracted daemon and CLI"
export LD_LIBRARY_PATH="$R/usr/lib/$MA"
export RGAPS_PLUGIN_DIR="$R$PLUG"   # the library loads memory plugins too
export RGAPS_SOCKET="$T/rgapsd.sock"
RGAPSD="$R/usr/sbin/rgapsd"
RGAPS="$R/usr/bin/rgaps"
ldd "$RGAPS" | grep -q "librgaps.so.0 => $R/usr/lib/$MA/librgaps.so.0" ||
	fail "the extracted rgaps does not use the extracted librgaps: $(ldd "$RGAPS" | grep librgaps)"
v=$("$RGAPSD" --version) || fail "rgapsd --version"
[ "$v" = "rgapsd $VERSION" ] || fail "rgapsd --version says '$v'"
out=$(bounded 10 "$RGAPSD" --config "$R/etc/rgaps/rgapsd.json" --plugin-dir "$RGAPS_PLUGIN_DIR" \
	--check-config 2>&1) || fail "the packaged configuration is refused: $out"
[ "$out" = "configuration OK: 0 topics" ] || fail "packaged configuration: '$out' (the example must stay inactive)"
ok "packaged /etc/rgaps/rgapsd.json accepted, topics.d/example.json.example inactive"

# start_daemon SOCKET: the extracted rgapsd on the packaged configuration.
start_daemon() {
	"$RGAPSD" --config "$R/etc/rgaps/rgapsd.json" --socket "$1" --instance "$INSTANCE" \
		--plugin-dir "$RGAPS_PLUGIN_DIR" >>"$T/rgapsd.log" 2>&1 &
	DAEMON_PID=$!
	for _ in $(seq 100); do
		[ -S "$1" ] && RGAPS_SOCKET=$1 bounded 5 "$RGAPS" topics >/dev/null 2>&1 && return 0
		kill -0 "$DAEMON_PID" 2>/dev/null || fail "the packaged rgapsd exited at start"
		sleep 0.05
	done
	fail "the packaged rgapsd did not come up in 5 s"
}
stop_daemon() {
	kill -TERM "$DAEMON_PID"
	for _ in $(seq 100); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.05; done
	kill -0 "$DAEMON_PID" 2>/dev/null && fail "the packaged rgapsd ignored SIGTERM for 5 s"
	wait "$DAEMON_PID"; local rc=$?
	DAEMON_PID=
	[ $rc -eq 0 ] || fail "rgapsd exited $rc after SIGTERM"
}
start_daemon "$RGAPS_SOCKET"
grep -q "plugins $RGAPS_PLUGIN_DIR" "$T/rgapsd.log" || fail "rgapsd does not use the packaged plugins: $(grep serving "$T/rgapsd.log")"
bounded 60 "$RGAPS" sub pkgtest --count 40 --verify --timeout 30 >"$T/sub.out" 2>&1 &
SUB=$!
bounded 60 "$RGAPS" pub pkgtest --count 40 --size 16-1MiB --wait-subscribers 1 --timeout 20 \
	>"$T/pub.out" 2>&1 || fail "rgaps pub: $(tail -n 3 "$T/pub.out")"
wait $SUB || fail "rgaps sub: $(tail -n 3 "$T/sub.out")"
grep -q "received 40 verified 40 mismatched 0 gaps 0 drops 0" "$T/sub.out" ||
	fail "subscriber: $(tail -n 1 "$T/sub.out")"
ok "packaged rgapsd + rgaps: 40 messages of 16 B to 1 MiB published, received and verified"
stop_daemon
[ -e "$RGAPS_SOCKET" ] && fail "socket left after SIGTERM"
ok "SIGTERM (the unit's KillSignal): clean exit 0, socket gone"

grep -qx "ExecStart=/usr/sbin/rgapsd --config /etc/rgaps/rgapsd.json" "$UNIT" || fail "unit: unexpected ExecStart"
for k in User=rgaps Group=rgaps RuntimeDirectory=rgaps RuntimeDirectoryMode=0750 \
	LimitMEMLOCK=infinity KillSignal=SIGTERM Restart=on-failure; do
	grep -qx "$k" "$UNIT" || fail "unit lacks $k"
done
grep -q "^PrivateDevices=yes" "$UNIT" && fail "unit has PrivateDevices=yes: rgapsd needs /dev/nvidia* and /dev/infiniband"
if command -v systemd-sysusers >/dev/null; then
	mkdir -p "$T/sysroot/etc"
	bounded 30 systemd-sysusers --root="$T/sysroot" "$R/usr/lib/sysusers.d/rgaps.conf" >"$T/sysusers.txt" 2>&1 ||
		fail "systemd-sysusers: $(cat "$T/sysusers.txt")"
	grep -q '^rgaps:' "$T/sysroot/etc/passwd" && grep -q '^rgaps:' "$T/sysroot/etc/group" ||
		fail "the sysusers file does not create user and group rgaps"
	ok "sysusers file creates user and group rgaps (systemd-sysusers --root)"
else
	not_checked "sysusers file (no systemd-sysusers)"
fi
if command -v systemd-analyze >/dev/null; then
	# verify checks that ExecStart's program exists and that man opens each man:
	# Documentation= page: point both into the extracted tree.
	mkdir -p "$T/unit"
	sed "s|^ExecStart=/usr/sbin/rgapsd|ExecStart=$RGAPSD|" "$UNIT" >"$T/unit/rgapsd.service"
	(cd "$T/unit" && MANPATH="$R$MAN" bounded 60 systemd-analyze verify "$T/unit/rgapsd.service") \
		>"$T/verify.txt" 2>&1 || fail "systemd-analyze verify: $(cat "$T/verify.txt")"
	[ -s "$T/verify.txt" ] && fail "systemd-analyze verify complains: $(cat "$T/verify.txt")"
	ok "systemd-analyze verify: unit clean, its Documentation= pages open with man"
else
	not_checked "systemd-analyze verify (no systemd-analyze)"
fi

# ------------------------------------------------------------------ 5. a clean root
# The dependencies as apt sees them on this host, without installing anything.
phase "clean root"
if command -v apt-get >/dev/null; then
	(cd "$T/deb" && apt-get install --simulate -o Debug::NoLocking=1 \
		./"$(basename "$LIB_DEB")" ./"$(basename "$DEV_DEB")") >"$T/simulate.txt" 2>&1 ||
		fail "apt-get --simulate install librgaps0 librgaps-dev: $(tail -n 3 "$T/simulate.txt")"
	grep -E '^Inst ' "$T/simulate.txt" | grep -qw rgapsd &&
		fail "apt would install rgapsd with librgaps-dev: $(grep '^Inst' "$T/simulate.txt")"
	ok "apt-get --simulate: librgaps0 and librgaps-dev install without rgapsd ($(grep -c '^Inst ' "$T/simulate.txt") packages)"
fi

# chroot_run CMD...: CMD inside the clean root, bounded, no input.
chroot_run() { bounded 300 chroot "$CR" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
	DEBIAN_FRONTEND=noninteractive "$@" </dev/null; }
clean_root() {
	wait "$ROOT_PID"; local rc=$?
	ROOT_PID=
	if [ $rc -ne 0 ]; then
		is_root || { not_checked "install into a clean root (needs root for mmdebstrap and chroot)"; return; }
		not_checked "install into a clean root: no $ROOT_SUITE root from $ROOT_MIRROR: $(grep -E '^E: ' "$T/mmdebstrap.log" | tail -n 1; command -v mmdebstrap >/dev/null || echo no mmdebstrap)"
		return
	fi
	ok "clean $ROOT_SUITE root from $ROOT_MIRROR (mmdebstrap --variant=apt, gcc, libc6-dev, pkgconf; $ROOT_CACHE), unpacked while the packages built"
	# A local repository of every deb built, as a site would publish them.
	mkdir -p "$CR/srv/rgaps"
	cp "$T"/deb/*.deb "$CR/srv/rgaps/"
	chmod -R a+rX "$CR/srv/rgaps"
	(cd "$CR/srv/rgaps" && dpkg-scanpackages --multiversion . /dev/null >Packages 2>/dev/null) ||
		fail "dpkg-scanpackages"
	echo "deb [trusted=yes] file:/srv/rgaps ./" >"$CR/etc/apt/sources.list.d/rgaps.list"
	cp /etc/resolv.conf "$CR/etc/resolv.conf" 2>/dev/null
	chroot_run apt-get update -o Dir::Etc::SourceList=/etc/apt/sources.list.d/rgaps.list \
		-o Dir::Etc::SourceParts=- -o APT::Get::List-Cleanup=0 >"$T/cr-update.txt" 2>&1 ||
		fail "apt-get update of the local repository: $(tail -n 3 "$T/cr-update.txt")"
	chroot_run apt-cache policy rgapsd | grep -q "Candidate: $VERSION" ||
		fail "the clean root's apt does not see rgapsd $VERSION in the local repository"
	# As an administrator would, Recommends on: rgapsd is there to take, and must not be.
	if ! chroot_run apt-get install -y -o APT::Install-Recommends=true librgaps-dev >"$T/cr-install.txt" 2>&1; then
		if grep -qE "^(E|Err): .*(Failed to fetch|Could not resolve|Unable to connect)" "$T/cr-install.txt"; then
			not_checked "install into a clean root: apt-get cannot fetch dependencies: $(grep -E '^(E|Err):' "$T/cr-install.txt" | tail -n 1)"
			return
		fi
		fail "apt-get install librgaps-dev in a clean root: $(tail -n 5 "$T/cr-install.txt")"
	fi
	chroot_run dpkg-query -W -f '${Status}' rgapsd 2>/dev/null | grep -q "ok installed" &&
		fail "installing librgaps-dev installed rgapsd: $(grep -E '^(Get|Setting up)' "$T/cr-install.txt")"
	[ -e "$CR/usr/sbin/rgapsd" ] || [ -e "$CR/lib/systemd/system/rgapsd.service" ] &&
		fail "the clean root has rgapsd's files"
	for p in "/usr/lib/$MA/librgaps.so.0" "$PLUG/memory-host.so" "/usr/include/rgaps/rgaps.h" \
		"$MAN/man3/librgaps.3.gz"; do
		[ -e "$CR$p" ] || fail "the clean root lacks $p after installing librgaps-dev"
	done
	ok "apt-get install librgaps-dev (Recommends on): $(grep -c '^Setting up' "$T/cr-install.txt") packages set up, rgapsd not among them"

	# A client built there, beside the host's daemon: the socket in the root's /run/rgaps.
	cat >"$CR/tmp/client.c" <<-'EOF'
	#include <errno.h>
	#include <stdint.h>
	#include <stdio.h>
	#include <string.h>
	#include <rgaps/rgaps.h>

	int main(void)
	{
		static unsigned char buf[65536];
		rgaps_subscriber_t *sub = rgaps_subscriber_init("pkgtest-clean");
		rgaps_publisher_t *pub = sub ? rgaps_publisher_init("pkgtest-clean") : NULL;
		rgaps_msg_t m;
		int r;

		if (!sub || !pub) {
			fprintf(stderr, "attach: %s\n", rgaps_strerror(errno));
			return 1;
		}
		for (int i = 0; i < 10; i++) {
			memset(buf, i, sizeof(buf));
			r = rgaps_publisher_push(pub, sizeof(buf), buf);
			if (!r)
				r = rgaps_subscriber_take(sub, &m, 10000);
			if (r) {
				fprintf(stderr, "message %d: %s\n", i, rgaps_strerror(r));
				return 1;
			}
			if (m.size != sizeof(buf) || m.seq != (uint64_t)i ||
			    ((unsigned char *)m.data)[m.size - 1] != i) {
				fprintf(stderr, "message %d: wrong size, seq or bytes\n", i);
				return 1;
			}
			rgaps_subscriber_release(sub, &m);
		}
		rgaps_publisher_destroy(pub);
		rgaps_subscriber_destroy(sub);
		puts("10 messages published and taken");
		return 0;
	}
	EOF
	chroot_run sh -c 'cc -Wall -Werror -o /tmp/client /tmp/client.c $(pkg-config --cflags --libs librgaps)' \
		>"$T/cr-cc.txt" 2>&1 || fail "a client does not build with librgaps-dev's pkg-config: $(cat "$T/cr-cc.txt")"
	chroot_run /tmp/client >"$T/cr-client.txt" 2>&1 &&
		fail "the client ran without a daemon: $(cat "$T/cr-client.txt")"
	grep -q "no rgapsd socket at /run/rgaps/rgapsd.sock" "$T/cr-client.txt" ||
		fail "the client without a daemon says: $(cat "$T/cr-client.txt")"
	mkdir -p "$CR/run/rgaps"
	start_daemon "$CR/run/rgaps/rgapsd.sock"
	chroot_run /tmp/client >"$T/cr-client.txt" 2>&1 ||
		fail "the client built in the clean root: $(cat "$T/cr-client.txt")"
	stop_daemon
	ok "a client built there with pkg-config ($(cat "$T/cr-client.txt")) through the host's rgapsd, using the root's librgaps0 and memory plugin; without a daemon it says: no rgapsd socket at /run/rgaps/rgapsd.sock"

	chroot_run apt-get purge -y librgaps-dev librgaps0 >"$T/cr-purge.txt" 2>&1 ||
		fail "apt-get purge: $(tail -n 3 "$T/cr-purge.txt")"
	left=$(cd "$CR" && ls -d "usr/lib/$MA/rgaps" "usr/lib/$MA"/librgaps* usr/include/rgaps \
		usr/share/doc/librgaps* "usr/share/man/man3/librgaps.3.gz" 2>/dev/null)
	[ -z "$left" ] || fail "purge left: $left"
	ok "apt-get purge librgaps-dev librgaps0 leaves none of their files"
	# 400 MB of small files: removed while the rpms build, not after.
	rm -rf --one-file-system "$CR" &
	CR_RM_PID=$!
}
clean_root

# ------------------------------------------------------------------ 6. rpm
if command -v rpmbuild >/dev/null; then
	nodeps=; command -v dpkg >/dev/null && nodeps=--nodeps   # build deps are debs here
	phase "building the rpms (rpmbuild -bb $nodeps --without check)"
	RPM_BUILD_NCPUS=$JOBS bounded 600 "$SRC/packaging/build-rpm.sh" "$T/rpm" $nodeps --without check ||
		fail "build-rpm.sh failed"
	rpmf() {
		local f
		f=$(ls "$T"/rpm/"$1"-[0-9]*.rpm 2>/dev/null | head -n 1)
		[ -n "$f" ] || fail "no $1 rpm was built"
		echo "$f"
	}
	# rhas RPM PATH...: each PATH (an extended regular expression) is in rpm -qlp RPM.
	rhas() {
		local f=$1 p; shift
		rpm -qlp "$f" >"$T/rlist.txt" 2>/dev/null || fail "rpm -qlp $f"
		for p in "$@"; do grep -qxE "$p" "$T/rlist.txt" || fail "$(basename "$f") lacks $p"; done
	}
	# Fedora's rpm compresses manual pages and names doc folders NAME; Debian's
	# rpm leaves the pages and names them NAME-VERSION.
	GZ='(\.gz)?'
	LIBDIR=$(rpm --eval '%{_libdir}')
	RMAN=$(rpm --eval '%{_mandir}')
	RPLUG=$LIBDIR/rgaps/plugins
	f=$(rpmf rgapsd)
	rhas "$f" /usr/sbin/rgapsd "$RPLUG/transport-tcp.so" "$RPLUG/transport-verbs.so" "$RPLUG/stage-crc32c.so" \
		/usr/lib/systemd/system/rgapsd.service /usr/lib/sysusers.d/rgaps.conf /etc/rgaps/rgapsd.json \
		/etc/rgaps/topics.d/example.json.example "$RMAN/man8/rgapsd.8$GZ" "$RMAN/man5/rgapsd.json.5$GZ" \
		"/usr/share/doc/rgapsd(-$VERSION)?/README.md" "/usr/share/doc/rgapsd(-$VERSION)?/docs/PROTOCOL.md"
	grep -q "memory-" "$T/rlist.txt" && fail "rpm rgapsd holds a memory plugin (librgaps's)"
	rpm -qp --configfiles "$f" 2>/dev/null | grep -qx /etc/rgaps/rgapsd.json || fail "rpm: rgapsd.json is not %config"
	rpm -qp --scripts "$f" 2>/dev/null >"$T/scripts.txt"
	grep -q "systemctl.*rgapsd.service" "$T/scripts.txt" || fail "rpm: no systemd scriptlets for rgapsd.service"
	grep -qE "useradd|sysusers" "$T/scripts.txt" || fail "rpm: no %pre that creates the rgaps user"
	f=$(rpmf librgaps)
	rhas "$f" "$LIBDIR/librgaps.so.0" "$LIBDIR/librgaps.so.$VERSION" "$RPLUG/memory-host.so"
	rpm -qp --requires "$f" 2>/dev/null | grep -q "^rgapsd" && fail "rpm librgaps requires rgapsd"
	rhas "$(rpmf librgaps-devel)" "$LIBDIR/librgaps.so" "$LIBDIR/pkgconfig/librgaps.pc" \
		/usr/include/rgaps/rgaps.h /usr/include/rgaps/plugin.h "$RMAN/man3/librgaps.3$GZ"
	rpm -qp --requires "$(rpmf librgaps-devel)" 2>/dev/null | grep -q "^rgapsd" && fail "rpm librgaps-devel requires rgapsd"
	rhas "$(rpmf rgaps-tools)" /usr/bin/rgaps /usr/bin/rgaps-bench "$RMAN/man1/rgaps.1$GZ" "$RMAN/man1/rgaps-bench.1$GZ"
	ok "rpms: $(cd "$T/rpm" && ls -- *.rpm | tr '\n' ' ')hold the same split, with the manual pages and the docs"
else
	not_checked "rpm packages (no rpmbuild; Debian: apt-get install rpm)"
fi

if [ ${#NOT_CHECKED[@]} -gt 0 ]; then
	echo "passed, but not checked here: ${NOT_CHECKED[*]}"
fi
echo "packages: all checks passed in ${SECONDS} s"
