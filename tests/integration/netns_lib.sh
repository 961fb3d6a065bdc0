# Hosts in network namespaces on one switch, as the relay tests and benchmark want them
# (sourced after lib.sh and remote_lib.sh; needs root and iproute2, else the test skips).
#
#   netns_hosts N RATE: hosts H0 .. H(N-1), each a namespace with one veth to a bridge in a
#   namespace of its own (the switch), shaped with tc to RATE (e.g. 200mbit) in both
#   directions, as a host's NIC is: its upload on its own end, its download on the
#   switch's. Host Hi has the address 10.A.B.(i+1) and the control port BASE + 10 i
#   (remote_lib.sh's host), and its daemon runs in its namespace (start_host). RATE
#   "none": no shaping. Everything goes at exit, pass or fail.
#   netns_link HOST up|down: plug a host's cable in or out (its end of the veth).
#   netns_rate HOST RATE: shape one host's cable to another rate.
#   netns_start N DEFAULTS: the daemons of H0 .. H(N-1) up, every pair's session too.
#
# Namespaces and links are named after this shell's pid, so that tests and benchmarks
# running at once never collide.
NETNS_SW=
NETNS_NET=

netns_require() {
	[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces"
	command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
	command -v tc >/dev/null || skip "iproute2's tc is not installed"
}

# netns_shape NS DEV RATE: a token bucket of RATE on DEV's egress (a burst of 4 ms at that rate)
netns_shape() {
	local ns=$1 dev=$2 rate=$3
	[ "$rate" = none ] && return 0
	tc -n "$ns" qdisc add dev "$dev" root tbf rate "$rate" burst 512kb latency 100ms 2>"$T/tc.err" ||
		skip "cannot shape a veth with tc tbf: $(cat "$T/tc.err")"
}

netns_hosts() {
	local n=$1 rate=$2 i ns vh vs
	netns_require
	NETNS_NET="10.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1))"
	NETNS_SW="rgsw$$"
	at_exit ip netns del "$NETNS_SW"
	ip netns add "$NETNS_SW" 2>"$T/ns.err" || skip "cannot create network namespaces: $(cat "$T/ns.err")"
	ip -n "$NETNS_SW" link add br0 type bridge
	ip -n "$NETNS_SW" link set br0 up
	for ((i = 0; i < n; i++)); do
		ns="rgh$$x$i" vh="rgv$$h$i" vs="rgv$$s$i"
		at_exit ip netns del "$ns"
		ip netns add "$ns"
		ip link add "$vh" type veth peer name "$vs" 2>"$T/ns.err" ||
			skip "no veth support: $(cat "$T/ns.err")"
		ip link set "$vh" netns "$ns"
		ip link set "$vs" netns "$NETNS_SW"
		ip -n "$NETNS_SW" link set "$vs" master br0
		ip -n "$NETNS_SW" link set "$vs" up
		ip -n "$ns" link set lo up
		ip -n "$ns" addr add "$NETNS_NET.$((i + 1))/24" dev "$vh"
		ip -n "$ns" link set "$vh" up
		netns_shape "$ns" "$vh" "$rate"
		netns_shape "$NETNS_SW" "$vs" "$rate"
		NETNS[H$i]=$ns
		host "H$i" "$i" "$NETNS_NET.$((i + 1))"
	done
}

# netns_start N DEFAULTS: start the daemons of H0 .. H(N-1) (start_host, topic defaults
# DEFAULTS) and wait until every pair of them has its session up
netns_start() {
	local n=$1 i j
	for ((i = 0; i < n; i++)); do start_host H$i "$2"; done
	for ((i = 0; i < n; i++)); do
		for ((j = i + 1; j < n; j++)); do
			wait_until 20 peer_up H$i H$j || fail "the session H$i H$j did not come up"
		done
	done
}

# netns_rate HOST RATE: shape HOST's cable to RATE both ways from now on (a slower host)
netns_rate() {
	local i=${1#H}
	local tbf=(root tbf rate "$2" burst 512kb latency 100ms)
	tc -n "${NETNS[$1]}" qdisc change dev "rgv$$h$i" "${tbf[@]}" &&
		tc -n "$NETNS_SW" qdisc change dev "rgv$$s$i" "${tbf[@]}"
}

netns_link() {
	local i=${1#H}
	ip -n "${NETNS[$1]}" link set "rgv$$h$i" "$2"
}

# netns_tx HOST: bytes HOST has sent on its cable so far
netns_tx() {
	local i=${1#H}
	ip netns exec "${NETNS[$1]}" cat "/sys/class/net/rgv$$h$i/statistics/tx_bytes"
}
