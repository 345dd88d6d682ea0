"""Applying `assume` facts during type inference: each fact waits until every stream and
symbol it mentions is known, then an equality unifies dims (substituting a symbol, or
solving a linear fact for one), and any other relation is checked or kept as a fact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepc.codes import FALSE_ASSUMPTION, MALFORMED_ASSUMPTION
from stepc.graph.program import Assumption
from stepc.ops.base import OpError
from stepc.sympy_lazy import dim, is_sympy
from stepc.types import equal, fmt_dim, fmt_shape

if TYPE_CHECKING:
    import sympy
else:
    from stepc.sympy_lazy import sympy


class AssumptionSolver:
    """The assumption half of the `Checker` (stepc.typecheck.checker), which holds the
    state these methods read: types, symbols, substitutions, pending facts."""

    def unknown_symbols(self, a: Assumption) -> set[str]:
        out = set()
        for term in (a.lhs, a.rhs):
            if is_sympy(term):
                out |= {s.name for s in term.free_symbols if self.symbols.get(s.name) is None}
        return out

    def try_assumptions(self, node: str | None = None) -> None:
        """Apply the assumptions that became applicable after typing `node`."""
        candidates = self.waiting.pop(node, []) if node is not None else []
        if self.symbols.version != self.symbols_seen:
            self.symbols_seen = self.symbols.version
            candidates = candidates + self.symbolic
        for a in candidates:
            if a not in self.pending:
                continue
            if any(r.node in self.failed for r in a.streams):
                self.pending.remove(a)
                continue
            missing = [r.node for r in a.streams if (r.node, r.port) not in self.types]
            if missing:
                self.waiting.setdefault(missing[0], []).append(a)
                continue
            if self.unknown_symbols(a):
                if a not in self.symbolic:
                    self.symbolic.append(a)
                continue
            self.pending.remove(a)
            if a in self.symbolic:
                self.symbolic.remove(a)
            self.apply_assumption(a)

    def term(self, t):
        if isinstance(t, tuple) and t[0] == "dims":
            return tuple(self.apply_subst_expr(d) for d in t[1])
        if isinstance(t, tuple) and t[0] == "shape":
            return self.types[(t[1].node, t[1].port)].shape
        if isinstance(t, tuple) and t[0] == "dim":
            st = self.types[(t[1].node, t[1].port)]
            k = t[2]
            if not 0 <= k < len(st.shape):
                raise OpError(MALFORMED_ASSUMPTION,
                              f"dim({k}) is out of range for {st} (rank {st.rank}; "
                              f"dims are numbered 0..{st.rank} from the innermost)")
            return st.shape[len(st.shape) - 1 - k]
        return self.apply_subst_expr(t)

    def apply_subst_expr(self, e):
        return dim(e).xreplace(self.subst) if self.subst else dim(e)

    def apply_assumption(self, a: Assumption) -> None:
        try:
            lhs, rhs = self.term(a.lhs), self.term(a.rhs)
        except OpError as err:
            self.bag.error(err.code, err.message, a.span)
            return
        if isinstance(lhs, tuple) or isinstance(rhs, tuple):
            if not (isinstance(lhs, tuple) and isinstance(rhs, tuple)) or a.op != "==":
                self.bag.error(MALFORMED_ASSUMPTION,
                               "shapes can only be compared with another shape "
                               "using `==`", a.span)
                return
            if len(lhs) != len(rhs):
                self.bag.error(MALFORMED_ASSUMPTION,
                               f"assumed shapes differ in rank: {fmt_shape(lhs)} and "
                               f"{fmt_shape(rhs)}", a.span)
                return
            for x, y in zip(lhs, rhs, strict=True):
                if not self.unify(x, y, a, (fmt_shape(lhs), fmt_shape(rhs))):
                    return
            return
        if a.op == "==":
            self.unify(lhs, rhs, a)
            return
        rel = {"!=": sympy.Ne, "<=": sympy.Le, ">=": sympy.Ge, "<": sympy.Lt,
               ">": sympy.Gt}[a.op](lhs, rhs)
        if rel is sympy.false:
            self.bag.error(FALSE_ASSUMPTION, f"assumption is false: {fmt_dim(lhs)} {a.op} "
                                    f"{fmt_dim(rhs)}", a.span)
        elif rel is not sympy.true:
            self.facts.append(rel)

    def unify(self, x, y, a: Assumption, shapes: tuple[str, str] | None = None) -> bool:
        if x == y:
            return True
        for old, new in ((x, y), (y, x)):
            if isinstance(old, sympy.Symbol) and self.symbols.get(old.name) is not None \
                    and self.symbols.infos[old.name].kind != "param" \
                    and old not in sympy.sympify(new).free_symbols:
                self.substitute(old, new)
                return True
        verdict = equal(x, y)
        if verdict is True:
            return True
        if verdict is None and self.solve(x, y):
            return True
        if verdict is False:
            where = f" (the shapes are {shapes[0]} and {shapes[1]})" if shapes else ""
            self.bag.error(FALSE_ASSUMPTION,
                           f"assumption contradicts the inferred dims: {fmt_dim(x)} "
                           f"!= {fmt_dim(y)}{where}", a.span,
                           [n for r in a.streams for n in self.stream_note(r)])
            return False
        self.facts.append(sympy.Eq(x, y))
        return True

    def solve(self, x, y) -> bool:
        """Use a linear fact `x == y` to eliminate one operator-introduced symbol."""
        eq = sympy.expand(x - y)
        if eq.has(sympy.ceiling, sympy.floor, sympy.Piecewise, sympy.Mod, sympy.Min, sympy.Max):
            return False
        for sym in sorted(eq.free_symbols, key=lambda s: s.name, reverse=True):
            info = self.symbols.infos.get(sym.name)
            if info is None or info.kind == "param" or not eq.is_polynomial(sym) \
                    or sympy.degree(eq, sym) != 1:
                continue
            sol = sympy.solve(eq, sym)
            if len(sol) == 1:
                self.substitute(sym, sol[0])
                return True
        return False
