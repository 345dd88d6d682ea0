"""`stepc export` of the data sources stream: the side files of the format's MetadataGen
and SelectGen, and the values a tensor or an external stream starts a run with (its trace,
else its declared file or seeded generator, as `stepc sim` uses)."""

from __future__ import annotations

import zlib

import numpy as np

from stepc.interop.write.state import NodeExport

INT_DTYPE = "u64"  # the element type of stepc's integer streams and tensors


def metadata(x: NodeExport, op, data: np.ndarray) -> None:
    """A MetadataGen streaming `data` from a side file named after the node."""
    if data.ndim == 0:
        x.fail("a single integer: the format's MetadataGen streams an array")
    file = f"{x.node.name.replace('.', '_')}.npy"
    x.export.files[file] = np.asarray(data, dtype=np.int64)
    op.metadata_gen.npy_path = file
    op.metadata_gen.dtype.scalar_i64.SetInParent()  # as the reference's graphs say it


def selectors(x: NodeExport, op, sels: list, shape: list[int], n: int) -> None:
    """A SelectGen streaming the selectors `sels` (tuples of targets) in `shape` from a
    multi-hot side file named after the node."""
    rows = np.zeros((len(sels), n), dtype=np.int64)
    for i, sel in enumerate(sels):
        rows[i, list(sel)] = 1
    file = f"{x.node.name.replace('.', '_')}.npy"
    x.export.files[file] = rows.reshape([*shape, n])
    op.select_gen.npy_path, op.select_gen.is_multihot = file, True


def tensor_values(x: NodeExport, node=None) -> np.ndarray:
    """The values the tensor (or indexed view) of `node` (default: the node being written)
    starts a run with."""
    from stepc.sim.run import initial_value
    ref = (node or x.node).attrs["tensor"]
    values = initial_value(x.typed.program.tensors[ref.name])
    return values[tuple(ref.index)] if ref.index else values


def external_run(x: NodeExport, node) -> tuple[list, dict, np.ndarray]:
    """The elements, the dims they fix and the data of the external stream `node`: its
    trace, else its declared file or seeded generator (as `stepc sim` uses)."""
    from stepc.sim.run import external_elements
    from stepc.traces import TraceError, external_file
    st = x.typed.types[(node.name, 0)]
    name, gen = node.attrs["name"], node.attrs.get("gen", {})
    try:
        arr = x.export.traces.get(name)
        if arr is None:
            arr = external_file(gen, getattr(st.elem, "n", None), len(st.shape))
        return external_elements(name, st, arr, gen, zlib.crc32(name.encode()) % 2**31)
    except TraceError as e:
        x.fail(str(e))
