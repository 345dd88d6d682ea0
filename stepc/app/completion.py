"""Completion and signature help, from the text before the cursor (which need not parse
while the user types): operator names with their signatures, attribute names and allowed
values per operator, function names after `fn=`, names in scope, hardware presets."""

from __future__ import annotations

import re
from dataclasses import dataclass

from stepc.app.index import Index
from stepc.grammar import ast
from stepc.grammar.lexer import KEYWORDS, tokenize
from stepc.ops import FUNCTIONS, INITS, OPS
from stepc.ops.base import REQUIRED, fmt_attr
from stepc.types import DTYPE_BYTES

_HW_FLAG = re.compile(r"--hw[ =]([\w.-]*)$")


@dataclass(frozen=True)
class Item:
    """One completion: label, kind (operator, function, attribute, value, name, keyword,
    preset), detail, documentation and the text to insert."""

    label: str
    kind: str
    detail: str = ""
    doc: str = ""
    insert: str | None = None


@dataclass(frozen=True)
class CallContext:
    """The innermost call around the cursor: its callee, the argument index, and the
    keyword being typed or given a value (if any)."""

    func: str
    arg: int
    keyword: str | None  # `name=` the cursor is in the value of
    given: tuple[str, ...]  # keywords already given


def call_context(before: str) -> CallContext | None:
    """The call the cursor (at the end of `before`) is inside, if any."""
    tokens = [t for t in tokenize(before) if t.kind != "comment"]
    stack: list[list | None] = []  # [func, arg, keywords, last keyword]; None: a `[`
    prev = None
    for _i, t in enumerate(tokens):
        if t.text == "(":
            stack.append([prev.text if prev is not None and prev.kind == "name" else "",
                          0, [], None])
        elif t.text == "[":
            stack.append(None)
        elif t.text in (")", "]") and stack:
            stack.pop()
        elif stack and stack[-1] is not None:
            if t.text == ",":
                stack[-1][1] += 1
                stack[-1][3] = None
            elif t.text == "=" and prev is not None and prev.kind == "name":
                stack[-1][2].append(prev.text)
                stack[-1][3] = prev.text
        prev = t
    frames = [f for f in stack if f is not None]
    if not stack or stack[-1] is None or not frames or not frames[-1][0]:
        return None
    func, arg, given, keyword = frames[-1]
    if before.rstrip() != before:  # after a space, a keyword's value is complete
        keyword = keyword if before.rstrip().endswith("=") else None
    return CallContext(func, arg, keyword, tuple(given))


def complete(before: str, index: Index | None, file: str, line: int) -> list[Item]:
    """Completions for the cursor at the end of `before` (the text of the document up to
    it)."""
    current = before.rsplit("\n", 1)[-1]
    m = _HW_FLAG.search(current)
    if m:
        return preset_items()
    if "#" in current and _in_comment(current):
        return []
    ctx = call_context(before)
    if ctx is not None:
        if ctx.keyword is not None:
            return value_items(ctx.func, ctx.keyword, index, file, line)
        items = attribute_items(ctx)
        return items + name_items(index, file, line) + operator_items()
    return operator_items() + name_items(index, file, line) + keyword_items()


def operator_items() -> list[Item]:
    return [Item(name, "operator", spec.signature, spec.doc, f"{name}(") for name, spec in
            sorted(OPS.items())]


def keyword_items() -> list[Item]:
    return [Item(k, "keyword") for k in sorted(KEYWORDS - {"in"})]


def name_items(index: Index | None, file: str, line: int) -> list[Item]:
    if index is None:
        return []
    return [Item(d.name, "name", d.kind) for d in index.in_scope(file, line)]


def preset_items() -> list[Item]:
    from stepc.hw.config import preset_names
    return [Item(n, "preset", "hardware preset") for n in preset_names()]


def attribute_items(ctx: CallContext) -> list[Item]:
    """`name=` for each attribute of the operator (or function) not given yet."""
    if ctx.func in OPS:
        params = [p for p in OPS[ctx.func].all_params if not p.is_stream]
    elif ctx.func in FUNCTIONS:
        params = list(FUNCTIONS[ctx.func].attrs)
    else:
        return []
    return [Item(f"{p.name}=", "attribute", _param_detail(p), p.doc, f"{p.name}=")
            for p in params if p.name not in ctx.given]


def value_items(func: str, keyword: str, index: Index | None, file: str,
                line: int) -> list[Item]:
    """The values an attribute allows: functions for `fn=`, dtypes, init values, booleans,
    tensors."""
    spec = OPS.get(func)
    param = spec.param(keyword) if spec else None
    if param is None and func in FUNCTIONS:
        param = next((p for p in FUNCTIONS[func].attrs if p.name == keyword), None)
    if param is None:
        return name_items(index, file, line)
    if param.kind == "fn":
        use = spec.fn_use if spec else None
        return [Item(n, "function", ", ".join(f.uses), f.doc)
                for n, f in sorted(FUNCTIONS.items()) if use is None or use in f.uses]
    if param.kind == "dtype":
        return [Item(d, "value", f"{b} bytes") for d, b in DTYPE_BYTES.items()]
    if param.kind == "init":
        return [Item(n, "value", "initial value") for n in sorted(INITS)]
    if param.kind == "bool":
        return [Item("true", "value"), Item("false", "value")]
    if param.kind == "tensor" and index is not None:
        return [Item(d.name, "name", "tensor") for d in index.in_scope(file, line)
                if d.kind == "tensor"]
    return name_items(index, file, line)


def signature(ctx: CallContext, index: Index | None) -> tuple[str, list[tuple[str, str]],
                                                               int, str] | None:
    """(label, [(parameter label, doc)], active parameter, documentation) of the call
    around the cursor."""
    if ctx.func in OPS:
        spec = OPS[ctx.func]
        params = [(_param_label(p), p.doc) for p in spec.all_params]
        names = [p.name for p in spec.all_params]
        doc = f"{spec.signature}\n\n{spec.doc}"
    elif ctx.func in FUNCTIONS:
        fn = FUNCTIONS[ctx.func]
        params = [(_param_label(p), p.doc) for p in fn.attrs]
        names = [p.name for p in fn.attrs]
        doc = fn.doc
    else:
        graph = next((d for d in (index.defs if index else []) if d.kind == "graph"
                      and d.name == ctx.func), None)
        if graph is None:
            return None
        assert isinstance(graph.stmt, ast.GraphDef)  # a graph's definition is its statement
        names = [p.name for p in graph.stmt.params]
        params = [(n, "") for n in names]
        doc = f"graph defined at {graph.span}"
    if not params:
        return f"{ctx.func}()", [], 0, doc
    if ctx.keyword in names:
        active = names.index(ctx.keyword)
    else:
        streams = [i for i, (label, _) in enumerate(params) if label.endswith("...")]
        active = min(ctx.arg, streams[0]) if streams and ctx.arg >= streams[0] else ctx.arg
        active = min(active, len(params) - 1)
    label = f"{ctx.func}(" + ", ".join(p for p, _ in params) + ")"
    return label, params, active, doc


def _param_label(p) -> str:
    if p.is_stream:
        return f"{p.name}..." if p.kind in ("streams", "varstreams") else p.name
    return p.name if p.default is REQUIRED else f"{p.name}={_default(p.default)}"


def _param_detail(p) -> str:
    return f"{p.kind}" + ("" if p.default is REQUIRED else f", default {_default(p.default)}")


def _default(v) -> str:
    return "none" if v is None else fmt_attr(v)


def _in_comment(line: str) -> bool:
    """Whether the end of the line is inside a `#` comment (not in a string)."""
    return any(t.kind == "comment" for t in tokenize(line))
