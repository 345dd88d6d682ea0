"""The language server's hover text (Markdown): a stream's inferred type and where its
symbols came from, an operator's signature and doc (with roofline numbers when a hardware
preset is set), a param's value and how to override it."""

from __future__ import annotations

import os

import sympy

from stepc.app.document import Checked, Settings
from stepc.app.index import Def, Ref
from stepc.grammar import ast
from stepc.ops import FUNCTIONS, OPS
from stepc.types import DTYPE_BYTES, StreamType, fmt_dim, fmt_shape

MAX_INSTANCES = 3  # instances of a stream shown (loop iterations, graph instances)


def hover_text(checked: Checked, item: Def | Ref, settings: Settings) -> str | None:
    """Markdown for the name under the cursor, or None."""
    index = checked.index
    if isinstance(item, Ref) and item.call is not None:
        if item.name in OPS:
            return operator_text(checked, item.call, settings)
        if item.name in FUNCTIONS:
            return function_text(item.name)
    defs = index.resolve(item)
    if not defs:
        return function_text(item.name) if item.name in FUNCTIONS else None
    d = defs[0]
    if d.kind == "param":
        return param_text(checked, d, settings)
    if d.kind == "tensor":
        return tensor_text(checked, d)
    if d.kind == "stream":
        return stream_text(checked, d)
    if d.kind == "graph":
        assert isinstance(d.stmt, ast.GraphDef)  # a graph's definition is its statement
        params = ", ".join(p.name for p in d.stmt.params)
        return f"```step\ngraph {d.name}({params})\n```\n\ndefined at `{_where(d.span)}`"
    if d.kind == "loopvar":
        s = d.stmt
        return f"loop variable `{d.name}` of the loop at `{_where(s.span)}`"
    if d.kind == "graphparam":
        return f"parameter `{d.name}` of graph `{d.scope[2]}`"
    return None


def stream_text(checked: Checked, d: Def) -> str:
    """The stream's type, per instance, and the origin of each symbol in it."""
    types = checked.index.stream_types(d)
    if not types:
        return f"stream `{d.name}`: no inferred type (the program has errors here)"
    lines = [f"```step\n{label} : {t}\n```" for label, t in types[:MAX_INSTANCES]]
    if len(types) > MAX_INSTANCES:
        lines.append(f"... and {len(types) - MAX_INSTANCES} more instances "
                     f"({len(types)} in all: loop iterations or graph instances)")
    first = types[0][1]
    lines.append(f"shape `{fmt_shape(first.shape)}` of `{first.elem}`")
    lines += symbol_lines(checked, [t for _, t in types[:MAX_INSTANCES]])
    return "\n\n".join(lines)


def symbol_lines(checked: Checked, types: list[StreamType]) -> list[str]:
    """One line per symbol of the types: its kind, what introduced it and why."""
    typed = checked.compiled.typed_program
    names: list[str] = []
    for t in types:
        expr = sympy.Add(*t.shape) + t.elem.bytes
        names += [s.name for s in sorted(expr.free_symbols, key=str) if s.name not in names]
    out = []
    resolved = {s.name: v for s, v in typed.subst.items()}
    for name in names:
        info = typed.symbols.infos.get(name)
        if info is None:
            continue
        kind = {"dynamic": "dynamic-regular", "ragged": "ragged"}.get(info.kind, info.kind)
        where = f" at `{_where(info.span)}`" if info.span else ""
        origin = f"introduced by `{info.origin}`{where}" if info.origin else f"declared{where}"
        value = f" = {fmt_dim(resolved[name])} (assumed)" if name in resolved else ""
        out.append(f"- `{name}`{value}: {kind}, {origin}: {info.reason}")
    return ["symbols:\n" + "\n".join(out)] if out else []


def param_text(checked: Checked, d: Def, settings: Settings) -> str:
    typed = checked.compiled.typed
    value = typed.program.params.get(d.name) if typed is not None else None
    assert isinstance(d.stmt, ast.Param)  # a param's definition is its statement
    declared = d.stmt.value
    text = f"```step\nparam {d.name} = {value if value is not None else '?'}\n```"
    if d.name in settings.defines:
        text += f"\n\noverridden by the editor setting `stepc.defines` ({d.name} = " \
                f"{settings.defines[d.name]}); the program says `{_source(checked, declared)}`"
    else:
        text += f"\n\ndeclared at `{_where(d.span)}`"
    return text + f"\n\noverride with `-D {d.name}=VALUE` (`stepc check`, `analyze`, " \
                  "`sim`, `sweep`) or the editor setting `stepc.defines`"


def tensor_text(checked: Checked, d: Def) -> str:
    typed = checked.compiled.typed
    t = typed.program.tensors.get(d.name) if typed is not None else None
    if t is None:
        return f"tensor `{d.name}`"
    size = DTYPE_BYTES[t.dtype]
    for n in t.shape:
        size *= n
    return (f"```step\ntensor {t.name} : {t.dtype}{list(t.shape)} {t.role}\n```\n\n"
            f"{size:,} bytes off-chip")


def operator_text(checked: Checked, call: ast.Call, settings: Settings) -> str:
    """Signature, doc, the call's inferred output types and, with a hardware preset, its
    roofline numbers."""
    spec = OPS[call.func]
    parts = [f"```step\n{spec.signature}\n```", spec.doc]
    typed = checked.compiled.typed
    nodes = checked.index.call_nodes(call)
    if typed is not None and nodes:
        node = typed.program.nodes[nodes[0]]
        outs = [f"- `{node.port_label(p)}` : `{typed.types[(node.name, p)]}`"
                for p in range(len(node.outputs)) if (node.name, p) in typed.types]
        many = f" ({len(nodes)} instances; the first shown)" if len(nodes) > 1 else ""
        if outs:
            parts.append(f"outputs of `{node.name}`{many}:\n" + "\n".join(outs))
        if settings.hw:
            parts.append(roofline_text(checked, nodes[0], settings.hw))
    return "\n\n".join(parts)


def roofline_text(checked: Checked, node: str, hw: str) -> str:
    """Off-chip bytes, FLOPs and roofline cycles of one operator instance and of the
    whole program on hardware `hw` (the analysis is made once per check and preset)."""
    from stepc.analyze import analyze, roofline
    from stepc.hw.config import ConfigError, load_config
    from stepc.report.roofline import operator_roofline_text

    if hw not in checked.costs:
        try:
            config = load_config(hw, ())
        except ConfigError as e:
            return f"roofline: hardware `{hw}`: {e}"
        a = analyze(checked.compiled.typed_program, "artifact", config)
        checked.costs[hw] = (a, config, roofline(a, config))
    a, config, roof = checked.costs[hw]
    return operator_roofline_text(a, config, roof, hw, node)


def needs_analysis(item: Def | Ref, settings: Settings) -> bool:
    """Whether the hover of `item` makes a cost analysis (an operator call's roofline,
    with a hardware preset set): slow enough to make off the editor's thread."""
    return bool(settings.hw) and isinstance(item, Ref) and item.call is not None and \
        item.name in OPS


def function_text(name: str) -> str:
    fn = FUNCTIONS[name]
    attrs = ", ".join(f"{p.name}: {p.kind}" for p in fn.attrs)
    uses = ", ".join(fn.uses)
    return f"```step\nfn={name}{f'({attrs})' if attrs else ''}\n```\n\n{fn.doc}\n\n" \
           f"used by: {uses}"


def _where(span) -> str:
    """`file:line:col` with the file's name only (hover text is narrow)."""
    return f"{os.path.basename(span.file)}:{span.line}:{span.col}"


def _source(checked: Checked, e) -> str:
    src = checked.compiled.sources.get(e.span.file)
    if src is None or e.span.end_line != e.span.line:
        return "..."
    return src.line_text(e.span.line)[e.span.col - 1:e.span.end_col - 1]
