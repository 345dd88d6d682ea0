"""Running the points of a sweep: one process per point, results appended as JSON lines.

A point is a program file, its `-D` overrides, a hardware spec (preset name or TOML path,
plus `--set` items) and trace files for external streams. Its key (sorted JSON of those)
lets `--resume` skip points an earlier, interrupted sweep already finished.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Point:
    program: str
    params: tuple[tuple[str, int], ...]
    hw: str
    sets: tuple[str, ...] = ()
    traces: tuple[tuple[str, str], ...] = ()
    timing_only: bool = True
    tag: str = ""  # a name for the series this point belongs to

    @property
    def key(self) -> str:
        return json.dumps({"program": self.program, "params": dict(self.params),
                           "hw": self.hw, "sets": list(self.sets),
                           "traces": dict(self.traces), "timing_only": self.timing_only,
                           "tag": self.tag}, sort_keys=True)


def grid_points(programs: list[str], grids: dict[str, list[int]], hws: list[str],
                sets: tuple[str, ...], traces: dict[str, list[str]],
                timing_only: bool) -> list[Point]:
    """The cross product of programs x parameter values x hardware x traces."""
    names = sorted(grids)
    tnames = sorted(traces)
    out = []
    for program in programs:
        for values in itertools.product(*(grids[n] for n in names)):
            for hw in hws:
                for paths in itertools.product(*(traces[n] for n in tnames)):
                    out.append(Point(program, tuple(zip(names, values)), hw, tuple(sets),
                                     tuple(zip(tnames, paths)), timing_only))
    return out


def run_point(point: Point) -> dict:
    """Analyze and simulate one point (in a worker process); failures become records."""
    from stepc.analyze import analyze
    from stepc.analyze.report import json_value
    from stepc.frontend import compile_file
    from stepc.hw import load_config
    from stepc.sim.run import simulate
    from stepc.traces import load_array

    record = {"key": point.key, "program": point.program, "params": dict(point.params),
              "hw": point.hw, "sets": list(point.sets), "traces": dict(point.traces),
              "tag": point.tag}
    t0 = time.perf_counter()
    try:
        result = compile_file(point.program, dict(point.params))
        if not result.ok:
            errors = [f"{d.span}: {d.message}" for d in result.diagnostics.errors[:3]]
            return {**record, "status": "error", "error": "; ".join(errors)}
        hw = load_config(point.hw, point.sets)
        arrays = {name: load_array(path) for name, path in point.traces}
        run = simulate(result.typed, hw, arrays, functional=not point.timing_only)
        a = analyze(result.typed, "artifact", hw).bind(dict(run.bindings))
        t = a.totals
        alloc = a.allocated_compute
        record.update({
            "status": "deadlock" if run.deadlock else "ok",
            "cycles": run.cycles,
            "off_chip_bytes": run.useful_bytes,
            "on_chip_bytes": json_value(t["on_chip_bytes"]),
            "on_chip_bytes_on_demand": json_value(t["on_chip_bytes_on_demand"]),
            "flops": run.flops,
            "allocated_compute": alloc,
            "compute_utilization": run.flops / run.cycles / alloc if alloc and run.cycles
            else None,
            "bw_utilization": run.achieved_bw / hw.peak_bw if run.cycles else None,
            "hbm_model": hw.hbm.model,
            "row_hit_rate": run.row_hit_rate,
        })
    except Exception as e:  # a bad point must not end the sweep
        record.update({"status": "error", "error": f"{type(e).__name__}: {e}"})
    record["wall_seconds"] = round(time.perf_counter() - t0, 3)
    return record


def finished_keys(path: str) -> set[str]:
    """Keys of the points an existing results file holds (a torn last line is ignored)."""
    keys = set()
    if not os.path.exists(path):
        return keys
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                keys.add(json.loads(line)["key"])
            except (json.JSONDecodeError, KeyError):
                continue
    return keys


def point_label(rec: dict) -> str:
    """A short readable name of a result: program, params, traces, hardware."""
    params = ", ".join(f"{k}={v}" for k, v in sorted(rec["params"].items()))
    traces = ", ".join(f"{k}={os.path.basename(v)}" for k, v in sorted(rec["traces"].items()))
    parts = [os.path.basename(rec["program"]), params, traces,
             rec["hw"] + ("+" + ",".join(rec["sets"]) if rec["sets"] else "")]
    return " ".join(p for p in parts if p)


def _drop_torn_line(path: str) -> None:
    """A sweep killed mid-write leaves a partial last line: cut it before appending."""
    if not os.path.exists(path):
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


def read_results(path: str) -> list[dict]:
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


@dataclass
class Sweep:
    points: list[Point]
    out: str
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    executor: object = None  # a concurrent.futures.Executor; a local process pool by default

    def run(self, resume: bool = False, progress=None) -> list[dict]:
        """Run the points not finished yet; append each record as soon as it arrives."""
        done = finished_keys(self.out) if resume else set()
        if not resume and os.path.exists(self.out):
            raise FileExistsError(self.out)
        if resume:
            _drop_torn_line(self.out)
        todo = [p for p in self.points if p.key not in done]
        records = []
        executor = self.executor or ProcessPoolExecutor(max_workers=max(1, self.jobs))
        try:
            with open(self.out, "a", encoding="utf-8") as f:
                futures = [executor.submit(run_point, p) for p in todo]
                for fut in as_completed(futures):
                    rec = fut.result()
                    f.write(json.dumps(rec, sort_keys=True) + "\n")
                    f.flush()
                    records.append(rec)
                    if progress is not None:
                        progress(rec)
        finally:
            if self.executor is None:
                executor.shutdown(cancel_futures=True)
        return records


__all__ = ["Point", "Sweep", "grid_points", "run_point", "read_results", "asdict"]
