"""stepc mcp under hostile calls: seeded tool calls whose arguments are mutated (wrong types,
huge and negative numbers, device files and paths that leave the workspace, lone
surrogates, very long strings, unknown hardware keys) and malformed JSON-RPC lines, sent
raw on standard input. Every call gets an answer, none is an internal error, and a valid
request is answered after each."""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import sys
import threading
import time
from importlib.util import find_spec
from pathlib import Path

import pytest

from stepc.mcp.schemas import TOOLS  # noqa: E402

# the server's own process loads the MCP SDK; this one only needs to know it is there
pytestmark = [pytest.mark.xdist_group("mcp_fuzz"),
              pytest.mark.skipif(find_spec("mcp") is None, reason="the MCP SDK is not installed")]

REPO = Path(__file__).resolve().parents[1]
SWIGLU = (REPO / "programs" / "swiglu.step").read_text(encoding="utf-8")
SERVER_LIMIT = 10  # the server's --time-limit, seconds: no call may outlast it
ANSWER_WAIT = 60  # seconds a test waits for one answer on a loaded machine

VALID = {  # per tool, arguments that work; the fuzzer mutates one or two of them
    "check": {"path": "swiglu.step", "params": {"TB": 32}, "limit": 5},
    "analyze": {"path": "swiglu.step", "hw": "paper-eval", "limit": 5},
    "simulate": {"path": "swiglu.step", "params": {"B": 32}, "timing_only": True},
    "format": {"program": SWIGLU, "name": "mine.step"},
    "explain": {"code": "E0343"},
    "operator": {"name": "Map"},
    "tune": {"paths": ["swiglu.step"], "space": {"TB": [16, 32]}},
    "estimate": {"path": "swiglu.step", "fidelity": ["roofline"]},
    "task_list": {},
    "task_show": {"name": "softmax"},
    "task_check": {"task": "softmax", "program": "param X = 1;", "seed": 1},
}
HOSTILE = {  # per JSON type, values of that type a careless or hostile agent sends
    "string": ["", "\x00", "\ud800", "x" * 100_000, "../swiglu.step", "/dev/zero",
               "/etc/passwd", "nothing.step", "swiglu.step", "dir/", "~", "paper-eval",
               "hdl-like", "E9999", "Mapp", "softmax", "param X = ;", SWIGLU[:200],
               "import \"/dev/zero\"\n", "fn=\u00e9\u00e8", "\r\n" * 50],
    "integer": [0, -1, 1, 2**31, 2**63, 10**40, -(10**40)],
    "number": [0, -1, 1e308, -1e-308, 0.5, 10**40],
    "boolean": [True, False],
    "array": [[], [1], ["swiglu.step"] * 50, ["../swiglu.step"], [None], ["cycles", "x"],
              ["fluid", "roofline", "ref", "dram", "nope"]],
    "object": [{}, {"TB": -5}, {"TB": 0}, {"B": 10**40}, {"": 1}, {"fabric.fifo_depth": 0},
               {"dram.part": "/etc/passwd"}, {"dram.part": "swiglu.step"},
               {"hbm.model": "nope"}, {"TB": [16] * 200}, {"TB": []},
               {"on_chip_bytes": "-1MiB"}, {"on_chip_bytes": "lots"}, {"routing": "/dev/zero"},
               {"x": {"y": {"z": []}}}, {"fabric.fifo_depth": 10**40}],
    "null": [None],
}
MALFORMED = [
    "", "{", "[]", "[{}]", "\x00\x01\x02", '{"jsonrpc":"2.0","id":{},"method":"ping"}',
    '{"jsonrpc":"2.0","id":3,"method":7}', '{"jsonrpc":"2.0","id":4,"method":"tools/call"}',
    '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":[],"arguments":{}}}',
    '{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"check","arguments":3}}',
    '{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}', "\"" + "a" * 10_000,
]


def _types(tool: str, key: str) -> list[str]:
    """The JSON types the tool's schema takes for `key` (every type when it takes any)."""
    spec = TOOLS[tool]["input"]["properties"][key]
    kinds = spec.get("type") or [t for s in spec.get("anyOf", spec.get("oneOf", []))
                                 for t in ([s["type"]] if isinstance(s.get("type"), str)
                                           else s.get("type", []))]
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    return kinds or sorted(HOSTILE)


def mutated_calls(seed: int, count: int) -> list[tuple[str, dict]]:
    """`count` tool calls, each a valid one with one to three arguments the tool takes
    replaced: mostly by a value of the type its schema asks for, sometimes by any value."""
    rng = random.Random(seed)
    calls = []
    for _ in range(count):
        tool = rng.choice(sorted(VALID))
        args = dict(VALID[tool])
        keys = sorted(TOOLS[tool]["input"]["properties"])
        for _ in range(rng.randint(1, 3) if keys else 0):
            key = rng.choice(keys)
            kinds = _types(tool, key) if rng.random() < 0.85 else sorted(HOSTILE)
            args[key] = rng.choice(HOSTILE[rng.choice(kinds)])
        calls.append((tool, args))
    return calls


class RawServer:
    """`stepc mcp` on pipes: send a line, wait for the n-th line it answers."""

    def __init__(self, workspace: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stepc", "mcp", "--workspace", str(workspace),
             "--time-limit", str(SERVER_LIMIT)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=workspace,
            env={"PYTHONPATH": str(REPO), "PATH": ""})
        self.lines: list[bytes] = []
        threading.Thread(target=lambda: self.lines.extend(
            iter(self.proc.stdout.readline, b"")), daemon=True).start()
        self.next_id = 1000

    def send(self, text: str) -> None:
        self.proc.stdin.write(text.encode("utf-8", "surrogatepass") + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        """Send a request and return its answer (the answers of earlier lines skipped)."""
        self.next_id += 1
        rid = self.next_id
        self.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                              "params": params}))
        end = time.monotonic() + ANSWER_WAIT
        seen = 0
        while time.monotonic() < end:
            while seen < len(self.lines):
                got = json.loads(self.lines[seen])
                seen += 1
                if got.get("id") == rid:
                    return got
            assert self.proc.poll() is None, f"the server exited ({self.proc.returncode})"
            time.sleep(0.02)
        raise AssertionError(f"no answer to {method} {params} in {ANSWER_WAIT} s")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


@contextlib.contextmanager
def _started(folder):
    """An initialised server working in `folder` (holding swiglu.step)."""
    (folder / "swiglu.step").write_text(SWIGLU, encoding="utf-8")
    raw = RawServer(folder)
    try:
        answer = raw.request("initialize", {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "fuzz", "version": "1"}})
        assert "result" in answer
        raw.send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
        yield raw
    finally:
        raw.close()


@pytest.fixture
def server(tmp_path):
    with _started(tmp_path) as raw:
        yield raw


@pytest.fixture(scope="module")
def one_server(tmp_path_factory):
    """A server the short fuzz and the refusal cases share (each start takes seconds)."""
    with _started(tmp_path_factory.mktemp("names")) as raw:
        yield raw


def _no_internal_error(tool: str, args: dict, answer: dict) -> None:
    text = json.dumps(answer)
    assert "internal error" not in text and "Traceback" not in text, (tool, args, text[:2000])
    if "result" in answer:
        assert answer["result"].get("content") or answer["result"].get("structuredContent"), (
            tool, args, text[:2000])


def _fuzz(server: RawServer, seed: int, count: int) -> None:
    rng = random.Random(seed)
    for tool, args in mutated_calls(seed, count):
        if rng.random() < 0.3:
            server.send(rng.choice(MALFORMED))
        try:
            answer = server.request("tools/call", {"name": tool, "arguments": args})
        except (TypeError, ValueError):  # an argument JSON cannot carry (10**40 is fine)
            continue
        _no_internal_error(tool, args, answer)
        after = server.request("tools/call", {"name": "explain",
                                              "arguments": {"code": "E0343"}})
        assert "result" in after and not after["result"].get("isError"), after


def test_mutated_tool_calls_get_answers_and_no_internal_error(one_server):
    _fuzz(one_server, seed=1, count=24)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2, 8))
def test_many_mutated_tool_calls(server, seed):
    _fuzz(server, seed=seed, count=150)


@pytest.mark.parametrize("tool, args", [
    ("simulate", {"path": "x" * 300}),
    ("check", {"program": SWIGLU, "name": "y" * 300}),
    ("task_check", {"task": "z" * 100_000, "program": SWIGLU}),
    ("task_check", {"task": "softmax", "program": SWIGLU, "name": "w" * 300}),
    ("task_check", {"task": "softmax", "program": SWIGLU, "name": "dir/"}),
])
def test_names_the_file_system_cannot_take_are_refused(one_server, tool, args):
    """Each was an internal error (OSError: File name too long; IsADirectoryError)."""
    answer = one_server.request("tools/call", {"name": tool, "arguments": args})
    _no_internal_error(tool, args, answer)
    assert answer["result"]["isError"]
    text = answer["result"]["content"][0]["text"]
    assert any(s in text for s in ("longer than 255 bytes", "no task", "expected a file name")
               ), text
    assert len(text) < 2000
