# Several daemons on one machine standing for several hosts (distinct ports,
# sockets and shm instances; addresses 127.0.0.1 unless a host is given its
# own, e.g. the Soft-RoCE addresses in tests/rdma/e2e_verbs.sh). Sourced after lib.sh.
KEY="$T/psk"
head -c 48 /dev/urandom > "$KEY"; chmod 600 "$KEY"
BASE=$(( 20000 + (RANDOM % 2000) * 10 ))
declare -A DPID SOCK PORT ADDR

# host NAME INDEX [ADDR]: define a host (its control port is BASE + 10*INDEX; data ports +1,
# +2) listening on ADDR (default $HOST_ADDR, else 127.0.0.1); its peers reach it there.
host() {
	PORT[$1]=$((BASE + 10 * $2)); SOCK[$1]="$T/$1.sock"; ADDR[$1]=${3:-${HOST_ADDR:-127.0.0.1}}
}

# start_host NAME [extra JSON for the topic defaults]: start its daemon with every other host as peer
# ($DAEMON_EXTRA, if set, is more daemon keys, each followed by a comma)
start_host() {
	local name=$1 defaults=${2:-} peers=""
	for h in "${!PORT[@]}"; do
		[ "$h" = "$name" ] && continue
		peers="$peers${peers:+, }\"${ADDR[$h]}:${PORT[$h]}\""
	done
	cat > "$T/$name.json" <<JSON
{ ${DAEMON_EXTRA:-} "listen": "${ADDR[$name]}:${PORT[$name]}", "peers": [ $peers ], "key_file": "$KEY",
  "keepalive_ms": ${KEEPALIVE_MS:-200}, "defaults": { "transport": "${TRANSPORT:-tcp}" $defaults } }
JSON
	# RGAPSD_FAULT=...: this daemon takes its tcp transport from the test-only fault
	# plugin (tests/fault/transport_fault.c), which misbehaves as asked; its folder
	# is FAULT_PLUGIN_DIR where a test made its own.
	env ${RGAPSD_FAULT:+RGAPS_PLUGIN_DIR=${FAULT_PLUGIN_DIR:-$RGAPS_BUILD/tests/fault/plugins}} \
		"$RGAPSD" --config "$T/$name.json" --socket "${SOCK[$name]}" --instance "$INSTANCE$name" \
		--log-level "${RGAPS_TEST_LOG:-info}" >>"$T/$name.log" 2>&1 &
	DPID[$name]=$!
	PIDS+=(${DPID[$name]})
	# Bounded by the clock, not a count of polls: under TCG (the rdma VM) or a loaded
	# machine one poll takes far longer than its 50 ms sleep.
	local end=$((SECONDS + ${START_TIMEOUT:-20}))
	while [ $SECONDS -lt $end ]; do
		RGAPS_SOCKET=${SOCK[$name]} "$RGAPS" topics >/dev/null 2>&1 && return 0
		kill -0 "${DPID[$name]}" 2>/dev/null || fail "$name exited at start: $(tail -n 5 "$T/$name.log")"
		sleep 0.05
	done
	fail "$name did not come up in ${START_TIMEOUT:-20} s: $(tail -n 5 "$T/$name.log")"
}

stop_host() { # stop_host NAME [signal]
	local sig=${2:-TERM}
	kill -"$sig" "${DPID[$1]}" 2>/dev/null
	for _ in $(seq 100); do kill -0 "${DPID[$1]}" 2>/dev/null || break; sleep 0.05; done
	kill -0 "${DPID[$1]}" 2>/dev/null && fail "$1 did not stop on SIG$sig"
	wait "${DPID[$1]}" 2>/dev/null; local rc=$?
	[ "$sig" = TERM ] && [ $rc -ne 0 ] && fail "$1 exited $rc after SIGTERM"
	return 0
}

on() { local h=$1; shift; RGAPS_SOCKET=${SOCK[$h]} "$@"; }
flat() { tr -d ' \t\n'; }
# knows_sub A B TOPIC: host A has heard that B subscribes to TOPIC
knows_sub() { on "$1" "$RGAPS" stats --json | flat | grep -q "\"name\":\"${ADDR[$2]}:${PORT[$2]}\",\"up\":true[^]]*\"subscribes\":\[[^]]*\"$3\""; }
peer_up() { on "$1" "$RGAPS" stats --json | flat | grep -q "\"name\":\"${ADDR[$2]}:${PORT[$2]}\",\"up\":true"; }
# stage_count HOST TOPIC POINT FIELD: peers.stages[] of TOPIC, POINT's FIELD (runs, failed,
# ns; 0 when absent)
stage_count() {
	local v
	v=$(on "$1" "$RGAPS" stats --json | flat | grep -o "{\"topic\":\"$2\",\"stages\":[^]]*\][^]]*}}" |
		grep -o "\"$3\":{[^}]*}" | grep -o "\"$4\":[0-9]*" | cut -d: -f2)
	echo "${v:-0}"
}
