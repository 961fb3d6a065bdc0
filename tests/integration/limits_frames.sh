#!/bin/bash
# Partial frames: a half-sent frame is cut off, and costs no more buffer than
# its own size while it waits. Here nobody opens 64 connections (its per-user
# cap), each with an unfinished frame: half a header, or a header announcing
# 60,000 bytes and 16 of them. rgapsd
# holds a buffer only for the frames whose header is in, sized to the frame;
# a root client is served within 1 s meanwhile; frame_timeout_ms (2 s) cuts
# every one of them off with a "timeout" error, counted as frame_timeouts.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/limits_lib.sh"
need_users

cat >"$T/rgapsd.json" <<JSON
{ "max_connections_per_user": 64, "frame_timeout_ms": 2000 }
JSON
start_daemon -c "$T/rgapsd.json"
rss0=$(rss_kb)
spawn flood "${NOBODY[@]}" "$FLOOD" partial 64 30
# While the frames hang: 32 buffers of 60,000 bytes, none for the 32 half headers.
wait_until 10 dstat_is frame_bytes 1920000 || fail "frame buffers held: $(dstat frame_bytes) bytes, want 32 x 60000"
ok "frame buffers while 64 frames hang: $(dstat frame_bytes) bytes (32 frames of 60000 bytes)"
probe "while 64 frames hang"
rss_bounded "$rss0" 20000 "64 unfinished frames"
wait_until 20 grep -q "^partial:" "$T/flood.out" || fail "the flood did not end"
cat "$T/flood.out"
[ "$(field "$T/flood.out" timed_out)" = 64 ] || fail "not every unfinished frame was cut off with timeout"
wait_ok flood
[ "$(dstat frame_timeouts)" = 64 ] || fail "frame_timeouts: $(dstat frame_timeouts)"
[ "$(dstat frame_bytes)" = 0 ] || fail "frame buffers left: $(dstat frame_bytes) bytes"
ok "counters: frame_timeouts 64, frame buffers back to 0 bytes"
stop_daemon
