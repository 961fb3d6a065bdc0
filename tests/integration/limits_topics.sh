#!/bin/bash
# Topics: no user's flood of topics can exhaust rgapsd, and a user denied on
# a topic cannot create it. Here the allow-list decides before anything
# exists; max_topics_per_user (10) stops nobody's flood with "quota",
# max_topics (50) everyone's with "limit"; configured topics are always
# created; rgapsd holds one segment per topic; root is served within 1 s
# throughout; and with create_topics "configured" no other topic can be made.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/limits_lib.sh"
need_users

shm_count() { daemon_segments "$INSTANCE-"; }
mkdir -p "$T/topics.d"
echo '{ "allowed_uids": [0] }' >"$T/topics.d/secret.json"
conf() { # conf CREATE_TOPICS
	cat >"$T/rgapsd.json" <<JSON
{ "max_topics": 50, "max_topics_per_user": 10, "create_topics": "$1",
  "defaults": { "pool_size": "64KiB", "max_message_size": "4KiB", "memory": "host" } }
JSON
}
conf any
start_daemon -c "$T/rgapsd.json"
rss0=$(rss_kb)

# Denied on 'secret': refused, and nothing made.
"${NOBODY[@]}" "$RGAPS" sub secret --count 1 --timeout 1 >"$T/secret.out" 2>&1 && fail "nobody attached to secret"
grep -q "allow-list" "$T/secret.out" || fail "no allow-list error: $(cat "$T/secret.out")"
[ "$(daemon_segments "$INSTANCE-secret-")" = 0 ] || fail "segments of 'secret' exist"
"$RGAPS" topics | grep -q "^secret " && fail "topic 'secret' was created by a denied attach"
ok "nobody denied on 'secret', and 'secret' was not created"

# nobody's flood: 10 topics, then "quota".
"${NOBODY[@]}" timeout 60 "$FLOOD" topics nb 100 >"$T/nb.out" 2>&1 || fail "flood: $(cat "$T/nb.out")"
cat "$T/nb.out"
[ "$(field "$T/nb.out" created)" = 10 ] && [ "$(field "$T/nb.out" quota)" = 90 ] ||
	fail "max_topics_per_user did not stop nobody at 10"
probe "after nobody's flood of topics"
# root is not bound by the quota, only by max_topics: 40 more, then "limit".
timeout 60 "$FLOOD" topics rt 100 >"$T/rt.out" 2>&1 || fail "flood: $(cat "$T/rt.out")"
cat "$T/rt.out"
[ "$(field "$T/rt.out" created)" = 40 ] && [ "$(field "$T/rt.out" limit)" = 60 ] ||
	fail "max_topics did not stop at 50 topics"
# One header segment per topic; the regions of the attachments went with their detach.
shm_is() { test "$(shm_count)" = "$1"; }
wait_until 5 shm_is 50 || fail "rgapsd holds $(shm_count) segments for 50 topics"
ok "50 topics, 50 segments"
probe "at max_topics"
rss_bounded "$rss0" 30000 "a flood of 200 topics"
# Configured topics do not count and are always created.
"$RGAPS" sub secret --count 0 >/dev/null || fail "root could not attach to the configured topic at max_topics"
ok "configured topic created at max_topics"
[ "$(dstat topics_refused_quota)" = 90 ] && [ "$(dstat topics_refused_max)" = 60 ] &&
	[ "$(dstat attach_denied)" = 1 ] ||
	fail "counters: quota $(dstat topics_refused_quota) max $(dstat topics_refused_max) denied $(dstat attach_denied)"
ok "counters: topics_refused_quota 90, topics_refused_max 60, attach_denied 1"
n=$(grep -c "created max_topics_per_user\|holds max_topics" "$T/rgapsd.log")
[ "$n" -le 12 ] || fail "$n log lines for 150 refusals: the rate limit did not hold"
ok "$n info lines for 150 refused attaches (rate-limited)"
stop_daemon

# create_topics "configured": nothing but topics.d, from anyone.
conf configured
start_daemon -c "$T/rgapsd.json"
"$RGAPS" sub adhoc --count 0 >"$T/adhoc.out" 2>&1 && fail "root created an unconfigured topic"
"$RGAPS" topics | grep -q "^adhoc " && fail "'adhoc' exists"
"$RGAPS" sub secret --count 0 >/dev/null || fail "the configured topic is refused"
[ "$(dstat topics_refused_unconfigured)" = 1 ] || fail "topics_refused_unconfigured: $(dstat topics_refused_unconfigured)"
grep -q 'create_topics is \\"configured\\"\|create_topics is "configured"' "$T/rgapsd.log" ||
	fail "the refusal does not say why"
ok "create_topics configured: 'adhoc' refused (not_found), 'secret' served"
stop_daemon
