#!/bin/bash
# Build the rpm packages of this source tree (docs/PACKAGING.md):
#   packaging/build-rpm.sh OUTDIR [rpmbuild options...]
# makes rgaps-VERSION.tar.gz from the working tree (tracked and untracked
# files, not what .gitignore names), runs rpmbuild -bb with a temporary
# _topdir and puts the .rpm files and the log (build-rpm.log) in OUTDIR.
# Extra arguments go to rpmbuild, e.g. --without check, --with cuda, or
# --nodeps where the build dependencies are not rpm packages (Debian: the
# spec defines its own %meson and systemd macros when they are missing).
# RPM_BUILD_NCPUS bounds the jobs.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 OUTDIR [rpmbuild options...]" >&2; exit 2; }
SRC=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
shift
command -v rpmbuild >/dev/null || { echo "build-rpm: rpmbuild missing (Debian: apt-get install rpm)" >&2; exit 1; }
VERSION=$(sed -n 's/^Version:[[:space:]]*//p' "$SRC/packaging/rpm/rgaps.spec")

WORK=$(mktemp -d "${TMPDIR:-/tmp}/rgaps-rpm.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK"/{BUILD,BUILDROOT,RPMS,SOURCES,SPECS,SRPMS} "$WORK/tree/rgaps-$VERSION"

# The tree as it is now, edits and new files included, without build outputs.
if git -c safe.directory="$SRC" -C "$SRC" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	git -c safe.directory="$SRC" -C "$SRC" ls-files -z --cached --others --exclude-standard |
		tar -C "$SRC" --null --ignore-failed-read -T - -cf - 2>/dev/null |
		tar -C "$WORK/tree/rgaps-$VERSION" -xf -
else
	tar -C "$SRC" --exclude='./build*' --exclude='./.*' -cf - . |
		tar -C "$WORK/tree/rgaps-$VERSION" -xf -
fi
tar -C "$WORK/tree" -czf "$WORK/SOURCES/rgaps-$VERSION.tar.gz" "rgaps-$VERSION"
rm -rf "$WORK/tree"
cp "$SRC/packaging/systemd/rgaps.sysusers" "$WORK/SOURCES/"
cp "$SRC/packaging/rpm/rgaps.spec" "$WORK/SPECS/"

echo "build-rpm: rpmbuild -bb $* (topdir $WORK)"
if ! rpmbuild -bb --define "_topdir $WORK" "$@" "$WORK/SPECS/rgaps.spec" >"$OUT/build-rpm.log" 2>&1; then
	tail -n 60 "$OUT/build-rpm.log" >&2
	echo "build-rpm: rpmbuild failed" >&2
	exit 1
fi
find "$WORK/RPMS" -name '*.rpm' -exec cp {} "$OUT"/ \;
echo "build-rpm: $(cd "$OUT" && ls -- *.rpm | tr '\n' ' ')-> $OUT"
