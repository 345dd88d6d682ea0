"""The cheap stages of a search, run in worker processes: compile and check a candidate,
apply the `--where` conditions that need the program, and analyze it under every trace
(exact on-chip bytes, off-chip bytes, FLOPs, allocated compute, and the roofline lower
bound on cycles). Also how a candidate becomes the sweep points that simulate it."""

from __future__ import annotations

from dataclasses import dataclass, field

from stepc.explore.runner import Point
from stepc.tune.space import Candidate, Constraint


@dataclass
class AnalysisJob:
    """What a worker needs to analyze one candidate; read by the submitting process."""
    candidate: Candidate
    files: dict[str, bytes]  # the program and its imports
    overrides: dict[str, int]  # -D values the program declares, and the candidate's params
    hw: object  # the hardware configuration (with the candidate's keys)
    cases: list[dict] = field(default_factory=list)  # one {stream: array} per trace case
    where: list[Constraint] = field(default_factory=list)
    # (program digest, program, params) when the worker keeps the compiled candidate for its
    # simulations (see stepc/tune/workers.py); None: compiled for the analysis alone
    key: tuple | None = None
    # the `hw_digest`s of the configurations the candidate is simulated with whose symbolic
    # analysis is this one's (they differ from `hw` only where the analysis does not read)
    same_analysis: tuple[str, ...] = ()
    fifo_bytes: bool = False  # on-chip bytes count the FIFOs at their depths


# count FIFOs with `fifo_bytes` (and `area_mm2` their SRAM)
WITH_FIFOS = ("on_chip_bytes", "on_chip_bytes_on_demand")


def analyze_candidate(job: AnalysisJob) -> dict:
    """Compile, check and analyze one candidate: `status` is `ok`, `infeasible` (the program
    does not check, or a trace does not fit it) or `excluded` (a `--where` condition); an
    ok record has one dict of metrics per trace case, with `lower_bound_cycles`."""
    from stepc.analyze import analyze, trace_bindings
    from stepc.analyze.analysis import roofline
    from stepc.energy import sram_mm2
    from stepc.explore.runner import compile_cached
    from stepc.fifo.capacity import fifo_bytes
    from stepc.frontend import compile_files
    from stepc.measure import measure, number
    from stepc.traces import TraceError
    from stepc.tune.workers import remember
    from stepc.types import dim_json

    cand = job.candidate
    try:
        if job.key is None:
            result = compile_files(job.files, cand.program, job.overrides)
        else:
            result = compile_cached(job.files, cand.program, job.overrides)
        if not result.ok:
            first = result.diagnostics.errors[0]
            where = f"{first.span}: " if first.span else ""
            return {"status": "infeasible", "reason": f"{where}{first.message}"}
        params = dict(result.typed.program.params)
        for c in job.where:
            if c.names <= params.keys() and not c.holds(params):
                return {"status": "excluded", "reason": f"--where {c.text}"}
        symbolic = analyze(result.typed, "artifact", job.hw)
        remember(job.key, result, symbolic, job.same_analysis)
        cases = []
        for arrays in job.cases:
            measured = measure(result.typed, job.hw, arrays, analysis=symbolic, simulate=False)
            metrics = {m: number(v) for m, v in measured.values.items()}
            metrics["lower_bound_cycles"] = number(dim_json(roofline(measured.analysis,
                                                                    job.hw).cycles))
            if job.fifo_bytes:
                bound = trace_bindings(result.typed, arrays) if arrays else {}
                fifos = number(dim_json(fifo_bytes(result.typed, job.hw, bound)))
                metrics["fifo_bytes"] = fifos
                for m in WITH_FIFOS:
                    metrics[m] = None if None in (fifos, metrics[m]) else metrics[m] + fifos
                area = metrics["area_mm2"]
                metrics["area_mm2"] = None if None in (fifos, area) else \
                    area + float(sram_mm2(job.hw, fifos))
            cases.append(metrics)
    except TraceError as e:
        return {"status": "infeasible", "reason": f"trace: {e}"}
    except Exception as e:  # one bad candidate must not end the search
        return {"status": "infeasible", "reason": f"{type(e).__name__}: {e}"}
    return {"status": "ok", "params": params, "cases": cases}


def hardware(hw: str, sets: tuple[str, ...], model: str) -> tuple[object, tuple[str, ...]]:
    """The analysis stage's hardware configuration, and the `hw_digest`s of the run
    configurations (fluid's and `model`'s) that reuse its symbolic analysis: those with its
    fabric, the only part of the hardware the analysis reads."""
    from stepc.explore.runner import hw_digest
    from stepc.hw import load_config
    base = load_config(hw, sets)
    runs = [load_config(hw, sets + (f"hbm.model={m}",)) for m in sorted({"fluid", model})]
    return base, tuple(hw_digest(c) for c in runs if c.fabric == base.fabric)


def sim_points(cand: Candidate, overrides: dict[str, int], hw: str, sets: tuple[str, ...],
               cases: list[tuple[tuple[str, str], ...]], model: str, tag: str) -> list[Point]:
    """The sweep points simulating a candidate under every trace case with a memory model."""
    return [Point(cand.program, tuple(sorted(overrides.items())), hw,
                  tuple(sets) + cand.sets + (f"hbm.model={model}",), case, True, tag)
            for case in cases]


def sim_command(cand: Candidate, overrides: dict[str, int], hw: str, sets: tuple[str, ...],
                case: tuple[tuple[str, str], ...], model: str) -> str:
    """The `stepc sim` command that runs a candidate under one trace case."""
    import shlex
    parts = ["stepc", "sim", cand.program]
    for k, v in sorted(overrides.items()):
        parts += ["-D", f"{k}={v}"]
    parts += ["--hw", hw]
    for s in tuple(sets) + cand.sets + (f"hbm.model={model}",):
        parts += ["--set", s]
    for stream, path in case:
        parts += ["--trace", f"{stream}={path}"]
    parts.append("--timing-only")
    return " ".join(shlex.quote(p) for p in parts)
