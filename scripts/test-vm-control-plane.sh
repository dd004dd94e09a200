#!/usr/bin/env bash
# The paper's set-up, run for real: a tenant's control plane (FRR, zebra
# and bgpd) in a small VM attached over vhost-user to its VR, peering over
# the data plane with BIRD in a host namespace; the routes it learns drive
# the VR's FIB through FPM.
#
#   QEMU guest: FRR            netns cp-rtr: vrhost run                 netns cp-up: BIRD
#   eth0 10.9.0.2 ═ vhost-user ═ red0 10.9.0.1 │ red1 10.2.0.1 ── veth ── 10.2.0.2, AS 65000
#   AS 65010                     (vhost_user)  │ (af_packet cpr1)          lo 203.0.113.1
#                                              │ red2 10.4.0.1 ── veth ── netns cp-h: 10.4.0.2
#
# - bgpd in the guest peers with BIRD (eBGP, two hops: through the VR). BIRD
#   announces 203.0.113.0/24, the guest 198.51.100.0/24.
# - zebra in the guest streams what it installs to the VR's FPM listener,
#   10.9.0.1:2620, which vrhost binds in the VR's control namespace
#   (cp-vr): the guest's connection reaches it through the VR, punted to
#   the TAP mirror of red0. Only the guest (fpm_peers) may connect.
# - The guest sees the upstream link as on-link through its one NIC (a
#   device route to 10.2.0.0/24, and the VR's MAC as 10.2.0.2's), so the
#   next hops zebra sends are the upstream's own address, which the VR
#   resolves on red1.
#
# The script checks, in order: cp-h cannot reach 203.0.113.1 (no route);
# the guest's route 203.0.113.0/24 via 10.2.0.2 appears in the VR
# (`vrhost ctl routes list`); cp-h pings 203.0.113.1 through the VR; BIRD
# learned 198.51.100.0/24 from the guest; BIRD withdraws 203.0.113.0/24
# (`birdc disable`) and the VR loses the route, and cp-h's ping fails again.
#
# Usage: scripts/test-vm-control-plane.sh   (as root; about 15 s)
# Env: VRHOST=path (default target/release/vrhost); KEEP=1 keeps the work
#      dir; KERNEL, BUSYBOX, QEMU_ARGS, QEMU_WRAP as in scripts/vm-lib.sh.
# Needs: what scripts/test-vhost-user-vm.sh needs, plus frr and bird2.
# Exit 0 when every check passes. Traffic stays inside the namespaces and
# the VM.
set -euo pipefail
cd "$(dirname "$0")/.."

VRHOST=${VRHOST:-target/release/vrhost}
. scripts/vm-lib.sh
for t in bird birdc ping /usr/lib/frr/zebra /usr/lib/frr/bgpd; do
  command -v $t >/dev/null || { echo "missing $t (apt-get install frr bird2)" >&2; exit 1; }
done
[ -x "$VRHOST" ] || { echo "no $VRHOST (cargo build --release -p vrhost)" >&2; exit 1; }
WORK=$(mktemp -d)
chmod 755 "$WORK"
nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }
VR_MAC=02:00:00:09:00:01

cleanup() {
  [ -f "$WORK/bird.pid" ] && kill "$(cat "$WORK/bird.pid")" 2>/dev/null || true
  vm_cleanup "$WORK" cp-rtr cp-up cp-h cp-vr
}
trap cleanup EXIT

# The guest: busybox, the virtio modules, and FRR's zebra and bgpd with
# the FPM module and every library they load.
vm_root "$WORK/root"
R=$WORK/root
mkdir -p "$R/etc/frr" "$R/var/run/frr" "$R/var/tmp/frr"
FPM_MOD=$(ls /usr/lib/*/frr/modules/dplane_fpm_nl.so)
vm_copy_bin "$R" /usr/lib/frr/zebra /usr/lib/frr/bgpd "$FPM_MOD"
echo "root:x:0:0:root:/:/bin/sh" >"$R/etc/passwd"
printf "root:x:0:\nfrrvty:x:85:root\n" >"$R/etc/group"
cat >"$R/etc/frr/zebra.conf" <<EOF
hostname cp-vm
log file /tmp/zebra.log
debug zebra fpm
fpm address 10.9.0.1 port 2620
EOF
cat >"$R/etc/frr/bgpd.conf" <<EOF
hostname cp-vm
log file /tmp/bgpd.log
router bgp 65010
 bgp router-id 10.9.0.2
 no bgp ebgp-requires-policy
 no bgp network import-check
 neighbor 10.2.0.2 remote-as 65000
 neighbor 10.2.0.2 ebgp-multihop 2
 neighbor 10.2.0.2 timers 3 9
 neighbor 10.2.0.2 timers connect 2
 address-family ipv4 unicast
  network 198.51.100.0/24
 exit-address-family
EOF
cat >"$R/init" <<EOF
$VM_INIT_HEAD
ip link set lo up
ip link set eth0 up
ip addr add 10.9.0.2/24 dev eth0
ip route add 10.2.0.0/24 dev eth0
arp -i eth0 -s 10.2.0.2 $VR_MAC
/usr/lib/frr/zebra -d -u root -g root -M dplane_fpm_nl -f /etc/frr/zebra.conf
/usr/lib/frr/bgpd -d -u root -g root -f /etc/frr/bgpd.conf
echo VM-FRR-STARTED
n=0
while true; do
  sleep 2
  echo "VM-ROUTES: \$(ip -4 route | tr '\n' ';')"
  # zebra's FPM log now and then, for a failure's report.
  n=\$((n + 1))
  [ \$((n % 10)) -eq 0 ] && tail -n 12 /tmp/zebra.log | sed 's/^/VM-ZEBRA: /'
done
EOF
chmod +x "$R/init"
vm_initrd "$R" "$WORK/initrd.gz"

# The host side: vrhost's namespace, BIRD's and a host's, two veth pairs.
# cp-vr: the VR's control namespace, made here so that it is visible
# outside vrhost's mount namespace (vrhost adopts it).
for ns in cp-rtr cp-up cp-h cp-vr; do ip netns add $ns; nsx $ns ip link set lo up; done
ip link add cpu0 netns cp-up type veth peer name cpr1 netns cp-rtr
ip link add cph0 netns cp-h type veth peer name cpr2 netns cp-rtr
nsx cp-rtr ip link set cpr1 up
nsx cp-rtr ip link set cpr2 up
nsx cp-up ip addr add 10.2.0.2/24 dev cpu0
nsx cp-up ip addr add 203.0.113.1/32 dev lo
nsx cp-up ip link set cpu0 up
nsx cp-up ip route add 10.0.0.0/8 via 10.2.0.1
nsx cp-h ip addr add 10.4.0.2/24 dev cph0
nsx cp-h ip link set cph0 up
nsx cp-h ip route add default via 10.4.0.1

read -r TOKEN SHA < <("$VRHOST" token | awk '/^token:/ {t=$2} /^sha256:/ {print t, $2}') || true
[ -n "${SHA:-}" ] || { echo "vrhost token printed no token" >&2; exit 1; }
cat >"$WORK/router.toml" <<EOF
[dataplane]
workers = [0]
runtime_dir = "$WORK/run"
tap_hold = 0

[api]
socket = "$WORK/api.sock"
admin_token_sha256 = "$SHA"

[[port]]
name = "p0"
driver = "vhost_user"
socket = "$WORK/vm.sock"

[[port]]
name = "p1"
driver = "af_packet"
interface = "cpr1"

[[port]]
name = "p2"
driver = "af_packet"
interface = "cpr2"

[[router]]
name = "red"

  [router.control]
  netns = "cp-vr"
  fpm = "10.9.0.1:2620"
  fpm_peers = ["10.9.0.2"]

  [[router.interface]]
  name = "red0"
  port = "p0"
  mac = "$VR_MAC"
  addresses = ["10.9.0.1/24"]

  [[router.interface]]
  name = "red1"
  port = "p1"
  addresses = ["10.2.0.1/24"]

  [[router.interface]]
  name = "red2"
  port = "p2"
  addresses = ["10.4.0.1/24"]
EOF
vm_vrhost_start cp-rtr "$WORK" "$WORK/vm.sock" "$WORK/api.sock"
routes() { "$VRHOST" ctl --socket "$WORK/api.sock" --token "$TOKEN" routes list red; }

cat >"$WORK/bird.conf" <<EOF
router id 10.2.0.2;
log "$WORK/bird.log" all;
protocol device {}
protocol static via_vr { ipv4; route 10.9.0.0/24 via 10.2.0.1; }
protocol static upstream { ipv4; route 203.0.113.0/24 blackhole; }
protocol bgp vm {
  local 10.2.0.2 as 65000;
  neighbor 10.9.0.2 as 65010;
  multihop 2;
  hold time 9;
  connect retry time 2;
  ipv4 { import all; export where proto = "upstream"; };
}
EOF
nsx cp-up bird -c "$WORK/bird.conf" -s "$WORK/bird.ctl" -P "$WORK/bird.pid"
birdc() { command birdc -s "$WORK/bird.ctl" "$@"; }

fail() {
  echo "FAILED: $*"
  echo "--- VR routes"; routes || true
  echo "--- BIRD"; birdc show protocols all vm | tail -20 || true
  echo "--- vrhost.log"; tail -30 "$WORK/vrhost.log"
  echo "--- console"; grep -a -v 'VM-ROUTES\|VM-ZEBRA' "$WORK/console.log" | tail -30
  echo "--- the guest's kernel routes, last seen"; grep -a VM-ROUTES "$WORK/console.log" | tail -1
  echo "--- the guest's zebra log, last seen"; grep -a VM-ZEBRA "$WORK/console.log" | tail -12
  exit 1
}
# wait_for SECONDS COMMAND...: until COMMAND succeeds.
wait_for() {
  local n=$1
  shift
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  return 1
}
has_route() { routes | grep -q '203\.0\.113\.0/24.*10\.2\.0\.2'; }
# The route gone, from a listing that worked.
no_route() {
  local o
  o=$(routes) || return 1
  ! grep -q '203\.0\.113\.0/24' <<<"$o"
}
reach() { nsx cp-h ping -c 1 -W 1 203.0.113.1; }

# The path through the VR works (cp-h to the upstream's link address)...
wait_for 10 nsx cp-h ping -c 1 -W 1 10.2.0.2 || fail "cp-h cannot reach 10.2.0.2 through the VR"
# ...but 203.0.113.0/24 has no route yet.
if reach >/dev/null 2>&1; then fail "cp-h reached 203.0.113.1 before any route was learned"; fi
echo "before the VM: cp-h cannot reach 203.0.113.1 (no route in the VR)"

VM_TIMEOUT=300 vm_qemu "$WORK/initrd.gz" "$WORK/vm.sock" 52:54:00:00:09:02 512 "$WORK/console.log" &
wait_for 150 has_route || fail "the VR never got 203.0.113.0/24 from the guest's zebra"
echo "the VR's FIB, from the guest's zebra over FPM:"
routes | grep -E 'PREFIX|203\.0\.113' | sed 's/^/  /'
IN_GUEST='VM-ROUTES: .*203\.0\.113\.0/24 via 10\.2\.0\.2'
wait_for 10 grep -aq "$IN_GUEST" "$WORK/console.log" || fail "the guest's kernel lacks 203.0.113.0/24"
echo "the guest's kernel: $(grep -a -m1 "$IN_GUEST" "$WORK/console.log" | grep -o '203[^;]*')"

wait_for 10 reach || fail "cp-h cannot ping 203.0.113.1 through the VR"
echo "cp-h pings 203.0.113.1 through the VR: $(nsx cp-h ping -c 3 -W 2 203.0.113.1 | grep 'packets transmitted')"
wait_for 30 sh -c "command birdc -s '$WORK/bird.ctl' show route 198.51.100.0/24 | grep -q 'vm'" ||
  fail "BIRD did not learn 198.51.100.0/24 from the guest"
echo "BIRD learned the guest's prefix: $(birdc show route 198.51.100.0/24 | grep 198.51)"

birdc disable upstream >/dev/null
wait_for 60 no_route ||
  fail "the VR kept 203.0.113.0/24 after BIRD withdrew it"
echo "BIRD withdrew 203.0.113.0/24: gone from the VR"
if reach >/dev/null 2>&1; then fail "cp-h still reaches 203.0.113.1 after the withdrawal"; fi
echo "cp-h cannot reach 203.0.113.1 any more"
kill -0 "$(cat "$WORK/vrhost.pid")" 2>/dev/null || fail "vrhost died"
echo "control plane in a VM over vhost-user: passed"
