"""Writing searched FIFO depths into a program's source as `depth=` attributes."""

from __future__ import annotations

import re
from dataclasses import dataclass

from stepc.source import Span

DEPTH_ATTR = re.compile(r"\bdepth\s*=\s*(\[[^\]]*\]|\d+)")


@dataclass
class CallDepths:
    """The depths of one call's stream inputs, by input slot."""

    span: Span
    inputs: int  # stream inputs of the call
    current: list[int]  # each input's depth before the edit
    depths: dict[int, int]  # input slot -> new depth


def with_depths(text: str, calls: list[CallDepths]) -> str:
    """`text` with each call's `depth=` attribute set (added, or its value replaced): one
    value when every input takes the same depth, else one per input."""
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)

    def offset(line: int, col: int) -> int:
        return starts[line - 1] + col - 1

    for call in sorted(calls, key=lambda c: (c.span.line, c.span.col), reverse=True):
        begin = offset(call.span.line, call.span.col)
        end = offset(call.span.end_line, call.span.end_col)
        source = text[begin:end]
        close = source.rstrip().rfind(")")
        if close < 0:
            continue
        values = [call.depths.get(i, call.current[i]) for i in range(call.inputs)]
        value = str(values[0]) if len(set(values)) == 1 else \
            "[" + ", ".join(str(v) for v in values) + "]"
        found = DEPTH_ATTR.search(source)
        if found:
            source = source[:found.start()] + f"depth={value}" + source[found.end():]
        else:
            source = source[:close] + f", depth={value}" + source[close:]
        text = text[:begin] + source + text[end:]
    return text
