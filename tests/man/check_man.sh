#!/bin/bash
# The manual pages (man/, docs/DECISIONS.md 31):
#   check_man.sh SRCROOT BUILDROOT
# For every page this build installs (man/*.[1-8] and the generated
# BUILDROOT/man/rgapsd.json.5):
#   - `mandoc -T lint` reports nothing: no error, warning or style message.
#     The one message let through is "referenced manual not found" for a page
#     outside rgaps (systemctl(1), poll(2)...), which depends on what the host
#     has installed; a reference to an rgaps page must name one that exists.
#   - `man --warnings -l` renders it with groff without a warning;
#   - it has the sections its kind needs (table below);
# and, against the programs and sources, so that the pages cannot drift:
#   - every option each program's --help prints is in its page;
#   - every key and transport option `rgapsd --help-config` prints is an
#     entry of rgapsd.json(5);
#   - every variable the sources getenv() by name is in some page's ENVIRONMENT;
#   - every signal rgapsd and the tools catch is in their page.
# Skips (77) where mandoc or man-db is missing.
set -u
SRC=$1
BUILD=$2
T=$(mktemp -d "${TMPDIR:-/tmp}/rgaps-man.XXXXXX")
trap 'rm -rf "$T"' EXIT
FAILS=0

fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
# ok TEXT: says TEXT if no check failed since the last ok.
OK_AT=0
ok() { [ $FAILS -eq $OK_AT ] && echo "ok: $*"; OK_AT=$FAILS; }

command -v mandoc >/dev/null || { echo "SKIP: mandoc is not installed (apt-get install mandoc)"; exit 77; }
command -v man >/dev/null || { echo "SKIP: man is not installed (apt-get install man-db)"; exit 77; }

PAGES=()
for f in "$SRC"/man/*.[1-8]; do
	case ${f##*/} in
	rgaps-top.1) [ -x "$BUILD/tools/rgaps-top" ] || continue ;;   # built only with ncurses
	rgaps-bench.1) [ -x "$BUILD/tools/rgaps-bench" ] || continue ;;
	esac
	PAGES+=("$f")
done
PAGES+=("$BUILD/man/rgapsd.json.5")
NAMES=()
for f in "${PAGES[@]}"; do NAMES+=("$(basename "$f")"); done

# Sections each kind of page must have.
need_sections() {
	case $1 in
	*.1 | *.8) echo "NAME|SYNOPSIS|DESCRIPTION|OPTIONS|ENVIRONMENT|FILES|SIGNALS|EXIT STATUS|EXAMPLES|SEE ALSO" ;;
	*.3) echo "NAME|LIBRARY|SYNOPSIS|DESCRIPTION|THREADS|SIGNALS|RETURN VALUES|ENVIRONMENT|FILES|EXAMPLES|ERRORS|SEE ALSO" ;;
	*.5) echo "NAME|SYNOPSIS|DESCRIPTION|FILES|EXAMPLES|SEE ALSO" ;;
	esac
}

for f in "${PAGES[@]}"; do
	name=$(basename "$f")
	[ -s "$f" ] || { fail "$name: missing or empty"; continue; }
	# mandoc: everything but references to manuals outside rgaps that this host lacks.
	mandoc -T lint -W style "$f" >"$T/lint" 2>&1
	grep -v -E "referenced manual not found: Xr [^ ]+ [0-9]|outdated mandoc.db" "$T/lint" >"$T/lint.left"
	if [ -s "$T/lint.left" ]; then
		fail "$name: mandoc -T lint:"; sed 's/^/    /' "$T/lint.left"
	fi
	# References to rgaps pages must name pages this build installs.
	grep -oE '^\.Xr (rgaps[a-z.-]*|librgaps) [0-9]' "$f" | awk '{ print $2 "." $3 }' | sort -u |
		while read -r ref; do
			printf '%s\n' "${NAMES[@]}" | grep -qx "$ref" || echo "$ref"
		done >"$T/xr"
	[ -s "$T/xr" ] && fail "$name: refers to rgaps pages that are not built: $(tr '\n' ' ' <"$T/xr")"
	# groff, as man(1) renders it for a reader.
	MANWIDTH=80 man --warnings -E UTF-8 -l "$f" >"$T/out" 2>"$T/err"
	[ -s "$T/err" ] && { fail "$name: man --warnings -l:"; sed 's/^/    /' "$T/err"; }
	[ -s "$T/out" ] || fail "$name: man -l rendered nothing"
	IFS='|' read -r -a secs <<<"$(need_sections "$name")"
	for s in "${secs[@]}"; do
		grep -qx "\.Sh $s" "$f" || fail "$name: no $s section"
	done
done
ok "${#PAGES[@]} pages linted and rendered: ${NAMES[*]}"

# Text of a page as a reader sees it (options such as --config appear as typed).
text_of() { mandoc -T ascii "$1" 2>/dev/null | sed 's/.\x08//g'; }   # no overstrike

# Every option in a program's --help, long and short, is in its page.
check_options() { # PROGRAM PAGE
	local prog=$1 page=$2 help opt missing=()
	[ -x "$prog" ] || return 0
	help=$("$prog" --help 2>&1) || { fail "$(basename "$prog") --help failed"; return; }
	text_of "$page" >"$T/text"
	for opt in $(grep -oE '(^|[ [,|])(--[a-z][a-z0-9-]*|-[A-Za-z0-9])([^A-Za-z0-9-]|$)' <<<"$help" |
		sed -E 's/^[ [,|]//; s/[^A-Za-z0-9-]$//' | sort -u); do
		grep -qE -- "(^|[^A-Za-z0-9-])$opt([^A-Za-z0-9-]|$)" "$T/text" || missing+=("$opt")
	done
	[ ${#missing[@]} -eq 0 ] || fail "$(basename "$page") lacks options of $(basename "$prog") --help: ${missing[*]}"
}
check_options "$BUILD/src/daemon/rgapsd" "$SRC/man/rgapsd.8"
check_options "$BUILD/tools/rgaps" "$SRC/man/rgaps.1"
check_options "$BUILD/tools/rgaps-top" "$SRC/man/rgaps-top.1"
check_options "$BUILD/tools/rgaps-bench" "$SRC/man/rgaps-bench.1"
ok "every option of the programs' --help is in their pages"

# Every key and transport option of --help-config is an entry of rgapsd.json(5).
"$BUILD/src/daemon/rgapsd" --help-config >"$T/keys" 2>&1 || fail "rgapsd --help-config failed"
n=0
for k in $(sed -n -E 's/^ {2,4}([a-z_]+) \(.*/\1/p; s/^  ([a-z]+):.*/\1/p' "$T/keys" | sort -u); do
	n=$((n + 1))
	grep -qx "\.It Cm $k" "$BUILD/man/rgapsd.json.5" || fail "rgapsd.json.5 has no entry for '$k' of rgapsd --help-config"
done
[ $n -ge 20 ] || fail "found only $n keys in rgapsd --help-config: has its format changed?"
ok "rgapsd.json(5) has all $n keys and transport options of rgapsd --help-config"

# Every variable read by name is documented in some page's ENVIRONMENT section.
env_of_pages() {
	for f in "${PAGES[@]}"; do
		sed -n '/^\.Sh ENVIRONMENT/,/^\.Sh /p' "$f"
	done | grep -oE '\bEv [A-Z_][A-Z0-9_]*' | awk '{ print $2 }' | sort -u
}
env_of_pages >"$T/env.doc"
grep -rhoE 'getenv\("[A-Za-z_][A-Za-z0-9_]*"\)' "$SRC/src" "$SRC/tools" "$SRC/plugins" 2>/dev/null |
	sed -E 's/getenv\("(.*)"\)/\1/' | sort -u >"$T/env.src"
missing=$(comm -23 "$T/env.src" "$T/env.doc" | tr '\n' ' ')
[ -z "$missing" ] || fail "environment variables read but in no page's ENVIRONMENT: $missing"
ok "all $(wc -l <"$T/env.src") variables the sources read are documented"

# Signals: rgapsd's handlers (uv_signal_start, signal) and each tool's sigaction.
check_signals() { # PAGE SOURCES...
	local page=$1 s missing=()
	shift
	for s in $(grep -hoE '(uv_signal_start\([^)]*|signal\(|sigaction\()SIG[A-Z]+' "$@" | grep -oE 'SIG[A-Z]+' | sort -u); do
		sed -n '/^\.Sh SIGNALS/,/^\.Sh /p' "$page" | grep -qw "$s" || missing+=("$s")
	done
	[ ${#missing[@]} -eq 0 ] || fail "$(basename "$page"): SIGNALS lacks ${missing[*]}"
}
check_signals "$SRC/man/rgapsd.8" "$SRC"/src/daemon/*.c
check_signals "$SRC/man/rgaps.1" "$SRC"/tools/rgaps/*.c
check_signals "$SRC/man/rgaps-top.1" "$SRC"/tools/rgaps-top/rgaps-top.c
check_signals "$SRC/man/rgaps-bench.1" "$SRC"/tools/rgaps-bench/bench.c
ok "every signal the programs handle is in their SIGNALS section"

[ $FAILS -eq 0 ] || { echo "$FAILS checks failed"; exit 1; }
echo "man pages: all checks passed"
