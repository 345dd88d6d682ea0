"""The nesting limit of .step text: brackets, and the levels an expression or a block
nests, at most MAX_NESTING deep.

Every pass over a program (the parsers, elaboration, the checker, sympy's expressions)
recurses once per level, so without a limit `x[0][0]...` or `1 - 1 - ...` a few thousand
long ends in Python's recursion limit. The bundled programs nest at most 7 levels.
"""

from __future__ import annotations

import functools
import re

from stepc.codes import NESTED_TOO_DEEPLY
from stepc.diagnostics import Diagnostic, Severity, StepError
from stepc.grammar import ast
from stepc.source import SourceFile, Span

MAX_NESTING = 24  # levels; textX parses this many brackets from a stack 300 frames deep
# operators in one chain (`a + b + ... `): textX reads a chain without recursing, and every
# later pass takes a 256-term sum from a thread 300 frames deep (tests/test_hostile_programs.py)
MAX_CHAIN = 256

# a bracket, or a comment or string (skipped whole: brackets in them do not count); a
# string runs to its closing quote as the grammar's STRING does, or to the end of the text
_BRACKET = re.compile(r"""[(\[{]|[)\]}]|\#[^\n]*|"(?:\\"|[^"])*+(?:"|$)|'(?:\\'|[^'])*+(?:'|$)""")
_LEVELS = (ast.Index, ast.Neg, ast.Call, ast.ListLit, ast.ForLoop, ast.GraphDef)


def check_brackets(src: SourceFile) -> None:
    """Refuse text whose brackets nest deeper than MAX_NESTING, before a parser sees it."""
    depth = 0
    for m in _BRACKET.finditer(src.text):
        c = m.group()
        if c in "([{":
            depth += 1
            if depth > MAX_NESTING:
                raise _refusal(src.span(m.start(), m.end()),
                               f"brackets nest more than {MAX_NESTING} deep here")
        elif c in ")]}":
            depth = max(0, depth - 1)


def check_levels(module: ast.Module, src: SourceFile) -> None:
    """Refuse a syntax tree nested deeper than MAX_NESTING levels (each index, negation,
    call, list, loop and graph counts one, and each index of an assignment's target, which
    builds an array that deep), or with more than MAX_CHAIN operators nested in one
    expression. Iterative: the tree may be deep."""
    todo: list[tuple[object, int, int]] = [(s, 0, 0) for s in module.statements]
    while todo:
        node, level, chain = todo.pop()
        if isinstance(node, tuple):
            todo.extend((x, level, chain) for x in node)
            continue
        fields = _children(type(node))
        if not fields:
            continue
        if isinstance(node, ast.BinOp):
            chain += 1
        elif isinstance(node, _LEVELS):
            level += 1
        elif isinstance(node, ast.Target):
            level += len(node.indices)
        if level > MAX_NESTING:
            raise too_deep(node.span)
        if chain > MAX_CHAIN:
            raise too_long(node.span)
        todo.extend((getattr(node, f), level, chain) for f in fields)


def too_deep(span: Span) -> StepError:
    """The error for syntax nested past MAX_NESTING levels, at the start of `span`."""
    return _refusal(Span(span.file, span.line, span.col, span.line, span.col + 1),
                    f"this nests more than {MAX_NESTING} levels deep (each index, call, "
                    "list, loop and graph counts one; brackets alone do not)")


def too_long(span: Span) -> StepError:
    """The error for more than MAX_CHAIN operators in one expression, at `span`'s start."""
    return _refusal(Span(span.file, span.line, span.col, span.line, span.col + 1),
                    f"this expression chains more than {MAX_CHAIN} operators")


@functools.cache
def _children(kind: type) -> tuple[str, ...]:
    """The fields of a syntax-tree class that may hold other nodes (not names, numbers,
    strings or spans); () for anything else."""
    fields = getattr(kind, "__dataclass_fields__", {})
    return tuple(f for f, info in fields.items() if not f.endswith("span")
                 and info.type not in ("str", "int", "bool", "str | None", "int | None"))


def _refusal(span: Span, what: str) -> StepError:
    return StepError([Diagnostic(NESTED_TOO_DEEPLY, Severity.ERROR,
                                 f"{what}: name some inner parts (`t = ...`) to nest less",
                                 span)])
