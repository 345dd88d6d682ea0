"""Writing searched FIFO depths into a program's source as `depth=` attributes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from stepc.source import Span

DEPTH_ATTR = re.compile(r"depth\s*=")
OPENS, CLOSES = "([{", ")]}"


@dataclass
class CallDepths:
    """The depths of one call's stream inputs, by input slot."""

    span: Span
    inputs: int  # stream inputs of the call
    current: list[int]  # each input's depth before the edit
    depths: dict[int, int]  # input slot -> new depth


def with_depths(text: str, calls: list[CallDepths]) -> str:
    """`text` with each call's own `depth=` attribute set (added, or its value replaced): one
    value when every input takes the same depth, else one per input. Calls nested in others'
    arguments are edited each in its own argument list."""
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)
    edits = []  # (start, end, replacement) in the original text, never overlapping
    for call in calls:
        values = [call.depths.get(i, call.current[i]) for i in range(call.inputs)]
        value = str(values[0]) if len(set(values)) == 1 else \
            "[" + ", ".join(str(v) for v in values) + "]"
        found = _own_arguments(text, starts[call.span.line - 1] + call.span.col - 1)
        if found is None:
            continue
        close, attr = found
        edits.append((*attr, f"depth={value}") if attr else (close, close, f", depth={value}"))
    for begin, end, new in sorted(edits, reverse=True):
        text = text[:begin] + new + text[end:]
    return text


def _own_arguments(text: str, begin: int) -> tuple[int, tuple[int, int] | None] | None:
    """The offset of the closing parenthesis of the call starting at `begin`, and where its
    own `depth=` argument starts and ends (None when it has none): the one at the top level
    of its arguments, not a nested call's, whatever its value (a number, a list, a dim)."""
    open_at = text.find("(", begin)
    if open_at < 0:
        return None
    level, i, attr, start = 0, open_at, None, None
    while i < len(text):
        ch = text[i]
        if ch == "#":
            i = text.find("\n", i)
            if i < 0:
                return None
            continue
        if ch == '"':
            i = text.find('"', i + 1) + 1
            if i <= 0:
                return None
            continue
        if ch in OPENS:
            level += 1
        elif ch in CLOSES or (ch == "," and level == 1):
            if level == 1 and start is not None and attr is None:
                attr = (start, len(text[:i].rstrip()))
            level -= ch != ","
            if level == 0:
                return i, attr
        elif level == 1 and start is None and ch == "d" and not (text[i - 1].isalnum() or
                                                                  text[i - 1] == "_"):
            if DEPTH_ATTR.match(text, i):
                start = i
        i += 1
    return None
