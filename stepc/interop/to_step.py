"""A ProgramGraph as a `.step` program: one statement per operator, named after the
operator's debug name, with the source operator's id in a comment.

Each reference operator maps to the stepc operator with the same meaning (see
docs/interop.md); a field stepc cannot honour is refused with the operator and the field
named, never dropped. Stream shapes are not in the file: the checker infers them from the
program this module writes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from stepc.codes import UNPROVEN_EQUALITY
from stepc.interop.fold import Unit, fold
from stepc.interop.operators import HANDLERS, N_BYTE_DTYPES, SINKS, n_byte_dtype
from stepc.interop.reader import InteropError, Op, Port, read_graph, relative_to


@dataclass
class Imported:
    """The program written for one graph file."""

    text: str
    operators: int


@dataclass
class _Writer:
    path: str  # the graph file
    out_dir: str  # where the program will live (side-file paths are relative to it)
    names: dict[int, str] = field(default_factory=dict)  # op id -> stream name
    dtypes: dict[int, str] = field(default_factory=dict)  # op id -> element type
    outputs: dict[int, int] = field(default_factory=dict)  # op id -> number of outputs
    tensors: list[str] = field(default_factory=list)
    streams: list[str] = field(default_factory=list)
    body: list[tuple[str, str]] = field(default_factory=list)
    taken: set[str] = field(default_factory=set)
    all_ops: list[Op] = field(default_factory=list)
    lockstep: dict[int, list[str]] = field(default_factory=dict)  # body index -> inputs
    ports: dict[int, list[str]] = field(default_factory=dict)  # op id -> its output names
    narrow: dict[int, str] = field(default_factory=dict)  # op id -> type a store writes it in

    def fresh(self, op: Op) -> str:
        base = op.name.split(" ")[0] if op.name else f"{op.kind}_{op.id}"
        return self.unique(re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", base).lower(), op.id)

    def unique(self, base: str, op_id: int) -> str:
        """An identifier from a debug name (`xt[0].up` -> `xt_0_up`), not taken yet."""
        base = re.sub(r"\W+", "_", base.replace("]", "")).strip("_") or f"op_{op_id}"
        name = base if base[0].isalpha() else f"op_{base}"
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return name

    def ref(self, op: Op, port: Port) -> str:
        """The stepc expression of one input."""
        src = self.names[port.src]
        n = self.outputs.get(port.src, 0)
        if port.src in self.ports:  # several named outputs
            names = self.ports[port.src]
            if port.idx is None or port.idx >= len(names):
                raise InteropError(self.path, f"reads operator {port.src} without a valid "
                                   f"stream_idx (it has {len(names)} outputs)", op)
            return names[port.idx]
        if n:  # an array of outputs (Broadcast, Partition), even of one
            if port.idx is None or port.idx >= n:
                raise InteropError(self.path, f"reads operator {port.src} without a valid "
                                   f"stream_idx (it has {n} outputs)", op)
            return f"{src}[{port.idx}]"
        if port.idx not in (None, 0):
            raise InteropError(self.path, f"reads output {port.idx} of operator {port.src}, "
                               "which has one output", op)
        return src

    def side_file(self, npy: str) -> str:
        full = relative_to(self.path, npy)
        if not os.path.isfile(full):
            raise InteropError(self.path, f"names {npy}, which is missing (looked for {full})")
        rel = os.path.relpath(full, self.out_dir or ".")
        return os.path.abspath(full) if rel.startswith("..") else rel


def import_graph(path: str, out_dir: str | None = None) -> Imported:
    """The `.step` text of the graph file `path`; side files are named relative to
    `out_dir` (default: the graph's directory)."""
    gname, ops = read_graph(path)
    w = _Writer(path, os.path.dirname(path) if out_dir is None else out_dir, all_ops=ops)
    for op in ops:  # a 2-byte store's data is made in its stored type
        if op.kind == "random_off_chip_store" and op.msg.n_byte in N_BYTE_DTYPES:
            w.narrow[op.inputs[1].src] = n_byte_dtype(w, op, op.msg.wdata_dtype)
    for op in ops:
        handler = HANDLERS.get(op.kind)
        if handler is None:
            raise InteropError(path, f"stepc has no operator for `{op.kind}`", op)
        name = w.fresh(op)
        w.names[op.id] = name
        code, note = handler(w, op, name)
        if code:
            w.body.append((code, f"op {op.id}" + (f": {note}" if note else "")))
            if op.kind in _LOCKSTEP or op.kind == "flat_partition" and \
                    not op.msg.partition_rank:
                w.lockstep[len(w.body) - 1] = [w.ref(op, p) for p in op.inputs]
    _sink_unread(w, ops)
    title = f" ({gname})" if gname else ""
    header = [(f"Imported from the STeP IR graph {os.path.basename(path)}{title}: {len(ops)} "
               "operators, by `stepc import`."),
              "One statement per operator; each comment names the source operator's id."]
    text, lines = _render(w, header, {})
    text = _render_folded(w, header, _lockstep_assumes(w, text, lines, path))
    return Imported(_formatted(text, path), len(ops))


_LOCKSTEP = ("binarymap", "binarymap_accum")


def _sink_unread(w: _Writer, ops: list[Op]) -> None:
    """A Sink for every output nothing in the graph reads (the reference drops them)."""
    read = {(p.src, p.idx or 0) for op in ops for p in op.inputs + [op.control] if p}
    for op in ops:
        if op.kind in SINKS:
            continue
        n = len(w.ports[op.id]) if op.id in w.ports else w.outputs.get(op.id, 0)
        for i in range(max(n, 1)):
            if (op.id, i) not in read:
                ref = w.ref(op, Port(op.id, i if n else None))
                w.body.append((f"Sink({ref})", f"op {op.id}: output {i} is read by nothing"))


def _render(w: _Writer, header: list[str], assumes: dict[int, str]) -> tuple[str, list[int]]:
    """The program text, and the line of each body statement."""
    out = [f"# {h}" for h in header] + [""] + w.tensors + [""]
    if w.streams:
        out += w.streams + [""]
    lines = []
    for i, (code, note) in enumerate(w.body):
        if i in assumes:
            out.append(assumes[i])
        out.append(f"{code}  # {note}")
        lines.append(len(out))
    return "\n".join(out) + "\n", lines


def _render_folded(w: _Writer, header: list[str], assumes: dict[int, str]) -> str:
    """The program text with repeated statements folded into loops."""
    units = [Unit(f"{assumes[i]}\n{code}" if i in assumes else code, note)
             for i, (code, note) in enumerate(w.body)]
    tensors, body = fold(units, w.tensors)
    out = [f"# {h}" for h in header] + [""] + tensors + [""]
    if w.streams:
        out += w.streams + [""]
    return "\n".join(out + body) + "\n"


def _lockstep_assumes(w: _Writer, text: str, lines: list[int], path: str) -> dict[int, str]:
    """`assume` statements for binary operators whose inputs the checker cannot prove to
    have one shape: the format's BinaryMap and BinaryMapAccum read their inputs in lockstep,
    so the graph states that they do."""
    from stepc.frontend import compile_source
    from stepc.source import SourceFile
    compiled = compile_source(SourceFile(path, text), {}, None)
    if compiled.typed is not None:
        _check_accumulators(w, compiled.typed.types)
    at_line = {ln: i for i, ln in enumerate(lines)}
    out = {}
    for d in compiled.diagnostics.items:
        i = at_line.get(d.span.line) if d.code == UNPROVEN_EQUALITY and d.span else None
        if i is not None and i in w.lockstep:
            first, *rest = w.lockstep[i]
            out[i] = "\n".join(f"assume shape({r}) == shape({first})  # lockstep inputs"
                               for r in rest)
    return out


def _check_accumulators(w: _Writer, types: dict) -> None:
    """The graph states each accumulator's tile (`tile_row`, `tile_col`, 0 when dynamic);
    stepc infers it, and a graph whose statement differs is refused."""
    for op in w.all_ops:
        if op.kind not in ("accum", "binarymap_accum"):
            continue
        elem = getattr(types.get((w.names.get(op.id), 0)), "elem", None)
        for fld in ("tile_row", "tile_col"):
            said = getattr(op.msg, fld)
            got = getattr(elem, "rows" if fld == "tile_row" else "cols", None)
            if said and got is not None and str(got) != str(said):
                raise InteropError(w.path, f"{fld} = {said}, but its accumulator tile is "
                                   f"{elem} by stepc's shape rules", op)


def _formatted(text: str, path: str) -> str:
    from stepc.grammar.format import format_source
    return format_source(text, path)


