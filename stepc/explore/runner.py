"""Running the points of a sweep: one worker process per point, records appended as JSON lines.

A point is a program file, its `-D` overrides, a hardware spec (preset name or TOML path,
plus `--set` items) and trace files for external streams. Before anything runs, the
submitting process reads every input: the program with each file it imports, the traces,
the hardware configuration. Workers get those contents, never paths, so a worker in another
directory or on another machine runs exactly what was read.

A point's key holds its settings and digests of those inputs and of stepc's own code, so
`--resume` reuses a record only while the program (with its imports), the traces, the
hardware and stepc are what they were. Every record is sealed with a digest of its fields:
a record edited after it was written is not reused either. Failed points are retried.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import time
from collections import Counter
from concurrent.futures import as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path

import stepc
from stepc.explore.pool import LocalPool
from stepc.schemas import schema

DONE = ("ok", "deadlock")  # statuses a resumed sweep keeps; errors are retried
# Files of the package that only present results: editing them leaves records valid.
PRESENTATION = ("api/", "cli/", "docgen.py", "viz/", "reproduction/", "ops/examples/",
                "explore/plot.py", "explore/pareto.py", "tune/")


@functools.cache
def code_digest() -> str:
    """stepc's version and a digest of every package file a record depends on (all code,
    grammar and hardware files except the presentation modules)."""
    root = Path(stepc.__file__).parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.suffix in (".py", ".tx", ".toml") and not rel.startswith(PRESENTATION) \
                and "__pycache__" not in rel:
            h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{stepc.__version__}+{h.hexdigest()[:12]}"


def _sha(*chunks: bytes) -> str:
    h = hashlib.sha256()
    for c in chunks:
        h.update(len(c).to_bytes(8, "little") + c)
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Point:
    program: str
    params: tuple[tuple[str, int], ...]
    hw: str
    sets: tuple[str, ...] = ()
    traces: tuple[tuple[str, str], ...] = ()
    timing_only: bool = True
    tag: str = ""  # a name for the series this point belongs to
    digests: tuple[tuple[str, str], ...] = ()  # of its inputs and of stepc (see `prepare`)
    # (name, node-name prefix): the record gets the cycle each prefix's operators finished
    milestones: tuple[tuple[str, str], ...] = ()

    def settings(self) -> dict:
        out = {"program": self.program, "params": dict(self.params), "hw": self.hw,
               "sets": list(self.sets), "traces": dict(self.traces),
               "timing_only": self.timing_only, "tag": self.tag}
        if self.milestones:
            out["milestones"] = dict(self.milestones)
        return out

    @property
    def ident(self) -> str:
        """The point's settings: the same across edits of its files."""
        return json.dumps(self.settings(), sort_keys=True)

    @property
    def key(self) -> str:
        """Settings and input digests: a record with this key ran on these very inputs."""
        return json.dumps({**self.settings(), "digests": dict(self.digests)}, sort_keys=True)

    @property
    def run_key(self) -> str:
        """The key without the series tag: points with equal run keys simulate alike."""
        return json.dumps({**self.settings(), "tag": None, "digests": dict(self.digests)},
                          sort_keys=True)


def record_for(record: dict, point: Point) -> dict:
    """A record of a point with `point`'s run key (another series' point that simulated
    the same), under `point`'s tag and key."""
    out = {**record, "tag": point.tag, "key": point.key}
    out["seal"] = seal(out)
    return out


@dataclass
class Inputs:
    """What a worker needs, read by the submitting process: no worker opens a file."""
    files: dict[str, bytes] = field(default_factory=dict)  # the program and its imports
    arrays: dict = field(default_factory=dict)  # stream -> trace array
    hw: object = None  # the hardware configuration
    error: str = ""  # why an input could not be read (the point then fails without running)


def prepare(point: Point, traces: dict | None = None) -> tuple[Point, Inputs]:
    """Read a point's inputs; return the point with their digests, and the inputs.
    `traces` caches trace files shared by several points."""
    from stepc.frontend import program_files
    from stepc.hw import ConfigError, load_config
    from stepc.traces import TraceError, load_array

    traces = {} if traces is None else traces
    inputs = Inputs(files=program_files(point.program))
    digests = {"program": program_digest(inputs.files)}
    for stream, path in point.traces:
        if path not in traces:
            try:
                with open(path, "rb") as f:
                    data = f.read()
                traces[path] = (_sha(data), load_array(path), "")
            except (OSError, TraceError) as e:
                msg = f"no such file: {path}" if isinstance(e, FileNotFoundError) else str(e)
                traces[path] = ("unreadable", None, f"trace {stream}: {msg}")
        digest, array, error = traces[path]
        digests[f"trace {stream}"] = digest
        inputs.arrays[stream] = array
        inputs.error = inputs.error or error
    try:
        inputs.hw = load_config(point.hw, point.sets)
        digests["hw"] = hw_digest(inputs.hw)
    except ConfigError as e:
        digests["hw"] = "unreadable"
        inputs.error = inputs.error or str(e)
    digests["stepc"] = code_digest()
    return replace(point, digests=tuple(sorted(digests.items()))), inputs


def program_digest(files: dict[str, bytes]) -> str:
    """The digest of a program's files (names and contents) that a point's key holds."""
    return _sha(*(c for name in sorted(files) for c in (name.encode(), files[name])))


def hw_digest(hw) -> str:
    """The digest of a hardware configuration that a point's key holds."""
    return _sha(hw.to_toml().encode())


def grid_points(programs: list[str], grids: dict[str, list[int]], hws: list[str],
                sets: tuple[str, ...], traces: dict[str, list[str]],
                timing_only: bool, declared: dict[str, set[str]] | None = None) -> list[Point]:
    """The cross product of programs x parameter values x hardware x traces. With
    `declared` (program -> its params), a param a program does not declare is not swept
    for it (as in `stepc tune`): that program runs once per value of the others."""
    tnames = sorted(traces)
    out = []
    for program in programs:
        names = sorted(n for n in grids if declared is None or n in declared[program])
        for values in itertools.product(*(grids[n] for n in names)):
            for hw in hws:
                for paths in itertools.product(*(traces[n] for n in tnames)):
                    out.append(Point(program, tuple(zip(names, values)), hw, tuple(sets),
                                     tuple(zip(tnames, paths)), timing_only))
    return out


def seal(record: dict) -> str:
    """A digest of a record's fields (without its seal)."""
    body = json.dumps({k: v for k, v in record.items() if k != "seal"}, sort_keys=True)
    return _sha(body.encode())


def _diagnostic_text(d) -> str:
    return f"{d.span}: {d.message}" if d.span else d.message


_RECENT = 1  # programs (and analyses) a worker keeps: the next point often shares it
_compiled: dict = {}
_analyses: dict = {}
_kept: dict = {}  # programs compiled elsewhere, with their analyses (`keep_compiled`)
_parsed: dict = {}  # (file name, contents) -> (source, syntax tree), for every later compile


def _remember(cache: dict, key, make):
    """`cache[key]`, made on a miss; the oldest entries go beyond `_RECENT`."""
    if key not in cache:
        cache[key] = make()
        while len(cache) > _RECENT:
            cache.pop(next(iter(cache)))
    return cache[key]


def keep_compiled(digest: str, program: str, params: tuple[tuple[str, int], ...],
                  result, analyses: dict, room: int) -> None:
    """Let this process's next points of the program (`program_digest`) with these params
    reuse `result`, compiled before, and its symbolic analysis under each hardware of
    `analyses` (`hw_digest` -> analysis); the `room` latest such programs are kept, apart
    from the recent ones: `stepc tune` compiles and analyses each candidate once, for its
    analysis stage and its runs."""
    _kept[(digest, program, params)] = (result, analyses)
    while len(_kept) > room:
        _kept.pop(next(iter(_kept)))


def compile_cached(files: dict[str, bytes], path: str, params: dict[str, int]):
    """`compile_files`, parsing each file once per process: a file's syntax tree does not
    depend on the params, and a figure (or a search) compiles the same files under many."""
    from stepc.frontend import compile_files
    return compile_files(files, path, params, _parsed)


def _program_and_analysis(point: Point, inputs: Inputs):
    """The point's compiled program and its symbolic analysis, shared by the points that
    follow with the same program contents and params (and hardware, for the analysis):
    a figure's traces of one schedule compile and analyse once per worker."""
    from stepc.analyze import analyze

    digests = dict(point.digests)
    key = (digests.get("program"), point.program, point.params)
    kept = _kept.get(key)
    if kept is not None and digests.get("hw") in kept[1]:
        return kept[0], kept[1][digests.get("hw")]
    result = kept[0] if kept is not None else \
        _remember(_compiled, key, lambda: compile_cached(inputs.files, point.program,
                                                         dict(point.params)))
    if not result.ok:
        errors = [_diagnostic_text(d) for d in result.diagnostics.errors[:3]]
        raise _InputError("; ".join(errors))
    analysis = _remember(_analyses, (key, digests.get("hw")),
                         lambda: analyze(result.typed, "artifact", inputs.hw))
    return result, analysis


def run_point(point: Point, inputs: Inputs | None = None) -> dict:
    """Analyze and simulate one point (in a worker process); failures become records."""
    from stepc.measure import measure

    if inputs is None:
        point, inputs = prepare(point)
    record = {"schema": schema("sweep"), **point.settings(), "key": point.key,
              "digests": dict(point.digests)}
    t0 = time.perf_counter()
    try:
        if inputs.error:
            raise _InputError(inputs.error)
        result, analysis = _program_and_analysis(point, inputs)
        measured = measure(result.typed, inputs.hw, inputs.arrays,
                           functional=not point.timing_only, analysis=analysis)
        record.update(measured.to_dict(dict(point.milestones)))
    except _InputError as e:
        record.update({"status": "error", "error": str(e)})
    except Exception as e:  # a bad point must not end the sweep
        record.update({"status": "error", "error": f"{type(e).__name__}: {e}"})
    record["wall_seconds"] = round(time.perf_counter() - t0, 3)
    record["seal"] = seal(record)
    return record


class _InputError(Exception):
    """A point whose program or inputs are wrong: reported without a Python type name."""


def point_label(rec: dict) -> str:
    """A short readable name of a result: program, params, traces, hardware."""
    params = ", ".join(f"{k}={v}" for k, v in sorted(rec["params"].items()))
    traces = ", ".join(f"{k}={os.path.basename(v)}" for k, v in sorted(rec["traces"].items()))
    parts = [os.path.basename(rec["program"]), params, traces,
             rec["hw"] + ("+" + ",".join(rec["sets"]) if rec["sets"] else "")]
    return " ".join(p for p in parts if p)


def natural_key(text: str) -> tuple:
    """Sort key under which `B=256` comes before `B=1024` (digit runs compare as numbers)."""
    import re
    return tuple((0, int(t), "") if t.isdigit() else (1, 0, t)
                 for t in re.split(r"(\d+)", text) if t)


def point_order(rec: dict) -> tuple:
    """Sort key of records: program, then params and traces by value, then hardware."""
    return (os.path.basename(rec["program"]),
            tuple((k, natural_key(str(v))) for k, v in sorted(rec["params"].items())),
            tuple((k, natural_key(os.path.basename(v)))
                  for k, v in sorted(rec["traces"].items())),
            natural_key(rec["hw"]), tuple(rec["sets"]))


def _drop_torn_line(path: str) -> None:
    """A sweep killed mid-write leaves a partial last line: cut it before appending."""
    if not os.path.exists(path):
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data and not data.endswith(b"\n"):
            f.truncate(data.rfind(b"\n") + 1)


class ResultsFileError(Exception):
    """A file given as sweep results that is not one (binary, not JSON lines, or records of
    something else); the message says which line and why."""


RECORD_FIELDS = ("key", "program", "params", "status")  # what every sweep record holds


def read_results(path: str) -> list[dict]:
    """Every record of a results file, in file order (a torn last line is skipped); raises
    ResultsFileError for a file that is not sweep results."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ResultsFileError(f"{path}: cannot read: {e.strerror or e}") from None
    nul = data.find(b"\0")
    if nul >= 0:
        raise ResultsFileError(f"{path}: not a results file: it holds binary data (a NUL "
                               f"byte at offset {nul:,})")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ResultsFileError(f"{path}: not a results file: not UTF-8 text (byte "
                               f"{e.start:,})") from None
    lines = text.split("\n")
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            if number == len(lines):  # no newline after it: a write cut short
                break
            raise ResultsFileError(f"{path}:{number}: not a results file: the line is not "
                                   f"JSON ({e.msg})") from None
        missing = [k for k in RECORD_FIELDS if not isinstance(rec, dict) or k not in rec]
        if missing:
            raise ResultsFileError(f"{path}:{number}: not a results file: the line is not a "
                                   f"stepc sweep record (no `{missing[0]}`)")
        out.append(rec)
    return out


def _ident(rec: dict) -> str:
    try:
        settings = json.loads(rec["key"])
    except (TypeError, ValueError):
        return ""
    settings.pop("digests", None)
    return json.dumps(settings, sort_keys=True)


def latest_records(records: list[dict]) -> list[dict]:
    """The last record of each point (by its settings), in order of first appearance: a
    resumed sweep appends re-runs after the records they replace."""
    latest: dict[str, dict] = {}
    for rec in records:
        latest[_ident(rec)] = rec
    return list(latest.values())


def _why_changed(old: dict, point: Point) -> str:
    """Which input of a point changed since an earlier record was made."""
    new = dict(point.digests)
    was = old.get("digests", {})
    for name, what in (("stepc", "stepc changed"), ("program", "program changed"),
                       ("hw", "hardware changed")):
        if was.get(name) != new.get(name):
            return what
    return "trace changed"


@dataclass
class Earlier:
    """What a results file already holds for a list of points."""
    reusable: dict[str, dict] = field(default_factory=dict)  # key -> record
    why_rerun: dict[str, str] = field(default_factory=dict)  # key -> reason


def earlier_results(path: str, points: list[Point]) -> Earlier:
    """The records a resumed sweep may reuse, and for every other point why it runs: new,
    failed before, its record altered since it was written, or an input changed."""
    out = Earlier()
    if not os.path.exists(path):
        return out
    by_key = {p.key: p for p in points}
    by_ident = {p.ident: p for p in points}
    last: dict[str, tuple[str, dict]] = {}  # point key -> (verdict, record) of its last record
    for rec in read_results(path):
        p = by_key.get(rec["key"]) or by_ident.get(_ident(rec))
        if p is None:
            continue
        if "seal" not in rec or "digests" not in rec:
            verdict = "stepc changed"  # a record of a stepc that did not seal records
        elif rec["seal"] != seal(rec):
            verdict = "record altered"
        elif rec["key"] != p.key:
            verdict = _why_changed(rec, p)
        elif rec.get("status") not in DONE:
            verdict = "failed before"
        else:
            verdict = "reuse"
        if verdict == "reuse" or last.get(p.key, ("",))[0] != "reuse":
            last[p.key] = (verdict, rec)
    for key, (verdict, rec) in last.items():
        if verdict == "reuse":
            out.reusable[key] = rec
        else:
            out.why_rerun[key] = verdict
    return out


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


__all__ = ["Point", "Sweep", "LocalPool", "Pending", "Outcome", "Interrupted", "grid_points",
           "run_point", "read_results", "ResultsFileError", "latest_records", "prepare",
           "code_digest", "point_order"]
