#!/bin/bash
# The rgaps CLI as a newcomer meets it (rgaps(1)):
#  - `sub --timeout` waits for the next message, not for all of them: a
#    stream that takes longer than the timeout, with no pause as long, is
#    taken whole; a silent topic stops it with a line that says why;
#  - a bad topic name is refused with the rule and what broke it (exit 2),
#    an option where the topic goes says so;
#  - a --size over the topic's max_message_size is refused once, before any
#    buffer is made (under a 512 MiB address-space limit, --size 2GiB), naming
#    the limit and the key; `--size -5` names '-5'; a full pool names who holds it;
#  - ^C (SIGINT) of a publisher before its --count exits 130 and says how many
#    of how many were published;
#  - after failed publishes the payload's counter stays the message's place in
#    the stream: a verifying subscriber finds every message intact;
#  - --version, --socket, and RGAPS_SOCKET naming a directory or a file.
. "$(dirname "$0")/lib.sh"
mkdir -p "$T/topics.d"
echo "{ \"topics_dir\": \"$T/topics.d\" }" >"$T/rgapsd.json"
# small: a pool of four 16 KiB messages, a short wait for room
echo '{ "pool_size": "64KiB", "max_message_size": "16KiB", "queue_depth": 4,
        "overflow": "block", "block_timeout_ms": 100 }' >"$T/topics.d/small.json"
start_daemon --config "$T/rgapsd.json"

# ---- --timeout is the longest wait for one message: 40 messages at 10 a second (4 s
# at least, by the publisher's pacing) to a subscriber whose --timeout is 3 s.
bg slow "$RGAPS" sub paced --count 40 --verify --timeout 3
wait_until 20 subs_are paced 1 || fail "subscriber did not attach"
"$RGAPS" pub paced --count 40 --size 1KiB --rate 10 >"$T/paced.out" || fail "paced publisher: $(cat "$T/paced.out")"
wait_ok slow
expect_sub slow received=40 verified=40 mismatched=0
ok "sub --timeout 3 took a 4 s stream whole: $(sub_line slow)"

expect_exit 4 "$RGAPS" sub quiet --count 5 --timeout 0.3
grep -q "^rgaps sub: stopped: no message for 0.3 s (--timeout); 0 of 5 messages accounted for" "$T/expect.out" ||
	fail "a subscriber that timed out does not say why: $(cat "$T/expect.out")"
ok "a silent topic: exit 4, $(grep stopped "$T/expect.out")"

# ---- bad topic names: the rule, and what broke it
RULE="a topic name is 1 to 63 characters of A-Z a-z 0-9 . _ -, not starting with '.' or '-'"
long=$(printf 'x%.0s' $(seq 70))
check_name() { # NAME WHAT
	local cmd
	for cmd in pub sub; do
		expect_exit 2 "$RGAPS" "$cmd" --count 1 -- "$1"
		grep -qF "is not a topic name ($2): $RULE" "$T/expect.out" ||
			fail "rgaps $cmd '$1': $(cat "$T/expect.out")"
	done
}
check_name "bad/name" "'/' is not allowed"
check_name ".dot" "it starts with '.'"
check_name "-dash" "it starts with '-'"
check_name "a b" "a space is not allowed"
check_name "" "it is empty"
check_name "$long" "it is 70 bytes long"
check_name "café" "byte 0xc3 is not allowed (only ASCII)"
ok "bad names refused with the rule: bad/name .dot -dash 'a b' '' 70 characters café"
expect_exit 2 "$RGAPS" pub -x
grep -q "unknown option or missing value '-x'.*topic names do not start with '-'" "$T/expect.out" ||
	fail "an option for a topic: $(cat "$T/expect.out")"
expect_exit 2 "$RGAPS" pub --count 3
grep -q "no topic given" "$T/expect.out" || fail "no topic: $(cat "$T/expect.out")"
# options may come before the topic
"$RGAPS" pub --count 2 --size 64 after >"$T/after.out" || fail "options before the topic: $(cat "$T/after.out")"
grep -q "^published 2 messages" "$T/after.out" || fail "options before the topic: $(cat "$T/after.out")"
ok "an option where the topic goes says so; options may come before the topic"

# ---- sizes: over the limit (refused at once, before a 2 GiB buffer exists), malformed
# (a sanitizer's shadow memory needs more address space than any such limit allows)
limit='ulimit -v 524288 &&'
if ldd "$RGAPS" | grep -q 'libasan\|libtsan'; then limit=; fi
expect_exit 2 bash -c "$limit"' exec "$0" pub small --count 5 --size 2GiB' "$RGAPS"
grep -qF "rgaps pub: --size: a message of 2147483648 bytes is larger than topic 'small''s max_message_size of 16KiB: send smaller messages, or raise max_message_size in the topic's configuration" "$T/expect.out" ||
	fail "--size 2GiB: $(cat "$T/expect.out")"
[ "$(grep -c . "$T/expect.out")" = 1 ] || fail "--size 2GiB: more than one line: $(cat "$T/expect.out")"
expect_exit 2 "$RGAPS" pub small --size -5
grep -qF "'-5' is not a size" "$T/expect.out" || fail "--size -5: $(cat "$T/expect.out")"
expect_exit 2 "$RGAPS" pub small --size 1KiB-junk
grep -qF "'junk' is not a size" "$T/expect.out" || fail "--size 1KiB-junk: $(cat "$T/expect.out")"
ok "--size 2GiB over 16KiB refused in one line under a 512 MiB address-space limit; -5 and junk named"

# ---- a full pool: a subscriber holds each message 1 s, the publisher may wait 100 ms.
# Publishes fail, once described in full; the payloads of those that succeed still
# carry their place in the stream, so the verifying subscriber finds them intact.
bg holder "$RGAPS" sub small --count 1000 --verify --hold-ms 1000 --timeout 3
wait_until 20 subs_are small 1 || fail "holding subscriber did not attach"
rc=0
"$RGAPS" pub small --count 12 --size 16KiB >"$T/full.out" 2>&1 || rc=$?
[ $rc = 1 ] || fail "publisher against a full pool exited $rc: $(cat "$T/full.out")"
fails=$(sed -n 's/^published .* failures \([0-9]*\)$/\1/p' "$T/full.out")
published=$(sed -n 's/^published \([0-9]*\) messages.*/\1/p' "$T/full.out")
[ "${fails:-0}" -ge 1 ] && [ "$((published + fails))" = 12 ] || fail "publisher: $(cat "$T/full.out")"
[ "$(grep -c "timed out after 100 ms waiting for room" "$T/full.out")" = 1 ] ||
	fail "each kind of failure in full once: $(cat "$T/full.out")"
grep -qF "subscribers have not yet taken or still hold" "$T/full.out" &&
	grep -qF "rgaps stats small" "$T/full.out" || fail "no hint at who holds the pool: $(cat "$T/full.out")"
grep -q "^rgaps pub: $published of 12 messages published, $fails failed$" "$T/full.out" ||
	fail "no count of what failed: $(cat "$T/full.out")"
wait_rc holder 4 # stopped by its --timeout, after the last one
expect_sub holder received="$published" verified="$published" mismatched=0 gaps=0 drops=0
ok "full pool: $fails of 12 publishes timed out, said once with who holds the pool; the $published published verified intact"

# ---- ^C of a publisher mid-stream
bg stream "$RGAPS" pub endless --count 1000000 --size 1KiB --rate 50
published_of() { # TOPIC N: TOPIC exists and has N messages published
	local s
	s=$("$RGAPS" stats "$1" --json 2>/dev/null | flat) || return 1
	[[ "$s" =~ \"published\":([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -ge "$2" ]
}
wait_until 20 published_of endless 3 || fail "the endless publisher did not publish"
stop_bg stream INT 130
grep -q "^rgaps pub: interrupted: [0-9]* of 1000000 messages published$" "$T/stream.out" ||
	fail "^C: $(cat "$T/stream.out")"
ok "^C mid-stream: exit 130, $(grep interrupted "$T/stream.out")"

# ---- --version, --socket, RGAPS_SOCKET that is no socket
v=$(sed -n "s/^  version: '\(.*\)',$/\1/p" "$(dirname "$0")/../../meson.build" | head -n 1)
[ "$("$RGAPS" --version)" = "rgaps $v" ] || fail "rgaps --version: $("$RGAPS" --version)"
if [ -x "$RGAPS_BUILD/tools/rgaps-top" ]; then
	[ "$("$RGAPS_BUILD/tools/rgaps-top" --version)" = "rgaps-top $v" ] || fail "rgaps-top --version"
fi
sock=$RGAPS_SOCKET
RGAPS_SOCKET=$T/elsewhere "$RGAPS" --socket "$sock" topics >"$T/topics.out" ||
	fail "rgaps --socket: $(cat "$T/topics.out")"
grep -q "^small " "$T/topics.out" || fail "rgaps --socket topics: $(cat "$T/topics.out")"
RGAPS_SOCKET=$T/elsewhere "$RGAPS" stats --socket="$sock" small >/dev/null || fail "--socket= after the command"
grep -q "^small .* 64KiB" "$T/topics.out" || fail "sizes are not written as rgapsd writes them: $(cat "$T/topics.out")"
ok "rgaps --version '$v', --socket before and after the command, sizes as 64KiB"
touch "$T/plain"
for p in "$T:a directory" "$T/plain:a regular file"; do
	RGAPS_SOCKET=${p%%:*} expect_exit 1 "$RGAPS" topics
	grep -qF "${p%%:*} is ${p#*:}, not rgapsd's socket" "$T/expect.out" ||
		fail "RGAPS_SOCKET=${p%%:*}: $(cat "$T/expect.out")"
done
ok "RGAPS_SOCKET naming a directory or a file says so"
stop_daemon
