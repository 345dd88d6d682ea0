"""`stepc export` of integer counts the format cannot compute: a `Map(fn=ceildiv_int)` (KV
tile counts from KV lengths) or a `cache_write_addr` with a negative `row_offset` (the rows
of the last KV tile) becomes a MetadataGen of the values, computed here from the data its
inputs stream at export time, as the reference's own attention graphs carry such counts in
MetadataGen files.

The Map stays a Map (`x * 0 + values`, the format's cache_write_addr_gen with offset 0), so
it still waits for its input and takes its fixed cycle: the graph's timing is the program's.
Only values of data known before the run are precomputed: they must come from sources (a
traced or generated external stream, a MetadataGen) through operators that move values
(Flatten, Reshape without padding, Repeat, Parallelize, fan-out, other such Maps, and
`cache_write_addr(row_offset=0)`, whose first input only gates); the rest is refused.

A mixin of the exporter (stepc/interop/export.py).
"""

from __future__ import annotations

import numpy as np

from stepc.interop.stream_shapes import write_shape
from stepc.ops.functions import FUNCTIONS
from stepc.types import fmt_shape


def unsayable_integer_map(fn) -> bool:
    """Whether the Map of `fn` computes integers none of the format's functions compute."""
    return fn.name == "ceildiv_int" or \
        fn.name == "cache_write_addr" and dict(fn.kwargs).get("row_offset", 0) < 0


def _apply(fn, values: list[np.ndarray]) -> np.ndarray:
    return np.asarray(FUNCTIONS[fn.name].ints(values, dict(fn.kwargs)), dtype=np.int64)


class CountOps:
    """Operations of the exporter for integer counts computed from known data."""

    def precomputed(self, op, fn) -> None:
        """`op` as `Map(x, values, fn=cache_write_addr(row_offset=0))` (x * 0 + values): the
        values this node's Map computes come from a MetadataGen, and the Map still waits for
        its first input `x` and takes its one fixed cycle, so the timing is the program's."""
        shape = [int(d) for d in self.out_type().shape if str(d).isdigit()]
        if len(shape) != len(self.out_type().shape):
            self.fail(f"`{fn.name}` over a stream of shape {fmt_shape(self.out_type().shape)}"
                      ", whose length only the run knows: the format computes no such "
                      "integers, and a MetadataGen file of the values needs a static shape")
        values = _apply(fn, [self.stream_values(e) for e in self.ins]).reshape(shape)
        self.lockstep(self.ins)
        m = op.binarymap
        self.wire(m, 0, "input_id1", "stream_idx1")
        m.input_id2 = self.values_source(values, self.ones[self.node.name])
        self.dtype(m.dtype_a, 0)
        m.dtype_b.u64.SetInParent()
        self.dtype(m.dtype_out)
        m.func.cache_write_addr_gen.offset_per_idx = 0
        m.compute_bw = self.bw()

    def values_source(self, values: np.ndarray, ones: int) -> int:
        """The id of a new MetadataGen streaming `values` with `ones` leading 1s (the
        format's MetadataGen leads with one; a Flatten merges it away for none)."""
        source_id = next(self.spare_ids)
        source = self.graph.operators.add(name=f"{self.node.name}.values", id=source_id)
        self.metadata(source, values)
        source.parallel_factor = 1
        write_shape(source, values.shape, 1)
        if ones == 1:
            return source_id
        if ones:
            self.fail(f"an input with {ones} leading dims of 1 in the format's reading")
        flat_id = next(self.spare_ids)
        flat = self.graph.operators.add(name=f"{self.node.name}.values.flat", id=flat_id)
        f = flat.flatten
        f.input_id, f.min_rank, f.max_rank = source_id, values.ndim - 1, values.ndim
        f.dtype.scalar_i64.SetInParent()
        flat.parallel_factor = 1
        write_shape(flat, values.shape, 0)
        return flat_id

    def stream_values(self, edge) -> np.ndarray:
        """The values the stream of `edge` carries, in stream order (flat)."""
        p = self.typed.program
        node, ins = p.nodes[edge.src], p.in_edges(edge.src)
        fn = node.attrs.get("fn")
        if node.op == "External":
            return self.known_data(node)
        if node.op == "MetadataGen":
            return self.tensor_values(node).astype(np.int64).reshape(-1)
        if node.op == "Map" and fn.name == "cache_write_addr" and \
                not dict(fn.kwargs).get("row_offset"):
            return self.stream_values(ins[1])  # x * 0 + values: a gate on x
        if node.op == "Map" and fn.name in ("ceildiv_int", "cache_write_addr"):
            return _apply(fn, [self.stream_values(e) for e in ins])
        if node.op in ("Flatten", "Broadcast") or \
                node.op == "Reshape" and node.attrs.get("pad") is None:
            return self.stream_values(ins[0])  # the same values in the same order
        if node.op == "Repeat":  # each element `count` times
            return np.repeat(self.stream_values(ins[0]), node.attrs["count"])
        if node.op == "Parallelize":
            st = self.typed.types[(ins[0].src, ins[0].port)]
            rank = st.rank if node.attrs.get("rank") is None else node.attrs["rank"]
            size = int(np.prod([int(d) for d in st.shape[len(st.shape) - rank:]]))
            chunks = self.stream_values(ins[0]).reshape(-1, size)
            return chunks[edge.port::len(node.outputs)].reshape(-1)
        what = f"{node.op}" + (f"(fn={fn.name})" if fn is not None else "")
        self.fail(f"`{self.node.attrs['fn'].name}` over a stream computed by `{node.name}` "
                  f"({what}): the format computes no such integers, so their values go out "
                  "in a MetadataGen file computed at export, from data known before the run "
                  "only (traces, MetadataGen, moved by Flatten, Reshape, Repeat, "
                  "Parallelize)")

    def known_data(self, node) -> np.ndarray:
        """The data of the external stream `node` the counts are computed from: its trace,
        else the data the program declares for it (a file or a seeded generator, noted)."""
        name, gen = node.attrs["name"], node.attrs.get("gen") or {}
        if name not in self.traces:
            if not gen:
                self.fail(f"`{self.node.attrs['fn'].name}` over the external stream `{name}`, "
                          "whose data the program does not declare: the values go out "
                          "precomputed as a "
                          f"MetadataGen file, so pass its data: --trace {name}=LENS.npy")
            said = ", ".join(f"{k}={v}" for k, v in gen.items())
            note = (f"`{name}`: no --trace, so the counts computed from it are those of the "
                    f"program's default data ({said}); pass --trace {name}=LENS.npy for others")
            if note not in self.notes:
                self.notes.append(note)
        return np.asarray(self.external_run(node)[2], dtype=np.int64).reshape(-1)
