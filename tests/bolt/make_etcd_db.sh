#!/bin/sh
# tests/bolt/make_etcd_db.sh OUTDIR: runs etcd 3.4 (/usr/bin/etcd) in a
# temp dir under OUTDIR on free ports, writes keys with history (a large
# value, 80 keys of 300 bytes (several leaf pages under a branch), a compaction, a lease with keys, an alarm-free cluster),
# then saves OUTDIR/snap.db (etcdctl snapshot save: the db and its
# SHA-256) and, after stopping etcd by its PID, copies member/snap/db to
# OUTDIR/member.db. Prints nothing on success; exits non-zero on failure.
set -eu
out=$1
mkdir -p "$out"
dir=$(mktemp -d "$out/etcd.XXXXXX")
ports=$(/usr/bin/python3 -c '
import socket
ss=[socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1",0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')
set -- $ports
cport=$1 pport=$2
ep=http://127.0.0.1:$cport
/usr/bin/etcd --name e0 --data-dir "$dir/data" \
  --listen-client-urls "$ep" --advertise-client-urls "$ep" \
  --listen-peer-urls "http://127.0.0.1:$pport" \
  --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
  --initial-cluster "e0=http://127.0.0.1:$pport" >"$dir/etcd.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
ctl() { ETCDCTL_API=3 /usr/bin/etcdctl --endpoints "$ep" --command-timeout=10s "$@"; }
i=0
until ctl put /probe 1 >/dev/null 2>&1; do
  i=$((i + 1)); [ $i -lt 200 ] || { cat "$dir/etcd.log" >&2; exit 1; }
  sleep 0.05
done
for r in 1 2 3; do ctl put /a "v$r" >/dev/null; done
ctl del /probe >/dev/null
ctl compact 3 >/dev/null
lease=$(ctl lease grant 600 | awk '{print $2}')
ctl put --lease="$lease" /leased x >/dev/null
head -c 20000 /dev/zero | tr '\0' 'z' >"$dir/big"
ctl put /big <"$dir/big" >/dev/null
pad=$(head -c 300 /dev/zero | tr '\0' 'p')
n=0
while [ $n -lt 80 ]; do ctl put "/many/$n" "value-$n-$pad" >/dev/null; n=$((n + 1)); done
ctl snapshot save "$out/snap.db" >/dev/null 2>&1
kill $pid
wait $pid 2>/dev/null || true
trap - EXIT
cp "$dir/data/member/snap/db" "$out/member.db"
rm -rf "$dir"
