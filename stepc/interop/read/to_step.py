"""A ProgramGraph as a `.step` program: one statement per operator, named after the
operator's debug name, with the source operator's id in a comment.

Each reference operator maps to the stepc operator with the same meaning (see
docs/interop.md); a field stepc cannot honour is refused with the operator and the field
named, never dropped. Stream shapes are not in the file: the checker infers them from the
program this module writes, compiled by the caller's compile function (the front end's),
whose result comes back with the text so that a `.pb` given to a command is compiled once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stepc.codes import UNPROVEN_EQUALITY
from stepc.interop.read.fold import Folded, Unit, fold
from stepc.interop.read.operators import (
    HANDLERS,
    N_BYTE_DTYPES,
    SINKS,
    declare_feedback,
    n_byte_dtype,
    with_fifo,
)
from stepc.interop.read.reader import (
    InteropError,
    InvalidGraphError,
    Op,
    Port,
    printable,
    read_graph,
)
from stepc.interop.read.verify import refusal
from stepc.interop.read.writer import Writer


@dataclass
class Imported:
    """The program written for one graph file, and its compilation (the front end's
    `Compiled` for exactly `text`)."""

    text: str
    operators: int
    compiled: Any
    refusal: InvalidGraphError | None = None  # the program does not check: the graph is
    # invalid (`stepc import` stops with this error; a command given the graph reports the
    # checker's diagnostics)


def import_graph(path: str, compile_text: Callable[[str], Any],
                 out_dir: str | None = None) -> Imported:
    """The `.step` program of the graph file `path`, compiled by `compile_text` (program
    text -> the front end's `Compiled`); side files are named relative to `out_dir`
    (default: the graph's directory)."""
    gname, ops = read_graph(path)
    w = Writer(path, os.path.dirname(path) if out_dir is None else out_dir, all_ops=ops,
               by_id={op.id: op for op in ops}, readers=_readers(ops))
    for op in ops:  # a 2-byte store's data is made in its stored type
        if op.kind == "random_off_chip_store" and op.msg.n_byte in N_BYTE_DTYPES:
            w.narrow[op.inputs[1].src] = n_byte_dtype(w, op, op.msg.wdata_dtype)
    for op in ops:
        if op.fed_back:
            declare_feedback(w, op)
    for op in ops:
        handler = HANDLERS.get(op.kind)
        if handler is None:
            raise InteropError(path, f"stepc has no operator for `{op.kind}`", op)
        name = w.names.get(op.id) or w.fresh(op)
        w.names[op.id] = name
        code, note = handler(w, op, name)
        if code and op.kind != "cache_read_addr_gen":
            code = with_fifo(code, op)
        if code:
            w.body.append((code, f"op {op.id}" + (f": {note}" if note else "")))
            w.unit_of[op.id] = len(w.body) - 1
            if op.kind in _LOCKSTEP or op.kind == "flat_partition" and \
                    not op.msg.partition_rank:
                w.lockstep[len(w.body) - 1] = [w.ref(op, p) for p in op.inputs]
    _sink_unread(w, ops)
    title = f" ({printable(gname)})" if gname else ""
    header = [(f"Imported from the STeP IR graph {os.path.basename(path)}{title}: {len(ops)} "
               "operators, by `stepc import`."),
              "One statement per operator; each comment names the source operator's id."]
    text, folded = _render(w, header, {})
    compiled = compile_text(text)
    declared = _fed_back_shapes(w, compiled)
    assumes = _lockstep_assumes(w, compiled, text, folded)
    for at, facts in _stated_shapes(w, compiled, folded).items():
        assumes.setdefault(at, []).extend(facts)
    if assumes or declared:  # the lockstep facts change the shapes: compile them stated
        text, folded = _render(w, header, assumes)
        compiled = compile_text(text)
    if compiled.typed is not None:
        _check_accumulators(w, compiled.typed.types, folded.renamed)
    return Imported(text, len(ops), compiled, refusal(w, text, compiled))


_LOCKSTEP = ("binarymap", "binarymap_accum")


def _readers(ops: list[Op]) -> dict[int, list[Op]]:
    out: dict[int, list[Op]] = {op.id: [] for op in ops}
    for op in ops:
        for src in dict.fromkeys(p.src for p in op.inputs + [op.control] if p):
            out[src].append(op)
    return out


def _sink_unread(w: Writer, ops: list[Op]) -> None:
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


def _render(w: Writer, header: list[str],
            assumes: dict[int, list[str]]) -> tuple[str, Folded]:
    """The formatted program text, repeated statements folded into loops, and the fold
    (`assumes`: the statements stated before each body statement; at the body's length,
    after the last)."""
    units = [Unit("\n".join(assumes.get(i, []) + [code]), note)
             for i, (code, note) in enumerate(w.body)]
    folded = fold(units, w.tensors)
    out = [f"# {h}" for h in header] + [""] + folded.tensors + [""]
    if w.streams:
        out += w.streams + [""]
    out += folded.body + assumes.get(len(w.body), [])
    return _formatted("\n".join(out) + "\n", w.path), folded


def _fed_back_shapes(w: Writer, compiled) -> bool:
    """A fed-back stream read in lockstep with a stream of known shape has that shape: its
    declaration says so (the checker then holds the producer to it). Whether any did."""
    if compiled.typed is None:
        return False
    said = False
    for names in w.lockstep.values():
        for name in names:
            decl = w.feedback.get(name)
            if decl is None or decl[1]:
                continue
            for other in names:
                shape = _known_shape(compiled.typed.types, other)
                if other != name and shape:
                    rank = shape.count(",")  # a stream's rank: its dims less one
                    w.streams[decl[0]] = w.streams[decl[0]].replace(", 0>[?]",
                                                                    f", {rank}>{shape}", 1)
                    w.feedback[name] = (decl[0], shape)
                    said = True
                    break
    return said


def _known_shape(types: dict, ref: str) -> str:
    """`[16]` for a stream `ref` (`x` or `x[k]`) whose shape the checker knows in numbers."""
    m = re.fullmatch(r"(\w+)(?:\[(\d+)\])?", ref)
    if m is None:
        return ""
    t = types.get((m.group(1), int(m.group(2) or 0)))
    dims = getattr(t, "shape", None)
    if not dims or not all(getattr(d, "is_Integer", False) for d in dims):
        return ""
    return "[" + ", ".join(str(d) for d in dims) + "]"


_OP_COMMENT = re.compile(r"# ops? (\d+)")


def _stated_shapes(w: Writer, compiled, folded: Folded) -> dict[int, list[str]]:
    """`assume` statements for streams whose shape the graph states in numbers
    (`out_stream_shape`, as `stepc export` writes the shapes its checker proved) where the
    checker reading the graph infers a symbolic dim (a count of routed requests, say): the
    facts the exported program stated with its own `assume`s. Statements folded into loops
    are left as they are."""
    if compiled.typed is None:
        return {}
    looped = {i for start, n in folded.runs if n > 1 for i in range(start, start + n)}
    out: dict[int, list[str]] = {}
    for op in w.all_ops:
        at = w.unit_of.get(op.id)
        if not op.out_shape or at is None or at in looped:
            continue
        name = w.ports[op.id][0] if op.id in w.ports else w.names.get(op.id)
        if name is None:
            continue
        dims = getattr(compiled.typed.types.get((name, 0)), "shape", None)
        if w.outputs.get(op.id):  # an array of outputs, one shape
            name += "[0]"
        if dims is None or len(dims) != len(op.out_shape) or \
                all(getattr(d, "is_Integer", False) for d in dims):
            continue
        if any(getattr(d, "is_Integer", False) and int(d) != n
               for d, n in zip(dims, op.out_shape)):
            continue
        out.setdefault(at + 1, []).append(
            f"assume shape({name}) == {list(op.out_shape)}  # the graph's out_stream_shape")
    return out


def _lockstep_assumes(w: Writer, compiled, text: str,
                      folded: Folded) -> dict[int, list[str]]:
    """`assume` statements for binary operators whose inputs the checker cannot prove to
    have one shape: the format's BinaryMap and BinaryMapAccum read their inputs in lockstep,
    so the graph states that they do. A warning inside a loop stands for every iteration's
    operator, so each gets its statement (the loop keeps folding alike). A fact about a
    fed-back stream is stated after its producer (the checker needs it bound)."""
    lines = text.splitlines()
    runs = dict(folded.runs)
    flagged: set[int] = set()
    for d in compiled.diagnostics.items:
        if d.code != UNPROVEN_EQUALITY or d.span is None:
            continue
        for k in range(d.span.line - 1, len(lines)):  # its comment ends its last line
            m = _OP_COMMENT.search(lines[k])
            if m:
                unit = w.unit_of.get(int(m.group(1)))
                if unit is not None:
                    flagged.update(range(unit, unit + runs.get(unit, 1)))
                break
    fed_back = {sel: w.unit_of[i] + 1 for i, names in w.ports.items()
                if w.by_id[i].fed_back for sel in names}
    out: dict[int, list[str]] = {}
    for i in sorted(flagged & set(w.lockstep)):
        first, *rest = w.lockstep[i]
        at = max([i] + [fed_back[n] for n in [first, *rest] if n in fed_back])
        out.setdefault(at, []).extend(f"assume shape({r}) == shape({first})  # lockstep inputs"
                                      for r in rest)
    return out


def _check_accumulators(w: Writer, types: dict, renamed: dict[str, str]) -> None:
    """The graph states each accumulator's tile (`tile_row`, `tile_col`, 0 when dynamic);
    stepc infers it, and a graph whose statement differs is refused."""
    for op in w.all_ops:
        if op.kind not in ("accum", "binarymap_accum"):
            continue
        name = w.names.get(op.id)
        if name is None:
            continue
        elem = getattr(types.get((renamed.get(name, name), 0)), "elem", None)
        for fld in ("tile_row", "tile_col"):
            said = getattr(op.msg, fld)
            got = getattr(elem, "rows" if fld == "tile_row" else "cols", None)
            if said and got is not None and str(got) != str(said):
                raise InteropError(w.path, f"{fld} = {said}, but its accumulator tile is "
                                   f"{elem} by stepc's shape rules", op)


def _formatted(text: str, path: str) -> str:
    from stepc.grammar.format import format_source
    return format_source(text, path)
