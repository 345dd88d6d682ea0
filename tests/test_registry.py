"""The operator registry is the one place that knows operators: no module outside
`stepc/ops/` decides behaviour by an operator's name (a floor's own table of what it needs
of each operator registers names, it does not test them), and one `OpSpec` record plus a
simulator behavior is enough for a new operator to parse, check, analyze and simulate (the
checklist of CONTRIBUTING.md, walked through with a toy operator)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import sympy

from stepc.analyze import analyze
from stepc.fifo.static import EAGER_INPUTS
from stepc.frontend import compile_source
from stepc.hw import load_config
from stepc.ops import OPS
from stepc.ops.base import STREAM, OpSpec, Param, require_tile
from stepc.rewrite.passing import CHUNK_OUTPUTS, INNER_DIMS, REPEATS
from stepc.sim.behaviors import BEHAVIORS, behavior
from stepc.sim.data import TENSOR_READERS
from stepc.sim.kernel import RECV, SEND
from stepc.sim.run import simulate
from stepc.sim.tokens import TileVal
from stepc.source import SourceFile

STEPC = Path(__file__).resolve().parent.parent / "stepc"

# Operator names that may appear outside stepc/ops/, each with why it is not a decision by
# name: (path under stepc/, operator) -> reason.
ALLOWED = {
    ("graph/declarations.py", "External"): "builds the node a `stream ... = external()` "
                                        "declaration means",
    ("graph/wiring.py", "Broadcast"): "builds the fan-out node stepc inserts",
    ("rewrite/products.py", "Bufferize"): "builds the appendix's hierarchical-tiling subgraph",
    ("rewrite/products.py", "Repeat"): "builds the appendix's hierarchical-tiling subgraph",
    ("rewrite/products.py", "Streamify"): "builds the appendix's hierarchical-tiling subgraph",
    ("rewrite/products.py", "Map"): "builds the appendix's hierarchical-tiling subgraph",
    ("rewrite/products.py", "Flatten"): "builds the appendix's hierarchical-tiling subgraph",
    ("rewrite/subtiles.py", "Accum"): "splits and packs logical tiles on chip",
    ("rewrite/subtiles.py", "FlatMap"): "splits logical tiles into sub-tiles on chip",
    ("rewrite/subtiles.py", "Reshape"): "splits logical tiles into sub-tiles on chip",
    ("rewrite/subtiles.py", "Promote"): "splits logical tiles into sub-tiles on chip",
}
# The reference format's own message names, and the translation of stepc's operators into
# it (a printer for a foreign format names each operator it prints, as the import's handler
# table names each of the format's operations)
FOREIGN_FORMATS = ("interop/schema.py", "interop/write/")


def registrations(tree: ast.Module) -> set[int]:
    """The ids of the string literals a module registers operators by: the arguments of its
    decorators (`@behavior("Map")`) and the keys of the dict and set literals it assigns to
    module-level names (`PASSING = {"Map": ...}`)."""
    names: list[ast.expr] = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            names += [a for d in stmt.decorator_list if isinstance(d, ast.Call) for a in d.args]
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Dict):
            names += [k for k in value.keys if k is not None]
        elif isinstance(value, ast.Set):
            names += value.elts
    return {id(n) for n in names}


def operator_names_outside_ops() -> list[tuple[str, int, str]]:
    """(path, line, operator) of every string literal equal to an operator name in stepc/,
    outside stepc/ops/, the foreign formats, the allowed sites and registrations."""
    hits = []
    for path in sorted(STEPC.rglob("*.py")):
        rel = path.relative_to(STEPC).as_posix()
        if rel.startswith(("ops/", *FOREIGN_FORMATS)):
            continue
        text = path.read_text(encoding="utf-8")
        if not any(name in text for name in OPS):  # parse only files that could match
            continue
        tree = ast.parse(text)
        registered = registrations(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in OPS \
                    and (rel, node.value) not in ALLOWED and id(node) not in registered:
                hits.append((rel, node.lineno, node.value))
    return hits


def test_no_module_outside_ops_names_an_operator():
    assert operator_names_outside_ops() == []


def test_the_scan_finds_a_name_test(tmp_path, monkeypatch):
    """The scan is not vacuous: a comparison against an operator name is found."""
    fake = tmp_path / "stepc"
    (fake / "sim").mkdir(parents=True)
    (fake / "sim" / "x.py").write_text('def f(node):\n    return node.op == "Bufferize"\n')
    monkeypatch.setitem(globals(), "STEPC", fake)
    assert operator_names_outside_ops() == [("sim/x.py", 2, "Bufferize")]


def test_the_scan_passes_registrations_and_only_them(tmp_path, monkeypatch):
    """A decorator's argument and a module-level table's key register a name; the same name
    tested in a function, or keyed in a function's table, is still found."""
    fake = tmp_path / "stepc"
    (fake / "sim").mkdir(parents=True)
    (fake / "sim" / "x.py").write_text(
        '@behavior("Map")\ndef f(node):\n    return {"Accum": 1}.get(node.op)\n\n'
        'ROLE = {"Scan": 1}\nSEEN = {"FlatMap"}\n')
    monkeypatch.setitem(globals(), "STEPC", fake)
    assert operator_names_outside_ops() == [("sim/x.py", 3, "Accum")]


def test_roles():
    off_chip = {n for n, s in OPS.items() if s.memory and s.memory.off_chip}
    assert off_chip == {"LinearOffChipLoad", "LinearOffChipStore", "RandomOffChipLoad",
                        "RandomOffChipStore"}
    assert {n: s.memory.direction for n, s in OPS.items() if s.memory and
            not s.memory.off_chip} == {"Bufferize": "store", "Streamify": "load"}
    assert {n: s.fn_use for n, s in OPS.items() if s.fn_use} == {
        "Map": "map", "Accum": "accum", "Scan": "scan", "FlatMap": "flatmap"}
    assert [n for n, s in OPS.items() if s.external] == ["External"]
    # every operator that takes a `fn` says which use it calls it in
    assert all(s.fn_use for s in OPS.values() if s.param("fn"))


# The tables a floor keeps of what it alone needs of operators (CONTRIBUTING.md)
FLOOR_TABLES = {
    "simulator behaviors": BEHAVIORS, "simulator tensor readers": TENSOR_READERS,
    "FIFO analysis eager inputs": EAGER_INPUTS, "downtile inner dims": INNER_DIMS,
    "downtile chunk outputs": CHUNK_OUTPUTS, "downtile repeats": REPEATS,
}


@pytest.mark.parametrize("table", FLOOR_TABLES)
def test_every_key_of_a_floors_table_names_an_operator(table):
    assert sorted(set(FLOOR_TABLES[table]) - set(OPS)) == []


def test_the_floors_tables_name_their_operators_attributes_and_outputs():
    """What a table names of an operator (a dim attribute, a tensor attribute, an output)
    is the operator's."""
    named = [(op, key) for op, keys in INNER_DIMS.items() for key in keys]
    named += [(op, key) for op, key in TENSOR_READERS.items()]
    assert [(op, key) for op, key in named if OPS[op].param(key) is None] == []
    assert [(op, outs) for op, outs in CHUNK_OUTPUTS.items()
            if not set(outs) <= set(OPS[op].outputs({"consumers": 2}))] == []


# ---- adding an operator: the CONTRIBUTING.md checklist with a toy `Scale`
def _scale_infer(ctx):
    require_tile(ctx, "in")
    return [ctx.inputs["in"]]


def _scale(ctx, node, ins, outs, env, info):
    """Multiply every tile by `factor`."""
    src, out, factor = ins["in"], outs[0], node.attrs["factor"]
    while True:
        head = yield (RECV, src)
        if head is None:
            return
        _, val, stop = head
        data = None if val.data is None else val.data * factor
        if out is not None:
            yield (SEND, out, TileVal(val.rows, val.cols, val.dtype, val.valid, data=data), stop)


SCALE = OpSpec(
    "Scale", "shape",
    "Scale<S,a>(in: Strm<S,a>, factor) -> Strm<S,a>",
    "Multiplies every tile by `factor` (a toy operator of the tests).",
    (Param("in", STREAM, doc="tiles"), Param("factor", "int", 2, "the multiplier")),
    _scale_infer,
    flops=lambda c: c.outputs[0].card * c.outputs[0].elem.rows * c.outputs[0].elem.cols,
)

PROGRAM = """\
tensor X : f32[4, 8] input = random(seed=1)
tensor Y : f32[4, 8] output
x = LinearOffChipLoad(X, tile=[1, 8])
y = Scale(x, factor=3)
LinearOffChipStore(y, Y)
"""


@pytest.fixture
def scale_registered(monkeypatch):
    monkeypatch.setitem(OPS, "Scale", SCALE)
    behavior("Scale")(_scale)
    yield
    del BEHAVIORS["Scale"]


def test_one_record_makes_an_operator_parse_check_analyze_and_simulate(scale_registered):
    compiled = compile_source(SourceFile("scale.step", PROGRAM))
    assert not compiled.diagnostics.errors, compiled.diagnostics.items
    typed = compiled.typed
    assert analyze(typed).totals["flops"] == sympy.Integer(4 * 8)
    run = simulate(typed, load_config(), functional=True)
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(run.outputs["Y"], 3 * x, rtol=1e-6)


def test_an_unregistered_operator_is_refused():
    compiled = compile_source(SourceFile("scale.step", PROGRAM))
    assert [d.code for d in compiled.diagnostics.errors] == ["E0102"]
