#!/usr/bin/python3
"""Check proto/*.proto against etcd's own descriptors.

Usage: check_descriptors.py PROTO_DIR PROTOC [ETCD]

Compiles our .proto files (OUR_FILES) with PROTOC (protoc-c or protoc; both take
--descriptor_set_out) into a FileDescriptorSet, then:

  1. kv.proto, auth.proto, rpc.proto: everything in the descriptors that
     python3-etcd3 ships (etcd3.etcdrpc.*_pb2, generated from etcd's own
     files) must be present in ours and identical: package, services,
     methods (input/output type, client/server streaming), messages
     (nested too), enums and their values, and per field its number, type,
     type_name, label and oneof. python3-etcd3 predates etcd 3.4, so what we
     have on top of it is printed as information, not a failure; so are
     the changes etcd 3.4 itself made (KNOWN_34_CHANGES).
  2. v3lock.proto, v3election.proto: python3-etcd3 does not have them, so
     they are compared with the tables below, written from etcd 3.4's
     v3lock.proto / v3election.proto; here extras are failures too.
  3. If ETCD is given and `ETCD --version` says 3.4.x: the descriptors etcd
     registers at init are stored gzip-compressed in the Go binary; we pull
     out kv/auth/rpc/v3lock/v3election.proto from it and require ours to be
     identical in both directions (nothing missing, nothing extra). The
     same for etcd's on-disk formats, which python3-etcd3 does not have
     (raftpb.proto is etcd's raft.proto, walpb.proto its record.proto,
     snappb.proto its snap.proto; etcdserver.proto, raft_internal.proto),
     but for the top-level messages LEFT_OUT names, with the reason. Options
     and imports (gogoproto, google.api.http) are not compared. The same
     for health.proto (gRPC's grpc.health.v1, which etcd registers from
     grpc-go): the binary holds it as grpc/health/v1/health.proto; it is
     checked only here.

Exit status 0 when everything matches, 1 on any mismatch, 2 on setup errors
(protoc failure, missing python modules).
"""

import os
import re
import subprocess
import sys
import tempfile
import zlib

try:
    from google.protobuf import descriptor_pb2
    from etcd3.etcdrpc import auth_pb2, kv_pb2, rpc_pb2
except ImportError as e:  # a missing module is a broken setup, not a pass
    print(f'cannot import protobuf / python3-etcd3: {e}', file=sys.stderr)
    sys.exit(2)

F = descriptor_pb2.FieldDescriptorProto
TYPE = {v: k for k, v in F.Type.items()}     # 9 -> 'TYPE_STRING'
LABEL = {v: k for k, v in F.Label.items()}

OUR_FILES = ['kv.proto', 'auth.proto', 'rpc.proto', 'v3lock.proto',
             'v3election.proto', 'health.proto',
             # etcd's on-disk formats (the conversion of an etcd data dir)
             'raftpb.proto', 'walpb.proto', 'snappb.proto', 'etcdserver.proto',
             'raft_internal.proto']
# Files of ours the etcd binary holds under another name (grpc-go's; etcd's
# raft/raftpb/raft.proto, wal/walpb/record.proto, etcdserver/api/snap/snappb/
# snap.proto).
BINARY_NAMES = {'grpc/health/v1/health.proto': 'health.proto',
                'raft.proto': 'raftpb.proto', 'record.proto': 'walpb.proto',
                'snap.proto': 'snappb.proto'}

# Top-level messages and enums of etcd's on-disk protos that ours leave out
# on purpose (quorum only reads etcd's WAL, snapshots and log entries):
# file -> {name: why}. Everything ours has must still match exactly.
LEFT_OUT = {
    'raftpb.proto': {
        'Message': "raft's peer messages: quorum does not speak etcd's peer protocol",
        'MessageType': "raft's peer messages",
        'ConfChangeSingle': 'ConfChangeV2 only, which etcd 3.4 never writes',
        'ConfChangeV2': 'etcd 3.4 never writes one; the conversion refuses the entry type',
        'ConfChangeTransition': 'ConfChangeV2 only',
    },
    'raft_internal.proto': {
        'EmptyResponse': 'a response, never in the log',
        'InternalAuthenticateRequest': 'ours is in rpc.proto, same package and fields',
    },
}

# ---------------------------------------------------------------------------
# Expected tables for the files python3-etcd3 lacks (etcd 3.4).
# Methods: name -> (input, output, client_streaming, server_streaming).
# Fields: (name, number, type, label, type_name or '').
OPT, REP = 'LABEL_OPTIONAL', 'LABEL_REPEATED'
HDR = ('header', 1, 'TYPE_MESSAGE', OPT, '.etcdserverpb.ResponseHeader')

EXPECTED = {
    'v3lock.proto': {
        'package': 'v3lockpb',
        'services': {
            'Lock': {
                'Lock': ('.v3lockpb.LockRequest', '.v3lockpb.LockResponse',
                         False, False),
                'Unlock': ('.v3lockpb.UnlockRequest',
                           '.v3lockpb.UnlockResponse', False, False),
            },
        },
        'messages': {
            'LockRequest': [('name', 1, 'TYPE_BYTES', OPT, ''),
                            ('lease', 2, 'TYPE_INT64', OPT, '')],
            'LockResponse': [HDR, ('key', 2, 'TYPE_BYTES', OPT, '')],
            'UnlockRequest': [('key', 1, 'TYPE_BYTES', OPT, '')],
            'UnlockResponse': [HDR],
        },
    },
    'v3election.proto': {
        'package': 'v3electionpb',
        'services': {
            'Election': {
                'Campaign': ('.v3electionpb.CampaignRequest',
                             '.v3electionpb.CampaignResponse', False, False),
                'Proclaim': ('.v3electionpb.ProclaimRequest',
                             '.v3electionpb.ProclaimResponse', False, False),
                'Leader': ('.v3electionpb.LeaderRequest',
                           '.v3electionpb.LeaderResponse', False, False),
                'Observe': ('.v3electionpb.LeaderRequest',
                            '.v3electionpb.LeaderResponse', False, True),
                'Resign': ('.v3electionpb.ResignRequest',
                           '.v3electionpb.ResignResponse', False, False),
            },
        },
        'messages': {
            'CampaignRequest': [('name', 1, 'TYPE_BYTES', OPT, ''),
                                ('lease', 2, 'TYPE_INT64', OPT, ''),
                                ('value', 3, 'TYPE_BYTES', OPT, '')],
            'CampaignResponse': [HDR, ('leader', 2, 'TYPE_MESSAGE', OPT,
                                       '.v3electionpb.LeaderKey')],
            'LeaderKey': [('name', 1, 'TYPE_BYTES', OPT, ''),
                          ('key', 2, 'TYPE_BYTES', OPT, ''),
                          ('rev', 3, 'TYPE_INT64', OPT, ''),
                          ('lease', 4, 'TYPE_INT64', OPT, '')],
            'LeaderRequest': [('name', 1, 'TYPE_BYTES', OPT, '')],
            'LeaderResponse': [HDR, ('kv', 2, 'TYPE_MESSAGE', OPT,
                                     '.mvccpb.KeyValue')],
            'ResignRequest': [('leader', 1, 'TYPE_MESSAGE', OPT,
                               '.v3electionpb.LeaderKey')],
            'ResignResponse': [HDR],
            'ProclaimRequest': [('leader', 1, 'TYPE_MESSAGE', OPT,
                                 '.v3electionpb.LeaderKey'),
                                ('value', 2, 'TYPE_BYTES', OPT, '')],
            'ProclaimResponse': [HDR],
        },
    },
}
# ---------------------------------------------------------------------------

# etcd 3.4 changed these fields relative to the etcd release python3-etcd3
# was generated from (3.3): (message, field) -> (their type, 3.4's type).
# string and bytes share wire type 2, so old clients still interoperate.
# Confirmed against etcd 3.4's rpc.proto and the installed etcd binary.
KNOWN_34_CHANGES = {
    ('etcdserverpb.AuthRoleRevokePermissionRequest', 'key'):
        ('TYPE_STRING', 'TYPE_BYTES'),
    ('etcdserverpb.AuthRoleRevokePermissionRequest', 'range_end'):
        ('TYPE_STRING', 'TYPE_BYTES'),
}

# What quorum adds on purpose, allowed as extras in the exact comparison
# with the etcd 3.4 binary: etcd 3.5's hashedPassword fields (quorum hashes
# a password before proposing, so the log never holds it) and the log
# entry of an Authenticate (etcd's raft_internal.proto message; never on
# the client API).
QUORUM_ADDITIONS = (
    'etcdserverpb.AuthUserAddRequest.hashedPassword',
    'etcdserverpb.AuthUserChangePasswordRequest.hashedPassword',
    'etcdserverpb.InternalAuthenticateRequest',
)


class Diff:
    """Collects differences between a reference file and ours."""

    def __init__(self, known=None):
        self.errors = []   # reference has it, ours lacks it or differs
        self.extras = []   # ours has it, reference lacks it
        self.notes = []    # allowed differences (known)
        self.known = known or {}

    # -- enums / messages -------------------------------------------------
    def enum(self, where, theirs, ours):
        ov = {v.name: v.number for v in ours.value}
        for v in theirs.value:
            if v.name not in ov:
                self.errors.append(f'{where}: enum value {v.name} missing')
            elif ov[v.name] != v.number:
                self.errors.append(f'{where}.{v.name}: number {ov[v.name]}, '
                                   f'reference has {v.number}')
        tv = {v.name for v in theirs.value}
        self.extras += [f'{where}.{v.name} = {v.number}' for v in ours.value
                        if v.name not in tv]

    def message(self, where, theirs, ours):
        of = {f.name: f for f in ours.field}
        for f in theirs.field:
            if f.name not in of:
                self.errors.append(f'{where}: field {f.name} = {f.number} '
                                   f'missing')
                continue
            t, o = field_sig(theirs, f), field_sig(ours, of[f.name])
            if t == o:
                continue
            k = self.known.get((where, f.name))
            if k and t[1] == k[0] and o[1] == k[1] and \
                    t[:1] + t[2:] == o[:1] + o[2:]:
                self.notes.append(f'{where}.{f.name}: {k[0]} -> {k[1]} '
                                  f'(known etcd 3.4 change, same wire type)')
                continue
            self.errors.append(f'{where}.{f.name}: ours (number, type, label,'
                               f' type_name, oneof, proto3_optional) = {o}, '
                               f'reference has {t}')
        tf = {f.name for f in theirs.field}
        self.extras += [f'{where}.{f.name} = {f.number} '
                        f'({TYPE[f.type]} {f.type_name})'.replace(' )', ')')
                        for f in ours.field if f.name not in tf]
        self.types(where, theirs.nested_type, theirs.enum_type,
                   ours.nested_type, ours.enum_type)

    def types(self, where, t_msgs, t_enums, o_msgs, o_enums):
        om = {m.name: m for m in o_msgs}
        for m in t_msgs:
            if m.name not in om:
                self.errors.append(f'{where}: message {m.name} missing')
            else:
                self.message(f'{where}.{m.name}', m, om[m.name])
        tm = {m.name for m in t_msgs}
        self.extras += [f'{where}.{m.name} (message)' for m in o_msgs
                        if m.name not in tm]
        oe = {e.name: e for e in o_enums}
        for e in t_enums:
            if e.name not in oe:
                self.errors.append(f'{where}: enum {e.name} missing')
            else:
                self.enum(f'{where}.{e.name}', e, oe[e.name])
        te = {e.name for e in t_enums}
        self.extras += [f'{where}.{e.name} (enum)' for e in o_enums
                        if e.name not in te]

    # -- whole file -------------------------------------------------------
    def file(self, theirs, ours):
        where = theirs.name
        for attr in ('package', 'syntax'):
            if getattr(ours, attr) != getattr(theirs, attr):
                self.errors.append(f'{where}: {attr} {getattr(ours, attr)!r},'
                                   f' reference has {getattr(theirs, attr)!r}')
        os_ = {s.name: s for s in ours.service}
        for s in theirs.service:
            if s.name not in os_:
                self.errors.append(f'{where}: service {s.name} missing')
                continue
            om = {m.name: m for m in os_[s.name].method}
            for m in s.method:
                if m.name not in om:
                    self.errors.append(f'{where}: rpc {s.name}.{m.name} '
                                       f'missing')
                elif method_sig(m) != method_sig(om[m.name]):
                    self.errors.append(
                        f'{where}: {s.name}.{m.name}: ours (in, out, '
                        f'client_streaming, server_streaming) = '
                        f'{method_sig(om[m.name])}, reference has '
                        f'{method_sig(m)}')
            tm = {m.name for m in s.method}
            self.extras += [f'{where}: rpc {s.name}.{m.name}'
                            for m in os_[s.name].method if m.name not in tm]
        ts = {s.name for s in theirs.service}
        self.extras += [f'{where}: service {s.name}' for s in ours.service
                        if s.name not in ts]
        self.types(theirs.package, theirs.message_type, theirs.enum_type,
                   ours.message_type, ours.enum_type)


def field_sig(msg, f):
    """What must agree for a field: wire and API relevant properties."""
    oneof = msg.oneof_decl[f.oneof_index].name if f.HasField('oneof_index') \
        else None
    return (f.number, TYPE[f.type], LABEL[f.label], f.type_name, oneof,
            f.proto3_optional)


def method_sig(m):
    return (m.input_type, m.output_type, m.client_streaming,
            m.server_streaming)


def compile_ours(proto_dir, protoc):
    """Run protoc(-c) and return {file name: FileDescriptorProto}."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, 'ours.pb')
        cmd = [protoc, f'--proto_path={proto_dir}',
               f'--descriptor_set_out={out}', '--include_imports'] + \
              [os.path.join(proto_dir, f) for f in OUR_FILES]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f'{" ".join(cmd)} failed:\n{r.stderr}', file=sys.stderr)
            sys.exit(2)
        with open(out, 'rb') as fh:
            fds = descriptor_pb2.FileDescriptorSet.FromString(fh.read())
    return {f.name: f for f in fds.file}


def check_expected(name, exp, ours, errors):
    """Exact check of one of our files against an EXPECTED table."""
    if ours.package != exp['package']:
        errors.append(f'{name}: package {ours.package!r}, expected '
                      f'{exp["package"]!r}')
    got_s = {s.name: {m.name: method_sig(m) for m in s.method}
             for s in ours.service}
    if got_s != exp['services']:
        errors.append(f'{name}: services {got_s}\n  expected '
                      f'{exp["services"]}')
    got_m = {m.name: [(f.name, f.number, TYPE[f.type], LABEL[f.label],
                       f.type_name) for f in m.field]
             for m in ours.message_type}
    for mname in sorted(set(got_m) | set(exp['messages'])):
        g, e = got_m.get(mname), exp['messages'].get(mname)
        if g is None:
            errors.append(f'{name}: message {mname} missing')
        elif e is None:
            errors.append(f'{name}: message {mname} not in etcd 3.4')
        elif sorted(g) != sorted(e):
            errors.append(f'{name}: {mname} fields {sorted(g)}\n  expected '
                          f'{sorted(e)}')
    if ours.enum_type or any(m.nested_type or m.enum_type or m.oneof_decl
                             for m in ours.message_type):
        errors.append(f'{name}: unexpected enums / nested types / oneofs')


def etcd_binary_descriptors(etcd):
    """The FileDescriptorProtos a Go etcd binary registers, by file name.

    gogo/golang protobuf keep each file's serialized descriptor gzip'ed in
    the binary; scan for gzip headers and keep what parses as one of ours.
    Returns None if the binary is not etcd 3.4.x.
    """
    r = subprocess.run([etcd, '--version'], capture_output=True, text=True)
    m = re.search(r'etcd Version: (\S+)', r.stdout)
    if not m or not m.group(1).startswith('3.4.'):
        print(f'skip: {etcd} is not etcd 3.4 ({r.stdout.strip()!r})')
        return None
    print(f'reference: descriptors embedded in {etcd} (etcd {m.group(1)})')
    with open(etcd, 'rb') as fh:
        data = fh.read()
    found = {}
    for hit in re.finditer(b'\x1f\x8b\x08', data):
        try:
            raw = zlib.decompressobj(31).decompress(
                data[hit.start():hit.start() + (1 << 20)])
            fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
        except Exception:  # most hits are not descriptors: skip them
            continue
        if fd.name in OUR_FILES and fd.package.endswith('pb'):
            found[fd.name] = fd
        elif fd.name in BINARY_NAMES:
            found[BINARY_NAMES[fd.name]] = fd
    return found


def report(title, errors, extras=(), notes=()):
    for n in notes:
        print(f'info: {title}: {n}')
    for e in extras:
        print(f'info: {title}: extra in ours (3.4 addition): {e}')
    for e in errors:
        print(f'FAIL: {title}: {e}')


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    ours = compile_ours(sys.argv[1], sys.argv[2])
    failures = 0

    # No gogoproto / google.api imports: they would need files we do not ship.
    errs = [f'{f.name}: imports {d}, which is not one of ours'
            for f in ours.values() for d in f.dependency if d not in OUR_FILES]
    report('imports', errs)
    failures += len(errs)

    # 1. python3-etcd3 (pre-3.4): ours must be a superset.
    for mod in (kv_pb2, auth_pb2, rpc_pb2):
        theirs = descriptor_pb2.FileDescriptorProto.FromString(
            mod.DESCRIPTOR.serialized_pb)
        d = Diff(KNOWN_34_CHANGES)
        if theirs.name not in ours:
            d.errors.append(f'{theirs.name}: not produced from our proto dir')
        else:
            d.file(theirs, ours[theirs.name])
        report(f'python3-etcd3 {theirs.name}', d.errors, d.extras, d.notes)
        failures += len(d.errors)

    # 2. v3lock / v3election against the hand-written tables.
    for name, exp in EXPECTED.items():
        errs = []
        check_expected(name, exp, ours[name], errs)
        report(f'table {name}', errs)
        failures += len(errs)

    # 3. The installed etcd 3.4 binary: exact match, both directions.
    if len(sys.argv) == 4 and sys.argv[3]:
        found = etcd_binary_descriptors(sys.argv[3])
        if found is not None:
            for name in OUR_FILES:
                d = Diff()
                if name not in found:
                    d.errors.append(f'{name}: not found in {sys.argv[3]}')
                else:
                    d.file(found[name], ours[name])
                extras = [e for e in d.extras if e.split(' ')[0] not in QUORUM_ADDITIONS]
                notes = [f'quorum addition: {e}' for e in d.extras if e not in extras]
                left = LEFT_OUT.get(name, {})
                errors = []
                for e in d.errors:
                    m = re.fullmatch(r'\S+: (?:message|enum) (\w+) missing', e)
                    if m and m.group(1) in left:
                        notes.append(f'left out: {m.group(1)} ({left[m.group(1)]})')
                    else:
                        errors.append(e)
                report(f'etcd binary {name}', errors + extras, notes=notes)
                failures += len(errors) + len(extras)
            # what LEFT_OUT says lives elsewhere must match there
            if 'raft_internal.proto' in found:
                d = Diff()
                t = [m for m in found['raft_internal.proto'].message_type
                     if m.name == 'InternalAuthenticateRequest']
                o = [m for m in ours['rpc.proto'].message_type
                     if m.name == 'InternalAuthenticateRequest']
                if t and o:
                    d.message('etcdserverpb.InternalAuthenticateRequest', t[0], o[0])
                else:
                    d.errors.append('InternalAuthenticateRequest not found')
                report('etcd binary raft_internal.proto vs our rpc.proto', d.errors + d.extras)
                failures += len(d.errors) + len(d.extras)
    else:
        print('skip: no etcd binary given, exact 3.4 comparison not done')

    print(f'{failures} failure(s)')
    sys.exit(1 if failures else 0)


if __name__ == '__main__':
    main()
