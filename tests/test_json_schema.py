"""One family of JSON documents (docs/json.md): every command's `--format json` (and each
`results.jsonl` record of a sweep) names its `schema` as `stepc-<command>/<N>`, every
location has one shape, expressions are spelled as stepc prints them, integers are
integers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from stepc.cli import main
from stepc.schemas import VERSIONS

REPO = Path(__file__).resolve().parent.parent
LOCATION_KEYS = {"file", "line", "column", "end_line", "end_column"}
SYMPY_SPELLINGS = re.compile(r"\b(ceiling|Piecewise|Max|Min|Mod|Eq|Ne|Gt|Lt|Ge|Le|oo)\b|\*\*")


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(REPO)


def run_json(*args) -> dict:
    r = CliRunner().invoke(main, [*args, "--format", "json"])
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def walk(doc, path=""):
    """(path, key, value) of every member of every object in `doc`."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield path, k, v
            yield from walk(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from walk(v, f"{path}[{i}]")


def assert_family(doc: dict, command: str) -> None:
    assert doc["schema"] == f"stepc-{command}/{VERSIONS[command]}"
    locations = 0
    for path, key, value in walk(doc):
        if key == "location" and value is not None:
            locations += 1
            assert set(value) == LOCATION_KEYS, f"{path}.location: {sorted(value)}"
            assert all(isinstance(value[k], int) for k in LOCATION_KEYS - {"file"})
        if isinstance(value, str):
            assert not SYMPY_SPELLINGS.search(value), f"{path}.{key}: {value!r}"
            assert not re.fullmatch(r"-?\d+", value), f"{path}.{key}: an integer as a string"
    return locations


def test_check():
    doc = run_json("check", "programs/moe_simple.step")
    assert assert_family(doc, "check") > 10
    shapes = [s["shape"] for s in doc["streams"]]
    assert [10] in shapes  # static dims are integers
    assert ["ceil(D_0/4)", 4] in shapes  # symbolic ones as stepc writes them
    assert "version" not in doc


def test_check_diagnostics_use_the_same_location(tmp_path):
    bad = tmp_path / "bad.step"
    bad.write_text("tensor X : bf16[10, 64] input = random(seed=1)\n"
                   "x = LinearOffChipLoad(X, tile=[3, 64])\nrows, _ = Reshape(x, chunk=3)\n",
                   encoding="utf-8")
    doc = run_json("check", str(bad))
    assert_family(doc, "check")
    assert doc["diagnostics"]
    d = doc["diagnostics"][0]
    assert set(d) == {"code", "severity", "message", "location", "notes"}
    assert d["location"]["file"] == str(bad)


def test_analyze():
    doc = run_json("analyze", "programs/moe_simple.step", "--hw", "paper-eval")
    assert assert_family(doc, "analyze") > 10
    totals = doc["totals"]
    assert totals["on_chip_bytes_on_demand"] == \
        "640 + (11264 if D_0 > 0 else 0) + (11264 if D_1 > 0 else 0)"
    assert "ceil(D_0/4)" in totals["off_chip_bytes"]
    assert isinstance(totals["on_chip_bytes"], int)


def test_sim():
    doc = run_json("sim", "programs/moe_simple.step")
    assert_family(doc, "sim")
    assert isinstance(doc["cycles"], int) and all(isinstance(v, int)
                                                  for v in doc["dims"].values())


def test_sweep_records(tmp_path):
    out = tmp_path / "results.jsonl"
    r = CliRunner().invoke(main, ["sweep", "programs/swiglu.step", "--grid", "TB=16,32",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2
    for rec in records:
        assert_family(rec, "sweep")
        assert isinstance(rec["on_chip_bytes"], int)


def test_tune(tmp_path):
    doc = run_json("tune", "programs/swiglu.step", "--hw", "hdl-validation", "--space",
                   "TB=32,64", "-j", "1", "--out", str(tmp_path / "t"))
    assert_family(doc, "tune")
    saved = json.loads((tmp_path / "t" / "tune.json").read_text())
    assert saved["schema"] == doc["schema"]


def commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    """Every command under `group` by its document name: a group's subcommands as
    `group-sub` (`tasks check` writes `stepc-tasks-check/N`)."""
    ctx = click.Context(group)  # the lazy table: every command, not only those loaded
    found = {}
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if isinstance(cmd, click.Group):
            found.update(commands(cmd, f"{prefix}{name}-"))
        else:
            found[prefix + name] = cmd
    return found


def test_every_command_with_json_output_is_covered():
    """A command that gains `--format json` must join the family (and this test), and
    docs/json.md must name its schema."""
    with_json = sorted(name for name, cmd in commands(main).items()
                       if any(p.name == "fmt" and "json" in getattr(p.type, "choices", ())
                              for p in cmd.params))
    assert "tasks-check" in with_json  # a group's commands are seen
    assert with_json == sorted(set(VERSIONS) - {"sweep"})
    documented = (REPO / "docs" / "json.md").read_text(encoding="utf-8")
    for command in VERSIONS:
        assert f"| `stepc-{command}/{VERSIONS[command]}` |" in documented, command
        assert f"**`stepc-{command}/{VERSIONS[command]}`**" in documented, command


def test_tasks():
    doc = run_json("tasks", "list")
    assert_family(doc, "tasks-list")
    assert {"name", "family", "preset", "title"} == set(doc["tasks"][0])
    doc = run_json("tasks", "check", "softmax", "stepc/tasks/library/softmax/solution.step",
                   "--seed", "2")
    assert_family(doc, "tasks-check")
    assert doc["status"] == "pass" and isinstance(doc["candidate"]["cycles"], int)


def test_the_docs_name_only_current_schema_versions():
    """A document that quotes `stepc-sim/1` after the shape moved to /2 misleads whoever
    checks a version: every `stepc-NAME/N` in docs/ and the README is current."""
    from stepc.schemas import schema

    texts = [p.read_text(encoding="utf-8") for p in (REPO / "docs").glob("*.md")]
    texts.append((REPO / "README.md").read_text(encoding="utf-8"))
    quoted = {m for t in texts for m in re.findall(r"stepc-([a-z-]+)/(\d+)", t)}
    assert quoted
    stale = sorted(f"stepc-{name}/{n}" for name, n in quoted
                   if name in VERSIONS and schema(name) != f"stepc-{name}/{n}")
    assert not stale
