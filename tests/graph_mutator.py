"""A seeded mutator of ProgramGraph files (the reference toolchain's `.pb`), for the hostile
import tests: each mutation changes one thing a damaged or hand-edited graph could have
wrong (an integer field set to 0, -1, 2^31 or 2^63-1; a field dropped; a repeated field's
entries duplicated; an operator's kind swapped; an input id dangling or closing a cycle; the
file's bytes truncated or overwritten with random ones) and says what it did."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from google.protobuf.descriptor import FieldDescriptor as FD

from stepc.interop.schema import OP_TYPES, ProgramGraph, is_repeated

# the values an integer field is set to (wrapped to the field's width, as a writer with a
# narrower or signed type would put them on the wire)
HOSTILE_INTS = (0, -1, 2**31, 2**63 - 1)
_WIDTH = {FD.TYPE_UINT32: 32, FD.TYPE_INT32: 32, FD.TYPE_UINT64: 64}
_SIGNED = (FD.TYPE_INT32,)


@dataclass(frozen=True)
class Mutant:
    """One mutated graph: what was done, and the file's bytes."""

    what: str
    data: bytes


def _fitted(value: int, ftype: int) -> int:
    """`value` as a field of type `ftype` holds it (two's complement, wrapped)."""
    bits = _WIDTH[ftype]
    v = value % 2**bits
    return v - 2**bits if ftype in _SIGNED and v >= 2**(bits - 1) else v


def _ints(msg, where: str) -> list[tuple[object, object, str]]:
    """(message, field, path) of every integer field of `msg` and the messages inside it."""
    out = []
    for f in msg.DESCRIPTOR.fields:
        if f.type in _WIDTH:
            out.append((msg, f, f"{where}.{f.name}"))
        elif f.type == FD.TYPE_MESSAGE:
            value = getattr(msg, f.name)
            for k, sub in enumerate(value if is_repeated(f) else
                                    [value] if msg.HasField(f.name) else []):
                out.extend(_ints(sub, f"{where}.{f.name}[{k}]" if is_repeated(f)
                                 else f"{where}.{f.name}"))
    return out


def _is_input_id(name: str) -> bool:
    return name.endswith("_id") or name in ("input_id1", "input_id2", "input_id_list")


def _op_msg(op):
    return getattr(op, op.WhichOneof("op_type")) if op.WhichOneof("op_type") else None


def _set_fields(op) -> list[tuple[object, object]]:
    """(message, field) of every field set on the operation and on its op message."""
    return [(m, f) for m in (op, _op_msg(op)) if m is not None for f, _ in m.ListFields()]


def _int_value(g, rng: random.Random) -> str:
    op = rng.choice(g.operators)
    fields = _ints(op, f"op {op.id}")
    msg, f, path = rng.choice(fields)
    value = _fitted(rng.choice(HOSTILE_INTS), f.type)
    if is_repeated(f):
        items = getattr(msg, f.name)
        if not items:
            items.append(value)
            return f"{path} = [{value}]"
        k = rng.randrange(len(items))
        items[k] = value
        return f"{path}[{k}] = {value}"
    setattr(msg, f.name, value)
    return f"{path} = {value}"


def _drop(g, rng: random.Random) -> str:
    op = rng.choice(g.operators)
    if rng.random() < 0.15:
        g.operators.remove(op)
        return f"op {op.id} dropped"
    owner, f = rng.choice(_set_fields(op))
    owner.ClearField(f.name)
    return f"op {op.id}: {f.name} dropped"


def _duplicate(g, rng: random.Random) -> str:
    op = rng.choice(g.operators)
    fields = [(m, f) for m, f in _set_fields(op) if is_repeated(f)]
    if not fields or rng.random() < 0.2:
        g.operators.add().CopyFrom(op)
        return f"op {op.id} duplicated"
    owner, f = rng.choice(fields)
    items = getattr(owner, f.name)
    times = rng.choice((1, 2, 7))
    for _ in range(times):
        if f.type == FD.TYPE_MESSAGE:
            for item in list(items):
                items.add().CopyFrom(item)
        else:
            items.extend(list(items))
    return f"op {op.id}: {f.name} entries duplicated {times} times"


def _swap_kind(g, rng: random.Random) -> str:
    """The operator becomes another kind, reading the same producers (the new kind's input
    fields, in order, take the old one's input ids)."""
    op = rng.choice(g.operators)
    old = _op_msg(op)
    ids = [v for f, value in (old.ListFields() if old is not None else [])
           if _is_input_id(f.name) for v in (value if is_repeated(f) else [value])]
    kind = rng.choice(sorted(OP_TYPES))
    new = getattr(op, kind)
    new.SetInParent()  # the oneof's other member is cleared
    for f, v in zip([f for f in new.DESCRIPTOR.fields if _is_input_id(f.name)], ids):
        if is_repeated(f):
            getattr(new, f.name).append(v)
        else:
            setattr(new, f.name, v)
    return f"op {op.id}: kind swapped to {kind}"


def _rewire(g, rng: random.Random, dangle: bool) -> str:
    readers = [(op, f) for op in g.operators if _op_msg(op) is not None
               for f in _op_msg(op).DESCRIPTOR.fields if _is_input_id(f.name)]
    if not readers:
        return "no input to rewire"
    op, f = rng.choice(readers)
    ids = [o.id for o in g.operators]
    later = [i for i in ids if i >= op.id] or ids
    to = max(ids) + rng.randint(1, 1000) if dangle else rng.choice(later)
    msg = _op_msg(op)
    if is_repeated(f):
        getattr(msg, f.name).append(to)
    else:
        setattr(msg, f.name, to)
    return f"op {op.id}: {f.name} = {to} ({'dangling' if dangle else 'a later op: a cycle'})"


def _truncate(data: bytes, rng: random.Random) -> Mutant:
    n = rng.randrange(1, len(data))
    return Mutant(f"truncated to {n} of {len(data)} bytes", data[:n])


def _random_bytes(data: bytes, rng: random.Random) -> Mutant:
    buf = bytearray(data)
    n = rng.choice((1, 4, 64))
    at = rng.randrange(len(buf))
    buf[at:at + n] = bytes(rng.randrange(256) for _ in range(n))
    return Mutant(f"{n} random bytes at {at}", bytes(buf))


_GRAPH_MUTATIONS = (
    _int_value, _int_value, _int_value, _drop, _duplicate, _swap_kind,
    lambda g, rng: _rewire(g, rng, dangle=True), lambda g, rng: _rewire(g, rng, dangle=False),
)


def mutate(data: bytes, rng: random.Random) -> Mutant:
    """One mutation of the graph file `data`."""
    if rng.random() < 0.15:
        return (_truncate if rng.random() < 0.5 else _random_bytes)(data, rng)
    g = ProgramGraph()
    g.ParseFromString(data)
    what = rng.choice(_GRAPH_MUTATIONS)(g, rng)
    return Mutant(what, g.SerializeToString())


def mutants(data: bytes, seed: int, count: int) -> Iterator[Mutant]:
    """`count` mutations of `data`, each of the original, decided by `seed`."""
    rng = random.Random(seed)
    for _ in range(count):
        yield mutate(data, rng)
