#!/usr/bin/env bash
# What a rule list costs the fast path: `vrhost bench` on one VR, with no list
# and then with a list of N rules on what enters (every frame classified
# through to the list's default), alternated round by round, one worker.
# Prints each round's two rates and their ratio, then the median ratio: the
# figure issue 22's target is about (a list of 1,000 rules on the full table
# costs at most 20%, a ratio of 0.8 or more).
#
#   scripts/bench-filters.sh [-b BINARY] [-r ROUNDS] [-n RULES] [-- BENCH ARGS]
#
# Build first (`cargo build --release -p vrhost`).
# Defaults: target/release/vrhost, 8 rounds, 1,000 rules, and the full IPv4
# table (--vrs 1 --routes-per-vr 1000000). Another table or family goes after
# `--`, for example `-- --vrs 1 --routes-per-vr 1000 --family ipv6`.
#
# Rates move from run to run on a shared machine (by up to half between
# rounds here), which is why the list runs right after its own baseline and the
# median is what counts. ASLR is off for both (`setarch -R`), as in the other
# benchmarks.
set -euo pipefail

bin=target/release/vrhost
rounds=8
rules=1000
while getopts "b:r:n:" opt; do
    case $opt in
        b) bin=$OPTARG ;;
        r) rounds=$OPTARG ;;
        n) rules=$OPTARG ;;
        *) sed -n '2,18p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--vrs 1 --routes-per-vr 1000000)

rate() {
    setarch "$(uname -m)" -R "$bin" bench "${args[@]}" "$@" --seconds 2 --workers 1 --json |
        python3 -c 'import json, sys
d = json.load(sys.stdin)
r = d[0] if isinstance(d, list) else d
print("%.2f" % (r["tx_pps"] / 1e6))'
}

ratios=()
for i in $(seq "$rounds"); do
    plain=$(rate)
    listed=$(rate --filter-rules "$rules")
    ratio=$(python3 -c "print('%.2f' % ($listed / $plain))")
    ratios+=("$ratio")
    echo "round $i: no list $plain Mpps, $rules rules $listed Mpps, ratio $ratio"
done
python3 -c "
import statistics, sys
r = [float(x) for x in sys.argv[1:]]
print('median ratio %.3f over %d rounds (min %.2f, max %.2f)' % (statistics.median(r), len(r), min(r), max(r)))
" "${ratios[@]}"
