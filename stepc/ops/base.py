"""The operator record (`OpSpec`), its parameters, and the context a shape rule runs in.

An operator is one `OpSpec`: its parameters (stream inputs and compile-time attributes, in
positional order), its output ports, its type and shape rule (`infer`), a paper-style
signature and a one-paragraph doc. Each operator's worked example is the program
`stepc/ops/examples/<Name>.step`. Everything else in stepc (elaboration,
checking, docs) reads these records from the `OPS` registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from stepc.codes import RANK_MISMATCH, SHAPE_MISMATCH, UNPROVEN_EQUALITY, WRONG_ELEMENT_KIND
from stepc.source import Span
from stepc.sympy_lazy import dim
from stepc.types import (
    ElemType,
    StreamType,
    SymbolTable,
    Tile,
    elem_kind,
    equal,
    fmt_dim,
    fmt_shape,
)

if TYPE_CHECKING:
    import sympy

REQUIRED = object()

# Parameter kinds. Stream kinds are graph inputs; the rest are compile-time attributes.
STREAM, STREAMS, VARSTREAMS = "stream", "streams", "varstreams"


@dataclass(frozen=True)
class Param:
    """One operator parameter: a stream input or a compile-time attribute."""

    name: str
    kind: str
    default: Any = REQUIRED
    doc: str = ""
    hw: str | None = None  # the hardware key ("fabric.compute_bw") an unset value takes
    minimum: int | None = None  # smallest allowed integer value

    @property
    def is_stream(self) -> bool:
        return self.kind in (STREAM, STREAMS, VARSTREAMS)

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


# Attributes every operator accepts (hardware knobs that do not change types).
COMMON_PARAMS = (
    Param("depth", "int_or_ints", None, "FIFO depth of the inputs (one value, or one per input)",
          hw="fabric.fifo_depth", minimum=1),
)


@dataclass(frozen=True)
class TensorRef:
    """An off-chip tensor, or a slice `W[i]` of one, as an operator attribute."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    index: tuple[int, ...]
    span: Span | None

    def __str__(self) -> str:
        return self.name + "".join(f"[{i}]" for i in self.index)


@dataclass(frozen=True)
class FnValue:
    """A function argument of a higher-order operator: `matmul(transpose=true)`."""

    name: str
    kwargs: tuple[tuple[str, Any], ...]
    span: Span | None

    def get(self, key: str, default=None):
        """The argument `key` (the last one given, as a dict of them would hold)."""
        for k, v in reversed(self.kwargs):
            if k == key:
                return v
        return default

    def __str__(self) -> str:
        if not self.kwargs:
            return self.name
        args = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in self.kwargs)
        return f"{self.name}({args})"


def _fmt_attr(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt_attr(x) for x in v) + "]"
    if isinstance(v, str):
        return f'"{v}"'
    return str(v)


fmt_attr = _fmt_attr


class OpError(Exception):
    """A type or shape error found by a rule; `arg` names the offending parameter."""

    def __init__(self, code: str, message: str, arg: str | None = None,
                 index: int | None = None, notes: tuple = ()):
        super().__init__(message)
        self.code, self.message, self.arg, self.index, self.notes = code, message, arg, index, notes


@dataclass
class InferCtx:
    """What a shape rule sees: input stream types, attribute values, and symbol services."""

    node: str
    op: str
    inputs: dict[str, Any]  # param name -> StreamType, or list of StreamType for STREAMS
    attrs: dict[str, Any]
    symbols: SymbolTable
    span: Span | None
    warnings: list[OpError] = field(default_factory=list)
    shared: dict = field(default_factory=dict)  # program-wide memo (shared partition symbols)
    keys: dict[str, Any] = field(default_factory=dict)  # identity of each input's source stream

    # ---- symbol services
    @property
    def prefix(self) -> str:
        """Base name of the symbols this node introduces: `dim="D"`, else the node's name."""
        return self.attrs.get("dim") or sanitize(self.node)

    def fresh(self, tag: str, kind: str, reason: str) -> sympy.Symbol:
        """A new symbol `<dim>` (if the user named it) or `<node>_<tag>`."""
        name = self.attrs.get("dim") or f"{sanitize(self.node)}_{tag}"
        return self.symbols.fresh(name, kind, self.node, self.span, reason)

    def fresh_indexed(self, i: int, kind: str, reason: str) -> sympy.Symbol:
        """A new per-output symbol `<prefix>_<i>`."""
        return self.symbols.fresh(f"{self.prefix}_{i}", kind, self.node, self.span, reason)

    def absorb(self, expr, tag: str, reason: str):
        """The absorbing rule: an expression over a ragged dim becomes a fresh ragged dim."""
        expr = dim(expr)
        if self.symbols.is_ragged(expr) and not expr.is_Symbol:
            return self.fresh(tag, "ragged", reason)
        return expr

    # ---- checks
    def require_equal(self, a, b, what: str, arg: str | None, index: int | None = None,
                      code: str = SHAPE_MISMATCH) -> None:
        """Error if a == b is refuted, warning if sympy cannot decide."""
        verdict = equal(a, b)
        if verdict is False:
            raise OpError(code, f"{what}: expected {fmt_dim(a)}, found {fmt_dim(b)}", arg, index)
        if verdict is None:
            self.warnings.append(OpError(
                UNPROVEN_EQUALITY, f"{what}: cannot prove {fmt_dim(a)} equals {fmt_dim(b)}", arg,
                index))

    def require_shapes_equal(self, a: StreamType, b: StreamType, what: str, arg: str,
                             index: int | None = None) -> None:
        if a.rank != b.rank:
            raise OpError(RANK_MISMATCH, f"{what}: expected rank {a.rank} {fmt_shape(a.shape)}, "
                                   f"found rank {b.rank} {fmt_shape(b.shape)}", arg, index)
        verdicts = [equal(da, db) for da, db in zip(a.shape, b.shape, strict=True)]
        if False in verdicts:
            raise OpError(SHAPE_MISMATCH, f"{what}: expected shape {fmt_shape(a.shape)}, "
                                   f"found {fmt_shape(b.shape)}", arg, index)
        if None in verdicts:
            self.warnings.append(OpError(
                UNPROVEN_EQUALITY, f"{what}: cannot prove shape {fmt_shape(b.shape)} equals "
                         f"{fmt_shape(a.shape)}", arg, index))


def sanitize(name: str) -> str:
    """An identifier-like form of a node name: `rows[3].up` -> `rows_3_up`."""
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    while "__" in out:
        out = out.replace("__", "_")
    return out.strip("_") or "D"


def require_tile(ctx: InferCtx, name: str, static: bool = False, index: int | None = None,
                 st: StreamType | None = None) -> Tile:
    """The input's element must be a tile (a static one if `static`)."""
    st = st if st is not None else ctx.inputs[name]
    if not isinstance(st.elem, Tile):
        raise OpError(WRONG_ELEMENT_KIND, f"{ctx.op} expects a stream of tiles for `{name}`, "
                               f"found a stream of {elem_kind(st.elem)}s ({st.elem})", name, index)
    if static and not st.elem.static:
        raise OpError(WRONG_ELEMENT_KIND, f"{ctx.op} expects statically sized tiles for `{name}`, "
                               f"found {st.elem}", name, index)
    return st.elem


@dataclass(frozen=True)
class CostCtx:
    """What a cost formula sees: the node's typed inputs and outputs and its attributes."""

    node: str
    inputs: dict[str, Any]  # param name -> StreamType, or list of StreamType
    outputs: list[StreamType]
    attrs: dict[str, Any]

    def first_input(self) -> StreamType | None:
        for v in self.inputs.values():
            if isinstance(v, list):
                if v:
                    return v[0]
            elif v is not None:
                return v
        return None


ONCHIP_MODES = ("paper", "artifact")
LOAD, STORE = "load", "store"


@dataclass(frozen=True)
class Memory:
    """An operator's memory role: the direction it moves data and the memory it uses."""

    direction: str  # LOAD | STORE
    off_chip: bool  # HBM (True) or the fabric's on-chip memory


@dataclass
class TraceStep:
    """What a `trace_values` hook sees: the node's attributes, the traced values of its
    inputs (None where unknown), its output types; it sets `values` (output port -> value)
    or adds to `bindings` (dim name -> value)."""

    attrs: dict[str, Any]
    ins: list
    outputs: list
    values: dict[int, Any] = field(default_factory=dict)
    bindings: dict[str, sympy.Expr] = field(default_factory=dict)


def _zero(ctx: CostCtx, *mode) -> sympy.Expr:
    return dim(0)


@dataclass(frozen=True)
class OpSpec:
    """One STeP operator: signature, parameters, outputs, type/shape rule, cost formulas, docs.

    Cost formulas return sympy expressions over the program's symbolic dims:
    `off_chip(ctx)` bytes moved between HBM and the fabric; `on_chip(ctx, mode)` bytes of
    on-chip memory, for `mode` "paper" (the equations of the paper's Section 4.2) or
    "artifact" (the single-buffered accounting behind the paper's evaluation figures);
    `flops(ctx)` arithmetic operations.
    """

    name: str
    family: str
    signature: str
    doc: str
    params: tuple[Param, ...]
    infer: Callable[[InferCtx], list[StreamType]]
    outputs: Callable[[dict], list[str]] = field(default=lambda attrs: ["out"])
    off_chip: Callable[[CostCtx], sympy.Expr] = _zero
    on_chip: Callable[[CostCtx, str], sympy.Expr] = _zero
    flops: Callable[[CostCtx], sympy.Expr] = _zero
    # ---- roles: what several floors ask of an operator, instead of its name (a role one
    # floor alone asks about is in that floor's own table, keyed by operator name)
    memory: Memory | None = None  # the memory it loads from or stores to
    fn_use: str | None = None  # the use ("map", "accum", ...) its `fn` is called in
    external: bool = False  # an external stream: declared `stream N : T = external(..)`,
    # not called; its data is a trace or a file
    fan_out: bool = False  # copies every input element to each of its outputs
    indexed_outputs: bool = False  # its outputs form an array (`p[i]`), one per consumer
    trace_values: Callable[[TraceStep], None] | None = None  # carries traced integer
    # values (KV lengths) from its inputs to its outputs, or binds the dims they decide
    trace_selected: Callable[[list, int, Any], list] | None = None  # (its output types,
    # the selector's rank, the [elements, n] selection matrix) -> [(dim, value)] it binds

    @cached_property  # read for every operator call and type rule: built once
    def all_params(self) -> tuple[Param, ...]:
        return self.params + COMMON_PARAMS

    def param(self, name: str) -> Param | None:
        return next((p for p in self.all_params if p.name == name), None)

    @cached_property
    def hw_params(self) -> tuple[Param, ...]:
        """The attributes that mirror a hardware key."""
        return tuple(p for p in self.all_params if p.hw is not None)

    @cached_property
    def stream_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.is_stream)


def stream(elem: ElemType, shape) -> StreamType:
    return StreamType(elem, tuple(dim(d) for d in shape))
