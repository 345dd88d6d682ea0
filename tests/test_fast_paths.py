"""More front-end shortcuts checked against the plain computation they replace."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import sympy
from bundled import program_params

from stepc.analyze import fold
from stepc.analyze.analysis import _charged_when, _nonempty, cost_formulas
from stepc.analyze.bindings import _selector_stand_in, _stand_in
from stepc.canon import symbols_in
from stepc.report import analyze as report

PROGRAMS = Path(__file__).parent.parent / "programs"
BUNDLED = sorted(p.name for p in PROGRAMS.glob("*.step"))


@pytest.fixture(params=[program_params([p], pytest.mark.xdist_group(Path(p).stem))[0]
                        for p in BUNDLED], ids=BUNDLED)
def program(request) -> str:
    """A bundled program's name, its tests on the worker of its other tests (its group)."""
    return Path(request.param).stem


@pytest.fixture
def typed(program, bundled):
    """The session's compile of the program."""
    return bundled.typed(program)


def test_selector_stand_in_equals_numpy_trace(typed):
    externals: dict[str, list] = {}
    for n in typed.program.nodes.values():
        if n.op == "External" and (n.name, 0) in typed.types:
            externals.setdefault(n.attrs["name"], []).append(n)
    shortcuts = 0
    for name, nodes in externals.items():
        types = [typed.types[(n.name, 0)] for n in nodes]
        for st in types:
            if not all(d.is_Integer for d in st.shape):
                continue
            for shape in (tuple(int(d) for d in st.shape),
                          tuple(int(d) for d in st.shape) + (2,), (3,), (0,)):
                got = _selector_stand_in(typed, nodes, shape)
                if got is not None:
                    shortcuts += 1
                    assert got == _stand_in(typed, name, types, shape), (name, shape)
    if any(type(typed.types[(n[0].name, 0)].elem).__name__ == "Select"
           for n in externals.values()):
        assert shortcuts


def _python(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_sums_do_not_load_the_tensor_module():
    code = ("import sys, sympy, stepc.types\n"
            "x = sympy.Symbol('x')\n"
            "print(sympy.Add(x, 2 * x + 1), 'sympy.combinatorics' in sys.modules)")
    assert _python(code) == "3*x + 1 False"


def test_tensors_still_work_after_the_stand_in():
    code = ("import sympy, stepc.types\n"
            "x = sympy.Symbol('x')\n"
            "sympy.Add(x, 2 * x)\n"
            "from sympy.tensor.tensor import TensorIndexType, TensorHead, tensor_indices\n"
            "import sympy.tensor.tensor as tt\n"
            "L = TensorIndexType('L'); i = tensor_indices('i', L)\n"
            "A, B = TensorHead('A', [L]), TensorHead('B', [L])\n"
            "e = A(i) + B(i) + A(i)\n"
            "print(e, isinstance(e, tt.TensExpr), tt.__name__)")
    assert _python(code) == "2*A(i) + B(i) True sympy.tensor.tensor"


def test_cost_formulas_mention_the_symbols_of_every_cost(program, typed, bundled):
    for mode in ("artifact", "paper"):
        a = bundled.analysis(program, mode=mode)
        direct = symbols_in([e for o in a.ops for e in (o.off_chip, o.on_chip,
                                                        o.on_chip_on_demand, o.flops)])
        assert symbols_in(cost_formulas(a.ops)) == direct
        assert set(a.symbols) == {s.name for s in direct} & set(typed.symbols.infos)


class _DirectFold(fold._FoldPrinter):
    def _canonical(self, term, letter):
        return fold._canonical(term, letter)


def test_folding_memo_equals_direct(program, bundled):
    a = bundled.analysis(program)
    exprs = [e for r in report._rows(a, True) for e in (r.off_chip, r.on_chip, r.flops)]
    exprs += list(a.totals.values())
    for e in exprs:
        e = sympy.sympify(e)
        if e.is_number:
            continue
        assert fold.fmt_folded(e) == _DirectFold({"order": "none"}).doprint(e)


def test_folding_memo_keeps_mixed_and_unindexed_terms_apart():
    n0, n1, m1, k = (sympy.Symbol(s, integer=True, nonnegative=True)
                     for s in ("n_0", "n_1", "m_1", "k"))
    n2, n3 = (sympy.Symbol(f"n_{i}", integer=True, nonnegative=True) for i in (2, 3))
    n4 = sympy.Symbol("n_4", integer=True)  # other assumptions: another family member
    e = sympy.Add(*(sympy.ceiling(s / 16) for s in (n0, n1, n2, n3)), n0 * m1, k, n4)
    assert fold.fmt_folded(e) == _DirectFold({"order": "none"}).doprint(e)
    assert fold.fmt_folded(e).count("Σ") == 1


def test_charged_when_memo_equals_direct(program, bundled):
    a = bundled.analysis(program)
    for o in a.ops:
        if o.on_chip == 0:
            continue
        cond = _nonempty(o.activity)
        if cond is sympy.true or cond is sympy.false:
            continue
        got = _charged_when(o.on_chip, cond)
        want = sympy.Piecewise((o.on_chip, cond), (0, True))
        assert got == want and str(got) == str(want), o.node


def test_typed_nodes_inputs_equal_input_types(typed):
    pairs = list(typed.typed_nodes_inputs())
    assert [n for n, _ in pairs] == list(typed.typed_nodes())
    for node, inputs in pairs:
        assert inputs == typed.input_types(node.name)
    for t in typed.types.values():
        assert t.card == sympy.Mul(*t.shape) and t.card is t.card
