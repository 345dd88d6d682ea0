"""docs/sim.md's `--format json` example is the bundled run's document (moe_simple on
paper-eval), abridged the same way every time: each key, its scalar value, and the first
entries of a list or object (`...` for the rest)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from stepc.cli import main

REPO = Path(__file__).resolve().parent.parent
SIM_DOC = REPO / "docs" / "sim.md"
COMMAND = ["sim", "programs/moe_simple.step", "--format", "json"]
SHOWN = 3  # entries of an object shown (a list shows 1)


def _inner(value) -> str:
    """A value inside an object or list: nested containers elided."""
    if isinstance(value, dict):
        return "{...}" if value else "{}"
    if isinstance(value, list):
        return "[...]" if value else "[]"
    return json.dumps(value)


def abridged(doc: dict) -> str:
    lines = ["{"]
    for i, (key, value) in enumerate(sorted(doc.items())):
        if isinstance(value, dict):
            items = [f"{json.dumps(k)}: {_inner(v)}" for k, v in list(value.items())[:SHOWN]]
            text = "{" + ", ".join(items) + (", ..." if len(value) > SHOWN else "") + "}"
        elif isinstance(value, list):
            text = "[" + ", ".join(_inner(v) if not isinstance(v, dict) else
                                   "{" + ", ".join(f"{json.dumps(k)}: {_inner(x)}"
                                                   for k, x in v.items()) + "}"
                                   for v in value[:1]) + (", ..." if len(value) > 1 else "") \
                + "]"
        else:
            text = json.dumps(value)
        lines.append(f"  {json.dumps(key)}: {text}" + ("," if i < len(doc) - 1 else ""))
    return "\n".join(lines + ["}"]) + "\n"


BLOCK = re.compile(r"(<!-- BEGIN GENERATED: sim-json -->\n```text\n)(.*?)(```\n"
                   r"<!-- END GENERATED: sim-json -->)", re.S)


def documented() -> str:
    m = BLOCK.search(SIM_DOC.read_text(encoding="utf-8"))
    assert m, "docs/sim.md has no generated sim-json block"
    return m.group(2)


def test_the_json_example_is_the_bundled_run(monkeypatch, request):
    monkeypatch.chdir(REPO)
    r = CliRunner().invoke(main, COMMAND)
    assert r.exit_code == 0, r.output
    shown = abridged(json.loads(r.stdout))
    if request.config.getoption("--update-goldens"):
        text = SIM_DOC.read_text(encoding="utf-8")
        SIM_DOC.write_text(BLOCK.sub(lambda m: m.group(1) + shown + m.group(3), text, count=1),
                           encoding="utf-8")
        return
    assert documented() == shown, "docs/sim.md's JSON example is stale: run " \
        "`python -m pytest tests/test_sim_json_doc.py --update-goldens` and review it"
