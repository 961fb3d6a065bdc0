#!/bin/bash
# Build the Debian packages of this source tree (docs/PACKAGING.md):
#   packaging/build-deb.sh OUTDIR
# copies the working tree (tracked and untracked files, not what .gitignore
# names, so no build directories) to a temporary directory with
# packaging/debian/ as debian/, runs dpkg-buildpackage -us -uc -b there and
# puts the .deb, .changes and .buildinfo files and the log (build-deb.log) in
# OUTDIR. As root, missing build dependencies are installed with apt-get;
# otherwise they must be there. DEB_BUILD_OPTIONS passes through (e.g.
# "nocheck parallel=2").
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
SRC=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
VERSION=$(sed -n "s/^  version: '\([^']*\)',.*/\1/p" "$SRC/meson.build" | head -n 1)
[ -n "$VERSION" ] || { echo "build-deb: no version in $SRC/meson.build" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/rgaps-deb.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
TREE="$WORK/rgaps-$VERSION"
mkdir -p "$TREE"

# The tree as it is now, edits and new files included, without build outputs.
if git -c safe.directory="$SRC" -C "$SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	git -c safe.directory="$SRC" -C "$SRC" ls-files -z --cached --others --exclude-standard |
		tar -C "$SRC" --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -C "$TREE" -xf -
else
	tar -C "$SRC" --exclude='./build*' --exclude='./.*' -cf - . | tar -C "$TREE" -xf -
fi
rm -rf "$TREE/debian"
cp -r "$SRC/packaging/debian" "$TREE/debian"

as_root() { [ "$(id -u)" -eq 0 ]; }
apt_install() {
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" ||
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"; }
}

if ! command -v dpkg-buildpackage >/dev/null || ! command -v dh >/dev/null; then
	as_root || { echo "build-deb: dpkg-buildpackage or debhelper missing and not root" >&2; exit 1; }
	apt_install dpkg-dev debhelper build-essential >"$WORK/apt.log" 2>&1 ||
		{ tail -n 20 "$WORK/apt.log" >&2; exit 1; }
fi
if ! (cd "$TREE" && dpkg-checkbuilddeps) 2>"$WORK/deps.txt"; then
	as_root || { cat "$WORK/deps.txt" >&2; echo "build-deb: not root, cannot install them" >&2; exit 1; }
	echo "build-deb: installing build dependencies"
	(cd "$TREE" && DEBIAN_FRONTEND=noninteractive apt-get build-dep -y ./ ||
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get build-dep -y ./; }) \
		>"$WORK/apt.log" 2>&1 || { tail -n 20 "$WORK/apt.log" >&2; exit 1; }
fi

echo "build-deb: dpkg-buildpackage in $TREE (DEB_BUILD_OPTIONS=${DEB_BUILD_OPTIONS:-})"
if ! (cd "$TREE" && dpkg-buildpackage -us -uc -b) >"$OUT/build-deb.log" 2>&1; then
	tail -n 60 "$OUT/build-deb.log" >&2
	echo "build-deb: dpkg-buildpackage failed" >&2
	exit 1
fi
cp "$WORK"/*.deb "$WORK"/*.changes "$WORK"/*.buildinfo "$OUT"/
echo "build-deb: $(cd "$OUT" && ls -- *.deb | tr '\n' ' ')-> $OUT"
