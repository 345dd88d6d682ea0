"""stepc mcp, driven over stdio by the MCP SDK's own client as an agent drives it: list the
tools, check a broken program, fix it, simulate it, estimate it at two fidelities, tune it,
run past a time limit (a tool error; the server still answers), cancel a long run (the
server stops it and answers the next call), be refused a path outside the workspace, and
take a task: read it, check its reference solution and a wrong one. One server session for
the whole flow."""

from __future__ import annotations

import os
import sys
import time
from importlib.util import find_spec
from pathlib import Path

import anyio
import pytest

from stepc.codes import UNKNOWN_OPERATOR  # noqa: E402

# one server session, on one worker; the MCP SDK is imported where it is used (a second
# of loading each worker would pay to collect these tests)
pytestmark = [pytest.mark.xdist_group("mcp_session"),
              pytest.mark.skipif(find_spec("mcp") is None, reason="the MCP SDK is not installed")]

REPO = Path(__file__).resolve().parents[1]
SWIGLU = (REPO / "programs" / "swiglu.step").read_text(encoding="utf-8")
SESSION_LIMIT = 120  # the session's --time-limit, seconds
# a functional run of minutes on any machine, past SESSION_LIMIT (one-row tiles: 22 ms a
# row measured at a load of 8 on two cores, 24 minutes in all; ten times faster it still
# outlasts the limit), in little memory (64 MiB of X): the runs the time-limit and cancel
# tests stop
LONG_RUN = {"path": "swiglu.step", "timing_only": False, "params": {"B": 65536, "TB": 1}}


def server(workspace: Path, *options: str):
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "stepc", "mcp", "--workspace", ".", *options],
                                 env={"PYTHONPATH": str(REPO)}, cwd=str(workspace))


async def session_flow(workspace: Path) -> dict:
    """The agent's calls; each result kept for the test to read."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client
    from mcp.shared.exceptions import MCPError

    seen: dict = {"not_protocol": []}

    async def on_message(message) -> None:  # a line of stdout that is not JSON-RPC
        if isinstance(message, Exception):
            seen["not_protocol"].append(message)

    with open(os.devnull, "w") as quiet:
        limit = ("--time-limit", str(SESSION_LIMIT))
        async with stdio_client(server(workspace, *limit), errlog=quiet) as (
                read, write), ClientSession(read, write, message_handler=on_message) as session:
            await session.initialize()
            seen["tools"] = (await session.list_tools()).tools
            seen["resources"] = (await session.list_resources()).resources
            seen["operators"] = await session.read_resource("stepc://docs/operators")
            seen["library"] = await session.read_resource("stepc://programs/lib/moe.step")
            try:
                await session.read_resource("stepc://docs/nothing")
            except MCPError as e:
                seen["no_resource"] = e
            broken = SWIGLU.replace("Map(", "Mapp(", 1)
            seen["broken"] = await session.call_tool("check", {"program": broken,
                                                               "name": "mine.step"})
            seen["fixed"] = await session.call_tool("check", {"program": SWIGLU,
                                                              "name": "mine.step"})
            seen["sim"] = await session.call_tool("simulate", {"path": "swiglu.step",
                                                               "params": {"TB": 32}})
            seen["estimate"] = await session.call_tool(
                "estimate", {"path": "swiglu.step", "fidelity": ["fluid", "roofline"]})
            seen["tune"] = await session.call_tool(
                "tune", {"paths": ["swiglu.step"], "space": {"TB": [16, 64]},
                         "budgets": {"on_chip_bytes": "64MiB"}})
            seen["slow"] = await session.call_tool("simulate", {**LONG_RUN, "time_limit": 1})
            seen["after"] = await session.call_tool("check", {"path": "swiglu.step",
                                                              "limit": 2})
            with anyio.move_on_after(2):  # the agent gives up on a long run: the SDK cancels
                await session.call_tool("simulate", LONG_RUN)
            start = time.monotonic()
            seen["after_cancel"] = await session.call_tool("check", {"path": "swiglu.step",
                                                                     "params": {"B": 128}})
            seen["after_cancel_seconds"] = time.monotonic() - start
            seen["outside"] = await session.call_tool("check", {"path": "../swiglu.step"})
            seen["link"] = await session.call_tool("check", {"path": "escape.step"})
            seen["explain"] = await session.call_tool("explain", {"code": UNKNOWN_OPERATOR})
            seen["unknown_tool"] = await session.call_tool("compile", {"path": "x.step"})
            seen["unknown_argument"] = await session.call_tool(
                "simulate", {"path": "swiglu.step", "timing-only": False})
            seen["task_list"] = await session.call_tool("task_list", {})
            seen["task_show"] = await session.call_tool("task_show", {"name": "softmax"})
            solution = seen["task_show"].structured_content["solution"]
            (workspace / "softmax.step").write_text(solution, encoding="utf-8")
            seen["task_pass"] = await session.call_tool(
                "task_check", {"task": "softmax", "path": "softmax.step", "seed": 3})
            seen["task_fail"] = await session.call_tool("task_check", {
                "task": "softmax", "seed": 3, "name": "mine.step",
                "program": solution.replace("fn=div", "fn=mul")})
            seen["task_unknown"] = await session.call_tool(
                "task_check", {"task": "sofmax", "path": "softmax.step"})
    return seen


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    root = tmp_path_factory.mktemp("agent")
    workspace = root / "workspace"
    workspace.mkdir()
    (workspace / "swiglu.step").write_text(SWIGLU, encoding="utf-8")
    (root / "swiglu.step").write_text(SWIGLU, encoding="utf-8")  # beside, not inside
    (workspace / "escape.step").symlink_to(root / "swiglu.step")
    seen = anyio.run(session_flow, workspace)
    seen["left"] = sorted(p.name for p in workspace.iterdir())
    return seen


def test_nothing_but_protocol_on_stdout(flow):
    assert flow["not_protocol"] == []


def test_tools_are_listed_with_schemas(flow):
    tools = {t.name: t for t in flow["tools"]}
    assert set(tools) == {"check", "analyze", "simulate", "format", "explain", "operator",
                          "tune", "estimate", "task_list", "task_show", "task_check"}
    assert all(t.output_schema["type"] == "object" and t.input_schema["type"] == "object"
               for t in tools.values())


def test_the_references_are_resources(flow):
    uris = {str(r.uri) for r in flow["resources"]}
    assert {"stepc://docs/language", "stepc://docs/operators", "stepc://docs/diagnostics",
            "stepc://programs/moe_dynamic.step", "stepc://programs/lib/moe.step"} <= uris
    operators = flow["operators"].contents[0].text  # rendered from the registry
    assert "### Reshape" in operators
    language = (REPO / "docs" / "language.md").read_text(encoding="utf-8")
    assert f"<!-- BEGIN GENERATED: operators -->\n{operators}" in language
    library = (REPO / "programs" / "lib" / "moe.step").read_text(encoding="utf-8")
    assert flow["library"].contents[0].text == library
    assert "no resource stepc://docs/nothing" in str(flow["no_resource"])


def test_a_broken_program_gets_a_located_diagnostic(flow):
    result = flow["broken"]
    assert not result.is_error
    doc = result.structured_content
    assert doc["ok"] is False
    [d] = doc["diagnostics"]
    line = next(i for i, text in enumerate(SWIGLU.splitlines(), 1) if "Map(" in text)
    column = SWIGLU.splitlines()[line - 1].index("Map(") + 1
    assert d["code"] == UNKNOWN_OPERATOR and "Mapp" in d["message"]
    assert (d["location"]["file"], d["location"]["line"], d["location"]["column"]) == \
        ("mine.step", line, column)
    fixed = flow["fixed"].structured_content
    assert fixed["ok"] and fixed["diagnostics"] == [] and fixed["streams_page"]["total"] > 0


def test_simulate_returns_the_measurement(flow):
    doc = flow["sim"].structured_content
    assert not flow["sim"].is_error
    assert doc["measurement"]["status"] == "ok" and doc["measurement"]["cycles"] > 0
    assert doc["measurement"]["hbm_model"] == "ref" and doc["mode"] == "timing-only"


def test_estimate_climbs_the_ladder_with_measured_errors(flow):
    doc = flow["estimate"].structured_content
    roofline, fluid = doc["estimates"]  # cheapest first, whatever order was asked
    assert (roofline["model"], roofline["kind"]) == ("roofline", "lower bound")
    assert (fluid["model"], fluid["kind"]) == ("fluid", "simulated")
    assert 0 < roofline["cycles"] <= fluid["cycles"]
    against = {e["against"]: e for e in fluid["error"]}
    assert set(against) == {"reference simulator", "HDL"}
    assert 0 < against["reference simulator"]["mape"] < 0.05  # docs/dram.md: 0.92%
    assert "docs/dram.md" in doc["error_source"]


def test_tune_runs_in_the_worker_and_leaves_nothing_behind(flow):
    doc = flow["tune"].structured_content
    assert not flow["tune"].is_error and doc["winner"]["params"]["TB"] in (16, 64)
    assert flow["left"] == ["escape.step", "softmax.step", "swiglu.step"]  # task_check's too


def test_a_run_past_its_time_limit_is_a_tool_error_and_the_server_answers(flow):
    assert flow["slow"].is_error
    assert "time limit of 1 s" in flow["slow"].content[0].text
    after = flow["after"].structured_content
    assert after["ok"] and after["streams_page"]["returned"] == 2
    assert after["streams_page"]["next_offset"] == 2


def test_a_cancelled_run_is_stopped(flow):
    """The cancelled run would take minutes (past the session's time limit); the worker is
    killed on the cancel, so the next call waits only for a fresh worker, not for the
    limit to stop the run."""
    assert flow["after_cancel"].structured_content["ok"]
    assert flow["after_cancel_seconds"] < SESSION_LIMIT / 2


def test_paths_outside_the_workspace_are_refused(flow):
    for key in ("outside", "link"):
        assert flow[key].is_error
        assert "outside the workspace" in flow[key].content[0].text


def test_an_unknown_tool_is_a_tool_error(flow):
    result = flow["unknown_tool"]
    assert result.is_error and "no tool named 'compile'" in result.content[0].text


def test_an_argument_a_tool_does_not_take_is_refused(flow):
    result = flow["unknown_argument"]
    assert result.is_error and "'timing-only' was unexpected" in result.content[0].text


def test_explain_reads_the_documentation(flow):
    doc = flow["explain"].structured_content
    assert doc["code"] == UNKNOWN_OPERATOR and "Fix" in doc["doc"]


def test_a_workspace_that_is_not_a_directory_is_a_usage_error(tmp_path):
    from click.testing import CliRunner

    from stepc.cli.group import main
    result = CliRunner().invoke(main, ["mcp", "--workspace", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "not a directory" in result.output


def test_an_sdk_older_than_2_is_named(monkeypatch):
    import importlib.metadata

    from click.testing import CliRunner

    from stepc.cli.group import main
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "1.9.4")
    result = CliRunner().invoke(main, ["mcp"])
    assert result.exit_code == 2 and "found mcp 1.9.4" in result.output


def test_a_task_is_listed_shown_and_checked(flow):
    """The agent reads the task, submits its reference solution (reward 1.0: the same
    cycles as the reference it is scored against) and a wrong one (refused by the
    comparison, reward 0); both are results, not tool errors."""
    from stepc.app.tasks import task
    from stepc.tasks import task_names
    listed = flow["task_list"].structured_content["tasks"]
    assert [t["name"] for t in listed] == task_names() and "softmax" in task_names()
    shown = flow["task_show"].structured_content
    record = task("softmax")
    assert shown["statement"] == record.statement and shown["interface"] == record.interface()
    assert shown["solution"] == record.solution.read_text(encoding="utf-8")
    assert "folder" not in shown  # no path of the server's machine
    passed = flow["task_pass"].structured_content
    assert not flow["task_pass"].is_error and passed["status"] == "pass"
    assert passed["reward"] == 1.0 and passed["candidate"]["cycles"] == \
        passed["reference"]["cycles"] > 0
    assert passed["file"] == "softmax.step" and passed["seed"] == 3
    failed = flow["task_fail"].structured_content
    assert not flow["task_fail"].is_error and failed["status"] == "fail"
    assert failed["reward"] == 0 and failed["stage"] == "compare"
    assert failed["file"] == "mine.step" and "differs from the reference" in failed["reason"]
    assert flow["task_unknown"].is_error
    assert "no task `sofmax`" in flow["task_unknown"].content[0].text


MALFORMED = [  # (line, the id answered, the error code): each was unanswered before
    ('{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"check",'
     '"arguments":{"program":"\\ud800"}}}', 11, -32600),   # a lone surrogate
    ('{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"check"', None, -32700),
    ('{"jsonrpc":"2.0","id":13}', 13, -32600),
    ('{"jsonrpc":"2.0","id":14,"method":"tools/call","params":7}', 14, -32600),
    ("42", None, -32600),
    ("null", None, -32600),
]


def test_malformed_lines_get_json_rpc_errors_and_the_server_answers_after(tmp_path):
    """Raw lines on standard input: each malformed one gets the JSON-RPC error response
    (with its id when it can be read), a malformed response is dropped, and a valid
    request still gets its answer."""
    import json
    import subprocess
    import threading

    proc = subprocess.Popen([sys.executable, "-m", "stepc", "mcp", "--workspace",
                             str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=tmp_path)
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, b"")),
                              daemon=True)
    reader.start()

    def send(text: str) -> None:
        proc.stdin.write(text.encode() + b"\n")
        proc.stdin.flush()

    def answer(count: int) -> dict:
        end = time.monotonic() + 60
        while len(lines) < count and time.monotonic() < end:
            time.sleep(0.02)
        assert len(lines) >= count, f"no answer (the server said {len(lines)} lines)"
        return json.loads(lines[count - 1])

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}))
        assert answer(1)["id"] == 1
        send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        send('{"jsonrpc":"2.0","id":[1],"result":{}}')  # a response: dropped, no answer
        for n, (line, rid, code) in enumerate(MALFORMED, start=2):
            send(line)
            got = answer(n)
            assert (got["id"], got["error"]["code"]) == (rid, code), got
        send(json.dumps({"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": {
            "name": "explain", "arguments": {"code": "E0343"}}}))
        last = answer(len(MALFORMED) + 2)
        assert last["id"] == 99 and "result" in last
    finally:
        proc.kill()
        proc.wait()
