#!/bin/bash
# The packages of this tree (docs/PACKAGING.md): build the debs with
# packaging/build-deb.sh, lint them (any lintian error fails), check what each
# holds, extract rgapsd, librgaps0 and rgaps-tools with dpkg -x and run that
# daemon and CLI (publish and verify messages, stop with SIGTERM), check the
# systemd unit (systemd-analyze verify) and the sysusers file, then build the
# rpms with packaging/build-rpm.sh and check what they hold. Nothing is
# installed into the system but build tools and build dependencies (apt-get,
# as root only); everything else lives in one temporary directory, removed on
# exit. Skips (77) where dpkg-buildpackage or the build dependencies are
# missing and cannot be installed (not root). RGAPS_PKG_JOBS: build jobs (2).
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
JOBS=${RGAPS_PKG_JOBS:-2}
T=$(mktemp -d "${TMPDIR:-/tmp}/rgaps-pkgtest.XXXXXX")
INSTANCE="pkg$$"
DAEMON_PID=
NOT_CHECKED=()

cleanup() {
	local rc=$?
	[ -n "$DAEMON_PID" ] && kill -9 "$DAEMON_PID" 2>/dev/null
	wait 2>/dev/null
	if [ $rc -ne 0 ] && [ $rc -ne 77 ] && [ -f "$T/rgapsd.log" ]; then
		echo "---- rgapsd.log (last 15 lines) ----"
		tail -n 15 "$T/rgapsd.log"
	fi
	rm -f /dev/shm/rgaps-"$INSTANCE"* 2>/dev/null
	if [ -n "${RGAPS_TEST_KEEP:-}" ]; then echo "kept $T"; else rm -rf "$T"; fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }
skip() { echo "SKIP: $*"; exit 77; }
not_checked() { echo "not checked: $*"; NOT_CHECKED+=("$*"); }
is_root() { [ "$(id -u)" -eq 0 ]; }
apt_install() {
	command -v apt-get >/dev/null || return 1
	{ DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y --no-install-recommends "$@" ||
		{ timeout 300 apt-get update &&
		  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y --no-install-recommends "$@"; }
	} >>"$T/apt.log" 2>&1
}

# ------------------------------------------------------------------ tools
if ! command -v dpkg-buildpackage >/dev/null || ! command -v dh >/dev/null; then
	is_root || skip "dpkg-buildpackage or debhelper missing, and not root to install them"
	apt_install dpkg-dev debhelper build-essential ||
		skip "dpkg-buildpackage missing and apt-get could not install it: $(tail -n 1 "$T/apt.log")"
fi
if ! is_root && ! dpkg-checkbuilddeps "$SRC/packaging/debian/control" >"$T/deps.txt" 2>&1; then
	skip "build dependencies missing, and not root to install them: $(cat "$T/deps.txt")"
fi
if ! command -v lintian >/dev/null && is_root; then apt_install lintian; fi
if ! command -v rpmbuild >/dev/null && is_root; then apt_install rpm; fi
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH)

# ------------------------------------------------------------------ debs
echo "building the debs (DEB_BUILD_OPTIONS=nocheck parallel=$JOBS)"
DEB_BUILD_OPTIONS="nocheck parallel=$JOBS" timeout 600 "$SRC/packaging/build-deb.sh" "$T/deb" ||
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

# ------------------------------------------------------------------ lintian
if command -v lintian >/dev/null; then
	root_opt=; is_root && root_opt=--allow-root
	timeout 300 lintian $root_opt --tag-display-limit 0 --display-info "$T"/deb/*.changes \
		>"$T/lintian.txt" 2>&1
	lrc=$?
	[ $lrc -le 1 ] || { cat "$T/lintian.txt"; fail "lintian itself failed ($lrc)"; }
	errors=$(grep -c '^E: ' "$T/lintian.txt")
	warnings=$(grep -c '^W: ' "$T/lintian.txt")
	infos=$(grep -c '^I: ' "$T/lintian.txt")
	grep -E '^(E|W): ' "$T/lintian.txt" | sed 's/^/  lintian: /'
	[ "$errors" -eq 0 ] || fail "lintian: $errors errors"
	ok "lintian: 0 errors, $warnings warnings, $infos info tags"
else
	not_checked "lintian (not installed)"
fi

# ------------------------------------------------------------------ contents
# has DEB PATH...: each PATH (as dpkg-deb -c prints it, less the leading '.') is in DEB.
has() {
	local f=$1 p; shift
	dpkg-deb -c "$f" | awk '{ print $6 }' >"$T/list.txt"
	for p in "$@"; do
		grep -qx "\.$p" "$T/list.txt" || fail "$(basename "$f") lacks $p"
	done
}
PLUG=/usr/lib/$MA/rgaps/plugins
has "$RGAPSD_DEB" /usr/sbin/rgapsd "$PLUG/memory-host.so" "$PLUG/transport-tcp.so" \
	"$PLUG/transport-verbs.so" /lib/systemd/system/rgapsd.service \
	/usr/lib/sysusers.d/rgaps.conf /etc/rgaps/rgapsd.json \
	/etc/rgaps/topics.d/example.json.example /usr/share/man/man8/rgapsd.8.gz
grep -q "memory-cuda.so" "$T/list.txt" && fail "rgapsd holds memory-cuda.so, but the package is built without CUDA"
dpkg-deb -I "$RGAPSD_DEB" conffiles | grep -qx /etc/rgaps/rgapsd.json ||
	fail "/etc/rgaps/rgapsd.json is not a conffile"
dpkg-deb -I "$RGAPSD_DEB" postinst >"$T/postinst" 2>/dev/null || fail "rgapsd has no postinst"
grep -q "systemd-sysusers.*rgaps.conf" "$T/postinst" || fail "rgapsd's postinst does not run systemd-sysusers"
grep -q "deb-systemd-helper.*rgapsd.service" "$T/postinst" || fail "rgapsd's postinst does not enable the unit"
ok "rgapsd: daemon, plugins (memory-host, transport-tcp, transport-verbs), unit, sysusers, conffile, postinst"
has "$LIB_DEB" "/usr/lib/$MA/librgaps.so.0" "/usr/lib/$MA/librgaps.so.0.1.0"
grep -q "librgaps.so$" "$T/list.txt" && fail "librgaps0 holds the librgaps.so link (librgaps-dev's)"
dpkg-deb -I "$LIB_DEB" symbols | grep -q "rgaps_publisher_init@RGAPS_0.1" || fail "librgaps0 has no symbols file"
ok "librgaps0: librgaps.so.0, symbols"
has "$DEV_DEB" "/usr/lib/$MA/librgaps.so" "/usr/lib/$MA/pkgconfig/librgaps.pc" \
	/usr/include/rgaps/rgaps.h /usr/include/rgaps/plugin.h
ok "librgaps-dev: headers, librgaps.so, librgaps.pc"
has "$TOOLS_DEB" /usr/bin/rgaps /usr/bin/rgaps-bench /usr/share/man/man1/rgaps.1.gz
if grep -q "rgaps-top" "$SRC/tools/meson.build" && pkg-config --exists ncurses; then
	has "$TOOLS_DEB" /usr/bin/rgaps-top
	ok "rgaps-tools: rgaps, rgaps-bench, rgaps-top"
else
	grep -q "/rgaps-top$" "$T/list.txt" && fail "rgaps-tools holds rgaps-top, which this tree does not build"
	ok "rgaps-tools: rgaps, rgaps-bench (this tree builds no rgaps-top)"
fi

# ------------------------------------------------------------------ run the packaged programs
R="$T/root"
for f in "$RGAPSD_DEB" "$LIB_DEB" "$DEV_DEB" "$TOOLS_DEB"; do dpkg -x "$f" "$R" || fail "dpkg -x $f"; done
export LD_LIBRARY_PATH="$R/usr/lib/$MA"
export RGAPS_PLUGIN_DIR="$R$PLUG"   # the library loads memory plugins too
export RGAPS_SOCKET="$T/rgapsd.sock"
RGAPSD="$R/usr/sbin/rgapsd"
RGAPS="$R/usr/bin/rgaps"
ldd "$RGAPS" | grep -q "librgaps.so.0 => $R/usr/lib/$MA/librgaps.so.0" ||
	fail "the extracted rgaps does not use the extracted librgaps: $(ldd "$RGAPS" | grep librgaps)"
v=$("$RGAPSD" --version) || fail "rgapsd --version"
[ "$v" = "rgapsd $(sed -n 's/^Version:[[:space:]]*//p' "$SRC/packaging/rpm/rgaps.spec")" ] ||
	fail "rgapsd --version says '$v'"
out=$(timeout 10 "$RGAPSD" --config "$R/etc/rgaps/rgapsd.json" --plugin-dir "$RGAPS_PLUGIN_DIR" \
	--check-config 2>&1) || fail "the packaged configuration is refused: $out"
[ "$out" = "configuration OK: 0 topics" ] || fail "packaged configuration: '$out' (the example must stay inactive)"
ok "packaged /etc/rgaps/rgapsd.json accepted, topics.d/example.json.example inactive"

# A client built against the extracted librgaps-dev (pkg-config, headers, link).
if command -v cc >/dev/null; then
	cat >"$T/client.c" <<-'EOF'
	#include <errno.h>
	#include <stdio.h>
	#include <rgaps/rgaps.h>
	int main(void) { puts(rgaps_strerror(-ENOENT)); return 0; }
	EOF
	flags=$(PKG_CONFIG_SYSROOT_DIR="$R" PKG_CONFIG_LIBDIR="$R/usr/lib/$MA/pkgconfig" \
		pkg-config --cflags --libs librgaps) || fail "pkg-config librgaps from librgaps-dev"
	# shellcheck disable=SC2086
	cc -o "$T/client" "$T/client.c" $flags 2>"$T/cc.txt" || fail "client against librgaps-dev: $(cat "$T/cc.txt")"
	"$T/client" >/dev/null || fail "client against librgaps-dev does not run"
	ok "a client builds with librgaps-dev's pkg-config file and runs"
else
	not_checked "building a client against librgaps-dev (no cc)"
fi

"$RGAPSD" --config "$R/etc/rgaps/rgapsd.json" --socket "$RGAPS_SOCKET" --instance "$INSTANCE" \
	--plugin-dir "$RGAPS_PLUGIN_DIR" >"$T/rgapsd.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 100); do
	[ -S "$RGAPS_SOCKET" ] && timeout 5 "$RGAPS" topics >/dev/null 2>&1 && break
	kill -0 "$DAEMON_PID" 2>/dev/null || fail "the packaged rgapsd exited at start"
	sleep 0.05
done
[ -S "$RGAPS_SOCKET" ] || fail "the packaged rgapsd did not come up in 5 s"
grep -q "plugins $RGAPS_PLUGIN_DIR" "$T/rgapsd.log" || fail "rgapsd does not use the packaged plugins: $(grep serving "$T/rgapsd.log")"
timeout 60 "$RGAPS" sub pkgtest --count 40 --verify --timeout 30 >"$T/sub.out" 2>&1 &
SUB=$!
timeout 60 "$RGAPS" pub pkgtest --count 40 --size 16-1MiB --wait-subscribers 1 --timeout 20 \
	>"$T/pub.out" 2>&1 || fail "rgaps pub: $(tail -n 3 "$T/pub.out")"
wait $SUB || fail "rgaps sub: $(tail -n 3 "$T/sub.out")"
grep -q "received 40 verified 40 mismatched 0 gaps 0 drops 0" "$T/sub.out" ||
	fail "subscriber: $(tail -n 1 "$T/sub.out")"
ok "packaged rgapsd + rgaps: 40 messages of 16 B to 1 MiB published, received and verified"
kill -TERM "$DAEMON_PID"
for _ in $(seq 100); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.05; done
kill -0 "$DAEMON_PID" 2>/dev/null && fail "the packaged rgapsd ignored SIGTERM for 5 s"
wait "$DAEMON_PID"; rc=$?
DAEMON_PID=
[ $rc -eq 0 ] || fail "rgapsd exited $rc after SIGTERM"
[ -e "$RGAPS_SOCKET" ] && fail "socket left after SIGTERM"
compgen -G "/dev/shm/rgaps-$INSTANCE-*" >/dev/null && fail "segments left after SIGTERM"
ok "SIGTERM (the unit's KillSignal): clean exit 0, socket and segments gone"

# ------------------------------------------------------------------ systemd
UNIT="$R/lib/systemd/system/rgapsd.service"   # Debian 12: /lib (packaging/debian/rules)
grep -qx "ExecStart=/usr/sbin/rgapsd --config /etc/rgaps/rgapsd.json" "$UNIT" || fail "unit: unexpected ExecStart"
for k in Type=exec User=rgaps Group=rgaps RuntimeDirectory=rgaps RuntimeDirectoryMode=0750 \
	LimitMEMLOCK=infinity KillSignal=SIGTERM Restart=on-failure; do
	grep -qx "$k" "$UNIT" || fail "unit lacks $k"
done
grep -q "^PrivateDevices=yes" "$UNIT" && fail "unit has PrivateDevices=yes: rgapsd needs /dev/nvidia* and /dev/infiniband"
if command -v systemd-sysusers >/dev/null; then
	mkdir -p "$T/sysroot/etc"
	timeout 30 systemd-sysusers --root="$T/sysroot" "$R/usr/lib/sysusers.d/rgaps.conf" >"$T/sysusers.txt" 2>&1 ||
		fail "systemd-sysusers: $(cat "$T/sysusers.txt")"
	grep -q '^rgaps:' "$T/sysroot/etc/passwd" && grep -q '^rgaps:' "$T/sysroot/etc/group" ||
		fail "the sysusers file does not create user and group rgaps"
	ok "sysusers file creates user and group rgaps (systemd-sysusers --root)"
else
	not_checked "sysusers file (no systemd-sysusers)"
fi
if command -v systemd-analyze >/dev/null; then
	# verify checks that ExecStart's program exists: point it into the extracted tree.
	mkdir -p "$T/unit"
	sed "s|^ExecStart=/usr/sbin/rgapsd|ExecStart=$RGAPSD|" "$UNIT" >"$T/unit/rgapsd.service"
	(cd "$T/unit" && timeout 60 systemd-analyze verify "$T/unit/rgapsd.service") >"$T/verify.txt" 2>&1 ||
		fail "systemd-analyze verify: $(cat "$T/verify.txt")"
	[ -s "$T/verify.txt" ] && fail "systemd-analyze verify complains: $(cat "$T/verify.txt")"
	ok "systemd-analyze verify: unit clean"
else
	not_checked "systemd-analyze verify (no systemd-analyze)"
fi

# ------------------------------------------------------------------ rpm
if command -v rpmbuild >/dev/null; then
	nodeps=; command -v dpkg >/dev/null && nodeps=--nodeps   # build deps are debs here
	echo "building the rpms (rpmbuild -bb $nodeps --without check)"
	RPM_BUILD_NCPUS=$JOBS timeout 600 "$SRC/packaging/build-rpm.sh" "$T/rpm" $nodeps --without check ||
		fail "build-rpm.sh failed"
	rpmf() {
		local f
		f=$(ls "$T"/rpm/"$1"-[0-9]*.rpm 2>/dev/null | head -n 1)
		[ -n "$f" ] || fail "no $1 rpm was built"
		echo "$f"
	}
	# rhas RPM PATH...: each PATH is in rpm -qlp RPM.
	rhas() {
		local f=$1 p; shift
		rpm -qlp "$f" >"$T/rlist.txt" 2>/dev/null || fail "rpm -qlp $f"
		for p in "$@"; do grep -qx "$p" "$T/rlist.txt" || fail "$(basename "$f") lacks $p"; done
	}
	LIBDIR=$(rpm --eval '%{_libdir}')
	RPLUG=$LIBDIR/rgaps/plugins
	f=$(rpmf rgapsd)
	rhas "$f" /usr/sbin/rgapsd "$RPLUG/memory-host.so" "$RPLUG/transport-tcp.so" \
		"$RPLUG/transport-verbs.so" /usr/lib/systemd/system/rgapsd.service \
		/usr/lib/sysusers.d/rgaps.conf /etc/rgaps/rgapsd.json /etc/rgaps/topics.d/example.json.example
	rpm -qp --configfiles "$f" 2>/dev/null | grep -qx /etc/rgaps/rgapsd.json || fail "rpm: rgapsd.json is not %config"
	rpm -qp --scripts "$f" 2>/dev/null >"$T/scripts.txt"
	grep -q "systemctl.*rgapsd.service" "$T/scripts.txt" || fail "rpm: no systemd scriptlets for rgapsd.service"
	grep -qE "useradd|sysusers" "$T/scripts.txt" || fail "rpm: no %pre that creates the rgaps user"
	rhas "$(rpmf librgaps)" "$LIBDIR/librgaps.so.0" "$LIBDIR/librgaps.so.0.1.0"
	rhas "$(rpmf librgaps-devel)" "$LIBDIR/librgaps.so" "$LIBDIR/pkgconfig/librgaps.pc" \
		/usr/include/rgaps/rgaps.h /usr/include/rgaps/plugin.h
	rhas "$(rpmf rgaps-tools)" /usr/bin/rgaps /usr/bin/rgaps-bench
	ok "rpms: $(cd "$T/rpm" && ls -- *.rpm | tr '\n' ' ')hold what they should (rpm -qlp, scriptlets, %config)"
else
	not_checked "rpm packages (no rpmbuild; Debian: apt-get install rpm)"
fi

if [ ${#NOT_CHECKED[@]} -gt 0 ]; then
	echo "passed, but not checked here: ${NOT_CHECKED[*]}"
fi
echo "packages: all checks passed in ${SECONDS} s"
