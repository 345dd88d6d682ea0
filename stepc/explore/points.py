"""The points of a sweep: their settings, inputs and keys.

A point is a program file, its `-D` overrides, a hardware spec (preset name or TOML path,
plus `--set` items) and trace files for external streams. Before anything runs, the
submitting process reads every input: the program with each file it imports, the traces,
the hardware configuration. Workers get those contents, never paths, so a worker in another
directory or on another machine runs exactly what was read.

A point's key holds its settings and digests of those inputs and of stepc's own code, so
`--resume` reuses a record only while the program (with its imports), the traces, the
hardware and stepc are what they were.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import itertools
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import stepc
from stepc.sim.native import MODULES as COMPILED_MODULES

RECORD_ENTRY = "stepc.explore.worker"  # the module a worker runs a point in
DATA_SUFFIXES = (".tx", ".toml")  # the grammar, hardware presets and parts


@functools.cache
def code_digest() -> str:
    """stepc's version and a digest of every package file a record depends on: the modules
    a worker imports (`record_sources`), and the grammar and hardware files. Editing a
    module only a front end or a renderer imports leaves records valid."""
    root = Path(stepc.__file__).parent
    h = hashlib.sha256()
    data = {p.relative_to(root).as_posix() for p in root.rglob("*")
            if p.suffix in DATA_SUFFIXES and "__pycache__" not in p.parts}
    for rel in sorted(record_sources(root) | data):
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return f"{stepc.__version__}+{h.hexdigest()[:12]}"


def record_sources(root: Path) -> set[str]:
    """The package's Python files (relative to `root`) a record can depend on: the modules
    `RECORD_ENTRY` imports, transitively, imports inside functions included (the root
    package's lazy names are the public API's, not a record's), and the Cython sources of
    the compiled modules the simulator loads by name."""
    seen: dict[str, Path] = {}
    todo = [RECORD_ENTRY]
    while todo:
        name = todo.pop()
        path = _module_file(root, name)
        if name in seen or path is None:
            continue
        seen[name] = path
        todo += _imported_modules(path, name)
        if name == "stepc.sim.native":
            todo += COMPILED_MODULES
        todo.append(name.rpartition(".")[0])  # importing a module runs its package's init
    return {p.relative_to(root).as_posix() for p in seen.values()}


def _module_file(root: Path, name: str) -> Path | None:
    """The file of module `name` (a `stepc.` name) under `root`, None outside stepc."""
    parts = name.split(".")
    if parts[0] != "stepc":
        return None
    base = root.joinpath(*parts[1:])
    for path in (base / "__init__.py", base.with_suffix(".py"), base.with_suffix(".pyx")):
        if path.is_file():
            return path
    return None


def _imported_modules(path: Path, name: str) -> list[str]:
    """The modules a file imports by statement (`from a import b` names a and a.b)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    text = path.read_text()
    if path.suffix == ".pyx":  # Cython: its Python imports alone
        text = "\n".join(line for line in text.splitlines()
                         if line.startswith(("import ", "from ")) and " cimport " not in line)
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            out += [base] + [f"{base}.{a.name}" for a in node.names]
    return out


def short_digest(*chunks: bytes) -> str:
    h = hashlib.sha256()
    for c in chunks:
        h.update(len(c).to_bytes(8, "little") + c)
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Point:
    program: str
    params: tuple[tuple[str, int], ...]
    hw: str
    sets: tuple[str, ...] = ()
    traces: tuple[tuple[str, str], ...] = ()
    timing_only: bool = True
    tag: str = ""  # a name for the series this point belongs to
    digests: tuple[tuple[str, str], ...] = ()  # of its inputs and of stepc (see `prepare`)
    # (name, node-name prefix): the record gets the cycle each prefix's operators finished
    milestones: tuple[tuple[str, str], ...] = ()

    def settings(self) -> dict:
        out = {"program": self.program, "params": dict(self.params), "hw": self.hw,
               "sets": list(self.sets), "traces": dict(self.traces),
               "timing_only": self.timing_only, "tag": self.tag}
        if self.milestones:
            out["milestones"] = dict(self.milestones)
        return out

    @property
    def ident(self) -> str:
        """The point's settings: the same across edits of its files."""
        return json.dumps(self.settings(), sort_keys=True)

    @property
    def key(self) -> str:
        """Settings and input digests: a record with this key ran on these very inputs."""
        return json.dumps({**self.settings(), "digests": dict(self.digests)}, sort_keys=True)

    @property
    def run_key(self) -> str:
        """The key without the series tag: points with equal run keys simulate alike."""
        return json.dumps({**self.settings(), "tag": None, "digests": dict(self.digests)},
                          sort_keys=True)


@dataclass
class Inputs:
    """What a worker needs, read by the submitting process: no worker opens a file."""
    files: dict[str, bytes] = field(default_factory=dict)  # the program and its imports
    arrays: dict = field(default_factory=dict)  # stream -> trace array
    hw: object = None  # the hardware configuration
    error: str = ""  # why an input could not be read (the point then fails without running)


def prepare(point: Point, traces: dict | None = None) -> tuple[Point, Inputs]:
    """Read a point's inputs; return the point with their digests, and the inputs.
    `traces` caches trace files shared by several points."""
    from stepc.frontend import program_files
    from stepc.hw import ConfigError, load_config
    from stepc.traces import TraceError, load_array

    traces = {} if traces is None else traces
    inputs = Inputs(files=program_files(point.program))
    digests = {"program": program_digest(inputs.files)}
    for stream, path in point.traces:
        if path not in traces:
            try:
                with open(path, "rb") as f:
                    data = f.read()
                traces[path] = (short_digest(data), load_array(path), "")
            except (OSError, TraceError) as e:
                msg = f"no such file: {path}" if isinstance(e, FileNotFoundError) else str(e)
                traces[path] = ("unreadable", None, f"trace {stream}: {msg}")
        digest, array, error = traces[path]
        digests[f"trace {stream}"] = digest
        inputs.arrays[stream] = array
        inputs.error = inputs.error or error
    try:
        inputs.hw = load_config(point.hw, point.sets)
        digests["hw"] = hw_digest(inputs.hw)
    except ConfigError as e:
        digests["hw"] = "unreadable"
        inputs.error = inputs.error or str(e)
    digests["stepc"] = code_digest()
    return replace(point, digests=tuple(sorted(digests.items()))), inputs


def program_digest(files: dict[str, bytes]) -> str:
    """The digest of a program's files (names and contents) that a point's key holds."""
    return short_digest(*(c for name in sorted(files) for c in (name.encode(), files[name])))


def hw_digest(hw) -> str:
    """The digest of a hardware configuration that a point's key holds."""
    return short_digest(hw.to_toml().encode())


def grid_points(programs: list[str], grids: dict[str, list[int]], hws: list[str],
                sets: tuple[str, ...], traces: dict[str, list[str]],
                timing_only: bool, declared: dict[str, set[str]] | None = None) -> list[Point]:
    """The cross product of programs x parameter values x hardware x traces. With
    `declared` (program -> its params), a param a program does not declare is not swept
    for it (as in `stepc tune`): that program runs once per value of the others."""
    tnames = sorted(traces)
    out = []
    for program in programs:
        names = sorted(n for n in grids if declared is None or n in declared[program])
        for values in itertools.product(*(grids[n] for n in names)):
            for hw in hws:
                for paths in itertools.product(*(traces[n] for n in tnames)):
                    out.append(Point(program, tuple(zip(names, values)), hw, tuple(sets),
                                     tuple(zip(tnames, paths)), timing_only))
    return out


def point_label(rec: dict) -> str:
    """A short readable name of a result: program, params, traces, hardware."""
    params = ", ".join(f"{k}={v}" for k, v in sorted(rec["params"].items()))
    traces = ", ".join(f"{k}={os.path.basename(v)}" for k, v in sorted(rec["traces"].items()))
    parts = [os.path.basename(rec["program"]), params, traces,
             rec["hw"] + ("+" + ",".join(rec["sets"]) if rec["sets"] else "")]
    return " ".join(p for p in parts if p)


def natural_key(text: str) -> tuple:
    """Sort key under which `B=256` comes before `B=1024` (digit runs compare as numbers)."""
    import re
    return tuple((0, int(t), "") if t.isdigit() else (1, 0, t)
                 for t in re.split(r"(\d+)", text) if t)


def point_order(rec: dict) -> tuple:
    """Sort key of records: program, then params and traces by value, then hardware."""
    return (os.path.basename(rec["program"]),
            tuple((k, natural_key(str(v))) for k, v in sorted(rec["params"].items())),
            tuple((k, natural_key(os.path.basename(v)))
                  for k, v in sorted(rec["traces"].items())),
            natural_key(rec["hw"]), tuple(rec["sets"]))
