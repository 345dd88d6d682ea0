"""Reading a ProgramGraph file into operators with resolved inputs, in dependency order.

The format names each input by its producer's id and, for producers with several outputs,
an output index (`stream_idx`); id 0 is proto3's default, so it is absent on the wire. The
operators come in no particular order. Every problem is an `InteropError` naming the file
and, when there is one, the operator.
"""

from __future__ import annotations

import heapq
import math
import os
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from stepc.interop.read.bounds import (
    MAX_GRAPH_BYTES,
    MAX_NAME,
    MAX_OPERATORS,
    channel_problem,
    field_problem,
    shape_problem,
)
from stepc.interop.schema import OP_TYPES, ProgramGraph, WireMessage, is_repeated


class InteropError(Exception):
    """A graph file stepc cannot read or cannot say in its language (exit 1)."""

    def __init__(self, path: str, message: str, op: Op | None = None):
        where = f"{path}: operator {op.label}: " if op is not None else f"{path}: "
        super().__init__(where + message)
        self.path, self.op = path, op


class GraphFileError(InteropError):
    """The graph file itself cannot be read (missing, a directory, no permission): a usage
    error (exit 2), as for a `.step` file."""


class InvalidGraphError(InteropError):
    """The graph is past a bound, has a value no operator takes, or makes a program that
    does not check: an input error (exit 2 from `stepc import`)."""


# op kind -> its stream inputs: (id field, output-index field) pairs, in port order
INPUTS: dict[str, tuple[tuple[str, str], ...]] = {
    "binarymap": (("input_id1", "stream_idx1"), ("input_id2", "stream_idx2")),
    "binarymap_accum": (("input_id1", "stream_idx1"), ("input_id2", "stream_idx2")),
    "dyn_off_chip_load": (("ref_id", "ref_stream_idx"),),
    "flat_partition": (("input_id", "input_stream_idx"), ("control_id", "control_stream_idx")),
    "parallelize": (("input_id", "input_stream_idx"),),
    "expert_addr_gen": (("input_id", "input_stream_idx"),),
    "cache_read_addr_gen": (("idx_id", "idx_stream_idx"), ("seq_len_id", "seq_len_stream_idx")),
    "filter_last_tile": (("seq_len_id", "seq_len_stream_idx"),),
    "random_off_chip_load": (("raddr_id", "raddr_stream_idx"),),
    "random_off_chip_store": (("waddr_id", "waddr_stream_idx"),
                              ("wdata_id", "wdata_stream_idx")),
    "expand_ref": (("input_id", "stream_idx"), ("ref_id", "ref_stream_idx")),
    "dyn_streamify": (("input_id", "input_stream_idx"), ("ref_id", "ref_stream_idx")),
    "off_chip_load": (), "select_gen": (), "metadata_gen": (),
}
SINGLE_INPUT = (("input_id", "stream_idx"),)
LISTED = ("flat_reassemble", "eager_merge")  # inputs as input_id_list + input_stream_idx_list


@dataclass(frozen=True)
class Port:
    """One input of an operator: its producer's id and output index (None: the only one)."""

    src: int
    idx: int | None


@dataclass
class Op:
    id: int
    name: str
    kind: str
    msg: WireMessage  # the op's message (OffChipLoad, Flatten, ...)
    inputs: list[Port] = field(default_factory=list)
    control: Port | None = None  # the selector input of FlatReassemble
    fed_back: list[int] = field(default_factory=list)  # outputs read before it (a loop)
    fifo_depth: list[int] = field(default_factory=list)  # stepc's extension fields
    buffer_depth: int = 0
    out_shape: list[int] = field(default_factory=list)  # out_stream_shape, when all static

    @property
    def label(self) -> str:
        return f"{self.id} (`{printable(self.name)}`)" if self.name else str(self.id)


def printable(name: str, limit: int = MAX_NAME) -> str:
    """A debug name (or a line) as a message quotes it: one line, at most `limit`
    characters."""
    flat = "".join(c if c.isprintable() else "?" for c in name[:limit + 1])
    return flat if len(flat) <= limit else flat[:limit - 2] + ".."


def read_graph(path: str) -> tuple[str, list[Op]]:
    """The graph's name and its operators in dependency order (producers first)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_GRAPH_BYTES + 1)
    except OSError as e:
        raise GraphFileError(path, f"cannot read: {e.strerror}") from None
    if len(data) > MAX_GRAPH_BYTES:
        raise InvalidGraphError(path, f"larger than {MAX_GRAPH_BYTES:,} bytes, the most stepc "
                                "reads as a graph")
    return parse_graph(data, path)


def parse_graph(data: bytes, path: str) -> tuple[str, list[Op]]:
    graph = ProgramGraph()
    try:
        graph.ParseFromString(data)
    except DecodeError as e:
        raise InteropError(path, f"not a ProgramGraph (truncated or not protobuf): {e}") from None
    if not graph.operators:
        raise InteropError(path, "a ProgramGraph without operators (an empty or foreign file)")
    if len(graph.operators) > MAX_OPERATORS:
        raise InvalidGraphError(path, f"{len(graph.operators):,} operators; a program holds at "
                                f"most {MAX_OPERATORS:,}")
    ops: dict[int, Op] = {}
    for i, m in enumerate(graph.operators):
        kind = m.WhichOneof("op_type")
        label = f"#{i} (id {m.id}{', `' + printable(m.name) + '`' if m.name else ''})"
        if kind is None:
            numbers = sorted({n for n, _ in _unknown(m)})
            what = (f"unknown op field number{'s' if len(numbers) > 1 else ''} "
                    f"{', '.join(map(str, numbers))} (stepc knows {min(_NUMBERS)}.."
                    f"{max(_NUMBERS)})" if numbers else "no op type set")
            raise InteropError(path, f"operator {label}: {what}")
        if m.id in ops:
            raise InteropError(path, f"operator {label}: id {m.id} is used twice (also by "
                               f"`{printable(ops[m.id].name)}`)")
        op = Op(m.id, m.name, kind, getattr(m, kind), fifo_depth=list(m.stepc_fifo_depth),
                buffer_depth=m.stepc_buffer_depth)
        problem = field_problem(kind, op.msg) or shape_problem(len(m.out_stream_shape))
        if problem:  # before anything is built from a list past its bound
            raise InvalidGraphError(path, problem, op)
        if all(d.HasField("static") for d in m.out_stream_shape):
            op.out_shape = [d.static for d in m.out_stream_shape]
        if m.parallel_factor > 1:
            raise InteropError(path, f"parallel_factor {m.parallel_factor}: stepc runs each "
                               "operator once; replicate it in the graph (or deal its input "
                               "with a Parallelize op)", op)
        unknown = _unknown_inside(op.msg, kind)
        if unknown:
            raise InteropError(path, f"field number {unknown[1]} of `{unknown[0]}` is not in "
                               "the schema stepc reads (a newer schema?); refusing rather than "
                               "dropping it", op)
        op.inputs, op.control = _ports(op)
        problem = channel_problem(kind, op.fifo_depth, op.buffer_depth,
                                  len(op.inputs) + (op.control is not None))
        if problem:
            raise InvalidGraphError(path, problem, op)
        ops[m.id] = op
    for op in ops.values():
        for p in op.inputs + ([op.control] if op.control else []):
            if p.src not in ops:
                raise InteropError(path, f"reads operator id {p.src}, which the graph does not "
                                   "have", op)
    statements = {i: k for k, i in enumerate(graph.stepc_statement_order)}
    return graph.name, _ordered(ops, path, statements)


_NUMBERS = [n for n, _ in OP_TYPES.values()]


def _unknown(m) -> list[tuple[int, int]]:
    from google.protobuf.unknown_fields import UnknownFieldSet
    # the stubs give UnknownFieldSet __getitem__ and __len__ but not its __iter__
    return [(f.field_number, f.wire_type) for f in UnknownFieldSet(m)]  # type: ignore[attr-defined]


def _unknown_inside(msg, where: str) -> tuple[str, int] | None:
    """The first field of `msg` or of a message inside it that the schema does not know."""
    fields = _unknown(msg)
    if fields:
        return where, fields[0][0]
    for desc, value in msg.ListFields():
        if desc.message_type is not None:
            for v in (value if is_repeated(desc) else [value]):
                found = _unknown_inside(v, f"{where}.{desc.name}")
                if found:
                    return found
    return None


def _ports(op: Op) -> tuple[list[Port], Port | None]:
    msg = op.msg
    if op.kind in LISTED:
        ids, idxs = list(msg.input_id_list), list(msg.input_stream_idx_list)
        ports = [Port(s, None if i < 0 else i) for s, i in zip(ids, idxs + [-1] * len(ids))]
        control = None
        if op.kind == "flat_reassemble":
            control = Port(msg.control_id, msg.control_stream_idx
                           if msg.HasField("control_stream_idx") else None)
        return ports, control
    spec = INPUTS.get(op.kind, SINGLE_INPUT)
    return [Port(getattr(msg, i), getattr(msg, x) if msg.HasField(x) else None)
            for i, x in spec], None


def _ordered(ops: dict[int, Op], path: str, statements: dict[int, int] | None = None
             ) -> list[Op]:
    """Producers before consumers, by level (the longest path from a source), then by id,
    so that the copies of a repeated sub-graph come together; in a graph that gives its
    program's statement order (`statements`: op id -> position, stepc's field), in that
    order, each operation no statement names just before its first reader. A loop is
    closed by the edges `_feedback` finds; any other cycle is refused, naming its
    operators."""
    preds = {i: {p.src for p in op.inputs + ([op.control] if op.control else [])}
             for i, op in ops.items()}
    out, stuck = _levels(ops, preds, statements)
    if stuck:
        back = _feedback(ops, preds, stuck)
        if back:
            for src, dst in back:
                preds[dst].discard(src)
            out, stuck = _levels(ops, preds, statements)
    if stuck:
        cycle = _a_cycle(stuck, preds)
        names = " -> ".join(ops[i].label for i in cycle)
        raise InteropError(path, f"the graph has a cycle ({names}) that no EagerMerge closes; "
                           "the format declares no feedback streams, and stepc reads a loop "
                           "only where an EagerMerge made before its inputs merges them")
    return out


def _levels(ops: dict[int, Op], preds: dict[int, set[int]],
            statements: dict[int, int] | None = None) -> tuple[list[Op], list[int]]:
    """The operators in order, and those a cycle keeps from ever being ready."""
    succ: dict[int, list[int]] = {i: [] for i in ops}
    for i, ps in preds.items():
        for p in ps:
            succ[p].append(i)
    waiting = {i: len(ps) for i, ps in preds.items()}
    level = dict.fromkeys(ops, 0)
    first = _first_reads(ops, succ, statements) if statements else {}
    ready = [(first.get(i, 0), i) for i, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    out: list[Op] = []
    while ready:
        _, i = heapq.heappop(ready)
        out.append(ops[i])
        for s in succ[i]:
            waiting[s] -= 1
            level[s] = max(level[s], level[i] + 1)
            if waiting[s] == 0:
                heapq.heappush(ready, (first.get(s, level[s]), s))
    return out, sorted(i for i, n in waiting.items() if n)


def _first_reads(ops: dict[int, Op], succ: dict[int, list[int]],
                 statements: dict[int, int]) -> dict[int, float]:
    """Per operator, the first position in `statements` among it and the operators that
    read it, directly or not: where it goes in the program's order."""
    first: dict[int, float] = {}
    for start in sorted(ops, reverse=True):
        stack = [(start, iter(succ[start]))]
        first.setdefault(start, statements.get(start, math.inf))
        while stack:
            i, todo = stack[-1]
            s = next(todo, None)
            if s is None:
                stack.pop()
                if stack:
                    j = stack[-1][0]
                    first[j] = min(first[j], first[i])
            elif s not in first:
                first[s] = statements.get(s, math.inf)
                stack.append((s, iter(succ[s])))
            else:
                first[i] = min(first[i], first[s])
    return first


def _feedback(ops: dict[int, Op], preds: dict[int, set[int]],
              stuck: list[int]) -> list[tuple[int, int]]:
    """The edges that close the graph's loops: the reference builds a loop (the dispatch of
    dynamic attention) by making an EagerMerge first, reading its selector where the loop
    starts, and giving it its inputs (the regions' signals, made later: larger ids) at the
    end. So an EagerMerge on a cycle whose cycle inputs all have larger ids is the loop's
    end, and its outputs' reads on the cycle are the fed-back edges (marked on the op)."""
    succ: dict[int, set[int]] = {i: set() for i in ops}
    for i, ps in preds.items():
        for p in ps:
            succ[p].add(i)
    component = _components(succ)
    back = []
    for m in stuck:
        op = ops[m]
        if op.kind != "eager_merge":
            continue
        cyclic = [p.src for p in op.inputs if component[p.src] == component[m]]
        if not cyclic or any(src < m for src in cyclic):
            continue
        for reader in sorted(r for r in succ[m] if component[r] == component[m]):  # on the loop
            r = ops[reader]
            for port in r.inputs + ([r.control] if r.control else []):
                if port.src == m and (port.idx or 0) not in op.fed_back:
                    op.fed_back.append(port.idx or 0)
            back.append((m, reader))
    return back


def _components(succ: dict[int, set[int]]) -> dict[int, int]:
    """Per operator, the index of its strongly connected component (operators on a cycle
    through both share one)."""
    import networkx as nx
    graph: nx.DiGraph[int] = nx.DiGraph()
    graph.add_nodes_from(succ)
    graph.add_edges_from((i, j) for i, js in succ.items() for j in js)
    return {i: k for k, members in enumerate(nx.strongly_connected_components(graph))
            for i in members}


def _a_cycle(stuck: list[int], preds: dict[int, set[int]]) -> list[int]:
    """One cycle among the operators that never became ready."""
    left = set(stuck)
    node, seen = stuck[0], []
    while node not in seen:
        seen.append(node)
        node = min(p for p in preds[node] if p in left)
    return seen[seen.index(node):] + [node]


def relative_to(path: str, npy: str) -> str:
    """A side file the graph names: beside the graph file, or in the `<graph>.npy/`
    directory the reference serializer writes them to (the first that exists)."""
    here = os.path.normpath(os.path.join(os.path.dirname(path), npy))
    beside = os.path.normpath(os.path.join(os.path.splitext(path)[0] + ".npy", npy))
    return beside if not os.path.exists(here) and os.path.exists(beside) else here
