"""The elaborator and the dense lowering of stepc.torch are composed objects: no class of
theirs inherits from another class of stepc (a stack of mixins hides each part's state and
methods from a type checker), and the elaborator's parts reach each other only through the
references they are given."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from stepc.grammar.parse import parse
from stepc.graph.elaborate import Elaborator
from stepc.source import SourceFile

PACKAGE = Path(__file__).resolve().parents[1] / "stepc"
COMPOSED = sorted(PACKAGE.glob("graph/*.py")) + [
    PACKAGE / "torch" / f"{name}.py" for name in ("dense", "dense_block", "layout", "rowwise")]
BASES = {"Exception", "Protocol"}  # what a class of these modules may derive from


@pytest.mark.parametrize("path", COMPOSED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_class_inherits_from_another_class_of_stepc(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef):
            bases = {ast.unparse(b) for b in node.bases}
            assert bases <= BASES, f"{path.name}: class {node.name} derives from {bases - BASES}"


def test_the_elaborators_parts_share_one_draft():
    """Every part writes into the one program under construction."""
    src = SourceFile("p.step", "tensor X : f32[4, 4] input\n"
                               "a = LinearOffChipLoad(X, tile=[1, 4])\nSink(a)\n")
    el = Elaborator(parse(src), src, {}, None, None)
    parts = (el.evaluator, el.calls, el.binder, el.declarations)
    assert all(part.draft is el.draft for part in parts)
    assert el.evaluator.calls is el.calls
    assert all(part.evaluator is el.evaluator for part in parts[1:])
    assert list(el.run().nodes) == ["a", "Sink@3"]
