"""The prelude program and compile helpers shared by the tests of every operator's shape rule
(tests/test_shape_rules.py) and error conditions (tests/test_shape_errors.py).

Each test compiles a short program (a shared prelude of tensors and external streams plus a
body) with `compile_source` and reads inferred stream types from `typed.types`. Expected
shapes are written as sympy expressions over the program's own symbols (created with
integer=True, nonnegative=True) and compared with `stepc.types.equal`. Error tests mark the
expected diagnostic location with `»` in the source: the marker is removed before
compiling and the diagnostic must carry the expected code at exactly that line and column.

Operator rules follow the paper (Section 3 and the Appendix tables) and
shared/reference/semantics.md with its errata (the errata win).
"""

from __future__ import annotations

import textwrap

import sympy
from typed_lookup import Compiled

from stepc.frontend import compile_source
from stepc.source import SourceFile
from stepc.types import equal, fmt_shape

MARK = "»"

# Tensors and streams every test program can use. `L` is a ragged dim ([2, 2, L]: the KV
# tiles of each of 2 x 2 requests), `R` and `N` are dynamic-regular dims of external streams.
PRELUDE = """\
tensor A   : bf16[64, 256] input
tensor A32 : f32[64, 256] input
tensor W   : bf16[2, 64, 256] weight
tensor V   : bf16[1024] input
tensor K   : bf16[256, 16] input
tensor Y   : bf16[64, 256] output
tensor IDS : i32[10, 1] input
tensor S2  : i32[2, 1] input
tensor S4  : i32[4, 1] input
tensor LEN : i32[2, 2] input
tensor ADR : u64[3, 5] input
tensor FLT : f32[2, 2] input
stream r    : Strm<Tile<bf16, [1, 1]>, 0>[R] = external("r")
stream x    : Strm<Tile<bf16, [1, 64]>, 1>[10, 1] = external("x")
stream sel  : Strm<MultiHot<2>, 0>[10] = external("sel")
stream n    : Strm<Tile<bf16, [1, 64]>, 1>[4, N] = external("n")
stream d3   : Strm<Tile<bf16, [16, 16]>, 2>[4, 2, N] = external("d3")
stream ta   : Strm<Tile<bf16, [16, 64]>, 1>[4, 4] = external("ta")
stream tb   : Strm<Tile<bf16, [64, 32]>, 1>[4, 4] = external("tb")
stream tc   : Strm<Tile<bf16, [32, 64]>, 1>[4, 4] = external("tc")
stream col  : Strm<Tile<bf16, [16, 1]>, 1>[4, 4] = external("col")
stream row1 : Strm<Tile<bf16, [1, 64]>, 1>[4, 4] = external("row1")
stream t32  : Strm<Tile<f32, [16, 64]>, 1>[4, 4] = external("t32")
stream off  : Strm<Tile<u32, [1, 1]>, 1>[4, 4] = external("off")
stream dyn  : Strm<Tile<bf16, [N, 64]>, 1>[4, 4] = external("dyn")
idx = MetadataGen(LEN)
lens = MetadataGen(LEN)
ka = FlatMap(Zip(idx, lens), fn=cache_read_addr(row_offset=4), dim="L")
kt = RandomOffChipLoad(ka, K, tile=[16, 16])
"""


# ------------------------------------------------------------------ helpers
class Prog(Compiled):
    """A compiled test program, with lookups by stream label."""

    def __init__(self, body: str, overrides: dict | None = None, prelude: bool = True):
        text = (PRELUDE if prelude else "") + textwrap.dedent(body).strip("\n") + "\n"
        self.mark = None
        if MARK in text:
            assert text.count(MARK) == 1, "at most one location marker per program"
            i = text.index(MARK)
            line = text.count("\n", 0, i) + 1
            col = i - (text.rfind("\n", 0, i) + 1) + 1
            self.mark = (line, col)
            text = text.replace(MARK, "")
        self.text = text
        super().__init__(compile_source(SourceFile("t.step", text), overrides or {}))

    def parse(self, expr: str):
        """A shape/dim written in sympy syntax over this program's symbols."""
        names = dict(self.c.typed.symbols.symbols)
        val = sympy.sympify(expr, locals={**names, "ceil": sympy.ceiling})
        items = val if isinstance(val, (list, tuple)) else [val]
        for it in items:
            unknown = {s.name for s in sympy.sympify(it).free_symbols} - set(names)
            assert not unknown, f"expected shape uses unknown symbols {unknown}"
        return val

    def expect_shape(self, label: str, expected: str) -> None:
        got = self.shape(label)
        want = tuple(sympy.sympify(d) for d in self.parse(expected))
        assert len(got) == len(want) and all(equal(a, b) is True for a, b in zip(got, want)), \
            f"`{label}`: expected {fmt_shape(want)}, got {fmt_shape(got)}"

    def fresh_ragged(self, dim, not_in=()) -> sympy.Symbol:
        """`dim` is a bare ragged symbol distinct from the given dims."""
        assert isinstance(dim, sympy.Symbol), f"expected a fresh symbol, got {dim}"
        assert self.kind(dim) == "ragged", f"{dim} should be ragged, is {self.kind(dim)}"
        for other in not_in:
            assert dim != other, f"{dim} should be a fresh symbol"
        return dim


def expect_error(body: str, code: str, overrides: dict | None = None) -> Prog:
    """The program has an error `code` located exactly at the `»` marker."""
    p = Prog(body, overrides)
    assert p.mark is not None, "error tests need a » location marker"
    matching = [d for d in p.errors if d.code == code]
    assert matching, f"expected error {code}, got:\n{p.report()}"
    locs = [(d.span.line, d.span.col) for d in matching if d.span is not None]
    assert p.mark in locs, (f"error {code} expected at {p.mark[0]}:{p.mark[1]}, reported at "
                            f"{locs}\n{p.report()}")
    assert matching[0].span.file == "t.step"
    return p
