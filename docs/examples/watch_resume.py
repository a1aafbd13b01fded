#!/usr/bin/env python3
"""Watch a prefix from a past revision, lose the connection, and resume
exactly where we left off (last seen revision + 1): no event missed, none
twice. Then see what a compacted start revision looks like.

Run:  QUORUM_ENDPOINT=127.0.0.1:2379 /usr/bin/python3 docs/examples/watch_resume.py
"""
import os

import etcd3

host, port = os.environ.get("QUORUM_ENDPOINT", "127.0.0.1:2379").split(":")
c = etcd3.client(host=host, port=int(port))

start = c.put("/orders/1", "new").header.revision
c.put("/orders/2", "new")
c.put("/orders/1", "paid")

events, cancel = c.watch_prefix("/orders/", start_revision=start)
got = []
for ev in events:
    got.append((ev.key.decode(), ev.value.decode(), ev.mod_revision))
    if len(got) == 2:
        break
cancel()  # the connection is gone; we remember the last revision we handled
last = got[-1][2]
print("before the disconnect:", got)

c.put("/orders/2", "shipped")  # happens while we are away

events, cancel = c.watch_prefix("/orders/", start_revision=last + 1)
for ev in events:
    got.append((ev.key.decode(), ev.value.decode(), ev.mod_revision))
    if len(got) == 4:
        break
cancel()
print("after resuming:", got[2:])
assert [g[1] for g in got] == ["new", "new", "paid", "shipped"]
assert [g[2] for g in got] == sorted(g[2] for g in got)

c.compact(got[-1][2])
try:
    events, cancel = c.watch_prefix("/orders/", start_revision=start)
    next(iter(events))
except etcd3.exceptions.RevisionCompactedError as e:
    print("start revision compacted; oldest available:", e.compacted_revision)
print("ok")
