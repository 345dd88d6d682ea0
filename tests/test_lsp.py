"""stepc lsp, driven over stdio as an editor drives it (tests/lsp_client.py): diagnostics
as the user types (with the spans of `stepc check`, across imports), hover, completion,
signature help, definition, references, outline, formatting through `stepc fmt`, inlay
hints, settings, and checks of a 128-expert program kept off the editor's thread with
stale ones dropped."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls")
pytest.importorskip("lsprotocol")

from lsp_client import LspClient  # noqa: E402

from stepc.grammar.format import format_source  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from gen_moe import generate  # noqa: E402

MOE = REPO / "programs" / "moe_simple.step"
pytestmark = pytest.mark.xdist_group("lsp")  # the tests share a server, on one worker


def started() -> LspClient:
    c = LspClient(str(REPO))
    c.request("initialize", {"processId": None, "rootUri": REPO.as_uri(), "capabilities": {},
                             "initializationOptions": {"stepc": {"inlayHints": True}}})
    c.notify("initialized", {})
    return c


@pytest.fixture(scope="module")
def shared_server():
    c = started()
    yield c
    c.close()


@pytest.fixture
def client(shared_server):
    """The module's server, for a test that leaves its settings alone and opens documents
    of its own (a start of the server costs seconds)."""
    shared_server.notifications.clear()
    return shared_server


@pytest.fixture
def own_client():
    """A server of the test's own, whose settings it changes."""
    c = started()
    yield c
    c.close()


@pytest.fixture
def moe(tmp_path) -> Path:
    """moe_simple.step in the test's own folder: its document on the shared server is the
    test's alone."""
    path = tmp_path / MOE.name
    path.write_text(MOE.read_text(encoding="utf-8"), encoding="utf-8")
    return path


def open_doc(c: LspClient, path: Path, text: str | None = None) -> tuple[str, list[dict]]:
    """Open a document; its uri and first diagnostics."""
    uri = path.as_uri()
    c.notify("textDocument/didOpen", {"textDocument": {
        "uri": uri, "languageId": "step", "version": 1,
        "text": path.read_text(encoding="utf-8") if text is None else text}})
    return uri, diagnostics(c, uri, 1)


def change(c: LspClient, uri: str, version: int, text: str) -> None:
    c.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                        "contentChanges": [{"text": text}]})


def diagnostics(c: LspClient, uri: str, version: int) -> list[dict]:
    return c.wait_notification("textDocument/publishDiagnostics", lambda p: p["uri"] == uri
                               and p.get("version") == version)["diagnostics"]


def at(uri: str, line: int, character: int) -> dict:
    return {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}


def find(lines: list[str], needle: str) -> tuple[int, int]:
    """0-based (line, character) of the first occurrence of `needle`."""
    for i, line in enumerate(lines):
        if needle in line:
            return i, line.index(needle)
    raise AssertionError(f"{needle!r} not in the document")


def apply(text: str, edits: list[dict]) -> str:
    """The text after whole-document text edits (what the server's formatting returns)."""
    lines = text.split("\n")
    for e in sorted(edits, key=lambda e: (e["range"]["start"]["line"],
                                          e["range"]["start"]["character"]), reverse=True):
        s, t = e["range"]["start"], e["range"]["end"]
        head = "\n".join(lines[:s["line"]] + [lines[s["line"]][:s["character"]]
                                              if s["line"] < len(lines) else ""])
        tail_line = lines[t["line"]][t["character"]:] if t["line"] < len(lines) else ""
        tail = "\n".join([tail_line] + lines[t["line"] + 1:])
        if s["line"] >= len(lines):
            head += "\n"
        lines = (head + e["newText"] + tail).split("\n")
    return "\n".join(lines)


def test_editing_a_bundled_program(client, moe):
    text = MOE.read_text(encoding="utf-8")
    lines = text.split("\n")
    uri, diags = open_doc(client, moe)
    assert diags == []

    # hover a stream: its inferred type and shape
    line, col = find(lines, "x = LinearOffChipLoad")
    hover = client.request("textDocument/hover", at(uri, line, col))["contents"]["value"]
    assert "x : Strm<Tile<bf16, [1, 64]>, 1>[10, 1]" in hover
    assert "shape `[10, 1]`" in hover
    # a stream inside the loop: its symbolic shape and where its symbol came from
    line, col = find(lines, "packed = Accum")
    hover = client.request("textDocument/hover", at(uri, line, col + 2))["contents"]["value"]
    assert "[ceil(D_0/4)]" in hover and "Tile<bf16, [4, 64]>" in hover
    assert "symbols:\n- `D_0`: dynamic-regular, introduced by `p` at `moe_simple.step:32:5`" \
        ": elements routed to output 0 by Partition" in hover

    # edit it into an error: the diagnostic is where `stepc check` puts it
    line, col = find(lines, "tile=[1, D]")
    bad = lines.copy()
    bad[line] = bad[line].replace("tile=[1, D]", "tile=[1, Q]")
    change(client, uri, 2, "\n".join(bad))
    diags = diagnostics(client, uri, 2)
    first = diags[0]
    q = col + len("tile=[1, ")
    assert first["code"] == "E0101" and "`Q`" in first["message"]
    assert first["range"] == {"start": {"line": line, "character": q},
                              "end": {"line": line, "character": q + 1}}
    assert first["severity"] == 1 and first["source"] == "stepc"

    # complete an attribute of the operator being typed, then a value of one
    line, _ = find(lines, "packed = Accum")
    typing = bad.copy()
    typing[line] = "    packed = Accum(tiles, "
    change(client, uri, 3, "\n".join(typing))
    items = client.request("textDocument/completion",
                           at(uri, line, len(typing[line])))["items"]
    attrs = {i["label"]: i for i in items if i["kind"] == 10}  # Property
    assert {"fn=", "rank=", "init="} <= set(attrs) and "tiles" not in attrs
    assert attrs["rank="]["insertText"] == "rank="
    typing[line] = "    packed = Accum(tiles, fn="
    change(client, uri, 4, "\n".join(typing))
    items = client.request("textDocument/completion",
                           at(uri, line, len(typing[line])))["items"]
    labels = {i["label"] for i in items}
    assert {"retile_row", "retile_col", "matmul"} <= labels and "exp" not in labels  # accum fns

    # format the document: the formatter's output (here: the file as it was)
    messy = text.replace("x = LinearOffChipLoad(X, tile=[1, D])",
                         "x=LinearOffChipLoad( X,tile = [1,D] )")
    messy = messy.replace("param E = 2          #", "param  E=2 #")
    assert messy != text
    change(client, uri, 5, messy)
    edits = client.request("textDocument/formatting", {
        "textDocument": {"uri": uri}, "options": {"tabSize": 4, "insertSpaces": True}})
    assert apply(messy, edits) == format_source(messy) == text
    assert diagnostics(client, uri, 5) == []


def test_navigation_outline_signatures_and_inlay_hints(client, moe):
    text = MOE.read_text(encoding="utf-8")
    lines = text.split("\n")
    uri, _ = open_doc(client, moe)

    line, col = find(lines, "xe = Expand(xr")
    use = col + len("xe = Expand(")
    (loc,) = client.request("textDocument/definition", at(uri, line, use))
    def_line, def_col = find(lines, "xr = Reshape")
    assert loc["uri"] == uri and loc["range"]["start"] == {"line": def_line,
                                                           "character": def_col}
    refs = client.request("textDocument/references",
                          {**at(uri, def_line, def_col), "context": {"includeDeclaration": True}})
    assert sorted(r["range"]["start"]["line"] for r in refs) == [def_line, line]

    # a param: its value and how to override it
    line, col = find(lines, "param CHUNK")
    hover = client.request("textDocument/hover", at(uri, line, col + 6))["contents"]["value"]
    assert "param CHUNK = 4" in hover and "-D CHUNK=VALUE" in hover

    symbols = client.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
    names = [s["name"] for s in symbols]
    assert names[:6] == ["E", "ROWS", "D", "N", "CHUNK", "TILE_N"]
    loop = next(s for s in symbols if s["name"].startswith("for i in"))
    assert "packed" in [c["name"] for c in loop["children"]]

    line, col = find(lines, "p = Partition(x, route, ")
    sig = client.request("textDocument/signatureHelp",
                         at(uri, line, col + len("p = Partition(x, route, ")))
    label = sig["signatures"][0]["label"]
    assert label.startswith("Partition(")
    active = sig["signatures"][0]["parameters"][sig["activeParameter"]]["label"]
    assert active.startswith("rank")

    hints = client.request("textDocument/inlayHint", {
        "textDocument": {"uri": uri},
        "range": {"start": {"line": 0, "character": 0},
                  "end": {"line": len(lines), "character": 0}}})
    line, _ = find(lines, "x = LinearOffChipLoad")
    assert {"line": line, "character": len(lines[line])} in [h["position"] for h in hints]
    assert any(h["label"] == "[10, 1] of Tile<bf16, [1, 64]>" for h in hints)


def test_errors_in_an_imported_file_show_at_the_import(client, tmp_path):
    (tmp_path / "lib").mkdir()  # copies: their documents are the test's alone
    lib, main = tmp_path / "lib" / "attention.step", tmp_path / "attention_dynamic.step"
    for copy in (lib, main):
        copy.write_text((REPO / "programs" / copy.relative_to(tmp_path)).read_text(
            encoding="utf-8"), encoding="utf-8")
    lib_uri, _ = open_doc(client, lib)
    main_uri, diags = open_doc(client, main)
    assert [d for d in diags if d["severity"] == 1] == []
    # the unsaved text of the open library is what the program imports
    lib_lines = lib.read_text(encoding="utf-8").split("\n")
    line, col = find(lib_lines, "tile=[TILE_N, HEAD_DIM]")
    lib_lines[line] = lib_lines[line].replace("HEAD_DIM]", "HEAD_DIMS]", 1)
    change(client, lib_uri, 2, "\n".join(lib_lines))
    published = client.wait_notification(
        "textDocument/publishDiagnostics",
        lambda p: p["uri"] == lib_uri and
        any("HEAD_DIMS" in d["message"] for d in p["diagnostics"]))
    (d,) = [d for d in published["diagnostics"] if "HEAD_DIMS" in d["message"]]
    assert d["range"]["start"] == {"line": line, "character": col + len("tile=[TILE_N, ")}
    main_diags = client.wait_notification(
        "textDocument/publishDiagnostics",
        lambda p: p["uri"] == main_uri and p["diagnostics"])["diagnostics"]
    line, col = find(main.read_text(encoding="utf-8").split("\n"), '"lib/attention.step"')
    assert any("in the imported file attention.step" in m["message"] and
               m["range"]["start"]["line"] == line for m in main_diags)


def test_settings_override_params_and_bad_ones_are_refused(own_client):
    client = own_client
    uri, _ = open_doc(client, MOE)
    client.notify("workspace/didChangeConfiguration",
                  {"settings": {"stepc": {"defines": {"CHUNK": 5, "NOPE": 1}, "hw": "no-such",
                                          "inlayHint": True}}})
    shown = client.wait_notification("window/showMessage", lambda p: "stepc.hw" in p["message"])
    assert shown["type"] == 1
    shown = client.wait_notification("window/showMessage",
                                     lambda p: "stepc.inlayHint:" in p["message"])
    assert "no such setting (did you mean `inlayHints`?)" in shown["message"]
    diags = client.wait_notification(
        "textDocument/publishDiagnostics",
        lambda p: p["uri"] == uri and any("NOPE" in d["message"] for d in p["diagnostics"]))
    assert any(d["code"] == "E0106" for d in diags["diagnostics"])
    line, col = find(MOE.read_text(encoding="utf-8").split("\n"), "param CHUNK")
    hover = client.request("textDocument/hover", at(uri, line, col + 6))["contents"]["value"]
    assert "param CHUNK = 5" in hover and "stepc.defines" in hover

    # with a hardware preset, an operator's hover has its roofline numbers
    client.notify("workspace/didChangeConfiguration",
                  {"settings": {"stepc": {"hw": "paper-eval"}}})
    client.wait_notification("textDocument/publishDiagnostics",
                             lambda p: p["uri"] == uri and not p["diagnostics"])
    lines = MOE.read_text(encoding="utf-8").split("\n")
    line, col = find(lines, "Map(xe, wf")
    hover = client.request("textDocument/hover", at(uri, line, col + 1))["contents"]["value"]
    assert "Map<A,B,a>(" in hover and "roofline on `paper-eval`:" in hover
    assert re.search(r"this operator: 0 bytes off-chip, 131072\*ceil\(D_0/4\) FLOPs; "
                     r"at least 128\*ceil\(D_0/4\) cycles", hover), hover


def test_checks_of_a_large_program_stay_off_the_editors_thread(client, tmp_path):
    """The 128-expert program: while a re-check runs, hover answers (from the last check)
    before the check's diagnostics arrive; of a burst of edits only the last is reported."""
    path = tmp_path / "moe128.step"
    text = generate(128)
    path.write_text(text, encoding="utf-8")
    lines = text.split("\n")
    uri, diags = open_doc(client, path, text)
    assert [d for d in diags if d["severity"] == 1] == []
    line = next(i for i, ln in enumerate(lines) if re.match(r"\w+ = ", ln))

    change(client, uri, 2, text + "\n")
    client.wait_notification("window/logMessage",
                             lambda p: f"checking {path} (version 2)" in p["message"])
    hover = client.request("textDocument/hover", at(uri, line, 0))
    assert hover is not None and "Strm<" in hover["contents"]["value"]
    assert not [n for n in client.notifications
                if n["method"] == "textDocument/publishDiagnostics"
                and n["params"]["uri"] == uri], "the hover waited for the check"
    diagnostics(client, uri, 2)

    for version in range(3, 13):  # keystrokes faster than the debounce
        change(client, uri, version, text + " " * version)
    assert [d for d in diagnostics(client, uri, 12) if d["severity"] == 1] == []
    stale = [n for n in client.notifications if n["method"] ==
             "textDocument/publishDiagnostics" and n["params"]["uri"] == uri
             and n["params"].get("version") != 12]
    assert stale == []


def test_a_hover_right_after_opening_waits_for_the_check(client, moe):
    """No diagnostics awaited first: the hover waits for the document's first check."""
    text = MOE.read_text(encoding="utf-8")
    line, char = find(text.split("\n"), "rows = Flatten")
    uri = moe.as_uri()
    client.notify("textDocument/didOpen", {"textDocument": {
        "uri": uri, "languageId": "step", "version": 1, "text": text}})
    hover = client.request("textDocument/hover", at(uri, line, char))
    assert hover is not None and "D_0" in hover["contents"]["value"]
    symbols = client.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
    assert any(s["name"] == "route" for s in symbols)


def test_requests_with_impossible_positions_get_an_answer(client, moe):
    uri, _ = open_doc(client, moe)
    for position in ({"line": -1, "character": 0}, {"line": 0, "character": -5},
                     {"line": 2**40, "character": 0}):
        client.next_id += 1
        rid = client.next_id
        client.send({"id": rid, "method": "textDocument/hover",
                     "params": {"textDocument": {"uri": uri}, "position": position}})
        answer = client.wait_answer(rid)
        assert answer["error"]["code"] == -32602, position
        assert "textDocument/hover" in answer["error"]["message"]
    # a position past the end of the document is valid: no hover there
    assert client.request("textDocument/hover", at(uri, 10**6, 10**6)) is None


def test_a_wrong_content_length_is_answered_and_the_next_message_read(client, moe):
    uri, _ = open_doc(client, moe)
    body = json.dumps({"jsonrpc": "2.0", "id": 900, "method": "textDocument/hover",
                       "params": at(uri, 0, 0)}).encode()
    client.send_raw(f"Content-Length: {len(body) - 10}\r\n\r\n".encode() + body)
    answer = client.wait_answer(900)
    assert answer["error"]["code"] == -32700 and "Content-Length" in answer["error"]["message"]
    assert client.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
    # too long: the message is answered once nothing more comes, and the server goes on
    body = json.dumps({"jsonrpc": "2.0", "id": 901, "method": "textDocument/documentSymbol",
                       "params": {"textDocument": {"uri": uri}}}).encode()
    client.send_raw(f"Content-Length: {len(body) + 40}\r\n\r\n".encode() + body)
    assert "result" in client.wait_answer(901)
    assert client.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
