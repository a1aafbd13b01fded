"""etcd 3.4 message classes built from quorum's own proto/ files.

python3-etcd3 ships descriptors from etcd 3.3, without WatchProgressRequest
or WatchCreateRequest.fragment/watch_id. This module asks protoc-c for a
descriptor set of proto/*.proto and builds Python classes from it, so tests
can send and read every 3.4 field. Usage: pb34.msg("etcdserverpb.WatchRequest").
"""
import os
import subprocess
import tempfile

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_pool = None


def _load():
    global _pool
    if _pool is not None:
        return _pool
    proto = os.path.join(ROOT, "proto")
    with tempfile.NamedTemporaryFile(suffix=".pb") as f:
        subprocess.run(["protoc-c", "--proto_path=" + proto, "--descriptor_set_out=" + f.name,
                        "--include_imports"] + [os.path.join(proto, n) for n in
                        ("kv.proto", "auth.proto", "rpc.proto", "v3lock.proto",
                         "v3election.proto")], check=True)
        with open(f.name, "rb") as fh:
            fds = descriptor_pb2.FileDescriptorSet.FromString(fh.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in fds.file:
        pool.Add(fd)
    _pool = pool
    return pool


def msg(full_name):
    """The message class for a fully qualified name."""
    d = _load().FindMessageTypeByName(full_name)
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(d)
    return message_factory.MessageFactory(_load()).GetPrototype(d)
