#!/bin/sh
# Long differential run: many seeds of differential.py (quorum vs etcd 3.4),
# stopping at the first difference.
#
#   diff_long.sh [-t quorum|etcd] [-s FIRST_SEED] [-n NSEEDS] [-o OPS] [-d SECONDS]
#                [-x CLASS]...
#
# Defaults: target quorum, seeds 1000..1199, 1000 ops per seed, no time
# limit. -d stops starting new seeds after SECONDS (the seed under way
# finishes). -x CLASS passes --exclude CLASS to differential.py
# (nested-txn, compact-le0, neg-rev, lease, watch, same-rev-prev-kv,
# cancel-compacted, future-watch, neg-lease-id) to look past a known difference; differential.py's
# DEFAULT_EXCLUDE (known quorum differences) always applies here.
# Each seed also restarts both servers once (quorum after kill -9). The
# directed cases are not rerun here (differential.py alone runs them).
# Exit 0 when every seed agreed, 1 on a difference (the output names the
# seed and the rerun command), 2 if the servers cannot start.
set -u
here=$(cd "$(dirname "$0")" && pwd)
target=quorum first=1000 nseeds=200 ops=1000 duration=0 exclude=
while getopts t:s:n:o:d:x: opt; do
    case $opt in
    t) target=$OPTARG ;;
    s) first=$OPTARG ;;
    n) nseeds=$OPTARG ;;
    o) ops=$OPTARG ;;
    d) duration=$OPTARG ;;
    x) exclude="$exclude --exclude $OPTARG" ;;
    *) echo "usage: $0 [-t quorum|etcd] [-s FIRST_SEED] [-n NSEEDS] [-o OPS] [-d SECONDS] [-x CLASS]" >&2
       exit 2 ;;
    esac
done
start=$(date +%s)
seed=$first
done_seeds=0
total_ops=0
while [ "$done_seeds" -lt "$nseeds" ]; do
    if [ "$duration" -gt 0 ] && [ $(( $(date +%s) - start )) -ge "$duration" ]; then
        break
    fi
    out=$(/usr/bin/python3 "$here/differential.py" --target "$target" --seed "$seed" \
          --seeds 1 --ops "$ops" --no-directed $exclude 2>&1)
    rc=$?
    if [ $rc -ne 0 ]; then
        printf '%s\n' "$out"
        echo "diff_long: seed $seed failed (exit $rc) after $done_seeds clean seeds, $total_ops ops"
        exit $rc
    fi
    n=$(printf '%s\n' "$out" | sed -n 's/^differential: \([0-9]*\) ops.*/\1/p')
    total_ops=$((total_ops + ${n:-0}))
    done_seeds=$((done_seeds + 1))
    seed=$((seed + 1))
    if [ $((done_seeds % 10)) -eq 0 ]; then
        echo "diff_long: $done_seeds seeds, $total_ops ops, 0 differences so far"
    fi
done
echo "diff_long: $done_seeds seeds (from $first), $total_ops ops, 0 differences," \
     "target $target, $(( $(date +%s) - start ))s"
