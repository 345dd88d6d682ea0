"""What each MCP tool does, on the Python API: arguments in, a JSON-ready result out. These
run in the worker process (stepc.mcp.worker), which keeps checked programs cached between
calls; a problem with the request raises `Refused` (or a `StepError`), which the server
reports as a tool error."""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import tempfile
from collections import OrderedDict
from typing import Any

from stepc.app import InputError, SimulationError
from stepc.diagnostics import StepError, render_text
from stepc.mcp.schemas import LADDER
from stepc.mcp.workspace import MAX_FILE_BYTES, Refused, Workspace

CACHED_PROGRAMS = 16  # checked programs kept between calls (the 128-expert MoE: ~10 MB)
DEFAULT_LIMIT = 100  # list items returned per page
MAX_LIMIT = 1000
BUSIEST = 10  # operators listed by a simulation's summary
MAX_TUNE_POINTS = 64  # a tune space larger than this is refused: `stepc tune` searches those
MAX_FORMULA = 1000  # characters of a symbolic value shown; a 128-expert total runs to 30,000


def jsonable(value: Any) -> Any:
    """`value` with only JSON types: symbolic values and other objects as their text,
    non-finite floats as None."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "item") and not hasattr(value, "free_symbols"):  # numpy scalars
        return jsonable(value.item())
    return str(value)


def shorten(value: Any) -> Any:
    """A symbolic value's text cut to MAX_FORMULA characters, saying how to get numbers."""
    if isinstance(value, dict):
        return {k: shorten(v) for k, v in value.items()}
    if isinstance(value, str) and len(value) > MAX_FORMULA:
        return (f"{value[:MAX_FORMULA]} ... ({len(value):,} characters in all: give `bind` "
                "or `traces` to have numbers)")
    return value


def page(items: list, args: dict) -> tuple[list, dict]:
    """One page of `items` by the `offset` and `limit` arguments, and where it sits."""
    offset = _int(args, "offset", 0, 0)
    limit = _int(args, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    chunk = items[offset:offset + limit]
    nxt = offset + limit if offset + limit < len(items) else None
    return chunk, {"total": len(items), "offset": offset, "returned": len(chunk),
                   "next_offset": nxt}


def _int(args: dict, name: str, default: int | None, minimum: int,
         maximum: int | None = None) -> int | None:
    value = args.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise Refused(f"{name}: expected an integer, found {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
        raise Refused(f"{name}: expected an integer {bound}, found {value}")
    return value


def _mapping(args: dict, name: str) -> dict:
    value = args.get(name) or {}
    if not isinstance(value, dict):
        raise Refused(f"{name}: expected an object, found {value!r}")
    return value


class Tools:
    """The tools of one workspace, with the cache of checked programs. They run with the
    workspace root as the working directory (as the worker does): imports and the names
    of diagnostics are relative to it."""

    def __init__(self, workspace: Workspace, scratch: str | None = None):
        self.workspace = workspace
        # where tune keeps its intermediate results while it runs (the worker's owner
        # removes it if the worker is stopped in the middle)
        self.scratch = scratch or str(workspace.root / ".stepc-mcp-scratch")
        self.cache: OrderedDict[tuple, tuple[Any, dict, dict]] = OrderedDict()
        self.hits = 0

    def warm(self) -> None:
        """Load the front end before the first call needs it (a tiny program, not kept)."""
        from stepc.app.inputs import checked_text
        checked_text("param N = 1\n", "<warm-up>")

    # ---- programs
    def source(self, args: dict) -> tuple[bytes, str, bool]:
        """(bytes, name, whether it is a workspace file) of the program the call names:
        `program` text or a workspace `path` (a .step file, or a STeP IR graph .pb), exactly
        one."""
        text, path = args.get("program"), args.get("path")
        if (text is None) == (path is None):
            raise Refused("give the program as `program` (its text) or `path` (a file in "
                          "the workspace), one of the two")
        if path is not None:
            real = self.workspace.file(path, "path")
            try:
                return real.read_bytes(), self.workspace.relative(real), True
            except OSError as e:
                raise Refused(f"path {path!r}: cannot read it ({e.strerror or e})") from None
        if not isinstance(text, str):
            raise Refused("program: expected the program's text")
        if len(text) > MAX_FILE_BYTES:
            raise Refused(f"program: {len(text):,} characters is too large for a .step "
                          f"program (at most {MAX_FILE_BYTES:,})")
        name = args.get("name") or "program.step"
        self.workspace.resolve(name, "name")  # imports resolve beside it
        if not os.path.basename(name) or os.path.basename(name) in (".", ".."):
            raise Refused(f"name {name!r}: expected a file name, such as mine.step")
        return text.encode("utf-8"), name, False

    def report(self, args: dict):
        """The check report of the program the call names (cached by its bytes, name and
        params), and its `check` document."""
        from stepc.app.inputs import checked_guarded, checked_text, data_files
        data, name, is_file = self.source(args)
        params = _mapping(args, "params")
        for k, v in params.items():
            if isinstance(v, bool) or not isinstance(v, int):
                raise Refused(f"params[{k!r}]: expected an integer, found {v!r}")
        key = (hashlib.sha256(data).hexdigest(), name, tuple(sorted(params.items())))
        hit = self.cache.get(key)
        if hit is not None and self._unchanged(hit[2]):
            self.cache.move_to_end(key)
            self.hits += 1
            return hit[0], hit[1]
        # a file is read by the API (a .pb graph is imported first), text compiled as is;
        # either way an import outside the workspace is refused before it is read
        report = checked_guarded(name, params, self.may_import) if is_file else \
            checked_text(data, name, params, self.may_import)
        outside = [p for p in data_files(report) if not self.workspace.contains(p)]
        if outside:
            raise Refused(f"the program reads the data file {outside[0]!r}, outside the "
                          "workspace")
        imported = {n: s.text for n, s in report.compiled.sources.items()
                    if n != name and (self.workspace.root / n).is_file()}
        doc = report.to_dict()
        self.cache[key] = (report, doc, imported)
        while len(self.cache) > CACHED_PROGRAMS:
            self.cache.popitem(last=False)
        return report, doc

    def may_read_config(self, path: str) -> None:
        """A hardware or part file, named from the server's working directory as the
        configuration reader opens it, must be a workspace file."""
        real = os.path.realpath(path)
        if not self.workspace.contains(real):
            raise Refused(f"the hardware configuration reads {path!r}, outside the workspace")
        self.workspace.file(real, "hardware file")

    def may_import(self, path: str) -> None:
        if not self.workspace.contains(path):
            raise Refused(f"the program imports {path!r}, outside the workspace")

    def _unchanged(self, imported: dict[str, str]) -> bool:
        """Whether the files a cached program imported still hold what it read."""
        for name, text in imported.items():
            try:
                if (self.workspace.root / name).read_text(encoding="utf-8") != text:
                    return False
            except OSError:
                return False
        return True

    def program(self, args: dict):
        """The checked program; its errors (or unknown params) as a StepError."""
        return self.checked(args).program()

    def checked(self, args: dict):
        """The check report of a program that may run: its errors (or unknown params)
        raise a StepError."""
        report, _ = self.report(args)
        report.program()
        return report

    def hw(self, args: dict) -> str | None:
        """The `hw` argument: a preset's name, or a configuration file in the workspace.
        The configuration (with `set`) is loaded here once under the workspace rule, so a
        part file it names (`[dram] part`, `set: {"dram.part": ...}`) outside the workspace
        is refused before anything reads it; the run then loads the same files."""
        from stepc.app.inputs import hardware_presets, load_hardware
        hw = args.get("hw")
        if hw is not None and hw not in hardware_presets():
            hw = str(self.workspace.file(hw, "hw"))
        try:
            load_hardware(hw, _mapping(args, "set"), may_read=self.may_read_config)
        except InputError:
            pass  # the call reports it
        return hw

    def traces(self, args: dict) -> dict[str, str]:
        return {stream: str(self.workspace.file(p, f"traces[{stream!r}]"))
                for stream, p in _mapping(args, "traces").items()}

    @contextlib.contextmanager
    def scratch_folder(self, tool: str, what: str):
        """A temporary folder for `what` a tool writes, in the workspace's hidden scratch
        directory; both go when the call ends."""
        try:
            os.makedirs(self.scratch, exist_ok=True)
            folder = tempfile.TemporaryDirectory(prefix=f"{tool}-", dir=self.scratch)
        except OSError as e:
            raise Refused(f"{tool} keeps {what} in the workspace, which is not writable "
                          f"({e.strerror or e})") from None
        try:
            with folder as path:
                yield path
        finally:
            with contextlib.suppress(OSError):
                os.rmdir(self.scratch)  # when empty

    # ---- the tools
    def check(self, args: dict) -> dict:
        report, doc = self.report(args)
        streams, where = page(doc["streams"], args)
        unknown = [d.message for d in report.unknown_params()]
        return {"program": doc["program"], "ok": report.ok and not unknown,
                "summary": doc["summary"], "diagnostics": doc["diagnostics"],
                "unknown_params": unknown, "streams": streams, "streams_page": where,
                "symbols": doc["symbols"]}

    def analyze(self, args: dict) -> dict:
        from stepc.app.program import analyze_checked
        report = self.checked(args)
        cost = analyze_checked(report, self.hw(args), _mapping(args, "bind"),
                               self.traces(args), args.get("onchip_model", "artifact")).cost
        doc = cost.to_dict()
        rows = doc.pop("ops")
        if args.get("by", "statement") == "statement":
            rows = by_statement(rows, cost.per_op)
        ops, where = page(jsonable(rows), args)
        doc = jsonable(doc)
        for key in ("totals", "roofline"):
            doc[key] = shorten(doc.get(key))
        return {**doc, "ops": shorten(ops), "ops_page": where, "warnings": cost.warnings}

    def simulate(self, args: dict) -> dict:
        from stepc.app.sim import simulate_checked
        report = self.checked(args)
        simulated = simulate_checked(report, self.hw(args), _mapping(args, "set"),
                                     self.traces(args), args.get("timing_only", True),
                                     _int(args, "max_cycles", None, 1))
        if simulated.deadlock:
            raise Refused(f"the simulation deadlocked:\n{simulated.deadlock}")
        run = simulated.run
        busiest = sorted(run.busy.items(), key=lambda kv: -kv[1])[:BUSIEST]
        return {"program": run.program, "hw": run.hw,
                "mode": "functional" if run.functional else "timing-only",
                "measurement": jsonable(run.measurement.to_dict()), "dims": jsonable(run.dims),
                "busiest": [{"name": n, "busy_cycles": b} for n, b in busiest],
                "outputs": {n: list(a.shape) for n, a in run.outputs.items()},
                "warnings": run.warnings}

    def format(self, args: dict) -> dict:
        from stepc.app.editor import format_bytes
        data, name, _ = self.source(args)
        old, new = format_bytes(name, data)
        return {"program": name, "changed": old != new, "formatted": new}

    def tune(self, args: dict) -> dict:
        from stepc.app.tune import tune
        paths = args.get("paths")
        if not isinstance(paths, list) or not paths:
            raise Refused("paths: expected a list of program files in the workspace")
        files = [str(self.workspace.file(p, "paths")) for p in paths]
        space = _mapping(args, "space")
        points = len(files) * math.prod(len(v) if isinstance(v, list) else 0
                                        for v in space.values())
        if not space or points == 0:
            raise Refused("space: expected params with lists of values, e.g. "
                          "{\"TILE_N\": [16, 32, 64]}")
        if points > MAX_TUNE_POINTS:
            raise Refused(f"the space has {points} points; this server tunes at most "
                          f"{MAX_TUNE_POINTS} (run `stepc tune` for larger searches)")
        traces = {s: [str(self.workspace.file(p, f"traces[{s!r}]"))
                      for p in (ps if isinstance(ps, list) else [ps])]
                  for s, ps in _mapping(args, "traces").items()}
        with self.scratch_folder("tune", "its intermediate results") as out:
            outcome = tune(files, {k: list(v) for k, v in space.items()},
                           objectives=args.get("objectives") or ["cycles"],
                           budgets=[(m, str(v)) for m, v in _mapping(args, "budgets").items()],
                           traces=traces, hw=self.hw(args) or "paper-eval", jobs=1,
                           model=args.get("model", "ref"), out=out)
        return _strip(jsonable(outcome.to_dict()), str(self.workspace.root) + "/")

    def estimate(self, args: dict) -> dict:
        from stepc.app.estimate import estimate
        wanted = args.get("fidelity") or ["roofline", "fluid"]
        if not isinstance(wanted, list) or any(w not in LADDER for w in wanted):
            raise Refused(f"fidelity: expected a list of {', '.join(LADDER)}")
        prog = self.program(args)
        hw = self.hw(args) or "paper-eval"
        estimates = estimate(prog, sorted(set(wanted), key=LADDER.index), hw,
                             self.traces(args), args.get("hw") or hw)
        return jsonable(estimates.to_dict(shown=lambda v: shorten(jsonable(v))))


COSTS = ("off_chip_bytes", "on_chip_bytes", "on_chip_bytes_on_demand", "flops")


def by_statement(rows: list[dict], per_op: dict[str, dict]) -> list[dict]:
    """Operator instances summed per statement (and operator kind): a loop's iterations
    and a graph's calls are one row, named with `[*]` for the loop index. A sum still
    symbolic is summarised by its first term (a 128-expert sum would fill pages)."""
    groups: dict[tuple, dict] = {}
    for row in rows:
        loc = row["location"] or {}
        key = (loc.get("file"), loc.get("line"), loc.get("column"), row["op"])
        group = groups.setdefault(key, {
            "statement": re.sub(r"\[\d+\]", "[*]", row["name"]), "op": row["op"],
            "location": row["location"], "instances": 0, **{c: [] for c in COSTS}})
        group["instances"] += 1
        for c in COSTS:
            group[c].append(per_op[row["name"]][c])
    for group in groups.values():
        for c in COSTS:
            terms = group[c]
            if all(isinstance(t, (int, float)) for t in terms):
                group[c] = sum(terms)
            elif len(terms) == 1:
                group[c] = terms[0]
            else:
                group[c] = f"sum of {len(terms)} instances; the first is {terms[0]}"
    return list(groups.values())


def _strip(value, prefix: str):
    """Workspace paths in results, relative to the root."""
    if isinstance(value, dict):
        return {k: _strip(v, prefix) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip(v, prefix) for v in value]
    return value.removeprefix(prefix) if isinstance(value, str) else value


def failure_message(e: BaseException) -> str:
    """A StepError as the CLI would print it (diagnostics with their source lines)."""
    if isinstance(e, SimulationError):
        return e.located()
    if isinstance(e, StepError) and e.diagnostics:
        return render_text(e.diagnostics, e.sources or {}).rstrip("\n")
    return str(e)

