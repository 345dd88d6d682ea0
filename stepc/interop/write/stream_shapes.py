"""The stream shapes `stepc export` writes in the newer schema's `out_stream_shape`.

The reference streams every static source with a leading dim of 1 (`(1,) + out_shape_tiled`
for a load, `(1,) + shape` for a SelectGen), which stepc's own shapes do not have. The dim
stays in front of what flows from the source until an operator that rebuilds the outer dims
drops it (a Partition's outputs start with their routed count, a Parallelize's
with their dealt count) or takes another stream's
(a Reassemble takes its selector's, a load with `ref` its reference's). Where a source's 1
would meet a stream without it (inputs read in step) or reach an operator the format says
only of streams without it (Promote, EagerMerge), the export flattens the 1 away right
after the source (`dropped_sources`). The shape written is stepc's inferred shape behind
the leading 1s: static dims as numbers, symbolic ones as their expressions.
"""

from __future__ import annotations

# operators whose output's outer dims come from the input on this port, not the first
OUTER_FROM = {"Reassemble": -1, "Expand": 1, "LinearOffChipLoad": 0, "RandomOffChipLoad": 0}
# outputs start with a count of their own
OUTER_REBUILT = ("Partition", "EagerMerge", "Parallelize")
# read their inputs in lockstep (a Zip: inside CacheReadAddrGen)
LOCKSTEP = ("Map", "Accum", "Zip", "Expand", "RandomOffChipStore")
# read inputs whose leading 1s must agree (lockstep, a selector and its data, merged chunks)
PAIRED = (*LOCKSTEP, "Partition", "EagerMerge")
# read only streams without the sources' 1: the format's Promote (Reshape's add_outer_dim)
# takes rank-0 streams, and its EagerMerge merges whole chunks of the inputs' rank
UNLED = ("Promote", "EagerMerge")
# lead with a 1 when they read no stream
SOURCES = ("LinearOffChipLoad", "External", "MetadataGen", "SelectGen")


def leading_ones(typed, dropped: frozenset = frozenset()) -> dict[str, int]:
    """Per node, the leading dims of 1 the reference's reading puts before stepc's shape of
    its outputs (as its readers read them: a source in `dropped` is read behind a Flatten
    of its 1)."""
    p = typed.program
    out: dict[str, int] = {}

    def ones(name: str, seen: frozenset) -> int:
        if name in out:
            return out[name]
        node, ins = p.nodes[name], p.in_edges(name)
        if node.op in SOURCES and not ins:
            k = 0 if name in dropped else 1
        elif node.op in OUTER_REBUILT or not ins or name in seen:
            k = 0
        elif node.op in LOCKSTEP and len(ins) > 1:  # equal once `dropped` is dropped_sources
            k = min(ones(e.src, seen | {name}) for e in ins)
        else:
            port = OUTER_FROM.get(node.op, 0)
            k = ones(ins[port].src, seen | {name})
        out[name] = k
        return k

    for name in p.nodes:
        ones(name, frozenset())
    return out


def dropped_sources(typed) -> frozenset:
    """The sources whose leading 1 is flattened away where they stream it: those whose 1
    would otherwise meet a stream without it in an operator that reads its inputs in step,
    or reach an operator the format says only of streams without it (UNLED). A Flatten right
    after a source reads back as the source without the 1 (no pipeline stage), where one
    before the reader would be a stage of its own."""
    p = typed.program
    dropped: frozenset = frozenset()
    while True:
        ones = leading_ones(typed, dropped)
        more: set[str] = set()
        for name, node in p.nodes.items():
            ins = p.in_edges(name)
            if node.op in PAIRED and len(ins) > 1:
                least = min(ones[e.src] for e in ins)
                more.update(s for e in ins if ones[e.src] > least
                            for s in _sources_of_ones(p, e.src, ones))
            if node.op in UNLED:
                more.update(s for e in ins for s in _sources_of_ones(p, e.src, ones))
        if more <= dropped:
            return dropped
        dropped = dropped | more


def _sources_of_ones(p, name: str, ones: dict[str, int]) -> set[str]:
    """The sources whose leading 1 the stream of `name` carries."""
    node, ins = p.nodes[name], p.in_edges(name)
    if not ones[name]:
        return set()
    if not ins:
        return {name}
    if node.op in LOCKSTEP and len(ins) > 1:
        return {s for e in ins for s in _sources_of_ones(p, e.src, ones)}
    return _sources_of_ones(p, ins[OUTER_FROM.get(node.op, 0)].src, ones)


def write_shape(op, dims, ones: int) -> None:
    """Fill the Operation's `out_stream_shape` with `ones` leading 1s then `dims`."""
    for d in [1] * ones + list(dims):
        entry = op.out_stream_shape.add()
        if getattr(d, "is_Integer", isinstance(d, int)):
            entry.static = int(d)
        else:
            entry.dynamic = str(d)
