"""The on-chip bytes of a program's FIFOs at their depths: each stream's consumer `depth=`
(one value, or one per input), else the hardware's `fabric.fifo_depth`, times the bytes of
its element."""

from __future__ import annotations

import sympy

from stepc.typecheck.checker import TypedProgram


def input_depths(node, preset: int) -> list[int]:
    """Each stream input's depth: the call's `depth=` (one value or one per input), else
    the hardware's."""
    depth = node.attrs.get("depth")
    inputs = len(node.inputs)
    if isinstance(depth, list):
        return [depth[i] if i < len(depth) and depth[i] else preset for i in range(inputs)]
    return [depth or preset] * inputs


def fifo_bytes(typed: TypedProgram, hw, bindings: dict | None = None) -> sympy.Expr:
    """Bytes of every FIFO at its depth: a number once `bindings` (dim name -> value) fix
    every dim, else an expression in the dims left."""
    named = {k: sympy.sympify(v) for k, v in (bindings or {}).items()}
    total = sympy.Integer(0)
    for e in typed.program.edges:
        st = typed.types.get((e.src, e.port))
        size = getattr(getattr(st, "elem", None), "bytes", None)
        if size is None:
            continue
        depth = input_depths(typed.program.nodes[e.dst], hw.fabric.fifo_depth)[e.slot]
        total += depth * sympy.sympify(size)
    return total.xreplace({s: named[s.name] for s in total.free_symbols if s.name in named})
