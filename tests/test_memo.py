"""Shortcuts of the front end give what the plain computation gives: formulas memoised
per shape (symbols renamed), and exact evaluation of fully bound formulas."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import sympy
from bundled import program_params

from stepc.analyze import analyze, exact
from stepc.analyze.analysis import _exact, _nonempty, _on_demand, _settle, add_all
from stepc.canon import canonical, memo_renamed, rename, symbols_in
from stepc.frontend import compile_file
from stepc.graph.scope import StreamVal
from stepc.graph.values import Evaluator
from stepc.typecheck import checker
from stepc.types import ceil_div, divides

PROGRAMS = Path(__file__).parent.parent / "programs"
CASES = [("moe_static.step", {"E": 8}), ("moe_dynamic.step", {"E": 8}),
         ("moe_timemux.step", {}), ("attention_dynamic.step", {}), ("swiglu.step", {}),
         ("moe_simple.step", {})]


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def analysis(request):
    name, overrides = request.param
    result = compile_file(str(PROGRAMS / name), overrides)
    assert result.ok, result.diagnostics.items
    return analyze(result.typed)


def test_memoised_conditions_equal_direct(analysis):
    for o in analysis.ops:
        assert _nonempty(o.activity) == _nonempty.__wrapped__(o.activity), o.node
        assert _on_demand(o.on_chip, o.activity) == \
            _on_demand.__wrapped__(o.on_chip, o.activity), o.node


def test_on_demand_shortcut_equals_direct(analysis):
    for o in analysis.ops:  # operators without on-chip bytes skip the memo
        assert o.on_chip_on_demand == _on_demand.__wrapped__(o.on_chip, o.activity), o.node


def _sympy_totals(a) -> dict:
    """The totals summed term by term in sympy (what `Analysis.total` shortcuts)."""
    out = {attr: _exact(sympy.Add(*(getattr(o, attr) for o in a.ops)))
           for attr in ("off_chip", "on_chip", "flops")}
    always, groups = sympy.Integer(0), {}
    for o in a.ops:
        if o.on_chip == 0:
            continue
        cond = _nonempty.__wrapped__(o.activity)
        if cond is sympy.true:
            always += o.on_chip
        elif cond is not sympy.false:
            groups[cond] = groups.get(cond, 0) + o.on_chip
    out["on_chip_on_demand"] = sympy.Add(always, *(
        sympy.Piecewise((cost, cond), (0, True))
        for cond, cost in sorted(groups.items(), key=lambda kv: sympy.sstr(kv[0]))))
    return out


def test_totals_equal_sympy_sums(analysis):
    free = sorted({s.name for o in analysis.ops for s in o.off_chip.free_symbols})
    for a in (analysis, analysis.bind({n: 3 for n in free})):  # symbolic, then numbers
        for attr, want in _sympy_totals(a).items():
            got = a.total(attr)
            assert got == want and type(got) is type(want), attr


def test_add_all_equals_sympy_add():
    n = sympy.Symbol("n", integer=True, nonnegative=True)
    cases = [[], [sympy.Integer(3)] * 5, [sympy.Integer(1), sympy.Rational(1, 3)],
             [sympy.Rational(2, 3), sympy.Rational(1, 3)], [sympy.Integer(2), n, 3 * n],
             [sympy.Integer(1), sympy.Float(0.5)], [sympy.Integer(1), sympy.nan]]
    for terms in cases:
        got, want = add_all(terms), sympy.Add(*terms)
        assert (got == want or got is want) and type(got) is type(want), terms


# A dim fixed by `assume` before a second Partition of the same routing shares its symbol:
# the second one's inferred type mentions the substituted symbol.
SHARED_AFTER_ASSUME = """\
param E = 2
param N = 8
param D = 64
tensor X : bf16[N, D] input
stream route : Strm<MultiHot<E>, 0>[N] = external("routing")
x = LinearOffChipLoad(X, tile=[1, D])
p = Partition(x, route, rank=1, consumers=E, dim="R")
assume shape(p[0]) == [3, 1]
q = Partition(x, route, rank=1, consumers=E, dim="R")
for i in 0..E {
    Sink(p[i])
    Sink(q[i])
}
"""


# The many-expert programs with fewer experts (the direct ways take seconds per thousand
# operators): every statement and loop is still elaborated, only shorter.
FEWER_EXPERTS = {"decoder_dynamic.step": {"E": 8, "TOPK": 2},
                 "decoder_static.step": {"E": 8, "TOPK": 2},
                 "decoder_timemux.step": {"E": 8, "TOPK": 2, "MR": 2},
                 "moe_dynamic.step": {"E": 16}, "moe_static.step": {"E": 16},
                 "moe_timemux.step": {"E": 16, "R": 4},
                 "moe_timemux_dynamic.step": {"E": 16, "R": 4}}


@pytest.mark.parametrize("name", ["shared_after_assume"] + program_params(sorted(
    p.name for p in PROGRAMS.glob("*.step"))))
def test_checker_substitution_skip_equals_direct(name, monkeypatch, tmp_path):
    path = PROGRAMS / name
    if name == "shared_after_assume":
        path = tmp_path / "shared.step"
        path.write_text(SHARED_AFTER_ASSUME)
    params = FEWER_EXPERTS.get(name, {})
    fast = compile_file(str(path), params)
    monkeypatch.setattr(checker.Checker, "substitutes", lambda self, symbols: True)
    direct = compile_file(str(path), params)
    assert fast.typed.types == direct.typed.types
    assert fast.typed.subst == direct.typed.subst
    assert [str(d) for d in fast.diagnostics.items] == \
        [str(d) for d in direct.diagnostics.items]
    if name == "shared_after_assume":
        assert str(fast.typed.types[("q", 0)].shape) == "(3, 1)"


def test_exact_values_equal_sympy(analysis):
    rng = random.Random(7)
    free = sorted({s for o in analysis.ops for e in (o.off_chip, o.on_chip, o.flops,
                                                      o.on_chip_on_demand)
                   for s in e.free_symbols}, key=lambda s: s.name)
    if not free:
        pytest.skip("no symbols to bind")
    for zero in (False, True):  # empty streams take the other branch of each condition
        values = {s: 0 if zero and i % 2 else rng.randint(1, 40) for i, s in enumerate(free)}
        subs = {s: sympy.Integer(v) for s, v in values.items()}
        for o in analysis.ops:
            for e in (o.off_chip, o.on_chip, o.flops, o.on_chip_on_demand):
                x = exact.value(e, values)
                assert x is not None, e
                assert exact.as_sympy(x) == _settle(e.xreplace(subs)), (o.node, e)


def test_symbols_in_equal_free_symbols(analysis):
    exprs = [e for o in analysis.ops for e in (o.off_chip, o.on_chip, o.on_chip_on_demand,
                                               o.flops, o.activity) if e is not None]
    assert symbols_in(exprs) == {s for e in exprs for s in e.free_symbols}


def test_exact_value_declines_what_it_cannot_be_sure_of():
    n = sympy.Symbol("n", integer=True, nonnegative=True)
    m = sympy.Symbol("m", integer=True, nonnegative=True)
    # a value means every symbol had one, even where a branch or condition is decided
    assert exact.value(sympy.Piecewise((n, n > 0), (m, True)), {n: 2}) is None
    assert exact.value(sympy.Piecewise((n, sympy.Or(n > 0, m > 0)), (0, True)), {n: 2}) \
        is None
    assert exact.value(sympy.Piecewise((n, sympy.And(n > 0, m > 0)), (0, True)),
                       {n: 0, m: 1}) == 0
    assert exact.value(n / 3, {n: 7}) == sympy.Rational(7, 3)
    assert exact.value(sympy.ceiling(n / 4) * 2, {n: 5}) == 4
    assert exact.value(n * sympy.Float(0.5), {n: 2}) is None
    assert exact.value(1 / n, {n: 0}) is None
    assert exact.value(sympy.Mod(n, 3), {n: 5}) is None
    assert exact.value(n + 1, {}) is None


def test_renaming_round_trip_keeps_relations_unevaluated():
    a, b = (sympy.Symbol(x, integer=True, nonnegative=True) for x in ("n_12", "m_3"))
    e = sympy.Piecewise((8 * a, sympy.Or(a > 0, b > 0)), (0, True))
    key, back = canonical((e,))
    assert {s.name for s in key[0].free_symbols} == {"_c0", "_c1"}
    assert rename(key[0], back) == e


def test_memo_shares_one_computation_between_copies():
    calls = []

    @memo_renamed
    def half_ceiling(d):
        calls.append(d)
        return sympy.ceiling(d / 2)

    syms = [sympy.Symbol(f"n_{i}", integer=True, nonnegative=True) for i in range(5)]
    assert [half_ceiling(s + 1) for s in syms] == [sympy.ceiling((s + 1) / 2) for s in syms]
    assert len(calls) == 1
    assert ceil_div(syms[0], 16) == sympy.ceiling(syms[0] / 16)
    assert divides(4, 8 * syms[1]) is True and divides(4, syms[1]) is None


def _referenced_direct(self, v) -> None:
    """`Evaluator.referenced` without its walked-array memo."""
    if isinstance(v, StreamVal):
        self.named.add((v.node, v.port))
    elif isinstance(v, (list, tuple)):
        for x in v:
            _referenced_direct(self, x)


FILLED_LATER = """
tensor X : f32[4, 4] input
a[0] = LinearOffChipLoad(X, tile=[1, 4])
Sink(a[0])
a[1] = LinearOffChipLoad(X, tile=[1, 4])
b = a[0]
c[1] = LinearOffChipLoad(X, tile=[1, 4])
Sink(c[1])
c[0] = LinearOffChipLoad(X, tile=[1, 4])
d = c[1]
Sink(nowhere)
"""


@pytest.mark.parametrize("name", ["filled_later"] + program_params(sorted(
    p.name for p in PROGRAMS.glob("*.step"))))
def test_walked_array_memo_equals_direct(name, monkeypatch, tmp_path):
    """The streams an elaboration counts as named (and so its diagnostics) are the same
    when each array of streams is walked at every use."""
    path = PROGRAMS / name
    if name == "filled_later":  # an array read, then filled in further, then read again
        path = tmp_path / "filled.step"
        path.write_text(FILLED_LATER)
    params = FEWER_EXPERTS.get(name, {})
    fast = compile_file(str(path), params)
    monkeypatch.setattr(Evaluator, "referenced", _referenced_direct)
    direct = compile_file(str(path), params)
    assert fast.typed.program.named == direct.typed.program.named
    assert [str(d) for d in fast.diagnostics.items] == \
        [str(d) for d in direct.diagnostics.items]


def test_cached_condition_equals_direct(analysis):
    for o in analysis.ops:
        assert o.nonempty == _nonempty.__wrapped__(o.activity), o.node


@pytest.mark.parametrize("name", program_params(sorted(p.name for p in PROGRAMS.glob("*.step"))))
def test_passed_free_symbols_equal_direct(name, monkeypatch):
    """The symbols `visit` hands to `store` are those of the type it stores."""
    passed = []
    store = checker.Checker.store

    def checked_store(self, key, t, free=None):
        if free is not None:
            assert free == checker.free_symbols(t), key
            passed.append(key)
        store(self, key, t, free)

    monkeypatch.setattr(checker.Checker, "store", checked_store)
    assert compile_file(str(PROGRAMS / name), FEWER_EXPERTS.get(name, {})).typed is not None
    assert passed
