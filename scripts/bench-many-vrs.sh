#!/usr/bin/env bash
# Issue 18's many-VR ratios, round by round: N VRs of R routes each, then one
# VR holding the same routes (the issue's baseline, every route to one
# gateway), then one VR with a gateway per VR (the same next hops as the N
# VRs), back to back on one core, ASLR off; one worker, memory ports.
#
# Usage: scripts/bench-many-vrs.sh N R [ROUNDS]      (defaults: 3 rounds)
#   e.g. scripts/bench-many-vrs.sh 1000 1000 4; scripts/bench-many-vrs.sh 10000 100 4
# Env: TOOLS=path to vrhost-tools (default target/release/vrhost-tools);
#      CORE=the core to run on (default 1).
# Output: CSV on stdout: round, Mpps of the N VRs, of one VR, of one VR with
# a gateway per VR, N VRs ÷ one VR, N VRs ÷ one VR with a gateway per VR.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,13p' "$0"; exit 2; }
N=$1 R=$2 ROUNDS=${3:-3}
TOOLS=${TOOLS:-target/release/vrhost-tools} CORE=${CORE:-1}
[ -x "$TOOLS" ] || cargo build --release -q -p vrhost-tools
mpps() {
  setarch -R taskset -c "$CORE" "$TOOLS" bench --vrs "$N" --routes-per-vr "$R" "$@" \
    --seconds 2 --workers 1 --json 2>/dev/null |
    python3 -c 'import sys, json; print(round(json.load(sys.stdin)["tx_pps"] / 1e6, 2))'
}
echo "round,n_vrs_mpps,one_vr_mpps,one_vr_gateway_per_vr_mpps,ratio,ratio_same_next_hops"
for r in $(seq 1 "$ROUNDS"); do
  a=$(mpps) b=$(mpps --one-vr) c=$(mpps --one-vr --gateway-per-vr)
  python3 -c "print(f'$r,$a,$b,$c,{$a / $b:.3f},{$a / $c:.3f}')"
done
