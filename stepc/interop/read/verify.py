"""The import's last step: the program it wrote, checked as `stepc check` checks it. A
graph whose program does not check is not a valid graph (a zero dim the reader let through,
ranks that do not fit the streams they are given, kinds that do not fit together); its
error names the operators whose statements the checker's errors are on."""

from __future__ import annotations

import re

from stepc.diagnostics import Severity
from stepc.interop.read.reader import InvalidGraphError, printable
from stepc.interop.read.writer import Writer

_OPS = re.compile(r"# ops? (\d+(?:, \d+)*)")  # a statement's comment: `# op 5`, `# ops 6, 7, ..`
_TENSOR = re.compile(r"\s*tensor (\w+)")
MAX_NAMED = 3  # operators named in the message; the others are counted
QUOTED_LINE = 120  # characters of the offending line quoted


def refusal(w: Writer, text: str, compiled) -> InvalidGraphError | None:
    """The error of a graph whose program (`text`, `compiled` by the front end) does not
    check; None when it checks (warnings allowed, as `stepc check` allows them)."""
    if compiled.ok:
        return None
    lines = text.splitlines()
    errors = [d for d in compiled.diagnostics.sorted() if d.severity is Severity.ERROR]
    culprits = list(dict.fromkeys(i for d in errors
                                  for i in _ops_at(w, lines, d.span.line if d.span else 0)))
    said = "it could not be checked"
    if errors:
        first = errors[0]
        said = f"{first.message} [{first.code}]"
        if first.span is not None and 0 < first.span.line <= len(lines):
            code = printable(lines[first.span.line - 1].strip(), QUOTED_LINE)
            said += f" (line {first.span.line} of the program: `{code}`)"
        if len(errors) > 1:
            said += f"; {len(errors) - 1} more error{'s' * (len(errors) > 2)}"
    others = [w.by_id[i].label for i in culprits[1:MAX_NAMED]]
    if others:
        more = len(culprits) - 1 - len(others)
        said += (f"; also on operator{'s' * (len(culprits) > 2)} {', '.join(others)}" +
                 (f" and {more} more" if more else ""))
    return InvalidGraphError(w.path, "the program written for it does not check, so the graph "
                             f"is not a valid one: {said}",
                             w.by_id[culprits[0]] if culprits else None)


def _ops_at(w: Writer, lines: list[str], line: int) -> list[int]:
    """The ids of the operators whose statement is on `line` (1-based): its comment names
    them (on the statement's last line), or the tensor declared there is theirs."""
    if not 0 < line <= len(lines):
        return []
    tensor = _TENSOR.match(lines[line - 1])
    if tensor:
        found = w.tensor_ops.get(tensor.group(1))
        return [found] if found is not None else []
    for k in range(line - 1, len(lines)):
        m = _OPS.search(lines[k])
        if m:
            return [int(i) for i in m.group(1).split(", ") if int(i) in w.by_id]
        if not lines[k].strip():
            break
    return []
