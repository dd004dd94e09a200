#!/usr/bin/env bash
# One TCP stream (iperf3) through a router, the peers' offloads at Linux's
# defaults: Linux kernel forwarding on veth against vrhost on af_packet (the
# same veths) and on tap, in one run, alternated round by round; with -p,
# then 64-byte pps against kernel forwarding (scripts/bench-veth.sh -q).
#
#   netns bt-src              netns bt-rtr (the router)               netns bt-dst
#   bts0 10.0.0.2 ── veth ── btr0 10.0.0.1 │ btr1 10.1.0.1 ── veth ── btd0 10.1.0.2
#   iperf3 -c                kernel ip_forward, or vrhost run          iperf3 -s
#
#   tap: bts0 and btd0 are TAP devices (no veth, no btr0/btr1), and vrhost's
#   tap ports attach to them in the hosts' namespaces, as a VM's NIC meets
#   its host:  bts0 (TAP) ══ vrhost run ══ btd0 (TAP)
#
# Placement: iperf3's client and server share the other core (2 CPUs) or
# get one each; vrhost's worker is pinned to the router core. Where the
# receive work of btr0 and btr1 runs (ip_rcv → forward, or packet_rcv into
# vrhost's ring) is chosen per router with a suffix, ROUTER@PLACEMENT:
#   @none    the script sets no RPS: Linux's default for the kernel router
#            (each frame received on the core that sent it), vrhost's own for
#            af_packet (port.rps: RPS to the cores with no worker; on 2 CPUs
#            the peers' core). The default.
#   @router  RPS to the router core (the script's only placement before
#            December 7; vrhost leaves a mask it finds set alone);
#   @peer    RPS to the peers' core(s);
#   @sender  no RPS at all (vrhost with rps = false): each frame received on
#            the core that sent it, which for a TCP sender whose ACKs vrhost
#            delivers from the router core is two cores, two backlogs, and
#            segments out of order (the retransmits column).
#   e.g. -r kernel,kernel@router,af_packet,af_packet@sender
# (tap has no btr0/btr1: its placement is ignored.)
#
# Routers: kernel, af_packet (vrhost, virtio-net headers: super-frames and
# partial checksums carried), tap (vrhost, the same over IFF_VNET_HDR),
# af_packet-nooffload (vrhost with every offload turned off on all four
# veth ends, the only way TCP passed before the headers were carried).
# For tap, the hosts' own receive and transmit work (tun_get_user into the
# receiver's stack) runs where vrhost writes, on the router core, as the
# receiving veth's does for the others.
#
# Usage: scripts/bench-tcp-veth.sh [-s SECONDS] [-n ROUNDS] [-r ROUTERS] [-m MTU] [-p]
#   -s  seconds per iperf3 run (default 5)
#   -n  rounds of the whole set (default 2)
#   -r  comma-separated routers (default kernel,af_packet,tap)
#   -m  MTU of every link (default 1500)
#   -p  afterwards, 64-byte pps: scripts/bench-veth.sh -q -r kernel,af_packet
#       -s SECONDS (its own topology; its table follows)
# Env: VRHOST=path (default target/release/vrhost, built if missing);
#      DEBUG=1: vrhost's log (its counters at exit) on stderr;
#      PERF_DIR=dir: profile the router core during each trial (perf record
#      -e cpu-clock) into dir/ROUTER-ROUND.{data,txt}.
# Output: CSV on stdout (router,round,gbit_s,retransmits,rtt_ms: the
# average of 50 pings through the idle router before the stream), then a
# markdown table of the ratios to the kernel in the same round (the best of
# the kernel's placements where several ran). Needs root, iproute2,
# ethtool, iperf3, taskset. Traffic stays inside the three namespaces,
# which are removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=5 ROUNDS=2 ROUTERS=kernel,af_packet,tap MTU=1500 PPS=""
while getopts "s:n:r:m:p" o; do
  case $o in
    s) SECS=$OPTARG ;; n) ROUNDS=$OPTARG ;; r) ROUTERS=$OPTARG ;; m) MTU=$OPTARG ;;
    p) PPS=1 ;;
    *) sed -n '2,57p' "$0"; exit 2 ;;
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
  if [ -f "$WORK/vrhost.pid" ]; then
    local pid
    pid=$(cat "$WORK/vrhost.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    [ -n "${DEBUG:-}" ] && cat "$WORK/vrhost.log" >&2
  fi
  rm -f "$WORK/vrhost.pid"
  for ns in bt-src bt-rtr bt-dst; do ip netns del $ns 2>/dev/null || true; done
}
trap 'down; rm -rf "$WORK"' EXIT

up() { # $1: router kind, $2: placement (none, router, peer or sender)
  down
  for ns in bt-src bt-rtr bt-dst; do ip netns add $ns; nsx $ns ip link set lo up; done
  if [ "$1" = tap ]; then
    # Persistent TAPs with the hosts' addresses; vrhost attaches to them.
    nsx bt-src ip tuntap add dev bts0 mode tap
    nsx bt-dst ip tuntap add dev btd0 mode tap
    nsx bt-src ip link set bts0 mtu "$MTU"
    nsx bt-dst ip link set btd0 mtu "$MTU"
  else
    ip link add bts0 mtu "$MTU" netns bt-src type veth peer name btr0 mtu "$MTU" netns bt-rtr
    ip link add btd0 mtu "$MTU" netns bt-dst type veth peer name btr1 mtu "$MTU" netns bt-rtr
    local mask=0 c
    case $2 in
      router) mask=$(printf '%x' $((1 << ROUTER_CORE))) ;;
      peer) mask=0; for c in ${PEER_CORES//,/ }; do mask=$((mask | 1 << c)); done
            mask=$(printf '%x' $mask) ;;
      none | sender) ;; # checked with -r
    esac
    for d in btr0 btr1; do
      nsx bt-rtr sysctl -qw "net.ipv6.conf.$d.disable_ipv6=1"
      echo "$mask" | nsx bt-rtr tee "/sys/class/net/$d/queues/rx-0/rps_cpus" >/dev/null
      nsx bt-rtr ip link set $d up
    done
  fi
  nsx bt-src ip addr add 10.0.0.2/24 dev bts0
  nsx bt-dst ip addr add 10.1.0.2/24 dev btd0
  if [ "$1" = af_packet-nooffload ]; then
    nsx bt-src ethtool -K bts0 tx off rx off tso off gso off gro off >/dev/null
    nsx bt-dst ethtool -K btd0 tx off rx off tso off gso off gro off >/dev/null
    for d in btr0 btr1; do
      nsx bt-rtr ethtool -K $d tx off rx off tso off gso off gro off >/dev/null
    done
  fi
  nsx bt-src ip link set bts0 up
  nsx bt-dst ip link set btd0 up
  nsx bt-src ip route add default via 10.0.0.1
  nsx bt-dst ip route add default via 10.1.0.1
  if [ "$1" = kernel ]; then
    nsx bt-rtr ip addr add 10.0.0.1/24 dev btr0
    nsx bt-rtr ip addr add 10.1.0.1/24 dev btr1
    nsx bt-rtr sysctl -qw net.ipv4.ip_forward=1
  else
    local p0='driver = "af_packet"
interface = "btr0"' p1='driver = "af_packet"
interface = "btr1"'
    if [ "$2" = sender ]; then
      p0="$p0
rps = false" p1="$p1
rps = false"
    fi
    if [ "$1" = tap ]; then
      p0='driver = "tap"
interface = "bts0"
netns = "bt-src"'
      p1='driver = "tap"
interface = "btd0"
netns = "bt-dst"'
    fi
    cat >"$WORK/router.toml" <<EOF
[dataplane]
workers = [$ROUTER_CORE]

[[port]]
name = "p0"
$p0

[[port]]
name = "p1"
$p1

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
    # Not through nsx: a function run with & is a subshell, and $! would be
    # its pid, not vrhost's (ip netns exec execs vrhost in place).
    ip netns exec bt-rtr "$VRHOST" run --config "$WORK/router.toml" >"$WORK/vrhost.log" 2>&1 &
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

trial() { # $1 router[@placement], $2 round
  local perf_pid rtt kind=${1%@*} place=none
  [ "$kind" != "$1" ] && place=${1#*@}
  up "$kind" "$place"
  rtt=$(nsx bt-src ping -q -c 50 -i 0.002 10.1.0.2 | awk -F/ '/^rtt/{print $5}')
  ip netns exec bt-dst taskset -c "$PEER_CORES" iperf3 -s -1 -B 10.1.0.2 >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  if [ -n "${PERF_DIR:-}" ]; then
    # The router core's time, by process and symbol (cpu-clock: a software
    # event; these guests have no cycle counters).
    mkdir -p "$PERF_DIR"
    (sleep 1; perf record -q -e cpu-clock -C "$ROUTER_CORE" -o "$PERF_DIR/$1-$2.data" \
      -- sleep $((SECS > 3 ? SECS - 2 : 1)) >/dev/null 2>&1) &
    perf_pid=$!
  fi
  nsx bt-src taskset -c "$PEER_CORES" iperf3 -c 10.1.0.2 -t "$SECS" -J >"$WORK/out.json"
  if [ -n "${PERF_DIR:-}" ]; then
    wait "$perf_pid"
    perf report -q -i "$PERF_DIR/$1-$2.data" --stdio --sort comm,sym 2>/dev/null |
      grep -v '^$' | head -40 >"$PERF_DIR/$1-$2.txt" || true
  fi
  wait $srv 2>/dev/null || true
  local bps retr
  bps=$(awk -F: '/"sum_received"/{f=1} f&&/"bits_per_second"/{gsub(/[ \t,]/,"",$2); print $2; exit}' "$WORK/out.json")
  retr=$(awk -F: '/"sum_sent"/{f=1} f&&/"retransmits"/{gsub(/[ \t,]/,"",$2); print $2; exit}' "$WORK/out.json")
  awk -v r="$1" -v n="$2" -v b="$bps" -v t="${retr:-0}" -v l="${rtt:-0}" \
    'BEGIN{printf "%s,%d,%.2f,%s,%s\n", r, n, b/1e9, t, l}'
}

echo "router,round,gbit_s,retransmits,rtt_ms"
IFS=, read -r -a list <<<"$ROUTERS"
for r in "${list[@]}"; do
  case $r in
    *@*) case ${r#*@} in none | router | peer | sender) ;;
           *) echo "unknown placement in $r (none, router, peer or sender)" >&2; exit 2 ;;
         esac ;;
  esac
done
: >"$WORK/csv"
for n in $(seq "$ROUNDS"); do
  for r in "${list[@]}"; do
    trial "$r" "$n" | tee -a "$WORK/csv"
  done
done
echo
echo "| round | router | Gbit/s | retransmits | ping ms | ÷ kernel |"
echo "|---|---|---:|---:|---:|---:|"
awk -F, '{g[$2","$1]=$3; t[$2","$1]=$4; l[$2","$1]=$5; o[NR]=$2","$1
    if ($1 ~ /^kernel(@|$)/ && $3 > best[$2]) best[$2]=$3}
  END{for(i=1;i<=NR;i++){split(o[i],a,","); k=best[a[1]];
    printf "| %s | %s | %.2f | %s | %s | %s |\n", a[1], a[2], g[o[i]], t[o[i]], l[o[i]],
      (k>0? sprintf("%.2f", g[o[i]]/k) : "-")}}' "$WORK/csv"
if [ -n "$PPS" ]; then
  down
  echo
  echo "64-byte frames, flat out (scripts/bench-veth.sh -q -r kernel,af_packet -s $SECS):"
  VRHOST="$VRHOST" scripts/bench-veth.sh -q -r kernel,af_packet -s "$SECS"
fi
