# Several daemons on one machine standing for several hosts (distinct ports,
# sockets and shm instances; addresses 127.0.0.1 unless a host is given its
# own, e.g. the Soft-RoCE addresses in tests/rdma/e2e_verbs.sh). Sourced after lib.sh.
KEY="$T/psk"
head -c 48 /dev/urandom > "$KEY"; chmod 600 "$KEY"
# Ports BASE..BASE+PORT_SPAN-1 (60 unless the test sets more): a range no TCP socket of this
# machine uses (other tests, other builds run beside this one), so that a daemon's listen
# does not fail by bad luck.
ports_free() { # FIRST COUNT
	local used p
	used=$(ss -Htan 2>/dev/null | awk '{ n = split($4, a, ":"); print a[n] }') || return 0
	for ((p = $1; p < $1 + $2; p++)); do
		! grep -qx "$p" <<<"$used" || return 1
	done
}
# Below the ephemeral range, where the kernel picks the ports of outgoing connections
# (etcd's, curl's, other tests'): a port checked free there stays free.
EPHEMERAL_LOW=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
for _ in $(seq 50); do
	BASE=$(( 10000 + (RANDOM % ((EPHEMERAL_LOW - 10000 - ${PORT_SPAN:-60}) / 10)) * 10 ))
	! ports_free $BASE "${PORT_SPAN:-60}" || break
done
declare -A DPID SOCK PORT ADDR NETNS

# host NAME INDEX [ADDR]: define a host (its control port is BASE + 10*INDEX; data ports +1,
# +2) listening on ADDR (default $HOST_ADDR, else 127.0.0.1); its peers reach it there.
host() {
	PORT[$1]=$((BASE + 10 * $2)); SOCK[$1]="$T/$1.sock"; ADDR[$1]=${3:-${HOST_ADDR:-127.0.0.1}}
}

# start_host NAME [extra JSON for the topic defaults]: start its daemon with every other host as peer
# (none with NO_PEERS=1: they find each other in etcd, etcd_lib.sh)
# ($DAEMON_EXTRA, if set, is more daemon keys, each followed by a comma). Keepalive: rgapsd's
# default 2 s unless KEEPALIVE_MS says otherwise; a loaded 2-core machine can leave a daemon
# unscheduled for 0.6 s, so only the tests about stalled peers ask for 200 ms.
start_host() {
	local name=$1 defaults=${2:-} peers=""
	for h in "${!PORT[@]}"; do
		[ "$h" = "$name" ] || [ -n "${NO_PEERS:-}" ] && continue
		peers="$peers${peers:+, }\"${ADDR[$h]}:${PORT[$h]}\""
	done
	cat > "$T/$name.json" <<JSON
{ ${DAEMON_EXTRA:-} "listen": "${ADDR[$name]}:${PORT[$name]}", "peers": [ $peers ], "key_file": "$KEY",
  "keepalive_ms": ${KEEPALIVE_MS:-2000}, "defaults": { "transport": "${TRANSPORT:-tcp}" $defaults } }
JSON
	# RGAPSD_FAULT=...: this daemon takes its tcp transport from the test-only fault
	# plugin (tests/fault/transport_fault.c), which misbehaves as asked; its folder
	# is FAULT_PLUGIN_DIR where a test made its own.
	# NETNS[name] (netns_lib.sh): its daemon runs in that network namespace.
	# HOST_AS=(a prefix that execs its command, e.g. setpriv): the daemons run through it
	# (rgapsd as a user of its own: the attack tests; its sockets, key and $T must suit).
	${NETNS[$name]:+ip netns exec ${NETNS[$name]}} ${HOST_AS[@]+"${HOST_AS[@]}"} \
	env ${RGAPSD_FAULT:+RGAPS_PLUGIN_DIR=${FAULT_PLUGIN_DIR:-$RGAPS_BUILD/tests/fault/plugins}} \
		"$RGAPSD" --config "$T/$name.json" --socket "${SOCK[$name]}" --instance "$INSTANCE$name" \
		--log-level "${RGAPS_TEST_LOG:-info}" >>"$T/$name.log" 2>&1 &
	DPID[$name]=$!
	PIDS+=(${DPID[$name]})
	# Bounded by the clock: under TCG (the rdma VM) or a loaded machine one poll takes
	# far longer than its 50 ms sleep.
	[ -n "${NO_WAIT:-}" ] && return 0
	wait_until "${START_TIMEOUT:-20}" host_answers "$name" ||
		fail "$name did not come up in ${START_TIMEOUT:-20} s: $(tail -n 5 "$T/$name.log")"
}
host_answers() { # NAME: its daemon answers (fails the test if it died)
	kill -0 "${DPID[$1]}" 2>/dev/null || fail "$1 exited at start: $(tail -n 5 "$T/$1.log")"
	RGAPS_SOCKET=${SOCK[$1]} "$RGAPS" topics >/dev/null 2>&1
}

# stop_host NAME [KILL]: SIGTERM (it must exit 0 within 10 s), or SIGKILL
stop_host() {
	if [ "${2:-TERM}" = KILL ]; then
		kill -KILL "${DPID[$1]}"
		wait "${DPID[$1]}" 2>/dev/null || true
	else
		stop_pid "${DPID[$1]}" "$1" || fail "$1 did not stop cleanly on SIGTERM"
	fi
	forget_pid "${DPID[$1]}"
}

on() { local h=$1; shift; RGAPS_SOCKET=${SOCK[$h]} "$@"; }
# hstats HOST [TOPIC]: HOST's stats as flat JSON (fails the test if it does not answer)
hstats() { local h=$1; shift; on "$h" "$RGAPS" stats "$@" --json | flat; }
# knows_sub A B TOPIC: host A has heard that B subscribes to TOPIC
knows_sub() {
	local s
	s=$(hstats "$1") || return 1
	grep -q "\"name\":\"${ADDR[$2]}:${PORT[$2]}\",\"up\":true[^]]*\"subscribes\":\[[^]]*\"$3\"" <<<"$s"
}
peer_up() {
	local s
	s=$(hstats "$1") || return 1
	grep -q "\"name\":\"${ADDR[$2]}:${PORT[$2]}\",\"up\":true" <<<"$s"
}
# link_sent HOST PEER [TRANSPORT]: records HOST's data link (tcp) to PEER has sent
link_sent() {
	local s l
	s=$(hstats "$1")
	l=$(grep -o "\"name\":\"${ADDR[$2]}:${PORT[$2]}\",\"up\":[a-z]*,[^{]*\"links\":{\"${3:-tcp}\":{[^}]*}" <<<"$s") ||
		fail "$1's stats have no ${3:-tcp} link to $2: $s"
	jnum "$l" records_sent
}
# stage_count HOST TOPIC POINT FIELD: peers.stages[] of TOPIC, POINT's FIELD (runs, failed,
# ns; 0 when absent)
stage_count() {
	local s v
	s=$(hstats "$1")
	v=$(grep -o "{\"topic\":\"$2\",\"stages\":[^]]*\][^]]*}}" <<<"$s" |
		grep -o "\"$3\":{[^}]*}" | grep -o "\"$4\":[0-9]*" | cut -d: -f2) || true
	echo "${v:-0}"
}
