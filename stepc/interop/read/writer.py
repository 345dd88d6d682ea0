"""The state of one import: the names, types and statements written so far, shared by the
per-operator mappings (operators.py) and the program assembly (to_step.py)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from stepc.interop.read.bounds import MAX_NAME
from stepc.interop.read.reader import InteropError, Op, Port, relative_to


@dataclass
class Writer:
    path: str  # the graph file
    out_dir: str  # where the program will live (side-file paths are relative to it)
    names: dict[int, str] = field(default_factory=dict)  # op id -> stream name
    dtypes: dict[int, str] = field(default_factory=dict)  # op id -> element type
    outputs: dict[int, int] = field(default_factory=dict)  # op id -> number of outputs
    tensors: list[str] = field(default_factory=list)
    tensor_ops: dict[str, int] = field(default_factory=dict)  # tensor name -> its op's id
    streams: list[str] = field(default_factory=list)
    body: list[tuple[str, str]] = field(default_factory=list)
    taken: set[str] = field(default_factory=set)
    clashes: dict[str, int] = field(default_factory=dict)  # name -> the suffixes it took
    all_ops: list[Op] = field(default_factory=list)
    lockstep: dict[int, list[str]] = field(default_factory=dict)  # body index -> inputs
    unit_of: dict[int, int] = field(default_factory=dict)  # op id -> its body index
    by_id: dict[int, Op] = field(default_factory=dict)
    readers: dict[int, list[Op]] = field(default_factory=dict)  # op id -> the ops reading
    # it (through an input or the selector), each once, in the order of `all_ops`
    feedback: dict[str, tuple[int, str]] = field(default_factory=dict)  # stream -> (its
    # declaration in `streams`, the shape it states when known)
    partition_dims: dict = field(default_factory=dict)  # (selector, consumers) -> dim name
    ports: dict[int, list[str]] = field(default_factory=dict)  # op id -> its output names
    narrow: dict[int, str] = field(default_factory=dict)  # op id -> type a store writes it in
    unled: dict[int, int] = field(default_factory=dict)  # source id -> the Flatten of its 1

    def fresh(self, op: Op) -> str:
        base = op.name.split(" ")[0][:MAX_NAME] if op.name else f"{op.kind}_{op.id}"
        return self.unique(re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", base).lower(), op.id)

    def unique(self, base: str, op_id: int) -> str:
        """An identifier from a debug name (`xt[0].up` -> `xt_0_up`), not taken yet (a
        name taken already gets `_`, then `_2`, `_3`, ..)."""
        base = re.sub(r"\W+", "_", base.replace("]", "")).strip("_") or f"op_{op_id}"
        first = name = base if base[0].isalpha() else f"op_{base}"
        k = self.clashes.get(first, 0)
        while name in self.taken:
            k += 1
            name = f"{first}_" if k == 1 else f"{first}_{k}"
        self.clashes[first] = k
        self.taken.add(name)
        return name

    def ref(self, op: Op, port: Port) -> str:
        """The stepc expression of one input."""
        src = self.names[port.src]
        n = self.outputs.get(port.src, 0)
        if port.src in self.ports:  # several named outputs
            names = self.ports[port.src]
            if port.idx is None or port.idx >= len(names):
                raise InteropError(self.path, f"reads operator {port.src} without a valid "
                                   f"stream_idx (it has {len(names)} outputs)", op)
            return names[port.idx]
        if n:  # an array of outputs (Broadcast, Partition), even of one
            if port.idx is None or port.idx >= n:
                raise InteropError(self.path, f"reads operator {port.src} without a valid "
                                   f"stream_idx (it has {n} outputs)", op)
            return f"{src}[{port.idx}]"
        if port.idx not in (None, 0):
            raise InteropError(self.path, f"reads output {port.idx} of operator {port.src}, "
                               "which has one output", op)
        return src

    def side_file(self, npy: str) -> str:
        full = relative_to(self.path, npy)
        if not os.path.isfile(full):
            raise InteropError(self.path, f"names {npy}, which is missing (looked for {full})")
        rel = os.path.relpath(full, self.out_dir or ".")
        return os.path.abspath(full) if rel.startswith("..") else rel
