#!/usr/bin/env bash
# Side-by-side forwarding benchmark on veth: Linux kernel forwarding, vrhost
# on af_xdp and vrhost on af_packet. One topology, one generator, one sink.
#
#   netns bv-src              netns bv-rtr (the router)                 netns bv-dst
#   bvs0 10.0.0.2 ── veth ── bvr0 10.0.0.1 │ bvr1 10.1.0.1 ── veth ── bvd0 10.1.0.2
#   vrhost gen (af_xdp)     kernel ip_forward, or vrhost run          vrhost count (af_xdp)
#
# The generator sends 64-byte frames (60 + FCS; UDP 10.0.0.2 → 10.1.0.2) to
# bvr0's MAC, flat out. The sink counts what the router forwards. Every router
# uses static neighbours: the sink's AF_XDP socket takes every frame, so no
# ARP request would ever be answered. The topology is rebuilt for each
# router, so no state carries over from one router to the next.
#
# Where the work runs. A veth does its receive work on the sending CPU unless
# told otherwise, so each receive side is moved explicitly:
#   router core  kernel: RPS on bvr0 (ip_rcv → ip_forward → xmit run there).
#                af_xdp: bvr0's NAPI in a kthread pinned there (the XDP
#                redirect and the copy into vrhost's UMEM), and vrhost's worker.
#   gen core     vrhost gen: its copy-mode sendto builds an skb per frame and
#                calls veth xmit; for af_packet, packet_rcv into vrhost's ring
#                too (the port's own RPS to the cores with no worker; with
#                VRHOST_RX=router it ran on the router core).
#   sink core    vrhost count, reading its AF_XDP ring.
# The sink's receive work (bvd0's XDP redirect and the copy into count's
# UMEM) runs where the router transmits, that is on the router core, for all
# three routers alike: moving it to a pinned NAPI kthread on the sink core
# starved that kthread whenever the generator and count kept the core busy
# (frames stayed in bvd0's ring; see docs/benchmarks.md).
# 2 CPUs: gen and sink share core 0, the router has core 1. 3 or more CPUs:
# gen 0, router 1, sink 2.
#
# Two figures per router:
#   flat out   the generator sends as fast as it can; forwarded = what the
#              sink counts. Overload shows here (receive livelock, rings full).
#   loss-free  the highest rate the router forwards while losing at most
#              LOSS % of what it receives (RFC 2544 style; frames the sink
#              drops do not count against the router), found by bisection
#              with the generator paced at a fixed rate.
#
# Usage: scripts/bench-veth.sh [-s SECONDS] [-r ROUTERS] [-n RUNS] [-f FLOWS] [-l LOSS] [-q]
#   -s  seconds measured per flat-out trial (default 10; search trials: 3)
#   -r  comma-separated: kernel,af_xdp,af_packet (default: all three), and
#       af_packet-nocq (af_packet without its control queue, control_queue = false)
#   -n  repetitions of the whole set (default 1)
#   -f  UDP flows (default 1)
#   -l  loss allowed in the loss-free search, percent (default 1)
#   -q  quick: flat out only, no loss-free search
# Env: VRHOST=path (default target/release/vrhost, built if missing);
#      GEN_CORE, ROUTER_CORE, SINK_CORE override the placement;
#      KERNEL_RX=rps|napi (default rps) how the kernel router's receive work
#      reaches the router core; VRHOST_RX=own|router|sender (default own;
#      router before December 7) where bvr0's receive work for vrhost
#      (af_xdp: the XDP redirect and copy; af_packet: packet_rcv) runs: own
#      sets nothing, so an af_packet port steers it itself (port.rps: RPS to
#      the cores with no worker; on 2 CPUs the generator's), and af_xdp's NAPI
#      runs in a kthread pinned to the router core; router puts af_packet's
#      on the router core too (RPS);
#      sender sets nothing and runs vrhost with rps = false, so it stays on
#      the generator's core, as a NIC's NAPI runs on its interrupt's core
#      (af_xdp's too); KEEP=1 keeps the work directory;
#      DEBUG=1 dumps interface counters; QUIET_WAIT=SECONDS waits up to that
#      long, before each router, for the cores to be idle (shared machines).
# Output: CSV on stdout (header first, one line per trial), then a markdown
# table; logs on stderr.
# Needs root, iproute2, ethtool, taskset. Traffic stays inside the three
# namespaces, which are removed on exit.
set -euo pipefail

SECONDS_PER=10
ROUTERS=kernel,af_xdp,af_packet
RUNS=1
FLOWS=1
LOSS=1
SEARCH=1
while getopts "s:r:n:f:l:qh" o; do
  case $o in
    s) SECONDS_PER=$OPTARG ;;
    r) ROUTERS=$OPTARG ;;
    n) RUNS=$OPTARG ;;
    f) FLOWS=$OPTARG ;;
    l) LOSS=$OPTARG ;;
    q) SEARCH="" ;;
    *) sed -n '2,67p' "$0"; exit 2 ;;
  esac
done

cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-veth.sh: needs root" >&2; exit 1; }
for t in ip ethtool taskset awk pgrep; do
  command -v $t >/dev/null || { echo "bench-veth.sh: missing $t" >&2; exit 1; }
done
if [ -z "${VRHOST:-}" ]; then
  VRHOST=target/release/vrhost
  [ -x "$VRHOST" ] || cargo build --release -p vrhost -p vrhost-tools >&2
fi
VRHOST=$(realpath "$VRHOST")

NCPU=$(nproc)
[ "$NCPU" -ge 2 ] || { echo "bench-veth.sh: needs at least 2 CPUs" >&2; exit 1; }
GEN_CORE=${GEN_CORE:-0}
ROUTER_CORE=${ROUTER_CORE:-1}
if [ "$NCPU" -ge 3 ]; then SINK_CORE=${SINK_CORE:-2}; else SINK_CORE=${SINK_CORE:-0}; fi
KERNEL_RX=${KERNEL_RX:-rps}
VRHOST_RX=${VRHOST_RX:-own}
case $VRHOST_RX in own | router | sender) ;; *) echo "bench-veth.sh: VRHOST_RX is own, router or sender" >&2; exit 2 ;; esac

SRC=bv-src RTR=bv-rtr DST=bv-dst
WORK=$(mktemp -d /tmp/bench-veth.XXXXXX)
PIDS=()
ROUTER_PID="" NAPI_PID=""

log() { echo "[bench-veth] $*" >&2; }

# Forgets a pid we already waited for.
forget() {
  local keep=() p
  for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}

cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
  for ns in $SRC $RTR $DST; do ip netns del $ns 2>/dev/null || true; done
}
trap 'cleanup; if [ -n "${KEEP:-}" ]; then log "kept $WORK"; else rm -rf "$WORK"; fi' EXIT
trap 'exit 130' INT TERM

nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
mac() { nsx "$1" cat "/sys/class/net/$2/address"; }
stat_of() { nsx "$1" cat "/sys/class/net/$2/statistics/$3"; }
mask_of() { printf %x $((1 << $1)); }

# Gives veth DEV a NAPI instance (GRO on does that even without XDP), moves
# it into a kthread and pins the kthread to CORE; prints the kthread's pid.
# Done before vrhost attaches its XDP program, which then reuses this NAPI.
threaded_napi() {
  local ns=$1 dev=$2 core=$3 i pid=""
  nsx "$ns" ethtool -K "$dev" gro on >/dev/null
  nsx "$ns" sh -c "echo 1 > /sys/class/net/$dev/threaded"
  for i in $(seq 50); do
    pid=$(pgrep -x "napi/$dev-[0-9]+" | head -1 || true)
    [ -n "$pid" ] && break
    sleep 0.1
  done
  [ -n "$pid" ] || { log "no NAPI kthread for $dev"; exit 1; }
  taskset -pc "$core" "$pid" >/dev/null
  echo "$pid"
}

topology() {
  cleanup
  for ns in $SRC $RTR $DST; do ip netns add $ns; nsx $ns ip link set lo up; done
  ip link add bvs0 netns $SRC type veth peer name bvr0 netns $RTR
  ip link add bvr1 netns $RTR type veth peer name bvd0 netns $DST
  for d in "$SRC bvs0" "$RTR bvr0" "$RTR bvr1" "$DST bvd0"; do
    set -- $d
    nsx "$1" sysctl -qw "net.ipv6.conf.$2.disable_ipv6=1"
    nsx "$1" ip link set "$2" up
  done
  nsx $SRC ip addr add 10.0.0.2/24 dev bvs0
  nsx $DST ip addr add 10.1.0.2/24 dev bvd0
}

# /proc/stat fields of one CPU: user nice system idle iowait irq softirq steal.
cpu_line() { awk -v c="cpu$1" '$1 == c { print $2, $3, $4, $5, $6, $7, $8, $9 }' /proc/stat; }
# utime + stime of a process (all its threads) or a kthread, in clock ticks.
proc_ticks() { if [ -n "$1" ]; then awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; else echo 0; fi; }
# Its user-space time alone.
user_ticks() { if [ -n "$1" ]; then awk '{ print $14 }' "/proc/$1/stat" 2>/dev/null || echo 0; else echo 0; fi; }
# busy usr sys softirq (percent) between two cpu_line snapshots.
cpu_pct() {
  echo "$1 $2" | awk '{
    tot = 0; for (i = 1; i <= 8; i++) { d[i] = $(i + 8) - $i; tot += d[i] }
    if (tot == 0) tot = 1
    printf "%.1f %.1f %.1f %.1f", 100 * (tot - d[4] - d[5]) / tot, 100 * (d[1] + d[2]) / tot,
           100 * (d[3] + d[6]) / tot, 100 * d[7] / tot }'
}

# Counters sampled at both ends of the window (space-separated): time,
# frames into the router (bvs0 tx), out of it (bvr1 tx), CPU ticks of the
# router process, the router's NAPI kthread, gen and count, and the router
# process's user time.
snapshot() {
  echo "$(date +%s.%N) $(stat_of $SRC bvs0 tx_packets) $(stat_of $RTR bvr1 tx_packets)" \
    "$(proc_ticks "$ROUTER_PID") $(proc_ticks "$NAPI_PID") $(proc_ticks "$1") $(proc_ticks "$2")" \
    "$(user_ticks "$ROUTER_PID")"
}

start_router() {
  local kind=$1
  ROUTER_PID="" NAPI_PID=""
  case $kind in
    kernel)
      nsx $RTR ip addr add 10.0.0.1/24 dev bvr0
      nsx $RTR ip addr add 10.1.0.1/24 dev bvr1
      nsx $RTR ip neigh replace 10.0.0.2 lladdr "$(mac $SRC bvs0)" dev bvr0 nud permanent
      nsx $RTR ip neigh replace 10.1.0.2 lladdr "$(mac $DST bvd0)" dev bvr1 nud permanent
      if [ "$KERNEL_RX" = napi ]; then
        NAPI_PID=$(threaded_napi $RTR bvr0 "$ROUTER_CORE")
      else
        nsx $RTR sh -c "echo $(mask_of "$ROUTER_CORE") > /sys/class/net/bvr0/queues/rx-0/rps_cpus"
      fi
      nsx $RTR sysctl -qw net.ipv4.ip_forward=1
      ;;
    af_xdp | af_packet | af_packet-nocq)
      local driver=${kind%-nocq} cq=""
      [ "$kind" = af_packet-nocq ] && cq="control_queue = false"
      if [ "$VRHOST_RX" = sender ] && [ "$driver" = af_packet ]; then
        cq="$cq
rps = false"
      fi
      if [ "$VRHOST_RX" = sender ]; then
        : # veth's receive work stays on the generator's core
      elif [ "$kind" = af_xdp ]; then
        NAPI_PID=$(threaded_napi $RTR bvr0 "$ROUTER_CORE")
      elif [ "$VRHOST_RX" = router ]; then
        nsx $RTR sh -c "echo $(mask_of "$ROUTER_CORE") > /sys/class/net/bvr0/queues/rx-0/rps_cpus"
      fi # own, af_packet: the port steers bvr0 itself (port.rps)
      cat >"$WORK/router-$kind.toml" <<EOF
[dataplane]
workers = [$ROUTER_CORE]

[[port]]
name = "in"
driver = "$driver"
interface = "bvr0"
$cq

[[port]]
name = "out"
driver = "$driver"
interface = "bvr1"
$cq

[[router]]
name = "bench"

  [[router.interface]]
  name = "in"
  port = "in"
  addresses = ["10.0.0.1/24"]

  [[router.interface]]
  name = "out"
  port = "out"
  addresses = ["10.1.0.1/24"]

  [[router.neighbor]]
  address = "10.0.0.2"
  mac = "$(mac $SRC bvs0)"

  [[router.neighbor]]
  address = "10.1.0.2"
  mac = "$(mac $DST bvd0)"
EOF
      # No taskset: vrhost pins its worker to ROUTER_CORE itself (and checks
      # that core against its affinity mask). `ip netns exec` execs vrhost,
      # so $! is vrhost's pid.
      ip netns exec $RTR "$VRHOST" run --config "$WORK/router-$kind.toml" >"$WORK/router.log" 2>&1 &
      ROUTER_PID=$!
      PIDS+=("$ROUTER_PID")
      local i
      for i in $(seq 100); do
        grep -q "running;" "$WORK/router.log" && break
        kill -0 "$ROUTER_PID" 2>/dev/null || { cat "$WORK/router.log" >&2; exit 1; }
        sleep 0.1
      done
      grep -o "af_xdp bvr0 queue 0: .*" "$WORK/router.log" | sed 's/^/[bench-veth] router: /' >&2 || true
      ;;
    *) log "unknown router $kind"; exit 2 ;;
  esac
}

stop_router() {
  if [ -n "$ROUTER_PID" ]; then
    kill -TERM "$ROUTER_PID" 2>/dev/null || true
    wait "$ROUTER_PID" 2>/dev/null || true
    forget "$ROUTER_PID"
    grep -E "^port|^  " "$WORK/router.log" | sed 's/^/[bench-veth] router: /' >&2 || true
  fi
}

# Waits (up to QUIET_WAIT seconds, default 0) until the cores we use are
# idle, so that other jobs on a shared machine do not pollute the figures.
wait_quiet() {
  local deadline=$((SECONDS + ${QUIET_WAIT:-0})) a b busy
  while [ "$SECONDS" -lt "$deadline" ]; do
    a="$(cpu_line "$GEN_CORE") $(cpu_line "$ROUTER_CORE")"
    sleep 1
    b="$(cpu_line "$GEN_CORE") $(cpu_line "$ROUTER_CORE")"
    busy=$(echo "$a $b" | awk '{
        for (c = 0; c < 2; c++) { tot = 0
          for (i = 1; i <= 8; i++) { d[i] = $(16 + 8 * c + i) - $(8 * c + i); tot += d[i] }
          u[c] = tot ? 100 * (tot - d[4] - d[5]) / tot : 0 }
        printf "%.0f", (u[0] > u[1]) ? u[0] : u[1] }')
    [ "$busy" -le 5 ] && return
    log "waiting for idle cores (busiest at $busy %)"
  done
}

# One trial against the running router: RATE pps (0: flat out) for SECS
# seconds; prints one CSV line.
trial() {
  local run=$1 kind=$2 rate=$3 secs=$4 i
  # The sink first, so that it counts from the first forwarded frame.
  taskset -c "$SINK_CORE" "$VRHOST" count --driver af-xdp --netns $DST --interface bvd0 \
    --duration $((secs + 60)) --json >"$WORK/count.json" 2>"$WORK/count.log" &
  local count_pid=$!
  PIDS+=("$count_pid")
  for i in $(seq 100); do grep -q "XDP in" "$WORK/count.log" && break; sleep 0.1; done
  local pace=()
  [ "$rate" = 0 ] || pace=(--pps "$rate")
  taskset -c "$GEN_CORE" "$VRHOST" gen --driver af-xdp --netns $SRC --interface bvs0 \
    --dst-mac "$(mac $RTR bvr0)" --src 10.0.0.2 --dst 10.1.0.2 --size 60 --flows "$FLOWS" \
    "${pace[@]}" --duration $((secs + 60)) --json >"$WORK/gen.json" 2>"$WORK/gen.log" &
  local gen_pid=$!
  PIDS+=("$gen_pid")
  sleep 1
  # The window: secs seconds while both tools run at full speed.
  local c0 g0 s0 c1 g1 s1 a b
  c0=$(cpu_line "$ROUTER_CORE"); g0=$(cpu_line "$GEN_CORE"); s0=$(cpu_line "$SINK_CORE")
  a=$(snapshot "$gen_pid" "$count_pid")
  sleep "$secs"
  c1=$(cpu_line "$ROUTER_CORE"); g1=$(cpu_line "$GEN_CORE"); s1=$(cpu_line "$SINK_CORE")
  b=$(snapshot "$gen_pid" "$count_pid")
  if [ -n "${DEBUG:-}" ]; then
    for d in "$SRC bvs0" "$RTR bvr0" "$RTR bvr1" "$DST bvd0"; do
      set -- $d; nsx "$1" ip -s link show "$2" >&2
      nsx "$1" ethtool -S "$2" 2>/dev/null | grep -v ": 0$" >&2 || true
    done
    ps -eLo pid,tid,psr,pcpu,stat,comm | grep -E "vrhost|napi" >&2
  fi
  # Both tools stop on SIGINT and print their summary; the generator first,
  # so that the sink sees everything in flight.
  kill -INT "$gen_pid" 2>/dev/null || true
  wait "$gen_pid" || { cat "$WORK/gen.log" >&2; exit 1; }
  sleep 0.5
  kill -INT "$count_pid" 2>/dev/null || true
  wait "$count_pid" || { cat "$WORK/count.log" >&2; exit 1; }
  forget "$gen_pid"; forget "$count_pid"

  # Sink rate: count's per-second lines, without its first and last second
  # (it starts before and stops after the generator).
  local counted
  counted=$(awk -F'[:,}]' '/"second"/ { pps[$2] = $4; n = $2 } END {
      s = 0; k = 0; for (i = 2; i < n; i++) if (pps[i] > 0) { s += pps[i]; k++ }
      printf "%.0f", k ? s / k : 0 }' "$WORK/count.json")
  local hz; hz=$(getconf CLK_TCK)
  local offered routed rproc rnapi gproc cproc
  local ruser
  read -r offered routed rproc rnapi gproc cproc ruser <<<"$(echo "$a $b $hz" | awk '{
      t = $9 - $1; pct = 100 / $17 / t
      printf "%.0f %.0f %.1f %.1f %.1f %.1f %.1f", ($10 - $2) / t, ($11 - $3) / t,
        ($12 - $4) * pct, ($13 - $5) * pct, ($14 - $6) * pct, ($15 - $7) * pct, ($16 - $8) * pct }')"
  local rbusy rusr rsys rsoft gbusy sbusy
  read -r rbusy rusr rsys rsoft <<<"$(cpu_pct "$c0" "$c1")"
  read -r gbusy _ _ _ <<<"$(cpu_pct "$g0" "$g1")"
  read -r sbusy _ _ _ <<<"$(cpu_pct "$s0" "$s1")"
  # The router's own CPU on its core: softirq time (kernel: RPS backlog,
  # forwarding; for every router: the sink veth's XDP receive that its
  # transmits trigger), bvr0's NAPI kthread if there is one, and vrhost's
  # process.
  local own foreign
  if [ "$kind" = kernel ]; then rproc=0; fi
  # (Capped at the core's busy time: a NAPI kthread's time and softirq
  # time can overlap in the kernel's accounting.)
  own=$(awk -v a="$rproc" -v b="$rnapi" -v c="$rsoft" -v busy="$rbusy" 'BEGIN { o = a + b + c; printf "%.1f", (o < busy) ? o : busy }')
  # Other jobs on a shared machine are user-space work (builds, benches):
  # user time on the router core that is not vrhost's.
  foreign=$(awk -v u="$rusr" -v r="$ruser" 'BEGIN { f = u - r; printf "%.1f", (f > 0) ? f : 0 }')
  # What bounds the figure: frames that entered the router but never left
  # it mean the router could not keep up; frames that left it but were not
  # counted mean the sink could not; neither means the generator did.
  local rloss sloss bound
  rloss=$(awk -v o="$offered" -v r="$routed" 'BEGIN { printf "%.1f", (o > 0) ? 100 * (o - r) / o : 0 }')
  sloss=$(awk -v r="$routed" -v c="$counted" 'BEGIN { printf "%.1f", (r > 0) ? 100 * (r - c) / r : 0 }')
  bound=$(awk -v r="$rloss" -v s="$sloss" -v sh="$([ "$GEN_CORE" = "$SINK_CORE" ] && echo 1 || echo 0)" 'BEGIN {
      if (r > 2 && r >= s) print "router"
      else if (s > 2) print (sh ? "sink (shares its core with gen)" : "sink")
      else print (sh ? "generator (shares its core with the sink)" : "generator") }')
  local ns_pkt
  ns_pkt=$(awk -v b="$own" -v f="$routed" 'BEGIN { printf "%.0f", (f > 0) ? b / 100 * 1e9 / f : 0 }')
  local mode=flat
  [ "$rate" = 0 ] || mode="paced $rate"
  echo "$run,$kind,$mode,$FLOWS,$GEN_CORE,$ROUTER_CORE,$SINK_CORE,$offered,$routed,$counted,$rloss,$sloss,$own,$ns_pkt,$rbusy,$rusr,$rsys,$rsoft,$foreign,$rproc,$rnapi,$gproc,$cproc,$gbusy,$sbusy,$bound"
}

log "vrhost $VRHOST; $NCPU CPUs; gen core $GEN_CORE, router core $ROUTER_CORE, sink core $SINK_CORE; $SECONDS_PER s per router; kernel rx via $KERNEL_RX; vrhost rx placement $VRHOST_RX; load average $(cut -d' ' -f1-3 /proc/loadavg)"
if awk '{ exit !($1 > 0.5) }' /proc/loadavg; then
  log "warning: load average $(cut -d' ' -f1 /proc/loadavg): other work on these CPUs will show as foreign CPU and lower the figures"
fi
HEADER="run,router,mode,flows,gen_core,router_core,sink_core,offered_pps,router_out_pps,forwarded_pps,router_loss_pct,sink_loss_pct,router_cpu_pct,router_ns_per_pkt,router_core_busy_pct,router_core_usr_pct,router_core_sys_pct,router_core_softirq_pct,router_core_foreign_pct,vrhost_cpu_pct,router_napi_cpu_pct,gen_cpu_pct,count_cpu_pct,gen_core_busy_pct,sink_core_busy_pct,bound"
echo "$HEADER" >"$WORK/results.csv"
echo "$HEADER"
# Runs a trial, keeps its line, and echoes it.
keep() {
  # Not in a pipeline or $(...): trial runs in this shell, so that the
  # EXIT trap sees (and stops) what it started.
  trial "$@" >"$WORK/line"
  cat "$WORK/line"
  cat "$WORK/line" >>"$WORK/results.csv"
}
# Router loss of the last kept line, in percent: frames that entered the
# router (bvs0 tx) and never left it (bvr1 tx). The sink's own losses do
# not count against the router.
last_loss() { awk -F, '{ printf "%.2f", ($8 > 0) ? 100 * ($8 - $9) / $8 : 100 }' "$WORK/line"; }
for run in $(seq "$RUNS"); do
  for kind in ${ROUTERS//,/ }; do
    log "run $run: $kind"
    wait_quiet
    topology
    start_router "$kind"
    keep "$run" "$kind" 0 "$SECONDS_PER"
    flat_fwd=$(cut -d, -f10 "$WORK/line")
    flat_off=$(cut -d, -f8 "$WORK/line")
    if [ -n "$SEARCH" ]; then
      # Bisection between 0 and what the generator offered flat out.
      lo=0 hi=$flat_off best=0 best_off=0 best_sink=0
      for step in 1 2 3 4 5 6; do
        rate=$(( (lo + hi) / 2 ))
        if [ "$step" = 1 ]; then rate=$(( flat_fwd > 1000 ? flat_fwd : hi / 2 )); fi
        keep "$run" "$kind" "$rate" 3
        if awk -v l="$(last_loss)" -v m="$LOSS" 'BEGIN { exit !(l <= m) }'; then
          lo=$rate; best=$(cut -d, -f9 "$WORK/line"); best_off=$(cut -d, -f8 "$WORK/line")
          best_sink=$(cut -d, -f10 "$WORK/line")
        else
          hi=$rate
        fi
        log "  paced $rate pps: router loss $(last_loss) %"
        if [ $((hi - lo)) -lt $((flat_off / 50 + 1000)) ]; then break; fi
      done
      # The best paced trial: offered, forwarded by the router, counted.
      echo "$run,$kind,lossfree,$FLOWS,$GEN_CORE,$ROUTER_CORE,$SINK_CORE,$best_off,$best,$best_sink,,,,,,,,,,,,,,,,highest rate the router forwards with <= $LOSS % loss" >"$WORK/line"
      cat "$WORK/line"
      cat "$WORK/line" >>"$WORK/results.csv"
    fi
    stop_router
  done
done
cleanup

echo
# forwarded = what the sink counted; router out = what left the router
# (bvr1's tx counter); router CPU = the router's own CPU on its core (see
# trial); × kernel compares with the same run's kernel.
awk -F, 'NR == 1 { next }
  $3 == "flat" { key = $1 "," $2; flat[key] = $0; order[++n] = key; if ($2 == "kernel") kf[$1] = $10 }
  $3 == "lossfree" { lf[$1 "," $2] = $9; if ($2 == "kernel") kl[$1] = $9 }
  END {
    print "| run | router | offered pps | forwarded pps (sink) | router out pps | × kernel | loss-free pps (router out) | × kernel | router CPU % (own / core busy / foreign) | ns per pkt | gen + count CPU % | flat-out bound |"
    print "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|---|"
    for (i = 1; i <= n; i++) {
      split(flat[order[i]], f, ",")
      r1 = ((f[1] in kf) && kf[f[1]] > 0) ? sprintf("%.2f", f[10] / kf[f[1]]) : "-"
      l = (order[i] in lf) ? lf[order[i]] : "-"
      r2 = ((order[i] in lf) && (f[1] in kl) && kl[f[1]] > 0) ? sprintf("%.2f", lf[order[i]] / kl[f[1]]) : "-"
      printf "| %s | %s | %d | %d | %d | %s | %s | %s | %s / %s / %s | %s | %s + %s | %s |\n",
        f[1], f[2], f[8], f[10], f[9], r1, l, r2, f[13], f[15], f[19], f[14], f[22], f[23], f[26]
    }
  }' "$WORK/results.csv"
