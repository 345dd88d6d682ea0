"""What `stepc tune` searches and what it asks for: the search space (programs, params,
hardware keys, constraints), budgets, objectives and the aggregation over traces."""

from __future__ import annotations

import ast
import itertools
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from stepc.measure import ANALYSIS_METRICS, SIM_METRICS
from stepc.measure import METRICS as MEASURED

# ANALYSIS_METRICS: exact from the analysis once the traces bind the dynamic dims;
# SIM_METRICS: only a simulation gives them.
METRICS = ANALYSIS_METRICS + SIM_METRICS
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "kb": 10**3, "mb": 10**6, "gb": 10**9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "b": 1}


class TuneError(Exception):
    """A search that cannot be run as asked (a usage error)."""


def parse_amount(text: str) -> float:
    """`64MiB`, `1.5GB`, `400000`, `4e5`, `400k` as a number."""
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([a-zA-Z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _UNITS:
        raise TuneError(f"expected a number with an optional unit (k, M, G, KiB, MiB, GiB), "
                        f"found {text!r}")
    try:
        return float(m.group(1)) * _UNITS[unit]
    except ValueError:
        raise TuneError(f"expected a number, found {m.group(1)!r}") from None


def _known_metric(name: str, flag: str) -> str:
    if name not in METRICS:
        raise TuneError(f"{flag} {name}: unknown metric (one of {', '.join(METRICS)})")
    return name


@dataclass(frozen=True)
class Budget:
    """An upper limit on a metric; it must hold for every trace. A relative budget has a
    `factor` of the best (`cycles=1.05*min`) or, for an analysis metric, of the largest
    (`allocated_compute=0.5*max`) value of the metric in the space, found by the search
    (`limit` is then set)."""
    metric: str
    limit: float = math.nan
    factor: float | None = None
    relative_to: str = "min"  # or "max"

    @classmethod
    def parse(cls, metric: str, limit: str) -> Budget:
        """`METRIC=LIMIT` or `METRIC<=LIMIT`, LIMIT an amount, `F*min` (F >= 1) or `F*max`
        (0 < F <= 1, analysis metrics)."""
        metric = _known_metric(metric.strip().removesuffix("<"), "--budget")
        m = re.fullmatch(r"\s*(?:([0-9.eE+]+)\s*\*\s*(min|max)|(min|max)\s*\*\s*([0-9.eE+]+))\s*",
                         limit)
        if m is None:
            return cls(metric, parse_amount(limit))
        relative_to = m.group(2) or m.group(3)
        try:
            factor = float(m.group(1) or m.group(4))
        except ValueError:
            raise TuneError(f"--budget {metric}: expected F*{relative_to}, found "
                            f"{limit!r}") from None
        if MEASURED[metric].higher_is_better:
            raise TuneError(f"--budget {metric}={limit}: a relative budget needs a metric "
                            "to minimise (cycles or an analysis metric)")
        if relative_to == "min" and factor < 1:
            raise TuneError(f"--budget {metric}={limit}: the factor must be at least 1")
        if relative_to == "max":
            if metric not in ANALYSIS_METRICS:
                raise TuneError(f"--budget {metric}={limit}: F*max needs an analysis metric "
                                f"({', '.join(ANALYSIS_METRICS)}): the largest {metric} is "
                                "known only by simulating every point")
            if not 0 < factor <= 1:
                raise TuneError(f"--budget {metric}={limit}: the factor of max must be in "
                                "(0, 1]")
        return cls(metric, factor=factor, relative_to=relative_to)

    @property
    def exact_before_simulation(self) -> bool:
        return self.metric in ANALYSIS_METRICS

    def resolved(self, reference: float) -> Budget:
        """The relative budget with its limit, given the best (or largest) value found."""
        return Budget(self.metric, self.factor * reference, self.factor, self.relative_to)

    def text(self) -> str:
        if self.factor is None:
            return f"{self.metric} <= {self.limit:,.0f}"
        known = "" if math.isnan(self.limit) else f" = {self.limit:,.0f}"
        return f"{self.metric} <= {self.factor:g} x {self.relative_to}{known}"


@dataclass(frozen=True)
class Objective:
    """A metric to minimise (or maximise, written `max:METRIC`)."""
    metric: str
    maximise: bool = False

    @classmethod
    def parse(cls, text: str) -> Objective:
        maximise = text.startswith("max:")
        name = text.removeprefix("max:").removeprefix("min:")
        return cls(_known_metric(name, "--objective"), maximise)

    def key(self, value: float) -> float:
        """The value as a cost: smaller is better."""
        return -value if self.maximise else value

    def text(self) -> str:
        return f"{'max' if self.maximise else 'min'} {self.metric}"


def aggregate(values: list[float], how: str) -> float:
    """One number for a metric over traces: `mean`, `max`, or a percentile `pNN` (linear
    interpolation). All three only grow when a value grows, so the aggregate of lower
    bounds bounds the aggregate of the values."""
    if how == "mean":
        return float(np.mean(values))
    if how == "max":
        return float(np.max(values))
    return float(np.percentile(values, percentile(how)))


def percentile(how: str) -> float:
    m = re.fullmatch(r"p(\d+(?:\.\d+)?)", how)
    if how in ("mean", "max"):
        return 100.0
    if m is None or not 0 <= float(m.group(1)) <= 100:
        raise TuneError(f"--aggregate {how}: expected mean, max or a percentile like p90")
    return float(m.group(1))


# ---------------------------------------------------------------- constraints
_ALLOWED = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub,
            ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Div, ast.Pow,
            ast.Compare, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq, ast.Name,
            ast.Load, ast.Constant)


@dataclass(frozen=True)
class Constraint:
    """A `--where` condition over params, e.g. `TILE_F <= F` or `F % TILE_F == 0`."""
    text: str
    names: frozenset[str]
    code: object = field(compare=False, hash=False, repr=False)

    @classmethod
    def parse(cls, text: str) -> Constraint:
        try:
            tree = ast.parse(text, mode="eval")
        except SyntaxError:
            raise TuneError(f"--where {text!r}: not an expression") from None
        for node in ast.walk(tree):
            if not isinstance(node, _ALLOWED) or (
                    isinstance(node, ast.Constant) and not isinstance(node.value, int)):
                raise TuneError(f"--where {text!r}: only integers, params, arithmetic, "
                                "comparisons and and/or/not are allowed")
        names = frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name))
        return cls(text, names, compile(tree, "<where>", "eval"))

    def holds(self, values: dict[str, int]) -> bool:
        """Whether the condition holds (a division by zero counts as not holding)."""
        try:
            return bool(eval(self.code, {"__builtins__": {}}, dict(values)))  # noqa: S307
        except ZeroDivisionError:
            return False


# ---------------------------------------------------------------- the space
@dataclass(frozen=True)
class Candidate:
    """One schedule: a program, its param values, and hardware settings."""
    program: str
    params: tuple[tuple[str, int], ...]
    sets: tuple[str, ...] = ()  # hardware keys of the space, as `--set` items

    def label(self) -> str:
        import os
        parts = [os.path.basename(self.program)]
        parts += [f"{k}={v}" for k, v in self.params]
        parts += list(self.sets)
        return " ".join(parts)


@dataclass
class Space:
    """Programs (one categorical dimension), integer params, hardware keys and constraints.
    A param a program does not declare is not a dimension of that program."""
    programs: list[str]
    params: dict[str, list[int]] = field(default_factory=dict)
    hw_keys: dict[str, list[str]] = field(default_factory=dict)  # "hbm.channels" -> values
    where: list[Constraint] = field(default_factory=list)
    fixed: dict[str, int] = field(default_factory=dict)  # -D values for every point

    def dims(self, declared: set[str]) -> list[str]:
        """The params that are dimensions of a program declaring `declared`."""
        return [n for n in sorted(self.params) if n in declared]

    def size(self, declared: dict[str, set[str]]) -> int:
        hw = math.prod(len(v) for v in self.hw_keys.values())
        return hw * sum(math.prod(len(self.params[n]) for n in self.dims(declared[p]))
                        for p in self.programs)

    def candidates(self, declared: dict[str, set[str]]) -> Iterator[Candidate]:
        """Every point of the space, in order (programs, then params, then hardware)."""
        keys = sorted(self.hw_keys)
        for program in self.programs:
            dims = self.dims(declared[program])
            for values in itertools.product(*(self.params[n] for n in dims)):
                for hw in itertools.product(*(self.hw_keys[k] for k in keys)):
                    yield Candidate(program, tuple(zip(dims, values)),
                                    tuple(f"{k}={v}" for k, v in zip(keys, hw)))
