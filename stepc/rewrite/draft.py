"""A program being rewritten: the checked program's declarations and a list of statements,
each with a comment saying where it came from, printed as a formatted `.step` program.

A rewrite starts from `Draft.of(typed)`, which holds every operator of the checked program
as a statement (fan-out nodes left out: the front end inserts them again), replaces some of
them with new statements, and renders the text, which is then compiled and checked again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from stepc.ops import OPS
from stepc.ops.base import REQUIRED, STREAMS, VARSTREAMS, fmt_attr, sanitize


class RewriteError(Exception):
    """A rewrite that cannot be done. `kind`: "usage" (a bad name or option), "program"
    (a program the rewrite cannot take) or "internal" (the rewrite made a program that
    does not check: a bug)."""

    def __init__(self, message: str, kind: str = "usage"):
        super().__init__(message)
        self.kind = kind


@dataclass
class Stmt:
    """One operator call of the new program.

    `ins` are stream references (names, `p[2]`), one per stream input slot in the order of
    the operator's parameters (a STREAMS parameter takes a list); `attrs` the attributes
    to write; `outs` the names bound to the outputs ("" for an output nothing reads);
    `array` binds the outputs as one array named `outs[0]`."""

    op: str
    ins: list[Any]
    attrs: dict[str, Any]
    outs: list[str]
    note: str
    array: bool = False


@dataclass
class Change:
    """What a rewrite did to one operator of the original program (or why it left it)."""

    node: str
    op: str
    action: str  # "rewritten" | "kept" | "converted" (its stream packed back or split)
    detail: str
    added: list[str] = field(default_factory=list)  # operators of the new program
    flops_delta: Any = 0  # the FLOPs this change adds, by the rewrite's own rule
    on_chip_delta: Any = 0  # the on-chip bytes it adds, by the rewrite's own rule


@dataclass
class Draft:
    """The new program under construction."""

    tensors: list[str]
    externals: list[str]
    stmts: list[Stmt] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    assumes: list[str] = field(default_factory=list)  # stated after every statement
    taken: set[str] = field(default_factory=set)

    def fresh(self, base: str) -> str:
        """An identifier not used yet, from `base` (a node name such as `e[1].up`)."""
        name = sanitize(base)
        if not (name[0].isalpha() or name[0] == "_"):
            name = "s_" + name
        out, i = name, 1
        while out in self.taken or out in OPS:
            i += 1
            out = f"{name}_{i}"
        self.taken.add(out)
        return out

    def emit(self, op: str, ins: list, attrs: dict, note: str, outs: int = 1,
             base: str = "s") -> list[str]:
        """Add a statement of `op` whose outputs are named from `base`; their references."""
        spec = OPS[op]
        if spec.indexed_outputs:
            name = self.fresh(base)
            self.stmts.append(Stmt(op, ins, attrs, [name], note, array=True))
            return [f"{name}[{i}]" for i in range(outs)]
        names = [self.fresh(base if i == 0 else f"{base}_{i}") for i in range(outs)]
        self.stmts.append(Stmt(op, ins, attrs, names, note))
        return names


def declarations(typed, out_dir: str | None) -> list[str]:
    """The tensor declarations of a checked program (`file(...)` paths made relative to
    `out_dir`, where the new program is written)."""
    prog = typed.program
    tensors = []
    for t in prog.tensors.values():
        source = ""
        if t.source is not None:
            src = t.source
            path = src.get("path")
            if path is not None and out_dir is not None and t.span is not None:
                here = os.path.dirname(t.span.file) or "."
                rel = os.path.relpath(os.path.join(here, path), out_dir)
                src = type(src)(src.name, tuple((k, rel if k == "path" else v)
                                                for k, v in src.kwargs), src.span)
            source = f" = {src}"
        dims = ", ".join(str(d) for d in t.shape)
        tensors.append(f"tensor {t.name} : {t.dtype}[{dims}] {t.role}{source}")
    return tensors


def call_text(stmt: Stmt) -> str:
    """`a, b = Op(x, y, key=value)` for one statement."""
    spec = OPS[stmt.op]
    args: list[str] = []
    ins = iter(stmt.ins)
    positional = True
    for p in spec.params:
        if p.is_stream:
            ref = next(ins, None)
            if p.kind == VARSTREAMS:
                args.extend(str(x) for x in ref or [])
                continue
            if ref is None:
                positional = False
                continue
            text = "[" + ", ".join(map(str, ref)) + "]" if p.kind == STREAMS else str(ref)
            args.append(text if positional else f"{p.name}={text}")
            continue
        if p.name not in stmt.attrs:
            if p.kind == "tensor" and p.default is REQUIRED:
                positional = False
            continue
        value = stmt.attrs[p.name]
        if p.kind == "tensor" and positional:
            args.append(str(value))
            continue
        positional = False
        args.append(f"{p.name}={attr_text(p.kind, value)}")
    for key, value in stmt.attrs.items():  # the attributes every operator takes
        if spec.param(key) is not None and key not in {p.name for p in spec.params}:
            args.append(f"{key}={fmt_attr(value)}")
    call = f"{stmt.op}({', '.join(args)})"
    if not stmt.outs:
        return call
    if stmt.array:
        return f"{stmt.outs[0]} = {call}"
    names = [n or "_" for n in stmt.outs]
    while len(names) > 1 and names[-1] == "_":
        names.pop()
    return call if names == ["_"] else f"{', '.join(names)} = {call}"


def attr_text(kind: str, value: Any) -> str:
    if kind in ("tensor", "fn", "init", "dtype"):
        return str(value)
    return fmt_attr(value)


def render(draft: Draft, header: list[str]) -> str:
    """The new program's text, formatted as `stepc fmt` would."""
    from stepc.grammar.format import format_source
    out = [f"# {h}" if h else "#" for h in header] + [""] + draft.tensors + [""]
    if draft.externals:
        out += draft.externals + [""]
    for stmt in draft.stmts:
        out.append(f"{call_text(stmt)}  # {stmt.note}" if stmt.note else call_text(stmt))
    if draft.assumes:
        out += ["", "# the original program's facts"] + draft.assumes
    return format_source("\n".join(out) + "\n", "<rewrite>")
