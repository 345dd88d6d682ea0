"""The stream shapes `stepc export` writes in the newer schema's `out_stream_shape`.

The reference streams every static source with a leading dim of 1 (`(1,) + out_shape_tiled`
for a load, `(1,) + shape` for a SelectGen), which stepc's own shapes do not have. The dim
stays in front of what flows from the source until an operator that rebuilds the outer dims
drops it (a Partition's outputs start with their routed count, a Parallelize's
with their dealt count) or takes another stream's
(a Reassemble takes its selector's, a load with `ref` its reference's). Inputs read in
lockstep with and without the 1 are paired behind a Flatten of it. The shape written
is stepc's inferred shape behind those leading 1s: static dims as numbers, symbolic ones
as their expressions.
"""

from __future__ import annotations

# operators whose output's outer dims come from the input on this port, not the first
OUTER_FROM = {"Reassemble": -1, "Expand": 1, "LinearOffChipLoad": 0, "RandomOffChipLoad": 0}
# outputs start with a count of their own
OUTER_REBUILT = ("Partition", "EagerMerge", "Parallelize")
# read their inputs in lockstep (a Zip: inside CacheReadAddrGen)
LOCKSTEP = ("Map", "Accum", "Zip", "Expand", "RandomOffChipStore")
# lead with a 1 when they read no stream
SOURCES = ("LinearOffChipLoad", "External", "MetadataGen", "SelectGen")


def leading_ones(typed) -> dict[str, int]:
    """Per node, the leading dims of 1 the reference's reading puts before stepc's shape of
    its outputs."""
    p = typed.program
    out: dict[str, int] = {}

    def ones(name: str, seen: frozenset) -> int:
        if name in out:
            return out[name]
        node, ins = p.nodes[name], p.in_edges(name)
        if node.op in SOURCES and not ins:
            k = 1
        elif node.op in OUTER_REBUILT or not ins or name in seen:
            k = 0
        elif node.op in LOCKSTEP and len(ins) > 1:  # paired behind a Flatten of the 1
            k = min(ones(e.src, seen | {name}) for e in ins)
        else:
            port = OUTER_FROM.get(node.op, 0)
            k = ones(ins[port].src, seen | {name})
        out[name] = k
        return k

    for name in p.nodes:
        ones(name, frozenset())
    return out


def write_shape(op, dims, ones: int) -> None:
    """Fill the Operation's `out_stream_shape` with `ones` leading 1s then `dims`."""
    for d in [1] * ones + list(dims):
        entry = op.out_stream_shape.add()
        if getattr(d, "is_Integer", isinstance(d, int)):
            entry.static = int(d)
        else:
            entry.dynamic = str(d)
