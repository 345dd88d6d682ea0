"""Render the operator and function reference of docs/language.md from the registry.

The reference is generated from `OPS` (one section per operator, grouped by `FAMILIES`:
signature, doc paragraph, parameter table, outputs, and the example program
`stepc/ops/examples/<Name>.step`), `FUNCTIONS` and `INITS`, so it cannot drift from the
code. Only the region between the BEGIN/END GENERATED markers of docs/language.md is
rewritten; everything else in the file is hand-written.

    python -m stepc.docgen            rewrite the generated region
    python -m stepc.docgen --check    exit 1 if the region is stale (CI)
    python -m stepc.docgen --print    print the generated region
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stepc.graph.calls import ARRAY_OUTPUT_OPS
from stepc.ops import FAMILIES, FUNCTIONS, INITS, OPS
from stepc.ops.base import (
    COMMON_PARAMS,
    REQUIRED,
    STREAM,
    STREAMS,
    VARSTREAMS,
    OpSpec,
    Param,
    fmt_attr,
)
from stepc.ops.functions import FN_REQUIRED, FnSpec

BEGIN = "<!-- BEGIN GENERATED: operators -->"
END = "<!-- END GENERATED: operators -->"
EXAMPLES = Path(__file__).resolve().parent / "ops" / "examples"
DOC = Path(__file__).resolve().parent.parent / "docs" / "language.md"

KIND_WORDS = {
    STREAM: "stream input", STREAMS: "stream inputs (a list)",
    VARSTREAMS: "stream inputs (1 or more)", "int": "int", "ints": "int list",
    "int_or_ints": "int or int list", "bool": "bool", "str": "string", "dtype": "element type",
    "fn": "function", "init": "initialiser", "tensor": "tensor (or slice)", "type": "stream type",
}
USE_NAMES = {"map": "Map", "accum": "Accum", "scan": "Scan", "flatmap": "FlatMap"}


def cell(text: str) -> str:
    """Make text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def default_text(p: Param) -> str:
    if p.default is REQUIRED or p.default is FN_REQUIRED:
        return "required"
    if p.default is None and p.hw is not None:
        return f"the hardware's `{p.hw}`"
    if p.default is None:
        return "optional" if p.is_stream else "unset"
    return f"`{fmt_attr(p.default)}`"


def param_table(params) -> list[str]:
    rows = ["| parameter | kind | default | meaning |", "| --- | --- | --- | --- |"]
    for p in params:
        name = f"**`{p.name}`**" if p.is_stream else f"`{p.name}`"
        rows.append(f"| {name} | {KIND_WORDS.get(p.kind, p.kind)} | {default_text(p)} | "
                    f"{cell(p.doc)} |")
    return rows


def outputs_text(spec: OpSpec) -> str:
    one, three = spec.outputs({"consumers": 1}), spec.outputs({"consumers": 3})
    if one != three:
        return ("one stream per consumer (`consumers` = n), indexed `p[0]` .. `p[n-1]` "
                "when bound to `p`, or unpacked as `a, b, ... = " + spec.name + "(...)`")
    if not one:
        return "none (use it as a statement)"
    names = ", ".join(f"`{o}`" for o in one)
    if spec.name in ARRAY_OUTPUT_OPS:
        return names + " (indexed)"
    if len(one) == 1:
        return names
    return (f"{names}, in this order; `x = {spec.name}(...)` binds the first and drops the "
            "others")


def example_text(spec: OpSpec) -> str:
    path = EXAMPLES / f"{spec.name}.step"
    return path.read_text(encoding="utf-8").rstrip("\n") if path.exists() else ""


def render_op(spec: OpSpec) -> list[str]:
    out = [f"### {spec.name}", "", "```text", spec.signature, "```", "", spec.doc, ""]
    out += ["Parts of the declaration (External is declared, not called):" if spec.name ==
            "External" else "Parameters, in positional order (stream inputs in bold):", ""]
    out += param_table(spec.params)
    out += ["", f"Outputs: {outputs_text(spec)}.", ""]
    example = example_text(spec)
    if example:
        out += [f"Example (`stepc/ops/examples/{spec.name}.step`):", "", "```step", example,
                "```", ""]
    return out


def render_index() -> list[str]:
    out = ["| family | operators |", "| --- | --- |"]
    for family, title in FAMILIES.items():
        names = [s.name for s in OPS.values() if s.family == family]
        if names:
            links = ", ".join(f"[{n}](#{n.lower()})" for n in names)
            out.append(f"| {title} | {links} |")
    return out


def uses_text(fn: FnSpec) -> str:
    return ", ".join(f"{USE_NAMES[u]} ({n} input{'s' if n != 1 else ''})"
                     for u, n in fn.arity.items())


def attrs_text(fn: FnSpec) -> str:
    if not fn.attrs:
        return "none"
    return "; ".join(f"`{p.name}` ({p.kind}, {default_text(p)}): {p.doc}" for p in fn.attrs)


def render_functions() -> list[str]:
    out = ["| function | usable in (element inputs per use) | attributes | default `init` |",
           "| --- | --- | --- | --- |"]
    for fn in FUNCTIONS.values():
        init = f"`{fn.init}`" if {"accum", "scan"} & set(fn.arity) else "n/a"
        out.append(f"| [`{fn.name}`](#fn-{fn.name}) | {uses_text(fn)} | "
                   f"{cell(attrs_text(fn))} | {init} |")
    out.append("")
    for fn in FUNCTIONS.values():
        out += [f"#### fn {fn.name}", "", fn.doc, ""]
        if fn.fixed_cycles is not None:
            out += [f"Fixed cost: {fn.fixed_cycles} cycle(s) per element, outside the "
                    "compute roofline.", ""]
        if fn.example:
            out += [f"Example: `{fn.example}`", ""]
    return out


def render_inits() -> list[str]:
    out = ["| initialiser | value |", "| --- | --- |"]
    out += [f"| `{name}` | {cell(text)} |" for name, text in INITS.items()]
    return out


def render() -> str:
    """The generated region (without the markers)."""
    out = ["## Operator reference", "",
           "Generated from the operator registry by `python -m stepc.docgen`; do not edit "
           "by hand. Every example below is a complete program that `stepc check` accepts "
           "without warnings.", ""]
    out += render_index() + [""]
    out += ["Every operator also accepts these hardware attributes, which do not change "
            "types:", ""] + param_table(COMMON_PARAMS) + [""]
    for family, title in FAMILIES.items():
        specs = [s for s in OPS.values() if s.family == family]
        if not specs:
            continue
        out += [f"## {title} operators", ""]
        for spec in specs:
            out += render_op(spec)
    out += ["## Function reference", "",
            "Functions are passed to Map, Accum, Scan and FlatMap as `fn=name` or, with "
            "attributes, `fn=name(attr=value)`. In Map the inputs are the lockstep elements "
            "of the operator's input streams (or the members of a Zip tuple); in Accum and "
            "Scan the update takes those elements and the accumulator.", ""]
    out += render_functions()
    out += ["### Initialisers", "",
            "`init=` of Accum and Scan, and `pad=` of Reshape, take one of these:", ""]
    out += render_inits()
    return "\n".join(out).rstrip("\n") + "\n"


def splice(text: str, generated: str) -> str:
    """Replace the region between the markers of `text` with `generated`."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the markers {BEGIN!r} and {END!r} are missing or out of order")
    return text[: start + len(BEGIN)] + "\n" + generated + text[end:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m stepc.docgen", description=__doc__.split(
        "\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the docs are stale")
    ap.add_argument("--print", dest="show", action="store_true",
                    help="print the generated region")
    ap.add_argument("--doc", type=Path, default=DOC, help="the language guide to update")
    args = ap.parse_args(argv)
    generated = render()
    if args.show:
        sys.stdout.write(generated)
        return 0
    try:
        text = args.doc.read_text(encoding="utf-8")
        new = splice(text, generated)
    except (OSError, ValueError) as e:
        print(f"stepc.docgen: {e}", file=sys.stderr)
        return 2
    if args.check:
        if new != text:
            print(f"stepc.docgen: {args.doc.name} is stale; run `python -m stepc.docgen`",
                  file=sys.stderr)
            return 1
        return 0
    if new != text:
        args.doc.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
