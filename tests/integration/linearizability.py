#!/usr/bin/python3
"""Linearizability checker for histories of single-key operations on an
etcd-like key-value store (Wing & Gong's search with Lowe's memoization, the
algorithm of Porcupine and Knossos' "linear" checker).

    linearizability.py history.jsonl      # one JSON op per line ("-": stdin)

prints "OK: ..." and exits 0, or prints the failure and exits 1 (2 on a
malformed history).

Python API
----------
    check(history, initial=None) -> (ok: bool, info: str)
    check_register(ops, initial=None) -> (ok: bool, info: str)

`history` is an iterable of operations, each an `Op` or a dict with the same
fields (a dict may say "op" for kind and "return" for ret):

    client    any hashable id of the client that issued it (only reported)
    kind      "put" | "get" | "delete" | "cas"
    key       any hashable (str or bytes; JSON gives str)
    call      float, when the client sent the request (monotonic clock)
    ret       float, when the client got the answer; None or absent when
              status is "unknown"
    status    "ok"      completed, result known
              "unknown" timed out / connection lost: it may or may not have
                        taken effect, at any time after `call`; its result is
                        ignored (treated as return time +infinity, result
                        unconstrained: the standard treatment)
              "fail"    definitely not applied; dropped (the same as leaving
                        the op out, which is what callers should do)
    value     put: the value written; cas: the value written on success
    expected  cas only: the value compared against; None means "the key is
              absent" (etcd: Compare(version == 0))
    result    get: the value read, None when the key was absent
              delete: the deleted count, 0 or 1 (checked)
              cas: True if the compare succeeded and the put was applied
              put: ignored (a returned revision may be stored here)

Values are compared with ==; they must be hashable (JSON lists are turned
into tuples). A put or cas may not write None (None is "absent").

Model and method
----------------
Every operation touches one key, so the history is split by key and each key
is checked on its own as a register whose state is its value or None
(absent): linearizability is compositional (Herlihy & Wing), so the whole
history is linearizable iff every per-key sub-history is. Revisions are not
modelled (a global revision counter would tie the keys together again).

Real-time order: a precedes b iff a.ret < b.call (strictly); ops whose
intervals touch (a.ret == b.call) are concurrent. Unknown ops get
ret = +infinity; because their result is unconstrained, linearizing one at
the very end is the same as it never having taken effect.

The search is Lowe's "Testing for linearizability" (2017), as Porcupine
implements it: the calls and returns of the per-key history sorted by time
in a doubly linked list; walk it from the head; at a call, try to linearize
that op from the current state (step the model; the pair (set of linearized
ops as a bitmask, new state) must not be in the cache of pairs already
explored); if that works push (op, old state) on a stack, unlink the op's
call and return and restart at the head; otherwise go on to the next entry.
Reaching a return entry means its op had to be linearized already: pop the
stack, relink that op and continue after it. The list empties: linearizable;
a return reached with an empty stack: not. The loop is iterative. Unknown
ops are handled as in Porcupine (pending until the end), with the exact
refinements described in _search.

Cost: linear in the ops of a key when its history is close to sequential;
the worst case is exponential in the number of ops pending at once on one
key, and an unknown op stays pending from its call to the end. Measured
(see test_linearizability.py): 20,000 ops over 100 keys with 10 clients in
well under a second; 20,000 ops all on one key with 10 clients in ~2 s; a
single key with 10 clients and dozens of unknown ops can take very long
(as with Porcupine or Knossos). check(..., max_states=N) raises
CheckTooExpensive instead of searching more than N states of one key.

Failure info names the key, the longest linearizable prefix the search
found (its last few ops and the value after it), the op that then had to be
linearized next (the remaining op with the earliest return) and, for every
op that could have been linearized in its place, why it was impossible or
that every continuation from it dead-ended.
"""
import json
import math
import sys
from dataclasses import dataclass
from typing import Any, Hashable, Optional

__all__ = ["Op", "check", "check_register", "CheckTooExpensive", "normalize", "format_op"]

KINDS = ("put", "get", "delete", "cas")
INF = math.inf


@dataclass
class Op:
    client: Hashable
    kind: str
    key: Hashable
    call: float
    ret: Optional[float] = None
    status: str = "ok"
    value: Any = None
    expected: Any = None
    result: Any = None


class CheckTooExpensive(Exception):
    """Raised when max_states is given and the search explores more states."""


def _freeze(v):
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    return v


def normalize(o):
    """An Op (or dict) -> a validated Op, or None for a "fail" op."""
    if isinstance(o, Op):
        d = dict(o.__dict__)
    elif isinstance(o, dict):
        d = dict(o)
        if "op" in d and "kind" not in d:
            d["kind"] = d.pop("op")
        if "return" in d and "ret" not in d:
            d["ret"] = d.pop("return")
        unknown = set(d) - set(Op.__dataclass_fields__)
        if unknown:
            raise ValueError("unknown fields %s in %r" % (sorted(unknown), o))
    else:
        raise ValueError("not an Op or a dict: %r" % (o,))
    for f in ("kind", "key", "call"):
        if d.get(f) is None:
            raise ValueError("missing %r in %r" % (f, o))
    d.setdefault("client", None)
    d.setdefault("status", "ok")
    op = Op(**d)
    if op.kind not in KINDS:
        raise ValueError("kind must be one of %s: %r" % (KINDS, o))
    if op.status == "fail":
        return None
    if op.status not in ("ok", "unknown"):
        raise ValueError("status must be ok, unknown or fail: %r" % (o,))
    op.key = _freeze(op.key)
    op.value = _freeze(op.value)
    op.expected = _freeze(op.expected)
    op.result = _freeze(op.result)
    op.call = float(op.call)
    if op.status == "unknown":
        op.ret = INF
    else:
        if op.ret is None:
            raise ValueError("an ok op needs a return time: %r" % (o,))
        op.ret = float(op.ret)
        if op.ret < op.call:
            raise ValueError("returns before its call: %r" % (o,))
        if op.kind == "delete" and op.result not in (0, 1):
            raise ValueError("a delete's result is its deleted count, 0 or 1: %r" % (o,))
        if op.kind == "cas" and not isinstance(op.result, bool):
            raise ValueError("a cas's result is True or False: %r" % (o,))
    if op.kind in ("put", "cas") and op.value is None:
        raise ValueError("a put/cas must write a value (None means absent): %r" % (o,))
    return op


def _step(op, state):
    """Apply op to a register holding state. -> (allowed, new_state)."""
    k = op.kind
    if k == "put":
        return True, op.value
    unknown = op.status == "unknown"
    if k == "get":
        return unknown or op.result == state, state
    if k == "delete":
        return unknown or op.result == (0 if state is None else 1), None
    succ = state == op.expected  # cas
    return unknown or op.result == succ, op.value if succ else state


def _why(op, state):
    """Why _step(op, state) is not allowed, in words."""
    if op.kind == "get":
        return "get returned %s but the value is %s" % (_v(op.result), _v(state))
    if op.kind == "delete":
        return "delete returned count %r but the key was %s" % (
            op.result, "absent" if state is None else "present (%s)" % _v(state))
    return "cas expecting %s returned %r but the value is %s" % (
        _v(op.expected), op.result, _v(state))


def _v(x):
    return "absent" if x is None else repr(x)


def _t(x):
    return "inf" if x == INF else "%.6g" % x


def format_op(op):
    if op.kind == "put":
        s = "put(%r, %r)" % (op.key, op.value)
    elif op.kind == "get":
        s = "get(%r)" % (op.key,)
    elif op.kind == "delete":
        s = "delete(%r)" % (op.key,)
    else:
        s = "cas(%r, %s -> %r)" % (op.key, _v(op.expected), op.value)
    if op.status == "unknown":
        s += " -> unknown"
    elif op.kind == "get":
        s += " -> %s" % _v(op.result)
    elif op.kind != "put":
        s += " -> %r" % (op.result,)
    return "client %s: %s [%s, %s]" % (op.client, s, _t(op.call), _t(op.ret))


def _search(ops, initial, max_states):
    """WGL + Lowe. ops: normalized Ops of one key (unknown gets removed).
    -> (True, None) or (False, (best_order, state_after_it, blocking_op)):
    the deepest linearization reached and the op whose return stopped it.

    Refinements of the plain algorithm, all exact (the tests compare the
    result with a brute-force search and a plain memoized one):
    - unknown ops are not in the call/return list (they have no return);
      they sit in their own list sorted by call time, and at each node of
      the search they are tried after the ok ops that are candidates there
      (an unknown op is a candidate when it was called no later than the
      first return left in the list). The search succeeds once every ok op
      is linearized: the unknown ops left never took effect.
    - an unknown op is never linearized where it would not change the value
      (a failing cas, a delete of an absent key, a put of the same value),
      nor right before a put (which would overwrite its effect unseen):
      dropping it from such a place leaves a valid linearization valid, so
      if there is one at all, there is one without such places. Whether
      the last op linearized was an unknown one is part of the cache key.
    - the cache prunes by subsumption (see below).
    Linearized sets are kept small for the cache: the ok ops are numbered
    by call time and the set is (k, rel): all ops below k, plus op k+j for
    each bit j of rel; the unknown ops have a separate bitmask."""
    oks = sorted((i for i, op in enumerate(ops) if op.status == "ok"),
                 key=lambda i: (ops[i].call, ops[i].ret, i))
    unks = sorted((i for i, op in enumerate(ops) if op.status != "ok"),
                  key=lambda i: (ops[i].call, i))
    if not oks:
        return True, None
    bit = [0] * len(ops)
    for p, i in enumerate(oks):
        bit[i] = p
    for p, i in enumerate(unks):
        bit[i] = p
    # the call/return list of the ok ops: entries 1..2n, 0 is the head
    # sentinel, -1 is "no next"
    events = []
    for i in oks:
        events.append((ops[i].call, 0, i))
        events.append((ops[i].ret, 1, i))
    events.sort()  # by time; at equal times calls first (touching = concurrent)
    size = len(events) + 1
    nxt = [-1] * size
    prv = [-1] * size
    opid = [-1] * size
    etime = [0.0] * size
    is_call = [False] * size
    match = [-1] * size  # call entry -> its return entry
    call_entry = {}
    prev = 0
    for e, (t, kind, i) in enumerate(events, start=1):
        opid[e] = i
        etime[e] = t
        if kind == 0:
            is_call[e] = True
            call_entry[i] = e
        else:
            match[call_entry[i]] = e
        nxt[prev] = e
        prv[e] = prev
        prev = e
    # the list of unknown ops not linearized: nodes 1..m, 0 the head
    n_unk = len(unks)
    unxt = list(range(1, n_unk + 1)) + [-1]
    uprv = [-1] + list(range(0, n_unk))
    uop = [-1] + unks
    ucall = [0.0] + [ops[i].call for i in unks]

    state = initial
    k, rel, umask = 0, 0, 0
    stack = []  # (0, call entry, ...) or (1, unknown node, ...), then the old
    #             state, k, rel, umask, the level's limit (unknown nodes only)
    #             and after_unknown
    # Lowe's cache, with subsumption: cache[(k, rel, state)] lists the
    # unknown-op sets explored with them. A node whose unknown set contains
    # one of those is pruned: fewer unknown ops linearized is never worse
    # (everything possible after it is possible before it), and a DFS that
    # prunes by such a simulation relation stays exact (take the visited
    # node with the shortest path to success: its next node on that path
    # was visited or subsumed by a visited node with a shorter one).
    cache = {}
    explored = 0

    def fresh(base, mask):
        nonlocal explored
        seen = cache.get(base)
        if seen is None:
            cache[base] = [mask]
        else:
            for m in seen:
                if (m & ~mask) == 0:
                    return False
            seen[:] = [m for m in seen if (mask & ~m) != 0]
            seen.append(mask)
        explored += 1
        if max_states is not None and explored > max_states:
            raise CheckTooExpensive("more than %d states explored" % max_states)
        return True

    # the deepest point the search backed out of: best_ops[:best_len] are
    # the op ids of the stack then; stack[:low] has not changed since
    best_len = -1
    best_ops = []
    best_state = initial
    best_blocking = -1
    low = 0
    step = _step
    is_put = [op.kind == "put" for op in ops]
    after_unknown = False  # was the last op linearized an unknown one?
    e = nxt[0]
    phase = 0  # 0: trying the ok ops' calls of the list; 1: the unknown ops
    u = 0
    limit = 0.0
    while True:
        if phase == 0:
            if is_call[e]:
                i = opid[e]
                allowed, new_state = step(ops[i], state)
                if allowed and not (after_unknown and is_put[i]):
                    b = bit[i] - k
                    nrel = rel | (1 << b)
                    nk = k
                    if b == 0:  # shift out the run of linearized ops at k
                        t = (~nrel & (nrel + 1)).bit_length() - 1
                        nrel >>= t
                        nk = k + t
                    if fresh((nk, nrel, new_state, False), umask):
                        stack.append((0, e, state, k, rel, umask, 0.0, after_unknown))
                        state, k, rel = new_state, nk, nrel
                        after_unknown = False
                        # lift: unlink the call and its return
                        p, q = prv[e], nxt[e]
                        nxt[p] = q
                        prv[q] = p
                        r = match[e]
                        p, q = prv[r], nxt[r]
                        nxt[p] = q
                        if q != -1:
                            prv[q] = p
                        if nxt[0] == -1:
                            return True, None
                        e = nxt[0]
                        continue
                e = nxt[e]
            else:
                # the first return left: its op had to be linearized before
                # it; the unknown ops called by then are the other candidates
                phase = 1
                limit = etime[e]
                u = unxt[0]
            continue
        if u != -1 and ucall[u] <= limit:
            i = uop[u]
            _, new_state = step(ops[i], state)
            if new_state != state and not (after_unknown and is_put[i]):
                numask = umask | (1 << bit[i])
                if fresh((k, rel, new_state, True), numask):
                    stack.append((1, u, state, k, rel, umask, limit, after_unknown))
                    state, umask = new_state, numask
                    after_unknown = True
                    p, q = uprv[u], unxt[u]
                    unxt[p] = q
                    if q != -1:
                        uprv[q] = p
                    phase = 0
                    e = nxt[0]
                    continue
            u = unxt[u]
            continue
        # every candidate at this node failed: back out of the last step
        if len(stack) > best_len:
            best_len = len(stack)
            low = min(low, len(best_ops))
            del best_ops[low:]
            best_ops.extend(opid[x] if kind == 0 else uop[x] for kind, x, *_ in stack[low:])
            low = best_len
            best_state = state
            r = nxt[0]
            while is_call[r]:
                r = nxt[r]
            best_blocking = opid[r]
        if not stack:
            return False, (best_ops, best_state, best_blocking)
        kind, x, state, k, rel, umask, limit, after_unknown = stack.pop()
        if len(stack) < low:
            low = len(stack)
        if kind == 0:
            # unlift: relink the return, then the call
            r = match[x]
            p, q = prv[r], nxt[r]
            nxt[p] = r
            if q != -1:
                prv[q] = r
            p, q = prv[x], nxt[x]
            nxt[p] = x
            prv[q] = x
            phase = 0
            e = nxt[x]
        else:
            p, q = uprv[x], unxt[x]
            unxt[p] = x
            if q != -1:
                uprv[q] = x
            phase = 1
            u = unxt[x]


def _explain(key, ops, initial, best, context=8, max_listed=12):
    order, state, blocking = best
    lines = []
    lines.append("key %r: not linearizable (%d ops). The longest linearizable prefix found has "
                 "%d ops; value after it: %s." % (key, len(ops), len(order), _v(state)))
    if order:
        shown = order[-context:]
        lines.append("  %s of that prefix, in linearization order:" %
                     ("the last %d ops" % len(shown) if len(shown) < len(order) else "the ops"))
        s = initial
        states = []
        for i in order:
            _, s = _step(ops[i], s)
            states.append(s)
        for j in range(len(order) - len(shown), len(order)):
            lines.append("    %s   => %s" % (format_op(ops[order[j]]), _v(states[j])))
    else:
        lines.append("  (initial value %s)" % _v(initial))
    done = set(order)
    rest = [i for i in range(len(ops)) if i not in done]
    lines.append("  then this op had to be linearized (earliest return of the %d remaining ops):"
                 % len(rest))
    b_allowed, _ = _step(ops[blocking], state)
    lines.append("    %s   -- %s" % (format_op(ops[blocking]),
                                    _why(ops[blocking], state) if not b_allowed else
                                    "possible here, but every continuation dead-ends"))
    cands = [i for i in rest if i != blocking and ops[i].call <= ops[blocking].ret]
    cands.sort(key=lambda i: (ops[i].call, ops[i].ret))
    if cands:
        lines.append("  ops that could have been linearized before it (%d):" % len(cands))
        for i in cands[:max_listed]:
            allowed, new = _step(ops[i], state)
            if not allowed:
                why = _why(ops[i], state)
            elif ops[i].status == "unknown":
                why = "outcome unknown; " + ("it would change nothing here" if new == state else
                                             "taking effect here does not help either")
            else:
                why = "possible here, but every continuation dead-ends"
            lines.append("    %s   -- %s" % (format_op(ops[i]), why))
        if len(cands) > max_listed:
            lines.append("    ... and %d more" % (len(cands) - max_listed))
    return "\n".join(lines)


def _prepare(ops):
    out = []
    for o in ops:
        op = normalize(o)
        if op is None:
            continue
        if op.kind == "get" and op.status == "unknown":
            continue  # no effect on the state, no constraint: irrelevant
        out.append(op)
    return out


def _check_key(key, ops, initial, max_states):
    ok, best = _search(ops, initial, max_states)
    if ok:
        return True, ""
    return False, _explain(key, ops, initial, best)


def check_register(ops, initial=None, max_states=None):
    """Check the ops of one key. -> (ok, info)."""
    ops = _prepare(ops)
    keys = {op.key for op in ops}
    if len(keys) > 1:
        raise ValueError("check_register: ops on several keys: %r" % sorted(keys, key=repr)[:5])
    key = next(iter(keys)) if keys else None
    ok, info = _check_key(key, ops, _freeze(initial), max_states)
    return ok, ("OK: %d ops" % len(ops)) if ok else info


def check(history, initial=None, max_states=None, max_reported=3):
    """Check a whole history, key by key. initial: optional dict key -> value
    before the history (absent keys are None). -> (ok, info)."""
    ops = _prepare(history)
    by_key = {}
    for op in ops:
        by_key.setdefault(op.key, []).append(op)
    initial = initial or {}
    failures = []
    for key in sorted(by_key, key=repr):
        ok, info = _check_key(key, by_key[key], _freeze(initial.get(key)), max_states)
        if not ok:
            failures.append(info)
    if not failures:
        return True, "OK: %d ops on %d keys, linearizable" % (len(ops), len(by_key))
    head = "NOT LINEARIZABLE: %d of %d keys failed" % (len(failures), len(by_key))
    shown = failures[:max_reported]
    more = ["(%d more failing keys not shown)" % (len(failures) - len(shown))] \
        if len(failures) > len(shown) else []
    return False, "\n".join([head] + shown + more)


def read_jsonl(f):
    ops = []
    for n, line in enumerate(f, 1):
        line = line.strip()
        if not line:
            continue
        try:
            ops.append(json.loads(line))
        except ValueError as ex:
            raise ValueError("line %d: %s" % (n, ex))
    return ops


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print("usage: linearizability.py history.jsonl   (one JSON op per line, - for stdin)",
              file=sys.stderr)
        return 2
    try:
        if argv[1] == "-":
            history = read_jsonl(sys.stdin)
        else:
            with open(argv[1]) as f:
                history = read_jsonl(f)
        ok, info = check(history)
    except ValueError as ex:
        print("bad history: %s" % ex, file=sys.stderr)
        return 2
    print(info)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
