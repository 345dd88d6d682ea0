"""A fuzz pass over stepc lsp's standard input: framed messages generated from a seed (valid
messages of every kind the server handles, then mutated: bytes flipped, cut, inserted or
repeated, Content-Length off or absurd, headers lost, JSON values replaced by hostile ones)
are sent in one stream, then a valid request; the server must answer it and still run.
The default pass is short; `-m slow` runs longer streams from more seeds."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

pytest.importorskip("pygls")
pytest.importorskip("lsprotocol")

from lsp_client import LspClient, frame  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MOE = REPO / "programs" / "moe_simple.step"
URIS = [MOE.as_uri(), (REPO / "programs" / "no_such_file.step").as_uri(),
        "untitled:Untitled-1", REPO.as_uri(), ""]
METHODS = ["textDocument/hover", "textDocument/definition", "textDocument/references",
           "textDocument/completion", "textDocument/signatureHelp",
           "textDocument/documentSymbol", "textDocument/formatting",
           "textDocument/inlayHint", "textDocument/didOpen", "textDocument/didChange",
           "textDocument/didSave", "textDocument/didClose", "initialize", "initialized",
           "workspace/didChangeConfiguration", "$/cancelRequest", "no/such/method"]
HOSTILE_VALUES = [None, True, -1, 0, 2**31, 10**300, 1.5e308, "", "x" * 1000, [], {},
                  [[[[[]]]]], {"a": {"b": {"c": None}}}, "\ud800", "file:///\x00"]


def seed_messages(rng: random.Random) -> list[dict]:
    """Valid messages of each kind the server handles."""
    uri = rng.choice(URIS)
    pos = {"line": rng.randrange(60), "character": rng.randrange(80)}
    doc = {"uri": uri}
    text = MOE.read_text(encoding="utf-8")
    if rng.random() < 0.5:
        i = rng.randrange(len(text))
        text = text[:i] + rng.choice(["", "(", "=", "x", "\n", "é", "]]"]) + text[i + 1:]
    rid = rng.randrange(1, 10**6)
    return [
        {"id": rid, "method": "textDocument/hover",
         "params": {"textDocument": doc, "position": pos}},
        {"id": rid, "method": "textDocument/completion",
         "params": {"textDocument": doc, "position": pos}},
        {"id": rid, "method": "textDocument/signatureHelp",
         "params": {"textDocument": doc, "position": pos}},
        {"id": rid, "method": "textDocument/references",
         "params": {"textDocument": doc, "position": pos,
                    "context": {"includeDeclaration": True}}},
        {"id": rid, "method": "textDocument/documentSymbol", "params": {"textDocument": doc}},
        {"id": rid, "method": "textDocument/formatting",
         "params": {"textDocument": doc, "options": {"tabSize": 4, "insertSpaces": True}}},
        {"id": rid, "method": "textDocument/inlayHint",
         "params": {"textDocument": doc, "range": {"start": pos, "end": pos}}},
        {"method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "step", "version": rng.randrange(100), "text": text}}},
        {"method": "textDocument/didChange", "params": {
            "textDocument": {"uri": uri, "version": rng.randrange(100)},
            "contentChanges": [{"range": {"start": pos, "end": pos}, "text": "x"}]}},
        {"method": "textDocument/didClose", "params": {"textDocument": doc}},
        {"method": "workspace/didChangeConfiguration",
         "params": {"settings": {"stepc": {"defines": {"E": rng.choice([2, "x", -1])},
                                           "inlayHints": True}}}},
        {"method": "$/cancelRequest", "params": {"id": rid}},
        {"id": f"s{rid}", "result": None},
    ]


def hostile_json(rng: random.Random, value):
    """`value` with one of its leaves or keys replaced by something a client should not
    send."""
    if isinstance(value, dict) and value and rng.random() < 0.8:
        key = rng.choice(list(value))
        value = dict(value)
        action = rng.random()
        if action < 0.15:
            del value[key]
        elif action < 0.3:
            value[key + "x"] = value.pop(key)
        else:
            value[key] = hostile_json(rng, value[key])
        return value
    choice = rng.random()
    if choice < 0.05:
        depth = rng.choice([100, 2000, 100000])
        return json.loads("[" * min(depth, 500) + "]" * min(depth, 500))
    if choice < 0.15:
        return rng.choice(METHODS)
    return rng.choice(HOSTILE_VALUES)


def encode(value) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **value} if isinstance(value, dict) else value,
                      ensure_ascii=False).encode("utf-8", "surrogatepass")


def mutate(rng: random.Random, data: bytes) -> bytes:
    """`data` (a framed message) damaged in one of the ways a broken client damages it."""
    kind = rng.randrange(9)
    if kind == 0:  # bytes flipped
        data = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if kind == 1:  # cut short
        return data[:rng.randrange(len(data))]
    if kind == 2:  # bytes inserted
        i = rng.randrange(len(data))
        return data[:i] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 40))) + data[i:]
    if kind == 3:  # a piece repeated
        i, j = sorted(rng.randrange(len(data)) for _ in range(2))
        return data[:j] + data[i:j] + data[j:]
    body = data.split(b"\r\n\r\n", 1)[-1]
    if kind == 4:  # the Content-Length off, or absurd
        length = rng.choice([0, 1, len(body) - rng.randint(1, 20), len(body) + rng.randint(1, 20),
                             2**31, 10**12, int("9" * 50)])
        return f"Content-Length: {max(length, 0)}\r\n\r\n".encode() + body
    if kind == 5:  # headers lost or mangled
        return rng.choice([body, b"Content-Length: \r\n\r\n" + body,
                           b"Content-Type: x\r\n\r\n" + body,
                           b"content-length:" + str(len(body)).encode() + b"\n\n" + body,
                           b"Content-Length: " + str(len(body)).encode() + b"\r\n" + body])
    if kind == 6:  # random bytes
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
    if kind == 7:  # a deep nest
        return frame(b"[" * 50000 + b"]" * rng.choice([0, 50000]))
    return data  # left whole: valid messages keep the server busy meanwhile


def stream(seed: int, count: int) -> bytes:
    """`count` messages from `seed`: valid ones, ones with hostile values, damaged ones."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        value = rng.choice(seed_messages(rng))
        if rng.random() < 0.5:
            value = hostile_json(rng, value)
        data = frame(encode(value))
        out.append(mutate(rng, data) if rng.random() < 0.6 else data)
    return b"".join(out)


def survives(seed: int, count: int) -> None:
    c = LspClient(str(REPO))
    try:
        c.request("initialize", {"processId": None, "rootUri": REPO.as_uri(),
                                 "capabilities": {}})
        c.send_raw(stream(seed, count))
        c.send({"id": "final", "method": "textDocument/documentSymbol",
                "params": {"textDocument": {"uri": MOE.as_uri()}}})
        answer = c.wait_answer("final")
        assert "result" in answer, (seed, answer)
        assert c.proc.poll() is None, (seed, "".join(c.stderr)[-2000:])
        internal = [n["params"]["message"] for n in c.notifications
                    if "internal error" in str(n.get("params"))]
        assert internal == [], (seed, internal)
        crashed = [e["message"] for e in c.errors if e["code"] == -32603]
        assert crashed == [], (seed, crashed)  # an exception of stepc's, not an answer
    finally:
        c.close() if c.proc.poll() is None else c.proc.wait()


def test_a_short_fuzz_stream_leaves_the_server_answering():
    survives(seed=2026, count=150)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_long_fuzz_streams_leave_the_server_answering(seed):
    survives(seed=seed, count=2000)
