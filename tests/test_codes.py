"""Each diagnostic code is defined once, in `stepc.codes`: docs/diagnostics.md documents
exactly those codes under their one-line meanings, every code is emitted somewhere, and no
module spells a code as a bare string."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from stepc import codes

REPO = Path(__file__).resolve().parent.parent
CODE = re.compile(r"^[EW]\d{4}$")
QUOTED_CODE = re.compile(r"[\"'][EW]\d{4}[\"']")


def constants() -> dict[str, str]:
    """Constant name -> code."""
    return {k: v for k, v in vars(codes).items() if k.isupper() and isinstance(v, str)}


def test_docs_headings_are_the_meanings():
    text = (REPO / "docs" / "diagnostics.md").read_text(encoding="utf-8")
    headings = dict(re.findall(r"^### ([EW]\d{4}) \((?:error|warning)\): (.*)$", text, re.M))
    assert headings == codes.MEANINGS


def test_each_code_once():
    values = list(constants().values())
    assert len(values) == len(set(values)) == len(codes.MEANINGS)


def _python_files():
    for path in sorted((REPO / "stepc").rglob("*.py")):
        if path != Path(codes.__file__).resolve():
            yield path, path.read_text(encoding="utf-8")


def test_no_bare_code_strings():
    bare = []
    for path, text in _python_files():
        if not QUOTED_CODE.search(text):  # parse only files that could hold one
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and CODE.match(node.value):
                bare.append(f"{path.relative_to(REPO)}:{node.lineno} {node.value}")
    assert bare == []


def test_every_code_is_used():
    used: set[str] = set()
    for _path, text in _python_files():
        used |= set(re.findall(r"\b[A-Z][A-Z0-9_]+\b", text))
    assert set(constants()) - used == set()
