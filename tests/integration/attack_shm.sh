#!/bin/bash
# A local client attacks through shared memory (SECURITY.md): attached to one topic as
# an unprivileged user, it overwrites every byte of every mapping it can write - its own region,
# its own pool - with random bytes or zeros, again and again, then exits or stays alive holding
# what it holds; it also checks that no read-only mapping can be made writable. Meanwhile and
# afterwards:
#   - rgapsd lives, and `rgaps topics` / `rgaps stats` answer within 1 s;
#   - a verifying pair on another topic gets every message intact;
#   - a new verifying pair on the attacked topic gets verified data (drop_oldest) or a clear
#     error (block: the attacker stalls the topic as a subscriber that stops reading would),
#     within 10 s, never a hang and never wrong bytes;
#   - rgapsd stops cleanly at the end.
. "$(dirname "$0")/lib.sh"
chmod 755 "$T" # the attacker (nobody) must reach the socket
mkdir -p "$T/topics.d"
cat > "$T/rgapsd.json" <<JSON
{ "topics_dir": "$T/topics.d",
  "defaults": { "pool_size": "16MiB", "max_message_size": "64KiB", "overflow": "drop_oldest" } }
JSON
cat > "$T/topics.d/victimb.json" <<JSON
{ "pool_size": "16MiB", "max_message_size": "64KiB", "overflow": "block", "block_timeout_ms": 300 }
JSON
start_daemon --config "$T/rgapsd.json"
AS_NOBODY=(setpriv --reuid=nobody --regid=nogroup --clear-groups --)
"${AS_NOBODY[@]}" true || fail "cannot run as nobody here (setpriv)"

answers_fast() {
	for q in topics stats; do
		timeout 1 "$RGAPS" $q >/dev/null || fail "rgaps $q did not answer within 1 s ($1)"
	done
}

round=0
for topic in victim victimb; do
	for role in sub pub; do
		for fill in random zero; do
			for after in exit stay; do
				[ $topic = victimb ] && [ $role = pub ] && continue
				round=$((round + 1))
				what="$topic: $role writes $fill, then ${after}s"
				bg "atk$round" "${AS_NOBODY[@]}" "$ITEST" scribble $topic $role $fill $after 1.5
				bg "osub$round" "$ITEST" legitsub other 800
				sleep 0.2
				bg "opub$round" "$ITEST" legitpub other 800
				for _ in 1 2 3; do answers_fast "$what"; sleep 0.3; done
				wait_ok "opub$round"
				wait_ok "osub$round"
				grep -q "legitsub: 800 verified, 0 lost" "$T/osub$round.out" ||
					fail "$what: the other topic's pair: $(cat "$T/osub$round.out")"
				if [ $after = exit ]; then
					wait_ok "atk$round"
				else
					wait_until 5 grep -q "rounds over" "$T/atk$round.out" ||
						fail "$what: the attacker did not finish: $(cat "$T/atk$round.out")"
				fi
				grep -q "^FAIL" "$T/atk$round.out" && fail "$what: $(grep ^FAIL "$T/atk$round.out")"
				kill -0 "$DAEMON_PID" || fail "$what: rgapsd died"
				answers_fast "$what"
				# A new pair on the attacked topic, bounded by 10 s.
				BG_TIMEOUT=10 bg "vsub$round" "$ITEST" legitsub $topic 200
				sleep 0.2
				BG_TIMEOUT=10 bg "vpub$round" "$ITEST" legitpub $topic 200
				prc=0
				wait "$(bg_pid vpub$round)" || prc=$?
				src=0
				wait "$(bg_pid vsub$round)" || src=$?
				[ $src -ne 3 ] || fail "$what: WRONG BYTES: $(cat "$T/vsub$round.out")"
				[ $src -ne 124 ] && [ $prc -ne 124 ] || fail "$what: the new pair hung"
				if [ $topic = victim ]; then
					[ $src -eq 0 ] && [ $prc -eq 0 ] ||
						fail "$what: new pair: $(cat "$T/vpub$round.out" "$T/vsub$round.out")"
					ok "$what: $(grep -h 'scribble:' "$T/atk$round.out" | tail -1); new pair: $(tail -1 "$T/vsub$round.out")"
				else
					[ $src -eq 0 ] || grep -q "legitpub: publish.*: \|legitsub: take: " \
						"$T/vpub$round.out" "$T/vsub$round.out" ||
						fail "$what: no data and no clear error: $(cat "$T/vpub$round.out" "$T/vsub$round.out")"
					ok "$what: new pair: $(tail -qn1 "$T/vpub$round.out" "$T/vsub$round.out" | tr '\n' ' ')"
				fi
				[ $after = stay ] && kill9 "atk$round"
				kill -0 "$DAEMON_PID" || fail "$what: rgapsd died"
			done
		done
	done
done
answers_fast "after every attack"
"$RGAPS" stats victim --json > "$T/victim.json"
# rgapsd's own count (the subscribers' bad_entries_seen is what each reports of itself, and
# an attacker's region reports anything).
grep -q '"bad_regions":[[:space:]]*[1-9]' "$T/victim.json" ||
	fail "rgapsd counted no spoiled region: did the attacks reach anyone? $(grep bad_ "$T/victim.json")"
ok "rgapsd read the spoiled regions and counted them: $(grep -o '"bad_regions":[[:space:]]*[0-9]*' "$T/victim.json")"
stop_daemon
ok "rgapsd stopped cleanly after $round attacks"
