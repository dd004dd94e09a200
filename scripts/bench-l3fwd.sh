#!/usr/bin/env bash
# vrhost's engine against DPDK's l3fwd-lpm, one core each, the same workload.
#
# For every table size: `vrhost workload` writes a routes file and a pcap of
# 64-byte UDP frames to random destinations inside the table. Then, alternated
# RUNS times on the same core:
#   l3fwd-lpm   DPDK's sample router (Debian's dpdk-doc sources, built here
#               against libdpdk-dev) reads the pcap through net_pcap with
#               infinite_rx=1 (every frame copied into a fresh mbuf, like a
#               NIC's DMA) and transmits into net_null, which frees what it
#               gets. Its rte_lpm is DIR-24-8. Forwarded pps = net_null's
#               opackets over SECONDS, read over DPDK's telemetry socket.
#   vrhost      `vrhost bench --config W/bench.toml` on one worker: memory
#               ports that copy every frame of the same pcap into a fresh
#               buffer and count and discard what is sent. Forwarded pps =
#               tx_pps.
# Both rewrite MACs, decrement the TTL and patch the checksum. vrhost also
# runs its full RFC 1812 checks, per-VR counters and fair-share accounting.
#
# The l3fwd build applies the changes the sample needs to run here: no rx
# checksum offload (net_pcap has none), an LPM rule limit of 4M and 64k tbl8
# groups (the sample's 1024 rules cannot hold a full table), and a mempool
# big enough for the pcap (net_pcap keeps every frame of it in mbufs).
#
# With -6 the tables and frames are IPv6 (`vrhost workload --family ipv6`:
# about half /48 inside 2000::/3, 62-byte frames) and l3fwd uses its LPM6,
# sized for the table (2^19 rules, 2^20 tbl8 groups, 6 GB of memory).
#
# Usage: scripts/bench-l3fwd.sh [-6] [-r ROUTES,...] [-f FRAMES] [-s SECONDS] [-n RUNS] [-c CORE]
#   -6  IPv6 (default IPv4)
#   -r  table sizes (default 16,1000000; with -6: 16,220000)
#   -f  frames in the pcap (default 65536)
#   -s  seconds measured per trial (default 5)
#   -n  alternations of the pair per table (default 2)
#   -c  the core both run on (default: the last one)
# Env: VRHOST=path (default target/release/vrhost, built if missing);
#      WORK=dir (default /tmp/vrhost-l3fwd; the l3fwd build is kept there).
# Output: CSV on stdout (header first, one line per trial), then a markdown
# table; logs on stderr.
# Needs: gcc, make, pkg-config, libdpdk-dev, dpdk-doc, libpcap-dev, python3,
# taskset;
# root (DPDK's EAL). Runs without hugepages or a NIC (--no-huge --no-pci).
set -euo pipefail

ROUTES=
FAMILY=ipv4
FRAMES=65536
SECONDS_PER=5
RUNS=2
CORE=$(( $(nproc) - 1 ))
while getopts "6r:f:s:n:c:h" o; do
    case $o in
        6) FAMILY=ipv6 ;;
        r) ROUTES=$OPTARG ;;
        f) FRAMES=$OPTARG ;;
        s) SECONDS_PER=$OPTARG ;;
        n) RUNS=$OPTARG ;;
        c) CORE=$OPTARG ;;
        *) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
done
if [ -z "$ROUTES" ]; then
    if [ "$FAMILY" = ipv6 ]; then ROUTES=16,220000; else ROUTES=16,1000000; fi
fi

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VRHOST=${VRHOST:-$ROOT/target/release/vrhost}
WORK=${WORK:-/tmp/vrhost-l3fwd}
SRC=/usr/share/dpdk/examples
log() { echo "bench-l3fwd: $*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (DPDK's EAL)"
pkg-config --exists libdpdk || die "libdpdk-dev is not installed (apt-get install dpdk dpdk-doc libdpdk-dev libpcap-dev)"
[ -d "$SRC/l3fwd" ] || die "$SRC/l3fwd missing (apt-get install dpdk-doc)"
if [ ! -x "$VRHOST" ]; then
    log "building vrhost"
    (cd "$ROOT" && cargo build --release -p vrhost -p vrhost-tools >&2)
fi

mkdir -p "$WORK"
L3FWD=$WORK/l3fwd/build/l3fwd
if [ ! -x "$L3FWD" ]; then
    log "building l3fwd from $SRC/l3fwd"
    rm -rf "$WORK/l3fwd" "$WORK/common"
    cp -r "$SRC/l3fwd" "$SRC/common" "$WORK/"
    (
        cd "$WORK/l3fwd"
        sed -i 's/#define IPV4_L3FWD_LPM_MAX_RULES .*/#define IPV4_L3FWD_LPM_MAX_RULES 4194304/;
                s/#define IPV4_L3FWD_LPM_NUMBER_TBL8S (1 << 8)/#define IPV4_L3FWD_LPM_NUMBER_TBL8S (1 << 16)/;
                s/#define IPV6_L3FWD_LPM_MAX_RULES .*/#define IPV6_L3FWD_LPM_MAX_RULES (1 << 19)/;
                s/#define IPV6_L3FWD_LPM_NUMBER_TBL8S .*/#define IPV6_L3FWD_LPM_NUMBER_TBL8S (1 << 20)/' l3fwd_lpm.c
        sed -i 's/\.offloads = RTE_ETH_RX_OFFLOAD_CHECKSUM,/.offloads = 0,/;
                s/(unsigned)8192)/(unsigned)262144)/' main.c
        grep -q 'LPM_MAX_RULES 4194304' l3fwd_lpm.c && grep -q 'IPV6_L3FWD_LPM_MAX_RULES (1 << 19)' l3fwd_lpm.c \
            && grep -q 'IPV6_L3FWD_LPM_NUMBER_TBL8S (1 << 20)' l3fwd_lpm.c && grep -q '(unsigned)262144)' main.c \
            || die "the l3fwd sources changed; update the patches in $0"
        make -s >&2
    ) || die "l3fwd build failed"
fi

TELEMETRY=/var/run/dpdk/rte/dpdk_telemetry.v2
STATS_PY=$WORK/stats.py
cat > "$STATS_PY" <<'EOF'
# Forwarded pps of a running l3fwd: net_null's (port 1) opackets over argv[1] seconds.
import json, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sys.argv[2])
s.recv(1024)
def stats(p):
    s.send(f"/ethdev/stats,{p}".encode())
    return json.loads(s.recv(65536))["/ethdev/stats"]
a0, a1 = stats(0), stats(1)
t0 = time.monotonic()
time.sleep(float(sys.argv[1]))
b0, b1 = stats(0), stats(1)
dt = time.monotonic() - t0
print(f"{(b1['opackets'] - a1['opackets']) / dt:.0f} {(b0['ipackets'] - a0['ipackets']) / dt:.0f}")
EOF

L3PID=
cleanup() { [ -n "$L3PID" ] && kill "$L3PID" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT

# Prints "forwarded_pps rx_pps" of l3fwd on table directory $1.
run_l3fwd() {
    local w=$1
    rm -f "$TELEMETRY"
    local rules
    if [ "$FAMILY" = ipv6 ]; then
        rules=(--rule_ipv4="$WORK/v4.cfg" --rule_ipv6="$w/l3fwd.cfg")
    else
        rules=(--rule_ipv4="$w/l3fwd.cfg" --rule_ipv6="$WORK/v6.cfg")
    fi
    "$L3FWD" -l "$CORE" -n 1 --no-huge -m "$MEM" --no-pci --log-level=lib.eal:error \
        --vdev "net_pcap0,rx_pcap=$w/traffic.pcap,infinite_rx=1" --vdev net_null1,no-rx=1 \
        -- -p 0x3 --config="(0,0,$CORE),(1,0,$CORE)" "${rules[@]}" \
        --parse-ptype >"$WORK/l3fwd.log" 2>&1 &
    L3PID=$!
    # Loading 1M rules (each one logged) takes minutes on a slow machine;
    # look at the log's tail only, so the wait costs l3fwd nothing.
    local deadline=$((SECONDS + 900))
    until tail -c 4096 "$WORK/l3fwd.log" 2>/dev/null | grep -qa "entering main loop" && [ -S "$TELEMETRY" ]; do
        kill -0 "$L3PID" 2>/dev/null || { tail -20 "$WORK/l3fwd.log" >&2; die "l3fwd exited"; }
        if [ "$SECONDS" -ge "$deadline" ]; then
            kill -9 "$L3PID"
            die "l3fwd did not enter its main loop within 900 s"
        fi
        sleep 0.5
    done
    sleep 1
    python3 "$STATS_PY" "$SECONDS_PER" "$TELEMETRY"
    kill -INT "$L3PID"
    wait "$L3PID" 2>/dev/null || true
    L3PID=
}

# Prints "forwarded_pps rx_pps fib_bytes" of vrhost bench on table directory $1.
run_vrhost() {
    # taskset: vrhost pins its worker to the last core it may use, i.e. CORE.
    taskset -c "$CORE" "$VRHOST" bench --config "$1/bench.toml" --seconds "$SECONDS_PER" --json 2>>"$WORK/vrhost.log" \
        | python3 -c 'import json,sys; r=json.loads(sys.stdin.readline()); print("%.0f %.0f %d" % (r["tx_pps"], r["rx_pps"], r["fib_bytes"]))'
}

printf 'R2001:db8::/32 1\n' > "$WORK/v6.cfg"
printf 'R198.51.100.0/24 1\n' > "$WORK/v4.cfg"
if [ "$FAMILY" = ipv6 ]; then MEM=6144; else MEM=4096; fi
echo "run,family,routes,router,forwarded_pps,rx_pps,core"
ROWS=()
IFS=, read -ra SIZES <<< "$ROUTES"
for n in "${SIZES[@]}"; do
    w=$WORK/$FAMILY-w$n
    if [ ! -f "$w/traffic.pcap" ] || [ "$(cat "$w/frames" 2>/dev/null)" != "$FRAMES" ]; then
        log "workload: $FAMILY, $n routes, $FRAMES frames"
        "$VRHOST" workload --family "$FAMILY" --routes "$n" --frames "$FRAMES" --out "$w" >&2
        # Every route leaves on port 1 (net_null), as every vrhost route leaves on "out".
        awk '{print "R" $1 " 1"}' "$w/table.txt" > "$w/l3fwd.cfg"
        echo "$FRAMES" > "$w/frames"
    fi
    for r in $(seq 1 "$RUNS"); do
        log "routes $n, run $r: l3fwd-lpm"
        read -r lf lr < <(run_l3fwd "$w") || true
        [ -n "${lf:-}" ] && [ "$lf" != 0 ] || die "no l3fwd figure for $n routes (see $WORK/l3fwd.log)"
        echo "$r,$FAMILY,$n,l3fwd-lpm,$lf,$lr,$CORE"
        log "routes $n, run $r: vrhost"
        read -r vf vr fib < <(run_vrhost "$w")
        echo "$r,$FAMILY,$n,vrhost,$vf,$vr,$CORE"
        ROWS+=("| $n | $r | $(awk "BEGIN{printf \"%.2f\", $lf/1e6}") | $(awk "BEGIN{printf \"%.2f\", $vf/1e6}") | $(awk "BEGIN{printf \"%.2f\", $vf/$lf}") | $(awk "BEGIN{printf \"%.2f\", $fib/1048576}") MiB |")
    done
done

echo
echo "| routes | run | l3fwd-lpm Mpps | vrhost Mpps | vrhost / l3fwd | vrhost FIB + route map |"
echo "|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${ROWS[@]}"
