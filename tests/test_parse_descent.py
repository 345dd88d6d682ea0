"""The fast recursive-descent parser agrees with the textX grammar: on every input it either
declines or returns the very AST (spans included) that the textX path builds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_robustness import VOCAB, _settings, mutated_program, statement_soup, token_soup

from stepc.diagnostics import StepError
from stepc.grammar.descent import parse_fast
from stepc.grammar.nesting import check_levels
from stepc.grammar.parse import _parse, _parse_textx, parse
from stepc.source import SourceFile

ROOT = Path(__file__).resolve().parent.parent
STEP_FILES = sorted(p for pattern in ("programs/**/*.step", "stepc/**/*.step", "tests/**/*.step")
                    for p in ROOT.glob(pattern))
_DOC_BLOCK = re.compile(r"```step\n(.*?)```", re.DOTALL)
DOC_BLOCKS = [m.group(1) for p in sorted(ROOT.glob("docs/*.md"))
              for m in _DOC_BLOCK.finditer(p.read_text(encoding="utf-8"))]

TRICKY = [
    "", "# only a comment", "for = 3", "in = 1\nfor i in 0..in { x = i }", "x = a\n-1",
    "x = (a)[1] + (b)", "x = a - -b", "x = a---b", "x = - (1)", "import 'a\\'b\\\\' ;",
    'import "a\\"b"', 'import "a\\" b', "x == 3", "x = = 3", "f(a==1)", "f(a = = 1)",
    "x = 1 # c\n;", "x\t=\r1", "x =\f1", "x = 1\u00a0", "x = trueish", "x = true(1)",
    "x = 12abc", "x = 0..1", "for i in 0..N{}", "forx = 1", "for i in0..1 {}",
    "tensor t : bf16 [1, 2] weight = f(1)", "tensor t # c:\n : bf16[] input",
    "tensor input : input[input] input", "param param = 1", "graph g(a: Strm<f32>, b = 1) {}",
    "s : Strm<Tile<Tile, [1, ?]>, 1>[?, 2] = f()", "stream s : Strm<(Index<3>, MultiHot<2>)>",
    "stream s : Strm<Buffer<Tile<f32, [1, 1]>, [2]>>[]", "stream s : Strm<Tile, 1>",
    "assume a <= b", "assume a = b", "return", "return 1, 2;", "x[1], y = f()", "f(x=1, 2)",
    "x = [1, ]", "x = f(1,)", "x = é", "é = 1", "x = ١", "x = 1" + "0" * 40,
    "stream s : Strm<f32, 1" + "0" * 40 + ">",
    "x = " + "(" * 30 + "1" + ")" * 30, "x = " + "f(" * 40 + ")" * 40,
]


REFUSED = object()  # what the fast parser refuses itself


def assert_agrees(text: str) -> None:
    """The fast parser returns textX's AST or declines; what it refuses itself (a literal
    too long to read, a chain nested past the limit), the textX path refuses too; and
    `_parse`, which has textX parse from the statement the fast parser says, reports
    textX's syntax error."""
    src = SourceFile("t.step", text)
    try:
        fast = parse_fast(src)
    except StepError:
        fast = REFUSED
    try:
        slow = _parse_textx(src)
    except StepError as e:
        assert fast is None or fast is REFUSED, text
        if fast is None:
            with pytest.raises(StepError) as via_parse:
                _parse(src)
            assert via_parse.value.diagnostics == e.diagnostics, text
        return
    if fast is REFUSED:
        with pytest.raises(StepError):
            check_levels(slow, src)
        return
    assert fast is None or fast == slow, text


@pytest.mark.parametrize("path", STEP_FILES, ids=[str(p.relative_to(ROOT)) for p in STEP_FILES])
def test_repository_programs(path):
    data = path.read_bytes()
    text = data.decode("utf-8", "replace")
    assert_agrees(text)
    if b"\x00" not in data and "syntax" not in path.name:  # valid programs take the fast path
        assert parse_fast(SourceFile(path.name, text)) is not None


@pytest.mark.parametrize("text", DOC_BLOCKS)
def test_doc_blocks(text):
    assert_agrees(text)


@pytest.mark.parametrize("text", TRICKY)
def test_tricky_inputs(text):
    assert_agrees(text)


def test_parse_uses_the_fast_path_and_keeps_textx_errors():
    src = SourceFile("t.step", "x = f(1\n")
    with pytest.raises(StepError) as fast_path:
        parse(src)
    with pytest.raises(StepError) as textx_path:
        _parse_textx(src)
    assert fast_path.value.diagnostics == textx_path.value.diagnostics


CHARS = st.sampled_from(list("abxz_019 \t\n\r\f#\"'\\()[]{}<>=!,:;.?+-*/%é\u00a0") + VOCAB)


SOUPS = {  # generator -> examples in the default run (ten times as many under `-m slow`)
    "characters": (st.lists(CHARS, max_size=40).map("".join), 150),
    "tokens": (token_soup().map(lambda b: b.decode("utf-8", "replace")), 60),
    "statements": (statement_soup().map(lambda b: b.decode("utf-8", "replace")), 40),
    "mutations": (mutated_program().map(lambda b: b.decode("utf-8", "replace")), 40),
}


@pytest.mark.parametrize("scale", [1, pytest.param(10, marks=pytest.mark.slow)])
@pytest.mark.parametrize("soup", list(SOUPS))
def test_generated_inputs(soup, scale):
    strategy, examples = SOUPS[soup]
    _settings(examples * scale)(given(strategy)(assert_agrees))()
