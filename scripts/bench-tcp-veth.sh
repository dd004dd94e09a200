#!/usr/bin/env bash
# One TCP stream (iperf3) through a router on veth, the peers' offloads at
# Linux's defaults: Linux kernel forwarding against vrhost on af_packet, in
# one run, alternated round by round.
#
#   netns bt-src              netns bt-rtr (the router)               netns bt-dst
#   bts0 10.0.0.2 ── veth ── btr0 10.0.0.1 │ btr1 10.1.0.1 ── veth ── btd0 10.1.0.2
#   iperf3 -c                kernel ip_forward, or vrhost run          iperf3 -s
#
# Both routers get the same placement: the receive work of btr0 and btr1
# (ip_rcv → forward, or packet_rcv into vrhost's ring) is moved to the
# router core with RPS, and vrhost's worker is pinned there too; iperf3's
# client and server share the other core (2 CPUs) or get one each.
#
# Routers: kernel, af_packet (vrhost, virtio-net headers: super-frames and
# partial checksums carried), af_packet-nooffload (vrhost with every
# offload turned off on all four veth ends, the only way TCP passed before
# the headers were carried).
#
# Usage: scripts/bench-tcp-veth.sh [-s SECONDS] [-n ROUNDS] [-r ROUTERS] [-m MTU]
#   -s  seconds per iperf3 run (default 5)
#   -n  rounds of the whole set (default 2)
#   -r  comma-separated routers (default kernel,af_packet,af_packet-nooffload)
#   -m  MTU of every veth (default 1500)
# Env: VRHOST=path (default target/release/vrhost, built if missing).
# Output: CSV on stdout (router,round,gbit_s,retransmits), then a markdown
# table of the ratios to the kernel in the same round. Needs root, iproute2,
# ethtool, iperf3, taskset. Traffic stays inside the three namespaces,
# which are removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=5 ROUNDS=2 ROUTERS=kernel,af_packet,af_packet-nooffload MTU=1500
while getopts "s:n:r:m:" o; do
  case $o in
    s) SECS=$OPTARG ;; n) ROUNDS=$OPTARG ;; r) ROUTERS=$OPTARG ;; m) MTU=$OPTARG ;;
    *) sed -n '2,30p' "$0"; exit 2 ;;
  esac
done
for t in ip ethtool iperf3 taskset awk; do
  command -v $t >/dev/null || { echo "missing $t" >&2; exit 1; }
done
VRHOST=${VRHOST:-target/release/vrhost}
[ -x "$VRHOST" ] || cargo build --release -q -p vrhost -p vrhost-tools
NCPU=$(nproc)
ROUTER_CORE=1
PEER_CORES=0
[ "$NCPU" -ge 3 ] && PEER_CORES=0,2
WORK=$(mktemp -d)
nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

down() {
  [ -f "$WORK/vrhost.pid" ] && kill "$(cat "$WORK/vrhost.pid")" 2>/dev/null || true
  rm -f "$WORK/vrhost.pid"
  for ns in bt-src bt-rtr bt-dst; do ip netns del $ns 2>/dev/null || true; done
}
trap 'down; rm -rf "$WORK"' EXIT

up() { # $1: router kind
  down
  for ns in bt-src bt-rtr bt-dst; do ip netns add $ns; nsx $ns ip link set lo up; done
  ip link add bts0 mtu "$MTU" netns bt-src type veth peer name btr0 mtu "$MTU" netns bt-rtr
  ip link add btd0 mtu "$MTU" netns bt-dst type veth peer name btr1 mtu "$MTU" netns bt-rtr
  nsx bt-src ip addr add 10.0.0.2/24 dev bts0
  nsx bt-dst ip addr add 10.1.0.2/24 dev btd0
  local mask
  mask=$(printf '%x' $((1 << ROUTER_CORE)))
  for d in btr0 btr1; do
    nsx bt-rtr sysctl -qw "net.ipv6.conf.$d.disable_ipv6=1"
    echo "$mask" | nsx bt-rtr tee "/sys/class/net/$d/queues/rx-0/rps_cpus" >/dev/null
  done
  if [ "$1" = af_packet-nooffload ]; then
    nsx bt-src ethtool -K bts0 tx off rx off tso off gso off gro off >/dev/null
    nsx bt-dst ethtool -K btd0 tx off rx off tso off gso off gro off >/dev/null
    for d in btr0 btr1; do
      nsx bt-rtr ethtool -K $d tx off rx off tso off gso off gro off >/dev/null
    done
  fi
  for ns_dev in bt-src:bts0 bt-dst:btd0 bt-rtr:btr0 bt-rtr:btr1; do
    nsx "${ns_dev%%:*}" ip link set "${ns_dev#*:}" up
  done
  nsx bt-src ip route add default via 10.0.0.1
  nsx bt-dst ip route add default via 10.1.0.1
  if [ "$1" = kernel ]; then
    nsx bt-rtr ip addr add 10.0.0.1/24 dev btr0
    nsx bt-rtr ip addr add 10.1.0.1/24 dev btr1
    nsx bt-rtr sysctl -qw net.ipv4.ip_forward=1
  else
    cat >"$WORK/router.toml" <<EOF
[dataplane]
workers = [$ROUTER_CORE]

[[port]]
name = "p0"
driver = "af_packet"
interface = "btr0"

[[port]]
name = "p1"
driver = "af_packet"
interface = "btr1"

[[router]]
name = "red"

  [[router.interface]]
  name = "red0"
  port = "p0"
  mtu = $MTU
  addresses = ["10.0.0.1/24"]

  [[router.interface]]
  name = "red1"
  port = "p1"
  mtu = $MTU
  addresses = ["10.1.0.1/24"]
EOF
    nsx bt-rtr "$VRHOST" run --config "$WORK/router.toml" >"$WORK/vrhost.log" 2>&1 &
    echo $! >"$WORK/vrhost.pid"
  fi
  for _ in $(seq 50); do
    nsx bt-src ping -c1 -W1 10.1.0.2 >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "router $1: no path from bt-src to bt-dst" >&2
  cat "$WORK/vrhost.log" >&2 2>/dev/null || true
  return 1
}

trial() { # $1 router, $2 round
  up "$1"
  nsx bt-dst taskset -c "$PEER_CORES" iperf3 -s -1 -B 10.1.0.2 >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  nsx bt-src taskset -c "$PEER_CORES" iperf3 -c 10.1.0.2 -t "$SECS" -J >"$WORK/out.json"
  wait $srv 2>/dev/null || true
  local bps retr
  bps=$(awk -F: '/"sum_received"/{f=1} f&&/"bits_per_second"/{gsub(/[ \t,]/,"",$2); print $2; exit}' "$WORK/out.json")
  retr=$(awk -F: '/"sum_sent"/{f=1} f&&/"retransmits"/{gsub(/[ \t,]/,"",$2); print $2; exit}' "$WORK/out.json")
  awk -v r="$1" -v n="$2" -v b="$bps" -v t="${retr:-0}" 'BEGIN{printf "%s,%d,%.2f,%s\n", r, n, b/1e9, t}'
}

echo "router,round,gbit_s,retransmits"
IFS=, read -r -a list <<<"$ROUTERS"
: >"$WORK/csv"
for n in $(seq "$ROUNDS"); do
  for r in "${list[@]}"; do
    trial "$r" "$n" | tee -a "$WORK/csv"
  done
done
echo
echo "| round | router | Gbit/s | retransmits | ÷ kernel |"
echo "|---|---|---:|---:|---:|"
awk -F, '{g[$2","$1]=$3; t[$2","$1]=$4; o[NR]=$2","$1}
  END{for(i=1;i<=NR;i++){split(o[i],a,","); k=g[a[1]",kernel"];
    printf "| %s | %s | %.2f | %s | %s |\n", a[1], a[2], g[o[i]], t[o[i]], (k>0? sprintf("%.2f", g[o[i]]/k) : "-")}}' "$WORK/csv"
