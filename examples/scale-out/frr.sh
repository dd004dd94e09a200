#!/bin/sh
# Starts one FRR instance (zebra, bfdd, bgpd) in a namespace, with its own
# pid files, sockets and vty directory, so that several run on one machine:
#   frr.sh start NETNS DIR BGPD_CONF      then   vtysh --vty_socket DIR ...
#   frr.sh stop DIR
set -eu
here=$(cd "$(dirname "$0")" && pwd)
case "${1:-}" in
start)
    ns=$2 dir=$3 conf=$4
    mkdir -p "$dir" && chmod 777 "$dir"          # FRR drops to user frr
    common="-d -P 0 --vty_socket $dir -z $dir/zserv.api"
    ip netns exec "$ns" /usr/lib/frr/zebra $common -i "$dir/zebra.pid" -f /dev/null
    for _ in $(seq 50); do [ -S "$dir/zserv.api" ] && break; sleep 0.1; done
    ip netns exec "$ns" /usr/lib/frr/bfdd $common -i "$dir/bfdd.pid" \
        --bfdctl "$dir/bfdd.sock" -f "$here/bfdd.conf"
    ip netns exec "$ns" /usr/lib/frr/bgpd $common -i "$dir/bgpd.pid" -f "$conf"
    ;;
stop)
    for d in bgpd bfdd zebra; do
        [ -f "$2/$d.pid" ] && kill "$(cat "$2/$d.pid")" 2>/dev/null || true
    done
    ;;
*) echo "usage: $0 start NETNS DIR BGPD_CONF | stop DIR" >&2; exit 2 ;;
esac
