"""Dynamic routing and merging operators (paper 3.2.3) plus Parallelize and Broadcast."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepc.codes import (
    BAD_ARGUMENT,
    DTYPE_MISMATCH,
    MISSING_ARGUMENT,
    RANK_MISMATCH,
    SELECTOR_MISMATCH,
)
from stepc.ops.base import STREAM, STREAMS, InferCtx, OpError, OpSpec, Param, TraceStep, stream
from stepc.sympy_lazy import dim, product, total
from stepc.types import Select, StreamType, Tile, ceil_div, equal, fmt_shape

if TYPE_CHECKING:
    import sympy
else:
    from stepc.sympy_lazy import sympy


def _selector(ctx: InferCtx, name: str, n: int, what: str) -> StreamType:
    sel: StreamType = ctx.inputs[name]
    if not isinstance(sel.elem, Select):
        raise OpError(SELECTOR_MISMATCH,
                      f"{ctx.op} expects `{name}` to be a selector stream, found "
                               f"{sel.elem}", name)
    if sel.elem.n != n:
        raise OpError(SELECTOR_MISMATCH, f"{ctx.op} has {n} {what} but its selector chooses among "
                               f"{sel.elem.n} ({sel.elem})", name)
    return sel


def _partition(ctx: InferCtx):
    st: StreamType = ctx.inputs["in"]
    p, n = ctx.attrs["rank"], ctx.attrs["consumers"]
    if n < 1:
        raise OpError(BAD_ARGUMENT, f"`consumers` must be >= 1, found {n}", "consumers")
    if not 0 <= p <= st.rank:
        raise OpError(RANK_MISMATCH, f"Partition rank must be between 0 and the input's rank "
                               f"{st.rank}, found {p}", "rank")
    sel = _selector(ctx, "sel", n, "consumers")
    outer = st.shape[: len(st.shape) - p]
    if sel.rank != len(outer) - 1:
        raise OpError(RANK_MISMATCH,
                      f"Partition at rank {p} of an input {fmt_shape(st.shape)} needs "
                               f"a selector of rank {len(outer) - 1} {fmt_shape(outer)}, found "
                               f"rank {sel.rank} {fmt_shape(sel.shape)}", "sel")
    for a, b in zip(outer, sel.shape, strict=True):
        ctx.require_equal(a, b, f"selector shape must match the input's outer dims "
                          f"{fmt_shape(outer)}", "sel")
    inner = st.shape[len(st.shape) - p:]
    outs = []
    for i in range(n):
        # The count routed to output i depends only on the selector: partitions driven by
        # the same selector stream share their symbols, so their outputs line up.
        key = ("partition", ctx.keys.get("sel"), i, ctx.attrs.get("dim"))
        sym = ctx.shared.get(key)
        if sym is None:
            sym = ctx.fresh_indexed(i, "dynamic", f"elements routed to output {i} by Partition")
            ctx.shared[key] = sym
        dims = tuple(ctx.fresh(f"{i}_r", "ragged", f"ragged dim routed to output {i}")
                     if ctx.symbols.is_ragged(d) else d for d in inner)
        outs.append(stream(st.elem, (sym,) + dims))
    return outs


def _same_inputs(ctx: InferCtx, ins: list[StreamType], name: str):
    """Check that merged inputs agree; return the merged element type. Tiles that differ
    only in a dynamic row count merge into tiles with a fresh ragged row count."""
    if not ins:
        raise OpError(MISSING_ARGUMENT,
                      f"{ctx.op} needs at least one input stream in `{name}`", name)
    first = ins[0]
    elem = first.elem
    for i, st in enumerate(ins[1:], start=1):
        if st.elem != first.elem and isinstance(st.elem, Tile) and \
                isinstance(first.elem, Tile) and st.elem.dtype == first.elem.dtype and \
                equal(st.elem.cols, first.elem.cols) is not False and \
                not (st.elem.static and first.elem.static):
            if elem == first.elem:
                elem = Tile(first.elem.dtype, ctx.fresh("rows", "ragged", "rows of the "
                                                        "merged dynamically sized tiles"),
                            first.elem.cols)
            continue
        if st.elem != first.elem:
            raise OpError(DTYPE_MISMATCH, f"{ctx.op} inputs must share an element type: input 0 is "
                                   f"{first.elem}, input {i} is {st.elem}", name, i)
        if st.rank != first.rank:
            raise OpError(RANK_MISMATCH, f"{ctx.op} inputs must share a rank: input 0 has rank "
                                   f"{first.rank}, input {i} has rank {st.rank}", name, i)
        for a, b in zip(first.shape[1:], st.shape[1:], strict=True):
            ctx.require_equal(a, b, f"{ctx.op} input {i} inner dims must match input 0 "
                              f"{fmt_shape(first.shape[1:])}", name, i)
    return elem


def _reassemble(ctx: InferCtx):
    ins: list[StreamType] = ctx.inputs["ins"]
    elem = _same_inputs(ctx, ins, "ins")
    q = ctx.attrs["rank"]
    if ins[0].rank != q:
        raise OpError(RANK_MISMATCH, f"Reassemble at rank {q} needs rank-{q} inputs (one chunk per "
                               f"selected input), found rank {ins[0].rank} "
                               f"{fmt_shape(ins[0].shape)}", "ins", 0)
    sel = _selector(ctx, "sel", len(ins), "inputs")
    n = ctx.fresh("n", "ragged", "chunks gathered per selector element by Reassemble")
    return [stream(elem, sel.shape + (n,) + ins[0].shape[1:])]


def _eager_merge(ctx: InferCtx):
    ins: list[StreamType] = ctx.inputs["ins"]
    elem = _same_inputs(ctx, ins, "ins")
    a = ctx.attrs["rank"]
    if a is not None and ins[0].rank != a:
        raise OpError(RANK_MISMATCH, f"EagerMerge at rank {a} needs rank-{a} inputs, found rank "
                               f"{ins[0].rank} {fmt_shape(ins[0].shape)}", "ins", 0)
    merged = ctx.absorb(total(st.shape[0] for st in ins), "n", "chunks merged")
    return [stream(elem, (merged,) + ins[0].shape[1:]),
            stream(Select(len(ins)), (merged,))]


def _parallelize(ctx: InferCtx):
    st: StreamType = ctx.inputs["in"]
    n = ctx.attrs["consumers"]
    p = st.rank if ctx.attrs["rank"] is None else ctx.attrs["rank"]
    if n < 1:
        raise OpError(BAD_ARGUMENT, f"`consumers` must be >= 1, found {n}", "consumers")
    if not 0 <= p <= st.rank:
        raise OpError(RANK_MISMATCH, f"Parallelize rank must be between 0 and the input's rank "
                               f"{st.rank}, found {p}", "rank")
    split = len(st.shape) - p
    chunks = ctx.absorb(product(st.shape[:split]), "n", "chunks to distribute")
    return [stream(st.elem, (ctx.absorb(ceil_div(chunks - i, n), f"{i}",
                                         f"chunks dealt to output {i}"),) + st.shape[split:])
            for i in range(n)]


def _broadcast(ctx: InferCtx):
    n = ctx.attrs["consumers"]
    if n < 1:
        raise OpError(BAD_ARGUMENT, f"`consumers` must be >= 1, found {n}", "consumers")
    return [ctx.inputs["in"]] * n


def _reassemble_onchip(c, mode):
    """Artifact accounting only: a write-back Reassemble buffers part of its output (the
    reference slices the output shape from the selector's rank - 1)."""
    if mode == "paper" or not c.attrs["write_back"]:
        return 0
    out, sel_rank = c.outputs[0], c.inputs["sel"].rank
    dims = out.shape[-1:] if sel_rank == 0 else out.shape[sel_rank - 1:]
    return product(dims) * out.elem.bytes


# ---- trace bindings: what a traced selector or traced integer values decide
def _partition_selected(outputs: list[StreamType], sel_rank: int, selection) -> list:
    """Each output's element count: how many selector elements route to it."""
    counts = selection.sum(axis=0)
    return [(st.shape[0], dim(int(counts[i]))) for i, st in enumerate(outputs)]


def _reassemble_selected(outputs: list[StreamType], sel_rank: int, selection) -> list:
    """The group size: the mean number of inputs a selector element selects."""
    if not selection.shape[0]:
        return []
    return [(outputs[0].shape[sel_rank + 1],
             sympy.Rational(int(selection.sum()), selection.shape[0]))]


def _parallelize_values(t: TraceStep) -> None:
    import numpy as np
    arr = t.ins[0]
    if not isinstance(arr, np.ndarray):
        return
    p = arr.ndim - 1 if t.attrs.get("rank") is None else t.attrs["rank"]
    chunks = arr.reshape((-1,) + arr.shape[arr.ndim - p:])
    for i in range(len(t.outputs)):
        t.values[i] = chunks[i::len(t.outputs)]


def _broadcast_values(t: TraceStep) -> None:
    for i in range(len(t.outputs)):
        t.values[i] = t.ins[0]


_SWITCH = Param("switch_cycles", "int", 1, "extra cycles per routed element", minimum=0)
_WB = Param("write_back", "bool", False, "routed elements are written to an on-chip memory unit")
_DIM = Param("dim", "str", None, "name for the dims this operator introduces")

ROUTING_OPS = [
    OpSpec(
        "Partition", "routing",
        "Partition<R,SEL,a,b>(in: Strm<R,a>, sel: Strm<SEL,b>, rank=a-b, consumers=n) -> "
        "[Strm<R,a-b>] * n",
        "Routes each rank-`rank` chunk of the input (everything up to the next stop of level "
        ">= rank) to the outputs selected by the matching multi-hot selector element. The "
        "selector's shape equals the input's outer dims; output i has shape [D_i, inner dims] "
        "with D_i a fresh dynamic-regular symbol. Partitions driven by the same selector "
        "stream share their symbols.",
        (Param("in", STREAM, doc="data stream"),
         Param("sel", STREAM, doc="multi-hot selector stream"),
         Param("rank", "int", doc="chunk rank (the output rank)"),
         Param("consumers", "int", doc="number of outputs"),
         _SWITCH, _WB, _DIM),
        _partition,
        outputs=lambda attrs: [f"out{i}" for i in range(max(0, attrs.get("consumers") or 0))],
        indexed_outputs=True,
        trace_selected=_partition_selected,
    ),
    OpSpec(
        "Reassemble", "routing",
        "Reassemble<R,SEL,a,b>(ins: [Strm<R,a>], sel: Strm<SEL,b>, rank=a) -> Strm<R,a+b+1>",
        "For each selector element, copies one rank-`rank` chunk from each selected input (in "
        "order of availability, never interleaving chunks) and closes the group with a new "
        "stop level. Output: selector shape ++ [n] ++ the inputs' inner dims, where n (chunks "
        "per selector element) is a fresh ragged symbol; `assume` can equate it with a known "
        "shape.",
        (Param("ins", STREAMS, doc="list of input streams (same rank and element type)"),
         Param("sel", STREAM, doc="multi-hot selector stream"),
         Param("rank", "int", doc="the inputs' rank (chunk rank)"),
         _SWITCH, _WB, _DIM),
        _reassemble,
        on_chip=_reassemble_onchip,
        trace_selected=_reassemble_selected,
    ),
    OpSpec(
        "EagerMerge", "routing",
        "EagerMerge<R,a>(ins: [Strm<R,a>]) -> Strm<R,a>, Strm<MultiHot<n>,0>",
        "Merges rank-`rank` chunks from its inputs in arrival order. Outputs the data stream "
        "[sum_i D_i, inner dims] and a one-hot selector stream [sum_i D_i] naming the input "
        "each chunk came from.",
        (Param("ins", STREAMS, doc="list of input streams"),
         Param("rank", "int", None, "chunk rank (defaults to the inputs' rank)"),
         _DIM),
        _eager_merge,
        outputs=lambda attrs: ["data", "sel"],
    ),
    OpSpec(
        "Parallelize", "routing",
        "Parallelize<R,a>(in: Strm<R,a>, consumers=P, rank=p) -> [Strm<R,p>] * P",
        "Deals rank-`rank` chunks round-robin to `consumers` outputs (chunk j goes to output "
        "j mod P). Output i has ceil((N - i)/P) chunks, N being the number of chunks.",
        (Param("in", STREAM, doc="data stream"),
         Param("consumers", "int", doc="number of outputs"),
         Param("rank", "int", None, "chunk rank (defaults to the input's rank)"),
         _SWITCH, _DIM),
        _parallelize,
        outputs=lambda attrs: [f"out{i}" for i in range(max(0, attrs.get("consumers") or 0))],
        indexed_outputs=True,
        trace_values=_parallelize_values,
    ),
    OpSpec(
        "Broadcast", "routing",
        "Broadcast<R,a>(in: Strm<R,a>, consumers=n) -> [Strm<R,a>] * n",
        "Copies every element to `consumers` identical outputs. stepc inserts one wherever a "
        "stream has several consumers; writing it explicitly is also allowed.",
        (Param("in", STREAM, doc="data stream"),
         Param("consumers", "int", doc="number of copies")),
        _broadcast,
        outputs=lambda attrs: [f"out{i}" for i in range(max(0, attrs.get("consumers") or 0))],
        fan_out=True,
        indexed_outputs=True,
        trace_values=_broadcast_values,
    ),
]
