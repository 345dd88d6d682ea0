"""Reference knowledge as data, for front ends that answer questions (the MCP server): an
operator's record, a diagnostic code's documentation, the documents of docs/ and the
measured fidelity of each memory model."""

from __future__ import annotations

import re
from pathlib import Path

from stepc.api import InputError
from stepc.codes import MEANINGS

# The package holds what the references serve: docs/ and programs/ are package data (in a
# source checkout, links to the top-level folders; a wheel holds the folders themselves).
PACKAGE = Path(__file__).resolve().parents[1]
DOCS = PACKAGE / "docs"
PROGRAMS = PACKAGE / "programs"
EXAMPLES = PACKAGE / "ops" / "examples"
FIDELITY_SOURCE = ("docs/dram.md, section 'Fidelity: the SwiGLU sweep under every model': "
                   "the paper's Figure 8 sweep, ref and fluid on hdl-validation, dram on "
                   "hdl-validation-dram (written by python -m stepc.reproduction.fidelity "
                   "from the paper's data)")
_GENERATED = "<!-- BEGIN GENERATED: {0} -->\n(.*?)<!-- END GENERATED: {0} -->"


def document(name: str) -> str:
    """The text of the package's docs/<name>.md; InputError saying what is missing when
    this copy of stepc lacks it."""
    path = DOCS / f"{name}.md"
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"docs/{name}.md is missing from this copy of stepc ({path}: "
                         f"{e.strerror or e}); reinstall stepc") from None


def generated(name: str, region: str) -> str:
    """The generated region `region` of docs/<name>.md."""
    found = re.search(_GENERATED.format(re.escape(region)), document(name), re.S)
    if found is None:
        raise InputError(f"docs/{name}.md has no generated region `{region}`")
    return found.group(1)


def operator_names() -> list[str]:
    """Every operator, then every function of the higher-order operators."""
    from stepc.ops import FUNCTIONS, OPS
    return [*OPS, *FUNCTIONS]


def operator(name: str) -> dict:
    """An operator's record: family, signature, meaning, parameters (kind, default,
    meaning), outputs with one consumer, and its example program; or a function's (`fn=`
    of Map, Accum, Scan and FlatMap): where it is used, attributes, example."""
    import difflib

    from stepc.ops import FAMILIES, FUNCTIONS, OPS

    spec = OPS.get(name)
    if spec is None and name in FUNCTIONS:
        return _function(FUNCTIONS[name])
    if spec is None:
        close = difflib.get_close_matches(name, [*OPS, *FUNCTIONS], n=3)
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        raise InputError(f"no operator or function named {name!r}{hint}")
    example = EXAMPLES / f"{spec.name}.step"
    return {
        "name": spec.name, "family": FAMILIES.get(spec.family, spec.family),
        "signature": spec.signature, "doc": spec.doc, "external": spec.external,
        "params": [_param(p) for p in spec.params],
        "outputs": list(spec.outputs({"consumers": 1})),
        "example": example.read_text(encoding="utf-8") if example.exists() else "",
    }


def _function(fn) -> dict:
    uses = ", ".join(f"{use} ({n} element input{'s' if n != 1 else ''})"
                     for use, n in fn.arity.items())
    return {"name": fn.name, "family": "function", "signature": f"fn={fn.name}",
            "doc": f"{fn.doc} Used in: {uses}.", "external": False,
            "params": [_param(p) for p in fn.attrs], "outputs": [], "example": fn.example}


def _param(p) -> dict:
    """A parameter's kind, default (None: required or unset) and meaning."""
    from stepc.ops.base import fmt_attr
    from stepc.ops.functions import FN_REQUIRED
    if p.required or p.default is FN_REQUIRED:
        default = None
    elif p.default is None:
        default = f"the hardware's {p.hw}" if p.hw else None
    else:
        default = fmt_attr(p.default)
    return {"name": p.name, "kind": p.kind, "stream": p.is_stream,
            "required": p.required or p.default is FN_REQUIRED, "default": default,
            "meaning": p.doc}


def diagnostic(code: str) -> dict:
    """A diagnostic code's meaning and its section of docs/diagnostics.md (mistake, message,
    fix); without that section, `missing` says why `doc` is empty."""
    code = code.strip().upper()
    if code not in MEANINGS:
        raise InputError(f"{code!r} is not a stepc diagnostic code (they look like E0343 or "
                         "W0501; docs/diagnostics.md lists them)")
    found, missing = None, None
    try:
        found = re.search(rf"^### {code} \((error|warning)\): .*?\n(.*?)(?=^##)",
                          document("diagnostics") + "\n## ", re.S | re.M)
        if found is None:
            missing = f"docs/diagnostics.md has no section for {code}"
    except InputError as e:
        missing = str(e)
    doc = {"code": code, "meaning": MEANINGS[code],
           "severity": found.group(1) if found else ("warning" if code[0] == "W" else "error"),
           "doc": found.group(2).strip() if found else ""}
    return {**doc, "missing": missing} if missing else doc


def fidelity() -> dict[str, list[dict]]:
    """Each memory model's measured agreement on the paper's SwiGLU sweep (Figure 8), as
    docs/dram.md's generated table gives it: model -> [{against, points, mape, max_error,
    pearson}] (percentages as fractions)."""
    out: dict[str, list[dict]] = {}
    for row in generated("dram", "fidelity").splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) != 7 or not cells[3].endswith("%"):
            continue
        model, against, points, mape, worst, pearson, _fastest = cells
        out.setdefault(model, []).append({
            "against": against, "points": int(points), "mape": float(mape[:-1]) / 100,
            "max_error": float(worst[:-1]) / 100, "pearson": float(pearson)})
    if not out:
        raise InputError("docs/dram.md's generated region `fidelity` holds no table rows")
    return out


def programs() -> dict[str, Path]:
    """The bundled example programs and the library they import, by path under programs/;
    InputError when this copy of stepc lacks them."""
    found = {p.relative_to(PROGRAMS).as_posix(): p for p in sorted(PROGRAMS.rglob("*.step"))}
    if not found:
        raise InputError(f"the bundled programs are missing from this copy of stepc (no "
                         f".step file under {PROGRAMS}); reinstall stepc")
    return found
