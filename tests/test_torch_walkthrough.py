"""The walk-through of docs/torch.md (a transformers config to a Pareto plot) runs as
written: its config and commands are read from the document and run in an empty directory,
at small sizes with a seeded routing by default, and at the documented sizes with the
paper's routing trace (slow) when ../shared/data is present. Skipped without transformers."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers", reason="the walk-through lowers a transformers block "
                    "(the torch extra installs `transformers`)")

from click.testing import CliRunner  # noqa: E402

from stepc.cli import main  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "torch.md"
DATA = REPO.parent / "shared" / "data"
PAPER_TRACE = "expert_routing/qwen_b64/032_012.npz"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
SMALL = {"hidden_size": 64, "moe_intermediate_size": 128, "num_experts": 8,
         "num_experts_per_tok": 2}


def walkthrough() -> tuple[dict, list[list[str]]]:
    """The section's config and its commands (continuations joined; `VAR=...` lines kept
    as assignments `["=", VAR, value]`)."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index("## Walk-through: from a transformers config to a Pareto plot")
    section = text[start:text.index("\n## ", start + 1)]
    blocks = FENCE.findall(section)
    config = json.loads(next(body for kind, body in blocks if kind == "json"))
    commands = []
    for kind, body in blocks:
        if kind != "sh":
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = re.fullmatch(r"(\w+)=(.*)", line)
            commands.append(["=", m.group(1), shlex.split(m.group(2))[0]] if m
                            else shlex.split(line, comments=True))
    return config, commands


def run_walkthrough(tmp_path, monkeypatch, config: dict, trace: str, edit=lambda a: a):
    """Run every command in `tmp_path`; TRACE is set to `trace`. Returns the outputs."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(config))
    env, outputs = {}, []
    for cmd in walkthrough()[1]:
        if cmd[0] == "=":
            env[cmd[1]] = trace if cmd[1] == "TRACE" else cmd[2]
            continue
        args = []
        for a in cmd:  # unquoted $VAR splits into words, as the shell does
            args += shlex.split(env[a[1:]]) if a.startswith("$") else [a]
        assert args[0] == "stepc"
        args = edit(args[1:])
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, f"stepc {' '.join(args)}\n{r.output}"
        outputs.append(r.output)
    return outputs


def test_the_documented_config_is_qwen3_30b_a3b_and_the_commands_are_stepc():
    config, commands = walkthrough()
    assert (config["hidden_size"], config["moe_intermediate_size"], config["num_experts"],
            config["num_experts_per_tok"]) == (2048, 768, 128, 8)
    names = [c[0] if c[0] != "=" else c[1] for c in commands]
    assert names.count("stepc") == 7 and "TRACE" in names
    assert any("--pareto" in c for c in commands) and any("plot" in c for c in commands)


def test_walkthrough_runs_at_small_sizes_with_a_seeded_routing(tmp_path, monkeypatch):
    config = {**walkthrough()[0], **SMALL}

    def small(args):  # 16 tokens, two static tiles, one worker
        args = [a.replace("[64,2048]", "[16,64]").replace("TILE_N=8..64:pow2", "TILE_N=8,16")
                for a in args]
        return args + ["-j", "1"] if args[0] == "sweep" else args

    outputs = run_walkthrough(tmp_path, monkeypatch, config, "", small)
    assert "E = 8" in (tmp_path / "moe_static.step").read_text()
    sweep = next(o for o in outputs if "Pareto-optimal" in o)
    assert "6 points" in sweep  # static: 2 TILE_N x 2 TILE_F; dynamic: 2 TILE_F
    records = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(records) == 6 and all(json.loads(r)["status"] == "ok" for r in records)
    assert (tmp_path / "pareto.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_walkthrough_as_written_with_the_papers_trace(tmp_path, monkeypatch):
    if not (DATA / PAPER_TRACE).exists():
        pytest.skip(f"the paper's routing trace ../shared/data/{PAPER_TRACE} is absent")
    outputs = run_walkthrough(tmp_path, monkeypatch, walkthrough()[0],
                              f"--trace routing={DATA / PAPER_TRACE}")
    analyze = next(o for o in outputs if "off-chip bytes" in o)
    assert "680,264,704" in analyze  # the totals the document states
    front = next(o for o in outputs if "Pareto-optimal" in o).split("Pareto-optimal")[1]
    assert "cycles=581,965" in front and "cycles=577,511" in front
