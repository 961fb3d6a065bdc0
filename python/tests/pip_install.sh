#!/bin/bash
# `pip install --no-build-isolation .` from this checkout, as docs/PYTHON.md
# says: librgaps installed first (here: `meson install` of the build into a
# temporary root, its pkg-config file pointed there), then pip builds the
# package alone through meson-python against it, into a venv; the wheel must
# be tagged abi3 and the installed package must publish and take through an
# rgapsd. Skips (77) with the reason where python3-venv or meson-python is
# missing. Run: RGAPS_BUILD=<build dir> bash python/tests/pip_install.sh
: "${RGAPS_BUILD:?RGAPS_BUILD must point at the build directory}"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-/usr/bin/python3}
unset PYTHONPATH # the package must come from the venv, not from the build tree
$PY -c 'import mesonpy' 2>/dev/null || { echo "SKIP: meson-python missing (python3-mesonpy)"; exit 77; }
$PY -c 'import ensurepip' 2>/dev/null || { echo "SKIP: venv cannot make pip (python3-venv)"; exit 77; }
command -v pkg-config >/dev/null || { echo "SKIP: pkg-config missing"; exit 77; }

. "$SRC/tests/integration/lib.sh"
export RGAPS_SOCKET="$T/rgapsd.sock"
# pip and meson-python write next to the sources: keep them out of git's way (.gitignore).
meson install -C "$RGAPS_BUILD" --no-rebuild --destdir "$T/root" >"$T/install.log" 2>&1 ||
	fail "meson install: $(tail -5 "$T/install.log")"
pc=$(find "$T/root" -name librgaps.pc | head -n 1)
[ -n "$pc" ] || fail "no librgaps.pc installed"
prefix=$(sed -n 's/^prefix=//p' "$pc")
sed -i "s|^prefix=.*|prefix=$T/root$prefix|" "$pc"
lib=$(dirname "$(dirname "$pc")")

$PY -m venv --system-site-packages "$T/venv" || fail "python3 -m venv"
PKG_CONFIG_PATH=$(dirname "$pc") timeout 600 "$T/venv/bin/pip" wheel --no-build-isolation \
	--no-index --no-deps -w "$T/wheel" "$SRC" >"$T/pip.log" 2>&1 ||
	fail "pip wheel: $(grep -v '^\s*$' "$T/pip.log" | tail -n 15)"
whl=$(ls "$T"/wheel/rgaps-*.whl)
case "$whl" in
*-cp3*-abi3-linux_*.whl) ok "pip built $(basename "$whl")" ;;
*) fail "the wheel is not abi3: $(basename "$whl")" ;;
esac
"$T/venv/bin/pip" install --no-index --no-deps "$whl" >>"$T/pip.log" 2>&1 || fail "pip install"
unzip -l "$whl" | grep -q "rgaps/_rgaps.abi3.so" || fail "no extension in the wheel"
unzip -l "$whl" | grep -E -q "librgaps|bin/|include/" && fail "the wheel carries more than the package"

start_daemon
LD_LIBRARY_PATH="$lib" "$T/venv/bin/python" - <<'PY' || fail "the pip-installed package did not work"
import os, sys
import rgaps
assert os.path.dirname(rgaps.__file__).startswith(sys.prefix), rgaps.__file__
with rgaps.Subscriber("pip") as sub, rgaps.Publisher("pip") as pub:
    pub.publish(b"\x01\x02\x03", header=b"pip")
    with sub.take(timeout=10) as m:
        assert bytes(m.raw()) == b"\x01\x02\x03" and m.header == b"pip", m
print("round trip through", rgaps.__file__)
PY
ok "the pip-installed package published and took a message through rgapsd"
