"""A minimal Language Server Protocol client for tests: starts `stepc lsp` as a subprocess
and speaks JSON-RPC with Content-Length framing over its standard input and output, as an
editor does. Every wait has a time limit, so a hung server fails the test instead of
blocking it."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time


def frame(body: bytes) -> bytes:
    """`body` with the Content-Length header an editor puts before it."""
    return f"Content-Length: {len(body)}\r\n\r\n".encode("ascii") + body


class LspClient:
    def __init__(self, cwd: str, timeout: float = 60.0):
        self.timeout = timeout
        self.proc = subprocess.Popen([sys.executable, "-m", "stepc", "lsp"], cwd=cwd,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.messages: queue.Queue = queue.Queue()
        self.notifications: list[dict] = []
        self.next_id = 0
        self.stderr: list[str] = []  # what the server wrote there (read, so it never blocks)
        self.errors: list[dict] = []  # every error the server answered, as it came
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line.decode("utf-8", "replace"))

    def _read(self) -> None:
        out = self.proc.stdout
        while True:
            headers = {}
            while True:
                line = out.readline()
                if not line:
                    return
                line = line.decode("ascii").strip()
                if not line:
                    break
                key, _, value = line.partition(":")
                headers[key.lower()] = value.strip()
            message = json.loads(out.read(int(headers["content-length"])))
            if "error" in message:
                self.errors.append(message["error"])
            self.messages.put(message)

    def send(self, message: dict) -> None:
        self.proc.stdin.write(frame(json.dumps({"jsonrpc": "2.0", **message}).encode("utf-8")))
        self.proc.stdin.flush()

    def send_raw(self, data: bytes) -> None:
        """Bytes as they are, for framing an editor might get wrong."""
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def wait_answer(self, rid) -> dict:
        """The whole answer (result or error) to the request with id `rid`."""
        return self._wait(lambda m: m.get("id") == rid and "method" not in m,
                          f"an answer to request {rid}")

    def notify(self, method: str, params: dict) -> None:
        self.send({"method": method, "params": params})

    def request(self, method: str, params: dict):
        """Send a request and wait for its result (notifications meanwhile are kept)."""
        self.next_id += 1
        rid = self.next_id
        self.send({"id": rid, "method": method, "params": params})
        msg = self._wait(lambda m: m.get("id") == rid and "method" not in m,
                         f"the answer to {method}")
        if "error" in msg:
            raise AssertionError(f"{method} failed: {msg['error']}")
        return msg.get("result")

    def wait_notification(self, method: str, predicate=lambda params: True) -> dict:
        """The first notification `method` (already received or coming) whose params
        satisfy `predicate`."""
        for i, n in enumerate(self.notifications):
            if n["method"] == method and predicate(n["params"]):
                return self.notifications.pop(i)["params"]
        msg = self._wait(lambda m: m.get("method") == method and predicate(m["params"]),
                         f"a {method} notification")
        return msg["params"]

    def _wait(self, match, what: str) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"stepc lsp: no {what} within {self.timeout} s")
            try:
                msg = self.messages.get(timeout=left)
            except queue.Empty:
                continue
            if match(msg):
                return msg
            if "method" in msg and "id" in msg:  # a request from the server: answer it
                self.send({"id": msg["id"], "result": None})
            elif "method" in msg:
                self.notifications.append(msg)

    def close(self) -> None:
        try:
            self.request("shutdown", {})
            self.notify("exit", {})
            self.proc.wait(timeout=10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                f.close()
