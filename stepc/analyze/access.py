"""Where an operator's bytes go on chip: the bytes its input streams carry to it through
the fabric, the bytes it writes into and reads from an on-chip memory, the size of that
memory, and the element type its arithmetic works on. The energy model prices these.

The rule, from the operator's memory role (`OpSpec.memory`):

- an off-chip load or store stages every tile it moves in its tile buffers: each
  off-chip byte is written into on-chip memory once and read out once;
- `Bufferize` (an on-chip store) writes the bytes it takes in into its buffer;
  `Streamify` (an on-chip load) reads the bytes it gives out from the buffer it streams;
- any other operator that allocates on-chip memory (an accumulator, a reassembly buffer)
  writes the bytes it takes in and reads the bytes it gives out;
- every other operator works on its input FIFOs alone (no on-chip memory access).

A stream element's bytes in the fabric are its tile's bytes; a buffer travels as a
reference of `REFERENCE_BYTES`, not as its contents. An operator multiplies its input
tiles' element type and adds (accumulates) in its output tiles' (a bf16 matmul into f32).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import sympy

from stepc.ops.base import LOAD, CostCtx, OpSpec
from stepc.types import DTYPE_BYTES, Buffer, Tile, Tuple

REFERENCE_BYTES = DTYPE_BYTES["u64"]  # a buffer reference in a stream: one address


@dataclass(frozen=True)
class AccessSource:
    """What an operator's `Access` is computed from, when first asked (most analyses never
    ask): its record, its typed context, its symbolic off- and on-chip bytes, and the
    binding applied since (None: none)."""

    spec: OpSpec
    ctx: CostCtx
    off_chip: sympy.Expr
    on_chip: sympy.Expr
    bound: Callable[[sympy.Expr], sympy.Expr] | None = None
    # the unbound Access once computed, shared by every binding of the same operator
    symbolic: dict = field(default_factory=dict, compare=False, repr=False)

    def access(self) -> Access:
        a = self.symbolic.get("access")
        if a is None:
            a = self.symbolic["access"] = access(self.spec, self.ctx, self.off_chip,
                                                 self.on_chip)
        ev = self.bound
        if ev is None:
            return a
        return Access(ev(a.streamed), ev(a.sram_write), ev(a.sram_read), ev(a.sram_size),
                      a.dtype, a.in_dtype)

    def then(self, ev: Callable[[sympy.Expr], sympy.Expr]) -> AccessSource:
        """This source with the binding `ev` applied after the ones before it."""
        before = self.bound
        return replace(self, bound=ev if before is None else (lambda e: ev(before(e))))


@dataclass(frozen=True)
class Access:
    """One operator's on-chip bytes (sympy expressions in the program's dims)."""

    streamed: sympy.Expr  # bytes its input streams deliver to it
    sram_write: sympy.Expr
    sram_read: sympy.Expr
    sram_size: sympy.Expr  # bytes of the memory it reads and writes (0: none)
    dtype: str  # the element type of its output tiles (else its input's; "": none)
    in_dtype: str  # the element type of its input tiles (else its output's)


def add_all(terms: list) -> sympy.Expr:
    """The sum of `terms`, in Python integers when every one is an integer."""
    if all(t.is_Integer for t in terms):
        return sympy.Integer(sum(int(t) for t in terms))
    return sympy.Add(*terms)


@functools.lru_cache(maxsize=4096)
def element_bytes(elem) -> sympy.Expr:
    """Bytes one stream element moves through the fabric."""
    if isinstance(elem, Buffer):
        return sympy.Integer(REFERENCE_BYTES)
    if isinstance(elem, Tuple):
        return add_all([element_bytes(e) for e in elem.elems])
    return sympy.sympify(elem.bytes)


def stream_bytes(types) -> sympy.Expr:
    """Bytes the streams `types` (a StreamType, a list of them or None) carry in all."""
    if types is None:
        return sympy.Integer(0)
    if isinstance(types, list):
        return add_all([stream_bytes(t) for t in types])
    card, size = types.card, element_bytes(types.elem)
    if card.is_Integer and size.is_Integer:  # most streams: skip sympy's Mul
        return sympy.Integer(int(card) * int(size))
    return card * size


def _tile_dtype(types) -> str:
    """The element type of the first tile the streams `types` carry ("" without one)."""
    for t in types:
        elem = getattr(t, "elem", None)
        for e in (elem.elems if isinstance(elem, Tuple) else (elem,)):
            if isinstance(e, Tile):
                return e.dtype
            if isinstance(e, Buffer):
                return e.tile.dtype
    return ""


def access(spec: OpSpec, ctx: CostCtx, off_chip: sympy.Expr, on_chip: sympy.Expr) -> Access:
    """The on-chip bytes of one operator instance (see the module's rule)."""
    zero = sympy.Integer(0)
    streamed = add_all([stream_bytes(t) for t in ctx.inputs.values()])
    given = add_all([stream_bytes(t) for t in ctx.outputs])
    role = spec.memory
    if role is not None and role.off_chip:
        write = read = off_chip
        size = on_chip
    elif role is not None and role.direction == LOAD:  # Streamify reads its buffers
        write, read = zero, given
        size = sympy.sympify(ctx.inputs["in"].elem.bytes)
    elif role is not None:  # Bufferize fills its buffers
        write, read = streamed, zero
        size = sympy.sympify(ctx.outputs[0].elem.bytes)
    elif on_chip != 0:
        write, read, size = streamed, given, on_chip
    else:
        write = read = size = zero
    ins, outs = _tile_dtype([ctx.first_input()]), _tile_dtype(ctx.outputs)
    return Access(streamed, write, read, size, outs or ins, ins or outs)
