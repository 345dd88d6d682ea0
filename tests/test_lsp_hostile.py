"""stepc lsp survives every malformed message: each hostile input below is followed by a
valid request, whose answer must arrive from a server still running. A request the server
cannot read gets the JSON-RPC error the specification says (to id null when its id cannot
be read); a notification or a response it cannot read is dropped with a line in the log.
A request on a document never opened is answered from the file on disk, or refused naming
the URI. The fuzz pass (tests/test_lsp_fuzz.py) sends random and mutated messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pygls")
pytest.importorskip("lsprotocol")

from lsp_client import LspClient, frame  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MOE = REPO / "programs" / "moe_simple.step"
PARSE_ERROR, INVALID_REQUEST, REQUEST_FAILED = -32700, -32600, -32803


def message(value: dict) -> bytes:
    return frame(json.dumps(value).encode())


# name -> (bytes sent, the error code answered to id null, or None: dropped with a log line)
HOSTILE = {
    "a number": (frame(b"42"), INVALID_REQUEST),
    "null": (frame(b"null"), INVALID_REQUEST),
    "an empty object": (frame(b"{}"), INVALID_REQUEST),
    "an array": (frame(b"[1, 2]"), INVALID_REQUEST),
    "a request without jsonrpc": (frame(b'{"id": null, "method": "initialize"}'),
                                  INVALID_REQUEST),
    "a notification without jsonrpc": (frame(b'{"method": "initialized", "params": {}}'),
                                       None),
    "an id of 5000 digits": (frame(b'{"jsonrpc": "2.0", "id": ' + b"9" * 5000
                                   + b', "method": "shutdown"}'), INVALID_REQUEST),
    "a request whose id is a list": (message({"jsonrpc": "2.0", "id": [1],
                                              "method": "shutdown"}), INVALID_REQUEST),
    "a response whose id is a list": (message({"jsonrpc": "2.0", "id": [1],
                                               "result": None}), None),
    "a response whose id is an object": (message({"jsonrpc": "2.0", "id": {"a": 1},
                                                  "error": {"code": 1, "message": "x"}}), None),
    "100000 nested arrays": (frame(b"[" * 100000 + b"]" * 100000), PARSE_ERROR),
    "100000 nested arrays in params": (frame(b'{"jsonrpc": "2.0", "method": "initialized", '
                                             b'"params": ' + b"[" * 100000 + b"]" * 100000
                                             + b"}"), PARSE_ERROR),
    "Content-Length 0": (b"Content-Length: 0\r\n\r\n", PARSE_ERROR),
    "Content-Length 10^12 before a body that is not JSON":
        (b"Content-Length: 1000000000000\r\n\r\nnot json at all", INVALID_REQUEST),
    "Content-Length of 5000 digits": (b"Content-Length: " + b"7" * 5000 + b"\r\n\r\n{}",
                                      INVALID_REQUEST),
    "Content-Length 5 and no body": (b"Content-Length: 5\r\n\r\n", PARSE_ERROR),
    "a header line of a megabyte": (b"X-Junk: " + b"x" * 2**20 + b"\r\n", None),
    "bytes that are not UTF-8": (frame(b"\xff\xfe\x00{"), PARSE_ERROR),
}


@pytest.fixture(scope="module")
def server():
    c = LspClient(str(REPO))
    c.request("initialize", {"processId": None, "rootUri": REPO.as_uri(), "capabilities": {}})
    c.notify("initialized", {})
    uri = MOE.as_uri()
    c.notify("textDocument/didOpen", {"textDocument": {
        "uri": uri, "languageId": "step", "version": 1, "text": MOE.read_text()}})
    yield c, uri
    c.close()


def send_valid(c: LspClient, uri: str) -> int:
    """A valid request (sent right after the hostile input, as an editor would); its id."""
    c.next_id += 1
    c.send({"id": c.next_id, "method": "textDocument/documentSymbol",
            "params": {"textDocument": {"uri": uri}}})
    return c.next_id


def answered(c: LspClient, rid: int) -> None:
    """The valid request is answered, and the server runs on."""
    symbols = c.wait_answer(rid)["result"]
    assert any(s["name"] == "route" for s in symbols)
    assert c.proc.poll() is None


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_message_is_answered_or_dropped_and_the_server_goes_on(server, name):
    c, uri = server
    data, code = HOSTILE[name]
    c.send_raw(data)
    rid = send_valid(c, uri)
    if code is not None:
        error = c.wait_answer(None)["error"]
        assert error["code"] == code, error
        assert "Traceback" not in error["message"] and "Error:" not in error["message"]
    answered(c, rid)


def test_a_bad_request_with_a_readable_id_is_answered_to_it(server):
    c, uri = server
    for rid, value, code in [
            (801, {"id": 801, "method": "textDocument/hover"}, INVALID_REQUEST),  # no jsonrpc
            (802, {"jsonrpc": "2.0", "id": 802, "method": 7}, INVALID_REQUEST),
            (803, {"jsonrpc": "2.0", "id": 803, "method": "textDocument/hover",
                   "params": 5}, INVALID_REQUEST),
            (804, {"jsonrpc": "2.0", "id": 804}, INVALID_REQUEST),
            (805, {"jsonrpc": "2.0", "id": 805, "method": "textDocument/hover", "params": {
                "textDocument": {"uri": uri}, "position": {"line": 10**200, "character": 0}}},
             -32602)]:
        c.send_raw(message(value))
        assert c.wait_answer(rid)["error"]["code"] == code, value
    # a body cut short shows its id: the parse error goes to it
    body = json.dumps({"jsonrpc": "2.0", "id": 806, "method": "shutdown"}).encode()
    c.send_raw(frame(body)[:-5] + b"\r\n")
    rid = send_valid(c, uri)
    assert c.wait_answer(806)["error"]["code"] == PARSE_ERROR
    answered(c, rid)


def test_a_message_too_large_is_refused_to_its_id_and_skipped(server):
    c, uri = server
    body = b'{"jsonrpc": "2.0", "id": 807, "method": "textDocument/didOpen", "params": "'
    c.send_raw(f"Content-Length: {2**40}\r\n\r\n".encode() + body + b"x" * 2**20 + b'"}')
    error = c.wait_answer(807)["error"]
    assert error["code"] == INVALID_REQUEST and "64 MiB" in error["message"]
    answered(c, send_valid(c, uri))


def test_an_unreadable_notification_or_response_is_logged(server):
    c, uri = server
    c.send_raw(message({"jsonrpc": "2.0", "id": [1], "result": None}))
    # a response whose id is that of a request of the editor's still running (a hover
    # waiting for the first check of a document just opened)
    other = MOE.with_name("moe_copy.step").as_uri()
    c.notify("textDocument/didOpen", {"textDocument": {
        "uri": other, "languageId": "step", "version": 1, "text": MOE.read_text()}})
    c.send({"id": 850, "method": "textDocument/hover", "params": {
        "textDocument": {"uri": other}, "position": {"line": 0, "character": 0}}})
    c.send_raw(message({"jsonrpc": "2.0", "id": 850, "result": None}))
    assert "result" in c.wait_answer(850)
    c.send_raw(message({"method": "initialized", "params": {}}))
    answered(c, send_valid(c, uri))
    logs = [n["params"]["message"] for n in c.notifications
            if n["method"] == "window/logMessage"]
    assert any("dropped a message: a response with id an array" in m for m in logs), logs
    assert any("initialized: a notification without" in m for m in logs), logs
    assert any("id 850, which names no request" in m for m in logs), logs


def test_a_request_after_shutdown_is_refused_until_exit():
    c = LspClient(str(REPO))
    try:
        c.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        c.request("shutdown", {})
        c.send({"id": 90, "method": "textDocument/documentSymbol",
                "params": {"textDocument": {"uri": MOE.as_uri()}}})
        assert c.wait_answer(90)["error"]["code"] == INVALID_REQUEST
        c.notify("exit", {})
        assert c.proc.wait(timeout=10) == 0
    finally:
        if c.proc.poll() is None:
            c.proc.kill()
        c.proc.wait()


def test_a_document_never_opened_is_read_from_disk_or_refused_by_uri(server, tmp_path):
    c, _ = server
    program = tmp_path / "closed.step"
    program.write_text(MOE.read_text())
    symbols = c.request("textDocument/documentSymbol",
                        {"textDocument": {"uri": program.as_uri()}})
    assert any(s["name"] == "route" for s in symbols)
    lines = MOE.read_text().splitlines()
    line = next(i for i, t in enumerate(lines) if "rows = Flatten" in t)
    position = {"line": line, "character": lines[line].index("rows = Flatten")}
    hover = c.request("textDocument/hover", {"textDocument": {"uri": program.as_uri()},
                                             "position": position})
    assert hover is not None and "D_0" in hover["contents"]["value"]
    program.write_text("param P = 3\n")  # changed on disk: read again
    assert c.request("textDocument/documentSymbol",
                     {"textDocument": {"uri": program.as_uri()}})[0]["name"] == "P"
    for uri in ((tmp_path / "missing.step").as_uri(), "untitled:Untitled-1", tmp_path.as_uri()):
        for method, params in [("textDocument/hover", {"position": {"line": 0, "character": 0}}),
                               ("textDocument/completion",
                                {"position": {"line": 0, "character": 0}}),
                               ("textDocument/formatting",
                                {"options": {"tabSize": 4, "insertSpaces": True}})]:
            c.next_id += 1
            c.send({"id": c.next_id, "method": method,
                    "params": {"textDocument": {"uri": uri}, **params}})
            error = c.wait_answer(c.next_id)["error"]
            assert error["code"] == REQUEST_FAILED and uri in error["message"], error
            assert "Errno" not in error["message"] and "Error" not in error["message"]
