"""Running one point in a worker process: compile (caching what the next points share),
analyze and measure it, and return its record (failures become records too)."""

from __future__ import annotations

import time

from stepc.explore.points import Inputs, Point, prepare
from stepc.explore.records import seal
from stepc.schemas import schema


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
