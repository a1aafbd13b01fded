#!/usr/bin/env python3
"""Leases with python-etcd3: keys that live only while their owner does.

Run:  QUORUM_ENDPOINT=127.0.0.1:2379 /usr/bin/python3 docs/examples/leases.py
"""
import os
import time

import etcd3

host, port = os.environ.get("QUORUM_ENDPOINT", "127.0.0.1:2379").split(":")
c = etcd3.client(host=host, port=int(port))

lease = c.lease(3)                      # 3 s TTL (at least 1.5 election timeouts)
c.put("/members/worker-1", "10.0.0.7:8080", lease=lease)
print("granted", lease.id, "remaining", lease.remaining_ttl, "keys", lease.keys)

for _ in range(3):                      # a live worker refreshes its lease
    time.sleep(1)
    lease.refresh()
assert c.get("/members/worker-1")[0] == b"10.0.0.7:8080"

# the worker dies: nobody refreshes; the key goes when the TTL runs out
deadline = time.time() + 15
while c.get("/members/worker-1")[0] is not None and time.time() < deadline:
    time.sleep(0.2)
assert c.get("/members/worker-1")[0] is None
print("key gone with its lease; TTL now", lease.remaining_ttl)
print("ok")
