# Helpers of the limit tests (limits_*.sh, visibility.sh, big_replies.sh), sourced
# after lib.sh: floods run as an unprivileged user through itest-flood, a probe
# times one legitimate request, and rgapsd's memory is read from /proc.
FLOOD="$RGAPS_BUILD/tests/integration/itest-flood"

# as UID GID [GROUPS]: AS=(the command prefix running as that user and group, with the
# supplementary groups GROUPS, comma-separated, or none). NOBODY: the one for nobody.
as() {
	AS=(setpriv --reuid="$1" --regid="$2")
	if [ -n "${3:-}" ]; then AS+=(--groups="$3"); else AS+=(--clear-groups); fi
	AS+=(env RGAPS_SOCKET="$RGAPS_SOCKET" RGAPS_PLUGIN_DIR="$RGAPS_PLUGIN_DIR")
}

# need_users: the floods run as other users (setpriv, as root); NOBODY=(the prefix for nobody).
need_users() {
	command -v setpriv >/dev/null || { echo "skipped: setpriv (util-linux) is missing"; exit 77; }
	[ "$(id -u)" = 0 ] || { echo "skipped: needs root to run the floods as another user"; exit 77; }
	# They must reach the socket in $T (mktemp made it 0700).
	chmod 755 "$T"
	as 65534 65534
	NOBODY=("${AS[@]}")
}

# spawn NAME CMD...: like lib.sh's bg, for a command that bounds its own time (the floods,
# a daemon the script stops): no timeout wrapper in between, so that on a failure cleanup's
# kill -9 reaches the program itself (setpriv and env exec it: same pid).
spawn() {
	local name=$1
	shift
	"$@" >"$T/$name.out" 2>&1 &
	PIDS+=($!)
	eval "PID_$name=$!"
}

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$DAEMON_PID/status"; }

# probe_try: a predicate for wait_until: one request answered within 1 s.
probe_try() { "$FLOOD" probe 1000 >>"$T/probe.out" 2>&1; }

# A legitimate client (root) must be answered within 1 s, whatever the flood.
probe() {
	"$FLOOD" probe 1000 >>"$T/probe.out" 2>&1 ||
		fail "a legitimate client was not served within 1 s: $(tail -n 1 "$T/probe.out")"
	ok "legitimate client $(tail -n 1 "$T/probe.out" | sed 's/probe: //')${1:+ $1}"
}

# dstat KEY: a number of the daemon section of `rgaps stats` (as root).
dstat() { "$RGAPS" stats --json | tr -d ' \t\n' | grep -o "\"$1\":[0-9]*" | head -n 1 | cut -d: -f2; }
# dstat_is KEY VALUE: a predicate for wait_until (evaluated at every poll)
dstat_is() { test "$(dstat "$1")" = "$2"; }

# sanitized: rgapsd is an ASan or TSan build (slower; ASan keeps freed memory in quarantine)
sanitized() { ldd "$RGAPSD" | grep -q 'libasan\|libtsan'; }

# rss_bounded BASE_KB MAX_GROWTH_KB WHAT (four times the growth under a sanitizer, whose
# quarantine holds freed blocks for a while: still far below what main grew by)
rss_bounded() {
	local now max=$2
	sanitized && max=$((max * 4))
	now=$(rss_kb)
	[ $((now - $1)) -le "$max" ] || fail "rgapsd grew by $((now - $1)) kB under $3 (limit $max kB)"
	ok "rgapsd's RSS $1 -> $now kB under $3"
}

# field FILE NAME: the number after "NAME " in the summary line of a flood
field() { grep -o "$2 [0-9]*" "$1" | head -n 1 | cut -d' ' -f2; }
