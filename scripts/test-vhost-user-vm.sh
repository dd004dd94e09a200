#!/usr/bin/env bash
# Functional test of the vhost_user port: a QEMU guest (TCG, no KVM) whose
# virtio-net device is attached over vhost-user to a VR interface pings a
# host namespace through the VR and sends it 2 MiB over TCP, checked by
# SHA-256 on both ends; then QEMU is restarted and the new guest does the
# same through the same vrhost (reconnection).
#
# With QUEUES=2 the device has two queue pairs, one per worker, and the
# guest two vCPUs: the guest pings and sends from its second vCPU, so its
# frames leave on its second queue (XPS), and the test checks with the
# guest's own per-queue counters (ethtool -S) that they did: the transfer
# passing then shows vrhost served that queue. BOOTS (2) sets how many
# guests boot in turn.
#
#   QEMU guest                 netns vu-rtr: vrhost run           netns vu-h
#   eth0 10.3.0.2 ═ vhost-user ═ p0 10.3.0.1 │ p1 10.2.0.1 ── veth ── vuh0 10.2.0.2
#   (virtio-net, socket)        vhost_user       af_packet (vur0)
#
# The guest is Debian's cloud kernel with a busybox initramfs that loads
# virtio_pci and virtio_net from the same kernel package, configures eth0
# and pings; its console says VM-PING-OK or VM-PING-FAIL, then the SHA-256
# of the random file it sends (VM-SHA ...).
#
# Usage: scripts/test-vhost-user-vm.sh   (as root; about 30 s)
# Env: VRHOST=path (default target/release/vrhost); KEEP=1 keeps the work
#      dir; KERNEL, BUSYBOX, QEMU_ARGS, QEMU_WRAP as in scripts/vm-lib.sh.
# Needs: qemu-system-x86, linux-image-cloud-amd64, busybox-static, cpio,
# iproute2, procps, python3 (BUSYBOX=path: a static busybox elsewhere);
# with QUEUES > 1, ethtool (copied into the guest).
# Exit 0 when every guest's ping and transfer pass. Traffic stays inside the namespace
# and the VM.
set -euo pipefail
cd "$(dirname "$0")/.."

VRHOST=${VRHOST:-target/release/vrhost}
. scripts/vm-lib.sh
[ -x "$VRHOST" ] || { echo "no $VRHOST (cargo build --release -p vrhost)" >&2; exit 1; }
QUEUES=${QUEUES:-1}
BOOTS=${BOOTS:-2}
WORK=$(mktemp -d)
nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

trap 'vm_cleanup "$WORK" vu-rtr vu-h' EXIT

# The initramfs: busybox, the virtio modules, /init.
vm_root "$WORK/root"
if [ "$QUEUES" -gt 1 ]; then
  command -v ethtool >/dev/null || { echo "missing ethtool" >&2; exit 1; }
  vm_copy_bin "$WORK/root" "$(command -v ethtool)"
fi
cat >"$WORK/root/init" <<EOF
$VM_INIT_HEAD
ip link set eth0 up
ip addr add 10.3.0.2/24 dev eth0
ip route add default via 10.3.0.1
# The last vCPU sends, on the last queue (XPS: one queue a vCPU).
cpu=$((1 << (QUEUES - 1)))
if taskset \$cpu ping -c 5 -W 3 10.2.0.2; then echo VM-PING-OK; else echo VM-PING-FAIL; fi
dd if=/dev/urandom of=/f bs=64k count=32 2>/dev/null
echo "VM-SHA \$(sha256sum /f)"
taskset \$cpu nc 10.2.0.2 5001 </f && echo VM-SENT
command -v ethtool >/dev/null && ethtool -S eth0 | grep -E '[rt]x_queue_[0-9]+_packets' | sed 's/^ */VM-QUEUE /'

poweroff -f
EOF
chmod +x "$WORK/root/init"
vm_initrd "$WORK/root" "$WORK/initrd.gz"

for ns in vu-rtr vu-h; do ip netns add $ns; nsx $ns ip link set lo up; done
ip link add vuh0 netns vu-h type veth peer name vur0 netns vu-rtr
nsx vu-rtr ip link set vur0 up
nsx vu-h ip addr add 10.2.0.2/24 dev vuh0
nsx vu-h ip link set vuh0 up
nsx vu-h ip route add default via 10.2.0.1
cat >"$WORK/router.toml" <<EOF
[dataplane]
workers = [$(seq -s ', ' 0 $((QUEUES - 1)))]

[[port]]
name = "p0"
driver = "vhost_user"
socket = "$WORK/vm.sock"
queues = $QUEUES

[[port]]
name = "p1"
driver = "af_packet"
interface = "vur0"
queues = $QUEUES

[[router]]
name = "red"

  [[router.interface]]
  name = "red0"
  port = "p0"
  addresses = ["10.3.0.1/24"]

  [[router.interface]]
  name = "red1"
  port = "p1"
  addresses = ["10.2.0.1/24"]
EOF
vm_vrhost_start vu-rtr "$WORK" "$WORK/vm.sock"

boot() { # $1: run number
  # The host's end of the transfer: what it receives, and its SHA-256.
  rm -f "$WORK/recv-$1"
  nsx vu-h timeout 120 python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.2.0.2", 5001)); s.listen(1); c, _ = s.accept()
with open(sys.argv[1], "wb") as f:
    while True:
        b = c.recv(65536)
        if not b: break
        f.write(b)
' "$WORK/recv-$1" &
  local rx=$!
  VM_QUEUES=$QUEUES vm_qemu "$WORK/initrd.gz" "$WORK/vm.sock" 52:54:00:00:03:02 512 "$WORK/console-$1.log" || true
  wait $rx || true
  grep -a -E "VM-PING|VM-SHA|VM-SENT|VM-QUEUE|bytes from|packets transmitted" "$WORK/console-$1.log" | sed "s/^/guest $1: /"
  grep -aq VM-PING-OK "$WORK/console-$1.log" || return 1
  local sent got
  sent=$(grep -a -o 'VM-SHA [0-9a-f]\{64\}' "$WORK/console-$1.log" | cut -d' ' -f2)
  got=$(sha256sum <"$WORK/recv-$1" 2>/dev/null | cut -d' ' -f1)
  echo "guest $1: host received $(stat -c %s "$WORK/recv-$1" 2>/dev/null || echo 0) bytes, SHA-256 $got"
  [ -n "$sent" ] && [ "$sent" = "$got" ]
}

rc=0
for run in $(seq "$BOOTS"); do
  if boot $run; then echo "boot $run: ping and TCP transfer through the VR passed"; else echo "boot $run: FAILED"; rc=1; fi
done
# The last queue pair carried the guest's frames: its transmit counter.
# The pings and the transfer's socket ran on the last vCPU, whose queue
# that is (XPS): had vrhost not served it, the pings would have gone
# unanswered and the transfer stalled. At least 16 frames: more than the
# pings, ARP and neighbour discovery alone (2 MiB is 32 or more TSO frames).
if [ "$QUEUES" -gt 1 ]; then
  last=$(grep -a -o "VM-QUEUE tx_queue_$((QUEUES - 1))_packets: [0-9]*" "$WORK/console-1.log" | grep -o '[0-9]*$' || echo 0)
  if [ "${last:-0}" -ge 16 ]; then
    echo "queue pair $((QUEUES - 1)): the guest sent $last frames on it, and vrhost forwarded them"
  else
    echo "queue pair $((QUEUES - 1)): the guest sent only ${last:-0} frames on it"; rc=1
  fi
fi
kill -0 "$(cat "$WORK/vrhost.pid")" 2>/dev/null || { echo "vrhost died" >&2; rc=1; }
if [ $rc -ne 0 ]; then
  tail -30 "$WORK/vrhost.log" >&2
  tail -30 "$WORK/console-1.log" >&2
fi
exit $rc
