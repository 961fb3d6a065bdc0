#!/bin/bash
# Membership through etcd over TLS with client certificates (made here with
# openssl) and etcd authentication: a user whose role may read and write the
# cluster's prefix only, its password in a file. A and B find each other and
# deliver; C, with no client certificate, and D, with a wrong password, never
# get in: each says why (stats, log), registers nothing and has no session.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/etcd_lib.sh"
host A 0; host B 1; host C 2; host D 3
etcd_tls
printf 'secret\n' > "$T/etcd.pw"; chmod 600 "$T/etcd.pw"
printf 'wrong\n' > "$T/wrong.pw"; chmod 600 "$T/wrong.pw"
TLS="\"tls_ca\": \"$TLS_CA\", \"tls_cert\": \"$TLS_CERT\", \"tls_key\": \"$TLS_KEY\","
ETCD_DISCOVERY_EXTRA="$TLS \"username\": \"rgaps\", \"password_file\": \"$T/etcd.pw\","
start_etcd 1
for cmd in "user add root:rootpw" "user grant-role root root" "user add rgaps:secret" \
	"role add rgaps" "role grant-permission rgaps --prefix=true readwrite $ETCD_PREFIX/" \
	"user grant-role rgaps rgaps" "auth enable"; do
	ctl $cmd >"$T/ctl.out" 2>&1 || fail "etcdctl $cmd: $(cat "$T/ctl.out")"
done
ok "etcd serves https, asks for client certificates, and authenticates users"
for h in A B; do NO_WAIT=1 start_host $h; done
DAEMON_EXTRA=$(etcd_daemon_extra "\"tls_ca\": \"$TLS_CA\", \"username\": \"rgaps\", \"password_file\": \"$T/etcd.pw\",") NO_WAIT=1 start_host C
DAEMON_EXTRA=$(etcd_daemon_extra "$TLS \"username\": \"rgaps\", \"password_file\": \"$T/wrong.pw\",") NO_WAIT=1 start_host D
for h in A B C D; do wait_until 20 host_answers $h || fail "$h did not come up"; done
wait_until 30 all_live 1 A B || fail "A and B did not find each other: $(ms_json A)"
[ "$(jnum "$(hstats A)" auths)" -ge 1 ] || fail "A did not authenticate: $(hstats A)"
bg sub env RGAPS_SOCKET=${SOCK[B]} "$RGAPS" sub tls --count 20 --verify --timeout 30
wait_until 20 knows_sub A B tls || fail "A never learned that B subscribes"
on A "$RGAPS" pub tls --count 20 --size 16KiB >/dev/null || fail "publish on A"
wait_ok sub
expect_sub sub received=20 verified=20 mismatched=0 gaps=0 drops=0
ok "A and B found each other through etcd over TLS, as user rgaps, and deliver"
wait_until 20 ms_state_is C unreachable || fail "C: $(ms_json C)"
ms_json C | grep -qi 'certificate\|ssl\|tls\|handshake' || fail "C does not say that TLS failed: $(ms_json C)"
wait_until 20 ms_state_is D unreachable || fail "D: $(ms_json D)"
ms_json D | grep -q 'invaliduserIDorpassword' || fail "D does not say that its password was refused: $(ms_json D)"
grep -q "membership: etcd unusable" "$T/C.log" && grep -q "membership: etcd unusable" "$T/D.log" ||
	fail "C and D did not log why they are out"
for h in C D; do sessions_up $h 0 || fail "$h has a session"; done
hosts_are A 1 || fail "A knows more than B: $(ms_json A)"
ok "C (no client certificate) and D (wrong password) stay out and say why: $(ms_json C | grep -o '"last_error":"[^"]*"' | cut -c 1-120)"
etcd_finish A B C D
