"""The MCP server's tools called in-process (stepc.mcp.tools), and its worker's limits:
each argument moves the result it should, bad input is a clear refusal, the cache of
checked programs is used and invalidated, and the workspace is a wall."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from stepc.codes import UNKNOWN_OPERATOR
from stepc.diagnostics import StepError
from stepc.mcp.tools import MAX_TUNE_POINTS, Tools
from stepc.mcp.worker import ToolFailure, Worker
from stepc.mcp.workspace import Refused, Workspace

REPO = Path(__file__).resolve().parents[1]
SWIGLU = (REPO / "programs" / "swiglu.step").read_text(encoding="utf-8")
MOE = (REPO / "programs" / "moe_simple.step").read_text(encoding="utf-8")


def valid(name: str, doc: dict) -> dict:
    """`doc`, after checking it against the tool's declared output schema."""
    from jsonschema import validate

    from stepc.mcp.schemas import TOOLS
    validate(doc, TOOLS[name]["output"])
    return doc


@pytest.fixture
def tools(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the worker runs in its workspace
    (tmp_path / "swiglu.step").write_text(SWIGLU, encoding="utf-8")
    (tmp_path / "moe.step").write_text(MOE, encoding="utf-8")
    return Tools(Workspace(tmp_path))


def test_params_change_the_types(tools):
    default = valid("check", tools.check({"path": "swiglu.step", "limit": 1000}))
    wide = tools.check({"path": "swiglu.step", "params": {"TB": 32}, "limit": 1000})
    gate = {s["name"]: s["type"] for s in default["streams"]}["gate"]
    assert gate != {s["name"]: s["type"] for s in wide["streams"]}["gate"]
    assert "[32, " in {s["name"]: s["type"] for s in wide["streams"]}["gate"]
    unknown = tools.check({"path": "swiglu.step", "params": {"TC": 1}})
    assert not unknown["ok"] and "TC" in unknown["unknown_params"][0]


def test_pages_cover_the_list_once(tools):
    whole = tools.check({"path": "swiglu.step", "limit": 1000})["streams"]
    first = tools.check({"path": "swiglu.step", "limit": 3})
    rest = tools.check({"path": "swiglu.step", "offset": 3, "limit": 1000})
    assert first["streams"] + rest["streams"] == whole
    assert first["streams_page"]["next_offset"] == 3 and rest["streams_page"]["next_offset"] is None
    with pytest.raises(Refused, match="limit"):
        tools.check({"path": "swiglu.step", "limit": 0})


def test_the_cache_is_used_and_sees_imported_files_change(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lib.step").write_text("param W = 64\n", encoding="utf-8")
    main = 'import "lib.step"\ntensor X : bf16[4, W] input = random(seed=1)\n' \
           "x = LinearOffChipLoad(X, tile=[1, W])\nSink(x)\n"
    tools = Tools(Workspace(tmp_path))
    args = {"program": main, "name": "main.step"}
    first = tools.check(args)
    assert first["ok"] and tools.hits == 0
    assert tools.check(args) == first and tools.hits == 1
    (tmp_path / "lib.step").write_text("param W = 32\n", encoding="utf-8")
    changed = tools.check(args)
    assert tools.hits == 1 and changed["streams"] != first["streams"]


def test_imports_outside_the_workspace_are_refused(tmp_path, monkeypatch):
    import builtins
    (tmp_path / "lib.step").write_text("param W = 64\n", encoding="utf-8")
    inner = tmp_path / "ws"
    inner.mkdir()
    (inner / "main.step").write_text('import "../lib.step"\n', encoding="utf-8")
    monkeypatch.chdir(inner)
    opened, real_open = [], builtins.open
    monkeypatch.setattr(builtins, "open", lambda file, *a, **k: (
        opened.append(os.path.realpath(file)), real_open(file, *a, **k))[1])
    tools = Tools(Workspace(inner))
    with pytest.raises(Refused, match="imports '../lib.step', outside the workspace"):
        tools.check({"program": 'import "../lib.step"\n', "name": "main.step"})
    with pytest.raises(Refused, match="imports '../lib.step', outside the workspace"):
        tools.check({"path": "main.step"})
    assert str(tmp_path / "lib.step") not in opened  # refused before it was read
    assert str(inner / "main.step") in opened  # (the spy sees what is read)
    monkeypatch.setattr(builtins, "open", real_open)
    with pytest.raises(Refused, match="outside the workspace"):
        tools.check({"program": "param N = 1\n", "name": "../main.step"})
    with pytest.raises(Refused, match="one of the two"):
        tools.check({})
    with pytest.raises(Refused, match="too large"):
        tools.check({"program": "#" * (2**24 + 1)})
    reads = 'tensor K : u64[1, 4] input = file(path="../kv.npy")\n' \
            "tensor O : u64[1, 4] output\n" \
            "LinearOffChipStore(LinearOffChipLoad(K, tile=[1, 4]), O)\n"
    with pytest.raises(Refused, match="data file '../kv.npy', outside"):
        tools.check({"program": reads})
    with pytest.raises(Refused, match="hw '/etc/hosts' is outside"):
        tools.simulate({"program": "param N = 1\n", "hw": "/etc/hosts"})


def test_simulate_knobs(tools):
    base = valid("simulate", tools.simulate({"path": "swiglu.step"}))
    assert base["hw"] == "paper-eval" and base["outputs"] == {}
    other = tools.simulate({"path": "swiglu.step", "hw": "hdl-validation"})
    assert other["hw"] == "hdl-validation"
    assert other["measurement"]["cycles"] != base["measurement"]["cycles"]
    fluid = tools.simulate({"path": "swiglu.step", "set": {"hbm.model": "fluid"}})
    assert fluid["measurement"]["hbm_model"] == "fluid"
    functional = valid("simulate", tools.simulate({"path": "swiglu.step", "timing_only": False}))
    assert functional["mode"] == "functional" and functional["outputs"] == {"Y": [64, 256]}
    with pytest.raises(StepError):
        tools.simulate({"path": "swiglu.step", "max_cycles": 10})


def test_analyze_binds_dims(tools):
    symbolic = valid("analyze", tools.analyze({"path": "moe.step", "limit": 2}))
    assert isinstance(symbolic["totals"]["off_chip_bytes"], str)
    assert len(symbolic["ops"]) == 2 and symbolic["ops_page"]["total"] > 2
    statements = tools.analyze({"path": "moe.step", "limit": 1000})["ops"]
    instances = tools.analyze({"path": "moe.step", "limit": 1000, "by": "operator"})["ops"]
    assert len(instances) == sum(row["instances"] for row in statements) > len(statements)
    ys = {row["statement"]: row for row in statements}["y[*]"]  # one Map per expert
    assert ys["instances"] == 2 and ys["flops"].startswith("sum of 2 instances")
    bound = valid("analyze", tools.analyze({"path": "moe.step", "bind": {"D_0": 4, "D_1": 6},
                                            "hw": "paper-eval"}))
    assert bound["totals"]["off_chip_bytes"] == 104704  # the API's documented value
    assert bound["roofline"]["bound"] in ("memory", "compute")


def test_estimate_labels_each_model(tools):
    doc = valid("estimate", tools.estimate({"path": "swiglu.step", "fidelity": ["dram", "ref"]}))
    ref, dram = doc["estimates"]
    assert (ref["model"], dram["model"]) == ("ref", "dram")
    assert ref["cycles"] != dram["cycles"]
    [vs_sim] = [e for e in dram["error"] if e["against"] == "reference simulator"]
    assert vs_sim["points"] == 15 and 0.05 < vs_sim["mape"] < 0.2  # docs/dram.md: 9.43%
    with pytest.raises(Refused, match="fidelity"):
        tools.estimate({"path": "swiglu.step", "fidelity": ["exact"]})


def test_a_binary_file_is_a_diagnostic_not_a_crash(tools, tmp_path):
    from stepc.codes import NOT_TEXT
    (tmp_path / "bin.step").write_bytes(b"\xff\xfe\x00junk")
    doc = tools.check({"path": "bin.step"})
    assert not doc["ok"] and [d["code"] for d in doc["diagnostics"]] == [NOT_TEXT]


def test_format_and_reference_errors(tools):
    messy = SWIGLU.replace("tensor X ", "tensor   X ", 1)
    assert valid("format", tools.format({"program": messy}))["changed"]
    assert tools.format({"program": SWIGLU})["formatted"] == SWIGLU
    with pytest.raises(StepError):
        tools.format({"program": "x = = 1\n"})


def test_tune_is_bounded(tools):
    with pytest.raises(Refused, match=f"at most {MAX_TUNE_POINTS}"):
        tools.tune({"paths": ["swiglu.step"], "space": {"TB": list(range(1, 66))}})
    with pytest.raises(Refused, match="space"):
        tools.tune({"paths": ["swiglu.step"], "space": {}})
    with pytest.raises(Refused, match="outside"):
        tools.tune({"paths": ["/etc/hosts"], "space": {"TB": [16]}})


def test_tune_finds_a_winner(tools, tmp_path):
    doc = valid("tune", tools.tune({"paths": ["swiglu.step"], "space": {"TB": [16, 64]},
                                    "budgets": {"on_chip_bytes": "64MiB"}}))
    assert doc["winner"]["params"]["TB"] in (16, 64)
    assert doc["winner"]["program"] == "swiglu.step"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["moe.step", "swiglu.step"]


def test_the_reference_tools():
    from stepc.app import reference
    explained = valid("explain", reference.diagnostic(UNKNOWN_OPERATOR.lower()))
    assert explained["code"] == UNKNOWN_OPERATOR
    reshape = valid("operator", reference.operator("Reshape"))
    assert reshape["signature"].startswith("Reshape") and "Reshape(" in reshape["example"]
    assert {p["name"] for p in reshape["params"]} >= {"chunk", "pad"}
    with pytest.raises(StepError, match="did you mean Reshape"):
        reference.operator("Reshap")
    matmul = valid("operator", reference.operator("matmul"))
    assert matmul["family"] == "function" and "map" in matmul["doc"]
    with pytest.raises(StepError, match="not a stepc diagnostic code"):
        reference.diagnostic("E9999")


def test_the_worker_survives_running_out_of_memory(tmp_path):
    # 4 GiB of tensor values (as much as a run may hold) under a 3 GiB limit: room for
    # the interpreter and its libraries, none for the values
    big = "tensor X : f32[16384, 32768] input = random(seed=1)\n" \
          "tensor Y : f32[16384, 32768] output\n" \
          "LinearOffChipStore(LinearOffChipLoad(X, tile=[4096, 4096]), Y)\n"
    worker = Worker(str(tmp_path), memory_mib=3072)
    try:
        with pytest.raises(ToolFailure, match="memory"):
            worker.call("simulate", {"program": big, "timing_only": False}, 60)
        assert worker.call("check", {"program": "param N = 1\n"}, 60)["ok"]
        assert worker.restarts == 1
    finally:
        worker.stop()


@pytest.mark.slow  # ~6 s; the stdio session cancels a run over the protocol by default
def test_a_cancelled_call_does_not_run_or_is_stopped(tmp_path):
    import threading
    worker = Worker(str(tmp_path))
    try:
        waiting = object()
        worker.cancel(waiting)  # cancelled while another call held the worker
        with pytest.raises(ToolFailure, match="cancelled before it started"):
            worker.call("check", {"program": "param N = 1\n"}, 60, waiting)
        running, failure = object(), []
        long_run = {"program": (REPO / "programs" / "swiglu.step").read_text(),
                    "params": {"B": 65536}, "timing_only": False}

        def run():
            try:
                worker.call("simulate", long_run, 120, running)
            except ToolFailure as e:
                failure.append(str(e))
        thread = threading.Thread(target=run)
        thread.start()
        time.sleep(2)  # the run is under way (minutes of work)
        worker.cancel(running)
        thread.join(20)
        assert not thread.is_alive() and "stopped the worker" in failure[0]
        assert worker.call("check", {"program": "param N = 1\n"}, 60)["ok"]
        assert worker.restarts == 1
    finally:
        worker.stop()


def test_the_agents_guide_quotes_the_fidelity_table():
    """docs/agents.md's table of measured errors is docs/dram.md's, number for number."""
    from stepc.app import reference
    text = (REPO / "docs" / "agents.md").read_text(encoding="utf-8")
    text = text.split("### Estimates and their measured error", 1)[1].split("\n#", 1)[0]
    rows = [[c.strip(" `%") for c in line.strip("|").split("|")]
            for line in text.splitlines() if line.startswith("| `")]
    quoted = {(r[0], r[1]): (int(r[2]), float(r[3]), float(r[4]), float(r[5]))
              for r in rows if len(r) == 6}
    measured = {(model, e["against"]): (e["points"], round(e["mape"] * 100, 2),
                                        round(e["max_error"] * 100, 2), e["pearson"])
                for model, errors in reference.fidelity().items() if model != "hdl-like"
                for e in errors}
    assert quoted == measured


DATA = REPO.parent / "shared" / "data"
ROUTING = DATA / "expert_routing" / "qwen_b64" / "032_012.npz"
GRAPH = DATA / "stepir" / "graphs" / "qwen3_moe_b64_dyntile"


@pytest.mark.slow
@pytest.mark.skipif(not ROUTING.exists() or not GRAPH.with_suffix(".pb").exists(),
                    reason="the paper's data (../shared/data) is absent")
def test_real_routing_and_the_reference_graph_agree(tmp_path, monkeypatch):
    """Qwen3-30B-A3B's routing of 64 tokens through the bundled 128-expert layer: the trace
    fixes every expert's token count, so the roofline is a number and fluid stays above it.
    The reference toolchain's own graph of that layer (its routing in the side files
    beside it) gives the same bound and a fluid estimate within 0.1%."""
    import shutil
    (tmp_path / "lib").mkdir()
    shutil.copy(REPO / "programs" / "moe_dynamic.step", tmp_path)
    shutil.copy(REPO / "programs" / "lib" / "moe.step", tmp_path / "lib")
    shutil.copy(ROUTING, tmp_path)  # into the test's workspace, not the repository
    shutil.copy(GRAPH.with_suffix(".pb"), tmp_path)
    shutil.copytree(GRAPH.with_suffix(".npy"), tmp_path / GRAPH.with_suffix(".npy").name)
    monkeypatch.chdir(tmp_path)
    tools = Tools(Workspace(tmp_path))
    ours = valid("estimate", tools.estimate({"path": "moe_dynamic.step",
                                             "traces": {"routing": ROUTING.name}}))
    roofline, fluid = ours["estimates"]
    assert roofline["bound"] == "memory" and isinstance(roofline["cycles"], int)
    assert roofline["cycles"] <= fluid["cycles"] < 1.2 * roofline["cycles"]
    checked = valid("check", tools.check({"path": GRAPH.name + ".pb"}))
    assert checked["ok"] and checked["streams_page"]["total"] > 2000
    theirs = tools.estimate({"path": GRAPH.name + ".pb"})["estimates"]
    assert theirs[0]["cycles"] == roofline["cycles"]
    assert abs(theirs[1]["cycles"] - fluid["cycles"]) <= 1e-3 * fluid["cycles"]


def test_the_command_line_limits_reach_the_server(tmp_path, monkeypatch):
    from click.testing import CliRunner

    import stepc.mcp.server
    from stepc.cli.group import main
    served = []
    monkeypatch.setattr(stepc.mcp.server, "serve", lambda *args: served.append(args))
    from stepc.mcp.limits import MEMORY_LIMIT_MIB, TIME_LIMIT
    for extra, limits in (([], (TIME_LIMIT, MEMORY_LIMIT_MIB)),
                          (["--time-limit", "5", "--memory-limit", "0"], (5.0, None))):
        result = CliRunner().invoke(main, ["mcp", "--workspace", str(tmp_path), *extra])
        assert result.exit_code == 0, result.output
        assert served.pop() == (str(tmp_path), *limits)
    server, worker = stepc.mcp.server.build(Workspace(tmp_path), 5.0, 512)
    assert worker.memory_bytes == 512 * 2**20
    assert stepc.mcp.server._time_limit(None, 5.0) == 5.0
    assert stepc.mcp.server._time_limit(500, 5.0) == 5.0  # a call asks for less, not more
    assert stepc.mcp.server._time_limit(0.5, 5.0) == 0.5
    with pytest.raises(Refused, match="time_limit"):
        stepc.mcp.server._time_limit(-1, 5.0)


def test_the_client_configurations_are_json():
    import json
    import re
    text = (REPO / "docs" / "agents.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```json\n(.*?)```", text, re.S)
    configs = [json.loads(block) for block in blocks]
    commands = [server for c in configs for server in
                (c.get("mcpServers") or c.get("servers")).values()]
    assert len(commands) == 2 and all(s["args"][0] == "mcp" for s in commands)



def test_every_tool_runs_in_the_server_or_the_worker():
    from stepc.mcp.schemas import TOOLS
    from stepc.mcp.server import SERVER_TOOLS
    from stepc.mcp.worker import WORKER_TOOLS
    assert not set(SERVER_TOOLS) & set(WORKER_TOOLS)
    assert set(SERVER_TOOLS) | set(WORKER_TOOLS) == set(TOOLS)


def test_the_references_read_the_package_as_the_wheel_lays_it_out():
    """The package's docs/ and programs/ are the tree's top-level folders (links in the
    source tree), and the wheel's configuration puts those folders at the links' places:
    the lookup a checkout makes is the one an installed copy makes
    (tests/test_installed_wheel.py installs the wheel and reads them through the server)."""
    import tomllib

    import stepc
    from stepc.app import reference
    package = Path(stepc.__file__).resolve().parent
    assert (reference.DOCS.parent, reference.PROGRAMS.parent) == (package, package)
    links = sorted(p for p in (REPO / "stepc").iterdir() if p.is_symlink())
    assert links == [REPO / "stepc" / "docs", REPO / "stepc" / "programs"]
    wheel = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))[
        "tool"]["hatch"]["build"]["targets"]["wheel"]
    for link in links:
        target = link.resolve().relative_to(REPO).as_posix()
        place = link.relative_to(REPO).as_posix()
        assert wheel["force-include"][target] == place and place in wheel["exclude"]
    assert reference.programs()["swiglu.step"].read_text(encoding="utf-8") == SWIGLU
    assert reference.document("dram") == (REPO / "docs" / "dram.md").read_text(encoding="utf-8")


def test_a_copy_without_its_data_says_so(tools, tmp_path, monkeypatch, caplog):
    from stepc.api.errors import InputError
    from stepc.app import reference
    from stepc.mcp import server
    monkeypatch.setattr(reference, "DOCS", tmp_path / "no-docs")
    monkeypatch.setattr(reference, "PROGRAMS", tmp_path / "no-programs")
    explained = valid("explain", reference.diagnostic(UNKNOWN_OPERATOR))
    assert explained["doc"] == "" and explained["meaning"]  # the registry still answers
    assert "docs/diagnostics.md is missing from this copy of stepc" in explained["missing"]
    with pytest.raises(InputError, match="docs/language.md is missing"):
        reference.document("language")
    estimated = valid("estimate", tools.estimate({"path": "swiglu.step"}))
    fluid = estimated["estimates"][1]
    assert fluid["error"] == [] and "the measured errors are missing" in fluid["note"]
    assert estimated["error_source"].startswith("the measured errors are missing")
    with pytest.raises(InputError, match="bundled programs are missing"):
        reference.programs()
    assert server._program_resources() == {}
    assert "no program resources" in caplog.text


def test_the_task_tools_in_process(tools, tmp_path):
    from stepc.api.errors import InputError
    from stepc.app.tasks import task
    from stepc.mcp.tasks import task_check, task_list, task_show
    from stepc.tasks import task_names
    assert [t["name"] for t in valid("task_list", task_list({}))["tasks"]] == task_names()
    shown = valid("task_show", task_show({"name": "rmsnorm", "solution": False}))
    assert "solution" not in shown and shown["preset"] == task("rmsnorm").preset
    assert {t["name"] for t in shown["tensors"]} == {t.name for t in task("rmsnorm").tensors}
    before = sorted(p.name for p in tmp_path.iterdir())
    broken = valid("task_check", task_check(tools, {"task": "rmsnorm", "program": "x = = 1\n",
                                                    "name": "mine.step"}))
    assert (broken["status"], broken["stage"], broken["reward"]) == ("fail", "compile", 0)
    assert broken["file"] == "mine.step" and broken["reason"].count("mine.step:1:") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # the scratch folder went
    (tmp_path / "inner").mkdir()
    (tmp_path / "inner" / "ok.step").write_text('import "../../lib.step"\n', encoding="utf-8")
    for args, refusal in (({"task": "rmsnorm", "program": 'import "../../../lib.step"\n'},
                           "outside the workspace"),
                          ({"task": "rmsnorm", "path": "inner/ok.step"}, "outside the workspace"),
                          ({"task": "rmsnorm", "path": "../x.step"}, "outside the workspace"),
                          ({"task": "rmsnorm"}, "one of the two")):
        with pytest.raises(Refused, match=refusal):
            task_check(tools, args)
    with pytest.raises(InputError, match="no task `rmsnrm`"):
        task_check(tools, {"task": "rmsnrm", "path": "swiglu.step"})
    with pytest.raises(InputError, match="seed"):
        task_check(tools, {"task": "rmsnorm", "path": "swiglu.step", "seed": -1})


def test_hardware_part_files_outside_the_workspace_are_refused_before_reading(
        tools, tmp_path, monkeypatch):
    """`set: {"dram.part": ...}` or a workspace TOML whose `[dram] part` names a file
    outside was read (a system file's TOML error quoted; `/dev/zero` exhausted the worker)."""
    from pathlib import Path as _Path

    outside = tmp_path.parent / f"{tmp_path.name}-part.toml"
    outside.write_text("rows = 1\n", encoding="utf-8")
    opened: list[str] = []
    real_read = _Path.read_text

    def spy(self, *a, **k):
        opened.append(str(self))
        return real_read(self, *a, **k)
    monkeypatch.setattr(_Path, "read_text", spy)
    for part in (str(outside), "/dev/zero", "../" + outside.name):
        with pytest.raises(Refused, match="outside the workspace"):
            tools.simulate({"path": "swiglu.step", "set": {"dram.part": part}})
    (tmp_path / "hw.toml").write_text(f'[hbm]\nmodel = "dram"\n[dram]\npart = "{outside}"\n',
                                      encoding="utf-8")
    with pytest.raises(Refused, match="outside the workspace"):
        tools.simulate({"path": "swiglu.step", "hw": "hw.toml"})
    with pytest.raises(Refused, match="outside the workspace"):
        tools.estimate({"path": "swiglu.step", "hw": "hw.toml", "fidelity": ["roofline"]})
    assert not [p for p in opened if p.endswith("-part.toml") or p == "/dev/zero"]
    # a part inside the workspace is read as before
    (tmp_path / "mine.toml").write_text(
        real_read(_Path(__file__).parents[1] / "stepc" / "hw" / "parts" / "hbm2.toml"),
        encoding="utf-8")
    run = tools.simulate({"path": "swiglu.step", "set": {"dram.part": "mine.toml",
                                                         "hbm.model": "dram"}})
    assert run["measurement"]["cycles"] > 0
