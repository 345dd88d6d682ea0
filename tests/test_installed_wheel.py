"""The installed copy is the product. The wheel built from this tree, installed into a fresh
virtual environment outside it (its dependencies from this Python's site-packages, the tree
itself not importable), serves every MCP tool and every resource through the MCP SDK's
stdio client, and runs `stepc --help`, `stepc check` and `stepc sim`. Each answer is held
to the same answer computed in this process from the source tree, or to the files it
was built from."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import anyio
import pytest

from stepc.codes import UNKNOWN_OPERATOR  # noqa: E402

# one build, on one worker; about a minute (the wheel's build environment, a virtual
# environment, three commands, a server session), so out of the default run: .ci/run runs it.
# The MCP SDK is imported where it is used: the default run collects this file too.
pytestmark = [pytest.mark.xdist_group("installed_wheel"), pytest.mark.slow,
              pytest.mark.skipif(find_spec("mcp") is None, reason="the MCP SDK is not installed")]

REPO = Path(__file__).resolve().parents[1]
SWIGLU = REPO / "programs" / "swiglu.step"
TASK = "softmax"
SEED = 3


def run(*command, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    """`command` with this process's environment less its Python path (the tree)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(map(str, command))} exited {done.returncode}:\n"
                    f"{done.stdout}\n{done.stderr}")
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The bin/ folder of a fresh virtual environment holding the wheel of this tree."""
    root = tmp_path_factory.mktemp("installed")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", root / "wheels", REPO,
        cwd=root)
    [wheel] = (root / "wheels").glob("stepc-*.whl")
    # the environment sees this Python's packages (no download of the dependencies) and
    # installs with its pip, into itself
    run(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
        root / "venv", cwd=root)
    if sys.prefix != sys.base_prefix:  # this Python is a virtual environment itself: the
        # new one sees the base interpreter's packages, so name this one's too
        [site_dir] = (root / "venv" / "lib").glob("python*/site-packages")
        (site_dir / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    bin_dir = root / "venv" / "bin"
    # --ignore-installed: a stepc of this version installed beside the dependencies (this
    # tree's own install) does not stand in for the wheel
    run(bin_dir / "python", "-m", "pip", "install", "--no-deps", "--no-index",
        "--ignore-installed", "-q", wheel, cwd=root)
    return bin_dir


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("workspace")
    shutil.copy(SWIGLU, root)
    return root


def test_stepc_is_imported_from_the_environment(installed, workspace):
    where = run(installed / "python", "-c", "import stepc; print(stepc.__file__)",
                cwd=workspace).stdout.strip()
    assert Path(where).is_relative_to(installed.parent), where
    assert not Path(where).is_relative_to(REPO)


def test_the_wheel_carries_the_native_core(installed, workspace):
    """The wheel built on a machine with a C compiler holds the compiled simulator core, and
    the installed copy runs it (the same cycles as the Python core, as the tree's tests
    show)."""
    from stepc.sim.native import MODULES
    core = run(installed / "python", "-c", "from stepc.sim.native import core_name; "
               "print(core_name())", cwd=workspace).stdout.strip()
    assert core == "native", core
    for module in MODULES:
        where = run(installed / "python", "-c", f"import {module} as m; print(m.__file__)",
                    cwd=workspace).stdout.strip()
        assert where.endswith(".so") and Path(where).is_relative_to(installed.parent), where


def test_the_command_line(installed, workspace):
    from stepc.api.program import load
    assert "Usage: stepc" in run(installed / "stepc", "--help", cwd=workspace).stdout
    checked = run(installed / "stepc", "check", "swiglu.step", cwd=workspace)
    assert "error" not in checked.stdout.lower()
    simulated = run(installed / "stepc", "sim", "swiglu.step", "--format", "json",
                    cwd=workspace)
    cycles = json.loads(simulated.stdout)["cycles"]
    assert cycles == load(SWIGLU).simulate().cycles > 0
    broken = run(installed / "stepc", "check", "nothing.step", cwd=workspace, check=False)
    assert broken.returncode == 2 and "Traceback" not in broken.stderr


async def session(installed: Path, workspace: Path) -> dict:
    """Every tool and resource of the installed server; the results by name."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.shared.exceptions import MCPError

    from stepc.app.tasks import task
    solution = task(TASK).solution.read_text(encoding="utf-8")
    calls = {
        "check": {"path": "swiglu.step"},
        "analyze": {"path": "swiglu.step", "hw": "paper-eval"},
        "simulate": {"path": "swiglu.step"},
        "format": {"program": SWIGLU.read_text(encoding="utf-8")},
        "explain": {"code": UNKNOWN_OPERATOR},
        "operator": {"name": "Reshape"},
        "tune": {"paths": ["swiglu.step"], "space": {"TB": [16, 64]}},
        "estimate": {"path": "swiglu.step", "fidelity": ["roofline", "fluid", "ref", "dram"]},
        "task_list": {},
        "task_show": {"name": TASK},
        "task_check": {"task": TASK, "program": solution, "seed": SEED},
        "task_check wrong": {"task": TASK, "program": solution.replace("fn=div", "fn=mul"),
                             "seed": SEED},
    }
    seen: dict = {"calls": calls}
    params = StdioServerParameters(command=str(installed / "stepc"),
                                   args=["mcp", "--workspace", "."], cwd=str(workspace))
    with open(os.devnull, "w") as quiet:
        async with stdio_client(params, errlog=quiet) as (read, write), \
                ClientSession(read, write) as client:
            await client.initialize()
            seen["tools"] = {t.name for t in (await client.list_tools()).tools}
            for key, args in calls.items():
                seen[key] = await client.call_tool(key.split()[0], args)
            seen["resources"] = {}
            for listed in (await client.list_resources()).resources:
                try:
                    text = (await client.read_resource(listed.uri)).contents[0].text
                except MCPError as e:  # the comparison names it
                    text = f"read failed: {e}"
                seen["resources"][str(listed.uri)] = text
    return seen


@pytest.fixture(scope="module")
def served(installed, workspace) -> dict:
    return anyio.run(session, installed, workspace)


def test_every_tool_is_called(served):
    assert served["tools"] == {key.split()[0] for key in served["calls"]}
    failed = {key: served[key].content[0].text for key in served["calls"] if served[key].is_error}
    assert failed == {}


def test_the_program_tools_answer_as_the_tree_does(served):
    from stepc.api.program import load
    program = load(SWIGLU)
    assert served["check"].structured_content["ok"]
    assert served["simulate"].structured_content["measurement"]["cycles"] == \
        program.simulate().cycles
    roofline = program.analyze(hw="paper-eval").roofline
    assert served["analyze"].structured_content["roofline"]["bound"] == roofline["bound"]
    assert served["format"].structured_content["formatted"] == SWIGLU.read_text(encoding="utf-8")
    assert served["tune"].structured_content["winner"]["params"]["TB"] in (16, 64)


def test_explain_and_operator_read_the_packaged_references(served):
    from stepc.app import reference
    assert served["explain"].structured_content == reference.diagnostic(UNKNOWN_OPERATOR)
    assert served["explain"].structured_content["doc"]  # the section of docs/diagnostics.md
    assert served["operator"].structured_content == reference.operator("Reshape")


def test_estimate_carries_the_measured_errors(served):
    from stepc.app import reference
    estimates = served["estimate"].structured_content["estimates"]
    assert [e["model"] for e in estimates] == ["roofline", "fluid", "ref", "dram"]
    measured = reference.fidelity()
    for e in estimates[1:]:
        assert e["error"] == measured[e["model"]] != []
    assert "docs/dram.md" in served["estimate"].structured_content["error_source"]


def test_the_tasks(served):
    from stepc.tasks import task_names
    assert [t["name"] for t in served["task_list"].structured_content["tasks"]] == task_names()
    from stepc.mcp.tasks import task_show
    assert served["task_show"].structured_content == task_show({"name": TASK})
    passed = served["task_check"].structured_content
    assert passed["status"] == "pass" and passed["reward"] == 1.0
    failed = served["task_check wrong"].structured_content
    assert failed["status"] == "fail" and failed["reward"] == 0


def test_every_resource_is_the_file_it_serves(served):
    from stepc.app import reference
    docs = {f"stepc://docs/{name}": (REPO / "docs" / f"{name}.md").read_text(encoding="utf-8")
            for name in ("language", "diagnostics")}
    docs["stepc://docs/operators"] = reference.generated("language", "operators")
    programs = {f"stepc://programs/{p.relative_to(REPO / 'programs').as_posix()}":
                p.read_text(encoding="utf-8") for p in (REPO / "programs").rglob("*.step")}
    assert len(programs) == 16
    assert served["resources"] == {**docs, **programs}
