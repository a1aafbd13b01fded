#!/bin/sh
# tools/faults/long.sh: the long fault campaign, one seed after another.
#   tools/faults/long.sh [MINUTES [MEMBERS [SEED...]]]
# defaults: 5 minutes, 3 members, seeds 1..10. Needs root (a network
# namespace) and a built quorum ($QUORUM_BIN, else build/src/server/quorum).
# Prints each run's summary line (the full output of a run goes to
# $OUT/seed-N.log, OUT defaults to /tmp/campaign-long) and exits 1 if any
# run failed.
minutes=${1:-5}
members=${2:-3}
[ $# -gt 2 ] && shift 2 || set -- 1 2 3 4 5 6 7 8 9 10
here=$(dirname "$0")
out=${OUT:-/tmp/campaign-long}
mkdir -p "$out"
status=0
for seed in "$@"; do
    /usr/bin/python3 "$here/campaign.py" --seed "$seed" --minutes "$minutes" \
        --members "$members" >"$out/seed-$seed.log" 2>&1 || status=1
    grep '^campaign: seed=' "$out/seed-$seed.log" | tail -n 1
done
exit $status
