#!/bin/bash
# Configuration: no file runs on defaults; bad files are refused at start with
# the file, the key and the reason (a JSON mistake by line and column); topics.d
# settings reach the topic; without -c rgapsd reads the file of the build's
# sysconfdir, where `meson install` puts it.
. "$(dirname "$0")/lib.sh"
# rgapsd CONFIG [args...]: a daemon that must refuse its configuration and exit 1 (a
# bounded wait: one that accepted it would serve until killed); output in $T/refuse.out
refused_by() {
	local rc=0
	timeout -k 2 20 "$RGAPSD" --config "$@" --socket "$T/x.sock" --instance "$INSTANCE" \
		> "$T/refuse.out" 2>&1 || rc=$?
	[ $rc = 1 ] || fail "rgapsd --config $* exited $rc, expected 1 (refused): $(cat "$T/refuse.out")"
}
refuse() { # refuse WHAT JSON PATTERN
	echo "$2" > "$T/bad.json"
	refused_by "$T/bad.json"
	grep -q "$3" "$T/refuse.out" || fail "$1: unclear message: $(cat "$T/refuse.out")"
	grep -q "bad.json" "$T/refuse.out" || fail "$1: message does not name the file"
	ok "$1 refused: $(grep -m1 "$3" "$T/refuse.out" | sed 's/^.*\(rgapsd\|error\): //')"
}
refuse "unknown key" '{ "sockit": "/tmp/x" }' "sockit"
refuse "wrong type" '{ "log_level": 3 }' "log_level"
refuse "impossible size" '{ "defaults": { "pool_size": "12 parsecs" } }' "pool_size"
refuse "message larger than pool" '{ "defaults": { "pool_size": "1MiB", "max_message_size": "2MiB" } }' "max_message_size"
refuse "bad overflow policy" '{ "defaults": { "overflow": "explode" } }' "overflow"
refuse "invalid JSON" '{ "socket": ' "invalid JSON at line 1, column 13: the text ends there"
refuse "invalid JSON, line 3" $'{\n  "socket": "/tmp/x",\n  "log_level": info\n}' "invalid JSON at line 3, column 16: near 'info'"
# Transport options: names and bounds are the plugins' own, checked when they load.
KEYF="$T/psk"; head -c 48 /dev/urandom > "$KEYF"; chmod 600 "$KEYF"
NET="\"listen\": \"127.0.0.1:$((20000 + RANDOM % 20000))\", \"key_file\": \"$KEYF\""
refuse "unknown transport" "{ $NET, \"transport_options\": { \"udp\": {} } }" "transport_options.udp"
refuse "unknown transport option" "{ $NET, \"transport_options\": { \"tcp\": { \"sndbuff\": 1 } } }" \
	"transport_options.tcp.sndbuff'.*known: sndbuf, rcvbuf"
refuse "transport option out of range" "{ $NET, \"transport_options\": { \"tcp\": { \"sndbuf\": 4294967296 } } }" \
	"transport_options.tcp.sndbuf': 4294967296 is out of range"
refuse "transport option not an integer" "{ $NET, \"transport_options\": { \"tcp\": { \"rcvbuf\": \"big\" } } }" \
	"tcp.rcvbuf': expected a non-negative integer"
echo "{ $NET, \"transport_options\": { \"tcp\": { \"sndbuff\": 1 } } }" > "$T/opt.json"
expect_exit 1 "$RGAPSD" --config "$T/opt.json" --check-config
grep -q "transport_options.tcp.sndbuff" "$T/expect.out" || fail "--check-config: $(cat "$T/expect.out")"
ok "--check-config checks transport options against the plugin: $(sed 's/^rgapsd: //' "$T/expect.out")"
echo "{ $NET, \"transport_options\": { \"tcp\": { \"sndbuf\": 1048576 } } }" > "$T/opt.json"
expect_exit 0 "$RGAPSD" --config "$T/opt.json" --check-config
grep -q "^configuration OK" "$T/expect.out" || fail "--check-config refused valid transport options: $(cat "$T/expect.out")"
start_daemon --config "$T/opt.json"
grep -q "tcp: options: sndbuf 1048576" "$T/rgapsd.log" || fail "tcp plugin did not take sndbuf: $(grep -i tcp "$T/rgapsd.log")"
stop_daemon
ok "transport option reached the tcp plugin (sndbuf 1048576)"
mkdir -p "$T/td"
echo "{ \"topics_dir\": \"$T/td\" }" > "$T/ok.json"
echo '{ "queue_depth": 12 }' > "$T/td/cam.json"
refused_by "$T/ok.json"
grep -q "cam.json" "$T/refuse.out" && grep -q "queue_depth" "$T/refuse.out" || fail "topic file error unclear: $(cat "$T/refuse.out")"
ok "bad topic file refused: $(tail -1 "$T/refuse.out" | sed 's/^rgapsd: //')"
echo '{ "queue_depth": 16, "pool_size": "8MiB", "max_message_size": "1MiB" }' > "$T/td/cam.json"
expect_exit 0 "$RGAPSD" --config "$T/ok.json" --check-config
grep -qx "configuration OK: 1 topic" "$T/expect.out" || fail "--check-config: $(cat "$T/expect.out")"
start_daemon --config "$T/ok.json"
"$RGAPS" pub cam --count 1 --size 1KiB >/dev/null || fail "publish on configured topic"
s=$(stat_json cam | flat)
[ "$(jnum "$s" depth)" = 16 ] || fail "topic config not applied (queue depth): $s"
expect_exit 2 "$RGAPS" pub cam --count 1 --size 2MiB # refused before publishing: a usage error
grep -q "larger than" "$T/expect.out" || fail "oversized message not refused clearly: $(cat "$T/expect.out")"
ok "topics.d applied (queue depth 16, 1 MiB message limit enforced: $(grep -m1 'larger than' "$T/expect.out"))"
stop_daemon
start_daemon   # no file at all
"$RGAPS" pub dflt --count 3 --size 1KiB >/dev/null || fail "defaults-only daemon"
ok "daemon with no configuration file serves"
stop_daemon
# The build tree's plugin directory is for binaries that run from the build tree only:
# a copy elsewhere (as installed) must not look there (anyone could create that path).
cp "$RGAPSD" "$T/rgapsd-elsewhere"
here=$(env -u RGAPS_PLUGIN_DIR "$RGAPSD" --help-config | grep -o 'as the plugins in [^ ]*')
there=$(env -u RGAPS_PLUGIN_DIR "$T/rgapsd-elsewhere" --help-config | grep -o 'as the plugins in [^ ]*')
[ "$here" = "as the plugins in $RGAPS_BUILD/plugins" ] || [ "$here" = "as the plugins in $(cd "$RGAPS_BUILD" && pwd -P)/plugins" ] ||
	fail "rgapsd in the build tree: $here"
case "$there" in *"$RGAPS_BUILD"*|*"$(cd "$RGAPS_BUILD" && pwd -P)"*) fail "a copy outside the build tree looks in it: $there";; esac
ok "plugin directory: build tree for the build's rgapsd, ${there#as the plugins in } for a copy elsewhere"
sysconf=$(sed -n 's/^#define RGAPS_SYSCONFDIR "\(.*\)"$/\1/p' "$RGAPS_BUILD/rgaps_build_config.h")
[ -n "$sysconf" ] || fail "no RGAPS_SYSCONFDIR in the build's rgaps_build_config.h"
"$RGAPSD" --help | grep -qF "(default $sysconf/rgapsd.json if it exists)" ||
	fail "rgapsd without -c does not read $sysconf/rgapsd.json: $("$RGAPSD" --help | grep -- --config)"
"$RGAPSD" --help-config | head -n 1 | grep -qF "Daemon keys ($sysconf/rgapsd.json)" ||
	fail "--help-config names another file: $("$RGAPSD" --help-config | head -n 1)"
ok "without -c: $sysconf/rgapsd.json, the build's sysconfdir"

# --background returns once the socket serves (the next command finds it), or exits 1.
"$RGAPSD" --background --socket "$T/bg.sock" --instance "${INSTANCE}bg" >"$T/bg.out" 2>>"$T/bg.log" ||
	fail "rgapsd --background: $(cat "$T/bg.out" "$T/bg.log")"
bgpid=$(sed -n 's/^rgapsd: serving .* in the background, pid \([0-9]*\)$/\1/p' "$T/bg.out")
[ -n "$bgpid" ] || fail "rgapsd --background did not say its pid: $(cat "$T/bg.out")"
PIDS+=("$bgpid")
RGAPS_SOCKET=$T/bg.sock "$RGAPS" topics >/dev/null || fail "rgapsd --background returned before it served"
stop_pid "$bgpid" "rgapsd --background" || fail "the background rgapsd did not stop on SIGTERM"
forget_pid "$bgpid"
touch "$T/plain"
expect_exit 1 "$RGAPSD" --background --socket "$T/plain/x.sock" --instance "${INSTANCE}bg2"
grep -q "did not start" "$T/expect.out" && grep -q "$T/plain" "$T/expect.out" ||
	fail "rgapsd --background that cannot serve: $(cat "$T/expect.out")"
ok "--background: returned serving (pid $bgpid), or exit 1 with the reason"
