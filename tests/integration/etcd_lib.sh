# The membership tests' etcd (src/daemon/membership/): members of Debian's
# etcd-server started by the test on loopback, each with its own data directory
# and ports, and daemons that find each other there with no "peers" key.
# Sourced after lib.sh; it sources remote_lib.sh itself with room for up to 18
# hosts (ports BASE .. BASE+179; a larger PORT_SPAN for more) and the etcd members
# (the last 20 ports of the range).
command -v etcd >/dev/null || skip "etcd is not installed (Debian: etcd-server)"
command -v etcdctl >/dev/null || skip "etcdctl is not installed (Debian: etcd-client)"
PORT_SPAN=${PORT_SPAN:-200}
. "$(dirname "${BASH_SOURCE[0]}")/remote_lib.sh"
NO_PEERS=1
ETCD_PREFIX="/rgaps-test/${RGAPS_TEST_ID}"
# The lease TTL of the tests' daemons: short, so that a dead one goes quickly.
LEASE_TTL=${LEASE_TTL:-3}
declare -A EPID
ETCD_N=0
ETCD_SCHEME=http
ETCD_TLS_ARGS=()     # server flags of a TLS test (etcd_tls.sh)
ETCDCTL_TLS_ARGS=()  # and the matching etcdctl flags
ETCD_DISCOVERY_EXTRA="" # more "discovery" keys, each followed by a comma

# The members' ports: the last 20 of the range (the hosts take 10 each from BASE up).
etcd_client_port() { echo $((BASE + PORT_SPAN - 20 + 2 * $1)); }
etcd_peer_port() { echo $((BASE + PORT_SPAN - 19 + 2 * $1)); }
etcd_url() { echo "$ETCD_SCHEME://127.0.0.1:$(etcd_client_port "$1")"; }
etcd_endpoints_csv() {
	local i s=""
	for ((i = 0; i < ETCD_N; i++)); do s="$s${s:+,}$(etcd_url $i)"; done
	echo "$s"
}
etcd_endpoints_json() {
	local i s=""
	for ((i = 0; i < ETCD_N; i++)); do s="$s${s:+, }\"$(etcd_url $i)\""; done
	echo "[ $s ]"
}
ctl() { ETCDCTL_API=3 etcdctl --endpoints "$(etcd_endpoints_csv)" --command-timeout=3s "${ETCDCTL_TLS_ARGS[@]}" "$@"; }

# etcd_tls: the members serve https with a certificate of a CA made here and ask every
# client for a certificate of that CA (--client-cert-auth). The daemons' client
# certificate has no CommonName: etcd 3.4's JSON gateway refuses one that has (its CN
# would not name the etcd user, as it does over gRPC). Sets TLS_CA, TLS_CERT, TLS_KEY.
etcd_tls() {
	command -v openssl >/dev/null || skip "openssl is not installed"
	local d="$T/tls"
	mkdir -p "$d"
	openssl_q() { openssl "$@" >"$d/openssl.log" 2>&1 || fail "openssl $1: $(cat "$d/openssl.log")"; }
	openssl_q req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
		-keyout "$d/ca.key" -out "$d/ca.pem" -subj "/CN=rgaps test CA"
	openssl_q req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=etcd" \
		-keyout "$d/server.key" -out "$d/server.csr"
	# clientAuth too: etcd's JSON gateway dials etcd's own gRPC with this certificate.
	printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >"$d/server.ext"
	openssl_q x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
		-days 2 -extfile "$d/server.ext" -out "$d/server.pem"
	openssl_q req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/O=rgaps daemons" \
		-keyout "$d/client.key" -out "$d/client.csr"
	printf 'extendedKeyUsage=clientAuth\n' >"$d/client.ext"
	openssl_q x509 -req -in "$d/client.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
		-days 2 -extfile "$d/client.ext" -out "$d/client.pem"
	chmod 600 "$d"/*.key
	TLS_CA="$d/ca.pem" TLS_CERT="$d/client.pem" TLS_KEY="$d/client.key"
	ETCD_SCHEME=https
	ETCD_TLS_ARGS=(--cert-file "$d/server.pem" --key-file "$d/server.key" --trusted-ca-file "$d/ca.pem" --client-cert-auth)
	ETCDCTL_TLS_ARGS=(--cacert "$d/ca.pem" --cert "$d/client.pem" --key "$d/client.key")
}

# etcd_run I: start member I of the cluster of ETCD_N (again: the same data directory).
etcd_run() {
	local i=$1 j cluster=""
	for ((j = 0; j < ETCD_N; j++)); do
		cluster="$cluster${cluster:+,}e$j=http://127.0.0.1:$(etcd_peer_port $j)"
	done
	etcd --name "e$i" --data-dir "$T/etcd$i" \
		--listen-client-urls "$(etcd_url $i)" --advertise-client-urls "$(etcd_url $i)" \
		--listen-peer-urls "http://127.0.0.1:$(etcd_peer_port $i)" \
		--initial-advertise-peer-urls "http://127.0.0.1:$(etcd_peer_port $i)" \
		--initial-cluster "$cluster" --initial-cluster-token "rgaps-$RGAPS_TEST_ID" \
		--initial-cluster-state new --logger zap --log-outputs stderr --log-level warn \
		"${ETCD_TLS_ARGS[@]}" >>"$T/etcd$i.log" 2>&1 &
	EPID[$i]=$!
	PIDS+=(${EPID[$i]})
}
etcd_healthy() { ctl endpoint health >/dev/null 2>&1; }

# start_etcd N: a cluster of N members; returns once it answers (a leader is elected).
start_etcd() {
	local i
	ETCD_N=$1
	for ((i = 0; i < ETCD_N; i++)); do etcd_run $i; done
	wait_until 30 etcd_healthy || fail "etcd did not come up: $(tail -n 5 "$T/etcd0.log")"
	DAEMON_EXTRA=$(etcd_daemon_extra "$ETCD_DISCOVERY_EXTRA")
}
# etcd_daemon_extra KEYS: DAEMON_EXTRA (remote_lib.sh) for a daemon of this cluster; KEYS are
# more "discovery" keys, each followed by a comma.
etcd_daemon_extra() {
	echo "\"discovery\": { \"endpoints\": $(etcd_endpoints_json), \"prefix\": \"$ETCD_PREFIX\", $1 \"lease_ttl_s\": $LEASE_TTL, \"timeout_ms\": 1000 },"
}
# etcd_stop I [KILL]: stop member I (SIGTERM, or SIGKILL); etcd exits by the signal (143).
etcd_stop() {
	local p=${EPID[$1]}
	kill -"${2:-TERM}" "$p" 2>/dev/null || true
	wait_until 10 lib_gone "$p" || kill -KILL "$p" 2>/dev/null || true
	wait "$p" 2>/dev/null || true
	forget_pid "$p"
}

# etcd_not_leader I: member I hands the leadership to another if it has it (so that stopping
# it costs no election: its clients only move to another member).
etcd_not_leader() {
	local leader to
	leader=$(ctl endpoint status | awk -F', ' '$5 == "true" { print $1 }')
	[ "$leader" = "$(etcd_url "$1")" ] || return 0
	to=$(ctl endpoint status | awk -F', ' -v me="$(etcd_url "$1")" '$1 != me { print $2; exit }')
	ETCDCTL_API=3 etcdctl --endpoints "$leader" --command-timeout=5s "${ETCDCTL_TLS_ARGS[@]}" \
		move-leader "$to" >/dev/null || fail "etcd: the leadership did not move from member $1"
}

# etcd_finish HOSTS...: the end of a test that passed: the daemons stop as a user stops
# them (SIGTERM, exit 0, their leases revoked), then etcd, which exits by its signal.
etcd_finish() {
	local h i
	for h in "$@"; do stop_host "$h"; done
	for ((i = 0; i < ETCD_N; i++)); do
		! lib_ours "${EPID[$i]}" || etcd_stop $i
	done
}

# The "membership" object of HOST's stats, flat.
ms_json() {
	local s
	s=$(hstats "$1") || return 1
	grep -o '"membership":{[^{}]*' <<<"$s"
}
ms_num() { local m; m=$(ms_json "$1") || return 1; jnum "$m" "$2"; }
ms_state_is() { ms_json "$1" 2>/dev/null | grep -q "\"state\":\"$2\""; }
# hosts_are HOST N: HOST's membership knows N other hosts
hosts_are() { [ "$(ms_num "$1" hosts 2>/dev/null)" = "$2" ]; }
# sessions_up HOST N: HOST has N sessions up
sessions_up() {
	local s
	s=$(hstats "$1" 2>/dev/null) || return 1
	[ "$(grep -o '"up":true' <<<"$s" | wc -l)" = "$2" ]
}
# all_live N HOSTS...: every HOST is live in etcd, knows N hosts and has N sessions up
all_live() {
	local n=$1 h
	shift
	for h in "$@"; do
		ms_state_is "$h" live && hosts_are "$h" "$n" && sessions_up "$h" "$n" || return 1
	done
}
# subs_known TOPIC N HOSTS...: every HOST heard that N peers subscribe to TOPIC
subs_known() {
	local topic=$1 n=$2 h s
	shift 2
	for h in "$@"; do
		s=$(hstats "$h" 2>/dev/null) || return 1
		[ "$(grep -o "\"up\":true[^]]*\"subscribes\":\[[^]]*\"$topic\"" <<<"$s" | wc -l)" = "$n" ] || return 1
	done
}
# knows HOST OTHER: HOST has a session up with OTHER
knows() { peer_up "$1" "$2" 2>/dev/null; }
