#!/bin/bash
# Unread replies: a connection that sends requests and reads no reply cannot
# grow rgapsd's memory. Here nobody sends 40,000 stats requests without
# reading a reply: once max_unsent_replies (1 MiB) of replies wait,
# rgapsd stops reading that connection (its requests stay in the socket), so
# its memory stays put; root is served within 1 s; and when the replies
# stay unread for idle_timeout_ms (3 s) the connection is closed.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/limits_lib.sh"
need_users

cat >"$T/rgapsd.json" <<JSON
{ "idle_timeout_ms": 3000, "max_unsent_replies": "1MiB" }
JSON
start_daemon -c "$T/rgapsd.json"
rss0=$(rss_kb)
spawn flood "${NOBODY[@]}" "$FLOOD" replies 40000 30
wait_until 30 grep -q "before the daemon stopped reading" "$T/flood.out" || fail "the flood did not stall: $(cat "$T/flood.out")"
cat "$T/flood.out"
sent=$(grep -o "sent [0-9]*" "$T/flood.out" | cut -d' ' -f2)
[ "$sent" -lt 40000 ] || fail "rgapsd read all 40000 requests without their replies being read"
unsent=$(dstat unsent_bytes)
# 1 MiB, then at most one more reply (a frame).
[ "$unsent" -le $((1048576 + 65540)) ] || fail "$unsent bytes of replies wait in rgapsd"
[ "$(dstat paused_connections)" = 1 ] || fail "paused_connections: $(dstat paused_connections)"
ok "reading stopped after $sent requests with $unsent bytes of replies waiting"
probe "while a connection leaves its replies unread"
rss_bounded "$rss0" 20000 "40000 requests whose replies nobody reads"
wait_until 20 grep -q "closed_by_daemon" "$T/flood.out" || fail "the connection was not closed: $(tail -n 1 "$T/flood.out")"
tail -n 1 "$T/flood.out"
wait_ok flood
[ "$(dstat stalled_closed)" = 1 ] && [ "$(dstat read_pauses)" -ge 1 ] ||
	fail "stalled_closed $(dstat stalled_closed), read_pauses $(dstat read_pauses)"
[ "$(dstat unsent_bytes)" -lt 65536 ] || fail "unsent_bytes after the close: $(dstat unsent_bytes)"
ok "counters: read_pauses $(dstat read_pauses), stalled_closed 1; the replies are gone with it"
stop_daemon
