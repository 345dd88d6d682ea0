"""Benchmark: `stepc lsp` on a generated 128-expert MoE layer, driven over stdio as an
editor drives it.

Measures the re-check after an edit (the server's own time, and from the edit to the
diagnostics, which includes the debounce pause), how long hover takes to answer while a
re-check runs (the editor must not wait for checks), and how many checks a burst of
keystrokes causes (stale checks are dropped). Prints medians over repeated edits.

    python benchmarks/bench_lsp.py [--experts 128] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from gen_moe import generate  # noqa: E402
from lsp_client import LspClient  # noqa: E402
from machine import machine_line  # noqa: E402

_CHECKED = re.compile(r"checked .* \(version (\d+)\) in ([\d.]+) s")


def checks_logged(client: LspClient) -> list[tuple[int, float]]:
    """(version, seconds) of each check the server has logged so far (taken from the
    client's notifications)."""
    out = []
    for n in [n for n in client.notifications if n["method"] == "window/logMessage"]:
        m = _CHECKED.search(n["params"]["message"])
        if m:
            out.append((int(m.group(1)), float(m.group(2))))
            client.notifications.remove(n)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"moe{args.experts}.step"
        text = generate(args.experts)
        path.write_text(text, encoding="utf-8")
        uri = path.as_uri()
        lines = text.split("\n")
        # an edit that keeps the program valid: a comment appended to the last line
        last = len(lines) - 1
        client = LspClient(d, timeout=120)
        try:
            client.request("initialize", {"processId": os.getpid(), "rootUri": Path(d).as_uri(),
                                          "capabilities": {}})
            client.notify("initialized", {})
            t0 = time.perf_counter()
            client.notify("textDocument/didOpen", {"textDocument": {
                "uri": uri, "languageId": "step", "version": 1, "text": text}})
            client.wait_notification("textDocument/publishDiagnostics",
                                     lambda p: p["uri"] == uri and p.get("version") == 1)
            first = time.perf_counter() - t0
            stream_line = next(i for i, ln in enumerate(lines) if re.match(r"\w+ = ", ln))
            hover_at = {"textDocument": {"uri": uri},
                        "position": {"line": stream_line, "character": 0}}

            edit_to_diags, hovers = [], []
            version = 1
            for k in range(args.repeat):
                version += 1
                change = {"range": {"start": {"line": last, "character": len(lines[last])},
                                    "end": {"line": last, "character": len(lines[last])}},
                          "text": " " if k % 2 == 0 else ""}
                if k % 2:  # take the space out again
                    change["range"]["start"]["character"] = len(lines[last])
                    change["range"]["end"]["character"] = len(lines[last]) + 1
                t0 = time.perf_counter()
                client.notify("textDocument/didChange", {
                    "textDocument": {"uri": uri, "version": version}, "contentChanges": [change]})
                client.wait_notification(
                    "window/logMessage", lambda p, v=version: f"checking {path} (version {v})"
                    in p["message"])
                # hover while the check runs: the editor's thread must answer at once
                while True:
                    h0 = time.perf_counter()
                    client.request("textDocument/hover", hover_at)
                    hovers.append(time.perf_counter() - h0)
                    if any(n["method"] == "textDocument/publishDiagnostics"
                           for n in client.notifications):
                        break
                    time.sleep(0.02)
                client.wait_notification("textDocument/publishDiagnostics",
                                         lambda p, v=version: p["uri"] == uri and
                                         p.get("version") == v)
                edit_to_diags.append(time.perf_counter() - t0)
            server_times = [s for _, s in checks_logged(client)]

            # a burst of keystrokes: one character each, sent as fast as an editor can
            burst = 20
            for k in range(burst):
                version += 1
                col = len(lines[last]) + k
                client.notify("textDocument/didChange", {
                    "textDocument": {"uri": uri, "version": version}, "contentChanges": [
                        {"range": {"start": {"line": last, "character": col},
                                   "end": {"line": last, "character": col}}, "text": " "}]})
            client.wait_notification("textDocument/publishDiagnostics",
                                     lambda p: p["uri"] == uri and p.get("version") == version)
            client.notifications.append({"method": "window/logMessage", "params":
                                         client.wait_notification("window/logMessage", lambda p:
                                         f"(version {version}) in" in p["message"])})
            burst_checks = checks_logged(client)
        finally:
            client.close()
    print(f"program: {args.experts} experts, {len(lines)} lines")
    print(f"first check (open -> diagnostics): {first:.3f} s")
    print(f"re-check after an edit (server):  median {statistics.median(server_times):.3f} s "
          f"(min {min(server_times):.3f}, max {max(server_times):.3f}, "
          f"n={len(server_times)})")
    print(f"edit -> diagnostics (with the debounce pause): median "
          f"{statistics.median(edit_to_diags):.3f} s")
    print(f"hover while a check runs: median {statistics.median(hovers) * 1000:.1f} ms, "
          f"max {max(hovers) * 1000:.1f} ms (n={len(hovers)})")
    print(f"a burst of {burst} keystrokes: {len(burst_checks)} check(s) run, "
          f"versions {[v for v, _ in burst_checks]}")
    print(machine_line())


if __name__ == "__main__":
    main()
