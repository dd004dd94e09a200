# Shared by the VM scripts (sourced, not run): the guest kernel and busybox,
# the initramfs's base (busybox, the virtio modules), and QEMU on a
# vhost-user socket.
#
# Env: KERNEL=/boot/vmlinuz-… (default: the newest *cloud-amd64 one);
#      BUSYBOX=path to a static busybox (default: the one on PATH);
#      QEMU_ARGS adds QEMU options (e.g. "-trace vhost_user_*"), QEMU_WRAP
#      runs QEMU under a command (e.g. "gdb -batch -ex run -ex bt --args").

KERNEL=${KERNEL:-$( (ls /boot/vmlinuz-*cloud-amd64 2>/dev/null || true) | sort -V | tail -1)}
[ -n "$KERNEL" ] && [ -r "$KERNEL" ] || { echo "no cloud kernel in /boot (apt-get install linux-image-cloud-amd64)" >&2; exit 1; }
KVER=${KERNEL#/boot/vmlinuz-}
for t in qemu-system-x86_64 cpio ip pkill; do
  command -v $t >/dev/null || { echo "missing $t" >&2; exit 1; }
done
BUSYBOX=${BUSYBOX:-$(command -v busybox || true)}
vm_static() { { ldd "$1" 2>&1 || true; } | grep -q 'not a dynamic'; }
[ -n "$BUSYBOX" ] && vm_static "$BUSYBOX" ||
  { echo "no static busybox (apt-get install busybox-static, or BUSYBOX=path)" >&2; exit 1; }

# The guest's modules, loaded in this order by its /init.
VM_MODS="virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci failover net_failover virtio_net"

# vm_root DIR: busybox and the virtio modules (uncompressed) under DIR.
vm_root() {
  mkdir -p "$1"/{bin,lib,proc,sys,dev,tmp}
  cp "$BUSYBOX" "$1/bin/busybox"
  local m f
  for m in $VM_MODS; do
    f=$( (find "/lib/modules/$KVER" -name "$m.ko*" 2>/dev/null || true) | head -1)
    [ -n "$f" ] || { echo "module $m missing for $KVER" >&2; exit 1; }
    case $f in
      *.xz) xz -dc "$f" >"$1/lib/$m.ko" ;;
      *.zst) zstd -qdc "$f" >"$1/lib/$m.ko" ;;
      *) cp "$f" "$1/lib/$m.ko" ;;
    esac
  done
}

# vm_copy_bin DIR FILE...: each FILE, and every library it loads (ldd), at
# the same path under DIR.
vm_copy_bin() {
  local root=$1 f lib
  shift
  for f in "$@"; do
    mkdir -p "$root$(dirname "$f")"
    cp "$f" "$root$f"
    for lib in $(ldd "$f" | grep -o '/[^ ]*'); do
      mkdir -p "$root$(dirname "$lib")"
      cp -L "$lib" "$root$lib"
    done
  done
}

# The start of a guest's /init: busybox's applets, the pseudo file systems
# and the virtio modules.
VM_INIT_HEAD="#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $VM_MODS; do insmod /lib/\$m.ko 2>/dev/null; done"

# vm_initrd DIR OUT: DIR packed as a gzipped newc cpio.
vm_initrd() { (cd "$1" && find . | cpio -o -H newc --quiet | gzip -1 >"$2"); }

# vm_qemu INITRD SOCKET MAC MEM LOG [QEMU options...]: boots the guest (TCG)
# with one virtio-net device on the vhost-user SOCKET, its console into
# LOG, until it powers off or VM_TIMEOUT (120) seconds pass. With
# VM_QUEUES=N (1), the device has N queue pairs and the guest N vCPUs, so
# that its driver turns them all on. The device uses legacy interrupts
# (vectors=0): QEMU 7.2 under TCG crashes starting vhost-user with MSI-X
# (its bug, not KVM's path; docs/vm.md).
vm_qemu() {
  local initrd=$1 sock=$2 mac=$3 mem=$4 log=$5 q=${VM_QUEUES:-1} mq=""
  shift 5
  [ "$q" -gt 1 ] && mq=",mq=on"
  timeout "${VM_TIMEOUT:-120}" ${QEMU_WRAP:-} qemu-system-x86_64 ${QEMU_ARGS:-} -accel tcg -m "$mem" -smp "$q" \
    -object memory-backend-memfd,id=mem,size="$mem"M,share=on -numa node,memdev=mem \
    -kernel "$KERNEL" -initrd "$initrd" \
    -append "console=ttyS0 quiet panic=-1" -nographic -no-reboot \
    -chardev socket,id=c0,path="$sock" \
    -netdev vhost-user,id=n0,chardev=c0,queues="$q" \
    -device virtio-net-pci,netdev=n0,mac="$mac",romfile=,vectors=0"$mq" \
    "$@" >"$log" 2>&1
}

# vm_vrhost_start NS WORK SOCKET...: runs `$VRHOST run --config
# WORK/router.toml` in namespace NS (log WORK/vrhost.log, pid
# WORK/vrhost.pid) and waits up to 10 s for each SOCKET; exits with the log
# if one never appears. Not through a shell function with &: $! must be
# vrhost's own pid (ip netns exec execs it).
vm_vrhost_start() {
  local ns=$1 work=$2 s
  shift 2
  ip netns exec "$ns" "$VRHOST" run --config "$work/router.toml" >"$work/vrhost.log" 2>&1 &
  echo $! >"$work/vrhost.pid"
  for s in "$@"; do
    for _ in $(seq 100); do [ -S "$s" ] && break; sleep 0.1; done
    [ -S "$s" ] || { cat "$work/vrhost.log" >&2; echo "vrhost made no $s" >&2; exit 1; }
  done
}

# vm_cleanup WORK NS...: stops this run's QEMU (found by its initrd's path:
# it runs under timeout inside a function, so no pid of it is kept), any
# process whose command line names WORK/recv-, and vrhost (hard if it
# lingers); deletes the namespaces, and WORK unless KEEP is set.
vm_cleanup() {
  local work=$1 ns pid
  shift
  pkill -f "$work/initrd.gz" 2>/dev/null || true
  pkill -f "$work/recv-" 2>/dev/null || true
  if [ -f "$work/vrhost.pid" ]; then
    pid=$(cat "$work/vrhost.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  for ns in "$@"; do ip netns del "$ns" 2>/dev/null || true; done
  if [ -n "${KEEP:-}" ]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
