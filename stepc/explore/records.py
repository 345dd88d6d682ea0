"""The records of a sweep's results file: sealed JSON lines, read back, and which of them a
resumed sweep may reuse. Every record is sealed with a digest of its fields: a record
edited after it was written is not reused. Failed points are retried."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from stepc.explore.points import Point, short_digest

DONE = ("ok", "deadlock")  # statuses a resumed sweep keeps; errors are retried


def record_for(record: dict, point: Point) -> dict:
    """A record of a point with `point`'s run key (another series' point that simulated
    the same), under `point`'s tag and key."""
    out = {**record, "tag": point.tag, "key": point.key}
    out["seal"] = seal(out)
    return out


def seal(record: dict) -> str:
    """A digest of a record's fields (without its seal)."""
    body = json.dumps({k: v for k, v in record.items() if k != "seal"}, sort_keys=True)
    return short_digest(body.encode())


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
