"""Reproducing figures of the paper: run their specs' points through one pool of workers
(figures whose params are chosen from others' results after those), then evaluate each."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

from stepc.explore.runner import Sweep
from stepc.reproduction.report import FigureResult, evaluate_figure
from stepc.reproduction.spec import (
    Expanded,
    SpecError,
    choose,
    depends_on,
    expand_spec,
    load_spec,
)

__all__ = ["reproduce_figures"]


def make_sweep(figure: str, data: str | None, out_dir: str, jobs: int, model: str = "ref",
               fresh: bool = False, results: dict[str, list[dict]] | None = None
               ) -> tuple[dict, Expanded, Sweep, Path]:
    """A figure's spec, points and sweep (its inputs read, synthetic traces written);
    `results` holds the records of the figures its `[choose]` params depend on."""
    spec = load_spec(figure)
    fig_dir = Path(out_dir) / f"fig{figure}"
    fig_dir.mkdir(parents=True, exist_ok=True)
    chosen, chosen_lines = choose(spec, results or {})
    exp = expand_spec(spec, data, model, (fig_dir / "traces").resolve(), chosen)
    exp.chosen = chosen_lines
    if exp.writes:
        import numpy as np
        (fig_dir / "traces").mkdir(exist_ok=True)
        for path, arr in dict(exp.writes).items():  # a set used by several sweeps: once
            np.save(path, arr)
    results = fig_dir / "results.jsonl"
    if fresh and results.exists():
        results.unlink()
    return spec, exp, Sweep(exp.points, str(results), jobs), fig_dir


def reproduce_figures(figures: list[str], data: str | None, out_dir: str, jobs: int,
                      model: str = "ref", progress=lambda figure: None,
                      fresh: bool = False) -> Generator[FigureResult, None, None]:
    """Run figures' specs (reusing records of an earlier run whose inputs are unchanged,
    unless `fresh`) through one pool of `jobs` workers: every figure's points are
    submitted first, so no worker idles while a figure waits for its last point. A figure
    whose params are chosen from other figures' results (`[choose]`) is submitted once
    those are in; a figure it needs that was not asked for runs too (its records are
    kept, it is not evaluated). Writes each asked figure's CSV and plots and yields its
    `FigureResult` (`progress(figure)` gives the figure's per-record callback): first
    those that others choose from, then the others in the order asked, then those that
    choose. The points of figures on a chain of choices run before the others, so that a
    figure waiting on another's results does not start last and leave a worker idle at
    the end."""
    from stepc.explore.pool import LocalPool

    needs = {f: depends_on(load_spec(f)) for f in figures}
    extra = sorted({d for ds in needs.values() for d in ds} - set(figures))
    needs.update({d: depends_on(load_spec(d)) for d in extra})
    if any(needs[d] for d in extra):
        raise SpecError("a figure that others choose params from must not choose its own")
    chosen_from = {d for ds in needs.values() for d in ds}
    order = extra + [f for f in figures if f in chosen_from] + \
        [f for f in figures if not needs[f] and f not in chosen_from] + \
        [f for f in figures if needs[f]]
    results: dict[str, list[dict]] = {}
    started: dict[str, tuple] = {}
    pool = LocalPool(jobs)
    pending = []

    def start_ready() -> None:
        for figure in order:
            if figure not in started and all(d in results for d in needs[figure]):
                started[figure] = make_sweep(figure, data, out_dir, jobs, model, fresh,
                                             results)
                chained = bool(needs[figure]) or figure in chosen_from
                pending.append(started[figure][2].submit(pool, resume=True,
                                                         rank=0 if chained else 1))
    try:
        start_ready()
        for figure in order:
            spec, exp, sweep, fig_dir = started[figure]
            waiting = pending[list(started).index(figure)]
            try:
                outcome = waiting.collect(progress(figure))
            except BaseException:
                for other in pending:
                    other.keep_finished()
                raise
            results[figure] = [{**r, "labels": exp.labels.get(p.ident, {})}
                               for p, r in zip(sweep.points, outcome.records)]
            start_ready()
            if figure in figures:
                yield evaluate_figure(figure, spec, exp, sweep, fig_dir, outcome, model,
                                      data)
    finally:
        if any(p.futures for p in pending):
            pool.terminate()  # stopped early: the remaining points are not wanted
        elif not pool.stopped:
            pool.shutdown()

