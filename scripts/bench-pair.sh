#!/usr/bin/env bash
# Two `vrhost-tools bench` runs at once, one a core, their cores swapped
# every round: two builds on the same arguments, or one build on two sets of
# arguments. Both see the same stretch of this noisy machine, so their ratio
# is steadier than runs one after the other.
#
# Usage: scripts/bench-pair.sh ROUNDS TOOLS_A TOOLS_B -- BENCH ARGS...
#        scripts/bench-pair.sh ROUNDS TOOLS "ARGS A" "ARGS B"
#   e.g. scripts/bench-pair.sh 8 /tmp/base/vrhost-tools target/release/vrhost-tools -- \
#          --vrs 1000 --routes-per-vr 1000 --seconds 2
#        scripts/bench-pair.sh 8 target/release/vrhost-tools \
#          "--vrs 1 --routes-per-vr 1000000 --seconds 2" \
#          "--vrs 1 --routes-per-vr 1000000 --tagged --seconds 2"
# Needs 2 cores (0 and 1). ASLR off (`setarch -R`), one worker each.
# Output: each round's Mpps and B ÷ A, then the median ratio.
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,15p' "$0"; exit 2; }
ROUNDS=$1
if [ "${4:-}" = "--" ]; then
  A=$2 B=$3; shift 4
  ARGS_A="$*" ARGS_B="$*"
else
  A=$2 B=$2 ARGS_A=$3 ARGS_B=$4
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
rate() { python3 -c 'import sys, json; print(json.load(open(sys.argv[1]))["tx_pps"])' "$1" 2>/dev/null || echo 0; }
ratios=()
for r in $(seq 1 "$ROUNDS"); do
  if (( r % 2 )); then ca=0 cb=1; else ca=1 cb=0; fi
  # shellcheck disable=SC2086  # the argument sets split on purpose
  setarch -R taskset -c $ca "$A" bench $ARGS_A --workers 1 --json >"$out/a.json" 2>/dev/null &
  pa=$!
  # shellcheck disable=SC2086
  setarch -R taskset -c $cb "$B" bench $ARGS_B --workers 1 --json >"$out/b.json" 2>/dev/null &
  pb=$!
  wait $pa $pb || true
  a=$(rate "$out/a.json") b=$(rate "$out/b.json")
  x=$(python3 -c "print(round($b / $a, 3) if $a > 0 else 0)")
  ratios+=("$x")
  python3 -c "print(f'round $r: A {$a / 1e6:.2f} Mpps, B {$b / 1e6:.2f} Mpps, B/A $x')"
done
python3 -c "import statistics, sys; v = [float(x) for x in sys.argv[1:]]; print('median', round(statistics.median(v), 3), 'min', min(v), 'max', max(v))" "${ratios[@]}"
