"""Running the points of a sweep: one worker process per point, records appended as JSON
lines as they arrive, a resumed sweep reusing the records still valid (stepc.explore.points:
the points and their keys; .worker: one point's run; .records: the results file)."""

from __future__ import annotations

import json
import os
from collections import Counter
from concurrent.futures import as_completed
from dataclasses import dataclass, field

from stepc.explore.points import (
    Inputs,
    Point,
    code_digest,
    grid_points,
    hw_digest,
    natural_key,
    point_label,
    point_order,
    prepare,
    program_digest,
)
from stepc.explore.pool import LocalPool
from stepc.explore.records import (
    Earlier,
    ResultsFileError,
    _drop_torn_line,
    earlier_results,
    latest_records,
    read_results,
    record_for,
    seal,
)
from stepc.explore.worker import compile_cached, keep_compiled, run_point


@dataclass
class Outcome:
    """A finished sweep: one record per point (in point order), and what was reused."""
    records: list[dict]
    reused: int
    ran: int
    why_run: Counter  # reason -> points (re)run for it ("new" for points never run)
    shared: int = 0  # of those run, the records taken from another sweep's identical point


class Interrupted(Exception):
    """Ctrl-C stopped a sweep; the records finished so far are in the results file."""

    def __init__(self, finished: int, total: int):
        super().__init__(f"{finished} of {total} points finished")
        self.finished, self.total = finished, total


def _stop(executor, futures) -> None:
    """End a sweep now: a local pool's workers at once, else the futures not started."""
    if isinstance(executor, LocalPool):
        executor.terminate()
        return
    for fut in futures:
        fut.cancel()
    executor.shutdown(wait=False)


@dataclass
class Sweep:
    points: list[Point]
    out: str | None  # the results file (None: records are only returned)
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    executor: object = None  # a concurrent.futures.Executor; a local process pool by default

    def __post_init__(self) -> None:
        """Read every point's inputs now: `points` then carry their digests (and keys)."""
        cache: dict = {}
        prepared = [prepare(p, cache) for p in self.points]
        self.points = [p for p, _ in prepared]
        self.inputs = [i for _, i in prepared]

    def earlier(self) -> Earlier:
        return earlier_results(self.out, self.points) if self.out else Earlier()

    def run(self, resume: bool = False, progress=None) -> Outcome:
        """Run the points without a reusable record; append each record as it arrives."""
        if resume and self.out:  # every point finished before: no worker to start
            reusable = self.earlier().reusable
            if all(p.key in reusable for p in self.points):
                return Outcome([reusable[p.key] for p in self.points], len(self.points), 0,
                               Counter())
        executor = self.executor or LocalPool(self.jobs)
        try:
            return self.submit(executor, resume).collect(progress)
        finally:
            if self.executor is None and not _interrupted(executor):
                executor.shutdown()

    def submit(self, executor, resume: bool = False, rank: int = 1) -> Pending:
        """Hand the points without a reusable record to `executor`; `collect` the records.
        Several sweeps submitted to one pool keep its workers busy between them; a
        `LocalPool` runs the points of a lower `rank` first."""
        if not resume and self.out and os.path.exists(self.out):
            raise FileExistsError(self.out)
        earlier = self.earlier() if resume else Earlier()
        if resume and self.out:
            _drop_torn_line(self.out)
        records: list[dict | None] = [earlier.reusable.get(p.key) for p in self.points]
        todo = [i for i, r in enumerate(records) if r is None]
        why = Counter(earlier.why_rerun.get(self.points[i].key, "new") for i in todo)
        pending = Pending(self, executor, records, len(self.points) - len(todo), why)
        try:
            for i in todo:
                if self.inputs[i].error:  # nothing to run: record the reason
                    pending.keep(i, run_point(self.points[i], self.inputs[i]))
                else:
                    args = (run_point, self.points[i], self.inputs[i])
                    fut = executor.submit(*args, rank=rank, share=self.points[i].run_key) \
                        if isinstance(executor, LocalPool) else executor.submit(*args)
                    pending.futures[fut] = i
        except KeyboardInterrupt:
            pending.stop()
        return pending


def _shared(fut) -> bool:
    """Whether the future's record came from another sweep's identical point."""
    return getattr(fut, "shared", False)


def _interrupted(executor) -> bool:
    return getattr(executor, "stopped", False)


class Pending:
    """A sweep's submitted points: `collect` appends each record to the results file as it
    arrives; Ctrl-C stops the executor, keeps every finished record and raises
    `Interrupted`."""

    def __init__(self, sweep: Sweep, executor, records: list, reused: int, why: Counter):
        self.sweep, self.executor, self.records = sweep, executor, records
        self.reused, self.why = reused, why
        self.futures: dict = {}
        self.progress = None
        self.shared = 0
        out = sweep.out
        self.start = os.path.getsize(out) if out and os.path.exists(out) else 0
        self.appended: list[tuple[int, bytes]] = []  # (point index, line) in arrival order

    def keep(self, i: int, rec: dict, shared: bool = False) -> None:
        """Record point i's result; `shared`: it is another sweep's identical point's."""
        if shared:
            self.shared += 1
            rec = record_for(rec, self.sweep.points[i])
        if self.sweep.out:
            line = (json.dumps(rec, sort_keys=True) + "\n").encode()
            with open(self.sweep.out, "ab") as f:
                f.write(line)
            self.appended.append((i, line))
        self.records[i] = rec
        if self.progress is not None:
            self.progress(rec)

    def collect(self, progress=None) -> Outcome:
        """Wait for every submitted point; the outcome in point order."""
        self.progress = progress
        try:
            for fut in as_completed(self.futures):
                self.keep(self.futures.pop(fut), fut.result(), _shared(fut))
        except KeyboardInterrupt:
            self.stop()
        self.put_in_point_order()
        ran = sum(self.why.values())
        return Outcome(self.records, self.reused, ran, self.why, self.shared)

    def put_in_point_order(self) -> None:
        """Rewrite the records this run appended in point order (they were appended as
        they finished, so a killed run keeps them all): two runs of a sweep give the same
        file. The file's earlier lines are kept as they were."""
        lines = self.appended
        if not lines or lines == sorted(lines, key=lambda il: il[0]):
            return
        out = self.sweep.out
        with open(out, "rb") as f:
            head = f.read()
        if len(head) != self.start + sum(len(line) for _, line in lines):
            return  # someone else wrote to the file: leave it as it is
        tmp = f"{out}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(head[:self.start])
            f.writelines(line for _, line in sorted(lines, key=lambda il: il[0]))
        os.replace(tmp, out)

    def keep_finished(self) -> None:
        """Write the records of points already finished (before stopping)."""
        for fut in [f for f in self.futures if f.done() and not f.cancelled()]:
            if fut.exception() is None:
                self.keep(self.futures.pop(fut), fut.result(), _shared(fut))

    def stop(self):
        """Ctrl-C: keep what finished, end the executor's work, raise `Interrupted`."""
        self.keep_finished()
        _stop(self.executor, self.futures)
        raise Interrupted(sum(r is not None for r in self.records), len(self.records))


# the sweep's names, with those of its points, worker and records that callers import here
__all__ = ["Point", "Sweep", "LocalPool", "Pending", "Outcome", "Interrupted", "grid_points",
           "run_point", "read_results", "ResultsFileError", "latest_records", "prepare",
           "code_digest", "point_order", "point_label", "natural_key", "program_digest",
           "hw_digest", "Inputs", "Earlier", "earlier_results", "seal", "compile_cached",
           "keep_compiled"]
