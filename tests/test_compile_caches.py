"""The front end's caches keep results exact: a file's syntax tree is reused only for the
same name and text, a printed dim only for the same value of the same type, and a program
compiles to the same types whether the caches are cold or warm."""

from __future__ import annotations

import sympy

from stepc.api.program import check_text
from stepc.grammar import parse as parse_module
from stepc.grammar.parse import parse
from stepc.source import SourceFile
from stepc.types import fmt_dim

PROGRAM = """param N = {n}
tensor X : bf16[N, 64] input = random(seed=1)
tensor Y : bf16[N, 64] output
LinearOffChipStore(LinearOffChipLoad(X, tile=[1, 64]), Y)
"""


def test_a_syntax_tree_is_reused_only_for_the_same_name_and_text():
    first = parse(SourceFile("a.step", PROGRAM.format(n=4)))
    assert parse(SourceFile("a.step", PROGRAM.format(n=4))) is first
    edited = parse(SourceFile("a.step", PROGRAM.format(n=8)))
    assert edited is not first and edited.statements[0].value.value == 8
    renamed = parse(SourceFile("b.step", PROGRAM.format(n=4)))
    assert renamed is not first and renamed.statements[0].span.file == "b.step"
    assert check_text(PROGRAM.format(n=4), "a.step").to_dict()["streams"][0]["shape"] == [4, 1]
    assert check_text(PROGRAM.format(n=8), "a.step").to_dict()["streams"][0]["shape"] == [8, 1]


def test_the_cache_of_syntax_trees_is_bounded():
    for i in range(parse_module.PARSED_FILES + 5):
        parse(SourceFile(f"bound{i}.step", f"param N = {i}\n"))
    assert len(parse_module._PARSED) == parse_module.PARSED_FILES


def test_printed_dims_depend_on_value_and_type():
    n = sympy.Symbol("n", integer=True, nonnegative=True)
    assert fmt_dim(2) == "2"
    assert fmt_dim(2.0) == "2.0"  # equal to 2 and hashed alike, printed otherwise
    assert fmt_dim(sympy.Integer(2)) == "2"
    assert fmt_dim(sympy.ceiling(n / 4)) == "ceil(n/4)"
    assert fmt_dim(sympy.Piecewise((1, n > 0), (0, True))) == "(1 if n > 0 else 0)"
